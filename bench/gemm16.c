/* tinyrec-gemm16: the products of a bfloat16 (or float16) model on a 16-bit tape, alone: 16-bit operands and a 16-bit C rounded in
   the product's epilogue (tr__op_sgemm_rnd), as the training step runs them on a device. For (M,K,N) =
   (6208,512,3072) and (6208,1536,512), the forward x W^T and the backward's dX = dY W and dW = dY^T X:
   - first a check of each kind against double sums of the same values: off by at most one spacing of the precision at
     the result (a sum's order may move one rounding) plus the error bound of an fp32 sum of D terms, D u sum |terms|
     (u = 2^-24: it shows in float16 where terms cancel), as a fraction of that, exit status 1 if one is over;
   - then each kernel's time per call (TINYREC_CL_PROFILE's: the kernel alone), and the wall time per call with the
     operands' packing (a weight is packed at every call here; the training step keeps it packed).
   bench/gemm16_torch.py times cuBLAS (PyTorch bf16) at the same products.
   usage: tinyrec-gemm16 [device (opencl:NVIDIA)] [rows divisor (1)] [repetitions (20)] [bf16 (default) | fp16] */
#define TINYREC_IMPLEMENTATION
#include "tinyrec.h"
#include <math.h>
#include <stdio.h>
#if !TINYREC_OPENCL
#error "tinyrec-gemm16 times the OpenCL products: build it with -DTINYREC_OPENCL=1"
#endif

static const char *const kind_name[3] = {"x W^T", "dX = dY W", "dW = dY^T X"};

static int fdt = TR_FWD_BFLOAT16; /* the precision of the operands and of C */

