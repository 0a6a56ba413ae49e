#pragma once
// Reduction launchers: the CUDA side of Backend::reduce and max_backward
// (contracts in tessera/core/op_table.def, launchers declared in launchers.h). x is contiguous
// [outer, r, inner]; out and indices (i64, max only) are [outer, inner]. Every result is
// deterministic: fixed reduction trees, no float atomics.

#include "tessera/core/backend.h"
#include "tessera/core/tensor.h"
#include "tessera/cuda/device.h"
#include "tessera/cuda/kernels/launchers.h"
