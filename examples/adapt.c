/* tinyrec-adapt: test-time adaptation of an ARC model to tasks it never saw, then its predictions.

     build/tinyrec-adapt CHECKPOINT TASKS.json [key=value ...]
     build/tinyrec-adapt runs/rules/best.safetensors data/rules/evaluation.json steps=200 output=preds.jsonl
     build/tinyrec-arc-eval --predictions preds.jsonl --puzzles data/rules/evaluation.json

   TASKS.json is one ARC task ({"train": [...], "test": [...]}, named after the file) or a file of tasks keyed by
   name (as test_puzzles.json). For each task the library's adapter (tr_adapter_create, tr_adapt_task) gives each
   augmented version of the task a new puzzle-embedding row, fine-tunes on the demonstration pairs (the builder's
   augmentations: dihedral transforms, colour permutations, translations) for steps= steps or seconds= seconds,
   predicts every test input under every version and votes (tr_arc_votes_*) as tinyrec-arc-eval does. Every
   prediction goes to output= as a predictions file that tinyrec-arc-eval --predictions scores; where the tasks
   give solutions, pass@1 and pass@2 are printed. Deterministic for a seed when only steps bound the work.
   Exit status: 0 done, 1 an error, 2 a bad command line. Uses only the public API of tinyrec.h. */
#define TINYREC_IMPLEMENTATION
#include "tinyrec.h"
#include "tinyrec_prog.h"

typedef struct options {
    tr_adapt_config ac;
    double total_seconds; /* the whole file's budget (0: none) */
    int threads, limit, quiet;
    char device[64], output[4096];
} options;

static void usage(FILE *f) {
    fprintf(f, "usage: tinyrec-adapt CHECKPOINT TASKS.json [key=value ...]\n"
               "Adapts an ARC model (tinyrec-train on a tinyrec-data arc dataset) to each task of TASKS.json (one task, or\n"
               "tasks keyed by name): new puzzle rows for its augmented versions, fine-tuned on its demonstration pairs,\n"
               "then every test input predicted under every version and voted as tinyrec-arc-eval does.\n"
               "keys:\n"
               "  steps=N              fine-tuning steps per task (100; 0: none)\n"
               "  seconds=S            at most S seconds of fine-tuning per task (0: no limit)\n"
               "  total_seconds=S      at most S seconds for the whole file (0: no limit)\n"
               "  versions=N           augmented versions per task, identity first (8)\n"
               "  batch=N              rows per step (32)\n"
               "  trainable=M          all | puzzle_emb | emb_heads: what fine-tunes (puzzle_emb)\n"
               "  lr=X, weight_decay=X AdamATan2 of the dense tensors that train (1e-4, 0.1)\n"
               "  puzzle_emb_lr=X, puzzle_emb_weight_decay=X   sign-SGD of the new rows (1e-2, 0.1)\n"
               "  warmup=N             warmup steps of both rates (10)\n"
               "  translate=0|1        demonstration pairs at random offsets on the canvas (1)\n"
               "  eval_steps=N         ACT steps per prediction (0: the model's halt_max_steps)\n"
               "  task_id=keep|blank   predict with the adapted rows, or the blank row (an ablation) (keep)\n"
               "  seed=N               the versions and the batches (0)\n"
               "  output=FILE          the predictions (JSONL for tinyrec-arc-eval --predictions; default none)\n"
               "  limit=N              only the first N tasks\n"
               "  device=auto|cpu|gpu|opencl:N   where it runs (default TINYREC_DEVICE, else auto); threads=N; quiet=1\n"
               "example: tinyrec-adapt runs/rules/best.safetensors data/rules/evaluation.json steps=200 output=preds.jsonl\n");
}

