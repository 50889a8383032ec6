/* libFuzzer target for a dataset folder in the reference layout: dataset.json, the five .npy arrays
   and identifiers.json, opened and validated by tr_dataset_open, then read through a sampler.
   Build and run: tests/fuzz/run.sh SECONDS dataset
   An input holds the files one after another, each section ended by the separator line below, in
   the order of fz_files (a missing section is a missing file); tests/fuzz/pack_dataset.sh makes
   seeds from a built dataset. For every input the folder is opened with and without memory
   mapping; when it opens, every example is read, a train sampler draws a few batches and a test
   sampler walks one pass, and every id and token must be in range. Any crash, sanitizer report,
   leak through the context's counters or inconsistency aborts. */
#define TINYREC_IMPLEMENTATION
#include "tinyrec.h"
#include <stdlib.h>
#include <unistd.h>

#define FZ_SEP "\n@@@\n"
static const char *const fz_files[] = {"train/dataset.json", "train/all__inputs.npy", "train/all__labels.npy", "train/all__puzzle_identifiers.npy",
                                       "train/all__puzzle_indices.npy", "train/all__group_indices.npy", "identifiers.json"};
#define FZ_NFILES ((int)(sizeof fz_files / sizeof *fz_files))

static tr_ctx *fz_ctx;
static char fz_dir[256];

#define FZ_CHECK(c) do { if (!(c)) { fprintf(stderr, "fuzz check failed: %s (line %d): %s\n", #c, __LINE__, tr_ctx_last_error(fz_ctx)); abort(); } } while (0)

static const uint8_t *fz_find(const uint8_t *p, const uint8_t *end, const char *sep, size_t n) {
    for (; p + n <= end; p++)
        if (memcmp(p, sep, n) == 0) return p;
    return NULL;
}

static void fz_write_files(const uint8_t *data, size_t size) {
    const uint8_t *p = data, *end = data + size;
    int i;
    for (i = 0; i < FZ_NFILES; i++) {
        char path[512];
        const uint8_t *e = p ? fz_find(p, end, FZ_SEP, strlen(FZ_SEP)) : NULL;
        snprintf(path, sizeof path, "%s/%s", fz_dir, fz_files[i]);
        remove(path);
        if (p) {
            FILE *f = fopen(path, "wb");
            size_t n = (size_t)((e ? e : end) - p);
            FZ_CHECK(f && fwrite(p, 1, n, f) == n && fclose(f) == 0);
        }
        p = e ? e + strlen(FZ_SEP) : NULL;
    }
}

static void fz_use(const tr_dataset *ds) {
    const tr_dataset_meta *m = &ds->meta;
    int32_t *in = (int32_t *)malloc((size_t)m->seq_len * sizeof(int32_t)), *lab = (int32_t *)malloc((size_t)m->seq_len * sizeof(int32_t));
    tr_sampler_config sc = tr_sampler_config_default();
    tr_sampler *s;
    int set, k;
    int64_t ex;
    FZ_CHECK(in && lab);
    for (set = 0; set < ds->num_sets; set++)
        for (ex = 0; ex < ds->sets[set].num_examples; ex++) {
            int j;
            tr_dataset_example(ds, set, ex, in, lab);
            for (j = 0; j < m->seq_len; j++) {
                FZ_CHECK(in[j] >= 0 && in[j] < m->vocab_size);
                FZ_CHECK(lab[j] == TR_IGNORE_LABEL || (lab[j] >= 0 && lab[j] < m->vocab_size));
            }
        }
    free(in), free(lab);
    sc.global_batch_size = 3, sc.seed = 1;
    for (sc.test_mode = 0; sc.test_mode < 2; sc.test_mode++) {
        if (tr_sampler_create(fz_ctx, ds, &sc, &s) != TR_OK) continue; /* e.g. nothing to sample */
        for (k = 0; k < 8; k++) {
            tr_batch b;
            tr_batch_info bi;
            int r;
            if (tr_sampler_next(s, &b, &bi) != TR_OK || bi.end) break;
            for (r = 0; r < b.batch_size; r++) FZ_CHECK(b.puzzle_identifiers[r] >= 0 && b.puzzle_identifiers[r] < m->num_puzzle_identifiers);
        }
        tr_sampler_destroy(s);
    }
}

/* At exit the folder goes, with the files the last input left (a crash keeps them). */
static void fz_cleanup(void) {
    char path[512];
    int i;
    for (i = 0; i < FZ_NFILES; i++) snprintf(path, sizeof path, "%s/%s", fz_dir, fz_files[i]), remove(path);
    snprintf(path, sizeof path, "%s/train", fz_dir), remove(path);
    remove(fz_dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int flags;
    if (!fz_ctx) {
        char sub[300];
        const char *tmp = getenv("TMPDIR");
        snprintf(fz_dir, sizeof fz_dir, "%s/tinyrec-fuzz-dataset-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (tr_ctx_create(NULL, &fz_ctx) != TR_OK || !mkdtemp(fz_dir)) abort();
        snprintf(sub, sizeof sub, "%s/train", fz_dir);
        if (mkdir(sub, 0700) != 0) abort();
        atexit(fz_cleanup);
    }
    fz_write_files(data, size);
    for (flags = 0; flags < 2; flags++) {
        tr_dataset *ds = NULL;
        tr_status st = tr_dataset_open(fz_ctx, fz_dir, "train", flags ? TR_DATASET_NO_MMAP : 0, &ds);
        if (st == TR_OK) {
            fz_use(ds);
            tr_dataset_close(ds);
        } else {
            FZ_CHECK(ds == NULL);
            FZ_CHECK(st == TR_ERR_FORMAT || st == TR_ERR_UNSUPPORTED || st == TR_ERR_OVERFLOW || st == TR_ERR_IO || st == TR_ERR_NOT_FOUND);
            FZ_CHECK(strstr(tr_ctx_last_error(fz_ctx), fz_dir) != NULL || strstr(tr_ctx_last_error(fz_ctx), "train") != NULL);
            FZ_CHECK(!strchr(tr_ctx_last_error(fz_ctx), '\n'));
        }
        FZ_CHECK(tr_ctx_live_allocs(fz_ctx) == 0);
    }
    return 0;
}
