/* The whole model on the OpenCL device: training trajectories against the CPU, every fallback
   path of DESIGN §4 forced by fault injection, and checkpoints moving between the devices.

   Every case trains the same tiny TRM on the same 6 batches and compares the per-step loss
   with a CPU run. Device and CPU sum in different orders (GEMM tiles, reductions), so the
   carries differ by float rounding that grows through the recursion (the parity suite
   measures up to 3e-4 after 3 steps); the loss, a mean over tokens, is compared at rtol 2e-3.
   A lost or repeated step, a wrong micro-batch accumulation or a stale carry changes the loss
   by O(1e-2) or more, and the step counter is checked exactly.

   The same cases run in bfloat16 and float16 (g_fdt), against the CPU's scalar kernels, whose sums
   are ordered much as PoCL's: both round at the same points with bit-identical rounding kernels, and
   the first 2 steps agree to 1e-6 relative on PoCL (2e-4 on an H100), so they are held to the fp32
   tolerance. After that a sum that differs in its last fp32 bit sometimes rounds to the neighbouring
   16-bit value, a gradient near zero changes sign, and AdamATan2 turns that into a full lr step: the
   runs drift apart chaotically (measured on the CPU alone, its scalar and AVX2 kernels differ by 0.7%
   at step 3 and 0.8% at step 6; PoCL against the scalar CPU by 1.9% at step 6; an H100 by 0.3% at
   step 3 in float16), so steps 3-6 are compared at rtol 5e-2 there. */
#define TINYREC_IMPLEMENTATION
#include "test_util.h"

enum { NB = 8, NSTEPS = 6, SEQ = 16, VOCAB = 6 };
static tr_forward_dtype g_fdt = TR_FWD_FLOAT32; /* the precision every model of the suite is created in */

typedef struct log_capture {
    char text[8192];
    int device_lines; /* WARN lines that start with "device:" */
} log_capture;

static void capture(void *user, tr_log_level level, const char *msg) {
    log_capture *lc = (log_capture *)user;
    size_t n = strlen(lc->text);
    if (level >= TR_LOG_WARN && strncmp(msg, "device:", 7) == 0) lc->device_lines++;
    snprintf(lc->text + n, sizeof lc->text - n, "%s\n", msg);
}

/* A context on `device` ("cpu" or the test's OpenCL selector) with a captured log. */
static tr_ctx *make_ctx(const char *device, log_capture *lc) {
    tr_ctx_config cc = tr_ctx_config_default();
    tr_ctx *ctx = NULL;
    const char *sel = getenv("TINYREC_TEST_OPENCL");
    cc.num_threads = 2;
    cc.seed = 3;
    cc.device = strcmp(device, "cpu") == 0 ? "cpu" : strcmp(device, "opencl") != 0 ? device : (sel && *sel ? sel : "opencl");
    cc.log = capture;
    cc.log_user = lc;
    memset(lc, 0, sizeof *lc);
    assert_int_equal(tr_ctx_create(&cc, &ctx), TR_OK);
    return ctx;
}

static void make_batches(int32_t *in, int32_t *lab, int32_t *pid) {
    int k;
    for (k = 0; k < NSTEPS; k++) tu_tiny_batch(NB, SEQ, VOCAB, 100 + k, in + k * NB * SEQ, lab + k * NB * SEQ, pid + k * NB, 3, (uint64_t)k);
}

static tr_train_config train_config(void) {
    tr_train_config tc = tr_train_config_default();
    tc.global_batch_size = NB;
    tc.lr = 1e-3, tc.lr_warmup_steps = 2, tc.puzzle_emb_lr = 1e-2, tc.ema_decay = 0.9;
    return tc;
}

/* Trains steps [from, to) on (m, t) and records each step's loss. */
static void train_steps(tr_trainer *t, int from, int to, double *loss) {
    static int32_t in[NSTEPS * NB * SEQ], lab[NSTEPS * NB * SEQ], pid[NSTEPS * NB];
    int k;
    make_batches(in, lab, pid);
    for (k = from; k < to; k++) {
        tr_batch b;
        tr_metrics mt;
        b.inputs = in + k * NB * SEQ, b.labels = lab + k * NB * SEQ, b.puzzle_identifiers = pid + k * NB, b.batch_size = NB;
        if (tr_trainer_step(t, &b, &mt) != TR_OK) fail_msg("step %d: %s", k + 1, tr_ctx_last_error(t->m->ctx));
        loss[k] = mt.loss;
        assert_int_equal(tr_trainer_step_count(t), k + 1);
    }
}

static int g_hidden; /* variant_config: this hidden size instead of the tiny one's (0) */
/* mlp_t 0: TRM attention, 1: TRM mlp_t, 2: HRM attention (with its Q-learning second forward) */
static void variant_config(tr_model_config *c, int mlp_t) {
    if (mlp_t == 2) tu_tiny_hrm_config(c, 0, TR_POS_ROPE, TR_LOSS_STABLEMAX);
    else tu_tiny_config(c, mlp_t, mlp_t ? TR_POS_NONE : TR_POS_ROPE, TR_LOSS_STABLEMAX);
    c->forward_dtype = g_fdt;
    if (g_hidden) c->hidden_size = g_hidden;
}

