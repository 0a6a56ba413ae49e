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
set -euo pipefail
cd "$(dirname "$0")/.."

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j2
ctest --test-dir build --output-on-failure -j2 --timeout 900

cmake -S . -B build-minimal -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_WITH_MPI=OFF \
  -DTESSERA_WITH_CUDA=OFF -DTESSERA_NCCL=off -DTESSERA_BUILD_BENCHMARKS=OFF
cmake --build build-minimal -j2
ctest --test-dir build-minimal --output-on-failure -j2 --timeout 900

./tools/run_fuzzers.sh
