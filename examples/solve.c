/* tinyrec-solve: runs a trained TRM checkpoint on new puzzles.

     build/tinyrec-solve CHECKPOINT [INPUT|-] [options]
     build/tinyrec-solve runs/sudoku/best.safetensors puzzles.txt
     echo 4.....8.5.3..........7......2.....6.....8.4......1.......6.3.7.5..2.....1.4...... | build/tinyrec-solve runs/sudoku/best.safetensors
     build/tinyrec-solve runs/arc/best.safetensors task.json --identifiers data/arc/identifiers.json --jsonl
     build/tinyrec-solve runs/sudoku/best.safetensors puzzles.txt --device opencl

   Inputs (the task follows from the model: vocab 11 / 81 cells Sudoku, vocab 6 Maze, vocab 12 ARC):
     Sudoku  81-character lines ('.' or '0' blank; anything after a space, ',' or ':' is ignored) or
             the reference CSV (source,question,answer,rating).
     Maze    n x n blocks of "# SG" characters (n*n = the model's seq_len; blank lines between
             blocks are optional), single lines of n*n characters, or the reference CSV.
     ARC     a task JSON ({"train": [...], "test": [{"input": grid}, ...]}) or a file of tasks keyed
             by name; every test input is predicted. The task's puzzle id comes from --identifiers
             (the dataset's identifiers.json), else the blank id 0 is used with a warning.
   Malformed puzzles are reported on stderr with their line number and skipped.
   Exit status: 0 when at least one puzzle ran, 1 when none could be run or on a fatal error,
   2 for a bad command line.

   Uses only the public API of tinyrec.h. */
#define TINYREC_IMPLEMENTATION
#include "tinyrec.h"
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { TASK_AUTO, TASK_SUDOKU, TASK_MAZE, TASK_ARC };
static const char *TASK_NAMES[] = {"auto", "sudoku", "maze", "arc"};
static const char *TASK_TITLES[] = {"Sudoku, Maze or ARC", "Sudoku", "Maze", "ARC"};

typedef struct puzzle {
    int index; /* position among the input's records (malformed ones counted) */
    int line;
    int32_t *tokens;
    /* sudoku */
    uint8_t givens[81];
    char blank;
    /* maze */
    int shortest;
    /* arc */
    char name[256];
    int test_index, h, w, has_out, oh, ow, pid;
    uint8_t in[900], out[900];
} puzzle;

typedef struct puzzles {
    puzzle *p;
    size_t n, cap;
    int records, malformed;
} puzzles;

static int g_color = 0;

/* The library's warnings (e.g. a checkpoint field that differs) go to stderr; errors are
   reported by the caller from tr_ctx_last_error. */
static void on_log(void *user, tr_log_level level, const char *message) {
    (void)user;
    if (level == TR_LOG_WARN) fprintf(stderr, "tinyrec-solve: warning: %s\n", message);
}

/* ---- input ------------------------------------------------------------------------------ */

