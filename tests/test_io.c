/* tests/test_io.c - JSON reader, string builder, safetensors reader/writer, atomic writes.
   Build: gcc -O2 -g -Wall -Wextra -std=c99 -fopenmp -I. tests/test_io.c -o build/test_io -lcmocka -lm
   Run from the repository root (the regression corpus is found relative to it, or via
   TINYREC_SRCDIR). */
#define TINYREC_IMPLEMENTATION
#include "test_util.h" /* the library first (its POSIX feature macros), then cmocka */

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[256];
static tr_ctx *g_ctx;

/* ---- helpers ------------------------------------------------------------------------------ */
static void path_in(char *buf, size_t cap, const char *name) { snprintf(buf, cap, "%s/%s", g_dir, name); }

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}


static int group_setup(void **state) {
    (void)state;
    strcpy(g_dir, "/tmp/tinyrec_test_io_XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    if (tr_ctx_create(NULL, &g_ctx) != TR_OK) return 1;
    return 0;
}

/* A fresh context per test, so that a failing test's leak does not fail the next one. */
static int ctx_setup(void **state) {
    (void)state;
    tr_ctx_destroy(g_ctx);
    return tr_ctx_create(NULL, &g_ctx) != TR_OK;
}
static int ctx_teardown(void **state) {
    (void)state;
    return 0;
}
#define IO_TEST(f) cmocka_unit_test_setup_teardown(f, ctx_setup, ctx_teardown)

static int group_teardown(void **state) {
    DIR *d;
    struct dirent *e;
    (void)state;
    tr_ctx_destroy(g_ctx);
    d = opendir(g_dir);
    if (d) {
        while ((e = readdir(d)) != NULL) {
            char p[600];
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(g_dir);
    return 0;
}

/* A safetensors image: 8-byte LE length of `header`, the header, then `data`. */
typedef struct blob {
    unsigned char *p;
    size_t n;
} blob;

static blob make_st_len(uint64_t hlen, const char *header, const void *data, size_t dlen) {
    blob b;
    size_t hl = strlen(header);
    int i;
    b.n = 8 + hl + dlen;
    b.p = (unsigned char *)malloc(b.n ? b.n : 1);
    for (i = 0; i < 8; i++) b.p[i] = (unsigned char)(hlen >> (8 * i));
    memcpy(b.p + 8, header, hl);
    if (dlen) memcpy(b.p + 8 + hl, data, dlen);
    return b;
}
static blob make_st(const char *header, const void *data, size_t dlen) { return make_st_len(strlen(header), header, data, dlen); }

/* ---- JSON --------------------------------------------------------------------------------- */
static void test_json_accept(void **state) {
    static const char *ok[] = {
        "{}", "[]", " \t\r\n{ } ", "0", "-0", "1.5e-3", "-12E+2", "true", "false", "null", "\"\"",
        "\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\"", "\"\\u00e9\\u4e2d\\ud83d\\ude00\"", "\"caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80\"",
        "{\"a\":[1,2,{\"b\":null}],\"c\":\"d\"}", "[[[[[[[[[[]]]]]]]]]]", "{\"x\":\"\\u0000\"}", "1e308", "1e-400",
        "[0.000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000001]",
    };
    size_t i;
    (void)state;
    for (i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        tr_json *j = NULL;
        tr_status st = tr_json_parse(g_ctx, ok[i], strlen(ok[i]), "accept", &j);
        if (st != TR_OK) fail_msg("rejected valid JSON #%zu %s: %s", i, ok[i], tr_ctx_last_error(g_ctx));
        tr_json_free(g_ctx, j);
    }
    assert_int_equal(tr_ctx_live_allocs(g_ctx), 0);
}

static void test_json_values(void **state) {
    const char *t = "{\"n\":-2.5e2,\"s\":\"x\\u00e9\\ud83d\\ude00\\n\",\"a\":[true,false,null],\"z\":\"a\\u0000b\",\"o\":{}}";
    tr_json *j = NULL;
    const tr_json *v;
    (void)state;
    assert_int_equal(tr_json_parse(g_ctx, t, strlen(t), "values", &j), TR_OK);
    assert_int_equal(j->type, TR_JSON_OBJECT);
    assert_int_equal(j->count, 5);
    v = tr_json_get(j, "n");
    assert_non_null(v);
    assert_true(v->type == TR_JSON_NUMBER && v->number == -250.0);
    v = tr_json_get(j, "s");
    assert_string_equal(v->string, "x\xc3\xa9\xf0\x9f\x98\x80\n");
    assert_int_equal(v->len, 8);
    v = tr_json_get(j, "a");
    assert_true(v->type == TR_JSON_ARRAY && v->count == 3);
    assert_true(v->items[0].type == TR_JSON_BOOL && v->items[0].boolean == 1);
    assert_true(v->items[1].type == TR_JSON_BOOL && v->items[1].boolean == 0);
    assert_true(v->items[2].type == TR_JSON_NULL);
    v = tr_json_get(j, "z");
    assert_int_equal(v->len, 3);
    assert_memory_equal(v->string, "a\0b", 3);
    assert_null(tr_json_get(j, "missing"));
    assert_null(tr_json_get(v, "x")); /* not an object */
    assert_int_equal(tr_json_get(j, "o")->type, TR_JSON_OBJECT);
    tr_json_free(g_ctx, j);
    /* not NUL-terminated: parse a prefix of a longer buffer */
    assert_int_equal(tr_json_parse(g_ctx, "[1,2]xyz", 5, "prefix", &j), TR_OK);
    assert_int_equal(j->count, 2);
    tr_json_free(g_ctx, j);
    assert_int_equal(tr_ctx_live_allocs(g_ctx), 0);
}

static void test_json_reject(void **state) {
    static const struct {
        const char *text;
        const char *err;
    } bad[] = {
        {"", "unexpected end of input"},
        {"   ", "unexpected end of input"},
        {"{", "object key (a string) expected"},
        {"{\"a\"}", "':' expected after object key"},
        {"{\"a\":1,}", "object key (a string) expected"},
        {"[1,]", "invalid literal"},
        {"[1 2]", "',' or ']' expected in array"},
        {"{\"a\":1 \"b\":2}", "',' or '}' expected in object"},
        {"{} {}", "trailing garbage"},
        {"[1]x", "trailing garbage"},
        {"NaN", "invalid literal"},
        {"[Infinity]", "invalid literal"},
        {"[-Infinity]", "invalid number"},
        {"01", "leading zero"},
        {"1.", "digit expected after decimal point"},
        {"1e", "digit expected in exponent"},
        {"-", "invalid number"},
        {"+1", "invalid literal"},
        {"1e400", "number out of range"},
        {"tru", "invalid literal"},
        {"\"abc", "unterminated string"},
        {"\"a\\", "unterminated string"},
        {"\"a\tb\"", "control character"},
        {"\"\\x\"", "invalid escape"},
        {"\"\\u12\"", "bad \\u escape"},
        {"\"\\ud800\"", "high surrogate not followed"},
        {"\"\\ud800\\u0041\"", "high surrogate not followed"},
        {"\"\\udc00\"", "lone low surrogate"},
        {"\"\xff\"", "invalid UTF-8"},
        {"\"\xc0\xaf\"", "invalid UTF-8"},          /* overlong '/' */
        {"\"\xed\xa0\x80\"", "invalid UTF-8"},      /* encoded surrogate */
        {"\"\xf4\x90\x80\x80\"", "invalid UTF-8"},  /* > U+10FFFF */
        {"\"\xe4\xb8\"", "invalid UTF-8"},          /* truncated sequence */
        {"{\"a\":1,\"a\":2}", "duplicate key 'a'"},
        {"{\"a\\u0000\":1}", "object key contains \\u0000"},
        {"{\"k0\":0,\"k1\":0,\"k2\":0,\"k3\":0,\"k4\":0,\"k5\":0,\"k6\":0,\"k7\":0,\"k8\":0,\"k9\":0,\"k3\":1}", "duplicate key 'k3'"},
        {"{'a':1}", "object key (a string) expected"},
        {"[1,2", "',' or ']' expected in array"},
    };
    size_t i;
    char deep[200];
    tr_json *j;
    (void)state;
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        j = (tr_json *)1;
        tr_status st = tr_json_parse(g_ctx, bad[i].text, strlen(bad[i].text), "reject-case", &j);
        if (st != TR_ERR_FORMAT) fail_msg("case #%zu %s: status %d, expected TR_ERR_FORMAT", i, bad[i].text, (int)st);
        assert_null(j);
        if (!strstr(tr_ctx_last_error(g_ctx), bad[i].err) || !strstr(tr_ctx_last_error(g_ctx), "reject-case"))
            fail_msg("case #%zu %s: error '%s' lacks '%s'", i, bad[i].text, tr_ctx_last_error(g_ctx), bad[i].err);
        assert_int_equal(tr_ctx_live_allocs(g_ctx), 0);
    }
    /* depth: 64 levels are fine, 65 are not */
    memset(deep, '[', 64);
    memset(deep + 64, ']', 64);
    assert_int_equal(tr_json_parse(g_ctx, deep, 128, "deep", &j), TR_OK);
    tr_json_free(g_ctx, j);
    memset(deep, '[', 65);
    memset(deep + 65, ']', 65);
    assert_int_equal(tr_json_parse(g_ctx, deep, 130, "deep", &j), TR_ERR_FORMAT);
    assert_non_null(strstr(tr_ctx_last_error(g_ctx), "nesting deeper than 64"));
    /* a NUL byte in the middle of the text is not whitespace */
    assert_int_equal(tr_json_parse(g_ctx, "[1]\0", 4, "nul", &j), TR_ERR_FORMAT);
    assert_int_equal(tr_ctx_live_allocs(g_ctx), 0);
}

static void test_json_alloc_faults(void **state) {
    const char *t = "{\"a\":[1,2,3,4,5,6,7,8,9,10],\"b\":{\"c\":\"str\\u00e9\",\"d\":[[],{}]},\"k1\":1,\"k2\":2,\"k3\":3,\"k4\":4,"
                    "\"k5\":5,\"k6\":6,\"k7\":7,\"k8\":8,\"num\":0.12345678901234567890123456789012345678901234567890123456789012345678901234567890}";
    long k;
    int done = 0;
    (void)state;
    for (k = 1; k < 10000 && !done; k++) {
        tr_json *j = NULL;
        tr_status st;
        tr_ctx_fail_alloc_at(g_ctx, k);
        st = tr_json_parse(g_ctx, t, strlen(t), "faults", &j);
        tr_ctx_fail_alloc_at(g_ctx, 0);
        if (st == TR_OK) {
            done = 1;
            tr_json_free(g_ctx, j);
        } else {
            assert_int_equal(st, TR_ERR_OUT_OF_MEMORY);
            assert_null(j);
        }
        assert_int_equal(tr_ctx_live_allocs(g_ctx), 0);
    }
    assert_true(done);
    assert_true(k > 10);
}

/* The public writer's output reads back through the reader as the same strings and numbers. */
static void test_json_write(void **state) {
    const char *strs[] = {"", "plain", "q\"b\\s/", "ctl\n\r\t\b\f\x01\x1f", "utf8 \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"};
    const double nums[] = {0, -3, 1e15, 0.1, -2.5e-7, 1.0 / 3.0, 123456789.125, 1e300};
    char buf[1024];
    size_t i, n;
    tr_json *j = NULL;
    FILE *f = tmpfile();
    (void)state;
    assert_non_null(f);
    fputc('[', f);
    for (i = 0; i < sizeof strs / sizeof *strs; i++) {
        assert_int_equal(tr_json_fput_string(f, strs[i]), 0);
        fputc(',', f);
    }
    for (i = 0; i < sizeof nums / sizeof *nums; i++) {
        assert_int_equal(tr_json_fput_number(f, nums[i]), 0);
        fputc(',', f);
    }
    assert_int_equal(tr_json_fput_number(f, NAN), 0); /* JSON has no NaN: null */
    fputc(']', f);
    rewind(f);
    n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    assert_int_equal(tr_json_parse(g_ctx, buf, n, "written", &j), TR_OK);
    assert_int_equal(j->count, 5 + 8 + 1);
    for (i = 0; i < 5; i++) {
        assert_int_equal(j->items[i].type, TR_JSON_STRING);
        assert_string_equal(j->items[i].string, strs[i]);
    }
    for (i = 0; i < 8; i++) {
        assert_int_equal(j->items[5 + i].type, TR_JSON_NUMBER);
        assert_true(j->items[5 + i].number == nums[i]); /* exact: shortest round-trip digits */
    }
    assert_int_equal(j->items[13].type, TR_JSON_NULL);
    tr_json_free(g_ctx, j);
}

static void test_sb(void **state) {
    tr__sb sb;
    char big[1000];
    long k;
    (void)state;
    tr__sb_init(&sb, g_ctx);
    assert_int_equal(tr__sb_status(&sb), TR_OK);
    tr__sb_printf(&sb, "%d-%s", 12, "ab");
    assert_string_equal(sb.data, "12-ab");
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    tr__sb_printf(&sb, "[%s]", big);
    assert_int_equal(sb.len, 5 + 1001);
    assert_int_equal(sb.data[sb.len], 0);
    tr__sb_free(&sb);
    tr__sb_init(&sb, g_ctx);
    tr__sb_json_string(&sb, "q\"b\\s\n\r\t\b\f\x01\x1f/\xc3\xa9");
    assert_string_equal(sb.data, "\"q\\\"b\\\\s\\n\\r\\t\\b\\f\\u0001\\u001f/\xc3\xa9\"");
    { /* and it parses back to the same bytes */
        tr_json *j;
        assert_int_equal(tr_json_parse(g_ctx, sb.data, sb.len, "sb", &j), TR_OK);
        assert_string_equal(j->string, "q\"b\\s\n\r\t\b\f\x01\x1f/\xc3\xa9");
        tr_json_free(g_ctx, j);
    }
    tr__sb_free(&sb);
    /* OOM: the first failure sticks */
    for (k = 1; k <= 3; k++) {
        tr__sb_init(&sb, g_ctx);
        tr_ctx_fail_alloc_at(g_ctx, k);
        tr__sb_printf(&sb, "%s", "hello");
        tr__sb_printf(&sb, "%s", big);
        tr__sb_printf(&sb, "%s", big);
        tr__sb_printf(&sb, "%s", big);
        tr_ctx_fail_alloc_at(g_ctx, 0);
        if (k <= 2) {
            assert_true(sb.failed);
            assert_int_equal(tr__sb_status(&sb), TR_ERR_OUT_OF_MEMORY);
            assert_non_null(strstr(tr_ctx_last_error(g_ctx), "out of memory"));
        }
        tr__sb_free(&sb);
        assert_int_equal(tr_ctx_live_allocs(g_ctx), 0);
    }
}

static void test_read_file(void **state) {
    char p[512], *data;
    size_t len;
    (void)state;
    path_in(p, sizeof p, "rf.txt");
    write_bytes(p, "hello\0world", 11);
    assert_int_equal(tr_read_file(g_ctx, p, &data, &len), TR_OK);
    assert_int_equal(len, 11);
    assert_memory_equal(data, "hello\0world", 12);
    tr__free(g_ctx, data);
    assert_int_equal(tr__read_file_capped(g_ctx, p, 10, &data, &len), TR_ERR_FORMAT);
    assert_null(data);
    assert_non_null(strstr(tr_ctx_last_error(g_ctx), "10-byte limit"));
    write_bytes(p, "", 0);
    assert_int_equal(tr_read_file(g_ctx, p, &data, &len), TR_OK);
    assert_int_equal(len, 0);
    assert_int_equal(data[0], 0);
    tr__free(g_ctx, data);
    path_in(p, sizeof p, "does-not-exist.txt");
    assert_int_equal(tr_read_file(g_ctx, p, &data, &len), TR_ERR_IO);
    assert_non_null(strstr(tr_ctx_last_error(g_ctx), "does-not-exist.txt"));
    assert_non_null(strstr(tr_ctx_last_error(g_ctx), "No such file"));
    assert_int_equal(tr_ctx_live_allocs(g_ctx), 0);
}

/* ---- safetensors: corruption table -------------------------------------------------------- */
#define W1 "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}"
static const unsigned char zeros[64] = {0};

typedef struct corrupt_case {
    const char *name;
    const char *header;   /* NULL: use raw */
    size_t data_len;      /* bytes of zeros after the header */
    int lie_len;          /* 1: the length field is `len` instead of strlen(header) */
    uint64_t len;
    const char *raw;      /* for files that are not length+header+data */
    size_t raw_len;
    const char *err;
} corrupt_case;

static const corrupt_case corrupt_cases[] = {
    {"short-file", NULL, 0, 0, 0, "\x10\x00\x00", 3, "too short for the 8-byte header length"},
    {"empty-file", NULL, 0, 0, 0, "", 0, "file is 0 bytes"},
    {"len-past-eof", W1, 8, 1, 1000, NULL, 0, "runs past the end of the file"},
    {"huge-header-len", W1, 8, 1, 0xffffffffffffull, NULL, 0, "exceeds the 100000000-byte limit"},
    {"header-len-zero", W1, 8, 1, 0, NULL, 0, "too small for a JSON object"},
    {"truncated-header", W1, 8, 1, sizeof(W1) - 1 - 14, NULL, 0, "unterminated string"},
    {"not-an-object", "[{\"w\":1}]", 0, 0, 0, NULL, 0, "header is not a JSON object"},
    {"negative-dim", "{\"w\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, 0, 0, NULL, 0, "shape[0] is negative"},
    {"dim-not-integer", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}", 8, 0, 0, NULL, 0, "shape[0] is not a non-negative integer"},
    {"dtype-shape-mismatch", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,8]}}", 8, 0, 0, NULL, 0, "needs 24 bytes, but data_offsets [0, 8] span 8"},
    {"overlap", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
     12, 0, 0, NULL, 0, "overlaps tensor"},
    {"gap", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
     12, 0, 0, NULL, 0, "gap in the data section: bytes [4, 8)"},
    {"unknown-dtype", "{\"w\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8, 0, 0, NULL, 0, "unsupported dtype 'F64'"},
    {"dtype-not-string", "{\"w\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, 0, 0, NULL, 0, "dtype is a JSON number"},
    {"nan-in-number", "{\"w\":{\"dtype\":\"F32\",\"shape\":[NaN],\"data_offsets\":[0,8]}}", 8, 0, 0, NULL, 0, "invalid literal"},
    {"infinity-in-number", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,1e999]}}", 8, 0, 0, NULL, 0, "number out of range"},
    {"duplicate-tensor", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
     8, 0, 0, NULL, 0, "duplicate key 'w'"},
    {"trailing-garbage-header", W1 " x", 8, 0, 0, NULL, 0, "trailing garbage after the JSON value"},
    {"data-too-short", W1, 6, 0, 0, NULL, 0, "run past the end of the 6-byte data section"},
    {"data-too-long", W1, 12, 0, 0, NULL, 0, "4 trailing bytes belong to no tensor"},
    {"offsets-not-integers", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,\"8\"]}}", 8, 0, 0, NULL, 0, "data_offsets[1] is not a non-negative integer"},
    {"offsets-fractional", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0.5,1]}}", 1, 0, 0, NULL, 0, "data_offsets[0] is not a non-negative integer"},
    {"offsets-arity", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,8]}}", 8, 0, 0, NULL, 0, "data_offsets must be an array [begin, end]"},
    {"offsets-reversed", "{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[8,0]}}", 8, 0, 0, NULL, 0, "end before they begin"},
    {"missing-data-offsets", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, 0, 0, NULL, 0, "missing field 'data_offsets'"},
    {"missing-shape", "{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, 0, 0, NULL, 0, "missing field 'shape'"},
    {"missing-dtype", "{\"w\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, 0, 0, NULL, 0, "missing field 'dtype'"},
    {"unknown-field", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"stride\":[1]}}", 8, 0, 0, NULL, 0, "unknown field 'stride'"},
    {"entry-not-object", "{\"w\":[\"F32\",[2],[0,8]]}", 8, 0, 0, NULL, 0, "the entry is a JSON array"},
    {"metadata-value-not-string", "{\"__metadata__\":{\"format\":1},\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, 0, 0, NULL, 0,
     "__metadata__ value of 'format' is a JSON number"},
    {"metadata-not-object", "{\"__metadata__\":[\"pt\"]}", 0, 0, 0, NULL, 0, "__metadata__ is a JSON array"},
    {"metadata-nul", "{\"__metadata__\":{\"format\":\"p\\u0000t\"}}", 0, 0, 0, NULL, 0, "contains a NUL character"},
    {"rank-too-high", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1, 0, 0, NULL, 0, "shape has 9 dimensions"},
    {"shape-overflow", "{\"w\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,1]}}", 1, 0, 0, NULL, 0, "too many elements (overflow)"},
    {"shape-not-array", "{\"w\":{\"dtype\":\"U8\",\"shape\":1,\"data_offsets\":[0,1]}}", 1, 0, 0, NULL, 0, "shape is a JSON number, not an array"},
    {"invalid-utf8-name", "{\"w\xff\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, 0, 0, NULL, 0, "invalid UTF-8 in string"},
    {"control-char-in-name", "{\"w\n\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, 0, 0, NULL, 0, "control character in string"},
    {"deep-nesting", "{\"__metadata__\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}",
     0, 0, 0, NULL, 0, "nesting deeper than 64 levels"},
    {"header-starts-with-space", " {}", 0, 0, 0, NULL, 0, "found byte 0x20"},
};

static void test_st_corruptions(void **state) {
    size_t i, j, n = sizeof corrupt_cases / sizeof corrupt_cases[0];
    static char errs[sizeof corrupt_cases / sizeof corrupt_cases[0]][TR__ERRLEN];
    (void)state;
    assert_true(n >= 15);
    for (i = 0; i < n; i++) {
        const corrupt_case *c = &corrupt_cases[i];
        blob b;
        char p[512];
        tr_st_file *f = (tr_st_file *)1;
        tr_status st;
        if (c->header)
            b = c->lie_len ? make_st_len(c->len, c->header, zeros, c->data_len) : make_st(c->header, zeros, c->data_len);
        else {
            b.n = c->raw_len;
            b.p = (unsigned char *)malloc(b.n + 1);
            memcpy(b.p, c->raw, b.n);
        }
        /* from memory */
        st = tr_st_open_memory(g_ctx, b.p, b.n, c->name, &f);
        if (st != TR_ERR_FORMAT) fail_msg("case %s: status %d (%s), expected TR_ERR_FORMAT", c->name, (int)st, tr_ctx_last_error(g_ctx));
        assert_null(f);
        if (!strstr(tr_ctx_last_error(g_ctx), c->err)) fail_msg("case %s: error '%s' lacks '%s'", c->name, tr_ctx_last_error(g_ctx), c->err);
        if (!strstr(tr_ctx_last_error(g_ctx), c->name)) fail_msg("case %s: error '%s' does not name the file", c->name, tr_ctx_last_error(g_ctx));
        strcpy(errs[i], tr_ctx_last_error(g_ctx) + strlen(c->name));
        assert_int_equal(tr_ctx_live_allocs(g_ctx), 0);
        /* from a file: the same verdict, naming the path */
        snprintf(p, sizeof p, "%s/%s.safetensors", g_dir, c->name);
        write_bytes(p, b.p, b.n);
        f = (tr_st_file *)1;
        assert_int_equal(tr_st_open(g_ctx, p, &f), TR_ERR_FORMAT);
        assert_null(f);
        assert_non_null(strstr(tr_ctx_last_error(g_ctx), c->err));
        assert_non_null(strstr(tr_ctx_last_error(g_ctx), p));
        assert_int_equal(tr_ctx_live_allocs(g_ctx), 0);
        unlink(p);
        free(b.p);
    }
    /* every case has its own text */
    for (i = 0; i < n; i++)
        for (j = i + 1; j < n; j++)
            if (strcmp(errs[i], errs[j]) == 0) fail_msg("cases %s and %s give the same error '%s'", corrupt_cases[i].name, corrupt_cases[j].name, errs[i]);
}

/* Edge cases that are valid: empty file header, zero-size tensors, scalars, header padding. */
static void test_st_valid_edges(void **state) {
    static const char *hdr =
        "{\"__metadata__\":{\"format\":\"pt\",\"note\":\"caf\\u00e9\"},"
        "\"s\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,8]},"
        "\"e1\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[8,8]},"
        "\"e2\":{\"dtype\":\"BF16\",\"shape\":[0],\"data_offsets\":[8,8]},"
        "\"b\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data_offsets\":[11,13]},"
        "\"u\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[8,11]},"
        "\"i\":{\"dtype\":\"I32\",\"shape\":[1,1],\"data_offsets\":[13,17]}}        ";
    unsigned char data[17] = {0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1, 2, 250, 0, 7, 0xff, 0xff, 0xff, 0x7f};
    blob b = make_st(hdr, data, sizeof data);
    tr_st_file *f;
    const tr_st_tensor *t;
    int64_t v[3];
    float fl[1];
    (void)state;
    assert_int_equal(tr_st_open_memory(g_ctx, b.p, b.n, "edges", &f), TR_OK);
    assert_int_equal(tr_st_count(f), 6);
    assert_string_equal(tr_st_at(f, 0)->name, "s");
    assert_string_equal(tr_st_at(f, 5)->name, "i");
    assert_null(tr_st_at(f, 6));
    assert_string_equal(tr_st_metadata(f, "format"), "pt");
    assert_string_equal(tr_st_metadata(f, "note"), "caf\xc3\xa9");
    assert_null(tr_st_metadata(f, "nope"));
    assert_int_equal(tr_st_metadata_count(f), 2);
    assert_string_equal(tr_st_metadata_key(f, 1), "note");
    t = tr_st_find(f, "s");
    assert_non_null(t);
    assert_int_equal(t->ndim, 0);
    assert_int_equal(tr_st_numel(t), 1);
    assert_int_equal(tr_st_read_i64(g_ctx, t, v, 1), TR_OK);
    assert_true(v[0] == -2);
    assert_int_equal(tr_st_read_i64(g_ctx, tr_st_find(f, "u"), v, 3), TR_OK);
    assert_true(v[0] == 1 && v[1] == 2 && v[2] == 250);
    assert_int_equal(tr_st_read_i64(g_ctx, tr_st_find(f, "b"), v, 2), TR_OK);
    assert_true(v[0] == 0 && v[1] == 1);
    assert_int_equal(tr_st_read_i64(g_ctx, tr_st_find(f, "i"), v, 1), TR_OK);
    assert_true(v[0] == 2147483647);
    t = tr_st_find(f, "e1");
    assert_int_equal(t->nbytes, 0);
    assert_int_equal(tr_st_read_f32(g_ctx, t, NULL, 0), TR_OK);
    /* type and count errors name the file and the tensor */
    assert_int_equal(tr_st_read_f32(g_ctx, tr_st_find(f, "u"), fl, 3), TR_ERR_UNSUPPORTED);
    assert_non_null(strstr(tr_ctx_last_error(g_ctx), "edges: tensor 'u' is U8"));
    assert_int_equal(tr_st_read_i64(g_ctx, tr_st_find(f, "u"), v, 2), TR_ERR_INVALID_ARG);
    assert_non_null(strstr(tr_ctx_last_error(g_ctx), "tensor 'u' has 3 elements, but 2"));
    assert_null(tr_st_find(f, "zzz"));
    { /* the model loader's lookup: missing and mis-shaped tensors are named */
        const tr_st_tensor *g;
        int64_t want[2] = {1, 1}, bad[2] = {1, 2};
        assert_int_equal(tr_st_get(g_ctx, f, "i", 2, want, &g), TR_OK);
        assert_true(g == tr_st_find(f, "i"));
        assert_int_equal(tr_st_get(g_ctx, f, "i", 0, NULL, &g), TR_OK);
        assert_int_equal(tr_st_get(g_ctx, f, "i", 2, bad, &g), TR_ERR_FORMAT);
        assert_null(g);
        assert_non_null(strstr(tr_ctx_last_error(g_ctx), "edges: tensor 'i' has shape [1,1], expected [1,2]"));
        assert_int_equal(tr_st_get(g_ctx, f, "i", 1, want, &g), TR_ERR_FORMAT);
        assert_non_null(strstr(tr_ctx_last_error(g_ctx), "expected [1]"));
        assert_int_equal(tr_st_get(g_ctx, f, "model.inner.H_init", 0, NULL, &g), TR_ERR_NOT_FOUND);
        assert_non_null(strstr(tr_ctx_last_error(g_ctx), "edges: missing tensor 'model.inner.H_init'"));
    }
    assert_null(tr_st_find(f, ""));
    tr_st_close(f);
    free(b.p);
    /* an empty header */
    b = make_st("{}      ", NULL, 0);
    assert_int_equal(tr_st_open_memory(g_ctx, b.p, b.n, "empty", &f), TR_OK);
    assert_int_equal(tr_st_count(f), 0);
    assert_null(tr_st_metadata(f, "format"));
    tr_st_close(f);
    free(b.p);
    assert_int_equal(tr_ctx_live_allocs(g_ctx), 0);
}

/* ---- round trips ------------------------------------------------------------------------- */
static int same_float(float a, float b) {
    uint32_t x, y;
    memcpy(&x, &a, 4);
    memcpy(&y, &b, 4);
    if (a != a) return b != b;
    return x == y;
}

static void test_st_roundtrip(void **state) {
    enum { N = 37 };
    float src[N], back[N];
    uint16_t bf[N], hf[N];
    int32_t iv[4] = {-1, 0, 7, 2147483647};
    int64_t lv[2] = {-5, (int64_t)1 << 40}, got[4];
    unsigned char u8[3] = {0, 128, 255};
    tr_st_tensor ts[6];
    const char *mk[3] = {"format", "config", "esc\"aped"};
    const char *mv[3] = {"tinyrec", "{\"hidden_size\": 512, \"name\": \"x\\y\"}", "line\nbreak"};
    char p[512], *raw;
    size_t rawlen, i;
    uint64_t hlen;
    tr_st_file *f;
    const tr_st_tensor *t;
    (void)state;
    for (i = 0; i < N; i++) src[i] = (float)((double)i * 0.37 - 5.0) * (i % 3 ? 1.0f : -1000.0f);
    src[0] = 0.0f;
    src[1] = -0.0f;
    src[2] = 1e-40f; /* subnormal */
    src[3] = 3.4e38f;
    src[4] = (float)INFINITY;
    src[5] = -(float)INFINITY;
    src[6] = (float)NAN;
    src[7] = 65504.0f;
    src[8] = 6.0e-8f;
    for (i = 0; i < N; i++) {
        bf[i] = tr__f32_to_bf16(src[i]);
        hf[i] = tr__f32_to_f16(src[i]);
    }
    memset(ts, 0, sizeof ts);
    ts[0].name = "model.inner.L_level.layers.0.mlp.gate_up_proj.weight";
    ts[0].dtype = TR_F32; ts[0].ndim = 2; ts[0].shape[0] = 1; ts[0].shape[1] = N; ts[0].data = src; ts[0].nbytes = sizeof src;
    ts[1].name = "bf16";
    ts[1].dtype = TR_BF16; ts[1].ndim = 1; ts[1].shape[0] = N; ts[1].data = bf; ts[1].nbytes = sizeof bf;
    ts[2].name = "f16 \"quoted\" \xc3\xa9";
    ts[2].dtype = TR_F16; ts[2].ndim = 3; ts[2].shape[0] = N; ts[2].shape[1] = 1; ts[2].shape[2] = 1; ts[2].data = hf; ts[2].nbytes = sizeof hf;
    ts[3].name = "i32";
    ts[3].dtype = TR_I32; ts[3].ndim = 1; ts[3].shape[0] = 4; ts[3].data = iv; ts[3].nbytes = sizeof iv;
    ts[4].name = "step";
    ts[4].dtype = TR_I64; ts[4].ndim = 1; ts[4].shape[0] = 2; ts[4].data = lv; ts[4].nbytes = sizeof lv;
    ts[5].name = "u8";
    ts[5].dtype = TR_U8; ts[5].ndim = 0; ts[5].data = u8; ts[5].nbytes = 1;
    path_in(p, sizeof p, "rt.safetensors");
    assert_int_equal(tr_st_write(g_ctx, p, ts, 6, mk, mv, 3), TR_OK);
    assert_int_equal(tu_count_tmp_files(g_dir), 0);
    /* the layout: header length a multiple of 8, padded with spaces, tensors in the given order */
    assert_int_equal(tr_read_file(g_ctx, p, &raw, &rawlen), TR_OK);
    hlen = tr__le64((const unsigned char *)raw);
    assert_int_equal(hlen % 8, 0);
    assert_int_equal(raw[8], '{');
    assert_true(raw[8 + hlen - 1] == '}' || raw[8 + hlen - 1] == ' ');
    assert_int_equal(rawlen, 8 + hlen + sizeof src + sizeof bf + sizeof hf + sizeof iv + sizeof lv + 1);
    assert_memory_equal(raw + 8 + hlen, src, sizeof src);
    assert_memory_equal(raw + 8 + hlen + sizeof src, bf, sizeof bf);
    tr__free(g_ctx, raw);
    /* read back */
    assert_int_equal(tr_st_open(g_ctx, p, &f), TR_OK);
    assert_int_equal(tr_st_count(f), 6);
    for (i = 0; i < 6; i++) assert_string_equal(tr_st_at(f, i)->name, ts[i].name);
    assert_string_equal(tr_st_metadata(f, "format"), "tinyrec");
    assert_string_equal(tr_st_metadata(f, "config"), mv[1]);
    assert_string_equal(tr_st_metadata(f, "esc\"aped"), mv[2]);
    t = tr_st_find(f, ts[0].name);
    assert_non_null(t);
    assert_int_equal(t->dtype, TR_F32);
    assert_int_equal(t->ndim, 2);
    assert_true(t->shape[0] == 1 && t->shape[1] == N);
    assert_int_equal(tr_st_read_f32(g_ctx, t, back, N), TR_OK);
    for (i = 0; i < N; i++)
        if (!same_float(back[i], src[i])) fail_msg("F32 element %zu: %g != %g", i, back[i], src[i]);
    t = tr_st_find(f, "bf16");
    assert_int_equal(t->dtype, TR_BF16);
    assert_int_equal(tr_st_read_f32(g_ctx, t, back, N), TR_OK);
    for (i = 0; i < N; i++) {
        if (!same_float(back[i], tr__bf16_to_f32(bf[i]))) fail_msg("BF16 element %zu", i);
        if (src[i] == src[i] && fabsf(src[i]) < 1e38f && fabsf(src[i]) > 1e-30f && fabsf(back[i] - src[i]) > fabsf(src[i]) * (1.0f / 128)) fail_msg("BF16 %zu far off", i);
    }
    t = tr_st_find(f, ts[2].name);
    assert_non_null(t);
    assert_int_equal(t->dtype, TR_F16);
    assert_int_equal(t->ndim, 3);
    assert_int_equal(tr_st_read_f32(g_ctx, t, back, N), TR_OK);
    for (i = 0; i < N; i++) {
        if (!same_float(back[i], tr__f16_to_f32(hf[i]))) fail_msg("F16 element %zu", i);
        if (fabsf(src[i]) < 60000.0f && fabsf(src[i]) > 1e-4f && fabsf(back[i] - src[i]) > fabsf(src[i]) * (1.0f / 1024)) fail_msg("F16 %zu far off", i);
    }
    assert_true(back[7] == 65504.0f && back[4] == (float)INFINITY && back[6] != back[6]);
    assert_int_equal(tr_st_read_i64(g_ctx, tr_st_find(f, "i32"), got, 4), TR_OK);
    assert_true(got[0] == -1 && got[1] == 0 && got[2] == 7 && got[3] == 2147483647);
    assert_int_equal(tr_st_read_i64(g_ctx, tr_st_find(f, "step"), got, 2), TR_OK);
    assert_true(got[0] == -5 && got[1] == ((int64_t)1 << 40));
    assert_int_equal(tr_st_read_i64(g_ctx, tr_st_find(f, "u8"), got, 1), TR_OK);
    assert_true(got[0] == 0);
    /* rewriting what was read gives the same bytes */
    {
        tr_st_tensor copy[6];
        char p2[512], *r1, *r2;
        size_t l1, l2;
        for (i = 0; i < 6; i++) copy[i] = *tr_st_at(f, i);
        path_in(p2, sizeof p2, "rt2.safetensors");
        assert_int_equal(tr_st_write(g_ctx, p2, copy, 6, mk, mv, 3), TR_OK);
        assert_int_equal(tr_read_file(g_ctx, p, &r1, &l1), TR_OK);
        assert_int_equal(tr_read_file(g_ctx, p2, &r2, &l2), TR_OK);
        assert_int_equal(l1, l2);
        assert_memory_equal(r1, r2, l1);
        tr__free(g_ctx, r1);
        tr__free(g_ctx, r2);
        unlink(p2);
    }
    tr_st_close(f);
    /* no metadata, no tensors */
    assert_int_equal(tr_st_write(g_ctx, p, NULL, 0, NULL, NULL, 0), TR_OK);
    assert_int_equal(tr_st_open(g_ctx, p, &f), TR_OK);
    assert_int_equal(tr_st_count(f), 0);
    tr_st_close(f);
    unlink(p);
    assert_int_equal(tr_ctx_live_allocs(g_ctx), 0);
}

static void test_st_write_rejects(void **state) {
    float x[2] = {1, 2};
    tr_st_tensor ts[2];
    const char *mk[2] = {"a", "a"}, *mv[2] = {"1", "2"};
    char p[512];
    (void)state;
    memset(ts, 0, sizeof ts);
    ts[0].name = "x"; ts[0].dtype = TR_F32; ts[0].ndim = 1; ts[0].shape[0] = 2; ts[0].data = x; ts[0].nbytes = 8;
    ts[1] = ts[0];
    path_in(p, sizeof p, "rej.safetensors");
    assert_int_equal(tr_st_write(g_ctx, p, ts, 2, NULL, NULL, 0), TR_ERR_INVALID_ARG);
    assert_non_null(strstr(tr_ctx_last_error(g_ctx), "tensor name 'x' appears twice"));
    ts[1].name = "__metadata__";
    assert_int_equal(tr_st_write(g_ctx, p, ts, 2, NULL, NULL, 0), TR_ERR_INVALID_ARG);
    assert_non_null(strstr(tr_ctx_last_error(g_ctx), "reserved"));
    ts[1].name = "y";
    ts[1].nbytes = 4;
    assert_int_equal(tr_st_write(g_ctx, p, ts, 2, NULL, NULL, 0), TR_ERR_INVALID_ARG);
    assert_non_null(strstr(tr_ctx_last_error(g_ctx), "tensor 'y': nbytes is 4 but dtype F32 and the shape need 8"));
    ts[1].nbytes = 8;
    ts[1].shape[0] = -2;
    assert_int_equal(tr_st_write(g_ctx, p, ts, 2, NULL, NULL, 0), TR_ERR_INVALID_ARG);
    assert_non_null(strstr(tr_ctx_last_error(g_ctx), "shape[0] is negative"));
    ts[1].shape[0] = 2;
    assert_int_equal(tr_st_write(g_ctx, p, ts, 2, mk, mv, 2), TR_ERR_INVALID_ARG);
    assert_non_null(strstr(tr_ctx_last_error(g_ctx), "metadata key 'a' appears twice"));
    /* a directory that does not exist */
    snprintf(p, sizeof p, "%s/no/such/dir/x.safetensors", g_dir);
    assert_int_equal(tr_st_write(g_ctx, p, ts, 2, NULL, NULL, 0), TR_ERR_IO);
    assert_non_null(strstr(tr_ctx_last_error(g_ctx), "cannot create temporary file"));
    assert_non_null(strstr(tr_ctx_last_error(g_ctx), "No such file or directory"));
    assert_int_equal(access(p, F_OK), -1);
    assert_int_equal(tu_count_tmp_files(g_dir), 0);
    assert_int_equal(tr_ctx_live_allocs(g_ctx), 0);
}

/* ---- allocation faults -------------------------------------------------------------------- */
static void small_model(tr_st_tensor *ts, float *a, uint16_t *b) {
    int i;
    for (i = 0; i < 12; i++) a[i] = (float)i - 3.5f;
    for (i = 0; i < 6; i++) b[i] = tr__f32_to_bf16((float)i * 0.25f);
    memset(ts, 0, 3 * sizeof *ts);
    ts[0].name = "model.inner.H_init"; ts[0].dtype = TR_F32; ts[0].ndim = 2; ts[0].shape[0] = 3; ts[0].shape[1] = 4; ts[0].data = a; ts[0].nbytes = 48;
    ts[1].name = "model.inner.puzzle_emb.weights"; ts[1].dtype = TR_BF16; ts[1].ndim = 1; ts[1].shape[0] = 6; ts[1].data = b; ts[1].nbytes = 12;
    ts[2].name = "a.empty"; ts[2].dtype = TR_F16; ts[2].ndim = 1; ts[2].shape[0] = 0; ts[2].data = NULL; ts[2].nbytes = 0;
}

static void check_small_model(const char *path, float first) {
    tr_st_file *f;
    float v[12] = {0};
    assert_int_equal(tr_st_open(g_ctx, path, &f), TR_OK);
    assert_int_equal(tr_st_count(f), 3);
    assert_int_equal(tr_st_read_f32(g_ctx, tr_st_find(f, "model.inner.H_init"), v, 12), TR_OK);
    assert_true(v[0] == first);
    assert_string_equal(tr_st_metadata(f, "model"), "trm");
    tr_st_close(f);
}

/* A file whose names carry torch.compile's "_orig_mod." prefix loads under the plain names. */
static void test_st_orig_mod_prefix(void **state) {
    float a[3] = {1, 2, 3};
    tr_st_tensor t;
    char p[512], longname[400];
    tr_st_file *f;
    const tr_st_tensor *g;
    int64_t shape[1] = {3};
    (void)state;
    memset(&t, 0, sizeof t);
    t.name = "_orig_mod.model.inner.H_init"; t.dtype = TR_F32; t.ndim = 1; t.shape[0] = 3; t.data = a; t.nbytes = 12;
    path_in(p, sizeof p, "prefixed.safetensors");
    assert_int_equal(tr_st_write(g_ctx, p, &t, 1, NULL, NULL, 0), TR_OK);
    assert_int_equal(tr_st_open(g_ctx, p, &f), TR_OK);
    assert_int_equal(tr_st_get(g_ctx, f, "model.inner.H_init", 1, shape, &g), TR_OK);
    assert_string_equal(g->name, "_orig_mod.model.inner.H_init");
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    assert_int_equal(tr_st_get(g_ctx, f, longname, 1, shape, &g), TR_ERR_NOT_FOUND);
    assert_non_null(strstr(tr_ctx_last_error(g_ctx), "missing tensor 'xxxx"));
    tr_st_close(f);
    unlink(p);
    assert_int_equal(tr_ctx_live_allocs(g_ctx), 0);
}

static void test_st_alloc_faults(void **state) {
    tr_st_tensor ts[3];
    float a[12];
    uint16_t b[6];
    const char *mk[2] = {"model", "format"}, *mv[2] = {"trm", "tinyrec"};
    char p[512];
    long k;
    int done;
    (void)state;
    small_model(ts, a, b);
    path_in(p, sizeof p, "faults.safetensors");
    assert_int_equal(tr_st_write(g_ctx, p, ts, 3, mk, mv, 2), TR_OK);
    /* open: fail the k-th allocation until it succeeds */
    for (k = 1, done = 0; k < 100000 && !done; k++) {
        tr_st_file *f = (tr_st_file *)1;
        tr_status st;
        tr_ctx_fail_alloc_at(g_ctx, k);
        st = tr_st_open(g_ctx, p, &f);
        tr_ctx_fail_alloc_at(g_ctx, 0);
        if (st == TR_OK) {
            done = 1;
            tr_st_close(f);
        } else {
            if (st != TR_ERR_OUT_OF_MEMORY) fail_msg("open, allocation %ld failing: status %d %s", k, (int)st, tr_ctx_last_error(g_ctx));
            assert_null(f);
            assert_non_null(strstr(tr_ctx_last_error(g_ctx), "out of memory"));
        }
        assert_int_equal(tr_ctx_live_allocs(g_ctx), 0);
    }
    assert_true(done);
    assert_true(k > 20); /* the loop did cover many allocations */
    /* write over an existing file: each failure leaves the previous one intact */
    a[0] = 100.0f;
    for (k = 1, done = 0; k < 100000 && !done; k++) {
        tr_status st;
        tr_ctx_fail_alloc_at(g_ctx, k);
        st = tr_st_write(g_ctx, p, ts, 3, mk, mv, 2);
        tr_ctx_fail_alloc_at(g_ctx, 0);
        if (st == TR_OK) done = 1;
        else {
            if (st != TR_ERR_OUT_OF_MEMORY) fail_msg("write, allocation %ld failing: status %d %s", k, (int)st, tr_ctx_last_error(g_ctx));
            assert_int_equal(tr_ctx_live_allocs(g_ctx), 0);
            assert_int_equal(tu_count_tmp_files(g_dir), 0);
            check_small_model(p, -3.5f);
        }
        assert_int_equal(tr_ctx_live_allocs(g_ctx), 0);
    }
    assert_true(done);
    assert_true(k > 3);
    check_small_model(p, 100.0f);
    unlink(p);
    assert_int_equal(tr_ctx_live_allocs(g_ctx), 0);
}

/* ---- atomic replacement under injected I/O failures --------------------------------------- */
static void test_st_atomic_faults(void **state) {
    tr_st_tensor ts[3];
    float a[12];
    uint16_t b[6];
    const char *mk[1] = {"model"}, *mv[1] = {"trm"};
    char p[512], *orig, *now;
    size_t olen, nlen, total, i;
    static const tr__io_fault_kind kinds[] = {TR__IO_FAULT_SHORT, TR__IO_FAULT_ENOSPC, TR__IO_FAULT_FSYNC, TR__IO_FAULT_RENAME};
    (void)state;
    small_model(ts, a, b);
    path_in(p, sizeof p, "atomic.safetensors");
    assert_int_equal(tr_st_write(g_ctx, p, ts, 3, mk, mv, 1), TR_OK);
    assert_int_equal(tr_read_file(g_ctx, p, &orig, &olen), TR_OK);
    total = olen;
    a[0] = 42.0f; /* the new content differs */
    for (i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        uint64_t cuts[] = {0, 3, 8, 20, (uint64_t)total - 60, (uint64_t)total - 1};
        size_t c, ncuts = (kinds[i] == TR__IO_FAULT_SHORT || kinds[i] == TR__IO_FAULT_ENOSPC) ? 6 : 1;
        for (c = 0; c < ncuts; c++) {
            tr__io_fault fault;
            tr_status st;
            fault.kind = kinds[i];
            fault.at_byte = cuts[c];
            st = tr__st_write_ex(g_ctx, p, ts, 3, mk, mv, 1, &fault);
            if (st != TR_ERR_IO) fail_msg("fault %d at %llu: status %d", (int)kinds[i], (unsigned long long)cuts[c], (int)st);
            assert_non_null(strstr(tr_ctx_last_error(g_ctx), p));
            assert_non_null(strstr(tr_ctx_last_error(g_ctx), "the previous file is unchanged"));
            if (kinds[i] == TR__IO_FAULT_ENOSPC) assert_non_null(strstr(tr_ctx_last_error(g_ctx), "No space left on device"));
            if (kinds[i] == TR__IO_FAULT_SHORT) assert_non_null(strstr(tr_ctx_last_error(g_ctx), "short write"));
            if (kinds[i] == TR__IO_FAULT_FSYNC) assert_non_null(strstr(tr_ctx_last_error(g_ctx), "fsync"));
            if (kinds[i] == TR__IO_FAULT_RENAME) assert_non_null(strstr(tr_ctx_last_error(g_ctx), "renaming"));
            if (tr_ctx_live_allocs(g_ctx) != 1 /* orig */) fail_msg("fault %d at %llu leaks", (int)kinds[i], (unsigned long long)cuts[c]);
            assert_int_equal(tu_count_tmp_files(g_dir), 0);
            /* the previous file: byte-identical and loadable */
            assert_int_equal(tr_read_file(g_ctx, p, &now, &nlen), TR_OK);
            assert_int_equal(nlen, olen);
            assert_memory_equal(now, orig, olen);
            tr__free(g_ctx, now);
            check_small_model(p, -3.5f);
        }
    }
    /* a fault past the end never triggers */
    {
        tr__io_fault fault;
        fault.kind = TR__IO_FAULT_ENOSPC;
        fault.at_byte = total;
        assert_int_equal(tr__st_write_ex(g_ctx, p, ts, 3, mk, mv, 1, &fault), TR_OK);
        check_small_model(p, 42.0f);
    }
    tr__free(g_ctx, orig);
    unlink(p);
    assert_int_equal(tr_ctx_live_allocs(g_ctx), 0);
}

/* The generic atomic writer, as other parts of the library use it. */
static void test_atomic_generic(void **state) {
    char p[512], *d;
    size_t n;
    tr__atomic_file af;
    (void)state;
    path_in(p, sizeof p, "state.json");
    assert_int_equal(tr__atomic_begin(g_ctx, p, NULL, &af), TR_OK);
    assert_int_equal(tr__atomic_write(&af, "{\"step\":", 8), TR_OK);
    assert_int_equal(tr__atomic_write(&af, "1}", 2), TR_OK);
    assert_int_equal(tu_count_tmp_files(g_dir), 1);
    assert_int_equal(tr__atomic_commit(&af), TR_OK);
    assert_int_equal(tu_count_tmp_files(g_dir), 0);
    assert_int_equal(tr_read_file(g_ctx, p, &d, &n), TR_OK);
    assert_int_equal(n, 10);
    assert_string_equal(d, "{\"step\":1}");
    tr__free(g_ctx, d);
    /* abort leaves the old file */
    assert_int_equal(tr__atomic_begin(g_ctx, p, NULL, &af), TR_OK);
    assert_int_equal(tr__atomic_write(&af, "xx", 2), TR_OK);
    tr__atomic_abort(&af);
    assert_int_equal(tu_count_tmp_files(g_dir), 0);
    assert_int_equal(tr_read_file(g_ctx, p, &d, &n), TR_OK);
    assert_string_equal(d, "{\"step\":1}");
    tr__free(g_ctx, d);
    /* a relative path (directory ".") */
    {
        char cwd[512];
        assert_non_null(getcwd(cwd, sizeof cwd));
        assert_int_equal(chdir(g_dir), 0);
        assert_int_equal(tr__atomic_begin(g_ctx, "rel.txt", NULL, &af), TR_OK);
        assert_int_equal(tr__atomic_write(&af, "r", 1), TR_OK);
        assert_int_equal(tr__atomic_commit(&af), TR_OK);
        assert_int_equal(access("rel.txt", F_OK), 0);
        unlink("rel.txt");
        assert_int_equal(chdir(cwd), 0);
    }
    unlink(p);
    assert_int_equal(tr_ctx_live_allocs(g_ctx), 0);
}

/* ---- regression corpus: every file opens or fails cleanly ---------------------------------- */
static int replay_dir(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    if (!d) return -1;
    while ((e = readdir(d)) != NULL) {
        char p[1024];
        struct stat sb;
        tr_st_file *f = NULL;
        tr_status st;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (e->d_name[0] == '.' || strcmp(e->d_name, "README.md") == 0) continue;
        if (stat(p, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
        st = tr_st_open(g_ctx, p, &f);
        if (st == TR_OK) {
            size_t i;
            for (i = 0; i < tr_st_count(f); i++) {
                const tr_st_tensor *t = tr_st_at(f, i);
                size_t ne = tr_st_numel(t);
                if (t->dtype == TR_F32 || t->dtype == TR_BF16 || t->dtype == TR_F16) {
                    float *buf = (float *)malloc(ne ? ne * sizeof(float) : 1);
                    assert_int_equal(tr_st_read_f32(g_ctx, t, buf, ne), TR_OK);
                    free(buf);
                }
                assert_true(tr_st_find(f, t->name) == t);
            }
            tr_st_close(f);
        } else {
            if (st != TR_ERR_FORMAT) fail_msg("%s: status %d (%s)", p, (int)st, tr_ctx_last_error(g_ctx));
            assert_non_null(strstr(tr_ctx_last_error(g_ctx), p));
        }
        assert_int_equal(tr_ctx_live_allocs(g_ctx), 0);
        n++;
    }
    closedir(d);
    return n;
}

static void test_regression_corpus(void **state) {
    const char *src = getenv("TINYREC_SRCDIR");
    char d1[512], d2[512];
    int n1, n2;
    (void)state;
    snprintf(d1, sizeof d1, "%s/tests/fuzz/regress_safetensors", src ? src : ".");
    snprintf(d2, sizeof d2, "%s/tests/fuzz/corpus_safetensors", src ? src : ".");
    n1 = replay_dir(d1); /* absent until the fuzzer finds something */
    n2 = replay_dir(d2);
    if (n2 <= 0) fail_msg("cannot open %s (run from the repository root or set TINYREC_SRCDIR)", d2);
    if (n1 < 0) n1 = 0;
    print_message("replayed %d regression and %d seed files\n", n1, n2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        IO_TEST(test_json_accept),
        IO_TEST(test_json_values),
        IO_TEST(test_json_reject),
        IO_TEST(test_json_alloc_faults),
        IO_TEST(test_json_write),
        IO_TEST(test_sb),
        IO_TEST(test_read_file),
        IO_TEST(test_st_corruptions),
        IO_TEST(test_st_valid_edges),
        IO_TEST(test_st_roundtrip),
        IO_TEST(test_st_write_rejects),
        IO_TEST(test_st_orig_mod_prefix),
        IO_TEST(test_st_alloc_faults),
        IO_TEST(test_st_atomic_faults),
        IO_TEST(test_atomic_generic),
        IO_TEST(test_regression_corpus),
    };
    return cmocka_run_group_tests_name("tinyrec_io", tests, group_setup, group_teardown);
}
