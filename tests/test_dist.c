/* Data-parallel training through tr_comm, without MPI: a fake communicator whose "ranks" are threads of
   this process (a barrier and a table of the ranks' buffers). It checks what examples/tinyrec_mpi.h's
   MPI communicator gives under mpirun (tests/mpi.sh): N ranks at global batch B train as one process at
   B, the update is the same on every rank, checkpoints resume with another rank count, and a failing
   communicator ends the step with a message. */
#define TINYREC_IMPLEMENTATION
#include "test_util.h"
#include <pthread.h>

enum { MAXR = 4, GB = 8, STEPS = 5 };

/* ---- the fake communicator ------------------------------------------------------------------ */
typedef struct world {
    pthread_barrier_t bar;
    int size;
    const void *slot[MAXR];
    int fail_at; /* > 0: the fail_at-th collective (counted on each rank) returns an error */
    int overlap; /* tr_comm.overlap */
} world;
typedef struct rank_comm {
    world *w;
    int rank, calls;
    int allreduces;      /* all-reduce calls */
    int first_cpu;       /* the first all-reduce made with ctx off its device (-1: none) */
    tr_ctx *ctx;         /* the rank's context, to see where it computes */
    tr_comm comm;
} rank_comm;

static int fake_fail(rank_comm *r) { return r->w->fail_at > 0 && ++r->calls == r->w->fail_at; }
static void wait_all(rank_comm *r) { pthread_barrier_wait(&r->w->bar); }

/* Sums in rank order, as MPI_Allreduce need not: the tolerance of the equal-loss test covers any order. */
static tr_status fake_allreduce(void *user, float *data, size_t n) {
    rank_comm *r = (rank_comm *)user;
    float *sum;
    size_t i;
    int k;
    if (fake_fail(r)) return TR_ERR_IO;
    if (r->first_cpu < 0 && r->ctx && !tr_ctx_use_device(r->ctx)) r->first_cpu = r->allreduces;
    r->allreduces++;
    sum = (float *)calloc(n ? n : 1, sizeof(float));
    r->w->slot[r->rank] = data;
    wait_all(r);
    for (k = 0; k < r->w->size; k++)
        for (i = 0; i < n; i++) sum[i] += ((const float *)r->w->slot[k])[i];
    wait_all(r); /* every rank has read every slot before any is overwritten */
    memcpy(data, sum, n * sizeof(float));
    free(sum);
    return TR_OK;
}
static tr_status fake_allgather(void *user, const void *send, void *recv, size_t bytes) {
    rank_comm *r = (rank_comm *)user;
    int k;
    if (fake_fail(r)) return TR_ERR_IO;
    r->w->slot[r->rank] = send;
    wait_all(r);
    for (k = 0; k < r->w->size; k++) memcpy((char *)recv + (size_t)k * bytes, r->w->slot[k], bytes);
    wait_all(r);
    return TR_OK;
}
static tr_status fake_broadcast(void *user, void *data, size_t bytes, int root) {
    rank_comm *r = (rank_comm *)user;
    if (fake_fail(r)) return TR_ERR_IO;
    r->w->slot[r->rank] = data;
    wait_all(r);
    if (r->rank != root) memcpy(data, r->w->slot[root], bytes);
    wait_all(r);
    return TR_OK;
}
static tr_status fake_barrier(void *user) {
    rank_comm *r = (rank_comm *)user;
    if (fake_fail(r)) return TR_ERR_IO;
    wait_all(r);
    return TR_OK;
}

static void comm_init(rank_comm *r, world *w, int rank) {
    memset(r, 0, sizeof *r);
    r->w = w, r->rank = rank, r->first_cpu = -1;
    r->comm.overlap = w->overlap;
    r->comm.rank = rank, r->comm.size = w->size, r->comm.local_rank = rank, r->comm.user = r;
    r->comm.allreduce_sum = fake_allreduce, r->comm.allgather = fake_allgather, r->comm.broadcast = fake_broadcast, r->comm.barrier = fake_barrier;
}

/* ---- one rank's run ------------------------------------------------------------------------- */
/* A rank trains steps [from, to) of a fixed sequence of global batches on its slice of each. With
   load, it first resumes from that trainer state; with save, it saves one at the end (collective). */
