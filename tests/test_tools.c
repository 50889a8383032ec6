/* The user programs tinyrec-devices and tinyrec-arc-eval, run as a user would (from the repository
   root, after `make all`): the device report and its JSON, the ARC voting and pass@K logic on a
   hand-made predictions file with known answers, a smoke run of the evaluator with a tiny untrained
   model on a tiny ARC dataset built from three ARC-AGI-1 tasks, and bad command lines; and
   tools/convert_checkpoint.py on an HRM run directory in the reference's layout written by the
   PyTorch twin, loaded back by the library. */
#define TINYREC_IMPLEMENTATION
#include "test_util.h"
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef TINYREC_TEST_BUILD_DIR /* the Makefile's build folder (build-noomp/ for OPENMP=0) */
#define TINYREC_TEST_BUILD_DIR "build"
#endif
#define DEVICES TINYREC_TEST_BUILD_DIR "/tinyrec-devices"
#define ARC_EVAL TINYREC_TEST_BUILD_DIR "/tinyrec-arc-eval"
#define DATA_TOOL TINYREC_TEST_BUILD_DIR "/tinyrec-data"
#define ARC1 "../shared/data/arc-agi-1"

static char g_tmp[256];

static int setup_tmp(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/tinyrec_tools_XXXXXX");
    if (!mkdtemp(g_tmp)) return -1;
    return 0;
}
static int teardown_tmp(void **state) {
    char cmd[512];
    (void)state;
    if (g_tmp[0] && strncmp(g_tmp, "/tmp/tinyrec_tools_", 19) == 0) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
        if (system(cmd) != 0) return -1;
    }
    return 0;
}

static int file_exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* Runs a shell command with stdout and stderr captured into *out (malloc'd, NUL-terminated).
   Returns the exit status, or -1000 - signal if it was killed by a signal (a crash). */
static int run_cmd(const char *cmd, char **out) {
    char full[8192], path[320];
    int st, rc;
    FILE *f;
    long n;
    snprintf(path, sizeof path, "%s/cmd_out.txt", g_tmp);
    snprintf(full, sizeof full, "OMP_WAIT_POLICY=passive; export OMP_WAIT_POLICY; ( %s ) > '%s' 2>&1", cmd, path);
    st = system(full);
    if (WIFSIGNALED(st)) rc = -1000 - WTERMSIG(st);
    else rc = WEXITSTATUS(st);
    /* the shell reports a child killed by a signal as 128 + signal */
    if (rc > 128 && rc < 160) rc = -1000 - (rc - 128);
    *out = NULL;
    f = fopen(path, "rb");
    if (f) {
        fseek(f, 0, SEEK_END);
        n = ftell(f);
        fseek(f, 0, SEEK_SET);
        *out = (char *)malloc((size_t)(n > 0 ? n : 0) + 1);
        if (*out) {
            size_t got = n > 0 ? fread(*out, 1, (size_t)n, f) : 0;
            (*out)[got] = 0;
        }
        fclose(f);
    }
    if (!*out) *out = (char *)calloc(1, 1);
    return rc;
}

static int have_python(void) { return system("command -v python3 >/dev/null 2>&1") == 0; }

static void need_programs(void) {
    if (!file_exists(DEVICES) || !file_exists(ARC_EVAL)) fail_msg("run `make all` first: %s or %s is missing", DEVICES, ARC_EVAL);
}

/* Reads "ARC/<name>: value" from the evaluator's output. */
static double metric(const char *out, const char *name) {
    char key[96];
    const char *p;
    snprintf(key, sizeof key, "ARC/%s: ", name);
    p = strstr(out, key);
    if (!p) fail_msg("no '%s' in the output:\n%s", key, out);
    return atof(p + strlen(key));
}

/* ---- tinyrec-devices ------------------------------------------------------------------------ */
static void test_devices_report(void **state) {
    char *out, cmd[512];
    int rc;
    (void)state;
    need_programs();
    rc = run_cmd(DEVICES " --threads 1", &out);
    if (rc != 0) fail_msg("tinyrec-devices exited %d:\n%s", rc, out);
    assert_non_null(strstr(out, "scalar  PASS"));
    assert_null(strstr(out, "FAIL"));
    assert_non_null(strstr(out, "auto picks: cpu"));
    assert_non_null(strstr(out, "Batch size for preset trm-sudoku-mlp"));
    assert_non_null(strstr(out, "OpenCL"));
    /* every kernel set the CPU supports ran and passed */
    {
        tr_ctx *ctx = tu_ctx(1, 0);
        if (tr_ctx_set_simd(ctx, "avx2") == TR_OK) assert_non_null(strstr(out, "avx2    PASS"));
        if (tr_ctx_set_simd(ctx, "avx512") == TR_OK) assert_non_null(strstr(out, "avx512  PASS"));
        if (tr_ctx_set_simd(ctx, "neon") == TR_OK) assert_non_null(strstr(out, "neon    PASS"));
        tr_ctx_destroy(ctx);
    }
    if (strstr(out, "Portable Computing Language")) assert_non_null(strstr(out, "host-unified (zero-copy transfers)")); /* PoCL says so */
    free(out);
    rc = run_cmd(DEVICES " --threads 1 --preset trm-arc --json", &out);
    if (rc != 0) fail_msg("tinyrec-devices --json exited %d:\n%s", rc, out);
    assert_true(out[0] == '{');
    assert_non_null(strstr(out, "\"pass\": true"));
    assert_non_null(strstr(out, "\"preset\": \"trm-arc\""));
    free(out);
    if (have_python()) {
        snprintf(cmd, sizeof cmd,
                 DEVICES " --threads 1 --json 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); "
                         "assert d[\"selftest\"][\"pass\"] and d[\"auto\"][\"device\"] == \"cpu\" and d[\"batch\"][\"devices\"][0][\"train\"] >= 1'");
        rc = run_cmd(cmd, &out);
        if (rc != 0) fail_msg("the --json report does not parse:\n%s", out);
        free(out);
    }
}

static void test_devices_bad_cli(void **state) {
    static const char *const bad[] = {" --bogus", " --preset nope", " --threads 0", " --threads x", " --preset"};
    size_t i;
    char *out, cmd[256];
    (void)state;
    need_programs();
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc;
        snprintf(cmd, sizeof cmd, DEVICES "%s", bad[i]);
        rc = run_cmd(cmd, &out);
        if (rc <= 0 || rc >= 128) fail_msg("'%s' exited %d:\n%s", cmd, rc, out);
        assert_non_null(strstr(out, "tinyrec-devices:"));
        free(out);
    }
    assert_int_equal(run_cmd(DEVICES " --help", &out), 0);
    assert_non_null(strstr(out, "--preset"));
    free(out);
}

