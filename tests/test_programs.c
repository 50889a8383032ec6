/* The user programs, driven as a user would: build/tinyrec-train and build/tinyrec-solve (and
   build/tinyrec-data for the dataset) on tiny configurations in a temporary folder, and
   build/tinyrec-devices. Smoke runs, exact resume through the CLI, SIGINT mid-run, --jsonl
   output, bad command lines, the device options (device=, --device, TINYREC_DEVICE).
   The binaries must exist (make all builds them); a missing one fails the suite. */
#define TINYREC_IMPLEMENTATION
#include "test_util.h"
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char g_dir[512];
static char g_train[1024], g_solve[1024], g_data[1024], g_devices[1024];
static int g_has_python = 0;

/* ---- helpers ------------------------------------------------------------------------------ */


static int file_exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

static void pathf(char *buf, size_t cap, const char *fmt, const char *a) {
    snprintf(buf, cap, "%s/", g_dir);
    snprintf(buf + strlen(buf), cap - strlen(buf), fmt, a);
}

/* Runs a shell command with stdout/stderr to <dir>/<tag>.out/.err; returns the exit status, and
   fails the test if the program died of a signal (a crash). */
static int run_cmd(const char *tag, const char *fmt, ...) {
    char cmd[8192];
    va_list ap;
    int st, code;
    size_t n;
    va_start(ap, fmt);
    n = (size_t)vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    assert_true(n < sizeof cmd - 600);
    snprintf(cmd + n, sizeof cmd - n, " > '%s/%s.out' 2> '%s/%s.err'", g_dir, tag, g_dir, tag);
    st = system(cmd);
    assert_true(st != -1);
    if (WIFSIGNALED(st)) fail_msg("%s: killed by signal %d: %s", tag, WTERMSIG(st), cmd);
    assert_true(WIFEXITED(st));
    code = WEXITSTATUS(st);
    if (code >= 128) fail_msg("%s: exit status %d (a signal?): %s", tag, code, cmd);
    return code;
}

static char *tag_file(const char *tag, const char *ext) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s.%s", g_dir, tag, ext);
    return tu_slurp(p, NULL);
}

/* Asserts that <tag>.err holds `needle`. */
/* Lines of <tag>.<ext>. */
static int count_lines_of(const char *tag, const char *ext) {
    char *t = tag_file(tag, ext), *c;
    int n = 0;
    assert_non_null(t);
    for (c = t; *c; c++) n += *c == '\n';
    free(t);
    return n;
}

static void assert_err_has(const char *tag, const char *needle) {
    char *e = tag_file(tag, "err");
    assert_non_null(e);
    if (!strstr(e, needle)) fail_msg("%s: stderr lacks \"%s\":\n%s", tag, needle, e);
    free(e);
}

/* ---- a small JSON validator: returns the end of one value, or NULL ------------------------- */

static const char *js_ws(const char *p) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return p;
}

static const char *js_value(const char *p, int depth) {
    p = js_ws(p);
    if (depth > 64) return NULL;
    if (*p == '"') {
        for (p++; *p && *p != '"'; p++) {
            if ((unsigned char)*p < 0x20) return NULL;
            if (*p == '\\') {
                p++;
                if (*p == 'u') {
                    int k;
                    for (k = 1; k <= 4; k++)
                        if (!strchr("0123456789abcdefABCDEF", p[k]) || !p[k]) return NULL;
                    p += 4;
                } else if (!*p || !strchr("\"\\/bfnrt", *p))
                    return NULL;
            }
        }
        return *p == '"' ? p + 1 : NULL;
    }
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        int obj = *p == '{';
        p = js_ws(p + 1);
        if (*p == close) return p + 1;
        for (;;) {
            if (obj) {
                p = js_ws(p);
                if (*p != '"' || !(p = js_value(p, depth + 1))) return NULL;
                p = js_ws(p);
                if (*p++ != ':') return NULL;
            }
            if (!(p = js_value(p, depth + 1))) return NULL;
            p = js_ws(p);
            if (*p == ',') {
                p++;
                continue;
            }
            return *p == close ? p + 1 : NULL;
        }
    }
    if (!strncmp(p, "true", 4)) return p + 4;
    if (!strncmp(p, "false", 5)) return p + 5;
    if (!strncmp(p, "null", 4)) return p + 4;
    if (*p == '-' || (*p >= '0' && *p <= '9')) {
        const char *s = p;
        if (*p == '-') p++;
        if (!(*p >= '0' && *p <= '9')) return NULL;
        if (*p == '0') p++;
        else
            while (*p >= '0' && *p <= '9') p++;
        if (*p == '.') {
            p++;
            if (!(*p >= '0' && *p <= '9')) return NULL;
            while (*p >= '0' && *p <= '9') p++;
        }
        if (*p == 'e' || *p == 'E') {
            p++;
            if (*p == '+' || *p == '-') p++;
            if (!(*p >= '0' && *p <= '9')) return NULL;
            while (*p >= '0' && *p <= '9') p++;
        }
        return p > s ? p : NULL;
    }
    return NULL;
}

/* Every non-empty line is one JSON object; returns the count. */
static int check_jsonl(const char *text) {
    int n = 0;
    const char *p = text;
    while (*p) {
        const char *e = strchr(p, '\n'), *end;
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len) {
            char *line = (char *)malloc(len + 1);
            memcpy(line, p, len);
            line[len] = 0;
            if (line[0] != '{') fail_msg("not a JSON object: %.200s", line);
            end = js_value(line, 0);
            if (!end || *js_ws(end)) fail_msg("invalid JSON: %.300s", line);
            free(line);
            n++;
        }
        p += len + (e ? 1 : 0);
    }
    return n;
}

/* The value text of a top-level key in a one-line object (first occurrence). */
static const char *json_field(const char *line, const char *key) {
    char pat[128];
    const char *p;
    snprintf(pat, sizeof pat, "\"%s\":", key);
    p = strstr(line, pat);
    return p ? p + strlen(pat) : NULL;
}

/* Counts the items of a list of numbers or of plain strings starting at p ('['); for strings,
   checks that each has `len` characters. */
static int list_count(const char *p, int strings, int len) {
    int n = 0;
    assert_true(*p == '[');
    p++;
    if (*p == ']') return 0;
    for (;;) {
        if (strings) {
            const char *e;
            assert_true(*p == '"');
            e = strchr(p + 1, '"');
            assert_non_null(e);
            assert_int_equal((int)(e - p - 1), len);
            p = e + 1;
        } else {
            char *e;
            if (!strncmp(p, "null", 4)) e = (char *)p + 4;
            else strtod(p, &e);
            assert_true(e > p);
            p = e;
        }
        n++;
        if (*p == ']') return n;
        assert_true(*p == ',');
        p++;
    }
}

