/* One loop over the op table (tr__ops, DESIGN §5): every op x operand type x device against its scalar reference.
   The devices are the CPU at each SIMD level this machine runs, and the OpenCL device (PoCL in CI) where the build has
   OpenCL; an op runs with operands of a type where the table says that device takes it. Operands are random values
   of the type (so a 16-bit buffer holds them exactly); the reference computes in fp32 on the same values and rounds
   where the op rounds (to the type, for a 16-bit computation).
   Tolerances are atol + rtol * |ref| with atol 1e-5 and rtol one unit in the last place of the output's type (2^-7
   bfloat16, 2^-10 float16; 1e-5 for fp32: a SIMD or device kernel sums in another order than the reference, and a
   16-bit output may then round to the neighbour of the reference's). Exact ops (add, half, round, scale, the finite
   test) are compared bit for bit. A row of the table without a case here fails the suite. */
#define TINYREC_IMPLEMENTATION
#include "test_util.h"

typedef struct op_env {
    tr_ctx *ctx;
    int kind; /* TR__DEV_* */
    char where[48];
} op_env;

static double rtol_of(int dt) { return dt == TR__BF16 ? 1.0 / 128 : dt == TR__F16 ? 1.0 / 1024 : 1e-5; }

/* n random values of type dt's precision (in fp32), from seed. */
static float *vals(size_t n, uint64_t seed, float scale, int dt) {
    float *x = (float *)malloc(n * sizeof(float) + 4);
    assert_non_null(x);
    tu_fill(x, n, seed, scale);
    tr__round_ref(dt, x, n);
    return x;
}

/* n values of host fp32 h (of dt's precision) as a buffer of type dt in the environment's memory. */
static tr__buf put(op_env *e, const float *h, size_t n, int dt) {
    size_t bytes = n * tr__dtypes[dt].bytes;
    void *d = tr__dalloc(e->ctx, (bytes + 7) & ~(size_t)3, 0);
    assert_non_null(d);
    if (dt && h) {
        uint16_t *t = (uint16_t *)malloc(n * 2 + 2);
        tr__half_ref(dt, 0, (float *)(uintptr_t)h, t, n);
        assert_int_equal(tr__dput(e->ctx, d, t, bytes), TR_OK);
        free(t);
    } else if (h)
        assert_int_equal(tr__dput(e->ctx, d, h, bytes), TR_OK);
    return tr__buf_of(d, dt);
}

/* A host fp32 copy of n values of buffer b (free() it). */
static float *get(op_env *e, tr__buf b, size_t n) {
    float *h = (float *)malloc(n * sizeof(float) + 4);
    assert_non_null(h);
    if (b.dt) {
        uint16_t *t = (uint16_t *)malloc(n * 2 + 2);
        assert_int_equal(tr__dget(e->ctx, t, b.p, n * 2), TR_OK);
        tr__half_ref(b.dt, 1, h, t, n);
        free(t);
    } else
        assert_int_equal(tr__dget(e->ctx, h, b.p, n * sizeof(float)), TR_OK);
    return h;
}

static void check(op_env *e, const char *op, int dt, const char *what, const float *got, const float *ref, size_t n, int exact) {
    char msg[160];
    snprintf(msg, sizeof msg, "%s, %s, %s: %s", e->where, op, tr__dtypes[dt].name, what);
    if (exact) {
        size_t i;
        for (i = 0; i < n; i++)
            if (memcmp(&got[i], &ref[i], 4) != 0) fail_msg("%s[%zu] = %.9g, the reference's %.9g", msg, i, (double)got[i], (double)ref[i]);
    } else
        tu_assert_close(msg, got, ref, n, 1e-5, rtol_of(dt));
}

/* --- the cases: one per row of tr__ops ---------------------------------------------------------------------------- */
static void case_add(op_env *e, int dt) {
    const size_t n = 1031;
    float *a = vals(n, 1, 2.0f, dt), *b = vals(n, 2, 2.0f, dt), *ref = (float *)malloc(n * 4), *got;
    tr__buf da = put(e, a, n, dt), db = put(e, b, n, dt), dy = put(e, NULL, n, dt);
    size_t i;
    for (i = 0; i < n; i++) ref[i] = a[i] + b[i];
    tr__round_ref(dt, ref, n);
    assert_int_equal(tr__op_add(e->ctx, dt, n, da, db, dy), TR_OK);
    check(e, "add", dt, "y", got = get(e, dy, n), ref, n, 1);
    tr__dfree(e->ctx, da.p), tr__dfree(e->ctx, db.p), tr__dfree(e->ctx, dy.p), free(a), free(b), free(ref), free(got);
}

/* C = A Bᵀ (the models' weight layout) with A and B of type dt; rnd: C rounded to dt and stored as dt. */
static void run_sgemm(op_env *e, int dt, int rnd) {
    const size_t M = 37, N = 30, K = 45; /* (N even: the tensor cores store a 16-bit C two values at a time) */
    float *A = vals(M * K, 3, 1.0f, dt), *B = vals(N * K, 4, 1.0f, dt), *ref = (float *)malloc(M * N * 4), *got;
    tr__buf dA = put(e, A, M * K, dt), dB = put(e, B, N * K, dt), dC = put(e, NULL, M * N, rnd ? dt : TR__F32);
    tr__mat ma = tr__mat16_of(dA.p, K, 0, 0, dt), mb = tr__mat16_of(dB.p, K, 0, 1, dt);
    tr__sgemm_ref(M, N, K, tr__mat_of(A, K, 0, 0), tr__mat_of(B, K, 0, 1), tr__out_of(ref, N, 0, 0));
    if (rnd) {
        tr__round_ref(dt, ref, M * N);
        assert_int_equal(tr__op_sgemm_rnd(e->ctx, dt, 1, M, N, K, ma, mb, tr__out16_of(dC.p, N, 0, 0, dt)), TR_OK);
    } else
        assert_int_equal(tr__op_sgemm(e->ctx, M, N, K, ma, mb, tr__out_in(tr__out_of(dC.p, N, 0, 0), dt)), TR_OK); /* (in dt, as a model's) */
    check(e, rnd ? "sgemm_rnd" : "sgemm", dt, "C", got = get(e, dC, M * N), ref, M * N, 0);
    tr__dfree(e->ctx, dA.p), tr__dfree(e->ctx, dB.p), tr__dfree(e->ctx, dC.p), free(A), free(B), free(ref), free(got);
}
static void case_sgemm(op_env *e, int dt) { run_sgemm(e, dt, 0); }

