#pragma once
// CudaBackend: core's Backend interface on one CUDA device. One source, two builds (the inline
// ABI namespace keeps them apart): the GPU library (nvcc, cudart, cuBLASLt) and the simulated
// library (host compiler; kernels run in tessera/cuda/sim). Every method forwards to a launcher
// in tessera/cuda/kernels/<family>.h on the compute stream; matmul goes to gemm.h (cuBLASLt
// on the GPU). Every Backend method has a kernel.
//
// Public entry points (registration, device selection) are in tessera/cuda/cuda.h.

#include "tessera/core/backend.h"
#include "tessera/cuda/backend/allocator.h"
#include "tessera/cuda/backend/device_context.h"
#include "tessera/cuda/stream_order.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {

class CudaBackend final : public Backend, public StreamOrder {
 public:
  explicit CudaBackend(int device_index) : context_(device_index), allocator_(context_) {}

  Device device() const override { return Device::cuda(context_.index()); }
  Allocator& allocator() override { return allocator_; }
  void synchronize() override { context_.synchronize(); }
  DeviceContext& context() { return context_; }

  // StreamOrder (backend_stream_order.cpp): the streams and events a communicator orders on.
  int device_index() override { return context_.index(); }
  bool simulated() const override;
  Stream compute_stream() override { return context_.compute_stream(); }
  Stream comm_stream() override { return context_.comm_stream(); }
  Event record_event(Stream stream) override;
  void stream_wait_event(Stream stream, Event event) override;
  bool event_done(Event event) override;
  void event_synchronize(Event event) override;
  void destroy_event(Event event) override;

  // cuda_backend_memory.cpp
  void copy(const Tensor& src, const Tensor& dst) override;
  void copy_host(const Tensor& src, const Tensor& dst) override;
  void fill(const Tensor& dst, double value) override;
  void arange(const Tensor& dst, double start, double step) override;
  void matmul(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out,
              const MatmulArgs& args) override;
  void matmul_gelu(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& pre,
                   const Tensor& out, const MatmulArgs& args) override;

  // cuda_backend_ops.cpp
  void random_uniform(const Tensor& dst, double lo, double hi, uint64_t seed,
                      uint64_t offset) override;
  void random_normal(const Tensor& dst, double mean, double std, uint64_t seed,
                     uint64_t offset) override;
  void dropout(const Tensor& x, const Tensor& out, double p, uint64_t seed,
               uint64_t offset) override;
  void embedding_forward(const Tensor& weight, const Tensor& ids, const Tensor& out) override;
  void embedding_backward(const Tensor& ids, const Tensor& gy, const Tensor& gweight) override;
  void rope(const Tensor& x, const Tensor& out, int64_t pos_offset, double theta,
            bool inverse) override;
  void reduce(ReduceOp op, const Tensor& x, const Tensor& out, const Tensor& indices) override;
  void max_backward(const Tensor& indices, const Tensor& gy, const Tensor& gx) override;
  void squared_norm(const std::vector<Tensor>& xs, const Tensor& out) override;
  void softmax(const Tensor& x, const Tensor& out, bool log) override;
  void softmax_backward(const Tensor& y, const Tensor& gy, const Tensor& gx, bool log) override;
  void cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                             const Tensor& loss, const Tensor& lse, const Tensor& valid) override;
  void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              const Tensor& gloss, const Tensor& valid, int64_t ignore_index,
                              const Tensor& glogits) override;
  void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                         const Tensor& out, const Tensor& lse) override;
  void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                          const Tensor& lse, const Tensor& gout, double scale, const Tensor& gq,
                          const Tensor& gk, const Tensor& gv) override;
  void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                  const Tensor& rounded, const AdamWArgs& args) override;
  void unary(UnaryOp op, const Tensor& x, const Tensor& out, double scalar) override;
  void unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& gy,
                      const Tensor& gx, double scalar) override;
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) override;
  void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) override;
  void layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                         const Tensor& y, const Tensor& mean, const Tensor& rstd) override;
  void layernorm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean,
                          const Tensor& rstd, const Tensor& gy, const Tensor& gx, const Tensor& gw,
                          const Tensor& gb) override;
  void rmsnorm_forward(const Tensor& x, const Tensor& weight, double eps, const Tensor& y,
                       const Tensor& rstd) override;
  void rmsnorm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& gy,
                        const Tensor& gx, const Tensor& gw) override;

 private:
  cudaStream_t stream() { return context_.compute_stream(); }

  DeviceContext context_;
  CudaAllocator allocator_;
};

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
