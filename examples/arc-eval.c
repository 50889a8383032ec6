/* tinyrec-arc-eval: the reference TRM ARC evaluator (evaluators/arc.py), in C.

   For every test example of an ARC dataset built by `tinyrec-data arc` (each augmented version of
   each test input) it runs the model in eval mode for halt_max_steps supervision steps, crops the
   prediction and hands it to the library's ARC votes (tr_arc_votes_*), which undo the augmentation
   named by the puzzle ("<task>|||t<id>|||<perm>") and count it: the distinct answers for each
   (task, test input) are ranked by count, ties broken by the mean sigmoid(q_halt), then by which
   came first. pass@K is the fraction of a task's test inputs whose right answer is among the top K,
   averaged over tasks (TRM); --all-inputs also reports HRM's notebook score, where a task counts
   only when all its test inputs are right. The top two answers go to an ARC Prize submission file.

     tinyrec-arc-eval --checkpoint model.safetensors --data data/arc1 [--batch 16] [--limit 10]
                      [--max-steps 16] [--all-inputs] [--output submission.json]
     tinyrec-arc-eval --predictions preds.jsonl --data data/arc1 [...]

   A predictions file has one JSON object per line:
     {"puzzle": "<task>|||t<id>|||<perm>", "test_index": 0, "grid": [[...], ...], "q_halt": 1.5}
   where "grid" is the cropped prediction in the augmented frame (colours 0..9), or instead
   "tokens": [900 token ids] as the model outputs them (cropped here). q_halt is the logit.
   --save-predictions writes that file from a model run.

   The walk through the API: tr_read_file + tr_arc_votes_create load test_puzzles.json; the
   predictions come from tr_model_infer on the dataset (tr_dataset_open, tr_arc_crop) or from the
   JSONL file (tr_json_parse, tr_arc_grid_from_json); tr_arc_votes_add counts each one,
   tr_arc_votes_rank ranks them, tr_arc_votes_score gives pass@K and tr_arc_votes_fput_submission
   writes the submission. Uses only the public API. */
#define TINYREC_IMPLEMENTATION
#include "tinyrec.h"
#include "tinyrec_prog.h"
static tr_run_info g_run; /* what the model ran on and in (device NULL: no model ran) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if !defined(_WIN32)
#include <unistd.h>
#endif

#define MAXG TR_ARC_MAX_GRID
#define MAX_K 16

/* Prints the library's reason for the last failure; returns 0 for `return fail(ctx)`. */
static int fail(tr_ctx *ctx) {
    fprintf(stderr, "tinyrec-arc-eval: %s\n", tr_ctx_last_error(ctx));
    return 0;
}

/* ---- one prediction ------------------------------------------------------------------------- */
/* A predicted grid of an augmented puzzle, in its augmented frame: the votes check the name, the
   task and the test index, undo the augmentation and count it (input, when given, is the augmented
   test input, checked to map back). --save-predictions gets the same line as a predictions file. */
static int add_prediction(tr_ctx *ctx, tr_arc_votes *v, FILE *save, const char *puzzle, int test_index, const tr_arc_grid *aug, double q_halt,
                          const tr_arc_grid *input, const char *where) {
    if (tr_arc_votes_add(v, puzzle, test_index, aug, q_halt, input, where) != TR_OK) return fail(ctx);
    if (save) {
        fprintf(save, "{\"puzzle\": ");
        tr_json_fput_string(save, puzzle);
        fprintf(save, ", \"test_index\": %d, \"q_halt\": ", test_index);
        tr_json_fput_number(save, q_halt);
        fprintf(save, ", \"grid\": ");
        tr_arc_grid_fput(save, aug);
        fprintf(save, "}\n");
    }
    return 1;
}