/* A 16-bit A in whole tiles (rows a multiple of 128, K of 32) is read in place by the tensor-core kernels, not packed;
   batched too (batch b's rows right after batch b - 1's); B, fp32, is packed. */
static void run_sgemm_in_place(op_env *e, int dt) {
    const size_t M = 256, N = 30, K = 64, nb = 2;
    float *A = vals(nb * M * K, 8, 1.0f, dt), *B = vals(N * K, 9, 1.0f, TR__F32), *ref = (float *)malloc(nb * M * N * 4), *got, *Br = vals(N * K, 9, 1.0f, dt);
    tr__buf dA = put(e, A, nb * M * K, dt), dB = put(e, B, N * K, TR__F32), dC = put(e, NULL, nb * M * N, TR__F32);
    const long before = e->ctx->cl->packs_in_place;
    size_t b;
    for (b = 0; b < nb; b++)
        tr__sgemm_ref(M, N, K, tr__mat_of(A + b * M * K, K, 0, 0), tr__mat_of(Br, K, 0, 1), tr__out_of(ref + b * M * N, N, 0, 0));
    assert_int_equal(tr__op_sgemm_batched(e->ctx, (int)nb, M, N, K, tr__mat16_of(dA.p, K, M * K, 0, dt), tr__mat_of(dB.p, K, 0, 1),
                                          tr__out_in(tr__out_of(dC.p, N, M * N, 0), dt)),
                     TR_OK);
    assert_int_equal(e->ctx->cl->packs_in_place, before + 1);
    check(e, "sgemm", dt, "C, A read in place", got = get(e, dC, nb * M * N), ref, nb * M * N, 0);
    tr__dfree(e->ctx, dA.p), tr__dfree(e->ctx, dB.p), tr__dfree(e->ctx, dC.p), free(A), free(B), free(Br), free(ref), free(got);
}
/* A 16-bit depth-major B (K x N a batch, K = 97: the token mix's input) is read in place at any K: the kernels read no
   depth past K, and batch b starts right after batch b - 1's K rows */
static void run_sgemm_in_place_dm(op_env *e, int dt) {
    const size_t M = 48, N = 64, K = 97, nb = 3;
    float *A = vals(M * K, 10, 1.0f, TR__F32), *Ar = vals(M * K, 10, 1.0f, dt), *B = vals(nb * K * N, 11, 1.0f, dt), *ref = (float *)malloc(nb * M * N * 4), *got;
    tr__buf dA = put(e, A, M * K, TR__F32), dB = put(e, B, nb * K * N, dt), dC = put(e, NULL, nb * M * N, TR__F32);
    const long before = e->ctx->cl->packs_in_place;
    size_t b;
    for (b = 0; b < nb; b++)
        tr__sgemm_ref(M, N, K, tr__mat_of(Ar, K, 0, 0), tr__mat_of(B + b * K * N, N, 0, 0), tr__out_of(ref + b * M * N, N, 0, 0));
    assert_int_equal(tr__op_sgemm_batched(e->ctx, (int)nb, M, N, K, tr__mat_of(dA.p, K, 0, 0), tr__mat16_of(dB.p, N, K * N, 0, dt),
                                          tr__out_in(tr__out_of(dC.p, N, M * N, 0), dt)),
                     TR_OK);
    assert_int_equal(e->ctx->cl->packs_in_place, before + 1);
    check(e, "sgemm", dt, "C, depth-major B read in place", got = get(e, dC, nb * M * N), ref, nb * M * N, 0);
    tr__dfree(e->ctx, dA.p), tr__dfree(e->ctx, dB.p), tr__dfree(e->ctx, dC.p), free(A), free(Ar), free(B), free(ref), free(got);
}
static void case_sgemm_rnd(op_env *e, int dt) { run_sgemm(e, dt, 1); }

/* The norms, forward (x + add) and backward, all operands of type dt; rows: the row norms, else the column norms. D 256:
   the row norms 8 rows a work-group on OpenCL (tr_k_rms_rows_*16w; 33 rows: a last group part empty). */
