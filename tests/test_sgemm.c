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
#define TINYREC_IMPLEMENTATION
#include "tinyrec.h" /* (first: it asks for POSIX, for setenv) */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

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

/* The precision the products multiply in (tr__out.prec): a bfloat16 model's on the passes of for_each_level that run
   its kernels, else 0 (fp32). */
static int g_prec;
static tr__out tout16(void *p, size_t ld, size_t s, int acc, int dt) { return tr__out_in(tr__out16_of(p, ld, s, acc, dt), g_prec); }
static tr__out tout(void *p, size_t ld, size_t s, int acc) { return tout16(p, ld, s, acc, 0); }

static tr_ctx *new_ctx(int threads) {
    tr_ctx *ctx = NULL;
    tr_ctx_config cfg = tr_ctx_config_default();
    cfg.num_threads = threads;
    assert_int_equal(tr_ctx_create(&cfg, &ctx), TR_OK);
    return ctx;
}

/* The kernels in use: the SIMD level, and the bfloat16 products' kernel. */
static const char *kern_name(tr_ctx *ctx) {
    static char buf[64];
    int mode = tr__bgemm_mode(ctx, g_prec);
    snprintf(buf, sizeof buf, "%s%s", tr_ctx_simd_name(ctx), mode == TR__BG_DPBF16 ? "+vdpbf16ps" : mode == TR__BG_TWIN ? "+bf16 twin" : mode == TR__BG_AMX ? "+amx" : "");
    return buf;
}

/* One product at the context's SIMD level, checked element by element against the reference.
   While a bfloat16 model's products run (g_prec), the operands are bfloat16 values, as the
   model's are: the products are then exact and every kernel's result is a float sum of the same
   terms, within the same bound. */
static void check_one(tr_ctx *ctx, int ta, int tb, size_t M, size_t N, size_t K, size_t pa, size_t pb, size_t pc, int acc) {
    size_t lda = (ta ? M : K) + pa, ldb = (tb ? K : N) + pb, ldc = N + pc;
    size_t arows = ta ? K : M, brows = tb ? N : K;
    float *A = rnd_buf(arows * lda), *B = rnd_buf(brows * ldb), *C = rnd_buf(M * ldc), *R = rnd_buf(M * ldc);
    float *C0 = rnd_buf(M * ldc);
    size_t i, j, k;
    if (g_prec) tr__round_ref(g_prec, A, arows * lda), tr__round_ref(g_prec, B, brows * ldb);
    memcpy(R, C, M * ldc * sizeof *C);
    memcpy(C0, C, M * ldc * sizeof *C);
    assert_int_equal(tr__sgemm(ctx, M, N, K, tr__mat_of(A, lda, 0, ta), tr__mat_of(B, ldb, 0, tb), tout(C, ldc, 0, acc)), TR_OK);
    tr__sgemm_ref(M, N, K, tr__mat_of(A, lda, 0, ta), tr__mat_of(B, ldb, 0, tb), tout(R, ldc, 0, acc));
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
                         kern_name(ctx), ta, tb, M, N, K, acc, i, j, (double)x, (double)r, tol);
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

/* The thread counts whose products must give the same bits: 1, 2, and 16 (which cuts the products into more jobs). */
#define EACH_THREAD_COUNT(th) for ((th) = 1; (th) <= 16; (th) = (th) == 1 ? 2 : (th) == 2 ? 16 : 32)

/* Every SIMD level the CPU supports; `fn` runs once per level. Then as a bfloat16 model's products
   (g_prec): on the scalar twin of vdpbf16ps at the best level (its short products on that
   level's fp32 kernels), and on vdpbf16ps itself where the CPU has AVX512_BF16. */
static void for_each_level(tr_ctx *ctx, void (*fn)(tr_ctx *)) {
    int l;
    for (l = 0; l < 4; l++) {
#if !TR__X86 /* (the scalar kernels are the same C on every architecture and run natively on x86; CI runs aarch64 under qemu, where they would double this suite's time) */
        if (l == 0 && tr_ctx_set_simd(ctx, "neon") == TR_OK) continue;
#endif
        if (tr_ctx_set_simd(ctx, levels[l]) != TR_OK) continue;
        fn(ctx);
    }
    tr_ctx_set_simd(ctx, "auto");
#if TR__X86 /* (the twin is the same C on every architecture; under qemu, CI's aarch64 run, these passes would take ten minutes) */
    g_prec = TR_FWD_BFLOAT16;
    ctx->bf16_gemm = 2;
    assert_int_equal(tr__bgemm_mode(ctx, g_prec), 2);
    fn(ctx);
    if (tr_ctx_set_simd(ctx, "avx512") == TR_OK && ctx->cpu_bf16) {
        ctx->bf16_gemm = 3;
        assert_int_equal(tr__bgemm_mode(ctx, g_prec), TR__BG_DPBF16);
        fn(ctx);
        ctx->bf16_gemm = 1;
        if (ctx->cpu_amx) {
            assert_int_equal(tr__bgemm_mode(ctx, g_prec), TR__BG_AMX);
            fn(ctx);
        } else
            print_message("(no AMX on this CPU: its kernel not run)\n");
    } else
        print_message("(no AVX512_BF16 on this CPU: vdpbf16ps not run, its twin was)\n");
    ctx->bf16_gemm = 1;
    g_prec = 0;
    tr_ctx_set_simd(ctx, "auto");
#endif
}

/* test_NAME: run_NAME at every level (for_each_level), on a context of 2 threads that must free all it allocated. */
#define PER_LEVEL_TEST(name) \
    static void test_##name(void **state) { \
        tr_ctx *ctx = new_ctx(2); \
        (void)state; \
        for_each_level(ctx, run_##name); \
        assert_int_equal(tr_ctx_live_allocs(ctx), 0); \
        tr_ctx_destroy(ctx); \
    }

static void run_random_small(tr_ctx *ctx) {
    int it;
    for (it = 0; it < 160; it++) {
        size_t M = 1 + rnd_below(70), N = 1 + rnd_below(70), K = 1 + rnd_below(70);
        check_one(ctx, it & 1, (it >> 1) & 1, M, N, K, rnd_below(6), rnd_below(6), rnd_below(6), (it >> 2) & 1);
    }
}
PER_LEVEL_TEST(random_small)

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
PER_LEVEL_TEST(edges)

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
PER_LEVEL_TEST(neon_edges)

/* Larger shapes: several KC blocks, MC blocks, NC blocks and skinny products. */
static void run_large(tr_ctx *ctx) {
    int t;
    for (t = 0; t < 8; t++) check_one(ctx, t & 1, (t >> 1) & 1, 170, 257, 67, 3, 0, 5, t >> 2);
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
    check_one(ctx, 0, 1, 97, 260, 513, 0, 0, 0, 1);
    check_one(ctx, 0, 0, 1024, 51, 97, 0, 0, 0, 0);
}
PER_LEVEL_TEST(large)

