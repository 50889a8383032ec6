/* tinyrec-data: builds Sudoku, Maze and ARC datasets in the reference layout
   (<out>/{train,test}/dataset.json + all__*.npy, identifiers.json), without Python.

     tinyrec-data sudoku --output-dir data/sudoku --generate 1000 --clues 25 --subsample-size 1000 --num-aug 1000
     tinyrec-data sudoku --output-dir data/sudoku-extreme --source-csv sudoku-extreme/ --subsample-size 1000 --num-aug 1000
     tinyrec-data maze   --output-dir data/maze --generate 1000 --aug
     tinyrec-data arc    --output-dir data/arc1 --input-dir ../shared/data/arc-agi-1 --test-set-name evaluation --num-aug 1000
     tinyrec-data rules  --output-dir data/rules --train-rules 300 --test-rules 20   (ARC task files of hidden rules)

   Run `tinyrec-data <command> --help` for every option. */
#define TINYREC_IMPLEMENTATION
#include "tinyrec.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

typedef struct progress_state {
    int tty;
    char stage[64];
    int last_pct;
    double t0;
} progress_state;

static int on_progress(void *user, const char *stage, int64_t done, int64_t total) {
    progress_state *p = (progress_state *)user;
    int pct = total > 0 ? (int)(100.0 * (double)done / (double)total) : 100, i, w = 30;
    int new_stage = strcmp(stage, p->stage) != 0;
    if (new_stage) {
        if (p->tty && p->stage[0]) fputc('\n', stderr);
        snprintf(p->stage, sizeof p->stage, "%s", stage);
        p->last_pct = -1;
    }
    if (p->tty) {
        fprintf(stderr, "\r%-18s [", stage);
        for (i = 0; i < w; i++) fputc(i < pct * w / 100 ? '#' : '.', stderr);
        fprintf(stderr, "] %3d%%  %lld/%lld  %.1fs", pct, (long long)done, (long long)total, tr_time_seconds() - p->t0);
        fflush(stderr);
    } else if (pct / 10 != p->last_pct / 10 || done == total) {
        fprintf(stderr, "%s: %lld/%lld (%d%%) %.1fs\n", stage, (long long)done, (long long)total, pct, tr_time_seconds() - p->t0);
    }
    p->last_pct = pct;
    return 0;
}

