/* sgemm_bench.c - times tr__sgemm on the project's shapes and compares with the FMA peak
   measured in the same process (the peak loop is bench/peak_fma.c's, built with a target
   attribute so that no -march flag is needed).
       gcc -O2 -fopenmp -I. bench/sgemm_bench.c -o build/sgemm_bench -lm
       OMP_WAIT_POLICY=active ./build/sgemm_bench [reps] [threads]
   Each figure is the best of `reps` runs (default 7) at 1 thread and at `threads` (default 2); the
   machine this was written on is shared, so the peak is re-measured between shapes and the best
   value seen is the reference. Where the CPU has native bfloat16 products (AVX512_BF16, AMX), each
   shape is also timed as a bfloat16 model's product (tr__out.prec; TINYREC_CPU_BF16's kernels),
   in the same process, with its ratio to the fp32 time. */
#define TINYREC_IMPLEMENTATION
#include "tinyrec.h"
#ifdef _OPENMP
#include <omp.h>
#else /* (the pool build: the peak loop runs on one thread per call) */
#define omp_get_thread_num() 0
#endif

#if TR__X86
#define VFMA(c) c = _mm512_fmadd_ps(c, m, a)
__attribute__((noinline, target("avx512f,fma"))) static float chains(long n, float seed) {
    __m512 m = _mm512_set1_ps(0.999999f), a = _mm512_set1_ps(1e-7f);
    __m512 c0 = _mm512_set1_ps(seed), c1 = _mm512_set1_ps(seed + 1), c2 = _mm512_set1_ps(seed + 2), c3 = _mm512_set1_ps(seed + 3);
    __m512 c4 = _mm512_set1_ps(seed + 4), c5 = _mm512_set1_ps(seed + 5), c6 = _mm512_set1_ps(seed + 6), c7 = _mm512_set1_ps(seed + 7);
    __m512 c8 = _mm512_set1_ps(seed + 8), c9 = _mm512_set1_ps(seed + 9), c10 = _mm512_set1_ps(seed + 10), c11 = _mm512_set1_ps(seed + 11);
    long i;
    for (i = 0; i < n; i++) {
        VFMA(c0); VFMA(c1); VFMA(c2); VFMA(c3); VFMA(c4); VFMA(c5);
        VFMA(c6); VFMA(c7); VFMA(c8); VFMA(c9); VFMA(c10); VFMA(c11);
    }
    c0 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c0, c1), _mm512_add_ps(c2, c3)), _mm512_add_ps(c4, c5));
    c6 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c6, c7), _mm512_add_ps(c8, c9)), _mm512_add_ps(c10, c11));
    return _mm512_reduce_add_ps(_mm512_add_ps(c0, c6));
}
static double peak(int nt) {
    double best = 0;
    int r;
    for (r = 0; r < 10; r++) {
        long n = 2000000;
        float sink = 0;
        double t0 = tr__now(), g;
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) reduction(+ : sink)
#endif
        sink += chains(n, (float)omp_get_thread_num());
#ifdef _OPENMP
        g = nt * (double)n * 12 * 32 / (tr__now() - t0) * 1e-9;
#else
        g = (double)n * 12 * 32 / (tr__now() - t0) * 1e-9; /* (one thread ran it) */
        (void)nt;
#endif
        if (sink == 1.2345f) printf(" ");
        if (g > best) best = g;
    }
    return best;
}
#else
static double peak(int nt) { return 0 * nt; }
#endif