/* K == 0: C = accumulate ? C : 0. M == 0 or N == 0: nothing is touched. */
static void test_degenerate(void **state) {
    tr_ctx *ctx = new_ctx(2);
    float A[4] = {1, 2, 3, 4}, B[4] = {1, 2, 3, 4}, C[6] = {1, 2, 3, 4, 5, 6};
    int l;
    (void)state;
    for (l = 0; l < 4; l++) {
        if (tr_ctx_set_simd(ctx, levels[l]) != TR_OK) continue;
        C[0] = 1, C[1] = 2, C[2] = 3, C[3] = 4, C[4] = 5, C[5] = 6;
        assert_int_equal(tr__sgemm(ctx, 2, 2, 0, tr__mat_of(A, 1, 0, 0), tr__mat_of(B, 2, 0, 0), tout(C, 3, 0, 1)), TR_OK);
        assert_true(C[0] == 1 && C[1] == 2 && C[3] == 4 && C[4] == 5);
        assert_int_equal(tr__sgemm(ctx, 2, 2, 0, tr__mat_of(A, 1, 0, 0), tr__mat_of(B, 2, 0, 0), tout(C, 3, 0, 0)), TR_OK);
        assert_true(C[0] == 0 && C[1] == 0 && C[2] == 3 && C[3] == 0 && C[4] == 0 && C[5] == 6);
        C[0] = 7;
        assert_int_equal(tr__sgemm(ctx, 0, 2, 2, tr__mat_of(A, 2, 0, 0), tr__mat_of(B, 2, 0, 0), tout(C, 3, 0, 0)), TR_OK);
        assert_int_equal(tr__sgemm(ctx, 2, 0, 2, tr__mat_of(A, 2, 0, 1), tr__mat_of(B, 2, 0, 1), tout(C, 3, 0, 0)), TR_OK);
        assert_true(C[0] == 7);
    }
    tr_ctx_destroy(ctx);
}

/* Results do not depend on the thread count: 1, 2 and 16 threads give the same bits. */
static void run_threads(tr_ctx *ctx) {
    static const size_t shapes[][3] = {{170, 257, 67}, {97, 260, 513}, {520, 70, 530}, {5, 300, 77}, {640, 11, 200},
                                       {200, 640, 20}, {1, 512, 512}, {64, 64, 64}};
    size_t s;
    int t;
    for (s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (t = 0; t < 8; t++) {
            size_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
            int ta = t & 1, tb = (t >> 1) & 1, acc = t >> 2;
            size_t lda = ta ? M : K, ldb = tb ? K : N;
            float *A = rnd_buf(M * K), *B = rnd_buf(K * N), *C0 = rnd_buf(M * N), *C1 = (float *)malloc(M * N * sizeof(float)),
                  *C2 = (float *)malloc(M * N * sizeof(float));
            int nt;
            assert_non_null(C1), assert_non_null(C2);
            EACH_THREAD_COUNT(nt) { /* (1 thread first: the result the others must give) */
                float *C = nt == 1 ? C1 : C2;
                memcpy(C, C0, M * N * sizeof(float));
                assert_int_equal(tr_ctx_set_num_threads(ctx, nt), TR_OK);
                assert_int_equal(tr__sgemm(ctx, M, N, K, tr__mat_of(A, lda, 0, ta), tr__mat_of(B, ldb, 0, tb), tout(C, N, 0, acc)), TR_OK);
                if (nt > 1 && memcmp(C1, C2, M * N * sizeof(float)) != 0)
                    fail_msg("simd %s: 1 and %d threads differ for M %zu N %zu K %zu ta %d tb %d acc %d", kern_name(ctx), nt, M, N, K, ta, tb, acc);
            }
            assert_int_equal(tr_ctx_set_num_threads(ctx, 2), TR_OK);
            free(C0);
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
        assert_int_equal(tr__sgemm(ctx, M, N, K, tr__mat_of(A, ta ? M : K, 0, ta), tr__mat_of(B, tb ? K : N, 0, tb),
                                   tout(C, N, 0, 0)), TR_ERR_OUT_OF_MEMORY);
        assert_true(strlen(tr_ctx_last_error(ctx)) > 0);
        assert_int_equal(tr_ctx_live_allocs(ctx), 0);
        tr_ctx_fail_alloc_at(ctx, 0);
        assert_int_equal(tr__sgemm(ctx, M, N, K, tr__mat_of(A, ta ? M : K, 0, ta), tr__mat_of(B, tb ? K : N, 0, tb), tout(C, N, 0, 0)), TR_OK);
        tr__sgemm_ref(M, N, K, tr__mat_of(A, ta ? M : K, 0, ta), tr__mat_of(B, tb ? K : N, 0, tb), tout(R, N, 0, 0));
        assert_true(fabs((double)C[N + 3] - (double)R[N + 3]) <= 1e-3);
        assert_int_equal(tr_ctx_live_allocs(ctx), 0);
        tr_ctx_destroy(ctx);
    }
    free(A);
    free(B);
    free(C);
    free(R);
}

/* nb products of one call to tr__sgemm_batched against the same products one by one, bit for
   bit, at 1, 2 and 16 threads, every transpose, with and without accumulation. summed = 0: products
   sharing A (sA = 0; the token mix: one weight times each batch row), run as one GEMM with every
   product's panels side by side. summed = 1: products summed into one C (sC = 0; the token mix's
   weight gradients), run as one GEMM with every product's KC blocks in turn, C taking each block's
   sum in the same order. */
static void run_batched(tr_ctx *ctx, int summed, size_t M, size_t N, size_t K, size_t nb) {
    size_t b, ldc = N + 3, sA = summed ? M * K + 5 : 0, sB = K * N + 7, sC = summed ? 0 : M * ldc + 5;
    size_t na = (nb - 1) * sA + M * K, nc = (nb - 1) * sC + M * ldc;
    int t, th;
    for (t = 0; t < 8; t++) {
        int ta = t & 1, tb = (t >> 1) & 1, acc = t >> 2;
        size_t lda = ta ? M : K, ldb = tb ? K : N;
        float *A = rnd_buf(na), *B = rnd_buf(nb * sB), *C = rnd_buf(nc), *R = (float *)malloc(nc * sizeof(float)), *C0 = (float *)malloc(nc * sizeof(float));
        assert_non_null(R), assert_non_null(C0);
        memcpy(R, C, nc * sizeof(float));
        memcpy(C0, C, nc * sizeof(float));
        for (b = 0; b < nb; b++)
            assert_int_equal(tr__sgemm(ctx, M, N, K, tr__mat_of(A + b * sA, lda, 0, ta), tr__mat_of(B + b * sB, ldb, 0, tb),
                                       tout(R + b * sC, ldc, 0, summed && b > 0 ? 1 : acc)), TR_OK);
        EACH_THREAD_COUNT(th) {
            memcpy(C, C0, nc * sizeof(float));
            assert_int_equal(tr_ctx_set_num_threads(ctx, th), TR_OK);
            assert_int_equal(tr__sgemm_batched(ctx, (int)nb, M, N, K, tr__mat_of(A, lda, sA, ta), tr__mat_of(B, ldb, sB, tb),
                                               tout(C, ldc, sC, acc)), TR_OK);
            if (memcmp(C, R, nc * sizeof(float)) != 0)
                fail_msg("simd %s, %d thread(s): %s batch differs from its products, M %zu N %zu K %zu nb %zu ta %d tb %d acc %d", kern_name(ctx), th,
                         summed ? "summed" : "shared-A", M, N, K, nb, ta, tb, acc);
        }
        free(A), free(B), free(C), free(R), free(C0);
    }
}
/* Widths that are no multiple of the panel, and shapes of the unpacked paths (run one by one). */
static void run_shared_a(tr_ctx *ctx) {
    static const size_t shapes[][4] = {{96, 37, 81, 5}, {200, 128, 81, 3}, {81, 64, 256, 4}, {12, 40, 30, 3}, {70, 6, 20, 3}, {100, 50, 600, 2}};
    size_t s;
    for (s = 0; s < sizeof shapes / sizeof *shapes; s++) run_batched(ctx, 0, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3]);
}
PER_LEVEL_TEST(shared_a)
/* Several NC blocks (N 300 > 256) and several MC blocks (M 400 > 168), depths of one and of several
   KC blocks and no multiple of 4, batches split into several groups (40 x 20 x 520 x 40: 32 products
   of that size fill the 2M floats of packings a group may take), and shapes of the unpacked paths
   (run one by one). */
