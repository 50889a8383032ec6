/* tinyrec-train: trains a TRM on a dataset in the reference layout (build one with tinyrec-data).

     build/tinyrec-train PRESET [key=value ...] [--resume] [--overwrite]
     build/tinyrec-train sudoku-tiny data_path=data/sudoku checkpoint_path=runs/s1 epochs=20 eval_interval=5
     build/tinyrec-train --resume checkpoint_path=runs/s1          (continues exactly where it stopped)
     build/tinyrec-train --help | --list-presets | --list-keys

   Keys use the reference's names (arch.L_cycles=4, global_batch_size=64, lr=1e-4, ...); run
   --list-keys for all of them. device=cpu|opencl|opencl:N|auto picks where to train (default
   TINYREC_DEVICE, else auto). Beside the checkpoints in checkpoint_path it writes:
     latest.safetensors, latest.state.safetensors   the model (EMA weights when ema is on) and the
                                                   trainer state (live weights, optimizer, carry,
                                                   sampler position), at every evaluation and on exit
     best.safetensors                              the model of the evaluation with the best exact accuracy
     metrics.jsonl                                 one JSON object per logged step and per evaluation
     metrics.svg                                   loss, accuracy and exact accuracy per step
     train_config.txt                              the run's settings, read back by --resume
   Exit status: 0 done (or max_steps reached), 1 runtime error, 2 bad command line or configuration,
   130 stopped by SIGINT or SIGTERM after saving a checkpoint (resume it with --resume).

   Uses only the public API of tinyrec.h: the preset table (tr_preset) and settings by name (tr_key,
   tr_key_parse, tr_key_format) for the configuration, tr_dataset/tr_sampler for the data,
   tr_model/tr_trainer for training and evaluation, tr_model_save/tr_trainer_save for checkpoints,
   tr_metrics_history/tr_metrics_plot_svg for the metrics plot. */
#define TINYREC_IMPLEMENTATION
#include "tinyrec.h"
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PATH_CAP 1024

/* ---- options ---------------------------------------------------------------------------- */

/* One run's settings: the model and training configs the library's keys set (tr_config_keys), and
   the program's own. */
typedef struct options {
    char preset[64];
    tr_model_config arch;
    tr_train_config tc;
    char forward_dtype[32];
    char data_path[PATH_CAP];
    char checkpoint_path[PATH_CAP];
    long epochs, eval_interval, min_eval_interval;
    unsigned long long seed;
    long max_steps;      /* stop (and save) after this many steps in total; 0: no limit */
    int threads;         /* 0: TINYREC_NUM_THREADS or OpenMP's default */
    char device[64];     /* "": TINYREC_DEVICE, else auto */
    int log_interval;    /* steps per metrics.jsonl line */
    double print_interval; /* seconds between plain progress lines when stdout is not a terminal */
    long eval_batches;   /* 0: the whole test split */
    int prefetch;
} options;

/* The program's own keys, described with the library's tr_key so that tr_key_parse/tr_key_format
   read and write them as they do the library's. `before` places each among the library's keys in
   --list-keys and train_config.txt (NULL: at the end); `persist`: written to train_config.txt. */
typedef struct own_key {
    tr_key key;
    const char *before;
    int persist;
} own_key;
#define OWN(name, field, type, size, before, persist, help) {{name, type, TR_KEY_IN_USER, offsetof(options, field), size, 0, help}, before, persist}
static const own_key OWN_KEYS[] = {
    OWN("data_path", data_path, TR_KEY_STRING, PATH_CAP, "global_batch_size", 1, "dataset folder in the reference layout (train/ and test/)"),
    OWN("checkpoint_path", checkpoint_path, TR_KEY_STRING, PATH_CAP, "global_batch_size", 1, "folder for checkpoints, metrics.jsonl and metrics.svg"),
    OWN("epochs", epochs, TR_KEY_LONG, 0, "lr", 1, "training epochs (one epoch = one sample of every group)"),
    OWN("eval_interval", eval_interval, TR_KEY_LONG, 0, "lr", 1, "epochs between evaluations and checkpoints; must divide epochs"),
    OWN("min_eval_interval", min_eval_interval, TR_KEY_LONG, 0, "lr", 1, "evaluate only from this iteration (of eval_interval epochs) on"),
    OWN("seed", seed, TR_KEY_U64, 0, "arch.hidden_size", 1, "seed of the initialisation, the sampler and the ACT exploration"),
    OWN("arch.forward_dtype", forward_dtype, TR_KEY_DTYPE, 32, NULL, 1, "accepted for compatibility; the CPU computes in float32"),
    OWN("max_steps", max_steps, TR_KEY_LONG, 0, NULL, 0, "(tinyrec) stop after this many steps in total and save; 0 = no limit"),
    OWN("threads", threads, TR_KEY_INT, 0, NULL, 1, "(tinyrec) CPU threads; 0 = default. Exact resume needs the same count"),
    OWN("device", device, TR_KEY_STRING, 64, NULL, 1, "(tinyrec) auto | cpu | opencl | opencl:N | opencl:<name>; default TINYREC_DEVICE, else auto"),
    OWN("log_interval", log_interval, TR_KEY_INT, 0, NULL, 1, "(tinyrec) steps per metrics.jsonl line"),
    OWN("print_interval", print_interval, TR_KEY_DOUBLE, 0, NULL, 0, "(tinyrec) seconds between progress lines when not on a terminal"),
    OWN("eval_batches", eval_batches, TR_KEY_LONG, 0, NULL, 1, "(tinyrec) evaluate at most this many test batches; 0 = all"),
    OWN("prefetch", prefetch, TR_KEY_INT, 0, NULL, 0, "(tinyrec) batches prepared ahead by a thread"),
};
#define NOWN ((int)(sizeof OWN_KEYS / sizeof OWN_KEYS[0]))

/* tinyrec-train's key table: every library key a user sets (the dataset-derived ones are the
   program's to set), with the program's own spliced in. */
typedef struct key_row {
    const tr_key *key;
    int persist;
} key_row;
static key_row KEYS[128];
static int NKEYS;

static void add_key(const tr_key *k, int persist) {
    if (NKEYS < (int)(sizeof KEYS / sizeof KEYS[0])) KEYS[NKEYS].key = k, KEYS[NKEYS++].persist = persist;
}

