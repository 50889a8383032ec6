/* tinyrec.h - v0.1.0 - tiny recursive reasoning models (TRM, HRM) in one C header.
   Public domain or MIT, your choice: see the end of the file.

   Do this:
       #define TINYREC_IMPLEMENTATION
   before you include this file in *one* C or C++ file to create the implementation.
   Every other file includes it without the define and sees only the declarations.

       #define TINYREC_IMPLEMENTATION
       #include "tinyrec.h"

   Overview
   --------
   tinyrec.h trains and runs the Tiny Recursive Model (TRM, "Less is More: Recursive Reasoning
   with Tiny Networks") in both of its variants (mlp_t token mixing, RoPE attention) on the CPU,
   with SIMD kernels chosen at run time (AVX-512, AVX2+FMA, scalar) and OpenMP threads. Its
   numerics follow the reference PyTorch code: the same initialisation, the same recursion and
   ACT carry, stablemax cross-entropy accumulated in fp64, AdamATan2, sign-SGD for the puzzle
   embedding, EMA and the warmup/cosine schedule.

   Quick start (see README.md for a complete program):
       tr_ctx *ctx;  tr_ctx_create(NULL, &ctx);
       tr_model_config cfg;  tr_model_config_preset(&cfg, "trm-sudoku-mlp");
       tr_model *m;  if (tr_model_create(ctx, &cfg, &m) != TR_OK) puts(tr_ctx_last_error(ctx));
       ...
       tr_model_destroy(m);  tr_ctx_destroy(ctx);

   Build flags (define before including)
       TINYREC_STATIC          all functions get static linkage (TRDEF = static)
       TRDEF                   override the linkage of public functions yourself
       TINYREC_NO_OPENMP       never use OpenMP, even when compiled with -fopenmp
       TINYREC_NO_SIMD         scalar kernels only (the reference path)

   Environment variables (read only by tr_ctx_config_default / the example programs)
       TINYREC_NUM_THREADS     thread count (default: OpenMP's maximum, or 1)
       TINYREC_SIMD            force a kernel set: scalar | avx2 | avx512

   Error handling: every fallible call returns a tr_status (0 = ok, negative = error) and leaves
   a human-readable reason in tr_ctx_last_error(). The library never exits, aborts or prints; it
   reports through the log callback you install.
*/
#ifndef TINYREC_H
#define TINYREC_H

/* The implementation uses POSIX clocks, threads and file syncing; ask for them before the first
   system header is read. */
#if defined(TINYREC_IMPLEMENTATION) && !defined(_WIN32) && !defined(_POSIX_C_SOURCE) && !defined(_GNU_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif

#include <stddef.h>
#include <stdint.h>

#define TINYREC_VERSION_MAJOR 0
#define TINYREC_VERSION_MINOR 1
#define TINYREC_VERSION_PATCH 0
#define TINYREC_VERSION_STRING "0.1.0"

#ifndef TRDEF
#ifdef TINYREC_STATIC
#define TRDEF static
#else
#define TRDEF extern
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* >>api-base */
typedef enum tr_status {
    TR_OK = 0,
    TR_ERR_GENERIC = -1,
    TR_ERR_INVALID_ARG = -2,  /* a NULL pointer, a value out of range */
    TR_ERR_OUT_OF_MEMORY = -3,
    TR_ERR_IO = -4,           /* open/read/write/rename failed */
    TR_ERR_FORMAT = -5,       /* a malformed file */
    TR_ERR_UNSUPPORTED = -6,  /* valid, but not something this build can do */
    TR_ERR_CONFIG = -7,       /* an inconsistent model or training configuration */
    TR_ERR_DEVICE = -8,       /* a device failed */
    TR_ERR_NOT_FOUND = -9,    /* a named thing (preset, tensor, key) does not exist */
    TR_ERR_OVERFLOW = -10,    /* a size computation overflowed */
    TR_ERR_INTERRUPTED = -11  /* stopped on request */
} tr_status;

typedef enum tr_log_level { TR_LOG_DEBUG = 0, TR_LOG_INFO = 1, TR_LOG_WARN = 2, TR_LOG_ERROR = 3 } tr_log_level;

/* Allocation callbacks. alloc must return memory aligned to `align` (a power of two <= 4096) or NULL. */
typedef struct tr_allocator {
    void *user;
    void *(*alloc)(void *user, size_t size, size_t align);
    void (*free)(void *user, void *ptr);
} tr_allocator;

