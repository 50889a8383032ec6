/* tests/test_checkpoint.c - model checkpoints and trainer state (the >>checkpoint section).
   Build: gcc -O2 -g -Wall -Wextra -std=c99 -fopenmp -I. tests/test_checkpoint.c -o build/test_checkpoint -lcmocka -lm
   Run from the repository root (the converted-checkpoint fixtures are read from tests/data, or
   from $TINYREC_SRCDIR/tests/data). */
#define TINYREC_IMPLEMENTATION
#include "test_util.h" /* the library first (its POSIX feature macros), then cmocka */

#include <dirent.h>
#include <unistd.h>

static char g_dir[256];
static char g_log[2048]; /* the last warning logged */
static int g_nwarn;

static void capture_log(void *user, tr_log_level level, const char *msg) {
    (void)user;
    if (level >= TR_LOG_WARN) {
        snprintf(g_log, sizeof g_log, "%s", msg);
        g_nwarn++;
    }
}

static tr_ctx *make_ctx(int threads, uint64_t seed) {
    tr_ctx_config cc = tr_ctx_config_default();
    tr_ctx *ctx = NULL;
    cc.num_threads = threads;
    cc.seed = seed;
    cc.log = capture_log;
    assert_int_equal(tr_ctx_create(&cc, &ctx), TR_OK);
    return ctx;
}

static void path_in(char *buf, size_t cap, const char *name) { snprintf(buf, cap, "%s/%s", g_dir, name); }

