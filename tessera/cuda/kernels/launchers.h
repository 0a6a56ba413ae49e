#pragma once
// The CUDA launchers of the op table's kernel ops (tessera/core/op_table.def, where each
// contract is): one per entry, with the entry's parameters and then the stream it is queued
// on. Each is defined in its family's kernels/<family>.cu; CudaBackend forwards to them
// (cuda_backend_ops.cpp) and the kernel tests call them directly.

#include <cstdint>
#include <vector>

#include "tessera/core/backend.h"
#include "tessera/cuda/device.h"

// (a, b) -> (a, b, cudaStream_t stream)
#define TESSERA_WITH_STREAM_PARAM(...) (__VA_ARGS__, cudaStream_t stream)

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {

#define TESSERA_KERNEL_OP(name, params, args, front_ops) void name TESSERA_WITH_STREAM_PARAM params;
#include "tessera/core/op_table.def"

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda

#undef TESSERA_WITH_STREAM_PARAM