static void build_keys(void) {
    int n, i, j;
    const tr_key *lib = tr_config_keys(&n);
    for (i = 0; i <= n; i++) {
        for (j = 0; j < NOWN; j++)
            if (OWN_KEYS[j].before ? i < n && !strcmp(OWN_KEYS[j].before, lib[i].name) : i == n) add_key(&OWN_KEYS[j].key, OWN_KEYS[j].persist);
        if (i < n && !(lib[i].flags & TR_KEY_DERIVED)) add_key(&lib[i], 1);
    }
}

static const tr_key *find_key(const char *name) {
    int i;
    for (i = 0; i < NKEYS; i++)
        if (!strcmp(KEYS[i].key->name, name)) return KEYS[i].key;
    return NULL;
}

/* The struct a key's offset is into. */
static void *key_base(options *o, const tr_key *k) { return k->in == TR_KEY_IN_MODEL ? (void *)&o->arch : k->in == TR_KEY_IN_TRAIN ? (void *)&o->tc : (void *)o; }

static void list_keys(FILE *f) {
    int i;
    fprintf(f, "valid keys:\n");
    for (i = 0; i < NKEYS; i++) fprintf(f, "  %-26s %s\n", KEYS[i].key->name, KEYS[i].key->help);
}

/* Sets key=value; on failure writes the reason to err and returns 0. ctx gives the library's reasons
   (and checks device= as the run will). */
static int set_key(tr_ctx *ctx, options *o, const char *key, const char *val, char *err, size_t cap) {
    const tr_key *k = find_key(key);
    if (!k) {
        snprintf(err, cap, "unknown key '%s'", key);
        return 0;
    }
    if (!strcmp(k->name, "device")) { /* the library's own check, so that the message and the spellings match it */
        if (!*val || strlen(val) >= k->size) {
            snprintf(err, cap, "key '%s' needs a value of 1 to %zu characters (auto, cpu, opencl, opencl:N, opencl:<name>)", key, k->size - 1);
            return 0;
        }
        if (tr_ctx_set_device(ctx, val) != TR_OK) {
            snprintf(err, cap, "bad value '%s' for key '%s': %s", val, key, tr_ctx_last_error(ctx));
            return 0;
        }
    }
    if (tr_key_parse(ctx, k, key_base(o, k), val) != TR_OK) {
        snprintf(err, cap, "%s", tr_ctx_last_error(ctx));
        return 0;
    }
    return 1;
}

/* ---- presets: the library's table (tr_preset), plus the program's defaults ---------------- */

static void list_presets(FILE *f, const char *indent) {
    int i;
    tr_preset p;
    for (i = 0; tr_preset_get(i, &p) == TR_OK; i++) fprintf(f, "%s%-16s %s\n", indent, p.name, p.help);
}

static void apply_preset(options *o, const tr_preset *p) {
    o->arch = p->model;
    o->tc = p->train;
    o->epochs = p->epochs, o->eval_interval = p->eval_interval;
    snprintf(o->preset, sizeof o->preset, "%s", p->name);
    snprintf(o->forward_dtype, sizeof o->forward_dtype, "bfloat16");
    /* the program's own defaults */
    o->min_eval_interval = 0, o->seed = 0, o->max_steps = 0, o->eval_batches = 0, o->threads = 0, o->device[0] = 0;
    o->log_interval = 1, o->print_interval = 10, o->prefetch = 2;
    if (!o->checkpoint_path[0]) snprintf(o->checkpoint_path, sizeof o->checkpoint_path, "checkpoints/%s", p->name);
}

/* ---- small file helpers ----------------------------------------------------------------- */

static int file_exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* ---- signals ---------------------------------------------------------------------------- */

static volatile sig_atomic_t g_stop = 0;

static void on_signal(int sig) {
    static const char msg[] = "\ntinyrec-train: stopping after this step (signal again to quit without saving)\n";
    if (g_stop) _exit(130);
    g_stop = sig;
    if (write(2, msg, sizeof msg - 1) < 0) g_stop = sig;
}

/* ---- metrics.jsonl ---------------------------------------------------------------------- */

static void json_double(FILE *f, const char *key, double v) {
    if (isfinite(v)) fprintf(f, ",\"%s\":%.9g", key, v);
    else fprintf(f, ",\"%s\":null", key);
}

/* ---- the run ---------------------------------------------------------------------------- */

/* The caller's part of the trainer state: where the sampler is and what the run has seen. */
typedef struct run_pos {
    uint32_t magic, version;
    tr_sampler_state sampler;
    int64_t cur_pass;      /* set pass of the last batch trained (or, after an eval, of the next) */
    int64_t evals;
    int64_t best_step;
    int64_t last_eval_step; /* -1: none */
    double best_exact;     /* -1: no eval yet */
    double epoch;
    double train_seconds;
} run_pos;
#define RUN_POS_MAGIC 0x54525452u /* "TRTR" */

typedef struct run {
    options o;
    tr_ctx *ctx;
    tr_dataset *train_ds, *test_ds;
    tr_sampler *train_s, *test_s;
    tr_sampler_state test_start;
    tr_model *model;
    tr_trainer *trainer;
    tr_carry *eval_carry;
    run_pos pos;
    tr_metrics_history hist; /* for metrics.svg */
    FILE *jsonl;
    char model_path[PATH_CAP + 32], state_path[PATH_CAP + 64], best_path[PATH_CAP + 32], jsonl_path[PATH_CAP + 32], svg_path[PATH_CAP + 32],
        config_path[PATH_CAP + 32];
    int tty, bar_shown;
    double last_bar;       /* when the evaluation bar was drawn */
    long skipped;          /* steps skipped for NaN/inf losses or gradients in this process */
    long total_steps, target_steps, total_iters;
    double t_start, step0_time;
    long step0;
} run;

static void clear_bar(run *r) {
    if (r->tty && r->bar_shown) {
        fputs("\r\033[K", stdout);
        r->bar_shown = 0;
    }
}

/* The library's warnings (a skipped NaN step, a train setting that differs from the saved state,
   a resized puzzle table) go to stderr; errors are reported from tr_ctx_last_error. */
static void on_log(void *user, tr_log_level level, const char *message) {
    if (level != TR_LOG_WARN) return;
    clear_bar((run *)user);
    fprintf(stderr, "tinyrec-train: warning: %s\n", message);
}

