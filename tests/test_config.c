/* Settings by name and the preset table: every preset is a valid, unchanged configuration; every
   key round-trips through text, rejects bad text with a reason naming it, and the keys cover every
   field of tr_model_config and tr_train_config. */
#define TINYREC_IMPLEMENTATION
#include "test_util.h"
#include <string.h>

static void *base_of(const tr_key *k, tr_model_config *m, tr_train_config *t) { return k->in == TR_KEY_IN_MODEL ? (void *)m : (void *)t; }

static void assert_err_has(tr_ctx *ctx, const char *needle) {
    if (!strstr(tr_ctx_last_error(ctx), needle)) fail_msg("error '%s' lacks '%s'", tr_ctx_last_error(ctx), needle);
}

static void test_presets(void **state) {
    tr_ctx *ctx = tu_ctx(1, 0);
    const char *const *names = tr_model_config_preset_names();
    int i, n = tr_preset_count(), narch = 0;
    tr_preset p, q;
    tr_model_config c;
    (void)state;
    assert_true(n >= 8);
    for (i = 0; i < n; i++) {
        assert_int_equal(tr_preset_get(i, &p), TR_OK);
        assert_non_null(p.name);
        assert_non_null(p.help);
        if (tr_model_config_validate(ctx, &p.model) != TR_OK) fail_msg("preset %s: %s", p.name, tr_ctx_last_error(ctx));
        assert_true(p.epochs >= 1 && p.eval_interval >= 1 && p.epochs % p.eval_interval == 0);
        assert_true(p.train.global_batch_size >= 1);
        if (p.data_vocab_size) assert_int_equal(p.model.vocab_size, p.data_vocab_size);
        if (p.data_seq_len) assert_int_equal(p.model.seq_len, p.data_seq_len);
        /* found by name, and its model is what tr_model_config_preset gives for the name and the arch name */
        assert_int_equal(tr_preset_find(p.name, &q), TR_OK);
        assert_memory_equal(&p.model, &q.model, sizeof p.model);
        assert_int_equal(tr_model_config_preset(&c, p.name), TR_OK);
        assert_memory_equal(&c, &p.model, sizeof c);
        if (p.arch) {
            assert_non_null(names[narch]);
            assert_string_equal(names[narch], p.arch); /* the arch names, in table order */
            narch++;
            assert_int_equal(tr_model_config_preset(&c, p.arch), TR_OK);
            assert_memory_equal(&c, &p.model, sizeof c);
        }
    }
    assert_null(names[narch]);
    assert_int_equal(tr_preset_get(n, &p), TR_ERR_NOT_FOUND);
    assert_int_equal(tr_preset_get(-1, &p), TR_ERR_NOT_FOUND);
    assert_int_equal(tr_preset_get(0, NULL), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_preset_find("nope", &p), TR_ERR_NOT_FOUND);
    assert_int_equal(tr_preset_find("trm-tiny", &p), TR_ERR_NOT_FOUND); /* an arch name, not a preset */
    assert_int_equal(tr_preset_find(NULL, &p), TR_ERR_NOT_FOUND);
    assert_int_equal(tr_model_config_preset(&c, "nope"), TR_ERR_NOT_FOUND);
    assert_int_equal(tr_model_config_preset(NULL, "trm-tiny"), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_model_config_preset(&c, NULL), TR_ERR_INVALID_ARG);
    tr_ctx_destroy(ctx);
}