static void run_norm(op_env *e, int dt, int cols, int D) {
    const int B = 3, S = 11;
    const long rows = cols ? B : (long)B * S;
    const size_t n = (size_t)B * S * D, nst = cols ? (size_t)B * D : (size_t)B * S;
    float *x = vals(n, 5, 2.0f, dt), *ad = vals(n, 6, 1.0f, dt), *dy = vals(n, 7, 1.0f, dt), *sum = (float *)malloc(n * 4);
    float *y = (float *)malloc(n * 4), *rs = (float *)malloc(nst * 4), *dx = (float *)malloc(n * 4), *got, *grs;
    tr__buf dX = put(e, x, n, dt), dA = put(e, ad, n, dt), dY = put(e, NULL, n, dt), dDY = put(e, dy, n, dt), dDX = put(e, NULL, n, dt);
    tr__buf dR = put(e, NULL, nst, TR__F32);
    tr__norm_desc d;
    size_t i;
    for (i = 0; i < n; i++) sum[i] = x[i] + ad[i];
    tr__round_ref(dt, sum, n); /* (the residual sum is formed in the computation's precision) */
    if (cols) tr__rms_cols_fwd_ref(B, S, D, sum, NULL, y, rs, 1e-5f, 1);
    else tr__rms_rows_fwd_ref(rows, D, sum, NULL, y, rs, 1e-5f, 1);
    tr__round_ref(dt, y, n);
    memset(&d, 0, sizeof d);
    d.kind = cols ? TR__NORM_COLS_FWD : TR__NORM_ROWS_FWD, d.fdt = dt, d.rows = rows, d.S = S, d.D = D, d.in1 = dX, d.in2 = dA, d.out = dY;
    d.rstd = (float *)dR.p, d.eps = 1e-5f;
    assert_int_equal(tr__op_norm(e->ctx, &d), TR_OK);
    check(e, cols ? "norm_cols" : "norm_rows", dt, "forward y", got = get(e, dY, n), y, n, 0), free(got);
    check(e, cols ? "norm_cols" : "norm_rows", dt, "forward rstd", grs = get(e, dR, nst), rs, nst, 0), free(grs);
    /* the backward from the reference's y and rstd */
    tr__dfree(e->ctx, dY.p), tr__dfree(e->ctx, dR.p);
    dY = put(e, y, n, dt), dR = put(e, rs, nst, TR__F32);
    if (cols) tr__rms_cols_bwd_ref(B, S, D, dy, y, rs, dx, 1);
    else tr__rms_rows_bwd_ref(rows, D, dy, y, rs, dx, 1);
    tr__round_ref(dt, dx, n);
    d.kind = cols ? TR__NORM_COLS_BWD : TR__NORM_ROWS_BWD, d.in1 = dDY, d.in2 = dY, d.out = dDX, d.rstd = (float *)dR.p, d.eps = 0;
    assert_int_equal(tr__op_norm(e->ctx, &d), TR_OK);
    check(e, cols ? "norm_cols" : "norm_rows", dt, "backward dx", got = get(e, dDX, n), dx, n, 0), free(got);
    tr__dfree(e->ctx, dX.p), tr__dfree(e->ctx, dA.p), tr__dfree(e->ctx, dY.p), tr__dfree(e->ctx, dDY.p), tr__dfree(e->ctx, dDX.p), tr__dfree(e->ctx, dR.p);
    free(x), free(ad), free(dy), free(sum), free(y), free(rs), free(dx);
}
static void case_norm_rows(op_env *e, int dt) { run_norm(e, dt, 0, 40), run_norm(e, dt, 0, 256); }
static void case_norm_cols(op_env *e, int dt) { run_norm(e, dt, 1, 40); }

enum { SW_R = 7, SW_W = 45, SW_GS = 2 * SW_W + 3 };
static void case_swiglu_fwd(op_env *e, int dt) {
    const size_t ng = (size_t)SW_R * SW_GS, na = (size_t)SW_R * SW_W;
    float *g = vals(ng, 8, 3.0f, dt), *ref = (float *)malloc(na * 4), *got;
    tr__buf dG = put(e, g, ng, dt), dO = put(e, NULL, na, dt);
    long r, j;
    for (r = 0; r < SW_R; r++)
        for (j = 0; j < SW_W; j++) {
            float gate = g[r * SW_GS + j], up = g[r * SW_GS + SW_W + j];
            ref[r * SW_W + j] = tr__round1(dt, tr__round1(dt, gate / (1.0f + expf(-gate))) * up);
        }
    assert_int_equal(tr__op_swiglu_fwd(e->ctx, dt, SW_R, SW_W, dG, SW_GS, dO, SW_W), TR_OK);
    check(e, "swiglu_fwd", dt, "act", got = get(e, dO, na), ref, na, 0);
    tr__dfree(e->ctx, dG.p), tr__dfree(e->ctx, dO.p), free(g), free(ref), free(got);
}
static void case_swiglu_bwd(op_env *e, int dt) {
    const size_t ng = (size_t)SW_R * SW_GS, na = (size_t)SW_R * SW_W;
    float *g = vals(ng, 9, 3.0f, dt), *da = vals(na, 10, 1.0f, dt), *ref = (float *)calloc(ng, 4), *got;
    tr__buf dG = put(e, g, ng, dt), dDA = put(e, da, na, dt), dDG = put(e, ref, ng, dt);
    tr__swiglu_desc d;
    long r;
    tr__swiglu_bwd_ref(SW_R, SW_W, g, SW_GS, da, SW_W, ref, 1);
    tr__round_ref(dt, ref, ng);
    memset(&d, 0, sizeof d);
    d.fdt = dt, d.bwd = 1, d.rows = SW_R, d.width = SW_W, d.g = dG, d.gs = SW_GS, d.da = dDA, d.das = SW_W, d.out = dDG;
    assert_int_equal(tr__op_swiglu_bwd(e->ctx, &d), TR_OK);
    got = get(e, dDG, ng);
    for (r = 0; r < SW_R; r++) got[r * SW_GS + 2 * SW_W] = got[r * SW_GS + 2 * SW_W + 1] = got[r * SW_GS + 2 * SW_W + 2] = 0; /* (the rows' gaps) */
    check(e, "swiglu_bwd", dt, "dg", got, ref, ng, 0);
    tr__dfree(e->ctx, dG.p), tr__dfree(e->ctx, dDA.p), tr__dfree(e->ctx, dDG.p), free(g), free(da), free(ref), free(got);
}