static void check_solve_jsonl(const char *text, int expect_lines, int cells, int forced_steps) {
    const char *p = text;
    int n = 0;
    assert_int_equal(check_jsonl(text), expect_lines);
    while (*p) {
        const char *e = strchr(p, '\n'), *f;
        char *line;
        size_t len = e ? (size_t)(e - p) : strlen(p);
        int steps;
        line = (char *)malloc(len + 1);
        memcpy(line, p, len);
        line[len] = 0;
        if (len) {
            assert_non_null(json_field(line, "index"));
            assert_non_null(f = json_field(line, "steps"));
            steps = atoi(f);
            assert_true(steps >= 1);
            if (forced_steps) assert_int_equal(steps, forced_steps);
            assert_non_null(f = json_field(line, "q_halt"));
            assert_int_equal(list_count(f, 0, 0), steps);
            assert_non_null(f = json_field(line, "predictions"));
            assert_int_equal(list_count(f, 1, cells), steps);
            assert_non_null(f = json_field(line, "answer"));
            assert_true(*f == '"' && strchr(f + 1, '"') - f - 1 == cells);
            assert_non_null(f = json_field(line, "valid"));
            assert_true(!strncmp(f, "true", 4) || !strncmp(f, "false", 5));
            n++;
        }
        free(line);
        p += len + (e ? 1 : 0);
    }
    assert_int_equal(n, expect_lines);
    if (g_has_python) { /* and Python's json agrees */
        char path[1024];
        FILE *f;
        int st;
        snprintf(path, sizeof path, "%s/check.jsonl", g_dir);
        f = fopen(path, "wb");
        assert_non_null(f);
        fputs(text, f);
        fclose(f);
        assert_int_equal(run_cmd("python", "python3 -c 'import json,sys\nfor l in sys.stdin:\n    o=json.loads(l)\n    assert all(k in o for k in "
                                           "(\"index\",\"steps\",\"q_halt\",\"predictions\",\"answer\",\"valid\")), l\n    assert len(o[\"q_halt\"])==o[\"steps\"]==len(o[\"predictions\"])\n    "
                                           "assert isinstance(o[\"valid\"], bool)' < '%s'",
                                 path),
                         0);
        (void)st;
    }
}

/* tinyrec-solve --jsonl on the 3 good puzzles of write_sudoku_input, with the checkpoint's ACT halting and
   `extra` options: exit 0 and one well-formed record each. */
static void solve_sudoku_jsonl(const char *tag, const char *ck, const char *in, const char *extra) {
    char *out;
    assert_int_equal(run_cmd(tag, "'%s' '%s' '%s' --jsonl --threads 1 %s", g_solve, ck, in, extra), 0);
    out = tag_file(tag, "out");
    check_solve_jsonl(out, 3, 81, 0);
    free(out);
}

/* (step, loss text) of the train lines of a metrics.jsonl */
static int train_losses(const char *path, long *steps, char (*loss)[40], int cap) {
    char *text = tu_slurp(path, NULL), *p;
    int n = 0;
    assert_non_null(text);
    for (p = text; *p;) {
        char *e = strchr(p, '\n');
        if (e) *e = 0;
        if (strstr(p, "\"type\":\"train\"")) {
            const char *s = json_field(p, "step"), *l = json_field(p, "loss");
            size_t k = 0;
            assert_non_null(s);
            assert_non_null(l);
            assert_true(n < cap);
            steps[n] = atol(s);
            while (l[k] && l[k] != ',' && l[k] != '}' && k < 39) k++;
            memcpy(loss[n], l, k);
            loss[n][k] = 0;
            n++;
        }
        if (!e) break;
        p = e + 1;
    }
    free(text);
    return n;
}

static int count_lines_with(const char *path, const char *needle) {
    char *text = tu_slurp(path, NULL), *p;
    int n = 0;
    if (!text) return 0;
    for (p = text; (p = strstr(p, needle)) != NULL; p++) n++;
    free(text);
    return n;
}

/* Common arguments of the tiny training runs: 48 train puzzles, batch 8 = 6 steps per epoch. */
#define TINY_ARGS "sudoku-tiny data_path='%s/data' global_batch_size=8 arch.halt_max_steps=2 threads=1 lr_warmup_steps=2"

static void ensure_smoke_run(void) {
    char p[1024];
    pathf(p, sizeof p, "%s", "smoke/best.safetensors");
    if (file_exists(p)) return;
    assert_int_equal(run_cmd("smoke", "'%s' " TINY_ARGS " checkpoint_path='%s/smoke' epochs=2 eval_interval=1", g_train, g_dir, g_dir), 0);
}

/* ---- tests -------------------------------------------------------------------------------- */

static void test_train_smoke(void **state) {
    char p[1024], *out, *svg;
    static const char *files[] = {"latest.safetensors", "latest.state.safetensors", "best.safetensors", "metrics.jsonl", "metrics.svg", "train_config.txt"};
    int i;
    tr_ctx *ctx = tu_ctx(1, 0);
    tr_model *m = NULL;
    (void)state;
    ensure_smoke_run();
    for (i = 0; i < 6; i++) {
        pathf(p, sizeof p, "smoke/%s", files[i]);
        if (!file_exists(p)) fail_msg("missing %s", p);
    }
    /* plain progress lines (not a terminal) and two evaluations */
    out = tag_file("smoke", "out");
    assert_non_null(out);
    assert_non_null(strstr(out, "step 1/12"));
    assert_non_null(strstr(out, "samples/s"));
    assert_non_null(strstr(out, "ETA"));
    assert_non_null(strstr(out, "eval  step 6"));
    assert_non_null(strstr(out, "eval  step 12"));
    assert_null(strchr(out, '\r'));
    free(out);
    pathf(p, sizeof p, "%s", "smoke/metrics.jsonl");
    {
        char *text = tu_slurp(p, NULL);
        assert_int_equal(check_jsonl(text), 14);
        free(text);
    }
    assert_int_equal(count_lines_with(p, "\"type\":\"train\""), 12);
    assert_int_equal(count_lines_with(p, "\"type\":\"eval\""), 2);
    assert_int_equal(count_lines_with(p, "\"exact_accuracy\""), 14);
    pathf(p, sizeof p, "%s", "smoke/metrics.svg");
    svg = tu_slurp(p, NULL);
    assert_true(!strncmp(svg, "<svg", 4));
    assert_non_null(strstr(svg, "<polyline"));
    assert_non_null(strstr(svg, "</svg>"));
    free(svg);
    /* both model files load, with the dataset's sizes */
    pathf(p, sizeof p, "%s", "smoke/best.safetensors");
    assert_int_equal(tr_model_load(ctx, p, NULL, &m), TR_OK);
    assert_int_equal(tr_model_get_config(m)->vocab_size, 11);
    assert_int_equal(tr_model_get_config(m)->seq_len, 81);
    assert_int_equal(tr_model_get_config(m)->halt_max_steps, 2);
    tr_model_destroy(m);
    pathf(p, sizeof p, "%s", "smoke/latest.safetensors");
    assert_int_equal(tr_model_load(ctx, p, NULL, &m), TR_OK);
    tr_model_destroy(m);
    tr_ctx_destroy(ctx);
    /* --help works and the same folder is not silently overwritten */
    assert_int_equal(run_cmd("help", "'%s' --help", g_train), 0);
    out = tag_file("help", "out");
    assert_non_null(strstr(out, "arch.L_cycles"));
    assert_non_null(strstr(out, "sudoku-tiny"));
    free(out);
    assert_int_equal(run_cmd("again", "'%s' " TINY_ARGS " checkpoint_path='%s/smoke' epochs=2", g_train, g_dir, g_dir), 2);
    assert_err_has("again", "--resume");
}