/* The presets as the if/else chain of >>model and tinyrec-train's recipe functions built them. */
static void test_presets_unchanged(void **state) {
    tr_model_config c, want;
    tr_train_config t = tr_train_config_default();
    tr_preset p;
    (void)state;
    memset(&want, 0, sizeof want);
    want.arch = TR_ARCH_TRM, want.hidden_size = 512, want.num_heads = 8, want.expansion = 4, want.L_layers = 2, want.H_cycles = 3, want.L_cycles = 6;
    want.puzzle_emb_ndim = 512, want.puzzle_emb_len = 16, want.pos_encodings = TR_POS_ROPE, want.rope_theta = 10000, want.rms_norm_eps = 1e-5;
    want.halt_max_steps = 16, want.halt_exploration_prob = 0.1, want.no_ACT_continue = 1, want.loss_type = TR_LOSS_STABLEMAX, want.num_puzzle_identifiers = 1;
    want.vocab_size = 11, want.seq_len = 81;
    assert_int_equal(tr_model_config_preset(&c, "trm-sudoku-att"), TR_OK);
    assert_memory_equal(&c, &want, sizeof c);
    want.mlp_t = 1, want.pos_encodings = TR_POS_NONE;
    assert_int_equal(tr_preset_find("trm-sudoku-mlp", &p), TR_OK);
    assert_memory_equal(&p.model, &want, sizeof c);
    assert_memory_equal(&p.train, &t, sizeof t);
    assert_true(p.epochs == 50000 && p.eval_interval == 5000);
    want.hidden_size = 64, want.num_heads = 4, want.puzzle_emb_ndim = 64, want.puzzle_emb_len = 2, want.H_cycles = 2, want.L_cycles = 2;
    assert_int_equal(tr_model_config_preset(&c, "trm-tiny"), TR_OK);
    assert_memory_equal(&c, &want, sizeof c);
    /* the CPU recipe (the demo's) */
    t.global_batch_size = 32, t.lr = 1e-3, t.lr_warmup_steps = 100, t.weight_decay = 0.1, t.puzzle_emb_lr = 1e-3, t.puzzle_emb_weight_decay = 0.1, t.ema_decay = 0.99;
    assert_int_equal(tr_preset_find("sudoku-tiny", &p), TR_OK);
    assert_memory_equal(&p.model, &want, sizeof c);
    assert_memory_equal(&p.train, &t, sizeof t);
    assert_true(p.epochs == 5 && p.eval_interval == 1 && !strcmp(p.task, "sudoku"));
    assert_int_equal(tr_preset_find("maze-tiny", &p), TR_OK);
    assert_true(p.data_vocab_size == 6 && p.data_seq_len == 0 && !p.model.mlp_t && p.model.pos_encodings == TR_POS_ROPE && p.model.hidden_size == 64);
    assert_int_equal(tr_preset_find("sudoku-small", &p), TR_OK);
    assert_true(p.model.hidden_size == 128 && p.model.puzzle_emb_ndim == 128 && p.model.H_cycles == 3 && p.model.L_cycles == 4 && p.train.global_batch_size == 64);
    assert_int_equal(tr_preset_find("tiny", &p), TR_OK);
    assert_true(p.task == NULL && p.data_vocab_size == 0 && p.data_seq_len == 0);
    assert_int_equal(tr_preset_find("trm-arc", &p), TR_OK);
    assert_true(p.model.vocab_size == 12 && p.model.seq_len == 900 && p.model.L_cycles == 4 && p.model.num_puzzle_identifiers == 961);
    assert_true(p.train.puzzle_emb_lr == 1e-2 && p.train.weight_decay == 0.1 && p.train.puzzle_emb_weight_decay == 0.1 && p.epochs == 100000 && p.eval_interval == 10000);
    assert_int_equal(tr_preset_find("trm-maze", &p), TR_OK);
    assert_true(p.model.vocab_size == 6 && p.model.seq_len == 900 && p.model.L_cycles == 4 && !strcmp(p.task, "maze"));
}

/* Sizes of the C types behind each key type, for the coverage check. */
static size_t type_size(const tr_key *k) {
    switch (k->type) {
    case TR_KEY_INT:
    case TR_KEY_TRAINABLE:
    case TR_KEY_BOOL: return sizeof(int);
    case TR_KEY_LONG: return sizeof(long);
    case TR_KEY_U64: return sizeof(unsigned long long);
    case TR_KEY_DOUBLE: return sizeof(double);
    case TR_KEY_ARCH: return sizeof(tr_arch);
    case TR_KEY_POS_ENCODING: return sizeof(tr_pos_encoding);
    case TR_KEY_LOSS_TYPE: return sizeof(tr_loss_type);
    case TR_KEY_DTYPE: return sizeof(tr_forward_dtype);
    default: return k->size;
    }
}

/* The keys of one struct, laid end to end by offset, must tile it: a field added without a key
   leaves a gap (or makes the struct larger), and fails here. */
