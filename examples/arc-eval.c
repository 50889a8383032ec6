/* tinyrec-arc-eval: the reference TRM ARC evaluator (evaluators/arc.py), in C.

   For every test example of an ARC dataset built by `tinyrec-data arc` (each augmented version of
   each test input) it runs the model in eval mode for halt_max_steps supervision steps, crops the
   prediction, undoes the augmentation named by the puzzle ("<task>|||t<id>|||<perm>"), and votes:
   the distinct answers for each (task, test input) are ranked by count, ties broken by the mean
   sigmoid(q_halt), then by which came first. pass@K is the fraction of a task's test inputs whose
   right answer is among the top K, averaged over tasks (TRM); --all-inputs also reports HRM's
   notebook score, where a task counts only when all its test inputs are right. The top two
   answers go to an ARC Prize submission file.

     tinyrec-arc-eval --checkpoint model.safetensors --data data/arc1 [--batch 16] [--limit 10]
                      [--max-steps 16] [--all-inputs] [--output submission.json]
     tinyrec-arc-eval --predictions preds.jsonl --data data/arc1 [...]

   A predictions file has one JSON object per line:
     {"puzzle": "<task>|||t<id>|||<perm>", "test_index": 0, "grid": [[...], ...], "q_halt": 1.5}
   where "grid" is the cropped prediction in the augmented frame (colours 0..9), or instead
   "tokens": [900 token ids] as the model outputs them (cropped here). q_halt is the logit.
   --save-predictions writes that file from a model run.

   The library reads the JSON (tr_json_parse), the tasks of test_puzzles.json
   (tr_arc_task_from_json) and the predicted grids (tr_arc_grid_from_json), and writes JSON strings
   and numbers (tr_json_fput_string / tr_json_fput_number). Uses only the public API. */
#define TINYREC_IMPLEMENTATION
#include "tinyrec.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if !defined(_WIN32)
#include <unistd.h>
#endif

#define MAXG TR_ARC_MAX_GRID

static void die_oom(void) {
    fprintf(stderr, "tinyrec-arc-eval: out of memory\n");
    exit(1);
}
static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) die_oom();
    return p;
}
static void *xrealloc(void *p, size_t n) {
    p = realloc(p, n ? n : 1);
    if (!p) die_oom();
    return p;
}
static char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    return (char *)memcpy(xmalloc(n), s, n);
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    char *buf;
    size_t cap = 1 << 16, n = 0;
    if (!f) return NULL;
    buf = (char *)xmalloc(cap + 1);
    for (;;) {
        size_t got;
        if (n == cap) cap *= 2, buf = (char *)xrealloc(buf, cap + 1);
        got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    if (ferror(f)) {
        fclose(f);
        free(buf);
        return NULL;
    }
    fclose(f);
    buf[n] = 0;
    *len = n;
    return buf;
}

/* ---- grids ---------------------------------------------------------------------------------- */
/* h = -1: absent (a task's test output that the file lacks) */
typedef tr_arc_grid grid;

static int grid_eq(const grid *a, const grid *b) { return a->h == b->h && a->w == b->w && (a->h <= 0 || !memcmp(a->cells, b->cells, (size_t)a->h * a->w)); }
static uint64_t grid_hash(int h, int w, const uint8_t *c) {
    uint64_t x = 1469598103934665603ull;
    int i;
    x = (x ^ (uint64_t)h) * 1099511628211ull;
    x = (x ^ (uint64_t)w) * 1099511628211ull;
    for (i = 0; i < h * w; i++) x = (x ^ c[i]) * 1099511628211ull;
    return x;
}
static void grid_write(FILE *f, const grid *g) {
    int r, c;
    fputc('[', f);
    for (r = 0; r < g->h; r++) {
        fputs(r ? ", [" : "[", f);
        for (c = 0; c < g->w; c++) fprintf(f, c ? ", %d" : "%d", g->cells[r * g->w + c]);
        fputc(']', f);
    }
    fputc(']', f);
}
/* ---- string -> index map -------------------------------------------------------------------- */
typedef struct strmap {
    char **keys;
    int *vals;
    size_t cap, n;
} strmap;
static uint64_t str_hash(const char *s) {
    uint64_t x = 1469598103934665603ull;
    for (; *s; s++) x = (x ^ (unsigned char)*s) * 1099511628211ull;
    return x;
}
static int strmap_get(const strmap *m, const char *k) {
    size_t i;
    if (!m->cap) return -1;
    for (i = str_hash(k) & (m->cap - 1); m->keys[i]; i = (i + 1) & (m->cap - 1))
        if (!strcmp(m->keys[i], k)) return m->vals[i];
    return -1;
}
static void strmap_put(strmap *m, const char *k, int v) {
    size_t i;
    if ((m->n + 1) * 2 > m->cap) {
        strmap o = *m;
        size_t j;
        m->cap = o.cap ? o.cap * 2 : 64;
        m->keys = (char **)calloc(m->cap, sizeof *m->keys);
        m->vals = (int *)calloc(m->cap, sizeof *m->vals);
        if (!m->keys || !m->vals) die_oom();
        m->n = 0;
        for (j = 0; j < o.cap; j++)
            if (o.keys[j]) {
                for (i = str_hash(o.keys[j]) & (m->cap - 1); m->keys[i]; i = (i + 1) & (m->cap - 1)) {
                }
                m->keys[i] = o.keys[j], m->vals[i] = o.vals[j], m->n++;
            }
        free(o.keys);
        free(o.vals);
    }
    for (i = str_hash(k) & (m->cap - 1); m->keys[i]; i = (i + 1) & (m->cap - 1))
        if (!strcmp(m->keys[i], k)) {
            m->vals[i] = v;
            return;
        }
    m->keys[i] = xstrdup(k), m->vals[i] = v, m->n++;
}
static void strmap_free(strmap *m) {
    size_t i;
    for (i = 0; i < m->cap; i++) free(m->keys[i]);
    free(m->keys);
    free(m->vals);
}

