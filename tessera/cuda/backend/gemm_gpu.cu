// Backend::matmul through cuBLASLt. Compute-bound for transformer shapes; cuBLASLt picks the
// kernel (tensor cores for bf16/f16, and for f32 when TF32 is allowed).
//
// cuBLASLt is column-major and Tessera is row-major, so the product is computed transposed:
// out^T (N x M, column-major, leading dim N: exactly out's row-major bytes) =
// op(b)^T op(a)^T. Each operand's bytes are described as the column-major matrix they form
// (a row-major [r, c] with row stride ld is a column-major [c, r] with leading dim ld), and
// the op flag turns that into the needed op(x)^T, so transposed views cost no copy. The batch
// is a strided batch (stride 0 broadcasts). The bias epilogue adds bias[n] along out's rows,
// in the same pass; beta = 1 accumulates through C = D.
//
// matmul_gelu uses the GELU_AUX(_BIAS) epilogue: D = gelu(acc + bias) and the aux matrix =
// acc + bias (the pre-activation), both stored in out's dtype by the same kernel. cuBLASLt's
// GELU is the tanh form, Tessera's. The aux matrix is laid out like D (column-major N x M,
// leading dim N, batch stride M*N), and cuBLASLt wants its leading dim and batch stride
// divisible by 8; where they are not, for f64, or where the heuristic has no kernel for the
// epilogue, the product goes to pre with the plain (bias) epilogue and the elementwise GELU
// kernel reads it back: one more pass over M x N, never a different result contract.
//
// Per device: one handle and a 32 MiB workspace, and a cache of heuristic choices keyed by
// the problem, since asking the heuristic costs tens of microseconds per call.

#include <cublasLt.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>

#include "tessera/cuda/backend/cuda_check.h"
#include "tessera/cuda/backend/gemm.h"
#include "tessera/cuda/cuda.h"
#include "tessera/cuda/kernels/elementwise.h"

#define TESSERA_CUBLAS_CHECK(call)                                                           \
  do {                                                                                       \
    const cublasStatus_t tessera_cublas_status = (call);                                     \
    if (tessera_cublas_status != CUBLAS_STATUS_SUCCESS) [[unlikely]]                         \
      ::tessera::detail::throw_error(                                                        \
          #call, " failed: ", cublasLtGetStatusName(tessera_cublas_status), " (",            \
          cublasLtGetStatusString(tessera_cublas_status), ") at ", __FILE__, ":", __LINE__); \
  } while (0)

namespace tessera::cuda {
namespace {
std::atomic<bool> g_allow_tf32{false};
}  // namespace

void set_matmul_tf32(bool allow) {
  g_allow_tf32.store(allow);
}

inline namespace TESSERA_CUDA_ABI {
namespace {

constexpr size_t kWorkspaceBytes = size_t(32) << 20;

// One operand's bytes as a column-major matrix, and the op that makes it op(x)^T.
struct LtOperand {
  uint64_t rows, cols;
  int64_t ld, batch_stride;
  cublasOperation_t op;
};

LtOperand lt_operand(const Tensor& t, bool trans) {
  const int64_t r = t.size(1), c = t.size(2);
  LtOperand o;
  const bool row_major = t.stride(2) == 1;
  o.rows = uint64_t(row_major ? c : r);
  o.cols = uint64_t(row_major ? r : c);
  o.ld = row_major ? t.stride(1) : t.stride(2);
  // With a single column the leading dim is never stepped, but cuBLASLt still wants >= rows.
  if (o.cols <= 1 || o.ld < int64_t(o.rows)) o.ld = std::max<int64_t>(int64_t(o.rows), 1);
  o.batch_stride = t.stride(0);
  o.op = row_major == trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  return o;
}

struct Types {
  cudaDataType_t data, scale;
  cublasComputeType_t compute;
};

Types types_for(const Tensor& out) {
  switch (out.dtype()) {
    case DType::f32:
      return {CUDA_R_32F, CUDA_R_32F,
              g_allow_tf32.load() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F};
    case DType::f64:
      return {CUDA_R_64F, CUDA_R_64F, CUBLAS_COMPUTE_64F};
    case DType::bf16:
      return {CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F};
    case DType::f16:
      return {CUDA_R_16F, CUDA_R_32F, CUBLAS_COMPUTE_32F};
    default:
      break;
  }
  detail::throw_error("matmul on ", out.device(), ": cuBLASLt GEMM for dtype ",
                      dtype_name(out.dtype()), " (out ", out.describe(),
                      ") is not supported; f32, f64, bf16 and f16 are");
}

// The largest power of two (up to 16) dividing the address: what the heuristic may assume.
uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 16;
  while (a > 1 && address % a != 0) a /= 2;
  return a;
}

using ProblemKey =
    std::tuple<int, int, uint64_t, uint64_t, uint64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
               int, int, bool, bool, uint32_t, uint32_t, uint32_t, uint32_t, bool, uint32_t>;

struct DeviceGemm {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::mutex mutex;
  // The heuristic's choice per problem; none when it has no kernel (a GELU epilogue then
  // falls back without asking again).
  std::map<ProblemKey, std::optional<cublasLtMatmulAlgo_t>> algos;
};

DeviceGemm& device_gemm(int device) {
  static std::mutex mutex;
  static auto* devices = new std::map<int, std::unique_ptr<DeviceGemm>>();  // never destroyed
  std::lock_guard<std::mutex> lock(mutex);
  auto& entry = (*devices)[device];
  if (!entry) {
    auto g = std::make_unique<DeviceGemm>();
    TESSERA_CUBLAS_CHECK(cublasLtCreate(&g->handle));
    TESSERA_CUDA_CHECK(cudaMalloc(&g->workspace, kWorkspaceBytes));
    entry = std::move(g);
  }
  return *entry;
}

// RAII owners of the cuBLASLt descriptors.
struct Desc {
  cublasLtMatmulDesc_t d = nullptr;
  ~Desc() {
    if (d) cublasLtMatmulDescDestroy(d);
  }
};
struct Layout {
  cublasLtMatrixLayout_t l = nullptr;
  ~Layout() {
    if (l) cublasLtMatrixLayoutDestroy(l);
  }
};
struct Preference {
  cublasLtMatmulPreference_t p = nullptr;
  ~Preference() {
    if (p) cublasLtMatmulPreferenceDestroy(p);
  }
};

template <class T>
void set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& value) {
  TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &value, sizeof value));
}

