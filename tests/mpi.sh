#!/bin/sh
# Data-parallel tinyrec-train under mpirun, on the CPU (make test-mpi; CI installs Open MPI):
#   1. 2 ranks at global batch 8 give one process's losses at batch 8 (metrics.jsonl, every step, and
#      the evaluations, which the ranks split and reduce), with the all-reduce overlapped or not;
#   2. a checkpoint of 2 ranks resumes in 1 process and one of 1 process on 2 ranks, with the same losses;
#      2 ranks on OpenCL devices (PoCL), one of which falls back to its CPU mid-run, give the same losses;
#   3. a rank killed mid-run ends the job with a message, and the last checkpoint still resumes;
#   4. a rank that hangs (stopped) makes the others give up after TINYREC_MPI_TIMEOUT with a message;
#   5. ranks meant to have a GPU that find none stop the job at the start with the reason (no silent CPU),
#      and an OpenCL driver opened without the ICD loader trains.
# usage: sh tests/mpi.sh build/mpi/tinyrec-train build/tinyrec-data
set -eu
TRAIN=$1
DATA=$2
# Open MPI refuses to run as root (CI) unless told; more ranks than cores are fine here.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# the CPU only (PoCL would be "a GPU" to no one, but keep the ranks off it), one thread per rank
export TINYREC_DEVICE=cpu OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
# shared-memory transport only: no network probing on a CI machine
MPIRUN="mpirun --oversubscribe --mca btl self,vader -np"
dir=$(mktemp -d "${TMPDIR:-/tmp}/tinyrec-mpi-XXXXXX")
mpid=""
cleanup() {
    if [ -n "$mpid" ]; then kill -9 "$mpid" 2>/dev/null || true; fi
    if [ -z "${TINYREC_KEEP_TMP:-}" ]; then rm -rf "$dir"; fi
}
trap cleanup EXIT
fail() {
    echo "tests/mpi.sh: FAIL: $*" >&2
    exit 1
}

"$DATA" sudoku --output-dir "$dir/data" --generate 48 --generate-test 12 --clues 40 --num-aug 0 --seed 1 --quiet > "$dir/data.out" 2>&1 || fail "building the dataset: $(cat "$dir/data.out")"
# 6 steps per epoch, 24 in all, an evaluation (and checkpoint) every 2 epochs
ARGS="sudoku-tiny data_path=$dir/data global_batch_size=8 arch.halt_max_steps=3 arch.halt_exploration_prob=0.5 threads=1 lr_warmup_steps=2 epochs=4 eval_interval=2 log_interval=1"

run() { # tag np args...: runs under mpirun, output in $dir/tag.out
    tag=$1 np=$2
    shift 2
    $MPIRUN "$np" "$TRAIN" "$@" > "$dir/$tag.out" 2>&1 || fail "$tag: exit status $?: $(tail -20 "$dir/$tag.out")"
}

# "step loss" per train line, "step lm_loss exact_accuracy count" per eval line
losses() { awk -F'[,:{}]' '/"type":"train"/ { for (i = 1; i < NF; i++) { if ($i == "\"step\"") s = $(i+1); if ($i == "\"loss\"") l = $(i+1) } print s, l }' "$1"; }
evals() { awk -F'[,:{}]' '/"type":"eval"/ { for (i = 1; i < NF; i++) { if ($i == "\"step\"") s = $(i+1); if ($i == "\"lm_loss\"") l = $(i+1); if ($i == "\"exact_accuracy\"") e = $(i+1); if ($i == "\"count\"") c = $(i+1) } print s, l, e, c }' "$1"; }

