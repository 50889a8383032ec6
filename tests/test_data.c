/* The data pipeline: .npy reader/writer (and numpy compatibility), the dataset reader/validator and
   writer, Sudoku/Maze/ARC builders and augmentations, the sampler (with and without prefetch). */
#define TINYREC_IMPLEMENTATION
#include "test_util.h"
#include <dirent.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#define ARC1 "../shared/data/arc-agi-1"

static char g_tmp[256];

static tr_ctx *new_ctx(void) {
    tr_ctx *ctx = NULL;
    tr_ctx_config c = tr_ctx_config_default();
    c.num_threads = 2;
    assert_int_equal(tr_ctx_create(&c, &ctx), TR_OK);
    return ctx;
}

static void path_of(char *out, size_t cap, const char *a, const char *b) { snprintf(out, cap, "%s/%s", a, b); }

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}


static int same_file(const char *a, const char *b) {
    size_t la, lb;
    char *x = tu_slurp(a, &la), *y = tu_slurp(b, &lb);
    int same = x && y && la == lb && memcmp(x, y, la) == 0;
    free(x);
    free(y);
    return same;
}

static void copy_file(const char *from, const char *to) {
    size_t n;
    char *d = tu_slurp(from, &n);
    FILE *f = fopen(to, "wb");
    assert_non_null(d);
    assert_non_null(f);
    fwrite(d, 1, n, f);
    fclose(f);
    free(d);
}

static void expect_error(tr_ctx *ctx, tr_status got, tr_status want, const char *needle, const char *needle2) {
    const char *e = tr_ctx_last_error(ctx);
    if (got != want || (needle && !strstr(e, needle)) || (needle2 && !strstr(e, needle2)))
        fail_msg("expected status %d with '%s' / '%s', got %d: %s", want, needle ? needle : "", needle2 ? needle2 : "", got, e);
}

/* python3 with numpy, or NULL */
static const char *python_numpy(void) {
    static const char *cands[2] = {"python3", "/usr/bin/python3"};
    char cmd[256];
    int i;
    for (i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd, "%s -c 'import numpy' >/dev/null 2>&1", cands[i]);
        if (system(cmd) == 0) return cands[i];
    }
    return NULL;
}

