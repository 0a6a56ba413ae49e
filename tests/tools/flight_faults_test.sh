#!/usr/bin/env bash
# flight_faults_test.sh MPIEXEC PROBE TESSERA WORKDIR: each planted fault of
# parallel/flight_fault_probe.cpp on 4 ranks, then `tessera diagnose` on the dumps, which must
# print the exact verdict (only the seconds a rank slept or lagged are matched as numbers).
set -uo pipefail
mpiexec=$1 probe=$2 tessera=$3 work=$4
fail() { echo "FAIL: $*" >&2; exit 1; }

# run FAULT EXPECTED_STATUS: the probe's exit status, then diagnose's output in $work/FAULT.txt.
run() {
  local fault=$1 want=$2 status
  rm -rf "$work/$fault" && mkdir -p "$work/$fault"
  "$mpiexec" -n 4 "$probe" "$fault" "$work/$fault/flight" >"$work/$fault.log" 2>&1
  status=$?
  [ "$status" = "$want" ] || { cat "$work/$fault.log" >&2; fail "$fault: the probe exited $status, expected $want"; }
  "$tessera" diagnose "$work/$fault" >"$work/$fault.txt" 2>&1
  echo "--- $fault (diagnose exit $?)"; cat "$work/$fault.txt"
}
# expect FAULT REGEX: a whole line of the verdicts. first FAULT REGEX: the first verdict (the
# cause: the merge prints causes before effects).
expect() {
  grep -Eqx -- "$2" "$work/$1.txt" || fail "$1: no line matches: $2"
}
first() {
  grep -v '^flight dumps: \|^  rank \|^  skipped' "$work/$1.txt" | head -1 | grep -Eqx -- "$2" ||
    fail "$1: the first verdict is not: $2"
}

run none 0
first none "no hang in communication: every call of every group completed on every rank \(a job that is stuck is stuck outside the collectives: compute, data loading or I/O\)"
grep -q "never joined\|mismatch\|skipped" "$work/none.txt" && fail "none: a fault was reported"

run slow 0
first slow "no hang in communication: every call of every group completed on every rank \(a job that is stuck is stuck outside the collectives: compute, data loading or I/O\)"
expect slow "slowest rank: rank 1 joined its collectives 0\.[0-9]+ s after the first rank on average \([0-9]+ calls\); the next slowest 0\.[0-9]+ s"

run skip 124
first skip "group dp\[1,3\] all_reduce #5 \(4\.2 MB f32, step 3\): rank 1 skipped it; its #5 is the group's next call, all_gather \(1\.0 MB f32\)"

run size 124
first size "group dp\[1,3\] #5 \(step 3\): size mismatch: rank 1 2\.1 MB f32, rank 3 4\.2 MB f32"

run op 124
first op "group dp\[1,3\] #5 \(step 3\): op mismatch: rank 1 reduce_scatter sum of 4\.2 MB f32, rank 3 all_reduce sum of 4\.2 MB f32"

run sleep 124
first sleep "group dp\[1,3\] all_reduce #5 \(4\.2 MB f32, step 3\): rank 1 never joined; rank 1's last completed op is pp\[0,1\] send #3 to rank 0 \(step 3\); it made no call since \([0-9.]+ s before its dump\)"
expect sleep "group world\[0,1,2,3\] all_reduce #3 \(8 B f64, step 3\): rank 3 never joined; rank 3's last completed op is pp\[2,3\] send #3 to rank 2 \(step 3\); it is blocked in dp\[1,3\] all_reduce #5 \(step 3\)"

# A damaged dump (here rank 2's, cut short) is named and skipped; the others are still merged,
# and rank 2 is taken as a rank that left no dump.
head -c 100 "$work/sleep/flight/rank_2.json" >"$work/sleep/flight/rank_2.json.cut"
mv "$work/sleep/flight/rank_2.json.cut" "$work/sleep/flight/rank_2.json"
"$tessera" diagnose "$work/sleep" >"$work/damaged.txt" 2>&1
status=$?
echo "--- damaged (diagnose exit $status)"; cat "$work/damaged.txt"
[ "$status" = 3 ] || fail "damaged: diagnose exited $status, expected 3"
expect damaged "flight dumps: 3 ranks in $work/sleep/flight"
expect damaged "  skipped, taken as no dump: $work/sleep/flight/rank_2\.json: not valid JSON"
first damaged "rank 2 left no dump \(it died, or did not dump within the dump window\)"
expect damaged "group dp\[1,3\] all_reduce #5 \(4\.2 MB f32, step 3\): rank 1 never joined; .*"
echo "flight_faults_test: every verdict as expected"
