/* The TRM and HRM models: parameter counts, config validation, whole-model gradients against finite
   differences, thread-count independence, determinism, allocation failure, ACT behaviour. */
#define TINYREC_IMPLEMENTATION
#include "test_util.h"



static void test_param_counts(void **state) {
    static const struct { const char *name; size_t n; } want[] = {
        {"trm-sudoku-mlp", 5028866}, {"trm-sudoku-att", 6828034}, {"trm-maze", 6822914}, {"trm-arc", 6829058},
        /* the reference's HRM counts (reference-models.md §6) */
        {"hrm-sudoku", 27275266}, {"hrm-maze", 27270146}, {"hrm-arc", 27276290}};
    tr_ctx *ctx = tu_ctx(1, 0);
    size_t i;
    (void)state;
    for (i = 0; i < sizeof want / sizeof want[0]; i++) {
        tr_model_config c;
        tr_model *m;
        assert_int_equal(tr_model_config_preset(&c, want[i].name), TR_OK);
        assert_int_equal(tr_model_create(ctx, &c, &m), TR_OK);
        assert_int_equal(tr_model_num_params(m), want[i].n);
        tr_model_destroy(m);
    }
    assert_int_equal(tr_model_config_preset(&(tr_model_config){0}, "nope"), TR_ERR_NOT_FOUND);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

static void test_bad_config(void **state) {
    tr_ctx *ctx = tu_ctx(1, 0);
    tr_model_config c;
    tr_model *m = NULL;
    (void)state;
#define EXPECT_BAD(mutation, needle)                                                       \
    do {                                                                                   \
        tr_model_config_preset(&c, "trm-sudoku-att");                                      \
        mutation;                                                                          \
        assert_int_equal(tr_model_create(ctx, &c, &m), TR_ERR_CONFIG);                     \
        assert_null(m);                                                                    \
        if (!strstr(tr_ctx_last_error(ctx), needle)) fail_msg("error '%s' lacks '%s'", tr_ctx_last_error(ctx), needle); \
    } while (0)
    EXPECT_BAD(c.num_heads = 7, "num_heads");
    EXPECT_BAD(c.hidden_size = 0, "hidden_size");
    EXPECT_BAD(c.hidden_size = -512, "hidden_size");
    EXPECT_BAD(c.seq_len = 0, "seq_len");
    EXPECT_BAD(c.L_layers = 0, "L_layers");
    EXPECT_BAD(c.L_cycles = -1, "L_cycles");
    EXPECT_BAD(c.vocab_size = 1, "vocab_size");
    EXPECT_BAD(c.expansion = 0, "expansion");
    EXPECT_BAD(c.halt_exploration_prob = 1.5, "halt_exploration_prob");
    EXPECT_BAD(c.puzzle_emb_ndim = 9000, "puzzle_emb_ndim");
    EXPECT_BAD(c.num_heads = 512 / 3 + 1, "num_heads");
    EXPECT_BAD(c.rms_norm_eps = -1, "rms_norm_eps");
    EXPECT_BAD(c.pos_encodings = (tr_pos_encoding)7, "pos_encodings");
    /* HRM: its own fields, and the shared ones name the field as for TRM */
    EXPECT_BAD((c.arch = TR_ARCH_HRM, c.H_layers = 0), "H_layers");
    EXPECT_BAD((c.arch = TR_ARCH_HRM, c.H_layers = 4, c.L_layers = 0), "L_layers");
    EXPECT_BAD((c.arch = TR_ARCH_HRM, c.H_layers = 33), "H_layers");
    EXPECT_BAD((c.arch = TR_ARCH_HRM, c.H_layers = 4, c.H_cycles = 0), "H_cycles");
    EXPECT_BAD((c.arch = TR_ARCH_HRM, c.H_layers = 4, c.num_heads = 7), "num_heads");
    EXPECT_BAD(c.arch = (tr_arch)5, "arch");
#undef EXPECT_BAD
    /* TRM ignores H_layers */
    tr_model_config_preset(&c, "trm-tiny");
    c.H_layers = -3;
    assert_int_equal(tr_model_config_validate(ctx, &c), TR_OK);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

/* --- whole-model gradient vs finite differences ------------------------------------------- */
typedef struct {
    tr_trainer *t;
    tr_batch batch;
    float *z_H, *z_L; /* the carry entering the last H cycle, computed with the unperturbed weights */
} fd_state;

/* The function the reference differentiates: the first T-1 cycles are constants (no_grad),
   so FD perturbs only the last cycle, which starts from the saved carry. Divided like the
   gradient (total / B). */
static double step_loss(fd_state *s) {
    tr_model *m = s->t->m;
    tr_carry *c = s->t->carry;
    size_t n = (size_t)c->B * m->S * m->D;
    int T = m->cfg.H_cycles, n_L = m->cfg.L_cycles;
    tr_metrics mt;
    tr_carry_reset(c);
    tr__carry_refill(m, c, &s->batch);
    memcpy(c->z_H, s->z_H, tr__vals(n, c->z16) * 4);
    memcpy(c->z_L, s->z_L, tr__vals(n, c->z16) * 4);
    /* TRM: the last H cycle; HRM: the last L and H applications, i.e. one cycle of one L update */
    m->cfg.H_cycles = 1;
    if (m->cfg.arch == TR_ARCH_HRM) m->cfg.L_cycles = 1;
    assert_int_equal(tr__inner_fwd(m, c, 0, NULL, NULL), TR_OK);
    m->cfg.H_cycles = T, m->cfg.L_cycles = n_L;
    /* HRM's q_continue target is a constant of the step (the trainer's) */
    assert_int_equal(tr__loss(m, c, (double)c->B, NULL, NULL, NULL, s->t->qtarget, &mt), TR_OK);
    return mt.loss / c->B;
}

static void save_prefix_carry(fd_state *s) {
    tr_model *m = s->t->m;
    tr_carry *c = s->t->carry;
    size_t n = (size_t)c->B * m->S * m->D;
    int T = m->cfg.H_cycles;
    tr_carry_reset(c);
    tr__carry_refill(m, c, &s->batch);
    if (T > 1) {
        m->cfg.H_cycles = T - 1;
        assert_int_equal(tr__inner_fwd(m, c, 0, NULL, NULL), TR_OK);
        m->cfg.H_cycles = T;
    }
    if (m->cfg.arch == TR_ARCH_HRM) { /* and the L updates of the last cycle before its last one */
        int i;
        assert_int_equal(tr__embed_fwd(m, c, c->x), TR_OK);
        assert_int_equal(tr__op_add(m->ctx, m->fdt, n, tr__buf_of(c->z_H, c->z16 ? m->fdt : 0), tr__buf_of(c->x, c->z16 ? m->fdt : 0), tr__buf_of(c->inj, c->z16 ? m->fdt : 0)), TR_OK);
        for (i = 0; i < m->cfg.L_cycles - 1; i++) assert_int_equal(tr__net_fwd(m, &m->modules[1], c->B, c->z_L, c->inj, c->z_L, c->z16, NULL), TR_OK);
    }
    s->z_H = (float *)malloc(n * 4), s->z_L = (float *)malloc(n * 4);
    memcpy(s->z_H, c->z_H, tr__vals(n, c->z16) * 4);
    memcpy(s->z_L, c->z_L, tr__vals(n, c->z16) * 4);
}

/* slices 1: the recursion runs the batch of 3 in slices of 2 and 1 rows (tr__ws_rows), whose weight gradients add up;
   2: the token mix runs in passes of one row (wsp.mix_rows) */
static void check_model_grads(int hrm, int mlp_t, tr_pos_encoding pos, tr_loss_type loss, int slices) {
    enum { B = 3 };
    tr_ctx *ctx = tu_ctx(2, 5);
    tr_model_config c;
    tr_model *m;
    tr_train_config tc = tr_train_config_default();
    fd_state s;
    int32_t in[B * 16], lab[B * 16], pid[B];
    float *g, *prow;
    int i;
    if (hrm) tu_tiny_hrm_config(&c, mlp_t, pos, loss);
    else tu_tiny_config(&c, mlp_t, pos, loss);
    assert_int_equal(tr_model_create(ctx, &c, &m), TR_OK);
    if (slices == 1) m->ws_tokens = 2 * m->S;
    if (slices == 2) m->ws_mix_rows = 1; /* (the token mix in passes of one row) */
    assert_int_equal(tr__ws_rows(m, B), slices == 1 ? 2 : B);
    /* make the heads and the puzzle table non-trivial, as after some training */
    tu_fill(m->W_q, 2 * (size_t)m->D, 21, 0.3f);
    tu_fill(m->puzzle_emb, 3 * (size_t)m->Dp, 22, 0.5f);
    tc.global_batch_size = B;
    assert_int_equal(tr_trainer_create(m, &tc, &s.t), TR_OK);
    tu_tiny_batch(B, 16, 6, 99, in, lab, pid, 3, 0);
    s.batch.inputs = in, s.batch.labels = lab, s.batch.puzzle_identifiers = pid, s.batch.batch_size = B;
    save_prefix_carry(&s);
    tr_carry_reset(s.t->carry);
    assert_int_equal(tr__train_fwd_bwd(s.t, &s.batch, NULL, NULL, NULL), TR_OK);
    if (hrm) assert_non_null(s.t->qtarget); /* so the q_continue loss is part of what FD checks */
    g = (float *)malloc(m->n_params * sizeof(float));
    prow = (float *)malloc((size_t)B * m->Dp * sizeof(float));
    memcpy(g, m->grads, m->n_params * sizeof(float));
    memcpy(prow, s.t->prow, (size_t)B * m->Dp * sizeof(float));
    for (i = 0; i <= m->n_tensors; i++) {
        /* directional derivative along the gradient itself (or along the puzzle-row grads for the
           table, i == n_tensors): f(p + h u) - f(p - h u) / 2h == <g, u> with u = g / |g| */
        float *data, *gd;
        size_t n, k;
        double norm = 0, fp, fm, fd, h = 1e-2;
        const char *name;
        float *u;
        if (i < m->n_tensors) {
            if (!m->tensors[i].trainable) continue;
            data = m->tensors[i].data, n = m->tensors[i].numel, gd = g + (data - m->params), name = m->tensors[i].name;
        } else {
            int b;
            data = m->puzzle_emb, n = 3 * (size_t)m->Dp, name = "puzzle_emb.weights";
            gd = (float *)calloc(n, sizeof(float));
            for (b = 0; b < B; b++)
                for (k = 0; k < (size_t)m->Dp; k++) gd[(size_t)pid[b] * m->Dp + k] += prow[(size_t)b * m->Dp + k];
        }
        for (k = 0; k < n; k++) norm += (double)gd[k] * gd[k];
        norm = sqrt(norm);
        if (norm == 0) fail_msg("%s: zero gradient", name);
        u = (float *)malloc(n * sizeof(float));
        for (k = 0; k < n; k++) u[k] = (float)(gd[k] / norm);
        for (k = 0; k < n; k++) data[k] += (float)h * u[k];
        fp = step_loss(&s);
        for (k = 0; k < n; k++) data[k] -= 2 * (float)h * u[k];
        fm = step_loss(&s);
        for (k = 0; k < n; k++) data[k] += (float)h * u[k];
        fd = (fp - fm) / (2 * h);
        /* curvature over h = 1e-2 and fp32 rounding of the loss (~1e-6 / 2h) bound the error */
        if (!(fabs(fd - norm) <= 1e-4 + 2e-2 * norm)) fail_msg("%s: |g| = %.6g, directional FD = %.6g", name, norm, fd);
        free(u);
        if (i == m->n_tensors) free(gd);
    }
    free(g);
    free(prow);
    free(s.z_H), free(s.z_L);
    tr_trainer_destroy(s.t);
    tr_model_destroy(m);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}
static void test_grad_mlp_t(void **state) { (void)state; check_model_grads(0, 1, TR_POS_NONE, TR_LOSS_STABLEMAX, 0); }
/* The workspace plan of every preset x precision x device kind (the CPU, a plain OpenCL device, one with tensor
   cores) for the slice of a 768-row micro-batch: printed as a table, and checked. The 16-bit decisions follow their
   rules, the buffers lie in order inside the total with the room their uses need, and the CPU reserves the plan. */
static void test_ws_plan_per_preset(void **state) {
    static const char *kinds[] = {"cpu", "opencl", "tensor cores"}, *fdts[] = {"fp32", "bf16", "fp16"};
    static const char *layouts[] = {"cpu", "dev+gu", "dev"};
    const char *const *names = tr_model_config_preset_names();
    tr_ctx *ctx = tu_ctx(2, 0);
    int k, f, kind;
    (void)state;
    printf("%-15s %-4s %-12s %5s %-6s %6s %7s %3s %3s %6s %5s %5s %9s\n", "preset", "prec", "device", "rows", "layout", "tape16", "carry16", "d16", "r16", "shared",
           "act16", "mix", "MiB");
    for (k = 0; names[k]; k++) {
        tr_model_config c;
        tr_model *m = (tr_model *)calloc(1, sizeof *m); /* (the shapes alone: the plan needs no weights) */
        assert_non_null(m);
        assert_int_equal(tr_model_config_preset(&c, names[k]), TR_OK);
        tr__model_shape(m, ctx, &c);
        for (f = 0; f < 3; f++) {
            m->fdt = f;
            for (kind = TR__DEV_CPU; kind <= TR__DEV_MMA; kind++) {
                int B = tr__ws_rows(m, 768), half = f != TR_FWD_FLOAT32;
                size_t S = (size_t)m->S, D = (size_t)m->D, BSD = (size_t)B * S * D;
                size_t att = (size_t)ctx->num_threads * tr__attention_scratch_floats(m->S, m->hd), end;
                tr__ws_plan p;
                tr__ws_plan_make(m, B, tr__ws_layout_for(m, B, kind), &p);
                printf("%-15s %-4s %-12s %5d %-6s %6d %7d %3d %3d %6d %5d %5d %9.1f\n", names[k], fdts[f], kinds[kind], B, layouts[p.layout], p.tape16, p.carry16, p.d16,
                       p.r16, p.rec_shared, p.act16, p.mix_rows, (double)p.total * 4 / 1048576.0);
                /* the decisions */
                assert_int_equal(p.layout, kind == TR__DEV_CPU ? 0 : kind == TR__DEV_MMA && half ? TR__WS_DEV : TR__WS_DEV_GU);
                assert_int_equal(p.tape16, half && ctx->tape16);
                assert_int_equal(p.carry16, p.tape16 && S * D % 2 == 0);
                assert_int_equal(p.d16, kind == TR__DEV_CPU && p.tape16);
                assert_int_equal(p.r16, p.d16 || (p.layout == TR__WS_DEV && p.tape16)); /* (mlp_t's too: its column norms read 16 bits) */
                assert_int_equal(p.rec_shared, p.layout == TR__WS_DEV && p.r16);
                assert_int_equal(p.act16, p.d16 || p.layout == TR__WS_DEV);
                assert_true(p.mix_rows >= 1 && p.mix_rows <= B);
                if (kind != TR__DEV_CPU || !m->cfg.mlp_t) assert_int_equal(p.mix_rows, B);
                /* the buffers: record, activation, projection, attention rows, four gradient buffers, dbig, the input */
                assert_true(p.grad_vals >= (p.d16 ? (BSD + 1) / 2 : BSD));
                if (p.rec_shared) {
                    assert_true(p.rec == p.g1 && p.rec + p.rec_row * B <= p.proj);
                    assert_true(p.tmp == 0 && p.att_rows + att <= p.g1);
                } else {
                    assert_true(p.rec == 0 && p.rec_row * B <= p.tmp && p.tmp < p.proj);
                    assert_true(p.proj + p.grad_vals <= p.att_rows && p.att_rows + att <= p.g1);
                }
                assert_true(p.dbig == p.g1 + 4 * p.grad_vals);
                end = p.layout ? p.in : p.total - 256; /* (a device's block input last; the CPU's has none) */
                if (p.layout) assert_true(p.in + BSD == p.total);
                if (!m->cfg.mlp_t) assert_true(p.dbig + 3 * BSD <= end); /* (attention's d qkv, fp32) */
                if (p.layout != TR__WS_DEV) assert_true(p.dbig + (size_t)B * 2 * S * m->I / (p.d16 ? 2 : 1) <= end); /* (the channel SwiGLU's gate_up) */
                if (p.rec_shared) assert_true(p.proj + p.grad_vals <= end);
            }
        }
        free(m);
    }
    for (f = 0; f < 3; f++) { /* a CPU model reserves its plan, in every precision */
        tr_model_config c;
        tr_model *m;
        tr__ws_plan p;
        assert_int_equal(tr_model_config_preset(&c, "trm-tiny"), TR_OK);
        c.forward_dtype = (tr_forward_dtype)f;
        assert_int_equal(tr_model_create(ctx, &c, &m), TR_OK);
        tr__ws_plan_make(m, tr__ws_rows(m, 8), 0, &p);
        assert_int_equal(tr__reserve_ws(m, 8), TR_OK);
        assert_int_equal(m->wsp.B, p.B);
        assert_int_equal(m->wsp.total, p.total);
        assert_int_equal(m->wsp.dbig, p.dbig);
        assert_int_equal(m->wsp.d16, f != TR_FWD_FLOAT32);
        tr_model_destroy(m);
    }
    tr_ctx_destroy(ctx);
}

static void test_grad_attention_rope(void **state) { (void)state; check_model_grads(0, 0, TR_POS_ROPE, TR_LOSS_STABLEMAX, 0); }
static void test_grad_attention_learned_softmax(void **state) { (void)state; check_model_grads(0, 0, TR_POS_LEARNED, TR_LOSS_SOFTMAX, 0); }
static void test_grad_hrm_rope(void **state) { (void)state; check_model_grads(1, 0, TR_POS_ROPE, TR_LOSS_STABLEMAX, 0); }
static void test_grad_hrm_learned_softmax(void **state) { (void)state; check_model_grads(1, 0, TR_POS_LEARNED, TR_LOSS_SOFTMAX, 0); }
/* the same checks with the batch in slices of rows: TRM's two mixers and HRM */
static void test_grad_slices(void **state) {
    (void)state;
    check_model_grads(0, 1, TR_POS_NONE, TR_LOSS_STABLEMAX, 1);
    check_model_grads(0, 1, TR_POS_NONE, TR_LOSS_STABLEMAX, 2);
    check_model_grads(0, 0, TR_POS_ROPE, TR_LOSS_STABLEMAX, 1);
    check_model_grads(1, 0, TR_POS_ROPE, TR_LOSS_STABLEMAX, 1);
}

/* --- training runs: threads, determinism ---------------------------------------------------- */
/* variant 0: TRM attention, 1: TRM mlp_t, 2: HRM attention; mode 1: the recursion in two slices of 2 rows, 2: the token
   mix in passes of one row (wsp.mix_rows); fdt: the forward precision */
enum { RUN_WHOLE, RUN_SLICES, RUN_MIX_PASSES };
static void variant_config(tr_model_config *c, int variant) {
    if (variant == 2) tu_tiny_hrm_config(c, 0, TR_POS_ROPE, TR_LOSS_STABLEMAX);
    else tu_tiny_config(c, variant == 1, variant == 1 ? TR_POS_NONE : TR_POS_ROPE, TR_LOSS_STABLEMAX);
}
/* The parameter count of a variant's model (how large run_steps' params_out is). */
static size_t variant_params(int variant) {
    tr_ctx *ctx = tu_ctx(1, 0);
    tr_model_config c;
    tr_model *m;
    size_t n;
    variant_config(&c, variant);
    assert_int_equal(tr_model_create(ctx, &c, &m), TR_OK);
    n = m->n_params;
    tr_model_destroy(m);
    tr_ctx_destroy(ctx);
    return n;
}
static void run_steps(int threads, int variant, int steps, float *params_out, double *losses, int mode, tr_forward_dtype fdt) {
    enum { B = 4 };
    tr_ctx *ctx = tu_ctx(threads, 11);
    tr_model_config c;
    tr_model *m;
    tr_trainer *t;
    tr_train_config tc = tr_train_config_default();
    int32_t in[B * 16], lab[B * 16], pid[B];
    int k;
    variant_config(&c, variant);
    c.halt_exploration_prob = 0.5;
    c.forward_dtype = fdt;
    assert_int_equal(tr_model_create(ctx, &c, &m), TR_OK);
    if (mode == RUN_SLICES) m->ws_tokens = 2 * m->S;
    if (mode == RUN_MIX_PASSES) m->ws_mix_rows = 1;
    tc.global_batch_size = B, tc.lr = 1e-3, tc.lr_warmup_steps = 2, tc.puzzle_emb_lr = 1e-2;
    assert_int_equal(tr_trainer_create(m, &tc, &t), TR_OK);
    for (k = 0; k < steps; k++) {
        tr_batch b;
        tr_metrics mt;
        tu_tiny_batch(B, 16, 6, 1000 + (uint64_t)k, in, lab, pid, 3, 0);
        b.inputs = in, b.labels = lab, b.puzzle_identifiers = pid, b.batch_size = B;
        assert_int_equal(tr_trainer_step(t, &b, &mt), TR_OK);
        losses[k] = mt.loss;
    }
    memcpy(params_out, m->params, m->n_params * sizeof(float));
    tr_trainer_destroy(t);
    tr_model_destroy(m);
    tr_ctx_destroy(ctx);
}

static void test_threads_and_determinism(void **state) {
    int variant;
    (void)state;
    for (variant = 0; variant < 3; variant++) {
        size_t n = variant_params(variant);
        float *p1, *p2, *p3, *p4;
        double l1[5], l2[5], l3[5], l4[5];
        p1 = (float *)malloc(n * 4), p2 = (float *)malloc(n * 4), p3 = (float *)malloc(n * 4), p4 = (float *)malloc(n * 4);
        run_steps(1, variant, 5, p1, l1, RUN_WHOLE, TR_FWD_FLOAT32);
        run_steps(2, variant, 5, p2, l2, RUN_WHOLE, TR_FWD_FLOAT32);
        run_steps(2, variant, 5, p3, l3, RUN_WHOLE, TR_FWD_FLOAT32);
        run_steps(2, variant, 5, p4, l4, RUN_SLICES, TR_FWD_FLOAT32);
        /* a fixed seed and thread count is bit-identical */
        assert_memory_equal(p2, p3, n * 4);
        assert_memory_equal(l2, l3, sizeof l2);
        /* no kernel reduces across threads, so 1 and 2 threads agree exactly too; the bound
           below is the reassociation tolerance we would accept otherwise */
        tu_assert_close("1 vs 2 threads, params after 5 steps", p1, p2, n, 1e-6, 1e-5);
        assert_memory_equal(p1, p2, n * 4);
        /* slices of rows: the same forward (rows are independent), so the first loss is the same bits; the
           weight gradients are sums in another order, whose fp32 reassociation the bound allows */
        assert_true(l4[0] == l2[0]);
        tu_assert_close("slices vs whole batch, params after 5 steps", p4, p2, n, 1e-6, 1e-5);
        free(p1), free(p2), free(p3), free(p4);
    }
}

/* The CPU's workspace runs the token mix in passes of the rows its scratch holds (wsp.mix_rows): in passes of one row
   the steps give the bits of one pass over the batch, in every precision (each row's products are its own, and the
   weight gradients sum the rows in the same order). */
static void test_token_mix_passes(void **state) {
    static const tr_forward_dtype fdts[3] = {TR_FWD_FLOAT32, TR_FWD_BFLOAT16, TR_FWD_FLOAT16};
    int f;
    (void)state;
    for (f = 0; f < 3; f++) {
        tr_ctx *ctx = tu_ctx(1, 0);
        tr_model_config c;
        tr_model *m;
        size_t n;
        float *whole, *passes;
        double lw[4], lp[4];
        variant_config(&c, 1);
        assert_int_equal(tr_model_create(ctx, &c, &m), TR_OK);
        n = m->n_params;
        {
            tr__ws_plan p;
            tr__ws_plan_make(m, 4, 0, &p);
            assert_int_equal(p.mix_rows, 4); /* (the tiny model's dbig holds the batch: one pass) */
            m->ws_mix_rows = 1;
            tr__ws_plan_make(m, 4, 0, &p);
            assert_int_equal(p.mix_rows, 1);
            tr__ws_plan_make(m, 4, TR__WS_DEV_GU, &p);
            assert_int_equal(p.mix_rows, 4); /* (a device's workspace holds all rows) */
        }
        tr_model_destroy(m);
        tr_ctx_destroy(ctx);
        whole = (float *)malloc(n * 4), passes = (float *)malloc(n * 4);
        run_steps(2, 1, 4, whole, lw, RUN_WHOLE, fdts[f]);
        run_steps(2, 1, 4, passes, lp, RUN_MIX_PASSES, fdts[f]);
        assert_memory_equal(lw, lp, sizeof lw);
        assert_memory_equal(whole, passes, n * 4);
        free(whole), free(passes);
    }
}

/* --- non-finite losses and gradients ------------------------------------------------------- */
/* nan@3:2 poisons the gradients of steps 3 and 4: both are skipped (the weights do not move, the
   metrics say so), step 5 updates again; three in a row with max_nonfinite_steps 3 stop training
   with TR_ERR_NONFINITE and weights that are still the last good ones. */
static void test_nonfinite_steps(void **state) {
    enum { B = 4 };
    int round;
    (void)state;
    for (round = 0; round < 2; round++) {
        tr_ctx *ctx = tu_ctx(2, 3);
        tr_model_config c;
        tr_model *m;
        tr_trainer *t;
        tr_train_config tc = tr_train_config_default();
        int32_t in[B * 16], lab[B * 16], pid[B];
        float *before;
        int k, last = round == 0 ? 5 : 3;
        tu_tiny_config(&c, 1, TR_POS_NONE, TR_LOSS_STABLEMAX);
        assert_int_equal(tr_model_create(ctx, &c, &m), TR_OK);
        tc.global_batch_size = B, tc.lr = 1e-3, tc.lr_warmup_steps = 1, tc.max_nonfinite_steps = 3;
        assert_int_equal(tr_trainer_create(m, &tc, &t), TR_OK);
        tr_ctx_inject_fault(ctx, TR_FAULT_NONFINITE, round == 0 ? 3 : 1, round == 0 ? 2 : 3);
        before = (float *)malloc(m->n_params * sizeof(float));
        for (k = 1; k <= last; k++) {
            tr_batch b;
            tr_metrics mt;
            int poisoned = round == 0 ? (k == 3 || k == 4) : 1;
            tr_status st;
            tu_tiny_batch(B, 16, 6, 50 + (uint64_t)k, in, lab, pid, 3, 0);
            b.inputs = in, b.labels = lab, b.puzzle_identifiers = pid, b.batch_size = B;
            memcpy(before, m->params, m->n_params * sizeof(float));
            st = tr_trainer_step(t, &b, &mt);
            if (round == 1 && k == 3) {
                assert_int_equal(st, TR_ERR_NONFINITE);
                /* the injected NaN sits in the first gradient: the token embedding's */
                assert_non_null(strstr(tr_ctx_last_error(ctx), "step 3: the gradient of model.inner.embed_tokens.embedding_weight is NaN"));
                assert_non_null(strstr(tr_ctx_last_error(ctx), "3 step(s) in a row"));
            } else {
                assert_int_equal(st, TR_OK);
                assert_true(mt.skipped == (poisoned ? 1.0 : 0.0));
            }
            assert_int_equal(tr_trainer_step_count(t), k);
            if (poisoned) assert_memory_equal(before, m->params, m->n_params * sizeof(float));
            else assert_true(memcmp(before, m->params, m->n_params * sizeof(float)) != 0);
        }
        for (k = 0; k < (int)m->n_params; k++) assert_true(isfinite(m->params[k]));
        free(before);
        tr_trainer_destroy(t);
        tr_model_destroy(m);
        tr_ctx_destroy(ctx);
    }
}

/* --- memory claims ------------------------------------------------------------------------- */
/* A config, batch or file that needs more memory than the limit is refused before anything is
   allocated, and the reason gives the sizes. */
static void test_memory_limit(void **state) {
    tr_ctx_config cc = tr_ctx_config_default();
    tr_ctx *ctx;
    tr_model_config c;
    tr_model *m = NULL;
    tr_trainer *t = NULL;
    tr_train_config tc = tr_train_config_default();
    tr_st_file *f = NULL;
    long allocs;
    char path[64];
    FILE *fp;
    (void)state;
    /* the machine's memory by default: a 200-million-row puzzle table of 512 floats is 410 GB */
    ctx = tu_ctx(1, 0);
    assert_true(tr_ctx_memory_limit(ctx) > ((size_t)1 << 26));
    assert_int_equal(tr_model_config_preset(&c, "trm-sudoku-mlp"), TR_OK);
    c.num_puzzle_identifiers = 200000000;
    allocs = tr_ctx_alloc_count(ctx);
    assert_int_equal(tr_model_create(ctx, &c, &m), TR_ERR_OUT_OF_MEMORY);
    assert_null(m);
    assert_int_equal(tr_ctx_alloc_count(ctx), allocs + 1); /* only the model struct, freed again */
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    assert_non_null(strstr(tr_ctx_last_error(ctx), "200000000 x 512 puzzle table needs"));
    assert_non_null(strstr(tr_ctx_last_error(ctx), "MiB limit"));
    tr_ctx_destroy(ctx);

    /* an explicit limit of 4 MiB: a tiny model fits (2 MiB), training at batch 4096 does not */
    cc.device = "cpu", cc.memory_limit = (size_t)4 << 20;
    assert_int_equal(tr_ctx_create(&cc, &ctx), TR_OK);
    assert_int_equal(tr_ctx_memory_limit(ctx), (size_t)4 << 20);
    tu_tiny_config(&c, 1, TR_POS_NONE, TR_LOSS_STABLEMAX);
    assert_int_equal(tr_model_create(ctx, &c, &m), TR_OK);
    tc.global_batch_size = 4096;
    assert_int_equal(tr_trainer_create(m, &tc, &t), TR_ERR_OUT_OF_MEMORY);
    assert_null(t);
    assert_non_null(strstr(tr_ctx_last_error(ctx), "training at global_batch_size 4096 needs"));
    tc.global_batch_size = 2;
    assert_int_equal(tr_trainer_create(m, &tc, &t), TR_OK);
    tr_trainer_destroy(t);
    tr_model_destroy(m);
    /* a file larger than the limit is not read */
    snprintf(path, sizeof path, "/tmp/tinyrec-memlimit-%d.bin", (int)getpid());
    fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fseek(fp, (5L << 20) - 1, SEEK_SET), 0);
    fputc(0, fp);
    fclose(fp);
    assert_int_equal(tr_st_open(ctx, path, &f), TR_ERR_OUT_OF_MEMORY);
    assert_non_null(strstr(tr_ctx_last_error(ctx), path));
    assert_non_null(strstr(tr_ctx_last_error(ctx), "5242880 bytes, more than the 4 MiB memory limit"));
    remove(path);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

/* --- allocation failure --------------------------------------------------------------------- */
static void alloc_faults(int hrm) {
    tr_ctx *ctx = tu_ctx(2, 0);
    tr_model_config c;
    int k, ok = 0;
    if (hrm) tu_tiny_hrm_config(&c, 0, TR_POS_ROPE, TR_LOSS_STABLEMAX);
    else tu_tiny_config(&c, 0, TR_POS_ROPE, TR_LOSS_STABLEMAX);
    for (k = 1; k < 200 && !ok; k++) {
        tr_model *m = NULL;
        tr_trainer *t = NULL;
        tr_train_config tc = tr_train_config_default();
        tr_status st;
        int32_t in[2 * 16], lab[2 * 16], pid[2];
        tr_batch b;
        tc.global_batch_size = 2;
        tu_tiny_batch(2, 16, 6, 5, in, lab, pid, 3, 0);
        b.inputs = in, b.labels = lab, b.puzzle_identifiers = pid, b.batch_size = 2;
        tr_ctx_fail_alloc_at(ctx, k);
        st = tr_model_create(ctx, &c, &m);
        if (st == TR_OK) st = tr_trainer_create(m, &tc, &t);
        if (st == TR_OK) st = tr_trainer_step(t, &b, NULL);
        if (st == TR_OK) ok = 1;
        else {
            assert_int_equal(st, TR_ERR_OUT_OF_MEMORY);
            assert_non_null(strstr(tr_ctx_last_error(ctx), "out of memory"));
        }
        tr_trainer_destroy(t);
        tr_model_destroy(m);
        assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    }
    assert_true(ok);
    assert_true(k > 5); /* several allocations were failed in turn */
    tr_ctx_fail_alloc_at(ctx, 0);
    tr_ctx_destroy(ctx);
}
static void test_alloc_faults(void **state) { (void)state; alloc_faults(0); }
/* HRM's creation and step, its Q-learning target's buffer and second forward included */
static void test_alloc_faults_hrm(void **state) { (void)state; alloc_faults(1); }

/* --- ACT ------------------------------------------------------------------------------------ */
static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* HRM's ACT: halting on q_halt > q_continue, and the Q-learning target of q_continue:
   sigmoid(max(q_halt', q_continue')) of the next step, or sigmoid(q_halt') at the last step. With
   W_q = 0 the q head is its bias, so every q of every forward is known; lr = 0 keeps it so. */
static void test_hrm_act_q_learning(void **state) {
    enum { B = 4 };
    tr_ctx *ctx = tu_ctx(2, 3);
    tr_model_config c;
    tr_model *m;
    tr_trainer *t;
    tr_train_config tc = tr_train_config_default();
    int32_t in[B * 16], lab[B * 16], pid[B], steps[B];
    tr_batch b;
    tr_metrics mt;
    tr_carry *ev;
    tr_step_outputs o;
    int k, r;
    (void)state;
    tu_tiny_hrm_config(&c, 0, TR_POS_ROPE, TR_LOSS_STABLEMAX);
    c.halt_exploration_prob = 0; /* halt_max_steps = 3 */
    assert_int_equal(tr_model_create(ctx, &c, &m), TR_OK);
    memset(m->W_q, 0, 2 * (size_t)m->D * 4);
    tc.global_batch_size = B, tc.lr = 0, tc.puzzle_emb_lr = 0;
    assert_int_equal(tr_trainer_create(m, &tc, &t), TR_OK);
    assert_non_null(t->qtarget);
    tu_tiny_batch(B, 16, 6, 1, in, lab, pid, 3, 0);
    b.inputs = in, b.labels = lab, b.puzzle_identifiers = pid, b.batch_size = B;
    /* q_halt 1 < q_continue 2: no row halts before halt_max_steps, although q_halt > 0 (TRM's rule) */
    m->b_q[0] = 1, m->b_q[1] = 2;
    for (k = 1; k <= 3; k++) {
        double want = k < 3 ? sigmoid(2) : sigmoid(1); /* the last step bootstraps from q_halt' alone */
        assert_int_equal(tr_trainer_step(t, &b, &mt), TR_OK);
        for (r = 0; r < B; r++) {
            assert_int_equal(t->carry->steps[r], k);
            assert_int_equal(t->carry->halted[r], k == 3);
            assert_float_equal(t->qtarget[r], want, 1e-6);
        }
        /* sum over rows of BCE(q_continue = 2, target) */
        assert_float_equal(mt.q_continue_loss, B * (log1p(exp(-2.0)) + 2.0 - 2.0 * want), 1e-5);
        assert_float_equal(mt.loss, mt.lm_loss + 0.5 * (mt.q_halt_loss + mt.q_continue_loss), 1e-9);
    }
    /* q_halt 2 > q_continue 1: every row halts after its first step; the target is sigmoid(max) = sigmoid(2) */
    m->b_q[0] = 2, m->b_q[1] = 1;
    tr_carry_reset(t->carry);
    assert_int_equal(tr_trainer_step(t, &b, &mt), TR_OK);
    for (r = 0; r < B; r++) {
        assert_int_equal(t->carry->halted[r], 1);
        assert_float_equal(t->qtarget[r], sigmoid(2), 1e-6);
    }
    /* inference halts by the same rule: q_halt > q_continue stops at step 1; otherwise all 3 steps */
    assert_int_equal(tr_carry_create(m, B, &ev), TR_OK);
    memset(&o, 0, sizeof o);
    o.steps = steps;
    assert_int_equal(tr_model_infer(m, ev, &b, 0, NULL, NULL, &o), TR_OK);
    for (r = 0; r < B; r++) assert_int_equal(steps[r], 1);
    m->b_q[0] = 1, m->b_q[1] = 2;
    assert_int_equal(tr_model_infer(m, ev, &b, 0, NULL, NULL, &o), TR_OK);
    for (r = 0; r < B; r++) assert_int_equal(steps[r], 3);
    /* evaluation has no target: no q_continue loss */
    tr_carry_reset(ev);
    assert_int_equal(tr_model_eval_step(m, ev, &b, NULL, &mt), TR_OK);
    assert_true(mt.q_continue_loss == 0);
    tr_carry_destroy(ev);
    tr_trainer_destroy(t);
    /* no_ACT_continue on an HRM: TRM's halting (q_halt > 0), and no Q-learning */
    m->cfg.no_ACT_continue = 1;
    m->b_q[0] = 1, m->b_q[1] = 2;
    assert_int_equal(tr_trainer_create(m, &tc, &t), TR_OK);
    assert_null(t->qtarget);
    assert_int_equal(tr_trainer_step(t, &b, &mt), TR_OK);
    for (r = 0; r < B; r++) assert_int_equal(t->carry->halted[r], 1);
    assert_true(mt.q_continue_loss == 0);
    tr_trainer_destroy(t);
    tr_model_destroy(m);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

static void test_act_carry(void **state) {
    enum { B = 4 };
    tr_ctx *ctx = tu_ctx(2, 3);
    tr_model_config c;
    tr_model *m;
    tr_trainer *t;
    tr_train_config tc = tr_train_config_default();
    int32_t in[B * 16], lab[B * 16], pid[B], in2[B * 16], lab2[B * 16], pid2[B], halted[B], steps[B];
    tr_batch b, b2;
    tr_carry *ev;
    tr_step_outputs o;
    int k, r;
    (void)state;
    tu_tiny_config(&c, 1, TR_POS_NONE, TR_LOSS_STABLEMAX);
    c.halt_exploration_prob = 0;
    assert_int_equal(tr_model_create(ctx, &c, &m), TR_OK);
    /* q_halt = +1 for row 0 and 2 (by their puzzle id), -1 for the others */
    memset(m->W_q, 0, 2 * (size_t)m->D * 4);
    tc.global_batch_size = B;
    assert_int_equal(tr_trainer_create(m, &tc, &t), TR_OK);
    tu_tiny_batch(B, 16, 6, 1, in, lab, pid, 3, 0);
    tu_tiny_batch(B, 16, 6, 2, in2, lab2, pid2, 3, 0);
    b.inputs = in, b.labels = lab, b.puzzle_identifiers = pid, b.batch_size = B;
    b2.inputs = in2, b2.labels = lab2, b2.puzzle_identifiers = pid2, b2.batch_size = B;
    m->b_q[0] = -5;
    assert_int_equal(tr_trainer_step(t, &b, NULL), TR_OK);
    for (r = 0; r < B; r++) assert_int_equal(t->carry->halted[r], 0); /* q_halt < 0, 1 < M */
    /* a second batch is ignored by running rows */
    t->carry->halted[1] = 1;
    assert_int_equal(tr_trainer_step(t, &b2, NULL), TR_OK);
    assert_memory_equal(t->carry->inputs + 0 * 16, in + 0 * 16, 16 * 4);
    assert_memory_equal(t->carry->inputs + 1 * 16, in2 + 1 * 16, 16 * 4);
    assert_int_equal(t->carry->steps[0], 2);
    assert_int_equal(t->carry->steps[1], 1);
    /* halt_max_steps = 3: row 0 halts at its third step */
    assert_int_equal(tr_trainer_step(t, &b2, NULL), TR_OK);
    assert_int_equal(t->carry->halted[0], 1);
    assert_int_equal(t->carry->halted[1], 0);
    /* q_halt > 0 halts after one step in training... */
    m->b_q[0] = 5;
    tr_carry_reset(t->carry);
    assert_int_equal(tr_trainer_step(t, &b, NULL), TR_OK);
    for (r = 0; r < B; r++) assert_int_equal(t->carry->halted[r], 1);
    /* ...but eval ignores it and always runs halt_max_steps */
    assert_int_equal(tr_carry_create(m, B, &ev), TR_OK);
    memset(&o, 0, sizeof o);
    o.halted = halted, o.steps = steps;
    for (k = 1; k <= 3; k++) {
        tr_metrics mt;
        assert_int_equal(tr_model_eval_step(m, ev, &b, &o, &mt), TR_OK);
        for (r = 0; r < B; r++) assert_int_equal(steps[r], k), assert_int_equal(halted[r], k == 3);
        assert_true(k < 3 ? mt.count == 0 : mt.count > 0);
    }
    /* inference halts on q_halt > 0, or runs exactly --steps */
    assert_int_equal(tr_model_infer(m, ev, &b, 0, NULL, NULL, &o), TR_OK);
    for (r = 0; r < B; r++) assert_int_equal(steps[r], 1);
    assert_int_equal(tr_model_infer(m, ev, &b, 2, NULL, NULL, &o), TR_OK);
    for (r = 0; r < B; r++) assert_int_equal(steps[r], 2);
    /* bad ids are errors, not crashes */
    in[5] = 6;
    assert_int_equal(tr_model_eval_step(m, ev, &b, NULL, NULL), TR_ERR_INVALID_ARG);
    assert_non_null(strstr(tr_ctx_last_error(ctx), "inputs[0][5]"));
    in[5] = 1, pid[2] = 3;
    assert_int_equal(tr_trainer_step(t, &b, NULL), TR_ERR_INVALID_ARG);
    assert_non_null(strstr(tr_ctx_last_error(ctx), "puzzle_identifiers[2]"));
    pid[2] = 0, lab[3] = 9;
    assert_int_equal(tr_trainer_step(t, &b, NULL), TR_ERR_INVALID_ARG);
    b.batch_size = 3;
    assert_int_equal(tr_trainer_step(t, &b, NULL), TR_ERR_INVALID_ARG);
    tr_carry_destroy(ev);
    tr_trainer_destroy(t);
    tr_model_destroy(m);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

/* --- packed weights (>>sgemm's tr__pw) ---------------------------------------------------- */
/* Logits of one eval step of a fresh carry. */
static void eval_logits(tr_model *m, const tr_batch *b, float *logits) {
    tr_carry *c;
    tr_step_outputs out;
    memset(&out, 0, sizeof out);
    out.logits = logits;
    assert_int_equal(tr_carry_create(m, b->batch_size, &c), TR_OK);
    tr_carry_reset(c);
    assert_int_equal(tr_model_eval_step(m, c, b, &out, NULL), TR_OK);
    tr_carry_destroy(c);
}

/* Every packing the model holds is stale: a writer bumped the version after their last use. */
static void assert_all_stale(const tr_model *m) {
    int i;
    assert_true(m->pw.count > 0);
    for (i = 0; i < m->pw.count; i++) assert_true(m->pw.e[i].version != m->pw.version);
}

/* The next forward after a write sees it: the logits equal those of a fresh model (whose weights
   were never packed) holding the same tensors, bit for bit. */
static void assert_like_fresh(tr_model *m, const tr_batch *b, size_t nlog, float *got, float *want) {
    tr_model *f;
    int i;
    assert_int_equal(tr_model_create(m->ctx, &m->cfg, &f), TR_OK);
    for (i = 0; i < m->n_tensors; i++) {
        tr_tensor_view a, z;
        assert_int_equal(tr_model_tensor(m, i, &a), TR_OK);
        assert_int_equal(tr_model_tensor(f, i, &z), TR_OK);
        memcpy(z.data, a.data, a.numel * sizeof(float));
    }
    assert_int_equal(tr_model_commit_tensors(f), TR_OK);
    eval_logits(m, b, got);
    eval_logits(f, b, want);
    assert_memory_equal(got, want, nlog * sizeof(float));
    tr_model_destroy(f);
}

/* The writers of the weights (optimizer step, EMA swap, a tensor view's write and commit) leave
   no stale packing behind, in both token mixers (mlp_t packs its token weights as op(A)); within
   an eval step the packings are reused (far fewer packings than weight products). */
static void test_packed_weights_writers(void **state) {
    enum { B = 4 };
    int mlp_t;
    (void)state;
    for (mlp_t = 0; mlp_t < 2; mlp_t++) {
        tr_ctx *ctx = tu_ctx(2, 7);
        tr_model_config c;
        tr_model *m;
        tr_trainer *t;
        tr_train_config tc = tr_train_config_default();
        tr_tensor_view v;
        tr_batch b;
        tr_metrics mt;
        int32_t in[B * 16], lab[B * 16], pid[B];
        size_t nlog, k;
        float *got, *want;
        long packs;
        int step;
        tu_tiny_config(&c, mlp_t, mlp_t ? TR_POS_NONE : TR_POS_ROPE, TR_LOSS_STABLEMAX);
        assert_int_equal(tr_model_create(ctx, &c, &m), TR_OK);
        tc.global_batch_size = B, tc.lr = 1e-2, tc.lr_warmup_steps = 1, tc.ema = 1, tc.ema_decay = 0.5;
        assert_int_equal(tr_trainer_create(m, &tc, &t), TR_OK);
        tu_tiny_batch(B, 16, 6, 77, in, lab, pid, 3, 0);
        b.inputs = in, b.labels = lab, b.puzzle_identifiers = pid, b.batch_size = B;
        nlog = (size_t)B * 16 * 6;
        got = (float *)malloc(nlog * sizeof(float)), want = (float *)malloc(nlog * sizeof(float));
        for (step = 0; step < 2; step++) assert_int_equal(tr_trainer_step(t, &b, &mt), TR_OK);
        assert_all_stale(m); /* the optimizer step */
        assert_like_fresh(m, &b, nlog, got, want);

        packs = m->pw.packs;
        eval_logits(m, &b, got); /* H_cycles x (L_cycles + 1) = 6 passes, 4 weight products per block and pass */
        assert_true(m->pw.packs > packs && m->pw.packs - packs <= 4L * c.L_layers + 1);

        assert_int_equal(tr_trainer_swap_ema(t), TR_OK);
        assert_all_stale(m); /* the EMA swap */
        assert_like_fresh(m, &b, nlog, got, want);
        assert_int_equal(tr_trainer_swap_ema(t), TR_OK);

        assert_int_equal(tr_model_find_tensor(m, mlp_t ? "model.inner.L_level.layers.0.mlp_t.gate_up_proj.weight" : "model.inner.L_level.layers.0.self_attn.qkv_proj.weight", &v), TR_OK);
        eval_logits(m, &b, got);
        for (k = 0; k < v.numel; k++) v.data[k] *= 1.5f;
        assert_int_equal(tr_model_commit_tensors(m), TR_OK);
        assert_all_stale(m); /* the view's commit */
        assert_like_fresh(m, &b, nlog, got, want);
        assert_true(memcmp(got, want, nlog * sizeof(float)) == 0);

        free(got), free(want);
        tr_trainer_destroy(t);
        tr_model_destroy(m);
        assert_int_equal(tr_ctx_live_allocs(ctx), 0);
        tr_ctx_destroy(ctx);
    }
}

/* The steps allocate nothing once warm: after a first training step, eval step and inference (which
   size the workspaces, the tape, the GEMM scratch and the weight packings), further ones make no
   allocation at all (tr_ctx_alloc_count counts every one, freed or not), for TRM with either token
   mixer and for HRM, with the EMA on, at batch 4 and at batch 1. */
static void test_steady_state_allocs(void **state) {
    enum { B = 4 };
    int kind;
    (void)state;
    for (kind = 0; kind < 3; kind++) {
        tr_ctx *ctx = tu_ctx(2, 9);
        tr_model_config c;
        tr_model *m;
        tr_trainer *t;
        tr_train_config tc = tr_train_config_default();
        tr_carry *ev, *one;
        tr_batch b, b1;
        tr_step_outputs o;
        int32_t in[B * 16], lab[B * 16], pid[B];
        int round;
        if (kind == 2) tu_tiny_hrm_config(&c, 1, TR_POS_NONE, TR_LOSS_STABLEMAX);
        else tu_tiny_config(&c, kind, kind ? TR_POS_NONE : TR_POS_ROPE, TR_LOSS_SOFTMAX);
        assert_int_equal(tr_model_create(ctx, &c, &m), TR_OK);
        tc.global_batch_size = B, tc.ema = kind != 2;
        assert_int_equal(tr_trainer_create(m, &tc, &t), TR_OK);
        assert_int_equal(tr_carry_create(m, B, &ev), TR_OK);
        assert_int_equal(tr_carry_create(m, 1, &one), TR_OK);
        tu_tiny_batch(B, 16, 6, 31, in, lab, pid, 3, 0);
        b.inputs = in, b.labels = lab, b.puzzle_identifiers = pid, b.batch_size = B;
        b1 = b, b1.labels = NULL, b1.batch_size = 1;
        memset(&o, 0, sizeof o);
        for (round = 0; round < 2; round++) {
            long before = tr_ctx_alloc_count(ctx);
            assert_int_equal(tr_trainer_step(t, &b, NULL), TR_OK);
            assert_int_equal(tr_trainer_step(t, &b, NULL), TR_OK);
            tr_carry_reset(ev);
            assert_int_equal(tr_model_eval_step(m, ev, &b, &o, NULL), TR_OK);
            tr_carry_reset(one);
            assert_int_equal(tr_model_infer(m, one, &b1, 0, NULL, NULL, &o), TR_OK);
            if (round) assert_int_equal(tr_ctx_alloc_count(ctx) - before, 0);
        }
        tr_carry_destroy(ev), tr_carry_destroy(one);
        tr_trainer_destroy(t);
        tr_model_destroy(m);
        assert_int_equal(tr_ctx_live_allocs(ctx), 0);
        tr_ctx_destroy(ctx);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_param_counts),
        cmocka_unit_test(test_bad_config),
        cmocka_unit_test(test_grad_mlp_t),
        cmocka_unit_test(test_token_mix_passes),
        cmocka_unit_test(test_ws_plan_per_preset),
        cmocka_unit_test(test_grad_attention_rope),
        cmocka_unit_test(test_grad_attention_learned_softmax),
        cmocka_unit_test(test_grad_hrm_rope),
        cmocka_unit_test(test_grad_hrm_learned_softmax),
        cmocka_unit_test(test_grad_slices),
        cmocka_unit_test(test_threads_and_determinism),
        cmocka_unit_test(test_alloc_faults),
        cmocka_unit_test(test_alloc_faults_hrm),
        cmocka_unit_test(test_hrm_act_q_learning),
        cmocka_unit_test(test_act_carry),
        cmocka_unit_test(test_nonfinite_steps),
        cmocka_unit_test(test_memory_limit),
        cmocka_unit_test(test_packed_weights_writers),
        cmocka_unit_test(test_steady_state_allocs),
    };
    return cmocka_run_group_tests_name("model", tests, NULL, NULL);
}
