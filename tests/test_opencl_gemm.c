/* OpenCL SGEMM and attention against their CPU twins, on the same random inputs.
   Bounds. Inputs are uniform in [-1, 1). A float dot product of length K summed in a different order (tiles,
   fma, split-K partials) differs from the sequential reference by a random walk of roundings: about
   sqrt(K) * 2^-24 * |partial sums| ~ K * 6e-8 / 3 in absolute terms (|C| ~ sqrt(K / 9)), i.e. a relative error
   ~ sqrt(K) * 6e-8 and a normalised MSE ~ K * 4e-15. The checks allow atol = 1e-6 * K + rtol 1e-5 per element
   (10-50x the expected worst case at these sizes) and NMSE <= 1e-10; one wrong or missing term changes an element
   by ~0.3, a wrong transpose or stride by O(|C|), so neither bound can hide a bug. Attention: o is a convex
   combination of v (|o| < 1), lse ~ log S, gradients O(1) over sums of S <= 97 terms: atol 2e-5, rtol 1e-4,
   NMSE <= 1e-10. */
#define TINYREC_IMPLEMENTATION
#include "test_util.h"

#if TINYREC_OPENCL

static tr_ctx *g_ctx;
static tr__cl *g_cl;


static tr__cl *dev(void) {
    if (!g_cl) g_cl = tu_cl_open(g_ctx);
    return g_cl;
}

static int setup(void **state) {
    (void)state;
    g_ctx = tu_ctx(2, 1);
    return 0;
}
static int teardown(void **state) {
    (void)state;
    g_cl = NULL; /* the context owns its device */
    tr_ctx_destroy(g_ctx);
    return 0;
}

/* A device copy of host data (n floats). */
static float *up(tr__cl *cl, const float *h, size_t n) {
    float *d = (float *)tr__cl_alloc(cl, (n ? n : 1) * sizeof(float), 1);
    assert_non_null(d);
    if (n) assert_int_equal(tr__cl_write(cl, d, h, n * sizeof(float)), TR_OK);
    return d;
}
static void down(tr__cl *cl, float *h, const float *d, size_t n) { assert_int_equal(tr__cl_read(cl, h, d, n * sizeof(float)), TR_OK); }
/* x's n values as the 16-bit ones of fdt that a 16-bit tape holds, uploaded 3 floats into their buffer (so that the
   kernels must honour an offset): the buffer, to free; the values start at + 3. */
static float *up_half(tr__cl *cl, int fdt, float *x, size_t n) {
    uint16_t *h = (uint16_t *)calloc(n + 8, 2);
    float *d;
    assert_non_null(h);
    tr__half_ref(fdt, 0, x, h + 6, n);
    d = up(cl, (float *)h, n / 2 + 4);
    free(h);
    return d;
}
/* n floats on the device, all NaN (a buffer that must never be written), and the check that none was. */
static float *up_nan(tr__cl *cl, size_t n) {
    float *d = (float *)tr__cl_alloc(cl, (n ? n : 1) * sizeof(float), 1);
    assert_non_null(d);
    assert_int_equal(tr__cl_fill(cl, d, 0x7fc07fc0u, n * sizeof(float)), TR_OK);
    return d;
}
static void assert_all_nan(tr__cl *cl, const float *d, size_t n) {
    float *h = (float *)malloc((n ? n : 1) * sizeof(float));
    size_t i;
    down(cl, h, d, n);
    for (i = 0; i < n; i++)
        if (!isnan(h[i])) fail_msg("a buffer that must stay unwritten has %g at %zu", (double)h[i], i);
    free(h);
}

/* sum (a-b)^2 / sum b^2 */
static double nmse(const float *got, const float *ref, size_t n) {
    double num = 0, den = 0;
    size_t i;
    for (i = 0; i < n; i++) {
        double d = (double)got[i] - (double)ref[i];
        num += d * d, den += (double)ref[i] * ref[i];
    }
    return den > 0 ? num / den : num;
}
static double g_worst_gemm, g_worst_att; /* the largest NMSE seen, printed at the end */
static void check(const char *what, const float *got, const float *ref, size_t n, double atol, double rtol, double *worst) {
    double e = nmse(got, ref, n);
    if (e > *worst) *worst = e;
    if (!(e <= 1e-10)) fail_msg("%s: normalised MSE %.3g > 1e-10", what, e);
    tu_assert_close(what, got, ref, n, atol, rtol);
}

/* test_sgemm_mma: the reference multiplies the operands rounded to g_ref_fdt (bfloat16 / float16; 0: as they are).
   The device gets them rounded too (a model's operands are values of its precision), unless g_raw_inputs: then the
   kernel's conversion must round them itself. */
static int g_ref_fdt, g_raw_inputs;
/* The products multiply in g_ref_fdt (tr__out.prec: on the tensor cores where it is 16-bit, as a model's). */
static tr__out tout16(void *p, size_t ld, size_t s, int acc, int dt) { return tr__out_in(tr__out16_of(p, ld, s, acc, dt), g_ref_fdt); }
static tr__out tout(void *p, size_t ld, size_t s, int acc) { return tout16(p, ld, s, acc, 0); }
/* The reference's copy of operand X (n floats): X itself, rounded in place, or (g_raw_inputs) a rounded copy. */
static float *ref_operand(float *X, size_t n) {
    float *R;
    if (!g_ref_fdt) return X;
    if (!g_raw_inputs) {
        tr__round_ref(g_ref_fdt, X, n);
        return X;
    }
    R = (float *)malloc(n * 4);
    memcpy(R, X, n * 4);
    tr__round_ref(g_ref_fdt, R, n);
    return R;
}

/* One product op(A) op(B) on the device vs tr__sgemm_ref, with padded leading dimensions (pad) and a C whose
   padding columns must survive. pieces: 0 = the public wrapper, else forced split-K. */
static void run_gemm(tr__cl *cl, int ta, int tb, size_t M, size_t N, size_t K, size_t pad, int acc, int pieces, uint64_t seed) {
    size_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
    size_t na = (ta ? K : M) * lda + 1, nbb = (tb ? N : K) * ldb + 1, nc = M * ldc + 1;
    float *A = (float *)malloc(na * 4), *B = (float *)malloc(nbb * 4), *C = (float *)malloc(nc * 4), *R = (float *)malloc(nc * 4);
    float *dA, *dB, *dC, *RA, *RB;
    char what[160];
    tr_status st;
    tu_fill(A, na, seed, 1.0f);
    tu_fill(B, nbb, seed + 1, 1.0f);
    tu_fill(C, nc, seed + 2, 1.0f);
    memcpy(R, C, nc * 4);
    RA = ref_operand(A, na), RB = ref_operand(B, nbb);
    dA = up(cl, A, na), dB = up(cl, B, nbb), dC = up(cl, C, nc);
    st = pieces ? tr__cl_gemm_run(cl, 1, M, N, K, tr__mat_of(dA, lda, 0, ta), tr__mat_of(dB, ldb, 0, tb), tout(dC, ldc, 0, acc), pieces, NULL)
                : tr__cl_sgemm(cl, M, N, K, tr__mat_of(dA, lda, 0, ta), tr__mat_of(dB, ldb, 0, tb), tout(dC, ldc, 0, acc));
    assert_int_equal(st, TR_OK);
    down(cl, C, dC, nc);
    tr__sgemm_ref(M, N, K, tr__mat_of(RA, lda, 0, ta), tr__mat_of(RB, ldb, 0, tb), tout(R, ldc, 0, acc));
    snprintf(what, sizeof what, "sgemm ta=%d tb=%d M=%zu N=%zu K=%zu pad=%zu acc=%d pieces=%d fdt=%d%s", ta, tb, M, N, K, pad, acc, pieces,
             g_ref_fdt, g_raw_inputs ? " raw" : "");
    check(what, C, R, nc, 1e-6 * (double)K + 1e-6, 1e-5, &g_worst_gemm); /* includes the padding: it must be untouched */
    if (RA != A) free(RA);
    if (RB != B) free(RB);
    tr__cl_free(cl, dA), tr__cl_free(cl, dB), tr__cl_free(cl, dC);
    free(A), free(B), free(C), free(R);
}

static void test_sgemm_shapes(void **state) {
    static const size_t sz[][3] = {{1, 1, 1}, {3, 5, 7}, {17, 3, 1}, {1, 130, 17}, {97, 17, 97}, {130, 65, 33}, {64, 64, 64}, {33, 300, 5}, {300, 31, 130}};
    tr__cl *cl = dev();
    size_t i;
    int ta, tb;
    (void)state;
    for (i = 0; i < sizeof sz / sizeof sz[0]; i++)
        for (ta = 0; ta < 2; ta++)
            for (tb = 0; tb < 2; tb++) run_gemm(cl, ta, tb, sz[i][0], sz[i][1], sz[i][2], (i + (size_t)ta) % 3 == 0 ? 0 : 3 + i, (int)((i + (size_t)tb) & 1), 0, 10 * i + 2 * (size_t)ta + (size_t)tb);
    run_gemm(cl, 0, 0, 5, 7, 0, 2, 0, 0, 99); /* K = 0: C = 0 (or unchanged) */
    run_gemm(cl, 1, 1, 5, 7, 0, 0, 1, 0, 98);
    assert_int_equal(tr__cl_sgemm(cl, 0, 5, 5, tr__mat_of(NULL, 5, 0, 0), tr__mat_of(NULL, 5, 0, 0), tout(NULL, 5, 0, 0)), TR_OK); /* empty C: nothing */
}

/* Split-K into partials + the ordered reduction, forced (the automatic choice only splits on big GPUs), and the
   weight-gradient form C[M,N] += A^T B with a long K. Also bitwise reproducibility of a split run. */
static void test_sgemm_split(void **state) {
    tr__cl *cl = dev();
    size_t M = 37, N = 70, K = 1500, n = M * N;
    float *A, *B, *C1, *C2, *dA, *dB, *dC;
    (void)state;
    run_gemm(cl, 1, 0, 70, 33, 2100, 0, 1, 3, 1);
    run_gemm(cl, 0, 1, 17, 5, 1000, 2, 0, 5, 2);
    run_gemm(cl, 1, 1, 9, 130, 700, 1, 1, 64, 3); /* more pieces than K / TK allows: clamped */
    run_gemm(cl, 0, 0, 3, 3, 3, 0, 0, 2, 4);
    run_gemm(cl, 1, 0, 40, 24, 5000, 0, 1, 0, 5); /* automatic: splits on PoCL (few tiles, long K) */
    A = (float *)malloc(K * M * 4), B = (float *)malloc(K * N * 4), C1 = (float *)malloc(n * 4), C2 = (float *)malloc(n * 4);
    tu_fill(A, K * M, 7, 1.0f), tu_fill(B, K * N, 8, 1.0f);
    dA = up(cl, A, K * M), dB = up(cl, B, K * N), dC = up(cl, C1, n);
    assert_int_equal(tr__cl_gemm_run(cl, 1, M, N, K, tr__mat_of(dA, M, 0, 1), tr__mat_of(dB, N, 0, 0), tout(dC, N, 0, 0), 4, NULL), TR_OK);
    down(cl, C1, dC, n);
    assert_int_equal(tr__cl_gemm_run(cl, 1, M, N, K, tr__mat_of(dA, M, 0, 1), tr__mat_of(dB, N, 0, 0), tout(dC, N, 0, 0), 4, NULL), TR_OK);
    down(cl, C2, dC, n);
    assert_memory_equal(C1, C2, n * 4);
    tr__cl_free(cl, dA), tr__cl_free(cl, dB), tr__cl_free(cl, dC);
    free(A), free(B), free(C1), free(C2);
}