static void test_train_resume_cli(void **state) {
    long sa[64], sb[64];
    char la[64][40], lb[64][40], p[1024], q[1024];
    int na, nb, i;
    (void)state;
    /* 10 steps straight, vs 5 + --resume + 5; an evaluation (step 6) falls in the second half */
    assert_int_equal(run_cmd("resA", "'%s' " TINY_ARGS " checkpoint_path='%s/resA' epochs=4 eval_interval=1 max_steps=10", g_train, g_dir, g_dir), 0);
    assert_int_equal(run_cmd("resB1", "'%s' " TINY_ARGS " checkpoint_path='%s/resB' epochs=4 eval_interval=1 max_steps=5", g_train, g_dir, g_dir), 0);
    assert_int_equal(run_cmd("resB2", "'%s' --resume checkpoint_path='%s/resB' max_steps=10", g_train, g_dir), 0);
    pathf(p, sizeof p, "%s", "resA/metrics.jsonl");
    pathf(q, sizeof q, "%s", "resB/metrics.jsonl");
    na = train_losses(p, sa, la, 64);
    nb = train_losses(q, sb, lb, 64);
    assert_int_equal(na, 10);
    assert_int_equal(nb, 10);
    for (i = 0; i < na; i++) {
        assert_int_equal(sa[i], i + 1);
        assert_int_equal(sb[i], i + 1);
        if (strcmp(la[i], lb[i])) fail_msg("step %d: loss %s uninterrupted, %s resumed", i + 1, la[i], lb[i]);
    }
    assert_string_not_equal(la[0], la[9]); /* it trained */
    assert_int_equal(count_lines_with(q, "\"type\":\"eval\""), 1);
    /* the final models are the same bytes */
    {
        char *a, *b;
        struct stat s1, s2;
        pathf(p, sizeof p, "%s", "resA/latest.safetensors");
        pathf(q, sizeof q, "%s", "resB/latest.safetensors");
        assert_int_equal(stat(p, &s1), 0);
        assert_int_equal(stat(q, &s2), 0);
        assert_int_equal(s1.st_size, s2.st_size);
        a = tu_slurp(p, NULL), b = tu_slurp(q, NULL);
        assert_memory_equal(a, b, (size_t)s1.st_size);
        free(a), free(b);
    }
}

static void test_train_sigint(void **state) {
    char cp[1024], jl[1024], outp[1024], mp[1024];
    pid_t pid;
    int st, i, lines = 0;
    tr_ctx *ctx;
    tr_model *m = NULL;
    (void)state;
    pathf(cp, sizeof cp, "%s", "sig");
    pathf(jl, sizeof jl, "%s", "sig/metrics.jsonl");
    pathf(outp, sizeof outp, "%s", "sig.out");
    pathf(mp, sizeof mp, "%s", "sig/latest.safetensors");
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char a1[1100], a2[1100];
        char errp[1100];
        FILE *o = freopen(outp, "wb", stdout);
        snprintf(errp, sizeof errp, "%s/sig.err", g_dir);
        o = o ? freopen(errp, "wb", stderr) : o;
        (void)o;
        snprintf(a1, sizeof a1, "data_path=%s/data", g_dir);
        snprintf(a2, sizeof a2, "checkpoint_path=%s", cp);
        execl(g_train, g_train, "sudoku-tiny", a1, a2, "global_batch_size=8", "arch.halt_max_steps=2", "threads=1", "epochs=100000", "eval_interval=50000", (char *)NULL);
        _exit(127);
    }
    /* wait until a few steps are logged (at most 30 s), then Ctrl-C */
    for (i = 0; i < 600 && lines < 3; i++) {
        struct timespec ts = {0, 50000000L};
        nanosleep(&ts, NULL);
        lines = count_lines_with(jl, "\"type\":\"train\"");
        if (waitpid(pid, &st, WNOHANG) == pid) fail_msg("tinyrec-train exited early (status %d)", st);
    }
    assert_true(lines >= 3);
    assert_int_equal(kill(pid, SIGINT), 0);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (WIFSIGNALED(st)) fail_msg("tinyrec-train died of signal %d instead of exiting cleanly", WTERMSIG(st));
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 130);
    {
        char *out = tu_slurp(outp, NULL);
        assert_non_null(out);
        assert_non_null(strstr(out, "interrupted at step"));
        free(out);
    }
    /* the checkpoint loads */
    ctx = tu_ctx(1, 0);
    assert_int_equal(tr_model_load(ctx, mp, NULL, &m), TR_OK);
    assert_int_equal(tr_model_get_config(m)->seq_len, 81);
    tr_model_destroy(m);
    tr_ctx_destroy(ctx);
    /* and the run continues from it */
    lines = count_lines_with(jl, "\"type\":\"train\"");
    assert_int_equal(run_cmd("sig2", "'%s' --resume checkpoint_path='%s' max_steps=%d", g_train, cp, lines + 2), 0);
    assert_int_equal(count_lines_with(jl, "\"type\":\"train\""), lines + 2);
}

/* Writes n generated Sudoku lines plus malformed ones; returns the count of good puzzles. */
static int write_sudoku_input(const char *path) {
    tr_ctx *ctx = tu_ctx(1, 0);
    FILE *f = fopen(path, "wb");
    int i, k;
    assert_non_null(f);
    for (i = 0; i < 3; i++) {
        uint8_t q[81], a[81];
        assert_int_equal(tr_sudoku_generate(ctx, 77, (uint64_t)i, 36, q, a), TR_OK);
        for (k = 0; k < 81; k++) fputc(q[k] ? '0' + q[k] : (i == 1 ? '0' : '.'), f);
        fputc('\n', f);
        if (i == 0) {
            fputs("12345\n", f);                                                                                    /* line 2: too short */
            fputs("1234567x9.......................................................................\n", f); /* line 3: bad character */
            fputs("11...............................................................................\n", f); /* line 4: contradictory */
        }
    }
    fclose(f);
    tr_ctx_destroy(ctx);
    return 3;
}

static void test_solve_sudoku(void **state) {
    char in[1024], ck[1024], *out;
    (void)state;
    ensure_smoke_run();
    pathf(in, sizeof in, "%s", "sudoku.txt");
    pathf(ck, sizeof ck, "%s", "smoke/best.safetensors");
    write_sudoku_input(in);
    /* text output, from stdin */
    assert_int_equal(run_cmd("solve_txt", "'%s' '%s' --threads 1 < '%s'", g_solve, ck, in), 0);
    out = tag_file("solve_txt", "out");
    assert_non_null(strstr(out, "puzzle"));
    assert_non_null(strstr(out, "answer"));
    assert_non_null(strstr(out, "valid"));
    assert_non_null(strstr(out, "3 sudoku puzzles"));
    assert_non_null(strstr(out, "3 malformed skipped"));
    assert_null(strstr(out, "\033[")); /* no colours when not on a terminal */
    free(out);
    assert_err_has("solve_txt", "line 2:");
    assert_err_has("solve_txt", "line 3:");
    assert_err_has("solve_txt", "line 4:");
    /* --jsonl, ACT halting and forced steps */
    assert_int_equal(run_cmd("solve_jsonl", "'%s' '%s' '%s' --jsonl --threads 1", g_solve, ck, in), 0);
    out = tag_file("solve_jsonl", "out");
    check_solve_jsonl(out, 3, 81, 0);
    assert_non_null(strstr(out, "\"index\":0,"));
    assert_non_null(strstr(out, "\"index\":4,")); /* the malformed records are counted */
    free(out);
    assert_int_equal(run_cmd("solve_steps", "'%s' '%s' '%s' --jsonl --steps 3 --batch 2 --threads 1", g_solve, ck, in), 0);
    out = tag_file("solve_steps", "out");
    check_solve_jsonl(out, 3, 81, 3);
    free(out);
}

