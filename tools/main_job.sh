#!/usr/bin/env bash
# The main job: train a small GPT on Tessera's own sources and docs, then sample from it.
#   1. train a 2048-id byte-level BPE on tessera/, docs/ and README.md;
#   2. tokenize the same text into shards (5% held out for validation);
#   3. train configs/default.json (4 layers, width 192, 1500 steps of 16 x 128 tokens);
#   4. print samples from the final checkpoint.
# Expects a build in ./build (see README). Reuses nothing from an earlier run: runs/default
# and runs/default-data are recreated. `main_job.sh --prepare-only` stops after step 2 (what
# bench/compression_convergence.sh trains on); other arguments go to `tessera train`.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${TESSERA_BIN:-build/tools/tessera}
DATA=runs/default-data
INPUTS=(tessera docs README.md)
EXTS=(.h .cpp .md)

[ -x "$BIN" ] || { echo "main_job: $BIN not found; build first (see README)" >&2; exit 1; }
rm -rf runs/default "$DATA"
mkdir -p "$DATA"

"$BIN" tokenizer train --input "${INPUTS[@]}" --ext "${EXTS[@]}" --vocab-size 2048 \
  --output "$DATA/tokenizer.json"
"$BIN" prepare --input "${INPUTS[@]}" --ext "${EXTS[@]}" --tokenizer "$DATA/tokenizer.json" \
  --output "$DATA" --prefix corpus --val-fraction 0.05
[ "${1:-}" = "--prepare-only" ] && exit 0
"$BIN" train --config configs/default.json "$@"
"$BIN" generate --model runs/default --prompt "Tensor " --max-new-tokens 300 \
  --temperature 0.8 --top-k 40 --seed 1 --num-samples 2
