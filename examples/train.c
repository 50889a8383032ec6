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
   A step whose loss or gradients are NaN or infinite is skipped (a warning; "skipped" in
   metrics.jsonl); max_nonfinite_steps of them in a row stop the run. A checkpoint that cannot be
   written (a full disk, a read-only folder) stops it too; either way the previous checkpoint is kept.
   Exit status: 0 done (or max_steps reached), 1 runtime error, 2 bad command line or configuration,
   130 stopped by SIGINT or SIGTERM after saving a checkpoint (resume it with --resume).

   A walk through the public API of tinyrec.h, in the order a run uses it:
     settings   the preset table (tr_preset_get/find) and settings by name (tr_config_keys, tr_key_parse,
                tr_key_format), with the program's own keys described by the same tr_key records
     data       tr_dataset_open for the train and test splits, tr_sampler for their batches
     training   tr_model_create (or tr_model_load to resume), tr_trainer_create/step/load
     evaluation tr_evaluate over the test sampler, the EMA weights swapped in (tr_trainer_swap_ema)
     saving     tr_mkdir_p, tr_checkpoint_save (latest/best + trainer state + our run position),
                tr_metrics_history and tr_metrics_plot_svg for metrics.svg
     ranks      built with `make MPI=1`: `mpirun -np N build/tinyrec-train ...` trains data-parallel through
                tr_train_config.comm (examples/tinyrec_mpi.h): each rank its slice of every global batch
                (tr_sampler_config.rank) on its own device, rank 0 alone prints and writes files, the
                evaluation is split and reduced (tr_eval_result_reduce) */
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
#if TINYREC_MPI
#include "tinyrec_mpi.h"
static tr_mpi g_mpi;
#endif

#define PATH_CAP 1024

/* ---- settings ----------------------------------------------------------------------------- */

/* One run's settings: the model and training configs the library's keys set, and the program's own. */
typedef struct options {
    char preset[64];
    tr_model_config arch;
    tr_train_config tc;
    char data_path[PATH_CAP];
    char checkpoint_path[PATH_CAP];
    long epochs, eval_interval, min_eval_interval;
    unsigned long long seed;
    long max_steps;        /* stop (and save) after this many steps in total; 0: no limit */
    int threads;           /* 0: TINYREC_NUM_THREADS or OpenMP's default */
    char device[64];       /* "": TINYREC_DEVICE, else auto */
    int log_interval;      /* steps per metrics.jsonl line */
    double print_interval; /* seconds between plain progress lines when stdout is not a terminal */
    long eval_batches;     /* 0: the whole test split */
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
    OWN("max_steps", max_steps, TR_KEY_LONG, 0, NULL, 0, "(tinyrec) stop after this many steps in total and save; 0 = no limit"),
    OWN("threads", threads, TR_KEY_INT, 0, NULL, 1, "(tinyrec) CPU threads; 0 = default. Exact resume needs the same count"),
    OWN("device", device, TR_KEY_STRING, 64, NULL, 1, "(tinyrec) auto | cpu | gpu | opencl | opencl:N | opencl:<name>, optionally + \",cpu\"; default TINYREC_DEVICE, else auto"),
    OWN("log_interval", log_interval, TR_KEY_INT, 0, NULL, 1, "(tinyrec) steps per metrics.jsonl line"),
    OWN("print_interval", print_interval, TR_KEY_DOUBLE, 0, NULL, 0, "(tinyrec) seconds between progress lines when not on a terminal"),
    OWN("eval_batches", eval_batches, TR_KEY_LONG, 0, NULL, 1, "(tinyrec) evaluate at most this many test batches; 0 = all"),
    OWN("prefetch", prefetch, TR_KEY_INT, 0, NULL, 0, "(tinyrec) batches prepared ahead by a thread"),
};
#define NOWN ((int)(sizeof OWN_KEYS / sizeof OWN_KEYS[0]))

/* tinyrec-train's key table: every library key a user sets (the dataset-derived ones are the
   program's to set), with the program's own spliced in. */
static struct {
    const tr_key *key;
    int persist;
} KEYS[128];
static int NKEYS;

static void build_keys(void) {
    int n, i, j;
    const tr_key *lib = tr_config_keys(&n);
    for (i = 0; i <= n; i++) {
        for (j = 0; j < NOWN; j++)
            if (OWN_KEYS[j].before ? i < n && !strcmp(OWN_KEYS[j].before, lib[i].name) : i == n) KEYS[NKEYS].key = &OWN_KEYS[j].key, KEYS[NKEYS++].persist = OWN_KEYS[j].persist;
        if (i < n && !(lib[i].flags & TR_KEY_DERIVED)) KEYS[NKEYS].key = &lib[i], KEYS[NKEYS++].persist = 1;
    }
}

/* The struct a key's offset is into. */
static void *key_base(options *o, const tr_key *k) { return k->in == TR_KEY_IN_MODEL ? (void *)&o->arch : k->in == TR_KEY_IN_TRAIN ? (void *)&o->tc : (void *)o; }

static void list_keys(FILE *f) {
    int i;
    fprintf(f, "valid keys:\n");
    for (i = 0; i < NKEYS; i++) fprintf(f, "  %-26s %s\n", KEYS[i].key->name, KEYS[i].key->help);
}

static void list_presets(FILE *f, const char *indent) {
    int i;
    tr_preset p;
    for (i = 0; tr_preset_get(i, &p) == TR_OK; i++) fprintf(f, "%s%-16s %s\n", indent, p.name, p.help);
}

/* Sets key=value; on failure writes the reason to err and returns 0. ctx holds the library's
   reasons, and checks device= as the run will (so that the message and the spellings match). */
static int set_key(tr_ctx *ctx, options *o, const char *key, const char *val, char *err, size_t cap) {
    const tr_key *k = NULL;
    int i;
    for (i = 0; i < NKEYS && !k; i++)
        if (!strcmp(KEYS[i].key->name, key)) k = KEYS[i].key;
    if (!k) snprintf(err, cap, "unknown key '%s'", key);
    else if (!strcmp(key, "device") && (!*val || strlen(val) >= k->size))
        snprintf(err, cap, "key '%s' needs a value of 1 to %zu characters (auto, cpu, opencl, opencl:N, opencl:<name>)", key, k->size - 1);
    else if (!strcmp(key, "device") && tr_ctx_set_device(ctx, val) != TR_OK) snprintf(err, cap, "key '%s': %s", key, tr_ctx_last_error(ctx));
    else if (tr_key_parse(ctx, k, key_base(o, k), val) != TR_OK) snprintf(err, cap, "%s", tr_ctx_last_error(ctx));
    else return 1;
    return 0;
}

/* A preset is a complete starting point: the model, the training recipe and the run length. */
static void apply_preset(options *o, const tr_preset *p) {
    o->arch = p->model;
    o->tc = p->train;
    o->epochs = p->epochs, o->eval_interval = p->eval_interval;
    snprintf(o->preset, sizeof o->preset, "%s", p->name);
    o->min_eval_interval = 0, o->seed = 0, o->max_steps = 0, o->eval_batches = 0, o->threads = 0, o->device[0] = 0;
    o->log_interval = 1, o->print_interval = 10, o->prefetch = 2;
    if (!o->checkpoint_path[0]) snprintf(o->checkpoint_path, sizeof o->checkpoint_path, "checkpoints/%s", p->name);
}

