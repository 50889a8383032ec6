/* tinyrec-devices: the compatibility report. Lists the CPU (model, ISA features found at run time,
   the kernel set the library picks, threads) and every OpenCL platform and device the library can
   open (with the selector "opencl:N" of each and the pick of "auto"), runs the library's short
   forward and backward self-test of every CPU kernel set this machine supports against the scalar
   path and of the OpenCL device that "opencl" selects against the CPU, and recommends batch sizes
   for a preset from the memory the model needs and the memory each device has.

     tinyrec-devices [--preset NAME] [--threads N] [--json]

   Exits 0 when every self-test passes (a missing OpenCL device is no failure), 1 when one fails,
   2 on bad arguments.
   Uses only the public API: tr_cpu_info_get, tr_opencl_list_devices, tr_device_selftest and
   tr_recommend_batch do the work; this file prints what they return. */
#define TINYREC_IMPLEMENTATION
#include "tinyrec.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void print_wrapped(const char *prefix, const char *text, int width) {
    int col = (int)strlen(prefix), indent = col;
    const char *s = text;
    printf("%s", prefix);
    while (*s) {
        int n;
        while (*s == ' ') s++;
        if (!*s) break;
        n = strchr(s, ' ') ? (int)(strchr(s, ' ') - s) : (int)strlen(s);
        if (col + n + 1 > width && col > indent) {
            printf("\n%*s", indent, "");
            col = indent;
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
            TR_SELFTEST_STEPS);
    for (; *names; names++) fprintf(f, " %s", *names);
    fprintf(f,
            "\n  --threads N     threads for the self-test (default: TINYREC_NUM_THREADS or all cores)\n"
            "  --json          a machine-readable report on stdout\n"
            "  --help          this text\n"
            "Exit status: 0 all self-tests pass, 1 a self-test fails, 2 bad arguments.\n"
            "example: tinyrec-devices --preset trm-sudoku-att --json\n");
}

/* The report's pieces, gathered before anything is printed. */
typedef struct report {
    tr_cpu_info cpu;
    tr_opencl_list cl;
    const char *env_dev; /* TINYREC_DEVICE, NULL when unset */
    char env_error[300]; /* why the library rejects it */
    tr_selftest_result kern[TR_KERNEL_SETS];
    tr_selftest_result opencl;
    const char *opencl_status; /* PASS, FAIL, SKIP */
    char opencl_device[300];
    int all_pass;
    const char *preset;
    char batch_error[300];
    size_t params;
    double gflop_train, gflop_infer;
    tr_batch_advice cpu_batch, *cl_batch; /* cl_batch[i]: OpenCL device i */
    int auto_cl;                          /* the device "auto" ends on, -1: the CPU */
    char auto_sel[32], why[1024];
} report;

/* A self-test that could not run (TR_ERR_*) is a failure with the library's reason. */
static void selftest(tr_ctx *ctx, const char *device, const char *kernels, tr_selftest_result *r) {
    if (tr_device_selftest(ctx, device, kernels, NULL, r) != TR_OK) {
        r->pass = 0;
        snprintf(r->error, sizeof r->error, "%.300s", tr_ctx_last_error(ctx));
    }
}

