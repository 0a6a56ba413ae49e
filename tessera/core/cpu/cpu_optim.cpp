// Fused AdamW (decoupled weight decay, as PyTorch's AdamW): one streaming pass that reads
// param, grad, m, v and writes param, m, v (28 bytes per element with an f32 gradient), plus,
// when asked, the updated param rounded into a bf16/f16 copy (2 more bytes written; 2 fewer read
// with a bf16/f16 gradient). Memory-bound: a sqrt and two divides per element hide behind the
// loads once vectorised. Each chunk is updated, then rounded while it is still in cache, so the
// copy costs no second pass over memory. Elementwise with the per-element math of
// core/detail/adamw_coefficients.h, so the result does not depend on how the range is split, and
// equals the CUDA kernel's bits.
//
// This file holds the portable path (plain C++ that the compiler may vectorise), the chunked
// threaded driver, and the backend entry point; cpu_adamw_avx2.cpp and cpu_adamw_avx512.cpp hold
// the explicit vector paths, cpu_adamw_dispatch.cpp the run-time choice among them.

#include <algorithm>

#include "tessera/core/cpu/cpu_adamw.h"
#include "tessera/core/cpu/cpu_backend.h"
#include "tessera/core/cpu/parallel.h"

namespace tessera::cpu {

namespace {

// Elements per task: 4 arrays x 16 KiB, so a task's working set stays in L2. A multiple of 4,
// so every chunk starts at a Philox block boundary, and of 16, so only the tensor's last chunk
// has a vector tail.
constexpr int64_t kAdamChunk = 1 << 12;

// The update: restrict pointers and no branches, so the compiler may vectorise it.
template <class G>
void update_span(float* __restrict p, const G* __restrict g, float* __restrict m,
                 float* __restrict v, int64_t n, const AdamCoefficients& c) {
  for (int64_t i = 0; i < n; ++i) adamw_update(p[i], float(g[i]), m[i], v[i], c);
}

template <class O>
void round_span(const float* __restrict p, uint16_t* __restrict out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = O::from_float(p[i]);
}

}  // namespace

void adamw_round_stochastic(const AdamArrays& a, int64_t first, int64_t n,
                            const AdamCoefficients& c) {
  const float* p = a.p + first;
  uint16_t* out = a.rounded + first;
  // One Philox call gives the bits of four consecutive elements (first is a multiple of 4).
  for (int64_t b = 0; b < n; b += 4) {
    const philox::Block bits = philox::philox4x32(uint64_t(first + b) / 4, c.round_key);
    for (int64_t j = 0; j < 4 && b + j < n; ++j)
      out[b + j] = bf16_round_stochastic(p[b + j], bits.v[j]);
  }
}

void adamw_chunk_scalar(const AdamArrays& a, int64_t first, int64_t n, const AdamCoefficients& c) {
  float* p = a.p + first;
  switch (a.grad) {
    case AdamGrad::f32:
      update_span(p, static_cast<const float*>(a.g) + first, a.m + first, a.v + first, n, c);
      break;
    case AdamGrad::bf16:
      update_span(p, static_cast<const BFloat16*>(a.g) + first, a.m + first, a.v + first, n, c);
      break;
    case AdamGrad::f16:
      update_span(p, static_cast<const Half*>(a.g) + first, a.m + first, a.v + first, n, c);
      break;
  }
  switch (a.copy) {
    case AdamCopy::none:
      break;
    case AdamCopy::bf16:
      round_span<BFloat16>(p, a.rounded + first, n);
      break;
    case AdamCopy::f16:
      round_span<Half>(p, a.rounded + first, n);
      break;
    case AdamCopy::bf16_stochastic:
      adamw_round_stochastic(a, first, n, c);
      break;
  }
}

void adamw_run(AdamChunkFn chunk, const AdamArrays& a, int64_t n, const AdamCoefficients& c) {
  const int64_t chunks = (n + kAdamChunk - 1) / kAdamChunk;
  cpu::parallel_for(chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      const int64_t begin = k * kAdamChunk;
      chunk(a, begin, std::min(n, begin + kAdamChunk) - begin, c);
    }
  });
}

}  // namespace tessera::cpu

namespace tessera {

void CpuBackend::adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m,
                            const Tensor& v, const Tensor& rounded, const AdamWArgs& args) {
  // The op front end (core/ops/optim.cpp) has checked dtypes, shapes and contiguity.
  TESSERA_ASSERT(param.is_contiguous() && grad.is_contiguous() && m.is_contiguous() &&
                 v.is_contiguous() && (!rounded.defined() || rounded.is_contiguous()));
  using cpu::AdamCopy, cpu::AdamGrad;
  cpu::AdamArrays a;
  a.p = param.data<float>("adamw");
  a.m = m.data<float>("adamw");
  a.v = v.data<float>("adamw");
  switch (grad.dtype()) {
    case DType::bf16:
      a.grad = AdamGrad::bf16;
      a.g = grad.data<BFloat16>("adamw");
      break;
    case DType::f16:
      a.grad = AdamGrad::f16;
      a.g = grad.data<Half>("adamw");
      break;
    default:
      a.grad = AdamGrad::f32;
      a.g = grad.data<float>("adamw");
      break;
  }
  if (rounded.defined() && rounded.dtype() == DType::bf16) {
    a.copy = args.stochastic_rounding ? AdamCopy::bf16_stochastic : AdamCopy::bf16;
    a.rounded = reinterpret_cast<uint16_t*>(rounded.data<BFloat16>("adamw"));
  } else if (rounded.defined()) {
    a.copy = AdamCopy::f16;
    a.rounded = reinterpret_cast<uint16_t*>(rounded.data<Half>("adamw"));
  }
  cpu::adamw_run(cpu::adamw_path(), a, param.numel(), adamw_coefficients(args));
}

}  // namespace tessera
