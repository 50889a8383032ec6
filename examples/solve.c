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
   --jsonl writes one JSON object per puzzle to stdout instead of the grids: index (0-based position in the
   input, malformed records included), line, task, steps, q_halt (per step), predictions (per step, in the
   puzzle's characters; ARC cells 0-9, '|' the end-of-grid marker, '.' padding), answer, valid, ms, what it
   ran on (tr_run_info_fput_json: device, device_kind, kernels, threads, precision, requested_precision,
   products, tape16, fallback); Maze adds path_length and shortest, ARC name, test_index, puzzle_id, grid
   and correct. The header line and the summary go to stderr then.
   Malformed puzzles are reported on stderr with their line number and skipped.
   Exit status: 0 when at least one puzzle ran, 1 when none could be run or on a fatal error,
   2 for a bad command line.

   The library's puzzle readers do the parsing (tr_sudoku_parse, tr_maze_parse, tr_json_parse +
   tr_arc_task_from_json, tr_identifiers_read); this program turns puzzles into token rows, runs
   tr_model_infer and prints. Uses only the public API of tinyrec.h. */
#define TINYREC_IMPLEMENTATION
#include "tinyrec.h"
#include "tinyrec_prog.h"

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

/* The puzzles read, and the malformed records the readers reported (their lines, in order). */
typedef struct puzzles {
    puzzle *p;
    size_t n, cap;
    int malformed;
    int64_t *bad_lines;
    const char *task_name; /* ARC: the task being read, for the reports */
} puzzles;

static int g_color = 0;
static const char *const OPTIONS[] = {"--help", "--jsonl", "--brief", "--no-color", "--steps", "--batch", "--threads", "--identifiers", "--task", "--color", "--device", "--dtype"};

/* The library's warnings (e.g. a checkpoint field that differs) go to stderr; errors are
   reported by the caller from tr_ctx_last_error. */
static void on_log(void *user, tr_log_level level, const char *message) {
    (void)user;
    if (level == TR_LOG_WARN) fprintf(stderr, "tinyrec-solve: warning: %s\n", message);
}

/* ---- input ------------------------------------------------------------------------------ */

/* A malformed record, as the readers report it (tr_read_options.on_skip): say so and go on. */
static void on_skip(void *user, int64_t line, const char *reason) {
    puzzles *ps = (puzzles *)user;
    int64_t *nl = (int64_t *)realloc(ps->bad_lines, sizeof(int64_t) * (size_t)(ps->malformed + 1));
    if (ps->task_name) fprintf(stderr, "tinyrec-solve: line %lld: task '%s': %s; skipped\n", (long long)line, ps->task_name[0] ? ps->task_name : "<stdin>", reason);
    else fprintf(stderr, "tinyrec-solve: line %lld: %s; skipped\n", (long long)line, reason);
    if (nl) ps->bad_lines = nl, nl[ps->malformed] = line;
    ps->malformed++;
}

static puzzle *new_puzzle(puzzles *ps, int L, int index, int64_t line) {
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
    p->index = index, p->line = (int)line;
    ps->n++;
    return p;
}

/* The index of the record on `line`: the puzzles before it plus the malformed records before it. */
static int record_index(const puzzles *ps, size_t i, int64_t line) {
    int k = 0;
    while (k < ps->malformed && ps->bad_lines && ps->bad_lines[k] < line) k++;
    return (int)i + k;
}

/* Sudoku lines or CSV: the givens become tokens 1 (blank) and 2..10. */
static tr_status read_sudoku(tr_ctx *ctx, const char *text, size_t len, const char *what, puzzles *ps) {
    tr_read_options o = tr_read_options_default();
    tr_sudoku_set set;
    tr_status st;
    int64_t i;
    int k;
    o.puzzles_only = 1, o.on_skip = on_skip, o.user = ps;
    if ((st = tr_sudoku_parse(ctx, text, len, what, &o, &set, NULL)) != TR_OK) return st;
    for (i = 0; i < set.count; i++) {
        puzzle *p = new_puzzle(ps, 81, record_index(ps, (size_t)i, set.lines[i]), set.lines[i]);
        if (!p) {
            st = TR_ERR_OUT_OF_MEMORY;
            break;
        }
        memcpy(p->givens, set.puzzles + i * 81, 81);
        p->blank = memchr(text, '.', len) ? '.' : '0'; /* print blanks as the input writes them */
        for (k = 0; k < 81; k++) p->tokens[k] = p->givens[k] + 1;
    }
    tr_sudoku_set_free(ctx, &set);
    return st;
}