/* An HRM trained by tinyrec-train (a few steps) and solved by tinyrec-solve: the kind comes from
   the preset and then from the checkpoint, with no flag of its own. */
static void test_train_solve_hrm(void **state) {
    char in[1024], ck[1024], *out;
    (void)state;
    ensure_smoke_run(); /* the data */
    assert_int_equal(run_cmd("hrm", "'%s' hrm-sudoku-tiny data_path='%s/data' global_batch_size=8 arch.halt_max_steps=2 threads=1 lr_warmup_steps=2 "
                                    "checkpoint_path='%s/hrm' epochs=1 eval_interval=1 eval_batches=2 max_steps=6",
                             g_train, g_dir, g_dir),
                     0);
    out = tag_file("hrm", "out");
    assert_non_null(strstr(out, "HRM 2+2 layers"));
    free(out);
    pathf(in, sizeof in, "%s", "hrm/metrics.jsonl");
    out = tu_slurp(in, NULL);
    assert_non_null(out);
    assert_non_null(strstr(out, "\"q_continue_loss\":")); /* its Q-learning */
    free(out);
    pathf(in, sizeof in, "%s", "sudoku.txt");
    pathf(ck, sizeof ck, "%s", "hrm/latest.safetensors");
    write_sudoku_input(in);
    solve_sudoku_jsonl("hrm_solve", ck, in, "");
}

/* The precision through the programs: tinyrec-train in float16 names it in its header, writes it and the
   loss scale into metrics.jsonl and into the checkpoint; tinyrec-solve takes the checkpoint's precision or
   --dtype; a bad --dtype is a usage error. */
/* Every program names what it runs on and in: the device, the kernel set and the precision (with the
   products' kernels and the tape when it is 16-bit) in its header and summary, and --jsonl / metrics.jsonl
   carry the same as fields; a precision that cannot be had is one warning and "fallback" in the line. An
   evaluation records its exact accuracy after each ACT step, which metrics.svg plots. --help fits a screen
   and ends with an example. */
static int find_bin(char *out, size_t cap, const char *name);
static void assert_out_has(const char *tag, const char *needle);
static void test_run_description(void **state) {
    static const char *progs[] = {"train", "solve", "data", "devices", "arc-eval", "demo"};
    char in[1024], p[1024], *out, *line;
    int i, lines;
    (void)state;
    ensure_smoke_run();
    out = tag_file("smoke", "out");
    assert_non_null(strstr(out, "\ndevice cpu (")); /* the header's device line, with the precision */
    assert_non_null(strstr(out, " threads), float32\n"));
    assert_non_null(strstr(out, "; on cpu (")); /* the summary */
    free(out);
    pathf(p, sizeof p, "%s", "smoke/metrics.jsonl");
    out = tu_slurp(p, NULL);
    assert_non_null(line = strstr(out, "{\"type\":\"eval\""));
    assert_non_null(strstr(line, "\"precision\":\"float32\",\"requested_precision\":\"float32\",\"products\":\"fp32\""));
    assert_non_null(strstr(line, "\"fallback\":false"));
    { /* arch.halt_max_steps=2: two steps, the last one the evaluation's exact accuracy */
        const char *by = json_field(line, "exact_by_step"), *ex = json_field(line, "exact_accuracy");
        double last;
        assert_non_null(by);
        assert_int_equal(list_count(by, 0, 0), 2);
        last = atof(strchr(by, ',') + 1);
        assert_true(fabs(last - atof(ex)) < 1e-5);
    }
    free(out);
    pathf(p, sizeof p, "%s", "smoke/metrics.svg");
    out = tu_slurp(p, NULL);
    assert_non_null(strstr(out, "eval exact accuracy per ACT step"));
    free(out);
    /* tinyrec-solve: --jsonl records, the header and summary on stderr */
    pathf(in, sizeof in, "%s", "sudoku.txt");
    write_sudoku_input(in);
    assert_int_equal(run_cmd("rd1", "'%s' '%s/smoke/best.safetensors' '%s' --jsonl --threads 1 --device cpu", g_solve, g_dir, in), 0);
    out = tag_file("rd1", "out");
    check_solve_jsonl(out, 3, 81, 0);
    for (line = out, i = 0; (line = strstr(line, "\"precision\":\"float32\"")) != NULL; line++) i++;
    assert_int_equal(i, 3);
    assert_non_null(strstr(out, "\"device_kind\":\"cpu\",\"kernels\":\""));
    free(out);
    assert_err_has("rd1", "ms per puzzle on cpu (");
    /* bfloat16: the products' kernels and the tape */
    assert_int_equal(run_cmd("rd2", "'%s' '%s/smoke/best.safetensors' '%s' --brief --threads 1 --device cpu --dtype bf16", g_solve, g_dir, in), 0);
    assert_out_has("rd2", " threads), bfloat16: ");
    assert_out_has("rd2", " products, 16-bit tape\n");
    /* a precision the device does not have: one warning, and the line says so */
    assert_int_equal(run_cmd("rd3", "TINYREC_FAULT=no-half '%s' '%s/smoke/best.safetensors' '%s' --brief --threads 1 --device cpu --dtype bf16", g_solve, g_dir, in), 0);
    assert_out_has("rd3", " threads), float32 (fallback from bfloat16)\n");
    assert_err_has("rd3", "falling back to float32");
    out = tag_file("rd3", "err");
    for (line = out, i = 0; (line = strstr(line, "warning:")) != NULL; line++) i++;
    assert_int_equal(i, 1);
    free(out);
    /* --help: one screen, an example at its end */
    for (i = 0; i < (int)(sizeof progs / sizeof *progs); i++) {
        char tag[32], bin[1100];
        const char *last;
        snprintf(tag, sizeof tag, "help_%s", progs[i]);
        snprintf(tag, sizeof tag, "tinyrec-%s", progs[i]);
        assert_int_equal(find_bin(bin, sizeof bin, tag), 0);
        snprintf(tag, sizeof tag, "help_%s", progs[i]);
        assert_int_equal(run_cmd(tag, "'%s' --help", bin), 0);
        lines = count_lines_of(tag, "out");
        if (lines < 3 || lines > 28) fail_msg("%s --help: %d lines", progs[i], lines);
        out = tag_file(tag, "out");
        for (last = NULL, line = out; (line = strstr(line, "\nexample")) != NULL; line++) last = line + 1; /* the last "example" line */
        for (lines = 0; last && *last; last++) lines += *last == '\n';
        if (!strstr(out, "\nexample") || lines > 4) fail_msg("%s --help does not end with an example:\n%s", progs[i], out);
        free(out);
    }
}