static void run_summed(tr_ctx *ctx) {
    static const size_t shapes[][4] = {{97, 300, 64, 9}, {400, 97, 64, 3}, {40, 20, 520, 40}, {40, 70, 1100, 3}, {12, 40, 30, 3}, {70, 6, 20, 4}};
    size_t s;
    for (s = 0; s < sizeof shapes / sizeof *shapes; s++) run_batched(ctx, 1, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3]);
}
PER_LEVEL_TEST(summed)

/* Weight operands packed once (tr__pw): with A and B inside an attached region, the product is
   bit-identical to the uncached one on first use and on reuse, at 1, 2 and 16 threads; a write the
   region's version does not see is still served from the cache (which shows the packing is
   reused), and a version bump repacks. The shapes span several KC blocks and MC blocks, and
   every transpose. */
static void run_packed_weights(tr_ctx *ctx) {
    static const size_t shapes[][3] = {{400, 70, 600}, {100, 300, 129}, {37, 33, 20}};
    size_t s;
    int t;
    for (s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (t = 0; t < 4; t++) {
            size_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2], lda, ldb;
            int ta = t & 1, tb = t >> 1, th;
            float *W = rnd_buf(M * K + K * N), *A = W, *B = W + M * K, *R = rnd_buf(M * N), *C = rnd_buf(M * N);
            tr__pw pw;
            lda = ta ? M : K, ldb = tb ? K : N;
            assert_int_equal(tr__sgemm(ctx, M, N, K, tr__mat_of(A, lda, 0, ta), tr__mat_of(B, ldb, 0, tb),
                                       tout(R, N, 0, 0)), TR_OK); /* no region: uncached */
            tr__pw_attach(ctx, &pw, W, M * K + K * N);
            EACH_THREAD_COUNT(th) {
                assert_int_equal(tr_ctx_set_num_threads(ctx, th), TR_OK);
                assert_int_equal(tr__sgemm(ctx, M, N, K, tr__mat_of(A, lda, 0, ta), tr__mat_of(B, ldb, 0, tb), tout(C, N, 0, 0)), TR_OK);
                if (memcmp(C, R, M * N * sizeof(float)) != 0)
                    fail_msg("simd %s, %d thread(s): cached packing differs, M %zu N %zu K %zu ta %d tb %d", kern_name(ctx), th, M, N, K, ta, tb);
            }
            assert_int_equal(pw.count, 2); /* op(A) and op(B), packed once for both calls */
            assert_int_equal(pw.packs, 2);
            B[0] += 1.0f; /* unseen by the version: the cache still answers */
            assert_int_equal(tr__sgemm(ctx, M, N, K, tr__mat_of(A, lda, 0, ta), tr__mat_of(B, ldb, 0, tb), tout(C, N, 0, 0)), TR_OK);
            assert_memory_equal(C, R, M * N * sizeof(float));
            pw.version++; /* what every writer of the weights does */
            assert_int_equal(tr__sgemm(ctx, M, N, K, tr__mat_of(A, lda, 0, ta), tr__mat_of(B, ldb, 0, tb), tout(C, N, 0, 0)), TR_OK);
            assert_int_equal(pw.packs, 4);
            tr__pw_detach(ctx, &pw);
            assert_null(ctx->pw);
            assert_int_equal(tr__sgemm(ctx, M, N, K, tr__mat_of(A, lda, 0, ta), tr__mat_of(B, ldb, 0, tb), tout(R, N, 0, 0)), TR_OK);
            assert_memory_equal(C, R, M * N * sizeof(float));
            free(W), free(R), free(C);
        }
}
PER_LEVEL_TEST(packed_weights)

/* The cache's allocations fail like any other (TR_ERR_OUT_OF_MEMORY, nothing leaked once the
   region is detached); a region whose packings would pass the memory limit is not cached and
   the product is still right. */
static void test_packed_weights_limits(void **state) {
    size_t M = 200, N = 150, K = 100, n = M * K + K * N;
    float *W = rnd_buf(n), *C = rnd_buf(M * N), *R = rnd_buf(M * N);
    tr_ctx *ctx = new_ctx(2);
    tr__pw pw;
    long k;
    (void)state;
    tr__sgemm_ref(M, N, K, tr__mat_of(W, K, 0, 0), tr__mat_of(W + M * K, K, 0, 1), tout(R, N, 0, 0));
    for (k = 1; k <= 2; k++) { /* the op(B) entry, then the op(A) entry */
        tr__pw_attach(ctx, &pw, W, n);
        tr_ctx_fail_alloc_at(ctx, k);
        assert_int_equal(tr__sgemm(ctx, M, N, K, tr__mat_of(W, K, 0, 0), tr__mat_of(W + M * K, K, 0, 1), tout(C, N, 0, 0)), TR_ERR_OUT_OF_MEMORY);
        tr_ctx_fail_alloc_at(ctx, 0);
        assert_true(strlen(tr_ctx_last_error(ctx)) > 0);
        tr__pw_detach(ctx, &pw);
        assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    }
    ctx->mem_limit = 8 * n + 4 * K * 16; /* the weights' own share fits, their packings do not */
    tr__pw_attach(ctx, &pw, W, n);
    assert_int_equal(tr__sgemm(ctx, M, N, K, tr__mat_of(W, K, 0, 0), tr__mat_of(W + M * K, K, 0, 1), tout(C, N, 0, 0)), TR_OK);
    assert_int_equal(pw.count, 0);
    for (k = 0; k < (long)(M * N); k++) /* |C| <= K = 100 products of [-1, 1) values: (K + 2) 2^-23 K ~ 1.2e-3 */
        if (!(fabs((double)C[k] - (double)R[k]) <= 2e-3)) fail_msg("uncached product wrong at %ld: %g vs %g", k, (double)C[k], (double)R[k]);
    tr__pw_detach(ctx, &pw);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
    free(W), free(C), free(R);
}

/* vdpbf16ps's rule written out directly (the test's own, from Intel's SDM): C's element takes, KC
   block by KC block (the driver's blocking: ceil(K/512) blocks of a multiple of 4 deep, the last
   shallower), the block's sum t, where t runs over the pairs (k, k+1) of the block as
   t = ftz(t + a_{k+1} b_{k+1}), then t = ftz(t + a_k b_k), on operands rounded to bfloat16 and
   flushed to zero if denormal; each product exact and each sum rounded once to float. */