/* The reference trajectory: the same model and batches on the CPU. */
static void cpu_trajectory(int mlp_t, double *loss) {
    log_capture lc;
    tr_ctx *ctx = make_ctx("cpu", &lc);
    tr_model_config c;
    tr_model *m;
    tr_trainer *t;
    tr_train_config tc = train_config();
    variant_config(&c, mlp_t);
    if (g_fdt != TR_FWD_FLOAT32) assert_int_equal(tr_ctx_set_simd(ctx, "scalar"), TR_OK); /* (see the top) */
    assert_int_equal(tr_model_create(ctx, &c, &m), TR_OK);
    assert_int_equal(tr_trainer_create(m, &tc, &t), TR_OK);
    train_steps(t, 0, NSTEPS, loss);
    tr_trainer_destroy(t);
    tr_model_destroy(m);
    tr_ctx_destroy(ctx);
}

static void assert_trajectory(const char *what, const double *got, const double *ref, int from, int to) {
    int k;
    double rtol, worst = 0;
    for (k = from; k < to; k++) {
        rtol = g_fdt == TR_FWD_FLOAT32 || k < 2 ? 2e-3 : 5e-2;
        if (getenv("TRAJ_DEBUG")) print_message("  step %d: %.9g vs cpu %.9g\n", k + 1, got[k], ref[k]);
        worst = fmax(worst, fabs(got[k] - ref[k]) / fabs(ref[k]));
        if (!(fabs(got[k] - ref[k]) <= rtol * fabs(ref[k]))) fail_msg("%s (%s): step %d loss %.9g, CPU %.9g", what, tr_forward_dtype_name(g_fdt), k + 1, got[k], ref[k]);
    }
    if (g_fdt != TR_FWD_FLOAT32) print_message("%s (%s): worst relative loss difference %.2e\n", what, tr_forward_dtype_name(g_fdt), worst);
}

/* Runs the whole trajectory on `device` with a fault injected, the context's log in lc; returns
   whether the training ended on an OpenCL device. */
static long g_mma_products, g_packs_reused, g_wpacks_reused; /* the last run_on's products on the tensor-core kernels,
                                                               the operand packings they shared (packing windows), and
                                                               their reuses of a weight's (weights held still) */
static int g_slices;        /* run_on: the recursion in slices of 2 rows (tr__ws_rows) */
static int g_ws_layout;     /* run_on: the device workspace's layout (m->wsp.layout) at the end */
static int g_ws_r16;        /* and whether its record was 16-bit, the tape's read and written as it is (wsp.r16) */
static int run_on(const char *device, int mlp_t, tr_fault fault, long at, int rows, log_capture *lc, double *loss) {
    int on_dev;
    tr_ctx *ctx = make_ctx(device, lc);
    tr_model_config c;
    tr_model *m;
    tr_trainer *t;
    tr_train_config tc = train_config();
    tr_ctx_inject_fault(ctx, fault, at, rows);
    variant_config(&c, mlp_t);
    assert_int_equal(tr_model_create(ctx, &c, &m), TR_OK);
    if (g_slices) m->ws_tokens = 2 * m->S;
    assert_int_equal(tr_trainer_create(m, &tc, &t), TR_OK);
    train_steps(t, 0, NSTEPS, loss);
    on_dev = ctx->dev_active;
    g_ws_layout = m->wsp.layout, g_ws_r16 = m->wsp.r16;
    /* tr_model_memory counts the layout reserved; with TR__WS_DEV gate_up and dg are names that no kernel can write */
    if (on_dev) assert_int_equal(tr__ws_layout_for(m, m->wsp.B, tr__ws_device_kind(ctx)), m->wsp.layout);
    if (m->wsp.layout == TR__WS_DEV) {
        assert_non_null(m->ws_name);
        assert_int_not_equal(tr__op_round(ctx, TR_FWD_BFLOAT16, m->ws_name, 16), TR_OK);
    } else
        assert_null(m->ws_name);
    g_mma_products = ctx->cl ? ctx->cl->mma_products : 0;
    g_packs_reused = ctx->cl ? ctx->cl->packs_reused : 0;
    g_wpacks_reused = ctx->cl ? ctx->cl->wpacks_reused : 0;
    if (ctx->cl) assert_null(ctx->cl->still_lo); /* (let go after each step) */
    tr_trainer_destroy(t);
    tr_model_destroy(m);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
    return on_dev;
}

static int run_with_fault(int mlp_t, tr_fault fault, long at, int rows, log_capture *lc, double *loss) {
    return run_on("opencl", mlp_t, fault, at, rows, lc, loss);
}

static void need_device(void) {
    log_capture lc;
    tr_ctx *ctx = make_ctx("opencl", &lc);
    int ok = tr_ctx_use_device(ctx);
    char name[320];
    snprintf(name, sizeof name, "%s", tr_ctx_device_name(ctx));
    tr_ctx_destroy(ctx);
    if (!ok) tu_no_opencl(name);
}

/* The CPU's trajectory (ref) and the same training on the device with a fault injected (got);
   returns whether the training ended on the device. */
static int device_run(int mlp_t, tr_fault fault, long at, int rows, log_capture *lc, double *ref, double *got) {
    need_device();
    cpu_trajectory(mlp_t, ref);
    return run_with_fault(mlp_t, fault, at, rows, lc, got);
}

