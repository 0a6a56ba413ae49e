#!/usr/bin/env bash
# `mpiexec -n N tessera train --dp/--tp/--pp ...` end to end, against one process:
#   1. the per-step losses of dp2 x tp2 (ZeRO-2, sequence parallel) and of tp2 x pp2 (1F1B,
#      2 micro-batches) equal those of `mpiexec -n 1 tessera train` with the same flags minus
#      the layout, within relative 1e-5;
#   2. a parallel run resumed from its own checkpoint (model and optimizer parts) repeats the
#      uninterrupted run's losses, and its checkpoint resumes the model in one process;
#   3. a layout that does not fit prints one line "tessera train: ..." and every rank exits 2.
# Usage: train_parallel_test.sh <tessera> <mpiexec> <numproc flag> <scratch dir>
set -euo pipefail
tessera=$1 mpiexec=$2 np=$3 dir=$4
rm -rf "$dir" && mkdir -p "$dir/text"
export OMP_NUM_THREADS=1

for i in $(seq 0 299); do
  echo "line $((i % 37)): the quick brown fox jumps over $(((i * 7) % 11)) lazy dogs."
done >"$dir/text/corpus.txt"
"$tessera" prepare --input "$dir/text" --output "$dir/data" --tokenizer byte >/dev/null

# 4 layers of width 32, 2 heads, no dropout; global batch 4 x 2 (grad_accum) = 8 rows of 16.
common=(--train-data "$dir/data/data_train_*.bin" --model
        '{"n_layer": 4, "n_head": 2, "n_kv_head": 2, "n_embd": 32, "block_size": 16, "dropout": 0}'
        --batch-size 4 --seq-len 16 --grad-accum 2 --lr 3e-3 --warmup-steps 1 --lr-schedule constant
        --threads 1 --checkpoint-every 2 --keep-checkpoints 0)

fail() { echo "FAIL: $*" >&2; exit 1; }

# The "loss" of every line of a run's metrics.jsonl, one per line.
losses() { grep -o '"loss":[^,}]*' "$1/metrics.jsonl" | cut -d: -f2; }

# Relative 1e-5: the layouts reorder the sums of the matmuls (tp), of the loss (dp, micro-
# batches) and of the gradients; each reordering changes a float32 result by ~1e-7 relative,
# and four steps at lr 3e-3 grow it to at most a few 1e-6 (the engine's layout tests measure
# 2.8e-6 after ten steps).
compare() {  # compare <name> <reference run dir> <run dir>
  paste <(losses "$2") <(losses "$3") | awk -v name="$1" '
    { n++; d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1);
      if (r > worst) worst = r; if (r > 1e-5) bad = 1 }
    END { printf "%s: %d steps, worst relative loss difference %.2e\n", name, n, worst;
          exit (bad || n != 4) }' || fail "$1 does not match one process"
}

"$mpiexec" "$np" 1 "$tessera" train "${common[@]}" --max-steps 4 --run-dir "$dir/ref" >"$dir/ref.log"

"$mpiexec" "$np" 4 "$tessera" train "${common[@]}" --max-steps 4 --run-dir "$dir/dp2tp2" --dp 2 --tp 2 \
  --zero 2 --sequence-parallel >"$dir/dp2tp2.log"
compare "dp2 x tp2, ZeRO-2, sequence parallel" "$dir/ref" "$dir/dp2tp2"
grep -q 'comm .* ms | bubble .*% | rank0 params/grads/optim/act ' "$dir/dp2tp2.log" ||
  fail "the step line lacks the communication, bubble and memory fields"
grep -q '"ranks":\[{"act_bytes"' "$dir/dp2tp2/metrics.jsonl" ||
  fail "metrics.jsonl lacks the per-rank fields"

"$mpiexec" "$np" 4 "$tessera" train "${common[@]}" --max-steps 4 --run-dir "$dir/tp2pp2" --tp 2 --pp 2 \
  --schedule 1f1b --microbatches 2 >"$dir/tp2pp2.log"
compare "tp2 x pp2, 1F1B, 2 micro-batches" "$dir/ref" "$dir/tp2pp2"

# Resume: stop the same layout after step 2, then continue from its checkpoint to step 4 (the
# constant schedule makes the lr independent of --max-steps).
"$mpiexec" "$np" 4 "$tessera" train "${common[@]}" --run-dir "$dir/resumed" --tp 2 --pp 2 \
  --schedule 1f1b --microbatches 2 --max-steps 2 >/dev/null
"$mpiexec" "$np" 4 "$tessera" train "${common[@]}" --max-steps 4 --run-dir "$dir/resumed" --tp 2 --pp 2 \
  --schedule 1f1b --microbatches 2 >"$dir/resumed.log"
grep -q "resuming from" "$dir/resumed.log" || fail "the second run did not resume"
grep -q "optimizer state not restored" "$dir/resumed.log" &&
  fail "the same layout did not restore its optimizer state"
compare "tp2 x pp2 resumed at step 2" "$dir/tp2pp2" "$dir/resumed"

# The gathered checkpoint is a single-process one: ckpt and generate read it, and one process
# resumes its model (not its optimizer state, which is in tp parts).
"$tessera" ckpt inspect "$dir/dp2tp2" | grep -q "step" || fail "ckpt inspect cannot read it"
"$tessera" generate --model "$dir/dp2tp2" --max-new-tokens 4 --seed 1 >/dev/null ||
  fail "generate cannot read it"
cp -r "$dir/dp2tp2" "$dir/single"
"$tessera" train "${common[@]}" --run-dir "$dir/single" --max-steps 5 >"$dir/single.log"
grep -q "optimizer state not restored (it starts from zero): the checkpoint was written under" \
  "$dir/single.log" || fail "one process did not say why the optimizer state was not restored"
grep -q '^step 5/5' "$dir/single.log" || fail "one process did not train on from step 4"

# Layouts that do not fit: one line, exit 2 on every rank (mpiexec returns the worst).
bad_layout() {  # bad_layout <ranks> <expected text> <flags...>
  local n=$1 want=$2
  shift 2
  set +e
  "$mpiexec" "$np" "$n" "$tessera" train "${common[@]}" --max-steps 4 --run-dir "$dir/bad" "$@" \
    >"$dir/bad.out" 2>"$dir/bad.err"
  local code=$?
  set -e
  [ "$code" -eq 2 ] || fail "-n $n $*: exit $code, expected 2 ($(cat "$dir/bad.err"))"
  [ "$(wc -l <"$dir/bad.err")" -eq 1 ] || fail "-n $n $*: expected one line, got: $(cat "$dir/bad.err")"
  grep -q "^tessera train: .*$want" "$dir/bad.err" || fail "-n $n $*: got '$(cat "$dir/bad.err")'"
  echo "bad layout -n $n $*: $(cat "$dir/bad.err")"
}
bad_layout 2 "does not match the 2 ranks" --tp 4
bad_layout 4 "n_head 2 is not divisible by tp 4" --tp 4
bad_layout 2 "n_layer 4 is not divisible by pp\*V = 2\*4" --pp 2 --virtual-stages 4 \
  --schedule interleaved --microbatches 2
echo "train_parallel_test: all passed"
