/* The forward precision (tr_forward_dtype): the rounding kernels against their scalar twin, the policy
   (auto, the fallback chain under injected faults, each choice logged), the model's rounding points,
   float16's dynamic loss scaling, and checkpoints written in one precision and used in another. The
   parity with the PyTorch twin in bfloat16 / float16 is in test_parity, the OpenCL twins in
   test_opencl_model. */
#define TINYREC_IMPLEMENTATION
#include "test_util.h"

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Values that exercise every branch: ties to even at both widths, the float16 range edges (65504, 65520,
   the smallest normal 2^-14, subnormals down to 2^-24 and the half-way 2^-25), infinities, NaNs, zeros. */
static size_t edge_values(float *x, size_t cap) {
    static const uint32_t specials[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x3f808000u, 0x3f818000u,
                                        0x3f807fffu, 0x3f808001u, 0x477fe000u, 0x477fefffu, 0x477ff000u, 0x477ff001u, 0x38800000u, 0x387fffffu, 0x33800000u,
                                        0x33000000u, 0x33000001u, 0x33c00000u, 0x7f7fffffu, 0x7f7f8000u, 0x00000001u, 0x3f801000u, 0x3f803000u, 0x3f800fffu};
    size_t n = 0, i;
    uint32_t e, s = 12345u;
    for (i = 0; i < sizeof specials / sizeof *specials && n < cap; i++) x[n++] = from_bits(specials[i]), x[n++] = -from_bits(specials[i]);
    /* every exponent, with random mantissas */
    for (e = 0; e < 256 && n + 8 <= cap; e++)
        for (i = 0; i < 8; i++) {
            s = s * 1664525u + 1013904223u;
            x[n++] = from_bits((e << 23) | (s >> 9) | ((s & 1u) << 31));
        }
    return n;
}

static void test_round_scalar_values(void **state) {
    float x[] = {1.00390625f, 1.01171875f, 1.0f + 1.0f / 1024.0f, 65504.0f, 65519.0f, 65520.0f, 1e-8f, 3e-8f, 6.0e-8f, 100000.0f};
    (void)state;
    tr__round_ref(TR_FWD_BFLOAT16, x, 3);
    assert_true(x[0] == 1.0f);         /* 1 + 2^-8: a tie, to the even 1.0 */
    assert_true(x[1] == 1.015625f);    /* 1 + 3 * 2^-8: a tie, to the even 1 + 2^-6 */
    assert_true(x[2] == 1.0f);         /* below half an ulp of bf16 */
    tr__round_ref(TR_FWD_FLOAT16, x + 2, 8);
    assert_true(x[3] == 65504.0f);
    assert_true(x[4] == 65504.0f);     /* below the half-way point 65520 */
    assert_true(isinf(x[5]));          /* 65520 is a tie that rounds past the largest value */
    assert_true(x[6] == 0.0f);         /* below 2^-25: to zero */
    assert_true(x[7] == 5.9604644775390625e-8f); /* nearest subnormal 2^-24 */
    assert_true(x[8] == 5.9604644775390625e-8f);
    assert_true(isinf(x[9]));
}

/* The SIMD twins (every set this CPU runs) give the scalar twin's bits; NaN payloads may differ in float16,
   NaN-ness not. Odd lengths and offsets exercise the tails. */