static void check_trajectory(int mlp_t) {
    double ref[NSTEPS], got[NSTEPS];
    log_capture lc;
    assert_true(device_run(mlp_t, TR_FAULT_NONE, 0, 0, &lc, ref, got));
    assert_int_equal(lc.device_lines, 0);
    assert_trajectory(mlp_t == 2 ? "opencl hrm" : mlp_t ? "opencl mlp_t" : "opencl attention", got, ref, 0, NSTEPS);
}
static void test_trajectory_mlp_t(void **state) { (void)state; check_trajectory(1); }
static void test_trajectory_attention(void **state) { (void)state; check_trajectory(0); }
static void test_trajectory_hrm(void **state) { (void)state; check_trajectory(2); }

/* Device memory short of the whole batch at step 3 (halved micro-batches, on the device), then the
   enqueue-th command of step 4 failing (the step redone on the CPU from the carry it began with). */
static void check_oom_and_enqueue(int mlp_t, int enqueue, const char *what) {
    double ref[NSTEPS], got[NSTEPS];
    log_capture lc;
    char name[64];
    assert_true(device_run(mlp_t, TR_FAULT_DEVICE_OOM, 3, NB / 2, &lc, ref, got));
    if (lc.device_lines != 1 || !strstr(lc.text, "micro-batches of 4 rows")) fail_msg("log:\n%s", lc.text);
    snprintf(name, sizeof name, "%s oom, halved", what);
    assert_trajectory(name, got, ref, 0, NSTEPS);
    assert_false(run_with_fault(mlp_t, TR_FAULT_ENQUEUE, 4, enqueue, &lc, got));
    if (lc.device_lines != 1 || !strstr(lc.text, "during step 4") || !strstr(lc.text, "to the cpu")) fail_msg("log:\n%s", lc.text);
    snprintf(name, sizeof name, "%s enqueue failure", what);
    assert_trajectory(name, got, ref, 0, NSTEPS);
}

/* HRM's fallbacks: micro-batches (the Q target's scratch is per micro-batch) and a failed
   command mid-step, whose redo on the CPU must start from the carry the step began with. */
static void test_hrm_oom_and_enqueue_faults(void **state) {
    (void)state;
    check_oom_and_enqueue(2, 60, "hrm");
}

/* No library, no platform, no device, a build failure. A named device ("opencl") that cannot open fails the
   model's creation with the reason and the process's OpenCL driver list, and leaves the device unchosen (the
   CPU can be chosen then); with ",cpu" the CPU, one line saying why, and the CPU's own results (bit for bit:
   it is the CPU path). */
static void test_open_faults_fall_back_to_cpu(void **state) {
    static const tr_fault faults[] = {TR_FAULT_NO_LIBRARY, TR_FAULT_NO_PLATFORM, TR_FAULT_NO_DEVICE, TR_FAULT_BUILD};
    static const char *const words[] = {"library", "platform", "device", "build"};
    double ref[NSTEPS], got[NSTEPS];
    int i;
    (void)state;
#if !TINYREC_OPENCL
    tu_no_opencl("this build has no TINYREC_OPENCL");
#endif
    cpu_trajectory(1, ref);
    for (i = 0; i < 4; i++) {
        log_capture lc;
        tr_ctx *ctx = make_ctx("opencl", &lc);
        tr_model_config c;
        tr_model *m = NULL;
        tr_ctx_inject_fault(ctx, faults[i], 0, 0);
        variant_config(&c, 1);
        assert_int_equal(tr_model_create(ctx, &c, &m), TR_ERR_DEVICE);
        assert_null(m);
        if (!strstr(tr_ctx_last_error(ctx), words[i]) || !strstr(tr_ctx_last_error(ctx), "OCL_ICD_FILENAMES=") ||
            !strstr(tr_ctx_last_error(ctx), "device 'opencl' cannot be opened"))
            fail_msg("fault %d: the reason: %s", (int)faults[i], tr_ctx_last_error(ctx));
        assert_int_equal(tr_ctx_open_device(ctx), TR_ERR_DEVICE); /* tried again: the same failure */
        assert_int_equal(tr_ctx_set_device(ctx, "cpu"), TR_OK);
        assert_int_equal(tr_model_create(ctx, &c, &m), TR_OK);
        assert_false(tr_ctx_use_device(ctx));
        tr_model_destroy(m);
        tr_ctx_destroy(ctx);
        assert_false(run_on("opencl,cpu", 1, faults[i], 0, 0, &lc, got));
        if (lc.device_lines != 1 || !strstr(lc.text, words[i]) || !strstr(lc.text, "using the cpu"))
            fail_msg("fault %d: expected one device line naming '%s', log:\n%s", (int)faults[i], words[i], lc.text);
        assert_memory_equal(got, ref, sizeof ref);
    }
}

/* The selectors: "gpu" on a machine without an OpenCL GPU (PoCL's CPU device here) is an error, "auto" the
   CPU; an index past the devices is an error naming the count; ",cpu" after an unknown word is refused. */
