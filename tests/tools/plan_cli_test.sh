#!/usr/bin/env bash
# plan_cli_test.sh TESSERA WORKDIR [MPIEXEC NP]: `tessera plan` end to end.
#   plan       the issue's command prints a ranked table, the best layout's train flags and the
#              checkpoint economics; --json and --svg write what they say;
#   refusals   bad input gets one line on stderr and a non-zero exit: an unknown GPU or model,
#              a model that fits nowhere, a size that is not one, a batch given twice or not
#              a whole number of sequences, heads that do not divide the width or each other,
#              --rank-by other than time or cost, sizes below 1, flags that cannot apply
#              (--validate or --calibrate alone with a plan's flags, --offload under ZeRO 0);
#   calibrate  (with MPIEXEC) a dp2 run of `tessera train` on this CPU, then --calibrate: the
#              run's model states equal the plan's to the byte, a GPU type cannot apply to a
#              CPU run, and a plan on the calibrated CPU ranks layouts.
set -uo pipefail
tessera=$1 dir=$2 mpiexec=${3:-} np=${4:-}
fail() { echo "FAIL: $*" >&2; exit 1; }
rm -rf "$dir" && mkdir -p "$dir"

out=$("$tessera" plan --model llama-70b-like --gpus 1024 --gpu h100 --tokens 2T \
      --json "$dir/plan.json" --svg "$dir/plan.svg") || fail "plan failed: $out"
echo "$out" | grep -q "^llama-70b-like: 68.98B parameters, 80 layers" || fail "no workload line: $out"
echo "$out" | grep -Eq "^  1 h100 +dp[0-9]+ tp[1248] pp[0-9]+" || fail "no ranked row: $out"
echo "$out" | grep -q "^best: tessera train --dp " || fail "no train flags: $out"
echo "$out" | grep -Eq "^checkpoints: 128 nodes .* \(assumed\); save every [0-9.]+ min \(Young\)" ||
  fail "no checkpoint line: $out"
python3 - "$dir/plan.json" <<'PY' || fail "plan.json"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["format"] == "tessera-plan" and j["ranked"], j.keys()
best = j["ranked"][0]
assert best["gpus"] == 1024 and best["memory_bytes"]["total"] <= best["memory_bytes"]["usable"]
assert abs(best["days"] * 86400 * best["tokens_per_s"] - 2e12) < 1e6
PY
head -c 4 "$dir/plan.svg" | grep -q "<svg" || fail "plan.svg is not an SVG"

refused() {  # refused "what it must say" args...
  local says=$1 err
  shift
  if err=$("$tessera" plan "$@" 2>&1 >/dev/null); then fail "accepted: $*"; fi
  [ "$(echo "$err" | wc -l)" = 1 ] || fail "more than one line for $*: $err"
  echo "$err" | grep -qF -- "$says" || fail "for $* expected '$says', got: $err"
}
refused "unknown GPU 'v100'" --model gpt3-175b --gpu v100 --gpus 64
refused "unknown model 'gpt5'" --model gpt5 --gpus 64
refused "fits nowhere: its smallest layout" --model llama-70b-like --gpu a100-40gb --gpus 8
# A pinned size that leaves nothing valid is named (the message blamed the model alone).
refused "no layout of gpt2-d12 on 8 GPUs is valid with tp 16, dp 3 pinned" --model gpt2-d12 --gpus 8 --tp 16 --dp 3
refused "--tokens '2X' is not a size" --model gpt2-d12 --tokens 2X
refused "is not a whole number of 1024-token sequences" --model gpt2-d12 --batch-tokens 1000
refused "give the global batch once" --model gpt2-d12 --global-batch 8 --batch-tokens 8K
refused "--rank-by must be time or cost" --model gpt2-d12 --rank-by speed
refused "the width 8192 is not a multiple of the 7 heads" --model llama-70b-like --heads 7
refused "64 heads are not a multiple of 3 kv heads" --model llama-70b-like --kv-heads 3
refused "the memory reserve of 1e+300 GB is not less than the h100's 80 GB" --model gpt2-d12 \
  --reserve-gb 1e300
