/* libFuzzer target for the arc reader (see fuzz_readers.h). Build and run: tests/fuzz/run.sh SECONDS arc */
#define TINYREC_IMPLEMENTATION
#include "tinyrec.h"
#define FZ_TARGET FZ_ARC
#include "fuzz_readers.h"