/* ---- tasks (test_puzzles.json) and votes ----------------------------------------------------- */
typedef struct task {
    char *name;
    int ntest;
    grid *in, *out;   /* out[i].h = -1 when the file has no solution */
    int scored;       /* in the evaluated set */
} task;

typedef struct cand {
    int task, test;
    int h, w;
    size_t off;       /* cells in votes.arena */
    uint64_t hash;
    long count;
    double qsum;
    long order;       /* first time seen */
} cand;

typedef struct votes {
    cand *c;
    size_t n, cap;
    size_t *table;    /* indices + 1, open addressing */
    size_t tcap;
    uint8_t *arena;   /* the cells of every distinct answer */
    size_t alen, acap;
    long seen;
} votes;

static uint64_t cand_key(int task, int test, uint64_t h) { return h ^ ((uint64_t)task * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)(test + 1) * 0xc2b2ae3d27d4eb4full); }

static void votes_add(votes *v, int task, int test, const grid *g, double q) {
    uint64_t h = grid_hash(g->h, g->w, g->cells), k = cand_key(task, test, h);
    size_t i;
    if ((v->n + 1) * 2 > v->tcap) {
        size_t j, nc = v->tcap ? v->tcap * 2 : 1024;
        free(v->table);
        v->table = (size_t *)calloc(nc, sizeof *v->table);
        if (!v->table) die_oom();
        v->tcap = nc;
        for (j = 0; j < v->n; j++) {
            for (i = cand_key(v->c[j].task, v->c[j].test, v->c[j].hash) & (nc - 1); v->table[i]; i = (i + 1) & (nc - 1)) {
            }
            v->table[i] = j + 1;
        }
    }
    for (i = k & (v->tcap - 1); v->table[i]; i = (i + 1) & (v->tcap - 1)) {
        cand *c = &v->c[v->table[i] - 1];
        if (c->task == task && c->test == test && c->hash == h && c->h == g->h && c->w == g->w && (g->h <= 0 || !memcmp(v->arena + c->off, g->cells, (size_t)g->h * g->w))) {
            c->count++;
            c->qsum += q;
            v->seen++;
            return;
        }
    }
    if (v->n == v->cap) v->cap = v->cap ? v->cap * 2 : 256, v->c = (cand *)xrealloc(v->c, v->cap * sizeof *v->c);
    {
        cand *c = &v->c[v->n];
        size_t nb = g->h > 0 ? (size_t)g->h * g->w : 0;
        if (v->alen + nb > v->acap) {
            while (v->alen + nb > v->acap) v->acap = v->acap ? v->acap * 2 : 1 << 16;
            v->arena = (uint8_t *)xrealloc(v->arena, v->acap);
        }
        if (nb) memcpy(v->arena + v->alen, g->cells, nb);
        c->task = task, c->test = test, c->h = g->h > 0 ? g->h : 0, c->w = g->h > 0 ? g->w : 0, c->off = v->alen;
        c->hash = h, c->count = 1, c->qsum = q, c->order = v->seen++;
        v->alen += nb;
    }
    v->table[i] = ++v->n;
}

static int cand_is(const votes *v, const cand *c, const grid *g) {
    return c->h == g->h && c->w == g->w && (g->h <= 0 || !memcmp(v->arena + c->off, g->cells, (size_t)g->h * g->w));
}
static void cand_grid(const votes *v, const cand *c, grid *g) {
    g->h = c->h, g->w = c->w;
    if (c->h > 0) memcpy(g->cells, v->arena + c->off, (size_t)c->h * c->w);
}

/* (task, test) ascending, then count descending, mean q descending, first seen first. */
static int cand_cmp(const void *pa, const void *pb) {
    const cand *a = (const cand *)pa, *b = (const cand *)pb;
    double qa, qb;
    if (a->task != b->task) return a->task < b->task ? -1 : 1;
    if (a->test != b->test) return a->test < b->test ? -1 : 1;
    if (a->count != b->count) return a->count > b->count ? -1 : 1;
    qa = a->qsum / (double)a->count, qb = b->qsum / (double)b->count;
    if (qa != qb) return qa > qb ? -1 : 1;
    return a->order < b->order ? -1 : a->order > b->order;
}

