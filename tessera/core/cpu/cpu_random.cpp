// Philox-based uniform and normal draws, and dropout. Element i uses stream position
// offset + i only, so results are independent of threads and of how a tensor is sharded.
// Bound: compute (ten Philox rounds per 4 values), far below memory bandwidth.

#include <cmath>

#include "tessera/core/detail/element_convert.h"
#include "tessera/core/cpu/cpu_backend.h"
#include "tessera/core/cpu/parallel.h"
#include "tessera/core/detail/philox.h"

namespace tessera {

void CpuBackend::random_uniform(const Tensor& dst, double lo, double hi, uint64_t seed,
                                uint64_t offset) {
  TESSERA_ASSERT(dst.is_contiguous());
  dispatch_floating(dst.dtype(), "rand", [&]<class T>() {
    T* o = dst.data<T>("rand");
    cpu::parallel_for(dst.numel(), 1 << 14, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        double u = philox::to_unit_float(philox::bits(seed, offset + uint64_t(i)));
        o[i] = element::convert<T>(lo + (hi - lo) * u);
      }
    });
  });
}

void CpuBackend::random_normal(const Tensor& dst, double mean, double std, uint64_t seed,
                               uint64_t offset) {
  TESSERA_ASSERT(dst.is_contiguous());
  // Box-Muller on lanes (0, 1) or (2, 3) of block (offset + i) / 2, by the parity of offset + i.
  dispatch_floating(dst.dtype(), "randn", [&]<class T>() {
    T* o = dst.data<T>("randn");
    cpu::parallel_for(dst.numel(), 1 << 13, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        uint64_t pos = offset + uint64_t(i);
        philox::Block blk = philox::philox4x32(pos >> 1, seed);
        int lane = int(pos & 1) * 2;
        double u1 = (double(blk.v[lane] >> 8) + 1.0) * (1.0 / 16777216.0);  // (0, 1]
        double u2 = double(blk.v[lane + 1] >> 8) * (1.0 / 16777216.0);
        double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
        o[i] = element::convert<T>(mean + std * z);
      }
    });
  });
}

void CpuBackend::dropout(const Tensor& x, const Tensor& out, double p, uint64_t seed,
                         uint64_t offset) {
  TESSERA_ASSERT(x.is_contiguous() && out.is_contiguous());
  const uint32_t threshold = philox::drop_threshold(p);
  dispatch_floating(x.dtype(), "dropout", [&]<class T>() {
    using A = acc_type_t<T>;
    const T* in = x.data<T>("dropout");
    T* o = out.data<T>("dropout");
    const A scale = A(1.0 / (1.0 - p));
    cpu::parallel_for(x.numel(), 1 << 14, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        bool keep = philox::bits(seed, offset + uint64_t(i)) >= threshold;
        o[i] = element::convert<T>(keep ? element::load(in + i) * scale : A(0));
      }
    });
  });
}

}  // namespace tessera