/* Batched products vs a loop of tr__sgemm_ref; sC == 0 sums every product into C (reference: acc after the first). */
static void run_batched(tr__cl *cl, int nb, int ta, int tb, size_t M, size_t N, size_t K, size_t pad, int sum, int acc, int pieces, uint64_t seed) {
    size_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
    size_t sA = (ta ? K : M) * lda + pad, sB = (tb ? N : K) * ldb + 1, sC = sum ? 0 : M * ldc + 2;
    size_t na = sA * (size_t)(nb ? nb : 1), nbb = sB * (size_t)(nb ? nb : 1), nc = sum ? M * ldc : sC * (size_t)(nb ? nb : 1);
    float *A = (float *)malloc(na * 4), *B = (float *)malloc(nbb * 4), *C = (float *)malloc(nc * 4), *R = (float *)malloc(nc * 4);
    float *dA, *dB, *dC;
    char what[200];
    int b;
    tu_fill(A, na, seed, 1.0f), tu_fill(B, nbb, seed + 1, 1.0f), tu_fill(C, nc, seed + 2, 1.0f);
    memcpy(R, C, nc * 4);
    ref_operand(A, na), ref_operand(B, nbb); /* (test_sgemm_mma: rounded in place) */
    dA = up(cl, A, na), dB = up(cl, B, nbb), dC = up(cl, C, nc);
    assert_int_equal(tr__cl_gemm_run(cl, nb, M, N, K, tr__mat_of(dA, lda, sA, ta), tr__mat_of(dB, ldb, sB, tb), tout(dC, ldc, sC, acc), pieces,
                                     NULL), TR_OK);
    down(cl, C, dC, nc);
    if (sum && nb == 0 && !acc)
        for (b = 0; b < (int)M; b++) memset(R + (size_t)b * ldc, 0, N * 4);
    for (b = 0; b < nb; b++) tr__sgemm_ref(M, N, K, tr__mat_of(A + b * sA, lda, 0, ta), tr__mat_of(B + b * sB, ldb, 0, tb), tout(R + b * sC, ldc, 0, sum && b > 0 ? 1 : acc));
    snprintf(what, sizeof what, "batched nb=%d ta=%d tb=%d M=%zu N=%zu K=%zu sum=%d acc=%d pieces=%d", nb, ta, tb, M, N, K, sum, acc, pieces);
    check(what, C, R, nc, 1e-6 * (double)K * (sum ? nb : 1) + 1e-6, 1e-5, &g_worst_gemm);
    tr__cl_free(cl, dA), tr__cl_free(cl, dB), tr__cl_free(cl, dC);
    free(A), free(B), free(C), free(R);
}

static void test_sgemm_batched(void **state) {
    tr__cl *cl = dev();
    int ta, tb;
    (void)state;
    for (ta = 0; ta < 2; ta++)
        for (tb = 0; tb < 2; tb++) {
            run_batched(cl, 5, ta, tb, 17, 9, 13, (size_t)ta, 0, tb, 0, 20 + (uint64_t)(2 * ta + tb)); /* separate outputs */
            run_batched(cl, 7, ta, tb, 9, 17, 5, (size_t)tb, 1, ta, 0, 30 + (uint64_t)(2 * ta + tb)); /* sum, automatic groups */
            run_batched(cl, 7, ta, tb, 9, 17, 5, 1, 1, 1 - ta, 3, 40 + (uint64_t)(2 * ta + tb));       /* sum, 3 groups of 3,3,1 */
        }
    run_batched(cl, 6, 0, 0, 13, 8, 97, 0, 1, 1, 1, 50);  /* sum in one group, straight into C */
    run_batched(cl, 6, 1, 0, 13, 8, 97, 0, 1, 0, 6, 51);  /* one batch per group */
    run_batched(cl, 1, 0, 1, 31, 30, 700, 0, 1, 1, 2, 52); /* nb = 1: split-K */
    run_batched(cl, 3, 0, 0, 1, 1, 1, 0, 0, 0, 0, 53);
    run_batched(cl, 0, 0, 0, 4, 4, 4, 0, 1, 0, 0, 54); /* empty sum: C = 0 */
    run_batched(cl, 0, 0, 0, 4, 4, 4, 0, 1, 1, 0, 55); /* ... or unchanged */
    run_batched(cl, 0, 0, 0, 4, 4, 4, 0, 0, 0, 0, 56); /* no products: nothing */
    /* the token-mix shapes of the model, scaled down: (S, D, S) and (D, S, D)-like with S = 97 */
    run_batched(cl, 3, 0, 0, 97, 40, 97, 0, 0, 0, 0, 57);
    run_batched(cl, 3, 1, 0, 97, 97, 40, 0, 1, 1, 0, 58);
}

/* A product whose operand sw (1: A, 2: B) is read from a gate_up tensor as silu(gate) * up (the SwiGLU fused into
   the fetch) vs the reference on the activation written out. per_batch: gate and up halves per batch entry (the
   token mix, up = rows * cols, ld = cols), else per row (the channel SwiGLU, up = cols, ld >= 2 cols + pad). Gates
   in [-4, 4) so that silu is far from linear; the activation differs from the host's by the exp rounding only. */
static void run_swiglu(tr__cl *cl, int nb, int ta, int tb, size_t M, size_t N, size_t K, int sw, int per_batch, size_t pad, int sum, int acc,
                       uint64_t seed) {
    size_t rows = sw == 1 ? (ta ? K : M) : (tb ? N : K), cols = sw == 1 ? (ta ? M : K) : (tb ? K : N), rc = rows * cols;
    size_t ldg = per_batch ? cols : 2 * cols + pad, upo = per_batch ? rc : cols, sg = per_batch ? 2 * rc + pad : rows * ldg + pad;
    size_t ldx = (sw == 1 ? (tb ? K : N) : (ta ? M : K)) + pad, sx = (sw == 1 ? (tb ? N : K) : (ta ? K : M)) * ldx + 1;
    size_t ldc = N + pad, sC = sum ? 0 : M * ldc + 2, n1 = nb ? (size_t)nb : 1;
    size_t ng = sg * n1, nx = sx * n1, nc = sum ? M * ldc : sC * n1, b, r, c;
    float *G = (float *)malloc(ng * 4), *X = (float *)malloc(nx * 4), *act = (float *)malloc(rc * n1 * 4);
    float *C = (float *)malloc(nc * 4), *R = (float *)malloc(nc * 4), *dG, *dX, *dC;
    tr__gemm g;
    char what[200];
    tu_fill(G, ng, seed, 4.0f), tu_fill(X, nx, seed + 1, 1.0f), tu_fill(C, nc, seed + 2, 1.0f);
    memcpy(R, C, nc * 4);
    for (b = 0; b < n1; b++)
        for (r = 0; r < rows; r++)
            for (c = 0; c < cols; c++) {
                const float *g = G + b * sg + r * ldg + c;
                act[b * rc + r * cols + c] = tr__silu(g[0]) * g[upo];
            }
    dG = up(cl, G, ng), dX = up(cl, X, nx), dC = up(cl, C, nc);
    memset(&g, 0, sizeof g);
    g.nb = nb, g.M = M, g.N = N, g.K = K, g.a = tr__mat_of(sw == 1 ? dG : dX, sw == 1 ? ldg : ldx, sw == 1 ? sg : sx, ta);
    g.b = tr__mat_of(sw == 1 ? dX : dG, sw == 1 ? ldx : ldg, sw == 1 ? sx : sg, tb), g.c = tout(dC, ldc, sC, acc);
    assert_int_equal(tr__cl_sgemm_swiglu(cl, &g, sw, upo, 0, NULL), TR_OK);
    down(cl, C, dC, nc);
    for (b = 0; b < (size_t)nb; b++) {
        const float *A = sw == 1 ? act + b * rc : X + b * sx, *B = sw == 1 ? X + b * sx : act + b * rc;
        tr__sgemm_ref(M, N, K, tr__mat_of(A, sw == 1 ? cols : ldx, 0, ta), tr__mat_of(B, sw == 1 ? ldx : cols, 0, tb), tout(R + b * sC, ldc, 0, sum && b > 0 ? 1 : acc));
    }
    snprintf(what, sizeof what, "swiglu sw=%d nb=%d ta=%d tb=%d M=%zu N=%zu K=%zu per_batch=%d pad=%zu sum=%d", sw, nb, ta, tb, M, N, K,
             per_batch, pad, sum);
    check(what, C, R, nc, 1e-5 * (double)K * (sum ? nb : 1) + 1e-6, 1e-5, &g_worst_gemm);
    tr__cl_free(cl, dG), tr__cl_free(cl, dX), tr__cl_free(cl, dC);
    free(G), free(X), free(act), free(C), free(R);
}

/* The fused-fetch case of the model (the token-mix weight gradient, nt batch sum) and its per-row twin, at odd
   sizes, aligned (pad 0: float4 fetches of interior tiles) and not; other cases have no kernel. */
static void test_sgemm_swiglu(void **state) {
    tr__cl *cl = dev();
    size_t pad;
    (void)state;
    for (pad = 0; pad < 2; pad++) {
        run_swiglu(cl, 5, 0, 1, 97, 130, 40, 2, 1, pad, 1, 1, 73);   /* g_tdown += sum_b g_b . act_b^T */
        run_swiglu(cl, 3, 0, 1, 33, 70, 150, 2, 1, pad, 0, 0, 74);   /* per batch, separate outputs */
        run_swiglu(cl, 1, 0, 1, 150, 37, 70, 2, 0, pad, 0, 1, 75);   /* per row, one product */
        run_swiglu(cl, 2, 0, 1, 130, 140, 260, 2, 0, pad, 0, 0, 76); /* per row, batched, big tiles */
    }
    {
        tr__gemm g;
        memset(&g, 0, sizeof g);
        g.nb = 1, g.M = g.N = g.K = 4, g.a = tr__mat_of(NULL, 4, 0, 1), g.b = tr__mat_of(NULL, 4, 0, 0), g.c = tout(NULL, 4, 0, 0);
        assert_int_equal(tr__cl_sgemm_swiglu(cl, &g, 2, 4, 0, NULL), TR_ERR_UNSUPPORTED);
    }
}

/* The token mix's gate_up product with the SwiGLU in its epilogue vs the reference product and activation: per batch
   C_b[2 half, N] = A B_b (gate | up rows), act_b = silu(gate) * up. With keep, C must equal the product; without, C
   must be untouched; act's batch padding must survive. */