/* ---- ARC voting on hand-made predictions ----------------------------------------------------- */
typedef struct g2 {
    int h, w;
    uint8_t c[900];
} g2;

static g2 mkgrid(int h, int w, const int *cells) {
    g2 g;
    int i;
    g.h = h, g.w = w;
    for (i = 0; i < h * w; i++) g.c[i] = (uint8_t)cells[i];
    return g;
}
static void write_grid(FILE *f, const g2 *g) {
    int r, c;
    fputc('[', f);
    for (r = 0; r < g->h; r++) {
        fputs(r ? ",[" : "[", f);
        for (c = 0; c < g->w; c++) fprintf(f, c ? ",%d" : "%d", g->c[r * g->w + c]);
        fputc(']', f);
    }
    fputc(']', f);
}
static void pred_grid(FILE *f, const char *puzzle, int test, const g2 *g, double q) {
    fprintf(f, "{\"puzzle\": \"%s\", \"test_index\": %d, \"q_halt\": %.17g, \"grid\": ", puzzle, test, q);
    write_grid(f, g);
    fputs("}\n", f);
}
static void pred_tokens(FILE *f, const char *puzzle, int test, const g2 *g, double q) {
    uint8_t canvas[900];
    int i;
    tr_arc_encode(g->c, g->h, g->w, 0, 0, canvas);
    fprintf(f, "{\"puzzle\": \"%s\", \"test_index\": %d, \"q_halt\": %.17g, \"tokens\": [", puzzle, test, q);
    for (i = 0; i < 900; i++) fprintf(f, i ? ",%d" : "%d", canvas[i]);
    fputs("]}\n", f);
}

/* Three tasks with known answers:
   A (1 test input): the right answer R and a wrong one W get 2 votes each; R wins on mean
     sigmoid(q_halt). One of R's votes comes from an augmented puzzle (rot90 + a colour map), so R
     has 2 votes only if that prediction is inverted; otherwise W (2 votes) would win.
   B (2 test inputs): input 0 right at rank 1; input 1 right at rank 2. Fractional pass@1 = 0.5,
     all-inputs pass@1 = 0; both 1 at pass@2.
   C (1 test input, given as 900 model tokens): right answer at rank 3.
   TRM pass@1 = (1 + 0.5 + 0) / 3, pass@2 = 2/3, pass@5 = 1; all-inputs pass@1 = 1/3. */
