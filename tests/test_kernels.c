/* CPU kernels: every fast kernel against its scalar twin, every backward against finite
   differences. FD uses central differences in float with h = 1e-2 on O(1) inputs: the truncation
   error is O(h^2 * f''') ~ 1e-4 and the rounding error ~ 1e-7 * |f| / h ~ 1e-5, so
   atol 2e-3 + rtol 2e-2 separates a wrong formula (O(1) errors) from noise. */
#define TINYREC_IMPLEMENTATION
#include "test_util.h"

#define FD_H 1e-2f
#define FD_ATOL 2e-3
#define FD_RTOL 2e-2

typedef double (*tu_fn)(const float *x, void *user);

/* Central-difference gradient of f at x (n values), perturbing each element in turn. */
static void tu_fd(tu_fn f, float *x, size_t n, void *user, float *g) {
    size_t i;
    for (i = 0; i < n; i++) {
        float keep = x[i];
        double fp, fm;
        x[i] = keep + FD_H;
        fp = f(x, user);
        x[i] = keep - FD_H;
        fm = f(x, user);
        x[i] = keep;
        g[i] = (float)((fp - fm) / (2.0 * FD_H));
    }
}

static double tu_wsum(const float *y, const float *w, size_t n) {
    double s = 0;
    size_t i;
    for (i = 0; i < n; i++) s += (double)y[i] * w[i];
    return s;
}

static const char *const simd_levels[3] = {"avx2", "avx512", "neon"};

/* A norm's call (tr__op_norm) on operands of these types. */
static tr_status norm_op(tr_ctx *ctx, int fdt, int kind, long rows, int S, int D, tr__buf in1, tr__buf in2, tr__buf out, float *rstd, float eps) {
    tr__norm_desc d;
    memset(&d, 0, sizeof d);
    d.kind = kind, d.fdt = fdt, d.rows = rows, d.S = S, d.D = D, d.in1 = in1, d.in2 = in2, d.out = out, d.rstd = rstd, d.eps = eps;
    return tr__op_norm(ctx, &d);
}

/* --- RMSNorm over rows ------------------------------------------------------------------- */
enum { RR = 5, RD = 37 };
static float rr_w[RR * RD], rr_add[RR * RD];
static double rr_loss(const float *x, void *u) {
    float y[RR * RD], rs[RR];
    (void)u;
    tr__rms_rows_fwd_ref(RR, RD, x, rr_add, y, rs, 1e-5f, 1);
    return tu_wsum(y, rr_w, RR * RD);
}
static void test_rms_rows(void **state) {
    int lvl;
    float x[RR * RD], y[RR * RD], y2[RR * RD], rs[RR], rs2[RR], dx[RR * RD], dx2[RR * RD], fd[RR * RD], dsum[RR * RD];
    tr_ctx *ctx = tu_ctx(2, 1);
    (void)state;
    tu_fill(x, RR * RD, 1, 1.5f);
    tu_fill(rr_add, RR * RD, 2, 1.0f);
    tu_fill(rr_w, RR * RD, 3, 1.0f);
    tr__rms_rows_fwd_ref(RR, RD, x, rr_add, y, rs, 1e-5f, 1);
    tr__rms_rows_bwd_ref(RR, RD, rr_w, y, rs, dx, 1);
    tu_fd(rr_loss, x, RR * RD, NULL, fd);
    tu_assert_close("rms_rows bwd vs FD", dx, fd, RR * RD, FD_ATOL, FD_RTOL);
    /* the gradient w.r.t. `add` equals the one w.r.t. x (it is a residual sum) */
    memcpy(dsum, dx, sizeof dx);
    for (lvl = 0; lvl < 3; lvl++) { /* every SIMD level this CPU has (RD = 37 exercises the tails) */
        if (tr_ctx_set_simd(ctx, simd_levels[lvl]) != TR_OK) continue;
        assert_int_equal(norm_op(ctx, 0, TR__NORM_ROWS_FWD, RR, 1, RD, tr__f32(x), tr__f32(rr_add), tr__f32(y2), rs2, 1e-5f), TR_OK);
        tu_assert_close(simd_levels[lvl], y2, y, RR * RD, 1e-6, 1e-5);
        tu_assert_close(simd_levels[lvl], rs2, rs, RR, 0, 1e-5);
        assert_int_equal(norm_op(ctx, 0, TR__NORM_ROWS_BWD, RR, 1, RD, tr__f32(rr_w), tr__f32(y), tr__f32(dx2), rs, 0), TR_OK);
        tu_assert_close(simd_levels[lvl], dx2, dsum, RR * RD, 1e-6, 1e-5);
    }
    tr_ctx_destroy(ctx);
}

/* --- RMSNorm over the sequence axis (mlp_t) ------------------------------------------------ */
enum { CB = 2, CS = 7, CD = 70 };
static float rc_w[CB * CS * CD];
static double rc_loss(const float *x, void *u) {
    float y[CB * CS * CD], rs[CB * CD];
    (void)u;
    tr__rms_cols_fwd_ref(CB, CS, CD, x, NULL, y, rs, 1e-5f, 1);
    return tu_wsum(y, rc_w, CB * CS * CD);
}
static void test_rms_cols(void **state) {
    static float x[CB * CS * CD], y[CB * CS * CD], dx[CB * CS * CD], fd[CB * CS * CD], rs[CB * CD], y2[CB * CS * CD], rs2[CB * CD], dx2[CB * CS * CD];
    size_t b, s, d;
    (void)state;
    tu_fill(x, CB * CS * CD, 4, 1.0f);
    tu_fill(rc_w, CB * CS * CD, 5, 1.0f);
    tr__rms_cols_fwd_ref(CB, CS, CD, x, NULL, y, rs, 1e-5f, 1);
    /* each (b, d) column has unit RMS over s */
    for (b = 0; b < CB; b++)
        for (d = 0; d < CD; d++) {
            double ss = 0;
            for (s = 0; s < CS; s++) ss += (double)y[(b * CS + s) * CD + d] * y[(b * CS + s) * CD + d];
            assert_true(fabs(ss / CS - 1.0) < 1e-3);
        }
    tr__rms_cols_bwd_ref(CB, CS, CD, rc_w, y, rs, dx, 1);
    tu_fd(rc_loss, x, CB * CS * CD, NULL, fd);
    tu_assert_close("rms_cols bwd vs FD", dx, fd, CB * CS * CD, FD_ATOL, FD_RTOL);
    /* 2 threads give the same bits (disjoint tasks, same order inside each) */
    tr__rms_cols_fwd_ref(CB, CS, CD, x, NULL, y2, rs2, 1e-5f, 2);
    assert_memory_equal(y, y2, sizeof y);
    tr__rms_cols_bwd_ref(CB, CS, CD, rc_w, y, rs, dx2, 2);
    assert_memory_equal(dx, dx2, sizeof dx);
    {   /* the SIMD variants sum squares in fp32 (S terms): rtol 1e-5. CD = 70 leaves a task of 6
           channels (a partial vector, then empty ones) after a full one of 64. */
        static float add[CB * CS * CD];
        tr_ctx *ctx = tu_ctx(2, 1);
        int lvl;
        tu_fill(add, CB * CS * CD, 6, 0.5f);
        tr__rms_cols_fwd_ref(CB, CS, CD, x, add, y, rs, 1e-5f, 1);
        tr__rms_cols_bwd_ref(CB, CS, CD, rc_w, y, rs, dx, 1);
        for (lvl = 0; lvl < 3; lvl++) {
            if (tr_ctx_set_simd(ctx, simd_levels[lvl]) != TR_OK) continue;
            assert_int_equal(norm_op(ctx, 0, TR__NORM_COLS_FWD, CB, CS, CD, tr__f32(x), tr__f32(add), tr__f32(y2), rs2, 1e-5f), TR_OK);
            tu_assert_close(simd_levels[lvl], y2, y, CB * CS * CD, 1e-6, 1e-5);
            tu_assert_close(simd_levels[lvl], rs2, rs, CB * CD, 0, 1e-5);
            assert_int_equal(norm_op(ctx, 0, TR__NORM_COLS_BWD, CB, CS, CD, tr__f32(rc_w), tr__f32(y), tr__f32(dx2), rs, 0), TR_OK);
            tu_assert_close(simd_levels[lvl], dx2, dx, CB * CS * CD, 1e-6, 1e-5);
        }
        tr_ctx_destroy(ctx);
    }
}