static void test_precision_cli(void **state) {
    char in[1024], ck[1024], *out;
    (void)state;
    ensure_smoke_run(); /* the data */
    assert_int_equal(run_cmd("fp16", "'%s' " TINY_ARGS " checkpoint_path='%s/fp16' epochs=1 eval_interval=1 eval_batches=2 max_steps=4 arch.forward_dtype=float16",
                             g_train, g_dir, g_dir),
                     0);
    out = tag_file("fp16", "out");
    assert_non_null(strstr(out, "float16"));
    free(out);
    pathf(in, sizeof in, "%s", "fp16/metrics.jsonl");
    out = tu_slurp(in, NULL);
    assert_non_null(out);
    assert_non_null(strstr(out, "\"forward_dtype\":\"float16\""));
    assert_non_null(strstr(out, "\"loss_scale\":65536"));
    free(out);
    pathf(ck, sizeof ck, "%s", "fp16/latest.safetensors");
    {
        tr_ctx *ctx = tu_ctx(1, 0);
        tr_model_config c;
        assert_int_equal(tr_checkpoint_read_config(ctx, ck, &c), TR_OK);
        assert_int_equal(c.forward_dtype, TR_FWD_FLOAT16);
        tr_ctx_destroy(ctx);
    }
    pathf(in, sizeof in, "%s", "sudoku.txt");
    write_sudoku_input(in);
    solve_sudoku_jsonl("solve_fp16", ck, in, "");
    solve_sudoku_jsonl("solve_bf16", ck, in, "--dtype bf16");
    assert_int_equal(run_cmd("solve_baddtype", "'%s' '%s' '%s' --dtype int8", g_solve, ck, in), 2);
    out = tag_file("solve_baddtype", "err");
    assert_non_null(strstr(out, "--dtype takes float32, bfloat16, float16 or auto"));
    free(out);
    assert_int_equal(run_cmd("train_baddtype", "'%s' " TINY_ARGS " checkpoint_path='%s/b' arch.forward_dtype=float64", g_train, g_dir, g_dir), 2);
    out = tag_file("train_baddtype", "err");
    assert_non_null(strstr(out, "arch.forward_dtype"));
    free(out);
}

/* A model saved by the library (no training) for the Maze and ARC input paths. */
static void save_untrained(const char *path, int vocab, int seq_len, int num_ids) {
    tr_ctx *ctx = tu_ctx(1, 5);
    tr_model_config c;
    tr_model *m;
    assert_int_equal(tr_model_config_preset(&c, "trm-tiny"), TR_OK);
    c.vocab_size = vocab, c.seq_len = seq_len, c.num_puzzle_identifiers = num_ids;
    c.hidden_size = 32, c.num_heads = 2, c.puzzle_emb_ndim = 32, c.puzzle_emb_len = 1;
    c.H_cycles = 1, c.L_cycles = 1, c.L_layers = 1, c.halt_max_steps = 2;
    c.mlp_t = 0, c.pos_encodings = TR_POS_ROPE;
    assert_int_equal(tr_model_create(ctx, &c, &m), TR_OK);
    assert_int_equal(tr_model_save(m, path, NULL), TR_OK);
    tr_model_destroy(m);
    tr_ctx_destroy(ctx);
}

static void test_solve_maze(void **state) {
    char ck[1024], in[1024], *out;
    tr_ctx *ctx = tu_ctx(1, 0);
    FILE *f;
    int i, r, len;
    (void)state;
    pathf(ck, sizeof ck, "%s", "maze.safetensors");
    pathf(in, sizeof in, "%s", "maze.txt");
    save_untrained(ck, 6, 81, 1);
    f = fopen(in, "wb");
    assert_non_null(f);
    for (i = 0; i < 2; i++) {
        char m[81], s[81];
        assert_int_equal(tr_maze_generate(ctx, 3, (uint64_t)i, 9, 6, m, s, &len), TR_OK);
        for (r = 0; r < 9; r++) fprintf(f, "%.9s\n", m + r * 9);
        fputc('\n', f);
    }
    fputs("#########\n#S #\n\n", f); /* a short row */
    fclose(f);
    tr_ctx_destroy(ctx);
    assert_int_equal(run_cmd("maze", "'%s' '%s' '%s' --jsonl --threads 1", g_solve, ck, in), 0);
    out = tag_file("maze", "out");
    check_solve_jsonl(out, 2, 81, 0);
    assert_non_null(strstr(out, "\"shortest\":"));
    free(out);
    assert_err_has("maze", "line 22:");
    assert_int_equal(run_cmd("maze_txt", "'%s' '%s' '%s' --threads 1", g_solve, ck, in), 0);
    out = tag_file("maze_txt", "out");
    assert_non_null(strstr(out, "2 maze puzzles"));
    free(out);
}

static void test_solve_arc(void **state) {
    char ck[1024], task[1024], ids[1024], *out;
    FILE *f;
    (void)state;
    pathf(ck, sizeof ck, "%s", "arc.safetensors");
    pathf(task, sizeof task, "%s", "abcd1234.json");
    pathf(ids, sizeof ids, "%s", "identifiers.json");
    save_untrained(ck, 12, 900, 3);
    f = fopen(task, "wb");
    assert_non_null(f);
    fputs("{\"train\": [{\"input\": [[1, 2], [3, 4]], \"output\": [[4, 3], [2, 1]]}],\n"
          " \"test\": [{\"input\": [[5, 6], [7, 8]], \"output\": [[8, 7], [6, 5]]},\n"
          "          {\"input\": [[1, 2, 3]]},\n"
          "          {\"input\": [[1, 2], [3]]}]}\n",
          f);
    fclose(f);
    f = fopen(ids, "wb");
    assert_non_null(f);
    fputs("[\"<blank>\", \"other\", \"abcd1234\"]\n", f);
    fclose(f);
    assert_int_equal(run_cmd("arc", "'%s' '%s' '%s' --identifiers '%s' --jsonl --threads 1", g_solve, ck, task, ids), 0);
    out = tag_file("arc", "out");
    check_solve_jsonl(out, 2, 900, 0);
    assert_non_null(strstr(out, "\"puzzle_id\":2"));
    assert_non_null(strstr(out, "\"name\":\"abcd1234\""));
    assert_non_null(strstr(out, "\"correct\":"));
    free(out);
    assert_err_has("arc", "line 4:"); /* the ragged grid */
    /* without identifiers: the blank id and a warning */
    assert_int_equal(run_cmd("arc2", "'%s' '%s' --threads 1 --brief < '%s'", g_solve, ck, task), 0);
    assert_err_has("arc2", "blank puzzle id");
}

