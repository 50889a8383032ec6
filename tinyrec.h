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

/* >>api-model */
typedef enum tr_arch { TR_ARCH_TRM = 0, TR_ARCH_HRM = 1 } tr_arch;
typedef enum tr_pos_encoding { TR_POS_NONE = 0, TR_POS_ROPE = 1, TR_POS_LEARNED = 2 } tr_pos_encoding;
typedef enum tr_loss_type { TR_LOSS_STABLEMAX = 0, TR_LOSS_SOFTMAX = 1 } tr_loss_type;

/* Every field of the reference's arch config (config/arch/trm.yaml, hrm_v1.yaml), with the
   reference's names, plus the dataset-derived sizes. */
typedef struct tr_model_config {
    tr_arch arch;
    int vocab_size;             /* V, from the dataset */
    int seq_len;                /* L, from the dataset (81 for Sudoku, 900 for Maze/ARC) */
    int num_puzzle_identifiers; /* rows of the puzzle-embedding table */
    int hidden_size;            /* D */
    int num_heads;              /* H; D must be a multiple, head size even */
    double expansion;           /* SwiGLU width factor (4) */
    int H_layers, L_layers;     /* TRM uses only L_layers (one shared module) */
    int H_cycles, L_cycles;     /* T and n */
    int puzzle_emb_ndim;        /* Dp; 0 = no puzzle embedding */
    int puzzle_emb_len;         /* Lp; 0 = ceil(Dp / D) as in HRM */
    tr_pos_encoding pos_encodings;
    int mlp_t;                  /* 1 = token-mixing MLP instead of attention (TRM-MLP) */
    double rope_theta;
    double rms_norm_eps;
    int halt_max_steps;         /* M_max */
    double halt_exploration_prob;
    int no_ACT_continue;        /* TRM: 1 (halt on q_halt > 0); HRM: 0 (q_halt > q_continue, Q target) */
    tr_loss_type loss_type;
} tr_model_config;

/* Fills cfg with a named preset: "trm-sudoku-mlp", "trm-sudoku-att", "trm-maze", "trm-arc"
   (the reference configurations), or "trm-tiny" (a small CPU configuration for tests). */
TRDEF tr_status tr_model_config_preset(tr_model_config *cfg, const char *name);
/* Names of all presets, NULL-terminated. */
TRDEF const char *const *tr_model_config_preset_names(void);
/* Checks every field; on failure the reason names the field. ctx may be NULL. */
TRDEF tr_status tr_model_config_validate(tr_ctx *ctx, const tr_model_config *cfg);

typedef struct tr_model tr_model;

/* Creates a model with the reference initialisation, seeded from the context seed. */
TRDEF tr_status tr_model_create(tr_ctx *ctx, const tr_model_config *cfg, tr_model **out);
TRDEF void tr_model_destroy(tr_model *m);
TRDEF const tr_model_config *tr_model_get_config(const tr_model *m);
/* Dense trainable parameters (the reference's "#params"; excludes buffers). */
TRDEF size_t tr_model_num_params(const tr_model *m);

/* Named tensors of the model: trainable parameters first, then the buffers H_init, L_init,
   puzzle_emb.weights. Names are the reference state_dict keys without "_orig_mod."
   (e.g. "model.inner.L_level.layers.0.mlp.gate_up_proj.weight"). */
typedef struct tr_tensor_view {
    const char *name;
    float *data;
    int ndim;
    int64_t shape[2];
    size_t numel;
    int trainable; /* 0 for buffers */
} tr_tensor_view;
TRDEF int tr_model_num_tensors(const tr_model *m);
TRDEF tr_status tr_model_tensor(const tr_model *m, int index, tr_tensor_view *out);
TRDEF tr_status tr_model_find_tensor(const tr_model *m, const char *name, tr_tensor_view *out);

/* A batch: int32 rows of seq_len tokens. labels may be NULL for inference; -100 = ignore. */
typedef struct tr_batch {
    const int32_t *inputs;             /* [batch_size, seq_len] */
    const int32_t *labels;             /* [batch_size, seq_len] or NULL */
    const int32_t *puzzle_identifiers; /* [batch_size] or NULL (all 0) */
    int batch_size;
} tr_batch;

/* The reference metrics. Sums over the rows that halted this step (count of them in `count`);
   losses are sums over the whole batch before division by the batch size. */
typedef struct tr_metrics {
    double count, accuracy, exact_accuracy, q_halt_accuracy, steps;
    double lm_loss, q_halt_loss, q_continue_loss, loss;
} tr_metrics;

/* The ACT carry: per row latent state, step count, halted flag and current data. */
typedef struct tr_carry tr_carry;
TRDEF tr_status tr_carry_create(tr_model *m, int batch_size, tr_carry **out);
TRDEF void tr_carry_destroy(tr_carry *c);
/* Marks every row halted, so that the next step loads the whole incoming batch. */
TRDEF void tr_carry_reset(tr_carry *c);
TRDEF int tr_carry_all_halted(const tr_carry *c);

/* Outputs of one ACT step, filled when the pointers are non-NULL. */
typedef struct tr_step_outputs {
    float *logits;     /* [B, seq_len, V] */
    int32_t *preds;    /* [B, seq_len] argmax */
    float *q_halt;     /* [B] */
    float *q_continue; /* [B] */
    int32_t *halted;   /* [B] after this step */
    int32_t *steps;    /* [B] after this step */
} tr_step_outputs;

/* One supervision (ACT) step without gradient, in eval mode: halted rows take the incoming
   batch's rows, every row runs halt_max_steps steps (learned halting is ignored). */
TRDEF tr_status tr_model_eval_step(tr_model *m, tr_carry *c, const tr_batch *batch, tr_step_outputs *out, tr_metrics *metrics);
/* Inference: runs ACT steps until every row halts (q_halt > 0 or halt_max_steps), or exactly
   `force_steps` steps when > 0. per_step (may be NULL) is called after each step. */
typedef void (*tr_step_callback)(void *user, int step, const tr_step_outputs *out);
TRDEF tr_status tr_model_infer(tr_model *m, tr_carry *c, const tr_batch *batch, int force_steps,
                               tr_step_callback per_step, void *user, tr_step_outputs *out);

/* >>api-train */
typedef struct tr_train_config {
    double lr;                 /* 1e-4 */
    double lr_min_ratio;       /* 1.0 = constant after warmup */
    long lr_warmup_steps;      /* 2000 */
    long total_steps;          /* for the cosine schedule */
    double weight_decay;       /* 1.0 (Sudoku/Maze), 0.1 (ARC) */
    double beta1, beta2;       /* 0.9, 0.95 */
    double puzzle_emb_lr;      /* 1e-4 (Sudoku/Maze), 1e-2 (ARC) */
    double puzzle_emb_weight_decay;
    int ema;                   /* 1: keep an EMA of the parameters */
    double ema_decay;          /* 0.999 */
    int global_batch_size;     /* rows per optimizer step; the loss is divided by it */
} tr_train_config;
TRDEF tr_train_config tr_train_config_default(void);

typedef struct tr_trainer tr_trainer;
TRDEF tr_status tr_trainer_create(tr_model *m, const tr_train_config *tc, tr_trainer **out);
TRDEF void tr_trainer_destroy(tr_trainer *t);
/* One training step: ACT carry update with the incoming batch (halted rows are refilled),
   forward with T-1 no-grad cycles and one with gradient, loss, backward, AdamATan2 on the
   dense parameters, sign-SGD on the puzzle embedding, EMA. batch->batch_size must equal
   global_batch_size. metrics may be NULL. */
TRDEF tr_status tr_trainer_step(tr_trainer *t, const tr_batch *batch, tr_metrics *metrics);
TRDEF long tr_trainer_step_count(const tr_trainer *t);
/* The learning rate of step s (1-based) for a base rate, per the reference schedule. */
TRDEF double tr_lr_schedule(const tr_train_config *tc, double base_lr, long step);
/* Copies the EMA weights into the model (for evaluation / saving) or swaps them back. */
TRDEF tr_status tr_trainer_swap_ema(tr_trainer *t);


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

/* >>cpu
   Kernels. Each op has a plain scalar reference (tr__*_ref, kept forever and used by the tests)
   and, for the hot ones, SIMD variants chosen at run time from ctx->simd. Row loops are split
   across OpenMP threads with a static schedule and disjoint writes; no kernel reduces across
   threads, so results do not depend on the thread count. */
#define TR__PRAGMA(x) _Pragma(#x)
#if TR__OMP
#define TR__PARALLEL_FOR(nthreads) TR__PRAGMA(omp parallel for num_threads(nthreads) schedule(static))
#else
#define TR__PARALLEL_FOR(nthreads)
#endif
#if TR__X86
#define TR__TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma")))
#define TR__TARGET_AVX2 __attribute__((target("avx2,fma")))
#endif

/* y = r * rstd with r = x + add (add may be NULL), rstd = 1/sqrt(mean(r^2) + eps), per row of D.
   out may alias x. This is the post-norm residual of every block. */
TR__FN void tr__rms_rows_fwd_ref(long rows, int D, const float *x, const float *add, float *out, float *rstd, float eps, int nthreads) {
    long r;
    TR__UNUSED(nthreads);
    TR__PARALLEL_FOR(nthreads)
    for (r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * D, *ar = add ? add + (size_t)r * D : NULL;
        float *o = out + (size_t)r * D;
        double ss = 0;
        float inv;
        int j;
        for (j = 0; j < D; j++) {
            float v = ar ? xr[j] + ar[j] : xr[j];
            o[j] = v;
            ss += (double)v * v;
        }
        inv = (float)(1.0 / sqrt(ss / D + eps));
        rstd[r] = inv;
        for (j = 0; j < D; j++) o[j] *= inv;
    }
}

/* dx = rstd * (dy - y * mean(dy * y)), the backward of y = x * rstd over a row. */
TR__FN void tr__rms_rows_bwd_ref(long rows, int D, const float *dy, const float *y, const float *rstd, float *dx, int nthreads) {
    long r;
    TR__UNUSED(nthreads);
    TR__PARALLEL_FOR(nthreads)
    for (r = 0; r < rows; r++) {
        const float *dyr = dy + (size_t)r * D, *yr = y + (size_t)r * D;
        float *o = dx + (size_t)r * D;
        double dot = 0;
        float mean;
        int j;
        for (j = 0; j < D; j++) dot += (double)dyr[j] * yr[j];
        mean = (float)(dot / D);
        for (j = 0; j < D; j++) o[j] = rstd[r] * (dyr[j] - yr[j] * mean);
    }
}

/* The mlp_t norm: over the sequence axis S, separately for each (batch, channel). x is [B,S,D];
   rstd is [B,D]. */
TR__FN void tr__rms_cols_fwd_ref(int B, int S, int D, const float *x, const float *add, float *out, float *rstd, float eps, int nthreads) {
    long t, nblk = (D + 63) / 64;
    TR__UNUSED(nthreads);
    TR__PARALLEL_FOR(nthreads)
    for (t = 0; t < (long)B * nblk; t++) { /* one task = one batch row x 64 channels */
        int b = (int)(t / nblk), j0 = (int)(t % nblk) * 64, j1 = TR__MIN(j0 + 64, D), s, j;
        size_t base = (size_t)b * S * D;
        double ss[64];
        for (j = j0; j < j1; j++) ss[j - j0] = 0;
        for (s = 0; s < S; s++)
            for (j = j0; j < j1; j++) {
                size_t i = base + (size_t)s * D + j;
                float v = add ? x[i] + add[i] : x[i];
                out[i] = v;
                ss[j - j0] += (double)v * v;
            }
        for (j = j0; j < j1; j++) rstd[(size_t)b * D + j] = (float)(1.0 / sqrt(ss[j - j0] / S + eps));
        for (s = 0; s < S; s++)
            for (j = j0; j < j1; j++) out[base + (size_t)s * D + j] *= rstd[(size_t)b * D + j];
    }
}

TR__FN void tr__rms_cols_bwd_ref(int B, int S, int D, const float *dy, const float *y, const float *rstd, float *dx, int nthreads) {
    long t, nblk = (D + 63) / 64;
    TR__UNUSED(nthreads);
    TR__PARALLEL_FOR(nthreads)
    for (t = 0; t < (long)B * nblk; t++) {
        int b = (int)(t / nblk), j0 = (int)(t % nblk) * 64, j1 = TR__MIN(j0 + 64, D), s, j;
        size_t base = (size_t)b * S * D;
        double dot[64];
        for (j = j0; j < j1; j++) dot[j - j0] = 0;
        for (s = 0; s < S; s++)
            for (j = j0; j < j1; j++) dot[j - j0] += (double)dy[base + (size_t)s * D + j] * y[base + (size_t)s * D + j];
        for (s = 0; s < S; s++)
            for (j = j0; j < j1; j++) {
                size_t i = base + (size_t)s * D + j;
                dx[i] = rstd[(size_t)b * D + j] * (dy[i] - y[i] * (float)(dot[j - j0] / S));
            }
    }
}

/* SwiGLU activation: out = silu(gate) * up, where gate = g[0..width) and up = g[width..2 width)
   of each of `rows` rows (row strides g_stride and out_stride). */
TR__FN float tr__silu(float x) { return x / (1.0f + expf(-x)); }
TR__FN void tr__swiglu_fwd_ref(long rows, long width, const float *g, size_t g_stride, float *out, size_t out_stride, int nthreads) {
    long r;
    TR__UNUSED(nthreads);
    TR__PARALLEL_FOR(nthreads)
    for (r = 0; r < rows; r++) {
        const float *gate = g + (size_t)r * g_stride, *up = gate + width;
        float *o = out + (size_t)r * out_stride;
        long j;
        for (j = 0; j < width; j++) o[j] = tr__silu(gate[j]) * up[j];
    }
}

