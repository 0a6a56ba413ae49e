#!/usr/bin/env bash
# The node-local checkpoint tier under dp2 ZeRO-1: durable sets every 10 steps, local ones
# every 2 (--checkpoint-every-local, in a folder per run standing in for each node's disk):
#   1. kill -9 of rank 1 after step 15, under tessera launch: the restart resumes from a local
#      step (14, or 12 when rank 1's write of 14 was cut short: the ranks keep two sets and
#      take the newest that all hold), not the durable step 10 (1 or 3 steps lost, not 5),
#      and the run ends with the losses, weights and optimizer state of an unbroken run, bit
#      for bit;
#   2. the same kill without a supervisor, then rank 1's local set removed: the ranks disagree
#      (one holds none), resume says so in one line and takes the durable step 10, and the
#      run again ends bit for bit;
#   3. a restart under another layout (tp2): the local sets' fingerprint does not match, so
#      resume names the mismatch and takes the durable step 10;
#   4. --local-dir without --checkpoint-every-local is refused in one line.
# Usage: local_tier_test.sh <tessera> <mpiexec> <numproc flag> <scratch dir>
set -euo pipefail
tessera=$1 mpiexec=$2 np=$3 dir=$4
export OMP_NUM_THREADS=1
source "$(dirname "$0")/tiny_corpus.sh"
source "$(dirname "$0")/same_checkpoint.sh"
tiny_corpus "$tessera" "$dir"

steps=20
common=(train --train-data "$dir/data/data_train_*.bin" --model
        '{"n_layer": 2, "n_head": 2, "n_kv_head": 2, "n_embd": 32, "block_size": 16, "dropout": 0.1}'
        --batch-size 4 --seq-len 16 --lr 3e-3 --warmup-steps 1 --threads 1 --max-steps $steps
        --checkpoint-every 10 --keep-checkpoints 0 --sample-tokens 0 --comm-timeout 5)
fail() { echo "FAIL: $*" >&2; exit 1; }
trap 'pkill -KILL -f -- "--run-dir $dir/" || true' EXIT
losses() { grep -o '"loss":[^,}]*' "$1/metrics.jsonl" | cut -d: -f2; }
dp2() { "$mpiexec" "$np" 2 "$tessera" "${common[@]}" --dp 2 --zero 1 "$@"; }
same() {  # same <run> <what>: the unbroken run's losses and final state, bit for bit
  cmp -s <(losses "$dir/unbroken") <(losses "$1") || fail "$2: the losses differ"
  [ "$(losses "$1" | wc -l)" = $steps ] || fail "$2: $(losses "$1" | wc -l) steps logged"
  same_checkpoint "$dir/unbroken/checkpoints/step_000000$steps" "$1/checkpoints/step_000000$steps" ||
    fail "$2: the final weights or optimizer state differ"
}
# killed <run>: a dp2 run with the local tier whose rank 1 is killed after step 15, unsupervised
killed() {
  TESSERA_FAULT=kill:1@15 TESSERA_HEARTBEAT_DIR=$1/heartbeat dp2 --checkpoint-every-local 2 \
    --local-dir "$1.local" --run-dir "$1" >"$1.killed.log" 2>&1 && fail "$1: the kill did not happen"
  local r
  for r in 0 1; do
    [ -f "$1.local/rank_0000$r/step_00000012/meta.json" ] || fail "$1: rank $r has no local step 12"
    [ ! -d "$1.local/rank_0000$r/step_00000006" ] || fail "$1: rank $r kept more than two sets"
  done
}

dp2 --run-dir "$dir/unbroken" >/dev/null

# 1. Supervised: the restart takes a local step.
run=$dir/supervised
TESSERA_FAULT=kill:1@15 "$tessera" launch --heartbeat-timeout 30 --max-restarts 1 -- \
  "$mpiexec" "$np" 2 "$tessera" "${common[@]}" --dp 2 --zero 1 --checkpoint-every-local 2 \
  --local-dir "$run.local" --run-dir "$run" >"$run.log" 2>&1 || { cat "$run.log" >&2; fail "launch failed"; }
from=$(sed -n 's/^resuming from the node-local tier (every rank holds step \([0-9]*\); the durable tier.s newest is 10)$/\1/p' "$run.log")
[ "$from" = 14 ] || [ "$from" = 12 ] || { cat "$run.log" >&2; fail "supervised: the restart did not resume from a local step"; }
grep -q "\"resumed_step\":$from" "$run/restarts.jsonl" || fail "supervised: restarts.jsonl: $(cat "$run/restarts.jsonl")"
grep -q "\"steps_lost\":$((15 - from))" "$run/restarts.jsonl" || fail "supervised: not $((15 - from)) steps lost"
same "$run" "supervised"
grep -q '"tier":"local"' "$run/checkpoints.jsonl" || fail "checkpoints.jsonl logs no local save"
echo "kill after step 15: resumed from the local step $from ($((15 - from)) lost; the durable tier had 10); bit-identical"

# 2. One rank without its local set: every rank takes the durable tier.
run=$dir/disagree
killed "$run"
rm -rf "$run.local/rank_00001"
dp2 --checkpoint-every-local 2 --local-dir "$run.local" --run-dir "$run" >"$run.log" 2>&1 ||
  { cat "$run.log" >&2; fail "disagree: the resumed run failed"; }
grep -q "not resuming from the node-local tier: the ranks' newest sets are of steps -1 to 1[24]" "$run.log" ||
  fail "disagree: no line on the local tier"
grep -q "resuming from .*$run/checkpoints/step_00000010" "$run.log" || fail "disagree: not from step 10"
same "$run" "disagree"
echo "rank 1's local set removed: one line, resumed from the durable step 10; bit-identical"

# 3. Another layout: the fingerprint refuses the local sets.
run=$dir/relayout
killed "$run"
"$mpiexec" "$np" 2 "$tessera" "${common[@]}" --tp 2 --checkpoint-every-local 2 \
  --local-dir "$run.local" --run-dir "$run" >"$run.log" 2>&1 ||
  { cat "$run.log" >&2; fail "relayout: the resumed run failed"; }
grep -q "not resuming from the node-local tier: .*written by another rank, layout or host" "$run.log" ||
  fail "relayout: no line naming the mismatch"
grep -q "resuming from .*$run/checkpoints/step_00000010" "$run.log" || fail "relayout: not from step 10"
echo "resumed under tp2: the local sets refused (another layout), resumed from the durable step 10"

# 4. A flag that cannot apply.
"$tessera" "${common[@]}" --local-dir "$dir/x" --run-dir "$dir/x" 2>"$dir/x.err" >/dev/null &&
  fail "--local-dir without the local tier ran"
grep -q "local-dir is where --checkpoint-every-local writes" "$dir/x.err" || fail "--local-dir: $(cat "$dir/x.err")"
echo "--local-dir without --checkpoint-every-local: refused"