static void check_tiles(const tr_key *keys, int n, int in, size_t struct_size) {
    size_t covered = 0;
    int i, found = 1;
    while (found) {
        found = 0;
        for (i = 0; i < n; i++) {
            size_t sz = type_size(&keys[i]);
            if (keys[i].in != in) continue;
            /* the next field starts at `covered` rounded up to its own alignment (its size, for these types) */
            if (keys[i].offset >= covered && keys[i].offset < covered + sz && keys[i].offset % sz == 0) {
                covered = keys[i].offset + sz;
                found = 1;
                break;
            }
        }
    }
    if ((covered + sizeof(double) - 1) / sizeof(double) * sizeof(double) != struct_size)
        fail_msg("the keys of struct %d cover %zu of its %zu bytes: a field has no key", in, covered, struct_size);
}

/* And a field that hides in the tail padding: copying only the keys' fields of a struct whose fields
   are set (and whose padding is zero) must give the whole struct back. */
static void check_copy(const tr_key *keys, int n, int in, const void *full, size_t size) {
    unsigned char z[1024];
    size_t b;
    int i;
    assert_true(size <= sizeof z);
    memset(z, 0, size);
    for (i = 0; i < n; i++)
        if (keys[i].in == in) memcpy(z + keys[i].offset, (const unsigned char *)full + keys[i].offset, type_size(&keys[i]));
    for (b = 0; b < size; b++)
        if (z[b] != ((const unsigned char *)full)[b]) fail_msg("byte %zu of struct %d is set but in no key's field: a field has no key", b, in);
}

static void test_keys_cover_fields(void **state) {
    int n, i, j, nmodel = 0, ntrain = 0;
    const tr_key *keys = tr_config_keys(&n);
    (void)state;
    assert_ptr_equal(tr_config_keys(NULL), keys);
    for (i = 0; i < n; i++) {
        assert_ptr_equal(tr_config_find_key(keys[i].name), &keys[i]);
        assert_non_null(keys[i].help);
        assert_true(keys[i].in == TR_KEY_IN_MODEL || keys[i].in == TR_KEY_IN_TRAIN);
        nmodel += keys[i].in == TR_KEY_IN_MODEL, ntrain += keys[i].in == TR_KEY_IN_TRAIN;
        for (j = 0; j < i; j++)
            if (keys[j].in == keys[i].in && keys[j].offset == keys[i].offset) fail_msg("%s and %s are one field", keys[j].name, keys[i].name);
    }
    assert_null(tr_config_find_key("nope"));
    assert_null(tr_config_find_key(NULL));
    check_tiles(keys, n, TR_KEY_IN_MODEL, sizeof(tr_model_config));
    /* comm, the last field, is a run-time pointer (a communicator), not a setting: the keys tile what precedes it */
    check_tiles(keys, n, TR_KEY_IN_TRAIN, offsetof(tr_train_config, comm));
    {
        tr_model_config m;
        tr_train_config t = tr_train_config_default(); /* zeroed, then set: no stray padding bytes */
        assert_int_equal(tr_model_config_preset(&m, "trm-arc"), TR_OK);
        check_copy(keys, n, TR_KEY_IN_MODEL, &m, sizeof m);
        check_copy(keys, n, TR_KEY_IN_TRAIN, &t, sizeof t);
    }
    assert_true(nmodel >= 21 && ntrain >= 12);
    /* the reference's names */
    assert_int_equal(tr_config_find_key("arch.hidden_size")->offset, offsetof(tr_model_config, hidden_size));
    assert_int_equal(tr_config_find_key("arch.loss.loss_type")->offset, offsetof(tr_model_config, loss_type));
    assert_int_equal(tr_config_find_key("ema_rate")->offset, offsetof(tr_train_config, ema_decay));
    assert_int_equal(tr_config_find_key("global_batch_size")->offset, offsetof(tr_train_config, global_batch_size));
    assert_true(tr_config_find_key("arch.vocab_size")->flags & TR_KEY_DERIVED);
    assert_false(tr_config_find_key("lr")->flags & TR_KEY_DERIVED);
}

