# tinyrec.h build. `make` builds examples, bench and tests into build/; `make test` runs every suite.
CC      ?= gcc
CXX     ?= g++
OPT     ?= -O2
WARN    := -Wall -Wextra
CFLAGS  ?= $(OPT) -g $(WARN) -std=c99 -fopenmp -pthread
CXXFLAGS?= $(OPT) -g $(WARN) -fopenmp -pthread
LDLIBS  := -lm
BUILD   := build
# OpenCL is loaded at run time (dlopen), so building it in needs no headers or library; a binary
# runs on the CPU where no OpenCL exists. OPENCL=0 leaves the backend out.
OPENCL  ?= 1
ifeq ($(OPENCL),1)
CL_FLAGS := -DTINYREC_OPENCL=1
LDLIBS   += -ldl
endif
CFLAGS   += $(CL_FLAGS)
CXXFLAGS += $(CL_FLAGS)

TEST_SRCS    := $(wildcard tests/test_*.c)
TEST_BINS    := $(patsubst tests/%.c,$(BUILD)/%,$(TEST_SRCS))
EXAMPLE_SRCS := $(wildcard examples/*.c)
EXAMPLE_BINS := $(patsubst examples/%.c,$(BUILD)/tinyrec-%,$(EXAMPLE_SRCS))
HDR          := tinyrec.h

.PHONY: all test bench demo fuzz clean compile-tests
all: $(EXAMPLE_BINS) $(BUILD)/tinyrec-bench $(TEST_BINS) compile-tests

$(BUILD):
	mkdir -p $(BUILD)

# The OpenCL C is edited in tools/opencl/*.cl; tools/cl_embed.sh (sh + awk) writes it into the header
# as string literals when a .cl file is newer. The header, generated blocks included, is committed.
CL_SRCS := $(wildcard tools/opencl/*.cl)
$(HDR): $(CL_SRCS) tools/cl_embed.sh
	sh tools/cl_embed.sh $(HDR)

$(BUILD)/test_%: tests/test_%.c tests/test_util.h $(HDR) | $(BUILD)
	$(CC) $(CFLAGS) -I. $< -o $@ -lcmocka $(LDLIBS)

$(BUILD)/tinyrec-%: examples/%.c $(HDR) | $(BUILD)
	$(CC) $(CFLAGS) -I. $< -o $@ $(LDLIBS)

$(BUILD)/tinyrec-bench: bench/bench.c $(HDR) | $(BUILD)
	$(CC) $(CFLAGS) -I. $< -o $@ $(LDLIBS)

# The header as strict C99 and as C++, and two translation units linked together.
# (each with and without the OpenCL backend)
compile-tests: $(BUILD)/compile_c99 $(BUILD)/compile_cpp $(BUILD)/compile_two_tu
$(BUILD)/compile_c99: tests/compile/impl.c tests/compile/user.c $(HDR) | $(BUILD)
	$(CC) -std=c99 -pedantic $(WARN) -Werror -I. tests/compile/impl.c -o $@ -lm
	$(CC) -std=c99 -pedantic $(WARN) -Werror -DTINYREC_OPENCL=1 -I. tests/compile/impl.c -o $(BUILD)/compile_c99_opencl -lm -ldl
$(BUILD)/compile_cpp: tests/compile/impl.cpp $(HDR) | $(BUILD)
	$(CXX) $(WARN) -Werror -I. tests/compile/impl.cpp -o $@ -lm
	$(CXX) $(WARN) -Werror -DTINYREC_OPENCL=1 -I. tests/compile/impl.cpp -o $(BUILD)/compile_cpp_opencl -lm -ldl
$(BUILD)/compile_two_tu: tests/compile/main.c tests/compile/user.c tinyrec.c $(HDR) | $(BUILD)
	$(CC) -std=c99 $(WARN) -Werror -fopenmp -pthread $(CL_FLAGS) -I. tests/compile/main.c tests/compile/user.c tinyrec.c -o $@ $(LDLIBS)
	$(CXX) $(WARN) -Werror -fopenmp -pthread $(CL_FLAGS) -I. -x c++ tests/compile/impl.cpp -o $(BUILD)/compile_cpp_omp $(LDLIBS)
	clang -std=c99 $(WARN) -Werror -fopenmp -pthread $(CL_FLAGS) -I. tests/compile/impl.c -o $(BUILD)/compile_clang_omp $(LDLIBS)

test: all
	@set -e; for t in $(TEST_BINS); do echo "== $$t"; OMP_WAIT_POLICY=passive $$t; done
	@$(BUILD)/compile_c99 && $(BUILD)/compile_cpp && $(BUILD)/compile_two_tu && $(BUILD)/compile_c99_opencl && $(BUILD)/compile_cpp_opencl
	@echo "all test suites passed"

bench: $(BUILD)/tinyrec-bench
	$(BUILD)/tinyrec-bench

# The README's main job: generate Sudoku, train a small TRM on the CPU, solve held-out puzzles.
DEMO_ARGS ?=
demo: $(BUILD)/tinyrec-demo
	$(BUILD)/tinyrec-demo $(DEMO_ARGS)

# libFuzzer + ASan/UBSan on the safetensors reader (clang). FUZZ_SECONDS=600 for a campaign.
FUZZ_SECONDS ?= 60
fuzz:
	tests/fuzz/run.sh $(FUZZ_SECONDS) safetensors

clean:
	rm -rf $(BUILD)
