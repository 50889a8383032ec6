/* OpenCL element/row kernels against their CPU twins, in the style of ggml's test-backend-ops: every
   op runs on the device and on the CPU on the same random inputs, and the two must agree both in normalised MSE
   (sum (dev - cpu)^2 / sum cpu^2) and elementwise (|dev - cpu| <= atol + rtol * |cpu|). Sizes are odd (1, 3, 17, 97,
   130 ...) so that every partial work-group and tail is exercised; every device buffer starts 3 floats into its arena
   so that the element offsets of the kernel argument convention are exercised too.

   Bounds. The kernels do the same float operations as the CPU in a different order (tree reductions) and may contract
   a*b+c into fma; OpenCL's exp/log/atan2/division are accurate to a few ulp (<= 4 ulp for the ones used here). So:
   - pure elementwise arithmetic (add, ema, adam, rope, refill, embed forward, the in-order gradient sums): rtol 1e-6,
     atol 1e-7 .. 1e-6 (1 ulp is 6e-8 relative; fma contraction changes at most the last bit of each step);
   - exp-based elementwise (swiglu): a few ulp of each factor -> rtol 4e-6, plus atol 1e-6 for the cancellation in
     1 + x (1 - sigmoid(x)) near x = -1.28;
   - norms: the sums are accumulated in double on fp64 devices, in float otherwise: a float tree sum of n positive
     terms errs by <= log2(n) * 6e-8 relative, ~1e-6 at n = 1000, hence rtol 1e-5; the backward's dy - y * mean
     cancels, so its error is absolute: atol 2e-6 on O(1) values;
   - reductions the CPU does in float in its own order (q head dot, token-gradient sums) differ by the CPU's own
     rounding: ~sqrt(n) * 6e-8 * sum |terms|, atol 1e-4 on sums of ~100 O(4) terms;
   - cross-entropy: double on fp64 devices as on the CPU; in float the loss is within ~1e-6 relative, hence rtol 2e-5.
   A wrong index, a missed row or a missing term makes O(1e-2 .. 1) errors, orders of magnitude above every bound.
   The normalised MSE bounds are (rtol)^2-sized: 1e-10 for float-exact ops, 1e-9 otherwise. */
#define TINYREC_IMPLEMENTATION
#include "test_util.h"

#if TINYREC_OPENCL

static tr_ctx *g_ctx;
static tr__cl *g_cl;

static tr__embed_shape emb_shape(int B, int S, int L, int Lp, int D, int Dp, int V) {
    tr__embed_shape e;
    e.B = B, e.S = S, e.L = L, e.Lp = Lp, e.D = D, e.Dp = Dp, e.V = V;
    return e;
}


/* A norm on the device (tr__cl_norm), its 16-bit operands given as a mask (x16, TR__X16_*: in1, in2, out). */
static tr_status cl_norm(int kind, int fdt, long rows, int S, int D, const void *in1, const void *in2, void *out, float *rstd, float eps, int x16) {
    tr__norm_desc d;
    memset(&d, 0, sizeof d);
    d.kind = kind, d.fdt = fdt, d.rows = rows, d.S = S, d.D = D, d.rstd = rstd, d.eps = eps;
    d.in1 = tr__buf_of(in1, (x16 & TR__X16_A) ? fdt : 0), d.in2 = tr__buf_of(in2, (x16 & TR__X16_B) ? fdt : 0), d.out = tr__buf_of(out, (x16 & TR__X16_C) ? fdt : 0);
    return tr__cl_norm(g_cl, &d);
}

static void dev_free_all(void);
static int g_no_cl;

/* The device, opened once for the whole suite (it belongs to g_ctx). */
static tr__cl *cl_get(void) {
    if (g_cl) dev_free_all(); /* what a failed test left behind */
    if (g_no_cl) tu_no_opencl("it did not open for the first test");
    if (!g_ctx) g_ctx = tu_ctx(2, 1);
    if (!g_cl) {
        g_no_cl = 1;
        g_cl = tu_cl_open(g_ctx); /* skips the test when there is no OpenCL device */
        g_no_cl = 0;
    }
    assert_non_null(g_cl);
    return g_cl;
}

static int group_teardown(void **state) {
    (void)state;
    if (g_cl) dev_free_all();
    if (g_ctx) tr_ctx_destroy(g_ctx); /* closes the device too */
    g_cl = NULL, g_ctx = NULL;
    return 0;
}

/* --- device buffers: each is its own arena, used from element g_skew on (3: offsets reach the kernels; 0: 16-byte
   aligned, so the elementwise kernels take their float4 path) ------------------------------------------------------ */
#define DEV_MAX 1024
static int g_skew = 3;
static void *dev_bases[DEV_MAX];
static int dev_n;

static void *dev_alloc(size_t n) {
    void *p = tr__cl_alloc(g_cl, (n + (size_t)g_skew + 1) * 4, 1);
    assert_non_null(p);
    assert_true(dev_n < DEV_MAX);
    dev_bases[dev_n++] = p;
    return (char *)p + g_skew * 4;
}
static float *dev_f(const float *host, size_t n) {
    float *d = (float *)dev_alloc(n);
    if (host && n) assert_int_equal(tr__cl_write(g_cl, d, host, n * 4), TR_OK);
    return d;
}
static int32_t *dev_i(const int32_t *host, size_t n) {
    int32_t *d = (int32_t *)dev_alloc(n);
    if (host && n) assert_int_equal(tr__cl_write(g_cl, d, host, n * 4), TR_OK);
    return d;
}
static float *down(const float *d, size_t n) { /* malloc'ed host copy; collected by dev_free_all */
    float *h = (float *)malloc((n ? n : 1) * 4);
    assert_non_null(h);
    if (n) assert_int_equal(tr__cl_read(g_cl, h, d, n * 4), TR_OK);
    assert_true(dev_n < DEV_MAX);
    dev_bases[dev_n++] = (void *)((uintptr_t)h | 1); /* tagged: host memory */
    return h;
}
static void dev_free_all(void) {
    int i;
    for (i = 0; i < dev_n; i++) {
        if ((uintptr_t)dev_bases[i] & 1) free((void *)((uintptr_t)dev_bases[i] & ~(uintptr_t)1));
        else tr__cl_free(g_cl, dev_bases[i]);
    }
    dev_n = 0;
}
static float *hbuf(size_t n) {
    float *h = (float *)calloc(n ? n : 1, 4);
    assert_non_null(h);
    assert_true(dev_n < DEV_MAX);
    dev_bases[dev_n++] = (void *)((uintptr_t)h | 1);
    return h;
}
static float *hrand(size_t n, uint64_t seed, float scale) {
    float *h = hbuf(n);
    tu_fill(h, n, seed, scale);
    return h;
}

/* Normalised MSE and the elementwise bound; with TINYREC_TEST_VERBOSE set, prints the worst errors. The MSE is
   normalised by the energy of mag (NULL: of ref): for results formed by cancellation (the norm backward's dy - y * mean)
   the rounding error scales with the terms, not with the result, so mag holds the size of the terms. */
static void check_mag(const char *what, const float *got, const float *ref, const float *mag, size_t n, double nmse_max, double atol, double rtol) {
    double num = 0, den = 0, worst = 0, nmse;
    size_t i;
    for (i = 0; i < n; i++) {
        double d = (double)got[i] - ref[i], m = mag ? mag[i] : ref[i];
        num += d * d, den += m * m;
        if (fabs(d) > worst) worst = fabs(d);
        if (got[i] != got[i] && ref[i] == ref[i]) fail_msg("%s: element %zu is NaN", what, i);
    }
    /* where the reference is itself at the rounding-noise level (e.g. the norm backward of a 1-wide row, whose exact
       value is 0), relative errors mean nothing and only the elementwise atol applies */
    nmse = den > (double)n * atol * atol ? num / den : 0;
    if (getenv("TINYREC_TEST_VERBOSE")) printf("  %-28s n %-7zu nmse %.3g  max|err| %.3g\n", what, n, nmse, worst);
    if (!(nmse <= nmse_max)) fail_msg("%s: normalised MSE %.3g > %.3g", what, nmse, nmse_max);
    tu_assert_close(what, got, ref, n, atol, rtol);
}
static void check(const char *what, const float *got, const float *ref, size_t n, double nmse_max, double atol, double rtol) {
    check_mag(what, got, ref, NULL, n, nmse_max, atol, rtol);
}
/* rstd * |dy|: the size of the terms of the norm backward, per element; rs_at(i) gives the rstd of element i */
static float *bwd_mag(const float *dy, const float *rs, size_t n, size_t (*rs_at)(size_t i, size_t a, size_t b), size_t a, size_t b) {
    float *m = hbuf(n);
    size_t i;
    for (i = 0; i < n; i++) m[i] = rs[rs_at(i, a, b)] * fabsf(dy[i]);
    return m;
}
static size_t rs_row(size_t i, size_t D, size_t unused) { return (void)unused, i / D; }
static size_t rs_col(size_t i, size_t S, size_t D) { return i / (S * D) * D + i % D; }