static void gather(tr_ctx *ctx, report *R) {
    tr_model_config cfg;
    tr_model *m = NULL;
    int k, i;
    tr_cpu_info_get(ctx, &R->cpu);
    tr_opencl_list_devices(ctx, &R->cl);
    if (R->env_dev && tr_ctx_set_device(ctx, R->env_dev) != TR_OK) snprintf(R->env_error, sizeof R->env_error, "%.290s", tr_ctx_last_error(ctx));
    tr_ctx_set_device(ctx, "cpu"); /* only checked: the model below needs no device */

    /* self-tests: every kernel set the CPU runs against the scalar path, "opencl" against the CPU */
    R->all_pass = R->cpu.kernel_set_ok[0];
    for (k = 0; k < TR_KERNEL_SETS; k++)
        if (R->cpu.kernel_set_ok[k]) {
            selftest(ctx, "cpu", R->cpu.kernel_sets[k], &R->kern[k]);
            R->all_pass &= R->kern[k].pass;
        }
    R->opencl_status = "SKIP";
    if (!TINYREC_OPENCL) snprintf(R->opencl.error, sizeof R->opencl.error, "this build has no OpenCL backend: built without TINYREC_OPENCL");
    else if (R->cl.opencl_pick < 0) snprintf(R->opencl.error, sizeof R->opencl.error, "no OpenCL device found");
    else {
        const tr_opencl_device *d = &R->cl.devices[R->cl.opencl_pick];
        snprintf(R->opencl_device, sizeof R->opencl_device, "opencl:%d, %s", d->index, d->name);
        selftest(ctx, "opencl", NULL, &R->opencl);
        R->opencl_status = R->opencl.pass ? "PASS" : "FAIL";
        R->all_pass &= R->opencl.pass;
    }

    /* batch sizes: the CPU's available memory, each OpenCL device's global memory */
    R->cl_batch = (tr_batch_advice *)calloc((size_t)R->cl.num_devices + 1, sizeof *R->cl_batch);
    tr_model_config_preset(&cfg, R->preset);
    if (!R->cl_batch || tr_model_create(ctx, &cfg, &m) != TR_OK || tr_recommend_batch(ctx, &cfg, -1, &R->cpu_batch) != TR_OK)
        snprintf(R->batch_error, sizeof R->batch_error, "%.290s", R->cl_batch ? tr_ctx_last_error(ctx) : "out of memory");
    else {
        R->params = tr_model_num_params(m);
        tr_model_flops(m, &R->gflop_train, &R->gflop_infer);
        R->gflop_train /= 1e9, R->gflop_infer /= 1e9;
        for (i = 0; i < R->cl.num_devices; i++) tr_recommend_batch(ctx, &cfg, (double)R->cl.devices[i].global_mem / 1048576.0, &R->cl_batch[i]);
    }
    tr_model_destroy(m);

    /* "auto": the first OpenCL GPU, unless it cannot be opened (the self-test opened the same
       device, which is also what "opencl" takes when there is a GPU); else the CPU */
    R->auto_cl = R->cl.auto_pick >= 0 && R->opencl.opened ? R->cl.auto_pick : -1;
    snprintf(R->auto_sel, sizeof R->auto_sel, "cpu");
    if (R->auto_cl >= 0) {
        const tr_opencl_device *d = &R->cl.devices[R->auto_cl];
        snprintf(R->auto_sel, sizeof R->auto_sel, "opencl:%d", d->index);
        snprintf(R->why, sizeof R->why, "this build has the OpenCL backend and %s (%s) is the first OpenCL GPU%s", R->auto_sel, d->name,
                 R->opencl.pass ? "; it passed its self-test" : "");
    } else {
        char cpu_why[256];
        snprintf(cpu_why, sizeof cpu_why, "%s is the widest kernel set that the CPU and the OS support%s", R->cpu.kernels,
                 R->all_pass ? "; it passed its self-test" : "");
        if (!TINYREC_OPENCL) snprintf(R->why, sizeof R->why, "this build has CPU kernels only (no OpenCL backend); %s", cpu_why);
        else if (R->cl.auto_pick >= 0)
            snprintf(R->why, sizeof R->why, "this build has the OpenCL backend, but the OpenCL GPU opencl:%d (%s) could not be opened (%s), so the library uses the CPU; %s",
                     R->cl.devices[R->cl.auto_pick].index, R->cl.devices[R->cl.auto_pick].name, R->opencl.error, cpu_why);
        else if (R->cl.num_devices > 0)
            snprintf(R->why, sizeof R->why, "this build has the OpenCL backend, but %s OpenCL device%s a GPU (\"opencl\" selects opencl:%d); %s",
                     R->cl.num_devices == 1 ? "the only" : "none of the", R->cl.num_devices == 1 ? " is not" : "s is", R->cl.opencl_pick, cpu_why);
        else snprintf(R->why, sizeof R->why, "this build has the OpenCL backend, but no OpenCL device was found; %s", cpu_why);
    }
}

/* ---- JSON (strings and numbers through the library's writer) -------------------------------- */
static void js(const char *s) { tr_json_fput_string(stdout, s); }
static void jn(double v) { tr_json_fput_number(stdout, v); }
static void js_or_null(const char *s) {
    if (s && s[0]) js(s);
    else fputs("null", stdout);
}
static void jn_or_null(double v) { /* < 0: unknown */
    if (v >= 0) jn(v);
    else fputs("null", stdout);
}
static const char *jb(int b) { return b ? "true" : "false"; }

