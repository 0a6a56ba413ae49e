// CPU GEMM on Eigen. Compute-bound except for thin shapes: Eigen's blocked GEBP kernel packs
// panels of both operands into cache-sized blocks and runs a register-tiled micro-kernel, so a
// large f32 product reaches most of the core's FMA peak. An f32 product of 2 to 8 rows in a
// linear layer's layout (decode) takes cpu/thin_gemm.h instead, which reads the weight once.
//
// Operands are mapped in place (Eigen::Map with an outer stride), row- or column-major by which
// of their last two dims has unit stride, so transposed views and transpose flags cost nothing:
// a flag flips the storage order of the map. The bias initialises the output rows, in the pass
// that would otherwise zero them before accumulation.
//
// The GELU epilogue (matmul_gelu) runs on each finished piece while it is still in cache: the
// piece is the pre-activation, and the epilogue is the backend's own unary GELU applied to it,
// so a fused result is bit-identical to matmul followed by gelu. That rests on the element-wise
// GELU giving an element the same bits wherever a vector split puts it, which the plain op
// rests on too (its split follows the thread count); tests/ops/matmul_gelu_test.cpp checks it.
//
// Threads: every GEMM runs on Eigen's single-threaded path, and Tessera splits the work into
// tasks itself: the batch, and within each product the larger of M and N into pieces of about
// kPieceWidth rows or columns (each piece repacks the other operand, a small cost at that
// width). Threads take pieces dynamically. Measured against Eigen's own threading (which
// splits one product between threads that then wait on each other's packed panels at every
// block), this runs the GPT-2 shapes 10-25% faster on an idle 2-core machine and the head's
// [256 x 768] x [768 x 50304] about 2x faster; and on a loaded machine a descheduled thread no
// longer stalls its partner mid-product, since the other thread simply takes more pieces. The
// pieces depend only on the shape, and a piece's result does not depend on which thread runs
// it, so the bits do not depend on the thread count either.

#include <omp.h>

#include <Eigen/Core>
#include <functional>

#include "tessera/core/cpu/cpu_backend.h"
#include "tessera/core/cpu/parallel.h"
#include "tessera/core/cpu/thin_gemm.h"

namespace tessera {

namespace {

// Rows or columns of the output per piece: wide enough that repacking the other operand for
// each piece stays a few percent of the piece's FLOPs (2 * width per packed element).
constexpr int64_t kPieceWidth = 256;
// Total work (M*N*K multiply-adds) below which a GEMM runs on one thread: a few microseconds
// of FMAs, comparable to starting a parallel region. It is also below Eigen's own threshold
// for threading (100000), so that path stays single-threaded and thread-count independent.
constexpr int64_t kMinParallelWork = int64_t(1) << 16;
// Pieces are at least this wide and start at multiples of it (whole AVX-512 vectors of f32).
constexpr int64_t kPieceAlign = 16;

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

// Offset of element (r, c) of op(x).
int64_t at(const Operand& o, int64_t r, int64_t c) {
  return o.row_major ? r * o.ld + c : c * o.ld + r;
}

template <class T, int Order>
using ConstMap = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Order>,
                            Eigen::Unaligned, Eigen::OuterStride<>>;
template <class T>
using OutMap = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>,
                          Eigen::Unaligned, Eigen::OuterStride<>>;

struct Dims {
  int64_t batch, m, n, k;
};

// How one product is cut: along N (each piece reads all of op(a) and a column block of op(b))
// when N >= M, else along M. The cut depends on the shape only.
struct Split {
  bool along_n;
  int64_t len;     // the size of the dimension cut
  int64_t pieces;  // per product

  explicit Split(const Dims& d) : along_n(d.n >= d.m), len(along_n ? d.n : d.m) {
    const int64_t work = d.m * d.n * d.k;
    pieces = (len + kPieceWidth - 1) / kPieceWidth;
    pieces += pieces % 2;  // an even count keeps two threads balanced on the common widths
    // Every product worth threading gets at least two pieces (so it never runs alone on
    // Eigen's threaded path), none narrower than kPieceAlign.
    pieces = std::min(pieces, std::max<int64_t>(1, work / (kMinParallelWork / 2)));
    pieces = std::max<int64_t>(1, std::min(pieces, len / kPieceAlign));
  }

