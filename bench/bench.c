/* tinyrec-bench: throughput of the TRM training step, inference steps and SGEMM, on the CPU
   or on an OpenCL device (--device opencl; the build needs TINYREC_OPENCL, as `make` does).

   build/tinyrec-bench [--preset trm-sudoku-mlp] [--batch 64] [--reps 3] [--threads N]
                       [--peak-gflops 433] [--json] [--skip-train] [--skip-infer] [--simd scalar|avx2|avx512]
                       [--device cpu|opencl|opencl:N|opencl:<name>] [--verbose]

   FLOPs count matmuls only (2 per multiply-add), with the formulas of
   ../shared/docs/perf-baseline.md: a training step = 70 blocks + 3 heads per sample for
   T=3, n=6 (42 forward blocks, and twice the 14 blocks of the last H cycle for backward). */
#define TINYREC_IMPLEMENTATION
#include "tinyrec.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    double ms, per_s, gflops;
} row;

/* --verbose: the library's log (device choice, fallbacks, TINYREC_CL_PROFILE's kernel times). */
static void log_stderr(void *user, tr_log_level level, const char *msg) {
    (void)user;
    fprintf(stderr, "[%s] %s\n", level >= TR_LOG_WARN ? "warn" : "info", msg);
}

static double median(double *v, int n) {
    int i, j;
    for (i = 1; i < n; i++)
        for (j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double t = v[j];
            v[j] = v[j - 1], v[j - 1] = t;
        }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void fill_batch(int B, const tr_model_config *c, int32_t *in, int32_t *lab, int32_t *pid, uint64_t seed) {
    int i;
    for (i = 0; i < B * c->seq_len; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        in[i] = 1 + (int)((seed >> 33) % (uint64_t)(c->vocab_size - 1));
        lab[i] = 1 + (int)((seed >> 45) % (uint64_t)(c->vocab_size - 1));
    }
    for (i = 0; i < B; i++) pid[i] = 0;
}

int main(int argc, char **argv) {
    const char *preset = "trm-sudoku-mlp", *simd = NULL, *device = "cpu";
    int B = 64, reps = 3, threads = 0, json = 0, skip_train = 0, skip_infer = 0, i, r, nrows = 0, dtype = TR_FWD_FLOAT32;
    double peak = 0, mem_mb = 0, ws_mb = 0, scratch = 0; /* scratch: a device's OpenCL scratch after the training steps, floats */
    row rows[16];
    tr_ctx_config cc = tr_ctx_config_default();
    tr_ctx *ctx;
    tr_model_config cfg;
    tr_model *m;
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--preset") && i + 1 < argc) preset = argv[++i];
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) B = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--peak-gflops") && i + 1 < argc) peak = atof(argv[++i]);
        else if (!strcmp(argv[i], "--simd") && i + 1 < argc) simd = argv[++i];
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
        else if (!strcmp(argv[i], "--dtype") && i + 1 < argc) {
            if ((dtype = tr_forward_dtype_parse(argv[++i])) < 0) {
                fprintf(stderr, "tinyrec-bench: --dtype takes float32, bfloat16, float16 or auto (fp32, bf16, fp16), not '%s'\n", argv[i]);
                return 2;
            }
        }
        else if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--verbose")) cc.log = log_stderr;
        else if (!strcmp(argv[i], "--skip-train")) skip_train = 1;
        else if (!strcmp(argv[i], "--skip-infer")) skip_infer = 1;
        else {
            fprintf(stderr, "usage: %s [--preset NAME] [--batch B] [--reps N] [--threads N] [--peak-gflops G] [--simd S] [--device D] [--dtype T] [--json] [--skip-train] [--skip-infer] [--verbose]\n", argv[0]);
            return 2;
        }
    }
    if (B <= 0 || reps <= 0) {
        fprintf(stderr, "tinyrec-bench: --batch and --reps must be positive\n");
        return 2;
    }
    cc.num_threads = threads;
    cc.seed = 1;
    cc.simd = simd;
    cc.device = device;
    if (tr_ctx_create(&cc, &ctx) != TR_OK) {
        fprintf(stderr, "tinyrec-bench: cannot create a context (bad --threads, --simd or --device?)\n");
        return 1;
    }
    if (strcmp(device, "cpu") != 0 && !tr_ctx_use_device(ctx)) {
        fprintf(stderr, "tinyrec-bench: device '%s' is not available: %s\n", device, tr_ctx_device_name(ctx));
        return 1;
    }
    if (tr_model_config_preset(&cfg, preset) != TR_OK) {
        fprintf(stderr, "tinyrec-bench: unknown preset '%s'\n", preset);
        return 2;
    }
    cfg.forward_dtype = (tr_forward_dtype)dtype;
    if (tr_model_create(ctx, &cfg, &m) != TR_OK) {
        fprintf(stderr, "tinyrec-bench: %s\n", tr_ctx_last_error(ctx));
        return 1;
    }
    {
        double F_train, F_fwd;
        int32_t *in = (int32_t *)malloc(sizeof(int32_t) * (size_t)B * cfg.seq_len * 2 + sizeof(int32_t) * B);
        int32_t *lab = in + (size_t)B * cfg.seq_len, *pid = lab + (size_t)B * cfg.seq_len;
        double t[64];
        tr_batch bt;
        tr_model_flops(m, &F_train, &F_fwd);
        fill_batch(B, &cfg, in, lab, pid, 7);
        bt.inputs = in, bt.labels = lab, bt.puzzle_identifiers = pid, bt.batch_size = B;
        if (!skip_train) {
            tr_train_config tc = tr_train_config_default();
            tr_preset pr;
            tr_trainer *tr;
            if (tr_preset_find(preset, &pr) == TR_OK) tc = pr.train; /* the preset's recipe: HRM has no EMA */
            tc.global_batch_size = B;
            if (tr_trainer_create(m, &tc, &tr) != TR_OK) {
                fprintf(stderr, "tinyrec-bench: %s\n", tr_ctx_last_error(ctx));
                return 1;
            }
            for (r = 0; r <= reps && r < 64; r++) {
                double t0 = tr_time_seconds();
                /* every row restarts each step, so every step does the full work */
                tr_trainer_reset_carry(tr);
                if (tr_trainer_step(tr, &bt, NULL) != TR_OK) {
                    fprintf(stderr, "tinyrec-bench: %s\n", tr_ctx_last_error(ctx));
                    return 1;
                }
                if (r) t[r - 1] = tr_time_seconds() - t0; /* the first is a warm-up */
            }
            {
                double s = median(t, reps < 64 ? reps : 63);
                static char nm[64];
                snprintf(nm, sizeof nm, "train step B=%d", B);
                rows[nrows].name = nm, rows[nrows].ms = s * 1e3, rows[nrows].per_s = B / s, rows[nrows].gflops = F_train * B / s / 1e9, nrows++;
            }
#if TINYREC_OPENCL
            if (ctx->cl) /* (the packed operands and partial sums the training steps' kernels kept) */
                for (i = 0; i < TR__CL_SLOTS; i++) scratch += (double)ctx->cl->slot_floats[i];
#endif
            tr_trainer_destroy(tr);
        }
        if (!skip_infer) {
            int bs[2] = {1, B}, k;
            static char nm[2][64];
            for (k = 0; k < 2; k++) {
                tr_carry *c;
                tr_batch b1 = bt;
                b1.batch_size = bs[k];
                if (tr_carry_create(m, bs[k], &c) != TR_OK) return 1;
                for (r = 0; r <= reps && r < 64; r++) {
                    double t0 = tr_time_seconds();
                    if (tr_model_eval_step(m, c, &b1, NULL, NULL) != TR_OK) {
                        fprintf(stderr, "tinyrec-bench: %s\n", tr_ctx_last_error(ctx));
                        return 1;
                    }
                    if (r) t[r - 1] = tr_time_seconds() - t0;
                }
                {
                    double s = median(t, reps < 64 ? reps : 63);
                    snprintf(nm[k], sizeof nm[k], "infer sup. step B=%d", bs[k]);
                    rows[nrows].name = nm[k], rows[nrows].ms = s * 1e3, rows[nrows].per_s = bs[k] / s, rows[nrows].gflops = F_fwd * bs[k] / s / 1e9, nrows++;
                }
                tr_carry_destroy(c);
            }
        }
        free(in);
    }
    {
        static const size_t sz[2][3] = {{6208, 512, 3072}, {6208, 1536, 512}};
        static char nm[2][64];
        const int fdt = (int)tr_model_get_config(m)->forward_dtype;
        int k;
        for (k = 0; k < 2; k++) {
            size_t M = sz[k][0], K = sz[k][1], N = sz[k][2];
            float *A = (float *)malloc(M * K * 4), *Bm = (float *)malloc(N * K * 4);
            /* the operands where the model's would be: device memory on a device */
            float *dA = (float *)tr__dalloc(ctx, M * K * 4, 0), *dB = (float *)tr__dalloc(ctx, N * K * 4, 0), *dC = (float *)tr__dalloc(ctx, M * N * 4, 0);
            double t[64];
            size_t q;
            if (!dA || !dB || !dC) {
                fprintf(stderr, "tinyrec-bench: %s\n", tr_ctx_last_error(ctx));
                return 1;
            }
            for (q = 0; q < M * K; q++) A[q] = (float)((q * 37) % 101) * 0.01f - 0.5f;
            for (q = 0; q < N * K; q++) Bm[q] = (float)((q * 53) % 97) * 0.01f - 0.5f;
            tr__round_ref(fdt, A, M * K), tr__round_ref(fdt, Bm, N * K); /* a model's operands are values of its precision */
            tr__dput(ctx, dA, A, M * K * 4), tr__dput(ctx, dB, Bm, N * K * 4);
            ctx->gemm_fdt = fdt; /* as while the model runs: a device may multiply natively (tensor cores) */
            for (r = 0; r <= reps + 2 && r < 64; r++) {
                double t0 = tr_time_seconds();
                if (tr__op_sgemm(ctx, M, N, K, tr__mat_of(dA, K, 0, 0), tr__mat_of(dB, K, 0, 1),
                                 tr__out_of(dC, N, 0, 0)) != TR_OK || tr__dfinish(ctx) != TR_OK) {
                    fprintf(stderr, "tinyrec-bench: %s\n", tr_ctx_last_error(ctx));
                    return 1;
                }
                if (r) t[r - 1] = tr_time_seconds() - t0;
            }
            ctx->gemm_fdt = 0;
            tr__dfree(ctx, dA), tr__dfree(ctx, dB), tr__dfree(ctx, dC);
            {
                double s = median(t, reps + 2 < 64 ? reps + 2 : 63);
                snprintf(nm[k], sizeof nm[k], "gemm %zux%zux%zu (M,K,N)", M, K, N); /* in the model's precision */
                rows[nrows].name = nm[k], rows[nrows].ms = s * 1e3, rows[nrows].per_s = 0, rows[nrows].gflops = 2.0 * M * N * K / s / 1e9, nrows++;
            }
            free(A), free(Bm);
        }
    }
    {
        /* the training step's activation memory per sample: the recorded cycle (16-bit values in bfloat16 /
           float16, unless TINYREC_TAPE16=0), the workspace of one slice of rows (tr__ws_rows) shared by all, and the
           carry's activations with the trainer's gradients of them (z_H, z_L, x, inj; dz, dx and two buffers of the
           backward: 16-bit with a 16-bit carry, tr__carry16), and a device's OpenCL scratch */
        double tape = m->nets ? (double)m->tape_nets * (double)tr__tape_net_floats(m, m->tape_B, m->tape_half) : 0;
        double ws = (double)tr__ws_floats(m, tr__ws_rows(m, B), m->ws_gate_up);
        double carry = 8.0 * (double)tr__vals((size_t)m->S * m->D, tr__carry16(m));
        mem_mb = skip_train ? 0 : ((tape + ws + scratch) / B + carry) * sizeof(float) / 1048576.0;
        ws_mb = skip_train ? 0 : ws * sizeof(float) / 1048576.0;
    }
    if (json) {
        printf("{\"preset\": \"%s\", \"device\": \"%s\", \"threads\": %d, \"simd\": \"%s\", \"batch\": %d, \"dtype\": \"%s\", \"mem_per_sample_mb\": %.3f, \"results\": [",
               preset, tr_ctx_device_name(ctx), tr_ctx_num_threads(ctx), tr_ctx_simd_name(ctx), B, tr_forward_dtype_name(tr_model_get_config(m)->forward_dtype), mem_mb);
        for (i = 0; i < nrows; i++) {
            printf("%s{\"name\": \"%s\", \"ms\": %.3f, \"per_s\": %.4f, \"gflops\": %.2f", i ? ", " : "", rows[i].name, rows[i].ms, rows[i].per_s, rows[i].gflops);
            if (peak > 0) printf(", \"frac_peak\": %.4f", rows[i].gflops / peak);
            printf("}");
        }
        printf("]}\n");
    } else {
        printf("tinyrec-bench %s: preset %s, device %s, %s; training activations %.2f MB per sample (of which a %.0f MB block workspace, %.0f MB device scratch)\n",
               tr_version_string(), preset, tr_ctx_device_name(ctx), tr_forward_dtype_name(tr_model_get_config(m)->forward_dtype), mem_mb, ws_mb,
               scratch * sizeof(float) / 1048576.0);
        printf("%-34s %12s %14s %10s%s\n", "case", "ms", "samples/s", "GFLOP/s", peak > 0 ? "  of peak" : "");
        for (i = 0; i < nrows; i++) {
            printf("%-34s %12.2f ", rows[i].name, rows[i].ms);
            if (rows[i].per_s > 0) printf("%14.3f ", rows[i].per_s);
            else printf("%14s ", "-");
            printf("%10.1f", rows[i].gflops);
            if (peak > 0) printf("  %6.1f%%", 100.0 * rows[i].gflops / peak);
            printf("\n");
        }
    }
    tr_model_destroy(m);
    tr_ctx_destroy(ctx);
    return 0;
}
