// CPU GEMM on Eigen. Compute-bound except for thin shapes: Eigen's blocked GEBP kernel packs
// panels of both operands into cache-sized blocks and runs a register-tiled micro-kernel, so a
// large f32 product reaches most of the core's FMA peak.
//
// Operands are mapped in place (Eigen::Map with an outer stride), row- or column-major by which
// of their last two dims has unit stride, so transposed views and transpose flags cost nothing:
// a flag flips the storage order of the map. One large GEMM runs on Eigen's own OpenMP threads;
// a batch of small GEMMs is split over the batch instead (Eigen stays single-threaded inside an
// OpenMP region). The bias initialises the output rows, in the pass that would otherwise zero
// them before accumulation.

#include <Eigen/Core>

#include "tessera/core/cpu/cpu_backend.h"
#include "tessera/core/cpu/parallel.h"

namespace tessera {

namespace {

// Per-GEMM work (M*N*K multiply-adds) below which Eigen would use few threads anyway, so
// running whole GEMMs of a batch in parallel keeps more cores busy.
constexpr int64_t kSmallGemm = int64_t(1) << 21;
// Total work below which a batch runs on one thread: a few microseconds of FMAs, comparable to
// starting a parallel region.
constexpr int64_t kMinParallelWork = int64_t(1) << 16;

// op(x) of one [batch, r, c] operand as the GEMM sees it.
struct Operand {
  const void* data;
  int64_t batch_stride;
  int64_t ld;      // the outer stride of the map
  bool row_major;  // of op(x), after applying the transpose flag
};

Operand operand(const Tensor& t, bool trans, const char* name) {
  Operand o;
  o.data = t.data_ptr(name);
  o.batch_stride = t.stride(0);
  bool stored_row_major = t.stride(2) == 1;
  o.ld = stored_row_major ? t.stride(1) : t.stride(2);
  o.row_major = stored_row_major != trans;
  return o;
}

template <class T, int Order>
using ConstMap = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Order>,
                            Eigen::Unaligned, Eigen::OuterStride<>>;
template <class T>
using OutMap = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;

struct Dims {
  int64_t batch, m, n, k;
};

template <class T, int OrderA, int OrderB>
void gemm_batch(const Operand& a, const Operand& b, const T* bias, T* out, const Dims& d,
                const MatmulArgs& args) {
  const T alpha = T(args.alpha), beta = T(args.beta);
  auto one = [&](int64_t i) {
    ConstMap<T, OrderA> am(static_cast<const T*>(a.data) + i * a.batch_stride, d.m, d.k,
                           Eigen::OuterStride<>(a.ld));
    ConstMap<T, OrderB> bm(static_cast<const T*>(b.data) + i * b.batch_stride, d.k, d.n,
                           Eigen::OuterStride<>(b.ld));
    OutMap<T> om(out + i * d.m * d.n, d.m, d.n);
    if (beta == T(0) && bias == nullptr) {
      om.noalias() = alpha * am * bm;
      return;
    }
    if (beta == T(0)) {
      om.rowwise() = Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>>(bias, d.n);
    } else {
      if (beta != T(1)) om *= beta;
      if (bias != nullptr)
        om.rowwise() += Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>>(bias, d.n);
    }
    om.noalias() += alpha * am * bm;
  };
  const int64_t work = d.m * d.n * d.k;
  const bool batch_parallel = d.batch > 1 && d.batch * work >= kMinParallelWork &&
                              (d.batch >= num_threads() || work < kSmallGemm);
  if (batch_parallel) {
    cpu::parallel_for(d.batch, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) one(i);
    });
  } else {
    for (int64_t i = 0; i < d.batch; ++i) one(i);
  }
}

template <class T>
void gemm_dispatch(const Operand& a, const Operand& b, const T* bias, T* out, const Dims& d,
                   const MatmulArgs& args) {
  constexpr int R = Eigen::RowMajor, C = Eigen::ColMajor;
  if (a.row_major) {
    if (b.row_major) return gemm_batch<T, R, R>(a, b, bias, out, d, args);
    return gemm_batch<T, R, C>(a, b, bias, out, d, args);
  }
  if (b.row_major) return gemm_batch<T, C, R>(a, b, bias, out, d, args);
  gemm_batch<T, C, C>(a, b, bias, out, d, args);
}

}  // namespace

void CpuBackend::matmul(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out,
                        const MatmulArgs& args) {
  const char* name = "matmul";
  TESSERA_ASSERT(a.dtype() == out.dtype() && b.dtype() == out.dtype(), "matmul operands ",
                 a.describe(), " and ", b.describe(), " differ in dtype from out ", out.describe());
  Dims d{out.size(0), out.size(1), out.size(2), args.trans_a ? a.size(1) : a.size(2)};
  Operand oa = operand(a, args.trans_a, name), ob = operand(b, args.trans_b, name);
  switch (out.dtype()) {
    case DType::f32:
      return gemm_dispatch<float>(oa, ob, bias.defined() ? bias.data<float>(name) : nullptr,
                                  out.data<float>(name), d, args);
    case DType::f64:
      return gemm_dispatch<double>(oa, ob, bias.defined() ? bias.data<double>(name) : nullptr,
                                   out.data<double>(name), d, args);
    default:
      detail::throw_error(name, ": the CPU GEMM computes in f32 or f64, got ", out.describe(),
                          " (the front end converts 16-bit operands to f32)");
  }
}

}  // namespace tessera