static void json_variants(const tr_selftest_result *r, int show) {
    int a;
    printf(", \"variants\": [");
    for (a = 0; a < 2 && show; a++) {
        printf("%s{\"model\": ", a ? ", " : "");
        js(r->variant[a].model ? r->variant[a].model : (a ? "attention" : "mlp_t"));
        printf(", \"logits_rel\": "), jn(r->variant[a].logits);
        printf(", \"loss_rel\": "), jn(r->variant[a].loss);
        printf(", \"params_rel\": "), jn(r->variant[a].params);
        printf(", \"ok\": %s}", jb(r->variant[a].ok));
    }
    printf("], \"error\": "), js(r->error);
}

static void print_json(const report *R) {
    const tr_cpu_info *c = &R->cpu;
    const tr_opencl_list *cl = &R->cl;
    int f, i, p;
    printf("{\n  \"tinyrec_version\": "), js(tr_version_string());
    printf(",\n  \"cpu\": {\"model\": "), js(c->model);
    printf(", \"arch\": "), js(c->arch);
    printf(", \"logical_cpus\": %d, \"threads\": %d, \"kernels\": ", c->logical_cpus, c->threads), js(c->kernels);
    printf(", \"features\": {");
    for (f = 0; f < TR_CPU_FEATURE_COUNT; f++) printf("%s", f ? ", " : ""), js(tr_cpu_feature_name((tr_cpu_feature)f)), printf(": %s", jb(c->features[f]));
    printf("}, \"memory_total_mib\": "), jn_or_null(c->mem_total_mib);
    printf(", \"memory_available_mib\": "), jn_or_null(c->mem_available_mib);
    printf("},\n  \"opencl\": {\"loader\": "), js_or_null(cl->loaded ? cl->library : NULL);
    printf(", \"note\": "), js(cl->note);
    printf(", \"backend\": %s, \"used_by_this_build\": %s, \"tinyrec_device\": ", jb(TINYREC_OPENCL), jb(TINYREC_OPENCL)), js_or_null(R->env_dev);
    printf(", \"tinyrec_device_error\": "), js_or_null(R->env_error);
    printf(", \"auto_selector\": "), js(R->auto_sel);
    printf(", \"opencl_selector\": ");
    if (cl->opencl_pick >= 0) printf("\"opencl:%d\"", cl->opencl_pick);
    else printf("null");
    printf(", \"devices\": [");
    for (i = 0; i < cl->num_devices; i++) {
        const tr_opencl_device *d = &cl->devices[i];
        printf("%s{\"selector\": \"opencl:%d\", \"platform\": ", i ? ", " : "", d->index), js(cl->platforms[d->platform].name);
        printf(", \"name\": "), js(d->name);
        printf(", \"gpu\": %s, \"global_mem_bytes\": %zu, \"auto\": %s, \"opencl\": %s}", jb(d->is_gpu), d->global_mem, jb(i == R->auto_cl), jb(i == cl->opencl_pick));
    }
    printf("], \"platforms\": [");
    for (p = 0; p < cl->num_platforms; p++) {
        const tr_opencl_platform *P = &cl->platforms[p];
        int first = 1;
        printf("%s{\"name\": ", p ? ",\n    " : "\n    "), js(P->name);
        printf(", \"vendor\": "), js(P->vendor);
        printf(", \"version\": "), js(P->version);
        printf(", \"extensions\": "), js(P->extensions);
        printf(", \"device_error\": %d, \"devices\": [", P->device_error);
        for (i = 0; i < cl->num_devices; i++) {
            const tr_opencl_device *d = &cl->devices[i];
            if (d->platform != p) continue;
            printf("%s{\"name\": ", first ? "" : ", "), js(d->name);
            first = 0;
            printf(", \"vendor\": "), js(d->vendor);
            printf(", \"type\": "), js(d->type);
            printf(", \"version\": "), js(d->version);
            printf(", \"driver\": "), js(d->driver);
            printf(", \"compute_units\": %u, \"clock_mhz\": %u, \"global_mem_bytes\": %zu, \"local_mem_bytes\": %zu, \"max_alloc_bytes\": %zu, \"host_unified\": %s", d->compute_units,
                   d->clock_mhz, d->global_mem, d->local_mem, d->max_alloc, jb(d->host_unified));
            printf(", \"extensions\": "), js(d->extensions);
            printf(", \"selector\": \"opencl:%d\", \"auto\": %s, \"used\": true}", d->index, jb(i == R->auto_cl));
        }
        printf("]}");
    }
    printf("]},\n  \"selftest\": {\"batch\": %d, \"train_steps\": %d, \"tolerance\": {\"logits\": %g, \"loss\": %g, \"params\": %g, \"opencl\": %g}, \"kernels\": [",
           TR_SELFTEST_BATCH, TR_SELFTEST_STEPS, TR_SELFTEST_TOL_LOGITS, TR_SELFTEST_TOL_LOSS, TR_SELFTEST_TOL_PARAMS, TR_SELFTEST_TOL_OPENCL);
    for (i = 0; i < TR_KERNEL_SETS; i++) {
        const tr_selftest_result *r = &R->kern[i];
        int ok = c->kernel_set_ok[i];
        printf("%s{\"name\": ", i ? ",\n    " : "\n    "), js(c->kernel_sets[i]);
        printf(", \"supported\": %s, \"status\": \"%s\", \"max_rel_diff\": ", jb(ok), !ok ? "SKIP" : r->pass ? "PASS" : "FAIL"), jn(r->max_diff);
        printf(", \"seconds\": %.3f", r->seconds);
        json_variants(r, ok);
        printf("}");
    }
    printf("],\n    \"opencl\": {\"selector\": \"opencl\", \"status\": \"%s\", \"device\": ", R->opencl_status), js_or_null(R->opencl_device);
    printf(", \"reference\": \"cpu\", \"max_rel_diff\": "), jn(R->opencl.max_diff);
    printf(", \"seconds\": %.3f", R->opencl.seconds);
    json_variants(&R->opencl, R->opencl.pass);
    printf("}, \"pass\": %s},\n  \"batch\": {\"preset\": ", jb(R->all_pass)), js(R->preset);
    if (!R->batch_error[0]) {
        const tr_batch_advice *b = &R->cpu_batch;
        printf(", \"params\": %zu, \"gflop_train_per_sample\": %.4g, \"gflop_infer_step_per_sample\": %.4g", R->params, R->gflop_train, R->gflop_infer);
        printf(", \"available_mib\": %.0f, \"usable_mib\": %.0f, \"devices\": [{\"device\": \"cpu\", \"train_fit\": %d, \"train\": %d, \"train_mib\": %.1f, \"infer_fit\": %d, "
               "\"infer\": %d, \"infer_mib\": %.1f}",
               b->memory_mib, b->usable_mib, b->train_fit, b->train, b->train_mib, b->infer_fit, b->infer, b->infer_mib);
        for (i = 0; i < cl->num_devices; i++) {
            b = &R->cl_batch[i];
            printf(", {\"device\": \"opencl:%d\", \"name\": ", cl->devices[i].index), js(cl->devices[i].name);
            printf(", \"usable_mib\": %.0f, \"train_fit\": %d, \"train\": %d, \"infer_fit\": %d, \"infer\": %d}", b->usable_mib, b->train_fit, b->train, b->infer_fit,
                   b->infer);
        }
        printf("]");
    } else printf(", \"error\": "), js(R->batch_error);
    printf("},\n  \"auto\": {\"device\": "), js(R->auto_sel);
    printf(", \"name\": "), js(R->auto_cl >= 0 ? cl->devices[R->auto_cl].name : "cpu");
    printf(", \"kernels\": "), js(c->kernels);
    printf(", \"threads\": %d, \"reason\": ", c->threads), js(R->why);
    printf("}\n}\n");
}