/* A value of each type other than the presets' defaults, and its canonical text. */
static const char *sample(tr_key_type t, const char **canon) {
    switch (t) {
    case TR_KEY_INT: return *canon = "7", "7";
    case TR_KEY_LONG: return *canon = "-1234567", "-1234567";
    case TR_KEY_U64: return *canon = "18446744073709551615", "18446744073709551615";
    case TR_KEY_DOUBLE: return *canon = "0.10000000000000001", "0.1";
    case TR_KEY_BOOL: return *canon = "false", "Off";
    case TR_KEY_ARCH: return *canon = "hrm", "HRM";
    case TR_KEY_POS_ENCODING: return *canon = "learned", "Learned";
    case TR_KEY_LOSS_TYPE: return *canon = "softmax_cross_entropy", "softmax";
    case TR_KEY_DTYPE: return *canon = "float16", "FP16";
    case TR_KEY_TRAINABLE: return *canon = "puzzle_emb", "Puzzle_Emb";
    default: return *canon = "abc", "abc";
    }
}

static void test_round_trip(void **state) {
    tr_ctx *ctx = tu_ctx(1, 0);
    int n, i;
    const tr_key *keys = tr_config_keys(&n);
    (void)state;
    for (i = 0; i < n; i++) {
        tr_model_config m, m2;
        tr_train_config t, t2;
        char buf[64], small[1];
        const char *canon, *text = sample(keys[i].type, &canon);
        tr_model_config_preset(&m, "trm-tiny"), tr_model_config_preset(&m2, "trm-tiny");
        t = t2 = tr_train_config_default();
        /* the preset's value reads back as itself */
        assert_int_equal(tr_key_format(&keys[i], base_of(&keys[i], &m, &t), buf, sizeof buf), TR_OK);
        assert_int_equal(tr_config_set(ctx, &m2, &t2, keys[i].name, buf), TR_OK);
        assert_memory_equal(&m, &m2, sizeof m);
        assert_memory_equal(&t, &t2, sizeof t);
        /* a new value, in a spelling the parser accepts, formats canonically and reads back */
        if (tr_config_set(ctx, &m, &t, keys[i].name, text) != TR_OK) fail_msg("%s=%s: %s", keys[i].name, text, tr_ctx_last_error(ctx));
        assert_int_equal(tr_key_format(&keys[i], base_of(&keys[i], &m, &t), buf, sizeof buf), TR_OK);
        assert_string_equal(buf, canon);
        assert_int_equal(tr_key_parse(ctx, &keys[i], base_of(&keys[i], &m2, &t2), buf), TR_OK);
        assert_memory_equal(&m, &m2, sizeof m);
        assert_memory_equal(&t, &t2, sizeof t);
        assert_int_equal(tr_key_format(&keys[i], base_of(&keys[i], &m, &t), small, sizeof small), TR_ERR_OVERFLOW);
        assert_int_equal(small[0], 0); /* truncated, terminated */
    }
    tr_ctx_destroy(ctx);
}