static float *buf(size_t n) {
    float *p = (float *)malloc(n * sizeof *p);
    size_t i;
    for (i = 0; i < n; i++) p[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    return p;
}

int main(int argc, char **argv) {
    static const struct { const char *name; size_t M, K, N; int ta, tb, acc; } S[] = {
        {"x.W^T qkv/gate-up   ", 6208, 512, 3072, 0, 1, 0},
        {"x.W^T down          ", 6208, 1536, 512, 0, 1, 0},
        {"dX = dY.W  (NN)     ", 6208, 3072, 512, 0, 0, 0},
        {"dX = dY.W  (NN)     ", 6208, 512, 1536, 0, 0, 0},
        {"dW += dY^T.X (TN)   ", 3072, 6208, 512, 1, 0, 1},
        {"dW += dY^T.X (TN)   ", 512, 6208, 1536, 1, 0, 1},
        {"batched NN          ", 1024, 97, 512, 0, 0, 0},
        {"batched NT          ", 97, 512, 512, 0, 1, 0},
        {"batch-1 NT          ", 1, 512, 1536, 0, 1, 0},
        {"batch-16 NT         ", 16, 512, 1536, 0, 1, 0},
        {"head N=11 NT        ", 6208, 512, 11, 0, 1, 0},
    };
    int reps = argc > 1 ? atoi(argv[1]) : 7, threads = argc > 2 ? atoi(argv[2]) : 2, ti;
    size_t s;
    double pk[2] = {0, 0};
    tr_ctx *ctx;
    if (reps < 1 || threads < 1 || tr_ctx_create(NULL, &ctx) != TR_OK) return 1;
    printf("simd %s, bfloat16 products: %s\n", tr_ctx_simd_name(ctx), ctx->cpu_amx ? "amx, vdpbf16ps" : ctx->cpu_bf16 ? "vdpbf16ps" : "none (fp32 kernels)");
    for (s = 0; s < sizeof S / sizeof *S; s++) {
        size_t M = S[s].M, K = S[s].K, N = S[s].N;
        float *A = buf(M * K), *B = buf(K * N), *C = buf(M * N);
        double flops = 2.0 * (double)M * (double)N * (double)K;
        for (ti = 0; ti < (threads > 1 ? 2 : 1); ti++) {
            static const int modes[3] = {0, 1, 3}; /* fp32, then TINYREC_CPU_BF16 = 1 (AMX where present), 3 (vdpbf16ps) */
            double best[3] = {0, 0, 0}, p;
            int nt = ti ? threads : 1, m, r;
            tr_ctx_set_num_threads(ctx, nt);
            p = ctx->simd_best == TR__SIMD_AVX512 ? peak(nt) : 0; /* (the peak loop is AVX-512) */
            if (p > pk[ti]) pk[ti] = p;
            for (m = 0; m < 3; m++) {
                if (m > 0 && (!ctx->cpu_bf16 || (m == 1 && !ctx->cpu_amx))) continue;
                ctx->bf16_gemm = modes[m];
                best[m] = 1e30;
                for (r = 0; r < reps; r++) {
                    double t0 = tr__now(), t;
                    if (tr__sgemm(ctx, M, N, K, tr__mat_of(A, S[s].ta ? M : K, 0, S[s].ta), tr__mat_of(B, S[s].tb ? K : N, 0, S[s].tb),
                                  tr__out_in(tr__out_of(C, N, 0, S[s].acc), m ? TR_FWD_BFLOAT16 : 0)) != TR_OK) return 1;
                    t = tr__now() - t0;
                    if (t < best[m]) best[m] = t;
                }
            }
            printf("%s M %5zu K %5zu N %5zu %s%s%s %2d thr: %8.3f ms %7.1f GFLOP/s %5.1f%% of peak (%.0f)", S[s].name, M, K, N, S[s].ta ? "T" : "N",
                   S[s].tb ? "T" : "N", S[s].acc ? "+" : " ", nt, best[0] * 1e3, flops / best[0] * 1e-9, pk[ti] > 0 ? 100.0 * flops / best[0] * 1e-9 / pk[ti] : 0.0, pk[ti]);
            if (best[1] > 0) printf(" | amx %8.3f ms %7.1f GFLOP/s %5.2fx", best[1] * 1e3, flops / best[1] * 1e-9, best[0] / best[1]);
            if (best[2] > 0) printf(" | vdpbf16ps %8.3f ms %7.1f GFLOP/s %5.2fx", best[2] * 1e3, flops / best[2] * 1e-9, best[0] / best[2]);
            printf("\n");
            fflush(stdout);
        }
        free(A);
        free(B);
        free(C);
    }
    printf("peak fp32 FMA: 1 thread %.1f GFLOP/s, %d threads %.1f GFLOP/s\n", pk[0], threads, pk[1]);
    tr_ctx_destroy(ctx);
    return 0;
}
