#pragma once
// Embedding launchers: the CUDA side of Backend::embedding_forward and embedding_backward
// (contracts in tessera/core/op_table.def, launchers declared in launchers.h). weight / gweight are
// contiguous [V, C], ids contiguous i32/i64 [N], out / gy contiguous [N, C]; f32, f64, bf16, f16.
//
// Both throw, like the CPU backend, naming the first flat position whose id lies outside
// [0, V): checking reads a flag back from the device, so each call synchronises its stream.
// The kernels never read or write out of bounds for such ids either way. The backward pass
// sums each id's gy rows in position order, the CPU backend's order, so the bits match it and
// no atomics race.

#include "tessera/core/tensor.h"
#include "tessera/cuda/device.h"
#include "tessera/cuda/kernels/launchers.h"