/* The attention forward and backward: qkv and o of type dt; do of dt on the CPU (a device takes do in fp32:
   tr__cl_att_x16); lse and dqkv fp32. */
static void case_attention(op_env *e, int dt) {
    const int B = 2, S = 9, H = 2, hd = 8, D = H * hd, do_dt = e->kind == TR__DEV_CPU ? dt : TR__F32;
    const size_t nq = (size_t)B * S * 3 * D, no = (size_t)B * S * D, nl = (size_t)B * H * S;
    float *qkv = vals(nq, 11, 1.5f, dt), *dout = vals(no, 12, 1.0f, do_dt), *o = (float *)malloc(no * 4), *lse = (float *)malloc(nl * 4);
    float *dq = (float *)malloc(nq * 4), *scr = (float *)malloc(2 * tr__attention_scratch_floats(S, hd) * 4), *got;
    float *wscr = (float *)malloc((size_t)tr_ctx_num_threads(e->ctx) * tr__attention_scratch_floats(S, hd) * 4);
    tr__buf dQ = put(e, qkv, nq, dt), dO = put(e, NULL, no, dt), dL = put(e, NULL, nl, TR__F32), dDO = put(e, dout, no, do_dt), dDQ = put(e, NULL, nq, TR__F32);
    tr__att_desc d;
    tr__attention_fwd_ref(B, S, H, hd, qkv, o, lse, scr, 1);
    tr__round_ref(dt, o, no);
    memset(&d, 0, sizeof d);
    d.fdt = dt, d.B = B, d.S = S, d.H = H, d.hd = hd, d.qkv = dQ, d.o = dO, d.lse = (float *)dL.p, d.scratch = wscr;
    assert_int_equal(tr__op_attention(e->ctx, &d), TR_OK);
    check(e, "attention", dt, "forward o", got = get(e, dO, no), o, no, 0), free(got);
    check(e, "attention", dt, "forward lse", got = get(e, dL, nl), lse, nl, 0), free(got);
    /* the backward from the reference's o and lse */
    tr__dfree(e->ctx, dO.p), tr__dfree(e->ctx, dL.p);
    dO = put(e, o, no, dt), dL = put(e, lse, nl, TR__F32);
    {
        tr__attention_bwd_args ba;
        memset(&ba, 0, sizeof ba);
        ba.S = S, ba.H = H, ba.hd = hd, ba.qkv = qkv, ba.o = o, ba.lse = lse, ba.do_ = dout, ba.dqkv = dq, ba.scratch = scr;
        tr__attention_bwd_ref(B, &ba, 1);
    }
    tr__round_ref(dt, dq, nq);
    d.bwd = 1, d.o = dO, d.lse = (float *)dL.p, d.do_ = dDO, d.dqkv = (float *)dDQ.p;
    assert_int_equal(tr__op_attention(e->ctx, &d), TR_OK);
    check(e, "attention", dt, "backward dqkv", got = get(e, dDQ, nq), dq, nq, 0), free(got);
    tr__dfree(e->ctx, dQ.p), tr__dfree(e->ctx, dO.p), tr__dfree(e->ctx, dL.p), tr__dfree(e->ctx, dDO.p), tr__dfree(e->ctx, dDQ.p);
    free(qkv), free(dout), free(o), free(lse), free(dq), free(scr), free(wscr);
}

/* The forward on the tensor cores (tr_k_hmma_att_fwd*: a 16-bit qkv and o, head sizes 32, 64, 128) against the scalar
   reference. The kernel rounds p to dt before its product with v (flash attention's rounding point), a relative error
   of at most u (2^-8 bfloat16, 2^-11 float16) in each p, so at most u max|v| in o = sum p v / sum p before o's own
   rounding; that rounding then lands at most one unit of dt (rtol_of) from the reference's. lse sums the fp32 p, as the
   reference does, in another order. */
/* The backward on the tensor cores rounds do, p and ds to dt (relative error u each) as the products' operands. So
   dp = do.v moves by at most e = u sum|do v|, ds = p (dp - Dv) by a = u |ds| + p e (first order), dq = scale sum_j ds k
   by scale sum_j a |k|, dk = scale sum_i ds q by scale sum_i a |q|, and dv = sum_i p do by 2u sum_i p |do|. bound
   (dqkv's layout) = twice that (fp32 sums in another order, products of rounded values) plus one unit of dt for the
   output's own rounding, which test_attention_bwd_mma adds. */
