#pragma once
// The Q8_0 linear launcher: the CUDA side of Backend::linear_q8 (contract in
// tessera/core/op_table.def, launcher declared in launchers.h). x [M, K] contiguous; q8 i32
// [N, K/4] and scale f16 [N, K/32] contiguous; bias [N] or undefined; out [M, N] contiguous.
// f32, f64, bf16, f16 activations.

#include <cstdint>

#include "tessera/core/tensor.h"
#include "tessera/cuda/device.h"
#include "tessera/cuda/kernels/launchers.h"