static void test_bad_cli(void **state) {
    char p[1024];
    (void)state;
    ensure_smoke_run();
    /* tinyrec-train */
    assert_int_equal(run_cmd("b1", "'%s' " TINY_ARGS " checkpoint_path='%s/b' foo=1", g_train, g_dir, g_dir), 2);
    assert_err_has("b1", "unknown key 'foo'");
    assert_err_has("b1", "--list-keys");
    assert_int_equal(count_lines_of("b1", "err"), 2); /* the reason and one hint, not the key table */
    /* a typo gets the nearest keys */
    assert_int_equal(run_cmd("b1b", "'%s' " TINY_ARGS " checkpoint_path='%s/b' arch.L_cycle=2", g_train, g_dir, g_dir), 2);
    assert_err_has("b1b", "unknown key 'arch.L_cycle'; did you mean 'arch.L_cycles'");
    assert_int_equal(run_cmd("b1c", "'%s' " TINY_ARGS " checkpoint_path='%s/b' lr_warmup=2", g_train, g_dir, g_dir), 2);
    assert_err_has("b1c", "'lr_warmup_steps'");
    assert_int_equal(run_cmd("b2", "'%s' " TINY_ARGS " checkpoint_path='%s/b' lr=fast", g_train, g_dir, g_dir), 2);
    assert_err_has("b2", "key 'lr': bad value 'fast'");
    assert_err_has("b2", "  lr: "); /* the hint: what the key is */
    assert_int_equal(count_lines_of("b2", "err"), 2);
    assert_int_equal(run_cmd("b3", "'%s' " TINY_ARGS " checkpoint_path='%s/b' arch.mlp_t=maybe", g_train, g_dir, g_dir), 2);
    assert_err_has("b3", "arch.mlp_t");
    assert_int_equal(run_cmd("b4", "'%s' " TINY_ARGS " checkpoint_path='%s/b' global_batch_size=-4", g_train, g_dir, g_dir), 2);
    assert_err_has("b4", "global_batch_size");
    assert_int_equal(run_cmd("b5", "'%s' " TINY_ARGS " checkpoint_path='%s/b' arch.num_heads=3", g_train, g_dir, g_dir), 2);
    assert_err_has("b5", "configuration");
    assert_int_equal(run_cmd("b6", "'%s' " TINY_ARGS " checkpoint_path='%s/b' epochs=4 eval_interval=3", g_train, g_dir, g_dir), 2);
    assert_err_has("b6", "must divide");
    assert_err_has("b6", "  eval_interval: ");
    assert_int_equal(count_lines_of("b6", "err"), 2);
    assert_int_equal(run_cmd("b7", "'%s' nonsense-preset data_path=x", g_train), 2);
    assert_err_has("b7", "unknown preset");
    assert_int_equal(run_cmd("b8", "'%s'", g_train), 2);
    assert_int_equal(run_cmd("b9", "'%s' sudoku-tiny data_path='%s/no-such-data' checkpoint_path='%s/b'", g_train, g_dir, g_dir), 1);
    assert_err_has("b9", "no-such-data");
    assert_int_equal(run_cmd("b10", "'%s' --resume checkpoint_path='%s/no-such-run'", g_train, g_dir), 1);
    assert_err_has("b10", "no-such-run");
    assert_int_equal(run_cmd("b11", "'%s' trm-maze data_path='%s/data' checkpoint_path='%s/b' threads=1", g_train, g_dir, g_dir), 2);
    assert_err_has("b11", "vocab_size");
    assert_int_equal(run_cmd("b12", "'%s' " TINY_ARGS " checkpoint_path='%s/b' --bogus", g_train, g_dir, g_dir), 2);
    assert_err_has("b12", "--bogus");
    assert_int_equal(run_cmd("b13", "'%s' --overwrit", g_train), 2);
    assert_err_has("b13", "did you mean '--overwrite'");
    assert_int_equal(run_cmd("b14", "'%s' sudoku-tiyn data_path=x", g_train), 2);
    assert_err_has("b14", "unknown preset 'sudoku-tiyn'; did you mean 'sudoku-tiny'");
    pathf(p, sizeof p, "%s", "b");
    assert_false(file_exists(p)); /* nothing was started */
    /* tinyrec-solve */
    pathf(p, sizeof p, "%s", "sudoku.txt");
    write_sudoku_input(p);
    assert_int_equal(run_cmd("s1", "'%s' '%s/missing.safetensors' '%s'", g_solve, g_dir, p), 1);
    assert_err_has("s1", "missing.safetensors");
    assert_int_equal(run_cmd("s2", "'%s' '%s/smoke/best.safetensors' '%s/missing.txt'", g_solve, g_dir, g_dir), 1);
    assert_err_has("s2", "missing.txt");
    assert_int_equal(run_cmd("s3", "'%s' '%s/smoke/best.safetensors' '%s' --steps 0", g_solve, g_dir, p), 2);
    assert_err_has("s3", "--steps");
    assert_int_equal(run_cmd("s4", "'%s' '%s/smoke/best.safetensors' '%s' --frobnicate", g_solve, g_dir, p), 2);
    assert_err_has("s4", "--frobnicate");
    assert_int_equal(run_cmd("s4b", "'%s' '%s/smoke/best.safetensors' '%s' --dtyp bf16", g_solve, g_dir, p), 2);
    assert_err_has("s4b", "did you mean '--dtype'");
    assert_int_equal(run_cmd("s5", "'%s' '%s' '%s'", g_solve, p, p), 1); /* not a checkpoint */
    assert_int_equal(run_cmd("s6", "printf '123\\nabc\\n' | '%s' '%s/smoke/best.safetensors'", g_solve, g_dir), 1); /* nothing solvable */
    assert_err_has("s6", "line 2:");
    assert_int_equal(run_cmd("s7", "'%s'", g_solve), 2);
    assert_int_equal(run_cmd("s8", "'%s' '%s/smoke/best.safetensors' '%s' --task arc", g_solve, g_dir, p), 1); /* a Sudoku model is no ARC model */
}

/* Asserts that <tag>.out holds `needle`. */
static void assert_out_has(const char *tag, const char *needle) {
    char *o = tag_file(tag, "out");
    assert_non_null(o);
    if (!strstr(o, needle)) fail_msg("%s: stdout lacks \"%s\":\n%s", tag, needle, o);
    free(o);
}

/* device= / --device / TINYREC_DEVICE: the CPU on request, the device in use printed, bad values
   rejected by the library's own check with exit status 2 before anything is written. */
static void test_device_options(void **state) {
    char p[1024];
    (void)state;
    ensure_smoke_run();
    /* tinyrec-train */
    assert_int_equal(run_cmd("d1", "'%s' " TINY_ARGS " checkpoint_path='%s/dcpu' epochs=1 max_steps=2 device=cpu", g_train, g_dir, g_dir), 0);
    assert_out_has("d1", "device cpu (");
    pathf(p, sizeof p, "%s", "dcpu/train_config.txt");
    assert_int_equal(count_lines_with(p, "device=cpu\n"), 1); /* kept for --resume */
    assert_int_equal(run_cmd("d2", "'%s' --resume checkpoint_path='%s/dcpu' max_steps=3", g_train, g_dir), 0);
    assert_out_has("d2", "device cpu (");
    /* an unset device is not written: a resume follows TINYREC_DEVICE again */
    pathf(p, sizeof p, "%s", "smoke/train_config.txt");
    assert_int_equal(count_lines_with(p, "device="), 0);
    assert_int_equal(run_cmd("d3", "'%s' " TINY_ARGS " checkpoint_path='%s/dbad' device=tpu", g_train, g_dir, g_dir), 2);
    assert_err_has("d3", "key 'device': unknown device 'tpu'");
    assert_err_has("d3", "opencl:N");
    assert_int_equal(run_cmd("d4", "TINYREC_DEVICE=tpu '%s' " TINY_ARGS " checkpoint_path='%s/dbad'", g_train, g_dir, g_dir), 2);
    assert_err_has("d4", "unknown device 'tpu'");
    assert_err_has("d4", "TINYREC_DEVICE");
    assert_int_equal(run_cmd("d5", "'%s' " TINY_ARGS " checkpoint_path='%s/dbad' device=", g_train, g_dir, g_dir), 2);
    assert_err_has("d5", "key 'device' needs a value");
    pathf(p, sizeof p, "%s", "dbad");
    assert_false(file_exists(p)); /* nothing was started */
    assert_int_equal(run_cmd("d6", "'%s' --list-keys", g_train), 0);
    assert_out_has("d6", "device");
    /* "opencl,cpu" runs on an OpenCL device where there is one, else on the CPU with a warning; a device
       that does not exist stops the run before anything is written, with the reason and what OpenCL listed */
    assert_int_equal(run_cmd("d7", "'%s' " TINY_ARGS " checkpoint_path='%s/docl' epochs=1 max_steps=1 device=opencl,cpu", g_train, g_dir, g_dir), 0);
    assert_out_has("d7", "device ");
    assert_int_equal(run_cmd("d7b", "'%s' " TINY_ARGS " checkpoint_path='%s/docl40' epochs=1 max_steps=1 device=opencl:40", g_train, g_dir, g_dir), 1);
    assert_err_has("d7b", "device 'opencl:40' cannot be opened");
    assert_err_has("d7b", "OpenCL here");
    assert_err_has("d7b", "likely cause");
    pathf(p, sizeof p, "%s", "docl40/metrics.jsonl");
    assert_false(file_exists(p));
    /* tinyrec-solve */
    pathf(p, sizeof p, "%s", "sudoku.txt");
    write_sudoku_input(p);
    assert_int_equal(run_cmd("d8", "'%s' '%s/smoke/best.safetensors' '%s' --brief --threads 1 --device cpu", g_solve, g_dir, p), 0);
    assert_out_has("d8", "device cpu (");
    assert_out_has("d8", "3 sudoku puzzles");
    assert_int_equal(run_cmd("d9", "'%s' '%s/smoke/best.safetensors' '%s' --jsonl --threads 1 --device cpu", g_solve, g_dir, p), 0);
    {
        char *out = tag_file("d9", "out");
        check_solve_jsonl(out, 3, 81, 0); /* the device line goes to stderr */
        free(out);
    }
    assert_err_has("d9", "device cpu (");
    assert_int_equal(run_cmd("d10", "'%s' '%s/smoke/best.safetensors' '%s' --device tpu", g_solve, g_dir, p), 2);
    assert_err_has("d10", "unknown device 'tpu'");
    assert_int_not_equal(run_cmd("d10b", "'%s' '%s/smoke/best.safetensors' '%s' --device opencl:40", g_solve, g_dir, p), 0);
    assert_err_has("d10b", "device 'opencl:40' cannot be opened");
    assert_int_equal(run_cmd("d11", "'%s' '%s/smoke/best.safetensors' '%s' --device", g_solve, g_dir, p), 2);
    assert_err_has("d11", "--device");
    assert_int_equal(run_cmd("d12", "TINYREC_DEVICE=nope '%s' '%s/smoke/best.safetensors' '%s'", g_solve, g_dir, p), 2);
    assert_err_has("d12", "TINYREC_DEVICE");
    assert_int_equal(run_cmd("d13", "TINYREC_DEVICE=cpu '%s' '%s/smoke/best.safetensors' '%s' --brief --threads 1", g_solve, g_dir, p), 0);
    assert_out_has("d13", "device cpu (");
}

