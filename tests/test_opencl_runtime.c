/* The OpenCL runtime: device selection, program build (and its failure), launches, transfers,
   scratch, injected faults and migration to the host. Skipped without OpenCL (unless
   TINYREC_REQUIRE_OPENCL=1). */
#define TINYREC_IMPLEMENTATION
#include "test_util.h"

#if TINYREC_OPENCL

/* The tiny program: every buffer parameter is followed by its element offset. */
static const char clrt_src_a[] =
    "__kernel void clrt_add(__global const float *a, ulong a_off, __global const float *b, ulong b_off,\n"
    "                       __global float *y, ulong y_off, int n, float s) {\n"
    "  size_t i = get_global_id(0); a += a_off; b += b_off; y += y_off;\n"
    "  if (i < (size_t)n) y[i] = a[i] + s * b[i];\n}\n"
    "__kernel void clrt_null(__global float *x, ulong x_off, __global float *y, ulong y_off) {\n"
    "  y += y_off; if (get_global_id(0) == 0) y[0] = x_off == 0 ? 7.0f : -1.0f;\n}\n"
    "__kernel void clrt_2d(__global float *y, ulong y_off, int w, int h, long big) {\n"
    "  size_t i = get_global_id(0), j = get_global_id(1); y += y_off;\n"
    "  if (i < (size_t)w && j < (size_t)h) y[j * w + i] = (float)(j * 1000 + i) + (float)(big - 4000000000L);\n}\n";
static const char clrt_src_b[] =
    "__kernel void clrt_sum(__global const float *x, ulong x_off, __global float *out, ulong out_off, int n, __local float *t) {\n"
    "  size_t l = get_local_id(0), L = get_local_size(0), k; float s = 0; x += x_off; out += out_off;\n"
    "  for (k = l; k < (size_t)n; k += L) s += x[k];\n"
    "  t[l] = s; barrier(CLK_LOCAL_MEM_FENCE);\n"
    "  if (l == 0) { for (k = 1; k < L; k++) s += t[k]; out[0] = s; }\n}\n"
    "__kernel void clrt_flags(__global int *y, ulong y_off) {\n  y += y_off;\n"
    "#ifdef TR_FP64\n  y[0] = 1;\n#else\n  y[0] = 0;\n#endif\n"
    "#ifdef CLRT_EXTRA\n  y[1] = CLRT_EXTRA;\n#endif\n}\n";
static const char *const clrt_srcs[] = {clrt_src_a, clrt_src_b};

/* The device tu_cl_open picks: TINYREC_TEST_OPENCL ("opencl:1", or a bare index / name), else "opencl". */
static const char *clrt_selector(char *buf, size_t cap) {
    const char *e = getenv("TINYREC_TEST_OPENCL");
    if (!e || !e[0]) return "opencl";
    snprintf(buf, cap, "%s%s", strncmp(e, "opencl", 6) == 0 || strcmp(e, "auto") == 0 ? "" : "opencl:", e);
    return buf;
}

static int clrt_required(void) {
    const char *e = getenv("TINYREC_REQUIRE_OPENCL");
    return e && strcmp(e, "1") == 0;
}

/* A private device with the tiny program; skips the test when there is no OpenCL device. */
static tr__cl *clrt_open(tr_ctx *ctx, const char *opts) {
    char sel[256];
    tr__cl *cl = NULL;
    tr_status st = tr__cl_open(ctx, clrt_selector(sel, sizeof sel), clrt_srcs, 2, opts, TR__CLF_NONE, &cl);
    if (st == TR_ERR_UNSUPPORTED && !clrt_required()) {
        tr_ctx_destroy(ctx);
        skip();
    }
    if (st != TR_OK) fail_msg("tr__cl_open: %s", tr_ctx_last_error(ctx));
    return cl;
}

static int clrt_has(const tr_ctx *ctx, const char *s) { return strstr(tr_ctx_last_error(ctx), s) != NULL; }
#define CLRT_HAS(ctx, s)                                                                                  \
    do {                                                                                                  \
        if (!clrt_has(ctx, s)) fail_msg("error text '%s' lacks '%s'", tr_ctx_last_error(ctx), s);        \
    } while (0)

static int clrt_lognum;
static char clrt_logs[8][512];
static void clrt_log(void *user, tr_log_level level, const char *msg) {
    (void)user;
    if (clrt_lognum < 8) snprintf(clrt_logs[clrt_lognum++], sizeof clrt_logs[0], "%d %s", (int)level, msg);
}

/* Enumeration, every selector form, and the INFO line naming the device. */
static void test_clrt_selectors(void **state) {
    tr_ctx_config cc = tr_ctx_config_default();
    tr_ctx *ctx = NULL;
    tr__cl *cl = NULL;
    tr_opencl_list en;
    char sel[300], up[300];
    long live0;
    int i, found = 0;
    (void)state;
    cc.log = clrt_log;
    assert_int_equal(tr_ctx_create(&cc, &ctx), TR_OK);
    live0 = tr_ctx_live_allocs(ctx);
    assert_int_equal(tr_opencl_list_devices(ctx, &en), TR_OK);
    for (i = 0; i < en.num_devices; i++) {
        assert_int_equal(en.devices[i].index, i);
        assert_true(en.devices[i].global_mem > 0);
    }
    cl = clrt_open(ctx, NULL); /* skips without a device */
    tr__cl_destroy(cl);
    assert_true(en.num_devices >= 1);
    /* index, name substring (any case), plain; opening logs one INFO line with the name */
    snprintf(sel, sizeof sel, "opencl:%.200s", en.devices[0].name);
    for (i = 0; sel[i]; i++) up[i] = (char)toupper((unsigned char)sel[i]);
    memcpy(up, "opencl:", 7), up[i] = 0;
    {
        const char *const good[] = {"opencl", "opencl:", "opencl:0", sel, up};
        for (i = 0; i < 5; i++) {
            clrt_lognum = 0;
            cl = NULL;
            assert_int_equal(tr__cl_open(ctx, good[i], clrt_srcs, 2, NULL, TR__CLF_NONE, &cl), TR_OK);
            assert_non_null(cl);
            assert_string_equal(tr__cl_get_info(cl)->name, i >= 3 ? en.devices[0].name : tr__cl_get_info(cl)->name);
            assert_true(clrt_lognum >= 1 && strncmp(clrt_logs[0], "1 opencl: using", 15) == 0);
            assert_non_null(strstr(clrt_logs[0], tr__cl_get_info(cl)->name));
            if (!tr__cl_get_info(cl)->is_gpu) assert_true(clrt_lognum >= 2 && clrt_logs[1][0] == '2'); /* the WARN */
            tr__cl_destroy(cl);
        }
    }
    snprintf(sel, sizeof sel, "opencl:%d", en.num_devices);
    cl = (tr__cl *)&found;
    assert_int_equal(tr__cl_open(ctx, sel, clrt_srcs, 2, NULL, TR__CLF_NONE, &cl), TR_ERR_UNSUPPORTED);
    assert_null(cl);
    CLRT_HAS(ctx, "no OpenCL device");
    assert_int_equal(tr__cl_open(ctx, "opencl:no-such-device-xyz", clrt_srcs, 2, NULL, TR__CLF_NONE, &cl), TR_ERR_UNSUPPORTED);
    CLRT_HAS(ctx, "no-such-device-xyz");
    assert_int_equal(tr__cl_open(ctx, "gpu please", clrt_srcs, 2, NULL, TR__CLF_NONE, &cl), TR_ERR_INVALID_ARG);
    /* "auto" wants a GPU */
    cl = NULL;
    {
        tr_status st = tr__cl_open(ctx, "auto", clrt_srcs, 2, NULL, TR__CLF_NONE, &cl);
        if (st == TR_OK) {
            assert_true(tr__cl_get_info(cl)->is_gpu);
            tr__cl_destroy(cl);
        } else {
            assert_int_equal(st, TR_ERR_UNSUPPORTED);
            CLRT_HAS(ctx, "no OpenCL GPU");
        }
    }
    (void)found;
    tr_opencl_list_free(ctx, &en);
    assert_int_equal(tr_ctx_live_allocs(ctx), live0);
    tr_ctx_destroy(ctx);
}