typedef struct evalstate {
    task *tasks;
    int ntasks;
    strmap by_name;
    votes v;
    long predictions, skipped, input_checked, input_mismatch;
    FILE *save;       /* --save-predictions */
} evalstate;

/* test_puzzles.json: an object of tasks keyed by name, read with the library's task reader. */
static int load_test_puzzles(tr_ctx *ctx, const char *path, evalstate *es) {
    size_t len, i;
    char *text = read_file(path, &len);
    tr_json *root = NULL;
    int k, ok = 1;
    if (!text) {
        fprintf(stderr, "tinyrec-arc-eval: cannot read %s\n", path);
        return 0;
    }
    if (tr_json_parse(ctx, text, len, path, &root) != TR_OK) {
        fprintf(stderr, "tinyrec-arc-eval: %s\n", tr_ctx_last_error(ctx));
        free(text);
        return 0;
    }
    free(text);
    if (root->type != TR_JSON_OBJECT) {
        fprintf(stderr, "tinyrec-arc-eval: %s: expected an object of tasks\n", path);
        tr_json_free(ctx, root);
        return 0;
    }
    es->tasks = (task *)calloc(root->count ? root->count : 1, sizeof *es->tasks);
    if (!es->tasks) die_oom();
    for (i = 0; i < root->count && ok; i++) {
        task *t = &es->tasks[es->ntasks];
        tr_arc_task at;
        if (tr_arc_task_from_json(ctx, &root->items[i], path, NULL, &at) != TR_OK) {
            fprintf(stderr, "tinyrec-arc-eval: task %s: %s\n", root->keys[i], tr_ctx_last_error(ctx));
            ok = 0;
            break;
        }
        if (at.num_test == 0) {
            fprintf(stderr, "tinyrec-arc-eval: %s: task %s has no \"test\" list\n", path, root->keys[i]);
            ok = 0;
        } else {
            t->name = xstrdup(root->keys[i]);
            t->ntest = at.num_test;
            t->in = (grid *)xmalloc((size_t)at.num_test * sizeof *t->in);
            t->out = (grid *)xmalloc((size_t)at.num_test * sizeof *t->out);
            es->ntasks++;
            for (k = 0; k < at.num_test; k++) {
                t->in[k] = at.pairs[at.num_train + k].input;
                t->out[k] = at.pairs[at.num_train + k].output;
                if (t->out[k].h == 0) t->out[k].h = t->out[k].w = -1;
            }
            strmap_put(&es->by_name, t->name, es->ntasks - 1);
        }
        tr_arc_task_free(ctx, &at);
    }
    tr_json_free(ctx, root);
    return ok;
}

/* One prediction of an augmented puzzle, in its augmented frame: undo the augmentation and vote. */
static int add_prediction(tr_ctx *ctx, evalstate *es, const char *puzzle, int test_index, const grid *aug, double q_halt, const char *where) {
    char base[256];
    int tid, ti, h, w;
    uint8_t perm[10];
    grid g;
    if (tr_arc_parse_name(ctx, puzzle, base, sizeof base, &tid, perm) != TR_OK) {
        fprintf(stderr, "tinyrec-arc-eval: %s: bad puzzle name '%s': %s\n", where, puzzle, tr_ctx_last_error(ctx));
        return 0;
    }
    ti = strmap_get(&es->by_name, base);
    if (ti < 0) {
        fprintf(stderr, "tinyrec-arc-eval: %s: task '%s' is not in test_puzzles.json\n", where, base);
        return 0;
    }
    if (test_index < 0 || test_index >= es->tasks[ti].ntest) {
        fprintf(stderr, "tinyrec-arc-eval: %s: task '%s' has %d test inputs, not index %d\n", where, base, es->tasks[ti].ntest, test_index);
        return 0;
    }
    if (es->save) {
        fprintf(es->save, "{\"puzzle\": ");
        tr_json_fput_string(es->save, puzzle);
        fprintf(es->save, ", \"test_index\": %d, \"q_halt\": ", test_index);
        tr_json_fput_number(es->save, q_halt);
        fprintf(es->save, ", \"grid\": ");
        grid_write(es->save, aug);
        fprintf(es->save, "}\n");
    }
    if (!es->tasks[ti].scored) {
        es->skipped++;
        return 1;
    }
    if (aug->h > 0 && aug->w > 0) {
        tr_arc_inverse_augment(tid, perm, aug->cells, aug->h, aug->w, g.cells, &h, &w);
        g.h = h, g.w = w;
    } else
        g.h = g.w = 0;
    votes_add(&es->v, ti, test_index, &g, 1.0 / (1.0 + exp(-q_halt)));
    es->predictions++;
    return 1;
}