/* --- SwiGLU -------------------------------------------------------------------------------- */
enum { SR = 3, SW = 37 };
static float sw_w[SR * SW];
static double sw_loss(const float *g, void *u) {
    float a[SR * SW];
    (void)u;
    tr__swiglu_fwd_ref(SR, SW, g, 2 * SW, a, SW, 1);
    return tu_wsum(a, sw_w, SR * SW);
}
static void test_swiglu(void **state) {
    int lvl;
    float g[SR * 2 * SW], a[SR * SW], a2[SR * SW], dg[SR * 2 * SW], dg2[SR * 2 * SW], fd[SR * 2 * SW];
    tr_ctx *ctx = tu_ctx(2, 1);
    (void)state;
    tu_fill(g, SR * 2 * SW, 6, 4.0f);
    tu_fill(sw_w, SR * SW, 7, 1.0f);
    tr__swiglu_fwd_ref(SR, SW, g, 2 * SW, a, SW, 1);
    tr__swiglu_bwd_ref(SR, SW, g, 2 * SW, sw_w, SW, dg, 1);
    tu_fd(sw_loss, g, SR * 2 * SW, NULL, fd);
    tu_assert_close("swiglu bwd vs FD", dg, fd, SR * 2 * SW, FD_ATOL, FD_RTOL);
    for (lvl = 0; lvl < 3; lvl++) { /* the vector exp is accurate to a few ulp: rtol 1e-6 */
        if (tr_ctx_set_simd(ctx, simd_levels[lvl]) != TR_OK) continue;
        tr__swiglu_fwd(ctx, 0, SR, SW, g, 2 * SW, a2, SW);
        tu_assert_close(simd_levels[lvl], a2, a, SR * SW, 1e-7, 1e-6);
        tr__swiglu_bwd(ctx, SR, SW, g, 2 * SW, sw_w, SW, dg2);
        tu_assert_close(simd_levels[lvl], dg2, dg, SR * 2 * SW, 1e-7, 1e-6);
    }
    {   /* extreme inputs stay finite */
        float big[4] = {-200.0f, 200.0f, 1.0f, 1.0f}, out[2];
        tr__swiglu_fwd(ctx, 0, 1, 2, big, 4, out, 2);
        assert_true(isfinite(out[0]) && isfinite(out[1]));
    }
    tr_ctx_destroy(ctx);
}

/* SwiGLU in bfloat16 / float16 (silu rounded, times up, rounded): every set gives values of the precision within
   one of its ulps of the scalar twin (the vector exp differs in the last bits, so a value near a tie may round the
   other way); the avx512 set's one-pass rows give the bits of its row kernel followed by the rounding passes. */
static void test_swiglu_reduced(void **state) {
    enum { R = 3, W = 300 };
    float *g = (float *)malloc(R * 2 * W * sizeof(float)), ref[R * W], got[R * W];
    tr_ctx *ctx = tu_ctx(2, 1);
    int fdt, lvl;
    size_t i;
    (void)state;
    tu_fill(g, R * 2 * W, 9, 6.0f);
    for (fdt = TR_FWD_BFLOAT16; fdt <= TR_FWD_FLOAT16; fdt++) {
        tr__swiglu_fwd_args a = {W, g, 2 * W, ref, W, fdt};
        tr__swiglu_fwd_range(&a, 0, R);
        for (lvl = 0; lvl < 3; lvl++) {
            if (tr_ctx_set_simd(ctx, simd_levels[lvl]) != TR_OK) continue;
            tr__swiglu_fwd(ctx, fdt, R, W, g, 2 * W, got, W);
            for (i = 0; i < R * W; i++)
                if (tr__round1(fdt, got[i]) != got[i]) fail_msg("%s fdt %d: out[%zu] = %.9g is not a value of the precision", simd_levels[lvl], fdt, i, got[i]);
            tu_assert_close(simd_levels[lvl], got, ref, R * W, 1e-30, fdt == TR_FWD_BFLOAT16 ? 1.0 / 128 : 1.0 / 1024);
#if TR__X86
            if (ctx->simd == TR__SIMD_AVX512) {
                float old[R * W];
                tr__swiglu_fwd_simd q = {{W, g, 2 * W, old, W, fdt}, tr__swiglu_fwd_row512};
                tr__swiglu_fwd_lp_range(&q, 0, R);
                for (i = 0; i < R * W; i++)
                    if (memcmp(old + i, got + i, 4) != 0) fail_msg("avx512 fdt %d: out[%zu] one pass %.9g, passes %.9g", fdt, i, got[i], old[i]);
            }
#endif
        }
    }
    free(g);
    tr_ctx_destroy(ctx);
}


/* tr__swiglu16 on operands of these types (fdt: the 16-bit ones'). */
static void sw16(tr_ctx *ctx, int fdt, int bwd, long R, long W, tr__buf g, size_t gs, tr__buf da, size_t das, tr__buf out, size_t os) {
    tr__swiglu_desc d;
    memset(&d, 0, sizeof d);
    d.fdt = fdt, d.bwd = bwd, d.rows = R, d.width = W, d.g = g, d.gs = gs, d.da = da, d.das = das, d.out = out, d.os = os;
    tr__swiglu16(ctx, &d);
}

/* SwiGLU forward and backward on gate_up given as 16-bit values (a 16-bit tape's, read by the CPU's backward as they are:
   tr__swiglu16) give the bits of the kernels on the unpacked fp32 tensor, at every set: rows longer than a chunk and of
   no multiple of a vector, rows apart by more than their width. */
static void test_swiglu16(void **state) {
    static const int widths[3] = {300, 512, 5};
    static const char *const sets[4] = {"scalar", "avx2", "avx512", "neon"};
    enum { R = 3, PAD = 6 };
    tr_ctx *ctx = tu_ctx(2, 1);
    int fdt, lvl, w;
    size_t i;
    (void)state;
    for (fdt = TR_FWD_BFLOAT16; fdt <= TR_FWD_FLOAT16; fdt++)
        for (w = 0; w < 3; w++) {
            size_t W = (size_t)widths[w], gs = 2 * W + PAD, n = R * gs;
            float *g = (float *)malloc(n * sizeof(float)), *da = (float *)malloc(R * W * sizeof(float)), *ref = (float *)malloc(n * sizeof(float)),
                  *got = (float *)malloc(n * sizeof(float));
            uint16_t *h = (uint16_t *)malloc(n * sizeof(uint16_t)), *dh = (uint16_t *)malloc(n * sizeof(uint16_t)), *dh_ref = (uint16_t *)malloc(n * sizeof(uint16_t)),
                     *da16 = (uint16_t *)malloc(R * W * sizeof(uint16_t));
            float *dar = (float *)malloc(R * W * sizeof(float));
            tu_fill(g, n, 11 + (uint64_t)w, 6.0f);
            tu_fill(da, R * W, 12 + (uint64_t)w, 1.0f);
            tr__round_ref(fdt, g, n);
            tr__half_ref(fdt, 0, g, h, n);
            for (lvl = 0; lvl < 4; lvl++) {
                if (tr_ctx_set_simd(ctx, sets[lvl]) != TR_OK) continue;
                tr__swiglu_fwd(ctx, fdt, R, (long)W, g, gs, ref, W);
                sw16(ctx, fdt, 0, R, (long)W, tr__buf_of(h, fdt), gs, tr__f32(NULL), 0, tr__f32(got), W);
                for (i = 0; i < R * W; i++)
                    if (memcmp(&got[i], &ref[i], sizeof(float)) != 0)
                        fail_msg("%s fdt %d W %zu: act[%zu] = %.9g from 16 bits, %.9g unpacked", sets[lvl], fdt, W, i, got[i], ref[i]);
                tr__swiglu_bwd(ctx, R, (long)W, g, gs, da, W, ref);
                tr__round(ctx, fdt, ref, n); /* (the backward's d gate_up is rounded as it goes) */
                sw16(ctx, fdt, 1, R, (long)W, tr__buf_of(h, fdt), gs, tr__f32(da), W, tr__f32(got), gs);
                for (i = 0; i < n; i++)
                    if (i % gs < 2 * W && memcmp(&got[i], &ref[i], sizeof(float)) != 0)
                        fail_msg("%s fdt %d W %zu: dg[%zu] = %.9g from 16 bits, %.9g unpacked", sets[lvl], fdt, W, i, got[i], ref[i]);
                /* a 16-bit workspace's modes: dg written as 16-bit values, the rounded ones exactly; then da read as 16-bit
                   values (of a rounded da), the activation written so, and gate_up read as fp32 */
                tr__half_ref(fdt, 0, ref, dh_ref, n);
                memset(dh, 0xff, n * sizeof(uint16_t));
                sw16(ctx, fdt, 1, R, (long)W, tr__buf_of(h, fdt), gs, tr__f32(da), W, tr__buf_of(dh, fdt), gs);
                for (i = 0; i < n; i++)
                    if (i % gs < 2 * W ? dh[i] != dh_ref[i] : dh[i] != 0xffff)
                        fail_msg("%s fdt %d W %zu: 16-bit dg[%zu] = %04x, the rounded %04x", sets[lvl], fdt, W, i, dh[i], dh_ref[i]);
                memcpy(dar, da, R * W * sizeof(float));
                tr__round_ref(fdt, dar, R * W);
                tr__half_ref(fdt, 0, dar, da16, R * W);
                sw16(ctx, fdt, 1, R, (long)W, tr__buf_of(h, fdt), gs, tr__f32(dar), W, tr__f32(ref), gs);
                sw16(ctx, fdt, 1, R, (long)W, tr__buf_of(h, fdt), gs, tr__buf_of(da16, fdt), W, tr__f32(got), gs);
                for (i = 0; i < n; i++)
                    if (i % gs < 2 * W && memcmp(&got[i], &ref[i], sizeof(float)) != 0)
                        fail_msg("%s fdt %d W %zu: dg[%zu] = %.9g from a 16-bit da, %.9g", sets[lvl], fdt, W, i, got[i], ref[i]);
                tr__swiglu_fwd(ctx, fdt, R, (long)W, g, gs, ref, W);
                tr__half_ref(fdt, 0, ref, dh_ref, R * W);
                sw16(ctx, fdt, 0, R, (long)W, tr__buf_of(h, fdt), gs, tr__f32(NULL), 0, tr__buf_of(dh, fdt), W);
                if (memcmp(dh, dh_ref, R * W * sizeof(uint16_t)) != 0) fail_msg("%s fdt %d W %zu: the 16-bit activation differs", sets[lvl], fdt, W);
                memset(dh, 0xff, n * sizeof(uint16_t));
                sw16(ctx, fdt, 0, R, (long)W, tr__f32(g), gs, tr__f32(NULL), 0, tr__buf_of(dh, fdt), W);
                if (memcmp(dh, dh_ref, R * W * sizeof(uint16_t)) != 0) fail_msg("%s fdt %d W %zu: the 16-bit activation from fp32 gate_up differs", sets[lvl], fdt, W);
            }
            free(g), free(da), free(ref), free(got), free(h), free(dh), free(dh_ref), free(dar), free(da16);
        }
    tr_ctx_destroy(ctx);
}


