#!/usr/bin/env bash
# The training loop's stall per checkpoint on a 57.0M-parameter GPT (8 layers, width 768, 684 MB
# of fp32 weights and AdamW state per checkpoint) at dp2 under mpiexec, for each way of saving:
#
#   gathered sync     rank 0 gathers the model and writes it in the loop (the old behaviour)
#   gathered bg       rank 0 gathers, copies, and writes in the background
#   sharded copy      every rank copies its half and writes it in the background
#   sharded stream    every rank writes its half straight from the live state in the
#                     background; the next update waits for the bytes (the CPU's default)
#   sharded staged    a GPU's half downloads on a side stream into page-locked memory (the
#                     GPU's default), a CPU's is copied by the writer thread, while the loop
#                     goes on; the next update waits for that copy, not for the write
#
# Each mode runs STEPS steps with a checkpoint every EVERY steps and with one at the end only,
# REPS times each; "wall" is the difference of the fastest wall times over the extra saves
# (the stall plus whatever the background writes cost the loop on shared cores). "direct" is
# what rank 0's loop measured: the time inside save() (checkpoints.jsonl stall_ms) plus the
# wait of the next update for a streamed or staged snapshot (metrics.jsonl snapshot_wait_ms),
# the median over the saves before the last. "step" is the median step of the run without
# saves; the shares amortise the direct stall and the wall cost over an interval of EVERY
# such steps (10 when EVERY is 1), stall / (interval x step + stall); "extra" is the host
# memory the snapshot held on rank 0 beyond the state.
# Not part of CI (about 10 minutes on 2 cores).
# Usage: bench/checkpoint_stall.sh [steps] [reps]     (defaults 6 and 2)
#   MODES="sharded copy,..."  some of the modes
#   DP=1                      one rank: on a 2-core machine the writer thread gets a core of its
#                             own, as on a GPU node whose cores idle while the GPUs compute
#   EVERY=10                  the save interval (default 1: a save after every step, which also
#                             waits for the write before it); the issue's figure is
#                             EVERY=10 with 21 steps
#   DEVICE=cuda PRECISION=bf16  on a GPU machine (ranks share the visible GPUs by local rank):
#                             DEVICE=cuda DP=1 EVERY=10 MODES="sharded staged,sharded stream,sharded copy"
#                             bench/checkpoint_stall.sh 21 2
#   MPIEXEC=path              the launcher (default: mpiexec on PATH)
#   JSON=path                 also append one JSON line per mode there (the device check's rows)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${TESSERA_BIN:-$PWD/build/tools/tessera}
steps=${1:-6} reps=${2:-2} dp=${DP:-2} every=${EVERY:-1}
device=${DEVICE:-cpu} precision=${PRECISION:-fp32}
interval=$every
[ "$every" = 1 ] && interval=10
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1
source tests/tools/tiny_corpus.sh
tiny_corpus "$BIN" "$work/corpus"
model=${MODEL:-'{"n_layer": 8, "n_head": 12, "n_kv_head": 12, "n_embd": 768, "block_size": 64}'}

