#pragma once
// The kernel launchers of tessera/cuda/kernels/ on the device the tests run on
// (tests/support/cuda_test_device.h): the simulated build in CI, the GPU build with
// TESSERA_TEST_CUDA=gpu. A test calls kernels().layernorm_forward(...) exactly as it would call
// the launcher, minus the stream: the GPU build runs on the backend's compute stream, which
// device tensors (tests/cuda/kernel_compare.h) are also allocated and copied on, so a host
// read after a launch sees its result.
//
// Launchers, not Backend methods: they are what the kernel files export, and some differ from
// the Backend on purpose (Backend::copy takes a memcpy for same-dtype contiguous tensors and
// checks no shapes; the copy launcher does both itself).

#include <cstdint>
#include <vector>

#include "tessera/core/backend.h"
#include "tessera/core/tensor.h"

namespace tessera::cuda::testing {

class DeviceKernels {
 public:
  virtual ~DeviceKernels() = default;

  virtual void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                          const Tensor& rounded, const AdamWArgs& args) = 0;
  virtual void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                                 const Tensor& out, const Tensor& lse) = 0;
  virtual void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& out, const Tensor& lse, const Tensor& gout,
                                  double scale, const Tensor& gq, const Tensor& gk,
                                  const Tensor& gv) = 0;
  virtual void copy(const Tensor& src, const Tensor& dst) = 0;
  virtual void cross_entropy_forward(const Tensor& logits, const Tensor& targets,
                                     int64_t ignore_index, const Tensor& loss, const Tensor& lse,
                                     const Tensor& valid) = 0;
  virtual void cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                                      const Tensor& lse, const Tensor& gloss, const Tensor& valid,
                                      int64_t ignore_index, const Tensor& glogits) = 0;
  virtual void dropout(const Tensor& x, const Tensor& out, double p, uint64_t seed,
                       uint64_t offset) = 0;
  virtual void unary(UnaryOp op, const Tensor& x, const Tensor& out, double scalar) = 0;
  virtual void unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& gy,
                              const Tensor& gx, double scalar) = 0;
  virtual void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  virtual void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  virtual void embedding_forward(const Tensor& weight, const Tensor& ids, const Tensor& out) = 0;
  virtual void embedding_backward(const Tensor& ids, const Tensor& gy, const Tensor& gweight) = 0;
  virtual void layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                 double eps, const Tensor& y, const Tensor& mean,
                                 const Tensor& rstd) = 0;
  virtual void layernorm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean,
                                  const Tensor& rstd, const Tensor& gy, const Tensor& gx,
                                  const Tensor& gw, const Tensor& gb) = 0;
  virtual void rmsnorm_forward(const Tensor& x, const Tensor& weight, double eps, const Tensor& y,
                               const Tensor& rstd) = 0;
  virtual void rmsnorm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd,
                                const Tensor& gy, const Tensor& gx, const Tensor& gw) = 0;
  virtual void random_uniform(const Tensor& dst, double lo, double hi, uint64_t seed,
                              uint64_t offset) = 0;
  virtual void random_normal(const Tensor& dst, double mean, double stddev, uint64_t seed,
                             uint64_t offset) = 0;
  virtual void reduce(ReduceOp op, const Tensor& x, const Tensor& out, const Tensor& indices) = 0;
  virtual void max_backward(const Tensor& indices, const Tensor& gy, const Tensor& gx) = 0;
  virtual void squared_norm(const std::vector<Tensor>& xs, const Tensor& out) = 0;
  virtual void rope(const Tensor& x, const Tensor& out, int64_t pos_offset, double theta,
                    bool inverse) = 0;
  virtual void softmax(const Tensor& x, const Tensor& out, bool log) = 0;
  virtual void softmax_backward(const Tensor& y, const Tensor& gy, const Tensor& gx, bool log) = 0;
};

// The launchers of the device cuda_test_device() chose (it registers that device's backend).
DeviceKernels& kernels();

}  // namespace tessera::cuda::testing
