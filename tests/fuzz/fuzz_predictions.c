/* libFuzzer target for tinyrec-arc-eval's inputs: a test_puzzles.json (the tasks and their test
   solutions) and a predictions JSONL, through the ARC voting of >>data.
   Build and run: tests/fuzz/run.sh SECONDS predictions
   An input is the puzzles file, the separator line below, then prediction lines. The votes are
   created, every line parsed (tr_arc_prediction_parse) and added, then ranked, scored and written
   as a submission; every answer is read back. Errors must name the line; the votes must free all
   they took. Any crash, sanitizer report, leak or inconsistency aborts. */
#define TINYREC_IMPLEMENTATION
#include "tinyrec.h"

#define FZ_SEP "\n@@@\n"
static tr_ctx *fz_ctx;
static FILE *fz_null;

#define FZ_CHECK(c) do { if (!(c)) { fprintf(stderr, "fuzz check failed: %s (line %d): %s\n", #c, __LINE__, tr_ctx_last_error(fz_ctx)); abort(); } } while (0)

/* A reason starts with its source and stays on one line. */
static int fz_names_first(const char *e, const char *src) { return strncmp(e, src, strlen(src)) == 0 && !strchr(e, '\n'); }

static const char *fz_find(const char *p, const char *end, const char *sep) {
    size_t n = strlen(sep);
    for (; p + n <= end; p++)
        if (memcmp(p, sep, n) == 0) return p;
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *text = (const char *)data, *end = text + size, *sep = fz_find(text, end, FZ_SEP), *p;
    tr_arc_votes *v = NULL;
    long line = 0;
    if (!fz_ctx && (tr_ctx_create(NULL, &fz_ctx) != TR_OK || !(fz_null = fopen("/dev/null", "w")))) abort();
    if (tr_arc_votes_create(fz_ctx, text, sep ? (size_t)(sep - text) : size, "puzzles", &v) != TR_OK) {
        FZ_CHECK(v == NULL && strstr(tr_ctx_last_error(fz_ctx), "puzzles") != NULL);
        FZ_CHECK(fz_names_first(tr_ctx_last_error(fz_ctx), "puzzles"));
        FZ_CHECK(tr_ctx_live_allocs(fz_ctx) == 0);
        return 0;
    }
    for (p = sep ? sep + strlen(FZ_SEP) : end; p < end;) {
        const char *e = memchr(p, '\n', (size_t)(end - p));
        char where[32];
        tr_arc_prediction pr;
        if (!e) e = end;
        snprintf(where, sizeof where, "preds:%ld", ++line);
        if (tr_arc_prediction_parse(fz_ctx, p, (size_t)(e - p), where, &pr) == TR_OK) {
            FZ_CHECK(pr.grid.h >= 0 && pr.grid.h <= TR_ARC_MAX_GRID && pr.grid.w >= 0 && pr.grid.w <= TR_ARC_MAX_GRID);
            if (tr_arc_votes_add(v, pr.puzzle, pr.test_index, &pr.grid, pr.q_halt, NULL, where) != TR_OK) FZ_CHECK(strstr(tr_ctx_last_error(fz_ctx), where) != NULL && fz_names_first(tr_ctx_last_error(fz_ctx), where));
        } else
            FZ_CHECK(strstr(tr_ctx_last_error(fz_ctx), where) != NULL && fz_names_first(tr_ctx_last_error(fz_ctx), where));
        p = e + 1;
    }
    tr_arc_votes_rank(v);
    {
        static const int ks[] = {1, 2, 10};
        double pass[3], all[3];
        int t, i, r;
        FZ_CHECK(tr_arc_votes_score(v, ks, 3, pass, all) == TR_OK);
        for (i = 0; i < 3; i++) FZ_CHECK(pass[i] >= 0 && pass[i] <= 1 && all[i] >= 0 && all[i] <= pass[i] + 1e-12);
        FZ_CHECK(tr_arc_votes_fput_submission(fz_null, v) == 0);
        for (t = 0; t < v->num_tasks; t++)
            for (i = 0; i < v->tasks[t].num_test; i++)
                for (r = 0; r < 3; r++) {
                    tr_arc_grid g;
                    int64_t votes = 0;
                    double q = 0;
                    if (tr_arc_votes_answer(v, t, i, r, &g, &votes, &q)) FZ_CHECK(votes >= 1 && q >= 0 && q <= 1 && g.h <= TR_ARC_MAX_GRID && g.w <= TR_ARC_MAX_GRID);
                }
    }
    tr_arc_votes_destroy(v);
    FZ_CHECK(tr_ctx_live_allocs(fz_ctx) == 0);
    return 0;
}