/* Mazes of "# SG" characters: tokens 1..5 of TR_MAZE_CHARSET. */
static tr_status read_maze(tr_ctx *ctx, const char *text, size_t len, const char *what, int n, puzzles *ps) {
    tr_read_options o = tr_read_options_default();
    tr_maze_set set;
    tr_status st;
    int64_t i;
    int k;
    o.puzzles_only = 1, o.side = n, o.on_skip = on_skip, o.user = ps;
    if ((st = tr_maze_parse(ctx, text, len, what, &o, &set)) != TR_OK) return st;
    for (i = 0; i < set.count; i++) {
        const char *m = set.mazes + (size_t)i * n * n;
        puzzle *p = new_puzzle(ps, n * n, record_index(ps, (size_t)i, set.lines[i]), set.lines[i]);
        if (!p) {
            st = TR_ERR_OUT_OF_MEMORY;
            break;
        }
        p->shortest = tr_maze_solve(ctx, m, n, set.solutions + (size_t)i * n * n);
        for (k = 0; k < n * n; k++) p->tokens[k] = (int32_t)(strchr(TR_MAZE_CHARSET, m[k]) - TR_MAZE_CHARSET) + 1;
    }
    tr_maze_set_free(ctx, &set);
    return st;
}

/* The position of name in identifiers.json, or -1. */
static int lookup_id(int64_t n, char *const *names, const char *name) {
    int64_t i;
    for (i = 0; i < n; i++)
        if (names[i] && !strcmp(names[i], name)) return (int)i;
    return -1;
}

typedef struct arc_ids {
    int64_t n;      /* -1: no --identifiers */
    char **names;
    int num_ids;    /* the model's puzzle ids */
    int warned;
} arc_ids;

/* Every test input of one task, encoded on the 30x30 canvas. *records counts the test pairs. */
static tr_status add_arc_task(tr_ctx *ctx, const tr_json *v, const char *name, const char *what, arc_ids *ids, puzzles *ps, int *records) {
    tr_read_options o = tr_read_options_default();
    tr_arc_task t;
    tr_status st;
    int i, pid = 0, found;
    const tr_json *tests = tr_json_get(v, "test");
    o.on_skip = on_skip, o.user = ps;
    ps->task_name = name;
    st = tr_arc_task_from_json(ctx, v, what, &o, &t);
    ps->task_name = NULL;
    if (st != TR_OK) return st;
    if (!tests || tests->type != TR_JSON_ARRAY) { /* reported by the reader: one malformed record */
        (*records)++;
        return TR_OK;
    }
    found = name[0] && ids->n >= 0 ? lookup_id(ids->n, ids->names, name) : -1;
    if (found >= 0 && found < ids->num_ids) pid = found;
    else if (found >= ids->num_ids) {
        fprintf(stderr, "tinyrec-solve: warning: task '%s' has puzzle id %d, beyond the model's %d ids; using the blank id 0\n", name, found, ids->num_ids);
    } else if (!ids->warned || ids->n >= 0) {
        if (ids->n < 0) fprintf(stderr, "tinyrec-solve: warning: no --identifiers given; task '%s' uses the blank puzzle id 0 (predictions may be poor; tinyrec-adapt trains a row for an unseen task)\n", name[0] ? name : "<stdin>");
        else fprintf(stderr, "tinyrec-solve: warning: task '%s' is not in the identifiers file; using the blank puzzle id 0 (tinyrec-adapt trains a row for an unseen task)\n", name[0] ? name : "<stdin>");
        ids->warned = 1;
    }
    for (i = 0; i < t.num_test; i++) {
        const tr_arc_pair *pair = &t.pairs[t.num_train + i];
        uint8_t canvas[900];
        puzzle *p;
        int k, index = (*records)++;
        if (pair->input.h == 0) continue; /* malformed: reported by the reader */
        if (!(p = new_puzzle(ps, 900, index, pair->line))) {
            tr_arc_task_free(ctx, &t);
            return TR_ERR_OUT_OF_MEMORY;
        }
        snprintf(p->name, sizeof p->name, "%s", name);
        p->test_index = i, p->h = pair->input.h, p->w = pair->input.w, p->pid = pid;
        memcpy(p->in, pair->input.cells, (size_t)p->h * p->w);
        if (pair->output.h > 0) {
            p->has_out = 1, p->oh = pair->output.h, p->ow = pair->output.w;
            memcpy(p->out, pair->output.cells, (size_t)p->oh * p->ow);
        }
        tr_arc_encode(p->in, p->h, p->w, 0, 0, canvas);
        for (k = 0; k < 900; k++) p->tokens[k] = canvas[k];
    }
    tr_arc_task_free(ctx, &t);
    return TR_OK;
}