/* Which operands of a test's op hold 16-bit values: its first, second and output (each a bit of a combination). */
enum { T16_A = 1, T16_B = 2, T16_C = 4 };

/* The norms with any of their operands as 16-bit values (tr__op_norm: a 16-bit tape's or workspace's): the bits of the
   fp32 op on the values they hold, the output stored as the 16 bits of that op's, at every level and precision, on 1
   and 2 threads, row and column norms, forward (with and without add) and backward, widths of no multiple of a vector
   or a column task. */
static void test_norm16(void **state) {
    static const char *const sets[4] = {"scalar", "avx2", "avx512", "neon"};
    static const int widths[3] = {37, 512, 5};
    tr_ctx *ctx = tu_ctx(2, 1);
    int fdt, lvl, w, th, kind, x16, noadd;
    size_t i;
    (void)state;
    for (fdt = TR_FWD_BFLOAT16; fdt <= TR_FWD_FLOAT16; fdt++)
        for (w = 0; w < 3; w++)
            for (kind = TR__NORM_ROWS_FWD; kind <= TR__NORM_COLS_BWD; kind++) {
                int byrow = kind == TR__NORM_ROWS_FWD || kind == TR__NORM_ROWS_BWD, fwd = kind == TR__NORM_ROWS_FWD || kind == TR__NORM_COLS_FWD;
                size_t D = (size_t)widths[w], S = 13, R = byrow ? 70 : 3, n = R * (byrow ? 1 : S) * D, nst = byrow ? R : R * D;
                float *a = (float *)malloc(n * sizeof(float)), *b = (float *)malloc(n * sizeof(float)), *ref = (float *)malloc(n * sizeof(float)),
                      *got = (float *)malloc(n * sizeof(float)), *rs = (float *)malloc(nst * sizeof(float)), *rs2 = (float *)malloc(nst * sizeof(float));
                uint16_t *a16 = (uint16_t *)malloc(n * sizeof(uint16_t)), *b16 = (uint16_t *)malloc(n * sizeof(uint16_t)), *o16 = (uint16_t *)malloc(n * sizeof(uint16_t)),
                         *r16 = (uint16_t *)malloc(n * sizeof(uint16_t));
                tu_fill(a, n, 21 + (uint64_t)w, 2.0f);
                tu_fill(b, n, 22 + (uint64_t)w, 1.0f);
                tu_fill(rs, nst, 23 + (uint64_t)w, 1.0f);
                tr__round_ref(fdt, a, n), tr__round_ref(fdt, b, n);
                tr__half_ref(fdt, 0, a, a16, n), tr__half_ref(fdt, 0, b, b16, n);
                for (lvl = 0; lvl < 4; lvl++) {
                    if (tr_ctx_set_simd(ctx, sets[lvl]) != TR_OK) continue;
                    for (th = 1; th <= 2; th++)
                        for (x16 = 1; x16 < 8; x16++)
                            for (noadd = 0; noadd <= fwd; noadd++) {
                                tr__buf in2 = noadd ? tr__f32(NULL) : (x16 & T16_B) ? tr__buf_of(b16, fdt) : tr__f32(b);
                                assert_int_equal(tr_ctx_set_num_threads(ctx, th), TR_OK);
                                if (fwd) memset(rs, 0, nst * sizeof(float)), memset(rs2, 0xff, nst * sizeof(float));
                                assert_int_equal(norm_op(ctx, fdt, kind, (long)R, (int)S, (int)D, tr__f32(a), tr__f32(noadd ? NULL : b), tr__f32(ref), rs, 1e-5f), TR_OK);
                                assert_int_equal(norm_op(ctx, fdt, kind, (long)R, (int)S, (int)D, (x16 & T16_A) ? tr__buf_of(a16, fdt) : tr__f32(a), in2,
                                                         (x16 & T16_C) ? tr__buf_of(o16, fdt) : tr__f32(got), fwd ? rs2 : rs, 1e-5f),
                                                 TR_OK);
                                if (x16 & T16_C) {
                                    tr__half_ref(fdt, 0, ref, r16, n);
                                    for (i = 0; i < n; i++)
                                        if (o16[i] != r16[i])
                                            fail_msg("%s fdt %d kind %d x16 %d D %zu add %d, %d thread(s): out[%zu] = %04x, the fp32 op's %04x", sets[lvl], fdt, kind,
                                                     x16, D, !noadd, th, i, o16[i], r16[i]);
                                } else
                                    for (i = 0; i < n; i++)
                                        if (memcmp(&got[i], &ref[i], sizeof(float)) != 0)
                                            fail_msg("%s fdt %d kind %d x16 %d D %zu add %d, %d thread(s): out[%zu] = %.9g, the fp32 op's %.9g", sets[lvl], fdt, kind,
                                                     x16, D, !noadd, th, i, (double)got[i], (double)ref[i]);
                                if (fwd) assert_memory_equal(rs, rs2, nst * sizeof(float));
                            }
                }
                free(a), free(b), free(ref), free(got), free(rs), free(rs2), free(a16), free(b16), free(o16), free(r16);
            }
    assert_int_equal(norm_op(ctx, 0, TR__NORM_ROWS_BWD, 1, 1, 4, tr__f32(NULL), tr__buf_of(NULL, TR__BF16), tr__f32(NULL), NULL, 0), TR_ERR_GENERIC);
    tr_ctx_destroy(ctx);
}

/* The attention (tr__op_attention) on operands of these types: bwd 0 the forward (qkv, o, lse), 1 the backward. */
static tr_status att_op(tr_ctx *ctx, int fdt, int bwd, int B, int S, int H, int hd, tr__buf qkv, tr__buf o, float *lse, tr__buf do_, float *dqkv, float *scratch) {
    tr__att_desc d;
    memset(&d, 0, sizeof d);
    d.fdt = fdt, d.bwd = bwd, d.B = B, d.S = S, d.H = H, d.hd = hd, d.qkv = qkv, d.o = o, d.do_ = do_, d.lse = lse, d.dqkv = dqkv, d.scratch = scratch;
    return tr__op_attention(ctx, &d);
}

/* The attention and RoPE with 16-bit operands (tr__op_attention, tr__op_rope: a 16-bit workspace's qkv, o and d o):
   the bits of the fp32 ops on the values they hold (o stored as the 16 bits of the fp32 op's, lse and dqkv fp32), every
   combination of 16-bit operands, at every level and precision, on 1 and 2 threads, odd sizes. */
