/* The parallel loops (tr__par_for): OpenMP's team in the default build, the library's pthread
   pool in `make OPENMP=0` (build-noomp/). Every index runs exactly once, the static schedule gives
   part t the same range in both builds, and a training step sized so that every kernel actually
   splits its loops gives bit-identical weights for 1 and 3 threads, and with two trainings at once
   (the pool then serves one of them and the other runs alone). The final weights go to
   $TINYREC_BUILD_DIR/threads_weights.bin, which CI compares between the OpenMP and the pool build. */
#define TINYREC_IMPLEMENTATION
#include "test_util.h"

enum { NIDX = 1003 };
typedef struct loop_rec {
    int hits[NIDX], tid[NIDX];
    int seen[8];  /* threads that ran a range (written atomically) */
    int wait_for; /* 1: a range run while its thread is the only one seen waits for another (at most 20 s) */
} loop_rec;

/* The number of threads seen; marks the caller first. */
static int mark_seen(loop_rec *r, int t) {
    int k, n = 0;
    if (t >= 0 && t < 8) __atomic_store_n(&r->seen[t], 1, __ATOMIC_SEQ_CST);
    for (k = 0; k < 8; k++) n += __atomic_load_n(&r->seen[k], __ATOMIC_SEQ_CST);
    return n;
}

static void record_range(void *arg, long i0, long i1) {
    loop_rec *r = (loop_rec *)arg;
    long i;
    volatile double x = 0;
    int k, t = tr__thread_id();
    /* "really parallel" must not depend on how fast the others wake on a loaded machine: a thread alone waits,
       so a pool that never runs a second thread fails after 20 s, and one that does passes however slowly it
       starts */
    if (mark_seen(r, t) == 1 && r->wait_for) {
        double t0 = tr__now();
        while (mark_seen(r, t) == 1 && tr__now() - t0 < 20.0) {}
    }
    for (i = i0; i < i1; i++) {
        for (k = 0; k < 2000; k++) x += k; /* long enough that the other threads join in */
        r->hits[i]++;
        r->tid[i] = tr__thread_id();
    }
    (void)x; /* (clang: set but not used otherwise) */
}

static void test_par_for_schedules(void **state) {
    static loop_rec r;
    static const int nts[] = {1, 2, 3, 7};
    static const long ns[] = {0, 1, 2, 5, NIDX};
    size_t a, b;
    (void)state;
    for (a = 0; a < sizeof nts / sizeof *nts; a++)
        for (b = 0; b < sizeof ns / sizeof *ns; b++) {
            int nt = nts[a], chunk, i, t;
            long n = ns[b];
            for (chunk = 0; chunk <= 4; chunk += 4) {
                int used[8] = {0}, nused = 0;
                memset(&r, 0, sizeof r);
                r.wait_for = n == NIDX && nt > 1;
                tr__par_for(nt, n, chunk, record_range, &r);
                for (i = 0; i < NIDX; i++) assert_int_equal(r.hits[i], i < n ? 1 : 0);
                for (i = 0; i < n; i++) {
                    assert_true(r.tid[i] >= 0 && r.tid[i] < nt);
                    if (!used[r.tid[i]]++) nused++;
                }
                if (chunk == 0) /* static: index i belongs to part t's range, run by thread t */
                    for (t = 0; t < nt && n > 1; t++) {
                        long i0, i1, j;
                        tr__par_split(n, nt, t, &i0, &i1);
                        for (j = i0; j < i1; j++) assert_int_equal(r.tid[j], t);
                    }
                if (n == NIDX && nt > 1) assert_true(nused > 1); /* really parallel */
                assert_int_equal(tr__thread_id(), 0);
            }
        }
}

/* The split itself: contiguous, covering, sizes differing by at most one. */
static void test_par_split(void **state) {
    long n;
    int nt, t;
    (void)state;
    for (n = 0; n < 40; n++)
        for (nt = 1; nt < 9; nt++) {
            long prev = 0, i0, i1;
            for (t = 0; t < nt; t++) {
                tr__par_split(n, nt, t, &i0, &i1);
                assert_int_equal(i0, prev);
                assert_true(i1 - i0 == n / nt || i1 - i0 == n / nt + 1);
                prev = i1;
            }
            assert_int_equal(prev, n);
        }
}

/* --- a training step big enough to split every loop ---------------------------------------- */
enum { B = 32, S = 64, STEPS = 3 };

static void big_config(tr_model_config *c, int mlp_t) {
    tu_tiny_config(c, mlp_t, mlp_t ? TR_POS_NONE : TR_POS_ROPE, TR_LOSS_STABLEMAX);
    c->seq_len = S, c->hidden_size = 64, c->num_heads = 2, c->puzzle_emb_ndim = 64, c->puzzle_emb_len = 1;
    c->H_cycles = 2, c->L_cycles = 1, c->L_layers = 1, c->halt_max_steps = 2;
}