static void attention_bwd_bound(int B, int S, int H, int hd, const float *qkv, const float *lse, const float *dout, double u, float *bound) {
    const int D = H * hd;
    const double scale = 1.0 / sqrt((double)hd);
    double *p = (double *)malloc((size_t)S * S * sizeof(double)), *a = (double *)malloc((size_t)S * S * sizeof(double));
    int b, h, i, j, c;
    assert_non_null(p), assert_non_null(a);
    for (b = 0; b < B; b++)
        for (h = 0; h < H; h++) {
            const size_t ld = (size_t)3 * D;
            const float *Q = qkv + (size_t)b * S * ld + (size_t)h * hd, *K = Q + D, *V = Q + 2 * D, *O = dout + (size_t)b * S * D + (size_t)h * hd;
            float *bq = bound + (size_t)b * S * ld + (size_t)h * hd, *bk = bq + D, *bv = bq + 2 * D;
            for (i = 0; i < S; i++) {
                double dv = 0; /* Dv = do.o = sum_j p dp */
                for (j = 0; j < S; j++) {
                    double s = 0, dp = 0;
                    for (c = 0; c < hd; c++) s += (double)Q[i * ld + c] * K[j * ld + c], dp += (double)O[(size_t)i * D + c] * V[j * ld + c];
                    p[(size_t)i * S + j] = exp(s * scale - lse[((size_t)b * H + h) * S + i]);
                    a[(size_t)i * S + j] = dp, dv += p[(size_t)i * S + j] * dp;
                }
                for (j = 0; j < S; j++) {
                    double e = 0;
                    for (c = 0; c < hd; c++) e += fabs((double)O[(size_t)i * D + c] * V[j * ld + c]);
                    a[(size_t)i * S + j] = u * p[(size_t)i * S + j] * fabs(a[(size_t)i * S + j] - dv) + p[(size_t)i * S + j] * u * e;
                }
            }
            for (i = 0; i < S; i++) /* row i of q (dq) and of k, v (dk, dv) */
                for (c = 0; c < hd; c++) {
                    double sq = 0, sk = 0, sv = 0;
                    for (j = 0; j < S; j++) {
                        sq += a[(size_t)i * S + j] * fabs(K[j * ld + c]);
                        sk += a[(size_t)j * S + i] * fabs(Q[j * ld + c]);
                        sv += 2 * u * p[(size_t)j * S + i] * fabs(O[(size_t)j * D + c]);
                    }
                    bq[i * ld + c] = (float)(2 * scale * sq), bk[i * ld + c] = (float)(2 * scale * sk), bv[i * ld + c] = (float)(2 * sv);
                }
        }
    free(p), free(a);
}

static void run_attention_mma(op_env *e, int dt, int B, int S, int H, int hd, int on) {
    const int D = H * hd;
    const size_t nq = (size_t)B * S * 3 * D, no = (size_t)B * S * D, nl = (size_t)B * H * S;
    float *qkv = vals(nq, 40 + S + hd, 1.5f, dt), *o = (float *)malloc(no * 4), *lse = (float *)malloc(nl * 4), *got;
    float *scr = (float *)malloc(2 * tr__attention_scratch_floats(S, hd) * 4), vmax = 0;
    tr__buf dQ = put(e, qkv, nq, dt), dO = put(e, NULL, no, dt), dL = put(e, NULL, nl, TR__F32);
    const long before = e->ctx->cl->mma_attention;
    tr__att_desc d;
    char what[64];
    size_t i;
    for (i = 0; i < nq; i++)
        if ((i / D) % 3 == 2) vmax = fmaxf(vmax, fabsf(qkv[i]));
    tr__attention_fwd_ref(B, S, H, hd, qkv, o, lse, scr, 1);
    tr__round_ref(dt, o, no);
    memset(&d, 0, sizeof d);
    d.fdt = dt, d.B = B, d.S = S, d.H = H, d.hd = hd, d.qkv = dQ, d.o = dO, d.lse = (float *)dL.p;
    assert_int_equal(tr__op_attention(e->ctx, &d), TR_OK);
    assert_int_equal(e->ctx->cl->mma_attention, before + on); /* (it ran on the tensor-core kernel, or not) */
    snprintf(what, sizeof what, "tensor-core forward o, S %d, hd %d", S, hd);
    got = get(e, dO, no);
    {
        char msg[160];
        snprintf(msg, sizeof msg, "%s, attention, %s, %s", e->where, tr__dtypes[dt].name, what);
        tu_assert_close(msg, got, o, no, (dt == TR__BF16 ? 1.0 / 256 : 1.0 / 2048) * vmax, rtol_of(dt));
    }
    free(got);
    snprintf(what, sizeof what, "tensor-core forward lse, S %d, hd %d", S, hd);
    check(e, "attention", TR__F32, what, got = get(e, dL, nl), lse, nl, 0), free(got);
    { /* the backward from the reference's o and lse, do in fp32 (the tape's), against attention_bwd_bound */
        const long bwd_before = e->ctx->cl->mma_attention_bwd;
        const double u = dt == TR__BF16 ? 1.0 / 256 : 1.0 / 2048;
        float *dout = vals(no, 50 + S + hd, 1.0f, TR__F32), *dq = (float *)malloc(nq * 4), *bound = (float *)malloc(nq * 4);
        tr__buf dDO = put(e, dout, no, TR__F32), dDQ = put(e, NULL, nq, TR__F32);
        tr__attention_bwd_args ba;
        size_t worst = 0;
        double excess = -1;
        memset(&ba, 0, sizeof ba);
        ba.S = S, ba.H = H, ba.hd = hd, ba.qkv = qkv, ba.o = o, ba.lse = lse, ba.do_ = dout, ba.dqkv = dq, ba.scratch = scr;
        tr__attention_bwd_ref(B, &ba, 1);
        attention_bwd_bound(B, S, H, hd, qkv, lse, dout, u, bound);
        tr__dfree(e->ctx, dO.p), tr__dfree(e->ctx, dL.p);
        dO = put(e, o, no, dt), dL = put(e, lse, nl, TR__F32);
        d.bwd = 1, d.o = dO, d.lse = (float *)dL.p, d.do_ = dDO, d.dqkv = (float *)dDQ.p;
        assert_int_equal(tr__op_attention(e->ctx, &d), TR_OK);
        assert_int_equal(e->ctx->cl->mma_attention_bwd, bwd_before + on);
        got = get(e, dDQ, nq);
        for (i = 0; i < nq; i++) {
            const double err = fabs((double)got[i] - dq[i]), lim = bound[i] + rtol_of(dt) * fabs((double)dq[i]) + 1e-6;
            if (!(err <= lim) && err - lim > excess) excess = err - lim, worst = i;
        }
        if (excess >= 0)
            fail_msg("%s, attention, %s, tensor-core backward S %d hd %d: dqkv[%zu] (%s) got %.9g, want %.9g, bound %.3g", e->where, tr__dtypes[dt].name, S, hd,
                     worst, &"q\0k\0v"[2 * ((worst / D) % 3)], (double)got[worst], (double)dq[worst], (double)bound[worst]);
        free(got), free(dout), free(dq), free(bound);
        tr__dfree(e->ctx, dDO.p), tr__dfree(e->ctx, dDQ.p);
    }
    tr__dfree(e->ctx, dQ.p), tr__dfree(e->ctx, dO.p), tr__dfree(e->ctx, dL.p);
    free(qkv), free(o), free(lse), free(scr);
}

