/* tinyrec_prog.h: what the example programs share beyond the library: the run's header line, a progress
   line with its ETA, grids drawn on a terminal, command-line helpers (colours, integers, "did you mean"),
   a program's settings table built on the library's keys, and a training run's folder. Include it after
   tinyrec.h (with TINYREC_IMPLEMENTATION) in one .c file; every function is static. Public API only. */
#ifndef TINYREC_PROG_H
#define TINYREC_PROG_H
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
/* (a program uses some of them) */
#if defined(__GNUC__) || defined(__clang__)
#define TR_PROG static __attribute__((unused))
#else
#define TR_PROG static
#endif

/* ---- the command line ----------------------------------------------------------------------- */

/* --color WHEN: "always" 1, "never" 0, "auto" on a terminal unless NO_COLOR is set or TERM is dumb. */
TR_PROG int tr_prog_color(const char *when, FILE *f) {
    const char *term = getenv("TERM");
    if (!strcmp(when, "always")) return 1;
    if (!strcmp(when, "never")) return 0;
    return isatty(fileno(f)) && !getenv("NO_COLOR") && !(term && !strcmp(term, "dumb"));
}

/* A whole decimal integer in [lo, hi] into *out: 0, else -1. */
TR_PROG int tr_prog_parse_int(const char *s, int lo, int hi, int *out) {
    char *e;
    long v;
    errno = 0;
    v = strtol(s, &e, 10);
    if (!*s || *e || errno || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

/* "; did you mean 'a', 'b' or 'c'?" for the names nearest to word (tr_nearest_names), or "" when none is
   near: appended to err. */
TR_PROG void tr_prog_did_you_mean(char *err, size_t cap, const char *word, const char *const *names, int n) {
    int idx[3], k, found = tr_nearest_names(word, names, n, 3, idx);
    size_t len = strlen(err);
    for (k = 0; k < found && len < cap; k++) {
        snprintf(err + len, cap - len, "%s'%s'%s", k == 0 ? "; did you mean " : k == found - 1 ? " or " : ", ", names[idx[k]], k == found - 1 ? "?" : "");
        len = strlen(err);
    }
}

/* argv[1..] sorted into options (seen[i] = 1 for opts[i]; any other word starting with '-' is an unknown
   option), key=value pairs (kv, at most kv_cap) and up to max_pos other words (pos). Returns 0, else 2
   with the reason (an unknown option with the nearest ones) in err. */
TR_PROG int tr_prog_args(int argc, char **argv, const char *const *opts, int nopts, int *seen, const char **kv, int *nkv, int kv_cap, const char **pos, int *npos,
                         int max_pos, char *err, size_t cap) {
    int i, k;
    *nkv = *npos = 0;
    for (k = 0; k < nopts; k++) seen[k] = 0;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        for (k = 0; k < nopts && strcmp(a, opts[k]); k++) {}
        if (k < nopts) seen[k] = 1;
        else if (a[0] == '-') {
            snprintf(err, cap, "unknown option '%s'", a);
            tr_prog_did_you_mean(err, cap, a, opts, nopts);
            return 2;
        } else if (strchr(a, '=') && *nkv < kv_cap) kv[(*nkv)++] = a;
        else if (strchr(a, '=')) return snprintf(err, cap, "too many key=value arguments"), 2;
        else if (*npos < max_pos) pos[(*npos)++] = a;
        else return snprintf(err, cap, "unexpected argument '%s'", a), 2;
    }
    return 0;
}

/* s[0..n) (not NUL-terminated) as a JSON string. */
TR_PROG void tr_prog_json_str(FILE *f, const char *s, size_t n) {
    char buf[4097];
    if (n >= sizeof buf) n = sizeof buf - 1;
    memcpy(buf, s, n);
    buf[n] = 0;
    tr_json_fput_string(f, buf);
}

/* ---- what a run computes on and in ---------------------------------------------------------- */

/* The model's device, kernels and precision (tr_model_describe) as one line "<prefix><text>\n" on f, and
   in *info for a summary or a JSON record. A fallback has been logged by the library as a warning. */
TR_PROG void tr_prog_print_run(FILE *f, const char *prefix, const tr_model *m, tr_run_info *info) {
    tr_run_info local;
    if (!info) info = &local;
    if (tr_model_describe(m, info) != TR_OK) return;
    fprintf(f, "%s%s\n", prefix, info->text);
}

/* ---- progress ------------------------------------------------------------------------------- */

/* A duration as "42s", "3m07s" or "1h05m" ("?" when unknown). */
TR_PROG void tr_prog_fmt_dur(double s, char *buf, size_t cap) {
    long t = (long)(s + 0.5);
    if (!isfinite(s) || s < 0) snprintf(buf, cap, "?");
    else if (t >= 3600) snprintf(buf, cap, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else if (t >= 60) snprintf(buf, cap, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, cap, "%lds", t);
}

/* A progress report on stdout: on a terminal a bar redrawn in place, else plain lines. */
typedef struct tr_prog_bar {
    int tty, shown;
    double t_start; /* for the elapsed time */
} tr_prog_bar;

/* Erases the bar (before a message on stderr or a line of its own). */
TR_PROG void tr_prog_bar_clear(tr_prog_bar *b) {
    if (b->tty && b->shown) fputs("\r\033[K", stdout), fflush(stdout);
    b->shown = 0;
}

/* Step `step` of `target` at `per_s` steps a second (0: unknown): on a terminal "[####....] step/target
   <tty_text> ETA 3m07s<tail>" redrawn in place, else the line "step step/target  <text>  elapsed 42s
   ETA 3m07s<tail>". */
TR_PROG void tr_prog_bar_show(tr_prog_bar *b, long step, long target, double per_s, const char *tty_text, const char *text, const char *tail) {
    char eta[32], el[32];
    tr_prog_fmt_dur(per_s > 0 ? (target - step) / per_s : NAN, eta, sizeof eta);
    tr_prog_fmt_dur(tr_time_seconds() - b->t_start, el, sizeof el);
    if (b->tty) {
        int w = 24, i, fill = target > 0 ? (int)((double)w * step / target) : 0;
        char bar[32];
        for (i = 0; i < w; i++) bar[i] = i < fill ? '#' : '.';
        bar[w] = 0;
        printf("\r\033[K[%s] %ld/%ld %s ETA %s%s", bar, step, target, tty_text, eta, tail);
        b->shown = 1;
    } else
        printf("step %ld/%ld  %s  elapsed %s  ETA %s%s\n", step, target, text, el, eta, tail);
    fflush(stdout);
}

/* ---- grids ---------------------------------------------------------------------------------- */

/* A Sudoku (givens 1-9, 0 blank, printed as `blank`) and an answer (0: no digit) side by side; with
   colour the givens bold, the answer's digits green, or red where they clash in a row, column or box. */
TR_PROG void tr_prog_print_sudoku(const uint8_t *givens, char blank, const uint8_t *ans, int color) {
    int r, c, side;
    printf("   puzzle                    answer\n");
    for (r = 0; r < 9; r++) {
        if (r && r % 3 == 0) printf("   ------+-------+------     ------+-------+------\n");
        for (side = 0; side < 2; side++) {
            printf(side ? "    " : "  ");
            for (c = 0; c < 9; c++) {
                int k = r * 9 + c, d = side ? ans[k] : givens[k], clash = 0, j;
                if (c && c % 3 == 0) printf(" |");
                if (!d) {
                    printf(" %c", side ? '?' : blank);
                    continue;
                }
                if (!color) {
                    printf(" %d", d);
                    continue;
                }
                if (!side || givens[k]) {
                    printf(" \033[1m%d\033[0m", d);
                    continue;
                }
                for (j = 0; j < 9 && !clash; j++) {
                    int rk = r * 9 + j, ck = j * 9 + c, bk = (r / 3 * 3 + j / 3) * 9 + c / 3 * 3 + j % 3;
                    clash = (rk != k && ans[rk] == d) || (ck != k && ans[ck] == d) || (bk != k && ans[bk] == d);
                }
                printf(clash ? " \033[31m%d\033[0m" : " \033[32m%d\033[0m", d);
            }
        }
        printf("\n");
    }
}

TR_PROG void tr_prog_maze_cell(char ch, int color) {
    if (!color) putchar(ch);
    else if (ch == '#') printf("\033[90m#\033[0m");
    else if (ch == 'o') printf("\033[1;33mo\033[0m");
    else if (ch == 'S' || ch == 'G') printf("\033[1;32m%c\033[0m", ch);
    else putchar(ch);
}

/* An n x n maze and an answer (characters of TR_MAZE_CHARSET) side by side. */
TR_PROG void tr_prog_print_maze(const char *maze, const char *ans, int n, int color) {
    int r, c;
    printf("  %-*s   answer\n", n, "maze");
    for (r = 0; r < n; r++) {
        printf("  ");
        for (c = 0; c < n; c++) tr_prog_maze_cell(maze[r * n + c], color);
        printf("   ");
        for (c = 0; c < n; c++) tr_prog_maze_cell(ans[r * n + c], color);
        putchar('\n');
    }
}

TR_PROG void tr_prog_arc_row(const uint8_t *g, int w, int r, int h, int color) {
    static const int pal[10] = {16, 27, 196, 40, 226, 244, 201, 208, 51, 88};
    int c;
    for (c = 0; c < w; c++) {
        if (r >= h) printf(color ? "  " : " ");
        else if (color) printf("\033[48;5;%dm  \033[0m", pal[g[r * w + c]]);
        else printf("%d", g[r * w + c]);
    }
}

/* An ARC grid (h x w, colours 0-9) and a prediction (gh x gw; gh 0: none) side by side. */
TR_PROG void tr_prog_print_arc(const uint8_t *in, int h, int w, const uint8_t *grid, int gh, int gw, int color) {
    int r, rows = h > gh ? h : gh, cw = color ? 2 * w : w;
    printf("  test input %dx%d%*s prediction %dx%d\n", h, w, cw - 9 > 0 ? cw - 9 : 1, "", gh, gw);
    for (r = 0; r < rows; r++) {
        printf("  ");
        tr_prog_arc_row(in, w, r, h, color);
        printf("   ");
        if (gh > 0) tr_prog_arc_row(grid, gw, r, gh, color);
        putchar('\n');
    }
}

/* ---- a program's settings: the library's keys and its own -------------------------------------- */

/* A key of the program's own, placed before the library key `before` (NULL: at the end) in the table;
   persist: written to the run's settings file. Its field is in the program's struct (TR_KEY_IN_USER). */
typedef struct tr_prog_key {
    tr_key key;
    const char *before;
    int persist;
} tr_prog_key;

#define TR_PROG_MAX_KEYS 160
typedef struct tr_prog_keys {
    const tr_key *key[TR_PROG_MAX_KEYS];
    const char *name[TR_PROG_MAX_KEYS]; /* for tr_nearest_names */
    int persist[TR_PROG_MAX_KEYS];
    int n;
} tr_prog_keys;

/* Every library key a user sets (the derived ones are the program's to set), the program's spliced in. */
TR_PROG void tr_prog_keys_build(tr_prog_keys *t, const tr_prog_key *own, int nown) {
    int n, i, j;
    const tr_key *lib = tr_config_keys(&n);
    t->n = 0;
    for (i = 0; i <= n; i++) {
        for (j = 0; j < nown && t->n < TR_PROG_MAX_KEYS; j++)
            if (own[j].before ? i < n && !strcmp(own[j].before, lib[i].name) : i == n) t->key[t->n] = &own[j].key, t->persist[t->n++] = own[j].persist;
        if (i < n && !(lib[i].flags & TR_KEY_DERIVED) && t->n < TR_PROG_MAX_KEYS) t->key[t->n] = &lib[i], t->persist[t->n++] = 1;
    }
    for (i = 0; i < t->n; i++) t->name[i] = t->key[i]->name;
}

TR_PROG void tr_prog_keys_list(FILE *f, const tr_prog_keys *t) {
    int i;
    fprintf(f, "valid keys:\n");
    for (i = 0; i < t->n; i++) fprintf(f, "  %-26s %s\n", t->key[i]->name, t->key[i]->help);
}

/* The key of that name, or NULL. */
TR_PROG const tr_key *tr_prog_keys_get(const tr_prog_keys *t, const char *name) {
    int i;
    for (i = 0; name && i < t->n; i++)
        if (!strcmp(t->key[i]->name, name)) return t->key[i];
    return NULL;
}

/* The key of that name; NULL with "unknown key 'x'; did you mean ...?" in err. */
TR_PROG const tr_key *tr_prog_keys_find(const tr_prog_keys *t, const char *name, char *err, size_t cap) {
    int i;
    for (i = 0; i < t->n; i++)
        if (!strcmp(t->key[i]->name, name)) return t->key[i];
    snprintf(err, cap, "unknown key '%s'", name);
    tr_prog_did_you_mean(err, cap, name, t->name, t->n);
    return NULL;
}

TR_PROG void tr_prog_list_presets(FILE *f, const char *indent) {
    int i;
    tr_preset p;
    for (i = 0; tr_preset_get(i, &p) == TR_OK; i++) fprintf(f, "%s%-16s %s\n", indent, p.name, p.help);
}

/* "unknown preset 'x'; did you mean ...?" into err. */
TR_PROG void tr_prog_unknown_preset(char *err, size_t cap, const char *name) {
    const char *names[64];
    int i, n = 0;
    tr_preset p;
    for (i = 0; n < 64 && tr_preset_get(i, &p) == TR_OK; i++) names[n++] = p.name;
    snprintf(err, cap, "unknown preset '%s'", name);
    tr_prog_did_you_mean(err, cap, name, names, n);
}

/* ---- a training run's folder --------------------------------------------------------------------- */

#define TR_PROG_PATH_CAP 1024
/* init_from=CKPT: a new run starts from a checkpoint's weights, its puzzle rows following their names
   (tr_model_init_from); the run's folder gets the dataset's identifiers.json, the names of its own rows. */
typedef struct tr_prog_init {
    char from[TR_PROG_PATH_CAP];        /* init_from */
    char identifiers[TR_PROG_PATH_CAP]; /* init_identifiers: the checkpoint's row names (default: identifiers.json beside it) */
    int map_by_index;                   /* init_map_by_index */
    const tr_dataset *ds;               /* the run's dataset (its identifiers name the rows) */
    int writer;                         /* 1: this process writes the run's identifiers.json (rank 0) */
} tr_prog_init;
#define TR_PROG_INIT_KEY(T, f, name, field, type, size, help) {{name, type, TR_KEY_IN_USER, offsetof(T, f) + offsetof(tr_prog_init, field), size, 0, help}, NULL, 1}
#define TR_PROG_INIT_KEYS(T, f)                                                                                                                                    \
    TR_PROG_INIT_KEY(T, f, "init_from", from, TR_KEY_STRING, TR_PROG_PATH_CAP, "(tinyrec) start from this checkpoint's weights; puzzle rows follow their names"),    \
        TR_PROG_INIT_KEY(T, f, "init_identifiers", identifiers, TR_KEY_STRING, TR_PROG_PATH_CAP, "(tinyrec) init_from's row names (default: identifiers.json beside it)"), \
        TR_PROG_INIT_KEY(T, f, "init_map_by_index", map_by_index, TR_KEY_BOOL, 0, "(tinyrec) init_from: rows by position when the checkpoint has no names")
/* The files of a run in its folder (tr_checkpoint_save's, and the program's). */
typedef struct tr_prog_run_files {
    char model[TR_PROG_PATH_CAP + 32], state[TR_PROG_PATH_CAP + 32], best[TR_PROG_PATH_CAP + 32];
    char jsonl[TR_PROG_PATH_CAP + 32], svg[TR_PROG_PATH_CAP + 32], config[TR_PROG_PATH_CAP + 32];
} tr_prog_run_files;

TR_PROG void tr_prog_run_files_init(tr_prog_run_files *f, const char *dir) {
    snprintf(f->model, sizeof f->model, "%s/" TR_CHECKPOINT_LATEST, dir);
    snprintf(f->state, sizeof f->state, "%s/" TR_CHECKPOINT_LATEST_STATE, dir);
    snprintf(f->best, sizeof f->best, "%s/" TR_CHECKPOINT_BEST, dir);
    snprintf(f->jsonl, sizeof f->jsonl, "%s/metrics.jsonl", dir);
    snprintf(f->svg, sizeof f->svg, "%s/metrics.svg", dir);
    snprintf(f->config, sizeof f->config, "%s/train_config.txt", dir);
}

TR_PROG int tr_prog_file_exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Writes the settings file (atomically: a temporary, then renamed): a comment, "preset=NAME", then
   key=value for every persisted key whose value is not empty. base(user, key) is the struct a key's
   field is in. */
TR_PROG int tr_prog_settings_write(const char *path, const char *preset, const tr_prog_keys *t, void *(*base)(void *, const tr_key *), void *user) {
    char tmp[TR_PROG_PATH_CAP + 80], v[TR_PROG_PATH_CAP];
    FILE *f;
    int i;
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (!(f = fopen(tmp, "wb"))) return -1;
    fprintf(f, "# tinyrec-train run settings (key=value); --resume reads them back, command-line keys override\npreset=%s\n", preset);
    for (i = 0; i < t->n; i++) {
        if (!t->persist[i]) continue;
        tr_key_format(t->key[i], base(user, t->key[i]), v, sizeof v);
        if (v[0]) fprintf(f, "%s=%s\n", t->key[i]->name, v);
    }
    return fclose(f) != 0 || rename(tmp, path) != 0 ? -1 : 0;
}

/* Reads a settings file: set(user, key, value) for each key=value line in order (comments skipped);
   returns -1 when all were read, else set's non-negative result (it stops there), or -2 when the file
   cannot be read (errno says why). */
TR_PROG int tr_prog_settings_read(const char *path, int (*set)(void *, const char *, const char *), void *user) {
    char line[TR_PROG_PATH_CAP + 256];
    int rc = -1;
    FILE *f = fopen(path, "rb");
    if (!f) return -2;
    while (rc < 0 && fgets(line, sizeof line, f)) {
        char *eq;
        line[strcspn(line, "\n")] = 0;
        if (line[0] == '#' || !(eq = strchr(line, '='))) continue;
        *eq = 0;
        rc = set(user, line, eq + 1);
    }
    fclose(f);
    return rc;
}

/* Whether this process must train on a GPU when its device is auto: TINYREC_EXPECT_GPU=1 / 0 says so;
   unset, a rank of several does when the machine has GPUs (an NVIDIA or AMD ROCm device node), whatever
   its OpenCL driver list says: a launcher may hand the ranks another list than the launching shell's
   (mpirun loads CUDA 13's libOpenCL through hwloc, which cuts OCL_ICD_FILENAMES to its first entry). A
   single process goes by what OpenCL lists, which is what its shell sees. */
TR_PROG int tr_prog_expect_gpu(int nranks) {
    static const char *const nodes[] = {"/dev/nvidia0", "/dev/nvidia1", "/dev/kfd"};
    const char *e = getenv("TINYREC_EXPECT_GPU");
    size_t i;
    if (e && *e) return atoi(e) != 0;
    if (nranks < 2) return 0;
    for (i = 0; i < sizeof nodes / sizeof *nodes; i++)
        if (access(nodes[i], F_OK) == 0) return 1;
    return 0;
}

/* With several ranks and device auto: this rank's GPU, the (local rank)-th of this machine's OpenCL GPUs
   (round robin when there are fewer), so that the ranks of a machine share its GPUs; none: "gpu" when a
   GPU is expected (the open then fails, with the reason), else "auto". */
TR_PROG const char *tr_prog_rank_device(tr_ctx *ctx, int local_rank, int expect_gpu, char *buf, size_t cap) {
    tr_opencl_list l;
    int i, ngpu = 0, want;
    snprintf(buf, cap, "%s", expect_gpu ? "gpu" : "auto");
    if (tr_opencl_list_devices(ctx, &l) == TR_OK) {
        for (i = 0; i < l.num_devices; i++) ngpu += l.devices[i].is_gpu;
        want = ngpu ? local_rank % ngpu : -1;
        for (i = 0; i < l.num_devices && want >= 0; i++)
            if (l.devices[i].is_gpu && want-- == 0) snprintf(buf, cap, "opencl:%d", l.devices[i].index);
    }
    tr_opencl_list_free(ctx, &l);
    return buf;
}

/* A device that did not open: lines for the user under the library's reason (which names this process's
   OpenCL driver list as the context found it, before CUDA's libOpenCL.so.1 cuts OCL_ICD_FILENAMES): what
   OpenCL listed (platforms and devices), and the likely cause with its remedies. */
TR_PROG void tr_prog_device_help(tr_ctx *ctx, const char *dev, int nranks, char *out, size_t cap) {
    tr_opencl_list l;
    char seen[1024] = "";
    size_t n = 0;
    int i;
    const char *who = nranks > 1 ? "rank" : "process";
    out[0] = 0;
    if (tr_opencl_list_devices(ctx, &l) == TR_OK) {
        if (!l.loaded || !l.num_platforms) n += (size_t)snprintf(seen, sizeof seen, "%s", l.note);
        for (i = 0; i < l.num_platforms && n < sizeof seen; i++)
            n += (size_t)snprintf(seen + n, sizeof seen - n, "%splatform %d \"%.60s\"", i ? "; " : "", i, l.platforms[i].name);
        for (i = 0; i < l.num_devices && n < sizeof seen; i++)
            n += (size_t)snprintf(seen + n, sizeof seen - n, "%sopencl:%d %.60s [%s]", i ? ", " : ": ", l.devices[i].index, l.devices[i].name, l.devices[i].type);
        n = (size_t)snprintf(out, cap, "  OpenCL here (%s): %s\n", l.loaded ? l.library : "no library", seen);
    }
    tr_opencl_list_free(ctx, &l);
    if (n >= cap) return;
    snprintf(out + n, cap - n,
             "  likely cause: the OpenCL driver list in this %s's environment (named above) lacks the GPU's driver%s;\n"
             "  name the driver (OCL_ICD_FILENAMES=libnvidia-opencl.so.1 in the command, after mpirun: mpirun -np N env OCL_ICD_FILENAMES=... tinyrec-train ...),\n"
             "  or TINYREC_OPENCL_DRIVERS=<path of the driver>, or train on the CPU on purpose: device=cpu, or '%s,cpu'%s",
             who, nranks > 1 ? " (a launcher such as mpirun may hand its ranks another list than the shell's)" : "", dev,
             nranks > 1 ? ", or TINYREC_EXPECT_GPU=0" : "");
}

/* The run's device: the selector (dev; NULL or "" is auto), where auto with several ranks becomes this
   rank's own GPU, set and opened at the start (not at the first model) so that a GPU that cannot be had
   stops the run before any work. Returns 0, else the exit status (2: a bad selector, 1: the device did
   not open) with the reason, what OpenCL listed and the likely cause in msg. */
TR_PROG int tr_prog_open_device(tr_ctx *ctx, const char *dev, int nranks, int local_rank, char *msg, size_t cap) {
    char pick[32], help[3072];
    if (!dev || !*dev || !strcmp(dev, "auto"))
        dev = nranks > 1 ? tr_prog_rank_device(ctx, local_rank, tr_prog_expect_gpu(nranks), pick, sizeof pick) : tr_prog_expect_gpu(nranks) ? "gpu" : "auto";
    if (tr_ctx_set_device(ctx, dev) != TR_OK) return snprintf(msg, cap, "%s", tr_ctx_last_error(ctx)), 2;
    if (tr_ctx_open_device(ctx) == TR_OK) return 0;
    tr_prog_device_help(ctx, dev, nranks, help, sizeof help);
    snprintf(msg, cap, "%s\n%s", tr_ctx_last_error(ctx), help);
    return 1;
}

/* A training run's dataset: the train split, the test split when there is one (*test NULL and a note in
   msg when not), checked against each other and against the preset's task. Returns 0, else the exit
   status (1: a file, 2: the wrong preset) with the reason in msg (the library's, when one failed). */
TR_PROG int tr_prog_open_data(tr_ctx *ctx, const char *dir, const tr_preset *p, tr_dataset **train, tr_dataset **test, char *msg, size_t cap) {
    char buf[TR_PROG_PATH_CAP + 64];
    const tr_dataset_meta *m;
    *train = *test = NULL, msg[0] = 0;
    if (tr_dataset_open(ctx, dir, "train", 0, train) != TR_OK) return snprintf(msg, cap, "cannot open the train split: %s", tr_ctx_last_error(ctx)), 1;
    m = &(*train)->meta;
    snprintf(buf, sizeof buf, "%s/test/dataset.json", dir);
    if (!tr_prog_file_exists(buf)) snprintf(msg, cap, "warning: %s has no test split; checkpoints are written without evaluation", dir);
    else if (tr_dataset_open(ctx, dir, "test", 0, test) != TR_OK) return snprintf(msg, cap, "cannot open the test split: %s", tr_ctx_last_error(ctx)), 1;
    else if ((*test)->meta.vocab_size != m->vocab_size || (*test)->meta.seq_len != m->seq_len)
        return snprintf(msg, cap, "%s: the test split (vocab_size %d, seq_len %d) does not match the train split (%d, %d)", dir, (*test)->meta.vocab_size,
                        (*test)->meta.seq_len, m->vocab_size, m->seq_len), 1;
    if ((p->data_vocab_size && m->vocab_size != p->data_vocab_size) || (p->data_seq_len && m->seq_len != p->data_seq_len))
        return snprintf(msg, cap,
                        "dataset %s has vocab_size %d and seq_len %d, but preset %s is for %s with vocab_size %d and seq_len %d%s.\n"
                        "  Pick the preset that fits the dataset (tinyrec-train --list-presets), or 'tiny' for any dataset.",
                        dir, m->vocab_size, m->seq_len, p->name, p->task, p->data_vocab_size, p->data_seq_len ? p->data_seq_len : m->seq_len, p->data_seq_len ? "" : " (any)"), 2;
    if (m->num_puzzle_identifiers > 2147483647) return snprintf(msg, cap, "dataset %s: num_puzzle_identifiers %lld is too large", dir, (long long)m->num_puzzle_identifiers), 1;
    return 0;
}

/* SIGINT / SIGTERM: the first sets tr_prog_stop (the program saves and stops at the end of its step, after
   saying so on stderr), a second exits at once with status 130. */
static volatile sig_atomic_t tr_prog_stop = 0;
static char tr_prog_stop_msg[128];
static void tr_prog_on_signal(int sig) {
    if (tr_prog_stop) _exit(130);
    tr_prog_stop = sig;
    if (write(2, tr_prog_stop_msg, strlen(tr_prog_stop_msg)) < 0) tr_prog_stop = sig;
}
TR_PROG void tr_prog_catch_stop(const char *prog) {
    struct sigaction sa;
    snprintf(tr_prog_stop_msg, sizeof tr_prog_stop_msg, "\n%s: stopping after this step (signal again to quit without saving)\n", prog);
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = tr_prog_on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* "227136 parameters (TRM 2 layers, D=64, mlp_t, T=2, n=2, M_max=16)" */
TR_PROG void tr_prog_model_line(const tr_model *m, char *buf, size_t cap) {
    const tr_model_config *c = tr_model_get_config(m);
    char kind[32];
    if (c->arch == TR_ARCH_HRM) snprintf(kind, sizeof kind, "HRM %d+%d layers", c->H_layers, c->L_layers);
    else snprintf(kind, sizeof kind, "TRM %d layers", c->L_layers);
    snprintf(buf, cap, "%zu parameters (%s, D=%d, %s, T=%d, n=%d, M_max=%d)", tr_model_num_params(m), kind, c->hidden_size, c->mlp_t ? "mlp_t" : "attention", c->H_cycles,
             c->L_cycles, c->halt_max_steps);
}

/* tr_evaluate's progress: "evaluating: batch k/n" on the bar's terminal; a stop signal stops it (with one
   process: ranks stop together at a step). */
typedef struct tr_prog_eval_bar {
    tr_prog_bar *bar;
    int ranks;
    double last;
} tr_prog_eval_bar;
static int tr_prog_eval_progress(void *user, const char *stage, int64_t done, int64_t total) {
    tr_prog_eval_bar *e = (tr_prog_eval_bar *)user;
    (void)stage;
    if (e->ranks > 1) return 0;
    if (e->bar->tty && done > 0 && tr_time_seconds() - e->last > 0.25) {
        printf("\r\033[K  evaluating: batch %lld/%lld", (long long)done, (long long)total);
        fflush(stdout);
        e->bar->shown = 1;
        e->last = tr_time_seconds();
    }
    return tr_prog_stop != 0;
}

/* Evaluates the test split from `start` (the EMA weights swapped in when ema), each rank its slice, the
   ranks' results combined (comm: NULL for one process). TR_ERR_INTERRUPTED when a signal stopped it. */
TR_PROG tr_status tr_prog_evaluate(tr_ctx *ctx, tr_trainer *t, tr_model *m, tr_carry *carry, tr_sampler *test, const tr_sampler_state *start, int ema, int64_t max_batches,
                                   const tr_comm *comm, tr_prog_bar *bar, tr_eval_result *e) {
    tr_prog_eval_bar eb;
    int swapped = 0;
    tr_status st = tr_sampler_set_state(test, start);
    eb.bar = bar, eb.ranks = comm ? comm->size : 1, eb.last = 0;
    if (st == TR_OK && ema && (st = tr_trainer_swap_ema(t)) == TR_OK) swapped = 1;
    if (st == TR_OK) st = tr_evaluate(m, carry, test, max_batches, tr_prog_eval_progress, &eb, e);
    if (st == TR_OK) st = tr_eval_result_reduce(ctx, comm, e);
    if (swapped && tr_trainer_swap_ema(t) != TR_OK && st == TR_OK) st = TR_ERR_DEVICE;
    tr_prog_bar_clear(bar);
    return st;
}

/* A training run's position, saved as its trainer state's blob (tr_checkpoint_save): where the train
   sampler is and what the run has seen. */
typedef struct tr_prog_run_pos {
    uint32_t magic, version;
    tr_sampler_state sampler;
    int64_t cur_pass; /* set pass of the last batch trained (or, after an eval, of the next) */
    int64_t evals;
    int64_t best_step;
    int64_t last_eval_step; /* -1: none */
    double best_exact;      /* -1: no eval yet */
    double epoch;
    double train_seconds;
} tr_prog_run_pos;
#define TR_PROG_RUN_POS_MAGIC 0x54525452u /* "TRTR" */

/* A new run's position; valid (1) for one read back from a state file this version wrote. */
TR_PROG int tr_prog_run_pos_init(tr_prog_run_pos *p, int resumed) {
    if (resumed) return p->magic == TR_PROG_RUN_POS_MAGIC && p->version == 1;
    memset(p, 0, sizeof *p);
    p->magic = TR_PROG_RUN_POS_MAGIC, p->version = 1;
    p->best_exact = -1, p->best_step = -1, p->last_eval_step = -1;
    return 1;
}

/* Counts an evaluation at step into the position; returns 1 when it is the best so far (exact accuracy). */
TR_PROG int tr_prog_run_pos_eval(tr_prog_run_pos *p, long step, const tr_eval_result *e) {
    int best = e->count > 0 && e->exact_accuracy > p->best_exact;
    if (best) p->best_exact = e->exact_accuracy, p->best_step = step;
    p->evals++, p->last_eval_step = step;
    return best;
}

/* Whether to stop now (a signal): with several ranks (comm), every rank stops at the same step when any
   got one (mpirun forwards SIGINT/SIGTERM, not at the same instant). -1: the communicator failed. */
TR_PROG int tr_prog_stop_requested(const tr_comm *comm) {
    float v = tr_prog_stop != 0;
    if (!comm || comm->size == 1) return tr_prog_stop != 0;
    if (comm->allreduce_sum(comm->user, &v, 1) != TR_OK) return -1;
    return v > 0;
}

/* init_from (when set) and the run's identifiers.json. Returns 0, else 1 with the reason in msg. */
TR_PROG int tr_prog_init_from(tr_ctx *ctx, const tr_prog_init *in, const tr_prog_run_files *f, tr_model *m, char *msg, size_t cap) {
    tr_init_from_options io;
    tr_init_from_summary s;
    char dir[TR_PROG_PATH_CAP + 32], *slash;
    if (!in) return 0;
    snprintf(dir, sizeof dir, "%s", f->model);
    if ((slash = strrchr(dir, '/')) != NULL) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    if (in->writer && in->ds && in->ds->identifiers && tr_write_identifiers(ctx, dir, in->ds->num_identifiers, (const char *const *)in->ds->identifiers) != TR_OK)
        return snprintf(msg, cap, "cannot write the run's identifiers.json: %s", tr_ctx_last_error(ctx)), 1;
    if (!in->from[0]) return 0;
    memset(&io, 0, sizeof io);
    if (in->ds && in->ds->identifiers && in->ds->num_identifiers == tr_model_get_config(m)->num_puzzle_identifiers)
        io.names = (const char *const *)in->ds->identifiers, io.num_names = in->ds->num_identifiers;
    io.identifiers = in->identifiers[0] ? in->identifiers : NULL, io.map_by_index = in->map_by_index;
    if (tr_model_init_from(m, in->from, &io, &s) != TR_OK) return snprintf(msg, cap, "init_from=%s: %s", in->from, tr_ctx_last_error(ctx)), 1;
    if (in->writer)
        printf("init_from %s: weights loaded; puzzle-embedding rows %s: %lld kept, %lld added (zeros), %lld dropped\n", in->from, s.by_index ? "by position" : "by name",
               (long long)s.kept, (long long)s.added, (long long)s.dropped);
    return 0;
}

/* The model and trainer of the run in folder f: new from arch, or (resume) the model it saved, whose
   arch must be arch, with its trainer state, whose blob (the program's run position) must be extra_size
   bytes and is read into extra. Returns 0, else the exit status with the reason in msg. */
TR_PROG int tr_prog_run_model(tr_ctx *ctx, const tr_prog_run_files *f, int resume, const tr_model_config *arch, const tr_train_config *tc, void *extra, size_t extra_size,
                              const tr_prog_init *init, tr_model **model, tr_trainer **trainer, char *msg, size_t cap) {
    tr_model_load_options lo;
    char cfgjson[2][4096];
    size_t len = 0;
    memset(&lo, 0, sizeof lo);
    lo.num_puzzle_identifiers = arch->num_puzzle_identifiers;
    if (!resume && tr_model_create(ctx, arch, model) != TR_OK) return snprintf(msg, cap, "cannot create the model: %s", tr_ctx_last_error(ctx)), 1;
    if (!resume && tr_prog_init_from(ctx, init, f, *model, msg, cap) != 0) return 1;
    if (resume && tr_model_load(ctx, f->model, &lo, model) != TR_OK) return snprintf(msg, cap, "cannot load the checkpoint to resume: %s", tr_ctx_last_error(ctx)), 1;
    tr_model_config_to_json(arch, cfgjson[0], sizeof cfgjson[0], NULL);
    tr_model_config_to_json(tr_model_get_config(*model), cfgjson[1], sizeof cfgjson[1], NULL);
    if (resume && strcmp(cfgjson[0], cfgjson[1]))
        return snprintf(msg, cap, "the arch settings differ from the checkpoint's; a resumed run keeps its model.\n  checkpoint: %.2000s\n  requested:  %.2000s", cfgjson[1], cfgjson[0]), 2;
    if (tr_trainer_create(*model, tc, trainer) != TR_OK) return snprintf(msg, cap, "cannot create the trainer: %s", tr_ctx_last_error(ctx)), 1;
    if (resume && tr_trainer_load(*trainer, f->state, extra, extra_size, &len) != TR_OK)
        return snprintf(msg, cap, "cannot load the trainer state: %s", tr_ctx_last_error(ctx)), 1;
    if (resume && len != extra_size) return snprintf(msg, cap, "%s was not written by this version of the program", f->state), 1;
    return 0;
}

/* ---- metrics.jsonl -------------------------------------------------------------------------------- */

/* ,"key":v (null when not finite) */
TR_PROG void tr_prog_json_num(FILE *f, const char *key, double v) {
    if (isfinite(v)) fprintf(f, ",\"%s\":%.9g", key, v);
    else fprintf(f, ",\"%s\":null", key);
}

/* Adds a step's metrics to a sum, the losses divided by rows (they are sums over the batch). */
TR_PROG void tr_prog_metrics_add(tr_metrics *sum, const tr_metrics *m, double rows) {
    sum->count += m->count, sum->accuracy += m->accuracy, sum->exact_accuracy += m->exact_accuracy, sum->q_halt_accuracy += m->q_halt_accuracy;
    sum->steps += m->steps, sum->loss += m->loss / rows, sum->lm_loss += m->lm_loss / rows, sum->q_halt_loss += m->q_halt_loss / rows;
    sum->q_continue_loss += m->q_continue_loss / rows;
}

/* A run's running metrics: the metrics.jsonl window (sums over its trained steps, the skipped ones
   counted) and the progress line's (the loss smoothed, accuracies over the rows that halted since the
   last line). Start with loss NAN and the rest zero. */
typedef struct tr_prog_meter {
    tr_metrics win, disp;
    int n, win_skipped;
    long skipped; /* in this process */
    double loss, acc, exact, act;
} tr_prog_meter;

TR_PROG void tr_prog_meter_add(tr_prog_meter *m, const tr_metrics *mt, int B) {
    if (mt->skipped) {
        m->win_skipped++, m->skipped++;
        return;
    }
    tr_prog_metrics_add(&m->win, mt, B), m->n++;
    m->loss = isfinite(m->loss) ? 0.9 * m->loss + 0.1 * mt->loss / B : mt->loss / B;
    tr_prog_metrics_add(&m->disp, mt, 1);
}

/* The progress line's accuracies over the rows that halted since the last one. */
TR_PROG void tr_prog_meter_take(tr_prog_meter *m) {
    if (m->disp.count > 0) m->acc = m->disp.accuracy / m->disp.count, m->exact = m->disp.exact_accuracy / m->disp.count, m->act = m->disp.steps / m->disp.count;
    memset(&m->disp, 0, sizeof m->disp);
}

/* The progress line: "[####....] step/target ep E loss L acc A exact X act S N samples/s ETA" on a
   terminal, else "step s/t  epoch E  loss L  accuracy A  exact X  act_steps S  N samples/s  elapsed ETA". */
TR_PROG void tr_prog_meter_show(tr_prog_meter *m, tr_prog_bar *bar, long step, long target, double epoch, double steps_per_s, int B) {
    char tty[160], line[200], tail[48] = "";
    tr_prog_meter_take(m);
    if (m->skipped) snprintf(tail, sizeof tail, "  %ld skipped (NaN/inf)", m->skipped);
    snprintf(tty, sizeof tty, "ep %.2f loss %.4f acc %.4f exact %.4f act %.2f %.0f samples/s", epoch, m->loss, m->acc, m->exact, m->act, steps_per_s * B);
    snprintf(line, sizeof line, "epoch %.2f  loss %.4f  accuracy %.4f  exact %.4f  act_steps %.2f  %.1f samples/s", epoch, m->loss, m->acc, m->exact, m->act, steps_per_s * B);
    tr_prog_bar_show(bar, step, target, steps_per_s, tty, line, tail);
}

/* What a train line says besides the window's metrics. */
typedef struct tr_prog_train_line {
    long step;
    double epoch, lr;
    const char *forward_dtype;
    double loss_scale; /* float16's at the window's last step; 0: none */
    int hrm;           /* HRM: its Q-learning's q_continue_loss too */
    double samples_per_s, seconds;
} tr_prog_train_line;

/* A train line: the means over the window's n trained steps (sums w, tr_prog_metrics_add) and the count of
   skipped ones; *pt gets its point for the plot. */
TR_PROG void tr_prog_jsonl_train(FILE *f, const tr_prog_train_line *l, const tr_metrics *w, int n, int skipped, tr_metrics_point *pt) {
    double c = w->count;
    fprintf(f, "{\"type\":\"train\",\"step\":%ld,\"epoch\":%.6g,\"lr\":%.6g,\"forward_dtype\":\"%s\"", l->step, l->epoch, l->lr, l->forward_dtype);
    if (l->loss_scale > 0) fprintf(f, ",\"loss_scale\":%.9g", l->loss_scale);
    if (n) fprintf(f, ",\"loss\":%.17g", w->loss / n);
    else fprintf(f, ",\"loss\":null");
    tr_prog_json_num(f, "lm_loss", w->lm_loss / n);
    tr_prog_json_num(f, "q_halt_loss", w->q_halt_loss / n);
    if (l->hrm) tr_prog_json_num(f, "q_continue_loss", w->q_continue_loss / n);
    tr_prog_json_num(f, "accuracy", c ? w->accuracy / c : NAN);
    tr_prog_json_num(f, "exact_accuracy", c ? w->exact_accuracy / c : NAN);
    tr_prog_json_num(f, "q_halt_accuracy", c ? w->q_halt_accuracy / c : NAN);
    tr_prog_json_num(f, "steps", c ? w->steps / c : NAN);
    fprintf(f, ",\"count\":%.0f,\"skipped\":%d,\"samples_per_s\":%.2f,\"time\":%.3f}\n", c, skipped, l->samples_per_s, l->seconds);
    fflush(f);
    memset(pt, 0, sizeof *pt);
    pt->step = l->step, pt->loss = n ? w->loss / n : NAN, pt->accuracy = c ? w->accuracy / c : NAN, pt->exact_accuracy = c ? w->exact_accuracy / c : NAN;
}

/* An evaluation's line: its means, the exact accuracy after each ACT step, whether it is the best so far
   and (run not NULL) what it ran on and in. */
TR_PROG void tr_prog_jsonl_eval(FILE *f, long step, double epoch, const tr_eval_result *e, int best, const tr_run_info *run) {
    int k;
    fprintf(f, "{\"type\":\"eval\",\"step\":%ld,\"epoch\":%.6g", step, epoch);
    tr_prog_json_num(f, "accuracy", e->accuracy);
    tr_prog_json_num(f, "exact_accuracy", e->exact_accuracy);
    tr_prog_json_num(f, "steps", e->steps);
    tr_prog_json_num(f, "lm_loss", e->lm_loss);
    tr_prog_json_num(f, "q_halt_accuracy", e->q_halt_accuracy);
    fprintf(f, ",\"exact_by_step\":[");
    for (k = 0; k < e->num_steps; k++)
        if (isfinite(e->exact_by_step[k])) fprintf(f, "%s%.6g", k ? "," : "", e->exact_by_step[k]);
        else fprintf(f, "%snull", k ? "," : "");
    fprintf(f, "],\"count\":%.0f,\"best\":%s,\"seconds\":%.3f", e->count, best ? "true" : "false", e->seconds);
    if (run) fputc(',', f), tr_run_info_fput_json(f, run);
    fputs("}\n", f);
    fflush(f);
}

/* The meter's window as a train line (tr_prog_jsonl_train), then a new window; returns its trained steps. */
TR_PROG int tr_prog_meter_log(tr_prog_meter *m, FILE *f, const tr_prog_train_line *l, tr_metrics_point *pt) {
    int n = m->n;
    tr_prog_jsonl_train(f, l, &m->win, n, m->win_skipped, pt);
    memset(&m->win, 0, sizeof m->win);
    m->n = m->win_skipped = 0;
    return n;
}

/* The history point of an evaluation (for tr_metrics_plot_svg). */
TR_PROG tr_metrics_point tr_prog_eval_point(long step, const tr_eval_result *e) {
    tr_metrics_point p;
    int k;
    memset(&p, 0, sizeof p);
    p.step = step, p.loss = e->lm_loss, p.accuracy = e->accuracy, p.exact_accuracy = e->exact_accuracy;
    for (k = 0; k < e->num_steps && k < TR_EVAL_MAX_STEPS; k++) p.exact_by_step[p.num_steps++] = e->exact_by_step[k];
    return p;
}
#endif /* TINYREC_PROG_H */
