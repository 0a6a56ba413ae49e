#!/usr/bin/env bash
# `tessera launch` against planted failures, under mpiexec. Every supervised run must end with
# the per-step losses and final weights of an unbroken run, bit for bit (data order and
# dropout are deterministic, and a resume restores everything). The ranks plant the failures
# on themselves at an exact step (TESSERA_FAULT, tools/cli/fault_injection.h): a tiny model's
# step takes about a millisecond, too fast for a signal from outside to land on a chosen step.
#   kill     SIGKILL of a random rank at a random step (seeded), under dp2, tp2, pp2 and
#            dp2 x tp2 x pp2 with ZeRO-2;
#   storm    a kill 3 steps after every resume, 10 kills in one run, within a budget of 10
#            restarts, and a restart log that accounts for each;
#   hang     one rank stopped (SIGSTOP): the others' collective timeout ends the job (124);
#            every rank asleep inside the loop: the heartbeat timeout catches it within the
#            timeout + 5 s, and the SIGUSR2 dump names each rank's last step;
#   save     kill -9 of rank 0 while its shard of a sharded set is half-written
#            (TESSERA_FAULT_SAVE_PAUSE): resume skips that set in one line (no manifest), the
#            previous one loads and the run resumes from it;
#   preempt  SIGTERM to the supervisor: forwarded, the job saves and exits 75, launch exits 75
#            without restarting; a second supervisor of the same run directory is refused;
#   one      one process (no mpiexec, no --comm-timeout, which it refuses) under a heartbeat
#            timeout shorter than the default collective timeout: launch runs it;
#   probe    the pre-flight probe at every start: a rank whose compute is planted 200 ms slower
#            is named with its host and the --exclude advice, and recorded in preflight.json.
# Usage: launch_test.sh <tessera> <mpiexec> <numproc flag> <scratch dir> [case...]
set -euo pipefail
tessera=$1 mpiexec=$2 np=$3 dir=$4
shift 4
cases=${*:-kill storm hang save preempt probe one}
export OMP_NUM_THREADS=1
source "$(dirname "$0")/tiny_corpus.sh"
source "$(dirname "$0")/same_checkpoint.sh"
tiny_corpus "$tessera" "$dir"

steps=30
model='{"n_layer": 2, "n_head": 2, "n_kv_head": 2, "n_embd": 32, "block_size": 16, "dropout": 0.1}'
common=(train --train-data "$dir/data/data_train_*.bin" --model "$model" --batch-size 4
        --seq-len 16 --lr 3e-3 --warmup-steps 1 --threads 1 --max-steps $steps
        --keep-checkpoints 0 --sample-tokens 0 --comm-timeout 3 --dump-window 1)
supervise=("$tessera" launch --heartbeat-timeout 8 --dump-window 2 --max-restarts 3)
fail() { echo "FAIL: $*" >&2; exit 1; }
job=
# A failing check leaves no supervised job behind to disturb the next run.
trap '{ [ -n "$job" ] && kill -KILL "$job"; } 2>/dev/null || true; pkill -KILL -f -- "--run-dir $dir/" || true' EXIT
losses() { grep -o '"loss":[^,}]*' "$1/metrics.jsonl" | cut -d: -f2; }
beat_field() { grep -o "\"$2\":[^,}]*" "$1" 2>/dev/null | cut -d: -f2 | tr -d '"'; }
# The step and pid in rank $2's heartbeat of the run in $1.
beat_step() { beat_field "$1/heartbeat/rank_$2.json" step; }
beat_pid() { beat_field "$1/heartbeat/rank_$2.json" pid; }
# Blocks until rank $2 of run $1 has finished step $3 (or 60 s pass).
await_step() {
  local s
  for _ in $(seq 1200); do
    s=$(beat_step "$1" "$2")
    [ -n "$s" ] && [ "$s" -ge "$3" ] && return 0
    sleep 0.05
  done
  return 1
}
# same <reference run> <run> <what>: losses and final weights bit for bit.
same() {
  cmp -s <(losses "$1") <(losses "$2") || fail "$3: the losses differ from the unbroken run"
  [ "$(losses "$2" | wc -l)" = $steps ] || fail "$3: $(losses "$2" | wc -l) steps logged"
  local last
  last=$(printf 'step_%08d' $steps)
  same_checkpoint "$1/checkpoints/$last" "$2/checkpoints/$last" ||
    fail "$3: the final weights or optimizer state differ"
}
restarts() { [ -f "$1/restarts.jsonl" ] && wc -l <"$1/restarts.jsonl" || echo 0; }