static void test_round_simd_matches_scalar(void **state) {
    static const char *const sets[] = {"scalar", "avx2", "avx512", "neon"};
    enum { CAP = 4096 };
    float *x = (float *)malloc(CAP * sizeof(float)), *a = (float *)malloc(CAP * sizeof(float)), *b = (float *)malloc(CAP * sizeof(float));
    size_t n = edge_values(x, CAP - 1), i;
    int fdt, si, tested = 0;
    (void)state;
    for (si = 0; si < 4; si++) {
        tr_ctx *ctx = tu_ctx(2, 0);
        if (tr_ctx_set_simd(ctx, sets[si]) != TR_OK) {
            tr_ctx_destroy(ctx);
            continue;
        }
        tested++;
        for (fdt = TR_FWD_BFLOAT16; fdt <= TR_FWD_FLOAT16; fdt++) {
            size_t off;
            for (off = 0; off < 3; off++) {
                memcpy(a, x, n * sizeof(float));
                memcpy(b, x, n * sizeof(float));
                tr__round_ref(fdt, a + off, n - off);
                tr__round(ctx, fdt, b + off, n - off);
                for (i = 0; i < n; i++) {
                    if (isnan(a[i]) && isnan(b[i]) && fdt == TR_FWD_FLOAT16) continue;
                    if (bits(a[i]) != bits(b[i]))
                        fail_msg("%s %s: element %zu (0x%08x): scalar 0x%08x, kernel 0x%08x", sets[si], fdt == TR_FWD_BFLOAT16 ? "bf16" : "fp16", i,
                                 (unsigned)bits(x[i]), (unsigned)bits(a[i]), (unsigned)bits(b[i]));
                }
            }
            /* the 16-bit tape's packing: the scalar twin's 16 bits, and unpacked it is the rounded value */
            {
                uint16_t *h = (uint16_t *)malloc(n * sizeof(uint16_t)), *hr = (uint16_t *)malloc(n * sizeof(uint16_t));
                for (off = 0; off < 3; off++) {
                    memset(h, 0, n * sizeof(uint16_t));
                    tr__half_ref(fdt, 0, x + off, hr, n - off);
                    tr__half(ctx, fdt, 0, x + off, h, n - off);
                    tr__half(ctx, fdt, 1, b, h, n - off);
                    memcpy(a, x + off, (n - off) * sizeof(float));
                    tr__round_ref(fdt, a, n - off);
                    for (i = 0; i < n - off; i++) {
                        if (isnan(a[i]) && isnan(b[i])) continue;
                        if (h[i] != hr[i] || bits(a[i]) != bits(b[i]))
                            fail_msg("%s %s half: element %zu (0x%08x): 16 bits 0x%04x (scalar 0x%04x), back 0x%08x, rounded 0x%08x", sets[si],
                                     fdt == TR_FWD_BFLOAT16 ? "bf16" : "fp16", i, (unsigned)bits(x[off + i]), h[i], hr[i], (unsigned)bits(b[i]), (unsigned)bits(a[i]));
                    }
                }
                free(h), free(hr);
            }
            /* idempotent: a rounded value is representable */
            memcpy(a, b, n * sizeof(float));
            tr__round(ctx, fdt, a, n);
            for (i = 0; i < n; i++) assert_true(bits(a[i]) == bits(b[i]) || (isnan(a[i]) && isnan(b[i])));
        }
        tr_ctx_destroy(ctx);
    }
    assert_true(tested >= 1);
    /* the converters the checkpoints use agree with the rounding */
    for (i = 0; i < n; i++) {
        float r = x[i];
        tr__round_ref(TR_FWD_BFLOAT16, &r, 1);
        assert_true(bits(r) == bits(tr__bf16_to_f32(tr__f32_to_bf16(x[i]))) || isnan(r));
    }
    free(x), free(a), free(b);
}

/* A log that remembers what it was told. */
typedef struct log_buf {
    char text[8192];
} log_buf;
static void log_keep(void *user, tr_log_level level, const char *msg) {
    log_buf *b = (log_buf *)user;
    size_t n = strlen(b->text);
    (void)level;
    snprintf(b->text + n, sizeof b->text - n, "%s\n", msg);
}
static tr_ctx *log_ctx(log_buf *lb) {
    tr_ctx_config cc = tr_ctx_config_default();
    tr_ctx *ctx;
    memset(lb, 0, sizeof *lb);
    cc.num_threads = 1, cc.device = "cpu", cc.log = log_keep, cc.log_user = lb;
    assert_int_equal(tr_ctx_create(&cc, &ctx), TR_OK);
    return ctx;
}