/* ---- predictions file ------------------------------------------------------------------------ */
/* One JSON object per line (blank lines skipped); errors name the file and line. */
static int read_predictions(tr_ctx *ctx, const char *path, tr_arc_votes *v, FILE *save) {
    size_t len, pos = 0;
    long lineno = 0;
    char *text, where[512];
    int ok = 1;
    if (tr_read_file(ctx, path, &text, &len) != TR_OK) {
        fprintf(stderr, "tinyrec-arc-eval: cannot read %s\n", path);
        return 0;
    }
    while (pos < len && ok) {
        size_t e = pos, k;
        tr_arc_prediction pr;
        while (e < len && text[e] != '\n') e++;
        lineno++;
        snprintf(where, sizeof where, "%.400s:%ld", path, lineno);
        for (k = pos; k < e && (text[k] == ' ' || text[k] == '\t' || text[k] == '\r'); k++) {
        }
        if (k < e) /* blank lines are skipped */
            ok = tr_arc_prediction_parse(ctx, text + pos, e - pos, where, &pr) == TR_OK ? add_prediction(ctx, v, save, pr.puzzle, pr.test_index, &pr.grid, pr.q_halt, NULL, where)
                                                                                    : fail(ctx);
        pos = e + 1;
    }
    tr_free(ctx, text);
    return ok;
}
/* ---- model run ------------------------------------------------------------------------------- */
/* The test split in dataset order, B rows at a time through tr_model_infer (halt_max_steps or
   --max-steps supervision steps, no early halting); each row's prediction is voted for. */
typedef struct run_opts {
    const char *checkpoint, *data;
    int batch, max_steps, limit, quiet;
    int dtype; /* tr_forward_dtype, or -1: the checkpoint's */
    int task_id; /* tr_task_id_mode: the ablation (blank or shuffled puzzle ids) */
    int map_by_index; /* a checkpoint without row names: its rows by position */
} run_opts;

/* The model for the dataset: its puzzle rows follow their names (the identifiers.json beside the checkpoint,
   which tinyrec-train writes) to the dataset's ids; a checkpoint without names only with --map-by-index. */
static int load_model(tr_ctx *ctx, const run_opts *ro, const tr_dataset *ds, tr_model **m) {
    tr_model_load_options lo;
    tr_model_config cfg;
    tr_init_from_options io;
    tr_init_from_summary s;
    char idp[4096];
    FILE *f;
    memset(&lo, 0, sizeof lo), memset(&io, 0, sizeof io);
    lo.num_puzzle_identifiers = (int)ds->meta.num_puzzle_identifiers;
    if (tr_checkpoint_identifiers_path(ro->checkpoint, idp, sizeof idp) == TR_OK && (f = fopen(idp, "rb")) != NULL) {
        fclose(f);
        io.names = (const char *const *)ds->identifiers, io.num_names = ds->num_identifiers;
        if (tr_checkpoint_read_config(ctx, ro->checkpoint, &cfg) != TR_OK) return fail(ctx);
        cfg.num_puzzle_identifiers = (int)ds->meta.num_puzzle_identifiers;
        if (tr_model_create(ctx, &cfg, m) != TR_OK || tr_model_init_from(*m, ro->checkpoint, &io, &s) != TR_OK) return fail(ctx);
        if (!ro->quiet || s.added)
            fprintf(stderr, "%spuzzle rows by name (%s): %lld kept, %lld without a row in the checkpoint (zeros), %lld of the checkpoint's unused\n", s.added ? "tinyrec-arc-eval: warning: " : "", idp,
                    (long long)s.kept, (long long)s.added, (long long)s.dropped);
        return 1;
    }
    if (!ro->map_by_index) {
        fprintf(stderr, "tinyrec-arc-eval: %s has no names for its puzzle rows (no %s): its rows cannot be matched to the dataset's tasks by name.\n"
                        "  --map-by-index takes them by position (right only if it was trained on this very build of the dataset)\n", ro->checkpoint, idp);
        return 0;
    }
    return tr_model_load(ctx, ro->checkpoint, &lo, m) == TR_OK ? 1 : fail(ctx);
}