typedef void (*tr_log_fn)(void *user, tr_log_level level, const char *message);

typedef struct tr_ctx_config {
    tr_allocator allocator; /* alloc == NULL selects the C library (posix_memalign / _aligned_malloc) */
    tr_log_fn log;          /* NULL: messages are dropped */
    void *log_user;
    int num_threads;        /* <= 0: TINYREC_NUM_THREADS, else OpenMP's maximum, else 1 */
    uint64_t seed;          /* root of every random stream the context hands out */
    const char *simd;       /* NULL or "auto": best available; "scalar", "avx2", "avx512" force one */
} tr_ctx_config;

typedef struct tr_ctx tr_ctx;

TRDEF const char *tr_version_string(void);
TRDEF const char *tr_status_string(tr_status status);
TRDEF tr_ctx_config tr_ctx_config_default(void);
/* cfg may be NULL for the defaults. */
TRDEF tr_status tr_ctx_create(const tr_ctx_config *cfg, tr_ctx **out);
TRDEF void tr_ctx_destroy(tr_ctx *ctx);
/* Never NULL: "" when no error happened since the last tr_ctx_clear_error. */
TRDEF const char *tr_ctx_last_error(const tr_ctx *ctx);
TRDEF void tr_ctx_clear_error(tr_ctx *ctx);
TRDEF int tr_ctx_num_threads(const tr_ctx *ctx);
TRDEF tr_status tr_ctx_set_num_threads(tr_ctx *ctx, int num_threads);
TRDEF uint64_t tr_ctx_seed(const tr_ctx *ctx);
/* The kernel set in use: "scalar", "avx2" or "avx512". */
TRDEF const char *tr_ctx_simd_name(const tr_ctx *ctx);
TRDEF tr_status tr_ctx_set_simd(tr_ctx *ctx, const char *name);
/* Fault injection: the n-th allocation from now (1-based) fails; n <= 0 turns it off. */
TRDEF void tr_ctx_fail_alloc_at(tr_ctx *ctx, long n);
/* Allocations made through the context so far, and those not yet freed (for leak checks). */
TRDEF long tr_ctx_alloc_count(const tr_ctx *ctx);
TRDEF long tr_ctx_live_allocs(const tr_ctx *ctx);

/* >>api-base-end */

#ifdef __cplusplus
}
#endif
#endif /* TINYREC_H */

/* ========================================================================================== */
/*                                      IMPLEMENTATION                                        */
/* ========================================================================================== */
#ifdef TINYREC_IMPLEMENTATION
#ifndef TINYREC_IMPLEMENTATION_DONE
#define TINYREC_IMPLEMENTATION_DONE

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <float.h>
#include <limits.h>
#include <time.h>
#if defined(_OPENMP) && !defined(TINYREC_NO_OPENMP)
#include <omp.h>
#define TR__OMP 1
#else
#define TR__OMP 0
#endif
#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__)) && !defined(TINYREC_NO_SIMD)
#define TR__X86 1
#include <immintrin.h>
#include <cpuid.h>
#else
#define TR__X86 0
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Private functions are static, and marked unused so that a program that calls only part of
   the library still compiles warning-free. */
#if defined(__GNUC__) || defined(__clang__)
#define TR__FN static __attribute__((unused))
#else
#define TR__FN static
#endif

/* >>base */
#define TR__ALIGN 64
#define TR__ERRLEN 1024
#define TR__UNUSED(x) ((void)(x))
#define TR__MIN(a, b) ((a) < (b) ? (a) : (b))
#define TR__MAX(a, b) ((a) > (b) ? (a) : (b))

typedef enum tr__simd { TR__SIMD_SCALAR = 0, TR__SIMD_AVX2 = 1, TR__SIMD_AVX512 = 2 } tr__simd;

struct tr_ctx {
    tr_allocator allocator;
    tr_log_fn log;
    void *log_user;
    int num_threads;
    uint64_t seed;
    tr__simd simd;      /* the kernel set in use */
    tr__simd simd_best; /* the best set this CPU supports */
    long alloc_count;
    long live_allocs;
    long fail_alloc_at; /* absolute alloc_count value that fails; 0 = never */
    void *scratch;      /* kernel workspace (e.g. GEMM packing), grown on demand by tr__scratch */
    size_t scratch_bytes;
    char error[TR__ERRLEN];
};

TRDEF const char *tr_version_string(void) { return TINYREC_VERSION_STRING; }

