/* tinyrec-devices: the compatibility report. Lists the CPU (model, ISA features found at run time,
   the kernel set the library picks, threads) and every OpenCL platform and device (details probed
   here with dlopen, if an OpenCL ICD loader is installed; the selector "opencl:N" and the pick of
   "auto" from the library), runs a short forward and backward self-test of every CPU kernel set
   this machine supports against the scalar path and of the OpenCL device that "opencl" selects
   against the CPU, and recommends batch sizes for a preset from the memory the library says it
   needs and the memory each device has free.

     tinyrec-devices [--preset NAME] [--threads N] [--json]

   Exits 0 when every self-test passes (a missing OpenCL device is no failure), 1 when one fails,
   2 on bad arguments.
   Uses only the public API. */
#define TINYREC_IMPLEMENTATION
#include "tinyrec.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if !defined(_WIN32)
#include <dlfcn.h>
#include <unistd.h>
#define DEV_HAVE_DLOPEN 1
#else
#define DEV_HAVE_DLOPEN 0
#endif
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#define DEV_X86 1
#else
#define DEV_X86 0
#endif

/* ---- small string buffer ------------------------------------------------------------------ */
typedef struct sbuf {
    char *s;
    size_t n, cap;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        char *t;
        while (cap < b->n + n + 1) cap *= 2;
        t = (char *)realloc(b->s, cap);
        if (!t) return;
        b->s = t, b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}
static void sb_puts(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }
static void sb_printf(sbuf *b, const char *fmt, ...) {
    char tmp[1024];
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) sb_put(b, tmp, (size_t)n);
    else {
        char *big = (char *)malloc((size_t)n + 1);
        if (!big) return;
        va_start(ap, fmt);
        vsnprintf(big, (size_t)n + 1, fmt, ap);
        va_end(ap);
        sb_put(b, big, (size_t)n);
        free(big);
    }
}
static void sb_json_str(sbuf *b, const char *s) {
    sb_puts(b, "\"");
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') sb_printf(b, "\\%c", c);
        else if (c == '\n') sb_puts(b, "\\n");
        else if (c == '\t') sb_puts(b, "\\t");
        else if (c < 0x20 || c == 0x7f) sb_printf(b, "\\u%04x", c);
        else sb_put(b, (const char *)&c, 1);
    }
    sb_puts(b, "\"");
}
/* A finite double for JSON (NaN and infinities have no JSON spelling). */
static void sb_json_num(sbuf *b, double v) {
    if (v != v || v > 1e308 || v < -1e308) sb_puts(b, "null");
    else sb_printf(b, "%.6g", v);
}