/* ---- the run's state ------------------------------------------------------------------------ */

/* Our part of the trainer state (the opaque blob of tr_checkpoint_save): where the train sampler
   is and what the run has seen. */
typedef struct run_pos {
    uint32_t magic, version;
    tr_sampler_state sampler;
    int64_t cur_pass; /* set pass of the last batch trained (or, after an eval, of the next) */
    int64_t evals;
    int64_t best_step;
    int64_t last_eval_step; /* -1: none */
    double best_exact;      /* -1: no eval yet */
    double epoch;
    double train_seconds;
} run_pos;
#define RUN_POS_MAGIC 0x54525452u /* "TRTR" */

static struct run {
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
    char model_path[PATH_CAP + 32], state_path[PATH_CAP + 32], best_path[PATH_CAP + 32], jsonl_path[PATH_CAP + 32], svg_path[PATH_CAP + 32],
        config_path[PATH_CAP + 32];
    int tty, bar_shown;
    double last_bar;  /* when the evaluation bar was drawn */
    long skipped;     /* steps skipped for NaN/inf losses or gradients in this process */
    long total_steps, target_steps, total_iters, step0;
    double t_start, step0_time;
    double loss_scale; /* float16: the last step's loss scale (0 otherwise) */
} R;

static volatile sig_atomic_t g_stop = 0;

/* Data-parallel ranks (make MPI=1 under mpirun); NULL: one process. */
static const tr_comm *g_comm = NULL;
static int g_rank = 0, g_size = 1;

static void on_signal(int sig) {
    static const char msg[] = "\ntinyrec-train: stopping after this step (signal again to quit without saving)\n";
    if (g_stop) _exit(130);
    g_stop = sig;
    if (write(2, msg, sizeof msg - 1) < 0) g_stop = sig;
}

/* ---- messages --------------------------------------------------------------------------------- */

static void clear_bar(void) {
    if (R.tty && R.bar_shown) fputs("\r\033[K", stdout), fflush(stdout); /* before a message on stderr */
    R.bar_shown = 0;
}

/* Prints "tinyrec-train: <message>" to stderr and returns code (the exit status). */
static int say(int code, const char *fmt, ...) {
    va_list ap;
    clear_bar();
    fputs("tinyrec-train: ", stderr);
    if (g_size > 1) fprintf(stderr, "rank %d: ", g_rank);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return code;
}

/* The reason of the last failed MPI collective, or "" (the library's message then says the communicator has it). */
static const char *comm_reason(void) {
#if TINYREC_MPI
    return tr_mpi_error(&g_mpi);
#else
    return "";
#endif
}

/* A failed library call: what we did, and the library's reason (and the communicator's). */
static int fail(const char *what) {
    const char *why = comm_reason();
    return say(1, "%s: %s%s%s", what, R.ctx ? tr_ctx_last_error(R.ctx) : "", *why ? ": " : "", why);
}

static int die_usage(const char *msg) {
    say(2, "%s\n", msg);
    list_keys(stderr);
    fprintf(stderr, "\n(tinyrec-train --help for the usage)\n");
    return 2;
}

static void status_msg(const char *fmt, ...) {
    va_list ap;
    if (g_rank != 0) return; /* rank 0 alone reports */
    clear_bar();
    va_start(ap, fmt);
    vfprintf(stdout, fmt, ap);
    va_end(ap);
    fflush(stdout);
}

/* The library's warnings (a skipped NaN step, a train setting that differs from the saved state,
   a resized puzzle table) go to stderr; errors are reported from tr_ctx_last_error. */
static void on_log(void *user, tr_log_level level, const char *message) {
    (void)user;
    if (level == TR_LOG_WARN) say(0, "warning: %s", message); /* every rank: a device fallback is that rank's */
}