/* key=value into o; returns 0 with the reason in err when it is not one. */
static int set_key(options *o, const char *kv, char *err, size_t cap) {
    const char *v = strchr(kv, '=');
    char key[64], *end = NULL;
    double d;
    if (!v || v == kv || (size_t)(v - kv) >= sizeof key) return snprintf(err, cap, "'%s' is not key=value", kv), 0;
    snprintf(key, sizeof key, "%.*s", (int)(v - kv), kv);
    v++;
    if (!strcmp(key, "device")) return snprintf(o->device, sizeof o->device, "%s", v), 1;
    if (!strcmp(key, "output")) return snprintf(o->output, sizeof o->output, "%s", v), 1;
    if (!strcmp(key, "trainable")) {
        o->ac.trainable = tr_trainable_parse(v);
        return o->ac.trainable < 0 ? snprintf(err, cap, "trainable: all, puzzle_emb or emb_heads, not '%s'", v), 0 : 1;
    }
    if (!strcmp(key, "task_id")) {
        o->ac.task_id = tr_task_id_mode_parse(v);
        return o->ac.task_id != TR_TASK_ID_KEEP && o->ac.task_id != TR_TASK_ID_BLANK ? snprintf(err, cap, "task_id: keep or blank, not '%s'", v), 0 : 1;
    }
    d = strtod(v, &end);
    if (!*v || *end || !(d >= 0) || d > 1e15) return snprintf(err, cap, "%s: a number >= 0, not '%s'", key, v), 0;
    if (!strcmp(key, "steps")) o->ac.steps = (long)d;
    else if (!strcmp(key, "seconds")) o->ac.seconds = d;
    else if (!strcmp(key, "total_seconds")) o->total_seconds = d;
    else if (!strcmp(key, "versions")) o->ac.versions = (int)(d < 1e6 ? d : 1e6);
    else if (!strcmp(key, "batch")) o->ac.batch_size = (int)(d < 1e6 ? d : 1e6);
    else if (!strcmp(key, "lr")) o->ac.lr = d;
    else if (!strcmp(key, "weight_decay")) o->ac.weight_decay = d;
    else if (!strcmp(key, "puzzle_emb_lr")) o->ac.puzzle_emb_lr = d;
    else if (!strcmp(key, "puzzle_emb_weight_decay")) o->ac.puzzle_emb_weight_decay = d;
    else if (!strcmp(key, "warmup")) o->ac.lr_warmup_steps = (long)d;
    else if (!strcmp(key, "translate")) o->ac.translate = d != 0;
    else if (!strcmp(key, "eval_steps")) o->ac.eval_steps = (int)(d < 1e6 ? d : 1e6);
    else if (!strcmp(key, "seed")) o->ac.seed = (uint64_t)d;
    else if (!strcmp(key, "threads")) o->threads = (int)(d < 4096 ? d : 4096);
    else if (!strcmp(key, "limit")) o->limit = (int)(d < 1e9 ? d : 1e9);
    else if (!strcmp(key, "quiet")) o->quiet = d != 0;
    else return snprintf(err, cap, "unknown key '%s' (tinyrec-adapt --help lists them)", key), 0;
    return 1;
}

/* Each prediction: a line of the predictions file and a vote. */
typedef struct sink {
    tr_ctx *ctx;
    tr_arc_votes *votes;
    FILE *out;
    int failed;
} sink;
static void on_prediction(void *user, const char *puzzle, int test_index, const tr_arc_grid *answer, double q_halt, const tr_arc_grid *input) {
    sink *s = (sink *)user;
    if (s->out) {
        fprintf(s->out, "{\"puzzle\": ");
        tr_json_fput_string(s->out, puzzle);
        fprintf(s->out, ", \"test_index\": %d, \"q_halt\": ", test_index);
        tr_json_fput_number(s->out, q_halt);
        fprintf(s->out, ", \"grid\": ");
        tr_arc_grid_fput(s->out, answer);
        fprintf(s->out, "}\n");
    }
    if (!s->failed && tr_arc_votes_add(s->votes, puzzle, test_index, answer, q_halt, input, "prediction") != TR_OK) {
        fprintf(stderr, "tinyrec-adapt: %s\n", tr_ctx_last_error(s->ctx));
        s->failed = 1;
    }
}

static void on_log(void *user, tr_log_level level, const char *message) {
    (void)user;
    if (level >= TR_LOG_WARN) fprintf(stderr, "tinyrec-adapt: warning: %s\n", message);
}

/* The tasks: one task (named after the file) or an object of tasks keyed by name. The votes read the same
   tasks, as tasks keyed by name (a lone task is wrapped). */
