#!/usr/bin/env bash
# The training loop's stall per checkpoint, written in the background (the default) and in the
# loop (--sync-save, the reference), on a 57.0M-parameter GPT (8 layers, width 768, 653 MB of
# weights and AdamW state per checkpoint) at dp2 under mpiexec. Each mode runs STEPS steps
# with a checkpoint every step and with one at the end only, REPS times each; the stall per
# save is the difference of the fastest wall times over the STEPS - 1 extra saves. Also
# prints the median step time, so the amortised cost at a 10-step interval follows, and the
# snapshot's size (what rank 0 holds on top of the model while a background save runs).
# Not part of CI (a few minutes on 2 cores).
# Usage: bench/checkpoint_stall.sh [steps] [reps]     (defaults 6 and 2)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${TESSERA_BIN:-$PWD/build/tools/tessera}
steps=${1:-6} reps=${2:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1
source tests/tools/tiny_corpus.sh
tiny_corpus "$BIN" "$work/corpus"
model='{"n_layer": 8, "n_head": 12, "n_kv_head": 12, "n_embd": 768, "block_size": 64}'

wall() {  # wall <checkpoint-every> <flags...>: seconds of one run
  local every=$1
  shift
  rm -rf "$work/run"
  local t0 t1
  t0=$(date +%s%N)
  mpiexec -n 2 "$BIN" train --train-data "$work/corpus/data/data_train_*.bin" --model "$model" \
    --batch-size 2 --seq-len 64 --threads 1 --dp 2 --max-steps "$steps" --checkpoint-every "$every" \
    --keep-checkpoints 0 --sample-tokens 0 --run-dir "$work/run" "$@" >/dev/null
  t1=$(date +%s%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) / 1e9 }'
}
fastest() {  # fastest <checkpoint-every> <flags...>
  local best="" t
  for _ in $(seq "$reps"); do
    t=$(wall "$@")
    if [ -z "$best" ] || awk -v t="$t" -v b="$best" 'BEGIN { exit !(t < b) }'; then best=$t; fi
  done
  echo "$best"
}
median_ms() { grep -o '"ms":[^,}]*' "$work/run/metrics.jsonl" | cut -d: -f2 | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

printf '%-10s %10s %10s %14s %12s %16s\n' mode "end (s)" "every (s)" "stall/save (s)" "step (ms)" "at 10 steps (%)"
for mode in background sync; do
  flags=()
  [ $mode = sync ] && flags=(--sync-save)
  t_end=$(fastest "$steps" "${flags[@]}")
  t_every=$(fastest 1 "${flags[@]}")
  step_ms=$(median_ms)
  bytes=$(du -sb "$work/run/checkpoints/$(printf 'step_%08d' "$steps")" | cut -f1)
  stall=$(awk -v e="$t_every" -v n="$t_end" -v s="$steps" 'BEGIN { printf "%.3f", (e - n) / (s - 1) }')
  share=$(awk -v x="$stall" -v m="$step_ms" 'BEGIN { printf "%.1f", 100 * x / (10 * m / 1000 + x) }')
  printf '%-10s %10s %10s %14s %12s %16s\n' $mode "$t_end" "$t_every" "$stall" "$step_ms" "$share"
done
echo "checkpoint: $bytes bytes (the background snapshot holds as much on rank 0 until written)"
