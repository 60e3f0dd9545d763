#!/bin/sh
# Runs an MPI test under mpirun: 4 processes (--oversubscribe: CI's
# machines have 2 cores), each a sim pool of 2 devices (8 ranks), then
# (without arguments) the same on the fake CUDA driver where it is built.
# SKIP where configure found no MPI (the program is not built) or no
# mpirun.
#   run.sh [PROGRAM [NP [CONFIG]]]
set -eu
build=${UMPOOL_BUILDDIR:-.}
prog=${1:-$build/tests/mpi/test_mpi_coll}
np=${2:-4}
config=${3:-backend:sim,sim_devices:2}
mpirun=${UMPOOL_MPIRUN:-}
if [ ! -x "$prog" ]; then
    echo "SKIP: $prog is not built (configure found no MPI)"
    exit 77
fi
if [ -z "$mpirun" ] || ! command -v "$mpirun" >/dev/null 2>&1; then
    echo "SKIP: no mpirun (configure's MPIRUN)"
    exit 77
fi
# shellcheck source=tests/mpi/mpirun.sh
. "$(dirname "$0")/mpirun.sh"
UMPOOL_MPI_TEST=${UMPOOL_MPI_TEST:-} # the test's parts; empty: all
export UMPOOL_MPI_TEST
opts="$MPIRUN_OPTS -x UMPOOL_MPI_TEST"
# shellcheck disable=SC2086 # opts is a list of words
timeout 900 "$mpirun" $opts \
    -np "$np" "$prog" "$config"
# The same on the cuda backend over the fake driver (tests/fake_cuda.c,
# built where cuda.h is): device buffers staged through host memory
# between processes, and NCCL's loading and fallback where libnccl loads.
# nocpu: device memory is not the CPU's, as on a GPU (a load or store of
# it by the test or the library is SIGSEGV here, not only on a GPU).
fake=${UMPOOL_TEST_PLUGINS:-}/libfakecuda.so
if [ $# -eq 0 ] && [ -f "$fake" ]; then
    UMPOOL_CUDA_DRIVER=$fake UMPOOL_FAKE_CUDA=devices=2,nocpu
    export UMPOOL_CUDA_DRIVER UMPOOL_FAKE_CUDA
    # shellcheck disable=SC2086
    timeout 900 "$mpirun" $opts \
        -x UMPOOL_CUDA_DRIVER -x UMPOOL_FAKE_CUDA -np "$np" "$prog" \
        backend:cuda
    # NCCL's data path, on a stand-in libnccl over MPI (fake_nccl.c): it
    # sends device memory as host memory, so without nocpu.
    nccl=$build/tests/mpi/.libs/libfakenccl.so
    if [ -f "$nccl" ]; then
        UMPOOL_NCCL_LIBRARY=$nccl UMPOOL_MPI_TEST=ncclp2p
        UMPOOL_FAKE_CUDA=devices=2
        export UMPOOL_NCCL_LIBRARY UMPOOL_MPI_TEST
        # shellcheck disable=SC2086
        timeout 900 "$mpirun" $opts -x UMPOOL_NCCL_LIBRARY \
            -x UMPOOL_CUDA_DRIVER -x UMPOOL_FAKE_CUDA -np "$np" "$prog" \
            backend:cuda
        unset UMPOOL_NCCL_LIBRARY
        UMPOOL_MPI_TEST=
    fi
    unset UMPOOL_CUDA_DRIVER UMPOOL_FAKE_CUDA
elif [ $# -eq 0 ]; then
    echo "(the fake CUDA driver is not built: the cuda run is left out)"
fi
# More ranks per process than the 2 above (the in-process phases' order
# with 4 ranks): 2 processes of 4 devices.
if [ $# -eq 0 ]; then
    # shellcheck disable=SC2086
    timeout 900 "$mpirun" $opts -np 2 "$prog" backend:sim,sim_devices:4
fi
