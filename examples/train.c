/* tinyrec-train: trains a TRM or an HRM on a dataset in the reference layout (tinyrec-data builds one).
     build/tinyrec-train sudoku-tiny data_path=data/sudoku checkpoint_path=runs/s1 epochs=20 eval_interval=5
     build/tinyrec-train --resume checkpoint_path=runs/s1          (continues exactly where it stopped; --help says the rest)
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
#include "tinyrec_prog.h"
#include <stdarg.h>
#if TINYREC_MPI
#include "tinyrec_mpi.h"
static tr_mpi g_mpi;
#endif

#define PATH_CAP TR_PROG_PATH_CAP

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
    tr_prog_init init;     /* init_from=CKPT: a new run from a checkpoint's weights, puzzle rows by name */
} options;

/* The program's own keys, described with the library's tr_key so that tr_key_parse/tr_key_format
   read and write them as they do the library's (tr_prog_key: where each goes among the library's). */
#define OWN(name, field, type, size, before, persist, help) {{name, type, TR_KEY_IN_USER, offsetof(options, field), size, 0, help}, before, persist}
static const tr_prog_key OWN_KEYS[] = {
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
    OWN("prefetch", prefetch, TR_KEY_INT, 0, NULL, 0, "(tinyrec) batches prepared ahead by a thread"), TR_PROG_INIT_KEYS(options, init),
};
#define NOWN ((int)(sizeof OWN_KEYS / sizeof OWN_KEYS[0]))

static tr_prog_keys KEYS; /* the library's keys a user sets, with ours */

/* The struct a key's offset is into. */
static void *key_base(void *opts, const tr_key *k) {
    options *o = (options *)opts;
    return k->in == TR_KEY_IN_MODEL ? (void *)&o->arch : k->in == TR_KEY_IN_TRAIN ? (void *)&o->tc : (void *)o;
}

/* Sets key=value; on failure writes the reason to err and returns 0. ctx holds the library's
   reasons, and checks device= as the run will (so that the message and the spellings match). */