static void test_policy(void **state) {
    static const struct {
        tr_forward_dtype want;
        tr_fault fault;
        tr_forward_dtype got;
        const char *log;
    } cases[] = {
        {TR_FWD_FLOAT32, TR_FAULT_NONE, TR_FWD_FLOAT32, ""},
        {TR_FWD_AUTO, TR_FAULT_NONE, TR_FWD_FLOAT32, "forward_dtype auto: float32 on cpu"},
        {TR_FWD_BFLOAT16, TR_FAULT_NONE, TR_FWD_BFLOAT16, "forward_dtype bfloat16 on cpu"},
        {TR_FWD_FLOAT16, TR_FAULT_NONE, TR_FWD_FLOAT16, "dynamic loss scaling"},
        {TR_FWD_BFLOAT16, TR_FAULT_NO_BF16, TR_FWD_FLOAT16, "forward_dtype bfloat16: the device has no bfloat16 (injected fault); falling back to float16"},
        {TR_FWD_BFLOAT16, TR_FAULT_NO_HALF, TR_FWD_FLOAT32, "the device has no float16 (injected fault); falling back to float32"},
        {TR_FWD_FLOAT16, TR_FAULT_NO_BF16, TR_FWD_FLOAT16, "forward_dtype float16 on cpu"},
        {TR_FWD_FLOAT16, TR_FAULT_NO_HALF, TR_FWD_FLOAT32, "forward_dtype float16: the device has no float16"},
    };
    size_t i;
    (void)state;
    for (i = 0; i < sizeof cases / sizeof *cases; i++) {
        log_buf lb;
        tr_ctx *ctx = log_ctx(&lb);
        tr_model_config c;
        tr_model *m;
        tr_forward_dtype got;
        const char *want_log;
        tu_tiny_config(&c, 1, TR_POS_NONE, TR_LOSS_STABLEMAX);
        c.forward_dtype = cases[i].want;
        got = cases[i].got, want_log = cases[i].log;
        if (cases[i].fault) tr_ctx_inject_fault(ctx, cases[i].fault, 0, 0);
        if (cases[i].want == TR_FWD_AUTO && tr__bgemm_kernel(ctx) == TR__BG_AMX) got = TR_FWD_BFLOAT16, want_log = "its AMX tiles multiply bfloat16 natively";
        if (cases[i].want == TR_FWD_AUTO && tr__bgemm_kernel(ctx) == TR__BG_DPBF16 && ctx->cpu_dp_fast)
            got = TR_FWD_BFLOAT16, want_log = "its vdpbf16ps multiplies bfloat16 at twice the fp32 rate";
        assert_int_equal(tr_model_create(ctx, &c, &m), TR_OK);
        if (tr_model_get_config(m)->forward_dtype != got)
            fail_msg("case %zu: %s -> %s, want %s", i, tr_forward_dtype_name(cases[i].want), tr_forward_dtype_name(tr_model_get_config(m)->forward_dtype),
                     tr_forward_dtype_name(got));
        if (!strstr(lb.text, want_log)) fail_msg("case %zu: the log lacks '%s':\n%s", i, want_log, lb.text);
        tr_model_destroy(m);
        tr_ctx_destroy(ctx);
    }
    { /* auto on a CPU with AMX picks bfloat16 (the case above); TINYREC_CPU_BF16=0 (no native products) keeps float32 there too */
        log_buf lb;
        tr_ctx *ctx = log_ctx(&lb);
        tr_model_config c;
        tr_model *m;
        ctx->bf16_gemm = 0;
        assert_int_not_equal(tr__bgemm_kernel(ctx), TR__BG_AMX);
        tu_tiny_config(&c, 1, TR_POS_NONE, TR_LOSS_STABLEMAX);
        c.forward_dtype = TR_FWD_AUTO;
        assert_int_equal(tr_model_create(ctx, &c, &m), TR_OK);
        assert_int_equal(tr_model_get_config(m)->forward_dtype, TR_FWD_FLOAT32);
        tr_model_destroy(m);
        tr_ctx_destroy(ctx);
    }
    { /* on vdpbf16ps (where this CPU has it): bfloat16 where it runs at twice the fp32 rate, else float32 */
        int fast;
        for (fast = 0; fast < 2; fast++) {
            log_buf lb;
            tr_ctx *ctx = log_ctx(&lb);
            tr_model_config c;
            tr_model *m;
            if (tr__bgemm_kernel(ctx) != TR__BG_DPBF16) {
                tr_ctx_destroy(ctx);
                break;
            }
            ctx->cpu_dp_fast = fast;
            tu_tiny_config(&c, 1, TR_POS_NONE, TR_LOSS_STABLEMAX);
            c.forward_dtype = TR_FWD_AUTO;
            assert_int_equal(tr_model_create(ctx, &c, &m), TR_OK);
            assert_int_equal(tr_model_get_config(m)->forward_dtype, fast ? TR_FWD_BFLOAT16 : TR_FWD_FLOAT32);
            if (!strstr(lb.text, fast ? "its vdpbf16ps multiplies bfloat16 at twice the fp32 rate" : "which this CPU runs at its fp32 rate"))
                fail_msg("auto with vdpbf16ps (fast %d): the log lacks the reason:\n%s", fast, lb.text);
            tr_model_destroy(m);
            tr_ctx_destroy(ctx);
        }
    }
    { /* the log names the kernels a bfloat16 model's CPU products run on */
        log_buf lb;
        tr_ctx *ctx = log_ctx(&lb);
        tr_model_config c;
        tr_model *m;
        ctx->bf16_gemm = 2;
        tu_tiny_config(&c, 1, TR_POS_NONE, TR_LOSS_STABLEMAX);
        c.forward_dtype = TR_FWD_BFLOAT16;
        assert_int_equal(tr_model_create(ctx, &c, &m), TR_OK);
        if (!strstr(lb.text, "; products on the scalar twin of vdpbf16ps")) fail_msg("the log lacks the products' kernels:\n%s", lb.text);
        if (!strstr(lb.text, "; the backward's tape in 16 bits")) fail_msg("the log lacks the tape's width:\n%s", lb.text);
        tr_model_destroy(m);
        ctx->bf16_gemm = 0, ctx->tape16 = 0;
        memset(&lb, 0, sizeof lb);
        assert_int_equal(tr_model_create(ctx, &c, &m), TR_OK);
        if (!strstr(lb.text, "; products on the fp32 kernels")) fail_msg("the log lacks the products' kernels:\n%s", lb.text);
        if (!strstr(lb.text, "; the backward's tape in fp32 (TINYREC_TAPE16=0)")) fail_msg("the log lacks the tape's width:\n%s", lb.text);
        tr_model_destroy(m);
        tr_ctx_destroy(ctx);
    }
    /* names, parsing, a bad value */
    assert_string_equal(tr_forward_dtype_name(TR_FWD_BFLOAT16), "bfloat16");
    assert_null(tr_forward_dtype_name((tr_forward_dtype)9));
    assert_int_equal(tr_forward_dtype_parse("BF16"), TR_FWD_BFLOAT16);
    assert_int_equal(tr_forward_dtype_parse("float16"), TR_FWD_FLOAT16);
    assert_int_equal(tr_forward_dtype_parse("auto"), TR_FWD_AUTO);
    assert_int_equal(tr_forward_dtype_parse("int8"), -1);
    {
        tr_ctx *ctx = tu_ctx(1, 0);
        tr_model_config c;
        tr_model *m;
        tu_tiny_config(&c, 1, TR_POS_NONE, TR_LOSS_STABLEMAX);
        assert_int_equal(tr_model_create(ctx, &c, &m), TR_OK);
        assert_int_equal(tr_model_set_forward_dtype(m, (tr_forward_dtype)7), TR_ERR_CONFIG);
        assert_non_null(strstr(tr_ctx_last_error(ctx), "forward_dtype 7 is unknown"));
        assert_int_equal(tr_model_get_config(m)->forward_dtype, TR_FWD_FLOAT32);
        tr_model_destroy(m);
        assert_int_equal(tr__fault_from_env(ctx, "no-bf16"), TR_OK);
        assert_int_equal(ctx->fault, TR_FAULT_NO_BF16);
        assert_int_equal(tr__fault_from_env(ctx, "no-half"), TR_OK);
        assert_int_equal(ctx->fault, TR_FAULT_NO_HALF);
        assert_int_equal(tr__fault_from_env(ctx, "no-half@3"), TR_ERR_INVALID_ARG);
        tr_ctx_destroy(ctx);
    }
}