/* Backward: d gate = da * up * silu'(gate), d up = da * silu(gate). dg has g's layout. */
TR__FN void tr__swiglu_bwd_ref(long rows, long width, const float *g, size_t g_stride, const float *da, size_t da_stride, float *dg, int nthreads) {
    long r;
    TR__UNUSED(nthreads);
    TR__PARALLEL_FOR(nthreads)
    for (r = 0; r < rows; r++) {
        const float *gate = g + (size_t)r * g_stride, *up = gate + width, *d = da + (size_t)r * da_stride;
        float *dgate = dg + (size_t)r * g_stride, *dup = dgate + width;
        long j;
        for (j = 0; j < width; j++) {
            float sg = 1.0f / (1.0f + expf(-gate[j]));
            float si = gate[j] * sg;
            dgate[j] = d[j] * up[j] * (sg * (1.0f + gate[j] * (1.0f - sg)));
            dup[j] = d[j] * si;
        }
    }
}

/* RoPE, NeoX "rotate half", in place on the q and k heads of a [B*S, 3D] qkv buffer.
   cosv/sinv are [S, hd]. inverse = 1 applies the transpose rotation (the backward). */
TR__FN void tr__rope_ref(long rows, int S, int H, int hd, float *qkv, const float *cosv, const float *sinv, int inverse, int nthreads) {
    long r;
    int half = hd / 2, D = H * hd;
    float sgn = inverse ? -1.0f : 1.0f;
    TR__UNUSED(nthreads);
    TR__PARALLEL_FOR(nthreads)
    for (r = 0; r < rows; r++) {
        int pos = (int)(r % S), h, j, qk;
        const float *c = cosv + (size_t)pos * hd, *sn = sinv + (size_t)pos * hd;
        for (qk = 0; qk < 2; qk++)
            for (h = 0; h < H; h++) {
                float *v = qkv + (size_t)r * 3 * D + (size_t)qk * D + (size_t)h * hd;
                for (j = 0; j < half; j++) {
                    float x1 = v[j], x2 = v[j + half];
                    v[j] = x1 * c[j] - sgn * x2 * sn[j];
                    v[j + half] = x2 * c[j + half] + sgn * x1 * sn[j + half];
                }
            }
    }
}

/* y = a + b over n floats (y may alias a or b), split across threads. */
TR__FN void tr__add(tr_ctx *ctx, size_t n, const float *a, const float *b, float *y) {
    long i;
    TR__UNUSED(ctx);
    TR__PARALLEL_FOR(ctx->num_threads)
    for (i = 0; i < (long)n; i++) y[i] = a[i] + b[i];
}

TR__FN float tr__dot(const float *a, const float *b, int n) {
    float s = 0;
    int i;
    for (i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* Non-causal attention for each (batch, head). qkv is [B,S,3D] (post-RoPE); o is [B,S,D];
   lse [B,H,S] keeps the log-sum-exp of each row for the backward, which recomputes the
   probabilities instead of storing S x S of them. scratch: nthreads * S floats. */
TR__FN void tr__attention_fwd_ref(int B, int S, int H, int hd, const float *qkv, float *o, float *lse, float *scratch, int nthreads) {
    long bh;
    int D = H * hd;
    float scale = 1.0f / sqrtf((float)hd);
    TR__UNUSED(nthreads);
    TR__PARALLEL_FOR(nthreads)
    for (bh = 0; bh < (long)B * H; bh++) {
        int b = (int)(bh / H), h = (int)(bh % H), i, j, t = 0;
        float *p;
#if TR__OMP
        t = omp_get_thread_num();
#endif
        p = scratch + (size_t)t * S;
        for (i = 0; i < S; i++) {
            const float *q = qkv + ((size_t)b * S + i) * 3 * D + (size_t)h * hd;
            float *oi = o + ((size_t)b * S + i) * D + (size_t)h * hd;
            float mx = -INFINITY, sum = 0, inv;
            for (j = 0; j < S; j++) {
                const float *k = qkv + ((size_t)b * S + j) * 3 * D + D + (size_t)h * hd;
                p[j] = tr__dot(q, k, hd) * scale;
                if (p[j] > mx) mx = p[j];
            }
            for (j = 0; j < S; j++) {
                p[j] = expf(p[j] - mx);
                sum += p[j];
            }
            inv = 1.0f / sum;
            for (j = 0; j < hd; j++) oi[j] = 0;
            for (j = 0; j < S; j++) {
                const float *v = qkv + ((size_t)b * S + j) * 3 * D + 2 * D + (size_t)h * hd;
                float w = p[j] * inv;
                int c;
                for (c = 0; c < hd; c++) oi[c] += w * v[c];
            }
            lse[((size_t)b * H + h) * S + i] = mx + logf(sum);
        }
    }
}

/* Backward of the attention: dqkv ([B,S,3D], overwritten) from do_ ([B,S,D]). */
TR__FN void tr__attention_bwd_ref(int B, int S, int H, int hd, const float *qkv, const float *o, const float *lse, const float *do_, float *dqkv, float *scratch, int nthreads) {
    long bh;
    int D = H * hd;
    float scale = 1.0f / sqrtf((float)hd);
    TR__UNUSED(nthreads);
    TR__PARALLEL_FOR(nthreads)
    for (bh = 0; bh < (long)B * H; bh++) {
        int b = (int)(bh / H), h = (int)(bh % H), i, j, c, t = 0;
        float *dp;
#if TR__OMP
        t = omp_get_thread_num();
#endif
        dp = scratch + (size_t)t * S;
        for (i = 0; i < S; i++) {
            float *dst = dqkv + ((size_t)b * S + i) * 3 * D + (size_t)h * hd;
            for (c = 0; c < hd; c++) dst[c] = dst[c + D] = dst[c + 2 * D] = 0;
        }
        for (i = 0; i < S; i++) {
            const float *q = qkv + ((size_t)b * S + i) * 3 * D + (size_t)h * hd;
            const float *doi = do_ + ((size_t)b * S + i) * D + (size_t)h * hd;
            const float *oi = o + ((size_t)b * S + i) * D + (size_t)h * hd;
            float *dq = dqkv + ((size_t)b * S + i) * 3 * D + (size_t)h * hd;
            float l = lse[((size_t)b * H + h) * S + i], di = tr__dot(doi, oi, hd);
            for (j = 0; j < S; j++) {
                const float *k = qkv + ((size_t)b * S + j) * 3 * D + D + (size_t)h * hd;
                const float *v = k + D;
                float *dk = dqkv + ((size_t)b * S + j) * 3 * D + D + (size_t)h * hd, *dv = dk + D;
                float p = expf(tr__dot(q, k, hd) * scale - l);
                float ds = p * (tr__dot(doi, v, hd) - di);
                for (c = 0; c < hd; c++) {
                    dv[c] += p * doi[c];
                    dq[c] += ds * scale * k[c];
                    dk[c] += ds * scale * q[c];
                }
            }
        }
        TR__UNUSED(dp);
    }
}

/* Stablemax / softmax cross-entropy over one row of V logits, accumulated in fp64 as the
   reference does. Returns -log p[label]; writes d loss / d logits * gscale into grad (if
   non-NULL). s(x) = x + 1 (x >= 0), 1 / (1 - x + 1e-30) (x < 0). */
TR__FN double tr__xent_row(const float *x, int V, int label, tr_loss_type type, float *grad, double gscale) {
    double sum = 0, lp;
    int k;
    if (type == TR_LOSS_STABLEMAX) {
        double sl = 0;
        for (k = 0; k < V; k++) {
            double xv = x[k], s = xv >= 0 ? xv + 1.0 : 1.0 / (1.0 - xv + 1e-30);
            sum += s;
            if (k == label) sl = s;
        }
        lp = log(sl / sum);
        if (grad)
            for (k = 0; k < V; k++) {
                double xv = x[k], s = xv >= 0 ? xv + 1.0 : 1.0 / (1.0 - xv + 1e-30);
                double ds = xv >= 0 ? 1.0 : s * s;
                double gk = ds / sum - (k == label ? ds / s : 0.0);
                grad[k] = (float)(gk * gscale);
            }
    } else {
        double mx = -INFINITY;
        for (k = 0; k < V; k++)
            if (x[k] > mx) mx = x[k];
        for (k = 0; k < V; k++) sum += exp((double)x[k] - mx);
        lp = (double)x[label] - mx - log(sum);
        if (grad)
            for (k = 0; k < V; k++) grad[k] = (float)((exp((double)x[k] - mx) / sum - (k == label ? 1.0 : 0.0)) * gscale);
    }
    return -lp;
}

/* BCE with logits, and its gradient (sigmoid(x) - y). */
TR__FN double tr__bce_logits(double x, double y, double *grad) {
    if (grad) *grad = 1.0 / (1.0 + exp(-x)) - y;
    return (x > 0 ? x : 0) - x * y + log1p(exp(-fabs(x)));
}

/* AdamATan2 exactly as the reference kernel: decoupled decay first, no epsilon, bias
   correction 1 outside atan2 and 2 only on the denominator. fp32 math. */
TR__FN void tr__adam_atan2_ref(size_t n, float *p, const float *g, float *m, float *v, float lr, float wd, float beta1, float beta2, float bc1, float bc2, int nthreads) {
    long i;
    float decay = 1.0f - lr * wd, step = lr / bc1, sbc2 = sqrtf(bc2);
    TR__UNUSED(nthreads);
    TR__PARALLEL_FOR(nthreads)
    for (i = 0; i < (long)n; i++) {
        float pi = p[i] * decay;
        float mi = m[i] + (1.0f - beta1) * (g[i] - m[i]);
        float vi = v[i] + (1.0f - beta2) * (g[i] * g[i] - v[i]);
        m[i] = mi;
        v[i] = vi;
        p[i] = pi - step * atan2f(mi, sqrtf(vi) / sbc2);
    }
}

TR__FN void tr__ema_ref(size_t n, float *shadow, const float *p, float decay, int nthreads) {
    long i;
    TR__UNUSED(nthreads);
    TR__PARALLEL_FOR(nthreads)
    for (i = 0; i < (long)n; i++) shadow[i] = (1.0f - decay) * p[i] + decay * shadow[i];
}

/* Attention scratch per thread (the scalar kernels use the first S floats). */
#define TR__ATT_PAD(n) (((n) + 15) & ~(size_t)15)
TR__FN size_t tr__attention_scratch_floats(int S, int hd) { return 4 * TR__ATT_PAD((size_t)S) * (size_t)hd + 2 * (size_t)S * hd + 4 * TR__ATT_PAD((size_t)S) + 64; }

#if defined(__GNUC__) && !defined(__clang__)
/* GCC 12 reports its own AVX-512 intrinsics' undefined-vector idiom as uninitialised (GCC bug
   105593) once they are inlined into our code under C++ -O2. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
/* --- SIMD variants ----------------------------------------------------------------------- */
#if TR__X86
/* exp for x in float range via 2^n * p(r), max rel. error ~2 ulp; saturates outside [-87, 88]. */
TR__TARGET_AVX512 static inline __m512 tr__exp512(__m512 x) {
    const __m512 log2e = _mm512_set1_ps(1.44269504f), ln2hi = _mm512_set1_ps(0.693359375f), ln2lo = _mm512_set1_ps(-2.12194440e-4f);
    __m512 n, r, p;
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.3f));
    n = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm512_fnmadd_ps(n, ln2hi, x);
    r = _mm512_fnmadd_ps(n, ln2lo, r);
    p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

/* Row kernels (no threading inside: clang does not give OpenMP's outlined bodies the target
   attribute, so the dispatchers below run the parallel loops and call these per row). */
/* 1/d from the 14-bit estimate plus one Newton step (~27 bits): cheaper than vdivps. */
TR__TARGET_AVX512 static inline __m512 tr__rcp512(__m512 d) {
    __m512 r = _mm512_rcp14_ps(d);
    return _mm512_mul_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(2.0f)));
}

TR__TARGET_AVX512 static void tr__swiglu_fwd_row512(long width, const float *gate, float *o) {
    const float *up = gate + width;
    long j;
    for (j = 0; j < width; j += 16) {
        __mmask16 k = width - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (width - j)) - 1);
        __m512 x = _mm512_maskz_loadu_ps(k, gate + j), u = _mm512_maskz_loadu_ps(k, up + j);
        __m512 e = tr__exp512(_mm512_sub_ps(_mm512_setzero_ps(), x));
        __m512 sv = _mm512_mul_ps(x, tr__rcp512(_mm512_add_ps(_mm512_set1_ps(1.0f), e)));
        _mm512_mask_storeu_ps(o + j, k, _mm512_mul_ps(sv, u));
    }
}

TR__TARGET_AVX512 static void tr__swiglu_bwd_row512(long width, const float *gate, const float *d, float *dgate) {
    const float *up = gate + width;
    float *dup = dgate + width;
    const __m512 one = _mm512_set1_ps(1.0f);
    long j;
    for (j = 0; j < width; j += 16) {
        __mmask16 k = width - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (width - j)) - 1);
        __m512 x = _mm512_maskz_loadu_ps(k, gate + j), u = _mm512_maskz_loadu_ps(k, up + j), dv = _mm512_maskz_loadu_ps(k, d + j);
        __m512 sg = tr__rcp512(_mm512_add_ps(one, tr__exp512(_mm512_sub_ps(_mm512_setzero_ps(), x))));
        __m512 si = _mm512_mul_ps(x, sg);
        __m512 dsil = _mm512_mul_ps(sg, _mm512_fmadd_ps(x, _mm512_sub_ps(one, sg), one));
        _mm512_mask_storeu_ps(dgate + j, k, _mm512_mul_ps(_mm512_mul_ps(dv, u), dsil));
        _mm512_mask_storeu_ps(dup + j, k, _mm512_mul_ps(dv, si));
    }
}