# The ranks sum their gradients in another order than one process (an fp32 reassociation, ~1e-7
# relative per add). AdamATan2's sign-like steps of near-zero gradients carry that on, and so does the
# puzzle embedding's sign-SGD: this dataset has one puzzle id, so each step's sign is that of a sum over
# all 8 rows, and a component summing to ~0 flips with the last bit and moves by 2 lr. Measured over 24
# steps: train losses within 1.3e-4 relative, evaluation lm_loss within 3e-4 (one token of 972 predicted
# differently). rtol 3e-3 (train) and 1e-2 (eval) leave a margin, and stay far below what a wrong slice
# of the batch or a missed rank does (the losses move by percents); tests/test_dist.c checks the
# exploration draws' alignment and the equality more tightly.
same() { # what rtol file_a file_b
    paste -d' ' "$3" "$4" | awk -v what="$1" -v rtol="$2" '
        { n++; if ($1 != $(NF/2+1)) { print what ": step " $1 " against step " $(NF/2+1); bad = 1; exit }
          for (i = 2; i <= NF/2; i++) { a = $i; b = $(NF/2+i); d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b
              if (d > rtol * m + 1e-9) { print what ": step " $1 ": " a " against " b; bad = 1; exit } } }
        END { if (!bad && n == 0) { print what ": no lines"; bad = 1 } exit bad }' || fail "$1 differs (see above)"
}

echo "mpi: one process, then 2 ranks, at global batch 8"
run one 1 $ARGS checkpoint_path="$dir/one"
run two 2 $ARGS checkpoint_path="$dir/two"
grep -q "2 ranks, 4 rows each of the global batch of 8; devices: rank 0 .*; rank 1 " "$dir/two.out" || fail "the header does not name the ranks and their devices: $(head -5 "$dir/two.out")"
[ "$(grep -c "^tinyrec-train " "$dir/two.out")" = 1 ] || fail "more than rank 0 printed the header"
losses "$dir/one/metrics.jsonl" > "$dir/one.loss"
losses "$dir/two/metrics.jsonl" > "$dir/two.loss"
[ "$(wc -l < "$dir/one.loss")" = 24 ] || fail "one process logged $(wc -l < "$dir/one.loss") steps, not 24"
same "2 ranks against one process: train losses" 3e-3 "$dir/one.loss" "$dir/two.loss"
# Overlap off (one all-reduce a step instead of one per layer): each element is summed over the same
# ranks either way, so the losses are the same to the last digit.
export TINYREC_MPI_OVERLAP=0
run two0 2 $ARGS checkpoint_path="$dir/two0"
unset TINYREC_MPI_OVERLAP
grep -q "gradients all-reduced after the backward" "$dir/two0.out" || fail "TINYREC_MPI_OVERLAP=0 is not in the header: $(head -5 "$dir/two0.out")"
grep -q "gradients all-reduced layer by layer during the backward" "$dir/two.out" || fail "the overlap is not in the header: $(head -5 "$dir/two.out")"
losses "$dir/two0/metrics.jsonl" > "$dir/two0.loss"
cmp -s "$dir/two.loss" "$dir/two0.loss" || fail "overlap on and off give other losses: $(diff "$dir/two.loss" "$dir/two0.loss" | head -5)"
evals "$dir/one/metrics.jsonl" > "$dir/one.eval"
evals "$dir/two/metrics.jsonl" > "$dir/two.eval"
[ "$(wc -l < "$dir/one.eval")" = 2 ] || fail "not 2 evaluations"
same "2 ranks against one process: evaluations" 1e-2 "$dir/one.eval" "$dir/two.eval"

echo "mpi: resume 2 ranks -> 1 process, 1 process -> 2 ranks"
run r21a 2 $ARGS checkpoint_path="$dir/r21" max_steps=9
run r21b 1 --resume checkpoint_path="$dir/r21"
run r12a 1 $ARGS checkpoint_path="$dir/r12" max_steps=9
run r12b 2 --resume checkpoint_path="$dir/r12"
grep -q "resuming at step 9" "$dir/r12b.out" || fail "r12b did not resume at step 9"
losses "$dir/r21/metrics.jsonl" > "$dir/r21.loss"
losses "$dir/r12/metrics.jsonl" > "$dir/r12.loss"
same "resumed from 2 ranks in one process" 3e-3 "$dir/one.loss" "$dir/r21.loss"
same "resumed from one process on 2 ranks" 3e-3 "$dir/one.loss" "$dir/r12.loss"

