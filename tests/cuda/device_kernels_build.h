#pragma once
// One source for both builds of the launcher table (device_kernels.h): device_kernels_sim.cpp
// includes it with the host compiler (the simulated launchers), device_kernels_gpu.cu with
// nvcc (the GPU launchers). The inline ABI namespace keeps the two classes apart.

#include "tessera/cuda/kernels/adamw.h"
#include "tessera/cuda/kernels/attention.h"
#include "tessera/cuda/kernels/copy.h"
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
#include "tests/cuda/device_kernels.h"

namespace tessera::cuda::testing {
inline namespace TESSERA_CUDA_ABI {

// Every launcher on `stream`.
class BuildKernels final : public DeviceKernels {
 public:
  explicit BuildKernels(cudaStream_t stream) : s_(stream) {}

  void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                  const Tensor& rounded, const AdamWArgs& args) override {
    cuda::adamw_step(param, grad, m, v, rounded, args, s_);
  }
  void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                         const Tensor& out, const Tensor& lse) override {
    cuda::attention_forward(q, k, v, scale, out, lse, s_);
  }
  void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                          const Tensor& lse, const Tensor& gout, double scale, const Tensor& gq,
                          const Tensor& gk, const Tensor& gv) override {
    cuda::attention_backward(q, k, v, out, lse, gout, scale, gq, gk, gv, s_);
  }
  void copy(const Tensor& src, const Tensor& dst) override { cuda::copy(src, dst, s_); }
  void cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                             const Tensor& loss, const Tensor& lse, const Tensor& valid) override {
    cuda::cross_entropy_forward(logits, targets, ignore_index, loss, lse, valid, s_);
  }
  void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              const Tensor& gloss, const Tensor& valid, int64_t ignore_index,
                              const Tensor& glogits) override {
    cuda::cross_entropy_backward(logits, targets, lse, gloss, valid, ignore_index, glogits, s_);
  }
  void dropout(const Tensor& x, const Tensor& out, double p, uint64_t seed,
               uint64_t offset) override {
    cuda::dropout(x, out, p, seed, offset, s_);
  }
  void unary(UnaryOp op, const Tensor& x, const Tensor& out, double scalar) override {
    cuda::unary(op, x, out, scalar, s_);
  }
  void unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& gy,
                      const Tensor& gx, double scalar) override {
    cuda::unary_backward(op, x, y, gy, gx, scalar, s_);
  }
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) override {
    cuda::binary(op, a, b, out, s_);
  }
  void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) override {
    cuda::where(cond, a, b, out, s_);
  }
  void embedding_forward(const Tensor& weight, const Tensor& ids, const Tensor& out) override {
    cuda::embedding_forward(weight, ids, out, s_);
  }
  void embedding_backward(const Tensor& ids, const Tensor& gy, const Tensor& gweight) override {
    cuda::embedding_backward(ids, gy, gweight, s_);
  }
  void layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                         const Tensor& y, const Tensor& mean, const Tensor& rstd) override {
    cuda::layernorm_forward(x, weight, bias, eps, y, mean, rstd, s_);
  }
  void layernorm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean,
                          const Tensor& rstd, const Tensor& gy, const Tensor& gx, const Tensor& gw,
                          const Tensor& gb) override {
    cuda::layernorm_backward(x, weight, mean, rstd, gy, gx, gw, gb, s_);
  }
  void rmsnorm_forward(const Tensor& x, const Tensor& weight, double eps, const Tensor& y,
                       const Tensor& rstd) override {
    cuda::rmsnorm_forward(x, weight, eps, y, rstd, s_);
  }
  void rmsnorm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& gy,
                        const Tensor& gx, const Tensor& gw) override {
    cuda::rmsnorm_backward(x, weight, rstd, gy, gx, gw, s_);
  }
  void random_uniform(const Tensor& dst, double lo, double hi, uint64_t seed,
                      uint64_t offset) override {
    cuda::random_uniform(dst, lo, hi, seed, offset, s_);
  }
  void random_normal(const Tensor& dst, double mean, double stddev, uint64_t seed,
                     uint64_t offset) override {
    cuda::random_normal(dst, mean, stddev, seed, offset, s_);
  }
  void reduce(ReduceOp op, const Tensor& x, const Tensor& out, const Tensor& indices) override {
    cuda::reduce(op, x, out, indices, s_);
  }
  void max_backward(const Tensor& indices, const Tensor& gy, const Tensor& gx) override {
    cuda::max_backward(indices, gy, gx, s_);
  }
  void squared_norm(const std::vector<Tensor>& xs, const Tensor& out) override {
    cuda::squared_norm(xs, out, s_);
  }
  void rope(const Tensor& x, const Tensor& out, int64_t pos_offset, double theta,
            bool inverse) override {
    cuda::rope(x, out, pos_offset, theta, inverse, s_);
  }
  void softmax(const Tensor& x, const Tensor& out, bool log) override {
    cuda::softmax(x, out, log, s_);
  }
  void softmax_backward(const Tensor& y, const Tensor& gy, const Tensor& gx, bool log) override {
    cuda::softmax_backward(y, gy, gx, log, s_);
  }

 private:
  cudaStream_t s_;
};

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda::testing
