// Elementwise kernels: unary math, fused activation backward, broadcasting binary ops, where.
// Memory-bound: each element is read and written once. Contiguous f32/f64 rows go through
// Eigen array expressions, which vectorise exp/log/tanh; other layouts and the 16-bit types
// take a scalar strided loop.

#include <Eigen/Core>
#include <cmath>

#include "tessera/core/detail/element_convert.h"
#include "tessera/core/cpu/cpu_backend.h"
#include "tessera/core/cpu/strided_loop.h"

namespace tessera {

namespace {

constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kGeluCoeff = 0.044715;

template <class A>
A unary_scalar(UnaryOp op, A x, double s) {
  if constexpr (std::is_integral_v<A>) {
    return op == UnaryOp::neg ? -x : (x > 0 ? x : A(0));
  } else {
    switch (op) {
      case UnaryOp::neg:
        return -x;
      case UnaryOp::exp:
        return std::exp(x);
      case UnaryOp::log:
        return std::log(x);
      case UnaryOp::sqrt:
        return std::sqrt(x);
      case UnaryOp::rsqrt:
        return A(1) / std::sqrt(x);
      case UnaryOp::tanh:
        return std::tanh(x);
      case UnaryOp::gelu: {
        A u = A(kSqrt2OverPi) * (x + A(kGeluCoeff) * x * x * x);
        return A(0.5) * x * (A(1) + std::tanh(u));
      }
      case UnaryOp::silu:
        return x / (A(1) + std::exp(-x));
      case UnaryOp::relu:
        return x > A(0) ? x : A(0);
      case UnaryOp::pow_scalar:
        return std::pow(x, A(s));
    }
    return x;
  }
}

template <class A>
A unary_grad_scalar(UnaryOp op, A x, A y, A gy, double s) {
  switch (op) {
    case UnaryOp::neg:
      return -gy;
    case UnaryOp::exp:
      return gy * y;
    case UnaryOp::log:
      return gy / x;
    case UnaryOp::sqrt:
      return gy * A(0.5) / y;
    case UnaryOp::rsqrt:
      return gy * A(-0.5) * y * y * y;
    case UnaryOp::tanh:
      return gy * (A(1) - y * y);
    case UnaryOp::gelu: {
      A u = A(kSqrt2OverPi) * (x + A(kGeluCoeff) * x * x * x);
      A t = std::tanh(u);
      A du = A(kSqrt2OverPi) * (A(1) + A(3 * kGeluCoeff) * x * x);
      return gy * (A(0.5) * (A(1) + t) + A(0.5) * x * (A(1) - t * t) * du);
    }
    case UnaryOp::silu: {
      A sig = A(1) / (A(1) + std::exp(-x));
      return gy * sig * (A(1) + x * (A(1) - sig));
    }
    case UnaryOp::relu:
      return x > A(0) ? gy : A(0);
    case UnaryOp::pow_scalar:
      return gy * A(s) * std::pow(x, A(s - 1));
  }
  return gy;
}

// Vectorised forms over contiguous spans (f32 and f64).
template <class A>
void unary_contiguous(UnaryOp op, const A* x, A* o, int64_t n, double s) {
  using Arr = Eigen::Array<A, Eigen::Dynamic, 1>;
  Eigen::Map<const Arr> xv(x, n);
  Eigen::Map<Arr> ov(o, n);
  switch (op) {
    case UnaryOp::neg:
      ov = -xv;
      break;
    case UnaryOp::exp:
      ov = xv.exp();
      break;
    case UnaryOp::log:
      ov = xv.log();
      break;
    case UnaryOp::sqrt:
      ov = xv.sqrt();
      break;
    case UnaryOp::rsqrt:
      ov = xv.rsqrt();
      break;
    case UnaryOp::tanh:
      ov = xv.tanh();
      break;
    case UnaryOp::gelu:
      ov = A(0.5) * xv * (A(1) + (A(kSqrt2OverPi) * (xv + A(kGeluCoeff) * xv.cube())).tanh());
      break;
    case UnaryOp::silu:
      ov = xv / (A(1) + (-xv).exp());
      break;
    case UnaryOp::relu:
      ov = xv.max(A(0));
      break;
    case UnaryOp::pow_scalar:
      ov = xv.pow(A(s));
      break;
  }
}

template <class A>
void unary_grad_contiguous(UnaryOp op, const A* x, const A* y, const A* gy, A* gx, int64_t n,
                           double s) {
  using Arr = Eigen::Array<A, Eigen::Dynamic, 1>;
  Eigen::Map<const Arr> xv(x, n), gv(gy, n);
  Eigen::Map<Arr> ov(gx, n);
  switch (op) {
    case UnaryOp::gelu: {
      Arr t = (A(kSqrt2OverPi) * (xv + A(kGeluCoeff) * xv.cube())).tanh();
      ov = gv *
           (A(0.5) * (A(1) + t) + A(0.5) * xv * (A(1) - t.square()) *
                                      (A(kSqrt2OverPi) * (A(1) + A(3 * kGeluCoeff) * xv.square())));
      return;
    }
    case UnaryOp::silu: {
      Arr sig = A(1) / (A(1) + (-xv).exp());
      ov = gv * sig * (A(1) + xv * (A(1) - sig));
      return;
    }
    case UnaryOp::tanh: {
      Eigen::Map<const Arr> yv(y, n);
      ov = gv * (A(1) - yv.square());
      return;
    }
    case UnaryOp::exp: {
      Eigen::Map<const Arr> yv(y, n);
      ov = gv * yv;
      return;
    }
    default:
      for (int64_t i = 0; i < n; ++i)
        gx[i] = unary_grad_scalar<A>(op, x[i], y ? y[i] : A(0), gy[i], s);
  }
}

template <class A>
A binary_scalar(BinaryOp op, A a, A b) {
  switch (op) {
    case BinaryOp::add:
      return a + b;
    case BinaryOp::sub:
      return a - b;
    case BinaryOp::mul:
      return a * b;
    case BinaryOp::div:
      return a / b;
  }
  return a;
}

template <class A>
void binary_contiguous(BinaryOp op, const A* a, int64_t sa, const A* b, int64_t sb, A* o,
                       int64_t n) {
  using Arr = Eigen::Array<A, Eigen::Dynamic, 1>;
  Eigen::Map<Arr> ov(o, n);
  if (sa == 1 && sb == 1) {
    Eigen::Map<const Arr> av(a, n), bv(b, n);
    switch (op) {
      case BinaryOp::add:
        ov = av + bv;
        break;
      case BinaryOp::sub:
        ov = av - bv;
        break;
      case BinaryOp::mul:
        ov = av * bv;
        break;
      case BinaryOp::div:
        ov = av / bv;
        break;
    }
  } else if (sa == 1) {  // b is one value along this row
    Eigen::Map<const Arr> av(a, n);
    const A bs = *b;
    switch (op) {
      case BinaryOp::add:
        ov = av + bs;
        break;
      case BinaryOp::sub:
        ov = av - bs;
        break;
      case BinaryOp::mul:
        ov = av * bs;
        break;
      case BinaryOp::div:
        ov = av / bs;
        break;
    }
  } else {  // a is one value along this row
    Eigen::Map<const Arr> bv(b, n);
    const A as = *a;
    switch (op) {
      case BinaryOp::add:
        ov = as + bv;
        break;
      case BinaryOp::sub:
        ov = as - bv;
        break;
      case BinaryOp::mul:
        ov = as * bv;
        break;
      case BinaryOp::div:
        ov = as / bv;
        break;
    }
  }
}

template <class T>
constexpr bool kEigenFast = std::is_same_v<T, float> || std::is_same_v<T, double>;

}  // namespace

void CpuBackend::unary(UnaryOp op, const Tensor& x, const Tensor& out, double scalar) {
  cpu::StridedLoop<2> loop(out.shape(), {out.strides(), x.strides()});
  dispatch_all(x.dtype(), unary_op_name(op), [&]<class T>() {
    using A = acc_type_t<T>;
    const T* xp = static_cast<const T*>(x.data_ptr(unary_op_name(op)));
    T* op_ = static_cast<T*>(out.data_ptr(unary_op_name(op)));
    loop.for_each_row([&](std::array<int64_t, 2> off, int64_t n, std::array<int64_t, 2> st) {
      T* o = op_ + off[0];
      const T* i = xp + off[1];
      if constexpr (kEigenFast<T>) {
        if (st[0] == 1 && st[1] == 1) return unary_contiguous<T>(op, i, o, n, scalar);
      }
      for (int64_t j = 0; j < n; ++j)
        o[j * st[0]] = element::convert<T>(unary_scalar<A>(op, element::load(i + j * st[1]), scalar));
    });
  });
}

void CpuBackend::unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& gy,
                                const Tensor& gx, double scalar) {
  const Tensor& yy = y.defined() ? y : x;  // never read when undefined
  cpu::StridedLoop<4> loop(gx.shape(), {gx.strides(), x.strides(), yy.strides(), gy.strides()});
  const char* name = unary_op_name(op);
  dispatch_floating(x.dtype(), name, [&]<class T>() {
    using A = acc_type_t<T>;
    const T* xp = static_cast<const T*>(x.data_ptr(name));
    const T* yp = static_cast<const T*>(yy.data_ptr(name));
    const T* gp = static_cast<const T*>(gy.data_ptr(name));
    T* op_ = static_cast<T*>(gx.data_ptr(name));
    const bool has_y = y.defined();
    loop.for_each_row([&](std::array<int64_t, 4> off, int64_t n, std::array<int64_t, 4> st) {
      if constexpr (kEigenFast<T>) {
        if (st[0] == 1 && st[1] == 1 && st[2] == 1 && st[3] == 1)
          return unary_grad_contiguous<T>(op, xp + off[1], has_y ? yp + off[2] : nullptr,
                                          gp + off[3], op_ + off[0], n, scalar);
      }
      for (int64_t j = 0; j < n; ++j) {
        A xv = element::load(xp + off[1] + j * st[1]);
        A yv = has_y ? A(element::load(yp + off[2] + j * st[2])) : A(0);
        A gv = element::load(gp + off[3] + j * st[3]);
        op_[off[0] + j * st[0]] = element::convert<T>(unary_grad_scalar<A>(op, xv, yv, gv, scalar));
      }
    });
  });
}

void CpuBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  cpu::StridedLoop<3> loop(out.shape(), {out.strides(), a.strides(), b.strides()});
  const char* name = binary_op_name(op);
  dispatch_all(out.dtype(), name, [&]<class T>() {
    using A = acc_type_t<T>;
    const T* ap = static_cast<const T*>(a.data_ptr(name));
    const T* bp = static_cast<const T*>(b.data_ptr(name));
    T* op_ = static_cast<T*>(out.data_ptr(name));
    loop.for_each_row([&](std::array<int64_t, 3> off, int64_t n, std::array<int64_t, 3> st) {
      T* o = op_ + off[0];
      const T* x = ap + off[1];
      const T* y = bp + off[2];
      if constexpr (kEigenFast<T>) {
        bool a_ok = st[1] == 1 || st[1] == 0, b_ok = st[2] == 1 || st[2] == 0;
        if (st[0] == 1 && a_ok && b_ok && (st[1] == 1 || st[2] == 1))
          return binary_contiguous<T>(op, x, st[1], y, st[2], o, n);
      }
      for (int64_t j = 0; j < n; ++j)
        o[j * st[0]] = element::convert<T>(
            binary_scalar<A>(op, element::load(x + j * st[1]), element::load(y + j * st[2])));
    });
  });
}

void CpuBackend::where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  cpu::StridedLoop<4> loop(out.shape(), {out.strides(), cond.strides(), a.strides(), b.strides()});
  dispatch_all(out.dtype(), "where", [&]<class T>() {
    dispatch_all(cond.dtype(), "where", [&]<class C>() {
      const C* cp = static_cast<const C*>(cond.data_ptr("where"));
      const T* ap = static_cast<const T*>(a.data_ptr("where"));
      const T* bp = static_cast<const T*>(b.data_ptr("where"));
      T* o = static_cast<T*>(out.data_ptr("where"));
      loop.for_each_row([&](std::array<int64_t, 4> off, int64_t n, std::array<int64_t, 4> st) {
        for (int64_t j = 0; j < n; ++j) {
          bool c = element::convert<double>(cp[off[1] + j * st[1]]) != 0.0;
          o[off[0] + j * st[0]] = c ? ap[off[2] + j * st[2]] : bp[off[3] + j * st[3]];
        }
      });
    });
  });
}

}  // namespace tessera