static void fmt_dur(double s, char *buf, size_t cap) {
    long t = (long)(s + 0.5);
    if (!isfinite(s) || s < 0) snprintf(buf, cap, "?");
    else if (t >= 3600) snprintf(buf, cap, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else if (t >= 60) snprintf(buf, cap, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, cap, "%lds", t);
}

static void status_msg(run *r, const char *fmt, ...) {
    va_list ap;
    clear_bar(r);
    va_start(ap, fmt);
    vfprintf(stdout, fmt, ap);
    va_end(ap);
    fflush(stdout);
}

static int write_config(run *r) {
    char tmp[PATH_CAP + 40], v[PATH_CAP];
    FILE *f;
    int i;
    snprintf(tmp, sizeof tmp, "%s.tmp", r->config_path);
    f = fopen(tmp, "wb");
    if (!f) return -1;
    fprintf(f, "# tinyrec-train run settings (key=value); --resume reads them back, command-line keys override\n");
    fprintf(f, "preset=%s\n", r->o.preset);
    for (i = 0; i < NKEYS; i++) {
        if (!KEYS[i].persist) continue;
        tr_key_format(KEYS[i].key, key_base(&r->o, KEYS[i].key), v, sizeof v);
        if (!v[0]) continue; /* an unset device: a resume follows TINYREC_DEVICE again */
        fprintf(f, "%s=%s\n", KEYS[i].key->name, v);
    }
    if (fclose(f) != 0 || rename(tmp, r->config_path) != 0) return -1;
    return 0;
}

/* Saves the checkpoint (tr_checkpoint_save: latest, and best when is_best; the model files with
   the EMA weights when EMA is on, the trainer state with the live ones and our run_pos, sampler
   position included), then the plot. A failed save (a full disk, a read-only folder) leaves the
   previous checkpoint as it was, and the run stops: the error names the file and the reason. */
static int save_checkpoint(run *r, const tr_sampler_state *sampler_pos, int is_best) {
    r->pos.sampler = *sampler_pos;
    if (tr_checkpoint_save(r->trainer, r->o.checkpoint_path, is_best, &r->pos, sizeof r->pos) != TR_OK) {
        clear_bar(r);
        fprintf(stderr, "tinyrec-train: saving the checkpoint failed: %s\n", tr_ctx_last_error(r->ctx));
        return -1;
    }
    if (tr_metrics_plot_svg(r->ctx, r->svg_path, r->o.preset, &r->hist) != TR_OK) status_msg(r, "tinyrec-train: warning: cannot write %s\n", r->svg_path);
    return 0;
}

/* tr_evaluate calls this before each test batch: the progress bar on a terminal, and a signal
   stops the evaluation. */
static int eval_progress(void *user, const char *stage, int64_t done, int64_t total) {
    run *r = (run *)user;
    (void)stage;
    if (r->tty && done > 0 && tr_time_seconds() - r->last_bar > 0.25) {
        printf("\r\033[K  evaluating: batch %lld/%lld", (long long)done, (long long)total);
        fflush(stdout);
        r->bar_shown = 1;
        r->last_bar = tr_time_seconds();
    }
    return g_stop != 0;
}

/* Evaluates on the test split from its start (tr_evaluate: the reference's halt_max_steps
   supervision steps per batch), with the EMA weights swapped in when EMA is on. Returns 1 when
   done, 0 when interrupted by a signal, -1 on error. */
static int evaluate(run *r, tr_eval_result *e) {
    tr_status st = tr_sampler_set_state(r->test_s, &r->test_start);
    int swapped = 0;
    if (st == TR_OK && r->o.tc.ema && (st = tr_trainer_swap_ema(r->trainer)) == TR_OK) swapped = 1;
    if (st == TR_OK) st = tr_evaluate(r->model, r->eval_carry, r->test_s, r->o.eval_batches, eval_progress, r, e);
    if (swapped && tr_trainer_swap_ema(r->trainer) != TR_OK && st == TR_OK) st = TR_ERR_DEVICE;
    clear_bar(r);
    if (st == TR_ERR_INTERRUPTED) return 0;
    if (st == TR_OK) return 1;
    fprintf(stderr, "tinyrec-train: evaluation failed: %s (%s)\n", tr_ctx_last_error(r->ctx), tr_status_string(st));
    return -1;
}

/* The end of an iteration (eval_interval epochs): evaluate when due, then checkpoint. Returns 1,
   0 when interrupted (nothing saved), -1 on error. */
static int eval_and_checkpoint(run *r, long step, const tr_sampler_state *pos_before, int do_eval) {
    tr_eval_result e;
    int best = 0, rc;
    if (do_eval && r->test_s) {
        rc = evaluate(r, &e);
        if (rc <= 0) return rc;
        best = e.count > 0 && e.exact_accuracy > r->pos.best_exact;
        if (best) r->pos.best_exact = e.exact_accuracy, r->pos.best_step = step;
        r->pos.evals++;
        r->pos.last_eval_step = step;
        fprintf(r->jsonl, "{\"type\":\"eval\",\"step\":%ld,\"epoch\":%.6g", step, r->pos.epoch);
        json_double(r->jsonl, "accuracy", e.accuracy);
        json_double(r->jsonl, "exact_accuracy", e.exact_accuracy);
        json_double(r->jsonl, "steps", e.steps);
        json_double(r->jsonl, "lm_loss", e.lm_loss);
        json_double(r->jsonl, "q_halt_accuracy", e.q_halt_accuracy);
        fprintf(r->jsonl, ",\"count\":%.0f,\"best\":%s,\"seconds\":%.3f}\n", e.count, best ? "true" : "false", e.seconds);
        fflush(r->jsonl);
        {
            tr_metrics_point p;
            p.step = step, p.loss = e.lm_loss, p.accuracy = e.accuracy, p.exact_accuracy = e.exact_accuracy;
            tr_metrics_history_add(r->ctx, &r->hist, 1, &p); /* out of memory: the plot misses a point */
        }
        status_msg(r, "eval  step %ld  epoch %.2f  accuracy %.4f  exact %.4f  steps %.2f  lm_loss %.4f  (%.0f puzzles, %.1fs)%s\n", step, r->pos.epoch, e.accuracy,
                   e.exact_accuracy, e.steps, e.lm_loss, e.count, e.seconds, best ? "  * best" : "");
    }
    if (save_checkpoint(r, pos_before, best) != 0) return -1;
    return 1;
}

/* The progress bar on a terminal, else a plain line every print_interval seconds. */
static void show_progress(run *r, long step, double loss, double acc, double exact, double act) {
    double now = tr_time_seconds(), rate = 0, eta;
    char etab[32], elb[32], skb[48] = "";
    long done = step - r->step0;
    if (r->step0_time > 0 && done > 0) rate = done / r->step0_time;
    eta = rate > 0 ? (r->target_steps - step) / rate : NAN;
    fmt_dur(eta, etab, sizeof etab);
    fmt_dur(now - r->t_start, elb, sizeof elb);
    if (r->skipped) snprintf(skb, sizeof skb, "  %ld skipped (NaN/inf)", r->skipped);
    if (r->tty) {
        int w = 24, i, fill = r->target_steps > 0 ? (int)((double)w * step / r->target_steps) : 0;
        char bar[64];
        for (i = 0; i < w; i++) bar[i] = i < fill ? '#' : '.';
        bar[w] = 0;
        printf("\r\033[K[%s] %ld/%ld ep %.2f loss %.4f acc %.4f exact %.4f act %.2f %.0f samples/s ETA %s%s", bar, step, r->target_steps, r->pos.epoch, loss, acc, exact,
               act, rate * r->o.tc.global_batch_size, etab, skb);
        r->bar_shown = 1;
    } else {
        printf("step %ld/%ld  epoch %.2f  loss %.4f  accuracy %.4f  exact %.4f  act_steps %.2f  %.1f samples/s  elapsed %s  ETA %s%s\n", step, r->target_steps, r->pos.epoch,
               loss, acc, exact, act, rate * r->o.tc.global_batch_size, elb, etab, skb);
    }
    fflush(stdout);
}

/* A signal stopped the run after the checkpoint was saved. */
static int interrupted(run *r, long step) {
    status_msg(r, "interrupted at step %ld: saved %s (continue with --resume checkpoint_path=%s)\n", step, r->model_path, r->o.checkpoint_path);
    return 130;
}

static void add_metrics(tr_metrics *sum, const tr_metrics *m) {
    sum->count += m->count, sum->accuracy += m->accuracy, sum->exact_accuracy += m->exact_accuracy, sum->q_halt_accuracy += m->q_halt_accuracy;
    sum->steps += m->steps, sum->loss += m->loss, sum->lm_loss += m->lm_loss, sum->q_halt_loss += m->q_halt_loss;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: tinyrec-train PRESET data_path=DIR [key=value ...] [--overwrite]\n"
            "       tinyrec-train --resume checkpoint_path=DIR [key=value ...]\n"
            "       tinyrec-train --list-presets | --list-keys | --help\n\n"
            "Trains a TRM on a dataset in the reference layout (build one with tinyrec-data), e.g.\n"
            "  tinyrec-data sudoku --output-dir data/sudoku --generate 20000 --generate-test 200 --clues 50 --num-aug 0\n"
            "  tinyrec-train sudoku-tiny data_path=data/sudoku checkpoint_path=runs/sudoku epochs=2\n"
            "  tinyrec-solve runs/sudoku/best.safetensors puzzles.txt\n\n"
            "Keys use the reference's names (arch.L_cycles=4, global_batch_size=64, lr=1e-4, ema=true, ...);\n"
            "eval_interval is in epochs and must divide epochs. vocab_size, seq_len and the puzzle-id count come\n"
            "from the dataset. Every eval_interval epochs the test split is evaluated (EMA weights when ema=true,\n"
            "halt_max_steps supervision steps per batch) and a checkpoint is written to checkpoint_path:\n"
            "latest.safetensors (+ .state.safetensors for --resume), best.safetensors (best exact accuracy),\n"
            "metrics.jsonl, metrics.svg and train_config.txt. --resume reads train_config.txt back (keys on the\n"
            "command line override it) and continues exactly, with the same losses as an uninterrupted run\n"
            "(on the same machine, device and thread count). Ctrl-C or SIGTERM finishes the current step, saves\n"
            "latest and exits with status 130; a second signal quits at once.\n"
            "device= picks where to train: auto (an OpenCL GPU when there is one, else the CPU), cpu, opencl (the\n"
            "first OpenCL GPU, else the first OpenCL device), opencl:N or opencl:<name> (tinyrec-devices lists them);\n"
            "the default is TINYREC_DEVICE, else auto. A device that fails falls back to the CPU with a warning.\n"
            "--overwrite starts a new run in a checkpoint_path that already holds one.\n\n"
            "Exit status: 0 done or max_steps reached, 1 runtime error, 2 bad command line, 130 interrupted.\n\npresets:\n");
    list_presets(f, "  ");
    fputc('\n', f);
    list_keys(f);
}