static void run_gate_up(tr__cl *cl, int nb, size_t half, size_t N, size_t K, size_t pad, int keep, uint64_t seed) {
    size_t M = 2 * half, lda = K + pad, sB = K * N + pad, sC = M * N + 1, sX = half * N + 3, n1 = (size_t)nb, b, i;
    size_t na = M * lda, nbb = sB * n1, nc = sC * n1, nx = sX * n1;
    float *A = (float *)malloc(na * 4), *Bm = (float *)malloc(nbb * 4), *C = (float *)malloc(nc * 4), *R = (float *)malloc(nc * 4);
    float *X = (float *)malloc(nx * 4), *RX = (float *)malloc(nx * 4), *P = (float *)malloc(M * N * 4), *dA, *dB, *dC, *dX;
    char what[160];
    tu_fill(A, na, seed, 1.0f), tu_fill(Bm, nbb, seed + 1, 1.0f), tu_fill(C, nc, seed + 2, 1.0f), tu_fill(X, nx, seed + 3, 1.0f);
    memcpy(R, C, nc * 4), memcpy(RX, X, nx * 4);
    dA = up(cl, A, na), dB = up(cl, Bm, nbb), dC = up(cl, C, nc), dX = up(cl, X, nx);
    assert_int_equal(tr__cl_sgemm_gate_up(cl, nb, half, N, K, tr__mat_of(dA, lda, 0, 0), tr__mat_of(dB, N, sB, 0), tout(dC, N, sC, 0), keep,
                                          tout(dX, N, sX, 0)), TR_OK);
    down(cl, C, dC, nc), down(cl, X, dX, nx);
    for (b = 0; b < n1; b++) {
        tr__sgemm_ref(M, N, K, tr__mat_of(A, lda, 0, 0), tr__mat_of(Bm + b * sB, N, 0, 0), tout(P, N, 0, 0));
        for (i = 0; i < half * N; i++) RX[b * sX + i] = tr__silu(P[i]) * P[half * N + i];
        if (keep) memcpy(R + b * sC, P, M * N * 4);
    }
    snprintf(what, sizeof what, "gate_up nb=%d half=%zu N=%zu K=%zu pad=%zu keep=%d: C", nb, half, N, K, pad, keep);
    check(what, C, R, nc, 1e-6 * (double)K + 1e-6, 1e-5, &g_worst_gemm);
    snprintf(what, sizeof what, "gate_up nb=%d half=%zu N=%zu K=%zu pad=%zu keep=%d: act", nb, half, N, K, pad, keep);
    check(what, X, RX, nx, 2e-6 * (double)K + 1e-6, 1e-5, &g_worst_gemm);
    tr__cl_free(cl, dA), tr__cl_free(cl, dB), tr__cl_free(cl, dC), tr__cl_free(cl, dX);
    free(A), free(Bm), free(C), free(R), free(X), free(RX), free(P);
}

/* The model's layout scaled down (K = 97), odd halves and widths (scalar stores), interior tiles and edges. */
static void test_sgemm_gate_up(void **state) {
    tr__cl *cl = dev();
    (void)state;
    run_gate_up(cl, 3, 64, 40, 97, 0, 1, 83); /* taped */
    run_gate_up(cl, 2, 37, 130, 97, 1, 0, 84); /* no-grad: C untouched */
    run_gate_up(cl, 4, 130, 70, 5, 0, 1, 85);
    run_gate_up(cl, 1, 160, 256, 33, 0, 0, 86);
    run_gate_up(cl, 2, 3, 3, 1, 0, 1, 87);
}

/* The same products with a second tile configuration (TINYREC_CL_SGEMM, scalar local reads, odd tile shape). */
static void test_sgemm_env_override(void **state) {
    tr__cl *cl0 = dev(), *cl;
    tr_ctx *ctx2 = tu_ctx(2, 1);
    tr__cl_gemm_cfg g0, g1;
    const char *old = getenv("TINYREC_CL_SGEMM");
    (void)state;
    (void)cl0;
    tr__cl_gemm_config(tr__cl_get_info(cl0), &g0);
    setenv("TINYREC_CL_SGEMM", "TM=24,TN=16,TK=8,WM=3,WN=2,VW=1", 1);
    tr__cl_gemm_config(tr__cl_get_info(cl0), &g1);
    assert_int_equal(g1.tm, 24), assert_int_equal(g1.wn, 2), assert_int_equal(g1.vw, 1);
    cl = tu_cl_open(ctx2); /* a second device, built with the override */
    run_gemm(cl, 0, 0, 97, 33, 50, 1, 0, 0, 61);
    run_gemm(cl, 1, 1, 25, 17, 9, 0, 1, 0, 62);
    run_gemm(cl, 1, 0, 30, 40, 300, 0, 1, 3, 63);
    run_batched(cl, 4, 0, 1, 13, 17, 7, 1, 1, 0, 2, 64);
    run_batched(cl, 4, 1, 0, 13, 17, 7, 1, 0, 1, 0, 65);
    /* WM = 3 cannot hold a gate row and its up in one work-item */
    assert_int_equal(tr__cl_sgemm_gate_up(cl, 1, 4, 4, 4, tr__mat_of(NULL, 4, 0, 0), tr__mat_of(NULL, 4, 0, 0), tout(NULL, 4, 0, 0), 0,
                                          tout(NULL, 4, 0, 0)), TR_ERR_UNSUPPORTED);
    tr_ctx_destroy(ctx2);
    setenv("TINYREC_CL_SGEMM", "CP=1", 1); /* cp.async only where the device has it (NVIDIA sm_80+) */
    tr__cl_gemm_config(tr__cl_get_info(cl0), &g1);
    assert_int_equal(g1.cp, tr__cl_get_info(cl0)->nv_sm >= 80);
    setenv("TINYREC_CL_SGEMM", "CP=0", 1);
    tr__cl_gemm_config(tr__cl_get_info(cl0), &g1);
    assert_int_equal(g1.cp, 0);
    setenv("TINYREC_CL_SGEMM", "CP=2,ST=3,TK=8", 1); /* the emulation, any device (3 x 16 deep needs > 48 KiB local) */
    tr__cl_gemm_config(tr__cl_get_info(cl0), &g1);
    assert_int_equal(g1.cp, 2), assert_int_equal(g1.st, 3);
    setenv("TINYREC_CL_SGEMM", "CP=2,TM=128,TN=128,TK=4,WM=8,WN=8", 1); /* 256 work-items cannot cover a 4-deep tile's passes */
    tr__cl_gemm_config(tr__cl_get_info(cl0), &g1);
    assert_int_equal(g1.cp, 0);
    setenv("TINYREC_CL_SGEMM", "ST=5", 1); /* out of range: ignored */
    tr__cl_gemm_config(tr__cl_get_info(cl0), &g1);
    assert_memory_equal(&g0, &g1, sizeof g0);
    setenv("TINYREC_CL_SGEMM", "TM=7,TN=16,bogus", 1); /* invalid: ignored */
    tr__cl_gemm_config(tr__cl_get_info(cl0), &g1);
    assert_memory_equal(&g0, &g1, sizeof g0);
    if (old) setenv("TINYREC_CL_SGEMM", old, 1);
    else unsetenv("TINYREC_CL_SGEMM");
}

/* The cp.async kernels' staging (tile mapping, zero-filled edges, ST-deep buffer rotation, the short last k-tile),
   emulated with plain loads and stores (CP=2) so that it runs on any device: 2, 3 and 4 stages, every transpose
   case, odd and unaligned shapes, split-K and batch sums, x W^T with enough rows to be run as x (W^T); and bitwise
   the same as the register-staged kernels (the same order of fma over k). */
static void test_sgemm_cp_staging(void **state) {
    static const char *const cfgs[] = {"CP=2", "CP=2,ST=3,TK=8", "CP=2,ST=4,TK=8,WL=0"};
    static const size_t sz[][3] = {{1, 1, 1}, {3, 5, 7}, {97, 17, 97}, {130, 65, 33}, {64, 64, 64}, {300, 31, 130}};
    const char *old = getenv("TINYREC_CL_SGEMM");
    size_t c, i, M = TR__CL_GEMM_BT_MIN_M + 76, N = 45, K = 203, n = M * N;
    float *A = (float *)malloc(K * M * 4), *B = (float *)malloc(K * N * 4), *C1 = (float *)malloc(n * 4), *C2 = (float *)malloc(n * 4);
    (void)state;
    tu_fill(A, K * M, 31, 1.0f), tu_fill(B, K * N, 32, 1.0f);
    for (c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
        int ta, tb, cp;
        for (cp = 1; cp >= 0; cp--) { /* the emulated cp.async build, then the same tiles staged through registers */
            tr_ctx *ctx2 = tu_ctx(2, 1);
            tr__cl *cl;
            float *dA, *dB, *dC;
            char env[64];
            snprintf(env, sizeof env, "%s%s", cfgs[c], cp ? "" : ",CP=0");
            setenv("TINYREC_CL_SGEMM", env, 1);
            cl = tu_cl_open(ctx2);
            assert_int_equal(cl->gemm.cp, cp ? 2 : 0);
            if (cp) {
                for (i = 0; i < sizeof sz / sizeof sz[0]; i++)
                    for (ta = 0; ta < 2; ta++)
                        for (tb = 0; tb < 2; tb++) run_gemm(cl, ta, tb, sz[i][0], sz[i][1], sz[i][2], (i + (size_t)tb) % 2 ? 3 : 0, (int)(i & 1), 0, 200 + 4 * i + 2 * (size_t)ta + (size_t)tb);
                run_gemm(cl, 1, 0, 70, 33, 2100, 0, 1, 3, 240);
                run_gemm(cl, 0, 1, 17, 5, 1000, 1, 0, 5, 241);
                run_gemm(cl, 0, 1, TR__CL_GEMM_BT_MIN_M + 3, 37, 41, 1, 1, 0, 245); /* B transposed first */
                run_batched(cl, 5, 0, 0, 33, 20, 97, 0, 0, 0, 0, 242);
                run_batched(cl, 6, 1, 0, 13, 17, 7, 1, 0, 1, 0, 243);
                run_batched(cl, 7, 0, 1, 9, 70, 33, 1, 1, 1, 3, 244);
                run_gate_up(cl, 3, 64, 40, 97, 0, 1, 246); /* nn_gu_cp */
                run_gate_up(cl, 2, 37, 130, 97, 1, 0, 247);
            }
            dA = up(cl, A, K * M), dB = up(cl, B, K * N), dC = up(cl, C1, n);
            assert_int_equal(tr__cl_sgemm(cl, M, N, K, tr__mat_of(dA, K, 0, 0), tr__mat_of(dB, K, 0, 1), tout(dC, N, 0, 0)), TR_OK);
            down(cl, cp ? C1 : C2, dC, n);
            tr__cl_free(cl, dA), tr__cl_free(cl, dB), tr__cl_free(cl, dC);
            tr_ctx_destroy(ctx2);
        }
        assert_memory_equal(C1, C2, n * 4);
    }
    if (old) setenv("TINYREC_CL_SGEMM", old, 1);
    else unsetenv("TINYREC_CL_SGEMM");
    free(A), free(B), free(C1), free(C2);
}