  // Start of piece p; piece p covers [begin(p), begin(p + 1)).
  int64_t begin(int64_t p) const {
    return p >= pieces ? len : len * p / pieces / kPieceAlign * kPieceAlign;
  }
};

// Runs on each finished piece of the output: product i, rows [m0, m1), columns [n0, n1).
using PieceEpilogue =
    std::function<void(int64_t i, int64_t m0, int64_t m1, int64_t n0, int64_t n1)>;

template <class T, int OrderA, int OrderB>
void gemm_batch(const Operand& a, const Operand& b, const T* bias, T* out, const Dims& d,
                const MatmulArgs& args, const PieceEpilogue* epilogue) {
  const T alpha = T(args.alpha), beta = T(args.beta);
  const Split split(d);
  // Task t: product t / pieces, piece t % pieces.
  auto task = [&](int64_t t) {
    const int64_t i = t / split.pieces, p = t % split.pieces;
    const int64_t lo = split.begin(p), hi = split.begin(p + 1);
    const int64_t m0 = split.along_n ? 0 : lo, m1 = split.along_n ? d.m : hi;
    const int64_t n0 = split.along_n ? lo : 0, n1 = split.along_n ? hi : d.n;
    const int64_t rows = m1 - m0, cols = n1 - n0;
    ConstMap<T, OrderA> am(static_cast<const T*>(a.data) + i * a.batch_stride + at(a, m0, 0), rows,
                           d.k, Eigen::OuterStride<>(a.ld));
    ConstMap<T, OrderB> bm(static_cast<const T*>(b.data) + i * b.batch_stride + at(b, 0, n0), d.k,
                           cols, Eigen::OuterStride<>(b.ld));
    OutMap<T> om(out + i * d.m * d.n + m0 * d.n + n0, rows, cols, Eigen::OuterStride<>(d.n));
    if (beta == T(0) && bias == nullptr) {
      om.noalias() = alpha * am * bm;
    } else {
      using Row = Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>>;
      if (beta == T(0)) {
        om.rowwise() = Row(bias + n0, cols);
      } else {
        if (beta != T(1)) om *= beta;
        if (bias != nullptr) om.rowwise() += Row(bias + n0, cols);
      }
      om.noalias() += alpha * am * bm;
    }
    if (epilogue != nullptr) (*epilogue)(i, m0, m1, n0, n1);
  };
  const int64_t tasks = d.batch * split.pieces;
  if (d.batch * d.m * d.n * d.k >= kMinParallelWork && num_threads() > 1 && !omp_in_parallel()) {
    // Inside the region Eigen sees a team of several threads and stays single-threaded.
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; ++t) task(t);
  } else {
    for (int64_t t = 0; t < tasks; ++t) task(t);
  }
}

template <class T>
void gemm_dispatch(const Operand& a, const Operand& b, const T* bias, T* out, const Dims& d,
                   const MatmulArgs& args, const PieceEpilogue* epilogue) {
  constexpr int R = Eigen::RowMajor, C = Eigen::ColMajor;
  if (a.row_major) {
    if (b.row_major) return gemm_batch<T, R, R>(a, b, bias, out, d, args, epilogue);
    return gemm_batch<T, R, C>(a, b, bias, out, d, args, epilogue);
  }
  if (b.row_major) return gemm_batch<T, C, R>(a, b, bias, out, d, args, epilogue);
  gemm_batch<T, C, C>(a, b, bias, out, d, args, epilogue);
}

void gemm(const char* name, const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out,
          const MatmulArgs& args, const PieceEpilogue* epilogue) {
  TESSERA_ASSERT(a.dtype() == out.dtype() && b.dtype() == out.dtype(), name, " operands ",
                 a.describe(), " and ", b.describe(), " differ in dtype from out ", out.describe());
  Dims d{out.size(0), out.size(1), out.size(2), args.trans_a ? a.size(1) : a.size(2)};
  Operand oa = operand(a, args.trans_a, name), ob = operand(b, args.trans_b, name);
  // A linear layer's forward on a few rows (decode): the thin path (cpu/thin_gemm.h) reads the
  // weight once instead of packing it. One row stays on Eigen's GEMV, which reads as fast.
  if (out.dtype() == DType::f32 && d.m >= 2 && d.m <= cpu::kThinGemmRows && oa.row_major &&
      !ob.row_major && args.alpha == 1.0f && args.beta == 0.0f && cpu::thin_gemm_enabled()) {
    const float* bias_data = bias.defined() ? bias.data<float>(name) : nullptr;
    float* o = out.data<float>(name);
    auto product = [&](int64_t i) {
      const std::function<void(int64_t, int64_t)> piece = [&](int64_t n0, int64_t n1) {
        (*epilogue)(i, 0, d.m, n0, n1);
      };
      cpu::thin_gemm(static_cast<const float*>(oa.data) + i * oa.batch_stride, oa.ld,
                     static_cast<const float*>(ob.data) + i * ob.batch_stride, ob.ld, bias_data,
                     o + i * d.m * d.n, d.n, d.m, d.n, d.k, epilogue != nullptr ? &piece : nullptr);
    };
    // A batch of products (attention's heads) shares the threads product by product; one
    // product splits its columns between them (inside a parallel region thin_gemm runs alone).
    if (d.batch > 1 && d.batch * d.m * d.n * d.k >= kMinParallelWork && num_threads() > 1 &&
        !omp_in_parallel()) {
#pragma omp parallel for schedule(dynamic, 1)
      for (int64_t i = 0; i < d.batch; ++i) product(i);
    } else {
      for (int64_t i = 0; i < d.batch; ++i) product(i);
    }
    return;
  }
  switch (out.dtype()) {
    case DType::f32:
      return gemm_dispatch<float>(oa, ob, bias.defined() ? bias.data<float>(name) : nullptr,
                                  out.data<float>(name), d, args, epilogue);
    case DType::f64:
      return gemm_dispatch<double>(oa, ob, bias.defined() ? bias.data<double>(name) : nullptr,
                                   out.data<double>(name), d, args, epilogue);
    default:
      detail::throw_error(name, ": the CPU GEMM computes in f32 or f64, got ", out.describe(),
                          " (the front end converts 16-bit operands to f32)");
  }
}

}  // namespace

