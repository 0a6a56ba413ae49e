#!/usr/bin/env bash
# The device check: Tessera's kernels, GPT parity, kernel rates, the GPT-2 step against PyTorch
# and NCCL, on one NVIDIA GPU, in stages that each run under their own time limit and report as
# they finish. Sized for an H200 machine (16 cores, no network) reached in short windows: the
# default stages add up to 9 minutes by their limits, in priority order, so that a window cut
# short still returns what ran first.
#
#   stage    limit  what
#   build    180 s  unpack the carried packages (bench/gpu_prepare.sh) into a private prefix,
#                   configure against it (CUDA sm_$ARCH, pip's NCCL), build and run the
#                   dependency probe, then build what the chosen stages need, with every core
#   kernels   75 s  every kernel and backend test of tests/cuda (105) and the op harness in
#                   f32 and bf16 (97) on the GPU against the CPU backend
#   parity    60 s  GPT-2 parity on the GPU (fp32, bf16); 40 steps of `tessera train` on cuda
#                   in fp32 and bf16 beside the same run on the CPU
#   rates     75 s  copy bandwidth and cuBLASLt bf16 GEMM rate (the ceilings), every kernel
#                   against them (bench_gpu)
#   step     120 s  the GPT-2 124M bf16 B=8 T=1024 step, Tessera against eager PyTorch
#   nccl      30 s  the NCCL communicator's tests with one rank (an MPI singleton), and a few
#                   bf16 steps of the training engine on Device::cuda() through it
#                   -----
#                   540 s
#   serve    150 s  (off by default: --stages serve) `tessera serve --device cuda` under load
#                   (bench/serve_load.py): a GPT-2-small-shaped model, 64 prompts at once,
#                   static batching against continuous at three batch sizes; the serving
#                   goal, continuous >= 2x static's tokens/s at equal or better median TPOT
#   collectives 90 s  (off by default) the MPI communicator against plain MPI in one run
#                   (bench_collectives) at 2 and 4 ranks, each on a core of its own: the
#                   efficiency goals, <= 1.5x MPI's time up to 64 KiB, within 10% from 1 MiB
#   checkpoint 150 s  (off by default) the training loop's stall per sharded checkpoint at dp2
#                   on the CPU cores (bench/checkpoint_stall.sh, a save every 10 of 21 steps,
#                   stream and staged snapshots): the resilience goal, <= 1% of ten steps,
#                   where the writer threads have cores to themselves
#   multigpu 300 s  (off by default: --stages ...,multigpu) the NCCL tests and the layout-
#                   equivalence cases on 2, 4 and 8 GPUs, as many as are visible, one rank per
#                   GPU under the carried mpiexec
#
# After every stage it rewrites, atomically, the files of --out: results.jsonl (one line per
# check: passed, failed, skipped with why, or not run with why), table.txt (the same as a
# table), logs.tar.gz (every log so far) and machine.txt (GPU, driver, compilers). A run killed
# at any point leaves every finished stage there. Only "passed" passes; the exit status is 0
# when every row passed.
#
# Usage:
#   bench/gpu_check.sh --out DIR [--stages build,kernels,...] [--build DIR] [--deps DIR]
#                      [--budget SECONDS] [--limits stage=seconds,...] [--jobs N] [--arch 90]
#   --budget caps the whole run (default: the sum of the chosen limits, counted from the first
#   stage): a stage gets its limit or what is left, whichever is less, and is "not run" when
#   less than half its limit is left.
#   A second call while the machine is warm reuses the build: --stages with the stages left.
#
# Rehearsal, on a build machine without a GPU (tests/tools/gpu_check_rehearsal_test.sh, in CI):
#   bench/gpu_check.sh --rehearse --prebuilt BUILD --out DIR [...]
# unpacks the carried packages into a fresh prefix and configures against it with the system's
# packages hidden (a package missing from the carried folder fails it), builds only the
# dependency probe there, and runs the other stages from the binaries of BUILD on the simulated
# device. Expected there: build, kernels and parity's GPT parity and CPU run pass; the GPU-only
# rows are "skipped: no GPU"; exit 0 when every row is as expected. --plant-failure STAGE runs
# that stage's tests asking for a GPU that is not there (each must fail); --kill-after STAGE
# kills the script with SIGKILL once that stage's files are written (the cut-short window).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPORT="$ROOT/bench/gpu_check_report.py"
ORDER=(build kernels parity rates step nccl serve collectives checkpoint multigpu)
declare -A LIMIT=([build]=180 [kernels]=75 [parity]=60 [rates]=75 [step]=120 [nccl]=30
                  [serve]=150 [collectives]=90 [checkpoint]=150 [multigpu]=300)

