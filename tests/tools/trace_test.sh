#!/usr/bin/env bash
# trace_test.sh TESSERA MPIEXEC NP WORKDIR: `mpiexec -n 4 tessera train --dp 2 --pp 2
# --microbatches 4 --trace-steps 3:4` (1F1B), then `tessera trace merge`; check_trace.py checks
# the event format, the step track against the measured step times (1%), the micro-batches and
# the labelled collectives, and the SVG timeline is drawn.
set -uo pipefail
tessera=$1 mpiexec=$2 np=$3 dir=$4
fail() { echo "FAIL: $*" >&2; exit 1; }
export OMP_NUM_THREADS=1
source "$(dirname "$0")/tiny_corpus.sh"
tiny_corpus "$tessera" "$dir"
model='{"n_layer": 4, "n_head": 2, "n_kv_head": 2, "n_embd": 64, "block_size": 32}'
run=$dir/run
"$mpiexec" "$np" 4 "$tessera" train --train-data "$dir/data/data_train_*.bin" --model "$model" \
  --batch-size 8 --seq-len 32 --threads 1 --sample-tokens 0 --max-steps 5 --dp 2 --pp 2 \
  --microbatches 4 --trace-steps 3:4 --run-dir "$run" >"$dir/train.log" 2>&1 ||
  { cat "$dir/train.log" >&2; fail "the traced run failed"; }
"$tessera" trace merge "$run" --title "dp2 x pp2, 1F1B, 4 micro-batches: steps 3-4" >"$dir/merge.log" 2>&1 ||
  { cat "$dir/merge.log" >&2; fail "trace merge failed"; }
grep -Eq "^trace: 4 ranks, [0-9]+ spans -> $run/trace/merged.json, $run/trace/timeline.svg$" "$dir/merge.log" ||
  { cat "$dir/merge.log" >&2; fail "trace merge's line"; }
grep -q "<svg" "$run/trace/timeline.svg" && grep -q "forward m3" "$run/trace/timeline.svg" ||
  fail "the timeline has no forward of micro-batch 3"
python3 "$(dirname "$0")/check_trace.py" "$run" 4 || fail "check_trace.py"
# A range that cannot apply is refused.
"$tessera" train --train-data "$dir/data/data_train_*.bin" --max-steps 5 --trace-steps 6:7 \
  --run-dir "$dir/refused" >/dev/null 2>"$dir/refused.err" && fail "--trace-steps past the run accepted"
grep -q "trace-steps 6:7 starts after the last step" "$dir/refused.err" || fail "refusal: $(cat "$dir/refused.err")"
echo "trace_test: traces valid, step tracks within 1% of the measured steps, timeline drawn"