/* One command's options (the common ones: --output-dir DIR (required), --threads N, --quiet). */
static void usage(const char *cmd) {
    fprintf(stderr, "(every command: --output-dir DIR (required), --threads N, --quiet)\n");
    if (!strcmp(cmd, "sudoku"))
        fprintf(stderr,
                "tinyrec-data sudoku --output-dir DIR [options]\n"
                "  --source-csv PATH     a folder with train.csv and test.csv (source,question,answer,rating),\n"
                "                        or one file (CSV or 81-character lines) used as the train source\n"
                "  --test-csv FILE       the test source (default: <source>/test.csv, or generated)\n"
                "  --generate N          generate N train puzzles instead of reading them (default 1000)\n"
                "  --generate-test N     generated test puzzles (default 1000)\n"
                "  --clues K             givens of generated puzzles, 17..81 (default 25)\n"
                "  --subsample-size N    keep N random train puzzles\n"
                "  --min-difficulty R    keep rows with rating >= R\n"
                "  --num-aug N           augmented copies per train puzzle (reference recipe: 1000)\n"
                "  --seed S              (default 0)\n"
                "example: tinyrec-data sudoku --output-dir data/sudoku --generate 20000 --generate-test 200 --clues 50 --num-aug 0\n");
    if (!strcmp(cmd, "maze"))
        fprintf(stderr,
                "tinyrec-data maze --output-dir DIR [options]\n"
                "  --source-csv PATH     a folder with train.csv and test.csv, or one train file ('# SGo' characters)\n"
                "  --test-csv FILE       the test source\n"
                "  --generate N          generated train mazes (default 1000)\n"
                "  --generate-test N     generated test mazes (default 1000)\n"
                "  --size N              side of generated mazes (default 30)\n"
                "  --min-path N          shortest path longer than N moves (default 110: Maze-Hard)\n"
                "  --subsample-size N    keep N random train mazes\n"
                "  --aug                 add the 8 dihedral transforms to train\n"
                "  --seed S              (default 0)\n"
                "example: tinyrec-data maze --output-dir data/maze --generate 1000 --generate-test 100 --size 30\n");
    if (!strcmp(cmd, "arc"))
        fprintf(stderr,
                "tinyrec-data arc --output-dir DIR --input-dir DIR [--input-dir DIR ...] [options]\n"
                "  --input-dir DIR       a folder of subset folders (training/, evaluation/) or one subset folder\n"
                "  --subsets a,b,...     subsets to use, in this order (default: all found, test subset last)\n"
                "  --test-set-name NAME  the subset whose test pairs form the test split (default evaluation)\n"
                "  --num-aug N           augmented versions per task (default 1000)\n"
                "  --puzzle-identifiers-start N   first puzzle id (default 1; 0 is <blank>)\n"
                "  --canvas N            side of the square canvas, 1..30 (default 30: seq_len 900)\n"
                "  --seed S              (default 42)\n"
                "example: tinyrec-data arc --output-dir data/arc1 --input-dir ../ARC-AGI/data --num-aug 1000\n");
    if (!strcmp(cmd, "rules"))
        fprintf(stderr,
                "tinyrec-data rules --output-dir DIR [options]\n"
                "  ARC task files whose hidden rule is a dihedral transform composed with a colour permutation, over\n"
                "  random grids: DIR/training/rule_N.json, DIR/evaluation/rule_N.json (other rules), and both sets as one\n"
                "  file of tasks keyed by name (DIR/training.json, DIR/evaluation.json: tinyrec-adapt, tinyrec-arc-eval --puzzles)\n"
                "  --train-rules N       tasks (rules) for training (default 300)\n"
                "  --test-rules N        tasks with rules not among them (default 20)\n"
                "  --min-side N, --max-side N   grid sides (default 3, 5)\n"
                "  --min-demos N, --max-demos N demonstration pairs (default 3, 4); one test pair\n"
                "  --colors N            cells draw colours 0..N-1 (default 10)\n"
                "  --swaps               the colour map swaps two colours or none: 368 rules (8 x 46) of shared structure\n"
                "  --train-demos N       demonstration pairs of each training task (default: as the others)\n"
                "  --seed S              (default 0)\n"
                "example: tinyrec-data rules --output-dir data/rules && tinyrec-data arc --output-dir data/rules-ds \\\n"
                "           --input-dir data/rules/training --test-set-name training --num-aug 16 --canvas 6\n");
}

/* tinyrec-data rules: the task files of the hidden-rule family (tr_rule_task_generate). */
/* train_demos > 0: the training tasks' demonstration pairs (a base model learns a family from many examples of each
   rule; the evaluation tasks keep ro's 3-4, as a new task comes). */
