#!/bin/sh
# Issue 43, deliverable 5: does test-time adaptation teach a model a rule it never saw?
# Tasks of the hidden-rule family (tinyrec-data rules: a dihedral transform composed with a colour
# permutation, 3-4 demonstration pairs and one test pair of random 3..5-sided grids). A tiny TRM trains on
# TRAIN_RULES rules (each with the ARC builder's augmentations, on a 6x6 canvas), then on TEST_RULES rules it
# never saw: exact accuracy (pass@1 / pass@2 of tinyrec-arc-eval) with the blank task id, and after
# tinyrec-adapt at each step budget of BUDGETS. Run it under the CPU lock on a shared machine:
#   flock /tmp/tinyrec-cpu.lock sh bench/adapt_rules.sh          (make bench-adapt; ~10 minutes on 2 cores)
# Settings by environment: BUILD (build), OUT (/tmp/tinyrec-adapt-rules), TRAIN_RULES (300), TEST_RULES (20),
# EPOCHS (180: ~2900 steps of 64 rows), BUDGETS ("0 50 100 200"), ADAPT (extra tinyrec-adapt keys).
set -e
B=${BUILD:-build}
OUT=${OUT:-/tmp/tinyrec-adapt-rules}
TRAIN_RULES=${TRAIN_RULES:-300}
TEST_RULES=${TEST_RULES:-20}
EPOCHS=${EPOCHS:-180}
BUDGETS=${BUDGETS:-"0 50 100 200"}
for p in data train adapt arc-eval; do
    test -x "$B/tinyrec-$p" || { echo "bench/adapt_rules.sh: $B/tinyrec-$p is missing (make $B/tinyrec-$p)" >&2; exit 1; }
done
rm -rf "$OUT" && mkdir -p "$OUT"
"$B/tinyrec-data" rules --output-dir "$OUT/rules" --train-rules "$TRAIN_RULES" --test-rules "$TEST_RULES"
"$B/tinyrec-data" arc --output-dir "$OUT/ds" --input-dir "$OUT/rules/training" --test-set-name training --num-aug 16 --canvas 6 --quiet
"$B/tinyrec-train" tiny data_path="$OUT/ds" checkpoint_path="$OUT/run" epochs="$EPOCHS" eval_interval="$EPOCHS" global_batch_size=64 \
    lr=1e-3 puzzle_emb_lr=1e-2 arch.halt_max_steps=4 print_interval=60 device=cpu | tail -3
CK="$OUT/run/latest.safetensors"
TASKS="$OUT/rules/evaluation.json"
echo "== unseen rules ($TEST_RULES tasks), blank task id, no adaptation"
"$B/tinyrec-adapt" "$CK" "$TASKS" steps=0 task_id=blank device=cpu quiet=1 output="$OUT/blank.jsonl" | grep -E 'pass@|adapted'
for s in $BUDGETS; do
    echo "== unseen rules, adapted: steps=$s $ADAPT"
    "$B/tinyrec-adapt" "$CK" "$TASKS" steps="$s" device=cpu quiet=1 output="$OUT/adapt_$s.jsonl" $ADAPT | grep -E 'pass@|adapted'
    "$B/tinyrec-arc-eval" --predictions "$OUT/adapt_$s.jsonl" --puzzles "$TASKS" --pass-k 1,2 | grep 'pass@'
done