/* --- add ------------------------------------------------------------------------------------------------------------- */
static void test_add(void **state) {
    static const size_t ns[] = {1, 3, 97, 4099};
    size_t t, i;
    (void)state;
    cl_get();
    for (g_skew = 3; g_skew >= 0; g_skew -= 3)
    for (t = 0; t < sizeof ns / sizeof *ns; t++) {
        size_t n = ns[t];
        float *a = hrand(n, 1 + t, 2.0f), *b = hrand(n, 11 + t, 2.0f), *ref = hbuf(n);
        float *da = dev_f(a, n), *db = dev_f(b, n), *dy = dev_f(NULL, n);
        for (i = 0; i < n; i++) ref[i] = a[i] + b[i];
        assert_int_equal(tr__cl_add(g_cl, 0, 0, n, da, db, dy), TR_OK);
        check("add", down(dy, n), ref, n, 0, 0, 0); /* a single rounding: bit-exact */
        assert_int_equal(tr__cl_add(g_cl, 0, 0, n, da, db, da), TR_OK); /* y aliases a */
        check("add y=a", down(da, n), ref, n, 0, 0, 0);
        dev_free_all();
    }
    g_skew = 3;
}

/* --- the non-finite scan the trainer runs over the gradients ------------------------------------------------------ */
static void test_all_finite(void **state) {
    static const size_t sizes[] = {1, 1000, 200001}; /* 200001 > the 64k work-items: the grid-stride loop */
    size_t t;
    (void)state;
    cl_get();
    for (t = 0; t < sizeof sizes / sizeof *sizes; t++) {
        size_t n = sizes[t], where[3];
        float *x = hrand(n, 11 + t, 1e30f), *d;
        int ok = -1, k;
        where[0] = 0, where[1] = n / 2, where[2] = n - 1;
        d = dev_f(x, n);
        assert_int_equal(tr__cl_all_finite(g_cl, n, d, &ok), TR_OK);
        assert_int_equal(ok, 1);
        assert_int_equal(tr__all_finite(x, n), 1);
        for (k = 0; k < 3; k++) {
            float bad = k == 1 ? NAN : (k ? -INFINITY : INFINITY), keep = x[where[k]];
            x[where[k]] = bad;
            assert_int_equal(tr__cl_write(g_cl, d, x, n * sizeof(float)), TR_OK);
            assert_int_equal(tr__cl_all_finite(g_cl, n, d, &ok), TR_OK);
            assert_int_equal(ok, 0);
            assert_int_equal(tr__all_finite(x, n), 0);
            /* the flag is cleared for the next scan */
            x[where[k]] = keep;
            assert_int_equal(tr__cl_write(g_cl, d, x, n * sizeof(float)), TR_OK);
            assert_int_equal(tr__cl_all_finite(g_cl, n, d, &ok), TR_OK);
            assert_int_equal(ok, 1);
        }
        dev_free_all();
    }
}

/* --- RMSNorm over rows ---------------------------------------------------------------------------------------------- */
static void test_rms_rows(void **state) {
    static const int cases[][2] = {{1, 1}, {3, 17}, {97, 130}, {5, 512}, {4, 1000}};
    size_t t;
    int with_add, alias;
    (void)state;
    cl_get();
    for (t = 0; t < sizeof cases / sizeof *cases; t++)
        for (with_add = 0; with_add < 2; with_add++)
            for (alias = 0; alias < 2; alias++) {
                long R = cases[t][0];
                int D = cases[t][1];
                size_t n = (size_t)R * D;
                float *x = hrand(n, 3 + t, 1.5f), *ad = with_add ? hrand(n, 5 + t, 1.0f) : NULL, *dy = hrand(n, 7 + t, 1.0f);
                float *y = hbuf(n), *rs = hbuf((size_t)R), *dx = hbuf(n);
                float *dX = dev_f(x, n), *dA = ad ? dev_f(ad, n) : NULL, *dY = alias ? dX : dev_f(NULL, n), *dR = dev_f(NULL, (size_t)R);
                float *dDY = dev_f(dy, n), *dDX = dev_f(NULL, n);
                tr__rms_rows_fwd_ref(R, D, x, ad, y, rs, 1e-5f, 1);
                tr__rms_rows_bwd_ref(R, D, dy, y, rs, dx, 1);
                assert_int_equal(cl_norm(TR__NORM_ROWS_FWD, 0, R, 1, D, dX, dA, dY, dR, 1e-5f, 0), TR_OK);
                check("rms_rows fwd y", down(dY, n), y, n, 1e-10, 1e-6, 1e-5);
                check("rms_rows fwd rstd", down(dR, (size_t)R), rs, (size_t)R, 1e-10, 0, 1e-5);
                /* the backward from the CPU's y and rstd, so that it is tested on its own */
                {
                    float *dYc = dev_f(y, n), *dRc = dev_f(rs, (size_t)R);
                    assert_int_equal(cl_norm(TR__NORM_ROWS_BWD, 0, R, 1, D, dDY, dYc, dDX, dRc, 0, 0), TR_OK);
                    check_mag("rms_rows bwd dx", down(dDX, n), dx, bwd_mag(dy, rs, n, rs_row, (size_t)D, 0), n, 1e-10, 2e-6, 1e-5);
                }
                dev_free_all();
            }
}

/* --- RMSNorm over the sequence axis --------------------------------------------------------------------------------- */
static void test_rms_cols(void **state) {
    /* (S = 97: trm's Sudoku; S > 128: rows past the work-items' registers, written and read back) */
    static const int cases[][3] = {{1, 1, 1}, {2, 7, 70}, {3, 97, 130}, {1, 3, 257}, {2, 129, 33}, {1, 300, 40}};
    size_t t;
    int with_add, alias;
    (void)state;
    cl_get();
    for (t = 0; t < sizeof cases / sizeof *cases; t++)
        for (with_add = 0; with_add < 2; with_add++)
            for (alias = 0; alias < 2; alias++) {
                int B = cases[t][0], S = cases[t][1], D = cases[t][2];
                size_t n = (size_t)B * S * D, nr = (size_t)B * D;
                float *x = hrand(n, 13 + t, 1.5f), *ad = with_add ? hrand(n, 17 + t, 1.0f) : NULL, *dy = hrand(n, 19 + t, 1.0f);
                float *y = hbuf(n), *rs = hbuf(nr), *dx = hbuf(n);
                float *dX = dev_f(x, n), *dA = ad ? dev_f(ad, n) : NULL, *dY = alias ? dX : dev_f(NULL, n), *dR = dev_f(NULL, nr);
                float *dDY = dev_f(dy, n), *dYc = dev_f(NULL, n), *dRc = dev_f(NULL, nr), *dDX = dev_f(NULL, n);
                tr__rms_cols_fwd_ref(B, S, D, x, ad, y, rs, 1e-5f, 1);
                tr__rms_cols_bwd_ref(B, S, D, dy, y, rs, dx, 1);
                assert_int_equal(cl_norm(TR__NORM_COLS_FWD, 0, B, S, D, dX, dA, dY, dR, 1e-5f, 0), TR_OK);
                check("rms_cols fwd y", down(dY, n), y, n, 1e-10, 1e-6, 1e-5);
                check("rms_cols fwd rstd", down(dR, nr), rs, nr, 1e-10, 0, 1e-5);
                assert_int_equal(tr__cl_write(g_cl, dYc, y, n * 4), TR_OK);
                assert_int_equal(tr__cl_write(g_cl, dRc, rs, nr * 4), TR_OK);
                assert_int_equal(cl_norm(TR__NORM_COLS_BWD, 0, B, S, D, dDY, dYc, dDX, dRc, 0, 0), TR_OK);
                check_mag("rms_cols bwd dx", down(dDX, n), dx, bwd_mag(dy, rs, n, rs_col, (size_t)S, (size_t)D), n, 1e-10, 2e-6, 1e-5);
                dev_free_all();
            }
}

