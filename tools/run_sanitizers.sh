#!/usr/bin/env bash
# Builds the library and the whole test suite with AddressSanitizer, LeakSanitizer and UBSan in
# build-asan/ (the build-minimal/ configuration: no MPI, no CUDA; the kernels still run on the
# kernel simulator, and the distributed tests as threads of one process) and runs every test
# under them. A test fails on the first report: an out-of-bounds access, a use after free, a
# leak at exit, or undefined behaviour (halt_on_error).
#
# Not part of tools/run_tests.sh: on a 2-core machine the instrumented build takes about 55
# minutes. Run it after a change to memory handling, a kernel or the simulator.
#
#   allocator_may_return_null=1  the allocation-failure tests ask for 2^52 bytes and expect
#                                Tessera's error; ASan would otherwise abort on the request.
#   package.find_package_consumer is left out: the outside project it builds against the
#                                installed library has no sanitizer runtime to link.
# Usage: tools/run_sanitizers.sh [ctest -R regex]   (default: every test)
set -euo pipefail
cd "$(dirname "$0")/.."

flags="-fsanitize=address,undefined -fno-omit-frame-pointer -g1"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_WITH_MPI=OFF \
  -DTESSERA_WITH_CUDA=OFF -DTESSERA_NCCL=off -DTESSERA_BUILD_BENCHMARKS=OFF \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" \
  -DCMAKE_SHARED_LINKER_FLAGS="$flags" >/dev/null
cmake --build build-asan -j2

export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir build-asan --output-on-failure -j2 --timeout 1800 \
  -E '^package\.find_package_consumer$' ${1:+-R "$1"}
