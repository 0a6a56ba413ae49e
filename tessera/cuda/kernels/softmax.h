#pragma once
// Softmax launchers: the CUDA side of Backend::softmax and softmax_backward
// (contracts in tessera/core/op_table.def, launchers declared in launchers.h), row-wise over the
// last dim of contiguous [rows, n]; `log` selects log-softmax. f32, f64, bf16, f16.

#include "tessera/core/tensor.h"
#include "tessera/cuda/device.h"
#include "tessera/cuda/kernels/launchers.h"