/* tinyrec-devices: the library's selectors and its OpenCL self-test, which skips (no failure)
   where there is no OpenCL device. */
static void test_devices_report(void **state) {
    char *out, empty[1024];
    const char *line;
    (void)state;
    assert_int_equal(run_cmd("dev", "'%s' --threads 1", g_devices), 0);
    out = tag_file("dev", "out");
    assert_non_null(out);
    assert_null(strstr(out, "not used by this build"));
#if TINYREC_OPENCL
    assert_non_null(strstr(out, "this build has the OpenCL backend"));
#endif
    assert_non_null(strstr(out, "auto picks:"));
    line = strstr(out, "\n  opencl  ");
    if (!line) fail_msg("no OpenCL self-test line:\n%s", out);
    assert_true(!strncmp(line + 11, "PASS", 4) || !strncmp(line + 11, "SKIP", 4));
    /* a listed device has its selector, and the self-test ran on the one "opencl" picks */
    if (strstr(out, "    device 0: ")) {
        assert_non_null(strstr(out, " - opencl:0"));
        assert_true(!strncmp(line + 11, "PASS", 4));
    }
    free(out);
    assert_int_equal(run_cmd("devj", "'%s' --threads 1 --json", g_devices), 0);
    out = tag_file("devj", "out");
    assert_non_null(out);
    {
        const char *end = js_value(out, 0);
        if (!end || *js_ws(end)) fail_msg("tinyrec-devices --json is not one JSON value:\n%s", out);
    }
    assert_non_null(strstr(out, "\"auto_selector\": "));
    assert_non_null(strstr(out, "\"opencl\": {\"selector\": \"opencl\", \"status\": "));
    free(out);
    /* no OpenCL platform (ocl-icd reads its drivers from OCL_ICD_VENDORS): still exit status 0 */
    pathf(empty, sizeof empty, "%s", "no-vendors");
    assert_int_equal(mkdir(empty, 0700), 0);
    assert_int_equal(run_cmd("dev0", "OCL_ICD_VENDORS='%s' '%s' --threads 1", empty, g_devices), 0);
    out = tag_file("dev0", "out");
    line = strstr(out, "\n  opencl  ");
    assert_non_null(line);
    assert_true(!strncmp(line + 11, "PASS", 4) || !strncmp(line + 11, "SKIP", 4));
    free(out);
}

/* ---- setup -------------------------------------------------------------------------------- */

static int find_bin(char *out, size_t cap, const char *name) {
    const char *dir = getenv("TINYREC_BUILD_DIR");
    char cwd[768];
    if (!dir) dir = "build";
    if (dir[0] == '/') snprintf(out, cap, "%s/%s", dir, name);
    else {
        if (!getcwd(cwd, sizeof cwd)) return -1;
        snprintf(out, cap, "%s/%s/%s", cwd, dir, name);
    }
    if (access(out, X_OK) != 0) {
        fprintf(stderr, "test_programs: %s is missing (run make all from the repository root)\n", out);
        return -1;
    }
    return 0;
}

static int setup(void **state) {
    const char *tmp = getenv("TMPDIR");
    char cmd[4096];
    int st;
    (void)state;
    if (find_bin(g_train, sizeof g_train, "tinyrec-train") || find_bin(g_solve, sizeof g_solve, "tinyrec-solve") || find_bin(g_data, sizeof g_data, "tinyrec-data") ||
        find_bin(g_devices, sizeof g_devices, "tinyrec-devices"))
        return -1;
    snprintf(g_dir, sizeof g_dir, "%s/tinyrec-progs-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_dir)) {
        fprintf(stderr, "test_programs: mkdtemp: %s\n", strerror(errno));
        return -1;
    }
    snprintf(cmd, sizeof cmd, "'%s' sudoku --output-dir '%s/data' --generate 48 --generate-test 8 --clues 40 --num-aug 0 --seed 1 --quiet > '%s/data.out' 2>&1", g_data, g_dir,
             g_dir);
    st = system(cmd);
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "test_programs: building the dataset failed: %s\n", cmd);
        return -1;
    }
    g_has_python = system("command -v python3 > /dev/null 2>&1") == 0;
    return 0;
}

static int teardown(void **state) {
    char cmd[1024];
    (void)state;
    if (g_dir[0] && !getenv("TINYREC_KEEP_TMP")) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
        if (system(cmd) != 0) fprintf(stderr, "test_programs: cannot remove %s\n", g_dir);
    }
    return 0;
}

/* tinyrec-train's keys are the library's: --list-keys names every key a user sets (all but the
   dataset-derived ones), and each preset of the library's table is one it offers. */