static void write_fixture(const char *puzzles_path, const char *preds_path) {
    static const int a_in[] = {1, 2, 3, 4}, a_out[] = {5, 6, 7, 8, 9, 1}, a_bad[] = {5, 6, 7, 8, 9, 2};
    static const int b_in0[] = {1}, b_out0[] = {2, 2}, b_in1[] = {3}, b_out1[] = {4, 4, 4}, b_bad[] = {4, 4};
    static const int c_in[] = {0, 1}, c_out[] = {3, 1, 4, 1}, c_bad1[] = {0, 0, 0, 0}, c_bad2[] = {1, 1, 1, 1};
    g2 ain = mkgrid(2, 2, a_in), aout = mkgrid(2, 3, a_out), abad = mkgrid(2, 3, a_bad);
    g2 bin0 = mkgrid(1, 1, b_in0), bout0 = mkgrid(1, 2, b_out0), bin1 = mkgrid(1, 1, b_in1), bout1 = mkgrid(3, 1, b_out1), bbad = mkgrid(2, 1, b_bad);
    g2 cin = mkgrid(1, 2, c_in), cout = mkgrid(2, 2, c_out), cbad1 = mkgrid(2, 2, c_bad1), cbad2 = mkgrid(2, 2, c_bad2);
    g2 aug;
    uint8_t perm[10] = {0, 9, 8, 7, 6, 5, 4, 3, 2, 1};
    FILE *f = fopen(puzzles_path, "w");
    assert_non_null(f);
    fputs("{\"taskA\": {\"train\": [], \"test\": [{\"input\": ", f);
    write_grid(f, &ain), fputs(", \"output\": ", f), write_grid(f, &aout);
    fputs("}]},\n \"taskB\": {\"train\": [], \"test\": [{\"input\": ", f);
    write_grid(f, &bin0), fputs(", \"output\": ", f), write_grid(f, &bout0);
    fputs("}, {\"input\": ", f);
    write_grid(f, &bin1), fputs(", \"output\": ", f), write_grid(f, &bout1);
    fputs("}]},\n \"taskC\": {\"train\": [], \"test\": [{\"input\": ", f);
    write_grid(f, &cin), fputs(", \"output\": ", f), write_grid(f, &cout);
    fputs("}]}}\n", f);
    fclose(f);

    f = fopen(preds_path, "w");
    assert_non_null(f);
    /* A: W first (so that a first-seen tie break would pick it), twice at q 0.5; R twice at q 0.88,
       once through the augmentation t1 (rot90) with the colour map c -> 10 - c (0 fixed) */
    pred_grid(f, "taskA", 0, &abad, 0.0);
    pred_grid(f, "taskA", 0, &abad, 0.0);
    tr_arc_augment(1, perm, aout.c, aout.h, aout.w, aug.c, &aug.h, &aug.w);
    assert_int_equal(aug.h, 3);
    pred_grid(f, "taskA|||t1|||0987654321", 0, &aug, 2.0);
    pred_grid(f, "taskA", 0, &aout, 2.0);
    /* B input 0: right 3 times, wrong once; input 1: wrong twice, right once */
    pred_grid(f, "taskB", 0, &bout0, -1.0);
    pred_grid(f, "taskB", 0, &bbad, 3.0);
    pred_grid(f, "taskB", 0, &bout0, -1.0);
    pred_grid(f, "taskB", 0, &bout0, -1.0);
    pred_grid(f, "taskB", 1, &bbad, -3.0);
    pred_grid(f, "taskB", 1, &bout1, 5.0);
    pred_grid(f, "taskB", 1, &bbad, -3.0);
    /* C as raw tokens: bad1 x3, bad2 x2, right x1 */
    pred_tokens(f, "taskC", 0, &cbad1, 0.0);
    pred_tokens(f, "taskC", 0, &cbad2, 0.0);
    pred_tokens(f, "taskC", 0, &cout, 9.0);
    pred_tokens(f, "taskC", 0, &cbad1, 0.0);
    pred_tokens(f, "taskC", 0, &cbad2, 0.0);
    pred_tokens(f, "taskC", 0, &cbad1, 0.0);
    fclose(f);
}

static void test_arc_voting(void **state) {
    char puzzles[320], preds[320], sub[320], cmd[1400], *out;
    int rc;
    (void)state;
    need_programs();
    snprintf(puzzles, sizeof puzzles, "%s/puzzles.json", g_tmp);
    snprintf(preds, sizeof preds, "%s/preds.jsonl", g_tmp);
    snprintf(sub, sizeof sub, "%s/submission.json", g_tmp);
    write_fixture(puzzles, preds);
    snprintf(cmd, sizeof cmd, ARC_EVAL " --predictions '%s' --puzzles '%s' --all-inputs --output '%s' --verbose", preds, puzzles, sub);
    rc = run_cmd(cmd, &out);
    if (rc != 0) fail_msg("exit %d:\n%s", rc, out);
    assert_non_null(strstr(out, "3 tasks, 4 test inputs, 17 predictions"));
    assert_true(fabs(metric(out, "pass@1") - 0.5) < 1e-6);
    assert_true(fabs(metric(out, "pass@2") - 2.0 / 3.0) < 1e-6);
    assert_true(fabs(metric(out, "pass@5") - 1.0) < 1e-6);
    assert_true(fabs(metric(out, "pass@10") - 1.0) < 1e-6);
    assert_true(fabs(metric(out, "all-inputs/pass@1") - 1.0 / 3.0) < 1e-6);
    assert_true(fabs(metric(out, "all-inputs/pass@2") - 2.0 / 3.0) < 1e-6);
    assert_true(fabs(metric(out, "all-inputs/pass@5") - 1.0) < 1e-6);
    free(out);
    /* the submission: A's first attempt is R (inverted and tie-broken), its second W */
    {
        FILE *f = fopen(sub, "rb");
        char buf[4096];
        size_t n;
        assert_non_null(f);
        n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        assert_non_null(strstr(buf, "\"taskA\": [{\"attempt_1\": [[5, 6, 7], [8, 9, 1]], \"attempt_2\": [[5, 6, 7], [8, 9, 2]]}]"));
        assert_non_null(strstr(buf, "\"taskB\": [{\"attempt_1\": [[2, 2]], \"attempt_2\": [[4], [4]]}, {\"attempt_1\": [[4], [4]], \"attempt_2\": [[4], [4], [4]]}]"));
        assert_non_null(strstr(buf, "\"taskC\": [{\"attempt_1\": [[0, 0], [0, 0]], \"attempt_2\": [[1, 1], [1, 1]]}]"));
    }
    if (have_python()) {
        snprintf(cmd, sizeof cmd,
                 "python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert list(d) == [\"taskA\", \"taskB\", \"taskC\"] and len(d[\"taskB\"]) == 2' '%s'", sub);
        rc = run_cmd(cmd, &out);
        if (rc != 0) fail_msg("the submission does not parse:\n%s", out);
        free(out);
    }
    /* without the flag, only the TRM score; --limit 1 scores task A alone */
    snprintf(cmd, sizeof cmd, ARC_EVAL " --predictions '%s' --puzzles '%s' --limit 1 --pass-k 1,2", preds, puzzles);
    rc = run_cmd(cmd, &out);
    if (rc != 0) fail_msg("exit %d:\n%s", rc, out);
    assert_null(strstr(out, "all-inputs/pass@"));
    assert_null(strstr(out, "pass@5"));
    assert_non_null(strstr(out, "1 tasks, 1 test inputs, 4 predictions"));
    assert_true(fabs(metric(out, "pass@1") - 1.0) < 1e-6);
    free(out);
}