TRDEF const char *tr_status_string(tr_status status) {
    switch (status) {
    case TR_OK: return "ok";
    case TR_ERR_GENERIC: return "error";
    case TR_ERR_INVALID_ARG: return "invalid argument";
    case TR_ERR_OUT_OF_MEMORY: return "out of memory";
    case TR_ERR_IO: return "i/o error";
    case TR_ERR_FORMAT: return "malformed file";
    case TR_ERR_UNSUPPORTED: return "unsupported";
    case TR_ERR_CONFIG: return "invalid configuration";
    case TR_ERR_DEVICE: return "device error";
    case TR_ERR_NOT_FOUND: return "not found";
    case TR_ERR_OVERFLOW: return "size overflow";
    case TR_ERR_INTERRUPTED: return "interrupted";
    }
    return "unknown status";
}

/* Records the reason for a failure and returns the status, so that call sites read
   `return tr__err(ctx, TR_ERR_CONFIG, "hidden_size %d ...", d);`. */
TR__FN tr_status tr__err(tr_ctx *ctx, tr_status status, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
TR__FN tr_status tr__err(tr_ctx *ctx, tr_status status, const char *fmt, ...) {
    if (ctx) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ctx->error, sizeof ctx->error, fmt, ap);
        va_end(ap);
    }
    return status;
}

TR__FN void tr__log(tr_ctx *ctx, tr_log_level level, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
TR__FN void tr__log(tr_ctx *ctx, tr_log_level level, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    if (!ctx || !ctx->log) return;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    ctx->log(ctx->log_user, level, buf);
}

TR__FN void *tr__default_alloc(void *user, size_t size, size_t align) {
    void *p = NULL;
    TR__UNUSED(user);
    if (size == 0) size = 1;
#if defined(_WIN32)
    p = _aligned_malloc(size, align);
#else
    if (posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align, size) != 0) p = NULL;
#endif
    return p;
}

TR__FN void tr__default_free(void *user, void *ptr) {
    TR__UNUSED(user);
#if defined(_WIN32)
    _aligned_free(ptr);
#else
    free(ptr);
#endif
}

/* All library memory goes through here: 64-byte aligned, counted, and failable on demand. */
TR__FN void *tr__alloc(tr_ctx *ctx, size_t size) {
    void *p;
    ctx->alloc_count++;
    if (ctx->fail_alloc_at > 0 && ctx->alloc_count == ctx->fail_alloc_at)
        p = NULL;
    else
        p = ctx->allocator.alloc(ctx->allocator.user, size, TR__ALIGN);
    if (!p) {
        tr__err(ctx, TR_ERR_OUT_OF_MEMORY, "out of memory: allocation #%ld of %zu bytes failed", ctx->alloc_count, size);
        return NULL;
    }
    ctx->live_allocs++;
    return p;
}

TR__FN void *tr__calloc(tr_ctx *ctx, size_t count, size_t elem) {
    void *p;
    if (elem && count > SIZE_MAX / elem) {
        tr__err(ctx, TR_ERR_OVERFLOW, "allocation of %zu x %zu bytes overflows", count, elem);
        return NULL;
    }
    p = tr__alloc(ctx, count * elem);
    if (p) memset(p, 0, count * elem);
    return p;
}

TR__FN void tr__free(tr_ctx *ctx, void *p) {
    if (!p) return;
    ctx->live_allocs--;
    ctx->allocator.free(ctx->allocator.user, p);
}

/* Overflow-checked size arithmetic: returns 0 on overflow. */
TR__FN int tr__size_mul(size_t a, size_t b, size_t *out) {
    if (a && b > SIZE_MAX / a) return 0;
    *out = a * b;
    return 1;
}

TR__FN double tr__now(void) {
#if defined(_WIN32) || !defined(CLOCK_MONOTONIC)
    return (double)clock() / CLOCKS_PER_SEC; /* only when the user's includes hid POSIX */
#else
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
#endif
}

