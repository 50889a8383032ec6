#!/bin/sh
# Issue 43, deliverable 5: does test-time adaptation teach a model a rule it never saw?
# The swap family of tinyrec-data rules: a task's hidden rule is a dihedral transform composed with the swap of two
# colours (or none), 8 x 46 = 368 rules over random 4x4 grids of ten colours. A tiny TRM (attention, D=64) trains on
# TRAIN_RULES of them (16 demonstration pairs each, on a 4x4 canvas); TEST_RULES others, each with 3-4
# demonstration pairs and one test pair as a new task comes, are then scored (pass@1 / pass@2, voted over the
# augmented versions as tinyrec-arc-eval does) with the blank task id, and after tinyrec-adapt at each step budget
# of BUDGETS. The task-id ablation (tinyrec-arc-eval --task-id) on the trained rules' own test pairs shows what
# their rows carry. Run it under the CPU lock on a shared machine:
#   flock /tmp/tinyrec-cpu.lock sh bench/adapt_rules.sh          (make bench-adapt; ~15 minutes on 2 cores)
# Settings by environment: BUILD (build), OUT (/tmp/tinyrec-adapt-rules), TRAIN_RULES (340), TEST_RULES (28),
# EPOCHS (120: 10200 steps of 64 rows), BUDGETS ("50 100 200 400"), ADAPT (extra tinyrec-adapt keys).
set -e
B=${BUILD:-build}
OUT=${OUT:-/tmp/tinyrec-adapt-rules}
TRAIN_RULES=${TRAIN_RULES:-340}
TEST_RULES=${TEST_RULES:-28}
EPOCHS=${EPOCHS:-120}
BUDGETS=${BUDGETS:-"50 100 200 400"}
for p in data train adapt arc-eval; do
    test -x "$B/tinyrec-$p" || { echo "bench/adapt_rules.sh: $B/tinyrec-$p is missing (make $B/tinyrec-$p)" >&2; exit 1; }
done
grep -m1 "model name" /proc/cpuinfo || true
rm -rf "$OUT" && mkdir -p "$OUT"
"$B/tinyrec-data" rules --output-dir "$OUT/rules" --swaps --train-rules "$TRAIN_RULES" --test-rules "$TEST_RULES" --min-side 4 --max-side 4 --train-demos 16
"$B/tinyrec-data" arc --output-dir "$OUT/ds" --input-dir "$OUT/rules/training" --test-set-name training --num-aug 0 --canvas 4 --quiet >/dev/null
"$B/tinyrec-train" tiny arch.mlp_t=false arch.pos_encodings=rope data_path="$OUT/ds" checkpoint_path="$OUT/run" epochs="$EPOCHS" \
    eval_interval=20 global_batch_size=64 lr=2e-3 puzzle_emb_lr=1e-2 arch.halt_max_steps=2 print_interval=100000 device=cpu | grep -E '^(eval|done)'
CK="$OUT/run/best.safetensors"
TASKS="$OUT/rules/evaluation.json"
for m in keep blank shuffle; do
    echo "== trained rules' test pairs, task ids: $m"
    "$B/tinyrec-arc-eval" "$CK" "$OUT/ds" --task-id $m --pass-k 1,2 --quiet | grep 'pass@'
done
echo "== unseen rules ($TEST_RULES tasks), blank task id, no adaptation"
"$B/tinyrec-adapt" "$CK" "$TASKS" steps=0 task_id=blank device=cpu quiet=1 | grep -E 'pass@'
for s in $BUDGETS; do
    echo "== unseen rules, adapted: steps=$s $ADAPT"
    "$B/tinyrec-adapt" "$CK" "$TASKS" steps="$s" device=cpu quiet=1 output="$OUT/adapt_$s.jsonl" $ADAPT | grep -E 'pass@|adapted'
    "$B/tinyrec-arc-eval" --predictions "$OUT/adapt_$s.jsonl" --puzzles "$TASKS" --pass-k 1,2 | grep 'pass@'
done
