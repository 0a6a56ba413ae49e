#pragma once
// The rotary-embedding launcher: the CUDA side of Backend::rope (contracts in
// tessera/core/op_table.def, launchers declared in launchers.h). x and out are [B, T, H, D] with
// any strides and unit stride in D (out may be x); the halves (d, d + D/2) rotate by angle
// (pos_offset + t) * theta^(-2d/D), the other way when `inverse` (the backward pass). D must be
// even. f32, f64, bf16, f16.

#include <cstdint>

#include "tessera/core/tensor.h"
#include "tessera/cuda/device.h"
#include "tessera/cuda/kernels/launchers.h"
