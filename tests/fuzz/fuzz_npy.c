/* libFuzzer target for the .npy reader.
   Build and run: tests/fuzz/run.sh SECONDS npy
   For every input: parse it from memory; if it parses, the data must lie inside the input and
   every element must read; then the header the writer would emit for the same dtype and shape,
   followed by the same data, must parse back to the same array. Any crash, sanitizer report, leak
   through the context's counters or inconsistency aborts. */
#define TINYREC_IMPLEMENTATION
#include "tinyrec.h"

static tr_ctx *fz_ctx;

#define FZ_CHECK(c) do { if (!(c)) { fprintf(stderr, "fuzz check failed: %s (line %d): %s\n", #c, __LINE__, tr_ctx_last_error(fz_ctx)); abort(); } } while (0)

static void fz_rewrite(const tr_npy *a) {
    char hdr[1024];
    size_t hl = tr__npy_header(hdr, sizeof hdr, a->dtype, a->ndim, a->shape), nbytes = a->count * a->itemsize;
    unsigned char *img;
    tr_npy b;
    int i;
    if (!hl) return; /* a shape too long for the writer's header */
    img = (unsigned char *)malloc(hl + nbytes + 1);
    FZ_CHECK(img);
    memcpy(img, hdr, hl);
    if (nbytes) memcpy(img + hl, a->data, nbytes);
    FZ_CHECK(tr_npy_parse(fz_ctx, img, hl + nbytes, "fuzz-rewrite", &b) == TR_OK);
    FZ_CHECK(b.dtype == a->dtype && b.ndim == a->ndim && b.count == a->count && b.itemsize == a->itemsize);
    for (i = 0; i < a->ndim; i++) FZ_CHECK(b.shape[i] == a->shape[i]);
    FZ_CHECK(nbytes == 0 || memcmp(b.data, a->data, nbytes) == 0);
    tr_npy_close(fz_ctx, &b);
    free(img);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tr_npy a;
    tr_status st;
    if (!fz_ctx && tr_ctx_create(NULL, &fz_ctx) != TR_OK) abort();
    st = tr_npy_parse(fz_ctx, data, size, "fuzz", &a);
    if (st == TR_OK) {
        size_t i, prod = 1;
        uint64_t acc = 0; /* unsigned: the sum may wrap */
        int d;
        for (d = 0; d < a.ndim; d++) prod *= (size_t)a.shape[d];
        FZ_CHECK(prod == a.count && a.ndim <= TR_NPY_MAX_DIMS);
        FZ_CHECK(a.itemsize == (a.dtype == TR_NPY_U8 ? 1u : a.dtype == TR_NPY_I32 ? 4u : 8u));
        FZ_CHECK(a.data_offset + a.count * a.itemsize <= size);
        FZ_CHECK(a.count == 0 || (const uint8_t *)a.data == data + a.data_offset);
        for (i = 0; i < a.count; i++) acc += (uint64_t)tr_npy_get(&a, i);
        (void)acc;
        fz_rewrite(&a);
        tr_npy_close(fz_ctx, &a);
    } else {
        FZ_CHECK(st == TR_ERR_FORMAT || st == TR_ERR_UNSUPPORTED || st == TR_ERR_OVERFLOW);
        FZ_CHECK(strncmp(tr_ctx_last_error(fz_ctx) + (tr_ctx_last_error(fz_ctx)[0] == '\''), "fuzz", 4) == 0 && !strchr(tr_ctx_last_error(fz_ctx), '\n')); /* the source (in quotes) first, one line */
    }
    FZ_CHECK(tr_ctx_live_allocs(fz_ctx) == 0);
    return 0;
}