/* --- SwiGLU, with row strides wider than the rows: the gaps must stay untouched ------------------------------------- */
static void test_swiglu(void **state) {
    /* rows x width, strides of g and o; without the skew the last two take the float4 path (width and row starts
       multiples of 4) on every row, or on every other row (130: rows alternate between 16-byte aligned and not) */
    static const long cases[][4] = {{1, 1, 2, 1}, {3, 3, 7, 5}, {17, 130, 260, 130}, {5, 97, 201, 100}, {4, 128, 256, 128}, {6, 64, 130, 66}};
    size_t t;
    (void)state;
    cl_get();
    for (g_skew = 3; g_skew >= 0; g_skew -= 3)
    for (t = 0; t < sizeof cases / sizeof *cases; t++) {
        long R = cases[t][0], W = cases[t][1];
        size_t gs = (size_t)cases[t][2], os = (size_t)cases[t][3], ng = (size_t)R * gs, no = (size_t)R * os;
        float *g = hrand(ng, 23 + t, 3.0f), *da = hrand(no, 29 + t, 1.0f), *o = hrand(no, 31 + t, 9.0f), *dg = hrand(ng, 37 + t, 9.0f);
        float *dG = dev_f(g, ng), *dO = dev_f(o, no), *dDA = dev_f(da, no), *dDG = dev_f(dg, ng);
        tr__swiglu_fwd_ref(R, W, g, gs, o, os, 1);
        tr__swiglu_bwd_ref(R, W, g, gs, da, os, dg, 1);
        assert_int_equal(tr__cl_swiglu_fwd(g_cl, 0, R, W, dG, gs, dO, os), TR_OK);
        check("swiglu fwd", down(dO, no), o, no, 1e-10, 1e-6, 4e-6);
        assert_int_equal(tr__cl_swiglu_bwd(g_cl, 0, R, W, dG, gs, dDA, os, dDG), TR_OK);
        check("swiglu bwd", down(dDG, ng), dg, ng, 1e-10, 1e-6, 4e-6);
        dev_free_all();
    }
    g_skew = 3;
}

/* --- outputs rounded in the same pass (bfloat16 fdt 1, float16 fdt 2) -------------------------------------------------- */
static void same_bits(const char *what, int fdt, const float *got, const float *ref, size_t n) {
    size_t i;
    for (i = 0; i < n; i++)
        if (memcmp(&got[i], &ref[i], 4) != 0) fail_msg("%s (fdt %d): element %zu is %.9g, the fp32 kernel's rounded %.9g", what, fdt, i, (double)got[i], (double)ref[i]);
}
/* A device copy of d, rounded to fdt on the host. */
static float *down_rounded(int fdt, const float *d, size_t n) {
    float *h = down(d, n);
    tr__round_ref(fdt, h, n);
    return h;
}
/* Each op with fdt gives, bit for bit, the float32 kernel's result rounded after (tr__round_ref), on inputs of the
   precision and a residual sum rounded first: the kernels round in registers what the CPU rounds in a pass after. Odd sizes (the
   scalar tails of the 4-wide add) and a row stride wider than the row (SwiGLU). */
static void test_rounded_outputs(void **state) {
    enum { R = 7, D = 130, B = 2, S = 9, W = 33, GS = 70 };
    int fdt;
    size_t i;
    (void)state;
    cl_get();
    for (fdt = 1; fdt <= 2; fdt++) {
        size_t n = (size_t)R * D, nc = (size_t)B * S * D, ng = (size_t)R * GS;
        float *x = hrand(n, 61, 1.5f), *ad = hrand(n, 67, 1.0f), *dy = hrand(n, 71, 1.0f), *xs = hbuf(n);
        float *cx = hrand(nc, 73, 1.5f), *cad = hrand(nc, 79, 1.0f), *cdy = hrand(nc, 83, 1.0f), *cxs = hbuf(nc);
        float *g = hrand(ng, 89, 3.0f), *da = hrand(ng, 97, 1.0f);
        float *dY = dev_f(NULL, n), *dR = dev_f(NULL, R), *dY0 = dev_f(NULL, n), *dR0 = dev_f(NULL, R), *dDX = dev_f(NULL, n), *dDX0 = dev_f(NULL, n);
        float *cY = dev_f(NULL, nc), *cR = dev_f(NULL, (size_t)B * D), *cY0 = dev_f(NULL, nc), *cR0 = dev_f(NULL, (size_t)B * D), *cDX = dev_f(NULL, nc), *cDX0 = dev_f(NULL, nc);
        float *dG = dev_f(g, ng), *dDA = dev_f(da, ng), *dDG = dev_f(g, ng), *dDG0 = dev_f(g, ng);
        float *dX, *dA, *dDY, *cX, *cA, *cDY;
        tr__round_ref(fdt, ad, n), tr__round_ref(fdt, cad, nc); /* (a product's output) */
        dX = dev_f(x, n), dA = dev_f(ad, n), dDY = dev_f(dy, n), cX = dev_f(cx, nc), cA = dev_f(cad, nc), cDY = dev_f(cdy, nc);
        for (i = 0; i < n; i++) xs[i] = x[i] + ad[i];
        for (i = 0; i < nc; i++) cxs[i] = cx[i] + cad[i];
        tr__round_ref(fdt, xs, n), tr__round_ref(fdt, cxs, nc);
        /* add: R(a + b) */
        assert_int_equal(tr__cl_add(g_cl, fdt, 0, n - 1, dX, dA, dY), TR_OK);
        same_bits("add", fdt, down(dY, n - 1), xs, n - 1);
        /* the row norm and its backward */
        assert_int_equal(cl_norm(TR__NORM_ROWS_FWD, 0, R, 1, D, dev_f(xs, n), NULL, dY0, dR0, 1e-5f, 0), TR_OK);
        assert_int_equal(cl_norm(TR__NORM_ROWS_FWD, fdt, R, 1, D, dX, dA, dY, dR, 1e-5f, 0), TR_OK);
        same_bits("rms_rows fwd y", fdt, down(dY, n), down_rounded(fdt, dY0, n), n);
        same_bits("rms_rows fwd rstd", fdt, down(dR, R), down(dR0, R), R);
        assert_int_equal(cl_norm(TR__NORM_ROWS_BWD, 0, R, 1, D, dDY, dY, dDX0, dR, 0, 0), TR_OK);
        assert_int_equal(cl_norm(TR__NORM_ROWS_BWD, fdt, R, 1, D, dDY, dY, dDX, dR, 0, 0), TR_OK);
        same_bits("rms_rows bwd", fdt, down(dDX, n), down_rounded(fdt, dDX0, n), n);
        /* the column norm and its backward */
        assert_int_equal(cl_norm(TR__NORM_COLS_FWD, 0, B, S, D, dev_f(cxs, nc), NULL, cY0, cR0, 1e-5f, 0), TR_OK);
        assert_int_equal(cl_norm(TR__NORM_COLS_FWD, fdt, B, S, D, cX, cA, cY, cR, 1e-5f, 0), TR_OK);
        same_bits("rms_cols fwd y", fdt, down(cY, nc), down_rounded(fdt, cY0, nc), nc);
        same_bits("rms_cols fwd rstd", fdt, down(cR, (size_t)B * D), down(cR0, (size_t)B * D), (size_t)B * D);
        assert_int_equal(cl_norm(TR__NORM_COLS_BWD, 0, B, S, D, cDY, cY, cDX0, cR, 0, 0), TR_OK);
        assert_int_equal(cl_norm(TR__NORM_COLS_BWD, fdt, B, S, D, cDY, cY, cDX, cR, 0, 0), TR_OK);
        same_bits("rms_cols bwd", fdt, down(cDX, nc), down_rounded(fdt, cDX0, nc), nc);
        /* SwiGLU backward: both halves of each row rounded, the gap between rows (GS > 2 W) untouched */
        assert_int_equal(tr__cl_swiglu_bwd(g_cl, 0, R, W, dG, GS, dDA, GS, dDG0), TR_OK);
        assert_int_equal(tr__cl_swiglu_bwd(g_cl, fdt, R, W, dG, GS, dDA, GS, dDG), TR_OK);
        {
            float *got = down(dDG, ng), *ref = down(dDG0, ng);
            long r;
            for (r = 0; r < R; r++) tr__round_ref(fdt, ref + r * GS, 2 * W);
            same_bits("swiglu bwd", fdt, got, ref, ng);
        }
        { /* RoPE (hd odd: the last channel, already of the precision, is left alone) and attention on values of the precision */
            enum { AB = 2, AS = 11, AH = 2, HD = 7 };
            size_t nq = (size_t)AB * AS * 3 * AH * HD, no = (size_t)AB * AS * AH * HD, nl = (size_t)AB * AH * AS;
            float *q = hrand(nq, 101, 1.0f), *cs = hrand((size_t)AS * HD, 103, 1.0f), *sn = hrand((size_t)AS * HD, 107, 1.0f), *dout = hrand(no, 109, 1.0f);
            float *dQ, *dQ0, *dO, *dO0, *dL, *dL0, *dDO, *dD, *dD0;
            int inv;
            tr__round_ref(fdt, q, nq), tr__round_ref(fdt, dout, no);
            for (inv = 0; inv < 2; inv++) {
                dQ = dev_f(q, nq), dQ0 = dev_f(q, nq);
                assert_int_equal(tr__cl_rope(g_cl, 0, AB * AS, AS, AH, HD, tr__buf_of(dQ0, 0), dev_f(cs, (size_t)AS * HD), dev_f(sn, (size_t)AS * HD), inv), TR_OK);
                assert_int_equal(tr__cl_rope(g_cl, fdt, AB * AS, AS, AH, HD, tr__buf_of(dQ, 0), dev_f(cs, (size_t)AS * HD), dev_f(sn, (size_t)AS * HD), inv), TR_OK);
                same_bits(inv ? "rope inverse" : "rope", fdt, down(dQ, nq), down_rounded(fdt, dQ0, nq), nq);
            }
            dQ = dev_f(q, nq), dO = dev_f(NULL, no), dO0 = dev_f(NULL, no), dL = dev_f(NULL, nl), dL0 = dev_f(NULL, nl);
            assert_int_equal(cl_att_fwd(g_cl, 0, AB, AS, AH, HD, dQ, dO0, dL0, 0), TR_OK);
            assert_int_equal(cl_att_fwd(g_cl, fdt, AB, AS, AH, HD, dQ, dO, dL, 0), TR_OK);
            same_bits("attention fwd o", fdt, down(dO, no), down_rounded(fdt, dO0, no), no);
            same_bits("attention fwd lse", fdt, down(dL, nl), down(dL0, nl), nl);
            dDO = dev_f(dout, no), dD = dev_f(NULL, nq), dD0 = dev_f(NULL, nq);
            assert_int_equal(cl_att_bwd(g_cl, 0, AB, AS, AH, HD, dQ, dO, dL, dDO, dD0, 0), TR_OK);
            assert_int_equal(cl_att_bwd(g_cl, fdt, AB, AS, AH, HD, dQ, dO, dL, dDO, dD, 0), TR_OK);
            same_bits("attention bwd dqkv", fdt, down(dD, nq), down_rounded(fdt, dD0, nq), nq);
        }
        dev_free_all();
    }
}

