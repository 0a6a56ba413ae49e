#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/) with AddressSanitizer and UBSan in build-fuzz/ and runs
# each for a bounded time on a copy of its committed seed corpus (fuzz/corpus/<target>/), with
# its dictionary (fuzz/dict/<target>.dict). A finding is a crash, a sanitizer report, an
# exception other than tessera::Error escaping a reader, an input slower than 10 s, more than
# 2 GiB of memory, or one allocation over 512 MiB (a size from a header allocated blindly).
# Every target runs; the script then exits non-zero if any found something, naming the target
# and the input (kept in build-fuzz/findings/<target>/; rerun one with
# `build-fuzz/fuzz/fuzz_<target> INPUT`). docs/fuzzing.md says more.
# Usage: tools/run_fuzzers.sh [target ...]   (default: all; TESSERA_FUZZ_SECONDS per target, 20)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${TESSERA_FUZZ_SECONDS:-20}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(safetensors token_shard tokenizer train_config checkpoint_state sharded_manifest llmc
  openai_request)

start=$(date +%s)
# The build type only names the configuration: the root CMakeLists.txt and fuzz/CMakeLists.txt
# set the flags (-O0 for the engine, -O1 and the sanitizers for the readers).
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS= \
  -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang -DTESSERA_FUZZ=ON \
  -DTESSERA_WITH_MPI=OFF -DTESSERA_WITH_CUDA=OFF -DTESSERA_NCCL=off -DTESSERA_BUILD_TESTS=OFF \
  -DTESSERA_BUILD_BENCHMARKS=OFF -DTESSERA_NATIVE=OFF >/dev/null
cmake --build build-fuzz -j2 --target fuzzers
built=$(date +%s)
echo "run_fuzzers: built in $((built - start)) s"

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1
export OMP_NUM_THREADS=1
failed=()
for t in "${targets[@]}"; do
  work=build-fuzz/corpus/$t findings=build-fuzz/findings/$t log=build-fuzz/$t.log
  rm -rf "$work" "$findings" && mkdir -p "$work" "$findings"
  cp fuzz/corpus/"$t"/* "$work"/
  dict=()
  [ -f fuzz/dict/"$t".dict ] && dict=(-dict=fuzz/dict/"$t".dict)
  if build-fuzz/fuzz/fuzz_"$t" "${dict[@]}" -max_total_time="$seconds" -rss_limit_mb=2048 \
      -malloc_limit_mb=512 -timeout=10 -max_len=65536 -artifact_prefix="$findings/" \
      -print_final_stats=1 "$work" >"$log" 2>&1; then
    echo "run_fuzzers: $t: $(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" |
      grep -o '[0-9]*$') executions in $seconds s, no finding"
  else
    tail -40 "$log" >&2
    echo "run_fuzzers: $t FOUND A FAILURE; its input: $(ls "$findings"/* 2>/dev/null | head -1)" \
         "(log: $log)" >&2
    failed+=("$t")
  fi
done
echo "run_fuzzers: fuzzed for $(($(date +%s) - built)) s"
if [ ${#failed[@]} -gt 0 ]; then
  echo "run_fuzzers: findings in: ${failed[*]}" >&2
  exit 1
fi