static float ftz(float x) { return fabsf(x) < FLT_MIN ? 0.0f * x : x; }
static void ref_bf16_pairs(int ta, int tb, size_t M, size_t N, size_t K, const float *A, size_t lda, const float *B, size_t ldb, float *C, size_t ldc, int acc) {
    size_t nkb = (K + 511) / 512, kc = ((K + nkb - 1) / nkb + 3) / 4 * 4, i, j, k0, k, h;
    float *a = (float *)malloc(M * K * sizeof(float)), *b = (float *)malloc(K * N * sizeof(float)); /* op(A) row-major, op(B) column-major, rounded */
    assert_non_null(a), assert_non_null(b);
    for (i = 0; i < M; i++)
        for (k = 0; k < K; k++) a[i * K + k] = ftz(tr__round1(TR_FWD_BFLOAT16, ta ? A[k * lda + i] : A[i * lda + k]));
    for (j = 0; j < N; j++)
        for (k = 0; k < K; k++) b[j * K + k] = ftz(tr__round1(TR_FWD_BFLOAT16, tb ? B[j * ldb + k] : B[k * ldb + j]));
    if (kc > K) kc = K;
    for (i = 0; i < M; i++)
        for (j = 0; j < N; j++)
            for (k0 = 0; k0 < K; k0 += kc) {
                float t = 0.0f;
                for (k = k0; k < k0 + kc && k < K; k += 2)
                    for (h = 2; h-- > 0;)
                        if (k + h < K && k + h < k0 + kc) /* (24 + 16 bits: one rounding, to float) */
                            t = ftz((float)((double)t + (double)a[i * K + k + h] * (double)b[j * K + k + h]));
                C[i * ldc + j] = acc || k0 > 0 ? C[i * ldc + j] + t : t;
            }
    free(a), free(b);
}

/* The bfloat16 products bit for bit: the scalar twin (and vdpbf16ps, where the CPU has it) against
   the rule above, on raw operands (the packings round them to nearest even: those of a bfloat16
   model are bfloat16 values already), every transpose, odd depths (a half-empty last pair) and
   several KC blocks, at 1, 2 and 16 threads. Products that do not run in bfloat16 pairs: a float32
   model's (the fp32 kernels, bit-identical to no setting at all), TINYREC_CPU_BF16=0, and the short
   products (M <= 16), which stay on the fp32 kernels. The two layouts get separate weight packings. */
static void test_bf16_pairs(void **state) {
    static const size_t shapes[][3] = {{37, 45, 1}, {17, 9, 3}, {64, 64, 64}, {60, 40, 1101}, {170, 130, 255}, {20, 300, 513}};
    tr_ctx *ctx = new_ctx(2);
    tr_cpu_info ci;
    int is_intel, mode, t, th, native = 0;
    size_t s;
    (void)state;
    assert_int_equal(tr_cpu_info_get(ctx, &ci), TR_OK);
    is_intel = strstr(ci.model, "Intel") != NULL;
    static const int settings[3] = {2, 3, 1}; /* TINYREC_CPU_BF16: the twin, vdpbf16ps, AMX */
    int set;
    for (set = 0; set < 3; set++) {
        g_prec = TR_FWD_BFLOAT16, ctx->bf16_gemm = settings[set];
        if (set > 0 && (tr_ctx_set_simd(ctx, "avx512") != TR_OK || !ctx->cpu_bf16)) break;
        if (set == 2 && !ctx->cpu_amx) break;
        mode = tr__bgemm_mode(ctx, g_prec);
        assert_int_equal(mode, set == 0 ? TR__BG_TWIN : set == 1 ? TR__BG_DPBF16 : TR__BG_AMX);
        native += set > 0;
        for (s = 0; s < sizeof shapes / sizeof *shapes; s++)
            for (t = 0; t < 8; t++) {
                size_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2], n;
                int ta = t & 1, tb = (t >> 1) & 1, acc = t >> 2;
                float *A = rnd_buf(M * K), *B = rnd_buf(K * N), *C = rnd_buf(M * N), *R = (float *)malloc(M * N * sizeof(float)), *C0 = (float *)malloc(M * N * sizeof(float));
                assert_non_null(R), assert_non_null(C0);
                for (n = 0; n < M * K; n += 7) A[n] *= 1e-19f; /* some products that flush to zero */
                for (n = 0; n < K * N; n += 5) B[n] *= 1e-20f;
                memcpy(R, C, M * N * sizeof(float)), memcpy(C0, C, M * N * sizeof(float));
                ref_bf16_pairs(ta, tb, M, N, K, A, ta ? M : K, B, tb ? K : N, R, N, acc);
                EACH_THREAD_COUNT(th) {
                    memcpy(C, C0, M * N * sizeof(float));
                    assert_int_equal(tr_ctx_set_num_threads(ctx, th), TR_OK);
                    assert_int_equal(tr__sgemm(ctx, M, N, K, tr__mat_of(A, ta ? M : K, 0, ta), tr__mat_of(B, tb ? K : N, 0, tb),
                                               tout(C, N, 0, acc)), TR_OK);
                    /* vdpbf16ps is checked bit for bit where its semantics are Intel's documented ones; elsewhere, and AMX (whose
                       rounding of its sums the SDM leaves open), within the fp32 bound of check_one */
                    if (mode == TR__BG_TWIN || (mode == TR__BG_DPBF16 && is_intel)) {
                        for (n = 0; n < M * N; n++)
                            if (memcmp(&C[n], &R[n], sizeof(float)) != 0)
                                fail_msg("%s, %d thread(s), M %zu N %zu K %zu ta %d tb %d acc %d: C[%zu] = %.9g, the rule %.9g", kern_name(ctx), th, M, N, K, ta, tb, acc, n,
                                         (double)C[n], (double)R[n]);
                    } else
                        for (n = 0; n < M * N; n++)
                            if (!(fabs((double)C[n] - (double)R[n]) <= (double)(K + 2) / 8388608.0 * ((double)K + fabs((double)C0[n]))))
                                fail_msg("%s: C[%zu] = %.9g, the rule %.9g", kern_name(ctx), n, (double)C[n], (double)R[n]);
                }
                free(A), free(B), free(C), free(R), free(C0);
            }
    }
    if (!native) print_message("(no AVX512_BF16 on this CPU: vdpbf16ps not run, its twin was)\n");
    { /* who runs in pairs, and the packed weights' separate layouts */
        size_t M = 40, N = 50, K = 60;
        float *W = rnd_buf(M * K + K * N), *C1 = rnd_buf(M * N), *C2 = rnd_buf(M * N);
        tr__pw pw;
        tr_ctx_set_simd(ctx, "auto");
        ctx->bf16_gemm = TR__BG_TWIN;
        g_prec = 0;
        assert_int_equal(tr__bgemm_mode(ctx, g_prec), 0);
        g_prec = TR_FWD_FLOAT16;
        assert_int_equal(tr__bgemm_mode(ctx, g_prec), 0);
        g_prec = TR_FWD_BFLOAT16, ctx->bf16_gemm = 0;
        assert_int_equal(tr__bgemm_mode(ctx, g_prec), 0);
        assert_int_equal(tr__sgemm(ctx, M, N, K, tr__mat_of(W, K, 0, 0), tr__mat_of(W + M * K, N, 0, 0), tout(C1, N, 0, 0)), TR_OK);
        g_prec = 0;
        assert_int_equal(tr__sgemm(ctx, M, N, K, tr__mat_of(W, K, 0, 0), tr__mat_of(W + M * K, N, 0, 0), tout(C2, N, 0, 0)), TR_OK);
        assert_memory_equal(C1, C2, M * N * sizeof(float));
        tr__pw_attach(ctx, &pw, W, M * K + K * N);
        assert_int_equal(tr__sgemm(ctx, M, N, K, tr__mat_of(W, K, 0, 0), tr__mat_of(W + M * K, N, 0, 0), tout(C1, N, 0, 0)), TR_OK);
        g_prec = TR_FWD_BFLOAT16, ctx->bf16_gemm = 2;
        assert_int_equal(tr__sgemm(ctx, M, N, K, tr__mat_of(W, K, 0, 0), tr__mat_of(W + M * K, N, 0, 0), tout(C2, N, 0, 0)), TR_OK);
        assert_int_equal(pw.count, 4);
        ref_bf16_pairs(0, 0, M, N, K, W, K, W + M * K, N, C1, N, 0);
        assert_memory_equal(C1, C2, M * N * sizeof(float));
        tr__pw_detach(ctx, &pw);
        /* short products: the fp32 kernels on the (already bfloat16) values */
        tr__round_ref(TR_FWD_BFLOAT16, W, M * K + K * N);
        assert_int_equal(tr__sgemm(ctx, 16, N, K, tr__mat_of(W, K, 0, 0), tr__mat_of(W + M * K, N, 0, 0), tout(C1, N, 0, 0)), TR_OK);
        g_prec = 0;
        assert_int_equal(tr__sgemm(ctx, 16, N, K, tr__mat_of(W, K, 0, 0), tr__mat_of(W + M * K, N, 0, 0), tout(C2, N, 0, 0)), TR_OK);
        assert_memory_equal(C1, C2, 16 * N * sizeof(float));
        free(W), free(C1), free(C2);
    }
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
    { /* TINYREC_CPU_BF16: 0..3, anything else refused at tr_ctx_create */
        static const char *const bad[] = {"4", "-1", "1x", "amx", " 1"};
        size_t b;
        tr_ctx *c2 = NULL;
        setenv("TINYREC_CPU_BF16", "3", 1);
        assert_int_equal(tr_ctx_create(NULL, &c2), TR_OK);
        assert_int_equal(c2->bf16_gemm, 3);
        tr_ctx_destroy(c2);
        for (b = 0; b < sizeof bad / sizeof *bad; b++) {
            setenv("TINYREC_CPU_BF16", bad[b], 1);
            c2 = (tr_ctx *)&b;
            assert_int_equal(tr_ctx_create(NULL, &c2), TR_ERR_INVALID_ARG);
            assert_null(c2);
        }
        unsetenv("TINYREC_CPU_BF16");
        assert_int_equal(tr_ctx_create(NULL, &c2), TR_OK);
        assert_int_equal(c2->bf16_gemm, 1);
        tr_ctx_destroy(c2);
    }
}

