#!/usr/bin/env bash
# generate_cli_test.sh TESSERA WORKDIR: `tessera generate`'s stop conditions, batched prompts
# and device.
#   stop      --stop cuts a greedy completion just before the string, and nothing after it
#             is printed;
#   batch     --prompts-file runs prompts in batches and prints one JSON line per prompt, in
#             order, each equal to that prompt generated alone;
#   device    --device cuda-sim (the CUDA backend on the kernel simulator) gives the CPU's
#             greedy tokens;
#   refusals  an empty --stop, --device with --tp, an unknown device, sizes out of range and
#             flags nothing reads (generate's and ckpt's), ckpt outputs over the run it reads:
#             one line, non-zero, the run unchanged.
set -uo pipefail
tessera=$1 dir=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
export OMP_NUM_THREADS=1
source "$(dirname "$0")/tiny_corpus.sh"
tiny_corpus "$tessera" "$dir"
cd "$dir" || fail "cd"
tiny_run "$tessera" || fail "train"
greedy=(--model run --max-new-tokens 24 --temperature 0 --no-eos)
full=$("$tessera" generate "${greedy[@]}" --prompt "line 1" 2>/dev/null) || fail "generate"
continuation=${full#line 1}
[ ${#continuation} -ge 8 ] || fail "a short continuation: '$continuation'"
stop=${continuation:4:2}  # two characters from inside the continuation
cut=$("$tessera" generate "${greedy[@]}" --prompt "line 1" --stop "$stop" 2>/dev/null) || fail "--stop"
want="line 1${continuation%%"$stop"*}"
[ "$cut" = "$want" ] || fail "--stop '$stop': got '$cut', expected '$want'"

printf 'line 1\nline 2\nthe quick\n' >prompts.txt
"$tessera" generate "${greedy[@]}" --prompts-file prompts.txt >batch.jsonl 2>/dev/null || fail "--prompts-file"
[ "$(wc -l <batch.jsonl)" = 3 ] || fail "not one line per prompt: $(cat batch.jsonl)"
for p in "line 1" "line 2" "the quick"; do
  one=$("$tessera" generate "${greedy[@]}" --prompt "$p" 2>/dev/null) || fail "generate '$p'"
  python3 - "$p" "$one" batch.jsonl <<'PY' || fail "the batch's completion of '$p' differs from its own"
import json, sys
prompt, alone, lines = sys.argv[1], sys.argv[2], [json.loads(l) for l in open(sys.argv[3])]
row = next(r for r in lines if r["prompt"] == prompt)
assert prompt + row["completion"] == alone, (row, alone)
assert row["finish_reason"] == "length" and row["tokens"] == 24, row
PY
done
python3 -c "
import json, sys
assert [json.loads(l)['prompt'] for l in open('batch.jsonl')] == ['line 1', 'line 2', 'the quick']" ||
  fail "the lines are not in the file's order"

sim=$("$tessera" generate "${greedy[@]}" --prompt "line 1" --device cuda-sim 2>/dev/null) ||
  fail "--device cuda-sim"
[ "$sim" = "$full" ] || fail "cuda-sim gives '$sim', the CPU '$full'"

refused() {  # refused "what it must say" subcommand args...
  local says=$1 err
  shift
  if err=$("$tessera" "$@" 2>&1 >/dev/null); then fail "accepted: $*"; fi
  [ "$(echo "$err" | wc -l)" = 1 ] || fail "more than one line for $*: $err"
  echo "$err" | grep -qF -- "$says" || fail "for $* expected '$says', got: $err"
}
refused "--stop must not be empty" generate --model run --prompt x --stop ""
refused "--device cuda-sim with --tp 2 is not supported" generate --model run --prompt x --device cuda-sim --tp 2
refused "--device must be cpu, cuda or cuda-sim, got 'tpu'" generate --model run --prompt x --device tpu
# Sizes out of range and flags nothing reads. --threads 100000 crashed in libgomp (SIGSEGV); the
# others were ignored: --num-samples 0 printed nothing and exited 0, --n-head 3 on a run that
# records its heads, --num-samples beside --prompts-file.
refused "--threads must be in [0, 1024] (0: all), got 100000" generate --model run --threads 100000
refused "--num-samples must be positive, got 0" generate --model run --num-samples 0
refused "--seed must be >= 0, got -1" generate --model run --seed -1  # was read as 2^64 - 1
refused "is a Tessera run or checkpoint, whose state.json gives its heads: --n-head applies to Hugging Face GPT-2 weights only" generate --model run --n-head 3
refused "--num-samples does not apply with --prompts-file" generate --model run --prompts-file prompts.txt --num-samples 2
refused "--prompt does not apply with --prompts-file" generate --model run --prompts-file prompts.txt --prompt hi
refused "--top-k does not apply with --temperature 0, which takes the most likely token" generate --model run --temperature 0 --top-k 5
refused "--top-p does not apply with --temperature 0" generate --model run --temperature 0 --top-p 0.9
# ckpt: --bf16 is llm.c's, --eval-batches sizes a measurement on --eval-data.
refused "--bf16 applies to --to llmc only" ckpt convert run --to hf --output hf --bf16
refused "--n-head applies to Hugging Face GPT-2 weights only" ckpt inspect run --n-head 3
refused "--eval-batches sizes the loss measured on --eval-data, which is not given" ckpt quantize run --to int8 --output q --eval-batches 5
# Neither writes over a run or a checkpoint: quantize --output run replaced the run's newest
# checkpoint (optimizer state included) with int8 weights, convert --to hf its config.json.
before=$(cd run && find . -type f | sort | xargs md5sum)
refused "--output run already holds checkpoints (run/checkpoints/step_" ckpt quantize run --to int8 --output run
refused "--output run already holds checkpoints" ckpt convert run --to sharded --shards 2 --output run
refused "--output run is in a run directory (it holds checkpoints/), whose files it would replace" ckpt convert run --to hf --output run
step=$(ls -d run/checkpoints/step_* | head -1)
refused "--output $step is a checkpoint directory" ckpt quantize run --to int8 --output "$step"
refused "--output $step/model.safetensors is in a checkpoint directory" ckpt convert run --to safetensors --output "$step/model.safetensors"
refused "--output $step/state.json is in a checkpoint directory" tokenizer train --input text --output "$step/state.json"
refused "--output run/tokenizer.json is in a run directory" tokenizer train --input text --output run/tokenizer.json
[ "$(cd run && find . -type f | sort | xargs md5sum)" = "$before" ] || fail "a refused ckpt command changed the run"
[ ! -e hf ] && [ ! -e q ] || fail "a refused ckpt command wrote its output"
echo "generate_cli_test: --stop, --prompts-file (batched = alone), --device cuda-sim (= CPU), refusals (generate and ckpt)"
