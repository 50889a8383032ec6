/* libFuzzer target for the JSON reader: parse, and when that succeeds, write the tree back out
   (with the string builder), parse that again and check that both trees are equal.
   Build and run: tests/fuzz/run.sh SECONDS json */
#define TINYREC_IMPLEMENTATION
#include "tinyrec.h"

static tr_ctx *fz_ctx;

#define FZ_CHECK(c) do { if (!(c)) { fprintf(stderr, "fuzz check failed: %s (line %d): %s\n", #c, __LINE__, tr_ctx_last_error(fz_ctx)); abort(); } } while (0)

static void fz_str(tr__sb *sb, const char *s, size_t n) {
    size_t i;
    tr__sb_printf(sb, "\"");
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == 0) tr__sb_printf(sb, "\\u0000");
        else {
            char one[2];
            one[0] = (char)c;
            one[1] = 0;
            if (c == '"' || c == '\\' || c < 0x20) {
                tr__sb sub;
                tr__sb_init(&sub, fz_ctx);
                tr__sb_json_string(&sub, one);
                FZ_CHECK(tr__sb_status(&sub) == TR_OK && sub.len >= 4);
                tr__sb_append(sb, sub.data + 1, sub.len - 2);
                tr__sb_free(&sub);
            } else
                tr__sb_append(sb, one, 1);
        }
    }
    tr__sb_printf(sb, "\"");
}

static void fz_write(tr__sb *sb, const tr_json *v) {
    size_t i;
    switch (v->type) {
    case TR_JSON_NULL: tr__sb_printf(sb, "null"); break;
    case TR_JSON_BOOL: tr__sb_printf(sb, v->boolean ? "true" : "false"); break;
    case TR_JSON_NUMBER: tr__sb_printf(sb, "%.17g", v->number); break;
    case TR_JSON_STRING: fz_str(sb, v->string, v->len); break;
    case TR_JSON_ARRAY:
    case TR_JSON_OBJECT:
        tr__sb_printf(sb, v->type == TR_JSON_ARRAY ? "[" : "{");
        for (i = 0; i < v->count; i++) {
            if (i) tr__sb_printf(sb, ",");
            if (v->type == TR_JSON_OBJECT) {
                tr__sb_json_string(sb, v->keys[i]);
                tr__sb_printf(sb, ":");
            }
            fz_write(sb, &v->items[i]);
        }
        tr__sb_printf(sb, v->type == TR_JSON_ARRAY ? "]" : "}");
        break;
    }
}

static int fz_equal(const tr_json *a, const tr_json *b) {
    size_t i;
    if (a->type != b->type) return 0;
    switch (a->type) {
    case TR_JSON_NULL: return 1;
    case TR_JSON_BOOL: return a->boolean == b->boolean;
    case TR_JSON_NUMBER: return a->number == b->number;
    case TR_JSON_STRING: return a->len == b->len && memcmp(a->string, b->string, a->len) == 0 && a->string[a->len] == 0;
    default:
        if (a->count != b->count) return 0;
        for (i = 0; i < a->count; i++) {
            if (a->type == TR_JSON_OBJECT && strcmp(a->keys[i], b->keys[i]) != 0) return 0;
            if (!fz_equal(&a->items[i], &b->items[i])) return 0;
            if (a->type == TR_JSON_OBJECT && tr_json_get(a, a->keys[i]) != &a->items[i]) return 0; /* keys unique */
        }
        return 1;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tr_json *a = NULL, *b = NULL;
    tr_status st;
    if (!fz_ctx && tr_ctx_create(NULL, &fz_ctx) != TR_OK) abort();
    st = tr_json_parse(fz_ctx, (const char *)data, size, "fuzz", &a);
    if (st == TR_OK) {
        tr__sb sb;
        tr__sb_init(&sb, fz_ctx);
        fz_write(&sb, a);
        FZ_CHECK(tr__sb_status(&sb) == TR_OK);
        st = tr_json_parse(fz_ctx, sb.data, sb.len, "fuzz-rewrite", &b);
        FZ_CHECK(st == TR_OK);
        FZ_CHECK(fz_equal(a, b));
        tr_json_free(fz_ctx, b);
        tr__sb_free(&sb);
        tr_json_free(fz_ctx, a);
    } else {
        FZ_CHECK(a == NULL && st == TR_ERR_FORMAT);
        FZ_CHECK(strncmp(tr_ctx_last_error(fz_ctx), "fuzz", 4) == 0 && !strchr(tr_ctx_last_error(fz_ctx), '\n')); /* the source first, one line */
    }
    FZ_CHECK(tr_ctx_live_allocs(fz_ctx) == 0);
    return 0;
}
