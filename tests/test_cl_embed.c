/* tools/cl_embed.sh, which writes the tools/opencl .cl files into tinyrec.h as string fragments: the committed header
   is up to date with the .cl files (--check), a stale block is found and rewritten, the C it writes compiles
   as strict C99 and gives back the file byte for byte, and malformed blocks are refused. Run from the
   repository root (as make test does). */
#define TINYREC_IMPLEMENTATION
#include "test_util.h"
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define EMBED "sh tools/cl_embed.sh"

static char g_dir[256], g_root[1024]; /* a temporary directory; the repository root */
static char *g_out;                    /* the last command's stdout and stderr */

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/tinyrec_clembed_XXXXXX");
    return mkdtemp(g_dir) && getcwd(g_root, sizeof g_root) ? 0 : -1;
}
static int teardown(void **state) {
    char cmd[320];
    (void)state;
    free(g_out);
    g_out = NULL;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return strncmp(g_dir, "/tmp/tinyrec_clembed_", 21) == 0 && system(cmd) == 0 ? 0 : -1;
}

/* The whole file (NUL-terminated), or NULL. */
static char *slurp(const char *path) {
    tr_ctx *ctx = tu_ctx(1, 1);
    char *d = NULL, *s = NULL;
    size_t n = 0;
    if (tr_read_file(ctx, path, &d, &n) == TR_OK && (s = (char *)malloc(n + 1)) != NULL) memcpy(s, d, n), s[n] = 0;
    tr__free(ctx, d);
    tr_ctx_destroy(ctx);
    return s;
}

/* Runs cmd (printf-style) through the shell, in directory dir (NULL: here); its output goes to g_out.
   Returns the exit status. */