/* --- CPU features ------------------------------------------------------------------------ */
TR__FN tr__simd tr__detect_simd(void) {
#if TR__X86
    unsigned a, b, c, d;
    unsigned long long xcr0;
    int fma, avx2, avx512;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return TR__SIMD_SCALAR;
    if (!(c & (1u << 27)) || !(c & (1u << 28))) return TR__SIMD_SCALAR; /* osxsave, avx */
    fma = (c >> 12) & 1;
    {
        unsigned lo, hi;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        xcr0 = ((unsigned long long)hi << 32) | lo;
    }
    if ((xcr0 & 6) != 6) return TR__SIMD_SCALAR; /* the OS saves ymm state */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return TR__SIMD_SCALAR;
    avx2 = (b >> 5) & 1;
    avx512 = ((b >> 16) & 1) && ((b >> 17) & 1) && ((b >> 30) & 1) && ((b >> 31) & 1) && ((xcr0 & 0xe6) == 0xe6); /* f, dq, bw, vl */
    if (avx512 && fma) return TR__SIMD_AVX512;
    if (avx2 && fma) return TR__SIMD_AVX2;
#endif
    return TR__SIMD_SCALAR;
}

static const char *tr__simd_names[] = {"scalar", "avx2", "avx512"};

TRDEF tr_ctx_config tr_ctx_config_default(void) {
    tr_ctx_config c;
    memset(&c, 0, sizeof c);
    c.seed = 0;
    return c;
}

TRDEF tr_status tr_ctx_set_simd(tr_ctx *ctx, const char *name) {
    int i;
    if (!ctx) return TR_ERR_INVALID_ARG;
    if (!name || !name[0] || strcmp(name, "auto") == 0) {
        ctx->simd = ctx->simd_best;
        return TR_OK;
    }
    for (i = 0; i < 3; i++)
        if (strcmp(name, tr__simd_names[i]) == 0) {
            if ((int)ctx->simd_best < i)
                return tr__err(ctx, TR_ERR_UNSUPPORTED, "simd '%s' is not supported by this CPU (best: %s)", name, tr__simd_names[ctx->simd_best]);
            ctx->simd = (tr__simd)i;
            return TR_OK;
        }
    return tr__err(ctx, TR_ERR_INVALID_ARG, "unknown simd '%s' (valid: auto, scalar, avx2, avx512)", name);
}

TRDEF tr_status tr_ctx_set_num_threads(tr_ctx *ctx, int n) {
    if (!ctx) return TR_ERR_INVALID_ARG;
    if (n <= 0) {
        const char *env = getenv("TINYREC_NUM_THREADS");
        n = env ? atoi(env) : 0;
#if TR__OMP
        if (n <= 0) n = omp_get_max_threads();
#endif
        if (n <= 0) n = 1;
    }
    if (n > 1024) return tr__err(ctx, TR_ERR_INVALID_ARG, "num_threads %d is out of range (1..1024)", n);
    ctx->num_threads = n;
    return TR_OK;
}

TRDEF tr_status tr_ctx_create(const tr_ctx_config *cfg_in, tr_ctx **out) {
    tr_ctx_config cfg = cfg_in ? *cfg_in : tr_ctx_config_default();
    tr_ctx *ctx;
    tr_status st;
    const char *simd_env;
    if (!out) return TR_ERR_INVALID_ARG;
    *out = NULL;
    if ((cfg.allocator.alloc == NULL) != (cfg.allocator.free == NULL)) return TR_ERR_INVALID_ARG; /* all or none */
    if (!cfg.allocator.alloc) {
        cfg.allocator.alloc = tr__default_alloc;
        cfg.allocator.free = tr__default_free;
    }
    ctx = (tr_ctx *)cfg.allocator.alloc(cfg.allocator.user, sizeof *ctx, TR__ALIGN);
    if (!ctx) return TR_ERR_OUT_OF_MEMORY;
    memset(ctx, 0, sizeof *ctx);
    ctx->allocator = cfg.allocator;
    ctx->log = cfg.log;
    ctx->log_user = cfg.log_user;
    ctx->seed = cfg.seed;
    ctx->simd_best = tr__detect_simd();
    ctx->simd = ctx->simd_best;
    simd_env = cfg.simd ? cfg.simd : getenv("TINYREC_SIMD");
    st = tr_ctx_set_num_threads(ctx, cfg.num_threads);
    if (st == TR_OK) st = tr_ctx_set_simd(ctx, simd_env);
    if (st != TR_OK) {
        cfg.allocator.free(cfg.allocator.user, ctx);
        return st;
    }
    *out = ctx;
    return TR_OK;
}

TRDEF void tr_ctx_destroy(tr_ctx *ctx) {
    if (!ctx) return;
    if (ctx->scratch) ctx->allocator.free(ctx->allocator.user, ctx->scratch);
    ctx->allocator.free(ctx->allocator.user, ctx);
}

