#pragma once
// Elementwise launchers: the CUDA side of Backend::unary, unary_backward, binary and where
// (contracts in tessera/core/op_table.def, launchers declared in launchers.h). Inputs are views of
// out's shape with any strides (0 where broadcast) and out's dtype; out may be an input (in place)
// and may itself be strided. f32, f64, bf16, f16 everywhere; i32 and i64 for binary, where, and
// unary neg/relu.

#include "tessera/core/backend.h"
#include "tessera/core/tensor.h"
#include "tessera/cuda/device.h"
#include "tessera/cuda/kernels/launchers.h"