/* --- RoPE, forward and inverse (hd odd leaves the last channel alone) ----------------------------------------------- */
static void test_rope(void **state) {
    static const int cases[][4] = {{2, 5, 2, 6}, {2, 17, 3, 16}, {1, 7, 2, 5}, {3, 97, 1, 2}};
    size_t t;
    int inv;
    (void)state;
    cl_get();
    for (t = 0; t < sizeof cases / sizeof *cases; t++)
        for (inv = 0; inv < 2; inv++) {
            int B = cases[t][0], S = cases[t][1], H = cases[t][2], hd = cases[t][3];
            long R = (long)B * S;
            size_t n = (size_t)R * 3 * H * hd, nc = (size_t)S * hd;
            float *q = hrand(n, 41 + t, 1.0f), *cs = hrand(nc, 43 + t, 1.0f), *sn = hrand(nc, 47 + t, 1.0f);
            float *dQ = dev_f(q, n), *dC = dev_f(cs, nc), *dS = dev_f(sn, nc);
            tr__rope_ref(R, S, H, hd, q, cs, sn, inv, 1);
            assert_int_equal(tr__cl_rope(g_cl, 0, R, S, H, hd, tr__buf_of(dQ, 0), dC, dS, inv), TR_OK);
            check(inv ? "rope inverse" : "rope", down(dQ, n), q, n, 1e-12, 1e-6, 1e-6);
            dev_free_all();
        }
}

/* --- AdamATan2 and EMA ---------------------------------------------------------------------------------------------- */
static void test_adam_ema(void **state) {
    static const size_t ns[] = {1, 1001};
    size_t t, i;
    (void)state;
    cl_get();
    for (t = 0; t < sizeof ns / sizeof *ns; t++) {
        size_t n = ns[t];
        float *p = hrand(n, 51 + t, 1.0f), *g = hrand(n, 53 + t, 0.1f), *m = hrand(n, 57 + t, 0.05f), *v = hrand(n, 59 + t, 0.01f);
        float *sh = hrand(n, 61 + t, 1.0f), bc1 = (float)(1.0 - pow(0.9, 3.0)), bc2 = (float)(1.0 - pow(0.95, 3.0));
        float *dP, *dG, *dM, *dV, *dSh;
        for (i = 0; i < n; i++) v[i] = fabsf(v[i]);
        v[0] = 0.0f, m[0] = 0.0f; /* atan2(0, 0) */
        dP = dev_f(p, n), dG = dev_f(g, n), dM = dev_f(m, n), dV = dev_f(v, n), dSh = dev_f(sh, n);
        tr__adam_atan2_ref(n, p, g, m, v, (tr__adam_hp){1e-3f, 0.1f, 0.9f, 0.95f, bc1, bc2}, 1);
        assert_int_equal(tr__cl_adam_atan2(g_cl, n, dP, dG, dM, dV, (tr__adam_hp){1e-3f, 0.1f, 0.9f, 0.95f, bc1, bc2}), TR_OK);
        check("adam p", down(dP, n), p, n, 1e-12, 1e-7, 1e-6);
        check("adam m", down(dM, n), m, n, 1e-12, 1e-9, 1e-6);
        check("adam v", down(dV, n), v, n, 1e-12, 1e-10, 1e-6);
        tr__ema_ref(n, sh, p, 0.999f, 1);
        assert_int_equal(tr__cl_ema(g_cl, n, dSh, dP, 0.999f), TR_OK);
        check("ema", down(dSh, n), sh, n, 1e-12, 1e-7, 1e-6);
        dev_free_all();
    }
}

/* --- embedding forward / backward (CPU twins: the loops of tr__embed_fwd / tr__embed_bwd) ---------------------------- */
typedef struct emb_case { int B, L, Lp, D, Dp, V, pos; } emb_case;
static const emb_case emb_cases[] = {
    {1, 1, 0, 1, 0, 2, 0},    /* no puzzle prefix */
    {3, 7, 2, 10, 13, 6, 1},  /* Dp < Lp * D: the prefix tail is zero */
    {2, 5, 1, 17, 17, 3, 0},  /* Dp = D */
    {8, 81, 2, 16, 24, 11, 1} /* B * L = 648 tokens: the chunked token-gradient path on small devices */
};

static void emb_inputs(const emb_case *c, int32_t *in, int32_t *pid, int npid, uint64_t seed) {
    uint64_t s = seed;
    int i;
    for (i = 0; i < c->B * c->L; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        in[i] = (int)((s >> 33) % (uint64_t)c->V);
    }
    for (i = 0; i < c->B; i++) pid[i] = (i * 7 + 1) % npid;
}