static void test_train_keys(void **state) {
    int n, i;
    const tr_key *keys = tr_config_keys(&n);
    tr_preset p;
    char *out, line[96];
    (void)state;
    assert_int_equal(run_cmd("k1", "'%s' --list-keys", g_train), 0);
    out = tag_file("k1", "out");
    assert_non_null(out);
    for (i = 0; i < n; i++) {
        snprintf(line, sizeof line, "\n  %-26s ", keys[i].name);
        if (!(keys[i].flags & TR_KEY_DERIVED) != !!strstr(out, line)) fail_msg("--list-keys %s key %s", keys[i].flags & TR_KEY_DERIVED ? "lists the derived" : "lacks the", keys[i].name);
    }
    free(out);
    assert_int_equal(run_cmd("k2", "'%s' --list-presets", g_train), 0);
    out = tag_file("k2", "out");
    assert_non_null(out);
    for (i = 0; tr_preset_get(i, &p) == TR_OK; i++) {
        snprintf(line, sizeof line, "%-16s %s\n", p.name, p.help);
        if (!strstr(out, line)) fail_msg("--list-presets lacks %s", p.name);
    }
    free(out);
}

/* Asserts that every tensor of the model file at path loads and holds finite values. */
static void assert_finite_model(const char *path) {
    tr_ctx *ctx = tu_ctx(1, 0);
    tr_model *m = NULL;
    tr_tensor_view v;
    int i;
    size_t k;
    assert_int_equal(tr_model_load(ctx, path, NULL, &m), TR_OK);
    for (i = 0; i < tr_model_num_tensors(m); i++) {
        assert_int_equal(tr_model_tensor(m, i, &v), TR_OK);
        for (k = 0; k < v.numel; k++)
            if (!isfinite(v.data[k])) fail_msg("%s: %s[%zu] is not finite", path, v.name, k);
    }
    tr_model_destroy(m);
    tr_ctx_destroy(ctx);
}

/* The checkpoint of step 6 in <g_dir>/<run> loads with finite weights, and --resume finishes the
   12 steps from it (metrics.jsonl forgets the lines after step 6). */
static void assert_resumes_from_step6(const char *tag, const char *run) {
    char p[1024];
    pathf(p, sizeof p, "%s/latest.safetensors", run);
    assert_finite_model(p);
    assert_int_equal(run_cmd(tag, "'%s' --resume checkpoint_path='%s/%s'", g_train, g_dir, run), 0);
    assert_out_has(tag, "resuming at step 6");
    pathf(p, sizeof p, "%s/metrics.jsonl", run);
    assert_int_equal(count_lines_with(p, "\"type\":\"train\""), 12);
    assert_int_equal(count_lines_with(p, "\"type\":\"eval\""), 2);
}

/* NaN or infinite steps (TINYREC_FAULT=nan@STEP[:N] puts a NaN into a gradient): a skipped step
   shows in metrics.jsonl and the progress lines; max_nonfinite_steps in a row stop the run with
   the library's reason and exit status 1, and nothing is saved after the NaN: the checkpoint of
   step 6 loads with finite weights and resumes. */
static void test_train_nonfinite(void **state) {
    char p[1024];
    (void)state;
    assert_int_equal(run_cmd("nan1", "TINYREC_FAULT=nan@2:1 '%s' " TINY_ARGS " checkpoint_path='%s/nan1' epochs=1", g_train, g_dir, g_dir), 0);
    pathf(p, sizeof p, "%s", "nan1/metrics.jsonl");
    assert_int_equal(count_lines_with(p, "\"type\":\"train\""), 6);
    assert_int_equal(count_lines_with(p, "\"skipped\":1"), 1);
    assert_int_equal(count_lines_with(p, "\"skipped\":0"), 5);
    assert_int_equal(count_lines_with(p, "\"step\":2,"), 1);
    {
        char *text = tu_slurp(p, NULL);
        const char *l = strstr(text, "\"step\":2,");
        assert_non_null(l);
        assert_true(strstr(l, "\"skipped\":1") < strchr(l, '\n'));
        assert_int_equal(check_jsonl(text), 7);
        free(text);
    }
    assert_err_has("nan1", "step 2: the gradient of");
    assert_err_has("nan1", "update skipped");
    assert_out_has("nan1", "1 skipped");
    pathf(p, sizeof p, "%s", "nan1/latest.safetensors");
    assert_finite_model(p);
    /* NaN from step 8 on: the run stops at step 9, after the checkpoint of step 6 */
    assert_int_equal(run_cmd("nan2", "TINYREC_FAULT=nan@8:100 '%s' " TINY_ARGS " checkpoint_path='%s/nan2' epochs=2 eval_interval=1 max_nonfinite_steps=2", g_train, g_dir, g_dir),
                     1);
    assert_err_has("nan2", "tinyrec-train: training stopped: step 9:");
    assert_err_has("nan2", "NaN or infinite, 2 step(s) in a row (max_nonfinite_steps 2)");
    pathf(p, sizeof p, "%s", "nan2/best.safetensors");
    assert_finite_model(p);
    assert_resumes_from_step6("nan3", "nan2");
    pathf(p, sizeof p, "%s", "nan2/metrics.jsonl");
    assert_int_equal(count_lines_with(p, "\"skipped\":1"), 0);
    /* NaN from step 2 on: no checkpoint was ever written */
    assert_int_equal(run_cmd("nan4", "TINYREC_FAULT=nan@2:100 '%s' " TINY_ARGS " checkpoint_path='%s/nan4' epochs=1 max_nonfinite_steps=2", g_train, g_dir, g_dir), 1);
    assert_err_has("nan4", "step 3:");
    pathf(p, sizeof p, "%s", "nan4/latest.safetensors");
    assert_false(file_exists(p));
}

/* A full disk (TINYREC_FAULT=enospc@N: the N-th file written fails with ENOSPC) during the second
   checkpoint (file 1: the run's identifiers.json; 2-5: latest, best, state, metrics.svg; 6: latest again) stops the
   run with the file and the reason; the first checkpoint is intact and resumes. A read-only folder likewise. */
static void test_train_disk_full(void **state) {
    char dir[1024];
    (void)state;
    assert_int_equal(run_cmd("full1", "TINYREC_FAULT=enospc@6 '%s' " TINY_ARGS " checkpoint_path='%s/full' epochs=2 eval_interval=1", g_train, g_dir, g_dir), 1);
    assert_err_has("full1", "tinyrec-train: saving the checkpoint failed: writing '");
    assert_err_has("full1", "full/latest.safetensors' failed after 0 bytes: No space left on device (the previous file is unchanged)");
    pathf(dir, sizeof dir, "%s", "full");
    assert_int_equal(tu_count_tmp_files(dir), 0);
    assert_resumes_from_step6("full2", "full");
    /* a read-only folder at the first file (the run's identifiers.json) */
    assert_int_equal(run_cmd("rofs", "TINYREC_FAULT=erofs@1 '%s' " TINY_ARGS " checkpoint_path='%s/rofs' epochs=1", g_train, g_dir, g_dir), 1);
    assert_err_has("rofs", "rofs/identifiers.json': Read-only file system");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_train_smoke), cmocka_unit_test(test_train_resume_cli), cmocka_unit_test(test_train_sigint), cmocka_unit_test(test_solve_sudoku),
        cmocka_unit_test(test_train_solve_hrm), cmocka_unit_test(test_solve_maze),  cmocka_unit_test(test_solve_arc),        cmocka_unit_test(test_bad_cli),
        cmocka_unit_test(test_device_options), cmocka_unit_test(test_devices_report), cmocka_unit_test(test_train_keys),
        cmocka_unit_test(test_train_nonfinite), cmocka_unit_test(test_train_disk_full), cmocka_unit_test(test_precision_cli), cmocka_unit_test(test_run_description),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