# layout name -> flags and rank count
declare -A flags=([dp2]="--dp 2 --zero 2" [tp2]="--tp 2" [pp2]="--pp 2 --microbatches 2"
                  [dp2tp2pp2]="--dp 2 --tp 2 --pp 2 --zero 2 --microbatches 2")
declare -A ranks=([dp2]=2 [tp2]=2 [pp2]=2 [dp2tp2pp2]=8)
unbroken() {
  local layout=$1 ref=$dir/unbroken_$1
  [ -d "$ref" ] && return 0
  # shellcheck disable=SC2086
  "$mpiexec" "$np" "${ranks[$layout]}" "$tessera" "${common[@]}" ${flags[$layout]} \
    --checkpoint-every 5 --run-dir "$ref" >"$ref.log" 2>&1 || { cat "$ref.log" >&2; fail "unbroken $layout failed"; }
}
# launch_bg <layout> <run> [env...] [-- train flags, else --checkpoint-every 5]: the
# supervised job in the background ($job: its pid).
launch_bg() {
  local layout=$1 run=$2
  shift 2
  local -a envs=() extra=(--checkpoint-every 5)
  while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
  [ $# -gt 0 ] && { shift; extra=("$@"); }
  # shellcheck disable=SC2086
  env "${envs[@]}" "${supervise[@]}" -- "$mpiexec" "$np" "${ranks[$layout]}" "$tessera" \
    "${common[@]}" ${flags[$layout]} "${extra[@]}" --run-dir "$run" >"$run.log" 2>&1 &
  job=$!
}
finish() {  # finish <run> <what>: the supervisor's exit status must be 0
  local status=0
  wait "$job" || status=$?
  [ "$status" = 0 ] || { cat "$1.log" >&2; fail "$2: launch exited $status"; }
}

for c in $cases; do case $c in
kill)
  for spec in dp2:1 dp2:2 tp2:3 pp2:4 dp2tp2pp2:5; do
    layout=${spec%%:*} seed=${spec##*:}
    run=$dir/kill_${layout}_$seed
    unbroken "$layout"
    RANDOM=$seed
    at=$((6 + RANDOM % 19)) victim=$((RANDOM % ${ranks[$layout]}))
    launch_bg "$layout" "$run" "TESSERA_FAULT=kill:$victim@$at"
    finish "$run" "kill $layout"
    [ "$(restarts "$run")" = 1 ] || fail "kill $layout: $(restarts "$run") restarts logged, not 1"
    grep -q '"seconds_to_recover":[0-9]' "$run/restarts.jsonl" || fail "kill $layout: no recovery time"
    same "$dir/unbroken_$layout" "$run" "kill $layout"
    echo "kill $layout: rank $victim killed after step $at; $(grep -o '"steps_lost":[0-9]*' "$run/restarts.jsonl"), $(grep -o '"seconds_to_recover":[0-9.]*' "$run/restarts.jsonl"); bit-identical"
  done ;;
storm)
  unbroken dp2
  run=$dir/storm
  supervise=("$tessera" launch --heartbeat-timeout 8 --dump-window 2 --max-restarts 10)
  # A checkpoint every 2 steps and a kill 3 steps after each resume: 2 steps of progress per
  # attempt, the ranks dying in turn.
  launch_bg dp2 "$run" TESSERA_FAULT=storm:3x10 -- --checkpoint-every 2
  finish "$run" storm
  [ "$(restarts "$run")" = 10 ] || fail "storm: $(restarts "$run") restarts logged, not 10"
  [ "$(grep -c '"seconds_to_recover":[0-9]' "$run/restarts.jsonl")" = 10 ] ||
    fail "storm: not every restart recovered in the log"
  same "$dir/unbroken_dp2" "$run" storm
  supervise=("$tessera" launch --heartbeat-timeout 8 --dump-window 2 --max-restarts 3)
  echo "storm: 10 kills, 10 restarts logged, recovered; bit-identical" ;;
