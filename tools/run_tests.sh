#!/usr/bin/env bash
# Builds and runs every test in the two configurations the project promises to work in:
#   build/          everything this machine has: the CUDA backend and its kernel simulator
#                   (where nvcc is installed), MPI and the distributed tests under mpiexec, the
#                   simulated NCCL;
#   build-minimal/  no MPI and no CUDA: the library a research codebase may embed on a laptop,
#                   where the distributed tests run as threads of one process;
#   build-fuzz/     the file readers under libFuzzer with ASan and UBSan, each target for
#                   TESSERA_FUZZ_SECONDS (20 s) on its seed corpus (tools/run_fuzzers.sh).
# Usage: tools/run_tests.sh   (from anywhere; exits non-zero on the first failure)
# Where ccache is installed, every compile goes through it, cached in .ccache/ (ignored by git):
# build-minimal/ then reuses each object whose preprocessed source equals build/'s.
# TESSERA_CCACHE=0 turns it off. Under ccache the tests' precompiled headers are off: the
# precompiled header holds each configuration's macros, so no test would match across the two,
# while without it most do. Measured on a fresh clone (README, "Building by hand"): 2,000 s
# of building before, 1,474 s with an empty cache.
set -euo pipefail
cd "$(dirname "$0")/.."

cache=(-DCMAKE_CXX_COMPILER_LAUNCHER= -DCMAKE_CUDA_COMPILER_LAUNCHER=
       -DCMAKE_DISABLE_PRECOMPILE_HEADERS=OFF)
if [ "${TESSERA_CCACHE:-1}" = 1 ] && command -v ccache > /dev/null; then
  export CCACHE_DIR=${CCACHE_DIR:-$PWD/.ccache}
  # Paths under the checkout are hashed relative to the build folder, so build/ and
  # build-minimal/ (siblings) name the same file alike, generated wrappers included.
  export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
  # -march=native means this CPU: its expansion (by the compiler CMake will pick: $CXX, else
  # c++) is hashed, so a cache moved to a machine with another CPU misses instead of handing
  # it objects that may not run there.
  mkdir -p "$CCACHE_DIR"
  "${CXX:-c++}" -march=native -### -E - < /dev/null 2>&1 | { grep cc1 || true; } \
    > "$CCACHE_DIR/native_target.txt"
  export CCACHE_EXTRAFILES=$CCACHE_DIR/native_target.txt
  cache=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache
         -DCMAKE_DISABLE_PRECOMPILE_HEADERS=ON)
fi

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${cache[@]}"
cmake --build build -j2
ctest --test-dir build --output-on-failure -j2 --timeout 900

cmake -S . -B build-minimal -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_WITH_MPI=OFF \
  -DTESSERA_WITH_CUDA=OFF -DTESSERA_NCCL=off -DTESSERA_BUILD_BENCHMARKS=OFF "${cache[@]}"
cmake --build build-minimal -j2
ctest --test-dir build-minimal --output-on-failure -j2 --timeout 900

./tools/run_fuzzers.sh