/* The tensor-core kernels (bfloat16 / float16 models) on device cl of context ctx: every transpose case, odd shapes
   (edges of the 128 x 128 x 32 tile, unaligned rows), aligned interior tiles (float4 fetches), split-K, batches and batch sums, against the reference on the
   rounded operands; raw operands (the kernel's conversion rounds them); and with no low-precision model running,
   the fp32 SGEMM (raw operands, unrounded reference: a rounding kernel would fail it by ~1e-3 of |C|). */
/* The rounding epilogue (tr__op_sgemm_rnd on a device): C = round(C + A B) to the precision, batched or split-K (then
   rounded after the reduction). Every output must be a value of the precision, within one of its ulps of the
   reference rounded the same way (the fp32 sums differ in order, so a value near a tie may round the other way). */
static void run_gemm_rnd(tr_ctx *ctx, tr__cl *cl, int fdt, int nb, int ta, int tb, size_t M, size_t N, size_t K, int acc, uint64_t seed) {
    size_t lda = ta ? M : K, ldb = tb ? K : N, sA = (ta ? K : M) * lda, sB = (tb ? N : K) * ldb, sC = M * N, n = sC * (size_t)nb, i;
    float *A = (float *)malloc(sA * nb * 4), *B = (float *)malloc(sB * nb * 4), *C = (float *)malloc(n * 4), *R = (float *)malloc(n * 4);
    float *dA, *dB, *dC;
    int b;
    tu_fill(A, sA * nb, seed, 1.0f), tu_fill(B, sB * nb, seed + 1, 1.0f), tu_fill(C, n, seed + 2, 1.0f);
    tr__round_ref(fdt, A, sA * nb), tr__round_ref(fdt, B, sB * nb);
    memcpy(R, C, n * 4);
    dA = up(cl, A, sA * nb), dB = up(cl, B, sB * nb), dC = up(cl, C, n);
    assert_int_equal(tr__op_sgemm_rnd(ctx, fdt, nb, M, N, K, tr__mat_of(dA, lda, sA, ta), tr__mat_of(dB, ldb, sB, tb), tout(dC, N, sC, acc)), TR_OK);
    down(cl, C, dC, n);
    for (b = 0; b < nb; b++) tr__sgemm_ref(M, N, K, tr__mat_of(A + b * sA, lda, 0, ta), tr__mat_of(B + b * sB, ldb, 0, tb), tout(R + b * sC, N, 0, acc));
    tr__round_ref(fdt, R, n);
    for (i = 0; i < n; i++)
        if (tr__round1(fdt, C[i]) != C[i]) fail_msg("rnd fdt=%d: C[%zu] = %.9g is not a value of the precision", fdt, i, C[i]);
    tu_assert_close("sgemm_rnd", C, R, n, 1e-6 * (double)K, fdt == TR_FWD_BFLOAT16 ? 1.0 / 128 : 1.0 / 1024);
    if (!acc && N % 2 == 0 && K < 512) { /* C stored as those values' 16 bits (a tensor-core device's d act): the same bits
                                              (in one piece, as C is then: K splits sum in another order) */
        uint16_t *h = (uint16_t *)malloc((n + 8) * 2);
        float *d16 = up_half(cl, fdt, R, n);
        assert_int_equal(tr__op_sgemm_rnd(ctx, fdt, nb, M, N, K, tr__mat_of(dA, lda, sA, ta), tr__mat_of(dB, ldb, sB, tb),
                                          tout16(d16 + 3, N, sC, 0, fdt)), TR_OK);
        down(cl, (float *)h, d16, n / 2 + 4);
        tr__half_ref(fdt, 1, R, h + 6, n);
        assert_memory_equal(R, C, n * 4);
        tr__cl_free(cl, d16), free(h);
    }
    { /* A and / or B given as their 16 bits (a tensor-core device's 16-bit record, packed from them; strides in values):
         the same bits, rounded (tr__op_sgemm_rnd) or not (tr__op_sgemm_batched) */
        float *A16 = up_half(cl, fdt, A, sA * nb), *B16 = up_half(cl, fdt, B, sB * nb), *P = (float *)malloc(n * 4), *Q = (float *)malloc(n * 4);
        int x16;
        tu_fill(R, n, seed + 2, 1.0f); /* (C as it was) */
        tr__cl_free(cl, dC), dC = up(cl, R, n);
        assert_int_equal(tr__op_sgemm_batched(ctx, nb, M, N, K, tr__mat_of(dA, lda, sA, ta), tr__mat_of(dB, ldb, sB, tb), tout(dC, N, sC, acc)), TR_OK);
        down(cl, P, dC, n);
        for (x16 = TR__X16_A; x16 <= (TR__X16_A | TR__X16_B); x16++) {
            tr__mat a16 = x16 & TR__X16_A ? tr__mat16_of(A16 + 3, lda, sA, ta, fdt) : tr__mat_of(dA, lda, sA, ta);
            tr__mat b16 = x16 & TR__X16_B ? tr__mat16_of(B16 + 3, ldb, sB, tb, fdt) : tr__mat_of(dB, ldb, sB, tb);
            tr__cl_free(cl, dC), dC = up(cl, R, n);
            assert_int_equal(tr__op_sgemm_rnd(ctx, fdt, nb, M, N, K, a16, b16, tout(dC, N, sC, acc)), TR_OK);
            down(cl, Q, dC, n);
            assert_memory_equal(Q, C, n * 4);
            tr__cl_free(cl, dC), dC = up(cl, R, n);
            assert_int_equal(tr__op_sgemm_batched(ctx, nb, M, N, K, a16, b16, tout(dC, N, sC, acc)), TR_OK);
            down(cl, Q, dC, n);
            assert_memory_equal(Q, P, n * 4);
        }
        tr__cl_free(cl, A16), tr__cl_free(cl, B16), free(P), free(Q);
    }
    tr__cl_free(cl, dA), tr__cl_free(cl, dB), tr__cl_free(cl, dC);
    free(A), free(B), free(C), free(R);
}

/* The SwiGLU in the tensor-core epilogue against the unfused device path (each product rounded into its output,
   tr_k_swiglu_fwd between): the same bits for the activation (rows 1) or the down product that reads it packed
   (rows 0), and gu with keep; without keep gu untouched (which the unfused path cannot do: the fused one ran).
   rows 0: the channel SwiGLU (tr__op_swiglu_mlp: gu = A W_guᵀ, gate | up columns, n rows of A, proj = act W_downᵀ,
   D = 24 columns); rows 1: the token mix (tr__op_sgemm_gate_up: gu_b = W x_b, gate | up rows, nb batches of K x n).
   Halves that are not whole blocks of 8 or tiles. keep 2 (rows 0): gu given as 16 bits too (the 16-bit tape's),
   equal to the reference's values converted. */
static void run_swiglu_fused(tr_ctx *ctx, tr__cl *cl, int fdt, int rows, int nb, size_t n, size_t half, size_t K, size_t pad, int keep, uint64_t seed) {
    const size_t D = 24;
    size_t lda = rows ? K : K + pad, na = rows ? 2 * half * K : n * lda, nx = rows ? (size_t)nb * K * n : 2 * half * K + D * half;
    size_t per = 2 * half * n, ng = (size_t)nb * per, nout = rows ? (size_t)nb * half * n : n * D, nmax = TR__MAX(ng, nout), i;
    float *A = (float *)malloc(na * 4), *X = (float *)malloc(nx * 4), *G = (float *)malloc(nmax * 4), *R = (float *)malloc(ng * 4);
    float *out = (float *)malloc(nout * 4), *rout = (float *)malloc(nout * 4), *dA, *dX, *dG, *dR, *dout, *drout, *dact;
    tr__cl_gemm_fuse rnd = tr__cl_fuse_none();
    rnd.rnd = 1; /* (a product rounded in its epilogue) */
    tu_fill(A, na, seed, 1.0f), tu_fill(X, nx, seed + 1, 0.5f);
    tr__round_ref(fdt, A, na), tr__round_ref(fdt, X, nx); /* a model's operands: values of its precision */
    for (i = 0; i < nmax; i++) G[i] = 12345.0f; /* (also the initial outputs) */
    dA = up(cl, A, na), dX = up(cl, X, nx), dG = up(cl, G, ng), dR = up(cl, G, ng), dout = up(cl, G, nout), drout = up(cl, G, nout);
    dact = up(cl, G, (size_t)nb * half * n);
    if (rows) {
        tr__gemm g;
        memset(&g, 0, sizeof g);
        g.nb = nb, g.M = 2 * half, g.N = n, g.K = K, g.a = tr__mat_of(dA, K, 0, 0), g.b = tr__mat_of(dX, n, K * n, 0), g.c = tout(dG, n, per, 0);
        assert_int_equal(tr__op_sgemm_gate_up(ctx, fdt, &g, keep, tout(dout, n, half * n, 0)), TR_OK);
        assert_int_equal(tr__cl_gemm_run(cl, nb, 2 * half, n, K, tr__mat_of(dA, K, 0, 0), tr__mat_of(dX, n, K * n, 0), tout(dR, n, per, 0), 0,
                                         &rnd), TR_OK);
        assert_int_equal(tr__cl_swiglu_fwd(cl, fdt, nb, (long)(half * n), dR, per, drout, half * n), TR_OK);
    } else { /* W_down (D x half) after W_gu in X */
        float *dG16 = keep == 2 ? up(cl, G, ng / 2 + 1) : NULL;
        tr__mlp_desc md;
        memset(&md, 0, sizeof md);
        md.fdt = fdt, md.nb = 1, md.keep_gu = keep != 0, md.rows = n, md.half = half, md.K = K, md.D = D, md.in = tr__f32(dA), md.ld_in = lda;
        md.w_gu = dX, md.w_down = dX + 2 * half * K, md.gu = dG, md.gu16 = dG16, md.act = tr__f32(NULL), md.out = tr__f32(dout);
        assert_int_equal(tr__op_swiglu_mlp(ctx, &md), TR_OK);
        assert_int_equal(tr__cl_gemm_run(cl, 1, n, 2 * half, K, tr__mat_of(dA, lda, 0, 0), tr__mat_of(dX, K, 0, 1), tout(dR, 2 * half, 0, 0), 0,
                                         &rnd), TR_OK);
        assert_int_equal(tr__cl_swiglu_fwd(cl, fdt, (long)n, (long)half, dR, 2 * half, dact, half), TR_OK);
        assert_int_equal(tr__cl_gemm_run(cl, 1, n, D, half, tr__mat_of(dact, half, 0, 0), tr__mat_of(dX + 2 * half * K, half, 0, 1),
                                         tout(drout, D, 0, 0), 0, &rnd), TR_OK);
        if (dG16) {
            uint16_t *h = (uint16_t *)malloc(ng * 2 + 4), *hr = (uint16_t *)malloc(ng * 2 + 4);
            down(cl, (float *)h, dG16, ng / 2 + 1), down(cl, R, dR, ng);
            tr__half_ref(fdt, 0, R, hr, ng);
            assert_memory_equal(h, hr, ng * 2);
            free(h), free(hr), tr__cl_free(cl, dG16);
        }
    }
    down(cl, G, dG, ng), down(cl, R, dR, ng), down(cl, out, dout, nout), down(cl, rout, drout, nout);
    assert_memory_equal(out, rout, nout * 4);
    if (keep == 1) assert_memory_equal(G, R, ng * 4);
    else if (!keep)
        for (i = 0; i < ng; i++) assert_true(G[i] == 12345.0f);
    tr__cl_free(cl, dA), tr__cl_free(cl, dX), tr__cl_free(cl, dG), tr__cl_free(cl, dR), tr__cl_free(cl, dout), tr__cl_free(cl, drout);
    tr__cl_free(cl, dact);
    free(A), free(X), free(G), free(R), free(out), free(rout);
}