static void test_arc_eval_bad_input(void **state) {
    char puzzles[320], preds[320], bad[320], cmd[1400], *out;
    int i;
    static const char *const bad_lines[] = {
        "{\"puzzle\": \"taskA\", \"test_index\": 0, \"q_halt\": 0, \"grid\": [[1,2],[3]]}\n",      /* ragged grid */
        "{\"puzzle\": \"taskZ\", \"test_index\": 0, \"q_halt\": 0, \"grid\": [[1]]}\n",            /* unknown task */
        "{\"puzzle\": \"taskB\", \"test_index\": 2, \"q_halt\": 0, \"grid\": [[1]]}\n",            /* no such test input */
        "{\"puzzle\": \"taskA|||t9|||0123456789\", \"test_index\": 0, \"q_halt\": 0, \"grid\": [[1]]}\n", /* bad transform id */
        "{\"puzzle\": \"taskA\", \"test_index\": 0, \"grid\": [[1]]}\n",                           /* no q_halt */
        "{\"puzzle\": \"taskA\", \"test_index\": 0, \"q_halt\": 0, \"tokens\": [1, 2]}\n",         /* short token list */
        "{\"puzzle\": \"taskA\", \"test_index\": 0, \"q_halt\": 0, \"grid\": [[12]]}\n",           /* not a colour */
        "{\"puzzle\": \"taskA\", \"test_index\": 0,\n",                                              /* broken JSON */
    };
    static const char *const bad_args[] = {
        " --bogus", " --batch 0", " --limit -3", " --max-steps x", " --pass-k 0", " --checkpoint", " only_one_positional",
        " --checkpoint /nonexistent.safetensors --data /nonexistent_dir",
    };
    (void)state;
    need_programs();
    snprintf(puzzles, sizeof puzzles, "%s/puzzles.json", g_tmp);
    snprintf(preds, sizeof preds, "%s/preds.jsonl", g_tmp);
    snprintf(bad, sizeof bad, "%s/bad.jsonl", g_tmp);
    write_fixture(puzzles, preds);
    for (i = 0; i < (int)(sizeof bad_lines / sizeof bad_lines[0]); i++) {
        FILE *f = fopen(bad, "w");
        int rc;
        assert_non_null(f);
        fputs("{\"puzzle\": \"taskA\", \"test_index\": 0, \"q_halt\": 0, \"grid\": [[1]]}\n", f);
        fputs(bad_lines[i], f);
        fclose(f);
        snprintf(cmd, sizeof cmd, ARC_EVAL " --predictions '%s' --puzzles '%s'", bad, puzzles);
        rc = run_cmd(cmd, &out);
        if (rc <= 0 || rc >= 128) fail_msg("bad line %d: exit %d:\n%s", i, rc, out);
        if (!strstr(out, "bad.jsonl:2")) fail_msg("bad line %d: the message does not name the line:\n%s", i, out);
        free(out);
    }
    for (i = 0; i < (int)(sizeof bad_args / sizeof bad_args[0]); i++) {
        int rc;
        snprintf(cmd, sizeof cmd, ARC_EVAL "%s", bad_args[i]);
        rc = run_cmd(cmd, &out);
        if (rc <= 0 || rc >= 128) fail_msg("'%s': exit %d:\n%s", cmd, rc, out);
        assert_non_null(strstr(out, "tinyrec-arc-eval:"));
        free(out);
    }
    /* a broken test_puzzles.json */
    {
        FILE *f = fopen(bad, "w");
        int rc;
        assert_non_null(f);
        fputs("{\"taskA\": {\"test\": [{\"input\": [[1]], \"output\": [[1, 2], [3]]}]}}", f);
        fclose(f);
        snprintf(cmd, sizeof cmd, ARC_EVAL " --predictions '%s' --puzzles '%s'", preds, bad);
        rc = run_cmd(cmd, &out);
        if (rc <= 0 || rc >= 128) fail_msg("broken puzzles file: exit %d:\n%s", rc, out);
        free(out);
    }
}

