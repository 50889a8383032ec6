#!/bin/sh
# Issue 43, deliverable 5 on real ARC-AGI-1: a TRM trained on the training tasks for TRAIN_S seconds (SIGINT saves
# the checkpoint), then the first LIMIT evaluation tasks (unseen: no rows) scored with the blank id and after
# tinyrec-adapt with at most SECONDS_PER_TASK seconds of fine-tuning per task. Meant for a GPU (DEV); figures in
# docs/adapt.md. Settings by environment: BUILD (build), ARC (../shared/data/arc-agi-1), OUT (/tmp/tinyrec-adapt-arc),
# DEV (opencl), TRAIN_S (200), LIMIT (20), SECONDS_PER_TASK (4), MODEL (trm-arc keys: a quarter of its width).
set -e
B=${BUILD:-build}
ARC=${ARC:-../shared/data/arc-agi-1}
OUT=${OUT:-/tmp/tinyrec-adapt-arc}
DEV=${DEV:-opencl}
LIMIT=${LIMIT:-20}
MODEL=${MODEL:-"arch.hidden_size=256 arch.num_heads=4 arch.puzzle_emb_ndim=256 arch.H_cycles=2 arch.L_cycles=2 arch.halt_max_steps=4 global_batch_size=256"}
for p in data train adapt; do
    test -x "$B/tinyrec-$p" || { echo "bench/adapt_arc.sh: $B/tinyrec-$p is missing (make $B/tinyrec-$p)" >&2; exit 1; }
done
test -d "$ARC/training" || { echo "bench/adapt_arc.sh: no ARC-AGI-1 tasks in $ARC (set ARC=)" >&2; exit 1; }
rm -rf "$OUT" && mkdir -p "$OUT"
# the evaluation tasks as one file keyed by name (tinyrec-adapt's input)
{ printf '{'; sep=''; for f in "$ARC"/evaluation/*.json; do n=$(basename "$f" .json); printf '%s\n"%s": ' "$sep" "$n"; cat "$f"; sep=','; done; printf '}\n'; } > "$OUT/evaluation.json"
"$B/tinyrec-data" arc --output-dir "$OUT/ds" --input-dir "$ARC/training" --num-aug 64 --quiet >/dev/null
# --foreground: SIGINT to the trainer alone (a second one would stop it without saving)
timeout --foreground -s INT "${TRAIN_S:-200}" "$B/tinyrec-train" trm-arc $MODEL lr=3e-4 puzzle_emb_lr=1e-2 lr_warmup_steps=100 \
    arch.forward_dtype=bfloat16 data_path="$OUT/ds" checkpoint_path="$OUT/run" epochs=10000 eval_interval=10000 print_interval=30 device="$DEV" || true
CK="$OUT/run/latest.safetensors"
echo "== ARC-AGI-1 evaluation, first $LIMIT tasks, blank id, no adaptation"
"$B/tinyrec-adapt" "$CK" "$OUT/evaluation.json" steps=0 task_id=blank limit="$LIMIT" device="$DEV" quiet=1 output="$OUT/blank.jsonl" | grep -E 'pass@'
echo "== adapted: at most 500 steps or ${SECONDS_PER_TASK:-4} s per task"
"$B/tinyrec-adapt" "$CK" "$OUT/evaluation.json" steps=500 seconds="${SECONDS_PER_TASK:-4}" limit="$LIMIT" device="$DEV" quiet=1 output="$OUT/adapt.jsonl" | grep -E 'pass@|adapted'
