// Elementwise kernels: unary math, fused activation backward, broadcasting binary ops, where.
// Memory-bound: every element is read and written once, so the goal is full DRAM bandwidth.
// When every operand is one contiguous, 16-byte-aligned run, each thread moves 16-byte vectors
// in a grid-stride loop (ragged tail elements after the last whole vector go one by one);
// otherwise a strided kernel maps each linear index to per-operand offsets over the coalesced
// shape (32-bit index math when the element count allows). bf16/f16 compute in float and
// round to nearest even on store, as the CPU backend does; GELU is the tanh approximation.

#include "tessera/cuda/kernels/elementwise.h"

#include <type_traits>

#include "tessera/cuda/kernels/gelu.h"
#include "tessera/cuda/kernels/strided.h"
#include "tessera/cuda/kernels/vector_io.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {
namespace {

constexpr int kThreads = 256;

// ---- per-element math, in the compute type A ----
template <UnaryOp kOp, class A>
__device__ __forceinline__ A unary_value(A x, A s) {
  if constexpr (kOp == UnaryOp::neg) {
    return -x;
  } else if constexpr (kOp == UnaryOp::relu) {
    return x > A(0) ? x : A(0);
  } else if constexpr (kOp == UnaryOp::exp) {
    return math_exp(x);
  } else if constexpr (kOp == UnaryOp::log) {
    return math_log(x);
  } else if constexpr (kOp == UnaryOp::sqrt) {
    return math_sqrt(x);
  } else if constexpr (kOp == UnaryOp::rsqrt) {
    return A(1) / math_sqrt(x);
  } else if constexpr (kOp == UnaryOp::tanh) {
    return math_tanh(x);
  } else if constexpr (kOp == UnaryOp::gelu) {
    return gelu_tanh(x);
  } else if constexpr (kOp == UnaryOp::silu) {
    return x / (A(1) + math_exp(-x));
  } else {
    static_assert(kOp == UnaryOp::pow_scalar);
    return math_pow(x, s);
  }
}

// d op(x)/dx * gy; y = op(x) where the derivative reads it.
template <UnaryOp kOp, class A>
__device__ __forceinline__ A unary_grad(A x, A y, A gy, A s) {
  if constexpr (kOp == UnaryOp::neg) {
    return -gy;
  } else if constexpr (kOp == UnaryOp::exp) {
    return gy * y;
  } else if constexpr (kOp == UnaryOp::log) {
    return gy / x;
  } else if constexpr (kOp == UnaryOp::sqrt) {
    return gy * A(0.5) / y;
  } else if constexpr (kOp == UnaryOp::rsqrt) {
    return gy * A(-0.5) * y * y * y;
  } else if constexpr (kOp == UnaryOp::tanh) {
    return gy * (A(1) - y * y);
  } else if constexpr (kOp == UnaryOp::gelu) {
    const A u = A(kGeluSqrt2OverPi) * (x + A(kGeluCoeff) * x * x * x);
    const A t = math_tanh(u);
    const A du = A(kGeluSqrt2OverPi) * (A(1) + A(3 * kGeluCoeff) * x * x);
    return gy * (A(0.5) * (A(1) + t) + A(0.5) * x * (A(1) - t * t) * du);
  } else if constexpr (kOp == UnaryOp::silu) {
    const A sig = A(1) / (A(1) + math_exp(-x));
    return gy * sig * (A(1) + x * (A(1) - sig));
  } else if constexpr (kOp == UnaryOp::relu) {
    return x > A(0) ? gy : A(0);
  } else {
    static_assert(kOp == UnaryOp::pow_scalar);
    return gy * s * math_pow(x, s - A(1));
  }
}

template <BinaryOp kOp, class A>
__device__ __forceinline__ A binary_value(A a, A b) {
  if constexpr (kOp == BinaryOp::add) {
    return a + b;
  } else if constexpr (kOp == BinaryOp::sub) {
    return a - b;
  } else if constexpr (kOp == BinaryOp::mul) {
    return a * b;
  } else {
    static_assert(kOp == BinaryOp::div);
    return a / b;
  }
}

__device__ __forceinline__ int64_t global_thread() {
  return int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_stride() {
  return int64_t(gridDim.x) * blockDim.x;
}

// ---- unary ----
// No __restrict__: out may be x (in place). Each element is read before it is written by the
// same thread, so aliasing is safe.
template <UnaryOp kOp, class T>
__global__ void unary_vec_kernel(const T* x, T* out, int64_t n, acc_t<T> s) {
  constexpr int W = kVecWidth<T>;
  const int64_t n_vec = n / W;
  for (int64_t v = global_thread(); v < n_vec; v += grid_stride()) {
    acc_t<T> a[W];
    load_vec(x + v * W, a);
    for (int j = 0; j < W; ++j) a[j] = unary_value<kOp>(a[j], s);
    store_vec(out + v * W, a);
  }
  for (int64_t i = n_vec * W + global_thread(); i < n; i += grid_stride())
    out[i] = convert<T>(unary_value<kOp>(load_acc(x + i), s));
}

template <UnaryOp kOp, class T, class Index>
__global__ void unary_strided_kernel(const T* x, T* out, StridedOffsets<2> idx, Index n,
                                     acc_t<T> s) {
  for (Index i = Index(global_thread()); i < n; i += Index(grid_stride())) {
    int64_t off[2];
    idx.offsets(i, off);
    out[off[0]] = convert<T>(unary_value<kOp>(load_acc(x + off[1]), s));
  }
}

template <UnaryOp kOp, class T>
__global__ void unary_grad_vec_kernel(const T* x, const T* y, const T* gy, T* gx, int64_t n,
                                      acc_t<T> s) {
  constexpr int W = kVecWidth<T>;
  const int64_t n_vec = n / W;
  for (int64_t v = global_thread(); v < n_vec; v += grid_stride()) {
    acc_t<T> xa[W], ya[W], ga[W];
    load_vec(x + v * W, xa);
    if (y != nullptr) {
      load_vec(y + v * W, ya);
    } else {
      for (int j = 0; j < W; ++j) ya[j] = acc_t<T>(0);
    }
    load_vec(gy + v * W, ga);
    for (int j = 0; j < W; ++j) ga[j] = unary_grad<kOp>(xa[j], ya[j], ga[j], s);
    store_vec(gx + v * W, ga);
  }
  for (int64_t i = n_vec * W + global_thread(); i < n; i += grid_stride()) {
    const acc_t<T> yv = y != nullptr ? load_acc(y + i) : acc_t<T>(0);
    gx[i] = convert<T>(unary_grad<kOp>(load_acc(x + i), yv, load_acc(gy + i), s));
  }
}

// Operands: gx, x, y, gy.
template <UnaryOp kOp, class T, class Index>
__global__ void unary_grad_strided_kernel(const T* x, const T* y, const T* gy, T* gx,
                                          StridedOffsets<4> idx, Index n, acc_t<T> s) {
  for (Index i = Index(global_thread()); i < n; i += Index(grid_stride())) {
    int64_t off[4];
    idx.offsets(i, off);
    const acc_t<T> yv = y != nullptr ? load_acc(y + off[2]) : acc_t<T>(0);
    gx[off[0]] = convert<T>(unary_grad<kOp>(load_acc(x + off[1]), yv, load_acc(gy + off[3]), s));
  }
}

// ---- binary ----
template <BinaryOp kOp, class T>
__global__ void binary_vec_kernel(const T* a, const T* b, T* out, int64_t n) {
  constexpr int W = kVecWidth<T>;
  const int64_t n_vec = n / W;
  for (int64_t v = global_thread(); v < n_vec; v += grid_stride()) {
    acc_t<T> av[W], bv[W];
    load_vec(a + v * W, av);
    load_vec(b + v * W, bv);
    for (int j = 0; j < W; ++j) av[j] = binary_value<kOp>(av[j], bv[j]);
    store_vec(out + v * W, av);
  }
  for (int64_t i = n_vec * W + global_thread(); i < n; i += grid_stride())
    out[i] = convert<T>(binary_value<kOp>(load_acc(a + i), load_acc(b + i)));
}

// Operands: out, a, b.
template <BinaryOp kOp, class T, class Index>
__global__ void binary_strided_kernel(const T* a, const T* b, T* out, StridedOffsets<3> idx,
                                      Index n) {
  for (Index i = Index(global_thread()); i < n; i += Index(grid_stride())) {
    int64_t off[3];
    idx.offsets(i, off);
    out[off[0]] = convert<T>(binary_value<kOp>(load_acc(a + off[1]), load_acc(b + off[2])));
  }
}

// ---- where: operands out, cond, a, b ----
template <class T, class C, class Index>
__global__ void where_kernel(const C* cond, const T* a, const T* b, T* out, StridedOffsets<4> idx,
                             Index n) {
  for (Index i = Index(global_thread()); i < n; i += Index(grid_stride())) {
    int64_t off[4];
    idx.offsets(i, off);
    out[off[0]] = load_acc(cond + off[1]) != acc_t<C>(0) ? a[off[2]] : b[off[3]];
  }
}

// ---- host side ----
template <class F>
void dispatch_unary(UnaryOp op, F&& f) {
  switch (op) {
    case UnaryOp::neg:
      return f.template operator()<UnaryOp::neg>();
    case UnaryOp::exp:
      return f.template operator()<UnaryOp::exp>();
    case UnaryOp::log:
      return f.template operator()<UnaryOp::log>();
    case UnaryOp::sqrt:
      return f.template operator()<UnaryOp::sqrt>();
    case UnaryOp::rsqrt:
      return f.template operator()<UnaryOp::rsqrt>();
    case UnaryOp::tanh:
      return f.template operator()<UnaryOp::tanh>();
    case UnaryOp::gelu:
      return f.template operator()<UnaryOp::gelu>();
    case UnaryOp::silu:
      return f.template operator()<UnaryOp::silu>();
    case UnaryOp::relu:
      return f.template operator()<UnaryOp::relu>();
    case UnaryOp::pow_scalar:
      return f.template operator()<UnaryOp::pow_scalar>();
  }
}

template <class F>
void dispatch_binary(BinaryOp op, F&& f) {
  switch (op) {
    case BinaryOp::add:
      return f.template operator()<BinaryOp::add>();
    case BinaryOp::sub:
      return f.template operator()<BinaryOp::sub>();
    case BinaryOp::mul:
      return f.template operator()<BinaryOp::mul>();
    case BinaryOp::div:
      return f.template operator()<BinaryOp::div>();
  }
}

LaunchConfig config_for(int64_t n, cudaStream_t stream, const char* name) {
  return LaunchConfig{dim3(grid_blocks(n, kThreads)), dim3(kThreads), 0, stream, name};
}

void check_same_dtype(const char* op, const Tensor& out, std::initializer_list<const Tensor*> ins) {
  for (const Tensor* t : ins)
    TESSERA_CHECK(t->dtype() == out.dtype() && t->shape() == out.shape(), "cuda ", op,
                  ": every operand must be a view of out's shape and dtype, got ", t->describe(),
                  " for out ", out.describe());
}

}  // namespace

void unary(UnaryOp op, const Tensor& x, const Tensor& out, double scalar, cudaStream_t stream) {
  const char* name = unary_op_name(op);
  check_same_dtype(name, out, {&x});
  const int64_t n = out.numel();
  if (n == 0) return;
  const Strides* strides[2] = {&out.strides(), &x.strides()};
  const StridedOffsets<2> idx = make_strided<2>(out.shape(), strides);
  dispatch_device(out.dtype(), [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    using A = acc_t<T>;
    if constexpr (std::is_integral_v<T>) {
      TESSERA_CHECK(op == UnaryOp::neg || op == UnaryOp::relu, "cuda ", name,
                    ": integer tensors support only neg and relu, got ", x.describe());
    }
    dispatch_unary(op, [&]<UnaryOp kOp>() {
      if constexpr (!std::is_integral_v<T> || kOp == UnaryOp::neg || kOp == UnaryOp::relu) {
        const T* xp = typed<const T>(x, name);
        T* op_ = typed<T>(out, name);
        if (idx.all_contiguous() && is_aligned16(xp) && is_aligned16(op_)) {
          launch(unary_vec_kernel<kOp, T>, config_for(n / kVecWidth<T> + 1, stream, name), xp, op_,
                 n, A(scalar));
        } else if (fits_int32(n)) {
          launch(unary_strided_kernel<kOp, T, uint32_t>, config_for(n, stream, name), xp, op_, idx,
                 uint32_t(n), A(scalar));
        } else {
          launch(unary_strided_kernel<kOp, T, int64_t>, config_for(n, stream, name), xp, op_, idx,
                 n, A(scalar));
        }
      }
    });
  });
}

void unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& gy,
                    const Tensor& gx, double scalar, cudaStream_t stream) {
  const char* name = unary_op_name(op);
  const bool has_y = y.defined();
  check_same_dtype(name, gx, {&x, &gy});
  if (has_y) check_same_dtype(name, gx, {&y});
  TESSERA_CHECK(is_floating(gx.dtype()), "cuda ", name, " backward: needs a floating dtype, got ",
                gx.describe());
  const bool needs_y =
      op == UnaryOp::exp || op == UnaryOp::tanh || op == UnaryOp::sqrt || op == UnaryOp::rsqrt;
  TESSERA_CHECK(has_y || !needs_y, "cuda ", name, " backward: needs y = ", name,
                "(x), got an undefined tensor");
  const int64_t n = gx.numel();
  if (n == 0) return;
  const Tensor& yy = has_y ? y : x;  // strides only; never read when y is undefined
  const Strides* strides[4] = {&gx.strides(), &x.strides(), &yy.strides(), &gy.strides()};
  const StridedOffsets<4> idx = make_strided<4>(gx.shape(), strides);
  dispatch_device(gx.dtype(), [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    if constexpr (!std::is_integral_v<T>) {
      using A = acc_t<T>;
      dispatch_unary(op, [&]<UnaryOp kOp>() {
        const T* xp = typed<const T>(x, name);
        const T* yp = has_y ? typed<const T>(y, name) : nullptr;
        const T* gp = typed<const T>(gy, name);
        T* o = typed<T>(gx, name);
        const bool aligned =
            is_aligned16(xp) && is_aligned16(yp) && is_aligned16(gp) && is_aligned16(o);
        if (idx.all_contiguous() && aligned) {
          launch(unary_grad_vec_kernel<kOp, T>, config_for(n / kVecWidth<T> + 1, stream, name), xp,
                 yp, gp, o, n, A(scalar));
        } else if (fits_int32(n)) {
          launch(unary_grad_strided_kernel<kOp, T, uint32_t>, config_for(n, stream, name), xp, yp,
                 gp, o, idx, uint32_t(n), A(scalar));
        } else {
          launch(unary_grad_strided_kernel<kOp, T, int64_t>, config_for(n, stream, name), xp, yp,
                 gp, o, idx, n, A(scalar));
        }
      });
    }
  });
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, cudaStream_t stream) {
  const char* name = binary_op_name(op);
  check_same_dtype(name, out, {&a, &b});
  const int64_t n = out.numel();
  if (n == 0) return;
  const Strides* strides[3] = {&out.strides(), &a.strides(), &b.strides()};
  const StridedOffsets<3> idx = make_strided<3>(out.shape(), strides);
  dispatch_device(out.dtype(), [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    dispatch_binary(op, [&]<BinaryOp kOp>() {
      const T* ap = typed<const T>(a, name);
      const T* bp = typed<const T>(b, name);
      T* o = typed<T>(out, name);
      if (idx.all_contiguous() && is_aligned16(ap) && is_aligned16(bp) && is_aligned16(o)) {
        launch(binary_vec_kernel<kOp, T>, config_for(n / kVecWidth<T> + 1, stream, name), ap, bp, o,
               n);
      } else if (fits_int32(n)) {
        launch(binary_strided_kernel<kOp, T, uint32_t>, config_for(n, stream, name), ap, bp, o, idx,
               uint32_t(n));
      } else {
        launch(binary_strided_kernel<kOp, T, int64_t>, config_for(n, stream, name), ap, bp, o, idx,
               n);
      }
    });
  });
}

void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out,
           cudaStream_t stream) {
  check_same_dtype("where", out, {&a, &b});
  TESSERA_CHECK(cond.shape() == out.shape(), "cuda where: cond must be a view of out's shape, got ",
                cond.describe(), " for out ", out.describe());
  const int64_t n = out.numel();
  if (n == 0) return;
  const Strides* strides[4] = {&out.strides(), &cond.strides(), &a.strides(), &b.strides()};
  const StridedOffsets<4> idx = make_strided<4>(out.shape(), strides);
  dispatch_device(out.dtype(), [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    dispatch_device(cond.dtype(), [&](auto* cond_tag) {
      using C = std::remove_pointer_t<decltype(cond_tag)>;
      const C* cp = typed<const C>(cond, "where");
      const T* ap = typed<const T>(a, "where");
      const T* bp = typed<const T>(b, "where");
      T* o = typed<T>(out, "where");
      if (fits_int32(n)) {
        launch(where_kernel<T, C, uint32_t>, config_for(n, stream, "where"), cp, ap, bp, o, idx,
               uint32_t(n));
      } else {
        launch(where_kernel<T, C, int64_t>, config_for(n, stream, "where"), cp, ap, bp, o, idx, n);
      }
    });
  });
}

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