/* ---- predictions file ------------------------------------------------------------------------ */
static int read_predictions(tr_ctx *ctx, const char *path, evalstate *es) {
    size_t len, pos = 0;
    long lineno = 0;
    char *text = read_file(path, &len), where[512];
    int ok = 1;
    if (!text) {
        fprintf(stderr, "tinyrec-arc-eval: cannot read %s\n", path);
        return 0;
    }
    while (pos < len && ok) {
        size_t e = pos, k;
        tr_json *o;
        const tr_json *pz, *ti, *gr, *tk, *q;
        grid g;
        while (e < len && text[e] != '\n') e++;
        lineno++;
        snprintf(where, sizeof where, "%.400s:%ld", path, lineno);
        for (k = pos; k < e && (text[k] == ' ' || text[k] == '\t' || text[k] == '\r'); k++) {
        }
        if (k == e) { /* blank line */
            pos = e + 1;
            continue;
        }
        if (tr_json_parse(ctx, text + pos, e - pos, where, &o) != TR_OK) {
            fprintf(stderr, "tinyrec-arc-eval: %s\n", tr_ctx_last_error(ctx));
            ok = 0;
            break;
        }
        pos = e + 1;
        pz = tr_json_get(o, "puzzle"), ti = tr_json_get(o, "test_index"), gr = tr_json_get(o, "grid"), tk = tr_json_get(o, "tokens"), q = tr_json_get(o, "q_halt");
        if (!pz || pz->type != TR_JSON_STRING || !ti || ti->type != TR_JSON_NUMBER || ti->number != floor(ti->number) || !q || q->type != TR_JSON_NUMBER || (!gr && !tk)) {
            fprintf(stderr, "tinyrec-arc-eval: %s: need \"puzzle\" (string), \"test_index\" (integer), \"q_halt\" (number) and \"grid\" or \"tokens\"\n", where);
            ok = 0;
        } else if (gr) {
            if (gr->type == TR_JSON_ARRAY && gr->count == 0) g.h = g.w = 0; /* an empty prediction */
            else if (tr_arc_grid_from_json(ctx, gr, where, &g) != TR_OK) {
                fprintf(stderr, "tinyrec-arc-eval: %s\n", tr_ctx_last_error(ctx));
                ok = 0;
            }
        } else {
            int32_t toks[MAXG * MAXG];
            size_t i;
            if (tk->type != TR_JSON_ARRAY || tk->count != MAXG * MAXG) {
                fprintf(stderr, "tinyrec-arc-eval: %s: \"tokens\" must be a list of %d token ids\n", where, MAXG * MAXG);
                ok = 0;
            }
            for (i = 0; ok && i < tk->count; i++) {
                if (tk->items[i].type != TR_JSON_NUMBER || tk->items[i].number < 0 || tk->items[i].number > 255) {
                    fprintf(stderr, "tinyrec-arc-eval: %s: token %lu is not an id 0..255\n", where, (unsigned long)i);
                    ok = 0;
                }
                toks[i] = (int32_t)tk->items[i].number;
            }
            if (ok) tr_arc_crop(toks, g.cells, &g.h, &g.w);
        }
        if (ok && !add_prediction(ctx, es, pz->string, ti->number > 1e6 || ti->number < -1 ? -1 : (int)ti->number, &g, q->number, where)) ok = 0;
        tr_json_free(ctx, o);
    }
    free(text);
    return ok;
}

/* ---- model run ------------------------------------------------------------------------------- */
typedef struct run_opts {
    const char *checkpoint, *data;
    int batch, max_steps, limit, quiet;
} run_opts;