/* ---- smoke run on a tiny real dataset ---------------------------------------------------------- */
/* hidden < 0: an HRM of width -hidden (one H block), which the programs take from the file alone */
static void make_model(const char *path, int num_ids, int hidden) {
    tr_ctx *ctx = tu_ctx(1, 7);
    int hrm = hidden < 0;
    tr_model_config cfg;
    tr_model *m = NULL;
    assert_int_equal(tr_model_config_preset(&cfg, "trm-tiny"), TR_OK);
    if (hrm) hidden = -hidden, cfg.arch = TR_ARCH_HRM, cfg.H_layers = 1, cfg.no_ACT_continue = 0;
    cfg.vocab_size = 12, cfg.seq_len = 900, cfg.num_puzzle_identifiers = num_ids;
    cfg.hidden_size = hidden, cfg.num_heads = 2, cfg.expansion = 2;
    cfg.puzzle_emb_ndim = hidden, cfg.puzzle_emb_len = 1;
    cfg.L_layers = 1, cfg.H_cycles = 1, cfg.L_cycles = 1, cfg.halt_max_steps = 2;
    cfg.mlp_t = 0, cfg.pos_encodings = TR_POS_ROPE;
    if (tr_model_create(ctx, &cfg, &m) != TR_OK) fail_msg("%s", tr_ctx_last_error(ctx));
    if (tr_model_save(m, path, NULL) != TR_OK) fail_msg("%s", tr_ctx_last_error(ctx));
    tr_model_destroy(m);
    tr_ctx_destroy(ctx);
}