static int set_key(tr_ctx *ctx, options *o, const char *key, const char *val, char *err, size_t cap) {
    const tr_key *k = tr_prog_keys_find(&KEYS, key, err, cap);
    if (!k) return 0;
    if (!strcmp(key, "device") && (!*val || strlen(val) >= k->size))
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

static struct run {
    options o;
    tr_ctx *ctx;
    tr_dataset *train_ds, *test_ds;
    tr_sampler *train_s, *test_s;
    tr_sampler_state test_start;
    tr_model *model;
    tr_trainer *trainer;
    tr_carry *eval_carry;
    tr_prog_run_pos pos; /* saved as the trainer state's blob */
    tr_metrics_history hist; /* for metrics.svg */
    FILE *jsonl;
    tr_prog_run_files f; /* the run folder's files */
    tr_prog_bar bar;
    tr_run_info run;  /* what the run computes on and in */
    tr_prog_meter meter; /* the metrics.jsonl window and the progress line's */
    long total_steps, target_steps, total_iters, step0;
    double step0_time;
    double loss_scale; /* float16: the last step's loss scale (0 otherwise) */
} R;

/* Data-parallel ranks (make MPI=1 under mpirun); NULL: one process. */
static const tr_comm *g_comm = NULL;
static int g_rank = 0, g_size = 1;

/* ---- messages --------------------------------------------------------------------------------- */

static void clear_bar(void) { tr_prog_bar_clear(&R.bar); } /* before a message on stderr */

/* "tinyrec-train: [rank N: ]<message>" on stderr, on each line (ranks' lines interleave); returns code. */
static int say(int code, const char *fmt, ...) {
    char buf[8192], *line, *next;
    va_list ap;
    clear_bar();
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    for (line = buf; line; line = next) {
        if ((next = strchr(line, '\n')) != NULL) *next++ = 0;
        if (g_size > 1) fprintf(stderr, "tinyrec-train: rank %d: %s\n", g_rank, line);
        else fprintf(stderr, "tinyrec-train: %s\n", line);
    }
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

/* A bad command line: the reason, then one hint line (what the key means when one is named). */
static int die_usage(const char *msg, const char *key) {
    const tr_key *k = tr_prog_keys_get(&KEYS, key);
    say(2, "%s", msg);
    if (k) fprintf(stderr, "  %s: %s (tinyrec-train --list-keys lists every key)\n", k->name, k->help);
    else fprintf(stderr, "  (tinyrec-train --help for the usage, --list-keys for the %d keys)\n", KEYS.n);
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

/* ---- metrics.jsonl ---------------------------------------------------------------------------- */

/* One train line: the means over the window's trained steps and the count of skipped ones. */
static void log_train(long step, double epoch) {
    tr_prog_train_line l;
    tr_metrics_point pt;
    if (!R.jsonl) return; /* not rank 0 */
    l.step = step, l.epoch = epoch, l.lr = tr_lr_schedule(&R.o.tc, R.o.tc.lr, step), l.loss_scale = R.loss_scale, l.seconds = R.pos.train_seconds;
    l.forward_dtype = tr_forward_dtype_name(tr_model_get_config(R.model)->forward_dtype), l.hrm = tr_model_get_config(R.model)->arch == TR_ARCH_HRM;
    l.samples_per_s = R.step0_time > 0 ? (step - R.step0) * (double)R.o.tc.global_batch_size / R.step0_time : 0.0;
    if (tr_prog_meter_log(&R.meter, R.jsonl, &l, &pt)) tr_metrics_history_add(R.ctx, &R.hist, 0, &pt); /* out of memory: the plot misses a point */
}

/* ---- checkpoints and evaluation ---------------------------------------------------------------- */

/* Saves the checkpoint (latest, and best when is_best) with our run_pos, sampler position included,
   then the plot. A save that fails (a full disk, a read-only folder) leaves the previous checkpoint
   as it was; the run stops with the library's reason, which names the file. */
static int save_checkpoint(const tr_sampler_state *sampler_pos, int is_best) {
    R.pos.sampler = *sampler_pos;
    if (tr_checkpoint_save(R.trainer, R.o.checkpoint_path, is_best, &R.pos, sizeof R.pos) != TR_OK) {
        fail("saving the checkpoint failed");
        return -1;
    }
    if (g_rank == 0 && tr_metrics_plot_svg(R.ctx, R.f.svg, R.o.preset, &R.hist) != TR_OK) status_msg("tinyrec-train: warning: cannot write %s\n", R.f.svg);
    return 0;
}

static int interrupted(long step) {
    status_msg("interrupted at step %ld: saved %s (continue with --resume checkpoint_path=%s)\n", step, R.f.model, R.o.checkpoint_path);
    return 130;
}

/* The end of an iteration (eval_interval epochs): evaluate the test split from its start when due
   (with the EMA weights swapped in when EMA is on), then checkpoint. Returns 1, 0 when interrupted
   (nothing saved), -1 on error. */
static int eval_and_checkpoint(long step, const tr_sampler_state *pos_before, int do_eval) {
    tr_eval_result e;
    tr_metrics_point pt;
    int best = 0;
    tr_status st;
    if (do_eval && R.test_s) {
        st = tr_prog_evaluate(R.ctx, R.trainer, R.model, R.eval_carry, R.test_s, &R.test_start, R.o.tc.ema, R.o.eval_batches, g_comm, &R.bar, &e);
        if (st == TR_ERR_INTERRUPTED) return 0;
        if (st != TR_OK)
            return say(-1, "evaluation failed: %s (%s)%s%s", tr_ctx_last_error(R.ctx), tr_status_string(st), *comm_reason() ? ": " : "", comm_reason());
        best = tr_prog_run_pos_eval(&R.pos, step, &e);
        if (R.jsonl) tr_prog_jsonl_eval(R.jsonl, step, R.pos.epoch, &e, best, &R.run); /* rank 0 */
        pt = tr_prog_eval_point(step, &e);
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
            "       tinyrec-train --list-presets | --list-keys | --help\n"
            "Trains a TRM or an HRM (hrm-* presets) on a dataset in the reference layout (tinyrec-data builds one).\n"
            "Keys use the reference's names (arch.L_cycles=4, global_batch_size=64, lr=1e-4, ema=true, ...; --list-keys\n"
            "lists them); vocab_size, seq_len and the puzzle-id count come from the dataset. Every eval_interval epochs\n"
            "(it must divide epochs) the test split is evaluated and checkpoint_path gets latest.safetensors (with\n"
            "its .state.safetensors), best.safetensors, metrics.jsonl, metrics.svg and train_config.txt.\n"
            "--resume continues a run exactly (same losses on the same machine, device and threads); keys given\n"
            "override its train_config.txt. --overwrite starts over in a folder that holds a run.\n" "init_from=CKPT starts from a checkpoint's weights, puzzle rows by name; trainable=all|puzzle_emb|emb_heads.\n"
            "device=auto|cpu|gpu|opencl|opencl:N|opencl:<name>[,cpu] (default TINYREC_DEVICE, else auto) and\n"
            "arch.forward_dtype=float32|bfloat16|float16|auto pick where and in what it computes; the header names\n"
            "both and the kernels, and a fallback is a warning.\n"
            "Ctrl-C saves and exits with 130 (a second one quits). A NaN/inf step is skipped; max_nonfinite_steps\n"
            "in a row, or a checkpoint that cannot be written, stop the run with 1, keeping the last checkpoint.\n"
            "Exit status: 0 done, 1 runtime error, 2 bad command line, 130 interrupted.\n"
            "example (presets: --list-presets):\n"
            "  tinyrec-data sudoku --output-dir data/sudoku --generate 20000 --generate-test 200 --clues 50 --num-aug 0\n"
            "  tinyrec-train sudoku-tiny data_path=data/sudoku checkpoint_path=runs/sudoku epochs=2\n"
            "  tinyrec-solve runs/sudoku/best.safetensors puzzles.txt\n");
}

/* --resume: each line of the run's train_config.txt (the preset first, then its keys) into R.o. */
typedef struct resume_read {
    tr_ctx *kctx;
    const char *cp, *path;
    const tr_preset *p; /* the preset on the command line, or NULL */
    int have, *eval_interval_given;
} resume_read;
static int resume_line(void *user, const char *key, const char *val) {
    resume_read *r = (resume_read *)user;
    char err[PATH_CAP + 128];
    tr_preset fp;
    if (!strcmp(key, "preset")) {
        if (tr_preset_find(val, &fp) != TR_OK) return say(1, "%s names an unknown preset '%s'", r->path, val);
        if (r->p && strcmp(r->p->name, fp.name)) say(0, "warning: the run was started with preset %s; '%s' is ignored", fp.name, r->p->name);
        snprintf(R.o.checkpoint_path, sizeof R.o.checkpoint_path, "%s", r->cp);
        apply_preset(&R.o, &fp);
        return r->have = 1, -1;
    }
    if (!r->have) return say(1, "%s: the first setting must be preset=NAME", r->path);
    if (!strcmp(key, "eval_interval")) *r->eval_interval_given = 1;
    return set_key(r->kctx, &R.o, key, val, err, sizeof err) ? -1 : say(1, "%s: %s", r->path, err);
}

/* Reads the run's train_config.txt (for --resume) into R.o. Returns -1 when it did, else the exit status. */
static int read_run_config(tr_ctx *kctx, const char *cp, const tr_preset *p, int *eval_interval_given) {
    char cfgp[PATH_CAP + 32];
    resume_read r;
    int rc;
    snprintf(cfgp, sizeof cfgp, "%s/train_config.txt", cp);
    r.kctx = kctx, r.cp = cp, r.path = cfgp, r.p = p, r.have = 0, r.eval_interval_given = eval_interval_given;
    if ((rc = tr_prog_settings_read(cfgp, resume_line, &r)) == -2) return say(1, "--resume: no run to continue in '%s' (cannot read %s: %s)", cp, cfgp, strerror(errno));
    return rc < 0 && !r.have ? say(1, "%s holds no preset", cfgp) : rc;
}

/* Settings the library does not check (tr_train_config_validate checks the training recipe). */
static const char *check_options(tr_ctx *kctx, const options *o, const char **key) {
    if (!o->data_path[0]) return *key = "data_path", "data_path=DIR is required (a dataset built by tinyrec-data)";
    if (o->epochs < 1) return *key = "epochs", "epochs must be >= 1";
    if (o->eval_interval < 1 || o->eval_interval > 2147483647L) return *key = "eval_interval", "eval_interval must be >= 1 (and fit an int)";
    if (o->log_interval < 1) return *key = "log_interval", "log_interval must be >= 1";
    if (o->max_steps < 0 || o->threads < 0 || o->eval_batches < 0 || o->prefetch < 0 || o->min_eval_interval < 0)
        return "max_steps, threads, eval_batches, prefetch and min_eval_interval must be >= 0";
    if (!(o->print_interval >= 0)) return *key = "print_interval", "print_interval must be >= 0";
    return tr_train_config_validate(kctx, &o->tc) != TR_OK ? tr_ctx_last_error(kctx) : NULL;
}

/* The command line into R.o: a preset (or --resume's saved settings), then key=value overrides.
   Returns -1 to go on and train (mode: 0 new run, 1 resume, 2 new run over an old one), else the
   exit status. */
static int configure(tr_ctx *kctx, int argc, char **argv, int *mode) {
    const char *preset_arg = NULL, *kv[512], *bad, *bad_key = NULL;
    static const char *const opts[] = {"--resume", "--overwrite", "--list-presets", "--list-keys", "--help", "-h"};
    int nkv = 0, npos, seen[6], resume, overwrite, i, eval_interval_given = 0;
    char err[PATH_CAP + 128];
    tr_preset p;
    options *o = &R.o;
    if (tr_prog_args(argc, argv, opts, 6, seen, kv, &nkv, 512, &preset_arg, &npos, 1, err, sizeof err)) return die_usage(err, NULL);
    if (seen[4] || seen[5]) return usage(stdout), 0;
    if (seen[2]) return tr_prog_list_presets(stdout, ""), 0;
    if (seen[3]) return tr_prog_keys_list(stdout, &KEYS), 0;
    resume = seen[0], overwrite = seen[1];
    for (i = 0; i < nkv; i++)
        if (!strncmp(kv[i], "preset=", 7)) {
            if (preset_arg && strcmp(preset_arg, kv[i] + 7)) return die_usage("two different presets given", NULL);
            preset_arg = kv[i] + 7;
        }
    if (preset_arg && tr_preset_find(preset_arg, &p) != TR_OK) {
        tr_prog_unknown_preset(err, sizeof err, preset_arg);
        say(2, "%s", err);
        return fprintf(stderr, "  (tinyrec-train --list-presets lists them)\n"), 2;
    }
    if (resume) { /* the run's folder: checkpoint_path from the command line, else the preset's default */
        char cp[PATH_CAP] = "";
        int rc;
        for (i = 0; i < nkv; i++)
            if (!strncmp(kv[i], "checkpoint_path=", 16)) snprintf(cp, sizeof cp, "%s", kv[i] + 16);
        if (!cp[0] && !preset_arg) return die_usage("--resume needs checkpoint_path=DIR (the folder of the run to continue)", "checkpoint_path");
        if (!cp[0]) snprintf(cp, sizeof cp, "checkpoints/%s", p.name);
        if ((rc = read_run_config(kctx, cp, preset_arg ? &p : NULL, &eval_interval_given)) >= 0) return rc;
    } else if (!preset_arg) {
        say(2, "name a preset (or --resume a run); presets:");
        tr_prog_list_presets(stderr, "  ");
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
        if (!set_key(kctx, o, key, kv[i] + kl + 1, err, sizeof err)) return die_usage(err, key);
    }
    if ((bad = check_options(kctx, o, &bad_key)) != NULL) return die_usage(bad, bad_key);
    if (o->epochs % o->eval_interval) {
        if (eval_interval_given) {
            snprintf(err, sizeof err, "eval_interval %ld must divide epochs %ld", o->eval_interval, o->epochs);
            return die_usage(err, "eval_interval");
        }
        say(0, "note: the preset's eval_interval %ld does not divide epochs %ld; evaluating every %ld epochs", o->eval_interval, o->epochs, o->epochs);
        o->eval_interval = o->epochs; /* the preset's interval does not fit the epochs asked for */
    }
    *mode = resume ? 1 : overwrite ? 2 : 0;
    return -1;
}

/* ---- setting up a run ---------------------------------------------------------------------- */

/* The context, the data (which decides vocab_size, seq_len and the puzzle-id count), the model and
   trainer (new, or loaded to resume), the samplers, metrics.jsonl and train_config.txt. Returns -1
   when ready, else the exit status. */
static int setup(int mode) {
    options *o = &R.o;
    tr_ctx_config cc = tr_ctx_config_default();
    tr_sampler_config sc = tr_sampler_config_default();
    tr_preset p;
    const tr_dataset_meta *m;
    char msg[4400];
    int rc;
    int B = o->tc.global_batch_size;
    int64_t per_pass;
    tr_preset_find(o->preset, &p); /* found when the options were read */
    cc.num_threads = o->threads, cc.seed = (uint64_t)o->seed, cc.log = on_log;
    cc.device = "cpu"; /* replaced below, where a bad TINYREC_DEVICE gets a readable message */
    if (tr_ctx_create(&cc, &R.ctx) != TR_OK) return say(1, "cannot create a context");
    if ((rc = tr_prog_open_device(R.ctx, o->device[0] ? o->device : getenv("TINYREC_DEVICE"), g_size, g_comm ? g_comm->local_rank : 0, msg, sizeof msg)) != 0)
        return say(rc, "%s%s", msg, rc == 2 && !o->device[0] ? " (from TINYREC_DEVICE)" : "");
    if (B % g_size) return say(2, "global_batch_size %d is not a multiple of the %d ranks", B, g_size);
    o->tc.comm = g_comm;
    if ((rc = tr_prog_open_data(R.ctx, o->data_path, &p, &R.train_ds, &R.test_ds, msg, sizeof msg)) != 0 || msg[0]) say(rc, "%s", msg);
    if (rc != 0) return rc;
    m = &R.train_ds->meta, o->init.ds = R.train_ds, o->init.writer = g_rank == 0;
    o->arch.vocab_size = m->vocab_size, o->arch.seq_len = m->seq_len, o->arch.num_puzzle_identifiers = (int)m->num_puzzle_identifiers;
    if (tr_model_config_validate(R.ctx, &o->arch) != TR_OK) return say(2, "bad model configuration: %s", tr_ctx_last_error(R.ctx));
    R.total_steps = (long)floor((double)o->epochs * (double)m->total_groups * m->mean_puzzle_examples / B);
    if (R.total_steps < 1) return say(2, "%ld epochs of %lld groups make less than one batch of %d; lower global_batch_size", o->epochs, (long long)m->total_groups, B);
    R.total_iters = o->epochs / o->eval_interval;
    o->tc.total_steps = R.total_steps; /* the cosine schedule's length */

    /* the run's files */
    tr_prog_run_files_init(&R.f, o->checkpoint_path);
    if (mode == 0 && (tr_prog_file_exists(R.f.model) || tr_prog_file_exists(R.f.state) || tr_prog_file_exists(R.f.config)))
        return say(2, "%s already holds a run; pass --resume to continue it or --overwrite to start over", o->checkpoint_path);
    /* every rank has looked before rank 0 writes there */
    if (g_size > 1 && g_comm->barrier(g_comm->user) != TR_OK) return fail("the ranks' barrier failed");
    if (g_rank == 0 && tr_mkdir_p(R.ctx, o->checkpoint_path) != TR_OK) return fail("cannot create the checkpoint folder");

    /* model and trainer: a resumed run's saved model, then its trainer state (weights, optimizer, carry, our position) */
    if ((rc = tr_prog_run_model(R.ctx, &R.f, mode == 1, &o->arch, &o->tc, &R.pos, sizeof R.pos, &o->init, &R.model, &R.trainer, msg, sizeof msg)) != 0) return say(rc, "%s", msg);
    if (!tr_prog_run_pos_init(&R.pos, mode == 1)) return say(1, "%s was not written by this version of tinyrec-train", R.f.state);

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
    if (mode == 1 && tr_metrics_history_load(R.ctx, R.f.jsonl, tr_trainer_step_count(R.trainer), 1, &R.hist) != TR_OK)
        return say(1, "cannot rewrite %s: %s", R.f.jsonl, tr_ctx_last_error(R.ctx));
    if (mode != 1) remove(R.f.best);
    if (!(R.jsonl = fopen(R.f.jsonl, mode == 1 ? "ab" : "wb"))) return say(1, "cannot open %s: %s", R.f.jsonl, strerror(errno));
    /* train_config.txt: the settings, which --resume reads back (an unset device is not written: a resume follows TINYREC_DEVICE again) */
    if (tr_prog_settings_write(R.f.config, o->preset, &KEYS, key_base, o) != 0) return say(1, "cannot write %s: %s", R.f.config, strerror(errno));
    return -1;
}

/* ---- training ------------------------------------------------------------------------------ */

/* The run's header; with several ranks, their count and every rank's device (gathered to rank 0). */
static int print_header(int mode, long step, size_t train_bytes) {
    options *o = &R.o;
    const tr_model_config *c = tr_model_get_config(R.model);
    char (*names)[192] = NULL, mine[192], kind[160];
    int r, B = o->tc.global_batch_size;
    tr_model_describe(R.model, &R.run); /* the device, its kernels and the precision, fallbacks included */
    snprintf(mine, sizeof mine, "%.191s", R.run.text);
    if (g_size > 1) { /* a rank that fails here aborts the job (main), so the others do not wait */
        if (!(names = (char (*)[192])malloc((size_t)g_size * sizeof *names))) return say(1, "out of memory");
        if (g_comm->allgather(g_comm->user, mine, names, sizeof mine) != TR_OK) return free(names), fail("gathering the ranks' devices failed");
    }
    if (g_rank != 0) return free(names), 0;
    tr_prog_model_line(R.model, kind, sizeof kind);
    printf("tinyrec-train %s: preset %s, %s, %s, ~%.0f MB", tr_version_string(), o->preset, kind, tr_forward_dtype_name(c->forward_dtype), train_bytes / 1048576.0);
    if (g_size > 1) printf(" per rank, %d ranks", g_size);
    printf("\n");
    printf("data %s: %lld train examples in %lld groups, %lld test examples; batch %d, %ld epochs = %ld steps, eval every %ld epochs\n", o->data_path,
           (long long)R.train_ds->num_examples, (long long)R.train_ds->meta.total_groups, R.test_ds ? (long long)R.test_ds->num_examples : 0LL, B, o->epochs, R.total_steps,
           o->eval_interval);
    if (g_size == 1) printf("device %s\n", mine);
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
    int B = o->tc.global_batch_size;
    long step = tr_trainer_step_count(R.trainer);
    size_t train_bytes = 0;
    double last_print = 0;
    R.meter.loss = NAN;
    tr_model_memory(R.model, B / g_size, &train_bytes, NULL);
    if (print_header(mode, step, train_bytes) != 0) return 1;
    R.bar.tty = isatty(fileno(stdout));
    tr_prog_catch_stop("tinyrec-train");
    R.bar.t_start = tr_time_seconds();
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
        if ((stop = tr_prog_stop_requested(g_comm)) < 0) return fail("the stop flag's all-reduce failed");
        if (stop || (o->max_steps > 0 && step >= o->max_steps)) {
            if (save_checkpoint(&before, 0) != 0) return 1;
            if (stop) return interrupted(step);
            status_msg("reached max_steps %ld: saved %s\n", o->max_steps, R.f.model);
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
            if (g_size == 1 && tr_prog_stop) return interrupted(step); /* ranks: at the next step, together */
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
        tr_prog_meter_add(&R.meter, &mt, B);
        if (step % o->log_interval == 0) log_train(step, info.epoch);
        if (g_rank == 0 && ((R.bar.tty ? now - last_print >= 0.2 : (now - last_print >= o->print_interval || step == R.step0 + 1)) || step >= R.target_steps))
            tr_prog_meter_show(&R.meter, &R.bar, step, R.target_steps, R.pos.epoch, R.step0_time > 0 && step > R.step0 ? (step - R.step0) / R.step0_time : 0, B), last_print = now;
    }
    clear_bar();
    if (g_rank == 0 && tr_metrics_plot_svg(R.ctx, R.f.svg, o->preset, &R.hist) != TR_OK) say(0, "warning: cannot write %s", R.f.svg);
    if (g_rank == 0) {
        tr_model_describe(R.model, &R.run); /* a device that failed during the run is behind it now */
        printf("done: %ld steps, %.1fs of training", step, R.pos.train_seconds);
        if (R.pos.best_step >= 0) printf("; best exact accuracy %.4f at step %lld (%s)", R.pos.best_exact, (long long)R.pos.best_step, R.f.best);
        printf("; on %s\n", R.run.text);
#if TINYREC_MPI
        if (g_size > 1 && step > R.step0) tr_mpi_report(&g_mpi, stdout, step - R.step0);
#endif
    }
    return 0;
}

int main(int argc, char **argv) {
    tr_ctx_config cc = tr_ctx_config_default();
    tr_ctx *kctx = NULL;
    int mode = 0, rc;
#if TINYREC_MPI
    if (tr_mpi_init(&argc, &argv, &g_mpi) != 0) return 1;
    g_comm = &g_mpi.comm, g_rank = g_comm->rank, g_size = g_comm->size;
#endif
    tr_prog_keys_build(&KEYS, OWN_KEYS, NOWN);
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