static void test_named_device_is_an_error(void **state) {
    tr_opencl_list l;
    tr_ctx *ctx;
    log_capture lc;
    int gpus = 0, devices, i;
    (void)state;
#if !TINYREC_OPENCL
    tu_no_opencl("this build has no TINYREC_OPENCL");
#endif
    ctx = make_ctx("auto", &lc);
    assert_int_equal(tr_opencl_list_devices(ctx, &l), TR_OK);
    for (i = 0; i < l.num_devices; i++) gpus += l.devices[i].is_gpu;
    devices = l.num_devices;
    tr_opencl_list_free(ctx, &l);
    if (!gpus) {
        assert_int_equal(tr_ctx_open_device(ctx), TR_OK);
        assert_false(tr_ctx_use_device(ctx));
        tr_ctx_destroy(ctx);
        ctx = make_ctx("gpu", &lc);
        assert_int_equal(tr_ctx_open_device(ctx), TR_ERR_DEVICE);
        assert_non_null(strstr(tr_ctx_last_error(ctx), "device 'gpu' cannot be opened"));
        tr_ctx_destroy(ctx);
        ctx = make_ctx("gpu,cpu", &lc);
        assert_int_equal(tr_ctx_open_device(ctx), TR_OK);
        assert_false(tr_ctx_use_device(ctx));
    }
    tr_ctx_destroy(ctx);
    ctx = make_ctx("opencl:40", &lc);
    assert_int_equal(tr_ctx_open_device(ctx), TR_ERR_DEVICE);
    if (devices && !strstr(tr_ctx_last_error(ctx), "no OpenCL device #40")) fail_msg("reason: %s", tr_ctx_last_error(ctx));
    assert_int_equal(tr_ctx_set_device(ctx, "bogus,cpu"), TR_ERR_INVALID_ARG);
    tr_ctx_destroy(ctx);
}

/* Device memory runs out at step 3 for more than half the batch: the step is redone with
   half-size micro-batches, training stays on the device, no step is lost. */
static void test_oom_halves_the_micro_batch(void **state) {
    double ref[NSTEPS], got[NSTEPS];
    log_capture lc;
    (void)state;
    assert_true(device_run(1, TR_FAULT_DEVICE_OOM, 3, NB / 2, &lc, ref, got));
    if (lc.device_lines != 1 || !strstr(lc.text, "micro-batches of 4 rows")) fail_msg("log:\n%s", lc.text);
    assert_trajectory("oom, halved", got, ref, 0, NSTEPS);
}

/* Out of memory however small the micro-batch: halve, halve, halve, then the CPU. */
static void test_oom_everywhere_moves_to_cpu(void **state) {
    double ref[NSTEPS], got[NSTEPS];
    log_capture lc;
    (void)state;
    assert_false(device_run(0, TR_FAULT_DEVICE_OOM, 2, 0, &lc, ref, got));
    if (!strstr(lc.text, "micro-batches of 1 rows") || !strstr(lc.text, "moved the model, optimizer state and ACT carry to the cpu"))
        fail_msg("log:\n%s", lc.text);
    assert_int_equal(lc.device_lines, 4); /* 8 -> 4 -> 2 -> 1, then the move */
    assert_trajectory("oom, moved to the cpu", got, ref, 0, NSTEPS);
}

/* The 40th device command of step 4 fails (mid-forward): the step is redone on the CPU from
   the carry it started with. */
static void test_enqueue_failure_moves_to_cpu(void **state) {
    double ref[NSTEPS], got[NSTEPS];
    log_capture lc;
    (void)state;
    assert_false(device_run(1, TR_FAULT_ENQUEUE, 4, 40, &lc, ref, got));
    if (lc.device_lines != 1 || !strstr(lc.text, "during step 4") || !strstr(lc.text, "to the cpu")) fail_msg("log:\n%s", lc.text);
    assert_trajectory("enqueue failure", got, ref, 0, NSTEPS);
}

/* Train 3 steps on one device, save model + trainer state, resume on the other for 3 more. */
static void move_between(const char *first, const char *second) {
    double ref[NSTEPS], got[NSTEPS];
    log_capture lc1, lc2;
    tr_ctx *a = make_ctx(first, &lc1), *b = make_ctx(second, &lc2);
    tr_model_config c;
    tr_model *ma, *mb;
    tr_trainer *ta, *tb;
    tr_train_config tc = train_config();
    char mpath[] = "/tmp/tinyrec_port_XXXXXX";
    char spath[64];
    int fd = mkstemp(mpath);
    assert_true(fd >= 0);
    close(fd);
    snprintf(spath, sizeof spath, "%s.state", mpath);
    cpu_trajectory(1, ref);
    tu_tiny_config(&c, 1, TR_POS_NONE, TR_LOSS_STABLEMAX);
    assert_int_equal(tr_model_create(a, &c, &ma), TR_OK);
    assert_int_equal(tr_trainer_create(ma, &tc, &ta), TR_OK);
    train_steps(ta, 0, 3, got);
    assert_int_equal(tr_model_save(ma, mpath, NULL), TR_OK);
    assert_int_equal(tr_trainer_save(ta, spath, NULL, 0), TR_OK);
    assert_int_equal(tr_model_load(b, mpath, NULL, &mb), TR_OK);
    assert_int_equal(tr_trainer_create(mb, &tc, &tb), TR_OK);
    assert_int_equal(tr_trainer_load(tb, spath, NULL, 0, NULL), TR_OK);
    assert_int_equal(tr_trainer_step_count(tb), 3);
    train_steps(tb, 3, NSTEPS, got);
    assert_trajectory(first, got, ref, 0, NSTEPS);
    assert_int_equal(a->dev_active, strcmp(first, "cpu") != 0);
    assert_int_equal(b->dev_active, strcmp(second, "cpu") != 0);
    tr_trainer_destroy(ta), tr_trainer_destroy(tb);
    tr_model_destroy(ma), tr_model_destroy(mb);
    tr_ctx_destroy(a), tr_ctx_destroy(b);
    remove(mpath), remove(spath);
}
static void test_opencl_to_cpu(void **state) { (void)state; need_device(); move_between("opencl", "cpu"); }
static void test_cpu_to_opencl(void **state) { (void)state; need_device(); move_between("cpu", "opencl"); }

