/* test_sgemm.c - tr__sgemm against tr__sgemm_ref at every SIMD level this CPU has.
   gcc -O2 -g -Wall -Wextra -std=c99 -fopenmp -I. tests/test_sgemm.c -o build/test_sgemm -lcmocka -lm

   Tolerance. Both the reference and the kernel under test compute each C element as a float sum
   of K products (plus C itself when accumulating), only in different orders and with or without
   fused multiply-adds. Each ordering is within gamma_n = n*u/(1 - n*u) (u = 2^-24, n = K + 1
   rounded operations on the path of any one term) of the exact sum, relative to
   S = sum_k |a_ik b_kj| (+ |C_in|): |fl(s) - s| <= gamma_n * S (Higham, Accuracy and Stability,
   3.1). Two such results are within 2 gamma_n S of each other, so we allow
   |x - ref| <= atol + rtol * S with rtol = (K + 2) * 2^-23 (a hair above 2 gamma_{K+1}), and a
   tiny atol for S == 0. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#define TINYREC_IMPLEMENTATION
#include "tinyrec.h"

static uint64_t g_rng = 0x1234567887654321ull;
static uint64_t rnd_u64(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}
static size_t rnd_below(size_t n) { return (size_t)(rnd_u64() % n); }
static float rnd_f(void) { return (float)((double)(rnd_u64() >> 40) / 8388608.0 - 1.0); } /* [-1, 1) */

static float *rnd_buf(size_t n) {
    float *p = (float *)malloc((n ? n : 1) * sizeof *p);
    size_t i;
    assert_non_null(p);
    for (i = 0; i < n; i++) p[i] = rnd_f();
    return p;
}

static tr_ctx *new_ctx(int threads) {
    tr_ctx *ctx = NULL;
    tr_ctx_config cfg = tr_ctx_config_default();
    cfg.num_threads = threads;
    assert_int_equal(tr_ctx_create(&cfg, &ctx), TR_OK);
    return ctx;
}

/* One product at the context's SIMD level, checked element by element against the reference. */
static void check_one(tr_ctx *ctx, int ta, int tb, size_t M, size_t N, size_t K, size_t pa, size_t pb, size_t pc, int acc) {
    size_t lda = (ta ? M : K) + pa, ldb = (tb ? K : N) + pb, ldc = N + pc;
    size_t arows = ta ? K : M, brows = tb ? N : K;
    float *A = rnd_buf(arows * lda), *B = rnd_buf(brows * ldb), *C = rnd_buf(M * ldc), *R = rnd_buf(M * ldc);
    float *C0 = rnd_buf(M * ldc);
    size_t i, j, k;
    memcpy(R, C, M * ldc * sizeof *C);
    memcpy(C0, C, M * ldc * sizeof *C);
    assert_int_equal(tr__sgemm(ctx, ta, tb, M, N, K, A, lda, B, ldb, C, ldc, acc), TR_OK);
    tr__sgemm_ref(ta, tb, M, N, K, A, lda, B, ldb, R, ldc, acc);
    for (i = 0; i < M; i++) {
        for (j = 0; j < N; j++) {
            double S = acc ? fabs((double)C0[i * ldc + j]) : 0.0, tol;
            float x = C[i * ldc + j], r = R[i * ldc + j];
            for (k = 0; k < K; k++) {
                double a = ta ? A[k * lda + i] : A[i * lda + k];
                double b = tb ? B[j * ldb + k] : B[k * ldb + j];
                S += fabs(a * b);
            }
            tol = 1e-30 + (double)(K + 2) * (1.0 / 8388608.0) * S;
            if (!(fabs((double)x - (double)r) <= tol))
                fail_msg("simd %s ta %d tb %d M %zu N %zu K %zu acc %d: C[%zu][%zu] = %.9g, ref %.9g, tol %.3g",
                         tr_ctx_simd_name(ctx), ta, tb, M, N, K, acc, i, j, (double)x, (double)r, tol);
        }
        /* the padding of C is never written */
        for (j = N; j < ldc; j++)
            if (memcmp(&C[i * ldc + j], &C0[i * ldc + j], sizeof(float)) != 0)
                fail_msg("C padding overwritten at row %zu col %zu", i, j);
    }
    free(A);
    free(B);
    free(C);
    free(R);
    free(C0);
}

static const char *levels[] = {"scalar", "avx2", "avx512", "neon"};

/* Every SIMD level the CPU supports; `fn` runs once per level. */
static void for_each_level(tr_ctx *ctx, void (*fn)(tr_ctx *)) {
    int l;
    for (l = 0; l < 4; l++) {
        if (tr_ctx_set_simd(ctx, levels[l]) != TR_OK) continue;
        fn(ctx);
    }
    tr_ctx_set_simd(ctx, "auto");
}

