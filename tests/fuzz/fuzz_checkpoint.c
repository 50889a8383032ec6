/* libFuzzer target for model checkpoints and trainer state files (safetensors with the model's
   config in the metadata), through the loaders a resumed run calls.
   Build and run: tests/fuzz/run.sh SECONDS checkpoint
   For every input, written to a file: read its config; load it as a model (under a 64 MiB memory
   limit, so that a config claiming a huge model is refused, not allocated); load it as weights into
   a fixed small model; restore it as the trainer state of a fixed small trainer. A failed load must
   leave the model and trainer exactly as they were. Any crash, sanitizer report, leak through the
   context's counters or inconsistency aborts. Seeds: a model file and a trainer state file of the
   small model below (written by this target when FUZZ_WRITE_SEEDS names a folder). */
#define TINYREC_IMPLEMENTATION
#include "tinyrec.h"
#include <stdlib.h>
#include <unistd.h>

static tr_ctx *fz_ctx;
static tr_model *fz_model;
static tr_trainer *fz_trainer;
static char fz_path[256];
static float *fz_snap;
static size_t fz_snap_n;

#define FZ_CHECK(c) do { if (!(c)) { fprintf(stderr, "fuzz check failed: %s (line %d): %s\n", #c, __LINE__, tr_ctx_last_error(fz_ctx)); abort(); } } while (0)

/* Every tensor of the fixed model, concatenated (into buf when non-NULL); returns the count. */
static size_t fz_tensors(float *buf) {
    size_t n = 0;
    int i;
    for (i = 0; i < tr_model_num_tensors(fz_model); i++) {
        tr_tensor_view v;
        FZ_CHECK(tr_model_tensor(fz_model, i, &v) == TR_OK);
        if (buf) memcpy(buf + n, v.data, v.numel * sizeof(float));
        n += v.numel;
    }
    return n;
}

static void fz_init(void) {
    tr_ctx_config cc = tr_ctx_config_default();
    tr_model_config c;
    tr_train_config tc = tr_train_config_default();
    const char *tmp = getenv("TMPDIR"), *seeds = getenv("FUZZ_WRITE_SEEDS");
    cc.device = "cpu", cc.num_threads = 1, cc.memory_limit = (size_t)64 << 20;
    if (tr_ctx_create(&cc, &fz_ctx) != TR_OK) abort();
    FZ_CHECK(tr_model_config_preset(&c, "trm-tiny") == TR_OK);
    c.vocab_size = 5, c.seq_len = 4, c.hidden_size = 8, c.num_heads = 2, c.L_layers = 1, c.puzzle_emb_ndim = 8, c.puzzle_emb_len = 1;
    c.num_puzzle_identifiers = 3, c.mlp_t = 0, c.pos_encodings = TR_POS_ROPE, c.halt_max_steps = 2;
    FZ_CHECK(tr_model_create(fz_ctx, &c, &fz_model) == TR_OK);
    tc.global_batch_size = 2;
    FZ_CHECK(tr_trainer_create(fz_model, &tc, &fz_trainer) == TR_OK);
    if (seeds) { /* one step, so that moments, EMA and carry are not all zero */
        int32_t in[8] = {1, 2, 3, 4, 4, 3, 2, 1}, lab[8] = {2, 3, 4, 1, 1, 2, 3, 4}, ids[2] = {1, 2};
        tr_batch b = {in, lab, ids, 2};
        char p[512];
        FZ_CHECK(tr_trainer_step(fz_trainer, &b, NULL) == TR_OK);
        snprintf(p, sizeof p, "%s/model", seeds);
        FZ_CHECK(tr_model_save(fz_model, p, NULL) == TR_OK);
        snprintf(p, sizeof p, "%s/state", seeds);
        FZ_CHECK(tr_trainer_save(fz_trainer, p, "sampler", 7) == TR_OK);
    }
    snprintf(fz_path, sizeof fz_path, "%s/tinyrec-fuzz-checkpoint-%d.safetensors", tmp && *tmp ? tmp : "/tmp", (int)getpid());
    fz_snap_n = fz_tensors(NULL);
    fz_snap = (float *)malloc(fz_snap_n * sizeof(float));
    FZ_CHECK(fz_snap);
    fz_tensors(fz_snap);
}

static void fz_check_unchanged(void) {
    float *now = (float *)malloc(fz_snap_n * sizeof(float));
    FZ_CHECK(now);
    fz_tensors(now);
    FZ_CHECK(memcmp(now, fz_snap, fz_snap_n * sizeof(float)) == 0);
    free(now);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FILE *f;
    tr_model_config cfg;
    tr_model *m = NULL;
    char extra[64];
    size_t extra_len = 0;
    long live;
    tr_status st;
    if (!fz_ctx) fz_init();
    live = tr_ctx_live_allocs(fz_ctx);
    f = fopen(fz_path, "wb");
    FZ_CHECK(f && fwrite(data, 1, size, f) == size && fclose(f) == 0);
    if (tr_checkpoint_read_config(fz_ctx, fz_path, &cfg) == TR_OK) FZ_CHECK(tr_model_config_validate(fz_ctx, &cfg) == TR_OK);
    if ((st = tr_model_load(fz_ctx, fz_path, NULL, &m)) == TR_OK) {
        FZ_CHECK(tr_model_config_validate(fz_ctx, tr_model_get_config(m)) == TR_OK);
        tr_model_destroy(m);
    } else
        FZ_CHECK(m == NULL && strstr(tr_ctx_last_error(fz_ctx), fz_path) != NULL && !strchr(tr_ctx_last_error(fz_ctx), '\n'));
    if (tr_model_load_weights(fz_model, fz_path, NULL) == TR_OK) fz_tensors(fz_snap);
    else fz_check_unchanged();
    if (tr_trainer_load(fz_trainer, fz_path, extra, sizeof extra, &extra_len) == TR_OK) {
        FZ_CHECK(extra_len <= sizeof extra);
        fz_tensors(fz_snap);
    } else
        fz_check_unchanged();
    FZ_CHECK(tr_ctx_live_allocs(fz_ctx) == live);
    remove(fz_path);
    return 0;
}