/* hd 8: four pairs a work-item on OpenCL (tr_k_rope*_x4), 6: one */
static void run_rope(op_env *e, int dt, int hd) {
    const int B = 2, S = 9, H = 2;
    const size_t nq = (size_t)B * S * 3 * H * hd, nc = (size_t)S * hd;
    float *q = vals(nq, 13, 1.5f, dt), *cs = vals(nc, 14, 1.0f, TR__F32), *sn = vals(nc, 15, 1.0f, TR__F32), *ref = (float *)malloc(nq * 4), *got;
    tr__buf dC = put(e, cs, nc, TR__F32), dS = put(e, sn, nc, TR__F32);
    int inv;
    for (inv = 0; inv < 2; inv++) {
        tr__buf dQ = put(e, q, nq, dt);
        memcpy(ref, q, nq * 4);
        tr__rope_ref((long)B * S, S, H, hd, ref, cs, sn, inv, 1);
        tr__round_ref(dt, ref, nq);
        assert_int_equal(tr__op_rope(e->ctx, dt, (long)B * S, S, H, hd, dQ, (const float *)dC.p, (const float *)dS.p, inv), TR_OK);
        check(e, "rope", dt, inv ? (hd == 6 ? "inverse, hd 6" : "inverse") : hd == 6 ? "forward, hd 6" : "forward", got = get(e, dQ, nq), ref, nq, 0), free(got);
        tr__dfree(e->ctx, dQ.p);
    }
    tr__dfree(e->ctx, dC.p), tr__dfree(e->ctx, dS.p), free(q), free(cs), free(sn), free(ref);
}
static void case_rope(op_env *e, int dt) { run_rope(e, dt, 8), run_rope(e, dt, 6); }

/* fp32 <-> the 16-bit type: packing the type's values and unpacking them are exact (fp32 has nothing to convert). */
static void case_half(op_env *e, int dt) {
    const size_t n = 1001;
    float *x = vals(n, 16, 4.0f, dt), *got;
    tr__buf dx = put(e, x, n, TR__F32), dh = put(e, NULL, n, dt), dw = put(e, NULL, n, TR__F32);
    if (!dt) {
        tr__dfree(e->ctx, dx.p), tr__dfree(e->ctx, dh.p), tr__dfree(e->ctx, dw.p), free(x);
        return;
    }
    assert_int_equal(tr__op_half(e->ctx, dt, 0, (float *)dx.p, (float *)dh.p, n), TR_OK);
    check(e, "half", dt, "packed", got = get(e, dh, n), x, n, 1), free(got);
    assert_int_equal(tr__op_half(e->ctx, dt, 1, (float *)dw.p, (float *)dh.p, n), TR_OK);
    check(e, "half", dt, "unpacked", got = get(e, dw, n), x, n, 1), free(got);
    tr__dfree(e->ctx, dx.p), tr__dfree(e->ctx, dh.p), tr__dfree(e->ctx, dw.p), free(x);
}

/* fp32 values rounded in place to each 16-bit precision (their ties, NaN and overflow among them). */
static void case_round(op_env *e, int dt) {
    const size_t n = 1003;
    float *x = vals(n, 17, 70000.0f, dt), *ref = (float *)malloc(n * 4), *got;
    int fdt;
    x[0] = NAN, x[1] = 65520.0f, x[2] = 1.0f + 1.0f / 256, x[3] = -1e-8f; /* (a NaN, fp16's overflow, a bfloat16 tie, a fp16 subnormal) */
    for (fdt = TR__BF16; fdt <= TR__F16; fdt++) {
        tr__buf dx = put(e, x, n, dt);
        memcpy(ref, x, n * 4);
        tr__round_ref(fdt, ref, n);
        assert_int_equal(tr__op_round(e->ctx, fdt, (float *)dx.p, n), TR_OK);
        got = get(e, dx, n);
        assert_true(isnan(got[0]));
        got[0] = ref[0];
        check(e, "round", dt, tr__dtypes[fdt].name, got, ref, n, 1), free(got);
        tr__dfree(e->ctx, dx.p);
    }
    free(x), free(ref);
}

static void case_scale(op_env *e, int dt) {
    const size_t n = 777;
    float *x = vals(n, 18, 3.0f, dt), *got;
    tr__buf dx = put(e, x, n, dt);
    size_t i;
    assert_int_equal(tr__op_scale(e->ctx, n, (float *)dx.p, 0.37f), TR_OK);
    for (i = 0; i < n; i++) x[i] *= 0.37f;
    check(e, "scale", dt, "x", got = get(e, dx, n), x, n, 1);
    tr__dfree(e->ctx, dx.p), free(x), free(got);
}