static int write_rules(tr_ctx *ctx, const char *out, uint64_t seed, long ntrain, long ntest, const tr_rule_options *ro, int train_demos) {
    static const char *sets[2] = {"training", "evaluation"};
    char path[4200];
    int s;
    long i;
    for (s = 0; s < 2; s++) {
        FILE *all;
        tr_rule_options so = *ro;
        if (!s && train_demos > 0) so.min_demos = so.max_demos = train_demos;
        snprintf(path, sizeof path, "%s/%s", out, sets[s]);
        if (tr_mkdir_p(ctx, path) != TR_OK) return fprintf(stderr, "tinyrec-data rules: %s\n", tr_ctx_last_error(ctx)), 1;
        snprintf(path, sizeof path, "%s/%s.json", out, sets[s]);
        if (!(all = fopen(path, "w"))) return fprintf(stderr, "tinyrec-data rules: cannot write %s\n", path), 1;
        fputc('{', all);
        for (i = 0; i < (s ? ntest : ntrain); i++) {
            tr_arc_task t;
            FILE *f;
            long index = s ? ntrain + i : i;
            int e;
            if (tr_rule_task_generate(ctx, seed, (uint64_t)index, &so, &t, NULL, NULL) != TR_OK) return fclose(all), fprintf(stderr, "tinyrec-data rules: %s\n", tr_ctx_last_error(ctx)), 1;
            snprintf(path, sizeof path, "%s/%s/rule_%06ld.json", out, sets[s], index);
            e = !(f = fopen(path, "w")) || tr_arc_task_fput(f, &t) != 0;
            if (f && fclose(f) != 0) e = 1;
            fprintf(all, "%s\n\"rule_%06ld\": ", i ? "," : "", index);
            e |= tr_arc_task_fput(all, &t) != 0;
            tr_arc_task_free(ctx, &t);
            if (e) return fclose(all), fprintf(stderr, "tinyrec-data rules: cannot write %s\n", path), 1;
        }
        fputs("}\n", all);
        if (fclose(all) != 0) return fprintf(stderr, "tinyrec-data rules: cannot write %s/%s.json\n", out, sets[s]), 1;
    }
    printf("rules written to %s: %ld training tasks (%s/training, training.json), %ld evaluation tasks with other rules (%s/evaluation, evaluation.json)\n", out, ntrain, out, ntest, out);
    return 0;
}

static int file_exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}
static int dir_exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static void print_files(const char *out) {
    static const char *splits[2] = {"train", "test"};
    static const char *files[6] = {"dataset.json", "all__inputs.npy", "all__labels.npy", "all__puzzle_identifiers.npy", "all__puzzle_indices.npy", "all__group_indices.npy"};
    char p[4096];
    int s, f;
    struct stat sb;
    for (s = 0; s < 2; s++)
        for (f = 0; f < 6; f++) {
            snprintf(p, sizeof p, "%s/%s/%s", out, splits[s], files[f]);
            if (stat(p, &sb) == 0) printf("  %-60s %12lld bytes\n", p, (long long)sb.st_size);
        }
    snprintf(p, sizeof p, "%s/identifiers.json", out);
    if (stat(p, &sb) == 0) printf("  %-60s %12lld bytes\n", p, (long long)sb.st_size);
    snprintf(p, sizeof p, "%s/test_puzzles.json", out);
    if (stat(p, &sb) == 0) printf("  %-60s %12lld bytes\n", p, (long long)sb.st_size);
}