static void test_arc_eval_smoke(void **state) {
    /* one training task, two evaluation tasks (6ea4a07e has two test inputs) */
    static const char *const files[] = {"training/0d3d703e.json", "evaluation/6ea4a07e.json", "evaluation/17cae0c1.json"};
    char in[320], ds[320], ck[320], ck_bad[320], ck_hrm[320], sub[320], sub2[320], preds[320], cmd[2600], abs_src[1024], *out;
    int i, rc;
    (void)state;
    need_programs();
    for (i = 0; i < 3; i++) {
        snprintf(abs_src, sizeof abs_src, ARC1 "/%s", files[i]);
        if (!file_exists(abs_src)) skip();
    }
    if (!file_exists(DATA_TOOL)) fail_msg("%s is missing", DATA_TOOL);
    /* a folder of subset folders whose entries link to the data in place */
    snprintf(in, sizeof in, "%s/arc_in", g_tmp);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/training' '%s/evaluation'", in, in);
    assert_int_equal(system(cmd), 0);
    for (i = 0; i < 3; i++) {
        char link[400], *cwd = getcwd(abs_src, sizeof abs_src);
        assert_non_null(cwd);
        snprintf(abs_src + strlen(abs_src), sizeof abs_src - strlen(abs_src), "/" ARC1 "/%s", files[i]);
        snprintf(link, sizeof link, "%s/%s", in, files[i]);
        assert_int_equal(symlink(abs_src, link), 0);
    }
    snprintf(ds, sizeof ds, "%s/arc_ds", g_tmp);
    snprintf(cmd, sizeof cmd, DATA_TOOL " arc --output-dir '%s' --input-dir '%s' --num-aug 2 --quiet", ds, in);
    rc = run_cmd(cmd, &out);
    if (rc != 0) fail_msg("tinyrec-data arc exited %d:\n%s", rc, out);
    free(out);
    {
        tr_ctx *ctx = tu_ctx(1, 0);
        tr_dataset *d = NULL;
        tr_dataset_meta meta;
        char p[400];
        snprintf(p, sizeof p, "%s/test/dataset.json", ds);
        assert_int_equal(tr_dataset_read_meta(ctx, p, &meta), TR_OK);
        assert_int_equal(tr_dataset_open(ctx, ds, "test", 0, &d), TR_OK);
        assert_int_equal(d->sets[0].num_groups, 2);
        snprintf(ck, sizeof ck, "%s/tiny.safetensors", g_tmp);
        snprintf(ck_bad, sizeof ck_bad, "%s/tiny_wrong_table.safetensors", g_tmp);
        make_model(ck, (int)meta.num_puzzle_identifiers, 32);
        make_model(ck_bad, (int)meta.num_puzzle_identifiers + 3, 32);
        snprintf(ck_hrm, sizeof ck_hrm, "%s/tiny_hrm.safetensors", g_tmp);
        make_model(ck_hrm, (int)meta.num_puzzle_identifiers, -32);
        tr_dataset_close(d);
        tr_ctx_destroy(ctx);
    }
    snprintf(sub, sizeof sub, "%s/sub.json", g_tmp);
    snprintf(sub2, sizeof sub2, "%s/sub2.json", g_tmp);
    snprintf(preds, sizeof preds, "%s/model_preds.jsonl", g_tmp);
    /* (these checkpoints come without names for their rows: by position, as asked) */
    snprintf(cmd, sizeof cmd, ARC_EVAL " '%s' '%s' --batch 4 --threads 1 --all-inputs --output '%s' --save-predictions '%s' --map-by-index", ck, ds, sub, preds);
    rc = run_cmd(cmd, &out);
    if (rc != 0) fail_msg("arc-eval exited %d:\n%s", rc, out);
    /* 2 test tasks x 3 versions; 6ea4a07e has 2 test inputs: 3 + 6 = 9 examples */
    assert_non_null(strstr(out, "2 tasks, 3 test inputs, 9 predictions"));
    assert_non_null(strstr(out, "augmentation check: 9 of 9"));
    {
        double p1 = metric(out, "pass@1"), p10 = metric(out, "pass@10");
        assert_true(p1 >= 0 && p1 <= p10 && p10 <= 1);
        assert_true(metric(out, "all-inputs/pass@1") <= p1 + 1e-12);
    }
    free(out);
    /* --limit 1 and --max-steps 1 run too */
    snprintf(cmd, sizeof cmd, ARC_EVAL " --checkpoint '%s' --data '%s' --batch 3 --threads 1 --limit 1 --max-steps 1 --quiet --map-by-index", ck, ds);
    rc = run_cmd(cmd, &out);
    if (rc != 0) fail_msg("arc-eval --limit 1 exited %d:\n%s", rc, out);
    assert_non_null(strstr(out, "ARC evaluation: 1 tasks"));
    free(out);
    /* an HRM checkpoint runs without any new flag */
    {
        snprintf(cmd, sizeof cmd, ARC_EVAL " '%s' '%s' --batch 3 --threads 1 --limit 1 --all-inputs --quiet --map-by-index", ck_hrm, ds);
        rc = run_cmd(cmd, &out);
        if (rc != 0) fail_msg("arc-eval on an HRM exited %d:\n%s", rc, out);
        assert_non_null(strstr(out, "ARC evaluation: 1 tasks"));
        free(out);
    }
    /* the saved predictions give back the same submission without the model */
    snprintf(cmd, sizeof cmd, ARC_EVAL " --predictions '%s' '%s' --output '%s' && cmp '%s' '%s'", preds, ds, sub2, sub, sub2);
    rc = run_cmd(cmd, &out);
    if (rc != 0) fail_msg("rescoring the saved predictions differs (%d):\n%s", rc, out);
    free(out);
    if (have_python()) {
        snprintf(cmd, sizeof cmd,
                 "python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); t=json.load(open(sys.argv[2])); "
                 "assert sorted(d) == sorted(t); assert all(len(d[k]) == len(t[k][\"test\"]) for k in d); "
                 "assert all(set(a) == {\"attempt_1\", \"attempt_2\"} for k in d for a in d[k])' '%s' '%s/test_puzzles.json'",
                 sub, ds);
        rc = run_cmd(cmd, &out);
        if (rc != 0) fail_msg("the submission is not in the ARC Prize format:\n%s", out);
        free(out);
    }
    /* a checkpoint whose puzzle table does not match the dataset is refused with a message */
    snprintf(cmd, sizeof cmd, ARC_EVAL " --checkpoint '%s' --data '%s' --threads 1 --quiet --map-by-index", ck_bad, ds);
    rc = run_cmd(cmd, &out);
    if (rc <= 0 || rc >= 128) fail_msg("mismatched table: exit %d:\n%s", rc, out);
    assert_non_null(strstr(out, "tinyrec-arc-eval:"));
    free(out);
    /* a Sudoku-shaped checkpoint on an ARC dataset */
    {
        tr_ctx *ctx = tu_ctx(1, 7);
        tr_model_config cfg;
        tr_model *m = NULL;
        tr_model_config_preset(&cfg, "trm-tiny");
        assert_int_equal(tr_model_create(ctx, &cfg, &m), TR_OK);
        assert_int_equal(tr_model_save(m, ck_bad, NULL), TR_OK);
        tr_model_destroy(m);
        tr_ctx_destroy(ctx);
    }
    rc = run_cmd(cmd, &out);
    if (rc <= 0 || rc >= 128) fail_msg("sudoku model: exit %d:\n%s", rc, out);
    free(out);
    /* issue 43: a checkpoint without names for its rows is refused unless --map-by-index, with the reason */
    snprintf(cmd, sizeof cmd, ARC_EVAL " --checkpoint '%s' --data '%s' --threads 1 --quiet", ck, ds);
    rc = run_cmd(cmd, &out);
    if (rc != 1) fail_msg("a checkpoint without row names: exit %d:\n%s", rc, out);
    assert_non_null(strstr(out, "has no names for its puzzle rows"));
    assert_non_null(strstr(out, "--map-by-index"));
    free(out);
    /* with the names beside it (as tinyrec-train writes them) the rows follow them; the ablation runs */
    snprintf(cmd, sizeof cmd, "cp '%s/identifiers.json' '%s/identifiers.json'", ds, g_tmp);
    assert_int_equal(system(cmd), 0);
    for (i = 0; i < 3; i++) {
        static const char *const modes[3] = {"keep", "blank", "shuffle"};
        snprintf(cmd, sizeof cmd, ARC_EVAL " --checkpoint '%s' --data '%s' --threads 1 --batch 4 --task-id %s", ck, ds, modes[i]);
        rc = run_cmd(cmd, &out);
        if (rc != 0) fail_msg("--task-id %s: exit %d:\n%s", modes[i], rc, out);
        assert_non_null(strstr(out, "2 tasks, 3 test inputs, 9 predictions"));
        assert_non_null(strstr(out, "augmentation check: 9 of 9")); /* the votes get each puzzle's own name */
        assert_true((strstr(out, "task-id ablation") != NULL) == (i > 0));
        if (i == 0) assert_non_null(strstr(out, "puzzle rows by name"));
        free(out);
    }
    snprintf(cmd, sizeof cmd, ARC_EVAL " --checkpoint '%s' --data '%s' --task-id none", ck, ds);
    rc = run_cmd(cmd, &out);
    if (rc != 2) fail_msg("--task-id none: exit %d:\n%s", rc, out);
    free(out);
    snprintf(cmd, sizeof cmd, "%s/identifiers.json", g_tmp);
    remove(cmd);
}

