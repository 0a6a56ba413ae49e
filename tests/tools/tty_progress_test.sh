#!/usr/bin/env bash
# tty_progress_test.sh TESSERA WORKDIR: `tessera prepare` and `tessera train` under a pseudo-
# terminal (script(1), util-linux) redraw one live line in place (carriage return, erase line)
# and erase it at the end; through a pipe they print no control character.
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
echo "tty_progress_test: live lines on a terminal, plain ones through a pipe"