static int read_tasks(tr_ctx *ctx, const char *path, tr_json **root, const tr_json **tasks, char *lone, size_t cap, tr_arc_votes **votes) {
    char *text = NULL, *wrapped = NULL;
    size_t len;
    int ok = 0;
    if (tr_read_file(ctx, path, &text, &len) != TR_OK || tr_json_parse(ctx, text, len, path, root) != TR_OK) goto out;
    if ((*root)->type != TR_JSON_OBJECT) {
        fprintf(stderr, "tinyrec-adapt: %s holds no task (a JSON object)\n", path);
        goto out;
    }
    lone[0] = 0;
    if (tr_json_get(*root, "test") || tr_json_get(*root, "train")) {
        const char *b = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        size_t n = strlen(b) > 5 && !strcmp(b + strlen(b) - 5, ".json") ? strlen(b) - 5 : strlen(b);
        snprintf(lone, cap, "%.*s", (int)(n < cap - 1 ? n : cap - 1), b);
        if (!(wrapped = (char *)malloc(len + cap + 16))) goto out;
        len = (size_t)sprintf(wrapped, "{\"%s\": %s}", lone, text);
    }
    ok = tr_arc_votes_create(ctx, wrapped ? wrapped : text, len, path, votes) == TR_OK;
    *tasks = *root;
out:
    if (!ok && !(*root && (*root)->type != TR_JSON_OBJECT)) fprintf(stderr, "tinyrec-adapt: %s\n", tr_ctx_last_error(ctx));
    free(wrapped);
    tr_free(ctx, text);
    return ok;
}