static int all_rounded(int fdt, const float *x, size_t n) {
    size_t i;
    for (i = 0; i < n; i++) {
        float r = x[i];
        tr__round_ref(fdt, &r, 1);
        if (bits(r) != bits(x[i])) return 0;
    }
    return 1;
}

/* n values of a carry's buffer x in fp32 (malloc'd): a 16-bit carry's widened (wsp.carry16). */
static float *carry_wide(const tr_carry *c, const float *x, size_t n) {
    float *w = (float *)malloc(n * sizeof(float));
    assert_non_null(w);
    if (c->z16) tr__half_ref(c->m->fdt, 1, w, (uint16_t *)(uintptr_t)x, n);
    else memcpy(w, x, n * sizeof(float));
    return w;
}

/* Everything the reference stores in the forward precision is representable in it: the carries, the
   logits, the q values, the input embedding; and the fp32 answer is close but not the same. Both mixers,
   TRM and HRM, bfloat16 and float16. */
static void test_model_rounding_points(void **state) {
    int variant, fdt;
    (void)state;
    for (variant = 0; variant < 3; variant++)
        for (fdt = TR_FWD_BFLOAT16; fdt <= TR_FWD_FLOAT16; fdt++) {
            tr_ctx *ctx = tu_ctx(2, 5);
            tr_model_config c;
            tr_model *m, *m32;
            tr_carry *cr, *cr32;
            enum { B = 3 };
            int32_t in[B * 16], lab[B * 16], pid[B];
            tr_batch bt;
            float logits[B * 16 * 6], logits32[B * 16 * 6], qh[B];
            tr_step_outputs o;
            size_t N, i;
            double worst = 0, mx = 0;
            if (variant == 2) tu_tiny_hrm_config(&c, 0, TR_POS_ROPE, TR_LOSS_STABLEMAX);
            else tu_tiny_config(&c, variant == 0, variant == 0 ? TR_POS_LEARNED : TR_POS_ROPE, TR_LOSS_STABLEMAX);
            assert_int_equal(tr_model_create(ctx, &c, &m32), TR_OK);
            c.forward_dtype = (tr_forward_dtype)fdt;
            assert_int_equal(tr_model_create(ctx, &c, &m), TR_OK);
            {
                tr_tensor_view v; /* a non-zero puzzle table, so that the prefix rows are rounded too */
                assert_int_equal(tr_model_find_tensor(m, "model.inner.puzzle_emb.weights", &v), TR_OK);
                tu_fill(v.data, v.numel, 3, 0.7f);
                assert_int_equal(tr_model_find_tensor(m32, "model.inner.puzzle_emb.weights", &v), TR_OK);
                tu_fill(v.data, v.numel, 3, 0.7f);
            }
            tu_tiny_batch(B, 16, 6, 9, in, lab, pid, 3, 0);
            bt.inputs = in, bt.labels = lab, bt.puzzle_identifiers = pid, bt.batch_size = B;
            assert_int_equal(tr_carry_create(m, B, &cr), TR_OK);
            assert_int_equal(tr_carry_create(m32, B, &cr32), TR_OK);
            memset(&o, 0, sizeof o);
            o.logits = logits, o.q_halt = qh;
            assert_int_equal(tr_model_eval_step(m, cr, &bt, &o, NULL), TR_OK);
            o.logits = logits32;
            assert_int_equal(tr_model_eval_step(m32, cr32, &bt, &o, NULL), TR_OK);
            N = (size_t)B * m->S * m->D;
            assert_int_equal(cr->z16, 1); /* (stored in 16 bits: rounded as they are stored) */
            {
                const float *bufs[4];
                bufs[0] = cr->z_H, bufs[1] = cr->z_L, bufs[2] = cr->x, bufs[3] = cr->inj;
                for (i = 0; i < 4; i++) {
                    float *w = carry_wide(cr, bufs[i], N);
                    assert_true(all_rounded(fdt, w, N));
                    free(w);
                }
            }
            assert_true(all_rounded(fdt, logits, sizeof logits / sizeof *logits));
            assert_true(all_rounded(fdt, qh, B));
            assert_false(all_rounded(fdt, cr32->z_H, N)); /* (the check can fail) */
            for (i = 0; i < sizeof logits / sizeof *logits; i++) {
                worst = fmax(worst, fabs((double)logits[i] - logits32[i]));
                mx = fmax(mx, fabs((double)logits32[i]));
            }
            /* 2 x T x (n + 1) post-norm applications with errors of 2^-9 (bf16) or 2^-12 (fp16) each: a few
               percent of the logits' scale at most, and never zero */
            if (!(worst > 0 && worst < (fdt == TR_FWD_BFLOAT16 ? 0.15 : 0.02) * mx))
                fail_msg("variant %d %s: max |logit - fp32 logit| = %g of max %g", variant, tr_forward_dtype_name((tr_forward_dtype)fdt), worst, mx);
            tr_carry_destroy(cr), tr_carry_destroy(cr32);
            tr_model_destroy(m), tr_model_destroy(m32);
            tr_ctx_destroy(ctx);
        }
}

