#!/usr/bin/env bash
# Gradient compression on the main job's model: `tessera train --config configs/default.json`
# (4 layers, width 192, 16 x 128 tokens a step, cosine lr) at dp2 under mpiexec, uncompressed
# and with each setting given, over the same steps and data; prints per setting the final
# validation loss and its change against none, what rank 0 sent per step (comm_bytes, the last
# logged step) and the median step time. Not part of CI: two ranks of the 1500-step job take
# about as long as the main job each.
# Usage: [REUSE_NONE=1] bench/compression_convergence.sh [steps] [setting ...]
#   defaults: 1500 steps; "powersgd:4 --compression-warmup 150" and "bf16"
# Prepares runs/default-data with tools/main_job.sh --prepare-only when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${TESSERA_BIN:-build/tools/tessera}
steps=${1:-1500}
shift || true
settings=("$@")
[ ${#settings[@]} -gt 0 ] || settings=("powersgd:4 --compression-warmup 150" "bf16")
[ -d runs/default-data ] || tools/main_job.sh --prepare-only >/dev/null
export OMP_NUM_THREADS=1

run() {  # run <dir> <flags...>
  local dir=$1
  shift
  rm -rf "$dir"
  mpiexec -n 2 "$BIN" train --config configs/default.json --dp 2 --threads 1 --max-steps "$steps" \
    --checkpoint-every 0 --keep-checkpoints 0 --sample-tokens 0 --run-dir "$dir" "$@" >/dev/null
}
last_val() { grep '"val_loss"' "$1/metrics.jsonl" | tail -1 | grep -o '"val_loss":[^,}]*' | cut -d: -f2; }
last_bytes() { tail -1 "$1/metrics.jsonl" | grep -o '"comm_bytes":[0-9]*' | head -1 | cut -d: -f2; }
median_ms() { grep -o '"ms":[^,}]*' "$1/metrics.jsonl" | cut -d: -f2 | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# REUSE_NONE=1 keeps an earlier uncompressed run of the same steps (its losses do not depend
# on the settings compared).
if [ -z "${REUSE_NONE:-}" ] || [ ! -f runs/compression/none/metrics.jsonl ]; then
  run runs/compression/none
fi
ref_val=$(last_val runs/compression/none) ref_bytes=$(last_bytes runs/compression/none)
printf "%-40s %10s %8s %14s %8s %10s\n" setting val_loss change bytes/step vs_none ms/step
printf "%-40s %10.4f %8s %14d %8s %10.1f\n" none "$ref_val" - "$ref_bytes" 1.000 \
  "$(median_ms runs/compression/none)"
for s in "${settings[@]}"; do
  name=$(echo "$s" | tr ' :' '__')
  run "runs/compression/$name" --grad-compression $s
  val=$(last_val "runs/compression/$name") bytes=$(last_bytes "runs/compression/$name")
  awk -v s="$s" -v v="$val" -v r="$ref_val" -v b="$bytes" -v rb="$ref_bytes" \
    -v ms="$(median_ms "runs/compression/$name")" \
    'BEGIN { printf "%-40s %10.4f %+7.2f%% %14d %8.3f %10.1f\n", s, v, 100 * (v - r) / r, b, b / rb, ms }'
done
