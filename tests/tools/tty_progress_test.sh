#!/usr/bin/env bash
# tty_progress_test.sh TESSERA WORKDIR: `tessera prepare`, `train`, `tokenizer train` and `ckpt
# convert` under a pseudo-terminal (script(1), util-linux) redraw one live line in place
# (carriage return, erase line) and erase it at the end; through a pipe they print no control
# character.
set -uo pipefail
tessera=$1 dir=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
rm -rf "$dir" && mkdir -p "$dir/text"
for i in $(seq 0 299); do echo "line $i: the quick brown fox"; done >"$dir/text/a.txt"
cp "$dir/text/a.txt" "$dir/text/b.txt"
erase=$'\r\e''\[2K'  # carriage return, erase line: as a regular expression

TERM=xterm script -qec "'$tessera' prepare --input '$dir/text' --output '$dir/data' --tokenizer byte" \
  "$dir/prepare.tty" >/dev/null || fail "prepare under a terminal failed"
grep -aq "${erase}prepare: 2 files, [0-9]* tokens, [0-9]* tokens/s, elapsed 0:00:0" "$dir/prepare.tty" ||
  { cat -v "$dir/prepare.tty" >&2; fail "prepare: no live line"; }
grep -aq "${erase}prepare: 2 files (" "$dir/prepare.tty" || fail "prepare: the summary does not replace the live line"

args=(train --train-data "$dir/data/data_train_*.bin" --batch-size 2 --seq-len 16 --threads 1
      --model '{"n_layer": 1, "n_head": 2, "n_kv_head": 2, "n_embd": 16, "block_size": 16}'
      --max-steps 6 --log-every 3 --sample-tokens 0)
TERM=xterm script -qec "'$tessera' ${args[*]@Q} --run-dir '$dir/tty'" "$dir/train.tty" >/dev/null ||
  fail "train under a terminal failed"
grep -aq "${erase}step 5/6 83.3% | loss [0-9.]* | [0-9]* tok/s | elapsed 0:00:0[0-9] | ETA 0:00:0" "$dir/train.tty" ||
  { cat -v "$dir/train.tty" >&2; fail "train: no live line for step 5"; }
grep -aq "${erase}step 3/6 | loss" "$dir/train.tty" || fail "train: the plain line of step 3 is not printed in the live line's place"

"$tessera" "${args[@]}" --run-dir "$dir/pipe" | cat >"$dir/train.pipe" || fail "train through a pipe failed"
grep -q $'[\r\e]' "$dir/train.pipe" && fail "train through a pipe printed control characters"
grep -q "^step 6/6 | loss" "$dir/train.pipe" || fail "train through a pipe: no plain lines"
TERM=xterm script -qec "'$tessera' tokenizer train --input '$dir/text' --vocab-size 300 --output '$dir/tok.json'" \
  "$dir/tokenizer.tty" >/dev/null || fail "tokenizer train under a terminal failed"
grep -aq "${erase}tokenizer: read 1/2 files, [0-9]* bytes, elapsed 0:00:0" "$dir/tokenizer.tty" ||
  { cat -v "$dir/tokenizer.tty" >&2; fail "tokenizer train: no live line while reading"; }
grep -aq "${erase}tokenizer: [0-9]*/43 merges [0-9.]*%, [0-9]* merges/s, elapsed" "$dir/tokenizer.tty" ||
  { cat -v "$dir/tokenizer.tty" >&2; fail "tokenizer train: no live line while merging"; }
grep -aq "${erase}tokenizer: trained on 2 files" "$dir/tokenizer.tty" ||
  fail "tokenizer train: the summary does not replace the live line"

TERM=xterm script -qec "'$tessera' ckpt convert '$dir/pipe' --to sharded --shards 3 --output '$dir/sharded'" \
  "$dir/ckpt.tty" >/dev/null || fail "ckpt convert under a terminal failed"
grep -aq "${erase}ckpt: reading $dir/pipe, elapsed" "$dir/ckpt.tty" ||
  { cat -v "$dir/ckpt.tty" >&2; fail "ckpt convert: no live line while reading"; }
grep -aq "${erase}ckpt: wrote shard 3/3 of step 6, elapsed" "$dir/ckpt.tty" ||
  { cat -v "$dir/ckpt.tty" >&2; fail "ckpt convert: no live line for the last shard"; }
grep -aq "${erase}ckpt: wrote .*sharded.*(sharded, 3 shards, step 6" "$dir/ckpt.tty" ||
  fail "ckpt convert: the summary does not replace the live line"
"$tessera" ckpt convert "$dir/pipe" --to gathered --output "$dir/gathered" | cat >"$dir/ckpt.pipe" ||
  fail "ckpt convert through a pipe failed"
grep -q $'[\r\e]' "$dir/ckpt.pipe" && fail "ckpt convert through a pipe printed control characters"

echo "tty_progress_test: live lines on a terminal (prepare, train, tokenizer train, ckpt convert), plain ones through a pipe"