/* One task (named after its file) or an object of tasks keyed by name. Returns 0, -1 on a
   library error (in tr_ctx_last_error), -2 when already reported. */
static int read_arc(tr_ctx *ctx, const char *text, size_t len, const char *path, arc_ids *ids, puzzles *ps) {
    tr_json *root;
    tr_status st = TR_OK;
    char name[256];
    size_t i;
    int records = 0;
    if (tr_json_parse(ctx, text, len, path, &root) != TR_OK) {
        fprintf(stderr, "tinyrec-solve: %s\n", tr_ctx_last_error(ctx));
        return -2;
    }
    if (root->type != TR_JSON_OBJECT) {
        fprintf(stderr, "tinyrec-solve: %s: an ARC task is a JSON object\n", path);
        tr_json_free(ctx, root);
        return -2;
    }
    if (tr_json_get(root, "test") || tr_json_get(root, "train")) { /* one task: its name is the file's */
        const char *b = strrchr(path, '/');
        size_t l;
        snprintf(name, sizeof name, "%s", !strcmp(path, "-") ? "" : b ? b + 1 : path);
        l = strlen(name);
        if (l > 5 && !strcmp(name + l - 5, ".json")) name[l - 5] = 0;
        st = add_arc_task(ctx, root, name, path, ids, ps, &records);
    } else
        for (i = 0; i < root->count && st == TR_OK; i++) {
            if (root->items[i].type != TR_JSON_OBJECT) {
                char why[300];
                snprintf(why, sizeof why, "'%s' is not a task object", root->keys[i]);
                records++;
                on_skip(ps, root->items[i].line, why);
                continue;
            }
            st = add_arc_task(ctx, &root->items[i], root->keys[i], path, ids, ps, &records);
        }
    tr_json_free(ctx, root);
    return st == TR_OK ? 0 : -1;
}

/* ---- checking and printing answers -------------------------------------------------------- */

static char token_char(int task, int t, char blank) {
    if (task == TASK_SUDOKU) return t >= 2 && t <= 10 ? (char)('0' + t - 1) : t == 1 ? blank : '?';
    if (task == TASK_MAZE) return t >= 1 && t <= 5 ? TR_MAZE_CHARSET[t - 1] : '?';
    return t >= 2 && t <= 11 ? (char)('0' + t - 2) : t == 1 ? '|' : '.';
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
            "usage: tinyrec-solve CHECKPOINT [INPUT|-] [options]\n"
            "Runs a checkpoint (a .safetensors from tinyrec-train or a converted reference one) on the puzzles of\n"
            "INPUT or stdin; each stops when q_halt > 0 or after halt_max_steps ACT steps. The task follows from the\n"
            "model: Sudoku (81-character lines, '.' or '0' blank, or the reference CSV), Maze (n x n blocks of\n"
            "'# SG', or lines / CSV) or ARC (a task JSON, or a file of tasks by name).\n"
            "options:\n"
            "  --jsonl              one JSON object per puzzle on stdout (fields: see examples/solve.c)\n"
            "  --brief              one line per puzzle, no grids\n"
            "  --steps N            run exactly N ACT steps (ignore q_halt)\n"
            "  --identifiers FILE   ARC: the dataset's identifiers.json, for each task's puzzle id\n"
            "  --task T             sudoku | maze | arc (default: from the model)\n"
            "  --batch B            puzzles per forward pass (default 1)\n"
            "  --threads N          CPU threads (default: TINYREC_NUM_THREADS or all)\n"
            "  --device D           auto | cpu | opencl | opencl:N | opencl:<name> (default: TINYREC_DEVICE, else auto)\n"
            "  --dtype T            float32 | bfloat16 | float16 | auto (default: the checkpoint's)\n"
            "  --color WHEN         auto | always | never\n"
            "The first line names the device, kernels and precision; malformed puzzles are reported with their\n"
            "line and skipped. Exit status: 0 when a puzzle ran, 1 when none could, 2 for a bad command line.\n"
            "example:\n"
            "  echo 4.....8.5.3..........7......2.....6.....8.4......1.......6.3.7.5..2.....1.4...... |\n"
            "    tinyrec-solve runs/sudoku/best.safetensors --dtype bf16\n");
}