static uint16_t to16(float x) { return fdt == TR_FWD_FLOAT16 ? tr__f32_to_f16(x) : tr__f32_to_bf16(x); }
static float from16(uint16_t h) { return fdt == TR_FWD_FLOAT16 ? tr__f16_to_f32(h) : tr__bf16_to_f32(h); }
/* n values of a fixed pattern (seed), as 16-bit values on the host (h) and on the device (returned) */
static void *operand(tr_ctx *ctx, size_t n, size_t seed, uint16_t *h) {
    void *d = tr__dalloc(ctx, n * 2 + 64, 0);
    size_t i;
    for (i = 0; i < n; i++) h[i] = to16((float)((i * seed) % 101) * 0.01f - 0.5f);
    if (d && tr__dput(ctx, d, h, n * 2) != TR_OK) return NULL;
    return d;
}
/* product kind k of x (M x K), w (N x K), g (M x N) into the 16-bit C */
static tr_status product(tr_ctx *ctx, int k, size_t M, size_t K, size_t N, void *X, void *W, void *G, void *C) {
    const int f = fdt;
    if (k == 0) return tr__op_sgemm_rnd(ctx, f, 1, M, N, K, tr__mat16_of(X, K, 0, 0, f), tr__mat16_of(W, K, 0, 1, f), tr__out16_of(C, N, 0, 0, f));
    if (k == 1) return tr__op_sgemm_rnd(ctx, f, 1, M, K, N, tr__mat16_of(G, N, 0, 0, f), tr__mat16_of(W, K, 0, 0, f), tr__out16_of(C, K, 0, 0, f));
    return tr__op_sgemm_rnd(ctx, f, 1, N, K, M, tr__mat16_of(G, N, 0, 1, f), tr__mat16_of(X, K, 0, 0, f), tr__out16_of(C, K, 0, 0, f));
}
static int dcmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    static const size_t shapes[2][3] = {{6208, 512, 3072}, {6208, 1536, 512}}, checks[2][3] = {{333, 160, 270}, {1100, 512, 384}};
    const char *dev = argc > 1 ? argv[1] : "opencl:NVIDIA";
    int div = argc > 2 ? atoi(argv[2]) : 1, reps = argc > 3 ? atoi(argv[3]) : 20, pass, bad = 0;
    if (div < 1) div = 1;
    if (reps < 1 || reps > 63) reps = 20;
    if (argc > 4 && !strcmp(argv[4], "fp16")) fdt = TR_FWD_FLOAT16;
    else if (argc > 4 && strcmp(argv[4], "bf16")) {
        fprintf(stderr, "tinyrec-gemm16: precision %s: bf16 or fp16\n", argv[4]);
        return 2;
    }
    for (pass = 0; pass < 2; pass++) { /* 0: checks and kernel times (profiled), 1: wall times */
        tr_ctx_config cc = tr_ctx_config_default();
        tr_ctx *ctx;
        int s, k, i, r;
        cc.device = dev, cc.seed = 1, cc.cl_profile = pass ? "0" : "1";
        if (tr_ctx_create(&cc, &ctx) != TR_OK || !tr_ctx_use_device(ctx)) {
            fprintf(stderr, "tinyrec-gemm16: no device %s\n", dev);
            return 2;
        }
        for (s = 0; s < 4; s++) {
            const int check = pass == 0 && s < 2;
            const size_t *sz = s < 2 ? checks[s] : shapes[s - 2];
            size_t M = s < 2 ? sz[0] : sz[0] / (size_t)div, K = sz[1], N = sz[2], most = M * (N > K ? N : K) > N * K ? M * (N > K ? N : K) : N * K;
            uint16_t *hx = (uint16_t *)malloc(M * K * 2), *hw = (uint16_t *)malloc(N * K * 2), *hg = (uint16_t *)malloc(M * N * 2), *hc = (uint16_t *)malloc(most * 2);
            void *X = operand(ctx, M * K, 37, hx), *W = operand(ctx, N * K, 53, hw), *G = operand(ctx, M * N, 41, hg), *C = tr__dalloc(ctx, most * 2 + 64, 0);
            if (!X || !W || !G || !C || !hc) {
                fprintf(stderr, "tinyrec-gemm16: %s\n", tr_ctx_last_error(ctx));
                return 2;
            }
            for (k = 0; k < 3 && (check || s >= 2); k++) {
                const size_t R = k == 2 ? N : M, Q = k == 0 ? N : K, D = k == 0 ? K : k == 1 ? N : M;
                const double flops = 2.0 * (double)M * (double)N * (double)K;
                double t[64];
                if (check) {
                    double worst = 0;
                    size_t a, b, d;
                    if (product(ctx, k, M, K, N, X, W, G, C) != TR_OK || tr__dfinish(ctx) != TR_OK || tr__dget(ctx, hc, C, R * Q * 2) != TR_OK) {
                        fprintf(stderr, "tinyrec-gemm16: %s\n", tr_ctx_last_error(ctx));
                        return 2;
                    }
                    for (a = 0; a < R; a++)
                        for (b = 0; b < Q; b++) {
                            double sum = 0, abs_sum = 0, bound;
                            float ref;
                            for (d = 0; d < D; d++) {
                                const double term = k == 0   ? (double)from16(hx[a * K + d]) * from16(hw[b * K + d])
                                                    : k == 1 ? (double)from16(hg[a * N + d]) * from16(hw[d * K + b])
                                                             : (double)from16(hg[d * N + a]) * from16(hx[d * K + b]);
                                sum += term, abs_sum += fabs(term);
                            }
                            ref = from16(to16((float)sum));
                            bound = ldexp(1.0, (int)floor(log2(fabs(ref) + 1e-30)) - (fdt == TR_FWD_FLOAT16 ? 10 : 7)) + ldexp((double)D * abs_sum, -24);
                            if (fabs(from16(hc[a * Q + b]) - ref) / bound > worst) worst = fabs(from16(hc[a * Q + b]) - ref) / bound;
                        }
                    printf("check %s (%zu,%zu,%zu) %-12s worst %.2f of the bound%s\n", fdt == TR_FWD_FLOAT16 ? "fp16" : "bf16", M, K, N, kind_name[k], worst, worst > 1.0 ? "  FAILED" : "");
                    bad |= worst > 1.0;
                    continue;
                }
                for (i = 0; ctx->cl && i < ctx->cl->nkernels; i++) ctx->cl->kernels[i].seconds = 0, ctx->cl->kernels[i].calls = 0;
                for (r = 0; r <= reps; r++) {
                    double t0 = tr_time_seconds();
                    if (product(ctx, k, M, K, N, X, W, G, C) != TR_OK || tr__dfinish(ctx) != TR_OK) {
                        fprintf(stderr, "tinyrec-gemm16: %s\n", tr_ctx_last_error(ctx));
                        return 2;
                    }
                    if (r) t[r - 1] = tr_time_seconds() - t0;
                    for (i = 0; r == 0 && ctx->cl && i < ctx->cl->nkernels; i++) ctx->cl->kernels[i].seconds = 0, ctx->cl->kernels[i].calls = 0; /* (not the first) */
                }
                qsort(t, (size_t)reps, sizeof(double), dcmp);
                if (pass == 1) printf("(%zu,%zu,%zu) %-12s wall %8.1f us %7.1f TFLOP/s\n", M, K, N, kind_name[k], 1e6 * t[reps / 2], flops / t[reps / 2] / 1e12);
                else {
                    printf("(%zu,%zu,%zu) %-12s kernels:", M, K, N, kind_name[k]);
                    for (i = 0; ctx->cl && i < ctx->cl->nkernels; i++)
                        if (ctx->cl->kernels[i].calls) {
                            double us = 1e6 * ctx->cl->kernels[i].seconds / (double)ctx->cl->kernels[i].calls;
                            printf(" %s %.1f us", ctx->cl->kernels[i].name, us);
                            if (strstr(ctx->cl->kernels[i].name, "hmma")) printf(" (%.1f TFLOP/s)", flops / us / 1e6);
                        }
                    printf("\n");
                }
            }
            if (pass == 0 && s == 1) printf("products on %s\n", !ctx->cl ? "the CPU" : ctx->cl->wg_built == 1 ? "wgmma" : ctx->cl->gemm.mma == 1 ? "mma.sync" : ctx->cl->gemm.mma == 2 ? "emulated tensor cores" : "the fp32 kernels");
            tr__dfree(ctx, X), tr__dfree(ctx, W), tr__dfree(ctx, G), tr__dfree(ctx, C);
            free(hx), free(hw), free(hg), free(hc);
        }
        tr_ctx_destroy(ctx);
    }
    return bad;
}