static void test_attention16(void **state) {
    static const char *const sets[4] = {"scalar", "avx2", "avx512", "neon"};
    static const int shapes[][4] = {{2, 37, 3, 24}, {1, 18, 2, 6}, {3, 9, 2, 12}};
    tr_ctx *ctx = tu_ctx(2, 1);
    int fdt, lvl, th, x16, inv;
    size_t k, i;
    (void)state;
    for (fdt = TR_FWD_BFLOAT16; fdt <= TR_FWD_FLOAT16; fdt++)
        for (k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
            int B = shapes[k][0], S = shapes[k][1], H = shapes[k][2], hd = shapes[k][3], D = H * hd;
            size_t nq = (size_t)B * S * 3 * D, no = (size_t)B * S * D, nl = (size_t)B * H * S;
            float *qkv = (float *)malloc(nq * 4), *o = (float *)malloc(no * 4), *o2 = (float *)malloc(no * 4), *l = (float *)malloc(nl * 4),
                  *l2 = (float *)malloc(nl * 4), *dout = (float *)malloc(no * 4), *d = (float *)malloc(nq * 4), *d2 = (float *)malloc(nq * 4),
                  *scr = (float *)malloc(2 * tr__attention_scratch_floats(S, hd) * 4), *cs = (float *)malloc((size_t)S * hd * 4),
                  *sn = (float *)malloc((size_t)S * hd * 4), *r = (float *)malloc(nq * 4);
            uint16_t *q16 = (uint16_t *)malloc(nq * 2), *o16 = (uint16_t *)malloc(no * 2), *d16 = (uint16_t *)malloc(no * 2), *r16 = (uint16_t *)malloc(nq * 2);
            tu_fill(qkv, nq, 30 + k, 1.5f), tu_fill(dout, no, 40 + k, 1.0f), tu_fill(cs, (size_t)S * hd, 50 + k, 1.0f), tu_fill(sn, (size_t)S * hd, 60 + k, 1.0f);
            tr__round_ref(fdt, qkv, nq), tr__round_ref(fdt, dout, no);
            tr__half_ref(fdt, 0, qkv, q16, nq), tr__half_ref(fdt, 0, dout, d16, no);
            for (lvl = 0; lvl < 4; lvl++) {
                if (tr_ctx_set_simd(ctx, sets[lvl]) != TR_OK) continue;
                for (th = 1; th <= 2; th++) {
                    assert_int_equal(tr_ctx_set_num_threads(ctx, th), TR_OK);
                    assert_int_equal(att_op(ctx, fdt, 0, B, S, H, hd, tr__f32(qkv), tr__f32(o), l, tr__f32(NULL), NULL, scr), TR_OK);
                    tr__half_ref(fdt, 0, o, o16, no);
                    assert_int_equal(att_op(ctx, fdt, 1, B, S, H, hd, tr__f32(qkv), tr__f32(o), l, tr__f32(dout), d, scr), TR_OK);
                    for (x16 = 1; x16 < 8; x16++) {
                        tr__buf qa = (x16 & T16_A) ? tr__buf_of(q16, fdt) : tr__f32(qkv), da = (x16 & T16_C) ? tr__buf_of(d16, fdt) : tr__f32(dout);
                        if (x16 < 4) { /* the forward: o stored in 16 bits (B) or fp32 */
                            uint16_t *w16 = (uint16_t *)d2; /* (no 16-bit values fit) */
                            memset(l2, 0xff, nl * 4);
                            assert_int_equal(att_op(ctx, fdt, 0, B, S, H, hd, qa, (x16 & T16_B) ? tr__buf_of(w16, fdt) : tr__f32(o2), l2, tr__f32(NULL), NULL, scr), TR_OK);
                            if (x16 & T16_B) assert_memory_equal(w16, o16, no * 2);
                            else assert_memory_equal(o2, o, no * 4);
                            assert_memory_equal(l2, l, nl * 4);
                        }
                        memset(d2, 0xff, nq * 4);
                        assert_int_equal(att_op(ctx, fdt, 1, B, S, H, hd, qa, (x16 & T16_B) ? tr__buf_of(o16, fdt) : tr__f32(o), l, da, d2, scr), TR_OK);
                        for (i = 0; i < nq; i++)
                            if (memcmp(&d2[i], &d[i], 4) != 0)
                                fail_msg("%s fdt %d shape %zu x16 %d, %d thread(s): dqkv[%zu] = %.9g, the fp32 op's %.9g", sets[lvl], fdt, k, x16, th, i, (double)d2[i],
                                         (double)d[i]);
                    }
                    for (inv = 0; inv < 2; inv++) { /* RoPE */
                        memcpy(r, qkv, nq * 4), memcpy(r16, q16, nq * 2);
                        assert_int_equal(tr__op_rope(ctx, fdt, (long)B * S, S, H, hd, tr__f32(r), cs, sn, inv), TR_OK);
                        assert_int_equal(tr__op_rope(ctx, fdt, (long)B * S, S, H, hd, tr__buf_of(r16, fdt), cs, sn, inv), TR_OK);
                        tr__half_ref(fdt, 0, r, (uint16_t *)d2, nq); /* (nq 16-bit values fit d2) */
                        assert_memory_equal(r16, d2, nq * 2);
                    }
                }
            }
            free(qkv), free(o), free(o2), free(l), free(l2), free(dout), free(d), free(d2), free(scr), free(cs), free(sn), free(r), free(q16), free(o16), free(d16), free(r16);
        }
    assert_int_equal(att_op(ctx, 0, 0, 1, 1, 1, 1, tr__buf_of(NULL, TR__BF16), tr__f32(NULL), NULL, tr__f32(NULL), NULL, NULL), TR_ERR_GENERIC);
    assert_int_equal(tr__op_rope(ctx, 0, 1, 1, 1, 2, tr__buf_of(NULL, TR__BF16), NULL, NULL, 0), TR_ERR_GENERIC);
    tr_ctx_destroy(ctx);
}

/* The norms in bfloat16 / float16 round a row (or a task's columns) while it is in cache: the residual sum first, then
   what they write (and the sum alone, tr__op_add, a block at a time). The same bits as the passes they replace (the sum rounded, the fp32 norm, its output rounded), at
   every set; rows and columns of no multiple of a vector or a task. */
static void test_norms_reduced(void **state) {
    static const char *const sets[3] = {"avx2", "avx512", "neon"};
    enum { B = 3, S = 5, D = 70, N = B * S * D, NA = 5000 /* (more than two of tr__add_range's blocks) */ };
    float *x = (float *)malloc(N * sizeof(float)), *add = (float *)malloc(N * sizeof(float)), *dy = (float *)malloc(N * sizeof(float));
    float *ref = (float *)malloc(N * sizeof(float)), *got = (float *)malloc(N * sizeof(float)), *dref = (float *)malloc(N * sizeof(float)),
          *dgot = (float *)malloc(N * sizeof(float)), rs_ref[B * D], rs[B * D];
    tr_ctx *ctx = tu_ctx(2, 1);
    int fdt, lvl, cols;
    size_t i, nrs;
    (void)state;
    for (fdt = TR_FWD_BFLOAT16; fdt <= TR_FWD_FLOAT16; fdt++) {
        tu_fill(x, N, 21, 2.0f), tu_fill(add, N, 22, 2.0f), tu_fill(dy, N, 23, 1.0f);
        tr__round_ref(fdt, x, N), tr__round_ref(fdt, add, N), tr__round_ref(fdt, dy, N);
        for (lvl = 0; lvl < 3; lvl++) {
            if (tr_ctx_set_simd(ctx, sets[lvl]) != TR_OK) continue;
            { /* the residual sum alone (tr__op_add, rounded a block at a time) */
                float *a = (float *)malloc(2 * NA * sizeof(float)), *y = (float *)malloc(2 * NA * sizeof(float));
                tu_fill(a, 2 * NA, 24, 2.0f);
                tr__round_ref(fdt, a, 2 * NA);
                for (i = 0; i < NA; i++) y[NA + i] = a[i] + a[NA + i];
                tr__round(ctx, fdt, y + NA, NA);
                assert_int_equal(tr__op_add(ctx, fdt, NA, tr__f32(a), tr__f32(a + NA), tr__f32(y)), TR_OK);
                assert_memory_equal(y, y + NA, NA * sizeof(float));
                free(a), free(y);
            }
            for (cols = 0; cols < 2; cols++) {
                nrs = cols ? B * D : B * S;
                for (i = 0; i < N; i++) ref[i] = x[i] + add[i];
                tr__round(ctx, fdt, ref, N);
                if (cols) {
                    assert_int_equal(norm_op(ctx, 0, TR__NORM_COLS_FWD, B, S, D, tr__f32(ref), tr__f32(NULL), tr__f32(ref), rs_ref, 1e-5f), TR_OK);
                    assert_int_equal(norm_op(ctx, fdt, TR__NORM_COLS_FWD, B, S, D, tr__f32(x), tr__f32(add), tr__f32(got), rs, 1e-5f), TR_OK);
                } else {
                    assert_int_equal(norm_op(ctx, 0, TR__NORM_ROWS_FWD, B * S, S, D, tr__f32(ref), tr__f32(NULL), tr__f32(ref), rs_ref, 1e-5f), TR_OK);
                    assert_int_equal(norm_op(ctx, fdt, TR__NORM_ROWS_FWD, B * S, S, D, tr__f32(x), tr__f32(add), tr__f32(got), rs, 1e-5f), TR_OK);
                }
                tr__round(ctx, fdt, ref, N);
                for (i = 0; i < N; i++)
                    if (memcmp(&got[i], &ref[i], sizeof(float)) != 0)
                        fail_msg("%s fdt %d %s fwd: out[%zu] = %.9g, the passes' %.9g", sets[lvl], fdt, cols ? "cols" : "rows", i, got[i], ref[i]);
                assert_memory_equal(rs, rs_ref, nrs * sizeof(float));
                if (cols) {
                    assert_int_equal(norm_op(ctx, 0, TR__NORM_COLS_BWD, B, S, D, tr__f32(dy), tr__f32(ref), tr__f32(dref), rs_ref, 0), TR_OK);
                    assert_int_equal(norm_op(ctx, fdt, TR__NORM_COLS_BWD, B, S, D, tr__f32(dy), tr__f32(got), tr__f32(dgot), rs, 0), TR_OK);
                } else {
                    assert_int_equal(norm_op(ctx, 0, TR__NORM_ROWS_BWD, B * S, S, D, tr__f32(dy), tr__f32(ref), tr__f32(dref), rs_ref, 0), TR_OK);
                    assert_int_equal(norm_op(ctx, fdt, TR__NORM_ROWS_BWD, B * S, S, D, tr__f32(dy), tr__f32(got), tr__f32(dgot), rs, 0), TR_OK);
                }
                tr__round(ctx, fdt, dref, N);
                for (i = 0; i < N; i++)
                    if (memcmp(&dgot[i], &dref[i], sizeof(float)) != 0)
                        fail_msg("%s fdt %d %s bwd: dx[%zu] = %.9g, the passes' %.9g", sets[lvl], fdt, cols ? "cols" : "rows", i, dgot[i], dref[i]);
            }
        }
    }
    free(x), free(add), free(dy), free(ref), free(got), free(dref), free(dgot);
    tr_ctx_destroy(ctx);
}

