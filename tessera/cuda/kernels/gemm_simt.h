#pragma once
// A plain tiled SIMT GEMM with Backend::matmul's contract. The simulated build's matmul runs
// it, so that matmul works (and is checked against the CPU) without a GPU; the GPU build uses
// cuBLASLt (backend/gemm_gpu.cu) and never launches this kernel, which is too slow to matter
// there.

#include "tessera/core/backend.h"
#include "tessera/cuda/device.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {

// out [batch, M, N] (contiguous) = alpha * op(a) op(b) + beta * out (+ bias [N]); a, b and
// bias as Backend::matmul receives them (any strides; batch stride 0 broadcasts), in f32, f64,
// bf16 or f16 with one dtype for all; accumulates in f32 (f64 for f64).
void gemm_simt(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out,
               const MatmulArgs& args, cudaStream_t stream);
// Backend::matmul_gelu: the same GEMM with the GELU epilogue in its output pass, as cuBLASLt's
// GELU_AUX does it: pre (contiguous, out's shape and dtype) = the accumulator (+ bias) rounded
// to the dtype, out = gelu of the unrounded accumulator. args.alpha = 1, args.beta = 0.
void gemm_simt_gelu(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& pre,
                    const Tensor& out, const MatmulArgs& args, cudaStream_t stream);

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