static tr_trainer *tiny_trainer(tr_ctx *ctx, tr_forward_dtype fdt, int window, tr_model **mout) {
    tr_model_config c;
    tr_train_config tc = tr_train_config_default();
    tr_trainer *t;
    tu_tiny_config(&c, 1, TR_POS_NONE, TR_LOSS_STABLEMAX);
    c.forward_dtype = fdt;
    assert_int_equal(tr_model_create(ctx, &c, mout), TR_OK);
    tc.global_batch_size = 4, tc.lr = 1e-3, tc.lr_warmup_steps = 0, tc.loss_scale_window = window;
    assert_int_equal(tr_trainer_create(*mout, &tc, &t), TR_OK);
    return t;
}

/* float16: an injected NaN gradient at step 3 skips that step alone, halves the scale and does not count
   toward max_nonfinite_steps; good steps double it after the window; the losses
   are the loss's, not the scaled one's; bfloat16 and float32 report no scale. */
static void test_loss_scaling(void **state) {
    tr_ctx *ctx = tu_ctx(1, 7);
    tr_model *m, *mb;
    tr_trainer *t = tiny_trainer(ctx, TR_FWD_FLOAT16, 3, &m), *tb;
    int32_t in[4 * 16], lab[4 * 16], pid[4];
    tr_batch bt;
    tr_metrics mt;
    double want[] = {65536, 65536, 65536, 32768, 32768, 32768, 65536, 65536};
    int s, skipped = 0;
    (void)state;
    tu_tiny_batch(4, 16, 6, 3, in, lab, pid, 3, 0);
    bt.inputs = in, bt.labels = lab, bt.puzzle_identifiers = pid, bt.batch_size = 4;
    tr_ctx_inject_fault(ctx, TR_FAULT_NONFINITE, 3, 1);
    for (s = 0; s < 8; s++) {
        assert_int_equal(tr_trainer_step(t, &bt, &mt), TR_OK);
        if (mt.loss_scale != want[s]) fail_msg("step %d: loss scale %g, want %g", s + 1, mt.loss_scale, want[s]);
        skipped += mt.skipped != 0;
        assert_int_equal(mt.skipped != 0, s == 2);
        assert_true(isfinite(mt.loss) && mt.loss > 0 && mt.loss < 100); /* the loss of the model, not of loss * 65536 */
    }
    assert_int_equal(skipped, 1);
    assert_int_equal(tr_trainer_step_count(t), 8);
    assert_int_equal(t->nonfinite_run, 0);
    tr_trainer_destroy(t);
    tr_model_destroy(m);
    /* bfloat16: no scale, and a NaN is the ordinary non-finite skip */
    tr_ctx_inject_fault(ctx, TR_FAULT_NONE, 0, 0);
    tb = tiny_trainer(ctx, TR_FWD_BFLOAT16, 3, &mb);
    assert_int_equal(tr_trainer_step(tb, &bt, &mt), TR_OK);
    assert_true(mt.loss_scale == 0 && !mt.skipped);
    tr_trainer_destroy(tb);
    tr_model_destroy(mb);
    tr_ctx_destroy(ctx);
}