typedef struct job {
    const tr_comm *comm; /* NULL: one process */
    int from, to;
    const char *load, *save;
    double loss[STEPS];  /* the step's loss as tr_trainer_step reports it (the global batch's) */
    float *params;       /* the weights at the end (malloc'ed) */
    size_t n_params;
    tr_status st;        /* of the first failing call */
    char err[256];
    tr_ctx *ctx;         /* NULL: a CPU context of the job's own; else the caller's (an OpenCL one) */
    int hrm;             /* 1: the tiny HRM (Q-learning target included), else the tiny TRM */
    int overlap;         /* tr_comm.overlap (jobs[0]'s for the whole world) */
    int slices;          /* the recursion in slices of 2 rows (tr__ws_rows) */
    int allreduces;      /* the communicator's all-reduce calls */
    int first_cpu;       /* the first of them made off the device (-1: none) */
    double qcl;          /* the last step's q_continue_loss */
} job;

static void global_batch(int step, int32_t *in, int32_t *lab, int32_t *pid) {
    /* ids repeat across the batch, so the sign-SGD sums rows of one id that different ranks hold */
    tu_tiny_batch(GB, 16, 6, 500 + (uint64_t)step, in, lab, pid, 3, (uint64_t)step);
}

static void *run_job(void *arg) {
    job *j = (job *)arg;
    int ranks = j->comm ? j->comm->size : 1, rank = j->comm ? j->comm->rank : 0, B = GB / ranks, k;
    tr_ctx *ctx = j->ctx ? j->ctx : tu_ctx(1, 11);
    tr_model_config c;
    tr_model *m = NULL;
    tr_trainer *t = NULL;
    tr_train_config tc = tr_train_config_default();
    int32_t in[GB * 16], lab[GB * 16], pid[GB];
    if (j->hrm) tu_tiny_hrm_config(&c, 1, TR_POS_NONE, TR_LOSS_STABLEMAX);
    else tu_tiny_config(&c, 1, TR_POS_NONE, TR_LOSS_STABLEMAX);
    c.halt_exploration_prob = 0.5, c.halt_max_steps = 6; /* the exploration's draws must line up with one process's */
    tc.global_batch_size = GB, tc.lr = 1e-3, tc.lr_warmup_steps = 2, tc.puzzle_emb_lr = 1e-2, tc.comm = j->comm;
    j->st = tr_model_create(ctx, &c, &m);
    if (j->st == TR_OK && j->slices) m->ws_tokens = 2 * m->S;
    if (j->st == TR_OK) {
        /* q_halt of either sign, so that rows halt early and the exploration's draws decide some */
        tr_tensor_view w, b;
        assert_int_equal(tr_model_find_tensor(m, "model.inner.q_head.weight", &w), TR_OK);
        assert_int_equal(tr_model_find_tensor(m, "model.inner.q_head.bias", &b), TR_OK);
        tu_fill(w.data, w.numel, 21, 0.5f);
        b.data[0] = b.data[1] = 0;
        j->st = tr_model_commit_tensors(m);
        if (j->st == TR_OK) j->st = tr_trainer_create(m, &tc, &t);
    }
    if (j->st == TR_OK && j->load) j->st = tr_trainer_load(t, j->load, NULL, 0, NULL);
    for (k = j->from; j->st == TR_OK && k < j->to; k++) {
        tr_batch b;
        tr_metrics mt;
        global_batch(k, in, lab, pid);
        b.inputs = in + rank * B * 16, b.labels = lab + rank * B * 16, b.puzzle_identifiers = pid + rank * B, b.batch_size = B;
        j->st = tr_trainer_step(t, &b, &mt);
        j->loss[k] = mt.loss, j->qcl = mt.q_continue_loss;
    }
    if (j->st == TR_OK && j->save) j->st = tr_trainer_save(t, j->save, NULL, 0);
    snprintf(j->err, sizeof j->err, "%.200s", tr_ctx_last_error(ctx));
    if (m) {
        j->n_params = m->n_params;
        j->params = tu_get(ctx, m->params, m->n_params); /* the device's, or the CPU's */
    }
    tr_trainer_destroy(t);
    tr_model_destroy(m);
    if (j->st == TR_OK && tr_ctx_live_allocs(ctx) != 0) j->st = TR_ERR_GENERIC;
    if (!j->ctx) tr_ctx_destroy(ctx);
    return NULL;
}