static void run_random_small(tr_ctx *ctx) {
    int it;
    for (it = 0; it < 160; it++) {
        size_t M = 1 + rnd_below(70), N = 1 + rnd_below(70), K = 1 + rnd_below(70);
        check_one(ctx, it & 1, (it >> 1) & 1, M, N, K, rnd_below(6), rnd_below(6), rnd_below(6), (it >> 2) & 1);
    }
}
static void test_random_small(void **state) {
    tr_ctx *ctx = new_ctx(2);
    (void)state;
    for_each_level(ctx, run_random_small);
    tr_ctx_destroy(ctx);
}

/* Shapes around the micro-tile edges (14x32, 6x16, 4x16) and the KC/MC/NC blocks. */
static void run_edges(tr_ctx *ctx) {
    static const size_t ms[] = {1, 2, 5, 6, 7, 13, 14, 15, 16, 17, 29, 33};
    static const size_t ns[] = {1, 2, 11, 15, 16, 17, 31, 32, 33, 65};
    size_t a, b;
    int t;
    for (a = 0; a < sizeof ms / sizeof *ms; a++)
        for (b = 0; b < sizeof ns / sizeof *ns; b++)
            for (t = 0; t < 4; t++) check_one(ctx, t & 1, t >> 1, ms[a], ns[b], 1 + rnd_below(40), 1, 2, 3, (int)((a + b) & 1));
}
static void test_edges(void **state) {
    tr_ctx *ctx = new_ctx(2);
    (void)state;
    for_each_level(ctx, run_edges);
    tr_ctx_destroy(ctx);
}

/* Shapes around the NEON tiles (8x12 micro-tile, 16-wide rows kernel, K tails of the 4-lane dot
   kernel), at every level like the others. */
static void run_neon_edges(tr_ctx *ctx) {
    static const size_t ms[] = {3, 4, 8, 9, 17, 23, 24, 25};
    static const size_t ns[] = {4, 12, 13, 23, 24, 25, 36};
    size_t a, b;
    int t;
    for (a = 0; a < sizeof ms / sizeof *ms; a++)
        for (b = 0; b < sizeof ns / sizeof *ns; b++)
            for (t = 0; t < 4; t++) check_one(ctx, t & 1, t >> 1, ms[a], ns[b], 1 + rnd_below(23), 0, 1, 0, t & 1);
}
static void test_neon_edges(void **state) {
    tr_ctx *ctx = new_ctx(2);
    (void)state;
    for_each_level(ctx, run_neon_edges);
    tr_ctx_destroy(ctx);
}

/* Larger shapes: several KC blocks, MC blocks, NC blocks and skinny products. */
static void run_large(tr_ctx *ctx) {
    int t;
    for (t = 0; t < 8; t++) check_one(ctx, t & 1, (t >> 1) & 1, 300, 257, 129, 3, 0, 5, t >> 2);
    check_one(ctx, 0, 1, 67, 45, 1100, 1, 1, 1, 0);   /* 3 KC blocks */
    check_one(ctx, 1, 0, 45, 67, 777, 2, 0, 0, 1);    /* 2 KC blocks, accumulate */
    check_one(ctx, 0, 0, 1030, 70, 33, 0, 0, 0, 0);  /* several MC blocks */
    check_one(ctx, 1, 1, 40, 1100, 20, 0, 0, 0, 1);  /* several NC blocks */
    check_one(ctx, 0, 1, 1, 512, 512, 0, 0, 0, 0);   /* batch-1 inference */
    check_one(ctx, 1, 1, 3, 300, 97, 1, 1, 1, 1);
    check_one(ctx, 0, 0, 16, 300, 200, 0, 3, 0, 1);
    check_one(ctx, 1, 0, 9, 77, 300, 0, 0, 2, 0);
    check_one(ctx, 0, 1, 500, 11, 300, 0, 0, 0, 0);  /* narrow outputs */
    check_one(ctx, 0, 0, 500, 2, 130, 1, 0, 0, 1);
    check_one(ctx, 1, 1, 300, 2, 70, 0, 0, 0, 0);
    check_one(ctx, 0, 1, 97, 512, 512, 0, 0, 0, 1);
    check_one(ctx, 0, 0, 1024, 51, 97, 0, 0, 0, 0);
}
static void test_large(void **state) {
    tr_ctx *ctx = new_ctx(2);
    (void)state;
    for_each_level(ctx, run_large);
    tr_ctx_destroy(ctx);
}