static void case_ema(op_env *e, int dt) {
    const size_t n = 901;
    float *sh = vals(n, 19, 1.0f, dt), *p = vals(n, 20, 1.0f, dt), *got;
    tr__buf dsh = put(e, sh, n, dt), dp = put(e, p, n, dt);
    assert_int_equal(tr__op_ema(e->ctx, n, (float *)dsh.p, (const float *)dp.p, 0.999f), TR_OK);
    tr__ema_ref(n, sh, p, 0.999f, 1);
    check(e, "ema", dt, "shadow", got = get(e, dsh, n), sh, n, 0);
    tr__dfree(e->ctx, dsh.p), tr__dfree(e->ctx, dp.p), free(sh), free(p), free(got);
}

static void case_adam(op_env *e, int dt) {
    const size_t n = 903;
    float *p = vals(n, 21, 1.0f, dt), *g = vals(n, 22, 1.0f, dt), *m = vals(n, 23, 0.1f, dt), *v = vals(n, 24, 0.1f, dt), *got;
    tr__buf dp = put(e, p, n, dt), dg = put(e, g, n, dt), dm = put(e, m, n, dt), dv = put(e, v, n, dt);
    tr__adam_hp hp;
    size_t i;
    for (i = 0; i < n; i++) v[i] = fabsf(v[i]);
    tr__dfree(e->ctx, dv.p), dv = put(e, v, n, dt);
    hp.lr = 1e-3f, hp.wd = 0.1f, hp.beta1 = 0.9f, hp.beta2 = 0.95f, hp.bc1 = 0.19f, hp.bc2 = 0.0975f;
    assert_int_equal(tr__op_adam_atan2(e->ctx, n, (float *)dp.p, (const float *)dg.p, (float *)dm.p, (float *)dv.p, hp), TR_OK);
    tr__adam_atan2_ref(n, p, g, m, v, hp, 1);
    check(e, "adam_atan2", dt, "p", got = get(e, dp, n), p, n, 0), free(got);
    check(e, "adam_atan2", dt, "m", got = get(e, dm, n), m, n, 0), free(got);
    check(e, "adam_atan2", dt, "v", got = get(e, dv, n), v, n, 0), free(got);
    tr__dfree(e->ctx, dp.p), tr__dfree(e->ctx, dg.p), tr__dfree(e->ctx, dm.p), tr__dfree(e->ctx, dv.p), free(p), free(g), free(m), free(v);
}

static void case_all_finite(op_env *e, int dt) {
    const size_t n = 2049;
    float *x = vals(n, 25, 1e30f, dt);
    int ok = -1, k;
    for (k = 0; k < 3; k++) { /* finite; an infinity at the end; a NaN in the middle */
        tr__buf dx;
        if (k == 1) x[n - 1] = INFINITY;
        if (k == 2) x[n - 1] = 1.0f, x[n / 2] = NAN;
        dx = put(e, x, n, dt);
        assert_int_equal(tr__op_all_finite(e->ctx, n, (const float *)dx.p, &ok), TR_OK);
        if (ok != (k == 0)) fail_msg("%s, all_finite: case %d says %d", e->where, k, ok);
        tr__dfree(e->ctx, dx.p);
    }
    free(x);
}

typedef void (*op_case)(op_env *, int);
static const op_case cases[TR__NOPS] = {
    [TR__OP_SGEMM] = case_sgemm,       [TR__OP_SGEMM_RND] = case_sgemm_rnd,   [TR__OP_ADD] = case_add,           [TR__OP_NORM_ROWS] = case_norm_rows,
    [TR__OP_NORM_COLS] = case_norm_cols, [TR__OP_SWIGLU_FWD] = case_swiglu_fwd, [TR__OP_SWIGLU_BWD] = case_swiglu_bwd, [TR__OP_ATTENTION] = case_attention,
    [TR__OP_ROPE] = case_rope,         [TR__OP_HALF] = case_half,             [TR__OP_ROUND] = case_round,       [TR__OP_SCALE] = case_scale,
    [TR__OP_EMA] = case_ema,           [TR__OP_ADAM] = case_adam,             [TR__OP_ALL_FINITE] = case_all_finite};

/* Every op the table says env's device takes, in every type it takes; returns how many ran. */
static int run_all(op_env *e) {
    int op, dt, ran = 0;
    for (op = 0; op < TR__NOPS; op++) {
        if (!cases[op]) fail_msg("op table row %d (%s) has no case in tests/test_ops.c", op, tr__ops[op].name);
        for (dt = 0; dt < TR__NDT; dt++)
            if (tr__ops[op].types[e->kind] & TR__DTB(dt)) {
                cases[op](e, dt);
                ran++;
            }
    }
    return ran;
}

/* The CPU at each SIMD level this machine runs, on 1 and 2 threads. */
static void test_ops_cpu(void **state) {
    static const char *const levels[4] = {"scalar", "avx2", "avx512", "neon"};
    op_env e;
    int lvl, th, levels_run = 0;
    (void)state;
    memset(&e, 0, sizeof e);
    e.ctx = tu_ctx(2, 1), e.kind = TR__DEV_CPU;
    for (lvl = 0; lvl < 4; lvl++) {
        if (tr_ctx_set_simd(e.ctx, levels[lvl]) != TR_OK) continue;
        levels_run++;
        for (th = 1; th <= 2; th++) {
            assert_int_equal(tr_ctx_set_num_threads(e.ctx, th), TR_OK);
            snprintf(e.where, sizeof e.where, "cpu %s, %d thread(s)", levels[lvl], th);
            assert_int_equal(run_all(&e), 3 * 10 + 5); /* (ten ops in three types, five in fp32 alone) */
        }
    }
    assert_true(levels_run >= 2); /* (the scalar level and this machine's own at least) */
    tr_ctx_destroy(e.ctx);
}