static char *read_all(FILE *f, size_t *len) {
    char *buf = NULL;
    size_t n = 0, cap = 0, r;
    for (;;) {
        if (cap - n < 65536) {
            char *nb = (char *)realloc(buf, cap * 2 + 65536 + 1);
            if (!nb) {
                free(buf);
                return NULL;
            }
            buf = nb, cap = cap * 2 + 65536;
        }
        r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

static puzzle *new_puzzle(puzzles *ps, int L) {
    puzzle *p;
    if (ps->n == ps->cap) {
        size_t nc = ps->cap ? ps->cap * 2 : 64;
        puzzle *np = (puzzle *)realloc(ps->p, nc * sizeof(puzzle));
        if (!np) return NULL;
        ps->p = np, ps->cap = nc;
    }
    p = &ps->p[ps->n];
    memset(p, 0, sizeof *p);
    p->tokens = (int32_t *)calloc((size_t)L, sizeof(int32_t));
    if (!p->tokens) return NULL;
    p->index = ps->records - 1;
    ps->n++;
    return p;
}

static void malformed(puzzles *ps, int line, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "tinyrec-solve: line %d: ", line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "; skipped\n");
    ps->malformed++;
}

/* Splits text into lines in place; returns the count. */
static size_t split_lines(char *text, size_t len, char ***out) {
    size_t n = 0, cap = 1024, i;
    char **lines = (char **)malloc(cap * sizeof(char *)), *s = text;
    if (!lines) return 0;
    for (i = 0; i <= len; i++) {
        if (i == len || text[i] == '\n') {
            size_t l;
            if (i == len && s == text + len) break;
            text[i] = 0;
            l = strlen(s);
            if (l && s[l - 1] == '\r') s[l - 1] = 0;
            if (n == cap) {
                char **nl = (char **)realloc(lines, cap * 2 * sizeof(char *));
                if (!nl) break;
                lines = nl, cap *= 2;
            }
            lines[n++] = s;
            s = text + i + 1;
        }
    }
    *out = lines;
    return n;
}

static int parse_sudoku(char *text, size_t len, puzzles *ps) {
    char **lines;
    size_t n = split_lines(text, len, &lines), i;
    for (i = 0; i < n; i++) {
        char *s = lines[i], *q = s, *c;
        size_t ql, k;
        int lineno = (int)i + 1, bad = -1, digits = 0;
        puzzle *p;
        uint8_t g[81];
        while (*s == ' ' || *s == '\t') s++;
        if (!*s || *s == '#') continue;
        if (!strncmp(s, "source,", 7) || !strncmp(s, "question", 8) || !strncmp(s, "puzzle,", 7) || !strncmp(s, "quizzes", 7)) continue; /* CSV headers */
        ps->records++;
        q = s;
        if ((c = strchr(s, ',')) != NULL) { /* CSV: source,question,answer,rating (or puzzle,solution) */
            char *f2 = c + 1, *e2 = strchr(f2, ',');
            size_t l1 = (size_t)(c - s), l2 = e2 ? (size_t)(e2 - f2) : strlen(f2);
            if (l1 != 81 && l2 == 81) q = f2, ql = l2;
            else q = s, ql = l1;
        } else
            for (ql = 0; q[ql] && q[ql] != ' ' && q[ql] != '\t' && q[ql] != ':' && q[ql] != ';' && q[ql] != '|'; ql++) {}
        for (k = 0; k < ql && k < 81; k++) {
            char ch = q[k];
            if (ch == '.' || ch == '0' || ch == '_' || ch == '-') g[k] = 0;
            else if (ch >= '1' && ch <= '9') g[k] = (uint8_t)(ch - '0'), digits++;
            else if (bad < 0) bad = (int)k;
        }
        if (bad >= 0) {
            malformed(ps, lineno, "bad character '%c' at cell %d (Sudoku cells are 1-9, '.' or '0')", q[bad], bad + 1);
            continue;
        }
        if (ql != 81) {
            malformed(ps, lineno, "a Sudoku needs 81 cells, this one has %zu", ql);
            continue;
        }
        {
            int r = tr_sudoku_solve(g, NULL, 1);
            if (r < 0) {
                malformed(ps, lineno, "the givens contradict each other (a digit repeats in a row, column or box)");
                continue;
            }
            if (r == 0) {
                malformed(ps, lineno, "the puzzle has no solution");
                continue;
            }
        }
        if (!(p = new_puzzle(ps, 81))) return -1;
        p->line = lineno;
        memcpy(p->givens, g, 81);
        p->blank = '.';
        for (k = 0; k < 81; k++)
            if (q[k] == '0') p->blank = '0';
        for (k = 0; k < 81; k++) p->tokens[k] = g[k] + 1;
        (void)digits;
    }
    free(lines);
    return 0;
}

static int add_maze(tr_ctx *ctx, puzzles *ps, const char *cells, int n, int lineno) {
    int k, ns = 0, ng = 0, len;
    char *sol;
    puzzle *p;
    for (k = 0; k < n * n; k++) {
        const char *at = strchr("# SG", cells[k]);
        if (!cells[k] || !at) {
            malformed(ps, lineno, "bad character '%c' at row %d, column %d (maze inputs hold '#', ' ', 'S' and 'G')", cells[k] ? cells[k] : '?', k / n + 1, k % n + 1);
            return 0;
        }
        ns += cells[k] == 'S', ng += cells[k] == 'G';
    }
    if (ns != 1 || ng != 1) {
        malformed(ps, lineno, "a maze needs exactly one 'S' and one 'G' (found %d and %d)", ns, ng);
        return 0;
    }
    sol = (char *)malloc((size_t)n * n);
    if (!sol) return -1;
    len = tr_maze_solve(ctx, cells, n, sol);
    free(sol);
    if (len < 0) {
        malformed(ps, lineno, "'G' cannot be reached from 'S'");
        return 0;
    }
    if (!(p = new_puzzle(ps, n * n))) return -1;
    p->line = lineno;
    p->shortest = len;
    for (k = 0; k < n * n; k++) p->tokens[k] = (int32_t)(strchr(TR_MAZE_CHARSET, cells[k]) - TR_MAZE_CHARSET) + 1;
    return 0;
}

static int parse_maze(tr_ctx *ctx, char *text, size_t len, int n, puzzles *ps) {
    char **lines, *block = (char *)malloc((size_t)n * n + 1);
    size_t nl = split_lines(text, len, &lines), i;
    int rows = 0, start = 0, skipping = 0, rc = 0;
    if (!block) return -1;
    for (i = 0; i <= nl && rc == 0; i++) {
        const char *s = i < nl ? lines[i] : "";
        size_t l = strlen(s);
        int lineno = (int)i + 1;
        if (l == 0) { /* a blank line ends a block */
            if (rows > 0 && !skipping) {
                ps->records++;
                malformed(ps, start, "incomplete maze: %d rows of %d", rows, n);
            }
            rows = 0, skipping = 0;
            continue;
        }
        if (skipping) continue;
        if (!strncmp(s, "source,", 7)) continue; /* CSV header */
        if (rows == 0 && strchr(s, ',')) { /* CSV: source,question,answer,rating */
            const char *q = strchr(s, ',') + 1, *e = strchr(q, ',');
            size_t ql = e ? (size_t)(e - q) : strlen(q);
            ps->records++;
            if (ql != (size_t)n * n) {
                malformed(ps, lineno, "a %dx%d maze needs %d characters, this one has %zu", n, n, n * n, ql);
                continue;
            }
            memcpy(block, q, ql);
            rc = add_maze(ctx, ps, block, n, lineno);
            continue;
        }
        if (rows == 0 && l == (size_t)n * n && n > 1) { /* the whole maze on one line */
            ps->records++;
            rc = add_maze(ctx, ps, s, n, lineno);
            continue;
        }
        if (l != (size_t)n) {
            ps->records++;
            malformed(ps, lineno, "maze rows need %d characters, this one has %zu", n, l);
            rows = 0, skipping = 1;
            continue;
        }
        if (rows == 0) start = lineno;
        memcpy(block + (size_t)rows * n, s, (size_t)n);
        if (++rows == n) {
            ps->records++;
            rc = add_maze(ctx, ps, block, n, start);
            rows = 0;
        }
    }
    free(block);
    free(lines);
    return rc;
}

/* ---- a small JSON reader (for ARC tasks and identifiers.json) ----------------------------- */

typedef struct jv {
    int type; /* 0 null, 1 bool, 2 number, 3 string, 4 array, 5 object */
    int line;
    double num;
    char *str;
    int n;
    struct jv *items;
    char **keys;
} jv;

typedef struct jparser {
    const char *s, *end;
    int line;
    char err[160];
} jparser;

static void jskip(jparser *p) {
    while (p->s < p->end && (*p->s == ' ' || *p->s == '\t' || *p->s == '\n' || *p->s == '\r')) {
        if (*p->s == '\n') p->line++;
        p->s++;
    }
}

static void jfree(jv *v) {
    int i;
    if (!v) return;
    if (v->type == 4 || v->type == 5)
        for (i = 0; i < v->n; i++) {
            jfree(&v->items[i]);
            if (v->keys) free(v->keys[i]);
        }
    free(v->items), free(v->keys), free(v->str);
    memset(v, 0, sizeof *v);
}

static char *jstring(jparser *p) {
    size_t cap = 32, n = 0;
    char *out = (char *)malloc(cap);
    if (!out) return NULL;
    p->s++; /* opening quote */
    while (p->s < p->end && *p->s != '"') {
        unsigned c = (unsigned char)*p->s++;
        if (n + 8 >= cap) {
            char *no = (char *)realloc(out, cap * 2);
            if (!no) {
                free(out);
                return NULL;
            }
            out = no, cap *= 2;
        }
        if (c == '\\') {
            if (p->s >= p->end) break;
            c = (unsigned char)*p->s++;
            switch (c) {
            case 'n': out[n++] = '\n'; break;
            case 't': out[n++] = '\t'; break;
            case 'r': out[n++] = '\r'; break;
            case 'b': out[n++] = '\b'; break;
            case 'f': out[n++] = '\f'; break;
            case 'u': {
                unsigned u = 0;
                int k;
                for (k = 0; k < 4 && p->s < p->end; k++, p->s++) {
                    char h = *p->s;
                    u = u * 16 + (unsigned)(h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : 0);
                }
                if (u < 0x80) out[n++] = (char)u;
                else if (u < 0x800) out[n++] = (char)(0xc0 | u >> 6), out[n++] = (char)(0x80 | (u & 63));
                else out[n++] = (char)(0xe0 | u >> 12), out[n++] = (char)(0x80 | (u >> 6 & 63)), out[n++] = (char)(0x80 | (u & 63));
                break;
            }
            default: out[n++] = (char)c;
            }
        } else {
            if (c == '\n') p->line++;
            out[n++] = (char)c;
        }
    }
    if (p->s >= p->end) {
        free(out);
        snprintf(p->err, sizeof p->err, "line %d: unterminated string", p->line);
        return NULL;
    }
    p->s++;
    out[n] = 0;
    return out;
}

static int jparse(jparser *p, jv *v, int depth) {
    memset(v, 0, sizeof *v);
    jskip(p);
    v->line = p->line;
    if (depth > 64) {
        snprintf(p->err, sizeof p->err, "line %d: nested too deeply", p->line);
        return -1;
    }
    if (p->s >= p->end) {
        snprintf(p->err, sizeof p->err, "line %d: unexpected end of input", p->line);
        return -1;
    }
    if (*p->s == '{' || *p->s == '[') {
        int obj = *p->s == '{', cap = 0;
        char close = obj ? '}' : ']';
        v->type = obj ? 5 : 4;
        p->s++;
        jskip(p);
        if (p->s < p->end && *p->s == close) {
            p->s++;
            return 0;
        }
        for (;;) {
            char *key = NULL;
            if (v->n == cap) {
                jv *ni;
                cap = cap ? cap * 2 : 8;
                ni = (jv *)realloc(v->items, (size_t)cap * sizeof(jv));
                if (!ni) return -1;
                v->items = ni;
                if (obj) {
                    char **nk = (char **)realloc(v->keys, (size_t)cap * sizeof(char *));
                    if (!nk) return -1;
                    v->keys = nk;
                }
            }
            if (obj) {
                jskip(p);
                if (p->s >= p->end || *p->s != '"') {
                    snprintf(p->err, sizeof p->err, "line %d: expected a key", p->line);
                    return -1;
                }
                if (!(key = jstring(p))) return -1;
                jskip(p);
                if (p->s >= p->end || *p->s != ':') {
                    free(key);
                    snprintf(p->err, sizeof p->err, "line %d: expected ':'", p->line);
                    return -1;
                }
                p->s++;
                v->keys[v->n] = key;
            }
            if (jparse(p, &v->items[v->n], depth + 1) != 0) {
                v->n++;
                return -1;
            }
            v->n++;
            jskip(p);
            if (p->s < p->end && *p->s == ',') {
                p->s++;
                continue;
            }
            if (p->s < p->end && *p->s == close) {
                p->s++;
                return 0;
            }
            snprintf(p->err, sizeof p->err, "line %d: expected ',' or '%c'", p->line, close);
            return -1;
        }
    }
    if (*p->s == '"') {
        v->type = 3;
        return (v->str = jstring(p)) ? 0 : -1;
    }
    if (p->end - p->s >= 4 && !strncmp(p->s, "null", 4)) return p->s += 4, 0;
    if (p->end - p->s >= 4 && !strncmp(p->s, "true", 4)) return v->type = 1, v->num = 1, p->s += 4, 0;
    if (p->end - p->s >= 5 && !strncmp(p->s, "false", 5)) return v->type = 1, p->s += 5, 0;
    if (*p->s == '-' || (*p->s >= '0' && *p->s <= '9')) {
        char *e;
        v->type = 2;
        v->num = strtod(p->s, &e);
        if (e == p->s) goto bad;
        p->s = e;
        return 0;
    }
bad:
    snprintf(p->err, sizeof p->err, "line %d: unexpected character '%c'", p->line, *p->s);
    return -1;
}

static int jparse_text(const char *text, size_t len, jv *root, char *err, size_t cap) {
    jparser p;
    p.s = text, p.end = text + len, p.line = 1, p.err[0] = 0;
    if (jparse(&p, root, 0) != 0) {
        snprintf(err, cap, "%s", p.err[0] ? p.err : "out of memory");
        jfree(root);
        return -1;
    }
    jskip(&p);
    if (p.s != p.end) {
        snprintf(err, cap, "line %d: trailing characters after the JSON value", p.line);
        jfree(root);
        return -1;
    }
    return 0;
}

static const jv *jget(const jv *o, const char *key) {
    int i;
    if (!o || o->type != 5) return NULL;
    for (i = 0; i < o->n; i++)
        if (!strcmp(o->keys[i], key)) return &o->items[i];
    return NULL;
}

/* A grid: a non-empty rectangular list of lists of 0..9, at most 30 x 30. */
static int read_grid(const jv *g, uint8_t *out, int *h, int *w, char *err, size_t cap) {
    int r, c;
    if (!g || g->type != 4 || g->n < 1 || g->n > TR_ARC_MAX_GRID) {
        snprintf(err, cap, "a grid must be a list of 1 to 30 rows");
        return -1;
    }
    for (r = 0; r < g->n; r++) {
        const jv *row = &g->items[r];
        if (row->type != 4 || row->n < 1 || row->n > TR_ARC_MAX_GRID || row->n != g->items[0].n) {
            snprintf(err, cap, "row %d: rows must be lists of 1 to 30 cells, all of one length", r);
            return -1;
        }
        for (c = 0; c < row->n; c++) {
            const jv *x = &row->items[c];
            if (x->type != 2 || x->num < 0 || x->num > 9 || x->num != floor(x->num)) {
                snprintf(err, cap, "row %d, column %d: cells must be integers 0..9", r, c);
                return -1;
            }
            out[r * row->n + c] = (uint8_t)x->num;
        }
    }
    *h = g->n, *w = g->items[0].n;
    return 0;
}

typedef struct idmap {
    char **names;
    int n;
} idmap;

static int lookup_id(const idmap *ids, const char *name) {
    int i;
    for (i = 0; ids && i < ids->n; i++)
        if (ids->names[i] && !strcmp(ids->names[i], name)) return i;
    return -1;
}

static int add_arc_task(puzzles *ps, const jv *task, const char *name, const idmap *ids, int num_ids, int *warned) {
    const jv *tests = jget(task, "test");
    int i, pid = 0, found;
    char err[160];
    if (!tests || tests->type != 4) {
        ps->records++;
        malformed(ps, task ? task->line : 0, "task '%s' has no \"test\" list", name);
        return 0;
    }
    found = name[0] ? lookup_id(ids, name) : -1;
    if (found >= 0 && found < num_ids) pid = found;
    else if (found >= num_ids) {
        fprintf(stderr, "tinyrec-solve: warning: task '%s' has puzzle id %d, beyond the model's %d ids; using the blank id 0\n", name, found, num_ids);
    } else if (!*warned || ids) {
        if (!ids) fprintf(stderr, "tinyrec-solve: warning: no --identifiers given; task '%s' uses the blank puzzle id 0 (predictions may be poor)\n", name[0] ? name : "<stdin>");
        else fprintf(stderr, "tinyrec-solve: warning: task '%s' is not in the identifiers file; using the blank puzzle id 0\n", name[0] ? name : "<stdin>");
        *warned = 1;
    }
    for (i = 0; i < tests->n; i++) {
        const jv *t = &tests->items[i];
        puzzle *p;
        uint8_t grid[900];
        int h, w;
        ps->records++;
        if (read_grid(jget(t, "input"), grid, &h, &w, err, sizeof err) != 0) {
            malformed(ps, t->line, "task '%s' test %d input: %s", name[0] ? name : "<stdin>", i, err);
            continue;
        }
        if (!(p = new_puzzle(ps, 900))) return -1;
        p->line = t->line;
        snprintf(p->name, sizeof p->name, "%s", name);
        p->test_index = i, p->h = h, p->w = w, p->pid = pid;
        memcpy(p->in, grid, (size_t)h * w);
        if (jget(t, "output") && read_grid(jget(t, "output"), p->out, &p->oh, &p->ow, err, sizeof err) == 0) p->has_out = 1;
        {
            uint8_t canvas[900];
            int k;
            tr_arc_encode(grid, h, w, 0, 0, canvas);
            for (k = 0; k < 900; k++) p->tokens[k] = canvas[k];
        }
    }
    return 0;
}

static int parse_arc(const char *text, size_t len, const char *path, const idmap *ids, int num_ids, puzzles *ps) {
    jv root;
    char err[200], name[256];
    int i, warned = 0, rc = 0;
    if (jparse_text(text, len, &root, err, sizeof err) != 0) {
        fprintf(stderr, "tinyrec-solve: %s: not valid JSON: %s\n", path, err);
        return -2;
    }
    if (root.type != 5) {
        fprintf(stderr, "tinyrec-solve: %s: an ARC task is a JSON object\n", path);
        jfree(&root);
        return -2;
    }
    if (jget(&root, "test") || jget(&root, "train")) { /* one task: its name is the file's */
        const char *b = strrchr(path, '/');
        size_t l;
        b = b ? b + 1 : path;
        if (!strcmp(path, "-")) b = "";
        snprintf(name, sizeof name, "%s", b);
        l = strlen(name);
        if (l > 5 && !strcmp(name + l - 5, ".json")) name[l - 5] = 0;
        rc = add_arc_task(ps, &root, name, ids, num_ids, &warned);
    } else
        for (i = 0; i < root.n && rc == 0; i++) {
            if (root.items[i].type != 5) {
                ps->records++;
                malformed(ps, root.items[i].line, "'%s' is not a task object", root.keys[i]);
                continue;
            }
            rc = add_arc_task(ps, &root.items[i], root.keys[i], ids, num_ids, &warned);
        }
    jfree(&root);
    return rc;
}

static int load_identifiers(const char *path, idmap *ids) {
    FILE *f = fopen(path, "rb");
    size_t len;
    char *text, err[200];
    jv root;
    int i;
    if (!f) {
        fprintf(stderr, "tinyrec-solve: cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    text = read_all(f, &len);
    fclose(f);
    if (!text) return -1;
    if (jparse_text(text, len, &root, err, sizeof err) != 0 || root.type != 4) {
        fprintf(stderr, "tinyrec-solve: %s: expected a JSON list of names%s%s\n", path, root.type == 4 ? "" : ": ", root.type == 4 ? "" : err);
        free(text);
        return -1;
    }
    free(text);
    ids->n = root.n;
    ids->names = (char **)calloc((size_t)root.n + 1, sizeof(char *));
    for (i = 0; ids->names && i < root.n; i++)
        if (root.items[i].type == 3) ids->names[i] = root.items[i].str, root.items[i].str = NULL;
    jfree(&root);
    return ids->names ? 0 : -1;
}

/* ---- checking and printing answers -------------------------------------------------------- */

static char token_char(int task, int t, char blank) {
    if (task == TASK_SUDOKU) return t >= 2 && t <= 10 ? (char)('0' + t - 1) : t == 1 ? blank : '?';
    if (task == TASK_MAZE) return t >= 1 && t <= 5 ? TR_MAZE_CHARSET[t - 1] : '?';
    return t >= 2 && t <= 11 ? (char)('0' + t - 2) : t == 1 ? '|' : '.';
}

/* 1 when the 'o' cells of the answer lie on open cells of the maze and connect S to G. */
static int maze_valid(const int32_t *in, const char *ans, int n, int *path_len) {
    int *q = (int *)malloc(sizeof(int) * (size_t)n * n * 2), *dist = q + (size_t)n * n, head = 0, tail = 0, k, s = -1, g = -1, cells = 0;
    if (!q) return 0;
    for (k = 0; k < n * n; k++) {
        dist[k] = -1;
        if (in[k] == 3) s = k;
        if (in[k] == 4) g = k;
        if (ans[k] == 'o') {
            if (in[k] != 2) { /* a path cell must be an open cell */
                free(q);
                return 0;
            }
            cells++;
        }
    }
    if (s < 0 || g < 0) {
        free(q);
        return 0;
    }
    dist[s] = 0, q[tail++] = s;
    while (head < tail) {
        int c = q[head++], r = c / n, col = c % n, d;
        static const int dr[4] = {-1, 1, 0, 0}, dc[4] = {0, 0, -1, 1};
        for (d = 0; d < 4; d++) {
            int rr = r + dr[d], cc = col + dc[d], nb;
            if (rr < 0 || rr >= n || cc < 0 || cc >= n) continue;
            nb = rr * n + cc;
            if (dist[nb] >= 0 || (ans[nb] != 'o' && nb != g)) continue;
            dist[nb] = dist[c] + 1;
            q[tail++] = nb;
        }
    }
    *path_len = dist[g];
    (void)cells;
    free(q);
    return *path_len >= 0;
}

static void print_sudoku(const puzzle *p, const int32_t *pred) {
    int r, c, side;
    uint8_t ans[81];
    for (c = 0; c < 81; c++) ans[c] = (uint8_t)(pred[c] >= 2 && pred[c] <= 10 ? pred[c] - 1 : 0);
    printf("   puzzle                    answer\n");
    for (r = 0; r < 9; r++) {
        if (r && r % 3 == 0) printf("   ------+-------+------     ------+-------+------\n");
        for (side = 0; side < 2; side++) {
            printf(side ? "    " : "  ");
            for (c = 0; c < 9; c++) {
                int k = r * 9 + c, d = side ? ans[k] : p->givens[k];
                if (c && c % 3 == 0) printf(" |");
                if (!d) {
                    printf(" %c", side ? '?' : p->blank);
                    continue;
                }
                if (g_color && side) {
                    int clash = p->givens[k] && p->givens[k] != d, j;
                    for (j = 0; j < 9 && !clash; j++) {
                        int rk = r * 9 + j, ck = j * 9 + c, bk = (r / 3 * 3 + j / 3) * 9 + c / 3 * 3 + j % 3;
                        clash = (rk != k && ans[rk] == d) || (ck != k && ans[ck] == d) || (bk != k && ans[bk] == d);
                    }
                    if (p->givens[k]) printf(" \033[1m%d\033[0m", d);
                    else printf(clash ? " \033[31m%d\033[0m" : " \033[32m%d\033[0m", d);
                } else if (g_color)
                    printf(" \033[1m%d\033[0m", d);
                else
                    printf(" %d", d);
            }
        }
        printf("\n");
    }
}

static void put_maze_cell(char ch) {
    if (!g_color) putchar(ch);
    else if (ch == '#') printf("\033[90m#\033[0m");
    else if (ch == 'o') printf("\033[1;33mo\033[0m");
    else if (ch == 'S' || ch == 'G') printf("\033[1;32m%c\033[0m", ch);
    else putchar(ch);
}

/* The maze and the model's answer side by side. */
static void print_maze(const int32_t *in, const char *ans, int n) {
    int r, c;
    printf("  %-*s   answer\n", n, "maze");
    for (r = 0; r < n; r++) {
        printf("  ");
        for (c = 0; c < n; c++) put_maze_cell(token_char(TASK_MAZE, in[r * n + c], ' '));
        printf("   ");
        for (c = 0; c < n; c++) put_maze_cell(ans[r * n + c]);
        putchar('\n');
    }
}

static void print_arc_row(const uint8_t *g, int w, int r, int h) {
    static const int pal[10] = {16, 27, 196, 40, 226, 244, 201, 208, 51, 88};
    int c;
    for (c = 0; c < w; c++) {
        if (r >= h) printf(g_color ? "  " : " ");
        else if (g_color) printf("\033[48;5;%dm  \033[0m", pal[g[r * w + c]]);
        else printf("%d", g[r * w + c]);
    }
}

static void print_arc(const puzzle *p, const uint8_t *grid, int h, int w) {
    int r, rows = p->h > h ? p->h : h;
    printf("  test input %dx%d%*s prediction %dx%d\n", p->h, p->w, (g_color ? 2 * p->w : p->w) - 9 > 0 ? (g_color ? 2 * p->w : p->w) - 9 : 1, "", h, w);
    for (r = 0; r < rows; r++) {
        printf("  ");
        print_arc_row(p->in, p->w, r, p->h);
        printf("   ");
        if (h > 0) print_arc_row(grid, w, r, h);
        putchar('\n');
    }
}

static void json_str(FILE *f, const char *s, size_t n) {
    size_t i;
    fputc('"', f);
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

/* ---- inference ---------------------------------------------------------------------------- */

typedef struct step_rec {
    int task, L, maxs, rows;
    char *preds;  /* [rows][maxs][L] */
    float *q;     /* [rows][maxs] */
    const puzzle *const *pz;
} step_rec;

static void on_step(void *user, int step, const tr_step_outputs *out) {
    step_rec *s = (step_rec *)user;
    int b, t;
    if (step > s->maxs) return;
    for (b = 0; b < s->rows; b++) {
        char *dst;
        if (out->steps[b] != step) continue; /* halted earlier: keeps its answer */
        s->q[(size_t)b * s->maxs + step - 1] = out->q_halt[b];
        dst = s->preds + ((size_t)b * s->maxs + step - 1) * s->L;
        for (t = 0; t < s->L; t++) dst[t] = token_char(s->task, out->preds[(size_t)b * s->L + t], s->pz[b]->blank);
    }
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: tinyrec-solve CHECKPOINT [INPUT|-] [options]\n\n"
            "Runs a trained checkpoint (a .safetensors written by tinyrec-train) on puzzles read from INPUT or\n"
            "stdin, with ACT: each puzzle stops when q_halt > 0, or after halt_max_steps supervision steps.\n\n"
            "inputs (the task follows from the model, or --task):\n"
            "  sudoku   81-character lines ('.' or '0' blank) or the reference CSV (source,question,answer,rating)\n"
            "  maze     n x n blocks of '# SG' characters (n*n = the model's seq_len), or n*n-character lines / CSV\n"
            "  arc      a task JSON ({\"train\": [...], \"test\": [{\"input\": grid}, ...]}) or a file of tasks by name\n\n"
            "options:\n"
            "  --steps N            run exactly N supervision steps (ignore q_halt)\n"
            "  --jsonl              write one JSON object per puzzle to stdout instead of the grids: index, line,\n"
            "                       steps, q_halt (per step), predictions (per step, in the puzzle's characters),\n"
            "                       answer, valid (and for ARC: name, test_index, puzzle_id, grid, correct;\n"
            "                       for Maze: path_length, shortest). index is the 0-based position in the\n"
            "                       input, malformed puzzles included. ARC cells are written 0-9, with '|'\n"
            "                       for the end-of-grid marker and '.' for padding\n"
            "  --identifiers FILE   the ARC dataset's identifiers.json, to find each task's puzzle id\n"
            "  --task T             sudoku | maze | arc (default: from the model)\n"
            "  --batch B            puzzles per forward pass (default 1: the lowest latency)\n"
            "  --threads N          CPU threads (default: TINYREC_NUM_THREADS or all)\n"
            "  --device D           auto | cpu | opencl | opencl:N | opencl:<name> (default: TINYREC_DEVICE, else\n"
            "                       auto: an OpenCL GPU when there is one, else the CPU; tinyrec-devices lists them)\n"
            "  --brief              one line per puzzle, no grids\n"
            "  --color WHEN         auto | always | never (default auto: on a terminal, unless NO_COLOR is set)\n"
            "  --help\n\n"
            "Malformed puzzles (wrong length, bad characters, contradictory or unsolvable grids) are reported on\n"
            "stderr with their line number and skipped. Exit status: 0 when at least one puzzle ran, 1 when none\n"
            "could (or on a fatal error), 2 for a bad command line.\n");
}

static int bad_usage(const char *fmt, const char *arg) {
    fprintf(stderr, "tinyrec-solve: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(tinyrec-solve --help for the usage)\n");
    return 2;
}

static int parse_int(const char *s, int lo, int hi, int *out) {
    char *e;
    long v;
    errno = 0;
    v = strtol(s, &e, 10);
    if (!*s || *e || errno || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

int main(int argc, char **argv) {
    const char *ckpt = NULL, *input = NULL, *ids_path = NULL, *color = "auto", *device = NULL;
    int force_steps = 0, jsonl = 0, brief = 0, task = TASK_AUTO, B = 1, threads = 0, i, L, V, n_side = 0, rc = 0;
    tr_ctx_config cc = tr_ctx_config_default();
    tr_ctx *ctx = NULL;
    tr_model *model = NULL;
    tr_carry *carry = NULL;
    const tr_model_config *mc;
    puzzles ps;
    idmap ids;
    char *text = NULL;
    size_t len = 0, done;
    double t_all = 0, steps_sum = 0;
    long valid_count = 0, ran = 0;
    memset(&ps, 0, sizeof ps);
    memset(&ids, 0, sizeof ids);
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--jsonl")) jsonl = 1;
        else if (!strcmp(a, "--brief")) brief = 1;
        else if (!strcmp(a, "--no-color")) color = "never";
        else if (!strcmp(a, "--steps") || !strcmp(a, "--batch") || !strcmp(a, "--threads") || !strcmp(a, "--identifiers") || !strcmp(a, "--task") ||
                 !strcmp(a, "--color") || !strcmp(a, "--device")) {
            if (!v) return bad_usage("%s needs a value", a);
            i++;
            if (!strcmp(a, "--steps") && parse_int(v, 1, 10000, &force_steps)) return bad_usage("--steps needs an integer from 1 to 10000, not '%s'", v);
            if (!strcmp(a, "--batch") && parse_int(v, 1, 65536, &B)) return bad_usage("--batch needs an integer from 1 to 65536, not '%s'", v);
            if (!strcmp(a, "--threads") && parse_int(v, 0, 4096, &threads)) return bad_usage("--threads needs an integer >= 0, not '%s'", v);
            if (!strcmp(a, "--identifiers")) ids_path = v;
            if (!strcmp(a, "--device")) device = v;
            if (!strcmp(a, "--color")) {
                if (strcmp(v, "auto") && strcmp(v, "always") && strcmp(v, "never")) return bad_usage("--color takes auto, always or never, not '%s'", v);
                color = v;
            }
            if (!strcmp(a, "--task")) {
                if (!strcmp(v, "sudoku")) task = TASK_SUDOKU;
                else if (!strcmp(v, "maze")) task = TASK_MAZE;
                else if (!strcmp(v, "arc")) task = TASK_ARC;
                else return bad_usage("--task takes sudoku, maze or arc, not '%s'", v);
            }
        } else if (a[0] == '-' && a[1]) return bad_usage("unknown option '%s'", a);
        else if (!ckpt) ckpt = a;
        else if (!input) input = a;
        else return bad_usage("unexpected argument '%s' (one checkpoint and one input)", a);
    }
    if (!ckpt) return bad_usage("%s", "name a checkpoint (a .safetensors from tinyrec-train)");
    if (!strcmp(color, "always")) g_color = 1;
    else if (!strcmp(color, "auto")) {
        const char *term = getenv("TERM");
        g_color = isatty(fileno(stdout)) && !getenv("NO_COLOR") && !(term && !strcmp(term, "dumb"));
    }
    if (jsonl) g_color = 0;

    cc.num_threads = threads;
    cc.log = on_log;
    cc.device = "cpu"; /* replaced below, where a bad selector gets the library's message */
    if (tr_ctx_create(&cc, &ctx) != TR_OK) {
        fprintf(stderr, "tinyrec-solve: cannot create a context\n");
        return 1;
    }
    if (tr_ctx_set_device(ctx, device ? device : getenv("TINYREC_DEVICE")) != TR_OK) {
        fprintf(stderr, "tinyrec-solve: %s%s\n(tinyrec-solve --help for the usage)\n", tr_ctx_last_error(ctx), device ? "" : " (from TINYREC_DEVICE)");
        tr_ctx_destroy(ctx);
        return 2;
    }
    if (tr_model_load(ctx, ckpt, NULL, &model) != TR_OK) {
        fprintf(stderr, "tinyrec-solve: cannot load %s: %s\n", ckpt, tr_ctx_last_error(ctx));
        rc = 1;
        goto out;
    }
    mc = tr_model_get_config(model);
    L = mc->seq_len, V = mc->vocab_size;
    /* the device opened with the model; beside the results, so that --jsonl stays clean */
    fprintf(jsonl ? stderr : stdout, "device %s\n", tr_ctx_device_name(ctx));
    if (task == TASK_AUTO) task = V == 11 && L == 81 ? TASK_SUDOKU : V == 6 ? TASK_MAZE : V == 12 && L == 900 ? TASK_ARC : TASK_AUTO;
    if (task == TASK_AUTO || (task == TASK_SUDOKU && !(V == 11 && L == 81)) || (task == TASK_ARC && !(V == 12 && L == 900)) || (task == TASK_MAZE && V != 6)) {
        fprintf(stderr, "tinyrec-solve: %s: a model with vocab_size %d and seq_len %d is not a model for %s (Sudoku: 11 / 81, Maze: 6 / n*n, ARC: 12 / 900)\n", ckpt, V,
                L, TASK_TITLES[task]);
        rc = 1;
        goto out;
    }
    if (task == TASK_MAZE) {
        for (n_side = 1; n_side * n_side < L; n_side++) {}
        if (n_side * n_side != L) {
            fprintf(stderr, "tinyrec-solve: %s: maze models need a square seq_len, not %d\n", ckpt, L);
            rc = 1;
            goto out;
        }
    }
    if (ids_path && load_identifiers(ids_path, &ids) != 0) {
        rc = 1;
        goto out;
    }
    if (!input || !strcmp(input, "-")) {
        input = "-";
        if (isatty(fileno(stdin))) fprintf(stderr, "tinyrec-solve: reading puzzles from stdin (end with Ctrl-D)\n");
        text = read_all(stdin, &len);
    } else {
        FILE *f = fopen(input, "rb");
        if (!f) {
            fprintf(stderr, "tinyrec-solve: cannot open %s: %s\n", input, strerror(errno));
            rc = 1;
            goto out;
        }
        text = read_all(f, &len);
        fclose(f);
    }
    if (!text) {
        fprintf(stderr, "tinyrec-solve: out of memory reading %s\n", input);
        rc = 1;
        goto out;
    }
    {
        int pr = task == TASK_SUDOKU ? parse_sudoku(text, len, &ps)
                 : task == TASK_MAZE ? parse_maze(ctx, text, len, n_side, &ps)
                                     : parse_arc(text, len, input, ids_path ? &ids : NULL, mc->num_puzzle_identifiers, &ps);
        if (pr != 0) {
            if (pr == -1) fprintf(stderr, "tinyrec-solve: out of memory\n");
            rc = 1;
            goto out;
        }
    }
    if (ps.n == 0) {
        fprintf(stderr, "tinyrec-solve: no %s puzzle to solve in %s (%d malformed)\n", TASK_NAMES[task], !strcmp(input, "-") ? "stdin" : input, ps.malformed);
        rc = 1;
        goto out;
    }
    if ((size_t)B > ps.n) B = (int)ps.n;
    if (tr_carry_create(model, B, &carry) != TR_OK) {
        fprintf(stderr, "tinyrec-solve: %s\n", tr_ctx_last_error(ctx));
        rc = 1;
        goto out;
    }
    {
        int maxs = force_steps > 0 ? force_steps : mc->halt_max_steps;
        int32_t *in = (int32_t *)malloc(sizeof(int32_t) * ((size_t)B * L * 2 + (size_t)B * 3));
        int32_t *pid = in + (size_t)B * L, *preds = pid + B, *steps = preds + (size_t)B * L, *halted = steps + B;
        float *qh = (float *)malloc(sizeof(float) * (size_t)B * (2 + maxs));
        char *hist = (char *)malloc((size_t)B * maxs * L + 1);
        const puzzle **rowp = (const puzzle **)malloc(sizeof(puzzle *) * (size_t)B);
        step_rec sr;
        if (!in || !qh || !hist || !rowp) {
            fprintf(stderr, "tinyrec-solve: out of memory\n");
            free(in), free(qh), free(hist), free(rowp);
            rc = 1;
            goto out;
        }
        sr.task = task, sr.L = L, sr.maxs = maxs, sr.rows = B, sr.preds = hist, sr.q = qh + 2 * B, sr.pz = rowp;
        for (done = 0; done < ps.n; done += (size_t)B) {
            int nb = (int)(ps.n - done < (size_t)B ? ps.n - done : (size_t)B), b;
            tr_batch batch;
            tr_step_outputs out;
            double t0, dt;
            for (b = 0; b < B; b++) {
                const puzzle *p = &ps.p[done + (size_t)(b < nb ? b : 0)]; /* a short last batch repeats its first puzzle */
                rowp[b] = p;
                memcpy(in + (size_t)b * L, p->tokens, sizeof(int32_t) * (size_t)L);
                pid[b] = p->pid;
            }
            memset(&out, 0, sizeof out);
            out.preds = preds, out.q_halt = qh, out.q_continue = qh + B, out.steps = steps, out.halted = halted;
            batch.inputs = in, batch.labels = NULL, batch.puzzle_identifiers = pid, batch.batch_size = B;
            t0 = tr_time_seconds();
            if (tr_model_infer(model, carry, &batch, force_steps, on_step, &sr, &out) != TR_OK) {
                fprintf(stderr, "tinyrec-solve: inference failed: %s\n", tr_ctx_last_error(ctx));
                rc = 1;
                break;
            }
            dt = tr_time_seconds() - t0;
            t_all += dt;
            for (b = 0; b < nb; b++) {
                const puzzle *p = rowp[b];
                int s = steps[b], valid = 0, k, path = -1, ah = 0, aw = 0, correct = -1;
                const char *ans = hist + ((size_t)b * maxs + s - 1) * L;
                uint8_t grid[900];
                if (task == TASK_SUDOKU) {
                    for (k = 0; k < 81; k++) grid[k] = (uint8_t)(ans[k] >= '1' && ans[k] <= '9' ? ans[k] - '0' : 0);
                    valid = tr_sudoku_check(p->givens, grid);
                } else if (task == TASK_MAZE)
                    valid = maze_valid(p->tokens, ans, n_side, &path);
                else {
                    tr_arc_crop(preds + (size_t)b * L, grid, &ah, &aw);
                    valid = ah > 0 && aw > 0;
                    if (p->has_out) correct = valid && ah == p->oh && aw == p->ow && !memcmp(grid, p->out, (size_t)ah * aw);
                }
                ran++;
                valid_count += valid;
                steps_sum += s;
                if (jsonl) {
                    fprintf(stdout, "{\"index\":%d,\"line\":%d,\"task\":\"%s\",\"steps\":%d,\"q_halt\":[", p->index, p->line, TASK_NAMES[task], s);
                    for (k = 0; k < s; k++) {
                        float q = sr.q[(size_t)b * maxs + k];
                        if (isfinite(q)) fprintf(stdout, "%s%.6g", k ? "," : "", q);
                        else fprintf(stdout, "%snull", k ? "," : "");
                    }
                    fprintf(stdout, "],\"predictions\":[");
                    for (k = 0; k < s; k++) {
                        if (k) fputc(',', stdout);
                        json_str(stdout, hist + ((size_t)b * maxs + k) * L, (size_t)L);
                    }
                    fprintf(stdout, "],\"answer\":");
                    json_str(stdout, ans, (size_t)L);
                    fprintf(stdout, ",\"valid\":%s", valid ? "true" : "false");
                    if (task == TASK_MAZE) fprintf(stdout, ",\"path_length\":%d,\"shortest\":%d", path, p->shortest);
                    if (task == TASK_ARC) {
                        int r, c;
                        fprintf(stdout, ",\"name\":");
                        json_str(stdout, p->name, strlen(p->name));
                        fprintf(stdout, ",\"test_index\":%d,\"puzzle_id\":%d,\"grid\":[", p->test_index, p->pid);
                        for (r = 0; r < ah; r++) {
                            fprintf(stdout, "%s[", r ? "," : "");
                            for (c = 0; c < aw; c++) fprintf(stdout, "%s%d", c ? "," : "", grid[r * aw + c]);
                            fputc(']', stdout);
                        }
                        fprintf(stdout, "],\"correct\":%s", correct < 0 ? "null" : correct ? "true" : "false");
                    }
                    fprintf(stdout, ",\"ms\":%.3f}\n", 1e3 * dt / nb);
                } else {
                    const char *ok = g_color ? (valid ? "\033[1;32mvalid\033[0m" : "\033[1;31mnot valid\033[0m") : (valid ? "valid" : "not valid");
                    printf("#%d (line %d): %s after %d step%s (q_halt %.3f), %.1f ms", p->index + 1, p->line, ok, s, s == 1 ? "" : "s", sr.q[(size_t)b * maxs + s - 1],
                           1e3 * dt / nb);
                    if (task == TASK_MAZE) {
                        if (valid) printf(", path %d moves (shortest %d)", path, p->shortest);
                        else printf(", shortest path %d moves", p->shortest);
                    }
                    if (task == TASK_ARC) printf(", task %s test %d%s", p->name[0] ? p->name : "?", p->test_index, correct < 0 ? "" : correct ? ": correct" : ": wrong");
                    printf("\n");
                    if (!brief) {
                        if (task == TASK_SUDOKU) print_sudoku(p, preds + (size_t)b * L);
                        else if (task == TASK_MAZE) print_maze(p->tokens, ans, n_side);
                        else print_arc(p, grid, ah, aw);
                        printf("\n");
                    }
                }
            }
            fflush(stdout);
        }
        free(in), free(qh), free(hist), free(rowp);
    }
    fprintf(jsonl ? stderr : stdout, "%ld %s puzzle%s: %ld valid (%.1f%%), mean %.2f steps, %.2f ms per puzzle%s", ran, TASK_NAMES[task], ran == 1 ? "" : "s", valid_count,
            ran ? 100.0 * valid_count / ran : 0.0, ran ? steps_sum / ran : 0.0, ran ? 1e3 * t_all / ran : 0.0, ps.malformed ? "" : "\n");
    if (ps.malformed) fprintf(jsonl ? stderr : stdout, "; %d malformed skipped\n", ps.malformed);
    if (ran == 0 && rc == 0) rc = 1;
out:
    for (done = 0; done < ps.n; done++) free(ps.p[done].tokens);
    free(ps.p);
    if (ids.names) {
        for (i = 0; i < ids.n; i++) free(ids.names[i]);
        free(ids.names);
    }
    free(text);
    if (carry) tr_carry_destroy(carry);
    if (model) tr_model_destroy(model);
    tr_ctx_destroy(ctx);
    return rc;
}