static void test_bad_values(void **state) {
    static const struct { tr_key_type type; const char *bad[5]; const char *expected; } cases[] = {
        {TR_KEY_INT, {"x", "", "1.5", "99999999999", "7 "}, "expected an integer"},
        {TR_KEY_LONG, {"x", "", "1e3", "99999999999999999999999", "--1"}, "expected an integer"},
        {TR_KEY_DOUBLE, {"fast", "", "nan", "inf", "1e999"}, "expected a number"},
        {TR_KEY_BOOL, {"maybe", "", "2", "tru", "yes!"}, "expected true or false"},
        {TR_KEY_ARCH, {"x", "", "trm2", "tr", "hrm "}, "expected trm or hrm"},
        {TR_KEY_POS_ENCODING, {"x", "", "ropes", "learn", "none1"}, "expected rope, learned or none"},
        {TR_KEY_LOSS_TYPE, {"x", "", "Softmax", "stable", "STABLEMAX"}, "expected stablemax_cross_entropy or softmax_cross_entropy"},
    };
    tr_ctx *ctx = tu_ctx(1, 0);
    int n, i, j, c;
    const tr_key *keys = tr_config_keys(&n);
    tr_model_config m, m0;
    tr_train_config t, t0;
    (void)state;
    tr_model_config_preset(&m, "trm-tiny");
    m0 = m, t = t0 = tr_train_config_default();
    for (i = 0; i < n; i++)
        for (c = 0; c < (int)(sizeof cases / sizeof cases[0]); c++) {
            if (cases[c].type != keys[i].type) continue;
            for (j = 0; j < 5; j++) {
                char quoted[120];
                assert_int_equal(tr_config_set(ctx, &m, &t, keys[i].name, cases[c].bad[j]), TR_ERR_INVALID_ARG);
                snprintf(quoted, sizeof quoted, "key '%s': bad value '%s'", keys[i].name, cases[c].bad[j]);
                assert_err_has(ctx, quoted);
                assert_err_has(ctx, cases[c].expected);
                assert_memory_equal(&m, &m0, sizeof m); /* left as it was */
                assert_memory_equal(&t, &t0, sizeof t);
            }
        }
    assert_int_equal(tr_config_set(ctx, &m, &t, "foo", "1"), TR_ERR_NOT_FOUND);
    assert_err_has(ctx, "unknown key 'foo'");
    assert_int_equal(tr_config_set(ctx, &m, &t, NULL, "1"), TR_ERR_NOT_FOUND);
    assert_int_equal(tr_config_set(ctx, NULL, &t, "arch.hidden_size", "1"), TR_ERR_INVALID_ARG);
    assert_err_has(ctx, "arch.hidden_size");
    assert_int_equal(tr_config_set(ctx, &m, NULL, "lr", "1"), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_config_set(NULL, &m, &t, "lr", "x"), TR_ERR_INVALID_ARG); /* no context: no reason, no crash */
    assert_int_equal(tr_key_parse(ctx, NULL, &m, "1"), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_key_parse(ctx, tr_config_find_key("lr"), &t, NULL), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_key_format(tr_config_find_key("lr"), &t, NULL, 8), TR_ERR_INVALID_ARG);
    /* an enum field holding no value of its enum */
    m.pos_encodings = (tr_pos_encoding)7;
    {
        char buf[32];
        assert_int_equal(tr_key_format(tr_config_find_key("arch.pos_encodings"), &m, buf, sizeof buf), TR_ERR_INVALID_ARG);
    }
    tr_ctx_destroy(ctx);
}

/* A program's own keys: the same parser and formatter over its own struct. */
typedef struct own {
    char path[8];
    tr_forward_dtype dtype;
    unsigned long long seed;
} own;

static void test_own_keys(void **state) {
    static const tr_key keys[] = {
        {"data_path", TR_KEY_STRING, TR_KEY_IN_USER, offsetof(own, path), 8, 0, "a path"},
        {"arch.forward_dtype", TR_KEY_DTYPE, TR_KEY_IN_USER, offsetof(own, dtype), 0, 0, "compute type"},
        {"seed", TR_KEY_U64, TR_KEY_IN_USER, offsetof(own, seed), 0, 0, "seed"},
    };
    tr_ctx *ctx = tu_ctx(1, 0);
    own o;
    char buf[32];
    (void)state;
    memset(&o, 0, sizeof o);
    assert_int_equal(tr_key_parse(ctx, &keys[0], &o, "a/b"), TR_OK);
    assert_string_equal(o.path, "a/b");
    assert_int_equal(tr_key_parse(ctx, &keys[0], &o, ""), TR_ERR_INVALID_ARG);
    assert_err_has(ctx, "key 'data_path' needs a non-empty value");
    assert_int_equal(tr_key_parse(ctx, &keys[0], &o, "12345678"), TR_ERR_INVALID_ARG);
    assert_err_has(ctx, "value of 'data_path' is too long (at most 7 characters)");
    assert_string_equal(o.path, "a/b");
    assert_int_equal(tr_key_format(&keys[0], &o, buf, sizeof buf), TR_OK);
    assert_string_equal(buf, "a/b");
    memcpy(o.path, "1234567", 8);
    assert_int_equal(tr_key_format(&keys[0], &o, buf, sizeof buf), TR_OK);
    assert_string_equal(buf, "1234567");
    assert_int_equal(tr_key_parse(ctx, &keys[1], &o, "bfloat16"), TR_OK);
    assert_int_equal(tr_key_parse(ctx, &keys[1], &o, "float64"), TR_ERR_INVALID_ARG);
    assert_err_has(ctx, "key 'arch.forward_dtype': bad value 'float64': expected float32, bfloat16, float16 or auto");
    assert_int_equal(o.dtype, TR_FWD_BFLOAT16);
    assert_int_equal(tr_key_format(&keys[1], &o, buf, sizeof buf), TR_OK);
    assert_string_equal(buf, "bfloat16");
    assert_int_equal(tr_key_parse(ctx, &keys[1], &o, "Auto"), TR_OK);
    assert_int_equal(o.dtype, TR_FWD_AUTO);
    assert_int_equal(tr_key_parse(ctx, &keys[2], &o, "-1"), TR_ERR_INVALID_ARG);
    assert_err_has(ctx, "key 'seed': bad value '-1': expected an integer");
    assert_int_equal(tr_key_parse(ctx, &keys[2], &o, "99999999999999999999"), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_key_parse(ctx, &keys[2], &o, "42"), TR_OK);
    {
        tr_key unsized = keys[0];
        unsized.size = 0;
        assert_int_equal(tr_key_parse(ctx, &unsized, &o, "x"), TR_ERR_INVALID_ARG);
        assert_err_has(ctx, "key 'data_path' has no size");
    }
    assert_true(o.seed == 42);
    tr_ctx_destroy(ctx);
}