/* Inference on the device gives the CPU's answers (halting included) on a trained model. */
static void test_infer_matches_cpu(void **state) {
    log_capture l1, l2;
    tr_ctx *cc, *dc;
    tr_model_config c;
    tr_model *cm, *dm;
    tr_carry *ccar, *dcar;
    int32_t in[NB * SEQ], lab[NB * SEQ], pid[NB], p1[NB * SEQ], p2[NB * SEQ], s1[NB], s2[NB];
    float q1[NB], q2[NB];
    tr_batch b;
    tr_step_outputs o1, o2;
    int i;
    (void)state;
    need_device();
    cc = make_ctx("cpu", &l1), dc = make_ctx("opencl", &l2);
    tu_tiny_config(&c, 0, TR_POS_ROPE, TR_LOSS_STABLEMAX);
    assert_int_equal(tr_model_create(cc, &c, &cm), TR_OK);
    assert_int_equal(tr_model_create(dc, &c, &dm), TR_OK);
    for (i = 0; i < cm->n_tensors; i++) { /* the same non-trivial heads on both */
        tr_tensor_view v, w;
        assert_int_equal(tr_model_tensor(cm, i, &v), TR_OK);
        if (strstr(v.name, "q_head.weight")) tu_fill(v.data, v.numel, 7, 0.5f);
        if (strstr(v.name, "q_head.bias")) v.data[0] = 0.1f, v.data[1] = -0.2f;
        assert_int_equal(tr_model_tensor(dm, i, &w), TR_OK);
        memcpy(w.data, v.data, v.numel * sizeof(float));
    }
    assert_int_equal(tr_model_commit_tensors(dm), TR_OK);
    assert_int_equal(tr_carry_create(cm, NB, &ccar), TR_OK);
    assert_int_equal(tr_carry_create(dm, NB, &dcar), TR_OK);
    tu_tiny_batch(NB, SEQ, VOCAB, 5, in, lab, pid, 3, 0);
    b.inputs = in, b.labels = NULL, b.puzzle_identifiers = pid, b.batch_size = NB;
    memset(&o1, 0, sizeof o1), memset(&o2, 0, sizeof o2);
    o1.preds = p1, o1.steps = s1, o1.q_halt = q1;
    o2.preds = p2, o2.steps = s2, o2.q_halt = q2;
    assert_int_equal(tr_model_infer(cm, ccar, &b, 0, NULL, NULL, &o1), TR_OK);
    assert_int_equal(tr_model_infer(dm, dcar, &b, 0, NULL, NULL, &o2), TR_OK);
    assert_memory_equal(s1, s2, sizeof s1);
    assert_memory_equal(p1, p2, sizeof p1);
    tu_assert_close("q_halt", q2, q1, NB, 1e-4, 1e-3);
    tr_carry_destroy(ccar), tr_carry_destroy(dcar);
    tr_model_destroy(cm), tr_model_destroy(dm);
    tr_ctx_destroy(cc), tr_ctx_destroy(dc);
}

/* The EMA weights swapped in on the device equal the CPU's (a view of every tensor), and
   swapping back restores the live weights exactly. */
static void test_swap_ema_matches_cpu(void **state) {
    log_capture l1, l2;
    tr_ctx *ctx[2];
    tr_model *m[2];
    tr_trainer *t[2];
    tr_model_config c;
    tr_train_config tc = train_config();
    double loss[NSTEPS];
    int k, i;
    (void)state;
    need_device();
    ctx[0] = make_ctx("cpu", &l1), ctx[1] = make_ctx("opencl", &l2);
    tu_tiny_config(&c, 1, TR_POS_NONE, TR_LOSS_STABLEMAX);
    for (k = 0; k < 2; k++) {
        assert_int_equal(tr_model_create(ctx[k], &c, &m[k]), TR_OK);
        assert_int_equal(tr_trainer_create(m[k], &tc, &t[k]), TR_OK);
        train_steps(t[k], 0, 3, loss);
    }
    assert_int_equal(ctx[1]->dev_active, 1);
    for (i = 0; i < m[0]->n_tensors; i++) {
        tr_tensor_view live, v0, v1;
        float *keep;
        char what[160];
        assert_int_equal(tr_model_tensor(m[1], i, &live), TR_OK);
        keep = (float *)malloc(live.numel * sizeof(float));
        memcpy(keep, live.data, live.numel * sizeof(float));
        for (k = 0; k < 2; k++) assert_int_equal(tr_trainer_swap_ema(t[k]), TR_OK);
        assert_int_equal(tr_model_tensor(m[0], i, &v0), TR_OK);
        assert_int_equal(tr_model_tensor(m[1], i, &v1), TR_OK);
        snprintf(what, sizeof what, "ema %s", v0.name);
        tu_assert_close(what, v1.data, v0.data, v0.numel, 2e-5, 1e-4); /* 3 AdamATan2 steps, as the parity suite */
        for (k = 0; k < 2; k++) assert_int_equal(tr_trainer_swap_ema(t[k]), TR_OK);
        assert_int_equal(tr_model_tensor(m[1], i, &v1), TR_OK);
        assert_memory_equal(v1.data, keep, live.numel * sizeof(float));
        free(keep);
    }
    for (k = 0; k < 2; k++) {
        tr_trainer_destroy(t[k]);
        tr_model_destroy(m[k]);
        tr_ctx_destroy(ctx[k]);
    }
}

