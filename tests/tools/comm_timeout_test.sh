#!/usr/bin/env bash
# --comm-timeout through mpiexec, dp2:
#   1. a hang: rank 1 is stopped (SIGSTOP) after step 2; rank 0's next collective waits past
#      the 2 s timeout and throws CommError, and `tessera train` ends the job: one line naming
#      rank, group, collective (a scalar's shape is f64[]) and step, exit status 124, within
#      the timeout plus 10 s;
#   2. a slow save: every save pauses 3 s (TESSERA_FAULT_SAVE_PAUSE) under a 1 s timeout.
#      Written in the background (the default) or in the loop (--sync-save), the run
#      completes: the ranks wait for rank 0 (whose save waits for the write before it) under
#      --save-timeout. The same run with --sync-save --save-timeout 0.5 fails with 124 in
#      that wait, which shows what the separate limit does.
# Usage: comm_timeout_test.sh <tessera> <mpiexec> <numproc flag> <scratch dir>
set -euo pipefail
tessera=$1 mpiexec=$2 np=$3 dir=$4
export OMP_NUM_THREADS=1
source "$(dirname "$0")/tiny_corpus.sh"
tiny_corpus "$tessera" "$dir"

common=(train --train-data "$dir/data/data_train_*.bin" --model
        '{"n_layer": 2, "n_head": 2, "n_kv_head": 2, "n_embd": 32, "block_size": 16}'
        --batch-size 4 --seq-len 16 --threads 1 --keep-checkpoints 0 --sample-tokens 0 --dp 2)
fail() { echo "FAIL: $*" >&2; exit 1; }
lines() { [ -f "$1/metrics.jsonl" ] && wc -l <"$1/metrics.jsonl" || echo 0; }
# The pid of rank $2 of the run in $1 (hydra gives each rank PMI_RANK).
rank_pid() {
  local p
  for p in $(pgrep -f -- "--run-dir $1\$"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "PMI_RANK=$2" && { echo "$p"; return; }
  done
}

# 1. The hang.
run=$dir/hang
"$mpiexec" "$np" 2 "$tessera" "${common[@]}" --max-steps 100000 --checkpoint-every 0 \
  --comm-timeout 2 --run-dir "$run" >"$run.log" 2>&1 &
job=$!
for _ in $(seq 600); do [ "$(lines "$run")" -ge 2 ] && break; sleep 0.05; done
victim=$(rank_pid "$run" 1)
[ -n "$victim" ] || { kill "$job"; fail "hang: no rank 1 process"; }
kill -STOP "$victim"
start=$(date +%s%N)
status=0
for _ in $(seq 240); do kill -0 "$job" 2>/dev/null || break; sleep 0.05; done
if kill -0 "$job" 2>/dev/null; then
  kill -KILL "$victim" "$job" 2>/dev/null || true
  cat "$run.log" >&2
  fail "hang: the job still runs 12 s after rank 1 stopped"
fi
wait "$job" || status=$?
took_ms=$((($(date +%s%N) - start) / 1000000))
kill -KILL "$victim" 2>/dev/null || true
grep -Eq "^tessera train: rank 0: collective timed out after [0-9.]+ s \(timeout 2 s\): rank 0 of group [a-z.]+ \(size 2\), [a-z_ ]+ of [a-z0-9]+\[[0-9, ]*\] on cpu, step [0-9]+$" "$run.log" ||
  { cat "$run.log" >&2; fail "hang: no one-line report of the timed-out collective"; }
[ "$status" = 124 ] || { cat "$run.log" >&2; fail "hang: mpiexec exited $status, not 124"; }
echo "hang: detected and the job ended with status 124 in ${took_ms} ms (timeout 2 s)"

# 2. The slow save.
for mode in background sync; do
  run=$dir/slow_save_$mode
  extra=()
  [ $mode = sync ] && extra=(--sync-save)
  TESSERA_FAULT_SAVE_PAUSE=3 "$mpiexec" "$np" 2 "$tessera" "${common[@]}" --max-steps 4 \
    --checkpoint-every 2 --comm-timeout 1 "${extra[@]}" --run-dir "$run" >"$run.log" 2>&1 ||
    { cat "$run.log" >&2; fail "slow save ($mode): a 3 s save under a 1 s collective timeout failed"; }
  [ -d "$run/checkpoints/step_00000004" ] || fail "slow save ($mode): no final checkpoint"
done
run=$dir/slow_save_short
status=0
TESSERA_FAULT_SAVE_PAUSE=3 "$mpiexec" "$np" 2 "$tessera" "${common[@]}" --max-steps 4 \
  --checkpoint-every 2 --comm-timeout 1 --save-timeout 0.5 --sync-save --run-dir "$run" \
  >"$run.log" 2>&1 || status=$?
[ "$status" = 124 ] && grep -q "barrier, step 2$" "$run.log" ||
  { cat "$run.log" >&2; fail "slow save, short limit: status $status, expected 124 in the barrier"; }
echo "slow save: a 3 s save passes under --comm-timeout 1 (in the background, and with --sync-save); with --sync-save --save-timeout 0.5 it fails (124)"
