#!/usr/bin/env bash
# The training loop's stall per checkpoint on a 57.0M-parameter GPT (8 layers, width 768, 684 MB
# of fp32 weights and AdamW state per checkpoint) at dp2 under mpiexec, for each way of saving:
#
#   gathered sync     rank 0 gathers the model and writes it in the loop (the old behaviour)
#   gathered bg       rank 0 gathers, copies, and writes in the background
#   sharded copy      every rank copies its half and writes it in the background
#   sharded stream    every rank writes its half straight from the live state in the
#                     background; the next update waits for the bytes (the default)
#
# Each mode runs STEPS steps with a checkpoint every step and with one at the end only, REPS
# times each; "wall" is the difference of the fastest wall times over the STEPS - 1 extra saves
# (the stall plus whatever the background writes cost the loop on shared cores). "direct" is
# what rank 0's loop measured: the time inside save() (checkpoints.jsonl stall_ms) plus the
# wait of the next update for a streamed snapshot (metrics.jsonl snapshot_wait_ms), the median
# over the saves. "step" is the median step of the run without saves; the shares amortise the
# direct stall and the wall cost over a 10-step interval of such steps; "extra" is what the
# snapshot copies on rank 0 beyond the state.
# Not part of CI (about 10 minutes on 2 cores).
# Usage: bench/checkpoint_stall.sh [steps] [reps]     (defaults 6 and 2; MODES="sharded copy,..."
# runs some of the modes; DP=1 runs one rank, which leaves the writer thread a core of its own
# on a 2-core machine, as a GPU node's idle cores would)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${TESSERA_BIN:-$PWD/build/tools/tessera}
steps=${1:-6} reps=${2:-2} dp=${DP:-2}
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
  mpiexec -n "$dp" "$BIN" train --train-data "$work/corpus/data/data_train_*.bin" --model "$model" \
    --batch-size 2 --seq-len 64 --threads 1 --dp "$dp" --max-steps "$steps" --checkpoint-every "$every" \
    --keep-checkpoints 2 --sample-tokens 0 --run-dir "$work/run" "$@" >/dev/null
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
median() { sort -g | awk '{a[NR]=$1} END {print (NR ? a[int((NR+1)/2)] : 0)}'; }
field() { grep -o "\"$2\":[^,}]*" "$work/run/$1" | cut -d: -f2; }

printf '%-16s %8s %8s %10s %11s %9s %12s %12s %12s\n' mode "end (s)" "every" "wall/save" \
  "direct (ms)" "step (ms)" "direct@10" "wall@10" "extra (MB)"
IFS=, read -r -a modes <<<"${MODES:-gathered sync,gathered bg,sharded copy,sharded stream}"
for mode in "${modes[@]}"; do
  case $mode in
    "gathered sync") flags=(--checkpoint-format gathered --sync-save) ;;
    "gathered bg") flags=(--checkpoint-format gathered) ;;
    "sharded copy") flags=(--checkpoint-format sharded --checkpoint-snapshot copy) ;;
    "sharded stream") flags=(--checkpoint-format sharded --checkpoint-snapshot stream) ;;
  esac
  t_end=$(fastest "$steps" "${flags[@]}")
  step_ms=$(field metrics.jsonl ms | median)  # steps with no save near them
  t_every=$(fastest 1 "${flags[@]}")
  # The stall of each save after the first (the first has no earlier write to wait for; the
  # last is followed by no update), plus the next step's wait for a streamed snapshot.
  stall_ms=$(python3 - "$work/run" "$steps" <<'PY'
import json, statistics, sys
run, steps = sys.argv[1], int(sys.argv[2])
saves = {r["step"]: r["stall_ms"] for r in map(json.loads, open(run + "/checkpoints.jsonl"))}
waits = {r["step"]: r.get("snapshot_wait_ms", 0) for r in map(json.loads, open(run + "/metrics.jsonl"))}
print(statistics.median(saves[s] + waits.get(s + 1, 0) for s in range(2, steps)))
PY
)
  extra=$(field checkpoints.jsonl snapshot_bytes | tail -1)
  wall_save=$(awk -v e="$t_every" -v n="$t_end" -v s="$steps" 'BEGIN { printf "%.3f", (e - n) / (s - 1) }')
  share=$(awk -v x="$stall_ms" -v m="$step_ms" 'BEGIN { printf "%.1f%%", 100 * x / (10 * m + x) }')
  share_wall=$(awk -v x="$wall_save" -v m="$step_ms" 'BEGIN { printf "%.1f%%", 100 * x / (0.01 * m + x) }')
  printf '%-16s %8s %8s %10s %11.1f %9.0f %12s %12s %12.0f\n' "$mode" "$t_end" "$t_every" "$wall_save" \
    "$stall_ms" "$step_ms" "$share" "$share_wall" "$(awk -v b="$extra" 'BEGIN { print b / 1e6 }')"
done
du -sb "$work/run/checkpoints/$(printf 'step_%08d' "$steps")" |
  awk '{ printf "checkpoint: %d bytes\n", $1 }'