/* Runs jobs[0..n) as the n ranks of one world (n threads; n == 1 with comm NULL: one process). */
static void run_world(int n, job *jobs, int fail_at) {
    world w;
    rank_comm rc[MAXR];
    pthread_t th[MAXR];
    int k;
    w.size = n, w.fail_at = fail_at, w.overlap = jobs[0].overlap;
    pthread_barrier_init(&w.bar, NULL, (unsigned)n);
    for (k = 0; k < n; k++) {
        comm_init(&rc[k], &w, k);
        rc[k].ctx = jobs[k].ctx;
        if (n > 1) jobs[k].comm = &rc[k].comm;
        pthread_create(&th[k], NULL, run_job, &jobs[k]);
    }
    for (k = 0; k < n; k++) pthread_join(th[k], NULL);
    for (k = 0; k < n; k++) jobs[k].allreduces = rc[k].allreduces, jobs[k].first_cpu = rc[k].first_cpu;
    pthread_barrier_destroy(&w.bar);
}

static job new_job(int from, int to, const char *load, const char *save) {
    job j;
    memset(&j, 0, sizeof j);
    j.from = from, j.to = to, j.load = load, j.save = save;
    return j;
}

/* N ranks against one process. The ranks' gradients are summed in another order than one process's
   (per-rank partial sums, then the all-reduce): an fp32 reassociation, ~1e-7 relative per add. An
   element whose gradient cancels to ~0 then takes AdamATan2's sign-like step of up to lr either way, so
   the difference grows over the steps: measured, the losses differ by up to 2e-5 relative after 5 steps
   and the weights by 6e-7 (relative L2 distance; no elementwise tolerance holds for such elements under
   any summation order). rtol 1e-3 on the losses and 1e-4 on the weights' distance are 50x and 150x
   above that, and far below what a wrong row, a missed rank or a misaligned exploration draw does (the
   loss changes by ~3%: checked by breaking TR__HALT_DRAWS). */
static void check_same(const job *one, const job *r, int from, int to) {
    double d = 0, w = 0, worst = 0;
    size_t i;
    int k;
    for (k = from; k < to; k++) worst = fmax(worst, fabs(r->loss[k] - one->loss[k]) / fabs(one->loss[k]));
    for (k = from; k < to; k++)
        if (!(fabs(r->loss[k] - one->loss[k]) <= 1e-3 * fabs(one->loss[k]))) fail_msg("step %d: loss %.9g with ranks, %.9g in one process", k + 1, r->loss[k], one->loss[k]);
    for (i = 0; i < one->n_params; i++) d += ((double)r->params[i] - one->params[i]) * ((double)r->params[i] - one->params[i]), w += (double)one->params[i] * one->params[i];
    if (getenv("TEST_DIST_VERBOSE")) printf("loss relative difference %.3g, weights relative distance %.3g\n", worst, sqrt(d / w));
    if (!(sqrt(d) <= 1e-4 * sqrt(w))) fail_msg("weights: relative L2 distance %.3g to one process's", sqrt(d / w));
}

static void free_jobs(job *j, int n) {
    int k;
    for (k = 0; k < n; k++) free(j[k].params);
}

/* n ranks against one process, without overlap and with it (tr_comm.overlap): the buckets sum every
   element in the same rank order as the single all-reduce, so both give the same bits. hrm: the tiny HRM,
   whose Q-learning target comes from a second no-grad step on each rank's own rows. Two ranks run their
   recursion in slices of rows: a layer's bucket goes only once the last slice has added its gradient. */