hang)
  unbroken dp2
  run=$dir/hang_one
  launch_bg dp2 "$run" TESSERA_FAULT=stop:1@8
  finish "$run" "hang (one rank)"
  grep -q '"cause":"the job exited with status 124"' "$run/restarts.jsonl" ||
    fail "hang (one rank): not ended by the collective timeout"
  same "$dir/unbroken_dp2" "$run" "hang (one rank)"
  # Rank 0's call timed out and it dumped its flight recorder; the stopped rank could not.
  "$tessera" diagnose "$run" >"$run.diagnose" && fail "hang (one rank): diagnose found no hang"
  grep -qx "rank 1 left no dump (it died, or did not dump within the dump window)" "$run.diagnose" &&
    grep -Eqx "group world\[0,1\] [a-z_]+ #[0-9]+ \([0-9.]+ k?B [a-z0-9]+, step 8\): every rank that dumped joined it; rank 1 left no dump" \
      "$run.diagnose" || { cat "$run.diagnose" >&2; fail "hang (one rank): diagnose verdict"; }
  echo "hang, one rank stopped: ended by the collective timeout, restarted; bit-identical"
  run=$dir/hang_all
  launch_bg dp2 "$run" TESSERA_FAULT=hang:all@8
  await_step "$run" 1 8 || fail "hang: step 8 never reached"
  t0=$(date +%s%N)
  for _ in $(seq 400); do [ "$(restarts "$run")" -ge 1 ] && break; sleep 0.05; done
  took_ms=$((($(date +%s%N) - t0) / 1000000))
  # Detection: the heartbeat timeout (8 s) plus the dump window (2 s) before the restart is
  # logged; the issue's bound is the timeout plus 5 s for the detection itself.
  grep -q '"cause":"rank [01] (pid [0-9]* on [^)]*) made no progress' "$run/restarts.jsonl" ||
    { cat "$run.log" >&2; fail "hang (all ranks): no heartbeat detection logged"; }
  [ "$took_ms" -le $(((8 + 2 + 5) * 1000)) ] || fail "hang (all ranks): restart after $took_ms ms"
  for r in 0 1; do
    grep -q "SIGUSR2 diagnostics: last heartbeat rank $r (pid [0-9]* on .*): phase step, step 8$" \
      "$run.log" || { cat "$run.log" >&2; fail "hang (all ranks): no SIGUSR2 dump from rank $r"; }
  done
  # SIGUSR2 made every rank dump its flight recorder too: none was inside a call.
  "$tessera" diagnose "$run" >"$run.diagnose" ||
    { cat "$run.diagnose" >&2; fail "hang (all ranks): diagnose reported a hang in communication"; }
  for r in 0 1; do
    grep -Eq "^  rank $r \(.*\): [0-9]+ calls; SIGUSR2$" "$run.diagnose" ||
      { cat "$run.diagnose" >&2; fail "hang (all ranks): no SIGUSR2 flight dump from rank $r"; }
  done
  grep -q "^no hang in communication" "$run.diagnose" || fail "hang (all ranks): diagnose verdict"
  finish "$run" "hang (all ranks)"
  same "$dir/unbroken_dp2" "$run" "hang (all ranks)"
  echo "hang, the whole job stopped: restart logged $took_ms ms later (timeout 8 s + dump window 2 s); bit-identical" ;;
