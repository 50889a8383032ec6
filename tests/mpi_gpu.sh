#!/bin/sh
# Data-parallel tinyrec-train on a machine with GPUs but no MPI installed (a lent nvidia-h200-x2): Open MPI
# is carried as Debian packages and unpacked with dpkg -x. Checks (no timing of its own):
#   - 2 ranks at global batch B give one process's losses at B (the same tolerance as tests/mpi.sh);
#   - TINYREC_MPI_OVERLAP=0 gives the same losses as the overlapped all-reduce, bit for bit;
# then runs the scaling pair the lead times: 1 rank at PER_GPU rows and 2 ranks at 2 x PER_GPU rows, each
# rank on its own GPU (by local rank), with overlap on and off; their progress lines give samples/s.
# usage: sh tests/mpi_gpu.sh DEBS TRAIN DATA_BIN [PRESET] [PER_GPU] [STEPS]
#   DEBS      a folder with openmpi-bin openmpi-common libopenmpi3 libpmix2 libevent-core-2.1-7
#             libevent-pthreads-2.1-7 libhwloc15 (apt-get download ...; Debian 12's)
#   TRAIN     tinyrec-train built with MPI=1 (build/mpi/tinyrec-train), DATA_BIN build/tinyrec-data
set -eu
DEBS=$1 TRAIN=$2 DATA=$3 PRESET=${4:-trm-sudoku-mlp} PER_GPU=${5:-768} STEPS=${6:-60}
T=${TMPDIR:-/tmp}/tinyrec-mpi-gpu
R=$T/ompi
rm -rf "$T"
mkdir -p "$R"
for d in "$DEBS"/*.deb; do dpkg -x "$d" "$R"; done
ln -sf orterun "$R/usr/bin/mpirun" # Debian's mpirun is an alternatives link, which dpkg -x does not make
# Open MPI and PMIx find their plugins and help files under the prefix they are told of
export OPAL_PREFIX="$R/usr" PMIX_INSTALL_PREFIX="$R/usr/lib/x86_64-linux-gnu/pmix2" PATH="$R/usr/bin:$PATH"
export LD_LIBRARY_PATH="$R/usr/lib/x86_64-linux-gnu/openmpi/lib:$R/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_base_warn_component_unused=0 OMPI_MCA_mtl=^ofi
MPIRUN="mpirun --oversubscribe --mca btl self,vader --bind-to none -np"
mpirun --version | head -1
"$DATA" sudoku --output-dir "$T/data" --generate 20000 --generate-test 512 --num-aug 0 --seed 1 --quiet
ARGS="$PRESET data_path=$T/data epochs=10 eval_interval=10 log_interval=1" # max_steps ends each run well before
fail() { echo "tests/mpi_gpu.sh: FAIL: $*" >&2; exit 1; }
run() { # tag np args...
    tag=$1 np=$2
    shift 2
    $MPIRUN "$np" "$TRAIN" "$@" checkpoint_path="$T/$tag" > "$T/$tag.out" 2>&1 || fail "$tag: $(tail -20 "$T/$tag.out")"
    head -3 "$T/$tag.out" | cut -c1-400
    tr '\r' '\n' < "$T/$tag.out" | grep "samples/s\|^done\|^all-reduce" | tail -3
}
losses() { awk -F'[,:{}]' '/"type":"train"/ { for (i = 1; i < NF; i++) { if ($i == "\"step\"") s = $(i+1); if ($i == "\"loss\"") l = $(i+1) } print s, l }' "$1"; }

# ACT rows of at most 2 steps: a carry that recurs for 16 steps (the presets' halt_max_steps) carries the
# fp32 reassociation of the ranks' sums on through ~100 applications of the net, which amplify it by
# about 5x a step (measured: 6e-10 at step 2, 1e-7 at step 5, 1e-2 at step 11, between one process and
# 2 ranks on the CPU, smoothly: no step where a row or a draw goes wrong).
EQ="arch.halt_max_steps=2 global_batch_size=$PER_GPU max_steps=20"
echo "== equal losses: 1 process and 2 ranks at global batch $PER_GPU, 20 steps"
run eq1 1 $ARGS $EQ
run eq2 2 $ARGS $EQ
export TINYREC_MPI_OVERLAP=0
run eq2o 2 $ARGS $EQ
unset TINYREC_MPI_OVERLAP
losses "$T/eq1/metrics.jsonl" > "$T/eq1.loss"
losses "$T/eq2/metrics.jsonl" > "$T/eq2.loss"
losses "$T/eq2o/metrics.jsonl" > "$T/eq2o.loss"
paste -d' ' "$T/eq1.loss" "$T/eq2.loss" | awk '{ d = $2 - $4; if (d < 0) d = -d; if (d > 3e-3 * ($2 < 0 ? -$2 : $2)) { print "step " $1 ": " $2 " against " $4; bad = 1 } } END { exit bad }' ||
    fail "2 ranks differ from one process"
cmp -s "$T/eq2.loss" "$T/eq2o.loss" || fail "overlap on and off give other losses"
echo "equal losses: ok"

[ "$STEPS" -gt 0 ] || exit 0 # STEPS 0: the equal losses alone (a machine of one GPU, which the ranks share)
echo "== scaling: $PRESET, $PER_GPU rows per GPU, $STEPS steps (read samples/s)"
run s1 1 $ARGS global_batch_size="$PER_GPU" max_steps="$STEPS"
run s2 2 $ARGS global_batch_size=$((2 * PER_GPU)) max_steps="$STEPS"
export TINYREC_MPI_OVERLAP=0
run s2o 2 $ARGS global_batch_size=$((2 * PER_GPU)) max_steps="$STEPS"
unset TINYREC_MPI_OVERLAP
