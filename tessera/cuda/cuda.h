#pragma once
// Tessera on CUDA devices: what a program includes to put tensors on Device::cuda(). Includes
// no CUDA header, so code that uses it compiles without the CUDA toolkit.
//
// Two libraries implement it:
//   tessera::cuda            the GPU backend (built where nvcc exists; tessera::tessera links
//                            it). It defines TESSERA_HAS_CUDA for its users, and registers
//                            itself at program start for cuda:0 without touching the driver:
//                            Device::cuda() just works, and the first use opens the device.
//   tessera::cuda_simulated  the same backend with every kernel run by the CPU kernel simulator
//                            (tessera/cuda/sim): slow, exact about out-of-bounds writes, for
//                            tests and for trying GPU code paths on a machine without a GPU.
//
//   #include "tessera/cuda/cuda.h"
//   #if defined(TESSERA_HAS_CUDA)
//   tessera::cuda::init_device(local_rank);  // optional: picks the GPU (cuda:0 otherwise)
//   #endif
//   Tensor x = tessera::zeros({4, 8}, DType::f32, Device::cuda());
//   Tensor y = tessera::ops::to(host_tensor, Device::cuda());
//
// Only one CUDA backend serves DeviceType::cuda at a time: the last registered one.

#include <cstddef>

namespace tessera::cuda {

// ---- tessera::cuda (GPU build) ----
// The number of visible CUDA devices; 0 when there is no driver or no GPU (never throws).
int device_count();
// Makes cuda:`index` the device that Device::cuda() tensors live on, opening it now (streams,
// memory pool). Call it before creating CUDA tensors; throws naming the index and the count
// when the device does not exist.
void init_device(int index = 0);
// Lets f32 matmuls run on TF32 tensor cores (10-bit mantissa inputs, f32 accumulation; about
// 1e-3 relative error per product). Off by default.
void set_matmul_tf32(bool allow);
// The device that Device::cuda() tensors live on and its two streams, for a communication
// library (the NCCL communicator): collectives go on `comm`, ordered against `compute` (every
// kernel, copy and pool free) by events. The streams are cudaStream_t values behind void*, so
// that this header needs no CUDA header. Opens the device; throws when Device::cuda() is
// served by the simulated backend.
struct DeviceStreams {
  int device = 0;
  void* compute = nullptr;
  void* comm = nullptr;
};
DeviceStreams device_streams();
// Whether Device::cuda() is served by the simulated backend: the program called
// use_simulated_device() after this backend registered itself. Never opens the device.
bool device_is_simulated();

// ---- tessera::cuda_simulated ----
// Registers the simulated backend for DeviceType::cuda (one device, cuda:0). Idempotent.
void use_simulated_device();
// The simulated device's memory in bytes (0, the default: unlimited): an allocation past it
// raises OutOfMemory as a full GPU does.
void set_simulated_memory_limit(size_t bytes);

}  // namespace tessera::cuda