static int die_usage(const char *msg) {
    fprintf(stderr, "tinyrec-train: %s\n\n", msg);
    list_keys(stderr);
    fprintf(stderr, "\n(tinyrec-train --help for the usage)\n");
    return 2;
}

static int fail(run *r, const char *what) {
    clear_bar(r);
    fprintf(stderr, "tinyrec-train: %s: %s\n", what, r->ctx ? tr_ctx_last_error(r->ctx) : "");
    return 1;
}

static void cleanup(run *r) {
    if (r->jsonl) fclose(r->jsonl);
    if (r->eval_carry) tr_carry_destroy(r->eval_carry);
    if (r->train_s) tr_sampler_destroy(r->train_s);
    if (r->test_s) tr_sampler_destroy(r->test_s);
    if (r->trainer) tr_trainer_destroy(r->trainer);
    if (r->model) tr_model_destroy(r->model);
    if (r->train_ds) tr_dataset_close(r->train_ds);
    if (r->test_ds) tr_dataset_close(r->test_ds);
    tr_metrics_history_free(r->ctx, &r->hist);
    if (r->ctx) tr_ctx_destroy(r->ctx);
}

/* Reads the run's train_config.txt (for --resume) into r->o: the preset first, then its keys.
   Returns -1 when it did, else the exit status. */