/* The micro-tile the products of a depth-K GEMM in the precision prec run on here (tr__sgemm_nb's choice). */
static void kern_tile(tr_ctx *ctx, int prec, size_t K, size_t *mr, size_t *nr) {
    tr__sgemm_kern k = tr__sgemm_kernels(ctx->simd);
    int mode = tr__bgemm_mode(ctx, prec);
    if (mode == TR__BG_AMX && K < 32) mode = TR__BG_DPBF16;
    if (mode) tr__bgemm_kernels(&k, mode);
    *mr = k.mr, *nr = k.nr;
}

/* tr__op_gate_up_fused on nb products of M x N over K (A one for all, B a batch) with the test's layouts: gate_up as the
   product stores it (rows N apart, products M x N apart; up half (pair_m) rows or half columns further), the activation
   rows (pair_m: N, else half) apart, products half x N apart. */
static tr_status gate_up_fused(tr_ctx *ctx, int fdt, int pair_m, int nb, size_t M, size_t N, size_t K, tr__mat a, tr__mat b, int keep_gu, tr__buf gu,
                               tr__buf act, int *done) {
    size_t half = (pair_m ? M : N) / 2;
    tr__gemm g;
    tr__gu_epi e;
    memset(&g, 0, sizeof g);
    memset(&e, 0, sizeof e);
    g.nb = nb, g.M = M, g.N = N, g.K = K, g.a = a, g.b = b;
    e.pair_m = pair_m, e.keep_gu = keep_gu, e.gu = gu, e.act = act;
    e.gu_ld = N, e.gu_s = M * N, e.gu_up = pair_m ? half * N : half, e.act_ld = pair_m ? N : half, e.act_s = half * N;
    return tr__op_gate_up_fused(ctx, fdt, &g, &e, done);
}

/* A SwiGLU's gate_up product with the activation in its epilogue (tr__op_gate_up_fused) gives the bits of the passes it
   replaces (the rounded product, the tape's 16-bit copy, the activation), at 1, 2 and 16 threads: the channel SwiGLU's
   layout (halves side by side in columns) and the token mix's (halves in rows, nb products sharing the weight, packed
   in halves: half rows of no multiple of the micro-tile too). It runs where it can in one KC block, and says so;
   elsewhere it writes nothing. */