static void test_embed(void **state) {
    size_t t;
    (void)state;
    cl_get();
    for (t = 0; t < sizeof emb_cases / sizeof *emb_cases; t++) {
        const emb_case *c = &emb_cases[t];
        int B = c->B, L = c->L, Lp = c->Lp, D = c->D, Dp = c->Dp, V = c->V, S = L + Lp, npid = 5, b, s, j;
        size_t nx = (size_t)B * S * D;
        float scale = sqrtf((float)D), f = c->pos ? scale * 0.707106781f : scale;
        float *wt = hrand((size_t)V * D, 71 + t, 1.0f), *wp = c->pos ? hrand((size_t)S * D, 73 + t, 1.0f) : NULL;
        float *pe = Dp ? hrand((size_t)npid * Dp, 79 + t, 1.0f) : NULL, *x = hbuf(nx), *dx = hrand(nx, 83 + t, 1.0f);
        float *gt = hrand((size_t)V * D, 89 + t, 1.0f), *gp = c->pos ? hrand((size_t)S * D, 97 + t, 1.0f) : NULL;
        float *pr = hrand((size_t)B * (Dp ? Dp : 1), 101 + t, 5.0f);
        int32_t *in = (int32_t *)hbuf((size_t)B * L), *pid = (int32_t *)hbuf((size_t)B);
        float *dWt, *dWp, *dPe, *dX, *dDX, *dGt, *dGp, *dPr;
        int32_t *dIn, *dPid;
        emb_inputs(c, in, pid, npid, 7 + t);
        dWt = dev_f(wt, (size_t)V * D), dWp = wp ? dev_f(wp, (size_t)S * D) : NULL, dPe = pe ? dev_f(pe, (size_t)npid * Dp) : NULL;
        dX = dev_f(NULL, nx), dDX = dev_f(dx, nx), dGt = dev_f(gt, (size_t)V * D), dGp = gp ? dev_f(gp, (size_t)S * D) : NULL;
        dPr = Dp ? dev_f(pr, (size_t)B * Dp) : NULL, dIn = dev_i(in, (size_t)B * L), dPid = dev_i(pid, (size_t)B);
        for (b = 0; b < B; b++) /* tr__embed_fwd */
            for (s = 0; s < S; s++) {
                float *xr = x + ((size_t)b * S + s) * D;
                for (j = 0; j < D; j++) {
                    int k = s * D + j;
                    xr[j] = s < Lp ? (k < Dp ? pe[(size_t)pid[b] * Dp + k] : 0.0f) : wt[(size_t)in[(size_t)b * L + s - Lp] * D + j];
                    if (wp) xr[j] = 0.707106781f * (xr[j] + wp[(size_t)s * D + j]);
                    xr[j] *= scale;
                }
            }
        assert_int_equal(tr__cl_embed_fwd(g_cl, emb_shape(B, S, L, Lp, D, Dp, V), 0, dWt, dWp, dPe, dIn, dPid, tr__f32(dX)), TR_OK);
        check("embed fwd", down(dX, nx), x, nx, 1e-12, 1e-6, 1e-6);
        for (b = 0; b < B; b++) /* tr__embed_bwd */
            for (s = 0; s < S; s++) {
                const float *d = dx + ((size_t)b * S + s) * D;
                if (gp)
                    for (j = 0; j < D; j++) gp[(size_t)s * D + j] += f * d[j];
                if (s < Lp) {
                    for (j = 0; j < D; j++)
                        if (s * D + j < Dp) pr[(size_t)b * Dp + s * D + j] = f * d[j];
                } else
                    for (j = 0; j < D; j++) gt[(size_t)in[(size_t)b * L + s - Lp] * D + j] += f * d[j];
            }
        assert_int_equal(tr__cl_embed_bwd(g_cl, emb_shape(B, S, L, Lp, D, Dp, V), dDX, dIn, dGt, dGp, dPr), TR_OK);
        check("embed bwd g_tok", down(dGt, (size_t)V * D), gt, (size_t)V * D, 1e-10, 1e-4, 1e-5);
        if (gp) check("embed bwd g_pos", down(dGp, (size_t)S * D), gp, (size_t)S * D, 1e-12, 1e-6, 1e-6);
        if (Dp) check("embed bwd prow", down(dPr, (size_t)B * Dp), pr, (size_t)B * Dp, 0, 0, 0);
        dev_free_all();
    }
}

/* --- carry refill ----------------------------------------------------------------------------------------------------- */
static void test_refill(void **state) {
    int B = 5, S = 7, D = 13, b, i;
    size_t n = (size_t)B * S * D;
    int32_t halted[5] = {1, 0, 1, 0, 7};
    float *zh, *zl, *hi, *li, *dZh, *dZl;
    (void)state;
    cl_get();
    zh = hrand(n, 111, 1.0f), zl = hrand(n, 113, 1.0f), hi = hrand((size_t)D, 115, 1.0f), li = hrand((size_t)D, 117, 1.0f);
    dZh = dev_f(zh, n), dZl = dev_f(zl, n);
    for (b = 0; b < B; b++)
        if (halted[b])
            for (i = 0; i < S * D; i++) zh[(size_t)b * S * D + i] = hi[i % D], zl[(size_t)b * S * D + i] = li[i % D];
    assert_int_equal(tr__cl_refill(g_cl, B, S, D, dev_i(halted, (size_t)B), dev_f(hi, (size_t)D), dev_f(li, (size_t)D), dZh, dZl, 0), TR_OK);
    check("refill z_H", down(dZh, n), zh, n, 0, 0, 0);
    check("refill z_L", down(dZl, n), zl, n, 0, 0, 0);
    dev_free_all();
}

/* --- a 16-bit carry's kernels: the add with any operand in 16 bits, the refill and the embedding storing 16 bits ---------- */
/* n values of fdt: their 16-bit image on the device ((n + 1) / 2 floats), and back widened */
static float *dev_h16(int fdt, const float *x, size_t n) {
    uint16_t *h = (uint16_t *)hbuf((n + 1) / 2);
    float *r = hbuf(n);
    memcpy(r, x, n * 4);
    tr__round_ref(fdt, r, n);
    tr__half_ref(fdt, 0, r, h, n);
    return dev_f((const float *)h, (n + 1) / 2);
}
static float *down_h16(int fdt, const float *d, size_t n) {
    float *w = hbuf(n);
    tr__half_ref(fdt, 1, w, (uint16_t *)down(d, (n + 1) / 2), n);
    return w;
}
static void test_carry16(void **state) {
    static const size_t ns[] = {1, 97, 4099};
    int fdt, x16;
    size_t t, i;
    (void)state;
    cl_get();
    for (fdt = TR_FWD_BFLOAT16; fdt <= TR_FWD_FLOAT16; fdt++) {
        for (t = 0; t < sizeof ns / sizeof *ns; t++) {
            size_t n = ns[t];
            float *a = hrand(n, 3 + t, 3.0f), *b = hrand(n, 5 + t, 3.0f), *ref = hbuf(n);
            tr__round_ref(fdt, a, n), tr__round_ref(fdt, b, n); /* (a carry's values: rounded) */
            for (i = 0; i < n; i++) ref[i] = a[i] + b[i];
            tr__round_ref(fdt, ref, n);
            for (x16 = 1; x16 < 8; x16++) {
                float *da = x16 & TR__X16_A ? dev_h16(fdt, a, n) : dev_f(a, n), *db = x16 & TR__X16_B ? dev_h16(fdt, b, n) : dev_f(b, n);
                float *dy = dev_f(NULL, n);
                assert_int_equal(tr__cl_add(g_cl, fdt, x16, n, da, db, dy), TR_OK);
                same_bits("add16", fdt, x16 & TR__X16_C ? down_h16(fdt, dy, n) : down(dy, n), ref, n);
            }
            dev_free_all();
        }
        { /* the refill: halted rows take H_init / L_init rounded, stored as 16 bits; the others keep theirs */
            int B = 4, S = 5, D = 6, b;
            size_t n = (size_t)B * S * D;
            int32_t halted[4] = {1, 0, 0, 3};
            float *zh = hrand(n, 7, 1.0f), *zl = hrand(n, 9, 1.0f), *hi = hrand((size_t)D, 11, 1.0f), *li = hrand((size_t)D, 13, 1.0f);
            float *dZh = dev_h16(fdt, zh, n), *dZl = dev_h16(fdt, zl, n);
            tr__round_ref(fdt, zh, n), tr__round_ref(fdt, zl, n);
            for (b = 0; b < B; b++)
                for (i = 0; halted[b] && i < (size_t)S * D; i++) {
                    zh[(size_t)b * S * D + i] = hi[i % D], zl[(size_t)b * S * D + i] = li[i % D];
                    tr__round_ref(fdt, &zh[(size_t)b * S * D + i], 1), tr__round_ref(fdt, &zl[(size_t)b * S * D + i], 1);
                }
            assert_int_equal(tr__cl_refill(g_cl, B, S, D, dev_i(halted, (size_t)B), dev_f(hi, (size_t)D), dev_f(li, (size_t)D), dZh, dZl, fdt), TR_OK);
            same_bits("refill16 z_H", fdt, down_h16(fdt, dZh, n), zh, n);
            same_bits("refill16 z_L", fdt, down_h16(fdt, dZl, n), zl, n);
            dev_free_all();
        }
        { /* the embedding into 16 bits: the fp32 kernel's values */
            int B = 3, L = 5, Lp = 2, D = 6, Dp = 9, V = 7, S = L + Lp, k;
            size_t nx = (size_t)B * S * D;
            float *wt = hrand((size_t)V * D, 17, 1.0f), *wp = hrand((size_t)S * D, 19, 1.0f), *pe = hrand((size_t)4 * Dp, 23, 1.0f);
            int32_t in[15], pid[3] = {0, 3, 1};
            float *dX = dev_f(NULL, nx), *dX16 = dev_f(NULL, (nx + 1) / 2), *dWt, *dWp, *dPe;
            int32_t *dIn, *dPid;
            tr__round_ref(fdt, wt, (size_t)V * D), tr__round_ref(fdt, wp, (size_t)S * D);
            for (k = 0; k < B * L; k++) in[k] = (k * 5 + 1) % V;
            dWt = dev_f(wt, (size_t)V * D), dWp = dev_f(wp, (size_t)S * D), dPe = dev_f(pe, (size_t)4 * Dp);
            dIn = dev_i(in, (size_t)B * L), dPid = dev_i(pid, (size_t)B);
            assert_int_equal(tr__cl_embed_fwd(g_cl, emb_shape(B, S, L, Lp, D, Dp, V), fdt, dWt, dWp, dPe, dIn, dPid, tr__f32(dX)), TR_OK);
            assert_int_equal(tr__cl_embed_fwd(g_cl, emb_shape(B, S, L, Lp, D, Dp, V), fdt, dWt, dWp, dPe, dIn, dPid, tr__buf_of(dX16, fdt)), TR_OK);
            same_bits("embed16", fdt, down_h16(fdt, dX16, nx), down(dX, nx), nx);
            dev_free_all();
        }
    }
}

