/* libFuzzer target for the sudoku reader (see fuzz_readers.h). Build and run: tests/fuzz/run.sh SECONDS sudoku */
#define TINYREC_IMPLEMENTATION
#include "tinyrec.h"
#define FZ_TARGET FZ_SUDOKU
#include "fuzz_readers.h"