static void run_gate_up_fused(tr_ctx *ctx) {
    /* {pair_m, nb, M, N, K}: M x N is C (2 half rows with pair_m, else 2 half columns) */
    static const size_t shapes[][5] = {{0, 1, 97, 512, 64}, {0, 1, 40, 128, 37}, {0, 1, 130, 64, 512}, {0, 1, 33, 96, 513}, {0, 1, 16, 64, 40},
                                       {1, 3, 192, 37, 40}, {1, 2, 192, 64, 40}, {1, 2, 128, 64, 97}, {1, 1, 168, 20, 33}, {1, 2, 64, 7, 40}};
    int fdts[3] = {0, TR_FWD_BFLOAT16, TR_FWD_FLOAT16}, nf = g_prec ? 1 : 3, f, keep, th;
    size_t s, i;
    if (g_prec) fdts[0] = g_prec;
    for (f = 0; f < nf; f++)
        for (s = 0; s < sizeof shapes / sizeof *shapes; s++)
            for (keep = 0; keep < 3; keep++) { /* gate_up not kept, kept in fp32, kept in 16 bits */
                int fdt = fdts[f], pair_m = (int)shapes[s][0], nb = (int)shapes[s][1], done, expect;
                if (fdt == 0 && keep == 2) continue; /* (no 16-bit copy in float32) */
                size_t M = shapes[s][2], N = shapes[s][3], K = shapes[s][4], half = (pair_m ? M : N) / 2, mr, nr;
                size_t lda = K, ldb = pair_m ? N : K, sB = pair_m ? K * N + 3 : 0, nC = (size_t)nb * M * N, nact = (size_t)nb * half * (pair_m ? N : M);
                size_t act_s = half * N;
                float *A = rnd_buf(M * K), *B = rnd_buf((size_t)nb * (sB ? sB : K * N)), *C = (float *)malloc(nC * sizeof(float));
                float *act_ref = (float *)malloc(nact * sizeof(float)), *act = (float *)malloc(nact * sizeof(float));
                float *gu = (float *)malloc(nC * sizeof(float)), *h_ref = (float *)malloc(nC * sizeof(float)), *h = (float *)malloc(nC * sizeof(float));
                assert_non_null(C), assert_non_null(act_ref), assert_non_null(act), assert_non_null(gu), assert_non_null(h_ref), assert_non_null(h);
                if (fdt) tr__round_ref(fdt, A, M * K), tr__round_ref(fdt, B, (size_t)nb * (sB ? sB : K * N)); /* a model's operands */
                /* the passes: the product rounded, its 16-bit copy, the activation (pair_m: each product's gate rows, then
                   its up rows; else each row's gate columns, then its up columns) */
                if (pair_m) assert_int_equal(tr__op_sgemm_rnd(ctx, fdt, nb, M, N, K, tr__mat_of(A, lda, 0, 0), tr__mat_of(B, ldb, sB, 0),
                                                              tout(C, N, M * N, 0)), TR_OK);
                else assert_int_equal(tr__op_sgemm_rnd(ctx, fdt, 1, M, N, K, tr__mat_of(A, lda, 0, 0), tr__mat_of(B, ldb, 0, 1),
                                                       tout(C, N, 0, 0)), TR_OK);
                if (fdt) assert_int_equal(tr__op_half(ctx, fdt, 0, C, h_ref, nC), TR_OK);
                if (pair_m) assert_int_equal(tr__op_swiglu_fwd(ctx, fdt, nb, (long)(half * N), tr__f32(C), M * N, tr__f32(act_ref), act_s), TR_OK);
                else assert_int_equal(tr__op_swiglu_fwd(ctx, fdt, (long)M, (long)half, tr__f32(C), N, tr__f32(act_ref), half), TR_OK);
                kern_tile(ctx, fdt, K, &mr, &nr);
                expect = K <= TR__SG_KC && M > TR__SG_SMALL_M && N > TR__SG_SMALL_N && (pair_m || half % nr == 0); /* (pair_m: A packed in halves) */
                if (ctx->simd == TR__SIMD_AVX2 || ctx->simd == TR__SIMD_NEON) { /* (their activation's tails: scalar) */
                    size_t lanes = ctx->simd == TR__SIMD_AVX2 ? 8 : 4;
                    expect = expect && (pair_m ? N : half) % lanes == 0 && nr % lanes == 0;
                }
                EACH_THREAD_COUNT(th) {
                    for (i = 0; i < nC; i++) gu[i] = h[i] = NAN;
                    for (i = 0; i < nact; i++) act[i] = NAN;
                    assert_int_equal(tr_ctx_set_num_threads(ctx, th), TR_OK);
                    assert_int_equal(gate_up_fused(ctx, fdt, pair_m, nb, M, N, K, tr__mat_of(A, lda, 0, 0), tr__mat_of(B, ldb, sB, !pair_m), keep > 0,
                                                   keep == 2 ? tr__buf_of(h, fdt) : tr__f32(gu), tr__f32(act), &done),
                                     TR_OK);
                    if (done != expect)
                        fail_msg("%s: pair_m %d M %zu N %zu K %zu: fused %d, expected %d (tile %zu x %zu)", kern_name(ctx), pair_m, M, N, K, done, expect, mr, nr);
                    for (i = 0; i < nact; i++)
                        if (done ? memcmp(&act[i], &act_ref[i], sizeof(float)) != 0 : !isnan(act[i]))
                            fail_msg("%s, fdt %d, %d thread(s), pair_m %d M %zu N %zu K %zu: act[%zu] = %.9g, the passes' %.9g", kern_name(ctx), fdt, th, pair_m, M, N, K, i,
                                     (double)act[i], (double)act_ref[i]);
                    for (i = 0; i < nC; i++) {
                        if (done && keep == 1 ? memcmp(&gu[i], &C[i], sizeof(float)) != 0 : !isnan(gu[i]))
                            fail_msg("%s, fdt %d, keep %d, pair_m %d M %zu N %zu K %zu: gu[%zu] = %.9g, the product's %.9g", kern_name(ctx), fdt, keep, pair_m, M, N, K, i,
                                     (double)gu[i], (double)C[i]);
                        if (keep == 2 && (done ? ((uint16_t *)h)[i] != ((uint16_t *)h_ref)[i] : !isnan(h[i / 2])))
                            fail_msg("%s, fdt %d, pair_m %d M %zu N %zu K %zu: 16-bit gu[%zu] = %04x, the copy's %04x", kern_name(ctx), fdt, pair_m, M, N, K, i,
                                     ((uint16_t *)h)[i], ((uint16_t *)h_ref)[i]);
                    }
                    if (fdt && done) { /* the activation stored in 16 bits (a 16-bit workspace's): the passes' values exactly */
                        uint16_t *a16 = (uint16_t *)gu, *a16_ref = (uint16_t *)h_ref, *A16 = (uint16_t *)malloc(M * K * sizeof(uint16_t)); /* (nact <= nC) */
                        int one = nb == 1 && !pair_m; /* (A in 16 bits too where it is one product's) */
                        assert_non_null(A16);
                        tr__half_ref(fdt, 0, act_ref, a16_ref, nact);
                        tr__half_ref(fdt, 0, A, A16, M * K);
                        assert_int_equal(gate_up_fused(ctx, fdt, pair_m, nb, M, N, K, one ? tr__mat16_of(A16, lda, 0, 0, fdt) : tr__mat_of(A, lda, 0, 0),
                                                       tr__mat_of(B, ldb, sB, !pair_m), 0, tr__f32(NULL), tr__buf_of(a16, fdt), &done),
                                         TR_OK);
                        free(A16);
                        assert_true(done);
                        if (memcmp(a16, a16_ref, nact * sizeof(uint16_t)) != 0)
                            fail_msg("%s, fdt %d, %d thread(s), pair_m %d M %zu N %zu K %zu: the 16-bit activation differs", kern_name(ctx), fdt, th, pair_m, M, N, K);
                        if (keep == 2) assert_int_equal(tr__op_half(ctx, fdt, 0, C, h_ref, nC), TR_OK); /* (h_ref back for the next thread count) */
                    }
                }
                free(A), free(B), free(C), free(act_ref), free(act), free(gu), free(h_ref), free(h);
            }
}
PER_LEVEL_TEST(gate_up_fused)

/* A product rounded as it is stored (tr__op_sgemm_rnd's epilogue on the CPU, one KC block) gives the bits of the product
   followed by the rounding pass, at 1, 2 and 16 threads, alone and as products sharing A; deeper ones take the pass. */
