#!/bin/sh
# make deps: installs what the build and `make test` need on Debian/Ubuntu (apt-get; with sudo when not
# root), and says in one line what is missing where it cannot install. .ci/run calls it too.
#   build-essential clang libclang-rt-dev libomp-dev  the compilers (clang: the sanitizer build and a compile test)
#   libcmocka-dev                                     the test suites
#   python3 python3-numpy python3-torch python3-yaml  the .npy checks, the PyTorch twin and the HRM converter's test
#   pocl-opencl-icd ocl-icd-opencl-dev opencl-c-headers clinfo   PoCL, a CPU OpenCL: the OpenCL suites run anywhere
#   openmpi-bin libopenmpi-dev                        the data-parallel tests (mpirun -np 2)
#   gcc-aarch64-linux-gnu qemu-user                   make test-aarch64 (NEON under qemu)
PKGS="build-essential clang libclang-rt-dev libomp-dev libcmocka-dev python3 python3-numpy python3-torch python3-yaml pocl-opencl-icd ocl-icd-opencl-dev opencl-c-headers clinfo openmpi-bin libopenmpi-dev gcc-aarch64-linux-gnu qemu-user"
need=""
if ! command -v dpkg >/dev/null 2>&1; then
    echo "deps: not a Debian/Ubuntu system; install the equivalents of: $PKGS" >&2
    exit 0
fi
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || need="$need $p"; done
if [ -z "$need" ]; then echo "deps: all installed"; exit 0; fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else echo "deps: missing:$need (run as root: apt-get install$need)" >&2; exit 1; fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq && $SUDO apt-get install -y -qq $need || { echo "deps: could not install:$need" >&2; exit 1; }