/* A context-owned workspace of at least `bytes` (64-byte aligned), reused across calls; NULL on
   allocation failure (the reason is set). Not for nested use: a caller owns it until it returns. */
TR__FN void *tr__scratch(tr_ctx *ctx, size_t bytes) {
    if (bytes <= ctx->scratch_bytes) return ctx->scratch;
    if (ctx->scratch) {
        ctx->allocator.free(ctx->allocator.user, ctx->scratch);
        ctx->scratch = NULL;
        ctx->scratch_bytes = 0;
        ctx->live_allocs--;
    }
    ctx->scratch = tr__alloc(ctx, bytes);
    if (ctx->scratch) {
        ctx->scratch_bytes = bytes;
        ctx->live_allocs--; /* owned by the context, not a leak of the caller's */
    }
    return ctx->scratch;
}
TRDEF const char *tr_ctx_last_error(const tr_ctx *ctx) { return ctx ? ctx->error : "no context"; }
TRDEF void tr_ctx_clear_error(tr_ctx *ctx) {
    if (ctx) ctx->error[0] = 0;
}
TRDEF int tr_ctx_num_threads(const tr_ctx *ctx) { return ctx ? ctx->num_threads : 1; }
TRDEF uint64_t tr_ctx_seed(const tr_ctx *ctx) { return ctx ? ctx->seed : 0; }
TRDEF const char *tr_ctx_simd_name(const tr_ctx *ctx) { return ctx ? tr__simd_names[ctx->simd] : "scalar"; }
TRDEF void tr_ctx_fail_alloc_at(tr_ctx *ctx, long n) {
    if (ctx) ctx->fail_alloc_at = n > 0 ? ctx->alloc_count + n : 0;
}
TRDEF long tr_ctx_alloc_count(const tr_ctx *ctx) { return ctx ? ctx->alloc_count : 0; }
TRDEF long tr_ctx_live_allocs(const tr_ctx *ctx) { return ctx ? ctx->live_allocs : 0; }

/* --- random numbers ----------------------------------------------------------------------
   A counter-based generator: the state is (key, counter) and each draw hashes the pair, so a
   stream is reproducible from two words, can be saved in a checkpoint, and streams derived
   from different keys are independent. */
typedef struct tr__rng {
    uint64_t key;
    uint64_t counter;
} tr__rng;

TR__FN uint64_t tr__mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
TR__FN tr__rng tr__rng_make(uint64_t seed, uint64_t stream) {
    tr__rng r;
    r.key = tr__mix64(seed ^ tr__mix64(stream + 0x632be59bd9b4e019ull));
    r.counter = 0;
    return r;
}
TR__FN uint64_t tr__rng_u64(tr__rng *r) { return tr__mix64(r->key ^ tr__mix64(r->counter++)); }
/* Uniform in [0, 1) with 24 random bits, exactly representable in float. */
TR__FN float tr__rng_uniform(tr__rng *r) { return (float)(tr__rng_u64(r) >> 40) * (1.0f / 16777216.0f); }
TR__FN double tr__rng_uniform_d(tr__rng *r) { return (double)(tr__rng_u64(r) >> 11) * (1.0 / 9007199254740992.0); }
/* Uniform integer in [0, n), unbiased by rejection. */
TR__FN uint64_t tr__rng_below(tr__rng *r, uint64_t n) {
    uint64_t x, lim;
    if (n <= 1) return 0;
    lim = UINT64_MAX - UINT64_MAX % n;
    do x = tr__rng_u64(r);
    while (x >= lim);
    return x % n;
}

/* Inverse error function (Giles 2010 single-precision approximation, refined by two Newton steps
   in double), used by the truncated-normal initialiser. */
TR__FN double tr__erfinv(double x) {
    double w = -log((1.0 - x) * (1.0 + x)), p, y;
    int i;
    if (w < 5.0) {
        w -= 2.5;
        p = 2.81022636e-08;
        p = 3.43273939e-07 + p * w; p = -3.5233877e-06 + p * w; p = -4.39150654e-06 + p * w;
        p = 0.00021858087 + p * w;  p = -0.00125372503 + p * w; p = -0.00417768164 + p * w;
        p = 0.246640727 + p * w;    p = 1.50140941 + p * w;
    } else {
        w = sqrt(w) - 3.0;
        p = -0.000200214257;
        p = 0.000100950558 + p * w; p = 0.00134934322 + p * w;  p = -0.00367342844 + p * w;
        p = 0.00573950773 + p * w;  p = -0.0076224613 + p * w;  p = 0.00943887047 + p * w;
        p = 1.00167406 + p * w;     p = 2.83297682 + p * w;
    }
    y = p * x;
    for (i = 0; i < 2; i++) { /* Newton on erf(y) - x */
        double err = erf(y) - x;
        y -= err / (1.1283791670955126 * exp(-y * y));
    }
    return y;
}