/* K == 0: C = accumulate ? C : 0. M == 0 or N == 0: nothing is touched. */
static void test_degenerate(void **state) {
    tr_ctx *ctx = new_ctx(2);
    float A[4] = {1, 2, 3, 4}, B[4] = {1, 2, 3, 4}, C[6] = {1, 2, 3, 4, 5, 6};
    int l;
    (void)state;
    for (l = 0; l < 4; l++) {
        if (tr_ctx_set_simd(ctx, levels[l]) != TR_OK) continue;
        C[0] = 1, C[1] = 2, C[2] = 3, C[3] = 4, C[4] = 5, C[5] = 6;
        assert_int_equal(tr__sgemm(ctx, 0, 0, 2, 2, 0, A, 1, B, 2, C, 3, 1), TR_OK);
        assert_true(C[0] == 1 && C[1] == 2 && C[3] == 4 && C[4] == 5);
        assert_int_equal(tr__sgemm(ctx, 0, 0, 2, 2, 0, A, 1, B, 2, C, 3, 0), TR_OK);
        assert_true(C[0] == 0 && C[1] == 0 && C[2] == 3 && C[3] == 0 && C[4] == 0 && C[5] == 6);
        C[0] = 7;
        assert_int_equal(tr__sgemm(ctx, 0, 0, 0, 2, 2, A, 2, B, 2, C, 3, 0), TR_OK);
        assert_int_equal(tr__sgemm(ctx, 1, 1, 2, 0, 2, A, 2, B, 2, C, 3, 0), TR_OK);
        assert_true(C[0] == 7);
    }
    tr_ctx_destroy(ctx);
}

/* Results do not depend on the thread count: 1 and 2 threads give the same bits. */
static void run_threads(tr_ctx *ctx) {
    static const size_t shapes[][3] = {{300, 257, 129}, {97, 512, 512}, {1030, 70, 700}, {5, 300, 77}, {640, 11, 200},
                                       {200, 640, 20}, {1, 512, 512}, {64, 64, 64}};
    size_t s;
    int t;
    for (s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (t = 0; t < 8; t++) {
            size_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
            int ta = t & 1, tb = (t >> 1) & 1, acc = t >> 2;
            size_t lda = ta ? M : K, ldb = tb ? K : N;
            float *A = rnd_buf(M * K), *B = rnd_buf(K * N), *C1 = rnd_buf(M * N), *C2 = (float *)malloc(M * N * sizeof(float));
            assert_non_null(C2);
            memcpy(C2, C1, M * N * sizeof(float));
            assert_int_equal(tr_ctx_set_num_threads(ctx, 1), TR_OK);
            assert_int_equal(tr__sgemm(ctx, ta, tb, M, N, K, A, lda, B, ldb, C1, N, acc), TR_OK);
            assert_int_equal(tr_ctx_set_num_threads(ctx, 2), TR_OK);
            assert_int_equal(tr__sgemm(ctx, ta, tb, M, N, K, A, lda, B, ldb, C2, N, acc), TR_OK);
            if (memcmp(C1, C2, M * N * sizeof(float)) != 0)
                fail_msg("simd %s: 1 and 2 threads differ for M %zu N %zu K %zu ta %d tb %d acc %d", tr_ctx_simd_name(ctx), M,
                         N, K, ta, tb, acc);
            free(A);
            free(B);
            free(C1);
            free(C2);
        }
}
static void test_threads_bitwise(void **state) {
    tr_ctx *ctx = new_ctx(2);
    (void)state;
    for_each_level(ctx, run_threads);
    tr_ctx_destroy(ctx);
}

/* The workspace allocation fails: TR_ERR_OUT_OF_MEMORY with a reason, nothing leaked, and the
   next call (allocation allowed again) succeeds. */
static void test_alloc_failure(void **state) {
    size_t M = 200, N = 150, K = 100;
    float *A = rnd_buf(M * K), *B = rnd_buf(K * N), *C = rnd_buf(M * N), *R = rnd_buf(M * N);
    int t;
    (void)state;
    for (t = 0; t < 4; t++) {
        tr_ctx *ctx = new_ctx(2);
        int ta = t & 1, tb = t >> 1;
        tr_ctx_fail_alloc_at(ctx, 1);
        assert_int_equal(tr__sgemm(ctx, ta, tb, M, N, K, A, ta ? M : K, B, tb ? K : N, C, N, 0), TR_ERR_OUT_OF_MEMORY);
        assert_true(strlen(tr_ctx_last_error(ctx)) > 0);
        assert_int_equal(tr_ctx_live_allocs(ctx), 0);
        tr_ctx_fail_alloc_at(ctx, 0);
        assert_int_equal(tr__sgemm(ctx, ta, tb, M, N, K, A, ta ? M : K, B, tb ? K : N, C, N, 0), TR_OK);
        tr__sgemm_ref(ta, tb, M, N, K, A, ta ? M : K, B, tb ? K : N, R, N, 0);
        assert_true(fabs((double)C[N + 3] - (double)R[N + 3]) <= 1e-3);
        assert_int_equal(tr_ctx_live_allocs(ctx), 0);
        tr_ctx_destroy(ctx);
    }
    free(A);
    free(B);
    free(C);
    free(R);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_degenerate),   cmocka_unit_test(test_random_small),    cmocka_unit_test(test_edges),
        cmocka_unit_test(test_neon_edges),
        cmocka_unit_test(test_large),        cmocka_unit_test(test_threads_bitwise), cmocka_unit_test(test_alloc_failure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
