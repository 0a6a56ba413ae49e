// CudaBackend's kernel ops: each entry of the op table forwards to the launcher of the same
// name (cuda/kernels/launchers.h) on the compute stream.

#include "tessera/cuda/backend/cuda_backend.h"
#include "tessera/cuda/kernels/launchers.h"

// (a, b) -> (a, b, stream())
#define TESSERA_WITH_STREAM_ARG(...) (__VA_ARGS__, stream())

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {

#define TESSERA_KERNEL_OP(name, params, args, front_ops) \
  void CudaBackend::name params {                        \
    cuda::name TESSERA_WITH_STREAM_ARG args;             \
  }
#include "tessera/core/op_table.def"

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
