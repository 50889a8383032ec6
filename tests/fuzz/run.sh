#!/bin/sh
# Builds a fuzzer with libFuzzer + ASan + UBSan and runs it for SECONDS (default 60).
#   tests/fuzz/run.sh 600              # the safetensors reader (fuzz_safetensors.c)
#   tests/fuzz/run.sh 300 json         # the JSON reader alone (fuzz_json.c)
#   tests/fuzz/run.sh 60 sudoku        # the puzzle readers: sudoku, maze, arc (fuzz_<target>.c)
# Works from any directory. Needs clang with libFuzzer (Debian: apt-get install clang
# libclang-rt-14-dev, or the version matching your clang). Environment: FUZZ_CC (clang),
# FUZZ_JOBS (parallel workers, default 1), FUZZ_CFLAGS (extra compiler flags).
# Findings are written to build/fuzz/ as crash-*/leak-*/timeout-*/oom-* files: add each to
# tests/fuzz/corpus_regress/ (safetensors) or tests/fuzz/corpus_regress_readers/<target>/ (puzzle
# readers), which make test replays, and fix the reader. The committed seed
# corpus is only read; new coverage accumulates in build/fuzz/corpus-<target>.
set -eu
SECS=${1:-60}
TARGET=${2:-safetensors}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="$ROOT/build/fuzz"
CC=${FUZZ_CC:-clang}
JOBS=${FUZZ_JOBS:-1}
case "$TARGET" in
safetensors) SEEDS="$ROOT/tests/fuzz/corpus $ROOT/tests/fuzz/corpus_regress" ;;
json) SEEDS="$ROOT/tests/fuzz/corpus_json" ;;
sudoku|maze|arc)
    SEEDS="$ROOT/tests/fuzz/corpus_$TARGET"
    if [ -d "$ROOT/tests/fuzz/corpus_regress_readers/$TARGET" ]; then SEEDS="$SEEDS $ROOT/tests/fuzz/corpus_regress_readers/$TARGET"; fi ;;
*) echo "usage: $0 SECONDS [safetensors|json|sudoku|maze|arc]" >&2; exit 2 ;;
esac
DICT="-dict=$ROOT/tests/fuzz/safetensors.dict"
case "$TARGET" in sudoku|maze|arc) DICT="" ;; esac
mkdir -p "$OUT/corpus-$TARGET"
"$CC" -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -Wall -Wextra ${FUZZ_CFLAGS:-} -I"$ROOT" "$ROOT/tests/fuzz/fuzz_$TARGET.c" -o "$OUT/fuzz_$TARGET" -lm
echo "fuzzing $TARGET for ${SECS}s (workers: $JOBS); findings go to $OUT"
cd "$OUT"
# shellcheck disable=SC2086 # DICT is empty or one option
set -- -max_total_time="$SECS" $DICT -max_len=4096 -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$OUT/"
if [ "$JOBS" -gt 1 ]; then set -- "$@" -jobs="$JOBS" -workers="$JOBS"; fi
# shellcheck disable=SC2086 # SEEDS is a list of directories
exec "./fuzz_$TARGET" "$@" "corpus-$TARGET" $SEEDS