/* The token mix's SwiGLU MLP on the tensor cores (tr__op_token_mlp: the activation written only as the second
   product's packed, depth-major operand) against the unfused device path (each product rounded into its output,
   tr_k_swiglu_fwd between): the same bits for proj, and mix with keep; without keep mix untouched. keep 2: mix given
   as 16 bits too (the 16-bit tape's: written by the epilogue), equal to the reference's values converted. */
static void run_token_mlp(tr_ctx *ctx, tr__cl *cl, int fdt, int nb, size_t It, size_t S, size_t D, int keep, uint64_t seed) {
    const size_t nw1 = 2 * It * S, nx = (size_t)nb * S * D, nw2 = S * It, nmix = (size_t)nb * 2 * It * D, nact = (size_t)nb * It * D;
    float *W1 = (float *)malloc(nw1 * 4), *X = (float *)malloc(nx * 4), *W2 = (float *)malloc(nw2 * 4), *M = (float *)malloc(nmix * 4);
    float *MR = (float *)malloc(nmix * 4), *P = (float *)malloc(nx * 4), *PR = (float *)malloc(nx * 4);
    float *dW1, *dX, *dW2, *dM, *dMR, *dP, *dPR, *dact;
    tr__cl_gemm_fuse rnd = tr__cl_fuse_none();
    size_t i;
    rnd.rnd = 1; /* (a product rounded in its epilogue) */
    tu_fill(W1, nw1, seed, 1.0f), tu_fill(X, nx, seed + 1, 0.5f), tu_fill(W2, nw2, seed + 2, 1.0f);
    tr__round_ref(fdt, W1, nw1), tr__round_ref(fdt, X, nx), tr__round_ref(fdt, W2, nw2);
    for (i = 0; i < nmix; i++) M[i] = 12345.0f;
    dW1 = up(cl, W1, nw1), dX = up(cl, X, nx), dW2 = up(cl, W2, nw2), dM = up(cl, M, nmix), dMR = up(cl, M, nmix);
    dP = up(cl, M, nx), dPR = up(cl, M, nx), dact = up(cl, M, nact);
    float *dM16 = keep == 2 ? up(cl, M, nmix / 2 + 1) : NULL;
    tr__mlp_desc md;
    memset(&md, 0, sizeof md);
    md.fdt = fdt, md.nb = nb, md.keep_gu = keep != 0, md.half = It, md.K = S, md.D = D, md.in = tr__f32(dX), md.w_gu = dW1, md.w_down = dW2;
    md.gu = dM, md.gu16 = dM16, md.act = tr__f32(dact), md.out = tr__f32(dP);
    assert_int_equal(tr__op_token_mlp(ctx, &md), TR_OK);
    assert_int_equal(tr__cl_gemm_run(cl, nb, 2 * It, D, S, tr__mat_of(dW1, S, 0, 0), tr__mat_of(dX, D, S * D, 0), tout(dMR, D, 2 * It * D, 0), 0,
                                     &rnd), TR_OK);
    assert_int_equal(tr__cl_swiglu_fwd(cl, fdt, nb, (long)(It * D), dMR, 2 * It * D, dact, It * D), TR_OK);
    assert_int_equal(tr__cl_gemm_run(cl, nb, S, D, It, tr__mat_of(dW2, It, 0, 0), tr__mat_of(dact, D, It * D, 0), tout(dPR, D, S * D, 0), 0,
                                     &rnd), TR_OK);
    down(cl, M, dM, nmix), down(cl, MR, dMR, nmix), down(cl, P, dP, nx), down(cl, PR, dPR, nx);
    assert_memory_equal(P, PR, nx * 4);
    if (keep == 2) {
        uint16_t *h = (uint16_t *)malloc(nmix * 2 + 4), *hr = (uint16_t *)malloc(nmix * 2 + 4);
        down(cl, (float *)h, dM16, nmix / 2 + 1);
        tr__half_ref(fdt, 0, MR, hr, nmix);
        assert_memory_equal(h, hr, nmix * 2);
        free(h), free(hr), tr__cl_free(cl, dM16);
    } else if (keep) assert_memory_equal(M, MR, nmix * 4);
    else
        for (i = 0; i < nmix; i++) assert_true(M[i] == 12345.0f);
    tr__cl_free(cl, dW1), tr__cl_free(cl, dX), tr__cl_free(cl, dW2), tr__cl_free(cl, dM), tr__cl_free(cl, dMR);
    tr__cl_free(cl, dP), tr__cl_free(cl, dPR), tr__cl_free(cl, dact);
    free(W1), free(X), free(W2), free(M), free(MR), free(P), free(PR);
}

/* tr__op_sgemm_swiglu of the test's shapes: C (ldc N, products summed) += op(A) op(act(gu)). */
static tr_status sgemm_swiglu(tr_ctx *ctx, int fdt, int nb, int ta, int tb, size_t M, size_t N, size_t K, const float *A, size_t lda, size_t sa, float *gu,
                              float *gu16, size_t ldg, size_t sg, size_t so, float *C, tr__buf act) {
    tr__gemm g;
    memset(&g, 0, sizeof g);
    g.nb = nb, g.M = M, g.N = N, g.K = K, g.a = tr__mat_of(A, lda, sa, ta), g.b = tr__mat_of(gu, ldg, sg, tb), g.c = tout(C, N, 0, 1);
    return tr__op_sgemm_swiglu(ctx, fdt, &g, gu16, so, act);
}

/* tr__op_sgemm_swiglu on the tensor cores (the activation computed in the operand's packing) against the activation
   written by tr_k_swiglu_fwd, then the same product: the same bits. per_row: the channel SwiGLU's weight gradient
   (C += Aᵀ act, act = swiglu(gu) per row, so = cols), else the token mix's (per batch, summed: C += A_b act_bᵀ).
   And gu given as 16-bit values (a 16-bit tape's): the same bits again, read as they are (the fp32 gu it would be
   unpacked into is never written); and so with the activation's packing in room given as act (a tensor-core
   device's workspace: TR__X16_B on a device), which it then fills. */
static void run_swiglu_packed(tr_ctx *ctx, tr__cl *cl, int fdt, int per_row, int nb, size_t M, size_t N, size_t K, uint64_t seed) {
    const int ta = per_row, tb = !per_row;
    size_t rows = tb ? N : K, cols = tb ? K : N, rc = rows * cols, ldg = per_row ? 2 * cols : cols, so = per_row ? cols : rc;
    size_t sg = per_row ? 0 : 2 * rc, lda = ta ? M : K, sa = per_row ? 0 : M * K;
    size_t ng = per_row ? rows * ldg : (size_t)nb * sg, na = per_row ? K * M : (size_t)nb * sa, nc = M * N;
    float *G = (float *)malloc(ng * 4), *A = (float *)malloc(na * 4), *C = (float *)malloc(nc * 4), *R = (float *)malloc(nc * 4);
    float *dG, *dA, *dC, *dR, *dact, *dG16, *dGs, *dC16, *dCr, *droom;
    const size_t nroom = (size_t)nb * (rows + 128) * (cols + 32) / 2 + 128;
    tu_fill(G, ng, seed, 4.0f), tu_fill(A, na, seed + 1, 1.0f), tu_fill(C, nc, seed + 2, 1.0f);
    tr__round_ref(fdt, G, ng), tr__round_ref(fdt, A, na), tr__round_ref(fdt, C, nc);
    dG = up(cl, G, ng), dA = up(cl, A, na), dC = up(cl, C, nc), dR = up(cl, C, nc), dact = up(cl, G, (size_t)nb * rc);
    dG16 = up_half(cl, fdt, G, ng), dC16 = up(cl, C, nc), dGs = up_nan(cl, ng);
    assert_int_equal(sgemm_swiglu(ctx, fdt, nb, ta, tb, M, N, K, dA, lda, sa, dG, NULL, ldg, sg, so, dC, tr__f32(NULL)), TR_OK);
    assert_int_equal(sgemm_swiglu(ctx, fdt, nb, ta, tb, M, N, K, dA, lda, sa, dGs, dG16 + 3, ldg, sg, so, dC16, tr__f32(NULL)), TR_OK);
    dCr = up(cl, C, nc), droom = up_nan(cl, nroom);
    assert_int_equal(sgemm_swiglu(ctx, fdt, nb, ta, tb, M, N, K, dA, lda, sa, dGs, dG16 + 3, ldg, sg, so, dCr, tr__buf_of(droom + 1, fdt)), TR_OK);
    if (per_row) assert_int_equal(tr__cl_swiglu_fwd(cl, fdt, (long)rows, (long)cols, dG, ldg, dact, cols), TR_OK);
    else assert_int_equal(tr__cl_swiglu_fwd(cl, fdt, nb, (long)rc, dG, sg, dact, rc), TR_OK);
    assert_int_equal(tr__cl_gemm_run(cl, nb, M, N, K, tr__mat_of(dA, lda, sa, ta), tr__mat_of(dact, cols, rc, tb), tout(dR, N, 0, 1), 0, NULL), TR_OK);
    down(cl, C, dC, nc), down(cl, R, dR, nc);
    assert_memory_equal(C, R, nc * 4);
    down(cl, C, dC16, nc);
    assert_memory_equal(C, R, nc * 4);
    down(cl, C, dCr, nc);
    assert_memory_equal(C, R, nc * 4);
    {
        float *h = (float *)malloc(nroom * 4);
        size_t i, numbers = 0;
        down(cl, h, droom, nroom);
        for (i = 0; i < nroom; i++) numbers += h[i] == h[i];
        assert_true(numbers >= rows * cols / 2); /* (the packing went there) */
        free(h);
    }
    tr__cl_free(cl, dCr), tr__cl_free(cl, droom);
    assert_all_nan(cl, dGs, ng); /* (the fp32 gu: not unpacked into) */
    tr__cl_free(cl, dG), tr__cl_free(cl, dA), tr__cl_free(cl, dC), tr__cl_free(cl, dR), tr__cl_free(cl, dact);
    tr__cl_free(cl, dG16), tr__cl_free(cl, dC16), tr__cl_free(cl, dGs);
    free(G), free(A), free(C), free(R);
}

/* Packing windows (tr__cl_pack_window: the backward's pairs of products sharing an operand). The same sequence of
   products twice, with windows and without: the same bits, and with them the shared operand's packing is reused
   (packs_reused) by the next product reading it, as A or as B, k-contiguous or depth-major; a product writing over
   a kept operand drops it, and so does opening a window after a write from the host. */
