/* libFuzzer target for settings text as tinyrec-train's train_config.txt and command line give it:
   lines "preset=NAME" then "key=value", through tr_preset_find and tr_config_set.
   Build and run: tests/fuzz/run.sh SECONDS config
   Every accepted value must format (tr_key_format) to text that parses back to the same field; a
   rejected value must leave the configs as they were and give a reason naming the key; the final
   configs either validate or are refused with a reason. Any crash, sanitizer report or
   inconsistency aborts. */
#define TINYREC_IMPLEMENTATION
#include "tinyrec.h"

static tr_ctx *fz_ctx;

#define FZ_CHECK(c) do { if (!(c)) { fprintf(stderr, "fuzz check failed: %s (line %d): %s\n", #c, __LINE__, tr_ctx_last_error(fz_ctx)); abort(); } } while (0)

static void fz_line(tr_model_config *mc, tr_train_config *tc, char *line) {
    char *eq = strchr(line, '=');
    const tr_key *k;
    tr_model_config mc0 = *mc;
    tr_train_config tc0 = *tc;
    tr_status st;
    if (!eq) return;
    *eq = 0;
    if (!strcmp(line, "preset")) {
        tr_preset p;
        if (tr_preset_find(eq + 1, &p) == TR_OK) {
            FZ_CHECK(tr_model_config_validate(fz_ctx, &p.model) == TR_OK);
            *mc = p.model, *tc = p.train;
        }
        return;
    }
    k = tr_config_find_key(line);
    st = tr_config_set(fz_ctx, mc, tc, line, eq + 1);
    if (st == TR_OK) {
        char text[2048];
        void *base = k->in == TR_KEY_IN_MODEL ? (void *)mc : (void *)tc;
        tr_model_config mc1 = *mc;
        tr_train_config tc1 = *tc;
        FZ_CHECK(k != NULL);
        FZ_CHECK(tr_key_format(k, base, text, sizeof text) == TR_OK);
        FZ_CHECK(tr_key_parse(fz_ctx, k, base, text) == TR_OK);
        FZ_CHECK(memcmp(mc, &mc1, sizeof mc1) == 0 && memcmp(tc, &tc1, sizeof tc1) == 0);
    } else {
        tr__qbuf shown; /* reasons quote a name through tr__quote: escaped, the first 48 bytes of a long one and its length */
        FZ_CHECK(st == (k ? TR_ERR_INVALID_ARG : TR_ERR_NOT_FOUND));
        FZ_CHECK(strstr(tr_ctx_last_error(fz_ctx), k ? line : tr__quote(&shown, line)) != NULL);
        FZ_CHECK(strchr(tr_ctx_last_error(fz_ctx), '\n') == NULL);
        FZ_CHECK(memcmp(mc, &mc0, sizeof mc0) == 0 && memcmp(tc, &tc0, sizeof tc0) == 0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tr_model_config mc;
    tr_train_config tc = tr_train_config_default();
    char *text = (char *)malloc(size + 1), *line, *next;
    if (!fz_ctx && tr_ctx_create(NULL, &fz_ctx) != TR_OK) abort();
    FZ_CHECK(text && tr_model_config_preset(&mc, "trm-tiny") == TR_OK);
    memcpy(text, data, size);
    text[size] = 0;
    for (line = text; line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        fz_line(&mc, &tc, line);
    }
    if (tr_model_config_validate(fz_ctx, &mc) != TR_OK) FZ_CHECK(tr_ctx_last_error(fz_ctx)[0] != 0);
    free(text);
    return 0;
}