refused "the node failure rate (per node and day) must be in [0, 100], got 1e+300" \
  --model gpt2-d12 --node-failure-rate 1e300
refused "the price per GPU-hour must be in [0, 10000] USD, got -5" --model gpt2-d12 --price -5
refused "--batch-tokens 1e300 is more than 2^30 sequences of 1024 tokens" --model gpt2-d12 \
  --batch-tokens 1e300
# Sizes out of range and flags that cannot apply: each was searched or printed as if not given.
refused "--tp must be at least 1 (leave it out for every size), got -1" --model gpt2-d12 --tp -1
refused "--seq-len must be at least 1 (leave it out for the model's context, at most 4096), got -5" \
  --model gpt2-d12 --seq-len -5
refused "--top must be at least 1 (leave it out for 10 rows), got 0" --model gpt2-d12 --top 0
refused "--offload moves the sharded optimizer to the host, so it needs ZeRO 1-3" \
  --model gpt2-d12 --offload --zero 0
refused "--tokens must be positive" --model gpt2-d12 --tokens 0
refused "--model does not apply to --validate" --validate --model gpt2-d12
refused "--gpus applies to a plan, and --calibrate without --model prints the calibration alone" \
  --calibrate "$dir" --gpus 8
out=$("$tessera" plan --model gpt2-d12 --gpus 8 --gpu h100 --tokens 1B) || fail "a short run: $out"
echo "$out" | grep -Eq "failures expected over the 0\.00[0-9]+ days$" || fail "a short run's days: $out"
# A sequence past the model's context is planned with the context extended, and said: a GPT-2's
# learned table grows by (4096 - 1024) x 768 = 2,359,296; a Llama's rotary positions add none.
out=$("$tessera" plan --model gpt2-d12 --gpus 8 --seq-len 4096) || fail "a longer context: $out"
echo "$out" | grep -qF "plan: --seq-len 4096 is past gpt2-d12's context of 1024; planned with the context extended to 4096 (learned positions: 2359296 more parameters)" ||
  fail "a longer context, unsaid: $out"
out=$("$tessera" plan --model llama-7b-like --gpus 8 --seq-len 8192) || fail "a longer context: $out"
echo "$out" | grep -qF "(rotary positions: no parameter added)" || fail "rotary context: $out"
echo "plan_cli_test: plan, json, svg and refusals"

[ -n "$mpiexec" ] || exit 0
export OMP_NUM_THREADS=1
source "$(dirname "$0")/tiny_corpus.sh"
tiny_corpus "$tessera" "$dir/corpus"
"$mpiexec" "$np" 2 "$tessera" train --train-data "$dir/corpus/data/data_train_*.bin" \
  --model '{"n_layer": 4, "n_head": 4, "n_kv_head": 4, "n_embd": 64, "block_size": 32}' \
  --batch-size 8 --seq-len 32 --threads 1 --sample-tokens 0 --dp 2 --zero 1 --max-steps 12 \
  --log-every 12 --run-dir "$dir/run" >"$dir/train.log" 2>&1 || { cat "$dir/train.log" >&2; fail "train"; }
out=$("$tessera" plan --calibrate "$dir/run") || fail "calibrate: $out"
echo "$out"
echo "$out" | grep -Eq "^  model states \(rank 0\): measured .* \(equal\)$" ||
  fail "the run's model states differ from the plan's"
echo "$out" | grep -Eq "GEMM efficiency 0\.[0-9]+ of cpu's" || fail "no fitted efficiency"
refused "ran on the CPU, so a GPU type (--gpu h100) cannot apply" --calibrate "$dir/run" --gpu h100
out=$("$tessera" plan --calibrate "$dir/run" --model gpt2-tiny --gpus 2 --global-batch 8 \
      --seq-len 32) || fail "plan on the calibrated CPU: $out"
echo "$out" | grep -Eq "^  1 cpu +dp[12] " || fail "no calibrated plan: $out"
echo "plan_cli_test: calibrated from a dp2 run"
