# tinyrec.h build. `make` builds examples, bench and tests into build/; `make test` runs every suite.
CC      ?= gcc
CXX     ?= g++
OPT     ?= -O2
WARN    := -Wall -Wextra
# CROSS=aarch64: the same build for 64-bit ARM (NEON kernels) with Debian's gcc-aarch64-linux-gnu, into
# build-arm/; `make test-aarch64` (= make CROSS=aarch64 qemu-test) runs the kernel, GEMM, model and
# parity suites under qemu-aarch64. cmocka for arm64 comes from Debian's packages, fetched with
# apt-get download and unpacked into build-arm/sysroot, not installed (it needs
# `dpkg --add-architecture arm64 && apt-get update` once; .ci/run does it).
CROSS   ?=
ifeq ($(CROSS),aarch64)
CC      := aarch64-linux-gnu-gcc
CXX     := aarch64-linux-gnu-g++
BUILD   ?= build-arm
ARM_SYSROOT := $(abspath $(BUILD))/sysroot
ARM_LIB := $(ARM_SYSROOT)/usr/lib/aarch64-linux-gnu
CMOCKA  := -I$(ARM_SYSROOT)/usr/include -L$(ARM_LIB) -Wl,-rpath,$(ARM_LIB)
CMOCKA_DEP := $(ARM_SYSROOT)/usr/include/cmocka.h
endif
# OPENMP=0: no -fopenmp; the library's parallel loops run on its own pthread pool (as with Apple
# clang). Its build goes to build-noomp/ so that the two never mix.
OPENMP  ?= 1
ifeq ($(OPENMP),1)
OMP     := -fopenmp
BUILD   ?= build
else
OMP     :=
BUILD   ?= build-noomp
endif
# -g1: line tables and function names (backtraces, perf), and a fifth less compile time than -g (each
# binary compiles the whole header); CFLAGS="-O2 -g ..." for a debugger's view of variables.
CFLAGS  ?= $(OPT) -g1 $(WARN) -std=c99 $(OMP) -pthread
CXXFLAGS?= $(OPT) -g1 $(WARN) $(OMP) -pthread
LDLIBS  := -lm
# OpenCL is loaded at run time (dlopen), so building it in needs no headers or library; a binary
# runs on the CPU where no OpenCL exists. OPENCL=0 leaves the backend out.
OPENCL  ?= 1
ifeq ($(OPENCL),1)
CL_FLAGS := -DTINYREC_OPENCL=1
LDLIBS   += -ldl
endif
CFLAGS   += $(CL_FLAGS)
CXXFLAGS += $(CL_FLAGS)
# Data-parallel training over MPI: MPI=1 builds tinyrec-train with mpicc and examples/tinyrec_mpi.h
# (run it with mpirun -np N). Whenever mpicc exists, make test also builds that program as
# build/mpi/tinyrec-train and runs tests/mpi.sh (test-mpi); TINYREC_REQUIRE_MPI=1 (CI) fails without it.
MPI     ?= 0
MPICC   ?= mpicc
HAVE_MPICC := $(shell command -v $(MPICC) 2>/dev/null)