static int run_model(tr_ctx *ctx, const run_opts *ro, evalstate *es, int64_t *ngroups_used) {
    tr_dataset *ds = NULL;
    tr_model *m = NULL;
    tr_carry *carry = NULL;
    tr_model_load_options lo;
    const tr_model_config *cfg;
    const tr_dataset_set *set;
    int32_t *in = NULL, *pid = NULL, *preds = NULL;
    float *qh = NULL;
    int64_t *row_ex = NULL, *row_pz = NULL;
    int64_t g1, p, p_end, e, ex_total = 0, ex_done = 0;
    int B = ro->batch, nrow = 0, ok = 0, steps;
    double t0 = tr_time_seconds(), last = t0;
    int tty = 0;
#if !defined(_WIN32)
    tty = isatty(2);
#endif
    if (tr_dataset_open(ctx, ro->data, "test", 0, &ds) != TR_OK) {
        fprintf(stderr, "tinyrec-arc-eval: %s\n", tr_ctx_last_error(ctx));
        return 0;
    }
    if (ds->num_sets < 1 || !ds->identifiers) {
        fprintf(stderr, "tinyrec-arc-eval: %s: the test split needs a set and identifiers.json\n", ro->data);
        goto done;
    }
    memset(&lo, 0, sizeof lo);
    lo.num_puzzle_identifiers = (int)ds->meta.num_puzzle_identifiers;
    if (tr_model_load(ctx, ro->checkpoint, &lo, &m) != TR_OK) {
        fprintf(stderr, "tinyrec-arc-eval: %s\n", tr_ctx_last_error(ctx));
        goto done;
    }
    cfg = tr_model_get_config(m);
    if (cfg->seq_len != ds->meta.seq_len || cfg->vocab_size != ds->meta.vocab_size) {
        fprintf(stderr, "tinyrec-arc-eval: the model has seq_len %d, vocab_size %d; the dataset %d, %d\n", cfg->seq_len, cfg->vocab_size, ds->meta.seq_len, ds->meta.vocab_size);
        goto done;
    }
    if (cfg->seq_len != MAXG * MAXG) {
        fprintf(stderr, "tinyrec-arc-eval: %s is not an ARC dataset (seq_len %d, want %d)\n", ro->data, cfg->seq_len, MAXG * MAXG);
        goto done;
    }
    steps = ro->max_steps > 0 ? ro->max_steps : cfg->halt_max_steps;
    if (tr_carry_create(m, B, &carry) != TR_OK) {
        fprintf(stderr, "tinyrec-arc-eval: %s\n", tr_ctx_last_error(ctx));
        goto done;
    }
    set = &ds->sets[0];
    g1 = ro->limit > 0 && ro->limit < set->num_groups ? ro->limit : set->num_groups;
    *ngroups_used = g1;
    p_end = set->group_indices[g1];
    /* the tasks of the chosen groups are the scored set */
    for (p = 0; p < p_end; p++) {
        char base[256];
        int tid, ti;
        uint8_t perm[10];
        int32_t id = set->puzzle_identifiers[p];
        const char *name = id >= 0 && id < ds->num_identifiers ? ds->identifiers[id] : NULL;
        if (!name || tr_arc_parse_name(ctx, name, base, sizeof base, &tid, perm) != TR_OK || (ti = strmap_get(&es->by_name, base)) < 0) {
            fprintf(stderr, "tinyrec-arc-eval: puzzle %lld (id %d, '%s') has no task in test_puzzles.json\n", (long long)p, id, name ? name : "?");
            goto done;
        }
        es->tasks[ti].scored = 1;
        ex_total += set->puzzle_indices[p + 1] - set->puzzle_indices[p];
    }
    in = (int32_t *)xmalloc(sizeof(int32_t) * (size_t)B * 900);
    preds = (int32_t *)xmalloc(sizeof(int32_t) * (size_t)B * 900);
    pid = (int32_t *)xmalloc(sizeof(int32_t) * (size_t)B);
    qh = (float *)xmalloc(sizeof(float) * (size_t)B);
    row_ex = (int64_t *)xmalloc(sizeof(int64_t) * (size_t)B);
    row_pz = (int64_t *)xmalloc(sizeof(int64_t) * (size_t)B);
    if (!ro->quiet)
        fprintf(stderr, "evaluating %lld examples of %lld tasks: %s, %d supervision steps, batch %d, %d threads, %s kernels\n", (long long)ex_total, (long long)g1, ro->checkpoint, steps, B,
                tr_ctx_num_threads(ctx), tr_ctx_simd_name(ctx));
    p = 0, e = p_end > 0 ? set->puzzle_indices[0] : 0;
    while (p < p_end || nrow > 0) {
        /* fill the batch in dataset order */
        while (nrow < B && p < p_end) {
            if (e >= set->puzzle_indices[p + 1]) {
                p++;
                if (p < p_end) e = set->puzzle_indices[p];
                continue;
            }
            tr_dataset_example(ds, 0, e, in + (size_t)nrow * 900, NULL);
            pid[nrow] = set->puzzle_identifiers[p];
            row_ex[nrow] = e, row_pz[nrow] = p;
            nrow++, e++;
        }
        if (nrow == 0) break;
        {
            tr_batch b;
            tr_step_outputs so;
            int r, n = nrow;
            for (r = n; r < B; r++) { /* padding rows: pad inputs, the blank puzzle */
                memset(in + (size_t)r * 900, 0, sizeof(int32_t) * 900);
                pid[r] = ds->meta.blank_identifier_id;
            }
            memset(&so, 0, sizeof so);
            so.preds = preds, so.q_halt = qh;
            b.inputs = in, b.labels = NULL, b.puzzle_identifiers = pid, b.batch_size = B;
            if (tr_model_infer(m, carry, &b, steps, NULL, NULL, &so) != TR_OK) {
                fprintf(stderr, "tinyrec-arc-eval: %s\n", tr_ctx_last_error(ctx));
                goto done;
            }
            for (r = 0; r < n; r++) {
                grid g, gi, back;
                const char *name = ds->identifiers[pid[r]];
                int test_index = (int)(row_ex[r] - set->puzzle_indices[row_pz[r]]);
                char where[64], base[256];
                int tid, ti, h, w;
                uint8_t perm[10];
                snprintf(where, sizeof where, "test example %lld", (long long)row_ex[r]);
                tr_arc_crop(preds + (size_t)r * 900, g.cells, &g.h, &g.w);
                if (!add_prediction(ctx, es, name, test_index, &g, qh[r], where)) goto done;
                /* a check of the whole chain: the augmented input maps back to the task's test input */
                tr_arc_crop(in + (size_t)r * 900, gi.cells, &gi.h, &gi.w);
                if (tr_arc_parse_name(ctx, name, base, sizeof base, &tid, perm) == TR_OK && (ti = strmap_get(&es->by_name, base)) >= 0 && gi.h > 0) {
                    tr_arc_inverse_augment(tid, perm, gi.cells, gi.h, gi.w, back.cells, &h, &w);
                    back.h = h, back.w = w;
                    es->input_checked++;
                    if (!grid_eq(&back, &es->tasks[ti].in[test_index])) es->input_mismatch++;
                }
            }
            ex_done += n;
            nrow = 0;
            if (!ro->quiet && (tr_time_seconds() - last > (tty ? 0.5 : 10.0) || ex_done == ex_total)) {
                double el = tr_time_seconds() - t0;
                fprintf(stderr, tty ? "\r  %lld/%lld examples  %.1f/s  %.0fs   " : "  %lld/%lld examples  %.1f/s  %.0fs\n", (long long)ex_done, (long long)ex_total, ex_done / (el > 0 ? el : 1), el);
                if (tty && ex_done == ex_total) fputc('\n', stderr);
                last = tr_time_seconds();
            }
        }
    }
    ok = 1;
done:
    free(in), free(preds), free(pid), free(qh), free(row_ex), free(row_pz);
    tr_carry_destroy(carry);
    tr_model_destroy(m);
    tr_dataset_close(ds);
    return ok;
}