# The ranks on OpenCL devices (PoCL here: device=opencl, which wins over the TINYREC_DEVICE above), the
# gradients staged through pinned memory while the backward goes on; rank 1's device fails in step 7 (an
# injected enqueue failure, its own TINYREC_FAULT) and it goes on on its CPU. Against one process on
# PoCL, with the tolerance above (the CPU's kernels differ from PoCL's by reassociation only).
echo "mpi: 2 ranks on OpenCL devices, one of which fails mid-run"
if $MPIRUN 1 "$TRAIN" $ARGS device=opencl checkpoint_path="$dir/cl1" > "$dir/cl1.out" 2>&1 && grep -q "^device opencl" "$dir/cl1.out"; then
    $MPIRUN 2 sh -c 'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then export TINYREC_FAULT=enqueue@7:200; fi; exec "$@"' sh "$TRAIN" $ARGS device=opencl \
        checkpoint_path="$dir/cl2" > "$dir/cl2.out" 2>&1 || fail "cl2: exit status $?: $(tail -20 "$dir/cl2.out")"
    grep -q "devices: rank 0 opencl.*; rank 1 opencl" "$dir/cl2.out" || fail "cl2: the ranks are not on OpenCL: $(head -5 "$dir/cl2.out")"
    grep -q "rank 1: warning: device: .*during step 7; moved .* to the cpu" "$dir/cl2.out" || fail "cl2: rank 1 did not fall back in step 7: $(grep -i warn "$dir/cl2.out")"
    losses "$dir/cl1/metrics.jsonl" > "$dir/cl1.loss"
    losses "$dir/cl2/metrics.jsonl" > "$dir/cl2.loss"
    same "2 OpenCL ranks, one falling back, against one process on OpenCL: train losses" 3e-3 "$dir/cl1.loss" "$dir/cl2.loss"
elif [ "${TINYREC_REQUIRE_OPENCL:-}" = 1 ]; then
    fail "no OpenCL device, and TINYREC_REQUIRE_OPENCL=1: $(tail -5 "$dir/cl1.out")"
else
    echo "mpi: skipped: no OpenCL device"
fi

# No silent CPU: ranks meant to have a GPU (TINYREC_EXPECT_GPU=1 stands in for a machine's GPU device nodes)
# whose OpenCL driver list names no usable driver (a launcher that handed them another list than the shell's)
# stop the job at the start, each naming its rank, what it saw and its driver list; nothing is trained.
echo "mpi: ranks meant to have a GPU that find none stop the job"
mkdir -p "$dir/novendors" # no driver of ocl-icd's folder either (it adds them to OCL_ICD_FILENAMES')
if TINYREC_DEVICE= TINYREC_EXPECT_GPU=1 OCL_ICD_FILENAMES=/nonexistent/libfake-gpu.so OCL_ICD_VENDORS="$dir/novendors" $MPIRUN 2 "$TRAIN" $ARGS checkpoint_path="$dir/nogpu" > "$dir/nogpu.out" 2>&1; then
    fail "nogpu: the job trained without the GPU: $(head -5 "$dir/nogpu.out")"
fi
# (the first rank to fail ends the job: the other may not get to say it)
grep -q "rank [01]: device 'gpu' cannot be opened: .*OCL_ICD_FILENAMES=/nonexistent/libfake-gpu.so" "$dir/nogpu.out" || fail "nogpu: no reason: $(cat "$dir/nogpu.out")"
grep -q "rank [01]:   OpenCL here" "$dir/nogpu.out" || fail "nogpu: no listing of what the rank saw: $(cat "$dir/nogpu.out")"
grep -q "rank [01]:   likely cause: the OpenCL driver list in this rank's environment" "$dir/nogpu.out" || fail "nogpu: no cause: $(cat "$dir/nogpu.out")"
[ ! -f "$dir/nogpu/metrics.jsonl" ] || fail "nogpu: a step was trained"
# A device named that does not exist: an error in one process too, not a warning and a CPU run.
if $MPIRUN 1 "$TRAIN" $ARGS device=opencl:40 checkpoint_path="$dir/cl40" > "$dir/cl40.out" 2>&1; then fail "cl40: trained: $(head -5 "$dir/cl40.out")"; fi
grep -q "device 'opencl:40' cannot be opened" "$dir/cl40.out" || fail "cl40: $(cat "$dir/cl40.out")"
# The same ranks with device=cpu train, on purpose.
TINYREC_EXPECT_GPU=1 OCL_ICD_FILENAMES=/nonexistent/libfake-gpu.so run nogpu-cpu 2 $ARGS device=cpu checkpoint_path="$dir/nogpu-cpu"
grep -q "devices: rank 0 cpu.*; rank 1 cpu" "$dir/nogpu-cpu.out" || fail "nogpu-cpu: $(head -5 "$dir/nogpu-cpu.out")"
# A driver opened directly when the ICD loader lists nothing (TINYREC_OPENCL_DRIVERS; the way NVIDIA's,
# AMD's and Intel's are tried by themselves): PoCL's, through its dispatch table, gives cl1's losses.
POCL=$(cat /etc/OpenCL/vendors/pocl.icd 2>/dev/null || true)
if [ -n "$POCL" ] && [ -f "$dir/cl1/metrics.jsonl" ]; then
    echo "mpi: an OpenCL driver opened without the ICD loader"
    OCL_ICD_FILENAMES=/nonexistent/libfake-gpu.so OCL_ICD_VENDORS="$dir/novendors" TINYREC_OPENCL_DRIVERS="/nonexistent/other.so:$POCL" run direct 2 $ARGS device=opencl checkpoint_path="$dir/direct"
    grep -q "devices: rank 0 opencl.*; rank 1 opencl" "$dir/direct.out" || fail "direct: the ranks are not on OpenCL: $(head -5 "$dir/direct.out")"
    losses "$dir/direct/metrics.jsonl" > "$dir/direct.loss"
    same "2 ranks on a directly opened driver against one process on OpenCL" 3e-3 "$dir/cl1.loss" "$dir/direct.loss"