TEST_SRCS    := $(wildcard tests/test_*.c)
TEST_BINS    := $(patsubst tests/%.c,$(BUILD)/%,$(TEST_SRCS))
EXAMPLE_SRCS := $(wildcard examples/*.c)
EXAMPLE_BINS := $(patsubst examples/%.c,$(BUILD)/tinyrec-%,$(EXAMPLE_SRCS))
# Fuzz targets (tests/fuzz/fuzz_NAME.c) are also built without libFuzzer as replayers of their seeds
# (tests/fuzz/corpus_NAME/) and kept findings (tests/fuzz/regress_NAME/), which make test runs.
FUZZ_TARGETS := $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
REPLAY_BINS  := $(patsubst %,$(BUILD)/fuzz_replay_%,$(FUZZ_TARGETS))
HDR          := tinyrec.h

.PHONY: all test test-mpi test-pool bench demo deps fuzz fuzz-ci clean compile-tests sanitize qemu-test test-aarch64 bench-adapt
all: $(EXAMPLE_BINS) $(BUILD)/tinyrec-bench $(BUILD)/tinyrec-gemm16 $(BUILD)/tinyrec-mlp16 $(TEST_BINS) $(REPLAY_BINS) compile-tests

$(BUILD):
	mkdir -p $(BUILD)

# The OpenCL C is edited in tools/opencl/*.cl; tools/cl_embed.sh (sh + awk) writes it into the header
# as string literals when a .cl file is newer. The header, generated blocks included, is committed.
CL_SRCS := $(wildcard tools/opencl/*.cl)
$(HDR): $(CL_SRCS) tools/cl_embed.sh
	sh tools/cl_embed.sh $(HDR)

$(BUILD)/test_%: tests/test_%.c tests/test_util.h $(HDR) | $(BUILD) $(CMOCKA_DEP)
	$(CC) $(CFLAGS) -DTINYREC_TEST_BUILD_DIR='"$(BUILD)"' -I. $< -o $@ $(CMOCKA) -lcmocka $(LDLIBS)

# (-O1: they only replay the seed corpora, and compile in 6 s against 15 s at -O2)
$(BUILD)/fuzz_replay_%: tests/fuzz/fuzz_%.c tests/fuzz/replay.c tests/fuzz/fuzz_readers.h $(HDR) | $(BUILD)
	$(CC) $(CFLAGS) -O1 -I. $< tests/fuzz/replay.c -o $@ $(LDLIBS)

$(BUILD)/tinyrec-%: examples/%.c examples/tinyrec_prog.h $(HDR) | $(BUILD)
	$(CC) $(CFLAGS) -I. $< -o $@ $(LDLIBS)

$(BUILD)/mpi:
	mkdir -p $@
$(BUILD)/mpi/tinyrec-train: examples/train.c examples/tinyrec_mpi.h examples/tinyrec_prog.h $(HDR) | $(BUILD)/mpi
	$(MPICC) $(CFLAGS) -DTINYREC_MPI=1 -I. $< -o $@ $(LDLIBS)
ifeq ($(MPI),1)
$(BUILD)/tinyrec-train: examples/train.c examples/tinyrec_mpi.h examples/tinyrec_prog.h $(HDR) | $(BUILD)
	$(MPICC) $(CFLAGS) -DTINYREC_MPI=1 -I. $< -o $@ $(LDLIBS)
endif

$(BUILD)/tinyrec-bench: bench/bench.c $(HDR) | $(BUILD)
	$(CC) $(CFLAGS) -I. $< -o $@ $(LDLIBS)
# The tensor-core products alone, checked and timed (bench/gemm16.c; bench/gemm16_torch.py is cuBLAS's side).
$(BUILD)/tinyrec-gemm16: bench/gemm16.c $(HDR) | $(BUILD)
	$(CC) $(CFLAGS) -I. $< -o $@ $(LDLIBS)
# The SwiGLU MLPs' tensor-core products (their epilogues) alone, timed, with a hash of their outputs (bench/mlp16.c).
$(BUILD)/tinyrec-mlp16: bench/mlp16.c $(HDR) | $(BUILD)
	$(CC) $(CFLAGS) -I. $< -o $@ $(LDLIBS)

# Issue 43's measurement (minutes, not part of make test): test-time adaptation on unseen hidden-rule tasks.
bench-adapt: $(BUILD)/tinyrec-data $(BUILD)/tinyrec-train $(BUILD)/tinyrec-adapt $(BUILD)/tinyrec-arc-eval
	BUILD=$(BUILD) sh bench/adapt_rules.sh

# The header as strict C99 and as C++, and two translation units linked together.
# (each with and without the OpenCL backend)
compile-tests: $(BUILD)/compile_c99 $(BUILD)/compile_cpp $(BUILD)/compile_two_tu $(BUILD)/readme_quickstart $(BUILD)/cl_nvptx.ok
$(BUILD)/compile_c99: tests/compile/impl.c tests/compile/user.c $(HDR) | $(BUILD)
	$(CC) -std=c99 -pedantic $(WARN) -Werror -I. tests/compile/impl.c -o $@ -lm
	$(CC) -std=c99 -pedantic $(WARN) -Werror -DTINYREC_OPENCL=1 -I. tests/compile/impl.c -o $(BUILD)/compile_c99_opencl -lm -ldl
$(BUILD)/compile_cpp: tests/compile/impl.cpp $(HDR) | $(BUILD)
	$(CXX) $(WARN) -Werror -I. tests/compile/impl.cpp -o $@ -lm
	$(CXX) $(WARN) -Werror -DTINYREC_OPENCL=1 -I. tests/compile/impl.cpp -o $(BUILD)/compile_cpp_opencl -lm -ldl
$(BUILD)/compile_two_tu: tests/compile/main.c tests/compile/user.c tinyrec.c $(HDR) | $(BUILD)
	$(CC) -std=c99 $(WARN) -Werror $(OMP) -pthread $(CL_FLAGS) -I. tests/compile/main.c tests/compile/user.c tinyrec.c -o $@ $(LDLIBS)
	$(CXX) $(WARN) -Werror $(OMP) -pthread $(CL_FLAGS) -I. -x c++ tests/compile/impl.cpp -o $(BUILD)/compile_cpp_omp $(LDLIBS)
	clang -std=c99 $(WARN) -Werror $(OMP) -pthread $(CL_FLAGS) -I. tests/compile/impl.c -o $(BUILD)/compile_clang_omp $(LDLIBS)

# The OpenCL C as an NVIDIA driver compiles it (clang's nvptx target): the inline PTX of the cp.async and tensor-core
# kernels (TR_GEMM_CP=1, TR_GEMM_MMA=1) is compiled nowhere else before a GPU run, where an error would turn them off.
# Both programs, in tr__cl_sources' order, with an H200's options; the wgmma build (TR_WG=1) keeps its marked instructions
# (tr__cl_wg_ptx uncomments them).
NVPTX := clang -x cl -cl-std=CL1.2 -target nvptx64-nvidia-nvcl -Xclang -finclude-default-header -Wno-pass-failed -Werror -S
$(BUILD)/cl_nvptx.ok: $(CL_SRCS) | $(BUILD)
	cat tools/opencl/ops.cl tools/opencl/gemm.cl tools/opencl/attention.cl > $(BUILD)/cl_all.cl
	$(NVPTX) -DTR_FP64=1 -DTR_GEMM_TM=128 -DTR_GEMM_TN=128 -DTR_GEMM_TK=16 -DTR_GEMM_WM=8 -DTR_GEMM_WN=8 -DTR_GEMM_VW=4 \
	  -DTR_GEMM_CP=1 -DTR_GEMM_ST=3 -o $(BUILD)/cl_main.ptx $(BUILD)/cl_all.cl
	$(NVPTX) -DTR_FP64=1 -DTR_MMA_ONLY=1 -DTR_GEMM_MMA=1 -o $(BUILD)/cl_mma.ptx $(BUILD)/cl_all.cl
	$(NVPTX) -DTR_FP64=1 -DTR_MMA_ONLY=1 -DTR_GEMM_MMA=1 -DTR_WG=1 -o $(BUILD)/cl_wg.ptx $(BUILD)/cl_all.cl
	grep -q '//@ { .reg .pred p; setp.ne.b32 p, %r[0-9]*, 0; wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%f' $(BUILD)/cl_wg.ptx
	grep -q 'wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%f[^}]*}, %rd[0-9]*, %rd[0-9]*, p, 1, 1, 1, 1; }' $(BUILD)/cl_wg.ptx
	touch $@

# The README's quick start is a program: extracted verbatim (its first ```c block), built as the README
# says (plus -Werror), and run by make test.
$(BUILD)/readme_quickstart.c: README.md | $(BUILD)
	awk '/^```c$$/ { f = 1; next } /^```$$/ { if (f) exit } f' README.md > $@
	@test -s $@ || { echo "README.md has no \`\`\`c block" >&2; exit 1; }
$(BUILD)/readme_quickstart: $(BUILD)/readme_quickstart.c $(HDR)
	$(CC) -O2 -std=c99 $(WARN) -Werror $(OMP) -pthread -I. $< -o $@ -lm

# The suites run side by side, TEST_JOBS at a time (make -j; -O keeps each suite's output together), the
# longest first: several leave cores idle (PoCL's kernel compiler, Python, program launches), which another
# suite then uses. Each suite makes its own temporary folders, so none sees another's files. test_opencl_model
# is not among the first: it builds the programs test_opencl_gemm builds first, found in PoCL's cache then.
TEST_JOBS  ?= $(shell nproc 2>/dev/null || echo 2)
# -O (output kept per suite) needs GNU make 4; macOS's make 3.81 runs the suites with their output interleaved
SYNC_OUT   := $(if $(filter 3.%,$(MAKE_VERSION)),,-O)
SLOW_FIRST := test_opencl_gemm test_device test_sgemm test_programs test_tools
in_order    = $(filter $(SLOW_FIRST),$(1)) $(filter-out $(SLOW_FIRST),$(1))
# run-NAME: suite NAME of $(BUILD) (SAN=1: of $(BUILD)/san, with the sanitizers' options)
SUITE_DIR   = $(if $(SAN),$(BUILD)/san,$(BUILD))
SUITE_ENV   = $(if $(SAN),ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1)
run-%:
	@echo "== $(SUITE_DIR)/$*"; s=$$(date +%s); TINYREC_BUILD_DIR=$(SUITE_DIR) $(SUITE_ENV) OMP_WAIT_POLICY=passive $(SUITE_DIR)/$* && \
	  echo "   ($(SUITE_DIR)/$*: $$(( $$(date +%s) - s )) s)"
test: all
	@$(MAKE) --no-print-directory -j$(TEST_JOBS) $(SYNC_OUT) $(patsubst %,run-%,$(call in_order,$(notdir $(TEST_BINS))))
	@set -e; for t in $(FUZZ_TARGETS); do $(BUILD)/fuzz_replay_$$t tests/fuzz/corpus_$$t tests/fuzz/regress_$$t; done
	@$(BUILD)/compile_c99 && $(BUILD)/compile_cpp && $(BUILD)/compile_two_tu && $(BUILD)/compile_c99_opencl && $(BUILD)/compile_cpp_opencl
	@echo "== README quick start" && cd $(BUILD) && TINYREC_DEVICE=cpu ./readme_quickstart && rm -f model.safetensors
	@echo "== docs/performance.md against docs/perf/*.json"; if command -v python3 >/dev/null; then \
	  python3 tools/perf_docs.py --check && python3 tools/perf_docs.py --self-test; else echo "   (no python3: make deps installs it)"; fi
	@echo "== the header's layering (tools/layering.py)"; if command -v python3 >/dev/null; then \
	  python3 tools/layering.py && python3 tools/layering.py --self-test; else echo "   (no python3: make deps installs it)"; fi
ifneq ($(HAVE_MPICC),)
	@$(MAKE) --no-print-directory test-mpi
else
	@if [ "$$TINYREC_REQUIRE_MPI" = 1 ]; then echo "no $(MPICC), and TINYREC_REQUIRE_MPI=1" >&2; exit 1; else echo "== MPI tests skipped: no $(MPICC)"; fi
endif
	@echo "all test suites passed"

# mpirun -np 2 on the CPU: equal losses to one process, resume across rank counts, a killed or hung rank.
test-mpi: $(BUILD)/mpi/tinyrec-train $(BUILD)/tinyrec-data
	@echo "== tests/mpi.sh" && sh tests/mpi.sh $(BUILD)/mpi/tinyrec-train $(BUILD)/tinyrec-data

# The suites whose code paths change without OpenMP (the library's pthread pool runs every parallel loop):
# `make OPENMP=0 test-pool` is CI's run of the pool build (test_threads also writes the final weights that
# .ci/run compares with the OpenMP build's); `make OPENMP=0 test` runs every suite that way.
POOL_SUITES := test_threads test_kernels test_sgemm test_model test_parity test_precision test_dist
test-pool: $(patsubst %,$(BUILD)/%,$(POOL_SUITES))
	@$(MAKE) --no-print-directory -j$(TEST_JOBS) $(SYNC_OUT) $(patsubst %,run-%,$(call in_order,$(POOL_SUITES)))
	@echo "pool suites passed"

# (CROSS=aarch64) libcmocka0 and libcmocka-dev for arm64, unpacked into the sysroot.
$(CMOCKA_DEP):
	rm -rf $(BUILD)/debs && mkdir -p $(BUILD)/debs $(ARM_SYSROOT)
	cd $(BUILD)/debs && apt-get download libcmocka0:arm64 libcmocka-dev:arm64
	for d in $(BUILD)/debs/*.deb; do dpkg -x $$d $(ARM_SYSROOT); done
# (test_threads and test_model are left out: under qemu they take minutes (test_model 4.6 on a Zen 3), and their
# logic is the same on every architecture; the NEON kernels are what this run is for, which test_kernels checks
# against their scalar twins, test_sgemm on every shape class and test_parity through the whole model)
QEMU_SUITES := test_kernels test_sgemm test_parity
qemu-test: $(patsubst %,$(BUILD)/%,$(QEMU_SUITES))
	@echo "== the header for aarch64 as strict C99 (gcc) and as C++ (clang)"
	$(CC) -std=c99 -pedantic $(WARN) -Werror -DTINYREC_OPENCL=1 -fsyntax-only -I. tests/compile/impl.c
	clang++ --target=aarch64-linux-gnu -isystem /usr/aarch64-linux-gnu/include $(WARN) -Werror -DTINYREC_OPENCL=1 -fsyntax-only -I. -x c++ tests/compile/impl.cpp
	@set -e; for t in $(QEMU_SUITES); do echo "== qemu-aarch64 $(BUILD)/$$t"; s=$$(date +%s); \
	  TINYREC_BUILD_DIR=$(BUILD) OMP_WAIT_POLICY=passive qemu-aarch64 -L /usr/aarch64-linux-gnu $(BUILD)/$$t; \
	  echo "   ($$t: $$(( $$(date +%s) - s )) s)"; done
	@echo "aarch64 suites passed under qemu"
test-aarch64:
	$(MAKE) CROSS=aarch64 qemu-test

bench: $(BUILD)/tinyrec-bench $(BUILD)/sgemm_bench
	$(BUILD)/tinyrec-bench
$(BUILD)/sgemm_bench: bench/sgemm_bench.c $(HDR) | $(BUILD)
	$(CC) $(CFLAGS) -I. $< -o $@ $(LDLIBS)

# The packages the build and make test need (Debian/Ubuntu: apt-get, with sudo when not root; elsewhere
# it names them). The README's test command is `make deps test`, as .ci/run runs it.
deps:
	sh tools/deps.sh

# The README's main job: generate Sudoku, train a small TRM on the CPU, solve held-out puzzles.
DEMO_ARGS ?=
demo: $(BUILD)/tinyrec-demo
	$(BUILD)/tinyrec-demo $(DEMO_ARGS)

# libFuzzer + ASan/UBSan on every fuzz target in turn (clang), FUZZ_SECONDS each; FUZZ_TARGETS=json
# picks some. FUZZ_SECONDS=600 for a campaign.
FUZZ_SECONDS ?= 60
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do tests/fuzz/run.sh $(FUZZ_SECONDS) $$t; done

# The short campaign CI runs (make -j2 fuzz-ci): every target for a fixed number of inputs from seed 1,
# starting from the committed seeds alone, so that a commit always runs the same inputs and a landing
# never fails by luck. Built at -O0: 6 s a target instead of 30 s at -O1 with the sanitizers, for half
# the speed; each count is about FUZZ_CI_SECONDS of that target on one core. Logs in build/fuzz-ci/.
FUZZ_CI_RUNS := safetensors:600000 json:500000 npy:1500000 dataset:40000 checkpoint:8000 config:300000 sudoku:300000 maze:400000 arc:300000 predictions:80000
fuzz-ci: $(patsubst %,fuzz-ci-%,$(FUZZ_TARGETS))
	@echo "fuzz-ci: every target ran its inputs without a finding"
fuzz-ci-%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz_readers.h $(HDR)
	@mkdir -p $(BUILD)/fuzz-ci
	@FUZZ_OUT=$(abspath $(BUILD))/fuzz-ci FUZZ_OPT=-O0 FUZZ_RUNS=$(or $(patsubst $*:%,%,$(filter $*:%,$(FUZZ_CI_RUNS))),10000) \
	  tests/fuzz/run.sh 0 $* > $(BUILD)/fuzz-ci/$*.log 2>&1 || { tail -n 30 $(BUILD)/fuzz-ci/$*.log; echo "fuzz-ci: $* failed (log: $(BUILD)/fuzz-ci/$*.log)"; exit 1; }
	@grep -h 'DONE' $(BUILD)/fuzz-ci/$*.log | sed 's/^/fuzz-ci $*: /'

# Every suite under AddressSanitizer + UndefinedBehaviorSanitizer (clang; leaks checked), in build/san/.
SAN_CC    ?= clang
SAN_FLAGS := -gline-tables-only -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
# -O0 for the suites that only parse, write files and drive the programs (and the fuzz replays), -O1 for the rest
# and the programs: clang takes 45 s to compile the header at -O1 with the sanitizers and 9 s at -O0, while a
# suite that computes runs 3-8x slower at -O0 (test_sgemm 25 s -> 210 s, test_device 118 s -> over 8 minutes on
# a Zen 3).
SAN_O0    := test_cl_embed test_config test_io test_data test_programs test_tools
SAN_OPT    = $(if $(filter $(1),$(SAN_O0)),-O0,-O1)
# OpenMP from libgomp: with clang 14's own libomp, LeakSanitizer's tracer crashes (SIGSEGV in
# StopTheWorld) at the exit of a process that made many contexts (test_device).
SAN_OMP   := -fopenmp=libgomp
SAN_BINS  := $(patsubst tests/%.c,$(BUILD)/san/%,$(TEST_SRCS))
SAN_PROGS := $(patsubst examples/%.c,$(BUILD)/san/tinyrec-%,$(EXAMPLE_SRCS))
SAN_REPLAY := $(patsubst %,$(BUILD)/san/fuzz_replay_%,$(FUZZ_TARGETS))
$(BUILD)/san:
	mkdir -p $@
$(BUILD)/san/test_%: tests/test_%.c tests/test_util.h $(HDR) | $(BUILD)/san $(EXAMPLE_BINS)
	$(SAN_CC) $(call SAN_OPT,test_$*) $(SAN_FLAGS) -std=c99 $(WARN) $(SAN_OMP) -pthread $(CL_FLAGS) -I. $< -o $@ -lcmocka $(LDLIBS)
$(BUILD)/san/fuzz_replay_%: tests/fuzz/fuzz_%.c tests/fuzz/replay.c tests/fuzz/fuzz_readers.h $(HDR) | $(BUILD)/san
	$(SAN_CC) -O0 $(SAN_FLAGS) $(WARN) $(SAN_OMP) -pthread $(CL_FLAGS) -I. $< tests/fuzz/replay.c -o $@ $(LDLIBS)
$(BUILD)/san/tinyrec-%: examples/%.c examples/tinyrec_prog.h $(HDR) | $(BUILD)/san
	$(SAN_CC) -O1 $(SAN_FLAGS) -std=c99 $(WARN) $(SAN_OMP) -pthread $(CL_FLAGS) -I. $< -o $@ $(LDLIBS)
# The program suites drive the sanitized programs (TINYREC_BUILD_DIR).
sanitize: $(SAN_BINS) $(SAN_PROGS) $(SAN_REPLAY)
	@$(MAKE) --no-print-directory -j$(TEST_JOBS) $(SYNC_OUT) SAN=1 $(patsubst %,run-%,$(call in_order,$(notdir $(SAN_BINS))))
	@set -e; for t in $(FUZZ_TARGETS); do ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  $(BUILD)/san/fuzz_replay_$$t tests/fuzz/corpus_$$t tests/fuzz/regress_$$t; done
	@echo "all sanitized suites passed"

clean:
	rm -rf $(BUILD)