/* ---- scoring and submission ------------------------------------------------------------------ */
#define MAX_K 16

static void usage(FILE *f) {
    fprintf(f,
            "usage: tinyrec-arc-eval --checkpoint FILE --data DIR [options]\n"
            "       tinyrec-arc-eval --predictions FILE (--data DIR | --puzzles FILE) [options]\n"
            "  Scores a TRM checkpoint on the test split of an ARC dataset built by `tinyrec-data arc`\n"
            "  (DIR/test, DIR/identifiers.json, DIR/test_puzzles.json): every augmented test input is\n"
            "  run, cropped and un-augmented; answers are voted by count, ties broken by mean sigmoid(q_halt).\n"
            "  --checkpoint FILE       model file (tr_model_save / tinyrec-train)\n"
            "  --data DIR              the dataset folder\n"
            "  --predictions FILE      score a JSONL of {\"puzzle\", \"test_index\", \"grid\" or \"tokens\", \"q_halt\"}\n"
            "                          instead of running a model\n"
            "  --puzzles FILE          the test tasks with solutions (default DIR/test_puzzles.json)\n"
            "  --max-steps N           supervision steps per example (default: the model's halt_max_steps)\n"
            "  --batch N               rows per forward pass (default 16)\n"
            "  --limit N               only the first N test tasks\n"
            "  --pass-k LIST           K values, comma separated (default 1,2,5,10)\n"
            "  --all-inputs            also report HRM's score: a task counts only if all its test inputs are solved\n"
            "  --output FILE           write the top-2 attempts in the ARC Prize submission format\n"
            "  --save-predictions FILE write every prediction as JSONL (for --predictions later)\n"
            "  --threads N, --verbose (per-input votes), --quiet (no progress), --help\n"
            "Positional arguments: CHECKPOINT DATA_DIR (or DATA_DIR alone with --predictions).\n");
}

static int parse_int(const char *opt, const char *s, int lo, int hi, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < lo || v > hi) {
        fprintf(stderr, "tinyrec-arc-eval: %s needs an integer in %d..%d, not '%s'\n", opt, lo, hi, s);
        return 0;
    }
    *out = (int)v;
    return 1;
}

