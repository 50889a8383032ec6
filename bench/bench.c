/* tinyrec-bench: throughput of the TRM training step, inference steps and SGEMM, on the CPU
   or on an OpenCL device (--device opencl; the build needs TINYREC_OPENCL, as `make` does).

   build/tinyrec-bench [--preset trm-sudoku-mlp] [--batch 64] [--reps 3] [--threads N]
                       [--peak-gflops 433] [--json] [--skip-train] [--skip-infer] [--simd scalar|avx2|avx512]
                       [--device cpu|opencl|opencl:N|opencl:<name>] [--verbose]

   build/tinyrec-bench --svg chart.svg compare.json   a side-by-side bar chart of a bench/torch_compare.py run
                                                       (its --json-out file, or its output with the "JSON" line)

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

/* --verbose: the library's log (device choice, fallbacks, TINYREC_CL_PROFILE's kernel times), and each training
   step's loss (the same batch each step, the carry reset: two builds that compute the same print the same losses). */
static void log_stderr(void *user, tr_log_level level, const char *msg) {
    (void)user;
    fprintf(stderr, "[%s] %s\n", level >= TR_LOG_WARN ? "warn" : "info", msg);
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: tinyrec-bench [--preset NAME] [--batch B] [--reps N] [--threads N] [--device D] [--dtype T]\n"
            "                     [--simd S] [--peak-gflops G] [--json] [--skip-train] [--skip-infer] [--verbose]\n"
            "       tinyrec-bench --svg OUT.svg RUN.json\n"
            "Times a training step, inference supervision steps at batch 1 and B, and the model's two large GEMMs,\n"
            "the median of N runs each (--preset trm-sudoku-mlp, --batch 64, --reps 3 by default), on --device cpu |\n"
            "opencl | opencl:N | opencl:<name> in --dtype float32 | bfloat16 | float16 | auto. The first line names\n"
            "the device, kernels and precision; --json writes the same as one object. FLOPs count matmuls only.\n"
            "--svg draws a bench/torch_compare.py run (its --json-out file) as bars, PyTorch beside tinyrec.\n"
            "example: tinyrec-bench --device opencl --dtype bf16 --batch 768\n");
}

/* XML text */
static void svg_text(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else fputc(*s, f);
    }
}

/* --svg: each case of a torch_compare.py run as two bars, PyTorch's time and ours, the longer one full
   width (the cases' times differ by orders of magnitude), with the times and the ratio beside them. */
static int svg_chart(const char *out, const char *in) {
    enum { W = 980, LEFT = 300, BAR = 420, ROW = 58, TOP = 70 };
    tr_ctx *ctx = NULL;
    tr_json *root = NULL;
    const tr_json *torch, *ours, *meta, *j;
    char *text = NULL, *js;
    size_t len, i;
    int rc = 1, n = 0;
    FILE *f = NULL;
    if (tr_ctx_create(NULL, &ctx) != TR_OK) return 1;
    if (tr_read_file(ctx, in, &text, &len) != TR_OK) goto done;
    js = strstr(text, "\nJSON {"); /* torch_compare.py's output: the summary on its last line */
    js = js ? js + 6 : !strncmp(text, "JSON {", 6) ? text + 5 : text;
    if (tr_json_parse(ctx, js, strlen(js), in, &root) != TR_OK) goto done;
    torch = tr_json_get(root, "torch"), ours = tr_json_get(root, "tinyrec"), meta = tr_json_get(root, "meta");
    if (!torch || torch->type != TR_JSON_OBJECT || !ours || ours->type != TR_JSON_OBJECT) {
        fprintf(stderr, "tinyrec-bench: %s has no \"torch\" and \"tinyrec\" results (a bench/torch_compare.py run)\n", in);
        goto fail;
    }
    for (i = 0; i < torch->count; i++) n += tr_json_get(ours, torch->keys[i]) != NULL;
    if (!(f = fopen(out, "wb"))) {
        fprintf(stderr, "tinyrec-bench: cannot write %s\n", out);
        goto fail;
    }
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\">\n", W, TOP + n * ROW + 50);
    j = meta ? tr_json_get(meta, "title") : NULL;
    if (j && j->type != TR_JSON_STRING) j = NULL;
    /* a long title is squeezed to the width (about 8.5 pixels a character at this size) */
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"#fafafa\"/>\n<text x=\"20\" y=\"28\" font-size=\"15\" font-weight=\"bold\"");
    if (j && strlen(j->string) * 8.5 > W - 40) fprintf(f, " textLength=\"%d\" lengthAdjust=\"spacingAndGlyphs\"", W - 40);
    fputc('>', f);
    svg_text(f, j ? j->string : "PyTorch and tinyrec, the same run");
    fprintf(f, "</text>\n<text x=\"20\" y=\"50\" font-size=\"12\" fill=\"#555\">time per case; the longer bar is full width; ratio = PyTorch time / tinyrec time (higher: tinyrec faster)</text>\n");
    for (i = 0, n = 0; i < torch->count; i++) {
        const tr_json *t = tr_json_get(&torch->items[i], "ms"), *o = tr_json_get(ours, torch->keys[i]);
        double tm, om, mx;
        int y = TOP + n * ROW;
        if (!o || !(o = tr_json_get(o, "ms")) || !t || t->type != TR_JSON_NUMBER || o->type != TR_JSON_NUMBER) continue;
        tm = t->number, om = o->number, mx = tm > om ? tm : om;
        if (!(mx > 0)) continue;
        fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"13\" text-anchor=\"end\">", LEFT - 10, y + 26);
        svg_text(f, torch->keys[i]);
        fprintf(f, "</text>\n<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"20\" fill=\"#ee8a3c\"/><text x=\"%.1f\" y=\"%d\" font-size=\"12\">PyTorch %.4g ms</text>\n",
                LEFT, y + 4, BAR * tm / mx, LEFT + BAR * tm / mx + 6, y + 19, tm);
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"20\" fill=\"#2f6db5\"/><text x=\"%.1f\" y=\"%d\" font-size=\"12\">tinyrec %.4g ms</text>\n",
                LEFT, y + 26, BAR * om / mx, LEFT + BAR * om / mx + 6, y + 41, om);
        fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"15\" font-weight=\"bold\" fill=\"%s\" text-anchor=\"end\">%.2fx</text>\n", W - 20, y + 30,
                tm >= om ? "#1a7f37" : "#b42318", tm / om);
        n++;
    }
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"10\" fill=\"#ee8a3c\"/><text x=\"%d\" y=\"%d\" font-size=\"12\">PyTorch</text>\n", LEFT, TOP + n * ROW + 12,
            LEFT + 20, TOP + n * ROW + 21);
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"10\" fill=\"#2f6db5\"/><text x=\"%d\" y=\"%d\" font-size=\"12\">tinyrec</text>\n</svg>\n", LEFT + 100,
            TOP + n * ROW + 12, LEFT + 120, TOP + n * ROW + 21);
    rc = fclose(f) != 0;
    f = NULL;
    if (rc) fprintf(stderr, "tinyrec-bench: cannot write %s\n", out);
    else printf("%s: %d cases\n", out, n);
    goto fail;
