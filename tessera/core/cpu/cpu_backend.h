#pragma once
// The CPU backend: Eigen for GEMM and vectorised math, OpenMP for threads. Each op family's
// methods live in their own cpu_<family>.cpp.

#include "tessera/core/backend.h"

namespace tessera {

class CpuBackend final : public Backend {
 public:
  Device device() const override { return Device::cpu(); }
  Allocator& allocator() override { return allocator_; }

  // cpu_copy.cpp
  void copy(const Tensor& src, const Tensor& dst) override;
  void copy_host(const Tensor& src, const Tensor& dst) override;
  void fill(const Tensor& dst, double value) override;
  void arange(const Tensor& dst, double start, double step) override;
  // cpu_random.cpp
  void random_uniform(const Tensor& dst, double lo, double hi, uint64_t seed,
                      uint64_t offset) override;
  void random_normal(const Tensor& dst, double mean, double std, uint64_t seed,
                     uint64_t offset) override;
  void dropout(const Tensor& x, const Tensor& out, double p, uint64_t seed,
               uint64_t offset) override;
  // cpu_elementwise.cpp
  void unary(UnaryOp op, const Tensor& x, const Tensor& out, double scalar) override;
  void unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& gy,
                      const Tensor& gx, double scalar) override;
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) override;
  void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) override;
  // cpu_reduce.cpp
  void reduce(ReduceOp op, const Tensor& x, const Tensor& out, const Tensor& indices) override;
  void max_backward(const Tensor& indices, const Tensor& gy, const Tensor& gx) override;
  void softmax(const Tensor& x, const Tensor& out, bool log) override;
  void softmax_backward(const Tensor& y, const Tensor& gy, const Tensor& gx, bool log) override;
  void squared_norm(const std::vector<Tensor>& xs, const Tensor& out) override;
  // cpu_matmul.cpp
  void matmul(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out,
              const MatmulArgs& args) override;
  void matmul_gelu(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& pre,
                   const Tensor& out, const MatmulArgs& args) override;
  // cpu_norm.cpp
  void layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                         const Tensor& y, const Tensor& mean, const Tensor& rstd) override;
  void layernorm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean,
                          const Tensor& rstd, const Tensor& gy, const Tensor& gx, const Tensor& gw,
                          const Tensor& gb) override;
  void rmsnorm_forward(const Tensor& x, const Tensor& weight, double eps, const Tensor& y,
                       const Tensor& rstd) override;
  void rmsnorm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& gy,
                        const Tensor& gx, const Tensor& gw) override;
  // cpu_embedding.cpp
  void embedding_forward(const Tensor& weight, const Tensor& ids, const Tensor& out) override;
  void embedding_backward(const Tensor& ids, const Tensor& gy, const Tensor& gweight) override;
  // cpu_cross_entropy.cpp
  void cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                             const Tensor& loss, const Tensor& lse, const Tensor& valid) override;
  void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              const Tensor& gloss, const Tensor& valid, int64_t ignore_index,
                              const Tensor& glogits) override;
  // cpu_attention.cpp
  void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                         const Tensor& out, const Tensor& lse) override;
  void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                          const Tensor& lse, const Tensor& gout, double scale, const Tensor& gq,
                          const Tensor& gk, const Tensor& gv) override;
  // cpu_rope.cpp
  void rope(const Tensor& x, const Tensor& out, int64_t pos_offset, double theta,
            bool inverse) override;
  // cpu_optim.cpp
  void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                  const Tensor& rounded, const AdamWArgs& args) override;

 private:
  CpuAllocator allocator_;
};

CpuBackend& cpu_backend();

}  // namespace tessera
