#pragma once
// The dropout launcher: the CUDA side of Backend::dropout (contracts in tessera/core/op_table.def,
// launchers declared in launchers.h). out = keep ? x / (1 - p) : 0 over contiguous x and out (f32,
// f64, bf16, f16), keep decided by Philox stream position offset + i of `seed`: the mask is
// bit-identical to the CPU backend's, and applying it to gy with the same key is the backward pass.

#include <cstdint>

#include "tessera/core/tensor.h"
#include "tessera/cuda/device.h"
#include "tessera/cuda/kernels/launchers.h"