int main(int argc, char **argv) {
    const char *checkpoint = NULL, *data = NULL, *predictions = NULL, *puzzles = NULL, *output = NULL, *save = NULL;
    const char *pos[2];
    int npos = 0, i, all_inputs = 0, verbose = 0, threads = 0, ks[MAX_K], nk = 4, rc = 1;
    run_opts ro;
    evalstate es;
    tr_ctx *ctx = NULL;
    tr_ctx_config cc = tr_ctx_config_default();
    char pbuf[4096];
    int64_t ngroups = 0;
    memset(&ro, 0, sizeof ro);
    memset(&es, 0, sizeof es);
    ro.batch = 16;
    ks[0] = 1, ks[1] = 2, ks[2] = 5, ks[3] = 10;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = !strcmp(a, "--checkpoint") || !strcmp(a, "--data") || !strcmp(a, "--predictions") || !strcmp(a, "--puzzles") || !strcmp(a, "--output") ||
                    !strcmp(a, "--save-predictions") || !strcmp(a, "--max-steps") || !strcmp(a, "--batch") || !strcmp(a, "--limit") || !strcmp(a, "--threads") ||
                    !strcmp(a, "--pass-k");
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (takes && !v) {
            fprintf(stderr, "tinyrec-arc-eval: %s needs a value\n", a);
            return 2;
        }
        if (!strcmp(a, "--checkpoint")) checkpoint = v, i++;
        else if (!strcmp(a, "--data")) data = v, i++;
        else if (!strcmp(a, "--predictions")) predictions = v, i++;
        else if (!strcmp(a, "--puzzles")) puzzles = v, i++;
        else if (!strcmp(a, "--output")) output = v, i++;
        else if (!strcmp(a, "--save-predictions")) save = v, i++;
        else if (!strcmp(a, "--max-steps")) {
            if (!parse_int(a, v, 1, 100000, &ro.max_steps)) return 2;
            i++;
        } else if (!strcmp(a, "--batch")) {
            if (!parse_int(a, v, 1, 1 << 20, &ro.batch)) return 2;
            i++;
        } else if (!strcmp(a, "--limit")) {
            if (!parse_int(a, v, 1, 1 << 30, &ro.limit)) return 2;
            i++;
        } else if (!strcmp(a, "--threads")) {
            if (!parse_int(a, v, 1, 1024, &threads)) return 2;
            i++;
        } else if (!strcmp(a, "--pass-k")) {
            const char *s = v;
            nk = 0;
            while (*s) {
                char *end;
                long k = strtol(s, &end, 10);
                if (end == s || k < 1 || k > 1000000 || nk == MAX_K || (*end && *end != ',')) {
                    fprintf(stderr, "tinyrec-arc-eval: --pass-k needs up to %d positive integers separated by commas, not '%s'\n", MAX_K, v);
                    return 2;
                }
                ks[nk++] = (int)k;
                s = *end ? end + 1 : end;
            }
            if (!nk) {
                fprintf(stderr, "tinyrec-arc-eval: --pass-k needs at least one K\n");
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--all-inputs")) all_inputs = 1;
        else if (!strcmp(a, "--verbose")) verbose = 1;
        else if (!strcmp(a, "--quiet")) ro.quiet = 1;
        else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "tinyrec-arc-eval: unknown option '%s'\n\n", a);
            usage(stderr);
            return 2;
        } else {
            if (npos == 2) {
                fprintf(stderr, "tinyrec-arc-eval: unexpected argument '%s'\n", a);
                return 2;
            }
            pos[npos++] = a;
        }
    }
    if (predictions) {
        if (npos > 1) {
            fprintf(stderr, "tinyrec-arc-eval: with --predictions, give at most the data folder as an argument\n");
            return 2;
        }
        if (npos == 1 && !data) data = pos[0];
        if (checkpoint) {
            fprintf(stderr, "tinyrec-arc-eval: --checkpoint and --predictions exclude each other\n");
            return 2;
        }
        if (!data && !puzzles) {
            fprintf(stderr, "tinyrec-arc-eval: --predictions needs --data DIR or --puzzles FILE (the solutions)\n");
            return 2;
        }
    } else {
        if (npos >= 1 && !checkpoint) checkpoint = pos[0];
        else if (npos >= 1 && !data) data = pos[0];
        if (npos == 2 && !data) data = pos[1];
        if (!checkpoint || !data) {
            fprintf(stderr, "tinyrec-arc-eval: need a checkpoint and a dataset folder (or --predictions FILE)\n\n");
            usage(stderr);
            return 2;
        }
    }
    if (!puzzles) {
        snprintf(pbuf, sizeof pbuf, "%s/test_puzzles.json", data);
        puzzles = pbuf;
    }
    cc.num_threads = threads;
    if (tr_ctx_create(&cc, &ctx) != TR_OK) {
        fprintf(stderr, "tinyrec-arc-eval: cannot create a context\n");
        return 1;
    }
    if (!load_test_puzzles(ctx, puzzles, &es)) goto out;
    if (save) {
        es.save = fopen(save, "w");
        if (!es.save) {
            fprintf(stderr, "tinyrec-arc-eval: cannot write %s\n", save);
            goto out;
        }
    }
    if (predictions) {
        int t, n = ro.limit > 0 && ro.limit < es.ntasks ? ro.limit : es.ntasks;
        for (t = 0; t < n; t++) es.tasks[t].scored = 1;
        ngroups = n;
        if (!read_predictions(ctx, predictions, &es)) goto out;
    } else {
        ro.checkpoint = checkpoint, ro.data = data;
        if (!run_model(ctx, &ro, &es, &ngroups)) goto out;
    }
    if (es.save) {
        if (fclose(es.save) != 0) {
            es.save = NULL;
            fprintf(stderr, "tinyrec-arc-eval: cannot write %s\n", save);
            goto out;
        }
        es.save = NULL;
    }
    qsort(es.v.c, es.v.n, sizeof *es.v.c, cand_cmp);
    {
        double frac[MAX_K] = {0}, all[MAX_K] = {0};
        int t, k, nscored = 0, ninputs = 0, nsolvable = 0, missing_preds = 0, missing_sol = 0;
        size_t ci = 0;
        FILE *sub = NULL;
        if (output) {
            sub = fopen(output, "w");
            if (!sub) {
                fprintf(stderr, "tinyrec-arc-eval: cannot write %s\n", output);
                goto out;
            }
            fputs("{", sub);
        }
        for (t = 0; t < es.ntasks; t++) {
            task *tk = &es.tasks[t];
            int x, correct[MAX_K], has_sol = 1;
            if (!tk->scored) continue;
            nscored++;
            for (k = 0; k < nk; k++) correct[k] = 0;
            if (sub) {
                fputs(nscored > 1 ? ",\n  " : "\n  ", sub);
                tr_json_fput_string(sub, tk->name);
                fputs(": [", sub);
            }
            for (x = 0; x < tk->ntest; x++) {
                size_t c0, c1;
                int rank = -1;
                ninputs++;
                while (ci < es.v.n && (es.v.c[ci].task < t || (es.v.c[ci].task == t && es.v.c[ci].test < x))) ci++;
                c0 = c1 = ci;
                while (c1 < es.v.n && es.v.c[c1].task == t && es.v.c[c1].test == x) c1++;
                if (tk->out[x].h < 0) has_sol = 0, missing_sol++;
                else {
                    size_t j;
                    for (j = c0; j < c1; j++)
                        if (cand_is(&es.v, &es.v.c[j], &tk->out[x])) {
                            rank = (int)(j - c0);
                            break;
                        }
                }
                if (c0 == c1) missing_preds++;
                for (k = 0; k < nk; k++) correct[k] += rank >= 0 && rank < ks[k];
                if (verbose) {
                    size_t j;
                    printf("%s test %d: %lu distinct answers%s\n", tk->name, x, (unsigned long)(c1 - c0),
                           tk->out[x].h < 0 ? " (no solution given)" : rank >= 0 ? "" : ", none right");
                    for (j = c0; j < c1 && j < c0 + 5; j++)
                        printf("  #%lu  count %ld  mean q %.4f  %dx%d%s\n", (unsigned long)(j - c0 + 1), es.v.c[j].count, es.v.c[j].qsum / (double)es.v.c[j].count, es.v.c[j].h,
                               es.v.c[j].w, (int)(j - c0) == rank ? "  <- right" : "");
                }
                if (sub) {
                    grid a1, a2;
                    a1.h = a1.w = 1, a1.cells[0] = 0; /* no prediction: [[0]] */
                    if (c1 > c0) cand_grid(&es.v, &es.v.c[c0], &a1);
                    a2 = a1; /* padded with the first, as the reference */
                    if (c1 > c0 + 1) cand_grid(&es.v, &es.v.c[c0 + 1], &a2);
                    fputs(x ? ", {\"attempt_1\": " : "{\"attempt_1\": ", sub);
                    grid_write(sub, &a1);
                    fputs(", \"attempt_2\": ", sub);
                    grid_write(sub, &a2);
                    fputs("}", sub);
                }
                ci = c1;
            }
            if (sub) fputs("]", sub);
            if (has_sol) nsolvable++;
            for (k = 0; k < nk; k++) {
                frac[k] += (double)correct[k] / tk->ntest;
                all[k] += correct[k] == tk->ntest;
            }
        }
        if (sub) {
            fputs(nscored ? "\n}\n" : "}\n", sub);
            if (fclose(sub) != 0) {
                fprintf(stderr, "tinyrec-arc-eval: cannot write %s\n", output);
                goto out;
            }
        }
        printf("ARC evaluation: %d tasks, %d test inputs, %ld predictions, %lu distinct answers\n", nscored, ninputs, es.predictions, (unsigned long)es.v.n);
        if (es.input_checked) printf("augmentation check: %ld of %ld augmented inputs map back to their task's test input\n", es.input_checked - es.input_mismatch, es.input_checked);
        if (es.input_mismatch) fprintf(stderr, "tinyrec-arc-eval: warning: %ld augmented inputs do not map back to their test input\n", es.input_mismatch);
        if (es.skipped) printf("%ld predictions of tasks outside the first %lld were ignored\n", es.skipped, (long long)ngroups);
        if (missing_preds) fprintf(stderr, "tinyrec-arc-eval: warning: %d test inputs have no prediction (they count as wrong)\n", missing_preds);
        if (missing_sol) printf("%d test inputs have no solution in %s: they count as wrong\n", missing_sol, puzzles);
        for (k = 0; k < nk; k++) printf("ARC/pass@%d: %.6f\n", ks[k], nscored ? frac[k] / nscored : 0.0);
        if (all_inputs)
            for (k = 0; k < nk; k++) printf("ARC/all-inputs/pass@%d: %.6f\n", ks[k], nscored ? all[k] / nscored : 0.0);
        printf("(pass@K: fraction of each task's test inputs whose answer is among the top K votes, averaged over tasks%s)\n",
               all_inputs ? "; all-inputs: a task counts only when every test input is right" : "");
        if (output) printf("submission: %s (top 2 attempts per test input)\n", output);
        if (save) printf("predictions: %s\n", save);
        (void)nsolvable;
    }
    rc = 0;
out:
    if (es.save) fclose(es.save);
    {
        int t;
        for (t = 0; t < es.ntasks; t++) free(es.tasks[t].name), free(es.tasks[t].in), free(es.tasks[t].out);
        free(es.tasks);
    }
    strmap_free(&es.by_name);
    free(es.v.c);
    free(es.v.table);
    free(es.v.arena);
    tr_ctx_destroy(ctx);
    return rc;
}
