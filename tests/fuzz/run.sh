#!/bin/sh
# Builds the safetensors fuzzer with libFuzzer + ASan + UBSan and runs it for SECONDS (default 60).
#   tests/fuzz/run.sh 600          # from the repository root (or anywhere)
# Needs clang with libFuzzer (Debian: apt-get install clang libclang-rt-14-dev, or the matching version).
# New findings are written to build/fuzz/ as crash-*/leak-*/timeout-* files: minimise them, add
# them to tests/fuzz/corpus_regress/ and fix the reader. The seed corpus is not modified: new
# coverage goes to build/fuzz/corpus.
set -eu
SECONDS_TO_RUN=${1:-60}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT="$ROOT/build/fuzz"
CC=${FUZZ_CC:-clang}
JOBS=${FUZZ_JOBS:-1}
mkdir -p "$OUT/corpus"
"$CC" -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -Wall -Wextra ${FUZZ_CFLAGS:-} -I"$ROOT" "$ROOT/tests/fuzz/fuzz_safetensors.c" -o "$OUT/fuzz_safetensors" -lm
echo "fuzzing for ${SECONDS_TO_RUN}s (jobs: $JOBS); findings go to $OUT"
cd "$OUT"
if [ "$JOBS" -gt 1 ]; then
    exec ./fuzz_safetensors -max_total_time="$SECONDS_TO_RUN" -dict="$ROOT/tests/fuzz/safetensors.dict" \
        -max_len=4096 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -jobs="$JOBS" -workers="$JOBS" \
        -artifact_prefix="$OUT/" corpus "$ROOT/tests/fuzz/corpus" "$ROOT/tests/fuzz/corpus_regress"
fi
exec ./fuzz_safetensors -max_total_time="$SECONDS_TO_RUN" -dict="$ROOT/tests/fuzz/safetensors.dict" \
    -max_len=4096 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$OUT/" corpus "$ROOT/tests/fuzz/corpus" "$ROOT/tests/fuzz/corpus_regress"