static void run_round_epilogue(tr_ctx *ctx) {
    /* {nb, M, N, K} */
    static const size_t shapes[][4] = {{1, 97, 512, 64}, {1, 40, 37, 512}, {3, 64, 50, 97}, {2, 33, 20, 40}, {1, 30, 40, 600}, {1, 12, 40, 30}};
    int fdts[2] = {TR_FWD_BFLOAT16, TR_FWD_FLOAT16}, nf = g_prec ? 1 : 2, f, th, t;
    size_t s, i;
    if (g_prec) fdts[0] = g_prec;
    for (f = 0; f < nf; f++)
        for (s = 0; s < sizeof shapes / sizeof *shapes; s++)
            for (t = 0; t < 4; t++) {
                int fdt = fdts[f], ta = t & 1, tb = t >> 1, nb = (int)shapes[s][0];
                size_t M = shapes[s][1], N = shapes[s][2], K = shapes[s][3], sB = K * N + 3, sC = M * N + 5, nC = (size_t)(nb - 1) * sC + M * N;
                float *A = rnd_buf(M * K), *B = rnd_buf((size_t)nb * sB), *R = (float *)malloc(nC * sizeof(float)), *C = (float *)malloc(nC * sizeof(float));
                tr__sgemm_epi e;
                assert_non_null(R), assert_non_null(C);
                tr__round_ref(fdt, A, M * K), tr__round_ref(fdt, B, (size_t)nb * sB);
                for (i = 0; i < nC; i++) R[i] = C[i] = NAN;
                assert_int_equal(tr__op_sgemm_batched(ctx, nb, M, N, K, tr__mat_of(A, ta ? M : K, 0, ta), tr__mat_of(B, tb ? K : N, sB, tb),
                                                      tr__out_in(tout(R, N, sC, 0), fdt)), TR_OK); /* (a rounded product multiplies in its precision) */
                assert_int_equal(tr__op_round_rows(ctx, fdt, R, (size_t)nb, M * N, sC), TR_OK);
                EACH_THREAD_COUNT(th) {
                    assert_int_equal(tr_ctx_set_num_threads(ctx, th), TR_OK);
                    tr__sgemm_epi_init(ctx, fdt, &e);
                    e.round_only = 1;
                    assert_int_equal(tr__sgemm_nb(ctx, (size_t)nb, 1, M, N, K, tr__mat_of(A, ta ? M : K, 0, ta), tr__mat_of(B, tb ? K : N, sB, tb),
                                                  tr__out_in(tout(C, N, sC, 0), fdt), &e), TR_OK);
                    assert_int_equal(e.done, K <= TR__SG_KC && M > TR__SG_SMALL_M && (N > TR__SG_SMALL_N || ta));
                    if (!e.done) assert_int_equal(tr__op_sgemm_rnd(ctx, fdt, nb, M, N, K, tr__mat_of(A, ta ? M : K, 0, ta), tr__mat_of(B, tb ? K : N, sB, tb),
                                                                   tout(C, N, sC, 0)), TR_OK);
                    for (i = 0; i < nC; i++)
                        if (memcmp(&C[i], &R[i], sizeof(float)) != 0 && !(isnan(C[i]) && isnan(R[i])))
                            fail_msg("%s, fdt %d, %d thread(s), nb %d M %zu N %zu K %zu ta %d tb %d: C[%zu] = %.9g, the pass's %.9g", kern_name(ctx), fdt, th, nb, M, N,
                                     K, ta, tb, i, (double)C[i], (double)R[i]);
                    for (i = 0; i < nC; i++) C[i] = NAN;
                }
                free(A), free(B), free(R), free(C);
            }
}
PER_LEVEL_TEST(round_epilogue)

/* A given as 16-bit values (tr__op_sgemm on a 16-bit operand, the CPU's 16-bit workspace; with B so too, half the cases), or B, gives the
   bits of the product on the fp32 values they hold, at 1, 2 and 16 threads, on every path: short (M <= 16) and narrow
   (N <= 8) products that read A in place, packed ones with a slab per thread (many M blocks) or op(A) packed once (few,
   N cut), deeper than one KC block, with either transposition of A and accumulating or not; in batches too. */
static void run_a16_operand(tr_ctx *ctx) {
    /* {M, N, K} */
    static const size_t shapes[][3] = {{12, 40, 30}, {50, 6, 70}, {1400, 24, 40}, {170, 64, 97}, {90, 33, 1101}};
    int fdts[2] = {TR_FWD_BFLOAT16, TR_FWD_FLOAT16}, nf = g_prec ? 1 : 2, f, th, t;
    size_t s, i;
    if (g_prec) fdts[0] = g_prec;
    for (f = 0; f < nf; f++)
        for (s = 0; s < sizeof shapes / sizeof *shapes; s++)
            for (t = 0; t < 8; t++) {
                int fdt = fdts[f], ta = t & 1, tb = (t >> 1) & 1, acc = t >> 2, b16 = (int)((s + (size_t)t) & 1); /* (B in 16 bits too, half the cases) */
                size_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2], lda = (ta ? M : K) + 3, nA = (ta ? K : M) * lda;
                float *A = rnd_buf(nA), *B = rnd_buf(K * N), *C0 = rnd_buf(M * N), *R = (float *)malloc(M * N * sizeof(float)),
                      *C = (float *)malloc(M * N * sizeof(float));
                uint16_t *A16 = (uint16_t *)malloc(nA * sizeof(uint16_t)), *B16 = (uint16_t *)malloc(K * N * sizeof(uint16_t));
                assert_non_null(R), assert_non_null(C), assert_non_null(A16), assert_non_null(B16);
                tr__round_ref(fdt, A, nA), tr__round_ref(fdt, B, K * N);
                tr__half_ref(fdt, 0, A, A16, nA), tr__half_ref(fdt, 0, B, B16, K * N);
                memcpy(R, C0, M * N * sizeof(float));
                assert_int_equal(tr__sgemm(ctx, M, N, K, tr__mat_of(A, lda, 0, ta), tr__mat_of(B, tb ? K : N, 0, tb), tout(R, N, 0, acc)), TR_OK);
                EACH_THREAD_COUNT(th) {
                    assert_int_equal(tr_ctx_set_num_threads(ctx, th), TR_OK);
                    memcpy(C, C0, M * N * sizeof(float));
                    assert_int_equal(tr__op_sgemm(ctx, M, N, K, tr__mat16_of(A16, lda, 0, ta, fdt),
                                                  b16 ? tr__mat16_of(B16, tb ? K : N, 0, tb, fdt) : tr__mat_of(B, tb ? K : N, 0, tb), tout(C, N, 0, acc)),
                                     TR_OK);
                    for (i = 0; i < M * N; i++)
                        if (memcmp(&C[i], &R[i], sizeof(float)) != 0)
                            fail_msg("%s, fdt %d, %d thread(s), M %zu N %zu K %zu ta %d tb %d acc %d: C[%zu] = %.9g from 16 bits, %.9g from fp32", kern_name(ctx), fdt,
                                     th, M, N, K, ta, tb, acc, i, (double)C[i], (double)R[i]);
                }
                free(A), free(B), free(C0), free(R), free(C), free(A16), free(B16);
            }
    /* B as 16-bit values (a 16-bit tape's), and A too in half the cases: alone, as products sharing A, and summed into C,
       at odd batch strides (a product's B, or A, starts mid-float) */
    for (f = 0; f < nf; f++)
        for (s = 0; s < sizeof shapes / sizeof *shapes; s++)
            for (t = 0; t < 12; t++) {
                int fdt = fdts[f], ta = t & 1, tb = (t >> 1) & 1, kind = t >> 2, nb = kind ? 3 : 1, acc = kind != 1, a16 = (int)((s + (size_t)t) & 1);
                size_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2], ldb = (tb ? K : N) + 1, sB = (tb ? N : K) * ldb + 1;
                size_t sA = kind == 2 ? M * K + 3 : 0, sC = kind == 2 ? 0 : M * N + 5, nC = (size_t)(nb - 1) * sC + M * N, nB = (size_t)nb * sB;
                float *A = rnd_buf((size_t)(nb - 1) * sA + M * K), *B = rnd_buf(nB), *C0 = rnd_buf(nC), *R = (float *)malloc(nC * sizeof(float)),
                      *C = (float *)malloc(nC * sizeof(float));
                size_t nA = (size_t)(nb - 1) * sA + M * K;
                uint16_t *B16 = (uint16_t *)malloc(nB * sizeof(uint16_t)), *A16 = (uint16_t *)malloc(nA * sizeof(uint16_t));
                assert_non_null(R), assert_non_null(C), assert_non_null(B16), assert_non_null(A16);
                tr__round_ref(fdt, B, nB), tr__round_ref(fdt, A, nA);
                tr__half_ref(fdt, 0, B, B16, nB), tr__half_ref(fdt, 0, A, A16, nA);
                memcpy(R, C0, nC * sizeof(float));
                assert_int_equal(tr__sgemm_batched(ctx, nb, M, N, K, tr__mat_of(A, ta ? M : K, sA, ta), tr__mat_of(B, ldb, sB, tb),
                                                   tout(R, N, sC, acc)), TR_OK);
                EACH_THREAD_COUNT(th) {
                    assert_int_equal(tr_ctx_set_num_threads(ctx, th), TR_OK);
                    memcpy(C, C0, nC * sizeof(float));
                    assert_int_equal(tr__op_sgemm_batched(ctx, nb, M, N, K, a16 ? tr__mat16_of(A16, ta ? M : K, sA, ta, fdt) : tr__mat_of(A, ta ? M : K, sA, ta),
                                                          tr__mat16_of(B16, ldb, sB, tb, fdt), tout(C, N, sC, acc)),
                                     TR_OK);
                    for (i = 0; i < nC; i++)
                        if (memcmp(&C[i], &R[i], sizeof(float)) != 0)
                            fail_msg("%s, fdt %d, %d thread(s), nb %d M %zu N %zu K %zu ta %d tb %d sC %zu: C[%zu] = %.9g from 16-bit B, %.9g from fp32", kern_name(ctx),
                                     fdt, th, nb, M, N, K, ta, tb, sC, i, (double)C[i], (double)R[i]);
                }
                free(A), free(B), free(C0), free(R), free(C), free(B16), free(A16);
            }
    {
        float A[4 * 4] = {0}, B[4 * 4] = {0}, C[2 * 16];
        /* (a 16-bit operand's type must be a 16-bit one) */
        assert_int_equal(tr__op_sgemm(ctx, 4, 4, 4, tr__mat_of(A, 4, 0, 0), tr__mat16_of(B, 4, 0, 0, 3), tout(C, 4, 0, 0)), TR_ERR_GENERIC);
        assert_int_equal(tr__op_sgemm(ctx, 4, 4, 4, tr__mat16_of(A, 4, 0, 0, 3), tr__mat_of(B, 4, 0, 0), tout(C, 4, 0, 0)), TR_ERR_GENERIC);
    }
}
PER_LEVEL_TEST(a16_operand)