static void check_ranks(int n, int hrm) {
    job one = new_job(0, STEPS, NULL, NULL), r[MAXR], o[MAXR];
    int k, layers = hrm ? 1 + 2 : 2; /* tu_tiny_hrm_config: H_layers 1 + L_layers 2; the TRM: L_layers 2 */
    one.hrm = hrm;
    run_world(1, &one, 0);
    assert_int_equal(one.st, TR_OK);
    if (hrm) assert_true(one.qcl > 0); /* the Q-learning target is in the loss */
    for (k = 0; k < n; k++) {
        r[k] = o[k] = new_job(0, STEPS, NULL, NULL);
        r[k].hrm = o[k].hrm = hrm, o[k].overlap = 1;
        r[k].slices = o[k].slices = n == 2;
    }
    run_world(n, r, 0);
    run_world(n, o, 0);
    for (k = 0; k < n; k++) {
        if (r[k].st != TR_OK) fail_msg("rank %d: %s", k, r[k].err);
        if (o[k].st != TR_OK) fail_msg("rank %d with overlap: %s", k, o[k].err);
        /* the update is the same on every rank: bit for bit, losses too */
        assert_memory_equal(r[k].params, r[0].params, r[0].n_params * sizeof(float));
        assert_memory_equal(r[k].loss, r[0].loss, sizeof r[0].loss);
        assert_memory_equal(o[k].params, r[0].params, r[0].n_params * sizeof(float));
        assert_memory_equal(o[k].loss, r[0].loss, sizeof r[0].loss);
        /* one all-reduce a step; with overlap one per bucket: the heads, each layer, the embeddings */
        assert_int_equal(r[k].allreduces, STEPS);
        assert_int_equal(o[k].allreduces, STEPS * (2 + layers));
    }
    check_same(&one, &r[0], 0, STEPS);
    free_jobs(&one, 1);
    free_jobs(r, n), free_jobs(o, n);
}
static void test_two_ranks_equal_one_process(void **state) { (void)state; check_ranks(2, 0); }
static void test_four_ranks_equal_one_process(void **state) { (void)state; check_ranks(4, 0); }
static void test_hrm_two_ranks_equal_one_process(void **state) { (void)state; check_ranks(2, 1); }

/* A trainer state saved by 2 ranks resumes in one process, and one saved by one process on 2 or 4
   ranks: the file holds the global batch's carry. */
static void test_resume_other_rank_count(void **state) {
    const char *p1 = "build/test_dist_1.state.safetensors", *p2 = "build/test_dist_2.state.safetensors";
    job ref = new_job(0, STEPS, NULL, NULL), a[2], b, c[2], d[4];
    int k;
    (void)state;
    run_world(1, &ref, 0);
    a[0] = a[1] = new_job(0, 3, NULL, p2);
    run_world(2, a, 0);
    assert_int_equal(a[0].st, TR_OK);
    assert_int_equal(a[1].st, TR_OK);
    b = new_job(3, STEPS, p2, NULL); /* 2 ranks -> 1 */
    run_world(1, &b, 0);
    if (b.st != TR_OK) fail_msg("%s", b.err);
    check_same(&ref, &b, 3, STEPS);
    {
        job s = new_job(0, 3, NULL, p1);
        run_world(1, &s, 0);
        assert_int_equal(s.st, TR_OK);
        free_jobs(&s, 1);
    }
    c[0] = c[1] = new_job(3, STEPS, p1, NULL); /* 1 -> 2 ranks */
    run_world(2, c, 0);
    for (k = 0; k < 4; k++) d[k] = new_job(3, STEPS, p1, NULL); /* 1 -> 4 ranks */
    run_world(4, d, 0);
    for (k = 0; k < 2; k++) {
        if (c[k].st != TR_OK) fail_msg("rank %d: %s", k, c[k].err);
        check_same(&ref, &c[k], 3, STEPS);
    }
    for (k = 0; k < 4; k++) check_same(&ref, &d[k], 3, STEPS);
    remove(p1), remove(p2);
    free_jobs(&ref, 1), free_jobs(a, 2), free_jobs(&b, 1), free_jobs(c, 2), free_jobs(d, 4);
}

