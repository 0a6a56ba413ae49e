// The simulated build's matmul: the tiled SIMT kernel (kernels/gemm_simt.cu). cuBLASLt has no
// simulator, so the GPU path (gemm_gpu.cu) is exercised only on a GPU.

#include "tessera/cuda/backend/gemm.h"
#include "tessera/cuda/kernels/gemm_simt.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {

void gemm(DeviceContext& context, const Tensor& a, const Tensor& b, const Tensor& bias,
          const Tensor& out, const MatmulArgs& args) {
  gemm_simt(a, b, bias, out, args, context.compute_stream());
}

void gemm_gelu(DeviceContext& context, const Tensor& a, const Tensor& b, const Tensor& bias,
               const Tensor& pre, const Tensor& out, const MatmulArgs& args) {
  gemm_simt_gelu(a, b, bias, pre, out, args, context.compute_stream());
}

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
