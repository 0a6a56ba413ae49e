// CudaBackend's op methods: each forwards to its family's launcher on the compute stream.

#include "tessera/cuda/backend/cuda_backend.h"
#include "tessera/cuda/kernels/adamw.h"
#include "tessera/cuda/kernels/attention.h"
#include "tessera/cuda/kernels/cross_entropy.h"
#include "tessera/cuda/kernels/dropout.h"
#include "tessera/cuda/kernels/elementwise.h"
#include "tessera/cuda/kernels/embedding.h"
#include "tessera/cuda/kernels/norm.h"
#include "tessera/cuda/kernels/random.h"
#include "tessera/cuda/kernels/reduce.h"
#include "tessera/cuda/kernels/rope.h"
#include "tessera/cuda/kernels/softmax.h"
#include "tessera/cuda/kernels/squared_norm.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {

void CudaBackend::random_uniform(const Tensor& dst, double lo, double hi, uint64_t seed,
                                 uint64_t offset) {
  cuda::random_uniform(dst, lo, hi, seed, offset, stream());
}
void CudaBackend::random_normal(const Tensor& dst, double mean, double std, uint64_t seed,
                                uint64_t offset) {
  cuda::random_normal(dst, mean, std, seed, offset, stream());
}
void CudaBackend::dropout(const Tensor& x, const Tensor& out, double p, uint64_t seed,
                          uint64_t offset) {
  cuda::dropout(x, out, p, seed, offset, stream());
}

void CudaBackend::embedding_forward(const Tensor& weight, const Tensor& ids, const Tensor& out) {
  cuda::embedding_forward(weight, ids, out, stream());
}
void CudaBackend::embedding_backward(const Tensor& ids, const Tensor& gy, const Tensor& gweight) {
  cuda::embedding_backward(ids, gy, gweight, stream());
}
void CudaBackend::rope(const Tensor& x, const Tensor& out, int64_t pos_offset, double theta,
                       bool inverse) {
  cuda::rope(x, out, pos_offset, theta, inverse, stream());
}

void CudaBackend::unary(UnaryOp op, const Tensor& x, const Tensor& out, double scalar) {
  cuda::unary(op, x, out, scalar, stream());
}
void CudaBackend::unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& gy,
                                 const Tensor& gx, double scalar) {
  cuda::unary_backward(op, x, y, gy, gx, scalar, stream());
}
void CudaBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  cuda::binary(op, a, b, out, stream());
}
void CudaBackend::where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  cuda::where(cond, a, b, out, stream());
}

void CudaBackend::layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                    double eps, const Tensor& y, const Tensor& mean,
                                    const Tensor& rstd) {
  cuda::layernorm_forward(x, weight, bias, eps, y, mean, rstd, stream());
}
void CudaBackend::layernorm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean,
                                     const Tensor& rstd, const Tensor& gy, const Tensor& gx,
                                     const Tensor& gw, const Tensor& gb) {
  cuda::layernorm_backward(x, weight, mean, rstd, gy, gx, gw, gb, stream());
}
void CudaBackend::rmsnorm_forward(const Tensor& x, const Tensor& weight, double eps,
                                  const Tensor& y, const Tensor& rstd) {
  cuda::rmsnorm_forward(x, weight, eps, y, rstd, stream());
}
void CudaBackend::rmsnorm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd,
                                   const Tensor& gy, const Tensor& gx, const Tensor& gw) {
  cuda::rmsnorm_backward(x, weight, rstd, gy, gx, gw, stream());
}

void CudaBackend::reduce(ReduceOp op, const Tensor& x, const Tensor& out, const Tensor& indices) {
  cuda::reduce(op, x, out, indices, stream());
}
void CudaBackend::max_backward(const Tensor& indices, const Tensor& gy, const Tensor& gx) {
  cuda::max_backward(indices, gy, gx, stream());
}
void CudaBackend::squared_norm(const std::vector<Tensor>& xs, const Tensor& out) {
  cuda::squared_norm(xs, out, stream());
}
void CudaBackend::softmax(const Tensor& x, const Tensor& out, bool log) {
  cuda::softmax(x, out, log, stream());
}
void CudaBackend::softmax_backward(const Tensor& y, const Tensor& gy, const Tensor& gx, bool log) {
  cuda::softmax_backward(y, gy, gx, log, stream());
}

void CudaBackend::cross_entropy_forward(const Tensor& logits, const Tensor& targets,
                                        int64_t ignore_index, const Tensor& loss, const Tensor& lse,
                                        const Tensor& valid) {
  cuda::cross_entropy_forward(logits, targets, ignore_index, loss, lse, valid, stream());
}
void CudaBackend::cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                                         const Tensor& lse, const Tensor& gloss,
                                         const Tensor& valid, int64_t ignore_index,
                                         const Tensor& glogits) {
  cuda::cross_entropy_backward(logits, targets, lse, gloss, valid, ignore_index, glogits, stream());
}

void CudaBackend::attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                                    const Tensor& out, const Tensor& lse) {
  cuda::attention_forward(q, k, v, scale, out, lse, stream());
}
void CudaBackend::attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& out, const Tensor& lse, const Tensor& gout,
                                     double scale, const Tensor& gq, const Tensor& gk,
                                     const Tensor& gv) {
  cuda::attention_backward(q, k, v, out, lse, gout, scale, gq, gk, gv, stream());
}

void CudaBackend::adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m,
                             const Tensor& v, const Tensor& rounded, const AdamWArgs& args) {
  cuda::adamw_step(param, grad, m, v, rounded, args, stream());
}

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
