/* Shared helpers for the cmocka suites. A suite defines TINYREC_IMPLEMENTATION, then includes
   this file, which brings in the whole library first (before any system header, so that the
   library's feature macros take effect) and then cmocka. */
#ifndef TINYREC_TEST_UTIL_H
#define TINYREC_TEST_UTIL_H
#include "tinyrec.h"
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>

/* Fills with uniform values in [-scale, scale) from a fixed seed. */
static inline void tu_fill(float *x, size_t n, uint64_t seed, float scale) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    size_t i;
    for (i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        x[i] = scale * ((float)(s >> 40) / 8388608.0f - 1.0f);
    }
}

/* Asserts |got - ref| <= atol + rtol * |ref| elementwise; prints the worst element on failure. */
static inline void tu_assert_close(const char *what, const float *got, const float *ref, size_t n, double atol, double rtol) {
    size_t i, worst = 0;
    double worst_excess = -1;
    for (i = 0; i < n; i++) {
        double err = fabs((double)got[i] - (double)ref[i]), lim = atol + rtol * fabs((double)ref[i]);
        if (!(err <= lim) && err - lim > worst_excess) worst_excess = err - lim, worst = i;
    }
    if (worst_excess >= 0) {
        fail_msg("%s: element %zu: got %.9g, want %.9g (atol %g, rtol %g)", what, worst, (double)got[worst], (double)ref[worst], atol, rtol);
    }
}

static inline tr_ctx *tu_ctx(int threads, uint64_t seed) {
    tr_ctx_config cc = tr_ctx_config_default();
    tr_ctx *ctx = NULL;
    cc.num_threads = threads;
    cc.seed = seed;
    cc.device = "cpu"; /* these suites read model memory directly; TINYREC_DEVICE must not move it */
    assert_int_equal(tr_ctx_create(&cc, &ctx), TR_OK);
    return ctx;
}

/* No OpenCL device for a test: skip it, unless TINYREC_REQUIRE_OPENCL=1 (CI) makes that a failure. */
static inline void tu_no_opencl(const char *why) {
    const char *req = getenv("TINYREC_REQUIRE_OPENCL");
    if (req && strcmp(req, "1") == 0) fail_msg("no OpenCL device (%s), and TINYREC_REQUIRE_OPENCL=1", why);
    skip();
}

/* The OpenCL device of ctx (opened now, before any model): "opencl" = the first GPU, else the
   first device (PoCL in CI), or TINYREC_TEST_OPENCL (e.g. "opencl:NVIDIA"). Skips when none. */
#if TINYREC_OPENCL
static inline tr__cl *tu_cl_open(tr_ctx *ctx) {
    const char *sel = getenv("TINYREC_TEST_OPENCL");
    assert_int_equal(tr_ctx_set_device(ctx, sel && *sel ? sel : "opencl"), TR_OK);
    if (!tr_ctx_use_device(ctx)) tu_no_opencl(tr_ctx_device_name(ctx));
    return ctx->cl;
}

/* The OpenCL attention with its operands' types given as a mask (x16, TR__X16_*: which of qkv, o and do hold 16-bit
   values of fdt), as the OpenCL suites enumerate them. */
static inline tr_status tu_cl_att(tr__cl *cl, int fdt, int bwd, int B, int S, int H, int hd, const void *qkv, const void *o, const float *lse,
                                  const void *do_, float *dqkv, int x16) {
    tr__att_desc d;
    memset(&d, 0, sizeof d);
    d.fdt = fdt, d.bwd = bwd, d.B = B, d.S = S, d.H = H, d.hd = hd, d.lse = (float *)(uintptr_t)lse, d.dqkv = dqkv;
    d.qkv = tr__buf_of(qkv, (x16 & TR__X16_A) ? fdt : 0), d.o = tr__buf_of(o, (x16 & TR__X16_B) ? fdt : 0), d.do_ = tr__buf_of(do_, (x16 & TR__X16_C) ? fdt : 0);
    return bwd ? tr__cl_attention_bwd(cl, &d) : tr__cl_attention_fwd(cl, &d);
}
#define cl_att_fwd(cl, fdt, B, S, H, hd, qkv, o, lse, x16) tu_cl_att(cl, fdt, 0, B, S, H, hd, qkv, o, lse, NULL, NULL, x16)
#define cl_att_bwd(cl, fdt, B, S, H, hd, qkv, o, lse, do_, dqkv, x16) tu_cl_att(cl, fdt, 1, B, S, H, hd, qkv, o, lse, do_, dqkv, x16)
#endif

/* The main() of an OpenCL suite built without TINYREC_OPENCL: one test that says so (skipped,
   or failed under TINYREC_REQUIRE_OPENCL=1). */