/* ---- HRM checkpoints through tools/convert_checkpoint.py --------------------------------------- */
/* A python with torch, numpy and PyYAML (the Debian one has them), or NULL. */
static const char *python_torch(void) {
    static const char *const cands[2] = {"/usr/bin/python3", "python3"};
    char cmd[256];
    int i;
    for (i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd, "%s -c 'import torch, numpy, yaml' >/dev/null 2>&1", cands[i]);
        if (system(cmd) == 0) return cands[i];
    }
    return NULL;
}

static double json_num(const tr_json *o, const char *key) {
    const tr_json *v = tr_json_get(o, key);
    if (!v || v->type != TR_JSON_NUMBER) fail_msg("expected config has no number '%s'", key);
    return v->number;
}

/* The converted file's config is the twin's (HRM_CKPT in tools/torch_reference.py) with HRM's
   semantics, and every tensor the model has equals the twin's bit for bit (the bf16 H_init/L_init
   widened exactly), with none left over. */
static void check_converted_hrm(const char *path, const char *expected) {
    tr_ctx *ctx = tu_ctx(1, 0);
    tr_model_config c;
    tr_model *m = NULL;
    tr_st_file *ef = NULL;
    tr_json *want = NULL;
    const char *js;
    int i, n;
    if (tr_checkpoint_read_config(ctx, path, &c) != TR_OK) fail_msg("%s", tr_ctx_last_error(ctx));
    assert_int_equal(tr_st_open(ctx, expected, &ef), TR_OK);
    assert_non_null(js = tr_st_metadata(ef, "config"));
    assert_int_equal(tr_json_parse(ctx, js, strlen(js), expected, &want), TR_OK);
    assert_int_equal(c.arch, TR_ARCH_HRM);
    assert_int_equal(c.no_ACT_continue, 0); /* HRM halts on q_halt > q_continue */
    assert_int_equal(c.mlp_t, 0);
    assert_int_equal(c.pos_encodings, TR_POS_ROPE);
    assert_int_equal(c.puzzle_emb_len, 0); /* HRM's ceil(puzzle_emb_ndim / hidden_size) */
#define SAME(field) assert_int_equal(c.field, (int)json_num(want, #field))
    SAME(hidden_size); SAME(num_heads); SAME(H_layers); SAME(L_layers); SAME(H_cycles); SAME(L_cycles);
    SAME(puzzle_emb_ndim); SAME(vocab_size); SAME(seq_len); SAME(num_puzzle_identifiers); SAME(halt_max_steps);
#undef SAME
    assert_true(c.expansion == json_num(want, "expansion"));
    assert_true(c.halt_exploration_prob == json_num(want, "halt_exploration_prob"));
    tr_json_free(ctx, want);
    if (tr_model_load(ctx, path, NULL, &m) != TR_OK) fail_msg("%s", tr_ctx_last_error(ctx));
    n = tr_model_num_tensors(m);
    assert_int_equal((size_t)n, tr_st_count(ef));
    for (i = 0; i < n; i++) {
        tr_tensor_view v;
        const tr_st_tensor *t;
        float *ref;
        assert_int_equal(tr_model_tensor(m, i, &v), TR_OK);
        if (!(t = tr_st_find(ef, v.name))) fail_msg("%s: the twin has no tensor %s", expected, v.name);
        assert_int_equal(tr_st_numel(t), v.numel);
        ref = (float *)malloc(v.numel * sizeof *ref);
        assert_int_equal(tr_st_read_f32(ctx, t, ref, v.numel), TR_OK);
        if (memcmp(ref, v.data, v.numel * sizeof *ref) != 0) fail_msg("%s: tensor %s differs from the twin's", path, v.name);
        free(ref);
    }
    tr_model_destroy(m);
    tr_st_close(ef);
    assert_int_equal(tr_ctx_live_allocs(ctx), 0);
    tr_ctx_destroy(ctx);
}

