// CudaBackend's memory methods (copies, fill, arange), matmul and matmul_gelu. A device copy
// of one dtype between contiguous tensors is a memcpy on the stream; any other goes to the copy
// kernel.
//
// Host copies move contiguous bytes with one memcpy on the compute stream. A side that is not
// contiguous, or a dtype change, is staged: on the host through the CPU backend's strided copy,
// on the device through a contiguous temporary and Backend::copy. Both directions wait for the
// stream before returning: a download must have landed before the host reads it, and an upload
// may come from memory the caller frees or reuses as soon as this returns (cudaMemcpyAsync
// returns early for pinned memory), so the backend never keeps a reference to host memory.

#include "tessera/core/empty.h"
#include "tessera/cuda/backend/cuda_backend.h"
#include "tessera/cuda/backend/gemm.h"
#include "tessera/cuda/kernels/copy.h"
#include "tessera/cuda/kernels/fill.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {

void CudaBackend::copy(const Tensor& src, const Tensor& dst) {
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous()) {
    runtime::memcpy_async(dst.data_ptr("copy"), src.data_ptr("copy"), dst.nbytes(),
                          CopyKind::device_to_device, stream());
    return;
  }
  cuda::copy(src, dst, stream());
}

void CudaBackend::copy_host(const Tensor& src, const Tensor& dst) {
  TESSERA_CHECK(src.device().is_cpu() != dst.device().is_cpu(), "copy_host on ", device(),
                ": exactly one of src ", src.describe(), " and dst ", dst.describe(),
                " must be on the cpu");
  TESSERA_CHECK(src.numel() == dst.numel(), "copy_host on ", device(), ": src ", src.describe(),
                " and dst ", dst.describe(), " differ in element count");
  if (dst.numel() == 0) return;
  if (dst.device().is_cpu()) {
    // Download: a contiguous device source, then host-side layout and dtype.
    Tensor from = src;
    if (!from.is_contiguous()) {
      from = tessera::empty(src.shape(), src.dtype(), src.device());
      copy(src, from);
    }
    const bool direct = dst.is_contiguous() && dst.dtype() == src.dtype();
    Tensor to = direct ? dst : tessera::empty(dst.shape(), src.dtype(), Device::cpu());
    runtime::memcpy_async(to.data_ptr("copy_host"), from.data_ptr("copy_host"), to.nbytes(),
                          CopyKind::device_to_host, stream());
    runtime::stream_synchronize(stream());
    if (!direct) backend_for(Device::cpu()).copy(to, dst);
    return;
  }
  // Upload: a contiguous host source in dst's dtype, then device-side layout.
  Tensor from = src;
  if (!from.is_contiguous() || from.dtype() != dst.dtype()) {
    from = tessera::empty(src.shape(), dst.dtype(), Device::cpu());
    backend_for(Device::cpu()).copy(src, from);
  }
  Tensor to = dst.is_contiguous() ? dst : tessera::empty(dst.shape(), dst.dtype(), dst.device());
  runtime::memcpy_async(to.data_ptr("copy_host"), from.data_ptr("copy_host"), to.nbytes(),
                        CopyKind::host_to_device, stream());
  if (!dst.is_contiguous()) copy(to, dst);
  runtime::stream_synchronize(stream());
}

void CudaBackend::fill(const Tensor& dst, double value) {
  cuda::fill(dst, value, stream());
}

void CudaBackend::arange(const Tensor& dst, double start, double step) {
  cuda::arange(dst, start, step, stream());
}

void CudaBackend::matmul(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out,
                         const MatmulArgs& args) {
  gemm(context_, a, b, bias, out, args);
}

void CudaBackend::matmul_gelu(const Tensor& a, const Tensor& b, const Tensor& bias,
                              const Tensor& pre, const Tensor& out, const MatmulArgs& args) {
  gemm_gelu(context_, a, b, bias, pre, out, args);
}

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
