/* The device report API (>>api-device): CPU info, the OpenCL listing, the self-test and the
   batch advice, with their error paths and allocation-failure sweeps. */
#define TINYREC_IMPLEMENTATION
#include "test_util.h"
#include <string.h>

/* Every allocation count from 1 to the number a successful call makes (the first 8, then stepping so
   that about `spread` more calls run): each fails cleanly with TR_ERR_OUT_OF_MEMORY, or succeeds,
   and leaks nothing. call returns the status. */
typedef tr_status (*dev_call)(tr_ctx *ctx, void *arg);
static void dev_sweep(tr_ctx *ctx, dev_call call, void *arg, long spread) {
    long before = tr_ctx_alloc_count(ctx), total, n, step;
    assert_int_equal(call(ctx, arg), TR_OK);
    total = tr_ctx_alloc_count(ctx) - before;
    assert_true(total > 0);
    step = total / spread + 1;
    for (n = 1; n <= total; n += (n < 8 ? 1 : step)) {
        tr_status st;
        tr_ctx_fail_alloc_at(ctx, n);
        st = call(ctx, arg);
        tr_ctx_fail_alloc_at(ctx, 0);
        if (st != TR_OK) {
            if (st != TR_ERR_OUT_OF_MEMORY) fail_msg("allocation %ld of %ld: status %d (%s)", n, total, (int)st, tr_ctx_last_error(ctx));
            assert_non_null(strstr(tr_ctx_last_error(ctx), "out of memory"));
        }
        assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    }
}

/* ---- CPU ---------------------------------------------------------------------------------- */
static void test_cpu_info(void **state) {
    tr_ctx *ctx = tu_ctx(2, 1);
    tr_cpu_info ci;
    int i, j;
    (void)state;
    assert_int_equal(tr_ctx_set_simd(ctx, "auto"), TR_OK);
    assert_int_equal(tr_cpu_info_get(ctx, &ci), TR_OK);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    assert_true(ci.model[0] != 0 && ci.model[0] != ' ');
    assert_true(ci.arch[0] != 0);
    assert_true(ci.logical_cpus >= 1);
    assert_int_equal(ci.threads, tr_ctx_num_threads(ctx));
    /* the kernel sets: what tr_ctx_set_simd accepts, and "auto" picks the widest */
    assert_string_equal(ci.kernels, tr_ctx_simd_name(ctx));
    assert_string_equal(ci.kernel_sets[0], "scalar");
    assert_true(ci.kernel_set_ok[0]);
    for (i = 0; i < TR_KERNEL_SETS; i++) {
        assert_int_equal(ci.kernel_set_ok[i], tr_ctx_set_simd(ctx, ci.kernel_sets[i]) == TR_OK);
        if (ci.kernel_set_ok[i]) assert_string_equal(tr_ctx_simd_name(ctx), ci.kernel_sets[i]);
        if (!strcmp(ci.kernels, ci.kernel_sets[i]))
            for (j = i + 1; j < TR_KERNEL_SETS; j++) assert_false(ci.kernel_set_ok[j]);
    }
    /* the features behind them */
    if (ci.kernel_set_ok[1]) assert_true(ci.features[TR_CPU_AVX2] && ci.features[TR_CPU_FMA] && ci.features[TR_CPU_AVX]);
    if (ci.kernel_set_ok[2]) assert_true(ci.features[TR_CPU_AVX512F] && ci.features[TR_CPU_AVX512BW] && ci.features[TR_CPU_AVX512DQ] && ci.features[TR_CPU_AVX512VL]);
    if (ci.features[TR_CPU_AVX512F]) assert_true(ci.features[TR_CPU_AVX]); /* the OS saves zmm only with ymm */
    for (i = 0; i < TR_CPU_FEATURE_COUNT; i++) {
        assert_true(tr_cpu_feature_name((tr_cpu_feature)i)[0] != 0);
        assert_true(ci.features[i] == 0 || ci.features[i] == 1);
        for (j = 0; j < i; j++) assert_string_not_equal(tr_cpu_feature_name((tr_cpu_feature)i), tr_cpu_feature_name((tr_cpu_feature)j));
    }
    assert_string_equal(tr_cpu_feature_name(TR_CPU_SSE42), "sse4.2");
    assert_string_equal(tr_cpu_feature_name(TR_CPU_FEATURE_COUNT), "");
    assert_string_equal(tr_cpu_feature_name((tr_cpu_feature)-1), "");
    if (ci.mem_available_mib >= 0) assert_true(ci.mem_total_mib >= ci.mem_available_mib);
    /* bad arguments */
    assert_int_equal(tr_cpu_info_get(NULL, &ci), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_cpu_info_get(ctx, NULL), TR_ERR_INVALID_ARG);
    assert_non_null(strstr(tr_ctx_last_error(ctx), "tr_cpu_info_get: out is NULL"));
    tr_ctx_destroy(ctx);
}

