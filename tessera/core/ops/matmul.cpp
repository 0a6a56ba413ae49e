// Matmul front end: validation, dtype promotion and a layout plan that hands the backend
// strided views instead of copies.
//
// The plan, in order of preference:
//  - b has no batch (or a broadcast one) and a's [..., M, K] flattens as a view: one GEMM of
//    (batch*M) x K x N, which is every linear layer on [B, T, C] activations;
//  - otherwise batch dims that fold into one stride (for a, b and out alike) become the
//    backend's batch, with stride 0 where an operand broadcasts; any outer batch dims that do
//    not fold are looped over here, one backend call each;
//  - an operand is copied only to convert a 16-bit dtype to f32 for the CPU's GEMM (a device's
//    GEMM takes bf16 and f16 as they are, accumulating in f32), or when neither of its last
//    two dims has unit stride.

#include "tessera/core/ops/matmul.h"

#include <optional>

#include "tessera/core/detail/op_scope.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/elementwise.h"
#include "tessera/core/ops/movement.h"
#include "tessera/core/ops/detail/op_utils.h"

namespace tessera::ops {

using detail::backend;
using detail::check_defined;

namespace {

// A [..., r, c] operand the backend can map in place: unit stride in one of the last two dims
// (a size-1 dim counts as unit) and a leading dimension covering the other, as BLAS requires.
bool gemm_ready(const Tensor& t) {
  int64_t r = t.size(-2), c = t.size(-1), sr = t.stride(-2), sc = t.stride(-1);
  bool row_major = (c <= 1 || sc == 1) && (r <= 1 || sr >= std::max<int64_t>(c, 1));
  bool col_major = (r <= 1 || sr == 1) && (c <= 1 || sc >= std::max<int64_t>(r, 1));
  return row_major || col_major;
}

// The last-two-dim strides the backend should see for a gemm_ready matrix: size-1 dims get
// canonical strides so that the layout is read off one stride alone.
std::pair<int64_t, int64_t> matrix_strides(int64_t r, int64_t c, int64_t sr, int64_t sc) {
  if ((c <= 1 || sc == 1) && (r <= 1 || sr >= std::max<int64_t>(c, 1)))
    return {r <= 1 ? std::max<int64_t>(c, 1) : sr, 1};
  return {1, c <= 1 ? std::max<int64_t>(r, 1) : sc};
}

// Strides of t's batch dims aligned to the broadcast batch shape (0 where t broadcasts), with
// the batch dims of size 1 dropped.
Strides batch_strides(const Tensor& t, const Shape& batch) {
  int nb = batch.size(), lead = nb - (t.dim() - 2);
  Strides st;
  for (int i = 0; i < nb; ++i) {
    if (batch[i] == 1) continue;
    int j = i - lead;
    st.push_back(j >= 0 && t.shape()[j] != 1 ? t.strides()[j] : 0);
  }
  return st;
}

// The stride of dims (sizes, strides) merged into one, or nothing when they do not merge as a
// view. Size-1 dims are skipped; if every dim has size 1 the result is `fallback`.
std::optional<int64_t> merged_stride(const Shape& sizes, const Strides& strides, int64_t fallback) {
  std::optional<int64_t> inner;
  int64_t expect = 0;
  for (int i = sizes.size() - 1; i >= 0; --i) {
    if (sizes[i] == 1) continue;
    if (inner && strides[i] != expect) return std::nullopt;
    if (!inner) inner = strides[i];
    expect = strides[i] * sizes[i];
  }
  return inner ? *inner : fallback;
}

struct Problem {
  Tensor a, b, bias;  // in the compute dtype, each gemm_ready
  int64_t m = 0, n = 0, k = 0;
  Shape batch;         // broadcast batch shape
  Shape result_shape;  // batch + [M, N]
  DType dtype;         // of the result
  DType work_dtype;    // the GEMM's: f32 or f64 on the CPU, the result's dtype on a device
  MatmulArgs args;     // transpose flags, alpha and beta
};

// A [count, r, c] view of a gemm_ready t starting at element `offset` (relative to t's first
// element).
Tensor batched_view(const Tensor& t, int64_t count, int64_t batch_stride, int64_t r, int64_t c,
                    int64_t sr, int64_t sc, int64_t offset) {
  auto [msr, msc] = matrix_strides(r, c, sr, sc);
  return Tensor(t.storage(), Shape{count, r, c}, Strides{batch_stride, msr, msc},
                t.offset() + offset, t.dtype());
}

// Runs the plan against out (contiguous, compute dtype, shape batch + [m, n]). With gelu_out
// (laid out like out) the backend's GELU epilogue runs too: out receives the pre-activation
// and gelu_out its GELU.
void run_plan(const Problem& p, const Tensor& out, const Tensor& gelu_out = Tensor()) {
  Backend& be = backend(out);
  // One backend call on the [count, m, n] block of the outputs at element `offset`.
  auto call = [&](const Tensor& a, const Tensor& b, int64_t count, int64_t m, int64_t offset) {
    const Shape shape{count, m, p.n};
    const Strides strides{m * p.n, p.n, 1};
    Tensor o(out.storage(), shape, strides, out.offset() + offset, out.dtype());
    if (!gelu_out.defined()) return be.matmul(a, b, p.bias, o, p.args);
    be.matmul_gelu(
        a, b, p.bias, o,
        Tensor(gelu_out.storage(), shape, strides, gelu_out.offset() + offset, gelu_out.dtype()),
        p.args);
  };
  const Tensor &a = p.a, &b = p.b;
  const int64_t ar = a.size(-2), ac = a.size(-1), br = b.size(-2), bc = b.size(-1);
  Shape sizes;  // the batch dims of size > 1
  for (int64_t d : p.batch)
    if (d != 1) sizes.push_back(d);
  Strides sa = batch_strides(a, p.batch), sb = batch_strides(b, p.batch);
  const int nb = sizes.size();
  const int64_t mn = p.m * p.n;

  // One GEMM over (batch*M) rows when b does not vary over the batch.
  bool b_shared = true;
  for (int i = 0; i < nb; ++i) b_shared = b_shared && sb[i] == 0;
  if (nb > 0 && b_shared && !p.args.trans_a && (ac <= 1 || a.stride(-1) == 1)) {
    Shape dims = sizes;
    Strides strides = sa;
    dims.push_back(ar);
    strides.push_back(a.stride(-2));
    std::optional<int64_t> row_stride = merged_stride(dims, strides, ac);
    const int64_t rows = dims.numel();
    if (row_stride && (rows <= 1 || *row_stride >= std::max<int64_t>(ac, 1))) {
      Tensor a2 = batched_view(a, 1, 0, rows, ac, *row_stride, a.stride(-1), 0);
      Tensor b2 = batched_view(b, 1, 0, br, bc, b.stride(-2), b.stride(-1), 0);
      call(a2, b2, 1, rows, 0);
      return;
    }
  }

  // The longest run of inner batch dims that fold into one stride for both operands.
  int g = std::max(nb - 1, 0);
  while (g > 0 && sa[g - 1] == sa[g] * sizes[g] && sb[g - 1] == sb[g] * sizes[g]) --g;
  int64_t inner = 1;
  for (int i = g; i < nb; ++i) inner *= sizes[i];
  int64_t stride_a = nb > 0 ? sa[nb - 1] : 0, stride_b = nb > 0 ? sb[nb - 1] : 0;

  int64_t outer = 1;
  for (int i = 0; i < g; ++i) outer *= sizes[i];
  for (int64_t o = 0; o < outer; ++o) {
    int64_t off_a = 0, off_b = 0, rest = o;
    for (int i = g - 1; i >= 0; --i) {
      int64_t idx = rest % sizes[i];
      rest /= sizes[i];
      off_a += idx * sa[i];
      off_b += idx * sb[i];
    }
    Tensor a3 = batched_view(a, inner, stride_a, ar, ac, a.stride(-2), a.stride(-1), off_a);
    Tensor b3 = batched_view(b, inner, stride_b, br, bc, b.stride(-2), b.stride(-1), off_b);
    call(a3, b3, inner, p.m, o * inner * mn);
  }
}

// The dtype the GEMM's operands and output have. The CPU's GEMM (Eigen) computes in f32 or
// f64, so 16-bit operands become f32 there; a device's GEMM (cuBLASLt, the simulator's SIMT
// kernel) reads bf16 and f16 as they are and accumulates in f32, which gives the same products
// without the conversions.
DType work_dtype(DType dtype, Device device) {
  if (device.type != DeviceType::cpu) return dtype;
  return dtype == DType::f64 ? DType::f64 : DType::f32;
}

Tensor prepare_operand(const Tensor& t, DType dtype) {
  Tensor c = cast(t, dtype);
  return gemm_ready(c) ? c : contiguous(c);
}

const char* flag(bool value) {
  return value ? "true" : "false";
}

// Validates a matmul and lays out its operands.
Problem plan(const char* op, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
             const Tensor& bias, const Tensor& out) {
  check_defined(op, a, "a");
  check_defined(op, b, "b");
  if (bias.defined()) check_defined(op, bias, "bias");
  if (out.defined()) check_defined(op, out, "out");
  detail::check_same_device(op, {&a, &b, &bias, &out});
  TESSERA_CHECK(a.dim() >= 2 && b.dim() >= 2, op, ": both operands must be at least 2-d, got a ",
                a.describe(), " and b ", b.describe());
  // Integer operands are refused rather than promoted: a GEMM over ids is a bug upstream.
  detail::check_floating(op, a, "a");
  detail::check_floating(op, b, "b");
  if (bias.defined()) detail::check_floating(op, bias, "bias");
  if (out.defined()) detail::check_floating(op, out, "out");
  Problem p;
  p.dtype = promote_types(a.dtype(), b.dtype());
  if (bias.defined()) p.dtype = promote_types(p.dtype, bias.dtype());
  if (out.defined()) p.dtype = promote_types(p.dtype, out.dtype());
  p.work_dtype = work_dtype(p.dtype, a.device());
  p.args.trans_a = trans_a;
  p.args.trans_b = trans_b;
  p.m = trans_a ? a.size(-1) : a.size(-2);
  p.k = trans_a ? a.size(-2) : a.size(-1);
  int64_t kb = trans_b ? b.size(-1) : b.size(-2);
  p.n = trans_b ? b.size(-2) : b.size(-1);
  TESSERA_CHECK(p.k == kb, op, ": inner dimensions differ: a ", a.describe(),
                " (trans_a=", flag(trans_a), ") has K=", p.k, " but b ", b.describe(),
                " (trans_b=", flag(trans_b), ") has K=", kb);

  // Batch dims broadcast like numpy, aligned from the right.
  const int na = a.dim() - 2, nbb = b.dim() - 2, nb = std::max(na, nbb);
  Shape batch;
  for (int i = 0; i < nb; ++i) {
    int64_t da = i - (nb - na) >= 0 ? a.shape()[i - (nb - na)] : 1;
    int64_t db = i - (nb - nbb) >= 0 ? b.shape()[i - (nb - nbb)] : 1;
    TESSERA_CHECK(da == db || da == 1 || db == 1, op, ": batch dimensions of a ", a.describe(),
                  " and b ", b.describe(), " do not broadcast");
    batch.push_back(std::max(da, db));
  }
  p.batch = batch;
  p.result_shape = batch;
  p.result_shape.push_back(p.m);
  p.result_shape.push_back(p.n);

  if (bias.defined()) {
    TESSERA_CHECK(bias.dim() == 1 && bias.size(0) == p.n, op, ": bias must have shape [", p.n,
                  "] (N of the product of a ", a.describe(), " and b ", b.describe(), "), got ",
                  bias.describe());
  }
  if (out.defined()) {
    TESSERA_CHECK(out.shape() == p.result_shape, op, ": out ", out.describe(),
                  " must have the result shape ", p.result_shape, " of a ", a.describe(),
                  " (trans_a=", flag(trans_a), ") and b ", b.describe(),
                  " (trans_b=", flag(trans_b), ")");
    TESSERA_CHECK(out.storage() != a.storage() && out.storage() != b.storage(), op, ": out ",
                  out.describe(), " shares storage with an operand");
  }

  if (p.result_shape.numel() > 0 && p.k > 0) {
    p.a = prepare_operand(a, p.work_dtype);
    p.b = prepare_operand(b, p.work_dtype);
  }
  if (bias.defined()) p.bias = contiguous(cast(bias, p.work_dtype));
  return p;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, const Tensor& bias) {
  const OpScope scope("matmul");
  Problem p = plan("matmul", a, b, trans_a, trans_b, bias, Tensor());
  Tensor out = empty(p.result_shape, p.work_dtype, a.device());
  if (out.numel() > 0) {
    if (p.k == 0) {
      // An empty sum: the product is zero, leaving the bias.
      if (p.bias.defined()) {
        copy_(out, p.bias);
      } else {
        zero_(out);
      }
    } else {
      run_plan(p, out);
    }
  }
  return cast(out, p.dtype);
}

MatmulGelu matmul_gelu(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
                       const Tensor& bias) {
  const OpScope scope("matmul_gelu");
  Problem p = plan("matmul_gelu", a, b, trans_a, trans_b, bias, Tensor());
  if (p.dtype != p.work_dtype || p.k == 0 || p.result_shape.numel() == 0) {
    // A 16-bit GEMM on the CPU runs in f32 and its result is rounded: GELU then reads the
    // rounded pre-activation, as gelu(matmul(...)) would. An empty K leaves the bias.
    Tensor pre = matmul(a, b, trans_a, trans_b, bias);
    return {gelu(pre), pre};
  }
  MatmulGelu r{empty(p.result_shape, p.dtype, a.device()),
               empty(p.result_shape, p.dtype, a.device())};
  run_plan(p, r.pre, r.out);
  return r;
}

void matmul_out(const Tensor& out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
                float alpha, float beta) {
  const OpScope scope("matmul_out");
  check_defined("matmul_out", out, "out");
  Problem p = plan("matmul_out", a, b, trans_a, trans_b, Tensor(), out);
  if (out.numel() == 0) return;
  if (p.k == 0) {
    if (beta == 0.0f) {
      zero_(out);
    } else {
      mul_(out, beta);
    }
    return;
  }
  p.args.alpha = alpha;
  p.args.beta = beta;
  const DType wd = p.work_dtype;
  if (out.dtype() == wd && out.is_contiguous()) {
    run_plan(p, out);
    out.storage()->bump_version();
    return;
  }
  // Accumulate in a contiguous buffer of the compute dtype, then write back.
  Tensor work = beta == 0.0f        ? empty(p.result_shape, wd, out.device())
                : out.dtype() == wd ? clone(out)
                                    : cast(out, wd);
  run_plan(p, work);
  copy_(out, work);
}

}  // namespace tessera::ops