/* The ranks on OpenCL devices (PoCL in CI; each rank its own context): the gradients staged through
   pinned host memory, with and without overlap (the same bits either way), the sign-SGD on the device
   over every rank's rows. Against one process on the same device. Then rank 1's device fails in step 3
   (an injected enqueue failure) before the step's collectives, between two buckets of the overlapped
   all-reduce, and after them: that rank finishes on its CPU while rank 0 waits in the collective, no
   collective runs twice, and the run goes on with the same losses (the CPU's kernels differ from the
   device's by reassociation only: the tolerance of check_same). */
static void test_ranks_on_opencl(void **state) {
    /* the nth enqueue of step 3 fails: found by probing the tiny TRM's kernels (4 buckets a step) */
    static const struct { int nth, overlap, first_cpu; } faults[] = {{5, 0, 2}, {5, 1, 8}, {205, 1, 9}, {211, 1, 10}, {260, 1, 12}};
    job one = new_job(0, STEPS, NULL, NULL), r[2], o[2];
    int k, i;
    (void)state;
    one.ctx = tu_ctx_opencl(1, 11);
    run_world(1, &one, 0);
    if (one.st != TR_OK) fail_msg("%s", one.err);
    for (k = 0; k < 2; k++) {
        r[k] = o[k] = new_job(0, STEPS, NULL, NULL);
        r[k].ctx = tu_ctx_opencl(1, 11), o[k].ctx = tu_ctx_opencl(1, 11), o[k].overlap = 1;
    }
    run_world(2, r, 0);
    run_world(2, o, 0);
    for (k = 0; k < 2; k++) {
        if (r[k].st != TR_OK) fail_msg("rank %d: %s", k, r[k].err);
        if (o[k].st != TR_OK) fail_msg("rank %d with overlap: %s", k, o[k].err);
        check_same(&one, &r[k], 0, STEPS);
        assert_memory_equal(r[k].params, r[0].params, r[0].n_params * sizeof(float));
        assert_memory_equal(o[k].params, r[0].params, r[0].n_params * sizeof(float));
        assert_int_equal(o[k].allreduces, STEPS * 4);
        assert_int_equal(o[k].first_cpu, -1);
    }
    for (i = 0; i < (int)(sizeof faults / sizeof faults[0]); i++) {
        job f[2];
        for (k = 0; k < 2; k++) f[k] = new_job(0, STEPS, NULL, NULL), f[k].ctx = tu_ctx_opencl(1, 11), f[k].overlap = faults[i].overlap;
        tr_ctx_inject_fault(f[1].ctx, TR_FAULT_ENQUEUE, 3, faults[i].nth);
        run_world(2, f, 0);
        for (k = 0; k < 2; k++) {
            if (f[k].st != TR_OK) fail_msg("fault at enqueue %d, rank %d: %s", faults[i].nth, k, f[k].err);
            check_same(&one, &f[k], 0, STEPS);
        }
        assert_int_equal(tr_ctx_use_device(f[1].ctx), 0); /* rank 1 fell back to its CPU */
        assert_int_equal(tr_ctx_use_device(f[0].ctx), 1);
        /* where it fell back: the all-reduce it made first on the CPU */
        if (f[1].first_cpu != faults[i].first_cpu)
            fail_msg("the fault at enqueue %d fell back before all-reduce %d, not %d: the kernels changed, probe the positions again", faults[i].nth, f[1].first_cpu,
                     faults[i].first_cpu);
        for (k = 0; k < 2; k++) tr_ctx_destroy(f[k].ctx);
        free_jobs(f, 2);
    }
    tr_ctx_destroy(one.ctx);
    for (k = 0; k < 2; k++) tr_ctx_destroy(r[k].ctx), tr_ctx_destroy(o[k].ctx);
    free_jobs(&one, 1), free_jobs(r, 2), free_jobs(o, 2);
}

/* A communicator that fails makes the step fail on every rank with a message, whatever the call. */
static void test_comm_failure(void **state) {
    int at, k, overlap;
    (void)state;
    /* the all-reduce (with overlap: its 4 buckets), the metrics gather, the puzzle rows' gather */
    for (overlap = 0; overlap <= 1; overlap++) {
        for (at = 1; at <= (overlap ? 6 : 3); at++) {
            job r[2];
            r[0] = r[1] = new_job(0, 2, NULL, NULL);
            r[0].overlap = overlap;
            run_world(2, r, at);
            for (k = 0; k < 2; k++) {
                assert_int_equal(r[k].st, TR_ERR_GENERIC);
                if (!strstr(r[k].err, "communicator:") || !strstr(r[k].err, "of 2")) fail_msg("overlap %d, call %d, rank %d: '%s'", overlap, at, k, r[k].err);
            }
            free_jobs(r, 2);
        }
    }
}