int main(int argc, char **argv) {
    const char *cmd, *out = NULL, *source = NULL, *test_csv = NULL, *subsets_arg = NULL;
    const char *inputs[64];
    const char *subsets[64];
    int ninputs = 0, nsubsets = 0, quiet = 0, i, threads = 0;
    char train_path[4096], test_path[4096], subsets_buf[4096];
    tr_ctx *ctx = NULL;
    tr_ctx_config cc = tr_ctx_config_default();
    tr_status st = TR_OK;
    tr_build_summary sum;
    progress_state prog;
    tr_sudoku_options so = tr_sudoku_options_default();
    tr_maze_options mo = tr_maze_options_default();
    tr_arc_options ao = tr_arc_options_default();
    tr_rule_options ro = tr_rule_options_default();
    long ntrain_rules = 300, ntest_rules = 20;
    int train_demos = 0;
    int seed_set = 0;
    uint64_t seed = 0;
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fprintf(argc < 2 ? stderr : stdout,
                "usage: tinyrec-data sudoku|maze|arc|rules --output-dir DIR [options]\n"
                "Builds a dataset in the reference layout (train/ and test/ of .npy files and dataset.json) from\n"
                "the reference's CSVs or ARC task folders, or generates Sudoku and mazes; tinyrec-train reads it.\n"
                "tinyrec-data COMMAND --help lists a command's options.\n"
                "example: tinyrec-data sudoku --output-dir data/sudoku --generate 20000 --generate-test 200 --clues 50 --num-aug 0\n");
        return argc < 2 ? 2 : 0;
    }
    cmd = argv[1];
    if (strcmp(cmd, "sudoku") && strcmp(cmd, "maze") && strcmp(cmd, "arc") && strcmp(cmd, "rules")) {
        fprintf(stderr, "tinyrec-data: unknown command '%s' (sudoku, maze, arc, rules)\n", cmd);
        return 2;
    }
    for (i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEEDV()                                                              \
    do {                                                                     \
        if (!v) {                                                            \
            fprintf(stderr, "tinyrec-data %s: %s needs a value\n", cmd, a); \
            return 2;                                                        \
        }                                                                    \
        i++;                                                                 \
    } while (0)
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(cmd);
            return 0;
        } else if (!strcmp(a, "--output-dir")) { NEEDV(); out = v; }
        else if (!strcmp(a, "--seed")) { NEEDV(); seed = strtoull(v, NULL, 10); seed_set = 1; }
        else if (!strcmp(a, "--threads")) { NEEDV(); threads = atoi(v); }
        else if (!strcmp(a, "--quiet")) quiet = 1;
        else if (!strcmp(a, "--source-csv") || !strcmp(a, "--source")) { NEEDV(); source = v; }
        else if (!strcmp(a, "--test-csv")) { NEEDV(); test_csv = v; }
        else if (!strcmp(a, "--generate")) { NEEDV(); so.generate_train = mo.generate_train = atoll(v); }
        else if (!strcmp(a, "--generate-test")) { NEEDV(); so.generate_test = mo.generate_test = atoll(v); }
        else if (!strcmp(a, "--clues")) { NEEDV(); so.clues = atoi(v); }
        else if (!strcmp(a, "--subsample-size")) { NEEDV(); so.subsample_size = mo.subsample_size = atoll(v); }
        else if (!strcmp(a, "--min-difficulty")) { NEEDV(); so.min_difficulty = atoi(v); }
        else if (!strcmp(a, "--num-aug")) { NEEDV(); so.num_aug = ao.num_aug = atoi(v); }
        else if (!strcmp(a, "--size")) { NEEDV(); mo.size = atoi(v); }
        else if (!strcmp(a, "--min-path")) { NEEDV(); mo.min_path = atoi(v); }
        else if (!strcmp(a, "--aug")) mo.aug = 1;
        else if (!strcmp(a, "--input-dir")) {
            NEEDV();
            if (ninputs == 64) { fprintf(stderr, "tinyrec-data: at most 64 --input-dir\n"); return 2; }
            inputs[ninputs++] = v;
        } else if (!strcmp(a, "--subsets")) { NEEDV(); subsets_arg = v; }
        else if (!strcmp(a, "--test-set-name")) { NEEDV(); ao.test_set_name = v; }
        else if (!strcmp(a, "--puzzle-identifiers-start")) { NEEDV(); ao.puzzle_identifiers_start = atoi(v); }
        else if (!strcmp(a, "--canvas")) { NEEDV(); ao.canvas = atoi(v); }
        else if (!strcmp(a, "--train-rules")) { NEEDV(); ntrain_rules = atol(v); }
        else if (!strcmp(a, "--test-rules")) { NEEDV(); ntest_rules = atol(v); }
        else if (!strcmp(a, "--min-side")) { NEEDV(); ro.min_side = atoi(v); }
        else if (!strcmp(a, "--max-side")) { NEEDV(); ro.max_side = atoi(v); }
        else if (!strcmp(a, "--min-demos")) { NEEDV(); ro.min_demos = atoi(v); }
        else if (!strcmp(a, "--max-demos")) { NEEDV(); ro.max_demos = atoi(v); }
        else if (!strcmp(a, "--colors")) { NEEDV(); ro.colors = atoi(v); }
        else if (!strcmp(a, "--swaps")) ro.swaps = 1;
        else if (!strcmp(a, "--train-demos")) { NEEDV(); train_demos = atoi(v); }
        else {
            fprintf(stderr, "tinyrec-data %s: unknown option '%s'\n\n", cmd, a);
            usage(cmd);
            return 2;
        }