static int sh(const char *dir, const char *fmt, ...) {
    char cmd[2048], full[3072], out[320];
    va_list ap;
    int st;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    snprintf(out, sizeof out, "%s/out.txt", g_dir);
    snprintf(full, sizeof full, "%s%s%s( %s ) > '%s' 2>&1", dir ? "cd '" : "", dir ? dir : "", dir ? "' && " : "", cmd, out);
    st = system(full);
    free(g_out);
    g_out = slurp(out);
    if (!g_out) g_out = (char *)calloc(1, 1);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* g_dir/h/: a copy of the header, the tool and the .cl files. */
static void copy_tree(void) {
    assert_int_equal(sh(NULL, "mkdir -p '%s/h/tools' && cp tinyrec.h '%s/h/' && cp tools/cl_embed.sh '%s/h/tools/' && cp -R tools/opencl '%s/h/tools/'",
                        g_dir, g_dir, g_dir, g_dir),
                     0);
}

/* The committed tinyrec.h holds exactly what the tool writes from the .cl files of tools/opencl. */
static void test_header_up_to_date(void **state) {
    (void)state;
    if (sh(NULL, EMBED " --check tinyrec.h") != 0) fail_msg("%s(edit tools/opencl/*.cl, not the header, then run make)", g_out);
}

/* A .cl file edited after the header: --check names that file only; writing fixes it, and writing again changes
   nothing (deterministic). A hand edit of the generated block is found the same way. */
static void test_stale_block(void **state) {
    char path[320], dir[300], *h1, *h2;
    (void)state;
    copy_tree();
    snprintf(dir, sizeof dir, "%s/h", g_dir);
    assert_int_equal(sh(dir, "printf '%%s\\n' '/* \"added\" \\ line */' >> tools/opencl/attention.cl"), 0);
    assert_int_equal(sh(dir, EMBED " --check tinyrec.h"), 1);
    if (!strstr(g_out, "tools/opencl/attention.cl") || strstr(g_out, "ops.cl") || strstr(g_out, "gemm.cl")) fail_msg("--check said: %s", g_out);
    assert_int_equal(sh(dir, EMBED " tinyrec.h"), 0);
    assert_int_equal(sh(dir, EMBED " --check tinyrec.h"), 0);
    snprintf(path, sizeof path, "%s/tinyrec.h", dir);
    h1 = slurp(path);
    assert_non_null(h1);
    assert_non_null(strstr(h1, "\"/* \\\"added\\\" \\\\ line */\\n\";\n#define TR__CL_SRC_ATTENTION_LIST"));
    assert_int_equal(sh(dir, EMBED " tinyrec.h"), 0);
    h2 = slurp(path);
    assert_non_null(h2);
    assert_string_equal(h1, h2);
    free(h2);
    /* the header by hand: one kernel line of the ops block changed */
    assert_int_equal(sh(dir, "sed 's/^\"__kernel void tr_k_add(/\"__kernel void tr_k_add2(/' tinyrec.h > t && mv t tinyrec.h"), 0);
    h2 = slurp(path);
    assert_non_null(h2);
    assert_string_not_equal(h1, h2);
    free(h1), free(h2);
    assert_int_equal(sh(dir, EMBED " --check tinyrec.h"), 1);
    assert_non_null(strstr(g_out, "out of date with tools/opencl/ops.cl: run make"));
}

/* The C the tool writes, on a file with every character that needs care (quotes, backslashes, a trigraph, a tab,
   a backslash-newline) and long enough for several fragments: strict C99 compiles it without a warning, the
   fragments joined are "#line 1" plus the file byte for byte, and the list names them in order. */
static void test_roundtrip_c99(void **state) {
    static const char head[] = "/* head */\n/* >>cl-embed k/t_1.cl the rest is a comment */\nstatic const char tr__cl_src_t_1_1[] =\n"
                               "\"#line 1 \\\"k/t_1.cl\\\"\\n\"\n";
    char dir[300], path[320], *got, *want;
    FILE *f;
    int i;
    (void)state;
    snprintf(dir, sizeof dir, "%s/rt", g_dir);
    assert_int_equal(sh(NULL, "mkdir -p '%s/k'", dir), 0);
    snprintf(path, sizeof path, "%s/k/t_1.cl", dir);
    f = fopen(path, "wb");
    assert_non_null(f);
    fputs("#define Q(x) \"q\\\\\" ?\?= ?\?/ '\\t'\t/* tab */ \\\n  x\n", f);
    for (i = 0; i < 200; i++) fprintf(f, "__kernel void k%03d(__global float *y) { y[%d] = %d.0f; } /* padding padding padding padding padding */\n", i, i, i);
    fclose(f);
    snprintf(path, sizeof path, "%s/t.h", dir);
    write_text(path, "/* head */\n/* >>cl-embed k/t_1.cl the rest is a comment */\nstale\n/* >>cl-embed-end */\n/* tail */\n");
    snprintf(path, sizeof path, "%s/main.c", dir);
    write_text(path, "#include <stdio.h>\n#include \"t.h\"\nstatic const char *const s[] = {TR__CL_SRC_T_1_LIST};\n"
                     "int main(void) {\n    size_t i;\n    for (i = 0; i < sizeof s / sizeof s[0]; i++) fputs(s[i], stdout);\n"
                     "    return sizeof s / sizeof s[0] >= 4 ? 0 : 1;\n}\n");
    if (sh(NULL, EMBED " '%s/t.h'", dir) != 0) fail_msg("%s", g_out);
    if (sh(dir, "cc -std=c99 -pedantic -Wall -Wextra -Werror main.c -o main && ./main > got.txt") != 0) fail_msg("%s", g_out);
    snprintf(path, sizeof path, "%s/got.txt", dir);
    got = slurp(path);
    snprintf(path, sizeof path, "%s/k/t_1.cl", dir);
    want = slurp(path);
    assert_non_null(got);
    assert_non_null(want);
    assert_memory_equal(got, "#line 1 \"k/t_1.cl\"\n", 19);
    assert_string_equal(got + 19, want);
    free(got), free(want);
    snprintf(path, sizeof path, "%s/t.h", dir);
    got = slurp(path);
    assert_non_null(got);
    assert_memory_equal(got, head, strlen(head));
    assert_non_null(strstr(got, "\n/* >>cl-embed-end */\n/* tail */\n"));
    assert_null(strstr(got, "stale"));
    free(got);
}

/* Bad input: status 2 and a reason naming the file or line; the header is left as it was. */
static void test_bad_input(void **state) {
    static const struct {
        const char *header, *reason;
    } cases[] = {
        {"/* >>cl-embed no/such.cl */\n/* >>cl-embed-end */\n", "cannot read ./no/such.cl"},
        {"x\n/* >>cl-embed k.cl */\n", "the block of line 2 has no /* >>cl-embed-end */"},
        {"/* >>cl-embed k.cl */\n/* >>cl-embed k.cl */\n/* >>cl-embed-end */\n", "expected /* >>cl-embed-end */ to close the block of line 1"},
        {"/* >>cl-embed Bad-Name.cl */\n/* >>cl-embed-end */\n", "Bad-Name.cl: the file name must be"},
        {"/* >>cl-embed empty.cl */\n/* >>cl-embed-end */\n", "empty.cl is empty"},
        {"no blocks here\n", "no /* >>cl-embed PATH */ blocks"},
    };
    char path[320], *h;
    size_t i;
    (void)state;
    snprintf(path, sizeof path, "%s/k.cl", g_dir);
    write_text(path, "__kernel void k(void) {}\n");
    snprintf(path, sizeof path, "%s/empty.cl", g_dir);
    write_text(path, "");
    snprintf(path, sizeof path, "%s/bad.h", g_dir);
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_text(path, cases[i].header);
        assert_int_equal(sh(g_dir, "sh '%s/tools/cl_embed.sh' bad.h", g_root), 2);
        if (!strstr(g_out, cases[i].reason)) fail_msg("case %d: '%s' lacks '%s'", (int)i, g_out, cases[i].reason);
        h = slurp(path);
        assert_non_null(h);
        assert_string_equal(h, cases[i].header);
        free(h);
    }
    assert_int_equal(sh(NULL, EMBED " --check '%s/no-such.h'", g_dir), 2);
    assert_int_equal(sh(NULL, EMBED " --bogus"), 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_up_to_date),
        cmocka_unit_test(test_stale_block),
        cmocka_unit_test(test_roundtrip_c99),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests_name("cl_embed", tests, setup, teardown);
}