/* --- RoPE: the backward is the transpose of the forward ------------------------------------- */
static void test_rope(void **state) {
    enum { B = 2, S = 5, H = 2, hd = 8, D = H * hd };
    float qkv[B * S * 3 * D], y[B * S * 3 * D], w[B * S * 3 * D], wt[B * S * 3 * D], c[S * hd], s[S * hd];
    int p, j;
    (void)state;
    for (p = 0; p < S; p++)
        for (j = 0; j < hd; j++) {
            double f = pow(10000.0, -2.0 * (j % (hd / 2)) / hd);
            c[p * hd + j] = (float)cos(p * f), s[p * hd + j] = (float)sin(p * f);
        }
    tu_fill(qkv, sizeof qkv / 4, 8, 1.0f);
    tu_fill(w, sizeof w / 4, 9, 1.0f);
    memcpy(y, qkv, sizeof y);
    tr__rope_ref(B * S, S, H, hd, y, c, s, 0, 1);
    memcpy(wt, w, sizeof w);
    tr__rope_ref(B * S, S, H, hd, wt, c, s, 1, 1);
    /* <R x, w> == <x, R^T w> */
    assert_true(fabs(tu_wsum(y, w, sizeof y / 4) - tu_wsum(qkv, wt, sizeof y / 4)) < 1e-4);
    /* R^T R = I, and v is untouched */
    tr__rope_ref(B * S, S, H, hd, y, c, s, 1, 1);
    tu_assert_close("rope inverse", y, qkv, sizeof y / 4, 1e-6, 1e-6);
    /* position 0 is the identity */
    assert_memory_equal(y, qkv, 3 * D * sizeof(float)) ;
}

/* --- attention ----------------------------------------------------------------------------- */
enum { AB = 2, AS = 6, AH = 2, AHD = 4, AD = AH * AHD };
static float at_w[AB * AS * AD];
static double at_loss(const float *qkv, void *u) {
    float o[AB * AS * AD], lse[AB * AH * AS], scr[2 * AS];
    (void)u;
    tr__attention_fwd_ref(AB, AS, AH, AHD, qkv, o, lse, scr, 1);
    return tu_wsum(o, at_w, AB * AS * AD);
}
static void test_attention(void **state) {
    float qkv[AB * AS * 3 * AD], o[AB * AS * AD], lse[AB * AH * AS], scr[4 * AS], dqkv[AB * AS * 3 * AD], fd[AB * AS * 3 * AD];
    tr__attention_bwd_args ba;
    int b, h, i, j, c;
    (void)state;
    tu_fill(qkv, sizeof qkv / 4, 10, 2.0f);
    tu_fill(at_w, sizeof at_w / 4, 11, 1.0f);
    tr__attention_fwd_ref(AB, AS, AH, AHD, qkv, o, lse, scr, 1);
    /* against a direct double-precision softmax(q k^T / sqrt(hd)) v */
    for (b = 0; b < AB; b++)
        for (h = 0; h < AH; h++)
            for (i = 0; i < AS; i++) {
                double sc[AS], mx = -1e300, sum = 0;
                for (j = 0; j < AS; j++) {
                    double d = 0;
                    for (c = 0; c < AHD; c++) d += (double)qkv[(b * AS + i) * 3 * AD + h * AHD + c] * qkv[(b * AS + j) * 3 * AD + AD + h * AHD + c];
                    sc[j] = d / sqrt((double)AHD);
                    if (sc[j] > mx) mx = sc[j];
                }
                for (j = 0; j < AS; j++) sum += exp(sc[j] - mx);
                for (c = 0; c < AHD; c++) {
                    double acc = 0;
                    for (j = 0; j < AS; j++) acc += exp(sc[j] - mx) / sum * qkv[(b * AS + j) * 3 * AD + 2 * AD + h * AHD + c];
                    assert_true(fabs(acc - o[(b * AS + i) * AD + h * AHD + c]) < 1e-5 + 1e-5 * fabs(acc));
                }
                assert_true(fabs(mx + log(sum) - lse[(b * AH + h) * AS + i]) < 1e-5);
            }
    ba.S = AS, ba.H = AH, ba.hd = AHD, ba.qkv = qkv, ba.o = o, ba.lse = lse, ba.do_ = at_w, ba.dqkv = dqkv, ba.scratch = scr;
    tr__attention_bwd_ref(AB, &ba, 2);
    tu_fd(at_loss, qkv, sizeof qkv / 4, NULL, fd);
    tu_assert_close("attention bwd vs FD", dqkv, fd, sizeof qkv / 4, FD_ATOL, FD_RTOL);
}

/* One shape (B, S, H, hd) of the attention in ctx's kernel set against the scalar twin. The tolerances
   hold for both widths: a polynomial exp (few ulp) and a different summation order (the softmax
   denominator over S lanes-then-horizontal, q.k over hd in a different order than tr__dot's):
   1e-5 relative forward; the backward sums S products of those, 1e-4. */
static void attention_simd_case(tr_ctx *ctx, const char *level, const int shape[4], unsigned k) {
    char what[64];
    int B = shape[0], S = shape[1], H = shape[2], hd = shape[3], D = H * hd;
    size_t nq = (size_t)B * S * 3 * D, no = (size_t)B * S * D, nl = (size_t)B * H * S;
    /* (qkv calloc'd: gcc 12 -O2 otherwise reports it "may be used uninitialized", not seeing tu_fill write it all) */
    float *qkv = (float *)calloc(nq, 4), *o1 = (float *)malloc(no * 4), *o2 = (float *)malloc(no * 4);
    float *l1 = (float *)malloc(nl * 4), *l2 = (float *)malloc(nl * 4), *dout = (float *)malloc(no * 4);
    float *d1 = (float *)malloc(nq * 4), *d2 = (float *)malloc(nq * 4);
    float *scr = (float *)malloc(2 * tr__attention_scratch_floats(S, hd) * 4);
    tr__attention_bwd_args ba;
    tu_fill(qkv, nq, 30 + k, 1.5f);
    tu_fill(dout, no, 40 + k, 1.0f);
    tr__attention_fwd_ref(B, S, H, hd, qkv, o1, l1, scr, 2);
    tr__attention_fwd(ctx, B, S, H, hd, qkv, o2, l2, scr);
    snprintf(what, sizeof what, "attention %s, shape %u: fwd, lse", level, k);
    tu_assert_close(what, o2, o1, no, 1e-6, 1e-5);
    tu_assert_close(what, l2, l1, nl, 1e-6, 1e-5);
    ba.S = S, ba.H = H, ba.hd = hd, ba.qkv = qkv, ba.o = o1, ba.lse = l1, ba.do_ = dout, ba.dqkv = d1, ba.scratch = scr;
    tr__attention_bwd_ref(B, &ba, 2);
    ba.dqkv = d2;
    tr__attention_bwd(ctx, B, &ba);
    snprintf(what, sizeof what, "attention %s, shape %u: bwd", level, k);
    tu_assert_close(what, d2, d1, nq, 1e-5, 1e-4);
    free(qkv), free(o1), free(o2), free(l1), free(l2), free(dout), free(d1), free(d2), free(scr);
}