done:
    fprintf(stderr, "tinyrec-bench: %s\n", tr_ctx_last_error(ctx));
fail:
    if (f) fclose(f);
    tr_json_free(ctx, root);
    tr_free(ctx, text);
    tr_ctx_destroy(ctx);
    return rc;
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
    tr_run_info run;
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
        else if (!strcmp(argv[i], "--svg") && i + 2 < argc) return svg_chart(argv[i + 1], argv[i + 2]);
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return usage(stdout), 0;
        else if (!strcmp(argv[i], "--verbose")) cc.log = log_stderr;
        else if (!strcmp(argv[i], "--skip-train")) skip_train = 1;
        else if (!strcmp(argv[i], "--skip-infer")) skip_infer = 1;
        else {
            fprintf(stderr, "tinyrec-bench: unknown or incomplete option '%s'\n", argv[i]);
            usage(stderr);
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
            tr_metrics mt;
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
                if (tr_trainer_step(tr, &bt, &mt) != TR_OK) {
                    fprintf(stderr, "tinyrec-bench: %s\n", tr_ctx_last_error(ctx));
                    return 1;
                }
                if (r) t[r - 1] = tr_time_seconds() - t0; /* the first is a warm-up */
                if (cc.log) fprintf(stderr, "train step %d: loss %.9g (lm %.9g)\n", r, mt.loss, mt.lm_loss);
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
            for (r = 0; r <= reps + 2 && r < 64; r++) {
                double t0 = tr_time_seconds();
                if (tr__op_sgemm(ctx, M, N, K, tr__mat_of(dA, K, 0, 0), tr__mat_of(dB, K, 0, 1),
                                 tr__out_in(tr__out_of(dC, N, 0, 0), fdt)) != TR_OK || tr__dfinish(ctx) != TR_OK) { /* (in fdt, as the model's: a device may multiply natively) */
                    fprintf(stderr, "tinyrec-bench: %s\n", tr_ctx_last_error(ctx));
                    return 1;
                }
                if (r) t[r - 1] = tr_time_seconds() - t0;
            }
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
           backward: 16-bit with a 16-bit carry), and a device's OpenCL scratch: the workspace's plan, m->wsp */
        double tape = m->nets ? (double)m->tape_nets * (double)tr__tape_net_floats(m, m->tape_B, m->tape_half) : 0;
        double ws = (double)m->wsp.total;
        double carry = 8.0 * (double)tr__vals((size_t)m->S * m->D, m->wsp.carry16);
        mem_mb = skip_train ? 0 : ((tape + ws + scratch) / B + carry) * sizeof(float) / 1048576.0;
        ws_mb = skip_train ? 0 : ws * sizeof(float) / 1048576.0;
    }
    tr_model_describe(m, &run);
    if (json) {
        printf("{\"preset\": \"%s\", \"device\": \"%s\", \"threads\": %d, \"simd\": \"%s\", \"batch\": %d, \"dtype\": \"%s\", \"mem_per_sample_mb\": %.3f, ",
               preset, tr_ctx_device_name(ctx), tr_ctx_num_threads(ctx), tr_ctx_simd_name(ctx), B, tr_forward_dtype_name(tr_model_get_config(m)->forward_dtype), mem_mb);
        printf("\"run\": {");
        tr_run_info_fput_json(stdout, &run); /* what it ran on and in */
        printf("}, \"results\": [");
        for (i = 0; i < nrows; i++) {
            printf("%s{\"name\": \"%s\", \"ms\": %.3f, \"per_s\": %.4f, \"gflops\": %.2f", i ? ", " : "", rows[i].name, rows[i].ms, rows[i].per_s, rows[i].gflops);
            if (peak > 0) printf(", \"frac_peak\": %.4f", rows[i].gflops / peak);
            printf("}");
        }
        printf("]}\n");
    } else {
        printf("tinyrec-bench %s: preset %s on %s; training activations %.2f MB per sample (of which a %.0f MB block workspace, %.0f MB device scratch)\n",
               tr_version_string(), preset, run.text, mem_mb, ws_mb,
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