void make_layout(Layout& layout, cudaDataType_t type, uint64_t rows, uint64_t cols, int64_t ld,
                 int batch, int64_t batch_stride) {
  TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout.l, type, rows, cols, ld));
  if (batch > 1) {
    TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
        layout.l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch));
    TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
        layout.l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &batch_stride, sizeof batch_stride));
  }
}

void check_dtypes(const char* op, const Tensor& a, const Tensor& b, const Tensor& bias,
                  const Tensor& out) {
  TESSERA_CHECK(a.dtype() == out.dtype() && b.dtype() == out.dtype() &&
                    (!bias.defined() || bias.dtype() == out.dtype()),
                op, " on ", out.device(), ": operands a ", a.describe(), " and b ", b.describe(),
                bias.defined() ? str_cat(" and bias ", bias.describe()) : std::string(),
                " must share out's dtype (", out.describe(), ")");
}

// Whether cuBLASLt's GELU_AUX epilogue can write pre [batch, M, N] (contiguous) as its aux
// matrix: leading dim N divisible by 8 (then so is the batch stride M*N), and a dtype it has
// the epilogue for (f64 has none we rely on).
bool gelu_aux_fits(const Tensor& pre) {
  return pre.dtype() != DType::f64 && pre.size(2) % 8 == 0;
}

