#pragma once
// The global squared norm launcher: the CUDA side of Backend::squared_norm
// (contracts in tessera/core/op_table.def, launchers declared in launchers.h), used for gradient
// clipping and the loss-scale overflow check.

#include <vector>

#include "tessera/core/backend.h"
#include "tessera/core/tensor.h"
#include "tessera/cuda/device.h"
#include "tessera/cuda/kernels/launchers.h"
