// Tiled SIMT GEMM, the textbook form: each 16x16 thread block owns a 16x16 tile of the output,
// stages 16x16 tiles of op(a) and op(b) through shared memory and accumulates one output
// element per thread. Each loaded element is reused 16 times, so it is bound by shared-memory
// bandwidth at roughly 1/16 of the FMA peak: fine for correctness in the simulator, the only
// place it runs (the GPU build's matmul is cuBLASLt).
//
// Operand elements are addressed through (batch, row, column) strides of op(x), so transposes
// and broadcast batches need no copy; tiles past the edges load zeros. The GELU epilogue
// (matmul_gelu) stores the pre-activation and the GELU (tanh form, UnaryOp::gelu's formula) of
// each accumulator, like cuBLASLt's GELU_AUX epilogue on the GPU.

#include "tessera/cuda/kernels/gemm_simt.h"

#include "tessera/cuda/kernels/gelu.h"
#include "tessera/cuda/kernels/vector_io.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {
namespace {

constexpr int kTile = 16;

// op(x) of one operand: element (r, c) of batch i is at i * batch + r * row + c * col.
struct OperandView {
  int64_t batch, row, col;
};

OperandView view_of(const Tensor& t, bool trans) {
  return trans ? OperandView{t.stride(0), t.stride(2), t.stride(1)}
               : OperandView{t.stride(0), t.stride(1), t.stride(2)};
}

// With kGelu, out receives gelu(v) and pre receives v.
template <class T, class Acc, bool kGelu>
__global__ void gemm_simt_kernel(const T* __restrict__ a, OperandView va, const T* __restrict__ b,
                                 OperandView vb, const T* __restrict__ bias, T* __restrict__ out,
                                 T* __restrict__ pre, int64_t m, int64_t n, int64_t k, Acc alpha,
                                 Acc beta) {
  TESSERA_SHARED(Acc, a_tile, kTile * kTile);
  TESSERA_SHARED(Acc, b_tile, kTile * kTile);
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t row = int64_t(blockIdx.y) * kTile + ty;
  const int64_t col = int64_t(blockIdx.x) * kTile + tx;
  const T* a_batch = a + int64_t(blockIdx.z) * va.batch;
  const T* b_batch = b + int64_t(blockIdx.z) * vb.batch;
  Acc acc = Acc(0);
  for (int64_t k0 = 0; k0 < k; k0 += kTile) {
    const int64_t ka = k0 + tx, kb = k0 + ty;
    a_tile[ty * kTile + tx] = row < m && ka < k ? Acc(a_batch[row * va.row + ka * va.col]) : Acc(0);
    b_tile[ty * kTile + tx] = kb < k && col < n ? Acc(b_batch[kb * vb.row + col * vb.col]) : Acc(0);
    __syncthreads();
    for (int j = 0; j < kTile; ++j) acc += a_tile[ty * kTile + j] * b_tile[j * kTile + tx];
    __syncthreads();
  }
  if (row >= m || col >= n) return;
  const int64_t at = int64_t(blockIdx.z) * m * n + row * n + col;
  Acc v = alpha * acc;
  // beta == 0 never reads out: fresh memory may hold NaNs.
  if (beta != Acc(0)) v += beta * Acc(out[at]);
  if (bias != nullptr) v += Acc(bias[col]);
  if constexpr (kGelu) {
    pre[at] = T(v);
    v = gelu_tanh(v);
  }
  out[at] = T(v);
}

template <class T, class Acc>
void run(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out, const Tensor& pre,
         const MatmulArgs& args, cudaStream_t stream) {
  const int64_t batch = out.size(0), m = out.size(1), n = out.size(2);
  const int64_t k = args.trans_a ? a.size(1) : a.size(2);
  TESSERA_CHECK(batch <= int64_t(kMaxGridDim[2]) && (m + kTile - 1) / kTile <= kMaxGridDim[1],
                "matmul (simulated SIMT GEMM): out ", out.describe(),
                " needs more blocks than the grid allows");
  const dim3 grid(unsigned((n + kTile - 1) / kTile), unsigned((m + kTile - 1) / kTile),
                  unsigned(batch));
  const dim3 block(kTile, kTile);
  const T* pa = static_cast<const T*>(a.data_ptr("matmul"));
  const T* pb = static_cast<const T*>(b.data_ptr("matmul"));
  const T* pbias = bias.defined() ? static_cast<const T*>(bias.data_ptr("matmul")) : nullptr;
  T* po = static_cast<T*>(out.data_ptr("matmul"));
  if (pre.defined()) {
    launch(gemm_simt_kernel<T, Acc, true>, LaunchConfig{grid, block, 0, stream, "gemm_simt_gelu"},
           pa, view_of(a, args.trans_a), pb, view_of(b, args.trans_b), pbias, po,
           static_cast<T*>(pre.data_ptr("matmul_gelu")), m, n, k, Acc(args.alpha), Acc(args.beta));
  } else {
    launch(gemm_simt_kernel<T, Acc, false>, LaunchConfig{grid, block, 0, stream, "gemm_simt"}, pa,
           view_of(a, args.trans_a), pb, view_of(b, args.trans_b), pbias, po,
           static_cast<T*>(nullptr), m, n, k, Acc(args.alpha), Acc(args.beta));
  }
}

// Both launchers: validation and the dtype switch; pre is defined for the GELU epilogue.
void dispatch(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out,
              const Tensor& pre, const MatmulArgs& args, cudaStream_t stream) {
  const DType dtype = out.dtype();
  const char* op = pre.defined() ? "matmul_gelu" : "matmul";
  TESSERA_CHECK(
      a.dtype() == dtype && b.dtype() == dtype && (!bias.defined() || bias.dtype() == dtype), op,
      " on cuda: operands a ", a.describe(), ", b ", b.describe(),
      bias.defined() ? str_cat(", bias ", bias.describe()) : std::string(),
      " must share out's dtype (", out.describe(), ")");
  TESSERA_CHECK(!pre.defined() ||
                    (pre.dtype() == dtype && pre.shape() == out.shape() && pre.is_contiguous() &&
                     out.is_contiguous() && args.alpha == 1.0f && args.beta == 0.0f),
                op, " on cuda: pre ", pre.describe(), " and out ", out.describe(),
                " must be contiguous of one shape and dtype, with alpha = 1 and beta = 0 (got ",
                args.alpha, " and ", args.beta, ")");
  if (out.numel() == 0) return;
  switch (dtype) {
    case DType::f32:
      return run<float, float>(a, b, bias, out, pre, args, stream);
    case DType::f64:
      return run<double, double>(a, b, bias, out, pre, args, stream);
    case DType::bf16:
      return run<BFloat16, float>(a, b, bias, out, pre, args, stream);
    case DType::f16:
      return run<Half, float>(a, b, bias, out, pre, args, stream);
    default:
      break;
  }
  detail::throw_error(op, " on cuda: no GEMM for dtype ", dtype_name(dtype), " (out ",
                      out.describe(), "); f32, f64, bf16 and f16 are supported");
}

}  // namespace

void gemm_simt(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out,
               const MatmulArgs& args, cudaStream_t stream) {
  dispatch(a, b, bias, out, Tensor(), args, stream);
}

void gemm_simt_gelu(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& pre,
                    const Tensor& out, const MatmulArgs& args, cudaStream_t stream) {
  dispatch(a, b, bias, out, pre, args, stream);
}

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