static int bad_usage(const char *fmt, const char *arg) {
    fprintf(stderr, "tinyrec-solve: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(tinyrec-solve --help for the usage)\n");
    return 2;
}

int main(int argc, char **argv) {
    const char *ckpt = NULL, *input = NULL, *ids_path = NULL, *color = "auto", *device = NULL;
    int force_steps = 0, dtype = -1, jsonl = 0, brief = 0, task = TASK_AUTO, B = 1, threads = 0, i, L, V, n_side = 0, rc = 0;
    tr_ctx_config cc = tr_ctx_config_default();
    tr_ctx *ctx = NULL;
    tr_model *model = NULL;
    tr_carry *carry = NULL;
    tr_run_info run;
    const tr_model_config *mc;
    puzzles ps;
    arc_ids ids;
    char *text = NULL;
    size_t len = 0, done;
    double t_all = 0, steps_sum = 0;
    long valid_count = 0, ran = 0;
    memset(&ps, 0, sizeof ps);
    memset(&ids, 0, sizeof ids);
    ids.n = -1;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--jsonl")) jsonl = 1;
        else if (!strcmp(a, "--brief")) brief = 1;
        else if (!strcmp(a, "--no-color")) color = "never";
        else if (!strcmp(a, "--steps") || !strcmp(a, "--batch") || !strcmp(a, "--threads") || !strcmp(a, "--identifiers") || !strcmp(a, "--task") ||
                 !strcmp(a, "--color") || !strcmp(a, "--device") || !strcmp(a, "--dtype")) {
            if (!v) return bad_usage("%s needs a value", a);
            i++;
            if (!strcmp(a, "--steps") && tr_prog_parse_int(v, 1, 10000, &force_steps)) return bad_usage("--steps needs an integer from 1 to 10000, not '%s'", v);
            if (!strcmp(a, "--batch") && tr_prog_parse_int(v, 1, 65536, &B)) return bad_usage("--batch needs an integer from 1 to 65536, not '%s'", v);
            if (!strcmp(a, "--threads") && tr_prog_parse_int(v, 0, 4096, &threads)) return bad_usage("--threads needs an integer >= 0, not '%s'", v);
            if (!strcmp(a, "--identifiers")) ids_path = v;
            if (!strcmp(a, "--device")) device = v;
            if (!strcmp(a, "--dtype") && (dtype = tr_forward_dtype_parse(v)) < 0)
                return bad_usage("--dtype takes float32, bfloat16, float16 or auto (fp32, bf16, fp16), not '%s'", v);
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
        } else if (a[0] == '-' && a[1]) {
            char err[256];
            snprintf(err, sizeof err, "unknown option '%s'", a);
            tr_prog_did_you_mean(err, sizeof err, a, OPTIONS, (int)(sizeof OPTIONS / sizeof OPTIONS[0]));
            return bad_usage("%s", err);
        }
        else if (!ckpt) ckpt = a;
        else if (!input) input = a;
        else return bad_usage("unexpected argument '%s' (one checkpoint and one input)", a);
    }
    if (!ckpt) return bad_usage("%s", "name a checkpoint (a .safetensors from tinyrec-train)");
    g_color = !jsonl && tr_prog_color(color, stdout);

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
    if (dtype >= 0 && tr_model_set_forward_dtype(model, (tr_forward_dtype)dtype) != TR_OK) {
        fprintf(stderr, "tinyrec-solve: %s\n", tr_ctx_last_error(ctx));
        rc = 1;
        goto out;
    }
    mc = tr_model_get_config(model);
    L = mc->seq_len, V = mc->vocab_size;
    /* the device opened with the model, its kernels and precision; beside the results, so that --jsonl stays clean */
    tr_prog_print_run(jsonl ? stderr : stdout, "device ", model, &run);
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
    if (ids_path && tr_identifiers_read(ctx, ids_path, &ids.n, &ids.names) != TR_OK) {
        fprintf(stderr, "tinyrec-solve: %s\n", tr_ctx_last_error(ctx));
        ids.n = -1;
        rc = 1;
        goto out;
    }
    ids.num_ids = mc->num_puzzle_identifiers;
    /* the whole input, a file or stdin ("-"), through the library's reader */
    if (!input) input = "-";
    if (!strcmp(input, "-") && isatty(fileno(stdin))) fprintf(stderr, "tinyrec-solve: reading puzzles from stdin (end with Ctrl-D)\n");
    if (tr_read_file(ctx, input, &text, &len) != TR_OK) {
        fprintf(stderr, "tinyrec-solve: %s\n", tr_ctx_last_error(ctx));
        rc = 1;
        goto out;
    }
    {
        const char *what = !strcmp(input, "-") ? "stdin" : input;
        int pr = task == TASK_SUDOKU ? -(read_sudoku(ctx, text, len, what, &ps) != TR_OK)
                 : task == TASK_MAZE ? -(read_maze(ctx, text, len, what, n_side, &ps) != TR_OK)
                                     : read_arc(ctx, text, len, input, &ids, &ps);
        if (pr != 0) {
            if (pr == -1) fprintf(stderr, "tinyrec-solve: %s\n", tr_ctx_last_error(ctx));
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
                } else if (task == TASK_MAZE) {
                    char maze[900];
                    for (k = 0; k < L; k++) maze[k] = token_char(task, p->tokens[k], ' ');
                    valid = (path = tr_maze_check(ctx, maze, ans, n_side)) >= 0;
                }
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
                        tr_prog_json_str(stdout, hist + ((size_t)b * maxs + k) * L, (size_t)L);
                    }
                    fprintf(stdout, "],\"answer\":");
                    tr_prog_json_str(stdout, ans, (size_t)L);
                    fprintf(stdout, ",\"valid\":%s", valid ? "true" : "false");
                    if (task == TASK_MAZE) fprintf(stdout, ",\"path_length\":%d,\"shortest\":%d", path, p->shortest);
                    if (task == TASK_ARC) {
                        int r, c;
                        fprintf(stdout, ",\"name\":");
                        tr_prog_json_str(stdout, p->name, strlen(p->name));
                        fprintf(stdout, ",\"test_index\":%d,\"puzzle_id\":%d,\"grid\":[", p->test_index, p->pid);
                        for (r = 0; r < ah; r++) {
                            fprintf(stdout, "%s[", r ? "," : "");
                            for (c = 0; c < aw; c++) fprintf(stdout, "%s%d", c ? "," : "", grid[r * aw + c]);
                            fputc(']', stdout);
                        }
                        fprintf(stdout, "],\"correct\":%s", correct < 0 ? "null" : correct ? "true" : "false");
                    }
                    fprintf(stdout, ",\"ms\":%.3f,", 1e3 * dt / nb);
                    tr_run_info_fput_json(stdout, &run); /* what it ran on and in */
                    fputs("}\n", stdout);
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
                        if (task == TASK_SUDOKU) tr_prog_print_sudoku(p->givens, p->blank, grid, g_color);
                        else if (task == TASK_MAZE) {
                            char maze[900];
                            for (k = 0; k < L; k++) maze[k] = token_char(task, p->tokens[k], ' ');
                            tr_prog_print_maze(maze, ans, n_side, g_color);
                        } else
                            tr_prog_print_arc(p->in, p->h, p->w, grid, ah, aw, g_color);
                        printf("\n");
                    }
                }
            }
            fflush(stdout);
        }
        free(in), free(qh), free(hist), free(rowp);
    }
    fprintf(jsonl ? stderr : stdout, "%ld %s puzzle%s: %ld valid (%.1f%%), mean %.2f steps, %.2f ms per puzzle on %s%s", ran, TASK_NAMES[task], ran == 1 ? "" : "s",
            valid_count, ran ? 100.0 * valid_count / ran : 0.0, ran ? steps_sum / ran : 0.0, ran ? 1e3 * t_all / ran : 0.0, run.text, ps.malformed ? "" : "\n");
    if (ps.malformed) fprintf(jsonl ? stderr : stdout, "; %d malformed skipped\n", ps.malformed);
    if (ran == 0 && rc == 0) rc = 1;
out:
    for (done = 0; done < ps.n; done++) free(ps.p[done].tokens);
    free(ps.p);
    if (ids.n >= 0) tr_identifiers_free(ctx, ids.n, ids.names);
    free(ps.bad_lines);
    tr_free(ctx, text);
    if (carry) tr_carry_destroy(carry);
    if (model) tr_model_destroy(model);
    tr_ctx_destroy(ctx);
    return rc;
}