OUT="" STAGES="build,kernels,parity,rates,step,nccl" BUILD="$ROOT/build-gpu-check"
DEPS="$ROOT/.gpu_deps" BUDGET="" JOBS="$(nproc)" ARCH="${ARCH:-90}" REHEARSE=0 PREBUILT=""
PLANT="" KILL_AFTER="" TRAIN_STEPS=40 PEAK_TFLOPS="${PEAK_TFLOPS:-989}" STAGE_ONLY=""
usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT="$2"; shift ;;
    --stages) STAGES="$2"; shift ;;
    --build) BUILD="$2"; shift ;;
    --deps) DEPS="$2"; shift ;;
    --budget) BUDGET="$2"; shift ;;
    --limits) for kv in ${2//,/ }; do LIMIT[${kv%%=*}]="${kv#*=}"; done; shift ;;
    --jobs) JOBS="$2"; shift ;;
    --arch) ARCH="$2"; shift ;;
    --rehearse) REHEARSE=1 ;;
    --prebuilt) PREBUILT="$2"; shift ;;
    --plant-failure) PLANT="$2"; shift ;;
    --kill-after) KILL_AFTER="$2"; shift ;;
    --stage-only) STAGE_ONLY="$2"; shift ;;  # internal: run one stage in this process
    -h|--help) usage ;;
    *) echo "gpu_check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$OUT" ] || { echo "gpu_check: --out DIR is required (see --help)" >&2; exit 2; }
