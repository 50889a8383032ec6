/* tinyrec-demo: the README's main job. Generates Sudoku puzzles (nothing to download), trains a
   small TRM for a fixed time, then solves held-out puzzles it never saw.

   build/tinyrec-demo [--minutes M] [--train N] [--test N] [--clues K] [--batch B] [--seed S]
                      [--dtype float32|bfloat16|float16] [--steps N]

   --dtype trains and solves in that precision (fp32 master weights either way); --steps trains exactly
   N steps instead of for M minutes (to compare precisions at equal work).

   The device follows TINYREC_DEVICE (auto, cpu, opencl, opencl:N; default auto: an OpenCL GPU when
   the build has OpenCL and there is one, else the CPU).

   Uses only the public API. */
#define TINYREC_IMPLEMENTATION
#include "tinyrec.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if !defined(_WIN32)
#include <unistd.h>
#endif

/* Device fallbacks are warnings: say why the demo is not where TINYREC_DEVICE asked. */
static void on_log(void *user, tr_log_level level, const char *message) {
    (void)user;
    if (level >= TR_LOG_WARN) fprintf(stderr, "tinyrec-demo: warning: %s\n", message);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* digits 0..9 (0 = blank) -> tokens 1..10; the label of a cell is its solution digit + 1 */
static void encode(const uint8_t *q, const uint8_t *a, int32_t *in, int32_t *lab) {
    int i;
    for (i = 0; i < 81; i++) {
        in[i] = q[i] + 1;
        if (lab) lab[i] = a[i] + 1;
    }
}

static void print_grid(const char *title, const int32_t *tokens, const uint8_t *given) {
    int r, c;
    printf("%s\n", title);
    for (r = 0; r < 9; r++) {
        if (r && r % 3 == 0) printf("  ------+-------+------\n");
        printf(" ");
        for (c = 0; c < 9; c++) {
            int t = tokens[r * 9 + c], d = t >= 2 ? t - 1 : 0;
            if (c && c % 3 == 0) printf(" |");
            if (given && given[r * 9 + c]) printf(" %d", d);
            else printf(" %c", d ? '0' + d : '.');
        }
        printf("\n");
    }
}

int main(int argc, char **argv) {
    double minutes = 5.0, ema_decay = 0.99;
    int n_train = 20000, n_test = 200, clues = 50, B = 32, i, dtype = TR_FWD_FLOAT32;
    long max_steps = 0;
    uint64_t seed = 1;
    tr_ctx_config cc = tr_ctx_config_default();
    tr_ctx *ctx;
    tr_model_config cfg;
    tr_model *model;
    tr_trainer *trainer;
    tr_preset preset;
    tr_train_config tc;
    tr_run_info run;
    uint8_t *tq, *ta, *eq, *ea;
    int32_t *in, *lab, *pid;
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--minutes") && i + 1 < argc) minutes = atof(argv[++i]);
        else if (!strcmp(argv[i], "--train") && i + 1 < argc) n_train = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--test") && i + 1 < argc) n_test = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--clues") && i + 1 < argc) clues = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) B = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = (uint64_t)atoll(argv[++i]);
        else if (!strcmp(argv[i], "--ema") && i + 1 < argc) ema_decay = atof(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) max_steps = atol(argv[++i]);
        else if (!strcmp(argv[i], "--dtype") && i + 1 < argc) {
            if ((dtype = tr_forward_dtype_parse(argv[++i])) < 0) {
                fprintf(stderr, "tinyrec-demo: --dtype takes float32, bfloat16, float16 or auto, not '%s'\n", argv[i]);
                return 2;
            }
        }
        else {
            int help = !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h");
            fprintf(help ? stdout : stderr,
                    "usage: tinyrec-demo [--minutes M] [--train N] [--test N] [--clues K] [--batch B] [--seed S] [--ema DECAY]\n"
                    "                    [--dtype T] [--steps N]\n"
                    "Generates Sudoku puzzles (N with K clues, default 20000 with 50, and 200 held-out ones), trains the\n"
                    "sudoku-tiny TRM for M minutes (default 5) or exactly --steps N steps at batch B (32), then solves the\n"
                    "held-out puzzles with the EMA weights (decay 0.99). --dtype float32|bfloat16|float16|auto picks the\n"
                    "precision; the device follows TINYREC_DEVICE (auto: an OpenCL GPU when there is one, else the CPU).\n"
                    "The first line names the device, kernels and precision; the last gives the held-out exact accuracy.\n"
                    "example: tinyrec-demo --minutes 2 --dtype bf16\n");
            return help ? 0 : 2;
        }
    }
    if (n_train < B || n_test < 1 || B < 1 || clues < 17 || clues > 80 || !(minutes > 0)) {
        fprintf(stderr, "tinyrec-demo: need --train >= --batch >= 1, --test >= 1, 17 <= --clues <= 80, --minutes > 0\n");
        return 2;
    }
    cc.seed = seed;
    cc.log = on_log;
    cc.device = "cpu"; /* replaced below, where a bad TINYREC_DEVICE gets the library's message */
    if (tr_ctx_create(&cc, &ctx) != TR_OK) return 1;
    if (tr_ctx_set_device(ctx, getenv("TINYREC_DEVICE")) != TR_OK) {
        fprintf(stderr, "tinyrec-demo: %s (from TINYREC_DEVICE)\n", tr_ctx_last_error(ctx));
        tr_ctx_destroy(ctx);
        return 2;
    }
    tr_ctx_use_device(ctx); /* open it now, for the header line */
    tq = (uint8_t *)malloc((size_t)(n_train + n_test) * 81 * 2);
    ta = tq + (size_t)n_train * 81;
    eq = ta + (size_t)n_train * 81;
    ea = eq + (size_t)n_test * 81;
    in = (int32_t *)malloc(sizeof(int32_t) * ((size_t)B * 81 * 2 + B));
    lab = in + (size_t)B * 81;
    pid = lab + (size_t)B * 81;
    printf("tinyrec %s demo on %s\n", tr_version_string(), tr_ctx_device_name(ctx));
    printf("generating %d training and %d held-out Sudoku puzzles with %d clues (%d blanks)...\n", n_train, n_test, clues, 81 - clues);
    for (i = 0; i < n_train + n_test; i++) {
        uint8_t *q = i < n_train ? tq + (size_t)i * 81 : eq + (size_t)(i - n_train) * 81;
        uint8_t *a = i < n_train ? ta + (size_t)i * 81 : ea + (size_t)(i - n_train) * 81;
        if (tr_sudoku_generate(ctx, seed, (uint64_t)i, clues, q, a) != TR_OK) {
            fprintf(stderr, "tinyrec-demo: %s\n", tr_ctx_last_error(ctx));
            return 1;
        }
    }
    /* the library's sudoku-tiny preset: the trm-tiny model and a recipe for minutes of CPU training */
    if (tr_preset_find("sudoku-tiny", &preset) != TR_OK) return 1;
    cfg = preset.model;
    cfg.forward_dtype = (tr_forward_dtype)dtype;
    if (tr_model_create(ctx, &cfg, &model) != TR_OK) {
        fprintf(stderr, "tinyrec-demo: %s\n", tr_ctx_last_error(ctx));
        return 1;
    }
    tc = preset.train;
    tc.global_batch_size = B;
    /* a short run: the reference's 0.999 would average in the first, untrained, thousand steps */
    tc.ema_decay = ema_decay;
    if (tr_trainer_create(model, &tc, &trainer) != TR_OK) {
        fprintf(stderr, "tinyrec-demo: %s\n", tr_ctx_last_error(ctx));
        return 1;
    }
    tr_model_describe(model, &run); /* the device, its kernels and the precision in force */
    printf("device %s\n", run.text);
    if (max_steps > 0)
        printf("training TRM (%zu parameters, mlp_t, T=%d, n=%d, %s) for %ld steps at batch %d...\n", tr_model_num_params(model), cfg.H_cycles, cfg.L_cycles,
               run.precision, max_steps, B);
    else
        printf("training TRM (%zu parameters, mlp_t, T=%d, n=%d, %s) for %.1f minutes at batch %d...\n", tr_model_num_params(model), cfg.H_cycles, cfg.L_cycles,
               run.precision, minutes, B);
    {
        double t0 = now_s(), last = t0, acc_sum = 0, exact_sum = 0, count = 0, steps_sum = 0, loss_sum = 0;
        long step = 0, cursor = 0, interval_steps = 0;
        int tty = isatty(1);
        while (max_steps > 0 ? step < max_steps : now_s() - t0 < minutes * 60.0) {
            tr_batch b;
            tr_metrics m;
            int r;
            for (r = 0; r < B; r++, cursor++) {
                long k = cursor % n_train;
                uint8_t q[81], a[81];
                /* a fresh augmentation of a training puzzle every time it comes round */
                tr_sudoku_augment(seed + 17, (uint64_t)cursor, tq + (size_t)k * 81, ta + (size_t)k * 81, q, a);
                encode(q, a, in + (size_t)r * 81, lab + (size_t)r * 81);
                pid[r] = 0;
            }
            b.inputs = in, b.labels = lab, b.puzzle_identifiers = pid, b.batch_size = B;
            if (tr_trainer_step(trainer, &b, &m) != TR_OK) {
                fprintf(stderr, "tinyrec-demo: %s\n", tr_ctx_last_error(ctx));
                return 1;
            }
            step++, interval_steps++;
            acc_sum += m.accuracy, exact_sum += m.exact_accuracy, count += m.count, steps_sum += m.steps, loss_sum += m.loss / B;
            if (now_s() - last >= (tty ? 1.0 : 15.0)) {
                double el = now_s() - t0;
                printf(tty ? "\r  step %5ld  %5.0fs/%3.0fs  loss %.3f  acc %.3f  exact %.3f  steps %.1f  %.0f samples/s   " : "  step %ld  %.0fs/%.0fs  loss %.3f  acc %.3f  exact %.3f  steps %.1f  %.0f samples/s\n",
                       step, el, minutes * 60, loss_sum / interval_steps, count ? acc_sum / count : 0, count ? exact_sum / count : 0, count ? steps_sum / count : 0, step * B / el);
                fflush(stdout);
                acc_sum = exact_sum = count = steps_sum = loss_sum = 0;
                interval_steps = 0;
                last = now_s();
            }
        }
        if (tty) printf("\n");
    }
    /* held-out puzzles, with the EMA weights as the reference evaluates */
    tr_trainer_swap_ema(trainer);
    {
        tr_carry *carry;
        int32_t *preds = (int32_t *)malloc(sizeof(int32_t) * (size_t)B * 81), steps[1024];
        tr_step_outputs out;
        int solved = 0, shown = 0, done;
        if (tr_carry_create(model, B, &carry) != TR_OK) return 1;
        memset(&out, 0, sizeof out);
        out.preds = preds, out.steps = steps;
        for (done = 0; done < n_test; done += B) {
            tr_batch b;
            int r, n = n_test - done < B ? n_test - done : B;
            for (r = 0; r < B; r++) {
                int k = done + (r < n ? r : 0);
                encode(eq + (size_t)k * 81, NULL, in + (size_t)r * 81, NULL);
                pid[r] = 0;
            }
            b.inputs = in, b.labels = NULL, b.puzzle_identifiers = pid, b.batch_size = B;
            if (tr_model_infer(model, carry, &b, 0, NULL, NULL, &out) != TR_OK) {
                fprintf(stderr, "tinyrec-demo: %s\n", tr_ctx_last_error(ctx));
                return 1;
            }
            for (r = 0; r < n; r++) {
                uint8_t grid[81];
                int c, k = done + r;
                for (c = 0; c < 81; c++) grid[c] = (uint8_t)(preds[(size_t)r * 81 + c] >= 2 ? preds[(size_t)r * 81 + c] - 1 : 0);
                if (tr_sudoku_check(eq + (size_t)k * 81, grid)) solved++;
                if (shown < 2) {
                    char title[96];
                    snprintf(title, sizeof title, "held-out puzzle %d (%s after %d steps):", k, tr_sudoku_check(eq + (size_t)k * 81, grid) ? "solved" : "not solved", steps[r]);
                    print_grid(title, in + (size_t)r * 81, NULL);
                    print_grid("model's answer:", preds + (size_t)r * 81, eq + (size_t)k * 81);
                    shown++;
                }
            }
        }
        tr_model_describe(model, &run); /* a device that failed is behind the run now */
        printf("held-out exact accuracy: %d / %d = %.1f%% (puzzles with %d blanks; the clues alone solve 0%%), on %s\n", solved, n_test, 100.0 * solved / n_test,
               81 - clues, run.text);
        free(preds);
        tr_carry_destroy(carry);
    }
    tr_trainer_destroy(trainer);
    tr_model_destroy(model);
    tr_ctx_destroy(ctx);
    free(tq), free(in);
    return 0;
}