int main(int argc, char **argv) {
    options o;
    tr_ctx_config cc = tr_ctx_config_default();
    tr_ctx *ctx = NULL;
    tr_adapter *ad = NULL;
    tr_arc_votes *votes = NULL;
    tr_json *root = NULL;
    const tr_json *tasks = NULL;
    const char *pos[2];
    char err[512], lone[256], msg[4096];
    int npos = 0, i, rc = 1, ntasks, t;
    long steps_total = 0;
    double t0, train_s = 0;
    sink sk;
    memset(&o, 0, sizeof o);
    memset(&sk, 0, sizeof sk);
    o.ac = tr_adapt_config_default();
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return usage(stdout), 0;
        if (strchr(argv[i], '=')) {
            if (!set_key(&o, argv[i], err, sizeof err)) return fprintf(stderr, "tinyrec-adapt: %s\n", err), 2;
        } else if (npos < 2) pos[npos++] = argv[i];
        else return fprintf(stderr, "tinyrec-adapt: unexpected argument '%s'\n", argv[i]), 2;
    }
    if (npos != 2) return fprintf(stderr, "tinyrec-adapt: need a checkpoint and a tasks file\n\n"), usage(stderr), 2;
    cc.num_threads = o.threads, cc.log = on_log, cc.device = "cpu";
    if (tr_ctx_create(&cc, &ctx) != TR_OK) return fprintf(stderr, "tinyrec-adapt: cannot create a context\n"), 1;
    if (tr_adapt_config_validate(ctx, &o.ac) != TR_OK) {
        fprintf(stderr, "tinyrec-adapt: %s\n", tr_ctx_last_error(ctx));
        rc = 2;
        goto done;
    }
    if ((i = tr_prog_open_device(ctx, o.device[0] ? o.device : getenv("TINYREC_DEVICE"), 1, 0, msg, sizeof msg)) != 0) {
        fprintf(stderr, "tinyrec-adapt: %s\n", msg);
        rc = i;
        goto done;
    }
    if (!read_tasks(ctx, pos[1], &root, &tasks, lone, sizeof lone, &votes)) goto done;
    sk.ctx = ctx, sk.votes = votes;
    if (o.output[0] && !(sk.out = fopen(o.output, "w"))) {
        fprintf(stderr, "tinyrec-adapt: cannot write %s\n", o.output);
        goto done;
    }
    if (tr_adapter_create(ctx, pos[0], &o.ac, &ad) != TR_OK) {
        fprintf(stderr, "tinyrec-adapt: %s\n", tr_ctx_last_error(ctx));
        goto done;
    }
    ntasks = lone[0] ? 1 : (int)tasks->count;
    if (o.limit > 0 && o.limit < ntasks) ntasks = o.limit;
    for (t = 0; t < votes->num_tasks; t++) votes->tasks[t].scored = t < ntasks;
    if (!o.quiet) {
        tr_prog_print_run(stderr, "device ", tr_adapter_model(ad), NULL);
        fprintf(stderr, "adapting to %d task%s of %s: %d versions, %ld steps of %d rows%s, trainable %s, seed %llu\n", ntasks, ntasks == 1 ? "" : "s", pos[1], o.ac.versions, o.ac.steps,
                o.ac.batch_size, o.ac.seconds > 0 ? " (or the seconds= budget)" : "", tr_trainable_name(o.ac.trainable),
                (unsigned long long)o.ac.seed);
    }
    t0 = tr_time_seconds();
    for (t = 0; t < ntasks && !sk.failed; t++) {
        const char *name = lone[0] ? lone : tasks->keys[t];
        tr_arc_task task;
        tr_adapt_result r;
        double left = o.total_seconds > 0 ? o.total_seconds - (tr_time_seconds() - t0) : -1;
        tr_status st;
        if (o.total_seconds > 0 && left < 0) left = 0;
        if (tr_arc_task_from_json(ctx, lone[0] ? root : &tasks->items[t], name, NULL, &task) != TR_OK) {
            fprintf(stderr, "tinyrec-adapt: %s\n", tr_ctx_last_error(ctx));
            goto done;
        }
        st = tr_adapt_task(ad, name, &task, left, on_prediction, &sk, &r);
        tr_arc_task_free(ctx, &task);
        if (st == TR_ERR_UNSUPPORTED) { /* a grid larger than the canvas: no prediction, the task counts as wrong */
            fprintf(stderr, "tinyrec-adapt: [%d/%d] %s: skipped: %s\n", t + 1, ntasks, name, tr_ctx_last_error(ctx));
            continue;
        }
        if (st != TR_OK) {
            fprintf(stderr, "tinyrec-adapt: task %s: %s\n", name, tr_ctx_last_error(ctx));
            goto done;
        }
        steps_total += r.steps, train_s += r.train_seconds;
        if (!o.quiet)
            fprintf(stderr, "[%d/%d] %s: %d versions, %ld steps in %.2f s (loss %.4f, demonstrations exact %.3f), %lld predictions, %.2f s\n", t + 1, ntasks, name, r.versions, r.steps,
                    r.train_seconds, r.loss, r.train_exact, (long long)r.predictions, r.seconds);
    }
    if (sk.failed) goto done;
    if (sk.out) {
        i = fclose(sk.out);
        sk.out = NULL;
        if (i != 0) {
            fprintf(stderr, "tinyrec-adapt: cannot write %s\n", o.output);
            goto done;
        }
    }
    tr_arc_votes_rank(votes);
    {
        int ks[2] = {1, 2}, nsol = 0, x;
        double pass[2];
        for (t = 0; t < votes->num_tasks; t++)
            for (x = 0; x < votes->tasks[t].num_test; x++) nsol += votes->tasks[t].scored && votes->tasks[t].tests[x].output.h > 0;
        tr_arc_votes_score(votes, ks, 2, pass, NULL);
        printf("adapted %d tasks: %ld steps in %.1f s of fine-tuning, %.1f s in all, %lld predictions\n", ntasks, steps_total, train_s, tr_time_seconds() - t0, (long long)votes->predictions);
        if (nsol) printf("ARC/pass@1: %.6f\nARC/pass@2: %.6f\n", pass[0], pass[1]);
        else printf("(the tasks give no solutions: nothing to score)\n");
        if (o.output[0]) printf("predictions: %s (tinyrec-arc-eval --predictions %s --puzzles %s)\n", o.output, o.output, pos[1]);
    }
    rc = 0;
done:
    if (sk.out) fclose(sk.out);
    tr_adapter_destroy(ad);
    tr_arc_votes_destroy(votes);
    tr_json_free(ctx, root);
    tr_ctx_destroy(ctx);
    return rc;
}