#define TU_NO_OPENCL_MAIN(suite)                                                        \
    static void test_no_opencl(void **state) {                                          \
        (void)state;                                                                    \
        tu_no_opencl("this build has no TINYREC_OPENCL");                               \
    }                                                                                   \
    int main(void) {                                                                    \
        const struct CMUnitTest tests[] = {cmocka_unit_test(test_no_opencl)};           \
        return cmocka_run_group_tests_name(suite, tests, NULL, NULL);                   \
    }

/* A context whose models live on the OpenCL device (skips when there is none). */
static inline tr_ctx *tu_ctx_opencl(int threads, uint64_t seed) {
    tr_ctx *ctx = tu_ctx(threads, seed);
#if TINYREC_OPENCL
    tu_cl_open(ctx);
#else
    tr_ctx_destroy(ctx);
    tu_no_opencl("this build has no TINYREC_OPENCL");
#endif
    return ctx;
}

/* A host copy of n floats of device (or host) memory; free() it. */
static inline float *tu_get(tr_ctx *ctx, const float *p, size_t n) {
    float *h = (float *)malloc(n * sizeof(float) + 1);
    assert_int_equal(tr__dget(ctx, h, p, n * sizeof(float)), TR_OK);
    return h;
}

/* The tiny TRM configuration the model, parity-adjacent and checkpoint suites share. */
static inline void tu_tiny_config(tr_model_config *c, int mlp_t, tr_pos_encoding pos, tr_loss_type loss) {
    assert_int_equal(tr_model_config_preset(c, "trm-tiny"), TR_OK);
    c->vocab_size = 6, c->seq_len = 16, c->hidden_size = 16, c->num_heads = 2;
    c->puzzle_emb_ndim = 24, c->puzzle_emb_len = 2, c->num_puzzle_identifiers = 3;
    c->H_cycles = 2, c->L_cycles = 2, c->L_layers = 2, c->halt_max_steps = 3;
    c->mlp_t = mlp_t, c->pos_encodings = pos, c->loss_type = loss;
}

/* The tiny config as an HRM: H_level of 1 block and L_level of 2 (different depths on purpose),
   halting on q_halt > q_continue with the Q-learning target. */
static inline void tu_tiny_hrm_config(tr_model_config *c, int mlp_t, tr_pos_encoding pos, tr_loss_type loss) {
    tu_tiny_config(c, mlp_t, pos, loss);
    c->arch = TR_ARCH_HRM, c->H_layers = 1, c->no_ACT_continue = 0;
}

/* A whole file, NUL-terminated (malloc'ed; NULL if it cannot be read); its size in *len if len. */
static inline char *tu_slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    char *buf;
    long n;
    if (len) *len = 0;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = n >= 0 ? (char *)malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) n = 0;
    fclose(f);
    if (!buf) return NULL;
    buf[n] = 0;
    if (len) *len = (size_t)n;
    return buf;
}

/* Random token rows in 1..V-1 with ~20% ignored labels; puzzle ids (i + pid_shift) % npid. */
static inline void tu_tiny_batch(int B, int L, int V, uint64_t seed, int32_t *in, int32_t *lab, int32_t *pid, int npid, uint64_t pid_shift) {
    uint64_t s = seed;
    int i;
    for (i = 0; i < B * L; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        in[i] = 1 + (int)((s >> 33) % (uint64_t)(V - 1));
        lab[i] = ((s >> 20) % 5 == 0) ? -100 : 1 + (int)((s >> 40) % (uint64_t)(V - 1));
    }
    for (i = 0; i < B; i++) pid[i] = (int32_t)(((uint64_t)i + pid_shift) % (uint64_t)npid);
}

#if !defined(_WIN32)
#include <dirent.h>
/* Files in dir whose name carries ".tmp." (left-overs of an interrupted atomic write). */
static inline int tu_count_tmp_files(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    assert_non_null(d);
    while ((e = readdir(d)) != NULL)
        if (strstr(e->d_name, ".tmp.")) n++;
    closedir(d);
    return n;
}
#include <sys/stat.h>
#include <unistd.h>
/* Removes path and, for a directory, everything under it (a suite's scratch directory). */
static inline void tu_rm_tree(const char *path) {
    struct stat sb;
    DIR *d;
    struct dirent *e;
    char p[1024];
    if (lstat(path, &sb) != 0) return;
    if (S_ISDIR(sb.st_mode) && (d = opendir(path)) != NULL) {
        while ((e = readdir(d)) != NULL)
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && snprintf(p, sizeof p, "%s/%s", path, e->d_name) < (int)sizeof p) tu_rm_tree(p);
        closedir(d);
        rmdir(path);
    } else
        unlink(path);
}
#endif
#endif