/* ---- .npy ------------------------------------------------------------------------------- */
static void test_npy_roundtrip(void **state) {
    tr_ctx *ctx = new_ctx();
    char p[512];
    uint8_t u8[3 * 4];
    int32_t i32[7];
    int64_t i64[2 * 3 * 2], shape[3];
    tr_npy a;
    int i, m;
    (void)state;
    for (i = 0; i < 12; i++) u8[i] = (uint8_t)(i * 21);
    for (i = 0; i < 7; i++) i32[i] = -1000000 * i + 3;
    for (i = 0; i < 12; i++) i64[i] = (int64_t)1 << (5 * i);
    for (m = 0; m < 2; m++) {
        path_of(p, sizeof p, g_tmp, "u8.npy");
        shape[0] = 3, shape[1] = 4;
        assert_int_equal(tr_npy_save(ctx, p, TR_NPY_U8, 2, shape, u8), TR_OK);
        assert_int_equal(tr_npy_load(ctx, p, m, &a), TR_OK);
        assert_int_equal(a.dtype, TR_NPY_U8);
        assert_int_equal(a.ndim, 2);
        assert_int_equal(a.shape[1], 4);
        assert_int_equal(a.data_offset % 64, 0);
        assert_memory_equal(a.data, u8, 12);
        tr_npy_close(ctx, &a);
        path_of(p, sizeof p, g_tmp, "i32.npy");
        shape[0] = 7;
        assert_int_equal(tr_npy_save(ctx, p, TR_NPY_I32, 1, shape, i32), TR_OK);
        assert_int_equal(tr_npy_load(ctx, p, m, &a), TR_OK);
        for (i = 0; i < 7; i++) assert_int_equal(tr_npy_get(&a, (size_t)i), i32[i]);
        tr_npy_close(ctx, &a);
        path_of(p, sizeof p, g_tmp, "i64.npy");
        shape[0] = 2, shape[1] = 3, shape[2] = 2;
        assert_int_equal(tr_npy_save(ctx, p, TR_NPY_I64, 3, shape, i64), TR_OK);
        assert_int_equal(tr_npy_load(ctx, p, m, &a), TR_OK);
        assert_int_equal(a.count, 12);
        for (i = 0; i < 12; i++) assert_true(tr_npy_get(&a, (size_t)i) == i64[i]);
        tr_npy_close(ctx, &a);
        path_of(p, sizeof p, g_tmp, "empty.npy");
        shape[0] = 0;
        assert_int_equal(tr_npy_save(ctx, p, TR_NPY_I32, 1, shape, NULL), TR_OK);
        assert_int_equal(tr_npy_load(ctx, p, m, &a), TR_OK);
        assert_int_equal(a.count, 0);
        tr_npy_close(ctx, &a);
    }
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

/* A header with the given dict text, padded like numpy's, then `data_bytes` zero bytes. */
static size_t make_npy(unsigned char *buf, int major, const char *dict, size_t data_bytes) {
    size_t hl = strlen(dict) + 1, pre = major == 1 ? 10 : 12, pad = 64 - (pre + hl) % 64, o;
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major;
    buf[7] = 0;
    hl += pad;
    if (major == 1) {
        buf[8] = (unsigned char)(hl & 0xff);
        buf[9] = (unsigned char)(hl >> 8);
    } else {
        buf[8] = (unsigned char)(hl & 0xff);
        buf[9] = (unsigned char)(hl >> 8);
        buf[10] = buf[11] = 0;
    }
    o = pre;
    memcpy(buf + o, dict, strlen(dict));
    o += strlen(dict);
    memset(buf + o, ' ', pad);
    o += pad;
    buf[o++] = '\n';
    memset(buf + o, 0, data_bytes);
    return o + data_bytes;
}

static void test_npy_errors(void **state) {
    static const struct {
        const char *name;
        int major;
        const char *dict;
        long data; /* bytes after the header; < 0: cut the file to -data bytes */
        tr_status want;
        const char *needle;
    } cases[] = {
        {"ok_v1", 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", 12, TR_OK, NULL},
        {"ok_v2", 2, "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 3), }", 6, TR_OK, NULL},
        {"ok_keys_any_order", 1, "{'shape': (2,), 'fortran_order': False, 'descr': '<i8'}", 16, TR_OK, NULL},
        {"truncated_data", 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", 11, TR_ERR_FORMAT, "truncated"},
        {"trailing_bytes", 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", 13, TR_ERR_FORMAT, "trailing"},
        {"truncated_header", 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", -40, TR_ERR_FORMAT, "truncated"},
        {"tiny_file", 1, "{}", -5, TR_ERR_FORMAT, "too short"},
        {"float32", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", 12, TR_ERR_UNSUPPORTED, "'descr'"},
        {"big_endian", 1, "{'descr': '>i4', 'fortran_order': False, 'shape': (3,), }", 12, TR_ERR_UNSUPPORTED, "big-endian"},
        {"int16", 1, "{'descr': '<i2', 'fortran_order': False, 'shape': (3,), }", 6, TR_ERR_UNSUPPORTED, "'descr'"},
        {"fortran_2d", 1, "{'descr': '<i4', 'fortran_order': True, 'shape': (2, 2), }", 16, TR_ERR_UNSUPPORTED, "fortran_order"},
        {"missing_shape", 1, "{'descr': '<i4', 'fortran_order': False, }", 0, TR_ERR_FORMAT, "missing key 'shape'"},
        {"unknown_key", 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (1,), 'x': 1}", 4, TR_ERR_FORMAT, "unexpected key"},
        {"shape_not_tuple", 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (3), }", 12, TR_ERR_FORMAT, "'shape'"},
        {"shape_negative", 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (-3,), }", 12, TR_ERR_FORMAT, "'shape'"},
        {"structured", 1, "{'descr': [('a', '<i4')], 'fortran_order': False, 'shape': (1,), }", 4, TR_ERR_UNSUPPORTED, "structured"},
        {"not_a_dict", 1, "['descr']", 0, TR_ERR_FORMAT, "dict"},
        {"huge_shape", 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (4611686018427387904, 8), }", 0, TR_ERR_OVERFLOW, "overflow"},
    };
    tr_ctx *ctx = new_ctx();
    unsigned char buf[1024];
    char p[512];
    size_t i, n;
    tr_npy a;
    (void)state;
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int m;
        n = make_npy(buf, cases[i].major, cases[i].dict, cases[i].data > 0 ? (size_t)cases[i].data : 0);
        if (cases[i].data < 0) n = (size_t)(-cases[i].data);
        snprintf(p, sizeof p, "%s/%s.npy", g_tmp, cases[i].name);
        {
            FILE *f = fopen(p, "wb");
            fwrite(buf, 1, n, f);
            fclose(f);
        }
        for (m = 0; m < 2; m++) {
            tr_status st = tr_npy_load(ctx, p, m, &a);
            if (cases[i].want == TR_OK) {
                if (st != TR_OK) fail_msg("%s: %s", cases[i].name, tr_ctx_last_error(ctx));
                tr_npy_close(ctx, &a);
            } else {
                expect_error(ctx, st, cases[i].want, cases[i].needle, p);
            }
        }
    }
    /* wrong magic, unknown version */
    memcpy(buf, "\x93NUMPX", 6);
    snprintf(p, sizeof p, "%s/magic.npy", g_tmp);
    {
        FILE *f = fopen(p, "wb");
        fwrite(buf, 1, 128, f);
        fclose(f);
    }
    expect_error(ctx, tr_npy_load(ctx, p, 1, &a), TR_ERR_FORMAT, "magic", NULL);
    n = make_npy(buf, 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", 12);
    buf[6] = 4;
    expect_error(ctx, tr_npy_parse(ctx, buf, n, "mem.npy", &a), TR_ERR_UNSUPPORTED, "version 4.0", "mem.npy");
    expect_error(ctx, tr_npy_load(ctx, "/nonexistent/x.npy", 1, &a), TR_ERR_IO, "/nonexistent/x.npy", NULL);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

static void test_npy_numpy_files(void **state) {
    const char *py = python_numpy();
    char cmd[1024], p[512], line[512];
    FILE *man;
    tr_ctx *ctx;
    int nfiles = 0;
    (void)state;
    if (!py) {
        /* CI sets TINYREC_REQUIRE_NUMPY=1 (it installs python3-numpy): there the check must run */
        if (getenv("TINYREC_REQUIRE_NUMPY")) fail_msg("python3 with numpy not found, and TINYREC_REQUIRE_NUMPY is set");
        print_message("python3 with numpy not found: numpy compatibility skipped\n");
        skip();
    }
    snprintf(cmd, sizeof cmd, "%s tools/check_npy.py write %s/numpy > /dev/null", py, g_tmp);
    assert_int_equal(system(cmd), 0);
    snprintf(p, sizeof p, "%s/numpy/manifest.txt", g_tmp);
    man = fopen(p, "r");
    assert_non_null(man);
    ctx = new_ctx();
    while (fgets(line, sizeof line, man)) {
        char name[128], dt[16];
        int ndim, k, off = 0;
        tr_npy a;
        tr_status st;
        if (sscanf(line, "%127s %15s%n", name, dt, &off) != 2) continue;
        snprintf(p, sizeof p, "%s/numpy/%s", g_tmp, name);
        st = tr_npy_load(ctx, p, 1, &a);
        nfiles++;
        if (!strcmp(dt, "-")) {
            assert_true(st == TR_ERR_UNSUPPORTED || st == TR_ERR_FORMAT);
            continue;
        }
        if (st != TR_OK) fail_msg("%s: %s", name, tr_ctx_last_error(ctx));
        {
            const char *q = line + off;
            long long v, sum = 0, first, last;
            int used;
            sscanf(q, "%d%n", &ndim, &used);
            q += used;
            assert_int_equal(a.ndim, ndim);
            for (k = 0; k < ndim; k++) {
                sscanf(q, "%lld%n", &v, &used);
                q += used;
                assert_int_equal(a.shape[k], v);
            }
            sscanf(q, "%lld %lld %lld", &sum, &first, &last);
            assert_int_equal(a.dtype, !strcmp(dt, "u8") ? TR_NPY_U8 : !strcmp(dt, "i32") ? TR_NPY_I32 : TR_NPY_I64);
            {
                uint64_t s = 0;
                size_t i;
                for (i = 0; i < a.count; i++) s += (uint64_t)tr_npy_get(&a, i); /* wraps like numpy's int64 sum */
                assert_true(s == (uint64_t)sum);
                if (a.count) {
                    assert_true(tr_npy_get(&a, 0) == first);
                    assert_true(tr_npy_get(&a, a.count - 1) == last);
                }
            }
        }
        tr_npy_close(ctx, &a);
    }
    fclose(man);
    assert_true(nfiles >= 14);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

/* ---- datasets --------------------------------------------------------------------------- */
/* A small hand-made split: 3 groups, puzzles with 1-3 examples, labels with pad (ignored) cells. */
static void small_split(tr_ctx *ctx, tr_split *s) {
    uint8_t in[6], lab[6];
    int g, p, e, j, id = 1;
    assert_int_equal(tr_split_init(ctx, s, 6, 2), TR_OK);
    for (g = 0; g < 3; g++) {
        for (p = 0; p < g + 1; p++) {
            for (e = 0; e < 1 + (g + p) % 3; e++) {
                for (j = 0; j < 6; j++) {
                    in[j] = (uint8_t)(1 + (g * 7 + p * 3 + e + j) % 4);
                    lab[j] = (uint8_t)(j == 5 ? 0 : 1 + (g + p + e * j) % 4);
                }
                assert_int_equal(tr_split_add_example(ctx, s, in, lab), TR_OK);
            }
            assert_int_equal(tr_split_end_puzzle(ctx, s, id++), TR_OK);
        }
        assert_int_equal(tr_split_end_group(ctx, s), TR_OK);
    }
}

static void write_small(tr_ctx *ctx, const char *dir) {
    tr_split s;
    tr_dataset_meta m = tr_dataset_meta_default();
    const char *names[7] = {"<blank>", "a", "b", "c", "d", "e", "f"};
    small_split(ctx, &s);
    m.vocab_size = 5;
    m.num_puzzle_identifiers = 7;
    assert_int_equal(tr_split_write(ctx, dir, "train", &s, &m), TR_OK);
    assert_int_equal(tr_split_write(ctx, dir, "test", &s, &m), TR_OK);
    assert_int_equal(tr_write_identifiers(ctx, dir, 7, names), TR_OK);
    tr_split_free(ctx, &s);
}

static void test_dataset_roundtrip(void **state) {
    tr_ctx *ctx = new_ctx();
    char dir[512];
    tr_split s;
    tr_dataset *ds;
    int m;
    int64_t e, j;
    (void)state;
    snprintf(dir, sizeof dir, "%s/small", g_tmp);
    write_small(ctx, dir);
    small_split(ctx, &s);
    for (m = 0; m < 2; m++) {
        assert_int_equal(tr_dataset_open(ctx, dir, "train", m ? TR_DATASET_NO_MMAP : 0, &ds), TR_OK);
        assert_int_equal(ds->meta.seq_len, 6);
        assert_int_equal(ds->meta.vocab_size, 5);
        assert_int_equal(ds->num_sets, 1);
        assert_int_equal(ds->sets[0].num_examples, s.num_examples);
        assert_int_equal(ds->sets[0].num_puzzles, s.num_puzzles);
        assert_int_equal(ds->sets[0].num_groups, 3);
        assert_int_equal(ds->num_identifiers, 7);
        assert_string_equal(ds->identifiers[3], "c");
        for (j = 0; j <= s.num_puzzles; j++) assert_int_equal(ds->sets[0].puzzle_indices[j], s.puzzle_indices[j]);
        for (j = 0; j < s.num_puzzles; j++) assert_int_equal(ds->sets[0].puzzle_identifiers[j], s.puzzle_identifiers[j]);
        for (j = 0; j <= 3; j++) assert_int_equal(ds->sets[0].group_indices[j], s.group_indices[j]);
        for (e = 0; e < s.num_examples; e++) {
            int32_t in[6], lab[6];
            tr_dataset_example(ds, 0, e, in, lab);
            for (j = 0; j < 6; j++) {
                assert_int_equal(in[j], s.inputs[e * 6 + j]);
                assert_int_equal(lab[j], s.labels[e * 6 + j] == 0 ? TR_IGNORE_LABEL : s.labels[e * 6 + j]);
            }
        }
        tr_dataset_close(ds);
    }
    tr_split_free(ctx, &s);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

/* Each case corrupts one file of a valid dataset; the reader must name the file and the field. */
static void test_dataset_validation(void **state) {
    tr_ctx *ctx = new_ctx();
    char good[512], bad[512], p[600], q[600];
    static const char *files[7] = {"dataset.json", "all__inputs.npy", "all__labels.npy", "all__puzzle_identifiers.npy", "all__puzzle_indices.npy", "all__group_indices.npy", NULL};
    int c, i;
    (void)state;
    snprintf(good, sizeof good, "%s/good", g_tmp);
    snprintf(bad, sizeof bad, "%s/bad", g_tmp);
    write_small(ctx, good);
    for (c = 0; c < 19; c++) {
        tr_dataset *ds = NULL;
        tr_status st;
        int64_t shape[2];
        int32_t v32[16];
        uint8_t u8[64];
        const char *want_file = NULL, *want_field = NULL;
        tr_status want = TR_ERR_FORMAT;
        long live = tr_ctx_live_allocs(ctx);
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "mkdir -p %s/train", bad);
        assert_int_equal(system(cmd), 0);
        for (i = 0; files[i]; i++) {
            snprintf(p, sizeof p, "%s/train/%s", good, files[i]);
            snprintf(q, sizeof q, "%s/train/%s", bad, files[i]);
            copy_file(p, q);
        }
        snprintf(p, sizeof p, "%s/identifiers.json", good);
        snprintf(q, sizeof q, "%s/identifiers.json", bad);
        copy_file(p, q);
#define BADFILE(name) snprintf(q, sizeof q, "%s/train/%s", bad, name)
        switch (c) {
        case 0: /* non-monotone puzzle offsets */
            BADFILE("all__puzzle_indices.npy");
            {
                tr_npy a;
                snprintf(p, sizeof p, "%s/train/all__puzzle_indices.npy", good);
                assert_int_equal(tr_npy_load(ctx, p, 0, &a), TR_OK);
                for (i = 0; i < (int)a.count; i++) v32[i] = (int32_t)tr_npy_get(&a, (size_t)i);
                shape[0] = (int64_t)a.count;
                tr_npy_close(ctx, &a);
            }
            {
                int32_t t = v32[2];
                v32[2] = v32[3];
                v32[3] = t;
            }
            assert_int_equal(tr_npy_save(ctx, q, TR_NPY_I32, 1, shape, v32), TR_OK);
            want_file = "all__puzzle_indices.npy", want_field = "monotone";
            break;
        case 1: /* out-of-range puzzle identifier */
            BADFILE("all__puzzle_identifiers.npy");
            for (i = 0; i < 6; i++) v32[i] = i + 1;
            v32[4] = 7;
            shape[0] = 6;
            assert_int_equal(tr_npy_save(ctx, q, TR_NPY_I32, 1, shape, v32), TR_OK);
            want_file = "all__puzzle_identifiers.npy", want_field = "puzzle_identifiers[4]";
            break;
        case 2: /* group offsets not strictly increasing */
            BADFILE("all__group_indices.npy");
            v32[0] = 0, v32[1] = 1, v32[2] = 1, v32[3] = 6;
            shape[0] = 4;
            assert_int_equal(tr_npy_save(ctx, q, TR_NPY_I32, 1, shape, v32), TR_OK);
            want_file = "all__group_indices.npy", want_field = "strictly increasing";
            break;
        case 3: /* group offsets do not end at the puzzle count */
            BADFILE("all__group_indices.npy");
            v32[0] = 0, v32[1] = 1, v32[2] = 3, v32[3] = 5;
            shape[0] = 4;
            assert_int_equal(tr_npy_save(ctx, q, TR_NPY_I32, 1, shape, v32), TR_OK);
            want_file = "all__group_indices.npy", want_field = "ends at 5";
            break;
        case 4: /* wrong dtype for an index array */
            BADFILE("all__group_indices.npy");
            u8[0] = 0, u8[1] = 1, u8[2] = 3, u8[3] = 6;
            shape[0] = 4;
            assert_int_equal(tr_npy_save(ctx, q, TR_NPY_U8, 1, shape, u8), TR_OK);
            want_file = "all__group_indices.npy", want_field = "int32 or int64";
            break;
        case 5: /* label outside the vocabulary */
        case 6: /* input outside the vocabulary */
        {
            tr_npy a;
            uint8_t *d;
            snprintf(p, sizeof p, "%s/train/%s", good, c == 5 ? "all__labels.npy" : "all__inputs.npy");
            assert_int_equal(tr_npy_load(ctx, p, 0, &a), TR_OK);
            d = (uint8_t *)malloc(a.count);
            memcpy(d, a.data, a.count);
            d[7] = 9;
            BADFILE(c == 5 ? "all__labels.npy" : "all__inputs.npy");
            assert_int_equal(tr_npy_save(ctx, q, TR_NPY_U8, 2, a.shape, d), TR_OK);
            tr_npy_close(ctx, &a);
            free(d);
            want_file = c == 5 ? "all__labels.npy" : "all__inputs.npy", want_field = "token 9 at example 1 position 1";
            break;
        }
        case 7: /* seq_len mismatch */
            BADFILE("all__inputs.npy");
            memset(u8, 1, sizeof u8);
            shape[0] = 14, shape[1] = 4;
            assert_int_equal(tr_npy_save(ctx, q, TR_NPY_U8, 2, shape, u8), TR_OK);
            want_file = "all__inputs.npy", want_field = "seq_len is 6";
            break;
        case 8: /* labels with another example count */
            BADFILE("all__labels.npy");
            memset(u8, 1, sizeof u8);
            shape[0] = 3, shape[1] = 6;
            assert_int_equal(tr_npy_save(ctx, q, TR_NPY_U8, 2, shape, u8), TR_OK);
            want_file = "all__labels.npy", want_field = "labels has 3 examples";
            break;
        case 9:
            BADFILE("dataset.json");
            write_text(q, "{\"pad_id\": 0, \"ignore_label_id\": 0,");
            want_file = "dataset.json", want_field = NULL;
            break;
        case 10:
            BADFILE("dataset.json");
            write_text(q, "{\"pad_id\": 0, \"ignore_label_id\": 0, \"blank_identifier_id\": 0, \"vocab_size\": 5, \"num_puzzle_identifiers\": 7, \"total_groups\": 3, \"mean_puzzle_examples\": 2.0, \"sets\": [\"all\"]}");
            want_file = "dataset.json", want_field = "'seq_len' is missing";
            break;
        case 11:
            BADFILE("dataset.json");
            write_text(q, "{\"pad_id\": 0, \"ignore_label_id\": 0, \"blank_identifier_id\": 0, \"vocab_size\": 5, \"seq_len\": 6, \"num_puzzle_identifiers\": 7, \"total_groups\": 4, \"mean_puzzle_examples\": 2.0, \"sets\": [\"all\"]}");
            want_file = "dataset.json", want_field = "'total_groups' is 4";
            break;
        case 12:
            BADFILE("dataset.json");
            write_text(q, "{\"pad_id\": 0, \"ignore_label_id\": 0, \"blank_identifier_id\": 0, \"vocab_size\": 5.5, \"seq_len\": 6, \"num_puzzle_identifiers\": 7, \"total_groups\": 3, \"mean_puzzle_examples\": 2.0, \"sets\": [\"all\"]}");
            want_file = "dataset.json", want_field = "'vocab_size' must be an integer";
            break;
        case 13:
            BADFILE("dataset.json");
            write_text(q, "{\"pad_id\": 0, \"ignore_label_id\": 0, \"blank_identifier_id\": 0, \"vocab_size\": 5, \"seq_len\": 6, \"num_puzzle_identifiers\": 7, \"total_groups\": 3, \"mean_puzzle_examples\": 2.0, \"sets\": [\"../x\"]}");
            want_file = "dataset.json", want_field = "'sets'";
            break;
        case 14: /* a set whose files are missing */
            BADFILE("dataset.json");
            write_text(q, "{\"pad_id\": 0, \"ignore_label_id\": 0, \"blank_identifier_id\": 0, \"vocab_size\": 5, \"seq_len\": 6, \"num_puzzle_identifiers\": 7, \"total_groups\": 3, \"mean_puzzle_examples\": 2.0, \"sets\": [\"other\"]}");
            want_file = "other__inputs.npy", want_field = NULL, want = TR_ERR_IO;
            break;
        case 15: /* identifiers.json with the wrong length */
            snprintf(q, sizeof q, "%s/identifiers.json", bad);
            write_text(q, "[\"<blank>\", \"a\"]");
            want_file = "identifiers.json", want_field = "num_puzzle_identifiers is 7";
            break;
        case 16: /* a truncated array */
        {
            size_t n;
            char *d;
            snprintf(p, sizeof p, "%s/train/all__inputs.npy", good);
            d = tu_slurp(p, &n);
            BADFILE("all__inputs.npy");
            {
                FILE *f = fopen(q, "wb");
                fwrite(d, 1, n - 5, f);
                fclose(f);
            }
            free(d);
            want_file = "all__inputs.npy", want_field = "truncated";
            break;
        }
        case 17: /* pad_id outside the vocabulary */
            BADFILE("dataset.json");
            write_text(q, "{\"pad_id\": 5, \"ignore_label_id\": 0, \"blank_identifier_id\": 0, \"vocab_size\": 5, \"seq_len\": 6, \"num_puzzle_identifiers\": 7, \"total_groups\": 3, \"mean_puzzle_examples\": 2.0, \"sets\": [\"all\"]}");
            want_file = "dataset.json", want_field = "'pad_id' is 5";
            break;
        default: /* ignore_label_id null: labels 0 stay 0, and the file is valid */
        {
            tr_dataset *d2;
            int32_t lab[6];
            BADFILE("dataset.json");
            write_text(q, "{\"pad_id\": 0, \"ignore_label_id\": null, \"blank_identifier_id\": 0, \"vocab_size\": 5, \"seq_len\": 6, \"num_puzzle_identifiers\": 7, \"total_groups\": 3, \"mean_puzzle_examples\": 2.0, \"sets\": [\"all\"]}");
            assert_int_equal(tr_dataset_open(ctx, bad, "train", 0, &d2), TR_OK);
            assert_int_equal(d2->meta.has_ignore_label_id, 0);
            tr_dataset_example(d2, 0, 0, NULL, lab);
            assert_int_equal(lab[5], 0);
            tr_dataset_close(d2);
            continue;
        }
        }
#undef BADFILE
        st = tr_dataset_open(ctx, bad, "train", 0, &ds);
        if (st == TR_OK) fail_msg("case %d: the corrupted dataset was accepted", c);
        expect_error(ctx, st, want, want_file, want_field);
        assert_int_equal(tr_ctx_live_allocs(ctx), live);
    }
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

/* Allocation failures anywhere in open/build: an error, never a crash or a leak. */
static void test_alloc_failures(void **state) {
    tr_ctx *ctx = new_ctx();
    char dir[512];
    long n;
    tr_sudoku_options o = tr_sudoku_options_default();
    (void)state;
    snprintf(dir, sizeof dir, "%s/small", g_tmp);
    write_small(ctx, dir);
    for (n = 1; n < 200; n++) {
        tr_dataset *ds = NULL;
        tr_status st;
        tr_ctx_fail_alloc_at(ctx, n);
        st = tr_dataset_open(ctx, dir, "train", 0, &ds);
        tr_ctx_fail_alloc_at(ctx, 0);
        if (st == TR_OK) {
            tr_dataset_close(ds);
            break;
        }
        assert_int_equal(st, TR_ERR_OUT_OF_MEMORY);
        assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    }
    assert_true(n > 5 && n < 200);
    o.generate_train = 3, o.generate_test = 2, o.num_aug = 2, o.clues = 30;
    snprintf(dir, sizeof dir, "%s/sud_oom", g_tmp);
    for (n = 1; n < 400; n++) {
        tr_status st;
        tr_ctx_fail_alloc_at(ctx, n);
        st = tr_sudoku_build(ctx, &o, dir, NULL);
        tr_ctx_fail_alloc_at(ctx, 0);
        assert_int_equal(tr_ctx_live_allocs(ctx), 0);
        if (st == TR_OK) break;
    }
    assert_true(n < 400);
    tr_ctx_destroy(ctx);
}

/* ---- Sudoku ----------------------------------------------------------------------------- */
static const char *k_puzzle = "53..7....6..195....98....6.8...6...34..8.3..17...2...6.6....28....419..5....8..79";
static const char *k_solution = "534678912672195348198342567859761423426853791713924856961537284287419635345286179";

static void parse81(const char *s, uint8_t *g) {
    int i;
    for (i = 0; i < 81; i++) g[i] = (uint8_t)(s[i] == '.' ? 0 : s[i] - '0');
}

static void test_sudoku_solver(void **state) {
    uint8_t q[81], a[81], sol[81], empty[81];
    (void)state;
    parse81(k_puzzle, q);
    parse81(k_solution, a);
    assert_int_equal(tr_sudoku_solve(q, sol, 2), 1);
    assert_memory_equal(sol, a, 81);
    assert_true(tr_sudoku_check(q, a));
    memset(empty, 0, 81);
    assert_int_equal(tr_sudoku_solve(empty, NULL, 2), 2);
    q[2] = 5; /* clashes with the 5 in the row */
    assert_int_equal(tr_sudoku_solve(q, NULL, 2), -1);
    a[0] = a[1];
    assert_false(tr_sudoku_check(NULL, a));
}

/* The search is bounded: hard real puzzles solve, crafted ones end quickly (the fuzzer's input below
   took over 30 s before the solver checked units), and a count with no end gives up instead of running. */
static void test_sudoku_solver_bounded(void **state) {
    static const char *hard[] = {
        "8..........36......7..9.2...5...7.......457.....1...3...1....68..85...1..9....4..", /* Inkala 2012 */
        "1.......2.9.4...5...6...7...5.9.3.......7.......85..4.7.....6...3...9.8...2.....1", /* Easter Monster */
        "52...6.........7.13...........4..8..6......5...........418.........3..2...87.....", /* 17 givens */
    };
    uint8_t q[81], sol[81];
    size_t k;
    (void)state;
    for (k = 0; k < sizeof hard / sizeof *hard; k++) {
        parse81(hard[k], q);
        assert_int_equal(tr_sudoku_solve(q, sol, 2), 1);
        assert_true(tr_sudoku_check(q, sol));
    }
    parse81("..6........51........9........6.91................1.9...3....1..........1........", q);
    assert_int_equal(tr_sudoku_solve(q, NULL, 2), 2);
    memset(q, 0, 81); /* 6.7e21 solutions: counting them all gives up */
    assert_int_equal(tr_sudoku_solve(q, NULL, 2000000000), -2);
    assert_int_equal(tr_sudoku_solve(q, sol, 1), 1);
    assert_true(tr_sudoku_check(NULL, sol));
    q[40] = 10;
    assert_int_equal(tr_sudoku_solve(q, NULL, 2), -1);
}

static void test_sudoku_generate_and_augment(void **state) {
    tr_ctx *ctx = new_ctx();
    int k, clues[3] = {22, 30, 45};
    (void)state;
    for (k = 0; k < 12; k++) {
        uint8_t q[81], a[81], sol[81], q2[81], a2[81];
        int i, n = 0, c = clues[k % 3], aug;
        assert_int_equal(tr_sudoku_generate(ctx, 5, (uint64_t)k, c, q, a), TR_OK);
        for (i = 0; i < 81; i++) n += q[i] != 0;
        assert_int_equal(n, c);
        assert_true(tr_sudoku_check(q, a));
        assert_int_equal(tr_sudoku_solve(q, sol, 2), 1);
        assert_memory_equal(sol, a, 81);
        for (aug = 0; aug < 40; aug++) { /* every augmented Sudoku is still a valid, uniquely solvable puzzle */
            int m = 0;
            tr_sudoku_augment(9, (uint64_t)(k * 100 + aug), q, a, q2, a2);
            assert_true(tr_sudoku_check(q2, a2));
            for (i = 0; i < 81; i++) m += q2[i] != 0;
            assert_int_equal(m, c);
            assert_int_equal(tr_sudoku_solve(q2, sol, 2), 1);
            assert_memory_equal(sol, a2, 81);
        }
    }
    expect_error(ctx, tr_sudoku_generate(ctx, 1, 1, 16, NULL, NULL), TR_ERR_INVALID_ARG, "17..81", NULL);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

static void test_sudoku_read(void **state) {
    tr_ctx *ctx = new_ctx();
    char p[512], text[2048];
    tr_sudoku_set s;
    int64_t rej;
    uint8_t a[81];
    static const struct {
        const char *body;
        const char *needle;
    } bad[] = {
        {"source,question,answer,rating\nx,%s,,0\nx,.................................................................................,,0\n", ":3: the puzzle has more than one solution"},
        {"%s\n55...............................................................................\n", ":2: the puzzle has clashing givens"},
        {"%s\n%.80s\n", ":2: field 'question' has 80 cells"},
        {"%s\n%.80sx\n", ":2: field 'question' cell 80 is 'x'"},
        {"%s 634678912672195348198342567859761423426853791713924856961537284287419635345286179\n", ":1: field 'answer' is not a valid solution"},
        {"source,question,answer,rating\nx,%s\n", ":2: 2 fields, the header has 4"},
    };
    size_t i;
    (void)state;
    parse81(k_solution, a);
    /* CSV with header, answers present and absent, '0' blanks; the rating filter */
    snprintf(p, sizeof p, "%s/s.csv", g_tmp);
    snprintf(text, sizeof text, "source,question,answer,rating\nx,%s,%s,5\ny,%s,,1\r\nz,%s,,3\n", k_puzzle, k_solution, k_puzzle, k_puzzle);
    for (i = 0; text[i]; i++)
        if (text[i] == '.' && i > 150) text[i] = '0';
    write_text(p, text);
    assert_int_equal(tr_sudoku_read(ctx, p, -1, &s, &rej), TR_OK);
    assert_int_equal(s.count, 3);
    assert_int_equal(s.ratings[2], 3);
    for (i = 0; i < 3; i++) assert_memory_equal(s.solutions + i * 81, a, 81);
    tr_sudoku_set_free(ctx, &s);
    assert_int_equal(tr_sudoku_read(ctx, p, 3, &s, &rej), TR_OK);
    assert_int_equal(s.count, 2);
    assert_int_equal(rej, 1);
    tr_sudoku_set_free(ctx, &s);
    /* plain lines, with and without a solution */
    snprintf(text, sizeof text, "%s\n# a comment\n%s,%s\n\n", k_puzzle, k_puzzle, k_solution);
    write_text(p, text);
    assert_int_equal(tr_sudoku_read(ctx, p, -1, &s, NULL), TR_OK);
    assert_int_equal(s.count, 2);
    assert_memory_equal(s.solutions, a, 81);
    tr_sudoku_set_free(ctx, &s);
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(text, sizeof text, bad[i].body, k_puzzle, k_puzzle);
        write_text(p, text);
        expect_error(ctx, tr_sudoku_read(ctx, p, -1, &s, NULL), TR_ERR_FORMAT, bad[i].needle, p);
    }
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

static void test_sudoku_build(void **state) {
    tr_ctx *ctx = new_ctx();
    tr_sudoku_options o = tr_sudoku_options_default();
    char d1[512], d2[512], p1[600], p2[600];
    tr_dataset *ds;
    tr_split train, test;
    int64_t e, g;
    int i;
    static const char *files[6] = {"dataset.json", "all__inputs.npy", "all__labels.npy", "all__puzzle_identifiers.npy", "all__puzzle_indices.npy", "all__group_indices.npy"};
    (void)state;
    o.generate_train = 40, o.generate_test = 10, o.num_aug = 7, o.subsample_size = 25, o.clues = 28, o.seed = 3;
    snprintf(d1, sizeof d1, "%s/sud1", g_tmp);
    snprintf(d2, sizeof d2, "%s/sud2", g_tmp);
    assert_int_equal(tr_sudoku_build(ctx, &o, d1, NULL), TR_OK);
    assert_int_equal(tr_sudoku_build(ctx, &o, d2, NULL), TR_OK);
    for (i = 0; i < 12; i++) { /* same seed: byte-identical files */
        snprintf(p1, sizeof p1, "%s/%s/%s", d1, i < 6 ? "train" : "test", files[i % 6]);
        snprintf(p2, sizeof p2, "%s/%s/%s", d2, i < 6 ? "train" : "test", files[i % 6]);
        assert_true(same_file(p1, p2));
    }
    /* round trip: what was built in memory is what the reader returns */
    assert_int_equal(tr_sudoku_build_splits(ctx, &o, &train, &test, NULL), TR_OK);
    assert_int_equal(tr_dataset_open(ctx, d1, "train", 0, &ds), TR_OK);
    assert_int_equal(ds->sets[0].num_examples, 25 * 8);
    assert_int_equal(ds->sets[0].num_groups, 25);
    assert_int_equal(ds->meta.vocab_size, 11);
    assert_int_equal(ds->meta.total_puzzles, 25); /* as the reference writes it */
    for (e = 0; e < train.num_examples; e++) {
        int32_t in[81], lab[81];
        uint8_t q[81], a[81];
        tr_dataset_example(ds, 0, e, in, lab);
        for (i = 0; i < 81; i++) {
            assert_int_equal(in[i], train.inputs[e * 81 + i]);
            assert_int_equal(lab[i], train.labels[e * 81 + i]);
            assert_true(in[i] >= 1 && in[i] <= 10 && lab[i] >= 2 && lab[i] <= 10);
            q[i] = (uint8_t)(in[i] - 1);
            a[i] = (uint8_t)(lab[i] - 1);
        }
        assert_true(tr_sudoku_check(q, a));
    }
    for (g = 0; g <= 25; g++) assert_int_equal(ds->sets[0].group_indices[g], g * 8);
    tr_dataset_close(ds);
    tr_split_free(ctx, &train);
    tr_split_free(ctx, &test);
    /* another seed gives other files */
    o.seed = 4;
    assert_int_equal(tr_sudoku_build(ctx, &o, d2, NULL), TR_OK);
    snprintf(p1, sizeof p1, "%s/train/all__inputs.npy", d1);
    snprintf(p2, sizeof p2, "%s/train/all__inputs.npy", d2);
    assert_false(same_file(p1, p2));
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

/* ---- Maze ------------------------------------------------------------------------------- */
static void test_maze(void **state) {
    tr_ctx *ctx = new_ctx();
    char m[900], s[900], s2[900], p[512], text[4096], d1[512], d2[512], p1[600], p2[600];
    int k, len, i;
    tr_maze_set set;
    tr_maze_options o = tr_maze_options_default();
    tr_dataset *ds;
    (void)state;
    for (k = 0; k < 10; k++) {
        int n = 0;
        assert_int_equal(tr_maze_generate(ctx, 11, (uint64_t)k, 30, 110, m, s, &len), TR_OK);
        assert_true(len > 110);
        assert_int_equal(tr_maze_solve(ctx, m, 30, s2), len);
        assert_memory_equal(s, s2, 900);
        for (i = 0; i < 900; i++) {
            assert_non_null(strchr(TR_MAZE_CHARSET, s[i]));
            n += s[i] == 'o';
            if (s[i] != 'o') assert_int_equal(s[i], m[i]);
        }
        assert_int_equal(n, len - 1);
        /* the solution checks; a path cell moved into a wall, or a path cut, does not */
        assert_int_equal(tr_maze_check(ctx, m, s, 30), len);
        for (i = 0; i < 900 && s[i] != 'o'; i++) continue;
        s2[i] = ' ';
        assert_int_equal(tr_maze_check(ctx, m, s2, 30), -1);
        for (i = 0; i < 900 && m[i] != '#'; i++) continue;
        memcpy(s2, s, 900);
        s2[i] = 'o';
        assert_int_equal(tr_maze_check(ctx, m, s2, 30), -1);
    }
    assert_int_equal(tr_maze_check(ctx, m, s, 0), -1);
    /* the reference CSV: answers given, and missing (solved here) */
    snprintf(p, sizeof p, "%s/maze.csv", g_tmp);
    snprintf(text, sizeof text, "source,question,answer,rating\nx,%.900s,%.900s,0\ny,%.900s,,0\n", m, s, m);
    write_text(p, text);
    assert_int_equal(tr_maze_read(ctx, p, &set), TR_OK);
    assert_int_equal(set.count, 2);
    assert_int_equal(set.n, 30);
    assert_memory_equal(set.solutions + 900, s, 900);
    tr_maze_set_free(ctx, &set);
    m[5] = 'x';
    snprintf(text, sizeof text, "source,question,answer,rating\nx,%.900s,,0\n", m);
    write_text(p, text);
    expect_error(ctx, tr_maze_read(ctx, p, &set), TR_ERR_FORMAT, ":2: character 'x'", p);
    /* builds: the 8 dihedral versions in train, same seed = same bytes */
    o.generate_train = 6, o.generate_test = 3, o.aug = 1, o.seed = 2;
    snprintf(d1, sizeof d1, "%s/maze1", g_tmp);
    snprintf(d2, sizeof d2, "%s/maze2", g_tmp);
    assert_int_equal(tr_maze_build(ctx, &o, d1, NULL), TR_OK);
    assert_int_equal(tr_maze_build(ctx, &o, d2, NULL), TR_OK);
    snprintf(p1, sizeof p1, "%s/train/all__labels.npy", d1);
    snprintf(p2, sizeof p2, "%s/train/all__labels.npy", d2);
    assert_true(same_file(p1, p2));
    assert_int_equal(tr_dataset_open(ctx, d1, "train", 0, &ds), TR_OK);
    assert_int_equal(ds->sets[0].num_examples, 48);
    assert_int_equal(ds->sets[0].num_groups, 6);
    assert_int_equal(ds->meta.vocab_size, 6);
    assert_int_equal(ds->meta.seq_len, 900);
    for (k = 0; k < 48; k++) { /* each version is a solved maze: its path is a shortest path */
        int32_t in[900], lab[900];
        char mm[900], ss[900];
        int plen = 0;
        tr_dataset_example(ds, 0, k, in, lab);
        for (i = 0; i < 900; i++) {
            mm[i] = TR_MAZE_CHARSET[in[i] - 1];
            ss[i] = TR_MAZE_CHARSET[lab[i] - 1];
            plen += ss[i] == 'o';
        }
        assert_int_equal(tr_maze_solve(ctx, mm, 30, s2), plen + 1);
    }
    tr_dataset_close(ds);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

/* ---- ARC -------------------------------------------------------------------------------- */
static int arc_available(void) {
    struct stat sb;
    return stat(ARC1 "/training", &sb) == 0;
}

/* ---- the puzzle readers on text: options, skipped records, line numbers, allocation failures --- */
typedef struct skips {
    int n;
    int64_t line[16];
    char reason[16][160];
} skips;
static void collect_skip(void *user, int64_t line, const char *reason) {
    skips *s = (skips *)user;
    if (s->n < 16) {
        s->line[s->n] = line;
        snprintf(s->reason[s->n], sizeof s->reason[0], "%s", reason);
    }
    s->n++;
}

/* Runs read(ctx, arg) with the n-th allocation failing, for every n until it succeeds: each
   failure must be TR_ERR_OUT_OF_MEMORY and leave nothing allocated. */
static void alloc_sweep(tr_ctx *ctx, tr_status (*read)(tr_ctx *, void *), void *arg) {
    int n;
    for (n = 1; n < 500; n++) {
        tr_status st;
        tr_ctx_fail_alloc_at(ctx, n);
        st = read(ctx, arg);
        tr_ctx_fail_alloc_at(ctx, 0);
        assert_int_equal(tr_ctx_live_allocs(ctx), 0);
        if (st == TR_OK) break;
        assert_int_equal(st, TR_ERR_OUT_OF_MEMORY);
    }
    assert_true(n > 1 && n < 500);
}

static tr_status sweep_sudoku(tr_ctx *ctx, void *arg) {
    tr_sudoku_set s;
    tr_status st = tr_sudoku_parse(ctx, (const char *)arg, strlen((const char *)arg), "s.txt", NULL, &s, NULL);
    tr_sudoku_set_free(ctx, &s);
    return st;
}

static void test_sudoku_parse(void **state) {
    tr_ctx *ctx = new_ctx();
    tr_read_options o = tr_read_options_default();
    tr_sudoku_set s;
    skips sk;
    char text[4096];
    uint8_t a[81];
    static const struct {
        const char *body, *needle;
    } bad[] = {
        {"%s\n12345\n", "s.txt:2: field 'question' has 5 cells, expected 81"},
        {"%s\n%.80sx\n", "s.txt:2: field 'question' cell 80 is 'x'"},
        {"%s\n%s99\n", "s.txt:2: expected 81 cells, then optionally a separator"},
        {"%s %.80s\n", "s.txt:1: field 'answer' has 80 cells"},
        {"%s\n\n\n55...............................................................................\n", "s.txt:4: the puzzle has clashing givens"},
        {"source,question,answer,rating\nx,%s,,0\ny,%s,,z\n", "s.txt:3: field 'rating' is not an integer: 'z'"},
        {"# nothing but a comment\n", "s.txt: no puzzles"},
    };
    size_t i;
    (void)state;
    parse81(k_solution, a);
    /* blanks around lines, '#' comments, a solution after a separator; lines are recorded */
    snprintf(text, sizeof text, "  %s\t\n# comment\n\n%s | %s\r\n", k_puzzle, k_puzzle, k_solution);
    assert_int_equal(tr_sudoku_parse(ctx, text, strlen(text), "s.txt", NULL, &s, NULL), TR_OK);
    assert_int_equal(s.count, 2);
    assert_int_equal(s.lines[0], 1);
    assert_int_equal(s.lines[1], 4);
    assert_memory_equal(s.solutions, a, 81);
    assert_memory_equal(s.solutions + 81, a, 81);
    tr_sudoku_set_free(ctx, &s);
    /* strict: each malformed record fails the call with "what:line: reason" */
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(text, sizeof text, bad[i].body, k_puzzle, k_puzzle);
        expect_error(ctx, tr_sudoku_parse(ctx, text, strlen(text), "s.txt", NULL, &s, NULL), TR_ERR_FORMAT, bad[i].needle, NULL);
        assert_null(s.puzzles);
    }
    /* puzzles_only + on_skip (tinyrec-solve): text after the cells is ignored, a puzzle with many
       solutions is kept, malformed records are reported in line order and skipped */
    snprintf(text, sizeof text, "%s: a note\nabc\n.................................................................................\n11%.79s\n%s\n", k_puzzle,
             k_puzzle + 2, k_puzzle);
    memset(&sk, 0, sizeof sk);
    o.puzzles_only = 1, o.on_skip = collect_skip, o.user = &sk;
    assert_int_equal(tr_sudoku_parse(ctx, text, strlen(text), "in", &o, &s, NULL), TR_OK);
    assert_int_equal(s.count, 3);
    assert_int_equal(s.lines[1], 3);
    assert_int_equal(s.lines[2], 5);
    assert_true(tr_sudoku_check(s.puzzles + 81, s.solutions + 81));
    assert_int_equal(sk.n, 2);
    assert_int_equal(sk.line[0], 2);
    assert_non_null(strstr(sk.reason[0], "has 3 cells"));
    assert_int_equal(sk.line[1], 4);
    assert_non_null(strstr(sk.reason[1], "clashing givens"));
    tr_sudoku_set_free(ctx, &s);
    /* with on_skip, nothing to read is an empty set, not an error */
    memset(&sk, 0, sizeof sk);
    assert_int_equal(tr_sudoku_parse(ctx, "x\n", 2, "in", &o, &s, NULL), TR_OK);
    assert_int_equal(s.count, 0);
    assert_int_equal(sk.n, 1);
    tr_sudoku_set_free(ctx, &s);
    /* the rating filter through the options */
    snprintf(text, sizeof text, "source,question,answer,rating\nx,%s,,5\ny,%s,,1\n", k_puzzle, k_puzzle);
    o = tr_read_options_default();
    o.min_rating = 3;
    {
        int64_t rej = 0;
        assert_int_equal(tr_sudoku_parse(ctx, text, strlen(text), "c", &o, &s, &rej), TR_OK);
        assert_int_equal(s.count, 1);
        assert_int_equal(rej, 1);
        tr_sudoku_set_free(ctx, &s);
    }
    snprintf(text, sizeof text, "%s\n%s,%s\n", k_puzzle, k_puzzle, k_solution);
    alloc_sweep(ctx, sweep_sudoku, text);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

static tr_status sweep_maze(tr_ctx *ctx, void *arg) {
    tr_maze_set s;
    tr_read_options o = tr_read_options_default();
    tr_status st;
    o.side = 5;
    st = tr_maze_parse(ctx, (const char *)arg, strlen((const char *)arg), "m.txt", &o, &s);
    tr_maze_set_free(ctx, &s);
    return st;
}

static void test_maze_parse(void **state) {
    tr_ctx *ctx = new_ctx();
    tr_read_options o = tr_read_options_default();
    tr_maze_set s;
    skips sk;
    char text[2048];
    /* a 5x5 maze as rows, the same on one line, and with its solution after a separator */
    static const char *rows = "#####\n#S  #\n### #\n#G  #\n#####\n";
    static const char *flat = "######S  #### ##G  ######";
    static const char *solved = "######Soo####o##Goo######";
    static const struct {
        const char *body, *needle;
        int64_t line;
    } bad[] = {
        {"#####\n#S #\n\n", "maze rows need 5 characters, this one has 4", 2}, /* skipped up to the blank line */
        {"#####\n#S  #\n\n", "incomplete maze: 2 rows of 5", 1},
        {"######S  #### ##G  #####x\n", "character 'x' (0x78) at row 5, column 5", 1},
        {"######S  #### ##S  ######\n", "a maze needs exactly one 'S' and one 'G' (found 2 and 0)", 1},
        {"######S  #######G  ######\n", "'G' cannot be reached from 'S'", 1},
        {"######S  ####o##G  ######\n", "character 'o'", 1},
        {"source,question,answer,rating\nx,####\ny,", "2 fields, the header has 4", 2}, /* then y,<maze>\n */
    };
    size_t i;
    (void)state;
    o.side = 5;
    snprintf(text, sizeof text, "%s\n%s\n%s|%s\n%s", rows, flat, flat, solved, rows);
    assert_int_equal(tr_maze_parse(ctx, text, strlen(text), "m.txt", &o, &s), TR_OK);
    assert_int_equal(s.count, 4);
    assert_int_equal(s.n, 5);
    assert_int_equal(s.lines[0], 1);
    assert_int_equal(s.lines[1], 7);
    assert_int_equal(s.lines[2], 8);
    assert_int_equal(s.lines[3], 9);
    for (i = 0; i < 4; i++) {
        assert_memory_equal(s.mazes + i * 25, flat, 25);
        assert_memory_equal(s.solutions + i * 25, solved, 25);
    }
    tr_maze_set_free(ctx, &s);
    /* without a side, only single-line records; rows are then a size error */
    assert_int_equal(tr_maze_parse(ctx, flat, 25, "m.txt", NULL, &s), TR_OK);
    assert_int_equal(s.n, 5);
    tr_maze_set_free(ctx, &s);
    expect_error(ctx, tr_maze_parse(ctx, "abc\n", 4, "m.txt", NULL, &s), TR_ERR_FORMAT, "m.txt:1: a maze of 3 characters is not square", NULL);
    o.side = 1;
    expect_error(ctx, tr_maze_parse(ctx, flat, 25, "m.txt", &o, &s), TR_ERR_INVALID_ARG, NULL, NULL);
    /* each malformed record: strict, the call fails; on_skip, it is reported and skipped */
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char needle[200];
        o = tr_read_options_default();
        o.side = 5, o.puzzles_only = 1;
        snprintf(text, sizeof text, "%s%s%s\n", bad[i].body, flat, bad[i].body[0] == 's' ? ",," : "");
        snprintf(needle, sizeof needle, "m.txt:%lld: %s", (long long)bad[i].line, bad[i].needle);
        expect_error(ctx, tr_maze_parse(ctx, text, strlen(text), "m.txt", &o, &s), TR_ERR_FORMAT, needle, NULL);
        memset(&sk, 0, sizeof sk);
        o.on_skip = collect_skip, o.user = &sk;
        assert_int_equal(tr_maze_parse(ctx, text, strlen(text), "m.txt", &o, &s), TR_OK);
        assert_int_equal(s.count, 1);
        assert_int_equal(sk.n, 1);
        assert_int_equal(sk.line[0], bad[i].line);
        assert_non_null(strstr(sk.reason[0], bad[i].needle));
        tr_maze_set_free(ctx, &s);
    }
    /* a given solution is kept, unless puzzles_only */
    snprintf(text, sizeof text, "%.25s|%.25s\n", flat, "######Soo####o##Go ######");
    o = tr_read_options_default();
    assert_int_equal(tr_maze_parse(ctx, text, strlen(text), "m.txt", &o, &s), TR_OK);
    assert_memory_equal(s.solutions, "######Soo####o##Go ######", 25);
    tr_maze_set_free(ctx, &s);
    snprintf(text, sizeof text, "%s\n%s|%s\n", rows, flat, solved);
    alloc_sweep(ctx, sweep_maze, text);
    tr_ctx_destroy(ctx);
}

static tr_status sweep_arc(tr_ctx *ctx, void *arg) {
    tr_arc_task t;
    tr_status st = tr_arc_task_parse(ctx, (const char *)arg, strlen((const char *)arg), "t.json", &t);
    tr_arc_task_free(ctx, &t);
    return st;
}

static void test_arc_task_parse(void **state) {
    tr_ctx *ctx = new_ctx();
    tr_arc_task t;
    tr_json *root;
    tr_arc_grid g;
    tr_read_options o = tr_read_options_default();
    skips sk;
    static const char *good = "{\"train\": [{\"input\": [[1, 2], [3, 4]], \"output\": [[4, 3], [2, 1]]}],\n"
                              " \"test\": [{\"input\": [[5, 6, 7]], \"output\": [[7], [6], [5]]},\n"
                              "          {\"input\": [[0]]},\n"
                              "          {\"input\": [[9]], \"output\": null}]}\n";
    static const struct {
        const char *body, *needle;
    } bad[] = {
        {"[1, 2]", "t.json:1: expected an object with a list 'test'"},
        {"{\"test\": 3}", "t.json:1: expected an object with a list 'test'"},
        {"{\"train\": {}, \"test\": []}", "t.json:1: expected an object with a list 'test'"},
        {"{\"train\": [], \"test\": []}", "t.json:1: the task has no pairs"},
        {"{\"test\": [\n{\"input\": [[1, 2],\n [3]]}]}", "t.json:2: test[0].input: row 1 has 1 cells, row 0 has 2"},
        {"{\"test\": [{\"input\": [[1, 12]]}]}", "t.json:1: test[0].input: cell (0, 1) is not a colour 0-9"},
        {"{\"test\": [{\"input\": [[1.5]]}]}", "test[0].input: cell (0, 0) is not a colour"},
        {"{\"test\": [{\"input\": []}]}", "test[0].input: expected a non-empty list of rows"},
        {"{\"test\": [{\"input\": [[]]}]}", "test[0].input: row 0 is not a non-empty list"},
        {"{\"test\": [7]}", "t.json:1: test[0]: expected an object"},
        {"{\"train\": [{\"input\": [[1]]}], \"test\": [{\"input\": [[1]]}]}", "train[0].output: expected a non-empty list of rows"},
        {"{\"test\": [{\"input\": [[1]], \"output\": [[1], 2]}]}", "test[0].output: row 1 has 0 cells"},
        {"{\"test\": [{\"input\": [[1]]}]", "t.json: invalid JSON at byte"},
    };
    char big[8192];
    size_t i, n;
    (void)state;
    assert_int_equal(tr_arc_task_parse(ctx, good, strlen(good), "t.json", &t), TR_OK);
    assert_int_equal(t.num_train, 1);
    assert_int_equal(t.num_test, 3);
    assert_int_equal(t.pairs[0].input.h, 2);
    assert_int_equal(t.pairs[0].output.cells[3], 1);
    assert_int_equal(t.pairs[1].input.w, 3);
    assert_int_equal(t.pairs[1].output.h, 3);
    assert_int_equal(t.pairs[1].line, 2);
    assert_int_equal(t.pairs[2].line, 3);
    assert_int_equal(t.pairs[2].output.h, 0); /* absent */
    assert_int_equal(t.pairs[3].output.h, 0); /* null */
    assert_int_equal(t.pairs[3].input.cells[0], 9);
    tr_arc_task_free(ctx, &t);
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        expect_error(ctx, tr_arc_task_parse(ctx, bad[i].body, strlen(bad[i].body), "t.json", &t), TR_ERR_FORMAT, bad[i].needle, NULL);
        assert_null(t.pairs);
    }
    /* the size limit: 31 rows */
    n = (size_t)snprintf(big, sizeof big, "{\"test\": [{\"input\": [");
    for (i = 0; i < 31; i++) n += (size_t)snprintf(big + n, sizeof big - n, "%s[1]", i ? "," : "");
    snprintf(big + n, sizeof big - n, "]}]}");
    expect_error(ctx, tr_arc_task_parse(ctx, big, strlen(big), "t.json", &t), TR_ERR_FORMAT, "test[0].input: the grid is 31x1, the limit is 30x30", NULL);
    /* on_skip: a malformed pair is reported and left empty, a task without tests comes back empty */
    {
        static const char *file = "{\"a\": {\"test\": [{\"input\": [[1, 2], [3]]},\n {\"input\": [[4]]}]},\n \"b\": {\"train\": []}}";
        assert_int_equal(tr_json_parse(ctx, file, strlen(file), "f.json", &root), TR_OK);
        memset(&sk, 0, sizeof sk);
        o.on_skip = collect_skip, o.user = &sk;
        assert_int_equal(tr_arc_task_from_json(ctx, &root->items[0], "f.json", &o, &t), TR_OK);
        assert_int_equal(t.num_test, 2);
        assert_int_equal(t.pairs[0].input.h, 0);
        assert_int_equal(t.pairs[1].input.cells[0], 4);
        assert_int_equal(t.pairs[1].line, 2);
        assert_int_equal(sk.n, 1);
        assert_int_equal(sk.line[0], 1);
        assert_non_null(strstr(sk.reason[0], "test[0].input: row 1 has 1 cells"));
        tr_arc_task_free(ctx, &t);
        assert_int_equal(tr_arc_task_from_json(ctx, &root->items[1], "f.json", &o, &t), TR_OK);
        assert_int_equal(t.num_test, 0);
        assert_null(t.pairs);
        assert_int_equal(sk.n, 2);
        assert_int_equal(sk.line[1], 3);
        expect_error(ctx, tr_arc_task_from_json(ctx, &root->items[1], "f.json", NULL, &t), TR_ERR_FORMAT, "f.json:3: expected an object", NULL);
        tr_json_free(ctx, root);
    }
    assert_int_equal(tr_json_parse(ctx, "[[1, 2], [3, 4]]", 16, "g", &root), TR_OK);
    assert_int_equal(tr_arc_grid_from_json(ctx, root, "g", &g), TR_OK);
    assert_int_equal(g.h, 2);
    assert_int_equal(g.cells[2], 3);
    expect_error(ctx, tr_arc_grid_from_json(ctx, &root->items[0].items[0], "preds.jsonl:2", &g), TR_ERR_FORMAT, "preds.jsonl:2: expected a non-empty list of rows", NULL);
    assert_int_equal(g.h, 0);
    tr_json_free(ctx, root);
    alloc_sweep(ctx, sweep_arc, (void *)good);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

static tr_status sweep_ids(tr_ctx *ctx, void *arg) {
    int64_t n;
    char **names;
    tr_status st = tr_identifiers_read(ctx, (const char *)arg, &n, &names);
    if (st == TR_OK) tr_identifiers_free(ctx, n, names);
    return st;
}

static void test_identifiers_read(void **state) {
    tr_ctx *ctx = new_ctx();
    char p[512];
    int64_t n;
    char **names;
    (void)state;
    snprintf(p, sizeof p, "%s/ids.json", g_tmp);
    write_text(p, "[\"<blank>\", \"a\\u00e9\", \"task|||t1|||0123456789\"]\n");
    assert_int_equal(tr_identifiers_read(ctx, p, &n, &names), TR_OK);
    assert_int_equal(n, 3);
    assert_string_equal(names[1], "a\xc3\xa9");
    assert_string_equal(names[2], "task|||t1|||0123456789");
    tr_identifiers_free(ctx, n, names);
    alloc_sweep(ctx, sweep_ids, p);
    write_text(p, "{\"a\": 1}");
    expect_error(ctx, tr_identifiers_read(ctx, p, &n, &names), TR_ERR_FORMAT, "expected a JSON list of names", p);
    assert_null(names);
    write_text(p, "[\"a\",\n 7]");
    expect_error(ctx, tr_identifiers_read(ctx, p, &n, &names), TR_ERR_FORMAT, ":2: entry 1 is not a string", p);
    write_text(p, "[\"a\",");
    expect_error(ctx, tr_identifiers_read(ctx, p, &n, &names), TR_ERR_FORMAT, "invalid JSON", p);
    snprintf(p, sizeof p, "%s/no-such-ids.json", g_tmp);
    assert_int_not_equal(tr_identifiers_read(ctx, p, &n, &names), TR_OK);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

/* ---- whole-file reader ------------------------------------------------------------------ */
static tr_status sweep_read_file(tr_ctx *ctx, void *arg) {
    char *d;
    size_t n;
    tr_status st = tr_read_file(ctx, (const char *)arg, &d, &n);
    if (st == TR_OK) tr_free(ctx, d);
    return st;
}

static void test_read_file(void **state) {
    tr_ctx *ctx = new_ctx();
    char p[512], big[10000], *d;
    size_t n, i;
    (void)state;
    snprintf(p, sizeof p, "%s/read.txt", g_tmp);
    for (i = 0; i < sizeof big - 1; i++) big[i] = (char)('a' + i % 26);
    big[sizeof big - 1] = 0;
    write_text(p, big);
    assert_int_equal(tr_read_file(ctx, p, &d, &n), TR_OK);
    assert_int_equal(n, sizeof big - 1);
    assert_int_equal(d[n], 0);
    assert_memory_equal(d, big, n);
    tr_free(ctx, d);
    tr_free(ctx, NULL);
    alloc_sweep(ctx, sweep_read_file, p);
    /* "-" is standard input */
    write_text(p, "from stdin\n");
    assert_non_null(freopen(p, "rb", stdin));
    assert_int_equal(tr_read_file(ctx, "-", &d, &n), TR_OK);
    assert_int_equal(n, 11);
    assert_string_equal(d, "from stdin\n");
    tr_free(ctx, d);
    /* an empty file */
    write_text(p, "");
    assert_int_equal(tr_read_file(ctx, p, &d, &n), TR_OK);
    assert_int_equal(n, 0);
    assert_string_equal(d, "");
    tr_free(ctx, d);
    snprintf(p, sizeof p, "%s/no-such-file.txt", g_tmp);
    expect_error(ctx, tr_read_file(ctx, p, &d, &n), TR_ERR_IO, "no-such-file.txt", "cannot open");
    assert_null(d);
    assert_int_equal(n, 0);
    expect_error(ctx, tr_read_file(ctx, NULL, &d, &n), TR_ERR_INVALID_ARG, "path is NULL", NULL);
    expect_error(ctx, tr_read_file(ctx, p, NULL, &n), TR_ERR_INVALID_ARG, "NULL", NULL);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

/* ---- ARC evaluation: votes, ranking, pass@K ---------------------------------------------- */
/* Three tasks: A (one test input, solution R = [[5,6,7],[8,9,1]]), B (two test inputs with
   solutions [[2,2]] and [[4],[4],[4]]), C (one test input, no solution). */
static const char *k_votes_tasks = "{\"A\": {\"train\": [{\"input\": [[1]], \"output\": [[2]]}], \"test\": [{\"input\": [[1, 2], [3, 4]], \"output\": [[5, 6, 7], [8, 9, 1]]}]},\n"
                                   " \"B\": {\"test\": [{\"input\": [[1]], \"output\": [[2, 2]]}, {\"input\": [[3]], \"output\": [[4], [4], [4]]}]},\n"
                                   " \"C\": {\"test\": [{\"input\": [[0, 1]]}]}}";

static tr_arc_grid mk_arc_grid(int h, int w, const int *cells) {
    tr_arc_grid g;
    int i;
    g.h = h, g.w = w;
    for (i = 0; i < h * w; i++) g.cells[i] = (uint8_t)cells[i];
    return g;
}

/* The submission as text (free it). */
static char *votes_submission(const tr_arc_votes *v) {
    char p[512];
    FILE *f;
    snprintf(p, sizeof p, "%s/submission.json", g_tmp);
    f = fopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(tr_arc_votes_fput_submission(f, v), 0);
    fclose(f);
    return tu_slurp(p, NULL);
}

static void expect_submission(const tr_arc_votes *v, const char *want) {
    char *got = votes_submission(v);
    assert_non_null(got);
    assert_string_equal(got, want);
    free(got);
}

/* A predictions-file line: a grid, an empty answer, the model's tokens (cropped), and each malformed
   case with the line named. */
static void test_arc_prediction_parse(void **state) {
    tr_ctx *ctx = new_ctx();
    tr_arc_prediction pr;
    char line[8192], big[400];
    size_t o;
    int i;
    static const struct {
        const char *line, *needle;
    } bad[] = {{"{\"puzzle\": \"a\", \"test_index\": 0, \"q_halt\": 1}", "need \"puzzle\""},
               {"{\"puzzle\": 3, \"test_index\": 0, \"q_halt\": 1, \"grid\": [[1]]}", "need \"puzzle\""},
               {"{\"puzzle\": \"a\", \"test_index\": 0.5, \"q_halt\": 1, \"grid\": [[1]]}", "need \"puzzle\""},
               {"{\"puzzle\": \"a\", \"test_index\": 0, \"q_halt\": 1, \"tokens\": [1, 2]}", "\"tokens\" must be a list of 900"},
               {"{\"puzzle\": \"a\", \"test_index\": 0, \"q_halt\": 1, \"grid\": [[1, 2], [3]]}", "preds:7"},
               {"[1, 2", "preds:7"}};
    (void)state;
    snprintf(line, sizeof line, "{\"puzzle\": \"t|||t1|||0123456789\", \"test_index\": 1, \"q_halt\": -2.5, \"grid\": [[1, 2], [3, 4]]}");
    expect_error(ctx, tr_arc_prediction_parse(ctx, line, strlen(line), "preds:1", &pr), TR_OK, NULL, NULL);
    assert_string_equal(pr.puzzle, "t|||t1|||0123456789");
    assert_int_equal(pr.test_index, 1);
    assert_true(pr.q_halt == -2.5);
    assert_int_equal(pr.grid.h, 2);
    assert_int_equal(pr.grid.w, 2);
    assert_int_equal(pr.grid.cells[3], 4);
    snprintf(line, sizeof line, "{\"puzzle\": \"t\", \"test_index\": 5000000, \"q_halt\": 0, \"grid\": []}");
    assert_int_equal(tr_arc_prediction_parse(ctx, line, strlen(line), "p", &pr), TR_OK);
    assert_int_equal(pr.grid.h, 0);
    assert_int_equal(pr.test_index, -1);
    /* tokens: colours 3, 4 on the first row, then EOS: a 1 x 2 answer */
    o = (size_t)snprintf(line, sizeof line, "{\"puzzle\": \"t\", \"test_index\": 0, \"q_halt\": 0, \"tokens\": [5, 6, 1");
    for (i = 3; i < 900; i++) o += (size_t)snprintf(line + o, sizeof line - o, ", 0");
    o += (size_t)snprintf(line + o, sizeof line - o, "]}");
    assert_int_equal(tr_arc_prediction_parse(ctx, line, o, "p", &pr), TR_OK);
    assert_int_equal(pr.grid.h, 1);
    assert_int_equal(pr.grid.w, 2);
    assert_int_equal(pr.grid.cells[0], 3);
    memcpy(line + o - 3, "7]}", 3); /* the last token 7: in range */
    assert_int_equal(tr_arc_prediction_parse(ctx, line, o, "p", &pr), TR_OK);
    o += (size_t)snprintf(line + o - 2, sizeof line - o + 2, "56]}") - 2; /* ... 756: not an id */
    expect_error(ctx, tr_arc_prediction_parse(ctx, line, o, "p", &pr), TR_ERR_FORMAT, "token 899 is not an id 0..255", NULL);
    for (i = 0; i < (int)(sizeof bad / sizeof *bad); i++) expect_error(ctx, tr_arc_prediction_parse(ctx, bad[i].line, strlen(bad[i].line), "preds:7", &pr), TR_ERR_FORMAT, bad[i].needle, "preds:7");
    memset(big, 'x', sizeof big - 1), big[sizeof big - 1] = 0;
    o = (size_t)snprintf(line, sizeof line, "{\"puzzle\": \"%s\", \"test_index\": 0, \"q_halt\": 0, \"grid\": [[1]]}", big);
    expect_error(ctx, tr_arc_prediction_parse(ctx, line, o, "p", &pr), TR_ERR_FORMAT, "longer than 255 bytes", NULL);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

static void test_arc_votes(void **state) {
    static const int r_c[] = {5, 6, 7, 8, 9, 1}, w_c[] = {5, 6, 7, 8, 9, 2}, b0_c[] = {2, 2}, b1_c[] = {4, 4, 4}, bad_c[] = {4, 4}, in_c[] = {1, 2, 3, 4}, x_c[] = {7};
    uint8_t perm[10] = {0, 9, 8, 7, 6, 5, 4, 3, 2, 1};
    tr_arc_grid R = mk_arc_grid(2, 3, r_c), W = mk_arc_grid(2, 3, w_c), B0 = mk_arc_grid(1, 2, b0_c), B1 = mk_arc_grid(3, 1, b1_c), BAD = mk_arc_grid(2, 1, bad_c);
    tr_arc_grid IN = mk_arc_grid(2, 2, in_c), X = mk_arc_grid(1, 1, x_c), aug, aug_in, g, empty;
    tr_ctx *ctx = new_ctx();
    tr_arc_votes *v = NULL;
    const int ks[3] = {1, 2, 5};
    double pass[3], all[3], q;
    int64_t count;
    (void)state;
    empty.h = empty.w = 0;
    assert_int_equal(tr_arc_votes_create(ctx, k_votes_tasks, strlen(k_votes_tasks), "tp.json", &v), TR_OK);
    assert_int_equal(v->num_tasks, 3);
    assert_string_equal(v->tasks[1].name, "B");
    assert_int_equal(v->tasks[1].num_test, 2);
    assert_int_equal(v->tasks[0].tests[0].input.h, 2);
    assert_int_equal(v->tasks[0].tests[0].output.w, 3);
    assert_int_equal(v->tasks[2].tests[0].output.h, 0); /* no solution */
    assert_true(v->tasks[0].scored && v->tasks[2].scored);
    assert_int_equal(tr_arc_votes_find(v, "C"), 2);
    assert_int_equal(tr_arc_votes_find(v, "D"), -1);
    /* before rank: no answers, no score */
    assert_int_equal(tr_arc_votes_answer(v, 0, 0, 0, &g, NULL, NULL), 0);
    expect_error(ctx, tr_arc_votes_score(v, ks, 3, pass, all), TR_ERR_INVALID_ARG, "tr_arc_votes_rank", NULL);
    /* A: W twice at q 0 (first, so that a first-seen tie break would pick it), R twice at q 2, once
       through rot90 and the colour map c -> 10 - c: R wins only if that one is inverted */
    assert_int_equal(tr_arc_votes_add(v, "A", 0, &W, 0.0, NULL, "l1"), TR_OK);
    assert_int_equal(tr_arc_votes_add(v, "A", 0, &W, 0.0, NULL, "l2"), TR_OK);
    tr_arc_augment(1, perm, R.cells, R.h, R.w, aug.cells, &aug.h, &aug.w);
    tr_arc_augment(1, perm, IN.cells, IN.h, IN.w, aug_in.cells, &aug_in.h, &aug_in.w);
    assert_int_equal(aug.h, 3);
    assert_int_equal(tr_arc_votes_add(v, "A|||t1|||0987654321", 0, &aug, 2.0, &aug_in, "l3"), TR_OK);
    assert_int_equal(tr_arc_votes_add(v, "A", 0, &R, 2.0, &aug_in, "l4"), TR_OK); /* that input does not map back */
    assert_int_equal(v->inputs_checked, 2);
    assert_int_equal(v->inputs_mismatched, 1);
    /* B input 0: right 3 times at q -1, wrong once at q 3; input 1: two answers with equal votes and
       q (the first seen wins), the right one second */
    assert_int_equal(tr_arc_votes_add(v, "B", 0, &B0, -1.0, NULL, NULL), TR_OK);
    assert_int_equal(tr_arc_votes_add(v, "B", 0, &BAD, 3.0, NULL, NULL), TR_OK);
    assert_int_equal(tr_arc_votes_add(v, "B", 0, &B0, -1.0, NULL, NULL), TR_OK);
    assert_int_equal(tr_arc_votes_add(v, "B", 0, &B0, -1.0, NULL, NULL), TR_OK);
    assert_int_equal(tr_arc_votes_add(v, "B", 1, &BAD, 0.5, NULL, NULL), TR_OK);
    assert_int_equal(tr_arc_votes_add(v, "B", 1, &B1, 0.5, NULL, NULL), TR_OK);
    /* C: an empty prediction and X */
    assert_int_equal(tr_arc_votes_add(v, "C", 0, &empty, 0.0, NULL, NULL), TR_OK);
    assert_int_equal(tr_arc_votes_add(v, "C", 0, &X, 1.0, NULL, NULL), TR_OK);
    assert_int_equal(v->predictions, 12);
    assert_int_equal(v->num_answers, 8);
    assert_int_equal(v->tasks[0].tests[0].num_answers, 2);
    /* errors name `where` */
    expect_error(ctx, tr_arc_votes_add(v, "A|||t9|||0123456789", 0, &R, 0, NULL, "p.jsonl:7"), TR_ERR_FORMAT, "p.jsonl:7: puzzle name 'A|||t9|||0123456789'",
                 "expected <task>");
    expect_error(ctx, tr_arc_votes_add(v, "Z", 0, &R, 0, NULL, "p.jsonl:8"), TR_ERR_FORMAT, "p.jsonl:8: task 'Z' is not in test_puzzles.json", NULL);
    expect_error(ctx, tr_arc_votes_add(v, "B", 2, &R, 0, NULL, "p.jsonl:9"), TR_ERR_FORMAT, "p.jsonl:9: task 'B' has 2 test inputs, not index 2", NULL);
    expect_error(ctx, tr_arc_votes_add(v, "B", -1, &R, 0, NULL, "p.jsonl:9"), TR_ERR_FORMAT, "not index -1", NULL);
    expect_error(ctx, tr_arc_votes_add(v, NULL, 0, &R, 0, NULL, NULL), TR_ERR_INVALID_ARG, "NULL", NULL);
    g.h = 31, g.w = 1;
    expect_error(ctx, tr_arc_votes_add(v, "A", 0, &g, 0, NULL, NULL), TR_ERR_INVALID_ARG, "larger than 30x30", NULL);
    expect_error(ctx, tr_arc_votes_add(v, "A", 0, &R, 0, &g, NULL), TR_ERR_INVALID_ARG, "larger than 30x30", NULL);
    assert_int_equal(v->predictions, 12);
    tr_arc_votes_rank(v);
    /* A: R first (tie on votes broken by the mean q), W second */
    assert_int_equal(v->tasks[0].tests[0].right, 0);
    assert_int_equal(tr_arc_votes_answer(v, 0, 0, 0, &g, &count, &q), 1);
    assert_int_equal(g.h, 2);
    assert_memory_equal(g.cells, R.cells, 6);
    assert_int_equal(count, 2);
    assert_true(fabs(q - 1.0 / (1.0 + exp(-2.0))) < 1e-12);
    assert_int_equal(tr_arc_votes_answer(v, 0, 0, 1, &g, &count, &q), 1);
    assert_memory_equal(g.cells, W.cells, 6);
    assert_true(fabs(q - 0.5) < 1e-12);
    assert_int_equal(tr_arc_votes_answer(v, 0, 0, 2, &g, NULL, NULL), 0);
    assert_int_equal(tr_arc_votes_answer(v, 3, 0, 0, &g, NULL, NULL), 0);
    /* B: input 0 right at rank 0 (votes beat q), input 1 right at rank 1 (first seen wins the tie) */
    assert_int_equal(v->tasks[1].tests[0].right, 0);
    assert_int_equal(v->tasks[1].tests[1].right, 1);
    assert_int_equal(tr_arc_votes_answer(v, 1, 1, 0, &g, NULL, NULL), 1);
    assert_int_equal(g.h, 2);
    /* C: no solution; X (higher q) before the empty answer */
    assert_int_equal(v->tasks[2].tests[0].right, -1);
    assert_int_equal(tr_arc_votes_answer(v, 2, 0, 0, &g, NULL, NULL), 1);
    assert_int_equal(g.cells[0], 7);
    assert_int_equal(tr_arc_votes_answer(v, 2, 0, 1, &g, NULL, NULL), 1);
    assert_int_equal(g.h, 0);
    /* pass@K: A 1 at every K; B 0.5 at K 1, then 1; C 0. all-inputs: B counts from K 2 */
    assert_int_equal(tr_arc_votes_score(v, ks, 3, pass, all), TR_OK);
    assert_true(fabs(pass[0] - 1.5 / 3) < 1e-12 && fabs(pass[1] - 2.0 / 3) < 1e-12 && fabs(pass[2] - 2.0 / 3) < 1e-12);
    assert_true(fabs(all[0] - 1.0 / 3) < 1e-12 && fabs(all[1] - 2.0 / 3) < 1e-12);
    assert_int_equal(tr_arc_votes_score(v, ks, 3, pass, NULL), TR_OK);
    expect_submission(v, "{\n  \"A\": [{\"attempt_1\": [[5, 6, 7], [8, 9, 1]], \"attempt_2\": [[5, 6, 7], [8, 9, 2]]}],\n"
                         "  \"B\": [{\"attempt_1\": [[2, 2]], \"attempt_2\": [[4], [4]]}, {\"attempt_1\": [[4], [4]], \"attempt_2\": [[4], [4], [4]]}],\n"
                         "  \"C\": [{\"attempt_1\": [[7]], \"attempt_2\": []}]\n}\n");
    /* ranked: no more votes */
    expect_error(ctx, tr_arc_votes_add(v, "A", 0, &R, 0, NULL, NULL), TR_ERR_INVALID_ARG, "already ranked", NULL);
    tr_arc_votes_destroy(v);

    /* only A scored: the others' predictions are ignored; unanswered inputs get [[0]] twice */
    assert_int_equal(tr_arc_votes_create(ctx, k_votes_tasks, strlen(k_votes_tasks), NULL, &v), TR_OK);
    v->tasks[1].scored = v->tasks[2].scored = 0;
    assert_int_equal(tr_arc_votes_add(v, "B", 0, &B0, 0, &IN, NULL), TR_OK);
    assert_int_equal(v->ignored, 1);
    assert_int_equal(v->predictions, 0);
    assert_int_equal(v->inputs_mismatched, 1); /* checked even when not scored */
    tr_arc_votes_rank(v);
    assert_int_equal(tr_arc_votes_score(v, ks, 3, pass, all), TR_OK);
    assert_true(pass[0] == 0 && all[2] == 0);
    expect_submission(v, "{\n  \"A\": [{\"attempt_1\": [[0]], \"attempt_2\": [[0]]}]\n}\n");
    v->tasks[0].scored = 0;
    expect_submission(v, "{}\n");
    assert_int_equal(tr_arc_votes_score(v, ks, 3, pass, all), TR_OK);
    assert_true(pass[0] == 0);
    tr_arc_votes_destroy(v);
    tr_arc_votes_destroy(NULL);

    /* a bad test_puzzles.json: the reason names the file and the task */
    {
        static const struct {
            const char *text, *needle;
        } bad[] = {
            {"[1]", "tp.json: expected an object of tasks"},
            {"{\"a\": ", "tp.json: invalid JSON"},
            {"{\"a\": {\"test\": [{\"input\": [[1]], \"output\": [[1, 2], [3]]}]}}", "tp.json:1: task 'a': test[0].output: row 1 has 1 cells"},
            {"{\"a\": {\"train\": [{\"input\": [[1]], \"output\": [[1]]}], \"test\": []}}", "tp.json:1: task 'a' has no \"test\" list"},
            {"{\"a\": 3}", "tp.json:1: task 'a': expected an object"},
        };
        size_t i;
        for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            v = (tr_arc_votes *)&v; /* set to NULL on failure */
            expect_error(ctx, tr_arc_votes_create(ctx, bad[i].text, strlen(bad[i].text), "tp.json", &v), TR_ERR_FORMAT, bad[i].needle, NULL);
            assert_null(v);
        }
        expect_error(ctx, tr_arc_votes_create(ctx, NULL, 0, "tp.json", &v), TR_ERR_INVALID_ARG, "NULL", NULL);
    }
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

/* The fuzz finding of issue 44: a test_puzzles.json whose first task is named by 1,030 bytes. The
   reason starts with the file (and the task's line), quotes the name abbreviated with its length, and
   stays one short line, whatever the name holds (control bytes and quotes are escaped). */
static void test_arc_votes_long_task_name(void **state) {
    static const char path[] = "tests/fuzz/regress_predictions/long-task-name-quoted-before-file";
    tr_ctx *ctx;
    tr_arc_votes *v = NULL;
    size_t n, i;
    char *text = tu_slurp(path, &n), *sep, name[200], json[400];
    const char *e;
    (void)state;
    assert_non_null(text);
    assert_int_equal(tr_ctx_create(NULL, &ctx), TR_OK);
    sep = strstr(text, "\n@@@\n"); /* the fuzz target's separator before prediction lines */
    assert_int_not_equal(tr_arc_votes_create(ctx, text, sep ? (size_t)(sep - text) : n, path, &v), TR_OK);
    assert_null(v);
    e = tr_ctx_last_error(ctx);
    if (strncmp(e, path, strlen(path)) != 0 || strchr(e, '\n') || strlen(e) > 300 || !strstr(e, ": task '6 0, 0, 0, ") || !strstr(e, "...' ("))
        fail_msg("reason: %s", e);
    /* a name with a newline, a quote and a backslash, long: escaped, cut, its length given */
    for (i = 0; i < 120; i++) name[i] = (char)('a' + i % 26);
    name[3] = '\n', name[5] = '\'', name[7] = '\\';
    for (i = 0, n = 0, json[n++] = '{', json[n++] = '"'; i < 120; i++) {
        if (name[i] == '\n' || name[i] == '\\') json[n++] = '\\';
        json[n++] = name[i] == '\n' ? 'n' : name[i];
    }
    snprintf(json + n, sizeof json - n, "\": 3}");
    assert_int_equal(tr_arc_votes_create(ctx, json, strlen(json), "tp.json", &v), TR_ERR_FORMAT);
    expect_error(ctx, TR_ERR_FORMAT, TR_ERR_FORMAT, "tp.json:1: task 'abc\\ne\\'g\\\\ijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzab...' (120 bytes): expected an object", NULL);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
    free(text);
}

/* Create, enough distinct answers to grow every table (candidates, hash slots, the cell arena),
   rank and score: each allocation failure is an error that leaves nothing behind. */
static tr_status sweep_votes(tr_ctx *ctx, void *arg) {
    tr_arc_votes *v = NULL;
    tr_arc_grid g;
    tr_status st;
    int i, k = 1;
    double pass;
    (void)arg;
    if ((st = tr_arc_votes_create(ctx, k_votes_tasks, strlen(k_votes_tasks), "tp.json", &v)) != TR_OK) return st;
    for (i = 0; i < 700 && st == TR_OK; i++) {
        int n = i < 100 ? 30 : 2;
        memset(g.cells, 0, sizeof g.cells);
        g.h = n, g.w = n, g.cells[0] = (uint8_t)(i % 10), g.cells[1] = (uint8_t)(i / 10 % 10), g.cells[2] = (uint8_t)(i / 100);
        st = tr_arc_votes_add(v, i % 2 ? "B" : "A|||t3|||0123456789", i % 2 ? i / 2 % 2 : 0, &g, 0.1 * i, NULL, NULL);
        if (st == TR_OK && i % 7 == 0) st = tr_arc_votes_add(v, i % 2 ? "B" : "A|||t3|||0123456789", i % 2 ? i / 2 % 2 : 0, &g, 0, NULL, NULL);
    }
    if (st == TR_OK) {
        assert_int_equal(v->num_answers, 700);
        tr_arc_votes_rank(v);
        st = tr_arc_votes_score(v, &k, 1, &pass, NULL);
    }
    tr_arc_votes_destroy(v);
    return st;
}

static void test_arc_votes_alloc_failures(void **state) {
    tr_ctx *ctx = new_ctx();
    (void)state;
    alloc_sweep(ctx, sweep_votes, NULL);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

static void test_dihedral(void **state) {
    uint8_t g[12], t[12], back[12];
    int tid, i, h, w, h2, w2;
    /* numpy: rot90([[0,1,2],[3,4,5]]) = [[2,5],[1,4],[0,3]] */
    static const uint8_t rot90[6] = {2, 5, 1, 4, 0, 3}, anti[6] = {5, 2, 4, 1, 3, 0};
    (void)state;
    for (i = 0; i < 6; i++) g[i] = (uint8_t)i;
    tr_dihedral(1, g, 2, 3, t, &h, &w);
    assert_int_equal(h, 3);
    assert_int_equal(w, 2);
    assert_memory_equal(t, rot90, 6);
    tr_dihedral(7, g, 2, 3, t, &h, &w);
    assert_memory_equal(t, anti, 6);
    for (tid = 0; tid < 8; tid++) {
        tr_dihedral(tid, g, 2, 3, t, &h, &w);
        tr_dihedral_inverse(tid, t, h, w, back, &h2, &w2);
        assert_int_equal(h2, 2);
        assert_int_equal(w2, 3);
        assert_memory_equal(back, g, 6);
    }
}

static void test_arc_inverse_real_tasks(void **state) {
    tr_ctx *ctx = new_ctx();
    const char *sub[2] = {"training", "evaluation"};
    tr__rng rng = tr__rng_make(1, 2);
    int si, checked = 0;
    (void)state;
    if (!arc_available()) {
        tr_ctx_destroy(ctx);
        skip();
    }
    for (si = 0; si < 2; si++) {
        char dir[256], **files = NULL;
        int nf = 0, f;
        snprintf(dir, sizeof dir, "%s/%s", ARC1, sub[si]);
        assert_int_equal(tr__list_dir(ctx, dir, ".json", &files, &nf), TR_OK);
        for (f = 0; f < nf; f += 8) { /* a sample: every 8th task */
            tr_arc_task t;
            char path[512], *text;
            size_t len;
            int k;
            snprintf(path, sizeof path, "%s/%s", dir, files[f]);
            assert_int_equal(tr_read_file(ctx, path, &text, &len), TR_OK);
            assert_int_equal(tr_arc_task_parse(ctx, text, len, path, &t), TR_OK);
            tr__free(ctx, text);
            for (k = 0; k < 2 * (t.num_train + t.num_test); k++) {
                const tr_arc_grid *g = k & 1 ? &t.pairs[k / 2].output : &t.pairs[k / 2].input;
                if (g->h == 0) continue; /* a test pair without its output */
                int tid, pi;
                for (tid = 0; tid < 8; tid++)
                    for (pi = 0; pi < 3; pi++) {
                        uint8_t perm[10], a[900], b[900], name_perm[10];
                        int h, w, h2, w2, i, tid2;
                        char name[256], base[160];
                        perm[0] = 0;
                        for (i = 1; i < 10; i++) perm[i] = (uint8_t)i;
                        if (pi) tr__shuffle_u8(&rng, perm + 1, 9);
                        tr_arc_augment(tid, perm, g->cells, g->h, g->w, a, &h, &w);
                        tr_arc_inverse_augment(tid, perm, a, h, w, b, &h2, &w2);
                        assert_int_equal(h2, g->h);
                        assert_int_equal(w2, g->w);
                        assert_memory_equal(b, g->cells, (size_t)(g->h * g->w));
                        /* the name carries the same transform */
                        snprintf(name, sizeof name, "%s|||t%d|||", files[f], tid);
                        for (i = 0; i < 10; i++) name[strlen(name) + 1] = 0, name[strlen(name)] = (char)('0' + perm[i]);
                        assert_int_equal(tr_arc_parse_name(ctx, name, base, sizeof base, &tid2, name_perm), TR_OK);
                        assert_int_equal(tid2, tid);
                        assert_memory_equal(name_perm, perm, 10);
                        checked++;
                    }
            }
            tr_arc_task_free(ctx, &t);
        }
        tr__free_list(ctx, files, nf);
    }
    assert_true(checked > 1000);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

static void test_arc_encode_crop(void **state) {
    uint8_t g[6] = {0, 1, 2, 3, 4, 5}, canvas[900], back[900];
    int32_t tok[900];
    int i, h, w;
    (void)state;
    tr_arc_encode(g, 2, 3, 0, 0, canvas);
    assert_int_equal(canvas[0], 2);
    assert_int_equal(canvas[3], 1);      /* EOS column right of row 0 */
    assert_int_equal(canvas[60], 1);     /* EOS row below, column 0 */
    assert_int_equal(canvas[63], 0);     /* the corner stays pad */
    for (i = 0; i < 900; i++) tok[i] = canvas[i];
    assert_true(tr_arc_crop(tok, back, &h, &w));
    assert_int_equal(h, 2);
    assert_int_equal(w, 3);
    assert_memory_equal(back, g, 6);
    tr_arc_encode(g, 2, 3, 28, 27, canvas); /* at the border: no EOS outside the canvas */
    assert_int_equal(canvas[28 * 30 + 27], 2);
    assert_int_equal(canvas[29 * 30 + 29], 7);
}

static void test_arc_build(void **state) {
    tr_ctx *ctx = new_ctx();
    tr_arc_options o = tr_arc_options_default();
    const char *dirs[1] = {ARC1};
    char d1[512], d2[512], p1[600], p2[600];
    tr_build_summary sum;
    tr_dataset *tr, *te;
    int i;
    int64_t e, p;
    (void)state;
    if (!arc_available()) {
        tr_ctx_destroy(ctx);
        skip();
    }
    o.input_dirs = dirs;
    o.num_input_dirs = 1;
    o.num_aug = 2;
    snprintf(d1, sizeof d1, "%s/arc1", g_tmp);
    snprintf(d2, sizeof d2, "%s/arc2", g_tmp);
    assert_int_equal(tr_arc_build(ctx, &o, d1, &sum), TR_OK);
    assert_int_equal(sum.groups[0], 800); /* every task has a train group */
    assert_int_equal(sum.groups[1], 400); /* evaluation test pairs */
    assert_int_equal(sum.num_identifiers, 1 + 800 * 3);
    assert_int_equal(tr_arc_build(ctx, &o, d2, NULL), TR_OK);
    for (i = 0; i < 4; i++) {
        static const char *f[4] = {"train/all__inputs.npy", "test/all__labels.npy", "identifiers.json", "test_puzzles.json"};
        snprintf(p1, sizeof p1, "%s/%s", d1, f[i]);
        snprintf(p2, sizeof p2, "%s/%s", d2, f[i]);
        assert_true(same_file(p1, p2));
    }
    assert_int_equal(tr_dataset_open(ctx, d1, "train", 0, &tr), TR_OK);
    assert_int_equal(tr_dataset_open(ctx, d1, "test", 0, &te), TR_OK);
    assert_int_equal(tr->meta.vocab_size, 12);
    assert_int_equal(tr->meta.seq_len, 900);
    assert_int_equal(tr->num_identifiers, sum.num_identifiers);
    assert_string_equal(tr->identifiers[0], "<blank>");
    /* every test puzzle id names a version whose demos are in train (shared ids) */
    for (p = 0; p < te->sets[0].num_puzzles; p++) {
        int32_t id = te->sets[0].puzzle_identifiers[p];
        int64_t q;
        int found = 0;
        for (q = 0; q < tr->sets[0].num_puzzles && !found; q++) found = tr->sets[0].puzzle_identifiers[q] == id;
        assert_true(found);
    }
    /* each example decodes to a grid; the test split is never translated */
    for (e = 0; e < te->sets[0].num_examples; e += 7) {
        int32_t in[900], lab[900];
        uint8_t g[900];
        int h, w;
        tr_dataset_example(te, 0, e, in, lab);
        assert_true(tr_arc_crop(in, g, &h, &w));
        assert_true(in[0] >= 2);
    }
    /* the shared ids and names: a version name parses back to the task and transform */
    {
        char base[64];
        int tid;
        uint8_t perm[10];
        const char *nm = tr->identifiers[2];
        assert_non_null(strstr(nm, "|||t"));
        assert_int_equal(tr_arc_parse_name(ctx, nm, base, sizeof base, &tid, perm), TR_OK);
        assert_string_equal(base, tr->identifiers[1]);
    }
    tr_dataset_close(tr);
    tr_dataset_close(te);
    /* a 31x31 grid and a broken task file are rejected with the file and the field */
    {
        char dir[512], path[600], text[8192];
        const char *bd[1];
        size_t o2 = 0;
        int r, c;
        snprintf(dir, sizeof dir, "%s/arcbad/training", g_tmp);
        snprintf(text, sizeof text, "mkdir -p %s", dir);
        assert_int_equal(system(text), 0);
        snprintf(path, sizeof path, "%s/big.json", dir);
        o2 += (size_t)snprintf(text + o2, sizeof text - o2, "{\"train\": [{\"input\": [[1]], \"output\": [[2]]}], \"test\": [{\"input\": [");
        for (r = 0; r < 31; r++) {
            o2 += (size_t)snprintf(text + o2, sizeof text - o2, "%s[", r ? "," : "");
            for (c = 0; c < 31; c++) o2 += (size_t)snprintf(text + o2, sizeof text - o2, "%s0", c ? "," : "");
            o2 += (size_t)snprintf(text + o2, sizeof text - o2, "]");
        }
        snprintf(text + o2, sizeof text - o2, "], \"output\": [[1]]}]}");
        write_text(path, text);
        bd[0] = dir;
        o.input_dirs = bd;
        snprintf(d2, sizeof d2, "%s/arcbad_out", g_tmp);
        expect_error(ctx, tr_arc_build(ctx, &o, d2, NULL), TR_ERR_FORMAT, "test[0].input: the grid is 31x31", "big.json");
        write_text(path, "{\"train\": [{\"input\": [[1, 2], [3]], \"output\": [[2]]}], \"test\": []}");
        expect_error(ctx, tr_arc_build(ctx, &o, d2, NULL), TR_ERR_FORMAT, "train[0].input: row 1 has 1 cells", NULL);
        write_text(path, "{\"train\": [{\"input\": [[1, 12]], \"output\": [[2]]}], \"test\": []}");
        expect_error(ctx, tr_arc_build(ctx, &o, d2, NULL), TR_ERR_FORMAT, "cell (0, 1) is not a colour", NULL);
        write_text(path, "{\"train\": [{\"input\": [[1]], \"output\": [[2]]}], \"test\": [");
        expect_error(ctx, tr_arc_build(ctx, &o, d2, NULL), TR_ERR_FORMAT, "big.json", NULL);
    }
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

/* ---- sampler ---------------------------------------------------------------------------- */
static uint64_t hash_batch(uint64_t h, const tr_batch *b, int L) {
    size_t i, n = (size_t)b->batch_size * (size_t)L;
    for (i = 0; i < n; i++) h = (h ^ (uint32_t)b->inputs[i]) * 0x100000001b3ull, h = (h ^ (uint32_t)b->labels[i]) * 0x100000001b3ull;
    for (i = 0; i < (size_t)b->batch_size; i++) h = (h ^ (uint32_t)b->puzzle_identifiers[i]) * 0x100000001b3ull;
    return h;
}

static void test_sampler_train(void **state) {
    tr_ctx *ctx = new_ctx();
    tr_sudoku_options o = tr_sudoku_options_default();
    char dir[512];
    tr_dataset *ds;
    uint64_t ref = 0;
    int pf, k;
    (void)state;
    o.generate_train = 50, o.generate_test = 30, o.num_aug = 3, o.clues = 35, o.seed = 1;
    snprintf(dir, sizeof dir, "%s/samp", g_tmp);
    assert_int_equal(tr_sudoku_build(ctx, &o, dir, NULL), TR_OK);
    assert_int_equal(tr_dataset_open(ctx, dir, "train", 0, &ds), TR_OK);
    for (pf = 0; pf <= 3; pf++) { /* prefetch off and on: the same batches */
        tr_sampler_config c = tr_sampler_config_default();
        tr_sampler *s;
        uint64_t h = 1469598103934665603ull;
        c.global_batch_size = 16, c.seed = 9, c.prefetch = pf;
        assert_int_equal(tr_sampler_create(ctx, ds, &c, &s), TR_OK);
        for (k = 0; k < 40; k++) {
            tr_batch b;
            tr_batch_info info;
            int r, r2;
            assert_int_equal(tr_sampler_next(s, &b, &info), TR_OK);
            assert_int_equal(b.batch_size, 16);
            assert_int_equal(info.effective_size, 16);
            /* 50 groups / 16 = 3 full batches per epoch, the rest dropped */
            assert_int_equal(info.pass, k / 3);
            assert_int_equal(info.index, k % 3);
            /* one augmentation per group: 16 distinct groups (= distinct solutions up to augmentation, so check ids by example) */
            for (r = 0; r < 16; r++)
                for (r2 = r + 1; r2 < 16; r2++) assert_memory_not_equal(b.labels + r * 81, b.labels + r2 * 81, 81 * 4);
            h = hash_batch(h, &b, 81);
        }
        if (pf == 0) ref = h;
        else assert_true(h == ref);
        tr_sampler_destroy(s);
    }
    /* exact resume from a saved state, with and without prefetch */
    for (pf = 0; pf <= 2; pf += 2) {
        tr_sampler_config c = tr_sampler_config_default();
        tr_sampler *a, *b2;
        tr_sampler_state st;
        tr_batch x, y;
        c.global_batch_size = 16, c.seed = 9, c.prefetch = pf;
        assert_int_equal(tr_sampler_create(ctx, ds, &c, &a), TR_OK);
        assert_int_equal(tr_sampler_create(ctx, ds, &c, &b2), TR_OK);
        for (k = 0; k < 7; k++) assert_int_equal(tr_sampler_next(a, &x, NULL), TR_OK);
        tr_sampler_get_state(a, &st);
        assert_int_equal(tr_sampler_set_state(b2, &st), TR_OK);
        for (k = 0; k < 10; k++) {
            uint64_t h1, h2;
            assert_int_equal(tr_sampler_next(a, &x, NULL), TR_OK);
            assert_int_equal(tr_sampler_next(b2, &y, NULL), TR_OK);
            h1 = hash_batch(1, &x, 81);
            h2 = hash_batch(1, &y, 81);
            assert_true(h1 == h2);
        }
        st.w[6] ^= 1; /* another seed */
        expect_error(ctx, tr_sampler_set_state(b2, &st), TR_ERR_INVALID_ARG, "seed", NULL);
        tr_sampler_destroy(a);
        tr_sampler_destroy(b2);
    }
    {
        tr_sampler_config c = tr_sampler_config_default();
        tr_sampler *s;
        c.global_batch_size = 51;
        expect_error(ctx, tr_sampler_create(ctx, ds, &c, &s), TR_ERR_CONFIG, "fewer than global_batch_size", NULL);
        c.global_batch_size = 10, c.num_replicas = 3;
        expect_error(ctx, tr_sampler_create(ctx, ds, &c, &s), TR_ERR_CONFIG, "multiple of num_replicas", NULL);
    }
    tr_dataset_close(ds);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

static void test_sampler_test_mode(void **state) {
    tr_ctx *ctx = new_ctx();
    char dir[512];
    tr_dataset *ds;
    int pf;
    (void)state;
    snprintf(dir, sizeof dir, "%s/samp", g_tmp); /* built by test_sampler_train: 30 test examples */
    assert_int_equal(tr_dataset_open(ctx, dir, "test", 0, &ds), TR_OK);
    for (pf = 0; pf <= 2; pf += 2) {
        tr_sampler_config c = tr_sampler_config_default();
        tr_sampler *s;
        int64_t seen = 0, pass;
        c.global_batch_size = 8, c.test_mode = 1, c.prefetch = pf;
        assert_int_equal(tr_sampler_create(ctx, ds, &c, &s), TR_OK);
        assert_int_equal(tr_sampler_batches_per_pass(s), 4);
        for (pass = 0; pass < 2; pass++) {
            seen = 0;
            for (;;) {
                tr_batch b;
                tr_batch_info info;
                int r, j;
                assert_int_equal(tr_sampler_next(s, &b, &info), TR_OK);
                assert_int_equal(info.pass, pass);
                if (info.end) break;
                for (r = 0; r < 8; r++) {
                    int32_t in[81], lab[81];
                    if (seen + r < 30) {
                        tr_dataset_example(ds, 0, seen + r, in, lab);
                        assert_memory_equal(b.inputs + r * 81, in, sizeof in);
                        assert_memory_equal(b.labels + r * 81, lab, sizeof lab);
                    } else { /* padding: inputs pad, labels ignored, blank puzzle */
                        for (j = 0; j < 81; j++) {
                            assert_int_equal(b.inputs[r * 81 + j], 0);
                            assert_int_equal(b.labels[r * 81 + j], TR_IGNORE_LABEL);
                        }
                        assert_int_equal(b.puzzle_identifiers[r], 0);
                    }
                }
                assert_int_equal(info.effective_size, seen + 8 <= 30 ? 8 : 30 - seen);
                seen += info.effective_size;
            }
            assert_int_equal(seen, 30);
        }
        tr_sampler_destroy(s);
    }
    tr_dataset_close(ds);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

/* Puzzles with several examples (the ARC shape): examples of one puzzle are distinct, batches are cut
   at exactly the batch size, ranks take disjoint slices of the same global batch. */
static void test_sampler_multi_example(void **state) {
    tr_ctx *ctx = new_ctx();
    char dir[512];
    tr_dataset *ds = NULL;
    int k, r;
    tr_sampler_config c = tr_sampler_config_default();
    tr_sampler *all, *r0, *r1;
    (void)state;
    snprintf(dir, sizeof dir, "%s/small", g_tmp);
    write_small(ctx, dir);
    assert_int_equal(tr_dataset_open(ctx, dir, "train", 0, &ds), TR_OK);
    c.global_batch_size = 4, c.seed = 5, c.prefetch = 1;
    assert_int_equal(tr_sampler_create(ctx, ds, &c, &all), TR_OK);
    c.num_replicas = 2, c.rank = 0;
    assert_int_equal(tr_sampler_create(ctx, ds, &c, &r0), TR_OK);
    c.rank = 1, c.prefetch = 0;
    assert_int_equal(tr_sampler_create(ctx, ds, &c, &r1), TR_OK);
    for (k = 0; k < 30; k++) {
        tr_batch a, b0, b1;
        tr_batch_info ia;
        assert_int_equal(tr_sampler_next(all, &a, &ia), TR_OK);
        assert_int_equal(tr_sampler_next(r0, &b0, NULL), TR_OK);
        assert_int_equal(tr_sampler_next(r1, &b1, NULL), TR_OK);
        assert_int_equal(b0.batch_size, 2);
        assert_memory_equal(a.inputs, b0.inputs, 2 * 6 * 4);
        assert_memory_equal(a.inputs + 12, b1.inputs, 2 * 6 * 4);
        assert_memory_equal(a.puzzle_identifiers + 2, b1.puzzle_identifiers, 2 * 4);
        for (r = 0; r < 4; r++) {
            int r2;
            assert_true(a.puzzle_identifiers[r] >= 1 && a.puzzle_identifiers[r] <= 6);
            for (r2 = r + 1; r2 < 4; r2++) /* same puzzle: different examples */
                if (a.puzzle_identifiers[r] == a.puzzle_identifiers[r2]) assert_memory_not_equal(a.inputs + r * 6, a.inputs + r2 * 6, 24);
        }
        assert_true(ia.epoch > 0);
    }
    tr_sampler_destroy(all);
    tr_sampler_destroy(r0);
    tr_sampler_destroy(r1);
    tr_dataset_close(ds);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

/* numpy reads what we write: bytes identical to numpy.save, dataset.json identical to json.dump. */
static void test_numpy_reads_ours(void **state) {
    const char *py = python_numpy();
    char cmd[2048];
    (void)state;
    if (!py) {
        /* CI sets TINYREC_REQUIRE_NUMPY=1 (it installs python3-numpy): there the check must run */
        if (getenv("TINYREC_REQUIRE_NUMPY")) fail_msg("python3 with numpy not found, and TINYREC_REQUIRE_NUMPY is set");
        print_message("python3 with numpy not found: numpy compatibility skipped\n");
        skip();
    }
    snprintf(cmd, sizeof cmd, "%s tools/check_npy.py check %s/sud1 %s/maze1 %s/small%s%s", py, g_tmp, g_tmp, g_tmp, arc_available() ? " " : "", arc_available() ? "" : "");
    if (arc_available()) snprintf(cmd + strlen(cmd), sizeof cmd - strlen(cmd), " %s/arc1", g_tmp);
    assert_int_equal(system(cmd), 0);
}

static int setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/tinyrec_test_data_XXXXXX");
    if (!mkdtemp(g_tmp)) return -1;
    return 0;
}
static int teardown(void **state) {
    char cmd[512];
    (void)state;
    if (!getenv("TINYREC_KEEP_TMP")) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
        if (system(cmd) != 0) return -1;
    }
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_npy_roundtrip),
        cmocka_unit_test(test_npy_errors),
        cmocka_unit_test(test_npy_numpy_files),
        cmocka_unit_test(test_dataset_roundtrip),
        cmocka_unit_test(test_dataset_validation),
        cmocka_unit_test(test_alloc_failures),
        cmocka_unit_test(test_sudoku_solver),
        cmocka_unit_test(test_sudoku_solver_bounded),
        cmocka_unit_test(test_sudoku_generate_and_augment),
        cmocka_unit_test(test_sudoku_read),
        cmocka_unit_test(test_sudoku_build),
        cmocka_unit_test(test_maze),
        cmocka_unit_test(test_sudoku_parse),
        cmocka_unit_test(test_maze_parse),
        cmocka_unit_test(test_arc_task_parse),
        cmocka_unit_test(test_identifiers_read),
        cmocka_unit_test(test_read_file),
        cmocka_unit_test(test_arc_prediction_parse),
        cmocka_unit_test(test_arc_votes),
        cmocka_unit_test(test_arc_votes_long_task_name),
        cmocka_unit_test(test_arc_votes_alloc_failures),
        cmocka_unit_test(test_dihedral),
        cmocka_unit_test(test_arc_inverse_real_tasks),
        cmocka_unit_test(test_arc_encode_crop),
        cmocka_unit_test(test_arc_build),
        cmocka_unit_test(test_sampler_train),
        cmocka_unit_test(test_sampler_test_mode),
        cmocka_unit_test(test_sampler_multi_example),
        cmocka_unit_test(test_numpy_reads_ours),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