void CpuBackend::matmul(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out,
                        const MatmulArgs& args) {
  gemm("matmul", a, b, bias, out, args, nullptr);
}

void CpuBackend::matmul_gelu(const Tensor& a, const Tensor& b, const Tensor& bias,
                             const Tensor& pre, const Tensor& out, const MatmulArgs& args) {
  TESSERA_ASSERT(pre.dtype() == out.dtype() && pre.shape() == out.shape() && pre.is_contiguous() &&
                     out.is_contiguous() && args.beta == 0.0f,
                 "matmul_gelu: pre ", pre.describe(), " and out ", out.describe(),
                 " must be contiguous of one shape and dtype, with beta = 0");
  const int64_t m = out.size(1), n = out.size(2);
  // Each piece's rows as [rows, cols] views with row stride n, through the element-wise GELU.
  const PieceEpilogue gelu = [&](int64_t i, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
    const Shape shape{m1 - m0, n1 - n0};
    const Strides strides{n, 1};
    const int64_t offset = i * m * n + m0 * n + n0;
    unary(UnaryOp::gelu, Tensor(pre.storage(), shape, strides, pre.offset() + offset, pre.dtype()),
          Tensor(out.storage(), shape, strides, out.offset() + offset, out.dtype()), 0.0);
  };
  gemm("matmul_gelu", a, b, bias, pre, args, &gelu);
}

}  // namespace tessera
