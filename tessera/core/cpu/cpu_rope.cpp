// Rotary position embedding on the CPU. Memory-bound: one read and one write per element.
//
// The angles (pos_offset + t) * theta^(-2d/D) reach ~1e4 radians at long contexts, where an
// f32 argument alone loses ~1e-3 rad; so cos and sin are computed in double once per (t, d)
// into a [T, 2, D/2] table (O(T * D), shared by every batch row and head), then rounded to the
// compute type. Rows (b, t, h) are rotated in parallel; each row reads its table entry.

#include <cmath>
#include <vector>

#include "tessera/core/detail/element_convert.h"
#include "tessera/core/cpu/cpu_backend.h"
#include "tessera/core/cpu/parallel.h"
#include "tessera/core/empty.h"

namespace tessera {

void CpuBackend::rope(const Tensor& x, const Tensor& out, int64_t pos_offset, double theta,
                      bool inverse) {
  const char* op = "rope";
  const int64_t B = x.size(0), T = x.size(1), H = x.size(2), D = x.size(3), half = D / 2;
  dispatch_floating(x.dtype(), op, [&]<class S>() {
    using A = acc_type_t<S>;
    std::vector<double> inv_freq(static_cast<size_t>(half));
    for (int64_t d = 0; d < half; ++d)
      inv_freq[size_t(d)] = std::pow(theta, -2.0 * double(d) / double(D));
    // table[t] holds cos for d < half, then sin (negated for the inverse rotation).
    Tensor table_t = empty(Shape{T, 2, half}, dtype_of<A>);
    A* table = table_t.data<A>(op);
    const double sign = inverse ? -1.0 : 1.0;
    cpu::parallel_for(T, std::max<int64_t>(1, 2048 / std::max<int64_t>(half, 1)),
                      [&](int64_t lo, int64_t hi) {
                        for (int64_t t = lo; t < hi; ++t) {
                          A* c = table + t * D;
                          for (int64_t d = 0; d < half; ++d) {
                            const double angle = double(pos_offset + t) * inv_freq[size_t(d)];
                            c[d] = A(std::cos(angle));
                            c[half + d] = A(sign * std::sin(angle));
                          }
                        }
                      });
    const S* xp = x.data<S>(op);
    S* op_ = out.data<S>(op);
    const int64_t xb = x.stride(0), xt = x.stride(1), xh = x.stride(2);
    const int64_t ob = out.stride(0), ot = out.stride(1), oh = out.stride(2);
    cpu::parallel_for(B * T * H, std::max<int64_t>(1, 8192 / D), [&](int64_t lo, int64_t hi) {
      for (int64_t row = lo; row < hi; ++row) {
        const int64_t h = row % H, t = (row / H) % T, b = row / (H * T);
        const S* in = xp + b * xb + t * xt + h * xh;
        S* o = op_ + b * ob + t * ot + h * oh;
        const A* c = table + t * D;
        const A* s = c + half;
        for (int64_t d = 0; d < half; ++d) {
          const A x1 = element::load(in + d), x2 = element::load(in + half + d);
          element::store(o + d, x1 * c[d] - x2 * s[d]);
          element::store(o + half + d, x2 * c[d] + x1 * s[d]);
        }
      }
    });
  });
}

}  // namespace tessera
