/* peak_fma.c - measures this CPU's fp32 FMA peak (GFLOP/s) with 1 and 2 threads, and its bf16
   dot-product peak (vdpbf16ps) where the compiler targets AVX512_BF16.

   A measuring tool, not part of the library, so it may be built for the host:
       gcc -O2 -march=native -fopenmp bench/peak_fma.c -o build/peak_fma
       ./build/peak_fma [seconds_per_run]

   Each thread runs CHAINS independent chains of zmm (or ymm without AVX-512) FMAs, enough to
   cover the FMA latency (4 cycles on Zen 5) times the number of FMA pipes (2). Without AVX-512
   there are 16 ymm registers only: 12 chains plus the two constants fit, 16 would spill to memory
   and measure loads and stores (this tool printed 113 GFLOP/s on a Zen 3 whose SGEMM ran at 168). A chain is
   acc = acc * m + a with m slightly below 1, so nothing overflows or turns denormal.
   Every FMA is 2 flops per lane. The best of several runs is reported.
   A vdpbf16ps is 2 multiply-adds per fp32 lane (4 flops). Its chains add products of 1e-10 by 1e-10,
   normal fp32 values that stay far from overflow over any run. */
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>


static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#if defined(__AVX512F__)
#define LANES 16
#define CHAINS 16
typedef __m512 vec;
#define VSET1 _mm512_set1_ps
#define VFMA _mm512_fmadd_ps
#define VADD _mm512_add_ps
#define VSUM _mm512_reduce_add_ps
#else
#define LANES 8
#define CHAINS 12
typedef __m256 vec;
#define VSET1 _mm256_set1_ps
#define VFMA _mm256_fmadd_ps
#define VADD _mm256_add_ps
static float VSUM(__m256 v) { float t[8]; int i; float s = 0; _mm256_storeu_ps(t, v); for (i = 0; i < 8; i++) s += t[i]; return s; }
#endif

/* Returns a value depending on the chains so the work is not optimised away. The chains are
   spelled out so they stay in registers (an array would be kept in memory). */
__attribute__((noinline)) static float run_chains(long iters, float seed) {
    vec m = VSET1(0.999999f), a = VSET1(1e-7f);
    vec c0 = VSET1(seed), c1 = VSET1(seed + 1), c2 = VSET1(seed + 2), c3 = VSET1(seed + 3);
    vec c4 = VSET1(seed + 4), c5 = VSET1(seed + 5), c6 = VSET1(seed + 6), c7 = VSET1(seed + 7);
    vec c8 = VSET1(seed + 8), c9 = VSET1(seed + 9), c10 = VSET1(seed + 10), c11 = VSET1(seed + 11);
#if CHAINS == 16
    vec c12 = VSET1(seed + 12), c13 = VSET1(seed + 13), c14 = VSET1(seed + 14), c15 = VSET1(seed + 15);
#endif
    long i;
    for (i = 0; i < iters; i++) {
        c0 = VFMA(c0, m, a); c1 = VFMA(c1, m, a); c2 = VFMA(c2, m, a); c3 = VFMA(c3, m, a);
        c4 = VFMA(c4, m, a); c5 = VFMA(c5, m, a); c6 = VFMA(c6, m, a); c7 = VFMA(c7, m, a);
        c8 = VFMA(c8, m, a); c9 = VFMA(c9, m, a); c10 = VFMA(c10, m, a); c11 = VFMA(c11, m, a);
#if CHAINS == 16
        c12 = VFMA(c12, m, a); c13 = VFMA(c13, m, a); c14 = VFMA(c14, m, a); c15 = VFMA(c15, m, a);
#endif
    }
    c0 = VADD(VADD(VADD(c0, c1), VADD(c2, c3)), VADD(VADD(c4, c5), VADD(c6, c7)));
    c8 = VADD(VADD(c8, c9), VADD(c10, c11));
#if CHAINS == 16
    c8 = VADD(c8, VADD(VADD(c12, c13), VADD(c14, c15)));
#endif
    return VSUM(VADD(c0, c8));
}