for s in ${STAGES//,/ }; do
  [ -n "${LIMIT[$s]:-}" ] || { echo "gpu_check: unknown stage '$s' (stages: ${ORDER[*]})" >&2; exit 2; }
done
if [ "$REHEARSE" = 1 ] && [ -z "$PREBUILT" ]; then
  echo "gpu_check: --rehearse needs --prebuilt BUILD (the binaries the stages run)" >&2; exit 2
fi
mkdir -p "$OUT" "$BUILD"
OUT="$(cd "$OUT" && pwd)" BUILD="$(cd "$BUILD" && pwd)"
WORK="$BUILD/gpu_check"        # logs, training data and runs of this invocation
RESULTS="$WORK/results.jsonl"
PREFIX="$BUILD/prefix"         # the carried packages, unpacked
LIBDIR="$PREFIX/usr/lib/x86_64-linux-gnu"
BIN="${PREBUILT:-$BUILD}"      # where the stages' binaries are
export LD_LIBRARY_PATH="$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OMP_NUM_THREADS="$JOBS" PYTHONUNBUFFERED=1
# Open MPI refuses root without these (commands run as root on the GPU machine); MPICH ignores them.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The device under test for the test binaries (tests/support/cuda_test_device.h).
DEVICE_MODE=gpu
[ "$REHEARSE" = 1 ] && DEVICE_MODE=sim

row() { python3 "$REPORT" row "$RESULTS" "$STAGE" "$@"; }
# The reason a GPU-only check does not run in a rehearsal.
no_gpu() { row "$1" skipped "no GPU: rehearsal on the simulated device"; }
# The MPI launcher: the carried MPICH's, or the system's in a rehearsal (whose binaries link it).
launcher() {
  local m="$PREFIX/usr/bin/mpiexec.hydra"
  { [ "$REHEARSE" = 0 ] && [ -x "$m" ]; } || m=$(command -v mpiexec)
  echo "$m"
}
# Needs NAME...: true when every binary exists; otherwise one "not run" row.
needs() {
  local missing=()
  for b in "$@"; do [ -x "$BIN/$b" ] || missing+=("$b"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  row "$CHECK" "not run" "not built: ${missing[*]} (see build logs)"
  return 1
}
# run_gtest CHECK LOG_NAME BINARY [args...]: one gtest run, reported from its JSON output.
run_gtest() {
  local check="$1" name="$2" binary="$3"
  shift 3
  local json="$WORK/$name.json" mode="$DEVICE_MODE"
  [ "$PLANT" = "$STAGE" ] && mode=gpu  # a GPU asked for where none is: every test must fail
  rm -f "$json"
  TESSERA_TEST_CUDA="$mode" "$BIN/$binary" --gtest_output="json:$json" "$@" \
    > "$WORK/logs/$name.log" 2>&1
  python3 "$REPORT" gtest "$RESULTS" "$STAGE" "$check" "$json" "$WORK/logs/$name.log" $? \
    ${GTEST_ONLY:+--only "$GTEST_ONLY"} ${GTEST_GREP:+--grep "$GTEST_GREP"}
}

# ---- the stages (each runs in its own process group, killed at its limit) -----------------------
stage_build() {
  local log="$WORK/logs"
  # 1. The carried packages, unpacked afresh.
  local debs=("$DEPS"/*.deb)
  if [ ! -e "${debs[0]}" ]; then
    row "unpack carried packages" failed "none in $DEPS: run bench/gpu_prepare.sh on a build machine and carry the folder"
    return
  fi
  rm -rf "$PREFIX" && mkdir -p "$PREFIX"
  local bad=()
  # dpkg -x where dpkg exists; otherwise the same through ar and tar (a .deb is an ar archive
  # holding data.tar.*).
  unpack() {
    if command -v dpkg > /dev/null; then dpkg -x "$1" "$PREFIX"; return; fi
    local member
    member=$(ar t "$1" | grep '^data\.tar') || return 1
    case "$member" in
      *.xz) ar p "$1" "$member" | tar -xJ -C "$PREFIX" ;;
      *.zst) ar p "$1" "$member" | tar --zstd -x -C "$PREFIX" ;;
      *.gz) ar p "$1" "$member" | tar -xz -C "$PREFIX" ;;
      *) ar p "$1" "$member" | tar -x -C "$PREFIX" ;;
    esac
  }
  for deb in "${debs[@]}"; do unpack "$deb" 2>> "$log/unpack.log" || bad+=("$(basename "$deb")"); done
  if [ ${#bad[@]} -gt 0 ]; then
    row "unpack carried packages" failed "dpkg -x failed for ${bad[*]}"
    return
  fi
  row "unpack carried packages" passed "${#debs[@]} packages, $(du -sh "$DEPS" | cut -f1) from $DEPS"

  # 2. Configure against the prefix only: the system's packages are hidden, so a package missing
  #    from the carried folder fails here instead of being found elsewhere.
  local P="$PREFIX/usr" nccl=()
  local nccl_root
  nccl_root=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2> /dev/null || true)
  [ -n "$nccl_root" ] && nccl=(-DNCCL_ROOT="$nccl_root")
  local nvcc
  nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2> /dev/null || true)
  local cuda=(-DTESSERA_WITH_CUDA=OFF)
  [ -n "$nvcc" ] && cuda=(-DTESSERA_WITH_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc"
                          -DTESSERA_CUDA_ARCHITECTURES="$ARCH")
  # Real NCCL on the GPU machine (auto would look for nvidia-smi under the hidden /usr).
  [ "$REHEARSE" = 0 ] && nccl+=(-DTESSERA_NCCL=real)
  if [ "$REHEARSE" = 0 ] && [ -z "$nvcc" ]; then
    row "configure" failed "no nvcc on PATH or in /usr/local/cuda/bin"
    return
  fi
  if cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_IGNORE_PREFIX_PATH="/usr;/usr/local" -DCMAKE_PREFIX_PATH="$P" \
      -DMPI_CXX_LIBRARIES="$P/lib/x86_64-linux-gnu/libmpichcxx.so;$P/lib/x86_64-linux-gnu/libmpich.so" \
      -DMPI_CXX_ADDITIONAL_INCLUDE_DIRS="$P/include/x86_64-linux-gnu/mpich" \
      -DMPIEXEC_EXECUTABLE="$P/bin/mpiexec.hydra" -DTESSERA_WITH_MPI=ON \
      -DTESSERA_BUILD_TESTS=ON -DTESSERA_BUILD_BENCHMARKS=ON "${cuda[@]}" "${nccl[@]}" \
      > "$log/configure.log" 2>&1; then
    row "configure" passed "$(grep -o 'tessera: .*' "$log/configure.log" | tail -1)${nccl_root:+; NCCL from $nccl_root}"
  else
    row "configure" failed "$(grep -m1 -A2 'CMake Error' "$log/configure.log" | tr '\n' ' ' | cut -c1-300)"
    return
  fi

  # 3. The dependency probe: every carried library linked and used once.
  if ninja -C "$BUILD" dependency_probe > "$log/build_probe.log" 2>&1 \
      && "$BUILD/tests/dependency_probe" > "$log/probe.log" 2>&1; then
    row "dependency probe" passed "$(sed -n 's/^\[ probe \] //p' "$log/probe.log" | paste -sd ';' - | sed 's/;/; /g')"
  else
    row "dependency probe" failed "$(grep -E 'error|FAILED|Failure' "$log/build_probe.log" "$log/probe.log" | head -3 | tr '\n' ' ' | cut -c1-300)"
    return
  fi
  [ "$REHEARSE" = 1 ] && return  # the rehearsal's stages run the binaries of --prebuilt

  # 4. What the chosen stages run, with every core; -k 0 builds all that can be built.
  local targets=()
  for s in ${STAGES//,/ }; do
    case "$s" in
      kernels) targets+=(test_cuda test_ops) ;;
      parity) targets+=(test_cuda tessera_cli) ;;
      serve | checkpoint) targets+=(tessera_cli) ;;
      collectives) targets+=(bench_collectives) ;;
      rates) targets+=(bench_gpu) ;;
      step) targets+=(bench_train_step) ;;
      nccl | multigpu) targets+=(test_parallel) ;;
    esac
  done
  [ ${#targets[@]} -eq 0 ] && return
  mapfile -t targets < <(printf '%s\n' "${targets[@]}" | sort -u)
  local start=$SECONDS
  ninja -C "$BUILD" -k 0 -j "$JOBS" "${targets[@]}" > "$log/build.log" 2>&1
  local rc=$?
  local path
  for t in "${targets[@]}"; do
    path=$(find "$BUILD/tests" "$BUILD/bench" "$BUILD/tools" -maxdepth 1 -name "$t" -type f 2> /dev/null | head -1)
    [ "$t" = tessera_cli ] && path="$BUILD/tools/tessera"
    if [ -x "$path" ] && [ "$rc" = 0 ]; then
      row "build $t" passed "$((SECONDS - start)) s for all ${#targets[@]} targets, -j $JOBS"
    elif [ -x "$path" ]; then
      row "build $t" passed "built (ninja exit $rc for another target)"
    else
      row "build $t" failed "$(grep -m2 -E 'error|FAILED' "$log/build.log" | tr '\n' ' ' | cut -c1-300)"
    fi
  done
}

stage_kernels() {
  CHECK="kernel and backend tests (tests/cuda)"
  needs tests/test_cuda && run_gtest "$CHECK" test_cuda tests/test_cuda \
    --gtest_filter='-Sim*:*/Sim*:GptDeviceParity*'
  CHECK="op harness, f32"
  needs tests/test_ops && run_gtest "$CHECK" op_harness_f32 tests/test_ops \
    --gtest_filter='*/OpOnDevice.*'
  CHECK="op harness, bf16"
  needs tests/test_ops && run_gtest "$CHECK" op_harness_bf16 tests/test_ops \
    --gtest_filter='*/OpOnDeviceBf16.*'
}

stage_parity() {
  for precision in Fp32 Bf16; do
    CHECK="GPT-2 parity, ${precision,,}"
    needs tests/test_cuda || continue
    GTEST_GREP="\[ gpt parity \] cuda:0 (${precision,,}[^\n]*)" \
      run_gtest "$CHECK" "gpt_parity_${precision,,}" tests/test_cuda \
      --gtest_filter="GptDeviceParity.${precision}*"
  done
  CHECK="tessera train"
  needs tools/tessera || return
  local data="$WORK/train_data"
  rm -rf "$data" "$WORK"/train_*
  if ! "$BIN/tools/tessera" prepare --input "$ROOT/docs" "$ROOT/README.md" --ext .md \
      --tokenizer byte --output "$data" --prefix text --val-fraction 0.05 \
      > "$WORK/logs/prepare.log" 2>&1; then
    row "tessera prepare (training data)" failed "$(tail -2 "$WORK/logs/prepare.log" | tr '\n' ' ')"
    return
  fi
  # A model that learns visibly in a few dozen steps and costs milliseconds a step on a GPU.
  local runs=(cpu:fp32)
  [ "$REHEARSE" = 0 ] && runs=(cuda:fp32 cuda:bf16 cpu:fp32)
  for run in "${runs[@]}"; do
    local device=${run%%:*} precision=${run#*:}
    local run_dir="$WORK/train_${device}_${precision}"
    "$BIN/tools/tessera" train --train-data "$data/text_train_*.bin" --tokenizer byte \
      --model '{"n_layer": 2, "n_head": 4, "n_kv_head": 4, "n_embd": 128, "block_size": 128}' \
      --batch-size 16 --seq-len 128 --max-steps "$TRAIN_STEPS" --lr 2e-3 --warmup-steps 5 \
      --log-every 10 --device "$device" --precision "$precision" --resume never \
      --run-dir "$run_dir" > "$run_dir.log" 2>&1 \
      || echo "tessera train --device $device --precision $precision: exit $?" >> "$run_dir.log"
    cp "$run_dir.log" "$WORK/logs/"
  done
  if [ "$REHEARSE" = 1 ]; then
    no_gpu "tessera train --device cuda --precision fp32 ($TRAIN_STEPS steps)"
    no_gpu "tessera train --device cuda --precision bf16 ($TRAIN_STEPS steps)"
  fi
  python3 "$REPORT" train "$RESULTS" "$STAGE" "$WORK" "$TRAIN_STEPS" "${runs[@]}"
}

stage_rates() {
  CHECK="bench_gpu"
  needs bench/bench_gpu || return
  local json="$WORK/bench_gpu.json" min_time=0.3
  [ "$REHEARSE" = 1 ] && min_time=0.01  # every benchmark skips at once without a GPU
  rm -f "$json"
  "$BIN/bench/bench_gpu" --benchmark_min_time="$min_time" --benchmark_out="$json" \
    --benchmark_out_format=json > "$WORK/logs/bench_gpu.log" 2>&1
  python3 "$REPORT" bench "$RESULTS" "$STAGE" "$json" "$WORK/logs/bench_gpu.log" $?
}

stage_step() {
  if [ "$REHEARSE" = 1 ]; then
    no_gpu "GPT-2 124M bf16 step, tessera"
    no_gpu "GPT-2 124M bf16 step, pytorch"
    return
  fi
  CHECK="GPT-2 124M step vs PyTorch"
  needs bench/bench_train_step || return
  # The GEMM ceiling measured by the rates stage, when it ran.
  local gemm
  gemm=$(python3 -c '
import json, sys
try:
    runs = json.load(open(sys.argv[1]))["benchmarks"]
    print(next(b["FLOPS"] / 1e12 for b in runs if b["name"].startswith("BM_GemmBf16/")
               and not b.get("error_occurred")))
except Exception:
    print(0)' "$WORK/bench_gpu.json")
  local json="$WORK/gpt2_step.json"
  rm -f "$json"
  python3 "$ROOT/bench/train_step_vs_pytorch.py" --binary "$BIN/bench/bench_train_step" \
    --device cuda --rounds 2 --tessera-min-time 3 --torch-steps 6 --peak-tflops "$PEAK_TFLOPS" \
    --gemm-tflops "$gemm" --json "$json" > "$WORK/logs/gpt2_step.log" 2>&1
  python3 "$REPORT" step "$RESULTS" "$STAGE" "$json" "$WORK/logs/gpt2_step.log" $?
}

stage_nccl() {
  if [ "$REHEARSE" = 1 ]; then
    no_gpu "NCCL communicator, one rank"
    return
  fi
  CHECK="NCCL communicator, one rank"
  if ! grep -q '^TESSERA_NCCL_KIND:INTERNAL=real' "$BUILD/CMakeCache.txt" 2> /dev/null; then
    row "$CHECK" skipped "this build's NCCL communicator is not on real NCCL: $(grep -m1 -o 'NCCL=[a-z]*' "$WORK/logs/configure.log")"
    return
  fi
  needs tests/test_parallel || return
  # One rank runs as an MPI singleton (no mpiexec needed); NcclN2 needs two GPUs.
  GTEST_ONLY='^NcclN1\.' run_gtest "$CHECK" nccl tests/test_parallel --gtest_filter='NcclN1.*'
  CHECK="training engine, bf16, through NCCL (one rank)"
  GTEST_ONLY='^CudaLayoutN1\.' run_gtest "$CHECK" nccl_engine tests/test_parallel \
    --gtest_filter='CudaLayoutN1.*'
}

stage_serve() {
  CHECK="serve load benchmark"
  needs tools/tessera || return
  local data="$WORK/serve_data" run="$WORK/serve_model"
  # The GPU serves a GPT-2-small shape (12 x 768, byte vocabulary): a decode iteration reads the
  # weights once whatever the batch, the regime continuous batching is for. The rehearsal runs
  # the same plumbing on the CPU with a small model and little traffic, and reports no goal.
  local device=cuda model='{"n_layer": 12, "n_head": 12, "n_kv_head": 12, "n_embd": 768, "block_size": 512}'
  local load=(--num-prompts 64 --output-len 4,256 --threads 4
              --modes static:8:512,continuous:8:512,continuous:16:512,continuous:32:1024)
  local goal=()
  if [ "$REHEARSE" = 1 ]; then
    device=cpu model='{"n_layer": 2, "n_head": 4, "n_kv_head": 4, "n_embd": 128, "block_size": 512}'
    load=(--num-prompts 8 --output-len 4,16 --threads 2 --modes static:4:64,continuous:4:64)
    goal=(--no-goal "no GPU: rehearsal on the CPU, whose decode iterations cost per token")
  fi
  rm -rf "$data" "$run"
  if ! "$BIN/tools/tessera" prepare --input "$ROOT/docs" --ext .md --tokenizer byte \
      --output "$data" --prefix text --val-fraction 0.05 > "$WORK/logs/serve_prepare.log" 2>&1 \
    || ! "$BIN/tools/tessera" train --train-data "$data/text_train_*.bin" --tokenizer byte \
      --model "$model" --batch-size 2 --seq-len 128 --max-steps 1 --device "$device" \
      --resume never --run-dir "$run" > "$WORK/logs/serve_model.log" 2>&1; then
    row "$CHECK" failed "the model to serve: $(tail -2 "$WORK/logs/serve_model.log" "$WORK/logs/serve_prepare.log" 2> /dev/null | tr '\n' ' ' | cut -c1-300)"
    return
  fi
  local json="$WORK/serve_load.json"
  rm -f "$json"
  python3 "$ROOT/bench/serve_load.py" --tessera "$BIN/tools/tessera" --model "$run" \
    --device "$device" --rates inf --output-dist exponential "${load[@]}" --out "$json" \
    > "$WORK/logs/serve_load.log" 2>&1
  python3 "$REPORT" serve "$RESULTS" "$STAGE" "$json" "$WORK/logs/serve_load.log" $? "${goal[@]}"
}

stage_collectives() {
  CHECK="bench_collectives"
  needs bench/bench_collectives || return
  local mpiexec ranks=(2 4) filter=() goal=()
  mpiexec=$(launcher)
  if [ "$REHEARSE" = 1 ]; then  # the plumbing, on two sizes; 2 cores judge nothing
    ranks=(2) filter=(--benchmark_filter='/(1024|1048576)/')
    goal=(--no-goal "rehearsal: a shared 2-core machine")
  fi
  for n in "${ranks[@]}"; do
    if [ "$n" -gt "$(nproc)" ]; then
      row "bench_collectives, $n ranks" skipped "$(nproc) cores: the goals are for a core per rank"
      continue
    fi
    local json="$WORK/collectives_n$n.json"
    rm -f "$json"
    OMP_NUM_THREADS=1 "$mpiexec" -n "$n" "$BIN/bench/bench_collectives" "${filter[@]}" \
      --benchmark_out="$json" --benchmark_out_format=json > "$WORK/logs/collectives_n$n.log" 2>&1
    python3 "$REPORT" collectives "$RESULTS" "$STAGE" "$json" "$WORK/logs/collectives_n$n.log" $? \
      "$n" "${goal[@]}"
  done
}

stage_checkpoint() {
  CHECK="checkpoint stall"
  needs tools/tessera || return
  local json="$WORK/checkpoint_stall.jsonl" steps=21 goal=() env=()
  # One run each of the saving and the end-only run: on an idle many-core machine the wall
  # times repeat (on 2 shared cores they varied by 40% between runs, docs/benchmarks.md).
  if [ "$REHEARSE" = 1 ]; then
    steps=5 env=(MODEL='{"n_layer": 2, "n_head": 4, "n_kv_head": 4, "n_embd": 128, "block_size": 64}' EVERY=2)
    goal=(--no-goal "rehearsal: a tiny model on a shared 2-core machine")
  fi
  rm -f "$json"
  env TESSERA_BIN="$BIN/tools/tessera" MPIEXEC="$(launcher)" JSON="$json" DP=2 EVERY=10 \
    MODES="sharded stream,sharded staged" "${env[@]}" bash "$ROOT/bench/checkpoint_stall.sh" \
    "$steps" 1 > "$WORK/logs/checkpoint_stall.log" 2>&1
  python3 "$REPORT" checkpoint "$RESULTS" "$STAGE" "$json" "$WORK/logs/checkpoint_stall.log" $? \
    "${goal[@]}"
}

stage_multigpu() {
  local gpus
  gpus=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU ' || true)
  if [ "$REHEARSE" = 1 ] || [ "${gpus:-0}" -lt 2 ]; then
    row "multi-GPU NCCL and layouts" skipped "${gpus:-0} GPU(s) visible: needs 2 or more"
    return
  fi
  CHECK="multi-GPU NCCL and layouts"
  if ! grep -q '^TESSERA_NCCL_KIND:INTERNAL=real' "$BUILD/CMakeCache.txt" 2> /dev/null; then
    row "$CHECK" skipped "this build's NCCL communicator is not on real NCCL"
    return
  fi
  needs tests/test_parallel || return
  local mpiexec
  mpiexec=$(launcher)
  for n in 2 4 8; do
    [ "$gpus" -ge "$n" ] || break
    CHECK="NCCL and layout equivalence on $n GPUs"
    local json="$WORK/multigpu_n$n.json"
    rm -f "$json"
    # Rank 0 writes the report; the exit status is every rank's (the test main reduces it).
    local filter="--gtest_filter=NcclN$n.*:CudaLayoutN$n.*"
    "$mpiexec" -n 1 "$BIN/tests/test_parallel" "$filter" --gtest_output="json:$json" \
      : -n $((n - 1)) "$BIN/tests/test_parallel" "$filter" > "$WORK/logs/multigpu_n$n.log" 2>&1
    python3 "$REPORT" gtest "$RESULTS" "$STAGE" "$CHECK" "$json" "$WORK/logs/multigpu_n$n.log" $?
  done
}

# ---- one stage in this process (called by the driver below) ---------------------------------------
if [ -n "$STAGE_ONLY" ]; then
  STAGE="$STAGE_ONLY"
  "stage_$STAGE"
  exit 0
fi

# ---- the driver ----------------------------------------------------------------------------------
rm -rf "$WORK" && mkdir -p "$WORK/logs"
: > "$RESULTS"
if [ -z "$BUDGET" ]; then
  BUDGET=0
  for s in ${STAGES//,/ }; do BUDGET=$((BUDGET + LIMIT[$s])); done
fi

# Writes DEST from stdin: a temporary file beside it, flushed, then renamed over it.
atomic_write() {
  local tmp="$1.tmp"
  cat > "$tmp" && sync "$tmp" 2> /dev/null; mv -f "$tmp" "$1"
}
publish() {
  atomic_write "$OUT/results.jsonl" < "$RESULTS"
  python3 "$REPORT" table "$RESULTS" --machine "$OUT/machine.txt" \
    --seconds "$WORK/logs/stage_seconds.tsv" \
    --title "Tessera device check, $(date -u +%Y-%m-%d) ($( [ "$REHEARSE" = 1 ] && echo rehearsal on the simulated device || echo GPU))" \
    | atomic_write "$OUT/table.txt"
  tar -czf "$WORK/logs.tar.gz" -C "$WORK" logs 2> /dev/null && atomic_write "$OUT/logs.tar.gz" < "$WORK/logs.tar.gz"
}

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ); host: $(hostname); cores: $(nproc); stages: $STAGES; budget: ${BUDGET} s"
  if command -v nvidia-smi > /dev/null && nvidia-smi > /dev/null 2>&1; then
    echo "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader | head -1)"
  else
    echo "gpu: none visible (nvidia-smi $(command -v nvidia-smi > /dev/null && echo failed || echo missing))"
  fi
  echo "nvcc: $( (command -v nvcc > /dev/null && nvcc --version || /usr/local/cuda/bin/nvcc --version) 2> /dev/null | grep -o 'release [0-9.]*' | head -1)"
  echo "c++: $(c++ --version 2> /dev/null | head -1); cmake: $(cmake --version 2> /dev/null | head -1)"
  echo "python: $(python3 -c 'import sys; print(sys.version.split()[0])' 2> /dev/null); torch: $(python3 -c 'import torch; print(torch.__version__, torch.cuda.is_available())' 2> /dev/null || echo none)"
} > "$WORK/machine.txt" 2>&1
atomic_write "$OUT/machine.txt" < "$WORK/machine.txt"
publish

set -m  # every stage in its own process group, so that its limit kills all it started
t0=$SECONDS
for STAGE in "${ORDER[@]}"; do
  [[ ",$STAGES," == *",$STAGE,"* ]] || continue
  # A stage runs under its limit, or under what is left of the budget when that is less but
  # still at least half its limit; with less than that it is not run.
  limit=${LIMIT[$STAGE]}
  left=$((BUDGET - (SECONDS - t0)))
  if [ $((2 * left)) -lt "$limit" ]; then
    row "stage $STAGE" "not run" "time: $left s of the $BUDGET s budget left, the stage needs $limit s"
    publish
    continue
  fi
  [ "$left" -lt "$limit" ] && limit=$left
  echo "=== $STAGE (limit $limit s, at $SECONDS s)"
  start=$SECONDS
  bash "$0" --stage-only "$STAGE" --out "$OUT" --stages "$STAGES" --build "$BUILD" \
    --deps "$DEPS" --jobs "$JOBS" --arch "$ARCH" ${PREBUILT:+--prebuilt "$PREBUILT"} \
    ${PLANT:+--plant-failure "$PLANT"} $( [ "$REHEARSE" = 1 ] && echo --rehearse) < /dev/null &
  pid=$!
  while kill -0 "$pid" 2> /dev/null && [ $((SECONDS - start)) -lt "$limit" ]; do sleep 1; done
  if kill -0 "$pid" 2> /dev/null; then
    kill -TERM -- "-$pid" 2> /dev/null; sleep 2; kill -KILL -- "-$pid" 2> /dev/null
    wait "$pid" 2> /dev/null
    row "stage $STAGE" failed "timed out: stopped at its $limit s limit (rows above are what finished)"
  else
    wait "$pid"
  fi
  echo "=== $STAGE took $((SECONDS - start)) s"
  printf '%s\t%d\n' "$STAGE" $((SECONDS - start)) >> "$WORK/logs/stage_seconds.tsv"
  publish
  [ "$STAGE" = "$KILL_AFTER" ] && kill -KILL $$
done
set +m

cat "$OUT/table.txt"
echo "total $SECONDS s; files in $OUT: $(ls "$OUT" | tr '\n' ' ')"
if [ "$REHEARSE" = 1 ]; then
  # The verdicts a rehearsal expects: GPU-only rows skipped, everything else passed; a planted
  # stage's test rows failed.
  expect=("parity/tessera train --device cuda=skipped" "rates=skipped" "step=skipped" "nccl=skipped"
          "serve/at equal or better median TPOT=skipped" "collectives=skipped" "checkpoint=skipped"
          "multigpu=skipped")
  [ -n "$PLANT" ] && expect=("$PLANT/^(kernel|op harness|GPT-2 parity)=failed" "${expect[@]}")
  stages=()
  for s in "${ORDER[@]}"; do [[ ",$STAGES," == *",$s,"* ]] && stages+=("$s"); done
  python3 "$REPORT" verdicts "$RESULTS" --expect "${expect[@]}" --stages "${stages[@]}"
  exit $?
fi
python3 - "$RESULTS" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
sys.exit(0 if rows and all(r["status"] == "passed" for r in rows) else 1)
PY
