/* tinyrec-mlp16: the SwiGLU MLPs' products of a 16-bit model alone, as trm-sudoku-mlp's training step runs them on a
   device, at its half-batch shapes (the step runs B=768 as two slices of 384):
   - the token mix (tr__cl_token_mlp): per batch gate_up = W_tgu in_b (2 x 512 rows, depth 97, 512 columns) with
     the SwiGLU in its epilogue, then its down product;
   - the channel SwiGLU (tr__cl_swiglu_mlp): 384 x 97 rows, depth 512, 2 x 1536 columns, then its down product;
   each without the tape (keep 0: only the activation, packed for the down product) and with it (keep 2: gate and up
   as 16-bit values too). It prints each kernel's time per call (TINYREC_CL_PROFILE's: the kernel alone) and a hash
   of the outputs (and of gate_up with the tape): two builds that print the same hashes computed the same bits.
   usage: tinyrec-mlp16 [device (opencl:NVIDIA)] [batches (384)] [repetitions (10)] [bf16 (default) | fp16] */
#define TINYREC_IMPLEMENTATION
#include "tinyrec.h"
#include <stdio.h>
#if !TINYREC_OPENCL
#error "tinyrec-mlp16 times the OpenCL products: build it with -DTINYREC_OPENCL=1"
#endif

/* n floats of a fixed pattern (seed) of the given scale, values of the precision, on the device */
static void *operand(tr_ctx *ctx, size_t n, float scale, size_t seed, int fdt) {
    float *h = (float *)malloc(n * 4);
    void *d = h ? tr__dalloc(ctx, n * 4 + 1024, 0) : NULL;
    size_t i;
    for (i = 0; h && i < n; i++) h[i] = tr__round1(fdt, scale * ((float)((i * seed) % 1009) / 1009.0f - 0.5f));
    if (d && tr__dput(ctx, d, h, n * 4) != TR_OK) d = NULL;
    free(h);
    return d;
}
/* FNV-1a of the n floats at d */
static unsigned long long hash_of(tr_ctx *ctx, const void *d, size_t n) {
    unsigned char *h = (unsigned char *)malloc(n * 4);
    unsigned long long x = 1469598103934665603ull;
    size_t i;
    if (!h || tr__dget(ctx, h, d, n * 4) != TR_OK) {
        free(h);
        return 0;
    }
    for (i = 0; i < n * 4; i++) x = (x ^ h[i]) * 1099511628211ull;
    free(h);
    return x;
}

int main(int argc, char **argv) {
    const char *dev = argc > 1 ? argv[1] : "opencl:NVIDIA";
    const int nb = argc > 2 ? atoi(argv[2]) : 384, reps = argc > 3 ? atoi(argv[3]) : 10;
    const int fdt = argc > 4 && !strcmp(argv[4], "fp16") ? TR_FWD_FLOAT16 : TR_FWD_BFLOAT16;
    const size_t It = 512, S = 97, D = 512, half = 1536, rows = (size_t)(nb > 0 ? nb : 1) * S;
    tr_ctx_config cc = tr_ctx_config_default();
    tr_ctx *ctx;
    int which;
    if (nb < 1 || reps < 1 || (argc > 4 && strcmp(argv[4], "bf16") && strcmp(argv[4], "fp16"))) {
        fprintf(stderr, "usage: tinyrec-mlp16 [device] [batches >= 1] [repetitions >= 1] [bf16 | fp16]\n");
        return 2;
    }
    cc.device = dev, cc.seed = 1, cc.cl_profile = "1";
    if (tr_ctx_create(&cc, &ctx) != TR_OK || !tr_ctx_use_device(ctx) || !ctx->cl) {
        fprintf(stderr, "tinyrec-mlp16: no OpenCL device %s\n", dev);
        return 2;
    }
    for (which = 0; which < 4; which++) { /* the token mix, then the channel SwiGLU; each without and with the tape */
        const int token = which < 2, keep = which & 1 ? 2 : 0;
        const size_t n_in = token ? (size_t)nb * S * D : rows * D, n_gu = token ? (size_t)nb * 2 * It * D : rows * 2 * half;
        tr__mlp_desc d;
        void *in, *w_gu, *w_down, *gu, *out;
        double wall = 0;
        int r, i;
        memset(&d, 0, sizeof d);
        d.fdt = fdt, d.keep_gu = keep;
        if (token) d.nb = nb, d.half = It, d.K = S, d.D = D;
        else d.nb = 1, d.rows = rows, d.half = half, d.K = D, d.D = D;
        in = operand(ctx, n_in, 2.0f, 37, fdt);
        w_gu = operand(ctx, 2 * d.half * d.K, token ? 0.2f : 0.05f, 53, fdt);
        w_down = operand(ctx, d.half * (token ? S : D), token ? 0.1f : 0.05f, 59, fdt);
        gu = operand(ctx, n_gu, 0.0f, 1, fdt), out = operand(ctx, n_in, 0.0f, 1, fdt);
        if (!in || !w_gu || !w_down || !gu || !out) {
            fprintf(stderr, "tinyrec-mlp16: %s\n", tr_ctx_last_error(ctx));
            return 2;
        }
        d.in = tr__buf_of(in, 0), d.ld_in = D, d.w_gu = (const float *)w_gu, d.w_down = (const float *)w_down;
        d.gu = (float *)gu, d.out = tr__buf_of(out, 0);
        for (r = 0; r <= reps; r++) { /* (the first call builds and warms up: not counted) */
            double t0 = tr_time_seconds();
            tr_status st = token ? tr__cl_token_mlp(ctx->cl, &d, (float *)gu, keep, NULL) : tr__cl_swiglu_mlp(ctx->cl, &d, (float *)gu, keep, NULL);
            if (st != TR_OK || tr__dfinish(ctx) != TR_OK) {
                fprintf(stderr, "tinyrec-mlp16: %s\n", tr_ctx_last_error(ctx));
                return 2;
            }
            if (r) wall += tr_time_seconds() - t0;
            for (i = 0; r == 0 && i < ctx->cl->nkernels; i++) ctx->cl->kernels[i].seconds = 0, ctx->cl->kernels[i].calls = 0;
        }
        printf("%-7s %s: out %016llx", token ? "token" : "channel", keep ? "tape   " : "no tape", hash_of(ctx, out, n_in));
        if (keep) printf(" gate_up %016llx", hash_of(ctx, gu, n_gu / 2)); /* (16-bit values: half as many floats) */
        printf("; us a call: wall %.1f", 1e6 * wall / reps);
        for (i = 0; i < ctx->cl->nkernels; i++)
            if (ctx->cl->kernels[i].calls) {
                printf(", %s %.1f", ctx->cl->kernels[i].name, 1e6 * ctx->cl->kernels[i].seconds / (double)ctx->cl->kernels[i].calls);
                ctx->cl->kernels[i].seconds = 0, ctx->cl->kernels[i].calls = 0;
            }
        printf("\n");
        tr__dfree(ctx, in), tr__dfree(ctx, w_gu), tr__dfree(ctx, w_down), tr__dfree(ctx, gu), tr__dfree(ctx, out);
    }
    printf("products on %s\n", ctx->cl->wg_built == 1 ? "wgmma" : ctx->cl->gemm.mma == 1 ? "mma.sync" : ctx->cl->gemm.mma == 2 ? "emulated tensor cores" : "the fp32 kernels");
    tr_ctx_destroy(ctx);
    return 0;
}