static void trim(char *s) {
    size_t n = strlen(s), i = 0;
    while (n && (s[n - 1] == '\n' || s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r')) s[--n] = 0;
    while (s[i] == ' ' || s[i] == '\t') i++;
    if (i) memmove(s, s + i, n - i + 1);
}

/* ---- CPU ---------------------------------------------------------------------------------- */
enum { F_SSE42, F_AVX, F_AVX2, F_FMA, F_AVX512F, F_AVX512BW, F_AVX512DQ, F_AVX512VL, F_AVX512BF16, F_AMX_TILE, F_AMX_BF16, F_AMX_INT8, F_COUNT };
static const char *const feature_names[F_COUNT] = {"sse4.2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8"};

typedef struct cpu_info {
    char model[256];
    char arch[32];
    int logical_cpus;
    int feature[F_COUNT]; /* the CPU has it and the OS saves its registers */
    int os_avx, os_avx512, os_amx;
    double mem_total_mib, mem_avail_mib; /* < 0: unknown */
} cpu_info;

#if DEV_X86
static unsigned long long xgetbv0(void) {
    unsigned int lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}
#endif

static void cpu_detect(cpu_info *ci) {
    FILE *f;
    char line[1024];
    memset(ci, 0, sizeof *ci);
    ci->mem_total_mib = ci->mem_avail_mib = -1;
#if defined(__x86_64__)
    snprintf(ci->arch, sizeof ci->arch, "x86_64");
#elif defined(__i386__)
    snprintf(ci->arch, sizeof ci->arch, "x86");
#elif defined(__aarch64__)
    snprintf(ci->arch, sizeof ci->arch, "aarch64");
#else
    snprintf(ci->arch, sizeof ci->arch, "unknown");
#endif
    f = fopen("/proc/cpuinfo", "r");
    if (f) {
        while (fgets(line, sizeof line, f)) {
            char *colon = strchr(line, ':');
            if (!colon) continue;
            *colon = 0;
            trim(line);
            if (!ci->model[0] && (!strcmp(line, "model name") || !strcmp(line, "Model") || !strcmp(line, "Hardware"))) {
                snprintf(ci->model, sizeof ci->model, "%s", colon + 1);
                trim(ci->model);
            }
        }
        fclose(f);
    }
#if DEV_X86
    {
        unsigned int a, b, c, d, max_leaf = (unsigned)__get_cpuid_max(0, NULL);
        unsigned long long xcr0 = 0;
        int osxsave = 0;
        if (!ci->model[0] && (unsigned)__get_cpuid_max(0x80000000u, NULL) >= 0x80000004u) { /* the brand string */
            unsigned int r[12];
            int k;
            for (k = 0; k < 3; k++) __get_cpuid(0x80000002u + (unsigned)k, &r[4 * k], &r[4 * k + 1], &r[4 * k + 2], &r[4 * k + 3]);
            memcpy(ci->model, r, 48);
            ci->model[48] = 0;
            trim(ci->model);
        }
        if (max_leaf >= 1 && __get_cpuid(1, &a, &b, &c, &d)) {
            osxsave = (c >> 27) & 1;
            if (osxsave) xcr0 = xgetbv0();
            ci->os_avx = osxsave && (xcr0 & 6) == 6;
            ci->os_avx512 = ci->os_avx && (xcr0 & 0xe0) == 0xe0;
            ci->os_amx = osxsave && ((xcr0 >> 17) & 3) == 3;
            ci->feature[F_SSE42] = (c >> 20) & 1;
            ci->feature[F_AVX] = ((c >> 28) & 1) && ci->os_avx;
            ci->feature[F_FMA] = ((c >> 12) & 1) && ci->os_avx;
        }
        if (max_leaf >= 7 && __get_cpuid_count(7, 0, &a, &b, &c, &d)) {
            unsigned int sub1 = a;
            ci->feature[F_AVX2] = ((b >> 5) & 1) && ci->os_avx;
            ci->feature[F_AVX512F] = ((b >> 16) & 1) && ci->os_avx512;
            ci->feature[F_AVX512DQ] = ((b >> 17) & 1) && ci->os_avx512;
            ci->feature[F_AVX512BW] = ((b >> 30) & 1) && ci->os_avx512;
            ci->feature[F_AVX512VL] = ((b >> 31) & 1) && ci->os_avx512;
            ci->feature[F_AMX_BF16] = ((d >> 22) & 1) && ci->os_amx;
            ci->feature[F_AMX_TILE] = ((d >> 24) & 1) && ci->os_amx;
            ci->feature[F_AMX_INT8] = ((d >> 25) & 1) && ci->os_amx;
            if (sub1 >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) ci->feature[F_AVX512BF16] = ((a >> 5) & 1) && ci->os_avx512;
        }
    }
#endif
#if !defined(_WIN32)
    {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        ci->logical_cpus = n > 0 ? (int)n : 1;
    }
#else
    ci->logical_cpus = 1;
#endif
    f = fopen("/proc/meminfo", "r");
    if (f) {
        while (fgets(line, sizeof line, f)) {
            double kb;
            if (sscanf(line, "MemTotal: %lf kB", &kb) == 1) ci->mem_total_mib = kb / 1024.0;
            else if (sscanf(line, "MemAvailable: %lf kB", &kb) == 1) ci->mem_avail_mib = kb / 1024.0;
        }
        fclose(f);
    }
#if !defined(_WIN32) && defined(_SC_PHYS_PAGES) && defined(_SC_PAGESIZE)
    if (ci->mem_total_mib < 0) {
        long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        if (pages > 0 && psz > 0) ci->mem_total_mib = (double)pages * (double)psz / 1048576.0;
    }
#endif
    if (!ci->model[0]) snprintf(ci->model, sizeof ci->model, "unknown");
}

/* ---- OpenCL, through dlopen --------------------------------------------------------------- */
typedef int32_t cl_int_t;
typedef uint32_t cl_uint_t;
typedef uint64_t cl_ulong_t;
typedef cl_int_t (*pfn_clGetPlatformIDs)(cl_uint_t, void **, cl_uint_t *);
typedef cl_int_t (*pfn_clGetPlatformInfo)(void *, cl_uint_t, size_t, void *, size_t *);
typedef cl_int_t (*pfn_clGetDeviceIDs)(void *, cl_ulong_t, cl_uint_t, void **, cl_uint_t *);
typedef cl_int_t (*pfn_clGetDeviceInfo)(void *, cl_uint_t, size_t, void *, size_t *);

#define CL_PLATFORM_VERSION_ 0x0901
#define CL_PLATFORM_NAME_ 0x0902
#define CL_PLATFORM_VENDOR_ 0x0903
#define CL_PLATFORM_EXTENSIONS_ 0x0904
#define CL_DEVICE_TYPE_ALL_ 0xFFFFFFFFull
#define CL_DEVICE_TYPE_ 0x1000
#define CL_DEVICE_MAX_COMPUTE_UNITS_ 0x1002
#define CL_DEVICE_MAX_CLOCK_FREQUENCY_ 0x100C
#define CL_DEVICE_MAX_MEM_ALLOC_SIZE_ 0x1010
#define CL_DEVICE_GLOBAL_MEM_SIZE_ 0x101F
#define CL_DEVICE_LOCAL_MEM_SIZE_ 0x1023
#define CL_DEVICE_NAME_ 0x102B
#define CL_DEVICE_VENDOR_ 0x102C
#define CL_DRIVER_VERSION_ 0x102D
#define CL_DEVICE_VERSION_ 0x102F
#define CL_DEVICE_EXTENSIONS_ 0x1030

typedef struct cl_dev {
    char name[256], vendor[256], version[256], driver[128], type[32];
    char *extensions;
    cl_ulong_t global_mem, local_mem, max_alloc;
    cl_uint_t compute_units, clock_mhz;
    int lib; /* its entry in the library's list (the N of "opencl:N"), -1: none */
} cl_dev;

typedef struct cl_plat {
    char name[256], vendor[256], version[256];
    char *extensions;
    int num_devices;
    cl_dev *devices;
    int device_error; /* clGetDeviceIDs' status when it failed */
} cl_plat;

typedef struct cl_report {
    int loaded;           /* the ICD loader was found */
    char library[64];
    char note[256];       /* why nothing is listed, when nothing is */
    int num_platforms;
    cl_plat *platforms;
} cl_report;

#if DEV_HAVE_DLOPEN
static void *sym(void *lib, const char *name) {
    void *p = dlsym(lib, name);
    return p;
}
/* Reads a string property, whatever its length; never NULL. */
static char *cl_str(pfn_clGetPlatformInfo pinfo, pfn_clGetDeviceInfo dinfo, void *obj, cl_uint_t what) {
    size_t n = 0;
    char *s;
    cl_int_t e = pinfo ? pinfo(obj, what, 0, NULL, &n) : dinfo(obj, what, 0, NULL, &n);
    if (e != 0 || n == 0 || n > (1u << 24)) return (char *)calloc(1, 1);
    s = (char *)calloc(n + 1, 1);
    if (!s) return (char *)calloc(1, 1);
    if ((pinfo ? pinfo(obj, what, n, s, NULL) : dinfo(obj, what, n, s, NULL)) != 0) s[0] = 0;
    trim(s);
    return s;
}
static void copy_str(char *dst, size_t cap, char *src) {
    snprintf(dst, cap, "%s", src ? src : "");
    free(src);
}
#endif

static void opencl_probe(cl_report *r) {
    memset(r, 0, sizeof *r);
#if DEV_HAVE_DLOPEN
    {
        static const char *const libs[] = {"libOpenCL.so.1", "libOpenCL.so", "/System/Library/Frameworks/OpenCL.framework/OpenCL"};
        void *lib = NULL, *p;
        pfn_clGetPlatformIDs get_platforms;
        pfn_clGetPlatformInfo platform_info;
        pfn_clGetDeviceIDs get_devices;
        pfn_clGetDeviceInfo device_info;
        void *ids[64];
        cl_uint_t n = 0, i;
        cl_int_t e;
        size_t k;
        for (k = 0; k < sizeof libs / sizeof libs[0] && !lib; k++) {
            lib = dlopen(libs[k], RTLD_NOW | RTLD_LOCAL);
            if (lib) snprintf(r->library, sizeof r->library, "%s", libs[k]);
        }
        if (!lib) {
            snprintf(r->note, sizeof r->note, "no OpenCL ICD loader (libOpenCL.so.1) found");
            return;
        }
        r->loaded = 1;
        p = sym(lib, "clGetPlatformIDs"), memcpy(&get_platforms, &p, sizeof p);
        p = sym(lib, "clGetPlatformInfo"), memcpy(&platform_info, &p, sizeof p);
        p = sym(lib, "clGetDeviceIDs"), memcpy(&get_devices, &p, sizeof p);
        p = sym(lib, "clGetDeviceInfo"), memcpy(&device_info, &p, sizeof p);
        if (!get_platforms || !platform_info || !get_devices || !device_info) {
            snprintf(r->note, sizeof r->note, "%s lacks the clGet* entry points", r->library);
            return; /* the library stays loaded: harmless for a short-lived program */
        }
        e = get_platforms(64, ids, &n);
        if (e != 0 || n == 0) {
            if (e == -1001 || n == 0) snprintf(r->note, sizeof r->note, "the ICD loader found no OpenCL platform (no driver installed)");
            else snprintf(r->note, sizeof r->note, "clGetPlatformIDs failed with error %d", (int)e);
            return;
        }
        if (n > 64) n = 64;
        r->platforms = (cl_plat *)calloc(n, sizeof *r->platforms);
        if (!r->platforms) return;
        r->num_platforms = (int)n;
        for (i = 0; i < n; i++) {
            cl_plat *pl = &r->platforms[i];
            void *dids[64];
            cl_uint_t nd = 0, j;
            copy_str(pl->name, sizeof pl->name, cl_str(platform_info, NULL, ids[i], CL_PLATFORM_NAME_));
            copy_str(pl->vendor, sizeof pl->vendor, cl_str(platform_info, NULL, ids[i], CL_PLATFORM_VENDOR_));
            copy_str(pl->version, sizeof pl->version, cl_str(platform_info, NULL, ids[i], CL_PLATFORM_VERSION_));
            pl->extensions = cl_str(platform_info, NULL, ids[i], CL_PLATFORM_EXTENSIONS_);
            e = get_devices(ids[i], CL_DEVICE_TYPE_ALL_, 64, dids, &nd);
            if (e != 0) {
                pl->device_error = (int)e;
                continue;
            }
            if (nd > 64) nd = 64;
            pl->devices = (cl_dev *)calloc(nd ? nd : 1, sizeof *pl->devices);
            if (!pl->devices) continue;
            pl->num_devices = (int)nd;
            for (j = 0; j < nd; j++) {
                cl_dev *d = &pl->devices[j];
                cl_ulong_t type = 0;
                copy_str(d->name, sizeof d->name, cl_str(NULL, device_info, dids[j], CL_DEVICE_NAME_));
                copy_str(d->vendor, sizeof d->vendor, cl_str(NULL, device_info, dids[j], CL_DEVICE_VENDOR_));
                copy_str(d->version, sizeof d->version, cl_str(NULL, device_info, dids[j], CL_DEVICE_VERSION_));
                copy_str(d->driver, sizeof d->driver, cl_str(NULL, device_info, dids[j], CL_DRIVER_VERSION_));
                d->extensions = cl_str(NULL, device_info, dids[j], CL_DEVICE_EXTENSIONS_);
                device_info(dids[j], CL_DEVICE_GLOBAL_MEM_SIZE_, sizeof d->global_mem, &d->global_mem, NULL);
                device_info(dids[j], CL_DEVICE_LOCAL_MEM_SIZE_, sizeof d->local_mem, &d->local_mem, NULL);
                device_info(dids[j], CL_DEVICE_MAX_MEM_ALLOC_SIZE_, sizeof d->max_alloc, &d->max_alloc, NULL);
                device_info(dids[j], CL_DEVICE_MAX_COMPUTE_UNITS_, sizeof d->compute_units, &d->compute_units, NULL);
                device_info(dids[j], CL_DEVICE_MAX_CLOCK_FREQUENCY_, sizeof d->clock_mhz, &d->clock_mhz, NULL);
                device_info(dids[j], CL_DEVICE_TYPE_, sizeof type, &type, NULL);
                snprintf(d->type, sizeof d->type, "%s", (type & 4) ? "GPU" : (type & 2) ? "CPU" : (type & 8) ? "accelerator" : (type & 16) ? "custom" : "other");
            }
        }
    }
#else
    snprintf(r->note, sizeof r->note, "OpenCL probing is not available on this platform");
#endif
}

static void opencl_free(cl_report *r) {
    int i, j;
    for (i = 0; i < r->num_platforms; i++) {
        for (j = 0; j < r->platforms[i].num_devices; j++) free(r->platforms[i].devices[j].extensions);
        free(r->platforms[i].devices);
        free(r->platforms[i].extensions);
    }
    free(r->platforms);
}

/* ---- the library's view of the OpenCL devices --------------------------------------------- */
/* The probe above has the details; the library decides what "opencl:N" and "auto" mean, so the
   selectors come from it (it skips platforms whose device query fails, so indices can differ). */
#define LIB_MAXDEV 64
typedef struct lib_dev {
    int index; /* N of "opencl:N" */
    char platform[128], name[128];
    int is_gpu;
    size_t global_mem;
    int claimed; /* matched to a probed device */
} lib_dev;

typedef struct lib_devs {
    int n;
    lib_dev d[LIB_MAXDEV];
    int auto_pick;   /* what "auto" tries: the first GPU, or -1 (the CPU) */
    int opencl_pick; /* what "opencl" tries: the first GPU, else device 0; -1 when none */
} lib_devs;

static void on_lib_dev(void *user, int index, const char *platform, const char *device, int is_gpu, size_t global_mem_bytes) {
    lib_devs *L = (lib_devs *)user;
    lib_dev *d;
    if (L->n >= LIB_MAXDEV) return;
    d = &L->d[L->n++];
    memset(d, 0, sizeof *d);
    d->index = index, d->is_gpu = is_gpu, d->global_mem = global_mem_bytes;
    snprintf(d->platform, sizeof d->platform, "%s", platform ? platform : "");
    snprintf(d->name, sizeof d->name, "%s", device ? device : "");
    trim(d->platform), trim(d->name);
}

static void lib_devices(tr_ctx *ctx, lib_devs *L) {
    int i;
    memset(L, 0, sizeof *L);
    L->auto_pick = L->opencl_pick = -1;
    tr_list_opencl_devices(ctx, on_lib_dev, L);
    for (i = 0; i < L->n && L->auto_pick < 0; i++)
        if (L->d[i].is_gpu) L->auto_pick = i;
    L->opencl_pick = L->auto_pick >= 0 ? L->auto_pick : L->n > 0 ? 0 : -1;
}

/* The library's entry of a probed device (same platform and name, first unclaimed), or NULL. */
static lib_dev *lib_match(lib_devs *L, const char *platform, const char *name) {
    int i;
    for (i = 0; i < L->n; i++)
        if (!L->d[i].claimed && !strcmp(L->d[i].name, name) && !strcmp(L->d[i].platform, platform)) {
            L->d[i].claimed = 1;
            return &L->d[i];
        }
    return NULL;
}

/* ---- self-test ---------------------------------------------------------------------------- */
#define ST_B 8
#define ST_STEPS 3
/* Tolerances, stated in the report. Logits: elementwise |x - ref| / (|ref| + rms(ref)); losses
   |x - ref| / |ref| per step.
   Parameters after training: per tensor ||x - ref||_2 / ||ref||_2 (a normwise measure, because
   AdamATan2 turns any gradient into a step of size ~lr, so a gradient whose sign is decided by
   rounding noise moves one weight by 2 lr without anything being wrong). */
#define TOL_FWD 1e-4
#define TOL_LOSS 1e-5
#define TOL_PARAM 1e-4
/* An OpenCL device against the CPU: other summation orders, fused multiply-adds and exp/rsqrt
   of the device's own precision; 1e-3 of the same measures. */
#define TOL_CL 1e-3

typedef struct variant_result {
    char name[32];      /* "mlp_t" / "attention" */
    double fwd_rel, loss_rel, param_rel;
    int ok;
    char error[256];
} variant_result;

typedef struct simd_result {
    char name[16];
    int supported;      /* tr_ctx_set_simd accepted it */
    int ran;
    int pass;
    double max_rel;     /* worst over the variants and measures */
    double seconds;
    variant_result v[2];
    char error[256];
} simd_result;

typedef struct run_out {
    float *logits;   /* forward before any training: [B, L, V] */
    double losses[ST_STEPS];
    float *params;   /* all trainable tensors after training, concatenated */
    size_t nparams;
    int ntensors;
    size_t offsets[64 + 1];
} run_out;

/* The last warning of a self-test context: why a device was not opened or was left. */
static void on_log_keep(void *user, tr_log_level level, const char *message) {
    if (level >= TR_LOG_WARN) snprintf((char *)user, 256, "%s", message);
}

static uint64_t xs_next(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

static void selftest_config(tr_model_config *cfg, int attention) {
    tr_model_config_preset(cfg, "trm-tiny");
    cfg->seq_len = 24;
    cfg->vocab_size = 11;
    cfg->hidden_size = 64;
    cfg->num_heads = 4;
    cfg->expansion = 2;
    cfg->L_layers = 2;
    cfg->H_cycles = 2, cfg->L_cycles = 2;
    cfg->halt_max_steps = 2;
    cfg->puzzle_emb_ndim = 0, cfg->puzzle_emb_len = 0; /* sign-SGD reacts to rounding noise: see TOL_PARAM */
    cfg->num_puzzle_identifiers = 1;
    cfg->mlp_t = !attention;
    cfg->pos_encodings = attention ? TR_POS_ROPE : TR_POS_NONE;
}

/* One deterministic run on a fresh context on `device` ("cpu" or "opencl"): a forward pass (eval
   step), then ST_STEPS training steps on fixed random data. Returns an error text or NULL; for
   "opencl", *on_device tells whether it ran there from start to end (the library falls back to
   the CPU instead of failing, so that has to be asked). */
static const char *selftest_run(const char *simd, const char *device, int threads, int attention, run_out *o, int *on_device, char *err, size_t errcap) {
    tr_ctx_config cc = tr_ctx_config_default();
    char warn[256] = "";
    tr_ctx *ctx = NULL;
    tr_model_config cfg;
    tr_model *m = NULL;
    tr_trainer *t = NULL;
    tr_carry *carry = NULL;
    tr_train_config tc = tr_train_config_default();
    int32_t in[ST_B * 64], lab[ST_B * 64], pid[ST_B];
    tr_batch b;
    tr_step_outputs so;
    tr_metrics mt;
    uint64_t rs = 0x243f6a8885a308d3ull;
    int i, s, L, V;
    const char *fail = NULL;
    memset(o, 0, sizeof *o);
    if (on_device) *on_device = 0;
    cc.seed = 1234;
    cc.num_threads = threads;
    cc.device = device; /* never TINYREC_DEVICE: the CPU kernel tests must stay on the CPU */
    cc.log = on_log_keep, cc.log_user = warn;
    if (tr_ctx_create(&cc, &ctx) != TR_OK) {
        snprintf(err, errcap, "tr_ctx_create failed");
        return err;
    }
    if (tr_ctx_set_simd(ctx, simd) != TR_OK) {
        snprintf(err, errcap, "%.200s", tr_ctx_last_error(ctx));
        fail = err;
        goto done;
    }
    selftest_config(&cfg, attention);
    L = cfg.seq_len, V = cfg.vocab_size;
    if (tr_model_create(ctx, &cfg, &m) != TR_OK || tr_carry_create(m, ST_B, &carry) != TR_OK) {
        snprintf(err, errcap, "%.200s", tr_ctx_last_error(ctx));
        fail = err;
        goto done;
    }
    if (strcmp(device, "cpu") && !tr_ctx_use_device(ctx)) {
        snprintf(err, errcap, "not opened: %.200s", warn[0] ? warn : tr_ctx_device_name(ctx));
        fail = err;
        goto done;
    }
    for (i = 0; i < ST_B * L; i++) {
        in[i] = 1 + (int)(xs_next(&rs) % (uint64_t)(V - 1));
        lab[i] = (xs_next(&rs) % 7 == 0) ? -100 : 1 + (int)(xs_next(&rs) % (uint64_t)(V - 1));
    }
    for (i = 0; i < ST_B; i++) pid[i] = 0;
    b.inputs = in, b.labels = lab, b.puzzle_identifiers = pid, b.batch_size = ST_B;
    o->logits = (float *)malloc(sizeof(float) * (size_t)ST_B * L * V);
    if (!o->logits) {
        snprintf(err, errcap, "out of memory");
        fail = err;
        goto done;
    }
    memset(&so, 0, sizeof so);
    so.logits = o->logits;
    tr_carry_reset(carry);
    if (tr_model_eval_step(m, carry, &b, &so, &mt) != TR_OK) {
        snprintf(err, errcap, "forward: %.200s", tr_ctx_last_error(ctx));
        fail = err;
        goto done;
    }
    tc.global_batch_size = ST_B;
    tc.lr = 1e-3, tc.lr_warmup_steps = 0, tc.weight_decay = 0.1, tc.ema = 1;
    if (tr_trainer_create(m, &tc, &t) != TR_OK) {
        snprintf(err, errcap, "%.200s", tr_ctx_last_error(ctx));
        fail = err;
        goto done;
    }
    for (s = 0; s < ST_STEPS; s++) {
        if (tr_trainer_step(t, &b, &mt) != TR_OK) {
            snprintf(err, errcap, "training step %d: %.200s", s + 1, tr_ctx_last_error(ctx));
            fail = err;
            goto done;
        }
        o->losses[s] = mt.loss;
    }
    if (strcmp(device, "cpu")) {
        if (!tr_ctx_use_device(ctx)) { /* a device error moved the model to the CPU mid-run */
            snprintf(err, errcap, "left the device: %.200s", warn[0] ? warn : "fell back to the CPU");
            fail = err;
            goto done;
        }
        if (on_device) *on_device = 1;
    }
    {
        int nt = tr_model_num_tensors(m), k;
        size_t total = 0;
        tr_tensor_view tv;
        for (k = 0; k < nt && o->ntensors < 64; k++) {
            if (tr_model_tensor(m, k, &tv) != TR_OK || !tv.trainable) continue;
            o->offsets[o->ntensors++] = total;
            total += tv.numel;
        }
        o->offsets[o->ntensors] = total;
        o->params = (float *)malloc(sizeof(float) * (total ? total : 1));
        if (!o->params) {
            snprintf(err, errcap, "out of memory");
            fail = err;
            goto done;
        }
        o->nparams = total;
        for (k = 0, i = 0; k < nt && i < o->ntensors; k++) {
            if (tr_model_tensor(m, k, &tv) != TR_OK || !tv.trainable) continue;
            memcpy(o->params + o->offsets[i], tv.data, tv.numel * sizeof(float));
            i++;
        }
    }
done:
    tr_trainer_destroy(t);
    tr_carry_destroy(carry);
    tr_model_destroy(m);
    tr_ctx_destroy(ctx);
    return fail;
}

static void run_free(run_out *o) {
    free(o->logits);
    free(o->params);
    memset(o, 0, sizeof *o);
}

/* max_i |x_i - ref_i| / (|ref_i| + rms(ref)): relative where values are large, and measured
   against the array's own scale where they cross zero. */
static double max_rel(const float *x, const float *ref, size_t n) {
    double worst = 0, ss = 0, rms;
    size_t i;
    for (i = 0; i < n; i++) ss += (double)ref[i] * ref[i];
    rms = n ? sqrt(ss / (double)n) : 0;
    if (!(rms > 1e-30)) rms = 1e-30;
    for (i = 0; i < n; i++) {
        double r = fabs((double)x[i] - (double)ref[i]) / (fabs((double)ref[i]) + rms);
        if (!(r <= worst)) worst = r; /* NaN propagates as a failure */
    }
    return worst;
}

static double run_compare(const run_out *x, const run_out *ref, int L, int V, double tol_fwd, double tol_loss, double tol_param, variant_result *v) {
    int s, k;
    double w = 0;
    v->fwd_rel = max_rel(x->logits, ref->logits, (size_t)ST_B * L * V);
    v->loss_rel = 0;
    for (s = 0; s < ST_STEPS; s++) {
        double d = fabs(x->losses[s] - ref->losses[s]) / (fabs(ref->losses[s]) > 1e-3 ? fabs(ref->losses[s]) : 1e-3);
        if (!(d <= v->loss_rel)) v->loss_rel = d;
    }
    v->param_rel = 0;
    if (x->nparams != ref->nparams || x->ntensors != ref->ntensors) v->param_rel = INFINITY;
    else
        for (k = 0; k < ref->ntensors; k++) {
            size_t i;
            double num = 0, den = 0, r;
            for (i = ref->offsets[k]; i < ref->offsets[k + 1]; i++) {
                double d = (double)x->params[i] - (double)ref->params[i];
                num += d * d, den += (double)ref->params[i] * ref->params[i];
            }
            r = sqrt(num) / (den > 0 ? sqrt(den) : 1.0);
            if (!(r <= v->param_rel)) v->param_rel = r;
        }
    v->ok = v->fwd_rel <= tol_fwd && v->loss_rel <= tol_loss && v->param_rel <= tol_param;
    w = v->fwd_rel;
    if (!(v->loss_rel <= w)) w = v->loss_rel;
    if (!(v->param_rel <= w)) w = v->param_rel;
    return w;
}

static void selftest_all(int threads, simd_result res[3]) {
    static const char *const names[3] = {"scalar", "avx2", "avx512"};
    run_out ref[2];
    int k, a, ref_ok[2];
    char err[256];
    memset(res, 0, 3 * sizeof *res);
    for (k = 0; k < 3; k++) {
        tr_ctx_config cc = tr_ctx_config_default();
        tr_ctx *ctx = NULL;
        snprintf(res[k].name, sizeof res[k].name, "%s", names[k]);
        cc.device = "cpu";
        if (tr_ctx_create(&cc, &ctx) == TR_OK) {
            res[k].supported = tr_ctx_set_simd(ctx, names[k]) == TR_OK;
            tr_ctx_destroy(ctx);
        }
    }
    for (a = 0; a < 2; a++) {
        tr_model_config cfg;
        selftest_config(&cfg, a);
        ref_ok[a] = 0;
        for (k = 0; k < 3; k++) {
            simd_result *r = &res[k];
            variant_result *v = &r->v[a];
            run_out o;
            double t0 = tr_time_seconds(), w;
            snprintf(v->name, sizeof v->name, "%s", a ? "attention" : "mlp_t");
            if (!r->supported) continue;
            r->ran = 1;
            if (selftest_run(names[k], "cpu", threads, a, k == 0 ? &ref[a] : &o, NULL, err, sizeof err)) {
                snprintf(v->error, sizeof v->error, "%.200s", err);
                snprintf(r->error, sizeof r->error, "%s: %.200s", v->name, err);
                v->ok = 0;
                if (k != 0) run_free(&o);
                r->seconds += tr_time_seconds() - t0;
                continue;
            }
            r->seconds += tr_time_seconds() - t0;
            if (k == 0) {
                /* the reference path must at least be finite and learn nothing absurd */
                int s, finite = 1;
                for (s = 0; s < ST_STEPS; s++) finite &= ref[a].losses[s] == ref[a].losses[s] && fabs(ref[a].losses[s]) < 1e30;
                ref_ok[a] = finite;
                v->ok = finite;
                if (!finite) snprintf(r->error, sizeof r->error, "%s: the scalar path gives a non-finite loss", v->name);
                continue;
            }
            if (!ref_ok[a]) {
                v->ok = 0;
                snprintf(r->error, sizeof r->error, "%s: no scalar reference to compare with", v->name);
                run_free(&o);
                continue;
            }
            w = run_compare(&o, &ref[a], cfg.seq_len, cfg.vocab_size, TOL_FWD, TOL_LOSS, TOL_PARAM, v);
            if (!(w <= r->max_rel)) r->max_rel = w;
            run_free(&o);
        }
        if (res[0].supported) run_free(&ref[a]);
    }
    for (k = 0; k < 3; k++) res[k].pass = res[k].ran && res[k].v[0].ok && res[k].v[1].ok;
}

/* The device that "opencl" selects against the CPU (the library's pick of kernels), both model
   variants. SKIP when there is no OpenCL device (or no backend in this build): no failure. */
typedef struct cl_result {
    char status[8]; /* PASS, FAIL, SKIP */
    char device[300];
    int opened;     /* the device ran the test (else the library would use the CPU) */
    double max_rel, seconds;
    variant_result v[2];
    char error[300];
} cl_result;

static void selftest_opencl(int threads, const lib_devs *L, cl_result *r) {
    int a;
    char err[256];
    memset(r, 0, sizeof *r);
    if (!TINYREC_OPENCL || L->opencl_pick < 0) {
        snprintf(r->status, sizeof r->status, "SKIP");
        snprintf(r->error, sizeof r->error, "%s", TINYREC_OPENCL ? "no OpenCL device found" : "this build has no OpenCL backend: built without TINYREC_OPENCL");
        return;
    }
    snprintf(r->device, sizeof r->device, "opencl:%d, %s", L->d[L->opencl_pick].index, L->d[L->opencl_pick].name);
    r->opened = 1;
    for (a = 0; a < 2; a++) {
        run_out ref, o;
        variant_result *v = &r->v[a];
        tr_model_config cfg;
        double t0 = tr_time_seconds(), w;
        int on_dev = 0;
        snprintf(v->name, sizeof v->name, "%s", a ? "attention" : "mlp_t");
        selftest_config(&cfg, a);
        if (selftest_run("auto", "cpu", threads, a, &ref, NULL, err, sizeof err)) {
            snprintf(r->error, sizeof r->error, "%s: the CPU reference: %.200s", v->name, err);
            run_free(&ref);
            break;
        }
        if (selftest_run("auto", "opencl", threads, a, &o, &on_dev, err, sizeof err)) {
            if (!on_dev && strstr(err, "not opened")) r->opened = 0;
            snprintf(r->error, sizeof r->error, "%s: %.250s", v->name, err);
            run_free(&ref), run_free(&o);
            r->seconds += tr_time_seconds() - t0;
            break;
        }
        r->seconds += tr_time_seconds() - t0;
        w = run_compare(&o, &ref, cfg.seq_len, cfg.vocab_size, TOL_CL, TOL_CL, TOL_CL, v);
        if (!(w <= r->max_rel)) r->max_rel = w;
        run_free(&ref), run_free(&o);
    }
    snprintf(r->status, sizeof r->status, "%s", !r->error[0] && r->v[0].ok && r->v[1].ok ? "PASS" : "FAIL");
}

/* ---- batch sizes -------------------------------------------------------------------------- */
typedef struct batch_plan {
    int ok;
    char error[256];
    size_t params;
    double usable_mib, avail_mib;
    int train_fit, infer_fit;       /* the largest batch whose bytes fit */
    int train_rec, infer_rec;       /* what we recommend */
    double train_mib_at_rec, infer_mib_at_rec;
    double train_mib_per_row, infer_mib_per_row;
    double gflop_train, gflop_infer; /* per sample */
    /* per library OpenCL device (lib_devs order): the same estimate against its global memory */
    int ncl;
    struct {
        double usable_mib;
        int train_fit, train_rec, infer_fit, infer_rec;
    } cl[LIB_MAXDEV];
} batch_plan;

#define REF_GLOBAL_BATCH 768
#define MAX_BATCH (1 << 20)

static int largest_fit(const tr_model *m, double usable_bytes, int train) {
    int lo = 0, hi = MAX_BATCH;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        size_t tb = 0, ib = 0;
        tr_model_memory(m, mid, &tb, &ib);
        if ((double)(train ? tb : ib) <= usable_bytes) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* Usable memory: MemAvailable less a headroom of 20% and at least 512 MiB (the OS, the dataset,
   other programs). */
static double usable_mib_of(double avail_mib) {
    double head = avail_mib * 0.2;
    if (head < 512) head = 512;
    return avail_mib - head > 0 ? avail_mib - head : 0;
}

/* training: the reference's global batch (768) when it fits, else the largest multiple of 8 that
   does; inference: the largest power of two up to 1024 that fits */
static int train_rec_of(int fit) { return fit >= REF_GLOBAL_BATCH ? REF_GLOBAL_BATCH : fit >= 8 ? fit / 8 * 8 : fit; }
static int infer_rec_of(int fit) {
    int r = 0;
    if (fit >= 1) {
        r = 1;
        while (r * 2 <= fit && r * 2 <= 1024) r *= 2;
    }
    return r;
}

static void plan_batches(const char *preset, int threads, double avail_mib, const lib_devs *L, batch_plan *p) {
    tr_ctx_config cc = tr_ctx_config_default();
    tr_ctx *ctx = NULL;
    tr_model_config cfg;
    tr_model *m = NULL;
    size_t tb1, ib1, tb2, ib2, tb, ib;
    double usable;
    int i;
    memset(p, 0, sizeof *p);
    cc.num_threads = threads;
    cc.device = "cpu"; /* the estimate needs no device; opening one here would only cost time */
    if (tr_ctx_create(&cc, &ctx) != TR_OK) {
        snprintf(p->error, sizeof p->error, "tr_ctx_create failed");
        return;
    }
    if (tr_model_config_preset(&cfg, preset) != TR_OK) {
        snprintf(p->error, sizeof p->error, "unknown preset '%s'", preset);
        goto done;
    }
    if (tr_model_create(ctx, &cfg, &m) != TR_OK) {
        snprintf(p->error, sizeof p->error, "%.200s", tr_ctx_last_error(ctx));
        goto done;
    }
    p->params = tr_model_num_params(m);
    tr_model_flops(m, &p->gflop_train, &p->gflop_infer);
    p->gflop_train /= 1e9, p->gflop_infer /= 1e9;
    tr_model_memory(m, 1, &tb1, &ib1);
    tr_model_memory(m, 2, &tb2, &ib2);
    p->train_mib_per_row = ((double)tb2 - (double)tb1) / 1048576.0;
    p->infer_mib_per_row = ((double)ib2 - (double)ib1) / 1048576.0;
    p->avail_mib = avail_mib;
    p->usable_mib = usable = usable_mib_of(avail_mib);
    p->train_fit = largest_fit(m, usable * 1048576.0, 1);
    p->infer_fit = largest_fit(m, usable * 1048576.0, 0);
    p->train_rec = train_rec_of(p->train_fit);
    p->infer_rec = infer_rec_of(p->infer_fit);
    for (i = 0; i < L->n; i++) {
        double u = usable_mib_of((double)L->d[i].global_mem / 1048576.0);
        p->cl[i].usable_mib = u;
        p->cl[i].train_fit = largest_fit(m, u * 1048576.0, 1);
        p->cl[i].infer_fit = largest_fit(m, u * 1048576.0, 0);
        p->cl[i].train_rec = train_rec_of(p->cl[i].train_fit);
        p->cl[i].infer_rec = infer_rec_of(p->cl[i].infer_fit);
    }
    p->ncl = L->n;
    tr_model_memory(m, p->train_rec > 0 ? p->train_rec : 1, &tb, NULL);
    tr_model_memory(m, p->infer_rec > 0 ? p->infer_rec : 1, NULL, &ib);
    p->train_mib_at_rec = (double)tb / 1048576.0;
    p->infer_mib_at_rec = (double)ib / 1048576.0;
    p->ok = 1;
done:
    tr_model_destroy(m);
    tr_ctx_destroy(ctx);
}

/* ---- report ------------------------------------------------------------------------------- */
static void print_wrapped(const char *prefix, const char *text, int width) {
    int col = 0;
    const char *s = text;
    printf("%s", prefix);
    col = (int)strlen(prefix);
    while (*s) {
        const char *e;
        int n;
        while (*s == ' ') s++;
        if (!*s) break;
        e = strchr(s, ' ');
        n = e ? (int)(e - s) : (int)strlen(s);
        if (col + n + 1 > width && col > (int)strlen(prefix)) {
            printf("\n%*s", (int)strlen(prefix), "");
            col = (int)strlen(prefix);
        }
        printf("%.*s ", n, s);
        col += n + 1;
        s += n;
    }
    printf("\n");
}

static void usage(FILE *f) {
    const char *const *names = tr_model_config_preset_names();
    fprintf(f,
            "usage: tinyrec-devices [--preset NAME] [--threads N] [--json]\n"
            "  Lists the CPU and OpenCL devices (with the selector opencl:N of each and the pick of auto),\n"
            "  self-tests each CPU kernel set against the scalar path and the OpenCL device that \"opencl\"\n"
            "  selects against the CPU (a forward pass and %d training steps of a tiny TRM; SKIP without\n"
            "  an OpenCL device), and recommends batch sizes.\n"
            "  --preset NAME   model preset for the batch-size advice (default trm-sudoku-mlp):",
            ST_STEPS);
    for (; *names; names++) fprintf(f, " %s", *names);
    fprintf(f,
            "\n  --threads N     threads for the self-test (default: TINYREC_NUM_THREADS or all cores)\n"
            "  --json          a machine-readable report on stdout\n"
            "  --help          this text\n"
            "Exit status: 0 all self-tests pass, 1 a self-test fails, 2 bad arguments.\n");
}

int main(int argc, char **argv) {
    const char *preset = "trm-sudoku-mlp";
    int threads = 0, json = 0, i, all_pass = 1, lib_threads, auto_cl, p, d;
    cpu_info ci;
    cl_report cl;
    simd_result sr[3];
    cl_result clr;
    static lib_devs ld;
    static batch_plan bp;
    const char *env_dev = getenv("TINYREC_DEVICE");
    char auto_simd[16] = "scalar", env_error[300] = "", auto_sel[32] = "cpu", why[1024];
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--preset") || !strcmp(a, "--threads")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "tinyrec-devices: %s needs a value\n", a);
                return 2;
            }
            if (!strcmp(a, "--preset")) {
                tr_model_config tmp;
                preset = argv[++i];
                if (tr_model_config_preset(&tmp, preset) != TR_OK) {
                    const char *const *n = tr_model_config_preset_names();
                    fprintf(stderr, "tinyrec-devices: unknown preset '%s' (valid:", preset);
                    for (; *n; n++) fprintf(stderr, " %s", *n);
                    fprintf(stderr, ")\n");
                    return 2;
                }
            } else {
                char *end;
                long v = strtol(argv[++i], &end, 10);
                if (*argv[i] == 0 || *end || v < 1 || v > 1024) {
                    fprintf(stderr, "tinyrec-devices: --threads needs an integer in 1..1024, not '%s'\n", argv[i]);
                    return 2;
                }
                threads = (int)v;
            }
        } else {
            fprintf(stderr, "tinyrec-devices: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    cpu_detect(&ci);
    {
        tr_ctx_config cc = tr_ctx_config_default();
        tr_ctx *ctx = NULL;
        cc.num_threads = threads;
        cc.device = "cpu"; /* TINYREC_DEVICE is checked below, with a message when it is bad */
        if (tr_ctx_create(&cc, &ctx) != TR_OK) {
            fprintf(stderr, "tinyrec-devices: cannot create a context\n");
            return 1;
        }
        lib_threads = tr_ctx_num_threads(ctx);
        tr_ctx_set_simd(ctx, "auto");
        snprintf(auto_simd, sizeof auto_simd, "%s", tr_ctx_simd_name(ctx));
        lib_devices(ctx, &ld);
        if (env_dev && env_dev[0] && tr_ctx_set_device(ctx, env_dev) != TR_OK) snprintf(env_error, sizeof env_error, "%.290s", tr_ctx_last_error(ctx));
        tr_ctx_destroy(ctx);
    }
    if (!env_dev || !env_dev[0]) env_dev = NULL;
    if (threads <= 0) threads = lib_threads;
    opencl_probe(&cl);
    for (p = 0; p < cl.num_platforms; p++)
        for (d = 0; d < cl.platforms[p].num_devices; d++) {
            cl_dev *dv = &cl.platforms[p].devices[d];
            lib_dev *m = lib_match(&ld, cl.platforms[p].name, dv->name);
            dv->lib = m ? (int)(m - ld.d) : -1;
        }
    selftest_all(threads, sr);
    selftest_opencl(threads, &ld, &clr);
    for (i = 0; i < 3; i++)
        if (sr[i].ran && !sr[i].pass) all_pass = 0;
    if (!sr[0].ran) all_pass = 0;
    if (!strcmp(clr.status, "FAIL")) all_pass = 0;
    plan_batches(preset, threads, ci.mem_avail_mib >= 0 ? ci.mem_avail_mib : (ci.mem_total_mib >= 0 ? ci.mem_total_mib * 0.5 : 1024), &ld, &bp);

    /* "auto": the first OpenCL GPU, unless it cannot be opened (the self-test opened the same
       device, which is also what "opencl" takes when there is a GPU); else the CPU */
    auto_cl = ld.auto_pick >= 0 && clr.opened ? ld.auto_pick : -1;
    if (auto_cl >= 0) {
        snprintf(auto_sel, sizeof auto_sel, "opencl:%d", ld.d[auto_cl].index);
        snprintf(why, sizeof why, "this build has the OpenCL backend and %s (%s) is the first OpenCL GPU%s", auto_sel, ld.d[auto_cl].name,
                 !strcmp(clr.status, "PASS") ? "; it passed its self-test" : "");
    } else {
        char cpu_why[256];
        snprintf(cpu_why, sizeof cpu_why, "%s is the widest kernel set that the CPU and the OS support%s", auto_simd, all_pass ? "; it passed its self-test" : "");
        if (!TINYREC_OPENCL) snprintf(why, sizeof why, "this build has CPU kernels only (no OpenCL backend); %s", cpu_why);
        else if (ld.auto_pick >= 0)
            snprintf(why, sizeof why, "this build has the OpenCL backend, but the OpenCL GPU opencl:%d (%s) could not be opened (%s), so the library uses the CPU; %s",
                     ld.d[ld.auto_pick].index, ld.d[ld.auto_pick].name, clr.error, cpu_why);
        else if (ld.n > 0)
            snprintf(why, sizeof why, "this build has the OpenCL backend, but %s OpenCL device%s a GPU (\"opencl\" selects opencl:%d); %s",
                     ld.n == 1 ? "the only" : "none of the", ld.n == 1 ? " is not" : "s is", ld.d[ld.opencl_pick].index, cpu_why);
        else snprintf(why, sizeof why, "this build has the OpenCL backend, but no OpenCL device was found; %s", cpu_why);
    }

    if (json) {
        sbuf b = {NULL, 0, 0};
        int f;
        sb_puts(&b, "{\n  \"tinyrec_version\": ");
        sb_json_str(&b, tr_version_string());
        sb_puts(&b, ",\n  \"cpu\": {\"model\": ");
        sb_json_str(&b, ci.model);
        sb_puts(&b, ", \"arch\": ");
        sb_json_str(&b, ci.arch);
        sb_printf(&b, ", \"logical_cpus\": %d, \"threads\": %d, \"kernels\": ", ci.logical_cpus, threads);
        sb_json_str(&b, auto_simd);
        sb_puts(&b, ", \"features\": {");
        for (f = 0; f < F_COUNT; f++) {
            sb_printf(&b, "%s", f ? ", " : "");
            sb_json_str(&b, feature_names[f]);
            sb_printf(&b, ": %s", ci.feature[f] ? "true" : "false");
        }
        sb_puts(&b, "}, \"memory_total_mib\": ");
        sb_json_num(&b, ci.mem_total_mib);
        sb_puts(&b, ", \"memory_available_mib\": ");
        sb_json_num(&b, ci.mem_avail_mib);
        sb_puts(&b, "},\n  \"opencl\": {\"loader\": ");
        if (cl.loaded) sb_json_str(&b, cl.library);
        else sb_puts(&b, "null");
        sb_puts(&b, ", \"note\": ");
        sb_json_str(&b, cl.note);
        sb_printf(&b, ", \"backend\": %s, \"used_by_this_build\": %s, \"tinyrec_device\": ", TINYREC_OPENCL ? "true" : "false", TINYREC_OPENCL ? "true" : "false");
        if (env_dev) sb_json_str(&b, env_dev);
        else sb_puts(&b, "null");
        sb_puts(&b, ", \"tinyrec_device_error\": ");
        if (env_error[0]) sb_json_str(&b, env_error);
        else sb_puts(&b, "null");
        sb_puts(&b, ", \"auto_selector\": ");
        sb_json_str(&b, auto_sel);
        sb_puts(&b, ", \"opencl_selector\": ");
        if (ld.opencl_pick >= 0) sb_printf(&b, "\"opencl:%d\"", ld.d[ld.opencl_pick].index);
        else sb_puts(&b, "null");
        sb_puts(&b, ", \"devices\": [");
        for (i = 0; i < ld.n; i++) {
            sb_printf(&b, "%s{\"selector\": \"opencl:%d\", \"platform\": ", i ? ", " : "", ld.d[i].index);
            sb_json_str(&b, ld.d[i].platform);
            sb_puts(&b, ", \"name\": "), sb_json_str(&b, ld.d[i].name);
            sb_printf(&b, ", \"gpu\": %s, \"global_mem_bytes\": %llu, \"auto\": %s, \"opencl\": %s}", ld.d[i].is_gpu ? "true" : "false", (unsigned long long)ld.d[i].global_mem,
                      i == auto_cl ? "true" : "false", i == ld.opencl_pick ? "true" : "false");
        }
        sb_puts(&b, "], \"platforms\": [");
        for (p = 0; p < cl.num_platforms; p++) {
            cl_plat *pl = &cl.platforms[p];
            sb_puts(&b, p ? ",\n    {" : "\n    {");
            sb_puts(&b, "\"name\": "), sb_json_str(&b, pl->name);
            sb_puts(&b, ", \"vendor\": "), sb_json_str(&b, pl->vendor);
            sb_puts(&b, ", \"version\": "), sb_json_str(&b, pl->version);
            sb_puts(&b, ", \"extensions\": "), sb_json_str(&b, pl->extensions);
            sb_printf(&b, ", \"device_error\": %d, \"devices\": [", pl->device_error);
            for (d = 0; d < pl->num_devices; d++) {
                cl_dev *dv = &pl->devices[d];
                sb_puts(&b, d ? ", {" : "{");
                sb_puts(&b, "\"name\": "), sb_json_str(&b, dv->name);
                sb_puts(&b, ", \"vendor\": "), sb_json_str(&b, dv->vendor);
                sb_puts(&b, ", \"type\": "), sb_json_str(&b, dv->type);
                sb_puts(&b, ", \"version\": "), sb_json_str(&b, dv->version);
                sb_puts(&b, ", \"driver\": "), sb_json_str(&b, dv->driver);
                sb_printf(&b, ", \"compute_units\": %u, \"clock_mhz\": %u, \"global_mem_bytes\": %llu, \"local_mem_bytes\": %llu, \"max_alloc_bytes\": %llu",
                          (unsigned)dv->compute_units, (unsigned)dv->clock_mhz, (unsigned long long)dv->global_mem, (unsigned long long)dv->local_mem,
                          (unsigned long long)dv->max_alloc);
                sb_puts(&b, ", \"extensions\": "), sb_json_str(&b, dv->extensions);
                if (dv->lib >= 0) sb_printf(&b, ", \"selector\": \"opencl:%d\"", ld.d[dv->lib].index);
                else sb_puts(&b, ", \"selector\": null");
                sb_printf(&b, ", \"auto\": %s, \"used\": %s}", dv->lib >= 0 && dv->lib == auto_cl ? "true" : "false", dv->lib >= 0 ? "true" : "false");
            }
            sb_puts(&b, "]}");
        }
        sb_printf(&b, "]},\n  \"selftest\": {\"batch\": %d, \"train_steps\": %d, \"tolerance\": {\"logits\": %g, \"loss\": %g, \"params\": %g, \"opencl\": %g}, \"kernels\": [", ST_B,
                  ST_STEPS, TOL_FWD, TOL_LOSS, TOL_PARAM, TOL_CL);
        for (i = 0; i < 3; i++) {
            int a;
            sb_puts(&b, i ? ",\n    {" : "\n    {");
            sb_puts(&b, "\"name\": "), sb_json_str(&b, sr[i].name);
            sb_printf(&b, ", \"supported\": %s, \"status\": \"%s\", \"max_rel_diff\": ", sr[i].supported ? "true" : "false",
                      !sr[i].supported ? "SKIP" : sr[i].pass ? "PASS" : "FAIL");
            sb_json_num(&b, sr[i].max_rel);
            sb_printf(&b, ", \"seconds\": %.3f, \"variants\": [", sr[i].seconds);
            for (a = 0; a < 2 && sr[i].ran; a++) {
                sb_puts(&b, a ? ", {" : "{");
                sb_puts(&b, "\"model\": "), sb_json_str(&b, sr[i].v[a].name);
                sb_puts(&b, ", \"logits_rel\": "), sb_json_num(&b, sr[i].v[a].fwd_rel);
                sb_puts(&b, ", \"loss_rel\": "), sb_json_num(&b, sr[i].v[a].loss_rel);
                sb_puts(&b, ", \"params_rel\": "), sb_json_num(&b, sr[i].v[a].param_rel);
                sb_printf(&b, ", \"ok\": %s}", sr[i].v[a].ok ? "true" : "false");
            }
            sb_puts(&b, "], \"error\": ");
            sb_json_str(&b, sr[i].error);
            sb_puts(&b, "}");
        }
        sb_printf(&b, "],\n    \"opencl\": {\"selector\": \"opencl\", \"status\": \"%s\", \"device\": ", clr.status);
        if (clr.device[0]) sb_json_str(&b, clr.device);
        else sb_puts(&b, "null");
        sb_puts(&b, ", \"reference\": \"cpu\", \"max_rel_diff\": ");
        sb_json_num(&b, clr.max_rel);
        sb_printf(&b, ", \"seconds\": %.3f, \"variants\": [", clr.seconds);
        for (i = 0; i < 2 && !strcmp(clr.status, "PASS"); i++) {
            sb_puts(&b, i ? ", {" : "{");
            sb_puts(&b, "\"model\": "), sb_json_str(&b, clr.v[i].name);
            sb_puts(&b, ", \"logits_rel\": "), sb_json_num(&b, clr.v[i].fwd_rel);
            sb_puts(&b, ", \"loss_rel\": "), sb_json_num(&b, clr.v[i].loss_rel);
            sb_puts(&b, ", \"params_rel\": "), sb_json_num(&b, clr.v[i].param_rel);
            sb_printf(&b, ", \"ok\": %s}", clr.v[i].ok ? "true" : "false");
        }
        sb_puts(&b, "], \"error\": ");
        sb_json_str(&b, clr.error);
        sb_printf(&b, "}, \"pass\": %s},\n  \"batch\": {\"preset\": ", all_pass ? "true" : "false");
        sb_json_str(&b, preset);
        if (bp.ok) {
            sb_printf(&b, ", \"params\": %zu, \"gflop_train_per_sample\": %.4g, \"gflop_infer_step_per_sample\": %.4g", bp.params, bp.gflop_train, bp.gflop_infer);
            sb_printf(&b, ", \"available_mib\": %.0f, \"usable_mib\": %.0f, \"devices\": [{\"device\": \"cpu\", \"train_fit\": %d, \"train\": %d, \"train_mib\": %.1f, \"infer_fit\": %d, \"infer\": %d, \"infer_mib\": %.1f}",
                      bp.avail_mib, bp.usable_mib, bp.train_fit, bp.train_rec, bp.train_mib_at_rec, bp.infer_fit, bp.infer_rec, bp.infer_mib_at_rec);
            for (i = 0; i < bp.ncl; i++) {
                sb_printf(&b, ", {\"device\": \"opencl:%d\", \"name\": ", ld.d[i].index);
                sb_json_str(&b, ld.d[i].name);
                sb_printf(&b, ", \"usable_mib\": %.0f, \"train_fit\": %d, \"train\": %d, \"infer_fit\": %d, \"infer\": %d}", bp.cl[i].usable_mib, bp.cl[i].train_fit,
                          bp.cl[i].train_rec, bp.cl[i].infer_fit, bp.cl[i].infer_rec);
            }
            if (!TINYREC_OPENCL)
                for (p = 0; p < cl.num_platforms; p++)
                    for (d = 0; d < cl.platforms[p].num_devices; d++) {
                        sb_puts(&b, ", {\"device\": ");
                        sb_json_str(&b, cl.platforms[p].devices[d].name);
                        sb_puts(&b, ", \"train\": null, \"infer\": null, \"note\": \"not used by this build\"}");
                    }
            sb_puts(&b, "]");
        } else {
            sb_puts(&b, ", \"error\": ");
            sb_json_str(&b, bp.error);
        }
        sb_puts(&b, "},\n  \"auto\": {\"device\": ");
        sb_json_str(&b, auto_sel);
        sb_puts(&b, ", \"name\": ");
        if (auto_cl >= 0) sb_json_str(&b, ld.d[auto_cl].name);
        else sb_puts(&b, "\"cpu\"");
        sb_puts(&b, ", \"kernels\": ");
        sb_json_str(&b, auto_simd);
        sb_printf(&b, ", \"threads\": %d, \"reason\": ", threads);
        sb_json_str(&b, why);
        sb_puts(&b, "}\n}\n");
        fputs(b.s ? b.s : "{}\n", stdout);
        free(b.s);
    } else {
        int f;
        printf("tinyrec %s device report\n\n", tr_version_string());
        printf("CPU\n");
        printf("  model            %s (%s)\n", ci.model, ci.arch);
        printf("  logical CPUs     %d\n", ci.logical_cpus);
        printf("  features        ");
        for (f = 0; f < F_COUNT; f++) printf(" %s%s", ci.feature[f] ? "+" : "-", feature_names[f]);
        printf("\n                   (+ found by cpuid and enabled by the OS, - absent)\n");
        if (ci.mem_avail_mib >= 0) printf("  memory           %.1f GiB total, %.1f GiB available\n", ci.mem_total_mib / 1024, ci.mem_avail_mib / 1024);
        printf("  kernel set       %s (the library's pick; TINYREC_SIMD=scalar|avx2|avx512 forces one)\n", auto_simd);
        printf("  threads          %d (--threads or TINYREC_NUM_THREADS to change)\n", threads);
        printf("\nOpenCL\n");
        if (TINYREC_OPENCL)
            printf("  this build has the OpenCL backend: the selector opencl:N below (or opencl:<name>, or \"opencl\" for the\n"
                   "  first GPU, else the first device) picks a device, with device= / --device or TINYREC_DEVICE\n");
        else printf("  this build has no OpenCL backend (built without TINYREC_OPENCL): the devices below are not used\n");
        if (env_dev) printf("  TINYREC_DEVICE=%s %s%s\n", env_dev, env_error[0] ? "is not valid: " : "(the programs use it instead of auto)", env_error);
        if (!cl.num_platforms) printf("  %s%s%s\n", cl.note, cl.loaded ? " - loader: " : "", cl.loaded ? cl.library : "");
        for (p = 0; p < cl.num_platforms; p++) {
            cl_plat *pl = &cl.platforms[p];
            printf("  platform %d: %s (%s), %s\n", p, pl->name, pl->vendor, pl->version);
            if (pl->extensions[0]) print_wrapped("    extensions:  ", pl->extensions, 100);
            if (pl->device_error) printf("    clGetDeviceIDs failed with error %d\n", pl->device_error);
            for (d = 0; d < pl->num_devices; d++) {
                cl_dev *dv = &pl->devices[d];
                char tag[128];
                if (!TINYREC_OPENCL) snprintf(tag, sizeof tag, "not used by this build");
                else if (dv->lib < 0) snprintf(tag, sizeof tag, "not listed by the library, so no selector");
                else
                    snprintf(tag, sizeof tag, "opencl:%d%s", ld.d[dv->lib].index,
                             dv->lib == auto_cl                            ? " (auto and \"opencl\" pick it)"
                             : dv->lib == ld.opencl_pick && ld.d[dv->lib].is_gpu ? " (\"opencl\" picks it; auto would, but it cannot be opened)"
                             : dv->lib == ld.opencl_pick                   ? " (\"opencl\" picks it; auto does not: not a GPU)"
                                                                           : "");
                printf("    device %d: %s [%s] - %s\n", d, dv->name, dv->type, tag);
                printf("      vendor %s, %s, driver %s\n", dv->vendor, dv->version, dv->driver);
                printf("      %u compute units at %u MHz, global memory %.1f MiB (max allocation %.1f MiB), local memory %.1f KiB\n", (unsigned)dv->compute_units,
                       (unsigned)dv->clock_mhz, (double)dv->global_mem / 1048576.0, (double)dv->max_alloc / 1048576.0, (double)dv->local_mem / 1024.0);
                if (dv->extensions[0]) print_wrapped("      extensions: ", dv->extensions, 100);
            }
        }
        printf("\nSelf-test: a tiny TRM (mlp_t and attention), a forward pass and %d training steps at batch %d,\n", ST_STEPS, ST_B);
        printf("each kernel set against the scalar path on its own context with the same seed\n");
        printf("  tolerance: logits |x-ref|/(|ref|+rms(ref)) <= %g, losses |x-ref|/|ref| <= %g, parameters after training\n", TOL_FWD, TOL_LOSS);
        printf("  ||x-ref||/||ref|| per tensor <= %g; max relative difference = the worst of the three\n", TOL_PARAM);
        printf("  the OpenCL device that \"opencl\" selects: the same test against the CPU, all three <= %g\n", TOL_CL);
        for (i = 0; i < 3; i++) {
            if (!sr[i].supported) {
                printf("  %-7s SKIP  (not supported by this CPU)\n", sr[i].name);
                continue;
            }
            if (i == 0) {
                printf("  %-7s %s  reference path (%.2fs)%s%s\n", sr[i].name, sr[i].pass ? "PASS" : "FAIL", sr[i].seconds, sr[i].error[0] ? ": " : "", sr[i].error);
                continue;
            }
            printf("  %-7s %s  max relative difference %.2e (logits %.1e/%.1e, loss %.1e/%.1e, params %.1e/%.1e for mlp_t/attention) (%.2fs)%s%s\n", sr[i].name,
                   sr[i].pass ? "PASS" : "FAIL", sr[i].max_rel, sr[i].v[0].fwd_rel, sr[i].v[1].fwd_rel, sr[i].v[0].loss_rel, sr[i].v[1].loss_rel, sr[i].v[0].param_rel,
                   sr[i].v[1].param_rel, sr[i].seconds, sr[i].error[0] ? ": " : "", sr[i].error);
        }
        if (!strcmp(clr.status, "SKIP")) printf("  %-7s SKIP  (%s)\n", "opencl", clr.error);
        else if (clr.error[0]) printf("  %-7s FAIL  %s: %s (%.2fs)\n", "opencl", clr.device, clr.error, clr.seconds);
        else
            printf("  %-7s %s  %s: max relative difference %.2e against the cpu (logits %.1e/%.1e, loss %.1e/%.1e, params %.1e/%.1e for mlp_t/attention) (%.2fs)\n",
                   "opencl", clr.status, clr.device, clr.max_rel, clr.v[0].fwd_rel, clr.v[1].fwd_rel, clr.v[0].loss_rel, clr.v[1].loss_rel, clr.v[0].param_rel,
                   clr.v[1].param_rel, clr.seconds);
        printf("\nBatch size for preset %s", preset);
        if (!bp.ok) printf(": %s\n", bp.error);
        else {
            printf(" (%zu parameters, %.3g GFLOP per sample per training step, %.3g per inference step)\n", bp.params, bp.gflop_train, bp.gflop_infer);
            printf("  memory: %.0f MiB available, %.0f MiB usable (20%% or at least 512 MiB kept free)\n", bp.avail_mib, bp.usable_mib);
            printf("  %-28s train %5d (fits up to %d, %.0f MiB; +%.1f MiB per row)   infer %5d (fits up to %d, %.0f MiB)\n", "cpu", bp.train_rec, bp.train_fit, bp.train_mib_at_rec,
                   bp.train_mib_per_row, bp.infer_rec, bp.infer_fit, bp.infer_mib_at_rec);
            for (i = 0; i < bp.ncl; i++) {
                char label[48];
                snprintf(label, sizeof label, "opencl:%d %.17s", ld.d[i].index, ld.d[i].name); /* fits the column */
                printf("  %-28s train %5d (fits up to %d)   infer %5d (fits up to %d), of %.0f MiB usable device memory\n", label, bp.cl[i].train_rec, bp.cl[i].train_fit,
                       bp.cl[i].infer_rec, bp.cl[i].infer_fit, bp.cl[i].usable_mib);
            }
            if (!TINYREC_OPENCL)
                for (p = 0; p < cl.num_platforms; p++)
                    for (d = 0; d < cl.platforms[p].num_devices; d++) printf("  %-28s not used by this build (no OpenCL backend)\n", cl.platforms[p].devices[d].name);
            printf("  train: the reference global batch (%d) when it fits, else the largest multiple of 8; infer: a power of two up to 1024\n", REF_GLOBAL_BATCH);
        }
        if (auto_cl >= 0) printf("\nauto picks: %s, %s\n", auto_sel, ld.d[auto_cl].name);
        else printf("\nauto picks: cpu, %s kernels, %d threads\n", auto_simd, threads);
        print_wrapped("  why: ", why, 100);
        printf("\n%s\n", all_pass ? "all self-tests PASS" : "a self-test FAILED");
    }
    opencl_free(&cl);
    return all_pass ? 0 : 1;
}