/* A float16 run that overflows in the scaled gradients halves until it fits: a tiny scale window and a
   forced scale of 2^24 give inf gradients at first, then training settles, every skip counted. */
static void test_loss_scale_overflow(void **state) {
    tr_ctx *ctx = tu_ctx(1, 7);
    tr_model *m;
    tr_trainer *t = tiny_trainer(ctx, TR_FWD_FLOAT16, 1000, &m);
    int32_t in[4 * 16], lab[4 * 16], pid[4];
    tr_batch bt;
    tr_metrics mt;
    int s, skipped = 0, good = 0;
    double last = 0;
    (void)state;
    tu_tiny_batch(4, 16, 6, 3, in, lab, pid, 3, 0);
    bt.inputs = in, bt.labels = lab, bt.puzzle_identifiers = pid, bt.batch_size = 4;
    t->loss_scale = 1e30; /* far past float16's range: every scaled gradient overflows to inf */
    for (s = 0; s < 120 && good < 3; s++) {
        assert_int_equal(tr_trainer_step(t, &bt, &mt), TR_OK);
        if (mt.skipped) {
            skipped++;
            assert_true(mt.loss_scale > t->loss_scale); /* halved after it */
        } else
            good++;
        last = mt.loss_scale;
    }
    assert_int_equal(good, 3);
    assert_true(skipped >= 10); /* 1e30 / 2^k must come below ~65504 / max|grad| */
    assert_true(last < 1e30 && last >= 1);
    tr_trainer_destroy(t);
    tr_model_destroy(m);
    tr_ctx_destroy(ctx);
}

/* A 16-bit carry follows its model from bfloat16 to float16 (tr_model_set_forward_dtype) with an fp32 carry's values,
   bit for bit, and refuses float32, for which it has no room, with an error that says what to do. */
static void test_carry16_follows_precision(void **state) {
    double loss[2][4];
    int32_t in[4 * 16], lab[4 * 16], pid[4];
    tr_batch bt;
    int k, s;
    (void)state;
    tu_tiny_batch(4, 16, 6, 5, in, lab, pid, 3, 0);
    bt.inputs = in, bt.labels = lab, bt.puzzle_identifiers = pid, bt.batch_size = 4;
    for (k = 0; k < 2; k++) {
        tr_ctx *ctx = tu_ctx(2, 3);
        tr_model *m;
        tr_trainer *t;
        tr_metrics mt;
        ctx->tape16 = k == 0;
        t = tiny_trainer(ctx, TR_FWD_BFLOAT16, 2, &m);
        assert_int_equal(t->carry->z16, k == 0);
        for (s = 0; s < 4; s++) {
            if (s == 2) assert_int_equal(tr_model_set_forward_dtype(m, TR_FWD_FLOAT16), TR_OK);
            assert_int_equal(tr_trainer_step(t, &bt, &mt), TR_OK);
            loss[k][s] = mt.loss;
        }
        if (k == 0) assert_int_equal(t->carry->zfdt, TR_FWD_FLOAT16);
        assert_int_equal(tr_model_set_forward_dtype(m, TR_FWD_FLOAT32), TR_OK);
        if (k == 0) {
            assert_int_equal(tr_trainer_step(t, &bt, &mt), TR_ERR_INVALID_ARG);
            assert_non_null(strstr(tr_ctx_last_error(ctx), "make a new carry"));
        } else
            assert_int_equal(tr_trainer_step(t, &bt, &mt), TR_OK);
        tr_trainer_destroy(t);
        tr_model_destroy(m);
        tr_ctx_destroy(ctx);
    }
    for (s = 0; s < 4; s++)
        if (loss[0][s] != loss[1][s]) fail_msg("step %d: loss %.9g with the 16-bit carry, %.9g with fp32", s + 1, loss[0][s], loss[1][s]);
}

/* The model file records the precision; a file written in one precision loads into another; a trainer
   state saved in float16 (with its loss scale) resumes bit for bit in float16, and in bfloat16 too. */