#if defined(__AVX512BF16__)
#define BF16_CHAINS 16
__attribute__((noinline)) static float run_bf16_chains(long iters, float seed) {
    __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-10f), _mm512_set1_ps(1e-10f));
    __m512 c0 = VSET1(seed), c1 = VSET1(seed + 1), c2 = VSET1(seed + 2), c3 = VSET1(seed + 3);
    __m512 c4 = VSET1(seed + 4), c5 = VSET1(seed + 5), c6 = VSET1(seed + 6), c7 = VSET1(seed + 7);
    __m512 c8 = VSET1(seed + 8), c9 = VSET1(seed + 9), c10 = VSET1(seed + 10), c11 = VSET1(seed + 11);
    __m512 c12 = VSET1(seed + 12), c13 = VSET1(seed + 13), c14 = VSET1(seed + 14), c15 = VSET1(seed + 15);
    long i;
    for (i = 0; i < iters; i++) {
        c0 = _mm512_dpbf16_ps(c0, a, a); c1 = _mm512_dpbf16_ps(c1, a, a);
        c2 = _mm512_dpbf16_ps(c2, a, a); c3 = _mm512_dpbf16_ps(c3, a, a);
        c4 = _mm512_dpbf16_ps(c4, a, a); c5 = _mm512_dpbf16_ps(c5, a, a);
        c6 = _mm512_dpbf16_ps(c6, a, a); c7 = _mm512_dpbf16_ps(c7, a, a);
        c8 = _mm512_dpbf16_ps(c8, a, a); c9 = _mm512_dpbf16_ps(c9, a, a);
        c10 = _mm512_dpbf16_ps(c10, a, a); c11 = _mm512_dpbf16_ps(c11, a, a);
        c12 = _mm512_dpbf16_ps(c12, a, a); c13 = _mm512_dpbf16_ps(c13, a, a);
        c14 = _mm512_dpbf16_ps(c14, a, a); c15 = _mm512_dpbf16_ps(c15, a, a);
    }
    c0 = VADD(VADD(VADD(c0, c1), VADD(c2, c3)), VADD(VADD(c4, c5), VADD(c6, c7)));
    c8 = VADD(VADD(VADD(c8, c9), VADD(c10, c11)), VADD(VADD(c12, c13), VADD(c14, c15)));
    return VSUM(VADD(c0, c8));
}
#endif

typedef float (*chains_fn)(long iters, float seed);

/* Best GFLOP/s of five runs; flops_per_iter is one thread's flops per loop iteration. */
static double measure_fn(chains_fn fn, double flops_per_iter, int threads, long iters) {
    double best = 0;
    int rep;
    for (rep = 0; rep < 5; rep++) {
        double t0, t1;
        float sink = 0;
        t0 = now();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
        sink += fn(iters, (float)omp_get_thread_num());
        t1 = now();
        if (sink == 12345.0f) printf(" ");
        {
            double gf = (double)threads * (double)iters * flops_per_iter / (t1 - t0) * 1e-9;
            if (gf > best) best = gf;
        }
    }
    return best;
}

/* Measures fn on 1 thread and on 2 (where the machine has them) and prints both under the heading. */
static void report(const char *heading, chains_fn fn, double flops_per_iter, long iters, int nt) {
    double g1 = measure_fn(fn, flops_per_iter, 1, iters), g2 = measure_fn(fn, flops_per_iter, nt >= 2 ? 2 : 1, iters);
    printf("%s:\n", heading);
    printf("  1 thread : %8.1f GFLOP/s\n", g1);
    printf("  2 threads: %8.1f GFLOP/s\n", g2);
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 0.5;
    long iters;
    double t0;
    char heading[96];
    int nt = omp_get_num_procs();
    /* calibrate: ~secs per run on one thread */
    t0 = now();
    if (run_chains(1000000, 1.0f) == 12345.0f) printf(" ");
    iters = (long)(1000000.0 * secs / (now() - t0));
    if (iters < 1000) iters = 1000;
    snprintf(heading, sizeof heading, "fp32 FMA peak (%d-bit vectors, %d chains/thread)", LANES * 32, CHAINS);
    report(heading, run_chains, CHAINS * LANES * 2.0, iters, nt);
#if defined(__AVX512BF16__)
    snprintf(heading, sizeof heading, "bf16 dot-product peak (vdpbf16ps, 512-bit, %d chains/thread)", BF16_CHAINS);
    report(heading, run_bf16_chains, BF16_CHAINS * 16 * 4.0, iters, nt);
#endif
    return 0;
}