static void run_pack_window(tr__cl *cl, uint64_t seed) {
    enum { R = 150, CO = 70, NY = 50, NW = 40 };
    static const size_t n[] = {R * CO, R * NY, CO * NW, NW * R, R * CO};
    static const long want[5] = {0, 1, 2, 4, 4}; /* packs reused after each product, in windows */
    float *h[5], *d[5], *out[2][5], *dout[5];
    const size_t nout[5] = {CO * NY, R * NW, NW * CO, R * NW, R * NW};
    long reused[2][5];
    int w, i;
    for (i = 0; i < 5; i++) {
        h[i] = (float *)malloc(n[i] * 4);
        tu_fill(h[i], n[i], seed + (uint64_t)i, 1.0f);
        tr__round_ref(g_ref_fdt, h[i], n[i]);
    }
    for (w = 0; w < 2; w++) {
        float *X, *Y, *W1, *W2;
        for (i = 0; i < 4; i++) d[i] = up(cl, h[i], n[i]);
        X = d[0], Y = d[1], W1 = d[2], W2 = d[3];
        for (i = 0; i < 5; i++) dout[i] = up(cl, h[1], nout[i]); /* (any initial values: the products set them) */
        cl->packs_reused = 0;
        tr__cl_pack_window(cl, w);
        assert_int_equal(tr__cl_sgemm(cl, CO, NY, R, tr__mat_of(X, CO, 0, 1), tr__mat_of(Y, NY, 0, 0),
                                      tout(dout[0], NY, 0, 0)), TR_OK); /* Xᵀ Y: X depth-major */
        reused[w][0] = cl->packs_reused;
        assert_int_equal(tr__cl_sgemm(cl, R, NW, CO, tr__mat_of(X, CO, 0, 0), tr__mat_of(W1, NW, 0, 0),
                                      tout(dout[1], NW, 0, 0)), TR_OK); /* X W1: the same packing */
        reused[w][1] = cl->packs_reused;
        assert_int_equal(tr__cl_sgemm(cl, NW, CO, R, tr__mat_of(W2, R, 0, 0), tr__mat_of(X, CO, 0, 0),
                                      tout(dout[2], CO, 0, 0)), TR_OK); /* W2 X: as B, from A's slot */
        reused[w][2] = cl->packs_reused;
        assert_int_equal(tr__cl_sgemm(cl, NW, CO, R, tr__mat_of(W2, R, 0, 0), tr__mat_of(X, CO, 0, 0),
                                      tout(X, CO, 0, 0)), TR_OK); /* the same over X's first rows */
        assert_int_equal(tr__cl_sgemm(cl, R, NW, CO, tr__mat_of(X, CO, 0, 0), tr__mat_of(W1, NW, 0, 0), tout(dout[3], NW, 0, 0)), TR_OK); /* the new X */
        reused[w][3] = cl->packs_reused;
        tr__cl_pack_window(cl, 0);
        assert_int_equal(tr__cl_write(cl, X, h[4], n[4] * 4), TR_OK);
        tr__cl_pack_window(cl, w);
        assert_int_equal(tr__cl_sgemm(cl, R, NW, CO, tr__mat_of(X, CO, 0, 0), tr__mat_of(W1, NW, 0, 0),
                                      tout(dout[4], NW, 0, 0)), TR_OK); /* X from the host */
        reused[w][4] = cl->packs_reused;
        tr__cl_pack_window(cl, 0);
        for (i = 0; i < 5; i++) {
            out[w][i] = (float *)malloc(nout[i] * 4);
            down(cl, out[w][i], dout[i], nout[i]);
            tr__cl_free(cl, dout[i]);
        }
        for (i = 0; i < 4; i++) tr__cl_free(cl, d[i]);
    }
    for (i = 0; i < 5; i++) {
        assert_memory_equal(out[0][i], out[1][i], nout[i] * 4);
        assert_int_equal(reused[0][i], 0);
        assert_int_equal(reused[1][i], want[i]);
        free(out[0][i]), free(out[1][i]);
    }
    for (i = 0; i < 5; i++) free(h[i]);
}

/* Weights held still (tr__cl_weights_still): the same products with and without, the same bits; held, a weight's
   packing is made once and reused (wpacks_reused), by k-contiguous and depth-major reads alike, a second weight in
   the region gets its own, a third that would grow the kept packings' slot while the product's other operand is
   served from it is packed as any other (growing would move that one), a product writing into the region forgets
   them, and letting go stops the reuse. */
static void run_weights_still(tr__cl *cl, uint64_t seed) {
    enum { M = 150, K = 70, N = 90 };
    const size_t nw = (size_t)K * N, nreg = 2 * nw + 8 + (size_t)M * N; /* W1 (K x N), W2 (N x K), then room for an output */
    static const long want[7] = {0, 1, 1, 2, 3, 4, 4}; /* weight packings reused after each product, held */
    float *reg = (float *)malloc(nreg * 4), *X = (float *)malloc((size_t)M * K * 4), *out[2][6], *dreg, *dX, *dout[6];
    long reused[2][7];
    int w, i;
    tu_fill(reg, nreg, seed, 1.0f), tu_fill(X, (size_t)M * K, seed + 1, 1.0f);
    tr__round_ref(g_ref_fdt, reg, nreg), tr__round_ref(g_ref_fdt, X, (size_t)M * K);
    for (w = 0; w < 2; w++) {
        float *W1, *W2;
        dreg = up(cl, reg, nreg), dX = up(cl, X, (size_t)M * K);
        W1 = dreg, W2 = dreg + nw + 4;
        for (i = 0; i < 6; i++) dout[i] = up(cl, reg, (size_t)M * N); /* (any values: the products set them; reg holds M x N) */
        cl->wpacks_reused = 0;
        if (w) tr__cl_weights_still(cl, dreg, nreg);
        assert_int_equal(tr__cl_sgemm(cl, M, N, K, tr__mat_of(dX, K, 0, 0), tr__mat_of(W1, N, 0, 0),
                                      tout(dout[0], N, 0, 0)), TR_OK); /* X W1: W1 packed, kept */
        reused[w][0] = cl->wpacks_reused;
        assert_int_equal(tr__cl_sgemm(cl, M, N, K, tr__mat_of(dX, K, 0, 0), tr__mat_of(W1, N, 0, 0), tout(dout[1], N, 0, 0)), TR_OK); /* again: reused */
        reused[w][1] = cl->wpacks_reused;
        assert_int_equal(tr__cl_sgemm(cl, M, N, K, tr__mat_of(dX, K, 0, 0), tr__mat_of(W2, K, 0, 1),
                                      tout(dout[2], N, 0, 0)), TR_OK); /* X W2ᵀ: W2's own */
        reused[w][2] = cl->wpacks_reused;
        assert_int_equal(tr__cl_sgemm(cl, K, N, M, tr__mat_of(dX, K, 0, 1), tr__mat_of(dout[0], N, 0, 0), tout(dout[3], N, 0, 0)), TR_OK); /* no weight */
        assert_int_equal(tr__cl_sgemm(cl, M, N, K, tr__mat_of(dX, K, 0, 0), tr__mat_of(W2, K, 0, 1), tout(dout[3], N, 0, 0)), TR_OK); /* W2 reused */
        reused[w][3] = cl->wpacks_reused;
        /* W1 (reused) times an N x N view from W2's start (new, and the slot is full): packed in its own slot, W1's kept */
        assert_int_equal(tr__cl_sgemm(cl, K, N, N, tr__mat_of(W1, N, 0, 0), tr__mat_of(W2, N, 0, 0), tout(dout[5], N, 0, 0)), TR_OK);
        if (w) assert_int_equal(cl->nwpacks, 2);
        reused[w][4] = cl->wpacks_reused;
        assert_int_equal(tr__cl_sgemm(cl, M, N, K, tr__mat_of(dX, K, 0, 0), tr__mat_of(W1, N, 0, 0),
                                      tout(dreg + 2 * nw + 8, N, 0, 0)), TR_OK); /* into the region */
        if (w) assert_int_equal(cl->nwpacks, 0);
        reused[w][5] = cl->wpacks_reused;
        assert_int_equal(tr__cl_sgemm(cl, M, N, K, tr__mat_of(dX, K, 0, 0), tr__mat_of(W1, N, 0, 0), tout(dout[4], N, 0, 0)), TR_OK); /* packed anew */
        tr__cl_weights_still(cl, NULL, 0);
        assert_int_equal(tr__cl_sgemm(cl, M, N, K, tr__mat_of(dX, K, 0, 0), tr__mat_of(W1, N, 0, 0),
                                      tout(dout[4], N, 0, 0)), TR_OK); /* let go: not reused */
        reused[w][6] = cl->wpacks_reused;
        for (i = 0; i < 6; i++) {
            out[w][i] = (float *)malloc((size_t)M * N * 4);
            down(cl, out[w][i], dout[i], (size_t)M * N);
            tr__cl_free(cl, dout[i]);
        }
        tr__cl_free(cl, dreg), tr__cl_free(cl, dX);
    }
    for (i = 0; i < 7; i++) {
        if (i < 6) assert_memory_equal(out[0][i], out[1][i], (size_t)M * N * 4), free(out[0][i]), free(out[1][i]);
        assert_int_equal(reused[0][i], 0);
        assert_int_equal(reused[1][i], want[i]);
    }
    free(reg), free(X);
}

/* The SwiGLU backward written only as its products' packing (tr__op_swiglu_bwd with cols, in a packing window: the
   model's backward) against the fp32 dg and the same products: the same bits, the fp32 dg never written, and a
   product reading dg otherwise than as packed fails; g and then also d act given as 16-bit values too; and the packing
   in the caller's room (given misaligned, at + 4 bytes: a tensor-core device's dbig), operand slot A untouched. tok 0: the channel layout (rows of gate | up, the weight
   gradient dgᵀ h and dg W); 1: the token mix's (per batch 2 It rows of D: dg_b h_bᵀ summed, W2ᵀ dg_b). */