/* The OpenCL device (PoCL in CI): the ops and types the table gives a plain OpenCL device. */
static void test_ops_opencl(void **state) {
    op_env e;
    (void)state;
    memset(&e, 0, sizeof e);
    e.ctx = tu_ctx_opencl(2, 1);
    e.kind = tr__dev_kind(e.ctx);
    snprintf(e.where, sizeof e.where, "opencl (%s)", e.kind == TR__DEV_MMA ? "tensor cores" : "plain");
    assert_true(run_all(&e) >= TR__NOPS);
    tr_ctx_destroy(e.ctx);
}

/* Emulated tensor cores (the OpenCL device's tensor-core kernels run with fma: cl_sgemm "MMA=2"): their products take
   16-bit operands, and products in bfloat16 / float16 (tr__out.prec, as a model's) run on them. */
static void test_ops_tensor_cores(void **state) {
    tr_ctx_config cc = tr_ctx_config_default();
    op_env e;
    int op, dt, ran = 0;
    (void)state;
    memset(&e, 0, sizeof e);
    cc.num_threads = 2, cc.seed = 1, cc.device = "cpu", cc.cl_sgemm = "MMA=2";
    assert_int_equal(tr_ctx_create(&cc, &e.ctx), TR_OK);
#if TINYREC_OPENCL
    tu_cl_open(e.ctx);
    if (!tr__cl_mma_ready(e.ctx->cl)) fail_msg("no emulated tensor cores on %s: %s", tr_ctx_device_name(e.ctx), tr_ctx_last_error(e.ctx));
#else
    tr_ctx_destroy(e.ctx);
    tu_no_opencl("this build has no TINYREC_OPENCL");
#endif
    e.kind = tr__dev_kind(e.ctx);
    assert_int_equal(e.kind, TR__DEV_MMA);
    snprintf(e.where, sizeof e.where, "opencl (emulated tensor cores)");
    for (op = 0; op < TR__NOPS; op++)
        for (dt = 0; dt < TR__NDT; dt++)
            if (tr__ops[op].types[TR__DEV_MMA] & ~tr__ops[op].types[TR__DEV_CL] & TR__DTB(dt)) { /* (what the plain device runs, test_ops_opencl ran) */
                cases[op](&e, dt);
                ran++;
            }
    assert_int_equal(ran, 4); /* (sgemm and sgemm_rnd, each in bfloat16 and float16) */
#if TINYREC_OPENCL
    assert_true(e.ctx->cl->mma_products >= 4); /* (they ran on the tensor-core kernels) */
    for (dt = TR__BF16; dt <= TR__F16; dt++) run_sgemm_in_place(&e, dt), run_sgemm_in_place_dm(&e, dt);
    for (dt = TR__BF16; dt <= TR__F16; dt++) { /* the attention's forward: Sudoku's S = 97 (2 query blocks, 2 key blocks), a small odd S */
        static const int hds[3] = {32, 64, 128};
        int k;
        for (k = 0; k < 3; k++) {
            run_attention_mma(&e, dt, 1, 97, 2, hds[k], 1);
            run_attention_mma(&e, dt, 2, 13, 2, hds[k], 1);
        }
    }
    { /* TINYREC_CL_SGEMM's ATT: 0 turns it off (the portable kernel, within the same bound), 1 on (mma.sync's switch) */
        tr__cl_gemm_cfg g;
        tr__cl_gemm_config_spec(tr__cl_get_info(e.ctx->cl), "MMA=2,ATT=0", &g);
        assert_int_equal(g.att, 1), assert_int_equal(g.mma, 2);
        tr__cl_gemm_config_spec(tr__cl_get_info(e.ctx->cl), "ATT=1", &g);
        assert_int_equal(g.att, 2);
        tr__cl_gemm_config_spec(tr__cl_get_info(e.ctx->cl), "MMA=2", &g);
        assert_int_equal(g.att, 0);
        e.ctx->cl->gemm.att = 1;
        run_attention_mma(&e, TR__BF16, 1, 97, 2, 64, 0);
        e.ctx->cl->gemm.att = 0;
    }
#endif
    tr_ctx_destroy(e.ctx);
}

/* The table itself: every op takes fp32 everywhere, the CPU takes every type an OpenCL device does, and a 16-bit
   operand where the device does not take it is refused with the op's name, not run. */
static void test_op_table(void **state) {
    tr_ctx *ctx = tu_ctx(1, 1);
    int op, k;
    float x[8] = {0};
    tr__norm_desc d;
    (void)state;
    for (op = 0; op < TR__NOPS; op++)
        for (k = 0; k < TR__NDEV; k++) {
            assert_true(tr__ops[op].types[k] & TR__DTB(TR__F32));
            assert_int_equal(tr__ops[op].types[k] & ~tr__ops[op].types[TR__DEV_CPU], 0);
            assert_non_null(tr__ops[op].name), assert_non_null(tr__ops[op].reference), assert_non_null(tr__ops[op].cl_kernels);
        }
    memset(&d, 0, sizeof d);
    d.kind = TR__NORM_COLS_FWD, d.fdt = 0, d.rows = 1, d.S = 1, d.D = 4, d.in1 = tr__buf_of(x, TR__BF16), d.in2 = tr__f32(NULL), d.out = tr__f32(x + 4);
    d.rstd = x, d.eps = 1e-5f;
    assert_int_equal(tr__op_norm(ctx, &d), TR_ERR_GENERIC); /* (a bfloat16 operand of a float32 computation) */
    assert_non_null(strstr(tr_ctx_last_error(ctx), "norm_cols"));
    tr_ctx_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_op_table), cmocka_unit_test(test_ops_cpu), cmocka_unit_test(test_ops_opencl),
                                       cmocka_unit_test(test_ops_tensor_cores)};
    return cmocka_run_group_tests_name("ops", tests, NULL, NULL);
}
