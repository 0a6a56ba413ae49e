// SwiGLU's gate on the CPU: out = silu(gate) * up and its backward, one pass each.
// Memory-bound: the forward reads two elements and writes one, the backward reads three and
// writes two, against 2 + 1 reads and writes more for silu then mul (the intermediate silu
// tensor is written and read back). Contiguous f32/f64 rows go through Eigen array expressions,
// which vectorise exp; other layouts and the 16-bit types take a scalar strided loop in the
// compute type, the same formula as the CUDA kernel's.

#include <Eigen/Core>
#include <cmath>

#include "tessera/core/cpu/cpu_backend.h"
#include "tessera/core/cpu/strided_loop.h"
#include "tessera/core/detail/element_convert.h"

namespace tessera {

namespace {

template <class T>
constexpr bool kEigenFast = std::is_same_v<T, float> || std::is_same_v<T, double>;

template <class A>
struct SwigluGrad {
  A ggate, gup;
};

template <class A>
SwigluGrad<A> swiglu_grad(A g, A u, A gy) {
  const A s = A(1) / (A(1) + std::exp(-g));
  return {gy * u * s * (A(1) + g * (A(1) - s)), gy * g * s};
}

}  // namespace

void CpuBackend::swiglu(const Tensor& gate, const Tensor& up, const Tensor& out) {
  const char* op = "swiglu";
  cpu::StridedLoop<3> loop(out.shape(), {out.strides(), gate.strides(), up.strides()});
  dispatch_floating(gate.dtype(), op, [&]<class T>() {
    using A = acc_type_t<T>;
    const T* gp = gate.data<T>(op);
    const T* up_ = up.data<T>(op);
    T* o = out.data<T>(op);
    loop.for_each_row([&](std::array<int64_t, 3> off, int64_t n, std::array<int64_t, 3> st) {
      if constexpr (kEigenFast<T>) {
        if (st[0] == 1 && st[1] == 1 && st[2] == 1) {
          using Arr = Eigen::Array<T, Eigen::Dynamic, 1>;
          Eigen::Map<const Arr> g(gp + off[1], n), u(up_ + off[2], n);
          Eigen::Map<Arr>(o + off[0], n) = g / (T(1) + (-g).exp()) * u;
          return;
        }
      }
      for (int64_t j = 0; j < n; ++j) {
        const A g = element::load(gp + off[1] + j * st[1]);
        const A u = element::load(up_ + off[2] + j * st[2]);
        o[off[0] + j * st[0]] = element::convert<T>(g / (A(1) + std::exp(-g)) * u);
      }
    });
  });
}

void CpuBackend::swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& gy,
                                 const Tensor& ggate, const Tensor& gup) {
  const char* op = "swiglu backward";
  cpu::StridedLoop<5> loop(
      gate.shape(), {ggate.strides(), gup.strides(), gate.strides(), up.strides(), gy.strides()});
  dispatch_floating(gate.dtype(), op, [&]<class T>() {
    using A = acc_type_t<T>;
    const T* gp = gate.data<T>(op);
    const T* up_ = up.data<T>(op);
    const T* yp = gy.data<T>(op);
    T* dg = ggate.data<T>(op);
    T* du = gup.data<T>(op);
    loop.for_each_row([&](std::array<int64_t, 5> off, int64_t n, std::array<int64_t, 5> st) {
      if constexpr (kEigenFast<T>) {
        if (st[0] == 1 && st[1] == 1 && st[2] == 1 && st[3] == 1 && st[4] == 1) {
          using Arr = Eigen::Array<T, Eigen::Dynamic, 1>;
          Eigen::Map<const Arr> g(gp + off[2], n), u(up_ + off[3], n), y(yp + off[4], n);
          const Arr s = T(1) / (T(1) + (-g).exp());
          Eigen::Map<Arr>(dg + off[0], n) = y * u * s * (T(1) + g * (T(1) - s));
          Eigen::Map<Arr>(du + off[1], n) = y * g * s;
          return;
        }
      }
      for (int64_t j = 0; j < n; ++j) {
        const SwigluGrad<A> r = swiglu_grad<A>(element::load(gp + off[2] + j * st[2]),
                                               element::load(up_ + off[3] + j * st[3]),
                                               element::load(yp + off[4] + j * st[4]));
        dg[off[0] + j * st[0]] = element::convert<T>(r.ggate);
        du[off[1] + j * st[1]] = element::convert<T>(r.gup);
      }
    });
  });
}

}  // namespace tessera
