#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/) with AddressSanitizer and UBSan in build-fuzz/ and runs
# each for a bounded time on a copy of its committed seed corpus (fuzz/corpus/<target>/).
# Exits non-zero on the first finding, naming the target and the input that triggered it
# (kept in build-fuzz/findings/<target>/).
# Usage: tools/run_fuzzers.sh [target ...]   (default: all; TESSERA_FUZZ_SECONDS per target, 20)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${TESSERA_FUZZ_SECONDS:-20}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(safetensors token_shard tokenizer train_config checkpoint_state llmc)

cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_FLAGS="-O1 -g" -DTESSERA_FUZZ=ON -DTESSERA_WITH_MPI=OFF \
  -DTESSERA_WITH_CUDA=OFF -DTESSERA_NCCL=off -DTESSERA_BUILD_TESTS=OFF \
  -DTESSERA_BUILD_BENCHMARKS=OFF -DTESSERA_NATIVE=OFF >/dev/null
cmake --build build-fuzz -j2 --target fuzzers

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1
export OMP_NUM_THREADS=1
for t in "${targets[@]}"; do
  work=build-fuzz/corpus/$t findings=build-fuzz/findings/$t
  rm -rf "$work" "$findings" && mkdir -p "$work" "$findings"
  cp fuzz/corpus/"$t"/* "$work"/
  # A header that claims a huge size must be refused, not allocated: 2 GiB of RSS and 512 MiB
  # in one malloc are findings.
  if ! build-fuzz/fuzz/fuzz_"$t" -max_total_time="$seconds" -rss_limit_mb=2048 \
      -malloc_limit_mb=512 -timeout=10 -max_len=65536 -artifact_prefix="$findings/" \
      -print_final_stats=1 "$work" >"build-fuzz/$t.log" 2>&1; then
    tail -40 "build-fuzz/$t.log" >&2
    echo "run_fuzzers: $t found a failure; its input: $(ls "$findings"/* 2>/dev/null | head -1)" >&2
    exit 1
  fi
  echo "run_fuzzers: $t: $(grep -o 'stat::number_of_executed_units: *[0-9]*' "build-fuzz/$t.log" |
    grep -o '[0-9]*$') executions in ${seconds} s, no finding"
done
