/* The puzzle readers under fuzzing: one input runs one reader (tr_sudoku_parse, tr_maze_parse or
   tr_arc_task_parse + tr_arc_task_from_json) strictly and with on_skip, and checks what they
   promise. Shared by the targets fuzz_sudoku.c, fuzz_maze.c and fuzz_arc.c (make test replays their
   seeds, tests/fuzz/corpus_NAME/, and findings, tests/fuzz/regress_NAME/). The first byte of an input picks the options; the rest is the text. Include after
   tinyrec.h with the implementation. */
#ifndef TINYREC_FUZZ_READERS_H
#define TINYREC_FUZZ_READERS_H
#include <string.h>

enum { FZ_SUDOKU, FZ_MAZE, FZ_ARC };

typedef struct fz_skips {
    int64_t n, last_line;
    int out_of_order;
} fz_skips;

static void fz_on_skip(void *user, int64_t line, const char *reason) {
    fz_skips *s = (fz_skips *)user;
    if (line < 1 || !reason || !reason[0]) s->out_of_order = 1;
    s->n++;
    s->last_line = line;
}

/* NULL when the reader kept its promises on this input, else what it broke. */
static const char *fz_reader(tr_ctx *ctx, int which, const uint8_t *data, size_t size) {
    const char *text = size ? (const char *)data + 1 : "";
    size_t len = size ? size - 1 : 0;
    int flags = size ? data[0] : 0, pass;
    for (pass = 0; pass < 2; pass++) { /* 0: strict, 1: malformed records skipped */
        tr_read_options o = tr_read_options_default();
        fz_skips sk;
        tr_status st;
        memset(&sk, 0, sizeof sk);
        o.puzzles_only = flags & 1;
        o.min_rating = flags & 2 ? (flags >> 4) : -1;
        if (pass) o.on_skip = fz_on_skip, o.user = &sk;
        if (which == FZ_SUDOKU) {
            tr_sudoku_set s;
            int64_t i, rej = -1;
            st = tr_sudoku_parse(ctx, text, len, "fuzz", &o, &s, &rej);
            if (st == TR_OK) {
                if (!pass && s.count < 1) return "sudoku: strict success without puzzles";
                for (i = 0; i < s.count; i++) {
                    if (!tr_sudoku_check(s.puzzles + i * 81, s.solutions + i * 81)) return "sudoku: a solution that does not solve its puzzle";
                    if (s.lines[i] < 1 || (i && s.lines[i] <= s.lines[i - 1])) return "sudoku: lines not increasing";
                }
                if (rej < 0) return "sudoku: rejected not set";
            } else if (s.count || s.puzzles)
                return "sudoku: a failed call left a set";
            tr_sudoku_set_free(ctx, &s);
        } else if (which == FZ_MAZE) {
            tr_maze_set s;
            int64_t i;
            o.side = (flags >> 1) & 7 ? ((flags >> 1) & 7) + 1 : 0; /* 0, or 2..8 */
            st = tr_maze_parse(ctx, text, len, "fuzz", &o, &s);
            if (st == TR_OK) {
                size_t cells = (size_t)s.n * (size_t)s.n, k;
                if (!pass && s.count < 1) return "maze: strict success without mazes";
                if (s.count && (s.n < 2 || (o.side && s.n != o.side))) return "maze: wrong side";
                for (i = 0; i < s.count; i++) {
                    for (k = 0; k < cells; k++)
                        if (!strchr(TR_MAZE_CHARSET, s.mazes[i * cells + k]) || !s.mazes[i * cells + k] || !strchr(TR_MAZE_CHARSET, s.solutions[i * cells + k]) || !s.solutions[i * cells + k])
                            return "maze: a character outside the charset";
                    if (s.lines[i] < 1 || (i && s.lines[i] < s.lines[i - 1])) return "maze: lines not increasing";
                }
            } else if (s.count || s.mazes)
                return "maze: a failed call left a set";
            tr_maze_set_free(ctx, &s);
        } else {
            tr_arc_task t;
            tr_json *root = NULL;
            int k;
            if (!pass) st = tr_arc_task_parse(ctx, text, len, "fuzz", &t);
            else {
                st = tr_json_parse(ctx, text, len, "fuzz", &root);
                if (st == TR_OK) st = tr_arc_task_from_json(ctx, root, "fuzz", &o, &t);
                tr_json_free(ctx, root);
            }
            if (st == TR_OK) {
                for (k = 0; k < t.num_train + t.num_test; k++) {
                    const tr_arc_pair *p = &t.pairs[k];
                    int c;
                    if (p->input.h < 0 || p->input.h > 30 || p->input.w < 0 || p->input.w > 30 || p->output.h < 0 || p->output.h > 30) return "arc: a grid beyond 30x30";
                    if ((p->input.h == 0) != (p->input.w == 0) || (!pass && p->input.h == 0)) return "arc: an empty input grid";
                    for (c = 0; c < p->input.h * p->input.w; c++)
                        if (p->input.cells[c] > 9) return "arc: a colour beyond 9";
                }
                if (!pass && t.num_train + t.num_test < 1) return "arc: strict success without pairs";
            } else if (t.pairs)
                return "arc: a failed call left pairs";
            tr_arc_task_free(ctx, &t);
        }
        if (st != TR_OK) {
            if (st != TR_ERR_FORMAT) return "a status other than TR_ERR_FORMAT";
            if (strncmp(tr_ctx_last_error(ctx), "fuzz", 4) != 0) return "an error that does not name the input first";
            if (strchr(tr_ctx_last_error(ctx), '\n')) return "an error of more than one line";
            if (pass && which != FZ_ARC) return "a format error although malformed records are skipped";
        }
        if (sk.out_of_order) return "a skipped record without a line or reason";
        if (tr_ctx_live_allocs(ctx) != 0) return "a leak";
    }
    return NULL;
}

#ifdef FZ_TARGET
static tr_ctx *fz_ctx;
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *why;
    if (!fz_ctx) {
        tr_ctx_config cc = tr_ctx_config_default();
        cc.num_threads = 1;
        if (tr_ctx_create(&cc, &fz_ctx) != TR_OK) abort();
    }
    if ((why = fz_reader(fz_ctx, FZ_TARGET, data, size)) != NULL) {
        fprintf(stderr, "fuzz check failed: %s: %s\n", why, tr_ctx_last_error(fz_ctx));
        abort();
    }
    return 0;
}
#endif
#endif