/* The metrics history of a run: read back from JSONL (keeping the lines up to a step), plotted as SVG. */
static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* tr_train_config_validate: the defaults and every preset's recipe pass; each bad field is
   TR_ERR_CONFIG with a reason that names its key. */
static void test_train_config_validate(void **state) {
    tr_ctx *ctx = tu_ctx(1, 0);
    tr_train_config tc;
    tr_preset p;
    int i;
    static const struct {
        const char *key, *value;
    } bad[] = {{"global_batch_size", "0"}, {"lr", "-1"}, {"puzzle_emb_lr", "-0.5"}, {"lr_min_ratio", "1.5"}, {"lr_warmup_steps", "-1"},
               {"beta1", "1"}, {"beta2", "-0.1"}, {"ema_rate", "1"}, {"max_nonfinite_steps", "0"}};
    (void)state;
    tc = tr_train_config_default();
    assert_int_equal(tr_train_config_validate(ctx, &tc), TR_OK);
    assert_int_equal(tr_train_config_validate(NULL, &tc), TR_OK);
    assert_int_equal(tr_train_config_validate(ctx, NULL), TR_ERR_INVALID_ARG);
    for (i = 0; tr_preset_get(i, &p) == TR_OK; i++) assert_int_equal(tr_train_config_validate(ctx, &p.train), TR_OK);
    for (i = 0; i < (int)(sizeof bad / sizeof bad[0]); i++) {
        tc = tr_train_config_default();
        assert_int_equal(tr_config_set(ctx, NULL, &tc, bad[i].key, bad[i].value), TR_OK);
        assert_int_equal(tr_train_config_validate(ctx, &tc), TR_ERR_CONFIG);
        if (!strstr(tr_ctx_last_error(ctx), bad[i].key)) fail_msg("%s=%s: reason '%s' lacks the key", bad[i].key, bad[i].value, tr_ctx_last_error(ctx));
        assert_int_equal(tr_train_config_validate(NULL, &tc), TR_ERR_CONFIG);
    }
    tc = tr_train_config_default();
    tc.weight_decay = NAN;
    assert_int_equal(tr_train_config_validate(ctx, &tc), TR_ERR_CONFIG);
    assert_non_null(strstr(tr_ctx_last_error(ctx), "weight_decay"));
    tr_ctx_destroy(ctx);
}

/* "did you mean": the nearest names by edit distance, also against the part after the last '.', and
   names that contain the word; nothing for a word near none. */
static void test_nearest_names(void **state) {
    static const char *const names[] = {"arch.L_cycles", "arch.H_cycles", "lr", "lr_warmup_steps", "global_batch_size", "ema", "--overwrite", "ema_rate"};
    int idx[3], n;
    (void)state;
    n = tr_nearest_names("arch.L_cycle", names, 7, 3, idx);
    assert_true(n == 2 && idx[0] == 0 && idx[1] == 1); /* the nearest first */
    n = tr_nearest_names("L_cycles", names, 7, 3, idx);
    assert_true(n >= 1 && idx[0] == 0);
    n = tr_nearest_names("lr_warmup", names, 7, 3, idx);
    assert_true(n >= 1 && idx[0] == 3);
    n = tr_nearest_names("--overwrit", names, 7, 1, idx);
    assert_true(n == 1 && idx[0] == 6);
    n = tr_nearest_names("ema_decay", names, 8, 3, idx);
    assert_true(n == 1 && idx[0] == 7); /* the same first four letters */
    assert_int_equal(tr_nearest_names("arch.foo", names, 7, 3, idx), 0); /* the "arch." prefix alone is no hint */
    assert_int_equal(tr_nearest_names("zzzzzzzz", names, 7, 3, idx), 0);
    assert_int_equal(tr_nearest_names("lr", names, 7, 0, idx), 0);
    assert_int_equal(tr_nearest_names(NULL, names, 7, 3, idx), 0);
}

