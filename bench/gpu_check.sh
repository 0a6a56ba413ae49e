#!/usr/bin/env bash
# The device check (issue 5, item 7), for a machine with one NVIDIA GPU (sized for an H200:
# about 6 minutes, most of it the build). It
#   1. builds the CUDA backend for sm_${ARCH} (default 90) with the tests and benchmarks;
#   2. runs the op harness's CUDA mode on the GPU (every op case, forward and backward, on the
#      device against the CPU backend; cuBLASLt is exercised here and nowhere else);
#   3. runs the kernel tests (simulator; they need no GPU but must pass in the same build);
#   4. measures the copy bandwidth and the cuBLASLt bf16 GEMM rate, and times the kernels
#      against them (bench/bench_gpu.cpp);
#   5. prints one table: each kernel's rate and its fraction of the ceiling it is bound by.
#   6. runs the NCCL communicator's tests on the GPU under `mpiexec -n 1` (one rank per GPU).
# Not yet covered: the GPT parity test on the device, training steps and the GPT-2 124M step
# against PyTorch (the trainer and the PyTorch script have no GPU benchmark mode yet).
#
# Usage: bench/gpu_check.sh [build-dir]     (ARCH=90 JOBS=16 to override)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build-gpu-check}"
ARCH="${ARCH:-90}"
JOBS="${JOBS:-$(nproc)}"
RESULTS="$BUILD/gpu_check"
mkdir -p "$RESULTS"

step() { printf '\n=== %s (%ds)\n' "$1" "$SECONDS"; }

step "configure and build for sm_$ARCH"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_WITH_CUDA=ON \
  -DTESSERA_CUDA_ARCHITECTURES="$ARCH" -DTESSERA_BUILD_TESTS=ON -DTESSERA_BUILD_BENCHMARKS=ON \
  > "$RESULTS/configure.log"
ninja -C "$BUILD" -j "$JOBS" test_ops test_cuda bench_gpu > "$RESULTS/build.log" \
  || { tail -40 "$RESULTS/build.log"; exit 1; }

status=0
step "op harness on the GPU"
TESSERA_OP_HARNESS_CUDA=gpu "$BUILD/tests/test_ops" --gtest_filter='*OpOnDevice*' \
  --gtest_brief=1 > "$RESULTS/op_harness.log" 2>&1 || status=1
tail -25 "$RESULTS/op_harness.log"

step "kernel tests (simulator)"
OMP_NUM_THREADS="$JOBS" "$BUILD/tests/test_cuda" --gtest_brief=1 > "$RESULTS/test_cuda.log" 2>&1 \
  || status=1
tail -5 "$RESULTS/test_cuda.log"

step "ceilings and kernel rates"
"$BUILD/bench/bench_gpu" --benchmark_min_time=0.3 --benchmark_format=json \
  --benchmark_out="$RESULTS/bench_gpu.json" --benchmark_out_format=json > /dev/null

step "summary"
python3 - "$RESULTS/bench_gpu.json" <<'PY'
import json, sys
runs = {b["name"].split("/")[0]: b for b in json.load(open(sys.argv[1]))["benchmarks"]}
def rate(name, key):
    b = runs.get(name)
    return None if b is None or b.get("error_occurred") else b.get(key)
bw = rate("BM_CopyBandwidth", "bandwidth")
gemm = rate("BM_GemmBf16", "FLOPS")
print(f"{'benchmark':40s} {'time':>10s} {'rate':>14s} {'of ceiling':>11s}")
for name, b in runs.items():
    if b.get("error_occurred"):
        print(f"{name:40s} skipped: {b.get('error_message', '')}")
        continue
    t = f"{b['real_time']:.3g} {b['time_unit']}"
    if "bandwidth" in b:
        r, ceiling, unit = b["bandwidth"], bw, "GB/s"
    else:
        r, ceiling, unit = b["FLOPS"], gemm, "TFLOP/s"
    shown = r / 1e9 if unit == "GB/s" else r / 1e12
    frac = f"{100 * r / ceiling:.0f}%" if ceiling else "-"
    print(f"{name:40s} {t:>10s} {shown:9.1f} {unit:7s} {frac:>8s}")
PY
# ---- NCCL communicator (tests/parallel/nccl_test.cpp) -------------------------------------
# One rank on the one GPU: NcclN1 runs every collective through NCCL against expected values,
# plus the error cases; NcclN2 skips (it needs two GPUs). Needs MPI and NCCL in this build.
step "NCCL communicator (mpiexec -n 1)"
if ! grep -q '^TESSERA_WITH_NCCL:BOOL=ON' "$BUILD/CMakeCache.txt" \
  || ! grep -q '^TESSERA_WITH_MPI:BOOL=ON' "$BUILD/CMakeCache.txt" \
  || ! command -v mpiexec > /dev/null; then
  echo "NOT RUN: this build has no NCCL or no MPI, or mpiexec is missing"
  status=1
elif ! ninja -C "$BUILD" -j "$JOBS" test_parallel > "$RESULTS/build_parallel.log" 2>&1; then
  tail -40 "$RESULTS/build_parallel.log"
  status=1
else
  OMP_NUM_THREADS=4 mpiexec -n 1 "$BUILD/tests/test_parallel" --gtest_filter='Nccl*' \
    > "$RESULTS/nccl.log" 2>&1 || status=1
  grep -E '^\[  (PASSED|FAILED|SKIPPED) |OK \]|FAILED \]|SKIPPED \]' "$RESULTS/nccl.log" | tail -20
fi

printf '\ntotal %ds; logs in %s\n' "$SECONDS" "$RESULTS"
exit $status