/* ---- text ------------------------------------------------------------------------------------ */
static void print_text(const report *R) {
    const tr_cpu_info *c = &R->cpu;
    const tr_opencl_list *cl = &R->cl;
    const tr_selftest_result *o = &R->opencl;
    int f, i, p;
    printf("tinyrec %s device report\n\nCPU\n", tr_version_string());
    printf("  model            %s (%s)\n", c->model, c->arch);
    printf("  logical CPUs     %d\n", c->logical_cpus);
    printf("  features        ");
    for (f = 0; f < TR_CPU_FEATURE_COUNT; f++) printf(" %s%s", c->features[f] ? "+" : "-", tr_cpu_feature_name((tr_cpu_feature)f));
    printf("\n                   (+ found by cpuid and enabled by the OS, - absent)\n");
    if (c->mem_available_mib >= 0)
        printf("  memory           %.1f GiB total, %.1f GiB available\n", c->mem_total_mib / 1024, c->mem_available_mib / 1024);
    printf("  kernel set       %s (the library's pick; TINYREC_SIMD=scalar|avx2|avx512 forces one)\n", c->kernels);
    printf("  threads          %d (--threads or TINYREC_NUM_THREADS to change)\n", c->threads);

    printf("\nOpenCL\n");
    if (TINYREC_OPENCL)
        printf("  this build has the OpenCL backend: the selector opencl:N below (or opencl:<name>, or \"opencl\" for the\n"
               "  first GPU, else the first device) picks a device, with device= / --device or TINYREC_DEVICE\n");
    if (R->env_dev) printf("  TINYREC_DEVICE=%s %s%s\n", R->env_dev, R->env_error[0] ? "is not valid: " : "(the programs use it instead of auto)", R->env_error);
    if (!cl->num_platforms) printf("  %s%s%s\n", cl->note, cl->loaded ? " - loader: " : "", cl->loaded ? cl->library : "");
    for (p = 0; p < cl->num_platforms; p++) {
        const tr_opencl_platform *P = &cl->platforms[p];
        int n = 0;
        printf("  platform %d: %s (%s), %s\n", p, P->name, P->vendor, P->version);
        if (P->extensions[0]) print_wrapped("    extensions:  ", P->extensions, 100);
        if (P->device_error) printf("    clGetDeviceIDs failed with error %d\n", P->device_error);
        for (i = 0; i < cl->num_devices; i++) {
            const tr_opencl_device *d = &cl->devices[i];
            if (d->platform != p) continue;
            printf("    device %d: %s [%s] - opencl:%d%s\n", n++, d->name, d->type, d->index,
                   i == R->auto_cl                       ? " (auto and \"opencl\" pick it)"
                   : i == cl->opencl_pick && d->is_gpu ? " (\"opencl\" picks it; auto would, but it cannot be opened)"
                   : i == cl->opencl_pick              ? " (\"opencl\" picks it; auto does not: not a GPU)"
                                                         : "");
            printf("      vendor %s, %s, driver %s\n", d->vendor, d->version, d->driver);
            printf("      %u compute units at %u MHz, global memory %.1f MiB (max allocation %.1f MiB), local memory %.1f KiB%s\n", d->compute_units, d->clock_mhz,
                   (double)d->global_mem / 1048576.0, (double)d->max_alloc / 1048576.0, (double)d->local_mem / 1024.0,
                   d->host_unified ? ", host-unified (zero-copy transfers)" : "");
            if (d->extensions[0]) print_wrapped("      extensions: ", d->extensions, 100);
        }
    }

    printf("\nSelf-test: a tiny TRM (mlp_t and attention), a forward pass and %d training steps at batch %d,\n", TR_SELFTEST_STEPS, TR_SELFTEST_BATCH);
    printf("each kernel set against the scalar path on its own context with the same seed\n");
    printf("  tolerance: logits |x-ref|/(|ref|+rms(ref)) <= %g, losses |x-ref|/|ref| <= %g, parameters after training\n", TR_SELFTEST_TOL_LOGITS,
           TR_SELFTEST_TOL_LOSS);
    printf("  ||x-ref||/||ref|| per tensor <= %g; max relative difference = the worst of the three\n", TR_SELFTEST_TOL_PARAMS);
    printf("  the OpenCL device that \"opencl\" selects: the same test against the CPU, all three <= %g\n", TR_SELFTEST_TOL_OPENCL);
    for (i = 0; i < TR_KERNEL_SETS; i++) {
        const tr_selftest_result *r = &R->kern[i];
        const char *name = c->kernel_sets[i], *st = r->pass ? "PASS" : "FAIL", *sep = r->error[0] ? ": " : "";
        if (!c->kernel_set_ok[i]) printf("  %-7s SKIP  (not supported by this CPU)\n", name);
        else if (i == 0) printf("  %-7s %s  reference path (%.2fs)%s%s\n", name, st, r->seconds, sep, r->error);
        else
            printf("  %-7s %s  max relative difference %.2e (logits %.1e/%.1e, loss %.1e/%.1e, params %.1e/%.1e for mlp_t/attention) (%.2fs)%s%s\n", name, st,
                   r->max_diff, r->variant[0].logits, r->variant[1].logits, r->variant[0].loss, r->variant[1].loss, r->variant[0].params, r->variant[1].params,
                   r->seconds, sep, r->error);
    }
    if (!strcmp(R->opencl_status, "SKIP")) printf("  %-7s SKIP  (%s)\n", "opencl", o->error);
    else if (o->error[0]) printf("  %-7s FAIL  %s: %s (%.2fs)\n", "opencl", R->opencl_device, o->error, o->seconds);
    else
        printf("  %-7s %s  %s: max relative difference %.2e against the cpu (logits %.1e/%.1e, loss %.1e/%.1e, params %.1e/%.1e for mlp_t/attention) (%.2fs)\n",
               "opencl", R->opencl_status, R->opencl_device, o->max_diff, o->variant[0].logits, o->variant[1].logits, o->variant[0].loss, o->variant[1].loss,
               o->variant[0].params, o->variant[1].params, o->seconds);

    printf("\nBatch size for preset %s", R->preset);
    if (R->batch_error[0]) printf(": %s\n", R->batch_error);
    else {
        const tr_batch_advice *b = &R->cpu_batch;
        printf(" (%zu parameters, %.3g GFLOP per sample per training step, %.3g per inference step)\n", R->params, R->gflop_train, R->gflop_infer);
        printf("  memory: %.0f MiB available, %.0f MiB usable (20%% or at least 512 MiB kept free)\n", b->memory_mib, b->usable_mib);
        printf("  %-28s train %5d (fits up to %d, %.0f MiB; +%.1f MiB per row)   infer %5d (fits up to %d, %.0f MiB)\n", "cpu", b->train, b->train_fit, b->train_mib,
               b->train_mib_per_row, b->infer, b->infer_fit, b->infer_mib);
        for (i = 0; i < cl->num_devices; i++) {
            char label[48];
            b = &R->cl_batch[i];
            snprintf(label, sizeof label, "opencl:%d %.17s", cl->devices[i].index, cl->devices[i].name); /* fits the column */
            printf("  %-28s train %5d (fits up to %d)   infer %5d (fits up to %d), of %.0f MiB usable device memory\n", label, b->train, b->train_fit, b->infer,
                   b->infer_fit, b->usable_mib);
        }
        printf("  train: the reference global batch (%d) when it fits, else the largest multiple of 8; infer: a power of two up to 1024\n",
               TR_REFERENCE_GLOBAL_BATCH);
    }
    if (R->auto_cl >= 0) printf("\nauto picks: %s, %s\n", R->auto_sel, cl->devices[R->auto_cl].name);
    else printf("\nauto picks: cpu, %s kernels, %d threads\n", c->kernels, c->threads);
    print_wrapped("  why: ", R->why, 100);
    printf("\n%s\n", R->all_pass ? "all self-tests PASS" : "a self-test FAILED");
}

int main(int argc, char **argv) {
    static report R;
    tr_ctx_config cc = tr_ctx_config_default();
    tr_ctx *ctx = NULL;
    int threads = 0, json = 0, i;
    R.preset = "trm-sudoku-mlp";
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
                R.preset = argv[++i];
                if (tr_model_config_preset(&tmp, R.preset) != TR_OK) {
                    const char *const *n = tr_model_config_preset_names();
                    fprintf(stderr, "tinyrec-devices: unknown preset '%s' (valid:", R.preset);
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
    R.env_dev = getenv("TINYREC_DEVICE");
    if (R.env_dev && !R.env_dev[0]) R.env_dev = NULL;
    cc.num_threads = threads;
    cc.device = "cpu"; /* TINYREC_DEVICE is checked in gather, with a message when it is bad */
    if (tr_ctx_create(&cc, &ctx) != TR_OK) {
        fprintf(stderr, "tinyrec-devices: cannot create a context\n");
        return 1;
    }
    gather(ctx, &R);
    if (json) print_json(&R);
    else print_text(&R);
    tr_opencl_list_free(ctx, &R.cl);
    free(R.cl_batch);
    tr_ctx_destroy(ctx);
    return R.all_pass ? 0 : 1;
}