/* The reference's "truncated normal, JAX style": N(0, (c*std)^2) truncated at 2 of its sigma,
   whose std after truncation equals `std`. */
TR__FN void tr__trunc_normal(tr__rng *r, float *out, size_t n, double std) {
    const double c = 1.1368472343; /* 1/sqrt(1 - 4*phi(2)/erf(sqrt 2)) */
    const double lim = 0.9544997361036416; /* erf(sqrt 2) */
    size_t i;
    if (std == 0.0) {
        memset(out, 0, n * sizeof *out);
        return;
    }
    for (i = 0; i < n; i++) {
        double u = (2.0 * tr__rng_uniform_d(r) - 1.0) * lim;
        double x = 1.4142135623730951 * c * std * tr__erfinv(u);
        double b = 2.0 * c * std;
        out[i] = (float)(x < -b ? -b : x > b ? b : x);
    }
}

/* bf16 / fp16 conversion (round to nearest even; NaN stays NaN). */
TR__FN uint16_t tr__f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
TR__FN float tr__bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
TR__FN float tr__f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ffu, u;
    float f;
    if (e == 0) {
        if (m == 0) u = sign;
        else { /* subnormal */
            int shift = 0;
            while (!(m & 0x400u)) { m <<= 1; shift++; }
            m &= 0x3ffu;
            u = sign | ((uint32_t)(127 - 15 + 1 - shift) << 23) | (m << 13);
        }
    } else if (e == 31) u = sign | 0x7f800000u | (m << 13);
    else u = sign | ((e + 127 - 15) << 23) | (m << 13);
    memcpy(&f, &u, 4);
    return f;
}
TR__FN uint16_t tr__f32_to_f16(float f) {
    uint32_t u, sign, e, m;
    memcpy(&u, &f, 4);
    sign = (u >> 16) & 0x8000u;
    e = (u >> 23) & 0xff;
    m = u & 0x7fffffu;
    if (e == 0xff) return (uint16_t)(sign | 0x7c00u | (m ? 0x200u : 0));
    {
        int ee = (int)e - 127 + 15;
        if (ee >= 31) return (uint16_t)(sign | 0x7c00u);
        if (ee <= 0) { /* subnormal or zero, round to nearest even */
            uint32_t mant, half, rem, res;
            int shift;
            if (ee < -10) return (uint16_t)sign;
            mant = m | 0x800000u;
            shift = 14 - ee;
            res = mant >> shift;
            rem = mant & ((1u << shift) - 1);
            half = 1u << (shift - 1);
            if (rem > half || (rem == half && (res & 1))) res++;
            return (uint16_t)(sign | res);
        }
        {
            uint32_t res = sign | ((uint32_t)ee << 10) | (m >> 13), rem = m & 0x1fffu;
            if (rem > 0x1000u || (rem == 0x1000u && (res & 1))) res++;
            return (uint16_t)res;
        }
    }
}

#ifdef __cplusplus
}
#endif
#endif /* TINYREC_IMPLEMENTATION_DONE */
#endif /* TINYREC_IMPLEMENTATION */

/*
------------------------------------------------------------------------------
This software is available under 2 licenses -- choose whichever you prefer.
------------------------------------------------------------------------------
ALTERNATIVE A - MIT License
Copyright (c) 2026 the tinyrec.h authors
Permission is hereby granted, free of charge, to any person obtaining a copy of this software and
associated documentation files (the "Software"), to deal in the Software without restriction,
including without limitation the rights to use, copy, modify, merge, publish, distribute,
sublicense, and/or sell copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions: The above copyright notice and this
permission notice shall be included in all copies or substantial portions of the Software.
THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED.
------------------------------------------------------------------------------
ALTERNATIVE B - Public Domain (www.unlicense.org)
Anyone is free to copy, modify, publish, use, compile, sell, or distribute this software, either
in source code form or as a compiled binary, for any purpose, commercial or non-commercial, and by
any means.
------------------------------------------------------------------------------
*/
