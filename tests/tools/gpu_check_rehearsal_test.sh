#!/usr/bin/env bash
# The device check (bench/gpu_check.sh) rehearsed on a machine without a GPU: the carried
# packages, the stages, the per-stage files and the failure rows.
#   1. a full rehearsal: the carried packages unpack into a fresh prefix, the project configures
#      against it with the system's packages hidden, the dependency probe builds and runs; the
#      kernel, op-harness and GPT parity tests pass on the simulated device; GPU-only rows are
#      "skipped: no GPU"; the script's own verdict check passes;
#   2. a second call reusing that build (--stages without build), with a planted failure in
#      the kernels stage: its rows fail, the later stages still run and report (the serving
#      stage among them, its load benchmark on the CPU);
#   3. a run killed with SIGKILL after the kernels stage (the 10-minute wall, cut short on
#      purpose): the output folder holds the finished stage's rows and nothing of the next;
#   4. a stage past its limit is stopped and says so, and a stage that no longer fits the
#      budget is "not run" with the time left;
#   5. a carried folder missing one package (Eigen) fails the configure, naming it.
# Usage: gpu_check_rehearsal_test.sh <source dir> <build dir with the binaries> <scratch dir>
set -uo pipefail
src=$1 bin=$2 dir=$3
rm -rf "$dir" && mkdir -p "$dir"
check="$src/bench/gpu_check.sh"
deps="$src/.gpu_deps"
export OMP_NUM_THREADS=2

fail() { echo "FAIL: $*" >&2; exit 1; }
# status OUT STAGE CHECK-REGEX: the status of the first matching row of OUT/results.jsonl.
status() {
  python3 - "$1/results.jsonl" "$2" "$3" <<'PY'
import json, re, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(next((r["status"] for r in rows
            if r["stage"] == sys.argv[2] and re.search(sys.argv[3], r["check"])), "absent"))
PY
}
expect() {  # expect OUT STAGE CHECK-REGEX STATUS
  local got
  got=$(status "$1" "$2" "$3")
  [ "$got" = "$4" ] || fail "$(basename "$1"): $2 / $3: $got, expected $4 ($(cat "$1/table.txt" 2> /dev/null | grep -m1 "$2" ))"
}

"$src/bench/gpu_prepare.sh" "$deps" || fail "gpu_prepare.sh could not prepare $deps"

echo "== 1. full rehearsal"
"$check" --rehearse --prebuilt "$bin" --build "$dir/build" --out "$dir/full" --jobs 2 \
  > "$dir/full.log" 2>&1 || { tail -40 "$dir/full.log"; fail "the full rehearsal did not pass"; }
for f in results.jsonl table.txt logs.tar.gz machine.txt; do
  [ -s "$dir/full/$f" ] || fail "full: $f missing from the output folder"
done
[ "$(ls "$dir/full" | wc -l)" -le 8 ] || fail "full: more than 8 files in the output folder"
expect "$dir/full" build "^configure" passed
expect "$dir/full" build "dependency probe" passed
expect "$dir/full" kernels "kernel and backend" passed
expect "$dir/full" kernels "op harness, bf16" passed
expect "$dir/full" parity "GPT-2 parity, bf16" passed
expect "$dir/full" parity "device cpu" passed
expect "$dir/full" parity "device cuda --precision fp32" skipped
expect "$dir/full" rates "BM_GemmBf16" skipped
expect "$dir/full" nccl "NCCL" skipped
tar -tzf "$dir/full/logs.tar.gz" > "$dir/full_logs.txt"  # (grep -q on a pipe would cut tar off)
grep -q 'logs/test_cuda.log' "$dir/full_logs.txt" || fail "full: test_cuda.log not in logs.tar.gz"

echo "== 2. second call, planted failure"
"$check" --rehearse --prebuilt "$bin" --build "$dir/build" --out "$dir/planted" --jobs 2 \
  --stages kernels,parity,rates,serve --plant-failure kernels > "$dir/planted.log" 2>&1 \
  || { tail -20 "$dir/planted.log"; fail "the planted rehearsal's verdicts are not as expected"; }
expect "$dir/planted" kernels "kernel and backend" failed
expect "$dir/planted" kernels "op harness, f32" failed
expect "$dir/planted" parity "GPT-2 parity, fp32" passed
expect "$dir/planted" rates "BM_CopyBandwidth" skipped
expect "$dir/planted" serve "serve static:4:64" passed
expect "$dir/planted" serve "serve continuous:4:64" passed
expect "$dir/planted" serve "at equal or better median TPOT" skipped
grep -q "rehearsal: .* rows, 0 not as expected" "$dir/planted.log" \
  || fail "planted: the script did not finish with its verdict line"

echo "== 3. killed after the kernels stage"
"$check" --rehearse --prebuilt "$bin" --build "$dir/build" --out "$dir/killed" --jobs 2 \
  --stages kernels,parity --kill-after kernels > "$dir/killed.log" 2>&1
rc=$?
[ "$rc" = 137 ] || fail "killed: exit $rc, expected 137 (SIGKILL)"
expect "$dir/killed" kernels "kernel and backend" passed
expect "$dir/killed" parity "GPT-2 parity" absent
grep -qE "kernels +kernel and backend" "$dir/killed/table.txt" || fail "killed: table.txt lacks the kernels rows"
[ -z "$(ls "$dir/killed" | grep '\.tmp$')" ] || fail "killed: a temporary file was left in the output folder"

echo "== 4. a stage past its limit; a stage past the budget"
"$check" --rehearse --prebuilt "$bin" --build "$dir/build" --out "$dir/limits" --jobs 2 \
  --stages kernels,parity,rates --limits kernels=20,parity=2 --budget 40 > "$dir/limits.log" 2>&1
expect "$dir/limits" parity "^stage parity" failed
grep -q "timed out: stopped at its 2 s limit" "$dir/limits/results.jsonl" || fail "limits: no timeout row"
expect "$dir/limits" rates "^stage rates" "not run"
grep -q '"time: [0-9]* s of the 40 s budget left' "$dir/limits/results.jsonl" || fail "limits: no budget row"

echo "== 5. a package missing from the carried folder"
mkdir -p "$dir/deps_no_eigen"
for deb in "$deps"/*.deb; do
  case "$(basename "$deb")" in libeigen3-dev_*) ;; *) ln -s "$deb" "$dir/deps_no_eigen/" ;; esac
done
"$check" --rehearse --prebuilt "$bin" --build "$dir/build_no_eigen" --deps "$dir/deps_no_eigen" \
  --out "$dir/no_eigen" --jobs 2 --stages build > "$dir/no_eigen.log" 2>&1
expect "$dir/no_eigen" build "^configure" failed
grep -q 'Eigen3' "$dir/no_eigen/results.jsonl" || fail "no_eigen: the configure row does not name Eigen3"

echo "PASS: gpu_check rehearsal"