/* The rounded products of a 16-bit workspace (tr__op_sgemm_rnd on 16-bit operands): any of A, B and C in 16 bits give the
   bits of tr__op_sgemm_rnd on the fp32 values, C stored as their 16 bits, in the epilogue (one KC block), staged
   (deeper or accumulating; several M blocks) or through an fp32 C (short, narrow), alone and as products sharing A. */
static void run_rnd16(tr_ctx *ctx) {
    /* {nb, M, N, K} */
    static const size_t shapes[][4] = {{1, 97, 512, 64}, {1, 40, 37, 512}, {3, 64, 50, 97}, {2, 33, 20, 40}, {1, 30, 40, 600}, {1, 12, 40, 30}, {2, 50, 6, 20}, {2, 170, 24, 530}};
    int fdts[2] = {TR_FWD_BFLOAT16, TR_FWD_FLOAT16}, nf = g_prec ? 1 : 2, f, x, acc;
    size_t s, i;
    if (g_prec) fdts[0] = g_prec;
    for (f = 0; f < nf; f++)
        for (s = 0; s < sizeof shapes / sizeof *shapes; s++)
            for (x = 1; x < 8; x++)
                for (acc = 0; acc < 2; acc++) {
                    int fdt = fdts[f], nb = (int)shapes[s][0], ta = (x + (int)s) & 1, tb = ((x >> 1) + (int)s) & 1;
                    size_t M = shapes[s][1], N = shapes[s][2], K = shapes[s][3], sB = K * N + 3, sC = M * N + 5, nC = (size_t)(nb - 1) * sC + M * N;
                    float *A = rnd_buf(M * K), *B = rnd_buf((size_t)nb * sB), *R = rnd_buf(nC), *C = (float *)malloc(nC * sizeof(float));
                    uint16_t *A16 = (uint16_t *)malloc(M * K * sizeof(uint16_t)), *B16 = (uint16_t *)malloc((size_t)nb * sB * sizeof(uint16_t)),
                             *C16 = (uint16_t *)malloc(nC * sizeof(uint16_t)), *R16 = (uint16_t *)malloc(nC * sizeof(uint16_t));
                    int use_a = (x & 1) != 0; /* (x: A, B and C in 16 bits, a bit each) */
                    assert_non_null(C), assert_non_null(A16), assert_non_null(B16), assert_non_null(C16), assert_non_null(R16);
                    tr__round_ref(fdt, A, M * K), tr__round_ref(fdt, B, (size_t)nb * sB), tr__round_ref(fdt, R, nC);
                    tr__half_ref(fdt, 0, A, A16, M * K), tr__half_ref(fdt, 0, B, B16, (size_t)nb * sB), tr__half_ref(fdt, 0, R, C16, nC);
                    memcpy(C, R, nC * sizeof(float));
                    assert_int_equal(tr__op_sgemm_rnd(ctx, fdt, nb, M, N, K, tr__mat_of(A, ta ? M : K, 0, ta), tr__mat_of(B, tb ? K : N, sB, tb),
                                                      tout(R, N, sC, acc)), TR_OK);
                    assert_int_equal(tr__op_sgemm_rnd(ctx, fdt, nb, M, N, K, tr__mat16_of(use_a ? (const void *)A16 : A, ta ? M : K, 0, ta, use_a ? fdt : 0),
                                                      tr__mat16_of((x & 2) ? (const void *)B16 : B, tb ? K : N, sB, tb, (x & 2) ? fdt : 0),
                                                      tout16((x & 4) ? (void *)C16 : C, N, sC, acc, (x & 4) ? fdt : 0)),
                                     TR_OK);
                    if (x & 4) {
                        tr__half_ref(fdt, 0, R, R16, nC);
                        for (i = 0; i < nC; i++)
                            if (C16[i] != R16[i])
                                fail_msg("%s, fdt %d, x16 %d, nb %d M %zu N %zu K %zu ta %d tb %d acc %d: 16-bit C[%zu] = %04x, the fp32 product's %04x", kern_name(ctx), fdt, x,
                                         nb, M, N, K, ta, tb, acc, i, C16[i], R16[i]);
                    } else
                        for (i = 0; i < nC; i++)
                            if (memcmp(&C[i], &R[i], sizeof(float)) != 0)
                                fail_msg("%s, fdt %d, x16 %d, nb %d M %zu N %zu K %zu ta %d tb %d acc %d: C[%zu] = %.9g, the fp32 product's %.9g", kern_name(ctx), fdt, x,
                                         nb, M, N, K, ta, tb, acc, i, (double)C[i], (double)R[i]);
                    free(A), free(B), free(R), free(C), free(A16), free(B16), free(C16), free(R16);
                }
}
PER_LEVEL_TEST(rnd16)

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_degenerate),   cmocka_unit_test(test_random_small),    cmocka_unit_test(test_edges),
        cmocka_unit_test(test_neon_edges),
        cmocka_unit_test(test_large),        cmocka_unit_test(test_threads_bitwise), cmocka_unit_test(test_alloc_failure),
        cmocka_unit_test(test_packed_weights), cmocka_unit_test(test_packed_weights_limits), cmocka_unit_test(test_shared_a), cmocka_unit_test(test_summed),
        cmocka_unit_test(test_bf16_pairs), cmocka_unit_test(test_gate_up_fused), cmocka_unit_test(test_round_epilogue),
        cmocka_unit_test(test_a16_operand), cmocka_unit_test(test_rnd16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