typedef struct train_run {
    int threads, mlp_t;
    float *params;
    size_t n;
    double loss[STEPS];
} train_run;

/* No cmocka asserts: it also runs on a second thread. r->params stays NULL on failure. */
static void *train(void *arg) {
    train_run *r = (train_run *)arg;
    tr_ctx_config cc = tr_ctx_config_default();
    tr_ctx *ctx = NULL;
    tr_model_config c;
    tr_model *m = NULL;
    tr_trainer *t = NULL;
    tr_train_config tc = tr_train_config_default();
    static int32_t in[2][B * S], lab[2][B * S], pid[2][B];
    int k, slot = r->mlp_t; /* the concurrent runs differ in mlp_t */
    cc.num_threads = r->threads, cc.seed = 5, cc.device = "cpu";
    r->params = NULL;
    if (tr_ctx_create(&cc, &ctx) != TR_OK) return NULL;
    big_config(&c, r->mlp_t);
    c.halt_exploration_prob = 0.5;
    tc.global_batch_size = B, tc.lr = 1e-3, tc.lr_warmup_steps = 1, tc.puzzle_emb_lr = 1e-2;
    if (tr_model_create(ctx, &c, &m) == TR_OK && tr_trainer_create(m, &tc, &t) == TR_OK) {
        for (k = 0; k < STEPS; k++) {
            tr_batch b;
            tr_metrics mt;
            tu_tiny_batch(B, S, 6, 77 + (uint64_t)k, in[slot], lab[slot], pid[slot], 3, 0);
            b.inputs = in[slot], b.labels = lab[slot], b.puzzle_identifiers = pid[slot], b.batch_size = B;
            if (tr_trainer_step(t, &b, &mt) != TR_OK) break;
            r->loss[k] = mt.loss;
        }
        if (k == STEPS) {
            r->n = m->n_params;
            r->params = (float *)malloc(r->n * sizeof(float));
            if (r->params) memcpy(r->params, m->params, r->n * sizeof(float));
        }
    }
    tr_trainer_destroy(t);
    tr_model_destroy(m);
    tr_ctx_destroy(ctx);
    return NULL;
}

static void test_training_threads(void **state) {
    int mlp_t;
    FILE *out = NULL;
    const char *dir = getenv("TINYREC_BUILD_DIR");
    char path[512];
    (void)state;
    if (dir) {
        snprintf(path, sizeof path, "%s/threads_weights.bin", dir);
        out = fopen(path, "wb");
        assert_non_null(out);
    }
    for (mlp_t = 0; mlp_t < 2; mlp_t++) {
        train_run one = {1, 0, NULL, 0, {0}}, three = {3, 0, NULL, 0, {0}};
        one.mlp_t = three.mlp_t = mlp_t;
        train(&one);
        train(&three);
        assert_non_null(one.params);
        assert_non_null(three.params);
        assert_int_equal(one.n, three.n);
        assert_memory_equal(one.loss, three.loss, sizeof one.loss);
        assert_memory_equal(one.params, three.params, one.n * sizeof(float));
        if (out) assert_int_equal(fwrite(one.params, sizeof(float), one.n, out), one.n);
        free(one.params), free(three.params);
    }
    if (out) assert_int_equal(fclose(out), 0);
}

/* Two trainings on two application threads at once, 3 threads each: whichever finds the pool
   busy runs its loops alone; both end where a lone run ends. */
static void test_concurrent_trainings(void **state) {
#if TR__POSIX
    train_run ref[2] = {{1, 0, NULL, 0, {0}}, {1, 1, NULL, 0, {0}}}, run[2] = {{3, 0, NULL, 0, {0}}, {3, 1, NULL, 0, {0}}};
    pthread_t th;
    int i;
    (void)state;
    train(&ref[0]);
    train(&ref[1]);
    assert_int_equal(pthread_create(&th, NULL, train, &run[1]), 0);
    train(&run[0]);
    assert_int_equal(pthread_join(th, NULL), 0);
    for (i = 0; i < 2; i++) {
        assert_non_null(ref[i].params);
        assert_non_null(run[i].params);
        assert_memory_equal(ref[i].params, run[i].params, ref[i].n * sizeof(float));
        free(ref[i].params), free(run[i].params);
    }
#else
    (void)state;
    skip();
#endif
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_par_split),
        cmocka_unit_test(test_par_for_schedules),
        cmocka_unit_test(test_training_threads),
        cmocka_unit_test(test_concurrent_trainings),
    };
    return cmocka_run_group_tests_name("threads", tests, NULL, NULL);
}