/* A bad batch is the caller's error: refused before anything runs, and the training stays on
   the device (it is not taken for a device failure). */
/* A NaN gradient on the device skips that step's update there as on the CPU (no move to the CPU):
   the trajectories with the same injected fault agree. */
static void test_nonfinite_step_skipped_on_device(void **state) {
    double ref[NSTEPS], got[NSTEPS];
    log_capture lc;
    (void)state;
    need_device();
    assert_int_equal(run_on("cpu", 1, TR_FAULT_NONFINITE, 3, 1, &lc, ref), 0);
    assert_non_null(strstr(lc.text, "step 3: the gradient of model.inner.embed_tokens.embedding_weight is NaN or infinite: update skipped"));
    assert_true(run_with_fault(1, TR_FAULT_NONFINITE, 3, 1, &lc, got));
    assert_int_equal(lc.device_lines, 0);
    assert_non_null(strstr(lc.text, "step 3: the gradient of model.inner.embed_tokens.embedding_weight is NaN or infinite: update skipped"));
    assert_trajectory("opencl, NaN gradient at step 3", got, ref, 0, NSTEPS);
}

static void test_bad_batch_stays_on_device(void **state) {
    log_capture lc;
    tr_ctx *ctx;
    tr_model_config c;
    tr_model *m;
    tr_trainer *t;
    tr_train_config tc = train_config();
    int32_t in[NB * SEQ], lab[NB * SEQ], pid[NB];
    tr_batch b;
    (void)state;
    need_device();
    ctx = make_ctx("opencl", &lc);
    tu_tiny_config(&c, 1, TR_POS_NONE, TR_LOSS_STABLEMAX);
    assert_int_equal(tr_model_create(ctx, &c, &m), TR_OK);
    assert_int_equal(tr_trainer_create(m, &tc, &t), TR_OK);
    tu_tiny_batch(NB, SEQ, VOCAB, 9, in, lab, pid, 3, 0);
    b.inputs = in, b.labels = NULL, b.puzzle_identifiers = pid, b.batch_size = NB;
    assert_int_equal(tr_trainer_step(t, &b, NULL), TR_ERR_INVALID_ARG);
    b.labels = lab, in[5] = VOCAB;
    assert_int_equal(tr_trainer_step(t, &b, NULL), TR_ERR_INVALID_ARG);
    assert_true(ctx->dev_active);
    assert_int_equal(lc.device_lines, 0);
    assert_int_equal(tr_trainer_step_count(t), 0);
    in[5] = 1;
    assert_int_equal(tr_trainer_step(t, &b, NULL), TR_OK);
    assert_true(ctx->dev_active);
    tr_trainer_destroy(t);
    tr_model_destroy(m);
    tr_ctx_destroy(ctx);
}

/* bfloat16 and float16 on the device: the trajectories of both mixers and HRM against the CPU in the same
   precision, then the fallbacks (micro-batch halving, a failed command moving the step to the CPU). */
static void test_trajectory_reduced(void **state) {
    (void)state;
    for (g_fdt = TR_FWD_BFLOAT16; g_fdt <= TR_FWD_FLOAT16; g_fdt = (tr_forward_dtype)(g_fdt + 1)) {
        check_trajectory(1);
        check_trajectory(0);
        if (g_fdt == TR_FWD_BFLOAT16) check_trajectory(2);
    }
    g_fdt = TR_FWD_BFLOAT16;
    check_oom_and_enqueue(1, 40, "bf16");
    g_fdt = TR_FWD_FLOAT32;
}

/* The 16-bit tape (the default for bfloat16 / float16) gives the device the fp32 tape's losses bit for bit
   (TINYREC_TAPE16=0), both mixers, both precisions, with the whole batch and in slices of 2 rows; and on the
   (emulated) tensor cores in bfloat16. */