/* Each SIMD attention this CPU has against the scalar one, forward and backward, odd sizes
   included: S and hd not multiples of 8 or 16 exercise the masked tails of both widths. */
static void test_attention_simd(void **state) {
    static const int shapes[][4] = {{2, 37, 3, 24}, {1, 97, 2, 64}, {3, 5, 1, 16}, {1, 18, 2, 6}, {2, 9, 2, 12}, {1, 3, 1, 5}};
    tr_ctx *ctx = tu_ctx(2, 1);
    size_t k;
    int lvl, ran = 0;
    (void)state;
    for (lvl = 0; lvl < 3; lvl++) {
        if (tr_ctx_set_simd(ctx, simd_levels[lvl]) != TR_OK) continue;
        ran++;
        for (k = 0; k < sizeof shapes / sizeof shapes[0]; k++) attention_simd_case(ctx, simd_levels[lvl], shapes[k], (unsigned)k);
    }
    tr_ctx_destroy(ctx);
    if (!ran) skip();
}

/* Each SIMD set's RoPE against the scalar twin: the same operations in the same order, so the
   same bits, forward and inverse, for half-widths that are and are not multiples of the lanes.
   300 rows x 4 heads x 64 is above the one-thread threshold (two threads run it). */
static void test_rope_simd(void **state) {
    static const int shapes[][3] = {{300, 4, 64}, {37, 3, 6}, {20, 2, 34}, {9, 1, 40}};
    tr_ctx *ctx = tu_ctx(2, 1);
    size_t k;
    int lvl, inv, ran = 0;
    (void)state;
    for (lvl = 0; lvl < 2; lvl++) {
        if (tr_ctx_set_simd(ctx, simd_levels[lvl]) != TR_OK) continue;
        ran++;
        for (k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
            int rows = shapes[k][0], H = shapes[k][1], hd = shapes[k][2], S = 7;
            size_t n = (size_t)rows * 3 * H * hd;
            float *x = (float *)malloc(n * 4), *y = (float *)malloc(n * 4), *c = (float *)malloc((size_t)S * hd * 4), *s = (float *)malloc((size_t)S * hd * 4);
            tu_fill(c, (size_t)S * hd, 50 + k, 1.0f);
            tu_fill(s, (size_t)S * hd, 60 + k, 1.0f);
            for (inv = 0; inv < 2; inv++) {
                tu_fill(x, n, 70 + k, 2.0f);
                memcpy(y, x, n * 4);
                tr__rope_ref(rows, S, H, hd, x, c, s, inv, 1);
                tr__rope(ctx, rows, S, H, hd, y, c, s, inv);
                assert_memory_equal(y, x, n * 4);
            }
            free(x), free(y), free(c), free(s);
        }
    }
    tr_ctx_destroy(ctx);
    if (!ran) skip();
}