fi

# A long run whose ranks write their pids; a checkpoint every epoch (6 steps).
long_run() { # tag: starts 2 ranks in the background ($mpid)
    rm -f "$dir"/pid.*
    $MPIRUN 2 sh -c 'echo $$ > "$0/pid.$OMPI_COMM_WORLD_RANK"; exec "$@"' "$dir" "$TRAIN" sudoku-tiny data_path="$dir/data" global_batch_size=8 threads=1 \
        epochs=100000 eval_interval=1 eval_batches=1 checkpoint_path="$dir/$1" > "$dir/$1.out" 2>&1 &
    mpid=$!
    n=0
    until [ -f "$dir/$1/latest.state.safetensors" ] && [ -f "$dir/pid.1" ]; do
        n=$((n + 1))
        [ $n -le 600 ] || fail "$1: no checkpoint after 60 s: $(tail -5 "$dir/$1.out")"
        kill -0 "$mpid" 2>/dev/null || fail "$1: mpirun exited early: $(tail -5 "$dir/$1.out")"
        sleep 0.1
    done
    sleep 1 # some steps past the checkpoint
}
wait_end() { # tag seconds: mpirun must end within that, with a non-zero status
    n=0
    while kill -0 "$mpid" 2>/dev/null; do
        n=$((n + 1))
        [ $n -le $(($2 * 10)) ] || fail "$1: the job still runs $2 s after the fault"
        sleep 0.1
    done
    st=0
    wait "$mpid" || st=$?
    mpid=""
    [ "$st" != 0 ] || fail "$1: mpirun exited with status 0 after the fault"
}
resumes() { # tag: the last checkpoint of the faulty run loads (and, at max_steps=1, saves again)
    run "$1.resume" 1 --resume checkpoint_path="$dir/$1" max_steps=1
    grep -q "^resuming at step [1-9]" "$dir/$1.resume.out" || fail "$1: the last checkpoint does not resume: $(tail -5 "$dir/$1.resume.out")"
}

echo "mpi: a rank killed mid-run ends the job"
long_run kill
kill -9 "$(cat "$dir/pid.1")"
wait_end kill 60
grep -qi "rank 1" "$dir/kill.out" || fail "kill: no message names rank 1: $(tail -10 "$dir/kill.out")"
grep -qiE "signal 9|killed" "$dir/kill.out" || fail "kill: no message says it was killed: $(tail -10 "$dir/kill.out")"
resumes kill

echo "mpi: a hung rank times the others out"
export TINYREC_MPI_TIMEOUT=5
long_run hang
unset TINYREC_MPI_TIMEOUT
kill -STOP "$(cat "$dir/pid.1")"
wait_end hang 60
grep -q "rank 0: .*the other ranks did not answer for [0-9]* s" "$dir/hang.out" || fail "hang: no timeout message: $(tail -10 "$dir/hang.out")"
resumes hang

echo "mpi: all passed"