/* A tensor-core device's 16-bit record (wsp.r16): the row norms with any of their operands given as 16 bits, RoPE on
   16-bit qkv, and attention with qkv and o so give, bit for bit, what the fp32 kernels give on the fp32 values (stored
   as 16 bits where the output is):
   the values are of the precision already, so widening them is exact. Odd sizes, offsets into the buffers (odd in
   floats: the 16-bit images start 6 values in). */
static float *dev_maybe16(int fdt, int is16, const float *x, size_t n) { return is16 ? dev_h16(fdt, x, n) : dev_f(x, n); }
static float *down_maybe16(int fdt, int is16, const float *d, size_t n) { return is16 ? down_h16(fdt, d, n) : down(d, n); }
/* The norms with 16-bit operands (a tensor-core device's 16-bit record): the same bits as with fp32 ones, for every
   combination. Over the sequence axis at S = 97 (every row in the work-items' registers) and S = 150 (rows past
   them); by rows at D = 256 and 1024 (8 rows a work-group, tr_k_rms_rows_*16w; test_record16 has the other kernel). */
static void test_norms16(void **state) {
    static const int cases[][3] = {{2, 97, 40}, {1, 150, 33}, {9, 0, 256}, {3, 0, 1024}};
    size_t t;
    int fdt, x16;
    (void)state;
    cl_get();
    for (t = 0; t < sizeof cases / sizeof *cases; t++)
        for (fdt = TR_FWD_BFLOAT16; fdt <= TR_FWD_FLOAT16; fdt++) {
            const int rows = cases[t][1] == 0, B = cases[t][0], S = rows ? 1 : cases[t][1], D = cases[t][2];
            const int fwd = rows ? TR__NORM_ROWS_FWD : TR__NORM_COLS_FWD, bwd = rows ? TR__NORM_ROWS_BWD : TR__NORM_COLS_BWD;
            g_skew = rows ? 0 : 3; /* (the 8-row kernel takes aligned operands only) */
            const size_t n = (size_t)B * S * D, nr = rows ? (size_t)B : (size_t)B * D;
            float *x = hrand(n, 301 + t, 1.5f), *ad = hrand(n, 303 + t, 1.0f), *dy = hrand(n, 307 + t, 1.0f), *y0, *r0, *dx0;
            float *dY = dev_f(NULL, n), *dR = dev_f(NULL, nr), *dDX = dev_f(NULL, n);
            tr__round_ref(fdt, x, n), tr__round_ref(fdt, ad, n), tr__round_ref(fdt, dy, n);
            assert_int_equal(cl_norm(fwd, fdt, B, S, D, dev_f(x, n), dev_f(ad, n), dY, dR, 1e-5f, 0), TR_OK);
            y0 = down(dY, n), r0 = down(dR, nr);
            assert_int_equal(cl_norm(bwd, fdt, B, S, D, dev_f(dy, n), dY, dDX, dR, 0, 0), TR_OK);
            dx0 = down(dDX, n);
            for (x16 = 1; x16 < 8; x16++) {
                const int A = x16 & TR__X16_A, Bb = x16 & TR__X16_B, C = x16 & TR__X16_C;
                float *dY16 = dev_maybe16(fdt, C, x, n), *dR16 = dev_f(NULL, nr), *dDX16 = C ? dev_h16(fdt, x, n) : dev_f(NULL, n);
                assert_int_equal(cl_norm(fwd, fdt, B, S, D, dev_maybe16(fdt, A, x, n), dev_maybe16(fdt, Bb, ad, n), dY16, dR16, 1e-5f, x16), TR_OK);
                same_bits(rows ? "rms_rows fwd y, 16-bit operands" : "rms_cols fwd y, 16-bit operands", fdt, down_maybe16(fdt, C, dY16, n), y0, n);
                same_bits(rows ? "rms_rows fwd rstd, 16-bit operands" : "rms_cols fwd rstd, 16-bit operands", fdt, down(dR16, nr), r0, nr);
                assert_int_equal(cl_norm(bwd, fdt, B, S, D, dev_maybe16(fdt, A, dy, n), dev_maybe16(fdt, Bb, y0, n), dDX16, dR16, 0, x16), TR_OK);
                same_bits(rows ? "rms_rows bwd, 16-bit operands" : "rms_cols bwd, 16-bit operands", fdt, down_maybe16(fdt, C, dDX16, n), dx0, n);
            }
            dev_free_all();
        }
    g_skew = 3;
}
static void test_record16(void **state) {
    enum { R = 7, D = 130, AB = 2, AS = 11, AH = 2, HD = 7 };
    size_t n = (size_t)R * D, nq = (size_t)AB * AS * 3 * AH * HD, no = (size_t)AB * AS * AH * HD, nl = (size_t)AB * AH * AS;
    int fdt, x16, inv;
    (void)state;
    cl_get();
    for (fdt = TR_FWD_BFLOAT16; fdt <= TR_FWD_FLOAT16; fdt++) {
        float *x = hrand(n, 201, 1.5f), *ad = hrand(n, 203, 1.0f), *dy = hrand(n, 207, 1.0f);
        float *q = hrand(nq, 211, 1.0f), *cs = hrand((size_t)AS * HD, 213, 1.0f), *sn = hrand((size_t)AS * HD, 217, 1.0f), *dout = hrand(no, 219, 1.0f);
        float *y0, *r0, *dx0, *q0[2], *o0, *l0, *dq0, *dCs, *dSn;
        tr__round_ref(fdt, x, n), tr__round_ref(fdt, ad, n), tr__round_ref(fdt, dy, n), tr__round_ref(fdt, q, nq), tr__round_ref(fdt, dout, no);
        dCs = dev_f(cs, (size_t)AS * HD), dSn = dev_f(sn, (size_t)AS * HD);
        { /* the fp32 operands' results */
            float *dY = dev_f(NULL, n), *dR = dev_f(NULL, R), *dDX = dev_f(NULL, n), *dO = dev_f(NULL, no), *dL = dev_f(NULL, nl), *dD = dev_f(NULL, nq), *dQ;
            assert_int_equal(cl_norm(TR__NORM_ROWS_FWD, fdt, R, 1, D, dev_f(x, n), dev_f(ad, n), dY, dR, 1e-5f, 0), TR_OK);
            y0 = down(dY, n), r0 = down(dR, R);
            assert_int_equal(cl_norm(TR__NORM_ROWS_BWD, fdt, R, 1, D, dev_f(dy, n), dY, dDX, dR, 0, 0), TR_OK);
            dx0 = down(dDX, n);
            for (inv = 0; inv < 2; inv++) {
                dQ = dev_f(q, nq);
                assert_int_equal(tr__cl_rope(g_cl, fdt, AB * AS, AS, AH, HD, tr__buf_of(dQ, 0), dCs, dSn, inv), TR_OK);
                q0[inv] = down(dQ, nq);
            }
            dQ = dev_f(q, nq);
            assert_int_equal(cl_att_fwd(g_cl, fdt, AB, AS, AH, HD, dQ, dO, dL, 0), TR_OK);
            o0 = down(dO, no), l0 = down(dL, nl);
            assert_int_equal(cl_att_bwd(g_cl, fdt, AB, AS, AH, HD, dQ, dO, dL, dev_f(dout, no), dD, 0), TR_OK);
            dq0 = down(dD, nq);
        }
        for (x16 = 1; x16 < 8; x16++) {
            const int A = x16 & TR__X16_A, Bb = x16 & TR__X16_B, C = x16 & TR__X16_C;
            float *dY = dev_maybe16(fdt, C, x, n), *dR = dev_f(NULL, R), *dDX, *dO, *dL, *dD;
            /* the norm: x, add, out (its output's first values: x's, overwritten) */
            assert_int_equal(cl_norm(TR__NORM_ROWS_FWD, fdt, R, 1, D, dev_maybe16(fdt, A, x, n), dev_maybe16(fdt, Bb, ad, n), dY, dR, 1e-5f, x16), TR_OK);
            same_bits("rms_rows fwd y, 16-bit operands", fdt, down_maybe16(fdt, C, dY, n), y0, n);
            same_bits("rms_rows fwd rstd, 16-bit operands", fdt, down(dR, R), r0, R);
            /* its backward: dy, y, dx */
            dDX = C ? dev_h16(fdt, x, n) : dev_f(NULL, n);
            assert_int_equal(cl_norm(TR__NORM_ROWS_BWD, fdt, R, 1, D, dev_maybe16(fdt, A, dy, n), dev_maybe16(fdt, Bb, y0, n), dDX, dR, 0, x16), TR_OK);
            same_bits("rms_rows bwd, 16-bit operands", fdt, down_maybe16(fdt, C, dDX, n), dx0, n);
            if (x16 == TR__X16_A)
                for (inv = 0; inv < 2; inv++) { /* RoPE in place on 16-bit qkv */
                    float *dQ = dev_h16(fdt, q, nq);
                    assert_int_equal(tr__cl_rope(g_cl, fdt, AB * AS, AS, AH, HD, tr__buf_of(dQ, fdt), dCs, dSn, inv), TR_OK);
                    same_bits(inv ? "rope inverse, 16-bit qkv" : "rope, 16-bit qkv", fdt, down_h16(fdt, dQ, nq), q0[inv], nq);
                }
            /* attention: qkv and o together (the forward's output, the backward's input); do, dqkv and lse fp32; any
               other combination is refused */
            dO = Bb ? dev_h16(fdt, o0, no) : dev_f(NULL, no), dL = dev_f(NULL, nl), dD = dev_f(NULL, nq);
            if (x16 != (TR__X16_A | TR__X16_B)) { /* (the forward has no do: only its qkv and o bits count) */
                if ((x16 & 3) != 3)
                    assert_int_equal(cl_att_fwd(g_cl, fdt, AB, AS, AH, HD, dev_maybe16(fdt, A, q, nq), dO, dL, x16), (x16 & 3) ? TR_ERR_UNSUPPORTED : TR_OK);
                assert_int_equal(cl_att_bwd(g_cl, fdt, AB, AS, AH, HD, dev_maybe16(fdt, A, q, nq), dO, dL, dev_f(dout, no), dD, x16), TR_ERR_UNSUPPORTED);
                continue;
            }
            assert_int_equal(cl_att_fwd(g_cl, fdt, AB, AS, AH, HD, dev_h16(fdt, q, nq), dO, dL, x16), TR_OK);
            same_bits("attention fwd o, 16-bit operands", fdt, down_h16(fdt, dO, no), o0, no);
            same_bits("attention fwd lse, 16-bit operands", fdt, down(dL, nl), l0, nl);
            assert_int_equal(cl_att_bwd(g_cl, fdt, AB, AS, AH, HD, dev_h16(fdt, q, nq), dev_h16(fdt, o0, no), dev_f(l0, nl), dev_f(dout, no), dD, x16),
                             TR_OK);
            same_bits("attention bwd dqkv, 16-bit operands", fdt, down(dD, nq), dq0, nq);
        }
        { /* a head size of a multiple of 4 (the backward's row dots read 16-bit o four values at a time) */
            enum { H8 = 3, D8 = 8 };
            size_t mq = (size_t)AB * AS * 3 * H8 * D8, mo = (size_t)AB * AS * H8 * D8, ml = (size_t)AB * H8 * AS;
            float *q8 = hrand(mq, 223, 1.0f), *do8 = hrand(mo, 227, 1.0f), *dO = dev_f(NULL, mo), *dL = dev_f(NULL, ml), *dD = dev_f(NULL, mq);
            float *dO16 = dev_f(NULL, (mo + 1) / 2), *dL16 = dev_f(NULL, ml), *dD16 = dev_f(NULL, mq);
            tr__round_ref(fdt, q8, mq), tr__round_ref(fdt, do8, mo);
            assert_int_equal(cl_att_fwd(g_cl, fdt, AB, AS, H8, D8, dev_f(q8, mq), dO, dL, 0), TR_OK);
            assert_int_equal(cl_att_bwd(g_cl, fdt, AB, AS, H8, D8, dev_f(q8, mq), dO, dL, dev_f(do8, mo), dD, 0), TR_OK);
            assert_int_equal(cl_att_fwd(g_cl, fdt, AB, AS, H8, D8, dev_h16(fdt, q8, mq), dO16, dL16, TR__X16_A | TR__X16_B), TR_OK);
            same_bits("attention fwd o, 16-bit operands, hd 8", fdt, down_h16(fdt, dO16, mo), down(dO, mo), mo);
            assert_int_equal(cl_att_bwd(g_cl, fdt, AB, AS, H8, D8, dev_h16(fdt, q8, mq), dO16, dL16, dev_f(do8, mo), dD16, TR__X16_A | TR__X16_B), TR_OK);
            same_bits("attention bwd dqkv, 16-bit operands, hd 8", fdt, down(dD16, mq), down(dD, mq), mq);
        }
        dev_free_all();
    }
}