TR__TARGET_AVX512 static float tr__rms_row_fwd512(int D, const float *xr, const float *ar, float *o, float eps) {
    __m512 acc = _mm512_setzero_ps(), inv;
    float invs;
    int j;
    for (j = 0; j < D; j += 16) {
        __mmask16 k = D - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (D - j)) - 1);
        __m512 v = _mm512_maskz_loadu_ps(k, xr + j);
        if (ar) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(k, ar + j));
        _mm512_mask_storeu_ps(o + j, k, v);
        acc = _mm512_fmadd_ps(v, v, acc);
    }
    invs = (float)(1.0 / sqrt((double)_mm512_reduce_add_ps(acc) / D + eps));
    inv = _mm512_set1_ps(invs);
    for (j = 0; j < D; j += 16) {
        __mmask16 k = D - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (D - j)) - 1);
        _mm512_mask_storeu_ps(o + j, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, o + j), inv));
    }
    return invs;
}

TR__TARGET_AVX512 static void tr__rms_row_bwd512(int D, const float *dyr, const float *yr, float rstd, float *o) {
    __m512 acc = _mm512_setzero_ps(), mean, rs;
    int j;
    for (j = 0; j < D; j += 16) {
        __mmask16 k = D - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (D - j)) - 1);
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, dyr + j), _mm512_maskz_loadu_ps(k, yr + j), acc);
    }
    mean = _mm512_set1_ps(_mm512_reduce_add_ps(acc) / (float)D);
    rs = _mm512_set1_ps(rstd);
    for (j = 0; j < D; j += 16) {
        __mmask16 k = D - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (D - j)) - 1);
        __m512 v = _mm512_fnmadd_ps(_mm512_maskz_loadu_ps(k, yr + j), mean, _mm512_maskz_loadu_ps(k, dyr + j));
        _mm512_mask_storeu_ps(o + j, k, _mm512_mul_ps(v, rs));
    }
}

TR__TARGET_AVX512 static inline __mmask16 tr__mask16(long left) { return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1); }

/* scores[j] = scale * q . K[j] over all keys from the transposed Kt [hd][Sp]; returns the max. */
TR__TARGET_AVX512 static float tr__att_scores512(const float *q, const float *Kt, int S, size_t Sp, int hd, float scale, float *p) {
    int c;
    long j;
    __m512 vmax = _mm512_set1_ps(-INFINITY);
    for (j = 0; j < S; j += 16) {
        __mmask16 k = tr__mask16(S - j);
        __m512 acc = _mm512_setzero_ps();
        for (c = 0; c < hd; c++) acc = _mm512_fmadd_ps(_mm512_set1_ps(q[c]), _mm512_loadu_ps(Kt + (size_t)c * Sp + j), acc);
        acc = _mm512_mul_ps(acc, _mm512_set1_ps(scale));
        _mm512_mask_storeu_ps(p + j, k, acc);
        vmax = _mm512_mask_max_ps(vmax, k, vmax, acc);
    }
    return _mm512_reduce_max_ps(vmax);
}

/* out[c] (+)= sum_j w[j] * M[j][c] for a row-major M [S][hd]; hd a multiple of 16 or masked. */
TR__TARGET_AVX512 static void tr__att_wsum512(const float *w, const float *M, int S, int hd, float *out, int accumulate) {
    int c, j;
    for (c = 0; c < hd; c += 16) {
        __mmask16 k = tr__mask16(hd - c);
        __m512 acc = accumulate ? _mm512_maskz_loadu_ps(k, out + c) : _mm512_setzero_ps();
        for (j = 0; j < S; j++) acc = _mm512_fmadd_ps(_mm512_set1_ps(w[j]), _mm512_maskz_loadu_ps(k, M + (size_t)j * hd + c), acc);
        _mm512_mask_storeu_ps(out + c, k, acc);
    }
}


/* Copies the (b, h) slices of K and V: row-major [S][hd] and transposed [hd][Sp] (zero-padded). */
TR__FN void tr__att_gather(const float *qkv, int b, int h, int S, int D, int hd, size_t Sp, float *K, float *Kt, float *V, float *Vt) {
    int j, c;
    for (j = 0; j < S; j++) {
        const float *k = qkv + ((size_t)b * S + j) * 3 * D + D + (size_t)h * hd, *v = k + D;
        memcpy(K + (size_t)j * hd, k, (size_t)hd * sizeof(float));
        memcpy(V + (size_t)j * hd, v, (size_t)hd * sizeof(float));
        for (c = 0; c < hd; c++) Kt[(size_t)c * Sp + j] = k[c], Vt[(size_t)c * Sp + j] = v[c];
    }
    for (c = 0; c < hd; c++)
        for (j = S; j < (int)Sp; j++) Kt[(size_t)c * Sp + j] = Vt[(size_t)c * Sp + j] = 0;
}

/* One (batch, head) of the forward; `scratch` is this thread's tr__attention_scratch_floats. */
TR__TARGET_AVX512 static void tr__attention_fwd_bh512(int b, int h, int S, int H, int hd, const float *qkv, float *o, float *lse, float *scratch) {
    int D = H * hd;
    size_t Sp = TR__ATT_PAD((size_t)S);
    float scale = 1.0f / sqrtf((float)hd);
    {
        int i;
        float *K, *Kt, *V, *Vt, *p;
        long j;
        K = scratch, Kt = K + Sp * hd, V = Kt + Sp * hd, Vt = V + Sp * hd, p = Vt + Sp * hd;
        tr__att_gather(qkv, b, h, S, D, hd, Sp, K, Kt, V, Vt);
        for (i = 0; i < S; i++) {
            const float *q = qkv + ((size_t)b * S + i) * 3 * D + (size_t)h * hd;
            float mx = tr__att_scores512(q, Kt, S, Sp, hd, scale, p), sum, inv;
            __m512 vs = _mm512_setzero_ps(), vm = _mm512_set1_ps(mx);
            for (j = 0; j < S; j += 16) {
                __mmask16 k = tr__mask16(S - j);
                __m512 e = tr__exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, p + j), vm));
                e = _mm512_maskz_mov_ps(k, e);
                _mm512_mask_storeu_ps(p + j, k, e);
                vs = _mm512_add_ps(vs, e);
            }
            sum = _mm512_reduce_add_ps(vs);
            inv = 1.0f / sum;
            for (j = 0; j < S; j++) p[j] *= inv;
            tr__att_wsum512(p, V, S, hd, o + ((size_t)b * S + i) * D + (size_t)h * hd, 0);
            lse[((size_t)b * H + h) * S + i] = mx + logf(sum);
        }
    }
}

/* One (batch, head) of the backward. */
TR__TARGET_AVX512 static void tr__attention_bwd_bh512(int b, int h, int S, int H, int hd, const float *qkv, const float *o, const float *lse, const float *do_, float *dqkv, float *scratch) {
    int D = H * hd;
    size_t Sp = TR__ATT_PAD((size_t)S);
    float scale = 1.0f / sqrtf((float)hd);
    {
        int i, j, c;
        float *K, *Kt, *V, *Vt, *p, *dp, *dK, *dV;
        K = scratch, Kt = K + Sp * hd, V = Kt + Sp * hd, Vt = V + Sp * hd, p = Vt + Sp * hd, dp = p + Sp;
        dK = dp + Sp, dV = dK + (size_t)S * hd;
        tr__att_gather(qkv, b, h, S, D, hd, Sp, K, Kt, V, Vt);
        memset(dK, 0, 2 * (size_t)S * hd * sizeof(float));
        for (i = 0; i < S; i++) {
            const float *q = qkv + ((size_t)b * S + i) * 3 * D + (size_t)h * hd;
            const float *doi = do_ + ((size_t)b * S + i) * D + (size_t)h * hd;
            const float *oi = o + ((size_t)b * S + i) * D + (size_t)h * hd;
            float *dq = dqkv + ((size_t)b * S + i) * 3 * D + (size_t)h * hd;
            float l = lse[((size_t)b * H + h) * S + i], di = 0;
            __m512 vl = _mm512_set1_ps(l);
            for (c = 0; c < hd; c++) di += doi[c] * oi[c];
            tr__att_scores512(q, Kt, S, Sp, hd, scale, p);
            tr__att_scores512(doi, Vt, S, Sp, hd, 1.0f, dp); /* dP[j] = dO . V[j] */
            for (j = 0; j < S; j += 16) {
                __mmask16 k = tr__mask16(S - j);
                __m512 pv = tr__exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, p + j), vl));
                __m512 ds = _mm512_mul_ps(pv, _mm512_sub_ps(_mm512_maskz_loadu_ps(k, dp + j), _mm512_set1_ps(di)));
                _mm512_mask_storeu_ps(p + j, k, pv);
                _mm512_mask_storeu_ps(dp + j, k, _mm512_mul_ps(ds, _mm512_set1_ps(scale)));
            }
            tr__att_wsum512(dp, K, S, hd, dq, 0); /* dQ_i = scale * sum_j dS_ij K_j */
            for (j = 0; j < S; j++) {               /* dK_j += scale dS_ij q_i, dV_j += P_ij dO_i */
                __m512 a = _mm512_set1_ps(dp[j]), pw = _mm512_set1_ps(p[j]);
                for (c = 0; c < hd; c += 16) {
                    __mmask16 k = tr__mask16(hd - c);
                    float *dk = dK + (size_t)j * hd + c, *dv = dV + (size_t)j * hd + c;
                    _mm512_mask_storeu_ps(dk, k, _mm512_fmadd_ps(a, _mm512_maskz_loadu_ps(k, q + c), _mm512_maskz_loadu_ps(k, dk)));
                    _mm512_mask_storeu_ps(dv, k, _mm512_fmadd_ps(pw, _mm512_maskz_loadu_ps(k, doi + c), _mm512_maskz_loadu_ps(k, dv)));
                }
            }
        }
        for (j = 0; j < S; j++) {
            float *dst = dqkv + ((size_t)b * S + j) * 3 * D + (size_t)h * hd;
            memcpy(dst + D, dK + (size_t)j * hd, (size_t)hd * sizeof(float));
            memcpy(dst + 2 * D, dV + (size_t)j * hd, (size_t)hd * sizeof(float));
        }
    }
}
#endif

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

/* Dispatchers: the model calls these; they pick the kernel set of the context and run the
   parallel loops. */