#define ASSERT_ERR(call, status, needle)                                                                           \
    do {                                                                                                           \
        tr_status st_ = (call);                                                                                    \
        if (st_ != (status)) fail_msg("%s: status %d (%s), want %d", #call, (int)st_, tr_ctx_last_error(ctx), (int)(status)); \
        if (!strstr(tr_ctx_last_error(ctx), needle)) fail_msg("%s: error '%s' lacks '%s'", #call, tr_ctx_last_error(ctx), needle); \
    } while (0)




/* A tiny model whose every tensor (puzzle table and q head included) is non-trivial. */
static tr_model *tiny_model(tr_ctx *ctx, int mlp_t, int npid) {
    tr_model_config c;
    tr_model *m;
    int i;
    tu_tiny_config(&c, mlp_t, mlp_t ? TR_POS_NONE : TR_POS_ROPE, TR_LOSS_STABLEMAX);
    c.num_puzzle_identifiers = npid;
    assert_int_equal(tr_model_create(ctx, &c, &m), TR_OK);
    for (i = 0; i < m->n_tensors; i++)
        if (!m->tensors[i].trainable || m->tensors[i].data == m->W_q) tu_fill(m->tensors[i].data, m->tensors[i].numel, 100 + (uint64_t)i, 0.7f);
    return m;
}

static void assert_models_equal(const tr_model *a, const tr_model *b) {
    int i;
    assert_int_equal(a->n_tensors, b->n_tensors);
    assert_memory_equal(&a->cfg, &b->cfg, sizeof a->cfg);
    for (i = 0; i < a->n_tensors; i++) {
        assert_string_equal(a->tensors[i].name, b->tensors[i].name);
        assert_int_equal(a->tensors[i].numel, b->tensors[i].numel);
        if (memcmp(a->tensors[i].data, b->tensors[i].data, a->tensors[i].numel * 4) != 0) fail_msg("tensor %s differs", a->tensors[i].name);
    }
}

/* A copy of a file's tensors and metadata that a test can edit, then write elsewhere. */
typedef struct edit {
    tr_st_file *f;
    tr_st_tensor ts[128];
    size_t n;
    const char *mk[16], *mv[16];
    size_t nm;
} edit;

static void edit_open(tr_ctx *ctx, edit *e, const char *src) {
    size_t i;
    memset(e, 0, sizeof *e);
    assert_int_equal(tr_st_open(ctx, src, &e->f), TR_OK);
    e->n = tr_st_count(e->f);
    assert_true(e->n <= 128);
    for (i = 0; i < e->n; i++) e->ts[i] = *tr_st_at(e->f, i);
    e->nm = tr_st_metadata_count(e->f);
    for (i = 0; i < e->nm; i++) e->mk[i] = tr_st_metadata_key(e->f, i), e->mv[i] = tr_st_metadata(e->f, e->mk[i]);
}
static tr_st_tensor *edit_find(edit *e, const char *name) {
    size_t i;
    for (i = 0; i < e->n; i++)
        if (strcmp(e->ts[i].name, name) == 0) return &e->ts[i];
    fail_msg("no tensor %s", name);
    return NULL;
}
static void edit_drop(edit *e, const char *name) {
    tr_st_tensor *t = edit_find(e, name);
    size_t i = (size_t)(t - e->ts);
    memmove(&e->ts[i], &e->ts[i + 1], (e->n - i - 1) * sizeof e->ts[0]);
    e->n--;
}
static void edit_meta(edit *e, const char *key, const char *value) { /* value NULL: remove */
    size_t i;
    for (i = 0; i < e->nm; i++)
        if (strcmp(e->mk[i], key) == 0) {
            if (value) e->mv[i] = value;
            else {
                memmove(&e->mk[i], &e->mk[i + 1], (e->nm - i - 1) * sizeof e->mk[0]);
                memmove(&e->mv[i], &e->mv[i + 1], (e->nm - i - 1) * sizeof e->mv[0]);
                e->nm--;
            }
            return;
        }
    if (value) e->mk[e->nm] = key, e->mv[e->nm++] = value;
}
static void edit_write(tr_ctx *ctx, edit *e, const char *dst) {
    if (tr_st_write(ctx, dst, e->ts, e->n, e->mk, e->mv, e->nm) != TR_OK) fail_msg("edit_write: %s", tr_ctx_last_error(ctx));
}
static void edit_close(edit *e) { tr_st_close(e->f); }

static int group_setup(void **state) {
    (void)state;
    strcpy(g_dir, "/tmp/tinyrec_test_ckpt_XXXXXX");
    return mkdtemp(g_dir) ? 0 : 1;
}
static int group_teardown(void **state) {
    (void)state;
    tu_rm_tree(g_dir); /* (with the datasets and runs the tests made under it) */
    return 0;
}

/* ---- round trips -------------------------------------------------------------------------- */
static void test_roundtrip_f32(void **state) {
    tr_ctx *ctx = make_ctx(1, 1);
    char p[512], cj[2048];
    int mlp_t;
    (void)state;
    for (mlp_t = 0; mlp_t < 2; mlp_t++) {
        tr_model *m = tiny_model(ctx, mlp_t, 3), *m2, *m3;
        tr_st_file *f;
        const tr_st_tensor *t;
        tr_model_config rc;
        size_t len;
        path_in(p, sizeof p, "rt.safetensors");
        assert_int_equal(tr_model_save(m, p, NULL), TR_OK);
        /* the file: reference names, metadata */
        assert_int_equal(tr_st_open(ctx, p, &f), TR_OK);
        assert_int_equal(tr_st_count(f), (size_t)m->n_tensors);
        assert_non_null(t = tr_st_find(f, "model.inner.H_init"));
        assert_int_equal(t->dtype, TR_F32);
        assert_non_null(tr_st_find(f, "model.inner.L_init"));
        assert_non_null(t = tr_st_find(f, "model.inner.puzzle_emb.weights"));
        assert_int_equal(t->shape[0], 3), assert_int_equal(t->shape[1], 24);
        assert_non_null(tr_st_find(f, "model.inner.L_level.layers.0.mlp.gate_up_proj.weight"));
        assert_non_null(tr_st_find(f, "model.inner.L_level.layers.1.mlp.down_proj.weight"));
        assert_non_null(tr_st_find(f, mlp_t ? "model.inner.L_level.layers.1.mlp_t.gate_up_proj.weight" : "model.inner.L_level.layers.1.self_attn.qkv_proj.weight"));
        assert_non_null(tr_st_find(f, "model.inner.embed_tokens.embedding_weight"));
        assert_non_null(tr_st_find(f, "model.inner.lm_head.weight"));
        assert_non_null(tr_st_find(f, "model.inner.q_head.bias"));
        assert_string_equal(tr_st_metadata(f, "format"), "tinyrec");
        assert_string_equal(tr_st_metadata(f, "format_version"), "1");
        assert_string_equal(tr_st_metadata(f, "model"), "trm");
        assert_int_equal(tr_model_config_to_json(&m->cfg, cj, sizeof cj, &len), TR_OK);
        assert_string_equal(tr_st_metadata(f, "config"), cj);
        {
            static const char *const keys[] = {"\"hidden_size\":16", "\"num_heads\":2", "\"expansion\":4", "\"L_layers\":2", "\"H_layers\":0",
                                               "\"H_cycles\":2", "\"L_cycles\":2", "\"puzzle_emb_ndim\":24", "\"puzzle_emb_len\":2",
                                               "\"rope_theta\":10000", "\"rms_norm_eps\":1e-05", "\"halt_max_steps\":3",
                                               "\"halt_exploration_prob\":0.1", "\"forward_dtype\":\"float32\"", "\"vocab_size\":6",
                                               "\"seq_len\":16", "\"num_puzzle_identifiers\":3", "\"loss_type\":\"stablemax_cross_entropy\""};
            size_t k;
            for (k = 0; k < sizeof keys / sizeof keys[0]; k++)
                if (!strstr(cj, keys[k])) fail_msg("config %s lacks %s", cj, keys[k]);
            assert_non_null(strstr(cj, mlp_t ? "\"pos_encodings\":\"none\"" : "\"pos_encodings\":\"rope\""));
            assert_non_null(strstr(cj, mlp_t ? "\"mlp_t\":true" : "\"mlp_t\":false"));
        }
        tr_st_close(f);
        /* load creates the same model; load_weights fills an existing one */
        assert_int_equal(tr_model_load(ctx, p, NULL, &m2), TR_OK);
        assert_models_equal(m, m2);
        assert_int_equal(tr_checkpoint_read_config(ctx, p, &rc), TR_OK);
        assert_memory_equal(&rc, &m->cfg, sizeof rc);
        tr_ctx_set_num_threads(ctx, 1);
        {
            tr_model_config c = m->cfg;
            assert_int_equal(tr_model_create(ctx, &c, &m3), TR_OK); /* fresh init, other weights */
        }
        assert_int_equal(tr_model_load_weights(m3, p, NULL), TR_OK);
        assert_models_equal(m, m3);
        tr_model_destroy(m), tr_model_destroy(m2), tr_model_destroy(m3);
    }
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

static void test_roundtrip_bf16_f16(void **state) {
    tr_ctx *ctx = make_ctx(1, 2);
    tr_model *m = tiny_model(ctx, 0, 3), *m2;
    char p[512];
    int d, i;
    size_t k;
    (void)state;
    for (d = 0; d < 2; d++) {
        tr_model_save_options so;
        tr_st_file *f;
        so.dtype = d ? TR_F16 : TR_BF16;
        path_in(p, sizeof p, "half.safetensors");
        assert_int_equal(tr_model_save(m, p, &so), TR_OK);
        assert_int_equal(tr_st_open(ctx, p, &f), TR_OK);
        assert_int_equal(tr_st_find(f, "model.inner.lm_head.weight")->dtype, so.dtype);
        assert_int_equal(tr_st_find(f, "model.inner.lm_head.weight")->nbytes, 2 * (size_t)m->V * m->D);
        tr_st_close(f);
        assert_int_equal(tr_model_load(ctx, p, NULL, &m2), TR_OK);
        for (i = 0; i < m->n_tensors; i++)
            for (k = 0; k < m->tensors[i].numel; k++) {
                float x = m->tensors[i].data[k];
                float want = d ? tr__f16_to_f32(tr__f32_to_f16(x)) : tr__bf16_to_f32(tr__f32_to_bf16(x));
                if (memcmp(&want, &m2->tensors[i].data[k], 4) != 0) fail_msg("%s[%zu]: %g -> %g, want %g", m->tensors[i].name, k, x, m2->tensors[i].data[k], want);
            }
        tr_model_destroy(m2);
    }
    {
        tr_model_save_options so;
        so.dtype = TR_I32;
        ASSERT_ERR(tr_model_save(m, p, &so), TR_ERR_INVALID_ARG, "I32");
    }
    tr_model_destroy(m);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

/* torch.compile'd modules save "_orig_mod." keys: those load too */
static void test_prefixed_names(void **state) {
    tr_ctx *ctx = make_ctx(1, 3);
    tr_model *m = tiny_model(ctx, 1, 3), *m2;
    char p[512], q[512], names[64][160];
    edit e;
    size_t i;
    (void)state;
    path_in(p, sizeof p, "plain.safetensors");
    path_in(q, sizeof q, "prefixed.safetensors");
    assert_int_equal(tr_model_save(m, p, NULL), TR_OK);
    edit_open(ctx, &e, p);
    for (i = 0; i < e.n; i++) {
        snprintf(names[i], sizeof names[i], "_orig_mod.%s", e.ts[i].name);
        e.ts[i].name = names[i];
    }
    edit_write(ctx, &e, q);
    assert_int_equal(tr_model_load(ctx, q, NULL, &m2), TR_OK);
    assert_models_equal(m, m2);
    tr_model_destroy(m2);
    /* without any metadata, only load_weights works */
    e.nm = 0;
    edit_write(ctx, &e, q);
    ASSERT_ERR(tr_model_load(ctx, q, NULL, &m2), TR_ERR_FORMAT, "no tinyrec metadata");
    assert_null(m2);
    m2 = tiny_model(ctx, 1, 3);
    tu_fill(m2->params, m2->n_params, 5, 1.0f);
    assert_int_equal(tr_model_load_weights(m2, q, NULL), TR_OK);
    assert_models_equal(m, m2);
    tr_model_destroy(m2);
    /* one name both with and without the prefix is ambiguous */
    edit_close(&e);
    edit_open(ctx, &e, p);
    e.ts[e.n] = e.ts[0];
    snprintf(names[0], sizeof names[0], "_orig_mod.%s", e.ts[0].name);
    e.ts[e.n++].name = names[0];
    edit_write(ctx, &e, q);
    ASSERT_ERR(tr_model_load(ctx, q, NULL, &m2), TR_ERR_FORMAT, "there twice");
    assert_non_null(strstr(tr_ctx_last_error(ctx), e.ts[0].name));
    edit_close(&e);
    tr_model_destroy(m);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

/* ---- wrong tensors ------------------------------------------------------------------------ */
static void test_wrong_tensors(void **state) {
    tr_ctx *ctx = make_ctx(1, 4);
    tr_model *m = tiny_model(ctx, 0, 3), *m2 = NULL, *before, *tmp = NULL;
    char p[512], q[512];
    const char *qkv = "model.inner.L_level.layers.1.self_attn.qkv_proj.weight";
    edit e;
    tr_model_load_options lo;
    (void)state;
    path_in(p, sizeof p, "good.safetensors");
    path_in(q, sizeof q, "bad.safetensors");
    assert_int_equal(tr_model_save(m, p, NULL), TR_OK);
    before = tiny_model(ctx, 0, 3);
    tu_fill(before->params, before->n_params, 77, 1.0f);
    m2 = tiny_model(ctx, 0, 3);
    memcpy(m2->params, before->params, m2->n_params * 4);

    /* missing: each named */
    edit_open(ctx, &e, p);
    edit_drop(&e, qkv);
    edit_drop(&e, "model.inner.H_init");
    edit_write(ctx, &e, q);
    ASSERT_ERR(tr_model_load(ctx, q, NULL, &tmp), TR_ERR_NOT_FOUND, "2 tensors of the model are missing");
    assert_null(tmp);
    assert_non_null(strstr(tr_ctx_last_error(ctx), qkv));
    assert_non_null(strstr(tr_ctx_last_error(ctx), "'model.inner.H_init'"));
    assert_non_null(strstr(tr_ctx_last_error(ctx), q));
    ASSERT_ERR(tr_model_load_weights(m2, q, NULL), TR_ERR_NOT_FOUND, qkv);
    assert_memory_equal(m2->params, before->params, m2->n_params * 4); /* untouched */
    edit_close(&e);

    /* unexpected: an error, or skipped with a warning when allowed */
    edit_open(ctx, &e, p);
    e.ts[e.n] = *edit_find(&e, "model.inner.H_init");
    e.ts[e.n++].name = "model.inner.H_level.layers.0.mlp.down_proj.weight";
    e.ts[e.n] = *edit_find(&e, "model.inner.L_init");
    e.ts[e.n++].name = "optimizer.step";
    edit_write(ctx, &e, q);
    ASSERT_ERR(tr_model_load_weights(m2, q, NULL), TR_ERR_FORMAT, "2 unexpected tensors");
    assert_non_null(strstr(tr_ctx_last_error(ctx), "'model.inner.H_level.layers.0.mlp.down_proj.weight'"));
    assert_non_null(strstr(tr_ctx_last_error(ctx), "'optimizer.step'"));
    assert_memory_equal(m2->params, before->params, m2->n_params * 4);
    memset(&lo, 0, sizeof lo);
    lo.allow_unexpected = 1;
    g_log[0] = 0;
    assert_int_equal(tr_model_load_weights(m2, q, &lo), TR_OK);
    assert_non_null(strstr(g_log, "optimizer.step"));
    assert_models_equal(m, m2);
    tr_model_destroy(m2);
    edit_close(&e);

    /* mis-shaped (same byte count, transposed) and a non-float dtype */
    m2 = tiny_model(ctx, 0, 3);
    memcpy(m2->params, before->params, m2->n_params * 4);
    edit_open(ctx, &e, p);
    {
        tr_st_tensor *t = edit_find(&e, qkv);
        int64_t d = t->shape[0];
        t->shape[0] = t->shape[1], t->shape[1] = d;
    }
    edit_write(ctx, &e, q);
    ASSERT_ERR(tr_model_load_weights(m2, q, NULL), TR_ERR_FORMAT, "has shape [16,48], expected [48,16]");
    assert_non_null(strstr(tr_ctx_last_error(ctx), qkv));
    ASSERT_ERR(tr_model_load(ctx, q, NULL, &tmp), TR_ERR_FORMAT, qkv);
    assert_null(tmp);
    edit_close(&e);
    edit_open(ctx, &e, p);
    edit_find(&e, "model.inner.q_head.bias")->dtype = TR_I32; /* 2 x 4 bytes either way */
    edit_write(ctx, &e, q);
    ASSERT_ERR(tr_model_load_weights(m2, q, NULL), TR_ERR_FORMAT, "'model.inner.q_head.bias' has dtype I32");
    assert_memory_equal(m2->params, before->params, m2->n_params * 4);
    edit_close(&e);
    /* a model file is not a trainer state, and the reverse */
    {
        tr_train_config tc = tr_train_config_default();
        tr_trainer *t;
        tc.global_batch_size = 2;
        assert_int_equal(tr_trainer_create(m2, &tc, &t), TR_OK);
        ASSERT_ERR(tr_trainer_load(t, p, NULL, 0, NULL), TR_ERR_FORMAT, "is not a trainer_state file");
        assert_int_equal(tr_trainer_save(t, q, NULL, 0), TR_OK);
        ASSERT_ERR(tr_model_load(ctx, q, NULL, &tmp), TR_ERR_FORMAT, "not a model file");
        tr_trainer_destroy(t);
    }
    ASSERT_ERR(tr_model_load(ctx, "/nonexistent/dir/x.safetensors", NULL, &tmp), TR_ERR_IO, "/nonexistent/dir/x.safetensors");
    tr_model_destroy(m2);
    tr_model_destroy(before);
    tr_model_destroy(m);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

/* ---- puzzle table with another row count -------------------------------------------------- */
static void test_puzzle_resize(void **state) {
    tr_ctx *ctx = make_ctx(1, 5);
    tr_model *m5 = tiny_model(ctx, 1, 5), *m = NULL, *m3;
    tr_model_load_options lo;
    char p[512];
    float mean[24];
    int r, k;
    (void)state;
    for (k = 0; k < 24; k++) {
        double s = 0;
        for (r = 0; r < 5; r++) s += m5->puzzle_emb[r * 24 + k];
        mean[k] = (float)(s / 5);
    }
    path_in(p, sizeof p, "pz5.safetensors");
    assert_int_equal(tr_model_save(m5, p, NULL), TR_OK);
    memset(&lo, 0, sizeof lo);
    /* the file's own size by default */
    assert_int_equal(tr_model_load(ctx, p, &lo, &m), TR_OK);
    assert_int_equal(m->cfg.num_puzzle_identifiers, 5);
    tr_model_destroy(m);
    /* the dataset's size, without permission: an error naming both sizes */
    lo.num_puzzle_identifiers = 3;
    ASSERT_ERR(tr_model_load(ctx, p, &lo, &m), TR_ERR_FORMAT, "'model.inner.puzzle_emb.weights' has 5 rows but the model has num_puzzle_identifiers = 3");
    assert_null(m);
    m3 = tiny_model(ctx, 1, 3);
    ASSERT_ERR(tr_model_load_weights(m3, p, &lo), TR_ERR_FORMAT, "5 rows");
    /* with permission: every row is the mean row, with a warning */
    lo.allow_puzzle_resize = 1;
    g_nwarn = 0;
    assert_int_equal(tr_model_load(ctx, p, &lo, &m), TR_OK);
    assert_int_equal(g_nwarn, 1);
    assert_non_null(strstr(g_log, "mean row"));
    assert_non_null(strstr(g_log, "5 rows"));
    assert_int_equal(m->cfg.num_puzzle_identifiers, 3);
    for (r = 0; r < 3; r++) assert_memory_equal(m->puzzle_emb + r * 24, mean, sizeof mean);
    for (k = 0; k < m->n_tensors; k++)
        if (m->tensors[k].data != m->puzzle_emb) assert_memory_equal(m->tensors[k].data, m5->tensors[k].data, m->tensors[k].numel * 4);
    tr_model_destroy(m);
    assert_int_equal(tr_model_load_weights(m3, p, &lo), TR_OK);
    for (r = 0; r < 3; r++) assert_memory_equal(m3->puzzle_emb + r * 24, mean, sizeof mean);
    /* a different embedding width is a plain shape error, permission or not */
    tr_model_destroy(m3);
    {
        tr_model_config c = m5->cfg;
        c.puzzle_emb_ndim = 16, c.num_puzzle_identifiers = 3;
        assert_int_equal(tr_model_create(ctx, &c, &m3), TR_OK);
        ASSERT_ERR(tr_model_load_weights(m3, p, &lo), TR_ERR_FORMAT, "has shape [5,24], expected [3,16]");
        tr_model_destroy(m3);
    }
    tr_model_destroy(m5);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

/* ---- bad metadata ------------------------------------------------------------------------- */
static void test_bad_metadata(void **state) {
    tr_ctx *ctx = make_ctx(1, 6);
    tr_model *m = tiny_model(ctx, 0, 3), *m2 = NULL;
    char p[512], q[512], cj[2048], bad[2100];
    edit e;
    static const struct {
        const char *from, *to;
        tr_status st;
        const char *needle;
    } cases[] = {
        {"\"num_heads\":2", "\"num_heads\":5", TR_ERR_CONFIG, "num_heads 5 does not divide hidden_size 16"},
        {"\"hidden_size\":16", "\"hidden_size\":-16", TR_ERR_CONFIG, "hidden_size"},
        {"\"halt_exploration_prob\":0.1", "\"halt_exploration_prob\":2", TR_ERR_CONFIG, "halt_exploration_prob"},
        {"\"hidden_size\":16,", "", TR_ERR_FORMAT, "missing field 'hidden_size'"},
        {"\"L_layers\":2", "\"L_layers\":2.5", TR_ERR_FORMAT, "field 'L_layers' must be an integer"},
        {"\"mlp_t\":false", "\"mlp_t\":\"no\"", TR_ERR_FORMAT, "field 'mlp_t' must be true or false"},
        {"\"pos_encodings\":\"rope\"", "\"pos_encodings\":\"alibi\"", TR_ERR_FORMAT, "'pos_encodings' is 'alibi'"},
        {"\"forward_dtype\":\"float32\"", "\"forward_dtype\":\"int8\"", TR_ERR_FORMAT, "forward_dtype"},
        {"{", "[", TR_ERR_FORMAT, "invalid JSON"},
        {"\"hidden_size\":16", "\"hidden_size\":4096", TR_ERR_FORMAT, "tensors are missing or the config is wrong"},
    };
    size_t i;
    (void)state;
    path_in(p, sizeof p, "meta.safetensors");
    path_in(q, sizeof q, "meta_bad.safetensors");
    assert_int_equal(tr_model_save(m, p, NULL), TR_OK);
    assert_int_equal(tr_model_config_to_json(&m->cfg, cj, sizeof cj, NULL), TR_OK);
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *at = strstr(cj, cases[i].from);
        assert_non_null(at);
        snprintf(bad, sizeof bad, "%.*s%s%s", (int)(at - cj), cj, cases[i].to, at + strlen(cases[i].from));
        edit_open(ctx, &e, p);
        edit_meta(&e, "config", bad);
        edit_write(ctx, &e, q);
        ASSERT_ERR(tr_model_load(ctx, q, NULL, &m2), cases[i].st, cases[i].needle);
        assert_non_null(strstr(tr_ctx_last_error(ctx), q));
        assert_null(m2);
        edit_close(&e);
    }
    /* a bad config fails load_weights too (a model file must be consistent) */
    edit_open(ctx, &e, p);
    edit_meta(&e, "config", "{\"hidden_size\":16}");
    edit_write(ctx, &e, q);
    ASSERT_ERR(tr_model_load_weights(m, q, NULL), TR_ERR_FORMAT, "missing field 'num_heads'");
    edit_close(&e);
    /* the other metadata keys */
    {
        static const struct {
            const char *key, *value;
            tr_status st;
            const char *needle;
        } mc[] = {
            {"format", "pt", TR_ERR_FORMAT, "format is 'pt'"},
            {"format_version", "99", TR_ERR_UNSUPPORTED, "format_version 99 is newer"},
            {"format_version", "x", TR_ERR_FORMAT, "format_version 'x'"},
            {"format_version", NULL, TR_ERR_FORMAT, "no 'format_version'"},
            {"model", "hrm", TR_ERR_FORMAT, "field 'arch' is 'trm' but the file's model is 'hrm'"},
            {"model", "gpt", TR_ERR_FORMAT, "model is 'gpt'"},
            {"model", NULL, TR_ERR_FORMAT, "no 'model'"},
            {"config", NULL, TR_ERR_FORMAT, "no 'config'"},
        };
        for (i = 0; i < sizeof mc / sizeof mc[0]; i++) {
            edit_open(ctx, &e, p);
            edit_meta(&e, mc[i].key, mc[i].value);
            edit_write(ctx, &e, q);
            ASSERT_ERR(tr_model_load(ctx, q, NULL, &m2), mc[i].st, mc[i].needle);
            edit_close(&e);
        }
    }
    /* a behaviour-only difference: load_weights warns and loads */
    {
        tr_model_config c = m->cfg;
        tr_model *m3;
        c.L_cycles = 3;
        assert_int_equal(tr_model_create(ctx, &c, &m3), TR_OK);
        g_log[0] = 0;
        assert_int_equal(tr_model_load_weights(m3, p, NULL), TR_OK);
        assert_non_null(strstr(g_log, "'L_cycles' is 2 in the file but 3 here"));
        tr_model_destroy(m3);
    }
    tr_model_destroy(m);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

static void test_config_json(void **state) {
    tr_ctx *ctx = make_ctx(1, 7);
    const char *const *names = tr_model_config_preset_names();
    char buf[2048], sp[64];
    size_t len, need;
    (void)state;
    for (; *names; names++) {
        tr_model_config c, d;
        assert_int_equal(tr_model_config_preset(&c, *names), TR_OK);
        assert_int_equal(tr_model_config_to_json(&c, buf, sizeof buf, &len), TR_OK);
        assert_int_equal(strlen(buf), len);
        assert_int_equal(tr_model_config_from_json(ctx, buf, len, "preset", &d), TR_OK);
        assert_memory_equal(&c, &d, sizeof c);
        assert_int_equal(tr_model_config_to_json(&c, buf, 10, &need), TR_ERR_OVERFLOW);
        assert_int_equal(need, len);
    }
    /* the reference's short loss names and 0/1 booleans; unknown keys are ignored */
    {
        tr_model_config c;
        const char *j = "{\"hidden_size\":64,\"num_heads\":4,\"expansion\":4,\"L_layers\":2,\"H_cycles\":3,\"L_cycles\":6,\"puzzle_emb_ndim\":64,"
                        "\"puzzle_emb_len\":1,\"pos_encodings\":\"learned\",\"mlp_t\":0,\"halt_max_steps\":16,\"halt_exploration_prob\":0.1,"
                        "\"vocab_size\":12,\"seq_len\":900,\"num_puzzle_identifiers\":961,\"loss_type\":\"softmax\",\"name\":\"x\","
                        "\"forward_dtype\":\"bfloat16\"}";
        assert_int_equal(tr_model_config_from_json(ctx, j, strlen(j), NULL, &c), TR_OK);
        assert_int_equal(c.pos_encodings, TR_POS_LEARNED);
        assert_int_equal(c.loss_type, TR_LOSS_SOFTMAX);
        assert_true(c.rope_theta == 10000.0 && c.rms_norm_eps == 1e-5 && c.no_ACT_continue == 1 && c.H_layers == 0);
    }
    assert_int_equal(tr_trainer_state_path("ck/step_10.safetensors", sp, sizeof sp), TR_OK);
    assert_string_equal(sp, "ck/step_10.state.safetensors");
    assert_int_equal(tr_trainer_state_path("ck/model", sp, sizeof sp), TR_OK);
    assert_string_equal(sp, "ck/model.state.safetensors");
    assert_int_equal(tr_trainer_state_path("ck/step_10.safetensors", sp, 20), TR_ERR_OVERFLOW);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

/* ---- exact resume ------------------------------------------------------------------------- */
enum { RB = 4, RSTEPS = 25, RSPLIT = 10 };

typedef struct run_result {
    double losses[RSTEPS];
    tr_metrics metrics[RSTEPS];
    float *params, *puzzle, *ema, *adam;
    int32_t halted_at_split[RB];
    tr__rng rng_at_split;
    float *zh_at_split; /* z_H and z_L */
    size_t n_params, n_puzzle;
} run_result;

static tr_train_config resume_tc(void) {
    tr_train_config tc = tr_train_config_default();
    tc.global_batch_size = RB, tc.lr = 1e-3, tc.lr_warmup_steps = 3, tc.total_steps = 30, tc.lr_min_ratio = 0.1;
    tc.puzzle_emb_lr = 1e-2, tc.weight_decay = 0.1, tc.ema = 1, tc.ema_decay = 0.9;
    return tc;
}

/* mlp_t 2: an HRM (attention), whose trainer also keeps the Q-learning target */
static tr_model *resume_model(tr_ctx *ctx, int mlp_t) {
    tr_model_config c;
    tr_model *m;
    if (mlp_t == 2) tu_tiny_hrm_config(&c, 0, TR_POS_ROPE, TR_LOSS_STABLEMAX);
    else tu_tiny_config(&c, mlp_t, mlp_t ? TR_POS_NONE : TR_POS_ROPE, TR_LOSS_STABLEMAX);
    c.halt_exploration_prob = 0.5, c.halt_max_steps = 4;
    assert_int_equal(tr_model_create(ctx, &c, &m), TR_OK);
    tu_fill(m->W_q, 2 * (size_t)m->D, 31, 0.5f); /* q_halt of both signs: some rows halt early */
    m->b_q[0] = 3.0f; /* ... and exploration (min_steps) often overrides a halt, so the RNG matters */
    return m;
}

static void run_steps(tr_trainer *t, uint64_t from, uint64_t to, run_result *r) {
    tr_model *m = t->m;
    uint64_t k;
    for (k = from; k < to; k++) {
        int32_t in[RB * 16], lab[RB * 16], pid[RB];
        tr_batch b;
        tu_tiny_batch(RB, 16, 6, 1000 + k, in, lab, pid, m->cfg.num_puzzle_identifiers, 1000 + k);
        b.inputs = in, b.labels = lab, b.puzzle_identifiers = pid, b.batch_size = RB;
        assert_int_equal(tr_trainer_step(t, &b, &r->metrics[k]), TR_OK);
        r->losses[k] = r->metrics[k].loss;
        if (k + 1 == RSPLIT) {
            size_t n = tr__vals((size_t)RB * m->S * m->D, t->carry->z16);
            memcpy(r->halted_at_split, t->carry->halted, sizeof r->halted_at_split);
            r->rng_at_split = t->rng;
            r->zh_at_split = (float *)malloc(2 * n * 4);
            memcpy(r->zh_at_split, t->carry->z_H, n * 4);
            memcpy(r->zh_at_split + n, t->carry->z_L, n * 4);
        }
    }
}

static void finish_run(tr_trainer *t, run_result *r) {
    tr_model *m = t->m;
    r->n_params = m->n_params, r->n_puzzle = (size_t)m->cfg.num_puzzle_identifiers * m->Dp;
    r->params = (float *)malloc(r->n_params * 4);
    r->ema = (float *)malloc(r->n_params * 4);
    r->adam = (float *)malloc(2 * r->n_params * 4);
    r->puzzle = (float *)malloc(r->n_puzzle * 4);
    memcpy(r->params, m->params, r->n_params * 4);
    memcpy(r->ema, t->ema, r->n_params * 4);
    memcpy(r->adam, t->adam_m, r->n_params * 4);
    memcpy(r->adam + r->n_params, t->adam_v, r->n_params * 4);
    memcpy(r->puzzle, m->puzzle_emb, r->n_puzzle * 4);
}

static void free_run(run_result *r) { free(r->params), free(r->ema), free(r->adam), free(r->puzzle), free(r->zh_at_split); }

static void resume_variant(int mlp_t, int swap_ema_in_model_file) {
    run_result a, b;
    char mp[512], sp[512];
    tr_train_config tc = resume_tc();
    memset(&a, 0, sizeof a), memset(&b, 0, sizeof b);
    path_in(mp, sizeof mp, "resume.safetensors");
    assert_int_equal(tr_trainer_state_path(mp, sp, sizeof sp), TR_OK);
    { /* uninterrupted */
        tr_ctx *ctx = make_ctx(2, 11);
        tr_model *m = resume_model(ctx, mlp_t);
        tr_trainer *t;
        assert_int_equal(tr_trainer_create(m, &tc, &t), TR_OK);
        run_steps(t, 0, RSTEPS, &a);
        finish_run(t, &a);
        tr_trainer_destroy(t), tr_model_destroy(m), tr_ctx_destroy(ctx);
    }
    { /* 10 steps, save, destroy everything */
        tr_ctx *ctx = make_ctx(2, 11);
        tr_model *m = resume_model(ctx, mlp_t);
        tr_trainer *t;
        uint64_t pos = RSPLIT;
        int r, running = 0;
        assert_int_equal(tr_trainer_create(m, &tc, &t), TR_OK);
        run_steps(t, 0, RSPLIT, &b);
        for (r = 0; r < RB; r++) running += !t->carry->halted[r];
        assert_true(running > 0); /* the carry holds rows in flight (mid-ACT latent state) */
        if (swap_ema_in_model_file) assert_int_equal(tr_trainer_swap_ema(t), TR_OK); /* as the reference checkpoints */
        assert_int_equal(tr_model_save(m, mp, NULL), TR_OK);
        if (swap_ema_in_model_file) assert_int_equal(tr_trainer_swap_ema(t), TR_OK);
        assert_int_equal(tr_trainer_save(t, sp, &pos, sizeof pos), TR_OK);
        tr_trainer_destroy(t), tr_model_destroy(m);
        assert_int_equal(tr_ctx_live_allocs(ctx), 0);
        tr_ctx_destroy(ctx);
    }
    { /* a fresh context (another seed), model and trainer: load, 15 more steps */
        tr_ctx *ctx = make_ctx(2, 999);
        tr_model *m;
        tr_trainer *t;
        uint64_t pos = 0;
        size_t len = 0;
        assert_int_equal(tr_model_load(ctx, mp, NULL, &m), TR_OK);
        assert_int_equal(tr_trainer_create(m, &tc, &t), TR_OK);
        assert_int_equal(tr_trainer_load(t, sp, &pos, sizeof pos, &len), TR_OK);
        assert_int_equal(len, sizeof pos);
        assert_int_equal(pos, RSPLIT);
        assert_int_equal(tr_trainer_step_count(t), RSPLIT);
        /* the state that the next steps may or may not depend on, restored exactly */
        assert_memory_equal(t->carry->halted, b.halted_at_split, sizeof b.halted_at_split);
        assert_memory_equal(&t->rng, &b.rng_at_split, sizeof t->rng);
        {
            size_t n = tr__vals((size_t)RB * m->S * m->D, t->carry->z16);
            assert_memory_equal(t->carry->z_H, b.zh_at_split, n * 4);
            assert_memory_equal(t->carry->z_L, b.zh_at_split + n, n * 4);
        }
        run_steps(t, pos, RSTEPS, &b);
        finish_run(t, &b);
        tr_trainer_destroy(t), tr_model_destroy(m);
        assert_int_equal(tr_ctx_live_allocs(ctx), 0);
        tr_ctx_destroy(ctx);
    }
    /* bit for bit */
    assert_memory_equal(a.losses, b.losses, sizeof a.losses);
    assert_memory_equal(a.metrics, b.metrics, sizeof a.metrics);
    assert_memory_equal(a.params, b.params, a.n_params * 4);
    assert_memory_equal(a.puzzle, b.puzzle, a.n_puzzle * 4);
    assert_memory_equal(a.ema, b.ema, a.n_params * 4);
    assert_memory_equal(a.adam, b.adam, 2 * a.n_params * 4);
    /* and the run did train: losses moved */
    assert_true(a.losses[RSTEPS - 1] != a.losses[RSPLIT]);
    free_run(&a), free_run(&b);
}

static void test_resume_mlp_t(void **state) {
    (void)state;
    resume_variant(1, 0);
}
static void test_resume_attention(void **state) {
    (void)state;
    resume_variant(0, 1);
}
static void test_resume_hrm(void **state) {
    (void)state;
    resume_variant(2, 0);
}

/* An HRM file: both modules' reference names, model = "hrm", and the arch in the config; a file
   whose config has no "arch" (as older converters wrote) takes the model's from the metadata, with
   HRM's defaults for the optional fields. */
static void test_roundtrip_hrm(void **state) {
    tr_ctx *ctx = make_ctx(1, 1);
    char p[512], q[512], cj[2048];
    tr_model_config c, rc;
    tr_model *m, *m2;
    tr_st_file *f;
    edit e;
    int i;
    (void)state;
    tu_tiny_hrm_config(&c, 0, TR_POS_ROPE, TR_LOSS_STABLEMAX);
    assert_int_equal(tr_model_create(ctx, &c, &m), TR_OK);
    for (i = 0; i < m->n_tensors; i++)
        if (!m->tensors[i].trainable || m->tensors[i].data == m->W_q) tu_fill(m->tensors[i].data, m->tensors[i].numel, 100 + (uint64_t)i, 0.7f);
    path_in(p, sizeof p, "hrm.safetensors");
    path_in(q, sizeof q, "hrm2.safetensors");
    assert_int_equal(tr_model_save(m, p, NULL), TR_OK);
    assert_int_equal(tr_st_open(ctx, p, &f), TR_OK);
    assert_string_equal(tr_st_metadata(f, "model"), "hrm");
    assert_non_null(tr_st_find(f, "model.inner.H_level.layers.0.self_attn.qkv_proj.weight"));
    assert_null(tr_st_find(f, "model.inner.H_level.layers.1.self_attn.qkv_proj.weight")); /* H_layers = 1 */
    assert_non_null(tr_st_find(f, "model.inner.L_level.layers.1.mlp.down_proj.weight"));
    assert_non_null(strstr(tr_st_metadata(f, "config"), "\"arch\":\"hrm\""));
    assert_non_null(strstr(tr_st_metadata(f, "config"), "\"H_layers\":1"));
    tr_st_close(f);
    assert_int_equal(tr_model_load(ctx, p, NULL, &m2), TR_OK);
    assert_models_equal(m, m2);
    assert_memory_equal(&m2->cfg, &m->cfg, sizeof c);
    tr_model_destroy(m2);
    /* the config without "arch" and without no_ACT_continue: HRM, halting on q_continue */
    {
        tr_model_config d = m->cfg;
        size_t len;
        char *a;
        assert_int_equal(tr_model_config_to_json(&d, cj, sizeof cj, &len), TR_OK);
        a = strstr(cj, ",\"no_ACT_continue\":false");
        assert_non_null(a);
        memmove(a, a + strlen(",\"no_ACT_continue\":false"), strlen(a + strlen(",\"no_ACT_continue\":false")) + 1);
        a = strstr(cj, ",\"arch\":\"hrm\"");
        assert_non_null(a);
        memmove(a, a + strlen(",\"arch\":\"hrm\""), strlen(a + strlen(",\"arch\":\"hrm\"")) + 1);
        edit_open(ctx, &e, p);
        edit_meta(&e, "config", cj);
        edit_write(ctx, &e, q);
        edit_close(&e);
        assert_int_equal(tr_checkpoint_read_config(ctx, q, &rc), TR_OK);
        assert_memory_equal(&rc, &m->cfg, sizeof rc);
        /* the same JSON read on its own is a TRM's (no arch) */
        assert_int_equal(tr_model_config_from_json(ctx, cj, strlen(cj), NULL, &rc), TR_OK);
        assert_int_equal(rc.arch, TR_ARCH_TRM);
        assert_int_equal(rc.no_ACT_continue, 1);
    }
    /* the metadata and the config must agree on the model kind */
    edit_open(ctx, &e, p);
    edit_meta(&e, "model", "trm");
    edit_write(ctx, &e, q);
    edit_close(&e);
    {
        tr_model *m3 = NULL;
        ASSERT_ERR(tr_model_load(ctx, q, NULL, &m3), TR_ERR_FORMAT, "field 'arch' is 'hrm' but the file's model is 'trm'");
        assert_null(m3);
    }
    tr_model_destroy(m);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

static void test_trainer_state_errors(void **state) {
    tr_ctx *ctx = make_ctx(1, 8);
    tr_model *m = tiny_model(ctx, 1, 3), *m2;
    tr_trainer *t, *t2;
    tr_train_config tc = resume_tc();
    char sp[512], q[512];
    unsigned char blob[40], got[40];
    size_t len = 0;
    edit e;
    int i;
    (void)state;
    path_in(sp, sizeof sp, "errs.state.safetensors");
    path_in(q, sizeof q, "errs_bad.state.safetensors");
    for (i = 0; i < 40; i++) blob[i] = (unsigned char)(i * 7);
    tc.global_batch_size = 2;
    assert_int_equal(tr_trainer_create(m, &tc, &t), TR_OK);
    {
        int32_t in[32], lab[32], pid[2];
        tr_batch b;
        tu_tiny_batch(2, 16, 6, 3, in, lab, pid, 3, 3);
        b.inputs = in, b.labels = lab, b.puzzle_identifiers = pid, b.batch_size = 2;
        assert_int_equal(tr_trainer_step(t, &b, NULL), TR_OK);
    }
    assert_int_equal(tr_trainer_save(t, sp, blob, sizeof blob), TR_OK);
    /* the blob: returned, measured, or too big for the buffer (then nothing changes) */
    tr_ctx_set_num_threads(ctx, 1);
    assert_int_equal(tr_trainer_create(m, &tc, &t2), TR_OK);
    ASSERT_ERR(tr_trainer_load(t2, sp, got, 39, &len), TR_ERR_OVERFLOW, "40 bytes");
    assert_int_equal(len, 40);
    assert_int_equal(tr_trainer_step_count(t2), 0);
    assert_int_equal(tr_trainer_load(t2, sp, NULL, 0, &len), TR_OK);
    assert_int_equal(tr_trainer_load(t2, sp, got, sizeof got, &len), TR_OK);
    assert_memory_equal(got, blob, sizeof blob);
    assert_int_equal(tr_trainer_step_count(t2), 1);
    tr_trainer_destroy(t2);
    /* another batch size */
    tc.global_batch_size = 3;
    assert_int_equal(tr_trainer_create(m, &tc, &t2), TR_OK);
    ASSERT_ERR(tr_trainer_load(t2, sp, NULL, 0, NULL), TR_ERR_CONFIG, "global_batch_size 2, the trainer 3");
    tr_trainer_destroy(t2);
    tc.global_batch_size = 2;
    /* another model config */
    {
        tr_model_config c = m->cfg;
        c.L_cycles = 3;
        assert_int_equal(tr_model_create(ctx, &c, &m2), TR_OK);
        assert_int_equal(tr_trainer_create(m2, &tc, &t2), TR_OK);
        ASSERT_ERR(tr_trainer_load(t2, sp, NULL, 0, NULL), TR_ERR_CONFIG, "'L_cycles' is 2 in the file but 3 here");
        tr_trainer_destroy(t2);
        tr_model_destroy(m2);
    }
    /* a changed learning rate is allowed, with a warning */
    tc.lr = 5e-4;
    assert_int_equal(tr_trainer_create(m, &tc, &t2), TR_OK);
    g_log[0] = 0;
    assert_int_equal(tr_trainer_load(t2, sp, NULL, 0, NULL), TR_OK);
    assert_non_null(strstr(g_log, "'lr' is 0.001 in the file but 0.0005 here"));
    tc.lr = 1e-3;
    /* corrupted state: a carry id out of range, a wrong dtype, a missing and an extra tensor */
    {
        int32_t badpid[2] = {0, 7};
        edit_open(ctx, &e, sp);
        edit_find(&e, "carry.puzzle_identifiers")->data = badpid;
        edit_write(ctx, &e, q);
        ASSERT_ERR(tr_trainer_load(t2, q, NULL, 0, NULL), TR_ERR_FORMAT, "carry row 1 is invalid");
        edit_close(&e);
        edit_open(ctx, &e, sp);
        edit_find(&e, "carry.halted")->dtype = TR_F32;
        edit_write(ctx, &e, q);
        ASSERT_ERR(tr_trainer_load(t2, q, NULL, 0, NULL), TR_ERR_FORMAT, "'carry.halted' has dtype F32, expected I32");
        edit_close(&e);
        edit_open(ctx, &e, sp);
        edit_drop(&e, "optimizer.exp_avg_sq.model.inner.lm_head.weight");
        edit_write(ctx, &e, q);
        ASSERT_ERR(tr_trainer_load(t2, q, NULL, 0, NULL), TR_ERR_NOT_FOUND, "missing tensor 'optimizer.exp_avg_sq.model.inner.lm_head.weight'");
        edit_close(&e);
        edit_open(ctx, &e, sp);
        e.ts[e.n] = *edit_find(&e, "trainer.rng");
        e.ts[e.n++].name = "trainer.rng2";
        edit_write(ctx, &e, q);
        ASSERT_ERR(tr_trainer_load(t2, q, NULL, 0, NULL), TR_ERR_FORMAT, "1 unexpected tensor in the trainer state: 'trainer.rng2'");
        edit_close(&e);
    }
    tr_trainer_destroy(t2);
    tr_trainer_destroy(t);
    tr_model_destroy(m);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

/* ---- allocation failures ------------------------------------------------------------------ */
/* Fails the k-th allocation of `op` for k = 1, 2, ... until it succeeds; every failure is a clean
   TR_ERR_OUT_OF_MEMORY with no leak. Returns the number of failures injected. */
typedef tr_status (*op_fn)(tr_ctx *ctx, void *user);
static int fault_loop(tr_ctx *ctx, op_fn op, void *user, const char *what) {
    int k;
    for (k = 1; k < 10000; k++) {
        long live = tr_ctx_live_allocs(ctx);
        tr_status st;
        tr_ctx_fail_alloc_at(ctx, k);
        st = op(ctx, user);
        tr_ctx_fail_alloc_at(ctx, 0);
        if (st == TR_OK) return k - 1;
        if (st != TR_ERR_OUT_OF_MEMORY) fail_msg("%s: failing allocation %d gave status %d: %s", what, k, (int)st, tr_ctx_last_error(ctx));
        if (!strstr(tr_ctx_last_error(ctx), "out of memory")) fail_msg("%s: allocation %d: error '%s'", what, k, tr_ctx_last_error(ctx));
        if (tr_ctx_live_allocs(ctx) != live) fail_msg("%s: allocation %d leaks %ld", what, k, tr_ctx_live_allocs(ctx) - live);
    }
    fail_msg("%s: never succeeded", what);
    return 0;
}

typedef struct fault_env {
    tr_model *m;
    tr_trainer *t;
    char path[512], spath[512];
} fault_env;

static tr_status op_save(tr_ctx *ctx, void *u) {
    fault_env *e = (fault_env *)u;
    tr_model_save_options so;
    (void)ctx;
    so.dtype = TR_BF16;
    return tr_model_save(e->m, e->path, &so);
}
static tr_status op_load(tr_ctx *ctx, void *u) {
    fault_env *e = (fault_env *)u;
    tr_model *m = NULL;
    tr_status st = tr_model_load(ctx, e->path, NULL, &m);
    if (st == TR_OK) assert_non_null(m);
    else assert_null(m);
    tr_model_destroy(m);
    return st;
}
static tr_status op_load_weights(tr_ctx *ctx, void *u) {
    fault_env *e = (fault_env *)u;
    tr_model_load_options lo;
    (void)ctx;
    memset(&lo, 0, sizeof lo);
    lo.allow_puzzle_resize = 1;
    return tr_model_load_weights(e->m, e->path, &lo);
}
static tr_status op_tsave(tr_ctx *ctx, void *u) {
    fault_env *e = (fault_env *)u;
    (void)ctx;
    return tr_trainer_save(e->t, e->spath, "abc", 3);
}
static tr_status op_tload(tr_ctx *ctx, void *u) {
    fault_env *e = (fault_env *)u;
    char buf[8];
    (void)ctx;
    return tr_trainer_load(e->t, e->spath, buf, sizeof buf, NULL);
}

static void test_alloc_faults(void **state) {
    tr_ctx *ctx = make_ctx(1, 9);
    fault_env e;
    tr_train_config tc = tr_train_config_default();
    int n;
    (void)state;
    e.m = tiny_model(ctx, 0, 3);
    tc.global_batch_size = 2;
    assert_int_equal(tr_trainer_create(e.m, &tc, &e.t), TR_OK);
    path_in(e.path, sizeof e.path, "faults.safetensors");
    path_in(e.spath, sizeof e.spath, "faults.state.safetensors");
    n = fault_loop(ctx, op_save, &e, "tr_model_save");
    assert_true(n > 3);
    n = fault_loop(ctx, op_load, &e, "tr_model_load");
    assert_true(n > 5);
    n = fault_loop(ctx, op_load_weights, &e, "tr_model_load_weights");
    assert_true(n > 3);
    n = fault_loop(ctx, op_tsave, &e, "tr_trainer_save");
    assert_true(n > 3);
    n = fault_loop(ctx, op_tload, &e, "tr_trainer_load");
    assert_true(n > 3);
    assert_int_equal(tu_count_tmp_files(g_dir), 0);
    tr_trainer_destroy(e.t);
    tr_model_destroy(e.m);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

/* ---- atomic replacement ------------------------------------------------------------------- */
static void test_atomic_save(void **state) {
    tr_ctx *ctx = make_ctx(1, 10);
    tr_model *a = tiny_model(ctx, 1, 3), *b = tiny_model(ctx, 1, 3), *got;
    tr_train_config tc = tr_train_config_default();
    tr_trainer *t;
    char p[512], sp[512];
    static const tr__io_fault_kind kinds[] = {TR__IO_FAULT_SHORT, TR__IO_FAULT_ENOSPC};
    static const uint64_t cuts[] = {0, 5, 8, 200, 4096, 30000};
    size_t i, c;
    unsigned char blob[3] = {1, 2, 3}, gotb[3];
    (void)state;
    tu_fill(b->params, b->n_params, 12, 1.0f); /* b differs from a everywhere */
    path_in(p, sizeof p, "atomic.safetensors");
    path_in(sp, sizeof sp, "atomic.state.safetensors");
    assert_int_equal(tr_model_save(a, p, NULL), TR_OK);
    tc.global_batch_size = 2;
    assert_int_equal(tr_trainer_create(a, &tc, &t), TR_OK);
    assert_int_equal(tr_trainer_save(t, sp, blob, 3), TR_OK);
    for (i = 0; i < 2; i++)
        for (c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
            tr__io_fault fault;
            fault.kind = kinds[i];
            fault.at_byte = cuts[c];
            ASSERT_ERR(tr__model_save_ex(b, p, NULL, &fault), TR_ERR_IO, "the previous file is unchanged");
            assert_non_null(strstr(tr_ctx_last_error(ctx), p));
            assert_non_null(strstr(tr_ctx_last_error(ctx), kinds[i] == TR__IO_FAULT_ENOSPC ? "No space left on device" : "short write"));
            assert_int_equal(tu_count_tmp_files(g_dir), 0);
            assert_int_equal(tr_model_load(ctx, p, NULL, &got), TR_OK); /* the previous checkpoint, intact */
            assert_models_equal(a, got);
            tr_model_destroy(got);
            t->step = 5;
            ASSERT_ERR(tr__trainer_save_ex(t, sp, blob, 3, &fault), TR_ERR_IO, "the previous file is unchanged");
            t->step = 0;
            assert_int_equal(tu_count_tmp_files(g_dir), 0);
            assert_int_equal(tr_trainer_load(t, sp, gotb, 3, NULL), TR_OK);
            assert_int_equal(tr_trainer_step_count(t), 0);
        }
    /* fsync and rename failures too */
    {
        tr__io_fault fault;
        fault.at_byte = 0;
        fault.kind = TR__IO_FAULT_FSYNC;
        ASSERT_ERR(tr__model_save_ex(b, p, NULL, &fault), TR_ERR_IO, "fsync");
        fault.kind = TR__IO_FAULT_RENAME;
        ASSERT_ERR(tr__model_save_ex(b, p, NULL, &fault), TR_ERR_IO, "renaming");
        assert_int_equal(tr_model_load(ctx, p, NULL, &got), TR_OK);
        assert_models_equal(a, got);
        tr_model_destroy(got);
    }
    /* and a save that succeeds replaces it */
    assert_int_equal(tr_model_save(b, p, NULL), TR_OK);
    assert_int_equal(tr_model_load(ctx, p, NULL, &got), TR_OK);
    assert_models_equal(b, got);
    tr_model_destroy(got);
    tr_trainer_destroy(t);
    tr_model_destroy(a), tr_model_destroy(b);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

/* ---- a training run's checkpoint (tr_checkpoint_save, tr_mkdir_p) ------------------------- */
static void one_step(tr_trainer *t, uint64_t seed) {
    int32_t in[2 * 16], lab[2 * 16], pid[2];
    tr_batch b;
    tu_tiny_batch(2, 16, 6, seed, in, lab, pid, 3, seed);
    b.inputs = in, b.labels = lab, b.puzzle_identifiers = pid, b.batch_size = 2;
    assert_int_equal(tr_trainer_step(t, &b, NULL), TR_OK);
}

static tr_status op_ck_save(tr_ctx *ctx, void *u) {
    fault_env *e = (fault_env *)u;
    (void)ctx;
    return tr_checkpoint_save(e->t, e->path, 1, "abc", 3);
}
static tr_status op_mkdir(tr_ctx *ctx, void *u) { return tr_mkdir_p(ctx, ((fault_env *)u)->spath); }

static void test_checkpoint_save(void **state) {
    tr_ctx *ctx = make_ctx(1, 11);
    tr_model *m = tiny_model(ctx, 0, 3), *got;
    tr_train_config tc = tr_train_config_default();
    fault_env e;
    char dir[400], p[512], bp[512], sp[512], sp2[512];
    unsigned char gotb[3];
    size_t len = 0;
    FILE *f;
    (void)state;
    tc.global_batch_size = 2, tc.ema = 1, tc.ema_decay = 0.5, tc.lr = 1e-2;
    e.m = m;
    assert_int_equal(tr_trainer_create(m, &tc, &e.t), TR_OK);
    one_step(e.t, 1); /* the EMA now differs from the live weights */
    /* mkdir -p: parents, an existing folder, a file in the way */
    path_in(dir, sizeof dir, "run/a/b");
    assert_int_equal(tr_mkdir_p(ctx, dir), TR_OK);
    assert_int_equal(tr_mkdir_p(ctx, dir), TR_OK);
    path_in(p, sizeof p, "run/file");
    f = fopen(p, "wb");
    assert_non_null(f);
    fclose(f);
    ASSERT_ERR(tr_mkdir_p(ctx, p), TR_ERR_IO, "Not a directory");
    assert_non_null(strstr(tr_ctx_last_error(ctx), p));
    strcat(p, "/x");
    ASSERT_ERR(tr_mkdir_p(ctx, p), TR_ERR_IO, "Not a directory");
    ASSERT_ERR(tr_mkdir_p(ctx, NULL), TR_ERR_INVALID_ARG, "path");
    assert_int_equal(tr_mkdir_p(NULL, dir), TR_ERR_INVALID_ARG);
    /* the three files: latest and best hold the EMA weights, the state the live ones and the blob */
    assert_int_equal(tr_checkpoint_save(e.t, dir, 1, "abc", 3), TR_OK);
    snprintf(p, sizeof p, "%s/%s", dir, TR_CHECKPOINT_LATEST);
    snprintf(bp, sizeof bp, "%s/%s", dir, TR_CHECKPOINT_BEST);
    snprintf(sp, sizeof sp, "%s/%s", dir, TR_CHECKPOINT_LATEST_STATE);
    assert_int_equal(tr_trainer_state_path(p, sp2, sizeof sp2), TR_OK);
    assert_string_equal(sp, sp2);
    assert_int_equal(tr_trainer_swap_ema(e.t), TR_OK);
    assert_int_equal(tr_model_load(ctx, p, NULL, &got), TR_OK);
    assert_models_equal(m, got);
    tr_model_destroy(got);
    assert_int_equal(tr_model_load(ctx, bp, NULL, &got), TR_OK);
    assert_models_equal(m, got);
    tr_model_destroy(got);
    assert_int_equal(tr_trainer_swap_ema(e.t), TR_OK);
    assert_int_equal(tr_trainer_load(e.t, sp, gotb, sizeof gotb, &len), TR_OK);
    assert_int_equal(len, 3);
    assert_memory_equal(gotb, "abc", 3);
    assert_int_equal(tr_trainer_step_count(e.t), 1);
    /* best = 0 leaves best alone */
    assert_int_equal(remove(bp), 0);
    assert_int_equal(tr_checkpoint_save(e.t, dir, 0, NULL, 0), TR_OK);
    assert_int_equal(access(bp, F_OK), -1);
    /* a disk fault on the second file (best): the error names it and the reason, and the state
       file is the previous one; a read-only folder fails the first */
    one_step(e.t, 2);
    tr_ctx_inject_fault(ctx, TR_FAULT_IO_ENOSPC, 2, 0);
    ASSERT_ERR(tr_checkpoint_save(e.t, dir, 1, "xyz", 3), TR_ERR_IO, "No space left on device");
    assert_non_null(strstr(tr_ctx_last_error(ctx), bp));
    assert_int_equal(access(bp, F_OK), -1);
    tr_ctx_inject_fault(ctx, TR_FAULT_IO_EROFS, 1, 0);
    ASSERT_ERR(tr_checkpoint_save(e.t, dir, 1, "xyz", 3), TR_ERR_IO, "Read-only file system");
    assert_non_null(strstr(tr_ctx_last_error(ctx), p));
    tr_ctx_inject_fault(ctx, TR_FAULT_NONE, 0, 0);
    assert_int_equal(tu_count_tmp_files(dir), 0);
    assert_int_equal(tr_trainer_load(e.t, sp, gotb, sizeof gotb, &len), TR_OK);
    assert_int_equal(len, 0); /* the state of the best = 0 save, which had no blob */
    assert_int_equal(tr_trainer_step_count(e.t), 1);
    /* NaN weights are never written */
    {
        float keep = m->params[5];
        m->params[5] = NAN;
        ASSERT_ERR(tr_checkpoint_save(e.t, dir, 1, NULL, 0), TR_ERR_NONFINITE, "NaN");
        assert_int_equal(access(bp, F_OK), -1);
        m->params[5] = keep;
    }
    /* bad arguments, a missing folder */
    assert_int_equal(tr_checkpoint_save(NULL, dir, 0, NULL, 0), TR_ERR_INVALID_ARG);
    ASSERT_ERR(tr_checkpoint_save(e.t, NULL, 0, NULL, 0), TR_ERR_INVALID_ARG, "dir");
    path_in(e.path, sizeof e.path, "no-such-run");
    ASSERT_ERR(tr_checkpoint_save(e.t, e.path, 0, NULL, 0), TR_ERR_IO, "no-such-run/" TR_CHECKPOINT_LATEST);
    /* allocation failures */
    snprintf(e.path, sizeof e.path, "%s", dir);
    assert_true(fault_loop(ctx, op_ck_save, &e, "tr_checkpoint_save") > 3);
    path_in(e.spath, sizeof e.spath, "run/c/d");
    assert_true(fault_loop(ctx, op_mkdir, &e, "tr_mkdir_p") >= 1);
    tr_trainer_destroy(e.t);
    tr_model_destroy(m);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

/* ---- evaluation (tr_evaluate) -------------------------------------------------------------- */
typedef struct eval_env {
    tr_model *m;
    tr_carry *c;
    tr_sampler *s;
    tr_sampler_state start;
    tr_eval_result r;
    int stop_at;
} eval_env;

static int eval_progress(void *user, const char *stage, int64_t done, int64_t total) {
    eval_env *e = (eval_env *)user;
    assert_string_equal(stage, "evaluate");
    assert_true(done <= total);
    return e->stop_at >= 0 && done >= e->stop_at;
}
static tr_status op_eval(tr_ctx *ctx, void *u) {
    eval_env *e = (eval_env *)u;
    (void)ctx;
    assert_int_equal(tr_sampler_set_state(e->s, &e->start), TR_OK);
    return tr_evaluate(e->m, e->c, e->s, 0, NULL, NULL, &e->r);
}

static void test_evaluate(void **state) {
    tr_ctx *ctx = make_ctx(1, 12);
    tr_split sp;
    tr_dataset_meta meta = tr_dataset_meta_default();
    tr_dataset *ds = NULL;
    tr_sampler_config sc = tr_sampler_config_default();
    tr_sampler *train;
    eval_env e;
    char dir[512];
    uint8_t in[16], lab[16];
    int i, j;
    tr_metrics sum, mt;
    int64_t nb = 0;
    int32_t preds[2 * 16];
    double by_step[3] = {0, 0, 0};
    tr_step_outputs o;
    int k;
    (void)state;
    memset(&o, 0, sizeof o);
    o.preds = preds;
    /* a test split of 7 examples: batches of 2, the last one padded */
    assert_int_equal(tr_split_init(ctx, &sp, 16, 7), TR_OK);
    for (i = 0; i < 7; i++) {
        for (j = 0; j < 16; j++) in[j] = (uint8_t)(1 + (i + j) % 5), lab[j] = (uint8_t)(1 + (i * j) % 5);
        assert_int_equal(tr_split_add_example(ctx, &sp, in, lab), TR_OK);
        assert_int_equal(tr_split_end_puzzle(ctx, &sp, 1 + i % 2), TR_OK);
        assert_int_equal(tr_split_end_group(ctx, &sp), TR_OK);
    }
    meta.vocab_size = 6, meta.num_puzzle_identifiers = 3;
    path_in(dir, sizeof dir, "evalds");
    assert_int_equal(tr_split_write(ctx, dir, "test", &sp, &meta), TR_OK);
    tr_split_free(ctx, &sp);
    assert_int_equal(tr_dataset_open(ctx, dir, "test", 0, &ds), TR_OK);
    sc.test_mode = 1, sc.global_batch_size = 2, sc.prefetch = 0;
    assert_int_equal(tr_sampler_create(ctx, ds, &sc, &e.s), TR_OK);
    tr_sampler_get_state(e.s, &e.start);
    e.m = tiny_model(ctx, 0, 3);
    assert_int_equal(tr_carry_create(e.m, 2, &e.c), TR_OK);
    /* the reference loop by hand */
    memset(&sum, 0, sizeof sum);
    for (;;) {
        tr_batch b;
        tr_batch_info info;
        assert_int_equal(tr_sampler_next(e.s, &b, &info), TR_OK);
        if (info.end) break;
        tr_carry_reset(e.c);
        k = 0;
        do {
            int r, t;
            assert_int_equal(tr_model_eval_step(e.m, e.c, &b, &o, &mt), TR_OK);
            for (r = 0; r < 2; r++) { /* the exact accuracy after each ACT step: every labelled cell predicted */
                int labelled = 0, ok = 1;
                for (t = 0; t < 16; t++)
                    if (b.labels[r * 16 + t] != -100) labelled = 1, ok &= preds[r * 16 + t] == b.labels[r * 16 + t];
                if (labelled) by_step[k] += ok;
            }
            k++;
        } while (!tr_carry_all_halted(e.c));
        sum.count += mt.count, sum.accuracy += mt.accuracy, sum.exact_accuracy += mt.exact_accuracy, sum.steps += mt.steps, sum.lm_loss += mt.lm_loss;
        nb++;
    }
    assert_int_equal(nb, 4);
    assert_int_equal(op_eval(ctx, &e), TR_OK);
    assert_int_equal(e.r.batches, 4);
    assert_true(e.r.count == 7 && sum.count == 7);
    assert_true(e.r.accuracy == sum.accuracy / 7 && e.r.exact_accuracy == sum.exact_accuracy / 7);
    assert_true(e.r.steps == 3 && e.r.lm_loss == sum.lm_loss / 7 && e.r.seconds >= 0);
    assert_int_equal(e.r.num_steps, 3);
    for (k = 0; k < 3; k++) assert_true(fabs(e.r.exact_by_step[k] - by_step[k] / 7) < 1e-12);
    assert_true(e.r.exact_by_step[2] == e.r.exact_accuracy); /* the last step is the evaluation's answer */
    /* at most 1 batch; stopped by progress; an exhausted pass is a fresh one */
    assert_int_equal(tr_sampler_set_state(e.s, &e.start), TR_OK);
    assert_int_equal(tr_evaluate(e.m, e.c, e.s, 1, NULL, NULL, &e.r), TR_OK);
    assert_true(e.r.batches == 1 && e.r.count == 2);
    assert_int_equal(tr_sampler_set_state(e.s, &e.start), TR_OK);
    e.stop_at = 2;
    ASSERT_ERR(tr_evaluate(e.m, e.c, e.s, 0, eval_progress, &e, &e.r), TR_ERR_INTERRUPTED, "after 2 of 4 batches");
    assert_int_equal(e.r.batches, 2);
    e.stop_at = -1;
    assert_int_equal(tr_sampler_set_state(e.s, &e.start), TR_OK);
    assert_int_equal(tr_evaluate(e.m, e.c, e.s, 0, eval_progress, &e, &e.r), TR_OK);
    assert_int_equal(e.r.batches, 4);
    assert_int_equal(tr_evaluate(e.m, e.c, e.s, 0, NULL, NULL, &e.r), TR_OK); /* the next pass: the same rows */
    assert_true(e.r.batches == 4 && e.r.count == 7);
    /* bad arguments: a train sampler would never end */
    sc.test_mode = 0;
    assert_int_equal(tr_sampler_create(ctx, ds, &sc, &train), TR_OK);
    ASSERT_ERR(tr_evaluate(e.m, e.c, train, 0, NULL, NULL, &e.r), TR_ERR_INVALID_ARG, "test mode");
    tr_sampler_destroy(train);
    assert_int_equal(tr_evaluate(NULL, e.c, e.s, 0, NULL, NULL, &e.r), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_evaluate(e.m, e.c, e.s, 0, NULL, NULL, NULL), TR_ERR_INVALID_ARG);
    fault_loop(ctx, op_eval, &e, "tr_evaluate");
    tr_carry_destroy(e.c);
    tr_model_destroy(e.m);
    tr_sampler_destroy(e.s);
    tr_dataset_close(ds);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

/* ---- a checkpoint converted from PyTorch -------------------------------------------------- */
/* tests/data/ckpt_tiny_{att,mlp}.safetensors come from tools/checkpoint_fixture.py: weights made
   by tools/torch_reference.py's initialiser, saved with torch.save under "_orig_mod.model.inner."
   keys, converted by tools/convert_checkpoint.py (the mlp_t one to BF16). The .expected files hold
   a batch and the twin's fp32 logits / q values after one ACT step from the initial carry.

   Tolerance: 1e-5 relative to the scale of the logits: |C - twin| <= 1e-5 * max|ref| + 1e-5 * |ref|
   (a per-element relative bound alone would be meaningless for logits near zero). One ACT step of
   these configs runs T * (n+1) * L_layers = 12 post-norm blocks in fp32 on both sides, summed in
   different orders. Measured: the twin's own fp32-vs-float64 deviation on these weights is
   3.8e-7 (att) and 2.8e-6 (mlp_t) of max|logit| (tools/checkpoint_fixture.py prints it), and C vs
   the twin is at most 5.7e-7 (att) and 3.4e-6 (mlp_t) over the scalar, AVX2 and AVX-512 kernels
   (printed below) - a margin of about 3x for the larger, while a wrong or misnamed tensor, a
   transposed weight or a bad bf16 conversion moves them by 1e-2 of max|logit| or more (rounding
   the att fixture's weights to bf16 alone moves the logits by 4e-2 absolute). */
static void check_fixture(const char *name) {
    tr_ctx *ctx = make_ctx(2, 0);
    char mp[512], ep[512];
    const char *dir = getenv("TINYREC_SRCDIR");
    tr_model *m;
    tr_st_file *ef;
    tr_carry *c;
    const tr_st_tensor *tin, *tpid, *tlog, *tqh, *tqc;
    int64_t shp[3];
    int B, i;
    float *logits, *qh, *qc, *ref, mx = 0;
    int32_t *in, *pid;
    tr_batch b;
    tr_step_outputs o;
    snprintf(mp, sizeof mp, "%s%stests/data/%s.safetensors", dir ? dir : "", dir ? "/" : "", name);
    snprintf(ep, sizeof ep, "%s%stests/data/%s.expected.safetensors", dir ? dir : "", dir ? "/" : "", name);
    if (tr_model_load(ctx, mp, NULL, &m) != TR_OK) fail_msg("%s (run from the repository root)", tr_ctx_last_error(ctx));
    /* the converted config says the reference's forward_dtype, bfloat16, and the model takes it; the twin's
       logits are fp32 */
    assert_int_equal(tr_model_get_config(m)->forward_dtype, TR_FWD_BFLOAT16);
    assert_int_equal(tr_model_set_forward_dtype(m, TR_FWD_FLOAT32), TR_OK);
    assert_int_equal(tr_st_open(ctx, ep, &ef), TR_OK);
    assert_non_null(tin = tr_st_find(ef, "inputs"));
    B = (int)tin->shape[0];
    shp[0] = B, shp[1] = m->L, shp[2] = m->V;
    assert_int_equal(tr_st_get(ctx, ef, "inputs", 2, shp, &tin), TR_OK);
    assert_int_equal(tr_st_get(ctx, ef, "puzzle_identifiers", 1, shp, &tpid), TR_OK);
    assert_int_equal(tr_st_get(ctx, ef, "logits", 3, shp, &tlog), TR_OK);
    assert_int_equal(tr_st_get(ctx, ef, "q_halt", 1, shp, &tqh), TR_OK);
    assert_int_equal(tr_st_get(ctx, ef, "q_continue", 1, shp, &tqc), TR_OK);
    in = (int32_t *)malloc((size_t)B * m->L * 4), pid = (int32_t *)malloc((size_t)B * 4);
    {
        int64_t *tmp = (int64_t *)malloc((size_t)B * m->L * 8);
        assert_int_equal(tr_st_read_i64(ctx, tin, tmp, (size_t)B * m->L), TR_OK);
        for (i = 0; i < B * m->L; i++) in[i] = (int32_t)tmp[i];
        assert_int_equal(tr_st_read_i64(ctx, tpid, tmp, (size_t)B), TR_OK);
        for (i = 0; i < B; i++) pid[i] = (int32_t)tmp[i];
        free(tmp);
    }
    logits = (float *)malloc((size_t)B * m->L * m->V * 4), ref = (float *)malloc((size_t)B * m->L * m->V * 4);
    qh = (float *)malloc((size_t)B * 4), qc = (float *)malloc((size_t)B * 4);
    memset(&o, 0, sizeof o);
    o.logits = logits, o.q_halt = qh, o.q_continue = qc;
    b.inputs = in, b.labels = NULL, b.puzzle_identifiers = pid, b.batch_size = B;
    assert_int_equal(tr_carry_create(m, B, &c), TR_OK);
    assert_int_equal(tr_model_eval_step(m, c, &b, &o, NULL), TR_OK);
    assert_int_equal(tr_st_read_f32(ctx, tlog, ref, (size_t)B * m->L * m->V), TR_OK);
    for (i = 0; i < B * m->L * m->V; i++) mx = fmaxf(mx, fabsf(ref[i]));
    assert_true(mx > 0.1f);
    {
        double worst = 0;
        for (i = 0; i < B * m->L * m->V; i++) worst = fmax(worst, fabs((double)logits[i] - ref[i]));
        print_message("%s (%s kernels): max|C - twin| of the logits = %.2e of max|logit| %.3f\n", name, tr_ctx_simd_name(ctx), worst / mx, (double)mx);
    }
    tu_assert_close(name, logits, ref, (size_t)B * m->L * m->V, 1e-5 * mx, 1e-5);
    assert_int_equal(tr_st_read_f32(ctx, tqh, ref, (size_t)B), TR_OK);
    tu_assert_close("q_halt", qh, ref, (size_t)B, 1e-5 * mx, 1e-5);
    assert_int_equal(tr_st_read_f32(ctx, tqc, ref, (size_t)B), TR_OK);
    tu_assert_close("q_continue", qc, ref, (size_t)B, 1e-5 * mx, 1e-5);
    free(in), free(pid), free(logits), free(ref), free(qh), free(qc);
    tr_carry_destroy(c);
    tr_st_close(ef);
    tr_model_destroy(m);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

static void test_converted_fixture_att(void **state) {
    (void)state;
    check_fixture("ckpt_tiny_att");
}
static void test_converted_fixture_mlp_bf16(void **state) {
    (void)state;
    check_fixture("ckpt_tiny_mlp");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_f32),
        cmocka_unit_test(test_roundtrip_bf16_f16),
        cmocka_unit_test(test_prefixed_names),
        cmocka_unit_test(test_wrong_tensors),
        cmocka_unit_test(test_puzzle_resize),
        cmocka_unit_test(test_bad_metadata),
        cmocka_unit_test(test_config_json),
        cmocka_unit_test(test_resume_mlp_t),
        cmocka_unit_test(test_resume_attention),
        cmocka_unit_test(test_resume_hrm),
        cmocka_unit_test(test_roundtrip_hrm),
        cmocka_unit_test(test_trainer_state_errors),
        cmocka_unit_test(test_alloc_faults),
        cmocka_unit_test(test_atomic_save),
        cmocka_unit_test(test_checkpoint_save),
        cmocka_unit_test(test_evaluate),
        cmocka_unit_test(test_converted_fixture_att),
        cmocka_unit_test(test_converted_fixture_mlp_bf16),
    };
    return cmocka_run_group_tests_name("checkpoint", tests, group_setup, group_teardown);
}