static int read_run_config(run *r, tr_ctx *kctx, const char *cp, const tr_preset *p, int *eval_interval_given) {
    char cfgp[PATH_CAP + 32], err[PATH_CAP + 128], line[PATH_CAP + 256];
    int have = 0, rc = -1;
    tr_preset fp;
    FILE *f;
    snprintf(cfgp, sizeof cfgp, "%s/train_config.txt", cp);
    if (!(f = fopen(cfgp, "rb"))) {
        fprintf(stderr, "tinyrec-train: --resume: no run to continue in '%s' (cannot read %s: %s)\n", cp, cfgp, strerror(errno));
        return 1;
    }
    while (rc < 0 && fgets(line, sizeof line, f)) {
        char *eq;
        line[strcspn(line, "\n")] = 0;
        if (line[0] == '#' || !(eq = strchr(line, '='))) continue;
        *eq = 0;
        if (!strcmp(line, "preset")) {
            if (tr_preset_find(eq + 1, &fp) != TR_OK) {
                fprintf(stderr, "tinyrec-train: %s names an unknown preset '%s'\n", cfgp, eq + 1);
                rc = 1;
                break;
            }
            if (p && strcmp(p->name, fp.name)) fprintf(stderr, "tinyrec-train: warning: the run was started with preset %s; '%s' is ignored\n", fp.name, p->name);
            snprintf(r->o.checkpoint_path, sizeof r->o.checkpoint_path, "%s", cp);
            apply_preset(&r->o, &fp);
            have = 1;
        } else if (!have) {
            fprintf(stderr, "tinyrec-train: %s: the first setting must be preset=NAME\n", cfgp);
            rc = 1;
        } else {
            if (!strcmp(line, "eval_interval")) *eval_interval_given = 1;
            if (!set_key(kctx, &r->o, line, eq + 1, err, sizeof err)) {
                fprintf(stderr, "tinyrec-train: %s: %s\n", cfgp, err);
                rc = 1;
            }
        }
    }
    fclose(f);
    if (rc < 0 && !have) {
        fprintf(stderr, "tinyrec-train: %s holds no preset\n", cfgp);
        rc = 1;
    }
    return rc;
}

/* Training settings the library does not check (or checks only when the run has started). */
static const char *check_options(const options *o) {
    if (!o->data_path[0]) return "data_path=DIR is required (a dataset built by tinyrec-data)";
    if (o->tc.global_batch_size < 1) return "global_batch_size must be >= 1";
    if (o->epochs < 1) return "epochs must be >= 1";
    if (o->eval_interval < 1) return "eval_interval must be >= 1";
    if (!(o->tc.lr >= 0) || !(o->tc.puzzle_emb_lr >= 0)) return "lr and puzzle_emb_lr must be >= 0";
    if (!(o->tc.lr_min_ratio >= 0 && o->tc.lr_min_ratio <= 1)) return "lr_min_ratio must be in [0, 1]";
    if (o->tc.lr_warmup_steps < 0) return "lr_warmup_steps must be >= 0";
    if (!(o->tc.beta1 >= 0 && o->tc.beta1 < 1) || !(o->tc.beta2 >= 0 && o->tc.beta2 < 1)) return "beta1 and beta2 must be in [0, 1)";
    if (!(o->tc.ema_decay >= 0 && o->tc.ema_decay < 1)) return "ema_rate must be in [0, 1)";
    if (o->log_interval < 1) return "log_interval must be >= 1";
    if (o->max_steps < 0 || o->threads < 0 || o->eval_batches < 0 || o->prefetch < 0 || o->min_eval_interval < 0)
        return "max_steps, threads, eval_batches, prefetch and min_eval_interval must be >= 0";
    if (!(o->print_interval >= 0)) return "print_interval must be >= 0";
    return NULL;
}

/* The command line into r->o: a preset (or --resume's saved settings), then key=value overrides.
   Returns -1 to go on and train (mode: 0 new run, 1 resume, 2 new run over an old one), else the
   exit status. */
static int configure(run *r, tr_ctx *kctx, int argc, char **argv, int *mode) {
    const char *preset_arg = NULL, *kv[512], *bad;
    int nkv = 0, resume = 0, overwrite = 0, i, eval_interval_given = 0;
    char err[PATH_CAP + 128];
    tr_preset p;
    options *o = &r->o;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--list-presets")) {
            list_presets(stdout, "");
            return 0;
        } else if (!strcmp(a, "--list-keys")) {
            list_keys(stdout);
            return 0;
        } else if (!strcmp(a, "--resume")) resume = 1;
        else if (!strcmp(a, "--overwrite")) overwrite = 1;
        else if (a[0] == '-') {
            snprintf(err, sizeof err, "unknown option '%s' (options: --resume, --overwrite, --list-presets, --list-keys, --help)", a);
            return die_usage(err);
        } else if (strchr(a, '=')) {
            if (nkv == 512) return die_usage("too many key=value arguments");
            kv[nkv++] = a;
        } else if (!preset_arg) preset_arg = a;
        else {
            snprintf(err, sizeof err, "unexpected argument '%s' (one preset, then key=value pairs)", a);
            return die_usage(err);
        }
    }
    for (i = 0; i < nkv; i++)
        if (!strncmp(kv[i], "preset=", 7)) {
            if (preset_arg && strcmp(preset_arg, kv[i] + 7)) return die_usage("two different presets given");
            preset_arg = kv[i] + 7;
        }
    if (preset_arg && tr_preset_find(preset_arg, &p) != TR_OK) {
        fprintf(stderr, "tinyrec-train: unknown preset '%s'; presets:\n", preset_arg);
        list_presets(stderr, "  ");
        return 2;
    }
    if (resume) {
        /* the run's folder: checkpoint_path from the command line, else the preset's default */
        char cp[PATH_CAP];
        int rc;
        cp[0] = 0;
        for (i = 0; i < nkv; i++)
            if (!strncmp(kv[i], "checkpoint_path=", 16)) snprintf(cp, sizeof cp, "%s", kv[i] + 16);
        if (!cp[0]) {
            if (!preset_arg) return die_usage("--resume needs checkpoint_path=DIR (the folder of the run to continue)");
            snprintf(cp, sizeof cp, "checkpoints/%s", p.name);
        }
        if ((rc = read_run_config(r, kctx, cp, preset_arg ? &p : NULL, &eval_interval_given)) >= 0) return rc;
    } else if (!preset_arg) {
        fprintf(stderr, "tinyrec-train: name a preset (or --resume a run); presets:\n");
        list_presets(stderr, "  ");
        fprintf(stderr, "(tinyrec-train --help for the usage)\n");
        return 2;
    } else
        apply_preset(o, &p);
    for (i = 0; i < nkv; i++) {
        char key[128];
        const char *eq = strchr(kv[i], '=');
        size_t kl = (size_t)(eq - kv[i]);
        if (kl >= sizeof key) kl = sizeof key - 1;
        memcpy(key, kv[i], kl);
        key[kl] = 0;
        if (!strcmp(key, "preset")) continue;
        if (!strcmp(key, "eval_interval")) eval_interval_given = 1;
        if (!set_key(kctx, o, key, eq + 1, err, sizeof err)) return die_usage(err);
    }
    if ((bad = check_options(o)) != NULL) return die_usage(bad);
    if (o->epochs % o->eval_interval) {
        if (eval_interval_given) {
            snprintf(err, sizeof err, "eval_interval %ld must divide epochs %ld", o->eval_interval, o->epochs);
            return die_usage(err);
        }
        fprintf(stderr, "tinyrec-train: note: the preset's eval_interval %ld does not divide epochs %ld; evaluating every %ld epochs\n", o->eval_interval, o->epochs, o->epochs);
        o->eval_interval = o->epochs; /* the preset's interval does not fit the epochs asked for */
    }
    *mode = resume ? 1 : overwrite ? 2 : 0;
    return -1;
}

