#pragma once
// LayerNorm and RMSNorm launchers (norm.cu), with the contracts of the Backend methods of the
// same names (contracts in tessera/core/op_table.def, launchers declared in launchers.h):
// normalization over the last dim of contiguous [rows, n] tensors on the device; weight, bias, gw,
// gb are [n] in x's dtype (f32, bf16, f16 or f64); mean and rstd are [rows] in f32 (f64 for f64 x).
// Undefined bias / gw / gb are skipped.

#include "tessera/core/tensor.h"
#include "tessera/cuda/device.h"
#include "tessera/cuda/kernels/launchers.h"
