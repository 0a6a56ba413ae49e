// Fused AdamW (decoupled weight decay, as PyTorch's AdamW): one streaming pass that reads
// param, grad, m, v and writes param, m, v (28 bytes per element with an f32 gradient), plus,
// when asked, the updated param rounded into a bf16/f16 copy (2 more bytes written; 2 fewer read
// with a bf16/f16 gradient). Memory-bound: the arithmetic (a sqrt and a divide per element)
// vectorises and hides behind the loads. Each chunk is updated, then rounded while it is still
// in cache, so the copy costs no second pass over memory. Elementwise with the per-element math
// of core/detail/adamw_coefficients.h, so the result does not depend on how the range is split, and
// equals the CUDA kernel's bits.

#include <type_traits>

#include "tessera/core/detail/adamw_coefficients.h"
#include "tessera/core/cpu/cpu_backend.h"
#include "tessera/core/cpu/parallel.h"

namespace tessera {

namespace {

// Elements per task: 4 arrays x 16 KiB, so a task's working set stays in L2. A multiple of 4,
// so every chunk starts at a Philox block boundary.
constexpr int64_t kAdamChunk = 1 << 12;

// The update: restrict pointers and no branches, so the compiler vectorises it.
template <class G>
void adamw_span(float* __restrict p, const G* __restrict g, float* __restrict m,
                float* __restrict v, int64_t n, const AdamCoefficients& c) {
  for (int64_t i = 0; i < n; ++i) adamw_update(p[i], float(g[i]), m[i], v[i], c);
}

// p[0, n) (elements first .. first + n - 1 of the tensor) rounded into out.
template <class O>
void round_span(const float* __restrict p, uint16_t* __restrict out, int64_t first, int64_t n,
                const AdamWArgs& args, const AdamCoefficients& c) {
  if constexpr (std::is_same_v<O, BFloat16>) {
    if (args.stochastic_rounding) {
      // One Philox call gives the bits of four consecutive elements (first is a multiple of 4).
      for (int64_t b = 0; b < n; b += 4) {
        const philox::Block bits = philox::philox4x32(uint64_t(first + b) / 4, c.round_key);
        for (int64_t j = 0; j < 4 && b + j < n; ++j)
          out[b + j] = bf16_round_stochastic(p[b + j], bits.v[j]);
      }
      return;
    }
  }
  for (int64_t i = 0; i < n; ++i) out[i] = O::from_float(p[i]);
}

template <class G, class O>
void adamw_all(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
               const Tensor& rounded, const AdamWArgs& args) {
  const AdamCoefficients c = adamw_coefficients(args);
  float* p = param.data<float>("adamw");
  const G* g = grad.data<G>("adamw");
  float* mp = m.data<float>("adamw");
  float* vp = v.data<float>("adamw");
  uint16_t* out = nullptr;
  if constexpr (!std::is_void_v<O>) out = reinterpret_cast<uint16_t*>(rounded.data<O>("adamw"));
  const int64_t n = param.numel();
  const int64_t chunks = (n + kAdamChunk - 1) / kAdamChunk;
  cpu::parallel_for(chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t chunk = b; chunk < e; ++chunk) {
      const int64_t begin = chunk * kAdamChunk, len = std::min(n, begin + kAdamChunk) - begin;
      adamw_span(p + begin, g + begin, mp + begin, vp + begin, len, c);
      if constexpr (!std::is_void_v<O>) round_span<O>(p + begin, out + begin, begin, len, args, c);
    }
  });
}

template <class G>
void adamw_with_grad(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                     const Tensor& rounded, const AdamWArgs& args) {
  if (!rounded.defined()) return adamw_all<G, void>(param, grad, m, v, rounded, args);
  if (rounded.dtype() == DType::bf16)
    return adamw_all<G, BFloat16>(param, grad, m, v, rounded, args);
  adamw_all<G, Half>(param, grad, m, v, rounded, args);
}

}  // namespace

void CpuBackend::adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m,
                            const Tensor& v, const Tensor& rounded, const AdamWArgs& args) {
  // The op front end (core/ops/optim.cpp) has checked dtypes, shapes and contiguity.
  TESSERA_ASSERT(param.is_contiguous() && grad.is_contiguous() && m.is_contiguous() &&
                 v.is_contiguous() && (!rounded.defined() || rounded.is_contiguous()));
  switch (grad.dtype()) {
    case DType::bf16:
      return adamw_with_grad<BFloat16>(param, grad, m, v, rounded, args);
    case DType::f16:
      return adamw_with_grad<Half>(param, grad, m, v, rounded, args);
    default:
      return adamw_with_grad<float>(param, grad, m, v, rounded, args);
  }
}

}  // namespace tessera