save)
  unbroken dp2
  run=$dir/kill_in_save
  launch_bg dp2 "$run" TESSERA_FAULT_SAVE_PAUSE=2
  # Rank 0's background writer pauses with its shard of step 10 written, and its index and the
  # manifest not.
  half=$run/checkpoints/step_00000010
  for _ in $(seq 1200); do
    [ -f "$half/shard_00000.safetensors" ] && break
    sleep 0.05
  done
  sleep 0.3
  [ -f "$half/shard_00000.safetensors" ] && [ ! -f "$half/manifest.json" ] ||
    fail "save: no half-written set of step 10"
  kill -KILL "$(beat_pid "$run" 0)"
  finish "$run" "kill during a save"
  grep -q "resuming from .*step_00000005" "$run.log" || fail "save: did not resume from step 5"
  grep -q "skipping checkpoint .*step_00000010: .*no manifest.json" "$run.log" ||
    fail "save: resume did not say why it skipped step 10"
  same "$dir/unbroken_dp2" "$run" "kill during a save"
  echo "kill during a save: step 10's set left without a manifest and skipped; resumed from step 5; bit-identical" ;;
preempt)
  run=$dir/preempt
  # Saves of 1 s keep the job running long enough to be preempted in the middle.
  launch_bg dp2 "$run" TESSERA_FAULT_SAVE_PAUSE=1
  await_step "$run" 0 4 || fail "preempt: step 4 never reached"
  # A second supervisor of the same run directory is refused while the first runs.
  "${supervise[@]}" -- "$tessera" "${common[@]}" --run-dir "$run" >"$run.second.log" 2>&1 &&
    fail "preempt: a second launch on $run ran"
  grep -q "another tessera launch supervises $run" "$run.second.log" ||
    fail "preempt: the second launch was not refused by the lock"
  kill -TERM "$job"
  status=0
  wait "$job" || status=$?
  [ "$status" = 75 ] || { cat "$run.log" >&2; fail "preempt: launch exited $status, not 75"; }
  grep -q "preempted: not restarting" "$run.log" || fail "preempt: no line"
  [ "$(restarts "$run")" = 0 ] || fail "preempt: a restart was logged"
  echo "preempt: SIGTERM to launch: the job saved and exited 75, launch exited 75, no restart" ;;
probe)
  run=$dir/probe
  launch_bg dp2 "$run" TESSERA_FAULT=slow:1 -- --checkpoint-every 0
  finish "$run" probe
  grep -q "^preflight: rank 1 on $(hostname) computed in [0-9.]* ms, [0-9.]*x the median of the others: .*srun --exclude=$(hostname)" "$run.log" ||
    { cat "$run.log" >&2; fail "probe: the slow rank was not reported"; }
  grep -q '"slow": \[$' "$run/preflight.json" && grep -A1 '"slow": \[$' "$run/preflight.json" | grep -q '^ *1$' ||
    fail "probe: preflight.json does not list rank 1 as slow"
  run=$dir/probe_none
  launch_bg dp2 "$run" -- --checkpoint-every 0
  finish "$run" "probe (no fault)"
  grep -q "^preflight: 2 ranks, .*; no rank slower than 2.0x the median of the others$" "$run.log" ||
    { cat "$run.log" >&2; fail "probe: a healthy run reported a slow rank"; }
  echo "probe: $(grep '^preflight: rank 1' "$dir/probe.log" | cut -c1-80)..." ;;
one)
  run=$dir/one
  # common without its --comm-timeout 3 --dump-window 1 (its last four words): one process
  # refuses the flags.
  "${supervise[@]}" -- "$tessera" "${common[@]:0:${#common[@]}-4}" --checkpoint-every 10 \
    --run-dir "$run" >"$run.log" 2>&1 || { cat "$run.log" >&2; fail "one: launch failed"; }
  grep -q "the job finished after 0 restarts" "$run.log" || fail "one: no finish line"
  echo "one: a single process under launch --heartbeat-timeout 8 ran to the end" ;;
*) fail "unknown case $c" ;;
esac; done