static void fmt_dur(double s, char *buf, size_t cap) {
    long t = (long)(s + 0.5);
    if (!isfinite(s) || s < 0) snprintf(buf, cap, "?");
    else if (t >= 3600) snprintf(buf, cap, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else if (t >= 60) snprintf(buf, cap, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, cap, "%lds", t);
}

/* The progress bar on a terminal, else a plain line every print_interval seconds. */
static void show_progress(long step, double loss, double acc, double exact, double act) {
    double now = tr_time_seconds(), rate = 0, eta;
    char etab[32], elb[32], skb[48] = "";
    if (g_rank != 0) return;
    if (R.step0_time > 0 && step > R.step0) rate = (step - R.step0) / R.step0_time;
    eta = rate > 0 ? (R.target_steps - step) / rate : NAN;
    fmt_dur(eta, etab, sizeof etab);
    fmt_dur(now - R.t_start, elb, sizeof elb);
    if (R.skipped) snprintf(skb, sizeof skb, "  %ld skipped (NaN/inf)", R.skipped);
    if (R.tty) {
        int w = 24, i, fill = R.target_steps > 0 ? (int)((double)w * step / R.target_steps) : 0;
        char bar[64];
        for (i = 0; i < w; i++) bar[i] = i < fill ? '#' : '.';
        bar[w] = 0;
        printf("\r\033[K[%s] %ld/%ld ep %.2f loss %.4f acc %.4f exact %.4f act %.2f %.0f samples/s ETA %s%s", bar, step, R.target_steps, R.pos.epoch, loss, acc, exact, act,
               rate * R.o.tc.global_batch_size, etab, skb);
        R.bar_shown = 1;
    } else
        printf("step %ld/%ld  epoch %.2f  loss %.4f  accuracy %.4f  exact %.4f  act_steps %.2f  %.1f samples/s  elapsed %s  ETA %s%s\n", step, R.target_steps, R.pos.epoch, loss,
               acc, exact, act, rate * R.o.tc.global_batch_size, elb, etab, skb);
    fflush(stdout);
}

/* ---- metrics.jsonl ---------------------------------------------------------------------------- */

static void json_double(FILE *f, const char *key, double v) {
    if (isfinite(v)) fprintf(f, ",\"%s\":%.9g", key, v);
    else fprintf(f, ",\"%s\":null", key);
}

/* Adds a step's metrics to a sum, the losses divided by rows (they are sums over the batch). */
static void add_metrics(tr_metrics *sum, const tr_metrics *m, double rows) {
    sum->count += m->count, sum->accuracy += m->accuracy, sum->exact_accuracy += m->exact_accuracy, sum->q_halt_accuracy += m->q_halt_accuracy;
    sum->steps += m->steps, sum->loss += m->loss / rows, sum->lm_loss += m->lm_loss / rows, sum->q_halt_loss += m->q_halt_loss / rows;
    sum->q_continue_loss += m->q_continue_loss / rows;
}

/* One train line: the means over the window's trained steps and the count of skipped ones. */
static void log_train(long step, double epoch, const tr_metrics *w, int n, int skipped) {
    double c = w->count;
    tr_metrics_point pt;
    if (!R.jsonl) return; /* not rank 0 */
    fprintf(R.jsonl, "{\"type\":\"train\",\"step\":%ld,\"epoch\":%.6g,\"lr\":%.6g", step, epoch, tr_lr_schedule(&R.o.tc, R.o.tc.lr, step));
    fprintf(R.jsonl, ",\"forward_dtype\":\"%s\"", tr_forward_dtype_name(tr_model_get_config(R.model)->forward_dtype));
    if (R.loss_scale > 0) fprintf(R.jsonl, ",\"loss_scale\":%.9g", R.loss_scale); /* float16's, at the window's last step */
    if (n) fprintf(R.jsonl, ",\"loss\":%.17g", w->loss / n);
    else fprintf(R.jsonl, ",\"loss\":null");
    json_double(R.jsonl, "lm_loss", w->lm_loss / n);
    json_double(R.jsonl, "q_halt_loss", w->q_halt_loss / n);
    if (tr_model_get_config(R.model)->arch == TR_ARCH_HRM) json_double(R.jsonl, "q_continue_loss", w->q_continue_loss / n); /* its Q-learning */
    json_double(R.jsonl, "accuracy", c ? w->accuracy / c : NAN);
    json_double(R.jsonl, "exact_accuracy", c ? w->exact_accuracy / c : NAN);
    json_double(R.jsonl, "q_halt_accuracy", c ? w->q_halt_accuracy / c : NAN);
    json_double(R.jsonl, "steps", c ? w->steps / c : NAN);
    fprintf(R.jsonl, ",\"count\":%.0f,\"skipped\":%d,\"samples_per_s\":%.2f,\"time\":%.3f}\n", c, skipped,
            R.step0_time > 0 ? (step - R.step0) * (double)R.o.tc.global_batch_size / R.step0_time : 0.0, R.pos.train_seconds);
    fflush(R.jsonl);
    pt.step = step, pt.loss = w->loss / n, pt.accuracy = c ? w->accuracy / c : NAN, pt.exact_accuracy = c ? w->exact_accuracy / c : NAN;
    if (n) tr_metrics_history_add(R.ctx, &R.hist, 0, &pt); /* out of memory: the plot misses a point */
}

/* ---- checkpoints and evaluation ---------------------------------------------------------------- */

/* train_config.txt: the run's settings as key=value lines, which --resume reads back. */
static int write_config(void) {
    char tmp[PATH_CAP + 40], v[PATH_CAP];
    FILE *f;
    int i;
    snprintf(tmp, sizeof tmp, "%s.tmp", R.config_path);
    if (!(f = fopen(tmp, "wb"))) return -1;
    fprintf(f, "# tinyrec-train run settings (key=value); --resume reads them back, command-line keys override\npreset=%s\n", R.o.preset);
    for (i = 0; i < NKEYS; i++) {
        if (!KEYS[i].persist) continue;
        tr_key_format(KEYS[i].key, key_base(&R.o, KEYS[i].key), v, sizeof v);
        if (v[0]) fprintf(f, "%s=%s\n", KEYS[i].key->name, v); /* an unset device: a resume follows TINYREC_DEVICE again */
    }
    return fclose(f) != 0 || rename(tmp, R.config_path) != 0 ? -1 : 0;
}

/* Saves the checkpoint (latest, and best when is_best) with our run_pos, sampler position included,
   then the plot. A save that fails (a full disk, a read-only folder) leaves the previous checkpoint
   as it was; the run stops with the library's reason, which names the file. */
static int save_checkpoint(const tr_sampler_state *sampler_pos, int is_best) {
    R.pos.sampler = *sampler_pos;
    if (tr_checkpoint_save(R.trainer, R.o.checkpoint_path, is_best, &R.pos, sizeof R.pos) != TR_OK) {
        fail("saving the checkpoint failed");
        return -1;
    }
    if (g_rank == 0 && tr_metrics_plot_svg(R.ctx, R.svg_path, R.o.preset, &R.hist) != TR_OK) status_msg("tinyrec-train: warning: cannot write %s\n", R.svg_path);
    return 0;
}

static int interrupted(long step) {
    status_msg("interrupted at step %ld: saved %s (continue with --resume checkpoint_path=%s)\n", step, R.model_path, R.o.checkpoint_path);
    return 130;
}

/* tr_evaluate calls this before each test batch: the bar on a terminal; a signal stops it. */
static int eval_progress(void *user, const char *stage, int64_t done, int64_t total) {
    (void)user, (void)stage;
    if (g_size > 1) return 0; /* ranks stop together, at a step (stop_requested) */
    if (R.tty && done > 0 && tr_time_seconds() - R.last_bar > 0.25) {
        printf("\r\033[K  evaluating: batch %lld/%lld", (long long)done, (long long)total);
        fflush(stdout);
        R.bar_shown = 1;
        R.last_bar = tr_time_seconds();
    }
    return g_stop != 0;
}

/* The end of an iteration (eval_interval epochs): evaluate the test split from its start when due
   (with the EMA weights swapped in when EMA is on), then checkpoint. Returns 1, 0 when interrupted
   (nothing saved), -1 on error. */
static int eval_and_checkpoint(long step, const tr_sampler_state *pos_before, int do_eval) {
    tr_eval_result e;
    tr_metrics_point pt;
    tr_status st;
    int best = 0, swapped = 0;
    if (do_eval && R.test_s) {
        st = tr_sampler_set_state(R.test_s, &R.test_start);
        if (st == TR_OK && R.o.tc.ema && (st = tr_trainer_swap_ema(R.trainer)) == TR_OK) swapped = 1;
        if (st == TR_OK) st = tr_evaluate(R.model, R.eval_carry, R.test_s, R.o.eval_batches, eval_progress, NULL, &e);
        if (st == TR_OK) st = tr_eval_result_reduce(R.ctx, g_comm, &e); /* each rank evaluated its slice */
        if (swapped && tr_trainer_swap_ema(R.trainer) != TR_OK && st == TR_OK) st = TR_ERR_DEVICE;
        clear_bar();
        if (st == TR_ERR_INTERRUPTED) return 0;
        if (st != TR_OK)
            return say(-1, "evaluation failed: %s (%s)%s%s", tr_ctx_last_error(R.ctx), tr_status_string(st), *comm_reason() ? ": " : "", comm_reason());
        best = e.count > 0 && e.exact_accuracy > R.pos.best_exact;
        if (best) R.pos.best_exact = e.exact_accuracy, R.pos.best_step = step;
        R.pos.evals++;
        R.pos.last_eval_step = step;
        if (R.jsonl) { /* rank 0 */
            fprintf(R.jsonl, "{\"type\":\"eval\",\"step\":%ld,\"epoch\":%.6g", step, R.pos.epoch);
            json_double(R.jsonl, "accuracy", e.accuracy);
            json_double(R.jsonl, "exact_accuracy", e.exact_accuracy);
            json_double(R.jsonl, "steps", e.steps);
            json_double(R.jsonl, "lm_loss", e.lm_loss);
            json_double(R.jsonl, "q_halt_accuracy", e.q_halt_accuracy);
            fprintf(R.jsonl, ",\"count\":%.0f,\"best\":%s,\"seconds\":%.3f}\n", e.count, best ? "true" : "false", e.seconds);
            fflush(R.jsonl);
        }
        pt.step = step, pt.loss = e.lm_loss, pt.accuracy = e.accuracy, pt.exact_accuracy = e.exact_accuracy;
        tr_metrics_history_add(R.ctx, &R.hist, 1, &pt);
        status_msg("eval  step %ld  epoch %.2f  accuracy %.4f  exact %.4f  steps %.2f  lm_loss %.4f  (%.0f puzzles, %.1fs)%s\n", step, R.pos.epoch, e.accuracy, e.exact_accuracy,
                   e.steps, e.lm_loss, e.count, e.seconds, best ? "  * best" : "");
    }
    return save_checkpoint(pos_before, best) != 0 ? -1 : 1;
}

/* ---- the command line ----------------------------------------------------------------------- */

static void usage(FILE *f) {
    fprintf(f,
            "usage: tinyrec-train PRESET data_path=DIR [key=value ...] [--overwrite]\n"
            "       tinyrec-train --resume checkpoint_path=DIR [key=value ...]\n"
            "       tinyrec-train --list-presets | --list-keys | --help\n\n"
            "Trains a TRM or an HRM (hrm-* presets) on a dataset in the reference layout (build one with tinyrec-data), e.g.\n"
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
            "A step with a NaN or infinite loss or gradient is skipped (counted as \"skipped\" in metrics.jsonl);\n"
            "max_nonfinite_steps of them in a row stop the run with status 1, as does a checkpoint that cannot be\n"
            "written (a full disk); the previous checkpoint is kept either way.\n"
            "device= picks where to train: auto (an OpenCL GPU when there is one, else the CPU), cpu, opencl (the\n"
            "first OpenCL GPU, else the first OpenCL device), opencl:N or opencl:<name> (tinyrec-devices lists them);\n"
            "gpu (a GPU or an error), the default is TINYREC_DEVICE, else auto. A named device (gpu, opencl...) that\n"
            "cannot be opened stops the run at the start (\"opencl:1,cpu\": the CPU then); one that fails during the\n"
            "run falls back to the CPU with a warning. Under mpirun, device auto gives each rank its own GPU and\n"
            "stops the job when a rank finds none on a machine that has GPUs (TINYREC_EXPECT_GPU=0 or device=cpu to\n"
            "train on the CPUs; TINYREC_EXPECT_GPU=1 asks for a GPU anywhere).\n"
            "--overwrite starts a new run in a checkpoint_path that already holds one.\n\n"
            "Exit status: 0 done or max_steps reached, 1 runtime error, 2 bad command line, 130 interrupted.\n\npresets:\n");
    list_presets(f, "  ");
    fputc('\n', f);
    list_keys(f);
}

/* Reads the run's train_config.txt (for --resume) into R.o: the preset first, then its keys.
   Returns -1 when it did, else the exit status. */
static int read_run_config(tr_ctx *kctx, const char *cp, const tr_preset *p, int *eval_interval_given) {
    char cfgp[PATH_CAP + 32], err[PATH_CAP + 128], line[PATH_CAP + 256];
    int have = 0, rc = -1;
    tr_preset fp;
    FILE *f;
    snprintf(cfgp, sizeof cfgp, "%s/train_config.txt", cp);
    if (!(f = fopen(cfgp, "rb"))) return say(1, "--resume: no run to continue in '%s' (cannot read %s: %s)", cp, cfgp, strerror(errno));
    while (rc < 0 && fgets(line, sizeof line, f)) {
        char *eq;
        line[strcspn(line, "\n")] = 0;
        if (line[0] == '#' || !(eq = strchr(line, '='))) continue;
        *eq = 0;
        if (!strcmp(line, "preset")) {
            if (tr_preset_find(eq + 1, &fp) != TR_OK) rc = say(1, "%s names an unknown preset '%s'", cfgp, eq + 1);
            else {
                if (p && strcmp(p->name, fp.name)) say(0, "warning: the run was started with preset %s; '%s' is ignored", fp.name, p->name);
                snprintf(R.o.checkpoint_path, sizeof R.o.checkpoint_path, "%s", cp);
                apply_preset(&R.o, &fp);
                have = 1;
            }
        } else if (!have)
            rc = say(1, "%s: the first setting must be preset=NAME", cfgp);
        else {
            if (!strcmp(line, "eval_interval")) *eval_interval_given = 1;
            if (!set_key(kctx, &R.o, line, eq + 1, err, sizeof err)) rc = say(1, "%s: %s", cfgp, err);
        }
    }
    fclose(f);
    return rc < 0 && !have ? say(1, "%s holds no preset", cfgp) : rc;
}

/* Settings the library does not check (tr_train_config_validate checks the training recipe). */
static const char *check_options(tr_ctx *kctx, const options *o) {
    if (!o->data_path[0]) return "data_path=DIR is required (a dataset built by tinyrec-data)";
    if (o->epochs < 1) return "epochs must be >= 1";
    if (o->eval_interval < 1 || o->eval_interval > 2147483647L) return "eval_interval must be >= 1 (and fit an int)";
    if (o->log_interval < 1) return "log_interval must be >= 1";
    if (o->max_steps < 0 || o->threads < 0 || o->eval_batches < 0 || o->prefetch < 0 || o->min_eval_interval < 0)
        return "max_steps, threads, eval_batches, prefetch and min_eval_interval must be >= 0";
    if (!(o->print_interval >= 0)) return "print_interval must be >= 0";
    return tr_train_config_validate(kctx, &o->tc) != TR_OK ? tr_ctx_last_error(kctx) : NULL;
}

/* The command line into R.o: a preset (or --resume's saved settings), then key=value overrides.
   Returns -1 to go on and train (mode: 0 new run, 1 resume, 2 new run over an old one), else the
   exit status. */
static int configure(tr_ctx *kctx, int argc, char **argv, int *mode) {
    const char *preset_arg = NULL, *kv[512], *bad;
    int nkv = 0, resume = 0, overwrite = 0, i, eval_interval_given = 0;
    char err[PATH_CAP + 128];
    tr_preset p;
    options *o = &R.o;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return usage(stdout), 0;
        if (!strcmp(a, "--list-presets")) return list_presets(stdout, ""), 0;
        if (!strcmp(a, "--list-keys")) return list_keys(stdout), 0;
        if (!strcmp(a, "--resume")) resume = 1;
        else if (!strcmp(a, "--overwrite")) overwrite = 1;
        else if (a[0] == '-') {
            snprintf(err, sizeof err, "unknown option '%s' (options: --resume, --overwrite, --list-presets, --list-keys, --help)", a);
            return die_usage(err);
        } else if (strchr(a, '=')) {
            if (nkv == 512) return die_usage("too many key=value arguments");
            kv[nkv++] = a;
        } else if (!preset_arg)
            preset_arg = a;
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
        say(2, "unknown preset '%s'; presets:", preset_arg);
        return list_presets(stderr, "  "), 2;
    }
    if (resume) { /* the run's folder: checkpoint_path from the command line, else the preset's default */
        char cp[PATH_CAP] = "";
        int rc;
        for (i = 0; i < nkv; i++)
            if (!strncmp(kv[i], "checkpoint_path=", 16)) snprintf(cp, sizeof cp, "%s", kv[i] + 16);
        if (!cp[0] && !preset_arg) return die_usage("--resume needs checkpoint_path=DIR (the folder of the run to continue)");
        if (!cp[0]) snprintf(cp, sizeof cp, "checkpoints/%s", p.name);
        if ((rc = read_run_config(kctx, cp, preset_arg ? &p : NULL, &eval_interval_given)) >= 0) return rc;
    } else if (!preset_arg) {
        say(2, "name a preset (or --resume a run); presets:");
        list_presets(stderr, "  ");
        fprintf(stderr, "(tinyrec-train --help for the usage)\n");
        return 2;
    } else
        apply_preset(o, &p);
    for (i = 0; i < nkv; i++) {
        char key[128];
        size_t kl = (size_t)(strchr(kv[i], '=') - kv[i]);
        snprintf(key, sizeof key, "%.*s", (int)kl, kv[i]);
        if (!strcmp(key, "preset")) continue;
        if (!strcmp(key, "eval_interval")) eval_interval_given = 1;
        if (!set_key(kctx, o, key, kv[i] + kl + 1, err, sizeof err)) return die_usage(err);
    }
    if ((bad = check_options(kctx, o)) != NULL) return die_usage(bad);
    if (o->epochs % o->eval_interval) {
        if (eval_interval_given) {
            snprintf(err, sizeof err, "eval_interval %ld must divide epochs %ld", o->eval_interval, o->epochs);
            return die_usage(err);
        }
        say(0, "note: the preset's eval_interval %ld does not divide epochs %ld; evaluating every %ld epochs", o->eval_interval, o->epochs, o->epochs);
        o->eval_interval = o->epochs; /* the preset's interval does not fit the epochs asked for */
    }
    *mode = resume ? 1 : overwrite ? 2 : 0;
    return -1;
}

