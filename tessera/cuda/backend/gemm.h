#pragma once
// Backend::matmul on the device, one declaration with two builds: gemm_gpu.cu (cuBLASLt) and
// gemm_sim.cpp (the SIMT kernel in kernels/gemm_simt.cu, for the simulator only).

#include "tessera/core/backend.h"
#include "tessera/cuda/backend/device_context.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {

void gemm(DeviceContext& context, const Tensor& a, const Tensor& b, const Tensor& bias,
          const Tensor& out, const MatmulArgs& args);

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
