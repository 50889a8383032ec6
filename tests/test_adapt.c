/* Issue 43: fine-tuning from a checkpoint and test-time adaptation. init_from with kept, added and dropped
   puzzle rows (kept rows bit for bit), its refusals (no names, names that do not belong, duplicates), the
   trainable modes (frozen tensors keep their bits through steps and the EMA), the hidden-rule task family,
   the small ARC canvas, the task-id ablation map, the adapter end to end on a tiny generated task file (and
   tinyrec-adapt + tinyrec-arc-eval on it, deterministic for a seed), tinyrec-train init_from, and that every
   new public entry point refuses bad input with a status and a reason. */
#define TINYREC_IMPLEMENTATION
#include "test_util.h"
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef TINYREC_TEST_BUILD_DIR
#define TINYREC_TEST_BUILD_DIR "build"
#endif
#define BIN TINYREC_TEST_BUILD_DIR "/tinyrec-"

static char g_tmp[256];

static int setup_tmp(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/tinyrec_adapt_XXXXXX");
    return mkdtemp(g_tmp) ? 0 : -1;
}
static int teardown_tmp(void **state) {
    (void)state;
    if (g_tmp[0]) tu_rm_tree(g_tmp);
    return 0;
}

/* A command's exit status, its stdout and stderr in *out (malloc'ed). */
static int run_cmd(const char *cmd, char **out) {
    char full[8192], path[320];
    int st;
    snprintf(path, sizeof path, "%s/cmd_out.txt", g_tmp);
    snprintf(full, sizeof full, "OMP_WAIT_POLICY=passive; export OMP_WAIT_POLICY; ( %s ) > '%s' 2>&1", cmd, path);
    st = system(full);
    *out = tu_slurp(path, NULL);
    if (!*out) *out = (char *)calloc(1, 1);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* A tiny ARC-shaped model (vocab 12, a side x side canvas) with `rows` puzzle rows. */
static void arc_config(tr_model_config *c, int side, int rows) {
    tu_tiny_config(c, 1, TR_POS_NONE, TR_LOSS_STABLEMAX);
    c->vocab_size = 12, c->seq_len = side * side, c->num_puzzle_identifiers = rows, c->halt_max_steps = 2;
}

static void write_names(const char *dir, int n, const char *const *names) {
    tr_ctx *ctx = tu_ctx(1, 0);
    assert_int_equal(tr_write_identifiers(ctx, dir, n, names), TR_OK);
    tr_ctx_destroy(ctx);
}

/* A checkpoint in dir/model.safetensors of 5 rows named <blank> a b c d, each row filled with its index + 1. */
static void make_named_checkpoint(tr_ctx *ctx, const char *dir, char *path, size_t cap, tr_model **keep) {
    static const char *const names[5] = {"<blank>", "a", "b", "c", "d"};
    tr_model_config c;
    tr_tensor_view v;
    tr_model *m = NULL;
    size_t i;
    arc_config(&c, 4, 5);
    assert_int_equal(tr_model_create(ctx, &c, &m), TR_OK);
    assert_int_equal(tr_model_find_tensor(m, "model.inner.puzzle_emb.weights", &v), TR_OK);
    for (i = 0; i < v.numel; i++) v.data[i] = (float)(i / (size_t)v.shape[1]) + 1.0f + 0.001f * (float)i;
    assert_int_equal(tr_model_commit_tensors(m), TR_OK);
    mkdir(dir, 0755);
    snprintf(path, cap, "%s/model.safetensors", dir);
    assert_int_equal(tr_model_save(m, path, NULL), TR_OK);
    write_names(dir, 5, names);
    *keep = m;
}

static void test_init_from_by_name(void **state) {
    static const char *const names[6] = {"<blank>", "c", "e", "a", "f", "g"};
    char dir[300], ck[400];
    tr_ctx *ctx = tu_ctx(1, 9);
    tr_model *src = NULL, *m = NULL;
    tr_model_config c;
    tr_init_from_options o;
    tr_init_from_summary s;
    tr_tensor_view a, b;
    int i;
    (void)state;
    snprintf(dir, sizeof dir, "%s/named", g_tmp);
    make_named_checkpoint(ctx, dir, ck, sizeof ck, &src);
    arc_config(&c, 4, 6);
    assert_int_equal(tr_model_create(ctx, &c, &m), TR_OK);
    memset(&o, 0, sizeof o);
    o.names = names, o.num_names = 6;
    assert_int_equal(tr_model_init_from(m, ck, &o, &s), TR_OK);
    assert_int_equal(s.kept, 3); /* <blank>, c, a */
    assert_int_equal(s.added, 3); /* e, f, g */
    assert_int_equal(s.dropped, 2); /* b, d */
    assert_int_equal(s.by_index, 0);
    assert_int_equal(tr_model_find_tensor(src, "model.inner.puzzle_emb.weights", &a), TR_OK);
    assert_int_equal(tr_model_find_tensor(m, "model.inner.puzzle_emb.weights", &b), TR_OK);
    {
        size_t D = (size_t)a.shape[1];
        static const int from[6] = {0, 3, -1, 1, -1, -1};
        for (i = 0; i < 6; i++) {
            if (from[i] >= 0) assert_memory_equal(b.data + i * D, a.data + (size_t)from[i] * D, D * sizeof(float)); /* kept: bit for bit */
            else {
                size_t k;
                for (k = 0; k < D; k++) assert_true(b.data[i * D + k] == 0.0f); /* added: the reference's zeros */
            }
        }
    }
    for (i = 0; i < tr_model_num_tensors(src); i++) { /* every other tensor bit for bit */
        assert_int_equal(tr_model_tensor(src, i, &a), TR_OK);
        assert_int_equal(tr_model_find_tensor(m, a.name, &b), TR_OK);
        if (strstr(a.name, "puzzle_emb")) continue;
        assert_int_equal(a.numel, b.numel);
        assert_memory_equal(a.data, b.data, a.numel * sizeof(float));
    }
    tr_model_destroy(m);
    tr_model_destroy(src);
    tr_ctx_destroy(ctx);
}

static void test_init_from_refusals(void **state) {
    static const char *const names[5] = {"<blank>", "a", "b", "c", "d"}, *const dup[5] = {"<blank>", "a", "a", "c", "d"}, *const four[4] = {"<blank>", "a", "b", "c"};
    char dir[300], ck[400], bare[300], bck[400], cmd[1400];
    tr_ctx *ctx = tu_ctx(1, 9);
    tr_model *src = NULL, *m = NULL;
    tr_model_config c;
    tr_init_from_options o;
    tr_init_from_summary s;
    tr_tensor_view v;
    float before;
    (void)state;
    snprintf(dir, sizeof dir, "%s/refuse", g_tmp);
    make_named_checkpoint(ctx, dir, ck, sizeof ck, &src);
    /* the same checkpoint without names beside it */
    snprintf(bare, sizeof bare, "%s/bare", g_tmp);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s' '%s/model.safetensors'", bare, ck, bare);
    assert_int_equal(system(cmd), 0);
    snprintf(bck, sizeof bck, "%s/model.safetensors", bare);
    arc_config(&c, 4, 5);
    assert_int_equal(tr_model_create(ctx, &c, &m), TR_OK);
    assert_int_equal(tr_model_find_tensor(m, "model.inner.lm_head.weight", &v), TR_OK);
    before = v.data[0];
    memset(&o, 0, sizeof o);
    o.names = names, o.num_names = 5;
    assert_int_equal(tr_model_init_from(m, bck, &o, &s), TR_ERR_NOT_FOUND);
    assert_non_null(strstr(tr_ctx_last_error(ctx), "no names"));
    assert_non_null(strstr(tr_ctx_last_error(ctx), "map_by_index"));
    assert_int_equal(tr_model_find_tensor(m, "model.inner.lm_head.weight", &v), TR_OK);
    assert_true(v.data[0] == before); /* unchanged */
    o.map_by_index = 1; /* asked for: rows by position */
    assert_int_equal(tr_model_init_from(m, bck, &o, &s), TR_OK);
    assert_int_equal(s.by_index, 1);
    assert_int_equal(s.kept, 5);
    /* names that do not belong to the checkpoint (4 names for 5 rows) */
    write_names(bare, 4, four);
    o.map_by_index = 0;
    assert_int_equal(tr_model_init_from(m, bck, &o, &s), TR_ERR_FORMAT);
    assert_non_null(strstr(tr_ctx_last_error(ctx), "do not belong together"));
    /* a name given to two rows */
    write_names(bare, 5, dup);
    assert_int_equal(tr_model_init_from(m, bck, &o, &s), TR_ERR_FORMAT);
    assert_non_null(strstr(tr_ctx_last_error(ctx), "two rows"));
    /* an explicit names file wins over the one beside it */
    o.identifiers = NULL;
    {
        char nm[400];
        snprintf(nm, sizeof nm, "%s/identifiers.json", dir);
        o.identifiers = nm;
        assert_int_equal(tr_model_init_from(m, bck, &o, &s), TR_OK);
        assert_int_equal(s.kept, 5);
        o.identifiers = NULL;
    }
    /* the model's names must match its rows; without names only by index */
    o.num_names = 4;
    assert_int_equal(tr_model_init_from(m, ck, &o, &s), TR_ERR_INVALID_ARG);
    assert_non_null(strstr(tr_ctx_last_error(ctx), "4 names"));
    o.names = NULL;
    assert_int_equal(tr_model_init_from(m, ck, &o, &s), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_model_init_from(m, NULL, &o, &s), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_model_init_from(NULL, ck, &o, &s), TR_ERR_INVALID_ARG);
    tr_model_destroy(m);
    tr_model_destroy(src);
    tr_ctx_destroy(ctx);
}

/* Three steps in a mode: which tensors moved. */
static void check_mode(int mode, int ema) {
    tr_ctx *ctx = tu_ctx(1, 5);
    tr_model_config c;
    tr_model *m = NULL;
    tr_trainer *t = NULL;
    tr_train_config tc = tr_train_config_default();
    float *before[64];
    int32_t in[4 * 16], lab[4 * 16], pid[4];
    int i, k, n;
    tu_tiny_config(&c, 0, TR_POS_ROPE, TR_LOSS_STABLEMAX);
    assert_int_equal(tr_model_create(ctx, &c, &m), TR_OK);
    n = tr_model_num_tensors(m);
    assert_true(n <= 64);
    for (i = 0; i < n; i++) {
        tr_tensor_view v;
        assert_int_equal(tr_model_tensor(m, i, &v), TR_OK);
        before[i] = (float *)malloc(v.numel * sizeof(float));
        memcpy(before[i], v.data, v.numel * sizeof(float));
    }
    tc.global_batch_size = 4, tc.lr = 1e-2, tc.lr_warmup_steps = 0, tc.puzzle_emb_lr = 1e-2, tc.ema = ema, tc.trainable = mode;
    assert_int_equal(tr_trainer_create(m, &tc, &t), TR_OK);
    for (k = 0; k < 3; k++) {
        tr_batch b;
        tu_tiny_batch(4, 16, 6, 77 + (uint64_t)k, in, lab, pid, 3, 1);
        b.inputs = in, b.labels = lab, b.puzzle_identifiers = pid, b.batch_size = 4;
        assert_int_equal(tr_trainer_step(t, &b, NULL), TR_OK);
    }
    if (ema) assert_int_equal(tr_trainer_swap_ema(t), TR_OK); /* the EMA weights too keep the frozen bits */
    for (i = 0; i < n; i++) {
        tr_tensor_view v;
        int same, trains;
        assert_int_equal(tr_model_tensor(m, i, &v), TR_OK);
        same = memcmp(before[i], v.data, v.numel * sizeof(float)) == 0;
        if (!v.trainable) trains = strstr(v.name, "puzzle_emb") != NULL; /* the rows: sign-SGD in every mode */
        else trains = mode == TR_TRAIN_ALL || (mode == TR_TRAIN_EMB_HEADS && (strstr(v.name, "embed_tokens") || strstr(v.name, "lm_head") || strstr(v.name, "q_head")));
        if (trains == same) fail_msg("mode %d ema %d: %s %s", mode, ema, v.name, same ? "did not train" : "changed though frozen");
        free(before[i]);
    }
    tr_trainer_destroy(t);
    tr_model_destroy(m);
    tr_ctx_destroy(ctx);
}

static void test_freeze_modes(void **state) {
    tr_train_config tc = tr_train_config_default();
    const tr_key *k = tr_config_find_key("trainable");
    char buf[32];
    int mode;
    (void)state;
    for (mode = TR_TRAIN_ALL; mode <= TR_TRAIN_EMB_HEADS; mode++) check_mode(mode, 0);
    check_mode(TR_TRAIN_PUZZLE_EMB, 1);
    check_mode(TR_TRAIN_EMB_HEADS, 1);
    /* the key */
    assert_non_null(k);
    assert_int_equal(tr_key_parse(NULL, k, &tc, "emb_heads"), TR_OK);
    assert_int_equal(tc.trainable, TR_TRAIN_EMB_HEADS);
    assert_int_equal(tr_key_format(k, &tc, buf, sizeof buf), TR_OK);
    assert_string_equal(buf, "emb_heads");
    assert_int_equal(tr_key_parse(NULL, k, &tc, "Puzzle_Emb"), TR_OK);
    assert_int_equal(tc.trainable, TR_TRAIN_PUZZLE_EMB);
    {
        tr_ctx *ctx = tu_ctx(1, 0);
        assert_int_equal(tr_key_parse(ctx, k, &tc, "heads"), TR_ERR_INVALID_ARG);
        assert_non_null(strstr(tr_ctx_last_error(ctx), "all, puzzle_emb or emb_heads"));
        tc.trainable = 7;
        assert_int_equal(tr_train_config_validate(ctx, &tc), TR_ERR_CONFIG);
        assert_non_null(strstr(tr_ctx_last_error(ctx), "trainable"));
        tr_ctx_destroy(ctx);
    }
}

static void test_rules_and_canvas(void **state) {
    tr_ctx *ctx = tu_ctx(1, 0);
    tr_rule_options o = tr_rule_options_default();
    tr_arc_task t, t2;
    uint8_t perm[10], canvas[900], big[900], g[900];
    int32_t tok[900];
    int tid, i, x, h, w;
    (void)state;
    assert_int_equal(tr_rule_task_generate(ctx, 5, 11, &o, &t, &tid, perm), TR_OK);
    assert_true(t.num_train >= 3 && t.num_train <= 4 && t.num_test == 1);
    for (x = 0; x < t.num_train + t.num_test; x++) { /* output = dihedral(colour map(input)) */
        uint8_t out[900];
        int oh, ow;
        tr_arc_augment(tid, perm, t.pairs[x].input.cells, t.pairs[x].input.h, t.pairs[x].input.w, out, &oh, &ow);
        assert_int_equal(oh, t.pairs[x].output.h);
        assert_memory_equal(out, t.pairs[x].output.cells, (size_t)(oh * ow));
        assert_true(t.pairs[x].input.h >= 3 && t.pairs[x].input.h <= 5);
    }
    assert_int_equal(tr_rule_task_generate(ctx, 5, 11, &o, &t2, NULL, NULL), TR_OK); /* the same stream, the same task */
    assert_int_equal(t2.num_train, t.num_train);
    assert_memory_equal(t2.pairs, t.pairs, sizeof(tr_arc_pair) * (size_t)(t.num_train + 1));
    tr_arc_task_free(ctx, &t2);
    /* the small canvas and the reference's agree where both apply */
    tr_arc_encode_canvas(t.pairs[0].input.cells, t.pairs[0].input.h, t.pairs[0].input.w, 1, 0, 30, canvas);
    tr_arc_encode(t.pairs[0].input.cells, t.pairs[0].input.h, t.pairs[0].input.w, 1, 0, big);
    assert_memory_equal(canvas, big, 900);
    tr_arc_encode_canvas(t.pairs[0].input.cells, t.pairs[0].input.h, t.pairs[0].input.w, 0, 0, 6, canvas);
    for (i = 0; i < 36; i++) tok[i] = canvas[i];
    assert_int_equal(tr_arc_crop_canvas(tok, 6, g, &h, &w), 1);
    assert_int_equal(h, t.pairs[0].input.h);
    assert_memory_equal(g, t.pairs[0].input.cells, (size_t)(h * w));
    tr_arc_task_free(ctx, &t);
    /* bad options name the field */
    o.max_side = 31;
    assert_int_equal(tr_rule_task_generate(ctx, 5, 11, &o, &t, NULL, NULL), TR_ERR_INVALID_ARG);
    assert_non_null(strstr(tr_ctx_last_error(ctx), "max_side"));
    o = tr_rule_options_default(), o.colors = 1;
    assert_int_equal(tr_rule_task_generate(ctx, 5, 11, &o, &t, NULL, NULL), TR_ERR_INVALID_ARG);
    assert_non_null(strstr(tr_ctx_last_error(ctx), "colors"));
    assert_int_equal(tr_rule_task_generate(ctx, 5, 11, NULL, NULL, NULL, NULL), TR_ERR_INVALID_ARG);
    tr_ctx_destroy(ctx);
}

/* The swap family: tasks 0..367 have 368 different rules, each a transform with a swap of two colours or none,
   and task 368 is refused. */
static void test_rules_swap_family(void **state) {
    tr_ctx *ctx = tu_ctx(1, 0);
    tr_rule_options o = tr_rule_options_default();
    static unsigned char seen[8 * 100];
    tr_arc_task t;
    uint8_t perm[10];
    int tid, i, k, moved, a, b;
    (void)state;
    memset(seen, 0, sizeof seen);
    o.swaps = 1;
    for (k = 0; k < 368; k++) {
        assert_int_equal(tr_rule_task_generate(ctx, 3, (uint64_t)k, &o, &t, &tid, perm), TR_OK);
        tr_arc_task_free(ctx, &t);
        for (i = moved = 0, a = b = 0; i < 10; i++)
            if (perm[i] != i) { /* a swap: perm[perm[i]] = i */
                assert_int_equal(perm[perm[i]], i);
                if (!moved++) a = i, b = perm[i];
            }
        assert_true(moved == 0 || moved == 2);
        assert_true(tid >= 0 && tid < 8);
        assert_int_equal(seen[tid * 100 + a * 10 + b], 0);
        seen[tid * 100 + a * 10 + b] = 1;
    }
    assert_int_equal(tr_rule_task_generate(ctx, 3, 368, &o, &t, NULL, NULL), TR_ERR_INVALID_ARG);
    assert_non_null(strstr(tr_ctx_last_error(ctx), "swap family"));
    tr_ctx_destroy(ctx);
}

static void test_task_id_map(void **state) {
    tr_ctx *ctx = tu_ctx(1, 0);
    int32_t map[50], map2[50], seen[50];
    int i, moved = 0;
    (void)state;
    assert_int_equal(tr_task_id_mode_parse("Shuffle"), TR_TASK_ID_SHUFFLE);
    assert_int_equal(tr_task_id_mode_parse("blank"), TR_TASK_ID_BLANK);
    assert_int_equal(tr_task_id_mode_parse("keep"), TR_TASK_ID_KEEP);
    assert_int_equal(tr_task_id_mode_parse("random"), -1);
    assert_int_equal(tr_trainable_parse("Emb_Heads"), TR_TRAIN_EMB_HEADS), assert_int_equal(tr_trainable_parse("puzzle_emb"), TR_TRAIN_PUZZLE_EMB);
    assert_int_equal(tr_trainable_parse("all"), TR_TRAIN_ALL), assert_int_equal(tr_trainable_parse("rows"), -1), assert_int_equal(tr_trainable_parse(NULL), -1);
    assert_string_equal(tr_trainable_name(TR_TRAIN_PUZZLE_EMB), "puzzle_emb"), assert_null(tr_trainable_name(3));
    assert_int_equal(tr_task_id_map(ctx, TR_TASK_ID_KEEP, 50, 0, 1, map), TR_OK);
    for (i = 0; i < 50; i++) assert_int_equal(map[i], i);
    assert_int_equal(tr_task_id_map(ctx, TR_TASK_ID_BLANK, 50, 0, 1, map), TR_OK);
    for (i = 0; i < 50; i++) assert_int_equal(map[i], 0);
    assert_int_equal(tr_task_id_map(ctx, TR_TASK_ID_SHUFFLE, 50, 0, 1, map), TR_OK);
    assert_int_equal(tr_task_id_map(ctx, TR_TASK_ID_SHUFFLE, 50, 0, 1, map2), TR_OK);
    assert_memory_equal(map, map2, sizeof map); /* seeded */
    memset(seen, 0, sizeof seen);
    assert_int_equal(map[0], 0); /* blank stays */
    for (i = 1; i < 50; i++) {
        assert_true(map[i] >= 1 && map[i] < 50);
        seen[map[i]]++, moved += map[i] != i;
    }
    for (i = 1; i < 50; i++) assert_int_equal(seen[i], 1); /* a permutation of the other ids */
    assert_true(moved > 40);
    assert_int_equal(tr_task_id_map(ctx, 3, 50, 0, 1, map), TR_ERR_INVALID_ARG);
    assert_non_null(strstr(tr_ctx_last_error(ctx), "mode 3"));
    assert_int_equal(tr_task_id_map(ctx, TR_TASK_ID_BLANK, 50, 0, 1, NULL), TR_ERR_INVALID_ARG);
    tr_ctx_destroy(ctx);
}

/* ---- the adapter ------------------------------------------------------------------------------- */
typedef struct collect {
    tr_arc_votes *v;
    char lines[64][1200];
    int n;
} collect;
static void on_pred(void *user, const char *puzzle, int test_index, const tr_arc_grid *answer, double q, const tr_arc_grid *input) {
    collect *c = (collect *)user;
    int o, r;
    assert_int_equal(tr_arc_votes_add(c->v, puzzle, test_index, answer, q, input, "adapt"), TR_OK);
    assert_true(c->n < 64);
    o = snprintf(c->lines[c->n], 1200, "%s %d %.9g %dx%d:", puzzle, test_index, q, answer->h, answer->w);
    for (r = 0; r < answer->h * answer->w && o < 1190; r++) o += snprintf(c->lines[c->n] + o, 1200 - (size_t)o, "%d", answer->cells[r]);
    c->n++;
}

/* A file of 2 generated tasks (grids 2..3) keyed by name, and a tiny ARC model on a 4x4 canvas. */
static void make_tasks_and_model(char *tasks, size_t tcap, char *ck, size_t ccap) {
    tr_ctx *ctx = tu_ctx(1, 4);
    tr_rule_options o = tr_rule_options_default();
    tr_model_config c;
    tr_model *m = NULL;
    FILE *f;
    int i;
    snprintf(tasks, tcap, "%s/tasks.json", g_tmp);
    assert_non_null(f = fopen(tasks, "w"));
    o.min_side = 2, o.max_side = 3;
    fputc('{', f);
    for (i = 0; i < 2; i++) {
        tr_arc_task t;
        assert_int_equal(tr_rule_task_generate(ctx, 1, (uint64_t)i, &o, &t, NULL, NULL), TR_OK);
        fprintf(f, "%s\"r%d\": ", i ? ", " : "", i);
        assert_int_equal(tr_arc_task_fput(f, &t), 0);
        tr_arc_task_free(ctx, &t);
    }
    fputs("}\n", f);
    assert_int_equal(fclose(f), 0);
    arc_config(&c, 4, 7);
    assert_int_equal(tr_model_create(ctx, &c, &m), TR_OK);
    snprintf(ck, ccap, "%s/arc4.safetensors", g_tmp);
    assert_int_equal(tr_model_save(m, ck, NULL), TR_OK);
    tr_model_destroy(m);
    tr_ctx_destroy(ctx);
}

static void adapt_once(const char *tasks, const char *ck, collect *c, tr_adapt_result *res) {
    tr_ctx *ctx = tu_ctx(1, 0);
    tr_adapt_config ac = tr_adapt_config_default();
    tr_adapter *a = NULL;
    tr_json *root = NULL;
    char *text;
    size_t len;
    int t;
    assert_non_null(text = tu_slurp(tasks, &len));
    assert_int_equal(tr_arc_votes_create(ctx, text, len, tasks, &c->v), TR_OK);
    assert_int_equal(tr_json_parse(ctx, text, len, tasks, &root), TR_OK);
    ac.versions = 3, ac.steps = 4, ac.batch_size = 4, ac.trainable = TR_TRAIN_EMB_HEADS, ac.seed = 7;
    assert_int_equal(tr_adapter_create(ctx, ck, &ac, &a), TR_OK);
    c->n = 0;
    for (t = 0; t < 2; t++) {
        tr_arc_task task;
        assert_int_equal(tr_arc_task_from_json(ctx, &root->items[t], root->keys[t], NULL, &task), TR_OK);
        assert_int_equal(tr_adapt_task(a, root->keys[t], &task, -1, on_pred, c, &res[t]), TR_OK);
        tr_arc_task_free(ctx, &task);
    }
    tr_arc_votes_rank(c->v);
    assert_int_equal(c->v->inputs_mismatched, 0); /* every augmented input maps back to its task's test input */
    assert_int_equal(c->v->inputs_checked, 6);
    tr_arc_votes_destroy(c->v);
    tr_adapter_destroy(a);
    tr_json_free(ctx, root);
    free(text);
    tr_ctx_destroy(ctx);
}

/* The fine-tuning learns: with everything training, the demonstrations' loss over the last steps of 100 is well
   below the first step's (on this untrained model a new row alone moves the loss by only a few percent). With only
   the rows training, every dense tensor keeps the checkpoint's bits and the new rows move from zero. */
static void check_adapt_learns(const char *tasks, const char *ck) {
    tr_ctx *ctx = tu_ctx(1, 0);
    tr_adapt_config ac = tr_adapt_config_default();
    tr_adapter *a = NULL;
    tr_json *root = NULL;
    tr_arc_task task;
    tr_adapt_result first, last;
    char *text;
    size_t len;
    assert_non_null(text = tu_slurp(tasks, &len));
    assert_int_equal(tr_json_parse(ctx, text, len, tasks, &root), TR_OK);
    assert_int_equal(tr_arc_task_from_json(ctx, &root->items[0], root->keys[0], NULL, &task), TR_OK);
    tr_model *ref = NULL;
    int i;
    ac.versions = 2, ac.batch_size = 8, ac.lr = 3e-3, ac.lr_warmup_steps = 0, ac.translate = 0, ac.trainable = TR_TRAIN_ALL;
    ac.steps = 1;
    assert_int_equal(tr_adapter_create(ctx, ck, &ac, &a), TR_OK);
    assert_int_equal(tr_adapt_task(a, root->keys[0], &task, -1, NULL, NULL, &first), TR_OK);
    tr_adapter_destroy(a);
    ac.steps = 100;
    assert_int_equal(tr_adapter_create(ctx, ck, &ac, &a), TR_OK);
    assert_int_equal(tr_adapt_task(a, root->keys[0], &task, -1, NULL, NULL, &last), TR_OK);
    tr_adapter_destroy(a);
    assert_true(isfinite(first.loss) && isfinite(last.loss));
    if (!(last.loss < 0.6 * first.loss)) fail_msg("adaptation did not learn: loss %g after 1 step, %g over the last of 100", first.loss, last.loss);
    /* only the rows */
    ac.trainable = TR_TRAIN_PUZZLE_EMB, ac.steps = 10;
    assert_int_equal(tr_adapter_create(ctx, ck, &ac, &a), TR_OK);
    assert_int_equal(tr_adapt_task(a, root->keys[0], &task, -1, NULL, NULL, &last), TR_OK);
    assert_int_equal(tr_model_load(ctx, ck, NULL, &ref), TR_OK);
    for (i = 0; i < tr_model_num_tensors(ref); i++) {
        tr_tensor_view v, w;
        size_t k, moved = 0;
        assert_int_equal(tr_model_tensor(ref, i, &v), TR_OK);
        assert_int_equal(tr_model_tensor(tr_adapter_model(a), i, &w), TR_OK);
        assert_string_equal(v.name, w.name);
        if (!strstr(v.name, "puzzle_emb")) {
            assert_memory_equal(v.data, w.data, v.numel * sizeof(float));
            continue;
        }
        for (k = w.numel / (size_t)w.shape[0]; k < w.numel; k++) moved += w.data[k] != 0; /* rows 1..2: the new ones */
        assert_true(moved > 0);
    }
    tr_model_destroy(ref);
    tr_adapter_destroy(a);
    tr_arc_task_free(ctx, &task);
    tr_json_free(ctx, root);
    free(text);
    tr_ctx_destroy(ctx);
}

static void test_adapt_end_to_end(void **state) {
    char tasks[300], ck[300], cmd[1500], preds[2][300], *out;
    collect *c1 = (collect *)calloc(1, sizeof *c1), *c2 = (collect *)calloc(1, sizeof *c2);
    tr_adapt_result r1[2], r2[2];
    int i;
    (void)state;
    make_tasks_and_model(tasks, sizeof tasks, ck, sizeof ck);
    adapt_once(tasks, ck, c1, r1);
    adapt_once(tasks, ck, c2, r2);
    assert_int_equal(c1->n, 6); /* 2 tasks x 3 versions x 1 test input */
    for (i = 0; i < 2; i++) {
        assert_int_equal(r1[i].steps, 4);
        assert_int_equal(r1[i].versions, 3);
        assert_int_equal(r1[i].predictions, 3);
        assert_true(r1[i].loss == r2[i].loss); /* deterministic for a seed */
    }
    for (i = 0; i < c1->n; i++) assert_string_equal(c1->lines[i], c2->lines[i]);
    free(c1), free(c2);
    check_adapt_learns(tasks, ck);
    /* the program: predictions JSONL that tinyrec-arc-eval scores, the same bytes twice */
    for (i = 0; i < 2; i++) {
        snprintf(preds[i], sizeof preds[i], "%s/preds%d.jsonl", g_tmp, i);
        snprintf(cmd, sizeof cmd, BIN "adapt '%s' '%s' steps=3 versions=2 batch=4 threads=1 device=cpu seed=3 output='%s'", ck, tasks, preds[i]);
        if (run_cmd(cmd, &out) != 0) fail_msg("tinyrec-adapt: %s", out);
        assert_non_null(strstr(out, "[2/2] r1: 2 versions, 3 steps"));
        assert_non_null(strstr(out, "ARC/pass@2: "));
        free(out);
    }
    snprintf(cmd, sizeof cmd, "cmp '%s' '%s' && " BIN "arc-eval --predictions '%s' --puzzles '%s'", preds[0], preds[1], preds[0], tasks);
    if (run_cmd(cmd, &out) != 0) fail_msg("scoring the adaptation's predictions: %s", out);
    assert_non_null(strstr(out, "ARC evaluation: 2 tasks, 2 test inputs, 4 predictions"));
    free(out);
    /* bad command lines */
    snprintf(cmd, sizeof cmd, BIN "adapt '%s' '%s' trainable=heads", ck, tasks);
    assert_int_equal(run_cmd(cmd, &out), 2);
    assert_non_null(strstr(out, "trainable"));
    free(out);
    snprintf(cmd, sizeof cmd, BIN "adapt '%s' '%s' versions=0", ck, tasks);
    assert_int_equal(run_cmd(cmd, &out), 2);
    assert_non_null(strstr(out, "versions"));
    free(out);
}

/* Every new entry point refuses bad input with a status and a reason. */
static void test_bad_input(void **state) {
    tr_ctx *ctx = tu_ctx(1, 0);
    tr_adapt_config ac = tr_adapt_config_default();
    tr_adapter *a = NULL;
    tr_arc_task t;
    tr_arc_options ao = tr_arc_options_default();
    const char *dirs[1] = {"/nonexistent"};
    char buf[8], tasks[300], ck[300];
    (void)state;
    ac.versions = 0;
    assert_int_equal(tr_adapt_config_validate(ctx, &ac), TR_ERR_CONFIG);
    assert_non_null(strstr(tr_ctx_last_error(ctx), "versions"));
    ac = tr_adapt_config_default(), ac.task_id = TR_TASK_ID_SHUFFLE;
    assert_int_equal(tr_adapter_create(ctx, "x.safetensors", &ac, &a), TR_ERR_CONFIG);
    assert_non_null(strstr(tr_ctx_last_error(ctx), "task_id"));
    ac = tr_adapt_config_default(), ac.batch_size = 0;
    assert_int_equal(tr_adapt_config_validate(ctx, &ac), TR_ERR_CONFIG);
    assert_int_equal(tr_adapt_config_validate(ctx, NULL), TR_ERR_INVALID_ARG);
    ac = tr_adapt_config_default();
    assert_int_equal(tr_adapter_create(ctx, NULL, &ac, &a), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_adapter_create(ctx, "/nonexistent/model.safetensors", &ac, &a), TR_ERR_IO);
    assert_non_null(strstr(tr_ctx_last_error(ctx), "/nonexistent/model.safetensors"));
    { /* a model that is not an ARC model */
        tr_model_config c;
        tr_model *m = NULL;
        char p[300];
        tu_tiny_config(&c, 1, TR_POS_NONE, TR_LOSS_STABLEMAX);
        assert_int_equal(tr_model_create(ctx, &c, &m), TR_OK);
        snprintf(p, sizeof p, "%s/notarc.safetensors", g_tmp);
        assert_int_equal(tr_model_save(m, p, NULL), TR_OK);
        tr_model_destroy(m);
        assert_int_equal(tr_adapter_create(ctx, p, &ac, &a), TR_ERR_UNSUPPORTED);
        assert_non_null(strstr(tr_ctx_last_error(ctx), "not an ARC model"));
    }
    /* tasks the adapter cannot take */
    make_tasks_and_model(tasks, sizeof tasks, ck, sizeof ck);
    ac.steps = 1, ac.versions = 2, ac.batch_size = 2;
    assert_int_equal(tr_adapter_create(ctx, ck, &ac, &a), TR_OK);
    assert_non_null(tr_adapter_model(a));
    assert_int_equal(tr_adapt_task(a, "x", NULL, -1, NULL, NULL, NULL), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_adapt_task(NULL, "x", &t, -1, NULL, NULL, NULL), TR_ERR_INVALID_ARG);
    {
        tr_rule_options o = tr_rule_options_default();
        o.min_side = o.max_side = 5; /* larger than the 4x4 canvas */
        assert_int_equal(tr_rule_task_generate(ctx, 1, 0, &o, &t, NULL, NULL), TR_OK);
        assert_int_equal(tr_adapt_task(a, "big", &t, -1, NULL, NULL, NULL), TR_ERR_UNSUPPORTED);
        assert_non_null(strstr(tr_ctx_last_error(ctx), "larger than the model's canvas"));
        assert_int_equal(tr_adapt_task(a, "a|||t1", &t, -1, NULL, NULL, NULL), TR_ERR_INVALID_ARG);
        tr_arc_task_free(ctx, &t);
    }
    tr_adapter_destroy(a);
    tr_adapter_destroy(NULL);
    assert_null(tr_adapter_model(NULL));
    assert_int_equal(tr_checkpoint_identifiers_path("/some/long/folder/model.safetensors", buf, sizeof buf), TR_ERR_OVERFLOW);
    assert_int_equal(tr_checkpoint_identifiers_path(NULL, buf, sizeof buf), TR_ERR_INVALID_ARG);
    ao.input_dirs = dirs, ao.num_input_dirs = 1, ao.canvas = 31;
    assert_int_equal(tr_arc_build(ctx, &ao, g_tmp, NULL), TR_ERR_INVALID_ARG);
    assert_non_null(strstr(tr_ctx_last_error(ctx), "canvas 31"));
    assert_int_equal(tr_arc_task_fput(NULL, NULL), EOF);
    tr_ctx_destroy(ctx);
}

/* tinyrec-train init_from on another dataset: the summary, the run's identifiers.json, trainable. */
static void test_train_init_from(void **state) {
    char cmd[3000], cwd[400], *out;
    (void)state;
    assert_non_null(getcwd(cwd, sizeof cwd));
    snprintf(cmd, sizeof cmd,
             "set -e; cd '%s'; " "%s/" BIN "data rules --output-dir rA --train-rules 3 --test-rules 2 --min-side 2 --max-side 3 >/dev/null; "
             "%s/" BIN "data arc --output-dir dA --input-dir rA/training --test-set-name training --num-aug 1 --canvas 4 --quiet >/dev/null; "
             "%s/" BIN "data arc --output-dir dB --input-dir rA/evaluation --test-set-name evaluation --num-aug 1 --canvas 4 --quiet >/dev/null; "
             "T='%s/" BIN "train tiny arch.hidden_size=16 arch.num_heads=2 arch.puzzle_emb_ndim=16 arch.halt_max_steps=2 global_batch_size=4 epochs=1 eval_interval=1 threads=1 device=cpu'; "
             "$T data_path=dA checkpoint_path=runA max_steps=2 >/dev/null; test -f runA/identifiers.json; "
             "$T data_path=dB checkpoint_path=runB max_steps=2 init_from=runA/latest.safetensors trainable=puzzle_emb",
             g_tmp, cwd, cwd, cwd, cwd);
    if (run_cmd(cmd, &out) != 0) fail_msg("init_from run: %s", out);
    /* dA: <blank> + 3 tasks x 2 versions; dB: <blank> + 2 other tasks x 2 versions: only <blank> is shared */
    assert_non_null(strstr(out, "puzzle-embedding rows by name: 1 kept, 4 added (zeros), 6 dropped"));
    free(out);
    snprintf(cmd, sizeof cmd, "grep -q '^trainable=puzzle_emb$' '%s/runB/train_config.txt' && grep -q '^init_from=runA/latest.safetensors$' '%s/runB/train_config.txt'", g_tmp, g_tmp);
    assert_int_equal(run_cmd(cmd, &out), 0);
    free(out);
    snprintf(cmd, sizeof cmd, "cd '%s' && rm runA/identifiers.json && %s/" BIN "train tiny data_path=dB checkpoint_path=runC max_steps=1 init_from=runA/latest.safetensors threads=1 device=cpu",
             g_tmp, cwd);
    assert_int_equal(run_cmd(cmd, &out), 1);
    assert_non_null(strstr(out, "no names"));
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_from_by_name), cmocka_unit_test(test_init_from_refusals), cmocka_unit_test(test_freeze_modes),
        cmocka_unit_test(test_rules_and_canvas), cmocka_unit_test(test_rules_swap_family), cmocka_unit_test(test_task_id_map),
        cmocka_unit_test(test_adapt_end_to_end),
        cmocka_unit_test(test_bad_input),        cmocka_unit_test(test_train_init_from),
    };
    return cmocka_run_group_tests(tests, setup_tmp, teardown_tmp);
}
