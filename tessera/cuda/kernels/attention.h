#pragma once
// Causal flash-attention launchers (attention.cu), with the contracts of the Backend methods of
// the same names (contracts in tessera/core/op_table.def, launchers declared in launchers.h): q [B,
// H, Tq, D], k and v [B, Hkv, Tk, D] on the device with H % Hkv == 0 (grouped-query attention) and
// Tq <= Tk (query i sits at position Tk - Tq + i); unit stride in D, any other strides; out, gq,
// gk, gv likewise; lse [B, H, Tq] contiguous in f32 (f64 for f64 inputs). Dtypes f32, bf16, f16
// (computed in f32) and f64; D <= 128. Never forms Tq x Tk.

#include "tessera/core/tensor.h"
#include "tessera/cuda/device.h"
#include "tessera/cuda/kernels/launchers.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {

// The tensor-core forward pass (attention_mma.cu) for bf16 and f16 inputs, which
// attention_forward uses for them: P is rounded to the input type before P V (see there).
void attention_forward_mma(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                           const Tensor& out, const Tensor& lse, cudaStream_t stream);

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