static void run_swiglu_bwd_kept(tr_ctx *ctx, tr__cl *cl, int fdt, int tok, long rows, long width, size_t cols, size_t n, uint64_t seed) {
    const size_t ng = (size_t)rows * 2 * width, nd = (size_t)rows * width, rpr = 2 * width / cols;
    const size_t nh = tok ? (size_t)rows * n * cols : (size_t)rows * n, nw = tok ? rpr * n : cols * n;
    const size_t nc1 = tok ? rpr * n : cols * n, nc2 = tok ? (size_t)rows * n * cols : (size_t)rows * n;
    float *G = (float *)malloc(ng * 4), *DA = (float *)malloc(nd * 4), *H = (float *)malloc(nh * 4), *W = (float *)malloc(nw * 4);
    float *out[5][2], *dG, *dDA, *dH, *dW, *ddg[5], *dout[5][2], *Z = (float *)calloc(TR__MAX(ng, TR__MAX(nc1, nc2)), 4); /* (zeros) */
    float *dG16, *dGs, *dDA16, *room = NULL, *slot = NULL;
    tr__swiglu_desc sd;
    tr__cl_packed pk = tr__cl_packed_of(NULL, cols, tok ? 2 * width : 0, tok ? rpr : (size_t)rows, cols, tok ? (int)rows : 1, fdt == TR_FWD_FLOAT16 ? 2 : 1);
    int w, i;
    long reused;
    tu_fill(G, ng, seed, 2.0f), tu_fill(DA, nd, seed + 1, 1.0f), tu_fill(H, nh, seed + 2, 1.0f), tu_fill(W, nw, seed + 3, 1.0f);
    tr__round_ref(fdt, G, ng), tr__round_ref(fdt, DA, nd), tr__round_ref(fdt, H, nh), tr__round_ref(fdt, W, nw);
    dG = up(cl, G, ng), dDA = up(cl, DA, nd), dH = up(cl, H, nh), dW = up(cl, W, nw);
    dG16 = up_half(cl, fdt, G, ng), dGs = up_nan(cl, ng); /* (g given in 16 bits: the fp32 g it is never unpacked into) */
    dDA16 = up_half(cl, fdt, DA, nd);
    for (w = 0; w < 5; w++) { /* fp32 dg; kept packed; kept packed from a 16-bit g; and a 16-bit d act; in a room */
        float *dg = ddg[w] = up(cl, Z, ng);
        dout[w][0] = up(cl, Z, nc1), dout[w][1] = up(cl, Z, nc2);
        if (w == 4) room = up_nan(cl, tr__cl_packed_words(&pk) + 65);
        if (w) { /* operand slot A full of NaN: the packing's padding, which no product may read */
            slot = tr__cl_scratch(cl, TR__CL_SLOT_PACK_A, 1 << 16);
            assert_non_null(slot);
            assert_int_equal(tr__cl_fill(cl, slot, 0x7fc07fc0u, cl->slot_floats[TR__CL_SLOT_PACK_A] * 4), TR_OK);
        }
        tr__op_pack_window(ctx, w);
        reused = cl->packs_reused;
        memset(&sd, 0, sizeof sd);
        sd.fdt = fdt, sd.bwd = 1, sd.rows = rows, sd.width = width, sd.gs = 2 * width, sd.das = width, sd.cols = w ? cols : 0;
        sd.g = w >= 2 ? tr__buf_of(dG16 + 3, fdt) : tr__f32(dG), sd.g_room = dGs, sd.da = w >= 3 ? tr__buf_of(dDA16 + 3, fdt) : tr__f32(dDA);
        sd.out = tr__f32(dg), sd.room = w == 4 ? (float *)(void *)((char *)room + 4) : NULL;
        assert_int_equal(tr__op_swiglu_bwd(ctx, &sd), TR_OK);
        if (!tok) {
            assert_int_equal(tr__op_sgemm(ctx, cols, n, rows, tr__mat_of(dg, cols, 0, 1), tr__mat_of(dH, n, 0, 0), tout(dout[w][0], n, 0, 1)), TR_OK);
            assert_int_equal(tr__op_sgemm_rnd(ctx, fdt, 1, rows, n, cols, tr__mat_of(dg, cols, 0, 0), tr__mat_of(dW, n, 0, 0),
                                              tout(dout[w][1], n, 0, 1)), TR_OK);
        } else {
            assert_int_equal(tr__op_sgemm_batched(ctx, (int)rows, rpr, n, cols, tr__mat_of(dg, cols, 2 * width, 0), tr__mat_of(dH, cols, n * cols, 1),
                                                  tout(dout[w][0], n, 0, 1)), TR_OK);
            assert_int_equal(tr__op_sgemm_rnd(ctx, fdt, (int)rows, n, cols, rpr, tr__mat_of(dW, n, 0, 1), tr__mat_of(dg, cols, 2 * width, 0),
                                              tout(dout[w][1], cols, n * cols, 1)), TR_OK);
        }
        if (w) { /* both products took the packing; one reading dg another way fails */
            assert_int_equal(cl->packs_reused - reused, 2);
            assert_int_equal(tr__op_sgemm(ctx, rows - 1, n, cols, tr__mat_of(dg + cols, cols, 0, 0), tr__mat_of(dH, cols, 0, 1),
                                          tout(dout[w][0], n, 0, 0)), TR_ERR_INVALID_ARG);
        }
        tr__op_pack_window(ctx, 0);
        for (i = 0; i < 2; i++) {
            out[w][i] = (float *)malloc((i ? nc2 : nc1) * 4);
            down(cl, out[w][i], dout[w][i], i ? nc2 : nc1);
        }
    }
    assert_all_nan(cl, slot, cl->slot_floats[TR__CL_SLOT_PACK_A]); /* (the last packing went to the room) */
    { /* and the room holds it (its first row, whole: the padding past the rows need not be written) */
        float *h = (float *)malloc(cols / 2 * 4 + 4);
        size_t j, nan = 0;
        down(cl, h, (const float *)tr__cl_room((float *)(void *)((char *)room + 4)), cols / 2);
        for (j = 0; j < cols / 2; j++) nan += h[j] != h[j];
        assert_int_equal(nan, 0);
        free(h), tr__cl_free(cl, room);
    }
    for (w = 1; w < 5; w++) {
        assert_memory_equal(out[0][0], out[w][0], nc1 * 4);
        assert_memory_equal(out[0][1], out[w][1], nc2 * 4);
        down(cl, G, ddg[w], ng);
        assert_memory_equal(G, Z, ng * 4); /* (the fp32 dg was never written) */
    }
    assert_all_nan(cl, dGs, ng);
    for (w = 0; w < 5; w++) {
        tr__cl_free(cl, ddg[w]), tr__cl_free(cl, dout[w][0]), tr__cl_free(cl, dout[w][1]);
        free(out[w][0]), free(out[w][1]);
    }
    tr__cl_free(cl, dG), tr__cl_free(cl, dDA), tr__cl_free(cl, dH), tr__cl_free(cl, dW), tr__cl_free(cl, dG16), tr__cl_free(cl, dGs), tr__cl_free(cl, dDA16);
    free(G), free(DA), free(H), free(W), free(Z);
}

static void mma_products(tr_ctx *ctx, tr__cl *cl) {
    static const size_t sz[][3] = {{1, 1, 1}, {3, 5, 7}, {97, 17, 97}, {130, 65, 33}, {129, 257, 45}, {300, 31, 130}};
    size_t i;
    int f, ta, tb;
    for (f = 0; f < 2; f++) {
        g_ref_fdt = f ? TR_FWD_FLOAT16 : TR_FWD_BFLOAT16;
        for (i = 0; i < sizeof sz / sizeof sz[0]; i++)
            for (ta = 0; ta < 2; ta++)
                for (tb = 0; tb < 2; tb++)
                    run_gemm(cl, ta, tb, sz[i][0], sz[i][1], sz[i][2], (i + (size_t)tb) % 2 ? 3 : 0, (int)(i & 1), 0, 300 + 4 * i + 2 * (size_t)ta + (size_t)tb);
        for (ta = 0; ta < 2; ta++) /* 16-byte aligned rows, interior tiles: the float4 fetches (and a short last k-tile) */
            for (tb = 0; tb < 2; tb++) {
                run_gemm(cl, ta, tb, 256, 132, 64, 0, ta, 0, 330 + 2 * (size_t)ta + (size_t)tb);
                run_gemm(cl, ta, tb, 260, 256, 100, 0, tb, 0, 335 + 2 * (size_t)ta + (size_t)tb);
            }
        run_gemm(cl, 1, 0, 70, 33, 2100, 0, 1, 3, 340); /* split-K */
        run_gemm(cl, 0, 1, 17, 5, 1000, 1, 0, 5, 341);
        run_batched(cl, 5, 0, 0, 33, 20, 97, 0, 0, 0, 0, 342);
        run_batched(cl, 6, 1, 0, 13, 17, 7, 1, 0, 1, 0, 343);
        run_batched(cl, 7, 0, 1, 9, 70, 33, 1, 1, 1, 3, 344); /* batch sum in 3 groups */
        g_raw_inputs = 1;
        run_gemm(cl, 0, 1, 130, 65, 33, 1, 0, 0, 345);
        run_gemm(cl, 1, 0, 97, 140, 70, 0, 1, 0, 346);
        g_raw_inputs = 0;
        assert_true(ctx->dev_active); /* tr__op_sgemm_rnd takes the device path (tu_cl_open made it active) */
        run_gemm_rnd(ctx, cl, g_ref_fdt, 3, 0, 1, 130, 70, 45, 0, 350);
        run_gemm_rnd(ctx, cl, g_ref_fdt, 1, 0, 0, 97, 256, 64, 1, 351);
        run_gemm_rnd(ctx, cl, g_ref_fdt, 1, 1, 0, 33, 40, 3000, 0, 352); /* split-K on a big device: rounded after the sum */
        run_gemm_rnd(ctx, cl, g_ref_fdt, 1, 1, 0, 131, 258, 47, 0, 353);  /* 16-bit C past whole tiles */
        run_swiglu_fused(ctx, cl, g_ref_fdt, 0, 1, 291, 80, 40, 3, 1, 360);
        run_swiglu_fused(ctx, cl, g_ref_fdt, 0, 1, 130, 64, 64, 0, 0, 361);
        run_swiglu_fused(ctx, cl, g_ref_fdt, 0, 1, 1, 3, 7, 1, 1, 362);
        run_swiglu_fused(ctx, cl, g_ref_fdt, 0, 1, 300, 203, 33, 0, 1, 363);
        run_swiglu_fused(ctx, cl, g_ref_fdt, 0, 1, 291, 80, 40, 3, 2, 358); /* gu as 16 bits */
        run_swiglu_fused(ctx, cl, g_ref_fdt, 0, 1, 130, 3, 7, 0, 2, 359);   /* odd half: floats, then converted */
        run_swiglu_fused(ctx, cl, g_ref_fdt, 1, 3, 40, 70, 97, 0, 1, 364); /* the token mix: S = 97 deep */
        run_swiglu_fused(ctx, cl, g_ref_fdt, 1, 2, 33, 13, 9, 0, 0, 365);
        run_swiglu_fused(ctx, cl, g_ref_fdt, 1, 1, 130, 3, 5, 0, 1, 366);
        run_token_mlp(ctx, cl, g_ref_fdt, 3, 70, 97, 40, 1, 367); /* (It, S, D): S = 97 deep, It past a tile */
        run_token_mlp(ctx, cl, g_ref_fdt, 2, 13, 9, 33, 0, 368);  /* odd D: the packed act's last pair half padding */
        run_token_mlp(ctx, cl, g_ref_fdt, 1, 130, 5, 130, 1, 369);
        run_token_mlp(ctx, cl, g_ref_fdt, 3, 70, 97, 40, 2, 370); /* mix as 16 bits */
        run_token_mlp(ctx, cl, g_ref_fdt, 2, 13, 9, 33, 2, 371); /* odd D: written as floats, then converted */
        run_swiglu_packed(ctx, cl, g_ref_fdt, 1, 1, 40, 35, 291, 370); /* (D, I, rows): odd widths, the scalar fetches */
        run_swiglu_packed(ctx, cl, g_ref_fdt, 1, 1, 64, 48, 200, 371);
        run_swiglu_packed(ctx, cl, g_ref_fdt, 0, 3, 97, 20, 40, 372); /* (S, It, D) per batch, summed */
        run_pack_window(cl, 380);
        run_weights_still(cl, 383);
        run_swiglu_bwd_kept(ctx, cl, g_ref_fdt, 0, 150, 48, 96, 24, 381); /* (rows, I, 2I, D) */
        run_swiglu_bwd_kept(ctx, cl, g_ref_fdt, 1, 3, 5 * 32, 32, 13, 382); /* (B, It D, D, S): It = 5 */
    }
    g_ref_fdt = 0;
    run_gemm(cl, 0, 1, 130, 65, 33, 1, 0, 0, 347);
}