static int run_model(tr_ctx *ctx, const run_opts *ro, tr_arc_votes *v, FILE *save, int64_t *ngroups_used) {
    tr_dataset *ds = NULL;
    tr_model *m = NULL;
    tr_carry *carry = NULL;
    const tr_model_config *cfg;
    const tr_dataset_set *set;
    int32_t *in = NULL, *pid = NULL, *preds = NULL, *idmap = NULL;
    float *qh = NULL;
    int64_t *row_ex = NULL, *row_pz = NULL;
    int64_t g1, p, p_end, e, ex_total = 0, ex_done = 0;
    int B = ro->batch, nrow = 0, ok = 0, steps, t, side = 1, L;
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
    if (!load_model(ctx, ro, ds, &m)) goto done;
    if (ro->dtype >= 0 && tr_model_set_forward_dtype(m, (tr_forward_dtype)ro->dtype) != TR_OK) {
        fprintf(stderr, "tinyrec-arc-eval: %s\n", tr_ctx_last_error(ctx));
        goto done;
    }
    cfg = tr_model_get_config(m);
    tr_prog_print_run(stderr, "device ", m, &g_run); /* where and in what it runs; the summary says it again */
    if (cfg->seq_len != ds->meta.seq_len || cfg->vocab_size != ds->meta.vocab_size) {
        fprintf(stderr, "tinyrec-arc-eval: the model has seq_len %d, vocab_size %d; the dataset %d, %d\n", cfg->seq_len, cfg->vocab_size, ds->meta.seq_len, ds->meta.vocab_size);
        goto done;
    }
    while (side * side < cfg->seq_len) side++;
    if (side * side != cfg->seq_len || side > MAXG) { /* the canvas: 30x30 as the reference, or smaller (tinyrec-data arc --canvas) */
        fprintf(stderr, "tinyrec-arc-eval: %s is not an ARC dataset (seq_len %d, want a square canvas of at most %d)\n", ro->data, cfg->seq_len, MAXG * MAXG);
        goto done;
    }
    L = side * side;
    if (!(idmap = (int32_t *)malloc(sizeof(int32_t) * (size_t)(ds->meta.num_puzzle_identifiers + 1))) ||
        tr_task_id_map(ctx, ro->task_id, ds->meta.num_puzzle_identifiers, ds->meta.blank_identifier_id, 0, idmap) != TR_OK) {
        fprintf(stderr, "tinyrec-arc-eval: %s\n", idmap ? tr_ctx_last_error(ctx) : "out of memory");
        goto done;
    }
    if (ro->task_id != TR_TASK_ID_KEEP) fprintf(stderr, "task-id ablation: every puzzle id %s\n", ro->task_id == TR_TASK_ID_BLANK ? "blank" : "shuffled (seeded permutation of the ids)");
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
    for (t = 0; t < v->num_tasks; t++) v->tasks[t].scored = 0;
    for (p = 0; p < p_end; p++) {
        char base[256];
        int tid, ti;
        uint8_t perm[10];
        int32_t id = set->puzzle_identifiers[p];
        const char *name = id >= 0 && id < ds->num_identifiers ? ds->identifiers[id] : NULL;
        if (!name || tr_arc_parse_name(ctx, name, base, sizeof base, &tid, perm) != TR_OK || (ti = tr_arc_votes_find(v, base)) < 0) {
            fprintf(stderr, "tinyrec-arc-eval: puzzle %lld (id %d, '%s') has no task in test_puzzles.json\n", (long long)p, id, name ? name : "?");
            goto done;
        }
        v->tasks[ti].scored = 1;
        ex_total += set->puzzle_indices[p + 1] - set->puzzle_indices[p];
    }
    in = (int32_t *)malloc(sizeof(int32_t) * (size_t)B * L);
    preds = (int32_t *)malloc(sizeof(int32_t) * (size_t)B * L);
    pid = (int32_t *)malloc(sizeof(int32_t) * (size_t)B);
    qh = (float *)malloc(sizeof(float) * (size_t)B);
    row_ex = (int64_t *)malloc(sizeof(int64_t) * (size_t)B);
    row_pz = (int64_t *)malloc(sizeof(int64_t) * (size_t)B);
    if (!in || !preds || !pid || !qh || !row_ex || !row_pz) {
        fprintf(stderr, "tinyrec-arc-eval: out of memory\n");
        goto done;
    }
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
            tr_dataset_example(ds, 0, e, in + (size_t)nrow * L, NULL);
            pid[nrow] = idmap[set->puzzle_identifiers[p]]; /* (the ablation's id; the votes get the puzzle's name) */
            row_ex[nrow] = e, row_pz[nrow] = p;
            nrow++, e++;
        }
        if (nrow == 0) break;
        {
            tr_batch b;
            tr_step_outputs so;
            int r, n = nrow;
            for (r = n; r < B; r++) { /* padding rows: pad inputs, the blank puzzle */
                memset(in + (size_t)r * L, 0, sizeof(int32_t) * L);
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
                tr_arc_grid g, gi;
                char where[64];
                snprintf(where, sizeof where, "test example %lld", (long long)row_ex[r]);
                tr_arc_crop_canvas(preds + (size_t)r * L, side, g.cells, &g.h, &g.w);
                tr_arc_crop_canvas(in + (size_t)r * L, side, gi.cells, &gi.h, &gi.w); /* the votes check that it maps back */
                if (!add_prediction(ctx, v, save, ds->identifiers[set->puzzle_identifiers[row_pz[r]]], (int)(row_ex[r] - set->puzzle_indices[row_pz[r]]), &g, qh[r], &gi, where)) goto done;
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
    free(in), free(preds), free(pid), free(qh), free(row_ex), free(row_pz), free(idmap);
    tr_carry_destroy(carry);
    tr_model_destroy(m);
    tr_dataset_close(ds);
    return ok;
}

/* ---- scoring and submission ------------------------------------------------------------------ */
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
            "  --dtype T               float32 | bfloat16 | float16 | auto (default: the checkpoint's forward_dtype)\n"
            "  --task-id M             keep | blank | shuffle: the ablation that runs every puzzle with the blank id,\n"
            "                          or with another task's id, to measure what the puzzle embedding carries\n"
            "  --map-by-index          a checkpoint without identifiers.json beside it: puzzle rows by position\n"
            "                          (else the rows follow their names to the dataset's ids)\n"
            "  --threads N, --verbose (per-input votes), --quiet (no progress), --help\n"
            "Positional arguments: CHECKPOINT DATA_DIR (or DATA_DIR alone with --predictions).\n"
            "example: tinyrec-arc-eval runs/arc/best.safetensors data/arc1 --dtype bf16 --output submission.json\n");
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
    tr_arc_votes *votes = NULL;
    FILE *save_f = NULL;
    char *text = NULL;
    size_t len;
    tr_ctx *ctx = NULL;
    tr_ctx_config cc = tr_ctx_config_default();
    char pbuf[4096];
    int64_t ngroups = 0;
    memset(&ro, 0, sizeof ro);
    ro.batch = 16;
    ro.dtype = -1;
    ks[0] = 1, ks[1] = 2, ks[2] = 5, ks[3] = 10;
    /* ---- the command line ---- */
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = !strcmp(a, "--checkpoint") || !strcmp(a, "--data") || !strcmp(a, "--predictions") || !strcmp(a, "--puzzles") || !strcmp(a, "--output") ||
                    !strcmp(a, "--save-predictions") || !strcmp(a, "--max-steps") || !strcmp(a, "--batch") || !strcmp(a, "--limit") || !strcmp(a, "--threads") ||
                    !strcmp(a, "--pass-k") || !strcmp(a, "--dtype") || !strcmp(a, "--task-id");
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
        } else if (!strcmp(a, "--dtype")) {
            if ((ro.dtype = tr_forward_dtype_parse(v)) < 0) {
                fprintf(stderr, "tinyrec-arc-eval: --dtype takes float32, bfloat16, float16 or auto (fp32, bf16, fp16), not '%s'\n", v);
                return 2;
            }
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
        } else if (!strcmp(a, "--task-id")) {
            if ((ro.task_id = tr_task_id_mode_parse(v)) < 0) {
                fprintf(stderr, "tinyrec-arc-eval: --task-id takes keep, blank or shuffle, not '%s'\n", v);
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--map-by-index")) ro.map_by_index = 1;
        else if (!strcmp(a, "--all-inputs")) all_inputs = 1;
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
    /* ---- the tasks with their solutions: test_puzzles.json ---- */
    if (tr_read_file(ctx, puzzles, &text, &len) != TR_OK) {
        fprintf(stderr, "tinyrec-arc-eval: cannot read %s\n", puzzles);
        goto out;
    }
    i = tr_arc_votes_create(ctx, text, len, puzzles, &votes) == TR_OK;
    tr_free(ctx, text);
    if (!i) {
        fail(ctx);
        goto out;
    }
    if (save && !(save_f = fopen(save, "w"))) {
        fprintf(stderr, "tinyrec-arc-eval: cannot write %s\n", save);
        goto out;
    }
    /* ---- the predictions: from a file (the first --limit tasks scored) or from the model ---- */
    if (predictions) {
        int t, n = ro.limit > 0 && ro.limit < votes->num_tasks ? ro.limit : votes->num_tasks;
        for (t = n; t < votes->num_tasks; t++) votes->tasks[t].scored = 0;
        ngroups = n;
        if (!read_predictions(ctx, predictions, votes, save_f)) goto out;
    } else {
        ro.checkpoint = checkpoint, ro.data = data;
        if (!run_model(ctx, &ro, votes, save_f, &ngroups)) goto out;
    }
    if (save_f) {
        i = fclose(save_f);
        save_f = NULL;
        if (i != 0) {
            fprintf(stderr, "tinyrec-arc-eval: cannot write %s\n", save);
            goto out;
        }
    }
    /* ---- rank, write the submission, report ---- */
    tr_arc_votes_rank(votes);
    {
        double pass[MAX_K], all[MAX_K];
        int t, k, nscored = 0, ninputs = 0, missing_preds = 0, missing_sol = 0;
        FILE *sub = NULL;
        if (output) {
            sub = fopen(output, "w");
            if (!sub) {
                fprintf(stderr, "tinyrec-arc-eval: cannot write %s\n", output);
                goto out;
            }
            tr_arc_votes_fput_submission(sub, votes);
        }
        for (t = 0; t < votes->num_tasks; t++) {
            const tr_arc_eval_task *tk = &votes->tasks[t];
            int x;
            if (!tk->scored) continue;
            nscored++;
            for (x = 0; x < tk->num_test; x++) {
                const tr_arc_eval_input *in = &tk->tests[x];
                int j;
                ninputs++;
                missing_sol += in->output.h == 0;
                missing_preds += in->num_answers == 0;
                if (!verbose) continue;
                printf("%s test %d: %lu distinct answers%s\n", tk->name, x, (unsigned long)in->num_answers,
                       in->output.h == 0 ? " (no solution given)" : in->right >= 0 ? "" : ", none right");
                for (j = 0; j < in->num_answers && j < 5; j++) {
                    tr_arc_grid g;
                    int64_t count;
                    double q;
                    tr_arc_votes_answer(votes, t, x, j, &g, &count, &q);
                    printf("  #%lu  count %ld  mean q %.4f  %dx%d%s\n", (unsigned long)(j + 1), (long)count, q, g.h, g.w, j == in->right ? "  <- right" : "");
                }
            }
        }
        if (sub && fclose(sub) != 0) {
            fprintf(stderr, "tinyrec-arc-eval: cannot write %s\n", output);
            goto out;
        }
        tr_arc_votes_score(votes, ks, nk, pass, all);
        printf("ARC evaluation: %d tasks, %d test inputs, %ld predictions, %lu distinct answers%s%s\n", nscored, ninputs, (long)votes->predictions,
               (unsigned long)votes->num_answers, g_run.device ? ", on " : "", g_run.device ? g_run.text : "");
        if (votes->inputs_checked)
            printf("augmentation check: %ld of %ld augmented inputs map back to their task's test input\n", (long)(votes->inputs_checked - votes->inputs_mismatched),
                   (long)votes->inputs_checked);
        if (votes->inputs_mismatched)
            fprintf(stderr, "tinyrec-arc-eval: warning: %ld augmented inputs do not map back to their test input\n", (long)votes->inputs_mismatched);
        if (votes->ignored) printf("%ld predictions of tasks outside the first %lld were ignored\n", (long)votes->ignored, (long long)ngroups);
        if (missing_preds) fprintf(stderr, "tinyrec-arc-eval: warning: %d test inputs have no prediction (they count as wrong)\n", missing_preds);
        if (missing_sol) printf("%d test inputs have no solution in %s: they count as wrong\n", missing_sol, puzzles);
        for (k = 0; k < nk; k++) printf("ARC/pass@%d: %.6f\n", ks[k], pass[k]);
        if (all_inputs)
            for (k = 0; k < nk; k++) printf("ARC/all-inputs/pass@%d: %.6f\n", ks[k], all[k]);
        printf("(pass@K: fraction of each task's test inputs whose answer is among the top K votes, averaged over tasks%s)\n",
               all_inputs ? "; all-inputs: a task counts only when every test input is right" : "");
        if (output) printf("submission: %s (top 2 attempts per test input)\n", output);
        if (save) printf("predictions: %s\n", save);
    }
    rc = 0;
out:
    if (save_f) fclose(save_f);
    tr_arc_votes_destroy(votes);
    tr_ctx_destroy(ctx);
    return rc;
}
