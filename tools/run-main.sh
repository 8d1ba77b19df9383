#!/usr/bin/env bash
# The main job: installs what it needs, builds, and trains an MLP on Fashion-MNIST
# data-parallel on 2 MPI ranks with the default backend (a GPU if one exists, else the CPU).
# Arguments go to `dptrain train` (e.g. --model cnn, --epochs 3, --backend vulkan); set
# DPT_RANKS to change the number of ranks.
set -euo pipefail
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$src/tools/deps.sh"
"$src/tools/build.sh"
build=${DPT_BUILD_DIR:-$src/build}
ranks=${DPT_RANKS:-2}
# One core per rank: the CPU backend's BLAS and PoCL would otherwise each take every core.
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1} POCL_MAX_PTHREAD_COUNT=${POCL_MAX_PTHREAD_COUNT:-1}
mpi_flags=()
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
if [ "$ranks" -gt "$(nproc)" ]; then mpi_flags+=(--oversubscribe); fi
exec mpirun -np "$ranks" "${mpi_flags[@]}" "$build/tools/dptrain" train "$@"