#if TR__X86
TR__TARGET_AVX2 static void atan2_avx2(const float *y, const float *x, float *r, size_t n) {
    size_t i;
    for (i = 0; i < n; i += 8) _mm256_storeu_ps(r + i, tr__atan2256(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
}
TR__TARGET_AVX512 static void atan2_avx512(const float *y, const float *x, float *r, size_t n) {
    size_t i;
    for (i = 0; i < n; i += 16) _mm512_storeu_ps(r + i, tr__atan2512(_mm512_loadu_ps(y + i), _mm512_loadu_ps(x + i)));
}
#endif

/* The vector atan2 against atan2 in double: every pair of signed special magnitudes (zeros,
   a denormal, the reduction's breakpoints tan(pi/8) and 1, huge, infinities) and 2^16 random
   pairs over 1e-6..1e6. Within 3 ulp of the exact result (glibc's atan2f is within 1): the
   polynomial's 1.9e-7 relative error is ~2 ulp, the folds pi/2 - r and pi - r add half an ulp.
   (2.65 measured here.) Zeros keep their sign as atan2f's do, NaN gives NaN. */
static void test_atan2_simd(void **state) {
    static const float mags[] = {0.0f, 1e-40f, 1e-30f, 1e-7f, 0.3f, 0.41421354f, 0.41421360f, 0.5f, 0.9999f, 1.0f, 1.0001f, 2.4142137f, 3.0f, 1e7f, 1e30f, INFINITY};
    enum { NM = sizeof mags / sizeof mags[0], NS = 4 * NM * NM, NR = 1 << 16, N = NS + NR + 32 };
    float *y = (float *)malloc(N * 4), *x = (float *)malloc(N * 4), *r = (float *)malloc(N * 4), *u = (float *)malloc(2 * NR * 4);
    tr_ctx *ctx = tu_ctx(1, 1);
    size_t i, n = 0;
    int lvl, ran = 0;
    (void)state;
    for (i = 0; i < 4 * NM * NM; i++) {
        y[n] = (i & 1 ? -1.0f : 1.0f) * mags[(i / 4) % NM];
        x[n++] = (i & 2 ? -1.0f : 1.0f) * mags[(i / 4) / NM];
    }
    tu_fill(u, 2 * NR, 80, 1.0f);
    for (i = 0; i < NR; i++, n++) {
        y[n] = (float)copysign(pow(10.0, 6.0 * fabs(u[2 * i])), u[2 * i]) * (i % 3 ? 1.0f : 1e-6f);
        x[n] = (float)copysign(pow(10.0, 6.0 * fabs(u[2 * i + 1])), sin((double)i));
    }
    for (; n < N; n++) y[n] = n & 1 ? NAN : 1.0f, x[n] = n & 2 ? NAN : -2.0f;
    for (lvl = 0; lvl < 2; lvl++) {
        if (tr_ctx_set_simd(ctx, simd_levels[lvl]) != TR_OK) continue;
        ran++;
#if TR__X86
        if (lvl) atan2_avx512(y, x, r, N);
        else atan2_avx2(y, x, r, N);
#endif
        for (i = 0; i < N; i++) {
            double ref = atan2((double)y[i], (double)x[i]), a = fabs(ref), ulp = nextafterf((float)a, INFINITY) - (float)a, e;
            if (isnan(ref)) {
                assert_true(isnan(r[i]));
                continue;
            }
            e = fabs((double)r[i] - ref) / ulp;
            if (e > 3.0) fail_msg("atan2 %s (%.9g, %.9g): %.9g, want %.17g (%.2f ulp)", simd_levels[lvl], y[i], x[i], r[i], ref, e);
            if (ref == 0) assert_int_equal(!!signbit(r[i]), !!signbit(ref));
        }
    }
    tr_ctx_destroy(ctx);
    free(y), free(x), free(r), free(u);
    if (!ran) skip();
}

/* Each SIMD set's AdamATan2 and EMA against the scalar twins over 3 steps on 70001 parameters
   (masked tails, several 4096-long spans, two threads). The moments are bit-identical; p differs
   only through atan2: step * its error (3 ulp of a value <= pi/2: < 3.6e-7; atol step * 1e-6)
   plus one rounding of p (rtol 2^-23). The EMA is bit-identical. Both sets give the same bits (no reduction), and one
   thread the same as two. */
static void test_adam_ema_simd(void **state) {
    enum { N = 70001 };
    float *p0 = (float *)malloc(N * 4), *g = (float *)malloc(N * 4), *pr = (float *)malloc(N * 4), *mr = (float *)calloc(N, 4), *vr = (float *)calloc(N, 4);
    float *ps[2], *ms[2], *vs[2], *sr = (float *)malloc(N * 4), *ss = (float *)malloc(N * 4);
    float lr = 1e-2f, wd = 0.1f, b1 = 0.9f, b2 = 0.95f;
    tr_ctx *ctx = tu_ctx(2, 1), *one = tu_ctx(1, 1);
    int lvl, step, ran = 0;
    (void)state;
    tu_fill(p0, N, 90, 1.0f);
    for (lvl = 0; lvl < 2; lvl++) ps[lvl] = (float *)malloc(N * 4), ms[lvl] = (float *)calloc(N, 4), vs[lvl] = (float *)calloc(N, 4);
    for (lvl = 0; lvl < 2; lvl++) {
        float *p1 = (float *)malloc(N * 4), *m1 = (float *)calloc(N, 4), *v1 = (float *)calloc(N, 4);
        if (tr_ctx_set_simd(ctx, simd_levels[lvl]) != TR_OK || tr_ctx_set_simd(one, simd_levels[lvl]) != TR_OK) {
            free(p1), free(m1), free(v1);
            continue;
        }
        ran |= 1 << lvl;
        memcpy(pr, p0, N * 4), memset(mr, 0, N * 4), memset(vr, 0, N * 4);
        memcpy(ps[lvl], p0, N * 4), memcpy(p1, p0, N * 4);
        for (step = 1; step <= 3; step++) {
            float bc1 = 1.0f - powf(b1, (float)step), bc2 = 1.0f - powf(b2, (float)step);
            tr__adam_hp hp;
            hp.lr = lr, hp.wd = wd, hp.beta1 = b1, hp.beta2 = b2, hp.bc1 = bc1, hp.bc2 = bc2;
            tu_fill(g, N, 100 + step, step == 2 ? 1e-3f : 1.0f);
            g[0] = 0.0f, g[N - 1] = 0.0f; /* atan2(0, 0) = 0 */
            tr__adam_atan2_ref(N, pr, g, mr, vr, hp, 2);
            tr__adam_atan2(ctx, N, ps[lvl], g, ms[lvl], vs[lvl], hp);
            tr__adam_atan2(one, N, p1, g, m1, v1, hp);
            assert_memory_equal(ms[lvl], mr, N * 4);
            assert_memory_equal(vs[lvl], vr, N * 4);
            tu_assert_close(simd_levels[lvl], ps[lvl], pr, N, lr / bc1 * 1e-6, 1.2e-7);
            memcpy(pr, ps[lvl], N * 4); /* the next step from the same point: errors do not compound */
            assert_memory_equal(p1, ps[lvl], N * 4);
        }
        tu_fill(sr, N, 110, 1.0f);
        memcpy(ss, sr, N * 4);
        tr__ema_ref(N, sr, p0, 0.999f, 2);
        tr__ema(ctx, N, ss, p0, 0.999f);
        assert_memory_equal(ss, sr, N * 4);
        free(p1), free(m1), free(v1);
    }
    if (ran == 3) {
        assert_memory_equal(ps[0], ps[1], N * 4);
        assert_memory_equal(ms[0], ms[1], N * 4);
    }
    for (lvl = 0; lvl < 2; lvl++) free(ps[lvl]), free(ms[lvl]), free(vs[lvl]);
    free(p0), free(g), free(pr), free(mr), free(vr), free(sr), free(ss);
    tr_ctx_destroy(ctx), tr_ctx_destroy(one);
    if (!ran) skip();
}

/* --- losses -------------------------------------------------------------------------------- */
typedef struct { int V, label; tr_loss_type type; } xent_case;
static double xent_loss(const float *x, void *u) {
    xent_case *c = (xent_case *)u;
    return tr__xent_row(x, c->V, c->label, c->type, NULL, 0);
}
static void test_xent(void **state) {
    float x[11], g[11], fd[11];
    int type;
    (void)state;
    for (type = 0; type < 2; type++) {
        xent_case c;
        c.V = 11, c.label = 3, c.type = (tr_loss_type)type;
        tu_fill(x, 11, 12 + type, 3.0f);
        x[5] = 0.004f; /* near the stablemax kink */
        tr__xent_row(x, 11, 3, c.type, g, 1.0);
        tu_fd(xent_loss, x, 11, &c, fd);
        tu_assert_close(type ? "softmax CE grad vs FD" : "stablemax CE grad vs FD", g, fd, 11, FD_ATOL, FD_RTOL);
    }
    {   /* stablemax by hand: x = [0, 1, -1]: s = [1, 2, 0.5]; -log(2 / 3.5) */
        float y[3] = {0.0f, 1.0f, -1.0f};
        assert_true(fabs(tr__xent_row(y, 3, 1, TR_LOSS_STABLEMAX, NULL, 0) - (-log(2.0 / 3.5))) < 1e-12);
    }
    {
        double gq, l = tr__bce_logits(0.3, 1.0, &gq), lp = tr__bce_logits(0.3 + 1e-6, 1.0, NULL), lm = tr__bce_logits(0.3 - 1e-6, 1.0, NULL);
        assert_true(fabs(l - log1p(exp(-0.3))) < 1e-12);
        assert_true(fabs(gq - (lp - lm) / 2e-6) < 1e-6);
        assert_true(isfinite(tr__bce_logits(-1000.0, 1.0, NULL)) && isfinite(tr__bce_logits(1000.0, 0.0, NULL)));
    }
}

/* --- optimizers ---------------------------------------------------------------------------- */
static void test_adam_atan2(void **state) {
    enum { N = 19 };
    float p[N], g[N], m[N], v[N], p0[N];
    int i, step;
    double pd[N], md[N], vd[N];
    (void)state;
    tu_fill(p, N, 14, 1.0f);
    memset(m, 0, sizeof m), memset(v, 0, sizeof v);
    for (i = 0; i < N; i++) pd[i] = p[i], md[i] = vd[i] = 0;
    memcpy(p0, p, sizeof p);
    for (step = 1; step <= 3; step++) {
        double lr = 1e-2, wd = 0.1, b1 = 0.9, b2 = 0.95, bc1 = 1 - pow(b1, step), bc2 = 1 - pow(b2, step);
        tu_fill(g, N, 100 + step, 1.0f);
        g[0] = 0.0f; /* atan2(0, 0) = 0: no NaN without an epsilon */
        tr__adam_atan2_ref(N, p, g, m, v, (tr__adam_hp){(float)lr, (float)wd, (float)b1, (float)b2, (float)bc1, (float)bc2}, 2);
        for (i = 0; i < N; i++) {
            pd[i] *= 1 - lr * wd;
            md[i] += (1 - b1) * (g[i] - md[i]);
            vd[i] += (1 - b2) * ((double)g[i] * g[i] - vd[i]);
            pd[i] -= lr / bc1 * atan2(md[i], sqrt(vd[i]) / sqrt(bc2));
        }
    }
    for (i = 0; i < N; i++) assert_true(fabs(p[i] - pd[i]) < 1e-6);
    /* the update is invariant to the gradient scale */
    {
        float pa[2] = {1, 1}, pb[2] = {1, 1}, ga[2] = {1e-3f, -2e-3f}, gb[2] = {1e3f, -2e3f}, ma[2] = {0, 0}, va[2] = {0, 0}, mb[2] = {0, 0}, vb[2] = {0, 0};
        tr__adam_atan2_ref(2, pa, ga, ma, va, (tr__adam_hp){1e-2f, 0, 0.9f, 0.95f, 0.1f, 0.05f}, 1);
        tr__adam_atan2_ref(2, pb, gb, mb, vb, (tr__adam_hp){1e-2f, 0, 0.9f, 0.95f, 0.1f, 0.05f}, 1);
        assert_true(fabs(pa[0] - pb[0]) < 1e-6 && fabs(pa[1] - pb[1]) < 1e-6);
    }
}

static void test_signsgd_ema(void **state) {
    float table[4 * 3], before[4 * 3], prow[5 * 3], sum[3], sh[3] = {1, 2, 3}, p[3] = {2, 2, 2};
    int32_t ids[5] = {2, 0, 2, 2, 0};
    int32_t groups[3 * 5 + 1];
    int k;
    (void)state;
    tu_fill(table, 12, 15, 1.0f);
    memcpy(before, table, sizeof table);
    /* row 2 gets +1 +1 -3 = -1 (sign -1) in column 0; row 0: 0.5 - 0.5 = 0 (sign 0) */
    memset(prow, 0, sizeof prow);
    prow[0 * 3] = 1, prow[2 * 3] = 1, prow[3 * 3] = -3, prow[1 * 3] = 0.5f, prow[4 * 3] = -0.5f;
    prow[0 * 3 + 1] = 2;
    tr__signsgd_rows(table, 3, ids, prow, 5, groups, sum, 0.1f, 0.5f);
    assert_true(fabs(table[2 * 3 + 0] - (before[2 * 3 + 0] * 0.95f + 0.1f)) < 1e-6);
    assert_true(fabs(table[2 * 3 + 1] - (before[2 * 3 + 1] * 0.95f - 0.1f)) < 1e-6);
    assert_true(fabs(table[0] - before[0] * 0.95f) < 1e-6);
    for (k = 0; k < 3; k++) { /* untouched rows do not decay */
        assert_true(table[1 * 3 + k] == before[1 * 3 + k]);
        assert_true(table[3 * 3 + k] == before[3 * 3 + k]);
    }
    tr__ema_ref(3, sh, p, 0.9f, 1);
    assert_true(fabs(sh[0] - 1.1f) < 1e-6 && fabs(sh[2] - 2.9f) < 1e-6);
}

/* The elementwise kernels with twins (RoPE, the EMA, Adam-atan2) through their tr__op_ entry at
   every level against the scalar reference. RoPE and the EMA run the same operations in the same
   order (1e-7 absolute: only the compiler's contraction of the scalar code into fma could tell
   them apart); Adam-atan2's moments too (to the bit), its update goes through a vector atan2 of
   ~2e-7 absolute error against atan2f's, times the step (lr / bc1 = 0.1 here), which can flip the
   rounding of the new weight: atol 1e-7 + 2 ulp. n = 1003 and half = 7 exercise the tails. */
static void test_elementwise_simd(void **state) {
    enum { N = 1003, RB = 3, RS = 5, RH = 2, RHD = 14, RD = RH * RHD };
    static float p[N], g[N], m[N], v[N], p2[N], m2[N], v2[N], sh[N], sh2[N], q[RB * RS * 3 * RD], q2[RB * RS * 3 * RD];
    float c[RS * RHD], sn[RS * RHD];
    tr_ctx *ctx = tu_ctx(2, 1);
    int lvl, i, inv;
    (void)state;
    for (i = 0; i < RS * RHD; i++) c[i] = (float)cos(0.3 * i), sn[i] = (float)sin(0.3 * i);
    for (lvl = 0; lvl < 3; lvl++) {
        if (tr_ctx_set_simd(ctx, simd_levels[lvl]) != TR_OK) continue;
        for (inv = 0; inv < 2; inv++) {
            tu_fill(q, RB * RS * 3 * RD, 30 + inv, 1.0f);
            memcpy(q2, q, sizeof q);
            tr__rope_ref(RB * RS, RS, RH, RHD, q, c, sn, inv, 1);
            assert_int_equal(tr__op_rope(ctx, 0, RB * RS, RS, RH, RHD, tr__f32(q2), c, sn, inv), TR_OK);
            tu_assert_close(simd_levels[lvl], q2, q, RB * RS * 3 * RD, 1e-7, 0);
        }
        tu_fill(sh, N, 40, 1.0f), tu_fill(p, N, 41, 1.0f);
        memcpy(sh2, sh, sizeof sh);
        tr__ema_ref(N, sh, p, 0.999f, 1);
        assert_int_equal(tr__op_ema(ctx, N, sh2, p, 0.999f), TR_OK);
        tu_assert_close(simd_levels[lvl], sh2, sh, N, 1e-7, 0);
        /* moments that put |m| above and below sqrt(v), exact zeros (atan2(0, 0) = 0) and both signs */
        tu_fill(p, N, 42, 1.0f), tu_fill(g, N, 43, 2.0f), tu_fill(m, N, 44, 0.5f), tu_fill(v, N, 45, 0.5f);
        for (i = 0; i < N; i++) v[i] = v[i] * v[i] * (i % 3 ? 1.0f : 1e-4f);
        for (i = 0; i < N; i += 17) g[i] = m[i] = v[i] = 0.0f;
        memcpy(p2, p, sizeof p), memcpy(m2, m, sizeof m), memcpy(v2, v, sizeof v);
        tr__adam_atan2_ref(N, p, g, m, v, (tr__adam_hp){1e-2f, 0.1f, 0.9f, 0.95f, 0.1f, 0.0975f}, 1);
        assert_int_equal(tr__op_adam_atan2(ctx, N, p2, g, m2, v2, (tr__adam_hp){1e-2f, 0.1f, 0.9f, 0.95f, 0.1f, 0.0975f}), TR_OK);
        assert_memory_equal(m2, m, sizeof m);
        assert_memory_equal(v2, v, sizeof v);
        tu_assert_close(simd_levels[lvl], p2, p, N, 1e-7, 2.4e-7);
        for (i = 0; i < N; i += 17) assert_true(p2[i] == p[i]); /* the zero moments: only the decay */
    }
    tr_ctx_destroy(ctx);
}

static void test_lr_schedule(void **state) {
    tr_train_config tc = tr_train_config_default();
    (void)state;
    tc.lr_warmup_steps = 10, tc.total_steps = 110, tc.lr_min_ratio = 0.1;
    assert_true(fabs(tr_lr_schedule(&tc, 1.0, 1) - 0.1) < 1e-12); /* the first step is base / W */
    assert_true(fabs(tr_lr_schedule(&tc, 1.0, 10) - 1.0) < 1e-12);
    assert_true(fabs(tr_lr_schedule(&tc, 1.0, 60) - 0.55) < 1e-12);
    assert_true(fabs(tr_lr_schedule(&tc, 1.0, 110) - 0.1) < 1e-12);
    tc.lr_min_ratio = 1.0;
    assert_true(tr_lr_schedule(&tc, 2.0, 500) == 2.0); /* constant after warmup */
}

/* --- misc base ----------------------------------------------------------------------------- */
static void test_trunc_normal(void **state) {
    enum { N = 200000 };
    static float x[N];
    tr__rng r = tr__rng_make(42, 0);
    double s = 0, ss = 0;
    int i;
    (void)state;
    tr__trunc_normal(&r, x, N, 0.5);
    for (i = 0; i < N; i++) {
        assert_true(fabs(x[i]) <= 2 * 1.1368472343 * 0.5 + 1e-6);
        s += x[i], ss += (double)x[i] * x[i];
    }
    assert_true(fabs(s / N) < 0.01);
    assert_true(fabs(sqrt(ss / N) - 0.5) < 0.005); /* the post-truncation std equals std */
    for (i = 1; i < 20; i++) {
        double u = -0.99 + i * 0.099;
        assert_true(fabs(erf(tr__erfinv(u)) - u) < 1e-12);
    }
}

/* The kernel sets by architecture: "auto" is neon on aarch64, which runs no x86 set; an x86 CPU
   refuses neon. */
static void test_simd_sets(void **state) {
    tr_ctx *ctx = tu_ctx(1, 1);
    tr_cpu_info ci;
    const char *best;
    (void)state;
    assert_int_equal(tr_ctx_set_simd(ctx, "auto"), TR_OK);
    best = tr_ctx_simd_name(ctx);
    assert_int_equal(tr_cpu_info_get(ctx, &ci), TR_OK);
#if defined(__aarch64__)
    assert_true(ci.features[TR_CPU_ASIMD] && !ci.features[TR_CPU_AVX]); /* (the kernel's hwcaps, also under qemu) */
    assert_string_equal(ci.arch, "aarch64");
    assert_string_equal(tr_ctx_simd_name(ctx), "neon");
    assert_int_equal(tr_ctx_set_simd(ctx, "avx2"), TR_ERR_UNSUPPORTED);
    assert_int_equal(tr_ctx_set_simd(ctx, "avx512"), TR_ERR_UNSUPPORTED);
#else
    assert_false(ci.features[TR_CPU_ASIMD] || ci.features[TR_CPU_ASIMDDP] || ci.features[TR_CPU_ARM_BF16] || ci.features[TR_CPU_I8MM]);
    assert_int_equal(tr_ctx_set_simd(ctx, "neon"), TR_ERR_UNSUPPORTED);
    assert_non_null(strstr(tr_ctx_last_error(ctx), "not supported by this CPU"));
    assert_string_not_equal(tr_ctx_simd_name(ctx), "neon");
#endif
    assert_string_equal(tr_ctx_simd_name(ctx), best); /* a refused set leaves the one in use */
    assert_int_equal(tr_ctx_set_simd(ctx, "neon2"), TR_ERR_INVALID_ARG);
    assert_non_null(strstr(tr_ctx_last_error(ctx), "neon"));
    assert_int_equal(tr_ctx_set_simd(ctx, "scalar"), TR_OK);
    assert_string_equal(tr_ctx_simd_name(ctx), "scalar");
    tr_ctx_destroy(ctx);
}

static void test_halfs(void **state) {
    float vals[] = {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 1e-8f, 6.1e-5f, 3.14159f, 1e30f};
    size_t i;
    (void)state;
    for (i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        float b = tr__bf16_to_f32(tr__f32_to_bf16(vals[i])), h = tr__f16_to_f32(tr__f32_to_f16(vals[i]));
        assert_true(fabs(b - vals[i]) <= fabs(vals[i]) * (1.0 / 256));
        if (fabs(vals[i]) <= 65504.0f) assert_true(fabs(h - vals[i]) <= fabs(vals[i]) * (1.0 / 2048) + 6e-8);
        else assert_true(isinf(h));
    }
    assert_true(tr__f32_to_bf16(1.00390625f) == 0x3f80); /* ties go to even */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rms_rows),   cmocka_unit_test(test_rms_cols),    cmocka_unit_test(test_swiglu), cmocka_unit_test(test_swiglu_reduced), cmocka_unit_test(test_swiglu16), cmocka_unit_test(test_norm16), cmocka_unit_test(test_attention16), cmocka_unit_test(test_norms_reduced),
        cmocka_unit_test(test_rope),       cmocka_unit_test(test_attention), cmocka_unit_test(test_attention_simd), cmocka_unit_test(test_rope_simd), cmocka_unit_test(test_atan2_simd), cmocka_unit_test(test_adam_ema_simd),   cmocka_unit_test(test_xent),
        cmocka_unit_test(test_adam_atan2), cmocka_unit_test(test_signsgd_ema), cmocka_unit_test(test_lr_schedule),
        cmocka_unit_test(test_trunc_normal), cmocka_unit_test(test_halfs),
        cmocka_unit_test(test_simd_sets),   cmocka_unit_test(test_elementwise_simd),
    };
    return cmocka_run_group_tests_name("kernels", tests, NULL, NULL);
}