#undef NEEDV
    }
    if (!out) {
        fprintf(stderr, "tinyrec-data %s: --output-dir is required\n\n", cmd);
        usage(cmd);
        return 2;
    }
    cc.num_threads = threads;
    if (tr_ctx_create(&cc, &ctx) != TR_OK) {
        fprintf(stderr, "tinyrec-data: cannot create a context\n");
        return 1;
    }
    memset(&prog, 0, sizeof prog);
    prog.tty = isatty(2);
    prog.t0 = tr_time_seconds();
    /* sources: a folder means <folder>/train.csv and <folder>/test.csv */
    train_path[0] = test_path[0] = 0;
    if (!strcmp(cmd, "rules")) {
        long most = ro.swaps ? 368 : 10000000; /* the swap family has 368 rules */
        i = ntrain_rules < 0 || ntest_rules < 0 || ntrain_rules + ntest_rules > most || train_demos < 0 || train_demos > 100
                ? 2 : write_rules(ctx, out, seed, ntrain_rules, ntest_rules, &ro, train_demos);
        if (i == 2) fprintf(stderr, "tinyrec-data rules: --train-rules and --test-rules must be >= 0 (at most %ld together), --train-demos 0..100\n", most);
        tr_ctx_destroy(ctx);
        return i;
    }
    if (source) {
        if (dir_exists(source)) {
            snprintf(train_path, sizeof train_path, "%s/train.csv", source);
            snprintf(test_path, sizeof test_path, "%s/test.csv", source);
            if (!file_exists(test_path)) test_path[0] = 0;
        } else
            snprintf(train_path, sizeof train_path, "%s", source);
    }
    if (test_csv) snprintf(test_path, sizeof test_path, "%s", test_csv);
    if (!strcmp(cmd, "sudoku")) {
        so.train_path = train_path[0] ? train_path : NULL;
        so.test_path = test_path[0] ? test_path : NULL;
        so.seed = seed;
        so.progress = quiet ? NULL : on_progress;
        so.progress_user = &prog;
        st = tr_sudoku_build(ctx, &so, out, &sum);
    } else if (!strcmp(cmd, "maze")) {
        mo.train_path = train_path[0] ? train_path : NULL;
        mo.test_path = test_path[0] ? test_path : NULL;
        mo.seed = seed;
        mo.progress = quiet ? NULL : on_progress;
        mo.progress_user = &prog;
        st = tr_maze_build(ctx, &mo, out, &sum);
    } else {
        if (!ninputs) {
            fprintf(stderr, "tinyrec-data arc: --input-dir is required\n");
            tr_ctx_destroy(ctx);
            return 2;
        }
        if (subsets_arg) {
            char *p;
            snprintf(subsets_buf, sizeof subsets_buf, "%s", subsets_arg);
            for (p = strtok(subsets_buf, ","); p && nsubsets < 64; p = strtok(NULL, ",")) subsets[nsubsets++] = p;
            ao.subsets = subsets;
            ao.num_subsets = nsubsets;
        }
        ao.input_dirs = inputs;
        ao.num_input_dirs = ninputs;
        if (seed_set) ao.seed = seed;
        ao.progress = quiet ? NULL : on_progress;
        ao.progress_user = &prog;
        st = tr_arc_build(ctx, &ao, out, &sum);
    }
    if (prog.tty && prog.stage[0]) fputc('\n', stderr);
    if (st != TR_OK) {
        fprintf(stderr, "tinyrec-data %s: %s (%s)\n", cmd, tr_ctx_last_error(ctx), tr_status_string(st));
        tr_ctx_destroy(ctx);
        return 1;
    }
    printf("%s dataset written to %s in %.2f s\n", cmd, out, sum.seconds);
    printf("  train: %lld examples, %lld puzzles, %lld groups\n", (long long)sum.examples[0], (long long)sum.puzzles[0], (long long)sum.groups[0]);
    printf("  test:  %lld examples, %lld puzzles, %lld groups\n", (long long)sum.examples[1], (long long)sum.puzzles[1], (long long)sum.groups[1]);
    printf("  puzzle identifiers: %lld", (long long)sum.num_identifiers);
    if (sum.rejected) printf(", rows filtered out: %lld", (long long)sum.rejected);
    printf("\nfiles:\n");
    print_files(out);
    tr_ctx_destroy(ctx);
    return 0;
}