/* The open-time faults and a real build failure: clean errors with reasons, nothing leaked. */
static void test_clrt_open_faults(void **state) {
    static const tr__cl_fault fl[] = {TR__CLF_NO_LIBRARY, TR__CLF_NO_PLATFORM, TR__CLF_NO_DEVICE, TR__CLF_BUILD};
    static const char *const txt[] = {"no OpenCL library", "no OpenCL platform", "no OpenCL device", "injected build failure"};
    static const tr_status want[] = {TR_ERR_UNSUPPORTED, TR_ERR_UNSUPPORTED, TR_ERR_UNSUPPORTED, TR_ERR_DEVICE};
    static const char *const bad[] = {clrt_src_a, "__kernel void clrt_broken(__global float *x) { x[0] = clrt_undeclared_thing; }\n"};
    tr_ctx *ctx = tu_ctx(1, 1);
    tr__cl *cl = clrt_open(ctx, NULL); /* skips without a device */
    char sel[256];
    long live0;
    int i;
    (void)state;
    tr__cl_destroy(cl);
    live0 = tr_ctx_live_allocs(ctx);
    for (i = 0; i < 4; i++) {
        cl = (tr__cl *)&live0;
        assert_int_equal(tr__cl_open(ctx, clrt_selector(sel, sizeof sel), clrt_srcs, 2, NULL, fl[i], &cl), want[i]);
        assert_null(cl);
        CLRT_HAS(ctx, txt[i]);
    }
    CLRT_HAS(ctx, "CL_BUILD_PROGRAM_FAILURE (-11)");
    assert_int_equal(tr__cl_open(ctx, clrt_selector(sel, sizeof sel), bad, 2, NULL, TR__CLF_NONE, &cl), TR_ERR_DEVICE);
    CLRT_HAS(ctx, "build log");
    CLRT_HAS(ctx, "clrt_undeclared_thing"); /* the compiler's message, from the build log */
    assert_int_equal(tr_ctx_live_allocs(ctx), live0);
    tr_ctx_destroy(ctx);
}