static int run_main(run *r, int mode);

int main(int argc, char **argv) {
    static run R;
    tr_ctx_config cc = tr_ctx_config_default();
    tr_ctx *kctx = NULL;
    int mode = 0, rc;
    build_keys();
    /* a context for reading settings: it holds the reasons of bad values */
    cc.device = "cpu", cc.num_threads = 1;
    if (tr_ctx_create(&cc, &kctx) != TR_OK) {
        fprintf(stderr, "tinyrec-train: cannot create a context\n");
        return 1;
    }
    rc = configure(&R, kctx, argc, argv, &mode);
    tr_ctx_destroy(kctx);
    if (rc >= 0) return rc;
    rc = run_main(&R, mode);
    cleanup(&R);
    return rc;
}

/* mode: 0 new run, 1 resume, 2 new run over an old one */
static int run_main(run *r, int mode) {
    options *o = &r->o;
    tr_ctx_config cc = tr_ctx_config_default();
    tr_preset preset, *p = &preset;
    tr_status st;
    tr_sampler_config sc;
    tr_train_config tc;
    char cfgjson[2][4096], buf[PATH_CAP + 64];
    int B = o->tc.global_batch_size;
    long step;
    struct sigaction sa;
    tr_metrics win, disp; /* sums over the metrics.jsonl window and since the last progress line */
    double last_print = 0, d_loss = NAN, d_acc = 0, d_exact = 0, d_act = 0;
    int n_window = 0, win_skipped = 0;
    int64_t batches_per_pass;

    memset(&win, 0, sizeof win);
    memset(&disp, 0, sizeof disp);
    tr_preset_find(o->preset, p); /* found when the options were read */
    cc.num_threads = o->threads;
    cc.seed = (uint64_t)o->seed;
    cc.log = on_log, cc.log_user = r;
    cc.device = "cpu"; /* replaced below, where a bad TINYREC_DEVICE gets a readable message */
    if ((st = tr_ctx_create(&cc, &r->ctx)) != TR_OK) {
        fprintf(stderr, "tinyrec-train: cannot create a context (%s)\n", tr_status_string(st));
        return 1;
    }
    if (tr_ctx_set_device(r->ctx, o->device[0] ? o->device : getenv("TINYREC_DEVICE")) != TR_OK) {
        fprintf(stderr, "tinyrec-train: %s%s\n", tr_ctx_last_error(r->ctx), o->device[0] ? "" : " (from TINYREC_DEVICE)");
        return 2;
    }
    /* the dataset decides vocab_size, seq_len and the puzzle-id count */
    if (tr_dataset_open(r->ctx, o->data_path, "train", 0, &r->train_ds) != TR_OK) return fail(r, "cannot open the train split");
    snprintf(buf, sizeof buf, "%s/test/dataset.json", o->data_path);
    if (file_exists(buf)) {
        if (tr_dataset_open(r->ctx, o->data_path, "test", 0, &r->test_ds) != TR_OK) return fail(r, "cannot open the test split");
        if (r->test_ds->meta.vocab_size != r->train_ds->meta.vocab_size || r->test_ds->meta.seq_len != r->train_ds->meta.seq_len) {
            fprintf(stderr, "tinyrec-train: %s: the test split (vocab_size %d, seq_len %d) does not match the train split (%d, %d)\n", o->data_path, r->test_ds->meta.vocab_size,
                    r->test_ds->meta.seq_len, r->train_ds->meta.vocab_size, r->train_ds->meta.seq_len);
            return 1;
        }
    } else
        fprintf(stderr, "tinyrec-train: warning: %s has no test split; checkpoints are written without evaluation\n", o->data_path);
    {
        const tr_dataset_meta *m = &r->train_ds->meta;
        if ((p->data_vocab_size && m->vocab_size != p->data_vocab_size) || (p->data_seq_len && m->seq_len != p->data_seq_len)) {
            fprintf(stderr,
                    "tinyrec-train: dataset %s has vocab_size %d and seq_len %d, but preset %s is for %s with vocab_size %d and seq_len %d%s.\n"
                    "  Pick the preset that fits the dataset (tinyrec-train --list-presets), or 'tiny' for any dataset.\n",
                    o->data_path, m->vocab_size, m->seq_len, p->name, p->task, p->data_vocab_size, p->data_seq_len ? p->data_seq_len : m->seq_len, p->data_seq_len ? "" : " (any)");
            return 2;
        }
        if (m->num_puzzle_identifiers > 2147483647) {
            fprintf(stderr, "tinyrec-train: dataset %s: num_puzzle_identifiers %lld is too large\n", o->data_path, (long long)m->num_puzzle_identifiers);
            return 1;
        }
        o->arch.vocab_size = m->vocab_size;
        o->arch.seq_len = m->seq_len;
        o->arch.num_puzzle_identifiers = (int)m->num_puzzle_identifiers;
        if (tr_model_config_validate(r->ctx, &o->arch) != TR_OK) {
            fprintf(stderr, "tinyrec-train: bad model configuration: %s\n", tr_ctx_last_error(r->ctx));
            return 2;
        }
        r->total_steps = (long)floor((double)o->epochs * (double)m->total_groups * m->mean_puzzle_examples / B);
        if (r->total_steps < 1) {
            fprintf(stderr, "tinyrec-train: %ld epochs of %lld groups make less than one batch of %d; lower global_batch_size\n", o->epochs, (long long)m->total_groups, B);
            return 2;
        }
        r->total_iters = o->epochs / o->eval_interval;
    }
    snprintf(r->model_path, sizeof r->model_path, "%s/" TR_CHECKPOINT_LATEST, o->checkpoint_path);
    snprintf(r->state_path, sizeof r->state_path, "%s/" TR_CHECKPOINT_LATEST_STATE, o->checkpoint_path);
    snprintf(r->best_path, sizeof r->best_path, "%s/" TR_CHECKPOINT_BEST, o->checkpoint_path);
    snprintf(r->jsonl_path, sizeof r->jsonl_path, "%s/metrics.jsonl", o->checkpoint_path);
    snprintf(r->svg_path, sizeof r->svg_path, "%s/metrics.svg", o->checkpoint_path);
    snprintf(r->config_path, sizeof r->config_path, "%s/train_config.txt", o->checkpoint_path);
    if (mode == 0 && (file_exists(r->model_path) || file_exists(r->state_path) || file_exists(r->config_path))) {
        fprintf(stderr, "tinyrec-train: %s already holds a run; pass --resume to continue it or --overwrite to start over\n", o->checkpoint_path);
        return 2;
    }
    if (tr_mkdir_p(r->ctx, o->checkpoint_path) != TR_OK) return fail(r, "cannot create the checkpoint folder");

    /* model and trainer */
    tc = o->tc;
    tc.total_steps = r->total_steps;
    if (mode == 1) {
        tr_model_load_options lo;
        size_t len = 0;
        memset(&lo, 0, sizeof lo);
        lo.num_puzzle_identifiers = o->arch.num_puzzle_identifiers;
        if (tr_model_load(r->ctx, r->model_path, &lo, &r->model) != TR_OK) return fail(r, "cannot load the checkpoint to resume");
        tr_model_config_to_json(&o->arch, cfgjson[0], sizeof cfgjson[0], NULL);
        tr_model_config_to_json(tr_model_get_config(r->model), cfgjson[1], sizeof cfgjson[1], NULL);
        if (strcmp(cfgjson[0], cfgjson[1])) {
            fprintf(stderr, "tinyrec-train: the arch settings differ from the checkpoint's; a resumed run keeps its model.\n  checkpoint: %s\n  requested:  %s\n", cfgjson[1],
                    cfgjson[0]);
            return 2;
        }
        if (tr_trainer_create(r->model, &tc, &r->trainer) != TR_OK) return fail(r, "cannot create the trainer");
        if (tr_trainer_load(r->trainer, r->state_path, &r->pos, sizeof r->pos, &len) != TR_OK) return fail(r, "cannot load the trainer state");
        if (len != sizeof r->pos || r->pos.magic != RUN_POS_MAGIC || r->pos.version != 1) {
            fprintf(stderr, "tinyrec-train: %s was not written by this version of tinyrec-train\n", r->state_path);
            return 1;
        }
    } else {
        if (tr_model_create(r->ctx, &o->arch, &r->model) != TR_OK) return fail(r, "cannot create the model");
        if (tr_trainer_create(r->model, &tc, &r->trainer) != TR_OK) return fail(r, "cannot create the trainer");
        memset(&r->pos, 0, sizeof r->pos);
        r->pos.magic = RUN_POS_MAGIC, r->pos.version = 1;
        r->pos.best_exact = -1, r->pos.best_step = -1, r->pos.last_eval_step = -1;
    }
    step = tr_trainer_step_count(r->trainer);

    /* samplers: train draws eval_interval epochs per pass, as the reference's iterations */
    sc = tr_sampler_config_default();
    sc.global_batch_size = B, sc.epochs_per_iter = (int)o->eval_interval, sc.seed = (uint64_t)o->seed, sc.prefetch = o->prefetch;
    if (o->eval_interval > 2147483647L) return die_usage("eval_interval is too large");
    if (tr_sampler_create(r->ctx, r->train_ds, &sc, &r->train_s) != TR_OK) return fail(r, "cannot create the train sampler");
    if (mode == 1 && tr_sampler_set_state(r->train_s, &r->pos.sampler) != TR_OK) return fail(r, "cannot restore the sampler position");
    if (r->test_ds) {
        sc.test_mode = 1, sc.epochs_per_iter = 1;
        if (tr_sampler_create(r->ctx, r->test_ds, &sc, &r->test_s) != TR_OK) return fail(r, "cannot create the test sampler");
        tr_sampler_get_state(r->test_s, &r->test_start);
        if (tr_carry_create(r->model, B, &r->eval_carry) != TR_OK) return fail(r, "cannot create the evaluation carry");
    }
    batches_per_pass = tr_sampler_batches_per_pass(r->train_s);
    r->target_steps = r->total_steps;
    if (batches_per_pass > 0 && batches_per_pass * r->total_iters < r->target_steps) r->target_steps = (long)(batches_per_pass * r->total_iters);
    if (o->max_steps > 0 && o->max_steps < r->target_steps) r->target_steps = o->max_steps;

    /* metrics file: a resumed run keeps the lines up to its checkpoint */
    if (mode == 1) {
        if (tr_metrics_history_load(r->ctx, r->jsonl_path, step, 1, &r->hist) != TR_OK) {
            fprintf(stderr, "tinyrec-train: cannot rewrite %s: %s\n", r->jsonl_path, tr_ctx_last_error(r->ctx));
            return 1;
        }
        r->jsonl = fopen(r->jsonl_path, "ab");
    } else {
        remove(r->best_path);
        r->jsonl = fopen(r->jsonl_path, "wb");
    }
    if (!r->jsonl) {
        fprintf(stderr, "tinyrec-train: cannot open %s: %s\n", r->jsonl_path, strerror(errno));
        return 1;
    }
    if (write_config(r) != 0) {
        fprintf(stderr, "tinyrec-train: cannot write %s: %s\n", r->config_path, strerror(errno));
        return 1;
    }

    r->tty = isatty(fileno(stdout));
    {
        const tr_model_config *c = tr_model_get_config(r->model);
        size_t tb = 0, ib = 0;
        tr_model_memory(r->model, B, &tb, &ib);
        printf("tinyrec-train %s: preset %s, %zu parameters (D=%d, %s, T=%d, n=%d, M_max=%d), %d threads, %s kernels, ~%.0f MB\n", tr_version_string(), o->preset,
               tr_model_num_params(r->model), c->hidden_size, c->mlp_t ? "mlp_t" : "attention", c->H_cycles, c->L_cycles, c->halt_max_steps, tr_ctx_num_threads(r->ctx),
               tr_ctx_simd_name(r->ctx), tb / 1048576.0);
        printf("data %s: %lld train examples in %lld groups, %lld test examples; batch %d, %ld epochs = %ld steps, eval every %ld epochs\n", o->data_path,
               (long long)r->train_ds->num_examples, (long long)r->train_ds->meta.total_groups, r->test_ds ? (long long)r->test_ds->num_examples : 0LL, B, o->epochs,
               r->total_steps, o->eval_interval);
        /* the device opened with the model: this is where the run happens, fallbacks included */
        printf("device %s\n", tr_ctx_device_name(r->ctx));
        if (mode == 1) printf("resuming at step %ld (epoch %.2f) from %s\n", step, r->pos.epoch, o->checkpoint_path);
        printf("checkpoints, metrics.jsonl and metrics.svg in %s\n", o->checkpoint_path);
        fflush(stdout);
    }

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    r->t_start = tr_time_seconds();
    r->step0 = step;
    r->step0_time = 0;
    for (;;) {
        tr_batch b;
        tr_batch_info info;
        tr_metrics mt;
        tr_sampler_state before;
        double t0;
        tr_sampler_get_state(r->train_s, &before);
        if (g_stop || (o->max_steps > 0 && step >= o->max_steps)) {
            if (save_checkpoint(r, &before, 0) != 0) return 1;
            if (!g_stop) {
                status_msg(r, "reached max_steps %ld: saved %s\n", o->max_steps, r->model_path);
                break;
            }
            return interrupted(r, step);
        }
        if (step >= r->total_steps) { /* the schedule is over before the pass (rounding): final evaluation */
            if (r->pos.last_eval_step != step) {
                int rc = eval_and_checkpoint(r, step, &before, 1);
                if (rc < 0) return 1;
                if (rc == 0) continue; /* interrupted: save above */
            }
            break;
        }
        t0 = tr_time_seconds();
        if (tr_sampler_next(r->train_s, &b, &info) != TR_OK) return fail(r, "the train sampler failed");
        if (info.pass != r->pos.cur_pass) { /* an iteration of eval_interval epochs is over */
            int64_t finished = r->pos.cur_pass;
            int rc;
            r->step0_time += tr_time_seconds() - t0;
            r->pos.cur_pass = info.pass;
            rc = eval_and_checkpoint(r, step, &before, finished >= o->min_eval_interval);
            if (rc < 0) return 1;
            if (rc == 0) { /* interrupted during evaluation: save so that resuming evaluates again */
                r->pos.cur_pass = finished;
                if (save_checkpoint(r, &before, 0) != 0) return 1;
                return interrupted(r, step);
            }
            if (info.pass >= r->total_iters) break; /* all epochs done */
            if (g_stop) return interrupted(r, step);
            t0 = tr_time_seconds();
        }
        /* A step whose loss or gradients are NaN or infinite is skipped by the library (a warning
           names it; the weights stay as they were); max_nonfinite_steps of them in a row stop the
           run with TR_ERR_NONFINITE, before anything is saved: the last checkpoint stays good. */
        if ((st = tr_trainer_step(r->trainer, &b, &mt)) != TR_OK) {
            if (st != TR_ERR_NONFINITE) return fail(r, "training step failed");
            clear_bar(r);
            fprintf(stderr, "tinyrec-train: training stopped: %s\n  nothing was saved after the last checkpoint in %s; lower lr (or check the data) and --resume\n",
                    tr_ctx_last_error(r->ctx), o->checkpoint_path);
            return 1;
        }
        step++;
        r->step0_time += tr_time_seconds() - t0;
        r->pos.train_seconds += tr_time_seconds() - t0;
        r->pos.epoch = info.epoch;
        /* metrics.jsonl: means over the window's trained steps, and the count of skipped ones */
        if (mt.skipped) win_skipped++, r->skipped++;
        else {
            tr_metrics per_row = mt; /* the losses are sums over the batch */
            per_row.loss /= B, per_row.lm_loss /= B, per_row.q_halt_loss /= B;
            add_metrics(&win, &per_row), n_window++;
        }
        if (step % o->log_interval == 0) {
            double c = win.count, lr = tr_lr_schedule(&tc, tc.lr, step);
            tr_metrics_point pt;
            fprintf(r->jsonl, "{\"type\":\"train\",\"step\":%ld,\"epoch\":%.6g,\"lr\":%.6g", step, info.epoch, lr);
            if (n_window) fprintf(r->jsonl, ",\"loss\":%.17g", win.loss / n_window);
            else fprintf(r->jsonl, ",\"loss\":null");
            json_double(r->jsonl, "lm_loss", win.lm_loss / n_window);
            json_double(r->jsonl, "q_halt_loss", win.q_halt_loss / n_window);
            json_double(r->jsonl, "accuracy", c ? win.accuracy / c : NAN);
            json_double(r->jsonl, "exact_accuracy", c ? win.exact_accuracy / c : NAN);
            json_double(r->jsonl, "q_halt_accuracy", c ? win.q_halt_accuracy / c : NAN);
            json_double(r->jsonl, "steps", c ? win.steps / c : NAN);
            fprintf(r->jsonl, ",\"count\":%.0f,\"skipped\":%d,\"samples_per_s\":%.2f,\"time\":%.3f}\n", c, win_skipped,
                    r->step0_time > 0 ? (step - r->step0) * (double)B / r->step0_time : 0.0, r->pos.train_seconds);
            fflush(r->jsonl);
            pt.step = step, pt.loss = win.loss / n_window, pt.accuracy = c ? win.accuracy / c : NAN, pt.exact_accuracy = c ? win.exact_accuracy / c : NAN;
            if (n_window) tr_metrics_history_add(r->ctx, &r->hist, 0, &pt);
            memset(&win, 0, sizeof win);
            n_window = win_skipped = 0;
        }
        /* progress display: loss smoothed, accuracies over the rows that halted since the last update */
        if (!mt.skipped) {
            d_loss = isfinite(d_loss) ? 0.9 * d_loss + 0.1 * mt.loss / B : mt.loss / B;
            add_metrics(&disp, &mt);
        }
        {
            double now = tr_time_seconds();
            int due = r->tty ? now - last_print >= 0.2 : (now - last_print >= o->print_interval || step == r->step0 + 1);
            if (due || step >= r->target_steps) {
                if (disp.count > 0) d_acc = disp.accuracy / disp.count, d_exact = disp.exact_accuracy / disp.count, d_act = disp.steps / disp.count;
                memset(&disp, 0, sizeof disp);
                show_progress(r, step, d_loss, d_acc, d_exact, d_act);
                last_print = now;
            }
        }
    }
    clear_bar(r);
    if (tr_metrics_plot_svg(r->ctx, r->svg_path, o->preset, &r->hist) != TR_OK) fprintf(stderr, "tinyrec-train: warning: cannot write %s\n", r->svg_path);
    printf("done: %ld steps, %.1fs of training", step, r->pos.train_seconds);
    if (r->pos.best_step >= 0) printf("; best exact accuracy %.4f at step %lld (%s)", r->pos.best_exact, (long long)r->pos.best_step, r->best_path);
    printf("\n");
    fflush(stdout);
    return 0;
}
