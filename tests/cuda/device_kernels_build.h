#pragma once
// One source for both builds of the launcher table (device_kernels.h): device_kernels_sim.cpp
// includes it with the host compiler (the simulated launchers), device_kernels_gpu.cu with
// nvcc (the GPU launchers). The inline ABI namespace keeps the two classes apart.

#include "tessera/cuda/kernels/copy.h"
#include "tessera/cuda/kernels/launchers.h"
#include "tests/cuda/device_kernels.h"

namespace tessera::cuda::testing {
inline namespace TESSERA_CUDA_ABI {

// Every launcher on `stream`.
class BuildKernels final : public DeviceKernels {
 public:
  explicit BuildKernels(cudaStream_t stream) : s_(stream) {}

#define TESSERA_WITH_STREAM_ARG(...) (__VA_ARGS__, s_)
#define TESSERA_KERNEL_OP(name, params, args, front_ops) \
  void name params override {                            \
    cuda::name TESSERA_WITH_STREAM_ARG args;             \
  }
#include "tessera/core/op_table.def"
#undef TESSERA_WITH_STREAM_ARG
  void copy(const Tensor& src, const Tensor& dst) override {
    cuda::copy(src, dst, s_);
  }

 private:
  cudaStream_t s_;
};

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda::testing