static void test_checkpoints_across_precisions(void **state) {
    tr_ctx *ctx = tu_ctx(1, 11);
    tr_model *m, *m2, *m3;
    tr_trainer *t, *t2;
    tr_model_config rc;
    int32_t in[4 * 16], lab[4 * 16], pid[4];
    tr_batch bt;
    tr_metrics a, b;
    char dir[] = "/tmp/tinyrec_test_prec_XXXXXX", mp[64], sp[64];
    int s;
    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(mp, sizeof mp, "%s/model.safetensors", dir);
    snprintf(sp, sizeof sp, "%s/state.safetensors", dir);
    tu_tiny_batch(4, 16, 6, 3, in, lab, pid, 3, 0);
    bt.inputs = in, bt.labels = lab, bt.puzzle_identifiers = pid, bt.batch_size = 4;
    t = tiny_trainer(ctx, TR_FWD_FLOAT16, 2, &m);
    for (s = 0; s < 3; s++) assert_int_equal(tr_trainer_step(t, &bt, &a), TR_OK);
    assert_true(t->loss_scale == 131072); /* doubled after 2 good steps */
    assert_int_equal(tr_model_save(m, mp, NULL), TR_OK);
    assert_int_equal(tr_trainer_save(t, sp, NULL, 0), TR_OK);
    assert_int_equal(tr_checkpoint_read_config(ctx, mp, &rc), TR_OK);
    assert_int_equal(rc.forward_dtype, TR_FWD_FLOAT16);
    assert_int_equal(tr_model_load(ctx, mp, NULL, &m2), TR_OK);
    assert_int_equal(tr_model_get_config(m2)->forward_dtype, TR_FWD_FLOAT16);
    /* resume in float16: the same next step as the run that goes on */
    assert_int_equal(tr_trainer_create(m2, &t->tc, &t2), TR_OK);
    assert_int_equal(tr_trainer_load(t2, sp, NULL, 0, NULL), TR_OK);
    assert_true(t2->loss_scale == 131072 && t2->scale_good == 1);
    assert_int_equal(tr_trainer_step(t, &bt, &a), TR_OK);
    assert_int_equal(tr_trainer_step(t2, &bt, &b), TR_OK);
    assert_true(a.loss == b.loss && a.loss_scale == b.loss_scale);
    tr_trainer_destroy(t2);
    /* the same state resumed with the model in bfloat16 (and the weights in fp32 in the file) */
    assert_int_equal(tr_model_set_forward_dtype(m2, TR_FWD_BFLOAT16), TR_OK);
    assert_int_equal(tr_trainer_create(m2, &t->tc, &t2), TR_OK);
    assert_int_equal(tr_trainer_load(t2, sp, NULL, 0, NULL), TR_OK);
    assert_int_equal(tr_trainer_step(t2, &bt, &b), TR_OK);
    assert_true(isfinite(b.loss) && b.loss_scale == 0 && fabs(b.loss - a.loss) < 0.05 * a.loss);
    tr_trainer_destroy(t2);
    /* and a float32 model loads the float16 file's weights bit for bit */
    assert_int_equal(tr_model_set_forward_dtype(m2, TR_FWD_FLOAT32), TR_OK);
    assert_int_equal(tr_model_save(m2, mp, NULL), TR_OK);
    assert_int_equal(tr_model_load(ctx, mp, NULL, &m3), TR_OK);
    assert_int_equal(tr_model_get_config(m3)->forward_dtype, TR_FWD_FLOAT32);
    assert_memory_equal(m3->params, m2->params, m2->n_params * sizeof(float));
    tr_model_destroy(m3);
    tr_model_destroy(m2);
    tr_trainer_destroy(t);
    tr_model_destroy(m);
    remove(mp), remove(sp), rmdir(dir);
    tr_ctx_destroy(ctx);
}

/* A bfloat16 / float16 model's tape in 16 bits (TINYREC_TAPE16, the default) trains to the same bits as an fp32
   tape, in both mixers and HRM, with less memory, also with the batch of 5 in slices of 2, 2 and 1 rows (each
   slice starts inside the 16-bit fields); TINYREC_TAPE16 takes 0 or 1. */