/* --- cross-entropy: the token loop of tr__loss with tr__xent_row ------------------------------------------------------ */
static void xent_case(int B, int L, int V, tr_loss_type type, int grad, float grad_div, uint64_t seed, int ties) {
    size_t nl = (size_t)B * L * V, t;
    float *x = hrand(nl, seed, 4.0f), *g = hbuf(nl), *rs = hbuf((size_t)B * 4), *dG, *dRs;
    int32_t *lab = (int32_t *)hbuf((size_t)B * L);
    uint64_t s = seed;
    int b, k;
    char what[96];
    for (t = 0; t < (size_t)B * L; t++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        lab[t] = (s >> 20) % 4 == 0 ? -100 : (int)((s >> 33) % (uint64_t)V);
        if (ties && V > 2) { /* two equal maxima: the first wins, as in the CPU's `>` loop */
            x[t * V + 1] = x[t * V + V - 1] = 9.0f;
            lab[t] = (s >> 40) % 2 ? 1 : V - 1;
        }
    }
    if (B > 1)
        for (t = 0; t < (size_t)L; t++) lab[(size_t)L + t] = -100; /* a sequence with no labels: div = 1 */
    for (t = 0; t < nl; t++) g[t] = 7.0f;                          /* dlogits is overwritten everywhere */
    dG = grad ? dev_f(g, nl) : NULL, dRs = dev_f(rs, (size_t)B * 4);
    for (b = 0; b < B; b++) {
        int count = 0, correct = 0;
        double loss = 0, div;
        for (t = 0; t < (size_t)L; t++) count += lab[(size_t)b * L + t] != -100;
        div = count > 0 ? count : 1;
        for (t = 0; t < (size_t)L; t++) {
            const float *xr = x + ((size_t)b * L + t) * V;
            float *gr = g + ((size_t)b * L + t) * V;
            int lb = lab[(size_t)b * L + t], am = 0;
            if (lb == -100) {
                memset(gr, 0, (size_t)V * 4);
                continue;
            }
            for (k = 1; k < V; k++)
                if (xr[k] > xr[am]) am = k;
            correct += am == lb;
            loss += tr__xent_row(xr, V, lb, type, gr, 1.0 / (div * grad_div));
        }
        rs[4 * b] = (float)(loss / div), rs[4 * b + 1] = (float)count, rs[4 * b + 2] = (float)correct, rs[4 * b + 3] = 0;
    }
    assert_int_equal(tr__cl_xent(g_cl, B, L, V, (int)type, dev_f(x, nl), dev_i(lab, (size_t)B * L), grad_div, dG, dRs), TR_OK);
    snprintf(what, sizeof what, "xent %s V=%d rowstat", type == TR_LOSS_STABLEMAX ? "stablemax" : "softmax", V);
    check(what, down(dRs, (size_t)B * 4), rs, (size_t)B * 4, 1e-10, 1e-6, 2e-5);
    if (grad) { /* gradients are ~1 / (V * count * grad_div): bounds relative to that scale */
        snprintf(what, sizeof what, "xent %s V=%d dlogits", type == TR_LOSS_STABLEMAX ? "stablemax" : "softmax", V);
        check(what, down(dG, nl), g, nl, 1e-9, 1e-9, 2e-5);
    }
    dev_free_all();
}