/* Launches through tr__cla_*: offsets, picked and given local sizes, NULL buffers, 2-D, __local, build options. */
static void test_clrt_launch(void **state) {
    enum { N = 1000 };
    tr_ctx *ctx = tu_ctx(1, 1);
    tr__cl *cl = clrt_open(ctx, "-DCLRT_EXTRA=42");
    float *ha = (float *)malloc(N * 4), *hb = (float *)malloc(N * 4), *hy = (float *)malloc(N * 4);
    float *a = (float *)tr__cl_alloc(cl, N * 4, 1), *b = (float *)tr__cl_alloc(cl, N * 4, 1), *y = (float *)tr__cl_alloc(cl, N * 4, 1);
    int32_t *fl = (int32_t *)tr__cl_alloc(cl, 8, 1), flags[2];
    size_t g, l, g2[2] = {13, 7};
    tr__clargs A;
    int i;
    (void)state;
    assert_true(ha && hb && hy && a && b && y && fl);
    for (i = 0; i < N; i++) ha[i] = (float)i, hb[i] = (float)(3 * i + 1);
    assert_int_equal(tr__cl_write(cl, a + 5, ha, (N - 5) * 4), TR_OK);
    assert_int_equal(tr__cl_write(cl, b + 3, hb, (N - 3) * 4), TR_OK);
    /* y[7 + i] = a[5 + i] + 2 b[3 + i] for i < 97; local 64 rounds the global size up to 128 */
    A.n = 0;
    tr__cla_buf(&A, a + 5), tr__cla_buf(&A, b + 3), tr__cla_buf(&A, y + 7), tr__cla_i32(&A, 97), tr__cla_f32(&A, 2.0f);
    g = 97, l = 64;
    assert_int_equal(tr__cl_launch(cl, "clrt_add", 1, &g, &l, &A), TR_OK);
    assert_int_equal(tr__cl_read(cl, hy, y, N * 4), TR_OK);
    for (i = 0; i < N; i++) assert_true(hy[i] == (i >= 7 && i < 104 ? (float)(i - 7) + 2.0f * (float)(3 * (i - 7) + 1) : 0.0f));
    /* the runtime picks the local size */
    A.n = 0;
    tr__cla_buf(&A, a + 5), tr__cla_buf(&A, b + 3), tr__cla_buf(&A, y), tr__cla_i32(&A, 995), tr__cla_f32(&A, -1.0f);
    g = 995;
    assert_int_equal(tr__cl_launch(cl, "clrt_add", 1, &g, NULL, &A), TR_OK);
    assert_int_equal(tr__cl_read(cl, hy, y, N * 4), TR_OK);
    for (i = 0; i < 995; i++) assert_true(hy[i] == (float)i - (float)(3 * i + 1));
    /* NULL binds the dummy buffer with offset 0 */
    A.n = 0;
    tr__cla_buf(&A, NULL), tr__cla_buf(&A, y + 10);
    g = 1;
    assert_int_equal(tr__cl_launch(cl, "clrt_null", 1, &g, NULL, &A), TR_OK);
    assert_int_equal(tr__cl_read(cl, hy, y + 10, 4), TR_OK);
    assert_true(hy[0] == 7.0f);
    /* 2-D with odd sizes, a long argument */
    A.n = 0;
    tr__cla_buf(&A, y + 1), tr__cla_i32(&A, 13), tr__cla_i32(&A, 7), tr__cla_i64(&A, 4000000000LL);
    assert_int_equal(tr__cl_launch(cl, "clrt_2d", 2, g2, NULL, &A), TR_OK);
    assert_int_equal(tr__cl_read(cl, hy, y + 1, 13 * 7 * 4), TR_OK);
    for (i = 0; i < 13 * 7; i++) assert_true(hy[i] == (float)((i / 13) * 1000 + i % 13));
    /* __local */
    A.n = 0;
    tr__cla_buf(&A, a + 5), tr__cla_buf(&A, y), tr__cla_i32(&A, 100), tr__cla_local(&A, 32 * 4);
    g = 32, l = 32;
    assert_int_equal(tr__cl_launch(cl, "clrt_sum", 1, &g, &l, &A), TR_OK);
    assert_int_equal(tr__cl_read(cl, hy, y, 4), TR_OK);
    assert_true(hy[0] == 4950.0f);
    /* -DTR_FP64 from the runtime, the caller's options after it */
    A.n = 0;
    tr__cla_buf(&A, fl);
    assert_int_equal(tr__cl_launch(cl, "clrt_flags", 1, &g, NULL, &A), TR_OK);
    assert_int_equal(tr__cl_read(cl, flags, fl, 8), TR_OK);
    assert_int_equal(flags[0], tr__cl_get_info(cl)->has_fp64);
    assert_int_equal(flags[1], 42);
    /* errors name the kernel */
    A.n = 0;
    tr__cla_buf(&A, a), tr__cla_buf(&A, b), tr__cla_buf(&A, y), tr__cla_i32(&A, 1), tr__cla_f32(&A, 1.0f);
    l = tr__cl_get_info(cl)->max_wg * 2, g = l;
    assert_int_equal(tr__cl_launch(cl, "clrt_add", 1, &g, &l, &A), TR_ERR_DEVICE);
    CLRT_HAS(ctx, "clrt_add");
    g = 1;
    assert_int_equal(tr__cl_launch(cl, "clrt_missing", 1, &g, NULL, &A), TR_ERR_DEVICE);
    CLRT_HAS(ctx, "clCreateKernel(clrt_missing): CL_INVALID_KERNEL_NAME (-46)");
    A.n = 0;
    tr__cla_buf(&A, ha), tr__cla_buf(&A, b), tr__cla_buf(&A, y), tr__cla_i32(&A, 1), tr__cla_f32(&A, 1.0f);
    assert_int_not_equal(tr__cl_launch(cl, "clrt_add", 1, &g, NULL, &A), TR_OK); /* a host pointer */
    A.n = 0;
    tr__cla_buf(&A, (char *)a + 2), tr__cla_buf(&A, b), tr__cla_buf(&A, y), tr__cla_i32(&A, 1), tr__cla_f32(&A, 1.0f);
    assert_int_not_equal(tr__cl_launch(cl, "clrt_add", 1, &g, NULL, &A), TR_OK); /* not a whole element */
    A.n = 0;
    for (i = 0; i < 40; i++) tr__cla_i32(&A, i);
    assert_int_not_equal(tr__cl_launch(cl, "clrt_add", 1, &g, NULL, &A), TR_OK); /* too many */
    g = 0;
    A.n = 0;
    tr__cla_buf(&A, a), tr__cla_buf(&A, b), tr__cla_buf(&A, y), tr__cla_i32(&A, 1), tr__cla_f32(&A, 1.0f);
    assert_int_equal(tr__cl_launch(cl, "clrt_add", 1, &g, NULL, &A), TR_OK); /* empty grid: nothing */
    assert_int_equal(tr__cl_finish(cl), TR_OK);
    free(ha), free(hb), free(hy);
    tr__cl_destroy(cl);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

/* nb bytes (more than the staging buffers hold) written at an odd byte offset of a new buffer and
   read back; the source is reusable at once. Returns the buffer. */
static unsigned char *clrt_big_roundtrip(tr__cl *cl, unsigned char *big, unsigned char *back, size_t nb) {
    unsigned char *d = (unsigned char *)tr__cl_alloc(cl, nb + 3, 1);
    size_t k;
    assert_non_null(d);
    for (k = 0; k < nb; k++) big[k] = (unsigned char)(k * 7 + (k >> 13));
    assert_int_equal(tr__cl_write(cl, d + 3, big, nb), TR_OK);
    memset(big, 0, nb);
    assert_int_equal(tr__cl_read(cl, back, d + 3, nb), TR_OK);
    for (k = 0; k < nb; k++)
        if (back[k] != (unsigned char)(k * 7 + (k >> 13))) break;
    assert_true(k == nb);
    return d;
}

/* Arenas and transfers on the suite's device: zero fill, offsets, copy, fill, staged writes, bounds. */
static void test_clrt_transfers(void **state) {
    enum { N = 1000 };
    tr_ctx *ctx = tu_ctx(1, 1);
    tr__cl *cl = tu_cl_open(ctx);
    float *ha = (float *)malloc(N * 4), *hy = (float *)malloc(N * 4);
    float *a = (float *)tr__cl_alloc(cl, N * 4, 1), *y = (float *)tr__cl_alloc(cl, N * 4, 0);
    size_t nb = ((size_t)9 << 20) + 12;
    unsigned char *big = (unsigned char *)malloc(nb), *back = (unsigned char *)malloc(nb), *d;
    int i;
    (void)state;
    assert_true(ha && hy && a && y && big && back);
    assert_true(tr__cl_owns(cl, a) && tr__cl_owns(cl, a + N - 1) && !tr__cl_owns(cl, a + N) && !tr__cl_owns(cl, ha) && !tr__cl_owns(cl, NULL));
    assert_int_equal(tr__cl_read(cl, hy, y, N * 4), TR_OK);
    for (i = 0; i < N; i++) assert_true(hy[i] == 0.0f); /* zero-filled */
    for (i = 0; i < N; i++) ha[i] = (float)i;
    assert_int_equal(tr__cl_write(cl, a + 5, ha, (N - 5) * 4), TR_OK);
    assert_int_equal(tr__cl_copy(cl, y + 11, a + 20, 50 * 4), TR_OK);
    assert_int_equal(tr__cl_fill(cl, y + 61, 0x3f800000u, 9 * 4), TR_OK); /* 1.0f */
    assert_int_equal(tr__cl_read(cl, hy, y + 10, 61 * 4), TR_OK);
    assert_true(hy[0] == 0.0f && hy[60] == 0.0f);
    for (i = 1; i <= 50; i++) assert_true(hy[i] == (float)(14 + i));
    for (i = 51; i < 60; i++) assert_true(hy[i] == 1.0f);
    /* out of range, misaligned, not ours */
    assert_int_equal(tr__cl_copy(cl, y + 1, a, N * 4), TR_ERR_INVALID_ARG);
    assert_int_equal(tr__cl_write(cl, y + N, ha, 4), TR_ERR_INVALID_ARG);
    assert_int_equal(tr__cl_write(cl, y + N, ha, 0), TR_OK); /* the end pointer, nothing to do */
    assert_int_equal(tr__cl_read(cl, hy, ha, 4), TR_ERR_INVALID_ARG);
    assert_int_equal(tr__cl_fill(cl, (char *)y + 2, 0, 4), TR_ERR_INVALID_ARG);
    /* a write larger than the staging buffers, at an odd byte offset; the source is reusable at once */
    d = clrt_big_roundtrip(cl, big, back, nb);
    tr__cl_free(cl, d);
    assert_false(tr__cl_owns(cl, d));
    tr__cl_free(cl, a);
    tr__cl_free(cl, y);
    assert_int_equal(tr__cl_finish(cl), TR_OK);
    free(ha), free(hy), free(big), free(back);
    tr_ctx_destroy(ctx); /* closes cl */
}

/* Zero-copy transfers (host-unified devices, e.g. PoCL) and the staged ones (TINYREC_CL_ZEROCOPY=0,
   and every device that is not host-unified): round trips at odd offsets, larger than the staging
   buffers, a write after a queued kernel that read the old data, and the profile's transfer lines. */
static void clrt_xfer_case(const char *zc, int profile) {
    enum { N = 1000 };
    tr_ctx_config cc = tr_ctx_config_default();
    tr_ctx *ctx = NULL;
    tr__cl *cl;
    tr_opencl_list en;
    float ha[N], hb[N], hy[N];
    float *a, *b, *y;
    size_t nb = ((size_t)9 << 20) + 5, g = N;
    unsigned char *big = (unsigned char *)malloc(nb), *back = (unsigned char *)malloc(nb);
    tr__clargs A;
    int i, listed = 0, zerocopy;
    setenv("TINYREC_CL_ZEROCOPY", zc, 1);
    setenv("TINYREC_CL_PROFILE", profile ? "1" : "0", 1);
    cc.log = clrt_log;
    assert_int_equal(tr_ctx_create(&cc, &ctx), TR_OK);
    clrt_lognum = 0;
    cl = clrt_open(ctx, NULL);
    unsetenv("TINYREC_CL_PROFILE");
    if (strstr(cl->platform_name, "Portable Computing Language")) assert_true(cl->info.host_unified); /* CI's PoCL runs the zero-copy way */
    /* zero-copy exactly where the device is host-unified and the switch is not 0; the list agrees */
    assert_int_equal(cl->zerocopy, cl->info.host_unified && strcmp(zc, "0") != 0);
    for (i = 0; i < clrt_lognum && !strstr(clrt_logs[i], "opencl: using"); i++) {} /* (the profile logs the build options first) */
    assert_true(i < clrt_lognum);
    if (cl->info.host_unified) assert_non_null(strstr(clrt_logs[i], cl->zerocopy ? "(zero-copy transfers)" : "(zero-copy off)"));
    assert_int_equal(tr_opencl_list_devices(ctx, &en), TR_OK);
    for (i = 0; i < en.num_devices; i++)
        if (!strcmp(en.devices[i].name, cl->info.name)) listed = 1, assert_int_equal(en.devices[i].host_unified, cl->info.host_unified);
    assert_true(listed);
    tr_opencl_list_free(ctx, &en);
    a = (float *)tr__cl_alloc(cl, N * 4, 1), b = (float *)tr__cl_alloc(cl, N * 4, 1), y = (float *)tr__cl_alloc(cl, N * 4, 1);
    assert_true(a && b && y && big && back);
    assert_int_equal(tr__cl_read(cl, hy, y + 1, (N - 1) * 4), TR_OK);
    for (i = 0; i < N - 1; i++) assert_true(hy[i] == 0.0f); /* zero-filled */
    for (i = 0; i < N; i++) ha[i] = (float)i, hb[i] = (float)(2 * i);
    assert_int_equal(tr__cl_write(cl, a, ha, N * 4), TR_OK);
    assert_int_equal(tr__cl_write(cl, b + 7, hb, (N - 7) * 4), TR_OK);
    /* y = a + b; then a is overwritten at once: the kernel queued before must still see the old a */
    A.n = 0;
    tr__cla_buf(&A, a), tr__cla_buf(&A, b), tr__cla_buf(&A, y), tr__cla_i32(&A, N), tr__cla_f32(&A, 1.0f);
    assert_int_equal(tr__cl_launch(cl, "clrt_add", 1, &g, NULL, &A), TR_OK);
    for (i = 0; i < N; i++) ha[i] = -1.0f;
    assert_int_equal(tr__cl_write(cl, a + 3, ha, 10 * 4), TR_OK);
    assert_int_equal(tr__cl_read(cl, hy, y, N * 4), TR_OK);
    for (i = 0; i < N; i++) assert_true(hy[i] == (float)i + (i >= 7 ? (float)(2 * (i - 7)) : 0.0f));
    assert_int_equal(tr__cl_read(cl, hy, a + 2, 12 * 4), TR_OK);
    assert_true(hy[0] == 2.0f && hy[1] == -1.0f && hy[10] == -1.0f && hy[11] == 13.0f);
    clrt_big_roundtrip(cl, big, back, nb);
    /* the staged way keeps its pinned buffers; the zero-copy way never makes them */
    assert_int_equal(cl->stage_state != 0, !cl->zerocopy);
    assert_int_equal(tr__cl_finish(cl), TR_OK);
    zerocopy = cl->zerocopy;
    clrt_lognum = 0;
    tr__cl_destroy(cl);
    if (profile) { /* the transfer lines name the way */
        int w = 0, r = 0;
        for (i = 0; i < clrt_lognum; i++) {
            if (strstr(clrt_logs[i], "writes (host -> device)")) w = 1, assert_non_null(strstr(clrt_logs[i], zerocopy ? "(zero-copy)" : "(staged)"));
            if (strstr(clrt_logs[i], "reads (device -> host)")) r = 1;
        }
        assert_true(w && r);
    }
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
    free(big), free(back);
}
static void test_clrt_zerocopy(void **state) {
    (void)state;
    clrt_xfer_case("1", 0);
    clrt_xfer_case("0", 0);
    clrt_xfer_case("1", 1);
    clrt_xfer_case("0", 1);
    unsetenv("TINYREC_CL_ZEROCOPY");
}

/* Scratch slots: reused while big enough, grown on demand, usable, bounded slot numbers. */
static void test_clrt_scratch(void **state) {
    tr_ctx *ctx = tu_ctx(1, 1);
    tr__cl *cl = tu_cl_open(ctx);
    float h[999], back[999], *s0, *s1, *s0c;
    int i;
    (void)state;
    for (i = 0; i < 999; i++) h[i] = (float)i - 500.0f;
    s0 = tr__cl_scratch(cl, 0, 100);
    assert_true(s0 && tr__cl_owns(cl, s0 + 99));
    assert_ptr_equal(tr__cl_scratch(cl, 0, 60), s0);
    s1 = tr__cl_scratch(cl, 1, 10);
    assert_true(s1 && s1 != s0);
    s0c = tr__cl_scratch(cl, 0, 5000);
    assert_true(s0c && tr__cl_owns(cl, s0c + 4999));
    assert_int_equal(tr__cl_write(cl, s0c + 4001, h, sizeof h), TR_OK);
    assert_int_equal(tr__cl_read(cl, back, s0c + 4001, sizeof back), TR_OK);
    assert_memory_equal(back, h, sizeof h);
    assert_null(tr__cl_scratch(cl, 99, 1));
    assert_null(tr__cl_scratch(cl, -1, 1));
    tr_ctx_destroy(ctx); /* closes cl */
}

/* Injected enqueue and allocation failures; allocations beyond CL_DEVICE_MAX_MEM_ALLOC_SIZE. */
static void test_clrt_faults(void **state) {
    tr_ctx *ctx = tu_ctx(1, 1);
    tr__cl *cl = clrt_open(ctx, NULL);
    float *a = (float *)tr__cl_alloc(cl, 64 * 4, 1), *b = (float *)tr__cl_alloc(cl, 64 * 4, 1), h[4] = {1, 2, 3, 4};
    size_t g = 10;
    tr__clargs A;
    void *p;
    (void)state;
    assert_true(a && b);
    A.n = 0;
    tr__cla_buf(&A, a), tr__cla_buf(&A, a), tr__cla_buf(&A, b), tr__cla_i32(&A, 10), tr__cla_f32(&A, 1.0f);
    tr__cl_fail_enqueue_at(cl, 2); /* the 2nd from now fails, once */
    assert_int_equal(tr__cl_launch(cl, "clrt_add", 1, &g, NULL, &A), TR_OK);
    assert_int_equal(tr__cl_launch(cl, "clrt_add", 1, &g, NULL, &A), TR_ERR_DEVICE);
    CLRT_HAS(ctx, "clEnqueueNDRangeKernel(clrt_add): CL_OUT_OF_RESOURCES (-5)");
    assert_int_equal(tr__cl_launch(cl, "clrt_add", 1, &g, NULL, &A), TR_OK);
    tr__cl_fail_enqueue_at(cl, 1);
    assert_int_equal(tr__cl_write(cl, a, h, sizeof h), TR_ERR_DEVICE);
    CLRT_HAS(ctx, "CL_OUT_OF_RESOURCES");
    tr__cl_fail_enqueue_at(cl, 1);
    assert_int_equal(tr__cl_copy(cl, a, b, 16), TR_ERR_DEVICE);
    tr__cl_fail_enqueue_at(cl, 1);
    assert_int_equal(tr__cl_fill(cl, a, 0, 16), TR_ERR_DEVICE);
    tr__cl_fail_enqueue_at(cl, 2);
    tr__cl_fail_enqueue_at(cl, 0); /* off */
    assert_int_equal(tr__cl_fill(cl, a, 0, 16), TR_OK);
    assert_int_equal(tr__cl_fill(cl, a, 0, 16), TR_OK);
    assert_int_equal(tr__cl_finish(cl), TR_OK);
    /* allocation */
    tr__cl_fail_alloc(cl, 1);
    assert_null(tr__cl_alloc(cl, (size_t)1 << 20, 1));
    assert_true(tr__cl_last_oom(cl));
    CLRT_HAS(ctx, "out of device memory allocating 1.0 MiB");
    assert_null(tr__cl_scratch(cl, 2, 10));
    tr__cl_fail_alloc(cl, 0);
    p = tr__cl_alloc(cl, 16, 0);
    assert_non_null(p);
    assert_false(tr__cl_last_oom(cl));
    tr__cl_free(cl, p);
    if (tr__cl_get_info(cl)->max_alloc < SIZE_MAX - 4096) {
        assert_null(tr__cl_alloc(cl, tr__cl_get_info(cl)->max_alloc + 4, 1));
        assert_true(tr__cl_last_oom(cl));
        CLRT_HAS(ctx, "out of device memory");
    }
    tr__cl_destroy(cl);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

/* The CPU fallback: every arena becomes host memory at the same address holding the device data
   (keep arenas) or zeros (scratch), writable; the device is refused afterwards; freeing still works. */
static void test_clrt_migrate(void **state) {
    enum { N = 1000 };
    tr_ctx *ctx = tu_ctx(1, 1);
    tr__cl *cl = clrt_open(ctx, NULL);
    float *h = (float *)malloc(N * 4), *a = (float *)tr__cl_alloc(cl, N * 4, 1), *y = (float *)tr__cl_alloc(cl, N * 4, 1);
    float *b = (float *)tr__cl_alloc(cl, 8, 1), *sc = tr__cl_scratch(cl, 3, 64), *p;
    size_t g = N;
    tr__clargs A;
    int i;
    (void)state;
    assert_true(h && a && y && b && sc);
    for (i = 0; i < N; i++) h[i] = (float)i * 0.5f;
    assert_int_equal(tr__cl_write(cl, a, h, N * 4), TR_OK);
    assert_int_equal(tr__cl_fill(cl, sc, 0x40000000u, 64 * 4), TR_OK);
    A.n = 0;
    tr__cla_buf(&A, a), tr__cla_buf(&A, a), tr__cla_buf(&A, y), tr__cla_i32(&A, N), tr__cla_f32(&A, 1.0f);
    assert_int_equal(tr__cl_launch(cl, "clrt_add", 1, &g, NULL, &A), TR_OK); /* still queued when migrating */
    assert_false(tr__cl_migrated(cl));
    assert_int_equal(tr__cl_migrate_to_host(cl), TR_OK);
    assert_true(tr__cl_migrated(cl));
    for (i = 0; i < N; i++) assert_true(a[i] == (float)i * 0.5f && y[i] == (float)i);
    a[3] = 99.0f, y[N - 1] = -1.0f, sc[63] = 5.0f;
    assert_true(a[3] == 99.0f && y[N - 1] == -1.0f && sc[63] == 5.0f);
    assert_true(tr__cl_owns(cl, a + 3));
    assert_int_equal(tr__cl_launch(cl, "clrt_add", 1, &g, NULL, &A), TR_ERR_DEVICE);
    assert_int_equal(tr__cl_write(cl, a, h, 4), TR_ERR_DEVICE);
    assert_int_equal(tr__cl_read(cl, h, a, 4), TR_ERR_DEVICE);
    assert_int_equal(tr__cl_migrate_to_host(cl), TR_OK); /* again: nothing to do */
    p = (float *)tr__cl_alloc(cl, 100 * 4, 1);            /* host memory from now on */
    assert_non_null(p);
    for (i = 0; i < 100; i++) assert_true(p[i] == 0.0f);
    p[99] = 1.0f;
    p = tr__cl_scratch(cl, 4, 1000);
    assert_non_null(p);
    p[999] = 2.0f;
    tr__cl_free(cl, b);
    free(h);
    tr__cl_destroy(cl);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

/* The library's kernels are embedded from tools/opencl/NAME.cl with #line directives, so a compile error names the
   .cl file and line. Each file's fragments are built alone with one of its kernels' names defined as 1 (no change to
   the kernel text): "void 1(" is an error at the line that declares the kernel, read from the .cl file itself (tests
   run from the repository root). */
static int clrt_line_of(const char *path, const char *text) {
    char line[8192];
    int n = 0, found = 0;
    FILE *f = fopen(path, "r");
    if (!f) fail_msg("cannot read %s (run from the repository root)", path);
    while (!found && fgets(line, sizeof line, f)) n++, found = strstr(line, text) != NULL;
    fclose(f);
    if (!found) fail_msg("%s has no '%s'", path, text);
    return n;
}

static void test_clrt_build_error_names_cl_file(void **state) {
    static const char *const ops[] = {TR__CL_SRC_OPS_LIST}, *const gemm[] = {TR__CL_SRC_GEMM_LIST}, *const att[] = {TR__CL_SRC_ATTENTION_LIST};
    static const struct {
        const char *path, *kernel;
        const char *const *src;
        int n;
    } files[] = {{"tools/opencl/ops.cl", "tr_k_add", ops, (int)(sizeof ops / sizeof ops[0])},
                 {"tools/opencl/gemm.cl", "tr_k_transpose", gemm, (int)(sizeof gemm / sizeof gemm[0])},
                 {"tools/opencl/attention.cl", "tr_k_att_dot", att, (int)(sizeof att / sizeof att[0])}};
    tr_ctx *ctx = tu_ctx(1, 1);
    tr__cl *cl = clrt_open(ctx, NULL); /* skips without a device */
    char sel[256], decl[64], opt[64], want[320];
    size_t i;
    (void)state;
    tr__cl_destroy(cl);
    for (i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(decl, sizeof decl, "void %s(", files[i].kernel);
        snprintf(want, sizeof want, "%s:%d:", files[i].path, clrt_line_of(files[i].path, decl));
        snprintf(opt, sizeof opt, "-D%s=1", files[i].kernel);
        assert_int_equal(tr__cl_open(ctx, clrt_selector(sel, sizeof sel), files[i].src, files[i].n, opt, TR__CLF_NONE, &cl), TR_ERR_DEVICE);
        CLRT_HAS(ctx, "build log");
        CLRT_HAS(ctx, want);
    }
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

/* Compilers that ignore #line (NVIDIA's: "<kernel>:LINE:" over the whole program) get their log mapped back to the
   .cl file and line; the fragments here are cut as cl_embed.sh may cut them, a line running on into the next. */
static void test_clrt_log_maps_kernel_lines(void **state) {
    static const char *const src[] = {"#line 1 \"tools/opencl/a.cl\"\nx\ny\nz", "z\n#line 1 \"tools/opencl/b.cl\"\nw\n", "v\n"};
    static const char log[] = "<kernel>:3:7: error: one\n<kernel>:4:1: two\n<kernel>:6:2: three <kernel>:7:9: four <kernel>:x <kernel>:1:1:";
    tr_ctx *ctx = tu_ctx(1, 1);
    char *m;
    (void)state;
    assert_null(tr__cl_map_log(ctx, src, 3, "tools/opencl/a.cl:2:1: error: no mapping needed"));
    m = tr__cl_map_log(ctx, src, 3, log);
    assert_non_null(m);
    assert_string_equal(m, "tools/opencl/a.cl:2:7: error: one\ntools/opencl/a.cl:3:1: two\ntools/opencl/b.cl:1:2: three "
                           "tools/opencl/b.cl:2:9: four <kernel>:x <kernel>:1:1:");
    tr__free(ctx, m);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

/* tr_ctx_config's OpenCL knobs on an opened device: a set field wins over its variable, an unset one leaves
   the variable in force (the build options, the tiles, profiling and zero-copy). */
static int clrt_extra(tr_ctx *ctx, tr__cl **out) {
    tr__cl *cl = clrt_open(ctx, NULL);
    int32_t *fl = (int32_t *)tr__cl_alloc(cl, 8, 1), flags[2] = {0, -1}; /* (fl starts zero-filled: 0 without CLRT_EXTRA) */
    size_t g = 1;
    tr__clargs A;
    assert_non_null(fl);
    A.n = 0;
    tr__cla_buf(&A, fl);
    assert_int_equal(tr__cl_launch(cl, "clrt_flags", 1, &g, NULL, &A), TR_OK);
    assert_int_equal(tr__cl_read(cl, flags, fl, 8), TR_OK);
    tr__cl_free(cl, fl);
    *out = cl;
    return flags[1];
}
static void test_clrt_config_knobs(void **state) {
    tr_ctx_config cc = tr_ctx_config_default();
    tr_ctx *ctx = NULL;
    tr__cl *cl;
    (void)state;
    setenv("TINYREC_CL_OPTIONS", "-DCLRT_EXTRA=9", 1);
    setenv("TINYREC_CL_PROFILE", "0", 1);
    setenv("TINYREC_CL_ZEROCOPY", "1", 1);
    setenv("TINYREC_CL_SGEMM", "TM=7,bogus", 1); /* invalid: the automatic tiles */
    assert_int_equal(tr_ctx_create(&cc, &ctx), TR_OK);
    assert_int_equal(clrt_extra(ctx, &cl), 9);
    assert_int_equal(cl->profile, 0);
    assert_int_equal(cl->zerocopy, cl->info.host_unified);
    assert_int_not_equal(cl->gemm.tm, 24);
    tr__cl_destroy(cl);
    tr_ctx_destroy(ctx);
    cc.cl_options = "-DCLRT_EXTRA=5", cc.cl_profile = "1", cc.cl_zerocopy = "0", cc.cl_sgemm = "TM=24,TN=16,TK=8,WM=3,WN=2,VW=1";
    assert_int_equal(tr_ctx_create(&cc, &ctx), TR_OK);
    assert_int_equal(clrt_extra(ctx, &cl), 5);
    assert_int_equal(cl->profile, 1);
    assert_int_equal(cl->zerocopy, 0);
    assert_int_equal(cl->gemm.tm, 24), assert_int_equal(cl->gemm.wn, 2), assert_int_equal(cl->gemm.vw, 1);
    tr__cl_destroy(cl);
    tr_ctx_destroy(ctx);
    cc.cl_options = ""; /* set: no extra options, whatever the variable says */
    assert_int_equal(tr_ctx_create(&cc, &ctx), TR_OK);
    assert_int_equal(clrt_extra(ctx, &cl), 0);
    tr__cl_destroy(cl);
    tr_ctx_destroy(ctx);
    unsetenv("TINYREC_CL_OPTIONS"), unsetenv("TINYREC_CL_PROFILE"), unsetenv("TINYREC_CL_ZEROCOPY"), unsetenv("TINYREC_CL_SGEMM");
}

/* --- the packing checked against the kernels' declarations (tr__cl_args_check) --------------------------------------- */
/* A launch of kernel `name` with A on one work-item; TR_ERR_INVALID_ARG with the reason expected (want, a piece of it). */
static void clrt_bad_packing(tr_ctx *ctx, tr__cl *cl, const char *name, const tr__clargs *A, const char *want) {
    size_t g = 1;
    assert_int_equal(tr__cl_launch(cl, name, 1, &g, NULL, A), TR_ERR_INVALID_ARG);
    CLRT_HAS(ctx, want);
}

/* The library's own kernels: a swapped, a missing, an extra and a mistyped argument fail with the kernel, the argument
   and both sides named, and run nothing; the right packing runs. */
static void test_clrt_packing_checked(void **state) {
    enum { N = 37 };
    tr_ctx *ctx = tu_ctx(1, 1);
    tr__cl *cl = tu_cl_open(ctx); /* the library's program; skips without a device */
    float h[N], *x = (float *)tr__cl_alloc(cl, (N + 3) * 4, 1), *y = (float *)tr__cl_alloc(cl, (N + 3) * 4, 1);
    tr__clargs A;
    int i;
    (void)state;
    assert_true(x && y);
    for (i = 0; i < N; i++) h[i] = (float)i - 5.0f;
    assert_int_equal(tr__cl_write(cl, x + 3, h, sizeof h), TR_OK);
    assert_int_equal(tr__cl_write(cl, y + 3, h, sizeof h), TR_OK);
    /* tr_k_scale(ulong n, __global float *x, ulong x_off, float a): a and x swapped, a missing, one too many */
    A.n = 0, tr__cla_i64(&A, N), tr__cla_f32(&A, 2.5f), tr__cla_buf(&A, x + 3);
    clrt_bad_packing(ctx, cl, "tr_k_scale", &A, "opencl: tr_k_scale, argument 1: packed a float, the kernel declares '__global float");
    CLRT_HAS(ctx, " x'");
    A.n = 0, tr__cla_i64(&A, N), tr__cla_buf(&A, x + 3);
    clrt_bad_packing(ctx, cl, "tr_k_scale", &A, "opencl: tr_k_scale: 3 kernel arguments packed, the kernel declares 4 (argument 3, 'float a', is missing)");
    A.n = 0, tr__cla_i64(&A, N), tr__cla_buf(&A, x + 3), tr__cla_f32(&A, 2.5f), tr__cla_f32(&A, 1.0f);
    clrt_bad_packing(ctx, cl, "tr_k_scale", &A, "opencl: tr_k_scale: 5 kernel arguments packed, the kernel declares 4 (from argument 4 on they are extra)");
    /* tr_k_add(ulong n, a, b, y, int fdt): an int where the count is a ulong; b missing in the middle */
    A.n = 0, tr__cla_i32(&A, N), tr__cla_buf(&A, x + 3), tr__cla_buf(&A, x + 3), tr__cla_buf(&A, y + 3), tr__cla_i32(&A, 0);
    clrt_bad_packing(ctx, cl, "tr_k_add", &A, "opencl: tr_k_add, argument 0: packed an int, the kernel declares 'ulong n'");
    A.n = 0, tr__cla_i64(&A, N), tr__cla_buf(&A, x + 3), tr__cla_buf(&A, y + 3), tr__cla_i32(&A, 0);
    clrt_bad_packing(ctx, cl, "tr_k_add", &A, "opencl: tr_k_add, argument 5: packed an int, the kernel declares '__global float");
    CLRT_HAS(ctx, " y' (6 kernel arguments packed, 8 declared)");
    A.n = 0, tr__cla_i64(&A, N), tr__cla_buf(&A, x + 3), tr__cla_buf(&A, x + 3), tr__cla_local(&A, 64), tr__cla_i32(&A, 0);
    clrt_bad_packing(ctx, cl, "tr_k_add", &A, "opencl: tr_k_add, argument 5: packed local memory, the kernel declares '__global float");
    /* nothing ran: x and y hold what was written */
    assert_int_equal(tr__cl_finish(cl), TR_OK);
    {
        float back[N], back2[N];
        assert_int_equal(tr__cl_read(cl, back, x + 3, sizeof back), TR_OK);
        assert_int_equal(tr__cl_read(cl, back2, y + 3, sizeof back2), TR_OK);
        for (i = 0; i < N; i++) assert_true(back[i] == h[i] && back2[i] == h[i]);
    }
    /* the right packings run: through the wrappers and by hand */
    assert_int_equal(tr__cl_scale(cl, N, x + 3, 2.5f), TR_OK);
    A.n = 0, tr__cla_i64(&A, N), tr__cla_buf(&A, x + 3), tr__cla_buf(&A, y + 3), tr__cla_buf(&A, y + 3), tr__cla_i32(&A, 0);
    assert_int_equal(tr__cl_k1_launch4(cl, "tr_k_add", N, &A), TR_OK); /* y = 2.5 h + h */
    {
        float back[N], back2[N];
        assert_int_equal(tr__cl_read(cl, back, x + 3, sizeof back), TR_OK);
        assert_int_equal(tr__cl_read(cl, back2, y + 3, sizeof back2), TR_OK);
        for (i = 0; i < N; i++) assert_true(back[i] == 2.5f * h[i] && back2[i] == 2.5f * h[i] + h[i]);
    }
    tr__cl_free(cl, x), tr__cl_free(cl, y);
    tr_ctx_destroy(ctx);
}

/* Every kernel of both programs (the tensor-core one emulated) has its declaration learned on this device, so that
   the check above is not vacuous here; the declared packings of two are as the .cl files write them. */
static void test_clrt_packing_learned(void **state) {
    tr_ctx_config cc = tr_ctx_config_default();
    tr_ctx *ctx = NULL;
    tr__cl *cl;
    int p, total = 0, hmma = 0;
    (void)state;
    cc.device = "cpu", cc.cl_sgemm = "MMA=2"; /* the emulated tensor-core kernels, on any device */
    assert_int_equal(tr_ctx_create(&cc, &ctx), TR_OK);
    cl = tu_cl_open(ctx);
    assert_non_null(cl->lib.f.GetProgramInfo);
    assert_int_equal(tr__cl_mma_ready(cl), 1);
    for (p = 0; p < 2; p++) {
        tr__cl_program prog = p ? cl->mma_program : cl->program;
        size_t sz = 0;
        char *names, *name, *next;
        assert_int_equal(cl->lib.f.GetProgramInfo(prog, TR__CL_PROGRAM_KERNEL_NAMES, 0, NULL, &sz), TR__CL_SUCCESS);
        assert_true(sz > 1);
        assert_non_null(names = (char *)calloc(sz + 1, 1));
        assert_int_equal(cl->lib.f.GetProgramInfo(prog, TR__CL_PROGRAM_KERNEL_NAMES, sz, names, NULL), TR__CL_SUCCESS);
        for (name = names; *name; name = next) {
            tr__cl_kcache *K;
            size_t len = strcspn(name, ";");
            next = name + len + (name[len] == ';');
            name[len] = 0;
            if (!len) continue;
            if (!(K = tr__cl_kernel_get(cl, name))) fail_msg("%s: %s", name, tr_ctx_last_error(ctx));
            if (K->nsig < 0) fail_msg("kernel %s: its declaration was not learned", name);
            assert_true(K->nargs >= K->nsig && K->nsig <= TR__CLA_MAX);
            total++, hmma += strncmp(name, "tr_k_hmma_", 10) == 0;
        }
        free(names);
    }
    assert_true(total >= 60 && hmma >= 1);
    {
        static const unsigned char scale[] = {TR__CLA_I64, TR__CLA_BUF, TR__CLA_F32};
        tr__cl_kcache *K = tr__cl_kernel_get(cl, "tr_k_scale");
        assert_non_null(K);
        assert_int_equal(K->nsig, 3), assert_int_equal(K->nargs, 4);
        assert_memory_equal(K->sig, scale, 3);
        static const unsigned char att[] = {TR__CLA_BUF, TR__CLA_BUF, TR__CLA_BUF, TR__CLA_I32, TR__CLA_I32, TR__CLA_I32, TR__CLA_I32,
                                            TR__CLA_I32, TR__CLA_LOCAL, TR__CLA_LOCAL, TR__CLA_LOCAL, TR__CLA_LOCAL, TR__CLA_I32};
        assert_non_null(K = tr__cl_kernel_get(cl, "tr_k_att_fwd64"));
        assert_int_equal(K->nsig, 13), assert_int_equal(K->nargs, 16);
        assert_memory_equal(K->sig, att, 13);
    }
    tr_ctx_destroy(ctx);
}

/* Where the driver gives no argument info (no clGetKernelArgInfo, or CL_KERNEL_ARG_INFO_NOT_AVAILABLE) the kernels
   run unchecked, silently. */
static tr__cl_int TR__CLAPI clrt_no_arg_info(tr__cl_kernel k, tr__cl_uint a, tr__cl_uint what, size_t n, void *v, size_t *r) {
    (void)k, (void)a, (void)what, (void)n, (void)v, (void)r;
    return -19; /* CL_KERNEL_ARG_INFO_NOT_AVAILABLE */
}
static void test_clrt_packing_unchecked(void **state) {
    tr_ctx_config cc = tr_ctx_config_default();
    tr_ctx *ctx = NULL;
    int round;
    (void)state;
    cc.log = clrt_log;
    for (round = 0; round < 3; round++) {
        tr__cl *cl;
        float *y, hy = 0;
        tr__clargs A;
        size_t g = 1;
        assert_int_equal(tr_ctx_create(&cc, &ctx), TR_OK);
        cl = clrt_open(ctx, NULL);
        if (round == 1) cl->lib.f.GetKernelArgInfo = NULL;
        if (round == 2) cl->lib.f.GetKernelArgInfo = clrt_no_arg_info;
        assert_non_null(y = (float *)tr__cl_alloc(cl, 16, 1));
        clrt_lognum = 0;
        A.n = 0, tr__cla_buf(&A, NULL), tr__cla_buf(&A, y + 1);
        assert_int_equal(tr__cl_launch(cl, "clrt_null", 1, &g, NULL, &A), TR_OK);
        assert_int_equal(tr__cl_read(cl, &hy, y + 1, 4), TR_OK);
        assert_true(hy == 7.0f);
        assert_int_equal(tr__cl_kernel_get(cl, "clrt_null")->nsig, round ? -1 : 2);
        assert_int_equal(clrt_lognum, 0);
        A.n = 0, tr__cla_buf(&A, y + 1), tr__cla_i32(&A, 3); /* the tiny kernels' own packing is checked too */
        if (!round) clrt_bad_packing(ctx, cl, "clrt_null", &A, "opencl: clrt_null, argument 2: packed an int, the kernel declares '__global float");
        tr__cl_free(cl, y);
        tr__cl_destroy(cl);
        tr_ctx_destroy(ctx);
    }
}

static const struct CMUnitTest cl_runtime_tests[] = {
    cmocka_unit_test(test_clrt_selectors), cmocka_unit_test(test_clrt_open_faults), cmocka_unit_test(test_clrt_launch),
    cmocka_unit_test(test_clrt_transfers), cmocka_unit_test(test_clrt_scratch),     cmocka_unit_test(test_clrt_faults),
    cmocka_unit_test(test_clrt_migrate),   cmocka_unit_test(test_clrt_build_error_names_cl_file), cmocka_unit_test(test_clrt_log_maps_kernel_lines),
    cmocka_unit_test(test_clrt_zerocopy), cmocka_unit_test(test_clrt_config_knobs), cmocka_unit_test(test_clrt_packing_checked),
    cmocka_unit_test(test_clrt_packing_learned), cmocka_unit_test(test_clrt_packing_unchecked),
};

int main(void) { return cmocka_run_group_tests_name("opencl_runtime", cl_runtime_tests, NULL, NULL); }
#else
TU_NO_OPENCL_MAIN("opencl_runtime")
#endif