wall() {  # wall <checkpoint-every> <flags...>: seconds of one run
  local every=$1
  shift
  rm -rf "$work/run"
  local t0 t1
  t0=$(date +%s%N)
  "${MPIEXEC:-mpiexec}" -n "$dp" "$BIN" train --train-data "$work/corpus/data/data_train_*.bin" --model "$model" \
    --batch-size 2 --seq-len 64 --threads 1 --dp "$dp" --max-steps "$steps" --checkpoint-every "$every" \
    --keep-checkpoints 2 --sample-tokens 0 --device "$device" --precision "$precision" \
    --run-dir "$work/run" "$@" >/dev/null
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

echo "device $device ($precision), dp $dp, $steps steps, a save every $every step(s) against one at the end, fastest of $reps"
printf '%-16s %8s %8s %10s %11s %9s %12s %12s %12s\n' mode "end (s)" "every" "wall/save" \
  "direct (ms)" "step (ms)" "direct@$interval" "wall@$interval" "extra (MB)"
IFS=, read -r -a modes <<<"${MODES:-gathered sync,gathered bg,sharded copy,sharded stream}"
for mode in "${modes[@]}"; do
  case $mode in
    "gathered sync") flags=(--checkpoint-format gathered --sync-save) ;;
    "gathered bg") flags=(--checkpoint-format gathered) ;;
    "sharded copy") flags=(--checkpoint-format sharded --checkpoint-snapshot copy) ;;
    "sharded stream") flags=(--checkpoint-format sharded --checkpoint-snapshot stream) ;;
    "sharded staged") flags=(--checkpoint-format sharded --checkpoint-snapshot staged) ;;
    *) echo "checkpoint_stall: unknown mode '$mode'" >&2; exit 2 ;;
  esac
  t_end=$(fastest "$steps" "${flags[@]}")
  step_ms=$(field metrics.jsonl ms | median)  # steps with no save near them
  t_every=$(fastest "$every" "${flags[@]}")
  # The stall of each save but the last (followed by no update), plus the next step's wait for
  # its snapshot; with a save every step, also leaving out the first (no earlier write to wait
  # for, unlike the others).
  stall_ms=$(python3 - "$work/run" "$every" <<'PY'
import json, statistics, sys
run, every = sys.argv[1], int(sys.argv[2])
saves = {r["step"]: r["stall_ms"] for r in map(json.loads, open(run + "/checkpoints.jsonl"))}
waits = {r["step"]: r.get("snapshot_wait_ms", 0) for r in map(json.loads, open(run + "/metrics.jsonl"))}
steps = sorted(saves)[1 if every == 1 else 0:-1]
print(statistics.median(saves[s] + waits.get(s + 1, 0) for s in steps))
PY
)
  extra=$(field checkpoints.jsonl snapshot_bytes | tail -1)
  extra_saves=$(((steps - 1) / every))  # the saves beyond the final one, which both runs make
  wall_save=$(awk -v e="$t_every" -v n="$t_end" -v k="$extra_saves" 'BEGIN { printf "%.3f", (e - n) / k }')
  share=$(awk -v x="$stall_ms" -v m="$step_ms" -v i="$interval" 'BEGIN { printf "%.1f%%", 100 * x / (i * m + x) }')
  share_wall=$(awk -v x="$wall_save" -v m="$step_ms" -v i="$interval" 'BEGIN { printf "%.1f%%", 100 * x / (i * m / 1000 + x) }')
  printf '%-16s %8s %8s %10s %11.1f %9.0f %12s %12s %12.0f\n' "$mode" "$t_end" "$t_every" "$wall_save" \
    "$stall_ms" "$step_ms" "$share" "$share_wall" "$(awk -v b="$extra" 'BEGIN { print b / 1e6 }')"
  if [ -n "${JSON:-}" ]; then
    awk -v mode="$mode" -v dev="$device" -v dp="$dp" -v i="$interval" -v x="$stall_ms" \
      -v m="$step_ms" -v w="$wall_save" -v e="$extra" -v ends="$t_end" -v every="$t_every" 'BEGIN {
      printf "{\"mode\": \"%s\", \"device\": \"%s\", \"dp\": %d, \"interval\": %d, ", mode, dev, dp, i
      printf "\"direct_ms\": %.3f, \"step_ms\": %.3f, \"wall_per_save_s\": %.4f, ", x, m, w
      printf "\"direct_share\": %.4f, \"wall_share\": %.4f, ", 100 * x / (i * m + x), 100 * w / (i * m / 1000 + w)
      printf "\"extra_mb\": %.1f, \"end_only_s\": %s, \"with_saves_s\": %s}\n", e / 1e6, ends, every
    }' >> "$JSON"
  fi
done
du -sb "$work/run/checkpoints/$(printf 'step_%08d' "$steps")" |
  awk '{ printf "checkpoint: %d bytes\n", $1 }'