/* ---- configuration, evaluation, allocation failures ------------------------------------------ */
static tr_status no_reduce(void *u, float *d, size_t n) { (void)u, (void)d, (void)n; return TR_OK; }
static tr_status no_gather(void *u, const void *s, void *r, size_t b) { (void)u, (void)s, (void)r, (void)b; return TR_OK; }
static tr_status no_bcast(void *u, void *d, size_t b, int root) { (void)u, (void)d, (void)b, (void)root; return TR_OK; }
static tr_status no_barrier(void *u) { (void)u; return TR_OK; }

static void test_config_checks(void **state) {
    tr_ctx *ctx = tu_ctx(1, 1);
    tr_train_config tc = tr_train_config_default();
    tr_comm cm;
    (void)state;
    memset(&cm, 0, sizeof cm);
    cm.size = 2, cm.allreduce_sum = no_reduce, cm.allgather = no_gather, cm.broadcast = no_bcast, cm.barrier = no_barrier;
    tc.global_batch_size = 8, tc.comm = &cm;
    assert_int_equal(tr_train_config_validate(ctx, &tc), TR_OK);
    tc.global_batch_size = 7;
    assert_int_equal(tr_train_config_validate(ctx, &tc), TR_ERR_CONFIG);
    assert_non_null(strstr(tr_ctx_last_error(ctx), "not a multiple of the 2 ranks"));
    tc.global_batch_size = 8, cm.rank = 2;
    assert_int_equal(tr_train_config_validate(ctx, &tc), TR_ERR_CONFIG);
    cm.rank = 0, cm.size = 0;
    assert_int_equal(tr_train_config_validate(ctx, &tc), TR_ERR_CONFIG);
    cm.size = 2, cm.local_rank = -1;
    assert_int_equal(tr_train_config_validate(ctx, &tc), TR_ERR_CONFIG);
    cm.local_rank = 0, cm.allgather = NULL;
    assert_int_equal(tr_train_config_validate(ctx, &tc), TR_ERR_CONFIG);
    assert_non_null(strstr(tr_ctx_last_error(ctx), "callback"));
    tr_ctx_destroy(ctx);
}

/* tr_trainer_create with a communicator: its staging buffers; every allocation may fail. And a
   batch of the global size is refused: a rank takes its slice. */