static void test_tape16_on_device(void **state) {
    int variant;
    (void)state;
    need_device();
    for (g_slices = 0; g_slices < 2; g_slices++)
    for (g_fdt = TR_FWD_BFLOAT16; g_fdt <= TR_FWD_FLOAT16; g_fdt = (tr_forward_dtype)(g_fdt + 1))
        for (variant = 0; variant < 2; variant++) {
            double half[NSTEPS], full[NSTEPS];
            log_capture lc;
            int k;
            assert_true(run_on("opencl", variant, TR_FAULT_NONE, 0, 0, &lc, half));
            setenv("TINYREC_TAPE16", "0", 1);
            assert_true(run_on("opencl", variant, TR_FAULT_NONE, 0, 0, &lc, full));
            unsetenv("TINYREC_TAPE16");
            for (k = 0; k < NSTEPS; k++)
                if (half[k] != full[k]) fail_msg("%s variant %d slices %d step %d: loss %.9g with the 16-bit tape, %.9g with fp32", tr_forward_dtype_name(g_fdt), variant, g_slices, k + 1, half[k], full[k]);
        }
    g_fdt = TR_FWD_FLOAT32, g_slices = 0;
    { /* the tensor-core products (emulated), whose epilogues write the 16-bit tape's gate_up fields themselves */
        const char *old = getenv("TINYREC_CL_SGEMM");
        double half[NSTEPS], full[NSTEPS];
        log_capture lc;
        int k;
        setenv("TINYREC_CL_SGEMM", "MMA=2", 1);
        g_fdt = TR_FWD_BFLOAT16;
        for (variant = 0; variant < 2; variant++) {
            assert_true(run_on("opencl", variant, TR_FAULT_NONE, 0, 0, &lc, half));
            assert_int_equal(g_ws_r16, variant == 0); /* (attention's record is the 16-bit tape's) */
            setenv("TINYREC_TAPE16", "0", 1);
            assert_true(run_on("opencl", variant, TR_FAULT_NONE, 0, 0, &lc, full));
            assert_int_equal(g_ws_r16, 0); /* (an fp32 tape: an fp32 record) */
            unsetenv("TINYREC_TAPE16");
            for (k = 0; k < NSTEPS; k++)
                if (half[k] != full[k]) fail_msg("tensor cores variant %d step %d: loss %.9g with the 16-bit tape, %.9g with fp32", variant, k + 1, half[k], full[k]);
        }
        g_fdt = TR_FWD_FLOAT32;
        if (old) setenv("TINYREC_CL_SGEMM", old, 1);
        else unsetenv("TINYREC_CL_SGEMM");
    }
}

/* The tensor-core products (emulated where the device has no mma.sync: the same tiles, conversion and epilogue)
   in a training run: the same trajectories, the products went there, and the backward's pairs shared packings. */
static void test_trajectory_tensor_cores(void **state) {
    const char *old = getenv("TINYREC_CL_SGEMM");
    static const int runs[][2] = {{TR_FWD_BFLOAT16, 0}, {TR_FWD_BFLOAT16, 2}, {TR_FWD_FLOAT16, 1}};
    size_t i;
    (void)state;
    setenv("TINYREC_CL_SGEMM", "MMA=2", 1);
    for (i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        g_fdt = (tr_forward_dtype)runs[i][0];
        check_trajectory(runs[i][1]);
        if (g_mma_products <= 0) fail_msg("fdt %d variant %d: no product ran on the tensor-core kernels", runs[i][0], runs[i][1]);
        if (g_packs_reused <= 0) fail_msg("fdt %d variant %d: the backward's products shared no operand packing", runs[i][0], runs[i][1]);
        if (g_wpacks_reused <= 0) fail_msg("fdt %d variant %d: no product reused a weight's packing", runs[i][0], runs[i][1]);
        /* attention's SwiGLU ops all take the tensor-core paths at any width: gate_up and dg have no memory */
        if (runs[i][1] != 1) assert_int_equal(g_ws_layout, TR__WS_DEV);
        /* the record in 16 bits on the tensor-core layout (the norms, RoPE, attention and products read them so); mlp_t's
           at this width takes TR__WS_DEV_GU, whose fallbacks unpack it, and keeps an fp32 one */
        assert_int_equal(g_ws_r16, runs[i][1] != 1);
    }
    g_fdt = TR_FWD_BFLOAT16; /* (the fallbacks free the workspace's names with it, and the CPU's layout has none) */
    check_oom_and_enqueue(0, 40, "tensor cores");
    /* the token mix at a width whose SwiGLU ops all take the tensor-core paths: the workspace has no memory for the
       record's gate_up fields or for dg (tr__ws_layout_for, tr__ws_gate_up), and the trajectory is the CPU's */
    g_fdt = TR_FWD_BFLOAT16, g_hidden = 32;
    check_trajectory(1);
    assert_int_equal(g_ws_layout, TR__WS_DEV);
    assert_int_equal(g_ws_r16, 1); /* (its record in 16 bits: the column norms read and write them so) */
    g_hidden = 0;
    g_fdt = TR_FWD_FLOAT32;
    check_trajectory(1); /* float32: none */
    assert_int_equal(g_mma_products, 0);
    assert_int_equal(g_ws_layout, TR__WS_DEV_GU);
    if (old) setenv("TINYREC_CL_SGEMM", old, 1);
    else unsetenv("TINYREC_CL_SGEMM");
}

/* The device's rounding kernel gives the CPU's bits (NaN-ness only for NaN in float16), and the fallback
   chain is the same on the device. */
