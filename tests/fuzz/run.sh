#!/bin/sh
# Builds one fuzz target with libFuzzer + ASan + UBSan and runs it for SECONDS (default 60).
#   tests/fuzz/run.sh 600 safetensors     # tests/fuzz/fuzz_safetensors.c
#   tests/fuzz/run.sh 300 json            # tests/fuzz/fuzz_json.c
#   make fuzz FUZZ_SECONDS=600            # every target in turn
#   FUZZ_RUNS=4000 tests/fuzz/run.sh 0 json   # make fuzz-ci: a fixed number of inputs, a fixed seed
# Works from any directory. Needs clang with libFuzzer (Debian: clang libclang-rt-dev). Environment:
# FUZZ_CC (clang), FUZZ_JOBS (parallel workers, default 1), FUZZ_CFLAGS (extra compiler flags),
# FUZZ_OPT (-O1), FUZZ_OUT (build/fuzz: the binary, new coverage and findings).
# FUZZ_RUNS=N runs N inputs from FUZZ_SEED (1) instead of SECONDS, starting from the committed seeds
# alone (the scratch corpus is emptied first), with the address space not randomized (libFuzzer learns
# from the values that comparisons see, pointers among them), without re-reading the corpus every
# second and with the library's thread pool at one thread: the same commit runs the same inputs.
# Seeds: tests/fuzz/corpus_TARGET/ and the findings kept in tests/fuzz/regress_TARGET/; the dictionary
# tests/fuzz/TARGET.dict when there is one. Findings are written to build/fuzz/ as crash-*/leak-*/
# timeout-*/oom-* files: fix the reader and add each to tests/fuzz/regress_TARGET/, which make test
# replays. The committed seeds are only read; new coverage accumulates in build/fuzz/corpus-TARGET.
set -eu
SECS=${1:-60}
TARGET=${2:-safetensors}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${FUZZ_OUT:-$ROOT/build/fuzz}
CC=${FUZZ_CC:-clang}
JOBS=${FUZZ_JOBS:-1}
SRC="$ROOT/tests/fuzz/fuzz_$TARGET.c"
if [ ! -f "$SRC" ]; then
    echo "usage: $0 SECONDS TARGET  (targets: $(cd "$ROOT/tests/fuzz" && ls fuzz_*.c | sed 's/^fuzz_//; s/\.c$//' | tr '\n' ' '))" >&2
    exit 2
fi
if [ -n "${FUZZ_RUNS:-}" ]; then rm -rf "$OUT/corpus-$TARGET"; fi
mkdir -p "$OUT/corpus-$TARGET"
"$CC" -g ${FUZZ_OPT:--O1} -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -Wall -Wextra ${FUZZ_CFLAGS:-} -I"$ROOT" "$SRC" -o "$OUT/fuzz_$TARGET" -lm
FIXED=""
if [ -n "${FUZZ_RUNS:-}" ]; then
    LIMIT="-runs=$FUZZ_RUNS -seed=${FUZZ_SEED:-1} -reload=0"
    export TINYREC_NUM_THREADS=1
    if setarch "$(uname -m)" -R true 2>/dev/null; then FIXED="setarch $(uname -m) -R"
    else echo "note: setarch -R is refused here: with the address space randomized, runs may differ"; fi
else LIMIT="-max_total_time=$SECS"; fi
echo "fuzzing $TARGET ($LIMIT, workers: $JOBS); findings go to $OUT"
cd "$OUT"
# inputs as large as the largest seed (a checkpoint seed is 110 KB), at least 8 KB
MAXLEN=$(find "$ROOT/tests/fuzz/corpus_$TARGET" -type f -exec wc -c {} + 2>/dev/null | awk '$2 != "total" && $1 > m { m = $1 } END { print (m > 8192 ? m : 8192) }')
set -- $LIMIT -max_len="$MAXLEN" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$OUT/$TARGET-"
if [ -f "$ROOT/tests/fuzz/$TARGET.dict" ]; then set -- "$@" -dict="$ROOT/tests/fuzz/$TARGET.dict"; fi
if [ "$JOBS" -gt 1 ]; then set -- "$@" -jobs="$JOBS" -workers="$JOBS"; fi
set -- "$@" "corpus-$TARGET" "$ROOT/tests/fuzz/corpus_$TARGET"
if [ -d "$ROOT/tests/fuzz/regress_$TARGET" ]; then set -- "$@" "$ROOT/tests/fuzz/regress_$TARGET"; fi
exec $FIXED "./fuzz_$TARGET" "$@"
