#!/usr/bin/env bash
# portable_run_test.sh TESSERA WORKDIR: a run directory, and a checkpoint directory, carry what
# they need to be used from anywhere.
#   train     `tessera train` in WORKDIR/a with a BPE tokenizer given by a relative path;
#   moved     the run directory moved to WORKDIR/b/moved, the tokenizer file deleted, and from
#             another directory `generate`, `ckpt convert` and `plan --calibrate` still work on
#             the run and on a checkpoint directory copied alone;
#   hf        `ckpt convert --to hf` writes bos/eos ids equal to the tokenizer's end-of-text id and
#             vocab.json/merges.txt, which `generate --tokenizer` reads back as the same tokens.
set -uo pipefail
tessera=$1 dir=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
export OMP_NUM_THREADS=1
rm -rf "$dir" && mkdir -p "$dir/a/text" "$dir/b" "$dir/elsewhere"
for i in $(seq 0 199); do echo "line $((i % 23)): a portable run keeps $(((i * 7) % 11)) things."; done \
  >"$dir/a/text/corpus.txt"
cd "$dir/a" || fail "cd"
"$tessera" tokenizer train --input text --vocab-size 300 --output tok.json >/dev/null || fail "tokenizer"
"$tessera" prepare --input text --output data --prefix corpus --tokenizer tok.json >/dev/null || fail "prepare"
"$tessera" train --train-data "data/corpus_train_*.bin" --tokenizer tok.json \
  --model '{"n_layer": 2, "n_head": 2, "n_kv_head": 2, "n_embd": 32, "block_size": 32}' \
  --batch-size 4 --seq-len 32 --max-steps 4 --log-every 4 --threads 1 --sample-tokens 0 \
  --run-dir runs/r >"$dir/train.log" 2>&1 || { cat "$dir/train.log" >&2; fail "train"; }
before=$("$tessera" generate --model runs/r --prompt "line 3" --max-new-tokens 8 --seed 5 2>/dev/null) ||
  fail "generate before the move"

mv runs/r "$dir/b/moved" && rm tok.json && cd "$dir/elsewhere" || fail "move"
after=$("$tessera" generate --model "$dir/b/moved" --prompt "line 3" --max-new-tokens 8 --seed 5 \
        2>"$dir/err") || fail "generate from a moved run: $(cat "$dir/err")"
[ "$before" = "$after" ] || fail "the moved run samples '$after', not '$before'"
ckpt=$(ls -d "$dir"/b/moved/checkpoints/step_* | tail -1)
cp -r "$ckpt" "$dir/alone"
alone=$("$tessera" generate --model "$dir/alone" --prompt "line 3" --max-new-tokens 8 --seed 5 \
        2>"$dir/err") || fail "generate from a checkpoint copied alone: $(cat "$dir/err")"
[ "$alone" = "$before" ] || fail "the copied checkpoint samples '$alone', not '$before'"
"$tessera" plan --calibrate "$dir/b/moved" >/dev/null || fail "plan --calibrate on the moved run"

"$tessera" ckpt convert "$dir/b/moved" --to hf --output "$dir/hf" >/dev/null || fail "ckpt convert --to hf"
for f in model.safetensors config.json vocab.json merges.txt tokenizer_config.json special_tokens_map.json; do
  [ -f "$dir/hf/$f" ] || fail "the HF folder has no $f"
done
python3 - "$dir/hf" <<'PY' || fail "config.json's bos/eos ids"
import json, sys
c = json.load(open(sys.argv[1] + "/config.json"))
v = json.load(open(sys.argv[1] + "/vocab.json"))
assert c["eos_token_id"] == c["bos_token_id"] == v["<|endoftext|>"], (c.get("eos_token_id"), v["<|endoftext|>"])
assert c["vocab_size"] >= len(v), (c["vocab_size"], len(v))
PY
hf=$("$tessera" generate --model "$dir/b/moved" --tokenizer "$dir/hf" --prompt "line 3" --max-new-tokens 8 \
     --seed 5 2>"$dir/err") || fail "generate with the exported tokenizer: $(cat "$dir/err")"
[ "$hf" = "$before" ] || fail "the exported tokenizer samples '$hf', not '$before'"
# The exported folder alone: its weights and the tokenizer beside them (no --tokenizer).
exported=$("$tessera" generate --model "$dir/hf" --prompt "line 3" --max-new-tokens 8 --seed 5 \
           2>"$dir/err") || fail "generate from the exported folder: $(cat "$dir/err")"
[ "$exported" = "$before" ] || fail "the exported folder samples '$exported', not '$before'"
# A Llama-style run exports as LlamaForCausalLM (import_hf_llama reads it back) and samples
# the same greedy tokens from the exported folder.
cd "$dir/elsewhere" && mkdir -p text && cp "$dir/a/text/corpus.txt" text/ || fail "llama setup"
"$tessera" prepare --input text --output data --tokenizer byte >/dev/null || fail "llama prepare"
"$tessera" train --train-data "data/data_train_*.bin" --tokenizer byte --run-dir llama \
  --model '{"preset": "llama-tiny", "n_layer": 2, "n_head": 4, "n_kv_head": 2, "n_embd": 32, "block_size": 32}' \
  --batch-size 4 --seq-len 32 --max-steps 3 --log-every 3 --threads 1 --sample-tokens 0 \
  >"$dir/llama.log" 2>&1 || { cat "$dir/llama.log" >&2; fail "llama train"; }
"$tessera" ckpt convert llama --to hf --output llama_hf >/dev/null || fail "llama export"
grep -q '"model_type": "llama"' llama_hf/config.json || fail "the export is not a Llama config"
run=$("$tessera" generate --model llama --prompt "line 3" --max-new-tokens 8 --temperature 0 2>/dev/null)
exported=$("$tessera" generate --model llama_hf --prompt "line 3" --max-new-tokens 8 --temperature 0 \
           2>"$dir/err") || fail "generate from the Llama export: $(cat "$dir/err")"
[ "$run" = "$exported" ] || fail "the Llama export samples other tokens"
echo "portable_run_test: a moved run, a checkpoint copied alone and the GPT-2 and Llama exports sample the same tokens"