static void test_round_kernel_matches_cpu(void **state) {
    log_capture lc;
    tr_ctx *ctx;
    enum { N = 1 << 16 };
    float *x = (float *)malloc(N * sizeof(float)), *ref = (float *)malloc(N * sizeof(float)), *got, *d;
    uint32_t s = 99;
    int fdt, i;
    (void)state;
    need_device();
    ctx = make_ctx("opencl", &lc);
    assert_true(tr_ctx_use_device(ctx));
    for (i = 0; i < N; i++) { /* every exponent, random mantissas and signs */
        uint32_t u;
        s = s * 1664525u + 1013904223u;
        u = ((uint32_t)(i & 255) << 23) | (s >> 9) | ((s & 2u) << 30);
        memcpy(x + i, &u, 4);
    }
    d = (float *)tr__dalloc(ctx, N * sizeof(float), 0);
    assert_non_null(d);
    for (fdt = TR_FWD_BFLOAT16; fdt <= TR_FWD_FLOAT16; fdt++) {
        memcpy(ref, x, N * sizeof(float));
        tr__round_ref(fdt, ref, N);
        assert_int_equal(tr__dput(ctx, d, x, N * sizeof(float)), TR_OK);
        assert_int_equal(tr__op_round(ctx, fdt, d, N), TR_OK);
        got = tu_get(ctx, d, N);
        for (i = 0; i < N; i++)
            if (memcmp(got + i, ref + i, 4) != 0 && !(isnan(got[i]) && isnan(ref[i])))
                fail_msg("%s: element %d: device %.9g, cpu %.9g", fdt == 1 ? "bf16" : "fp16", i, got[i], ref[i]);
        free(got);
    }
    { /* the 16-bit tape's packing: the CPU's 16 bits (NaN-ness only for NaN in float16), and back */
        uint16_t *h = (uint16_t *)malloc(N * sizeof(uint16_t)), *hr = (uint16_t *)malloc(N * sizeof(uint16_t));
        float *dh = (float *)tr__dalloc(ctx, N * sizeof(uint16_t), 0);
        assert_non_null(dh);
        for (fdt = TR_FWD_BFLOAT16; fdt <= TR_FWD_FLOAT16; fdt++) {
            memcpy(ref, x, N * sizeof(float));
            tr__half_ref(fdt, 0, ref, hr, N);
            tr__round_ref(fdt, ref, N);
            assert_int_equal(tr__dput(ctx, d, x, N * sizeof(float)), TR_OK);
            assert_int_equal(tr__op_half(ctx, fdt, 0, d, dh, N), TR_OK);
            assert_int_equal(tr__dget(ctx, h, dh, N * sizeof(uint16_t)), TR_OK);
            assert_int_equal(tr__dzero(ctx, d, N * sizeof(float)), TR_OK);
            assert_int_equal(tr__op_half(ctx, fdt, 1, d, dh, N), TR_OK);
            got = tu_get(ctx, d, N);
            for (i = 0; i < N; i++)
                if ((h[i] != hr[i] || memcmp(got + i, ref + i, 4) != 0) && !(isnan(got[i]) && isnan(ref[i])))
                    fail_msg("%s half: element %d: device 0x%04x -> %.9g, cpu 0x%04x -> %.9g", fdt == 1 ? "bf16" : "fp16", i, h[i], got[i], hr[i], ref[i]);
            free(got);
        }
        tr__dfree(ctx, dh);
        free(h), free(hr);
    }
    tr__dfree(ctx, d);
    { /* auto: bfloat16 where the device has tensor-core kernels (NVIDIA sm_80+), float32 elsewhere (PoCL) */
        tr_model_config c;
        tr_model *m;
        int tc = ctx->cl->gemm.mma == 1;
        g_fdt = TR_FWD_AUTO;
        variant_config(&c, 1);
        g_fdt = TR_FWD_FLOAT32;
        assert_int_equal(tr_model_create(ctx, &c, &m), TR_OK);
        assert_int_equal(tr_model_get_config(m)->forward_dtype, tc ? TR_FWD_BFLOAT16 : TR_FWD_FLOAT32);
        if (!strstr(lc.text, tc ? "auto: bfloat16" : "auto: float32")) fail_msg("log:\n%s", lc.text);
        tr_model_destroy(m);
    }
    tr_ctx_inject_fault(ctx, TR_FAULT_NO_BF16, 0, 0);
    {
        tr_model_config c;
        tr_model *m;
        g_fdt = TR_FWD_BFLOAT16;
        variant_config(&c, 1);
        g_fdt = TR_FWD_FLOAT32;
        assert_int_equal(tr_model_create(ctx, &c, &m), TR_OK);
        assert_int_equal(tr_model_get_config(m)->forward_dtype, TR_FWD_FLOAT16);
        if (!strstr(lc.text, "falling back to float16")) fail_msg("log:\n%s", lc.text);
        tr_model_destroy(m);
    }
    tr_ctx_destroy(ctx);
    free(x), free(ref);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trajectory_mlp_t),
        cmocka_unit_test(test_trajectory_attention),
        cmocka_unit_test(test_trajectory_hrm),
        cmocka_unit_test(test_trajectory_reduced),
        cmocka_unit_test(test_trajectory_tensor_cores),
        cmocka_unit_test(test_tape16_on_device),
        cmocka_unit_test(test_round_kernel_matches_cpu),
        cmocka_unit_test(test_hrm_oom_and_enqueue_faults),
        cmocka_unit_test(test_open_faults_fall_back_to_cpu),
        cmocka_unit_test(test_named_device_is_an_error),
        cmocka_unit_test(test_oom_halves_the_micro_batch),
        cmocka_unit_test(test_oom_everywhere_moves_to_cpu),
        cmocka_unit_test(test_enqueue_failure_moves_to_cpu),
        cmocka_unit_test(test_opencl_to_cpu),
        cmocka_unit_test(test_cpu_to_opencl),
        cmocka_unit_test(test_infer_matches_cpu),
        cmocka_unit_test(test_swap_ema_matches_cpu),
        cmocka_unit_test(test_bad_batch_stays_on_device),
        cmocka_unit_test(test_nonfinite_step_skipped_on_device),
    };
    return cmocka_run_group_tests_name("opencl_model", tests, NULL, NULL);
}