static void test_trainer_create_alloc_sweep(void **state) {
    tr_ctx *ctx = tu_ctx(1, 1);
    tr_model_config c;
    tr_model *m;
    tr_trainer *t = NULL;
    tr_train_config tc = tr_train_config_default();
    tr_comm cm;
    int32_t in[GB * 16], lab[GB * 16], pid[GB];
    tr_batch b;
    long n;
    (void)state;
    memset(&cm, 0, sizeof cm);
    cm.size = 2, cm.allreduce_sum = no_reduce, cm.allgather = no_gather, cm.broadcast = no_bcast, cm.barrier = no_barrier;
    tu_tiny_config(&c, 1, TR_POS_NONE, TR_LOSS_STABLEMAX);
    assert_int_equal(tr_model_create(ctx, &c, &m), TR_OK);
    tc.global_batch_size = GB, tc.comm = &cm;
    for (n = 1;; n++) {
        long live = tr_ctx_live_allocs(ctx);
        tr_status st;
        tr_ctx_fail_alloc_at(ctx, n);
        st = tr_trainer_create(m, &tc, &t);
        tr_ctx_fail_alloc_at(ctx, 0);
        if (st == TR_OK) break;
        assert_int_equal(st, TR_ERR_OUT_OF_MEMORY);
        assert_int_equal(tr_ctx_live_allocs(ctx), live);
    }
    tu_tiny_batch(GB, 16, 6, 1, in, lab, pid, 3, 0);
    b.inputs = in, b.labels = lab, b.puzzle_identifiers = pid, b.batch_size = GB;
    assert_int_equal(tr_trainer_step(t, &b, NULL), TR_ERR_INVALID_ARG);
    tr_trainer_destroy(t);
    tr_model_destroy(m);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

typedef struct eval_job {
    rank_comm rc;
    tr_eval_result r;
    tr_status st;
} eval_job;
static void *run_eval_reduce(void *arg) {
    eval_job *e = (eval_job *)arg;
    tr_ctx *ctx = tu_ctx(1, 1);
    e->st = tr_eval_result_reduce(ctx, &e->rc.comm, &e->r);
    tr_ctx_destroy(ctx);
    return NULL;
}

/* Rank 0 evaluated 3 rows, rank 1 one, rank 2 none (NAN means): counts add, means weigh by count. */
static void test_eval_reduce(void **state) {
    world w;
    eval_job e[3];
    pthread_t th[3];
    int k;
    tr_eval_result r;
    tr_ctx *ctx = tu_ctx(1, 1);
    (void)state;
    w.size = 3, w.fail_at = 0;
    pthread_barrier_init(&w.bar, NULL, 3);
    for (k = 0; k < 3; k++) {
        comm_init(&e[k].rc, &w, k);
        memset(&e[k].r, 0, sizeof e[k].r);
        e[k].r.count = k == 0 ? 3 : k == 1 ? 1 : 0;
        e[k].r.accuracy = k == 0 ? 0.5 : k == 1 ? 1.0 : NAN;
        e[k].r.exact_accuracy = k == 0 ? 1.0 / 3 : k == 1 ? 0.0 : NAN;
        e[k].r.q_halt_accuracy = e[k].r.steps = e[k].r.lm_loss = k == 2 ? NAN : 2.0;
        e[k].r.batches = 2, e[k].r.seconds = 1.0 + k;
        e[k].r.num_steps = 2, e[k].r.exact_by_step[0] = k == 0 ? 0.0 : k == 1 ? 1.0 : NAN, e[k].r.exact_by_step[1] = e[k].r.exact_accuracy;
        pthread_create(&th[k], NULL, run_eval_reduce, &e[k]);
    }
    for (k = 0; k < 3; k++) pthread_join(th[k], NULL);
    pthread_barrier_destroy(&w.bar);
    for (k = 0; k < 3; k++) {
        assert_int_equal(e[k].st, TR_OK);
        assert_true(e[k].r.count == 4);
        assert_true(fabs(e[k].r.accuracy - 0.625) < 1e-12);
        assert_true(fabs(e[k].r.exact_accuracy - 0.25) < 1e-12);
        assert_true(fabs(e[k].r.lm_loss - 2.0) < 1e-12);
        assert_true(e[k].r.batches == 2 && e[k].r.seconds == 3.0);
        assert_true(e[k].r.num_steps == 2 && fabs(e[k].r.exact_by_step[0] - 0.25) < 1e-12 && fabs(e[k].r.exact_by_step[1] - 0.25) < 1e-12);
    }
    /* one process: unchanged; bad arguments */
    memset(&r, 0, sizeof r);
    r.count = 2, r.accuracy = 0.5;
    assert_int_equal(tr_eval_result_reduce(ctx, NULL, &r), TR_OK);
    assert_true(r.count == 2 && r.accuracy == 0.5);
    assert_int_equal(tr_eval_result_reduce(ctx, NULL, NULL), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_eval_result_reduce(NULL, NULL, &r), TR_ERR_INVALID_ARG);
    tr_ctx_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_ranks_equal_one_process),
        cmocka_unit_test(test_four_ranks_equal_one_process),
        cmocka_unit_test(test_hrm_two_ranks_equal_one_process),
        cmocka_unit_test(test_resume_other_rank_count),
        cmocka_unit_test(test_ranks_on_opencl),
        cmocka_unit_test(test_comm_failure),
        cmocka_unit_test(test_config_checks),
        cmocka_unit_test(test_trainer_create_alloc_sweep),
        cmocka_unit_test(test_eval_reduce),
    };
    return cmocka_run_group_tests_name("dist", tests, NULL, NULL);
}
