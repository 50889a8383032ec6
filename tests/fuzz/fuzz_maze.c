/* libFuzzer target for the maze reader (see fuzz_readers.h). Build and run: tests/fuzz/run.sh SECONDS maze */
#define TINYREC_IMPLEMENTATION
#include "tinyrec.h"
#define FZ_TARGET FZ_MAZE
#include "fuzz_readers.h"
