#!/usr/bin/env bash
# The layering check (tools/check_layering.py): the tree passes, and each kind of include that
# runs against the order, planted in a copy of the tree, fails it naming the file and line.
# Usage: layering_test.sh <repository root> <scratch dir>
set -euo pipefail
repo=$1 dir=$2
check="$repo/tools/check_layering.py"
python3 "$check" "$repo"

rm -rf "$dir" && mkdir -p "$dir"
cp -r "$repo/tessera" "$repo/tools" "$dir/"
plant() {  # plant <file below the copy> <included header> <expected reason>
  local file=$1 header=$2 want=$3
  cp "$dir/$file" "$dir/$file.orig"
  printf '#include "tessera/%s"\n' "$header" >> "$dir/$file"
  local line
  line=$(wc -l < "$dir/$file")
  set +e
  out=$(python3 "$check" "$dir")
  code=$?
  set -e
  mv "$dir/$file.orig" "$dir/$file"
  [ "$code" = 1 ] || { echo "FAIL: planting $header in $file: exit $code"; exit 1; }
  grep -q "^$file:$line: includes tessera/$header: .*$want" <<<"$out" ||
    { echo "FAIL: planting $header in $file: got: $out"; exit 1; }
  echo "planted $header in $file: $(head -1 <<<"$out")"
}
plant tessera/core/tensor.cpp autograd/engine.h "core/ may not include autograd/"
plant tessera/nn/gpt.cpp parallel/mesh.h "nn/ may not include parallel/"
plant tessera/core/tensor.cpp core/ops/creation.h "core/. is below core/ops"
plant tessera/core/cpu/cpu_copy.cpp core/ops/movement.h "core/cpu and core/ops are siblings"
plant tessera/train/trainer.cpp core/cpu/parallel.h "core/cpu/ is the CPU backend's inside"
plant tessera/parallel/comm/communicator.cpp cuda/backend/cuda_backend.h "only tessera/cuda/cuda.h\|only cuda/cuda.h"
plant tessera/cuda/sim/warp.cpp cuda/device.h "cuda/sim is below cuda/."
plant tessera/parallel/comm/communicator.cpp parallel/engine/parallel_trainer.h "parallel/comm is below parallel/engine"
plant tessera/nn/gpt.h core/detail/philox.h "an installed header may not include an internal one"
plant tessera/parallel/mesh.h cuda/device.h "an installed header may not include an internal one"
python3 "$check" "$dir" > /dev/null || { echo "FAIL: the copy does not pass after the plants"; exit 1; }
echo "layering_test: all passed"