TR__FN void tr__swiglu_fwd(tr_ctx *ctx, long rows, long width, const float *g, size_t g_stride, float *out, size_t out_stride) {
#if TR__X86
    if (ctx->simd == TR__SIMD_AVX512) {
        long r;
        TR__PARALLEL_FOR(ctx->num_threads)
        for (r = 0; r < rows; r++) tr__swiglu_fwd_row512(width, g + (size_t)r * g_stride, out + (size_t)r * out_stride);
        return;
    }
#endif
    tr__swiglu_fwd_ref(rows, width, g, g_stride, out, out_stride, ctx->num_threads);
}
TR__FN void tr__swiglu_bwd(tr_ctx *ctx, long rows, long width, const float *g, size_t g_stride, const float *da, size_t da_stride, float *dg) {
#if TR__X86
    if (ctx->simd == TR__SIMD_AVX512) {
        long r;
        TR__PARALLEL_FOR(ctx->num_threads)
        for (r = 0; r < rows; r++) tr__swiglu_bwd_row512(width, g + (size_t)r * g_stride, da + (size_t)r * da_stride, dg + (size_t)r * g_stride);
        return;
    }
#endif
    tr__swiglu_bwd_ref(rows, width, g, g_stride, da, da_stride, dg, ctx->num_threads);
}
TR__FN void tr__rms_rows_fwd(tr_ctx *ctx, long rows, int D, const float *x, const float *add, float *out, float *rstd, float eps) {
#if TR__X86
    if (ctx->simd == TR__SIMD_AVX512) {
        long r;
        TR__PARALLEL_FOR(ctx->num_threads)
        for (r = 0; r < rows; r++) rstd[r] = tr__rms_row_fwd512(D, x + (size_t)r * D, add ? add + (size_t)r * D : NULL, out + (size_t)r * D, eps);
        return;
    }
#endif
    tr__rms_rows_fwd_ref(rows, D, x, add, out, rstd, eps, ctx->num_threads);
}
TR__FN void tr__rms_rows_bwd(tr_ctx *ctx, long rows, int D, const float *dy, const float *y, const float *rstd, float *dx) {
#if TR__X86
    if (ctx->simd == TR__SIMD_AVX512) {
        long r;
        TR__PARALLEL_FOR(ctx->num_threads)
        for (r = 0; r < rows; r++) tr__rms_row_bwd512(D, dy + (size_t)r * D, y + (size_t)r * D, rstd[r], dx + (size_t)r * D);
        return;
    }
#endif
    tr__rms_rows_bwd_ref(rows, D, dy, y, rstd, dx, ctx->num_threads);
}
TR__FN int tr__thread_id(void) {
#if TR__OMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}
TR__FN void tr__attention_fwd(tr_ctx *ctx, int B, int S, int H, int hd, const float *qkv, float *o, float *lse, float *scratch) {
#if TR__X86
    if (ctx->simd == TR__SIMD_AVX512) {
        long bh;
        size_t per = tr__attention_scratch_floats(S, hd);
        TR__PARALLEL_FOR(ctx->num_threads)
        for (bh = 0; bh < (long)B * H; bh++) tr__attention_fwd_bh512((int)(bh / H), (int)(bh % H), S, H, hd, qkv, o, lse, scratch + (size_t)tr__thread_id() * per);
        return;
    }
#endif
    tr__attention_fwd_ref(B, S, H, hd, qkv, o, lse, scratch, ctx->num_threads);
}
TR__FN void tr__attention_bwd(tr_ctx *ctx, int B, int S, int H, int hd, const float *qkv, const float *o, const float *lse, const float *do_, float *dqkv, float *scratch) {
#if TR__X86
    if (ctx->simd == TR__SIMD_AVX512) {
        long bh;
        size_t per = tr__attention_scratch_floats(S, hd);
        TR__PARALLEL_FOR(ctx->num_threads)
        for (bh = 0; bh < (long)B * H; bh++) tr__attention_bwd_bh512((int)(bh / H), (int)(bh % H), S, H, hd, qkv, o, lse, do_, dqkv, scratch + (size_t)tr__thread_id() * per);
        return;
    }
#endif
    tr__attention_bwd_ref(B, S, H, hd, qkv, o, lse, do_, dqkv, scratch, ctx->num_threads);
}

/* GEMM (parts/sgemm.h until spliced) */
TR__FN tr_status tr__sgemm(tr_ctx *ctx, int transA, int transB, size_t M, size_t N, size_t K, const float *A, size_t lda, const float *B, size_t ldb, float *C, size_t ldc, int accumulate);

/* >>model
   TRM (and, later, HRM) built from one block set. A module is a stack of blocks; TRM has one
   (L_level), HRM two (H_level, L_level). Parameters live in one flat buffer with named views
   (llm.c style); gradients and optimizer moments mirror it. Only the last H cycle of a
   supervision step records activations (the "tape") for the backward. */
#define TR__MAX_LAYERS 32
#define TR__MAX_TENSORS (8 + 2 * TR__MAX_LAYERS * 4 + 8)
#define TR__NAME_LEN 96

typedef struct tr__layer {
    float *qkv, *o;     /* attention: [3D, D], [D, D] (NULL for mlp_t) */
    float *tgu, *tdown; /* mlp_t token mixing: [2It, S], [S, It] */
    float *gu, *down;   /* channel SwiGLU: [2I, D], [D, I] */
} tr__layer;

typedef struct tr__module {
    const char *name; /* "L_level" or "H_level" */
    int n_layers;
    tr__layer layers[TR__MAX_LAYERS];
} tr__module;

typedef struct tr__tensor_entry {
    char name[TR__NAME_LEN];
    float *data;
    int ndim;
    int64_t shape[2];
    size_t numel;
    int trainable;
} tr__tensor_entry;

/* What one block keeps for its backward (pointers into the tape), or scratch in no-grad mode. */
typedef struct tr__block_rec {
    const float *in; /* [B,S,D] */
    float *mix;      /* mlp_t: gate_up of the token mix [B,2It,D]; attention: qkv [B,S,3D] post-RoPE */
    float *att_o;    /* attention heads output [B,S,D] */
    float *lse;      /* attention log-sum-exp [B,H,S] */
    float *h1, *rstd1;
    float *gu;       /* channel gate_up [B,S,2I] */
    float *out, *rstd2;
} tr__block_rec;

typedef struct tr__net_rec {
    float *h0; /* the net input z + injection [B,S,D] */
    tr__block_rec blocks[TR__MAX_LAYERS];
} tr__net_rec;

struct tr_model {
    tr_ctx *ctx;
    tr_model_config cfg;
    int V, L, S, Lp, D, H, hd, I, It, Dp;
    size_t n_params;
    float *params, *grads;
    float *W_tok, *W_pos, *W_lm, *W_q, *b_q;
    float *H_init, *L_init; /* buffers [D] */
    float *puzzle_emb;      /* buffer [num_puzzle_identifiers, Dp] */
    int n_modules;
    tr__module modules[2];
    int n_tensors;
    tr__tensor_entry tensors[TR__MAX_TENSORS];
    float *rope_cos, *rope_sin; /* [S, hd] */
    /* working memory, grown on demand */
    int ws_B;
    float *ws;
    size_t ws_floats;
    int tape_B, tape_nets;
    float *tape;
    size_t tape_floats;
    tr__net_rec *nets;
};

#define TR__GRAD(m, p) ((m)->grads + ((p) - (m)->params))

static const char *const tr__preset_names[] = {"trm-sudoku-mlp", "trm-sudoku-att", "trm-maze", "trm-arc", "trm-tiny", NULL};
TRDEF const char *const *tr_model_config_preset_names(void) { return tr__preset_names; }

TRDEF tr_status tr_model_config_preset(tr_model_config *cfg, const char *name) {
    if (!cfg || !name) return TR_ERR_INVALID_ARG;
    memset(cfg, 0, sizeof *cfg);
    /* config/arch/trm.yaml defaults */
    cfg->arch = TR_ARCH_TRM;
    cfg->hidden_size = 512;
    cfg->num_heads = 8;
    cfg->expansion = 4;
    cfg->H_layers = 0;
    cfg->L_layers = 2;
    cfg->H_cycles = 3;
    cfg->L_cycles = 6;
    cfg->puzzle_emb_ndim = 512;
    cfg->puzzle_emb_len = 16;
    cfg->pos_encodings = TR_POS_ROPE;
    cfg->mlp_t = 0;
    cfg->rope_theta = 10000;
    cfg->rms_norm_eps = 1e-5;
    cfg->halt_max_steps = 16;
    cfg->halt_exploration_prob = 0.1;
    cfg->no_ACT_continue = 1;
    cfg->loss_type = TR_LOSS_STABLEMAX;
    cfg->num_puzzle_identifiers = 1;
    if (strcmp(name, "trm-sudoku-mlp") == 0) {
        cfg->vocab_size = 11, cfg->seq_len = 81, cfg->mlp_t = 1, cfg->pos_encodings = TR_POS_NONE;
    } else if (strcmp(name, "trm-sudoku-att") == 0) {
        cfg->vocab_size = 11, cfg->seq_len = 81;
    } else if (strcmp(name, "trm-maze") == 0) {
        cfg->vocab_size = 6, cfg->seq_len = 900, cfg->L_cycles = 4;
    } else if (strcmp(name, "trm-arc") == 0) {
        cfg->vocab_size = 12, cfg->seq_len = 900, cfg->L_cycles = 4;
        cfg->num_puzzle_identifiers = 961; /* the real table size comes from the dataset */
    } else if (strcmp(name, "trm-tiny") == 0) {
        cfg->vocab_size = 11, cfg->seq_len = 81, cfg->mlp_t = 1, cfg->pos_encodings = TR_POS_NONE;
        cfg->hidden_size = 64, cfg->num_heads = 4, cfg->puzzle_emb_ndim = 64, cfg->puzzle_emb_len = 2;
        cfg->H_cycles = 2, cfg->L_cycles = 2;
    } else
        return TR_ERR_NOT_FOUND;
    return TR_OK;
}

/* SwiGLU intermediate width: 256 * ceil(round(expansion * d * 2/3) / 256), as the reference. */
TR__FN int tr__swiglu_width(double expansion, int d) {
    double r = expansion * d * 2.0 / 3.0;
    long rounded = (long)floor(r + 0.5);
    if (fabs(r - floor(r) - 0.5) < 1e-9 && ((long)floor(r) % 2 == 0)) rounded = (long)floor(r); /* round half to even */
    return (int)(256 * ((rounded + 255) / 256));
}

TR__FN int tr__prefix_len(const tr_model_config *c) {
    if (c->puzzle_emb_ndim <= 0) return 0;
    if (c->puzzle_emb_len > 0) return c->puzzle_emb_len;
    return (c->puzzle_emb_ndim + c->hidden_size - 1) / c->hidden_size;
}

#define TR__CHECK_RANGE(field, lo, hi)                                                                            \
    if (!(cfg->field >= (lo) && cfg->field <= (hi)))                                                           \
        return tr__err(ctx, TR_ERR_CONFIG, "config: " #field " = %g is out of range [%g, %g]", (double)cfg->field, \
                       (double)(lo), (double)(hi));

TRDEF tr_status tr_model_config_validate(tr_ctx *ctx, const tr_model_config *cfg) {
    int Lp;
    if (!cfg) return tr__err(ctx, TR_ERR_INVALID_ARG, "config is NULL");
    if (cfg->arch != TR_ARCH_TRM && cfg->arch != TR_ARCH_HRM) return tr__err(ctx, TR_ERR_CONFIG, "config: arch %d is unknown", (int)cfg->arch);
    if (cfg->arch == TR_ARCH_HRM) return tr__err(ctx, TR_ERR_UNSUPPORTED, "config: arch HRM is not implemented yet");
    TR__CHECK_RANGE(vocab_size, 2, 1 << 20);
    TR__CHECK_RANGE(seq_len, 1, 1 << 16);
    TR__CHECK_RANGE(num_puzzle_identifiers, 1, 1 << 28);
    TR__CHECK_RANGE(hidden_size, 2, 1 << 14);
    TR__CHECK_RANGE(num_heads, 1, 1024);
    TR__CHECK_RANGE(expansion, 0.01, 64);
    TR__CHECK_RANGE(L_layers, 1, TR__MAX_LAYERS);
    TR__CHECK_RANGE(H_cycles, 1, 1000);
    TR__CHECK_RANGE(L_cycles, 1, 1000);
    TR__CHECK_RANGE(puzzle_emb_ndim, 0, 1 << 16);
    TR__CHECK_RANGE(puzzle_emb_len, 0, 1 << 12);
    TR__CHECK_RANGE(rms_norm_eps, 0, 1);
    TR__CHECK_RANGE(halt_max_steps, 1, 1 << 20);
    TR__CHECK_RANGE(halt_exploration_prob, 0, 1);
    if (cfg->pos_encodings < TR_POS_NONE || cfg->pos_encodings > TR_POS_LEARNED)
        return tr__err(ctx, TR_ERR_CONFIG, "config: pos_encodings %d is unknown (none, rope, learned)", (int)cfg->pos_encodings);
    if (cfg->loss_type != TR_LOSS_STABLEMAX && cfg->loss_type != TR_LOSS_SOFTMAX)
        return tr__err(ctx, TR_ERR_CONFIG, "config: loss_type %d is unknown", (int)cfg->loss_type);
    if (cfg->hidden_size % cfg->num_heads != 0)
        return tr__err(ctx, TR_ERR_CONFIG, "config: num_heads %d does not divide hidden_size %d", cfg->num_heads, cfg->hidden_size);
    if (!cfg->mlp_t && cfg->pos_encodings == TR_POS_ROPE && (cfg->hidden_size / cfg->num_heads) % 2 != 0)
        return tr__err(ctx, TR_ERR_CONFIG, "config: RoPE needs an even head size, got hidden_size/num_heads = %d", cfg->hidden_size / cfg->num_heads);
    if (cfg->pos_encodings == TR_POS_ROPE && !(cfg->rope_theta > 0))
        return tr__err(ctx, TR_ERR_CONFIG, "config: rope_theta must be > 0");
    Lp = tr__prefix_len(cfg);
    if (cfg->puzzle_emb_ndim > Lp * cfg->hidden_size)
        return tr__err(ctx, TR_ERR_CONFIG, "config: puzzle_emb_ndim %d does not fit in puzzle_emb_len %d x hidden_size %d", cfg->puzzle_emb_ndim, Lp, cfg->hidden_size);
    if ((long)cfg->seq_len + Lp > (1 << 16)) return tr__err(ctx, TR_ERR_CONFIG, "config: seq_len + puzzle_emb_len is too long");
    if (cfg->mlp_t && cfg->halt_max_steps < 1) return tr__err(ctx, TR_ERR_CONFIG, "config: halt_max_steps must be >= 1");
    return TR_OK;
}

TR__FN void tr__add_tensor(tr_model *m, const char *name, float *data, int ndim, int64_t d0, int64_t d1, int trainable) {
    tr__tensor_entry *e = &m->tensors[m->n_tensors++];
    snprintf(e->name, sizeof e->name, "%s", name);
    e->data = data;
    e->ndim = ndim;
    e->shape[0] = d0;
    e->shape[1] = ndim > 1 ? d1 : 0;
    e->numel = (size_t)d0 * (size_t)(ndim > 1 ? d1 : 1);
    e->trainable = trainable;
}

/* Lays out (or, with params == NULL, counts) the dense parameters in reference order. */
TR__FN size_t tr__layout(tr_model *m, float *base) {
    size_t off = 0;
    int mi, l;
    char name[TR__NAME_LEN];
#define TR__TAKE(ptr, nm, d0, d1, nd)                                              \
    do {                                                                           \
        if (base) {                                                                \
            (ptr) = base + off;                                                    \
            tr__add_tensor(m, nm, base + off, nd, d0, d1, 1);                      \
        }                                                                          \
        off += (size_t)(d0) * (size_t)((nd) > 1 ? (d1) : 1);                       \
        off = (off + 15) & ~(size_t)15; /* 64-byte aligned views */                \
    } while (0)
    TR__TAKE(m->W_tok, "model.inner.embed_tokens.embedding_weight", m->V, m->D, 2);
    if (m->cfg.pos_encodings == TR_POS_LEARNED) TR__TAKE(m->W_pos, "model.inner.embed_pos.embedding_weight", m->S, m->D, 2);
    for (mi = 0; mi < m->n_modules; mi++) {
        tr__module *md = &m->modules[mi];
        for (l = 0; l < md->n_layers; l++) {
            tr__layer *ly = &md->layers[l];
#define TR__LNAME(suffix) (snprintf(name, sizeof name, "model.inner.%s.layers.%d.%s", md->name, l, suffix), name)
            if (m->cfg.mlp_t) {
                TR__TAKE(ly->tgu, TR__LNAME("mlp_t.gate_up_proj.weight"), 2 * m->It, m->S, 2);
                TR__TAKE(ly->tdown, TR__LNAME("mlp_t.down_proj.weight"), m->S, m->It, 2);
            } else {
                TR__TAKE(ly->qkv, TR__LNAME("self_attn.qkv_proj.weight"), 3 * m->D, m->D, 2);
                TR__TAKE(ly->o, TR__LNAME("self_attn.o_proj.weight"), m->D, m->D, 2);
            }
            TR__TAKE(ly->gu, TR__LNAME("mlp.gate_up_proj.weight"), 2 * m->I, m->D, 2);
            TR__TAKE(ly->down, TR__LNAME("mlp.down_proj.weight"), m->D, m->I, 2);
#undef TR__LNAME
        }
    }
    TR__TAKE(m->W_lm, "model.inner.lm_head.weight", m->V, m->D, 2);
    TR__TAKE(m->W_q, "model.inner.q_head.weight", 2, m->D, 2);
    TR__TAKE(m->b_q, "model.inner.q_head.bias", 2, 0, 1);
#undef TR__TAKE
    return off;
}

TR__FN void tr__model_free_work(tr_model *m) {
    tr_ctx *ctx = m->ctx;
    tr__free(ctx, m->ws);
    tr__free(ctx, m->tape);
    tr__free(ctx, m->nets);
    m->ws = m->tape = NULL;
    m->nets = NULL;
    m->ws_B = m->tape_B = m->tape_nets = 0;
    m->ws_floats = m->tape_floats = 0;
}

TRDEF void tr_model_destroy(tr_model *m) {
    tr_ctx *ctx;
    if (!m) return;
    ctx = m->ctx;
    tr__model_free_work(m);
    tr__free(ctx, m->params);
    tr__free(ctx, m->grads);
    tr__free(ctx, m->H_init);
    tr__free(ctx, m->puzzle_emb);
    tr__free(ctx, m->rope_cos);
    tr__free(ctx, m);
}

/* The reference initialisation: truncated LeCun normal for linear layers, 1/sqrt(D) for the
   token (and position) embedding, zeros for the puzzle table and q_head weight, -5 for the
   q_head bias, std 1 for H_init / L_init. Each tensor draws from its own stream. */
TR__FN void tr__init_weights(tr_model *m) {
    int i;
    for (i = 0; i < m->n_tensors; i++) {
        tr__tensor_entry *e = &m->tensors[i];
        tr__rng r = tr__rng_make(m->ctx->seed, 1000 + (uint64_t)i);
        double std;
        if (e->data == m->W_q) std = 0;
        else if (e->data == m->b_q) {
            e->data[0] = e->data[1] = -5.0f;
            continue;
        } else if (e->data == m->W_tok || e->data == m->W_pos) std = 1.0 / sqrt((double)m->D);
        else if (e->data == m->H_init || e->data == m->L_init) std = 1.0;
        else if (e->data == m->puzzle_emb) std = 0;
        else std = 1.0 / sqrt((double)e->shape[1]); /* fan_in */
        tr__trunc_normal(&r, e->data, e->numel, std);
    }
}

TRDEF tr_status tr_model_create(tr_ctx *ctx, const tr_model_config *cfg, tr_model **out) {
    tr_model *m;
    tr_status st;
    size_t n, npz;
    int p, j;
    if (!ctx || !out) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_model_create: NULL argument");
    *out = NULL;
    if ((st = tr_model_config_validate(ctx, cfg)) != TR_OK) return st;
    m = (tr_model *)tr__calloc(ctx, 1, sizeof *m);
    if (!m) return TR_ERR_OUT_OF_MEMORY;
    m->ctx = ctx;
    m->cfg = *cfg;
    m->V = cfg->vocab_size;
    m->L = cfg->seq_len;
    m->Lp = tr__prefix_len(cfg);
    m->S = m->L + m->Lp;
    m->D = cfg->hidden_size;
    m->H = cfg->num_heads;
    m->hd = m->D / m->H;
    m->Dp = cfg->puzzle_emb_ndim;
    m->I = tr__swiglu_width(cfg->expansion, m->D);
    m->It = cfg->mlp_t ? tr__swiglu_width(cfg->expansion, m->S) : 0;
    m->n_modules = 1;
    m->modules[0].name = "L_level";
    m->modules[0].n_layers = cfg->L_layers;
    n = tr__layout(m, NULL);
    m->n_params = n;
    m->params = (float *)tr__calloc(ctx, n, sizeof(float));
    m->grads = m->params ? (float *)tr__calloc(ctx, n, sizeof(float)) : NULL;
    m->H_init = m->grads ? (float *)tr__calloc(ctx, 2 * (size_t)m->D, sizeof(float)) : NULL;
    if (!m->H_init) goto oom;
    m->L_init = m->H_init + m->D;
    if (!tr__size_mul((size_t)cfg->num_puzzle_identifiers, (size_t)TR__MAX(m->Dp, 1), &npz)) {
        tr_model_destroy(m);
        return tr__err(ctx, TR_ERR_OVERFLOW, "config: puzzle table %d x %d overflows", cfg->num_puzzle_identifiers, m->Dp);
    }
    m->puzzle_emb = (float *)tr__calloc(ctx, npz, sizeof(float));
    m->rope_cos = m->puzzle_emb ? (float *)tr__calloc(ctx, 2 * (size_t)m->S * m->hd, sizeof(float)) : NULL;
    if (!m->rope_cos) goto oom;
    m->rope_sin = m->rope_cos + (size_t)m->S * m->hd;
    tr__layout(m, m->params);
    tr__add_tensor(m, "model.inner.H_init", m->H_init, 1, m->D, 0, 0);
    tr__add_tensor(m, "model.inner.L_init", m->L_init, 1, m->D, 0, 0);
    if (m->Dp > 0) tr__add_tensor(m, "model.inner.puzzle_emb.weights", m->puzzle_emb, 2, cfg->num_puzzle_identifiers, m->Dp, 0);
    tr__init_weights(m);
    for (p = 0; p < m->S; p++)
        for (j = 0; j < m->hd; j++) {
            double inv_freq = pow(cfg->rope_theta > 0 ? cfg->rope_theta : 10000.0, -2.0 * (j % (m->hd / 2 ? m->hd / 2 : 1)) / m->hd);
            m->rope_cos[(size_t)p * m->hd + j] = (float)cos(p * inv_freq);
            m->rope_sin[(size_t)p * m->hd + j] = (float)sin(p * inv_freq);
        }
    *out = m;
    return TR_OK;
oom:
    tr_model_destroy(m);
    return TR_ERR_OUT_OF_MEMORY; /* the reason was set by tr__alloc */
}

TRDEF const tr_model_config *tr_model_get_config(const tr_model *m) { return m ? &m->cfg : NULL; }
TRDEF size_t tr_model_num_params(const tr_model *m) {
    size_t n = 0;
    int i;
    if (!m) return 0;
    for (i = 0; i < m->n_tensors; i++)
        if (m->tensors[i].trainable) n += m->tensors[i].numel;
    return n;
}
TRDEF int tr_model_num_tensors(const tr_model *m) { return m ? m->n_tensors : 0; }
TRDEF tr_status tr_model_tensor(const tr_model *m, int index, tr_tensor_view *out) {
    const tr__tensor_entry *e;
    if (!m || !out || index < 0 || index >= m->n_tensors) return TR_ERR_INVALID_ARG;
    e = &m->tensors[index];
    out->name = e->name;
    out->data = e->data;
    out->ndim = e->ndim;
    out->shape[0] = e->shape[0];
    out->shape[1] = e->shape[1];
    out->numel = e->numel;
    out->trainable = e->trainable;
    return TR_OK;
}
TRDEF tr_status tr_model_find_tensor(const tr_model *m, const char *name, tr_tensor_view *out) {
    int i;
    if (!m || !name) return TR_ERR_INVALID_ARG;
    if (strncmp(name, "_orig_mod.", 10) == 0) name += 10;
    for (i = 0; i < m->n_tensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0) return tr_model_tensor(m, i, out);
    return tr__err(m->ctx, TR_ERR_NOT_FOUND, "tensor '%s' is not part of this model", name);
}

/* --- working memory ----------------------------------------------------------------------- */
/* Floats one block records per batch row. */
TR__FN size_t tr__block_rec_floats(const tr_model *m) {
    size_t S = (size_t)m->S, D = (size_t)m->D, n;
    n = m->cfg.mlp_t ? 2 * (size_t)m->It * D + D /* mix, rstd1 */ : 3 * S * D + S * D + (size_t)m->H * S + S;
    n += S * D /* h1 */ + 2 * S * (size_t)m->I /* gu */ + S * D /* out */ + S /* rstd2 */;
    return n + 16 * 8; /* alignment slack */
}
/* Scratch a block needs besides its record: activation A, projection output, attention rows. */
TR__FN size_t tr__block_tmp_floats(const tr_model *m, int B) {
    size_t S = (size_t)m->S, D = (size_t)m->D;
    size_t a = TR__MAX((size_t)m->It * D, S * (size_t)m->I);
    return (size_t)B * a + TR__MAX((size_t)B * S * D, (size_t)m->It * D) + (size_t)m->ctx->num_threads * tr__attention_scratch_floats(m->S, m->hd) + 64;
}

TR__FN float *tr__carve(float **cursor, size_t n) {
    float *p = *cursor;
    *cursor += (n + 15) & ~(size_t)15;
    return p;
}

/* Points a record's buffers at consecutive memory for B rows; `out` is set separately. */
TR__FN void tr__rec_bind(const tr_model *m, tr__block_rec *r, float **cur, int B, int with_out) {
    size_t S = (size_t)m->S, D = (size_t)m->D;
    if (m->cfg.mlp_t) {
        r->mix = tr__carve(cur, (size_t)B * 2 * m->It * D);
        r->rstd1 = tr__carve(cur, (size_t)B * D);
        r->att_o = r->lse = NULL;
    } else {
        r->mix = tr__carve(cur, (size_t)B * 3 * S * D);
        r->att_o = tr__carve(cur, (size_t)B * S * D);
        r->lse = tr__carve(cur, (size_t)B * m->H * S);
        r->rstd1 = tr__carve(cur, (size_t)B * S);
    }
    r->h1 = tr__carve(cur, (size_t)B * S * D);
    r->gu = tr__carve(cur, (size_t)B * S * 2 * m->I);
    r->rstd2 = tr__carve(cur, (size_t)B * S);
    r->out = with_out ? tr__carve(cur, (size_t)B * S * D) : NULL;
}

/* No-grad workspace: one block record, block scratch, and the backward's gradient buffers. */
TR__FN tr_status tr__reserve_ws(tr_model *m, int B) {
    size_t n;
    if (B <= m->ws_B) return TR_OK;
    n = tr__block_rec_floats(m) * (size_t)B + tr__block_tmp_floats(m, B) +
        (size_t)B * ((size_t)m->S * m->D * 6 + 2 * (size_t)m->S * TR__MAX(m->I, 3 * m->D / 2 + 1) + 2 * (size_t)m->It * m->D) + 256;
    tr__free(m->ctx, m->ws);
    m->ws_B = 0;
    m->ws = (float *)tr__alloc(m->ctx, n * sizeof(float));
    if (!m->ws) return TR_ERR_OUT_OF_MEMORY;
    m->ws_floats = n;
    m->ws_B = B;
    return TR_OK;
}

TR__FN tr_status tr__reserve_tape(tr_model *m, int B, int nets) {
    size_t per_net, n;
    int i, l;
    if (B == m->tape_B && nets == m->tape_nets) return TR_OK;
    tr__free(m->ctx, m->tape);
    tr__free(m->ctx, m->nets);
    m->tape = NULL;
    m->nets = NULL;
    m->tape_B = m->tape_nets = 0;
    per_net = (size_t)B * ((size_t)m->S * m->D + tr__block_rec_floats(m) * (size_t)m->cfg.L_layers) + 64;
    if (!tr__size_mul(per_net, (size_t)nets, &n)) return tr__err(m->ctx, TR_ERR_OVERFLOW, "tape size overflows");
    m->nets = (tr__net_rec *)tr__calloc(m->ctx, (size_t)nets, sizeof(tr__net_rec));
    if (!m->nets) return TR_ERR_OUT_OF_MEMORY;
    m->tape = (float *)tr__alloc(m->ctx, n * sizeof(float));
    if (!m->tape) {
        tr__free(m->ctx, m->nets);
        m->nets = NULL;
        return TR_ERR_OUT_OF_MEMORY;
    }
    {
        float *cur = m->tape;
        for (i = 0; i < nets; i++) {
            m->nets[i].h0 = tr__carve(&cur, (size_t)B * m->S * m->D);
            for (l = 0; l < m->cfg.L_layers; l++) tr__rec_bind(m, &m->nets[i].blocks[l], &cur, B, 1);
        }
    }
    m->tape_floats = n;
    m->tape_B = B;
    m->tape_nets = nets;
    return TR_OK;
}

/* --- blocks ------------------------------------------------------------------------------- */
/* Forward of one block: r->in -> r->out, filling the record. tmp: tr__block_tmp_floats. */
TR__FN tr_status tr__block_fwd(tr_model *m, const tr__layer *ly, int B, tr__block_rec *r, float *tmp) {
    tr_ctx *ctx = m->ctx;
    size_t S = (size_t)m->S, D = (size_t)m->D, I = (size_t)m->I, BS = (size_t)B * S;
    float eps = (float)m->cfg.rms_norm_eps;
    float *act = tmp, *proj = tmp + (size_t)B * TR__MAX((size_t)m->It * D, S * I), *rows = proj + TR__MAX(BS * D, (size_t)m->It * D);
    tr_status st;
    int b;
    if (m->cfg.mlp_t) {
        size_t It = (size_t)m->It;
        for (b = 0; b < B; b++) {
            /* token mix on the transpose without transposing: G_b = W_tgu [2It,S] . h_b [S,D] */
            st = tr__sgemm(ctx, 0, 0, 2 * It, D, S, ly->tgu, S, r->in + b * S * D, D, r->mix + b * 2 * It * D, D, 0);
            if (st) return st;
        }
        tr__swiglu_fwd(ctx, B, (long)(It * D), r->mix, 2 * It * D, act, It * D);
        for (b = 0; b < B; b++) {
            st = tr__sgemm(ctx, 0, 0, S, D, It, ly->tdown, It, act + b * It * D, D, proj + b * S * D, D, 0);
            if (st) return st;
        }
        tr__rms_cols_fwd_ref(B, (int)S, (int)D, r->in, proj, r->h1, r->rstd1, eps, ctx->num_threads);
    } else {
        st = tr__sgemm(ctx, 0, 1, BS, 3 * D, D, r->in, D, ly->qkv, D, r->mix, 3 * D, 0);
        if (st) return st;
        if (m->cfg.pos_encodings == TR_POS_ROPE) tr__rope_ref((long)BS, (int)S, m->H, m->hd, r->mix, m->rope_cos, m->rope_sin, 0, ctx->num_threads);
        tr__attention_fwd(ctx, B, (int)S, m->H, m->hd, r->mix, r->att_o, r->lse, rows);
        st = tr__sgemm(ctx, 0, 1, BS, D, D, r->att_o, D, ly->o, D, proj, D, 0);
        if (st) return st;
        tr__rms_rows_fwd(ctx, (long)BS, (int)D, r->in, proj, r->h1, r->rstd1, eps);
    }
    /* channel SwiGLU: gu = h1 . W_guᵀ, act = silu(g) * u, proj = act . W_downᵀ */
    st = tr__sgemm(ctx, 0, 1, BS, 2 * I, D, r->h1, D, ly->gu, D, r->gu, 2 * I, 0);
    if (st) return st;
    tr__swiglu_fwd(ctx, (long)BS, (long)I, r->gu, 2 * I, act, I);
    st = tr__sgemm(ctx, 0, 1, BS, D, I, act, I, ly->down, I, proj, D, 0);
    if (st) return st;
    tr__rms_rows_fwd(ctx, (long)BS, (int)D, r->h1, proj, r->out, r->rstd2, eps);
    return TR_OK;
}

/* Backward of one block: dout -> din (overwritten), accumulating weight grads into gl.
   g1, g2: [B,S,D] scratch; dbig: [B, max(S*2I, 2It*D, S*3D)] scratch; tmp as in forward. */
TR__FN tr_status tr__block_bwd(tr_model *m, const tr__layer *ly, const tr__block_rec *r, int B, const float *dout, float *din,
                               float *g1, float *g2, float *dbig, float *tmp) {
    tr_ctx *ctx = m->ctx;
    size_t S = (size_t)m->S, D = (size_t)m->D, I = (size_t)m->I, BS = (size_t)B * S;
    float *act = tmp, *dact = tmp + (size_t)B * TR__MAX((size_t)m->It * D, S * I), *rows = dact + TR__MAX(BS * D, (size_t)m->It * D);
    float *g_gu = TR__GRAD(m, ly->gu), *g_down = TR__GRAD(m, ly->down);
    tr_status st;
    int b;
    /* channel SwiGLU half */
    tr__rms_rows_bwd(ctx, (long)BS, (int)D, dout, r->out, r->rstd2, g1); /* g1 = d(h1 + proj) */
    tr__swiglu_fwd(ctx, (long)BS, (long)I, r->gu, 2 * I, act, I);
    if ((st = tr__sgemm(ctx, 1, 0, D, I, BS, g1, D, act, I, g_down, I, 1))) return st;
    if ((st = tr__sgemm(ctx, 0, 0, BS, I, D, g1, D, ly->down, I, act, I, 0))) return st; /* act <- d act */
    tr__swiglu_bwd(ctx, (long)BS, (long)I, r->gu, 2 * I, act, I, dbig);
    if ((st = tr__sgemm(ctx, 1, 0, 2 * I, D, BS, dbig, 2 * I, r->h1, D, g_gu, D, 1))) return st;
    memcpy(g2, g1, BS * D * sizeof(float));
    if ((st = tr__sgemm(ctx, 0, 0, BS, D, 2 * I, dbig, 2 * I, ly->gu, D, g2, D, 1))) return st; /* g2 = d h1 */
    if (m->cfg.mlp_t) {
        size_t It = (size_t)m->It;
        float *g_tgu = TR__GRAD(m, ly->tgu), *g_tdown = TR__GRAD(m, ly->tdown);
        tr__rms_cols_bwd_ref(B, (int)S, (int)D, g2, r->h1, r->rstd1, g1, ctx->num_threads); /* g1 = d(in + proj) */
        tr__swiglu_fwd(ctx, B, (long)(It * D), r->mix, 2 * It * D, act, It * D);
        memcpy(din, g1, BS * D * sizeof(float));
        for (b = 0; b < B; b++) {
            const float *gb = g1 + b * S * D;
            if ((st = tr__sgemm(ctx, 0, 1, S, It, D, gb, D, act + b * It * D, D, g_tdown, It, 1))) return st;
            if ((st = tr__sgemm(ctx, 1, 0, It, D, S, ly->tdown, It, gb, D, dact, D, 0))) return st;
            tr__swiglu_bwd(ctx, 1, (long)(It * D), r->mix + b * 2 * It * D, 2 * It * D, dact, It * D, dbig);
            if ((st = tr__sgemm(ctx, 0, 1, 2 * It, S, D, dbig, D, r->in + b * S * D, D, g_tgu, S, 1))) return st;
            if ((st = tr__sgemm(ctx, 1, 0, S, D, 2 * It, ly->tgu, S, dbig, D, din + b * S * D, D, 1))) return st;
        }
    } else {
        float *g_qkv = TR__GRAD(m, ly->qkv), *g_o = TR__GRAD(m, ly->o);
        tr__rms_rows_bwd(ctx, (long)BS, (int)D, g2, r->h1, r->rstd1, g1); /* g1 = d(in + proj) */
        if ((st = tr__sgemm(ctx, 1, 0, D, D, BS, g1, D, r->att_o, D, g_o, D, 1))) return st;
        if ((st = tr__sgemm(ctx, 0, 0, BS, D, D, g1, D, ly->o, D, g2, D, 0))) return st; /* g2 = d att_o */
        tr__attention_bwd(ctx, B, (int)S, m->H, m->hd, r->mix, r->att_o, r->lse, g2, dbig, rows);
        if (m->cfg.pos_encodings == TR_POS_ROPE) tr__rope_ref((long)BS, (int)S, m->H, m->hd, dbig, m->rope_cos, m->rope_sin, 1, ctx->num_threads);
        if ((st = tr__sgemm(ctx, 1, 0, 3 * D, D, BS, dbig, 3 * D, r->in, D, g_qkv, D, 1))) return st;
        memcpy(din, g1, BS * D * sizeof(float));
        if ((st = tr__sgemm(ctx, 0, 0, BS, D, 3 * D, dbig, 3 * D, ly->qkv, D, din, D, 1))) return st;
    }
    return TR_OK;
}

/* Applies a module: out = blocks(z + inj). With rec != NULL the activations go to the tape
   (rec->blocks[last].out holds the result, and `out` is ignored); otherwise the workspace is
   used and the result is written to `out` (which may alias z). */
TR__FN tr_status tr__net_fwd(tr_model *m, const tr__module *md, int B, const float *z, const float *inj, float *out, tr__net_rec *rec) {
    size_t n = (size_t)B * m->S * m->D;
    int l;
    tr_status st;
    float *tmp, *h0;
    tr__block_rec scratch;
    if (rec) {
        h0 = rec->h0;
        tmp = m->ws + tr__block_rec_floats(m) * (size_t)B;
    } else {
        float *cur = m->ws;
        tr__rec_bind(m, &scratch, &cur, B, 0);
        tmp = m->ws + tr__block_rec_floats(m) * (size_t)B;
        h0 = out;
    }
    tr__add(m->ctx, n, z, inj, h0);
    for (l = 0; l < md->n_layers; l++) {
        tr__block_rec *r = rec ? &rec->blocks[l] : &scratch;
        if (rec) r->in = l ? rec->blocks[l - 1].out : h0;
        else {
            r->in = out;
            r->out = out; /* in-place is safe: the input is consumed before the final norm writes */
        }
        if ((st = tr__block_fwd(m, &md->layers[l], B, r, tmp)) != TR_OK) return st;
    }
    return TR_OK;
}

/* Backward through a recorded module application: dout -> dh0 (overwritten). */
TR__FN tr_status tr__net_bwd(tr_model *m, const tr__module *md, int B, const tr__net_rec *rec, const float *dout, float *dh0) {
    size_t n = (size_t)B * m->S * m->D;
    float *g1 = m->ws + tr__block_rec_floats(m) * (size_t)B + tr__block_tmp_floats(m, B);
    float *g2 = g1 + n, *gcur = g2 + n, *gnext = gcur + n, *dbig = gnext + n;
    float *tmp = m->ws + tr__block_rec_floats(m) * (size_t)B;
    int l;
    tr_status st;
    memcpy(gcur, dout, n * sizeof(float));
    for (l = md->n_layers - 1; l >= 0; l--) {
        float *dst = l ? gnext : dh0, *t;
        if ((st = tr__block_bwd(m, &md->layers[l], &rec->blocks[l], B, gcur, dst, g1, g2, dbig, tmp)) != TR_OK) return st;
        t = gcur, gcur = gnext, gnext = t;
    }
    return TR_OK;
}

/* --- carry, recursion, heads, loss --------------------------------------------------------- */
struct tr_carry {
    tr_model *m;
    int B;
    float *z_H, *z_L;     /* [B,S,D] */
    float *x, *inj;       /* the scaled input embedding and z_H + x, [B,S,D] */
    float *logits, *q;    /* [B,L,V], [B,2] */
    int32_t *steps, *halted;
    int32_t *inputs, *labels, *pids; /* the rows each slot is working on */
};

TRDEF void tr_carry_destroy(tr_carry *c) {
    if (!c) return;
    tr__free(c->m->ctx, c->z_H);
    tr__free(c->m->ctx, c->steps);
    tr__free(c->m->ctx, c);
}

TRDEF tr_status tr_carry_create(tr_model *m, int B, tr_carry **out) {
    tr_carry *c;
    size_t n, nf, ni;
    if (!m || !out) return TR_ERR_INVALID_ARG;
    *out = NULL;
    if (B <= 0 || B > (1 << 20)) return tr__err(m->ctx, TR_ERR_INVALID_ARG, "batch_size %d is out of range (1..%d)", B, 1 << 20);
    c = (tr_carry *)tr__calloc(m->ctx, 1, sizeof *c);
    if (!c) return TR_ERR_OUT_OF_MEMORY;
    c->m = m;
    c->B = B;
    n = (size_t)B * m->S * m->D;
    nf = 4 * n + (size_t)B * m->L * m->V + 2 * (size_t)B + 64;
    ni = 2 * (size_t)B + 2 * (size_t)B * m->L + (size_t)B;
    c->z_H = (float *)tr__calloc(m->ctx, nf, sizeof(float));
    c->steps = c->z_H ? (int32_t *)tr__calloc(m->ctx, ni, sizeof(int32_t)) : NULL;
    if (!c->steps) {
        tr_carry_destroy(c);
        return TR_ERR_OUT_OF_MEMORY;
    }
    c->z_L = c->z_H + n;
    c->x = c->z_L + n;
    c->inj = c->x + n;
    c->logits = c->inj + n;
    c->q = c->logits + (size_t)B * m->L * m->V;
    c->halted = c->steps + B;
    c->inputs = c->halted + B;
    c->labels = c->inputs + (size_t)B * m->L;
    c->pids = c->labels + (size_t)B * m->L;
    tr_carry_reset(c);
    *out = c;
    return TR_OK;
}

TRDEF void tr_carry_reset(tr_carry *c) {
    int b;
    if (!c) return;
    for (b = 0; b < c->B; b++) c->halted[b] = 1, c->steps[b] = 0;
}
TRDEF int tr_carry_all_halted(const tr_carry *c) {
    int b;
    for (b = 0; b < c->B; b++)
        if (!c->halted[b]) return 0;
    return 1;
}

/* Checks every id of an incoming batch, so that bad data is an error and never a crash. */
TR__FN tr_status tr__check_batch(tr_model *m, const tr_batch *bt, int B) {
    int b, t;
    if (!bt || !bt->inputs) return tr__err(m->ctx, TR_ERR_INVALID_ARG, "batch: inputs is NULL");
    if (bt->batch_size != B) return tr__err(m->ctx, TR_ERR_INVALID_ARG, "batch: batch_size %d does not match the carry's %d", bt->batch_size, B);
    for (b = 0; b < B; b++) {
        for (t = 0; t < m->L; t++) {
            int32_t v = bt->inputs[(size_t)b * m->L + t];
            if (v < 0 || v >= m->V) return tr__err(m->ctx, TR_ERR_INVALID_ARG, "batch: inputs[%d][%d] = %d is outside the vocabulary [0, %d)", b, t, (int)v, m->V);
            if (bt->labels) {
                v = bt->labels[(size_t)b * m->L + t];
                if (v != -100 && (v < 0 || v >= m->V))
                    return tr__err(m->ctx, TR_ERR_INVALID_ARG, "batch: labels[%d][%d] = %d is neither -100 nor in [0, %d)", b, t, (int)v, m->V);
            }
        }
        if (bt->puzzle_identifiers) {
            int32_t p = bt->puzzle_identifiers[b];
            if (p < 0 || p >= m->cfg.num_puzzle_identifiers)
                return tr__err(m->ctx, TR_ERR_INVALID_ARG, "batch: puzzle_identifiers[%d] = %d is outside [0, %d)", b, (int)p, m->cfg.num_puzzle_identifiers);
        }
    }
    return TR_OK;
}

/* ACT step 1: halted rows restart from H_init / L_init on the incoming row of the same index. */
TR__FN void tr__carry_refill(tr_model *m, tr_carry *c, const tr_batch *bt) {
    int b, s;
    size_t SD = (size_t)m->S * m->D;
    for (b = 0; b < c->B; b++) {
        if (!c->halted[b]) continue;
        for (s = 0; s < m->S; s++) {
            memcpy(c->z_H + b * SD + (size_t)s * m->D, m->H_init, (size_t)m->D * sizeof(float));
            memcpy(c->z_L + b * SD + (size_t)s * m->D, m->L_init, (size_t)m->D * sizeof(float));
        }
        c->steps[b] = 0;
        memcpy(c->inputs + (size_t)b * m->L, bt->inputs + (size_t)b * m->L, (size_t)m->L * sizeof(int32_t));
        if (bt->labels) memcpy(c->labels + (size_t)b * m->L, bt->labels + (size_t)b * m->L, (size_t)m->L * sizeof(int32_t));
        else
            for (s = 0; s < m->L; s++) c->labels[(size_t)b * m->L + s] = -100;
        c->pids[b] = bt->puzzle_identifiers ? bt->puzzle_identifiers[b] : 0;
    }
}

/* x = sqrt(D) * [puzzle prefix ; token embeddings] (+ learned positions). */
TR__FN void tr__embed_fwd(tr_model *m, const tr_carry *c, float *x) {
    int b, s, j, D = m->D, S = m->S, Lp = m->Lp;
    float scale = sqrtf((float)D);
    for (b = 0; b < c->B; b++)
        for (s = 0; s < S; s++) {
            float *xr = x + ((size_t)b * S + s) * D;
            if (s < Lp) {
                const float *p = m->puzzle_emb + (size_t)c->pids[b] * m->Dp;
                for (j = 0; j < D; j++) {
                    int k = s * D + j;
                    xr[j] = k < m->Dp ? p[k] : 0.0f;
                }
            } else
                memcpy(xr, m->W_tok + (size_t)c->inputs[(size_t)b * m->L + s - Lp] * D, (size_t)D * sizeof(float));
            if (m->W_pos)
                for (j = 0; j < D; j++) xr[j] = 0.707106781f * (xr[j] + m->W_pos[(size_t)s * D + j]);
            for (j = 0; j < D; j++) xr[j] *= scale;
        }
}

/* Backward of the embedding: token and position grads accumulate; the puzzle rows' grads go to
   prow [B, Dp] (consumed by sign-SGD). Single-threaded: the scatter-add is tiny. */
TR__FN void tr__embed_bwd(tr_model *m, const tr_carry *c, const float *dx, float *prow) {
    int b, s, j, D = m->D, S = m->S, Lp = m->Lp;
    float scale = sqrtf((float)D);
    float *gtok = TR__GRAD(m, m->W_tok), *gpos = m->W_pos ? TR__GRAD(m, m->W_pos) : NULL;
    for (b = 0; b < c->B; b++)
        for (s = 0; s < S; s++) {
            const float *d = dx + ((size_t)b * S + s) * D;
            float f = gpos ? scale * 0.707106781f : scale;
            if (gpos)
                for (j = 0; j < D; j++) gpos[(size_t)s * D + j] += f * d[j];
            if (s < Lp) {
                for (j = 0; j < D; j++) {
                    int k = s * D + j;
                    if (k < m->Dp && prow) prow[(size_t)b * m->Dp + k] = f * d[j];
                }
            } else {
                float *g = gtok + (size_t)c->inputs[(size_t)b * m->L + s - Lp] * D;
                for (j = 0; j < D; j++) g[j] += f * d[j];
            }
        }
}

TR__FN tr_status tr__heads_fwd(tr_model *m, tr_carry *c) {
    int b, j;
    size_t SD = (size_t)m->S * m->D;
    tr_status st;
    for (b = 0; b < c->B; b++) {
        const float *zh = c->z_H + b * SD;
        st = tr__sgemm(m->ctx, 0, 1, (size_t)m->L, (size_t)m->V, (size_t)m->D, zh + (size_t)m->Lp * m->D, (size_t)m->D, m->W_lm, (size_t)m->D,
                       c->logits + (size_t)b * m->L * m->V, (size_t)m->V, 0);
        if (st) return st;
        for (j = 0; j < 2; j++) c->q[2 * b + j] = m->b_q[j] + tr__dot(zh, m->W_q + (size_t)j * m->D, m->D);
    }
    return TR_OK;
}

/* Debug hook for the parity tests: called after each H cycle with (z_H, z_L). */
typedef void (*tr__cycle_hook)(void *user, int cycle, const float *z_H, const float *z_L);

/* One supervision step of TRM on the carry's current data. With grad, the last H cycle is
   recorded on the tape for tr__inner_bwd. The new (detached) carry replaces z_H / z_L. */
TR__FN tr_status tr__inner_fwd(tr_model *m, tr_carry *c, int grad, tr__cycle_hook hook, void *hook_user) {
    const tr__module *md = &m->modules[0];
    int B = c->B, T = m->cfg.H_cycles, n = m->cfg.L_cycles, t, i;
    size_t N = (size_t)B * m->S * m->D;
    tr_status st;
    if ((st = tr__reserve_ws(m, B)) != TR_OK) return st;
    if (grad && (st = tr__reserve_tape(m, B, n + 1)) != TR_OK) return st;
    tr__embed_fwd(m, c, c->x);
    for (t = 0; t < T; t++) {
        int rec = grad && t == T - 1;
        const float *zl = c->z_L;
        tr__add(m->ctx, N, c->z_H, c->x, c->inj); /* the injection is formed first */
        for (i = 0; i < n; i++) {
            if (rec) {
                if ((st = tr__net_fwd(m, md, B, zl, c->inj, NULL, &m->nets[i])) != TR_OK) return st;
                zl = m->nets[i].blocks[md->n_layers - 1].out;
            } else if ((st = tr__net_fwd(m, md, B, c->z_L, c->inj, c->z_L, NULL)) != TR_OK)
                return st;
        }
        if (rec) {
            memcpy(c->z_L, zl, N * sizeof(float));
            if ((st = tr__net_fwd(m, md, B, c->z_H, zl, NULL, &m->nets[n])) != TR_OK) return st;
            memcpy(c->z_H, m->nets[n].blocks[md->n_layers - 1].out, N * sizeof(float));
        } else if ((st = tr__net_fwd(m, md, B, c->z_H, c->z_L, c->z_H, NULL)) != TR_OK)
            return st;
        if (hook) hook(hook_user, t, c->z_H, c->z_L);
    }
    return tr__heads_fwd(m, c);
}

/* Backward of the recorded cycle: dzH [B,S,D] (the heads' gradient) -> dx. bufA, bufB scratch. */
TR__FN tr_status tr__inner_bwd(tr_model *m, tr_carry *c, const float *dzH, float *dx, float *bufA, float *bufB) {
    const tr__module *md = &m->modules[0];
    int n = m->cfg.L_cycles, i;
    size_t N = (size_t)c->B * m->S * m->D;
    tr_status st;
    float *dzl = bufA, *dh0 = bufB, *t;
    /* z_H' = f(z_H + z_L): the gradient reaches z_L (z_H came from no-grad cycles) */
    if ((st = tr__net_bwd(m, md, c->B, &m->nets[n], dzH, dzl)) != TR_OK) return st;
    memset(dx, 0, N * sizeof(float));
    for (i = n - 1; i >= 0; i--) {
        /* z_L' = f(z_L + (z_H + x)): the same gradient reaches z_L and x */
        if ((st = tr__net_bwd(m, md, c->B, &m->nets[i], dzl, dh0)) != TR_OK) return st;
        tr__add(m->ctx, N, dx, dh0, dx);
        t = dzl, dzl = dh0, dh0 = t;
    }
    return TR_OK;
}

/* Loss, halting target and metrics of the step. With dlogits != NULL, also the gradients of
   total / grad_div w.r.t. the logits and q_halt (dq, [B,2]). */
TR__FN void tr__loss(tr_model *m, const tr_carry *c, double grad_div, float *dlogits, float *dq, tr_metrics *mt) {
    int b, t, V = m->V, L = m->L;
    memset(mt, 0, sizeof *mt);
    for (b = 0; b < c->B; b++) {
        const int32_t *lab = c->labels + (size_t)b * L;
        int count = 0, correct = 0, seq_correct;
        double row_loss = 0, div, qh = c->q[2 * b], gq;
        for (t = 0; t < L; t++) count += lab[t] != -100;
        div = count > 0 ? count : 1;
        for (t = 0; t < L; t++) {
            const float *x = c->logits + ((size_t)b * L + t) * V;
            float *g = dlogits ? dlogits + ((size_t)b * L + t) * V : NULL;
            if (lab[t] == -100) {
                if (g) memset(g, 0, (size_t)V * sizeof(float));
                continue;
            }
            {
                int k, am = 0;
                for (k = 1; k < V; k++)
                    if (x[k] > x[am]) am = k;
                correct += am == lab[t];
            }
            row_loss += tr__xent_row(x, V, lab[t], m->cfg.loss_type, g, g ? 1.0 / (div * grad_div) : 0.0);
        }
        seq_correct = correct == count;
        mt->lm_loss += row_loss / div;
        mt->q_halt_loss += tr__bce_logits(qh, seq_correct ? 1.0 : 0.0, &gq);
        if (dq) {
            dq[2 * b] = (float)(0.5 * gq / grad_div);
            dq[2 * b + 1] = 0.0f;
        }
        if (c->halted[b] && count > 0) {
            mt->count += 1;
            mt->accuracy += correct / div;
            mt->exact_accuracy += seq_correct;
            mt->q_halt_accuracy += (qh >= 0) == seq_correct;
            mt->steps += c->steps[b];
        }
    }
    mt->loss = mt->lm_loss + 0.5 * (mt->q_halt_loss + mt->q_continue_loss);
}

/* ACT step 3: count the step and decide who halts. */
TR__FN void tr__update_halting(tr_model *m, tr_carry *c, int training, tr__rng *rng) {
    int b, M = m->cfg.halt_max_steps;
    for (b = 0; b < c->B; b++) {
        int h;
        c->steps[b] += 1;
        h = c->steps[b] >= M;
        if (training && M > 1) {
            double u = tr__rng_uniform_d(rng);
            int min_steps = 2 + (int)tr__rng_below(rng, (uint64_t)(M - 1)); /* uniform in 2..M */
            h = h || c->q[2 * b] > (m->cfg.no_ACT_continue ? 0.0f : c->q[2 * b + 1]);
            if (u < m->cfg.halt_exploration_prob) h = h && c->steps[b] >= min_steps;
        }
        c->halted[b] = h;
    }
}

/* Copies the step's outputs to o; with only_step > 0, only rows whose step count equals it
   (so that rows that halted earlier keep their answer during inference). */
TR__FN void tr__fill_outputs(tr_model *m, const tr_carry *c, tr_step_outputs *o, int only_step) {
    int b, t, k, L = m->L, V = m->V;
    if (!o) return;
    for (b = 0; b < c->B; b++) {
        if (only_step > 0 && c->steps[b] != only_step) continue;
        if (o->logits) memcpy(o->logits + (size_t)b * L * V, c->logits + (size_t)b * L * V, (size_t)L * V * sizeof(float));
        if (o->preds)
            for (t = 0; t < L; t++) {
                const float *x = c->logits + ((size_t)b * L + t) * V;
                int am = 0;
                for (k = 1; k < V; k++)
                    if (x[k] > x[am]) am = k;
                o->preds[(size_t)b * L + t] = am;
            }
        if (o->q_halt) o->q_halt[b] = c->q[2 * b];
        if (o->q_continue) o->q_continue[b] = c->q[2 * b + 1];
        if (o->halted) o->halted[b] = c->halted[b];
        if (o->steps) o->steps[b] = c->steps[b];
    }
}

TRDEF tr_status tr_model_eval_step(tr_model *m, tr_carry *c, const tr_batch *batch, tr_step_outputs *out, tr_metrics *metrics) {
    tr_status st;
    tr_metrics mt;
    if (!m || !c || c->m != m) return TR_ERR_INVALID_ARG;
    if ((st = tr__check_batch(m, batch, c->B)) != TR_OK) return st;
    tr__carry_refill(m, c, batch);
    if ((st = tr__inner_fwd(m, c, 0, NULL, NULL)) != TR_OK) return st;
    tr__update_halting(m, c, 0, NULL);
    tr__loss(m, c, 1.0, NULL, NULL, &mt);
    if (metrics) *metrics = mt;
    tr__fill_outputs(m, c, out, 0);
    return TR_OK;
}

TRDEF tr_status tr_model_infer(tr_model *m, tr_carry *c, const tr_batch *batch, int force_steps, tr_step_callback per_step, void *user, tr_step_outputs *out) {
    tr_status st;
    int step, b, maxs;
    if (!m || !c || c->m != m) return TR_ERR_INVALID_ARG;
    if ((st = tr__check_batch(m, batch, c->B)) != TR_OK) return st;
    tr_carry_reset(c);
    tr__carry_refill(m, c, batch);
    maxs = force_steps > 0 ? force_steps : m->cfg.halt_max_steps;
    for (b = 0; b < c->B; b++) c->halted[b] = 0;
    for (step = 1; step <= maxs; step++) {
        /* rows that halted keep their answer; the rest run one more supervision step */
        if ((st = tr__inner_fwd(m, c, 0, NULL, NULL)) != TR_OK) return st;
        for (b = 0; b < c->B; b++) {
            if (c->halted[b]) continue;
            c->steps[b] = step;
            c->halted[b] = step >= maxs || (force_steps <= 0 && c->q[2 * b] > 0.0f);
        }
        tr__fill_outputs(m, c, out, step);
        if (per_step) per_step(user, step, out);
        if (tr_carry_all_halted(c)) break;
    }
    return TR_OK;
}

/* >>optim */
TRDEF tr_train_config tr_train_config_default(void) {
    tr_train_config t;
    memset(&t, 0, sizeof t);
    t.lr = 1e-4;
    t.lr_min_ratio = 1.0;
    t.lr_warmup_steps = 2000;
    t.total_steps = 100000;
    t.weight_decay = 1.0;
    t.beta1 = 0.9;
    t.beta2 = 0.95;
    t.puzzle_emb_lr = 1e-4;
    t.puzzle_emb_weight_decay = 1.0;
    t.ema = 1;
    t.ema_decay = 0.999;
    t.global_batch_size = 768;
    return t;
}

/* Linear warmup, then cosine from base to base * lr_min_ratio (constant when the ratio is 1). */
TRDEF double tr_lr_schedule(const tr_train_config *tc, double base, long step) {
    double prog;
    if (step < tc->lr_warmup_steps) return base * (double)step / (double)TR__MAX(1, tc->lr_warmup_steps);
    prog = (double)(step - tc->lr_warmup_steps) / (double)TR__MAX(1, tc->total_steps - tc->lr_warmup_steps);
    return base * (tc->lr_min_ratio + TR__MAX(0.0, (1.0 - tc->lr_min_ratio) * 0.5 * (1.0 + cos(3.14159265358979323846 * prog))));
}

/* Sign-SGD for the puzzle table: grads of duplicate ids are summed, and only the touched rows
   decay. ids [B], prow [B, Dp]; order[] is B ints of scratch. */
TR__FN void tr__signsgd_rows(float *table, int Dp, const int32_t *ids, const float *prow, int B, int *order, float *sum, float lr, float wd) {
    int i, j, k;
    for (i = 0; i < B; i++) order[i] = i;
    for (i = 1; i < B; i++) { /* insertion sort by id, stable: B is a batch, ids repeat a lot */
        int v = order[i];
        for (j = i - 1; j >= 0 && ids[order[j]] > ids[v]; j--) order[j + 1] = order[j];
        order[j + 1] = v;
    }
    for (i = 0; i < B; i = j) {
        int32_t id = ids[order[i]];
        float *row = table + (size_t)id * Dp;
        for (k = 0; k < Dp; k++) sum[k] = 0;
        for (j = i; j < B && ids[order[j]] == id; j++)
            for (k = 0; k < Dp; k++) sum[k] += prow[(size_t)order[j] * Dp + k];
        for (k = 0; k < Dp; k++) {
            float sg = (float)((sum[k] > 0) - (sum[k] < 0));
            row[k] = row[k] * (1.0f - lr * wd) - lr * sg;
        }
    }
}

/* >>train */
struct tr_trainer {
    tr_model *m;
    tr_train_config tc;
    tr_carry *carry;
    float *adam_m, *adam_v, *ema;
    float *dz, *dx, *bufA, *bufB; /* [B,S,D] each */
    float *dlogits, *dq, *prow, *psum;
    int *order;
    long step;
    tr__rng rng;
};

TRDEF void tr_trainer_destroy(tr_trainer *t) {
    tr_ctx *ctx;
    if (!t) return;
    ctx = t->m->ctx;
    tr_carry_destroy(t->carry);
    tr__free(ctx, t->adam_m);
    tr__free(ctx, t->dz);
    tr__free(ctx, t->order);
    tr__free(ctx, t);
}

TRDEF tr_status tr_trainer_create(tr_model *m, const tr_train_config *tc, tr_trainer **out) {
    tr_trainer *t;
    tr_ctx *ctx;
    tr_status st;
    size_t P, N, nf;
    int B;
    if (!m || !tc || !out) return TR_ERR_INVALID_ARG;
    ctx = m->ctx;
    *out = NULL;
    B = tc->global_batch_size;
    if (B <= 0) return tr__err(ctx, TR_ERR_CONFIG, "train config: global_batch_size %d must be > 0", B);
    if (!(tc->lr >= 0) || !(tc->puzzle_emb_lr >= 0)) return tr__err(ctx, TR_ERR_CONFIG, "train config: lr and puzzle_emb_lr must be >= 0");
    if (!(tc->beta1 >= 0 && tc->beta1 < 1) || !(tc->beta2 >= 0 && tc->beta2 < 1))
        return tr__err(ctx, TR_ERR_CONFIG, "train config: beta1 %g / beta2 %g must be in [0, 1)", tc->beta1, tc->beta2);
    if (!(tc->ema_decay >= 0 && tc->ema_decay <= 1)) return tr__err(ctx, TR_ERR_CONFIG, "train config: ema_decay %g must be in [0, 1]", tc->ema_decay);
    if (tc->lr_warmup_steps < 0 || tc->total_steps < 0) return tr__err(ctx, TR_ERR_CONFIG, "train config: lr_warmup_steps and total_steps must be >= 0");
    t = (tr_trainer *)tr__calloc(ctx, 1, sizeof *t);
    if (!t) return TR_ERR_OUT_OF_MEMORY;
    t->m = m;
    t->tc = *tc;
    t->rng = tr__rng_make(ctx->seed, 7);
    P = m->n_params;
    N = (size_t)B * m->S * m->D;
    if ((st = tr_carry_create(m, B, &t->carry)) != TR_OK) goto fail;
    t->adam_m = (float *)tr__calloc(ctx, 3 * P, sizeof(float));
    if (!t->adam_m) goto oom;
    t->adam_v = t->adam_m + P;
    t->ema = t->adam_v + P;
    memcpy(t->ema, m->params, P * sizeof(float));
    nf = 4 * N + (size_t)B * m->L * m->V + 2 * (size_t)B + (size_t)B * TR__MAX(m->Dp, 1) + (size_t)TR__MAX(m->Dp, 1) + 64;
    t->dz = (float *)tr__calloc(ctx, nf, sizeof(float));
    t->order = t->dz ? (int *)tr__calloc(ctx, (size_t)B, sizeof(int)) : NULL;
    if (!t->order) goto oom;
    t->dx = t->dz + N;
    t->bufA = t->dx + N;
    t->bufB = t->bufA + N;
    t->dlogits = t->bufB + N;
    t->dq = t->dlogits + (size_t)B * m->L * m->V;
    t->prow = t->dq + 2 * (size_t)B;
    t->psum = t->prow + (size_t)B * TR__MAX(m->Dp, 1);
    *out = t;
    return TR_OK;
oom:
    st = TR_ERR_OUT_OF_MEMORY;
fail:
    tr_trainer_destroy(t);
    return st;
}

TRDEF long tr_trainer_step_count(const tr_trainer *t) { return t ? t->step : 0; }

/* The backward of the heads into dz ([B,S,D], overwritten). */
TR__FN tr_status tr__heads_bwd(tr_model *m, tr_carry *c, const float *dlogits, const float *dq, float *dz) {
    int b, j, k;
    size_t SD = (size_t)m->S * m->D;
    float *g_lm = TR__GRAD(m, m->W_lm), *g_q = TR__GRAD(m, m->W_q), *g_bq = TR__GRAD(m, m->b_q);
    tr_status st;
    memset(dz, 0, (size_t)c->B * SD * sizeof(float));
    for (b = 0; b < c->B; b++) {
        const float *dl = dlogits + (size_t)b * m->L * m->V, *zh = c->z_H + b * SD;
        float *dzb = dz + b * SD;
        if ((st = tr__sgemm(m->ctx, 0, 0, (size_t)m->L, (size_t)m->D, (size_t)m->V, dl, (size_t)m->V, m->W_lm, (size_t)m->D, dzb + (size_t)m->Lp * m->D, (size_t)m->D, 0)))
            return st;
        if ((st = tr__sgemm(m->ctx, 1, 0, (size_t)m->V, (size_t)m->D, (size_t)m->L, dl, (size_t)m->V, zh + (size_t)m->Lp * m->D, (size_t)m->D, g_lm, (size_t)m->D, 1)))
            return st;
        for (j = 0; j < 2; j++) {
            float g = dq[2 * b + j];
            if (g == 0.0f) continue;
            for (k = 0; k < m->D; k++) {
                dzb[k] += g * m->W_q[(size_t)j * m->D + k];
                g_q[(size_t)j * m->D + k] += g * zh[k];
            }
            g_bq[j] += g;
        }
    }
    return TR_OK;
}

/* Forward + backward of one training step; leaves the gradients in m->grads (and the puzzle
   rows' grads in t->prow). Separate from the update so tests can check gradients. */
TR__FN tr_status tr__train_fwd_bwd(tr_trainer *t, const tr_batch *batch, tr_metrics *metrics, tr__cycle_hook hook, void *hook_user) {
    tr_model *m = t->m;
    tr_carry *c = t->carry;
    tr_metrics mt;
    tr_status st;
    if ((st = tr__check_batch(m, batch, c->B)) != TR_OK) return st;
    if (!batch->labels) return tr__err(m->ctx, TR_ERR_INVALID_ARG, "batch: training needs labels");
    tr__carry_refill(m, c, batch);
    memset(m->grads, 0, m->n_params * sizeof(float));
    if ((st = tr__inner_fwd(m, c, 1, hook, hook_user)) != TR_OK) return st;
    tr__update_halting(m, c, 1, &t->rng);
    tr__loss(m, c, (double)t->tc.global_batch_size, t->dlogits, t->dq, &mt);
    if ((st = tr__heads_bwd(m, c, t->dlogits, t->dq, t->dz)) != TR_OK) return st;
    if ((st = tr__inner_bwd(m, c, t->dz, t->dx, t->bufA, t->bufB)) != TR_OK) return st;
    tr__embed_bwd(m, c, t->dx, t->prow);
    if (metrics) *metrics = mt;
    return TR_OK;
}

TR__FN void tr__optimizer_update(tr_trainer *t) {
    tr_model *m = t->m;
    const tr_train_config *tc = &t->tc;
    double lr, plr;
    float bc1, bc2;
    t->step++;
    lr = tr_lr_schedule(tc, tc->lr, t->step);
    plr = tr_lr_schedule(tc, tc->puzzle_emb_lr, t->step);
    bc1 = (float)(1.0 - pow(tc->beta1, (double)t->step));
    bc2 = (float)(1.0 - pow(tc->beta2, (double)t->step));
    tr__adam_atan2_ref(m->n_params, m->params, m->grads, t->adam_m, t->adam_v, (float)lr, (float)tc->weight_decay, (float)tc->beta1, (float)tc->beta2, bc1, bc2,
                       m->ctx->num_threads);
    if (m->Dp > 0)
        tr__signsgd_rows(m->puzzle_emb, m->Dp, t->carry->pids, t->prow, t->carry->B, t->order, t->psum, (float)plr, (float)tc->puzzle_emb_weight_decay);
    if (tc->ema) tr__ema_ref(m->n_params, t->ema, m->params, (float)tc->ema_decay, m->ctx->num_threads);
}

TRDEF tr_status tr_trainer_step(tr_trainer *t, const tr_batch *batch, tr_metrics *metrics) {
    tr_status st;
    if (!t || !batch) return TR_ERR_INVALID_ARG;
    if ((st = tr__train_fwd_bwd(t, batch, metrics, NULL, NULL)) != TR_OK) return st;
    tr__optimizer_update(t);
    return TR_OK;
}

TRDEF tr_status tr_trainer_swap_ema(tr_trainer *t) {
    size_t i;
    float *p;
    if (!t) return TR_ERR_INVALID_ARG;
    if (!t->tc.ema) return tr__err(t->m->ctx, TR_ERR_INVALID_ARG, "trainer: EMA is off");
    p = t->m->params;
    for (i = 0; i < t->m->n_params; i++) {
        float v = p[i];
        p[i] = t->ema[i];
        t->ema[i] = v;
    }
    return TR_OK;
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