static void test_xent(void **state) {
    static const int Vs[] = {1, 6, 11, 130, 1000};
    size_t i;
    int type;
    (void)state;
    cl_get();
    for (type = 0; type < 2; type++) {
        for (i = 0; i < sizeof Vs / sizeof *Vs; i++) xent_case(3, 17, Vs[i], (tr_loss_type)type, 1, 2.5f, 131 + i, 0);
        xent_case(1, 1, 6, (tr_loss_type)type, 1, 1.0f, 7, 0);
        xent_case(4, 9, 11, (tr_loss_type)type, 0, 768.0f, 9, 0); /* no gradient (evaluation) */
        xent_case(2, 13, 11, (tr_loss_type)type, 1, 1.0f, 10, 1);
        xent_case(2, 13, 300, (tr_loss_type)type, 1, 1.0f, 11, 1);
    }
}

/* --- q head: q = b_q + z_H[b, 0, :] . W_q[j]; backward into dz row 0, g_Wq, g_bq (the loops of tr__heads_*) --------- */
static void test_qhead(void **state) {
    static const int cases[][3] = {{1, 1, 1}, {5, 3, 17}, {3, 2, 130}, {7, 1, 512}};
    size_t t;
    (void)state;
    cl_get();
    for (t = 0; t < sizeof cases / sizeof *cases; t++) {
        int B = cases[t][0], S = cases[t][1], D = cases[t][2], b, j, k;
        size_t nz = (size_t)B * S * D;
        float *zh = hrand(nz, 141 + t, 1.0f), *wq = hrand((size_t)2 * D, 143 + t, 0.5f), *bq = hrand(2, 145 + t, 1.0f), *q = hbuf((size_t)2 * B);
        float *dq = hrand((size_t)2 * B, 147 + t, 1.0f), *dz = hrand(nz, 149 + t, 1.0f), *gw = hrand((size_t)2 * D, 151 + t, 1.0f), *gb = hrand(2, 153, 1.0f);
        float *dDz, *dGw, *dGb, *dQ = dev_f(NULL, (size_t)2 * B), *dZh = dev_f(zh, nz), *dWq = dev_f(wq, (size_t)2 * D);
        for (b = 0; b < B; b++) dq[2 * b + 1] = b % 2 ? 0.0f : dq[2 * b + 1]; /* the model's dq[2b+1] is 0 */
        dq[0] = 0.0f;
        dDz = dev_f(dz, nz), dGw = dev_f(gw, (size_t)2 * D), dGb = dev_f(gb, 2);
        for (b = 0; b < B; b++)
            for (j = 0; j < 2; j++) q[2 * b + j] = bq[j] + tr__dot(zh + (size_t)b * S * D, wq + (size_t)j * D, D);
        assert_int_equal(tr__cl_qhead_fwd(g_cl, B, S, D, dZh, dWq, dev_f(bq, 2), dQ), TR_OK);
        check("qhead fwd", down(dQ, (size_t)2 * B), q, (size_t)2 * B, 1e-10, 1e-4, 1e-5);
        for (b = 0; b < B; b++)
            for (j = 0; j < 2; j++) {
                float gg = dq[2 * b + j];
                if (gg == 0.0f) continue;
                for (k = 0; k < D; k++) {
                    dz[(size_t)b * S * D + k] += gg * wq[(size_t)j * D + k];
                    gw[(size_t)j * D + k] += gg * zh[(size_t)b * S * D + k];
                }
                gb[j] += gg;
            }
        assert_int_equal(tr__cl_qhead_bwd(g_cl, B, S, D, dev_f(dq, (size_t)2 * B), dZh, dWq, dDz, dGw, dGb), TR_OK);
        check("qhead bwd dz", down(dDz, nz), dz, nz, 1e-12, 1e-6, 1e-6);
        check("qhead bwd g_Wq", down(dGw, (size_t)2 * D), gw, (size_t)2 * D, 1e-12, 1e-6, 1e-6);
        check("qhead bwd g_bq", down(dGb, 2), gb, 2, 1e-12, 1e-6, 1e-6);
        dev_free_all();
    }
}

/* --- sign-SGD: groups of equal ids in the stable order tr__signsgd_rows uses ----------------------------------------- */
static void test_signsgd(void **state) {
    enum { B = 11, Dp = 13, NPID = 6 };
    int32_t ids[B] = {3, 1, 3, 5, 0, 1, 3, 2, 5, 5, 4}, groups[3 * B + 1], groups_cpu[3 * B + 1];
    int j, ng;
    float *tab, *pr, sum[Dp], *dTab;
    (void)state;
    cl_get(); /* before any buffer: it frees what an earlier test left */
    tab = hrand((size_t)NPID * Dp, 161, 1.0f), pr = hrand((size_t)B * Dp, 163, 1.0f);
    for (j = 0; j < Dp; j++) pr[(size_t)2 * Dp + j] = -pr[j]; /* rows 0 and 2 share id 3 ... */
    pr[(size_t)6 * Dp + 0] = 0.0f;                              /* ... so that column 0 of id 3 sums to exactly 0 */
    dTab = dev_f(tab, (size_t)NPID * Dp);
    ng = tr__group_rows_by_id(ids, B, groups); /* the grouping the trainer uploads */
    assert_int_equal(ng, NPID);
    tr__signsgd_rows(tab, Dp, ids, pr, B, groups_cpu, sum, 0.01f, 0.1f);
    assert_int_equal(tr__cl_signsgd(g_cl, dTab, Dp, ng, dev_i(groups, (size_t)ng), dev_i(groups + B, (size_t)ng + 1), dev_i(groups + 2 * B + 1, B),
                                    dev_f(pr, (size_t)B * Dp), 0.01f, 0.1f),
                     TR_OK);
    check("signsgd", down(dTab, (size_t)NPID * Dp), tab, (size_t)NPID * Dp, 1e-12, 1e-7, 1e-6);
    dev_free_all();
}

/* --- the wrappers honour a small device work-group limit (reduction kernels included) -------------------------------- */
static void test_small_workgroups(void **state) {
    static const size_t caps[] = {1, 16, 64};
    tr__cl_info *info;
    size_t keep, c;
    (void)state;
    cl_get();
    info = (tr__cl_info *)tr__cl_get_info(g_cl); /* the wrappers read the limit from here */
    keep = info->max_wg;
    for (c = 0; c < sizeof caps / sizeof *caps; c++) {
        long R = 5;
        int D = 130;
        size_t n = (size_t)R * D;
        float *x = hrand(n, 171, 1.5f), *y = hbuf(n), *rs = hbuf((size_t)R), *dY, *dR;
        info->max_wg = caps[c];
        dY = dev_f(NULL, n), dR = dev_f(NULL, (size_t)R);
        tr__rms_rows_fwd_ref(R, D, x, NULL, y, rs, 1e-5f, 1);
        assert_int_equal(cl_norm(TR__NORM_ROWS_FWD, 0, R, 1, D, dev_f(x, n), NULL, dY, dR, 1e-5f, 0), TR_OK);
        check("rms_rows small wg", down(dY, n), y, n, 1e-10, 1e-6, 1e-5);
        dev_free_all();
        xent_case(3, 5, 130, TR_LOSS_SOFTMAX, 1, 1.0f, 173, 1);
        xent_case(3, 5, 6, TR_LOSS_STABLEMAX, 1, 1.0f, 174, 0);
    }
    info->max_wg = keep;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add),    cmocka_unit_test(test_rms_rows), cmocka_unit_test(test_rms_cols), cmocka_unit_test(test_swiglu), cmocka_unit_test(test_rounded_outputs),
        cmocka_unit_test(test_rope),   cmocka_unit_test(test_adam_ema), cmocka_unit_test(test_embed),    cmocka_unit_test(test_refill), cmocka_unit_test(test_carry16), cmocka_unit_test(test_record16), cmocka_unit_test(test_norms16),
        cmocka_unit_test(test_xent),   cmocka_unit_test(test_qhead),    cmocka_unit_test(test_signsgd),  cmocka_unit_test(test_small_workgroups), cmocka_unit_test(test_all_finite),
    };
    return cmocka_run_group_tests_name("opencl_ops", tests, NULL, group_teardown);
}
#else
TU_NO_OPENCL_MAIN("opencl_ops")
#endif
