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
   with Tiny Networks") in both of its variants (mlp_t token mixing, RoPE attention), and the
   Hierarchical Reasoning Model (HRM: two modules, the 1-step gradient, Q-learned halting), on the CPU,
   with SIMD kernels chosen at run time (AVX-512, AVX2+FMA, scalar) and OpenMP threads, or on any
   OpenCL device (TINYREC_OPENCL; the library is loaded at run time) with the CPU as the fallback
   that loses no work. Its numerics follow the reference PyTorch code: the same initialisation, the same recursion and
   ACT carry, stablemax cross-entropy accumulated in fp64, AdamATan2, sign-SGD for the puzzle
   embedding, EMA and the warmup/cosine schedule; in float32, or in bfloat16 / float16 rounded at the
   reference's points (tr_model_config.forward_dtype, with float16's dynamic loss scaling). Around the model: the reference dataset layout
   (.npy, memory-mapped) with Sudoku / Maze / ARC builders and a prefetching sampler, and
   safetensors checkpoints with the reference tensor names and exact trainer-state resume.

   Sections (grep for ">>name")
     Declarations: api-base, api-device, api-model, api-train, api-config, api-util, api-json, api-io,
     api-data, api-checkpoint. Implementation, in file order:
       base        status and error text, allocator (fault injection, memory limit), log, RNG, half
                   floats, the CPU probe
       cpu         scalar reference kernels and their AVX2 / AVX-512 twins, chosen at run time
       sgemm       the packed SIMD GEMM
       opencl      the OpenCL backend (TINYREC_OPENCL): opencl-runtime (loader, devices, launches,
                   memory), opencl-ops and opencl-gemm (host wrappers and the embedded kernels)
       device      device selection and fallback, CPU info, OpenCL listing, self-test, batch advice
       model       TRM and HRM: parameter layout, initialisation, forward, backward, ACT
       optim       AdamATan2, sign-SGD, EMA, learning-rate schedule
       train       the trainer step: non-finite guard, device recovery
       config      presets and the key table of every config field
       json        JSON reader and writer, string builder, whole-file reads, atomic file writer
       io          safetensors reader and writer
       data        .npy, the dataset layout, puzzle readers, Sudoku / Maze / ARC builders, sampler
       checkpoint  model and trainer-state files
       metrics     metrics history (metrics.jsonl) and its SVG plot
   OpenCL C lives in .cl files, copied here between ">>cl-embed" markers by `make` (or
   `sh tools/cl_embed.sh tinyrec.h`); edit the files, not the copies:
       tools/opencl/ops.cl        elementwise, normalisation, embedding, loss and optimizer kernels
       tools/opencl/gemm.cl       SGEMM (register and cp.async paths), transpose
       tools/opencl/attention.cl  flash-style attention, forward and backward

   Quick start (see README.md for a complete program):
       tr_ctx *ctx;  tr_ctx_create(NULL, &ctx);
       tr_model_config cfg;  tr_model_config_preset(&cfg, "trm-sudoku-mlp");
       tr_model *m;  if (tr_model_create(ctx, &cfg, &m) != TR_OK) puts(tr_ctx_last_error(ctx));
       tr_train_config tc = tr_train_config_default();  tc.global_batch_size = 64;
       tr_trainer *t;  tr_trainer_create(m, &tc, &t);
       tr_batch b = {inputs, labels, puzzle_ids, 64};  tr_metrics mt;  tr_trainer_step(t, &b, &mt);
       tr_model_save(m, "model.safetensors", NULL);
       tr_trainer_destroy(t);  tr_model_destroy(m);  tr_ctx_destroy(ctx);

   Link with -lm; -fopenmp optional. Without OpenMP the parallel loops run on the library's own
   pthread pool, with the same results. POSIX systems: the pool and the data sampler's prefetch
   thread use pthreads (part of libc on current glibc; add -pthread elsewhere).

   Build flags (define before including)
       TINYREC_STATIC          all functions get static linkage (TRDEF = static)
       TRDEF                   override the linkage of public functions yourself
       TINYREC_NO_OPENMP       never use OpenMP, even when compiled with -fopenmp (the library's own
                               pthread pool runs the parallel loops then, as in any build without OpenMP)
       TINYREC_NO_SIMD         scalar kernels only (the reference path)
       TINYREC_OPENCL          1: the OpenCL backend. libOpenCL is opened with dlopen when the first
                               model is created (link -ldl on old glibc); no OpenCL headers needed
       TINYREC_OPENCL_LINKED   with TINYREC_OPENCL: call the linked OpenCL library (-lOpenCL) instead
       TINYREC_WS_TOKENS       batch rows x positions one block's working memory holds (default 65536):
                               a larger batch runs the recursion in equal slices of rows, so that this
                               scratch stays bounded and only the backward's tape grows with the batch

   Environment variables (read by tr_ctx_create and the example programs)
       TINYREC_NUM_THREADS     thread count (default: OpenMP's maximum, else the CPU count)
       TINYREC_SIMD            force a kernel set: scalar | avx2 | avx512 (x86-64) | neon (aarch64)
       TINYREC_DEVICE          auto | cpu | opencl | opencl:N | opencl:<name substring>
       TINYREC_FAULT           fault injection: no-library | no-platform | no-device | build |
                               oom@STEP[:ROWS] | enqueue@STEP[:N] | nan@STEP[:N] | enospc@N | erofs@N |
                               no-bf16 | no-half
                               (see tr_ctx_inject_fault)
       TINYREC_CPU_BF16        bfloat16 models' products on the CPU: 1 (default) AMX tiles, else vdpbf16ps, where the CPU has
                               them (AVX512_BF16); 0 always the fp32 kernels; 2 the scalar twin of vdpbf16ps on any CPU (for
                               tests); 3 vdpbf16ps also where AMX is
       TINYREC_TAPE16          1 (default): bfloat16 / float16 models record the activations of their last cycle (the tape
                               the backward reads) as 16-bit values, half the memory of fp32 for the same bits; 0: as fp32
       TINYREC_CL_SGEMM        OpenCL SGEMM tiles, e.g. "TM=128,TN=128,TK=16,WM=8,WN=8,VW=4" (CP=0: no cp.async, ST=2..4: its stages;
                               MMA=0: no tensor cores for bfloat16 / float16 models, MMA=2: their emulation, for tests)
       TINYREC_CL_OPTIONS      extra OpenCL build options
       TINYREC_CL_PROFILE      1: time every OpenCL kernel and transfer (logged when the context is destroyed)
       TINYREC_CL_ZEROCOPY     0: staged transfers also on host-unified OpenCL devices (default: zero-copy maps)

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
/* (macOS hides sysctlbyname's types under strict POSIX unless asked) */
#if defined(TINYREC_IMPLEMENTATION) && defined(__APPLE__) && !defined(_DARWIN_C_SOURCE)
#define _DARWIN_C_SOURCE 1
#endif

#include <stddef.h>
#include <stdio.h> /* FILE, for the JSON writer */
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
    TR_ERR_INTERRUPTED = -11, /* stopped on request */
    TR_ERR_NONFINITE = -12    /* training produced NaN or infinite losses or gradients too often */
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
    int num_threads;        /* <= 0: TINYREC_NUM_THREADS, else OpenMP's maximum, else the CPUs (macOS: performance cores) */
    uint64_t seed;          /* root of every random stream the context hands out */
    const char *simd;       /* NULL or "auto": best available; "scalar", "avx2", "avx512", "neon" force one */
    size_t memory_limit;    /* bytes of host memory a model, trainer, dataset or file read may need; one that
                               needs more is refused before anything is allocated, with the sizes in
                               the reason. 0: the machine's physical memory */
    const char *device;     /* NULL: TINYREC_DEVICE, else "auto". "auto" | "cpu" | "opencl" | "opencl:N" |
                               "opencl:<name substring>"; "auto" takes an OpenCL GPU when the build has
                               TINYREC_OPENCL and one is present, else the CPU. The device opens with the
                               first model; every choice and fallback is logged once, with the reason. */
} tr_ctx_config;

/* Fault injection for the device fallback paths (tests; env TINYREC_FAULT: "no-library",
   "no-platform", "no-device", "build", "oom@STEP[:ROWS]", "enqueue@STEP[:N]", "nan@STEP[:N]"). The open-time
   faults act when the device is opened; TR_FAULT_DEVICE_OOM makes device memory for more than
   `rows` batch rows fail from trainer step `at_step` on (1-based; rows 0 = always);
   TR_FAULT_ENQUEUE makes the rows-th device command (1-based; 0 = the first) of trainer step
   `at_step` fail. TR_FAULT_NONFINITE ("nan@STEP[:N]", any device) puts a NaN into a gradient of
   `rows` steps in a row (0 = 1) from trainer step `at_step` on. The disk faults act on the
   `at_step`-th file (1-based, counted from the injection) that the context writes atomically (model,
   trainer state, .npy, JSON and SVG files): TR_FAULT_IO_ENOSPC ("enospc@N") makes its first write fail
   with ENOSPC (a full disk), TR_FAULT_IO_EROFS ("erofs@N") the creation of its temporary file with
   EROFS (a read-only folder); either way the previous file stays as it was. "no-bf16" and "no-half" make
   the device report no bfloat16, or no bfloat16 and no float16, to models created from then on
   (tr_forward_dtype's fallback chain). */
typedef enum tr_fault {
    TR_FAULT_NONE = 0,
    TR_FAULT_NO_LIBRARY,
    TR_FAULT_NO_PLATFORM,
    TR_FAULT_NO_DEVICE,
    TR_FAULT_BUILD,
    TR_FAULT_DEVICE_OOM,
    TR_FAULT_ENQUEUE,
    TR_FAULT_NONFINITE,
    TR_FAULT_IO_ENOSPC,
    TR_FAULT_IO_EROFS,
    TR_FAULT_NO_BF16, /* "no-bf16": the device reports no bfloat16 (a bfloat16 model falls back to float16) */
    TR_FAULT_NO_HALF  /* "no-half": no bfloat16 and no float16 (a reduced-precision model falls back to float32) */
} tr_fault;

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
/* The memory limit in force (tr_ctx_config.memory_limit, or the machine's memory; 0 when unknown). */
TRDEF size_t tr_ctx_memory_limit(const tr_ctx *ctx);
/* The kernel set in use: "scalar", "avx2", "avx512" or "neon". */
TRDEF const char *tr_ctx_simd_name(const tr_ctx *ctx);
TRDEF tr_status tr_ctx_set_simd(tr_ctx *ctx, const char *name);
/* Fault injection: the n-th allocation from now (1-based) fails; n <= 0 turns it off. */
TRDEF void tr_ctx_fail_alloc_at(tr_ctx *ctx, long n);
/* Allocations made through the context so far, and those not yet freed (for leak checks). */
TRDEF long tr_ctx_alloc_count(const tr_ctx *ctx);
TRDEF long tr_ctx_live_allocs(const tr_ctx *ctx);
TRDEF void tr_ctx_inject_fault(tr_ctx *ctx, tr_fault fault, long at_step, int rows);
/* Chooses the device for models created from now on (see tr_ctx_config.device). */
TRDEF tr_status tr_ctx_set_device(tr_ctx *ctx, const char *selector);
/* Opens the selected device now (it otherwise opens with the first model) and returns 1 when
   work runs on an OpenCL device, 0 on the CPU. Never fails: an unusable device means the CPU. */
TRDEF int tr_ctx_use_device(tr_ctx *ctx);
/* "cpu (avx512, 2 threads)" or "opencl: <device> (<platform>)": where work runs now. */
TRDEF const char *tr_ctx_device_name(const tr_ctx *ctx);
/* >>api-base-end */

/* >>api-device */
/* What this machine offers: the CPU (features found at run time, the kernel sets it can run),
   the OpenCL devices the library can open, a short self-test of each against the reference path,
   and the batch sizes a model fits. tinyrec-devices prints these. */

/* ISA features. x86: each found by cpuid and enabled by the OS (xgetbv). aarch64: from the
   kernel's hwcaps (Linux) or sysctl hw.optional.* (macOS). The other architecture's are 0. */
typedef enum tr_cpu_feature {
    TR_CPU_SSE42, TR_CPU_AVX, TR_CPU_AVX2, TR_CPU_FMA, TR_CPU_AVX512F, TR_CPU_AVX512BW, TR_CPU_AVX512DQ, TR_CPU_AVX512VL,
    TR_CPU_AVX512_BF16, TR_CPU_AMX_TILE, TR_CPU_AMX_BF16, TR_CPU_AMX_INT8,
    TR_CPU_ASIMD, TR_CPU_ASIMDDP, TR_CPU_ARM_BF16, TR_CPU_I8MM, /* aarch64: NEON, dot product, BFDOT/BFMMLA, int8 matrix */
    TR_CPU_F16C, /* x86: fp16 <-> fp32 conversions (the avx2 and avx512 kernel sets require it) */
    TR_CPU_FEATURE_COUNT
} tr_cpu_feature;
/* "sse4.2", "avx", ..., "amx_int8" (Linux /proc/cpuinfo spelling); "" out of range. */
TRDEF const char *tr_cpu_feature_name(tr_cpu_feature f);

#define TR_KERNEL_SETS 4 /* "scalar", "avx2", "avx512", "neon": the names tr_ctx_set_simd takes */
typedef struct tr_cpu_info {
    char model[256];                            /* the model name, "unknown" if none is found */
    char arch[16];                              /* "x86_64", "x86", "aarch64" or "unknown" */
    int logical_cpus;
    int features[TR_CPU_FEATURE_COUNT];         /* 1: present (tr_cpu_feature order) */
    const char *kernel_sets[TR_KERNEL_SETS];    /* every kernel set of the library: scalar, the x86 ones narrowest first, neon */
    int kernel_set_ok[TR_KERNEL_SETS];          /* 1: this CPU (and build) can run it */
    const char *kernels;                        /* the set "auto" picks (tr_ctx_set_simd) */
    int threads;                                /* the context's thread count */
    double mem_total_mib, mem_available_mib;    /* < 0: unknown */
} tr_cpu_info;
TRDEF tr_status tr_cpu_info_get(tr_ctx *ctx, tr_cpu_info *out);

/* The OpenCL devices, through the library's run-time loader, in the order "opencl:N" counts them,
   and every platform (also one whose device query fails). Nothing is listed without
   TINYREC_OPENCL or without an OpenCL library; `note` says why. Strings are never NULL. */
typedef struct tr_opencl_platform {
    char name[256], vendor[256], version[256];
    const char *extensions;
    int device_error; /* clGetDeviceIDs' status when it failed (its devices have no selector), else 0 */
} tr_opencl_platform;
typedef struct tr_opencl_device {
    int index;    /* the N of "opencl:N" */
    int platform; /* index into tr_opencl_list.platforms */
    char name[256], vendor[256], version[256], driver[128];
    const char *type; /* "GPU", "CPU", "accelerator", "custom" or "other" */
    int is_gpu;
    const char *extensions;
    size_t global_mem, local_mem, max_alloc; /* bytes */
    unsigned compute_units, clock_mhz;
    int host_unified; /* the device works in host memory (integrated and Apple GPUs, PoCL): transfers are
                         zero-copy maps unless TINYREC_CL_ZEROCOPY=0 */
} tr_opencl_device;
typedef struct tr_opencl_list {
    int loaded;        /* the OpenCL library was found */
    char library[64];  /* its name */
    char note[256];    /* why nothing is listed, when nothing is */
    int num_platforms, num_devices;
    tr_opencl_platform *platforms;
    tr_opencl_device *devices;
    int auto_pick;   /* the device "auto" takes (the first GPU), -1: none (the CPU) */
    int opencl_pick; /* the device "opencl" takes (the first GPU, else device 0), -1: none */
} tr_opencl_list;
/* Fills *out (free it with tr_opencl_list_free). Finding no OpenCL is no error. */
TRDEF tr_status tr_opencl_list_devices(tr_ctx *ctx, tr_opencl_list *out);
TRDEF void tr_opencl_list_free(tr_ctx *ctx, tr_opencl_list *list);

/* Self-test: a tiny TRM (mlp_t and attention variants) from the same seed, a forward pass then
   TR_SELFTEST_STEPS training steps at batch TR_SELFTEST_BATCH, compared with a reference run.
   Measures: logits elementwise |x-ref|/(|ref|+rms(ref)); losses |x-ref|/|ref| per step;
   parameters after training ||x-ref||/||ref|| per tensor (normwise: AdamATan2 turns a gradient
   whose sign is rounding noise into a full step). */
#define TR_SELFTEST_BATCH 8
#define TR_SELFTEST_STEPS 3
#define TR_SELFTEST_TOL_LOGITS 1e-4 /* a CPU kernel set against the scalar path */
#define TR_SELFTEST_TOL_LOSS 1e-5
#define TR_SELFTEST_TOL_PARAMS 1e-4
#define TR_SELFTEST_TOL_OPENCL 1e-3 /* an OpenCL device against the CPU, all three measures */
typedef struct tr_selftest_tolerance {
    double logits, loss, params;
} tr_selftest_tolerance;
typedef struct tr_selftest_variant {
    const char *model; /* "mlp_t" or "attention" */
    double logits, loss, params; /* the measures above */
    int ok;
} tr_selftest_variant;
typedef struct tr_selftest_result {
    int pass;
    double max_diff;             /* the worst measure over both variants */
    tr_selftest_tolerance tol;   /* the tolerances used */
    tr_selftest_variant variant[2];
    int opened;                  /* an OpenCL device: it could be opened (else "auto" would use the CPU) */
    double seconds;              /* the tested runs, without the reference */
    char error[320];             /* why it failed when it did not get to compare */
} tr_selftest_result;
/* Runs the self-test on `device` ("cpu", or an OpenCL selector) with the CPU kernel set
   `kernels` (NULL: auto), on the context's thread count. The reference: the scalar CPU path for
   "cpu", the CPU with its best kernels for a device. tol NULL: TR_SELFTEST_TOL_* (OPENCL for a
   device). A failed test (including a device that cannot be opened or is left) is TR_OK with
   pass = 0; an error status means the test could not run (bad arguments, a kernel set this CPU
   lacks: TR_ERR_UNSUPPORTED, an OpenCL selector without TINYREC_OPENCL, memory). */
TRDEF tr_status tr_device_selftest(tr_ctx *ctx, const char *device, const char *kernels, const tr_selftest_tolerance *tol, tr_selftest_result *out);

/* Batch sizes for a model on a device with `memory_mib` MiB free (< 0: this machine's available
   memory, else half its total, else 1 GiB). Usable: that less 20% and at least 512 MiB. Training:
   the reference global batch (TR_REFERENCE_GLOBAL_BATCH) when it fits, else the largest
   multiple of 8 that does; inference: the largest power of two up to 1024 that fits (both 0 when
   not even one row fits). Sizes come from tr_model_memory of the model built on the CPU. */
#define TR_REFERENCE_GLOBAL_BATCH 768
struct tr_model_config; /* >>api-model */
typedef struct tr_batch_advice {
    double memory_mib, usable_mib;
    int train_fit, train; /* the largest batch that fits, the recommendation */
    int infer_fit, infer;
    double train_mib, infer_mib; /* memory at the recommendation */
    double train_mib_per_row, infer_mib_per_row;
} tr_batch_advice;
TRDEF tr_status tr_recommend_batch(tr_ctx *ctx, const struct tr_model_config *cfg, double memory_mib, tr_batch_advice *out);
/* >>api-device-end */

/* >>api-model */
typedef enum tr_arch { TR_ARCH_TRM = 0, TR_ARCH_HRM = 1 } tr_arch;
typedef enum tr_pos_encoding { TR_POS_NONE = 0, TR_POS_ROPE = 1, TR_POS_LEARNED = 2 } tr_pos_encoding;
typedef enum tr_loss_type { TR_LOSS_STABLEMAX = 0, TR_LOSS_SOFTMAX = 1 } tr_loss_type;
/* The forward (compute) precision, the reference's arch.forward_dtype. Master weights, gradients and
   optimizer state are fp32 in every case. With bfloat16 or float16 the model rounds, at the reference's
   points (reference-models.md 1.5), every activation, carry and matmul weight to that precision, and the
   backward rounds the activation gradients likewise; norms, RoPE and softmax statistics are computed in
   fp32 from the rounded values, every GEMM accumulates in fp32 and the losses in fp64. float16 training
   uses dynamic loss scaling (tr_metrics.loss_scale). bfloat16's products run natively on NVIDIA tensor
   cores (OpenCL) and on x86 CPUs with AMX or AVX512_BF16. AUTO picks the fastest precision the device
   computes natively (bfloat16 with tensor cores or AMX, else float32). A precision the device cannot compute falls back bf16 -> fp16 -> fp32; each choice
   is logged once with its reason, and tr_model_get_config shows the one in force (never AUTO). */
typedef enum tr_forward_dtype { TR_FWD_FLOAT32 = 0, TR_FWD_BFLOAT16 = 1, TR_FWD_FLOAT16 = 2, TR_FWD_AUTO = 3 } tr_forward_dtype;

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
    int H_layers, L_layers;     /* HRM: H_level's and L_level's blocks; TRM uses only L_layers (one shared module) */
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
    tr_forward_dtype forward_dtype; /* 0 = float32 (an all-zero config computes in fp32) */
} tr_model_config;

/* Fills cfg with the model of a preset (see tr_preset): "trm-sudoku-mlp", "trm-sudoku-att", "trm-maze",
   "trm-arc", "hrm-sudoku", "hrm-maze", "hrm-arc" (the reference configurations), "hrm-sudoku-tiny" and
   "trm-tiny" (small CPU configurations), or any tr_preset's name. */
TRDEF tr_status tr_model_config_preset(tr_model_config *cfg, const char *name);
/* The arch names of the presets (the nine above), NULL-terminated. */
TRDEF const char *const *tr_model_config_preset_names(void);
/* Checks every field; on failure the reason names the field. ctx may be NULL. */
TRDEF tr_status tr_model_config_validate(tr_ctx *ctx, const tr_model_config *cfg);
/* "float32", "bfloat16", "float16", "auto" (the reference's spelling); NULL for another value. */
TRDEF const char *tr_forward_dtype_name(tr_forward_dtype dtype);
/* The value a name spells: those four, or the short bf16 | fp16 | fp32 (any case); -1 when none. */
TRDEF int tr_forward_dtype_parse(const char *name);

typedef struct tr_model tr_model;

/* Creates a model with the reference initialisation, seeded from the context seed. */
TRDEF tr_status tr_model_create(tr_ctx *ctx, const tr_model_config *cfg, tr_model **out);
TRDEF void tr_model_destroy(tr_model *m);
TRDEF const tr_model_config *tr_model_get_config(const tr_model *m);
/* Dense trainable parameters (the reference's "#params"; excludes buffers). */
TRDEF size_t tr_model_num_params(const tr_model *m);
/* Changes the forward precision of a model (AUTO and the fallbacks resolve as at creation): a model
   trained in one precision runs or goes on training in another, since the master weights are fp32. */
TRDEF tr_status tr_model_set_forward_dtype(tr_model *m, tr_forward_dtype dtype);

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
/* On an OpenCL device the views are host copies, refreshed from the device by these calls;
   after writing through a view, call tr_model_commit_tensors (a no-op on the CPU). */
TRDEF tr_status tr_model_tensor(const tr_model *m, int index, tr_tensor_view *out);
TRDEF tr_status tr_model_find_tensor(const tr_model *m, const char *name, tr_tensor_view *out);
TRDEF tr_status tr_model_commit_tensors(tr_model *m);

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
    double skipped; /* tr_trainer_step: 1 when the loss or a gradient was NaN or infinite and no update was made */
    double loss_scale; /* tr_trainer_step in float16: the loss scale this step's gradients were computed with
                          (halved after a skipped step, doubled after loss_scale_window good ones); else 0 */
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
/* Inference: runs ACT steps until every row halts (q_halt > 0, or q_halt > q_continue when
   no_ACT_continue is off as in HRM, or halt_max_steps), or exactly
   `force_steps` steps when > 0. per_step (may be NULL) is called after each step. */
typedef void (*tr_step_callback)(void *user, int step, const tr_step_outputs *out);
TRDEF tr_status tr_model_infer(tr_model *m, tr_carry *c, const tr_batch *batch, int force_steps,
                               tr_step_callback per_step, void *user, tr_step_outputs *out);

/* >>api-train */
/* A communicator for data-parallel training: size processes (ranks) each train on their share of every
   global batch and keep identical weights. The library has no MPI in it; a program plugs one in
   (examples/tinyrec_mpi.h wraps MPI). Every callback is collective: all ranks call it in the same order
   with the same sizes, and it returns TR_OK or an error (never hangs forever: an implementation gives
   up after a timeout when a rank is gone). */
typedef struct tr_comm {
    int rank, size;  /* this rank in [0, size), and the number of ranks (>= 1) */
    int local_rank;  /* rank among those on this machine (programs pick the device by it) */
    int overlap;     /* 1: all-reduce each layer's gradients as soon as the backward has finished them, while
                        a device computes the rest (several all-reduces a step); 0: one all-reduce after the
                        backward. The same on every rank. The results are the same either way. */
    void *user;      /* passed to every callback */
    /* data[0..n) becomes the sum over ranks of every rank's data[0..n), on every rank */
    tr_status (*allreduce_sum)(void *user, float *data, size_t n);
    /* recv[r*bytes .. (r+1)*bytes) becomes rank r's send[0..bytes), on every rank */
    tr_status (*allgather)(void *user, const void *send, void *recv, size_t bytes);
    /* data[0..bytes) becomes rank root's data, on every rank */
    tr_status (*broadcast)(void *user, void *data, size_t bytes, int root);
    tr_status (*barrier)(void *user);
} tr_comm;

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
    int max_nonfinite_steps;   /* steps in a row whose loss or gradients are NaN/inf (each skipped) before
                                  tr_trainer_step fails with TR_ERR_NONFINITE (5; >= 1) */
    int loss_scale_window;     /* float16 models: the loss scale starts at 65536, halves at each step whose
                                  gradients overflow (skipped, counted in tr_metrics.skipped; these do not count
                                  toward max_nonfinite_steps while the scale is above 1) and doubles after this
                                  many good steps in a row (2000; >= 1), as torch.cuda.amp.GradScaler */
    const tr_comm *comm;       /* NULL: one process. Else data-parallel over comm->size ranks: each rank's
                                  batches have global_batch_size / size rows (its slice of the global batch,
                                  see tr_sampler_config.rank), its own ACT carry, and every step all-reduces
                                  the gradients, gathers the puzzle-embedding rows and reduces the metrics,
                                  so the update and the metrics are the same on every rank. Not a setting
                                  (no config key): it lives as long as the trainer. */
} tr_train_config;
TRDEF tr_train_config tr_train_config_default(void);
/* Checks every field (tr_trainer_create does too); the reason names the field by its key
   (tr_config_keys: "ema_rate" for ema_decay). ctx may be NULL. */
TRDEF tr_status tr_train_config_validate(tr_ctx *ctx, const tr_train_config *tc);

typedef struct tr_trainer tr_trainer;
TRDEF tr_status tr_trainer_create(tr_model *m, const tr_train_config *tc, tr_trainer **out);
TRDEF void tr_trainer_destroy(tr_trainer *t);
/* One training step: ACT carry update with the incoming batch (halted rows are refilled),
   forward (TRM: T-1 no-grad cycles and one with gradient; HRM: the 1-step gradient, then, when
   no_ACT_continue is off, a second no-grad step for q_continue's Q-learning target), loss,
   backward, AdamATan2 on the dense parameters, sign-SGD on the puzzle embedding, EMA.
   batch->batch_size must equal global_batch_size (divided by comm->size with a communicator; every
   rank then calls it, and the metrics are those of the global batch). metrics may be NULL. */
TRDEF tr_status tr_trainer_step(tr_trainer *t, const tr_batch *batch, tr_metrics *metrics);
TRDEF long tr_trainer_step_count(const tr_trainer *t);
/* The learning rate of step s (1-based) for a base rate, per the reference schedule. */
TRDEF double tr_lr_schedule(const tr_train_config *tc, double base_lr, long step);
/* Copies the EMA weights into the model (for evaluation / saving) or swaps them back. */
TRDEF tr_status tr_trainer_swap_ema(tr_trainer *t);
/* Marks every row of the trainer's ACT carry halted: the next step starts fresh rows. */
TRDEF void tr_trainer_reset_carry(tr_trainer *t);

/* >>api-config */
/* Settings by name. Every field of tr_model_config and tr_train_config has a key with the reference's
   name ("arch.hidden_size", "arch.loss.loss_type", "lr", "ema_rate", "global_batch_size", ...), a type
   and a help line; a program describes its own settings with the same records and parses and formats
   them with the same two functions, so every command line and settings file reads values one way. */
typedef enum tr_key_type {
    TR_KEY_INT,          /* int, decimal */
    TR_KEY_LONG,         /* long, decimal */
    TR_KEY_U64,          /* unsigned long long, decimal, no sign */
    TR_KEY_DOUBLE,       /* double, finite */
    TR_KEY_BOOL,         /* int 0/1: true|false|1|0|yes|no|on|off (any case) */
    TR_KEY_STRING,       /* char[size], not empty */
    TR_KEY_ARCH,         /* tr_arch: trm | hrm */
    TR_KEY_POS_ENCODING, /* tr_pos_encoding: rope | learned | none (any case) */
    TR_KEY_LOSS_TYPE,    /* tr_loss_type: stablemax_cross_entropy | softmax_cross_entropy (or stablemax | softmax) */
    TR_KEY_DTYPE         /* tr_forward_dtype: float32 | bfloat16 | float16 | auto (the reference's forward_dtype; any case) */
} tr_key_type;

/* Which struct a key's offset is into: the library's two, or (from TR_KEY_IN_USER on) a program's own. */
enum { TR_KEY_IN_MODEL = 0, TR_KEY_IN_TRAIN = 1, TR_KEY_IN_USER = 2 };
/* A key a program sets itself rather than offering it to users: the sizes and puzzle count come from
   the dataset, total_steps from the run length; arch.name comes with the preset. */
#define TR_KEY_DERIVED 1u

typedef struct tr_key {
    const char *name;
    tr_key_type type;
    int in;          /* TR_KEY_IN_MODEL, TR_KEY_IN_TRAIN or a program's TR_KEY_IN_USER + n */
    size_t offset;   /* of the field in that struct */
    size_t size;     /* TR_KEY_STRING: the char array's size */
    unsigned flags;  /* TR_KEY_DERIVED */
    const char *help;
} tr_key;

/* The library's keys (every field of tr_model_config, then of tr_train_config); count may be NULL. */
TRDEF const tr_key *tr_config_keys(int *count);
/* The library's key of that name, or NULL. */
TRDEF const tr_key *tr_config_find_key(const char *name);
/* Sets the field of `key` in the struct at `base` from text. A bad value is TR_ERR_INVALID_ARG with a
   reason naming the key and the expected form ("bad value 'fast' for key 'lr': expected a number");
   the field is left as it was. ctx may be NULL (no reason then). */
TRDEF tr_status tr_key_parse(tr_ctx *ctx, const tr_key *key, void *base, const char *value);
/* Writes the field as text that tr_key_parse reads back to the same value (doubles with 17 digits).
   TR_ERR_OVERFLOW when cap is too small (buf then holds a truncated, terminated string). */
TRDEF tr_status tr_key_format(const tr_key *key, const void *base, char *buf, size_t cap);
/* Sets a library key by name in model or train (the one it belongs to may not be NULL): TR_ERR_NOT_FOUND
   with "unknown key 'x'" for a name that is none, else as tr_key_parse. */
TRDEF tr_status tr_config_set(tr_ctx *ctx, tr_model_config *model, tr_train_config *train, const char *key, const char *value);

/* Presets: one table of named starting points, each a complete model config, a training recipe and
   the dataset it is for. The reference configurations (trm-sudoku-mlp, trm-sudoku-att, trm-maze,
   trm-arc) carry the reference recipe; the small CPU ones (sudoku-tiny, sudoku-small, maze-tiny, tiny)
   one for minutes of training. tr_model_config_preset takes a preset's name or its arch name (the
   model part alone: "trm-tiny" is the model of "tiny"). */
typedef struct tr_preset {
    const char *name;
    const char *arch;        /* the name of its model part for tr_model_config_preset; NULL: none of its own */
    const char *task;        /* "sudoku", "maze", "arc"; NULL: any dataset */
    const char *help;
    int data_vocab_size;     /* what the dataset must have; 0 = any (the model's are then placeholders) */
    int data_seq_len;
    tr_model_config model;   /* vocab_size, seq_len, num_puzzle_identifiers: replace them with the dataset's */
    tr_train_config train;   /* total_steps: set it from the run length */
    long epochs;             /* the run: epochs, and epochs between evaluations (divides epochs) */
    long eval_interval;
} tr_preset;
TRDEF int tr_preset_count(void);
/* The index-th preset (0-based), in the order programs list them; TR_ERR_NOT_FOUND past the end. */
TRDEF tr_status tr_preset_get(int index, tr_preset *out);
/* The preset with that name (not an arch name); TR_ERR_NOT_FOUND if none. */
TRDEF tr_status tr_preset_find(const char *name, tr_preset *out);

/* A run's metrics history, as tinyrec-train's metrics.jsonl holds it, and a plot of it. */
typedef struct tr_metrics_point {
    long step;
    double loss, accuracy, exact_accuracy; /* NAN when absent */
} tr_metrics_point;
typedef struct tr_metrics_history {
    tr_metrics_point *train, *eval; /* from the context's allocator; zero the struct to start */
    size_t ntrain, neval, cap_train, cap_eval;
} tr_metrics_history;
/* Appends a point to the train series, or the eval series when is_eval. */
TRDEF tr_status tr_metrics_history_add(tr_ctx *ctx, tr_metrics_history *h, int is_eval, const tr_metrics_point *p);
TRDEF void tr_metrics_history_free(tr_ctx *ctx, tr_metrics_history *h);
/* Appends the points of a JSONL file (an object per line with "step", "loss", "accuracy",
   "exact_accuracy"; "type":"eval" lines are eval points) with step <= max_step; lines that are not
   such objects are skipped. With rewrite, the file is replaced (atomically) by the lines kept: a
   resumed run forgets what came after its checkpoint. A file that does not exist holds no points. */
TRDEF tr_status tr_metrics_history_load(tr_ctx *ctx, const char *path, long max_step, int rewrite, tr_metrics_history *h);
/* Writes (atomically) an SVG plot of the history: the train loss (log scale when it spans more than
   20x) and, below, accuracy and exact accuracy per step (lines: train; dots: eval). */
TRDEF tr_status tr_metrics_plot_svg(tr_ctx *ctx, const char *path, const char *title, const tr_metrics_history *h);
/* >>api-config-end */

/* >>api-util */
/* Seconds from a monotonic clock (for progress reports and benchmarks). */
TRDEF double tr_time_seconds(void);
/* Matmul FLOPs (2 per multiply-add) of one sample: a training step (the T-1 no-grad cycles, the
   last cycle forward and backward, the heads) and one inference supervision step. */
TRDEF void tr_model_flops(const tr_model *m, double *train_step, double *infer_step);
/* Bytes a trainer at this batch size needs on the CPU (parameters, gradients, optimizer moments,
   EMA, the recorded last cycle, workspaces, carry), and what inference needs; for choosing a
   batch size that fits in memory. */
TRDEF void tr_model_memory(const tr_model *m, int batch_size, size_t *train_bytes, size_t *infer_bytes);
/* C[M,N] = (accumulate ? C : 0) + op(A) . op(B), row-major fp32, op = transpose when trans* = 1
   (A stored [K,M], B stored [N,K]); the library's packed SIMD GEMM on the context's threads. */
TRDEF tr_status tr_sgemm(tr_ctx *ctx, int transA, int transB, size_t M, size_t N, size_t K, const float *A, size_t lda, const float *B, size_t ldb,
                         float *C, size_t ldc, int accumulate);

/* >>api-json */
/* A strict RFC 8259 reader (the one every file format of the library goes through) and a writer of
   JSON strings and numbers. The tree's nodes, strings and keys come from the context's allocator. */
typedef enum tr_json_type { TR_JSON_NULL, TR_JSON_BOOL, TR_JSON_NUMBER, TR_JSON_STRING, TR_JSON_ARRAY, TR_JSON_OBJECT } tr_json_type;
typedef struct tr_json {
    tr_json_type type;
    int boolean;
    double number;
    char *string; /* STRING: unescaped UTF-8, NUL-terminated */
    size_t len;
    struct tr_json *items; /* ARRAY: items[count]; OBJECT: keys[count] + items[count] */
    char **keys;
    size_t count;
    int64_t line;          /* the 1-based line where the value starts, for error texts */
} tr_json;

#define TR_JSON_MAX_DEPTH 64
/* Parses text[0..len) into a tree. Strict: depth limit TR_JSON_MAX_DEPTH, duplicate object keys,
   NaN/Infinity, trailing garbage, control characters in strings and invalid UTF-8 are rejected
   with TR_ERR_FORMAT and a reason that names `what` (NULL: "JSON") and the byte offset. */
TRDEF tr_status tr_json_parse(tr_ctx *ctx, const char *text, size_t len, const char *what, tr_json **out);
TRDEF void tr_json_free(tr_ctx *ctx, tr_json *root);
/* The member `key` of an object; NULL if absent or obj is not an object. */
TRDEF const tr_json *tr_json_get(const tr_json *obj, const char *key);
TRDEF const char *tr_json_type_name(tr_json_type type); /* "null", "boolean", "number", ... */
/* Writes s as a quoted JSON string: UTF-8 passes through, '"', '\\' and control characters are
   escaped. Returns 0, or EOF on a write error. */
TRDEF int tr_json_fput_string(FILE *f, const char *s);
/* Writes a number so that it reads back as the same double ("null" for NaN and infinities, which
   JSON cannot hold). Returns 0, or EOF on a write error. */
TRDEF int tr_json_fput_number(FILE *f, double v);
/* >>api-json-end */

/* >>api-io */
/* Tensor element types a safetensors file may hold (anything else is rejected on open). */
typedef enum tr_dtype { TR_F32, TR_BF16, TR_F16, TR_I32, TR_I64, TR_U8, TR_BOOL } tr_dtype;

#define TR_ST_MAX_DIMS 8
#define TR_ST_MAX_HEADER 100000000u /* bytes; the reference implementation's cap */

/* One tensor. For tensors from tr_st_open* every pointer points into the file object and lives
   until tr_st_close. For tr_st_write the caller fills name, dtype, ndim, shape, data (little-endian
   bytes, row-major) and nbytes; `source` is ignored. */
typedef struct tr_st_tensor {
    const char *name;
    tr_dtype dtype;
    int ndim;                        /* 0..TR_ST_MAX_DIMS; 0 is a scalar */
    int64_t shape[TR_ST_MAX_DIMS];
    const void *data;                /* not necessarily aligned */
    size_t nbytes;
    const char *source;              /* the file it was read from (for error texts), or NULL */
} tr_st_tensor;

/* An opened file. It owns the bytes (tr_st_open reads the whole file), or borrows them
   (tr_st_open_memory: they must stay valid until tr_st_close). */
typedef struct tr_st_file tr_st_file;

TRDEF const char *tr_dtype_name(tr_dtype dtype);  /* "F32", "BF16", ... */
TRDEF size_t tr_dtype_size(tr_dtype dtype);       /* bytes per element */
/* Number of elements (1 for a scalar); 0 also when the product would overflow. */
TRDEF size_t tr_st_numel(const tr_st_tensor *t);

/* Opens and fully validates a file: any inconsistency is TR_ERR_FORMAT with the file and the
   tensor or field named in tr_ctx_last_error. */
TRDEF tr_status tr_st_open(tr_ctx *ctx, const char *path, tr_st_file **out);
/* The same for bytes in memory; `what` names them in error texts (NULL: "<memory>"). */
TRDEF tr_status tr_st_open_memory(tr_ctx *ctx, const void *bytes, size_t len, const char *what, tr_st_file **out);
TRDEF void tr_st_close(tr_st_file *f);
/* Tensors in header order. */
TRDEF size_t tr_st_count(const tr_st_file *f);
TRDEF const tr_st_tensor *tr_st_at(const tr_st_file *f, size_t i);
/* NULL if there is no tensor of that name. */
TRDEF const tr_st_tensor *tr_st_find(const tr_st_file *f, const char *name);
/* Looks a tensor up for a model loader: `name`, or failing that "_orig_mod." + name (checkpoints
   saved from torch.compile'd modules). TR_ERR_NOT_FOUND "missing tensor" if neither exists;
   TR_ERR_FORMAT if shape is given (ndim entries) and differs. Errors name the file and tensor. */
TRDEF tr_status tr_st_get(tr_ctx *ctx, const tr_st_file *f, const char *name, int ndim, const int64_t *shape, const tr_st_tensor **out);
/* The __metadata__ value of key, or NULL if absent. */
TRDEF const char *tr_st_metadata(const tr_st_file *f, const char *key);
TRDEF size_t tr_st_metadata_count(const tr_st_file *f);
TRDEF const char *tr_st_metadata_key(const tr_st_file *f, size_t i);
/* Converts an F32, BF16 or F16 tensor to f32; count must equal the element count. */
TRDEF tr_status tr_st_read_f32(tr_ctx *ctx, const tr_st_tensor *t, float *dst, size_t count);
/* Converts an I32, I64, U8 or BOOL tensor to int64; count must equal the element count. */
TRDEF tr_status tr_st_read_i64(tr_ctx *ctx, const tr_st_tensor *t, int64_t *dst, size_t count);
/* Writes the tensors in the given order (header padded with spaces to a multiple of 8), with an
   optional string->string __metadata__. Atomic: the file is written to `<path>.tmp.<pid>`, synced
   and renamed over path; on failure the previous file is left intact and TR_ERR_IO is returned. */
TRDEF tr_status tr_st_write(tr_ctx *ctx, const char *path, const tr_st_tensor *tensors, size_t n,
                            const char *const *meta_keys, const char *const *meta_values, size_t n_meta);
/* >>api-io-end */

/* >>api-data */

/* Progress reports from the long-running builders: `stage` names the step ("sudoku: augment"),
   done/total count its units. Return non-zero to stop: the call then fails with
   TR_ERR_INTERRUPTED. May be NULL. Called from the calling thread only. */
typedef int (*tr_progress_fn)(void *user, const char *stage, int64_t done, int64_t total);

/* ---- .npy files ------------------------------------------------------------------------------
   Format versions 1.0, 2.0 and 3.0; little-endian uint8 ('|u1', '<u1', 'u1'), int32 ('<i4') and
   int64 ('<i8') in C order (a 1-D array may say fortran_order True). Anything else is refused
   with TR_ERR_FORMAT / TR_ERR_UNSUPPORTED and a reason that names the file and the header field. */
typedef enum tr_npy_dtype { TR_NPY_U8 = 1, TR_NPY_I32 = 2, TR_NPY_I64 = 3 } tr_npy_dtype;
#define TR_NPY_MAX_DIMS 8

typedef struct tr_npy {
    tr_npy_dtype dtype;
    int ndim;
    int64_t shape[TR_NPY_MAX_DIMS];
    size_t count;       /* elements: the product of shape */
    size_t itemsize;    /* 1, 4 or 8 */
    const void *data;   /* count * itemsize bytes (may be unaligned for files not written by numpy) */
    int version;        /* format major version: 1, 2 or 3 */
    size_t data_offset; /* bytes before the data in the file */
    /* private */
    void *map_;
    size_t map_len_;
    void *buf_;
} tr_npy;

/* Parses a whole .npy file held in memory; out->data points into `bytes` (nothing is copied). */
TRDEF tr_status tr_npy_parse(tr_ctx *ctx, const void *bytes, size_t len, const char *what, tr_npy *out);
/* Opens a file: memory-mapped when use_mmap (POSIX), else read into memory. Close with tr_npy_close. */
TRDEF tr_status tr_npy_load(tr_ctx *ctx, const char *path, int use_mmap, tr_npy *out);
TRDEF void tr_npy_close(tr_ctx *ctx, tr_npy *a);
/* Element i (flat, C order) as int64. */
TRDEF int64_t tr_npy_get(const tr_npy *a, size_t i);
/* Writes an array exactly as numpy.save would (same header bytes), replacing `path` atomically. */
TRDEF tr_status tr_npy_save(tr_ctx *ctx, const char *path, tr_npy_dtype dtype, int ndim, const int64_t *shape, const void *data);

/* ---- the reference dataset layout -----------------------------------------------------------
   <dir>/<split>/dataset.json, <dir>/<split>/<set>__{inputs,labels,puzzle_identifiers,
   puzzle_indices,group_indices}.npy and <dir>/identifiers.json. */
#define TR_DATASET_MAX_SETS 8
#define TR_IGNORE_LABEL (-100)

typedef struct tr_dataset_meta {
    int pad_id;
    int ignore_label_id;       /* meaningful only when has_ignore_label_id */
    int has_ignore_label_id;   /* 0: dataset.json says null (no label is ignored) */
    int blank_identifier_id;
    int vocab_size;
    int seq_len;
    int64_t num_puzzle_identifiers;
    int64_t total_groups;
    double mean_puzzle_examples;
    int64_t total_puzzles;     /* -1 when absent (HRM's files do not have it) */
    int num_sets;
    char sets[TR_DATASET_MAX_SETS][64];
} tr_dataset_meta;

typedef struct tr_dataset_set {
    char name[64];
    int64_t num_examples, num_puzzles, num_groups;
    tr_npy inputs, labels;              /* [num_examples, seq_len] token ids, memory-mapped */
    const int64_t *puzzle_indices;      /* [num_puzzles + 1] example offsets */
    const int64_t *group_indices;       /* [num_groups + 1] puzzle offsets */
    const int32_t *puzzle_identifiers;  /* [num_puzzles] */
    int64_t max_puzzle_examples;
} tr_dataset_set;

typedef struct tr_dataset {
    tr_ctx *ctx;
    tr_dataset_meta meta;
    int num_sets;
    tr_dataset_set sets[TR_DATASET_MAX_SETS];
    int64_t num_identifiers;   /* entries of identifiers.json; 0 when the file is absent */
    char **identifiers;        /* identifiers[id] = name, or NULL when absent */
    int64_t num_examples;      /* over all sets */
} tr_dataset;

enum {
    TR_DATASET_NO_MMAP = 1,         /* read the arrays into memory instead of mapping them */
    TR_DATASET_SKIP_TOKEN_CHECK = 2 /* do not scan every token against the vocabulary */
};

/* Opens and validates <dir>/<split> ("train" or "test"): every field of dataset.json, every array's
   dtype and shape, monotone offsets, ids and tokens in range. Errors name the file and field. */
TRDEF tr_status tr_dataset_open(tr_ctx *ctx, const char *dir, const char *split, int flags, tr_dataset **out);
TRDEF void tr_dataset_close(tr_dataset *ds);
/* Example `ex` of set `set` as int32; labels equal to ignore_label_id become TR_IGNORE_LABEL (-100).
   Either output may be NULL. */
TRDEF void tr_dataset_example(const tr_dataset *ds, int set, int64_t ex, int32_t *inputs, int32_t *labels);
TRDEF tr_status tr_dataset_read_meta(tr_ctx *ctx, const char *path, tr_dataset_meta *out);
TRDEF tr_dataset_meta tr_dataset_meta_default(void);

/* A split under construction, in memory (set "all"): add examples, close puzzles and groups. */
typedef struct tr_split {
    int seq_len;
    int64_t num_examples, num_puzzles, num_groups;
    uint8_t *inputs, *labels;      /* [num_examples * seq_len] */
    int32_t *puzzle_identifiers;   /* [num_puzzles] */
    int32_t *puzzle_indices;       /* [num_puzzles + 1] */
    int32_t *group_indices;        /* [num_groups + 1] */
    int64_t cap_examples_, cap_puzzles_, cap_groups_;
} tr_split;

TRDEF tr_status tr_split_init(tr_ctx *ctx, tr_split *s, int seq_len, int64_t reserve_examples);
TRDEF void tr_split_free(tr_ctx *ctx, tr_split *s);
TRDEF tr_status tr_split_add_example(tr_ctx *ctx, tr_split *s, const uint8_t *input, const uint8_t *label);
TRDEF tr_status tr_split_end_puzzle(tr_ctx *ctx, tr_split *s, int32_t identifier);
TRDEF tr_status tr_split_end_group(tr_ctx *ctx, tr_split *s);
/* Writes <dir>/<split>/dataset.json and the five all__*.npy files. meta gives pad/ignore/blank ids,
   vocab_size, num_puzzle_identifiers and total_puzzles (< 0: the puzzle count; the reference's
   Sudoku and Maze builders write the group count); seq_len, total_groups and
   mean_puzzle_examples come from s. */
TRDEF tr_status tr_split_write(tr_ctx *ctx, const char *dir, const char *split, const tr_split *s, const tr_dataset_meta *meta);
/* Writes <dir>/identifiers.json: a JSON list of n names. */
TRDEF tr_status tr_write_identifiers(tr_ctx *ctx, const char *dir, int64_t n, const char *const *names);

/* What a builder wrote. */
typedef struct tr_build_summary {
    int64_t examples[2], puzzles[2], groups[2]; /* [0] train, [1] test */
    int64_t num_identifiers;
    int64_t rejected;    /* input records dropped (e.g. below min_difficulty) */
    double seconds;
} tr_build_summary;

/* A whole file into memory: *data is NUL-terminated (the NUL not counted in *len) and comes from
   the context's allocator (free it with tr_free). path "-" reads standard input. Errors name the file. */
TRDEF tr_status tr_read_file(tr_ctx *ctx, const char *path, char **data, size_t *len);
/* Frees memory that the library handed over (tr_read_file's data); NULL is ignored. */
TRDEF void tr_free(tr_ctx *ctx, void *p);

/* ---- puzzle readers ---------------------------------------------------------------------------
   One reader per format (Sudoku lines/CSV, Maze text, ARC task JSON), used by the builders and by
   the programs. A malformed record is "what:line: reason" (TR_ERR_FORMAT), unless on_skip is set:
   then the reader reports it there and goes on with the next record. */
typedef void (*tr_skip_fn)(void *user, int64_t line, const char *reason);
typedef struct tr_read_options {
    int min_rating;      /* Sudoku: drop puzzles rated below this (counted as rejected); < 0 keeps all */
    int puzzles_only;    /* 1: only the puzzles matter (tinyrec-solve): solutions in the input are
                            ignored and any solution will do; 0: each puzzle needs exactly one */
    int side;            /* Maze: the side n, which also admits mazes written as n rows of n
                            characters; 0: taken from the first maze (single-line records only) */
    tr_skip_fn on_skip;  /* NULL: the first malformed record fails the call */
    void *user;
} tr_read_options;
TRDEF tr_read_options tr_read_options_default(void); /* min_rating -1, the rest 0 */

/* ---- Sudoku ---------------------------------------------------------------------------------
   Grids are 81 bytes, row-major, 0 = blank, 1..9 = digits. Tokens on disk: 0 pad, 1 blank,
   2..10 digits 1..9 (V = 11, L = 81), one example per puzzle, identifier 0. */
/* Counts solutions up to `limit` (<= 2 is what uniqueness needs); the first one goes to solution
   (may be NULL). Returns -1 when the givens already clash. */
TRDEF int tr_sudoku_solve(const uint8_t grid[81], uint8_t solution[81], int limit);
/* 1 when s is a complete, valid grid that agrees with every given of q (q may be NULL). */
TRDEF int tr_sudoku_check(const uint8_t q[81], const uint8_t s[81]);
/* A random puzzle with a unique solution and exactly `clues` givens (17..81), from the stream (seed, index).
   Speed on one core: 30 givens ~6k/s, 25 ~1.2k/s, 22 ~50/s, 20 ~0.5/s; below 20 it may take minutes. */
TRDEF tr_status tr_sudoku_generate(tr_ctx *ctx, uint64_t seed, uint64_t index, int clues, uint8_t puzzle[81], uint8_t solution[81]);
/* The reference augmentation (digit permutation, transpose, band/row and stack/column shuffles),
   drawn from the stream (seed, index); the same map is applied to the puzzle and the solution. */
TRDEF void tr_sudoku_augment(uint64_t seed, uint64_t index, const uint8_t q[81], const uint8_t a[81], uint8_t q_out[81], uint8_t a_out[81]);

/* The parse's parallel solve: need[k] stays 1 for a puzzle that fails its verdict. */
typedef struct tr_sudoku_set {
    int64_t count;
    uint8_t *puzzles;   /* [count * 81] */
    uint8_t *solutions; /* [count * 81] */
    int32_t *ratings;   /* [count], -1 when the source has none */
    int64_t *lines;     /* [count] the source line of each puzzle; NULL for generated sets */
} tr_sudoku_set;
/* Reads the reference CSV (header source,question,answer,rating) or plain lines that hold an
   81-character puzzle ('.' or '0' blank), optionally followed by a separator and its solution
   (blank lines and, outside CSV, lines starting with '#' are skipped). Missing solutions are found
   by the solver; puzzles with no or several solutions, or a given solution that is wrong, fail
   with "path:line: reason". min_rating < 0 keeps all. tr_sudoku_parse with default options. */
TRDEF tr_status tr_sudoku_read(tr_ctx *ctx, const char *path, int min_rating, tr_sudoku_set *out, int64_t *rejected);
/* The same reader on text[0..len) (`what` names it in error texts), with options: puzzles_only
   keeps puzzles with any solution (the first one found goes to solutions) and ignores what follows
   the 81 cells; on_skip reports and skips malformed records (an empty result is then no error).
   out->lines[i] is the line of puzzle i. */
TRDEF tr_status tr_sudoku_parse(tr_ctx *ctx, const char *text, size_t len, const char *what, const tr_read_options *o, tr_sudoku_set *out, int64_t *rejected);
TRDEF tr_status tr_sudoku_generate_set(tr_ctx *ctx, uint64_t seed, int64_t count, int clues, tr_progress_fn progress, void *user, tr_sudoku_set *out);
TRDEF void tr_sudoku_set_free(tr_ctx *ctx, tr_sudoku_set *s);

typedef struct tr_sudoku_options {
    const char *train_path, *test_path; /* CSV or plain text; NULL: generate */
    int64_t generate_train, generate_test; /* puzzles to generate when a path is NULL */
    int clues;                           /* givens of generated puzzles */
    int64_t subsample_size;              /* train only; <= 0: all */
    int min_difficulty;                  /* rating filter; < 0: none */
    int num_aug;                         /* augmented copies per train puzzle */
    uint64_t seed;
    tr_progress_fn progress;
    void *progress_user;
} tr_sudoku_options;
TRDEF tr_sudoku_options tr_sudoku_options_default(void);
/* Builds the train split (subsample, original + num_aug augmentations per group) and the test split. */
TRDEF tr_status tr_sudoku_build_splits(tr_ctx *ctx, const tr_sudoku_options *o, tr_split *train, tr_split *test, int64_t *rejected);
TRDEF tr_status tr_sudoku_build(tr_ctx *ctx, const tr_sudoku_options *o, const char *out_dir, tr_build_summary *summary);

/* ---- Maze -----------------------------------------------------------------------------------
   Characters "# SGo" (wall, open, start, goal, path) are tokens 1..5, 0 = pad (V = 6, L = n*n). */
#define TR_MAZE_CHARSET "# SGo"
/* Finds a shortest path from S to G in an n x n character maze and writes the labelled maze
   (path cells 'o') to out. Returns the path length in moves, or -1 when G cannot be reached. */
TRDEF int tr_maze_solve(tr_ctx *ctx, const char *maze, int n, char *out);
/* Checks a labelled answer (a model's prediction): every 'o' cell of `answer` must be an open cell
   (' ') of `maze`, and the 'o' cells must connect S to G. Returns the length in moves of the
   shortest such path, or -1 when there is none (or memory runs out; then the reason is set). */
TRDEF int tr_maze_check(tr_ctx *ctx, const char *maze, const char *answer, int n);
/* A random n x n maze (n >= 5) whose shortest path is longer than min_path moves, from the stream
   (seed, index); maze/solution are n*n characters of TR_MAZE_CHARSET. Returns the path length. */
TRDEF tr_status tr_maze_generate(tr_ctx *ctx, uint64_t seed, uint64_t index, int n, int min_path, char *maze, char *solution, int *path_len);

typedef struct tr_maze_set {
    int64_t count;
    int n;            /* side */
    char *mazes;      /* [count * n * n] */
    char *solutions;  /* [count * n * n] */
    int64_t *lines;   /* [count] the source line where each maze starts; NULL for generated sets */
} tr_maze_set;
/* Reads the reference CSV (source,question,answer,rating) or plain lines of n*n characters (maze,
   then optionally a separator and the solved maze); missing solutions are computed. Errors are
   "path:line: reason". tr_maze_parse with default options. */
TRDEF tr_status tr_maze_read(tr_ctx *ctx, const char *path, tr_maze_set *out);
/* The same reader on text[0..len). With o->side = n it also reads mazes written as n rows of n
   characters (blank lines between them optional); puzzles_only ignores given solutions and
   admits only "# SG" in mazes, which need one S and one G joined by a path (solutions get the
   shortest one); on_skip: see tr_read_options. */
TRDEF tr_status tr_maze_parse(tr_ctx *ctx, const char *text, size_t len, const char *what, const tr_read_options *o, tr_maze_set *out);
TRDEF void tr_maze_set_free(tr_ctx *ctx, tr_maze_set *s);

typedef struct tr_maze_options {
    const char *train_path, *test_path; /* NULL: generate */
    int64_t generate_train, generate_test;
    int size;          /* side of generated mazes (30) */
    int min_path;      /* generated mazes need a shortest path longer than this (110 = "hard") */
    int64_t subsample_size;
    int aug;           /* 8 dihedral versions of each train maze */
    uint64_t seed;
    tr_progress_fn progress;
    void *progress_user;
} tr_maze_options;
TRDEF tr_maze_options tr_maze_options_default(void);
TRDEF tr_status tr_maze_build_splits(tr_ctx *ctx, const tr_maze_options *o, tr_split *train, tr_split *test);
TRDEF tr_status tr_maze_build(tr_ctx *ctx, const tr_maze_options *o, const char *out_dir, tr_build_summary *summary);

/* ---- dihedral transforms and ARC ------------------------------------------------------------
   Transform ids as the reference (numpy): 0 identity, 1 rot90 (counter-clockwise), 2 rot180,
   3 rot270, 4 fliplr, 5 flipud, 6 transpose, 7 fliplr(rot90). A grid is h x w bytes, row-major;
   ids 1, 3, 6, 7 swap h and w. */
TRDEF int tr_dihedral_inverse_id(int tid);
TRDEF void tr_dihedral(int tid, const uint8_t *src, int h, int w, uint8_t *dst, int *out_h, int *out_w);
TRDEF void tr_dihedral_inverse(int tid, const uint8_t *src, int h, int w, uint8_t *dst, int *out_h, int *out_w);

/* ARC: tokens 0 pad, 1 EOS, 2..11 colours 0..9 on a 30x30 canvas (V = 12, L = 900). */
#define TR_ARC_MAX_GRID 30
#define TR_ARC_SEP "|||"
/* An augmented puzzle name "<task>|||t<tid>|||<10 digits>" (the colour map, colour 0 first).
   A name without the separator is the identity (tid 0, perm 0123456789). base gets the task name. */
TRDEF tr_status tr_arc_parse_name(tr_ctx *ctx, const char *name, char *base, size_t base_cap, int *tid, uint8_t perm[10]);
/* The forward augmentation: colour map, then dihedral transform. */
TRDEF void tr_arc_augment(int tid, const uint8_t perm[10], const uint8_t *grid, int h, int w, uint8_t *out, int *out_h, int *out_w);
/* Its inverse: inverse dihedral transform, then the inverse colour map (for evaluation). */
TRDEF void tr_arc_inverse_augment(int tid, const uint8_t perm[10], const uint8_t *grid, int h, int w, uint8_t *out, int *out_h, int *out_w);
/* The evaluator's crop of a 900-token prediction: the largest top-left rectangle of colour tokens,
   as colours 0..9. Returns 0 (h = w = 0) when the first cell is not a colour. */
TRDEF int tr_arc_crop(const int32_t *tokens, uint8_t *grid, int *h, int *w);
/* Places a grid on the 30x30 canvas at (r, c) with EOS cells, as the reference encodes it. */
TRDEF void tr_arc_encode(const uint8_t *grid, int h, int w, int r, int c, uint8_t canvas[900]);

/* An ARC task: {"train": [{"input": grid, "output": grid}, ...], "test": [...]}, a grid being a
   list of 1..30 rows of 1..30 colours 0..9. A test output may be absent or null (h = w = 0). */
typedef struct tr_arc_grid {
    int h, w;
    uint8_t cells[TR_ARC_MAX_GRID * TR_ARC_MAX_GRID]; /* h * w colours, row-major */
} tr_arc_grid;
typedef struct tr_arc_pair {
    tr_arc_grid input, output;
    int64_t line;        /* where the pair starts in the source */
} tr_arc_pair;
typedef struct tr_arc_task {
    int num_train, num_test;
    tr_arc_pair *pairs;  /* [num_train + num_test]: the demonstrations, then the tests */
} tr_arc_task;
/* Reads a grid (a list of 1..30 rows of 1..30 colours 0..9); errors are "what: reason". */
TRDEF tr_status tr_arc_grid_from_json(tr_ctx *ctx, const tr_json *g, const char *what, tr_arc_grid *out);
/* Reads one task from JSON text ("train" may be absent); errors are "what:line: train[0].input: reason". */
TRDEF tr_status tr_arc_task_parse(tr_ctx *ctx, const char *text, size_t len, const char *what, tr_arc_task *out);
/* The same from a parsed value (a member of a file of tasks keyed by name, like test_puzzles.json).
   With o->on_skip a malformed pair is reported and left with 0 x 0 grids, and a task without a
   "test" list comes back empty. o may be NULL. */
TRDEF tr_status tr_arc_task_from_json(tr_ctx *ctx, const tr_json *task, const char *what, const tr_read_options *o, tr_arc_task *out);
TRDEF void tr_arc_task_free(tr_ctx *ctx, tr_arc_task *t);
/* Reads a dataset's identifiers.json: a JSON list of names (strings), id = position. */
TRDEF tr_status tr_identifiers_read(tr_ctx *ctx, const char *path, int64_t *count, char ***names);
TRDEF void tr_identifiers_free(tr_ctx *ctx, int64_t count, char **names);
/* Writes a grid as JSON, [[1, 2], [3, 4]] (0 x 0: []). Returns 0, or EOF on a write error. */
TRDEF int tr_arc_grid_fput(FILE *f, const tr_arc_grid *g);

/* ---- ARC evaluation ---------------------------------------------------------------------------
   The reference evaluator (evaluators/arc.py): every prediction for an augmented test input
   ("<task>|||t<id>|||<perm>") is mapped back by tr_arc_inverse_augment and counted as a vote; the
   distinct answers of each test input are ranked by votes, ties broken by the mean sigmoid(q_halt),
   then by which came first. pass@K is the fraction of a task's test inputs whose solution is among
   the top K, averaged over the scored tasks (TRM); "all inputs" counts a task only when every test
   input is solved (HRM's notebook). Use: create from test_puzzles.json, add every prediction, rank,
   then read the answers, the scores and the submission. */
typedef struct tr_arc_eval_input {
    tr_arc_grid input, output; /* output.h = 0: the file gives no solution */
    int num_answers;           /* distinct answers voted for */
    int right;                 /* after tr_arc_votes_rank: the solution's rank among them, or -1 */
    size_t first_;
} tr_arc_eval_input;
typedef struct tr_arc_eval_task {
    char *name;
    int num_test;
    tr_arc_eval_input *tests;  /* [num_test] */
    int scored;                /* in the evaluated set (1 after create); clear it to leave a task out */
} tr_arc_eval_task;
typedef struct tr_arc_votes {
    tr_ctx *ctx;
    int num_tasks;
    tr_arc_eval_task *tasks;   /* in the file's order */
    int64_t predictions;       /* votes counted */
    int64_t ignored;           /* predictions for tasks that are not scored */
    int64_t inputs_checked, inputs_mismatched; /* augmented inputs given to add, and those that do not map back */
    size_t num_answers;        /* distinct answers over all test inputs */
    /* private */
    struct tr__arc_cand *cands_;
    size_t cap_, tcap_, alen_, acap_;
    size_t *table_;
    uint8_t *arena_;
    void *names_;
    int64_t seen_;
    int ranked_;
} tr_arc_votes;
/* Reads the tasks of a test_puzzles.json held in text[0..len): an object of tasks keyed by name,
   each with a "test" list (solutions may be absent). Errors name `what` and the task. */
TRDEF tr_status tr_arc_votes_create(tr_ctx *ctx, const char *text, size_t len, const char *what, tr_arc_votes **out);
TRDEF void tr_arc_votes_destroy(tr_arc_votes *v);
/* The index of the task called name, or -1. */
TRDEF int tr_arc_votes_find(const tr_arc_votes *v, const char *name);
/* One prediction: `answer` (0 x 0: none) for test input test_index of the augmented puzzle
   `puzzle`, in its augmented frame, with the model's q_halt logit. With `input` (the augmented test
   input the model saw; may be NULL) also checks that it maps back to the task's test input.
   Predictions for tasks that are not scored are only counted (ignored). TR_ERR_FORMAT for a bad
   puzzle name, a task not in the file or a test index out of range, the reason starting with
   `where`; TR_ERR_INVALID_ARG after tr_arc_votes_rank. */
TRDEF tr_status tr_arc_votes_add(tr_arc_votes *v, const char *puzzle, int test_index, const tr_arc_grid *answer, double q_halt, const tr_arc_grid *input,
                                 const char *where);
/* One line of a predictions file (tinyrec-arc-eval --predictions): a JSON object with "puzzle"
   (string), "test_index" (integer), "q_halt" (number) and "grid" (a list of rows; [] for an empty
   answer) or "tokens" (the model's 900 token ids, cropped as the evaluator does). TR_ERR_FORMAT with
   the reason starting with `where` otherwise. */
typedef struct tr_arc_prediction {
    char puzzle[256];
    int test_index;    /* -1 when out of any sensible range (tr_arc_votes_add refuses it) */
    double q_halt;
    tr_arc_grid grid;
} tr_arc_prediction;
TRDEF tr_status tr_arc_prediction_parse(tr_ctx *ctx, const char *line, size_t len, const char *where, tr_arc_prediction *out);
/* Ranks the answers of every test input (after the last add) and sets tests[].right. */
TRDEF void tr_arc_votes_rank(tr_arc_votes *v);
/* Answer `rank` (0: the most votes) of test input `test` of task `task`: its grid, votes and mean
   sigmoid(q_halt) (any output may be NULL). Returns 0 when there is no such answer or before rank. */
TRDEF int tr_arc_votes_answer(const tr_arc_votes *v, int task, int test, int rank, tr_arc_grid *grid, int64_t *votes, double *mean_q);
/* pass@K of the scored tasks for ks[0..nk): pass[i] (TRM) and all_inputs[i] (HRM; may be NULL);
   0 when no task is scored. TR_ERR_INVALID_ARG before tr_arc_votes_rank. */
TRDEF tr_status tr_arc_votes_score(const tr_arc_votes *v, const int *ks, int nk, double *pass, double *all_inputs);
/* Writes the ARC Prize submission of the scored tasks: {"<task>": [{"attempt_1": grid,
   "attempt_2": grid}, ...], ...}, the top two answers of each test input ([[0]] when there is none;
   the second repeats the first when there is one). Returns 0, or EOF on a write error or before rank. */
TRDEF int tr_arc_votes_fput_submission(FILE *f, const tr_arc_votes *v);

typedef struct tr_arc_options {
    const char *const *input_dirs; /* each: a folder of subset folders (training/, evaluation/) or a subset folder of *.json tasks */
    int num_input_dirs;
    const char *const *subsets;    /* subset names to use, in this order; NULL: every subset found */
    int num_subsets;
    const char *test_set_name;     /* the subset whose test pairs go to the test split ("evaluation") */
    uint64_t seed;                 /* 42 */
    int num_aug;                   /* 1000 */
    int puzzle_identifiers_start;  /* 1 */
    tr_progress_fn progress;
    void *progress_user;
} tr_arc_options;
TRDEF tr_arc_options tr_arc_options_default(void);
/* Builds <out_dir>/{train,test}/..., identifiers.json and test_puzzles.json. */
TRDEF tr_status tr_arc_build(tr_ctx *ctx, const tr_arc_options *o, const char *out_dir, tr_build_summary *summary);

/* ---- sampler --------------------------------------------------------------------------------
   Train mode follows the reference's group sampling: each set pass draws epochs_per_iter random
   permutations of the groups from the stream (seed, pass number); the batch is filled group by
   group with one random puzzle of the group and its examples in random order, cut at exactly
   global_batch_size; the last partial batch is dropped. Train mode never ends: it moves on to the
   next pass. Test mode walks the examples in order and pads the last batch (inputs pad, labels
   -100, puzzle id blank); after the last batch of a pass comes one batch with end = 1. With
   prefetch > 0 a thread prepares that many batches ahead; the batches are the same either way. */
typedef struct tr_sampler tr_sampler;

typedef struct tr_sampler_config {
    int test_mode;
    int global_batch_size;
    int rank, num_replicas;   /* this process takes rows [rank*local, (rank+1)*local) */
    int epochs_per_iter;      /* permutations concatenated per pass (reference: eval_interval) */
    uint64_t seed;
    int prefetch;             /* batches prepared ahead by a thread; 0: none */
} tr_sampler_config;

/* Fills the core's tr_batch (inputs, labels, puzzle_identifiers, batch_size); this says where it
   came from. */
typedef struct tr_batch_info {
    int seq_len;
    int effective_size;   /* global rows that hold real examples (test: fewer in the last batch) */
    int set_index;
    int end;              /* test mode: 1 = the pass is over and the batch holds nothing */
    int64_t pass;         /* train: set passes done before this one (the reference's _iters - 1); test: pass number */
    int64_t index;        /* batch number within the pass */
    double epoch;         /* train: epochs done after this batch (fractional) */
} tr_batch_info;

/* The position of a sampler, enough to resume exactly (save it with a checkpoint). */
typedef struct tr_sampler_state {
    uint64_t w[8];
} tr_sampler_state;

TRDEF tr_sampler_config tr_sampler_config_default(void);
TRDEF tr_status tr_sampler_create(tr_ctx *ctx, const tr_dataset *ds, const tr_sampler_config *cfg, tr_sampler **out);
/* The next batch (info may be NULL); its buffers belong to the sampler and stay valid until the
   next call. The rows are global_batch_size / num_replicas. */
TRDEF tr_status tr_sampler_next(tr_sampler *s, tr_batch *out, tr_batch_info *info);
/* The position after the last batch returned by tr_sampler_next. */
TRDEF void tr_sampler_get_state(const tr_sampler *s, tr_sampler_state *state);
TRDEF tr_status tr_sampler_set_state(tr_sampler *s, const tr_sampler_state *state);
/* Test mode: batches per pass (the end marker not counted). Train: an estimate for one pass. */
TRDEF int64_t tr_sampler_batches_per_pass(const tr_sampler *s);
TRDEF void tr_sampler_destroy(tr_sampler *s);

/* ---- evaluation -----------------------------------------------------------------------------
   The reference's evaluation: each test batch starts from a reset carry and runs
   tr_model_eval_step until every row halts (halt_max_steps steps); the last step's metrics cover
   the batch. */
typedef struct tr_eval_result {
    double count;          /* test rows (examples) evaluated; padding rows do not count */
    double accuracy, exact_accuracy, q_halt_accuracy, steps, lm_loss; /* means over count; NAN when 0 */
    int64_t batches;
    double seconds;
} tr_eval_result;
/* Evaluates m on the batches of a test-mode sampler from its position to the end of the pass, or
   max_batches of them (<= 0: all); carry has the sampler's rows (tr_carry_create). To evaluate the
   same rows again, save the sampler's position first (tr_sampler_get_state) and set it back.
   progress (may be NULL) is called before each batch with the batches done and the total ("evaluate");
   non-zero stops with TR_ERR_INTERRUPTED. To evaluate the EMA weights, tr_trainer_swap_ema around it. */
TRDEF tr_status tr_evaluate(tr_model *m, tr_carry *carry, tr_sampler *test, int64_t max_batches, tr_progress_fn progress, void *user, tr_eval_result *out);
/* Data-parallel evaluation: each rank evaluates its slice (a test sampler with rank and num_replicas) and
   this combines the ranks' results on every rank (counts summed, means weighted by count, batches and
   seconds the largest rank's). Collective; comm NULL or of size 1 leaves r as it is. */
TRDEF tr_status tr_eval_result_reduce(tr_ctx *ctx, const tr_comm *comm, tr_eval_result *r);

/* Creates a folder and its missing parents (mkdir -p). An existing folder is fine; a file in the
   way is TR_ERR_IO with the path and the reason. */
TRDEF tr_status tr_mkdir_p(tr_ctx *ctx, const char *path);
/* >>api-data-end */

/* >>api-checkpoint */
/* >>api-checkpoint */
/* Model files: safetensors whose tensor names are the reference PyTorch state_dict keys without
   the "_orig_mod." prefix (tr_model_tensor's names), and whose __metadata__ holds
       format = "tinyrec", format_version = "1", model = "trm" or "hrm",
       config = a JSON object with the reference's arch field names (hidden_size, num_heads,
                expansion, L_layers, H_layers, H_cycles, L_cycles, puzzle_emb_ndim,
                puzzle_emb_len, pos_encodings, mlp_t, rope_theta, rms_norm_eps, halt_max_steps,
                halt_exploration_prob, forward_dtype, no_ACT_continue, loss_type) plus
                vocab_size, seq_len, num_puzzle_identifiers and arch ("trm" or "hrm"; when
                absent, the model's: HRM's optional fields then take HRM's defaults).
   tools/convert_checkpoint.py converts reference torch.save checkpoints to and from this format.

   Trainer state files (tr_trainer_save) sit beside the model file (tr_trainer_state_path) and hold
   everything a resumed run needs to continue bit for bit on the same machine and thread count:
   the step, the trainer RNG, AdamATan2 moments, EMA weights, the live parameters and buffers
   (puzzle table included), the ACT carry, and an opaque blob for the caller's sampler position.
   Every write is atomic: a failed save leaves the previous file intact. */
#define TR_CHECKPOINT_FORMAT_VERSION 1

typedef struct tr_model_save_options {
    tr_dtype dtype; /* precision of the stored tensors: TR_F32 (the default), TR_BF16 or TR_F16 */
} tr_model_save_options;

/* All-zero (or a NULL pointer) is the strict default. */
typedef struct tr_model_load_options {
    /* tr_model_load: > 0 gives the puzzle table's row count the caller needs (the dataset's
       num_puzzle_identifiers) instead of the file's config. tr_model_load_weights ignores it: the
       model's own table size is the target. */
    int num_puzzle_identifiers;
    /* A puzzle table whose row count differs from the target: 1 re-initialises every row to the
       mean row of the loaded table and logs a warning (the reference's load_checkpoint); 0 is an
       error naming both sizes. */
    int allow_puzzle_resize;
    /* Tensors of the file that the model does not have: 1 skips them with a warning; 0 (default)
       is an error naming them. */
    int allow_unexpected;
} tr_model_load_options;

/* Writes the model (parameters and buffers, with the metadata above). opt may be NULL. */
TRDEF tr_status tr_model_save(tr_model *m, const char *path, const tr_model_save_options *opt);
/* Creates a model from the config in the file's metadata and loads its tensors (F32, BF16 or
   F16; "_orig_mod." names too). A config that fails tr_model_config_validate is an error. */
TRDEF tr_status tr_model_load(tr_ctx *ctx, const char *path, const tr_model_load_options *opt, tr_model **out);
/* Loads a file's tensors into an existing model, whose shapes they must match. The file needs no
   metadata (any safetensors with the right names works); a config in it, if any, must be valid,
   and fields that differ from the model's without changing shapes are logged as warnings. On any
   error the model is left unchanged. */
TRDEF tr_status tr_model_load_weights(tr_model *m, const char *path, const tr_model_load_options *opt);
/* Reads only the config of a model file (or of a trainer state file). */
TRDEF tr_status tr_checkpoint_read_config(tr_ctx *ctx, const char *path, tr_model_config *out);
/* The model config as the metadata's JSON object, written into buf (NUL-terminated). Returns
   TR_ERR_OVERFLOW if cap is too small; *len (may be NULL) gets the length needed. */
TRDEF tr_status tr_model_config_to_json(const tr_model_config *cfg, char *buf, size_t cap, size_t *len);
/* Parses such a JSON object (the reference's field names); unknown keys are ignored. The result
   is validated with tr_model_config_validate. `what` names the source in errors (may be NULL). */
TRDEF tr_status tr_model_config_from_json(tr_ctx *ctx, const char *json, size_t len, const char *what, tr_model_config *out);

/* "<dir>/<name>.safetensors" -> "<dir>/<name>.state.safetensors" (other names get
   ".state.safetensors" appended). TR_ERR_OVERFLOW if cap is too small. */
TRDEF tr_status tr_trainer_state_path(const char *model_path, char *buf, size_t cap);
/* Saves the trainer's state; extra/extra_len is stored as is (e.g. a tr_sampler_state), and may
   be NULL/0. Save the model file too (tr_model_save): resuming creates the model from it.
   Data-parallel (tc.comm): collective; the ranks' ACT carries are gathered into the global batch's,
   rank 0 alone writes, and every rank returns rank 0's status. The file is the same for any number of
   ranks, so a run resumes with another (tr_trainer_load takes this rank's rows of it). */
TRDEF tr_status tr_trainer_save(tr_trainer *t, const char *path, const void *extra, size_t extra_len);
/* Restores a state saved by tr_trainer_save into a trainer of the same model config and
   global_batch_size: step, RNG, moments, EMA, parameters and buffers, carry. The blob is copied to
   extra (when extra is non-NULL; it must hold extra_cap >= its size, else TR_ERR_OVERFLOW) and its
   size stored in *extra_len (when non-NULL). Train-config fields other than global_batch_size may
   differ (logged as warnings; the new values apply). On any error nothing is modified. */
TRDEF tr_status tr_trainer_load(tr_trainer *t, const char *path, void *extra, size_t extra_cap, size_t *extra_len);

/* A training run's checkpoint: the files tr_checkpoint_save writes into the run's folder. */
#define TR_CHECKPOINT_LATEST "latest.safetensors"             /* the model at the last save */
#define TR_CHECKPOINT_LATEST_STATE "latest.state.safetensors" /* its trainer state (tr_trainer_state_path) */
#define TR_CHECKPOINT_BEST "best.safetensors"                 /* the model of the best evaluation */
/* Saves a checkpoint into the folder dir (which must exist): the model (with the EMA weights when
   the trainer keeps an EMA, as evaluation uses them) to TR_CHECKPOINT_LATEST and, when best, to
   TR_CHECKPOINT_BEST; then the trainer state with extra (e.g. the sampler position; may be NULL/0) to
   TR_CHECKPOINT_LATEST_STATE (data-parallel: collective, rank 0 alone writes, as tr_trainer_save). Weights that hold a NaN or an infinity are refused with
   TR_ERR_NONFINITE before anything is written. Each file is replaced atomically: a failure (TR_ERR_IO
   naming the file and the system's reason, e.g. "No space left on device") leaves it as it was. */
TRDEF tr_status tr_checkpoint_save(tr_trainer *t, const char *dir, int best, const void *extra, size_t extra_len);
/* >>api-checkpoint-end */

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
#include <ctype.h>
#include <errno.h>
#include <locale.h>
#if !defined(_WIN32)
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
#define TR__POSIX 1
#if defined(__APPLE__)
#include <sys/sysctl.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif
#else
#include <direct.h>
#define TR__POSIX 0
#endif
#if defined(_OPENMP) && !defined(TINYREC_NO_OPENMP)
#include <omp.h>
#define TR__OMP 1
#else
#define TR__OMP 0
#endif
/* Without OpenMP the parallel loops run on the library's own pthread pool (>>base, threads); it
   needs GCC/clang's __atomic builtins and __thread. */
#if !TR__OMP && TR__POSIX && (defined(__GNUC__) || defined(__clang__))
#define TR__POOL 1
#else
#define TR__POOL 0
#endif
#ifndef TINYREC_OPENCL
#define TINYREC_OPENCL 0
#endif
#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__)) && !defined(TINYREC_NO_SIMD)
#define TR__X86 1
#include <immintrin.h>
#else
#define TR__X86 0
#endif
/* NEON is part of every aarch64 CPU: its kernels need no run-time check, only the choice. */
#if defined(__aarch64__) && defined(__ARM_NEON) && (defined(__GNUC__) || defined(__clang__)) && !defined(TINYREC_NO_SIMD)
#define TR__NEON 1
#include <arm_neon.h>
#else
#define TR__NEON 0
#endif
/* cpuid also without SIMD kernels: tr_cpu_info_get reports what the CPU has either way. */
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define TR__CPUID 1
#include <cpuid.h>
#else
#define TR__CPUID 0
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

typedef enum tr__simd { TR__SIMD_SCALAR = 0, TR__SIMD_AVX2 = 1, TR__SIMD_AVX512 = 2, TR__SIMD_NEON = 3 } tr__simd;

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
    size_t mem_limit;   /* tr_ctx_config.memory_limit or the machine's memory; 0 = unknown (no check) */
    void *scratch;      /* kernel workspace (e.g. GEMM packing), grown on demand by tr__scratch */
    size_t scratch_bytes;
    struct tr__pw *pw;  /* the weight regions whose GEMM packings are cached (>>sgemm's tr__pw) */
    /* device (>>device): the selector, the OpenCL device once opened (kept after a fallback,
       because it owns the migrated memory), whether ops run on it, and injected faults */
    char device_sel[96];
    int dev_tried, dev_active;
    struct tr__cl *cl;
    char dev_name[320];
    tr_fault fault;
    long fault_step;
    int fault_rows;
    int fault_armed; /* the trainer reached fault_step */
    long io_files;   /* files written atomically since the fault was injected (TR_FAULT_IO_*) */
    int cpu_bf16;    /* the CPU has AVX512_BF16 */
    int cpu_amx;     /* and AMX-BF16 tiles, which the OS granted this process */
    int bf16_gemm;   /* TINYREC_CPU_BF16 (tr__bgemm_mode in >>sgemm) */
    int tape16;      /* TINYREC_TAPE16: a bfloat16 / float16 model records its activations in 16 bits (>>model) */
    int gemm_fdt;    /* while a bfloat16 / float16 model computes (tr__inner_fwd, tr__train_fwd_bwd): its precision, whose values are
                        all its GEMM operands are, so a device may multiply them natively (tensor cores) */
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
    case TR_ERR_NONFINITE: return "non-finite values";
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

#if !defined(_WIN32) && !defined(__cplusplus)
/* A C99 program that reads a system header before the implementation (a test's cmocka.h) leaves
   glibc without POSIX, and stdlib.h then hides posix_memalign (x86 builds see it through
   mm_malloc.h; aarch64 ones do not): its POSIX declaration, repeated. (C++ always has it.) */
int posix_memalign(void **memptr, size_t alignment, size_t size);
#endif
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

/* --- threads -------------------------------------------------------------------------------
   tr__par_for(nt, n, chunk, fn, arg) runs fn(arg, i0, i1) over [0, n) on up to nt threads: the
   OpenMP team when the build has OpenMP, else a small pthread pool (TR__POOL: Apple clang,
   `make OPENMP=0`, TINYREC_NO_OPENMP). chunk 0 is the static schedule: part t of nt gets the same
   contiguous range in both builds (tr__par_split); chunk > 0 hands out chunks of that many in
   turn (dynamic). The loop bodies write disjoint outputs and never reduce across parts, so
   results are the same for any thread count and either build. tr__thread_id() is the running
   part's thread (0 .. nt-1), for per-thread scratch.
   The pool is process-wide and grows to the largest team asked for; its workers spin briefly,
   then sleep. It runs one loop at a time: a loop asked for while it is busy (another application
   thread, or a loop inside a loop) runs on its caller's thread alone. */
typedef void (*tr__range_fn)(void *arg, long i0, long i1);

/* Part t of [0, n) split in nt nearly equal contiguous ranges (the first n % nt one longer). */
TR__FN void tr__par_split(long n, int nt, int t, long *i0, long *i1) {
    long q = n / nt, r = n % nt;
    *i0 = t * q + TR__MIN((long)t, r);
    *i1 = *i0 + q + (t < r ? 1 : 0);
}

#if TR__POOL
#define TR__POOL_MAX 1024 /* tr_ctx_set_num_threads' limit */
#define TR__POOL_SPIN 20000
static __thread int tr__pool_tid; /* the part this thread runs (workers: their index) */
static pthread_mutex_t tr__pool_busy = PTHREAD_MUTEX_INITIALIZER; /* held by the thread running a loop */
static pthread_mutex_t tr__pool_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t tr__pool_wake = PTHREAD_COND_INITIALIZER, tr__pool_done = PTHREAD_COND_INITIALIZER;
static struct {
    unsigned long gen; /* bumped (under tr__pool_mu) to start a loop */
    int workers;       /* started, never stopped */
    int pending;       /* workers that have not finished the current loop */
    int nt;
    long n, chunk, next;
    tr__range_fn fn;
    void *arg;
} tr__pool;

TR__FN void tr__pool_part(int t) {
    if (tr__pool.chunk <= 0) {
        long i0, i1;
        tr__par_split(tr__pool.n, tr__pool.nt, t, &i0, &i1);
        if (i0 < i1) tr__pool.fn(tr__pool.arg, i0, i1);
    } else
        for (;;) {
            long i = __atomic_fetch_add(&tr__pool.next, tr__pool.chunk, __ATOMIC_RELAXED);
            if (i >= tr__pool.n) break;
            tr__pool.fn(tr__pool.arg, i, TR__MIN(i + tr__pool.chunk, tr__pool.n));
        }
}

static void *tr__pool_worker(void *p) {
    unsigned long seen = 0, g = 0;
    int i;
    tr__pool_tid = (int)(intptr_t)p;
    for (;;) {
        for (i = 0; i < TR__POOL_SPIN && (g = __atomic_load_n(&tr__pool.gen, __ATOMIC_ACQUIRE)) == seen; i++) {}
        if (g == seen) {
            pthread_mutex_lock(&tr__pool_mu);
            while ((g = __atomic_load_n(&tr__pool.gen, __ATOMIC_ACQUIRE)) == seen) pthread_cond_wait(&tr__pool_wake, &tr__pool_mu);
            pthread_mutex_unlock(&tr__pool_mu);
        }
        seen = g;
        if (tr__pool_tid < tr__pool.nt) tr__pool_part(tr__pool_tid);
        if (__atomic_sub_fetch(&tr__pool.pending, 1, __ATOMIC_ACQ_REL) == 0) { /* every worker answers each loop */
            pthread_mutex_lock(&tr__pool_mu);
            pthread_cond_signal(&tr__pool_done);
            pthread_mutex_unlock(&tr__pool_mu);
        }
    }
    return NULL;
}

/* Runs the loop on the pool (the caller is part 0); 0 when the pool is busy. */
TR__FN int tr__pool_run(int nt, long n, long chunk, tr__range_fn fn, void *arg) {
    int i;
    if (pthread_mutex_trylock(&tr__pool_busy) != 0) return 0;
    while (tr__pool.workers < nt - 1 && tr__pool.workers < TR__POOL_MAX - 1) {
        pthread_t th;
        pthread_attr_t at;
        int ok;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        ok = pthread_create(&th, &at, tr__pool_worker, (void *)(intptr_t)(tr__pool.workers + 1)) == 0;
        pthread_attr_destroy(&at);
        if (!ok) break;
        tr__pool.workers++;
    }
    nt = TR__MIN(nt, tr__pool.workers + 1); /* fewer threads when the system refused more */
    tr__pool.nt = nt, tr__pool.n = n, tr__pool.chunk = chunk, tr__pool.next = 0;
    tr__pool.fn = fn, tr__pool.arg = arg;
    tr__pool.pending = tr__pool.workers;
    pthread_mutex_lock(&tr__pool_mu);
    __atomic_store_n(&tr__pool.gen, tr__pool.gen + 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&tr__pool_wake);
    pthread_mutex_unlock(&tr__pool_mu);
    tr__pool_part(0);
    for (i = 0; i < TR__POOL_SPIN && __atomic_load_n(&tr__pool.pending, __ATOMIC_ACQUIRE) != 0; i++) {}
    pthread_mutex_lock(&tr__pool_mu);
    while (__atomic_load_n(&tr__pool.pending, __ATOMIC_ACQUIRE) != 0) pthread_cond_wait(&tr__pool_done, &tr__pool_mu);
    pthread_mutex_unlock(&tr__pool_mu);
    pthread_mutex_unlock(&tr__pool_busy);
    return 1;
}
#endif

/* Threads to use when nobody says: on macOS the performance cores (sysctl; a static split that
   gives efficiency cores equal shares waits for them), else the online CPUs. */
TR__FN int tr__cpu_count(void) {
#if defined(__APPLE__)
    int n = 0;
    size_t len = sizeof n;
    if (sysctlbyname("hw.perflevel0.physicalcpu", &n, &len, NULL, 0) == 0 && n > 0) return n;
    len = sizeof n;
    if (sysctlbyname("hw.logicalcpu", &n, &len, NULL, 0) == 0 && n > 0) return n;
#endif
#if defined(_SC_NPROCESSORS_ONLN)
    {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        if (c > 0) return (int)TR__MIN(c, 1024);
    }
#endif
    return 1;
}

TR__FN int tr__thread_id(void) {
#if TR__OMP
    return omp_get_thread_num();
#elif TR__POOL
    return tr__pool_tid;
#else
    return 0;
#endif
}

TR__FN void tr__par_for(int nt, long n, long chunk, tr__range_fn fn, void *arg) {
    if (n <= 0) return;
    if (nt > 1 && n > 1) {
#if TR__OMP
        if (chunk <= 0) {
            int t;
#pragma omp parallel for num_threads(nt) schedule(static)
            for (t = 0; t < nt; t++) {
                long i0, i1;
                tr__par_split(n, nt, t, &i0, &i1);
                if (i0 < i1) fn(arg, i0, i1);
            }
        } else {
            long c, nc = (n + chunk - 1) / chunk;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
            for (c = 0; c < nc; c++) fn(arg, c * chunk, TR__MIN((c + 1) * chunk, n));
        }
        return;
#elif TR__POOL
        if (tr__pool_run(nt, n, chunk, fn, arg)) return;
#endif
    }
    fn(arg, 0, n);
}

/* --- CPU features ------------------------------------------------------------------------ */
/* The one cpuid/xgetbv probe: each feature the CPU has and the OS saves the registers of
   (XCR0: ymm for AVX, zmm and opmask for AVX-512, tile state for AMX), and the brand string
   (48 bytes + NUL; "" when the CPU has none). */
TR__FN void tr__cpu_features(int feat[TR_CPU_FEATURE_COUNT], char brand[49]) {
    memset(feat, 0, sizeof(int) * TR_CPU_FEATURE_COUNT);
    brand[0] = 0;
#if TR__CPUID
    {
        unsigned a, b, c, d, max_leaf = (unsigned)__get_cpuid_max(0, NULL), r[12], k;
        unsigned long long xcr0 = 0;
        int os_avx = 0, os_avx512 = 0, os_amx = 0;
        if ((unsigned)__get_cpuid_max(0x80000000u, NULL) >= 0x80000004u) {
            for (k = 0; k < 3; k++) __get_cpuid(0x80000002u + k, &r[4 * k], &r[4 * k + 1], &r[4 * k + 2], &r[4 * k + 3]);
            memcpy(brand, r, 48);
            brand[48] = 0;
        }
        if (max_leaf >= 1 && __get_cpuid(1, &a, &b, &c, &d)) {
            if ((c >> 27) & 1) { /* osxsave: xgetbv exists */
                unsigned lo, hi;
                __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
                xcr0 = ((unsigned long long)hi << 32) | lo;
            }
            os_avx = (xcr0 & 6) == 6;
            os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0;
            os_amx = ((xcr0 >> 17) & 3) == 3;
            feat[TR_CPU_SSE42] = (c >> 20) & 1;
            feat[TR_CPU_AVX] = ((c >> 28) & 1) && os_avx;
            feat[TR_CPU_FMA] = ((c >> 12) & 1) && os_avx;
            feat[TR_CPU_F16C] = ((c >> 29) & 1) && os_avx;
        }
        if (max_leaf >= 7 && __get_cpuid_count(7, 0, &a, &b, &c, &d)) {
            unsigned sub1 = a;
            feat[TR_CPU_AVX2] = ((b >> 5) & 1) && os_avx;
            feat[TR_CPU_AVX512F] = ((b >> 16) & 1) && os_avx512;
            feat[TR_CPU_AVX512DQ] = ((b >> 17) & 1) && os_avx512;
            feat[TR_CPU_AVX512BW] = ((b >> 30) & 1) && os_avx512;
            feat[TR_CPU_AVX512VL] = ((b >> 31) & 1) && os_avx512;
            feat[TR_CPU_AMX_BF16] = ((d >> 22) & 1) && os_amx;
            feat[TR_CPU_AMX_TILE] = ((d >> 24) & 1) && os_amx;
            feat[TR_CPU_AMX_INT8] = ((d >> 25) & 1) && os_amx;
            if (sub1 >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) feat[TR_CPU_AVX512_BF16] = ((a >> 5) & 1) && os_avx512;
        }
    }
#endif
#if defined(__aarch64__) && defined(__linux__)
    { /* HWCAP_ASIMD, HWCAP_ASIMDDP; HWCAP2_I8MM, HWCAP2_BF16 (numbers: older headers lack the names) */
        unsigned long h1 = getauxval(AT_HWCAP), h2 = getauxval(AT_HWCAP2);
        feat[TR_CPU_ASIMD] = (h1 >> 1) & 1;
        feat[TR_CPU_ASIMDDP] = (h1 >> 20) & 1;
        feat[TR_CPU_I8MM] = (h2 >> 13) & 1;
        feat[TR_CPU_ARM_BF16] = (h2 >> 14) & 1;
    }
#elif defined(__aarch64__) && defined(__APPLE__)
    {
        static const char *const keys[4] = {"hw.optional.AdvSIMD", "hw.optional.arm.FEAT_DotProd", "hw.optional.arm.FEAT_BF16", "hw.optional.arm.FEAT_I8MM"};
        static const tr_cpu_feature ids[4] = {TR_CPU_ASIMD, TR_CPU_ASIMDDP, TR_CPU_ARM_BF16, TR_CPU_I8MM};
        size_t len = 48;
        int k, v;
        for (k = 0; k < 4; k++) {
            size_t vl = sizeof v;
            v = 0;
            feat[ids[k]] = sysctlbyname(keys[k], &v, &vl, NULL, 0) == 0 && v != 0; /* (absent on older macOS: 0) */
        }
        if (sysctlbyname("machdep.cpu.brand_string", brand, &len, NULL, 0) != 0) len = 0; /* "Apple M2" */
        brand[len < 48 ? len : 48] = 0;
    }
#endif
}

/* Linux gives a process the tile registers' state only when asked (arch_prctl ARCH_REQ_XCOMP_PERM
   for XFEATURE_XTILEDATA); 1 when granted. The raw system call: the header asks for POSIX only. */
TR__FN int tr__amx_permit(void) {
#if defined(__linux__) && defined(__x86_64__)
    long ret;
    __asm__ volatile("syscall" : "=a"(ret) : "0"(158L), "D"(0x1023L), "S"(18L) : "rcx", "r11", "memory");
    return ret == 0;
#else
    return 0;
#endif
}

/* The widest kernel set this build and a CPU with features f (tr__cpu_features) can run: avx512 needs F, DQ, BW
   and VL, both sets FMA and F16C (every AVX2 CPU has them; the reduced-precision rounding uses F16C). */
TR__FN tr__simd tr__detect_simd(const int f[TR_CPU_FEATURE_COUNT]) {
    TR__UNUSED(f);
#if TR__X86
    if (!f[TR_CPU_AVX] || !f[TR_CPU_FMA] || !f[TR_CPU_F16C]) return TR__SIMD_SCALAR;
    if (f[TR_CPU_AVX512F] && f[TR_CPU_AVX512DQ] && f[TR_CPU_AVX512BW] && f[TR_CPU_AVX512VL]) return TR__SIMD_AVX512;
    if (f[TR_CPU_AVX2]) return TR__SIMD_AVX2;
#endif
#if TR__NEON
    return TR__SIMD_NEON;
#endif
    return TR__SIMD_SCALAR;
}

static const char *tr__simd_names[TR_KERNEL_SETS] = {"scalar", "avx2", "avx512", "neon"};
/* 1 when a CPU whose best set is `best` runs set s: scalar always, the x86 sets up to the best. */
TR__FN int tr__simd_runs(tr__simd best, int s) { return s == TR__SIMD_SCALAR || (best == TR__SIMD_NEON ? s == TR__SIMD_NEON : s <= (int)best && s != TR__SIMD_NEON); }

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
    for (i = 0; i < TR_KERNEL_SETS; i++)
        if (strcmp(name, tr__simd_names[i]) == 0) {
            if (!tr__simd_runs(ctx->simd_best, i))
                return tr__err(ctx, TR_ERR_UNSUPPORTED, "simd '%s' is not supported by this CPU (best: %s)", name, tr__simd_names[ctx->simd_best]);
            ctx->simd = (tr__simd)i;
            return TR_OK;
        }
    return tr__err(ctx, TR_ERR_INVALID_ARG, "unknown simd '%s' (valid: auto, scalar, avx2, avx512, neon)", name);
}

TRDEF tr_status tr_ctx_set_num_threads(tr_ctx *ctx, int n) {
    if (!ctx) return TR_ERR_INVALID_ARG;
    if (n <= 0) {
        const char *env = getenv("TINYREC_NUM_THREADS");
        n = env ? atoi(env) : 0;
#if TR__OMP
        if (n <= 0) n = omp_get_max_threads();
#elif TR__POOL
        if (n <= 0) n = tr__cpu_count();
#endif
        if (n <= 0) n = 1;
    }
    if (n > 1024) return tr__err(ctx, TR_ERR_INVALID_ARG, "num_threads %d is out of range (1..1024)", n);
    ctx->num_threads = n;
    return TR_OK;
}

TRDEF tr_status tr_ctx_set_device(tr_ctx *ctx, const char *sel) {
    if (!ctx) return TR_ERR_INVALID_ARG;
    if (!sel || !sel[0]) sel = "auto";
    if (strcmp(sel, "auto") != 0 && strcmp(sel, "cpu") != 0 && strncmp(sel, "opencl", 6) != 0)
        return tr__err(ctx, TR_ERR_INVALID_ARG, "unknown device '%s' (valid: auto, cpu, opencl, opencl:N, opencl:<name>)", sel);
    if (strlen(sel) >= sizeof ctx->device_sel) return tr__err(ctx, TR_ERR_INVALID_ARG, "device selector '%.40s...' is too long", sel);
    if (ctx->dev_tried) return tr__err(ctx, TR_ERR_INVALID_ARG, "the device is chosen when the first model is created; set it before");
    snprintf(ctx->device_sel, sizeof ctx->device_sel, "%s", sel);
    return TR_OK;
}

TRDEF void tr_ctx_inject_fault(tr_ctx *ctx, tr_fault fault, long at_step, int rows) {
    if (!ctx) return;
    ctx->fault = fault;
    ctx->fault_step = at_step;
    ctx->fault_rows = rows;
    ctx->io_files = 0;
}

/* TINYREC_FAULT: "no-library" | "no-platform" | "no-device" | "build" | "oom@STEP[:ROWS]" | "enqueue@STEP[:N]" |
   "nan@STEP[:N]" | "enospc@N" | "erofs@N" (the names in tr_fault's order). */
TR__FN tr_status tr__fault_from_env(tr_ctx *ctx, const char *v) {
    static const char *const names[] = {"", "no-library", "no-platform", "no-device", "build", "oom", "enqueue", "nan", "enospc", "erofs", "no-bf16", "no-half"};
    int i;
    long step = 0, rows = 0;
    if (!v || !v[0]) return TR_OK;
    for (i = 1; i < (int)(sizeof names / sizeof *names); i++) {
        size_t n = strlen(names[i]);
        if (strncmp(v, names[i], n) != 0) continue;
        if (i >= TR_FAULT_DEVICE_OOM && i <= TR_FAULT_IO_EROFS) {
            char *end;
            if (v[n] != '@') break;
            step = strtol(v + n + 1, &end, 10);
            if (*end == ':' && i < TR_FAULT_IO_ENOSPC) rows = strtol(end + 1, &end, 10);
            if (*end || step < 1 || rows < 0) break;
        } else if (v[n])
            break;
        tr_ctx_inject_fault(ctx, (tr_fault)i, step, (int)rows);
        return TR_OK;
    }
    return tr__err(ctx, TR_ERR_INVALID_ARG, "TINYREC_FAULT '%s' is not one of no-library, no-platform, no-device, build, oom@STEP[:ROWS], enqueue@STEP[:N], nan@STEP[:N], enospc@N, erofs@N, no-bf16, no-half", v);
}

TR__FN void tr__dev_close(tr_ctx *ctx);

/* Physical memory in bytes, 0 when the system does not say. */
TR__FN size_t tr__machine_memory(void) {
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGESIZE)
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0 && (double)pages * (double)page < (double)SIZE_MAX) return (size_t)pages * (size_t)page;
#endif
    return 0;
}

TRDEF size_t tr_ctx_memory_limit(const tr_ctx *ctx) { return ctx ? ctx->mem_limit : 0; }

/* Refuses, before anything is allocated, work that needs more host memory than the limit: a model
   config, batch or file that claims absurd sizes must fail with the sizes, not after an allocation
   storm (or the OOM killer). `what` says what needs it. */
TR__FN tr_status tr__check_memory(tr_ctx *ctx, double bytes, const char *what) {
    const double mib = 1024.0 * 1024.0;
    if (!ctx || !ctx->mem_limit || bytes <= (double)ctx->mem_limit) return TR_OK;
    return tr__err(ctx, TR_ERR_OUT_OF_MEMORY, "%s needs %.0f MiB of memory, more than the %.0f MiB limit (%s)", what, bytes / mib, (double)ctx->mem_limit / mib,
                   "tr_ctx_config.memory_limit, else the machine's memory");
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
    ctx->mem_limit = cfg.memory_limit ? cfg.memory_limit : tr__machine_memory();
    {
        int f[TR_CPU_FEATURE_COUNT];
        char brand[49];
        const char *e = getenv("TINYREC_CPU_BF16");
        tr__cpu_features(f, brand);
        ctx->simd_best = tr__detect_simd(f);
        ctx->simd = ctx->simd_best;
        ctx->cpu_bf16 = f[TR_CPU_AVX512_BF16];
        ctx->cpu_amx = ctx->cpu_bf16 && f[TR_CPU_AMX_TILE] && f[TR_CPU_AMX_BF16] && tr__amx_permit();
        ctx->bf16_gemm = 1;
        if (e && e[0]) {
            if (e[0] < '0' || e[0] > '3' || e[1]) {
                cfg.allocator.free(cfg.allocator.user, ctx);
                return TR_ERR_INVALID_ARG;
            }
            ctx->bf16_gemm = e[0] - '0';
        }
        e = getenv("TINYREC_TAPE16");
        ctx->tape16 = 1;
        if (e && e[0]) {
            if ((e[0] != '0' && e[0] != '1') || e[1]) {
                cfg.allocator.free(cfg.allocator.user, ctx);
                return TR_ERR_INVALID_ARG;
            }
            ctx->tape16 = e[0] - '0';
        }
    }
    simd_env = cfg.simd ? cfg.simd : getenv("TINYREC_SIMD");
    st = tr_ctx_set_num_threads(ctx, cfg.num_threads);
    if (st == TR_OK) st = tr_ctx_set_simd(ctx, simd_env);
    if (st == TR_OK) st = tr_ctx_set_device(ctx, cfg.device ? cfg.device : getenv("TINYREC_DEVICE"));
    if (st == TR_OK) st = tr__fault_from_env(ctx, getenv("TINYREC_FAULT"));
    if (st != TR_OK) {
        cfg.allocator.free(cfg.allocator.user, ctx);
        return st;
    }
    *out = ctx;
    return TR_OK;
}

TRDEF void tr_ctx_destroy(tr_ctx *ctx) {
    if (!ctx) return;
    tr__dev_close(ctx);
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

/* Rounding to a reduced forward precision (tr_forward_dtype: 1 bfloat16, 2 float16), in place, to nearest
   even; NaN stays NaN (quiet), a value beyond the format's range becomes infinite (float16 above 65504, with
   its subnormals below 2^-14). The scalar reference of tr__round. */
TR__FN uint32_t tr__bf16_round_bits(uint32_t u) {
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    return (u & 0x7fffffffu) > 0x7f800000u ? ((u | 0x00400000u) & 0xffff0000u) : r;
}
TR__FN void tr__round_ref(int fdt, float *x, size_t n) {
    size_t i;
    if (fdt == TR_FWD_BFLOAT16)
        for (i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, x + i, 4);
            u = tr__bf16_round_bits(u);
            memcpy(x + i, &u, 4);
        }
    else if (fdt == TR_FWD_FLOAT16)
        for (i = 0; i < n; i++) x[i] = tr__f16_to_f32(tr__f32_to_f16(x[i]));
}
TR__FN float tr__round1(int fdt, float x) {
    tr__round_ref(fdt, &x, 1);
    return x;
}
/* A bfloat16 / float16 model records its activations as 16-bit values (the tape, >>model). pack (unpack = 0):
   h[i] = x[i] in fdt's 16 bits, rounded to nearest even, so exact on values already rounded to fdt; unpack:
   x[i] = h[i]. unpack(pack(x)) == tr__round_ref(x). The scalar reference of tr__half. */
TR__FN void tr__half_ref(int fdt, int unpack, float *x, uint16_t *h, size_t n) {
    size_t i;
    int bf = fdt == TR_FWD_BFLOAT16;
    if (unpack)
        for (i = 0; i < n; i++) x[i] = bf ? tr__bf16_to_f32(h[i]) : tr__f16_to_f32(h[i]);
    else
        for (i = 0; i < n; i++) h[i] = bf ? tr__f32_to_bf16(x[i]) : tr__f32_to_f16(x[i]);
}

/* >>cpu
   Kernels. Each op has a plain scalar reference (tr__*_ref, kept forever and used by the tests)
   and, for the hot ones, SIMD variants chosen at run time from ctx->simd. Row loops are split
   across threads by tr__par_for (OpenMP or the library's pool) with a static schedule and
   disjoint writes: a loop's body is a range function over an argument block (tr__X_range,
   tr__X_args). No kernel reduces across threads, so results do not depend on the thread count. */
#if TR__X86
#define TR__TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma")))
#define TR__TARGET_AVX2 __attribute__((target("avx2,fma")))
#define TR__TARGET_F16C __attribute__((target("avx2,fma,f16c")))
#endif

/* y = r * rstd with r = x + add (add may be NULL), rstd = 1/sqrt(mean(r^2) + eps), per row of D.
   out may alias x. This is the post-norm residual of every block. */
typedef struct tr__rms_rows_fwd_args { int D; const float *x; const float *add; float *out; float *rstd; float eps; } tr__rms_rows_fwd_args;
TR__FN void tr__rms_rows_fwd_range(void *arg, long i0, long i1) {
    const tr__rms_rows_fwd_args *a = (const tr__rms_rows_fwd_args *)arg;
    int D = a->D;
    const float *x = a->x;
    const float *add = a->add;
    float *out = a->out;
    float *rstd = a->rstd;
    float eps = a->eps;
    long r;
    for (r = i0; r < i1; r++) {
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
TR__FN void tr__rms_rows_fwd_ref(long rows, int D, const float *x, const float *add, float *out, float *rstd, float eps, int nthreads) {
    tr__rms_rows_fwd_args a = {D, x, add, out, rstd, eps};
    tr__par_for(nthreads, rows, 0, tr__rms_rows_fwd_range, &a);
}

/* dx = rstd * (dy - y * mean(dy * y)), the backward of y = x * rstd over a row. */
typedef struct tr__rms_rows_bwd_args { int D; const float *dy; const float *y; const float *rstd; float *dx; } tr__rms_rows_bwd_args;
TR__FN void tr__rms_rows_bwd_range(void *arg, long i0, long i1) {
    const tr__rms_rows_bwd_args *a = (const tr__rms_rows_bwd_args *)arg;
    int D = a->D;
    const float *dy = a->dy;
    const float *y = a->y;
    const float *rstd = a->rstd;
    float *dx = a->dx;
    long r;
    for (r = i0; r < i1; r++) {
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
TR__FN void tr__rms_rows_bwd_ref(long rows, int D, const float *dy, const float *y, const float *rstd, float *dx, int nthreads) {
    tr__rms_rows_bwd_args a = {D, dy, y, rstd, dx};
    tr__par_for(nthreads, rows, 0, tr__rms_rows_bwd_range, &a);
}

/* The mlp_t norm: over the sequence axis S, separately for each (batch, channel). x is [B,S,D];
   rstd is [B,D]. */
typedef struct tr__rms_cols_fwd_args { int S; int D; const float *x; const float *add; float *out; float *rstd; float eps; } tr__rms_cols_fwd_args;
TR__FN void tr__rms_cols_fwd_range(void *arg, long i0, long i1) {
    const tr__rms_cols_fwd_args *a = (const tr__rms_cols_fwd_args *)arg;
    int S = a->S;
    int D = a->D;
    const float *x = a->x;
    const float *add = a->add;
    float *out = a->out;
    float *rstd = a->rstd;
    float eps = a->eps;
    long t, nblk = (D + 63) / 64;
    for (t = i0; t < i1; t++) { /* one task = one batch row x 64 channels */
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
TR__FN void tr__rms_cols_fwd_ref(int B, int S, int D, const float *x, const float *add, float *out, float *rstd, float eps, int nthreads) {
    tr__rms_cols_fwd_args a = {S, D, x, add, out, rstd, eps};
    tr__par_for(nthreads, (long)B * ((D + 63) / 64), 0, tr__rms_cols_fwd_range, &a);
}

typedef struct tr__rms_cols_bwd_args { int S; int D; const float *dy; const float *y; const float *rstd; float *dx; } tr__rms_cols_bwd_args;
TR__FN void tr__rms_cols_bwd_range(void *arg, long i0, long i1) {
    const tr__rms_cols_bwd_args *a = (const tr__rms_cols_bwd_args *)arg;
    int S = a->S;
    int D = a->D;
    const float *dy = a->dy;
    const float *y = a->y;
    const float *rstd = a->rstd;
    float *dx = a->dx;
    long t, nblk = (D + 63) / 64;
    for (t = i0; t < i1; t++) {
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
TR__FN void tr__rms_cols_bwd_ref(int B, int S, int D, const float *dy, const float *y, const float *rstd, float *dx, int nthreads) {
    tr__rms_cols_bwd_args a = {S, D, dy, y, rstd, dx};
    tr__par_for(nthreads, (long)B * ((D + 63) / 64), 0, tr__rms_cols_bwd_range, &a);
}

/* SwiGLU activation: out = silu(gate) * up, where gate = g[0..width) and up = g[width..2 width)
   of each of `rows` rows (row strides g_stride and out_stride). With fdt (bfloat16 / float16), as
   PyTorch computes F.silu(gate) * up on tensors of that type: silu in fp32, rounded, times up, rounded. */
TR__FN float tr__silu(float x) { return x / (1.0f + expf(-x)); }
typedef struct tr__swiglu_fwd_args { long width; const float *g; size_t g_stride; float *out; size_t out_stride; int fdt; } tr__swiglu_fwd_args;
TR__FN void tr__swiglu_fwd_range(void *arg, long i0, long i1) {
    const tr__swiglu_fwd_args *a = (const tr__swiglu_fwd_args *)arg;
    long width = a->width;
    const float *g = a->g;
    size_t g_stride = a->g_stride;
    float *out = a->out;
    size_t out_stride = a->out_stride;
    long r;
    for (r = i0; r < i1; r++) {
        const float *gate = g + (size_t)r * g_stride, *up = gate + width;
        float *o = out + (size_t)r * out_stride;
        long j;
        if (a->fdt)
            for (j = 0; j < width; j++) o[j] = tr__round1(a->fdt, tr__round1(a->fdt, tr__silu(gate[j])) * up[j]);
        else
            for (j = 0; j < width; j++) o[j] = tr__silu(gate[j]) * up[j];
    }
}
TR__FN void tr__swiglu_fwd_ref(long rows, long width, const float *g, size_t g_stride, float *out, size_t out_stride, int nthreads) {
    tr__swiglu_fwd_args a = {width, g, g_stride, out, out_stride, 0};
    tr__par_for(nthreads, rows, 0, tr__swiglu_fwd_range, &a);
}

/* Backward: d gate = da * up * silu'(gate), d up = da * silu(gate). dg has g's layout. */
typedef struct tr__swiglu_bwd_args { long width; const float *g; size_t g_stride; const float *da; size_t da_stride; float *dg; } tr__swiglu_bwd_args;
TR__FN void tr__swiglu_bwd_range(void *arg, long i0, long i1) {
    const tr__swiglu_bwd_args *a = (const tr__swiglu_bwd_args *)arg;
    long width = a->width;
    const float *g = a->g;
    size_t g_stride = a->g_stride;
    const float *da = a->da;
    size_t da_stride = a->da_stride;
    float *dg = a->dg;
    long r;
    for (r = i0; r < i1; r++) {
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
TR__FN void tr__swiglu_bwd_ref(long rows, long width, const float *g, size_t g_stride, const float *da, size_t da_stride, float *dg, int nthreads) {
    tr__swiglu_bwd_args a = {width, g, g_stride, da, da_stride, dg};
    tr__par_for(nthreads, rows, 0, tr__swiglu_bwd_range, &a);
}

/* RoPE, NeoX "rotate half", in place on the q and k heads of a [B*S, 3D] qkv buffer.
   cosv/sinv are [S, hd]. inverse = 1 applies the transpose rotation (the backward). */
typedef struct tr__rope_args { int S; int H; int hd; float *qkv; const float *cosv; const float *sinv; int inverse; } tr__rope_args;
TR__FN void tr__rope_range(void *arg, long i0, long i1) {
    const tr__rope_args *a = (const tr__rope_args *)arg;
    int S = a->S;
    int H = a->H;
    int hd = a->hd;
    float *qkv = a->qkv;
    const float *cosv = a->cosv;
    const float *sinv = a->sinv;
    int inverse = a->inverse;
    long r;
    int half = hd / 2, D = H * hd;
    float sgn = inverse ? -1.0f : 1.0f;
    for (r = i0; r < i1; r++) {
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
TR__FN void tr__rope_ref(long rows, int S, int H, int hd, float *qkv, const float *cosv, const float *sinv, int inverse, int nthreads) {
    tr__rope_args a = {S, H, hd, qkv, cosv, sinv, inverse};
    tr__par_for(nthreads, rows, 0, tr__rope_range, &a);
}

/* Threads for a kernel call of `work` element-operations: one below ~64k, so that tiny models
   and batch-1 calls do not pay for waking (and, on a busy machine, waiting for) a team. */
TR__FN int tr__threads_for(const tr_ctx *ctx, double work) { return work < 65536.0 ? 1 : ctx->num_threads; }

/* y = a + b over n floats (y may alias a or b), split across threads. */
typedef struct tr__add_args { const float *a, *b; float *y; } tr__add_args;
TR__FN void tr__add_range(void *arg, long i0, long i1) {
    const tr__add_args *p = (const tr__add_args *)arg;
    long i;
    for (i = i0; i < i1; i++) p->y[i] = p->a[i] + p->b[i];
}
TR__FN void tr__add(tr_ctx *ctx, size_t n, const float *a, const float *b, float *y) {
    tr__add_args p = {a, b, y};
    tr__par_for(tr__threads_for(ctx, (double)n), (long)n, 0, tr__add_range, &p);
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
typedef struct tr__attention_fwd_args { int S; int H; int hd; const float *qkv; float *o; float *lse; float *scratch; } tr__attention_fwd_args;
TR__FN void tr__attention_fwd_range(void *arg, long i0, long i1) {
    const tr__attention_fwd_args *a = (const tr__attention_fwd_args *)arg;
    int S = a->S;
    int H = a->H;
    int hd = a->hd;
    const float *qkv = a->qkv;
    float *o = a->o;
    float *lse = a->lse;
    float *scratch = a->scratch;
    long bh;
    int D = H * hd;
    float scale = 1.0f / sqrtf((float)hd);
    for (bh = i0; bh < i1; bh++) {
        int b = (int)(bh / H), h = (int)(bh % H), i, j, t = 0;
        float *p;
        t = tr__thread_id();
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
TR__FN void tr__attention_fwd_ref(int B, int S, int H, int hd, const float *qkv, float *o, float *lse, float *scratch, int nthreads) {
    tr__attention_fwd_args a = {S, H, hd, qkv, o, lse, scratch};
    tr__par_for(nthreads, (long)B * H, 0, tr__attention_fwd_range, &a);
}

/* Backward of the attention: dqkv ([B,S,3D], overwritten) from do_ ([B,S,D]). */
typedef struct tr__attention_bwd_args { int S; int H; int hd; const float *qkv; const float *o; const float *lse; const float *do_; float *dqkv; float *scratch; } tr__attention_bwd_args;
TR__FN void tr__attention_bwd_range(void *arg, long i0, long i1) {
    const tr__attention_bwd_args *a = (const tr__attention_bwd_args *)arg;
    int S = a->S;
    int H = a->H;
    int hd = a->hd;
    const float *qkv = a->qkv;
    const float *o = a->o;
    const float *lse = a->lse;
    const float *do_ = a->do_;
    float *dqkv = a->dqkv;
    float *scratch = a->scratch;
    long bh;
    int D = H * hd;
    float scale = 1.0f / sqrtf((float)hd);
    for (bh = i0; bh < i1; bh++) {
        int b = (int)(bh / H), h = (int)(bh % H), i, j, c, t = 0;
        float *dp;
        t = tr__thread_id();
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
TR__FN void tr__attention_bwd_ref(int B, int S, int H, int hd, const float *qkv, const float *o, const float *lse, const float *do_, float *dqkv, float *scratch, int nthreads) {
    tr__attention_bwd_args a = {S, H, hd, qkv, o, lse, do_, dqkv, scratch};
    tr__par_for(nthreads, (long)B * H, 0, tr__attention_bwd_range, &a);
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
typedef struct tr__adam_atan2_args { float *p; const float *g; float *m; float *v; float lr; float wd; float beta1; float beta2; float bc1; float bc2; } tr__adam_atan2_args;
TR__FN void tr__adam_atan2_range(void *arg, long i0, long i1) {
    const tr__adam_atan2_args *a = (const tr__adam_atan2_args *)arg;
    float *p = a->p;
    const float *g = a->g;
    float *m = a->m;
    float *v = a->v;
    float lr = a->lr;
    float wd = a->wd;
    float beta1 = a->beta1;
    float beta2 = a->beta2;
    float bc1 = a->bc1;
    float bc2 = a->bc2;
    long i;
    float decay = 1.0f - lr * wd, step = lr / bc1, sbc2 = sqrtf(bc2);
    for (i = i0; i < i1; i++) {
        float pi = p[i] * decay;
        float mi = m[i] + (1.0f - beta1) * (g[i] - m[i]);
        float vi = v[i] + (1.0f - beta2) * (g[i] * g[i] - v[i]);
        m[i] = mi;
        v[i] = vi;
        p[i] = pi - step * atan2f(mi, sqrtf(vi) / sbc2);
    }
}
TR__FN void tr__adam_atan2_ref(size_t n, float *p, const float *g, float *m, float *v, float lr, float wd, float beta1, float beta2, float bc1, float bc2, int nthreads) {
    tr__adam_atan2_args a = {p, g, m, v, lr, wd, beta1, beta2, bc1, bc2};
    tr__par_for(nthreads, (long)n, 0, tr__adam_atan2_range, &a);
}

typedef struct tr__ema_args { float *shadow; const float *p; float decay; } tr__ema_args;
TR__FN void tr__ema_range(void *arg, long i0, long i1) {
    const tr__ema_args *a = (const tr__ema_args *)arg;
    float *shadow = a->shadow;
    const float *p = a->p;
    float decay = a->decay;
    long i;
    for (i = i0; i < i1; i++) shadow[i] = (1.0f - decay) * p[i] + decay * shadow[i];
}
TR__FN void tr__ema_ref(size_t n, float *shadow, const float *p, float decay, int nthreads) {
    tr__ema_args a = {shadow, p, decay};
    tr__par_for(nthreads, (long)n, 0, tr__ema_range, &a);
}

#if TR__NEON
/* --- NEON twins of the elementwise kernels: RoPE and the EMA, the scalar formulas on 4 lanes in
   the same operation order (nothing fused), so they round as the scalar ones do. */
TR__FN void tr__rope_range_neon(void *arg, long i0, long i1) {
    const tr__rope_args *a = (const tr__rope_args *)arg;
    int half = a->hd / 2, D = a->H * a->hd, h, j, qk;
    float sgn = a->inverse ? -1.0f : 1.0f;
    float32x4_t sg = vdupq_n_f32(sgn);
    long r;
    for (r = i0; r < i1; r++) {
        int pos = (int)(r % a->S);
        const float *c = a->cosv + (size_t)pos * a->hd, *sn = a->sinv + (size_t)pos * a->hd;
        for (qk = 0; qk < 2; qk++)
            for (h = 0; h < a->H; h++) {
                float *v = a->qkv + (size_t)r * 3 * D + (size_t)qk * D + (size_t)h * a->hd;
                for (j = 0; j + 4 <= half; j += 4) {
                    float32x4_t x1 = vld1q_f32(v + j), x2 = vld1q_f32(v + j + half);
                    vst1q_f32(v + j, vsubq_f32(vmulq_f32(x1, vld1q_f32(c + j)), vmulq_f32(vmulq_f32(sg, x2), vld1q_f32(sn + j))));
                    vst1q_f32(v + j + half, vaddq_f32(vmulq_f32(x2, vld1q_f32(c + j + half)), vmulq_f32(vmulq_f32(sg, x1), vld1q_f32(sn + j + half))));
                }
                for (; j < half; j++) {
                    float x1 = v[j], x2 = v[j + half];
                    v[j] = x1 * c[j] - sgn * x2 * sn[j];
                    v[j + half] = x2 * c[j + half] + sgn * x1 * sn[j + half];
                }
            }
    }
}

TR__FN void tr__ema_range_neon(void *arg, long i0, long i1) {
    const tr__ema_args *a = (const tr__ema_args *)arg;
    float32x4_t keep = vdupq_n_f32(a->decay), take = vdupq_n_f32(1.0f - a->decay);
    long i = i0;
    for (; i + 4 <= i1; i += 4) vst1q_f32(a->shadow + i, vaddq_f32(vmulq_f32(take, vld1q_f32(a->p + i)), vmulq_f32(keep, vld1q_f32(a->shadow + i))));
    if (i < i1) tr__ema_range(arg, i, i1);
}

/* atan2(y, x) for x >= 0 (Adam-atan2's denominator is a square root): the smaller magnitude over
   the larger, atan(t) = t + t^3 P(t^2) on [0, 1] (Arm optimized-routines' minimax coefficients;
   abs. error ~1.2e-7 in float), reflected as pi/2 - atan where |y| > x, and y's sign. 0 where
   both are 0, as atan2f(+-0, 0) = +-0; NaN in, NaN out. */
static inline float32x4_t tr__atan2_pos128(float32x4_t y, float32x4_t x) {
    float32x4_t ay = vabsq_f32(y), hi = vmaxq_f32(ay, x), lo = vminq_f32(ay, x), t, z, p, a;
    uint32x4_t swap = vcgtq_f32(ay, x), none = vceqq_f32(hi, vdupq_n_f32(0.0f));
    t = vdivq_f32(lo, vbslq_f32(none, vdupq_n_f32(1.0f), hi));
    z = vmulq_f32(t, t);
    p = vdupq_n_f32(3.936620429e-03f);
    p = vfmaq_f32(vdupq_n_f32(-2.027806640e-02f), p, z);
    p = vfmaq_f32(vdupq_n_f32(4.927194118e-02f), p, z);
    p = vfmaq_f32(vdupq_n_f32(-8.035188168e-02f), p, z);
    p = vfmaq_f32(vdupq_n_f32(1.087526381e-01f), p, z);
    p = vfmaq_f32(vdupq_n_f32(-1.425878853e-01f), p, z);
    p = vfmaq_f32(vdupq_n_f32(1.999881119e-01f), p, z);
    p = vfmaq_f32(vdupq_n_f32(-3.333332539e-01f), p, z);
    a = vfmaq_f32(t, vmulq_f32(t, z), p);
    a = vbslq_f32(swap, vsubq_f32(vdupq_n_f32(1.57079632679489662f), a), a);
    return vreinterpretq_f32_u32(vorrq_u32(vreinterpretq_u32_f32(a), vandq_u32(vreinterpretq_u32_f32(y), vdupq_n_u32(0x80000000u))));
}

/* Adam-atan2 as tr__adam_atan2_range: the moments in the same operations (they match to the
   bit), the update through the vector atan2 above; the tail is the scalar twin's. */
TR__FN void tr__adam_atan2_range_neon(void *arg, long i0, long i1) {
    const tr__adam_atan2_args *a = (const tr__adam_atan2_args *)arg;
    float32x4_t decay = vdupq_n_f32(1.0f - a->lr * a->wd), step = vdupq_n_f32(a->lr / a->bc1), sbc2 = vdupq_n_f32(sqrtf(a->bc2));
    float32x4_t k1 = vdupq_n_f32(1.0f - a->beta1), k2 = vdupq_n_f32(1.0f - a->beta2);
    long i = i0;
    for (; i + 4 <= i1; i += 4) {
        float32x4_t g = vld1q_f32(a->g + i), m = vld1q_f32(a->m + i), v = vld1q_f32(a->v + i), p = vmulq_f32(vld1q_f32(a->p + i), decay);
        m = vaddq_f32(m, vmulq_f32(k1, vsubq_f32(g, m)));
        v = vaddq_f32(v, vmulq_f32(k2, vsubq_f32(vmulq_f32(g, g), v)));
        vst1q_f32(a->m + i, m);
        vst1q_f32(a->v + i, v);
        vst1q_f32(a->p + i, vsubq_f32(p, vmulq_f32(step, tr__atan2_pos128(m, vdivq_f32(vsqrtq_f32(v), sbc2)))));
    }
    if (i < i1) tr__adam_atan2_range(arg, i, i1);
}
#endif /* TR__NEON */

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
#if TR__X86 || TR__NEON
/* exp(x) = 2^n * p(r), r = x - n ln2 (ln2 split in two for accuracy), p a degree-7 polynomial:
   the constants both vector widths share. */
#define TR__EXP_LN2_HI 0.693359375f
#define TR__EXP_LN2_LO -2.12194440e-4f
#define TR__EXP_P0 1.9875691500e-4f
#define TR__EXP_P1 1.3981999507e-3f
#define TR__EXP_P2 8.3334519073e-3f
#define TR__EXP_P3 4.1665795894e-2f
#define TR__EXP_P4 1.6666665459e-1f
#define TR__EXP_P5 5.0000001201e-1f
#endif
#if TR__X86
/* exp for x in float range via 2^n * p(r), max rel. error ~2 ulp; saturates outside [-87, 88]. */
TR__TARGET_AVX512 static inline __m512 tr__exp512(__m512 x) {
    const __m512 log2e = _mm512_set1_ps(1.44269504f), ln2hi = _mm512_set1_ps(TR__EXP_LN2_HI), ln2lo = _mm512_set1_ps(TR__EXP_LN2_LO);
    __m512 n, r, p;
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.3f));
    n = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm512_fnmadd_ps(n, ln2hi, x);
    r = _mm512_fnmadd_ps(n, ln2lo, r);
    p = _mm512_set1_ps(TR__EXP_P0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(TR__EXP_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(TR__EXP_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(TR__EXP_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(TR__EXP_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(TR__EXP_P5));
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

/* x rounded to bfloat16 (fdt 1, tr__bf16_round_bits) or float16 (fdt 2, the F16C conversion's rounding) in 16 lanes;
   x itself for fdt 0 */
TR__TARGET_AVX512 static inline __m512 tr__round512(int fdt, __m512 x) {
    __m512i u = _mm512_castps_si512(x), r;
    __mmask16 nan;
    if (fdt == 0) return x;
    if (fdt != TR_FWD_BFLOAT16) return _mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))));
    nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x00400000));
    return _mm512_castsi512_ps(_mm512_and_si512(r, _mm512_set1_epi32((int)0xffff0000u)));
}
/* SwiGLU rows: silu(gate) * up; in a reduced precision fdt, silu rounded, times up, rounded (tr__swiglu_fwd_range's
   order) in registers: the same bits as the fp32 row followed by rounding passes, in one pass over the row. */
TR__TARGET_AVX512 static void tr__swiglu_fwd_lp_row512(long width, const float *gate, float *o, int fdt) {
    const float *up = gate + width;
    long j;
    for (j = 0; j < width; j += 16) {
        __mmask16 k = width - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (width - j)) - 1);
        __m512 x = _mm512_maskz_loadu_ps(k, gate + j), u = _mm512_maskz_loadu_ps(k, up + j);
        __m512 e = tr__exp512(_mm512_sub_ps(_mm512_setzero_ps(), x));
        __m512 sv = tr__round512(fdt, _mm512_mul_ps(x, tr__rcp512(_mm512_add_ps(_mm512_set1_ps(1.0f), e))));
        _mm512_mask_storeu_ps(o + j, k, tr__round512(fdt, _mm512_mul_ps(sv, u)));
    }
}
TR__TARGET_AVX512 static void tr__swiglu_fwd_row512(long width, const float *gate, float *o) { tr__swiglu_fwd_lp_row512(width, gate, o, 0); }

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

/* AVX2 + FMA row kernels: the same math on 8 lanes; tails run the scalar formula. */
TR__TARGET_AVX2 static inline __m256 tr__exp256(__m256 x) {
    const __m256 log2e = _mm256_set1_ps(1.44269504f), ln2hi = _mm256_set1_ps(TR__EXP_LN2_HI), ln2lo = _mm256_set1_ps(TR__EXP_LN2_LO);
    __m256 n, r, p;
    __m256i e;
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
    n = _mm256_round_ps(_mm256_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm256_fnmadd_ps(n, ln2hi, x);
    r = _mm256_fnmadd_ps(n, ln2lo, r);
    p = _mm256_set1_ps(TR__EXP_P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(TR__EXP_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(TR__EXP_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(TR__EXP_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(TR__EXP_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(TR__EXP_P5));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23); /* 2^n, n in [-126, 128) */
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

TR__TARGET_AVX2 static float tr__hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

#endif /* TR__X86 */

#if TR__NEON
/* NEON as the 128-bit width (B = 128: 4 lanes) of the x86 kernels' spelling: the names that the
   width-generic kernels below paste (__m128, _mm128_op) and the AVX2 row kernels use are defined
   here for aarch64 only, where no x86 header declares them, so the NEON twins are the same
   source as the x86 ones. Masks are lane counts; a partial vector's masked load or store goes
   through a 4-float buffer (only at the ends of rows). */
typedef float32x4_t __m128;
typedef long tr__kmask128;
static inline __m128 _mm128_set1_ps(float x) { return vdupq_n_f32(x); }
static inline __m128 _mm128_setzero_ps(void) { return vdupq_n_f32(0.0f); }
static inline __m128 _mm128_loadu_ps(const float *p) { return vld1q_f32(p); }
static inline void _mm128_storeu_ps(float *p, __m128 v) { vst1q_f32(p, v); }
static inline __m128 _mm128_add_ps(__m128 a, __m128 b) { return vaddq_f32(a, b); }
static inline __m128 _mm128_sub_ps(__m128 a, __m128 b) { return vsubq_f32(a, b); }
static inline __m128 _mm128_mul_ps(__m128 a, __m128 b) { return vmulq_f32(a, b); }
static inline __m128 _mm128_div_ps(__m128 a, __m128 b) { return vdivq_f32(a, b); }
static inline __m128 _mm128_sqrt_ps(__m128 a) { return vsqrtq_f32(a); }
static inline __m128 _mm128_fmadd_ps(__m128 a, __m128 b, __m128 c) { return vfmaq_f32(c, a, b); }  /* a b + c, fused */
static inline __m128 _mm128_fnmadd_ps(__m128 a, __m128 b, __m128 c) { return vfmsq_f32(c, a, b); } /* c - a b, fused */
static inline long tr__mask128(long left) { return TR__MIN(left, 4); }
static inline uint32x4_t tr__lanes128(long k) {
    static const uint32_t idx[4] = {0, 1, 2, 3};
    return vcltq_u32(vld1q_u32(idx), vdupq_n_u32((uint32_t)TR__MAX(k, 0)));
}
static inline __m128 tr__load128(long k, const float *p) {
    float t[4] = {0, 0, 0, 0};
    if (k >= 4) return vld1q_f32(p);
    if (k > 0) memcpy(t, p, (size_t)k * sizeof(float));
    return vld1q_f32(t);
}
static inline void tr__store128(float *p, long k, __m128 v) {
    float t[4];
    if (k >= 4) {
        vst1q_f32(p, v);
        return;
    }
    vst1q_f32(t, v);
    if (k > 0) memcpy(p, t, (size_t)k * sizeof(float));
}
static inline __m128 tr__keep128(long k, __m128 v) { return vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(v), tr__lanes128(k))); }
static inline __m128 tr__max_in128(__m128 a, long k, __m128 b) { return vbslq_f32(tr__lanes128(k), vmaxq_f32(a, b), a); }
static inline float tr__hsum128(__m128 v) { return vaddvq_f32(v); }
static inline float tr__hmax128(__m128 v) { return vmaxvq_f32(v); }
/* exp as tr__exp256: the same reduction and polynomial, 2^n put into the exponent. */
static inline __m128 tr__exp128(__m128 x) {
    const __m128 log2e = vdupq_n_f32(1.44269504f), ln2hi = vdupq_n_f32(TR__EXP_LN2_HI), ln2lo = vdupq_n_f32(TR__EXP_LN2_LO);
    __m128 n, r, p;
    int32x4_t e;
    x = vminq_f32(vmaxq_f32(x, vdupq_n_f32(-87.3f)), vdupq_n_f32(88.3f));
    n = vrndnq_f32(vmulq_f32(x, log2e));
    r = vfmsq_f32(x, n, ln2hi);
    r = vfmsq_f32(r, n, ln2lo);
    p = vdupq_n_f32(TR__EXP_P0);
    p = vfmaq_f32(vdupq_n_f32(TR__EXP_P1), p, r);
    p = vfmaq_f32(vdupq_n_f32(TR__EXP_P2), p, r);
    p = vfmaq_f32(vdupq_n_f32(TR__EXP_P3), p, r);
    p = vfmaq_f32(vdupq_n_f32(TR__EXP_P4), p, r);
    p = vfmaq_f32(vdupq_n_f32(TR__EXP_P5), p, r);
    p = vfmaq_f32(vaddq_f32(r, vdupq_n_f32(1.0f)), p, vmulq_f32(r, r));
    e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23); /* 2^n, n in [-126, 128) */
    return vmulq_f32(p, vreinterpretq_f32_s32(e));
}

#endif /* TR__NEON */

/* Width-generic kernels: one body each, instantiated for AVX-512 (B = 512: 16 lanes, mask
   registers) and AVX2 (B = 256: 8 lanes, vector masks, masked loads that do not fault past the
   end), so the two sets cannot drift apart. Per element, both widths run the same operations in
   the same order (sums along S or hd are per lane); only the horizontal reductions (the softmax
   denominator) regroup. TR__MM(B, op) names the intrinsic _mm<B>_op; the operations whose names
   differ between the widths are the small functions below. */
#if TR__X86 || TR__NEON
#define TR__MM(B, op) _mm##B##_##op
#define TR__LANES(B) ((B) / 32)
#endif
#if TR__X86
typedef __mmask16 tr__kmask512;
typedef __m256i tr__kmask256;
/* The first `left` lanes (0 <= left; all of them from 16 / 8 on). */
TR__TARGET_AVX512 static inline __mmask16 tr__mask512(long left) { return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1); }
TR__TARGET_AVX2 static inline __m256i tr__mask256(long left) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)TR__MIN(left, 8)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
/* Masked load (zeros outside k), masked store, v zeroed outside k, max(a, b) inside k. */
TR__TARGET_AVX512 static inline __m512 tr__load512(__mmask16 k, const float *p) { return _mm512_maskz_loadu_ps(k, p); }
TR__TARGET_AVX2 static inline __m256 tr__load256(__m256i k, const float *p) { return _mm256_maskload_ps(p, k); }
TR__TARGET_AVX512 static inline void tr__store512(float *p, __mmask16 k, __m512 v) { _mm512_mask_storeu_ps(p, k, v); }
TR__TARGET_AVX2 static inline void tr__store256(float *p, __m256i k, __m256 v) { _mm256_maskstore_ps(p, k, v); }
TR__TARGET_AVX512 static inline __m512 tr__keep512(__mmask16 k, __m512 v) { return _mm512_maskz_mov_ps(k, v); }
TR__TARGET_AVX2 static inline __m256 tr__keep256(__m256i k, __m256 v) { return _mm256_and_ps(v, _mm256_castsi256_ps(k)); }
TR__TARGET_AVX512 static inline __m512 tr__max_in512(__m512 a, __mmask16 k, __m512 b) { return _mm512_mask_max_ps(a, k, a, b); }
TR__TARGET_AVX2 static inline __m256 tr__max_in256(__m256 a, __m256i k, __m256 b) { return _mm256_blendv_ps(a, _mm256_max_ps(a, b), _mm256_castsi256_ps(k)); }
TR__TARGET_AVX512 static inline float tr__hsum512(__m512 v) { return _mm512_reduce_add_ps(v); }
TR__TARGET_AVX512 static inline float tr__hmax512(__m512 v) { return _mm512_reduce_max_ps(v); }
TR__TARGET_AVX2 static inline float tr__hmax256(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}
#endif /* TR__X86 */

#if TR__X86 || TR__NEON
/* The sequence-axis RMSNorm for one batch row and channels [j0, j0 + 64): 64 / lanes
   accumulators run down the S positions (fp32 sums of S squares, S ~ 100..1000). */
#define TR__RMS_COLS_TASKS(B, TARGET)                                                                                    \
    TARGET static void tr__rms_cols_task_fwd##B(int S, int D, int j0, const float *x, const float *add, float *out, float *rstd, float eps) { \
        enum { L = TR__LANES(B), NQ = 64 / L };                                                                         \
        __m##B acc[NQ];                                                                                                 \
        tr__kmask##B mk[NQ];                                                                                            \
        int s, q, nq = TR__MIN(64, D - j0);                                                                             \
        for (q = 0; q < NQ; q++) {                                                                                      \
            mk[q] = tr__mask##B(TR__MAX(nq - L * q, 0));                                                                \
            acc[q] = TR__MM(B, setzero_ps)();                                                                           \
        }                                                                                                               \
        for (s = 0; s < S; s++)                                                                                         \
            for (q = 0; q < NQ; q++) {                                                                                  \
                size_t i = (size_t)s * D + j0 + L * q;                                                                  \
                __m##B v = tr__load##B(mk[q], x + i);                                                                   \
                if (add) v = TR__MM(B, add_ps)(v, tr__load##B(mk[q], add + i));                                         \
                tr__store##B(out + i, mk[q], v);                                                                        \
                acc[q] = TR__MM(B, fmadd_ps)(v, v, acc[q]);                                                             \
            }                                                                                                           \
        for (q = 0; q < NQ; q++) {                                                                                      \
            __m##B ms = TR__MM(B, div_ps)(acc[q], TR__MM(B, set1_ps)((float)S));                                        \
            __m##B r = TR__MM(B, div_ps)(TR__MM(B, set1_ps)(1.0f), TR__MM(B, sqrt_ps)(TR__MM(B, add_ps)(ms, TR__MM(B, set1_ps)(eps)))); \
            tr__store##B(rstd + j0 + L * q, mk[q], r);                                                                  \
            acc[q] = r;                                                                                                 \
        }                                                                                                               \
        for (s = 0; s < S; s++)                                                                                         \
            for (q = 0; q < NQ; q++) {                                                                                  \
                size_t i = (size_t)s * D + j0 + L * q;                                                                  \
                tr__store##B(out + i, mk[q], TR__MM(B, mul_ps)(tr__load##B(mk[q], out + i), acc[q]));                   \
            }                                                                                                           \
    }                                                                                                                   \
    TARGET static void tr__rms_cols_task_bwd##B(int S, int D, int j0, const float *dy, const float *y, const float *rstd, float *dx) { \
        enum { L = TR__LANES(B), NQ = 64 / L };                                                                         \
        __m##B dot[NQ], rs[NQ];                                                                                         \
        tr__kmask##B mk[NQ];                                                                                            \
        int s, q, nq = TR__MIN(64, D - j0);                                                                             \
        for (q = 0; q < NQ; q++) {                                                                                      \
            mk[q] = tr__mask##B(TR__MAX(nq - L * q, 0));                                                                \
            dot[q] = TR__MM(B, setzero_ps)();                                                                           \
            rs[q] = tr__load##B(mk[q], rstd + j0 + L * q);                                                              \
        }                                                                                                               \
        for (s = 0; s < S; s++)                                                                                         \
            for (q = 0; q < NQ; q++) {                                                                                  \
                size_t i = (size_t)s * D + j0 + L * q;                                                                  \
                dot[q] = TR__MM(B, fmadd_ps)(tr__load##B(mk[q], dy + i), tr__load##B(mk[q], y + i), dot[q]);            \
            }                                                                                                           \
        for (q = 0; q < NQ; q++) dot[q] = TR__MM(B, div_ps)(dot[q], TR__MM(B, set1_ps)((float)S));                      \
        for (s = 0; s < S; s++)                                                                                         \
            for (q = 0; q < NQ; q++) {                                                                                  \
                size_t i = (size_t)s * D + j0 + L * q;                                                                  \
                __m##B v = TR__MM(B, fnmadd_ps)(tr__load##B(mk[q], y + i), dot[q], tr__load##B(mk[q], dy + i));         \
                tr__store##B(dx + i, mk[q], TR__MM(B, mul_ps)(v, rs[q]));                                               \
            }                                                                                                           \
    }
/* The row kernels of SwiGLU and the row RMSNorm on unmasked vectors of B bits (tails run the scalar
   formula): AVX2 (256) and NEON (128). */
#define TR__ROW_KERNELS(B, TARGET)                                                                                                                 \
TARGET static void tr__swiglu_fwd_row##B(long width, const float *gate, float *o) {                                                                \
    const float *up = gate + width;                                                                                                                \
    const __m##B one = TR__MM(B, set1_ps)(1.0f);                                                                                                   \
    long j = 0;                                                                                                                                    \
    for (; j + TR__LANES(B) <= width; j += TR__LANES(B)) {                                                                                         \
        __m##B x = TR__MM(B, loadu_ps)(gate + j);                                                                                                  \
        __m##B sv = TR__MM(B, div_ps)(x, TR__MM(B, add_ps)(one, tr__exp##B(TR__MM(B, sub_ps)(TR__MM(B, setzero_ps)(), x))));                       \
        TR__MM(B, storeu_ps)(o + j, TR__MM(B, mul_ps)(sv, TR__MM(B, loadu_ps)(up + j)));                                                           \
    }                                                                                                                                              \
    for (; j < width; j++) o[j] = tr__silu(gate[j]) * up[j];                                                                                       \
}                                                                                                                                                  \
                                                                                                                                                   \
TARGET static void tr__swiglu_bwd_row##B(long width, const float *gate, const float *d, float *dgate) {                                            \
    const float *up = gate + width;                                                                                                                \
    float *dup = dgate + width;                                                                                                                    \
    const __m##B one = TR__MM(B, set1_ps)(1.0f);                                                                                                   \
    long j = 0;                                                                                                                                    \
    for (; j + TR__LANES(B) <= width; j += TR__LANES(B)) {                                                                                         \
        __m##B x = TR__MM(B, loadu_ps)(gate + j), u = TR__MM(B, loadu_ps)(up + j), dv = TR__MM(B, loadu_ps)(d + j);                                \
        __m##B sg = TR__MM(B, div_ps)(one, TR__MM(B, add_ps)(one, tr__exp##B(TR__MM(B, sub_ps)(TR__MM(B, setzero_ps)(), x))));                     \
        __m##B dsil = TR__MM(B, mul_ps)(sg, TR__MM(B, fmadd_ps)(x, TR__MM(B, sub_ps)(one, sg), one));                                              \
        TR__MM(B, storeu_ps)(dgate + j, TR__MM(B, mul_ps)(TR__MM(B, mul_ps)(dv, u), dsil));                                                        \
        TR__MM(B, storeu_ps)(dup + j, TR__MM(B, mul_ps)(dv, TR__MM(B, mul_ps)(x, sg)));                                                            \
    }                                                                                                                                              \
    for (; j < width; j++) {                                                                                                                       \
        float sg = 1.0f / (1.0f + expf(-gate[j]));                                                                                                 \
        dgate[j] = d[j] * up[j] * (sg * (1.0f + gate[j] * (1.0f - sg)));                                                                           \
        dup[j] = d[j] * gate[j] * sg;                                                                                                              \
    }                                                                                                                                              \
}                                                                                                                                                  \
                                                                                                                                                   \
TARGET static float tr__rms_row_fwd##B(int D, const float *xr, const float *ar, float *o, float eps) {                                             \
    __m##B acc = TR__MM(B, setzero_ps)(), inv;                                                                                                     \
    float ss, invs;                                                                                                                                \
    int j = 0;                                                                                                                                     \
    for (; j + TR__LANES(B) <= D; j += TR__LANES(B)) {                                                                                             \
        __m##B v = TR__MM(B, loadu_ps)(xr + j);                                                                                                    \
        if (ar) v = TR__MM(B, add_ps)(v, TR__MM(B, loadu_ps)(ar + j));                                                                             \
        TR__MM(B, storeu_ps)(o + j, v);                                                                                                            \
        acc = TR__MM(B, fmadd_ps)(v, v, acc);                                                                                                      \
    }                                                                                                                                              \
    ss = tr__hsum##B(acc);                                                                                                                         \
    for (; j < D; j++) {                                                                                                                           \
        float v = ar ? xr[j] + ar[j] : xr[j];                                                                                                      \
        o[j] = v;                                                                                                                                  \
        ss += v * v;                                                                                                                               \
    }                                                                                                                                              \
    invs = (float)(1.0 / sqrt((double)ss / D + eps));                                                                                              \
    inv = TR__MM(B, set1_ps)(invs);                                                                                                                \
    for (j = 0; j + TR__LANES(B) <= D; j += TR__LANES(B)) TR__MM(B, storeu_ps)(o + j, TR__MM(B, mul_ps)(TR__MM(B, loadu_ps)(o + j), inv));         \
    for (; j < D; j++) o[j] *= invs;                                                                                                               \
    return invs;                                                                                                                                   \
}                                                                                                                                                  \
                                                                                                                                                   \
TARGET static void tr__rms_row_bwd##B(int D, const float *dyr, const float *yr, float rstd, float *o) {                                            \
    __m##B acc = TR__MM(B, setzero_ps)(), mean, rs = TR__MM(B, set1_ps)(rstd);                                                                     \
    float dot, m;                                                                                                                                  \
    int j = 0;                                                                                                                                     \
    for (; j + TR__LANES(B) <= D; j += TR__LANES(B)) acc = TR__MM(B, fmadd_ps)(TR__MM(B, loadu_ps)(dyr + j), TR__MM(B, loadu_ps)(yr + j), acc);    \
    dot = tr__hsum##B(acc);                                                                                                                        \
    for (; j < D; j++) dot += dyr[j] * yr[j];                                                                                                      \
    m = dot / (float)D;                                                                                                                            \
    mean = TR__MM(B, set1_ps)(m);                                                                                                                  \
    for (j = 0; j + TR__LANES(B) <= D; j += TR__LANES(B))                                                                                          \
        TR__MM(B, storeu_ps)(o + j, TR__MM(B, mul_ps)(TR__MM(B, fnmadd_ps)(TR__MM(B, loadu_ps)(yr + j), mean, TR__MM(B, loadu_ps)(dyr + j)), rs)); \
    for (; j < D; j++) o[j] = rstd * (dyr[j] - yr[j] * m);                                                                                         \
}
#if TR__X86
TR__RMS_COLS_TASKS(512, TR__TARGET_AVX512)
TR__RMS_COLS_TASKS(256, TR__TARGET_AVX2)
TR__ROW_KERNELS(256, TR__TARGET_AVX2)
#else
TR__RMS_COLS_TASKS(128, )
TR__ROW_KERNELS(128, )
#endif

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

/* Attention on one (batch, head), reading K and V as gathered by tr__att_gather. */
#define TR__ATT_KERNELS(B, TARGET)                                                                                       \
    /* scores[j] = scale * q . K[j] over all keys from the transposed Kt [hd][Sp]; returns the max. Sp is a           \
       multiple of 16, so the loads of Kt never need a mask. */                                                        \
    TARGET static float tr__att_scores##B(const float *q, const float *Kt, int S, size_t Sp, int hd, float scale, float *p) { \
        int c;                                                                                                          \
        long j;                                                                                                         \
        __m##B vmax = TR__MM(B, set1_ps)(-INFINITY);                                                                    \
        for (j = 0; j < S; j += TR__LANES(B)) {                                                                         \
            tr__kmask##B k = tr__mask##B(S - j);                                                                        \
            __m##B acc = TR__MM(B, setzero_ps)();                                                                       \
            for (c = 0; c < hd; c++) acc = TR__MM(B, fmadd_ps)(TR__MM(B, set1_ps)(q[c]), TR__MM(B, loadu_ps)(Kt + (size_t)c * Sp + j), acc); \
            acc = TR__MM(B, mul_ps)(acc, TR__MM(B, set1_ps)(scale));                                                    \
            tr__store##B(p + j, k, acc);                                                                                \
            vmax = tr__max_in##B(vmax, k, acc);                                                                         \
        }                                                                                                               \
        return tr__hmax##B(vmax);                                                                                       \
    }                                                                                                                   \
    /* out[c] (+)= sum_j w[j] * M[j][c] for a row-major M [S][hd]; hd a multiple of the lanes or masked. */            \
    TARGET static void tr__att_wsum##B(const float *w, const float *M, int S, int hd, float *out, int accumulate) {    \
        int c, j;                                                                                                       \
        for (c = 0; c < hd; c += TR__LANES(B)) {                                                                        \
            tr__kmask##B k = tr__mask##B(hd - c);                                                                       \
            __m##B acc = accumulate ? tr__load##B(k, out + c) : TR__MM(B, setzero_ps)();                                \
            for (j = 0; j < S; j++) acc = TR__MM(B, fmadd_ps)(TR__MM(B, set1_ps)(w[j]), tr__load##B(k, M + (size_t)j * hd + c), acc); \
            tr__store##B(out + c, k, acc);                                                                              \
        }                                                                                                               \
    }                                                                                                                   \
    /* The forward; `scratch` is this thread's tr__attention_scratch_floats. */                                        \
    TARGET static void tr__attention_fwd_bh##B(int b, int h, int S, int H, int hd, const float *qkv, float *o, float *lse, float *scratch) { \
        int D = H * hd, i;                                                                                              \
        size_t Sp = TR__ATT_PAD((size_t)S);                                                                             \
        float scale = 1.0f / sqrtf((float)hd);                                                                          \
        float *K, *Kt, *V, *Vt, *p;                                                                                     \
        long j;                                                                                                         \
        K = scratch, Kt = K + Sp * hd, V = Kt + Sp * hd, Vt = V + Sp * hd, p = Vt + Sp * hd;                            \
        tr__att_gather(qkv, b, h, S, D, hd, Sp, K, Kt, V, Vt);                                                          \
        for (i = 0; i < S; i++) {                                                                                       \
            const float *q = qkv + ((size_t)b * S + i) * 3 * D + (size_t)h * hd;                                        \
            float mx = tr__att_scores##B(q, Kt, S, Sp, hd, scale, p), sum, inv;                                         \
            __m##B vs = TR__MM(B, setzero_ps)(), vm = TR__MM(B, set1_ps)(mx);                                           \
            for (j = 0; j < S; j += TR__LANES(B)) {                                                                     \
                tr__kmask##B k = tr__mask##B(S - j);                                                                    \
                __m##B e = tr__exp##B(TR__MM(B, sub_ps)(tr__load##B(k, p + j), vm));                                   \
                e = tr__keep##B(k, e);                                                                                  \
                tr__store##B(p + j, k, e);                                                                              \
                vs = TR__MM(B, add_ps)(vs, e);                                                                          \
            }                                                                                                           \
            sum = tr__hsum##B(vs);                                                                                      \
            inv = 1.0f / sum;                                                                                           \
            for (j = 0; j < S; j++) p[j] *= inv;                                                                        \
            tr__att_wsum##B(p, V, S, hd, o + ((size_t)b * S + i) * D + (size_t)h * hd, 0);                              \
            lse[((size_t)b * H + h) * S + i] = mx + logf(sum);                                                          \
        }                                                                                                               \
    }                                                                                                                   \
    /* The backward. */                                                                                                 \
    TARGET static void tr__attention_bwd_bh##B(int b, int h, int S, int H, int hd, const float *qkv, const float *o, const float *lse, const float *do_, float *dqkv, float *scratch) { \
        int D = H * hd, i, j, c;                                                                                        \
        size_t Sp = TR__ATT_PAD((size_t)S);                                                                             \
        float scale = 1.0f / sqrtf((float)hd);                                                                          \
        float *K, *Kt, *V, *Vt, *p, *dp, *dK, *dV;                                                                      \
        K = scratch, Kt = K + Sp * hd, V = Kt + Sp * hd, Vt = V + Sp * hd, p = Vt + Sp * hd, dp = p + Sp;               \
        dK = dp + Sp, dV = dK + (size_t)S * hd;                                                                         \
        tr__att_gather(qkv, b, h, S, D, hd, Sp, K, Kt, V, Vt);                                                          \
        memset(dK, 0, 2 * (size_t)S * hd * sizeof(float));                                                             \
        for (i = 0; i < S; i++) {                                                                                       \
            const float *q = qkv + ((size_t)b * S + i) * 3 * D + (size_t)h * hd;                                        \
            const float *doi = do_ + ((size_t)b * S + i) * D + (size_t)h * hd;                                          \
            const float *oi = o + ((size_t)b * S + i) * D + (size_t)h * hd;                                             \
            float *dq = dqkv + ((size_t)b * S + i) * 3 * D + (size_t)h * hd;                                            \
            float l = lse[((size_t)b * H + h) * S + i], di = 0;                                                         \
            __m##B vl = TR__MM(B, set1_ps)(l);                                                                          \
            for (c = 0; c < hd; c++) di += doi[c] * oi[c];                                                              \
            tr__att_scores##B(q, Kt, S, Sp, hd, scale, p);                                                              \
            tr__att_scores##B(doi, Vt, S, Sp, hd, 1.0f, dp); /* dP[j] = dO . V[j] */                                    \
            for (j = 0; j < S; j += TR__LANES(B)) {                                                                     \
                tr__kmask##B k = tr__mask##B(S - j);                                                                    \
                __m##B pv = tr__exp##B(TR__MM(B, sub_ps)(tr__load##B(k, p + j), vl));                                  \
                __m##B ds = TR__MM(B, mul_ps)(pv, TR__MM(B, sub_ps)(tr__load##B(k, dp + j), TR__MM(B, set1_ps)(di)));  \
                tr__store##B(p + j, k, pv);                                                                             \
                tr__store##B(dp + j, k, TR__MM(B, mul_ps)(ds, TR__MM(B, set1_ps)(scale)));                              \
            }                                                                                                           \
            tr__att_wsum##B(dp, K, S, hd, dq, 0); /* dQ_i = scale * sum_j dS_ij K_j */                                  \
            for (j = 0; j < S; j++) { /* dK_j += scale dS_ij q_i, dV_j += P_ij dO_i */                                  \
                __m##B a = TR__MM(B, set1_ps)(dp[j]), pw = TR__MM(B, set1_ps)(p[j]);                                    \
                for (c = 0; c < hd; c += TR__LANES(B)) {                                                                \
                    tr__kmask##B k = tr__mask##B(hd - c);                                                               \
                    float *dk = dK + (size_t)j * hd + c, *dv = dV + (size_t)j * hd + c;                                 \
                    tr__store##B(dk, k, TR__MM(B, fmadd_ps)(a, tr__load##B(k, q + c), tr__load##B(k, dk)));            \
                    tr__store##B(dv, k, TR__MM(B, fmadd_ps)(pw, tr__load##B(k, doi + c), tr__load##B(k, dv)));          \
                }                                                                                                       \
            }                                                                                                           \
        }                                                                                                               \
        for (j = 0; j < S; j++) {                                                                                       \
            float *dst = dqkv + ((size_t)b * S + j) * 3 * D + (size_t)h * hd;                                           \
            memcpy(dst + D, dK + (size_t)j * hd, (size_t)hd * sizeof(float));                                          \
            memcpy(dst + 2 * D, dV + (size_t)j * hd, (size_t)hd * sizeof(float));                                      \
        }                                                                                                               \
    }
#if TR__X86
TR__ATT_KERNELS(512, TR__TARGET_AVX512)
TR__ATT_KERNELS(256, TR__TARGET_AVX2)

/* Elementwise kernels: RoPE, the AdamATan2 step and the EMA, one width-generic body each. They
   run the scalar twin's operations in its order and without FMA (RoPE and the EMA are bit-identical
   to it, in every set and at any thread count, where the compiler does not contract a * b + c:
   ISO C modes; GNU C++ may); the one difference is AdamATan2's atan2, a vector
   polynomial (tr__atan2##B, <= 3 ulp, where atan2f is <= 1). Tails are masked lanes, so an element
   gets the same bits wherever a thread's range puts it. Compare, select and bit ops differ between
   the widths: the small functions below. */
TR__TARGET_AVX512 static inline __mmask16 tr__cmp_gt512(__m512 a, __m512 b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
TR__TARGET_AVX2 static inline __m256i tr__cmp_gt256(__m256 a, __m256 b) { return _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_GT_OQ)); }
TR__TARGET_AVX512 static inline __mmask16 tr__cmp_eq512(__m512 a, __m512 b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
TR__TARGET_AVX2 static inline __m256i tr__cmp_eq256(__m256 a, __m256 b) { return _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_EQ_OQ)); }
/* lanes whose sign bit is set (-0.0 included) */
TR__TARGET_AVX512 static inline __mmask16 tr__cmp_neg512(__m512 a) { return _mm512_movepi32_mask(_mm512_castps_si512(a)); }
TR__TARGET_AVX2 static inline __m256i tr__cmp_neg256(__m256 a) { return _mm256_srai_epi32(_mm256_castps_si256(a), 31); }
TR__TARGET_AVX512 static inline __mmask16 tr__cmp_nan512(__m512 a, __m512 b) { return _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q); }
TR__TARGET_AVX2 static inline __m256i tr__cmp_nan256(__m256 a, __m256 b) { return _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_UNORD_Q)); }
/* k ? b : a per lane */
TR__TARGET_AVX512 static inline __m512 tr__sel512(__mmask16 k, __m512 a, __m512 b) { return _mm512_mask_blend_ps(k, a, b); }
TR__TARGET_AVX2 static inline __m256 tr__sel256(__m256i k, __m256 a, __m256 b) { return _mm256_blendv_ps(a, b, _mm256_castsi256_ps(k)); }

/* atan2(y, x), every quadrant, with atan2f's zeros (atan2(+-0, +0) = +-0, atan2(+-0, -0) =
   +-pi), infinities and NaNs. t = min(|x|,|y|) / max(|x|,|y|) in [0, 1]; above tan(pi/8),
   atan t = pi/4 + atan((t - 1) / (t + 1)); on [-tan(pi/8), tan(pi/8)] the Cephes atanf
   polynomial (relative error 1.9e-7); then pi/2 - r where |y| > |x|, pi - r where x < 0 (its
   sign bit), and y's sign. Error <= 3 ulp (test_adam_atan2_simd measures it). */
#define TR__ATAN2(B, TARGET)                                                                                             \
    TARGET static inline __m##B tr__atan2##B(__m##B y, __m##B x) {                                                      \
        const __m##B sign = TR__MM(B, set1_ps)(-0.0f), zero = TR__MM(B, setzero_ps)(), one = TR__MM(B, set1_ps)(1.0f);  \
        const __m##B pi = TR__MM(B, set1_ps)(3.14159265358979f), pi_2 = TR__MM(B, set1_ps)(1.57079632679490f);         \
        __m##B ax = TR__MM(B, andnot_ps)(sign, x), ay = TR__MM(B, andnot_ps)(sign, y);                                  \
        __m##B den = TR__MM(B, max_ps)(ax, ay), t = TR__MM(B, div_ps)(TR__MM(B, min_ps)(ax, ay), den), z, r;             \
        tr__kmask##B big;                                                                                               \
        t = tr__sel##B(tr__cmp_eq##B(den, zero), t, zero); /* 0 / 0 */                                                 \
        t = tr__sel##B(tr__cmp_nan##B(t, t), t, one);       /* inf / inf */                                            \
        big = tr__cmp_gt##B(t, TR__MM(B, set1_ps)(0.414213562373095f));                                                 \
        t = tr__sel##B(big, t, TR__MM(B, div_ps)(TR__MM(B, sub_ps)(t, one), TR__MM(B, add_ps)(t, one)));               \
        z = TR__MM(B, mul_ps)(t, t);                                                                                    \
        r = TR__MM(B, fmadd_ps)(TR__MM(B, set1_ps)(8.05374449538e-2f), z, TR__MM(B, set1_ps)(-1.38776856032e-1f));      \
        r = TR__MM(B, fmadd_ps)(r, z, TR__MM(B, set1_ps)(1.99777106478e-1f));                                           \
        r = TR__MM(B, fmadd_ps)(r, z, TR__MM(B, set1_ps)(-3.33329491539e-1f));                                          \
        r = TR__MM(B, fmadd_ps)(TR__MM(B, mul_ps)(r, z), t, t);                                                         \
        r = TR__MM(B, add_ps)(r, tr__sel##B(big, zero, TR__MM(B, set1_ps)(0.785398163397448f)));                        \
        r = tr__sel##B(tr__cmp_gt##B(ay, ax), r, TR__MM(B, sub_ps)(pi_2, r));                                           \
        r = tr__sel##B(tr__cmp_neg##B(x), r, TR__MM(B, sub_ps)(pi, r));                                                \
        r = TR__MM(B, or_ps)(r, TR__MM(B, and_ps)(y, sign));                                                            \
        return tr__sel##B(tr__cmp_nan##B(x, y), r, TR__MM(B, add_ps)(x, y));                                            \
    }
/* RoPE on one row of qkv (q and k heads; c, sn this position's [hd] tables), as tr__rope_ref. */
#define TR__ELEM_KERNELS(B, TARGET)                                                                                      \
    TR__ATAN2(B, TARGET)                                                                                                \
    TARGET static void tr__rope_row##B(int H, int hd, float *row, const float *c, const float *sn, float sgn) {         \
        int half = hd / 2, D = H * hd, qk, h, j;                                                                        \
        __m##B vs = TR__MM(B, set1_ps)(sgn);                                                                            \
        for (qk = 0; qk < 2; qk++)                                                                                      \
            for (h = 0; h < H; h++) {                                                                                   \
                float *v = row + (size_t)qk * D + (size_t)h * hd;                                                       \
                for (j = 0; j < half; j += TR__LANES(B)) {                                                              \
                    tr__kmask##B k = tr__mask##B(half - j);                                                             \
                    __m##B x1 = tr__load##B(k, v + j), x2 = tr__load##B(k, v + j + half);                               \
                    __m##B y1 = TR__MM(B, sub_ps)(TR__MM(B, mul_ps)(x1, tr__load##B(k, c + j)),                          \
                                                  TR__MM(B, mul_ps)(TR__MM(B, mul_ps)(vs, x2), tr__load##B(k, sn + j)));  \
                    __m##B y2 = TR__MM(B, add_ps)(TR__MM(B, mul_ps)(x2, tr__load##B(k, c + j + half)),                   \
                                                  TR__MM(B, mul_ps)(TR__MM(B, mul_ps)(vs, x1), tr__load##B(k, sn + j + half))); \
                    tr__store##B(v + j, k, y1);                                                                         \
                    tr__store##B(v + j + half, k, y2);                                                                  \
                }                                                                                                       \
            }                                                                                                           \
    }                                                                                                                   \
    /* AdamATan2 on [i0, i1), as tr__adam_atan2_ref with its factors (decay, step, sbc2) formed by the caller. */     \
    TARGET static void tr__adam_atan2_span##B(size_t i0, size_t i1, float *p, const float *g, float *m, float *v, float decay, float step, \
                                              float sbc2, float beta1, float beta2) {                                   \
        const __m##B vdec = TR__MM(B, set1_ps)(decay), vstep = TR__MM(B, set1_ps)(step), vsb = TR__MM(B, set1_ps)(sbc2); \
        const __m##B c1 = TR__MM(B, set1_ps)(1.0f - beta1), c2 = TR__MM(B, set1_ps)(1.0f - beta2);                     \
        size_t i;                                                                                                       \
        for (i = i0; i < i1; i += TR__LANES(B)) {                                                                       \
            tr__kmask##B k = tr__mask##B((long)(i1 - i));                                                              \
            __m##B gi = tr__load##B(k, g + i), mi = tr__load##B(k, m + i), vi = tr__load##B(k, v + i);                  \
            __m##B pi = TR__MM(B, mul_ps)(tr__load##B(k, p + i), vdec);                                                 \
            mi = TR__MM(B, add_ps)(mi, TR__MM(B, mul_ps)(c1, TR__MM(B, sub_ps)(gi, mi)));                               \
            vi = TR__MM(B, add_ps)(vi, TR__MM(B, mul_ps)(c2, TR__MM(B, sub_ps)(TR__MM(B, mul_ps)(gi, gi), vi)));        \
            tr__store##B(m + i, k, mi);                                                                                 \
            tr__store##B(v + i, k, vi);                                                                                 \
            pi = TR__MM(B, sub_ps)(pi, TR__MM(B, mul_ps)(vstep, tr__atan2##B(mi, TR__MM(B, div_ps)(TR__MM(B, sqrt_ps)(vi), vsb)))); \
            tr__store##B(p + i, k, pi);                                                                                 \
        }                                                                                                               \
    }                                                                                                                   \
    TARGET static void tr__ema_span##B(size_t i0, size_t i1, float *shadow, const float *p, float decay) {              \
        const __m##B a = TR__MM(B, set1_ps)(1.0f - decay), d = TR__MM(B, set1_ps)(decay);                               \
        size_t i;                                                                                                       \
        for (i = i0; i < i1; i += TR__LANES(B)) {                                                                       \
            tr__kmask##B k = tr__mask##B((long)(i1 - i));                                                              \
            tr__store##B(shadow + i, k, TR__MM(B, add_ps)(TR__MM(B, mul_ps)(a, tr__load##B(k, p + i)),                  \
                                                          TR__MM(B, mul_ps)(d, tr__load##B(k, shadow + i))));           \
        }                                                                                                               \
    }
TR__ELEM_KERNELS(512, TR__TARGET_AVX512)
TR__ELEM_KERNELS(256, TR__TARGET_AVX2)
/* tr__round_ref on [i0, i1) with 256-bit integer ops (bf16) or F16C (fp16; NaN payloads may differ from the
   scalar twin's, NaN-ness not). Memory-bound, so the avx512 set uses these too. */
/* tr__bf16_round_bits on 8 lanes */
TR__TARGET_F16C static inline __m256i tr__bf16_round256(__m256i u) {
    const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff), hi = _mm256_set1_epi32((int)0xffff0000u);
    const __m256i absm = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000), quiet = _mm256_set1_epi32(0x00400000);
    __m256i r = _mm256_and_si256(_mm256_add_epi32(u, _mm256_add_epi32(bias, _mm256_and_si256(_mm256_srli_epi32(u, 16), one))), hi);
    __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, absm), inf);
    return _mm256_blendv_epi8(r, _mm256_and_si256(_mm256_or_si256(u, quiet), hi), nan);
}
TR__TARGET_F16C static void tr__round_span256(int fdt, float *x, size_t i0, size_t i1) {
    size_t i = i0;
    if (fdt == TR_FWD_BFLOAT16) {
        for (; i + 8 <= i1; i += 8)
            _mm256_storeu_si256((__m256i *)(void *)(x + i), tr__bf16_round256(_mm256_loadu_si256((const __m256i *)(const void *)(x + i))));
    } else
        for (; i + 8 <= i1; i += 8)
            _mm256_storeu_ps(x + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
    tr__round_ref(fdt, x + i, i1 - i);
}
/* tr__half_ref on [i0, i1): bfloat16 is packed with tr__bf16_round256's rounding (then the high halves),
   float16 with F16C (NaN payloads may differ from the scalar twin's, NaN-ness not). */
TR__TARGET_F16C static void tr__half_span256(int fdt, int unpack, float *x, uint16_t *h, size_t i0, size_t i1) {
    size_t i = i0;
    if (unpack && fdt == TR_FWD_BFLOAT16)
        for (; i + 8 <= i1; i += 8)
            _mm256_storeu_si256((__m256i *)(void *)(x + i), _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(h + i))), 16));
    else if (unpack)
        for (; i + 8 <= i1; i += 8) _mm256_storeu_ps(x + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(h + i))));
    else if (fdt == TR_FWD_BFLOAT16)
        for (; i + 8 <= i1; i += 8) {
            __m256i u = _mm256_srli_epi32(tr__bf16_round256(_mm256_loadu_si256((const __m256i *)(const void *)(x + i))), 16);
            /* packus works within 128-bit lanes: both lanes' four words, then the lanes' low halves together */
            u = _mm256_permute4x64_epi64(_mm256_packus_epi32(u, u), 0x08);
            _mm_storeu_si128((__m128i *)(void *)(h + i), _mm256_castsi256_si128(u));
        }
    else
        for (; i + 8 <= i1; i += 8)
            _mm_storeu_si128((__m128i *)(void *)(h + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    tr__half_ref(fdt, unpack, x + i, h + i, i1 - i);
}
#else
TR__ATT_KERNELS(128, )
#endif
#endif /* TR__X86 || TR__NEON */

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

/* Dispatchers: the model calls these; they pick the kernel set of the context and run the
   parallel loops. A SIMD loop's argument block is the reference kernel's plus the chosen set's
   function for one row (or task). */
typedef struct tr__swiglu_fwd_simd { tr__swiglu_fwd_args a; void (*row)(long, const float *, float *); } tr__swiglu_fwd_simd;
TR__FN void tr__swiglu_fwd_simd_range(void *arg, long i0, long i1) {
    const tr__swiglu_fwd_simd *p = (const tr__swiglu_fwd_simd *)arg;
    long r;
    for (r = i0; r < i1; r++) p->row(p->a.width, p->a.g + (size_t)r * p->a.g_stride, p->a.out + (size_t)r * p->a.out_stride);
}
/* bfloat16 / float16 (a.fdt): the set's row kernel gives silu(gate) on chunks whose up half is ones (x * 1 is
   exact), then silu is rounded, multiplied by up and rounded, as tr__swiglu_fwd_range does it. */
/* tr__round_ref on a row, with the SIMD span where the build has it (callers run only on a SIMD set). */
TR__FN void tr__round_row(int fdt, float *x, size_t n) {
#if TR__X86
    tr__round_span256(fdt, x, 0, n);
#else
    tr__round_ref(fdt, x, n);
#endif
}
TR__FN void tr__swiglu_fwd_lp_range(void *arg, long i0, long i1) {
    const tr__swiglu_fwd_simd *p = (const tr__swiglu_fwd_simd *)arg;
    enum { CH = 256 };
    float buf[2 * CH], sl[CH];
    long r, j0, k, fdt = p->a.fdt;
    for (k = 0; k < CH; k++) buf[CH + k] = 1.0f;
    for (r = i0; r < i1; r++) {
        const float *gate = p->a.g + (size_t)r * p->a.g_stride, *up = gate + p->a.width;
        float *o = p->a.out + (size_t)r * p->a.out_stride;
        for (j0 = 0; j0 < p->a.width; j0 += CH) {
            long n = TR__MIN((long)CH, p->a.width - j0);
            memcpy(buf + CH - n, gate + j0, (size_t)n * sizeof(float)); /* gate | ones: the row kernel's layout for width n */
            p->row(n, buf + CH - n, sl);
            tr__round_row((int)fdt, sl, (size_t)n);
            for (k = 0; k < n; k++) o[j0 + k] = sl[k] * up[j0 + k];
            tr__round_row((int)fdt, o + j0, (size_t)n);
        }
    }
}
#if TR__X86
TR__FN void tr__swiglu_fwd_lp512_range(void *arg, long i0, long i1) {
    const tr__swiglu_fwd_args *a = (const tr__swiglu_fwd_args *)arg;
    long r;
    for (r = i0; r < i1; r++) tr__swiglu_fwd_lp_row512(a->width, a->g + (size_t)r * a->g_stride, a->out + (size_t)r * a->out_stride, a->fdt);
}
#endif
TR__FN void tr__swiglu_fwd(tr_ctx *ctx, int fdt, long rows, long width, const float *g, size_t g_stride, float *out, size_t out_stride) {
    tr__swiglu_fwd_simd p = {{width, g, g_stride, out, out_stride, fdt}, NULL};
#if TR__X86
    if (fdt && ctx->simd == TR__SIMD_AVX512) {
        tr__par_for(tr__threads_for(ctx, (double)rows * width), rows, 0, tr__swiglu_fwd_lp512_range, &p.a);
        return;
    }
    if (ctx->simd != TR__SIMD_SCALAR) p.row = ctx->simd == TR__SIMD_AVX512 ? tr__swiglu_fwd_row512 : tr__swiglu_fwd_row256;
#endif
#if TR__NEON
    if (ctx->simd == TR__SIMD_NEON) p.row = tr__swiglu_fwd_row128;
#endif
    if (p.row) tr__par_for(tr__threads_for(ctx, (double)rows * width), rows, 0, fdt ? tr__swiglu_fwd_lp_range : tr__swiglu_fwd_simd_range, &p);
    else tr__par_for(tr__threads_for(ctx, (double)rows * width), rows, 0, tr__swiglu_fwd_range, &p.a);
}
typedef struct tr__swiglu_bwd_simd { tr__swiglu_bwd_args a; void (*row)(long, const float *, const float *, float *); } tr__swiglu_bwd_simd;
TR__FN void tr__swiglu_bwd_simd_range(void *arg, long i0, long i1) {
    const tr__swiglu_bwd_simd *p = (const tr__swiglu_bwd_simd *)arg;
    long r;
    for (r = i0; r < i1; r++) p->row(p->a.width, p->a.g + (size_t)r * p->a.g_stride, p->a.da + (size_t)r * p->a.da_stride, p->a.dg + (size_t)r * p->a.g_stride);
}
TR__FN void tr__swiglu_bwd(tr_ctx *ctx, long rows, long width, const float *g, size_t g_stride, const float *da, size_t da_stride, float *dg) {
    tr__swiglu_bwd_simd p = {{width, g, g_stride, da, da_stride, dg}, NULL};
#if TR__X86
    if (ctx->simd != TR__SIMD_SCALAR) p.row = ctx->simd == TR__SIMD_AVX512 ? tr__swiglu_bwd_row512 : tr__swiglu_bwd_row256;
#endif
#if TR__NEON
    if (ctx->simd == TR__SIMD_NEON) p.row = tr__swiglu_bwd_row128;
#endif
    if (p.row) tr__par_for(tr__threads_for(ctx, (double)rows * width), rows, 0, tr__swiglu_bwd_simd_range, &p);
    else tr__swiglu_bwd_ref(rows, width, g, g_stride, da, da_stride, dg, ctx->num_threads);
}
typedef struct tr__rms_rows_fwd_simd { tr__rms_rows_fwd_args a; float (*row)(int, const float *, const float *, float *, float); } tr__rms_rows_fwd_simd;
TR__FN void tr__rms_rows_fwd_simd_range(void *arg, long i0, long i1) {
    const tr__rms_rows_fwd_simd *p = (const tr__rms_rows_fwd_simd *)arg;
    size_t D = (size_t)p->a.D;
    long r;
    for (r = i0; r < i1; r++) p->a.rstd[r] = p->row(p->a.D, p->a.x + r * D, p->a.add ? p->a.add + r * D : NULL, p->a.out + r * D, p->a.eps);
}
TR__FN void tr__rms_rows_fwd(tr_ctx *ctx, long rows, int D, const float *x, const float *add, float *out, float *rstd, float eps) {
    tr__rms_rows_fwd_simd p = {{D, x, add, out, rstd, eps}, NULL};
#if TR__X86
    if (ctx->simd != TR__SIMD_SCALAR) p.row = ctx->simd == TR__SIMD_AVX512 ? tr__rms_row_fwd512 : tr__rms_row_fwd256;
#endif
#if TR__NEON
    if (ctx->simd == TR__SIMD_NEON) p.row = tr__rms_row_fwd128;
#endif
    if (p.row) tr__par_for(tr__threads_for(ctx, (double)rows * D), rows, 0, tr__rms_rows_fwd_simd_range, &p);
    else tr__rms_rows_fwd_ref(rows, D, x, add, out, rstd, eps, ctx->num_threads);
}
typedef struct tr__rms_rows_bwd_simd { tr__rms_rows_bwd_args a; void (*row)(int, const float *, const float *, float, float *); } tr__rms_rows_bwd_simd;
TR__FN void tr__rms_rows_bwd_simd_range(void *arg, long i0, long i1) {
    const tr__rms_rows_bwd_simd *p = (const tr__rms_rows_bwd_simd *)arg;
    size_t D = (size_t)p->a.D;
    long r;
    for (r = i0; r < i1; r++) p->row(p->a.D, p->a.dy + r * D, p->a.y + r * D, p->a.rstd[r], p->a.dx + r * D);
}
TR__FN void tr__rms_rows_bwd(tr_ctx *ctx, long rows, int D, const float *dy, const float *y, const float *rstd, float *dx) {
    tr__rms_rows_bwd_simd p = {{D, dy, y, rstd, dx}, NULL};
#if TR__X86
    if (ctx->simd != TR__SIMD_SCALAR) p.row = ctx->simd == TR__SIMD_AVX512 ? tr__rms_row_bwd512 : tr__rms_row_bwd256;
#endif
#if TR__NEON
    if (ctx->simd == TR__SIMD_NEON) p.row = tr__rms_row_bwd128;
#endif
    if (p.row) tr__par_for(tr__threads_for(ctx, (double)rows * D), rows, 0, tr__rms_rows_bwd_simd_range, &p);
    else tr__rms_rows_bwd_ref(rows, D, dy, y, rstd, dx, ctx->num_threads);
}
/* The column norms: one task = one batch row x 64 channels. */
typedef struct tr__rms_cols_fwd_simd { tr__rms_cols_fwd_args a; void (*task)(int, int, int, const float *, const float *, float *, float *, float); } tr__rms_cols_fwd_simd;
TR__FN void tr__rms_cols_fwd_simd_range(void *arg, long i0, long i1) {
    const tr__rms_cols_fwd_simd *p = (const tr__rms_cols_fwd_simd *)arg;
    long t, nblk = (p->a.D + 63) / 64;
    for (t = i0; t < i1; t++) {
        size_t base = (size_t)(t / nblk) * p->a.S * p->a.D;
        p->task(p->a.S, p->a.D, (int)(t % nblk) * 64, p->a.x + base, p->a.add ? p->a.add + base : NULL, p->a.out + base, p->a.rstd + (size_t)(t / nblk) * p->a.D, p->a.eps);
    }
}
TR__FN void tr__rms_cols_fwd(tr_ctx *ctx, int B, int S, int D, const float *x, const float *add, float *out, float *rstd, float eps) {
    tr__rms_cols_fwd_simd p = {{S, D, x, add, out, rstd, eps}, NULL};
#if TR__X86
    if (ctx->simd != TR__SIMD_SCALAR) p.task = ctx->simd == TR__SIMD_AVX512 ? tr__rms_cols_task_fwd512 : tr__rms_cols_task_fwd256;
#endif
#if TR__NEON
    if (ctx->simd == TR__SIMD_NEON) p.task = tr__rms_cols_task_fwd128;
#endif
    if (p.task) tr__par_for(tr__threads_for(ctx, (double)B * S * D), (long)B * ((D + 63) / 64), 0, tr__rms_cols_fwd_simd_range, &p);
    else tr__rms_cols_fwd_ref(B, S, D, x, add, out, rstd, eps, ctx->num_threads);
}
typedef struct tr__rms_cols_bwd_simd { tr__rms_cols_bwd_args a; void (*task)(int, int, int, const float *, const float *, const float *, float *); } tr__rms_cols_bwd_simd;
TR__FN void tr__rms_cols_bwd_simd_range(void *arg, long i0, long i1) {
    const tr__rms_cols_bwd_simd *p = (const tr__rms_cols_bwd_simd *)arg;
    long t, nblk = (p->a.D + 63) / 64;
    for (t = i0; t < i1; t++) {
        size_t base = (size_t)(t / nblk) * p->a.S * p->a.D;
        p->task(p->a.S, p->a.D, (int)(t % nblk) * 64, p->a.dy + base, p->a.y + base, p->a.rstd + (size_t)(t / nblk) * p->a.D, p->a.dx + base);
    }
}
TR__FN void tr__rms_cols_bwd(tr_ctx *ctx, int B, int S, int D, const float *dy, const float *y, const float *rstd, float *dx) {
    tr__rms_cols_bwd_simd p = {{S, D, dy, y, rstd, dx}, NULL};
#if TR__X86
    if (ctx->simd != TR__SIMD_SCALAR) p.task = ctx->simd == TR__SIMD_AVX512 ? tr__rms_cols_task_bwd512 : tr__rms_cols_task_bwd256;
#endif
#if TR__NEON
    if (ctx->simd == TR__SIMD_NEON) p.task = tr__rms_cols_task_bwd128;
#endif
    if (p.task) tr__par_for(tr__threads_for(ctx, (double)B * S * D), (long)B * ((D + 63) / 64), 0, tr__rms_cols_bwd_simd_range, &p);
    else tr__rms_cols_bwd_ref(B, S, D, dy, y, rstd, dx, ctx->num_threads);
}
/* Attention: one task = one (batch, head), with its thread's scratch. */
typedef struct tr__attention_fwd_simd { tr__attention_fwd_args a; void (*one)(int, int, int, int, int, const float *, float *, float *, float *); } tr__attention_fwd_simd;
TR__FN void tr__attention_fwd_simd_range(void *arg, long i0, long i1) {
    const tr__attention_fwd_simd *p = (const tr__attention_fwd_simd *)arg;
    const tr__attention_fwd_args *a = &p->a;
    size_t per = tr__attention_scratch_floats(a->S, a->hd);
    long bh;
    for (bh = i0; bh < i1; bh++) p->one((int)(bh / a->H), (int)(bh % a->H), a->S, a->H, a->hd, a->qkv, a->o, a->lse, a->scratch + (size_t)tr__thread_id() * per);
}
TR__FN void tr__attention_fwd(tr_ctx *ctx, int B, int S, int H, int hd, const float *qkv, float *o, float *lse, float *scratch) {
    tr__attention_fwd_simd p = {{S, H, hd, qkv, o, lse, scratch}, NULL};
#if TR__X86
    if (ctx->simd != TR__SIMD_SCALAR) p.one = ctx->simd == TR__SIMD_AVX512 ? tr__attention_fwd_bh512 : tr__attention_fwd_bh256;
#endif
#if TR__NEON
    if (ctx->simd == TR__SIMD_NEON) p.one = tr__attention_fwd_bh128;
#endif
    if (p.one) tr__par_for(tr__threads_for(ctx, (double)B * H * S * S * hd), (long)B * H, 0, tr__attention_fwd_simd_range, &p);
    else tr__attention_fwd_ref(B, S, H, hd, qkv, o, lse, scratch, ctx->num_threads);
}
typedef struct tr__attention_bwd_simd {
    tr__attention_bwd_args a;
    void (*one)(int, int, int, int, int, const float *, const float *, const float *, const float *, float *, float *);
} tr__attention_bwd_simd;
TR__FN void tr__attention_bwd_simd_range(void *arg, long i0, long i1) {
    const tr__attention_bwd_simd *p = (const tr__attention_bwd_simd *)arg;
    const tr__attention_bwd_args *a = &p->a;
    size_t per = tr__attention_scratch_floats(a->S, a->hd);
    long bh;
    for (bh = i0; bh < i1; bh++)
        p->one((int)(bh / a->H), (int)(bh % a->H), a->S, a->H, a->hd, a->qkv, a->o, a->lse, a->do_, a->dqkv, a->scratch + (size_t)tr__thread_id() * per);
}
TR__FN void tr__attention_bwd(tr_ctx *ctx, int B, int S, int H, int hd, const float *qkv, const float *o, const float *lse, const float *do_, float *dqkv, float *scratch) {
    tr__attention_bwd_simd p = {{S, H, hd, qkv, o, lse, do_, dqkv, scratch}, NULL};
#if TR__X86
    if (ctx->simd != TR__SIMD_SCALAR) p.one = ctx->simd == TR__SIMD_AVX512 ? tr__attention_bwd_bh512 : tr__attention_bwd_bh256;
#endif
#if TR__NEON
    if (ctx->simd == TR__SIMD_NEON) p.one = tr__attention_bwd_bh128;
#endif
    if (p.one) tr__par_for(tr__threads_for(ctx, (double)B * H * S * S * hd), (long)B * H, 0, tr__attention_bwd_simd_range, &p);
    else tr__attention_bwd_ref(B, S, H, hd, qkv, o, lse, do_, dqkv, scratch, ctx->num_threads);
}
/* RoPE, AdamATan2 and the EMA: the SIMD sets' row / range kernels on the threads' static ranges
   (elementwise: the same bits for any split), else the scalar twins. */
typedef struct tr__rope_simd { tr__rope_args a; void (*row)(int, int, float *, const float *, const float *, float); } tr__rope_simd;
TR__FN void tr__rope_simd_range(void *arg, long i0, long i1) {
    const tr__rope_simd *p = (const tr__rope_simd *)arg;
    long r;
    for (r = i0; r < i1; r++) {
        size_t pos = (size_t)(r % p->a.S) * p->a.hd;
        p->row(p->a.H, p->a.hd, p->a.qkv + (size_t)r * 3 * p->a.H * p->a.hd, p->a.cosv + pos, p->a.sinv + pos, p->a.inverse ? -1.0f : 1.0f);
    }
}
TR__FN void tr__rope(tr_ctx *ctx, long rows, int S, int H, int hd, float *qkv, const float *cosv, const float *sinv, int inverse) {
    tr__rope_simd p = {{S, H, hd, qkv, cosv, sinv, inverse}, NULL};
    int nt = tr__threads_for(ctx, (double)rows * 2 * H * hd);
#if TR__X86
    if (ctx->simd != TR__SIMD_SCALAR) p.row = ctx->simd == TR__SIMD_AVX512 ? tr__rope_row512 : tr__rope_row256;
#endif
#if TR__NEON
    if (ctx->simd == TR__SIMD_NEON) {
        tr__par_for(nt, rows, 0, tr__rope_range_neon, &p.a);
        return;
    }
#endif
    if (p.row) tr__par_for(nt, rows, 0, tr__rope_simd_range, &p);
    else tr__rope_ref(rows, S, H, hd, qkv, cosv, sinv, inverse, nt);
}
typedef struct tr__adam_atan2_simd {
    tr__adam_atan2_args a;
    float decay, step, sbc2; /* formed as tr__adam_atan2_ref forms them */
    void (*span)(size_t, size_t, float *, const float *, float *, float *, float, float, float, float, float);
} tr__adam_atan2_simd;
TR__FN void tr__adam_atan2_simd_range(void *arg, long i0, long i1) {
    const tr__adam_atan2_simd *q = (const tr__adam_atan2_simd *)arg;
    q->span((size_t)i0, (size_t)i1, q->a.p, q->a.g, q->a.m, q->a.v, q->decay, q->step, q->sbc2, q->a.beta1, q->a.beta2);
}
TR__FN void tr__adam_atan2(tr_ctx *ctx, size_t n, float *p, const float *g, float *m, float *v, float lr, float wd, float beta1, float beta2, float bc1,
                           float bc2) {
    tr__adam_atan2_simd q = {{p, g, m, v, lr, wd, beta1, beta2, bc1, bc2}, 1.0f - lr * wd, lr / bc1, sqrtf(bc2), NULL};
    int nt = tr__threads_for(ctx, 8.0 * (double)n);
#if TR__X86
    if (ctx->simd != TR__SIMD_SCALAR) q.span = ctx->simd == TR__SIMD_AVX512 ? tr__adam_atan2_span512 : tr__adam_atan2_span256;
#endif
#if TR__NEON
    if (ctx->simd == TR__SIMD_NEON) {
        tr__par_for(nt, (long)n, 0, tr__adam_atan2_range_neon, &q.a);
        return;
    }
#endif
    if (q.span) tr__par_for(nt, (long)n, 0, tr__adam_atan2_simd_range, &q);
    else tr__adam_atan2_ref(n, p, g, m, v, lr, wd, beta1, beta2, bc1, bc2, nt);
}
/* tr__round_ref over n floats, split across threads. */
typedef struct tr__round_args { int fdt; float *x; } tr__round_args;
TR__FN void tr__round_range(void *arg, long i0, long i1) {
    const tr__round_args *p = (const tr__round_args *)arg;
    tr__round_ref(p->fdt, p->x + i0, (size_t)(i1 - i0));
}
#if TR__X86
TR__FN void tr__round_simd_range(void *arg, long i0, long i1) {
    const tr__round_args *p = (const tr__round_args *)arg;
    tr__round_span256(p->fdt, p->x, (size_t)i0, (size_t)i1);
}
/* tr__round_ref with tr__round512 (the last lanes under a mask) */
TR__TARGET_AVX512 static void tr__round512_range(void *arg, long i0, long i1) {
    const tr__round_args *p = (const tr__round_args *)arg;
    long i;
    for (i = i0; i < i1; i += 16) {
        __mmask16 k = i1 - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (i1 - i)) - 1);
        _mm512_mask_storeu_ps(p->x + i, k, tr__round512(p->fdt, _mm512_maskz_loadu_ps(k, p->x + i)));
    }
}
#endif
/* tr__half_ref over n values, split across threads. */
typedef struct tr__half_args { int fdt, unpack; float *x; uint16_t *h; } tr__half_args;
TR__FN void tr__half_range(void *arg, long i0, long i1) {
    const tr__half_args *p = (const tr__half_args *)arg;
    tr__half_ref(p->fdt, p->unpack, p->x + i0, p->h + i0, (size_t)(i1 - i0));
}
#if TR__X86
TR__FN void tr__half_simd_range(void *arg, long i0, long i1) {
    const tr__half_args *p = (const tr__half_args *)arg;
    tr__half_span256(p->fdt, p->unpack, p->x, p->h, (size_t)i0, (size_t)i1);
}
#endif
TR__FN void tr__half(tr_ctx *ctx, int fdt, int unpack, float *x, uint16_t *h, size_t n) {
    tr__half_args p = {fdt, unpack, x, h};
    tr__range_fn fn = tr__half_range;
    if (fdt != TR_FWD_BFLOAT16 && fdt != TR_FWD_FLOAT16) return;
#if TR__X86
    if (ctx->simd != TR__SIMD_SCALAR) fn = tr__half_simd_range;
#endif
    tr__par_for(tr__threads_for(ctx, (double)n), (long)n, 0, fn, &p);
}
TR__FN void tr__round(tr_ctx *ctx, int fdt, float *x, size_t n) {
    tr__round_args p = {fdt, x};
    tr__range_fn fn = tr__round_range;
    if (fdt != TR_FWD_BFLOAT16 && fdt != TR_FWD_FLOAT16) return;
#if TR__X86
    if (ctx->simd != TR__SIMD_SCALAR) fn = ctx->simd == TR__SIMD_AVX512 ? tr__round512_range : tr__round_simd_range;
#endif
    tr__par_for(tr__threads_for(ctx, (double)n), (long)n, 0, fn, &p);
}
typedef struct tr__ema_simd { tr__ema_args a; void (*span)(size_t, size_t, float *, const float *, float); } tr__ema_simd;
TR__FN void tr__ema_simd_range(void *arg, long i0, long i1) {
    const tr__ema_simd *q = (const tr__ema_simd *)arg;
    q->span((size_t)i0, (size_t)i1, q->a.shadow, q->a.p, q->a.decay);
}
TR__FN void tr__ema(tr_ctx *ctx, size_t n, float *shadow, const float *p, float decay) {
    tr__ema_simd q = {{shadow, p, decay}, NULL};
    int nt = tr__threads_for(ctx, (double)n);
#if TR__X86
    if (ctx->simd != TR__SIMD_SCALAR) q.span = ctx->simd == TR__SIMD_AVX512 ? tr__ema_span512 : tr__ema_span256;
#endif
#if TR__NEON
    if (ctx->simd == TR__SIMD_NEON) {
        tr__par_for(nt, (long)n, 0, tr__ema_range_neon, &q.a);
        return;
    }
#endif
    if (q.span) tr__par_for(nt, (long)n, 0, tr__ema_simd_range, &q);
    else tr__ema_ref(n, shadow, p, decay, nt);
}

/* >>sgemm
   --- single-precision GEMM ------------------------------------------------------------------
   C[M,N] = (accumulate ? C : 0) + op(A) * op(B), row-major, op() = identity or transpose.

   tr__sgemm_ref  the plain triple loop; the reference the tests compare against.
   tr__sgemm      blocked and packed in the GotoBLAS/BLIS manner:
                    1. op(B) is packed once, whole, into KC-deep blocks of NR-wide panels; the
                       threads share that work (dynamic schedule, then the loop's barrier).
                    2. C is cut into jobs (MC rows x a range of NR panels; along N only when M
                       is short) handed out dynamically. A job walks the KC blocks in order:
                       it packs its MC x KC slab of op(A) into MR-tall panels, then for every
                       NC-wide column block runs the micro-kernel on each MR x NR tile. The
                       MR x KC A panel stays in L1 while the KC x NC block of packed B streams
                       from L2.
                  When N is cut into ranges (few M blocks), op(A) is packed whole once, with
                  op(B), instead of by every range's jobs. Weights are packed once per version
                  (tr__pw), and products that share op(A) run as one (tr__sgemm_nb), as do
                  products summed into one C (their KC blocks in turn).
                  The packing routines absorb the transposes and zero-pad the edges; the
                  micro-kernels mask the edge tiles on store. K is never split between threads
                  and the KC blocking depends on K alone, so each element of C is summed in the
                  same order whoever computes it: results are bit-identical for any thread count.
                  Short products skip the packing: M <= 16 (batch-1 inference) and N <= 8 with
                  op(A) = A use 4x4 blocks of dot products when op(B) = B^T (or when op(B) is
                  small enough to transpose), and M <= 16 with op(B) = B streams B's rows
                  through a 4-row register tile.
   Micro-kernels: AVX-512 14x32 (28 zmm accumulators; B as two zmm loads, A as broadcasts),
   AVX2 6x16 (12 ymm accumulators), scalar 4x16 (plain C). A bfloat16 model's products (ctx->gemm_fdt)
   run on bfloat16-pair packings: AMX 32x32, vdpbf16ps 14x32, or their scalar twin (tr__bgemm_*). */

/* Cache blocking (Zen 5: 48 KiB L1d, 1 MiB L2 per core, 32 MiB L3).
   KC: depth of a packed block; the 14 x KC A panel (28 KiB at 512) stays in L1 and K = 512
       needs a single pass over C. NC: width of the KC x NC block of packed B that the A panels
       sweep (512 KiB, L2). MC: rows of op(A) per job (the MC x KC slab, 336 KiB, also in L2). */
#ifndef TR__SG_KC
#define TR__SG_KC 512
#endif
#ifndef TR__SG_NC
#define TR__SG_NC 256
#endif
#ifndef TR__SG_MC
#define TR__SG_MC 168
#endif
#define TR__SG_SMALL_M 16 /* at most this many rows of C: the unpacked paths */
#define TR__SG_SMALL_N 8

/* Micro-kernel: C[0:mr, 0:nr] (=|+=) Apanel * Bpanel where Apanel is kc x MR (MR values per k)
   and Bpanel is kc x NR (NR values per k), both zero-padded to the full tile. */
typedef void (*tr__sgemm_ukr_fn)(size_t kc, const float *a, const float *b, float *c, size_t ldc, size_t mr, size_t nr, int acc);
/* Packs rows [m0, m0+mc) x depth [k0, k0+kc) of op(A) into ceil(mc/MR) panels of kc x MR. */
typedef void (*tr__sgemm_pack_a_fn)(int transA, const float *A, size_t lda, size_t m0, size_t mc, size_t k0, size_t kc, size_t MR,
                                    float *dst);
/* Packs NR-wide panels [p0, p1) of op(B) (N columns in all), depth [k0, k0+kc), into blk (panel p
   at blk + p*kc*NR). */
typedef void (*tr__sgemm_pack_b_fn)(int transB, const float *B, size_t ldb, size_t N, size_t p0, size_t p1, size_t k0, size_t kc,
                                    size_t NR, float *blk);
/* out[4*r + c] = sum_k a[r][k] * b[c][k], the 16 sums of a 4x4 block of dot products. */
typedef void (*tr__sgemm_dot_fn)(size_t K, const float *const *a, const float *const *b, float *out);
/* C[0:nrows, 0:w] (=|+=) sum_k a(r, k) * B[k, 0:w] with a(r, k) = a[r*sar + k*sak], nrows <= 4,
   w <= the level's row-chunk width. */
typedef void (*tr__sgemm_rows_fn)(size_t K, const float *a, size_t sar, size_t sak, size_t nrows, const float *B, size_t ldb,
                                  size_t w, float *C, size_t ldc, int acc);

typedef struct tr__sgemm_kern {
    size_t mr, nr, rw; /* micro-tile, and the width of the rows kernel */
    tr__sgemm_ukr_fn ukr;
    tr__sgemm_pack_a_fn pack_a;
    tr__sgemm_pack_b_fn pack_b;
    tr__sgemm_dot_fn dot;
    tr__sgemm_rows_fn rows;
    void (*enter)(void), (*leave)(void); /* or NULL: a thread's set-up around its jobs' micro-kernel calls (AMX: the tile configuration) */
} tr__sgemm_kern;

/* --- reference ----------------------------------------------------------------------------- */
TR__FN void tr__sgemm_ref(int transA, int transB, size_t M, size_t N, size_t K, const float *A, size_t lda, const float *B,
                          size_t ldb, float *C, size_t ldc, int accumulate) {
    size_t i, j, k;
    for (i = 0; i < M; i++)
        for (j = 0; j < N; j++) {
            float s = 0.0f;
            for (k = 0; k < K; k++) {
                float a = transA ? A[k * lda + i] : A[i * lda + k];
                float b = transB ? B[j * ldb + k] : B[k * ldb + j];
                s += a * b;
            }
            C[i * ldc + j] = accumulate ? C[i * ldc + j] + s : s;
        }
}

/* --- portable packing and kernels (the scalar level) ------------------------------------------ */
TR__FN void tr__sgemm_pack_a_c(int transA, const float *A, size_t lda, size_t m0, size_t mc, size_t k0, size_t kc, size_t MR,
                               float *dst) {
    size_t p, i, k;
    for (p = 0; p < mc; p += MR) {
        size_t mr = TR__MIN(MR, mc - p);
        if (!transA) {
            for (i = 0; i < mr; i++) {
                const float *src = A + (m0 + p + i) * lda + k0;
                for (k = 0; k < kc; k++) dst[k * MR + i] = src[k];
            }
            for (; i < MR; i++)
                for (k = 0; k < kc; k++) dst[k * MR + i] = 0.0f;
        } else {
            for (k = 0; k < kc; k++) {
                const float *src = A + (k0 + k) * lda + m0 + p;
                for (i = 0; i < mr; i++) dst[k * MR + i] = src[i];
                for (; i < MR; i++) dst[k * MR + i] = 0.0f;
            }
        }
        dst += kc * MR;
    }
}

TR__FN void tr__sgemm_pack_b_c(int transB, const float *B, size_t ldb, size_t N, size_t p0, size_t p1, size_t k0, size_t kc,
                               size_t NR, float *blk) {
    size_t p, j, k;
    if (!transB) { /* row by row across the panels: B is read in long contiguous runs */
        for (k = 0; k < kc; k++) {
            const float *src = B + (k0 + k) * ldb;
            for (p = p0; p < p1; p++) {
                size_t n0 = p * NR, nr = TR__MIN(NR, N - n0);
                float *d = blk + p * kc * NR + k * NR;
                for (j = 0; j < nr; j++) d[j] = src[n0 + j];
                for (; j < NR; j++) d[j] = 0.0f;
            }
        }
        return;
    }
    for (p = p0; p < p1; p++) {
        size_t n0 = p * NR, nr = TR__MIN(NR, N - n0);
        float *d = blk + p * kc * NR;
        for (j = 0; j < nr; j++) {
            const float *src = B + (n0 + j) * ldb + k0;
            for (k = 0; k < kc; k++) d[k * NR + j] = src[k];
        }
        for (; j < NR; j++)
            for (k = 0; k < kc; k++) d[k * NR + j] = 0.0f;
    }
}

#define TR__SG_SMR 4
#define TR__SG_SNR 16
TR__FN void tr__sgemm_ukr_c(size_t kc, const float *a, const float *b, float *c, size_t ldc, size_t mr, size_t nr, int acc) {
    float t[TR__SG_SMR][TR__SG_SNR];
    size_t i, j, k;
    for (i = 0; i < TR__SG_SMR; i++)
        for (j = 0; j < TR__SG_SNR; j++) t[i][j] = 0.0f;
    for (k = 0; k < kc; k++) {
        for (i = 0; i < TR__SG_SMR; i++) {
            float ai = a[i];
            for (j = 0; j < TR__SG_SNR; j++) t[i][j] += ai * b[j];
        }
        a += TR__SG_SMR;
        b += TR__SG_SNR;
    }
    for (i = 0; i < mr; i++)
        for (j = 0; j < nr; j++) c[i * ldc + j] = acc ? c[i * ldc + j] + t[i][j] : t[i][j];
}

TR__FN void tr__sgemm_dot_c(size_t K, const float *const *a, const float *const *b, float *out) {
    size_t r, c, k;
    for (r = 0; r < 4; r++)
        for (c = 0; c < 4; c++) {
            float s = 0.0f;
            for (k = 0; k < K; k++) s += a[r][k] * b[c][k];
            out[4 * r + c] = s;
        }
}

#define TR__SG_SRW 64
TR__FN void tr__sgemm_rows_c(size_t K, const float *a, size_t sar, size_t sak, size_t nrows, const float *B, size_t ldb, size_t w,
                             float *C, size_t ldc, int acc) {
    float t[TR__SG_SRW];
    size_t r, j, k;
    for (r = 0; r < nrows; r++) {
        for (j = 0; j < w; j++) t[j] = 0.0f;
        for (k = 0; k < K; k++) {
            float ar = a[r * sar + k * sak];
            const float *b = B + k * ldb;
            for (j = 0; j < w; j++) t[j] += ar * b[j];
        }
        for (j = 0; j < w; j++) C[r * ldc + j] = acc ? C[r * ldc + j] + t[j] : t[j];
    }
}

#if TR__X86
/* GCC 12 in C++ mode flags the deliberately undefined lanes inside its own AVX-512 intrinsics
   (_mm512_undefined_ps) as uninitialised (GCC bug 105593); the kernels below are silenced. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define TR__SG_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma")))
#define TR__SG_AVX2 __attribute__((target("avx2,fma")))

/* --- AVX-512 ------------------------------------------------------------------------------------ */
/* Lane masks: tr__mask512 and tr__mask256 of >>cpu. */

/* Transposes the nrows x ncols (<= 16 x 16) block at src (row stride lds; rows >= nrows read as
   zero) into dst: dst[j*ldd + i] = src[i*lds + j] for j < ncols, storing the lanes in smask.
   Spelled out (no arrays) so that everything stays in registers. */
#define TR__SG_TLD(i) __m512 r##i = (i) < nrows ? _mm512_maskz_loadu_ps(cm, src + (size_t)(i) * lds) : _mm512_setzero_ps()
#define TR__SG_TUNP(a, b, lo, hi) __m512 lo = _mm512_unpacklo_ps(a, b), hi = _mm512_unpackhi_ps(a, b)
#define TR__SG_TUNPD(a, b, lo, hi)                                                                                     \
    __m512 lo = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b))),                         \
           hi = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)))
#define TR__SG_TFIN(a, b, c, d, oa, ob, oc, od)                                                                        \
    do {                                                                                                                \
        __m512 x0_ = _mm512_shuffle_f32x4(a, b, 0x88), x1_ = _mm512_shuffle_f32x4(a, b, 0xdd);                          \
        __m512 y0_ = _mm512_shuffle_f32x4(c, d, 0x88), y1_ = _mm512_shuffle_f32x4(c, d, 0xdd);                          \
        oa = _mm512_shuffle_f32x4(x0_, y0_, 0x88);                                                                      \
        ob = _mm512_shuffle_f32x4(x0_, y0_, 0xdd);                                                                      \
        oc = _mm512_shuffle_f32x4(x1_, y1_, 0x88);                                                                      \
        od = _mm512_shuffle_f32x4(x1_, y1_, 0xdd);                                                                      \
    } while (0)
#define TR__SG_TST(j) \
    if (j < ncols) _mm512_mask_storeu_ps(dst + (size_t)(j) * ldd, smask, o##j)
TR__SG_AVX512 static inline void tr__sg_tr512(const float *src, size_t lds, size_t nrows, size_t ncols, float *dst, size_t ldd,
                                                     __mmask16 smask) {
    __mmask16 cm = tr__mask512(ncols);
    __m512 o0, o1, o2, o3, o4, o5, o6, o7, o8, o9, o10, o11, o12, o13, o14, o15;
    TR__SG_TLD(0); TR__SG_TLD(1); TR__SG_TLD(2); TR__SG_TLD(3); TR__SG_TLD(4); TR__SG_TLD(5); TR__SG_TLD(6); TR__SG_TLD(7);
    TR__SG_TLD(8); TR__SG_TLD(9); TR__SG_TLD(10); TR__SG_TLD(11); TR__SG_TLD(12); TR__SG_TLD(13); TR__SG_TLD(14); TR__SG_TLD(15);
    {
        /* t: pairs of rows interleaved within 128-bit lanes */
        TR__SG_TUNP(r0, r1, t0, t1); TR__SG_TUNP(r2, r3, t2, t3); TR__SG_TUNP(r4, r5, t4, t5); TR__SG_TUNP(r6, r7, t6, t7);
        TR__SG_TUNP(r8, r9, t8, t9); TR__SG_TUNP(r10, r11, t10, t11); TR__SG_TUNP(r12, r13, t12, t13);
        TR__SG_TUNP(r14, r15, t14, t15);
        {
            /* u(4g + e), lane l: rows 4g..4g+3 of column 4l + e */
            TR__SG_TUNPD(t0, t2, u0, u1); TR__SG_TUNPD(t1, t3, u2, u3); TR__SG_TUNPD(t4, t6, u4, u5);
            TR__SG_TUNPD(t5, t7, u6, u7); TR__SG_TUNPD(t8, t10, u8, u9); TR__SG_TUNPD(t9, t11, u10, u11);
            TR__SG_TUNPD(t12, t14, u12, u13); TR__SG_TUNPD(t13, t15, u14, u15);
            TR__SG_TFIN(u0, u4, u8, u12, o0, o8, o4, o12);
            TR__SG_TFIN(u1, u5, u9, u13, o1, o9, o5, o13);
            TR__SG_TFIN(u2, u6, u10, u14, o2, o10, o6, o14);
            TR__SG_TFIN(u3, u7, u11, u15, o3, o11, o7, o15);
        }
    }
    TR__SG_TST(0); TR__SG_TST(1); TR__SG_TST(2); TR__SG_TST(3); TR__SG_TST(4); TR__SG_TST(5); TR__SG_TST(6); TR__SG_TST(7);
    TR__SG_TST(8); TR__SG_TST(9); TR__SG_TST(10); TR__SG_TST(11); TR__SG_TST(12); TR__SG_TST(13); TR__SG_TST(14); TR__SG_TST(15);
}

/* 14x32 micro-kernel */
#define TR__SG_ZROW(i) c##i##a = _mm512_setzero_ps(), c##i##b = _mm512_setzero_ps()
#define TR__SG_ZFMA(i, ap)                                                                                             \
    do {                                                                                                                \
        __m512 av_ = _mm512_set1_ps((ap)[i]);                                                                           \
        c##i##a = _mm512_fmadd_ps(av_, b0, c##i##a);                                                                    \
        c##i##b = _mm512_fmadd_ps(av_, b1, c##i##b);                                                                    \
    } while (0)
#define TR__SG_ZSTEP(ap, bp)                                                                                           \
    do {                                                                                                                \
        b0 = _mm512_load_ps(bp);                                                                                        \
        b1 = _mm512_load_ps((bp) + 16);                                                                                 \
        TR__SG_ZFMA(0, ap); TR__SG_ZFMA(1, ap); TR__SG_ZFMA(2, ap); TR__SG_ZFMA(3, ap); TR__SG_ZFMA(4, ap);            \
        TR__SG_ZFMA(5, ap); TR__SG_ZFMA(6, ap); TR__SG_ZFMA(7, ap); TR__SG_ZFMA(8, ap); TR__SG_ZFMA(9, ap);            \
        TR__SG_ZFMA(10, ap); TR__SG_ZFMA(11, ap); TR__SG_ZFMA(12, ap); TR__SG_ZFMA(13, ap);                            \
    } while (0)
/* The 14x32 kernels' start: C's rows prefetched (C is needed only at the end: its lines arrive during the loop),
   the accumulators zeroed. */
#define TR__SG_ZBEGIN                                                                                                  \
    do {                                                                                                                \
        for (i = 0; i < mr; i++) {                                                                                      \
            _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);                                                     \
            _mm_prefetch((const char *)(c + i * ldc + 31), _MM_HINT_T0);                                                \
        }                                                                                                               \
        TR__SG_ZROW(0); TR__SG_ZROW(1); TR__SG_ZROW(2); TR__SG_ZROW(3); TR__SG_ZROW(4); TR__SG_ZROW(5); TR__SG_ZROW(6); \
        TR__SG_ZROW(7); TR__SG_ZROW(8); TR__SG_ZROW(9); TR__SG_ZROW(10); TR__SG_ZROW(11); TR__SG_ZROW(12); TR__SG_ZROW(13); \
    } while (0)
#define TR__SG_ZSTORE(i)                                                                                               \
    if (i < mr) {                                                                                                       \
        float *cr_ = c + (size_t)i * ldc;                                                                               \
        if (acc) {                                                                                                      \
            c##i##a = _mm512_add_ps(c##i##a, _mm512_maskz_loadu_ps(m0, cr_));                                           \
            c##i##b = _mm512_add_ps(c##i##b, _mm512_maskz_loadu_ps(m1, cr_ + 16));                                      \
        }                                                                                                               \
        _mm512_mask_storeu_ps(cr_, m0, c##i##a);                                                                        \
        _mm512_mask_storeu_ps(cr_ + 16, m1, c##i##b);                                                                   \
    }

TR__SG_AVX512 TR__FN void tr__sgemm_ukr_avx512(size_t kc, const float *a, const float *b, float *c, size_t ldc, size_t mr,
                                               size_t nr, int acc) {
    __m512 c0a, c0b, c1a, c1b, c2a, c2b, c3a, c3b, c4a, c4b, c5a, c5b, c6a, c6b;
    __m512 c7a, c7b, c8a, c8b, c9a, c9b, c10a, c10b, c11a, c11b, c12a, c12b, c13a, c13b;
    __m512 b0, b1;
    __mmask16 m0 = tr__mask512(nr), m1 = tr__mask512(nr > 16 ? nr - 16 : 0);
    size_t k, i;
    TR__SG_ZBEGIN;
    for (k = 0; k + 4 <= kc; k += 4) {
        TR__SG_ZSTEP(a, b);
        TR__SG_ZSTEP(a + 14, b + 32);
        TR__SG_ZSTEP(a + 28, b + 64);
        TR__SG_ZSTEP(a + 42, b + 96);
        a += 56;
        b += 128;
    }
    for (; k < kc; k++) {
        TR__SG_ZSTEP(a, b);
        a += 14;
        b += 32;
    }
    TR__SG_ZSTORE(0) TR__SG_ZSTORE(1) TR__SG_ZSTORE(2) TR__SG_ZSTORE(3) TR__SG_ZSTORE(4) TR__SG_ZSTORE(5)
    TR__SG_ZSTORE(6) TR__SG_ZSTORE(7) TR__SG_ZSTORE(8) TR__SG_ZSTORE(9) TR__SG_ZSTORE(10) TR__SG_ZSTORE(11)
    TR__SG_ZSTORE(12) TR__SG_ZSTORE(13)
}

TR__SG_AVX512 TR__FN void tr__sgemm_dot_avx512(size_t K, const float *const *a, const float *const *b, float *out) {
    __m512 s[16];
    size_t k, r, c;
    for (r = 0; r < 16; r++) s[r] = _mm512_setzero_ps();
    for (k = 0; k < K; k += 16) {
        __mmask16 m = tr__mask512(K - k);
        __m512 b0 = _mm512_maskz_loadu_ps(m, b[0] + k), b1 = _mm512_maskz_loadu_ps(m, b[1] + k);
        __m512 b2 = _mm512_maskz_loadu_ps(m, b[2] + k), b3 = _mm512_maskz_loadu_ps(m, b[3] + k);
        for (r = 0; r < 4; r++) {
            __m512 av = _mm512_maskz_loadu_ps(m, a[r] + k);
            s[4 * r] = _mm512_fmadd_ps(av, b0, s[4 * r]);
            s[4 * r + 1] = _mm512_fmadd_ps(av, b1, s[4 * r + 1]);
            s[4 * r + 2] = _mm512_fmadd_ps(av, b2, s[4 * r + 2]);
            s[4 * r + 3] = _mm512_fmadd_ps(av, b3, s[4 * r + 3]);
        }
    }
    for (c = 0; c < 16; c++) out[c] = _mm512_reduce_add_ps(s[c]);
}

#define TR__SG_ZRW 64
TR__SG_AVX512 TR__FN void tr__sgemm_rows_avx512(size_t K, const float *a, size_t sar, size_t sak, size_t nrows, const float *B,
                                                size_t ldb, size_t w, float *C, size_t ldc, int acc) {
    __m512 s[4][4];
    __mmask16 m[4];
    const float *ar[4];
    size_t k, r, q;
    for (q = 0; q < 4; q++) m[q] = tr__mask512(w > 16 * q ? w - 16 * q : 0);
    for (r = 0; r < 4; r++) {
        ar[r] = a + (r < nrows ? r : 0) * sar;
        for (q = 0; q < 4; q++) s[r][q] = _mm512_setzero_ps();
    }
    for (k = 0; k < K; k++) {
        const float *b = B + k * ldb;
        __m512 b0 = _mm512_maskz_loadu_ps(m[0], b), b1 = _mm512_maskz_loadu_ps(m[1], b + 16);
        __m512 b2 = _mm512_maskz_loadu_ps(m[2], b + 32), b3 = _mm512_maskz_loadu_ps(m[3], b + 48);
        for (r = 0; r < 4; r++) {
            __m512 av = _mm512_set1_ps(ar[r][k * sak]);
            s[r][0] = _mm512_fmadd_ps(av, b0, s[r][0]);
            s[r][1] = _mm512_fmadd_ps(av, b1, s[r][1]);
            s[r][2] = _mm512_fmadd_ps(av, b2, s[r][2]);
            s[r][3] = _mm512_fmadd_ps(av, b3, s[r][3]);
        }
    }
    for (r = 0; r < nrows; r++)
        for (q = 0; q < 4; q++) {
            float *cp = C + r * ldc + 16 * q;
            __m512 v = s[r][q];
            if (!m[q]) break;
            if (acc) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m[q], cp));
            _mm512_mask_storeu_ps(cp, m[q], v);
        }
}

/* --- AVX2 -------------------------------------------------------------------------------------- */
#define TR__SG_YFMA(i, ap)                                                                                             \
    do {                                                                                                                \
        __m256 av_ = _mm256_broadcast_ss((ap) + i);                                                                     \
        c##i##a = _mm256_fmadd_ps(av_, b0, c##i##a);                                                                    \
        c##i##b = _mm256_fmadd_ps(av_, b1, c##i##b);                                                                    \
    } while (0)
#define TR__SG_YSTEP(ap, bp)                                                                                           \
    do {                                                                                                                \
        b0 = _mm256_load_ps(bp);                                                                                        \
        b1 = _mm256_load_ps((bp) + 8);                                                                                  \
        TR__SG_YFMA(0, ap); TR__SG_YFMA(1, ap); TR__SG_YFMA(2, ap);                                                     \
        TR__SG_YFMA(3, ap); TR__SG_YFMA(4, ap); TR__SG_YFMA(5, ap);                                                     \
    } while (0)
#define TR__SG_YSTORE(i)                                                                                               \
    if (i < mr) {                                                                                                       \
        float *cr_ = c + (size_t)i * ldc;                                                                               \
        if (full) {                                                                                                     \
            if (acc) {                                                                                                  \
                c##i##a = _mm256_add_ps(c##i##a, _mm256_loadu_ps(cr_));                                                 \
                c##i##b = _mm256_add_ps(c##i##b, _mm256_loadu_ps(cr_ + 8));                                             \
            }                                                                                                           \
            _mm256_storeu_ps(cr_, c##i##a);                                                                             \
            _mm256_storeu_ps(cr_ + 8, c##i##b);                                                                         \
        } else {                                                                                                        \
            if (acc) {                                                                                                  \
                c##i##a = _mm256_add_ps(c##i##a, _mm256_maskload_ps(cr_, k0));                                          \
                c##i##b = _mm256_add_ps(c##i##b, _mm256_maskload_ps(cr_ + 8, k1));                                      \
            }                                                                                                           \
            _mm256_maskstore_ps(cr_, k0, c##i##a);                                                                      \
            _mm256_maskstore_ps(cr_ + 8, k1, c##i##b);                                                                  \
        }                                                                                                               \
    }

/* Transposes the nrows x ncols (<= 8 x 8) block at src (row stride lds; rows >= nrows read as
   zero) into dst: dst[j*ldd + i] = src[i*lds + j] for j < ncols, storing the lanes in smask. */
#define TR__SG_YLD(i) __m256 r##i = (i) < nrows ? _mm256_maskload_ps(src + (size_t)(i) * lds, cm) : _mm256_setzero_ps()
#define TR__SG_YTST(j, v) \
    if (j < ncols) _mm256_maskstore_ps(dst + (size_t)(j) * ldd, smask, v)
TR__SG_AVX2 static inline void tr__sg_tr256(const float *src, size_t lds, size_t nrows, size_t ncols, float *dst, size_t ldd, __m256i smask) {
    __m256i cm = tr__mask256((long)ncols);
    TR__SG_YLD(0); TR__SG_YLD(1); TR__SG_YLD(2); TR__SG_YLD(3); TR__SG_YLD(4); TR__SG_YLD(5); TR__SG_YLD(6); TR__SG_YLD(7);
    {
        __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1), t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
        __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5), t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
        /* u: columns (0 4) (1 5) (2 6) (3 7) of rows 0-3 (u0..u3) and rows 4-7 (u4..u7), one per 128-bit lane */
        __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee), u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
        __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee), u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
        TR__SG_YTST(0, _mm256_permute2f128_ps(u0, u4, 0x20)); TR__SG_YTST(1, _mm256_permute2f128_ps(u1, u5, 0x20));
        TR__SG_YTST(2, _mm256_permute2f128_ps(u2, u6, 0x20)); TR__SG_YTST(3, _mm256_permute2f128_ps(u3, u7, 0x20));
        TR__SG_YTST(4, _mm256_permute2f128_ps(u0, u4, 0x31)); TR__SG_YTST(5, _mm256_permute2f128_ps(u1, u5, 0x31));
        TR__SG_YTST(6, _mm256_permute2f128_ps(u2, u6, 0x31)); TR__SG_YTST(7, _mm256_permute2f128_ps(u3, u7, 0x31));
    }
}

/* Packing, one width-generic body for both sets (B = 512: MR <= 16, NR = 32; B = 256: MR <= 8,
   NR = 16): op(A) panels through the lanes-square transposes (plain A) or masked row copies
   (transposed A); op(B) panels as vector copies (plain B) or transposes (transposed B). */
#define TR__SG_PACKS(B, TARGET, NAME)                                                                                    \
    TARGET TR__FN void tr__sgemm_pack_a_##NAME(int transA, const float *A, size_t lda, size_t m0, size_t mc, size_t k0, size_t kc, size_t MR, \
                                               float *dst) {                                                            \
        const size_t L = TR__LANES(B);                                                                                  \
        size_t p, k;                                                                                                    \
        tr__kmask##B sm = tr__mask##B((long)MR);                                                                        \
        for (p = 0; p < mc; p += MR) {                                                                                  \
            size_t mr = TR__MIN(MR, mc - p);                                                                            \
            if (!transA) {                                                                                              \
                const float *src = A + (m0 + p) * lda + k0;                                                             \
                for (k = 0; k < kc; k += L) tr__sg_tr##B(src + k, lda, mr, TR__MIN(L, kc - k), dst + k * MR, MR, sm);   \
            } else {                                                                                                    \
                tr__kmask##B lm = tr__mask##B((long)mr);                                                                \
                for (k = 0; k < kc; k++) tr__store##B(dst + k * MR, sm, tr__load##B(lm, A + (k0 + k) * lda + m0 + p));  \
            }                                                                                                           \
            dst += kc * MR;                                                                                             \
        }                                                                                                               \
    }                                                                                                                   \
    TARGET TR__FN void tr__sgemm_pack_b_##NAME(int transB, const float *B_, size_t ldb, size_t N, size_t p0, size_t p1, size_t k0, size_t kc, \
                                               size_t NR, float *blk) {                                                 \
        const size_t L = TR__LANES(B), W = 2 * L;                                                                       \
        size_t p, k;                                                                                                    \
        TR__UNUSED(NR);                                                                                                 \
        if (!transB) {                                                                                                  \
            for (k = 0; k < kc; k++) {                                                                                  \
                const float *src = B_ + (k0 + k) * ldb;                                                                 \
                for (p = p0; p < p1; p++) {                                                                             \
                    size_t n0 = p * W, nr = TR__MIN(W, N - n0);                                                         \
                    float *d = blk + p * kc * W + k * W;                                                                \
                    if (nr == W) {                                                                                      \
                        TR__MM(B, store_ps)(d, TR__MM(B, loadu_ps)(src + n0));                                          \
                        TR__MM(B, store_ps)(d + L, TR__MM(B, loadu_ps)(src + n0 + L));                                  \
                    } else {                                                                                            \
                        TR__MM(B, store_ps)(d, tr__load##B(tr__mask##B((long)nr), src + n0));                           \
                        TR__MM(B, store_ps)(d + L, tr__load##B(tr__mask##B(nr > L ? (long)(nr - L) : 0), src + n0 + L)); \
                    }                                                                                                   \
                }                                                                                                       \
            }                                                                                                           \
            return;                                                                                                     \
        }                                                                                                               \
        for (p = p0; p < p1; p++) {                                                                                     \
            size_t n0 = p * W, nr = TR__MIN(W, N - n0), h;                                                              \
            float *d = blk + p * kc * W;                                                                                \
            for (h = 0; h < 2; h++) {                                                                                   \
                size_t rows = nr > L * h ? TR__MIN(L, nr - L * h) : 0;                                                  \
                const float *src = rows ? B_ + (n0 + L * h) * ldb + k0 : B_;                                            \
                for (k = 0; k < kc; k += L) tr__sg_tr##B(src + k, ldb, rows, TR__MIN(L, kc - k), d + k * W + L * h, W, tr__mask##B((long)L)); \
            }                                                                                                           \
        }                                                                                                               \
    }
TR__SG_PACKS(512, TR__SG_AVX512, avx512)
TR__SG_PACKS(256, TR__SG_AVX2, avx2)

/* 6x16 micro-kernel */
TR__SG_AVX2 TR__FN void tr__sgemm_ukr_avx2(size_t kc, const float *a, const float *b, float *c, size_t ldc, size_t mr,
                                           size_t nr, int acc) {
    __m256 c0a = _mm256_setzero_ps(), c0b = _mm256_setzero_ps(), c1a = _mm256_setzero_ps(), c1b = _mm256_setzero_ps();
    __m256 c2a = _mm256_setzero_ps(), c2b = _mm256_setzero_ps(), c3a = _mm256_setzero_ps(), c3b = _mm256_setzero_ps();
    __m256 c4a = _mm256_setzero_ps(), c4b = _mm256_setzero_ps(), c5a = _mm256_setzero_ps(), c5b = _mm256_setzero_ps();
    __m256 b0, b1;
    __m256i k0 = tr__mask256(nr), k1 = tr__mask256(nr > 8 ? nr - 8 : 0);
    int full = nr >= 16;
    size_t k;
    for (k = 0; k < mr; k++) _mm_prefetch((const char *)(c + k * ldc), _MM_HINT_T0);
    for (k = 0; k + 2 <= kc; k += 2) {
        TR__SG_YSTEP(a, b);
        TR__SG_YSTEP(a + 6, b + 16);
        a += 12;
        b += 32;
    }
    for (; k < kc; k++) {
        TR__SG_YSTEP(a, b);
        a += 6;
        b += 16;
    }
    TR__SG_YSTORE(0) TR__SG_YSTORE(1) TR__SG_YSTORE(2) TR__SG_YSTORE(3) TR__SG_YSTORE(4) TR__SG_YSTORE(5)
}

TR__SG_AVX2 TR__FN void tr__sgemm_dot_avx2(size_t K, const float *const *a, const float *const *b, float *out) {
    __m256 s[16];
    size_t k, r, c;
    for (r = 0; r < 16; r++) s[r] = _mm256_setzero_ps();
    for (k = 0; k < K; k += 8) {
        __m256i m = tr__mask256(K - k);
        __m256 b0 = _mm256_maskload_ps(b[0] + k, m), b1 = _mm256_maskload_ps(b[1] + k, m);
        __m256 b2 = _mm256_maskload_ps(b[2] + k, m), b3 = _mm256_maskload_ps(b[3] + k, m);
        for (r = 0; r < 4; r++) {
            __m256 av = _mm256_maskload_ps(a[r] + k, m);
            s[4 * r] = _mm256_fmadd_ps(av, b0, s[4 * r]);
            s[4 * r + 1] = _mm256_fmadd_ps(av, b1, s[4 * r + 1]);
            s[4 * r + 2] = _mm256_fmadd_ps(av, b2, s[4 * r + 2]);
            s[4 * r + 3] = _mm256_fmadd_ps(av, b3, s[4 * r + 3]);
        }
    }
    for (c = 0; c < 16; c++) {
        __m128 v = _mm_add_ps(_mm256_castps256_ps128(s[c]), _mm256_extractf128_ps(s[c], 1));
        v = _mm_add_ps(v, _mm_movehl_ps(v, v));
        v = _mm_add_ss(v, _mm_movehdup_ps(v));
        out[c] = _mm_cvtss_f32(v);
    }
}

#define TR__SG_YRW 32
TR__SG_AVX2 TR__FN void tr__sgemm_rows_avx2(size_t K, const float *a, size_t sar, size_t sak, size_t nrows, const float *B, size_t ldb,
                                            size_t w, float *C, size_t ldc, int acc) {
    __m256 s[4][4];
    __m256i m[4];
    const float *ar[4];
    size_t k, r, q;
    for (q = 0; q < 4; q++) m[q] = tr__mask256(w > 8 * q ? w - 8 * q : 0);
    for (r = 0; r < 4; r++) {
        ar[r] = a + (r < nrows ? r : 0) * sar;
        for (q = 0; q < 4; q++) s[r][q] = _mm256_setzero_ps();
    }
    for (k = 0; k < K; k++) {
        const float *b = B + k * ldb;
        __m256 b0 = _mm256_maskload_ps(b, m[0]), b1 = _mm256_maskload_ps(b + 8, m[1]);
        __m256 b2 = _mm256_maskload_ps(b + 16, m[2]), b3 = _mm256_maskload_ps(b + 24, m[3]);
        for (r = 0; r < 4; r++) {
            __m256 av = _mm256_broadcast_ss(ar[r] + k * sak);
            s[r][0] = _mm256_fmadd_ps(av, b0, s[r][0]);
            s[r][1] = _mm256_fmadd_ps(av, b1, s[r][1]);
            s[r][2] = _mm256_fmadd_ps(av, b2, s[r][2]);
            s[r][3] = _mm256_fmadd_ps(av, b3, s[r][3]);
        }
    }
    for (r = 0; r < nrows; r++)
        for (q = 0; q < 4 && 8 * q < w; q++) {
            float *cp = C + r * ldc + 8 * q;
            __m256 v = s[r][q];
            if (acc) v = _mm256_add_ps(v, _mm256_maskload_ps(cp, m[q]));
            _mm256_maskstore_ps(cp, m[q], v);
        }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif /* TR__X86 */

#if TR__NEON
/* --- NEON (aarch64) ------------------------------------------------------------------------
   8x12 micro-kernel: 24 accumulators of 4 lanes, 2 registers of A and 3 of B, 29 of the 32.
   Each k broadcasts an A lane into 3 FMAs (vfmaq_laneq_f32), so every element of C is one fused
   sum over k in order, like the x86 kernels. The packing is the plain C one (gcc vectorises its
   copies). */
#define TR__SG_NROW(i, av, l)                                                                                                   \
    c##i##0 = vfmaq_laneq_f32(c##i##0, b0, av, l), c##i##1 = vfmaq_laneq_f32(c##i##1, b1, av, l), c##i##2 = vfmaq_laneq_f32(c##i##2, b2, av, l)
#define TR__SG_NOUT(i) vst1q_f32(t[i], c##i##0), vst1q_f32(t[i] + 4, c##i##1), vst1q_f32(t[i] + 8, c##i##2)
#define TR__SG_NACC(i, q) vst1q_f32(c + (i) * ldc + 4 * (q), acc ? vaddq_f32(vld1q_f32(c + (i) * ldc + 4 * (q)), c##i##q) : c##i##q)
#define TR__SG_NFULL(i) TR__SG_NACC(i, 0), TR__SG_NACC(i, 1), TR__SG_NACC(i, 2)
TR__FN void tr__sgemm_ukr_neon(size_t kc, const float *a, const float *b, float *c, size_t ldc, size_t mr, size_t nr, int acc) {
    float32x4_t z = vdupq_n_f32(0.0f), a0, a1, b0, b1, b2;
    float32x4_t c00 = z, c01 = z, c02 = z, c10 = z, c11 = z, c12 = z, c20 = z, c21 = z, c22 = z, c30 = z, c31 = z, c32 = z;
    float32x4_t c40 = z, c41 = z, c42 = z, c50 = z, c51 = z, c52 = z, c60 = z, c61 = z, c62 = z, c70 = z, c71 = z, c72 = z;
    float t[8][12];
    size_t k, i, j;
    for (k = 0; k < kc; k++, a += 8, b += 12) {
        a0 = vld1q_f32(a), a1 = vld1q_f32(a + 4);
        b0 = vld1q_f32(b), b1 = vld1q_f32(b + 4), b2 = vld1q_f32(b + 8);
        TR__SG_NROW(0, a0, 0); TR__SG_NROW(1, a0, 1); TR__SG_NROW(2, a0, 2); TR__SG_NROW(3, a0, 3);
        TR__SG_NROW(4, a1, 0); TR__SG_NROW(5, a1, 1); TR__SG_NROW(6, a1, 2); TR__SG_NROW(7, a1, 3);
    }
    if (mr == 8 && nr == 12) { /* a whole tile straight from the registers */
        TR__SG_NFULL(0); TR__SG_NFULL(1); TR__SG_NFULL(2); TR__SG_NFULL(3); TR__SG_NFULL(4); TR__SG_NFULL(5); TR__SG_NFULL(6); TR__SG_NFULL(7);
        return;
    }
    TR__SG_NOUT(0); TR__SG_NOUT(1); TR__SG_NOUT(2); TR__SG_NOUT(3); TR__SG_NOUT(4); TR__SG_NOUT(5); TR__SG_NOUT(6); TR__SG_NOUT(7);
    for (i = 0; i < mr; i++)
        for (j = 0; j < nr; j++) c[i * ldc + j] = acc ? c[i * ldc + j] + t[i][j] : t[i][j];
}
#undef TR__SG_NROW
#undef TR__SG_NOUT
#undef TR__SG_NACC
#undef TR__SG_NFULL

/* 4x4 dot products: 16 accumulators of 4 lanes (K's tail zero-filled), each summed across its
   lanes at the end, as the x86 dot kernels do. */
#define TR__SG_NDOT(r, av)                                                                                                      \
    s[4 * (r)] = vfmaq_f32(s[4 * (r)], av, b0), s[4 * (r) + 1] = vfmaq_f32(s[4 * (r) + 1], av, b1),                             \
    s[4 * (r) + 2] = vfmaq_f32(s[4 * (r) + 2], av, b2), s[4 * (r) + 3] = vfmaq_f32(s[4 * (r) + 3], av, b3)
TR__FN void tr__sgemm_dot_neon(size_t K, const float *const *a, const float *const *b, float *out) {
    float32x4_t s[16], b0, b1, b2, b3;
    size_t k, c;
    for (c = 0; c < 16; c++) s[c] = vdupq_n_f32(0.0f);
    for (k = 0; k + 4 <= K; k += 4) {
        b0 = vld1q_f32(b[0] + k), b1 = vld1q_f32(b[1] + k), b2 = vld1q_f32(b[2] + k), b3 = vld1q_f32(b[3] + k);
        TR__SG_NDOT(0, vld1q_f32(a[0] + k)); TR__SG_NDOT(1, vld1q_f32(a[1] + k));
        TR__SG_NDOT(2, vld1q_f32(a[2] + k)); TR__SG_NDOT(3, vld1q_f32(a[3] + k));
    }
    if (k < K) {
        long left = (long)(K - k);
        b0 = tr__load128(left, b[0] + k), b1 = tr__load128(left, b[1] + k), b2 = tr__load128(left, b[2] + k), b3 = tr__load128(left, b[3] + k);
        TR__SG_NDOT(0, tr__load128(left, a[0] + k)); TR__SG_NDOT(1, tr__load128(left, a[1] + k));
        TR__SG_NDOT(2, tr__load128(left, a[2] + k)); TR__SG_NDOT(3, tr__load128(left, a[3] + k));
    }
    for (c = 0; c < 16; c++) out[c] = vaddvq_f32(s[c]);
}
#undef TR__SG_NDOT

/* Up to 4 rows of C, 16 columns: 16 accumulators, B's row in 4 registers (its tail zero-filled);
   every element a fused sum over k in order, like the micro-kernel. */
#define TR__SG_NRW 16
#define TR__SG_NRFMA(r)                                                                                                         \
    do {                                                                                                                        \
        float32x4_t av_ = vld1q_dup_f32(ar[r] + k * sak);                                                                       \
        s##r##0 = vfmaq_f32(s##r##0, av_, b0), s##r##1 = vfmaq_f32(s##r##1, av_, b1);                                           \
        s##r##2 = vfmaq_f32(s##r##2, av_, b2), s##r##3 = vfmaq_f32(s##r##3, av_, b3);                                           \
    } while (0)
#define TR__SG_NROUT(r) vst1q_f32(t[r], s##r##0), vst1q_f32(t[r] + 4, s##r##1), vst1q_f32(t[r] + 8, s##r##2), vst1q_f32(t[r] + 12, s##r##3)
TR__FN void tr__sgemm_rows_neon(size_t K, const float *a, size_t sar, size_t sak, size_t nrows, const float *B, size_t ldb, size_t w,
                                float *C, size_t ldc, int acc) {
    float32x4_t z = vdupq_n_f32(0.0f), b0, b1, b2, b3;
    float32x4_t s00 = z, s01 = z, s02 = z, s03 = z, s10 = z, s11 = z, s12 = z, s13 = z;
    float32x4_t s20 = z, s21 = z, s22 = z, s23 = z, s30 = z, s31 = z, s32 = z, s33 = z;
    const float *ar[4];
    float t[4][TR__SG_NRW];
    size_t k, r, j;
    for (r = 0; r < 4; r++) ar[r] = a + (r < nrows ? r : 0) * sar;
    for (k = 0; k < K; k++) {
        const float *b = B + k * ldb;
        if (w == TR__SG_NRW) b0 = vld1q_f32(b), b1 = vld1q_f32(b + 4), b2 = vld1q_f32(b + 8), b3 = vld1q_f32(b + 12);
        else {
            long left = (long)w;
            b0 = tr__load128(left, b), b1 = tr__load128(left - 4, b + 4), b2 = tr__load128(left - 8, b + 8), b3 = tr__load128(left - 12, b + 12);
        }
        TR__SG_NRFMA(0); TR__SG_NRFMA(1); TR__SG_NRFMA(2); TR__SG_NRFMA(3);
    }
    TR__SG_NROUT(0); TR__SG_NROUT(1); TR__SG_NROUT(2); TR__SG_NROUT(3);
    for (r = 0; r < nrows; r++)
        for (j = 0; j < w; j++) C[r * ldc + j] = acc ? C[r * ldc + j] + t[r][j] : t[r][j];
}
#undef TR__SG_NRFMA
#undef TR__SG_NROUT
#endif /* TR__NEON */

/* --- bfloat16 pairs (a bfloat16 model's products) -------------------------------------------------
   While a bfloat16 model computes (ctx->gemm_fdt), every GEMM operand is a bfloat16 value in fp32
   storage, so the packed path may multiply in bfloat16 with fp32 sums: the packings round each value
   to bfloat16 (exact for such values; round to nearest even for others) and store two consecutive k
   per 32-bit word, low half the even k: A panels as ceil(kc/2) x MR words, B panels ceil(kc/2) x NR
   (an odd kc's last word has zero high halves), at the fp32 layout's panel offsets. The kernel per
   word and element of C: c += a_odd*b_odd, then c += a_even*b_even, each product exact and each sum
   rounded once to nearest even (the twin sums in double and rounds to float: the same, as the terms
   carry 24 and 16 significant bits),
   denormal inputs and results flushed to zero (sign kept): the semantics of
   AVX512_BF16's vdpbf16ps. tr__bgemm_ukr_c is that rule in plain C (the scalar twin, 4x16; it runs
   only with TINYREC_CPU_BF16=2, for the tests); tr__bgemm_ukr_avx512 is the instruction (14x32).
   Short products (the unpacked paths) stay on the fp32 kernels: same values, fp32 sums. */
TR__FN uint32_t tr__bf16_pair(float even, float odd) { return (uint32_t)tr__f32_to_bf16(even) | (uint32_t)tr__f32_to_bf16(odd) << 16; }

/* Words of a kc-deep AMX panel row: whole tiles of 32 k (16 words). */
TR__FN size_t tr__amx_kpad(size_t kc) { return (kc + 31) / 32 * 16; }
/* The pair packings in plain C (the twin's): A panels word (kp, i) at kp*MR + i (the kernels
   broadcast a word per row), B panels word (kp, j) at kp*NR + j. */
TR__FN void tr__bgemm_pack_a_c(int transA, const float *A, size_t lda, size_t m0, size_t mc, size_t k0, size_t kc, size_t MR, float *dst) {
    size_t p, i, k, kc2 = (kc + 1) / 2;
    for (p = 0; p < mc; p += MR) {
        size_t mr = TR__MIN(MR, mc - p);
        uint32_t *d = (uint32_t *)dst;
        for (k = 0; k < kc2; k++)
            for (i = 0; i < MR; i++) {
                size_t row = m0 + p + i, ke = k0 + 2 * k;
                float e = 0.0f, o = 0.0f;
                if (i < mr) {
                    e = transA ? A[ke * lda + row] : A[row * lda + ke];
                    if (2 * k + 1 < kc) o = transA ? A[(ke + 1) * lda + row] : A[row * lda + ke + 1];
                }
                d[k * MR + i] = tr__bf16_pair(e, o);
            }
        dst += kc * MR;
    }
}
TR__FN void tr__bgemm_pack_b_c(int transB, const float *B, size_t ldb, size_t N, size_t p0, size_t p1, size_t k0, size_t kc, size_t NR,
                               float *blk) {
    size_t p, j, k, kc2 = (kc + 1) / 2;
    for (p = p0; p < p1; p++) {
        size_t n0 = p * NR, nr = TR__MIN(NR, N - n0);
        uint32_t *d = (uint32_t *)(blk + p * kc * NR);
        for (k = 0; k < kc2; k++)
            for (j = 0; j < NR; j++) {
                size_t col = n0 + j, ke = k0 + 2 * k;
                float e = 0.0f, o = 0.0f;
                if (j < nr) {
                    e = transB ? B[col * ldb + ke] : B[ke * ldb + col];
                    if (2 * k + 1 < kc) o = transB ? B[col * ldb + ke + 1] : B[(ke + 1) * ldb + col];
                }
                d[k * NR + j] = tr__bf16_pair(e, o);
            }
    }
}

/* Flush to zero (sign kept): vdpbf16ps's treatment of denormals. */
TR__FN float tr__ftz(float x) { return fabsf(x) < FLT_MIN ? copysignf(0.0f, x) : x; }
TR__FN void tr__bgemm_ukr_c(size_t kc, const float *a, const float *b, float *c, size_t ldc, size_t mr, size_t nr, int acc) {
    float t[TR__SG_SMR][TR__SG_SNR];
    const uint32_t *aw = (const uint32_t *)a, *bw = (const uint32_t *)b;
    size_t i, j, k, h, kc2 = (kc + 1) / 2;
    for (i = 0; i < TR__SG_SMR; i++)
        for (j = 0; j < TR__SG_SNR; j++) t[i][j] = 0.0f;
    for (k = 0; k < kc2; k++, aw += TR__SG_SMR, bw += TR__SG_SNR)
        for (i = 0; i < TR__SG_SMR; i++)
            for (j = 0; j < TR__SG_SNR; j++)
                for (h = 2; h-- > 0;) { /* the odd k first */
                    double x = tr__ftz(tr__bf16_to_f32((uint16_t)(aw[i] >> (16 * h)))), y = tr__ftz(tr__bf16_to_f32((uint16_t)(bw[j] >> (16 * h))));
                    t[i][j] = tr__ftz((float)((double)t[i][j] + x * y));
                }
    for (i = 0; i < mr; i++)
        for (j = 0; j < nr; j++) c[i * ldc + j] = acc ? c[i * ldc + j] + t[i][j] : t[i][j];
}

#if TR__X86
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define TR__SG_BF16 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,fma")))
/* 14x32 on vdpbf16ps: the fp32 kernel's registers (28 accumulators, B as two zmm loads, A's words
   broadcast), one instruction per two k. */
#define TR__SG_BDOT(i, ap)                                                                                             \
    do {                                                                                                                \
        __m512bh av_ = (__m512bh)_mm512_set1_epi32((int)(ap)[i]);                                                       \
        c##i##a = _mm512_dpbf16_ps(c##i##a, av_, b0);                                                                   \
        c##i##b = _mm512_dpbf16_ps(c##i##b, av_, b1);                                                                   \
    } while (0)
#define TR__SG_BSTEP(ap, bp)                                                                                           \
    do {                                                                                                                \
        b0 = (__m512bh)_mm512_load_si512((const void *)(bp));                                                           \
        b1 = (__m512bh)_mm512_load_si512((const void *)((bp) + 16));                                                    \
        TR__SG_BDOT(0, ap); TR__SG_BDOT(1, ap); TR__SG_BDOT(2, ap); TR__SG_BDOT(3, ap); TR__SG_BDOT(4, ap);            \
        TR__SG_BDOT(5, ap); TR__SG_BDOT(6, ap); TR__SG_BDOT(7, ap); TR__SG_BDOT(8, ap); TR__SG_BDOT(9, ap);            \
        TR__SG_BDOT(10, ap); TR__SG_BDOT(11, ap); TR__SG_BDOT(12, ap); TR__SG_BDOT(13, ap);                            \
    } while (0)
TR__SG_BF16 TR__FN void tr__bgemm_ukr_avx512(size_t kc, const float *a, const float *b, float *c, size_t ldc, size_t mr, size_t nr, int acc) {
    __m512 c0a, c0b, c1a, c1b, c2a, c2b, c3a, c3b, c4a, c4b, c5a, c5b, c6a, c6b;
    __m512 c7a, c7b, c8a, c8b, c9a, c9b, c10a, c10b, c11a, c11b, c12a, c12b, c13a, c13b;
    __m512bh b0, b1;
    __mmask16 m0 = tr__mask512(nr), m1 = tr__mask512(nr > 16 ? nr - 16 : 0);
    const uint32_t *aw = (const uint32_t *)a, *bw = (const uint32_t *)b;
    size_t k, i, kc2 = (kc + 1) / 2;
    TR__SG_ZBEGIN;
    for (k = 0; k + 2 <= kc2; k += 2) {
        TR__SG_BSTEP(aw, bw);
        TR__SG_BSTEP(aw + 14, bw + 32);
        aw += 28;
        bw += 64;
    }
    if (k < kc2) TR__SG_BSTEP(aw, bw);
    TR__SG_ZSTORE(0) TR__SG_ZSTORE(1) TR__SG_ZSTORE(2) TR__SG_ZSTORE(3) TR__SG_ZSTORE(4) TR__SG_ZSTORE(5)
    TR__SG_ZSTORE(6) TR__SG_ZSTORE(7) TR__SG_ZSTORE(8) TR__SG_ZSTORE(9) TR__SG_ZSTORE(10) TR__SG_ZSTORE(11)
    TR__SG_ZSTORE(12) TR__SG_ZSTORE(13)
}
#undef TR__SG_BDOT
#undef TR__SG_BSTEP

/* The pair packings in vectors (vcvtne2ps2bf16 rounds to nearest even; fp32 denormals become zeros,
   which the products flush anyway). Rows of op(A) / columns of op(B) that are contiguous in k convert
   straight to words (tr__bf_row); k-major ones pair two rows of 16 (tr__bf_pairs); the layouts that
   need the other orientation go through a buffer and tr__sg_tr512's 16x16 transposes. A panels are
   k-major (word (kp, i) at kp*MR + i, for vdpbf16ps) or row-major (row i's kpad words, for AMX tiles);
   B panels are word (kp, j) at kp*32 + j, kpad rows, for both. Everything past the data is zero. */
#define TR__BG_KC2 ((TR__SG_KC + 1) / 2)
TR__SG_BF16 static inline void tr__bf_row(const float *src, size_t n, uint32_t *dst) {
    size_t k;
    for (k = 0; k < n; k += 32) {
        size_t left = n - k;
        __m512 lo = _mm512_maskz_loadu_ps(tr__mask512((long)left), src + k);
        __m512 hi = _mm512_maskz_loadu_ps(tr__mask512(left > 16 ? (long)(left - 16) : 0), src + k + 16);
        _mm512_mask_storeu_epi32(dst + k / 2, tr__mask512((long)(TR__MIN(left, 32) + 1) / 2), (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
}
TR__SG_BF16 static inline void tr__bf_pairs(const float *e, const float *o, size_t n, uint32_t *dst) {
    static const uint16_t mix[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    __m512i idx = _mm512_loadu_si512((const void *)mix);
    size_t j;
    for (j = 0; j < n; j += 16) {
        __mmask16 m = tr__mask512((long)(n - j));
        __m512 ev = _mm512_maskz_loadu_ps(m, e + j), ov = o ? _mm512_maskz_loadu_ps(m, o + j) : _mm512_setzero_ps();
        _mm512_mask_storeu_epi32(dst + j, m, _mm512_permutexvar_epi16(idx, (__m512i)_mm512_cvtne2ps_pbh(ov, ev)));
    }
}
TR__SG_BF16 static void tr__bgemm_pack_a_v(int transA, const float *A, size_t lda, size_t m0, size_t mc, size_t k0, size_t kc, size_t MR, float *dst,
                                           int rowmajor) {
    uint32_t tmp[32 * TR__BG_KC2];
    size_t p, i, k, kc2 = (kc + 1) / 2, kpad = rowmajor ? tr__amx_kpad(kc) : kc2;
    for (p = 0; p < mc; p += MR, dst += kc * MR) {
        size_t mr = TR__MIN(MR, mc - p);
        uint32_t *d = (uint32_t *)dst;
        if (!rowmajor && transA) {
            for (k = 0; k < kc2; k++) {
                const float *e = A + (k0 + 2 * k) * lda + m0 + p;
                tr__bf_pairs(e, 2 * k + 1 < kc ? e + lda : NULL, mr, d + k * MR);
                for (i = mr; i < MR; i++) d[k * MR + i] = 0;
            }
        } else if (!rowmajor) {
            for (i = 0; i < mr; i++) tr__bf_row(A + (m0 + p + i) * lda + k0, kc, tmp + i * kc2);
            for (k = 0; k < kc2; k += 16) tr__sg_tr512((const float *)(tmp + k), kc2, mr, TR__MIN(16, kc2 - k), (float *)(d + k * MR), MR, tr__mask512((long)MR));
        } else if (!transA) {
            for (i = 0; i < MR; i++) {
                if (i < mr) tr__bf_row(A + (m0 + p + i) * lda + k0, kc, d + i * kpad);
                for (k = i < mr ? kc2 : 0; k < kpad; k++) d[i * kpad + k] = 0;
            }
        } else {
            for (k = 0; k < kc2; k++) {
                const float *e = A + (k0 + 2 * k) * lda + m0 + p;
                tr__bf_pairs(e, 2 * k + 1 < kc ? e + lda : NULL, mr, tmp + k * 32);
            }
            for (i = 0; i < mr; i += 16)
                for (k = 0; k < kpad; k += 16)
                    tr__sg_tr512((const float *)(tmp + k * 32 + i), 32, k < kc2 ? TR__MIN(16, kc2 - k) : 0, TR__MIN(16, mr - i), (float *)(d + i * kpad + k), kpad,
                                 tr__mask512(16));
            for (i = mr; i < MR; i++) memset(d + i * kpad, 0, kpad * sizeof *d);
        }
    }
}
TR__SG_BF16 static void tr__bgemm_pack_b_v(int transB, const float *B, size_t ldb, size_t N, size_t p0, size_t p1, size_t k0, size_t kc, size_t NR,
                                           float *blk, size_t kpad) {
    uint32_t tmp[32 * TR__BG_KC2];
    size_t p, j, k, h, kc2 = (kc + 1) / 2;
    for (p = p0; p < p1; p++) {
        size_t n0 = p * NR, nr = TR__MIN(NR, N - n0);
        uint32_t *d = (uint32_t *)(blk + p * kc * NR);
        if (!transB)
            for (k = 0; k < kc2; k++) {
                const float *e = B + (k0 + 2 * k) * ldb + n0;
                tr__bf_pairs(e, 2 * k + 1 < kc ? e + ldb : NULL, nr, d + k * NR);
                for (j = nr; j < NR; j++) d[k * NR + j] = 0;
            }
        else {
            for (j = 0; j < nr; j++) tr__bf_row(B + (n0 + j) * ldb + k0, kc, tmp + j * kc2);
            for (h = 0; h < NR; h += 16)
                for (k = 0; k < kc2; k += 16)
                    tr__sg_tr512((const float *)(tmp + h * kc2 + k), kc2, nr > h ? TR__MIN(16, nr - h) : 0, TR__MIN(16, kc2 - k), (float *)(d + k * NR + h), NR, tr__mask512(16));
        }
        memset(d + kc2 * NR, 0, (kpad - kc2) * NR * sizeof *d);
    }
}
TR__SG_BF16 TR__FN void tr__bgemm_pack_a_avx512(int transA, const float *A, size_t lda, size_t m0, size_t mc, size_t k0, size_t kc, size_t MR, float *dst) {
    tr__bgemm_pack_a_v(transA, A, lda, m0, mc, k0, kc, MR, dst, 0);
}
TR__SG_BF16 TR__FN void tr__bgemm_pack_b_avx512(int transB, const float *B, size_t ldb, size_t N, size_t p0, size_t p1, size_t k0, size_t kc, size_t NR,
                                                float *blk) {
    tr__bgemm_pack_b_v(transB, B, ldb, N, p0, p1, k0, kc, NR, blk, (kc + 1) / 2);
}
TR__SG_BF16 TR__FN void tr__bgemm_pack_a_amx(int transA, const float *A, size_t lda, size_t m0, size_t mc, size_t k0, size_t kc, size_t MR, float *dst) {
    tr__bgemm_pack_a_v(transA, A, lda, m0, mc, k0, kc, MR, dst, 1);
}
TR__SG_BF16 TR__FN void tr__bgemm_pack_b_amx(int transB, const float *B, size_t ldb, size_t N, size_t p0, size_t p1, size_t k0, size_t kc, size_t NR,
                                             float *blk) {
    tr__bgemm_pack_b_v(transB, B, ldb, N, p0, p1, k0, kc, NR, blk, tr__amx_kpad(kc));
}

/* AMX, 32x32: C as 2x2 tiles of 16x16 fp32 (tmm0-3), A as two 16-row tiles of 32 k (tmm4-5, from the
   row-major A panel), B as two 16-column tiles of 16 pairs (tmm6-7, from the B panel with a 128-byte
   row stride). A whole tile of C goes straight between C and the tiles (loaded first when summed
   into); an edge tile through a buffer, under the edge masks. The tile configuration is loaded when a
   thread starts its jobs and released when it ends them (tr__sgemm_kern's enter / leave).
   tdpbf16ps's rounding of its sums is the implementation's: the tests hold it to the fp32 bound,
   not to the twin's bits. */
#define TR__SG_AMX __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16,fma,amx-tile,amx-bf16")))
typedef struct tr__amx_cfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tr__amx_cfg;
TR__SG_AMX static void tr__amx_enter(void) {
    tr__amx_cfg cfg __attribute__((aligned(64)));
    int i;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (i = 0; i < 8; i++) cfg.colsb[i] = 64, cfg.rows[i] = 16;
    /* (not GCC 12's _tile_loadconfig: its asm names only 8 bytes of the operand, so the rest of cfg's stores may be dropped) */
    __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
}
TR__SG_AMX static void tr__amx_leave(void) { _tile_release(); }
TR__SG_AMX TR__FN void tr__bgemm_ukr_amx(size_t kc, const float *a, const float *b, float *c, size_t ldc, size_t mr, size_t nr, int acc) {
    float t[32 * 32] __attribute__((aligned(64)));
    const uint32_t *aw = (const uint32_t *)a, *bw = (const uint32_t *)b;
    size_t kpad = tr__amx_kpad(kc), w, i;
    int whole = mr == 32 && nr == 32;
    if (whole && acc) {
        _tile_loadd(0, c, ldc * 4);
        _tile_loadd(1, c + 16, ldc * 4);
        _tile_loadd(2, c + 16 * ldc, ldc * 4);
        _tile_loadd(3, c + 16 * ldc + 16, ldc * 4);
    } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
    }
    for (w = 0; w < kpad; w += 16) {
        _tile_loadd(4, aw + w, kpad * 4);
        _tile_loadd(5, aw + 16 * kpad + w, kpad * 4);
        _tile_loadd(6, bw + w * 32, 128);
        _tile_loadd(7, bw + w * 32 + 16, 128);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    if (whole) {
        _tile_stored(0, c, ldc * 4);
        _tile_stored(1, c + 16, ldc * 4);
        _tile_stored(2, c + 16 * ldc, ldc * 4);
        _tile_stored(3, c + 16 * ldc + 16, ldc * 4);
        return;
    }
    _tile_stored(0, t, 128);
    _tile_stored(1, t + 16, 128);
    _tile_stored(2, t + 16 * 32, 128);
    _tile_stored(3, t + 16 * 32 + 16, 128);
    {
        __mmask16 m0 = tr__mask512((long)nr), m1 = tr__mask512(nr > 16 ? (long)nr - 16 : 0);
        for (i = 0; i < mr; i++) {
            float *cr = c + i * ldc;
            __m512 x = _mm512_load_ps(t + 32 * i), y = _mm512_load_ps(t + 32 * i + 16);
            if (acc) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m0, cr)), y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(m1, cr + 16));
            _mm512_mask_storeu_ps(cr, m0, x);
            _mm512_mask_storeu_ps(cr + 16, m1, y);
        }
    }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif /* TR__X86 */

/* The packed path's kernels for a bfloat16 model's products: 0 the fp32 kernels, 1 vdpbf16ps, 2 the
   scalar twin, 3 AMX. ctx->bf16_gemm (TINYREC_CPU_BF16): 1 (default) the best the CPU has while the
   avx512 set runs, AMX then vdpbf16ps; 0 never; 2 the twin on any CPU; 3 vdpbf16ps also where AMX is. */
#define TR__BG_DPBF16 1
#define TR__BG_TWIN 2
#define TR__BG_AMX 3
/* The kernels a bfloat16 model's products run on here (what the model's log line and forward_dtype auto ask). */
TR__FN int tr__bgemm_kernel(const tr_ctx *ctx) {
    if (ctx->bf16_gemm == 0) return 0;
    if (ctx->bf16_gemm == 2) return TR__BG_TWIN;
    if (ctx->simd != TR__SIMD_AVX512 || !ctx->cpu_bf16) return 0;
    return ctx->bf16_gemm == 1 && ctx->cpu_amx ? TR__BG_AMX : TR__BG_DPBF16;
}
/* The kernels of the products running now: tr__bgemm_kernel's while a bfloat16 model computes. */
TR__FN int tr__bgemm_mode(const tr_ctx *ctx) { return ctx->gemm_fdt == TR_FWD_BFLOAT16 ? tr__bgemm_kernel(ctx) : 0; }
TR__FN void tr__bgemm_kernels(tr__sgemm_kern *k, int mode) {
    k->mr = TR__SG_SMR, k->nr = TR__SG_SNR;
    k->ukr = tr__bgemm_ukr_c;
    k->pack_a = tr__bgemm_pack_a_c;
    k->pack_b = tr__bgemm_pack_b_c;
#if TR__X86
    if (mode == TR__BG_DPBF16) k->mr = 14, k->nr = 32, k->ukr = tr__bgemm_ukr_avx512, k->pack_a = tr__bgemm_pack_a_avx512, k->pack_b = tr__bgemm_pack_b_avx512;
    if (mode == TR__BG_AMX) {
        k->mr = 32, k->nr = 32, k->ukr = tr__bgemm_ukr_amx, k->pack_a = tr__bgemm_pack_a_amx, k->pack_b = tr__bgemm_pack_b_amx;
        k->enter = tr__amx_enter, k->leave = tr__amx_leave;
    }
#else
    TR__UNUSED(mode);
#endif
}
TR__FN tr__sgemm_kern tr__sgemm_kernels(tr__simd simd) {
    tr__sgemm_kern k;
    k.enter = k.leave = NULL;
    k.mr = TR__SG_SMR;
    k.nr = TR__SG_SNR;
    k.rw = TR__SG_SRW;
    k.ukr = tr__sgemm_ukr_c;
    k.pack_a = tr__sgemm_pack_a_c;
    k.pack_b = tr__sgemm_pack_b_c;
    k.dot = tr__sgemm_dot_c;
    k.rows = tr__sgemm_rows_c;
#if TR__X86
    if (simd == TR__SIMD_AVX512) {
        k.mr = 14;
        k.nr = 32;
        k.rw = TR__SG_ZRW;
        k.ukr = tr__sgemm_ukr_avx512;
        k.pack_a = tr__sgemm_pack_a_avx512;
        k.pack_b = tr__sgemm_pack_b_avx512;
        k.dot = tr__sgemm_dot_avx512;
        k.rows = tr__sgemm_rows_avx512;
    } else if (simd == TR__SIMD_AVX2) {
        k.mr = 6;
        k.nr = 16;
        k.rw = TR__SG_YRW;
        k.ukr = tr__sgemm_ukr_avx2;
        k.pack_a = tr__sgemm_pack_a_avx2;
        k.pack_b = tr__sgemm_pack_b_avx2;
        k.dot = tr__sgemm_dot_avx2;
        k.rows = tr__sgemm_rows_avx2;
    }
#endif
#if TR__NEON
    if (simd == TR__SIMD_NEON) {
        k.mr = 8;
        k.nr = 12;
        k.rw = TR__SG_NRW;
        k.ukr = tr__sgemm_ukr_neon;
        k.dot = tr__sgemm_dot_neon;
        k.rows = tr__sgemm_rows_neon;
    }
#endif
    TR__UNUSED(simd);
    return k;
}

/* --- packed weights ----------------------------------------------------------------------------
   A model registers its parameter buffer as a region (tr__pw_attach). An operand of the packed
   path that lies inside a region is packed whole into a buffer the region keeps, and later calls
   reuse that packing until the region's version changes. Every writer of the weights bumps the
   version: the optimizer step, a load or commit (tr__model_upload), the EMA swap, handing out a
   writable view. The cached packing is the one the call would have made, so results are the same
   bit for bit; what it saves is packing the same weights at every call (inference, the no-grad
   cycles of training, the token mix's weight shared by every batch row). */
#define TR__PW_MAX 96
typedef struct tr__pw_entry {
    const float *src;
    size_t ld, outer, K;   /* op(X) is outer x K: M x K for A (side 0), N x K for B (side 1) */
    int side, kmajor;      /* kmajor: X is stored K x outer (transposed A, plain B) */
    tr__sgemm_ukr_fn ukr;  /* the packing's layout follows the micro-kernel */
    unsigned long version; /* the region's version when packed */
    float *data;
    size_t bytes;
} tr__pw_entry;
typedef struct tr__pw {
    struct tr__pw *next; /* the context's list */
    const float *base;   /* the region [base, base + n) */
    size_t n;
    unsigned long version;
    size_t bytes; /* held by the entries */
    long packs;   /* packings made (first use or stale): the tests count reuse with it */
    int count;
    tr__pw_entry e[TR__PW_MAX];
} tr__pw;

TR__FN void tr__pw_attach(tr_ctx *ctx, tr__pw *pw, const float *base, size_t n) {
    memset(pw, 0, sizeof *pw);
    pw->base = base;
    pw->n = n;
    pw->version = 1;
    pw->next = ctx->pw;
    ctx->pw = pw;
}

/* Unlinks the region and frees its packings (a region never attached is left as it is). */
TR__FN void tr__pw_detach(tr_ctx *ctx, tr__pw *pw) {
    tr__pw **q;
    int i;
    for (q = &ctx->pw; *q; q = &(*q)->next)
        if (*q == pw) {
            *q = pw->next;
            for (i = 0; i < pw->count; i++) tr__free(ctx, pw->e[i].data);
            pw->count = 0;
            pw->bytes = 0;
            return;
        }
}

/* The cached packing of operand X (op(A) is outer x K, op(B) K x outer; leading dimension ld;
   `floats` long), or
   *out = NULL when X lies in no region, or the region is full, or caching it would take the
   region's parameters and gradients plus its packings past the memory limit. *stale = 1: the
   caller packs into *out before reading it. */
TR__FN tr_status tr__pw_find(tr_ctx *ctx, tr__sgemm_ukr_fn ukr, int side, int kmajor, const float *X, size_t ld, size_t outer, size_t K, size_t floats,
                             float **out, int *stale) {
    size_t span = kmajor ? (K - 1) * ld + outer : (outer - 1) * ld + K, bytes = floats * sizeof(float);
    tr__pw *pw;
    tr__pw_entry *e;
    int i;
    *out = NULL;
    *stale = 0;
    for (pw = X ? ctx->pw : NULL; pw; pw = pw->next)
        if (X >= pw->base && X < pw->base + pw->n && span <= (size_t)(pw->base + pw->n - X)) break;
    if (!pw) return TR_OK;
    for (i = 0; i < pw->count; i++) {
        e = &pw->e[i];
        if (e->src == X && e->side == side && e->kmajor == kmajor && e->ld == ld && e->outer == outer && e->K == K && e->ukr == ukr) {
            *stale = e->version != pw->version;
            pw->packs += *stale;
            e->version = pw->version;
            *out = e->data;
            return TR_OK;
        }
    }
    if (pw->count == TR__PW_MAX || (ctx->mem_limit && (double)pw->bytes + (double)bytes + 8.0 * (double)pw->n > (double)ctx->mem_limit)) return TR_OK;
    e = &pw->e[pw->count];
    if (!(e->data = (float *)tr__alloc(ctx, bytes))) return TR_ERR_OUT_OF_MEMORY;
    e->src = X, e->ld = ld, e->outer = outer, e->K = K, e->side = side, e->kmajor = kmajor, e->ukr = ukr;
    e->version = pw->version;
    e->bytes = bytes;
    pw->bytes += bytes;
    pw->count++;
    pw->packs++;
    *out = e->data;
    *stale = 1;
    return TR_OK;
}

/* --- the drivers ------------------------------------------------------------------------------- */
typedef struct tr__sgemm_job {
    int transA, transB, accumulate;
    size_t M, N, K;
    const float *A, *B;
    size_t lda, ldb, ldc;
    float *C;
    tr__sgemm_kern kern;
    /* packed path */
    size_t kc_nom;          /* KC block depth (the last block may be shallower) */
    size_t npan, mcb, nmb;  /* NR panels of op(B); rows per M block, M blocks */
    size_t pcb, nnb;        /* panels per N range, N ranges */
    size_t bunit;           /* panels per B-packing work unit */
    float *bpack, *apack;   /* packed op(B); per-thread A slabs, astride floats apart */
    size_t astride;
    float *apre;            /* or all of op(A) packed once: KC block k0 at apre + k0 * mpad */
    size_t mpad, naunits;   /* and its packing units (naunits = 0: packed already) */
    size_t nbat, pb, sB, sC; /* nbat products sharing op(A): B + b*sB, C + b*sC, pb panels each */
    size_t kbat, nkbp, sAk, sBk; /* or kbat products summed into C: A + b*sAk, B + b*sBk, nkbp KC blocks each */
    /* dot path: row r of op(A) at arow + r*astr (contiguous in k), column c of op(B) at brow + c*bstr */
    const float *arow, *brow;
    size_t astr, bstr;
} tr__sgemm_job;

/* B-packing unit u: one KC block x bunit panels. */
TR__FN void tr__sgemm_pack_b_unit(const tr__sgemm_job *J, size_t u) {
    size_t ngroups = (J->npan + J->bunit - 1) / J->bunit, q = u / ngroups;
    size_t k0 = (q % J->nkbp) * J->kc_nom, g = u % ngroups, NR = J->kern.nr;
    size_t kc = TR__MIN(J->kc_nom, J->K - k0), p0 = g * J->bunit, p1 = TR__MIN(J->npan, p0 + J->bunit), b, e;
    const float *B = J->B + (q / J->nkbp) * J->sBk;
    for (; p0 < p1; p0 = e) { /* the panels of each product in the unit */
        b = p0 / J->pb, e = TR__MIN(p1, (b + 1) * J->pb);
        J->kern.pack_b(J->transB, B + b * J->sB, J->ldb, J->N, p0 - b * J->pb, e - b * J->pb, k0, kc, NR, J->bpack + q * J->kc_nom * J->npan * NR + b * J->pb * kc * NR);
    }
}

/* A-packing unit u: one KC block x 4 MR panels of all of op(A). */
TR__FN void tr__sgemm_pack_a_unit(const tr__sgemm_job *J, size_t u) {
    size_t MR = J->kern.mr, ngroups = (J->mpad / MR + 3) / 4, q = u / ngroups;
    size_t k0 = (q % J->nkbp) * J->kc_nom, m0 = (u % ngroups) * 4 * MR, kc = TR__MIN(J->kc_nom, J->K - k0);
    J->kern.pack_a(J->transA, J->A + (q / J->nkbp) * J->sAk, J->lda, m0, TR__MIN(4 * MR, J->M - m0), k0, kc, MR, J->apre + q * J->kc_nom * J->mpad + m0 * kc);
}

/* Job u: M block u % nmb, N range u / nmb, all of K. */
TR__FN void tr__sgemm_job_run(const tr__sgemm_job *J, float *apack, size_t u) {
    size_t MR = J->kern.mr, NR = J->kern.nr, ncp = TR__MAX(TR__SG_NC / NR, 1);
    size_t m0 = (u % J->nmb) * J->mcb, mc = TR__MIN(J->mcb, J->M - m0);
    size_t p_lo = (u / J->nmb) * J->pcb, p_hi = TR__MIN(J->npan, p_lo + J->pcb);
    size_t q, q0, ir, p;
    tr__sgemm_ukr_fn ukr = J->kern.ukr;
    if (J->kern.enter) J->kern.enter();
    for (q = 0; q < J->nkbp * J->kbat; q++) { /* the KC blocks, product after product */
        size_t k0 = (q % J->nkbp) * J->kc_nom, kc = TR__MIN(J->kc_nom, J->K - k0);
        const float *blk = J->bpack + q * J->kc_nom * J->npan * NR;
        int acc = J->accumulate || q > 0;
        const float *aslab = J->apre ? J->apre + q * J->kc_nom * J->mpad + m0 * kc : apack;
        if (!J->apre) J->kern.pack_a(J->transA, J->A + (q / J->nkbp) * J->sAk, J->lda, m0, mc, k0, kc, MR, apack);
        for (q0 = p_lo; q0 < p_hi; q0 += ncp) {
            size_t q1 = TR__MIN(q0 + ncp, p_hi);
            for (ir = 0; ir < mc; ir += MR) {
                const float *ap = aslab + ir * kc;
                size_t mr = TR__MIN(MR, mc - ir);
                float *crow = J->C + (m0 + ir) * J->ldc;
                for (p = q0; p < q1; p++) {
                    size_t b = p / J->pb, n0 = (p - b * J->pb) * NR;
                    ukr(kc, ap, blk + p * kc * NR, crow + b * J->sC + n0, J->ldc, mr, TR__MIN(NR, J->N - n0), acc);
                }
            }
        }
    }
    if (J->kern.leave) J->kern.leave();
}

/* Dot unit u: a 4x4 block of C. Consecutive units walk the short dimension, so that the four
   rows of the long operand stay in L1 while the short one is swept. */
TR__FN void tr__sgemm_dot_unit(const tr__sgemm_job *J, size_t ngi, size_t u) {
    size_t ngj = (J->N + 3) / 4, r, c;
    size_t i0 = 4 * (J->M > J->N ? u / ngj : u % ngi), j0 = 4 * (J->M > J->N ? u % ngj : u / ngi);
    const float *ap[4], *bp[4];
    float out[16];
    for (r = 0; r < 4; r++) {
        ap[r] = J->arow + TR__MIN(i0 + r, J->M - 1) * J->astr;
        bp[r] = J->brow + TR__MIN(j0 + r, J->N - 1) * J->bstr;
    }
    J->kern.dot(J->K, ap, bp, out);
    for (r = 0; r < 4 && i0 + r < J->M; r++)
        for (c = 0; c < 4 && j0 + c < J->N; c++) {
            float *cp = J->C + (i0 + r) * J->ldc + j0 + c;
            *cp = J->accumulate ? *cp + out[4 * r + c] : out[4 * r + c];
        }
}

/* Rows unit u: rows 4*(u % ngi), columns rw*(u / ngi), op(B) = B. */
TR__FN void tr__sgemm_rows_unit(const tr__sgemm_job *J, size_t ngi, size_t u) {
    size_t i0 = 4 * (u % ngi), j0 = J->kern.rw * (u / ngi);
    size_t sar = J->transA ? 1 : J->lda, sak = J->transA ? J->lda : 1;
    J->kern.rows(J->K, J->A + i0 * sar, sar, sak, TR__MIN(4, J->M - i0), J->B + j0, J->ldb, TR__MIN(J->kern.rw, J->N - j0),
                 J->C + i0 * J->ldc + j0, J->ldc, J->accumulate);
}

/* Threads worth starting for `flops` of work in `units` pieces (about 2 MFLOP per thread at least). */
TR__FN int tr__sgemm_threads(const tr_ctx *ctx, double flops, size_t units) {
    int nt = ctx->num_threads > 0 ? ctx->num_threads : 1;
#if TR__OMP || TR__POOL
    if (flops < 2e6 * nt) nt = (int)TR__MAX(1.0, flops / 2e6);
    if ((size_t)nt > units) nt = (int)TR__MAX(units, 1);
#else
    TR__UNUSED(flops);
    TR__UNUSED(units);
    nt = 1;
#endif
    return nt;
}

/* The unpacked paths: 4x4 dot blocks (dot != 0) or 4-row streaming of B's rows. */
typedef struct tr__sgemm_small_args { const tr__sgemm_job *J; size_t ngi; int dot; } tr__sgemm_small_args;
TR__FN void tr__sgemm_small_range(void *arg, long u0, long u1) {
    const tr__sgemm_small_args *p = (const tr__sgemm_small_args *)arg;
    long u;
    for (u = u0; u < u1; u++) {
        if (p->dot) tr__sgemm_dot_unit(p->J, p->ngi, (size_t)u);
        else tr__sgemm_rows_unit(p->J, p->ngi, (size_t)u);
    }
}
TR__FN tr_status tr__sgemm_small(tr_ctx *ctx, tr__sgemm_job *J, int dot) {
    size_t ngi = (J->M + 3) / 4, ngj = dot ? (J->N + 3) / 4 : (J->N + J->kern.rw - 1) / J->kern.rw, nunits = ngi * ngj;
    tr__sgemm_small_args p;
    if (dot) {
        size_t i, j, k;
        J->arow = J->A, J->astr = J->lda;
        J->brow = J->B, J->bstr = J->ldb;
        if (J->transA || !J->transB) { /* make the one that is not contiguous in k so (it is small) */
            size_t rows = J->transA ? J->M : J->N, bytes;
            float *t;
            if (!tr__size_mul(rows, J->K * sizeof(float), &bytes)) return tr__err(ctx, TR_ERR_OVERFLOW, "sgemm: workspace size overflows");
            t = (float *)tr__scratch(ctx, bytes);
            if (!t) return TR_ERR_OUT_OF_MEMORY;
            if (J->transA) {
                for (k = 0; k < J->K; k++)
                    for (i = 0; i < J->M; i++) t[i * J->K + k] = J->A[k * J->lda + i];
                J->arow = t, J->astr = J->K;
            } else {
                for (k = 0; k < J->K; k++)
                    for (j = 0; j < J->N; j++) t[j * J->K + k] = J->B[k * J->ldb + j];
                J->brow = t, J->bstr = J->K;
            }
        }
    }
    p.J = J, p.ngi = ngi, p.dot = dot;
    tr__par_for(tr__sgemm_threads(ctx, 2.0 * (double)J->M * (double)J->N * (double)J->K, nunits), (long)nunits, 0, tr__sgemm_small_range, &p);
    return TR_OK;
}

#if TR__POOL
/* The packed path's two loops on the pool (OpenMP runs them in one region, below). */
typedef struct tr__sgemm_pool_args { const tr__sgemm_job *J; int nt; size_t nbunits; } tr__sgemm_pool_args;
TR__FN void tr__sgemm_pack_range(void *arg, long u0, long u1) { /* op(B)'s units, then op(A)'s */
    const tr__sgemm_pool_args *p = (const tr__sgemm_pool_args *)arg;
    long u;
    for (u = u0; u < u1; u++) {
        if ((size_t)u < p->nbunits) tr__sgemm_pack_b_unit(p->J, (size_t)u);
        else tr__sgemm_pack_a_unit(p->J, (size_t)u - p->nbunits);
    }
}
TR__FN void tr__sgemm_jobs_range(void *arg, long u0, long u1) {
    const tr__sgemm_pool_args *p = (const tr__sgemm_pool_args *)arg;
    int t = tr__thread_id();
    float *ap = p->J->apre ? NULL : p->J->apack + (size_t)(t < p->nt ? t : 0) * p->J->astride; /* (t >= nt: a loop run alone inside another) */
    long u;
    for (u = u0; u < u1; u++) tr__sgemm_job_run(p->J, ap, (size_t)u);
}
#endif

/* nbat products C + b*sC (=|+=) op(A) op(B + b*sB) that share op(A), run as one: their op(B)
   panels side by side (each product's own, so every element is summed as tr__sgemm sums it),
   one team of threads, op(A) packed once. Or (nbat = 1) kbat products summed into C,
   C (=|+=) sum_b op(A + b*sA) op(B + b*sB), run as one: every product's KC blocks one after
   another (each product's own blocking, and C takes each block's sum in that order, as the
   products run one by one sum it). Shapes of the unpacked paths run one by one. */
TR__FN tr_status tr__sgemm_nb(tr_ctx *ctx, size_t nbat, size_t kbat, int transA, int transB, size_t M, size_t N, size_t K, const float *A, size_t lda,
                              size_t sA, const float *B, size_t ldb, size_t sB, float *C, size_t ldc, size_t sC, int accumulate) {
    tr__sgemm_job J;
    size_t MR, NR, nkb, Ktot, bfloats, afloats, total, i, njobs, nbunits;
    int nt, packa, packb;
    tr_status st;
    if (M == 0 || N == 0) return TR_OK;
    if (nbat * kbat > 1 && (K == 0 || M <= TR__SG_SMALL_M || (N <= TR__SG_SMALL_N && !transA))) {
        for (i = 0; i < nbat * kbat; i++)
            if ((st = tr__sgemm_nb(ctx, 1, 1, transA, transB, M, N, K, A + (kbat > 1 ? i * sA : 0), lda, 0, B + i * sB, ldb, 0, C + (nbat > 1 ? i * sC : 0),
                                   ldc, 0, kbat > 1 && i > 0 ? 1 : accumulate)) != TR_OK)
                return st;
        return TR_OK;
    }
    if (K == 0) {
        if (!accumulate)
            for (i = 0; i < M; i++) memset(C + i * ldc, 0, N * sizeof *C);
        return TR_OK;
    }
    memset(&J, 0, sizeof J);
    J.nbat = nbat, J.sB = sB, J.sC = sC;
    J.kbat = kbat, J.sAk = sA, J.sBk = sB;
    J.transA = transA != 0;
    J.transB = transB != 0;
    J.accumulate = accumulate != 0;
    J.M = M, J.N = N, J.K = K;
    J.A = A, J.B = B, J.C = C;
    J.lda = lda, J.ldb = ldb, J.ldc = ldc;
    J.kern = tr__sgemm_kernels(ctx->simd);

    /* short or narrow: no packing (the choice depends on the shape only, never on threads) */
    if (M <= TR__SG_SMALL_M) return tr__sgemm_small(ctx, &J, transB);
    if (N <= TR__SG_SMALL_N && !transA) return tr__sgemm_small(ctx, &J, 1);

    nkb = (K + TR__SG_KC - 1) / TR__SG_KC; /* KC blocks of nearly equal depth, a multiple of 4 but the last */
    J.kc_nom = TR__MIN(K, ((K + nkb - 1) / nkb + 3) / 4 * 4);
    J.nkbp = nkb;
    if ((i = (size_t)tr__bgemm_mode(ctx)) != 0) { /* AMX needs blocks 16 deep at least (its padded rows fit the fp32 layout's room) */
        if (i == TR__BG_AMX && (K < 32 || K - (nkb - 1) * J.kc_nom < 16)) i = TR__BG_DPBF16;
        tr__bgemm_kernels(&J.kern, (int)i);
    }
    MR = J.kern.mr;
    NR = J.kern.nr;
    Ktot = (kbat - 1) * nkb * J.kc_nom + K; /* the packed depth: every product's blocks kc_nom apart */
    J.pb = (N + NR - 1) / NR;
    J.npan = nbat * J.pb;
    /* M blocks of nearly equal height (a multiple of MR) */
    J.nmb = (M + TR__SG_MC - 1) / TR__SG_MC;
    J.mcb = ((M + J.nmb - 1) / J.nmb + MR - 1) / MR * MR;
    J.nmb = (M + J.mcb - 1) / J.mcb;
    /* few M blocks: also cut N so that there are jobs for 2 threads and more (cheap: a job
       repacks only its A slab) */
    J.nnb = J.nmb >= 8 ? 1 : TR__MIN(J.npan, (8 + J.nmb - 1) / J.nmb);
    J.pcb = (J.npan + J.nnb - 1) / J.nnb;
    J.nnb = (J.npan + J.pcb - 1) / J.pcb;
    njobs = J.nmb * J.nnb;
    J.bunit = 8;
    nbunits = nkb * kbat * ((J.npan + J.bunit - 1) / J.bunit);
    nt = tr__sgemm_threads(ctx, 2.0 * (double)M * (double)N * (double)K * (double)(nbat * kbat), njobs);

    /* workspace: packed op(B), then op(A): one slab per thread, or all of it packed once when N
       is cut into ranges (every range's jobs would repack the same slabs); each 64-byte aligned.
       A weight operand's packing comes from its region's cache instead (packed when stale). */
    {
        size_t s, mfloats;
        float *bpre, *apre;
        int ashared = 0;
        J.mpad = (M + MR - 1) / MR * MR;
        if (!tr__size_mul(Ktot, J.npan * NR, &bfloats) || bfloats > SIZE_MAX / 8 || !tr__size_mul(Ktot, J.mpad, &mfloats) || mfloats > SIZE_MAX / 8)
            return tr__err(ctx, TR_ERR_OVERFLOW, "sgemm: workspace size overflows");
        bfloats = (bfloats + 15) / 16 * 16;
        afloats = (J.mcb * J.kc_nom + 15) / 16 * 16;
        if ((st = tr__pw_find(ctx, J.kern.ukr, 1, !J.transB, nbat * kbat == 1 ? B : NULL, ldb, N, K, bfloats, &bpre, &packb)) != TR_OK ||
            (st = tr__pw_find(ctx, J.kern.ukr, 0, J.transA, kbat == 1 ? A : NULL, lda, M, K, mfloats, &apre, &packa)) != TR_OK)
            return st;
        if (bpre) bfloats = 0;
        else packb = 1;
        if (apre) afloats = 0;
        else if (J.nnb > 1) afloats = mfloats, ashared = packa = 1;
        if (!tr__size_mul(afloats, ashared ? 1 : (size_t)nt, &s) || s > SIZE_MAX / 8 - bfloats || !tr__size_mul(bfloats + s, sizeof(float), &total))
            return tr__err(ctx, TR_ERR_OVERFLOW, "sgemm: workspace size overflows");
        if (total) {
            float *w = (float *)tr__scratch(ctx, total);
            if (!w) return TR_ERR_OUT_OF_MEMORY;
            J.bpack = w;
            J.apack = w + bfloats;
        }
        J.astride = afloats;
        if (bpre) J.bpack = bpre;
        J.apre = ashared ? J.apack : apre;
        J.naunits = J.apre && packa ? nkb * kbat * ((J.mpad / MR + 3) / 4) : 0;
        if (!packb) nbunits = 0;
    }

#if TR__OMP
    if (nt > 1) {
#pragma omp parallel num_threads(nt)
        {
            float *ap = J.apre ? NULL : J.apack + (size_t)omp_get_thread_num() * J.astride;
            long u;
            if (nbunits + J.naunits) {
#pragma omp for schedule(dynamic, 1)
                for (u = 0; u < (long)(nbunits + J.naunits); u++) {
                    if ((size_t)u < nbunits) tr__sgemm_pack_b_unit(&J, (size_t)u);
                    else tr__sgemm_pack_a_unit(&J, (size_t)u - nbunits);
                }
                /* (the loop's implicit barrier: what is packed once is packed past this point) */
            }
#pragma omp for schedule(dynamic, 1)
            for (u = 0; u < (long)njobs; u++) tr__sgemm_job_run(&J, ap, (size_t)u);
        }
        return TR_OK;
    }
#elif TR__POOL
    if (nt > 1) {
        tr__sgemm_pool_args p;
        p.J = &J, p.nt = nt, p.nbunits = nbunits;
        tr__par_for(nt, (long)(nbunits + J.naunits), 1, tr__sgemm_pack_range, &p); /* returns when what is packed once is packed */
        tr__par_for(nt, (long)njobs, 1, tr__sgemm_jobs_range, &p);
        return TR_OK;
    }
#endif
    for (i = 0; i < nbunits; i++) tr__sgemm_pack_b_unit(&J, i);
    for (i = 0; i < J.naunits; i++) tr__sgemm_pack_a_unit(&J, i);
    for (i = 0; i < njobs; i++) tr__sgemm_job_run(&J, J.apack, i);
    return TR_OK;
}

TR__FN tr_status tr__sgemm(tr_ctx *ctx, int transA, int transB, size_t M, size_t N, size_t K, const float *A, size_t lda,
                           const float *B, size_t ldb, float *C, size_t ldc, int accumulate) {
    return tr__sgemm_nb(ctx, 1, 1, transA, transB, M, N, K, A, lda, 0, B, ldb, 0, C, ldc, 0, accumulate);
}

/* nb products A_b = A + b*sA, ...; sC == 0 sums every product into C (in batch order). Products
   that share A and write apart (the token mix) run as one (tr__sgemm_nb), and so do products
   summed into C (the token mix's weight gradients, one product per batch row), in groups whose
   packed operands stay within TR__SG_KB_FLOATS (a group size from the shape alone). */
#define TR__SG_KB_FLOATS ((size_t)1 << 21)
TR__FN tr_status tr__sgemm_batched(tr_ctx *ctx, int nb, int ta, int tb, size_t M, size_t N, size_t K, const float *A, size_t lda, size_t sA,
                                   const float *B, size_t ldb, size_t sB, float *C, size_t ldc, size_t sC, int acc) {
    int b;
    tr_status st;
    if (nb > 1 && sA == 0 && sC != 0) return tr__sgemm_nb(ctx, (size_t)nb, 1, ta, tb, M, N, K, A, lda, 0, B, ldb, sB, C, ldc, sC, acc);
    if (nb > 1 && sC == 0) {
        size_t per = (K + 3) * (M + N + 64), g = TR__MAX(TR__SG_KB_FLOATS / per, 1); /* about the packings' floats per product */
        for (b = 0; b < nb; b += (int)g)
            if ((st = tr__sgemm_nb(ctx, 1, TR__MIN(g, (size_t)(nb - b)), ta, tb, M, N, K, A + b * sA, lda, sA, B + b * sB, ldb, sB, C, ldc, 0, b > 0 ? 1 : acc)) !=
                TR_OK)
                return st;
        return TR_OK;
    }
    for (b = 0; b < nb; b++)
        if ((st = tr__sgemm(ctx, ta, tb, M, N, K, A + b * sA, lda, B + b * sB, ldb, C + b * sC, ldc, sC == 0 && b > 0 ? 1 : acc)) != TR_OK) return st;
    return TR_OK;
}

#undef TR__SG_TLD
#undef TR__SG_TUNP
#undef TR__SG_TUNPD
#undef TR__SG_TFIN
#undef TR__SG_TST
#undef TR__SG_ZROW
#undef TR__SG_ZBEGIN
#undef TR__SG_ZFMA
#undef TR__SG_ZSTEP
#undef TR__SG_ZSTORE
#undef TR__SG_YLD
#undef TR__SG_YTST
#undef TR__SG_YFMA
#undef TR__SG_YSTEP
#undef TR__SG_YSTORE
/* >>sgemm-end */

/* >>opencl (only with TINYREC_OPENCL): the runtime, then the kernels of every op, the SGEMM and attention. The kernels'
   OpenCL C is kept in tools/opencl/{ops,gemm,attention}.cl and written here as string fragments by tools/cl_embed.sh,
   between >>cl-embed markers, each file's text starting with #line 1 "tools/opencl/NAME.cl" so that the compiler's
   log names the .cl file and line. */
#if TINYREC_OPENCL
/* >>opencl-begin */
/* >>opencl-runtime
   The OpenCL runtime: the library is loaded at run time (no CL headers, no link-time dependency
   unless TINYREC_OPENCL_LINKED), one device is opened with one context, one in-order queue and
   one program. Device memory comes in "arenas": a host address-space reservation (no memory
   behind it) plus a cl_mem of the same size, so that model code can do pointer arithmetic on
   device pointers exactly as on host pointers; every device op turns a pointer back into
   (cl_mem, offset). Falling back to the CPU commits each reservation in place and reads the
   cl_mem into it, which keeps every pointer in the model valid. */

/* --- system pieces ------------------------------------------------------------------------ */
#ifdef __cplusplus
} /* system headers outside the extern "C" block */
#endif
#if defined(_WIN32)
#include <windows.h>
#elif !defined(TINYREC_OPENCL_LINKED)
#include <dlfcn.h>
#endif
#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define TR__CLAPI __stdcall
#else
#define TR__CLAPI
#endif

/* --- the slice of the OpenCL 1.2 ABI we use (values as in CL/cl.h) -------------------------- */
typedef int32_t tr__cl_int;
typedef uint32_t tr__cl_uint;
typedef uint64_t tr__cl_ulong;
typedef uint64_t tr__cl_bitfield;
typedef struct _cl_platform_id *tr__cl_platform;
typedef struct _cl_device_id *tr__cl_device;
typedef struct _cl_context *tr__cl_context;
typedef struct _cl_command_queue *tr__cl_queue;
typedef struct _cl_mem *tr__cl_mem;
typedef struct _cl_program *tr__cl_program;
typedef struct _cl_kernel *tr__cl_kernel;
typedef struct _cl_event *tr__cl_event;

#define TR__CL_SUCCESS 0
#define TR__CL_DEVICE_NOT_FOUND (-1)
#define TR__CL_MEM_OBJECT_ALLOCATION_FAILURE (-4)
#define TR__CL_OUT_OF_RESOURCES (-5)
#define TR__CL_OUT_OF_HOST_MEMORY (-6)
#define TR__CL_BUILD_PROGRAM_FAILURE (-11)
#define TR__CL_PLATFORM_NOT_FOUND_KHR (-1001)
#define TR__CL_FALSE 0u
#define TR__CL_TRUE 1u
#define TR__CL_DEVICE_TYPE_GPU ((tr__cl_bitfield)1 << 2)
#define TR__CL_DEVICE_TYPE_ALL ((tr__cl_bitfield)0xFFFFFFFF)
#define TR__CL_PLATFORM_VERSION 0x0901u
#define TR__CL_PLATFORM_NAME 0x0902u
#define TR__CL_PLATFORM_VENDOR 0x0903u
#define TR__CL_PLATFORM_EXTENSIONS 0x0904u
#define TR__CL_DEVICE_TYPE 0x1000u
#define TR__CL_DEVICE_MAX_COMPUTE_UNITS 0x1002u
#define TR__CL_DEVICE_MAX_WORK_ITEM_DIMENSIONS 0x1003u
#define TR__CL_DEVICE_MAX_WORK_GROUP_SIZE 0x1004u
#define TR__CL_DEVICE_MAX_WORK_ITEM_SIZES 0x1005u
#define TR__CL_DEVICE_MAX_CLOCK_FREQUENCY 0x100Cu
#define TR__CL_DEVICE_MAX_MEM_ALLOC_SIZE 0x1010u
#define TR__CL_DEVICE_GLOBAL_MEM_SIZE 0x101Fu
#define TR__CL_DEVICE_LOCAL_MEM_SIZE 0x1023u
#define TR__CL_DEVICE_NAME 0x102Bu
#define TR__CL_DEVICE_VENDOR 0x102Cu
#define TR__CL_DRIVER_VERSION 0x102Du
#define TR__CL_DEVICE_VERSION 0x102Fu
#define TR__CL_DEVICE_EXTENSIONS 0x1030u
#define TR__CL_DEVICE_HOST_UNIFIED_MEMORY 0x1035u
#define TR__CL_DEVICE_OPENCL_C_VERSION 0x103Du
#define TR__CL_CONTEXT_PLATFORM 0x1084
#define TR__CL_PROGRAM_BUILD_LOG 0x1183u
#define TR__CL_KERNEL_WORK_GROUP_SIZE 0x11B0u
#define TR__CL_MEM_READ_WRITE ((tr__cl_bitfield)1 << 0)
#define TR__CL_MEM_ALLOC_HOST_PTR ((tr__cl_bitfield)1 << 4)
#define TR__CL_MAP_READ ((tr__cl_bitfield)1 << 0)
#define TR__CL_MAP_WRITE ((tr__cl_bitfield)1 << 1)
#define TR__CL_MAP_WRITE_INVALIDATE_REGION ((tr__cl_bitfield)1 << 2)

/* Every entry point: X(return type, name without "cl", parameter list). */
#define TR__CL_FUNCS(X)                                                                                                   \
    X(tr__cl_int, GetPlatformIDs, (tr__cl_uint, tr__cl_platform *, tr__cl_uint *))                                         \
    X(tr__cl_int, GetPlatformInfo, (tr__cl_platform, tr__cl_uint, size_t, void *, size_t *))                                \
    X(tr__cl_int, GetDeviceIDs, (tr__cl_platform, tr__cl_bitfield, tr__cl_uint, tr__cl_device *, tr__cl_uint *))            \
    X(tr__cl_int, GetDeviceInfo, (tr__cl_device, tr__cl_uint, size_t, void *, size_t *))                                    \
    X(tr__cl_context, CreateContext,                                                                                       \
      (const intptr_t *, tr__cl_uint, const tr__cl_device *, void(TR__CLAPI *)(const char *, const void *, size_t, void *), \
       void *, tr__cl_int *))                                                                                              \
    X(tr__cl_int, ReleaseContext, (tr__cl_context))                                                                        \
    X(tr__cl_queue, CreateCommandQueue, (tr__cl_context, tr__cl_device, tr__cl_bitfield, tr__cl_int *))                    \
    X(tr__cl_int, ReleaseCommandQueue, (tr__cl_queue))                                                                     \
    X(tr__cl_program, CreateProgramWithSource, (tr__cl_context, tr__cl_uint, const char **, const size_t *, tr__cl_int *)) \
    X(tr__cl_int, BuildProgram,                                                                                            \
      (tr__cl_program, tr__cl_uint, const tr__cl_device *, const char *, void(TR__CLAPI *)(tr__cl_program, void *), void *)) \
    X(tr__cl_int, GetProgramBuildInfo, (tr__cl_program, tr__cl_device, tr__cl_uint, size_t, void *, size_t *))             \
    X(tr__cl_int, ReleaseProgram, (tr__cl_program))                                                                        \
    X(tr__cl_kernel, CreateKernel, (tr__cl_program, const char *, tr__cl_int *))                                           \
    X(tr__cl_int, ReleaseKernel, (tr__cl_kernel))                                                                          \
    X(tr__cl_int, SetKernelArg, (tr__cl_kernel, tr__cl_uint, size_t, const void *))                                        \
    X(tr__cl_int, GetKernelWorkGroupInfo, (tr__cl_kernel, tr__cl_device, tr__cl_uint, size_t, void *, size_t *))          \
    X(tr__cl_int, EnqueueNDRangeKernel,                                                                                    \
      (tr__cl_queue, tr__cl_kernel, tr__cl_uint, const size_t *, const size_t *, const size_t *, tr__cl_uint,              \
       const tr__cl_event *, tr__cl_event *))                                                                              \
    X(tr__cl_mem, CreateBuffer, (tr__cl_context, tr__cl_bitfield, size_t, void *, tr__cl_int *))                           \
    X(tr__cl_int, ReleaseMemObject, (tr__cl_mem))                                                                          \
    X(tr__cl_int, EnqueueWriteBuffer,                                                                                      \
      (tr__cl_queue, tr__cl_mem, tr__cl_uint, size_t, size_t, const void *, tr__cl_uint, const tr__cl_event *, tr__cl_event *)) \
    X(tr__cl_int, EnqueueReadBuffer,                                                                                       \
      (tr__cl_queue, tr__cl_mem, tr__cl_uint, size_t, size_t, void *, tr__cl_uint, const tr__cl_event *, tr__cl_event *))  \
    X(tr__cl_int, EnqueueCopyBuffer,                                                                                       \
      (tr__cl_queue, tr__cl_mem, tr__cl_mem, size_t, size_t, size_t, tr__cl_uint, const tr__cl_event *, tr__cl_event *))   \
    X(tr__cl_int, EnqueueFillBuffer,                                                                                       \
      (tr__cl_queue, tr__cl_mem, const void *, size_t, size_t, size_t, tr__cl_uint, const tr__cl_event *, tr__cl_event *)) \
    X(void *, EnqueueMapBuffer,                                                                                            \
      (tr__cl_queue, tr__cl_mem, tr__cl_uint, tr__cl_bitfield, size_t, size_t, tr__cl_uint, const tr__cl_event *,          \
       tr__cl_event *, tr__cl_int *))                                                                                      \
    X(tr__cl_int, EnqueueUnmapMemObject, (tr__cl_queue, tr__cl_mem, void *, tr__cl_uint, const tr__cl_event *, tr__cl_event *)) \
    X(tr__cl_int, Finish, (tr__cl_queue))                                                                                  \
    X(tr__cl_int, WaitForEvents, (tr__cl_uint, const tr__cl_event *))                                                      \
    X(tr__cl_int, ReleaseEvent, (tr__cl_event))

#define TR__CL_FIELD(ret, name, params) ret(TR__CLAPI *name) params;
typedef struct tr__clfn {
    TR__CL_FUNCS(TR__CL_FIELD)
} tr__clfn;
#undef TR__CL_FIELD

#if defined(TINYREC_OPENCL_LINKED)
#define TR__CL_PROTO(ret, name, params) extern ret TR__CLAPI cl##name params;
TR__CL_FUNCS(TR__CL_PROTO)
#undef TR__CL_PROTO
#endif

/* A loaded OpenCL library: the module handle (NULL when linked), its name and its entry points. */
typedef struct tr__cllib {
    void *handle;
    const char *name;
    tr__clfn f;
} tr__cllib;

/* The library stays loaded: NVIDIA's ICD finds no device when it is loaded a second time in one
   process (seen on an H200, driver 580), and a loaded library costs nothing. */
TR__FN void tr__cl_unload(tr__cllib *L) { memset(L, 0, sizeof *L); }

/* Loads the library and every entry point; 0 with the reason in why on failure. */
TR__FN int tr__cl_load(tr__cllib *L, char *why, size_t whylen) {
    memset(L, 0, sizeof *L);
    why[0] = 0;
#if defined(TINYREC_OPENCL_LINKED)
#define TR__CL_LINK(ret, name, params) L->f.name = cl##name;
    TR__CL_FUNCS(TR__CL_LINK)
#undef TR__CL_LINK
    TR__UNUSED(whylen);
    L->name = "linked";
    return 1;
#else
    {
#define TR__CL_NAME(ret, name, params) {"cl" #name, offsetof(tr__clfn, name)},
        static const struct { const char *name; size_t off; } syms[] = {TR__CL_FUNCS(TR__CL_NAME)};
#undef TR__CL_NAME
        size_t i;
#if defined(_WIN32)
        L->handle = (void *)LoadLibraryA("OpenCL.dll");
        L->name = "OpenCL.dll";
        if (!L->handle) {
            snprintf(why, whylen, "OpenCL.dll could not be loaded (error %lu)", (unsigned long)GetLastError());
            return 0;
        }
#else
#if defined(__APPLE__)
        static const char *const names[] = {"/System/Library/Frameworks/OpenCL.framework/OpenCL", "libOpenCL.dylib"};
#else
        static const char *const names[] = {"libOpenCL.so.1", "libOpenCL.so"};
#endif
        for (i = 0; i < sizeof names / sizeof names[0] && !L->handle; i++) {
            const char *e;
            L->handle = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
            L->name = names[i];
            if (!L->handle && (e = dlerror()) != NULL && !why[0]) snprintf(why, whylen, "%s", e);
        }
        if (!L->handle) {
            if (!why[0]) snprintf(why, whylen, "%s could not be loaded", names[0]);
            return 0;
        }
#endif
        for (i = 0; i < sizeof syms / sizeof syms[0]; i++) {
#if defined(_WIN32)
            FARPROC p = GetProcAddress((HMODULE)L->handle, syms[i].name);
#else
            void *p = dlsym(L->handle, syms[i].name);
#endif
            if (!p) {
                snprintf(why, whylen, "the OpenCL library lacks %s (OpenCL 1.2 is required)", syms[i].name);
                tr__cl_unload(L);
                return 0;
            }
            memcpy((char *)&L->f + syms[i].off, &p, sizeof p); /* object -> function pointer, portably */
        }
        return 1;
    }
#endif
}

/* The device's own tables (the tr__cl itself, the arena and kernel tables) live as long as the
   context's device, so, like the context's scratch, they are not counted by tr_ctx_live_allocs. */
TR__FN void *tr__cl_table_alloc(tr_ctx *ctx, size_t n) {
    void *p = tr__alloc(ctx, n);
    if (p) ctx->live_allocs--;
    return p;
}
TR__FN void tr__cl_table_free(tr_ctx *ctx, void *p) {
    if (!p) return;
    ctx->live_allocs++;
    tr__free(ctx, p);
}

TR__FN const char *tr__cl_errname(tr__cl_int e) {
    switch (e) {
    case 0: return "CL_SUCCESS";
    case -1: return "CL_DEVICE_NOT_FOUND";
    case -2: return "CL_DEVICE_NOT_AVAILABLE";
    case -3: return "CL_COMPILER_NOT_AVAILABLE";
    case -4: return "CL_MEM_OBJECT_ALLOCATION_FAILURE";
    case -5: return "CL_OUT_OF_RESOURCES";
    case -6: return "CL_OUT_OF_HOST_MEMORY";
    case -7: return "CL_PROFILING_INFO_NOT_AVAILABLE";
    case -8: return "CL_MEM_COPY_OVERLAP";
    case -9: return "CL_IMAGE_FORMAT_MISMATCH";
    case -10: return "CL_IMAGE_FORMAT_NOT_SUPPORTED";
    case -11: return "CL_BUILD_PROGRAM_FAILURE";
    case -12: return "CL_MAP_FAILURE";
    case -13: return "CL_MISALIGNED_SUB_BUFFER_OFFSET";
    case -14: return "CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST";
    case -15: return "CL_COMPILE_PROGRAM_FAILURE";
    case -16: return "CL_LINKER_NOT_AVAILABLE";
    case -17: return "CL_LINK_PROGRAM_FAILURE";
    case -18: return "CL_DEVICE_PARTITION_FAILED";
    case -19: return "CL_KERNEL_ARG_INFO_NOT_AVAILABLE";
    case -30: return "CL_INVALID_VALUE";
    case -31: return "CL_INVALID_DEVICE_TYPE";
    case -32: return "CL_INVALID_PLATFORM";
    case -33: return "CL_INVALID_DEVICE";
    case -34: return "CL_INVALID_CONTEXT";
    case -35: return "CL_INVALID_QUEUE_PROPERTIES";
    case -36: return "CL_INVALID_COMMAND_QUEUE";
    case -37: return "CL_INVALID_HOST_PTR";
    case -38: return "CL_INVALID_MEM_OBJECT";
    case -39: return "CL_INVALID_IMAGE_FORMAT_DESCRIPTOR";
    case -40: return "CL_INVALID_IMAGE_SIZE";
    case -41: return "CL_INVALID_SAMPLER";
    case -42: return "CL_INVALID_BINARY";
    case -43: return "CL_INVALID_BUILD_OPTIONS";
    case -44: return "CL_INVALID_PROGRAM";
    case -45: return "CL_INVALID_PROGRAM_EXECUTABLE";
    case -46: return "CL_INVALID_KERNEL_NAME";
    case -47: return "CL_INVALID_KERNEL_DEFINITION";
    case -48: return "CL_INVALID_KERNEL";
    case -49: return "CL_INVALID_ARG_INDEX";
    case -50: return "CL_INVALID_ARG_VALUE";
    case -51: return "CL_INVALID_ARG_SIZE";
    case -52: return "CL_INVALID_KERNEL_ARGS";
    case -53: return "CL_INVALID_WORK_DIMENSION";
    case -54: return "CL_INVALID_WORK_GROUP_SIZE";
    case -55: return "CL_INVALID_WORK_ITEM_SIZE";
    case -56: return "CL_INVALID_GLOBAL_OFFSET";
    case -57: return "CL_INVALID_EVENT_WAIT_LIST";
    case -58: return "CL_INVALID_EVENT";
    case -59: return "CL_INVALID_OPERATION";
    case -60: return "CL_INVALID_GL_OBJECT";
    case -61: return "CL_INVALID_BUFFER_SIZE";
    case -62: return "CL_INVALID_MIP_LEVEL";
    case -63: return "CL_INVALID_GLOBAL_WORK_SIZE";
    case -64: return "CL_INVALID_PROPERTY";
    case -65: return "CL_INVALID_IMAGE_DESCRIPTOR";
    case -66: return "CL_INVALID_COMPILER_OPTIONS";
    case -67: return "CL_INVALID_LINKER_OPTIONS";
    case -68: return "CL_INVALID_DEVICE_PARTITION_COUNT";
    case -69: return "CL_INVALID_PIPE_SIZE";
    case -70: return "CL_INVALID_DEVICE_QUEUE";
    case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";
    default: return "CL_UNKNOWN_ERROR";
    }
}

/* --- host address-space reservations -------------------------------------------------------- */
/* tinyrec.h asks only for POSIX, which hides MAP_ANONYMOUS / MAP_NORESERVE on glibc and macOS: use
   them when visible, the Linux values on the common architectures, else a private /dev/zero map. */
#if !defined(_WIN32)
#if defined(MAP_ANONYMOUS)
#define TR__MAP_ANON MAP_ANONYMOUS
#elif defined(MAP_ANON)
#define TR__MAP_ANON MAP_ANON
#elif defined(__linux__) && (defined(__x86_64__) || defined(__i386__) || defined(__aarch64__) || defined(__arm__) || defined(__riscv))
#define TR__MAP_ANON 0x20
#endif
#if defined(MAP_NORESERVE)
#define TR__MAP_NORESERVE MAP_NORESERVE
#elif defined(__linux__) && (defined(__x86_64__) || defined(__i386__) || defined(__aarch64__) || defined(__arm__) || defined(__riscv))
#define TR__MAP_NORESERVE 0x4000
#else
#define TR__MAP_NORESERVE 0
#endif

TR__FN void *tr__cl_mmap(void *addr, size_t bytes, int prot, int flags) {
    void *p;
    int fd = -1;
    flags |= MAP_PRIVATE;
#if defined(TR__MAP_ANON)
    flags |= TR__MAP_ANON;
#else
    fd = open("/dev/zero", O_RDWR);
    if (fd < 0) return NULL;
#endif
    p = mmap(addr, bytes, prot, flags, fd, 0);
    if (fd >= 0) close(fd);
    return p == MAP_FAILED ? NULL : p;
}
#endif

TR__FN size_t tr__cl_page(void) {
#if defined(_WIN32)
    return 65536; /* the allocation granularity */
#else
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (size_t)p : 4096;
#endif
}

/* Address space only: no memory is committed and the pages cannot be touched. */
TR__FN void *tr__cl_reserve(size_t bytes) {
#if defined(_WIN32)
    return VirtualAlloc(NULL, bytes, MEM_RESERVE, PAGE_NOACCESS);
#else
    return tr__cl_mmap(NULL, bytes, PROT_NONE, TR__MAP_NORESERVE);
#endif
}

/* Turns (part of) a reservation into ordinary zeroed read/write memory, at the same address. */
TR__FN int tr__cl_commit(void *p, size_t bytes) {
#if defined(_WIN32)
    return VirtualAlloc(p, bytes, MEM_COMMIT, PAGE_READWRITE) == p;
#else
    return tr__cl_mmap(p, bytes, PROT_READ | PROT_WRITE, MAP_FIXED) == p;
#endif
}

TR__FN void tr__cl_unreserve(void *p, size_t bytes) {
#if defined(_WIN32)
    TR__UNUSED(bytes);
    VirtualFree(p, 0, MEM_RELEASE);
#else
    munmap(p, bytes);
#endif
}

/* --- the device ------------------------------------------------------------------------------ */
typedef enum tr__cl_fault { TR__CLF_NONE = 0, TR__CLF_NO_LIBRARY, TR__CLF_NO_PLATFORM, TR__CLF_NO_DEVICE, TR__CLF_BUILD } tr__cl_fault;

typedef struct tr__cl_info {
    char name[256], vendor[256], version[128];
    int is_gpu, has_fp64;
    int host_unified; /* CL_DEVICE_HOST_UNIFIED_MEMORY: the device works in host memory (integrated GPUs, Apple, PoCL) */
    int nv_sm; /* NVIDIA compute capability as 10 * major + minor (cl_nv_device_attribute_query), else 0 */
    size_t max_wg, max_item[3], local_mem, max_alloc, global_mem, compute_units;
} tr__cl_info;

/* SGEMM tile configuration (the TR_GEMM_* defines). */
typedef struct tr__cl_gemm_cfg {
    int tm, tn, tk, wm, wn, vw;
    int wl, db;     /* warp layout 4 x 8, double-buffered local tiles: 0/1, -1 = the kernel's default */
    int cp;         /* tiles copied with cp.async (inline PTX, NVIDIA sm_80+): -1 = where available, 0 = never, 2 = emulated (tests) */
    int st;         /* local buffers (pipeline stages) of the cp.async kernels, 2..4 */
    int mma;        /* tensor-core kernels for bfloat16 / float16 models (inline-PTX mma.sync, NVIDIA sm_80+): 0 = never
                       (or where unavailable), 1 = on, 2 = emulated with fma (tests, any device); -1 in TINYREC_CL_SGEMM
                       parsing = not given (automatic) */
} tr__cl_gemm_cfg;

enum { TR__CLA_BUF = 1, TR__CLA_I32, TR__CLA_I64, TR__CLA_F32, TR__CLA_LOCAL };
#define TR__CLA_MAX 32
typedef struct tr__clarg {
    int kind;
    const void *p;
    size_t bytes;
    int32_t i;
    int64_t l;
    float f;
} tr__clarg;
typedef struct tr__clargs {
    int n;
    tr__clarg a[TR__CLA_MAX];
} tr__clargs;

typedef struct tr__cl_arena {
    char *base;      /* the reservation (committed host memory once migrated) */
    size_t bytes;    /* usable bytes (a multiple of 4) = the cl_mem's size */
    size_t reserved; /* bytes reserved: bytes rounded up to pages, plus one page so that base + bytes is ours */
    tr__cl_mem mem;  /* NULL once migrated */
    int keep;
} tr__cl_arena;

typedef struct tr__cl_kcache {
    char name[96];
    tr__cl_kernel k;
    size_t wg; /* CL_KERNEL_WORK_GROUP_SIZE */
    double seconds; /* TINYREC_CL_PROFILE: time in this kernel, and its launches */
    long calls;
} tr__cl_kcache;

#define TR__CL_SLOTS 16
#define TR__CL_STAGE_BYTES ((size_t)4 << 20)

struct tr__cl {
    tr_ctx *ctx;
    tr__cllib lib;
    tr__cl_platform platform;
    tr__cl_device device;
    tr__cl_context context;
    tr__cl_queue queue;
    tr__cl_program program;
    tr__cl_mem dummy; /* bound for NULL buffer arguments */
    tr__cl_info info;
    tr__cl_gemm_cfg gemm; /* the SGEMM tiles the program was built with */
    char platform_name[128];
    tr__cl_arena *arenas;
    int narenas, cap_arenas, last_hit;
    tr__cl_kcache *kernels;
    int nkernels, cap_kernels;
    void *slot[TR__CL_SLOTS]; /* tr__cl_scratch */
    size_t slot_floats[TR__CL_SLOTS];
    tr__cl_mem stage[2]; /* pinned staging for writes, mapped for the device's lifetime */
    void *stage_ptr[2];
    tr__cl_event stage_ev[2];
    int stage_next, stage_state; /* 0 untried, 1 ready, -1 unavailable (plain writes) */
    long fail_enqueue;           /* countdown to an injected enqueue failure; 0 = off */
    int fail_alloc, last_oom, migrated;
    int profile; /* TINYREC_CL_PROFILE=1: each launch waits for the device and is timed */
    long mma_products; /* products run on the tensor-core kernels (the tests check that a model's went there) */
    tr__cl_program mma_program; /* the tensor-core kernels' own program (tr__cl_mma_ready), NULL until built */
    /* Zero-copy (host-unified devices, unless TINYREC_CL_ZEROCOPY=0): buffers are allocated in
       host memory (CL_MEM_ALLOC_HOST_PTR) and transfers map them and copy once, instead of
       copying through the staging buffers and the driver. */
    int zerocopy;
    double xfer_seconds[2]; /* (profile) host -> device writes, device -> host reads: time, calls, bytes */
    long xfer_calls[2];
    double xfer_bytes[2];
};
typedef struct tr__cl tr__cl;

TR__FN tr_status tr__cl_fail(tr__cl *cl, const char *call, const char *what, tr__cl_int code) {
    return tr__err(cl->ctx, TR_ERR_DEVICE, "opencl: %s%s%s%s: %s (%d)", call, what ? "(" : "", what ? what : "", what ? ")" : "",
                   tr__cl_errname(code), (int)code);
}

TR__FN const tr__cl_info *tr__cl_get_info(const tr__cl *cl) { return cl ? &cl->info : NULL; }
TR__FN int tr__cl_migrated(const tr__cl *cl) { return cl ? cl->migrated : 0; }
TR__FN int tr__cl_last_oom(const tr__cl *cl) { return cl ? cl->last_oom : 0; }
TR__FN void tr__cl_fail_enqueue_at(tr__cl *cl, long n) {
    if (cl) cl->fail_enqueue = n > 0 ? n : 0;
}
TR__FN void tr__cl_fail_alloc(tr__cl *cl, int on) {
    if (cl) cl->fail_alloc = on != 0;
}

/* Counts one launch/copy/fill/write; nonzero when fault injection says this one fails. */
TR__FN int tr__cl_injected(tr__cl *cl) { return cl->fail_enqueue > 0 && --cl->fail_enqueue == 0; }

TR__FN tr_status tr__cl_check_live(tr__cl *cl, const char *what) {
    if (cl->migrated) return tr__err(cl->ctx, TR_ERR_DEVICE, "opencl: %s after the device was abandoned for the CPU", what);
    return TR_OK;
}

/* --- enumeration ------------------------------------------------------------------------------ */
#define TR__CL_MAXDEV 64
typedef struct tr__cl_devent {
    tr__cl_platform platform;
    tr__cl_device device;
    int is_gpu;
    size_t global_mem;
    char pname[128], dname[128];
} tr__cl_devent;

/* Lists every device of every platform in enumeration order (at most out_cap); returns the count.
   *nplat gets the number of platforms. Platforms without devices (CL_DEVICE_NOT_FOUND) and other
   per-platform errors are skipped. */
TR__FN int tr__cl_list(const tr__clfn *f, tr__cl_devent *out, int out_cap, int *nplat) {
    tr__cl_platform plats[16];
    tr__cl_uint np = 0, p;
    int n = 0;
    *nplat = 0;
    if (f->GetPlatformIDs(16, plats, &np) != TR__CL_SUCCESS) return 0; /* includes CL_PLATFORM_NOT_FOUND_KHR */
    if (np > 16) np = 16;
    *nplat = (int)np;
    for (p = 0; p < np; p++) {
        tr__cl_device devs[TR__CL_MAXDEV];
        tr__cl_uint nd = 0, d;
        char pname[128] = "";
        if (f->GetDeviceIDs(plats[p], TR__CL_DEVICE_TYPE_ALL, TR__CL_MAXDEV, devs, &nd) != TR__CL_SUCCESS) continue;
        if (nd > TR__CL_MAXDEV) nd = TR__CL_MAXDEV;
        f->GetPlatformInfo(plats[p], TR__CL_PLATFORM_NAME, sizeof pname - 1, pname, NULL);
        pname[sizeof pname - 1] = 0;
        for (d = 0; d < nd && n < out_cap; d++) {
            tr__cl_devent *e = &out[n++];
            tr__cl_bitfield type = 0;
            tr__cl_ulong gmem = 0;
            memset(e, 0, sizeof *e);
            e->platform = plats[p];
            e->device = devs[d];
            f->GetDeviceInfo(devs[d], TR__CL_DEVICE_TYPE, sizeof type, &type, NULL);
            f->GetDeviceInfo(devs[d], TR__CL_DEVICE_GLOBAL_MEM_SIZE, sizeof gmem, &gmem, NULL);
            f->GetDeviceInfo(devs[d], TR__CL_DEVICE_NAME, sizeof e->dname - 1, e->dname, NULL);
            e->is_gpu = (type & TR__CL_DEVICE_TYPE_GPU) != 0;
            e->global_mem = (size_t)(gmem > (tr__cl_ulong)SIZE_MAX ? SIZE_MAX : gmem);
            memcpy(e->pname, pname, sizeof pname);
        }
    }
    return n;
}

/* A string property of a platform (dev NULL) or device, whatever its length, trimmed; NULL only
   when out of memory ("" when the query fails). */
TR__FN char *tr__cl_info_str(tr_ctx *ctx, const tr__clfn *f, tr__cl_platform plat, tr__cl_device dev, tr__cl_uint what) {
    size_t n = 0, i = 0;
    char *s;
    tr__cl_int e = dev ? f->GetDeviceInfo(dev, what, 0, NULL, &n) : f->GetPlatformInfo(plat, what, 0, NULL, &n);
    if (e != TR__CL_SUCCESS || n > ((size_t)1 << 24)) n = 0;
    s = (char *)tr__calloc(ctx, n + 1, 1);
    if (!s || !n) return s;
    if ((dev ? f->GetDeviceInfo(dev, what, n, s, NULL) : f->GetPlatformInfo(plat, what, n, s, NULL)) != TR__CL_SUCCESS) s[0] = 0;
    s[n] = 0;
    n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) s[--n] = 0;
    while (isspace((unsigned char)s[i])) i++;
    memmove(s, s + i, n - i + 1);
    return s;
}

/* Copies a tr__cl_info_str result into a fixed field and frees it; 0 when it is NULL. */
TR__FN int tr__cl_info_copy(tr_ctx *ctx, char *dst, size_t cap, char *s) {
    if (!s) return 0;
    snprintf(dst, cap, "%s", s);
    tr__free(ctx, s);
    return 1;
}

/* tr_opencl_list_devices: every platform, then the devices in tr__cl_list's order (the order of
   "opencl:N"), with the details the device report prints. On failure the caller frees *out. */
TR__FN tr_status tr__cl_describe(tr_ctx *ctx, tr_opencl_list *out) {
    static const char *const types[] = {"other", "CPU", "GPU", "accelerator", "custom"};
    tr__cllib L;
    char why[256];
    tr__cl_platform plats[16];
    tr__cl_uint np = 0, p;
    tr__cl_int e;
    tr__cl_devent *devs;
    int n, np2, i, ok = 1;
    if (!tr__cl_load(&L, why, sizeof why)) {
        snprintf(out->note, sizeof out->note, "no OpenCL library (%.200s)", why);
        return TR_OK;
    }
    out->loaded = 1;
    snprintf(out->library, sizeof out->library, "%s", L.name);
    e = L.f.GetPlatformIDs(16, plats, &np);
    if (e != TR__CL_SUCCESS || np == 0) {
        if (e == TR__CL_SUCCESS || e == TR__CL_PLATFORM_NOT_FOUND_KHR)
            snprintf(out->note, sizeof out->note, "the OpenCL library found no platform (no driver installed)");
        else snprintf(out->note, sizeof out->note, "clGetPlatformIDs failed: %s (%d)", tr__cl_errname(e), (int)e);
        return TR_OK;
    }
    if (np > 16) np = 16;
    out->platforms = (tr_opencl_platform *)tr__calloc(ctx, np, sizeof *out->platforms);
    devs = (tr__cl_devent *)tr__alloc(ctx, sizeof(tr__cl_devent) * TR__CL_MAXDEV);
    if (!out->platforms || !devs) {
        tr__free(ctx, devs);
        return TR_ERR_OUT_OF_MEMORY;
    }
    out->num_platforms = (int)np;
    for (p = 0; p < np && ok; p++) {
        tr_opencl_platform *P = &out->platforms[p];
        tr__cl_uint nd = 0;
        ok = tr__cl_info_copy(ctx, P->name, sizeof P->name, tr__cl_info_str(ctx, &L.f, plats[p], NULL, TR__CL_PLATFORM_NAME)) &&
             tr__cl_info_copy(ctx, P->vendor, sizeof P->vendor, tr__cl_info_str(ctx, &L.f, plats[p], NULL, TR__CL_PLATFORM_VENDOR)) &&
             tr__cl_info_copy(ctx, P->version, sizeof P->version, tr__cl_info_str(ctx, &L.f, plats[p], NULL, TR__CL_PLATFORM_VERSION)) &&
             (P->extensions = tr__cl_info_str(ctx, &L.f, plats[p], NULL, TR__CL_PLATFORM_EXTENSIONS)) != NULL;
        e = L.f.GetDeviceIDs(plats[p], TR__CL_DEVICE_TYPE_ALL, 0, NULL, &nd);
        P->device_error = e == TR__CL_SUCCESS ? 0 : (int)e;
    }
    n = ok ? tr__cl_list(&L.f, devs, TR__CL_MAXDEV, &np2) : 0;
    if (n > 0 && (out->devices = (tr_opencl_device *)tr__calloc(ctx, (size_t)n, sizeof *out->devices)) == NULL) ok = 0;
    for (i = 0; i < n && ok; i++) {
        tr_opencl_device *D = &out->devices[i];
        tr__cl_device d = devs[i].device;
        tr__cl_bitfield type = 0;
        tr__cl_ulong u;
        tr__cl_uint v;
        out->num_devices = i + 1;
        D->index = i;
        for (p = 0; p < np; p++)
            if (plats[p] == devs[i].platform) D->platform = (int)p;
        ok = tr__cl_info_copy(ctx, D->name, sizeof D->name, tr__cl_info_str(ctx, &L.f, NULL, d, TR__CL_DEVICE_NAME)) &&
             tr__cl_info_copy(ctx, D->vendor, sizeof D->vendor, tr__cl_info_str(ctx, &L.f, NULL, d, TR__CL_DEVICE_VENDOR)) &&
             tr__cl_info_copy(ctx, D->version, sizeof D->version, tr__cl_info_str(ctx, &L.f, NULL, d, TR__CL_DEVICE_VERSION)) &&
             tr__cl_info_copy(ctx, D->driver, sizeof D->driver, tr__cl_info_str(ctx, &L.f, NULL, d, TR__CL_DRIVER_VERSION)) &&
             (D->extensions = tr__cl_info_str(ctx, &L.f, NULL, d, TR__CL_DEVICE_EXTENSIONS)) != NULL;
        L.f.GetDeviceInfo(d, TR__CL_DEVICE_TYPE, sizeof type, &type, NULL);
        D->is_gpu = devs[i].is_gpu;
        D->type = types[(type & 4) ? 2 : (type & 2) ? 1 : (type & 8) ? 3 : (type & 16) ? 4 : 0];
        D->global_mem = devs[i].global_mem;
        u = 0, L.f.GetDeviceInfo(d, TR__CL_DEVICE_LOCAL_MEM_SIZE, sizeof u, &u, NULL), D->local_mem = (size_t)u;
        u = 0, L.f.GetDeviceInfo(d, TR__CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof u, &u, NULL), D->max_alloc = (size_t)u;
        v = 0, L.f.GetDeviceInfo(d, TR__CL_DEVICE_MAX_COMPUTE_UNITS, sizeof v, &v, NULL), D->compute_units = v;
        v = 0, L.f.GetDeviceInfo(d, TR__CL_DEVICE_MAX_CLOCK_FREQUENCY, sizeof v, &v, NULL), D->clock_mhz = v;
        v = 0, L.f.GetDeviceInfo(d, TR__CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof v, &v, NULL), D->host_unified = v != 0;
        if (D->is_gpu && out->auto_pick < 0) out->auto_pick = i;
    }
    tr__free(ctx, devs);
    tr__cl_unload(&L);
    out->opencl_pick = out->auto_pick >= 0 ? out->auto_pick : out->num_devices > 0 ? 0 : -1;
    return ok ? TR_OK : TR_ERR_OUT_OF_MEMORY;
}

TR__FN int tr__cl_icontains(const char *hay, const char *needle) {
    size_t i, j, n = strlen(needle);
    if (!n) return 1;
    for (i = 0; hay[i]; i++) {
        for (j = 0; j < n && hay[i + j]; j++)
            if (tolower((unsigned char)hay[i + j]) != tolower((unsigned char)needle[j])) break;
        if (j == n) return 1;
    }
    return 0;
}

TR__FN void tr__cl_query_info(tr__cl *cl) {
    const tr__clfn *f = &cl->lib.f;
    tr__cl_info *I = &cl->info;
    tr__cl_bitfield type = 0;
    tr__cl_ulong u = 0;
    tr__cl_uint cu = 0, dims = 0;
    size_t items[16], sz = 0, i;
    char *ext;
    memset(I, 0, sizeof *I);
    f->GetDeviceInfo(cl->device, TR__CL_DEVICE_NAME, sizeof I->name - 1, I->name, NULL);
    f->GetDeviceInfo(cl->device, TR__CL_DEVICE_VENDOR, sizeof I->vendor - 1, I->vendor, NULL);
    f->GetDeviceInfo(cl->device, TR__CL_DEVICE_VERSION, sizeof I->version - 1, I->version, NULL);
    f->GetDeviceInfo(cl->device, TR__CL_DEVICE_TYPE, sizeof type, &type, NULL);
    I->is_gpu = (type & TR__CL_DEVICE_TYPE_GPU) != 0;
    f->GetDeviceInfo(cl->device, TR__CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof sz, &sz, NULL);
    I->max_wg = sz ? sz : 1;
    f->GetDeviceInfo(cl->device, TR__CL_DEVICE_MAX_WORK_ITEM_DIMENSIONS, sizeof dims, &dims, NULL);
    if (dims > 16) dims = 16;
    for (i = 0; i < 16; i++) items[i] = 0;
    if (dims) f->GetDeviceInfo(cl->device, TR__CL_DEVICE_MAX_WORK_ITEM_SIZES, dims * sizeof(size_t), items, NULL);
    for (i = 0; i < 3; i++) I->max_item[i] = i < dims && items[i] ? items[i] : (i == 0 ? I->max_wg : 1);
    u = 0;
    f->GetDeviceInfo(cl->device, TR__CL_DEVICE_LOCAL_MEM_SIZE, sizeof u, &u, NULL);
    I->local_mem = (size_t)u;
    u = 0;
    f->GetDeviceInfo(cl->device, TR__CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof u, &u, NULL);
    I->max_alloc = (size_t)(u > (tr__cl_ulong)SIZE_MAX ? SIZE_MAX : u);
    u = 0;
    f->GetDeviceInfo(cl->device, TR__CL_DEVICE_GLOBAL_MEM_SIZE, sizeof u, &u, NULL);
    I->global_mem = (size_t)(u > (tr__cl_ulong)SIZE_MAX ? SIZE_MAX : u);
    f->GetDeviceInfo(cl->device, TR__CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cu, &cu, NULL);
    I->compute_units = cu;
    cu = 0;
    f->GetDeviceInfo(cl->device, TR__CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof cu, &cu, NULL); /* (deprecated in 2.0, still answered) */
    I->host_unified = cu != 0;
    sz = 0;
    if (f->GetDeviceInfo(cl->device, TR__CL_DEVICE_EXTENSIONS, 0, NULL, &sz) == TR__CL_SUCCESS && sz &&
        (ext = (char *)tr__alloc(cl->ctx, sz + 1)) != NULL) {
        memset(ext, 0, sz + 1);
        f->GetDeviceInfo(cl->device, TR__CL_DEVICE_EXTENSIONS, sz, ext, NULL);
        I->has_fp64 = strstr(ext, "cl_khr_fp64") != NULL;
        if (strstr(ext, "cl_nv_device_attribute_query")) {
            tr__cl_uint major = 0, minor = 0;
            f->GetDeviceInfo(cl->device, 0x4000 /* CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV */, sizeof major, &major, NULL);
            f->GetDeviceInfo(cl->device, 0x4001 /* ..._MINOR_NV */, sizeof minor, &minor, NULL);
            I->nv_sm = (int)(major * 10 + minor);
        }
        tr__free(cl->ctx, ext);
    }
}

/* "OpenCL C 1.2 ..." -> 12 (0 if unknown). */
TR__FN int tr__cl_c_version(tr__cl *cl) {
    char v[128] = "";
    const char *p;
    cl->lib.f.GetDeviceInfo(cl->device, TR__CL_DEVICE_OPENCL_C_VERSION, sizeof v - 1, v, NULL);
    p = strstr(v, "OpenCL C ");
    if (!p) return 0;
    p += 9;
    if (!isdigit((unsigned char)p[0]) || p[1] != '.' || !isdigit((unsigned char)p[2])) return 0;
    return (p[0] - '0') * 10 + (p[2] - '0');
}

TR__FN void tr__cl_destroy(tr__cl *cl);
TR__FN void tr__cl_gemm_config(const tr__cl_info *info, tr__cl_gemm_cfg *out); /* with the SGEMM, below */
TR__FN void tr__cl_gemm_defines(const tr__cl_gemm_cfg *g, char *buf, size_t cap);

/* The .cl file and line of line `global` (1-based) of the program the fragments make, from the
   `#line N "file"` directives tools/cl_embed.sh puts at each file's start; 0 when no directive comes
   before it. Some compilers (NVIDIA's) ignore #line and report "<kernel>:LINE:" for the whole text. */
TR__FN int tr__cl_source_line(const char *const *sources, int n, long global, char *file, size_t cap, long *line) {
    long at = 1, base = 0, start = 0; /* the directive's own line and the number it gives the next */
    int i, found = 0;
    for (i = 0; i < n && at <= global; i++) {
        const char *p = sources[i];
        for (; *p && at <= global; at++) {
            const char *eol = strchr(p, '\n');
            size_t len = eol ? (size_t)(eol - p) : strlen(p);
            if (len > 9 && !strncmp(p, "#line ", 6) && isdigit((unsigned char)p[6])) {
                const char *q = strchr(p, '"'), *e = q ? (const char *)memchr(q + 1, '"', len - (size_t)(q + 1 - p)) : NULL;
                if (e && (size_t)(e - q - 1) < cap) {
                    memcpy(file, q + 1, (size_t)(e - q - 1));
                    file[e - q - 1] = 0;
                    base = strtol(p + 6, NULL, 10), start = at, found = 1;
                }
            }
            if (!eol) break; /* a fragment's last line runs on into the next fragment */
            p = eol + 1;
        }
    }
    if (!found || global <= start) return 0; /* before the first directive, or the directive itself */
    *line = base + (global - start - 1);
    return 1;
}

/* The build log with every "<kernel>:LINE:" replaced by "file.cl:line:" (tr__cl_source_line); a
   tr__alloc'ed copy, or NULL (then use the log as it is). */
TR__FN char *tr__cl_map_log(tr_ctx *ctx, const char *const *sources, int n, const char *log) {
    static const char tag[] = "<kernel>:";
    const char *p = log, *hit;
    size_t hits = 0, cap, o = 0;
    char *out;
    for (hit = strstr(p, tag); hit; hit = strstr(hit + 1, tag)) hits++;
    if (!hits) return NULL;
    cap = strlen(log) + hits * 300 + 1; /* a file name is < 256 bytes, a line number < 24 */
    if (!(out = (char *)tr__alloc(ctx, cap))) return NULL;
    while ((hit = strstr(p, tag)) != NULL) {
        char file[256], *end;
        long global = strtol(hit + sizeof tag - 1, &end, 10), line;
        memcpy(out + o, p, (size_t)(hit - p));
        o += (size_t)(hit - p);
        if (end > hit + sizeof tag - 1 && *end == ':' && tr__cl_source_line(sources, n, global, file, sizeof file, &line))
            o += (size_t)snprintf(out + o, cap - o, "%s:%ld", file, line);
        else {
            memcpy(out + o, hit, (size_t)(end - hit));
            o += (size_t)(end - hit);
        }
        p = end;
    }
    memcpy(out + o, p, strlen(p) + 1);
    return out;
}

TR__FN tr_status tr__cl_build(tr__cl *cl, const char *const *sources, int nsources, const char *opts, int inject) {
    const tr__clfn *f = &cl->lib.f;
    static const char bad_src[] = "#error tinyrec: injected build failure (TR__CLF_BUILD)\n";
    const char **src;
    char *options, gemm[512] = "";
    size_t olen;
    tr__cl_int err = 0;
    int i, n = nsources + (inject ? 1 : 0);
    if (n <= 0) return tr__err(cl->ctx, TR_ERR_INVALID_ARG, "opencl: no program sources");
    src = (const char **)tr__alloc(cl->ctx, sizeof(char *) * (size_t)n);
    if (!src) return TR_ERR_OUT_OF_MEMORY;
    for (i = 0; i < nsources; i++) src[i] = sources[i];
    if (inject) src[nsources] = bad_src;
    /* chosen once: every launch uses the tiles the program was built with */
    tr__cl_gemm_config(&cl->info, &cl->gemm);
    tr__cl_gemm_defines(&cl->gemm, gemm, sizeof gemm);
    gemm[sizeof gemm - 1] = 0;
    /* TINYREC_CL_OPTIONS: extra build options for experiments (e.g. -cl-nv-maxrregcount=128) */
    if (!opts) opts = getenv("TINYREC_CL_OPTIONS");
    olen = strlen(gemm) + (opts ? strlen(opts) : 0) + 64;
    options = (char *)tr__alloc(cl->ctx, olen);
    if (!options) {
        tr__free(cl->ctx, src);
        return TR_ERR_OUT_OF_MEMORY;
    }
    snprintf(options, olen, "%s%s%s%s%s", tr__cl_c_version(cl) >= 12 ? "-cl-std=CL1.2 " : "", cl->info.has_fp64 ? "-DTR_FP64=1 " : "", gemm,
             gemm[0] ? " " : "", opts ? opts : "");
    cl->program = f->CreateProgramWithSource(cl->context, (tr__cl_uint)n, src, NULL, &err);
    tr__free(cl->ctx, src);
    if (!cl->program || err != TR__CL_SUCCESS) {
        tr__free(cl->ctx, options);
        cl->program = NULL;
        return tr__cl_fail(cl, "clCreateProgramWithSource", NULL, err);
    }
    err = f->BuildProgram(cl->program, 1, &cl->device, options, NULL, NULL);
    if (err == TR__CL_SUCCESS && cl->profile) { /* the compiler's notes (e.g. register use with -cl-nv-verbose) */
        size_t sz = 0;
        char *log;
        tr__log(cl->ctx, TR_LOG_INFO, "opencl: build options: %s", options);
        if (f->GetProgramBuildInfo(cl->program, cl->device, TR__CL_PROGRAM_BUILD_LOG, 0, NULL, &sz) == TR__CL_SUCCESS && sz > 1 &&
            (log = (char *)tr__alloc(cl->ctx, sz + 1)) != NULL) {
            char *line, *next;
            memset(log, 0, sz + 1);
            f->GetProgramBuildInfo(cl->program, cl->device, TR__CL_PROGRAM_BUILD_LOG, sz, log, NULL);
            for (line = log; line && *line; line = next) {
                next = strchr(line, '\n');
                if (next) *next++ = 0;
                if (strstr(line, "sgemm") || strstr(line, "registers")) tr__log(cl->ctx, TR_LOG_INFO, "opencl build: %.300s", line);
            }
            tr__free(cl->ctx, log);
        }
    }
    tr__free(cl->ctx, options);
    if (err != TR__CL_SUCCESS) {
        /* The log into the error text (truncated to fit), and line by line into the log callback. */
        size_t sz = 0, len;
        char *log = NULL, *line, *next;
        int lines = 0;
        tr__err(cl->ctx, TR_ERR_DEVICE, "opencl: clBuildProgram(%s): %s (%d); build log: ", cl->info.name, tr__cl_errname(err), (int)err);
        if (f->GetProgramBuildInfo(cl->program, cl->device, TR__CL_PROGRAM_BUILD_LOG, 0, NULL, &sz) == TR__CL_SUCCESS && sz &&
            (log = (char *)tr__alloc(cl->ctx, sz + 1)) != NULL) {
            memset(log, 0, sz + 1);
            f->GetProgramBuildInfo(cl->program, cl->device, TR__CL_PROGRAM_BUILD_LOG, sz, log, NULL);
        }
        if (log) {
            char *mapped = tr__cl_map_log(cl->ctx, sources, nsources, log);
            if (mapped) tr__free(cl->ctx, log), log = mapped;
        }
        len = strlen(cl->ctx->error);
        if (log && log[strspn(log, " \t\r\n")]) {
            const char *body = log + strspn(log, " \t\r\n");
            size_t room = sizeof cl->ctx->error - len - 1, blen = strlen(body);
            while (blen && isspace((unsigned char)body[blen - 1])) blen--;
            if (blen > room) {
                memcpy(cl->ctx->error + len, body, room);
                if (room >= 4) memcpy(cl->ctx->error + len + room - 4, " ...", 4);
                cl->ctx->error[len + room] = 0;
            } else {
                memcpy(cl->ctx->error + len, body, blen);
                cl->ctx->error[len + blen] = 0;
            }
            for (line = log; line && *line && lines < 400; line = next, lines++) {
                next = strchr(line, '\n');
                if (next) *next++ = 0;
                if (line[0]) tr__log(cl->ctx, TR_LOG_ERROR, "opencl build: %.900s", line);
            }
        } else {
            snprintf(cl->ctx->error + len, sizeof cl->ctx->error - len, "(empty)");
        }
        tr__free(cl->ctx, log);
        return TR_ERR_DEVICE;
    }
    return TR_OK;
}

TR__FN tr_status tr__cl_open(tr_ctx *ctx, const char *selector, const char *const *sources, int nsources, const char *opts,
                             tr__cl_fault fault, tr__cl **out) {
    enum { SEL_AUTO, SEL_ANY, SEL_INDEX, SEL_TEXT } mode;
    const char *text = "";
    long index = -1;
    char why[256];
    tr__cl *cl;
    tr__cl_devent *devs = NULL;
    int n = 0, np = 0, i, pick = -1;
    tr__cl_int err = 0;
    tr_status st;
    if (!ctx || !out) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr__cl_open: NULL argument");
    *out = NULL;
    if (!sources && nsources > 0) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr__cl_open: NULL sources");
    /* selector */
    if (!selector || !selector[0] || strcmp(selector, "opencl") == 0 || strcmp(selector, "opencl:") == 0) {
        mode = SEL_ANY;
    } else if (strcmp(selector, "auto") == 0) {
        mode = SEL_AUTO;
    } else if (strncmp(selector, "opencl:", 7) == 0) {
        const char *s = selector + 7;
        char *end = NULL;
        text = s;
        mode = SEL_TEXT;
        if (isdigit((unsigned char)s[0])) {
            index = strtol(s, &end, 10);
            if (end && *end == 0) mode = SEL_INDEX;
        }
    } else {
        return tr__err(ctx, TR_ERR_INVALID_ARG, "opencl: unknown device selector '%s' (valid: auto, opencl, opencl:N, opencl:<name>)", selector);
    }

    cl = (tr__cl *)tr__cl_table_alloc(ctx, sizeof *cl);
    if (!cl) return TR_ERR_OUT_OF_MEMORY;
    memset(cl, 0, sizeof *cl);
    cl->ctx = ctx;
    cl->profile = getenv("TINYREC_CL_PROFILE") && strcmp(getenv("TINYREC_CL_PROFILE"), "1") == 0;
    if (fault == TR__CLF_NO_LIBRARY || !tr__cl_load(&cl->lib, why, sizeof why)) {
        if (fault == TR__CLF_NO_LIBRARY) snprintf(why, sizeof why, "injected fault");
        st = tr__err(ctx, TR_ERR_UNSUPPORTED, "opencl: no OpenCL library (%s)", why);
        goto fail;
    }
    devs = (tr__cl_devent *)tr__alloc(ctx, sizeof(tr__cl_devent) * TR__CL_MAXDEV);
    if (!devs) {
        st = TR_ERR_OUT_OF_MEMORY;
        goto fail;
    }
    if (fault != TR__CLF_NO_PLATFORM) n = tr__cl_list(&cl->lib.f, devs, TR__CL_MAXDEV, &np);
    if (fault == TR__CLF_NO_DEVICE) n = 0;
    if (np == 0) {
        st = tr__err(ctx, TR_ERR_UNSUPPORTED, "opencl: no OpenCL platform%s", fault == TR__CLF_NO_PLATFORM ? " (injected fault)" : "");
        goto fail;
    }
    if (n == 0) {
        st = tr__err(ctx, TR_ERR_UNSUPPORTED, "opencl: no OpenCL device on %d platform%s%s", np, np == 1 ? "" : "s",
                     fault == TR__CLF_NO_DEVICE ? " (injected fault)" : "");
        goto fail;
    }
    for (i = 0; i < n && pick < 0; i++)
        if (devs[i].is_gpu) pick = i;
    if (mode == SEL_AUTO && pick < 0) {
        st = tr__err(ctx, TR_ERR_UNSUPPORTED, "opencl: no OpenCL GPU (%d other device%s: first \"%s\")", n, n == 1 ? "" : "s", devs[0].dname);
        goto fail;
    }
    if (mode == SEL_ANY && pick < 0) pick = 0;
    if (mode == SEL_INDEX) {
        if (index < 0 || index >= n) {
            st = tr__err(ctx, TR_ERR_UNSUPPORTED, "opencl: no OpenCL device #%ld (%d device%s, numbered from 0)", index, n, n == 1 ? "" : "s");
            goto fail;
        }
        pick = (int)index;
    }
    if (mode == SEL_TEXT) {
        pick = -1;
        for (i = 0; i < n && pick < 0; i++) {
            char label[300];
            snprintf(label, sizeof label, "%s / %s", devs[i].pname, devs[i].dname);
            if (tr__cl_icontains(label, text)) pick = i;
        }
        if (pick < 0) {
            st = tr__err(ctx, TR_ERR_UNSUPPORTED, "opencl: no OpenCL device matches '%s' (%d device%s: first \"%s / %s\")", text, n,
                         n == 1 ? "" : "s", devs[0].pname, devs[0].dname);
            goto fail;
        }
    }
    cl->platform = devs[pick].platform;
    cl->device = devs[pick].device;
    memcpy(cl->platform_name, devs[pick].pname, sizeof cl->platform_name);
    tr__free(ctx, devs);
    devs = NULL;
    tr__cl_query_info(cl);
    cl->zerocopy = cl->info.host_unified && !(getenv("TINYREC_CL_ZEROCOPY") && strcmp(getenv("TINYREC_CL_ZEROCOPY"), "0") == 0);

    {
        intptr_t props[3];
        props[0] = TR__CL_CONTEXT_PLATFORM;
        props[1] = (intptr_t)cl->platform;
        props[2] = 0;
        cl->context = cl->lib.f.CreateContext(props, 1, &cl->device, NULL, NULL, &err);
        if (!cl->context || err != TR__CL_SUCCESS) {
            cl->context = NULL;
            st = tr__cl_fail(cl, "clCreateContext", cl->info.name, err);
            goto fail;
        }
    }
    cl->queue = cl->lib.f.CreateCommandQueue(cl->context, cl->device, 0, &err);
    if (!cl->queue || err != TR__CL_SUCCESS) {
        cl->queue = NULL;
        st = tr__cl_fail(cl, "clCreateCommandQueue", cl->info.name, err);
        goto fail;
    }
    cl->dummy = cl->lib.f.CreateBuffer(cl->context, TR__CL_MEM_READ_WRITE, 16, NULL, &err);
    if (!cl->dummy || err != TR__CL_SUCCESS) {
        cl->dummy = NULL;
        st = tr__cl_fail(cl, "clCreateBuffer", "16 bytes", err);
        goto fail;
    }
    st = tr__cl_build(cl, sources, nsources, opts, fault == TR__CLF_BUILD);
    if (st != TR_OK) goto fail;

    tr__log(ctx, TR_LOG_INFO, "opencl: using \"%s\" on \"%s\" (%s): %s, %zu compute units, %zu MiB memory, %zu MiB max allocation, work-group %zu, %zu KiB local%s%s",
            cl->info.name, cl->platform_name, cl->info.version, cl->info.is_gpu ? "GPU" : "not a GPU", cl->info.compute_units,
            cl->info.global_mem >> 20, cl->info.max_alloc >> 20, cl->info.max_wg, cl->info.local_mem >> 10, cl->info.has_fp64 ? ", fp64" : "",
            cl->zerocopy ? ", host-unified memory (zero-copy transfers)" : cl->info.host_unified ? ", host-unified memory (zero-copy off)" : "");
    if (!cl->info.is_gpu)
        tr__log(ctx, TR_LOG_WARN, "opencl: \"%s\" is not a GPU; it will likely be slower than the CPU backend", cl->info.name);
    *out = cl;
    return TR_OK;
fail:
    if (devs) tr__free(ctx, devs);
    tr__cl_destroy(cl);
    return st;
}

/* --- arenas ---------------------------------------------------------------------------------- */
/* The arena holding p, allowing p == end (one past the last element); -1 if none. */
TR__FN int tr__cl_find(const tr__cl *cl, const void *p) {
    uintptr_t a = (uintptr_t)p;
    int i;
    if (!p) return -1;
    i = cl->last_hit;
    if (i >= 0 && i < cl->narenas && a >= (uintptr_t)cl->arenas[i].base && a <= (uintptr_t)cl->arenas[i].base + cl->arenas[i].bytes) return i;
    for (i = 0; i < cl->narenas; i++)
        if (a >= (uintptr_t)cl->arenas[i].base && a <= (uintptr_t)cl->arenas[i].base + cl->arenas[i].bytes) {
            ((tr__cl *)cl)->last_hit = i;
            return i;
        }
    return -1;
}

TR__FN int tr__cl_owns(const tr__cl *cl, const void *p) {
    int i;
    if (!cl || !p) return 0;
    i = tr__cl_find(cl, p);
    return i >= 0 && (uintptr_t)p < (uintptr_t)cl->arenas[i].base + cl->arenas[i].bytes;
}

/* (cl_mem, byte offset) of [p, p + bytes), which must lie in one arena. */
TR__FN tr_status tr__cl_resolve(tr__cl *cl, const void *p, size_t bytes, const char *what, tr__cl_mem *mem, size_t *off) {
    int i = tr__cl_find(cl, p);
    size_t o;
    if (i < 0) return tr__err(cl->ctx, TR_ERR_INVALID_ARG, "opencl: %s: %p is not a device pointer", what, p);
    o = (size_t)((const char *)p - cl->arenas[i].base);
    if (bytes > cl->arenas[i].bytes - o)
        return tr__err(cl->ctx, TR_ERR_INVALID_ARG, "opencl: %s: %zu bytes at offset %zu overrun the buffer of %zu bytes", what, bytes, o,
                       cl->arenas[i].bytes);
    *mem = cl->arenas[i].mem;
    *off = o;
    return TR_OK;
}

TR__FN void *tr__cl_oom(tr__cl *cl, size_t bytes, const char *why) {
    cl->last_oom = 1;
    tr__err(cl->ctx, TR_ERR_OUT_OF_MEMORY, "opencl: out of device memory allocating %.1f MiB (%s)", (double)bytes / 1048576.0, why);
    return NULL;
}

TR__FN void *tr__cl_alloc(tr__cl *cl, size_t bytes, int keep) {
    const tr__clfn *f;
    tr__cl_arena a;
    size_t page, req = bytes;
    tr__cl_int err = 0;
    char why[160];
    if (!cl) return NULL;
    f = &cl->lib.f;
    cl->last_oom = 0;
    page = tr__cl_page();
    if (bytes == 0) bytes = 4;
    if (bytes > SIZE_MAX - 2 * page) return tr__cl_oom(cl, req, "size overflows");
    bytes = (bytes + 3) & ~(size_t)3;
    if (cl->fail_alloc) return tr__cl_oom(cl, req, "injected fault");
    if (!cl->migrated && bytes > cl->info.max_alloc) {
        snprintf(why, sizeof why, "larger than the device's largest buffer, %.1f MiB", (double)cl->info.max_alloc / 1048576.0);
        return tr__cl_oom(cl, req, why);
    }
    memset(&a, 0, sizeof a);
    a.bytes = bytes;
    a.reserved = (bytes + page - 1) / page * page + page;
    a.keep = keep;
    if (cl->narenas == cl->cap_arenas) { /* room first, so that nothing can fail after the device work */
        int cap = cl->cap_arenas ? 2 * cl->cap_arenas : 16;
        tr__cl_arena *na = (tr__cl_arena *)tr__cl_table_alloc(cl->ctx, sizeof(tr__cl_arena) * (size_t)cap);
        if (!na) return tr__cl_oom(cl, req, "host memory for the arena table");
        if (cl->narenas) memcpy(na, cl->arenas, sizeof(tr__cl_arena) * (size_t)cl->narenas);
        tr__cl_table_free(cl->ctx, cl->arenas);
        cl->arenas = na;
        cl->cap_arenas = cap;
    }
    a.base = (char *)tr__cl_reserve(a.reserved);
    if (!a.base) return tr__cl_oom(cl, req, "address space reservation failed");
    if (cl->migrated) { /* after the fallback, arenas are plain host memory */
        if (!tr__cl_commit(a.base, a.reserved)) {
            tr__cl_unreserve(a.base, a.reserved);
            cl->last_oom = 1;
            tr__err(cl->ctx, TR_ERR_OUT_OF_MEMORY, "out of memory: %.1f MiB for a migrated device buffer", (double)req / 1048576.0);
            return NULL;
        }
    } else {
        uint32_t zero = 0;
        a.mem = f->CreateBuffer(cl->context, TR__CL_MEM_READ_WRITE | (cl->zerocopy ? TR__CL_MEM_ALLOC_HOST_PTR : 0), bytes, NULL, &err);
        if (!a.mem || err != TR__CL_SUCCESS) {
            if (a.mem) f->ReleaseMemObject(a.mem);
            tr__cl_unreserve(a.base, a.reserved);
            snprintf(why, sizeof why, "clCreateBuffer: %s (%d)", tr__cl_errname(err), (int)err);
            return tr__cl_oom(cl, req, why);
        }
        /* Zero it, and wait: lazy allocators report the failure only when the memory is first used. */
        {
            /* in pieces of at most 1 GiB: one fill of a 27 GB buffer returned CL_INVALID_COMMAND_QUEUE on an H200 (driver 580) */
            size_t done, piece = (size_t)1 << 30;
            err = TR__CL_SUCCESS;
            for (done = 0; done < bytes && err == TR__CL_SUCCESS; done += piece)
                err = f->EnqueueFillBuffer(cl->queue, a.mem, &zero, sizeof zero, done, TR__MIN(piece, bytes - done), 0, NULL, NULL);
        }
        if (err == TR__CL_SUCCESS) err = f->Finish(cl->queue);
        if (err != TR__CL_SUCCESS) {
            f->ReleaseMemObject(a.mem);
            tr__cl_unreserve(a.base, a.reserved);
            if (err == TR__CL_MEM_OBJECT_ALLOCATION_FAILURE || err == TR__CL_OUT_OF_RESOURCES || err == TR__CL_OUT_OF_HOST_MEMORY) {
                snprintf(why, sizeof why, "zero fill: %s (%d)", tr__cl_errname(err), (int)err);
                return tr__cl_oom(cl, req, why);
            }
            tr__cl_fail(cl, "clEnqueueFillBuffer", "zeroing a new buffer", err);
            return NULL;
        }
    }
    cl->arenas[cl->narenas++] = a;
    return a.base;
}

TR__FN void tr__cl_arena_release(tr__cl *cl, tr__cl_arena *a) {
    if (a->mem) cl->lib.f.ReleaseMemObject(a->mem); /* deferred by OpenCL until queued work using it is done */
    tr__cl_unreserve(a->base, a->reserved);
    a->mem = NULL;
    a->base = NULL;
}

TR__FN void tr__cl_free(tr__cl *cl, void *devptr) {
    int i;
    if (!cl || !devptr) return;
    for (i = 0; i < cl->narenas; i++)
        if (cl->arenas[i].base == (char *)devptr) {
            tr__cl_arena_release(cl, &cl->arenas[i]);
            cl->arenas[i] = cl->arenas[--cl->narenas];
            cl->last_hit = -1;
            return;
        }
}

TR__FN float *tr__cl_scratch(tr__cl *cl, int slot, size_t floats) {
    size_t want;
    void *p;
    if (!cl) return NULL;
    if (slot < 0 || slot >= TR__CL_SLOTS) {
        tr__err(cl->ctx, TR_ERR_INVALID_ARG, "opencl: scratch slot %d is out of range (0..%d)", slot, TR__CL_SLOTS - 1);
        return NULL;
    }
    if (floats == 0) floats = 1;
    if (cl->slot[slot] && floats <= cl->slot_floats[slot]) return (float *)cl->slot[slot];
    if (floats > SIZE_MAX / 8) {
        tr__err(cl->ctx, TR_ERR_OVERFLOW, "opencl: scratch of %zu floats overflows", floats);
        return NULL;
    }
    want = cl->slot_floats[slot] + cl->slot_floats[slot] / 2; /* grow by at least 1.5x */
    if (want < floats) want = floats;
    if (want * 4 > cl->info.max_alloc && !cl->migrated) want = floats;
    if (cl->slot[slot]) tr__cl_free(cl, cl->slot[slot]);
    cl->slot[slot] = NULL;
    cl->slot_floats[slot] = 0;
    p = tr__cl_alloc(cl, want * 4, 0);
    if (!p) return NULL;
    cl->slot[slot] = p;
    cl->slot_floats[slot] = want;
    return (float *)p;
}

/* --- transfers -------------------------------------------------------------------------------- */
TR__FN tr_status tr__cl_finish(tr__cl *cl);

TR__FN void tr__cl_stage_release(tr__cl *cl) {
    int i;
    for (i = 0; i < 2; i++) {
        if (cl->stage_ev[i]) {
            cl->lib.f.WaitForEvents(1, &cl->stage_ev[i]);
            cl->lib.f.ReleaseEvent(cl->stage_ev[i]);
            cl->stage_ev[i] = NULL;
        }
        if (cl->stage_ptr[i] && cl->queue) cl->lib.f.EnqueueUnmapMemObject(cl->queue, cl->stage[i], cl->stage_ptr[i], 0, NULL, NULL);
        cl->stage_ptr[i] = NULL;
    }
    if (cl->queue && (cl->stage[0] || cl->stage[1])) cl->lib.f.Finish(cl->queue);
    for (i = 0; i < 2; i++) {
        if (cl->stage[i]) cl->lib.f.ReleaseMemObject(cl->stage[i]);
        cl->stage[i] = NULL;
    }
}

/* Two pinned (host-allocated, mapped once) buffers; writes copy through them in turn, and small
   reads land in them. */
TR__FN int tr__cl_stage_ready(tr__cl *cl) {
    const tr__clfn *f = &cl->lib.f;
    int i;
    if (cl->stage_state) return cl->stage_state > 0;
    cl->stage_state = -1;
    for (i = 0; i < 2; i++) {
        tr__cl_int err = 0;
        cl->stage[i] = f->CreateBuffer(cl->context, TR__CL_MEM_READ_WRITE | TR__CL_MEM_ALLOC_HOST_PTR, TR__CL_STAGE_BYTES, NULL, &err);
        if (!cl->stage[i] || err != TR__CL_SUCCESS) break;
        cl->stage_ptr[i] = f->EnqueueMapBuffer(cl->queue, cl->stage[i], TR__CL_TRUE, TR__CL_MAP_READ | TR__CL_MAP_WRITE, 0, TR__CL_STAGE_BYTES, 0, NULL, NULL, &err);
        if (!cl->stage_ptr[i] || err != TR__CL_SUCCESS) {
            cl->stage_ptr[i] = NULL;
            break;
        }
    }
    if (i < 2) {
        tr__cl_stage_release(cl);
        tr__log(cl->ctx, TR_LOG_DEBUG, "opencl: no pinned staging buffers, writes go straight from user memory");
        return 0;
    }
    cl->stage_state = 1;
    return 1;
}

/* Staged writes: through the pinned buffers in turn (the source is reusable on return), or
   straight from user memory when there are none. */
TR__FN tr_status tr__cl_write_staged(tr__cl *cl, tr__cl_mem mem, size_t off, const void *src_host, size_t bytes) {
    const tr__clfn *f = &cl->lib.f;
    size_t done;
    tr__cl_int err;
    if (!tr__cl_stage_ready(cl)) {
        err = f->EnqueueWriteBuffer(cl->queue, mem, TR__CL_TRUE, off, bytes, src_host, 0, NULL, NULL);
        return err == TR__CL_SUCCESS ? TR_OK : tr__cl_fail(cl, "clEnqueueWriteBuffer", NULL, err);
    }
    for (done = 0; done < bytes;) {
        int s = cl->stage_next;
        size_t n = TR__MIN(bytes - done, TR__CL_STAGE_BYTES);
        if (cl->stage_ev[s]) { /* the previous write from this buffer must have left it */
            err = f->WaitForEvents(1, &cl->stage_ev[s]);
            f->ReleaseEvent(cl->stage_ev[s]);
            cl->stage_ev[s] = NULL;
            if (err != TR__CL_SUCCESS) return tr__cl_fail(cl, "clWaitForEvents", "staged write", err);
        }
        memcpy(cl->stage_ptr[s], (const char *)src_host + done, n);
        err = f->EnqueueWriteBuffer(cl->queue, mem, TR__CL_FALSE, off + done, n, cl->stage_ptr[s], 0, NULL, &cl->stage_ev[s]);
        if (err != TR__CL_SUCCESS) {
            cl->stage_ev[s] = NULL;
            return tr__cl_fail(cl, "clEnqueueWriteBuffer", NULL, err);
        }
        cl->stage_next = s ^ 1;
        done += n;
    }
    return TR_OK;
}

TR__FN tr_status tr__cl_read_staged(tr__cl *cl, tr__cl_mem mem, size_t off, void *dst_host, size_t bytes) {
    tr__cl_int err;
    if (bytes <= TR__CL_STAGE_BYTES && tr__cl_stage_ready(cl)) {
        /* small reads (the per-step metrics) land in pinned memory, then one memcpy */
        int s = cl->stage_next;
        if (cl->stage_ev[s]) {
            err = cl->lib.f.WaitForEvents(1, &cl->stage_ev[s]);
            cl->lib.f.ReleaseEvent(cl->stage_ev[s]);
            cl->stage_ev[s] = NULL;
            if (err != TR__CL_SUCCESS) return tr__cl_fail(cl, "clWaitForEvents", "staged write", err);
        }
        err = cl->lib.f.EnqueueReadBuffer(cl->queue, mem, TR__CL_TRUE, off, bytes, cl->stage_ptr[s], 0, NULL, NULL);
        if (err == TR__CL_SUCCESS) memcpy(dst_host, cl->stage_ptr[s], bytes);
    } else
        err = cl->lib.f.EnqueueReadBuffer(cl->queue, mem, TR__CL_TRUE, off, bytes, dst_host, 0, NULL, NULL);
    return err == TR__CL_SUCCESS ? TR_OK : tr__cl_fail(cl, "clEnqueueReadBuffer", NULL, err);
}

/* Pinned host memory of the caller's own (CL_MEM_ALLOC_HOST_PTR, mapped until tr__cl_pinned_free): the
   device reads into it and writes from it at full speed, without the staging copies of tr__cl_write.
   The data-parallel trainer stages its gradients there. NULL (and *mem NULL) when the device has none. */
TR__FN void *tr__cl_pinned_alloc(tr__cl *cl, size_t bytes, tr__cl_mem *mem) {
    const tr__clfn *f = &cl->lib.f;
    tr__cl_int err = 0;
    void *p;
    *mem = NULL;
    if (cl->migrated || !bytes) return NULL;
    *mem = f->CreateBuffer(cl->context, TR__CL_MEM_READ_WRITE | TR__CL_MEM_ALLOC_HOST_PTR, bytes, NULL, &err);
    p = *mem && err == TR__CL_SUCCESS ? f->EnqueueMapBuffer(cl->queue, *mem, TR__CL_TRUE, TR__CL_MAP_READ | TR__CL_MAP_WRITE, 0, bytes, 0, NULL, NULL, &err) : NULL;
    if (!p || err != TR__CL_SUCCESS) {
        if (*mem) f->ReleaseMemObject(*mem);
        *mem = NULL;
        return NULL;
    }
    return p;
}

/* Also after a fallback to the CPU (the queue lives as long as cl). */
TR__FN void tr__cl_pinned_free(tr__cl *cl, tr__cl_mem mem, void *p) {
    if (!cl || !mem) return;
    cl->lib.f.EnqueueUnmapMemObject(cl->queue, mem, p, 0, NULL, NULL);
    cl->lib.f.Finish(cl->queue);
    cl->lib.f.ReleaseMemObject(mem);
}

/* A non-blocking device -> host (to_dev 0) or host -> device copy behind what is already enqueued;
   host must stay untouched until tr__cl_wait(*ev) (ev NULL: blocking). */
TR__FN tr_status tr__cl_copy_host(tr__cl *cl, int to_dev, void *host, void *dev, size_t bytes, tr__cl_event *ev) {
    tr__cl_mem mem;
    size_t off;
    tr__cl_int err;
    tr_status st;
    if (ev) *ev = NULL;
    if ((st = tr__cl_check_live(cl, to_dev ? "write" : "read")) != TR_OK) return st;
    if (!bytes) return TR_OK;
    if ((st = tr__cl_resolve(cl, dev, bytes, to_dev ? "write" : "read", &mem, &off)) != TR_OK) return st;
    if (tr__cl_injected(cl)) return tr__cl_fail(cl, to_dev ? "clEnqueueWriteBuffer" : "clEnqueueReadBuffer", "injected fault", TR__CL_OUT_OF_RESOURCES);
    if (to_dev) err = cl->lib.f.EnqueueWriteBuffer(cl->queue, mem, ev ? TR__CL_FALSE : TR__CL_TRUE, off, bytes, host, 0, NULL, ev);
    else err = cl->lib.f.EnqueueReadBuffer(cl->queue, mem, ev ? TR__CL_FALSE : TR__CL_TRUE, off, bytes, host, 0, NULL, ev);
    if (err != TR__CL_SUCCESS) {
        if (ev) *ev = NULL;
        return tr__cl_fail(cl, to_dev ? "clEnqueueWriteBuffer" : "clEnqueueReadBuffer", NULL, err);
    }
    return TR_OK;
}

/* Waits for ev and releases it (also when the wait fails); what names it in the error (NULL: a
   transfer being abandoned, whose failure is no news and leaves the context's error as it is). */
TR__FN tr_status tr__cl_wait(tr__cl *cl, tr__cl_event ev, const char *what) {
    tr__cl_int err;
    if (!ev) return TR_OK;
    err = cl->lib.f.WaitForEvents(1, &ev);
    cl->lib.f.ReleaseEvent(ev);
    if (err == TR__CL_SUCCESS || !what) return err == TR__CL_SUCCESS ? TR_OK : TR_ERR_DEVICE;
    return tr__cl_fail(cl, "clWaitForEvents", what, err);
}

/* Zero-copy: maps [off, off + bytes) of mem (blocking: the in-order queue runs the work queued
   before it first), copies once, and queues the unmap, which later commands wait for. */
TR__FN tr_status tr__cl_map_copy(tr__cl *cl, tr__cl_mem mem, size_t off, void *dst_host, const void *src_host, size_t bytes) {
    const tr__clfn *f = &cl->lib.f;
    const char *what = dst_host ? "read" : "write";
    tr__cl_int err = 0;
    void *p = f->EnqueueMapBuffer(cl->queue, mem, TR__CL_TRUE, dst_host ? TR__CL_MAP_READ : TR__CL_MAP_WRITE_INVALIDATE_REGION, off, bytes, 0, NULL, NULL, &err);
    if (!p || err != TR__CL_SUCCESS) return tr__cl_fail(cl, "clEnqueueMapBuffer", what, err != TR__CL_SUCCESS ? err : TR__CL_OUT_OF_RESOURCES);
    if (dst_host) memcpy(dst_host, p, bytes);
    else memcpy(p, src_host, bytes);
    err = f->EnqueueUnmapMemObject(cl->queue, mem, p, 0, NULL, NULL);
    return err == TR__CL_SUCCESS ? TR_OK : tr__cl_fail(cl, "clEnqueueUnmapMemObject", what, err);
}

/* One read (dst_host set) or write (src_host set) the device's way. With TINYREC_CL_PROFILE=1 it
   runs alone (the queue drained before, the copy finished after) and is timed. */
TR__FN tr_status tr__cl_transfer(tr__cl *cl, tr__cl_mem mem, size_t off, void *dst_host, const void *src_host, size_t bytes) {
    int dir = dst_host != NULL;
    double t0 = 0;
    tr_status st;
    if (cl->profile) {
        cl->lib.f.Finish(cl->queue);
        t0 = tr__now();
    }
    if (cl->zerocopy) st = tr__cl_map_copy(cl, mem, off, dst_host, src_host, bytes);
    else st = dir ? tr__cl_read_staged(cl, mem, off, dst_host, bytes) : tr__cl_write_staged(cl, mem, off, src_host, bytes);
    if (cl->profile) {
        tr__cl_int err = cl->lib.f.Finish(cl->queue);
        if (st == TR_OK && err != TR__CL_SUCCESS) st = tr__cl_fail(cl, "clFinish after the transfer", dir ? "read" : "write", err);
        cl->xfer_seconds[dir] += tr__now() - t0;
        cl->xfer_calls[dir]++;
        cl->xfer_bytes[dir] += (double)bytes;
    }
    return st;
}

TR__FN tr_status tr__cl_write(tr__cl *cl, void *dst_dev, const void *src_host, size_t bytes) {
    tr__cl_mem mem;
    size_t off;
    tr_status st;
    if (!cl || (!src_host && bytes)) return tr__err(cl ? cl->ctx : NULL, TR_ERR_INVALID_ARG, "tr__cl_write: NULL argument");
    if ((st = tr__cl_check_live(cl, "write")) != TR_OK) return st;
    if (!bytes) return TR_OK;
    if ((st = tr__cl_resolve(cl, dst_dev, bytes, "write", &mem, &off)) != TR_OK) return st;
    if (tr__cl_injected(cl)) return tr__cl_fail(cl, "clEnqueueWriteBuffer", "injected fault", TR__CL_OUT_OF_RESOURCES);
    return tr__cl_transfer(cl, mem, off, NULL, src_host, bytes);
}

TR__FN tr_status tr__cl_read(tr__cl *cl, void *dst_host, const void *src_dev, size_t bytes) {
    tr__cl_mem mem;
    size_t off;
    tr_status st;
    if (!cl || (!dst_host && bytes)) return tr__err(cl ? cl->ctx : NULL, TR_ERR_INVALID_ARG, "tr__cl_read: NULL argument");
    if ((st = tr__cl_check_live(cl, "read")) != TR_OK) return st;
    if (!bytes) return tr__cl_finish(cl);
    if ((st = tr__cl_resolve(cl, src_dev, bytes, "read", &mem, &off)) != TR_OK) return st;
    return tr__cl_transfer(cl, mem, off, dst_host, NULL, bytes);
}

TR__FN tr_status tr__cl_copy(tr__cl *cl, void *dst_dev, const void *src_dev, size_t bytes) {
    tr__cl_mem dm, sm;
    size_t doff, soff;
    tr__cl_int err;
    tr_status st;
    if (!cl) return TR_ERR_INVALID_ARG;
    if ((st = tr__cl_check_live(cl, "copy")) != TR_OK) return st;
    if (!bytes) return TR_OK;
    if ((st = tr__cl_resolve(cl, dst_dev, bytes, "copy (destination)", &dm, &doff)) != TR_OK) return st;
    if ((st = tr__cl_resolve(cl, src_dev, bytes, "copy (source)", &sm, &soff)) != TR_OK) return st;
    if (tr__cl_injected(cl)) return tr__cl_fail(cl, "clEnqueueCopyBuffer", "injected fault", TR__CL_OUT_OF_RESOURCES);
    if (dm == sm && doff == soff) return TR_OK;
    err = cl->lib.f.EnqueueCopyBuffer(cl->queue, sm, dm, soff, doff, bytes, 0, NULL, NULL);
    return err == TR__CL_SUCCESS ? TR_OK : tr__cl_fail(cl, "clEnqueueCopyBuffer", NULL, err);
}

TR__FN tr_status tr__cl_fill(tr__cl *cl, void *dst_dev, uint32_t pattern, size_t bytes) {
    tr__cl_mem mem;
    size_t off;
    tr__cl_int err;
    tr_status st;
    if (!cl) return TR_ERR_INVALID_ARG;
    if ((st = tr__cl_check_live(cl, "fill")) != TR_OK) return st;
    if (!bytes) return TR_OK;
    if ((st = tr__cl_resolve(cl, dst_dev, bytes, "fill", &mem, &off)) != TR_OK) return st;
    if ((off | bytes) & 3) return tr__err(cl->ctx, TR_ERR_INVALID_ARG, "opencl: fill of %zu bytes at offset %zu: not whole 4-byte elements", bytes, off);
    if (tr__cl_injected(cl)) return tr__cl_fail(cl, "clEnqueueFillBuffer", "injected fault", TR__CL_OUT_OF_RESOURCES);
    err = cl->lib.f.EnqueueFillBuffer(cl->queue, mem, &pattern, sizeof pattern, off, bytes, 0, NULL, NULL);
    return err == TR__CL_SUCCESS ? TR_OK : tr__cl_fail(cl, "clEnqueueFillBuffer", NULL, err);
}

TR__FN tr_status tr__cl_finish(tr__cl *cl) {
    tr__cl_int err;
    tr_status st;
    if (!cl) return TR_ERR_INVALID_ARG;
    if ((st = tr__cl_check_live(cl, "finish")) != TR_OK) return st;
    err = cl->lib.f.Finish(cl->queue);
    return err == TR__CL_SUCCESS ? TR_OK : tr__cl_fail(cl, "clFinish", NULL, err);
}

/* --- kernels ---------------------------------------------------------------------------------- */
/* The next argument slot, cleared, of that kind; NULL once there are too many (remembered: the launch reports it). */
TR__FN tr__clarg *tr__cla_push(tr__clargs *A, int kind) {
    if (A->n < 0 || A->n >= TR__CLA_MAX) {
        A->n = TR__CLA_MAX + 1;
        return NULL;
    }
    memset(&A->a[A->n], 0, sizeof A->a[A->n]);
    A->a[A->n].kind = kind;
    return &A->a[A->n++];
}
TR__FN void tr__cla_init(tr__clargs *A) { A->n = 0; }
TR__FN void tr__cla_buf(tr__clargs *A, const void *devptr) {
    tr__clarg *x = tr__cla_push(A, TR__CLA_BUF);
    if (x) x->p = devptr;
}
TR__FN void tr__cla_i32(tr__clargs *A, int32_t v) {
    tr__clarg *x = tr__cla_push(A, TR__CLA_I32);
    if (x) x->i = v;
}
TR__FN void tr__cla_i64(tr__clargs *A, int64_t v) {
    tr__clarg *x = tr__cla_push(A, TR__CLA_I64);
    if (x) x->l = v;
}
TR__FN void tr__cla_f32(tr__clargs *A, float v) {
    tr__clarg *x = tr__cla_push(A, TR__CLA_F32);
    if (x) x->f = v;
}
TR__FN void tr__cla_local(tr__clargs *A, size_t bytes) {
    tr__clarg *x = tr__cla_push(A, TR__CLA_LOCAL);
    if (x) x->bytes = bytes;
}

/* The cached kernel `name`, created on first use; NULL with the error set. */
TR__FN tr__cl_kcache *tr__cl_kernel_get(tr__cl *cl, const char *name) {
    const tr__clfn *f = &cl->lib.f;
    tr__cl_kcache *e;
    tr__cl_int err = 0;
    int i;
    for (i = 0; i < cl->nkernels; i++)
        if (strcmp(cl->kernels[i].name, name) == 0) return &cl->kernels[i];
    if (strlen(name) >= sizeof cl->kernels[0].name) {
        tr__err(cl->ctx, TR_ERR_INVALID_ARG, "opencl: kernel name '%.40s...' is too long", name);
        return NULL;
    }
    if (cl->nkernels == cl->cap_kernels) {
        int cap = cl->cap_kernels ? 2 * cl->cap_kernels : 32;
        tr__cl_kcache *nk = (tr__cl_kcache *)tr__cl_table_alloc(cl->ctx, sizeof(tr__cl_kcache) * (size_t)cap);
        if (!nk) return NULL;
        if (cl->nkernels) memcpy(nk, cl->kernels, sizeof(tr__cl_kcache) * (size_t)cl->nkernels);
        tr__cl_table_free(cl->ctx, cl->kernels);
        cl->kernels = nk;
        cl->cap_kernels = cap;
    }
    e = &cl->kernels[cl->nkernels];
    memset(e, 0, sizeof *e);
    e->k = f->CreateKernel(strncmp(name, "tr_k_mma_", 9) ? cl->program : cl->mma_program, name, &err);
    if (!e->k || err != TR__CL_SUCCESS) {
        tr__cl_fail(cl, "clCreateKernel", name, err);
        return NULL;
    }
    if (f->GetKernelWorkGroupInfo(e->k, cl->device, TR__CL_KERNEL_WORK_GROUP_SIZE, sizeof e->wg, &e->wg, NULL) != TR__CL_SUCCESS || !e->wg)
        e->wg = cl->info.max_wg;
    snprintf(e->name, sizeof e->name, "%s", name);
    cl->nkernels++;
    return e;
}

TR__FN tr_status tr__cl_launch(tr__cl *cl, const char *name, int dims, const size_t *gsize, const size_t *lsize, const tr__clargs *A) {
    const tr__clfn *f;
    tr__cl_kcache *K;
    size_t g[3], l[3], limit, prod = 1;
    tr__cl_uint idx = 0;
    tr__cl_int err;
    tr_status st;
    int i, d;
    if (!cl || !name || !gsize || !A) return tr__err(cl ? cl->ctx : NULL, TR_ERR_INVALID_ARG, "tr__cl_launch: NULL argument");
    if ((st = tr__cl_check_live(cl, name)) != TR_OK) return st;
    if (dims < 1 || dims > 3) return tr__err(cl->ctx, TR_ERR_INVALID_ARG, "opencl: launch of %s with %d dimensions", name, dims);
    if (A->n < 0 || A->n > TR__CLA_MAX) return tr__err(cl->ctx, TR_ERR_INVALID_ARG, "opencl: launch of %s: more than %d arguments", name, TR__CLA_MAX);
    if (tr__cl_injected(cl)) return tr__cl_fail(cl, "clEnqueueNDRangeKernel", name, TR__CL_OUT_OF_RESOURCES);
    f = &cl->lib.f;
    if (!(K = tr__cl_kernel_get(cl, name))) return TR_ERR_DEVICE;
    for (i = 0; i < A->n; i++) {
        char what[128];
        const void *val;
        size_t sz;
        tr__cl_mem mem;
        tr__cl_ulong eoff = 0;
        err = TR__CL_SUCCESS;
        snprintf(what, sizeof what, "%s, argument %u", name, (unsigned)idx);
        switch (A->a[i].kind) {
        case TR__CLA_BUF:
            mem = cl->dummy;
            if (A->a[i].p) {
                size_t off = 0;
                if ((st = tr__cl_resolve(cl, A->a[i].p, 0, what, &mem, &off)) != TR_OK) return st;
                if (off & 3) return tr__err(cl->ctx, TR_ERR_INVALID_ARG, "opencl: %s: byte offset %zu is not a whole element", what, off);
                eoff = off / 4;
            }
            err = f->SetKernelArg(K->k, idx++, sizeof mem, &mem);
            if (err == TR__CL_SUCCESS) err = f->SetKernelArg(K->k, idx++, sizeof eoff, &eoff);
            break;
        case TR__CLA_I32: err = f->SetKernelArg(K->k, idx++, sizeof(int32_t), &A->a[i].i); break;
        case TR__CLA_I64: err = f->SetKernelArg(K->k, idx++, sizeof(int64_t), &A->a[i].l); break;
        case TR__CLA_F32: err = f->SetKernelArg(K->k, idx++, sizeof(float), &A->a[i].f); break;
        case TR__CLA_LOCAL:
            val = NULL;
            sz = A->a[i].bytes ? A->a[i].bytes : 4;
            err = f->SetKernelArg(K->k, idx++, sz, val);
            break;
        default: return tr__err(cl->ctx, TR_ERR_INVALID_ARG, "opencl: %s: bad argument kind %d", what, A->a[i].kind);
        }
        if (err != TR__CL_SUCCESS) return tr__cl_fail(cl, "clSetKernelArg", what, err);
    }
    for (d = 0; d < dims; d++) {
        g[d] = gsize[d];
        if (!g[d]) return TR_OK; /* nothing to do */
    }
    limit = TR__MIN(cl->info.max_wg, K->wg);
    if (lsize) {
        for (d = 0; d < dims; d++) {
            l[d] = lsize[d];
            if (!l[d] || l[d] > cl->info.max_item[d])
                return tr__err(cl->ctx, TR_ERR_DEVICE, "opencl: %s: local size %zu in dimension %d is outside 1..%zu on %s", name, l[d], d,
                               cl->info.max_item[d], cl->info.name);
            prod *= l[d];
        }
        if (prod > limit)
            return tr__err(cl->ctx, TR_ERR_DEVICE, "opencl: %s: work-group of %zu items exceeds the limit %zu on %s (device %zu, kernel %zu)", name,
                           prod, limit, cl->info.name, cl->info.max_wg, K->wg);
    } else { /* our pick: 256 / 16x16 / 16x4x4, shrunk to the limits and to small global sizes */
        static const size_t pick[3][3] = {{256, 1, 1}, {16, 16, 1}, {16, 4, 4}};
        for (d = 0; d < dims; d++) {
            l[d] = pick[dims - 1][d];
            while (l[d] > 1 && (l[d] / 2 >= g[d] || l[d] > cl->info.max_item[d])) l[d] /= 2;
        }
        for (;;) {
            prod = 1;
            for (d = 0; d < dims; d++) prod *= l[d];
            if (prod <= limit) break;
            for (d = dims - 1; d > 0 && l[d] == 1; d--) {}
            if (l[d] == 1) break;
            l[d] /= 2;
        }
    }
    for (d = 0; d < dims; d++) {
        if (g[d] > SIZE_MAX - l[d]) return tr__err(cl->ctx, TR_ERR_OVERFLOW, "opencl: %s: global size overflows", name);
        g[d] = (g[d] + l[d] - 1) / l[d] * l[d];
    }
    if (cl->profile) {
        double t0;
        f->Finish(cl->queue);
        t0 = tr__now();
        err = f->EnqueueNDRangeKernel(cl->queue, K->k, (tr__cl_uint)dims, NULL, g, l, 0, NULL, NULL);
        if (err == TR__CL_SUCCESS && (err = f->Finish(cl->queue)) != TR__CL_SUCCESS) /* names the kernel that failed */
            return tr__cl_fail(cl, "clFinish after the kernel", name, err);
        K->seconds += tr__now() - t0;
        K->calls++;
    } else
        err = f->EnqueueNDRangeKernel(cl->queue, K->k, (tr__cl_uint)dims, NULL, g, l, 0, NULL, NULL);
    return err == TR__CL_SUCCESS ? TR_OK : tr__cl_fail(cl, "clEnqueueNDRangeKernel", name, err);
}

/* --- fallback and teardown -------------------------------------------------------------------- */
TR__FN tr_status tr__cl_migrate_to_host(tr__cl *cl) {
    const tr__clfn *f;
    tr_status st = TR_OK;
    int i;
    if (!cl) return TR_ERR_INVALID_ARG;
    if (cl->migrated) return TR_OK;
    f = &cl->lib.f;
    f->Finish(cl->queue); /* an error here shows up again in the reads below */
    for (i = 0; i < cl->narenas; i++) {
        tr__cl_arena *a = &cl->arenas[i];
        if (!tr__cl_commit(a->base, a->reserved)) {
            /* The memory is not there: leave the reservation, report it; the pointer stays unusable. */
            st = tr__err(cl->ctx, TR_ERR_OUT_OF_MEMORY, "opencl: out of host memory moving a %.1f MiB device buffer to the CPU", (double)a->bytes / 1048576.0);
            continue;
        }
        if (a->keep && a->mem) {
            tr__cl_int err = f->EnqueueReadBuffer(cl->queue, a->mem, TR__CL_TRUE, 0, a->bytes, a->base, 0, NULL, NULL);
            if (err != TR__CL_SUCCESS) {
                memset(a->base, 0, a->bytes);
                if (st == TR_OK) st = tr__cl_fail(cl, "clEnqueueReadBuffer", "moving a device buffer to the CPU", err);
            }
        }
        if (a->mem) f->ReleaseMemObject(a->mem);
        a->mem = NULL;
    }
    tr__cl_stage_release(cl);
    cl->stage_state = -1;
    cl->migrated = 1;
    if (st == TR_OK) tr__log(cl->ctx, TR_LOG_INFO, "opencl: moved %d device buffers to the CPU", cl->narenas);
    return st;
}

TR__FN void tr__cl_destroy(tr__cl *cl) {
    const tr__clfn *f;
    int i;
    if (!cl) return;
    f = &cl->lib.f;
    if (cl->queue) f->Finish(cl->queue);
    if (cl->profile) { /* the kernels by total time, slowest first */
        double total = 0;
        int j;
        for (i = 0; i < cl->nkernels; i++) total += cl->kernels[i].seconds;
        for (i = 0; i < cl->nkernels; i++) {
            int best = -1;
            for (j = 0; j < cl->nkernels; j++)
                if (cl->kernels[j].calls >= 0 && (best < 0 || cl->kernels[j].seconds > cl->kernels[best].seconds)) best = j;
            if (best < 0 || cl->kernels[best].calls <= 0) break;
            tr__log(cl->ctx, TR_LOG_INFO, "opencl profile: %-40s %9.3f ms %5.1f%% %8ld calls", cl->kernels[best].name, 1e3 * cl->kernels[best].seconds,
                    total > 0 ? 100.0 * cl->kernels[best].seconds / total : 0.0, cl->kernels[best].calls);
            cl->kernels[best].calls = -1;
        }
        for (i = 0; i < 2; i++) /* the transfers (zero-copy or staged: TINYREC_CL_ZEROCOPY) */
            if (cl->xfer_calls[i])
                tr__log(cl->ctx, TR_LOG_INFO, "opencl profile: %-40s %9.3f ms %8ld calls %10.1f MiB (%s)", i ? "reads (device -> host)" : "writes (host -> device)",
                        1e3 * cl->xfer_seconds[i], cl->xfer_calls[i], cl->xfer_bytes[i] / 1048576.0, cl->zerocopy ? "zero-copy" : "staged");
    }
    tr__cl_stage_release(cl);
    for (i = 0; i < cl->nkernels; i++)
        if (cl->kernels[i].k) f->ReleaseKernel(cl->kernels[i].k);
    for (i = 0; i < cl->narenas; i++) tr__cl_arena_release(cl, &cl->arenas[i]);
    if (cl->dummy) f->ReleaseMemObject(cl->dummy);
    if (cl->program) f->ReleaseProgram(cl->program);
    if (cl->mma_program) f->ReleaseProgram(cl->mma_program);
    if (cl->queue) f->ReleaseCommandQueue(cl->queue);
    if (cl->context) f->ReleaseContext(cl->context);
    tr__cl_unload(&cl->lib);
    tr__cl_table_free(cl->ctx, cl->kernels);
    tr__cl_table_free(cl->ctx, cl->arenas);
    tr__cl_table_free(cl->ctx, cl);
}

/* >>opencl-ops: elementwise, normalisation, embedding, loss and optimizer kernels of the OpenCL backend, and their
   host wrappers tr__cl_*. Each wrapper has the meaning of its CPU twin (the tr__op_* of >>device), on device
   pointers (addresses inside arenas); kernel arguments follow the convention "buffer, then its ulong element offset".
   Design:
   - Elementwise kernels: one work-item per element, groups of 256, dimension 0 contiguous.
   - Row reductions (rms over rows, q head): one work-group per row, a power of two near D/4 work-items (32..256, capped
     by the device), a tree reduction in local memory. Column reductions (rms over S) and the token-order sums
     (position / q-weight gradients, sign-SGD groups) are one work-item per output walking the reduced axis in the CPU's
     order, so those match the CPU to the last bit apart from contraction into fma.
   - The norm sums and the cross-entropy use double where the device has cl_khr_fp64 (TR_FP64), as the CPU twins do;
     they are bandwidth-bound, so the fp64 rate does not matter (even at 1/64 rate one fma per 8 bytes read is far below
     the memory time). Without fp64 they use float: relative errors ~1e-6 at D = 512, still far inside the tests.
     Build option -DTR_K1_NO_FP64=1 forces the float path on an fp64 device (to test it).
   - No atomics: every sum has a fixed order given the device's work-group size, so results are deterministic. */

/* The kernels, from tools/opencl/ops.cl (edit that file; `make` rewrites this block). */
/* >>cl-embed tools/opencl/ops.cl */
static const char tr__cl_src_ops_1[] =
"#line 1 \"tools/opencl/ops.cl\"\n"
"#if defined(TR_FP64) && !defined(TR_K1_NO_FP64)\n"
"#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"
"typedef double tr_k1_acc;\n"
"#define TR_K1_TINY 1e-30\n"
"#else\n"
"typedef float tr_k1_acc;\n"
"#define TR_K1_TINY 1e-30f\n"
"#endif\n"
"#define TR_K1_WG 256\n"
"__kernel void tr_k_add(ulong n, __global const float *a, ulong a_off, __global const float *b, ulong b_off, __global float *y, ulong y_off) {\n"
"    size_t i = get_global_id(0);\n"
"    if (i >= n) return;\n"
"    a += a_off; b += b_off; y += y_off;\n"
"    y[i] = a[i] + b[i];\n"
"}\n"
"__kernel void tr_k_adam_atan2(ulong n, __global float *p, ulong p_off, __global const float *g, ulong g_off, __global float *m, ulong m_off,\n"
"                              __global float *v, ulong v_off, float decay, float step, float sbc2, float c1, float c2) {\n"
"    size_t i = get_global_id(0);\n"
"    float gi, pi, mi, vi;\n"
"    if (i >= n) return;\n"
"    p += p_off; g += g_off; m += m_off; v += v_off;\n"
"    gi = g[i];\n"
"    pi = p[i] * decay;\n"
"    mi = m[i] + c1 * (gi - m[i]);\n"
"    vi = v[i] + c2 * (gi * gi - v[i]);\n"
"    m[i] = mi;\n"
"    v[i] = vi;\n"
"    p[i] = pi - step * atan2(mi, sqrt(vi) / sbc2);\n"
"}\n"
"__kernel void tr_k_ema(ulong n, __global float *sh, ulong sh_off, __global const float *p, ulong p_off, float omd, float decay) {\n"
"    size_t i = get_global_id(0);\n"
"    if (i >= n) return;\n"
"    sh += sh_off; p += p_off;\n"
"    sh[i] = omd * p[i] + decay * sh[i];\n"
"}\n"
"/* x[0..n) rounded in place to bfloat16 (fdt 1) or float16 (fdt 2) values, to nearest even, as the host's\n"
"   tr__round_ref: NaN stays NaN (quiet), beyond the range is infinite. Integer arithmetic, so no device\n"
"   extension is needed. */\n"
"float tr_round1(float v, int fdt) {\n"
"    uint u = as_uint(v), a = u & 0x7fffffffu, r;\n"
"    if (fdt != 1 && fdt != 2) return v;\n"
"    if (a > 0x7f800000u) r = (u | 0x00400000u) & (fdt == 1 ? 0xffff0000u : 0xffffe000u);\n"
"    else if (fdt == 1) r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;\n"
"    else if (a >= 0x477ff000u) r = (u & 0x80000000u) | 0x7f800000u; /* >= 65520 rounds past 65504 */\n"
"    else if (a >= 0x38800000u) r = (u + 0xfffu + ((u >> 13) & 1u)) & 0xffffe000u; /* normal: 10 mantissa bits */\n"
"    else r = (u & 0x80000000u) | as_uint(rint(as_float(a) * 16777216.0f) * 5.9604644775390625e-8f); /* subnormal: steps of 2^-24 */\n"
"    return as_float(r);\n"
"}\n"
"/* The 16-bit tape (the host's tr__half_ref): unpack 0 stores x[i] rounded to bfloat16 (fdt 1) or float16 (fdt 2) as\n"
"   its 16 bits in h, unpack 1 loads it back. Integer arithmetic (no cl_khr_fp16 needed); h_off counts floats. */\n"
"__kernel void tr_k_half(ulong n, __global float *x, ulong x_off, __global ushort *h, ulong h_off, int fdt, int unpack) {\n"
"    size_t i = get_global_id(0);\n"
"    uint u, a, s;\n"
"    if (i >= n) return;\n"
"    x += x_off; h += 2 * h_off;\n"
"    if (fdt == 1) {\n"
"        if (unpack) x[i] = as_float((uint)h[i] << 16);\n"
"        else h[i] = (ushort)(as_uint(tr_round1(x[i], 1)) >> 16);\n"
"        return;\n"
"    }\n"
"    if (unpack) {\n"
"        u = h[i]; a = u & 0x7fffu; s = (u & 0x8000u) << 16;\n"
"        if (a >= 0x7c00u) x[i] = as_float(s | 0x7f800000u | ((a & 0x3ffu) << 13));\n"
"        else if (a >= 0x400u) x[i] = as_float(s | ((a << 13) + 0x38000000u));\n"
"        else x[i] = as_float(s | as_uint((float)a * 5.9604644775390625e-8f)); /* subnormal: a steps of 2^-24 */\n"
"        return;\n"
"    }\n"
"    u = as_uint(tr_round1(x[i], 2)); a = u & 0x7fffffffu; s = (u >> 16) & 0x8000u;\n"
"    if (a >= 0x7f800000u) h[i] = (ushort)(s | 0x7c00u | (a > 0x7f800000u ? 0x200u | ((a >> 13) & 0x3ffu) : 0u));\n"
"    else if (a >= 0x38800000u) h[i] = (ushort)(s | ((a - 0x38000000u) >> 13));\n"
"    else h[i] = (ushort)(s | (uint)(as_float(a) * 16777216.0f)); /* exact: a multiple of 2^-24 below 2^-14 */\n"
"}\n"
"__kernel void tr_k_scale(ulong n, __global float *x, ulong x_off, float a) {\n"
"    size_t i = get_global_id(0);\n"
"    if (i < n) x[x_off + i] *= a;\n"
"}\n"
"__kernel void tr_k_round(ulong n, __global float *x, ulong x_off, int fdt) {\n"
"    size_t i = get_global_id(0);\n"
"    if (i < n) x[x_off + i] = tr_round1(x[x_off + i], fdt);\n"
"}\n";
static const char tr__cl_src_ops_2[] =
"/* flag[0] = 1 when any of x[0..n) is NaN or infinite; a grid-stride loop, and every writer writes 1. */\n"
"__kernel void tr_k_nonfinite(ulong n, __global const float *x, ulong x_off, __global int *flag, ulong f_off) {\n"
"    size_t i = get_global_id(0), step = get_global_size(0);\n"
"    int bad = 0;\n"
"    x += x_off;\n"
"    for (; i < n; i += step) bad |= !isfinite(x[i]);\n"
"    if (bad) flag[f_off] = 1;\n"
"}\n"
"/* fdt (bfloat16 1, float16 2): silu and the product each rounded, as the host's tr__swiglu_fwd_range */\n"
"__kernel void tr_k_swiglu_fwd(long rows, long width, __global const float *g, ulong g_off, ulong gs, __global float *o, ulong o_off, ulong os, int fdt) {\n"
"    long j = get_global_id(0), r = get_global_id(1);\n"
"    float x;\n"
"    if (j >= width || r >= rows) return;\n"
"    g += g_off + (size_t)r * gs; o += o_off + (size_t)r * os;\n"
"    x = g[j];\n"
"    o[j] = fdt ? tr_round1(tr_round1(x / (1.0f + exp(-x)), fdt) * g[j + width], fdt) : x / (1.0f + exp(-x)) * g[j + width];\n"
"}\n"
"__kernel void tr_k_swiglu_bwd(long rows, long width, __global const float *g, ulong g_off, ulong gs, __global const float *da, ulong da_off, ulong das,\n"
"                              __global float *dg, ulong dg_off) {\n"
"    long j = get_global_id(0), r = get_global_id(1);\n"
"    float x, up, d, sg;\n"
"    if (j >= width || r >= rows) return;\n"
"    g += g_off + (size_t)r * gs; da += da_off + (size_t)r * das; dg += dg_off + (size_t)r * gs;\n"
"    x = g[j]; up = g[j + width]; d = da[j];\n"
"    sg = 1.0f / (1.0f + exp(-x));\n"
"    dg[j] = d * up * (sg * (1.0f + x * (1.0f - sg)));\n"
"    dg[j + width] = d * (x * sg);\n"
"}\n"
"__kernel void tr_k_rope(long rows, int S, int H, int hd, __global float *qkv, ulong qkv_off, __global const float *cs, ulong cs_off,\n"
"                        __global const float *sn, ulong sn_off, float sgn) {\n"
"    int hf = hd / 2, i = get_global_id(0), j, h, qk, pos;\n"
"    long r = get_global_id(1);\n"
"    float x1, x2;\n"
"    __global float *v;\n"
"    if (i >= 2 * H * hf || r >= rows) return;\n"
"    j = i % hf; h = (i / hf) % H; qk = i / (hf * H);\n"
"    pos = (int)(r % S);\n"
"    cs += cs_off + (size_t)pos * hd; sn += sn_off + (size_t)pos * hd;\n"
"    v = qkv + qkv_off + (size_t)r * 3 * H * hd + (size_t)qk * H * hd + (size_t)h * hd;\n"
"    x1 = v[j]; x2 = v[j + hf];\n"
"    v[j] = x1 * cs[j] - sgn * x2 * sn[j];\n"
"    v[j + hf] = x2 * cs[j + hf] + sgn * x1 * sn[j + hf];\n"
"}\n"
"__kernel void tr_k_refill(int B, int S, int D, __global const int *halted, ulong halted_off, __global const float *hi, ulong hi_off,\n"
"                          __global const float *li, ulong li_off, __global float *zh, ulong zh_off, __global float *zl, ulong zl_off) {\n"
"    int i = get_global_id(0), b = get_global_id(1);\n"
"    size_t o;\n"
"    if (i >= S * D || b >= B) return;\n"
"    halted += halted_off;\n"
"    if (!halted[b]) return;\n"
"    o = (size_t)b * S * D + i;\n"
"    zh[zh_off + o] = hi[hi_off + i % D];\n"
"    zl[zl_off + o] = li[li_off + i % D];\n"
"}\n"
"/* fdt (bfloat16 1, float16 2): wt and wp come rounded; the puzzle row and each step are rounded, as the host's */\n"
"__kernel void tr_k_embed_fwd(int B, int S, int L, int Lp, int D, int Dp, float scale, int has_pos, int fdt, __global const float *wt, ulong wt_off,\n"
"                             __global const float *wp, ulong wp_off, __global const float *pe, ulong pe_off, __global const int *in, ulong in_off,\n"
"                             __global const int *pid, ulong pid_off, __global float *x, ulong x_off) {\n"
"    int j = get_global_id(0), bs = get_global_id(1), b = bs / S, s = bs % S, k;\n"
"    float v;\n"
"    if (j >= D || b >= B) return;\n"
"    if (s < Lp) {\n"
"        k = s * D + j;\n"
"        v = tr_round1(k < Dp ? pe[pe_off + (size_t)pid[pid_off + b] * Dp + k] : 0.0f, fdt);\n"
"    } else\n"
"        v = wt[wt_off + (size_t)in[in_off + (size_t)b * L + s - Lp] * D + j];\n"
"    if (has_pos) v = tr_round1(0.707106781f * tr_round1(v + wp[wp_off + (size_t)s * D + j], fdt), fdt);\n"
"    x[x_off + (size_t)bs * D + j] = tr_round1(v * scale, fdt);\n"
"}\n"
"tr_k1_acc tr_k1_wg_sum(__local tr_k1_acc *sh, tr_k1_acc v) {\n"
"    int lid = get_local_id(0), s;\n"
"    tr_k1_acc t;\n";
static const char tr__cl_src_ops_3[] =
"    sh[lid] = v;\n"
"    barrier(CLK_LOCAL_MEM_FENCE);\n"
"    for (s = get_local_size(0) / 2; s > 0; s >>= 1) {\n"
"        if (lid < s) sh[lid] += sh[lid + s];\n"
"        barrier(CLK_LOCAL_MEM_FENCE);\n"
"    }\n"
"    t = sh[0];\n"
"    barrier(CLK_LOCAL_MEM_FENCE);\n"
"    return t;\n"
"}\n"
"__kernel void tr_k_rms_rows_fwd(int D, float eps, int has_add, __global const float *x, ulong x_off, __global const float *ad, ulong ad_off,\n"
"                                __global float *o, ulong o_off, __global float *rstd, ulong rstd_off) {\n"
"    __local tr_k1_acc sh[TR_K1_WG];\n"
"    size_t r = get_group_id(0);\n"
"    int j, lid = get_local_id(0), n = get_local_size(0);\n"
"    tr_k1_acc ss = 0;\n"
"    float inv;\n"
"    x += x_off + r * D; ad += ad_off + r * D; o += o_off + r * D;\n"
"    for (j = lid; j < D; j += n) {\n"
"        float v = has_add ? x[j] + ad[j] : x[j];\n"
"        o[j] = v;\n"
"        ss += (tr_k1_acc)v * v;\n"
"    }\n"
"    ss = tr_k1_wg_sum(sh, ss);\n"
"    inv = (float)((tr_k1_acc)1 / sqrt(ss / D + eps));\n"
"    if (lid == 0) rstd[rstd_off + r] = inv;\n"
"    for (j = lid; j < D; j += n) o[j] *= inv;\n"
"}\n"
"__kernel void tr_k_rms_rows_bwd(int D, __global const float *dy, ulong dy_off, __global const float *y, ulong y_off, __global const float *rstd,\n"
"                                ulong rstd_off, __global float *dx, ulong dx_off) {\n"
"    __local tr_k1_acc sh[TR_K1_WG];\n"
"    size_t r = get_group_id(0);\n"
"    int j, lid = get_local_id(0), n = get_local_size(0);\n"
"    tr_k1_acc dot = 0;\n"
"    float mean, rs = rstd[rstd_off + r];\n"
"    dy += dy_off + r * D; y += y_off + r * D; dx += dx_off + r * D;\n"
"    for (j = lid; j < D; j += n) dot += (tr_k1_acc)dy[j] * y[j];\n"
"    dot = tr_k1_wg_sum(sh, dot);\n"
"    mean = (float)(dot / D);\n"
"    for (j = lid; j < D; j += n) dx[j] = rs * (dy[j] - y[j] * mean);\n"
"}\n"
"__kernel void tr_k_rms_cols_fwd(int B, int S, int D, float eps, int has_add, __global const float *x, ulong x_off, __global const float *ad, ulong ad_off,\n"
"                                __global float *o, ulong o_off, __global float *rstd, ulong rstd_off) {\n"
"    int j = get_global_id(0), b = get_global_id(1), s;\n"
"    size_t base = (size_t)b * S * D + j;\n"
"    tr_k1_acc ss = 0;\n"
"    float inv;\n"
"    if (j >= D || b >= B) return;\n"
"    x += x_off + base; ad += ad_off + base; o += o_off + base;\n"
"    for (s = 0; s < S; s++) {\n"
"        float v = has_add ? x[(size_t)s * D] + ad[(size_t)s * D] : x[(size_t)s * D];\n"
"        o[(size_t)s * D] = v;\n"
"        ss += (tr_k1_acc)v * v;\n"
"    }\n"
"    inv = (float)((tr_k1_acc)1 / sqrt(ss / S + eps));\n"
"    rstd[rstd_off + (size_t)b * D + j] = inv;\n"
"    for (s = 0; s < S; s++) o[(size_t)s * D] *= inv;\n"
"}\n"
"__kernel void tr_k_rms_cols_bwd(int B, int S, int D, __global const float *dy, ulong dy_off, __global const float *y, ulong y_off,\n"
"                                __global const float *rstd, ulong rstd_off, __global float *dx, ulong dx_off) {\n"
"    int j = get_global_id(0), b = get_global_id(1), s;\n"
"    size_t base = (size_t)b * S * D + j;\n"
"    tr_k1_acc dot = 0;\n"
"    float mean, rs;\n"
"    if (j >= D || b >= B) return;\n"
"    dy += dy_off + base; y += y_off + base; dx += dx_off + base;\n"
"    rs = rstd[rstd_off + (size_t)b * D + j];\n"
"    for (s = 0; s < S; s++) dot += (tr_k1_acc)dy[(size_t)s * D] * y[(size_t)s * D];\n"
"    mean = (float)(dot / S);\n"
"    for (s = 0; s < S; s++) dx[(size_t)s * D] = rs * (dy[(size_t)s * D] - y[(size_t)s * D] * mean);\n"
"}\n"
"__kernel void tr_k_qhead_fwd(int S, int D, __global const float *zh, ulong zh_off, __global const float *wq, ulong wq_off,\n"
"                             __global const float *bq, ulong bq_off, __global float *q, ulong q_off) {\n"
"    __local tr_k1_acc sh[TR_K1_WG];\n"
"    int g = get_group_id(0), b = g / 2, jj = g % 2, k, lid = get_local_id(0), n = get_local_size(0);\n"
"    tr_k1_acc acc = 0;\n"
"    zh += zh_off + (size_t)b * S * D; wq += wq_off + (size_t)jj * D;\n"
"    for (k = lid; k < D; k += n) acc += (tr_k1_acc)zh[k] * wq[k];\n"
"    acc = tr_k1_wg_sum(sh, acc);\n"
"    if (lid == 0) q[q_off + g] = bq[bq_off + jj] + (float)acc;\n"
"}\n";
static const char tr__cl_src_ops_4[] =
"#define TR_K1_SS(xv) ((xv) >= 0 ? (xv) + (tr_k1_acc)1 : (tr_k1_acc)1 / ((tr_k1_acc)1 - (xv) + TR_K1_TINY))\n"
"__kernel void tr_k_xent_count(int B, int L, __global const int *lab, ulong lab_off, __global float *rs, ulong rs_off) {\n"
"    int b = get_global_id(0), t, c = 0;\n"
"    if (b >= B) return;\n"
"    lab += lab_off + (size_t)b * L;\n"
"    for (t = 0; t < L; t++) c += lab[t] != -100;\n"
"    rs[rs_off + 4 * (size_t)b + 1] = (float)c;\n"
"}\n"
"__kernel void tr_k_xent_rows(long rows, int L, int V, int type, int tpr, float grad_div, int want_grad, __global const float *x, ulong x_off,\n"
"                             __global const int *lab, ulong lab_off, __global const float *rs, ulong rs_off, __global float *dl, ulong dl_off,\n"
"                             __global float *ts, ulong ts_off) {\n"
"    __local float shv[TR_K1_WG];\n"
"    __local int shi[TR_K1_WG];\n"
"    __local tr_k1_acc shs[TR_K1_WG];\n"
"    int lid = get_local_id(0), lane = lid % tpr, k, s, label = -100, am = 0, act;\n"
"    long row = (long)get_group_id(0) * (get_local_size(0) / tpr) + lid / tpr;\n"
"    float mx = -INFINITY, xl = 0;\n"
"    tr_k1_acc sum = 0, lp = 0, gs = 0, div = 1;\n"
"    act = row < rows;\n"
"    if (act) {\n"
"        label = lab[lab_off + row];\n"
"        x += x_off + (size_t)row * V;\n"
"        dl += dl_off + (size_t)row * V;\n"
"        div = max(rs[rs_off + 4 * (size_t)(row / L) + 1], 1.0f);\n"
"    }\n"
"    if (act && label != -100) {\n"
"        am = V;\n"
"        for (k = lane; k < V; k += tpr)\n"
"            if (am == V || x[k] > mx) mx = x[k], am = k;\n"
"    }\n"
"    shv[lid] = mx; shi[lid] = am;\n"
"    barrier(CLK_LOCAL_MEM_FENCE);\n"
"    for (s = tpr / 2; s > 0; s >>= 1) {\n"
"        if (lane < s) {\n"
"            float v2 = shv[lid + s];\n"
"            int i2 = shi[lid + s];\n"
"            if (i2 < V && (shi[lid] >= V || v2 > shv[lid] || (v2 == shv[lid] && i2 < shi[lid]))) shv[lid] = v2, shi[lid] = i2;\n"
"        }\n"
"        barrier(CLK_LOCAL_MEM_FENCE);\n"
"    }\n"
"    mx = shv[lid - lane]; am = shi[lid - lane];\n"
"    if (act && label != -100) {\n"
"        if (label >= 0 && label < V) xl = x[label];\n"
"        for (k = lane; k < V; k += tpr) {\n"
"            tr_k1_acc xv = x[k];\n"
"            sum += type == 0 ? TR_K1_SS(xv) : exp(xv - (tr_k1_acc)mx);\n"
"        }\n"
"    }\n"
"    shs[lid] = sum;\n"
"    barrier(CLK_LOCAL_MEM_FENCE);\n"
"    for (s = tpr / 2; s > 0; s >>= 1) {\n"
"        if (lane < s) shs[lid] += shs[lid + s];\n"
"        barrier(CLK_LOCAL_MEM_FENCE);\n"
"    }\n"
"    sum = shs[lid - lane];\n"
"    if (!act) return;\n"
"    if (label == -100) {\n"
"        if (want_grad)\n"
"            for (k = lane; k < V; k += tpr) dl[k] = 0.0f;\n"
"        if (lane == 0) ts[ts_off + 3 * (size_t)row] = ts[ts_off + 3 * (size_t)row + 1] = ts[ts_off + 3 * (size_t)row + 2] = 0.0f;\n"
"        return;\n"
"    }\n"
"    if (type == 0) lp = log(TR_K1_SS((tr_k1_acc)xl) / sum);\n"
"    else lp = (tr_k1_acc)xl - mx - log(sum);\n"
"    gs = (tr_k1_acc)1 / (div * (tr_k1_acc)grad_div);\n"
"    if (want_grad)\n"
"        for (k = lane; k < V; k += tpr) {\n"
"            tr_k1_acc xv = x[k], gk;\n"
"            if (type == 0) {\n"
"                tr_k1_acc sv = TR_K1_SS(xv), ds = xv >= 0 ? (tr_k1_acc)1 : sv * sv;\n"
"                gk = ds / sum - (k == label ? ds / sv : (tr_k1_acc)0);\n"
"            } else\n"
"                gk = exp(xv - (tr_k1_acc)mx) / sum - (k == label ? (tr_k1_acc)1 : (tr_k1_acc)0);\n"
"            dl[k] = (float)(gk * gs);\n"
"        }\n"
"    if (lane == 0) {\n"
"        float hi = (float)(-lp);\n"
"        ts[ts_off + 3 * (size_t)row] = hi;\n"
"        ts[ts_off + 3 * (size_t)row + 1] = (float)(-lp - hi);\n"
"        ts[ts_off + 3 * (size_t)row + 2] = am == label ? 1.0f : 0.0f;\n"
"    }\n"
"}\n"
"__kernel void tr_k_xent_reduce(int B, int L, __global const float *ts, ulong ts_off, __global float *rs, ulong rs_off) {\n"
"    int b = get_global_id(0), t;\n"
"    tr_k1_acc loss = 0, div;\n"
"    float c = 0;\n"
"    if (b >= B) return;\n"
"    ts += ts_off + 3 * (size_t)b * L; rs += rs_off + 4 * (size_t)b;\n"
"    for (t = 0; t < L; t++) {\n"
"        loss += (tr_k1_acc)ts[3 * t] + (tr_k1_acc)ts[3 * t + 1];\n"
"        c += ts[3 * t + 2];\n"
"    }\n"
"    div = max(rs[1], 1.0f);\n"
"    rs[0] = (float)(loss / div);\n";
static const char tr__cl_src_ops_5[] =
"    rs[2] = c;\n"
"    rs[3] = 0.0f;\n"
"}\n"
"__kernel void tr_k_embed_bwd_pos(int B, int S, int D, float f, __global const float *dx, ulong dx_off, __global float *gp, ulong gp_off) {\n"
"    size_t i = get_global_id(0), n = (size_t)S * D;\n"
"    int b;\n"
"    float acc;\n"
"    if (i >= n) return;\n"
"    dx += dx_off + i; gp += gp_off + i;\n"
"    acc = *gp;\n"
"    for (b = 0; b < B; b++) acc += f * dx[(size_t)b * n];\n"
"    *gp = acc;\n"
"}\n"
"__kernel void tr_k_embed_bwd_prow(int B, int S, int D, int Dp, int Lp, float f, __global const float *dx, ulong dx_off, __global float *pr, ulong pr_off) {\n"
"    int k = get_global_id(0), b = get_global_id(1), s = k / D;\n"
"    if (k >= Dp || b >= B || s >= Lp || s >= S) return;\n"
"    pr[pr_off + (size_t)b * Dp + k] = f * dx[dx_off + ((size_t)b * S + s) * D + k % D];\n"
"}\n"
"__kernel void tr_k_embed_bwd_tok(int B, int S, int L, int Lp, int D, int V, int nchunk, float f, __global const float *dx, ulong dx_off,\n"
"                                 __global const int *in, ulong in_off, __global float *out, ulong out_off) {\n"
"    __local int tile[TR_K1_WG];\n"
"    int j = get_global_id(0), v = get_global_id(1), c = get_global_id(2), lid = get_local_id(0), n = get_local_size(0), u, m;\n"
"    long T = (long)B * L, t0 = T * c / nchunk, t1 = T * (c + 1) / nchunk, t;\n"
"    float acc = 0;\n"
"    __global float *dst = out + out_off + ((size_t)c * V + v) * D + j;\n"
"    if (nchunk == 1 && j < D) acc = *dst;\n"
"    dx += dx_off + j; in += in_off;\n"
"    for (t = t0; t < t1; t += n) {\n"
"        m = (int)min((long)n, t1 - t);\n"
"        barrier(CLK_LOCAL_MEM_FENCE);\n"
"        if (lid < m) tile[lid] = in[t + lid];\n"
"        barrier(CLK_LOCAL_MEM_FENCE);\n"
"        if (j < D)\n"
"            for (u = 0; u < m; u++)\n"
"                if (tile[u] == v) {\n"
"                    long tt = t + u;\n"
"                    acc += f * dx[((size_t)(tt / L) * S + Lp + tt % L) * D];\n"
"                }\n"
"    }\n"
"    if (j < D) *dst = acc;\n"
"}\n"
"__kernel void tr_k_embed_bwd_tok_sum(int V, int D, int nchunk, __global const float *part, ulong part_off, __global float *gt, ulong gt_off) {\n"
"    size_t i = get_global_id(0), n = (size_t)V * D;\n"
"    int c;\n"
"    float acc;\n"
"    if (i >= n) return;\n"
"    part += part_off + i; gt += gt_off + i;\n"
"    acc = *gt;\n"
"    for (c = 0; c < nchunk; c++) acc += part[c * n];\n"
"    *gt = acc;\n"
"}\n"
"__kernel void tr_k_qhead_bwd_dz(int B, int S, int D, __global const float *dq, ulong dq_off, __global const float *wq, ulong wq_off, __global float *dz, ulong dz_off) {\n"
"    int k = get_global_id(0), b = get_global_id(1);\n"
"    float g0, g1, v;\n"
"    if (k >= D || b >= B) return;\n"
"    dq += dq_off + 2 * (size_t)b; wq += wq_off; dz += dz_off + (size_t)b * S * D + k;\n"
"    g0 = dq[0]; g1 = dq[1]; v = *dz;\n"
"    if (g0 != 0.0f) v += g0 * wq[k];\n"
"    if (g1 != 0.0f) v += g1 * wq[D + k];\n"
"    *dz = v;\n"
"}\n"
"__kernel void tr_k_qhead_bwd_w(int B, int S, int D, __global const float *dq, ulong dq_off, __global const float *zh, ulong zh_off,\n"
"                               __global float *gw, ulong gw_off, __global float *gb, ulong gb_off) {\n"
"    int k = get_global_id(0), jj = get_global_id(1), b;\n"
"    float acc;\n"
"    if (k > D || jj >= 2) return;\n"
"    dq += dq_off + jj; zh += zh_off + k;\n"
"    if (k == D) {\n"
"        acc = gb[gb_off + jj];\n"
"        for (b = 0; b < B; b++)\n"
"            if (dq[2 * b] != 0.0f) acc += dq[2 * b];\n"
"        gb[gb_off + jj] = acc;\n"
"        return;\n"
"    }\n"
"    gw += gw_off + (size_t)jj * D + k;\n"
"    acc = *gw;\n"
"    for (b = 0; b < B; b++) {\n"
"        float g = dq[2 * b];\n"
"        if (g != 0.0f) acc += g * zh[(size_t)b * S * D];\n"
"    }\n"
"    *gw = acc;\n"
"}\n"
"__kernel void tr_k_signsgd(int Dp, int ng, float decay, float lr, __global float *tab, ulong tab_off, __global const int *gid, ulong gid_off,\n"
"                           __global const int *gst, ulong gst_off, __global const int *ord, ulong ord_off, __global const float *pr, ulong pr_off) {\n"
"    int k = get_global_id(0), g = get_global_id(1), j, j1;\n"
"    float sum = 0, sg;\n"
"    __global float *row;\n"
"    if (k >= Dp || g >= ng) return;\n"
"    gst += gst_off; ord += ord_off; pr += pr_off + k;\n";
static const char tr__cl_src_ops_6[] =
"    j1 = gst[g + 1];\n"
"    for (j = gst[g]; j < j1; j++) sum += pr[(size_t)ord[j] * Dp];\n"
"    sg = (float)((sum > 0) - (sum < 0));\n"
"    row = tab + tab_off + (size_t)gid[gid_off + g] * Dp + k;\n"
"    *row = *row * decay - lr * sg;\n"
"}\n";
#define TR__CL_SRC_OPS_LIST \
    tr__cl_src_ops_1, tr__cl_src_ops_2, tr__cl_src_ops_3, tr__cl_src_ops_4, tr__cl_src_ops_5, tr__cl_src_ops_6
/* >>cl-embed-end */


/* Host wrappers. Each launches its kernels on the in-order queue and returns the launch status; none blocks. */

/* Largest power of two <= want that the device accepts as a work-group size in dimension 0 (the kernels' __local arrays
   hold TR_K1_WG = 256 entries, so want <= 256). */
TR__FN size_t tr__cl_k1_wg(tr__cl *cl, size_t want) {
    const tr__cl_info *in = tr__cl_get_info(cl);
    size_t cap = in && in->max_wg ? in->max_wg : 1, w = 1;
    if (in && in->max_item[0] && in->max_item[0] < cap) cap = in->max_item[0];
    while (w * 2 <= want && w * 2 <= cap && w * 2 <= 256) w *= 2;
    return w;
}

TR__FN size_t tr__cl_k1_pow2ceil(size_t n) {
    size_t w = 1;
    while (w < n) w *= 2;
    return w;
}

TR__FN size_t tr__cl_k1_round(size_t n, size_t m) { return (n + m - 1) / m * m; }

/* 1-D launch of n work-items in groups of 256 (or the device maximum). */
TR__FN tr_status tr__cl_k1_launch1(tr__cl *cl, const char *name, size_t n, const tr__clargs *A) {
    size_t l = tr__cl_k1_wg(cl, 256), g = tr__cl_k1_round(n, l);
    return tr__cl_launch(cl, name, 1, &g, &l, A);
}

/* 2-D launch over (n0, n1): a group is (l0, l1) with l0 the smallest power of two covering n0 (at most 256) and
   l0 * l1 = 256, so narrow rows still fill a group; dimension 0 is the contiguous one. */
TR__FN tr_status tr__cl_k1_launch2(tr__cl *cl, const char *name, size_t n0, size_t n1, const tr__clargs *A) {
    const tr__cl_info *in = tr__cl_get_info(cl);
    size_t wg = tr__cl_k1_wg(cl, 256), l[2], g[2];
    l[0] = TR__MIN(tr__cl_k1_pow2ceil(n0), wg);
    l[1] = wg / l[0];
    while (l[1] > 1 && (l[1] > n1 || (in && in->max_item[1] && l[1] > in->max_item[1]))) l[1] /= 2;
    g[0] = tr__cl_k1_round(n0, l[0]);
    g[1] = tr__cl_k1_round(n1, l[1]);
    return tr__cl_launch(cl, name, 2, g, l, A);
}

/* One work-group per row of D: a power of two near D / 4 work-items (32..256), so each strides over ~4 elements. */
TR__FN tr_status tr__cl_k1_launch_rows(tr__cl *cl, const char *name, size_t rows, size_t D, const tr__clargs *A) {
    size_t l = tr__cl_k1_wg(cl, TR__MAX((size_t)32, TR__MIN((size_t)256, tr__cl_k1_pow2ceil((D + 3) / 4)))), g = rows * l;
    return tr__cl_launch(cl, name, 1, &g, &l, A);
}

TR__FN tr_status tr__cl_add(tr__cl *cl, size_t n, const float *a, const float *b, float *y) {
    tr__clargs A;
    if (n == 0) return TR_OK;
    tr__cla_init(&A);
    tr__cla_i64(&A, (int64_t)n);
    tr__cla_buf(&A, a);
    tr__cla_buf(&A, b);
    tr__cla_buf(&A, y);
    return tr__cl_k1_launch1(cl, "tr_k_add", n, &A);
}

TR__FN tr_status tr__cl_rms_rows_fwd(tr__cl *cl, long rows, int D, const float *x, const float *add, float *out, float *rstd, float eps) {
    tr__clargs A;
    if (rows <= 0 || D <= 0) return TR_OK;
    tr__cla_init(&A);
    tr__cla_i32(&A, D);
    tr__cla_f32(&A, eps);
    tr__cla_i32(&A, add != NULL);
    tr__cla_buf(&A, x);
    tr__cla_buf(&A, add);
    tr__cla_buf(&A, out);
    tr__cla_buf(&A, rstd);
    return tr__cl_k1_launch_rows(cl, "tr_k_rms_rows_fwd", (size_t)rows, (size_t)D, &A);
}

TR__FN tr_status tr__cl_rms_rows_bwd(tr__cl *cl, long rows, int D, const float *dy, const float *y, const float *rstd, float *dx) {
    tr__clargs A;
    if (rows <= 0 || D <= 0) return TR_OK;
    tr__cla_init(&A);
    tr__cla_i32(&A, D);
    tr__cla_buf(&A, dy);
    tr__cla_buf(&A, y);
    tr__cla_buf(&A, rstd);
    tr__cla_buf(&A, dx);
    return tr__cl_k1_launch_rows(cl, "tr_k_rms_rows_bwd", (size_t)rows, (size_t)D, &A);
}

/* Column norms: one work-item per (b, channel) walks S; dimension 0 runs over channels so each step of the walk reads
   a contiguous run of the row. */
TR__FN tr_status tr__cl_rms_cols_fwd(tr__cl *cl, int B, int S, int D, const float *x, const float *add, float *out, float *rstd, float eps) {
    tr__clargs A;
    if (B <= 0 || S <= 0 || D <= 0) return TR_OK;
    tr__cla_init(&A);
    tr__cla_i32(&A, B);
    tr__cla_i32(&A, S);
    tr__cla_i32(&A, D);
    tr__cla_f32(&A, eps);
    tr__cla_i32(&A, add != NULL);
    tr__cla_buf(&A, x);
    tr__cla_buf(&A, add);
    tr__cla_buf(&A, out);
    tr__cla_buf(&A, rstd);
    return tr__cl_k1_launch2(cl, "tr_k_rms_cols_fwd", (size_t)D, (size_t)B, &A);
}

TR__FN tr_status tr__cl_rms_cols_bwd(tr__cl *cl, int B, int S, int D, const float *dy, const float *y, const float *rstd, float *dx) {
    tr__clargs A;
    if (B <= 0 || S <= 0 || D <= 0) return TR_OK;
    tr__cla_init(&A);
    tr__cla_i32(&A, B);
    tr__cla_i32(&A, S);
    tr__cla_i32(&A, D);
    tr__cla_buf(&A, dy);
    tr__cla_buf(&A, y);
    tr__cla_buf(&A, rstd);
    tr__cla_buf(&A, dx);
    return tr__cl_k1_launch2(cl, "tr_k_rms_cols_bwd", (size_t)D, (size_t)B, &A);
}

TR__FN tr_status tr__cl_swiglu_fwd(tr__cl *cl, int fdt, long rows, long width, const float *g, size_t g_stride, float *out, size_t out_stride) {
    tr__clargs A;
    if (rows <= 0 || width <= 0) return TR_OK;
    tr__cla_init(&A);
    tr__cla_i64(&A, rows);
    tr__cla_i64(&A, width);
    tr__cla_buf(&A, g);
    tr__cla_i64(&A, (int64_t)g_stride);
    tr__cla_buf(&A, out);
    tr__cla_i64(&A, (int64_t)out_stride);
    tr__cla_i32(&A, fdt);
    return tr__cl_k1_launch2(cl, "tr_k_swiglu_fwd", (size_t)width, (size_t)rows, &A);
}

TR__FN tr_status tr__cl_swiglu_bwd(tr__cl *cl, long rows, long width, const float *g, size_t g_stride, const float *da, size_t da_stride, float *dg) {
    tr__clargs A;
    if (rows <= 0 || width <= 0) return TR_OK;
    tr__cla_init(&A);
    tr__cla_i64(&A, rows);
    tr__cla_i64(&A, width);
    tr__cla_buf(&A, g);
    tr__cla_i64(&A, (int64_t)g_stride);
    tr__cla_buf(&A, da);
    tr__cla_i64(&A, (int64_t)da_stride);
    tr__cla_buf(&A, dg);
    return tr__cl_k1_launch2(cl, "tr_k_swiglu_bwd", (size_t)width, (size_t)rows, &A);
}

/* One work-item per rotated pair (q or k, head, j < hd / 2) of a row. */
TR__FN tr_status tr__cl_rope(tr__cl *cl, long rows, int S, int H, int hd, float *qkv, const float *cosv, const float *sinv, int inverse) {
    tr__clargs A;
    if (rows <= 0 || S <= 0 || H <= 0 || hd < 2) return TR_OK;
    tr__cla_init(&A);
    tr__cla_i64(&A, rows);
    tr__cla_i32(&A, S);
    tr__cla_i32(&A, H);
    tr__cla_i32(&A, hd);
    tr__cla_buf(&A, qkv);
    tr__cla_buf(&A, cosv);
    tr__cla_buf(&A, sinv);
    tr__cla_f32(&A, inverse ? -1.0f : 1.0f);
    return tr__cl_k1_launch2(cl, "tr_k_rope", (size_t)2 * H * (hd / 2), (size_t)rows, &A);
}

/* The scalar factors are formed on the host exactly as tr__adam_atan2_ref forms them. */
TR__FN tr_status tr__cl_adam_atan2(tr__cl *cl, size_t n, float *p, const float *g, float *m, float *v, float lr, float wd, float b1, float b2, float bc1, float bc2) {
    tr__clargs A;
    if (n == 0) return TR_OK;
    tr__cla_init(&A);
    tr__cla_i64(&A, (int64_t)n);
    tr__cla_buf(&A, p);
    tr__cla_buf(&A, g);
    tr__cla_buf(&A, m);
    tr__cla_buf(&A, v);
    tr__cla_f32(&A, 1.0f - lr * wd);
    tr__cla_f32(&A, lr / bc1);
    tr__cla_f32(&A, sqrtf(bc2));
    tr__cla_f32(&A, 1.0f - b1);
    tr__cla_f32(&A, 1.0f - b2);
    return tr__cl_k1_launch1(cl, "tr_k_adam_atan2", n, &A);
}

TR__FN tr_status tr__cl_ema(tr__cl *cl, size_t n, float *shadow, const float *p, float decay) {
    tr__clargs A;
    if (n == 0) return TR_OK;
    tr__cla_init(&A);
    tr__cla_i64(&A, (int64_t)n);
    tr__cla_buf(&A, shadow);
    tr__cla_buf(&A, p);
    tr__cla_f32(&A, 1.0f - decay);
    tr__cla_f32(&A, decay);
    return tr__cl_k1_launch1(cl, "tr_k_ema", n, &A);
}

TR__FN tr_status tr__cl_scale(tr__cl *cl, size_t n, float *x, float a) {
    tr__clargs A;
    tr__cla_init(&A);
    tr__cla_i64(&A, (int64_t)n);
    tr__cla_buf(&A, x);
    tr__cla_f32(&A, a);
    return tr__cl_k1_launch1(cl, "tr_k_scale", n, &A);
}

TR__FN tr_status tr__cl_round(tr__cl *cl, int fdt, float *x, size_t n) {
    tr__clargs A;
    if (n == 0) return TR_OK;
    tr__cla_init(&A);
    tr__cla_i64(&A, (int64_t)n);
    tr__cla_buf(&A, x);
    tr__cla_i32(&A, fdt);
    return tr__cl_k1_launch1(cl, "tr_k_round", n, &A);
}

TR__FN tr_status tr__cl_half(tr__cl *cl, int fdt, int unpack, float *x, float *h, size_t n) {
    tr__clargs A;
    tr__cla_init(&A);
    tr__cla_i64(&A, (int64_t)n);
    tr__cla_buf(&A, x);
    tr__cla_buf(&A, h);
    tr__cla_i32(&A, fdt);
    tr__cla_i32(&A, unpack);
    return tr__cl_k1_launch1(cl, "tr_k_half", n, &A);
}

#define TR__CL_SLOT_FLAG 8 /* tr__cl_scratch slot of tr__cl_all_finite's flag */
/* *ok = 1 when every element of x[0..n) is finite. At most 64k work-items stride over x, so one
   int comes back for any n. */
TR__FN tr_status tr__cl_all_finite(tr__cl *cl, size_t n, const float *x, int *ok) {
    tr__clargs A;
    int32_t flag = 0;
    float *f;
    tr_status st;
    *ok = 1;
    if (n == 0) return TR_OK;
    if (!(f = tr__cl_scratch(cl, TR__CL_SLOT_FLAG, 1))) return tr__cl_last_oom(cl) ? TR_ERR_OUT_OF_MEMORY : TR_ERR_DEVICE;
    if ((st = tr__cl_fill(cl, f, 0, sizeof(int32_t))) != TR_OK) return st;
    tr__cla_init(&A);
    tr__cla_i64(&A, (int64_t)n);
    tr__cla_buf(&A, x);
    tr__cla_buf(&A, f);
    if ((st = tr__cl_k1_launch1(cl, "tr_k_nonfinite", TR__MIN(n, (size_t)1 << 16), &A)) != TR_OK) return st;
    if ((st = tr__cl_read(cl, &flag, f, sizeof flag)) != TR_OK) return st;
    *ok = !flag;
    return TR_OK;
}

TR__FN tr_status tr__cl_embed_fwd(tr__cl *cl, int B, int S, int L, int Lp, int D, int Dp, int fdt, const float *W_tok, const float *W_pos,
                                  const float *puzzle_emb, const int32_t *inputs, const int32_t *pids, float *x) {
    tr__clargs A;
    if (B <= 0 || S <= 0 || D <= 0) return TR_OK;
    tr__cla_init(&A);
    tr__cla_i32(&A, B);
    tr__cla_i32(&A, S);
    tr__cla_i32(&A, L);
    tr__cla_i32(&A, Lp);
    tr__cla_i32(&A, D);
    tr__cla_i32(&A, Dp);
    tr__cla_f32(&A, sqrtf((float)D));
    tr__cla_i32(&A, W_pos != NULL);
    tr__cla_i32(&A, fdt);
    tr__cla_buf(&A, W_tok);
    tr__cla_buf(&A, W_pos);
    tr__cla_buf(&A, puzzle_emb);
    tr__cla_buf(&A, inputs);
    tr__cla_buf(&A, pids);
    tr__cla_buf(&A, x);
    return tr__cl_k1_launch2(cl, "tr_k_embed_fwd", (size_t)D, (size_t)B * S, &A);
}

#define TR__CL_SLOT_EMB 3  /* tr__cl_scratch slot of the token-gradient chunk partials */
#define TR__CL_SLOT_XENT 4 /* tr__cl_scratch slot of the cross-entropy per-token statistics */

/* Token gradients without atomics: work-group (channel block, v, chunk) scans its chunk of the B*L tokens in order
   (staged through local memory) and sums f*dx over the tokens equal to v. With one chunk it adds straight into g_tok
   in the CPU's (b, s) order; with several, the chunk partials go to scratch and a second kernel adds them in chunk
   order. Chunks are used only to give a wide device enough groups when V * D is small (the usual tiny vocabularies);
   the scan costs B*L*V compares in all, so very large vocabularies are slower but still correct. */
TR__FN tr_status tr__cl_embed_bwd(tr__cl *cl, int B, int S, int L, int Lp, int D, int Dp, int V, const float *dx, const int32_t *inputs, float *g_tok,
                                  float *g_pos, float *prow) {
    const tr__cl_info *in = tr__cl_get_info(cl);
    float f = g_pos ? sqrtf((float)D) * 0.707106781f : sqrtf((float)D);
    size_t l[3], g[3], T = (size_t)B * L, nblk, want, nchunk;
    float *part = NULL;
    tr__clargs A;
    tr_status st;
    if (B <= 0 || S <= 0 || D <= 0) return TR_OK;
    if (g_pos) {
        tr__cla_init(&A);
        tr__cla_i32(&A, B);
        tr__cla_i32(&A, S);
        tr__cla_i32(&A, D);
        tr__cla_f32(&A, f);
        tr__cla_buf(&A, dx);
        tr__cla_buf(&A, g_pos);
        if ((st = tr__cl_k1_launch1(cl, "tr_k_embed_bwd_pos", (size_t)S * D, &A)) != TR_OK) return st;
    }
    if (prow && Dp > 0 && Lp > 0) {
        tr__cla_init(&A);
        tr__cla_i32(&A, B);
        tr__cla_i32(&A, S);
        tr__cla_i32(&A, D);
        tr__cla_i32(&A, Dp);
        tr__cla_i32(&A, Lp);
        tr__cla_f32(&A, f);
        tr__cla_buf(&A, dx);
        tr__cla_buf(&A, prow);
        if ((st = tr__cl_k1_launch2(cl, "tr_k_embed_bwd_prow", (size_t)Dp, (size_t)B, &A)) != TR_OK) return st;
    }
    if (T == 0 || V <= 0 || S <= Lp) return TR_OK;
    l[0] = tr__cl_k1_wg(cl, TR__MIN((size_t)256, TR__MAX((size_t)32, tr__cl_k1_pow2ceil((size_t)D))));
    l[1] = l[2] = 1;
    nblk = ((size_t)D + l[0] - 1) / l[0];
    /* ~8 groups per compute unit, chunks of >= 256 tokens, at most 64 chunks and 4M floats of partials */
    want = (8 * (in && in->compute_units ? in->compute_units : 1) + nblk * V - 1) / (nblk * V);
    nchunk = TR__MIN(TR__MIN(want, T / 256), TR__MIN((size_t)64, ((size_t)4 << 20) / ((size_t)V * D)));
    if (nchunk < 2) nchunk = 1;
    else if (!(part = tr__cl_scratch(cl, TR__CL_SLOT_EMB, nchunk * V * D)))
        return tr__cl_last_oom(cl) ? TR_ERR_OUT_OF_MEMORY : TR_ERR_DEVICE;
    g[0] = nblk * l[0];
    g[1] = (size_t)V;
    g[2] = nchunk;
    tr__cla_init(&A);
    tr__cla_i32(&A, B);
    tr__cla_i32(&A, S);
    tr__cla_i32(&A, L);
    tr__cla_i32(&A, Lp);
    tr__cla_i32(&A, D);
    tr__cla_i32(&A, V);
    tr__cla_i32(&A, (int32_t)nchunk);
    tr__cla_f32(&A, f);
    tr__cla_buf(&A, dx);
    tr__cla_buf(&A, inputs);
    tr__cla_buf(&A, part ? part : g_tok);
    if ((st = tr__cl_launch(cl, "tr_k_embed_bwd_tok", 3, g, l, &A)) != TR_OK || !part) return st;
    tr__cla_init(&A);
    tr__cla_i32(&A, V);
    tr__cla_i32(&A, D);
    tr__cla_i32(&A, (int32_t)nchunk);
    tr__cla_buf(&A, part);
    tr__cla_buf(&A, g_tok);
    return tr__cl_k1_launch1(cl, "tr_k_embed_bwd_tok_sum", (size_t)V * D, &A);
}

TR__FN tr_status tr__cl_refill(tr__cl *cl, int B, int S, int D, const int32_t *halted, const float *H_init, const float *L_init, float *z_H, float *z_L) {
    tr__clargs A;
    if (B <= 0 || S <= 0 || D <= 0) return TR_OK;
    tr__cla_init(&A);
    tr__cla_i32(&A, B);
    tr__cla_i32(&A, S);
    tr__cla_i32(&A, D);
    tr__cla_buf(&A, halted);
    tr__cla_buf(&A, H_init);
    tr__cla_buf(&A, L_init);
    tr__cla_buf(&A, z_H);
    tr__cla_buf(&A, z_L);
    return tr__cl_k1_launch2(cl, "tr_k_refill", (size_t)S * D, (size_t)B, &A);
}

/* Cross-entropy in three launches: the label count of each sequence (into rowstat[4b+1]); the token rows, tpr work-items
   per row (a power of two near V / 4, so tiny vocabularies pack many rows into one group), writing dlogits and per-token
   (loss as a hi + lo float pair, correct) to scratch; then the per-sequence sums in token order. */
TR__FN tr_status tr__cl_xent(tr__cl *cl, int B, int L, int V, int loss_type, const float *logits, const int32_t *labels, float grad_div, float *dlogits,
                             float *rowstat) {
    size_t rows = (size_t)B * L, l = tr__cl_k1_wg(cl, 256), tpr = TR__MIN(l, tr__cl_k1_pow2ceil(((size_t)V + 3) / 4)), g;
    float *ts;
    tr__clargs A;
    tr_status st;
    if (B <= 0) return TR_OK;
    tr__cla_init(&A);
    tr__cla_i32(&A, B);
    tr__cla_i32(&A, L);
    tr__cla_buf(&A, labels);
    tr__cla_buf(&A, rowstat);
    if ((st = tr__cl_k1_launch1(cl, "tr_k_xent_count", (size_t)B, &A)) != TR_OK) return st;
    if (rows == 0 || V <= 0) { /* no tokens: the sums below see none */
        rows = 0;
        ts = NULL;
    } else if (!(ts = tr__cl_scratch(cl, TR__CL_SLOT_XENT, 3 * rows)))
        return tr__cl_last_oom(cl) ? TR_ERR_OUT_OF_MEMORY : TR_ERR_DEVICE;
    else {
        g = (rows + l / tpr - 1) / (l / tpr) * l;
        tr__cla_init(&A);
        tr__cla_i64(&A, (int64_t)rows);
        tr__cla_i32(&A, L);
        tr__cla_i32(&A, V);
        tr__cla_i32(&A, loss_type == TR_LOSS_STABLEMAX ? 0 : 1);
        tr__cla_i32(&A, (int32_t)tpr);
        tr__cla_f32(&A, grad_div);
        tr__cla_i32(&A, dlogits != NULL);
        tr__cla_buf(&A, logits);
        tr__cla_buf(&A, labels);
        tr__cla_buf(&A, rowstat);
        tr__cla_buf(&A, dlogits);
        tr__cla_buf(&A, ts);
        if ((st = tr__cl_launch(cl, "tr_k_xent_rows", 1, &g, &l, &A)) != TR_OK) return st;
    }
    tr__cla_init(&A);
    tr__cla_i32(&A, B);
    tr__cla_i32(&A, rows ? L : 0);
    tr__cla_buf(&A, ts);
    tr__cla_buf(&A, rowstat);
    return tr__cl_k1_launch1(cl, "tr_k_xent_reduce", (size_t)B, &A);
}

TR__FN tr_status tr__cl_qhead_fwd(tr__cl *cl, int B, int S, int D, const float *z_H, const float *W_q, const float *b_q, float *q) {
    tr__clargs A;
    if (B <= 0 || D <= 0) return TR_OK;
    tr__cla_init(&A);
    tr__cla_i32(&A, S);
    tr__cla_i32(&A, D);
    tr__cla_buf(&A, z_H);
    tr__cla_buf(&A, W_q);
    tr__cla_buf(&A, b_q);
    tr__cla_buf(&A, q);
    return tr__cl_k1_launch_rows(cl, "tr_k_qhead_fwd", (size_t)2 * B, (size_t)D, &A);
}

TR__FN tr_status tr__cl_qhead_bwd(tr__cl *cl, int B, int S, int D, const float *dq, const float *z_H, const float *W_q, float *dz, float *g_Wq, float *g_bq) {
    tr__clargs A;
    tr_status st;
    if (B <= 0 || D <= 0) return TR_OK;
    tr__cla_init(&A);
    tr__cla_i32(&A, B);
    tr__cla_i32(&A, S);
    tr__cla_i32(&A, D);
    tr__cla_buf(&A, dq);
    tr__cla_buf(&A, W_q);
    tr__cla_buf(&A, dz);
    if ((st = tr__cl_k1_launch2(cl, "tr_k_qhead_bwd_dz", (size_t)D, (size_t)B, &A)) != TR_OK) return st;
    tr__cla_init(&A);
    tr__cla_i32(&A, B);
    tr__cla_i32(&A, S);
    tr__cla_i32(&A, D);
    tr__cla_buf(&A, dq);
    tr__cla_buf(&A, z_H);
    tr__cla_buf(&A, g_Wq);
    tr__cla_buf(&A, g_bq);
    return tr__cl_k1_launch2(cl, "tr_k_qhead_bwd_w", (size_t)D + 1, 2, &A);
}

TR__FN tr_status tr__cl_signsgd(tr__cl *cl, float *table, int Dp, int ngroups, const int32_t *gid, const int32_t *gstart, const int32_t *order, const float *prow,
                                float lr, float wd) {
    tr__clargs A;
    if (Dp <= 0 || ngroups <= 0) return TR_OK;
    tr__cla_init(&A);
    tr__cla_i32(&A, Dp);
    tr__cla_i32(&A, ngroups);
    tr__cla_f32(&A, 1.0f - lr * wd);
    tr__cla_f32(&A, lr);
    tr__cla_buf(&A, table);
    tr__cla_buf(&A, gid);
    tr__cla_buf(&A, gstart);
    tr__cla_buf(&A, order);
    tr__cla_buf(&A, prow);
    return tr__cl_k1_launch2(cl, "tr_k_signsgd", (size_t)Dp, (size_t)ngroups, &A);
}

/* >>opencl-ops-end */

/* >>opencl-gemm: SGEMM and attention kernels of the OpenCL backend, and their host wrappers.
   SGEMM (tr_k_sgemm): C tile TM x TN per work-group of (TN/WN) x (TM/WM) work-items, each owning WM x WN outputs
     in registers; A and B tiles TK deep staged in local memory as As[k][m], Bs[k][n] (+pad), the transposes
     absorbed by the staging (consecutive work-items read consecutive addresses of A or B whichever way it is
     stored), so all four cases share one inner loop; the next tile is fetched into registers while the current
     one is multiplied. Work-item outputs are strided by the thread grid (VW = 1: conflict-free scalar local
     reads) or in runs of 4 (VW = 4: float4 local reads). One kernel per transpose case (tr_k_sgemm_nn/nt/tn/tt_
     <tiles>, ta/tb compile-time); tiles that are interior (in M or N, and in K) with 16-byte aligned rows (offset,
     ld, batch stride % 4 == 0) are fetched with unchecked float4 loads along the contiguous dimension, the others
     element-wise with bounds checks (any M, N, K, lda...); C is written with float4 stores where aligned. Per case
     the warp layout (4 x 8 work-items per warp or rows of the grid) and a double-buffered local tile (one barrier
     per tile) are chosen as measured fastest on an H200 (-DTR_GEMM_WL / -DTR_GEMM_DB, or WL= / DB= in
     TINYREC_CL_SGEMM, force them for all). Accumulation order (fma over k in order) is the same in every variant.
     In the nn kernel (per case, KT / UV), the last k-tile of a range is multiplied only to its depth (K = 97:
     6 full tiles + 1 deep, not 7 full), and interior tiles of rows that are not 16-byte aligned (lda = 97) are
     fetched with vload4 instead of checked scalar loads.
     The third grid dimension indexes the batch, or the pieces of a split: when C has too few tiles to fill the
     device and K is long (the weight gradients, K = 74496), K is cut into a fixed number of chunks whose partials
     go to scratch and tr_k_gemm_reduce sums them in order; a batched product with sC == 0 is a single long sum
     over (batch, k) per group of batches, likewise reduced in group order. No atomics: results are deterministic
     for a given device and tile configuration.
   Fused SwiGLU (the token mix, whose elementwise passes are the biggest): nn_gu computes W_tgu . x_b with gate and
     up rows TM/2 apart in one work-item's registers and writes act = silu(gate) * up from them (and the gate_up
     only when the tape needs it); nt_swb reads its B operand as silu(gate) * up from the gate_up tensor (the
     weight gradient of W_tdown). The channel SwiGLU's fused forms were slower on the H200 (register pressure
     cost the products more than the pass saves), so it stays an elementwise pass.
   cp.async (TR_GEMM_CP; NVIDIA sm_80+, found through cl_nv_device_attribute_query): the plain products (nn, nt,
     tn, tt and the gate_up nn_gu) run tr_sgemm_cp instead, which copies every tile global -> local with inline-PTX
     cp.async, TR_GEMM_ST buffers deep (ST= in TINYREC_CL_SGEMM, default 2), so that no registers stage tiles and
     the copies of the next tile overlap this one's fma. k-major operands are copied 16 bytes at a time; k-contiguous
     ones 4 bytes at a time into the k-major local layout (the transpose; 8 depths x 32 rows per warp pass: whole
     32-byte sectors, no bank conflicts). Out-of-range elements are zero-filled by the copy itself, so edge tiles
     (M = 97) stay asynchronous. x W^T with >= TR__CL_GEMM_BT_MIN_M rows transposes W first (tr_k_transpose, a
     weight: small) and runs as nn, whose B then takes 16-byte copies. On the H200 this took the training-shape
     products from 38.4-39.7 to 41.7-42.5 TFLOP/s (forward, dY.W), 41.8 to 47.1-47.5 (weight gradients), and the
     token mix's from 26-28.6 to 27.8-36.4. CP=0 turns it off; CP=2 (the tests) emulates the copies with plain
     loads and stores on any device. 3 or 4 stages at TK = 8 were 5% slower (geometric mean over the shapes);
     3 at TK = 16 exceeds the 48 KiB of local memory.
   Tiles: -DTR_GEMM_TM/TN/TK/WM/WN/VW from tr__cl_sgemm_defines (the device's work-group and local-memory limits;
     env TINYREC_CL_SGEMM="TM=128,TN=64,TK=16,WM=8,WN=8,VW=4" overrides), chosen once when the program is built
     and kept with the device (tr__cl.gemm), which every launch uses.
   Tensor cores (tr_k_mma_*, TR_GEMM_MMA; NVIDIA sm_80+): while a bfloat16 / float16 model runs (ctx->gemm_fdt), its
     products, whose operands are values of that precision, run as inline-PTX mma.sync.m16n8k16 with fp32
     accumulation: 128 x 128 x 32 tiles converted once to 16-bit pairs in local memory (float4 fetches of interior
     aligned tiles), 8 warps of 64 x 32 outputs, the output optionally rounded in the epilogue (tr__op_sgemm_rnd).
     Their program is built at the first such product (float32 users never compile it); MMA=2 runs the same tiles
     with fma on any device (PoCL in CI). On an H100: 69-72 TFLOP/s at the training shapes (the SIMT kernels 35-42,
     cuBLAS bf16 about 300). The fused SwiGLU products stay fp32-only.
   Attention (flash style, fp32): forward per (b, h, block of 16 queries) x 16-wide slices of the head dimension,
     looping over key blocks with an online softmax; backward recomputes p = exp(s - lse): Dv = do.o per row, then
     dk/dv per key block looping over query blocks, and dq per query block looping over key blocks. Nothing of size
     S x S touches global memory. Kernels for hd <= 64 and hd <= 256 (registers per work-item). */
/* The kernels, from tools/opencl/gemm.cl (SGEMM, transpose) and tools/opencl/attention.cl (edit those files; `make`
   rewrites these blocks). */
/* >>cl-embed tools/opencl/gemm.cl */
static const char tr__cl_src_gemm_1[] =
"#line 1 \"tools/opencl/gemm.cl\"\n"
"/* tinyrec OpenCL SGEMM. Tile: TM x TN of C per work-group, TK deep; each work-item owns WM x WN\n"
" outputs (strided by the thread grid, or in runs of VW=4 for float4 local reads). */\n"
"#ifndef TR_GEMM_TM\n"
"#define TR_GEMM_TM 32\n"
"#endif\n"
"#ifndef TR_GEMM_TN\n"
"#define TR_GEMM_TN 32\n"
"#endif\n"
"#ifndef TR_GEMM_TK\n"
"#define TR_GEMM_TK 8\n"
"#endif\n"
"#ifndef TR_GEMM_WM\n"
"#define TR_GEMM_WM 4\n"
"#endif\n"
"#ifndef TR_GEMM_WN\n"
"#define TR_GEMM_WN 4\n"
"#endif\n"
"#ifndef TR_GEMM_VW\n"
"#define TR_GEMM_VW 1\n"
"#endif\n"
"#define TR_RM (TR_GEMM_TM / TR_GEMM_WM)\n"
"#define TR_RN (TR_GEMM_TN / TR_GEMM_WN)\n"
"#define TR_NT (TR_RM * TR_RN)\n"
"#define TR_LA (TR_GEMM_TM * TR_GEMM_TK / TR_NT)\n"
"#define TR_LB (TR_GEMM_TN * TR_GEMM_TK / TR_NT)\n"
"/* WL: work-items of a 32-wide warp as 4 x 8 (rows x columns) of the thread grid (fewer distinct local reads);\n"
" DB: two local buffers (one barrier per tile instead of two). Per transpose case (measured on an H200), or\n"
" -DTR_GEMM_WL / -DTR_GEMM_DB for all. */\n"
"#define TR_WL_OK (TR_RN % 8 == 0 && TR_RM % 4 == 0 && TR_NT % 32 == 0)\n"
"#ifdef TR_GEMM_WL\n"
"#define TR_WL(d) (TR_GEMM_WL && TR_WL_OK)\n"
"#else\n"
"#define TR_WL(d) ((d) && TR_WL_OK)\n"
"#endif\n"
"#ifdef TR_GEMM_DB\n"
"#define TR_DB(d) TR_GEMM_DB\n"
"#else\n"
"#define TR_DB(d) (d)\n"
"#endif\n"
"#if TR_GEMM_VW == 4\n"
"#define TR_GPAD 4\n"
"#define TR_ROWA(i) (((i) >> 2) * (TR_RM * 4) + ty * 4 + ((i) & 3))\n"
"#define TR_COLB(j) (((j) >> 2) * (TR_RN * 4) + tx * 4 + ((j) & 3))\n"
"#else\n"
"#define TR_GPAD 1\n"
"#define TR_ROWA(i) ((i) * TR_RM + ty)\n"
"#define TR_COLB(j) ((j) * TR_RN + tx)\n"
"#endif\n"
"#define TR_SA (TR_GEMM_TM + TR_GPAD)\n"
"#define TR_SB (TR_GEMM_TN + TR_GPAD)\n"
"#define TR_ASZ (TR_GEMM_TK * TR_SA)\n"
"#define TR_BSZ (TR_GEMM_TK * TR_SB)\n"
"/* float4 global loads of a tile (interior, 16-byte aligned rows): count per work-item, 0 = not possible */\n"
"#if TR_GEMM_TK % 4 == 0 && TR_GEMM_TM % 4 == 0 && (TR_GEMM_TM * TR_GEMM_TK / 4) % TR_NT == 0\n"
"#define TR_VLA (TR_LA / 4)\n"
"#else\n"
"#define TR_VLA 0\n"
"#endif\n"
"#if TR_GEMM_TK % 4 == 0 && TR_GEMM_TN % 4 == 0 && (TR_GEMM_TN * TR_GEMM_TK / 4) % TR_NT == 0\n"
"#define TR_VLB (TR_LB / 4)\n"
"#else\n"
"#define TR_VLB 0\n"
"#endif\n"
"/* The kernel's name carries its tile configuration, so that a host that computed another one fails to find it. */\n"
"#define TR_GNAME2(t, a, b, c, d, e, f) tr_k_sgemm_##t##_##a##_##b##_##c##_##d##_##e##_##f\n"
"#define TR_GNAME(t, a, b, c, d, e, f) TR_GNAME2(t, a, b, c, d, e, f)\n"
"/* Element l of the tile (k depth, x) a work-item fetches: CK (P stored x-major, k contiguous) or k-major; V: float4\n"
" along the contiguous dimension (a run of 4). Consecutive work-items read consecutive addresses either way. */\n"
"#define TR_EIDX(XT, CK, V)                                                                                     \\\n"
"  e = tid + l * TR_NT;                                                                                       \\\n"
"  if (CK) q = e % (TR_GEMM_TK / (V)), x = e / (TR_GEMM_TK / (V));                                            \\\n"
"  else x = e % ((XT) / (V)), q = e / ((XT) / (V));\n"
"/* vec fetch (interior tile, 16-byte aligned rows): r[4l..4l+3] = a float4 at depth k0 + 4q (CK) or x0 + 4x */\n"
"/* SWF: the operand is a gate_up tensor read as silu(gate) * up, the up at +so (SwiGLU fused into the fetch; the\n"
" formula of tr_k_swiglu_fwd, so the products equal those of the activation it would have written) */\n"
"/* GF: a gate_up product (GU): tile rows x < XT/2 are gate rows x0 + x, the others their ups x0 + x - XT/2 + gh */\n"
"#define TR_XR(x0, x, XT, GF) ((GF) ? ((x) < (XT) / 2 ? (x0) + (x) : (x0) + (x) - (XT) / 2 + gh) : (x0) + (x))\n"
"#define TR_XB(x0, x, XT, GF) ((GF) ? (x0) + (x) % ((XT) / 2) : (x0) + (x))\n"
"#define TR_VFETCH(P, ld, r, x0, XT, CK, LD, SWF, GF)                                                           \\\n"
"  TR_EIDX(XT, CK, 4)                                                                                         \\\n"
"  pp = CK ? P + (long)TR_XR(x0, x, XT, GF) * ld + (k0 + 4 * q) : P + (long)(k0 + q) * ld + (x0 + 4 * x);    \\\n";
static const char tr__cl_src_gemm_2[] =
"  v = LD(pp);                                                                                                \\\n"
"  if (SWF) v = v / (1.0f + exp(-v)) * LD(pp + so);                                                          \\\n"
"  r[4 * l] = v.s0, r[4 * l + 1] = v.s1, r[4 * l + 2] = v.s2, r[4 * l + 3] = v.s3;\n"
"#define TR_SFETCH(P, ld, r, x0, X, XT, CK, SWF, GF)                                                            \\\n"
"  TR_EIDX(XT, CK, 1)                                                                                         \\\n"
"  r[l] = 0.0f;                                                                                               \\\n"
"  if (TR_XB(x0, x, XT, GF) < X && k0 + q < ke) {                                                             \\\n"
"    pp = P + (CK ? (long)TR_XR(x0, x, XT, GF) * ld + (k0 + q) : (long)(k0 + q) * ld + (x0 + x));            \\\n"
"    r[l] = SWF ? pp[0] / (1.0f + exp(-pp[0])) * pp[so] : pp[0];                                             \\\n"
"  }\n"
"#define TR_VSTAGE(S, SX, r, XT, CK)                                                                            \\\n"
"  TR_EIDX(XT, CK, 4)                                                                                         \\\n"
"  if (CK) {                                                                                                  \\\n"
"    S[(4 * q) * SX + x] = r[4 * l], S[(4 * q + 1) * SX + x] = r[4 * l + 1];                                \\\n"
"    S[(4 * q + 2) * SX + x] = r[4 * l + 2], S[(4 * q + 3) * SX + x] = r[4 * l + 3];                        \\\n"
"  } else {                                                                                                   \\\n"
"    TR_ST4(S, q * SX + 4 * x, r, l)                                                                        \\\n"
"  }\n"
"#define TR_SSTAGE(S, SX, r, XT, CK)                                                                            \\\n"
"  TR_EIDX(XT, CK, 1)                                                                                         \\\n"
"  S[q * SX + x] = r[l];\n"
"#define TR_LDA4(p) (*(__global const float4 *)(p))\n"
"#define TR_LDU4(p) vload4(0, p)\n"
"#if TR_GPAD == 4\n"
"#define TR_ST4(S, o, r, l) *(__local float4 *)(S + (o)) = (float4)(r[4 * l], r[4 * l + 1], r[4 * l + 2], r[4 * l + 3]);\n"
"#else\n"
"#define TR_ST4(S, o, r, l) S[(o)] = r[4 * l], S[(o) + 1] = r[4 * l + 1], S[(o) + 2] = r[4 * l + 2], S[(o) + 3] = r[4 * l + 3];\n"
"#endif\n"
"/* One depth kk of the tile: a (WM) and b (WN) from local memory (TR_FRAG), WM x WN fma (TR_FMAS). */\n"
"#if TR_GEMM_VW == 4\n"
"#define TR_FRAG(kk, a, b)                                                                                      \\\n"
"  _Pragma(\"unroll\") for (i = 0; i < TR_GEMM_WM / 4; i++) {                                                 \\\n"
"    float4 w = *(__local const float4 *)(As + (kk) * TR_SA + i * TR_RM * 4 + ty * 4);                    \\\n"
"    a[4 * i] = w.s0, a[4 * i + 1] = w.s1, a[4 * i + 2] = w.s2, a[4 * i + 3] = w.s3;                      \\\n"
"  }                                                                                                        \\\n"
"  _Pragma(\"unroll\") for (j = 0; j < TR_GEMM_WN / 4; j++) {                                                 \\\n"
"    float4 w = *(__local const float4 *)(Bs + (kk) * TR_SB + j * TR_RN * 4 + tx * 4);                    \\\n"
"    b[4 * j] = w.s0, b[4 * j + 1] = w.s1, b[4 * j + 2] = w.s2, b[4 * j + 3] = w.s3;                      \\\n"
"  }\n"
"#else\n"
"#define TR_FRAG(kk, a, b)                                                                                      \\\n"
"  _Pragma(\"unroll\") for (i = 0; i < TR_GEMM_WM; i++) a[i] = As[(kk) * TR_SA + TR_ROWA(i)];                \\\n"
"  _Pragma(\"unroll\") for (j = 0; j < TR_GEMM_WN; j++) b[j] = Bs[(kk) * TR_SB + TR_COLB(j)];\n"
"#endif\n"
"#define TR_FMAS(a, b)                                                                                          \\\n"
"  _Pragma(\"unroll\") for (i = 0; i < TR_GEMM_WM; i++)                                                       \\\n"
"  _Pragma(\"unroll\") for (j = 0; j < TR_GEMM_WN; j++) c[i][j] = fma(a[i], b[j], c[i][j]);\n";
static const char tr__cl_src_gemm_3[] =
"#define TR_KSTEP(kk)                                                                                           \\\n"
"  {                                                                                                          \\\n"
"    float a[TR_GEMM_WM], b[TR_GEMM_WN];                                                                    \\\n"
"    TR_FRAG(kk, a, b)                                                                                      \\\n"
"    TR_FMAS(a, b)                                                                                          \\\n"
"  }\n"
"/* C (=|+=) the work-item's outputs c: rows m0 + TR_ROWA(i) < M, columns n0 + TR_COLB(j) < N. */\n"
"#if TR_GEMM_VW == 4\n"
"#define TR_CSTORE                                                                                              \\\n"
"  _Pragma(\"unroll\") for (i = 0; i < TR_GEMM_WM; i++) {                                                       \\\n"
"    const int m = m0 + TR_ROWA(i);                                                                           \\\n"
"    if (m < M) {                                                                                             \\\n"
"      __global float *cr = C + (long)m * ldc;                                                                \\\n"
"      _Pragma(\"unroll\") for (j = 0; j < TR_GEMM_WN; j += 4) {                                                \\\n"
"        const int n = n0 + TR_COLB(j);                                                                       \\\n"
"        if ((al & 4) && n + 3 < N) { /* C rows 16-byte aligned: one float4 store */                          \\\n"
"          float4 o = (float4)(c[i][j], c[i][j + 1], c[i][j + 2], c[i][j + 3]);                               \\\n"
"          if (acc) o = *(__global float4 *)(cr + n) + o;                                                     \\\n"
"          *(__global float4 *)(cr + n) = o;                                                                  \\\n"
"        } else {                                                                                             \\\n"
"          for (l = 0; l < 4; l++)                                                                            \\\n"
"            if (n + l < N) cr[n + l] = acc ? cr[n + l] + c[i][j + l] : c[i][j + l];                          \\\n"
"        }                                                                                                    \\\n"
"      }                                                                                                      \\\n"
"    }                                                                                                        \\\n"
"  }\n"
"#else\n"
"#define TR_CSTORE                                                                                              \\\n"
"  _Pragma(\"unroll\") for (i = 0; i < TR_GEMM_WM; i++) {                                                       \\\n"
"    const int m = m0 + TR_ROWA(i);                                                                           \\\n"
"    if (m < M) {                                                                                             \\\n"
"      __global float *cr = C + (long)m * ldc;                                                                \\\n"
"      _Pragma(\"unroll\") for (j = 0; j < TR_GEMM_WN; j++) {                                                   \\\n"
"        const int n = n0 + TR_COLB(j);                                                                       \\\n"
"        if (n < N) cr[n] = acc ? cr[n] + c[i][j] : c[i][j];                                                  \\\n"
"      }                                                                                                      \\\n"
"    }                                                                                                        \\\n"
"  }\n"
"#endif\n"
"/* GU: act = silu(gate) * up to X (and the gate_up to C when wc) from the registers: rows i and i + WM/2 of a\n"
" work-item's block are a gate row and its up (tile rows x and x + TM/2). */\n"
"#if TR_GEMM_VW == 4\n";
static const char tr__cl_src_gemm_4[] =
"#define TR_GU4                                                                                                 \\\n"
"  if ((al & 12) == 12 && n + 3 < N) { /* X and C rows 16-byte aligned: float4 stores */                      \\\n"
"    const float4 g = (float4)(c[i][j], c[i][j + 1], c[i][j + 2], c[i][j + 3]);                               \\\n"
"    const float4 u = (float4)(c[iu][j], c[iu][j + 1], c[iu][j + 2], c[iu][j + 3]);                           \\\n"
"    *(__global float4 *)xr = g / (1.0f + exp(-g)) * u;                                                       \\\n"
"    if (wc) *(__global float4 *)gr = g, *(__global float4 *)ur = u;                                          \\\n"
"    continue;                                                                                                \\\n"
"  }\n"
"#else\n"
"#define TR_GU4\n"
"#endif\n"
"#define TR_GUSTORE                                                                                             \\\n"
"  _Pragma(\"unroll\") for (i = 0; i < TR_GEMM_WM / 2; i++)                                                     \\\n"
"  _Pragma(\"unroll\") for (j = 0; j < TR_GEMM_WN; j += TR_GEMM_VW) {                                           \\\n"
"    const int m = m0 + TR_ROWA(i), n = n0 + TR_COLB(j), iu = i + TR_GEMM_WM / 2;                             \\\n"
"    __global float *xr = X + (long)m * ldx + n, *gr = C + (long)m * ldc + n, *ur = gr + gh * ldc;            \\\n"
"    if (m >= M) continue;                                                                                    \\\n"
"    TR_GU4                                                                                                   \\\n"
"    for (l = 0; l < TR_GEMM_VW; l++)                                                                         \\\n"
"      if (n + l < N) {                                                                                       \\\n"
"        const float g = c[i][j + l], u = c[iu][j + l];                                                       \\\n"
"        xr[l] = g / (1.0f + exp(-g)) * u;                                                                    \\\n"
"        if (wc) gr[l] = g, ur[l] = u;                                                                        \\\n"
"      }                                                                                                      \\\n"
"  }\n"
"/* Both SGEMM bodies: the work-item (tid; tx, ty in the output grid, WL: 4 x 8 per warp), the tile's first column\n"
" n0 and row m0 (GU: C's rows are gate | up halves `gh` apart, a tile holds TM/2 of each, M counts the gate rows),\n"
" and the (batch, k-tile) sequence of group z: batches [b0, b1), depths [kb, ke) in ntk tiles, nt tiles in all. */\n"
"#define TR_GEMM_TILE_INDEX                                                                                     \\\n"
"  const int tid = get_local_id(1) * TR_RN + get_local_id(0);                                                 \\\n"
"  const int tx = WL ? ((tid >> 5) % (TR_RN / 8)) * 8 + (tid & 7) : (int)get_local_id(0);                     \\\n"
"  const int ty = WL ? ((tid >> 5) / (TR_RN / 8)) * 4 + ((tid >> 3) & 3) : (int)get_local_id(1);              \\\n"
"  const int n0 = get_group_id(0) * TR_GEMM_TN, m0 = get_group_id(1) * (GU ? TR_GEMM_TM / 2 : TR_GEMM_TM);   \\\n"
"  const int bz = z / ks, kz = z - bz * ks;                                                                   \\\n"
"  const int b0 = bz * bpg, b1 = min(nb, b0 + bpg), kb = kz * kc, ke = min(K, kb + kc);                       \\\n"
"  const int ntk = ke > kb ? (ke - kb + TR_GEMM_TK - 1) / TR_GEMM_TK : 0;                                     \\\n"
"  const int nt = (b1 > b0 ? b1 - b0 : 0) * ntk;\n"
"/* cp.async (TR_GEMM_CP: NVIDIA sm_80+, inline PTX): tiles go from global to local memory without registers.\n"
" TR_CP4 / TR_CP16 copy 4 / 16 bytes of which n are read, the rest zero-filled (n = 0: an element out of range). */\n"
"#ifndef TR_GEMM_ST\n"
"#define TR_GEMM_ST 2\n"
"#endif\n"
"#if TR_GEMM_CP == 1\n"
"#define TR_CP4(dst, src, n) __asm__ volatile(\"cp.async.ca.shared.global [%0], [%1], 4, %2;\" :: \"r\"((uint)(ulong)(dst)), \"l\"(src), \"r\"(n) : \"memory\")\n";
static const char tr__cl_src_gemm_5[] =
"#define TR_CP16(dst, src, n) __asm__ volatile(\"cp.async.cg.shared.global [%0], [%1], 16, %2;\" :: \"r\"((uint)(ulong)(dst)), \"l\"(src), \"r\"(n) : \"memory\")\n"
"#define TR_CPCOMMIT() __asm__ volatile(\"cp.async.commit_group;\" ::: \"memory\")\n"
"/* wait until at most ST - 2 groups (the tiles after the next one) are still in flight */\n"
"#if TR_GEMM_ST == 2\n"
"#define TR_CPWAIT() __asm__ volatile(\"cp.async.wait_group 0;\" ::: \"memory\")\n"
"#elif TR_GEMM_ST == 3\n"
"#define TR_CPWAIT() __asm__ volatile(\"cp.async.wait_group 1;\" ::: \"memory\")\n"
"#else\n"
"#define TR_CPWAIT() __asm__ volatile(\"cp.async.wait_group 2;\" ::: \"memory\")\n"
"#endif\n"
"#else /* 2 (tests, any device): the same staging with plain loads and stores */\n"
"#define TR_CP4(dst, src, n) (*(dst) = (n) ? *(src) : 0.0f)\n"
"#define TR_CP16(dst, src, n) (*(__local float4 *)(dst) = (n) ? *(__global const float4 *)(src) : (float4)(0.0f))\n"
"#define TR_CPCOMMIT()\n"
"#define TR_CPWAIT()\n"
"#endif\n"
"/* local buffers of a kernel: ST for the cp.async ones, 2 for the others */\n"
"#define TR_NBUF(CPA) ((CPA) ? TR_GEMM_ST : 2)\n"
"/* C_z (=|+=) sum over batches b in group z of op(A_b) op(B_b), depth range [kz*kc, kz*kc+kc) of K.\n"
" z = z0 + group(2) = bz * ks + kz; batches [bz*bpg, bz*bpg+bpg) & [0, nb). Output C + z*sC.\n"
" TA, TB: compile-time constants (one kernel per case). */\n"
"static inline void tr_sgemm(__global const float *A, long lda, long sA, __global const float *B, long ldb, long sB,\n"
"              __global float *C, long ldc, int M, int N, int K, int acc, int nb, int bpg, int ks, int kc,\n"
"              int z, int al, __local float *As0, __local float *Bs0, const int TA, const int TB,\n"
"              const int WL, const int DB, const int KT, const int UV, const int SW, long so, const int GU, long gh,\n"
"              __global float *X, long ldx, int wc) {\n"
"  TR_GEMM_TILE_INDEX\n"
"  /* float4 fetches: the tile is interior along x (and k, checked per tile) and A / B rows 16-byte aligned */\n"
"  /* 1: aligned float4; 2 (UV): rows not 16-byte aligned, vload4 */\n"
"  const int va = TR_VLA > 0 && (UV || (al & 1)) && m0 + (GU ? TR_GEMM_TM / 2 : TR_GEMM_TM) <= M ? ((al & 1) ? 1 : 2) : 0;\n"
"  const int vb = TR_VLB > 0 && (UV || (al & 2)) && n0 + TR_GEMM_TN <= N ? ((al & 2) ? 1 : 2) : 0;\n"
"  float c[TR_GEMM_WM][TR_GEMM_WN], ra[TR_LA], rb[TR_LB];\n"
"  float4 v;\n"
"  int i, j, l, t, e, q, x, k0, fa = 0, fb = 0, kf = 0, kn = 0;\n"
"  __global const float *Ab, *Bb, *pp;\n"
"#pragma unroll\n"
"  for (i = 0; i < TR_GEMM_WM; i++)\n"
"#pragma unroll\n"
"    for (j = 0; j < TR_GEMM_WN; j++) c[i][j] = 0.0f;\n"
"  for (t = -1; t < nt; t++) {\n"
"    __local float *As = As0, *Bs = Bs0;\n"
"    if (DB) As += (t & 1) * TR_ASZ, Bs += (t & 1) * TR_BSZ;\n"
"    if (t >= 0) { /* stage the registers fetched last round */\n"
"      if (!DB && t > 0) barrier(CLK_LOCAL_MEM_FENCE);\n"
"      kn = kf; /* KT: depth of this tile, TK or less for the last of a range */\n"
"      if (fa) {\n"
"#pragma unroll\n"
"        for (l = 0; l < TR_VLA; l++) { TR_VSTAGE(As, TR_SA, ra, TR_GEMM_TM, !TA) }\n"
"      } else {\n"
"#pragma unroll\n"
"        for (l = 0; l < TR_LA; l++) { TR_SSTAGE(As, TR_SA, ra, TR_GEMM_TM, !TA) }\n"
"      }\n"
"      if (fb) {\n"
"#pragma unroll\n"
"        for (l = 0; l < TR_VLB; l++) { TR_VSTAGE(Bs, TR_SB, rb, TR_GEMM_TN, TB) }\n"
"      } else {\n"
"#pragma unroll\n"
"        for (l = 0; l < TR_LB; l++) { TR_SSTAGE(Bs, TR_SB, rb, TR_GEMM_TN, TB) }\n"
"      }\n"
"      barrier(CLK_LOCAL_MEM_FENCE);\n"
"    }\n"
"    if (t + 1 < nt) { /* fetch the next tile into registers while this one is computed */\n"
"      const int tb_ = (t + 1) / ntk;\n"
"      k0 = kb + ((t + 1) - tb_ * ntk) * TR_GEMM_TK;\n"
"      Ab = A + (long)(b0 + tb_) * sA, Bb = B + (long)(b0 + tb_) * sB;\n"
"      if (KT) kf = min(TR_GEMM_TK, ke - k0);\n"
"      fa = k0 + TR_GEMM_TK <= ke ? va : 0, fb = k0 + TR_GEMM_TK <= ke ? vb : 0;\n"
"      if (fa == 1) {\n"
"#pragma unroll\n"
"        for (l = 0; l < TR_VLA; l++) { TR_VFETCH(Ab, lda, ra, m0, TR_GEMM_TM, !TA, TR_LDA4, SW == 1, GU) }\n"
"      } else if (UV && fa) {\n"
"#pragma unroll\n"
"        for (l = 0; l < TR_VLA; l++) { TR_VFETCH(Ab, lda, ra, m0, TR_GEMM_TM, !TA, TR_LDU4, SW == 1, GU) }\n"
"      } else {\n";
static const char tr__cl_src_gemm_6[] =
"#pragma unroll\n"
"        for (l = 0; l < TR_LA; l++) { TR_SFETCH(Ab, lda, ra, m0, M, TR_GEMM_TM, !TA, SW == 1, GU) }\n"
"      }\n"
"      if (fb == 1) {\n"
"#pragma unroll\n"
"        for (l = 0; l < TR_VLB; l++) { TR_VFETCH(Bb, ldb, rb, n0, TR_GEMM_TN, TB, TR_LDA4, SW == 2, 0) }\n"
"      } else if (UV && fb) {\n"
"#pragma unroll\n"
"        for (l = 0; l < TR_VLB; l++) { TR_VFETCH(Bb, ldb, rb, n0, TR_GEMM_TN, TB, TR_LDU4, SW == 2, 0) }\n"
"      } else {\n"
"#pragma unroll\n"
"        for (l = 0; l < TR_LB; l++) { TR_SFETCH(Bb, ldb, rb, n0, N, TR_GEMM_TN, TB, SW == 2, 0) }\n"
"      }\n"
"    }\n"
"    if (t >= 0) {\n"
"      int kk;\n"
"      if (!KT || kn == TR_GEMM_TK) {\n"
"#pragma unroll\n"
"        for (kk = 0; kk < TR_GEMM_TK; kk++) { TR_KSTEP(kk) }\n"
"      } else { /* the last tile of a range: only its kn depths (the rest are zeros in both tiles) */\n"
"#pragma unroll 1\n"
"        for (kk = 0; kk < kn; kk++) { TR_KSTEP(kk) }\n"
"      }\n"
"    }\n"
"  }\n"
"  if (GU) {\n"
"    TR_GUSTORE\n"
"    return;\n"
"  }\n"
"  TR_CSTORE\n"
"}\n"
"/* cp.async staging of one operand's tile (XT x TK of P from x0, depths k0..) into S[k][x] (pitch SX). A k-contiguous\n"
" operand (CK) is copied 4 bytes at a time, 8 depths (one 32-byte sector) x NT/8 rows per pass: whole sectors, and\n"
" no bank conflicts at pitch XT + 4; a k-major one 16 bytes at a time where its rows are 16-byte aligned (v) and the\n"
" tile is interior along x, else 4. Out-of-range elements are zero-filled by the copy (no other path for edges).\n"
" Each work-item's elements are a fixed pattern of offsets from one address (the host checks that NT divides into\n"
" the passes: tr__cl_gemm_cp_ok), so the per-tile cost is an add per copy. GU (A of a gate_up product, CK): the\n"
" tile's second half of rows are the ups of the first, gh rows further. */\n"
"#define TR_CQ (TR_GEMM_TK % 8 == 0 ? 8 : TR_GEMM_TK)\n"
"#define TR_CPLOOP(N1, N2, DST, SRC, BYTES, OK)                                                                 \\\n"
"  if (full) {                                                                                                \\\n"
"    _Pragma(\"unroll\") for (i1 = 0; i1 < (N1); i1++)                                                          \\\n"
"    _Pragma(\"unroll\") for (i2 = 0; i2 < (N2); i2++) TR_CPn(BYTES, DST, SRC, BYTES);                          \\\n"
"  } else {                                                                                                   \\\n"
"    _Pragma(\"unroll\") for (i1 = 0; i1 < (N1); i1++)                                                          \\\n"
"    _Pragma(\"unroll\") for (i2 = 0; i2 < (N2); i2++) {                                                        \\\n"
"      const int ok_ = OK;                                                                                    \\\n"
"      TR_CPn(BYTES, DST, ok_ ? SRC : P, ok_ ? BYTES : 0);                                                    \\\n"
"    }                                                                                                        \\\n"
"  }\n"
"#define TR_CPn(b, d, s, n) TR_CP##b(d, s, n)\n"
"#define TR_GUP(i2) (GU && (i2) >= H ? (i2) - H : (i2))\n"
"static inline void tr_cp_tile(__global const float *P, long ld, __local float *S, const int SX, const int XT, const int CK,\n"
"                              int x0, int X, int k0, int ke, int v, int tid, const int GU, long gh) {\n"
"  const int full = x0 + (GU ? XT / 2 : XT) <= X && k0 + TR_GEMM_TK <= ke;\n"
"  int i1, i2;\n"
"  if (CK) { /* i1: depth block of CQ, i2: row pass of NT / CQ rows */\n"
"    const int RP = TR_NT / TR_CQ, r = tid / TR_CQ, qq = tid % TR_CQ, H = XT / RP / 2;\n"
"    const long gl = gh * ld;\n"
"    __global const float *p = P + (long)(x0 + r) * ld + (k0 + qq);\n"
"    __local float *s = S + qq * SX + r;\n"
"    TR_CPLOOP(TR_GEMM_TK / TR_CQ, XT / RP, s + i1 * TR_CQ * SX + i2 * RP,\n"
"              p + TR_GUP(i2) * (RP * ld) + (GU && i2 >= H ? gl : 0) + i1 * TR_CQ, 4,\n"
"              x0 + r + TR_GUP(i2) * RP < X && k0 + qq + i1 * TR_CQ < ke)\n"
"  } else if (v && x0 + XT <= X) { /* i2: depth pass of NT / (XT / 4) rows, float4 columns */\n"
"    const int RQ = TR_NT / (XT / 4), c = tid % (XT / 4), q = tid / (XT / 4);\n";
static const char tr__cl_src_gemm_7[] =
"    __global const float *p = P + (long)(k0 + q) * ld + (x0 + 4 * c);\n"
"    __local float *s = S + q * SX + 4 * c;\n"
"    TR_CPLOOP(1, TR_GEMM_TK / RQ, s + i2 * RQ * SX, p + i2 * (RQ * ld), 16, k0 + q + i2 * RQ < ke)\n"
"  } else {\n"
"    const int RQ = TR_NT / XT, c = tid % XT, q = tid / XT;\n"
"    __global const float *p = P + (long)(k0 + q) * ld + (x0 + c);\n"
"    __local float *s = S + q * SX + c;\n"
"    TR_CPLOOP(1, TR_GEMM_TK / RQ, s + i2 * RQ * SX, p + i2 * (RQ * ld), 4, x0 + c < X && k0 + q + i2 * RQ < ke)\n"
"  }\n"
"}\n"
"/* tr_sgemm with every tile staged by cp.async, TR_GEMM_ST buffers deep: the copies of tile u = t + ST - 1 are in\n"
" flight while tile t is multiplied, one barrier per tile. Same grid, outputs and accumulation order as tr_sgemm.\n"
" Tiles run over (batch, depth) in order; counters instead of divisions (a division per tile was visible). */\n"
"static inline void tr_sgemm_cp(__global const float *A, long lda, long sA, __global const float *B, long ldb, long sB,\n"
"              __global float *C, long ldc, int M, int N, int K, int acc, int nb, int bpg, int ks, int kc, int z, int al,\n"
"              __local float *As0, __local float *Bs0, const int TA, const int TB, const int WL, const int KT,\n"
"              const int GU, long gh, __global float *X, long ldx, int wc) {\n"
"  TR_GEMM_TILE_INDEX\n"
"  float c[TR_GEMM_WM][TR_GEMM_WN];\n"
"  int i, j, l, u, ib = b0, ik = kb, is = 0, ck = kb, cs = 0, kn = TR_GEMM_TK;\n"
"#pragma unroll\n"
"  for (i = 0; i < TR_GEMM_WM; i++)\n"
"#pragma unroll\n"
"    for (j = 0; j < TR_GEMM_WN; j++) c[i][j] = 0.0f;\n"
"  for (u = 0; u < nt + TR_GEMM_ST - 1; u++) { /* copy tile u (batch ib, depth ik, buffer is), multiply tile u - (ST - 1) */\n"
"    if (u >= TR_GEMM_ST - 1) { /* that tile has landed (each work-item waits for its copies); the one before is done */\n"
"      TR_CPWAIT();\n"
"      barrier(CLK_LOCAL_MEM_FENCE);\n"
"    }\n"
"    if (u < nt) {\n"
"      tr_cp_tile(A + (long)ib * sA, lda, As0 + is * TR_ASZ, TR_SA, TR_GEMM_TM, !TA, m0, M, ik, ke, al & 1, tid, GU, gh);\n"
"      tr_cp_tile(B + (long)ib * sB, ldb, Bs0 + is * TR_BSZ, TR_SB, TR_GEMM_TN, TB, n0, N, ik, ke, al & 2, tid, 0, 0);\n"
"      ik += TR_GEMM_TK;\n"
"      if (ik >= ke) ik = kb, ib++;\n"
"      is = is + 1 == TR_GEMM_ST ? 0 : is + 1;\n"
"    }\n"
"    TR_CPCOMMIT();\n"
"    if (u >= TR_GEMM_ST - 1) {\n"
"      __local const float *As = As0 + cs * TR_ASZ, *Bs = Bs0 + cs * TR_BSZ;\n"
"      int kk;\n"
"      if (KT) kn = min(TR_GEMM_TK, ke - ck); /* the last tile of a range: only its depth */\n"
"      if (kn == TR_GEMM_TK) {\n"
"#pragma unroll\n"
"        for (kk = 0; kk < TR_GEMM_TK; kk++) { TR_KSTEP(kk) }\n"
"      } else {\n"
"#pragma unroll 1\n"
"        for (kk = 0; kk < kn; kk++) { TR_KSTEP(kk) }\n"
"      }\n"
"      ck += TR_GEMM_TK;\n"
"      if (ck >= ke) ck = kb;\n"
"      cs = cs + 1 == TR_GEMM_ST ? 0 : cs + 1;\n"
"    }\n"
"  }\n"
"  if (GU) {\n"
"    TR_GUSTORE\n"
"  } else {\n"
"    TR_CSTORE\n"
"  }\n"
"}\n"
"#define TR_SGEMM_K(T, TA, TB, WL, DB, KT, UV, SW, GU, CPA)                                                                              \\\n"
"  __kernel __attribute__((reqd_work_group_size(TR_RN, TR_RM, 1))) void TR_GNAME(T, TR_GEMM_TM, TR_GEMM_TN, TR_GEMM_TK,  \\\n"
"    TR_GEMM_WM, TR_GEMM_WN, TR_GEMM_VW)(__global const float *A, ulong A_off, long lda, long sA,                   \\\n"
"    __global const float *B, ulong B_off, long ldb, long sB, __global float *C, ulong C_off, long ldc, long sC,     \\\n"
"    int M, int N, int K, int acc, int nb, int bpg, int ks, int kc, int z0, long so, long gh,                      \\\n"
"    __global float *X, ulong X_off, long ldx, long sx, int wc) {                                                    \\\n"
"    __local float4 As4[(TR_NBUF(CPA) * TR_ASZ + 3) / 4], Bs4[(TR_NBUF(CPA) * TR_BSZ + 3) / 4];                                                     \\\n"
"    const int z = z0 + get_group_id(2);                                                                             \\\n"
"    const ulong co = C_off + (ulong)z * (ulong)sC;                                                                  \\\n";
static const char tr__cl_src_gemm_8[] =
"    const ulong sa = SW == 1 ? (ulong)so : 0, sb = SW == 2 ? (ulong)so : 0;                                         \\\n"
"    const int al = (((A_off | (ulong)lda | (ulong)sA | sa) & 3) == 0) | ((((B_off | (ulong)ldb | (ulong)sB | sb) & 3) == 0) << 1) | \\\n"
"           ((((co | (ulong)ldc | (ulong)gh) & 3) == 0) << 2) | ((((X_off + (ulong)z * (ulong)sx) | (ulong)ldx) & 3) == 0) << 3; \\\n"
"    if (CPA)                                                                                                        \\\n"
"      tr_sgemm_cp(A + A_off, lda, sA, B + B_off, ldb, sB, C + co, ldc, M, N, K, acc, nb, bpg, ks, kc, z, al,        \\\n"
"          (__local float *)As4, (__local float *)Bs4, TA, TB, TR_WL(WL), KT, GU, gh, X + X_off + (ulong)z * (ulong)sx, ldx, wc); \\\n"
"    else                                                                                                            \\\n"
"      tr_sgemm(A + A_off, lda, sA, B + B_off, ldb, sB, C + co, ldc, M, N, K, acc, nb, bpg, ks, kc, z, al,           \\\n"
"          (__local float *)As4, (__local float *)Bs4, TA, TB, TR_WL(WL), TR_DB(DB), KT, UV, SW, so, GU, gh,         \\\n"
"          X + X_off + (ulong)z * (ulong)sx, ldx, wc);                                                               \\\n"
"  }\n"
"/* The kernels. TR_MMA_ONLY: the tensor-core program (tr__cl_mma_ready), which has only the tr_k_mma_* ones. */\n"
"#ifndef TR_MMA_ONLY\n"
"/* KT (short last k-tile computed to its depth) and UV (vload4 for unaligned rows) only where measured faster on\n"
" the H200: nn (K = 97 token mix, lda = 97: +11%); elsewhere they cost ~2% through code generation. */\n"
"TR_SGEMM_K(nn, 0, 0, 1, 0, 1, 1, 0, 0, 0)\n"
"TR_SGEMM_K(nt, 0, 1, 0, 1, 0, 0, 0, 0, 0)\n"
"TR_SGEMM_K(tn, 1, 0, 1, 0, 0, 0, 0, 0, 0)\n"
"TR_SGEMM_K(tt, 1, 1, 0, 1, 0, 0, 0, 0, 0)\n"
"/* The token mix's SwiGLU fused into the products around it. nn_gu: W_tgu . x_b writes act = silu(gate) * up from\n"
" its registers (gate | up rows). nt_swb: the weight gradient's B operand is read as silu(gate) * up. (The same\n"
" fusions of the channel SwiGLU were slower on the H200 than the elementwise pass they save: registers.) */\n"
"#if (TR_GEMM_VW == 4 && TR_GEMM_WM % 8 == 0) || (TR_GEMM_VW == 1 && TR_GEMM_WM % 2 == 0)\n"
"TR_SGEMM_K(nn_gu, 0, 0, 1, 0, 1, 1, 0, 1, 0)\n"
"#endif\n"
"TR_SGEMM_K(nt_swb, 0, 1, 0, 1, 0, 0, 2, 0, 0)\n"
"/* cp.async staging (NVIDIA sm_80+): the plain cases; WL per case as measured on the H200 */\n"
"#if TR_GEMM_CP\n"
"TR_SGEMM_K(nn_cp, 0, 0, 1, 1, 1, 0, 0, 0, 1)\n"
"TR_SGEMM_K(nt_cp, 0, 1, 1, 1, 0, 0, 0, 0, 1)\n"
"TR_SGEMM_K(tn_cp, 1, 0, 1, 1, 0, 0, 0, 0, 1)\n"
"TR_SGEMM_K(tt_cp, 1, 1, 1, 1, 0, 0, 0, 0, 1)\n"
"#if TR_GEMM_VW == 4 && TR_GEMM_WM % 8 == 0 && (TR_GEMM_TM / 2) % (TR_NT / TR_CQ) == 0 /* = tr__cl_gemm_gu_cp_ok */\n"
"TR_SGEMM_K(nn_gu_cp, 0, 0, 1, 1, 1, 0, 0, 1, 1)\n"
"#endif\n"
"#endif\n"
"#endif /* TR_MMA_ONLY */\n"
"/* Tensor cores (TR_GEMM_MMA: 1 = inline-PTX mma.sync on NVIDIA sm_80+; 2 = the same tiles, layout and grid with plain\n"
" fma, so that the staging and the epilogue are tested on any device). For models computing in bfloat16 / float16,\n"
" whose GEMM operands are values of that type: each tile is converted once (round to nearest even, exact for such\n"
" values) to 16-bit pairs of consecutive depths in 32-bit words in local memory, x-major (As[m][k], Bs[n][k]) as the\n"
" fragments want them. Tile 128 x 128 x 32, 256 work-items; warp w owns the 64 x 32 block of C at rows (w / 4) * 64,\n"
" columns (w % 4) * 32, as 4 x 4 m16n8k16 fragments accumulated in fp32; the epilogue can round C to the precision. Two local buffers (40 KiB): the next tile is\n"
" fetched into registers while this one is multiplied, one barrier per tile. Same arguments, grid (batches, K\n"
" pieces) and outputs as tr_sgemm. Built in a program of their own (TR_MMA_ONLY), at the first such product. */\n"
"#ifdef TR_GEMM_MMA\n"
"#define TR_MT 128                       /* tile rows and columns */\n"
"#define TR_MK 32                        /* tile depth */\n"
"#define TR_MP (TR_MK / 2 + 4)           /* local pitch in words: a warp's fragment loads hit 32 distinct banks */\n";
static const char tr__cl_src_gemm_9[] =
"#define TR_MW (TR_MT * TR_MK / 2 / 256) /* words of a tile each work-item converts, per operand */\n"
"/* the 16-bit pattern of x as bfloat16 or (F16) float16: x rounded by tr_round1 (ops.cl, the one rounding rule), then\n"
" repacked exactly; integer arithmetic, no extension needed */\n"
"static inline uint tr_mma_bits(float x, const int F16) {\n"
"  const uint u = as_uint(tr_round1(x, F16 ? 2 : 1)), a = u & 0x7fffffffu, sg = (u >> 16) & 0x8000u;\n"
"  if (!F16) return u >> 16;\n"
"  if (a >= 0x7f800000u) return sg | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u); /* inf, NaN */\n"
"  if (a < 0x38800000u) return sg | (uint)(as_float(a) * 16777216.0f);        /* subnormal: a multiple of 2^-24 */\n"
"  return sg | ((a - 0x38000000u) >> 13);\n"
"}\n"
"/* the float value of the 16-bit pattern in the low half of w */\n"
"static inline float tr_mma_val(uint w, const int F16) {\n"
"  const uint h = w & 0xffffu, sg = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;\n"
"  if (!F16) return as_float(h << 16);\n"
"  if (e == 0) return as_float(sg | as_uint((float)m * 5.9604644775390625e-8f)); /* subnormal: m 2^-24 */\n"
"  return as_float(sg | (e == 31 ? 0x7f800000u | (m << 13) : ((e + 112) << 23) | (m << 13)));\n"
"}\n"
"/* lo, hi as one word (lo in the low half: the lower depth, as the fragments hold them) */\n"
"static inline uint tr_mma_pack(float lo, float hi, const int F16) {\n"
"#if TR_GEMM_MMA == 1\n"
"  uint r;\n"
"  if (F16) __asm__(\"cvt.rn.f16x2.f32 %0, %1, %2;\" : \"=r\"(r) : \"f\"(hi), \"f\"(lo));\n"
"  else __asm__(\"cvt.rn.bf16x2.f32 %0, %1, %2;\" : \"=r\"(r) : \"f\"(hi), \"f\"(lo));\n"
"  return r;\n"
"#else\n"
"  return tr_mma_bits(lo, F16) | tr_mma_bits(hi, F16) << 16;\n"
"#endif\n"
"}\n"
"/* Word l of this work-item's share of a tile: row x (of 128) and depth pair kp (of 16). k-contiguous operands (CK)\n"
" run kp fastest, k-major ones x fastest, so that consecutive work-items read consecutive addresses. */\n"
"#define TR_MIDX(CK, l) \\\n"
"  const int e = tid + (l) * 256, x = (CK) ? e / (TR_MK / 2) : e % TR_MT, kp = (CK) ? e % (TR_MK / 2) : e / TR_MT;\n"
"/* w = the work-item's words of the tile of P at rows x0.. (< X), depths k0.. (< ke); zeros outside */\n"
"static inline void tr_mma_fetch(__global const float *P, long ld, const int CK, int x0, int X, int k0, int ke, int tid,\n"
"                                uint *w, const int F16) {\n"
"  const int full = x0 + TR_MT <= X && k0 + TR_MK <= ke;\n"
"  const long s1 = CK ? 1 : ld; /* the next depth */\n"
"  int l;\n"
"#pragma unroll\n"
"  for (l = 0; l < TR_MW; l++) {\n"
"    TR_MIDX(CK, l)\n"
"    const int k = k0 + 2 * kp;\n"
"    __global const float *p = P + (CK ? (long)(x0 + x) * ld + k : (long)k * ld + (x0 + x));\n"
"    float lo = 0.0f, hi = 0.0f;\n"
"    if (full) {\n"
"      lo = p[0], hi = p[s1];\n"
"    } else if (x0 + x < X) {\n"
"      if (k < ke) lo = p[0];\n"
"      if (k + 1 < ke) hi = p[s1];\n"
"    }\n"
"    w[l] = tr_mma_pack(lo, hi, F16);\n"
"  }\n"
"}\n"
"static inline void tr_mma_stage(__local uint *S, const int CK, int tid, const uint *w) {\n"
"  int l;\n"
"#pragma unroll\n"
"  for (l = 0; l < TR_MW; l++) {\n"
"    TR_MIDX(CK, l)\n"
"    S[x * TR_MP + kp] = w[l];\n"
"  }\n"
"}\n"
"/* The same for an interior tile whose rows are 16-byte aligned, with float4 loads (a quarter of the load instructions):\n"
" CK: four float4 along k per work-item (row e / 8, depths 4 (e % 8)..), two words each; k-major: two pairs of float4\n"
" along x at depths k, k + 1 (depth pair e % 16, columns 4 (e / 16)..), four words each. tr_mma_vstage places them.\n"
" k-major: a warp spans 16 depth pairs of 2 column groups, so that its stores (pitch 20 words) hit 32 distinct banks\n"
" (with the 32 column groups of one depth pair they hit 2, a 16-way conflict); two lanes read each 32-byte sector. */\n"
"static inline void tr_mma_vfetch(__global const float *P, long ld, const int CK, int x0, int k0, int tid, uint *w, const int F16) {\n"
"  int l;\n"
"  if (CK) {\n"
"#pragma unroll\n"
"    for (l = 0; l < 4; l++) {\n"
"      const int e = tid + l * 256;\n"
"      const float4 v = *(__global const float4 *)(P + (long)(x0 + (e >> 3)) * ld + k0 + 4 * (e & 7));\n"
"      w[2 * l] = tr_mma_pack(v.s0, v.s1, F16), w[2 * l + 1] = tr_mma_pack(v.s2, v.s3, F16);\n"
"    }\n"
"  } else {\n";
static const char tr__cl_src_gemm_10[] =
"#pragma unroll\n"
"    for (l = 0; l < 2; l++) {\n"
"      const int e = tid + l * 256;\n"
"      __global const float *p = P + (long)(k0 + 2 * (e & 15)) * ld + x0 + 4 * (e >> 4);\n"
"      const float4 lo = *(__global const float4 *)p, hi = *(__global const float4 *)(p + ld);\n"
"      w[4 * l] = tr_mma_pack(lo.s0, hi.s0, F16), w[4 * l + 1] = tr_mma_pack(lo.s1, hi.s1, F16);\n"
"      w[4 * l + 2] = tr_mma_pack(lo.s2, hi.s2, F16), w[4 * l + 3] = tr_mma_pack(lo.s3, hi.s3, F16);\n"
"    }\n"
"  }\n"
"}\n"
"static inline void tr_mma_vstage(__local uint *S, const int CK, int tid, const uint *w) {\n"
"  int l, i;\n"
"  if (CK) {\n"
"#pragma unroll\n"
"    for (l = 0; l < 4; l++) {\n"
"      const int e = tid + l * 256;\n"
"      *(__local uint2 *)(S + (e >> 3) * TR_MP + 2 * (e & 7)) = (uint2)(w[2 * l], w[2 * l + 1]);\n"
"    }\n"
"  } else {\n"
"#pragma unroll\n"
"    for (l = 0; l < 2; l++) {\n"
"      const int e = tid + l * 256;\n"
"#pragma unroll\n"
"      for (i = 0; i < 4; i++) S[(4 * (e >> 4) + i) * TR_MP + (e & 15)] = w[4 * l + i];\n"
"    }\n"
"  }\n"
"}\n"
"/* c (+)= a b for one m16n8k16 fragment: a = rows g, g + 8 at depth pairs q, q + 4 (4 words), b = column g at q, q + 4 */\n"
"#if TR_GEMM_MMA == 1\n"
"#define TR_MMA_BF16 \"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 \"\n"
"#define TR_MMA_F16 \"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 \"\n"
"#define TR_MMA_OPS \"{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\"\n"
"#define TR_MMA_ARGS(c, a, b) \\\n"
"  : \"=f\"(c[0]), \"=f\"(c[1]), \"=f\"(c[2]), \"=f\"(c[3]) \\\n"
"  : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b[0]), \"r\"(b[1]), \"f\"(c[0]), \"f\"(c[1]), \"f\"(c[2]), \"f\"(c[3])\n"
"#endif\n"
"static inline void tr_sgemm_mma(__global const float *A, long lda, long sA, __global const float *B, long ldb, long sB,\n"
"              __global float *C, long ldc, int M, int N, int K, int acc, int nb, int bpg, int ks, int kc, int z, int al,\n"
"              __local uint *As0, __local uint *Bs0, const int TA, const int TB, const int F16, int rnd) {\n"
"  const int tid = get_local_id(0), g = (tid & 31) >> 2, q = tid & 3, wm = (tid >> 7) * 64, wn = ((tid >> 5) & 3) * 32;\n"
"  const int n0 = get_group_id(0) * TR_MT, m0 = get_group_id(1) * TR_MT;\n"
"  const int bz = z / ks, kz = z - bz * ks;\n"
"  const int b0 = bz * bpg, b1 = min(nb, b0 + bpg), kb = kz * kc, ke = min(K, kb + kc);\n"
"  const int ntk = ke > kb ? (ke - kb + TR_MK - 1) / TR_MK : 0;\n"
"  const int nt = (b1 > b0 ? b1 - b0 : 0) * ntk;\n"
"  float c[4][4][4];\n"
"  uint wa[TR_MW], wb[TR_MW];\n"
"  int i, j, r, s, t, ib = b0, ik = kb, va = 0, vb = 0;\n"
"#pragma unroll\n"
"  for (i = 0; i < 4; i++)\n"
"#pragma unroll\n"
"    for (j = 0; j < 4; j++)\n"
"#pragma unroll\n"
"      for (r = 0; r < 4; r++) c[i][j][r] = 0.0f;\n"
"  for (t = -1; t < nt; t++) {\n"
"    __local uint *As = As0 + (t & 1) * (TR_MT * TR_MP), *Bs = Bs0 + (t & 1) * (TR_MT * TR_MP);\n"
"    if (t >= 0) { /* stage the words fetched last round */\n"
"      if (va) tr_mma_vstage(As, !TA, tid, wa);\n"
"      else tr_mma_stage(As, !TA, tid, wa);\n"
"      if (vb) tr_mma_vstage(Bs, TB, tid, wb);\n"
"      else tr_mma_stage(Bs, TB, tid, wb);\n"
"      barrier(CLK_LOCAL_MEM_FENCE);\n"
"    }\n"
"    if (t + 1 < nt) { /* the next tile into registers (batch ib, depth ik) */\n"
"      va = (al & 1) && m0 + TR_MT <= M && ik + TR_MK <= ke, vb = (al & 2) && n0 + TR_MT <= N && ik + TR_MK <= ke;\n"
"      if (va) tr_mma_vfetch(A + (long)ib * sA, lda, !TA, m0, ik, tid, wa, F16);\n"
"      else tr_mma_fetch(A + (long)ib * sA, lda, !TA, m0, M, ik, ke, tid, wa, F16);\n"
"      if (vb) tr_mma_vfetch(B + (long)ib * sB, ldb, TB, n0, ik, tid, wb, F16);\n"
"      else tr_mma_fetch(B + (long)ib * sB, ldb, TB, n0, N, ik, ke, tid, wb, F16);\n"
"      ik += TR_MK;\n"
"      if (ik >= ke) ik = kb, ib++;\n"
"    }\n"
"    if (t < 0) continue;\n"
"#pragma unroll\n"
"    for (s = 0; s < TR_MK / 16; s++) {\n"
"#if TR_GEMM_MMA == 1\n"
"      uint a[4][4], b[4][2];\n"
"#pragma unroll\n"
"      for (i = 0; i < 4; i++) {\n"
"        __local const uint *pa = As + (wm + i * 16 + g) * TR_MP + s * 8 + q;\n"
"        a[i][0] = pa[0], a[i][1] = pa[8 * TR_MP], a[i][2] = pa[4], a[i][3] = pa[8 * TR_MP + 4];\n"
"      }\n"
"#pragma unroll\n"
"      for (j = 0; j < 4; j++) {\n";
static const char tr__cl_src_gemm_11[] =
"        __local const uint *pb = Bs + (wn + j * 8 + g) * TR_MP + s * 8 + q;\n"
"        b[j][0] = pb[0], b[j][1] = pb[4];\n"
"      }\n"
"#pragma unroll\n"
"      for (i = 0; i < 4; i++)\n"
"#pragma unroll\n"
"        for (j = 0; j < 4; j++) {\n"
"          if (F16) __asm__ volatile(TR_MMA_F16 TR_MMA_OPS TR_MMA_ARGS(c[i][j], a[i], b[j]));\n"
"          else __asm__ volatile(TR_MMA_BF16 TR_MMA_OPS TR_MMA_ARGS(c[i][j], a[i], b[j]));\n"
"        }\n"
"#else /* the fragment's outputs: rows g (r < 2) or g + 8, columns 2q + (r & 1), from the tile in local memory */\n"
"      for (i = 0; i < 4; i++)\n"
"        for (j = 0; j < 4; j++)\n"
"          for (r = 0; r < 4; r++) {\n"
"            __local const uint *pa = As + (wm + i * 16 + g + (r >> 1) * 8) * TR_MP + s * 8;\n"
"            __local const uint *pb = Bs + (wn + j * 8 + 2 * q + (r & 1)) * TR_MP + s * 8;\n"
"            int kk;\n"
"            for (kk = 0; kk < 16; kk++)\n"
"              c[i][j][r] = fma(tr_mma_val(pa[kk >> 1] >> (16 * (kk & 1)), F16), tr_mma_val(pb[kk >> 1] >> (16 * (kk & 1)), F16), c[i][j][r]);\n"
"          }\n"
"#endif\n"
"    }\n"
"  }\n"
"#pragma unroll\n"
"  for (i = 0; i < 4; i++)\n"
"#pragma unroll\n"
"    for (r = 0; r < 2; r++) {\n"
"      const int m = m0 + wm + i * 16 + g + r * 8;\n"
"      __global float *cr = C + (long)m * ldc;\n"
"      if (m >= M) continue;\n"
"#pragma unroll\n"
"      for (j = 0; j < 4; j++) {\n"
"        const int n = n0 + wn + j * 8 + 2 * q;\n"
"        float2 v = (float2)(c[i][j][2 * r], c[i][j][2 * r + 1]);\n"
"        if ((al & 4) && n + 1 < N) { /* C rows 8-byte aligned (n is even) */\n"
"          if (acc) v += *(__global float2 *)(cr + n);\n"
"          if (rnd) v = (float2)(tr_round1(v.s0, rnd), tr_round1(v.s1, rnd));\n"
"          *(__global float2 *)(cr + n) = v;\n"
"        } else {\n"
"          if (acc) v += (float2)(n < N ? cr[n] : 0.0f, n + 1 < N ? cr[n + 1] : 0.0f);\n"
"          if (rnd) v = (float2)(tr_round1(v.s0, rnd), tr_round1(v.s1, rnd));\n"
"          if (n < N) cr[n] = v.s0;\n"
"          if (n + 1 < N) cr[n + 1] = v.s1;\n"
"        }\n"
"      }\n"
"    }\n"
"}\n"
"/* tr_k_mma_<case>_<bf16|f16>: the arguments of the SGEMM kernels; wc (rnd): C rounded to bfloat16 (1) / float16 (2)\n"
" after the product (and the accumulation), as tr_k_round would */\n"
"#define TR_MMA_K(T, TA, TB, D, F16)                                                                                        \\\n"
"  __kernel __attribute__((reqd_work_group_size(256, 1, 1))) void tr_k_mma_##T##_##D(__global const float *A, ulong A_off,  \\\n"
"    long lda, long sA, __global const float *B, ulong B_off, long ldb, long sB, __global float *C, ulong C_off, long ldc,   \\\n"
"    long sC, int M, int N, int K, int acc, int nb, int bpg, int ks, int kc, int z0, long so, long gh,                     \\\n"
"    __global float *X, ulong X_off, long ldx, long sx, int wc) {                                                         \\\n"
"    __local uint4 As[2 * TR_MT * TR_MP / 4], Bs[2 * TR_MT * TR_MP / 4]; /* 16-byte aligned: uint2 stores */               \\\n"
"    const int z = z0 + get_group_id(2);                                                                                  \\\n"
"    const ulong co = C_off + (ulong)z * (ulong)sC;                                                                       \\\n"
"    const int al = (((A_off | (ulong)lda | (ulong)sA) & 3) == 0) | ((((B_off | (ulong)ldb | (ulong)sB) & 3) == 0) << 1) |  \\\n"
"                   ((((co | (ulong)ldc) & 1) == 0) << 2);                                                              \\\n"
"    tr_sgemm_mma(A + A_off, lda, sA, B + B_off, ldb, sB, C + co, ldc, M, N, K, acc, nb, bpg, ks, kc, z, al,              \\\n"
"                 (__local uint *)As, (__local uint *)Bs, TA, TB, F16, wc);                                          \\\n"
"  }\n"
"TR_MMA_K(nn, 0, 0, bf16, 0)\n"
"TR_MMA_K(nt, 0, 1, bf16, 0)\n"
"TR_MMA_K(tn, 1, 0, bf16, 0)\n"
"TR_MMA_K(tt, 1, 1, bf16, 0)\n"
"TR_MMA_K(nn, 0, 0, f16, 1)\n"
"TR_MMA_K(nt, 0, 1, f16, 1)\n"
"TR_MMA_K(tn, 1, 0, f16, 1)\n"
"TR_MMA_K(tt, 1, 1, f16, 1)\n"
"#endif\n"
"#ifndef TR_MMA_ONLY\n"
"/* C (=|+=) sum_z P[z] in z order (P: nz partials of M x N, packed). Deterministic split-K / batch sum. */\n";
static const char tr__cl_src_gemm_12[] =
"__kernel void tr_k_gemm_reduce(__global const float *P, ulong P_off, int nz, int M, int N,\n"
"               __global float *C, ulong C_off, long ldc, int acc) {\n"
"  const int n = get_global_id(0), m = get_global_id(1);\n"
"  const long mn = (long)M * N, idx = (long)m * N + n;\n"
"  float s;\n"
"  int z;\n"
"  if (n >= N || m >= M) return;\n"
"  P += P_off;\n"
"  C += C_off + (long)m * ldc + n;\n"
"  s = acc ? *C : 0.0f;\n"
"  for (z = 0; z < nz; z++) s += P[z * mn + idx];\n"
"  *C = s;\n"
"}\n"
"/* Y = X^T (X: R x C rows of ldx, Y: C x R rows of ldy), 32 x 32 tiles through local memory; work-group 32 x 8. */\n"
"__kernel __attribute__((reqd_work_group_size(32, 8, 1))) void tr_k_transpose(__global const float *X, ulong X_off, long ldx,\n"
"               int R, int C, __global float *Y, ulong Y_off, long ldy) {\n"
"  __local float t[32][33];\n"
"  const int c0 = get_group_id(0) * 32, r0 = get_group_id(1) * 32, lx = get_local_id(0), ly = get_local_id(1);\n"
"  int i;\n"
"  X += X_off, Y += Y_off;\n"
"  for (i = ly; i < 32; i += 8)\n"
"    if (r0 + i < R && c0 + lx < C) t[i][lx] = X[(long)(r0 + i) * ldx + c0 + lx];\n"
"  barrier(CLK_LOCAL_MEM_FENCE);\n"
"  for (i = ly; i < 32; i += 8)\n"
"    if (c0 + i < C && r0 + lx < R) Y[(long)(c0 + i) * ldy + r0 + lx] = t[lx][i];\n"
"}\n"
"#endif /* TR_MMA_ONLY */\n";
#define TR__CL_SRC_GEMM_LIST \
    tr__cl_src_gemm_1, tr__cl_src_gemm_2, tr__cl_src_gemm_3, tr__cl_src_gemm_4, tr__cl_src_gemm_5, \
    tr__cl_src_gemm_6, tr__cl_src_gemm_7, tr__cl_src_gemm_8, tr__cl_src_gemm_9, tr__cl_src_gemm_10, \
    tr__cl_src_gemm_11, tr__cl_src_gemm_12
/* >>cl-embed-end */
/* >>cl-embed tools/opencl/attention.cl */
static const char tr__cl_src_attention_1[] =
"#line 1 \"tools/opencl/attention.cl\"\n"
"/* Flash attention, forward. Work-group (TD, BQ): row qi of a block of BQ queries, dj = its slice of the\n"
" head dimension (d = dj + TD*c). Loops over blocks of BK keys with an online softmax; never stores S x S. */\n"
"#define TR_ATT_TD 16\n"
"#define TR_QROW(r) (qkv + ((long)b * S + (r)) * ld + (long)h * hd)\n"
"static inline void tr_att_fwd(__global const float *qkv, __global float *o, __global float *lse, int S, int H, int hd,\n"
"           int nqb, int BK, __local float *Qs, __local float *Ks, __local float *Vs, __local float *Ps, const int NC) {\n"
"  const int dj = get_local_id(0), qi = get_local_id(1), BQ = get_local_size(1), NTH = TR_ATT_TD * BQ;\n"
"  const int tid = qi * TR_ATT_TD + dj, g = get_group_id(0), bh = g / nqb, q0 = (g - bh * nqb) * BQ;\n"
"  const int b = bh / H, h = bh - b * H, D = H * hd, sk = hd + 1, sp = BK + 1;\n"
"  const long ld = 3L * D;\n"
"  const float scale = 1.0f / sqrt((float)hd);\n"
"  float oa[16], m = -INFINITY, l = 0.0f, mx, al, ps, p;\n"
"  int e, i, j, d, c, k0, kn;\n"
"  for (c = 0; c < NC; c++) oa[c] = 0.0f;\n"
"  for (e = tid; e < BQ * hd; e += NTH) {\n"
"    i = e / hd, d = e - i * hd;\n"
"    Qs[i * sk + d] = q0 + i < S ? TR_QROW(q0 + i)[d] : 0.0f;\n"
"  }\n"
"  for (k0 = 0; k0 < S; k0 += BK) {\n"
"    kn = min(BK, S - k0);\n"
"    barrier(CLK_LOCAL_MEM_FENCE);\n"
"    for (e = tid; e < kn * hd; e += NTH) {\n"
"      j = e / hd, d = e - j * hd;\n"
"      Ks[j * sk + d] = TR_QROW(k0 + j)[D + d];\n"
"      Vs[j * hd + d] = TR_QROW(k0 + j)[2 * D + d];\n"
"    }\n"
"    barrier(CLK_LOCAL_MEM_FENCE);\n"
"    { /* scores of keys dj + TD*n (n < 4: BK <= 64), q[d] read once for the four */\n"
"      float s4[4] = {0.0f, 0.0f, 0.0f, 0.0f}, qd;\n"
"      for (d = 0; d < hd; d++) {\n"
"        qd = Qs[qi * sk + d];\n"
"        for (c = 0; c < 4; c++)\n"
"          if (dj + TR_ATT_TD * c < kn) s4[c] = fma(qd, Ks[(dj + TR_ATT_TD * c) * sk + d], s4[c]);\n"
"      }\n"
"      for (c = 0; c < 4; c++)\n"
"        if (dj + TR_ATT_TD * c < BK) Ps[qi * sp + dj + TR_ATT_TD * c] = dj + TR_ATT_TD * c < kn ? s4[c] * scale : -INFINITY;\n"
"    }\n"
"    barrier(CLK_LOCAL_MEM_FENCE);\n"
"    mx = m;\n"
"    for (j = 0; j < kn; j++) mx = fmax(mx, Ps[qi * sp + j]);\n"
"    barrier(CLK_LOCAL_MEM_FENCE);\n"
"    for (j = dj; j < kn; j += TR_ATT_TD) Ps[qi * sp + j] = exp(Ps[qi * sp + j] - mx);\n"
"    barrier(CLK_LOCAL_MEM_FENCE);\n"
"    al = exp(m - mx);\n"
"    m = mx;\n"
"    ps = 0.0f;\n"
"    for (c = 0; c < NC; c++) oa[c] *= al;\n"
"    for (j = 0; j < kn; j++) {\n"
"      p = Ps[qi * sp + j];\n"
"      ps += p;\n"
"      for (c = 0; c < NC; c++) {\n"
"        d = dj + TR_ATT_TD * c;\n"
"        if (d < hd) oa[c] = fma(p, Vs[j * hd + d], oa[c]);\n"
"      }\n"
"    }\n"
"    l = l * al + ps;\n"
"  }\n"
"  if (q0 + qi < S) {\n"
"    __global float *orow = o + ((long)b * S + q0 + qi) * D + (long)h * hd;\n"
"    for (c = 0; c < NC; c++) {\n"
"      d = dj + TR_ATT_TD * c;\n"
"      if (d < hd) orow[d] = oa[c] / l;\n"
"    }\n"
"    if (dj == 0) lse[((long)b * H + h) * S + q0 + qi] = m + log(l);\n"
"  }\n"
"}\n"
"#define TR_ATT_FWD(NAME, NC)                                                                                         \\\n"
"  __kernel void NAME(__global const float *qkv, ulong qkv_off, __global float *o, ulong o_off, __global float *lse, \\\n"
"           ulong lse_off, int S, int H, int hd, int nqb, int BK, __local float *Qs, __local float *Ks,  \\\n"
"           __local float *Vs, __local float *Ps) {                                                       \\\n"
"    tr_att_fwd(qkv + qkv_off, o + o_off, lse + lse_off, S, H, hd, nqb, BK, Qs, Ks, Vs, Ps, NC);                 \\\n"
"  }\n"
"TR_ATT_FWD(tr_k_att_fwd64, 4)\n"
"TR_ATT_FWD(tr_k_att_fwd256, 16)\n"
"/* Dv[(b*H+h)*S+i] = dot(do_i, o_i) over the head's slice. */\n"
"__kernel void tr_k_att_dot(__global const float *o, ulong o_off, __global const float *dO, ulong dO_off,\n"
"             __global float *Dv, ulong Dv_off, int B, int S, int H, int hd) {\n"
"  const long r = get_global_id(0);\n"
"  long bh, i, base;\n"
"  float s = 0.0f;\n"
"  int d;\n"
"  if (r >= (long)B * H * S) return;\n"
"  bh = r / S, i = r - bh * S;\n"
"  base = ((bh / H) * S + i) * (long)H * hd + (bh % H) * (long)hd;\n";
static const char tr__cl_src_attention_2[] =
"  for (d = 0; d < hd; d++) s = fma(dO[dO_off + base + d], o[o_off + base + d], s);\n"
"  Dv[Dv_off + r] = s;\n"
"}\n"
"/* Backward, dk and dv: work-group (TD, BKb) owns a block of keys (row kj, slice dj) and loops over query\n"
" blocks of BQb rows, recomputing p = exp(q.k*scale - lse) and ds = p*(do.v - Dv). */\n"
"static inline void tr_att_dkdv(__global const float *qkv, __global const float *dO, __global const float *lse,\n"
"            __global const float *Dv, __global float *dqkv, int S, int H, int hd, int nkb, int BQb,\n"
"            __local float *Ks, __local float *Vs, __local float *Qs, __local float *Os,\n"
"            __local float *Ls, __local float *Ps, __local float *Ss, const int NC) {\n"
"  const int dj = get_local_id(0), kj = get_local_id(1), BKb = get_local_size(1), NTH = TR_ATT_TD * BKb;\n"
"  const int tid = kj * TR_ATT_TD + dj, g = get_group_id(0), bh = g / nkb, j0 = (g - bh * nkb) * BKb;\n"
"  const int b = bh / H, h = bh - b * H, D = H * hd, sk = hd + 1, sp = BKb + 1;\n"
"  const long ld = 3L * D, lrow = ((long)b * H + h) * S;\n"
"  const float scale = 1.0f / sqrt((float)hd);\n"
"  float dk[16], dv[16], p, ds;\n"
"  int e, i, j, d, c, i0, qn;\n"
"  for (c = 0; c < NC; c++) dk[c] = dv[c] = 0.0f;\n"
"  for (e = tid; e < BKb * hd; e += NTH) {\n"
"    j = e / hd, d = e - j * hd;\n"
"    Ks[j * sk + d] = j0 + j < S ? TR_QROW(j0 + j)[D + d] : 0.0f;\n"
"    Vs[j * sk + d] = j0 + j < S ? TR_QROW(j0 + j)[2 * D + d] : 0.0f;\n"
"  }\n"
"  for (i0 = 0; i0 < S; i0 += BQb) {\n"
"    qn = min(BQb, S - i0);\n"
"    barrier(CLK_LOCAL_MEM_FENCE);\n"
"    for (e = tid; e < qn * hd; e += NTH) {\n"
"      i = e / hd, d = e - i * hd;\n"
"      Qs[i * sk + d] = TR_QROW(i0 + i)[d];\n"
"      Os[i * sk + d] = dO[((long)b * S + i0 + i) * D + (long)h * hd + d];\n"
"    }\n"
"    for (e = tid; e < qn; e += NTH) Ls[e] = lse[lrow + i0 + e], Ls[BQb + e] = Dv[lrow + i0 + e];\n"
"    barrier(CLK_LOCAL_MEM_FENCE);\n"
"    { /* queries dj + TD*n (n < 4: BQb <= 64); k[d], v[d] read once for the four */\n"
"      float s4[4] = {0.0f, 0.0f, 0.0f, 0.0f}, p4[4] = {0.0f, 0.0f, 0.0f, 0.0f}, kd, vd;\n"
"      for (d = 0; d < hd; d++) {\n"
"        kd = Ks[kj * sk + d], vd = Vs[kj * sk + d];\n"
"        for (c = 0; c < 4; c++)\n"
"          if (dj + TR_ATT_TD * c < qn) {\n"
"            s4[c] = fma(Qs[(dj + TR_ATT_TD * c) * sk + d], kd, s4[c]);\n"
"            p4[c] = fma(Os[(dj + TR_ATT_TD * c) * sk + d], vd, p4[c]);\n"
"          }\n"
"      }\n"
"      for (c = 0; c < 4; c++) {\n"
"        i = dj + TR_ATT_TD * c;\n"
"        if (i < qn) {\n"
"          p = j0 + kj < S ? exp(s4[c] * scale - Ls[i]) : 0.0f;\n"
"          Ps[i * sp + kj] = p;\n"
"          Ss[i * sp + kj] = p * (p4[c] - Ls[BQb + i]);\n"
"        }\n"
"      }\n"
"    }\n"
"    barrier(CLK_LOCAL_MEM_FENCE);\n"
"    for (i = 0; i < qn; i++) {\n"
"      p = Ps[i * sp + kj], ds = Ss[i * sp + kj];\n"
"      for (c = 0; c < NC; c++) {\n"
"        d = dj + TR_ATT_TD * c;\n"
"        if (d < hd) {\n"
"          dv[c] = fma(p, Os[i * sk + d], dv[c]);\n"
"          dk[c] = fma(ds, Qs[i * sk + d], dk[c]);\n"
"        }\n"
"      }\n"
"    }\n"
"  }\n"
"  if (j0 + kj < S) {\n"
"    __global float *r = dqkv + ((long)b * S + j0 + kj) * ld + (long)h * hd;\n"
"    for (c = 0; c < NC; c++) {\n"
"      d = dj + TR_ATT_TD * c;\n"
"      if (d < hd) r[D + d] = dk[c] * scale, r[2 * D + d] = dv[c];\n"
"    }\n"
"  }\n"
"}\n"
"#define TR_ATT_DKDV(NAME, NC)                                                                                      \\\n"
"  __kernel void NAME(__global const float *qkv, ulong qkv_off, __global const float *dO, ulong dO_off,          \\\n"
"           __global const float *lse, ulong lse_off, __global const float *Dv, ulong Dv_off,          \\\n"
"           __global float *dqkv, ulong dqkv_off, int S, int H, int hd, int nkb, int BQb,               \\\n"
"           __local float *Ks, __local float *Vs, __local float *Qs, __local float *Os,                \\\n"
"           __local float *Ls, __local float *Ps, __local float *Ss) {                                 \\\n"
"    tr_att_dkdv(qkv + qkv_off, dO + dO_off, lse + lse_off, Dv + Dv_off, dqkv + dqkv_off, S, H, hd, nkb, BQb, \\\n"
"          Ks, Vs, Qs, Os, Ls, Ps, Ss, NC);                                                              \\\n";
static const char tr__cl_src_attention_3[] =
"  }\n"
"TR_ATT_DKDV(tr_k_att_dkdv64, 4)\n"
"TR_ATT_DKDV(tr_k_att_dkdv256, 16)\n"
"/* Backward, dq: work-group (TD, BQc) owns a block of queries and loops over key blocks of BKc. */\n"
"static inline void tr_att_dq(__global const float *qkv, __global const float *dO, __global const float *lse,\n"
"           __global const float *Dv, __global float *dqkv, int S, int H, int hd, int nqb, int BKc,\n"
"           __local float *Qs, __local float *Os, __local float *Ks, __local float *Vs, __local float *Ss,\n"
"           const int NC) {\n"
"  const int dj = get_local_id(0), qi = get_local_id(1), BQ = get_local_size(1), NTH = TR_ATT_TD * BQ;\n"
"  const int tid = qi * TR_ATT_TD + dj, g = get_group_id(0), bh = g / nqb, q0 = (g - bh * nqb) * BQ;\n"
"  const int b = bh / H, h = bh - b * H, D = H * hd, sk = hd + 1, sp = BKc + 1;\n"
"  const long ld = 3L * D, lrow = ((long)b * H + h) * S;\n"
"  const float scale = 1.0f / sqrt((float)hd);\n"
"  const int qv = q0 + qi < S;\n"
"  const float li = qv ? lse[lrow + q0 + qi] : 0.0f, di = qv ? Dv[lrow + q0 + qi] : 0.0f;\n"
"  float dq[16], ds;\n"
"  int e, i, j, d, c, k0, kn;\n"
"  for (c = 0; c < NC; c++) dq[c] = 0.0f;\n"
"  for (e = tid; e < BQ * hd; e += NTH) {\n"
"    i = e / hd, d = e - i * hd;\n"
"    Qs[i * sk + d] = q0 + i < S ? TR_QROW(q0 + i)[d] : 0.0f;\n"
"    Os[i * sk + d] = q0 + i < S ? dO[((long)b * S + q0 + i) * D + (long)h * hd + d] : 0.0f;\n"
"  }\n"
"  for (k0 = 0; k0 < S; k0 += BKc) {\n"
"    kn = min(BKc, S - k0);\n"
"    barrier(CLK_LOCAL_MEM_FENCE);\n"
"    for (e = tid; e < kn * hd; e += NTH) {\n"
"      j = e / hd, d = e - j * hd;\n"
"      Ks[j * sk + d] = TR_QROW(k0 + j)[D + d];\n"
"      Vs[j * sk + d] = TR_QROW(k0 + j)[2 * D + d];\n"
"    }\n"
"    barrier(CLK_LOCAL_MEM_FENCE);\n"
"    { /* keys dj + TD*n (n < 4: BKc <= 64); q[d], do[d] read once for the four */\n"
"      float s4[4] = {0.0f, 0.0f, 0.0f, 0.0f}, p4[4] = {0.0f, 0.0f, 0.0f, 0.0f}, qd, od, p;\n"
"      for (d = 0; d < hd; d++) {\n"
"        qd = Qs[qi * sk + d], od = Os[qi * sk + d];\n"
"        for (c = 0; c < 4; c++)\n"
"          if (dj + TR_ATT_TD * c < kn) {\n"
"            s4[c] = fma(qd, Ks[(dj + TR_ATT_TD * c) * sk + d], s4[c]);\n"
"            p4[c] = fma(od, Vs[(dj + TR_ATT_TD * c) * sk + d], p4[c]);\n"
"          }\n"
"      }\n"
"      for (c = 0; c < 4; c++) {\n"
"        j = dj + TR_ATT_TD * c;\n"
"        if (j < kn) {\n"
"          p = qv ? exp(s4[c] * scale - li) : 0.0f;\n"
"          Ss[qi * sp + j] = p * (p4[c] - di);\n"
"        }\n"
"      }\n"
"    }\n"
"    barrier(CLK_LOCAL_MEM_FENCE);\n"
"    for (j = 0; j < kn; j++) {\n"
"      ds = Ss[qi * sp + j];\n"
"      for (c = 0; c < NC; c++) {\n"
"        d = dj + TR_ATT_TD * c;\n"
"        if (d < hd) dq[c] = fma(ds, Ks[j * sk + d], dq[c]);\n"
"      }\n"
"    }\n"
"  }\n"
"  if (qv) {\n"
"    __global float *r = dqkv + ((long)b * S + q0 + qi) * ld + (long)h * hd;\n"
"    for (c = 0; c < NC; c++) {\n"
"      d = dj + TR_ATT_TD * c;\n"
"      if (d < hd) r[d] = dq[c] * scale;\n"
"    }\n"
"  }\n"
"}\n"
"#define TR_ATT_DQ(NAME, NC)                                                                                        \\\n"
"  __kernel void NAME(__global const float *qkv, ulong qkv_off, __global const float *dO, ulong dO_off,          \\\n"
"           __global const float *lse, ulong lse_off, __global const float *Dv, ulong Dv_off,          \\\n"
"           __global float *dqkv, ulong dqkv_off, int S, int H, int hd, int nqb, int BKc,               \\\n"
"           __local float *Qs, __local float *Os, __local float *Ks, __local float *Vs,                \\\n"
"           __local float *Ss) {                                                                       \\\n"
"    tr_att_dq(qkv + qkv_off, dO + dO_off, lse + lse_off, Dv + Dv_off, dqkv + dqkv_off, S, H, hd, nqb, BKc,   \\\n"
"         Qs, Os, Ks, Vs, Ss, NC);                                                                        \\\n"
"  }\n"
"TR_ATT_DQ(tr_k_att_dq64, 4)\n"
"TR_ATT_DQ(tr_k_att_dq256, 16)\n";
#define TR__CL_SRC_ATTENTION_LIST tr__cl_src_attention_1, tr__cl_src_attention_2, tr__cl_src_attention_3
/* >>cl-embed-end */

/* --- host side -------------------------------------------------------------------------------------------------- */
#ifndef TR__CL_SLOT_GEMM
#define TR__CL_SLOT_GEMM 5 /* tr__cl_scratch slot of the split-K / batch-sum partials */
#endif
#ifndef TR__CL_SLOT_GEMM_BT
#define TR__CL_SLOT_GEMM_BT 7 /* tr__cl_scratch slot of B^T (x W^T products run as x (W^T)) */
#endif
#ifndef TR__CL_SLOT_ATT
#define TR__CL_SLOT_ATT 6 /* tr__cl_scratch slot of the attention backward's row dots */
#endif
#define TR__CL_ATT_TD 16 /* = TR_ATT_TD in the kernel source */

TR__FN size_t tr__cl_gemm_local_bytes(const tr__cl_gemm_cfg *g) {
    size_t pad = g->vw == 4 ? 4 : 1, bufs = g->cp != 0 && g->st > 2 ? (size_t)g->st : 2;
    return 4 * bufs * (size_t)g->tk * ((size_t)g->tm + (size_t)g->tn + 2 * pad) + 32;
}

/* Nonzero when g is a valid configuration for the kernel (divisibility) and fits the device (info may be NULL). */
TR__FN int tr__cl_gemm_cfg_ok(const tr__cl_gemm_cfg *g, const tr__cl_info *info) {
    int rm, rn, nt;
    if (g->tm < 1 || g->tn < 1 || g->tk < 1 || g->wm < 1 || g->wn < 1 || g->tm > 1024 || g->tn > 1024 || g->tk > 256) return 0;
    if ((g->vw != 1 && g->vw != 4) || g->wm * g->wn > 256 || g->tm % g->wm || g->tn % g->wn) return 0;
    if (g->vw == 4 && (g->wm % 4 || g->wn % 4)) return 0;
    rm = g->tm / g->wm, rn = g->tn / g->wn, nt = rm * rn;
    if (g->wl < -1 || g->wl > 1 || g->db < -1 || g->db > 1 || g->cp < -1 || g->cp > 2 || g->st < 2 || g->st > 4 ||
        (g->wl == 1 && (rn % 8 || rm % 4 || nt % 32)))
        return 0;
    if ((g->tm * g->tk) % nt || (g->tn * g->tk) % nt) return 0; /* every work-item stages whole elements */
    if (info) {
        if (info->max_wg && (size_t)nt > info->max_wg) return 0;
        if ((info->max_item[0] && (size_t)rn > info->max_item[0]) || (info->max_item[1] && (size_t)rm > info->max_item[1])) return 0;
        if (info->local_mem && tr__cl_gemm_local_bytes(g) > info->local_mem) return 0;
    }
    return 1;
}

/* Whether the plain products can stage their tiles with cp.async (inline PTX): an NVIDIA sm_80+ device (cp 2, the
   tests' emulation with plain loads, any device); a local pitch (VW = 4: TM + 4, TN + 4) that keeps 16-byte copies
   aligned; and tiles that the work-items cover in whole passes of the copy patterns of tr_cp_tile. */
TR__FN int tr__cl_gemm_cq(const tr__cl_gemm_cfg *g) { return g->tk % 8 == 0 ? 8 : g->tk; } /* = TR_CQ: depths per copy pass */
TR__FN int tr__cl_gemm_cp_side_ok(int x, int nt, int tk, int cq) {
    return x % 4 == 0 && x % (nt / cq) == 0 && nt % (x / 4) == 0 && tk % (nt / (x / 4)) == 0 && nt % x == 0 && tk % (nt / x) == 0;
}
TR__FN int tr__cl_gemm_cp_ok(const tr__cl_gemm_cfg *g, const tr__cl_info *info) {
    int nt = (g->tm / g->wm) * (g->tn / g->wn), cq = tr__cl_gemm_cq(g);
    if (!info || (info->nv_sm < 80 && g->cp != 2) || g->vw != 4 || nt % cq) return 0;
    return tr__cl_gemm_cp_side_ok(g->tm, nt, g->tk, cq) && tr__cl_gemm_cp_side_ok(g->tn, nt, g->tk, cq);
}

/* The tensor-core kernels' mode (tr__cl_gemm_cfg.mma) for a request (-1: automatic): the kernels need 256
   work-items and 40 KiB of local memory; the real ones (1) an NVIDIA sm_80+ device (mma.sync with bfloat16 inputs). */
TR__FN int tr__cl_gemm_mma_mode(const tr__cl_info *info, int want) {
    if (!info || want == 0 || (info->max_wg && info->max_wg < 256) || (info->max_item[0] && info->max_item[0] < 256) ||
        (info->local_mem && info->local_mem < 40960))
        return 0;
    if (want == 2) return 2;
    return info->nv_sm >= 80 ? 1 : 0;
}

/* The configuration for this device: the first candidate that fits, then TINYREC_CL_SGEMM ("TM=128,TN=64,TK=16,WM=8,
   WN=8,VW=4"; keys that are not given keep the automatic value) if the result is valid (otherwise it is ignored).
   Candidates for GPUs: 128x128 tiles of 8x8 per work-item (256 items, 16.5 KiB local), 128x64 (128 items), 64x64 4x4
   (256 items), then smaller; for other devices (PoCL) 64x64 of 8x8 (64 items) first. */
TR__FN void tr__cl_gemm_config(const tr__cl_info *info, tr__cl_gemm_cfg *out) {
    static const tr__cl_gemm_cfg gpu[] = {{128, 128, 16, 8, 8, 4, -1, -1, -1, 2, -1}, {128, 64, 16, 8, 8, 4, -1, -1, -1, 2, -1}, {64, 64, 16, 4, 4, 4, -1, -1, -1, 2, -1},
                                          {64, 64, 16, 8, 8, 4, -1, -1, -1, 2, -1},   {32, 32, 16, 4, 4, 4, -1, -1, -1, 2, -1},  {32, 32, 8, 4, 4, 1, -1, -1, -1, 2, -1},
                                          {16, 16, 8, 2, 2, 1, -1, -1, -1, 2, -1},    {8, 8, 8, 2, 2, 1, -1, -1, -1, 2, -1},     {4, 4, 4, 1, 1, 1, -1, -1, -1, 2, -1},
                                          {1, 1, 1, 1, 1, 1, -1, -1, -1, 2, -1}};
    static const tr__cl_gemm_cfg cpu[] = {{64, 64, 16, 8, 8, 4, -1, -1, -1, 2, -1}, {32, 32, 16, 4, 4, 4, -1, -1, -1, 2, -1}, {16, 16, 8, 2, 2, 1, -1, -1, -1, 2, -1},
                                          {8, 8, 8, 2, 2, 1, -1, -1, -1, 2, -1},    {1, 1, 1, 1, 1, 1, -1, -1, -1, 2, -1}};
    const tr__cl_gemm_cfg *list = info && !info->is_gpu ? cpu : gpu;
    size_t n = info && !info->is_gpu ? sizeof cpu / sizeof cpu[0] : sizeof gpu / sizeof gpu[0], i;
    const char *env = getenv("TINYREC_CL_SGEMM");
    *out = list[n - 1];
    for (i = 0; i < n; i++)
        if (tr__cl_gemm_cfg_ok(&list[i], info)) {
            *out = list[i];
            break;
        }
    if (env && env[0]) {
        tr__cl_gemm_cfg g = *out;
        const char *s = env;
        while (*s) {
            char key[4] = {0, 0, 0, 0};
            int k = 0;
            long v;
            char *end;
            while (*s == ',' || *s == ';' || *s == ' ') s++;
            while (isalpha((unsigned char)*s) && k < 3) key[k++] = (char)toupper((unsigned char)*s++);
            if (*s != '=') break;
            v = strtol(s + 1, &end, 10);
            if (end == s + 1 || v < 0 || v > 4096) break;
            s = end;
            if (!strcmp(key, "TM")) g.tm = (int)v;
            else if (!strcmp(key, "TN")) g.tn = (int)v;
            else if (!strcmp(key, "TK")) g.tk = (int)v;
            else if (!strcmp(key, "WM")) g.wm = (int)v;
            else if (!strcmp(key, "WN")) g.wn = (int)v;
            else if (!strcmp(key, "VW")) g.vw = (int)v;
            else if (!strcmp(key, "WL")) g.wl = (int)v;
            else if (!strcmp(key, "DB")) g.db = (int)v;
            else if (!strcmp(key, "CP")) g.cp = (int)v;
            else if (!strcmp(key, "ST")) g.st = (int)v;
            else if (!strcmp(key, "MMA")) g.mma = (int)v;
            else break;
        }
        if (!*s && tr__cl_gemm_cfg_ok(&g, info)) *out = g;
    }
    out->cp = out->cp != 0 && tr__cl_gemm_cp_ok(out, info) ? (out->cp == 2 ? 2 : 1) : 0;
    out->mma = tr__cl_gemm_mma_mode(info, out->mma);
}

/* Build options with the tile defines of g; the runtime passes them to clBuildProgram. */
TR__FN void tr__cl_gemm_defines(const tr__cl_gemm_cfg *g_, char *buf, size_t cap) {
    const tr__cl_gemm_cfg g = *g_;
    int n;
    if (!buf || !cap) return;
    n = snprintf(buf, cap, "-DTR_GEMM_TM=%d -DTR_GEMM_TN=%d -DTR_GEMM_TK=%d -DTR_GEMM_WM=%d -DTR_GEMM_WN=%d -DTR_GEMM_VW=%d", g.tm, g.tn,
                 g.tk, g.wm, g.wn, g.vw);
    if (n > 0 && (size_t)n < cap && g.wl >= 0) n += snprintf(buf + n, cap - (size_t)n, " -DTR_GEMM_WL=%d", g.wl);
    if (n > 0 && (size_t)n < cap && g.db >= 0) n += snprintf(buf + n, cap - (size_t)n, " -DTR_GEMM_DB=%d", g.db);
    if (n > 0 && (size_t)n < cap && g.cp > 0) snprintf(buf + n, cap - (size_t)n, " -DTR_GEMM_CP=%d -DTR_GEMM_ST=%d", g.cp, g.st);
}

/* The build options this device's configuration gives (tests, benches). */
TR__FN void tr__cl_sgemm_defines(const tr__cl_info *info, char *buf, size_t cap) {
    tr__cl_gemm_cfg g;
    tr__cl_gemm_config(info, &g);
    tr__cl_gemm_defines(&g, buf, cap);
}

/* How many pieces to cut `units` (K, or the batches summed into one C) into so that tiles * pieces work-groups fill
   the device (8 per compute unit), each piece at least min_units, at most 64, partials within 256 MiB. The count
   depends on the shape and the device only, so results are reproducible. */
TR__FN int tr__cl_gemm_pieces(const tr__cl_info *info, size_t tiles, size_t units, size_t min_units, size_t mn) {
    size_t target = 8 * (info && info->compute_units ? info->compute_units : 1), s;
    if (tiles >= target || !min_units) return 1;
    s = (target + tiles - 1) / tiles;
    if (s > units / min_units) s = units / min_units;
    if (s > 64) s = 64;
    while (s > 1 && s * mn > ((size_t)64 << 20)) s--;
    return s < 1 ? 1 : (int)s;
}

/* The (transpose, fused operand) cases that have a fused-fetch kernel: nt with B (the token-mix weight gradient). */
TR__FN int tr__cl_gemm_sw_ok(int ta, int tb, int sw) { return sw == 2 && !ta && tb; }

/* SwiGLU fused into a product (tr__cl_gemm_run): sw 2 = B is read as silu(x) * x[so]; gu = C's rows are gate | up
   halves `half` apart and act = silu(gate) * up is written to act (ld, batch stride), C too when write_gu. */
typedef struct tr__cl_gemm_fuse {
    int sw, gu, write_gu;
    size_t so, half, ld_act, s_act;
    float *act;
    int rnd; /* C rounded to ctx->gemm_fdt after the product (the tensor-core kernels' epilogue; ldc = N) */
} tr__cl_gemm_fuse;

/* Whether the tile configuration pairs gate rows with their ups in one work-item (the halves of a tile are TM/2
   apart in its register block), as the kernel's #if before nn_gu tests. */
TR__FN int tr__cl_gemm_gu_ok(const tr__cl_gemm_cfg *g) { return g->vw == 4 ? g->wm % 8 == 0 : g->wm % 2 == 0; }

/* Whether the gate_up product has a cp.async kernel (nn_gu_cp, the kernel's #if): the halves of a tile (TM/2 rows)
   are whole passes of its k-contiguous copies (NT / 8 rows each). */
TR__FN int tr__cl_gemm_gu_cp_ok(const tr__cl_gemm_cfg *g) {
    int nt = (g->tm / g->wm) * (g->tn / g->wn);
    return g->cp && g->vw == 4 && g->wm % 8 == 0 && (g->tm / 2) % (nt / tr__cl_gemm_cq(g)) == 0;
}

/* Whether the tensor-core kernels can run: their program (the ops and tr_k_mma_*, TR_MMA_ONLY) is built at the first
   bfloat16 / float16 product, so that float32 users never compile it. A build failure (a driver without the inline
   PTX) turns them off with a logged warning, and the products run on the SGEMM kernels. */
TR__FN int tr__cl_mma_ready(tr__cl *cl) {
    static const char *const src[] = {TR__CL_SRC_OPS_LIST, TR__CL_SRC_GEMM_LIST};
    const tr__clfn *f = &cl->lib.f;
    const char *extra = getenv("TINYREC_CL_OPTIONS"); /* as for the main program */
    char opts[512];
    tr__cl_int err = 0;
    if (cl->mma_program) return 1;
    if (!cl->gemm.mma) return 0;
    snprintf(opts, sizeof opts, "%s%s-DTR_MMA_ONLY=1 -DTR_GEMM_MMA=%d %.380s", tr__cl_c_version(cl) >= 12 ? "-cl-std=CL1.2 " : "",
             cl->info.has_fp64 ? "-DTR_FP64=1 " : "", cl->gemm.mma, extra ? extra : "");
    cl->mma_program = f->CreateProgramWithSource(cl->context, (tr__cl_uint)(sizeof src / sizeof src[0]), (const char **)src, NULL, &err);
    if (cl->mma_program && err == TR__CL_SUCCESS) err = f->BuildProgram(cl->mma_program, 1, &cl->device, opts, NULL, NULL);
    if (!cl->mma_program || err != TR__CL_SUCCESS) {
        if (cl->mma_program) f->ReleaseProgram(cl->mma_program);
        cl->mma_program = NULL, cl->gemm.mma = 0;
        tr__log(cl->ctx, TR_LOG_WARN, "opencl: the tensor-core kernels did not build (%s, %d); bfloat16 / float16 products run on the fp32 kernels",
                tr__cl_errname(err), (int)err);
        return 0;
    }
    return 1;
}

#ifndef TR__CL_GEMM_BT_MIN_M
#define TR__CL_GEMM_BT_MIN_M 1024 /* rows of C from which x W^T is run as x (W^T) on the cp.async kernels */
#endif

/* The engine behind tr__cl_sgemm / tr__cl_sgemm_batched / tr__cl_sgemm_swiglu. pieces: 0 = automatic, else the K
   splits (nb == 1) or the batch groups (sC == 0, nb > 1) to use (tests force them). More than one piece writes packed
   partials to scratch, then tr_k_gemm_reduce sums them in order into C. fz: a fused SwiGLU (NULL: none); with gu,
   M counts the activation's rows (half of C's). */
TR__FN tr_status tr__cl_gemm_run(tr__cl *cl, int nb, int ta, int tb, size_t M, size_t N, size_t K, const float *A, size_t lda, size_t sA,
                                 const float *B, size_t ldb, size_t sB, float *C, size_t ldc, size_t sC, int acc, int pieces,
                                 const tr__cl_gemm_fuse *fz) {
    static const tr__cl_gemm_fuse none = {0, 0, 0, 0, 0, 0, 0, NULL, 0};
    const tr__cl_info *info = tr__cl_get_info(cl);
    tr__cl_gemm_cfg g;
    tr__clargs a;
    size_t ls[3], gs[3], tiles, mn;
    char kname[64];
    int sum, ks = 1, bpg = 1, kc, nz, np = 1, z0, rows_per_group;
    float *out = C, *P = NULL;
    tr_status st;
    int mma = 0; /* the tensor-core kernels: bfloat16 1, float16 2 */
    if (!cl || !info) return TR_ERR_INVALID_ARG;
    if (M == 0 || N == 0) return TR_OK;
    if (M > INT_MAX || N > INT_MAX || K > INT_MAX || nb < 0 || (double)M * N > 9e15)
        return tr__err(cl->ctx, TR_ERR_INVALID_ARG, "opencl: sgemm %zux%zux%zu (batch %d) is out of range", M, N, K, nb);
    if (nb == 0) {
        if (sC != 0 || acc) return TR_OK;
        nb = 1, K = 0; /* an empty sum: C = 0 */
    }
    g = cl->gemm;
    if (!fz) fz = &none;
    if (fz->sw && !tr__cl_gemm_sw_ok(ta, tb, fz->sw)) return tr__err(cl->ctx, TR_ERR_UNSUPPORTED, "opencl: no fused SwiGLU sgemm for this case");
    if (fz->gu) {
        if (!tr__cl_gemm_gu_ok(&g) || ta || tb || acc || (nb > 1 && sC == 0) || !fz->act)
            return tr__err(cl->ctx, TR_ERR_UNSUPPORTED, "opencl: no fused gate_up sgemm for this case");
        pieces = 1;
    }
    if (g.mma && !fz->sw && !fz->gu && cl->ctx && (cl->ctx->gemm_fdt == TR_FWD_BFLOAT16 || cl->ctx->gemm_fdt == TR_FWD_FLOAT16) && tr__cl_mma_ready(cl)) {
        mma = cl->ctx->gemm_fdt == TR_FWD_BFLOAT16 ? 1 : 2;
        cl->mma_products++;
        g.tm = g.tn = 128, g.tk = 32, g.cp = 0; /* tr_sgemm_mma's tile (TR_MT, TR_MK) */
    }
    if (fz->rnd && (!mma || ldc != N)) return tr__err(cl->ctx, TR_ERR_UNSUPPORTED, "opencl: no rounding epilogue for this product");
    rows_per_group = fz->gu ? g.tm / 2 : g.tm; /* gu: a tile holds TM/2 rows of each of C's halves (M counts one) */
    sum = nb > 1 && sC == 0;
    tiles = ((M + (size_t)rows_per_group - 1) / (size_t)rows_per_group) * ((N + (size_t)g.tn - 1) / (size_t)g.tn);
    mn = M * N;
    kc = (int)K;
    if (nb == 1) {
        ks = pieces > 0 ? pieces : tr__cl_gemm_pieces(info, tiles, K, 512, mn);
        if (ks > 1) {
            kc = (int)((K + (size_t)ks - 1) / (size_t)ks);
            kc = (kc + g.tk - 1) / g.tk * g.tk;
            ks = (int)((K + (size_t)kc - 1) / (size_t)kc);
        }
        if (ks < 1) ks = 1;
        np = nz = ks;
    } else if (sum) {
        int G = pieces > 0 ? pieces : tr__cl_gemm_pieces(info, tiles, (size_t)nb, K >= 512 ? 1 : 512 / (K ? K : 1), mn);
        if (G > nb) G = nb;
        if (G < 1) G = 1;
        bpg = (nb + G - 1) / G;
        np = nz = (nb + bpg - 1) / bpg;
    } else {
        nz = nb;
    }
    if (np > 1) {
        if (!(P = tr__cl_scratch(cl, TR__CL_SLOT_GEMM, (size_t)np * mn))) return tr__cl_last_oom(cl) ? TR_ERR_OUT_OF_MEMORY : TR_ERR_DEVICE;
        out = P;
    }
    if (g.cp && !ta && tb && nb == 1 && !fz->sw && M >= TR__CL_GEMM_BT_MIN_M) {
        /* x W^T with many rows: its k-contiguous B costs the cp.async kernel 4-byte copies, so B is transposed
           once (N x K, a weight: small next to the product) and the product runs as nn (on the H200: 38.6 ->
           41.7-42.6 TFLOP/s at the training shapes) */
        float *Bt = tr__cl_scratch(cl, TR__CL_SLOT_GEMM_BT, N * K);
        size_t tl[2] = {32, 8}, tg[2];
        if (!Bt) return tr__cl_last_oom(cl) ? TR_ERR_OUT_OF_MEMORY : TR_ERR_DEVICE;
        tg[0] = (K + 31) / 32 * 32, tg[1] = (N + 31) / 32 * 8;
        tr__cla_init(&a);
        tr__cla_buf(&a, B), tr__cla_i64(&a, (int64_t)ldb), tr__cla_i32(&a, (int32_t)N), tr__cla_i32(&a, (int32_t)K);
        tr__cla_buf(&a, Bt), tr__cla_i64(&a, (int64_t)N);
        if ((st = tr__cl_launch(cl, "tr_k_transpose", 2, tg, tl, &a)) != TR_OK) return st;
        B = Bt, ldb = N, tb = 0;
    }
    if (mma) {
        snprintf(kname, sizeof kname, "tr_k_mma_%s_%s", ta ? (tb ? "tt" : "tn") : (tb ? "nt" : "nn"), mma == 1 ? "bf16" : "f16");
        ls[0] = 256, ls[1] = 1, ls[2] = 1;
    } else {
        snprintf(kname, sizeof kname, "tr_k_sgemm_%s%s_%d_%d_%d_%d_%d_%d", ta ? (tb ? "tt" : "tn") : (tb ? "nt" : "nn"),
                 fz->sw == 2 ? "_swb" : fz->gu ? (tr__cl_gemm_gu_cp_ok(&g) ? "_gu_cp" : "_gu") : g.cp ? "_cp" : "",
                 g.tm, g.tn, g.tk, g.wm, g.wn, g.vw);
        ls[0] = (size_t)(g.tn / g.wn), ls[1] = (size_t)(g.tm / g.wm), ls[2] = 1;
    }
    gs[0] = (N + (size_t)g.tn - 1) / (size_t)g.tn * ls[0], gs[1] = (M + (size_t)rows_per_group - 1) / (size_t)rows_per_group * ls[1];
    for (z0 = 0; z0 < nz; z0 += 65535) { /* the third grid dimension is limited to 65535 groups on some devices */
        gs[2] = (size_t)TR__MIN(nz - z0, 65535);
        tr__cla_init(&a);
        tr__cla_buf(&a, A), tr__cla_i64(&a, (int64_t)lda), tr__cla_i64(&a, (int64_t)sA);
        tr__cla_buf(&a, B), tr__cla_i64(&a, (int64_t)ldb), tr__cla_i64(&a, (int64_t)sB);
        tr__cla_buf(&a, out), tr__cla_i64(&a, (int64_t)(P ? N : ldc)), tr__cla_i64(&a, (int64_t)(P ? mn : sum ? 0 : sC));
        tr__cla_i32(&a, (int32_t)M), tr__cla_i32(&a, (int32_t)N), tr__cla_i32(&a, (int32_t)K);
        tr__cla_i32(&a, P ? 0 : acc != 0);
        tr__cla_i32(&a, nb), tr__cla_i32(&a, bpg), tr__cla_i32(&a, ks), tr__cla_i32(&a, kc), tr__cla_i32(&a, z0);
        tr__cla_i64(&a, (int64_t)fz->so), tr__cla_i64(&a, (int64_t)fz->half);
        tr__cla_buf(&a, fz->act), tr__cla_i64(&a, (int64_t)fz->ld_act), tr__cla_i64(&a, (int64_t)fz->s_act);
        tr__cla_i32(&a, mma ? (fz->rnd && !P ? mma : 0) : fz->write_gu); /* the tensor-core kernels: round C to this precision */
        if ((st = tr__cl_launch(cl, kname, 3, gs, ls, &a)) != TR_OK) return st;
    }
    if (P) {
        size_t rl[2], rg[2];
        rl[0] = info->max_wg >= 64 ? 64 : 1, rl[1] = 1;
        rg[0] = N, rg[1] = M;
        tr__cla_init(&a);
        tr__cla_buf(&a, P), tr__cla_i32(&a, np), tr__cla_i32(&a, (int32_t)M), tr__cla_i32(&a, (int32_t)N);
        tr__cla_buf(&a, C), tr__cla_i64(&a, (int64_t)ldc), tr__cla_i32(&a, acc != 0);
        if ((st = tr__cl_launch(cl, "tr_k_gemm_reduce", 2, rg, rl, &a)) != TR_OK) return st;
        if (fz->rnd) return tr__cl_round(cl, mma, C, M * N); /* the partials were not rounded (ldc = N) */
    }
    return TR_OK;
}

/* C = (acc ? C : 0) + op(A) op(B) (tr__sgemm). Split-K with a deterministic reduction when C has too few tiles
   to fill the device and K is long (the weight gradients, K = rows of the batch). */
TR__FN tr_status tr__cl_sgemm(tr__cl *cl, int ta, int tb, size_t M, size_t N, size_t K, const float *A, size_t lda, const float *B,
                              size_t ldb, float *C, size_t ldc, int acc) {
    return tr__cl_gemm_run(cl, 1, ta, tb, M, N, K, A, lda, 0, B, ldb, 0, C, ldc, 0, acc, 0, NULL);
}

/* nb products A + b*sA, B + b*sB -> C + b*sC; sC == 0: all summed into C (deterministic, batch order within a group,
   groups in order). */
TR__FN tr_status tr__cl_sgemm_batched(tr__cl *cl, int nb, int ta, int tb, size_t M, size_t N, size_t K, const float *A, size_t lda,
                                      size_t sA, const float *B, size_t ldb, size_t sB, float *C, size_t ldc, size_t sC, int acc) {
    return tr__cl_gemm_run(cl, nb, ta, tb, M, N, K, A, lda, sA, B, ldb, sB, C, ldc, sC, acc, 0, NULL);
}

/* tr__cl_sgemm_batched with operand sw (2: B) given as a gate_up tensor and read as silu(x) * x[so]: the SwiGLU
   activation is never written. */
TR__FN tr_status tr__cl_sgemm_swiglu(tr__cl *cl, int nb, int ta, int tb, size_t M, size_t N, size_t K, const float *A, size_t lda, size_t sA,
                                     const float *B, size_t ldb, size_t sB, float *C, size_t ldc, size_t sC, int acc, int sw, size_t so) {
    tr__cl_gemm_fuse fz = {0, 0, 0, 0, 0, 0, 0, NULL, 0};
    fz.sw = sw, fz.so = so;
    return tr__cl_gemm_run(cl, nb, ta, tb, M, N, K, A, lda, sA, B, ldb, sB, C, ldc, sC, acc, 0, &fz);
}

/* The token mix's gate_up product with the SwiGLU in its epilogue: per batch C_b[2 half, N] = A B_b (gate | up
   rows), act_b[half, N] (ld_act, s_act) = silu(gate) * up; C is written only when write_gu. TR_ERR_UNSUPPORTED
   when the tile configuration cannot pair the halves (tr__cl_gemm_gu_ok). */
TR__FN tr_status tr__cl_sgemm_gate_up(tr__cl *cl, int nb, size_t half, size_t N, size_t K, const float *A, size_t lda, size_t sA, const float *B,
                                      size_t ldb, size_t sB, float *C, size_t ldc, size_t sC, int write_gu, float *act, size_t ld_act,
                                      size_t s_act) {
    tr__cl_gemm_fuse fz = {0, 0, 0, 0, 0, 0, 0, NULL, 0};
    fz.gu = 1, fz.half = half, fz.act = act, fz.ld_act = ld_act, fz.s_act = s_act, fz.write_gu = write_gu;
    return tr__cl_gemm_run(cl, nb, 0, 0, half, N, K, A, lda, sA, B, ldb, sB, C, ldc, sC, 0, 0, &fz);
}

/* --- attention ---------------------------------------------------------------------------------------------------- */
/* Local-memory budget of one attention work-group: the device's, at most 48 KiB (the usual per-group limit). */
TR__FN size_t tr__cl_att_budget(const tr__cl_info *info) {
    size_t b = info->local_mem ? info->local_mem : 16384;
    return b > 49152 ? 49152 : b;
}
/* Rows per work-group (dimension 1), TD work-items each: 16, fewer on devices with small work-groups. */
TR__FN int tr__cl_att_rows(const tr__cl_info *info) {
    int r = 16;
    while (r > 1 && (size_t)(r * TR__CL_ATT_TD) > info->max_wg) r /= 2;
    if (info->max_item[1]) while (r > 1 && (size_t)r > info->max_item[1]) r /= 2;
    return r;
}

TR__FN tr_status tr__cl_att_check(tr__cl *cl, int B, int S, int H, int hd) {
    if (B < 0 || S < 0 || H < 0 || hd < 0) return tr__err(cl->ctx, TR_ERR_INVALID_ARG, "opencl: attention with a negative size");
    if (hd > 256) return tr__err(cl->ctx, TR_ERR_UNSUPPORTED, "opencl: attention head dimension %d > 256", hd);
    if ((double)B * S * 3 * H * hd > 4e18 || (double)B * H * (S / 16 + 1) * 16 > 2e9)
        return tr__err(cl->ctx, TR_ERR_INVALID_ARG, "opencl: attention sizes out of range");
    return TR_OK;
}

/* tr__attention_fwd_ref: o and lse from qkv. Work-group = 16 x BQ queries of one (b, h); key blocks of BK. */
TR__FN tr_status tr__cl_attention_fwd(tr__cl *cl, int B, int S, int H, int hd, const float *qkv, float *o, float *lse) {
    const tr__cl_info *info = tr__cl_get_info(cl);
    size_t budget, ls[2], gs[2], nqb;
    int BQ, BK = 64; /* BK <= 64: the kernels score 4 keys of 16 per work-item */
    tr__clargs a;
    tr_status st;
    if (!cl || !info) return TR_ERR_INVALID_ARG;
    if ((st = tr__cl_att_check(cl, B, S, H, hd)) != TR_OK) return st;
    if (!B || !S || !H || !hd) return TR_OK;
#define TR__ATT_FWD_BYTES (4 * ((size_t)BQ * (hd + 1) + (size_t)BK * (2 * hd + 1) + (size_t)BQ * (BK + 1)))
    budget = tr__cl_att_budget(info), BQ = tr__cl_att_rows(info);
    while (TR__ATT_FWD_BYTES > budget && (BK > 16 || BQ > 1))
        if (BK > 16) BK /= 2;
        else BQ /= 2;
    nqb = ((size_t)S + (size_t)BQ - 1) / (size_t)BQ;
    ls[0] = TR__CL_ATT_TD, ls[1] = (size_t)BQ;
    gs[0] = TR__CL_ATT_TD * (size_t)B * (size_t)H * nqb, gs[1] = (size_t)BQ;
    tr__cla_init(&a);
    tr__cla_buf(&a, qkv), tr__cla_buf(&a, o), tr__cla_buf(&a, lse);
    tr__cla_i32(&a, S), tr__cla_i32(&a, H), tr__cla_i32(&a, hd), tr__cla_i32(&a, (int32_t)nqb), tr__cla_i32(&a, BK);
    tr__cla_local(&a, 4 * (size_t)BQ * (hd + 1)), tr__cla_local(&a, 4 * (size_t)BK * (hd + 1));
    tr__cla_local(&a, 4 * (size_t)BK * hd), tr__cla_local(&a, 4 * (size_t)BQ * (BK + 1));
#undef TR__ATT_FWD_BYTES
    return tr__cl_launch(cl, hd <= 64 ? "tr_k_att_fwd64" : "tr_k_att_fwd256", 2, gs, ls, &a);
}

/* tr__attention_bwd_ref: dqkv (overwritten). Dv = rowwise do.o into scratch, then dk/dv per key block (looping over
   queries) and dq per query block (looping over keys); each output is written once, no atomics. */
TR__FN tr_status tr__cl_attention_bwd(tr__cl *cl, int B, int S, int H, int hd, const float *qkv, const float *o, const float *lse,
                                      const float *do_, float *dqkv) {
    const tr__cl_info *info = tr__cl_get_info(cl);
    size_t budget, ls[2], gs[2], nblk, rows;
    int R, BQ = 64, BK = 64; /* <= 64, as in the forward */
    float *Dv;
    tr__clargs a;
    tr_status st;
    if (!cl || !info) return TR_ERR_INVALID_ARG;
    if ((st = tr__cl_att_check(cl, B, S, H, hd)) != TR_OK) return st;
    if (!B || !S || !H || !hd) return TR_OK;
    rows = (size_t)B * (size_t)H * (size_t)S;
    if (!(Dv = tr__cl_scratch(cl, TR__CL_SLOT_ATT, rows))) return tr__cl_last_oom(cl) ? TR_ERR_OUT_OF_MEMORY : TR_ERR_DEVICE;
    tr__cla_init(&a);
    tr__cla_buf(&a, o), tr__cla_buf(&a, do_), tr__cla_buf(&a, Dv);
    tr__cla_i32(&a, B), tr__cla_i32(&a, S), tr__cla_i32(&a, H), tr__cla_i32(&a, hd);
    gs[0] = rows, ls[0] = info->max_wg >= 64 ? 64 : 1;
    if ((st = tr__cl_launch(cl, "tr_k_att_dot", 1, gs, ls, &a)) != TR_OK) return st;
    budget = tr__cl_att_budget(info), R = tr__cl_att_rows(info);
    /* dk, dv: R keys per group, query blocks of BQ */
#define TR__ATT_DKDV_BYTES (4 * ((size_t)2 * R * (hd + 1) + (size_t)2 * BQ * (hd + 1) + (size_t)2 * BQ + (size_t)2 * BQ * (R + 1)))
    while (TR__ATT_DKDV_BYTES > budget && (BQ > 16 || R > 1))
        if (BQ > 16) BQ /= 2;
        else R /= 2;
    nblk = ((size_t)S + (size_t)R - 1) / (size_t)R;
    ls[0] = TR__CL_ATT_TD, ls[1] = (size_t)R;
    gs[0] = TR__CL_ATT_TD * (size_t)B * (size_t)H * nblk, gs[1] = (size_t)R;
    tr__cla_init(&a);
    tr__cla_buf(&a, qkv), tr__cla_buf(&a, do_), tr__cla_buf(&a, lse), tr__cla_buf(&a, Dv), tr__cla_buf(&a, dqkv);
    tr__cla_i32(&a, S), tr__cla_i32(&a, H), tr__cla_i32(&a, hd), tr__cla_i32(&a, (int32_t)nblk), tr__cla_i32(&a, BQ);
    tr__cla_local(&a, 4 * (size_t)R * (hd + 1)), tr__cla_local(&a, 4 * (size_t)R * (hd + 1));
    tr__cla_local(&a, 4 * (size_t)BQ * (hd + 1)), tr__cla_local(&a, 4 * (size_t)BQ * (hd + 1));
    tr__cla_local(&a, 4 * (size_t)2 * BQ), tr__cla_local(&a, 4 * (size_t)BQ * (R + 1)), tr__cla_local(&a, 4 * (size_t)BQ * (R + 1));
#undef TR__ATT_DKDV_BYTES
    if ((st = tr__cl_launch(cl, hd <= 64 ? "tr_k_att_dkdv64" : "tr_k_att_dkdv256", 2, gs, ls, &a)) != TR_OK) return st;
    /* dq: R queries per group, key blocks of BK */
    R = tr__cl_att_rows(info);
#define TR__ATT_DQ_BYTES (4 * ((size_t)2 * R * (hd + 1) + (size_t)2 * BK * (hd + 1) + (size_t)R * (BK + 1)))
    while (TR__ATT_DQ_BYTES > budget && (BK > 16 || R > 1))
        if (BK > 16) BK /= 2;
        else R /= 2;
    nblk = ((size_t)S + (size_t)R - 1) / (size_t)R;
    ls[1] = (size_t)R;
    gs[0] = TR__CL_ATT_TD * (size_t)B * (size_t)H * nblk, gs[1] = (size_t)R;
    tr__cla_init(&a);
    tr__cla_buf(&a, qkv), tr__cla_buf(&a, do_), tr__cla_buf(&a, lse), tr__cla_buf(&a, Dv), tr__cla_buf(&a, dqkv);
    tr__cla_i32(&a, S), tr__cla_i32(&a, H), tr__cla_i32(&a, hd), tr__cla_i32(&a, (int32_t)nblk), tr__cla_i32(&a, BK);
    tr__cla_local(&a, 4 * (size_t)R * (hd + 1)), tr__cla_local(&a, 4 * (size_t)R * (hd + 1));
    tr__cla_local(&a, 4 * (size_t)BK * (hd + 1)), tr__cla_local(&a, 4 * (size_t)BK * (hd + 1));
    tr__cla_local(&a, 4 * (size_t)R * (BK + 1));
#undef TR__ATT_DQ_BYTES
    return tr__cl_launch(cl, hd <= 64 ? "tr_k_att_dq64" : "tr_k_att_dq256", 2, gs, ls, &a);
}
/* >>cl-gemm-end */

/* Every kernel fragment, in one program: clCreateProgramWithSource joins them into one text, build options -D
   (tr__cl_build) chosen at run time. */
static const char *const tr__cl_sources[] = {TR__CL_SRC_OPS_LIST, TR__CL_SRC_GEMM_LIST, TR__CL_SRC_ATTENTION_LIST};
/* >>opencl-end */
#endif

/* >>device
   Where the work runs. Device memory is addressed by ordinary pointers: with OpenCL each device
   buffer is also an address-space reservation of the same size, so the model code does its
   pointer arithmetic unchanged and the ops below resolve pointers to (buffer, offset). Falling
   back to the CPU commits those reservations as host memory holding the device's data, so every
   pointer stays valid. On the CPU these helpers are malloc, memcpy and the CPU kernels.
   Then what the machine offers (>>api-device): CPU info, the OpenCL listing, the self-test and the
   batch advice that tinyrec-devices prints. */
#if TINYREC_OPENCL
#define TR__ON_CL(ctx, call)                  \
    do {                                      \
        if ((ctx)->dev_active) return (call); \
    } while (0)
#else
#define TR__ON_CL(ctx, call) TR__UNUSED(ctx)
#endif

TR__FN void tr__dev_close(tr_ctx *ctx) {
#if TINYREC_OPENCL
    if (ctx->cl) tr__cl_destroy(ctx->cl);
#endif
    ctx->cl = NULL;
    ctx->dev_active = 0;
}

TR__FN void tr__dev_cpu_name(tr_ctx *ctx) {
    snprintf(ctx->dev_name, sizeof ctx->dev_name, "cpu (%s, %d threads)", tr__simd_names[ctx->simd], ctx->num_threads);
}

/* Opens the selected device once (at the first model). Never fails: the CPU is always there. */
TR__FN void tr__dev_select(tr_ctx *ctx) {
    const char *sel = ctx->device_sel[0] ? ctx->device_sel : "auto";
    if (ctx->dev_tried) return;
    ctx->dev_tried = 1;
    tr__dev_cpu_name(ctx);
    if (strcmp(sel, "cpu") == 0) {
        tr__log(ctx, TR_LOG_INFO, "device: %s, as requested", ctx->dev_name);
        return;
    }
#if TINYREC_OPENCL
    {
        static const tr__cl_fault faults[] = {TR__CLF_NONE, TR__CLF_NO_LIBRARY, TR__CLF_NO_PLATFORM, TR__CLF_NO_DEVICE, TR__CLF_BUILD};
        tr__cl_fault f = ctx->fault >= TR_FAULT_NO_LIBRARY && ctx->fault <= TR_FAULT_BUILD ? faults[ctx->fault] : TR__CLF_NONE;
        tr__cl *cl = NULL;
        tr_status st;
        char saved[TR__ERRLEN];
        memcpy(saved, ctx->error, sizeof saved);
        st = tr__cl_open(ctx, sel, tr__cl_sources, (int)(sizeof tr__cl_sources / sizeof tr__cl_sources[0]), NULL, f, &cl);
        if (st == TR_OK) {
            const tr__cl_info *in = tr__cl_get_info(cl);
            ctx->cl = cl;
            ctx->dev_active = 1;
            snprintf(ctx->dev_name, sizeof ctx->dev_name, "opencl: %.150s (%.100s)", in->name, in->vendor);
            memcpy(ctx->error, saved, sizeof saved);
            return;
        }
        tr__log(ctx, strcmp(sel, "auto") == 0 && st == TR_ERR_UNSUPPORTED ? TR_LOG_INFO : TR_LOG_WARN, "device: %s: %s; using the %s", sel,
                ctx->error[0] ? ctx->error : tr_status_string(st), ctx->dev_name);
        memcpy(ctx->error, saved, sizeof saved);
    }
#else
    if (strcmp(sel, "auto") != 0)
        tr__log(ctx, TR_LOG_WARN, "device: '%s' requested, but this build has no OpenCL (define TINYREC_OPENCL); using the %s", sel, ctx->dev_name);
#endif
}

TRDEF int tr_ctx_use_device(tr_ctx *ctx) {
    if (!ctx) return 0;
    tr__dev_select(ctx);
    return ctx->dev_active;
}

TRDEF const char *tr_ctx_device_name(const tr_ctx *ctx) {
    if (!ctx) return "";
    if (!ctx->dev_tried) return "not chosen yet (opens with the first model)";
    return ctx->dev_name;
}

/* --- what this machine offers (>>api-device) ----------------------------------------------------- */
static const char *const tr__cpu_feature_names[TR_CPU_FEATURE_COUNT] = {"sse4.2",   "avx",      "avx2",        "fma",      "avx512f",  "avx512bw",
                                                                         "avx512dq", "avx512vl", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8",
                                                                         "asimd",    "asimddp",  "bf16",        "i8mm",     "f16c"};

TRDEF const char *tr_cpu_feature_name(tr_cpu_feature f) { return (int)f >= 0 && f < TR_CPU_FEATURE_COUNT ? tr__cpu_feature_names[f] : ""; }

TR__FN tr_status tr__read_file_capped(tr_ctx *ctx, const char *path, size_t max_bytes, char **data, size_t *len); /* >>json */

/* "key : value" lines of a /proc file: calls fn for each; TR_OK also when the file is absent
   (not Linux), so only running out of memory is an error. */
TR__FN tr_status tr__proc_lines(tr_ctx *ctx, const char *path, void (*fn)(void *user, const char *key, const char *value), void *user) {
    char *text = NULL, *line, *next, saved[TR__ERRLEN];
    size_t len = 0;
    tr_status st;
    memcpy(saved, ctx->error, sizeof saved);
    st = tr__read_file_capped(ctx, path, (size_t)64 << 20, &text, &len);
    if (st != TR_OK) {
        if (st == TR_ERR_OUT_OF_MEMORY) return st;
        memcpy(ctx->error, saved, sizeof saved);
        return TR_OK;
    }
    for (line = text; line && *line; line = next) {
        char *colon, *k = line, *v, *e;
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        if (!(colon = strchr(line, ':'))) continue;
        *colon = 0;
        for (e = colon; e > k && isspace((unsigned char)e[-1]);) *--e = 0;
        for (v = colon + 1; isspace((unsigned char)*v);) v++;
        for (e = v + strlen(v); e > v && isspace((unsigned char)e[-1]);) *--e = 0;
        fn(user, k, v);
    }
    tr__free(ctx, text);
    return TR_OK;
}

TR__FN void tr__cpuinfo_line(void *user, const char *key, const char *value) {
    tr_cpu_info *ci = (tr_cpu_info *)user;
    if (!ci->model[0] && (!strcmp(key, "model name") || !strcmp(key, "Model") || !strcmp(key, "Hardware"))) snprintf(ci->model, sizeof ci->model, "%s", value);
}

TR__FN void tr__meminfo_line(void *user, const char *key, const char *value) {
    tr_cpu_info *ci = (tr_cpu_info *)user;
    if (!strcmp(key, "MemTotal")) ci->mem_total_mib = atof(value) / 1024.0; /* "N kB" */
    else if (!strcmp(key, "MemAvailable")) ci->mem_available_mib = atof(value) / 1024.0;
}

TRDEF tr_status tr_cpu_info_get(tr_ctx *ctx, tr_cpu_info *out) {
    char brand[49];
    tr_status st;
    int i;
    if (!ctx) return TR_ERR_INVALID_ARG;
    if (!out) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_cpu_info_get: out is NULL");
    memset(out, 0, sizeof *out);
    out->mem_total_mib = out->mem_available_mib = -1;
#if defined(__x86_64__) || defined(_M_X64)
    snprintf(out->arch, sizeof out->arch, "x86_64");
#elif defined(__i386__)
    snprintf(out->arch, sizeof out->arch, "x86");
#elif defined(__aarch64__)
    snprintf(out->arch, sizeof out->arch, "aarch64");
#else
    snprintf(out->arch, sizeof out->arch, "unknown");
#endif
    tr__cpu_features(out->features, brand);
    if ((st = tr__proc_lines(ctx, "/proc/cpuinfo", tr__cpuinfo_line, out)) != TR_OK) return st;
    if ((st = tr__proc_lines(ctx, "/proc/meminfo", tr__meminfo_line, out)) != TR_OK) return st;
    if (!out->model[0]) snprintf(out->model, sizeof out->model, "%s", brand);
    for (i = 0; out->model[i] == ' '; i++) {} /* brand strings are right-aligned on some CPUs */
    memmove(out->model, out->model + i, strlen(out->model + i) + 1);
    if (!out->model[0]) snprintf(out->model, sizeof out->model, "unknown");
#if TR__POSIX
    {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        out->logical_cpus = n > 0 ? (int)n : 1;
        if (out->mem_total_mib < 0 && tr__machine_memory() > 0) out->mem_total_mib = (double)tr__machine_memory() / 1048576.0;
    }
#else
    out->logical_cpus = 1;
#endif
    for (i = 0; i < TR_KERNEL_SETS; i++) {
        out->kernel_sets[i] = tr__simd_names[i];
        out->kernel_set_ok[i] = tr__simd_runs(ctx->simd_best, i);
    }
    out->kernels = tr__simd_names[ctx->simd_best];
    out->threads = ctx->num_threads;
    return TR_OK;
}

TRDEF void tr_opencl_list_free(tr_ctx *ctx, tr_opencl_list *list) {
    int i;
    if (!ctx || !list) return;
    for (i = 0; i < list->num_platforms; i++) tr__free(ctx, (void *)list->platforms[i].extensions);
    for (i = 0; i < list->num_devices; i++) tr__free(ctx, (void *)list->devices[i].extensions);
    tr__free(ctx, list->platforms);
    tr__free(ctx, list->devices);
    memset(list, 0, sizeof *list);
    list->auto_pick = list->opencl_pick = -1;
}

TRDEF tr_status tr_opencl_list_devices(tr_ctx *ctx, tr_opencl_list *out) {
    tr_status st = TR_OK;
    if (!ctx) return TR_ERR_INVALID_ARG;
    if (!out) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_opencl_list_devices: out is NULL");
    memset(out, 0, sizeof *out);
    out->auto_pick = out->opencl_pick = -1;
#if TINYREC_OPENCL
    st = tr__cl_describe(ctx, out);
    if (st != TR_OK) {
        tr_opencl_list_free(ctx, out);
        return tr__err(ctx, st, "tr_opencl_list_devices: out of memory");
    }
#else
    snprintf(out->note, sizeof out->note, "this build has no OpenCL backend (built without TINYREC_OPENCL)");
#endif
    return st;
}

/* A private context for work that must not touch the caller's device (the self-test opens its
   own; the batch advice builds a model on the CPU): the caller's allocator and threads, a fixed
   seed. Its allocations count as the caller's, and the caller's pending tr_ctx_fail_alloc_at
   applies to them, so allocation-failure sweeps reach inside. */
TR__FN tr_status tr__ctx_child(tr_ctx *ctx, const char *device, tr_log_fn log, void *log_user, tr_ctx **out) {
    tr_ctx_config cc = tr_ctx_config_default();
    tr_status st;
    cc.allocator = ctx->allocator;
    cc.num_threads = ctx->num_threads;
    cc.seed = 1234;
    cc.simd = "auto"; /* never TINYREC_SIMD / TINYREC_DEVICE: the caller says what it wants */
    cc.device = device;
    cc.log = log, cc.log_user = log_user;
    if ((st = tr_ctx_create(&cc, out)) != TR_OK) return tr__err(ctx, st, "cannot create a context for '%s': %s", device, tr_status_string(st));
    if (ctx->fail_alloc_at > ctx->alloc_count) (*out)->fail_alloc_at = ctx->fail_alloc_at - ctx->alloc_count;
    return TR_OK;
}

TR__FN void tr__ctx_child_done(tr_ctx *ctx, tr_ctx *child) {
    if (!child) return;
    ctx->alloc_count += child->alloc_count;
    tr_ctx_destroy(child);
}

/* The self-test model: a tiny TRM, without the puzzle embedding (sign-SGD reacts to rounding noise). */
#define TR__ST_L 24
#define TR__ST_V 11
TR__FN void tr__st_config(tr_model_config *cfg, int attention) {
    tr_model_config_preset(cfg, "trm-tiny");
    cfg->seq_len = TR__ST_L, cfg->vocab_size = TR__ST_V;
    cfg->hidden_size = 64, cfg->num_heads = 4, cfg->expansion = 2, cfg->L_layers = 2;
    cfg->H_cycles = 2, cfg->L_cycles = 2, cfg->halt_max_steps = 2;
    cfg->puzzle_emb_ndim = 0, cfg->puzzle_emb_len = 0, cfg->num_puzzle_identifiers = 1;
    cfg->mlp_t = !attention;
    cfg->pos_encodings = attention ? TR_POS_ROPE : TR_POS_NONE;
}

typedef struct tr__st_out {
    float *logits; /* the forward pass before training: [B, L, V] */
    double losses[TR_SELFTEST_STEPS];
    float *params; /* every trainable tensor after training, concatenated */
    size_t nparams;
    int ntensors;
    size_t offsets[64 + 1];
} tr__st_out;

TR__FN void tr__st_free(tr_ctx *ctx, tr__st_out *o) {
    tr__free(ctx, o->logits);
    tr__free(ctx, o->params);
    memset(o, 0, sizeof *o);
}

/* The last warning of a self-test context: why a device was not opened or was left. */
TR__FN void tr__st_log(void *user, tr_log_level level, const char *message) {
    if (level >= TR_LOG_WARN) snprintf((char *)user, 256, "%s", message);
}

/* A failed call inside the test: running out of memory is the caller's error (returned); anything
   else fails the test (fail gets the reason). */
TR__FN tr_status tr__st_failed(tr_ctx *ctx, tr_ctx *child, tr_status st, char *fail, size_t cap, const char *what) {
    if (st == TR_ERR_OUT_OF_MEMORY) return tr__err(ctx, st, "self-test: %s%.900s", what, child->error);
    snprintf(fail, cap, "%.40s%.200s", what, child->error[0] ? child->error : tr_status_string(st));
    return TR_OK;
}

/* One run on a fresh context on `device` with `kernels`: a forward pass (an eval step), then the
   training steps, on fixed random data. *opened: a device was opened. */
TR__FN tr_status tr__st_run(tr_ctx *ctx, const char *device, const char *kernels, int attention, tr__st_out *o, int *opened, char *fail, size_t cap) {
    enum { B = TR_SELFTEST_BATCH, L = TR__ST_L, V = TR__ST_V };
    char warn[256] = "", what[64];
    tr_ctx *c = NULL;
    tr_model *m = NULL;
    tr_carry *carry = NULL;
    tr_trainer *t = NULL;
    tr_model_config cfg;
    tr_train_config tc = tr_train_config_default();
    int32_t in[B * L], lab[B * L], pid[B];
    tr_batch b;
    tr_step_outputs so;
    tr_metrics mt;
    uint64_t r = 0x243f6a8885a308d3ull;
    tr_status st;
    int on_dev = strcmp(device, "cpu") != 0, i, k, nt;
    memset(o, 0, sizeof *o);
    fail[0] = 0;
    *opened = 0;
    if ((st = tr__ctx_child(ctx, device, tr__st_log, warn, &c)) != TR_OK) return st;
    if ((st = tr_ctx_set_simd(c, kernels)) != TR_OK) {
        st = tr__err(ctx, st, "%s", c->error);
        goto done;
    }
    tr__st_config(&cfg, attention);
    if ((st = tr_model_create(c, &cfg, &m)) != TR_OK || (st = tr_carry_create(m, B, &carry)) != TR_OK) {
        st = tr__st_failed(ctx, c, st, fail, cap, "");
        goto done;
    }
    if (on_dev && !(*opened = tr_ctx_use_device(c))) {
        snprintf(fail, cap, "not opened: %.250s", warn[0] ? warn : tr_ctx_device_name(c));
        goto done;
    }
    for (i = 0; i < B * L; i++) { /* xorshift64: the data the tolerances were set on */
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        in[i] = 1 + (int)(r % (V - 1));
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        if (r % 7 == 0) lab[i] = -100;
        else r ^= r << 13, r ^= r >> 7, r ^= r << 17, lab[i] = 1 + (int)(r % (V - 1));
    }
    for (i = 0; i < B; i++) pid[i] = 0;
    b.inputs = in, b.labels = lab, b.puzzle_identifiers = pid, b.batch_size = B;
    if (!(o->logits = (float *)tr__alloc(ctx, sizeof(float) * B * L * V))) {
        st = TR_ERR_OUT_OF_MEMORY;
        goto done;
    }
    memset(&so, 0, sizeof so);
    so.logits = o->logits;
    tr_carry_reset(carry);
    if ((st = tr_model_eval_step(m, carry, &b, &so, &mt)) != TR_OK) {
        st = tr__st_failed(ctx, c, st, fail, cap, "forward: ");
        goto done;
    }
    tc.global_batch_size = B;
    tc.lr = 1e-3, tc.lr_warmup_steps = 0, tc.weight_decay = 0.1, tc.ema = 1;
    if ((st = tr_trainer_create(m, &tc, &t)) != TR_OK) {
        st = tr__st_failed(ctx, c, st, fail, cap, "");
        goto done;
    }
    for (i = 0; i < TR_SELFTEST_STEPS; i++) {
        if ((st = tr_trainer_step(t, &b, &mt)) != TR_OK) {
            snprintf(what, sizeof what, "training step %d: ", i + 1);
            st = tr__st_failed(ctx, c, st, fail, cap, what);
            goto done;
        }
        o->losses[i] = mt.loss;
    }
    if (on_dev && !tr_ctx_use_device(c)) { /* a device error moved the model to the CPU mid-run */
        snprintf(fail, cap, "left the device: %.250s", warn[0] ? warn : "fell back to the CPU");
        goto done;
    }
    nt = tr_model_num_tensors(m);
    for (k = 0; k < nt && o->ntensors < 64; k++) {
        tr_tensor_view tv;
        if (tr_model_tensor(m, k, &tv) != TR_OK || !tv.trainable) continue;
        o->offsets[o->ntensors++] = o->nparams;
        o->nparams += tv.numel;
    }
    o->offsets[o->ntensors] = o->nparams;
    if (!(o->params = (float *)tr__alloc(ctx, sizeof(float) * (o->nparams ? o->nparams : 1)))) {
        st = TR_ERR_OUT_OF_MEMORY;
        goto done;
    }
    for (k = 0, i = 0; k < nt && i < o->ntensors; k++) {
        tr_tensor_view tv;
        if (tr_model_tensor(m, k, &tv) != TR_OK || !tv.trainable) continue;
        memcpy(o->params + o->offsets[i++], tv.data, tv.numel * sizeof(float));
    }
done:
    tr_trainer_destroy(t);
    tr_carry_destroy(carry);
    tr_model_destroy(m);
    tr__ctx_child_done(ctx, c);
    return st;
}

/* The measures of tr_device_selftest for x against ref; the worst of them. NaN fails every test. */
TR__FN double tr__st_compare(const tr__st_out *x, const tr__st_out *ref, const tr_selftest_tolerance *tol, tr_selftest_variant *v) {
    size_t n = (size_t)TR_SELFTEST_BATCH * TR__ST_L * TR__ST_V, i;
    double ss = 0, rms, w;
    int s, k;
    v->logits = v->loss = v->params = 0;
    for (i = 0; i < n; i++) ss += (double)ref->logits[i] * ref->logits[i];
    rms = sqrt(ss / (double)n);
    if (!(rms > 1e-30)) rms = 1e-30;
    for (i = 0; i < n; i++) { /* relative where values are large, against the array's scale near zero */
        double d = fabs((double)x->logits[i] - (double)ref->logits[i]) / (fabs((double)ref->logits[i]) + rms);
        if (!(d <= v->logits)) v->logits = d;
    }
    for (s = 0; s < TR_SELFTEST_STEPS; s++) {
        double d = fabs(x->losses[s] - ref->losses[s]) / TR__MAX(fabs(ref->losses[s]), 1e-3);
        if (!(d <= v->loss)) v->loss = d;
    }
    if (x->nparams != ref->nparams || x->ntensors != ref->ntensors) v->params = HUGE_VAL;
    for (k = 0; k < ref->ntensors && v->params < HUGE_VAL; k++) {
        double num = 0, den = 0, d;
        for (i = ref->offsets[k]; i < ref->offsets[k + 1]; i++) {
            double e = (double)x->params[i] - (double)ref->params[i];
            num += e * e, den += (double)ref->params[i] * ref->params[i];
        }
        d = sqrt(num) / (den > 0 ? sqrt(den) : 1.0);
        if (!(d <= v->params)) v->params = d;
    }
    v->ok = v->logits <= tol->logits && v->loss <= tol->loss && v->params <= tol->params;
    w = v->logits;
    if (!(v->loss <= w)) w = v->loss;
    if (!(v->params <= w)) w = v->params;
    return w;
}

TRDEF tr_status tr_device_selftest(tr_ctx *ctx, const char *device, const char *kernels, const tr_selftest_tolerance *tol, tr_selftest_result *out) {
    tr__st_out ref, o;
    const char *ref_kernels;
    tr__simd saved;
    tr_status st = TR_OK;
    int cpu, a, s, same, opened = 0;
    char fail[300];
    if (!ctx) return TR_ERR_INVALID_ARG;
    if (!out) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_device_selftest: out is NULL");
    memset(out, 0, sizeof *out);
    if (!device || (strcmp(device, "cpu") != 0 && strncmp(device, "opencl", 6) != 0))
        return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_device_selftest: device '%s' is neither \"cpu\" nor an OpenCL selector (opencl, opencl:N, opencl:<name>)",
                       device ? device : "(null)");
    cpu = strcmp(device, "cpu") == 0;
    if (!TINYREC_OPENCL && !cpu)
        return tr__err(ctx, TR_ERR_UNSUPPORTED, "tr_device_selftest: '%s': this build has no OpenCL backend (built without TINYREC_OPENCL)", device);
    saved = ctx->simd; /* tr_ctx_set_simd's check of the name, without changing the context */
    st = tr_ctx_set_simd(ctx, kernels);
    kernels = tr__simd_names[ctx->simd];
    ctx->simd = saved;
    if (st != TR_OK) return st;
    if (tol && !(tol->logits >= 0 && tol->loss >= 0 && tol->params >= 0))
        return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_device_selftest: tolerances must be >= 0 (logits %g, loss %g, params %g)", tol->logits, tol->loss, tol->params);
    if (tol) out->tol = *tol;
    else if (cpu) out->tol.logits = TR_SELFTEST_TOL_LOGITS, out->tol.loss = TR_SELFTEST_TOL_LOSS, out->tol.params = TR_SELFTEST_TOL_PARAMS;
    else out->tol.logits = out->tol.loss = out->tol.params = TR_SELFTEST_TOL_OPENCL;
    /* a CPU kernel set against the scalar path; a device against what it replaces, the best CPU set */
    ref_kernels = cpu ? "scalar" : tr__simd_names[ctx->simd_best];
    same = cpu && !strcmp(kernels, "scalar");
    out->opened = !cpu;
    for (a = 0; a < 2 && st == TR_OK && !out->error[0]; a++) {
        tr_selftest_variant *v = &out->variant[a];
        double t0 = tr__now(), w;
        v->model = a ? "attention" : "mlp_t";
        st = tr__st_run(ctx, "cpu", ref_kernels, a, &ref, &opened, fail, sizeof fail);
        if (st == TR_OK && fail[0]) st = tr__err(ctx, TR_ERR_GENERIC, "self-test: the %s reference (%s kernels): %s", v->model, ref_kernels, fail);
        for (s = 0; st == TR_OK && s < TR_SELFTEST_STEPS; s++)
            if (!(fabs(ref.losses[s]) < 1e30)) snprintf(out->error, sizeof out->error, "%s: the %s path gives a non-finite loss", v->model, ref_kernels);
        if (same) out->seconds += tr__now() - t0;
        else if (st == TR_OK && !out->error[0]) {
            t0 = tr__now();
            st = tr__st_run(ctx, device, kernels, a, &o, &opened, fail, sizeof fail);
            out->seconds += tr__now() - t0;
            if (!cpu && !opened) out->opened = 0;
            if (st == TR_OK && fail[0]) snprintf(out->error, sizeof out->error, "%s: %.250s", v->model, fail);
        }
        if (st == TR_OK && !out->error[0]) {
            w = tr__st_compare(same ? &ref : &o, &ref, &out->tol, v);
            if (!(w <= out->max_diff)) out->max_diff = w;
        }
        tr__st_free(ctx, &ref);
        if (!same) tr__st_free(ctx, &o);
    }
    out->pass = st == TR_OK && !out->error[0] && out->variant[0].ok && out->variant[1].ok;
    return st;
}

/* The largest batch whose bytes fit (0 if none); sizes grow with the batch. */
TR__FN int tr__largest_fit(const tr_model *m, double usable_bytes, int train) {
    int lo = 0, hi = 1 << 20;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        size_t tb = 0, ib = 0;
        tr_model_memory(m, mid, &tb, &ib);
        if ((double)(train ? tb : ib) <= usable_bytes) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

TRDEF tr_status tr_recommend_batch(tr_ctx *ctx, const tr_model_config *cfg, double memory_mib, tr_batch_advice *out) {
    tr_ctx *c = NULL;
    tr_model *m = NULL;
    size_t tb1, ib1, tb2, ib2;
    tr_status st;
    if (!ctx) return TR_ERR_INVALID_ARG;
    if (!cfg || !out) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_recommend_batch: %s is NULL", cfg ? "out" : "cfg");
    memset(out, 0, sizeof *out);
    if (memory_mib != memory_mib) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_recommend_batch: memory_mib is NaN");
    if (memory_mib < 0) {
        tr_cpu_info ci;
        if ((st = tr_cpu_info_get(ctx, &ci)) != TR_OK) return st;
        memory_mib = ci.mem_available_mib >= 0 ? ci.mem_available_mib : ci.mem_total_mib >= 0 ? ci.mem_total_mib * 0.5 : 1024;
    }
    if ((st = tr__ctx_child(ctx, "cpu", NULL, NULL, &c)) != TR_OK) return st;
    if ((st = tr_model_create(c, cfg, &m)) != TR_OK) {
        st = tr__err(ctx, st, "tr_recommend_batch: %s", c->error);
        tr__ctx_child_done(ctx, c);
        return st;
    }
    out->memory_mib = memory_mib;
    out->usable_mib = memory_mib - TR__MAX(memory_mib * 0.2, 512.0); /* the OS, the dataset, other programs */
    if (out->usable_mib < 0) out->usable_mib = 0;
    out->train_fit = tr__largest_fit(m, out->usable_mib * 1048576.0, 1);
    out->infer_fit = tr__largest_fit(m, out->usable_mib * 1048576.0, 0);
    out->train = out->train_fit >= TR_REFERENCE_GLOBAL_BATCH ? TR_REFERENCE_GLOBAL_BATCH : out->train_fit >= 8 ? out->train_fit / 8 * 8 : out->train_fit;
    for (out->infer = out->infer_fit >= 1; out->infer && out->infer * 2 <= out->infer_fit && out->infer * 2 <= 1024;) out->infer *= 2;
    tr_model_memory(m, 1, &tb1, &ib1);
    tr_model_memory(m, 2, &tb2, &ib2);
    out->train_mib_per_row = ((double)tb2 - (double)tb1) / 1048576.0;
    out->infer_mib_per_row = ((double)ib2 - (double)ib1) / 1048576.0;
    tr_model_memory(m, TR__MAX(out->train, 1), &tb1, NULL);
    tr_model_memory(m, TR__MAX(out->infer, 1), NULL, &ib1);
    out->train_mib = (double)tb1 / 1048576.0;
    out->infer_mib = (double)ib1 / 1048576.0;
    tr_model_destroy(m);
    tr__ctx_child_done(ctx, c);
    return TR_OK;
}

/* Moves all device state to the host (DESIGN §4: the CPU is the last device). */
TR__FN tr_status tr__dev_fallback(tr_ctx *ctx, const char *why) {
#if TINYREC_OPENCL
    char reason[TR__ERRLEN + 64];
    tr_status st;
    if (!ctx->dev_active) return TR_OK;
    snprintf(reason, sizeof reason, "%s", why);
    st = tr__cl_migrate_to_host(ctx->cl);
    ctx->dev_active = 0;
    tr__dev_cpu_name(ctx);
    tr__log(ctx, TR_LOG_WARN, "device: %s; moved the model, optimizer state and ACT carry to the %s and continuing there", reason, ctx->dev_name);
    return st;
#else
    TR__UNUSED(ctx), TR__UNUSED(why);
    return TR_OK;
#endif
}

/* The injected device-memory fault (tr_ctx_inject_fault) for a buffer of B rows. */
TR__FN int tr__fault_oom(const tr_ctx *ctx, int B) {
    return ctx->dev_active && ctx->fault == TR_FAULT_DEVICE_OOM && ctx->fault_armed && B > ctx->fault_rows;
}

/* Device memory, zero-filled. keep = 0: scratch whose contents need not survive a fallback. */
TR__FN void *tr__dalloc(tr_ctx *ctx, size_t bytes, int keep) {
#if TINYREC_OPENCL
    if (ctx->dev_active) return tr__cl_alloc(ctx->cl, bytes ? bytes : 4, keep);
#endif
    TR__UNUSED(keep);
    return tr__calloc(ctx, 1, bytes ? bytes : 4);
}

TR__FN void tr__dfree(tr_ctx *ctx, void *p) {
    if (!p) return;
#if TINYREC_OPENCL
    if (ctx->cl && tr__cl_owns(ctx->cl, p)) {
        tr__cl_free(ctx->cl, p);
        return;
    }
#endif
    tr__free(ctx, p);
}

/* Copies within device memory (dst == src is a no-op). */
TR__FN tr_status tr__dcopy(tr_ctx *ctx, void *dst, const void *src, size_t bytes) {
    if (dst == src || !bytes) return TR_OK;
    TR__ON_CL(ctx, tr__cl_copy(ctx->cl, dst, src, bytes));
    memmove(dst, src, bytes);
    return TR_OK;
}

TR__FN tr_status tr__dzero(tr_ctx *ctx, void *dst, size_t bytes) {
    if (!bytes) return TR_OK;
    TR__ON_CL(ctx, tr__cl_fill(ctx->cl, dst, 0, bytes));
    memset(dst, 0, bytes);
    return TR_OK;
}

/* Host -> device and device -> host. On the CPU both are memcpy (nothing when they alias). */
TR__FN tr_status tr__dput(tr_ctx *ctx, void *dst_dev, const void *src_host, size_t bytes) {
    if (dst_dev == src_host || !bytes) return TR_OK;
    TR__ON_CL(ctx, tr__cl_write(ctx->cl, dst_dev, src_host, bytes));
    memcpy(dst_dev, src_host, bytes);
    return TR_OK;
}

TR__FN tr_status tr__dget(tr_ctx *ctx, void *dst_host, const void *src_dev, size_t bytes) {
    if (dst_host == src_dev || !bytes) return TR_OK;
    TR__ON_CL(ctx, tr__cl_read(ctx->cl, dst_host, src_dev, bytes));
    memcpy(dst_host, src_dev, bytes);
    return TR_OK;
}

TR__FN tr_status tr__dfinish(tr_ctx *ctx) {
    TR__ON_CL(ctx, tr__cl_finish(ctx->cl));
    return TR_OK;
}

/* --- ops: the CPU kernel, or its OpenCL twin on the device ------------------------------------ */
TR__FN tr_status tr__op_sgemm(tr_ctx *ctx, int ta, int tb, size_t M, size_t N, size_t K, const float *A, size_t lda, const float *B, size_t ldb,
                              float *C, size_t ldc, int acc) {
    TR__ON_CL(ctx, tr__cl_sgemm(ctx->cl, ta, tb, M, N, K, A, lda, B, ldb, C, ldc, acc));
    return tr__sgemm(ctx, ta, tb, M, N, K, A, lda, B, ldb, C, ldc, acc);
}

/* nb products A_b = A + b*sA, ...; sC == 0 sums every product into C (in batch order). */
TR__FN tr_status tr__op_sgemm_batched(tr_ctx *ctx, int nb, int ta, int tb, size_t M, size_t N, size_t K, const float *A, size_t lda, size_t sA,
                                      const float *B, size_t ldb, size_t sB, float *C, size_t ldc, size_t sC, int acc) {
    TR__ON_CL(ctx, tr__cl_sgemm_batched(ctx->cl, nb, ta, tb, M, N, K, A, lda, sA, B, ldb, sB, C, ldc, sC, acc));
    return tr__sgemm_batched(ctx, nb, ta, tb, M, N, K, A, lda, sA, B, ldb, sB, C, ldc, sC, acc);
}

/* tr__op_sgemm_batched with ldc = N, then C rounded to the forward precision fdt (nothing for float32): while a
   bfloat16 / float16 model runs on a device with tensor-core kernels, in their epilogue; elsewhere a pass over C. */
TR__FN tr_status tr__op_round(tr_ctx *ctx, int fdt, float *x, size_t n);
TR__FN tr_status tr__op_sgemm_rnd(tr_ctx *ctx, int fdt, int nb, int ta, int tb, size_t M, size_t N, size_t K, const float *A, size_t lda, size_t sA,
                                  const float *B, size_t ldb, size_t sB, float *C, size_t sC, int acc) {
    tr_status st;
    int b;
#if TINYREC_OPENCL
    if (ctx->dev_active && fdt && ctx->gemm_fdt == fdt && tr__cl_mma_ready(ctx->cl)) {
        tr__cl_gemm_fuse fz = {0, 0, 0, 0, 0, 0, 0, NULL, 1};
        return tr__cl_gemm_run(ctx->cl, nb, ta, tb, M, N, K, A, lda, sA, B, ldb, sB, C, N, sC, acc, 0, &fz);
    }
#endif
    if ((st = tr__op_sgemm_batched(ctx, nb, ta, tb, M, N, K, A, lda, sA, B, ldb, sB, C, N, sC, acc)) != TR_OK || !fdt) return st;
    if (nb == 1 || sC == M * N || sC == 0) return tr__op_round(ctx, fdt, C, (sC == 0 ? 1 : (size_t)nb) * M * N);
    for (b = 0; b < nb; b++)
        if ((st = tr__op_round(ctx, fdt, C + (size_t)b * sC, M * N)) != TR_OK) return st;
    return TR_OK;
}

TR__FN tr_status tr__op_add(tr_ctx *ctx, size_t n, const float *a, const float *b, float *y) {
    TR__ON_CL(ctx, tr__cl_add(ctx->cl, n, a, b, y));
    tr__add(ctx, n, a, b, y);
    return TR_OK;
}

/* x[0..n) *= a. */
typedef struct tr__scale_args { float *x; float a; } tr__scale_args;
TR__FN void tr__scale_range(void *arg, long i0, long i1) {
    const tr__scale_args *p = (const tr__scale_args *)arg;
    long i;
    for (i = i0; i < i1; i++) p->x[i] *= p->a;
}
TR__FN tr_status tr__op_scale(tr_ctx *ctx, size_t n, float *x, float a) {
    tr__scale_args p = {x, a};
    if (!n) return TR_OK;
    TR__ON_CL(ctx, tr__cl_scale(ctx->cl, n, x, a));
    tr__par_for(tr__threads_for(ctx, (double)n), (long)n, 0, tr__scale_range, &p);
    return TR_OK;
}

/* x[0..n) rounded in place to the forward precision fdt (tr_forward_dtype); nothing for float32. */
TR__FN tr_status tr__op_round(tr_ctx *ctx, int fdt, float *x, size_t n) {
    if ((fdt != TR_FWD_BFLOAT16 && fdt != TR_FWD_FLOAT16) || !n) return TR_OK;
    TR__ON_CL(ctx, tr__cl_round(ctx->cl, fdt, x, n));
    tr__round(ctx, fdt, x, n);
    return TR_OK;
}

/* x[0..n) <-> 16-bit values of the forward precision fdt (tr__half_ref) in h, a region of (n + 1) / 2 floats
   (device memory is handed out and addressed in floats). */
TR__FN tr_status tr__op_half(tr_ctx *ctx, int fdt, int unpack, float *x, float *h, size_t n) {
    if ((fdt != TR_FWD_BFLOAT16 && fdt != TR_FWD_FLOAT16) || !n) return TR_OK;
    TR__ON_CL(ctx, tr__cl_half(ctx->cl, fdt, unpack, x, h, n));
    tr__half(ctx, fdt, unpack, x, (uint16_t *)(void *)h, n);
    return TR_OK;
}

TR__FN tr_status tr__op_rms_rows_fwd(tr_ctx *ctx, long rows, int D, const float *x, const float *add, float *out, float *rstd, float eps) {
    TR__ON_CL(ctx, tr__cl_rms_rows_fwd(ctx->cl, rows, D, x, add, out, rstd, eps));
    tr__rms_rows_fwd(ctx, rows, D, x, add, out, rstd, eps);
    return TR_OK;
}

TR__FN tr_status tr__op_rms_rows_bwd(tr_ctx *ctx, long rows, int D, const float *dy, const float *y, const float *rstd, float *dx) {
    TR__ON_CL(ctx, tr__cl_rms_rows_bwd(ctx->cl, rows, D, dy, y, rstd, dx));
    tr__rms_rows_bwd(ctx, rows, D, dy, y, rstd, dx);
    return TR_OK;
}

TR__FN tr_status tr__op_rms_cols_fwd(tr_ctx *ctx, int B, int S, int D, const float *x, const float *add, float *out, float *rstd, float eps) {
    TR__ON_CL(ctx, tr__cl_rms_cols_fwd(ctx->cl, B, S, D, x, add, out, rstd, eps));
    tr__rms_cols_fwd(ctx, B, S, D, x, add, out, rstd, eps);
    return TR_OK;
}

TR__FN tr_status tr__op_rms_cols_bwd(tr_ctx *ctx, int B, int S, int D, const float *dy, const float *y, const float *rstd, float *dx) {
    TR__ON_CL(ctx, tr__cl_rms_cols_bwd(ctx->cl, B, S, D, dy, y, rstd, dx));
    tr__rms_cols_bwd(ctx, B, S, D, dy, y, rstd, dx);
    return TR_OK;
}

/* fdt (tr_forward_dtype): bfloat16 / float16 round silu(gate) and the product, as PyTorch does on such tensors */
TR__FN tr_status tr__op_swiglu_fwd(tr_ctx *ctx, int fdt, long rows, long width, const float *g, size_t gs, float *out, size_t os) {
    TR__ON_CL(ctx, tr__cl_swiglu_fwd(ctx->cl, fdt, rows, width, g, gs, out, os));
    tr__swiglu_fwd(ctx, fdt, rows, width, g, gs, out, os);
    return TR_OK;
}

TR__FN tr_status tr__op_swiglu_bwd(tr_ctx *ctx, long rows, long width, const float *g, size_t gs, const float *da, size_t das, float *dg) {
    TR__ON_CL(ctx, tr__cl_swiglu_bwd(ctx->cl, rows, width, g, gs, da, das, dg));
    tr__swiglu_bwd(ctx, rows, width, g, gs, da, das, dg);
    return TR_OK;
}

/* C (+)= op(A_b) act_bᵀ-style products whose B operand is the token mix's SwiGLU activation silu(gate) * up, passed
   as the gate_up tensor (per batch: the gate half, then the up half `rows * cols` further; ld = cols). On a device the
   activation is computed as the GEMM fetches it (nt only, the token-mix weight gradient); otherwise it is written to
   act first (packed, batch stride rows * cols), then multiplied. */
TR__FN tr_status tr__op_sgemm_swiglu(tr_ctx *ctx, int fdt, int nb, int ta, int tb, size_t M, size_t N, size_t K, const float *A, size_t lda, size_t sA,
                                     const float *gu, size_t ldb, size_t sB, float *C, size_t ldc, size_t sC, int acc, float *act) {
    size_t rows = tb ? N : K, cols = tb ? K : N;
    tr_status st;
    if (ldb != cols) return tr__err(ctx, TR_ERR_INVALID_ARG, "sgemm_swiglu: the gate_up operand must have ld = its columns");
#if TINYREC_OPENCL
    if (ctx->dev_active && !fdt && tr__cl_gemm_sw_ok(ta, tb, 2))
        return tr__cl_sgemm_swiglu(ctx->cl, nb, ta, tb, M, N, K, A, lda, sA, gu, ldb, sB, C, ldc, sC, acc, 2, rows * cols);
#endif
    if ((st = tr__op_swiglu_fwd(ctx, fdt, nb, (long)(rows * cols), gu, sB, act, rows * cols))) return st; /* the activation the forward made */
    return tr__op_sgemm_batched(ctx, nb, ta, tb, M, N, K, A, lda, sA, act, cols, rows * cols, C, ldc, sC, acc);
}

/* The token mix's gate_up product and SwiGLU: per batch C_b[2 half, N] = A B_b (gate | up rows, ldc = N) and
   act_b[half, N] = silu(gate) * up (batch stride s_act). On a device in one product: the activation comes out of its
   registers, and C is written only with keep_gu (the tape needs it, a no-grad pass does not). Elsewhere (the CPU,
   or a tile configuration that cannot pair the halves) the product, then the elementwise pass. */
TR__FN tr_status tr__op_sgemm_gate_up(tr_ctx *ctx, int fdt, int nb, size_t half, size_t N, size_t K, const float *A, size_t lda, size_t sA, const float *B,
                                      size_t ldb, size_t sB, float *C, size_t sC, int keep_gu, float *act, size_t s_act) {
    tr_status st;
#if TINYREC_OPENCL
    if (ctx->dev_active && !fdt && tr__cl_gemm_gu_ok(&ctx->cl->gemm))
        return tr__cl_sgemm_gate_up(ctx->cl, nb, half, N, K, A, lda, sA, B, ldb, sB, C, N, sC, keep_gu, act, N, s_act);
#endif
    TR__UNUSED(keep_gu);
    /* bfloat16 / float16: the product and the activation are rounded */
    if ((st = tr__op_sgemm_rnd(ctx, fdt, nb, 0, 0, 2 * half, N, K, A, lda, sA, B, ldb, sB, C, sC, 0))) return st;
    return tr__op_swiglu_fwd(ctx, fdt, nb, (long)(half * N), C, sC, act, s_act);
}

TR__FN tr_status tr__op_rope(tr_ctx *ctx, long rows, int S, int H, int hd, float *qkv, const float *cosv, const float *sinv, int inverse) {
    TR__ON_CL(ctx, tr__cl_rope(ctx->cl, rows, S, H, hd, qkv, cosv, sinv, inverse));
    tr__rope(ctx, rows, S, H, hd, qkv, cosv, sinv, inverse);
    return TR_OK;
}

/* scratch: the CPU kernels' per-thread rows (unused on the device) */
TR__FN tr_status tr__op_attention_fwd(tr_ctx *ctx, int B, int S, int H, int hd, const float *qkv, float *o, float *lse, float *scratch) {
    TR__ON_CL(ctx, tr__cl_attention_fwd(ctx->cl, B, S, H, hd, qkv, o, lse));
    tr__attention_fwd(ctx, B, S, H, hd, qkv, o, lse, scratch);
    return TR_OK;
}

TR__FN tr_status tr__op_attention_bwd(tr_ctx *ctx, int B, int S, int H, int hd, const float *qkv, const float *o, const float *lse, const float *do_,
                                      float *dqkv, float *scratch) {
    TR__ON_CL(ctx, tr__cl_attention_bwd(ctx->cl, B, S, H, hd, qkv, o, lse, do_, dqkv));
    tr__attention_bwd(ctx, B, S, H, hd, qkv, o, lse, do_, dqkv, scratch);
    return TR_OK;
}

TR__FN tr_status tr__op_adam_atan2(tr_ctx *ctx, size_t n, float *p, const float *g, float *m, float *v, float lr, float wd, float b1, float b2, float bc1,
                                   float bc2) {
    TR__ON_CL(ctx, tr__cl_adam_atan2(ctx->cl, n, p, g, m, v, lr, wd, b1, b2, bc1, bc2));
    tr__adam_atan2(ctx, n, p, g, m, v, lr, wd, b1, b2, bc1, bc2);
    return TR_OK;
}

/* 1 when no element of x[0..n) is NaN or infinite (a bit test, so the loop vectorises without
   fast-math). */
TR__FN int tr__all_finite(const float *x, size_t n) {
    uint32_t bad = 0, u;
    size_t i;
    for (i = 0; i < n; i++) {
        memcpy(&u, x + i, sizeof u);
        bad |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
    }
    return !bad;
}

/* *ok = 1 when no element of x[0..n) is NaN or infinite. */
TR__FN tr_status tr__op_all_finite(tr_ctx *ctx, size_t n, const float *x, int *ok) {
    TR__ON_CL(ctx, tr__cl_all_finite(ctx->cl, n, x, ok));
    *ok = tr__all_finite(x, n);
    return TR_OK;
}

TR__FN tr_status tr__op_ema(tr_ctx *ctx, size_t n, float *shadow, const float *p, float decay) {
    TR__ON_CL(ctx, tr__cl_ema(ctx->cl, n, shadow, p, decay));
    tr__ema(ctx, n, shadow, p, decay);
    return TR_OK;
}


/* >>model
   TRM and HRM built from one block set. A module is a stack of blocks; TRM has one (L_level),
   HRM two (H_level, L_level). Parameters live in one flat buffer with named views
   (llm.c style); gradients and optimizer moments mirror it. Only the last H cycle of a
   supervision step records activations (the "tape") for the backward. */
#define TR__MAX_LAYERS 32
#ifndef TINYREC_WS_TOKENS
#define TINYREC_WS_TOKENS 65536 /* batch rows x positions one block's scratch holds (tr__ws_rows) */
#endif
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
    float *data; /* host copy (the view users see) */
    float *dev;  /* where the model computes with it (== data on the CPU) */
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

/* On a 16-bit tape (tr_model.tape_half) in, mix, att_o, h1, gu, out and h0 hold 16-bit values of the forward
   precision (tr__op_half), and lse, rstd1, rstd2 stay fp32: the backward unpacks a block's record before using it. */
typedef struct tr__net_rec {
    float *mem; /* this record's buffer: one per net, so no single device buffer is huge */
    float *h0;  /* the net input z + injection [B,S,D] */
    tr__block_rec blocks[TR__MAX_LAYERS];
} tr__net_rec;

struct tr_model {
    tr_ctx *ctx;
    tr_model_config cfg;
    int V, L, S, Lp, D, H, hd, I, It, Dp;
    size_t n_params;
    float *params, *grads; /* device memory */
    float *host;           /* on a device: host copies of every tensor (NULL on the CPU) */
    int host_stale;        /* the device changed the tensors since the last download */
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
    int ws_tokens; /* rows x positions the workspace is sized for (TINYREC_WS_TOKENS; tests lower it) */
    int tape_B, tape_nets, tape_half; /* tape_half: the tape holds 16-bit values (tr__tape_half) */
    tr__net_rec *nets;
    tr__pw pw; /* the GEMM packings of the weights the products read; pw.version++ at every write of params */
    int fdt;    /* the forward precision in force (tr_forward_dtype, never AUTO) */
    float *wlo; /* bfloat16 / float16: params rounded to it, refreshed at each forward (NULL in float32) */
};

#define TR__GRAD(m, p) ((m)->grads + ((p) - (m)->params))
/* The copy of weight p that products read: rounded to the forward precision (CastedLinear's cast). */
#define TR__W(m, p) ((m)->wlo ? (m)->wlo + ((p) - (m)->params) : (p))
/* x[0..n) rounded to the forward precision: where the reference stores an activation or gradient in it. */
#define TR__RND(m, x, n) tr__op_round((m)->ctx, (m)->fdt, (x), (n))

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
    TR__CHECK_RANGE(vocab_size, 2, 1 << 20);
    TR__CHECK_RANGE(seq_len, 1, 1 << 16);
    TR__CHECK_RANGE(num_puzzle_identifiers, 1, 1 << 28);
    TR__CHECK_RANGE(hidden_size, 2, 1 << 14);
    TR__CHECK_RANGE(num_heads, 1, 1024);
    TR__CHECK_RANGE(expansion, 0.01, 64);
    TR__CHECK_RANGE(L_layers, 1, TR__MAX_LAYERS);
    if (cfg->arch == TR_ARCH_HRM) TR__CHECK_RANGE(H_layers, 1, TR__MAX_LAYERS); /* TRM ignores H_layers */
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
    return TR_OK;
}

TR__FN void tr__add_tensor(tr_model *m, const char *name, float *data, int ndim, int64_t d0, int64_t d1, int trainable) {
    tr__tensor_entry *e = &m->tensors[m->n_tensors++];
    snprintf(e->name, sizeof e->name, "%s", name);
    e->data = e->dev = data;
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

/* The recorded cycle: each of the first `nets` records' buffer (NULL ones are skipped), then the records. */
TR__FN void tr__tape_free(tr_model *m, int nets) {
    int i;
    if (m->nets)
        for (i = 0; i < nets; i++) tr__dfree(m->ctx, m->nets[i].mem);
    tr__free(m->ctx, m->nets);
    m->nets = NULL;
    m->tape_B = m->tape_nets = 0;
}

TR__FN void tr__model_free_work(tr_model *m) {
    tr__dfree(m->ctx, m->ws);
    m->ws = NULL;
    m->ws_B = 0;
    tr__tape_free(m, m->tape_nets);
}

TRDEF void tr_model_destroy(tr_model *m) {
    tr_ctx *ctx;
    if (!m) return;
    ctx = m->ctx;
    tr__pw_detach(ctx, &m->pw);
    tr__model_free_work(m);
    tr__dfree(ctx, m->wlo);
    tr__dfree(ctx, m->params);
    tr__dfree(ctx, m->grads);
    tr__dfree(ctx, m->H_init);
    tr__dfree(ctx, m->puzzle_emb);
    tr__dfree(ctx, m->rope_cos);
    tr__free(ctx, m->host);
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
        if (e->dev == m->W_q) std = 0;
        else if (e->dev == m->b_q) {
            e->data[0] = e->data[1] = -5.0f;
            continue;
        } else if (e->dev == m->W_tok || e->dev == m->W_pos) std = 1.0 / sqrt((double)m->D);
        else if (e->dev == m->H_init || e->dev == m->L_init) std = 1.0;
        else if (e->dev == m->puzzle_emb) std = 0;
        else std = 1.0 / sqrt((double)e->shape[1]); /* fan_in */
        tr__trunc_normal(&r, e->data, e->numel, std);
    }
}

TR__FN float *tr__host_of(const tr_model *m, float *dev);
TR__FN tr_status tr__model_upload(tr_model *m);
TR__FN tr_status tr__model_download(tr_model *m);

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
    m->ws_tokens = TINYREC_WS_TOKENS;
    /* TRM: one module applied for both z_L and z_H; HRM: H_level and L_level, each with its own weights */
    m->n_modules = cfg->arch == TR_ARCH_HRM ? 2 : 1;
    m->modules[0].name = cfg->arch == TR_ARCH_HRM ? "H_level" : "L_level";
    m->modules[0].n_layers = cfg->arch == TR_ARCH_HRM ? cfg->H_layers : cfg->L_layers;
    m->modules[1].name = "L_level";
    m->modules[1].n_layers = cfg->L_layers;
    n = tr__layout(m, NULL);
    m->n_params = n;
    tr__dev_select(ctx);
    {
        /* host memory: parameters, gradients and the puzzle table on the CPU; their copies on a device */
        double table = (double)cfg->num_puzzle_identifiers * TR__MAX(m->Dp, 1), floats = (ctx->dev_active ? 1.0 : 2.0) * (double)n + table;
        char what[160];
        snprintf(what, sizeof what, "a model of %zu parameters with a %d x %d puzzle table", n, cfg->num_puzzle_identifiers, m->Dp);
        if ((st = tr__check_memory(ctx, 4.0 * floats, what)) != TR_OK) {
            tr_model_destroy(m);
            return st;
        }
    }
    m->params = (float *)tr__dalloc(ctx, n * sizeof(float), 1);
    m->grads = m->params ? (float *)tr__dalloc(ctx, n * sizeof(float), 1) : NULL;
    m->H_init = m->grads ? (float *)tr__dalloc(ctx, 2 * (size_t)m->D * sizeof(float), 1) : NULL;
    if (!m->H_init) goto oom;
    m->L_init = m->H_init + m->D;
    if (!tr__size_mul((size_t)cfg->num_puzzle_identifiers, (size_t)TR__MAX(m->Dp, 1), &npz)) {
        tr_model_destroy(m);
        return tr__err(ctx, TR_ERR_OVERFLOW, "config: puzzle table %d x %d overflows", cfg->num_puzzle_identifiers, m->Dp);
    }
    m->puzzle_emb = (float *)tr__dalloc(ctx, npz * sizeof(float), 1);
    m->rope_cos = m->puzzle_emb ? (float *)tr__dalloc(ctx, 2 * (size_t)m->S * m->hd * sizeof(float), 1) : NULL;
    if (!m->rope_cos) goto oom;
    m->rope_sin = m->rope_cos + (size_t)m->S * m->hd;
    tr__layout(m, m->params);
    m->fdt = TR_FWD_FLOAT32;
    tr__pw_attach(ctx, &m->pw, m->params, n);
    if ((st = tr_model_set_forward_dtype(m, cfg->forward_dtype)) != TR_OK) goto fail;
    tr__add_tensor(m, "model.inner.H_init", m->H_init, 1, m->D, 0, 0);
    tr__add_tensor(m, "model.inner.L_init", m->L_init, 1, m->D, 0, 0);
    if (m->Dp > 0) tr__add_tensor(m, "model.inner.puzzle_emb.weights", m->puzzle_emb, 2, cfg->num_puzzle_identifiers, m->Dp, 0);
    if (ctx->dev_active) {
        /* host copies back the tensor views; the device holds the working copy */
        m->host = (float *)tr__calloc(ctx, n + 2 * (size_t)m->D + npz + 2 * (size_t)m->S * m->hd, sizeof(float));
        if (!m->host) goto oom;
        for (p = 0; p < m->n_tensors; p++) m->tensors[p].data = tr__host_of(m, m->tensors[p].dev);
    }
    tr__init_weights(m);
    {
        float *rc = m->host ? m->host + n + 2 * (size_t)m->D + npz : m->rope_cos, *rs = rc + (size_t)m->S * m->hd;
        for (p = 0; p < m->S; p++)
            for (j = 0; j < m->hd; j++) {
                double inv_freq = pow(cfg->rope_theta > 0 ? cfg->rope_theta : 10000.0, -2.0 * (j % (m->hd / 2 ? m->hd / 2 : 1)) / m->hd);
                rc[(size_t)p * m->hd + j] = (float)cos(p * inv_freq);
                rs[(size_t)p * m->hd + j] = (float)sin(p * inv_freq);
            }
        if ((st = tr__dput(ctx, m->rope_cos, rc, 2 * (size_t)m->S * m->hd * sizeof(float))) != TR_OK) goto fail;
    }
    if ((st = tr__model_upload(m)) != TR_OK) goto fail;
    *out = m;
    return TR_OK;
oom:
    st = TR_ERR_OUT_OF_MEMORY; /* the reason was set by the allocator */
fail:
    tr_model_destroy(m);
    return st;
}

/* --- forward precision -------------------------------------------------------------------------- */
TR__FN int tr__streq_ci(const char *a, const char *b);
static const char *const tr__fdt_names[] = {"float32", "bfloat16", "float16", "auto", NULL};
TRDEF const char *tr_forward_dtype_name(tr_forward_dtype dtype) { return (unsigned)dtype <= TR_FWD_AUTO ? tr__fdt_names[dtype] : NULL; }
TRDEF int tr_forward_dtype_parse(const char *name) {
    static const char *const short_names[] = {"fp32", "bf16", "fp16", NULL};
    int i;
    if (!name) return -1;
    for (i = 0; tr__fdt_names[i]; i++)
        if (tr__streq_ci(name, tr__fdt_names[i]) || (short_names[i] && tr__streq_ci(name, short_names[i]))) return i;
    return -1;
}

/* Whether the device can compute fdt, and if not why. Every device can: the rounding is done by kernels of
   the baseline (integer arithmetic on fp32 storage), so only an injected fault (no-bf16, no-half) says no. */
TR__FN int tr__fdt_supported(const tr_ctx *ctx, int fdt, const char **why) {
    if (fdt == TR_FWD_BFLOAT16 && (ctx->fault == TR_FAULT_NO_BF16 || ctx->fault == TR_FAULT_NO_HALF)) return *why = "the device has no bfloat16 (injected fault)", 0;
    if (fdt == TR_FWD_FLOAT16 && ctx->fault == TR_FAULT_NO_HALF) return *why = "the device has no float16 (injected fault)", 0;
    return 1;
}

/* AUTO and the fallback chain bf16 -> fp16 -> fp32, each decision logged with its reason. */
TR__FN int tr__fdt_resolve(tr_ctx *ctx, tr_forward_dtype want) {
    int fdt = (int)want;
    const char *why = "";
    if (want == TR_FWD_AUTO) {
#if TINYREC_OPENCL
        if (ctx->dev_active && ctx->cl && ctx->cl->gemm.mma == 1) {
            tr__log(ctx, TR_LOG_INFO,
                    "forward_dtype auto: bfloat16 on %s (its tensor cores multiply bfloat16 natively; the training step measured 1.08-1.22x "
                    "the float32 one on an H100)",
                    ctx->dev_name);
            return tr__fdt_resolve(ctx, TR_FWD_BFLOAT16);
        }
#endif
        if (!ctx->dev_active && tr__bgemm_kernel(ctx) == TR__BG_AMX) {
            tr__log(ctx, TR_LOG_INFO,
                    "forward_dtype auto: bfloat16 on %s (its AMX tiles multiply bfloat16 natively; the training step measured 1.7-1.9x "
                    "the float32 one on a 16-core Xeon)",
                    ctx->dev_name);
            return tr__fdt_resolve(ctx, TR_FWD_BFLOAT16);
        }
        tr__log(ctx, TR_LOG_INFO,
                "forward_dtype auto: float32 on %s (bfloat16 and float16 run here as fp32 storage rounded at the reference's points%s, which "
                "matches the reference's numerics but costs time; float32 is the fastest precision this version computes here)",
                ctx->dev_name, !ctx->dev_active && tr__bgemm_kernel(ctx) == TR__BG_DPBF16 ? ", bfloat16's products on vdpbf16ps, no faster than fp32 on the Xeon measured" : "");
        return TR_FWD_FLOAT32;
    }
    while (fdt != TR_FWD_FLOAT32 && !tr__fdt_supported(ctx, fdt, &why)) {
        int next = fdt == TR_FWD_BFLOAT16 ? TR_FWD_FLOAT16 : TR_FWD_FLOAT32;
        tr__log(ctx, TR_LOG_WARN, "forward_dtype %s: %s; falling back to %s", tr__fdt_names[fdt], why, tr__fdt_names[next]);
        fdt = next;
    }
    if (fdt != TR_FWD_FLOAT32) {
        const char *products = "";
        if (!ctx->dev_active && fdt == TR_FWD_BFLOAT16) { /* which kernels a bfloat16 model's CPU products run on */
            int mode = tr__bgemm_kernel(ctx);
            products = mode == TR__BG_AMX ? "; products on AMX tiles" : mode == TR__BG_DPBF16 ? "; products on vdpbf16ps" : mode == TR__BG_TWIN ? "; products on the scalar twin of vdpbf16ps" : "; products on the fp32 kernels";
        }
        tr__log(ctx, TR_LOG_INFO, "forward_dtype %s on %s: fp32 master weights, gradients and optimizer state; activations, carries and matmul weights rounded to %s%s%s%s",
                tr__fdt_names[fdt], ctx->dev_name, tr__fdt_names[fdt], fdt == TR_FWD_FLOAT16 ? "; dynamic loss scaling when training" : "", products,
                ctx->tape16 ? "; the backward's tape in 16 bits" : "; the backward's tape in fp32 (TINYREC_TAPE16=0)");
    }
    return fdt;
}

TRDEF tr_status tr_model_set_forward_dtype(tr_model *m, tr_forward_dtype dtype) {
    tr_ctx *ctx;
    int fdt;
    if (!m) return TR_ERR_INVALID_ARG;
    ctx = m->ctx;
    if ((unsigned)dtype > TR_FWD_AUTO) return tr__err(ctx, TR_ERR_CONFIG, "config: forward_dtype %d is unknown (float32, bfloat16, float16, auto)", (int)dtype);
    fdt = tr__fdt_resolve(ctx, dtype);
    if (fdt != TR_FWD_FLOAT32 && !m->wlo && !(m->wlo = (float *)tr__dalloc(ctx, m->n_params * sizeof(float), 0))) return TR_ERR_OUT_OF_MEMORY;
    if (fdt == TR_FWD_FLOAT32) {
        tr__dfree(ctx, m->wlo);
        m->wlo = NULL;
    }
    m->fdt = fdt;
    m->cfg.forward_dtype = (tr_forward_dtype)fdt;
    /* the products read the rounded copy: its packings are the ones worth keeping */
    tr__pw_detach(ctx, &m->pw);
    tr__pw_attach(ctx, &m->pw, m->wlo ? m->wlo : m->params, m->n_params);
    return TR_OK;
}

/* The host copy of a tensor's device pointer (itself on the CPU). */
TR__FN float *tr__host_of(const tr_model *m, float *dev) {
    size_t P = m->n_params, D2 = 2 * (size_t)m->D;
    if (!m->host) return dev;
    if (dev >= m->params && dev < m->params + P) return m->host + (dev - m->params);
    if (dev >= m->H_init && dev < m->H_init + D2) return m->host + P + (dev - m->H_init);
    return m->host + P + D2 + (dev - m->puzzle_emb);
}

/* Tensor copies between the device and the host views (no-ops on the CPU). */
TR__FN tr_status tr__model_upload(tr_model *m) {
    int i;
    tr_status st;
    m->pw.version++;
    if (!m->host) return TR_OK;
    for (i = 0; i < m->n_tensors; i++)
        if ((st = tr__dput(m->ctx, m->tensors[i].dev, m->tensors[i].data, m->tensors[i].numel * sizeof(float))) != TR_OK) return st;
    m->host_stale = 0;
    return TR_OK;
}

TR__FN tr_status tr__model_download(tr_model *m) {
    int i;
    tr_status st;
    if (!m->host || !m->host_stale) return TR_OK;
    for (i = 0; i < m->n_tensors; i++)
        if ((st = tr__dget(m->ctx, m->tensors[i].data, m->tensors[i].dev, m->tensors[i].numel * sizeof(float))) != TR_OK) return st;
    m->host_stale = 0;
    return TR_OK;
}

TRDEF tr_status tr_model_commit_tensors(tr_model *m) {
    if (!m) return TR_ERR_INVALID_ARG;
    return tr__model_upload(m);
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
    tr_status st;
    if (!m || !out || index < 0 || index >= m->n_tensors) return TR_ERR_INVALID_ARG;
    if ((st = tr__model_download((tr_model *)m)) != TR_OK) return st; /* the views are host copies */
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
/* Floats of n values: n, or on a 16-bit tape (half) two values per float. */
TR__FN size_t tr__vals(size_t n, int half) { return half ? (n + 1) / 2 : n; }
/* Floats one block records per batch row (half: a 16-bit tape's record). */
TR__FN size_t tr__block_rec_floats(const tr_model *m, int half) {
    size_t S = (size_t)m->S, D = (size_t)m->D, n;
    n = m->cfg.mlp_t ? tr__vals(2 * (size_t)m->It * D, half) + D /* mix, rstd1 */ : tr__vals(4 * S * D, half) + (size_t)m->H * S + S;
    n += tr__vals(S * D /* h1 */ + 2 * S * (size_t)m->I /* gu */ + S * D /* out */, half) + S /* rstd2 */;
    return n + 16 * 8; /* alignment slack */
}
/* Scratch a block needs besides its record: activation A, projection output, attention rows. */
TR__FN size_t tr__block_tmp_floats(const tr_model *m, int B) {
    size_t S = (size_t)m->S, D = (size_t)m->D;
    size_t a = TR__MAX((size_t)m->It * D, S * (size_t)m->I);
    return (size_t)B * a + (size_t)B * TR__MAX(S * D, (size_t)m->It * D) + (size_t)m->ctx->num_threads * tr__attention_scratch_floats(m->S, m->hd) + 64;
}

TR__FN float *tr__carve(float **cursor, size_t n) {
    float *p = *cursor;
    *cursor += (n + 15) & ~(size_t)15;
    return p;
}

/* Points a record's buffers at consecutive memory for B rows (half: a 16-bit tape's); without with_out,
   `out` is set separately. */
TR__FN void tr__rec_bind(const tr_model *m, tr__block_rec *r, float **cur, int B, int with_out, int half) {
    size_t S = (size_t)m->S, D = (size_t)m->D;
    if (m->cfg.mlp_t) {
        r->mix = tr__carve(cur, tr__vals((size_t)B * 2 * m->It * D, half));
        r->rstd1 = tr__carve(cur, (size_t)B * D);
        r->att_o = r->lse = NULL;
    } else {
        r->mix = tr__carve(cur, tr__vals((size_t)B * 3 * S * D, half));
        r->att_o = tr__carve(cur, tr__vals((size_t)B * S * D, half));
        r->lse = tr__carve(cur, (size_t)B * m->H * S);
        r->rstd1 = tr__carve(cur, (size_t)B * S);
    }
    r->h1 = tr__carve(cur, tr__vals((size_t)B * S * D, half));
    r->gu = tr__carve(cur, tr__vals((size_t)B * S * 2 * m->I, half));
    r->rstd2 = tr__carve(cur, (size_t)B * S);
    r->out = with_out ? tr__carve(cur, tr__vals((size_t)B * S * D, half)) : NULL;
}

/* Workspace floats for B rows: one fp32 block record, block scratch, the backward's gradient buffers (dbig the
   largest of its uses, tr__block_bwd), and last (tr__ws_in) a block input unpacked from a 16-bit tape. */
TR__FN size_t tr__ws_floats(const tr_model *m, int B) {
    size_t dbig = TR__MAX(2 * (size_t)m->S * TR__MAX(m->I, 3 * m->D / 2 + 1), 2 * (size_t)m->It * m->D);
    return tr__block_rec_floats(m, 0) * (size_t)B + tr__block_tmp_floats(m, B) + (size_t)B * ((size_t)m->S * m->D * 7 + dbig) + 256;
}
/* Rows (samples) the workspace holds: the recursion runs a larger batch in slices of this many rows, so that
   the block scratch stays bounded (m->ws_tokens rows x positions) whatever the batch; only the tape
   grows with it. Even, so that a slice starts on a whole float of a 16-bit tape. */
TR__FN int tr__ws_rows(const tr_model *m, int B) {
    int r = m->ws_tokens / m->S, n;
    r = r < 2 ? 2 : r & ~1;
    if (B <= r) return B;
    n = (B + r - 1) / r; /* slices, then equal ones (a short last slice would waste the device) */
    r = (B + n - 1) / n;
    return r + (r & 1);
}
TR__FN float *tr__ws_in(const tr_model *m, int B) { return m->ws + tr__ws_floats(m, B) - (size_t)B * m->S * m->D; }

/* The workspace (tr__ws_floats) for B rows. */
TR__FN tr_status tr__reserve_ws(tr_model *m, int B) {
    size_t n;
    if (B <= m->ws_B) return TR_OK;
    n = tr__ws_floats(m, B);
    tr__dfree(m->ctx, m->ws);
    m->ws_B = 0;
    m->ws = NULL;
    if (tr__fault_oom(m->ctx, B)) return tr__err(m->ctx, TR_ERR_OUT_OF_MEMORY, "opencl: out of device memory for the workspace of %d rows (injected fault)", B);
    m->ws = (float *)tr__dalloc(m->ctx, n * sizeof(float), 0);
    if (!m->ws) return TR_ERR_OUT_OF_MEMORY;
    m->ws_B = B;
    return TR_OK;
}

/* Blocks one recorded net application holds: the deeper module's (HRM's H and L may differ). */
TR__FN int tr__rec_layers(const tr_model *m) { return TR__MAX(m->modules[0].n_layers, m->modules[m->n_modules - 1].n_layers); }

/* Whether this model's tape holds 16-bit values: a bfloat16 / float16 model's recorded activations are
   rounded to it already, so 16 bits keep them exactly (TINYREC_TAPE16=0: fp32 all the same). */
TR__FN int tr__tape_half(const tr_model *m) { return m->ctx->tape16 && (m->fdt == TR_FWD_BFLOAT16 || m->fdt == TR_FWD_FLOAT16); }
/* Floats of one recorded net application for B rows. */
TR__FN size_t tr__tape_net_floats(const tr_model *m, int B, int half) {
    return (size_t)B * (tr__vals((size_t)m->S * m->D, half) + tr__block_rec_floats(m, half) * (size_t)tr__rec_layers(m)) + 64;
}

TR__FN tr_status tr__reserve_tape(tr_model *m, int B, int nets) {
    size_t per_net, n;
    int i, l, half = tr__tape_half(m);
    if (B == m->tape_B && nets == m->tape_nets && half == m->tape_half) return TR_OK;
    tr__tape_free(m, m->tape_nets);
    if (tr__fault_oom(m->ctx, B)) return tr__err(m->ctx, TR_ERR_OUT_OF_MEMORY, "opencl: out of device memory for the recorded cycle of %d rows (injected fault)", B);
    per_net = tr__tape_net_floats(m, B, half);
    if (!tr__size_mul(per_net, (size_t)nets, &n)) return tr__err(m->ctx, TR_ERR_OVERFLOW, "tape size overflows");
    m->nets = (tr__net_rec *)tr__calloc(m->ctx, (size_t)nets, sizeof(tr__net_rec));
    if (!m->nets) return TR_ERR_OUT_OF_MEMORY;
    for (i = 0; i < nets; i++) {
        float *cur = m->nets[i].mem = (float *)tr__dalloc(m->ctx, per_net * sizeof(float), 0);
        if (!cur) {
            tr__tape_free(m, i);
            return TR_ERR_OUT_OF_MEMORY;
        }
        m->nets[i].h0 = tr__carve(&cur, tr__vals((size_t)B * m->S * m->D, half));
        for (l = 0; l < tr__rec_layers(m); l++) tr__rec_bind(m, &m->nets[i].blocks[l], &cur, B, 1, half);
    }
    m->tape_B = B;
    m->tape_nets = nets;
    m->tape_half = half;
    return TR_OK;
}

/* --- blocks ------------------------------------------------------------------------------- */
/* bfloat16 / float16: proj = R(x + R(proj)), the residual sum the reference forms in the forward precision
   before its norm. */
TR__FN tr_status tr__round_residual(tr_model *m, const float *x, float *proj, size_t n) {
    tr_status st;
    if ((st = TR__RND(m, proj, n)) || (st = tr__op_add(m->ctx, n, x, proj, proj))) return st;
    return TR__RND(m, proj, n);
}

/* Forward of one block: r->in -> r->out, filling the record. tmp: tr__block_tmp_floats. */
TR__FN tr_status tr__block_fwd(tr_model *m, const tr__layer *ly, int B, tr__block_rec *r, float *tmp, int taped) {
    tr_ctx *ctx = m->ctx;
    size_t S = (size_t)m->S, D = (size_t)m->D, I = (size_t)m->I, BS = (size_t)B * S;
    float eps = (float)m->cfg.rms_norm_eps;
    float *act = tmp, *proj = tmp + (size_t)B * TR__MAX((size_t)m->It * D, S * I), *rows = proj + (size_t)B * TR__MAX(S * D, (size_t)m->It * D);
    tr_status st;
    /* In bfloat16 / float16 (m->fdt) every product's output, the SwiGLU activation and RoPE's output are
       rounded, and a residual sum is rounded before its norm (so the norm's input is passed as one operand),
       whose fp32 result is rounded in turn (reference-models.md 1.5). */
    const float *res = m->fdt ? proj : r->in, *add = m->fdt ? NULL : proj;
    if (m->cfg.mlp_t) {
        size_t It = (size_t)m->It;
        /* token mix on the transpose without transposing: G_b = W_tgu [2It,S] . h_b [S,D], act_b = swiglu(G_b) */
        if ((st = tr__op_sgemm_gate_up(ctx, m->fdt, B, It, D, S, TR__W(m, ly->tgu), S, 0, r->in, D, S * D, r->mix, 2 * It * D, taped, act, It * D))) return st;
        if ((st = tr__op_sgemm_batched(ctx, B, 0, 0, S, D, It, TR__W(m, ly->tdown), It, 0, act, D, It * D, proj, D, S * D, 0))) return st;
        if (m->fdt && (st = tr__round_residual(m, r->in, proj, BS * D))) return st;
        if ((st = tr__op_rms_cols_fwd(ctx, B, (int)S, (int)D, res, add, r->h1, r->rstd1, eps))) return st;
    } else {
        if ((st = tr__op_sgemm_rnd(ctx, m->fdt, 1, 0, 1, BS, 3 * D, D, r->in, D, 0, TR__W(m, ly->qkv), D, 0, r->mix, 0, 0))) return st;
        if (m->cfg.pos_encodings == TR_POS_ROPE &&
            ((st = tr__op_rope(ctx, (long)BS, (int)S, m->H, m->hd, r->mix, m->rope_cos, m->rope_sin, 0)) || (st = TR__RND(m, r->mix, BS * 3 * D))))
            return st;
        if ((st = tr__op_attention_fwd(ctx, B, (int)S, m->H, m->hd, r->mix, r->att_o, r->lse, rows)) || (st = TR__RND(m, r->att_o, BS * D))) return st;
        if ((st = tr__op_sgemm(ctx, 0, 1, BS, D, D, r->att_o, D, TR__W(m, ly->o), D, proj, D, 0))) return st;
        if (m->fdt && (st = tr__round_residual(m, r->in, proj, BS * D))) return st;
        if ((st = tr__op_rms_rows_fwd(ctx, (long)BS, (int)D, res, add, r->h1, r->rstd1, eps))) return st;
    }
    if ((st = TR__RND(m, r->h1, BS * D))) return st;
    /* channel SwiGLU: gu = h1 . W_guᵀ, act = silu(g) * u, proj = act . W_downᵀ */
    if ((st = tr__op_sgemm_rnd(ctx, m->fdt, 1, 0, 1, BS, 2 * I, D, r->h1, D, 0, TR__W(m, ly->gu), D, 0, r->gu, 0, 0))) return st;
    if ((st = tr__op_swiglu_fwd(ctx, m->fdt, (long)BS, (long)I, r->gu, 2 * I, act, I))) return st;
    if ((st = tr__op_sgemm(ctx, 0, 1, BS, D, I, act, I, TR__W(m, ly->down), I, proj, D, 0))) return st;
    if (m->fdt) {
        if ((st = tr__round_residual(m, r->h1, proj, BS * D)) || (st = tr__op_rms_rows_fwd(ctx, (long)BS, (int)D, proj, NULL, r->out, r->rstd2, eps))) return st;
        return TR__RND(m, r->out, BS * D);
    }
    return tr__op_rms_rows_fwd(ctx, (long)BS, (int)D, r->h1, proj, r->out, r->rstd2, eps);
}

/* Backward of one block: dout -> din (overwritten), accumulating weight grads into gl.
   g1, g2: [B,S,D] scratch; dbig: [B, max(S*2I, 2It*D, S*3D)] scratch; tmp as in forward. */
TR__FN tr_status tr__block_bwd(tr_model *m, const tr__layer *ly, const tr__block_rec *r, int B, const float *dout, float *din,
                               float *g1, float *g2, float *dbig, float *tmp) {
    tr_ctx *ctx = m->ctx;
    size_t S = (size_t)m->S, D = (size_t)m->D, I = (size_t)m->I, BS = (size_t)B * S;
    float *act = tmp, *dact = tmp + (size_t)B * TR__MAX((size_t)m->It * D, S * I), *rows = dact + (size_t)B * TR__MAX(S * D, (size_t)m->It * D);
    float *g_gu = TR__GRAD(m, ly->gu), *g_down = TR__GRAD(m, ly->down);
    tr_status st;
    /* bfloat16 / float16: the products read the rounded weights, and each activation gradient is rounded once
       complete, as the reference's autograd stores it (weight gradients accumulate in fp32) */
    /* channel SwiGLU half */
    if ((st = tr__op_rms_rows_bwd(ctx, (long)BS, (int)D, dout, r->out, r->rstd2, g1)) || (st = TR__RND(m, g1, BS * D))) return st; /* g1 = d(h1 + proj) */
    /* the activation is recomputed from the saved gate_up rather than kept on the tape: one
       elementwise pass instead of S * I more floats per row and block */
    if ((st = tr__op_swiglu_fwd(ctx, m->fdt, (long)BS, (long)I, r->gu, 2 * I, act, I))) return st;
    if ((st = tr__op_sgemm(ctx, 1, 0, D, I, BS, g1, D, act, I, g_down, I, 1))) return st;
    if ((st = tr__op_sgemm_rnd(ctx, m->fdt, 1, 0, 0, BS, I, D, g1, D, 0, TR__W(m, ly->down), I, 0, act, 0, 0))) return st; /* act <- d act */
    if ((st = tr__op_swiglu_bwd(ctx, (long)BS, (long)I, r->gu, 2 * I, act, I, dbig)) || (st = TR__RND(m, dbig, BS * 2 * I))) return st;
    if ((st = tr__op_sgemm(ctx, 1, 0, 2 * I, D, BS, dbig, 2 * I, r->h1, D, g_gu, D, 1))) return st;
    if ((st = tr__dcopy(ctx, g2, g1, BS * D * sizeof(float)))) return st;
    if ((st = tr__op_sgemm_rnd(ctx, m->fdt, 1, 0, 0, BS, D, 2 * I, dbig, 2 * I, 0, TR__W(m, ly->gu), D, 0, g2, 0, 1))) return st; /* g2 = d h1 */
    if (m->cfg.mlp_t) {
        size_t It = (size_t)m->It;
        float *g_tgu = TR__GRAD(m, ly->tgu), *g_tdown = TR__GRAD(m, ly->tdown);
        if ((st = tr__op_rms_cols_bwd(ctx, B, (int)S, (int)D, g2, r->h1, r->rstd1, g1)) || (st = TR__RND(m, g1, BS * D))) return st; /* g1 = d(in + proj) */
        if ((st = tr__dcopy(ctx, din, g1, BS * D * sizeof(float)))) return st;
        /* per row b: g_tdown += g_b . act_bᵀ; dact_b = W_tdownᵀ . g_b; g_tgu += dmix_b . in_bᵀ; din_b += W_tguᵀ . dmix_b */
        if ((st = tr__op_sgemm_swiglu(ctx, m->fdt, B, 0, 1, S, It, D, g1, D, S * D, r->mix, D, 2 * It * D, g_tdown, It, 0, 1, act))) return st;
        if ((st = tr__op_sgemm_rnd(ctx, m->fdt, B, 1, 0, It, D, S, TR__W(m, ly->tdown), It, 0, g1, D, S * D, dact, It * D, 0))) return st;
        if ((st = tr__op_swiglu_bwd(ctx, B, (long)(It * D), r->mix, 2 * It * D, dact, It * D, dbig)) || (st = TR__RND(m, dbig, (size_t)B * 2 * It * D))) return st;
        if ((st = tr__op_sgemm_batched(ctx, B, 0, 1, 2 * It, S, D, dbig, D, 2 * It * D, r->in, D, S * D, g_tgu, S, 0, 1))) return st;
        if ((st = tr__op_sgemm_batched(ctx, B, 1, 0, S, D, 2 * It, TR__W(m, ly->tgu), S, 0, dbig, D, 2 * It * D, din, D, S * D, 1))) return st;
    } else {
        float *g_qkv = TR__GRAD(m, ly->qkv), *g_o = TR__GRAD(m, ly->o);
        if ((st = tr__op_rms_rows_bwd(ctx, (long)BS, (int)D, g2, r->h1, r->rstd1, g1)) || (st = TR__RND(m, g1, BS * D))) return st; /* g1 = d(in + proj) */
        if ((st = tr__op_sgemm(ctx, 1, 0, D, D, BS, g1, D, r->att_o, D, g_o, D, 1))) return st;
        if ((st = tr__op_sgemm_rnd(ctx, m->fdt, 1, 0, 0, BS, D, D, g1, D, 0, TR__W(m, ly->o), D, 0, g2, 0, 0))) return st; /* g2 = d att_o */
        if ((st = tr__op_attention_bwd(ctx, B, (int)S, m->H, m->hd, r->mix, r->att_o, r->lse, g2, dbig, rows)) || (st = TR__RND(m, dbig, BS * 3 * D))) return st;
        if (m->cfg.pos_encodings == TR_POS_ROPE &&
            ((st = tr__op_rope(ctx, (long)BS, (int)S, m->H, m->hd, dbig, m->rope_cos, m->rope_sin, 1)) || (st = TR__RND(m, dbig, BS * 3 * D))))
            return st;
        if ((st = tr__op_sgemm(ctx, 1, 0, 3 * D, D, BS, dbig, 3 * D, r->in, D, g_qkv, D, 1))) return st;
        if ((st = tr__dcopy(ctx, din, g1, BS * D * sizeof(float)))) return st;
        if ((st = tr__op_sgemm(ctx, 0, 0, BS, D, 3 * D, dbig, 3 * D, TR__W(m, ly->qkv), D, din, D, 1))) return st;
    }
    return TR__RND(m, din, BS * D);
}

/* A record's 16-bit activations from (unpack = 0) or to (unpack = 1) the fp32 record f; the statistics
   (lse, rstd) are not copied: the fp32 record points at the tape's. */
TR__FN tr_status tr__rec_half(tr_model *m, int B, int unpack, const tr__block_rec *t, tr__block_rec *f) {
    size_t BS = (size_t)B * m->S, D = (size_t)m->D, I = (size_t)m->I;
    tr_status st;
    if ((st = tr__op_half(m->ctx, m->fdt, unpack, f->mix, t->mix, m->cfg.mlp_t ? (size_t)B * 2 * m->It * D : BS * 3 * D))) return st;
    if (!m->cfg.mlp_t && (st = tr__op_half(m->ctx, m->fdt, unpack, f->att_o, t->att_o, BS * D))) return st;
    if ((st = tr__op_half(m->ctx, m->fdt, unpack, f->h1, t->h1, BS * D)) || (st = tr__op_half(m->ctx, m->fdt, unpack, f->gu, t->gu, BS * 2 * I))) return st;
    return tr__op_half(m->ctx, m->fdt, unpack, f->out, t->out, BS * D);
}

/* The fp32 block record in the workspace, with the statistics of tape record t (a 16-bit tape's) or its own. */
TR__FN void tr__ws_rec(tr_model *m, int B, int with_out, const tr__block_rec *t, tr__block_rec *r) {
    float *cur = m->ws;
    tr__rec_bind(m, r, &cur, B, with_out, 0);
    if (t) r->lse = t->lse, r->rstd1 = t->rstd1, r->rstd2 = t->rstd2;
}

/* Rows b0.. of a tape record laid out for a larger batch: each field is row-major [B, ...], so a slice is
   an offset (b0 is even: on a 16-bit tape a slice starts on a whole float). Each block's `in` is the output
   of the one before (h0 for the first). */
TR__FN void tr__net_rows(const tr_model *m, const tr__net_rec *rec, size_t b0, tr__net_rec *v) {
    size_t S = (size_t)m->S, D = (size_t)m->D, SD = S * D;
    int l, half = m->tape_half;
#define TR__ROWS_OF(p, per) ((p) ? (p) + (half ? b0 * (per) / 2 : b0 * (per)) : NULL)
    v->mem = rec->mem;
    v->h0 = TR__ROWS_OF(rec->h0, SD);
    for (l = 0; l < tr__rec_layers(m); l++) {
        const tr__block_rec *r = &rec->blocks[l];
        tr__block_rec *o = &v->blocks[l];
        o->mix = TR__ROWS_OF(r->mix, m->cfg.mlp_t ? 2 * (size_t)m->It * D : 3 * SD);
        o->att_o = TR__ROWS_OF(r->att_o, SD);
        o->h1 = TR__ROWS_OF(r->h1, SD);
        o->gu = TR__ROWS_OF(r->gu, S * 2 * (size_t)m->I);
        o->out = TR__ROWS_OF(r->out, SD);
        o->lse = r->lse ? r->lse + b0 * (size_t)m->H * S : NULL; /* the statistics are fp32 */
        o->rstd1 = r->rstd1 + b0 * (m->cfg.mlp_t ? D : S);
        o->rstd2 = r->rstd2 + b0 * S;
        o->in = l ? v->blocks[l - 1].out : v->h0;
    }
#undef TR__ROWS_OF
}

/* tr__net_fwd on B rows that fit the workspace (rec: their slice of the tape). */
TR__FN tr_status tr__net_fwd_rows(tr_model *m, const tr__module *md, int B, const float *z, const float *inj, float *out, tr__net_rec *rec) {
    size_t n = (size_t)B * m->S * m->D;
    int l, half = rec && m->tape_half, in_tape = rec && !half;
    tr_status st;
    float *tmp = m->ws + tr__block_rec_floats(m, 0) * (size_t)B, *h0 = in_tape ? rec->h0 : out;
    tr__block_rec scratch;
    if ((st = tr__op_add(m->ctx, n, z, inj, h0)) || (st = TR__RND(m, h0, n))) return st;
    if (half && (st = tr__op_half(m->ctx, m->fdt, 0, h0, rec->h0, n))) return st;
    for (l = 0; l < md->n_layers; l++) {
        tr__block_rec *r = in_tape ? &rec->blocks[l] : &scratch;
        if (!in_tape) {
            tr__ws_rec(m, B, 0, rec ? &rec->blocks[l] : NULL, r);
            r->in = out;
            r->out = out; /* in-place is safe: the input is consumed before the final norm writes */
        }
        if ((st = tr__block_fwd(m, &md->layers[l], B, r, tmp, rec != NULL)) != TR_OK) return st;
        if (half && (st = tr__rec_half(m, B, 0, &rec->blocks[l], r))) return st;
    }
    return in_tape ? tr__dcopy(m->ctx, out, rec->blocks[md->n_layers - 1].out, n * sizeof(float)) : TR_OK;
}

/* Applies a module: out = blocks(z + inj) (out may alias z), in slices of tr__ws_rows rows (the rows are
   independent). With rec != NULL the activations go to the tape: computed there (an fp32 tape, then the
   result is copied to out), or in the workspace and out and then packed (a 16-bit tape). */
TR__FN tr_status tr__net_fwd(tr_model *m, const tr__module *md, int B, const float *z, const float *inj, float *out, tr__net_rec *rec) {
    size_t row = (size_t)m->S * m->D;
    int b0, nb, step = tr__ws_rows(m, B);
    tr_status st;
    for (b0 = 0; b0 < B; b0 += nb) {
        tr__net_rec slice;
        nb = TR__MIN(step, B - b0);
        if (rec) tr__net_rows(m, rec, (size_t)b0, &slice);
        if ((st = tr__net_fwd_rows(m, md, nb, z + b0 * row, inj + b0 * row, out + b0 * row, rec ? &slice : NULL)) != TR_OK) return st;
    }
    return TR_OK;
}

/* Backward progress for data-parallel training: fn(user, lo, hi) once m->grads[lo, hi) holds its final
   value for the step; the ranges cover the parameters once per backward, in an order that depends on the
   configuration alone (the same on every rank, whatever its device): the heads, each module's layers from
   the last (at the module's last application), the embeddings. */
typedef struct tr__grad_ready {
    tr_status (*fn)(void *user, size_t lo, size_t hi);
    void *user;
} tr__grad_ready;

/* Where layer l of module mi starts in the flat parameters. */
TR__FN size_t tr__layer_start(const tr_model *m, int mi, int l) {
    const tr__layer *ly = &m->modules[mi].layers[l];
    return (size_t)((m->cfg.mlp_t ? ly->tgu : ly->qkv) - m->params);
}

/* The parameter range of layer l of module mi: up to the next layer's start (the heads' after the last). */
TR__FN tr_status tr__layer_ready(tr_model *m, const tr__grad_ready *gr, const tr__module *md, int l) {
    int mi = (int)(md - m->modules);
    size_t hi = l + 1 < md->n_layers ? tr__layer_start(m, mi, l + 1) : mi + 1 < m->n_modules ? tr__layer_start(m, mi + 1, 0) : (size_t)(m->W_lm - m->params);
    return gr ? gr->fn(gr->user, tr__layer_start(m, mi, l), hi) : TR_OK;
}

/* tr__net_bwd on B rows that fit the workspace (rec: their slice of the tape). */
TR__FN tr_status tr__net_bwd_rows(tr_model *m, const tr__module *md, int B, const tr__net_rec *rec, const float *dout, float *dh0, const tr__grad_ready *gr) {
    size_t n = (size_t)B * m->S * m->D;
    float *g1 = m->ws + tr__block_rec_floats(m, 0) * (size_t)B + tr__block_tmp_floats(m, B);
    float *g2 = g1 + n, *gcur = g2 + n, *gnext = gcur + n, *dbig = gnext + n;
    float *tmp = m->ws + tr__block_rec_floats(m, 0) * (size_t)B;
    int l;
    tr_status st;
    if ((st = tr__dcopy(m->ctx, gcur, dout, n * sizeof(float)))) return st;
    for (l = md->n_layers - 1; l >= 0; l--) {
        float *dst = l ? gnext : dh0, *t;
        tr__block_rec unpacked;
        const tr__block_rec *r = &rec->blocks[l];
        if (m->tape_half) { /* the block's record and input back in fp32, in the workspace */
            tr__ws_rec(m, B, 1, r, &unpacked);
            unpacked.in = tr__ws_in(m, B);
            if ((st = tr__rec_half(m, B, 1, r, &unpacked)) || (st = tr__op_half(m->ctx, m->fdt, 1, (float *)unpacked.in, l ? rec->blocks[l - 1].out : rec->h0, n)))
                return st;
            r = &unpacked;
        }
        if ((st = tr__block_bwd(m, &md->layers[l], r, B, gcur, dst, g1, g2, dbig, tmp)) != TR_OK) return st;
        if ((st = tr__layer_ready(m, gr, md, l)) != TR_OK) return st;
        t = gcur, gcur = gnext, gnext = t;
    }
    return TR_OK;
}

/* Backward through a recorded module application: dout -> dh0 (overwritten), in the forward's slices of rows,
   each through every layer (the weight gradients accumulate over the slices, in order). gr (may be NULL):
   this is the module's last application in the backward; its layers' gradients are final as the last
   slice passes them. */
TR__FN tr_status tr__net_bwd(tr_model *m, const tr__module *md, int B, const tr__net_rec *rec, const float *dout, float *dh0, const tr__grad_ready *gr) {
    size_t row = (size_t)m->S * m->D;
    int b0, nb, step = tr__ws_rows(m, B);
    tr_status st;
    for (b0 = 0; b0 < B; b0 += nb) {
        tr__net_rec slice;
        nb = TR__MIN(step, B - b0);
        tr__net_rows(m, rec, (size_t)b0, &slice);
        if ((st = tr__net_bwd_rows(m, md, nb, &slice, dout + b0 * row, dh0 + b0 * row, b0 + nb < B ? NULL : gr)) != TR_OK) return st;
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
    float *rowstat;       /* [B,4] per-row token statistics of the loss (tr__op_xent) */
    int32_t *steps, *halted;
    int32_t *inputs, *labels, *pids; /* the rows each slot is working on */
    /* On a device: device copies of inputs/labels/pids/halted, host copies of q/rowstat/logits.
       On the CPU each pair is the same memory. */
    int32_t *d_inputs, *d_labels, *d_pids, *d_halted;
    float *hq, *hrowstat, *hlogits;
    int view; /* rows of another carry: owns nothing */
};

TRDEF void tr_carry_destroy(tr_carry *c) {
    tr_ctx *ctx;
    if (!c || c->view) return;
    ctx = c->m->ctx;
    tr__dfree(ctx, c->z_H);
    tr__free(ctx, c->steps);
    if (c->d_inputs != c->inputs) tr__dfree(ctx, c->d_inputs);
    if (c->hq != c->q) tr__free(ctx, c->hq);
    if (c->hlogits != c->logits) tr__free(ctx, c->hlogits);
    tr__free(ctx, c);
}

TRDEF tr_status tr_carry_create(tr_model *m, int B, tr_carry **out) {
    tr_carry *c;
    tr_ctx *ctx;
    size_t n, nf, ni;
    if (!m || !out) return TR_ERR_INVALID_ARG;
    ctx = m->ctx;
    *out = NULL;
    if (B <= 0 || B > (1 << 20)) return tr__err(ctx, TR_ERR_INVALID_ARG, "batch_size %d is out of range (1..%d)", B, 1 << 20);
    if (!ctx->dev_active) {
        size_t need;
        char what[96];
        tr_status st;
        tr_model_memory(m, B, NULL, &need);
        snprintf(what, sizeof what, "inference at batch size %d", B);
        if ((st = tr__check_memory(ctx, (double)need, what)) != TR_OK) return st;
    }
    c = (tr_carry *)tr__calloc(ctx, 1, sizeof *c);
    if (!c) return TR_ERR_OUT_OF_MEMORY;
    c->m = m;
    c->B = B;
    n = (size_t)B * m->S * m->D;
    nf = 4 * n + (size_t)B * m->L * m->V + 6 * (size_t)B + 64;
    ni = 2 * (size_t)B + 2 * (size_t)B * m->L + (size_t)B;
    c->z_H = (float *)tr__dalloc(ctx, nf * sizeof(float), 1);
    c->steps = c->z_H ? (int32_t *)tr__calloc(ctx, ni, sizeof(int32_t)) : NULL;
    if (!c->steps) goto oom;
    c->z_L = c->z_H + n;
    c->x = c->z_L + n;
    c->inj = c->x + n;
    c->logits = c->inj + n;
    c->q = c->logits + (size_t)B * m->L * m->V;
    c->rowstat = c->q + 2 * (size_t)B;
    c->halted = c->steps + B;
    c->inputs = c->halted + B;
    c->labels = c->inputs + (size_t)B * m->L;
    c->pids = c->labels + (size_t)B * m->L;
    c->d_inputs = c->inputs, c->d_labels = c->labels, c->d_pids = c->pids, c->d_halted = c->halted;
    c->hq = c->q, c->hrowstat = c->rowstat, c->hlogits = c->logits;
    if (ctx->dev_active) {
        c->d_inputs = (int32_t *)tr__dalloc(ctx, (2 * (size_t)B * m->L + 2 * (size_t)B) * sizeof(int32_t), 1);
        if (!c->d_inputs) goto oom;
        c->d_labels = c->d_inputs + (size_t)B * m->L;
        c->d_pids = c->d_labels + (size_t)B * m->L;
        c->d_halted = c->d_pids + B;
        c->hq = (float *)tr__calloc(ctx, 6 * (size_t)B, sizeof(float));
        if (!c->hq) goto oom;
        c->hrowstat = c->hq + 2 * (size_t)B;
        c->hlogits = NULL; /* allocated when outputs are first asked for */
    }
    tr_carry_reset(c);
    *out = c;
    return TR_OK;
oom:
    if (c->d_inputs == c->inputs) c->d_inputs = NULL;
    if (c->hq == c->q) c->hq = NULL;
    c->hlogits = c->logits;
    tr_carry_destroy(c);
    return TR_ERR_OUT_OF_MEMORY;
}

/* Rows [r0, r0 + nb) of c as a carry of its own (for micro-batches). */
TR__FN void tr__carry_view(const tr_carry *c, int r0, int nb, tr_carry *v) {
    const tr_model *m = c->m;
    size_t SD = (size_t)m->S * m->D, L = (size_t)m->L;
    *v = *c;
    v->view = 1;
    v->B = nb;
    v->z_H += r0 * SD, v->z_L += r0 * SD, v->x += r0 * SD, v->inj += r0 * SD;
    v->logits += r0 * L * m->V, v->q += 2 * r0, v->rowstat += 4 * r0;
    v->steps += r0, v->halted += r0, v->inputs += r0 * L, v->labels += r0 * L, v->pids += r0;
    v->d_inputs += r0 * L, v->d_labels += r0 * L, v->d_pids += r0, v->d_halted += r0;
    v->hq += 2 * r0, v->hrowstat += 4 * r0;
    if (v->hlogits) v->hlogits += r0 * L * m->V;
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

/* Rows [r0, r0 + nb) of a batch. */
TR__FN tr_batch tr__batch_rows(const tr_model *m, const tr_batch *bt, int r0, int nb) {
    tr_batch s = *bt;
    s.inputs += (size_t)r0 * m->L;
    if (s.labels) s.labels += (size_t)r0 * m->L;
    if (s.puzzle_identifiers) s.puzzle_identifiers += r0;
    s.batch_size = nb;
    return s;
}

/* ACT step 1: halted rows restart from H_init / L_init on the incoming row of the same index.
   The step's rows (and the halted flags) go to the device: the only upload of a step. */
TR__FN tr_status tr__carry_refill(tr_model *m, tr_carry *c, const tr_batch *bt) {
    int b, s, B = c->B;
    size_t SD = (size_t)m->S * m->D, L = (size_t)m->L;
    tr_status st;
    for (b = 0; b < B; b++) {
        if (!c->halted[b]) continue;
        c->steps[b] = 0;
        memcpy(c->inputs + (size_t)b * L, bt->inputs + (size_t)b * L, L * sizeof(int32_t));
        if (bt->labels) memcpy(c->labels + (size_t)b * L, bt->labels + (size_t)b * L, L * sizeof(int32_t));
        else
            for (s = 0; s < m->L; s++) c->labels[(size_t)b * L + s] = -100;
        c->pids[b] = bt->puzzle_identifiers ? bt->puzzle_identifiers[b] : 0;
    }
    if (c->d_inputs != c->inputs) {
        /* inputs|labels|pids|halted are one block on the device; a view's rows are not */
        if ((st = tr__dput(m->ctx, c->d_inputs, c->inputs, (size_t)B * L * sizeof(int32_t))) != TR_OK ||
            (st = tr__dput(m->ctx, c->d_labels, c->labels, (size_t)B * L * sizeof(int32_t))) != TR_OK ||
            (st = tr__dput(m->ctx, c->d_pids, c->pids, (size_t)B * sizeof(int32_t))) != TR_OK ||
            (st = tr__dput(m->ctx, c->d_halted, c->halted, (size_t)B * sizeof(int32_t))) != TR_OK)
            return st;
    }
#if TINYREC_OPENCL
    if (m->ctx->dev_active) {
        if ((st = tr__cl_refill(m->ctx->cl, B, m->S, m->D, c->d_halted, m->H_init, m->L_init, c->z_H, c->z_L)) != TR_OK) return st;
    } else
#endif
        for (b = 0; b < B; b++) {
            if (!c->halted[b]) continue;
            for (s = 0; s < m->S; s++) {
                memcpy(c->z_H + b * SD + (size_t)s * m->D, m->H_init, (size_t)m->D * sizeof(float));
                memcpy(c->z_L + b * SD + (size_t)s * m->D, m->L_init, (size_t)m->D * sizeof(float));
            }
        }
    /* the reference keeps the carries in the forward precision: H_init / L_init rounded (the other rows are
       block outputs, already rounded) */
    if ((st = TR__RND(m, c->z_H, (size_t)B * SD)) != TR_OK) return st;
    return TR__RND(m, c->z_L, (size_t)B * SD);
}

/* x = sqrt(D) * [puzzle prefix ; token embeddings] (+ learned positions). */
/* In bfloat16 / float16 the embedding rows, their sum with the positions, its 1/sqrt(2) and the scaled
   result are each rounded (W_tok and W_pos through the rounded copy). */
TR__FN tr_status tr__embed_fwd(tr_model *m, const tr_carry *c, float *x) {
    int b, s, j, D = m->D, S = m->S, Lp = m->Lp, fdt = m->fdt;
    float scale = sqrtf((float)D);
    const float *W_tok = TR__W(m, m->W_tok), *W_pos = m->W_pos ? TR__W(m, m->W_pos) : NULL;
    TR__ON_CL(m->ctx, tr__cl_embed_fwd(m->ctx->cl, c->B, S, m->L, Lp, D, m->Dp, fdt, W_tok, W_pos, m->puzzle_emb, c->d_inputs, c->d_pids, x));
    for (b = 0; b < c->B; b++)
        for (s = 0; s < S; s++) {
            float *xr = x + ((size_t)b * S + s) * D;
            if (s < Lp) {
                const float *p = m->puzzle_emb + (size_t)c->pids[b] * m->Dp;
                for (j = 0; j < D; j++) {
                    int k = s * D + j;
                    xr[j] = k < m->Dp ? p[k] : 0.0f;
                }
                tr__round_ref(fdt, xr, (size_t)D);
            } else
                memcpy(xr, W_tok + (size_t)c->inputs[(size_t)b * m->L + s - Lp] * D, (size_t)D * sizeof(float));
            if (W_pos)
                for (j = 0; j < D; j++) xr[j] = tr__round1(fdt, 0.707106781f * tr__round1(fdt, xr[j] + W_pos[(size_t)s * D + j]));
            for (j = 0; j < D; j++) xr[j] = tr__round1(fdt, xr[j] * scale);
        }
    return TR_OK;
}

/* Backward of the embedding: token and position grads accumulate; the puzzle rows' grads go to
   prow [B, Dp] (consumed by sign-SGD). Single-threaded: the scatter-add is tiny. */
TR__FN tr_status tr__embed_bwd(tr_model *m, const tr_carry *c, const float *dx, float *prow) {
    int b, s, j, D = m->D, S = m->S, Lp = m->Lp;
    float scale = sqrtf((float)D);
    float *gtok = TR__GRAD(m, m->W_tok), *gpos = m->W_pos ? TR__GRAD(m, m->W_pos) : NULL;
    TR__ON_CL(m->ctx, tr__cl_embed_bwd(m->ctx->cl, c->B, S, m->L, Lp, D, m->Dp, m->V, dx, c->d_inputs, gtok, gpos, m->Dp > 0 ? prow : NULL));
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
    return TR_OK;
}

/* q = b_q + z_H[:, 0] . W_qᵀ (the q head reads the first position). */
TR__FN tr_status tr__qhead_fwd(tr_model *m, tr_carry *c) {
    int b, j;
    size_t SD = (size_t)m->S * m->D;
    const float *W_q = TR__W(m, m->W_q), *b_q = TR__W(m, m->b_q);
    TR__ON_CL(m->ctx, tr__cl_qhead_fwd(m->ctx->cl, c->B, m->S, m->D, c->z_H, W_q, b_q, c->q));
    for (b = 0; b < c->B; b++)
        for (j = 0; j < 2; j++) c->q[2 * b + j] = b_q[j] + tr__dot(c->z_H + b * SD, W_q + (size_t)j * m->D, m->D);
    return TR_OK;
}

TR__FN tr_status tr__qhead_bwd(tr_model *m, tr_carry *c, const float *dq, float *dz) {
    int b, j, k;
    size_t SD = (size_t)m->S * m->D;
    float *g_q = TR__GRAD(m, m->W_q), *g_bq = TR__GRAD(m, m->b_q);
    const float *W_q = TR__W(m, m->W_q);
    TR__ON_CL(m->ctx, tr__cl_qhead_bwd(m->ctx->cl, c->B, m->S, m->D, dq, c->z_H, W_q, dz, g_q, g_bq));
    for (b = 0; b < c->B; b++) {
        const float *zh = c->z_H + b * SD;
        float *dzb = dz + b * SD;
        for (j = 0; j < 2; j++) {
            float g = dq[2 * b + j];
            if (g == 0.0f) continue;
            for (k = 0; k < m->D; k++) {
                dzb[k] += g * W_q[(size_t)j * m->D + k];
                g_q[(size_t)j * m->D + k] += g * zh[k];
            }
            g_bq[j] += g;
        }
    }
    return TR_OK;
}

/* logits = z_H[:, Lp:] . W_lmᵀ, and the q head; q comes back to the host (halting decisions). */
TR__FN tr_status tr__heads_fwd(tr_model *m, tr_carry *c) {
    size_t SD = (size_t)m->S * m->D, D = (size_t)m->D;
    tr_status st;
    if ((st = tr__op_sgemm_rnd(m->ctx, m->fdt, c->B, 0, 1, (size_t)m->L, (size_t)m->V, D, c->z_H + (size_t)m->Lp * D, D, SD, TR__W(m, m->W_lm), D, 0,
                               c->logits, (size_t)m->L * m->V, 0)) != TR_OK)
        return st;
    if ((st = tr__qhead_fwd(m, c)) != TR_OK || (st = TR__RND(m, c->q, 2 * (size_t)c->B)) != TR_OK) return st;
    return tr__dget(m->ctx, c->hq, c->q, 2 * (size_t)c->B * sizeof(float));
}

/* Debug hook for the parity tests: called after each H cycle with (z_H, z_L) (device pointers). */
typedef void (*tr__cycle_hook)(void *user, int cycle, const float *z_H, const float *z_L);

/* One supervision step of HRM (§2.2): H_cycles updates of z_H by H_level, each after L_cycles
   updates of z_L by L_level. With grad, only the very last L_level and H_level applications are
   recorded (the 1-step gradient): tape net 0 is L's, net 1 is H's. The hook follows each z_H update. */
TR__FN tr_status tr__hrm_fwd(tr_model *m, tr_carry *c, int grad, tr__cycle_hook hook, void *hook_user) {
    const tr__module *fH = &m->modules[0], *fL = &m->modules[1];
    int B = c->B, T = m->cfg.H_cycles, n = m->cfg.L_cycles, t, i;
    size_t N = (size_t)B * m->S * m->D;
    tr_status st;
    if ((st = tr__reserve_ws(m, tr__ws_rows(m, B))) != TR_OK) return st;
    if (grad && (st = tr__reserve_tape(m, B, 2)) != TR_OK) return st;
    if ((st = tr__embed_fwd(m, c, c->x)) != TR_OK) return st;
    for (t = 0; t < T; t++) {
        int rec = grad && t == T - 1;
        if ((st = tr__op_add(m->ctx, N, c->z_H, c->x, c->inj)) != TR_OK || (st = TR__RND(m, c->inj, N)) != TR_OK) return st; /* z_H is fixed during the L updates */
        for (i = 0; i < n; i++) {
            if ((st = tr__net_fwd(m, fL, B, c->z_L, c->inj, c->z_L, rec && i == n - 1 ? &m->nets[0] : NULL)) != TR_OK) return st;
        }
        if ((st = tr__net_fwd(m, fH, B, c->z_H, c->z_L, c->z_H, rec ? &m->nets[1] : NULL)) != TR_OK) return st;
        if (hook) hook(hook_user, t, c->z_H, c->z_L);
    }
    return tr__heads_fwd(m, c);
}

/* One supervision step of TRM on the carry's current data. With grad, the last H cycle is
   recorded on the tape for tr__inner_bwd. The new (detached) carry replaces z_H / z_L. */
TR__FN tr_status tr__inner_fwd_run(tr_model *m, tr_carry *c, int grad, tr__cycle_hook hook, void *hook_user) {
    const tr__module *md = &m->modules[0];
    int B = c->B, T = m->cfg.H_cycles, n = m->cfg.L_cycles, t, i;
    size_t N = (size_t)B * m->S * m->D;
    tr_status st;
    m->pw.version++; /* the CPU's tensor views are written without a commit: weight packings live for one step */
    if (m->wlo && ((st = tr__dcopy(m->ctx, m->wlo, m->params, m->n_params * sizeof(float))) != TR_OK || (st = TR__RND(m, m->wlo, m->n_params)) != TR_OK)) return st;
    if (m->cfg.arch == TR_ARCH_HRM) return tr__hrm_fwd(m, c, grad, hook, hook_user);
    if ((st = tr__reserve_ws(m, tr__ws_rows(m, B))) != TR_OK) return st;
    if (grad && (st = tr__reserve_tape(m, B, n + 1)) != TR_OK) return st;
    if ((st = tr__embed_fwd(m, c, c->x)) != TR_OK) return st;
    for (t = 0; t < T; t++) {
        int rec = grad && t == T - 1;
        if ((st = tr__op_add(m->ctx, N, c->z_H, c->x, c->inj)) != TR_OK || (st = TR__RND(m, c->inj, N)) != TR_OK) return st; /* the injection is formed first */
        for (i = 0; i < n; i++)
            if ((st = tr__net_fwd(m, md, B, c->z_L, c->inj, c->z_L, rec ? &m->nets[i] : NULL)) != TR_OK) return st;
        if ((st = tr__net_fwd(m, md, B, c->z_H, c->z_L, c->z_H, rec ? &m->nets[n] : NULL)) != TR_OK) return st;
        if (hook) hook(hook_user, t, c->z_H, c->z_L);
    }
    return tr__heads_fwd(m, c);
}

/* Backward of the recorded cycle: dzH [B,S,D] (the heads' gradient) -> dx. bufA, bufB scratch. gr (may
   be NULL) hears of each layer whose gradient is final (tr__grad_ready). */
TR__FN tr_status tr__inner_bwd(tr_model *m, tr_carry *c, const float *dzH, float *dx, float *bufA, float *bufB, const tr__grad_ready *gr) {
    const tr__module *md = &m->modules[0];
    int n = m->cfg.L_cycles, i;
    size_t N = (size_t)c->B * m->S * m->D;
    tr_status st;
    float *dzl = bufA, *dh0 = bufB, *t;
    if (m->cfg.arch == TR_ARCH_HRM) {
        /* z_H' = f_H(z_H + z_L'), z_L' = f_L(z_L + (z_H + x)): z_H and z_L are detached, so the
           gradient goes through z_L' to x alone */
        if ((st = tr__net_bwd(m, &m->modules[0], c->B, &m->nets[1], dzH, dzl, gr)) != TR_OK) return st;
        return tr__net_bwd(m, &m->modules[1], c->B, &m->nets[0], dzl, dx, gr);
    }
    /* z_H' = f(z_H + z_L): the gradient reaches z_L (z_H came from no-grad cycles) */
    if ((st = tr__net_bwd(m, md, c->B, &m->nets[n], dzH, dzl, n ? NULL : gr)) != TR_OK) return st;
    if ((st = tr__dzero(m->ctx, dx, N * sizeof(float))) != TR_OK) return st;
    for (i = n - 1; i >= 0; i--) {
        /* z_L' = f(z_L + (z_H + x)): the same gradient reaches z_L and x */
        if ((st = tr__net_bwd(m, md, c->B, &m->nets[i], dzl, dh0, i ? NULL : gr)) != TR_OK) return st;
        if ((st = tr__op_add(m->ctx, N, dx, dh0, dx)) != TR_OK || (st = TR__RND(m, dx, N)) != TR_OK) return st;
        t = dzl, dzl = dh0, dh0 = t;
    }
    return TR_OK;
}

/* tr__inner_fwd_run with ctx->gemm_fdt set to the model's precision while it runs (tr__train_fwd_bwd: likewise). */
TR__FN tr_status tr__inner_fwd(tr_model *m, tr_carry *c, int grad, tr__cycle_hook hook, void *hook_user) {
    int saved = m->ctx->gemm_fdt;
    tr_status st;
    m->ctx->gemm_fdt = m->fdt;
    st = tr__inner_fwd_run(m, c, grad, hook, hook_user);
    m->ctx->gemm_fdt = saved;
    return st;
}

/* Per-row token statistics of the loss: rowstat[4b..] = (sum of -log p / count as hi, count,
   correct, lo), and with dlogits, d(loss / grad_div) / d logits (zero on ignored tokens). */
TR__FN tr_status tr__op_xent(tr_model *m, tr_carry *c, double grad_div, float *dlogits) {
    int b, t, V = m->V, L = m->L;
    TR__ON_CL(m->ctx, tr__cl_xent(m->ctx->cl, c->B, L, V, (int)m->cfg.loss_type, c->logits, c->d_labels, (float)grad_div, dlogits, c->rowstat));
    for (b = 0; b < c->B; b++) {
        const int32_t *lab = c->labels + (size_t)b * L;
        int count = 0, correct = 0;
        double row_loss = 0, div;
        for (t = 0; t < L; t++) count += lab[t] != -100;
        div = count > 0 ? count : 1;
        for (t = 0; t < L; t++) {
            const float *x = c->logits + ((size_t)b * L + t) * V;
            float *g = dlogits ? dlogits + ((size_t)b * L + t) * V : NULL;
            int k, am = 0;
            if (lab[t] == -100) {
                if (g) memset(g, 0, (size_t)V * sizeof(float));
                continue;
            }
            for (k = 1; k < V; k++)
                if (x[k] > x[am]) am = k;
            correct += am == lab[t];
            row_loss += tr__xent_row(x, V, lab[t], m->cfg.loss_type, g, g ? 1.0 / (div * grad_div) : 0.0);
        }
        /* the row loss as a float pair (hi + lo) keeps the fp64 sum's precision (finite differences need it) */
        c->rowstat[4 * b] = (float)(row_loss / div);
        c->rowstat[4 * b + 1] = (float)count;
        c->rowstat[4 * b + 2] = (float)correct;
        c->rowstat[4 * b + 3] = (float)(row_loss / div - (double)c->rowstat[4 * b]);
    }
    return TR_OK;
}

/* Loss, halting target and metrics of the step. With dlogits != NULL, also the gradients of
   total / grad_div w.r.t. the logits, q_halt and q_continue (dq [B,2] on the device, hdq its host
   copy). qtarget [B] (may be NULL): q_continue's Q-learning target (tr__q_target). */
TR__FN tr_status tr__loss(tr_model *m, tr_carry *c, double grad_div, float *dlogits, float *dq, float *hdq, const float *qtarget, tr_metrics *mt) {
    int b;
    tr_status st;
    memset(mt, 0, sizeof *mt);
    if ((st = tr__op_xent(m, c, grad_div, dlogits)) != TR_OK) return st;
    if ((st = tr__dget(m->ctx, c->hrowstat, c->rowstat, 4 * (size_t)c->B * sizeof(float))) != TR_OK) return st;
    for (b = 0; b < c->B; b++) {
        const float *rs = c->hrowstat + 4 * (size_t)b;
        double qh = c->hq[2 * b], gq, count = rs[1], div = count > 0 ? count : 1;
        int seq_correct = rs[2] == rs[1];
        mt->lm_loss += (double)rs[0] + (double)rs[3];
        mt->q_halt_loss += tr__bce_logits(qh, seq_correct ? 1.0 : 0.0, &gq);
        if (hdq) hdq[2 * b] = (float)(0.5 * gq / grad_div);
        if (qtarget) mt->q_continue_loss += tr__bce_logits(c->hq[2 * b + 1], qtarget[b], &gq);
        if (hdq) hdq[2 * b + 1] = qtarget ? (float)(0.5 * gq / grad_div) : 0.0f;
        if (c->halted[b] && count > 0) {
            mt->count += 1;
            mt->accuracy += rs[2] / div;
            mt->exact_accuracy += seq_correct;
            mt->q_halt_accuracy += (qh >= 0) == seq_correct;
            mt->steps += c->steps[b];
        }
    }
    mt->loss = mt->lm_loss + 0.5 * (mt->q_halt_loss + mt->q_continue_loss);
    return hdq ? tr__dput(m->ctx, dq, hdq, 2 * (size_t)c->B * sizeof(float)) : TR_OK;
}

/* Learned halting: q_halt > 0 (TRM), or q_halt > q_continue (HRM, no_ACT_continue off). */
/* Training learns q_continue by Q-learning (HRM) when it takes part in halting. */
TR__FN int tr__q_learning(const tr_model *m) { return !m->cfg.no_ACT_continue && m->cfg.halt_max_steps > 1; }
TR__FN int tr__wants_halt(const tr_model *m, const float *q) { return q[0] > (m->cfg.no_ACT_continue ? 0.0f : q[1]); }

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
            h = h || tr__wants_halt(m, c->hq + 2 * b);
            if (u < m->cfg.halt_exploration_prob) h = h && c->steps[b] >= min_steps;
        }
        c->halted[b] = h;
    }
}

/* Copies the step's outputs to o; with only_step > 0, only rows whose step count equals it
   (so that rows that halted earlier keep their answer during inference). */
TR__FN tr_status tr__fill_outputs(tr_model *m, tr_carry *c, tr_step_outputs *o, int only_step) {
    int b, t, k, L = m->L, V = m->V;
    size_t nl = (size_t)c->B * L * V;
    tr_status st;
    if (!o) return TR_OK;
    if (o->logits || o->preds) {
        if (!c->hlogits && !(c->hlogits = (float *)tr__alloc(m->ctx, nl * sizeof(float)))) return TR_ERR_OUT_OF_MEMORY;
        if ((st = tr__dget(m->ctx, c->hlogits, c->logits, nl * sizeof(float))) != TR_OK) return st;
    }
    for (b = 0; b < c->B; b++) {
        if (only_step > 0 && c->steps[b] != only_step) continue;
        if (o->logits) memcpy(o->logits + (size_t)b * L * V, c->hlogits + (size_t)b * L * V, (size_t)L * V * sizeof(float));
        if (o->preds)
            for (t = 0; t < L; t++) {
                const float *x = c->hlogits + ((size_t)b * L + t) * V;
                int am = 0;
                for (k = 1; k < V; k++)
                    if (x[k] > x[am]) am = k;
                o->preds[(size_t)b * L + t] = am;
            }
        if (o->q_halt) o->q_halt[b] = c->hq[2 * b];
        if (o->q_continue) o->q_continue[b] = c->hq[2 * b + 1];
        if (o->halted) o->halted[b] = c->halted[b];
        if (o->steps) o->steps[b] = c->steps[b];
    }
    return TR_OK;
}

TRDEF tr_status tr_model_eval_step(tr_model *m, tr_carry *c, const tr_batch *batch, tr_step_outputs *out, tr_metrics *metrics) {
    tr_status st;
    tr_metrics mt;
    if (!m || !c || c->m != m) return TR_ERR_INVALID_ARG;
    if ((st = tr__check_batch(m, batch, c->B)) != TR_OK) return st;
    if ((st = tr__carry_refill(m, c, batch)) != TR_OK) return st;
    if ((st = tr__inner_fwd(m, c, 0, NULL, NULL)) != TR_OK) return st;
    tr__update_halting(m, c, 0, NULL);
    if ((st = tr__loss(m, c, 1.0, NULL, NULL, NULL, NULL, &mt)) != TR_OK) return st;
    if (metrics) *metrics = mt;
    return tr__fill_outputs(m, c, out, 0);
}

TRDEF tr_status tr_model_infer(tr_model *m, tr_carry *c, const tr_batch *batch, int force_steps, tr_step_callback per_step, void *user, tr_step_outputs *out) {
    tr_status st;
    int step, b, maxs;
    if (!m || !c || c->m != m) return TR_ERR_INVALID_ARG;
    if ((st = tr__check_batch(m, batch, c->B)) != TR_OK) return st;
    tr_carry_reset(c);
    if ((st = tr__carry_refill(m, c, batch)) != TR_OK) return st;
    maxs = force_steps > 0 ? force_steps : m->cfg.halt_max_steps;
    for (b = 0; b < c->B; b++) c->halted[b] = 0;
    for (step = 1; step <= maxs; step++) {
        /* rows that halted keep their answer; the rest run one more supervision step */
        if ((st = tr__inner_fwd(m, c, 0, NULL, NULL)) != TR_OK) return st;
        for (b = 0; b < c->B; b++) {
            if (c->halted[b]) continue;
            c->steps[b] = step;
            c->halted[b] = step >= maxs || (force_steps <= 0 && tr__wants_halt(m, c->hq + 2 * b));
        }
        if ((st = tr__fill_outputs(m, c, out, step)) != TR_OK) return st;
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
    t.max_nonfinite_steps = 5;
    t.loss_scale_window = 2000;
    return t;
}

/* Linear warmup, then cosine from base to base * lr_min_ratio (constant when the ratio is 1). */
TRDEF double tr_lr_schedule(const tr_train_config *tc, double base, long step) {
    double prog;
    if (step < tc->lr_warmup_steps) return base * (double)step / (double)TR__MAX(1, tc->lr_warmup_steps);
    prog = (double)(step - tc->lr_warmup_steps) / (double)TR__MAX(1, tc->total_steps - tc->lr_warmup_steps);
    return base * (tc->lr_min_ratio + TR__MAX(0.0, (1.0 - tc->lr_min_ratio) * 0.5 * (1.0 + cos(3.14159265358979323846 * prog))));
}

/* The rows of a batch grouped by puzzle id, in the order sign-SGD sums them (a stable insertion
   sort: B is a batch, ids repeat a lot). groups (3B+1 ints) is filled as gid[B] | gstart[B+1] |
   order[B]: group g has id gid[g] and the rows order[gstart[g] .. gstart[g+1]). Returns the
   number of groups. The device's sign-SGD takes the same array. */
TR__FN int tr__group_rows_by_id(const int32_t *ids, int B, int32_t *groups) {
    int32_t *gid = groups, *gstart = groups + B, *order = gstart + B + 1;
    int i, j, ng = 0;
    for (i = 0; i < B; i++) order[i] = i;
    for (i = 1; i < B; i++) {
        int32_t v = order[i];
        for (j = i - 1; j >= 0 && ids[order[j]] > ids[v]; j--) order[j + 1] = order[j];
        order[j + 1] = v;
    }
    for (i = 0; i < B; i++)
        if (i == 0 || ids[order[i]] != ids[order[i - 1]]) gid[ng] = ids[order[i]], gstart[ng++] = i;
    gstart[ng] = B;
    return ng;
}

/* Sign-SGD for the puzzle table: grads of duplicate ids are summed, and only the touched rows
   decay. ids [B], prow [B, Dp]; groups: 3B+1 ints of scratch (tr__group_rows_by_id). */
TR__FN void tr__signsgd_rows(float *table, int Dp, const int32_t *ids, const float *prow, int B, int32_t *groups, float *sum, float lr, float wd) {
    int g, j, k, ng = tr__group_rows_by_id(ids, B, groups);
    const int32_t *gid = groups, *gstart = groups + B, *order = gstart + B + 1;
    for (g = 0; g < ng; g++) {
        float *row = table + (size_t)gid[g] * Dp;
        for (k = 0; k < Dp; k++) sum[k] = 0;
        for (j = gstart[g]; j < gstart[g + 1]; j++)
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
    float *hdq;                   /* host copy of dq (== dq on the CPU) */
    float *qtarget;               /* [B] q_continue's Q-learning target (HRM), host; NULL without Q-learning */
    int32_t *groups, *groups_dev; /* sign-SGD's rows by puzzle id (tr__group_rows_by_id), and its device copy */
    long step;
    tr__rng rng;
    int ema_swapped; /* 1 while tr_trainer_swap_ema has the EMA weights in the model */
    int micro;       /* rows per forward/backward pass: global_batch_size, halved on device OOM */
    int halvings;    /* at most TR__MAX_HALVINGS, then the CPU */
    int phase;       /* progress inside a step: 0 fwd/bwd, 1.. optimizer updates done */
    int nonfinite_run; /* steps in a row skipped for NaN/inf */
    double loss_scale; /* float16: the dynamic loss scale (tr_train_config.loss_scale_window) */
    int scale_good;    /* good steps since the scale last changed */
    /* the carry as it was when the step began, so a failed device step is redone on the CPU */
    float *snap;
    int32_t *snap_ints;
    tr__rng snap_rng;
    /* data-parallel (tc.comm of size > 1): host staging of what the collectives move, and the result */
    float *hgrad;    /* [P] on a device: pinned host memory where the gradients are staged and all-reduced */
    float *stage;    /* this step's gradient staging: hgrad, or m->grads itself on the CPU */
    size_t bk_lo[2], bk_hi[2]; /* buckets (tr__dist_bucket) staged but not all-reduced yet, oldest first */
    int bk_n;
    int bk_seen;     /* buckets the backward pass under way has finished */
    int bk_done;     /* buckets all-reduced this step: a pass redone after a device failure skips them */
#if TINYREC_OPENCL
    tr__cl_mem hgrad_mem; /* hgrad's pinned buffer (NULL: plain host memory) */
    tr__cl_event bk_ev[2]; /* the buckets' copies to hgrad */
#endif
    float *hrows;    /* [(size + 1) * B * Dp] every rank's puzzle-row gradients in rank order, then this rank's staged */
    int32_t *gids;   /* [size * B] their puzzle ids */
    double *hmet;    /* [size * TR__NMET] every rank's metrics */
    float *gprow;    /* device [size * B * Dp]: hrows where the sign-SGD runs */
    tr_metrics gmt;  /* the step's global metrics */
    int reduced;     /* 1 once this step's collectives are done: a device fallback after them must not repeat them */
};

/* float16's dynamic loss scaling (torch.cuda.amp.GradScaler's defaults): the gradients are computed for
   loss * scale, so that small ones do not underflow float16, and divided by it before the update. */
#define TR__LOSS_SCALE_INIT 65536.0
#define TR__LOSS_SCALE_MAX 16777216.0
TR__FN double tr__loss_scale(const tr_trainer *t) { return t->m->fdt == TR_FWD_FLOAT16 ? t->loss_scale : 1.0; }

/* tr_metrics is all doubles; the collectives move it as an array of them. */
#define TR__NMET (sizeof(tr_metrics) / sizeof(double))

/* 1 when the trainer runs data-parallel over more than one rank. */
TR__FN int tr__dist(const tr_trainer *t) { return t->tc.comm && t->tc.comm->size > 1; }

/* Forgets the buckets staged but not all-reduced (a pass that failed), once their copies have ended. */
TR__FN void tr__dist_drop(tr_trainer *t) {
#if TINYREC_OPENCL
    int i;
    for (i = 0; i < t->bk_n; i++) {
        if (t->bk_ev[i]) tr__cl_wait(t->m->ctx->cl, t->bk_ev[i], NULL);
        t->bk_ev[i] = NULL;
    }
#endif
    t->bk_n = 0;
}

TRDEF void tr_trainer_destroy(tr_trainer *t) {
    tr_ctx *ctx;
    if (!t) return;
    ctx = t->m->ctx;
    tr_carry_destroy(t->carry);
    tr__dfree(ctx, t->adam_m);
    tr__dfree(ctx, t->dz);
    if (t->hdq != t->dq) tr__free(ctx, t->hdq);
    tr__free(ctx, t->qtarget);
    tr__free(ctx, t->groups);
    tr__dfree(ctx, t->groups_dev);
    tr__dfree(ctx, t->snap);
    tr__free(ctx, t->snap_ints);
    tr__free(ctx, t->hmet);
    tr__dfree(ctx, t->gprow);
    tr__dist_drop(t);
#if TINYREC_OPENCL
    if (t->hgrad_mem) tr__cl_pinned_free(ctx->cl, t->hgrad_mem, t->hgrad);
    else
#endif
        tr__free(ctx, t->hgrad);
    tr__free(ctx, t);
}

TRDEF tr_status tr_train_config_validate(tr_ctx *ctx, const tr_train_config *tc) {
    if (!tc) return TR_ERR_INVALID_ARG;
    if (tc->global_batch_size < 1) return tr__err(ctx, TR_ERR_CONFIG, "train config: global_batch_size %d must be >= 1", tc->global_batch_size);
    if (!(tc->lr >= 0) || !(tc->puzzle_emb_lr >= 0)) return tr__err(ctx, TR_ERR_CONFIG, "train config: lr %g and puzzle_emb_lr %g must be >= 0", tc->lr, tc->puzzle_emb_lr);
    if (!(tc->lr_min_ratio >= 0 && tc->lr_min_ratio <= 1)) return tr__err(ctx, TR_ERR_CONFIG, "train config: lr_min_ratio %g must be in [0, 1]", tc->lr_min_ratio);
    if (tc->lr_warmup_steps < 0 || tc->total_steps < 0)
        return tr__err(ctx, TR_ERR_CONFIG, "train config: lr_warmup_steps %ld and total_steps %ld must be >= 0", tc->lr_warmup_steps, tc->total_steps);
    if (!(tc->beta1 >= 0 && tc->beta1 < 1) || !(tc->beta2 >= 0 && tc->beta2 < 1))
        return tr__err(ctx, TR_ERR_CONFIG, "train config: beta1 %g and beta2 %g must be in [0, 1)", tc->beta1, tc->beta2);
    if (!isfinite(tc->weight_decay) || !isfinite(tc->puzzle_emb_weight_decay))
        return tr__err(ctx, TR_ERR_CONFIG, "train config: weight_decay and puzzle_emb_weight_decay must be finite");
    if (!(tc->ema_decay >= 0 && tc->ema_decay < 1)) return tr__err(ctx, TR_ERR_CONFIG, "train config: ema_rate %g must be in [0, 1)", tc->ema_decay);
    if (tc->max_nonfinite_steps < 1) return tr__err(ctx, TR_ERR_CONFIG, "train config: max_nonfinite_steps %d must be >= 1", tc->max_nonfinite_steps);
    if (tc->loss_scale_window < 1) return tr__err(ctx, TR_ERR_CONFIG, "train config: loss_scale_window %d must be >= 1", tc->loss_scale_window);
    if (tc->comm) {
        const tr_comm *c = tc->comm;
        if (c->size < 1 || c->rank < 0 || c->rank >= c->size || c->local_rank < 0)
            return tr__err(ctx, TR_ERR_CONFIG, "train config: communicator rank %d / local rank %d out of range for size %d", c->rank, c->local_rank, c->size);
        if (!c->allreduce_sum || !c->allgather || !c->broadcast || !c->barrier) return tr__err(ctx, TR_ERR_CONFIG, "train config: the communicator lacks a callback");
        if (tc->global_batch_size % c->size)
            return tr__err(ctx, TR_ERR_CONFIG, "train config: global_batch_size %d is not a multiple of the %d ranks", tc->global_batch_size, c->size);
    }
    return TR_OK;
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
    if ((st = tr_train_config_validate(ctx, tc)) != TR_OK) return st;
    B = tc->global_batch_size / (tc->comm ? tc->comm->size : 1); /* this rank's rows */
    if (!ctx->dev_active) {
        size_t need;
        char what[96];
        tr_model_memory(m, B, &need, NULL);
        snprintf(what, sizeof what, "training at global_batch_size %d", B);
        if ((st = tr__check_memory(ctx, (double)need, what)) != TR_OK) return st;
    }
    t = (tr_trainer *)tr__calloc(ctx, 1, sizeof *t);
    if (!t) return TR_ERR_OUT_OF_MEMORY;
    t->m = m;
    t->tc = *tc;
    t->rng = tr__rng_make(ctx->seed, 7);
    t->micro = B;
    t->loss_scale = TR__LOSS_SCALE_INIT;
    P = m->n_params;
    N = (size_t)B * m->S * m->D;
    if ((st = tr_carry_create(m, B, &t->carry)) != TR_OK) goto fail;
    t->adam_m = (float *)tr__dalloc(ctx, 3 * P * sizeof(float), 1);
    if (!t->adam_m) goto oom;
    t->adam_v = t->adam_m + P;
    t->ema = t->adam_v + P;
    if ((st = tr__dcopy(ctx, t->ema, m->params, P * sizeof(float))) != TR_OK) goto fail;
    nf = 4 * N + (size_t)B * m->L * m->V + 2 * (size_t)B + (size_t)B * TR__MAX(m->Dp, 1) + (size_t)TR__MAX(m->Dp, 1) + 64;
    t->dz = (float *)tr__dalloc(ctx, nf * sizeof(float), 1);
    /* sign-SGD groups the rows of the whole global batch (every rank's, gathered) */
    t->groups = t->dz ? (int32_t *)tr__calloc(ctx, 3 * (size_t)tc->global_batch_size + 1, sizeof(int32_t)) : NULL;
    if (!t->groups) goto oom;
    if (tr__q_learning(m) && !(t->qtarget = (float *)tr__calloc(ctx, (size_t)B, sizeof(float)))) goto oom;
    t->dx = t->dz + N;
    t->bufA = t->dx + N;
    t->bufB = t->bufA + N;
    t->dlogits = t->bufB + N;
    t->dq = t->dlogits + (size_t)B * m->L * m->V;
    t->prow = t->dq + 2 * (size_t)B;
    t->psum = t->prow + (size_t)B * TR__MAX(m->Dp, 1);
    t->hdq = t->dq;
    if (ctx->dev_active) {
        t->hdq = (float *)tr__calloc(ctx, 2 * (size_t)B, sizeof(float));
        t->groups_dev = t->hdq ? (int32_t *)tr__dalloc(ctx, (3 * (size_t)tc->global_batch_size + 1) * sizeof(int32_t), 1) : NULL;
        t->snap = t->groups_dev ? (float *)tr__dalloc(ctx, 2 * N * sizeof(float), 1) : NULL;
        if (!t->snap) goto oom;
    }
    if (tc->comm && tc->comm->size > 1) {
        size_t n = tc->comm->size, rows = (size_t)B * m->Dp;
        /* one block: hmet (doubles first, for their alignment) | hrows | gids */
        size_t floats = 2 * n * TR__NMET + (n + 1) * rows + n * B;
        if (!(t->hmet = (double *)tr__calloc(ctx, floats, sizeof(float)))) goto oom;
        t->hrows = (float *)(t->hmet + n * TR__NMET);
#if TINYREC_OPENCL
        /* pinned, so that the device copies the gradients to and from it at full speed, no staging copies */
        if (ctx->dev_active) t->hgrad = (float *)tr__cl_pinned_alloc(ctx->cl, P * sizeof(float), &t->hgrad_mem);
#endif
        if (ctx->dev_active && !t->hgrad && !(t->hgrad = (float *)tr__calloc(ctx, P, sizeof(float)))) goto oom;
        t->gids = (int32_t *)(t->hrows + (n + 1) * rows);
        if (rows && !(t->gprow = (float *)tr__dalloc(ctx, n * rows * sizeof(float), 1))) goto oom;
    }
    *out = t;
    return TR_OK;
oom:
    st = TR_ERR_OUT_OF_MEMORY;
fail:
    if (t->hdq == t->dq) t->hdq = NULL;
    tr_trainer_destroy(t);
    return st;
}

TRDEF long tr_trainer_step_count(const tr_trainer *t) { return t ? t->step : 0; }

/* The backward of the heads into dz ([B,S,D], overwritten). */
TR__FN tr_status tr__heads_bwd(tr_model *m, tr_carry *c, const float *dlogits, const float *dq, float *dz) {
    size_t SD = (size_t)m->S * m->D, D = (size_t)m->D, L = (size_t)m->L, V = (size_t)m->V, Lp = (size_t)m->Lp;
    tr_status st;
    if ((st = tr__dzero(m->ctx, dz, (size_t)c->B * SD * sizeof(float))) != TR_OK) return st;
    /* dz_b[Lp:] = dlogits_b . W_lm; g_lm += sum_b dlogits_bᵀ . z_H,b[Lp:] */
    if ((st = tr__op_sgemm_batched(m->ctx, c->B, 0, 0, L, D, V, dlogits, V, L * V, TR__W(m, m->W_lm), D, 0, dz + Lp * D, D, SD, 0)) != TR_OK) return st;
    if ((st = tr__op_sgemm_batched(m->ctx, c->B, 1, 0, V, D, L, dlogits, V, L * V, c->z_H + Lp * D, D, SD, TR__GRAD(m, m->W_lm), D, 0, 1)) != TR_OK) return st;
    if ((st = tr__qhead_bwd(m, c, dq, dz)) != TR_OK) return st;
    return TR__RND(m, dz, (size_t)c->B * SD);
}

/* HRM's Q-learning target of q_continue (§3): a second no-grad step from the new carry on the same
   data (halted rows are not reset) gives (q_halt', q_continue'); the target is sigmoid(q_halt') for
   rows at their last step, else sigmoid(max(q_halt', q_continue')). The step runs on scratch that
   the loss and the backward fill only afterwards: the carry copied to dz and dx, the logits in
   dlogits, q in dq; the carry, the tape and the logits of the step stay as they are. */
TR__FN tr_status tr__q_target(tr_trainer *t, const tr_carry *c, int r0, float *target) {
    tr_model *m = t->m;
    tr_carry nx = *c;
    size_t N = (size_t)c->B * m->S * m->D;
    tr_status st;
    int b;
    nx.z_H = t->dz, nx.z_L = t->dx;
    nx.logits = t->dlogits + (size_t)r0 * m->L * m->V;
    nx.q = t->dq + 2 * (size_t)r0, nx.hq = t->hdq + 2 * (size_t)r0;
    if ((st = tr__dcopy(m->ctx, nx.z_H, c->z_H, N * sizeof(float))) != TR_OK || (st = tr__dcopy(m->ctx, nx.z_L, c->z_L, N * sizeof(float))) != TR_OK ||
        (st = tr__inner_fwd(m, &nx, 0, NULL, NULL)) != TR_OK)
        return st;
    for (b = 0; b < c->B; b++) {
        const float *q = nx.hq + 2 * (size_t)b;
        double v = c->steps[b] >= m->cfg.halt_max_steps ? q[0] : TR__MAX(q[0], q[1]);
        target[b] = (float)(1.0 / (1.0 + exp(-v)));
    }
    return TR_OK;
}

/* A training batch: valid ids, and labels. */
TR__FN tr_status tr__check_train_batch(tr_trainer *t, const tr_batch *batch) {
    tr_status st;
    if ((st = tr__check_batch(t->m, batch, t->carry->B)) != TR_OK) return st;
    return batch->labels ? TR_OK : tr__err(t->m->ctx, TR_ERR_INVALID_ARG, "batch: training needs labels");
}

TR__FN tr_status tr__dist_bucket(void *user, size_t lo, size_t hi);

/* Forward + backward of one training step; leaves the gradients in m->grads (and the puzzle
   rows' grads in t->prow). The batch runs in micro-batches of t->micro rows whose gradients
   accumulate (the loss is divided by the global batch either way). Separate from the update
   so tests can check gradients. The batch was checked by the caller (tr__check_train_batch). */
TR__FN tr_status tr__train_fwd_bwd_run(tr_trainer *t, const tr_batch *batch, tr_metrics *metrics, tr__cycle_hook hook, void *hook_user) {
    tr_model *m = t->m;
    tr_carry *c = t->carry;
    tr_metrics mt, part;
    tr_status st;
    int r0, nb;
    tr__grad_ready ready = {tr__dist_bucket, t};
    t->bk_seen = 0;
    if ((st = tr__dzero(m->ctx, m->grads, m->n_params * sizeof(float))) != TR_OK) return st;
    memset(&mt, 0, sizeof mt);
    for (r0 = 0; r0 < c->B; r0 += nb) {
        tr_carry v;
        tr_batch bt;
        size_t LV = (size_t)m->L * m->V;
        const tr__grad_ready *gr;
        nb = TR__MIN(t->micro, c->B - r0);
        tr__carry_view(c, r0, nb, &v);
        bt = tr__batch_rows(m, batch, r0, nb);
        if ((st = tr__carry_refill(m, &v, &bt)) != TR_OK) return st;
        if ((st = tr__inner_fwd(m, &v, 1, hook, hook_user)) != TR_OK) return st;
        tr__update_halting(m, &v, 1, &t->rng);
        if (t->qtarget && (st = tr__q_target(t, &v, r0, t->qtarget + r0)) != TR_OK) return st;
        if ((st = tr__loss(m, &v, (double)t->tc.global_batch_size / tr__loss_scale(t), t->dlogits + r0 * LV, t->dq + 2 * r0, t->hdq + 2 * r0,
                           t->qtarget ? t->qtarget + r0 : NULL, &part)) != TR_OK ||
            (st = TR__RND(m, t->dlogits + r0 * LV, (size_t)nb * LV)) != TR_OK || (st = TR__RND(m, t->dq + 2 * r0, 2 * (size_t)nb)) != TR_OK)
            return st;
        mt.count += part.count, mt.accuracy += part.accuracy, mt.exact_accuracy += part.exact_accuracy;
        mt.q_halt_accuracy += part.q_halt_accuracy, mt.steps += part.steps;
        mt.lm_loss += part.lm_loss, mt.q_halt_loss += part.q_halt_loss, mt.q_continue_loss += part.q_continue_loss;
        /* data-parallel with overlap: in the last micro-batch, each gradient is all-reduced once final */
        gr = tr__dist(t) && t->tc.comm->overlap && r0 + nb == c->B ? &ready : NULL;
        if ((st = tr__heads_bwd(m, &v, t->dlogits + r0 * LV, t->dq + 2 * r0, t->dz)) != TR_OK) return st;
        if (gr && (st = tr__dist_bucket(t, (size_t)(m->W_lm - m->params), m->n_params)) != TR_OK) return st;
        if ((st = tr__inner_bwd(m, &v, t->dz, t->dx, t->bufA, t->bufB, gr)) != TR_OK) return st;
        if ((st = tr__embed_bwd(m, &v, t->dx, t->prow + (size_t)r0 * TR__MAX(m->Dp, 1))) != TR_OK) return st;
        if (gr && (st = tr__dist_bucket(t, 0, tr__layer_start(m, 0, 0))) != TR_OK) return st;
    }
    mt.loss = mt.lm_loss + 0.5 * (mt.q_halt_loss + mt.q_continue_loss);
    if (metrics) *metrics = mt;
    return TR_OK;
}
TR__FN tr_status tr__train_fwd_bwd(tr_trainer *t, const tr_batch *batch, tr_metrics *metrics, tr__cycle_hook hook, void *hook_user) {
    int saved = t->m->ctx->gemm_fdt;
    tr_status st;
    t->m->ctx->gemm_fdt = t->m->fdt;
    st = tr__train_fwd_bwd_run(t, batch, metrics, hook, hook_user);
    t->m->ctx->gemm_fdt = saved;
    return st;
}

/* Sign-SGD on the device: the host groups the rows by puzzle id (it has the ids), the device
   sums each group's gradient rows and updates the table rows, in tr__signsgd_rows' order. */
/* The puzzle rows the sign-SGD update takes: this batch's, or with several ranks every rank's
   (gathered by tr__dist_reduce, in rank order: the global batch's row order). */
TR__FN int tr__update_rows(tr_trainer *t, float **prow, const int32_t **ids) {
    if (!tr__dist(t)) {
        *prow = t->prow, *ids = t->carry->pids;
        return t->carry->B;
    }
    *prow = t->gprow, *ids = t->gids;
    return t->carry->B * t->tc.comm->size;
}

TR__FN tr_status tr__signsgd_dev(tr_trainer *t, float lr, float wd) {
#if TINYREC_OPENCL
    tr_model *m = t->m;
    float *prow;
    const int32_t *ids;
    int B = tr__update_rows(t, &prow, &ids), ng = tr__group_rows_by_id(ids, B, t->groups);
    tr_status st;
    if ((st = tr__dput(m->ctx, t->groups_dev, t->groups, (3 * (size_t)B + 1) * sizeof(int32_t))) != TR_OK) return st;
    return tr__cl_signsgd(m->ctx->cl, m->puzzle_emb, m->Dp, ng, t->groups_dev, t->groups_dev + B, t->groups_dev + 2 * B + 1, prow, lr, wd);
#else
    TR__UNUSED(t), TR__UNUSED(lr), TR__UNUSED(wd);
    return TR_ERR_UNSUPPORTED;
#endif
}

/* The optimizer updates of a step, resumable: t->phase counts the updates already done, so a
   step whose device failed half-way finishes on the CPU without repeating one (phase 1 = none
   done yet, 0 again once all are). */
TR__FN tr_status tr__optimizer_update(tr_trainer *t) {
    tr_model *m = t->m;
    tr_ctx *ctx = m->ctx;
    const tr_train_config *tc = &t->tc;
    double lr, plr;
    float bc1, bc2;
    tr_status st;
    long step = t->step + 1;
    lr = tr_lr_schedule(tc, tc->lr, step);
    plr = tr_lr_schedule(tc, tc->puzzle_emb_lr, step);
    bc1 = (float)(1.0 - pow(tc->beta1, (double)step));
    bc2 = (float)(1.0 - pow(tc->beta2, (double)step));
    m->host_stale = 1;
    m->pw.version++;
    if (t->phase < 2) {
        if ((st = tr__op_adam_atan2(ctx, m->n_params, m->params, m->grads, t->adam_m, t->adam_v, (float)lr, (float)tc->weight_decay, (float)tc->beta1,
                                    (float)tc->beta2, bc1, bc2)) != TR_OK ||
            (st = tr__dfinish(ctx)) != TR_OK)
            return st;
        t->phase = 2;
    }
    if (t->phase < 3) {
        if (m->Dp > 0) {
            if (ctx->dev_active) {
                if ((st = tr__signsgd_dev(t, (float)plr, (float)tc->puzzle_emb_weight_decay)) != TR_OK || (st = tr__dfinish(ctx)) != TR_OK) return st;
            } else {
                float *prow;
                const int32_t *ids;
                int B = tr__update_rows(t, &prow, &ids);
                tr__signsgd_rows(m->puzzle_emb, m->Dp, ids, prow, B, t->groups, t->psum, (float)plr, (float)tc->puzzle_emb_weight_decay);
            }
        }
        t->phase = 3;
    }
    if (t->phase < 4) {
        if (tc->ema && ((st = tr__op_ema(ctx, m->n_params, t->ema, m->params, (float)tc->ema_decay)) != TR_OK || (st = tr__dfinish(ctx)) != TR_OK)) return st;
    }
    t->step = step;
    t->phase = 0; /* the step is complete */
    return TR_OK;
}

/* The carry at the start of a step (device only: the CPU has no failure to recover from). */
TR__FN tr_status tr__snapshot(tr_trainer *t, int restore) {
    tr_carry *c = t->carry;
    tr_model *m = t->m;
    size_t N = (size_t)c->B * m->S * m->D, ni = 2 * (size_t)c->B + 2 * (size_t)c->B * m->L + (size_t)c->B;
    tr_status st;
    if (!t->snap) return TR_OK;
    if (!t->snap_ints && !(t->snap_ints = (int32_t *)tr__alloc(m->ctx, ni * sizeof(int32_t)))) return TR_ERR_OUT_OF_MEMORY;
    if (restore) {
        memcpy(c->steps, t->snap_ints, ni * sizeof(int32_t)); /* steps|halted|inputs|labels|pids are one block */
        t->rng = t->snap_rng;
        if ((st = tr__dcopy(m->ctx, c->z_H, t->snap, 2 * N * sizeof(float))) != TR_OK) return st; /* z_H|z_L adjacent */
        return TR_OK;
    }
    memcpy(t->snap_ints, c->steps, ni * sizeof(int32_t));
    t->snap_rng = t->rng;
    return tr__dcopy(m->ctx, t->snap, c->z_H, 2 * N * sizeof(float));
}

/* *bad = the name of the first trainable tensor whose gradient holds a NaN or an infinity, or ""
   when all are finite (the puzzle embedding's sparse rows count as its table). One pass over all
   gradients (one flag read on a device); per tensor only when one is bad. */
TR__FN tr_status tr__nonfinite_grad(tr_trainer *t, const char **bad) {
    tr_model *m = t->m;
    tr_ctx *ctx = m->ctx;
    float *prow = NULL;
    const int32_t *ids;
    size_t nrows = m->Dp > 0 ? (size_t)tr__update_rows(t, &prow, &ids) * m->Dp : 0;
    int i, ok, rows_ok;
    tr_status st;
    *bad = "";
    if ((st = tr__op_all_finite(ctx, m->n_params, m->grads, &ok)) != TR_OK || (st = tr__op_all_finite(ctx, nrows, prow, &rows_ok)) != TR_OK) return st;
    if (!rows_ok) *bad = "model.inner.puzzle_emb.weights";
    for (i = 0; !ok && rows_ok && i < m->n_tensors; i++) {
        int tensor_ok;
        if (!m->tensors[i].trainable) continue;
        if ((st = tr__op_all_finite(ctx, m->tensors[i].numel, TR__GRAD(m, m->tensors[i].dev), &tensor_ok)) != TR_OK) return st;
        if (!tensor_ok) {
            *bad = m->tensors[i].name;
            break;
        }
    }
    return TR_OK;
}

/* After the backward: a NaN or infinite loss or gradient (bad data, a diverging learning rate, an
   injected fault) skips the update, logs the step and the tensor, and starts every ACT row afresh so
   that a poisoned carry does not live on. Returns TR_OK to go on with the update, 1 when the step was
   skipped, TR_ERR_NONFINITE after max_nonfinite_steps such steps in a row, or a device error. */
TR__FN int tr__check_finite(tr_trainer *t, tr_metrics *mt) {
    tr_ctx *ctx = t->m->ctx;
    const char *bad = "";
    char what[TR__NAME_LEN + 32];
    tr_status st;
    if (ctx->fault == TR_FAULT_NONFINITE && t->step + 1 >= ctx->fault_step && t->step + 1 < ctx->fault_step + TR__MAX(ctx->fault_rows, 1)) {
        float nan_value = NAN;
        if ((st = tr__dput(ctx, t->m->grads, &nan_value, sizeof nan_value)) != TR_OK) return st;
    }
    if (!isfinite(mt->loss)) snprintf(what, sizeof what, "the loss");
    else if ((st = tr__nonfinite_grad(t, &bad)) != TR_OK) return st;
    else if (!bad[0]) {
        t->nonfinite_run = 0;
        return TR_OK;
    } else
        snprintf(what, sizeof what, "the gradient of %s", bad);
    t->step++;
    t->phase = 0;
    mt->skipped = 1;
    if (bad[0] && t->m->fdt == TR_FWD_FLOAT16 && t->loss_scale > 1.0) {
        /* float16 overflow of the scaled gradients: a smaller scale, and the carry goes on (its forward was finite) */
        t->loss_scale /= 2;
        t->scale_good = 0;
        tr__log(ctx, TR_LOG_WARN, "step %ld: %s is NaN or infinite at float16 loss scale %g: update skipped, loss scale halved to %g", t->step, what,
                t->loss_scale * 2, t->loss_scale);
        return 1;
    }
    t->nonfinite_run++;
    tr_carry_reset(t->carry);
    if (t->nonfinite_run >= t->tc.max_nonfinite_steps)
        return tr__err(ctx, TR_ERR_NONFINITE, "step %ld: %s is NaN or infinite, %d step(s) in a row (max_nonfinite_steps %d): training stops before the weights are harmed",
                       t->step, what, t->nonfinite_run, t->tc.max_nonfinite_steps);
    tr__log(ctx, TR_LOG_WARN, "step %ld: %s is NaN or infinite: update skipped, ACT carry reset (%d step(s) in a row, max_nonfinite_steps %d)", t->step, what,
            t->nonfinite_run, t->tc.max_nonfinite_steps);
    return 1;
}

/* A communicator's failure, with what was being moved; never TR_ERR_DEVICE (which would move work to
   the CPU and repeat a collective the other ranks will not repeat). */
TR__FN tr_status tr__comm_err(tr_ctx *ctx, const tr_comm *cm, tr_status st, const char *what) {
    return tr__err(ctx, TR_ERR_GENERIC, "communicator: %s failed on rank %d of %d (%s; the communicator has the reason)", what, cm->rank, cm->size, tr_status_string(st));
}

/* All-reduces the staged buckets but the newest keep (0 or 1), oldest first: on a device, each one once
   its copy to the host has ended. */
TR__FN tr_status tr__dist_drain(tr_trainer *t, int keep) {
    const tr_comm *cm = t->tc.comm;
    tr_status st = TR_OK;
    while (t->bk_n > keep) {
        size_t lo = t->bk_lo[0], hi = t->bk_hi[0];
#if TINYREC_OPENCL
        tr__cl_event ev = t->bk_ev[0];
        t->bk_ev[0] = t->bk_ev[1], t->bk_ev[1] = NULL;
        if (ev) st = tr__cl_wait(t->m->ctx->cl, ev, "staging the gradients");
#endif
        t->bk_lo[0] = t->bk_lo[1], t->bk_hi[0] = t->bk_hi[1], t->bk_n--;
        if (st != TR_OK) return st;
        if ((st = cm->allreduce_sum(cm->user, t->stage + lo, hi - lo)) != TR_OK) return tr__comm_err(t->m->ctx, cm, st, "the gradient all-reduce");
        t->bk_done++;
    }
    return TR_OK;
}

/* m->grads[lo, hi) is final for the step (tr__grad_ready, or the whole buffer without overlap): it is
   staged (on a device, a copy to the pinned hgrad queued behind the backward) and the buckets before it
   are all-reduced, so that on a device an all-reduce runs while the device computes what is queued after
   its copy. Every rank sees the same buckets in the same order, whatever its device; a pass redone after
   a device failure skips those already all-reduced (their sums wait in t->stage). */
TR__FN tr_status tr__dist_bucket(void *user, size_t lo, size_t hi) {
    tr_trainer *t = (tr_trainer *)user;
    tr_model *m = t->m;
    tr_ctx *ctx = m->ctx;
    tr_status st = TR_OK;
    int k;
    if (t->bk_seen++ < t->bk_done) return TR_OK;
    k = t->bk_n;
    if (t->stage != m->grads) {
#if TINYREC_OPENCL
        if (ctx->dev_active) st = tr__cl_copy_host(ctx->cl, 0, t->stage + lo, m->grads + lo, (hi - lo) * sizeof(float), &t->bk_ev[k]);
        else
#endif
            st = tr__dget(ctx, t->stage + lo, m->grads + lo, (hi - lo) * sizeof(float));
        if (st != TR_OK) return st;
    }
    t->bk_lo[k] = lo, t->bk_hi[k] = hi, t->bk_n++;
    return tr__dist_drain(t, ctx->dev_active); /* on a device the newest copy is still under way */
}

/* Data-parallel, after the backward: every rank's share of the step becomes the global batch's. The
   gradients are all-reduced (in buckets during the backward with comm->overlap, else here in one), the
   puzzle-row gradients and ids gathered (the reference's distributed sign-SGD gathers them too: the sign
   of the summed rows is the same on every rank) and the metrics summed in rank order. The sums land in
   host memory (t->stage: pinned on a device; on the CPU the gradients themselves), so a device failure
   after a collective loses nothing: the step is redone on the CPU and no collective runs twice. Sets
   t->reduced. */
TR__FN tr_status tr__dist_reduce(tr_trainer *t, const tr_metrics *mt) {
    const tr_comm *cm = t->tc.comm;
    tr_model *m = t->m;
    tr_ctx *ctx = m->ctx;
    size_t rows = (size_t)t->carry->B * m->Dp, n = (size_t)cm->size, i, k;
    double loc[TR__NMET], sum[TR__NMET];
    float *mine = t->hrows + n * rows;
    tr_status st;
    if (!cm->overlap && (st = tr__dist_bucket(t, 0, m->n_params)) != TR_OK) return st;
    if ((st = tr__dist_drain(t, 0)) != TR_OK) return st;
    if (rows && (st = tr__dget(ctx, mine, t->prow, rows * sizeof(float))) != TR_OK) return st;
    memcpy(loc, mt, sizeof loc);
    if ((st = cm->allgather(cm->user, loc, t->hmet, sizeof loc)) != TR_OK) return tr__comm_err(ctx, cm, st, "the metrics all-gather");
    if (rows && ((st = cm->allgather(cm->user, mine, t->hrows, rows * sizeof(float))) != TR_OK ||
                 (st = cm->allgather(cm->user, t->carry->pids, t->gids, (size_t)t->carry->B * sizeof(int32_t))) != TR_OK))
        return tr__comm_err(ctx, cm, st, "the puzzle-embedding all-gather");
    for (k = 0; k < TR__NMET; k++)
        for (sum[k] = 0, i = 0; i < n; i++) sum[k] += t->hmet[i * TR__NMET + k];
    memcpy(&t->gmt, sum, sizeof sum);
    t->reduced = 1;
    return TR_OK;
}

/* The reduced step into where the update runs (the device, or the CPU after a fallback). */
TR__FN tr_status tr__dist_commit(tr_trainer *t, tr_metrics *mt) {
    tr_model *m = t->m;
    size_t rows = (size_t)t->carry->B * m->Dp * (size_t)t->tc.comm->size;
    tr_status st;
#if TINYREC_OPENCL
    if (m->ctx->dev_active && t->hgrad_mem) st = tr__cl_copy_host(m->ctx->cl, 1, t->stage, m->grads, m->n_params * sizeof(float), NULL); /* straight from pinned memory */
    else
#endif
        st = tr__dput(m->ctx, m->grads, t->stage, m->n_params * sizeof(float)); /* nothing when the CPU reduced in place */
    if (st != TR_OK) return st;
    if (rows && (st = tr__dput(m->ctx, t->gprow, t->hrows, rows * sizeof(float))) != TR_OK) return st;
    *mt = t->gmt;
    return TR_OK;
}

/* Random draws per row of tr__update_halting in training (the exploration's u and min_steps): rank r
   starts its rows' draws where one process would reach its first row, so both draw the same. */
#define TR__HALT_DRAWS 2

/* Micro-batches of 1/8 of the batch are the last try on a device before the CPU. */
#define TR__MAX_HALVINGS 3

/* One step on the device that may fail; on a device failure the step is redone (or finished)
   with half the micro-batch, or on the CPU, from the state it started with: no step is lost. */
TRDEF tr_status tr_trainer_step(tr_trainer *t, const tr_batch *batch, tr_metrics *metrics) {
    tr_model *m;
    tr_ctx *ctx;
    tr_status st;
    if (!t || !batch) return TR_ERR_INVALID_ARG;
    m = t->m;
    ctx = m->ctx;
    /* before anything runs: a bad batch is the caller's error, never a device failure */
    if ((st = tr__check_train_batch(t, batch)) != TR_OK) return st;
    if ((ctx->fault == TR_FAULT_DEVICE_OOM || ctx->fault == TR_FAULT_ENQUEUE) && t->step + 1 == ctx->fault_step && ctx->dev_active) {
        ctx->fault_armed = 1;
        if (ctx->fault == TR_FAULT_DEVICE_OOM) tr__model_free_work(m); /* the step must find memory again */
#if TINYREC_OPENCL
        else
            tr__cl_fail_enqueue_at(ctx->cl, ctx->fault_rows > 0 ? ctx->fault_rows : 1);
#endif
    }
    t->phase = 0;
    t->reduced = 0;
    t->bk_done = t->bk_n = 0;
    t->stage = ctx->dev_active && t->hgrad ? t->hgrad : m->grads; /* for the whole step, a fallback included */
    if (ctx->dev_active && tr__snapshot(t, 0) != TR_OK) {
        /* nothing has changed yet: continue on the CPU */
        char why[TR__ERRLEN + 64];
        snprintf(why, sizeof why, "%s during step %ld", ctx->error, t->step + 1);
        tr__model_free_work(m);
        if ((st = tr__dev_fallback(ctx, why)) != TR_OK) return st;
    }
    for (;;) {
        int on_dev = ctx->dev_active;
        tr_metrics mt;
        memset(&mt, 0, sizeof mt);
        st = TR_OK;
        if (t->phase == 0 && !t->reduced) {
            uint64_t base = t->rng.counter;
            int ranks = tr__dist(t) ? t->tc.comm->size : 1;
            if (ranks > 1 && m->cfg.halt_max_steps > 1) t->rng.counter += (uint64_t)t->tc.comm->rank * (uint64_t)t->carry->B * TR__HALT_DRAWS;
            st = tr__train_fwd_bwd(t, batch, &mt, NULL, NULL);
            if (st == TR_OK && ranks > 1) {
                /* every rank ends where one process would after the whole global batch */
                uint64_t drew = t->rng.counter - base - (uint64_t)t->tc.comm->rank * (m->cfg.halt_max_steps > 1 ? (uint64_t)t->carry->B * TR__HALT_DRAWS : 0);
                t->rng.counter = base + drew * (uint64_t)ranks;
                st = tr__dist_reduce(t, &mt);
            }
        }
        if (st == TR_OK && t->phase == 0 && t->reduced) st = tr__dist_commit(t, &mt);
        if (st == TR_OK && t->phase == 0) {
            double scale = tr__loss_scale(t);
            int fin = tr__check_finite(t, &mt);
            mt.loss_scale = m->fdt == TR_FWD_FLOAT16 ? scale : 0.0;
            if (metrics) *metrics = mt;
            if (fin == 1) return TR_OK; /* skipped: mt.skipped says so */
            if (fin == TR_ERR_NONFINITE) return TR_ERR_NONFINITE;
            st = (tr_status)fin;
            /* the gradients of loss * scale back to the loss's (a power of two: exact); sign-SGD's puzzle rows
               need no unscaling, the sign of their sum is the same */
            if (st == TR_OK && scale != 1.0) st = tr__op_scale(ctx, m->n_params, m->grads, (float)(1.0 / scale));
            if (st == TR_OK) t->phase = 1;
        }
        if (st == TR_OK) st = tr__optimizer_update(t);
        if (st == TR_OK) {
            if (m->fdt == TR_FWD_FLOAT16 && ++t->scale_good >= t->tc.loss_scale_window) {
                t->scale_good = 0;
                if (t->loss_scale < TR__LOSS_SCALE_MAX) t->loss_scale *= 2;
            }
            return TR_OK;
        }
        tr__dist_drop(t);
        if (!on_dev || (st != TR_ERR_DEVICE && st != TR_ERR_OUT_OF_MEMORY)) return st; /* only the device's failures move work */
        if (t->phase == 0 && st == TR_ERR_OUT_OF_MEMORY && t->micro > 1 && t->halvings < TR__MAX_HALVINGS) {
            int was = t->micro;
            t->micro = (t->micro + 1) / 2;
            t->halvings++;
            tr__log(ctx, TR_LOG_WARN, "device: %s; retrying step %ld with micro-batches of %d rows (was %d), accumulating gradients over the batch of %d",
                    ctx->error, t->step + 1, t->micro, was, t->carry->B);
            tr__model_free_work(m);
        } else {
            char why[TR__ERRLEN + 64];
            snprintf(why, sizeof why, "%s during step %ld", ctx->error[0] ? ctx->error : tr_status_string(st), t->step + 1);
            tr__model_free_work(m);
            if ((st = tr__dev_fallback(ctx, why)) != TR_OK) return st;
        }
        if (t->phase == 0 && !t->reduced && (st = tr__snapshot(t, 1)) != TR_OK) return st; /* after the collectives the carry moved on */
    }
}

TRDEF tr_status tr_eval_result_reduce(tr_ctx *ctx, const tr_comm *comm, tr_eval_result *r) {
    enum { NV = 8 }; /* count, the five means times count, batches, seconds */
    double loc[NV], *all, acc[NV];
    double *means[5];
    int i, k;
    tr_status st;
    if (!ctx || !r) return TR_ERR_INVALID_ARG;
    if (!comm || comm->size <= 1) return TR_OK;
    means[0] = &r->accuracy, means[1] = &r->exact_accuracy, means[2] = &r->q_halt_accuracy, means[3] = &r->steps, means[4] = &r->lm_loss;
    loc[0] = r->count;
    for (k = 0; k < 5; k++) loc[1 + k] = r->count > 0 ? *means[k] * r->count : 0.0; /* a rank with no rows holds NAN means */
    loc[6] = (double)r->batches, loc[7] = r->seconds;
    if (!(all = (double *)tr__alloc(ctx, (size_t)comm->size * sizeof loc))) return TR_ERR_OUT_OF_MEMORY;
    if ((st = comm->allgather(comm->user, loc, all, sizeof loc)) != TR_OK) {
        tr__free(ctx, all);
        return tr__comm_err(ctx, comm, st, "the evaluation all-gather");
    }
    for (k = 0; k < NV; k++) acc[k] = 0;
    for (i = 0; i < comm->size; i++)
        for (k = 0; k < NV; k++) acc[k] = k >= 6 ? TR__MAX(acc[k], all[i * NV + k]) : acc[k] + all[i * NV + k]; /* batches: each rank ran a slice of the same ones */
    tr__free(ctx, all);
    r->count = acc[0];
    for (k = 0; k < 5; k++) *means[k] = acc[0] > 0 ? acc[1 + k] / acc[0] : NAN;
    r->batches = (int64_t)acc[6], r->seconds = acc[7];
    return TR_OK;
}

TRDEF void tr_trainer_reset_carry(tr_trainer *t) {
    if (t) tr_carry_reset(t->carry);
}

TRDEF double tr_time_seconds(void) { return tr__now(); }

TRDEF void tr_model_flops(const tr_model *m, double *train_step, double *infer_step) {
    double S = m->S, D = m->D, I = m->I, blk, heads, fwd, rec, q = tr__q_learning(m);
    int T = m->cfg.H_cycles, n = m->cfg.L_cycles, nl = m->cfg.L_layers, nh = m->cfg.H_layers;
    blk = m->cfg.mlp_t ? 6.0 * S * D * I + 6.0 * D * S * m->It : 6.0 * S * D * I + 8.0 * S * D * D + 4.0 * S * S * D;
    heads = 2.0 * m->L * D * m->V + 4.0 * D;
    /* blocks applied per supervision step, and those of the recorded applications (backward ~ 2x forward):
       TRM T(n+1) applications of one module, the last n+1 recorded; HRM Tn of L_level and T of H_level,
       the last of each recorded, plus the Q-learning target's second forward */
    fwd = m->cfg.arch == TR_ARCH_HRM ? (double)T * n * nl + (double)T * nh : (double)T * (n + 1) * nl;
    rec = m->cfg.arch == TR_ARCH_HRM ? (double)nl + nh : (double)(n + 1) * nl;
    if (train_step) *train_step = (fwd * (1 + q) + 2.0 * rec) * blk + (3.0 + q) * heads;
    if (infer_step) *infer_step = fwd * blk + heads;
}

TRDEF void tr_model_memory(const tr_model *m, int B, size_t *train_bytes, size_t *infer_bytes) {
    double P = (double)m->n_params, N = (double)B * m->S * m->D, Bd = B;
    double ws = (double)tr__ws_floats(m, tr__ws_rows(m, B));
    double nets = m->cfg.arch == TR_ARCH_HRM ? 2 : m->cfg.L_cycles + 1;
    double tape = nets * (double)tr__tape_net_floats(m, B, tr__tape_half(m));
    double carry = 4 * N + Bd * m->L * m->V;
    double fixed = (double)m->cfg.num_puzzle_identifiers * TR__MAX(m->Dp, 1) + 2.0 * m->D;
    double lo = m->wlo ? P : 0; /* the weights rounded to a bfloat16 / float16 model's precision */
    if (train_bytes) *train_bytes = (size_t)(4.0 * (5 * P + lo + fixed + ws + tape + 2 * carry));
    if (infer_bytes) *infer_bytes = (size_t)(4.0 * (P + lo + fixed + ws + carry));
}

TRDEF tr_status tr_sgemm(tr_ctx *ctx, int transA, int transB, size_t M, size_t N, size_t K, const float *A, size_t lda, const float *B, size_t ldb,
                         float *C, size_t ldc, int accumulate) {
    if (!ctx) return TR_ERR_INVALID_ARG;
    if ((M && N && K && (!A || !B)) || (M && N && !C)) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_sgemm: NULL matrix");
    if ((transA ? lda < M : lda < K) || (transB ? ldb < K : ldb < N) || ldc < N)
        return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_sgemm: a leading dimension is smaller than its row");
    return tr__sgemm(ctx, transA, transB, M, N, K, A, lda, B, ldb, C, ldc, accumulate);
}

TRDEF tr_status tr_trainer_swap_ema(tr_trainer *t) {
    size_t i;
    float *p;
    if (!t) return TR_ERR_INVALID_ARG;
    if (!t->tc.ema) return tr__err(t->m->ctx, TR_ERR_INVALID_ARG, "trainer: EMA is off");
    t->m->pw.version++;
    if (t->m->ctx->dev_active) {
        tr_ctx *ctx = t->m->ctx;
        size_t bytes = t->m->n_params * sizeof(float);
        float *tmp = (float *)tr__dalloc(ctx, bytes, 0);
        tr_status st;
        if (!tmp) return TR_ERR_OUT_OF_MEMORY;
        if ((st = tr__dcopy(ctx, tmp, t->m->params, bytes)) == TR_OK && (st = tr__dcopy(ctx, t->m->params, t->ema, bytes)) == TR_OK)
            st = tr__dcopy(ctx, t->ema, tmp, bytes);
        if (st == TR_OK) st = tr__dfinish(ctx);
        tr__dfree(ctx, tmp);
        if (st != TR_OK) return st;
        t->m->host_stale = 1;
        t->ema_swapped = !t->ema_swapped;
        return TR_OK;
    }
    t->m->host_stale = 1;
    p = t->m->params;
    for (i = 0; i < t->m->n_params; i++) {
        float v = p[i];
        p[i] = t->ema[i];
        t->ema[i] = v;
    }
    t->ema_swapped = !t->ema_swapped;
    return TR_OK;
}


/* Settings by name (tr_key) and the preset table, on which tr_model_config_preset stands. */
/* >>config */

#define TR__MK(field, type, flags, help) {"arch." #field, type, TR_KEY_IN_MODEL, offsetof(tr_model_config, field), 0, flags, help}
#define TR__TK(name, field, type, flags, help) {name, type, TR_KEY_IN_TRAIN, offsetof(tr_train_config, field), 0, flags, help}
/* Train keys first and the model's in struct order: programs list them in this order. */
static const tr_key tr__config_keys[] = {
    TR__TK("global_batch_size", global_batch_size, TR_KEY_INT, 0, "rows per optimizer step"),
    TR__TK("lr", lr, TR_KEY_DOUBLE, 0, "learning rate (AdamATan2)"),
    TR__TK("lr_min_ratio", lr_min_ratio, TR_KEY_DOUBLE, 0, "cosine floor as a fraction of lr (1 = constant after warmup)"),
    TR__TK("lr_warmup_steps", lr_warmup_steps, TR_KEY_LONG, 0, "linear warmup steps"),
    TR__TK("total_steps", total_steps, TR_KEY_LONG, TR_KEY_DERIVED, "steps of the cosine schedule (from epochs and the dataset size)"),
    TR__TK("weight_decay", weight_decay, TR_KEY_DOUBLE, 0, "decoupled weight decay of the dense parameters"),
    TR__TK("beta1", beta1, TR_KEY_DOUBLE, 0, "AdamATan2 beta1"),
    TR__TK("beta2", beta2, TR_KEY_DOUBLE, 0, "AdamATan2 beta2"),
    TR__TK("puzzle_emb_lr", puzzle_emb_lr, TR_KEY_DOUBLE, 0, "sign-SGD learning rate of the puzzle embedding"),
    TR__TK("puzzle_emb_weight_decay", puzzle_emb_weight_decay, TR_KEY_DOUBLE, 0, "weight decay of the puzzle embedding"),
    TR__TK("ema", ema, TR_KEY_BOOL, 0, "keep an EMA of the weights; evaluate and checkpoint it"),
    TR__TK("ema_rate", ema_decay, TR_KEY_DOUBLE, 0, "EMA decay"),
    TR__TK("max_nonfinite_steps", max_nonfinite_steps, TR_KEY_INT, 0, "steps in a row with a NaN/inf loss or gradient (each skipped) before training stops"),
    {"arch.name", TR_KEY_ARCH, TR_KEY_IN_MODEL, offsetof(tr_model_config, arch), 0, TR_KEY_DERIVED, "trm | hrm (set by the preset)"},
    TR__MK(vocab_size, TR_KEY_INT, TR_KEY_DERIVED, "V, from the dataset"),
    TR__MK(seq_len, TR_KEY_INT, TR_KEY_DERIVED, "L, from the dataset"),
    TR__MK(num_puzzle_identifiers, TR_KEY_INT, TR_KEY_DERIVED, "rows of the puzzle-embedding table, from the dataset"),
    TR__MK(hidden_size, TR_KEY_INT, 0, "D"),
    TR__MK(num_heads, TR_KEY_INT, 0, "attention heads"),
    TR__MK(expansion, TR_KEY_DOUBLE, 0, "SwiGLU width factor"),
    TR__MK(H_layers, TR_KEY_INT, 0, "layers of HRM's H_level (unused by TRM)"),
    TR__MK(L_layers, TR_KEY_INT, 0, "layers of TRM's shared module / HRM's L_level"),
    TR__MK(H_cycles, TR_KEY_INT, 0, "T"),
    TR__MK(L_cycles, TR_KEY_INT, 0, "n"),
    TR__MK(puzzle_emb_ndim, TR_KEY_INT, 0, "puzzle embedding width (0 = none)"),
    TR__MK(puzzle_emb_len, TR_KEY_INT, 0, "puzzle embedding tokens (0 = ceil(ndim / hidden_size))"),
    TR__MK(pos_encodings, TR_KEY_POS_ENCODING, 0, "rope | learned | none"),
    TR__MK(mlp_t, TR_KEY_BOOL, 0, "token-mixing MLP instead of attention"),
    TR__MK(rope_theta, TR_KEY_DOUBLE, 0, "RoPE base"),
    TR__MK(rms_norm_eps, TR_KEY_DOUBLE, 0, "RMSNorm epsilon"),
    TR__MK(halt_max_steps, TR_KEY_INT, 0, "M_max, supervision steps"),
    TR__MK(halt_exploration_prob, TR_KEY_DOUBLE, 0, "ACT exploration probability"),
    TR__MK(no_ACT_continue, TR_KEY_BOOL, 0, "halt on q_halt > 0 (TRM); false: on q_halt > q_continue, learned by Q-learning (HRM)"),
    {"arch.loss.loss_type", TR_KEY_LOSS_TYPE, TR_KEY_IN_MODEL, offsetof(tr_model_config, loss_type), 0, 0, "stablemax_cross_entropy | softmax_cross_entropy"},
    TR__MK(forward_dtype, TR_KEY_DTYPE, 0, "float32 | bfloat16 | float16 | auto: the compute precision (fp32 master weights)"),
    TR__TK("loss_scale_window", loss_scale_window, TR_KEY_INT, 0, "float16: good steps before the loss scale doubles"),
};
#undef TR__MK
#undef TR__TK
#define TR__NKEYS ((int)(sizeof tr__config_keys / sizeof tr__config_keys[0]))

TRDEF const tr_key *tr_config_keys(int *count) {
    if (count) *count = TR__NKEYS;
    return tr__config_keys;
}

TRDEF const tr_key *tr_config_find_key(const char *name) {
    int i;
    for (i = 0; name && i < TR__NKEYS; i++)
        if (strcmp(tr__config_keys[i].name, name) == 0) return &tr__config_keys[i];
    return NULL;
}

TR__FN int tr__streq_ci(const char *a, const char *b) {
    for (; *a && *b; a++, b++)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) return 0;
    return *a == *b;
}

/* The names of the enumerated types, in enum order: what command lines and checkpoint files spell. */
static const char *const tr__bool_names[] = {"false", "true", "0", "1", "no", "yes", "off", "on", NULL}; /* value = index & 1 */
static const char *const tr__arch_names[] = {"trm", "hrm", NULL};
static const char *const tr__pos_names[] = {"none", "rope", "learned", NULL};
static const char *const tr__loss_names[] = {"stablemax_cross_entropy", "softmax_cross_entropy", NULL};
static const char *const tr__loss_short_names[] = {"stablemax", "softmax", NULL}; /* the reference's code accepts both */

TR__FN const char *const *tr__enum_names(tr_key_type t) {
    switch (t) {
    case TR_KEY_BOOL: return tr__bool_names;
    case TR_KEY_ARCH: return tr__arch_names;
    case TR_KEY_POS_ENCODING: return tr__pos_names;
    case TR_KEY_LOSS_TYPE: return tr__loss_names;
    case TR_KEY_DTYPE: return tr__fdt_names;
    default: return NULL;
    }
}

/* The value that s names for an enumerated type (case-insensitive when ci), or -1. */
TR__FN int tr__enum_parse(tr_key_type t, const char *s, int ci) {
    const char *const *names = tr__enum_names(t);
    int i, pass;
    for (pass = 0; pass < 2 && names; pass++, names = t == TR_KEY_LOSS_TYPE ? tr__loss_short_names : NULL)
        for (i = 0; names[i]; i++)
            if (ci ? tr__streq_ci(names[i], s) : strcmp(names[i], s) == 0) return i;
    return -1;
}

/* The name of value v of an enumerated type, or NULL when v is none of its values. */
TR__FN const char *tr__enum_name(tr_key_type t, int v) {
    const char *const *names = tr__enum_names(t);
    int i;
    for (i = 0; names && names[i]; i++)
        if (i == v) return names[i];
    return NULL;
}

TR__FN const char *tr__key_expected(tr_key_type t) {
    switch (t) {
    case TR_KEY_INT:
    case TR_KEY_LONG:
    case TR_KEY_U64: return "an integer";
    case TR_KEY_DOUBLE: return "a number";
    case TR_KEY_BOOL: return "true or false";
    case TR_KEY_ARCH: return "trm or hrm";
    case TR_KEY_POS_ENCODING: return "rope, learned or none";
    case TR_KEY_LOSS_TYPE: return "stablemax_cross_entropy or softmax_cross_entropy";
    case TR_KEY_DTYPE: return "float32, bfloat16, float16 or auto (or fp32, bf16, fp16)";
    default: return "a value";
    }
}

TRDEF tr_status tr_key_parse(tr_ctx *ctx, const tr_key *k, void *base, const char *val) {
    char *p, *end = NULL;
    int e;
    if (!k || !base || !val) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_key_parse: NULL argument");
    if (k->type == TR_KEY_STRING && !k->size) return tr__err(ctx, TR_ERR_INVALID_ARG, "key '%s' has no size", k->name);
    p = (char *)base + k->offset;
    errno = 0;
    switch (k->type) {
    case TR_KEY_INT:
    case TR_KEY_LONG: {
        long v = strtol(val, &end, 10);
        if (!*val || *end || errno || (k->type == TR_KEY_INT && (v < -2147483647L || v > 2147483647L))) break;
        if (k->type == TR_KEY_INT) *(int *)p = (int)v;
        else *(long *)p = v;
        return TR_OK;
    }
    case TR_KEY_U64: {
        unsigned long long v = strtoull(val, &end, 10);
        if (!*val || *val == '-' || *end || errno) break;
        *(unsigned long long *)p = v;
        return TR_OK;
    }
    case TR_KEY_DOUBLE: {
        double v = strtod(val, &end);
        if (!*val || *end || errno || !isfinite(v)) break;
        *(double *)p = v;
        return TR_OK;
    }
    case TR_KEY_BOOL:
        if ((e = tr__enum_parse(k->type, val, 1)) < 0) break;
        *(int *)p = e & 1;
        return TR_OK;
    case TR_KEY_STRING:
        if (!*val) return tr__err(ctx, TR_ERR_INVALID_ARG, "key '%s' needs a non-empty value", k->name);
        if (strlen(val) >= k->size) return tr__err(ctx, TR_ERR_INVALID_ARG, "value of '%s' is too long (at most %zu characters)", k->name, k->size - 1);
        memcpy(p, val, strlen(val) + 1);
        return TR_OK;
    case TR_KEY_ARCH:
    case TR_KEY_POS_ENCODING:
        if ((e = tr__enum_parse(k->type, val, 1)) < 0) break;
        if (k->type == TR_KEY_ARCH) *(tr_arch *)p = (tr_arch)e;
        else *(tr_pos_encoding *)p = (tr_pos_encoding)e;
        return TR_OK;
    case TR_KEY_LOSS_TYPE:
        if ((e = tr__enum_parse(k->type, val, 0)) < 0) break;
        *(tr_loss_type *)p = (tr_loss_type)e;
        return TR_OK;
    case TR_KEY_DTYPE:
        if ((e = tr_forward_dtype_parse(val)) < 0) break;
        *(tr_forward_dtype *)p = (tr_forward_dtype)e;
        return TR_OK;
    default: return tr__err(ctx, TR_ERR_INVALID_ARG, "key '%s' has an unknown type %d", k->name, (int)k->type);
    }
    return tr__err(ctx, TR_ERR_INVALID_ARG, "bad value '%.200s' for key '%s': expected %s", val, k->name, tr__key_expected(k->type));
}

TRDEF tr_status tr_key_format(const tr_key *k, const void *base, char *buf, size_t cap) {
    const char *p;
    int n = -1;
    if (!k || !base || !buf || !cap) return TR_ERR_INVALID_ARG;
    p = (const char *)base + k->offset;
    switch (k->type) {
    case TR_KEY_INT: n = snprintf(buf, cap, "%d", *(const int *)p); break;
    case TR_KEY_LONG: n = snprintf(buf, cap, "%ld", *(const long *)p); break;
    case TR_KEY_U64: n = snprintf(buf, cap, "%llu", *(const unsigned long long *)p); break;
    case TR_KEY_DOUBLE: n = snprintf(buf, cap, "%.17g", *(const double *)p); break;
    case TR_KEY_BOOL: n = snprintf(buf, cap, "%s", *(const int *)p ? "true" : "false"); break;
    case TR_KEY_DTYPE: {
        const char *name = tr_forward_dtype_name(*(const tr_forward_dtype *)p);
        if (!name) return TR_ERR_INVALID_ARG;
        n = snprintf(buf, cap, "%s", name);
        break;
    }
    case TR_KEY_STRING: {
        const char *z = (const char *)memchr(p, 0, k->size); /* a full array holds no terminator */
        n = snprintf(buf, cap, "%.*s", z ? (int)(z - p) : (int)k->size, p);
        break;
    }
    case TR_KEY_ARCH:
    case TR_KEY_POS_ENCODING:
    case TR_KEY_LOSS_TYPE: {
        int v = k->type == TR_KEY_ARCH ? (int)*(const tr_arch *)p : k->type == TR_KEY_POS_ENCODING ? (int)*(const tr_pos_encoding *)p : (int)*(const tr_loss_type *)p;
        const char *name = tr__enum_name(k->type, v);
        if (!name) return TR_ERR_INVALID_ARG; /* not a value of the enum */
        n = snprintf(buf, cap, "%s", name);
        break;
    }
    default: buf[0] = 0; return TR_ERR_INVALID_ARG;
    }
    return n >= 0 && (size_t)n < cap ? TR_OK : TR_ERR_OVERFLOW;
}

TRDEF tr_status tr_config_set(tr_ctx *ctx, tr_model_config *model, tr_train_config *train, const char *key, const char *value) {
    const tr_key *k = tr_config_find_key(key);
    void *base;
    if (!k) return tr__err(ctx, TR_ERR_NOT_FOUND, "unknown key '%.200s'", key ? key : "(null)");
    base = k->in == TR_KEY_IN_MODEL ? (void *)model : (void *)train;
    if (!base) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_config_set: key '%s' needs a %s config", k->name, k->in == TR_KEY_IN_MODEL ? "model" : "train");
    return tr_key_parse(ctx, k, base, value);
}

/* A preset is its base (another preset, or the reference's defaults) plus key=value settings, so
   that each entry says only how it differs. */
typedef struct tr__preset_def {
    const char *name, *arch, *base, *task;
    int vocab_size, seq_len; /* the dataset's; 0 = any */
    long epochs, eval_interval;
    const char *settings;    /* space-separated key=value over the base */
    const char *help;
} tr__preset_def;

#define TR__CPU_RECIPE "global_batch_size=32 lr=1e-3 lr_warmup_steps=100 weight_decay=0.1 puzzle_emb_lr=1e-3 puzzle_emb_weight_decay=0.1 ema_rate=0.99"
static const tr__preset_def tr__presets[] = {
    {"trm-sudoku-mlp", "trm-sudoku-mlp", NULL, "sudoku", 11, 81, 50000, 5000, "arch.mlp_t=true arch.pos_encodings=none",
     "reference TRM-MLP Sudoku-Extreme (5.0M params, 50k epochs, batch 768)"},
    {"trm-sudoku-att", "trm-sudoku-att", NULL, "sudoku", 11, 81, 50000, 5000, "", "reference TRM-Att Sudoku-Extreme (6.8M params)"},
    {"trm-maze", "trm-maze", NULL, "maze", 6, 900, 50000, 5000, "arch.L_cycles=4", "reference TRM-Att Maze-Hard 30x30 (6.8M params, n=4)"},
    /* 961: the reference ARC set's puzzle count; the real table size comes from the dataset */
    {"trm-arc", "trm-arc", NULL, "arc", 12, 900, 100000, 10000, "arch.L_cycles=4 arch.num_puzzle_identifiers=961 puzzle_emb_lr=1e-2 weight_decay=0.1 puzzle_emb_weight_decay=0.1",
     "reference TRM-Att ARC-AGI (lr_emb 1e-2, wd 0.1, 100k epochs)"},
    {"sudoku-tiny", NULL, "tiny", "sudoku", 11, 81, 5, 1, "", "CPU: D=64 mlp_t T=2 n=2, batch 32, lr 1e-3, EMA 0.99, 5 epochs (the demo's recipe)"},
    {"sudoku-small", NULL, "tiny", "sudoku", 11, 81, 5, 1, "arch.hidden_size=128 arch.num_heads=4 arch.puzzle_emb_ndim=128 arch.H_cycles=3 arch.L_cycles=4 global_batch_size=64",
     "CPU: D=128 mlp_t T=3 n=4, batch 64, lr 1e-3"},
    {"maze-tiny", NULL, "tiny", "maze", 6, 0, 5, 1, "arch.mlp_t=false arch.pos_encodings=rope", "CPU: D=64 attention+RoPE T=2 n=2, any maze size"},
    /* the sizes are placeholders (a Sudoku's): the dataset replaces them */
    /* config/arch/hrm_v1.yaml with the HRM README's commands: 4+4 layers, T = n = 2, a 1-token puzzle prefix */
    {"hrm-sudoku", "hrm-sudoku", NULL, "sudoku", 11, 81, 20000, 2000,
     "arch.name=hrm arch.H_layers=4 arch.L_layers=4 arch.H_cycles=2 arch.L_cycles=2 arch.puzzle_emb_len=0 arch.no_ACT_continue=false ema=false",
     "reference HRM Sudoku-Extreme (27.3M params, 20k epochs, batch 768)"},
    {"hrm-maze", "hrm-maze", "hrm-sudoku", "maze", 6, 900, 20000, 2000, "", "reference HRM Maze-Hard 30x30 (27.3M params)"},
    {"hrm-arc", "hrm-arc", "hrm-sudoku", "arc", 12, 900, 100000, 10000, "arch.num_puzzle_identifiers=961 puzzle_emb_lr=1e-2 weight_decay=0.1 puzzle_emb_weight_decay=0.1",
     "reference HRM ARC-AGI (lr_emb 1e-2, wd 0.1, 100k epochs)"},
    {"hrm-sudoku-tiny", "hrm-sudoku-tiny", "hrm-sudoku", "sudoku", 11, 81, 5, 1,
     "arch.hidden_size=64 arch.num_heads=4 arch.puzzle_emb_ndim=64 arch.H_layers=2 arch.L_layers=2 arch.mlp_t=true arch.pos_encodings=none "
     TR__CPU_RECIPE " ema=false",
     /* the token-mixing MLP, as sudoku-tiny: at D=64 attention learns Sudoku far slower, for TRM and HRM alike (README) */
     "CPU: HRM D=64 mlp_t 2+2 layers T=n=2, batch 32, lr 1e-3, 5 epochs"},
    {"tiny", "trm-tiny", NULL, NULL, 0, 0, 5, 1,
     "arch.vocab_size=11 arch.seq_len=81 arch.mlp_t=true arch.pos_encodings=none arch.hidden_size=64 arch.num_heads=4 arch.puzzle_emb_ndim=64 "
     "arch.puzzle_emb_len=2 arch.H_cycles=2 arch.L_cycles=2 " TR__CPU_RECIPE,
     "CPU: trm-tiny on any dataset (sizes from the dataset)"},
};
#undef TR__CPU_RECIPE
#define TR__NPRESETS ((int)(sizeof tr__presets / sizeof tr__presets[0]))
/* The arch names of the table, in its order (test_config checks that they agree). */
static const char *const tr__preset_names[] = {"trm-sudoku-mlp", "trm-sudoku-att", "trm-maze", "trm-arc", "hrm-sudoku", "hrm-maze", "hrm-arc", "hrm-sudoku-tiny", "trm-tiny", NULL};

TR__FN const tr__preset_def *tr__preset_lookup(const char *name, int arch_too) {
    int i;
    for (i = 0; name && i < TR__NPRESETS; i++)
        if (strcmp(tr__presets[i].name, name) == 0 || (arch_too && tr__presets[i].arch && strcmp(tr__presets[i].arch, name) == 0)) return &tr__presets[i];
    return NULL;
}

TR__FN tr_status tr__preset_build(const tr__preset_def *d, tr_preset *out, int depth) {
    const char *s = d->settings;
    tr_status st;
    if (d->base) {
        const tr__preset_def *b = tr__preset_lookup(d->base, 0);
        if (!b || depth > 4 || (st = tr__preset_build(b, out, depth + 1)) != TR_OK) return TR_ERR_CONFIG;
    } else {
        tr_model_config *c = &out->model;
        memset(out, 0, sizeof *out);
        /* config/arch/trm.yaml */
        c->arch = TR_ARCH_TRM, c->hidden_size = 512, c->num_heads = 8, c->expansion = 4, c->H_layers = 0, c->L_layers = 2;
        c->H_cycles = 3, c->L_cycles = 6, c->puzzle_emb_ndim = 512, c->puzzle_emb_len = 16, c->pos_encodings = TR_POS_ROPE, c->mlp_t = 0;
        c->rope_theta = 10000, c->rms_norm_eps = 1e-5, c->halt_max_steps = 16, c->halt_exploration_prob = 0.1, c->no_ACT_continue = 1;
        c->loss_type = TR_LOSS_STABLEMAX, c->num_puzzle_identifiers = 1;
        out->train = tr_train_config_default();
    }
    while (*s) { /* key=value pairs: short, and checked by the test of every preset */
        char kv[160], *eq;
        size_t n = strcspn(s, " ");
        if (n >= sizeof kv) return TR_ERR_CONFIG;
        memcpy(kv, s, n), kv[n] = 0;
        s += n + (s[n] == ' ');
        if (!n) continue;
        if (!(eq = strchr(kv, '='))) return TR_ERR_CONFIG;
        *eq = 0;
        if (tr_config_set(NULL, &out->model, &out->train, kv, eq + 1) != TR_OK) return TR_ERR_CONFIG;
    }
    out->name = d->name, out->arch = d->arch, out->task = d->task, out->help = d->help;
    out->data_vocab_size = d->vocab_size, out->data_seq_len = d->seq_len;
    if (d->vocab_size) out->model.vocab_size = d->vocab_size;
    if (d->seq_len) out->model.seq_len = d->seq_len;
    out->epochs = d->epochs, out->eval_interval = d->eval_interval;
    return TR_OK;
}

TRDEF int tr_preset_count(void) { return TR__NPRESETS; }

TRDEF tr_status tr_preset_get(int index, tr_preset *out) {
    if (!out) return TR_ERR_INVALID_ARG;
    if (index < 0 || index >= TR__NPRESETS) return TR_ERR_NOT_FOUND;
    return tr__preset_build(&tr__presets[index], out, 0);
}

TRDEF tr_status tr_preset_find(const char *name, tr_preset *out) {
    const tr__preset_def *d = tr__preset_lookup(name, 0);
    if (!out) return TR_ERR_INVALID_ARG;
    return d ? tr__preset_build(d, out, 0) : TR_ERR_NOT_FOUND;
}

TRDEF const char *const *tr_model_config_preset_names(void) { return tr__preset_names; }

TRDEF tr_status tr_model_config_preset(tr_model_config *cfg, const char *name) {
    const tr__preset_def *d;
    tr_preset p;
    tr_status st;
    if (!cfg || !name) return TR_ERR_INVALID_ARG;
    if (!(d = tr__preset_lookup(name, 1))) return TR_ERR_NOT_FOUND;
    if ((st = tr__preset_build(d, &p, 0)) != TR_OK) return st;
    *cfg = p.model;
    return TR_OK;
}
/* >>config-end */

/* Strict JSON reader, string builder, whole-file reads and atomic file writes. */
/* >>json */

/* ---- JSON ----------------------------------------------------------------------------------
   A strict RFC 8259 reader that builds a tree. Every node, string, key and child array comes
   from tr__alloc, so allocation faults and leaks are visible to the context's counters. */

typedef struct tr__jp {
    tr_ctx *ctx;
    const unsigned char *s;
    size_t len, pos;
    int64_t line; /* newlines occur only in whitespace (strings reject control characters) */
    const char *what;
} tr__jp;

TR__FN void tr__json_free_contents(tr_ctx *ctx, tr_json *v) {
    size_t i;
    switch (v->type) {
    case TR_JSON_STRING: tr__free(ctx, v->string); break;
    case TR_JSON_ARRAY:
    case TR_JSON_OBJECT:
        for (i = 0; i < v->count; i++) {
            if (v->keys) tr__free(ctx, v->keys[i]);
            if (v->items) tr__json_free_contents(ctx, &v->items[i]);
        }
        tr__free(ctx, v->items);
        tr__free(ctx, v->keys);
        break;
    default: break;
    }
    memset(v, 0, sizeof *v);
}

TRDEF void tr_json_free(tr_ctx *ctx, tr_json *root) {
    if (!root) return;
    tr__json_free_contents(ctx, root);
    tr__free(ctx, root);
}

/* NULL if absent or obj not an object. Keys never contain NUL (the parser rejects \u0000 in keys). */
TRDEF const tr_json *tr_json_get(const tr_json *obj, const char *key) {
    size_t i;
    if (!obj || obj->type != TR_JSON_OBJECT || !key) return NULL;
    for (i = 0; i < obj->count; i++)
        if (strcmp(obj->keys[i], key) == 0) return &obj->items[i];
    return NULL;
}

TRDEF const char *tr_json_type_name(tr_json_type t) {
    switch (t) {
    case TR_JSON_NULL: return "null";
    case TR_JSON_BOOL: return "boolean";
    case TR_JSON_NUMBER: return "number";
    case TR_JSON_STRING: return "string";
    case TR_JSON_ARRAY: return "array";
    case TR_JSON_OBJECT: return "object";
    }
    return "?";
}

TR__FN tr_status tr__jp_fail(tr__jp *p, const char *msg) {
    return tr__err(p->ctx, TR_ERR_FORMAT, "%s: invalid JSON at byte %zu: %s", p->what, p->pos, msg);
}

TR__FN void tr__jp_ws(tr__jp *p) {
    while (p->pos < p->len) {
        unsigned char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->line += c == '\n';
        p->pos++;
    }
}

/* Grows a node's child arrays (items, and keys for objects) to hold at least `need` entries. */
TR__FN tr_status tr__jp_grow(tr__jp *p, tr_json *v, size_t *cap, size_t need) {
    size_t ncap, bytes;
    tr_json *items;
    if (need <= *cap) return TR_OK;
    ncap = *cap ? *cap * 2 : 4;
    if (ncap < need || !tr__size_mul(ncap, sizeof(tr_json), &bytes) || !tr__size_mul(ncap, sizeof(char *), &bytes))
        return tr__err(p->ctx, TR_ERR_OVERFLOW, "%s: JSON container too large", p->what);
    items = (tr_json *)tr__alloc(p->ctx, ncap * sizeof(tr_json));
    if (!items) return TR_ERR_OUT_OF_MEMORY;
    if (v->count) memcpy(items, v->items, v->count * sizeof(tr_json));
    if (v->type == TR_JSON_OBJECT) {
        char **keys = (char **)tr__alloc(p->ctx, ncap * sizeof(char *));
        if (!keys) {
            tr__free(p->ctx, items);
            return TR_ERR_OUT_OF_MEMORY;
        }
        if (v->count) memcpy(keys, v->keys, v->count * sizeof(char *));
        tr__free(p->ctx, v->keys);
        v->keys = keys;
    }
    tr__free(p->ctx, v->items);
    v->items = items;
    *cap = ncap;
    return TR_OK;
}

TR__FN int tr__jp_hex4(const unsigned char *s, unsigned *out) {
    unsigned v = 0;
    int i;
    for (i = 0; i < 4; i++) {
        unsigned c = s[i], d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return 0;
        v = v * 16 + d;
    }
    *out = v;
    return 1;
}

/* Length of the valid UTF-8 sequence at s[0..n), or 0 if it is invalid (overlong, surrogate,
   beyond U+10FFFF, truncated). */
TR__FN size_t tr__utf8_seq(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t k, i;
    uint32_t cp;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) { k = 2; cp = c & 0x1f; }
    else if (c >= 0xe0 && c <= 0xef) { k = 3; cp = c & 0x0f; }
    else if (c >= 0xf0 && c <= 0xf4) { k = 4; cp = c & 0x07; }
    else return 0;
    if (n < k) return 0;
    for (i = 1; i < k; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3fu);
    }
    if ((k == 3 && cp < 0x800) || (k == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return k;
}

TR__FN size_t tr__utf8_put(char *o, uint32_t cp) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xc0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3f)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3f)); o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f)); o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* Parses a string starting at the opening quote. *out gets a tr__alloc'ed NUL-terminated copy. */
TR__FN tr_status tr__jp_string(tr__jp *p, char **out, size_t *out_len, int is_key) {
    size_t start = p->pos + 1, end = start, o = 0;
    char *buf;
    *out = NULL;
    *out_len = 0;
    /* find the closing quote first, so the buffer can be sized (unescaping never grows text) */
    for (;;) {
        if (end >= p->len) {
            p->pos = end;
            return tr__jp_fail(p, "unterminated string");
        }
        if (p->s[end] == '"') break;
        if (p->s[end] == '\\') end++;
        end++;
    }
    buf = (char *)tr__alloc(p->ctx, end - start + 1);
    if (!buf) return TR_ERR_OUT_OF_MEMORY;
    p->pos = start;
    while (p->pos < end) {
        unsigned char c = p->s[p->pos];
        if (c < 0x20) {
            tr__free(p->ctx, buf);
            return tr__jp_fail(p, "control character in string (must be escaped)");
        }
        if (c == '\\') {
            unsigned char e = p->s[p->pos + 1];
            const char *simple = NULL;
            switch (e) {
            case '"': simple = "\""; break;
            case '\\': simple = "\\"; break;
            case '/': simple = "/"; break;
            case 'b': simple = "\b"; break;
            case 'f': simple = "\f"; break;
            case 'n': simple = "\n"; break;
            case 'r': simple = "\r"; break;
            case 't': simple = "\t"; break;
            default: break;
            }
            if (simple) {
                buf[o++] = simple[0];
                p->pos += 2;
            } else if (e == 'u') {
                unsigned u, u2;
                uint32_t cp;
                if (p->pos + 6 > end || !tr__jp_hex4(p->s + p->pos + 2, &u)) {
                    tr__free(p->ctx, buf);
                    return tr__jp_fail(p, "bad \\u escape (needs 4 hex digits)");
                }
                if (u >= 0xdc00 && u <= 0xdfff) {
                    tr__free(p->ctx, buf);
                    return tr__jp_fail(p, "lone low surrogate in \\u escape");
                }
                if (u >= 0xd800 && u <= 0xdbff) {
                    if (p->pos + 12 > end || p->s[p->pos + 6] != '\\' || p->s[p->pos + 7] != 'u' ||
                        !tr__jp_hex4(p->s + p->pos + 8, &u2) || u2 < 0xdc00 || u2 > 0xdfff) {
                        tr__free(p->ctx, buf);
                        return tr__jp_fail(p, "high surrogate not followed by a low surrogate \\u escape");
                    }
                    cp = 0x10000u + (((uint32_t)u - 0xd800u) << 10) + ((uint32_t)u2 - 0xdc00u);
                    p->pos += 12;
                } else {
                    cp = u;
                    p->pos += 6;
                }
                if (cp == 0 && is_key) {
                    tr__free(p->ctx, buf);
                    return tr__jp_fail(p, "object key contains \\u0000");
                }
                o += tr__utf8_put(buf + o, cp);
            } else {
                tr__free(p->ctx, buf);
                return tr__jp_fail(p, "invalid escape in string");
            }
        } else if (c < 0x80) {
            buf[o++] = (char)c;
            p->pos++;
        } else {
            size_t k = tr__utf8_seq(p->s + p->pos, end - p->pos);
            if (!k) {
                tr__free(p->ctx, buf);
                return tr__jp_fail(p, "invalid UTF-8 in string");
            }
            memcpy(buf + o, p->s + p->pos, k);
            o += k;
            p->pos += k;
        }
    }
    buf[o] = 0;
    p->pos = end + 1;
    *out = buf;
    *out_len = o;
    return TR_OK;
}

TR__FN tr_status tr__jp_number(tr__jp *p, double *out) {
    size_t st = p->pos, i = p->pos, n;
    char local[64], *buf = local;
    char *endp;
    char dp = '.';
    const struct lconv *lc;
    double v;
    if (i < p->len && p->s[i] == '-') i++;
    if (i >= p->len || !(p->s[i] >= '0' && p->s[i] <= '9')) {
        p->pos = i;
        return tr__jp_fail(p, "invalid number");
    }
    if (p->s[i] == '0') {
        i++;
        if (i < p->len && p->s[i] >= '0' && p->s[i] <= '9') {
            p->pos = i;
            return tr__jp_fail(p, "leading zero in number");
        }
    } else
        while (i < p->len && p->s[i] >= '0' && p->s[i] <= '9') i++;
    if (i < p->len && p->s[i] == '.') {
        i++;
        if (i >= p->len || !(p->s[i] >= '0' && p->s[i] <= '9')) {
            p->pos = i;
            return tr__jp_fail(p, "digit expected after decimal point");
        }
        while (i < p->len && p->s[i] >= '0' && p->s[i] <= '9') i++;
    }
    if (i < p->len && (p->s[i] == 'e' || p->s[i] == 'E')) {
        i++;
        if (i < p->len && (p->s[i] == '+' || p->s[i] == '-')) i++;
        if (i >= p->len || !(p->s[i] >= '0' && p->s[i] <= '9')) {
            p->pos = i;
            return tr__jp_fail(p, "digit expected in exponent");
        }
        while (i < p->len && p->s[i] >= '0' && p->s[i] <= '9') i++;
    }
    n = i - st;
    if (n + 1 > sizeof local) {
        buf = (char *)tr__alloc(p->ctx, n + 1);
        if (!buf) return TR_ERR_OUT_OF_MEMORY;
    }
    memcpy(buf, p->s + st, n);
    buf[n] = 0;
    lc = localeconv(); /* strtod follows the C locale's decimal point */
    if (lc && lc->decimal_point && lc->decimal_point[0]) dp = lc->decimal_point[0];
    if (dp != '.') {
        char *d = strchr(buf, '.');
        if (d) *d = dp;
    }
    v = strtod(buf, &endp);
    if (buf != local) tr__free(p->ctx, buf);
    if (v != v || v > DBL_MAX || v < -DBL_MAX) return tr__jp_fail(p, "number out of range");
    p->pos = i;
    *out = v;
    return TR_OK;
}

TR__FN int tr__jp_cmp_keys(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Rejects duplicate keys: pairwise for small objects, sorted for large ones (no quadratic blowup). */
TR__FN tr_status tr__jp_check_dups(tr__jp *p, const tr_json *v, size_t obj_pos) {
    size_t i, j;
    const char *dup = NULL;
    if (v->count <= 8) {
        for (i = 0; i < v->count && !dup; i++)
            for (j = i + 1; j < v->count; j++)
                if (strcmp(v->keys[i], v->keys[j]) == 0) {
                    dup = v->keys[i];
                    break;
                }
    } else {
        char **sorted = (char **)tr__alloc(p->ctx, v->count * sizeof(char *));
        if (!sorted) return TR_ERR_OUT_OF_MEMORY;
        memcpy(sorted, v->keys, v->count * sizeof(char *));
        qsort(sorted, v->count, sizeof(char *), tr__jp_cmp_keys);
        for (i = 1; i < v->count; i++)
            if (strcmp(sorted[i - 1], sorted[i]) == 0) {
                dup = sorted[i];
                break;
            }
        tr__free(p->ctx, sorted);
    }
    if (dup)
        return tr__err(p->ctx, TR_ERR_FORMAT, "%s: invalid JSON: duplicate key \"%.200s\" in the object at byte %zu", p->what, dup, obj_pos);
    return TR_OK;
}

TR__FN int tr__jp_lit(tr__jp *p, const char *lit) {
    size_t n = strlen(lit);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, lit, n) != 0) return 0;
    p->pos += n;
    return 1;
}

/* Parses one value into *v (zeroed by the caller). On failure v holds whatever was built so far,
   consistently, so the caller frees it with tr__json_free_contents. */
TR__FN tr_status tr__jp_value(tr__jp *p, tr_json *v, int depth) {
    tr_status st;
    unsigned char c;
    tr__jp_ws(p);
    if (p->pos >= p->len) return tr__jp_fail(p, "unexpected end of input, a value was expected");
    v->line = p->line;
    c = p->s[p->pos];
    if (c == '{' || c == '[') {
        size_t cap = 0, obj_pos = p->pos;
        int is_obj = c == '{';
        unsigned char close = is_obj ? '}' : ']';
        if (depth >= TR_JSON_MAX_DEPTH) return tr__jp_fail(p, "nesting deeper than 64 levels");
        v->type = is_obj ? TR_JSON_OBJECT : TR_JSON_ARRAY;
        p->pos++;
        tr__jp_ws(p);
        if (p->pos < p->len && p->s[p->pos] == close) {
            p->pos++;
            return TR_OK;
        }
        for (;;) {
            size_t i = v->count;
            if ((st = tr__jp_grow(p, v, &cap, i + 1)) != TR_OK) return st;
            memset(&v->items[i], 0, sizeof v->items[i]);
            if (is_obj) {
                size_t klen;
                v->keys[i] = NULL;
                tr__jp_ws(p);
                if (p->pos >= p->len || p->s[p->pos] != '"') return tr__jp_fail(p, "object key (a string) expected");
                if ((st = tr__jp_string(p, &v->keys[i], &klen, 1)) != TR_OK) return st;
                v->count = i + 1;
                tr__jp_ws(p);
                if (p->pos >= p->len || p->s[p->pos] != ':') return tr__jp_fail(p, "':' expected after object key");
                p->pos++;
            } else
                v->count = i + 1;
            if ((st = tr__jp_value(p, &v->items[i], depth + 1)) != TR_OK) return st;
            tr__jp_ws(p);
            if (p->pos < p->len && p->s[p->pos] == ',') {
                p->pos++;
                continue;
            }
            if (p->pos < p->len && p->s[p->pos] == close) {
                p->pos++;
                break;
            }
            return tr__jp_fail(p, is_obj ? "',' or '}' expected in object" : "',' or ']' expected in array");
        }
        if (is_obj) return tr__jp_check_dups(p, v, obj_pos);
        return TR_OK;
    }
    if (c == '"') {
        v->type = TR_JSON_STRING;
        return tr__jp_string(p, &v->string, &v->len, 0);
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        v->type = TR_JSON_NUMBER;
        return tr__jp_number(p, &v->number);
    }
    if (tr__jp_lit(p, "true")) { v->type = TR_JSON_BOOL; v->boolean = 1; return TR_OK; }
    if (tr__jp_lit(p, "false")) { v->type = TR_JSON_BOOL; v->boolean = 0; return TR_OK; }
    if (tr__jp_lit(p, "null")) { v->type = TR_JSON_NULL; return TR_OK; }
    return tr__jp_fail(p, "invalid literal (expected a value: object, array, string, number, true, false or null)");
}

/* Parses len bytes (need not be NUL-terminated). `what` names the source in error texts
   ("model.safetensors header"). Strict: depth limit 64, duplicate object keys rejected, no
   NaN/Infinity, no trailing garbage, control chars in strings rejected, \u escapes incl.
   surrogate pairs, UTF-8 validated, \u0000 rejected in keys (allowed in values: see len). */
TRDEF tr_status tr_json_parse(tr_ctx *ctx, const char *text, size_t len, const char *what, tr_json **out) {
    tr__jp p;
    tr_json *root;
    tr_status st;
    if (!out) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_json_parse: out is NULL");
    *out = NULL;
    if (!text && len) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_json_parse: text is NULL");
    p.ctx = ctx;
    p.s = (const unsigned char *)(text ? text : "");
    p.len = len;
    p.pos = 0;
    p.line = 1;
    p.what = what ? what : "JSON";
    root = (tr_json *)tr__calloc(ctx, 1, sizeof *root);
    if (!root) return TR_ERR_OUT_OF_MEMORY;
    st = tr__jp_value(&p, root, 0);
    if (st == TR_OK) {
        tr__jp_ws(&p);
        if (p.pos != p.len) st = tr__jp_fail(&p, "trailing garbage after the JSON value");
    }
    if (st != TR_OK) {
        tr_json_free(ctx, root);
        return st;
    }
    *out = root;
    return TR_OK;
}

/* ---- string builder ------------------------------------------------------------------------
   data is NULL until the first append, then always NUL-terminated. After an allocation failure
   `failed` is set and every later call is a no-op; tr__sb_status reports it. */
typedef struct tr__sb {
    char *data;
    size_t len, cap;
    tr_ctx *ctx;
    int failed;
} tr__sb;

TR__FN void tr__sb_init(tr__sb *sb, tr_ctx *ctx) {
    sb->data = NULL;
    sb->len = sb->cap = 0;
    sb->ctx = ctx;
    sb->failed = 0;
}

TR__FN void tr__sb_free(tr__sb *sb) {
    if (sb->data) tr__free(sb->ctx, sb->data);
    sb->data = NULL;
    sb->len = sb->cap = 0;
}

/* Makes room for `extra` more bytes plus the terminator; 0 on failure (failed set). */
TR__FN int tr__sb_reserve(tr__sb *sb, size_t extra) {
    size_t need, ncap;
    char *nd;
    if (sb->failed) return 0;
    if (extra > SIZE_MAX - sb->len - 1) {
        sb->failed = 1;
        return 0;
    }
    need = sb->len + extra + 1;
    if (need <= sb->cap) return 1;
    ncap = sb->cap ? sb->cap : 256;
    while (ncap < need) ncap = ncap > SIZE_MAX / 2 ? need : ncap * 2;
    nd = (char *)tr__alloc(sb->ctx, ncap);
    if (!nd) {
        sb->failed = 1;
        return 0;
    }
    if (sb->data) {
        memcpy(nd, sb->data, sb->len + 1);
        tr__free(sb->ctx, sb->data);
    } else
        nd[0] = 0;
    sb->data = nd;
    sb->cap = ncap;
    return 1;
}

TR__FN void tr__sb_append(tr__sb *sb, const char *s, size_t n) {
    if (!tr__sb_reserve(sb, n)) return;
    if (n) memcpy(sb->data + sb->len, s, n);
    sb->len += n;
    sb->data[sb->len] = 0;
}

TR__FN void tr__sb_printf(tr__sb *sb, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
TR__FN void tr__sb_printf(tr__sb *sb, const char *fmt, ...) {
    va_list ap, ap2;
    int n;
    char small[256];
    if (sb->failed) return;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) {
        va_end(ap2);
        sb->failed = 1;
        return;
    }
    if ((size_t)n < sizeof small) tr__sb_append(sb, small, (size_t)n);
    else if (tr__sb_reserve(sb, (size_t)n)) {
        vsnprintf(sb->data + sb->len, (size_t)n + 1, fmt, ap2);
        sb->len += (size_t)n;
    }
    va_end(ap2);
}

/* The escape sequence JSON needs for byte c ('"', '\\' and control characters) in esc; 0 when c
   stands for itself. */
TR__FN int tr__json_escape(unsigned char c, char esc[8]) {
    switch (c) {
    case '"': memcpy(esc, "\\\"", 3); return 2;
    case '\\': memcpy(esc, "\\\\", 3); return 2;
    case '\n': memcpy(esc, "\\n", 3); return 2;
    case '\r': memcpy(esc, "\\r", 3); return 2;
    case '\t': memcpy(esc, "\\t", 3); return 2;
    case '\b': memcpy(esc, "\\b", 3); return 2;
    case '\f': memcpy(esc, "\\f", 3); return 2;
    default: break;
    }
    if (c >= 0x20) return 0;
    snprintf(esc, 8, "\\u%04x", (unsigned)c);
    return 6;
}

/* Appends s as a quoted JSON string. s is taken as UTF-8 and passed through byte for byte, except
   for '"', '\\' and control characters, which are escaped. */
TR__FN void tr__sb_json_string(tr__sb *sb, const char *s) {
    const unsigned char *u = (const unsigned char *)(s ? s : "");
    char esc[8];
    size_t run;
    int n;
    tr__sb_append(sb, "\"", 1);
    for (run = 0; u[run]; ) {
        if ((n = tr__json_escape(u[run], esc)) == 0) {
            run++;
            continue;
        }
        tr__sb_append(sb, (const char *)u, run);
        tr__sb_append(sb, esc, (size_t)n);
        u += run + 1;
        run = 0;
    }
    tr__sb_append(sb, (const char *)u, run);
    tr__sb_append(sb, "\"", 1);
}

TRDEF int tr_json_fput_string(FILE *f, const char *s) {
    const unsigned char *u = (const unsigned char *)(s ? s : "");
    char esc[8];
    int n, bad = 0;
    if (!f) return EOF;
    bad |= putc('"', f) == EOF;
    for (; *u; u++) {
        if ((n = tr__json_escape(*u, esc)) == 0) bad |= putc(*u, f) == EOF;
        else bad |= fwrite(esc, 1, (size_t)n, f) != (size_t)n;
    }
    bad |= putc('"', f) == EOF;
    return bad ? EOF : 0;
}

/* Python's repr() of a float ("1.0", "3.25", "1e-05"): shortest round trip digits. */
TR__FN void tr__py_float(char *out, size_t cap, double v) {
    char buf[40], digits[24];
    int prec, exp10 = 0, nd = 0, i;
    char *e;
    if (v != v) { snprintf(out, cap, "NaN"); return; }
    if (v > DBL_MAX || v < -DBL_MAX) { snprintf(out, cap, v > 0 ? "Infinity" : "-Infinity"); return; }
    if (v == 0) { snprintf(out, cap, signbit(v) ? "-0.0" : "0.0"); return; }
    for (prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, v);
        if (strtod(buf, NULL) == v) break;
    }
    /* buf = [-]d.ddde[+-]xx */
    e = strchr(buf, 'e');
    exp10 = atoi(e + 1);
    for (i = 0; buf + i < e; i++)
        if (isdigit((unsigned char)buf[i])) digits[nd++] = buf[i];
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    {
        char res[64];
        size_t o = 0;
        if (v < 0) res[o++] = '-';
        if (exp10 >= 16 || exp10 < -4) {
            res[o++] = digits[0];
            if (nd > 1) {
                res[o++] = '.';
                for (i = 1; i < nd; i++) res[o++] = digits[i];
            }
            snprintf(res + o, sizeof res - o, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
        } else if (exp10 >= 0) {
            for (i = 0; i <= exp10; i++) res[o++] = i < nd ? digits[i] : '0';
            res[o++] = '.';
            if (nd > exp10 + 1)
                for (i = exp10 + 1; i < nd; i++) res[o++] = digits[i];
            else
                res[o++] = '0';
            res[o] = 0;
        } else {
            res[o++] = '0';
            res[o++] = '.';
            for (i = 0; i < -exp10 - 1; i++) res[o++] = '0';
            for (i = 0; i < nd; i++) res[o++] = digits[i];
            res[o] = 0;
        }
        snprintf(out, cap, "%s", res);
    }
}

/* A number as JSON: integers without a fraction, others as Python's repr; "null" when not finite. */
TR__FN void tr__json_number_text(char out[48], double v) {
    if (v != v || v > DBL_MAX || v < -DBL_MAX) snprintf(out, 48, "null");
    else if (v == floor(v) && fabs(v) < 9e15) snprintf(out, 48, "%lld", (long long)v);
    else tr__py_float(out, 48, v);
}

TRDEF int tr_json_fput_number(FILE *f, double v) {
    char b[48];
    tr__json_number_text(b, v);
    return f && fputs(b, f) != EOF ? 0 : EOF;
}

/* TR_OK, or TR_ERR_OUT_OF_MEMORY with the reason set. */
TR__FN tr_status tr__sb_status(tr__sb *sb) {
    if (!sb->failed) return TR_OK;
    return tr__err(sb->ctx, TR_ERR_OUT_OF_MEMORY, "out of memory while building text (%zu bytes so far)", sb->len);
}

/* ---- whole-file reads ----------------------------------------------------------------------
   *data gets a tr__alloc'ed copy of the file plus a NUL terminator (not counted in *len). Files
   larger than max_bytes are refused with TR_ERR_FORMAT. */
TR__FN tr_status tr__read_file_capped(tr_ctx *ctx, const char *path, size_t max_bytes, char **data, size_t *len) {
    FILE *f;
    char *buf = NULL;
    size_t cap = 0, n = 0;
    int is_stdin;
    if (!data || !len) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_read_file: NULL output pointer");
    *data = NULL;
    *len = 0;
    if (!path) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_read_file: path is NULL");
    is_stdin = !strcmp(path, "-");
    f = is_stdin ? stdin : fopen(path, "rb");
    if (!f) return tr__err(ctx, TR_ERR_IO, "cannot open '%s' for reading: %s", path, strerror(errno));
    if (is_stdin) path = "<stdin>"; /* for the error texts; stdin stays open */
#if !defined(_WIN32)
    {
        struct stat sb;
        if (fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size >= 0) {
            if ((uint64_t)sb.st_size > (uint64_t)max_bytes) {
                if (!is_stdin) fclose(f);
                return tr__err(ctx, TR_ERR_FORMAT, "'%s' is %llu bytes, more than the %zu-byte limit", path,
                               (unsigned long long)sb.st_size, max_bytes);
            }
            if (ctx && ctx->mem_limit && (uint64_t)sb.st_size > (uint64_t)ctx->mem_limit) {
                if (!is_stdin) fclose(f);
                return tr__err(ctx, TR_ERR_OUT_OF_MEMORY, "'%s' is %llu bytes, more than the %.0f MiB memory limit (tr_ctx_config.memory_limit, else the machine's memory)",
                               path, (unsigned long long)sb.st_size, (double)ctx->mem_limit / (1024.0 * 1024.0));
            }
            if ((uint64_t)sb.st_size < (uint64_t)(SIZE_MAX - 2)) cap = (size_t)sb.st_size + 2; /* NUL + one byte to see EOF */
        }
    }
#endif
    if (cap < 4096) cap = 4096;
    for (;;) {
        size_t want, got;
        if (!buf || n + 1 >= cap) {
            char *nb;
            size_t ncap = buf ? (cap > SIZE_MAX / 2 ? SIZE_MAX : cap * 2) : cap;
            if (buf && ncap <= cap) {
                tr__free(ctx, buf);
                if (!is_stdin) fclose(f);
                return tr__err(ctx, TR_ERR_OVERFLOW, "'%s' is too large to read", path);
            }
            nb = (char *)tr__alloc(ctx, ncap);
            if (!nb) {
                tr__free(ctx, buf);
                if (!is_stdin) fclose(f);
                return tr__err(ctx, TR_ERR_OUT_OF_MEMORY, "out of memory reading '%s' (%zu bytes)", path, ncap);
            }
            if (buf) {
                memcpy(nb, buf, n);
                tr__free(ctx, buf);
            }
            buf = nb;
            cap = ncap;
        }
        want = cap - 1 - n;
        got = fread(buf + n, 1, want, f);
        n += got;
        if (n > max_bytes) {
            tr__free(ctx, buf);
            if (!is_stdin) fclose(f);
            return tr__err(ctx, TR_ERR_FORMAT, "'%s' is more than the %zu-byte limit", path, max_bytes);
        }
        if (got < want) { /* end of file or an error */
            if (ferror(f)) {
                int e = errno;
                tr__free(ctx, buf);
                if (!is_stdin) fclose(f);
                return tr__err(ctx, TR_ERR_IO, "cannot read '%s': %s", path, strerror(e));
            }
            break;
        }
    }
    if (!is_stdin) fclose(f);
    buf[n] = 0;
    *data = buf;
    *len = n;
    return TR_OK;
}

TRDEF tr_status tr_read_file(tr_ctx *ctx, const char *path, char **data, size_t *len) { return tr__read_file_capped(ctx, path, SIZE_MAX - 1, data, len); }

TRDEF void tr_free(tr_ctx *ctx, void *p) { tr__free(ctx, p); }

/* ---- atomic file replacement ---------------------------------------------------------------
   tr__atomic_begin opens `<path>.tmp.<pid>` in the target's directory; tr__atomic_write appends
   (errors are sticky: later writes are no-ops and commit reports the first one); tr__atomic_commit
   fsyncs the file, renames it over `path` and fsyncs the directory. On any failure the temp file
   is removed, the previous `path` is left untouched, and TR_ERR_IO is returned with the reason.
   tr__atomic_abort discards an unfinished write.

   Tests inject failures with a tr__io_fault: the write that would take the file past `at_byte`
   bytes writes only up to there and then fails in the chosen way. The context's disk faults
   (tr_ctx_inject_fault, TINYREC_FAULT=enospc@N / erofs@N) pick the N-th file written: ENOSPC through
   the same tr__io_fault, EROFS where the temporary file is created. */
typedef enum tr__io_fault_kind {
    TR__IO_FAULT_NONE = 0,
    TR__IO_FAULT_SHORT,  /* write() returns a short count, then 0 (no progress) */
    TR__IO_FAULT_ENOSPC, /* write() returns a short count, then -1 with errno ENOSPC */
    TR__IO_FAULT_FSYNC,  /* every write succeeds; fsync of the file fails with EIO */
    TR__IO_FAULT_RENAME  /* every write succeeds; rename fails with EACCES */
} tr__io_fault_kind;
typedef struct tr__io_fault {
    tr__io_fault_kind kind;
    uint64_t at_byte;
} tr__io_fault;

typedef struct tr__atomic_file {
    tr_ctx *ctx;
    const char *path; /* the caller's string: must outlive the write */
    char *tmp_path;
    int fd;
    uint64_t written;
    tr_status status; /* first failure, sticky */
    const tr__io_fault *fault;
    tr__io_fault ctx_fault; /* the context's disk fault, when it picks this file (fault then points here) */
    int faulted;
    char *dir;        /* the directory to fsync after the rename (in tmp_path's allocation) */
} tr__atomic_file;

#if !defined(_WIN32)
TR__FN void tr__atomic_cleanup(tr__atomic_file *af) {
    if (af->fd >= 0) close(af->fd);
    af->fd = -1;
    if (af->tmp_path) {
        unlink(af->tmp_path);
        tr__free(af->ctx, af->tmp_path);
        af->tmp_path = NULL;
    }
}

TR__FN tr_status tr__atomic_begin(tr_ctx *ctx, const char *path, const tr__io_fault *fault, tr__atomic_file *af) {
    size_t n;
    memset(af, 0, sizeof *af);
    af->ctx = ctx;
    af->fd = -1;
    af->path = path;
    af->fault = fault;
    af->status = TR_ERR_IO;
    if (!path || !path[0]) return tr__err(ctx, TR_ERR_INVALID_ARG, "atomic write: empty path");
    /* one allocation holds the temp name and the directory name, so that nothing can fail for
       lack of memory once the rename has happened */
    n = strlen(path) + 32;
    af->tmp_path = (char *)tr__alloc(ctx, 2 * n);
    if (!af->tmp_path) return af->status = TR_ERR_OUT_OF_MEMORY;
    snprintf(af->tmp_path, n, "%s.tmp.%ld", path, (long)getpid());
    af->dir = af->tmp_path + n;
    {
        const char *slash = strrchr(path, '/');
        size_t dlen = slash ? (size_t)(slash - path) : 1;
        if (slash && dlen == 0) dlen = 1; /* "/file" */
        if (slash) memcpy(af->dir, path, dlen);
        else af->dir[0] = '.';
        af->dir[dlen] = 0;
    }
    /* the context's disk fault, when it picks this file: a full disk fails the first write, a
       read-only folder the creation of the temporary file */
    if (ctx && (ctx->fault == TR_FAULT_IO_ENOSPC || ctx->fault == TR_FAULT_IO_EROFS) && ++ctx->io_files == ctx->fault_step) {
        af->ctx_fault.kind = TR__IO_FAULT_ENOSPC;
        if (ctx->fault == TR_FAULT_IO_ENOSPC) af->fault = &af->ctx_fault;
    }
    if (af->ctx_fault.kind && ctx->fault == TR_FAULT_IO_EROFS) {
        af->fd = -1;
        errno = EROFS;
    } else
        af->fd = open(af->tmp_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (af->fd < 0) {
        int e = errno;
        tr__free(ctx, af->tmp_path);
        af->tmp_path = NULL;
        return tr__err(ctx, TR_ERR_IO, "cannot create temporary file for '%s': %s", path, strerror(e));
    }
    af->status = TR_OK;
    return TR_OK;
}

/* write(2), or the injected failure. */
TR__FN long tr__atomic_sys_write(tr__atomic_file *af, const void *data, size_t n) {
    const tr__io_fault *fl = af->fault;
    if (fl && (fl->kind == TR__IO_FAULT_SHORT || fl->kind == TR__IO_FAULT_ENOSPC) && af->written + n > fl->at_byte) {
        size_t allow = af->written >= fl->at_byte ? 0 : (size_t)(fl->at_byte - af->written);
        if (allow > 0) return (long)write(af->fd, data, allow);
        af->faulted = 1;
        if (fl->kind == TR__IO_FAULT_SHORT) return 0;
        errno = ENOSPC;
        return -1;
    }
    return (long)write(af->fd, data, n);
}

TR__FN tr_status tr__atomic_write(tr__atomic_file *af, const void *data, size_t n) {
    const char *p = (const char *)data;
    if (af->status != TR_OK) return af->status;
    while (n > 0) {
        size_t chunk = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n;
        long w = tr__atomic_sys_write(af, p, chunk);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) {
            int e = errno;
            tr__atomic_cleanup(af);
            return af->status = tr__err(af->ctx, TR_ERR_IO, "writing '%s' failed after %llu bytes: %s (the previous file is unchanged)",
                                        af->path, (unsigned long long)af->written, strerror(e));
        }
        if (w == 0) {
            tr__atomic_cleanup(af);
            return af->status = tr__err(af->ctx, TR_ERR_IO, "writing '%s' failed after %llu bytes: short write, no progress (disk full?) (the previous file is unchanged)",
                                        af->path, (unsigned long long)af->written);
        }
        p += w;
        n -= (size_t)w;
        af->written += (uint64_t)w;
    }
    return TR_OK;
}

TR__FN void tr__atomic_abort(tr__atomic_file *af) {
    tr__atomic_cleanup(af);
    if (af->status == TR_OK) af->status = TR_ERR_IO;
}

TR__FN tr_status tr__atomic_commit(tr__atomic_file *af) {
    const tr__io_fault *fl = af->fault;
    int dfd, e;
    if (af->status != TR_OK) {
        tr__atomic_cleanup(af);
        return af->status;
    }
    if ((fl && fl->kind == TR__IO_FAULT_FSYNC) || fsync(af->fd) != 0) {
        e = (fl && fl->kind == TR__IO_FAULT_FSYNC) ? EIO : errno;
        tr__atomic_cleanup(af);
        return af->status = tr__err(af->ctx, TR_ERR_IO, "fsync of the temporary file for '%s' failed: %s (the previous file is unchanged)", af->path, strerror(e));
    }
    if (close(af->fd) != 0) {
        e = errno;
        af->fd = -1;
        tr__atomic_cleanup(af);
        return af->status = tr__err(af->ctx, TR_ERR_IO, "closing the temporary file for '%s' failed: %s (the previous file is unchanged)", af->path, strerror(e));
    }
    af->fd = -1;
    if ((fl && fl->kind == TR__IO_FAULT_RENAME) || rename(af->tmp_path, af->path) != 0) {
        e = (fl && fl->kind == TR__IO_FAULT_RENAME) ? EACCES : errno;
        af->status = tr__err(af->ctx, TR_ERR_IO, "renaming '%s' over '%s' failed: %s (the previous file is unchanged)", af->tmp_path, af->path, strerror(e));
        tr__atomic_cleanup(af);
        return af->status;
    }
    /* renamed: there is no temp file to remove any more; make the rename durable by syncing the
       directory that holds the entry */
    dfd = open(af->dir, O_RDONLY);
    if (dfd < 0) {
        e = errno;
        af->status = tr__err(af->ctx, TR_ERR_IO, "'%s' was written, but opening its directory '%s' to fsync it failed: %s", af->path, af->dir, strerror(e));
    } else {
        if (fsync(dfd) != 0 && errno != EINVAL && errno != EROFS) {
            e = errno;
            af->status = tr__err(af->ctx, TR_ERR_IO, "'%s' was written, but fsync of its directory '%s' failed: %s", af->path, af->dir, strerror(e));
        }
        close(dfd);
    }
    tr__free(af->ctx, af->tmp_path);
    af->tmp_path = af->dir = NULL;
    return af->status;
}
#else /* _WIN32: atomic replacement is not implemented yet */
TR__FN tr_status tr__atomic_begin(tr_ctx *ctx, const char *path, const tr__io_fault *fault, tr__atomic_file *af) {
    memset(af, 0, sizeof *af);
    af->ctx = ctx;
    af->path = path;
    af->fault = fault;
    af->fd = -1;
    af->status = TR_ERR_UNSUPPORTED;
    return tr__err(ctx, TR_ERR_UNSUPPORTED, "cannot write '%s': atomic file replacement is not implemented on Windows yet", path ? path : "");
}
TR__FN tr_status tr__atomic_write(tr__atomic_file *af, const void *data, size_t n) {
    TR__UNUSED(data);
    TR__UNUSED(n);
    return af->status;
}
TR__FN void tr__atomic_abort(tr__atomic_file *af) { TR__UNUSED(af); }
TR__FN tr_status tr__atomic_commit(tr__atomic_file *af) { return af->status; }
#endif
/* >>json-end */

/* A strict safetensors reader and an atomic writer (on the JSON reader, string builder and
   atomic writer of >>json). */
/* >>io */
struct tr_st_file {
    tr_ctx *ctx;
    char *owned;              /* the file's bytes when tr_st_open read them */
    const unsigned char *bytes;
    size_t len;
    char *what;               /* file name for error texts */
    tr_json *header;         /* tensor names and metadata point into it */
    tr_st_tensor *tensors;    /* header order */
    size_t count;
    size_t *by_name;          /* indices into tensors, sorted by name */
    const tr_json *meta;     /* the __metadata__ object, or NULL */
};

static const char *const tr__dtype_names[] = {"F32", "BF16", "F16", "I32", "I64", "U8", "BOOL"};
static const unsigned char tr__dtype_sizes[] = {4, 2, 2, 4, 8, 1, 1};
#define TR__NUM_DTYPES 7

TRDEF const char *tr_dtype_name(tr_dtype d) { return (unsigned)d < TR__NUM_DTYPES ? tr__dtype_names[d] : "?"; }
TRDEF size_t tr_dtype_size(tr_dtype d) { return (unsigned)d < TR__NUM_DTYPES ? tr__dtype_sizes[d] : 0; }

/* Element count with overflow detection: 0 on overflow (*ok = 0), on bad input too. */
TR__FN size_t tr__st_numel(const tr_st_tensor *t, int *ok) {
    size_t n = 1;
    int i;
    *ok = 1;
    if (t->ndim < 0 || t->ndim > TR_ST_MAX_DIMS) {
        *ok = 0;
        return 0;
    }
    for (i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0 || (uint64_t)t->shape[i] > (uint64_t)SIZE_MAX || !tr__size_mul(n, (size_t)t->shape[i], &n)) {
            *ok = 0;
            return 0;
        }
    }
    return n;
}

TRDEF size_t tr_st_numel(const tr_st_tensor *t) {
    int ok;
    size_t n;
    if (!t) return 0;
    n = tr__st_numel(t, &ok);
    return ok ? n : 0;
}

/* "[2,3,4]" into buf, for error texts. */
TR__FN const char *tr__st_shape_str(const tr_st_tensor *t, char *buf, size_t cap) {
    size_t o = 0;
    int i;
    o += (size_t)snprintf(buf, cap, "[");
    for (i = 0; i < t->ndim && o < cap; i++) o += (size_t)snprintf(buf + o, cap - o, i ? ",%lld" : "%lld", (long long)t->shape[i]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
    return buf;
}

TR__FN uint64_t tr__le64(const unsigned char *p) {
    uint64_t v = 0;
    int i;
    for (i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* A JSON number that is a non-negative integer no larger than 2^53 (exactly representable).
   0 if it is not. */
TR__FN int tr__st_json_uint(const tr_json *v, uint64_t *out) {
    if (!v || v->type != TR_JSON_NUMBER) return 0;
    if (!(v->number >= 0.0) || v->number > 9007199254740992.0 || floor(v->number) != v->number) return 0;
    *out = (uint64_t)v->number;
    return 1;
}

typedef struct tr__st_span {
    uint64_t begin, end;
    size_t idx;
} tr__st_span;

TR__FN int tr__st_cmp_span(const void *a, const void *b) {
    const tr__st_span *x = (const tr__st_span *)a, *y = (const tr__st_span *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx ? 1 : 0;
}

/* qsort has no context argument: sort (name, index) pairs instead. */
typedef struct tr__st_named {
    const char *name;
    size_t idx;
} tr__st_named;
TR__FN int tr__st_cmp_named(const void *a, const void *b) {
    return strcmp(((const tr__st_named *)a)->name, ((const tr__st_named *)b)->name);
}

/* Validates one tensor entry of the header and fills t (everything except data). */
TR__FN tr_status tr__st_parse_entry(tr_ctx *ctx, const char *what, const char *name, const tr_json *e, tr_st_tensor *t,
                                     tr__st_span *span, uint64_t data_len) {
    const tr_json *dt, *sh, *off;
    size_t i, numel = 1, nbytes;
    int d;
    uint64_t b, en;
    char sbuf[200];
    if (e->type != TR_JSON_OBJECT)
        return tr__err(ctx, TR_ERR_FORMAT, "%s: tensor '%s': the entry is a JSON %s, not an object with dtype, shape and data_offsets",
                       what, name, tr_json_type_name(e->type));
    for (i = 0; i < e->count; i++)
        if (strcmp(e->keys[i], "dtype") != 0 && strcmp(e->keys[i], "shape") != 0 && strcmp(e->keys[i], "data_offsets") != 0)
            return tr__err(ctx, TR_ERR_FORMAT, "%s: tensor '%s': unknown field '%.100s' (allowed: dtype, shape, data_offsets)", what, name, e->keys[i]);
    dt = tr_json_get(e, "dtype");
    sh = tr_json_get(e, "shape");
    off = tr_json_get(e, "data_offsets");
    if (!dt) return tr__err(ctx, TR_ERR_FORMAT, "%s: tensor '%s': missing field 'dtype'", what, name);
    if (!sh) return tr__err(ctx, TR_ERR_FORMAT, "%s: tensor '%s': missing field 'shape'", what, name);
    if (!off) return tr__err(ctx, TR_ERR_FORMAT, "%s: tensor '%s': missing field 'data_offsets'", what, name);
    /* dtype */
    if (dt->type != TR_JSON_STRING)
        return tr__err(ctx, TR_ERR_FORMAT, "%s: tensor '%s': dtype is a JSON %s, not a string", what, name, tr_json_type_name(dt->type));
    for (d = 0; d < TR__NUM_DTYPES; d++)
        if (strcmp(dt->string, tr__dtype_names[d]) == 0 && dt->len == strlen(tr__dtype_names[d])) break;
    if (d == TR__NUM_DTYPES)
        return tr__err(ctx, TR_ERR_FORMAT, "%s: tensor '%s': unsupported dtype '%.40s' (supported: F32, BF16, F16, I32, I64, U8, BOOL)",
                       what, name, dt->string);
    t->dtype = (tr_dtype)d;
    /* shape */
    if (sh->type != TR_JSON_ARRAY)
        return tr__err(ctx, TR_ERR_FORMAT, "%s: tensor '%s': shape is a JSON %s, not an array", what, name, tr_json_type_name(sh->type));
    if (sh->count > TR_ST_MAX_DIMS)
        return tr__err(ctx, TR_ERR_FORMAT, "%s: tensor '%s': shape has %zu dimensions, more than the supported %d", what, name, sh->count, TR_ST_MAX_DIMS);
    t->ndim = (int)sh->count;
    for (i = 0; i < sh->count; i++) {
        const tr_json *x = &sh->items[i];
        uint64_t dim;
        if (x->type == TR_JSON_NUMBER && x->number < 0)
            return tr__err(ctx, TR_ERR_FORMAT, "%s: tensor '%s': shape[%zu] is negative (%g)", what, name, i, x->number);
        if (!tr__st_json_uint(x, &dim))
            return tr__err(ctx, TR_ERR_FORMAT, "%s: tensor '%s': shape[%zu] is not a non-negative integer (at most 2^53)", what, name, i);
        t->shape[i] = (int64_t)dim;
        if (dim > (uint64_t)SIZE_MAX || !tr__size_mul(numel, (size_t)dim, &numel))
            return tr__err(ctx, TR_ERR_FORMAT, "%s: tensor '%s': shape %s has too many elements (overflow)", what, name,
                           tr__st_shape_str(t, sbuf, sizeof sbuf));
    }
    if (!tr__size_mul(numel, tr__dtype_sizes[d], &nbytes))
        return tr__err(ctx, TR_ERR_FORMAT, "%s: tensor '%s': shape %s of %s is too large in bytes (overflow)", what, name,
                       tr__st_shape_str(t, sbuf, sizeof sbuf), tr__dtype_names[d]);
    /* data_offsets */
    if (off->type != TR_JSON_ARRAY || off->count != 2)
        return tr__err(ctx, TR_ERR_FORMAT, "%s: tensor '%s': data_offsets must be an array [begin, end]", what, name);
    if (!tr__st_json_uint(&off->items[0], &b))
        return tr__err(ctx, TR_ERR_FORMAT, "%s: tensor '%s': data_offsets[0] is not a non-negative integer (at most 2^53)", what, name);
    if (!tr__st_json_uint(&off->items[1], &en))
        return tr__err(ctx, TR_ERR_FORMAT, "%s: tensor '%s': data_offsets[1] is not a non-negative integer (at most 2^53)", what, name);
    if (en < b)
        return tr__err(ctx, TR_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] end before they begin", what, name,
                       (unsigned long long)b, (unsigned long long)en);
    if ((uint64_t)nbytes != en - b)
        return tr__err(ctx, TR_ERR_FORMAT, "%s: tensor '%s': dtype %s with shape %s needs %zu bytes, but data_offsets [%llu, %llu] span %llu",
                       what, name, tr__dtype_names[d], tr__st_shape_str(t, sbuf, sizeof sbuf), nbytes, (unsigned long long)b,
                       (unsigned long long)en, (unsigned long long)(en - b));
    if (en > data_len)
        return tr__err(ctx, TR_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] run past the end of the %llu-byte data section",
                       what, name, (unsigned long long)b, (unsigned long long)en, (unsigned long long)data_len);
    t->nbytes = nbytes;
    span->begin = b;
    span->end = en;
    return TR_OK;
}

/* Parses and validates everything; on success f->tensors etc. are filled. */
TR__FN tr_status tr__st_load(tr_st_file *f) {
    tr_ctx *ctx = f->ctx;
    const char *what = f->what;
    uint64_t hlen, data_len, expect;
    const unsigned char *data;
    const tr_json *root;
    tr__st_span *spans = NULL;
    tr__st_named *named = NULL;
    size_t i, k, ntensors;
    tr_status st;
    char hwhat[300];
    if (f->len < 8)
        return tr__err(ctx, TR_ERR_FORMAT, "%s: file is %zu bytes, too short for the 8-byte header length", what, f->len);
    hlen = tr__le64(f->bytes);
    if (hlen > TR_ST_MAX_HEADER)
        return tr__err(ctx, TR_ERR_FORMAT, "%s: header length %llu exceeds the %u-byte limit", what, (unsigned long long)hlen, TR_ST_MAX_HEADER);
    if (hlen > (uint64_t)(f->len - 8))
        return tr__err(ctx, TR_ERR_FORMAT, "%s: header length %llu runs past the end of the file (%zu bytes follow the length)", what,
                       (unsigned long long)hlen, f->len - 8);
    if (hlen < 2)
        return tr__err(ctx, TR_ERR_FORMAT, "%s: header length %llu is too small for a JSON object", what, (unsigned long long)hlen);
    if (f->bytes[8] != '{')
        return tr__err(ctx, TR_ERR_FORMAT, "%s: header is not a JSON object (it must start with '{', found byte 0x%02x)", what, f->bytes[8]);
    snprintf(hwhat, sizeof hwhat, "%.250s header", what);
    st = tr_json_parse(ctx, (const char *)f->bytes + 8, (size_t)hlen, hwhat, &f->header);
    if (st != TR_OK) return st;
    root = f->header;
    data = f->bytes + 8 + hlen;
    data_len = (uint64_t)f->len - 8 - hlen;
    ntensors = 0;
    for (i = 0; i < root->count; i++) {
        if (strcmp(root->keys[i], "__metadata__") == 0) {
            const tr_json *m = &root->items[i];
            if (m->type != TR_JSON_OBJECT)
                return tr__err(ctx, TR_ERR_FORMAT, "%s: __metadata__ is a JSON %s, not an object of strings", what, tr_json_type_name(m->type));
            for (k = 0; k < m->count; k++) {
                if (m->items[k].type != TR_JSON_STRING)
                    return tr__err(ctx, TR_ERR_FORMAT, "%s: __metadata__ value of '%.100s' is a JSON %s, not a string", what, m->keys[k],
                                   tr_json_type_name(m->items[k].type));
                if (strlen(m->items[k].string) != m->items[k].len)
                    return tr__err(ctx, TR_ERR_FORMAT, "%s: __metadata__ value of '%.100s' contains a NUL character", what, m->keys[k]);
            }
            f->meta = m;
        } else
            ntensors++;
    }
    if (ntensors) {
        f->tensors = (tr_st_tensor *)tr__calloc(ctx, ntensors, sizeof(tr_st_tensor));
        spans = (tr__st_span *)tr__calloc(ctx, ntensors, sizeof(tr__st_span));
        named = (tr__st_named *)tr__calloc(ctx, ntensors, sizeof(tr__st_named));
        f->by_name = (size_t *)tr__calloc(ctx, ntensors, sizeof(size_t));
        if (!f->tensors || !spans || !named || !f->by_name) {
            st = TR_ERR_OUT_OF_MEMORY;
            goto done;
        }
    }
    for (i = 0, k = 0; i < root->count; i++) {
        tr_st_tensor *t;
        if (strcmp(root->keys[i], "__metadata__") == 0) continue;
        t = &f->tensors[k];
        t->name = root->keys[i];
        t->source = f->what;
        st = tr__st_parse_entry(ctx, what, t->name, &root->items[i], t, &spans[k], data_len);
        if (st != TR_OK) goto done;
        spans[k].idx = k;
        t->data = data + spans[k].begin;
        named[k].name = t->name;
        named[k].idx = k;
        k++;
    }
    f->count = ntensors;
    /* the tensors must tile the data section exactly: sorted by offset, no overlap, no gap */
    if (ntensors) qsort(spans, ntensors, sizeof *spans, tr__st_cmp_span);
    expect = 0;
    for (i = 0; i < ntensors; i++) {
        if (spans[i].begin < expect) {
            const tr__st_span *prev = &spans[i - 1];
            st = tr__err(ctx, TR_ERR_FORMAT, "%s: tensor '%s' (bytes [%llu, %llu)) overlaps tensor '%s' (bytes [%llu, %llu))", what,
                         f->tensors[spans[i].idx].name, (unsigned long long)spans[i].begin, (unsigned long long)spans[i].end,
                         f->tensors[prev->idx].name, (unsigned long long)prev->begin, (unsigned long long)prev->end);
            goto done;
        }
        if (spans[i].begin > expect) {
            st = tr__err(ctx, TR_ERR_FORMAT, "%s: gap in the data section: bytes [%llu, %llu) before tensor '%s' belong to no tensor", what,
                         (unsigned long long)expect, (unsigned long long)spans[i].begin, f->tensors[spans[i].idx].name);
            goto done;
        }
        expect = spans[i].end;
    }
    if (expect != data_len) {
        st = tr__err(ctx, TR_ERR_FORMAT, "%s: data section is %llu bytes but the tensors cover %llu: %llu trailing bytes belong to no tensor", what,
                     (unsigned long long)data_len, (unsigned long long)expect, (unsigned long long)(data_len - expect));
        goto done;
    }
    /* names are unique (the JSON reader rejects duplicate keys); index them for tr_st_find */
    if (ntensors) qsort(named, ntensors, sizeof *named, tr__st_cmp_named);
    for (i = 0; i < ntensors; i++) f->by_name[i] = named[i].idx;
    st = TR_OK;
done:
    tr__free(ctx, spans);
    tr__free(ctx, named);
    return st;
}

TR__FN void tr__st_destroy(tr_st_file *f) {
    tr_ctx *ctx;
    if (!f) return;
    ctx = f->ctx;
    tr_json_free(ctx, f->header);
    tr__free(ctx, f->tensors);
    tr__free(ctx, f->by_name);
    tr__free(ctx, f->what);
    tr__free(ctx, f->owned);
    tr__free(ctx, f);
}

/* Takes ownership of `owned` (freed on failure too). */
TR__FN tr_status tr__st_open_bytes(tr_ctx *ctx, const void *bytes, size_t len, char *owned, const char *what, tr_st_file **out) {
    tr_st_file *f;
    size_t wl;
    tr_status st;
    f = (tr_st_file *)tr__calloc(ctx, 1, sizeof *f);
    if (!f) {
        tr__free(ctx, owned);
        return TR_ERR_OUT_OF_MEMORY;
    }
    f->ctx = ctx;
    f->owned = owned;
    f->bytes = (const unsigned char *)bytes;
    f->len = len;
    wl = strlen(what);
    f->what = (char *)tr__alloc(ctx, wl + 1);
    if (!f->what) {
        tr__st_destroy(f);
        return TR_ERR_OUT_OF_MEMORY;
    }
    memcpy(f->what, what, wl + 1);
    st = tr__st_load(f);
    if (st != TR_OK) {
        tr__st_destroy(f);
        return st;
    }
    *out = f;
    return TR_OK;
}

TRDEF tr_status tr_st_open_memory(tr_ctx *ctx, const void *bytes, size_t len, const char *what, tr_st_file **out) {
    if (!ctx || !out) return ctx ? tr__err(ctx, TR_ERR_INVALID_ARG, "tr_st_open_memory: out is NULL") : TR_ERR_INVALID_ARG;
    *out = NULL;
    if (!bytes && len) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_st_open_memory: bytes is NULL");
    return tr__st_open_bytes(ctx, bytes ? bytes : "", len, NULL, what ? what : "<memory>", out);
}

TRDEF tr_status tr_st_open(tr_ctx *ctx, const char *path, tr_st_file **out) {
    char *data;
    size_t len;
    tr_status st;
    if (!ctx || !out) return ctx ? tr__err(ctx, TR_ERR_INVALID_ARG, "tr_st_open: out is NULL") : TR_ERR_INVALID_ARG;
    *out = NULL;
    if (!path) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_st_open: path is NULL");
    st = tr_read_file(ctx, path, &data, &len);
    if (st != TR_OK) return st;
    return tr__st_open_bytes(ctx, data, len, data, path, out);
}

TRDEF void tr_st_close(tr_st_file *f) { tr__st_destroy(f); }
TRDEF size_t tr_st_count(const tr_st_file *f) { return f ? f->count : 0; }
TRDEF const tr_st_tensor *tr_st_at(const tr_st_file *f, size_t i) { return f && i < f->count ? &f->tensors[i] : NULL; }

TRDEF const tr_st_tensor *tr_st_find(const tr_st_file *f, const char *name) {
    size_t lo = 0, hi;
    if (!f || !name) return NULL;
    hi = f->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const tr_st_tensor *t = &f->tensors[f->by_name[mid]];
        int c = strcmp(t->name, name);
        if (c == 0) return t;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

TRDEF tr_status tr_st_get(tr_ctx *ctx, const tr_st_file *f, const char *name, int ndim, const int64_t *shape, const tr_st_tensor **out) {
    const tr_st_tensor *t;
    char buf1[200], buf2[200];
    int i;
    if (!ctx) return TR_ERR_INVALID_ARG;
    if (!f || !name || !out) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_st_get: NULL argument");
    *out = NULL;
    t = tr_st_find(f, name);
    if (!t) {
        static const char prefix[] = "_orig_mod.";
        size_t nl = strlen(name);
        char local[256], *full = local;
        if (nl + sizeof prefix > sizeof local) {
            full = (char *)tr__alloc(ctx, nl + sizeof prefix);
            if (!full) return TR_ERR_OUT_OF_MEMORY;
        }
        memcpy(full, prefix, sizeof prefix - 1);
        memcpy(full + sizeof prefix - 1, name, nl + 1);
        t = tr_st_find(f, full);
        if (full != local) tr__free(ctx, full);
    }
    if (!t) return tr__err(ctx, TR_ERR_NOT_FOUND, "%s: missing tensor '%s'", f->what, name);
    if (shape) {
        int same = t->ndim == ndim;
        for (i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
        if (!same) {
            tr_st_tensor want;
            memset(&want, 0, sizeof want);
            want.ndim = ndim < 0 ? 0 : ndim > TR_ST_MAX_DIMS ? TR_ST_MAX_DIMS : ndim;
            for (i = 0; i < want.ndim; i++) want.shape[i] = shape[i];
            return tr__err(ctx, TR_ERR_FORMAT, "%s: tensor '%s' has shape %s, expected %s", f->what, t->name, tr__st_shape_str(t, buf1, sizeof buf1),
                           tr__st_shape_str(&want, buf2, sizeof buf2));
        }
    }
    *out = t;
    return TR_OK;
}

TRDEF const char *tr_st_metadata(const tr_st_file *f, const char *key) {
    const tr_json *v;
    if (!f || !f->meta) return NULL;
    v = tr_json_get(f->meta, key);
    return v ? v->string : NULL;
}
TRDEF size_t tr_st_metadata_count(const tr_st_file *f) { return f && f->meta ? f->meta->count : 0; }
TRDEF const char *tr_st_metadata_key(const tr_st_file *f, size_t i) { return f && f->meta && i < f->meta->count ? f->meta->keys[i] : NULL; }

/* Common checks of the read functions: returns the element count or sets the error. */
TR__FN tr_status tr__st_check_read(tr_ctx *ctx, const tr_st_tensor *t, const void *dst, size_t count, const char *fn) {
    int ok;
    size_t n;
    const char *src = t && t->source ? t->source : "<tensor>";
    if (!t || (!dst && count)) return tr__err(ctx, TR_ERR_INVALID_ARG, "%s: NULL tensor or destination", fn);
    if ((unsigned)t->dtype >= TR__NUM_DTYPES)
        return tr__err(ctx, TR_ERR_INVALID_ARG, "%s: %s: tensor '%s' has an invalid dtype %d", fn, src, t->name ? t->name : "?", (int)t->dtype);
    n = tr__st_numel(t, &ok);
    if (!ok || !tr__size_mul(n, tr__dtype_sizes[t->dtype], &n) || n != t->nbytes || (!t->data && t->nbytes))
        return tr__err(ctx, TR_ERR_INVALID_ARG, "%s: %s: tensor '%s' is inconsistent (shape, dtype and nbytes disagree)", fn, src, t->name ? t->name : "?");
    n = tr__st_numel(t, &ok);
    if (count != n)
        return tr__err(ctx, TR_ERR_INVALID_ARG, "%s: %s: tensor '%s' has %zu elements, but %zu were asked for", fn, src, t->name ? t->name : "?", n, count);
    return TR_OK;
}

TRDEF tr_status tr_st_read_f32(tr_ctx *ctx, const tr_st_tensor *t, float *dst, size_t count) {
    const unsigned char *p;
    size_t i;
    tr_status st;
    if (!ctx) return TR_ERR_INVALID_ARG;
    if ((st = tr__st_check_read(ctx, t, dst, count, "tr_st_read_f32")) != TR_OK) return st;
    p = (const unsigned char *)t->data;
    switch (t->dtype) {
    case TR_F32:
        for (i = 0; i < count; i++) {
            uint32_t u = (uint32_t)p[4 * i] | ((uint32_t)p[4 * i + 1] << 8) | ((uint32_t)p[4 * i + 2] << 16) | ((uint32_t)p[4 * i + 3] << 24);
            memcpy(&dst[i], &u, 4);
        }
        return TR_OK;
    case TR_BF16:
        for (i = 0; i < count; i++) dst[i] = tr__bf16_to_f32((uint16_t)(p[2 * i] | (p[2 * i + 1] << 8)));
        return TR_OK;
    case TR_F16:
        for (i = 0; i < count; i++) dst[i] = tr__f16_to_f32((uint16_t)(p[2 * i] | (p[2 * i + 1] << 8)));
        return TR_OK;
    default:
        return tr__err(ctx, TR_ERR_UNSUPPORTED, "tr_st_read_f32: %s: tensor '%s' is %s, not a floating-point dtype (F32, BF16, F16)",
                       t->source ? t->source : "<tensor>", t->name ? t->name : "?", tr__dtype_names[t->dtype]);
    }
}

TRDEF tr_status tr_st_read_i64(tr_ctx *ctx, const tr_st_tensor *t, int64_t *dst, size_t count) {
    const unsigned char *p;
    size_t i;
    tr_status st;
    if (!ctx) return TR_ERR_INVALID_ARG;
    if ((st = tr__st_check_read(ctx, t, dst, count, "tr_st_read_i64")) != TR_OK) return st;
    p = (const unsigned char *)t->data;
    switch (t->dtype) {
    case TR_I32:
        for (i = 0; i < count; i++) {
            uint32_t u = (uint32_t)p[4 * i] | ((uint32_t)p[4 * i + 1] << 8) | ((uint32_t)p[4 * i + 2] << 16) | ((uint32_t)p[4 * i + 3] << 24);
            int32_t s;
            memcpy(&s, &u, 4);
            dst[i] = s;
        }
        return TR_OK;
    case TR_I64:
        for (i = 0; i < count; i++) {
            uint64_t u = tr__le64(p + 8 * i);
            memcpy(&dst[i], &u, 8);
        }
        return TR_OK;
    case TR_U8:
        for (i = 0; i < count; i++) dst[i] = p[i];
        return TR_OK;
    case TR_BOOL:
        for (i = 0; i < count; i++) dst[i] = p[i] != 0;
        return TR_OK;
    default:
        return tr__err(ctx, TR_ERR_UNSUPPORTED, "tr_st_read_i64: %s: tensor '%s' is %s, not an integer dtype (I32, I64, U8, BOOL)",
                       t->source ? t->source : "<tensor>", t->name ? t->name : "?", tr__dtype_names[t->dtype]);
    }
}

/* Builds the header (without the 8-byte length), padded with spaces to a multiple of 8, laying the
   tensors out in the given order. Validates the tensors; `what` names the destination. */
TR__FN tr_status tr__st_build_header(tr_ctx *ctx, const char *what, const tr_st_tensor *ts, size_t n, const char *const *mk,
                                      const char *const *mv, size_t n_meta, tr__sb *sb) {
    size_t i, j;
    uint64_t off = 0;
    tr__st_named *named = NULL;
    tr_status st = TR_OK;
    if (n && !ts) return tr__err(ctx, TR_ERR_INVALID_ARG, "%s: tensors is NULL", what);
    if (n_meta && (!mk || !mv)) return tr__err(ctx, TR_ERR_INVALID_ARG, "%s: metadata keys or values are NULL", what);
    for (i = 0; i < n_meta; i++) {
        if (!mk[i] || !mv[i]) return tr__err(ctx, TR_ERR_INVALID_ARG, "%s: metadata entry %zu has a NULL key or value", what, i);
        for (j = 0; j < i; j++)
            if (strcmp(mk[i], mk[j]) == 0) return tr__err(ctx, TR_ERR_INVALID_ARG, "%s: metadata key '%.100s' appears twice", what, mk[i]);
    }
    for (i = 0; i < n; i++) {
        const tr_st_tensor *t = &ts[i];
        int ok;
        size_t numel, nb;
        if (!t->name) return tr__err(ctx, TR_ERR_INVALID_ARG, "%s: tensor %zu has no name", what, i);
        if (strcmp(t->name, "__metadata__") == 0) return tr__err(ctx, TR_ERR_INVALID_ARG, "%s: '__metadata__' is reserved, not a tensor name", what);
        if ((unsigned)t->dtype >= TR__NUM_DTYPES) return tr__err(ctx, TR_ERR_INVALID_ARG, "%s: tensor '%s': invalid dtype %d", what, t->name, (int)t->dtype);
        if (t->ndim < 0 || t->ndim > TR_ST_MAX_DIMS) return tr__err(ctx, TR_ERR_INVALID_ARG, "%s: tensor '%s': ndim %d is out of range 0..%d", what, t->name, t->ndim, TR_ST_MAX_DIMS);
        for (j = 0; j < (size_t)t->ndim; j++)
            if (t->shape[j] < 0) return tr__err(ctx, TR_ERR_INVALID_ARG, "%s: tensor '%s': shape[%zu] is negative", what, t->name, j);
        numel = tr__st_numel(t, &ok);
        if (!ok || !tr__size_mul(numel, tr__dtype_sizes[t->dtype], &nb))
            return tr__err(ctx, TR_ERR_OVERFLOW, "%s: tensor '%s': size overflows", what, t->name);
        if (nb != t->nbytes)
            return tr__err(ctx, TR_ERR_INVALID_ARG, "%s: tensor '%s': nbytes is %zu but dtype %s and the shape need %zu", what, t->name,
                           t->nbytes, tr__dtype_names[t->dtype], nb);
        if (nb && !t->data) return tr__err(ctx, TR_ERR_INVALID_ARG, "%s: tensor '%s': data is NULL", what, t->name);
    }
    if (n > 1) { /* unique names */
        named = (tr__st_named *)tr__calloc(ctx, n, sizeof *named);
        if (!named) return TR_ERR_OUT_OF_MEMORY;
        for (i = 0; i < n; i++) {
            named[i].name = ts[i].name;
            named[i].idx = i;
        }
        qsort(named, n, sizeof *named, tr__st_cmp_named);
        for (i = 1; i < n; i++)
            if (strcmp(named[i - 1].name, named[i].name) == 0) {
                st = tr__err(ctx, TR_ERR_INVALID_ARG, "%s: tensor name '%.200s' appears twice", what, named[i].name);
                break;
            }
        tr__free(ctx, named);
        if (st != TR_OK) return st;
    }
    tr__sb_append(sb, "{", 1);
    if (n_meta) {
        tr__sb_append(sb, "\"__metadata__\":{", 16);
        for (i = 0; i < n_meta; i++) {
            if (i) tr__sb_append(sb, ",", 1);
            tr__sb_json_string(sb, mk[i]);
            tr__sb_append(sb, ":", 1);
            tr__sb_json_string(sb, mv[i]);
        }
        tr__sb_append(sb, "}", 1);
    }
    for (i = 0; i < n; i++) {
        const tr_st_tensor *t = &ts[i];
        int d;
        if (i || n_meta) tr__sb_append(sb, ",", 1);
        tr__sb_json_string(sb, t->name);
        tr__sb_printf(sb, ":{\"dtype\":\"%s\",\"shape\":[", tr__dtype_names[t->dtype]);
        for (d = 0; d < t->ndim; d++) tr__sb_printf(sb, d ? ",%lld" : "%lld", (long long)t->shape[d]);
        tr__sb_printf(sb, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off, (unsigned long long)(off + t->nbytes));
        off += t->nbytes;
    }
    tr__sb_append(sb, "}", 1);
    while (!sb->failed && sb->len % 8) tr__sb_append(sb, " ", 1);
    if ((st = tr__sb_status(sb)) != TR_OK) return st;
    if (sb->len > TR_ST_MAX_HEADER)
        return tr__err(ctx, TR_ERR_OVERFLOW, "%s: the header would be %zu bytes, more than the %u-byte limit", what, sb->len, TR_ST_MAX_HEADER);
    return TR_OK;
}

/* tr_st_write with an optional injected I/O failure (tests). */
TR__FN tr_status tr__st_write_ex(tr_ctx *ctx, const char *path, const tr_st_tensor *ts, size_t n, const char *const *mk,
                                  const char *const *mv, size_t n_meta, const tr__io_fault *fault) {
    tr__sb sb;
    tr__atomic_file af;
    unsigned char lenbuf[8];
    uint64_t hl;
    size_t i;
    int b;
    tr_status st;
    if (!ctx) return TR_ERR_INVALID_ARG;
    if (!path) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_st_write: path is NULL");
    tr__sb_init(&sb, ctx);
    st = tr__st_build_header(ctx, path, ts, n, mk, mv, n_meta, &sb);
    if (st != TR_OK) {
        tr__sb_free(&sb);
        return st;
    }
    hl = sb.len;
    for (b = 0; b < 8; b++) lenbuf[b] = (unsigned char)(hl >> (8 * b));
    st = tr__atomic_begin(ctx, path, fault, &af);
    if (st == TR_OK) {
        tr__atomic_write(&af, lenbuf, 8);
        tr__atomic_write(&af, sb.data, sb.len);
        for (i = 0; i < n; i++)
            if (ts[i].nbytes) tr__atomic_write(&af, ts[i].data, ts[i].nbytes);
        st = tr__atomic_commit(&af);
    }
    tr__sb_free(&sb);
    return st;
}

TRDEF tr_status tr_st_write(tr_ctx *ctx, const char *path, const tr_st_tensor *tensors, size_t n, const char *const *meta_keys,
                            const char *const *meta_values, size_t n_meta) {
    return tr__st_write_ex(ctx, path, tensors, n, meta_keys, meta_values, n_meta, NULL);
}
/* >>io-end */

/* The data pipeline: .npy files, the reference dataset layout (reader, validator, writer), the
   Sudoku / Maze / ARC builders with their augmentations, and the batch sampler with its prefetch
   thread. */

/* >>data */

/* ---- small helpers ---------------------------------------------------------------------- */
/* a + "/" + b (+ "/" + c): tr__alloc'ed, NULL on failure (reason set). */
TR__FN char *tr__path3(tr_ctx *ctx, const char *a, const char *b, const char *c) {
    size_t la = strlen(a), lb = b ? strlen(b) : 0, lc = c ? strlen(c) : 0;
    char *p = (char *)tr__alloc(ctx, la + lb + lc + 3);
    if (!p) return NULL;
    memcpy(p, a, la);
    p[la] = 0;
    if (b) {
        if (la && p[la - 1] != '/') strcat(p, "/");
        strcat(p, b);
    }
    if (c) {
        strcat(p, "/");
        strcat(p, c);
    }
    return p;
}

TR__FN tr_status tr__mkdir_p(tr_ctx *ctx, const char *path) {
    char *p;
    size_t i, n = strlen(path);
    tr_status st = TR_OK;
    if (n == 0) return TR_OK;
    p = (char *)tr__alloc(ctx, n + 1);
    if (!p) return TR_ERR_OUT_OF_MEMORY;
    memcpy(p, path, n + 1);
    for (i = 1; i <= n && st == TR_OK; i++) {
        if (p[i] == '/' || p[i] == 0) {
            char save = p[i];
            int r;
            p[i] = 0;
#if TR__POSIX
            r = mkdir(p, 0755);
#else
            r = _mkdir(p);
#endif
            if (r != 0 && errno != EEXIST) st = tr__err(ctx, TR_ERR_IO, "cannot create directory '%s': %s", p, strerror(errno));
            p[i] = save;
        }
    }
    tr__free(ctx, p);
#if TR__POSIX
    {
        struct stat sb;
        if (st == TR_OK && stat(path, &sb) == 0 && !S_ISDIR(sb.st_mode)) st = tr__err(ctx, TR_ERR_IO, "cannot create directory '%s': %s", path, strerror(ENOTDIR));
    }
#endif
    return st;
}

TRDEF tr_status tr_mkdir_p(tr_ctx *ctx, const char *path) {
    if (!ctx) return TR_ERR_INVALID_ARG;
    if (!path) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_mkdir_p: path is NULL");
    return tr__mkdir_p(ctx, path);
}

TR__FN tr_status tr__write_whole(tr_ctx *ctx, const char *path, const void *data, size_t n) {
    tr__atomic_file af;
    tr_status st = tr__atomic_begin(ctx, path, NULL, &af);
    if (st != TR_OK) return st;
    st = tr__atomic_write(&af, data, n);
    if (st != TR_OK) {
        tr__atomic_abort(&af);
        return st;
    }
    return tr__atomic_commit(&af);
}

/* Calls the progress callback; TR_ERR_INTERRUPTED when it asks to stop. */
TR__FN tr_status tr__progress(tr_ctx *ctx, tr_progress_fn fn, void *user, const char *stage, int64_t done, int64_t total) {
    if (fn && fn(user, stage, done, total) != 0) return tr__err(ctx, TR_ERR_INTERRUPTED, "%s: stopped by the progress callback at %lld of %lld", stage, (long long)done, (long long)total);
    return TR_OK;
}

/* In-place Fisher-Yates shuffle of n int64 / byte values. */
TR__FN void tr__shuffle_i64(tr__rng *r, int64_t *a, int64_t n) {
    int64_t i;
    for (i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)tr__rng_below(r, (uint64_t)i + 1), t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}
TR__FN void tr__shuffle_u8(tr__rng *r, uint8_t *a, int n) {
    int i;
    for (i = n - 1; i > 0; i--) {
        int j = (int)tr__rng_below(r, (uint64_t)i + 1);
        uint8_t t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

/* Stream ids that keep the builders' random draws independent of each other. */
#define TR__STREAM_SUDOKU_GEN 0x5d0c0000ull
#define TR__STREAM_SUDOKU_AUG 0x5d0c1000ull
#define TR__STREAM_SUBSAMPLE 0x5ab50000ull
#define TR__STREAM_MAZE_GEN 0x3a2e0000ull
#define TR__STREAM_ARC_SHUFFLE 0xa2c00000ull
#define TR__STREAM_ARC_AUG 0xa2c10000ull
#define TR__STREAM_ARC_TRANSLATE 0xa2c20000ull

/* ---- .npy ------------------------------------------------------------------------------- */
static const char *tr__npy_descr[4] = {"", "|u1", "<i4", "<i8"};

TR__FN size_t tr__npy_itemsize(tr_npy_dtype t) { return t == TR_NPY_U8 ? 1 : t == TR_NPY_I32 ? 4 : 8; }

TRDEF int64_t tr_npy_get(const tr_npy *a, size_t i) {
    const unsigned char *p = (const unsigned char *)a->data;
    if (a->dtype == TR_NPY_U8) return p[i];
    if (a->dtype == TR_NPY_I32) {
        int32_t v;
        memcpy(&v, p + i * 4, 4);
        return v;
    } else {
        int64_t v;
        memcpy(&v, p + i * 8, 8);
        return v;
    }
}

typedef struct tr__npyh {
    const char *s;
    size_t n, pos;
} tr__npyh;

TR__FN void tr__npyh_ws(tr__npyh *h) {
    while (h->pos < h->n && (h->s[h->pos] == ' ' || h->s[h->pos] == '\t' || h->s[h->pos] == '\n' || h->s[h->pos] == '\r')) h->pos++;
}
/* A Python string literal in ' or " quotes (no escapes needed by the format). */
TR__FN int tr__npyh_str(tr__npyh *h, char *out, size_t cap) {
    char q;
    size_t k = 0;
    if (h->pos >= h->n || (h->s[h->pos] != '\'' && h->s[h->pos] != '"')) return 0;
    q = h->s[h->pos++];
    while (h->pos < h->n && h->s[h->pos] != q) {
        if (h->s[h->pos] == '\\' || k + 1 >= cap) return 0;
        out[k++] = h->s[h->pos++];
    }
    if (h->pos >= h->n) return 0;
    h->pos++;
    out[k] = 0;
    return 1;
}

TRDEF tr_status tr_npy_parse(tr_ctx *ctx, const void *bytes, size_t len, const char *what, tr_npy *out) {
    const unsigned char *b = (const unsigned char *)bytes;
    size_t hlen, hstart, need;
    tr__npyh h;
    int have_descr = 0, have_fo = 0, have_shape = 0, fortran = 0, i;
    char key[64], descr[64];
    if (!out) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_npy_parse: out is NULL");
    memset(out, 0, sizeof *out);
    if (!what) what = "npy";
    if (!bytes && len) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_npy_parse: bytes is NULL");
    if (len < 10) return tr__err(ctx, TR_ERR_FORMAT, "'%s': truncated: %zu bytes, too short for a .npy header", what, len);
    if (memcmp(b, "\x93NUMPY", 6) != 0) return tr__err(ctx, TR_ERR_FORMAT, "'%s': bad magic: not a .npy file (expected \\x93NUMPY)", what);
    if (b[6] < 1 || b[6] > 3 || b[7] != 0) return tr__err(ctx, TR_ERR_UNSUPPORTED, "'%s': format version %d.%d is not supported (1.0, 2.0, 3.0 are)", what, b[6], b[7]);
    out->version = b[6];
    if (b[6] == 1) {
        hlen = (size_t)b[8] | ((size_t)b[9] << 8);
        hstart = 10;
    } else {
        if (len < 12) return tr__err(ctx, TR_ERR_FORMAT, "'%s': truncated header length field", what);
        hlen = (size_t)b[8] | ((size_t)b[9] << 8) | ((size_t)b[10] << 16) | ((size_t)b[11] << 24);
        hstart = 12;
    }
    if (hlen > len - hstart) return tr__err(ctx, TR_ERR_FORMAT, "'%s': truncated: the header says %zu bytes, the file has %zu after the length field", what, hlen, len - hstart);
    out->data_offset = hstart + hlen;
    h.s = (const char *)b + hstart;
    h.n = hlen;
    h.pos = 0;
    for (i = 0; (size_t)i < hlen; i++)
        if ((unsigned char)h.s[i] >= 0x80 || (h.s[i] < 0x20 && h.s[i] != '\n' && h.s[i] != '\t' && h.s[i] != '\r'))
            return tr__err(ctx, TR_ERR_FORMAT, "'%s': header: non-ASCII or control byte at offset %d", what, i);
    tr__npyh_ws(&h);
    if (h.pos >= h.n || h.s[h.pos] != '{') return tr__err(ctx, TR_ERR_FORMAT, "'%s': header: expected a dict starting with '{'", what);
    h.pos++;
    for (;;) {
        tr__npyh_ws(&h);
        if (h.pos < h.n && h.s[h.pos] == '}') {
            h.pos++;
            break;
        }
        if (!tr__npyh_str(&h, key, sizeof key)) return tr__err(ctx, TR_ERR_FORMAT, "'%s': header: expected a quoted key at offset %zu", what, h.pos);
        tr__npyh_ws(&h);
        if (h.pos >= h.n || h.s[h.pos] != ':') return tr__err(ctx, TR_ERR_FORMAT, "'%s': header: expected ':' after key '%s'", what, key);
        h.pos++;
        tr__npyh_ws(&h);
        if (strcmp(key, "descr") == 0) {
            if (have_descr++) return tr__err(ctx, TR_ERR_FORMAT, "'%s': header: duplicate key 'descr'", what);
            if (!tr__npyh_str(&h, descr, sizeof descr)) return tr__err(ctx, TR_ERR_UNSUPPORTED, "'%s': header field 'descr': expected a simple dtype string (structured dtypes are not supported)", what);
        } else if (strcmp(key, "fortran_order") == 0) {
            if (have_fo++) return tr__err(ctx, TR_ERR_FORMAT, "'%s': header: duplicate key 'fortran_order'", what);
            if (h.n - h.pos >= 4 && memcmp(h.s + h.pos, "True", 4) == 0) {
                fortran = 1;
                h.pos += 4;
            } else if (h.n - h.pos >= 5 && memcmp(h.s + h.pos, "False", 5) == 0) {
                fortran = 0;
                h.pos += 5;
            } else
                return tr__err(ctx, TR_ERR_FORMAT, "'%s': header field 'fortran_order': expected True or False", what);
        } else if (strcmp(key, "shape") == 0) {
            int nd = 0, comma_after_last = 0;
            if (have_shape++) return tr__err(ctx, TR_ERR_FORMAT, "'%s': header: duplicate key 'shape'", what);
            if (h.pos >= h.n || h.s[h.pos] != '(') return tr__err(ctx, TR_ERR_FORMAT, "'%s': header field 'shape': expected a tuple", what);
            h.pos++;
            for (;;) {
                int64_t v = 0;
                int digits = 0;
                tr__npyh_ws(&h);
                if (h.pos < h.n && h.s[h.pos] == ')') {
                    h.pos++;
                    break;
                }
                if (nd == TR_NPY_MAX_DIMS) return tr__err(ctx, TR_ERR_UNSUPPORTED, "'%s': header field 'shape': more than %d dimensions", what, TR_NPY_MAX_DIMS);
                if (nd > 0 && !comma_after_last) return tr__err(ctx, TR_ERR_FORMAT, "'%s': header field 'shape': expected ',' between dimensions", what);
                while (h.pos < h.n && isdigit((unsigned char)h.s[h.pos])) {
                    if (v > (INT64_MAX - 9) / 10) return tr__err(ctx, TR_ERR_OVERFLOW, "'%s': header field 'shape': dimension %d is too large", what, nd);
                    v = v * 10 + (h.s[h.pos++] - '0');
                    digits++;
                }
                if (h.pos < h.n && h.s[h.pos] == 'L') h.pos++; /* Python 2 long suffix */
                if (!digits) return tr__err(ctx, TR_ERR_FORMAT, "'%s': header field 'shape': dimension %d is not a non-negative integer", what, nd);
                out->shape[nd++] = v;
                tr__npyh_ws(&h);
                comma_after_last = 0;
                if (h.pos < h.n && h.s[h.pos] == ',') {
                    h.pos++;
                    comma_after_last = 1;
                }
            }
            if (nd == 1 && !comma_after_last) return tr__err(ctx, TR_ERR_FORMAT, "'%s': header field 'shape': (n) is not a tuple, expected (n,)", what);
            out->ndim = nd;
        } else
            return tr__err(ctx, TR_ERR_FORMAT, "'%s': header: unexpected key '%s' (only descr, fortran_order, shape)", what, key);
        tr__npyh_ws(&h);
        if (h.pos < h.n && h.s[h.pos] == ',') {
            h.pos++;
            continue;
        }
        tr__npyh_ws(&h);
        if (h.pos < h.n && h.s[h.pos] == '}') {
            h.pos++;
            break;
        }
        return tr__err(ctx, TR_ERR_FORMAT, "'%s': header: expected ',' or '}' after the value of '%s'", what, key);
    }
    tr__npyh_ws(&h);
    if (h.pos != h.n) return tr__err(ctx, TR_ERR_FORMAT, "'%s': header: unexpected text after the dict", what);
    if (!have_descr) return tr__err(ctx, TR_ERR_FORMAT, "'%s': header: missing key 'descr'", what);
    if (!have_fo) return tr__err(ctx, TR_ERR_FORMAT, "'%s': header: missing key 'fortran_order'", what);
    if (!have_shape) return tr__err(ctx, TR_ERR_FORMAT, "'%s': header: missing key 'shape'", what);
    if (!strcmp(descr, "|u1") || !strcmp(descr, "<u1") || !strcmp(descr, ">u1") || !strcmp(descr, "u1") || !strcmp(descr, "=u1"))
        out->dtype = TR_NPY_U8;
    else if (!strcmp(descr, "<i4"))
        out->dtype = TR_NPY_I32;
    else if (!strcmp(descr, "<i8"))
        out->dtype = TR_NPY_I64;
    else if (descr[0] == '>')
        return tr__err(ctx, TR_ERR_UNSUPPORTED, "'%s': header field 'descr' is '%s': big-endian data is not supported (use '<')", what, descr);
    else
        return tr__err(ctx, TR_ERR_UNSUPPORTED, "'%s': header field 'descr' is '%s': only uint8 ('|u1'), int32 ('<i4') and int64 ('<i8') are supported", what, descr);
    if (fortran && out->ndim > 1) return tr__err(ctx, TR_ERR_UNSUPPORTED, "'%s': header field 'fortran_order' is True: only C-order arrays are supported", what);
    out->itemsize = tr__npy_itemsize(out->dtype);
    out->count = 1;
    for (i = 0; i < out->ndim; i++) {
        if ((uint64_t)out->shape[i] > (uint64_t)SIZE_MAX || !tr__size_mul(out->count, (size_t)out->shape[i], &out->count))
            return tr__err(ctx, TR_ERR_OVERFLOW, "'%s': header field 'shape': the element count overflows", what);
    }
    if (!tr__size_mul(out->count, out->itemsize, &need)) return tr__err(ctx, TR_ERR_OVERFLOW, "'%s': header field 'shape': the byte size overflows", what);
    if (len - out->data_offset < need)
        return tr__err(ctx, TR_ERR_FORMAT, "'%s': truncated: the shape needs %zu data bytes, the file has %zu", what, need, len - out->data_offset);
    if (len - out->data_offset > need)
        return tr__err(ctx, TR_ERR_FORMAT, "'%s': %zu trailing bytes after the %zu data bytes the shape describes", what, len - out->data_offset - need, need);
    out->data = b + out->data_offset;
    return TR_OK;
}

TRDEF void tr_npy_close(tr_ctx *ctx, tr_npy *a) {
    if (!a) return;
#if TR__POSIX
    if (a->map_) munmap(a->map_, a->map_len_);
#endif
    if (a->buf_) tr__free(ctx, a->buf_);
    memset(a, 0, sizeof *a);
}

TRDEF tr_status tr_npy_load(tr_ctx *ctx, const char *path, int use_mmap, tr_npy *out) {
    tr_status st;
    if (!out || !path) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_npy_load: NULL argument");
    memset(out, 0, sizeof *out);
#if TR__POSIX
    if (use_mmap) {
        int fd = open(path, O_RDONLY);
        struct stat sb;
        void *m;
        size_t len;
        if (fd < 0) return tr__err(ctx, TR_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
        if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
            close(fd);
            return tr__err(ctx, TR_ERR_IO, "'%s' is not a regular file", path);
        }
        len = (size_t)sb.st_size;
        if (len == 0) {
            close(fd);
            return tr__err(ctx, TR_ERR_FORMAT, "'%s': truncated: the file is empty", path);
        }
        m = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
        close(fd);
        if (m == MAP_FAILED) return tr__err(ctx, TR_ERR_IO, "cannot map '%s': %s", path, strerror(errno));
        st = tr_npy_parse(ctx, m, len, path, out);
        if (st != TR_OK) {
            munmap(m, len);
            memset(out, 0, sizeof *out);
            return st;
        }
        out->map_ = m;
        out->map_len_ = len;
        return TR_OK;
    }
#else
    TR__UNUSED(use_mmap);
#endif
    {
        char *buf;
        size_t len;
        st = tr_read_file(ctx, path, &buf, &len);
        if (st != TR_OK) return st;
        st = tr_npy_parse(ctx, buf, len, path, out);
        if (st != TR_OK) {
            tr__free(ctx, buf);
            memset(out, 0, sizeof *out);
            return st;
        }
        out->buf_ = buf;
        return TR_OK;
    }
}

/* The header numpy.save writes: sorted keys, spare room for growing axis 0, padded to 64 bytes. */
TR__FN size_t tr__npy_header(char *out, size_t cap, tr_npy_dtype dtype, int ndim, const int64_t *shape) {
    char dict[512], shp[256];
    size_t dl, total, pad, o = 0, hlen;
    int i, version;
    shp[0] = 0;
    o = (size_t)snprintf(shp, sizeof shp, "(");
    for (i = 0; i < ndim; i++) o += (size_t)snprintf(shp + o, sizeof shp - o, i ? ", %lld" : "%lld", (long long)shape[i]);
    snprintf(shp + o, sizeof shp - o, ndim == 1 ? ",)" : ")");
    dl = (size_t)snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", tr__npy_descr[dtype], shp);
    if (dl >= sizeof dict - 24) return 0;
    if (ndim > 0) {
        char d0[32];
        size_t l0 = (size_t)snprintf(d0, sizeof d0, "%lld", (long long)shape[0]);
        for (; l0 < 21; l0++) dict[dl++] = ' ';
        dict[dl] = 0;
    }
    hlen = dl + 1;
    version = 1;
    total = 10 + hlen;
    pad = 64 - total % 64;
    if (hlen + pad > 65535) { /* numpy moves to format 2.0 when the header does not fit a u16 */
        version = 2;
        pad = 64 - (12 + hlen) % 64;
    }
    hlen += pad;
    if ((version == 1 ? 10 : 12) + hlen > cap) return 0;
    memcpy(out, "\x93NUMPY", 6);
    out[6] = (char)version;
    out[7] = 0;
    if (version == 1) {
        out[8] = (char)(hlen & 0xff);
        out[9] = (char)(hlen >> 8);
        o = 10;
    } else {
        out[8] = (char)(hlen & 0xff);
        out[9] = (char)((hlen >> 8) & 0xff);
        out[10] = (char)((hlen >> 16) & 0xff);
        out[11] = (char)((hlen >> 24) & 0xff);
        o = 12;
    }
    memcpy(out + o, dict, dl);
    memset(out + o + dl, ' ', pad);
    out[o + dl + pad] = '\n';
    return o + hlen;
}

/* A streaming .npy writer for arrays whose shape is known up front. */
typedef struct tr__npyw {
    tr__atomic_file af;
    uint64_t expect, written;
    char *buf;
    size_t used, cap;
    tr_status st;
    int open;
} tr__npyw;

TR__FN tr_status tr__npyw_begin(tr_ctx *ctx, tr__npyw *w, const char *path, tr_npy_dtype dtype, int ndim, const int64_t *shape) {
    char hdr[1024];
    size_t hl;
    int i;
    memset(w, 0, sizeof *w);
    w->expect = tr__npy_itemsize(dtype);
    for (i = 0; i < ndim; i++) {
        if (shape[i] < 0) return tr__err(ctx, TR_ERR_INVALID_ARG, "'%s': negative dimension %d", path, i);
        w->expect *= (uint64_t)shape[i];
    }
    hl = tr__npy_header(hdr, sizeof hdr, dtype, ndim, shape);
    if (!hl) return tr__err(ctx, TR_ERR_INVALID_ARG, "'%s': header too long", path);
    w->cap = (size_t)1 << 20;
    w->buf = (char *)tr__alloc(ctx, w->cap);
    if (!w->buf) return TR_ERR_OUT_OF_MEMORY;
    w->st = tr__atomic_begin(ctx, path, NULL, &w->af);
    if (w->st != TR_OK) {
        tr__free(ctx, w->buf);
        w->buf = NULL;
        return w->st;
    }
    w->open = 1;
    w->st = tr__atomic_write(&w->af, hdr, hl);
    return w->st;
}
TR__FN tr_status tr__npyw_write(tr__npyw *w, const void *data, size_t n) {
    if (w->st != TR_OK) return w->st;
    w->written += n;
    if (n >= w->cap) {
        if (w->used) w->st = tr__atomic_write(&w->af, w->buf, w->used);
        w->used = 0;
        if (w->st == TR_OK) w->st = tr__atomic_write(&w->af, data, n);
        return w->st;
    }
    if (w->used + n > w->cap) {
        w->st = tr__atomic_write(&w->af, w->buf, w->used);
        w->used = 0;
    }
    memcpy(w->buf + w->used, data, n);
    w->used += n;
    return w->st;
}
/* Commits (when ok and every byte came) or aborts; frees the buffer. */
TR__FN tr_status tr__npyw_end(tr_ctx *ctx, tr__npyw *w, int ok) {
    tr_status st = w->st;
    if (w->open) {
        if (st == TR_OK && w->used) st = tr__atomic_write(&w->af, w->buf, w->used);
        if (st == TR_OK && ok && w->written != w->expect)
            st = tr__err(ctx, TR_ERR_GENERIC, "'%s': internal error: wrote %llu data bytes, the shape needs %llu", w->af.path, (unsigned long long)w->written, (unsigned long long)w->expect);
        if (st == TR_OK && ok)
            st = tr__atomic_commit(&w->af);
        else
            tr__atomic_abort(&w->af);
        w->open = 0;
    }
    if (w->buf) tr__free(ctx, w->buf);
    w->buf = NULL;
    return ok ? st : TR_OK;
}

TRDEF tr_status tr_npy_save(tr_ctx *ctx, const char *path, tr_npy_dtype dtype, int ndim, const int64_t *shape, const void *data) {
    tr__npyw w;
    tr_status st;
    if (!path || (ndim > 0 && !shape) || ndim < 0 || ndim > TR_NPY_MAX_DIMS || dtype < TR_NPY_U8 || dtype > TR_NPY_I64)
        return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_npy_save: invalid arguments");
    st = tr__npyw_begin(ctx, &w, path, dtype, ndim, shape);
    if (st == TR_OK && w.expect) {
        if (!data) st = tr__err(ctx, TR_ERR_INVALID_ARG, "tr_npy_save '%s': data is NULL", path);
        else st = tr__npyw_write(&w, data, (size_t)w.expect);
    }
    if (st != TR_OK) {
        tr__npyw_end(ctx, &w, 0);
        return st;
    }
    return tr__npyw_end(ctx, &w, 1);
}

/* ---- dataset.json ----------------------------------------------------------------------- */
TRDEF tr_dataset_meta tr_dataset_meta_default(void) {
    tr_dataset_meta m;
    memset(&m, 0, sizeof m);
    m.has_ignore_label_id = 1;
    m.num_puzzle_identifiers = 1;
    m.total_puzzles = -1;
    m.num_sets = 1;
    strcpy(m.sets[0], "all");
    return m;
}

/* An integral JSON number in [lo, hi]. */
TR__FN tr_status tr__meta_int(tr_ctx *ctx, const char *path, const tr_json *root, const char *key, int optional, int64_t lo, int64_t hi, int64_t *out, int *present) {
    const tr_json *v = tr_json_get(root, key);
    if (present) *present = 0;
    if (!v) {
        if (optional) return TR_OK;
        return tr__err(ctx, TR_ERR_FORMAT, "'%s': field '%s' is missing", path, key);
    }
    if (v->type != TR_JSON_NUMBER || v->number != floor(v->number))
        return tr__err(ctx, TR_ERR_FORMAT, "'%s': field '%s' must be an integer", path, key);
    if (v->number < (double)lo || v->number > (double)hi)
        return tr__err(ctx, TR_ERR_FORMAT, "'%s': field '%s' is %.17g, outside [%lld, %lld]", path, key, v->number, (long long)lo, (long long)hi);
    *out = (int64_t)v->number;
    if (present) *present = 1;
    return TR_OK;
}

TR__FN tr_status tr__meta_from_json(tr_ctx *ctx, const char *path, const tr_json *root, tr_dataset_meta *m) {
    int64_t v;
    int present;
    const tr_json *j;
    tr_status st;
    size_t i;
    memset(m, 0, sizeof *m);
    if (root->type != TR_JSON_OBJECT) return tr__err(ctx, TR_ERR_FORMAT, "'%s': expected a JSON object", path);
    if ((st = tr__meta_int(ctx, path, root, "vocab_size", 0, 1, INT32_MAX, &v, NULL)) != TR_OK) return st;
    m->vocab_size = (int)v;
    if ((st = tr__meta_int(ctx, path, root, "seq_len", 0, 1, INT32_MAX, &v, NULL)) != TR_OK) return st;
    m->seq_len = (int)v;
    if ((st = tr__meta_int(ctx, path, root, "pad_id", 0, 0, m->vocab_size - 1, &v, NULL)) != TR_OK) return st;
    m->pad_id = (int)v;
    j = tr_json_get(root, "ignore_label_id");
    if (!j) return tr__err(ctx, TR_ERR_FORMAT, "'%s': field 'ignore_label_id' is missing (use null for none)", path);
    if (j->type == TR_JSON_NULL) {
        m->has_ignore_label_id = 0;
        m->ignore_label_id = 0;
    } else {
        if ((st = tr__meta_int(ctx, path, root, "ignore_label_id", 0, INT32_MIN, INT32_MAX, &v, NULL)) != TR_OK) return st;
        m->has_ignore_label_id = 1;
        m->ignore_label_id = (int)v;
    }
    if ((st = tr__meta_int(ctx, path, root, "num_puzzle_identifiers", 0, 1, INT32_MAX, &v, NULL)) != TR_OK) return st;
    m->num_puzzle_identifiers = v;
    if ((st = tr__meta_int(ctx, path, root, "blank_identifier_id", 0, 0, m->num_puzzle_identifiers - 1, &v, NULL)) != TR_OK) return st;
    m->blank_identifier_id = (int)v;
    if ((st = tr__meta_int(ctx, path, root, "total_groups", 0, 0, INT64_MAX / 2, &v, NULL)) != TR_OK) return st;
    m->total_groups = v;
    if ((st = tr__meta_int(ctx, path, root, "total_puzzles", 1, 0, INT64_MAX / 2, &v, &present)) != TR_OK) return st;
    m->total_puzzles = present ? v : -1;
    j = tr_json_get(root, "mean_puzzle_examples");
    if (!j) return tr__err(ctx, TR_ERR_FORMAT, "'%s': field 'mean_puzzle_examples' is missing", path);
    if (j->type != TR_JSON_NUMBER || j->number < 0) return tr__err(ctx, TR_ERR_FORMAT, "'%s': field 'mean_puzzle_examples' must be a non-negative number", path);
    m->mean_puzzle_examples = j->number;
    j = tr_json_get(root, "sets");
    if (!j) return tr__err(ctx, TR_ERR_FORMAT, "'%s': field 'sets' is missing", path);
    if (j->type != TR_JSON_ARRAY || j->count == 0) return tr__err(ctx, TR_ERR_FORMAT, "'%s': field 'sets' must be a non-empty list of names", path);
    if (j->count > TR_DATASET_MAX_SETS) return tr__err(ctx, TR_ERR_UNSUPPORTED, "'%s': field 'sets' has %zu sets, at most %d are supported", path, j->count, TR_DATASET_MAX_SETS);
    for (i = 0; i < j->count; i++) {
        const tr_json *s = &j->items[i];
        size_t k;
        if (s->type != TR_JSON_STRING || s->len == 0 || s->len >= sizeof m->sets[0] || strlen(s->string) != s->len)
            return tr__err(ctx, TR_ERR_FORMAT, "'%s': field 'sets'[%zu] must be a non-empty name of at most 63 bytes", path, i);
        if (strchr(s->string, '/') || strchr(s->string, '\\') || !strcmp(s->string, ".") || !strcmp(s->string, ".."))
            return tr__err(ctx, TR_ERR_FORMAT, "'%s': field 'sets'[%zu] '%s' is not a plain file-name prefix", path, i, s->string);
        for (k = 0; k < i; k++)
            if (!strcmp(m->sets[k], s->string)) return tr__err(ctx, TR_ERR_FORMAT, "'%s': field 'sets' names '%s' twice", path, s->string);
        strcpy(m->sets[i], s->string);
    }
    m->num_sets = (int)j->count;
    return TR_OK;
}

TRDEF tr_status tr_dataset_read_meta(tr_ctx *ctx, const char *path, tr_dataset_meta *out) {
    char *text;
    size_t len;
    tr_json *root;
    tr_status st;
    if (!path || !out) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_dataset_read_meta: NULL argument");
    st = tr__read_file_capped(ctx, path, (size_t)1 << 20, &text, &len);
    if (st != TR_OK) return st;
    st = tr_json_parse(ctx, text, len, path, &root);
    tr__free(ctx, text);
    if (st != TR_OK) return st;
    st = tr__meta_from_json(ctx, path, root, out);
    tr_json_free(ctx, root);
    return st;
}

TR__FN tr_status tr__meta_to_json(tr_ctx *ctx, const tr_dataset_meta *m, tr__sb *sb) {
    char mean[48];
    int i;
    tr__sb_init(sb, ctx);
    tr__py_float(mean, sizeof mean, m->mean_puzzle_examples);
    tr__sb_printf(sb, "{\"pad_id\": %d, \"ignore_label_id\": ", m->pad_id);
    if (m->has_ignore_label_id) tr__sb_printf(sb, "%d", m->ignore_label_id);
    else tr__sb_printf(sb, "null");
    tr__sb_printf(sb, ", \"blank_identifier_id\": %d, \"vocab_size\": %d, \"seq_len\": %d, \"num_puzzle_identifiers\": %lld, \"total_groups\": %lld, \"mean_puzzle_examples\": %s, ",
                  m->blank_identifier_id, m->vocab_size, m->seq_len, (long long)m->num_puzzle_identifiers, (long long)m->total_groups, mean);
    if (m->total_puzzles >= 0) tr__sb_printf(sb, "\"total_puzzles\": %lld, ", (long long)m->total_puzzles);
    tr__sb_printf(sb, "\"sets\": [");
    for (i = 0; i < m->num_sets; i++) {
        if (i) tr__sb_printf(sb, ", ");
        tr__sb_json_string(sb, m->sets[i]);
    }
    tr__sb_printf(sb, "]}");
    return tr__sb_status(sb);
}

/* ---- dataset reader --------------------------------------------------------------------- */
TRDEF void tr_dataset_close(tr_dataset *ds) {
    int i;
    tr_ctx *ctx;
    if (!ds) return;
    ctx = ds->ctx;
    for (i = 0; i < TR_DATASET_MAX_SETS; i++) {
        tr_dataset_set *s = &ds->sets[i];
        tr_npy_close(ctx, &s->inputs);
        tr_npy_close(ctx, &s->labels);
        tr__free(ctx, (void *)s->puzzle_indices);
        tr__free(ctx, (void *)s->group_indices);
        tr__free(ctx, (void *)s->puzzle_identifiers);
    }
    tr_identifiers_free(ctx, ds->num_identifiers, ds->identifiers);
    tr__free(ctx, ds);
}

/* Loads an index array (1-D, int32 or int64) into an int64 copy. */
TR__FN tr_status tr__load_index(tr_ctx *ctx, const char *path, int flags, const char *field, int64_t **out, int64_t *n) {
    tr_npy a;
    tr_status st;
    size_t i;
    int64_t *v;
    *out = NULL;
    st = tr_npy_load(ctx, path, !(flags & TR_DATASET_NO_MMAP), &a);
    if (st != TR_OK) return st;
    if (a.ndim != 1) {
        tr_npy_close(ctx, &a);
        return tr__err(ctx, TR_ERR_FORMAT, "'%s': %s must be 1-D, the file has %d dimensions", path, field, a.ndim);
    }
    if (a.dtype == TR_NPY_U8) {
        tr_npy_close(ctx, &a);
        return tr__err(ctx, TR_ERR_FORMAT, "'%s': %s must be int32 or int64, the file has uint8", path, field);
    }
    v = (int64_t *)tr__alloc(ctx, (a.count ? a.count : 1) * sizeof *v);
    if (!v) {
        tr_npy_close(ctx, &a);
        return TR_ERR_OUT_OF_MEMORY;
    }
    if (a.dtype == TR_NPY_I32) {
        const unsigned char *p = (const unsigned char *)a.data;
        for (i = 0; i < a.count; i++) {
            int32_t x;
            memcpy(&x, p + 4 * i, 4);
            v[i] = x;
        }
    } else
        memcpy(v, a.data, a.count * 8);
    *n = (int64_t)a.count;
    *out = v;
    tr_npy_close(ctx, &a);
    return TR_OK;
}

/* Every token of a [N, L] array in [0, vocab), or equal to `extra` when has_extra. */
TR__FN tr_status tr__check_tokens(tr_ctx *ctx, const char *path, const char *field, const tr_npy *a, int vocab, int has_extra, int extra) {
    size_t i;
    if (a->dtype == TR_NPY_U8) {
        unsigned char ok[256];
        const unsigned char *p = (const unsigned char *)a->data;
        unsigned char bad = 0;
        for (i = 0; i < 256; i++) ok[i] = (unsigned char)((int)i < vocab || (has_extra && (int)i == extra));
        for (i = 0; i < a->count; i++) bad |= (unsigned char)!ok[p[i]];
        if (!bad) return TR_OK;
    }
    for (i = 0; i < a->count; i++) {
        int64_t t = tr_npy_get(a, i);
        if ((t < 0 || t >= vocab) && !(has_extra && t == extra))
            return tr__err(ctx, TR_ERR_FORMAT, "'%s': %s: token %lld at example %zu position %zu is outside the vocabulary [0, %d)%s", path, field, (long long)t,
                           i / (size_t)a->shape[1], i % (size_t)a->shape[1], vocab, has_extra ? " and is not ignore_label_id" : "");
    }
    return TR_OK;
}

TRDEF void tr_identifiers_free(tr_ctx *ctx, int64_t count, char **names) {
    int64_t i;
    if (!names) return;
    for (i = 0; i < count; i++) tr__free(ctx, names[i]);
    tr__free(ctx, names);
}

TRDEF tr_status tr_identifiers_read(tr_ctx *ctx, const char *path, int64_t *count, char ***names) {
    char *text = NULL;
    size_t len, i;
    tr_json *root = NULL;
    tr_status st;
    char **v = NULL;
    if (!ctx || !path || !count || !names) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_identifiers_read: NULL argument");
    *count = 0;
    *names = NULL;
    st = tr_read_file(ctx, path, &text, &len);
    if (st == TR_OK) st = tr_json_parse(ctx, text, len, path, &root);
    tr__free(ctx, text);
    if (st == TR_OK && root->type != TR_JSON_ARRAY) st = tr__err(ctx, TR_ERR_FORMAT, "%s: expected a JSON list of names", path);
    if (st == TR_OK && !(v = (char **)tr__calloc(ctx, root->count ? root->count : 1, sizeof(char *)))) st = TR_ERR_OUT_OF_MEMORY;
    for (i = 0; st == TR_OK && i < root->count; i++) {
        const tr_json *s = &root->items[i];
        if (s->type != TR_JSON_STRING) st = tr__err(ctx, TR_ERR_FORMAT, "%s:%lld: entry %zu is not a string", path, (long long)s->line, i);
        else if (!(v[i] = (char *)tr__alloc(ctx, s->len + 1))) st = TR_ERR_OUT_OF_MEMORY;
        else memcpy(v[i], s->string, s->len + 1);
    }
    if (st == TR_OK) {
        *count = (int64_t)root->count;
        *names = v;
    } else if (v)
        tr_identifiers_free(ctx, (int64_t)root->count, v);
    tr_json_free(ctx, root);
    return st;
}

/* identifiers.json is optional; when present it must name every puzzle identifier. */
TR__FN tr_status tr__load_identifiers(tr_ctx *ctx, const char *dir, tr_dataset *ds) {
    char *path = tr__path3(ctx, dir, "identifiers.json", NULL);
    tr_status st = TR_OK;
    FILE *f;
    if (!path) return TR_ERR_OUT_OF_MEMORY;
    f = fopen(path, "rb");
    if (f) {
        fclose(f);
        st = tr_identifiers_read(ctx, path, &ds->num_identifiers, &ds->identifiers);
        if (st == TR_OK && ds->num_identifiers != ds->meta.num_puzzle_identifiers)
            st = tr__err(ctx, TR_ERR_FORMAT, "'%s': has %lld names, dataset.json num_puzzle_identifiers is %lld", path, (long long)ds->num_identifiers, (long long)ds->meta.num_puzzle_identifiers);
    }
    tr__free(ctx, path);
    return st;
}

TR__FN tr_status tr__open_set(tr_ctx *ctx, tr_dataset *ds, const char *splitdir, int si, int flags) {
    tr_dataset_set *s = &ds->sets[si];
    const tr_dataset_meta *m = &ds->meta;
    static const char *fields[5] = {"inputs", "labels", "puzzle_identifiers", "puzzle_indices", "group_indices"};
    char *paths[5] = {NULL, NULL, NULL, NULL, NULL};
    char fname[128];
    tr_status st = TR_OK;
    int64_t n, k, *pid = NULL;
    int i;
    strcpy(s->name, m->sets[si]);
    for (i = 0; i < 5; i++) {
        snprintf(fname, sizeof fname, "%s__%s.npy", m->sets[si], fields[i]);
        paths[i] = tr__path3(ctx, splitdir, fname, NULL);
        if (!paths[i]) {
            st = TR_ERR_OUT_OF_MEMORY;
            goto done;
        }
    }
    /* inputs and labels: [N, seq_len] */
    if ((st = tr_npy_load(ctx, paths[0], !(flags & TR_DATASET_NO_MMAP), &s->inputs)) != TR_OK) goto done;
    if ((st = tr_npy_load(ctx, paths[1], !(flags & TR_DATASET_NO_MMAP), &s->labels)) != TR_OK) goto done;
    for (i = 0; i < 2; i++) {
        const tr_npy *a = i ? &s->labels : &s->inputs;
        if (a->ndim != 2) {
            st = tr__err(ctx, TR_ERR_FORMAT, "'%s': %s must be 2-D [examples, seq_len], the file has %d dimensions", paths[i], fields[i], a->ndim);
            goto done;
        }
        if (a->shape[1] != m->seq_len) {
            st = tr__err(ctx, TR_ERR_FORMAT, "'%s': %s has sequence length %lld, dataset.json seq_len is %d", paths[i], fields[i], (long long)a->shape[1], m->seq_len);
            goto done;
        }
    }
    if (s->labels.shape[0] != s->inputs.shape[0]) {
        st = tr__err(ctx, TR_ERR_FORMAT, "'%s': labels has %lld examples, inputs has %lld", paths[1], (long long)s->labels.shape[0], (long long)s->inputs.shape[0]);
        goto done;
    }
    s->num_examples = s->inputs.shape[0];
    /* puzzle_indices: [P+1], starts at 0, non-decreasing, ends at N */
    if ((st = tr__load_index(ctx, paths[3], flags, "puzzle_indices", &pid, &n)) != TR_OK) goto done;
    s->puzzle_indices = pid;
    if (n < 1 || pid[0] != 0) {
        st = tr__err(ctx, TR_ERR_FORMAT, "'%s': puzzle_indices must start with 0", paths[3]);
        goto done;
    }
    s->num_puzzles = n - 1;
    for (k = 1; k < n; k++) {
        if (pid[k] < pid[k - 1]) {
            st = tr__err(ctx, TR_ERR_FORMAT, "'%s': puzzle_indices is not monotone: entry %lld (%lld) < entry %lld (%lld)", paths[3], (long long)k, (long long)pid[k], (long long)(k - 1), (long long)pid[k - 1]);
            goto done;
        }
        if (pid[k] - pid[k - 1] > s->max_puzzle_examples) s->max_puzzle_examples = pid[k] - pid[k - 1];
    }
    if (pid[n - 1] != s->num_examples) {
        st = tr__err(ctx, TR_ERR_FORMAT, "'%s': puzzle_indices ends at %lld, inputs has %lld examples", paths[3], (long long)pid[n - 1], (long long)s->num_examples);
        goto done;
    }
    /* group_indices: [G+1], starts at 0, strictly increasing, ends at P */
    {
        int64_t *g = NULL;
        if ((st = tr__load_index(ctx, paths[4], flags, "group_indices", &g, &n)) != TR_OK) goto done;
        s->group_indices = g;
        if (n < 1 || g[0] != 0) {
            st = tr__err(ctx, TR_ERR_FORMAT, "'%s': group_indices must start with 0", paths[4]);
            goto done;
        }
        for (k = 1; k < n; k++)
            if (g[k] <= g[k - 1]) {
                st = tr__err(ctx, TR_ERR_FORMAT, "'%s': group_indices is not strictly increasing: entry %lld (%lld) <= entry %lld (%lld)", paths[4], (long long)k, (long long)g[k], (long long)(k - 1), (long long)g[k - 1]);
                goto done;
            }
        if (g[n - 1] != s->num_puzzles) {
            st = tr__err(ctx, TR_ERR_FORMAT, "'%s': group_indices ends at %lld, puzzle_indices has %lld puzzles", paths[4], (long long)g[n - 1], (long long)s->num_puzzles);
            goto done;
        }
        s->num_groups = n - 1;
    }
    /* puzzle_identifiers: [P], each in [0, num_puzzle_identifiers) */
    {
        int64_t *ids = NULL;
        int32_t *ids32;
        if ((st = tr__load_index(ctx, paths[2], flags, "puzzle_identifiers", &ids, &n)) != TR_OK) goto done;
        if (n != s->num_puzzles) {
            tr__free(ctx, ids);
            st = tr__err(ctx, TR_ERR_FORMAT, "'%s': puzzle_identifiers has %lld entries, puzzle_indices has %lld puzzles", paths[2], (long long)n, (long long)s->num_puzzles);
            goto done;
        }
        for (k = 0; k < n; k++)
            if (ids[k] < 0 || ids[k] >= m->num_puzzle_identifiers) {
                st = tr__err(ctx, TR_ERR_FORMAT, "'%s': puzzle_identifiers[%lld] is %lld, outside [0, num_puzzle_identifiers %lld)", paths[2], (long long)k, (long long)ids[k], (long long)m->num_puzzle_identifiers);
                tr__free(ctx, ids);
                goto done;
            }
        ids32 = (int32_t *)tr__alloc(ctx, (size_t)(n ? n : 1) * sizeof *ids32);
        if (!ids32) {
            tr__free(ctx, ids);
            st = TR_ERR_OUT_OF_MEMORY;
            goto done;
        }
        for (k = 0; k < n; k++) ids32[k] = (int32_t)ids[k];
        tr__free(ctx, ids);
        s->puzzle_identifiers = ids32;
    }
    if (!(flags & TR_DATASET_SKIP_TOKEN_CHECK)) {
        if ((st = tr__check_tokens(ctx, paths[0], "inputs", &s->inputs, m->vocab_size, 0, 0)) != TR_OK) goto done;
        if ((st = tr__check_tokens(ctx, paths[1], "labels", &s->labels, m->vocab_size, m->has_ignore_label_id, m->ignore_label_id)) != TR_OK) goto done;
    }
done:
    for (i = 0; i < 5; i++) tr__free(ctx, paths[i]);
    return st;
}

TRDEF tr_status tr_dataset_open(tr_ctx *ctx, const char *dir, const char *split, int flags, tr_dataset **out) {
    tr_dataset *ds;
    char *splitdir = NULL, *metapath = NULL;
    tr_status st;
    int i;
    int64_t groups = 0, puzzles = 0;
    if (!ctx || !dir || !split || !out) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_dataset_open: NULL argument");
    *out = NULL;
    ds = (tr_dataset *)tr__calloc(ctx, 1, sizeof *ds);
    if (!ds) return TR_ERR_OUT_OF_MEMORY;
    ds->ctx = ctx;
    splitdir = tr__path3(ctx, dir, split, NULL);
    metapath = splitdir ? tr__path3(ctx, splitdir, "dataset.json", NULL) : NULL;
    if (!metapath) {
        st = TR_ERR_OUT_OF_MEMORY;
        goto fail;
    }
    if ((st = tr_dataset_read_meta(ctx, metapath, &ds->meta)) != TR_OK) goto fail;
    ds->num_sets = ds->meta.num_sets;
    for (i = 0; i < ds->num_sets; i++) {
        if ((st = tr__open_set(ctx, ds, splitdir, i, flags)) != TR_OK) goto fail;
        groups += ds->sets[i].num_groups;
        puzzles += ds->sets[i].num_puzzles;
        ds->num_examples += ds->sets[i].num_examples;
    }
    if (groups != ds->meta.total_groups) {
        st = tr__err(ctx, TR_ERR_FORMAT, "'%s': field 'total_groups' is %lld, the group_indices files hold %lld groups", metapath, (long long)ds->meta.total_groups, (long long)groups);
        goto fail;
    }
    /* the reference Sudoku and Maze builders write the group count here */
    if (ds->meta.total_puzzles >= 0 && puzzles != ds->meta.total_puzzles && groups != ds->meta.total_puzzles) {
        st = tr__err(ctx, TR_ERR_FORMAT, "'%s': field 'total_puzzles' is %lld, the puzzle_indices files hold %lld puzzles in %lld groups", metapath, (long long)ds->meta.total_puzzles, (long long)puzzles, (long long)groups);
        goto fail;
    }
    if (puzzles > 0) {
        double mean = (double)ds->num_examples / (double)puzzles, d = fabs(mean - ds->meta.mean_puzzle_examples);
        if (d > 1e-6 * (mean > 1 ? mean : 1)) {
            st = tr__err(ctx, TR_ERR_FORMAT, "'%s': field 'mean_puzzle_examples' is %g, the files hold %g examples per puzzle", metapath, ds->meta.mean_puzzle_examples, mean);
            goto fail;
        }
    }
    if ((st = tr__load_identifiers(ctx, dir, ds)) != TR_OK) goto fail;
    tr__free(ctx, metapath);
    tr__free(ctx, splitdir);
    *out = ds;
    return TR_OK;
fail:
    tr__free(ctx, metapath);
    tr__free(ctx, splitdir);
    tr_dataset_close(ds);
    return st;
}

TRDEF void tr_dataset_example(const tr_dataset *ds, int set, int64_t ex, int32_t *inputs, int32_t *labels) {
    const tr_dataset_set *s = &ds->sets[set];
    size_t L = (size_t)ds->meta.seq_len, base = (size_t)ex * L, j;
    if (inputs) {
        if (s->inputs.dtype == TR_NPY_U8) {
            const uint8_t *p = (const uint8_t *)s->inputs.data + base;
            for (j = 0; j < L; j++) inputs[j] = p[j];
        } else
            for (j = 0; j < L; j++) inputs[j] = (int32_t)tr_npy_get(&s->inputs, base + j);
    }
    if (labels) {
        int ign = ds->meta.has_ignore_label_id, iv = ds->meta.ignore_label_id;
        if (s->labels.dtype == TR_NPY_U8) {
            const uint8_t *p = (const uint8_t *)s->labels.data + base;
            if (ign)
                for (j = 0; j < L; j++) labels[j] = (int)p[j] == iv ? TR_IGNORE_LABEL : (int32_t)p[j];
            else
                for (j = 0; j < L; j++) labels[j] = p[j];
        } else
            for (j = 0; j < L; j++) {
                int32_t v = (int32_t)tr_npy_get(&s->labels, base + j);
                labels[j] = (ign && v == iv) ? TR_IGNORE_LABEL : v;
            }
    }
}

/* ---- dataset writer --------------------------------------------------------------------- */
TRDEF tr_status tr_split_init(tr_ctx *ctx, tr_split *s, int seq_len, int64_t reserve) {
    memset(s, 0, sizeof *s);
    if (seq_len <= 0) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_split_init: seq_len %d", seq_len);
    s->seq_len = seq_len;
    if (reserve < 16) reserve = 16;
    s->inputs = (uint8_t *)tr__alloc(ctx, (size_t)reserve * (size_t)seq_len);
    s->labels = (uint8_t *)tr__alloc(ctx, (size_t)reserve * (size_t)seq_len);
    s->puzzle_identifiers = (int32_t *)tr__alloc(ctx, (size_t)reserve * 4);
    s->puzzle_indices = (int32_t *)tr__alloc(ctx, ((size_t)reserve + 1) * 4);
    s->group_indices = (int32_t *)tr__alloc(ctx, ((size_t)reserve + 1) * 4);
    if (!s->inputs || !s->labels || !s->puzzle_identifiers || !s->puzzle_indices || !s->group_indices) {
        tr_split_free(ctx, s);
        return TR_ERR_OUT_OF_MEMORY;
    }
    s->cap_examples_ = s->cap_puzzles_ = s->cap_groups_ = reserve;
    s->puzzle_indices[0] = 0;
    s->group_indices[0] = 0;
    return TR_OK;
}

TRDEF void tr_split_free(tr_ctx *ctx, tr_split *s) {
    if (!s) return;
    tr__free(ctx, s->inputs);
    tr__free(ctx, s->labels);
    tr__free(ctx, s->puzzle_identifiers);
    tr__free(ctx, s->puzzle_indices);
    tr__free(ctx, s->group_indices);
    memset(s, 0, sizeof *s);
}

/* Grows *p (n used of *cap elements of `elem` bytes, plus `extra` trailing ones) to hold one more. */
TR__FN tr_status tr__grow(tr_ctx *ctx, void **p, int64_t *cap, int64_t n, size_t elem, int64_t extra) {
    int64_t ncap;
    void *np;
    size_t bytes;
    if (n < *cap) return TR_OK;
    ncap = *cap * 2;
    if (!tr__size_mul((size_t)(ncap + extra), elem, &bytes)) return tr__err(ctx, TR_ERR_OVERFLOW, "split arrays overflow");
    np = tr__alloc(ctx, bytes);
    if (!np) return TR_ERR_OUT_OF_MEMORY;
    memcpy(np, *p, (size_t)(n + extra) * elem);
    tr__free(ctx, *p);
    *p = np;
    *cap = ncap;
    return TR_OK;
}

TRDEF tr_status tr_split_add_example(tr_ctx *ctx, tr_split *s, const uint8_t *input, const uint8_t *label) {
    tr_status st;
    int64_t cap = s->cap_examples_;
    if (s->num_examples >= INT32_MAX) return tr__err(ctx, TR_ERR_OVERFLOW, "a split holds at most %d examples (int32 offsets)", INT32_MAX);
    if (s->num_examples >= cap) {
        if ((st = tr__grow(ctx, (void **)&s->inputs, &cap, s->num_examples, (size_t)s->seq_len, 0)) != TR_OK) return st;
        cap = s->cap_examples_;
        if ((st = tr__grow(ctx, (void **)&s->labels, &cap, s->num_examples, (size_t)s->seq_len, 0)) != TR_OK) return st;
        s->cap_examples_ = cap;
    }
    memcpy(s->inputs + (size_t)s->num_examples * (size_t)s->seq_len, input, (size_t)s->seq_len);
    memcpy(s->labels + (size_t)s->num_examples * (size_t)s->seq_len, label, (size_t)s->seq_len);
    s->num_examples++;
    return TR_OK;
}

TRDEF tr_status tr_split_end_puzzle(tr_ctx *ctx, tr_split *s, int32_t identifier) {
    tr_status st;
    int64_t cap = s->cap_puzzles_;
    if (s->num_puzzles >= cap) {
        if ((st = tr__grow(ctx, (void **)&s->puzzle_identifiers, &cap, s->num_puzzles, 4, 0)) != TR_OK) return st;
        cap = s->cap_puzzles_;
        if ((st = tr__grow(ctx, (void **)&s->puzzle_indices, &cap, s->num_puzzles, 4, 1)) != TR_OK) return st;
        s->cap_puzzles_ = cap;
    }
    s->puzzle_identifiers[s->num_puzzles] = identifier;
    s->puzzle_indices[++s->num_puzzles] = (int32_t)s->num_examples;
    return TR_OK;
}

TRDEF tr_status tr_split_end_group(tr_ctx *ctx, tr_split *s) {
    tr_status st;
    if (s->num_groups >= s->cap_groups_)
        if ((st = tr__grow(ctx, (void **)&s->group_indices, &s->cap_groups_, s->num_groups, 4, 1)) != TR_OK) return st;
    s->group_indices[++s->num_groups] = (int32_t)s->num_puzzles;
    return TR_OK;
}

TR__FN tr_status tr__write_meta(tr_ctx *ctx, const char *splitdir, const tr_dataset_meta *m) {
    tr__sb sb;
    char *path;
    tr_status st = tr__meta_to_json(ctx, m, &sb);
    if (st == TR_OK) {
        path = tr__path3(ctx, splitdir, "dataset.json", NULL);
        if (!path) st = TR_ERR_OUT_OF_MEMORY;
        else {
            st = tr__write_whole(ctx, path, sb.data, sb.len);
            tr__free(ctx, path);
        }
    }
    tr__sb_free(&sb);
    return st;
}

TRDEF tr_status tr_split_write(tr_ctx *ctx, const char *dir, const char *split, const tr_split *s, const tr_dataset_meta *meta_in) {
    tr_dataset_meta m;
    char *splitdir, *path = NULL;
    tr_status st;
    int i;
    static const char *names[5] = {"all__inputs.npy", "all__labels.npy", "all__puzzle_identifiers.npy", "all__puzzle_indices.npy", "all__group_indices.npy"};
    if (!ctx || !dir || !split || !s || !meta_in) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_split_write: NULL argument");
    m = *meta_in;
    m.seq_len = s->seq_len;
    m.total_groups = s->num_groups;
    if (m.total_puzzles < 0) m.total_puzzles = s->num_puzzles;
    m.mean_puzzle_examples = s->num_puzzles ? (double)s->num_examples / (double)s->num_puzzles : 0.0;
    m.num_sets = 1;
    strcpy(m.sets[0], "all");
    splitdir = tr__path3(ctx, dir, split, NULL);
    if (!splitdir) return TR_ERR_OUT_OF_MEMORY;
    st = tr__mkdir_p(ctx, splitdir);
    for (i = 0; i < 5 && st == TR_OK; i++) {
        int64_t shape[2];
        path = tr__path3(ctx, splitdir, names[i], NULL);
        if (!path) {
            st = TR_ERR_OUT_OF_MEMORY;
            break;
        }
        switch (i) {
        case 0:
        case 1:
            shape[0] = s->num_examples;
            shape[1] = s->seq_len;
            st = tr_npy_save(ctx, path, TR_NPY_U8, 2, shape, i ? s->labels : s->inputs);
            break;
        case 2:
            shape[0] = s->num_puzzles;
            st = tr_npy_save(ctx, path, TR_NPY_I32, 1, shape, s->puzzle_identifiers);
            break;
        case 3:
            shape[0] = s->num_puzzles + 1;
            st = tr_npy_save(ctx, path, TR_NPY_I32, 1, shape, s->puzzle_indices);
            break;
        default:
            shape[0] = s->num_groups + 1;
            st = tr_npy_save(ctx, path, TR_NPY_I32, 1, shape, s->group_indices);
        }
        tr__free(ctx, path);
    }
    if (st == TR_OK) st = tr__write_meta(ctx, splitdir, &m);
    tr__free(ctx, splitdir);
    return st;
}

TRDEF tr_status tr_write_identifiers(tr_ctx *ctx, const char *dir, int64_t n, const char *const *names) {
    tr__sb sb;
    int64_t i;
    char *path;
    tr_status st;
    if (!ctx || !dir || (n > 0 && !names)) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_write_identifiers: NULL argument");
    tr__sb_init(&sb, ctx);
    tr__sb_printf(&sb, "[");
    for (i = 0; i < n; i++) {
        if (i) tr__sb_printf(&sb, ", ");
        tr__sb_json_string(&sb, names[i]);
    }
    tr__sb_printf(&sb, "]");
    st = tr__sb_status(&sb);
    if (st == TR_OK) st = tr__mkdir_p(ctx, dir);
    if (st == TR_OK) {
        path = tr__path3(ctx, dir, "identifiers.json", NULL);
        if (!path) st = TR_ERR_OUT_OF_MEMORY;
        else {
            st = tr__write_whole(ctx, path, sb.data, sb.len);
            tr__free(ctx, path);
        }
    }
    tr__sb_free(&sb);
    return st;
}

/* ---- text sources: mapped files, lines, CSV --------------------------------------------- */
typedef struct tr__text {
    const char *data;
    size_t len;
    void *map_;
    char *buf_;
} tr__text;

TR__FN tr_status tr__text_open(tr_ctx *ctx, const char *path, tr__text *t) {
    tr_status st;
    memset(t, 0, sizeof *t);
#if TR__POSIX
    {
        int fd = open(path, O_RDONLY);
        struct stat sb;
        if (fd < 0) return tr__err(ctx, TR_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
        if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 0) {
            void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
            if (m != MAP_FAILED) {
                close(fd);
                t->map_ = m;
                t->data = (const char *)m;
                t->len = (size_t)sb.st_size;
                return TR_OK;
            }
        }
        close(fd);
    }
#endif
    st = tr_read_file(ctx, path, &t->buf_, &t->len);
    if (st != TR_OK) return st;
    t->data = t->buf_;
    return TR_OK;
}
TR__FN void tr__text_close(tr_ctx *ctx, tr__text *t) {
#if TR__POSIX
    if (t->map_) munmap(t->map_, t->len);
#endif
    if (t->buf_) tr__free(ctx, t->buf_);
    memset(t, 0, sizeof *t);
}
/* The next line (without \r\n) starting at *pos; 0 at the end. */
TR__FN int tr__text_line(const tr__text *t, size_t *pos, const char **line, size_t *n) {
    const char *s, *e;
    if (*pos >= t->len) return 0;
    s = t->data + *pos;
    e = (const char *)memchr(s, '\n', t->len - *pos);
    if (!e) e = t->data + t->len;
    *line = s;
    *n = (size_t)(e - s);
    *pos = (size_t)(e - t->data) + 1;
    if (*n && s[*n - 1] == '\r') (*n)--;
    return 1;
}
TR__FN int64_t tr__text_count_lines(const tr__text *t) {
    int64_t n = 1;
    const char *p = t->data, *end = t->data + t->len;
    while (p < end && (p = (const char *)memchr(p, '\n', (size_t)(end - p))) != NULL) {
        n++;
        p++;
    }
    return n;
}

/* Splits a CSV line into up to max fields (quotes allowed around a field, "" inside is kept as
   two quotes). Returns the field count, or -1 on an unterminated quote. */
typedef struct tr__field {
    const char *s;
    size_t n;
} tr__field;
TR__FN int tr__csv_split(const char *line, size_t n, tr__field *f, int max) {
    size_t i = 0;
    int k = 0;
    for (;;) {
        const char *s;
        size_t len;
        if (i < n && line[i] == '"') {
            size_t j = i + 1;
            while (j < n && !(line[j] == '"' && (j + 1 >= n || line[j + 1] != '"'))) j += (line[j] == '"') ? 2 : 1;
            if (j >= n) return -1;
            s = line + i + 1;
            len = j - i - 1;
            i = j + 1;
        } else {
            size_t j = i;
            while (j < n && line[j] != ',') j++;
            s = line + i;
            len = j - i;
            i = j;
        }
        if (k < max) {
            f[k].s = s;
            f[k].n = len;
        }
        k++;
        if (i >= n || line[i] != ',') break;
        i++;
    }
    return k;
}

/* Detects the reference CSV header; sets the column indexes (-1 when absent). */
TR__FN int tr__csv_header(const char *line, size_t n, int *q, int *a, int *r, int *ncols) {
    tr__field f[16];
    int k = tr__csv_split(line, n, f, 16), i;
    *q = *a = *r = -1;
    if (k < 1) return 0;
    for (i = 0; i < k && i < 16; i++) {
        if (f[i].n == 8 && !memcmp(f[i].s, "question", 8)) *q = i;
        if (f[i].n == 6 && !memcmp(f[i].s, "answer", 6)) *a = i;
        if (f[i].n == 6 && !memcmp(f[i].s, "rating", 6)) *r = i;
    }
    *ncols = k;
    return *q >= 0;
}

/* ---- Sudoku ----------------------------------------------------------------------------- */
typedef struct tr__sud {
    uint16_t row[9], col[9], box[9];
    uint8_t g[81];
    uint8_t empty[81];
    int nempty;
    long nodes, node_limit;
} tr__sud;

static const uint8_t tr__sud_box[81] = {
    0, 0, 0, 1, 1, 1, 2, 2, 2, 0, 0, 0, 1, 1, 1, 2, 2, 2, 0, 0, 0, 1, 1, 1, 2, 2, 2,
    3, 3, 3, 4, 4, 4, 5, 5, 5, 3, 3, 3, 4, 4, 4, 5, 5, 5, 3, 3, 3, 4, 4, 4, 5, 5, 5,
    6, 6, 6, 7, 7, 7, 8, 8, 8, 6, 6, 6, 7, 7, 7, 8, 8, 8, 6, 6, 6, 7, 7, 7, 8, 8, 8};

TR__FN int tr__popcount9(unsigned m) {
    int n = 0;
    while (m) {
        m &= m - 1;
        n++;
    }
    return n;
}

/* Loads the givens; 0 when two of them clash. */
TR__FN int tr__sud_init(tr__sud *s, const uint8_t *grid) {
    int i;
    memset(s, 0, sizeof *s);
    for (i = 0; i < 81; i++) {
        int v = grid[i];
        if (v == 0) {
            s->empty[s->nempty++] = (uint8_t)i;
        } else {
            uint16_t bit = (uint16_t)(1u << (v - 1));
            int r = i / 9, c = i % 9, b = tr__sud_box[i];
            if ((s->row[r] | s->col[c] | s->box[b]) & bit) return 0;
            s->row[r] |= bit;
            s->col[c] |= bit;
            s->box[b] |= bit;
            s->g[i] = (uint8_t)v;
        }
    }
    return 1;
}

/* Depth-first search with the most-constrained cell first; counts solutions up to limit. */
TR__FN void tr__sud_rec(tr__sud *s, int depth, int limit, uint8_t *sol, int *count, tr__rng *rng) {
    int i, best = -1, bestn = 10, cell, r, c, b, nd = 0;
    unsigned mask = 0;
    uint8_t digits[9];
    if (depth == s->nempty) {
        if (*count == 0 && sol) memcpy(sol, s->g, 81);
        (*count)++;
        return;
    }
    s->nodes++;
    for (i = depth; i < s->nempty; i++) {
        int k = s->empty[i];
        unsigned m = ~(unsigned)(s->row[k / 9] | s->col[k % 9] | s->box[tr__sud_box[k]]) & 0x1ffu;
        int n = tr__popcount9(m);
        if (n < bestn) {
            bestn = n;
            best = i;
            mask = m;
            if (n <= 1) break;
        }
    }
    if (bestn == 0) return;
    cell = s->empty[best];
    s->empty[best] = s->empty[depth];
    s->empty[depth] = (uint8_t)cell;
    r = cell / 9;
    c = cell % 9;
    b = tr__sud_box[cell];
    for (i = 0; i < 9; i++)
        if (mask & (1u << i)) digits[nd++] = (uint8_t)i;
    if (rng && nd > 1) tr__shuffle_u8(rng, digits, nd);
    for (i = 0; i < nd && *count < limit; i++) {
        uint16_t bit = (uint16_t)(1u << digits[i]);
        s->g[cell] = (uint8_t)(digits[i] + 1);
        s->row[r] |= bit;
        s->col[c] |= bit;
        s->box[b] |= bit;
        tr__sud_rec(s, depth + 1, limit, sol, count, rng);
        s->row[r] &= (uint16_t)~bit;
        s->col[c] &= (uint16_t)~bit;
        s->box[b] &= (uint16_t)~bit;
    }
    s->g[cell] = 0;
}

TRDEF int tr_sudoku_solve(const uint8_t grid[81], uint8_t solution[81], int limit) {
    tr__sud s;
    int count = 0, i;
    for (i = 0; i < 81; i++)
        if (grid[i] > 9) return -1;
    if (!tr__sud_init(&s, grid)) return -1;
    if (limit < 1) limit = 1;
    tr__sud_rec(&s, 0, limit, solution, &count, NULL);
    return count;
}

TRDEF int tr_sudoku_check(const uint8_t q[81], const uint8_t a[81]) {
    uint16_t row[9] = {0}, col[9] = {0}, box[9] = {0};
    int i;
    for (i = 0; i < 81; i++) {
        int v = a[i];
        uint16_t bit;
        if (v < 1 || v > 9) return 0;
        if (q && q[i] && q[i] != v) return 0;
        bit = (uint16_t)(1u << (v - 1));
        if ((row[i / 9] | col[i % 9] | box[tr__sud_box[i]]) & bit) return 0;
        row[i / 9] |= bit;
        col[i % 9] |= bit;
        box[tr__sud_box[i]] |= bit;
    }
    return 1;
}

TR__FN tr__rng tr__rng_kind(uint64_t seed, uint64_t kind, uint64_t index) { return tr__rng_make(seed ^ tr__mix64(kind), index); }

/* One unique-solution puzzle with exactly `clues` givens; 0 when this attempt got stuck. */
TR__FN int tr__sudoku_gen_once(tr__rng *rng, int clues, uint8_t *puzzle, uint8_t *solution) {
    uint8_t empty[81], order[81];
    tr__sud s;
    int count = 0, i, have = 81, pass;
    memset(empty, 0, sizeof empty);
    tr__sud_init(&s, empty);
    tr__sud_rec(&s, 0, 1, solution, &count, rng);
    memcpy(puzzle, solution, 81);
    for (i = 0; i < 81; i++) order[i] = (uint8_t)i;
    /* greedy removal down to a minimal puzzle, then a random walk among minimal puzzles: put two
       givens back and remove greedily again, which reaches fewer givens than one greedy pass */
    for (pass = 0; pass < 400 && have > clues; pass++) {
        if (pass > 0) {
            int added = 0, tries = 0;
            while (added < 2 && tries++ < 200) {
                int c = (int)tr__rng_below(rng, 81);
                if (!puzzle[c]) {
                    puzzle[c] = solution[c];
                    have++;
                    added++;
                }
            }
        }
        tr__shuffle_u8(rng, order, 81);
        for (i = 0; i < 81 && have > clues; i++) {
            int c = order[i];
            uint8_t keep = puzzle[c];
            if (!keep) continue;
            puzzle[c] = 0;
            if (tr_sudoku_solve(puzzle, NULL, 2) == 1) have--;
            else puzzle[c] = keep;
        }
    }
    return have == clues;
}

TRDEF tr_status tr_sudoku_generate(tr_ctx *ctx, uint64_t seed, uint64_t index, int clues, uint8_t puzzle[81], uint8_t solution[81]) {
    tr__rng rng;
    int attempt;
    if (clues < 17 || clues > 81) return tr__err(ctx, TR_ERR_INVALID_ARG, "sudoku: clues %d is outside 17..81 (no 16-clue puzzle has a unique solution)", clues);
    rng = tr__rng_kind(seed, TR__STREAM_SUDOKU_GEN, index);
    for (attempt = 0; attempt < 1000; attempt++)
        if (tr__sudoku_gen_once(&rng, clues, puzzle, solution)) return TR_OK;
    return tr__err(ctx, TR_ERR_GENERIC, "sudoku: no %d-clue puzzle found after %d attempts (try more clues)", clues, attempt);
}

TR__FN void tr__sudoku_augment_rng(tr__rng *rng, const uint8_t *q, const uint8_t *a, uint8_t *qo, uint8_t *ao) {
    uint8_t map[10], bands[3], stacks[3], inner[3], rowp[9], colp[9], qt[81], at[81];
    const uint8_t *qs = q, *as = a;
    int i, j, k, transpose;
    map[0] = 0;
    for (i = 1; i < 10; i++) map[i] = (uint8_t)i;
    tr__shuffle_u8(rng, map + 1, 9);
    transpose = tr__rng_uniform_d(rng) < 0.5;
    for (k = 0; k < 2; k++) {
        uint8_t *perm = k ? colp : rowp, *outer = k ? stacks : bands;
        for (i = 0; i < 3; i++) outer[i] = (uint8_t)i;
        tr__shuffle_u8(rng, outer, 3);
        for (i = 0; i < 3; i++) {
            for (j = 0; j < 3; j++) inner[j] = (uint8_t)j;
            tr__shuffle_u8(rng, inner, 3);
            for (j = 0; j < 3; j++) perm[i * 3 + j] = (uint8_t)(outer[i] * 3 + inner[j]);
        }
    }
    if (transpose) {
        for (i = 0; i < 9; i++)
            for (j = 0; j < 9; j++) {
                qt[i * 9 + j] = q[j * 9 + i];
                at[i * 9 + j] = a[j * 9 + i];
            }
        qs = qt;
        as = at;
    }
    for (i = 0; i < 9; i++)
        for (j = 0; j < 9; j++) {
            int src = rowp[i] * 9 + colp[j];
            qo[i * 9 + j] = map[qs[src]];
            ao[i * 9 + j] = map[as[src]];
        }
}

TRDEF void tr_sudoku_augment(uint64_t seed, uint64_t index, const uint8_t q[81], const uint8_t a[81], uint8_t q_out[81], uint8_t a_out[81]) {
    tr__rng rng = tr__rng_kind(seed, TR__STREAM_SUDOKU_AUG, index);
    tr__sudoku_augment_rng(&rng, q, a, q_out, a_out);
}

TRDEF void tr_sudoku_set_free(tr_ctx *ctx, tr_sudoku_set *s) {
    if (!s) return;
    tr__free(ctx, s->puzzles);
    tr__free(ctx, s->solutions);
    tr__free(ctx, s->ratings);
    tr__free(ctx, s->lines);
    memset(s, 0, sizeof *s);
}

TR__FN tr_status tr__sudoku_set_alloc(tr_ctx *ctx, tr_sudoku_set *s, int64_t n) {
    memset(s, 0, sizeof *s);
    if (n < 1) n = 1;
    s->puzzles = (uint8_t *)tr__alloc(ctx, (size_t)n * 81);
    s->solutions = (uint8_t *)tr__alloc(ctx, (size_t)n * 81);
    s->ratings = (int32_t *)tr__alloc(ctx, (size_t)n * 4);
    if (!s->puzzles || !s->solutions || !s->ratings) {
        tr_sudoku_set_free(ctx, s);
        return TR_ERR_OUT_OF_MEMORY;
    }
    return TR_OK;
}

TRDEF tr_read_options tr_read_options_default(void) {
    tr_read_options o;
    memset(&o, 0, sizeof o);
    o.min_rating = -1;
    return o;
}

/* A malformed record: reported through o->on_skip (returns TR_OK: go on), else the call's error. */
TR__FN tr_status tr__bad_record(tr_ctx *ctx, const tr_read_options *o, const char *what, int64_t line, const char *fmt, ...) {
    char reason[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    if (o->on_skip) {
        o->on_skip(o->user, line, reason);
        return TR_OK;
    }
    return tr__err(ctx, TR_ERR_FORMAT, "%s:%lld: %s", what, (long long)line, reason);
}

/* The lines of text[0..len) with the reference CSV's header detected on line 1; each line comes
   without \r\n, and with surrounding blanks trimmed when `trim` (not for mazes, where blanks are cells). */
typedef struct tr__lines {
    tr__text t;
    size_t pos;
    int64_t lineno;
    int trim, csv, cq, ca, cr, ncols;
} tr__lines;
TR__FN void tr__lines_init(tr__lines *l, const char *text, size_t len, int trim) {
    memset(l, 0, sizeof *l);
    l->trim = trim;
    l->t.data = text ? text : "";
    l->t.len = len;
    l->cq = l->ca = l->cr = -1;
}
/* The next non-header line; 0 at the end. */
TR__FN int tr__lines_next(tr__lines *l, const char **line, size_t *n) {
    for (;;) {
        const char *s;
        size_t k;
        if (!tr__text_line(&l->t, &l->pos, &s, &k)) return 0;
        l->lineno++;
        while (l->trim && k && (*s == ' ' || *s == '\t')) s++, k--;
        while (l->trim && k && (s[k - 1] == ' ' || s[k - 1] == '\t')) k--;
        if (l->lineno == 1 && tr__csv_header(s, k, &l->cq, &l->ca, &l->cr, &l->ncols)) {
            l->csv = 1;
            continue;
        }
        *line = s;
        *n = k;
        return 1;
    }
}

/* A CSV record's question and (when present and non-empty) answer fields, f[16] holding them all;
   0 after reporting a record whose field count is not the header's (*st: the call's status). */
TR__FN int tr__lines_csv(tr_ctx *ctx, const tr__lines *L, const tr_read_options *o, const char *what, const char *line, size_t n, tr__field *f, const char **qs, size_t *qn,
                         const char **as, size_t *an, tr_status *st) {
    int nf = tr__csv_split(line, n, f, 16);
    if (nf != L->ncols) {
        *st = tr__bad_record(ctx, o, what, L->lineno, "%d fields, the header has %d", nf, L->ncols);
        return 0;
    }
    *qs = f[L->cq].s, *qn = f[L->cq].n;
    if (L->ca >= 0 && f[L->ca].n) *as = f[L->ca].s, *an = f[L->ca].n;
    return 1;
}

/* 81 cells of a puzzle ('.'/'0' blank) or a solution; column of the first bad char, or -1. */
TR__FN int tr__sudoku_parse81(const char *p, size_t n, uint8_t *out, int solution) {
    int i;
    if (n != 81) return (int)(n < 81 ? n : 81);
    for (i = 0; i < 81; i++) {
        char ch = p[i];
        if (ch >= '1' && ch <= '9') out[i] = (uint8_t)(ch - '0');
        else if (!solution && (ch == '.' || ch == '0')) out[i] = 0;
        else return i;
    }
    return -1;
}

/* Solves q into a with the solver's verdict as a reason: NULL when the puzzle is fine (exactly one
   solution, or any when puzzles_only). */
TR__FN const char *tr__sudoku_verdict(const uint8_t *q, uint8_t *a, int puzzles_only) {
    int r = tr_sudoku_solve(q, a, puzzles_only ? 1 : 2);
    if (r == 1) return NULL;
    return r == 0 ? "the puzzle has no solution" : r == 2 ? "the puzzle has more than one solution" : "the puzzle has clashing givens";
}

typedef struct tr__sudoku_solve_args { tr_sudoku_set *set; uint8_t *need; int puzzles_only; } tr__sudoku_solve_args;
TR__FN void tr__sudoku_solve_range(void *arg, long k0, long k1) {
    const tr__sudoku_solve_args *p = (const tr__sudoku_solve_args *)arg;
    long k;
    for (k = k0; k < k1; k++)
        if (p->need[k]) p->need[k] = tr__sudoku_verdict(p->set->puzzles + k * 81, p->set->solutions + k * 81, p->puzzles_only) ? 1 : 0;
}

TRDEF tr_status tr_sudoku_parse(tr_ctx *ctx, const char *text, size_t len, const char *what, const tr_read_options *opt, tr_sudoku_set *out, int64_t *rejected) {
    tr__lines L;
    tr_status st = TR_OK;
    const char *line;
    size_t n;
    int64_t cap, nrej = 0, k;
    tr_read_options o = opt ? *opt : tr_read_options_default();
    uint8_t *need_solve = NULL;
    if (!ctx || !out || (!text && len)) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_sudoku_parse: NULL argument");
    memset(out, 0, sizeof *out);
    if (rejected) *rejected = 0;
    if (!what) what = "<memory>";
    tr__lines_init(&L, text, len, 1);
    cap = tr__text_count_lines(&L.t);
    st = tr__sudoku_set_alloc(ctx, out, cap);
    if (st == TR_OK) {
        need_solve = (uint8_t *)tr__calloc(ctx, (size_t)cap, 1);
        out->lines = (int64_t *)tr__alloc(ctx, (size_t)cap * sizeof *out->lines);
        if (!need_solve || !out->lines) st = TR_ERR_OUT_OF_MEMORY;
    }
    while (st == TR_OK && tr__lines_next(&L, &line, &n)) {
        uint8_t *q = out->puzzles + out->count * 81, *a = out->solutions + out->count * 81;
        const char *qs, *as = NULL, *why;
        size_t qn, an = 0;
        int bad, rating = -1;
        int64_t ln = L.lineno;
        if (n == 0 || (!L.csv && line[0] == '#')) continue;
        if (L.csv) {
            tr__field f[16];
            if (!tr__lines_csv(ctx, &L, &o, what, line, n, f, &qs, &qn, &as, &an, &st)) continue;
            if (L.cr >= 0) {
                char buf[32], *end;
                long v = -1;
                size_t rn = f[L.cr].n;
                if (rn > 0 && rn < sizeof buf) {
                    memcpy(buf, f[L.cr].s, rn);
                    buf[rn] = 0;
                    v = strtol(buf, &end, 10);
                    if (*end || v > INT32_MAX) v = -1;
                }
                if (v < 0) {
                    st = tr__bad_record(ctx, &o, what, ln, "field 'rating' is not an integer: '%.*s'", (int)(rn < 31 ? rn : 31), f[L.cr].s);
                    continue;
                }
                rating = (int)v;
            }
        } else {
            size_t i = 81;
            qs = line;
            qn = n < 81 ? n : 81;
            while (i < n && line[i] && strchr(" \t,;|:", line[i])) i++;
            if (n > 81 && i == 81) {
                st = tr__bad_record(ctx, &o, what, ln, "expected 81 cells, then optionally a separator and the solution");
                continue;
            }
            if (i < n) as = line + i, an = n - i;
        }
        if (o.puzzles_only) as = NULL;
        if (o.min_rating >= 0 && rating >= 0 && rating < o.min_rating) {
            nrej++;
            continue;
        }
        bad = tr__sudoku_parse81(qs, qn, q, 0);
        if (bad >= 0) {
            st = qn != 81 ? tr__bad_record(ctx, &o, what, ln, "field 'question' has %zu cells, expected 81", qn)
                          : tr__bad_record(ctx, &o, what, ln, "field 'question' cell %d is '%c' (expected 1-9, '.' or '0')", bad, qs[bad]);
            continue;
        }
        if (as) {
            bad = tr__sudoku_parse81(as, an, a, 1);
            if (bad >= 0) {
                st = an != 81 ? tr__bad_record(ctx, &o, what, ln, "field 'answer' has %zu cells, expected 81", an)
                              : tr__bad_record(ctx, &o, what, ln, "field 'answer' cell %d is '%c' (expected 1-9)", bad, as[bad]);
                continue;
            }
            if (!tr_sudoku_check(q, a)) {
                st = tr__bad_record(ctx, &o, what, ln, "field 'answer' is not a valid solution of the question");
                continue;
            }
        } else if (o.on_skip) { /* solved here, so that the reports come in line order */
            if ((why = tr__sudoku_verdict(q, a, o.puzzles_only)) != NULL) {
                st = tr__bad_record(ctx, &o, what, ln, "%s", why);
                continue;
            }
        } else
            need_solve[out->count] = 1;
        out->ratings[out->count] = rating;
        out->lines[out->count] = ln;
        out->count++;
    }
    /* solve the puzzles that came without a solution (in parallel), report the first failure */
    if (st == TR_OK) {
        int64_t cnt = out->count;
        tr__sudoku_solve_args sa;
        sa.set = out, sa.need = need_solve, sa.puzzles_only = o.puzzles_only;
        tr__par_for(tr_ctx_num_threads(ctx), (long)cnt, 64, tr__sudoku_solve_range, &sa);
        for (k = 0; k < cnt && st == TR_OK; k++)
            if (need_solve[k]) st = tr__bad_record(ctx, &o, what, out->lines[k], "%s", tr__sudoku_verdict(out->puzzles + k * 81, out->solutions + k * 81, o.puzzles_only));
    }
    if (st == TR_OK && out->count == 0 && !o.on_skip) st = tr__err(ctx, TR_ERR_FORMAT, "%s: no puzzles", what);
    tr__free(ctx, need_solve);
    if (st != TR_OK) {
        tr_sudoku_set_free(ctx, out);
        return st;
    }
    if (rejected) *rejected = nrej;
    return TR_OK;
}

TRDEF tr_status tr_sudoku_read(tr_ctx *ctx, const char *path, int min_rating, tr_sudoku_set *out, int64_t *rejected) {
    tr__text t;
    tr_status st;
    tr_read_options o = tr_read_options_default();
    if (!ctx || !path || !out) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_sudoku_read: NULL argument");
    memset(out, 0, sizeof *out);
    if ((st = tr__text_open(ctx, path, &t)) != TR_OK) return st;
    o.min_rating = min_rating;
    st = tr_sudoku_parse(ctx, t.data, t.len, path, &o, out, rejected);
    tr__text_close(ctx, &t);
    return st;
}

#define TR__GEN_CHUNK 2048

/* Puzzles base + [i0, i1) of a generated set, each from its own random stream; *failed = 1 when
   one could not reach its clue count. */
typedef struct tr__sudoku_gen_args { tr_sudoku_set *out; int64_t base; uint64_t seed; int clues; int *failed; } tr__sudoku_gen_args;
TR__FN void tr__sudoku_gen_range(void *arg, long i0, long i1) {
    const tr__sudoku_gen_args *p = (const tr__sudoku_gen_args *)arg;
    int64_t k;
    for (k = p->base + i0; k < p->base + i1; k++) {
        tr__rng rng = tr__rng_kind(p->seed, TR__STREAM_SUDOKU_GEN, (uint64_t)k);
        int attempt, ok = 0;
        for (attempt = 0; attempt < 1000 && !ok; attempt++) ok = tr__sudoku_gen_once(&rng, p->clues, p->out->puzzles + k * 81, p->out->solutions + k * 81);
        p->out->ratings[k] = -1;
        if (!ok) *p->failed = 1;
    }
}

TRDEF tr_status tr_sudoku_generate_set(tr_ctx *ctx, uint64_t seed, int64_t count, int clues, tr_progress_fn progress, void *user, tr_sudoku_set *out) {
    tr_status st;
    int64_t c0;
    tr__sudoku_gen_args ga;
    if (!ctx || !out || count < 0) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_sudoku_generate_set: invalid argument");
    memset(out, 0, sizeof *out);
    if (clues < 17 || clues > 81) return tr__err(ctx, TR_ERR_INVALID_ARG, "sudoku: clues %d is outside 17..81 (no 16-clue puzzle has a unique solution)", clues);
    if ((st = tr__sudoku_set_alloc(ctx, out, count)) != TR_OK) return st;
    ga.out = out, ga.seed = seed, ga.clues = clues;
    for (c0 = 0; c0 < count && st == TR_OK; c0 += TR__GEN_CHUNK) {
        int64_t c1 = c0 + TR__GEN_CHUNK < count ? c0 + TR__GEN_CHUNK : count;
        int failed = 0;
        ga.base = c0, ga.failed = &failed;
        tr__par_for(tr_ctx_num_threads(ctx), (long)(c1 - c0), 4, tr__sudoku_gen_range, &ga);
        if (failed) st = tr__err(ctx, TR_ERR_GENERIC, "sudoku: could not reach %d clues (try more clues)", clues);
        else st = tr__progress(ctx, progress, user, "sudoku: generate", c1, count);
    }
    if (st != TR_OK) {
        tr_sudoku_set_free(ctx, out);
        return st;
    }
    out->count = count;
    return TR_OK;
}

TRDEF tr_sudoku_options tr_sudoku_options_default(void) {
    tr_sudoku_options o;
    memset(&o, 0, sizeof o);
    o.generate_train = 1000;
    o.generate_test = 1000;
    o.clues = 25;
    o.min_difficulty = -1;
    o.seed = 0;
    return o;
}

/* Picks k of n indices without replacement, in random order (like numpy's choice). */
TR__FN tr_status tr__subsample(tr_ctx *ctx, uint64_t seed, int64_t n, int64_t k, int64_t **out) {
    int64_t *idx = (int64_t *)tr__alloc(ctx, (size_t)(n ? n : 1) * sizeof *idx), i;
    tr__rng rng = tr__rng_kind(seed, TR__STREAM_SUBSAMPLE, 0);
    *out = idx;
    if (!idx) return TR_ERR_OUT_OF_MEMORY;
    for (i = 0; i < n; i++) idx[i] = i;
    for (i = 0; i < k && i < n; i++) {
        int64_t j = i + (int64_t)tr__rng_below(&rng, (uint64_t)(n - i)), t = idx[i];
        idx[i] = idx[j];
        idx[j] = t;
    }
    return TR_OK;
}

/* Fills a split from a Sudoku set: puzzle p becomes group p with 1 + num_aug one-example puzzles. */
typedef struct tr__sudoku_fill_args { const tr_sudoku_set *set; const int64_t *pick; int64_t base, per; uint64_t seed; tr_split *s; } tr__sudoku_fill_args;
TR__FN void tr__sudoku_fill_range(void *arg, long i0, long i1) {
    const tr__sudoku_fill_args *f = (const tr__sudoku_fill_args *)arg;
    const tr_sudoku_set *set = f->set;
    int64_t per = f->per, p;
    tr_split *s = f->s;
    for (p = f->base + i0; p < f->base + i1; p++) {
        int64_t src = f->pick ? f->pick[p] : p, a;
        const uint8_t *q = set->puzzles + src * 81, *sol = set->solutions + src * 81;
        uint8_t *qo = s->inputs + (size_t)(p * per) * 81, *ao = s->labels + (size_t)(p * per) * 81;
        tr__rng rng = tr__rng_kind(f->seed, TR__STREAM_SUDOKU_AUG, (uint64_t)src);
        int j;
        for (a = 0; a < per; a++, qo += 81, ao += 81) {
            if (a == 0) {
                memcpy(qo, q, 81);
                memcpy(ao, sol, 81);
            } else
                tr__sudoku_augment_rng(&rng, q, sol, qo, ao);
            for (j = 0; j < 81; j++) {
                qo[j] = (uint8_t)(qo[j] + 1);
                ao[j] = (uint8_t)(ao[j] + 1);
            }
        }
    }
}

TR__FN tr_status tr__sudoku_fill(tr_ctx *ctx, const tr_sudoku_set *set, const int64_t *pick, int64_t n, int num_aug, uint64_t seed,
                                 tr_progress_fn progress, void *user, tr_split *s) {
    int64_t per = 1 + (int64_t)num_aug, total, p0, i;
    tr_status st;
    tr__sudoku_fill_args fa;
    if (n > 0 && per > INT32_MAX / n) return tr__err(ctx, TR_ERR_OVERFLOW, "sudoku: %lld puzzles x %lld versions exceed the int32 offsets", (long long)n, (long long)per);
    total = n * per;
    if ((st = tr_split_init(ctx, s, 81, total + 1)) != TR_OK) return st;
    fa.set = set, fa.pick = pick, fa.per = per, fa.seed = seed, fa.s = s;
    for (p0 = 0; p0 < n && st == TR_OK; p0 += 256) {
        int64_t p1 = p0 + 256 < n ? p0 + 256 : n;
        fa.base = p0;
        tr__par_for(tr_ctx_num_threads(ctx), (long)(p1 - p0), 0, tr__sudoku_fill_range, &fa);
        st = tr__progress(ctx, progress, user, num_aug ? "sudoku: augment" : "sudoku: encode", p1, n);
    }
    if (st != TR_OK) {
        tr_split_free(ctx, s);
        return st;
    }
    for (i = 0; i < total; i++) {
        s->puzzle_identifiers[i] = 0;
        s->puzzle_indices[i + 1] = (int32_t)(i + 1);
    }
    for (i = 0; i < n; i++) s->group_indices[i + 1] = (int32_t)((i + 1) * per);
    s->num_examples = s->num_puzzles = total;
    s->num_groups = n;
    return TR_OK;
}

TRDEF tr_status tr_sudoku_build_splits(tr_ctx *ctx, const tr_sudoku_options *o, tr_split *train, tr_split *test, int64_t *rejected) {
    tr_sudoku_set tr_set, te_set;
    int64_t *pick = NULL, n, rej = 0, r2 = 0;
    tr_status st;
    if (!ctx || !o || !train || !test) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_sudoku_build_splits: NULL argument");
    memset(train, 0, sizeof *train);
    memset(test, 0, sizeof *test);
    memset(&te_set, 0, sizeof te_set);
    if (o->num_aug < 0) return tr__err(ctx, TR_ERR_INVALID_ARG, "sudoku: num_aug %d is negative", o->num_aug);
    if (o->train_path) st = tr_sudoku_read(ctx, o->train_path, o->min_difficulty, &tr_set, &rej);
    else st = tr_sudoku_generate_set(ctx, o->seed, o->generate_train, o->clues, o->progress, o->progress_user, &tr_set);
    if (st != TR_OK) return st;
    if (o->test_path) st = tr_sudoku_read(ctx, o->test_path, o->min_difficulty, &te_set, &r2);
    else st = tr_sudoku_generate_set(ctx, tr__mix64(o->seed ^ 0x7e57ull), o->generate_test, o->clues, o->progress, o->progress_user, &te_set);
    n = tr_set.count;
    if (st == TR_OK && o->subsample_size > 0 && o->subsample_size < n) {
        st = tr__subsample(ctx, o->seed, n, o->subsample_size, &pick);
        n = o->subsample_size;
    }
    if (st == TR_OK) st = tr__sudoku_fill(ctx, &tr_set, pick, n, o->num_aug, o->seed, o->progress, o->progress_user, train);
    if (st == TR_OK) st = tr__sudoku_fill(ctx, &te_set, NULL, te_set.count, 0, o->seed, o->progress, o->progress_user, test);
    if (st != TR_OK) tr_split_free(ctx, train);
    tr__free(ctx, pick);
    tr_sudoku_set_free(ctx, &tr_set);
    tr_sudoku_set_free(ctx, &te_set);
    if (rejected) *rejected = rej + r2;
    return st;
}

/* Writes both splits and identifiers.json ["<blank>"]. */
TR__FN tr_status tr__write_splits(tr_ctx *ctx, const char *out_dir, const tr_split *train, const tr_split *test, int vocab, tr_build_summary *sum) {
    tr_dataset_meta m = tr_dataset_meta_default();
    const char *blank = "<blank>";
    tr_status st;
    m.vocab_size = vocab;
    m.num_puzzle_identifiers = 1;
    m.total_puzzles = train->num_groups; /* as the reference writes it */
    st = tr_split_write(ctx, out_dir, "train", train, &m);
    m.total_puzzles = test->num_groups;
    if (st == TR_OK) st = tr_split_write(ctx, out_dir, "test", test, &m);
    if (st == TR_OK) st = tr_write_identifiers(ctx, out_dir, 1, &blank);
    if (st == TR_OK && sum) {
        sum->examples[0] = train->num_examples;
        sum->puzzles[0] = train->num_puzzles;
        sum->groups[0] = train->num_groups;
        sum->examples[1] = test->num_examples;
        sum->puzzles[1] = test->num_puzzles;
        sum->groups[1] = test->num_groups;
        sum->num_identifiers = 1;
    }
    return st;
}

TRDEF tr_status tr_sudoku_build(tr_ctx *ctx, const tr_sudoku_options *o, const char *out_dir, tr_build_summary *sum) {
    tr_split train, test;
    int64_t rej = 0;
    double t0 = tr__now();
    tr_status st;
    if (sum) memset(sum, 0, sizeof *sum);
    if (!out_dir) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_sudoku_build: out_dir is NULL");
    st = tr_sudoku_build_splits(ctx, o, &train, &test, &rej);
    if (st != TR_OK) return st;
    st = tr__write_splits(ctx, out_dir, &train, &test, 11, sum);
    tr_split_free(ctx, &train);
    tr_split_free(ctx, &test);
    if (sum) {
        sum->rejected = rej;
        sum->seconds = tr__now() - t0;
    }
    return st;
}

/* ---- sampler ---------------------------------------------------------------------------- */
#define TR__SAMPLER_MAGIC 0x74727361u /* "tras" */

typedef struct tr__sgen {
    int64_t pass;     /* train: set passes completed before the current one; test: pass number */
    int set;
    int64_t start;    /* train: position in the group order; test: next example */
    int64_t index;    /* batches emitted in the current set pass (train) / pass (test) */
    int order_valid;  /* train: order[] holds the permutations of (pass, set) */
    int64_t empty_run;
    tr__rng rng;
} tr__sgen;

typedef struct tr__slot {
    int32_t *inputs, *labels, *pids;
    tr_batch_info info;
    tr_sampler_state after;
    tr_status st;
} tr__slot;

struct tr_sampler {
    tr_ctx *ctx;
    const tr_dataset *ds;
    tr_sampler_config cfg;
    int local; /* rows per replica */
    int L;
    int64_t *order, order_len;
    int64_t *scratch;        /* [max puzzle examples] */
    int64_t *bex, *bpz;      /* [global batch]: example and puzzle of each row */
    tr__sgen gen;            /* the producer's position */
    tr_sampler_state cur;    /* the position after the last batch handed out */
    int nslots;
    tr__slot *slots;
    int head, tail, nready, held;
    char err[TR__ERRLEN];    /* the producer's failure text */
#if TR__POSIX
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int thread_running, stop, sync_ok;
#endif
};

TRDEF tr_sampler_config tr_sampler_config_default(void) {
    tr_sampler_config c;
    memset(&c, 0, sizeof c);
    c.global_batch_size = 768;
    c.num_replicas = 1;
    c.epochs_per_iter = 1;
    c.prefetch = 2;
    return c;
}

TR__FN void tr__sgen_state(const tr_sampler *s, const tr__sgen *g, tr_sampler_state *st) {
    memset(st, 0, sizeof *st);
    st->w[0] = ((uint64_t)TR__SAMPLER_MAGIC << 32) | (uint64_t)(s->cfg.test_mode ? 1 : 0);
    st->w[1] = (uint64_t)g->pass;
    st->w[2] = (uint64_t)g->set;
    st->w[3] = (uint64_t)g->start;
    st->w[4] = g->rng.counter;
    st->w[5] = (uint64_t)g->index;
    st->w[6] = s->cfg.seed;
    st->w[7] = ((uint64_t)(uint32_t)s->cfg.global_batch_size << 32) | (uint32_t)s->cfg.epochs_per_iter;
}

/* Builds the group order of the set pass (pass, set): epochs_per_iter permutations. */
TR__FN void tr__sgen_order(tr_sampler *s, tr__sgen *g) {
    const tr_dataset_set *ds = &s->ds->sets[g->set];
    int64_t G = ds->num_groups, e, i;
    g->rng = tr__rng_make(s->cfg.seed, (uint64_t)g->pass + 1); /* the reference seeds with seed + _iters */
    s->order_len = G * s->cfg.epochs_per_iter;
    for (e = 0; e < s->cfg.epochs_per_iter; e++) {
        int64_t *o = s->order + e * G;
        for (i = 0; i < G; i++) o[i] = i;
        tr__shuffle_i64(&g->rng, o, G);
    }
    g->order_valid = 1;
}

TR__FN void tr__slot_fill(tr_sampler *s, tr__slot *sl, int64_t lo, int64_t hi, int set) {
    const tr_dataset *ds = s->ds;
    int L = s->L, r;
    for (r = 0; r < s->local; r++) {
        int64_t row = lo + r;
        int32_t *in = sl->inputs + (size_t)r * (size_t)L, *lb = sl->labels + (size_t)r * (size_t)L;
        if (row < hi) {
            tr_dataset_example(ds, set, s->bex[row], in, lb);
            sl->pids[r] = ds->sets[set].puzzle_identifiers[s->bpz[row]];
        } else {
            int j;
            for (j = 0; j < L; j++) {
                in[j] = ds->meta.pad_id;
                lb[j] = TR_IGNORE_LABEL;
            }
            sl->pids[r] = ds->meta.blank_identifier_id;
        }
    }
}

/* Produces the next batch into a slot from the generator state (the one sequential definition
   of the batch stream: the prefetch thread runs exactly this). */
TR__FN void tr__sampler_produce(tr_sampler *s, tr__slot *sl) {
    const tr_dataset *ds = s->ds;
    tr__sgen *g = &s->gen;
    int B = s->cfg.global_batch_size, nsets = ds->num_sets;
    int64_t lo = (int64_t)s->cfg.rank * s->local;
    memset(&sl->info, 0, sizeof sl->info);
    sl->info.seq_len = s->L;
    sl->st = TR_OK;
    if (s->cfg.test_mode) {
        for (;;) {
            const tr_dataset_set *st;
            int64_t end, i, p, hi;
            if (g->set >= nsets) { /* end-of-pass marker */
                sl->info.end = 1;
                sl->info.pass = g->pass;
                sl->info.index = g->index;
                sl->info.set_index = nsets;
                tr__slot_fill(s, sl, 0, 0, 0);
                g->pass++;
                g->set = 0;
                g->start = 0;
                g->index = 0;
                break;
            }
            st = &ds->sets[g->set];
            if (g->start >= st->num_examples) {
                g->set++;
                g->start = 0;
                continue;
            }
            end = g->start + B < st->num_examples ? g->start + B : st->num_examples;
            /* puzzle of each example: the last puzzle whose offset is <= the example */
            {
                int64_t a = 0, b = st->num_puzzles; /* find largest p with pidx[p] <= start */
                while (a < b) {
                    int64_t m = a + (b - a + 1) / 2;
                    if (st->puzzle_indices[m] <= g->start) a = m;
                    else b = m - 1;
                }
                p = a;
            }
            for (i = g->start; i < end; i++) {
                while (p + 1 <= st->num_puzzles && i >= st->puzzle_indices[p + 1]) p++;
                s->bex[i - g->start] = i;
                s->bpz[i - g->start] = p;
            }
            hi = end - g->start;
            sl->info.effective_size = (int)hi;
            sl->info.set_index = g->set;
            sl->info.pass = g->pass;
            sl->info.index = g->index++;
            tr__slot_fill(s, sl, lo, hi, g->set);
            g->start += B;
            break;
        }
    } else {
        for (;;) {
            const tr_dataset_set *st = &ds->sets[g->set];
            int cur = 0;
            if (!g->order_valid) {
                tr__sgen_order(s, g);
                g->start = 0;
                g->index = 0;
            }
            while (g->start < s->order_len && cur < B) {
                int64_t grp = s->order[g->start++], glo = st->group_indices[grp], ghi = st->group_indices[grp + 1];
                int64_t pz = glo + (int64_t)tr__rng_below(&g->rng, (uint64_t)(ghi - glo));
                int64_t p0 = st->puzzle_indices[pz], size = st->puzzle_indices[pz + 1] - p0, app = size < B - cur ? size : B - cur, k;
                if (size == 1) {
                    s->bex[cur] = p0;
                    s->bpz[cur++] = pz;
                    continue;
                }
                for (k = 0; k < size; k++) s->scratch[k] = k;
                for (k = 0; k < app; k++) { /* random distinct examples, in random order */
                    int64_t j = k + (int64_t)tr__rng_below(&g->rng, (uint64_t)(size - k)), t = s->scratch[k];
                    s->scratch[k] = s->scratch[j];
                    s->scratch[j] = t;
                    s->bex[cur] = p0 + s->scratch[k];
                    s->bpz[cur++] = pz;
                }
            }
            if (cur < B) { /* the last incomplete batch is dropped; on to the next set pass */
                if (g->index == 0 && ++g->empty_run > 2 * nsets) {
                    sl->st = TR_ERR_CONFIG;
                    snprintf(s->err, sizeof s->err, "sampler: no set can fill a batch of %d examples", B);
                    return;
                }
                if (g->index) g->empty_run = 0;
                g->pass++;
                g->set = (g->set + 1) % nsets;
                g->order_valid = 0;
                continue;
            }
            sl->info.effective_size = B;
            sl->info.set_index = g->set;
            sl->info.pass = g->pass;
            sl->info.index = g->index++;
            sl->info.epoch = ((double)g->pass + (double)g->start / (double)s->order_len) * s->cfg.epochs_per_iter / nsets;
            tr__slot_fill(s, sl, lo, lo + s->local, g->set);
            break;
        }
    }
    tr__sgen_state(s, g, &sl->after);
}

#if TR__POSIX
static void *tr__sampler_thread(void *arg) {
    tr_sampler *s = (tr_sampler *)arg;
    for (;;) {
        int slot;
        tr_status st;
        pthread_mutex_lock(&s->mu);
        while (!s->stop && s->nready + (s->held >= 0 ? 1 : 0) >= s->nslots) pthread_cond_wait(&s->cv, &s->mu);
        if (s->stop) {
            pthread_mutex_unlock(&s->mu);
            break;
        }
        slot = s->tail;
        pthread_mutex_unlock(&s->mu);
        tr__sampler_produce(s, &s->slots[slot]);
        st = s->slots[slot].st;
        pthread_mutex_lock(&s->mu);
        s->tail = (s->tail + 1) % s->nslots;
        s->nready++;
        if (st != TR_OK) s->stop = 1;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        if (st != TR_OK) break;
    }
    return NULL;
}

TR__FN void tr__sampler_stop(tr_sampler *s) {
    if (!s->thread_running) return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    s->thread_running = 0;
}

TR__FN tr_status tr__sampler_start(tr_sampler *s) {
    s->head = s->tail = s->nready = 0;
    s->held = -1;
    s->stop = 0;
    if (s->cfg.prefetch <= 0) return TR_OK;
    if (pthread_create(&s->thread, NULL, tr__sampler_thread, s) != 0) return tr__err(s->ctx, TR_ERR_GENERIC, "sampler: cannot start the prefetch thread");
    s->thread_running = 1;
    return TR_OK;
}
#else
TR__FN void tr__sampler_stop(tr_sampler *s) { TR__UNUSED(s); }
TR__FN tr_status tr__sampler_start(tr_sampler *s) {
    s->head = s->tail = s->nready = 0;
    s->held = -1;
    return TR_OK;
}
#endif

TRDEF tr_status tr_evaluate(tr_model *m, tr_carry *carry, tr_sampler *test, int64_t max_batches, tr_progress_fn progress, void *user, tr_eval_result *out) {
    tr_metrics sum, mt;
    int64_t total;
    double t0 = tr__now();
    tr_status st = TR_OK;
    if (out) memset(out, 0, sizeof *out);
    if (!m || !carry || !test || !out) return TR_ERR_INVALID_ARG;
    if (!test->cfg.test_mode) return tr__err(m->ctx, TR_ERR_INVALID_ARG, "tr_evaluate: the sampler is not in test mode (a train sampler never ends)");
    total = tr_sampler_batches_per_pass(test);
    if (max_batches > 0 && total > max_batches) total = max_batches;
    memset(&sum, 0, sizeof sum);
    while (max_batches <= 0 || out->batches < max_batches) {
        tr_batch b;
        tr_batch_info info;
        if (progress && progress(user, "evaluate", out->batches, total)) {
            st = tr__err(m->ctx, TR_ERR_INTERRUPTED, "evaluation stopped after %lld of %lld batches", (long long)out->batches, (long long)total);
            break;
        }
        if ((st = tr_sampler_next(test, &b, &info)) != TR_OK || info.end) break;
        tr_carry_reset(carry);
        do st = tr_model_eval_step(m, carry, &b, NULL, &mt);
        while (st == TR_OK && !tr_carry_all_halted(carry));
        if (st != TR_OK) break;
        sum.count += mt.count, sum.accuracy += mt.accuracy, sum.exact_accuracy += mt.exact_accuracy;
        sum.q_halt_accuracy += mt.q_halt_accuracy, sum.steps += mt.steps, sum.lm_loss += mt.lm_loss;
        out->batches++;
    }
    out->count = sum.count;
    out->accuracy = sum.count > 0 ? sum.accuracy / sum.count : NAN;
    out->exact_accuracy = sum.count > 0 ? sum.exact_accuracy / sum.count : NAN;
    out->q_halt_accuracy = sum.count > 0 ? sum.q_halt_accuracy / sum.count : NAN;
    out->steps = sum.count > 0 ? sum.steps / sum.count : NAN;
    out->lm_loss = sum.count > 0 ? sum.lm_loss / sum.count : NAN;
    out->seconds = tr__now() - t0;
    return st;
}

TRDEF void tr_sampler_destroy(tr_sampler *s) {
    int i;
    tr_ctx *ctx;
    if (!s) return;
    ctx = s->ctx;
    tr__sampler_stop(s);
#if TR__POSIX
    if (s->sync_ok) {
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
    }
#endif
    if (s->slots)
        for (i = 0; i < s->nslots; i++) {
            tr__free(ctx, s->slots[i].inputs);
            tr__free(ctx, s->slots[i].labels);
            tr__free(ctx, s->slots[i].pids);
        }
    tr__free(ctx, s->slots);
    tr__free(ctx, s->order);
    tr__free(ctx, s->scratch);
    tr__free(ctx, s->bex);
    tr__free(ctx, s->bpz);
    tr__free(ctx, s);
}

TRDEF tr_status tr_sampler_create(tr_ctx *ctx, const tr_dataset *ds, const tr_sampler_config *cfg_in, tr_sampler **out) {
    tr_sampler *s;
    tr_sampler_config cfg;
    int64_t maxG = 1, maxP = 1, best = 0;
    int i;
    tr_status st;
    size_t rowbytes;
    if (!ctx || !ds || !out) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_sampler_create: NULL argument");
    *out = NULL;
    cfg = cfg_in ? *cfg_in : tr_sampler_config_default();
    if (cfg.num_replicas < 1 || cfg.global_batch_size < 1 || cfg.global_batch_size % cfg.num_replicas)
        return tr__err(ctx, TR_ERR_CONFIG, "sampler: global_batch_size %d must be a positive multiple of num_replicas %d", cfg.global_batch_size, cfg.num_replicas);
    if (cfg.rank < 0 || cfg.rank >= cfg.num_replicas) return tr__err(ctx, TR_ERR_CONFIG, "sampler: rank %d is outside [0, %d)", cfg.rank, cfg.num_replicas);
    if (cfg.epochs_per_iter < 1) return tr__err(ctx, TR_ERR_CONFIG, "sampler: epochs_per_iter %d must be >= 1", cfg.epochs_per_iter);
    if (cfg.prefetch < 0 || cfg.prefetch > 64) return tr__err(ctx, TR_ERR_CONFIG, "sampler: prefetch %d is outside 0..64", cfg.prefetch);
    for (i = 0; i < ds->num_sets; i++) {
        const tr_dataset_set *ss = &ds->sets[i];
        int64_t g, sum = 0;
        if (ss->num_groups > maxG) maxG = ss->num_groups;
        if (ss->max_puzzle_examples > maxP) maxP = ss->max_puzzle_examples;
        for (g = 0; g < ss->num_groups; g++) {
            int64_t p, mx = 0;
            for (p = ss->group_indices[g]; p < ss->group_indices[g + 1]; p++) {
                int64_t n = ss->puzzle_indices[p + 1] - ss->puzzle_indices[p];
                if (n > mx) mx = n;
            }
            sum += mx;
        }
        if (sum * cfg.epochs_per_iter > best) best = sum * cfg.epochs_per_iter;
    }
    if (!cfg.test_mode && best < cfg.global_batch_size)
        return tr__err(ctx, TR_ERR_CONFIG, "sampler: a training pass holds at most %lld examples, fewer than global_batch_size %d", (long long)best, cfg.global_batch_size);
    s = (tr_sampler *)tr__calloc(ctx, 1, sizeof *s);
    if (!s) return TR_ERR_OUT_OF_MEMORY;
    s->ctx = ctx;
    s->ds = ds;
    s->cfg = cfg;
    s->local = cfg.global_batch_size / cfg.num_replicas;
    s->L = ds->meta.seq_len;
    s->nslots = cfg.prefetch > 0 ? cfg.prefetch + 1 : 1;
    s->held = -1;
    st = TR_ERR_OUT_OF_MEMORY;
    if (!tr__size_mul((size_t)s->local, (size_t)s->L * 4, &rowbytes)) {
        st = tr__err(ctx, TR_ERR_OVERFLOW, "sampler: batch buffers overflow");
        goto fail;
    }
    s->slots = (tr__slot *)tr__calloc(ctx, (size_t)s->nslots, sizeof *s->slots);
    if (!s->slots) goto fail;
    for (i = 0; i < s->nslots; i++) {
        s->slots[i].inputs = (int32_t *)tr__alloc(ctx, rowbytes);
        s->slots[i].labels = (int32_t *)tr__alloc(ctx, rowbytes);
        s->slots[i].pids = (int32_t *)tr__alloc(ctx, (size_t)s->local * 4);
        if (!s->slots[i].inputs || !s->slots[i].labels || !s->slots[i].pids) goto fail;
    }
    s->order = (int64_t *)tr__alloc(ctx, (size_t)(maxG * cfg.epochs_per_iter) * sizeof(int64_t));
    s->scratch = (int64_t *)tr__alloc(ctx, (size_t)maxP * sizeof(int64_t));
    s->bex = (int64_t *)tr__alloc(ctx, (size_t)cfg.global_batch_size * sizeof(int64_t));
    s->bpz = (int64_t *)tr__alloc(ctx, (size_t)cfg.global_batch_size * sizeof(int64_t));
    if (!s->order || !s->scratch || !s->bex || !s->bpz) goto fail;
#if TR__POSIX
    if (pthread_mutex_init(&s->mu, NULL) != 0) {
        st = tr__err(ctx, TR_ERR_GENERIC, "sampler: pthread_mutex_init failed");
        goto fail;
    }
    if (pthread_cond_init(&s->cv, NULL) != 0) {
        pthread_mutex_destroy(&s->mu);
        st = tr__err(ctx, TR_ERR_GENERIC, "sampler: pthread_cond_init failed");
        goto fail;
    }
    s->sync_ok = 1;
#endif
    tr__sgen_state(s, &s->gen, &s->cur);
    if ((st = tr__sampler_start(s)) != TR_OK) goto fail;
    *out = s;
    return TR_OK;
fail:
    tr_sampler_destroy(s);
    return st;
}

TRDEF tr_status tr_sampler_next(tr_sampler *s, tr_batch *out, tr_batch_info *info) {
    tr__slot *sl;
    if (!s || !out) return TR_ERR_INVALID_ARG;
#if TR__POSIX
    if (s->cfg.prefetch > 0) {
        int slot;
        pthread_mutex_lock(&s->mu);
        s->held = -1;
        pthread_cond_broadcast(&s->cv);
        while (s->nready == 0 && s->thread_running && !s->stop) pthread_cond_wait(&s->cv, &s->mu);
        if (s->nready == 0) {
            pthread_mutex_unlock(&s->mu);
            return tr__err(s->ctx, TR_ERR_GENERIC, "sampler: the prefetch thread stopped");
        }
        slot = s->head;
        s->head = (s->head + 1) % s->nslots;
        s->nready--;
        s->held = slot;
        pthread_mutex_unlock(&s->mu);
        sl = &s->slots[slot];
    } else
#endif
    {
        sl = &s->slots[0];
        tr__sampler_produce(s, sl);
    }
    if (sl->st != TR_OK) return tr__err(s->ctx, sl->st, "%s", s->err);
    out->inputs = sl->inputs;
    out->labels = sl->labels;
    out->puzzle_identifiers = sl->pids;
    out->batch_size = s->local;
    if (info) *info = sl->info;
    s->cur = sl->after;
    return TR_OK;
}

TRDEF void tr_sampler_get_state(const tr_sampler *s, tr_sampler_state *state) {
    if (s && state) *state = s->cur;
}

TRDEF tr_status tr_sampler_set_state(tr_sampler *s, const tr_sampler_state *state) {
    tr_sampler_state probe;
    tr__sgen g;
    if (!s || !state) return TR_ERR_INVALID_ARG;
    tr__sgen_state(s, &s->gen, &probe);
    if (state->w[0] != probe.w[0]) return tr__err(s->ctx, TR_ERR_INVALID_ARG, "sampler state: not a %s-mode sampler state", s->cfg.test_mode ? "test" : "train");
    if (state->w[6] != probe.w[6] || state->w[7] != probe.w[7])
        return tr__err(s->ctx, TR_ERR_INVALID_ARG, "sampler state: saved with another seed, batch size or epochs_per_iter");
    if (state->w[2] > (uint64_t)s->ds->num_sets || (!s->cfg.test_mode && state->w[2] >= (uint64_t)s->ds->num_sets))
        return tr__err(s->ctx, TR_ERR_INVALID_ARG, "sampler state: set %llu is out of range", (unsigned long long)state->w[2]);
    if (!s->cfg.test_mode && state->w[3] > (uint64_t)(s->ds->sets[state->w[2]].num_groups * s->cfg.epochs_per_iter))
        return tr__err(s->ctx, TR_ERR_INVALID_ARG, "sampler state: position %llu is past the pass", (unsigned long long)state->w[3]);
    if (s->cfg.test_mode && state->w[2] < (uint64_t)s->ds->num_sets && state->w[3] > (uint64_t)s->ds->sets[state->w[2]].num_examples + (uint64_t)s->cfg.global_batch_size)
        return tr__err(s->ctx, TR_ERR_INVALID_ARG, "sampler state: position %llu is past the set", (unsigned long long)state->w[3]);
    tr__sampler_stop(s);
    memset(&g, 0, sizeof g);
    g.pass = (int64_t)state->w[1];
    g.set = (int)state->w[2];
    g.start = (int64_t)state->w[3];
    g.index = (int64_t)state->w[5];
    s->gen = g;
    if (!s->cfg.test_mode && (g.start > 0 || g.index > 0)) {
        tr__sgen_order(s, &s->gen);
        s->gen.rng.counter = state->w[4];
    }
    s->cur = *state;
    return tr__sampler_start(s);
}

TRDEF int64_t tr_sampler_batches_per_pass(const tr_sampler *s) {
    int64_t n = 0;
    int i;
    if (!s) return 0;
    for (i = 0; i < s->ds->num_sets; i++) {
        const tr_dataset_set *ss = &s->ds->sets[i];
        if (s->cfg.test_mode) n += (ss->num_examples + s->cfg.global_batch_size - 1) / s->cfg.global_batch_size;
        else {
            double per_puzzle = ss->num_puzzles ? (double)ss->num_examples / (double)ss->num_puzzles : 0; /* rough: examples per group visit */
            n += (int64_t)((double)ss->num_groups * s->cfg.epochs_per_iter * per_puzzle / s->cfg.global_batch_size);
        }
    }
    return n;
}

/* ---- dihedral transforms ---------------------------------------------------------------- */
static const int tr__dihedral_inv[8] = {0, 3, 2, 1, 4, 5, 6, 7};
TRDEF int tr_dihedral_inverse_id(int tid) { return (tid >= 0 && tid < 8) ? tr__dihedral_inv[tid] : 0; }

TRDEF void tr_dihedral(int tid, const uint8_t *src, int h, int w, uint8_t *dst, int *out_h, int *out_w) {
    int i, j, oh = h, ow = w;
    if (tid == 1 || tid == 3 || tid == 6 || tid == 7) {
        oh = w;
        ow = h;
    }
    for (i = 0; i < oh; i++)
        for (j = 0; j < ow; j++) {
            int r, c;
            switch (tid) {
            case 1: r = j; c = w - 1 - i; break;         /* rot90: out[i][j] = a[j][w-1-i] */
            case 2: r = h - 1 - i; c = w - 1 - j; break; /* rot180 */
            case 3: r = h - 1 - j; c = i; break;         /* rot270 */
            case 4: r = i; c = w - 1 - j; break;         /* fliplr */
            case 5: r = h - 1 - i; c = j; break;         /* flipud */
            case 6: r = j; c = i; break;                 /* transpose */
            case 7: r = h - 1 - j; c = w - 1 - i; break; /* fliplr(rot90): anti-transpose */
            default: r = i; c = j;
            }
            dst[i * ow + j] = src[r * w + c];
        }
    if (out_h) *out_h = oh;
    if (out_w) *out_w = ow;
}

TRDEF void tr_dihedral_inverse(int tid, const uint8_t *src, int h, int w, uint8_t *dst, int *out_h, int *out_w) {
    tr_dihedral(tr_dihedral_inverse_id(tid), src, h, w, dst, out_h, out_w);
}

/* ---- Maze ------------------------------------------------------------------------------- */
TR__FN int tr__maze_token(char ch) {
    const char *p = strchr(TR_MAZE_CHARSET, ch);
    return (ch && p) ? (int)(p - TR_MAZE_CHARSET) + 1 : 0;
}

/* BFS over non-wall cells from S; dist[] gets distances (-1 unreachable). Returns S's cell or -1. */
TR__FN int tr__maze_bfs(const char *m, int n, int from, int *dist, int *queue) {
    int head = 0, tail = 0, i;
    for (i = 0; i < n * n; i++) dist[i] = -1;
    dist[from] = 0;
    queue[tail++] = from;
    while (head < tail) {
        int c = queue[head++], r = c / n, k = c % n, d;
        static const int dr[4] = {-1, 1, 0, 0}, dc[4] = {0, 0, -1, 1};
        for (d = 0; d < 4; d++) {
            int rr = r + dr[d], cc = k + dc[d], nc;
            if (rr < 0 || rr >= n || cc < 0 || cc >= n) continue;
            nc = rr * n + cc;
            if (m[nc] == '#' || dist[nc] >= 0) continue;
            dist[nc] = dist[c] + 1;
            queue[tail++] = nc;
        }
    }
    return from;
}

/* Labels a shortest path given BFS distances from S; returns its length or -1. */
TR__FN int tr__maze_label(const char *m, int n, int goal, const int *dist, char *out) {
    int c = goal, len;
    memcpy(out, m, (size_t)n * (size_t)n);
    if (dist[goal] < 0) return -1;
    len = dist[goal];
    while (dist[c] > 0) { /* walk back: first neighbour (up, down, left, right) one step closer */
        int r = c / n, k = c % n, d, nxt = -1;
        static const int dr[4] = {-1, 1, 0, 0}, dc[4] = {0, 0, -1, 1};
        for (d = 0; d < 4 && nxt < 0; d++) {
            int rr = r + dr[d], cc = k + dc[d];
            if (rr < 0 || rr >= n || cc < 0 || cc >= n) continue;
            if (dist[rr * n + cc] == dist[c] - 1) nxt = rr * n + cc;
        }
        c = nxt;
        if (dist[c] > 0) out[c] = 'o';
    }
    return len;
}

TRDEF int tr_maze_solve(tr_ctx *ctx, const char *maze, int n, char *out) {
    int i, s = -1, g = -1, len, *dist, *queue;
    if (!ctx || !maze || !out || n <= 0 || n > 4096) return -1;
    for (i = 0; i < n * n; i++) {
        if (maze[i] == 'S') {
            if (s >= 0) return -1;
            s = i;
        } else if (maze[i] == 'G') {
            if (g >= 0) return -1;
            g = i;
        }
    }
    if (s < 0 || g < 0) return -1;
    dist = (int *)tr__alloc(ctx, sizeof(int) * 2 * (size_t)n * (size_t)n);
    if (!dist) return -1;
    queue = dist + n * n;
    tr__maze_bfs(maze, n, s, dist, queue);
    len = tr__maze_label(maze, n, g, dist, out);
    tr__free(ctx, dist);
    return len;
}

TRDEF int tr_maze_check(tr_ctx *ctx, const char *maze, const char *answer, int n) {
    int i, s = -1, g = -1, len, *dist;
    char *walk;
    if (!ctx || !maze || !answer || n <= 0 || n > 4096) return -1;
    for (i = 0; i < n * n; i++) {
        if (maze[i] == 'S') s = i;
        else if (maze[i] == 'G') g = i;
        else if (answer[i] == 'o' && maze[i] != ' ') return -1; /* a path through a wall */
    }
    if (s < 0 || g < 0) return -1;
    dist = (int *)tr__alloc(ctx, sizeof(int) * 2 * (size_t)n * (size_t)n + (size_t)n * (size_t)n);
    if (!dist) return -1;
    /* walk only the answer's path cells, from S to G */
    walk = (char *)(dist + 2 * (size_t)n * (size_t)n);
    for (i = 0; i < n * n; i++) walk[i] = answer[i] == 'o' || i == s || i == g ? ' ' : '#';
    tr__maze_bfs(walk, n, s, dist, dist + (size_t)n * (size_t)n);
    len = dist[g];
    tr__free(ctx, dist);
    return len;
}

/* A braided maze: a random spanning tree on a lattice of cells, with some extra walls opened. */
TR__FN int tr__maze_gen_once(tr__rng *rng, int n, int min_path, char *m, char *sol, int *dist, int *queue) {
    int or_ = (int)tr__rng_below(rng, 2), oc = (int)tr__rng_below(rng, 2);
    int cr = (n - or_ + 1) / 2, cc = (n - oc + 1) / 2, ncell = cr * cc, top = 0, i, s, g, cand = 0, len;
    int *stack = queue; /* reuse */
    double loop_p = 0.03 + 0.07 * tr__rng_uniform_d(rng);
    memset(m, '#', (size_t)n * (size_t)n);
    if (cr < 2 || cc < 2) return -1;
    /* iterative randomized depth-first search over the lattice cells */
    i = (int)tr__rng_below(rng, (uint64_t)ncell);
    m[(or_ + 2 * (i / cc)) * n + oc + 2 * (i % cc)] = ' ';
    stack[top++] = i;
    while (top > 0) {
        int cell = stack[top - 1], r = cell / cc, c = cell % cc, opts[4], no = 0, d;
        static const int dr[4] = {-1, 1, 0, 0}, dc[4] = {0, 0, -1, 1};
        for (d = 0; d < 4; d++) {
            int rr = r + dr[d], c2 = c + dc[d];
            if (rr < 0 || rr >= cr || c2 < 0 || c2 >= cc) continue;
            if (m[(or_ + 2 * rr) * n + oc + 2 * c2] == '#') opts[no++] = d;
        }
        if (!no) {
            top--;
            continue;
        }
        d = opts[tr__rng_below(rng, (uint64_t)no)];
        m[(or_ + 2 * r + dr[d]) * n + oc + 2 * c + dc[d]] = ' ';
        m[(or_ + 2 * (r + dr[d])) * n + oc + 2 * (c + dc[d])] = ' ';
        stack[top++] = (r + dr[d]) * cc + c + dc[d];
    }
    /* braid: open walls that separate two corridors */
    for (i = 0; i < n * n; i++) {
        int r = i / n, c = i % n;
        if (m[i] != '#') continue;
        if (((r - or_) % 2 == 0 && (c - oc) % 2 != 0 && c > 0 && c < n - 1 && m[i - 1] == ' ' && m[i + 1] == ' ') ||
            ((c - oc) % 2 == 0 && (r - or_) % 2 != 0 && r > 0 && r < n - 1 && m[i - n] == ' ' && m[i + n] == ' '))
            if (tr__rng_uniform_d(rng) < loop_p) m[i] = ' ';
    }
    /* start anywhere open; goal uniformly among the cells farther than min_path */
    do s = (int)tr__rng_below(rng, (uint64_t)n * (uint64_t)n);
    while (m[s] != ' ');
    tr__maze_bfs(m, n, s, dist, queue);
    for (i = 0; i < n * n; i++)
        if (dist[i] > min_path && dist[i] > 0) cand++;
    if (!cand) return -1;
    cand = (int)tr__rng_below(rng, (uint64_t)cand);
    for (g = 0; g < n * n; g++)
        if (dist[g] > min_path && dist[g] > 0 && cand-- == 0) break;
    m[s] = 'S';
    m[g] = 'G';
    len = tr__maze_label(m, n, g, dist, sol);
    return len;
}

TR__FN tr_status tr__maze_gen_rng(tr_ctx *ctx, tr__rng *rng, int n, int min_path, char *maze, char *sol, int *path_len, int *dist) {
    int attempt, len = -1;
    for (attempt = 0; attempt < 1000 && len < 0; attempt++) len = tr__maze_gen_once(rng, n, min_path, maze, sol, dist, dist + n * n);
    if (len < 0) return tr__err(ctx, TR_ERR_GENERIC, "maze: no %dx%d maze with a path longer than %d found (lower min_path)", n, n, min_path);
    if (path_len) *path_len = len;
    return TR_OK;
}

TRDEF tr_status tr_maze_generate(tr_ctx *ctx, uint64_t seed, uint64_t index, int n, int min_path, char *maze, char *solution, int *path_len) {
    tr__rng rng = tr__rng_kind(seed, TR__STREAM_MAZE_GEN, index);
    int *dist;
    tr_status st;
    if (n < 5 || n > 256 || !maze || !solution) return tr__err(ctx, TR_ERR_INVALID_ARG, "maze: size %d is outside 5..256", n);
    dist = (int *)tr__alloc(ctx, sizeof(int) * 2 * (size_t)n * (size_t)n);
    if (!dist) return TR_ERR_OUT_OF_MEMORY;
    st = tr__maze_gen_rng(ctx, &rng, n, min_path, maze, solution, path_len, dist);
    tr__free(ctx, dist);
    return st;
}

TRDEF void tr_maze_set_free(tr_ctx *ctx, tr_maze_set *s) {
    if (!s) return;
    tr__free(ctx, s->mazes);
    tr__free(ctx, s->solutions);
    tr__free(ctx, s->lines);
    memset(s, 0, sizeof *s);
}

TR__FN int tr__isqrt(size_t v) {
    size_t r = 0;
    while ((r + 1) * (r + 1) <= v) r++;
    return (r * r == v) ? (int)r : -1;
}

/* Checks one maze (and its solution, when given) and stores it as record out->count. */
TR__FN tr_status tr__maze_record(tr_ctx *ctx, const tr_read_options *o, const char *what, int64_t ln, const char *qs, const char *as, int *dist, tr_maze_set *out) {
    int side = out->n, cells = side * side, i, ns = 0, ng = 0, s = -1, g = -1;
    char *q = out->mazes + (size_t)out->count * cells, *a = out->solutions + (size_t)out->count * cells;
    for (i = 0; i < cells; i++) {
        const char *bad = NULL; /* (a pointer: the bad character may be NUL) */
        if (!tr__maze_token(qs[i]) || (o->puzzles_only && qs[i] == 'o')) bad = qs + i;
        else if (as && !tr__maze_token(as[i])) bad = as + i;
        if (bad) return tr__bad_record(ctx, o, what, ln, "character '%c' (0x%02x) at row %d, column %d is not in the charset \"%s\"", *bad ? *bad : '?', (unsigned char)*bad, i / side + 1, i % side + 1,
                                       o->puzzles_only ? "# SG" : TR_MAZE_CHARSET);
        if (qs[i] == 'S') ns++, s = i;
        if (qs[i] == 'G') ng++, g = i;
    }
    memcpy(q, qs, (size_t)cells);
    if (as) memcpy(a, as, (size_t)cells);
    else {
        if (ns != 1 || ng != 1) return tr__bad_record(ctx, o, what, ln, "a maze needs exactly one 'S' and one 'G' (found %d and %d)", ns, ng);
        tr__maze_bfs(q, side, s, dist, dist + cells);
        if (tr__maze_label(q, side, g, dist, a) < 0) return tr__bad_record(ctx, o, what, ln, "'G' cannot be reached from 'S'");
    }
    out->lines[out->count++] = ln;
    return TR_OK;
}

/* The set's arrays for up to cap mazes of side x side, and the parser's BFS and row buffers. */
TR__FN tr_status tr__maze_set_begin(tr_ctx *ctx, tr_maze_set *out, int side, int64_t cap, int **dist, char **block) {
    size_t cells = (size_t)side * (size_t)side;
    out->n = side;
    out->mazes = (char *)tr__alloc(ctx, (size_t)cap * cells);
    out->solutions = (char *)tr__alloc(ctx, (size_t)cap * cells);
    out->lines = (int64_t *)tr__alloc(ctx, (size_t)cap * sizeof *out->lines);
    *dist = (int *)tr__alloc(ctx, 2 * cells * sizeof **dist);
    *block = (char *)tr__alloc(ctx, cells);
    if (!out->mazes || !out->solutions || !out->lines || !*dist || !*block) return TR_ERR_OUT_OF_MEMORY;
    return TR_OK;
}

TRDEF tr_status tr_maze_parse(tr_ctx *ctx, const char *text, size_t len, const char *what, const tr_read_options *opt, tr_maze_set *out) {
    tr__lines L;
    tr_status st = TR_OK;
    const char *line;
    size_t n, cells = 0;
    int64_t cap, start = 0;
    int rows = 0, skipping = 0, side;
    int *dist = NULL;
    char *block = NULL;
    tr_read_options o = opt ? *opt : tr_read_options_default();
    if (!ctx || !out || (!text && len) || o.side < 0 || o.side == 1 || o.side > 4096) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_maze_parse: invalid argument");
    memset(out, 0, sizeof *out);
    if (!what) what = "<memory>";
    tr__lines_init(&L, text, len, 0);
    cap = tr__text_count_lines(&L.t);
    side = o.side ? o.side : -1;
    if (side > 0) {
        st = tr__maze_set_begin(ctx, out, side, cap, &dist, &block);
        cells = (size_t)side * (size_t)side;
    }
    for (;;) {
        const char *qs = NULL, *as = NULL;
        size_t qn = 0, an = 0;
        int more = st == TR_OK && tr__lines_next(&L, &line, &n);
        int64_t ln = L.lineno;
        if (st != TR_OK) break;
        if (!more || n == 0) { /* the end, or a blank line, ends a block of rows */
            if (rows > 0 && !skipping) st = tr__bad_record(ctx, &o, what, start, "incomplete maze: %d rows of %d", rows, side);
            rows = skipping = 0;
            if (!more) break;
            continue;
        }
        if (skipping) continue;
        if (L.csv) {
            tr__field f[16];
            if (!tr__lines_csv(ctx, &L, &o, what, line, n, f, &qs, &qn, &as, &an, &st)) continue;
        } else if (rows > 0 || (side > 0 && n == (size_t)side)) { /* a row of a maze written as `side` rows */
            if (n != (size_t)side) {
                st = tr__bad_record(ctx, &o, what, ln, "maze rows need %d characters, this one has %zu", side, n);
                rows = 0, skipping = 1;
                continue;
            }
            if (rows == 0) start = ln;
            memcpy(block + (size_t)rows * side, line, n);
            if (++rows < side) continue;
            rows = 0;
            qs = block, qn = cells, ln = start;
        } else {
            qs = line, qn = n;
            if (tr__isqrt(n) < 0 && n % 2 == 1 && tr__isqrt(n / 2) > 0 && line[n / 2] && strchr(",\t|;", line[n / 2])) qn = n / 2, as = line + qn + 1, an = qn;
        }
        if (o.puzzles_only) as = NULL, an = 0;
        if (side < 0) {
            side = tr__isqrt(qn);
            if (side < 2) { /* the side is still unknown: a later record may give it */
                side = -1;
                st = tr__bad_record(ctx, &o, what, ln, "a maze of %zu characters is not square", qn);
                continue;
            }
            if ((st = tr__maze_set_begin(ctx, out, side, cap, &dist, &block)) != TR_OK) break;
            cells = (size_t)side * (size_t)side;
        }
        if (qn != cells || (as && an != cells)) {
            st = tr__bad_record(ctx, &o, what, ln, "field '%s' has %zu characters, expected %zu (%dx%d)", qn != cells ? "question" : "answer", qn != cells ? qn : an, cells, side, side);
            continue;
        }
        st = tr__maze_record(ctx, &o, what, ln, qs, as, dist, out);
    }
    tr__free(ctx, dist);
    tr__free(ctx, block);
    if (st == TR_OK && out->count == 0 && !o.on_skip) st = tr__err(ctx, TR_ERR_FORMAT, "%s: no mazes", what);
    if (st != TR_OK) tr_maze_set_free(ctx, out);
    return st;
}

TRDEF tr_status tr_maze_read(tr_ctx *ctx, const char *path, tr_maze_set *out) {
    tr__text t;
    tr_status st;
    if (!ctx || !path || !out) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_maze_read: NULL argument");
    memset(out, 0, sizeof *out);
    if ((st = tr__text_open(ctx, path, &t)) != TR_OK) return st;
    st = tr_maze_parse(ctx, t.data, t.len, path, NULL, out);
    tr__text_close(ctx, &t);
    return st;
}

/* Mazes base + [i0, i1), each from its own random stream, with its thread's BFS buffers. */
typedef struct tr__maze_gen_args { tr_maze_set *out; int64_t base; uint64_t seed; int n, min_path; int *dist, *failed; } tr__maze_gen_args;
TR__FN void tr__maze_gen_range(void *arg, long i0, long i1) {
    const tr__maze_gen_args *g = (const tr__maze_gen_args *)arg;
    size_t cells = (size_t)g->n * (size_t)g->n;
    int *dist = g->dist + (size_t)tr__thread_id() * 2 * cells;
    int64_t k;
    for (k = g->base + i0; k < g->base + i1; k++) {
        int len = -1, attempt;
        tr__rng rng = tr__rng_kind(g->seed, TR__STREAM_MAZE_GEN, (uint64_t)k);
        for (attempt = 0; attempt < 1000 && len < 0; attempt++)
            len = tr__maze_gen_once(&rng, g->n, g->min_path, g->out->mazes + (size_t)k * cells, g->out->solutions + (size_t)k * cells, dist, dist + cells);
        if (len < 0) *g->failed = 1;
    }
}

TR__FN tr_status tr__maze_generate_set(tr_ctx *ctx, uint64_t seed, int64_t count, int n, int min_path, tr_progress_fn progress, void *user, tr_maze_set *out) {
    size_t cells = (size_t)n * (size_t)n;
    int nth = tr_ctx_num_threads(ctx);
    int *dist;
    int64_t c0;
    tr_status st = TR_OK;
    tr__maze_gen_args ga;
    memset(out, 0, sizeof *out);
    if (n < 5 || n > 256) return tr__err(ctx, TR_ERR_INVALID_ARG, "maze: size %d is outside 5..256", n);
    out->n = n;
    out->mazes = (char *)tr__alloc(ctx, (size_t)(count ? count : 1) * cells);
    out->solutions = (char *)tr__alloc(ctx, (size_t)(count ? count : 1) * cells);
    dist = (int *)tr__alloc(ctx, sizeof(int) * 2 * cells * (size_t)nth);
    if (!out->mazes || !out->solutions || !dist) {
        tr__free(ctx, dist);
        tr_maze_set_free(ctx, out);
        return TR_ERR_OUT_OF_MEMORY;
    }
    ga.out = out, ga.seed = seed, ga.n = n, ga.min_path = min_path, ga.dist = dist;
    for (c0 = 0; c0 < count && st == TR_OK; c0 += 256) {
        int64_t c1 = c0 + 256 < count ? c0 + 256 : count;
        int failed = 0;
        ga.base = c0, ga.failed = &failed;
        tr__par_for(nth, (long)(c1 - c0), 4, tr__maze_gen_range, &ga);
        if (failed) st = tr__err(ctx, TR_ERR_GENERIC, "maze: no %dx%d maze with a path longer than %d found (lower min_path)", n, n, min_path);
        else st = tr__progress(ctx, progress, user, "maze: generate", c1, count);
    }
    tr__free(ctx, dist);
    if (st != TR_OK) tr_maze_set_free(ctx, out);
    else out->count = count;
    return st;
}

TRDEF tr_maze_options tr_maze_options_default(void) {
    tr_maze_options o;
    memset(&o, 0, sizeof o);
    o.generate_train = 1000;
    o.generate_test = 1000;
    o.size = 30;
    o.min_path = 110;
    return o;
}

TR__FN tr_status tr__maze_fill(tr_ctx *ctx, const tr_maze_set *set, const int64_t *pick, int64_t count, int aug, tr_split *s) {
    int n = set->n, L = n * n, v, j;
    int64_t p;
    tr_status st;
    uint8_t *tq, *ta, *bq, *ba;
    if ((st = tr_split_init(ctx, s, L, count * (aug ? 8 : 1) + 1)) != TR_OK) return st;
    tq = (uint8_t *)tr__alloc(ctx, (size_t)L * 4);
    if (!tq) {
        tr_split_free(ctx, s);
        return TR_ERR_OUT_OF_MEMORY;
    }
    ta = tq + L;
    bq = ta + L;
    ba = bq + L;
    for (p = 0; p < count && st == TR_OK; p++) {
        int64_t src = pick ? pick[p] : p;
        const char *q = set->mazes + (size_t)src * (size_t)L, *a = set->solutions + (size_t)src * (size_t)L;
        for (j = 0; j < L; j++) {
            tq[j] = (uint8_t)tr__maze_token(q[j]);
            ta[j] = (uint8_t)tr__maze_token(a[j]);
        }
        for (v = 0; v < (aug ? 8 : 1) && st == TR_OK; v++) {
            tr_dihedral(v, tq, n, n, bq, NULL, NULL);
            tr_dihedral(v, ta, n, n, ba, NULL, NULL);
            st = tr_split_add_example(ctx, s, bq, ba);
            if (st == TR_OK) st = tr_split_end_puzzle(ctx, s, 0);
        }
        if (st == TR_OK) st = tr_split_end_group(ctx, s);
    }
    tr__free(ctx, tq);
    if (st != TR_OK) tr_split_free(ctx, s);
    return st;
}

TRDEF tr_status tr_maze_build_splits(tr_ctx *ctx, const tr_maze_options *o, tr_split *train, tr_split *test) {
    tr_maze_set a, b;
    int64_t *pick = NULL, n;
    tr_status st;
    if (!ctx || !o || !train || !test) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_maze_build_splits: NULL argument");
    memset(train, 0, sizeof *train);
    memset(test, 0, sizeof *test);
    memset(&b, 0, sizeof b);
    if (o->train_path) st = tr_maze_read(ctx, o->train_path, &a);
    else st = tr__maze_generate_set(ctx, o->seed, o->generate_train, o->size, o->min_path, o->progress, o->progress_user, &a);
    if (st != TR_OK) return st;
    if (o->test_path) st = tr_maze_read(ctx, o->test_path, &b);
    else st = tr__maze_generate_set(ctx, tr__mix64(o->seed ^ 0x7e57ull), o->generate_test, o->size, o->min_path, o->progress, o->progress_user, &b);
    if (st == TR_OK && b.n != a.n) st = tr__err(ctx, TR_ERR_FORMAT, "maze: train mazes are %dx%d, test mazes %dx%d", a.n, a.n, b.n, b.n);
    n = a.count;
    if (st == TR_OK && o->subsample_size > 0 && o->subsample_size < n) {
        st = tr__subsample(ctx, o->seed, n, o->subsample_size, &pick);
        n = o->subsample_size;
    }
    if (st == TR_OK) st = tr__maze_fill(ctx, &a, pick, n, o->aug, train);
    if (st == TR_OK) st = tr__progress(ctx, o->progress, o->progress_user, "maze: encode", 1, 2);
    if (st == TR_OK) st = tr__maze_fill(ctx, &b, NULL, b.count, 0, test);
    if (st != TR_OK) tr_split_free(ctx, train);
    tr__free(ctx, pick);
    tr_maze_set_free(ctx, &a);
    tr_maze_set_free(ctx, &b);
    return st;
}

TRDEF tr_status tr_maze_build(tr_ctx *ctx, const tr_maze_options *o, const char *out_dir, tr_build_summary *sum) {
    tr_split train, test;
    double t0 = tr__now();
    tr_status st;
    if (sum) memset(sum, 0, sizeof *sum);
    if (!out_dir) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_maze_build: out_dir is NULL");
    st = tr_maze_build_splits(ctx, o, &train, &test);
    if (st != TR_OK) return st;
    st = tr__write_splits(ctx, out_dir, &train, &test, 6, sum);
    tr_split_free(ctx, &train);
    tr_split_free(ctx, &test);
    if (sum) sum->seconds = tr__now() - t0;
    return st;
}

/* ---- ARC -------------------------------------------------------------------------------- */
TRDEF void tr_arc_augment(int tid, const uint8_t perm[10], const uint8_t *grid, int h, int w, uint8_t *out, int *out_h, int *out_w) {
    uint8_t tmp[TR_ARC_MAX_GRID * TR_ARC_MAX_GRID];
    int i;
    for (i = 0; i < h * w; i++) tmp[i] = grid[i] < 10 ? perm[grid[i]] : grid[i];
    tr_dihedral(tid, tmp, h, w, out, out_h, out_w);
}

TRDEF void tr_arc_inverse_augment(int tid, const uint8_t perm[10], const uint8_t *grid, int h, int w, uint8_t *out, int *out_h, int *out_w) {
    uint8_t inv[10];
    int i, oh, ow;
    for (i = 0; i < 10; i++) inv[i] = (uint8_t)i;
    for (i = 0; i < 10; i++)
        if (perm[i] < 10) inv[perm[i]] = (uint8_t)i;
    tr_dihedral_inverse(tid, grid, h, w, out, &oh, &ow);
    for (i = 0; i < oh * ow; i++)
        if (out[i] < 10) out[i] = inv[out[i]];
    if (out_h) *out_h = oh;
    if (out_w) *out_w = ow;
}

TRDEF tr_status tr_arc_parse_name(tr_ctx *ctx, const char *name, char *base, size_t cap, int *tid, uint8_t perm[10]) {
    const char *a, *b;
    size_t bl;
    int i, seen = 0;
    if (!name || !base || !cap || !tid || !perm) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_arc_parse_name: NULL argument");
    a = strstr(name, TR_ARC_SEP);
    *tid = 0;
    for (i = 0; i < 10; i++) perm[i] = (uint8_t)i;
    bl = a ? (size_t)(a - name) : strlen(name);
    if (bl >= cap) return tr__err(ctx, TR_ERR_INVALID_ARG, "puzzle name '%s': the task name does not fit %zu bytes", name, cap);
    memcpy(base, name, bl);
    base[bl] = 0;
    if (!a) return TR_OK;
    b = strstr(a + 3, TR_ARC_SEP);
    if (!b || a[3] != 't' || b - (a + 4) != 1 || a[4] < '0' || a[4] > '7' || strlen(b + 3) != 10)
        return tr__err(ctx, TR_ERR_FORMAT, "puzzle name '%s': expected <task>|||t<0-7>|||<10 digits>", name);
    *tid = a[4] - '0';
    for (i = 0; i < 10; i++) {
        int d = b[3 + i] - '0';
        if (d < 0 || d > 9 || (seen & (1 << d))) return tr__err(ctx, TR_ERR_FORMAT, "puzzle name '%s': the colour map is not a permutation of 0-9", name);
        seen |= 1 << d;
        perm[i] = (uint8_t)d;
    }
    return TR_OK;
}

TRDEF int tr_arc_crop(const int32_t *tok, uint8_t *grid, int *h, int *w) {
    int nr, c, num_c = TR_ARC_MAX_GRID, best = 0, bh = 0, bw = 0, i, j;
    for (nr = 1; nr <= TR_ARC_MAX_GRID; nr++) {
        for (c = 1; c <= num_c; c++) {
            int32_t x = tok[(nr - 1) * TR_ARC_MAX_GRID + c - 1];
            if (x < 2 || x > 11) {
                num_c = c - 1;
                break;
            }
        }
        if (nr * num_c > best) {
            best = nr * num_c;
            bh = nr;
            bw = num_c;
        }
    }
    for (i = 0; i < bh; i++)
        for (j = 0; j < bw; j++) grid[i * bw + j] = (uint8_t)(tok[i * TR_ARC_MAX_GRID + j] - 2);
    *h = bh;
    *w = bw;
    return best > 0;
}

TRDEF void tr_arc_encode(const uint8_t *grid, int h, int w, int r, int c, uint8_t canvas[900]) {
    int i, j;
    memset(canvas, 0, 900);
    for (i = 0; i < h; i++)
        for (j = 0; j < w; j++) canvas[(r + i) * 30 + c + j] = (uint8_t)(grid[i * w + j] + 2);
    if (r + h < 30)
        for (j = c; j < c + w; j++) canvas[(r + h) * 30 + j] = 1;
    if (c + w < 30)
        for (i = r; i < r + h; i++) canvas[i * 30 + c + w] = 1;
}

TRDEF tr_arc_options tr_arc_options_default(void) {
    tr_arc_options o;
    memset(&o, 0, sizeof o);
    o.test_set_name = "evaluation";
    o.seed = 42;
    o.num_aug = 1000;
    o.puzzle_identifiers_start = 1;
    return o;
}

typedef struct tr__arc_task {
    char name[128];
    int subset, is_test;
    tr_arc_task task;       /* test outputs that the file lacks are [[0]], the reference's stand-in */
    char *json;             /* the raw task, for test_puzzles.json (test subset only) */
    int nver;
    uint8_t *ver;           /* [nver * 11]: transform id, then the colour map */
    int32_t *ids;           /* [nver] puzzle identifiers */
} tr__arc_task;

TR__FN void tr__json_write(tr__sb *sb, const tr_json *v) {
    size_t i;
    switch (v->type) {
    case TR_JSON_NULL: tr__sb_printf(sb, "null"); break;
    case TR_JSON_BOOL: tr__sb_printf(sb, v->boolean ? "true" : "false"); break;
    case TR_JSON_NUMBER: {
        char b[48];
        tr__json_number_text(b, v->number);
        tr__sb_printf(sb, "%s", b);
        break;
    }
    case TR_JSON_STRING: tr__sb_json_string(sb, v->string); break;
    case TR_JSON_ARRAY:
        tr__sb_printf(sb, "[");
        for (i = 0; i < v->count; i++) {
            if (i) tr__sb_printf(sb, ", ");
            tr__json_write(sb, &v->items[i]);
        }
        tr__sb_printf(sb, "]");
        break;
    case TR_JSON_OBJECT:
        tr__sb_printf(sb, "{");
        for (i = 0; i < v->count; i++) {
            if (i) tr__sb_printf(sb, ", ");
            tr__sb_json_string(sb, v->keys[i]);
            tr__sb_printf(sb, ": ");
            tr__json_write(sb, &v->items[i]);
        }
        tr__sb_printf(sb, "}");
        break;
    }
}

/* Reads a grid into out; NULL, or why g is not one (in buf). */
TR__FN const char *tr__arc_grid(const tr_json *g, tr_arc_grid *out, char *buf, size_t cap) {
    size_t i, j, w;
    if (!g || g->type != TR_JSON_ARRAY || g->count == 0) return "expected a non-empty list of rows";
    if (g->items[0].type != TR_JSON_ARRAY || g->items[0].count == 0) return "row 0 is not a non-empty list";
    w = g->items[0].count;
    if (g->count > TR_ARC_MAX_GRID || w > TR_ARC_MAX_GRID) {
        snprintf(buf, cap, "the grid is %zux%zu, the limit is %dx%d", g->count, w, TR_ARC_MAX_GRID, TR_ARC_MAX_GRID);
        return buf;
    }
    for (i = 0; i < g->count; i++) {
        const tr_json *row = &g->items[i];
        if (row->type != TR_JSON_ARRAY || row->count != w) {
            snprintf(buf, cap, "row %zu has %zu cells, row 0 has %zu", i, row->type == TR_JSON_ARRAY ? row->count : 0, w);
            return buf;
        }
        for (j = 0; j < w; j++) {
            const tr_json *c = &row->items[j];
            if (c->type != TR_JSON_NUMBER || c->number != floor(c->number) || c->number < 0 || c->number > 9) {
                snprintf(buf, cap, "cell (%zu, %zu) is not a colour 0-9", i, j);
                return buf;
            }
            out->cells[i * w + j] = (uint8_t)c->number;
        }
    }
    out->h = (int)g->count;
    out->w = (int)w;
    return NULL;
}

TRDEF tr_status tr_arc_grid_from_json(tr_ctx *ctx, const tr_json *g, const char *what, tr_arc_grid *out) {
    char buf[96];
    const char *why;
    if (!ctx || !out) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_arc_grid_from_json: NULL argument");
    if ((why = tr__arc_grid(g, out, buf, sizeof buf)) == NULL) return TR_OK;
    out->h = out->w = 0;
    return tr__err(ctx, TR_ERR_FORMAT, "%s: %s", what ? what : "grid", why);
}

TRDEF void tr_arc_task_free(tr_ctx *ctx, tr_arc_task *t) {
    if (!t) return;
    tr__free(ctx, t->pairs);
    memset(t, 0, sizeof *t);
}

TRDEF tr_status tr_arc_task_from_json(tr_ctx *ctx, const tr_json *task, const char *what, const tr_read_options *opt, tr_arc_task *out) {
    tr_read_options o = opt ? *opt : tr_read_options_default();
    const tr_json *tr = tr_json_get(task, "train"), *te = tr_json_get(task, "test");
    int64_t line = task ? task->line : 0;
    tr_status st = TR_OK;
    int k, n;
    if (!ctx || !out) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_arc_task_from_json: NULL argument");
    memset(out, 0, sizeof *out);
    if (!what) what = "<memory>";
    if (!te || te->type != TR_JSON_ARRAY || (tr && tr->type != TR_JSON_ARRAY))
        return tr__bad_record(ctx, &o, what, line, "expected an object with a list 'test' (and optionally 'train')");
    out->num_train = tr ? (int)tr->count : 0;
    out->num_test = (int)te->count;
    n = out->num_train + out->num_test;
    if (n == 0) return o.on_skip ? TR_OK : tr__bad_record(ctx, &o, what, line, "the task has no pairs");
    out->pairs = (tr_arc_pair *)tr__calloc(ctx, (size_t)n, sizeof *out->pairs);
    if (!out->pairs) {
        memset(out, 0, sizeof *out);
        return TR_ERR_OUT_OF_MEMORY;
    }
    for (k = 0; st == TR_OK && k < n; k++) {
        const tr_json *ex = k < out->num_train ? &tr->items[k] : &te->items[k - out->num_train], *g;
        const char *part = k < out->num_train ? "train" : "test", *why = NULL, *field = "input";
        int idx = k < out->num_train ? k : k - out->num_train;
        tr_arc_pair *p = &out->pairs[k];
        char buf[96];
        p->line = ex->line;
        if (ex->type != TR_JSON_OBJECT) why = "expected an object", field = NULL;
        else if ((why = tr__arc_grid(tr_json_get(ex, "input"), &p->input, buf, sizeof buf)) == NULL) {
            field = "output";
            g = tr_json_get(ex, "output");
            if (g || k < out->num_train) why = (g && g->type == TR_JSON_NULL && k >= out->num_train) ? NULL : tr__arc_grid(g, &p->output, buf, sizeof buf);
        }
        if (why) {
            memset(p, 0, sizeof *p);
            p->line = ex->line;
            st = tr__bad_record(ctx, &o, what, ex->line, "%s[%d]%s%s: %s", part, idx, field ? "." : "", field ? field : "", why);
        }
    }
    if (st != TR_OK) tr_arc_task_free(ctx, out);
    return st;
}

TRDEF tr_status tr_arc_task_parse(tr_ctx *ctx, const char *text, size_t len, const char *what, tr_arc_task *out) {
    tr_json *root = NULL;
    tr_status st;
    if (!ctx || !out) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_arc_task_parse: NULL argument");
    memset(out, 0, sizeof *out);
    if ((st = tr_json_parse(ctx, text, len, what, &root)) != TR_OK) return st;
    st = tr_arc_task_from_json(ctx, root, what, NULL, out);
    tr_json_free(ctx, root);
    return st;
}

TR__FN void tr__arc_task_free(tr_ctx *ctx, tr__arc_task *t) {
    tr_arc_task_free(ctx, &t->task);
    tr__free(ctx, t->json);
    tr__free(ctx, t->ver);
    tr__free(ctx, t->ids);
    memset(t, 0, sizeof *t);
}

/* Reads one task file for the builder (the raw JSON kept for test tasks). */
TR__FN tr_status tr__arc_load_task(tr_ctx *ctx, const char *path, tr__arc_task *t) {
    char *text = NULL;
    size_t len;
    tr_json *root = NULL;
    tr_status st;
    int k;
    if ((st = tr__read_file_capped(ctx, path, (size_t)64 << 20, &text, &len)) != TR_OK) return st;
    st = tr_json_parse(ctx, text, len, path, &root);
    tr__free(ctx, text);
    if (st != TR_OK) return st;
    st = tr_arc_task_from_json(ctx, root, path, NULL, &t->task);
    for (k = t->task.num_train; st == TR_OK && k < t->task.num_train + t->task.num_test; k++) {
        tr_arc_grid *g = &t->task.pairs[k].output;
        if (g->h == 0) g->h = g->w = 1, g->cells[0] = 0;
    }
    if (st == TR_OK && t->is_test) {
        tr__sb sb;
        tr__sb_init(&sb, ctx);
        tr__json_write(&sb, root);
        st = tr__sb_status(&sb);
        if (st == TR_OK) t->json = sb.data;
        else tr__sb_free(&sb);
    }
    tr_json_free(ctx, root);
    return st;
}

/* 128-bit hashes for the augmentation dedup. */
typedef struct tr__h128 {
    uint64_t a, b;
} tr__h128;

TR__FN tr__h128 tr__hash_grid(const uint8_t *g, int h, int w) {
    tr__h128 r;
    uint64_t x = 0, a = tr__mix64(0x1234u + (uint64_t)h * 31 + (uint64_t)w), b = tr__mix64(0x9876u + (uint64_t)w * 37 + (uint64_t)h);
    int n = h * w, i;
    for (i = 0; i < n; i += 8) {
        int k, m = n - i < 8 ? n - i : 8;
        x = 0;
        for (k = 0; k < m; k++) x |= (uint64_t)g[i + k] << (8 * k);
        a = tr__mix64(a ^ x);
        b = tr__mix64(b + x * 0x9e3779b97f4a7c15ull);
    }
    r.a = a;
    r.b = b;
    return r;
}

TR__FN int tr__h128_cmp(const void *p, const void *q) {
    const tr__h128 *x = (const tr__h128 *)p, *y = (const tr__h128 *)q;
    if (x->a != y->a) return x->a < y->a ? -1 : 1;
    if (x->b != y->b) return x->b < y->b ? -1 : 1;
    return 0;
}

/* Hash of a whole augmented task (all its pairs, order-free), as the reference's puzzle_hash. */
TR__FN tr__h128 tr__arc_version_hash(const tr__arc_task *t, const uint8_t *ver, tr__h128 *ex, uint8_t *buf) {
    int k, n = t->task.num_train + t->task.num_test, oh, ow;
    tr__h128 r;
    for (k = 0; k < n; k++) {
        const tr_arc_pair *pr = &t->task.pairs[k];
        tr__h128 hi, ho;
        tr_arc_augment(ver[0], ver + 1, pr->input.cells, pr->input.h, pr->input.w, buf, &oh, &ow);
        hi = tr__hash_grid(buf, oh, ow);
        tr_arc_augment(ver[0], ver + 1, pr->output.cells, pr->output.h, pr->output.w, buf, &oh, &ow);
        ho = tr__hash_grid(buf, oh, ow);
        ex[k].a = tr__mix64(hi.a ^ tr__mix64(ho.a + 1));
        ex[k].b = tr__mix64(hi.b + 0x51ull * tr__mix64(ho.b ^ 7));
    }
    qsort(ex, (size_t)n, sizeof *ex, tr__h128_cmp);
    r.a = 0x243f6a8885a308d3ull;
    r.b = 0x13198a2e03707344ull;
    for (k = 0; k < n; k++) {
        r.a = tr__mix64(r.a ^ ex[k].a);
        r.b = tr__mix64(r.b ^ ex[k].b);
    }
    return r;
}

/* Up to num_aug unique augmented versions (plus the original), at most 5 * num_aug trials. */
TR__FN int tr__arc_augment_task(tr__arc_task *t, uint64_t seed, uint64_t task_index, int num_aug, tr__h128 *table, int table_cap, tr__h128 *ex, uint8_t *buf) {
    tr__rng rng = tr__rng_kind(seed, TR__STREAM_ARC_AUG, task_index);
    int trial, i, mask = table_cap - 1;
    uint8_t *v = t->ver;
    tr__h128 h;
    for (i = 0; i < table_cap; i++) table[i].a = table[i].b = 0;
    v[0] = 0;
    for (i = 0; i < 10; i++) v[1 + i] = (uint8_t)i;
    t->nver = 1;
    h = tr__arc_version_hash(t, v, ex, buf);
    if (!h.a && !h.b) h.b = 1;
    table[h.a & (uint64_t)mask] = h;
    for (trial = 0; trial < 5 * num_aug && t->nver < num_aug + 1; trial++) {
        uint8_t *nv = t->ver + (size_t)t->nver * 11;
        int slot;
        nv[0] = (uint8_t)tr__rng_below(&rng, 8);
        nv[1] = 0;
        for (i = 1; i < 10; i++) nv[1 + i] = (uint8_t)i;
        tr__shuffle_u8(&rng, nv + 2, 9);
        h = tr__arc_version_hash(t, nv, ex, buf);
        if (!h.a && !h.b) h.b = 1;
        for (slot = (int)(h.a & (uint64_t)mask);; slot = (slot + 1) & mask) {
            if (!table[slot].a && !table[slot].b) {
                table[slot] = h;
                t->nver++;
                break;
            }
            if (table[slot].a == h.a && table[slot].b == h.b) break; /* a duplicate */
        }
    }
    return t->nver;
}

TR__FN int tr__strcmp_p(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Names of the directory entries that end in `suffix` (files) or are directories (suffix NULL), sorted. */
TR__FN tr_status tr__list_dir(tr_ctx *ctx, const char *dir, const char *suffix, char ***out, int *count) {
#if TR__POSIX
    DIR *d = opendir(dir);
    struct dirent *e;
    char **v = NULL;
    int n = 0, cap = 0;
    tr_status st = TR_OK;
    *out = NULL;
    *count = 0;
    if (!d) return tr__err(ctx, TR_ERR_IO, "cannot open directory '%s': %s", dir, strerror(errno));
    while ((e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name);
        int keep;
        char *full;
        struct stat sb;
        if (e->d_name[0] == '.') continue;
        full = tr__path3(ctx, dir, e->d_name, NULL);
        if (!full) {
            st = TR_ERR_OUT_OF_MEMORY;
            break;
        }
        keep = stat(full, &sb) == 0 && (suffix ? (S_ISREG(sb.st_mode) && l > strlen(suffix) && !strcmp(e->d_name + l - strlen(suffix), suffix)) : S_ISDIR(sb.st_mode));
        tr__free(ctx, full);
        if (!keep) continue;
        if (n == cap) {
            int nc = cap ? cap * 2 : 64;
            char **nv = (char **)tr__alloc(ctx, (size_t)nc * sizeof *nv);
            if (!nv) {
                st = TR_ERR_OUT_OF_MEMORY;
                break;
            }
            if (v) memcpy(nv, v, (size_t)n * sizeof *nv);
            tr__free(ctx, v);
            v = nv;
            cap = nc;
        }
        v[n] = (char *)tr__alloc(ctx, l + 1);
        if (!v[n]) {
            st = TR_ERR_OUT_OF_MEMORY;
            break;
        }
        memcpy(v[n++], e->d_name, l + 1);
    }
    closedir(d);
    if (st != TR_OK) {
        while (n > 0) tr__free(ctx, v[--n]);
        tr__free(ctx, v);
        return st;
    }
    if (n) qsort(v, (size_t)n, sizeof *v, tr__strcmp_p);
    *out = v;
    *count = n;
    return TR_OK;
#else
    TR__UNUSED(dir);
    TR__UNUSED(suffix);
    *out = NULL;
    *count = 0;
    return tr__err(ctx, TR_ERR_UNSUPPORTED, "listing directories is not implemented on this platform");
#endif
}

TR__FN void tr__free_list(tr_ctx *ctx, char **v, int n) {
    int i;
    for (i = 0; i < n; i++) tr__free(ctx, v[i]);
    tr__free(ctx, v);
}

/* A name -> id table (open addressing over tr__alloc'ed strings). */
typedef struct tr__names {
    char **names; /* by id */
    int64_t n, cap;
    int64_t *slots; /* id + 1, 0 = empty */
    int64_t nslots;
} tr__names;

TR__FN uint64_t tr__str_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    while (*s) h = (h ^ (unsigned char)*s++) * 1099511628211ull;
    return tr__mix64(h);
}

/* The slot of `name`: the one that holds it, else the empty one where it would go (nslots > 0). */
TR__FN int64_t tr__names_slot(const tr__names *t, const char *name) {
    int64_t i;
    for (i = (int64_t)(tr__str_hash(name) & (uint64_t)(t->nslots - 1)); t->slots[i]; i = (i + 1) & (t->nslots - 1))
        if (!strcmp(t->names[t->slots[i] - 1], name)) break;
    return i;
}

/* The id of name in t, or -1 (tr__names_id adds it). */
TR__FN int64_t tr__names_find(const tr__names *t, const char *name) {
    return t->nslots ? t->slots[tr__names_slot(t, name)] - 1 : -1;
}

/* The id of `name`, adding it when new; -1 on allocation failure. */
TR__FN int64_t tr__names_id(tr_ctx *ctx, tr__names *t, const char *name) {
    int64_t i, id;
    size_t l;
    if ((t->n + 1) * 2 > t->nslots) {
        int64_t ns = t->nslots ? t->nslots * 2 : 1024, k;
        int64_t *sl = (int64_t *)tr__calloc(ctx, (size_t)ns, sizeof *sl);
        if (!sl) return -1;
        for (k = 0; k < t->n; k++) {
            int64_t j = (int64_t)(tr__str_hash(t->names[k]) & (uint64_t)(ns - 1));
            while (sl[j]) j = (j + 1) & (ns - 1);
            sl[j] = k + 1;
        }
        tr__free(ctx, t->slots);
        t->slots = sl;
        t->nslots = ns;
    }
    i = tr__names_slot(t, name);
    if (t->slots[i]) return t->slots[i] - 1;
    if (t->n == t->cap) {
        int64_t nc = t->cap ? t->cap * 2 : 1024;
        char **nv = (char **)tr__alloc(ctx, (size_t)nc * sizeof *nv);
        if (!nv) return -1;
        if (t->names) memcpy(nv, t->names, (size_t)t->n * sizeof *nv);
        tr__free(ctx, t->names);
        t->names = nv;
        t->cap = nc;
    }
    l = strlen(name);
    t->names[t->n] = (char *)tr__alloc(ctx, l + 1);
    if (!t->names[t->n]) return -1;
    memcpy(t->names[t->n], name, l + 1);
    id = t->n++;
    t->slots[i] = id + 1;
    return id;
}

TR__FN void tr__names_free(tr_ctx *ctx, tr__names *t) {
    int64_t i;
    for (i = 0; i < t->n; i++) tr__free(ctx, t->names[i]);
    tr__free(ctx, t->names);
    tr__free(ctx, t->slots);
    memset(t, 0, sizeof *t);
}

TR__FN void tr__arc_version_name(const tr__arc_task *t, int v, char *out, size_t cap) {
    const uint8_t *ver = t->ver + (size_t)v * 11;
    int i;
    size_t o;
    if (v == 0) {
        snprintf(out, cap, "%s", t->name);
        return;
    }
    o = (size_t)snprintf(out, cap, "%s%st%d%s", t->name, TR_ARC_SEP, ver[0], TR_ARC_SEP);
    for (i = 0; i < 10 && o + 1 < cap; i++) out[o++] = (char)('0' + ver[1 + i]);
    out[o] = 0;
}

/* Writes one split of the ARC build, streaming inputs/labels to disk. split 0 = train, 1 = test. */
TR__FN tr_status tr__arc_write_split(tr_ctx *ctx, const tr_arc_options *o, const char *out_dir, int split, tr__arc_task *tasks, int ntasks, int64_t num_ids, tr_build_summary *sum) {
    int64_t nex = 0, npz = 0, ngr = 0, k, e, p = 0, g = 0;
    int t, v;
    int32_t *pid = NULL, *pidx = NULL, *gidx = NULL;
    char *splitdir = NULL, *path = NULL, *path_in = NULL, *path_lab = NULL;
    tr__npyw wi, wl;
    tr_status st = TR_OK;
    uint8_t ci[900], cl[900], gi[900], go[900];
    const char *sname = split ? "test" : "train";
    int wi_open = 0, wl_open = 0;
    for (t = 0; t < ntasks; t++) {
        int n = split ? (tasks[t].is_test ? tasks[t].task.num_test : 0) : (tasks[t].is_test ? tasks[t].task.num_train : tasks[t].task.num_train + tasks[t].task.num_test);
        if (split && !tasks[t].is_test) continue;
        nex += (int64_t)n * tasks[t].nver;
        npz += tasks[t].nver;
        ngr++;
    }
    if (split && ngr == 0) return TR_OK; /* no test subset: no test split, as the reference */
    if (nex > INT32_MAX) return tr__err(ctx, TR_ERR_OVERFLOW, "arc: the %s split would hold %lld examples, more than int32 offsets allow", sname, (long long)nex);
    pid = (int32_t *)tr__alloc(ctx, (size_t)(npz + 1) * 4);
    pidx = (int32_t *)tr__alloc(ctx, (size_t)(npz + 1) * 4);
    gidx = (int32_t *)tr__alloc(ctx, (size_t)(ngr + 1) * 4);
    splitdir = tr__path3(ctx, out_dir, sname, NULL);
    if (!pid || !pidx || !gidx || !splitdir) {
        st = TR_ERR_OUT_OF_MEMORY;
        goto done;
    }
    if ((st = tr__mkdir_p(ctx, splitdir)) != TR_OK) goto done;
    {
        int64_t shape[2];
        shape[0] = nex;
        shape[1] = 900;
        /* the writers keep their path until they end */
        path_in = tr__path3(ctx, splitdir, "all__inputs.npy", NULL);
        path_lab = tr__path3(ctx, splitdir, "all__labels.npy", NULL);
        if (!path_in || !path_lab) {
            st = TR_ERR_OUT_OF_MEMORY;
            goto done;
        }
        st = tr__npyw_begin(ctx, &wi, path_in, TR_NPY_U8, 2, shape);
        wi_open = 1;
        if (st != TR_OK) goto done;
        st = tr__npyw_begin(ctx, &wl, path_lab, TR_NPY_U8, 2, shape);
        wl_open = 1;
        if (st != TR_OK) goto done;
    }
    pidx[0] = 0;
    gidx[0] = 0;
    e = 0;
    for (t = 0; t < ntasks && st == TR_OK; t++) {
        tr__arc_task *tk = &tasks[t];
        int first = split ? tk->task.num_train : 0, last = split ? tk->task.num_train + tk->task.num_test : (tk->is_test ? tk->task.num_train : tk->task.num_train + tk->task.num_test);
        if (split && !tk->is_test) continue;
        for (v = 0; v < tk->nver && st == TR_OK; v++) {
            const uint8_t *ver = tk->ver + (size_t)v * 11;
            tr__rng rng = tr__rng_kind(o->seed, TR__STREAM_ARC_TRANSLATE + (uint64_t)split, (uint64_t)p);
            int nexp = last - first, keep = nexp > 0 ? (int)tr__rng_below(&rng, (uint64_t)nexp) : 0, x;
            for (x = first; x < last && st == TR_OK; x++) {
                int hi, wi_, ho, wo, r = 0, c = 0;
                const tr_arc_pair *pr = &tk->task.pairs[x];
                tr_arc_augment(ver[0], ver + 1, pr->input.cells, pr->input.h, pr->input.w, gi, &hi, &wi_);
                tr_arc_augment(ver[0], ver + 1, pr->output.cells, pr->output.h, pr->output.w, go, &ho, &wo);
                if (split == 0 && x - first != keep) { /* translation augmentation, train only */
                    r = (int)tr__rng_below(&rng, (uint64_t)(TR_ARC_MAX_GRID - TR__MAX(hi, ho) + 1));
                    c = (int)tr__rng_below(&rng, (uint64_t)(TR_ARC_MAX_GRID - TR__MAX(wi_, wo) + 1));
                }
                tr_arc_encode(gi, hi, wi_, r, c, ci);
                tr_arc_encode(go, ho, wo, r, c, cl);
                st = tr__npyw_write(&wi, ci, 900);
                if (st == TR_OK) st = tr__npyw_write(&wl, cl, 900);
                e++;
            }
            pid[p] = tk->ids[v];
            pidx[++p] = (int32_t)e;
        }
        gidx[++g] = (int32_t)p;
        if (st == TR_OK && (t % 16 == 15 || t == ntasks - 1)) st = tr__progress(ctx, o->progress, o->progress_user, split ? "arc: write test" : "arc: write train", t + 1, ntasks);
    }
    if (st == TR_OK) {
        st = tr__npyw_end(ctx, &wi, 1);
        wi_open = 0;
        if (st == TR_OK) st = tr__npyw_end(ctx, &wl, 1);
        wl_open = 0;
    }
    for (k = 0; k < 3 && st == TR_OK; k++) {
        static const char *nm[3] = {"all__puzzle_identifiers.npy", "all__puzzle_indices.npy", "all__group_indices.npy"};
        int64_t shape[1];
        tr__free(ctx, path);
        if (!(path = tr__path3(ctx, splitdir, nm[k], NULL))) {
            st = TR_ERR_OUT_OF_MEMORY;
            break;
        }
        shape[0] = k == 0 ? npz : k == 1 ? npz + 1 : ngr + 1;
        st = tr_npy_save(ctx, path, TR_NPY_I32, 1, shape, k == 0 ? pid : k == 1 ? pidx : gidx);
    }
    if (st == TR_OK) {
        tr_dataset_meta m = tr_dataset_meta_default();
        m.vocab_size = 12;
        m.seq_len = 900;
        m.num_puzzle_identifiers = num_ids;
        m.total_groups = ngr;
        m.total_puzzles = npz;
        m.mean_puzzle_examples = npz ? (double)nex / (double)npz : 0.0;
        st = tr__write_meta(ctx, splitdir, &m);
    }
    if (st == TR_OK && sum) {
        sum->examples[split] = nex;
        sum->puzzles[split] = npz;
        sum->groups[split] = ngr;
    }
done:
    if (wi_open) tr__npyw_end(ctx, &wi, 0);
    if (wl_open) tr__npyw_end(ctx, &wl, 0);
    tr__free(ctx, path);
    tr__free(ctx, path_in);
    tr__free(ctx, path_lab);
    tr__free(ctx, splitdir);
    tr__free(ctx, pid);
    tr__free(ctx, pidx);
    tr__free(ctx, gidx);
    return st;
}

/* Tasks base + [i0, i1) augmented, each on its own random stream, with its thread's tables. */
typedef struct tr__arc_aug_args { tr__arc_task *tasks; uint64_t seed; int base, num_aug, tcap, maxpairs; tr__h128 *tables, *exh; uint8_t *bufs; } tr__arc_aug_args;
TR__FN void tr__arc_aug_range(void *arg, long i0, long i1) {
    const tr__arc_aug_args *a = (const tr__arc_aug_args *)arg;
    size_t tid = (size_t)tr__thread_id();
    long t;
    for (t = a->base + i0; t < a->base + i1; t++)
        tr__arc_augment_task(&a->tasks[t], a->seed, (uint64_t)t, a->num_aug, a->tables + tid * (size_t)a->tcap, a->tcap, a->exh + tid * (size_t)a->maxpairs, a->bufs + tid * 900);
}

TRDEF tr_status tr_arc_build(tr_ctx *ctx, const tr_arc_options *o, const char *out_dir, tr_build_summary *sum) {
    char **subdirs = NULL, **subnames = NULL;
    int nsub = 0, capsub = 0, i, j, ntasks = 0, t;
    tr__arc_task *tasks = NULL;
    tr__names names;
    tr_status st = TR_OK;
    double t0 = tr__now();
    int64_t num_ids = 0;
    memset(&names, 0, sizeof names);
    if (sum) memset(sum, 0, sizeof *sum);
    if (!ctx || !o || !out_dir || o->num_input_dirs < 1 || !o->input_dirs) return tr__err(ctx, TR_ERR_INVALID_ARG, "arc: need at least one input directory and an output directory");
    if (o->num_aug < 0 || o->num_aug > 100000) return tr__err(ctx, TR_ERR_INVALID_ARG, "arc: num_aug %d is outside 0..100000", o->num_aug);
    if (o->puzzle_identifiers_start < 1) return tr__err(ctx, TR_ERR_INVALID_ARG, "arc: puzzle_identifiers_start must be >= 1 (0 is <blank>)");
    /* 1. subsets: a directory of *.json is a subset; otherwise each sub-directory holding *.json is */
    for (i = 0; i < o->num_input_dirs && st == TR_OK; i++) {
        char **files = NULL, **dirs = NULL;
        int nf = 0, nd = 0;
        if ((st = tr__list_dir(ctx, o->input_dirs[i], ".json", &files, &nf)) != TR_OK) break;
        tr__free_list(ctx, files, nf);
        if (nf == 0 && (st = tr__list_dir(ctx, o->input_dirs[i], NULL, &dirs, &nd)) != TR_OK) break;
        for (j = 0; j < (nf ? 1 : nd) && st == TR_OK; j++) {
            char *full = nf ? tr__path3(ctx, o->input_dirs[i], NULL, NULL) : tr__path3(ctx, o->input_dirs[i], dirs[j], NULL), *nm;
            const char *base;
            size_t bl;
            if (!full) {
                st = TR_ERR_OUT_OF_MEMORY;
                break;
            }
            bl = strlen(full);
            while (bl > 1 && full[bl - 1] == '/') full[--bl] = 0;
            base = strrchr(full, '/') ? strrchr(full, '/') + 1 : full;
            if (!nf) { /* keep only sub-directories that hold tasks */
                char **ff = NULL;
                int n2 = 0;
                st = tr__list_dir(ctx, full, ".json", &ff, &n2);
                tr__free_list(ctx, ff, n2);
                if (st != TR_OK || n2 == 0) {
                    tr__free(ctx, full);
                    continue;
                }
            }
            if (nsub == capsub) {
                int nc = capsub ? capsub * 2 : 16;
                char **a = (char **)tr__alloc(ctx, (size_t)nc * sizeof *a), **b = (char **)tr__alloc(ctx, (size_t)nc * sizeof *b);
                if (!a || !b) {
                    tr__free(ctx, a);
                    tr__free(ctx, b);
                    tr__free(ctx, full);
                    st = TR_ERR_OUT_OF_MEMORY;
                    break;
                }
                if (nsub) {
                    memcpy(a, subdirs, (size_t)nsub * sizeof *a);
                    memcpy(b, subnames, (size_t)nsub * sizeof *b);
                }
                tr__free(ctx, subdirs);
                tr__free(ctx, subnames);
                subdirs = a;
                subnames = b;
                capsub = nc;
            }
            nm = (char *)tr__alloc(ctx, strlen(base) + 1);
            if (!nm) {
                tr__free(ctx, full);
                st = TR_ERR_OUT_OF_MEMORY;
                break;
            }
            strcpy(nm, base);
            subdirs[nsub] = full;
            subnames[nsub++] = nm;
        }
        tr__free_list(ctx, dirs, nd);
    }
    if (st == TR_OK && nsub == 0) st = tr__err(ctx, TR_ERR_NOT_FOUND, "arc: no task files (*.json) under '%s'", o->input_dirs[0]);
    /* choose and order the subsets: as listed, else by name with the test subset last */
    if (st == TR_OK) {
        int *order = (int *)tr__alloc(ctx, (size_t)nsub * sizeof(int)), norder = 0;
        if (!order) st = TR_ERR_OUT_OF_MEMORY;
        if (st == TR_OK && o->subsets && o->num_subsets > 0) {
            for (i = 0; i < o->num_subsets && st == TR_OK; i++) {
                int found = 0;
                for (j = 0; j < nsub; j++)
                    if (!strcmp(subnames[j], o->subsets[i])) {
                        order[norder++] = j;
                        found = 1;
                    }
                if (!found) st = tr__err(ctx, TR_ERR_NOT_FOUND, "arc: subset '%s' was not found in the input directories", o->subsets[i]);
            }
        } else if (st == TR_OK) {
            for (i = 0; i < nsub; i++)
                if (!o->test_set_name || strcmp(subnames[i], o->test_set_name)) order[norder++] = i;
            for (i = 0; i < nsub; i++)
                if (o->test_set_name && !strcmp(subnames[i], o->test_set_name)) order[norder++] = i;
            /* stable sort by name within the two runs */
        }
        /* 2. load every task of each subset, shuffled within the subset */
        for (i = 0; i < norder && st == TR_OK; i++) {
            int sidx = order[i], nf = 0, cap;
            char **files = NULL;
            int64_t *perm = NULL;
            tr__rng rng = tr__rng_kind(o->seed, TR__STREAM_ARC_SHUFFLE, (uint64_t)i);
            tr__arc_task *nt;
            if ((st = tr__list_dir(ctx, subdirs[sidx], ".json", &files, &nf)) != TR_OK) break;
            cap = ntasks + nf;
            nt = (tr__arc_task *)tr__calloc(ctx, (size_t)(cap ? cap : 1), sizeof *nt);
            perm = (int64_t *)tr__alloc(ctx, (size_t)(nf ? nf : 1) * sizeof *perm);
            if (!nt || !perm) {
                tr__free(ctx, nt);
                tr__free(ctx, perm);
                tr__free_list(ctx, files, nf);
                st = TR_ERR_OUT_OF_MEMORY;
                break;
            }
            if (ntasks) memcpy(nt, tasks, (size_t)ntasks * sizeof *nt);
            tr__free(ctx, tasks);
            tasks = nt;
            for (j = 0; j < nf; j++) perm[j] = j;
            tr__shuffle_i64(&rng, perm, nf);
            for (j = 0; j < nf && st == TR_OK; j++) {
                tr__arc_task *tk = &tasks[ntasks];
                const char *fn = files[perm[j]];
                char *full = tr__path3(ctx, subdirs[sidx], fn, NULL);
                size_t nl = strlen(fn) - 5;
                if (!full) {
                    st = TR_ERR_OUT_OF_MEMORY;
                    break;
                }
                if (nl >= sizeof tk->name) nl = sizeof tk->name - 1;
                memcpy(tk->name, fn, nl);
                tk->name[nl] = 0;
                tk->subset = sidx;
                tk->is_test = o->test_set_name && !strcmp(subnames[sidx], o->test_set_name);
                ntasks++;
                st = tr__arc_load_task(ctx, full, tk);
                tr__free(ctx, full);
                if (st == TR_OK && (ntasks % 64 == 0)) st = tr__progress(ctx, o->progress, o->progress_user, "arc: read", ntasks, ntasks);
            }
            tr__free(ctx, perm);
            tr__free_list(ctx, files, nf);
        }
        tr__free(ctx, order);
    }
    /* 3. augment every task (in parallel; each task has its own random stream) */
    if (st == TR_OK) {
        int nth = tr_ctx_num_threads(ctx), maxpairs = 1, tcap = 16;
        tr__h128 *tables = NULL, *exh = NULL;
        uint8_t *bufs = NULL;
        while (tcap < 2 * (o->num_aug + 1)) tcap *= 2;
        for (t = 0; t < ntasks; t++) {
            if (tasks[t].task.num_train + tasks[t].task.num_test > maxpairs) maxpairs = tasks[t].task.num_train + tasks[t].task.num_test;
            tasks[t].ver = (uint8_t *)tr__alloc(ctx, (size_t)(o->num_aug + 1) * 11);
            if (!tasks[t].ver) {
                st = TR_ERR_OUT_OF_MEMORY;
                break;
            }
        }
        if (st == TR_OK) {
            tables = (tr__h128 *)tr__alloc(ctx, (size_t)nth * (size_t)tcap * sizeof *tables);
            exh = (tr__h128 *)tr__alloc(ctx, (size_t)nth * (size_t)maxpairs * sizeof *exh);
            bufs = (uint8_t *)tr__alloc(ctx, (size_t)nth * 900);
            if (!tables || !exh || !bufs) st = TR_ERR_OUT_OF_MEMORY;
        }
        for (i = 0; i < ntasks && st == TR_OK; i += 64) {
            int i1 = i + 64 < ntasks ? i + 64 : ntasks;
            tr__arc_aug_args aa;
            aa.tasks = tasks, aa.base = i, aa.seed = o->seed, aa.num_aug = o->num_aug, aa.tcap = tcap, aa.maxpairs = maxpairs;
            aa.tables = tables, aa.exh = exh, aa.bufs = bufs;
            tr__par_for(nth, (long)(i1 - i), 1, tr__arc_aug_range, &aa);
            st = tr__progress(ctx, o->progress, o->progress_user, "arc: augment", i1, ntasks);
        }
        tr__free(ctx, tables);
        tr__free(ctx, exh);
        tr__free(ctx, bufs);
    }
    /* 4. puzzle identifiers: one per augmented version, by name, in train order */
    if (st == TR_OK) {
        char nm[256];
        for (i = 0; i < o->puzzle_identifiers_start && st == TR_OK; i++) {
            snprintf(nm, sizeof nm, "<blank>%s%d", TR_ARC_SEP, i); /* placeholders, written as "<blank>" */
            if (tr__names_id(ctx, &names, nm) < 0) st = TR_ERR_OUT_OF_MEMORY;
        }
        for (t = 0; t < ntasks && st == TR_OK; t++) {
            int v;
            tasks[t].ids = (int32_t *)tr__alloc(ctx, (size_t)tasks[t].nver * 4);
            if (!tasks[t].ids) {
                st = TR_ERR_OUT_OF_MEMORY;
                break;
            }
            for (v = 0; v < tasks[t].nver; v++) {
                int64_t id;
                tr__arc_version_name(&tasks[t], v, nm, sizeof nm);
                id = tr__names_id(ctx, &names, nm);
                if (id < 0) {
                    st = TR_ERR_OUT_OF_MEMORY;
                    break;
                }
                if (id > INT32_MAX) {
                    st = tr__err(ctx, TR_ERR_OVERFLOW, "arc: too many puzzle identifiers");
                    break;
                }
                tasks[t].ids[v] = (int32_t)id;
            }
        }
        num_ids = names.n;
    }
    /* 5. the splits, identifiers.json and test_puzzles.json */
    if (st == TR_OK) st = tr__arc_write_split(ctx, o, out_dir, 0, tasks, ntasks, num_ids, sum);
    if (st == TR_OK) st = tr__arc_write_split(ctx, o, out_dir, 1, tasks, ntasks, num_ids, sum);
    if (st == TR_OK) {
        const char **list = (const char **)tr__alloc(ctx, (size_t)(num_ids ? num_ids : 1) * sizeof(char *));
        if (!list) st = TR_ERR_OUT_OF_MEMORY;
        else {
            int64_t k;
            for (k = 0; k < num_ids; k++) list[k] = k < o->puzzle_identifiers_start ? "<blank>" : names.names[k];
            st = tr_write_identifiers(ctx, out_dir, num_ids, list);
            tr__free(ctx, (void *)list);
        }
    }
    if (st == TR_OK) {
        tr__sb sb;
        int first = 1;
        tr__sb_init(&sb, ctx);
        tr__sb_printf(&sb, "{");
        for (t = 0; t < ntasks; t++) {
            if (!tasks[t].is_test) continue;
            if (!first) tr__sb_printf(&sb, ", ");
            first = 0;
            tr__sb_json_string(&sb, tasks[t].name);
            tr__sb_printf(&sb, ": %s", tasks[t].json);
        }
        tr__sb_printf(&sb, "}");
        st = tr__sb_status(&sb);
        if (st == TR_OK) {
            char *path = tr__path3(ctx, out_dir, "test_puzzles.json", NULL);
            if (!path) st = TR_ERR_OUT_OF_MEMORY;
            else {
                st = tr__write_whole(ctx, path, sb.data, sb.len);
                tr__free(ctx, path);
            }
        }
        tr__sb_free(&sb);
    }
    if (sum) {
        sum->num_identifiers = num_ids;
        sum->seconds = tr__now() - t0;
    }
    for (t = 0; t < ntasks; t++) tr__arc_task_free(ctx, &tasks[t]);
    tr__free(ctx, tasks);
    tr__names_free(ctx, &names);
    for (i = 0; i < nsub; i++) {
        tr__free(ctx, subdirs[i]);
        tr__free(ctx, subnames[i]);
    }
    tr__free(ctx, subdirs);
    tr__free(ctx, subnames);
    return st;
}

/* ---- ARC evaluation: votes, ranking, pass@K --------------------------------------------------- */
TRDEF int tr_arc_grid_fput(FILE *f, const tr_arc_grid *g) {
    int r, c, e = 0;
    if (!f || !g) return EOF;
    e |= fputc('[', f) == EOF;
    for (r = 0; r < g->h; r++) {
        e |= fputs(r ? ", [" : "[", f) == EOF;
        for (c = 0; c < g->w; c++) e |= fprintf(f, c ? ", %d" : "%d", g->cells[r * g->w + c]) < 0;
        e |= fputc(']', f) == EOF;
    }
    e |= fputc(']', f) == EOF;
    return e ? EOF : 0;
}

/* One distinct answer to one test input; its cells live in the votes' arena. */
struct tr__arc_cand {
    int task, test, h, w;
    size_t off;
    uint64_t hash;
    int64_t count;
    double qsum;  /* of sigmoid(q_halt) */
    int64_t order; /* when it was first voted for */
};

TR__FN uint64_t tr__arc_cand_key(int task, int test, uint64_t h) { return tr__mix64(h ^ ((uint64_t)task * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)(test + 1) * 0xc2b2ae3d27d4eb4full)); }

TR__FN int tr__arc_cand_is(const tr_arc_votes *v, const struct tr__arc_cand *c, const tr_arc_grid *g) {
    return c->h == g->h && c->w == g->w && (g->h <= 0 || !memcmp(v->arena_ + c->off, g->cells, (size_t)g->h * (size_t)g->w));
}

/* (task, test) ascending, then votes descending, mean q descending, first seen first: the reference's order. */
TR__FN int tr__arc_cand_cmp(const void *pa, const void *pb) {
    const struct tr__arc_cand *a = (const struct tr__arc_cand *)pa, *b = (const struct tr__arc_cand *)pb;
    double qa, qb;
    if (a->task != b->task) return a->task < b->task ? -1 : 1;
    if (a->test != b->test) return a->test < b->test ? -1 : 1;
    if (a->count != b->count) return a->count > b->count ? -1 : 1;
    qa = a->qsum / (double)a->count, qb = b->qsum / (double)b->count;
    if (qa != qb) return qa > qb ? -1 : 1;
    return a->order < b->order ? -1 : a->order > b->order;
}

TRDEF void tr_arc_votes_destroy(tr_arc_votes *v) {
    tr_ctx *ctx;
    int t;
    if (!v) return;
    ctx = v->ctx;
    for (t = 0; t < v->num_tasks; t++) tr__free(ctx, v->tasks[t].tests);
    tr__free(ctx, v->tasks);
    if (v->names_) tr__names_free(ctx, (tr__names *)v->names_); /* the task names are its strings */
    tr__free(ctx, v->names_);
    tr__free(ctx, v->cands_);
    tr__free(ctx, v->table_);
    tr__free(ctx, v->arena_);
    tr__free(ctx, v);
}

TRDEF tr_status tr_arc_votes_create(tr_ctx *ctx, const char *text, size_t len, const char *what, tr_arc_votes **out) {
    tr_arc_votes *v;
    tr_json *root = NULL;
    tr_status st;
    tr__names *names;
    size_t i;
    if (!ctx || !out || !text) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_arc_votes_create: NULL argument");
    *out = NULL;
    if (!what) what = "test_puzzles.json";
    if ((st = tr_json_parse(ctx, text, len, what, &root)) != TR_OK) return st;
    if (root->type != TR_JSON_OBJECT) {
        tr_json_free(ctx, root);
        return tr__err(ctx, TR_ERR_FORMAT, "%s: expected an object of tasks", what);
    }
    v = (tr_arc_votes *)tr__calloc(ctx, 1, sizeof *v);
    names = (tr__names *)tr__calloc(ctx, 1, sizeof *names);
    if (v) v->ctx = ctx, v->names_ = names;
    if (v) v->tasks = (tr_arc_eval_task *)tr__calloc(ctx, root->count ? root->count : 1, sizeof *v->tasks);
    if (!v || !names || !v->tasks) {
        if (!v) tr__free(ctx, names);
        tr_arc_votes_destroy(v);
        tr_json_free(ctx, root);
        return tr__err(ctx, TR_ERR_OUT_OF_MEMORY, "out of memory reading %s", what);
    }
    for (i = 0; i < root->count && st == TR_OK; i++) {
        tr_arc_eval_task *t = &v->tasks[v->num_tasks];
        tr_arc_task at;
        int64_t id;
        int k;
        if ((st = tr_arc_task_from_json(ctx, &root->items[i], what, NULL, &at)) != TR_OK) {
            char why[TR__ERRLEN];
            snprintf(why, sizeof why, "%s", tr_ctx_last_error(ctx));
            st = tr__err(ctx, st, "task %s: %s", root->keys[i], why);
            break;
        }
        if (at.num_test == 0) st = tr__err(ctx, TR_ERR_FORMAT, "%s: task %s has no \"test\" list", what, root->keys[i]);
        else if ((id = tr__names_id(ctx, names, root->keys[i])) < 0 || !(t->tests = (tr_arc_eval_input *)tr__calloc(ctx, (size_t)at.num_test, sizeof *t->tests)))
            st = tr__err(ctx, TR_ERR_OUT_OF_MEMORY, "out of memory reading %s", what);
        else {
            t->name = names->names[id]; /* keys are unique: id == the task's index */
            t->num_test = at.num_test;
            t->scored = 1;
            for (k = 0; k < at.num_test; k++) {
                t->tests[k].input = at.pairs[at.num_train + k].input;
                t->tests[k].output = at.pairs[at.num_train + k].output;
                t->tests[k].right = -1;
            }
            v->num_tasks++;
        }
        tr_arc_task_free(ctx, &at);
    }
    tr_json_free(ctx, root);
    if (st != TR_OK) {
        tr_arc_votes_destroy(v);
        return st;
    }
    *out = v;
    return TR_OK;
}

TRDEF int tr_arc_votes_find(const tr_arc_votes *v, const char *name) { return v && name ? (int)tr__names_find((const tr__names *)v->names_, name) : -1; }

TRDEF tr_status tr_arc_prediction_parse(tr_ctx *ctx, const char *line, size_t len, const char *where, tr_arc_prediction *out) {
    tr_json *o;
    const tr_json *pz, *ti, *gr, *tk, *q;
    tr_status st = TR_OK;
    if (!line || !out) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_arc_prediction_parse: NULL argument");
    if (!where) where = "prediction";
    memset(out, 0, sizeof *out);
    if ((st = tr_json_parse(ctx, line, len, where, &o)) != TR_OK) return st;
    pz = tr_json_get(o, "puzzle"), ti = tr_json_get(o, "test_index"), gr = tr_json_get(o, "grid"), tk = tr_json_get(o, "tokens"), q = tr_json_get(o, "q_halt");
    if (!pz || pz->type != TR_JSON_STRING || !ti || ti->type != TR_JSON_NUMBER || ti->number != floor(ti->number) || !q || q->type != TR_JSON_NUMBER || (!gr && !tk))
        st = tr__err(ctx, TR_ERR_FORMAT, "%s: need \"puzzle\" (string), \"test_index\" (integer), \"q_halt\" (number) and \"grid\" or \"tokens\"", where);
    else if (strlen(pz->string) >= sizeof out->puzzle)
        st = tr__err(ctx, TR_ERR_FORMAT, "%s: \"puzzle\" is longer than %d bytes", where, (int)sizeof out->puzzle - 1);
    else if (gr) {
        if (gr->type == TR_JSON_ARRAY && gr->count == 0) out->grid.h = out->grid.w = 0; /* an empty prediction */
        else st = tr_arc_grid_from_json(ctx, gr, where, &out->grid);
    } else { /* 900 tokens as the model outputs them: cropped as the evaluator does */
        int32_t toks[TR_ARC_MAX_GRID * TR_ARC_MAX_GRID];
        size_t i;
        if (tk->type != TR_JSON_ARRAY || tk->count != TR_ARC_MAX_GRID * TR_ARC_MAX_GRID)
            st = tr__err(ctx, TR_ERR_FORMAT, "%s: \"tokens\" must be a list of %d token ids", where, TR_ARC_MAX_GRID * TR_ARC_MAX_GRID);
        for (i = 0; st == TR_OK && i < tk->count; i++) {
            if (tk->items[i].type != TR_JSON_NUMBER || tk->items[i].number < 0 || tk->items[i].number > 255)
                st = tr__err(ctx, TR_ERR_FORMAT, "%s: token %lu is not an id 0..255", where, (unsigned long)i);
            else toks[i] = (int32_t)tk->items[i].number;
        }
        if (st == TR_OK) tr_arc_crop(toks, out->grid.cells, &out->grid.h, &out->grid.w);
    }
    if (st == TR_OK) {
        strcpy(out->puzzle, pz->string);
        out->test_index = ti->number > 1e6 || ti->number < -1 ? -1 : (int)ti->number;
        out->q_halt = q->number;
    }
    tr_json_free(ctx, o);
    return st;
}

TRDEF tr_status tr_arc_votes_add(tr_arc_votes *v, const char *puzzle, int test_index, const tr_arc_grid *answer, double q_halt, const tr_arc_grid *input,
                                 const char *where) {
    char base[256];
    int tid, ti;
    uint8_t perm[10];
    tr_arc_grid g;
    tr_ctx *ctx = v ? v->ctx : NULL;
    tr_arc_eval_input *x;
    struct tr__arc_cand *c;
    uint64_t h;
    size_t i, nb;
    if (!v || !puzzle || !answer) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_arc_votes_add: NULL argument");
    if (v->ranked_) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_arc_votes_add: the votes are already ranked");
    if (answer->h < 0 || answer->w < 0 || answer->h > TR_ARC_MAX_GRID || answer->w > TR_ARC_MAX_GRID || (input && (input->h > TR_ARC_MAX_GRID || input->w > TR_ARC_MAX_GRID)))
        return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_arc_votes_add: a grid is larger than %dx%d", TR_ARC_MAX_GRID, TR_ARC_MAX_GRID);
    if (!where) where = puzzle;
    if (tr_arc_parse_name(ctx, puzzle, base, sizeof base, &tid, perm) != TR_OK) {
        char why[TR__ERRLEN];
        snprintf(why, sizeof why, "%s", tr_ctx_last_error(ctx));
        return tr__err(ctx, TR_ERR_FORMAT, "%s: bad puzzle name '%s': %s", where, puzzle, why);
    }
    if ((ti = tr_arc_votes_find(v, base)) < 0) return tr__err(ctx, TR_ERR_FORMAT, "%s: task '%s' is not in test_puzzles.json", where, base);
    if (test_index < 0 || test_index >= v->tasks[ti].num_test)
        return tr__err(ctx, TR_ERR_FORMAT, "%s: task '%s' has %d test inputs, not index %d", where, base, v->tasks[ti].num_test, test_index);
    x = &v->tasks[ti].tests[test_index];
    if (input && input->h > 0) { /* a check of the whole chain: the augmented input maps back */
        tr_arc_inverse_augment(tid, perm, input->cells, input->h, input->w, g.cells, &g.h, &g.w);
        v->inputs_checked++;
        if (g.h != x->input.h || g.w != x->input.w || memcmp(g.cells, x->input.cells, (size_t)g.h * (size_t)g.w)) v->inputs_mismatched++;
    }
    if (!v->tasks[ti].scored) {
        v->ignored++;
        return TR_OK;
    }
    if (answer->h > 0 && answer->w > 0) tr_arc_inverse_augment(tid, perm, answer->cells, answer->h, answer->w, g.cells, &g.h, &g.w);
    else g.h = g.w = 0;
    nb = (size_t)g.h * (size_t)g.w;
    /* room first, so that a failure leaves the votes as they were */
    if ((v->num_answers + 1) * 2 > v->tcap_) {
        size_t j, nc = v->tcap_ ? v->tcap_ * 2 : 1024;
        size_t *nt = (size_t *)tr__calloc(ctx, nc, sizeof *nt);
        if (!nt) return tr__err(ctx, TR_ERR_OUT_OF_MEMORY, "out of memory counting votes");
        for (j = 0; j < v->num_answers; j++) {
            for (i = tr__arc_cand_key(v->cands_[j].task, v->cands_[j].test, v->cands_[j].hash) & (nc - 1); nt[i]; i = (i + 1) & (nc - 1)) {
            }
            nt[i] = j + 1;
        }
        tr__free(ctx, v->table_);
        v->table_ = nt, v->tcap_ = nc;
    }
    if (v->num_answers == v->cap_) {
        size_t nc = v->cap_ ? v->cap_ * 2 : 256;
        struct tr__arc_cand *n2 = (struct tr__arc_cand *)tr__alloc(ctx, nc * sizeof *n2);
        if (!n2) return tr__err(ctx, TR_ERR_OUT_OF_MEMORY, "out of memory counting votes");
        if (v->num_answers) memcpy(n2, v->cands_, v->num_answers * sizeof *n2);
        tr__free(ctx, v->cands_);
        v->cands_ = n2, v->cap_ = nc;
    }
    if (v->alen_ + nb > v->acap_) {
        size_t nc = v->acap_ ? v->acap_ : (size_t)1 << 16;
        uint8_t *na;
        while (v->alen_ + nb > nc) nc *= 2;
        if (!(na = (uint8_t *)tr__alloc(ctx, nc))) return tr__err(ctx, TR_ERR_OUT_OF_MEMORY, "out of memory counting votes");
        if (v->alen_) memcpy(na, v->arena_, v->alen_);
        tr__free(ctx, v->arena_);
        v->arena_ = na, v->acap_ = nc;
    }
    h = tr__hash_grid(g.cells, g.h, g.w).a;
    for (i = tr__arc_cand_key(ti, test_index, h) & (v->tcap_ - 1); v->table_[i]; i = (i + 1) & (v->tcap_ - 1)) {
        c = &v->cands_[v->table_[i] - 1];
        if (c->task == ti && c->test == test_index && c->hash == h && tr__arc_cand_is(v, c, &g)) {
            c->count++;
            c->qsum += 1.0 / (1.0 + exp(-q_halt));
            v->seen_++, v->predictions++;
            return TR_OK;
        }
    }
    c = &v->cands_[v->num_answers];
    if (nb) memcpy(v->arena_ + v->alen_, g.cells, nb);
    c->task = ti, c->test = test_index, c->h = g.h, c->w = g.w, c->off = v->alen_;
    c->hash = h, c->count = 1, c->qsum = 1.0 / (1.0 + exp(-q_halt)), c->order = v->seen_++;
    v->alen_ += nb;
    v->table_[i] = ++v->num_answers;
    x->num_answers++;
    v->predictions++;
    return TR_OK;
}

TRDEF void tr_arc_votes_rank(tr_arc_votes *v) {
    size_t j;
    if (!v || v->ranked_) return;
    if (v->num_answers) qsort(v->cands_, v->num_answers, sizeof *v->cands_, tr__arc_cand_cmp);
    for (j = 0; j < v->num_answers; j++) {
        const struct tr__arc_cand *c = &v->cands_[j];
        tr_arc_eval_input *x = &v->tasks[c->task].tests[c->test];
        if (j == 0 || c[-1].task != c->task || c[-1].test != c->test) x->first_ = j;
        if (x->output.h > 0 && tr__arc_cand_is(v, c, &x->output)) x->right = (int)(j - x->first_);
    }
    v->ranked_ = 1;
}

TRDEF int tr_arc_votes_answer(const tr_arc_votes *v, int task, int test, int rank, tr_arc_grid *grid, int64_t *votes, double *mean_q) {
    const tr_arc_eval_input *x;
    const struct tr__arc_cand *c;
    if (!v || !v->ranked_ || task < 0 || task >= v->num_tasks || test < 0 || test >= v->tasks[task].num_test) return 0;
    x = &v->tasks[task].tests[test];
    if (rank < 0 || rank >= x->num_answers) return 0;
    c = &v->cands_[x->first_ + (size_t)rank];
    if (grid) {
        grid->h = c->h, grid->w = c->w;
        if (c->h > 0) memcpy(grid->cells, v->arena_ + c->off, (size_t)c->h * (size_t)c->w);
    }
    if (votes) *votes = c->count;
    if (mean_q) *mean_q = c->qsum / (double)c->count;
    return 1;
}

TRDEF tr_status tr_arc_votes_score(const tr_arc_votes *v, const int *ks, int nk, double *pass, double *all_inputs) {
    int t, x, k, nscored = 0;
    if (!v || nk < 0 || (nk && (!ks || !pass))) return tr__err(v ? v->ctx : NULL, TR_ERR_INVALID_ARG, "tr_arc_votes_score: NULL argument");
    if (!v->ranked_) return tr__err(v->ctx, TR_ERR_INVALID_ARG, "tr_arc_votes_score: call tr_arc_votes_rank first");
    for (k = 0; k < nk; k++) {
        pass[k] = 0;
        if (all_inputs) all_inputs[k] = 0;
    }
    for (t = 0; t < v->num_tasks; t++) {
        const tr_arc_eval_task *tk = &v->tasks[t];
        if (!tk->scored) continue;
        nscored++;
        for (k = 0; k < nk; k++) {
            int correct = 0;
            for (x = 0; x < tk->num_test; x++) correct += tk->tests[x].right >= 0 && tk->tests[x].right < ks[k];
            pass[k] += (double)correct / tk->num_test;
            if (all_inputs) all_inputs[k] += correct == tk->num_test;
        }
    }
    for (k = 0; k < nk && nscored; k++) {
        pass[k] /= nscored;
        if (all_inputs) all_inputs[k] /= nscored;
    }
    return TR_OK;
}

TRDEF int tr_arc_votes_fput_submission(FILE *f, const tr_arc_votes *v) {
    int t, x, n = 0, e = 0;
    if (!f || !v || !v->ranked_) return EOF;
    e |= fputs("{", f) == EOF;
    for (t = 0; t < v->num_tasks; t++) {
        const tr_arc_eval_task *tk = &v->tasks[t];
        if (!tk->scored) continue;
        e |= fputs(n++ ? ",\n  " : "\n  ", f) == EOF;
        e |= tr_json_fput_string(f, tk->name);
        e |= fputs(": [", f) == EOF;
        for (x = 0; x < tk->num_test; x++) {
            tr_arc_grid a1, a2;
            a1.h = a1.w = 1, a1.cells[0] = 0; /* no answer: [[0]] */
            tr_arc_votes_answer(v, t, x, 0, &a1, NULL, NULL);
            if (!tr_arc_votes_answer(v, t, x, 1, &a2, NULL, NULL)) a2 = a1; /* padded with the first, as the reference */
            e |= fputs(x ? ", {\"attempt_1\": " : "{\"attempt_1\": ", f) == EOF;
            e |= tr_arc_grid_fput(f, &a1);
            e |= fputs(", \"attempt_2\": ", f) == EOF;
            e |= tr_arc_grid_fput(f, &a2);
            e |= fputs("}", f) == EOF;
        }
        e |= fputs("]", f) == EOF;
    }
    e |= fputs(n ? "\n}\n" : "}\n", f) == EOF;
    return e ? EOF : 0;
}

/* >>data-end */

/* Model checkpoints and trainer state as safetensors files (on >>io and >>json). */

/* >>checkpoint */
#define TR__CK_ORIG_MOD "_orig_mod."
#define TR__CK_ERRBUF 720

/* ---- small helpers ------------------------------------------------------------------------ */
TR__FN int tr__ck_host_le(void) {
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* Shortest "%.Ng" that reads back to the same double, with '.' whatever the C locale says. */
TR__FN void tr__ck_fmt_double(char *buf, size_t cap, double v) {
    int prec;
    const struct lconv *lc = localeconv();
    char dp = lc && lc->decimal_point && lc->decimal_point[0] ? lc->decimal_point[0] : '.';
    for (prec = 15; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    if (dp != '.') {
        char *d = strchr(buf, dp);
        if (d) *d = '.';
    }
}

/* Appends `'name'` to a fixed error-list buffer, with ", " between entries and "..." once full. */
TR__FN void tr__ck_list_add(char *buf, size_t cap, int *count, const char *name) {
    size_t o = strlen(buf), need = strlen(name) + 4;
    (*count)++;
    if (o >= 3 && strcmp(buf + o - 3, "...") == 0) return;
    if (o + need + 6 > cap) {
        if (o + 6 < cap) snprintf(buf + o, cap - o, "%s...", o ? ", " : "");
        return;
    }
    snprintf(buf + o, cap - o, "%s'%s'", o ? ", " : "", name);
}

/* "[a,b]" of up to two dims (model tensors). */
TR__FN const char *tr__ck_shape2(int ndim, const int64_t *shape, char *buf, size_t cap) {
    if (ndim == 1) snprintf(buf, cap, "[%lld]", (long long)shape[0]);
    else if (ndim == 2) snprintf(buf, cap, "[%lld,%lld]", (long long)shape[0], (long long)shape[1]);
    else snprintf(buf, cap, "[]");
    return buf;
}

TR__FN int tr__ck_is_float(tr_dtype d) { return d == TR_F32 || d == TR_BF16 || d == TR_F16; }

/* Element i of an F32/BF16/F16 tensor (bounds checked by the caller). */
TR__FN float tr__ck_elem_f32(const tr_st_tensor *t, size_t i) {
    const unsigned char *p = (const unsigned char *)t->data;
    if (t->dtype == TR_F32) {
        uint32_t u = (uint32_t)p[4 * i] | ((uint32_t)p[4 * i + 1] << 8) | ((uint32_t)p[4 * i + 2] << 16) | ((uint32_t)p[4 * i + 3] << 24);
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    if (t->dtype == TR_BF16) return tr__bf16_to_f32((uint16_t)(p[2 * i] | (p[2 * i + 1] << 8)));
    return tr__f16_to_f32((uint16_t)(p[2 * i] | (p[2 * i + 1] << 8)));
}

/* Looks `name` up in a file, or "_orig_mod." + name; both present is an error. *out = NULL (and
   TR_OK) when neither is there. */
TR__FN tr_status tr__ck_find(tr_ctx *ctx, const tr_st_file *f, const char *path, const char *name, const tr_st_tensor **out) {
    char full[TR__NAME_LEN + 64];
    const tr_st_tensor *a, *b = NULL;
    a = tr_st_find(f, name);
    if (strlen(name) + sizeof TR__CK_ORIG_MOD < sizeof full) {
        snprintf(full, sizeof full, "%s%s", TR__CK_ORIG_MOD, name);
        b = tr_st_find(f, full);
    }
    *out = a ? a : b;
    if (a && b) return tr__err(ctx, TR_ERR_FORMAT, "%s: tensor '%s' is there twice, with and without the '" TR__CK_ORIG_MOD "' prefix", path, name);
    return TR_OK;
}

/* A growable list of buffers to free, for the writers' converted copies. */
typedef struct tr__ck_owned {
    tr_ctx *ctx;
    void **p;
    size_t n, cap;
} tr__ck_owned;

TR__FN void *tr__ck_own(tr__ck_owned *o, size_t bytes) {
    void *p;
    if (o->n == o->cap) {
        size_t nc = o->cap ? 2 * o->cap : 16;
        void **np = (void **)tr__alloc(o->ctx, nc * sizeof(void *));
        if (!np) return NULL;
        if (o->n) memcpy(np, o->p, o->n * sizeof(void *));
        tr__free(o->ctx, o->p);
        o->p = np;
        o->cap = nc;
    }
    p = tr__alloc(o->ctx, bytes ? bytes : 1);
    if (p) o->p[o->n++] = p;
    return p;
}

TR__FN void tr__ck_own_free(tr__ck_owned *o) {
    size_t i;
    for (i = 0; i < o->n; i++) tr__free(o->ctx, o->p[i]);
    tr__free(o->ctx, o->p);
    o->p = NULL;
    o->n = o->cap = 0;
}

/* Little-endian bytes of n elements of `esize` bytes: the data itself on a little-endian host, a
   swapped copy otherwise. NULL on allocation failure. */
TR__FN const void *tr__ck_le(tr__ck_owned *o, const void *data, size_t esize, size_t n) {
    unsigned char *c;
    const unsigned char *s = (const unsigned char *)data;
    size_t i, k;
    if (tr__ck_host_le() || esize == 1) return data;
    c = (unsigned char *)tr__ck_own(o, n * esize);
    if (!c) return NULL;
    for (i = 0; i < n; i++)
        for (k = 0; k < esize; k++) c[i * esize + k] = s[i * esize + esize - 1 - k];
    return c;
}

/* Fills a writer's tensor record. */
TR__FN void tr__ck_tensor(tr_st_tensor *t, const char *name, tr_dtype dt, int ndim, int64_t d0, int64_t d1, int64_t d2, const void *data) {
    size_t n = 1;
    int i;
    memset(t, 0, sizeof *t);
    t->name = name;
    t->dtype = dt;
    t->ndim = ndim;
    t->shape[0] = d0, t->shape[1] = d1, t->shape[2] = d2;
    for (i = 0; i < ndim; i++) n *= (size_t)t->shape[i];
    t->data = data;
    t->nbytes = n * tr_dtype_size(dt);
}

/* ---- config <-> JSON ---------------------------------------------------------------------- */
typedef enum tr__ck_kind { TR__CK_INT, TR__CK_LONG, TR__CK_DBL, TR__CK_BOOL, TR__CK_POS, TR__CK_LOSS, TR__CK_FWD, TR__CK_ARCH } tr__ck_kind;
typedef struct tr__ck_field {
    const char *name;
    tr__ck_kind kind;
    size_t off;
    int required;
} tr__ck_field;

#define TR__CK_MF(name, kind, req) {#name, kind, offsetof(tr_model_config, name), req}
static const tr__ck_field tr__ck_model_fields[] = {
    TR__CK_MF(hidden_size, TR__CK_INT, 1),
    TR__CK_MF(num_heads, TR__CK_INT, 1),
    TR__CK_MF(expansion, TR__CK_DBL, 1),
    TR__CK_MF(L_layers, TR__CK_INT, 1),
    TR__CK_MF(H_layers, TR__CK_INT, 0),
    TR__CK_MF(H_cycles, TR__CK_INT, 1),
    TR__CK_MF(L_cycles, TR__CK_INT, 1),
    TR__CK_MF(puzzle_emb_ndim, TR__CK_INT, 1),
    TR__CK_MF(puzzle_emb_len, TR__CK_INT, 1),
    TR__CK_MF(pos_encodings, TR__CK_POS, 1),
    TR__CK_MF(mlp_t, TR__CK_BOOL, 1),
    TR__CK_MF(rope_theta, TR__CK_DBL, 0),
    TR__CK_MF(rms_norm_eps, TR__CK_DBL, 0),
    TR__CK_MF(halt_max_steps, TR__CK_INT, 1),
    TR__CK_MF(halt_exploration_prob, TR__CK_DBL, 1),
    {"forward_dtype", TR__CK_FWD, offsetof(tr_model_config, forward_dtype), 0},
    TR__CK_MF(no_ACT_continue, TR__CK_BOOL, 0),
    TR__CK_MF(loss_type, TR__CK_LOSS, 0),
    {"arch", TR__CK_ARCH, offsetof(tr_model_config, arch), 0}, /* trm | hrm; files without it: the metadata's model */
    TR__CK_MF(vocab_size, TR__CK_INT, 1),
    TR__CK_MF(seq_len, TR__CK_INT, 1),
    TR__CK_MF(num_puzzle_identifiers, TR__CK_INT, 1),
};
#undef TR__CK_MF
#define TR__CK_NMODEL ((int)(sizeof tr__ck_model_fields / sizeof tr__ck_model_fields[0]))

#define TR__CK_TF(name, kind) {#name, kind, offsetof(tr_train_config, name), 1}
static const tr__ck_field tr__ck_train_fields[] = {
    TR__CK_TF(lr, TR__CK_DBL),
    TR__CK_TF(lr_min_ratio, TR__CK_DBL),
    TR__CK_TF(lr_warmup_steps, TR__CK_LONG),
    TR__CK_TF(total_steps, TR__CK_LONG),
    TR__CK_TF(weight_decay, TR__CK_DBL),
    TR__CK_TF(beta1, TR__CK_DBL),
    TR__CK_TF(beta2, TR__CK_DBL),
    TR__CK_TF(puzzle_emb_lr, TR__CK_DBL),
    TR__CK_TF(puzzle_emb_weight_decay, TR__CK_DBL),
    TR__CK_TF(ema, TR__CK_BOOL),
    TR__CK_TF(ema_decay, TR__CK_DBL),
    TR__CK_TF(global_batch_size, TR__CK_INT),
};
#undef TR__CK_TF
#define TR__CK_NTRAIN ((int)(sizeof tr__ck_train_fields / sizeof tr__ck_train_fields[0]))


/* Appends `{"field":value,...}` for a struct described by a field table. */
TR__FN void tr__ck_json_fields(tr__sb *sb, const tr__ck_field *fl, int nf, const void *obj) {
    const char *base = (const char *)obj;
    char num[64];
    int i;
    tr__sb_append(sb, "{", 1);
    for (i = 0; i < nf; i++) {
        const void *p = base + fl[i].off;
        if (i) tr__sb_append(sb, ",", 1);
        tr__sb_json_string(sb, fl[i].name);
        tr__sb_append(sb, ":", 1);
        switch (fl[i].kind) {
        case TR__CK_INT: tr__sb_printf(sb, "%d", *(const int *)p); break;
        case TR__CK_LONG: tr__sb_printf(sb, "%ld", *(const long *)p); break;
        case TR__CK_DBL:
            tr__ck_fmt_double(num, sizeof num, *(const double *)p);
            tr__sb_printf(sb, "%s", num);
            break;
        case TR__CK_BOOL: tr__sb_printf(sb, "%s", *(const int *)p ? "true" : "false"); break;
        case TR__CK_POS:
        case TR__CK_LOSS: {
            const char *name = fl[i].kind == TR__CK_POS ? tr__enum_name(TR_KEY_POS_ENCODING, (int)*(const tr_pos_encoding *)p)
                                                        : tr__enum_name(TR_KEY_LOSS_TYPE, (int)*(const tr_loss_type *)p);
            tr__sb_json_string(sb, name ? name : "?");
            break;
        }
        case TR__CK_FWD: tr__sb_json_string(sb, tr_forward_dtype_name(*(const tr_forward_dtype *)p) ? tr_forward_dtype_name(*(const tr_forward_dtype *)p) : "float32"); break;
        case TR__CK_ARCH: tr__sb_json_string(sb, *(const tr_arch *)p == TR_ARCH_HRM ? "hrm" : "trm"); break;
        }
    }
    tr__sb_append(sb, "}", 1);
}

/* Reads the fields of a field table from a JSON object into obj (which holds the defaults).
   Errors name `what` and the field. */
TR__FN tr_status tr__ck_parse_fields(tr_ctx *ctx, const tr_json *root, const tr__ck_field *fl, int nf, void *obj, const char *what) {
    char *base = (char *)obj;
    int i;
    if (!root || root->type != TR_JSON_OBJECT)
        return tr__err(ctx, TR_ERR_FORMAT, "%s: is a JSON %s, not an object", what, root ? tr_json_type_name(root->type) : "nothing");
    for (i = 0; i < nf; i++) {
        const tr_json *v = tr_json_get(root, fl[i].name);
        void *p = base + fl[i].off;
        if (!v) {
            if (fl[i].required) return tr__err(ctx, TR_ERR_FORMAT, "%s: missing field '%s'", what, fl[i].name);
            continue;
        }
        switch (fl[i].kind) {
        case TR__CK_INT:
        case TR__CK_LONG: {
            double lim = fl[i].kind == TR__CK_INT ? 2147483647.0 : 9007199254740992.0;
            if (v->type != TR_JSON_NUMBER || floor(v->number) != v->number || fabs(v->number) > lim)
                return tr__err(ctx, TR_ERR_FORMAT, "%s: field '%s' must be an integer", what, fl[i].name);
            if (fl[i].kind == TR__CK_INT) *(int *)p = (int)v->number;
            else *(long *)p = (long)v->number;
            break;
        }
        case TR__CK_DBL:
            if (v->type != TR_JSON_NUMBER) return tr__err(ctx, TR_ERR_FORMAT, "%s: field '%s' must be a number, not a JSON %s", what, fl[i].name, tr_json_type_name(v->type));
            *(double *)p = v->number;
            break;
        case TR__CK_BOOL:
            if (v->type == TR_JSON_BOOL) *(int *)p = v->boolean;
            else if (v->type == TR_JSON_NUMBER && (v->number == 0 || v->number == 1)) *(int *)p = (int)v->number;
            else return tr__err(ctx, TR_ERR_FORMAT, "%s: field '%s' must be true or false", what, fl[i].name);
            break;
        case TR__CK_POS:
        case TR__CK_LOSS: {
            int found;
            if (v->type != TR_JSON_STRING) return tr__err(ctx, TR_ERR_FORMAT, "%s: field '%s' must be a string", what, fl[i].name);
            found = tr__enum_parse(fl[i].kind == TR__CK_POS ? TR_KEY_POS_ENCODING : TR_KEY_LOSS_TYPE, v->string, 0);
            if (found < 0)
                return tr__err(ctx, TR_ERR_FORMAT, "%s: field '%s' is '%.60s' (expected %s)", what, fl[i].name, v->string,
                               fl[i].kind == TR__CK_POS ? "rope, none or learned" : "stablemax_cross_entropy or softmax_cross_entropy");
            if (fl[i].kind == TR__CK_POS) *(tr_pos_encoding *)p = (tr_pos_encoding)found;
            else *(tr_loss_type *)p = (tr_loss_type)found;
            break;
        }
        case TR__CK_ARCH: {
            int found = v->type == TR_JSON_STRING ? tr__enum_parse(TR_KEY_ARCH, v->string, 0) : -1;
            if (found < 0) return tr__err(ctx, TR_ERR_FORMAT, "%s: field 'arch' must be \"trm\" or \"hrm\"", what);
            *(tr_arch *)p = (tr_arch)found;
            break;
        }
        case TR__CK_FWD: {
            int found = v->type == TR_JSON_STRING ? tr_forward_dtype_parse(v->string) : -1;
            if (found < 0) return tr__err(ctx, TR_ERR_FORMAT, "%s: field 'forward_dtype' must be \"float32\", \"bfloat16\", \"float16\" or \"auto\"", what);
            *(tr_forward_dtype *)p = (tr_forward_dtype)found;
            break;
        }
        }
    }
    return TR_OK;
}

/* The values of optional fields: the reference's defaults of the arch (HRM has no no_ACT_continue:
   it halts on q_halt > q_continue). */
TR__FN void tr__ck_model_defaults(tr_model_config *c, tr_arch arch) {
    memset(c, 0, sizeof *c);
    c->arch = arch;
    c->rope_theta = 10000.0;
    c->rms_norm_eps = 1e-5;
    c->no_ACT_continue = arch != TR_ARCH_HRM;
    c->loss_type = TR_LOSS_STABLEMAX;
}

/* Parses and validates; what names the source. arch: the model kind a file's metadata says (a JSON
   "arch" that contradicts it is an error), or -1: the JSON's "arch", else TRM. */
TR__FN tr_status tr__ck_config_parse(tr_ctx *ctx, const char *json, size_t len, const char *what, int arch, tr_model_config *out) {
    tr_json *root = NULL;
    tr_status st;
    tr_model_config c;
    char w[300];
    const tr_json *named;
    snprintf(w, sizeof w, "%.260s config", what);
    if ((st = tr_json_parse(ctx, json, len, w, &root)) != TR_OK) return st;
    named = root->type == TR_JSON_OBJECT ? tr_json_get(root, "arch") : NULL;
    /* the defaults of the arch the JSON names, so that an HRM config without no_ACT_continue gets HRM's */
    tr__ck_model_defaults(&c, named && named->type == TR_JSON_STRING && strcmp(named->string, "hrm") == 0 ? TR_ARCH_HRM : arch == TR_ARCH_HRM ? TR_ARCH_HRM : TR_ARCH_TRM);
    st = tr__ck_parse_fields(ctx, root, tr__ck_model_fields, TR__CK_NMODEL, &c, w);
    tr_json_free(ctx, root);
    if (st != TR_OK) return st;
    if (arch >= 0 && c.arch != (tr_arch)arch)
        return tr__err(ctx, TR_ERR_FORMAT, "%s: field 'arch' is '%s' but the file's model is '%s'", w, c.arch == TR_ARCH_HRM ? "hrm" : "trm", arch == TR_ARCH_HRM ? "hrm" : "trm");
    if ((st = tr_model_config_validate(ctx, &c)) != TR_OK) {
        char reason[TR__ERRLEN];
        snprintf(reason, sizeof reason, "%s", tr_ctx_last_error(ctx));
        return tr__err(ctx, st == TR_ERR_UNSUPPORTED ? st : TR_ERR_CONFIG, "%s: invalid: %s", w, reason);
    }
    *out = c;
    return TR_OK;
}

TRDEF tr_status tr_model_config_from_json(tr_ctx *ctx, const char *json, size_t len, const char *what, tr_model_config *out) {
    if (!ctx) return TR_ERR_INVALID_ARG;
    if (!json || !out) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_model_config_from_json: NULL argument");
    return tr__ck_config_parse(ctx, json, len, what ? what : "JSON", -1, out);
}

/* Builds the model config JSON into sb. */
TR__FN void tr__ck_config_json(tr__sb *sb, const tr_model_config *cfg) { tr__ck_json_fields(sb, tr__ck_model_fields, TR__CK_NMODEL, cfg); }

TRDEF tr_status tr_model_config_to_json(const tr_model_config *cfg, char *buf, size_t cap, size_t *len) {
    tr_ctx ctx; /* a private counting context over the C library's allocator */
    tr__sb sb;
    tr_status st = TR_OK;
    if (!cfg) return TR_ERR_INVALID_ARG;
    memset(&ctx, 0, sizeof ctx);
    ctx.allocator.alloc = tr__default_alloc;
    ctx.allocator.free = tr__default_free;
    tr__sb_init(&sb, &ctx);
    tr__ck_config_json(&sb, cfg);
    if (sb.failed) st = TR_ERR_OUT_OF_MEMORY;
    else {
        if (len) *len = sb.len;
        if (!buf || cap < sb.len + 1) st = TR_ERR_OVERFLOW;
        else memcpy(buf, sb.data, sb.len + 1);
    }
    tr__sb_free(&sb);
    return st;
}

/* Compares two structs field by field; the first difference is described in buf. 0 if equal. */
TR__FN int tr__ck_diff_fields(const tr__ck_field *fl, int nf, const void *a, const void *b, char *buf, size_t cap, int skip_fwd) {
    const char *pa = (const char *)a, *pb = (const char *)b;
    int i;
    for (i = 0; i < nf; i++) {
        const void *x = pa + fl[i].off, *y = pb + fl[i].off;
        char s1[64], s2[64];
        int same = 1;
        switch (fl[i].kind) {
        case TR__CK_INT:
        case TR__CK_BOOL:
            same = *(const int *)x == *(const int *)y;
            snprintf(s1, sizeof s1, "%d", *(const int *)x), snprintf(s2, sizeof s2, "%d", *(const int *)y);
            break;
        case TR__CK_LONG:
            same = *(const long *)x == *(const long *)y;
            snprintf(s1, sizeof s1, "%ld", *(const long *)x), snprintf(s2, sizeof s2, "%ld", *(const long *)y);
            break;
        case TR__CK_DBL:
            same = *(const double *)x == *(const double *)y;
            tr__ck_fmt_double(s1, sizeof s1, *(const double *)x), tr__ck_fmt_double(s2, sizeof s2, *(const double *)y);
            break;
        case TR__CK_POS:
            same = *(const tr_pos_encoding *)x == *(const tr_pos_encoding *)y;
            snprintf(s1, sizeof s1, "%d", (int)*(const tr_pos_encoding *)x), snprintf(s2, sizeof s2, "%d", (int)*(const tr_pos_encoding *)y);
            break;
        case TR__CK_LOSS:
            same = *(const tr_loss_type *)x == *(const tr_loss_type *)y;
            snprintf(s1, sizeof s1, "%d", (int)*(const tr_loss_type *)x), snprintf(s2, sizeof s2, "%d", (int)*(const tr_loss_type *)y);
            break;
        case TR__CK_ARCH:
            same = *(const tr_arch *)x == *(const tr_arch *)y;
            snprintf(s1, sizeof s1, "%s", *(const tr_arch *)x == TR_ARCH_HRM ? "hrm" : "trm"), snprintf(s2, sizeof s2, "%s", *(const tr_arch *)y == TR_ARCH_HRM ? "hrm" : "trm");
            break;
        case TR__CK_FWD: /* the precision may change between runs (the master weights are fp32) */
            same = skip_fwd || *(const tr_forward_dtype *)x == *(const tr_forward_dtype *)y;
            snprintf(s1, sizeof s1, "%s", tr_forward_dtype_name(*(const tr_forward_dtype *)x) ? tr_forward_dtype_name(*(const tr_forward_dtype *)x) : "?");
            snprintf(s2, sizeof s2, "%s", tr_forward_dtype_name(*(const tr_forward_dtype *)y) ? tr_forward_dtype_name(*(const tr_forward_dtype *)y) : "?");
            break;
        }
        if (!same) {
            snprintf(buf, cap, "'%s' is %s in the file but %s here", fl[i].name, s1, s2);
            return 1;
        }
    }
    return 0;
}

/* ---- opening and checking a tinyrec file -------------------------------------------------- */
/* Checks format/format_version/model of a file's metadata; kind is NULL for model files, else the
   required "content" value. Sets *cfg from the config when present (has_cfg). */
TR__FN tr_status tr__ck_read_meta(tr_ctx *ctx, const tr_st_file *f, const char *path, const char *kind, int need_cfg, tr_model_config *cfg, int *has_cfg) {
    const char *fmt = tr_st_metadata(f, "format"), *ver = tr_st_metadata(f, "format_version");
    const char *model = tr_st_metadata(f, "model"), *conf = tr_st_metadata(f, "config"), *content = tr_st_metadata(f, "content");
    *has_cfg = 0;
    if (!fmt || strcmp(fmt, "tinyrec") != 0) {
        if (!need_cfg && !conf) return TR_OK; /* a foreign safetensors file: tensors only */
        if (!fmt)
            return tr__err(ctx, TR_ERR_FORMAT, "%s: no tinyrec metadata (__metadata__ has no 'format'); convert reference checkpoints with tools/convert_checkpoint.py, or use tr_model_load_weights", path);
        return tr__err(ctx, TR_ERR_FORMAT, "%s: __metadata__ format is '%.40s', not 'tinyrec'", path, fmt);
    }
    if (ver) {
        char *end;
        long v = strtol(ver, &end, 10);
        if (end == ver || *end || v < 1) return tr__err(ctx, TR_ERR_FORMAT, "%s: __metadata__ format_version '%.40s' is not a positive integer", path, ver);
        if (v > TR_CHECKPOINT_FORMAT_VERSION)
            return tr__err(ctx, TR_ERR_UNSUPPORTED, "%s: format_version %ld is newer than this tinyrec's %d", path, v, TR_CHECKPOINT_FORMAT_VERSION);
    } else
        return tr__err(ctx, TR_ERR_FORMAT, "%s: __metadata__ has no 'format_version'", path);
    if (kind && (!content || strcmp(content, kind) != 0))
        return tr__err(ctx, TR_ERR_FORMAT, "%s: is not a %s file (__metadata__ content is '%.40s')", path, kind, content ? content : "(none: a model file)");
    if (!kind && content && strcmp(content, "model") != 0)
        return tr__err(ctx, TR_ERR_FORMAT, "%s: is a '%.40s' file, not a model file", path, content);
    if (!model) {
        if (need_cfg) return tr__err(ctx, TR_ERR_FORMAT, "%s: __metadata__ has no 'model' (trm or hrm)", path);
    } else if (strcmp(model, "trm") != 0 && strcmp(model, "hrm") != 0)
        return tr__err(ctx, TR_ERR_FORMAT, "%s: __metadata__ model is '%.40s' (expected trm or hrm)", path, model);
    if (!conf) {
        if (need_cfg) return tr__err(ctx, TR_ERR_FORMAT, "%s: __metadata__ has no 'config'", path);
        return TR_OK;
    }
    {
        char w[300];
        tr_status st;
        snprintf(w, sizeof w, "%.200s: __metadata__", path);
        if ((st = tr__ck_config_parse(ctx, conf, strlen(conf), w, model && strcmp(model, "hrm") == 0 ? TR_ARCH_HRM : TR_ARCH_TRM, cfg)) != TR_OK) return st;
    }
    *has_cfg = 1;
    return TR_OK;
}

TRDEF tr_status tr_checkpoint_read_config(tr_ctx *ctx, const char *path, tr_model_config *out) {
    tr_st_file *f;
    tr_status st;
    int has;
    if (!ctx) return TR_ERR_INVALID_ARG;
    if (!path || !out) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_checkpoint_read_config: NULL argument");
    if ((st = tr_st_open(ctx, path, &f)) != TR_OK) return st;
    st = tr__ck_read_meta(ctx, f, path, tr_st_metadata(f, "content") && strcmp(tr_st_metadata(f, "content"), "trainer_state") == 0 ? "trainer_state" : NULL, 1, out, &has);
    tr_st_close(f);
    return st;
}

/* ---- model save --------------------------------------------------------------------------- */
TR__FN tr_status tr__model_save_ex(tr_model *m, const char *path, const tr_model_save_options *opt, const tr__io_fault *fault) {
    tr_ctx *ctx;
    tr_dtype dt = opt ? opt->dtype : TR_F32;
    tr__ck_owned own;
    tr__sb cfg;
    tr_st_tensor *ts = NULL;
    tr_status st;
    int i;
    char ver[16];
    const char *mk[5], *mv[5];
    if (!m) return TR_ERR_INVALID_ARG;
    ctx = m->ctx;
    if (!path) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_model_save: path is NULL");
    if (dt != TR_F32 && dt != TR_BF16 && dt != TR_F16)
        return tr__err(ctx, TR_ERR_INVALID_ARG, "%s: cannot save model tensors as %s (F32, BF16 or F16)", path, tr_dtype_name(dt));
    if ((st = tr__model_download(m)) != TR_OK) return st;
    own.ctx = ctx, own.p = NULL, own.n = own.cap = 0;
    tr__sb_init(&cfg, ctx);
    tr__ck_config_json(&cfg, &m->cfg);
    if ((st = tr__sb_status(&cfg)) != TR_OK) goto done;
    ts = (tr_st_tensor *)tr__calloc(ctx, (size_t)m->n_tensors, sizeof *ts);
    if (!ts) {
        st = TR_ERR_OUT_OF_MEMORY;
        goto done;
    }
    for (i = 0; i < m->n_tensors; i++) {
        const tr__tensor_entry *e = &m->tensors[i];
        const void *data;
        if (dt == TR_F32) data = tr__ck_le(&own, e->data, 4, e->numel);
        else {
            unsigned char *b = (unsigned char *)tr__ck_own(&own, 2 * e->numel);
            size_t k;
            if (b)
                for (k = 0; k < e->numel; k++) {
                    uint16_t h = dt == TR_BF16 ? tr__f32_to_bf16(e->data[k]) : tr__f32_to_f16(e->data[k]);
                    b[2 * k] = (unsigned char)(h & 0xff), b[2 * k + 1] = (unsigned char)(h >> 8);
                }
            data = b;
        }
        if (!data) {
            st = TR_ERR_OUT_OF_MEMORY;
            goto done;
        }
        tr__ck_tensor(&ts[i], e->name, dt, e->ndim, e->shape[0], e->shape[1], 0, data);
    }
    snprintf(ver, sizeof ver, "%d", TR_CHECKPOINT_FORMAT_VERSION);
    mk[0] = "format", mv[0] = "tinyrec";
    mk[1] = "format_version", mv[1] = ver;
    mk[2] = "model", mv[2] = m->cfg.arch == TR_ARCH_HRM ? "hrm" : "trm";
    mk[3] = "config", mv[3] = cfg.data;
    mk[4] = "tinyrec_version", mv[4] = TINYREC_VERSION_STRING;
    st = tr__st_write_ex(ctx, path, ts, (size_t)m->n_tensors, mk, mv, 5, fault);
done:
    tr__free(ctx, ts);
    tr__ck_own_free(&own);
    tr__sb_free(&cfg);
    return st;
}

TRDEF tr_status tr_model_save(tr_model *m, const char *path, const tr_model_save_options *opt) { return tr__model_save_ex(m, path, opt, NULL); }

/* ---- model load --------------------------------------------------------------------------- */
/* Loads f's tensors into m: everything is checked (and the scratch allocated) before the first
   byte of the model changes. target_rows: the puzzle table's wanted row count (the model's). */
TR__FN tr_status tr__ck_load_into(tr_model *m, const tr_st_file *f, const char *path, const tr_model_load_options *o) {
    tr_ctx *ctx = m->ctx;
    const tr_st_tensor **src = NULL;
    double *acc = NULL;
    char list[TR__CK_ERRBUF];
    int i, nmiss = 0, nunexp = 0, resize_idx = -1;
    size_t j, nf = tr_st_count(f);
    tr_status st = TR_OK;
    src = (const tr_st_tensor **)tr__calloc(ctx, (size_t)TR__MAX(m->n_tensors, 1), sizeof *src);
    if (!src) return TR_ERR_OUT_OF_MEMORY;
    list[0] = 0;
    for (i = 0; i < m->n_tensors; i++) {
        if ((st = tr__ck_find(ctx, f, path, m->tensors[i].name, &src[i])) != TR_OK) goto done;
        if (!src[i]) tr__ck_list_add(list, sizeof list, &nmiss, m->tensors[i].name);
    }
    if (nmiss) {
        st = tr__err(ctx, TR_ERR_NOT_FOUND, "%s: %d tensor%s of the model %s missing: %s", path, nmiss, nmiss > 1 ? "s" : "", nmiss > 1 ? "are" : "is", list);
        goto done;
    }
    list[0] = 0;
    for (j = 0; j < nf; j++) {
        const char *nm = tr_st_at(f, j)->name, *bare = nm;
        int found = 0;
        if (strncmp(bare, TR__CK_ORIG_MOD, sizeof TR__CK_ORIG_MOD - 1) == 0) bare += sizeof TR__CK_ORIG_MOD - 1;
        for (i = 0; i < m->n_tensors && !found; i++) found = strcmp(m->tensors[i].name, bare) == 0;
        if (!found) tr__ck_list_add(list, sizeof list, &nunexp, nm);
    }
    if (nunexp) {
        if (!(o && o->allow_unexpected)) {
            st = tr__err(ctx, TR_ERR_FORMAT, "%s: %d unexpected tensor%s (not part of this model): %s", path, nunexp, nunexp > 1 ? "s" : "", list);
            goto done;
        }
        tr__log(ctx, TR_LOG_WARN, "%s: skipping %d tensor%s that the model does not have: %s", path, nunexp, nunexp > 1 ? "s" : "", list);
    }
    for (i = 0; i < m->n_tensors; i++) {
        const tr__tensor_entry *e = &m->tensors[i];
        const tr_st_tensor *t = src[i];
        char s1[200], s2[64];
        int same = t->ndim == e->ndim, d;
        if (!tr__ck_is_float(t->dtype)) {
            st = tr__err(ctx, TR_ERR_FORMAT, "%s: tensor '%s' has dtype %s; a model tensor must be F32, BF16 or F16", path, t->name, tr_dtype_name(t->dtype));
            goto done;
        }
        for (d = 0; same && d < e->ndim; d++) same = t->shape[d] == e->shape[d];
        if (same) continue;
        if (e->dev == m->puzzle_emb && t->ndim == 2 && t->shape[1] == e->shape[1]) {
            if (!(o && o->allow_puzzle_resize)) {
                st = tr__err(ctx, TR_ERR_FORMAT,
                             "%s: puzzle table '%s' has %lld rows but the model has num_puzzle_identifiers = %lld (allow_puzzle_resize re-initialises it to the mean row)",
                             path, t->name, (long long)t->shape[0], (long long)e->shape[0]);
                goto done;
            }
            if (t->shape[0] == 0) {
                st = tr__err(ctx, TR_ERR_FORMAT, "%s: puzzle table '%s' has no rows to take a mean of", path, t->name);
                goto done;
            }
            acc = (double *)tr__calloc(ctx, (size_t)TR__MAX(m->Dp, 1), sizeof(double));
            if (!acc) {
                st = TR_ERR_OUT_OF_MEMORY;
                goto done;
            }
            resize_idx = i;
            continue;
        }
        st = tr__err(ctx, TR_ERR_FORMAT, "%s: tensor '%s' has shape %s, expected %s", path, t->name, tr__st_shape_str(t, s1, sizeof s1),
                     tr__ck_shape2(e->ndim, e->shape, s2, sizeof s2));
        goto done;
    }
    /* everything checked: copy (nothing below can fail) */
    for (i = 0; i < m->n_tensors; i++) {
        tr__tensor_entry *e = &m->tensors[i];
        const tr_st_tensor *t = src[i];
        if (i == resize_idx) {
            size_t rows = (size_t)t->shape[0], cols = (size_t)t->shape[1], r, k;
            for (r = 0; r < rows; r++)
                for (k = 0; k < cols; k++) acc[k] += tr__ck_elem_f32(t, r * cols + k);
            for (r = 0; r < (size_t)e->shape[0]; r++)
                for (k = 0; k < cols; k++) e->data[r * cols + k] = (float)(acc[k] / (double)rows);
            tr__log(ctx, TR_LOG_WARN, "%s: puzzle table '%s' has %zu rows but the model needs %lld: every row re-initialised to the mean row of the loaded table",
                    path, t->name, rows, (long long)e->shape[0]);
            continue;
        }
        if ((st = tr_st_read_f32(ctx, t, e->data, e->numel)) != TR_OK) goto done; /* not reached: checked above */
    }
    st = tr__model_upload(m); /* a device model computes with its device copy */
done:
    tr__free(ctx, acc);
    tr__free(ctx, (void *)src);
    return st;
}

TRDEF tr_status tr_model_load_weights(tr_model *m, const char *path, const tr_model_load_options *opt) {
    tr_ctx *ctx;
    tr_st_file *f = NULL;
    tr_model_config fc;
    int has_cfg;
    tr_status st;
    if (!m) return TR_ERR_INVALID_ARG;
    ctx = m->ctx;
    if (!path) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_model_load_weights: path is NULL");
    if ((st = tr_st_open(ctx, path, &f)) != TR_OK) return st;
    if ((st = tr__ck_read_meta(ctx, f, path, NULL, 0, &fc, &has_cfg)) == TR_OK) {
        if (has_cfg) { /* fields that do not change shapes but change the model's behaviour */
            char diff[300];
            tr_model_config a = fc, b = m->cfg;
            a.num_puzzle_identifiers = b.num_puzzle_identifiers; /* handled by the table's resize rule */
            if (tr__ck_diff_fields(tr__ck_model_fields, TR__CK_NMODEL, &a, &b, diff, sizeof diff, 1))
                tr__log(ctx, TR_LOG_WARN, "%s: the file's config differs from the model's: %s (loading the weights anyway)", path, diff);
        }
        st = tr__ck_load_into(m, f, path, opt);
    }
    tr_st_close(f);
    return st;
}

/* A lower bound on a config's weight count (token embedding, lm_head, the channel MLPs), to refuse
   a config far larger than the file before the model is allocated. */
TR__FN double tr__ck_min_floats(const tr_model_config *c) {
    double V = c->vocab_size, D = c->hidden_size, I = tr__swiglu_width(c->expansion, c->hidden_size);
    return 2.0 * V * D + (double)(c->L_layers + (c->arch == TR_ARCH_HRM ? c->H_layers : 0)) * 3.0 * I * D;
}

TRDEF tr_status tr_model_load(tr_ctx *ctx, const char *path, const tr_model_load_options *opt, tr_model **out) {
    tr_st_file *f = NULL;
    tr_model_config cfg;
    tr_model *m = NULL;
    int has_cfg;
    tr_status st;
    if (!ctx) return TR_ERR_INVALID_ARG;
    if (!path || !out) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_model_load: NULL argument");
    *out = NULL;
    if ((st = tr_st_open(ctx, path, &f)) != TR_OK) return st;
    st = tr__ck_read_meta(ctx, f, path, NULL, 1, &cfg, &has_cfg);
    if (st == TR_OK) { /* before allocating a model of the config's size: can the file hold it? */
        double need = tr__ck_min_floats(&cfg) * 2.0, have = 0; /* BF16/F16: 2 bytes a weight */
        size_t j;
        for (j = 0; j < tr_st_count(f); j++) have += (double)tr_st_at(f, j)->nbytes;
        if (have < need)
            st = tr__err(ctx, TR_ERR_FORMAT, "%s: the config needs at least %.0f weights (embedding, lm_head and MLP tensors), but the file's tensors hold only %.0f bytes: tensors are missing or the config is wrong",
                         path, need / 2, have);
    }
    if (st == TR_OK && opt && opt->num_puzzle_identifiers > 0) cfg.num_puzzle_identifiers = opt->num_puzzle_identifiers;
    if (st == TR_OK) st = tr_model_create(ctx, &cfg, &m);
    if (st == TR_OK) st = tr__ck_load_into(m, f, path, opt);
    tr_st_close(f);
    if (st != TR_OK) {
        tr_model_destroy(m);
        return st;
    }
    *out = m;
    return TR_OK;
}

/* ---- trainer state ------------------------------------------------------------------------ */
TRDEF tr_status tr_trainer_state_path(const char *model_path, char *buf, size_t cap) {
    static const char ext[] = ".safetensors", st_ext[] = ".state.safetensors";
    size_t n, base;
    if (!model_path || !buf) return TR_ERR_INVALID_ARG;
    n = strlen(model_path);
    base = n >= sizeof ext - 1 && strcmp(model_path + n - (sizeof ext - 1), ext) == 0 ? n - (sizeof ext - 1) : n;
    if (base + sizeof st_ext > cap) return TR_ERR_OVERFLOW;
    memcpy(buf, model_path, base);
    memcpy(buf + base, st_ext, sizeof st_ext);
    return TR_OK;
}

/* Names of the state tensors: "<prefix><model tensor name>". */
static const char *const tr__ck_state_prefix[] = {"optimizer.exp_avg.", "optimizer.exp_avg_sq.", "ema.", "params."};
/* The other tensors of a state file. */
static const char *const tr__ck_state_fixed[] = {"trainer.step", "trainer.rng", "carry.z_H", "carry.z_L", "carry.steps", "carry.halted",
                                                 "carry.inputs", "carry.labels", "carry.puzzle_identifiers", "sampler"};

/* Host copies of a trainer's device state for save/load: the moments and EMA [3P] (one block
   on the device) and z_H|z_L [2N]. On the CPU these are the live buffers themselves. */
TR__FN tr_status tr__trainer_host_state(tr_trainer *t, float **opt, float **zs) {
    tr_model *m = t->m;
    size_t P3 = 3 * m->n_params, N2 = 2 * (size_t)t->carry->B * m->S * m->D;
    tr_status st;
    *opt = t->adam_m, *zs = t->carry->z_H;
    if (!m->ctx->dev_active) return TR_OK;
    if (!(*opt = (float *)tr__alloc(m->ctx, (P3 + N2) * sizeof(float)))) return TR_ERR_OUT_OF_MEMORY;
    *zs = *opt + P3;
    if ((st = tr__dget(m->ctx, *opt, t->adam_m, P3 * sizeof(float))) != TR_OK || (st = tr__dget(m->ctx, *zs, t->carry->z_H, N2 * sizeof(float))) != TR_OK) {
        tr__free(m->ctx, *opt);
        *opt = NULL;
    }
    return st;
}

TR__FN void tr__trainer_host_state_free(tr_trainer *t, float *opt) {
    if (opt && opt != t->adam_m) tr__free(t->m->ctx, opt);
}

/* Data-parallel checkpoints hold the global batch's ACT carry, so that a run resumes with any number of
   ranks: every rank's rows are gathered, in rank order, into *gz (z_H | z_L, [Bg,S,D] each) and *gi
   (steps | halted | inputs | labels | puzzle ids, the carry's own layout for Bg rows), one block to free
   with *gz. Collective. */
TR__FN tr_status tr__carry_gather(tr_trainer *t, const float *hz, float **gz, int32_t **gi) {
    const tr_comm *cm = t->tc.comm;
    tr_model *m = t->m;
    tr_carry *c = t->carry;
    size_t B = (size_t)c->B, Bg = B * (size_t)cm->size, SD = (size_t)m->S * m->D, L = (size_t)m->L;
    const void *part[7];
    size_t len[7], at[7], k, off = 0;
    tr_status st;
    *gz = (float *)tr__alloc(m->ctx, (2 * Bg * SD + Bg * (3 + 2 * L)) * sizeof(float));
    if (!*gz) return TR_ERR_OUT_OF_MEMORY;
    *gi = (int32_t *)(*gz + 2 * Bg * SD);
    part[0] = hz, part[1] = hz + B * SD, part[2] = c->steps, part[3] = c->halted, part[4] = c->inputs, part[5] = c->labels, part[6] = c->pids;
    len[0] = len[1] = SD, len[2] = len[3] = 1, len[4] = len[5] = L, len[6] = 1; /* 4-byte items per row */
    for (k = 0; k < 7; k++) at[k] = off, off += Bg * len[k];
    for (k = 0; k < 7; k++)
        if ((st = cm->allgather(cm->user, part[k], *gz + at[k], B * len[k] * 4)) != TR_OK) return tr__comm_err(m->ctx, cm, st, "the ACT carry all-gather");
    return TR_OK;
}

/* Data-parallel: rank 0's status of a write it alone did, on every rank (st is this rank's own). */
TR__FN tr_status tr__root_status(tr_trainer *t, tr_status st) {
    const tr_comm *cm = t->tc.comm;
    int v = (int)st;
    tr_status bs;
    if (!tr__dist(t)) return st;
    if ((bs = cm->broadcast(cm->user, &v, sizeof v, 0)) != TR_OK) return tr__comm_err(t->m->ctx, cm, bs, "the checkpoint status broadcast");
    if (cm->rank != 0 && v != TR_OK) return tr__err(t->m->ctx, (tr_status)v, "rank 0 could not write the checkpoint (%s; its log says why)", tr_status_string((tr_status)v));
    return (tr_status)v;
}

TR__FN tr_status tr__trainer_save_ex(tr_trainer *t, const char *path, const void *extra, size_t extra_len, const tr__io_fault *fault) {
    tr_model *m;
    tr_ctx *ctx;
    tr_carry *c;
    tr__ck_owned own;
    tr__sb cfg, tcfg;
    tr_st_tensor *ts = NULL;
    char *names = NULL, ver[16], stepbuf[32];
    const char *mk[8], *mv[8];
    char scalebuf[64];
    size_t n = 0, cap, nl = TR__NAME_LEN + 32;
    int i, p, B, S, D, L;
    unsigned char hdr[24]; /* step (i64) + rng key, counter (i64 x 2), little-endian */
    float *hopt = NULL, *hz = NULL, *gz = NULL;
    const int32_t *ci; /* steps | halted | inputs | labels | pids */
    tr_status st;
    if (!t) return TR_ERR_INVALID_ARG;
    m = t->m, ctx = m->ctx, c = t->carry;
    if (!path) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_trainer_save: path is NULL");
    if (extra_len && !extra) return tr__err(ctx, TR_ERR_INVALID_ARG, "%s: extra is NULL but extra_len is %zu", path, extra_len);
    B = c->B, S = m->S, D = m->D, L = m->L;
    if ((st = tr__model_download(m)) != TR_OK || (st = tr__trainer_host_state(t, &hopt, &hz)) != TR_OK) return st;
    ci = c->steps;
    own.ctx = ctx, own.p = NULL, own.n = own.cap = 0;
    tr__sb_init(&cfg, ctx);
    tr__sb_init(&tcfg, ctx);
    if (tr__dist(t)) {
        int32_t *gi;
        if ((st = tr__carry_gather(t, hz, &gz, &gi)) != TR_OK || t->tc.comm->rank != 0) goto done; /* rank 0 alone writes */
        B = t->tc.global_batch_size, hz = gz, ci = gi;
    }
    tr__ck_config_json(&cfg, &m->cfg);
    tr__ck_json_fields(&tcfg, tr__ck_train_fields, TR__CK_NTRAIN, &t->tc);
    if ((st = tr__sb_status(&cfg)) != TR_OK || (st = tr__sb_status(&tcfg)) != TR_OK) goto done;
    cap = 2 + 4 * (size_t)m->n_tensors + 8;
    ts = (tr_st_tensor *)tr__calloc(ctx, cap, sizeof *ts);
    names = ts ? (char *)tr__calloc(ctx, cap, nl) : NULL;
    if (!names) {
        st = TR_ERR_OUT_OF_MEMORY;
        goto done;
    }
    {
        uint64_t w[3];
        int k, b;
        w[0] = (uint64_t)(int64_t)t->step, w[1] = t->rng.key, w[2] = t->rng.counter;
        for (k = 0; k < 3; k++)
            for (b = 0; b < 8; b++) hdr[8 * k + b] = (unsigned char)(w[k] >> (8 * b));
        tr__ck_tensor(&ts[n++], "trainer.step", TR_I64, 0, 0, 0, 0, hdr);
        tr__ck_tensor(&ts[n++], "trainer.rng", TR_I64, 1, 2, 0, 0, hdr + 8);
    }
    for (p = 0; p < 4; p++)
        for (i = 0; i < m->n_tensors; i++) {
            const tr__tensor_entry *e = &m->tensors[i];
            const float *src;
            const void *le;
            char *nm = names + n * nl;
            if (p < 3 && !e->trainable) continue;
            if (p == 2 && !t->tc.ema) continue;
            src = p == 3 ? e->data : hopt + (size_t)p * m->n_params + (e->dev - m->params);
            if (!(le = tr__ck_le(&own, src, 4, e->numel))) {
                st = TR_ERR_OUT_OF_MEMORY;
                goto done;
            }
            snprintf(nm, nl, "%s%s", tr__ck_state_prefix[p], e->name);
            tr__ck_tensor(&ts[n++], nm, TR_F32, e->ndim, e->shape[0], e->shape[1], 0, le);
        }
    {
        const void *zh = tr__ck_le(&own, hz, 4, (size_t)B * S * D), *zl = tr__ck_le(&own, hz + (size_t)B * S * D, 4, (size_t)B * S * D);
        const void *stp = tr__ck_le(&own, ci, 4, (size_t)B), *hl = tr__ck_le(&own, ci + B, 4, (size_t)B);
        const void *in = tr__ck_le(&own, ci + 2 * (size_t)B, 4, (size_t)B * L), *lb = tr__ck_le(&own, ci + (2 + (size_t)L) * B, 4, (size_t)B * L);
        const void *pid = tr__ck_le(&own, ci + (2 + 2 * (size_t)L) * B, 4, (size_t)B);
        if (!zh || !zl || !stp || !hl || !in || !lb || !pid) {
            st = TR_ERR_OUT_OF_MEMORY;
            goto done;
        }
        tr__ck_tensor(&ts[n++], "carry.z_H", TR_F32, 3, B, S, D, zh);
        tr__ck_tensor(&ts[n++], "carry.z_L", TR_F32, 3, B, S, D, zl);
        tr__ck_tensor(&ts[n++], "carry.steps", TR_I32, 1, B, 0, 0, stp);
        tr__ck_tensor(&ts[n++], "carry.halted", TR_I32, 1, B, 0, 0, hl);
        tr__ck_tensor(&ts[n++], "carry.inputs", TR_I32, 2, B, L, 0, in);
        tr__ck_tensor(&ts[n++], "carry.labels", TR_I32, 2, B, L, 0, lb);
        tr__ck_tensor(&ts[n++], "carry.puzzle_identifiers", TR_I32, 1, B, 0, 0, pid);
        tr__ck_tensor(&ts[n++], "sampler", TR_U8, 1, (int64_t)extra_len, 0, 0, extra_len ? extra : hdr);
    }
    snprintf(ver, sizeof ver, "%d", TR_CHECKPOINT_FORMAT_VERSION);
    snprintf(stepbuf, sizeof stepbuf, "%ld", t->step);
    mk[0] = "format", mv[0] = "tinyrec";
    mk[1] = "format_version", mv[1] = ver;
    mk[2] = "content", mv[2] = "trainer_state";
    mk[3] = "model", mv[3] = m->cfg.arch == TR_ARCH_HRM ? "hrm" : "trm";
    mk[4] = "config", mv[4] = cfg.data;
    mk[5] = "train_config", mv[5] = tcfg.data;
    mk[6] = "step", mv[6] = stepbuf;
    snprintf(scalebuf, sizeof scalebuf, "%.17g %d", t->loss_scale, t->scale_good);
    mk[7] = "loss_scale", mv[7] = scalebuf; /* float16's dynamic loss scale and its good-step count */
    st = tr__st_write_ex(ctx, path, ts, n, mk, mv, 8, fault);
done:
    tr__free(ctx, gz);
    tr__trainer_host_state_free(t, hopt);
    tr__free(ctx, names);
    tr__free(ctx, ts);
    tr__ck_own_free(&own);
    tr__sb_free(&cfg);
    tr__sb_free(&tcfg);
    return st;
}

TRDEF tr_status tr_trainer_save(tr_trainer *t, const char *path, const void *extra, size_t extra_len) {
    tr_status st;
    int swapped;
    if (!t) return TR_ERR_INVALID_ARG;
    /* the state always holds the live weights, even while the EMA ones are swapped in */
    swapped = t->ema_swapped;
    if (swapped) tr_trainer_swap_ema(t);
    st = tr__trainer_save_ex(t, path, extra, extra_len, NULL);
    if (swapped) tr_trainer_swap_ema(t);
    return tr__root_status(t, st);
}

/* A required state tensor with an exact dtype and shape. */
TR__FN tr_status tr__ck_state_get(tr_ctx *ctx, const tr_st_file *f, const char *path, const char *name, tr_dtype dt, int ndim, int64_t d0, int64_t d1,
                                   int64_t d2, const tr_st_tensor **out) {
    int64_t shape[3];
    tr_status st;
    shape[0] = d0, shape[1] = d1, shape[2] = d2;
    *out = tr_st_find(f, name);
    if (!*out) return tr__err(ctx, TR_ERR_NOT_FOUND, "%s: missing tensor '%s'", path, name);
    if ((*out)->dtype != dt)
        return tr__err(ctx, TR_ERR_FORMAT, "%s: tensor '%s' has dtype %s, expected %s (trainer state is stored exactly)", path, name, tr_dtype_name((*out)->dtype),
                       tr_dtype_name(dt));
    if ((st = tr_st_get(ctx, f, name, ndim, shape, out)) != TR_OK) return st;
    return TR_OK;
}

/* The int32 payload of a checked I32 tensor, element i. */
TR__FN int32_t tr__ck_i32(const tr_st_tensor *t, size_t i) {
    const unsigned char *p = (const unsigned char *)t->data + 4 * i;
    uint32_t u = (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
    int32_t s;
    memcpy(&s, &u, 4);
    return s;
}

TRDEF tr_status tr_trainer_load(tr_trainer *t, const char *path, void *extra, size_t extra_cap, size_t *extra_len) {
    tr_model *m;
    tr_ctx *ctx;
    tr_carry *c;
    tr_st_file *f = NULL;
    tr_model_config fc;
    tr_train_config ftc;
    const tr_st_tensor **src = NULL; /* [4 * n_tensors]: per prefix, per model tensor */
    const tr_st_tensor *t_step, *t_rng, *t_zh, *t_zl, *t_steps, *t_halted, *t_in, *t_lab, *t_pid, *t_samp;
    float *hopt = NULL, *hz = NULL;
    int64_t hdr[3];
    int has_cfg, i, p, B, Bl, S, D, L, nexp = 0;
    size_t j, k, nf, expected = 0, r0;
    char diff[300], list[TR__CK_ERRBUF];
    tr_status st;
    if (!t) return TR_ERR_INVALID_ARG;
    m = t->m, ctx = m->ctx, c = t->carry;
    if (!path) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_trainer_load: path is NULL");
    /* the file holds the global batch's carry (tr__carry_gather); this rank takes its rows */
    B = t->tc.global_batch_size, Bl = c->B, S = m->S, D = m->D, L = m->L;
    r0 = (size_t)(t->tc.comm ? t->tc.comm->rank : 0) * (size_t)Bl;
    if ((st = tr_st_open(ctx, path, &f)) != TR_OK) return st;
    if ((st = tr__ck_read_meta(ctx, f, path, "trainer_state", 1, &fc, &has_cfg)) != TR_OK) goto done;
    if (tr__ck_diff_fields(tr__ck_model_fields, TR__CK_NMODEL, &fc, &m->cfg, diff, sizeof diff, 1)) {
        st = tr__err(ctx, TR_ERR_CONFIG, "%s: the trainer state belongs to a different model config: %s", path, diff);
        goto done;
    }
    {
        const char *tj = tr_st_metadata(f, "train_config");
        tr_json *root = NULL;
        char w[300];
        if (!tj) {
            st = tr__err(ctx, TR_ERR_FORMAT, "%s: __metadata__ has no 'train_config'", path);
            goto done;
        }
        snprintf(w, sizeof w, "%.200s: __metadata__ train_config", path);
        memset(&ftc, 0, sizeof ftc);
        if ((st = tr_json_parse(ctx, tj, strlen(tj), w, &root)) != TR_OK) goto done;
        st = tr__ck_parse_fields(ctx, root, tr__ck_train_fields, TR__CK_NTRAIN, &ftc, w);
        tr_json_free(ctx, root);
        if (st != TR_OK) goto done;
        if (ftc.global_batch_size != t->tc.global_batch_size) {
            st = tr__err(ctx, TR_ERR_CONFIG, "%s: the state has global_batch_size %d, the trainer %d (the ACT carry cannot be resized)", path,
                         ftc.global_batch_size, t->tc.global_batch_size);
            goto done;
        }
        if (ftc.ema != t->tc.ema && t->tc.ema) {
            st = tr__err(ctx, TR_ERR_CONFIG, "%s: the state was saved without EMA, but the trainer has ema on", path);
            goto done;
        }
        if (tr__ck_diff_fields(tr__ck_train_fields, TR__CK_NTRAIN, &ftc, &t->tc, diff, sizeof diff, 1))
            tr__log(ctx, TR_LOG_WARN, "%s: train config differs from the saved one: %s (the trainer's values apply)", path, diff);
    }
    /* every tensor, checked before anything is modified */
    if ((st = tr__ck_state_get(ctx, f, path, "trainer.step", TR_I64, 0, 0, 0, 0, &t_step)) != TR_OK) goto done;
    if ((st = tr__ck_state_get(ctx, f, path, "trainer.rng", TR_I64, 1, 2, 0, 0, &t_rng)) != TR_OK) goto done;
    if ((st = tr__ck_state_get(ctx, f, path, "carry.z_H", TR_F32, 3, B, S, D, &t_zh)) != TR_OK) goto done;
    if ((st = tr__ck_state_get(ctx, f, path, "carry.z_L", TR_F32, 3, B, S, D, &t_zl)) != TR_OK) goto done;
    if ((st = tr__ck_state_get(ctx, f, path, "carry.steps", TR_I32, 1, B, 0, 0, &t_steps)) != TR_OK) goto done;
    if ((st = tr__ck_state_get(ctx, f, path, "carry.halted", TR_I32, 1, B, 0, 0, &t_halted)) != TR_OK) goto done;
    if ((st = tr__ck_state_get(ctx, f, path, "carry.inputs", TR_I32, 2, B, L, 0, &t_in)) != TR_OK) goto done;
    if ((st = tr__ck_state_get(ctx, f, path, "carry.labels", TR_I32, 2, B, L, 0, &t_lab)) != TR_OK) goto done;
    if ((st = tr__ck_state_get(ctx, f, path, "carry.puzzle_identifiers", TR_I32, 1, B, 0, 0, &t_pid)) != TR_OK) goto done;
    t_samp = tr_st_find(f, "sampler");
    if (!t_samp) {
        st = tr__err(ctx, TR_ERR_NOT_FOUND, "%s: missing tensor 'sampler'", path);
        goto done;
    }
    if (t_samp->dtype != TR_U8 || t_samp->ndim != 1) {
        st = tr__err(ctx, TR_ERR_FORMAT, "%s: tensor 'sampler' must be a 1-D U8 tensor", path);
        goto done;
    }
    expected = sizeof tr__ck_state_fixed / sizeof tr__ck_state_fixed[0];
    /* the carry's contents index tables in the next step: validate them like a batch */
    for (j = 0; j < (size_t)B; j++) {
        int32_t s = tr__ck_i32(t_steps, j), h = tr__ck_i32(t_halted, j), pid = tr__ck_i32(t_pid, j);
        if (s < 0 || (h != 0 && h != 1) || pid < 0 || pid >= m->cfg.num_puzzle_identifiers) {
            st = tr__err(ctx, TR_ERR_FORMAT, "%s: carry row %zu is invalid (steps %d, halted %d, puzzle id %d of %d)", path, j, (int)s, (int)h, (int)pid,
                         m->cfg.num_puzzle_identifiers);
            goto done;
        }
        for (k = 0; k < (size_t)L; k++) {
            int32_t x = tr__ck_i32(t_in, j * L + k), y = tr__ck_i32(t_lab, j * L + k);
            if (x < 0 || x >= m->V || (y != -100 && (y < 0 || y >= m->V))) {
                st = tr__err(ctx, TR_ERR_FORMAT, "%s: carry row %zu position %zu: input %d / label %d is outside the vocabulary [0, %d)", path, j, k, (int)x, (int)y,
                             m->V);
                goto done;
            }
        }
    }
    src = (const tr_st_tensor **)tr__calloc(ctx, 4 * (size_t)m->n_tensors + 1, sizeof *src);
    if (!src) {
        st = TR_ERR_OUT_OF_MEMORY;
        goto done;
    }
    for (p = 0; p < 4; p++)
        for (i = 0; i < m->n_tensors; i++) {
            const tr__tensor_entry *e = &m->tensors[i];
            char nm[TR__NAME_LEN + 32];
            const tr_st_tensor **s = &src[(size_t)p * m->n_tensors + i];
            if (p < 3 && !e->trainable) continue;
            snprintf(nm, sizeof nm, "%s%s", tr__ck_state_prefix[p], e->name);
            if (p == 2 && !ftc.ema) continue;
            if ((st = tr__ck_state_get(ctx, f, path, nm, TR_F32, e->ndim, e->shape[0], e->shape[1], 0, s)) != TR_OK) goto done;
            expected++;
        }
    /* anything else is unexpected */
    nf = tr_st_count(f);
    if (nf != expected) {
        list[0] = 0;
        for (j = 0; j < nf; j++) {
            const char *nm = tr_st_at(f, j)->name;
            int known = 0;
            for (k = 0; k < sizeof tr__ck_state_fixed / sizeof tr__ck_state_fixed[0] && !known; k++) known = strcmp(nm, tr__ck_state_fixed[k]) == 0;
            for (p = 0; p < 4 && !known; p++)
                for (i = 0; i < m->n_tensors && !known; i++) known = src[(size_t)p * m->n_tensors + i] && strcmp(src[(size_t)p * m->n_tensors + i]->name, nm) == 0;
            if (!known) tr__ck_list_add(list, sizeof list, &nexp, nm);
        }
        st = tr__err(ctx, TR_ERR_FORMAT, "%s: %d unexpected tensor%s in the trainer state: %s", path, nexp, nexp > 1 ? "s" : "", list);
        goto done;
    }
    if (extra_len) *extra_len = t_samp->nbytes;
    if (extra && t_samp->nbytes > extra_cap) {
        st = tr__err(ctx, TR_ERR_OVERFLOW, "%s: the saved sampler blob is %zu bytes, more than the %zu-byte buffer", path, t_samp->nbytes, extra_cap);
        goto done;
    }
    if ((st = tr_st_read_i64(ctx, t_step, hdr, 1)) != TR_OK || (st = tr_st_read_i64(ctx, t_rng, hdr + 1, 2)) != TR_OK) goto done;
    if (hdr[0] < 0 || (sizeof(long) < 8 && hdr[0] > (int64_t)LONG_MAX)) {
        st = tr__err(ctx, TR_ERR_FORMAT, "%s: trainer.step %lld is out of range", path, (long long)hdr[0]);
        goto done;
    }
    /* everything checked: restore (only the copies to a device can fail below) */
    if ((st = tr__model_download(m)) != TR_OK || (st = tr__trainer_host_state(t, &hopt, &hz)) != TR_OK) goto done;
    for (p = 0; p < 4; p++)
        for (i = 0; i < m->n_tensors; i++) {
            const tr__tensor_entry *e = &m->tensors[i];
            const tr_st_tensor *s = src[(size_t)p * m->n_tensors + i];
            float *dst;
            if (!s) continue;
            dst = p == 3 ? e->data : hopt + (size_t)p * m->n_params + (e->dev - m->params);
            tr_st_read_f32(ctx, s, dst, e->numel);
        }
    {
        size_t N = (size_t)Bl * S * D;
        tr_st_tensor zh = *t_zh, zl = *t_zl; /* this rank's rows of them */
        zh.data = (const unsigned char *)zh.data + r0 * S * D * 4, zl.data = (const unsigned char *)zl.data + r0 * S * D * 4;
        zh.nbytes = zl.nbytes = N * 4, zh.shape[0] = zl.shape[0] = Bl;
        tr_st_read_f32(ctx, &zh, hz, N);
        tr_st_read_f32(ctx, &zl, hz + N, N);
    }
    if ((st = tr__model_upload(m)) != TR_OK || (st = tr__dput(ctx, t->adam_m, hopt, 3 * m->n_params * sizeof(float))) != TR_OK ||
        (st = tr__dput(ctx, c->z_H, hz, 2 * (size_t)Bl * S * D * sizeof(float))) != TR_OK)
        goto done;
    for (j = 0; j < (size_t)Bl; j++) {
        c->steps[j] = tr__ck_i32(t_steps, r0 + j);
        c->halted[j] = tr__ck_i32(t_halted, r0 + j);
        c->pids[j] = tr__ck_i32(t_pid, r0 + j);
    }
    for (j = 0; j < (size_t)Bl * L; j++) {
        c->inputs[j] = tr__ck_i32(t_in, r0 * L + j);
        c->labels[j] = tr__ck_i32(t_lab, r0 * L + j);
    }
    t->step = (long)hdr[0];
    {
        const char *ls = tr_st_metadata(f, "loss_scale");
        double scale;
        int good;
        t->loss_scale = TR__LOSS_SCALE_INIT, t->scale_good = 0; /* files written before float16 existed */
        if (ls && sscanf(ls, "%lf %d", &scale, &good) == 2 && scale >= 1.0 && scale <= TR__LOSS_SCALE_MAX && good >= 0)
            t->loss_scale = scale, t->scale_good = good;
    }
    memcpy(&t->rng.key, &hdr[1], 8);
    memcpy(&t->rng.counter, &hdr[2], 8);
    t->ema_swapped = 0; /* the state holds the live weights */
    if (extra && t_samp->nbytes) memcpy(extra, t_samp->data, t_samp->nbytes);
    st = TR_OK;
done:
    tr__trainer_host_state_free(t, hopt);
    tr__free(ctx, (void *)src);
    tr_st_close(f);
    return st;
}
/* ---- a training run's checkpoint ---------------------------------------------------------- */
/* A checkpoint must never hold what a diverged run made: every tensor of the model is checked. */
TR__FN tr_status tr__ck_check_finite(tr_model *m, const char *which) {
    tr_status st;
    int i, ok;
    /* scanned where they live (one flag read per tensor on a device): tr_model_save downloads them after */
    for (i = 0; i < m->n_tensors; i++) {
        if ((st = tr__op_all_finite(m->ctx, m->tensors[i].numel, m->tensors[i].dev, &ok)) != TR_OK) return st;
        if (!ok) return tr__err(m->ctx, TR_ERR_NONFINITE, "checkpoint not written: the %s weights of %s hold NaN or infinite values", which, m->tensors[i].name);
    }
    return TR_OK;
}

TRDEF tr_status tr_checkpoint_save(tr_trainer *t, const char *dir, int best, const void *extra, size_t extra_len) {
    tr_ctx *ctx;
    char *latest, *bestp, *state;
    tr_status st, st2;
    int swapped = 0;
    if (!t) return TR_ERR_INVALID_ARG;
    ctx = t->m->ctx;
    if (!dir) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_checkpoint_save: dir is NULL");
    latest = tr__path3(ctx, dir, TR_CHECKPOINT_LATEST, NULL);
    bestp = tr__path3(ctx, dir, TR_CHECKPOINT_BEST, NULL);
    state = tr__path3(ctx, dir, TR_CHECKPOINT_LATEST_STATE, NULL);
    st = latest && bestp && state ? tr__ck_check_finite(t->m, t->tc.ema && !t->ema_swapped ? "live" : "model") : TR_ERR_OUT_OF_MEMORY;
    /* the model files hold the weights evaluation uses: the EMA ones when there are */
    if (st == TR_OK && t->tc.ema && !t->ema_swapped && (st = tr_trainer_swap_ema(t)) == TR_OK) {
        swapped = 1;
        st = tr__ck_check_finite(t->m, "EMA");
    }
    /* data-parallel: every rank has the same weights; rank 0 alone writes, the others join the carry's gather */
    if (st == TR_OK && (!tr__dist(t) || t->tc.comm->rank == 0)) {
        st = tr_model_save(t->m, latest, NULL);
        if (st == TR_OK && best) st = tr_model_save(t->m, bestp, NULL);
    }
    if (swapped && (st2 = tr_trainer_swap_ema(t)) != TR_OK && st == TR_OK) st = st2;
    st = tr__root_status(t, st);
    if (st == TR_OK) st = tr_trainer_save(t, state, extra, extra_len);
    tr__free(ctx, latest);
    tr__free(ctx, bestp);
    tr__free(ctx, state);
    return st;
}
/* >>checkpoint-end */

/* A run's metrics history (tr_metrics_history) and its SVG plot. */
/* >>metrics */

TRDEF tr_status tr_metrics_history_add(tr_ctx *ctx, tr_metrics_history *h, int is_eval, const tr_metrics_point *p) {
    tr_metrics_point **a;
    size_t *n, *cap;
    if (!h || !p) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_metrics_history_add: NULL argument");
    a = is_eval ? &h->eval : &h->train, n = is_eval ? &h->neval : &h->ntrain, cap = is_eval ? &h->cap_eval : &h->cap_train;
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 1024;
        tr_metrics_point *na = nc <= SIZE_MAX / sizeof *na ? (tr_metrics_point *)tr__alloc(ctx, nc * sizeof *na) : NULL;
        if (!na) return tr__err(ctx, TR_ERR_OUT_OF_MEMORY, "out of memory for %zu metrics points", nc);
        if (*n) memcpy(na, *a, *n * sizeof *na);
        tr__free(ctx, *a);
        *a = na, *cap = nc;
    }
    (*a)[(*n)++] = *p;
    return TR_OK;
}

TRDEF void tr_metrics_history_free(tr_ctx *ctx, tr_metrics_history *h) {
    if (!h) return;
    tr__free(ctx, h->train), tr__free(ctx, h->eval);
    memset(h, 0, sizeof *h);
}

/* A number member; NAN when absent or null. */
TR__FN double tr__json_num_or_nan(const tr_json *obj, const char *key) {
    const tr_json *v = tr_json_get(obj, key);
    return v && v->type == TR_JSON_NUMBER ? v->number : NAN;
}

TRDEF tr_status tr_metrics_history_load(tr_ctx *ctx, const char *path, long max_step, int rewrite, tr_metrics_history *h) {
    char *text = NULL, *line, *next;
    size_t len;
    tr__sb kept;
    tr_status st;
    FILE *f;
    if (!path || !h) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_metrics_history_load: NULL argument");
    if (!(f = fopen(path, "rb"))) {
        if (errno == ENOENT) return TR_OK; /* nothing logged yet */
        return tr__err(ctx, TR_ERR_IO, "%s: %s", path, strerror(errno));
    }
    fclose(f);
    if ((st = tr_read_file(ctx, path, &text, &len)) != TR_OK) return st;
    tr__sb_init(&kept, ctx);
    for (line = text; st == TR_OK && line < text + len; line = next) {
        tr_json *obj = NULL;
        const tr_json *type;
        tr_metrics_point p;
        size_t n;
        next = (char *)memchr(line, '\n', (size_t)(text + len - line));
        n = next ? (size_t)(next - line) : (size_t)(text + len - line);
        next = next ? next + 1 : text + len;
        if ((st = tr_json_parse(ctx, line, n, path, &obj)) != TR_OK) {
            st = st == TR_ERR_OUT_OF_MEMORY ? st : TR_OK; /* a line that is not JSON (a torn write) is dropped */
            continue;
        }
        p.step = 0;
        p.loss = tr__json_num_or_nan(obj, "step");
        if (obj->type == TR_JSON_OBJECT && p.loss <= (double)max_step) {
            p.step = (long)p.loss;
            p.loss = tr__json_num_or_nan(obj, "loss"), p.accuracy = tr__json_num_or_nan(obj, "accuracy"), p.exact_accuracy = tr__json_num_or_nan(obj, "exact_accuracy");
            type = tr_json_get(obj, "type");
            st = tr_metrics_history_add(ctx, h, type && type->type == TR_JSON_STRING && strcmp(type->string, "eval") == 0, &p);
            tr__sb_append(&kept, line, n), tr__sb_append(&kept, "\n", 1);
        }
        tr_json_free(ctx, obj);
    }
    if (st == TR_OK) st = tr__sb_status(&kept);
    if (st == TR_OK && rewrite) st = tr__write_whole(ctx, path, kept.data ? kept.data : "", kept.len);
    tr__sb_free(&kept);
    tr__free(ctx, text);
    return st;
}

/* Averages up to `width` buckets of a series (0 loss, 1 accuracy, 2 exact accuracy); returns the
   number of points written. */
TR__FN size_t tr__plot_buckets(const tr_metrics_point *pts, size_t n, int which, size_t width, double *xs, double *ys) {
    size_t b, out = 0, nb = n < width ? n : width;
    for (b = 0; b < nb; b++) {
        size_t lo = b * n / nb, hi = (b + 1) * n / nb, i, cnt = 0;
        double sx = 0, sy = 0;
        for (i = lo; i < hi; i++) {
            double v = which == 0 ? pts[i].loss : which == 1 ? pts[i].accuracy : pts[i].exact_accuracy;
            if (!isfinite(v)) continue;
            sx += (double)pts[i].step, sy += v, cnt++;
        }
        if (cnt) xs[out] = sx / cnt, ys[out] = sy / cnt, out++;
    }
    return out;
}

TR__FN double tr__plot_tick(double range, int ticks) {
    double raw = range / ticks, mag = pow(10, floor(log10(raw))), r = raw / mag;
    return (r < 1.5 ? 1 : r < 3 ? 2 : r < 7 ? 5 : 10) * mag;
}

/* A panel's frame: x0..x1 by y0..y1 (log10 units when log_y) at (px, py), pw x ph pixels. */
typedef struct tr__plot_panel {
    int px, py, pw, ph, log_y;
    double x0, x1, y0, y1;
} tr__plot_panel;

TR__FN void tr__plot_line(tr__sb *sb, const tr__plot_panel *P, const double *xs, const double *ys, size_t n, const char *color) {
    size_t i;
    if (!n) return;
    tr__sb_printf(sb, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", color);
    for (i = 0; i < n; i++) {
        double y = P->log_y ? log10(ys[i] > 1e-12 ? ys[i] : 1e-12) : ys[i];
        double X = P->px + (xs[i] - P->x0) / (P->x1 - P->x0) * P->pw, Y = P->py + P->ph - (y - P->y0) / (P->y1 - P->y0) * P->ph;
        if (Y < P->py) Y = P->py;
        if (Y > P->py + P->ph) Y = P->py + P->ph;
        tr__sb_printf(sb, "%.1f,%.1f ", X, Y);
    }
    tr__sb_printf(sb, "\"/>\n");
}

TR__FN void tr__plot_axes(tr__sb *sb, const tr__plot_panel *P, const char *title) {
    double t, st;
    tr__sb_printf(sb, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"white\" stroke=\"#999\"/>\n", P->px, P->py, P->pw, P->ph);
    tr__sb_printf(sb, "<text x=\"%d\" y=\"%d\" font-size=\"13\" font-weight=\"bold\">%s</text>\n", P->px, P->py - 6, title);
    st = tr__plot_tick(P->x1 - P->x0, 6);
    for (t = ceil(P->x0 / st) * st; t <= P->x1 + 1e-9; t += st) {
        double X = P->px + (t - P->x0) / (P->x1 - P->x0) * P->pw;
        tr__sb_printf(sb, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#eee\"/>", X, P->py, X, P->py + P->ph);
        tr__sb_printf(sb, "<text x=\"%.1f\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">%g</text>\n", X, P->py + P->ph + 14, t);
    }
    st = P->log_y ? 1 : tr__plot_tick(P->y1 - P->y0, 5);
    for (t = ceil(P->y0 / st) * st; t <= P->y1 + 1e-9; t += st) {
        double Y = P->py + P->ph - (t - P->y0) / (P->y1 - P->y0) * P->ph;
        tr__sb_printf(sb, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#eee\"/>", P->px, Y, P->px + P->pw, Y);
        tr__sb_printf(sb, "<text x=\"%d\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%g</text>\n", P->px - 4, Y + 4, P->log_y ? pow(10, t) : t);
    }
}

TRDEF tr_status tr_metrics_plot_svg(tr_ctx *ctx, const char *path, const char *title, const tr_metrics_history *h) {
    enum { W = 900, H = 620, PX = 70, PW = 800, PH = 220 };
    double *xs, lmin = INFINITY, lmax = -INFINITY, *ys;
    size_t i, n;
    tr__plot_panel loss, acc;
    tr__sb sb;
    tr_status st;
    const char *c;
    if (!path || !h) return tr__err(ctx, TR_ERR_INVALID_ARG, "tr_metrics_plot_svg: NULL argument");
    if (h->ntrain > SIZE_MAX / 2 / sizeof(double) - 1) return tr__err(ctx, TR_ERR_OVERFLOW, "tr_metrics_plot_svg: %zu points", h->ntrain);
    if (!(xs = (double *)tr__alloc(ctx, 2 * (h->ntrain + 1) * sizeof(double)))) return tr__err(ctx, TR_ERR_OUT_OF_MEMORY, "out of memory for the plot of %s", path);
    ys = xs + h->ntrain + 1;
    memset(&loss, 0, sizeof loss);
    loss.px = PX, loss.py = 50, loss.pw = PW, loss.ph = PH, loss.x1 = 1;
    for (i = 0; i < h->ntrain; i++) {
        if (h->train[i].step > loss.x1) loss.x1 = (double)h->train[i].step;
        if (isfinite(h->train[i].loss) && h->train[i].loss > 0) {
            if (h->train[i].loss < lmin) lmin = h->train[i].loss;
            if (h->train[i].loss > lmax) lmax = h->train[i].loss;
        }
    }
    for (i = 0; i < h->neval; i++)
        if (h->eval[i].step > loss.x1) loss.x1 = (double)h->eval[i].step;
    if (!(lmin < lmax)) lmin = 0.1, lmax = 10;
    loss.log_y = lmax / lmin > 20;
    if (loss.log_y) loss.y0 = floor(log10(lmin)), loss.y1 = ceil(log10(lmax));
    else loss.y0 = 0, loss.y1 = lmax * 1.05;
    acc = loss;
    acc.py = 330, acc.log_y = 0, acc.y0 = 0, acc.y1 = 1;
    tr__sb_init(&sb, ctx);
    tr__sb_printf(&sb, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\">\n", W, H);
    tr__sb_printf(&sb, "<rect width=\"100%%\" height=\"100%%\" fill=\"#fafafa\"/>\n");
    tr__sb_printf(&sb, "<text x=\"%d\" y=\"22\" font-size=\"15\">", PX);
    for (c = title ? title : ""; *c; c++) { /* XML text */
        if (*c == '<' || *c == '>' || *c == '&') tr__sb_printf(&sb, "%s", *c == '<' ? "&lt;" : *c == '>' ? "&gt;" : "&amp;");
        else tr__sb_append(&sb, c, 1);
    }
    tr__sb_printf(&sb, "</text>\n");
    tr__plot_axes(&sb, &loss, loss.log_y ? "train loss (log scale)" : "train loss");
    n = tr__plot_buckets(h->train, h->ntrain, 0, PW, xs, ys);
    tr__plot_line(&sb, &loss, xs, ys, n, "#1f77b4");
    tr__plot_axes(&sb, &acc, "accuracy and exact accuracy (lines: train; dots: eval)");
    n = tr__plot_buckets(h->train, h->ntrain, 1, PW, xs, ys);
    tr__plot_line(&sb, &acc, xs, ys, n, "#2ca02c");
    n = tr__plot_buckets(h->train, h->ntrain, 2, PW, xs, ys);
    tr__plot_line(&sb, &acc, xs, ys, n, "#d62728");
    for (i = 0; i < h->neval; i++) {
        double X = PX + (h->eval[i].step - acc.x0) / (acc.x1 - acc.x0) * PW;
        if (isfinite(h->eval[i].accuracy)) tr__sb_printf(&sb, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"#2ca02c\" stroke=\"black\"/>\n", X, 330 + PH - h->eval[i].accuracy * PH);
        if (isfinite(h->eval[i].exact_accuracy))
            tr__sb_printf(&sb, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"#d62728\" stroke=\"black\"/>\n", X, 330 + PH - h->eval[i].exact_accuracy * PH);
    }
    tr__sb_printf(&sb, "<text x=\"%d\" y=\"%d\" font-size=\"12\" text-anchor=\"middle\">step</text>\n", PX + PW / 2, 330 + PH + 30);
    tr__sb_printf(&sb, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"3\" fill=\"#1f77b4\"/><text x=\"%d\" y=\"%d\" font-size=\"12\">loss</text>\n", PX, H - 20, PX + 16, H - 15);
    tr__sb_printf(&sb, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"3\" fill=\"#2ca02c\"/><text x=\"%d\" y=\"%d\" font-size=\"12\">accuracy</text>\n", PX + 80, H - 20, PX + 96, H - 15);
    tr__sb_printf(&sb, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"3\" fill=\"#d62728\"/><text x=\"%d\" y=\"%d\" font-size=\"12\">exact accuracy</text>\n", PX + 190, H - 20, PX + 206,
                  H - 15);
    tr__sb_printf(&sb, "</svg>\n");
    tr__free(ctx, xs);
    if ((st = tr__sb_status(&sb)) == TR_OK) st = tr__write_whole(ctx, path, sb.data, sb.len);
    tr__sb_free(&sb);
    return st;
}
/* >>metrics-end */

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