static void test_metrics_history(void **state) {
    static const char jsonl[] = "{\"type\":\"train\",\"step\":1,\"loss\":2.5,\"accuracy\":null,\"exact_accuracy\":null}\n"
                                "{\"type\":\"train\",\"step\":2,\"loss\":2.0,\"accuracy\":0.25,\"exact_accuracy\":0}\n"
                                "{not json\n"
                                "[1,2]\n"
                                "{\"type\":\"eval\",\"step\":2,\"accuracy\":0.5,\"exact_accuracy\":0.125}\n"
                                "{\"type\":\"train\",\"step\":3,\"loss\":1.5,\"accuracy\":0.5,\"exact_accuracy\":0.5}";
    tr_ctx *ctx = tu_ctx(1, 0);
    char dir[64], path[128], svg[128], *text;
    tr_metrics_history h;
    tr_metrics_point pt;
    long k;
    (void)state;
    strcpy(dir, "/tmp/tinyrec_test_config_XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    snprintf(svg, sizeof svg, "%s/metrics.svg", dir);
    memset(&h, 0, sizeof h);
    /* no file yet: no points */
    assert_int_equal(tr_metrics_history_load(ctx, path, 10, 1, &h), TR_OK);
    assert_true(h.ntrain == 0 && h.neval == 0);
    write_text(path, jsonl);
    assert_int_equal(tr_metrics_history_load(ctx, path, 2, 0, &h), TR_OK);
    assert_true(h.ntrain == 2 && h.neval == 1);
    assert_true(h.train[0].step == 1 && h.train[0].loss == 2.5 && isnan(h.train[0].accuracy) && isnan(h.train[0].exact_accuracy));
    assert_true(h.train[1].step == 2 && h.train[1].accuracy == 0.25);
    assert_true(h.eval[0].step == 2 && isnan(h.eval[0].loss) && h.eval[0].exact_accuracy == 0.125);
    text = tu_slurp(path, NULL);
    assert_string_equal(text, jsonl); /* not rewritten */
    free(text);
    tr_metrics_history_free(ctx, &h);
    assert_null(h.train);
    /* rewrite keeps the lines up to the step, and only the JSON objects */
    assert_int_equal(tr_metrics_history_load(ctx, path, 2, 1, &h), TR_OK);
    text = tu_slurp(path, NULL);
    assert_string_equal(text, "{\"type\":\"train\",\"step\":1,\"loss\":2.5,\"accuracy\":null,\"exact_accuracy\":null}\n"
                              "{\"type\":\"train\",\"step\":2,\"loss\":2.0,\"accuracy\":0.25,\"exact_accuracy\":0}\n"
                              "{\"type\":\"eval\",\"step\":2,\"accuracy\":0.5,\"exact_accuracy\":0.125}\n");
    free(text);
    pt.step = 40, pt.loss = 0.01, pt.accuracy = 0.9, pt.exact_accuracy = 0.5;
    assert_int_equal(tr_metrics_history_add(ctx, &h, 0, &pt), TR_OK);
    assert_int_equal(h.ntrain, 3);
    assert_int_equal(tr_metrics_plot_svg(ctx, svg, "run <1> & co", &h), TR_OK);
    text = tu_slurp(svg, NULL);
    assert_true(!strncmp(text, "<svg", 4));
    assert_non_null(strstr(text, "run &lt;1&gt; &amp; co"));
    assert_non_null(strstr(text, "train loss (log scale)")); /* 2.5 / 0.01 spans more than 20x */
    assert_non_null(strstr(text, "<polyline"));
    assert_non_null(strstr(text, "<circle"));
    assert_non_null(strstr(text, "</svg>\n"));
    free(text);
    tr_metrics_history_free(ctx, &h);
    /* evaluations with their exact accuracy per ACT step: read back, and a third panel plots them */
    write_text(path, "{\"type\":\"train\",\"step\":1,\"loss\":2.5,\"accuracy\":0.5,\"exact_accuracy\":0}\n"
                     "{\"type\":\"eval\",\"step\":1,\"accuracy\":0.5,\"exact_accuracy\":0.25,\"exact_by_step\":[0,0.125,null,0.25]}\n"
                     "{\"type\":\"eval\",\"step\":2,\"accuracy\":0.5,\"exact_accuracy\":0.5,\"exact_by_step\":[0.25,0.5]}\n");
    assert_int_equal(tr_metrics_history_load(ctx, path, 10, 0, &h), TR_OK);
    assert_true(h.neval == 2 && h.eval[0].num_steps == 4 && h.eval[1].num_steps == 2 && h.train[0].num_steps == 0);
    assert_true(h.eval[0].exact_by_step[1] == 0.125 && isnan(h.eval[0].exact_by_step[2]) && h.eval[1].exact_by_step[1] == 0.5);
    assert_int_equal(tr_metrics_plot_svg(ctx, svg, "act", &h), TR_OK);
    text = tu_slurp(svg, NULL);
    assert_non_null(strstr(text, "eval exact accuracy per ACT step"));
    assert_non_null(strstr(text, "ACT step (eval at step 2)"));
    assert_non_null(strstr(text, "height=\"900\""));
    free(text);
    tr_metrics_history_free(ctx, &h);
    /* an empty history is a plot with empty panels */
    assert_int_equal(tr_metrics_plot_svg(ctx, svg, NULL, &h), TR_OK);
    /* errors name the file */
    snprintf(path, sizeof path, "%s/no-such-dir/metrics.svg", dir);
    assert_int_equal(tr_metrics_plot_svg(ctx, path, "x", &h), TR_ERR_IO);
    assert_err_has(ctx, "no-such-dir");
    assert_int_equal(tr_metrics_history_load(ctx, dir, 1, 0, &h), TR_ERR_IO); /* a directory */
    assert_err_has(ctx, dir);
    assert_int_equal(tr_metrics_history_load(ctx, NULL, 1, 0, &h), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_metrics_history_load(ctx, svg, 1, 0, NULL), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_metrics_plot_svg(ctx, svg, "x", NULL), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_metrics_history_add(ctx, NULL, 0, &pt), TR_ERR_INVALID_ARG);
    tr_metrics_history_free(ctx, NULL);
    /* allocation failures: an error, nothing leaked, the file as it was */
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    write_text(path, jsonl);
    for (k = 1;; k++) {
        tr_status st1, st2 = TR_OK;
        memset(&h, 0, sizeof h);
        tr_ctx_fail_alloc_at(ctx, k);
        st1 = tr_metrics_history_load(ctx, path, 2, 1, &h);
        if (st1 == TR_OK) st2 = tr_metrics_plot_svg(ctx, svg, "x", &h);
        tr_ctx_fail_alloc_at(ctx, 0);
        tr_metrics_history_free(ctx, &h);
        assert_int_equal(tr_ctx_live_allocs(ctx), 0);
        if (st1 == TR_OK && st2 == TR_OK) break;
        assert_int_equal(st1 != TR_OK ? st1 : st2, TR_ERR_OUT_OF_MEMORY);
        if (st1 != TR_OK) {
            text = tu_slurp(path, NULL);
            assert_string_equal(text, jsonl);
            free(text);
        } else
            write_text(path, jsonl);
    }
    assert_true(k > 3);
    snprintf(path, sizeof path, "rm -rf '%s'", dir);
    assert_int_equal(system(path), 0);
    tr_ctx_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_presets),          cmocka_unit_test(test_presets_unchanged), cmocka_unit_test(test_keys_cover_fields),
        cmocka_unit_test(test_round_trip),       cmocka_unit_test(test_bad_values),        cmocka_unit_test(test_own_keys), cmocka_unit_test(test_metrics_history), cmocka_unit_test(test_nearest_names),
        cmocka_unit_test(test_train_config_validate),
    };
    return cmocka_run_group_tests_name("config", tests, NULL, NULL);
}
