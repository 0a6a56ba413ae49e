#!/usr/bin/env bash
# straggler_test.sh TESSERA MPIEXEC NP WORKDIR: `tessera train --dp 2` with a planted slowdown
# on rank 1 (TESSERA_FAULT=delay:..., cli/fault_injection.h) from step 6, --straggler-every 5:
#   data     20 ms more per step in the loader: flagged, blaming data, within 3 intervals;
#   compute  20 ms more per step of busy compute: flagged, blaming compute, within 3 intervals;
#   clean    1,000 steps with no delay: no flag (ctest runs this test alone: RUN_SERIAL).
set -uo pipefail
tessera=$1 mpiexec=$2 np=$3 dir=$4
fail() { echo "FAIL: $*" >&2; exit 1; }
export OMP_NUM_THREADS=1
source "$(dirname "$0")/tiny_corpus.sh"
tiny_corpus "$tessera" "$dir"
model='{"n_layer": 2, "n_head": 2, "n_kv_head": 2, "n_embd": 32, "block_size": 16}'
common=(train --train-data "$dir/data/data_train_*.bin" --model "$model" --batch-size 4
        --seq-len 16 --threads 1 --sample-tokens 0 --dp 2 --straggler-every 5)

# planted PHASE: 40 steps with rank 1 slowed in PHASE from step 6; exactly one flag, naming
# rank 1 and PHASE, at the end of an interval no later than the third after step 6 (step 20).
planted() {
  local phase=$1 log=$dir/$1.log
  TESSERA_FAULT="delay:$phase:1:20@6" "$mpiexec" "$np" 2 "$tessera" "${common[@]}" \
    --max-steps 40 --log-every 40 --run-dir "$dir/$phase" >"$log" 2>&1 ||
    { cat "$log" >&2; fail "$phase: the run failed"; }
  [ "$(grep -c '^straggler: ' "$log")" = 1 ] || { cat "$log" >&2; fail "$phase: not exactly one flag"; }
  local line last
  line=$(grep '^straggler: ' "$log")
  [[ $line =~ ^straggler:\ rank\ 1\ is\ slow\ in\ $phase:\ [0-9.]+\ ms/step\ against\ a\ median\ of\ [0-9.]+\ ms\ \(1\.5x\ or\ more\ for\ 2\ intervals\),\ steps\ [0-9]+-([0-9]+)$ ]] ||
    fail "$phase: the flag reads: $line"
  last=${BASH_REMATCH[1]}
  [ "$last" -le 20 ] || fail "$phase: flagged at step $last, later than 3 intervals after step 6"
  grep -q '"stragglers":\["straggler: rank 1' "$dir/$phase/metrics.jsonl" ||
    fail "$phase: the flag is not in metrics.jsonl"
  echo "$phase: $line"
}
planted data
planted compute

log=$dir/clean.log
"$mpiexec" "$np" 2 "$tessera" "${common[@]}" --max-steps 1000 --log-every 1000 \
  --checkpoint-every 0 --run-dir "$dir/clean" >"$log" 2>&1 || { cat "$log" >&2; fail "clean: the run failed"; }
[ "$(grep -c '^straggler: ' "$log")" = 0 ] || { grep '^straggler: ' "$log" >&2; fail "clean: flagged"; }
[ "$(wc -l <"$dir/clean/metrics.jsonl")" = 1000 ] || fail "clean: not 1000 steps logged"
echo "clean: 1000 steps, no flag"
