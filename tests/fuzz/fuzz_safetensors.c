/* libFuzzer target for the safetensors reader (and the JSON reader beneath it).
   Build and run: tests/fuzz/run.sh SECONDS
   For every input: open it from memory; if it opens, read every tensor (as f32 or int64), look
   each one up by name, query the metadata, then re-serialize the header with the writer's code,
   reopen that image and check that it describes the same tensors. Any crash, sanitizer report,
   leak through the context's counters or inconsistency aborts. */
#define TINYREC_IMPLEMENTATION
#include "tinyrec.h"

static tr_ctx *fz_ctx;

#define FZ_CHECK(c) do { if (!(c)) { fprintf(stderr, "fuzz check failed: %s (line %d): %s\n", #c, __LINE__, tr_ctx_last_error(fz_ctx)); abort(); } } while (0)

static void fz_reserialize(const tr_st_file *f) {
    size_t n = tr_st_count(f), nm = tr_st_metadata_count(f), i, total;
    tr_st_tensor *ts = (tr_st_tensor *)calloc(n ? n : 1, sizeof *ts);
    const char **mk = (const char **)calloc(nm ? nm : 1, sizeof(char *));
    const char **mv = (const char **)calloc(nm ? nm : 1, sizeof(char *));
    tr__sb sb;
    unsigned char *img;
    tr_st_file *g;
    tr_status st;
    FZ_CHECK(ts && mk && mv);
    for (i = 0; i < n; i++) ts[i] = *tr_st_at(f, i);
    for (i = 0; i < nm; i++) {
        mk[i] = tr_st_metadata_key(f, i);
        mv[i] = tr_st_metadata(f, mk[i]);
        FZ_CHECK(mk[i] && mv[i]);
    }
    tr__sb_init(&sb, fz_ctx);
    st = tr__st_build_header(fz_ctx, "fuzz-rewrite", ts, n, mk, mv, nm, &sb);
    if (st == TR_OK) {
        FZ_CHECK(sb.len % 8 == 0);
        total = 8 + sb.len;
        for (i = 0; i < n; i++) total += ts[i].nbytes;
        img = (unsigned char *)malloc(total);
        FZ_CHECK(img);
        for (i = 0; i < 8; i++) img[i] = (unsigned char)((uint64_t)sb.len >> (8 * i));
        memcpy(img + 8, sb.data, sb.len);
        total = 8 + sb.len;
        for (i = 0; i < n; i++) {
            if (ts[i].nbytes) memcpy(img + total, ts[i].data, ts[i].nbytes);
            total += ts[i].nbytes;
        }
        st = tr_st_open_memory(fz_ctx, img, total, "fuzz-rewrite", &g);
        FZ_CHECK(st == TR_OK);
        FZ_CHECK(tr_st_count(g) == n);
        FZ_CHECK(tr_st_metadata_count(g) == nm);
        for (i = 0; i < n; i++) {
            const tr_st_tensor *a = tr_st_at(f, i), *b = tr_st_at(g, i);
            FZ_CHECK(strcmp(a->name, b->name) == 0 && a->dtype == b->dtype && a->ndim == b->ndim && a->nbytes == b->nbytes);
            FZ_CHECK(memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim) == 0);
            FZ_CHECK(a->nbytes == 0 || memcmp(a->data, b->data, a->nbytes) == 0);
        }
        for (i = 0; i < nm; i++) FZ_CHECK(strcmp(tr_st_metadata(g, mk[i]), mv[i]) == 0);
        tr_st_close(g);
        free(img);
    } else
        FZ_CHECK(st == TR_ERR_OVERFLOW); /* only a header past the size cap may be refused */
    tr__sb_free(&sb);
    free(ts);
    free((void *)mk);
    free((void *)mv);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tr_st_file *f = NULL;
    tr_status st;
    if (!fz_ctx && tr_ctx_create(NULL, &fz_ctx) != TR_OK) abort();
    st = tr_st_open_memory(fz_ctx, data, size, "fuzz", &f);
    if (st == TR_OK) {
        size_t i, n = tr_st_count(f);
        for (i = 0; i < n; i++) {
            const tr_st_tensor *t = tr_st_at(f, i);
            size_t ne = tr_st_numel(t);
            const tr_st_tensor *g = NULL;
            FZ_CHECK(t && tr_st_find(f, t->name) == t);
            FZ_CHECK(tr_st_get(fz_ctx, f, t->name, t->ndim, t->shape, &g) == TR_OK && g == t);
            FZ_CHECK(ne * tr_dtype_size(t->dtype) == t->nbytes);
            FZ_CHECK((const uint8_t *)t->data >= data && (const uint8_t *)t->data + t->nbytes <= data + size);
            if (t->dtype == TR_F32 || t->dtype == TR_BF16 || t->dtype == TR_F16) {
                float *buf = (float *)malloc(ne ? ne * sizeof(float) : 1);
                FZ_CHECK(buf);
                FZ_CHECK(tr_st_read_f32(fz_ctx, t, buf, ne) == TR_OK);
                free(buf);
            } else {
                int64_t *buf = (int64_t *)malloc(ne ? ne * sizeof(int64_t) : 1);
                FZ_CHECK(buf);
                FZ_CHECK(tr_st_read_i64(fz_ctx, t, buf, ne) == TR_OK);
                free(buf);
            }
        }
        for (i = 0; i < tr_st_metadata_count(f); i++) FZ_CHECK(tr_st_metadata(f, tr_st_metadata_key(f, i)) != NULL);
        (void)tr_st_metadata(f, "format");
        (void)tr_st_find(f, "model.inner.H_init");
        fz_reserialize(f);
        tr_st_close(f);
    } else {
        FZ_CHECK(f == NULL);
        FZ_CHECK(st == TR_ERR_FORMAT || st == TR_ERR_OUT_OF_MEMORY);
        FZ_CHECK(strncmp(tr_ctx_last_error(fz_ctx), "fuzz", 4) == 0 && !strchr(tr_ctx_last_error(fz_ctx), '\n')); /* the source first, one line */
    }
    FZ_CHECK(tr_ctx_live_allocs(fz_ctx) == 0);
    return 0;
}