static tr_status call_cpu_info(tr_ctx *ctx, void *arg) { return tr_cpu_info_get(ctx, (tr_cpu_info *)arg); }

static void test_cpu_info_alloc(void **state) {
    tr_ctx *ctx;
    tr_cpu_info ci;
    FILE *f = fopen("/proc/cpuinfo", "r");
    (void)state;
    if (!f) skip(); /* it allocates only to read /proc */
    fclose(f);
    ctx = tu_ctx(1, 1);
    dev_sweep(ctx, call_cpu_info, &ci, 40);
    tr_ctx_destroy(ctx);
}

/* ---- self-test ---------------------------------------------------------------------------- */
static void test_selftest_cpu(void **state) {
    tr_ctx *ctx = tu_ctx(2, 1);
    tr_selftest_result r;
    tr_selftest_tolerance zero = {0, 0, 0};
    tr_cpu_info ci;
    int a;
    (void)state;
    assert_int_equal(tr_cpu_info_get(ctx, &ci), TR_OK);
    /* the scalar path against itself: identical, with the default tolerances */
    assert_int_equal(tr_device_selftest(ctx, "cpu", "scalar", NULL, &r), TR_OK);
    assert_true(r.pass);
    assert_true(r.max_diff == 0);
    assert_true(r.tol.logits == TR_SELFTEST_TOL_LOGITS && r.tol.loss == TR_SELFTEST_TOL_LOSS && r.tol.params == TR_SELFTEST_TOL_PARAMS);
    assert_string_equal(r.variant[0].model, "mlp_t");
    assert_string_equal(r.variant[1].model, "attention");
    assert_string_equal(r.error, "");
    assert_false(r.opened);
    /* the best set here (NULL = auto) */
    assert_int_equal(tr_device_selftest(ctx, "cpu", NULL, NULL, &r), TR_OK);
    if (!r.pass) fail_msg("%s kernels: max difference %g: %s", ci.kernels, r.max_diff, r.error);
    for (a = 0; a < 2; a++) {
        assert_true(r.variant[a].ok);
        assert_true(r.variant[a].logits <= r.max_diff && r.variant[a].loss <= r.max_diff && r.variant[a].params <= r.max_diff);
    }
    assert_true(r.seconds > 0);
    /* an impossible tolerance fails a set that rounds differently from the scalar path */
    if (strcmp(ci.kernels, "scalar") != 0) {
        assert_int_equal(tr_device_selftest(ctx, "cpu", ci.kernels, &zero, &r), TR_OK);
        assert_false(r.pass);
        assert_true(r.max_diff > 0);
        assert_true(r.tol.logits == 0 && r.tol.loss == 0 && r.tol.params == 0);
        assert_false(r.variant[0].ok && r.variant[1].ok);
    }
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

static void test_selftest_args(void **state) {
    tr_ctx *ctx = tu_ctx(1, 1);
    tr_selftest_result r;
    tr_selftest_tolerance neg = {1e-3, -1, 1e-3}, nan = {1e-3, 1e-3, 0};
    tr_cpu_info ci;
    const char *simd = tr_ctx_simd_name(ctx); /* TINYREC_SIMD may have set it */
    (void)state;
    nan.params = sqrt(-1.0);
    assert_int_equal(tr_cpu_info_get(ctx, &ci), TR_OK);
    assert_int_equal(tr_device_selftest(NULL, "cpu", NULL, NULL, &r), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_device_selftest(ctx, "cpu", NULL, NULL, NULL), TR_ERR_INVALID_ARG);
    assert_non_null(strstr(tr_ctx_last_error(ctx), "out is NULL"));
    assert_int_equal(tr_device_selftest(ctx, "gpu", NULL, NULL, &r), TR_ERR_INVALID_ARG);
    assert_non_null(strstr(tr_ctx_last_error(ctx), "device 'gpu'"));
    assert_int_equal(tr_device_selftest(ctx, "auto", NULL, NULL, &r), TR_ERR_INVALID_ARG); /* auto may be the CPU: say which */
    assert_int_equal(tr_device_selftest(ctx, NULL, NULL, NULL, &r), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_device_selftest(ctx, "cpu", "sse9", NULL, &r), TR_ERR_INVALID_ARG);
    assert_non_null(strstr(tr_ctx_last_error(ctx), "unknown simd 'sse9'"));
    assert_int_equal(tr_device_selftest(ctx, "cpu", "scalar", &neg, &r), TR_ERR_INVALID_ARG);
    assert_non_null(strstr(tr_ctx_last_error(ctx), "tolerances must be >= 0"));
    assert_int_equal(tr_device_selftest(ctx, "cpu", "scalar", &nan, &r), TR_ERR_INVALID_ARG);
    if (!ci.kernel_set_ok[2]) {
        assert_int_equal(tr_device_selftest(ctx, "cpu", "avx512", NULL, &r), TR_ERR_UNSUPPORTED);
        assert_non_null(strstr(tr_ctx_last_error(ctx), "not supported by this CPU"));
    }
    assert_string_equal(tr_ctx_simd_name(ctx), simd); /* checking a name leaves the context's set alone */
#if !TINYREC_OPENCL
    assert_int_equal(tr_device_selftest(ctx, "opencl", NULL, NULL, &r), TR_ERR_UNSUPPORTED);
    assert_non_null(strstr(tr_ctx_last_error(ctx), "without TINYREC_OPENCL"));
#endif
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

/* Each run builds two small models on contexts of its own; their allocations count as ctx's. */
static tr_status call_selftest(tr_ctx *ctx, void *arg) {
    tr_selftest_result *r = (tr_selftest_result *)arg;
    tr_status st = tr_device_selftest(ctx, "cpu", "scalar", NULL, r);
    if (st == TR_OK && !r->pass) fail_msg("an allocation failure was reported as a failed test: %s", r->error);
    return st;
}

static void test_selftest_alloc(void **state) {
    tr_ctx *ctx = tu_ctx(1, 1);
    tr_selftest_result r;
    (void)state;
    dev_sweep(ctx, call_selftest, &r, 12); /* (each call trains four small models) */
    tr_ctx_destroy(ctx);
}

/* ---- OpenCL ------------------------------------------------------------------------------- */
static void test_opencl_list(void **state) {
    tr_ctx *ctx = tu_ctx(1, 1);
    tr_opencl_list L;
    int i, gpu = -1;
    (void)state;
    assert_int_equal(tr_opencl_list_devices(NULL, &L), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_opencl_list_devices(ctx, NULL), TR_ERR_INVALID_ARG);
    assert_non_null(strstr(tr_ctx_last_error(ctx), "tr_opencl_list_devices: out is NULL"));
    assert_int_equal(tr_opencl_list_devices(ctx, &L), TR_OK);
    if (L.num_devices == 0) {
        assert_true(L.note[0] != 0); /* says why */
        assert_int_equal(L.auto_pick, -1);
        assert_int_equal(L.opencl_pick, -1);
        char note[256];
        snprintf(note, sizeof note, "%s", L.note);
        tr_opencl_list_free(ctx, &L);
        assert_int_equal(tr_ctx_live_allocs(ctx), 0);
        tr_ctx_destroy(ctx);
        tu_no_opencl(note);
        return;
    }
    assert_true(L.loaded && L.library[0]);
    assert_true(L.num_platforms >= 1);
    for (i = 0; i < L.num_platforms; i++) assert_non_null(L.platforms[i].extensions);
    for (i = 0; i < L.num_devices; i++) {
        const tr_opencl_device *d = &L.devices[i];
        assert_int_equal(d->index, i);
        assert_true(d->platform >= 0 && d->platform < L.num_platforms);
        assert_int_equal(L.platforms[d->platform].device_error, 0);
        assert_true(d->name[0] && d->version[0]);
        assert_non_null(d->extensions);
        assert_non_null(d->type);
        assert_int_equal(d->is_gpu, !strcmp(d->type, "GPU"));
        assert_true(d->global_mem > 0 && d->max_alloc > 0 && d->max_alloc <= d->global_mem);
        assert_true(d->compute_units >= 1);
        if (d->is_gpu && gpu < 0) gpu = i;
    }
    assert_int_equal(L.auto_pick, gpu);
    assert_int_equal(L.opencl_pick, gpu >= 0 ? gpu : 0);
    /* the library opens the device its listing names "opencl:N" */
    {
        tr_ctx *c2 = tu_ctx(1, 1);
        char sel[32];
        const tr_opencl_device *d = &L.devices[L.num_devices - 1];
        snprintf(sel, sizeof sel, "opencl:%d", d->index);
        assert_int_equal(tr_ctx_set_device(c2, sel), TR_OK);
        if (tr_ctx_use_device(c2)) assert_non_null(strstr(tr_ctx_device_name(c2), d->name));
        tr_ctx_destroy(c2);
    }
    tr_opencl_list_free(ctx, &L);
    assert_int_equal(L.num_devices, 0);
    tr_opencl_list_free(ctx, &L); /* twice is harmless */
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

static tr_status call_opencl_list(tr_ctx *ctx, void *arg) {
    tr_opencl_list *L = (tr_opencl_list *)arg;
    tr_status st = tr_opencl_list_devices(ctx, L);
    if (st == TR_OK) tr_opencl_list_free(ctx, L);
    else assert_int_equal(L->num_devices, 0); /* nothing half-made is left to free */
    return st;
}

static void test_opencl_list_alloc(void **state) {
    tr_ctx *ctx = tu_ctx(1, 1);
    tr_opencl_list L;
    (void)state;
    assert_int_equal(tr_opencl_list_devices(ctx, &L), TR_OK);
    if (L.num_devices == 0) {
        tr_opencl_list_free(ctx, &L);
        tr_ctx_destroy(ctx);
        tu_no_opencl("no OpenCL device listed");
        return;
    }
    tr_opencl_list_free(ctx, &L);
    dev_sweep(ctx, call_opencl_list, &L, 40);
    tr_ctx_destroy(ctx);
}

/* The device "opencl" picks against the CPU passes; a selector that opens nothing is a failed
   test, not an error. */
static void test_selftest_opencl(void **state) {
    tr_ctx *ctx = tu_ctx(2, 1);
    tr_opencl_list L;
    tr_selftest_result r;
    int n;
    (void)state;
    assert_int_equal(tr_opencl_list_devices(ctx, &L), TR_OK);
    n = L.num_devices;
    tr_opencl_list_free(ctx, &L);
    if (n == 0) {
        tr_ctx_destroy(ctx);
        tu_no_opencl("no OpenCL device listed");
        return;
    }
    assert_int_equal(tr_device_selftest(ctx, "opencl", NULL, NULL, &r), TR_OK);
    if (!r.pass) fail_msg("opencl self-test: max difference %g: %s", r.max_diff, r.error);
    assert_true(r.opened);
    assert_true(r.tol.logits == TR_SELFTEST_TOL_OPENCL && r.tol.loss == TR_SELFTEST_TOL_OPENCL && r.tol.params == TR_SELFTEST_TOL_OPENCL);
    assert_int_equal(tr_device_selftest(ctx, "opencl:no-such-device", NULL, NULL, &r), TR_OK);
    assert_false(r.pass);
    assert_false(r.opened);
    assert_non_null(strstr(r.error, "not opened"));
    assert_non_null(strstr(r.error, "no-such-device"));
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

/* ---- batch advice ------------------------------------------------------------------------- */
static int is_pow2(int v) { return v > 0 && (v & (v - 1)) == 0; }

static void test_recommend_batch(void **state) {
    tr_ctx *ctx = tu_ctx(1, 1);
    tr_model_config cfg;
    tr_batch_advice b, prev;
    static const double mib[] = {0, 256, 512, 700, 1024, 2048, 8192, 65536, 1e9};
    size_t i;
    (void)state;
    assert_int_equal(tr_model_config_preset(&cfg, "trm-sudoku-mlp"), TR_OK);
    memset(&prev, 0, sizeof prev);
    for (i = 0; i < sizeof mib / sizeof mib[0]; i++) {
        assert_int_equal(tr_recommend_batch(ctx, &cfg, mib[i], &b), TR_OK);
        assert_true(b.memory_mib == mib[i]);
        assert_true(b.usable_mib == TR__MAX(0.0, mib[i] - TR__MAX(0.2 * mib[i], 512.0))); /* 20% or 512 MiB kept free */
        /* grows with memory, bounded by the reference batch and 1024 */
        assert_true(b.train_fit >= prev.train_fit && b.train >= prev.train && b.infer_fit >= prev.infer_fit && b.infer >= prev.infer);
        assert_true(b.train <= b.train_fit && b.train <= TR_REFERENCE_GLOBAL_BATCH);
        assert_true(b.infer <= b.infer_fit && b.infer <= 1024);
        if (b.train_fit >= 8) assert_int_equal(b.train % 8, 0);
        if (b.infer_fit >= 1) assert_true(is_pow2(b.infer));
        if (b.train > 0) assert_true(b.train_mib <= b.usable_mib);
        if (b.infer > 0) assert_true(b.infer_mib <= b.usable_mib);
        assert_true(b.train_mib_per_row > 0 && b.infer_mib_per_row > 0);
        prev = b;
    }
    assert_int_equal(prev.train, TR_REFERENCE_GLOBAL_BATCH);
    assert_int_equal(prev.infer, 1024);
    assert_int_equal(tr_recommend_batch(ctx, &cfg, 0, &b), TR_OK);
    assert_int_equal(b.train, 0);
    assert_int_equal(b.infer, 0);
    /* the machine's own memory */
    assert_int_equal(tr_recommend_batch(ctx, &cfg, -1, &b), TR_OK);
    assert_true(b.memory_mib > 0);
    /* bad arguments, and a configuration the model rejects */
    assert_int_equal(tr_recommend_batch(NULL, &cfg, 1024, &b), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_recommend_batch(ctx, NULL, 1024, &b), TR_ERR_INVALID_ARG);
    assert_non_null(strstr(tr_ctx_last_error(ctx), "cfg is NULL"));
    assert_int_equal(tr_recommend_batch(ctx, &cfg, 1024, NULL), TR_ERR_INVALID_ARG);
    assert_non_null(strstr(tr_ctx_last_error(ctx), "out is NULL"));
    assert_int_equal(tr_recommend_batch(ctx, &cfg, sqrt(-1.0), &b), TR_ERR_INVALID_ARG);
    assert_non_null(strstr(tr_ctx_last_error(ctx), "memory_mib is NaN"));
    cfg.hidden_size = 7;
    assert_int_equal(tr_recommend_batch(ctx, &cfg, 1024, &b), TR_ERR_CONFIG);
    assert_non_null(strstr(tr_ctx_last_error(ctx), "tr_recommend_batch: "));
    assert_non_null(strstr(tr_ctx_last_error(ctx), "hidden_size"));
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

static tr_status call_recommend(tr_ctx *ctx, void *arg) {
    tr_model_config cfg;
    tr_batch_advice b;
    tu_tiny_config(&cfg, 1, TR_POS_NONE, TR_LOSS_STABLEMAX);
    return tr_recommend_batch(ctx, &cfg, *(double *)arg, &b);
}

static void test_recommend_batch_alloc(void **state) {
    tr_ctx *ctx = tu_ctx(1, 1);
    double machine = -1, fixed = 4096;
    (void)state;
    dev_sweep(ctx, call_recommend, &fixed, 40);
    dev_sweep(ctx, call_recommend, &machine, 40); /* also reads /proc/meminfo */
    tr_ctx_destroy(ctx);
}

/* ---- the context's knobs ------------------------------------------------------------------ */

/* A context made with `cfg` while `var` holds `env` (NULL: unset); the variable is unset again after. */
static tr_status knob_ctx(const tr_ctx_config *cfg, const char *var, const char *env, tr_ctx **out) {
    tr_status st;
    if (env) setenv(var, env, 1);
    else unsetenv(var);
    st = tr_ctx_create(cfg, out);
    unsetenv(var);
    return st;
}

/* Each TINYREC_* variable tr_ctx_create reads has a tr_ctx_config field: set, it wins over the variable
   (an invalid value is refused the same way); unset (NULL), the variable is in force. */
static void test_ctx_knobs(void **state) {
    static const char *const cl_vars[5] = {"TINYREC_CL_SGEMM", "TINYREC_CL_OPTIONS", "TINYREC_CL_PROFILE", "TINYREC_CL_ZEROCOPY", "TINYREC_OPENCL_DRIVERS"};
    static const char *const vars[3] = {"TINYREC_TAPE16", "TINYREC_CPU_BF16", "TINYREC_FAULT"};
    /* knob (vars' index), the field's value, the variable's, the status, then ctx->tape16 / bf16_gemm / fault */
    static const struct { int knob; const char *set, *env; tr_status st; int want; } cases[] = {
        {0, NULL, "0", TR_OK, 0}, {0, "1", "0", TR_OK, 1}, {0, "0", NULL, TR_OK, 0}, {0, "2", "1", TR_ERR_INVALID_ARG, 0},
        {1, NULL, "3", TR_OK, 3}, {1, "0", "3", TR_OK, 0}, {1, "", "2", TR_OK, 1} /* "": the default */, {1, "4", NULL, TR_ERR_INVALID_ARG, 0},
        {2, NULL, "no-device", TR_OK, TR_FAULT_NO_DEVICE}, {2, "enqueue@3:2", "no-device", TR_OK, TR_FAULT_ENQUEUE},
        {2, "", "no-device", TR_OK, TR_FAULT_NONE}, {2, "bogus", NULL, TR_ERR_INVALID_ARG, 0},
    };
    char longer[400];
    tr_ctx_config cfg = tr_ctx_config_default();
    tr_ctx *ctx = NULL;
    int k;
    (void)state;
    for (k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++) {
        tr_ctx_config c = tr_ctx_config_default();
        tr_status st;
        *(cases[k].knob == 0 ? &c.tape16 : cases[k].knob == 1 ? &c.cpu_bf16 : &c.fault) = cases[k].set;
        st = knob_ctx(&c, vars[cases[k].knob], cases[k].env, &ctx);
        if (st != cases[k].st) fail_msg("case %d: status %d, not %d", k, (int)st, (int)cases[k].st);
        if (st != TR_OK) continue;
        assert_int_equal(cases[k].knob == 0 ? ctx->tape16 : cases[k].knob == 1 ? ctx->bf16_gemm : (int)ctx->fault, cases[k].want);
        if (cases[k].want == TR_FAULT_ENQUEUE && cases[k].knob == 2) assert_true(ctx->fault_step == 3 && ctx->fault_rows == 2);
        tr_ctx_destroy(ctx);
    }
    /* the OpenCL knobs, read when a device opens (test_opencl_runtime opens one with them) */
    for (k = 0; k < 5; k++) {
        assert_int_equal(knob_ctx(&cfg, cl_vars[k], "from-env", &ctx), TR_OK);
        setenv(cl_vars[k], "from-env", 1);
        assert_string_equal(tr__ctx_knob(ctx, k), "from-env");
        unsetenv(cl_vars[k]);
        assert_null(tr__ctx_knob(ctx, k));
        tr_ctx_destroy(ctx);
    }
    cfg.cl_sgemm = "TM=32", cfg.cl_options = "-DX=1", cfg.cl_profile = "1", cfg.cl_zerocopy = "", cfg.opencl_drivers = "/x/libgpu.so";
    assert_int_equal(tr_ctx_create(&cfg, &ctx), TR_OK);
    for (k = 0; k < 5; k++) setenv(cl_vars[k], "from-env", 1);
    assert_string_equal(tr__ctx_knob(ctx, TR__KNOB_CL_SGEMM), "TM=32");
    assert_string_equal(tr__ctx_knob(ctx, TR__KNOB_CL_OPTIONS), "-DX=1");
    assert_string_equal(tr__ctx_knob(ctx, TR__KNOB_CL_PROFILE), "1");
    assert_string_equal(tr__ctx_knob(ctx, TR__KNOB_CL_ZEROCOPY), ""); /* set to "", not the variable */
    assert_string_equal(tr__ctx_knob(ctx, TR__KNOB_CL_DRIVERS), "/x/libgpu.so");
    for (k = 0; k < 5; k++) unsetenv(cl_vars[k]);
    tr_ctx_destroy(ctx);
    /* a copy: the caller's string may go away; one too long for it is refused */
    memset(longer, 'x', sizeof longer - 1);
    longer[sizeof longer - 1] = 0;
    cfg.cl_options = longer;
    assert_int_equal(tr_ctx_create(&cfg, &ctx), TR_ERR_INVALID_ARG);
    longer[10] = 0;
    assert_int_equal(tr_ctx_create(&cfg, &ctx), TR_OK);
    longer[0] = 'y';
    assert_string_equal(tr__ctx_knob(ctx, TR__KNOB_CL_OPTIONS), "xxxxxxxxxx");
    tr_ctx_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_info),        cmocka_unit_test(test_cpu_info_alloc),      cmocka_unit_test(test_selftest_cpu),
        cmocka_unit_test(test_selftest_args),   cmocka_unit_test(test_selftest_alloc),      cmocka_unit_test(test_opencl_list),
        cmocka_unit_test(test_opencl_list_alloc), cmocka_unit_test(test_selftest_opencl), cmocka_unit_test(test_recommend_batch),
        cmocka_unit_test(test_recommend_batch_alloc), cmocka_unit_test(test_ctx_knobs),
    };
    return cmocka_run_group_tests_name("device", tests, NULL, NULL);
}