static void test_sgemm_mma(void **state) {
    /* tr_k_hmma's tiles: rows past the packing's 128 (HM=256), warps of 64 x 64, two stages */
    static const char *const tiles[] = {"MMA=2", "MMA=2,HM=256,HN=128,HW=64,HS=2", "MMA=2,HM=64,HN=256,HW=64,HS=2", "MMA=2,WG=1"};
    static const int tile_mn[] = {0, 256128, 64256, 128128};
    const char *old = getenv("TINYREC_CL_SGEMM");
    tr__cl *cl = dev();
    tr_ctx *ctx2;
    size_t i;
    (void)state;
    assert_int_equal(cl->gemm.mma, tr__cl_get_info(cl)->nv_sm >= 80 ? 1 : 0); /* automatic: where mma.sync exists */
    if (cl->gemm.mma) mma_products(g_ctx, cl);                                 /* the inline-PTX kernels */
    for (i = 0; i < sizeof tiles / sizeof tiles[0]; i++) {
        setenv("TINYREC_CL_SGEMM", tiles[i], 1); /* the emulation, any device: the default tile, then the others */
        ctx2 = tu_ctx(2, 1);
        cl = tu_cl_open(ctx2);
        assert_int_equal(cl->gemm.mma, 2);
        if (i) assert_int_equal(cl->gemm.hm * 1000 + cl->gemm.hn, tile_mn[i]); /* (taken, not refused) */
        assert_null(cl->mma_program); /* built at the first low-precision product */
        mma_products(ctx2, cl);
        assert_non_null(cl->mma_program);
        assert_int_equal(cl->wg_built, i == 3 ? 2 : 0); /* (WG=1: wgmma's accumulator layout and epilogue, emulated) */
        tr_ctx_destroy(ctx2);
    }
    setenv("TINYREC_CL_SGEMM", "MMA=0", 1);
    ctx2 = tu_ctx(2, 1);
    assert_int_equal(tu_cl_open(ctx2)->gemm.mma, 0);
    tr_ctx_destroy(ctx2);
    if (old) setenv("TINYREC_CL_SGEMM", old, 1);
    else unsetenv("TINYREC_CL_SGEMM");
}

/* Attention forward and backward vs the CPU references. */
static void run_attention(tr__cl *cl, int B, int S, int H, int hd, uint64_t seed) {
    size_t D = (size_t)H * hd, nq = (size_t)B * S * 3 * D, no = (size_t)B * S * D, nl = (size_t)B * H * S;
    float *qkv = (float *)malloc(nq * 4), *o = (float *)malloc(no * 4), *lse = (float *)malloc(nl * 4), *dO = (float *)malloc(no * 4);
    float *dqkv = (float *)malloc(nq * 4), *ro = (float *)malloc(no * 4), *rl = (float *)malloc(nl * 4), *rd = (float *)malloc(nq * 4);
    float *scr = (float *)malloc((size_t)(S + 16) * 4 * 8);
    float *dq, *dout, *dl, *ddo, *dd;
    tr__attention_bwd_args ba;
    char what[128];
    tu_fill(qkv, nq, seed, 1.5f), tu_fill(dO, no, seed + 1, 1.0f), tu_fill(dqkv, nq, seed + 2, 1.0f);
    dq = up(cl, qkv, nq), dout = up(cl, dqkv, no), dl = up(cl, dqkv, nl), ddo = up(cl, dO, no), dd = up(cl, dqkv, nq);
    assert_int_equal(cl_att_fwd(cl, 0, B, S, H, hd, dq, dout, dl, 0), TR_OK);
    down(cl, o, dout, no), down(cl, lse, dl, nl);
    tr__attention_fwd_ref(B, S, H, hd, qkv, ro, rl, scr, 1);
    snprintf(what, sizeof what, "attention fwd o B=%d S=%d H=%d hd=%d", B, S, H, hd);
    check(what, o, ro, no, 2e-5, 1e-4, &g_worst_att);
    snprintf(what, sizeof what, "attention fwd lse B=%d S=%d H=%d hd=%d", B, S, H, hd);
    check(what, lse, rl, nl, 2e-5, 1e-5, &g_worst_att);
    /* backward from the reference forward (so both sides see the same o and lse) */
    assert_int_equal(tr__cl_write(cl, dout, ro, no * 4), TR_OK);
    assert_int_equal(tr__cl_write(cl, dl, rl, nl * 4), TR_OK);
    assert_int_equal(cl_att_bwd(cl, 0, B, S, H, hd, dq, dout, dl, ddo, dd, 0), TR_OK);
    down(cl, dqkv, dd, nq);
    ba.S = S, ba.H = H, ba.hd = hd, ba.qkv = qkv, ba.o = ro, ba.lse = rl, ba.do_ = dO, ba.dqkv = rd, ba.scratch = scr;
    tr__attention_bwd_ref(B, &ba, 1);
    snprintf(what, sizeof what, "attention bwd B=%d S=%d H=%d hd=%d", B, S, H, hd);
    check(what, dqkv, rd, nq, 2e-5, 1e-4, &g_worst_att);
    tr__cl_free(cl, dq), tr__cl_free(cl, dout), tr__cl_free(cl, dl), tr__cl_free(cl, ddo), tr__cl_free(cl, dd);
    free(qkv), free(o), free(lse), free(dO), free(dqkv), free(ro), free(rl), free(rd), free(scr);
}

static void test_attention(void **state) {
    static const int cases[][4] = {{1, 1, 1, 1}, {2, 5, 3, 8}, {1, 97, 2, 64}, {2, 17, 1, 1}, {1, 33, 3, 16}, {1, 70, 1, 96}, {1, 20, 2, 256}, {3, 1, 2, 64}, {1, 66, 1, 65}};
    tr__cl *cl = dev();
    size_t i;
    (void)state;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) run_attention(cl, cases[i][0], cases[i][1], cases[i][2], cases[i][3], 70 + i);
    assert_int_equal(cl_att_fwd(cl, 0, 1, 4, 1, 257, NULL, NULL, NULL, 0), TR_ERR_UNSUPPORTED);
    assert_int_equal(cl_att_fwd(cl, 0, 0, 4, 1, 8, NULL, NULL, NULL, 0), TR_OK);
    print_message("worst NMSE: sgemm %.3g, attention %.3g\n", g_worst_gemm, g_worst_att);
}

/* The PTX rewrite behind the wgmma kernels (tr__cl_wg_ptx): the marked comments become instructions and the target
   sm_90a; other text is left alone, and PTX without marks or for another target is refused. */
static void test_wg_ptx(void **state) {
    static const char in[] = ".version 9.0\n.target sm_90, texmode_independent\n// a comment\n\t//@ wgmma.fence.sync.aligned;\n\tmov.u32 %r1, 0;\n";
    static const char want[] = ".version 9.0\n.target sm_90a, texmode_independent\n// a comment\n\twgmma.fence.sync.aligned;\n\tmov.u32 %r1, 0;\n";
    char out[sizeof in + 2];
    (void)state;
    assert_int_equal(tr__cl_wg_ptx(in, out), strlen(want));
    assert_string_equal(out, want);
    assert_int_equal(tr__cl_wg_ptx(".target sm_90a\n//@ x;\n", out), 0); /* already sm_90a */
    assert_int_equal(tr__cl_wg_ptx(".target sm_80\n//@ x;\n", out), 0);
    assert_int_equal(tr__cl_wg_ptx(".target sm_100\n//@ x;\n", out), 0);
    assert_int_equal(tr__cl_wg_ptx(".target sm_90\nmov.u32 %r1, 0;\n", out), 0); /* no marks */
}

/* The defines string and the automatic configurations for a few device shapes. */
static void test_sgemm_defines(void **state) {
    tr__cl_info in;
    tr__cl_gemm_cfg g;
    char buf[256];
    (void)state;
    memset(&in, 0, sizeof in);
    in.is_gpu = 1, in.max_wg = 1024, in.max_item[0] = in.max_item[1] = 1024, in.max_item[2] = 64, in.local_mem = 49152, in.compute_units = 132;
    tr__cl_sgemm_defines(&in, buf, sizeof buf);
    assert_string_equal(buf, "-DTR_GEMM_TM=128 -DTR_GEMM_TN=128 -DTR_GEMM_TK=16 -DTR_GEMM_WM=8 -DTR_GEMM_WN=8 -DTR_GEMM_VW=4");
    in.nv_sm = 90; /* NVIDIA sm_90: cp.async and the tensor-core kernels (their own program: no define here) */
    tr__cl_sgemm_defines(&in, buf, sizeof buf);
    assert_string_equal(buf, "-DTR_GEMM_TM=128 -DTR_GEMM_TN=128 -DTR_GEMM_TK=16 -DTR_GEMM_WM=8 -DTR_GEMM_WN=8 -DTR_GEMM_VW=4 -DTR_GEMM_CP=1 -DTR_GEMM_ST=2");
    tr__cl_gemm_config(&in, &g);
    assert_int_equal(g.mma, 1);
    in.local_mem = 32768; /* too little local memory for the tensor-core tiles */
    tr__cl_gemm_config(&in, &g);
    assert_int_equal(g.mma, 0);
    in.local_mem = 49152, in.nv_sm = 0;
    in.max_wg = 128; /* a small GPU */
    tr__cl_gemm_config(&in, &g);
    assert_int_equal(g.tm, 128), assert_int_equal(g.tn, 64);
    in.max_wg = 256, in.local_mem = 8192; /* little local memory */
    tr__cl_gemm_config(&in, &g);
    assert_true(tr__cl_gemm_local_bytes(&g) <= 8192 && (g.tm / g.wm) * (g.tn / g.wn) <= 256);
    in.is_gpu = 0, in.max_wg = 4096, in.local_mem = 1 << 20; /* PoCL */
    tr__cl_gemm_config(&in, &g);
    assert_int_equal(g.tm, 64), assert_int_equal(g.vw, 4);
    in.max_wg = 1, in.max_item[0] = in.max_item[1] = 1; /* degenerate: 1x1 tiles */
    tr__cl_gemm_config(&in, &g);
    assert_int_equal(g.tm, 1), assert_int_equal(g.tn, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sgemm_defines),
        cmocka_unit_test(test_wg_ptx),  cmocka_unit_test(test_sgemm_shapes),       cmocka_unit_test(test_sgemm_split),
        cmocka_unit_test(test_sgemm_batched), cmocka_unit_test(test_sgemm_swiglu), cmocka_unit_test(test_sgemm_gate_up), cmocka_unit_test(test_sgemm_env_override), cmocka_unit_test(test_sgemm_cp_staging), cmocka_unit_test(test_sgemm_mma),
        cmocka_unit_test(test_attention),
    };
    return cmocka_run_group_tests_name("opencl_gemm", tests, setup, teardown);
}
#else
TU_NO_OPENCL_MAIN("opencl_gemm")
#endif