/* ---- setting up a run ---------------------------------------------------------------------- */

static int file_exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Whether this process must train on a GPU when its device is auto: TINYREC_EXPECT_GPU=1 / 0 says so;
   unset, a rank of several does when the machine has GPUs (an NVIDIA or AMD ROCm device node), whatever
   its OpenCL driver list says: a launcher may hand the ranks another list than the launching shell's
   (Open MPI 4.1 cut OCL_ICD_FILENAMES to its first entry, and the ranks found PoCL's CPU alone). A single
   process goes by what OpenCL lists, which is what its shell sees. */
static int expect_gpu(void) {
    static const char *const nodes[] = {"/dev/nvidia0", "/dev/nvidia1", "/dev/kfd"};
    const char *e = getenv("TINYREC_EXPECT_GPU");
    size_t i;
    if (e && *e) return atoi(e) != 0;
    if (g_size < 2) return 0;
    for (i = 0; i < sizeof nodes / sizeof *nodes; i++)
        if (access(nodes[i], F_OK) == 0) return 1;
    return 0;
}

/* OCL_ICD_FILENAMES and OCL_ICD_VENDORS as main found them (CUDA's libOpenCL.so.1 rewrites the first when
   it starts). */
static char g_icd_files[256], g_icd_vendors[256];

/* A device that did not open, and the run stops: the library's reason, then what this process's
   OpenCL listed (platforms and devices) and the likely cause. */
static int device_failed(const char *dev) {
    tr_opencl_list l;
    char seen[1024] = "";
    size_t n = 0;
    int i, st = say(1, "%s", tr_ctx_last_error(R.ctx));
    if (tr_opencl_list_devices(R.ctx, &l) == TR_OK) {
        if (!l.loaded || !l.num_platforms) n += (size_t)snprintf(seen, sizeof seen, "%s", l.note);
        for (i = 0; i < l.num_platforms && n < sizeof seen; i++)
            n += (size_t)snprintf(seen + n, sizeof seen - n, "%splatform %d \"%.60s\"", i ? "; " : "", i, l.platforms[i].name);
        for (i = 0; i < l.num_devices && n < sizeof seen; i++)
            n += (size_t)snprintf(seen + n, sizeof seen - n, "%sopencl:%d %.60s [%s]", i ? ", " : ": ", l.devices[i].index, l.devices[i].name, l.devices[i].type);
        say(0, "  OpenCL here (%s): %s", l.loaded ? l.library : "no library", seen);
    }
    tr_opencl_list_free(R.ctx, &l);
    say(0, "  likely cause: the OpenCL driver list in this %s's environment (OCL_ICD_FILENAMES=%s, OCL_ICD_VENDORS=%s) lacks the GPU's driver%s;\n"
           "  name the driver (OCL_ICD_FILENAMES=libnvidia-opencl.so.1 in the command, after mpirun: mpirun -np N env OCL_ICD_FILENAMES=... tinyrec-train ...),\n"
           "  or TINYREC_OPENCL_DRIVERS=<path of the driver>, or train on the CPU on purpose: device=cpu, or '%s,cpu'%s",
        g_size > 1 ? "rank" : "process", g_icd_files, g_icd_vendors, g_size > 1 ? " (a launcher such as mpirun may hand its ranks another list than the shell's)" : "", dev,
        g_size > 1 ? ", or TINYREC_EXPECT_GPU=0" : "");
    return st;
}

/* With several ranks and device auto: this rank's GPU, the (local rank)-th of this machine's OpenCL GPUs
   (round robin when there are fewer), so that the ranks of a machine share its GPUs; none: "gpu" when a
   GPU is expected (expect_gpu: the open fails, with the reason), else "auto". */
static const char *rank_device(char *buf, size_t cap) {
    tr_opencl_list l;
    int i, ngpu = 0, want;
    snprintf(buf, cap, "%s", expect_gpu() ? "gpu" : "auto");
    if (tr_opencl_list_devices(R.ctx, &l) == TR_OK) {
        for (i = 0; i < l.num_devices; i++) ngpu += l.devices[i].is_gpu;
        want = ngpu ? g_comm->local_rank % ngpu : -1;
        for (i = 0; i < l.num_devices && want >= 0; i++)
            if (l.devices[i].is_gpu && want-- == 0) snprintf(buf, cap, "opencl:%d", l.devices[i].index);
    }
    tr_opencl_list_free(R.ctx, &l);
    return buf;
}

/* The context, the data (which decides vocab_size, seq_len and the puzzle-id count), the model and
   trainer (new, or loaded to resume), the samplers, metrics.jsonl and train_config.txt. Returns -1
   when ready, else the exit status. */
static int setup(int mode) {
    options *o = &R.o;
    tr_ctx_config cc = tr_ctx_config_default();
    tr_sampler_config sc = tr_sampler_config_default();
    tr_preset p;
    const tr_dataset_meta *m;
    char buf[PATH_CAP + 64], pick[32];
    const char *dev;
    int B = o->tc.global_batch_size;
    int64_t per_pass;
    tr_preset_find(o->preset, &p); /* found when the options were read */
    cc.num_threads = o->threads, cc.seed = (uint64_t)o->seed, cc.log = on_log;
    cc.device = "cpu"; /* replaced below, where a bad TINYREC_DEVICE gets a readable message */
    if (tr_ctx_create(&cc, &R.ctx) != TR_OK) return say(1, "cannot create a context");
    dev = o->device[0] ? o->device : getenv("TINYREC_DEVICE");
    if (g_size > 1 && (!dev || !*dev || !strcmp(dev, "auto"))) dev = rank_device(pick, sizeof pick); /* device= still wins */
    else if ((!dev || !*dev || !strcmp(dev, "auto")) && expect_gpu()) dev = "gpu";
    if (tr_ctx_set_device(R.ctx, dev) != TR_OK)
        return say(2, "%s%s", tr_ctx_last_error(R.ctx), o->device[0] ? "" : " (from TINYREC_DEVICE)");
    if (tr_ctx_open_device(R.ctx) != TR_OK) return device_failed(dev && *dev ? dev : "auto"); /* now: at the start, not at the model */
    if (B % g_size) return say(2, "global_batch_size %d is not a multiple of the %d ranks", B, g_size);
    o->tc.comm = g_comm;
    if (tr_dataset_open(R.ctx, o->data_path, "train", 0, &R.train_ds) != TR_OK) return fail("cannot open the train split");
    m = &R.train_ds->meta;
    snprintf(buf, sizeof buf, "%s/test/dataset.json", o->data_path);
    if (!file_exists(buf)) say(0, "warning: %s has no test split; checkpoints are written without evaluation", o->data_path);
    else if (tr_dataset_open(R.ctx, o->data_path, "test", 0, &R.test_ds) != TR_OK) return fail("cannot open the test split");
    else if (R.test_ds->meta.vocab_size != m->vocab_size || R.test_ds->meta.seq_len != m->seq_len)
        return say(1, "%s: the test split (vocab_size %d, seq_len %d) does not match the train split (%d, %d)", o->data_path, R.test_ds->meta.vocab_size,
                   R.test_ds->meta.seq_len, m->vocab_size, m->seq_len);
    if ((p.data_vocab_size && m->vocab_size != p.data_vocab_size) || (p.data_seq_len && m->seq_len != p.data_seq_len))
        return say(2,
                   "dataset %s has vocab_size %d and seq_len %d, but preset %s is for %s with vocab_size %d and seq_len %d%s.\n"
                   "  Pick the preset that fits the dataset (tinyrec-train --list-presets), or 'tiny' for any dataset.",
                   o->data_path, m->vocab_size, m->seq_len, p.name, p.task, p.data_vocab_size, p.data_seq_len ? p.data_seq_len : m->seq_len, p.data_seq_len ? "" : " (any)");
    if (m->num_puzzle_identifiers > 2147483647) return say(1, "dataset %s: num_puzzle_identifiers %lld is too large", o->data_path, (long long)m->num_puzzle_identifiers);
    o->arch.vocab_size = m->vocab_size, o->arch.seq_len = m->seq_len, o->arch.num_puzzle_identifiers = (int)m->num_puzzle_identifiers;
    if (tr_model_config_validate(R.ctx, &o->arch) != TR_OK) return say(2, "bad model configuration: %s", tr_ctx_last_error(R.ctx));
    R.total_steps = (long)floor((double)o->epochs * (double)m->total_groups * m->mean_puzzle_examples / B);
    if (R.total_steps < 1) return say(2, "%ld epochs of %lld groups make less than one batch of %d; lower global_batch_size", o->epochs, (long long)m->total_groups, B);
    R.total_iters = o->epochs / o->eval_interval;
    o->tc.total_steps = R.total_steps; /* the cosine schedule's length */

    /* the run's files */
    snprintf(R.model_path, sizeof R.model_path, "%s/" TR_CHECKPOINT_LATEST, o->checkpoint_path);
    snprintf(R.state_path, sizeof R.state_path, "%s/" TR_CHECKPOINT_LATEST_STATE, o->checkpoint_path);
    snprintf(R.best_path, sizeof R.best_path, "%s/" TR_CHECKPOINT_BEST, o->checkpoint_path);
    snprintf(R.jsonl_path, sizeof R.jsonl_path, "%s/metrics.jsonl", o->checkpoint_path);
    snprintf(R.svg_path, sizeof R.svg_path, "%s/metrics.svg", o->checkpoint_path);
    snprintf(R.config_path, sizeof R.config_path, "%s/train_config.txt", o->checkpoint_path);
    if (mode == 0 && (file_exists(R.model_path) || file_exists(R.state_path) || file_exists(R.config_path)))
        return say(2, "%s already holds a run; pass --resume to continue it or --overwrite to start over", o->checkpoint_path);
    /* every rank has looked before rank 0 writes there */
    if (g_size > 1 && g_comm->barrier(g_comm->user) != TR_OK) return fail("the ranks' barrier failed");
    if (g_rank == 0 && tr_mkdir_p(R.ctx, o->checkpoint_path) != TR_OK) return fail("cannot create the checkpoint folder");

    /* model and trainer: a resumed run loads the model it saved, then the trainer state (live
       weights, optimizer, carry) with our run_pos */
    if (mode == 1) {
        tr_model_load_options lo;
        char cfgjson[2][4096];
        size_t len = 0;
        memset(&lo, 0, sizeof lo);
        lo.num_puzzle_identifiers = o->arch.num_puzzle_identifiers;
        if (tr_model_load(R.ctx, R.model_path, &lo, &R.model) != TR_OK) return fail("cannot load the checkpoint to resume");
        tr_model_config_to_json(&o->arch, cfgjson[0], sizeof cfgjson[0], NULL);
        tr_model_config_to_json(tr_model_get_config(R.model), cfgjson[1], sizeof cfgjson[1], NULL);
        if (strcmp(cfgjson[0], cfgjson[1]))
            return say(2, "the arch settings differ from the checkpoint's; a resumed run keeps its model.\n  checkpoint: %s\n  requested:  %s", cfgjson[1], cfgjson[0]);
        if (tr_trainer_create(R.model, &o->tc, &R.trainer) != TR_OK) return fail("cannot create the trainer");
        if (tr_trainer_load(R.trainer, R.state_path, &R.pos, sizeof R.pos, &len) != TR_OK) return fail("cannot load the trainer state");
        if (len != sizeof R.pos || R.pos.magic != RUN_POS_MAGIC || R.pos.version != 1) return say(1, "%s was not written by this version of tinyrec-train", R.state_path);
    } else {
        if (tr_model_create(R.ctx, &o->arch, &R.model) != TR_OK) return fail("cannot create the model");
        if (tr_trainer_create(R.model, &o->tc, &R.trainer) != TR_OK) return fail("cannot create the trainer");
        memset(&R.pos, 0, sizeof R.pos);
        R.pos.magic = RUN_POS_MAGIC, R.pos.version = 1;
        R.pos.best_exact = -1, R.pos.best_step = -1, R.pos.last_eval_step = -1;
    }

    /* samplers: train draws eval_interval epochs per pass, as the reference's iterations; test
       walks the split in order, from test_start at every evaluation */
    sc.global_batch_size = B, sc.epochs_per_iter = (int)o->eval_interval, sc.seed = (uint64_t)o->seed, sc.prefetch = o->prefetch;
    sc.rank = g_rank, sc.num_replicas = g_size; /* this rank's slice of every global batch; the position is the global one */
    if (tr_sampler_create(R.ctx, R.train_ds, &sc, &R.train_s) != TR_OK) return fail("cannot create the train sampler");
    if (mode == 1 && tr_sampler_set_state(R.train_s, &R.pos.sampler) != TR_OK) return fail("cannot restore the sampler position");
    if (R.test_ds) {
        sc.test_mode = 1, sc.epochs_per_iter = 1;
        if (tr_sampler_create(R.ctx, R.test_ds, &sc, &R.test_s) != TR_OK) return fail("cannot create the test sampler");
        tr_sampler_get_state(R.test_s, &R.test_start);
        if (tr_carry_create(R.model, B / g_size, &R.eval_carry) != TR_OK) return fail("cannot create the evaluation carry");
    }
    per_pass = tr_sampler_batches_per_pass(R.train_s);
    R.target_steps = R.total_steps;
    if (per_pass > 0 && per_pass * R.total_iters < R.target_steps) R.target_steps = (long)(per_pass * R.total_iters);
    if (o->max_steps > 0 && o->max_steps < R.target_steps) R.target_steps = o->max_steps;

    if (g_rank != 0) return -1; /* rank 0 alone writes metrics.jsonl and train_config.txt */
    /* metrics.jsonl: a resumed run keeps the lines up to its checkpoint */
    if (mode == 1 && tr_metrics_history_load(R.ctx, R.jsonl_path, tr_trainer_step_count(R.trainer), 1, &R.hist) != TR_OK)
        return say(1, "cannot rewrite %s: %s", R.jsonl_path, tr_ctx_last_error(R.ctx));
    if (mode != 1) remove(R.best_path);
    if (!(R.jsonl = fopen(R.jsonl_path, mode == 1 ? "ab" : "wb"))) return say(1, "cannot open %s: %s", R.jsonl_path, strerror(errno));
    if (write_config() != 0) return say(1, "cannot write %s: %s", R.config_path, strerror(errno));
    return -1;
}

/* ---- training ------------------------------------------------------------------------------ */

/* Whether to stop now (a signal): with several ranks, every rank stops at the same step when any got
   one (mpirun forwards SIGINT/SIGTERM, not at the same instant). -1: the communicator failed. */
static int stop_requested(void) {
    float v = g_stop != 0;
    if (g_size == 1) return g_stop != 0;
    if (g_comm->allreduce_sum(g_comm->user, &v, 1) != TR_OK) return fail("the stop flag's all-reduce failed"), -1;
    return v > 0;
}

/* The run's header; with several ranks, their count and every rank's device (gathered to rank 0). */
static int print_header(int mode, long step, size_t train_bytes) {
    options *o = &R.o;
    const tr_model_config *c = tr_model_get_config(R.model);
    char (*names)[96] = NULL, mine[96], kind[32];
    int r, B = o->tc.global_batch_size;
    snprintf(mine, sizeof mine, "%.95s", tr_ctx_device_name(R.ctx));
    if (g_size > 1) { /* a rank that fails here aborts the job (main), so the others do not wait */
        if (!(names = (char (*)[96])malloc((size_t)g_size * sizeof *names))) return say(1, "out of memory");
        if (g_comm->allgather(g_comm->user, mine, names, sizeof mine) != TR_OK) return free(names), fail("gathering the ranks' devices failed");
    }
    if (g_rank != 0) return free(names), 0;
    if (c->arch == TR_ARCH_HRM) snprintf(kind, sizeof kind, "HRM %d+%d layers", c->H_layers, c->L_layers);
    else snprintf(kind, sizeof kind, "TRM %d layers", c->L_layers);
    printf("tinyrec-train %s: preset %s, %zu parameters (%s, D=%d, %s, T=%d, n=%d, M_max=%d), %s, %d threads, %s kernels, ~%.0f MB", tr_version_string(), o->preset,
           tr_model_num_params(R.model), kind, c->hidden_size, c->mlp_t ? "mlp_t" : "attention", c->H_cycles, c->L_cycles, c->halt_max_steps,
           tr_forward_dtype_name(c->forward_dtype), tr_ctx_num_threads(R.ctx), tr_ctx_simd_name(R.ctx), train_bytes / 1048576.0);
    if (g_size > 1) printf(" per rank, %d ranks", g_size);
    printf("\n");
    printf("data %s: %lld train examples in %lld groups, %lld test examples; batch %d, %ld epochs = %ld steps, eval every %ld epochs\n", o->data_path,
           (long long)R.train_ds->num_examples, (long long)R.train_ds->meta.total_groups, R.test_ds ? (long long)R.test_ds->num_examples : 0LL, B, o->epochs, R.total_steps,
           o->eval_interval);
    if (g_size == 1) printf("device %s\n", mine); /* where the run happens, fallbacks included */
    else {
        printf("%d ranks, %d rows each of the global batch of %d; devices:", g_size, B / g_size, B);
        for (r = 0; r < g_size; r++) printf("%s rank %d %s", r ? ";" : "", r, names[r]);
        printf("; gradients all-reduced %s\n", g_comm->overlap ? "layer by layer during the backward" : "after the backward");
    }
    free(names);
    if (mode == 1) printf("resuming at step %ld (epoch %.2f) from %s\n", step, R.pos.epoch, o->checkpoint_path);
    printf("checkpoints, metrics.jsonl and metrics.svg in %s\n", o->checkpoint_path);
    fflush(stdout);
    return 0;
}

static int train(int mode) {
    options *o = &R.o;
    int B = o->tc.global_batch_size, n_window = 0, win_skipped = 0;
    long step = tr_trainer_step_count(R.trainer);
    size_t train_bytes = 0;
    tr_metrics win, disp; /* sums over the metrics.jsonl window and since the last progress line */
    double last_print = 0, d_loss = NAN, d_acc = 0, d_exact = 0, d_act = 0;
    struct sigaction sa;
    memset(&win, 0, sizeof win);
    memset(&disp, 0, sizeof disp);
    tr_model_memory(R.model, B / g_size, &train_bytes, NULL);
    if (print_header(mode, step, train_bytes) != 0) return 1;
    R.tty = isatty(fileno(stdout));

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    R.t_start = tr_time_seconds();
    R.step0 = step;
    for (;;) {
        tr_batch b;
        tr_batch_info info;
        tr_metrics mt;
        tr_sampler_state before;
        tr_status st;
        double t0, now;
        int stop;
        tr_sampler_get_state(R.train_s, &before);
        if ((stop = stop_requested()) < 0) return 1;
        if (stop || (o->max_steps > 0 && step >= o->max_steps)) {
            if (save_checkpoint(&before, 0) != 0) return 1;
            if (stop) return interrupted(step);
            status_msg("reached max_steps %ld: saved %s\n", o->max_steps, R.model_path);
            break;
        }
        if (step >= R.total_steps) { /* the schedule is over before the pass (rounding): final evaluation */
            int rc = R.pos.last_eval_step != step ? eval_and_checkpoint(step, &before, 1) : 1;
            if (rc < 0) return 1;
            if (rc == 0) continue; /* interrupted: saved above */
            break;
        }
        t0 = tr_time_seconds();
        if (tr_sampler_next(R.train_s, &b, &info) != TR_OK) return fail("the train sampler failed");
        if (info.pass != R.pos.cur_pass) { /* an iteration of eval_interval epochs is over */
            int64_t finished = R.pos.cur_pass;
            int rc;
            R.step0_time += tr_time_seconds() - t0;
            R.pos.cur_pass = info.pass;
            rc = eval_and_checkpoint(step, &before, finished >= o->min_eval_interval);
            if (rc < 0) return 1;
            if (rc == 0) { /* interrupted during evaluation: save so that resuming evaluates again */
                R.pos.cur_pass = finished;
                return save_checkpoint(&before, 0) != 0 ? 1 : interrupted(step);
            }
            if (info.pass >= R.total_iters) break; /* all epochs done */
            if (g_size == 1 && g_stop) return interrupted(step); /* ranks: at the next step, together */
            t0 = tr_time_seconds();
        }
        /* A step whose loss or gradients are NaN or infinite is skipped by the library (a warning
           names it; the weights stay as they were); max_nonfinite_steps of them in a row fail with
           TR_ERR_NONFINITE. Nothing is saved after that: the last checkpoint stays good. */
        st = tr_trainer_step(R.trainer, &b, &mt);
        if (st == TR_OK) R.loss_scale = mt.loss_scale;
        if (st == TR_ERR_NONFINITE)
            return say(1, "training stopped: %s\n  nothing was saved after the last checkpoint in %s; lower lr (or check the data) and --resume", tr_ctx_last_error(R.ctx),
                       o->checkpoint_path);
        if (st != TR_OK) return fail("training step failed");
        step++;
        now = tr_time_seconds();
        R.step0_time += now - t0;
        R.pos.train_seconds += now - t0;
        R.pos.epoch = info.epoch;
        if (mt.skipped) win_skipped++, R.skipped++;
        else add_metrics(&win, &mt, B), n_window++;
        if (step % o->log_interval == 0) {
            log_train(step, info.epoch, &win, n_window, win_skipped);
            memset(&win, 0, sizeof win);
            n_window = win_skipped = 0;
        }
        /* progress: the loss smoothed, accuracies over the rows that halted since the last update */
        if (!mt.skipped) {
            d_loss = isfinite(d_loss) ? 0.9 * d_loss + 0.1 * mt.loss / B : mt.loss / B;
            add_metrics(&disp, &mt, 1);
        }
        if ((R.tty ? now - last_print >= 0.2 : (now - last_print >= o->print_interval || step == R.step0 + 1)) || step >= R.target_steps) {
            if (disp.count > 0) d_acc = disp.accuracy / disp.count, d_exact = disp.exact_accuracy / disp.count, d_act = disp.steps / disp.count;
            memset(&disp, 0, sizeof disp);
            show_progress(step, d_loss, d_acc, d_exact, d_act);
            last_print = now;
        }
    }
    clear_bar();
    if (g_rank == 0 && tr_metrics_plot_svg(R.ctx, R.svg_path, o->preset, &R.hist) != TR_OK) say(0, "warning: cannot write %s", R.svg_path);
    if (g_rank == 0) {
        printf("done: %ld steps, %.1fs of training", step, R.pos.train_seconds);
        if (R.pos.best_step >= 0) printf("; best exact accuracy %.4f at step %lld (%s)", R.pos.best_exact, (long long)R.pos.best_step, R.best_path);
        printf("\n");
#if TINYREC_MPI
        if (g_size > 1 && step > R.step0) /* the gradients' and the stop flag's; evaluations' too */
            printf("all-reduce (rank 0): %.2f MB a step in %.1f calls, %.2f ms a step waited on\n", 4e-6 * g_mpi.reduce_floats / (double)(step - R.step0),
                   (double)g_mpi.reduce_calls / (double)(step - R.step0), 1e3 * g_mpi.reduce_seconds / (double)(step - R.step0));
#endif
    }
    return 0;
}

int main(int argc, char **argv) {
    tr_ctx_config cc = tr_ctx_config_default();
    tr_ctx *kctx = NULL;
    int mode = 0, rc;
    snprintf(g_icd_files, sizeof g_icd_files, "%s", getenv("OCL_ICD_FILENAMES") ? getenv("OCL_ICD_FILENAMES") : "(unset)");
    snprintf(g_icd_vendors, sizeof g_icd_vendors, "%s", getenv("OCL_ICD_VENDORS") ? getenv("OCL_ICD_VENDORS") : "(unset: /etc/OpenCL/vendors)");
#if TINYREC_MPI
    if (tr_mpi_init(&argc, &argv, &g_mpi) != 0) return 1;
    g_comm = &g_mpi.comm, g_rank = g_comm->rank, g_size = g_comm->size;
#endif
    build_keys();
    /* a context for reading settings: it holds the reasons of bad values */
    cc.device = "cpu", cc.num_threads = 1;
    if (tr_ctx_create(&cc, &kctx) != TR_OK) return say(1, "cannot create a context");
    rc = configure(kctx, argc, argv, &mode);
    tr_ctx_destroy(kctx);
    if (rc < 0 && (rc = setup(mode)) < 0) rc = train(mode);
    fflush(stdout);
    if (R.jsonl) fclose(R.jsonl);
    tr_carry_destroy(R.eval_carry);
    tr_sampler_destroy(R.train_s);
    tr_sampler_destroy(R.test_s);
    tr_trainer_destroy(R.trainer);
    tr_model_destroy(R.model);
    tr_dataset_close(R.train_ds);
    tr_dataset_close(R.test_ds);
    tr_metrics_history_free(R.ctx, &R.hist);
    tr_ctx_destroy(R.ctx);
#if TINYREC_MPI
    /* a failure (said above, with the rank) ends every rank: the others may wait in a collective */
    if (g_size > 1 && rc != 0 && rc != 130) tr_mpi_abort(rc);
    tr_mpi_finalize(&g_mpi);
#endif
    return rc;
}