static void test_tape16_same_bits(void **state) {
    int variant, fdt, sliced;
    (void)state;
    for (sliced = 0; sliced < 2; sliced++)
    for (variant = 0; variant < 3; variant++)
        for (fdt = TR_FWD_BFLOAT16; fdt <= TR_FWD_FLOAT16; fdt++) {
            tr_model *m[2];
            tr_trainer *t[2];
            tr_ctx *ctx[2];
            size_t train[2];
            double loss[2][4];
            int32_t in[5 * 16], lab[5 * 16], pid[5];
            tr_batch bt;
            int k, s;
            tu_tiny_batch(5, 16, 6, 3, in, lab, pid, 3, 0);
            bt.inputs = in, bt.labels = lab, bt.puzzle_identifiers = pid, bt.batch_size = 5;
            for (k = 0; k < 2; k++) {
                tr_model_config c;
                tr_train_config tc = tr_train_config_default();
                tr_metrics mt;
                ctx[k] = tu_ctx(2, 7);
                ctx[k]->tape16 = k == 0;
                if (variant == 2) tu_tiny_hrm_config(&c, 0, TR_POS_ROPE, TR_LOSS_STABLEMAX);
                else tu_tiny_config(&c, variant == 0, variant == 0 ? TR_POS_NONE : TR_POS_ROPE, TR_LOSS_STABLEMAX);
                c.forward_dtype = (tr_forward_dtype)fdt;
                assert_int_equal(tr_model_create(ctx[k], &c, &m[k]), TR_OK);
                if (sliced) m[k]->ws_tokens = 2 * m[k]->S;
                assert_int_equal(tr__ws_rows(m[k], 5), sliced ? 2 : 5);
                tc.global_batch_size = 5, tc.lr = 1e-3, tc.lr_warmup_steps = 0;
                assert_int_equal(tr_trainer_create(m[k], &tc, &t[k]), TR_OK);
                for (s = 0; s < 4; s++) {
                    assert_int_equal(tr_trainer_step(t[k], &bt, &mt), TR_OK);
                    loss[k][s] = mt.loss;
                }
                assert_int_equal(m[k]->tape_half, k == 0);
                tr_model_memory(m[k], 64, &train[k], NULL);
            }
            for (s = 0; s < 4; s++)
                if (loss[0][s] != loss[1][s]) fail_msg("variant %d fdt %d sliced %d step %d: loss %.9g with the 16-bit tape, %.9g with fp32", variant, fdt, sliced, s + 1, loss[0][s], loss[1][s]);
            assert_memory_equal(m[0]->params, m[1]->params, m[0]->n_params * sizeof(float));
            assert_true(train[0] < train[1]);
            /* the carries: 16-bit with the 16-bit tape (wsp.carry16), and the same values */
            assert_int_equal(t[0]->carry->z16, 1);
            assert_int_equal(t[1]->carry->z16, 0);
            {
                size_t N = (size_t)5 * m[0]->S * m[0]->D;
                float *w = carry_wide(t[0]->carry, t[0]->carry->z_H, N);
                assert_memory_equal(w, t[1]->carry->z_H, N * sizeof(float));
                free(w);
                w = carry_wide(t[0]->carry, t[0]->carry->z_L, N);
                assert_memory_equal(w, t[1]->carry->z_L, N * sizeof(float));
                free(w);
            }
            for (k = 0; k < 2; k++) {
                tr_trainer_destroy(t[k]);
                tr_model_destroy(m[k]);
                tr_ctx_destroy(ctx[k]);
            }
        }
    {
        tr_ctx_config cc = tr_ctx_config_default();
        tr_ctx *c = NULL;
        cc.device = "cpu";
        setenv("TINYREC_TAPE16", "2", 1);
        assert_int_equal(tr_ctx_create(&cc, &c), TR_ERR_INVALID_ARG);
        setenv("TINYREC_TAPE16", "0", 1);
        assert_int_equal(tr_ctx_create(&cc, &c), TR_OK);
        assert_int_equal(c->tape16, 0);
        tr_ctx_destroy(c);
        unsetenv("TINYREC_TAPE16");
    }
}

/* bfloat16 training on the CPU learns the tiny task as float32 does: the loss falls by a similar amount. */
static void test_bf16_learns(void **state) {
    double first[2] = {0, 0}, last[2] = {0, 0};
    int k;
    (void)state;
    for (k = 0; k < 2; k++) {
        tr_ctx *ctx = tu_ctx(2, 3);
        tr_model *m;
        tr_trainer *t = tiny_trainer(ctx, k ? TR_FWD_BFLOAT16 : TR_FWD_FLOAT32, 2000, &m);
        int32_t in[4 * 16], lab[4 * 16], pid[4];
        tr_batch bt;
        tr_metrics mt;
        int s;
        tu_tiny_batch(4, 16, 6, 3, in, lab, pid, 3, 0);
        bt.inputs = in, bt.labels = lab, bt.puzzle_identifiers = pid, bt.batch_size = 4;
        for (s = 0; s < 60; s++) {
            assert_int_equal(tr_trainer_step(t, &bt, &mt), TR_OK);
            if (s < 5) first[k] += mt.lm_loss;
            if (s >= 55) last[k] += mt.lm_loss;
        }
        tr_trainer_destroy(t);
        tr_model_destroy(m);
        tr_ctx_destroy(ctx);
    }
    print_message("lm loss, first 5 -> last 5 steps: float32 %.4f -> %.4f, bfloat16 %.4f -> %.4f\n", first[0] / 5, last[0] / 5, first[1] / 5, last[1] / 5);
    assert_true(last[0] < 0.7 * first[0]);
    assert_true(last[1] < 0.7 * first[1]);
    assert_true(fabs(last[1] - last[0]) < 0.25 * last[0] + 0.05 * first[0]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_scalar_values),
        cmocka_unit_test(test_round_simd_matches_scalar),
        cmocka_unit_test(test_policy),
        cmocka_unit_test(test_model_rounding_points),
        cmocka_unit_test(test_loss_scaling),
        cmocka_unit_test(test_loss_scale_overflow),
        cmocka_unit_test(test_checkpoints_across_precisions),
        cmocka_unit_test(test_tape16_same_bits),
        cmocka_unit_test(test_carry16_follows_precision),
        cmocka_unit_test(test_bf16_learns),
    };
    return cmocka_run_group_tests_name("precision", tests, NULL, NULL);
}