/* Expects the command to fail (exit 1, no crash) with each needle in its message, and out not written. */
static void expect_convert_error(const char *cmd, const char *out_path, const char *needle1, const char *needle2) {
    char *out;
    int rc = run_cmd(cmd, &out);
    if (rc != 1) fail_msg("'%s' exited %d:\n%s", cmd, rc, out);
    if (!strstr(out, needle1) || !strstr(out, needle2)) fail_msg("'%s': the message lacks '%s' / '%s':\n%s", cmd, needle1, needle2, out);
    assert_false(file_exists(out_path));
    free(out);
}

static void test_convert_hrm_checkpoint(void **state) {
    const char *py = python_torch();
    char dir[320], ds[400], exp_[400], o1[400], o2[400], o3[400], cmd[2048], *out;
    int rc;
    (void)state;
    if (!py) { /* needs torch and PyYAML, as the converter does; CI installs them and sets TINYREC_REQUIRE_TORCH=1 */
        if (getenv("TINYREC_REQUIRE_TORCH")) fail_msg("python3 with torch, numpy and yaml not found, and TINYREC_REQUIRE_TORCH is set");
        skip();
    }
    snprintf(dir, sizeof dir, "%s/hrm", g_tmp);
    snprintf(cmd, sizeof cmd, "%s tools/torch_reference.py --hrm-checkpoint '%s'", py, dir);
    rc = run_cmd(cmd, &out);
    if (rc != 0) fail_msg("the twin exited %d:\n%s", rc, out);
    free(out);
    snprintf(ds, sizeof ds, "%s/dataset.json", dir);
    snprintf(exp_, sizeof exp_, "%s/expected.safetensors", dir);
    /* the released layout: a run directory, "_orig_mod." keys, bf16 H_init/L_init kept as BF16 */
    snprintf(o1, sizeof o1, "%s/hrm_run.safetensors", g_tmp);
    snprintf(cmd, sizeof cmd, "%s tools/convert_checkpoint.py '%s/run' '%s' --dataset-json '%s'", py, dir, o1, ds);
    rc = run_cmd(cmd, &out);
    if (rc != 0) fail_msg("'%s' exited %d:\n%s", cmd, rc, out);
    assert_non_null(strstr(out, "model hrm"));
    free(out);
    check_converted_hrm(o1, exp_);
    /* a step_N file without the prefix, all_config.yaml found beside it, stored as F32 */
    snprintf(o2, sizeof o2, "%s/hrm_plain.safetensors", g_tmp);
    snprintf(cmd, sizeof cmd, "%s tools/convert_checkpoint.py '%s/plain/step_10' '%s' --dataset-json '%s' --dtype f32", py, dir, o2, ds);
    rc = run_cmd(cmd, &out);
    if (rc != 0) fail_msg("'%s' exited %d:\n%s", cmd, rc, out);
    free(out);
    check_converted_hrm(o2, exp_);
    {
        tr_ctx *ctx = tu_ctx(1, 0);
        tr_st_file *f;
        assert_int_equal(tr_st_open(ctx, o1, &f), TR_OK);
        assert_string_equal(tr_st_metadata(f, "model"), "hrm");
        assert_int_equal(tr_st_find(f, "model.inner.H_init")->dtype, TR_BF16);
        assert_int_equal(tr_st_find(f, "model.inner.lm_head.weight")->dtype, TR_F32);
        tr_st_close(f);
        tr_ctx_destroy(ctx);
    }
    /* errors name the file and the key */
    snprintf(o3, sizeof o3, "%s/hrm_bad.safetensors", g_tmp);
    snprintf(cmd, sizeof cmd, "%s tools/convert_checkpoint.py '%s/noconfig' '%s' --dataset-json '%s'", py, dir, o3, ds);
    expect_convert_error(cmd, o3, "noconfig/all_config.yaml", "no all_config.yaml");
    snprintf(cmd, sizeof cmd, "%s tools/convert_checkpoint.py '%s/noconfig/checkpoint' '%s' --dataset-json '%s'", py, dir, o3, ds);
    expect_convert_error(cmd, o3, "noconfig/all_config.yaml", "no all_config.yaml");
    snprintf(cmd, sizeof cmd, "%s tools/convert_checkpoint.py '%s/badshape' '%s' --dataset-json '%s'", py, dir, o3, ds);
    expect_convert_error(cmd, o3, "badshape/checkpoint", "model.inner.H_level.layers.1.mlp.down_proj.weight [16, 128] (expected [16, 256])");
    snprintf(cmd, sizeof cmd, "%s tools/convert_checkpoint.py '%s/run' '%s'", py, dir, o3); /* seq_len is the dataset's */
    expect_convert_error(cmd, o3, "seq_len", "--dataset-json");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_devices_report),
        cmocka_unit_test(test_devices_bad_cli),
        cmocka_unit_test(test_arc_voting),
        cmocka_unit_test(test_arc_eval_bad_input),
        cmocka_unit_test(test_arc_eval_smoke),
        cmocka_unit_test(test_convert_hrm_checkpoint),
    };
    return cmocka_run_group_tests(tests, setup_tmp, teardown_tmp);
}