// out = alpha op(a) op(b) + beta out (+ bias) through cuBLASLt. With aux (GELU): out = gelu of
// that, and aux = the pre-activation. Returns false, having launched nothing, when cuBLASLt
// has no kernel for the GELU epilogue; without one the missing kernel throws.
bool lt_matmul(DeviceContext& context, const Tensor& a, const Tensor& b, const Tensor& bias,
               const Tensor& out, const MatmulArgs& args, const Tensor& aux) {
  const Types types = types_for(out);
  const int64_t batch = out.size(0), m = out.size(1), n = out.size(2);
  TESSERA_CHECK(batch <= INT32_MAX, "matmul on ", out.device(), ": batch ", batch,
                " exceeds cuBLASLt's int32 batch count (out ", out.describe(), ")");
  const LtOperand la = lt_operand(b, args.trans_b);  // cuBLASLt's A is op(b)^T: [N x K]
  const LtOperand lb = lt_operand(a, args.trans_a);  // cuBLASLt's B is op(a)^T: [K x M]
  const void* pa = b.data_ptr("matmul");
  const void* pb = a.data_ptr("matmul");
  void* pd = out.data_ptr("matmul");
  const void* pbias = bias.defined() ? bias.data_ptr("matmul") : nullptr;
  void* paux = aux.defined() ? aux.data_ptr("matmul_gelu") : nullptr;
  const cudaStream_t stream = context.compute_stream();
  DeviceGemm& g = device_gemm(context.index());

  Desc desc;
  TESSERA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc.d, types.compute, types.scale));
  set_desc(desc.d, CUBLASLT_MATMUL_DESC_TRANSA, la.op);
  set_desc(desc.d, CUBLASLT_MATMUL_DESC_TRANSB, lb.op);
  if (paux != nullptr) {
    set_desc(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE,
             pbias != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX);
    // The heuristic reads the aux pointer's alignment, so it is set before asking.
    set_desc(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, paux);
    set_desc(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, n);
    if (batch > 1) set_desc(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, m * n);
  } else if (pbias != nullptr) {
    set_desc(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
  }
  if (pbias != nullptr) set_desc(desc.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, pbias);
  const int nb = int(batch);
  Layout layout_a, layout_b, layout_d;
  make_layout(layout_a, types.data, la.rows, la.cols, la.ld, nb, la.batch_stride);
  make_layout(layout_b, types.data, lb.rows, lb.cols, lb.ld, nb, lb.batch_stride);
  make_layout(layout_d, types.data, uint64_t(n), uint64_t(m), n, nb, m * n);

  const ProblemKey key{int(out.dtype()),
                       int(types.compute),
                       la.rows,
                       la.cols,
                       lb.cols,
                       la.ld,
                       lb.ld,
                       la.batch_stride,
                       lb.batch_stride,
                       batch,
                       int(la.op),
                       int(lb.op),
                       pbias != nullptr,
                       args.beta != 0.0f,
                       alignment_of(pa),
                       alignment_of(pb),
                       alignment_of(pd),
                       alignment_of(pbias),
                       paux != nullptr,
                       alignment_of(paux)};
  std::optional<cublasLtMatmulAlgo_t> algo;
  {
    std::lock_guard<std::mutex> lock(g.mutex);
    auto it = g.algos.find(key);
    if (it == g.algos.end()) {
      Preference pref;
      TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref.p));
      const uint64_t workspace = kWorkspaceBytes;
      TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
          pref.p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace));
      const uint32_t align[4] = {alignment_of(pa), alignment_of(pb), alignment_of(pd),
                                 alignment_of(pd)};
      const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
      for (int i = 0; i < 4; ++i)
        TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.p, align_attr[i], &align[i],
                                                                  sizeof align[i]));
      cublasLtMatmulHeuristicResult_t result{};
      int found = 0;
      const cublasStatus_t status =
          cublasLtMatmulAlgoGetHeuristic(g.handle, desc.d, layout_a.l, layout_b.l, layout_d.l,
                                         layout_d.l, pref.p, 1, &result, &found);
      // An epilogue the library lacks for these types reads as "no kernel": fall back.
      if (paux != nullptr && status == CUBLAS_STATUS_NOT_SUPPORTED) {
        found = 0;
      } else {
        TESSERA_CUBLAS_CHECK(status);
      }
      TESSERA_CHECK(found > 0 || paux != nullptr, "matmul on ", out.device(),
                    ": cuBLASLt has no kernel for a ", a.describe(), " (trans_a=", args.trans_a,
                    ") times b ", b.describe(), " (trans_b=", args.trans_b, ") into ",
                    out.describe());
      it = g.algos.emplace(key, found > 0 ? std::optional(result.algo) : std::nullopt).first;
    }
    algo = it->second;
  }
  if (!algo) return false;
  if (types.scale == CUDA_R_64F) {
    const double alpha = args.alpha, beta = args.beta;
    TESSERA_CUBLAS_CHECK(cublasLtMatmul(g.handle, desc.d, &alpha, pa, layout_a.l, pb, layout_b.l,
                                        &beta, pd, layout_d.l, pd, layout_d.l, &*algo, g.workspace,
                                        kWorkspaceBytes, stream));
  } else {
    const float alpha = args.alpha, beta = args.beta;
    TESSERA_CUBLAS_CHECK(cublasLtMatmul(g.handle, desc.d, &alpha, pa, layout_a.l, pb, layout_b.l,
                                        &beta, pd, layout_d.l, pd, layout_d.l, &*algo, g.workspace,
                                        kWorkspaceBytes, stream));
  }
  return true;
}

}  // namespace

void gemm(DeviceContext& context, const Tensor& a, const Tensor& b, const Tensor& bias,
          const Tensor& out, const MatmulArgs& args) {
  check_dtypes("matmul", a, b, bias, out);
  if (out.numel() == 0) return;
  lt_matmul(context, a, b, bias, out, args, Tensor());
}

void gemm_gelu(DeviceContext& context, const Tensor& a, const Tensor& b, const Tensor& bias,
               const Tensor& pre, const Tensor& out, const MatmulArgs& args) {
  check_dtypes("matmul_gelu", a, b, bias, out);
  TESSERA_CHECK(pre.dtype() == out.dtype() && pre.shape() == out.shape() && pre.is_contiguous() &&
                    out.is_contiguous() && args.alpha == 1.0f && args.beta == 0.0f,
                "matmul_gelu on ", out.device(), ": pre ", pre.describe(), " and out ",
                out.describe(), " must be contiguous of one shape and dtype, with alpha = 1 and",
                " beta = 0 (got ", args.alpha, " and ", args.beta, ")");
  if (out.numel() == 0) return;
  if (gelu_aux_fits(pre) && lt_matmul(context, a, b, bias, out, args, pre)) return;
  lt_matmul(context, a, b, bias, pre, args, Tensor());
  unary(UnaryOp::gelu, pre, out, 0.0, context.compute_stream());
}

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
