#pragma once
// Random-tensor launchers: the CUDA side of Backend::random_uniform and random_normal
// (contracts in tessera/core/op_table.def, launchers declared in launchers.h). dst is contiguous
// and floating; element i draws from Philox stream position offset + i of `seed`, so the values are
// bit-identical to the CPU backend's.

#include <cstdint>

#include "tessera/core/tensor.h"
#include "tessera/cuda/device.h"
#include "tessera/cuda/kernels/launchers.h"
