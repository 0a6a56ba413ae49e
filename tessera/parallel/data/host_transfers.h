#pragma once
// HostTransfers: the copies between a device and host memory that an offloaded optimizer makes
// each step (ZeRO-Offload, Ren et al. 2021): reduced gradients down, updated parameters up.
//
// On a CUDA device the host buffers are page-locked and the downloads run on the device's copy
// stream, each followed by an event the host waits on before it reads that buffer. A download
// first waits for an event from the stream whose work wrote its source: the compute stream
// (kernels), or the communication stream (a collective's result, which then comes down while
// backward goes on); or, for the further pieces of one snapshot, only for the downloads before
// it. On their own stream, downloads never hold up a collective queued after them. The uploads
// of the updated parameters run on the communication stream without the host waiting: the
// all-gather queued after each upload there sees it, and end_uploads() makes the compute stream
// wait. On the CPU there is nothing to move: buffers are plain host memory and a transfer is a
// copy.
//
//   HostTransfers t(Device::cuda());
//   Tensor host = t.host_empty(n, DType::f32);
//   int ticket = t.download(device_grad, host);  // after the kernels queued so far
//   t.wait(ticket);                              // host may now read `host`
//   t.end_downloads();

#include <cstdint>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::parallel {

class HostTransfers {
 public:
  explicit HostTransfers(Device device);
  ~HostTransfers();
  HostTransfers(const HostTransfers&) = delete;
  HostTransfers& operator=(const HostTransfers&) = delete;

  Device device() const { return device_; }
  // A contiguous [numel] host tensor, page-locked when the device is a GPU, zero-filled.
  Tensor host_empty(int64_t numel, DType dtype) const;

  // What a download waits for on the device before it reads its source: the work queued so far
  // on the compute stream (kernels wrote it), on the communication stream (a collective wrote
  // it: Work::on_comm_stream), or only the downloads started before it (more of one snapshot,
  // whose first download waited for what wrote them all).
  enum class After : uint8_t { compute, comm, previous };
  // Starts copying contiguous device tensor `src` into host tensor `dst` (same dtype and
  // element count); returns the ticket to wait on.
  int download(const Tensor& src, const Tensor& dst, After after = After::compute);
  // Blocks until download `ticket` has landed.
  void wait(int ticket);
  // Waits for every download still in flight and forgets the tickets.
  void end_downloads();

  // Starts copying host tensor `src` (host_empty's) into contiguous device tensor `dst` on the
  // communication stream, after the device work queued so far (which may still use dst's
  // memory); a collective queued after it on that stream sees it. Returns at once on a GPU:
  // `src` must not change until the compute stream has passed end_uploads() (the next step's
  // downloads wait for that).
  void upload(const Tensor& src, const Tensor& dst);
  // The compute stream waits for every upload started so far (the host does not).
  void end_uploads();
  // The host waits for them: before it rewrites a buffer an upload may still read.
  void sync_uploads();

 private:
  Device device_;
  bool streams_ = false;  // a CUDA backend with StreamOrder serves device_
  std::vector<void*> events_;
  std::vector<bool> waited_;
  bool uploads_pending_ = false;
  void* uploads_done_ = nullptr;  // recorded by the last end_uploads()
};

}  // namespace tessera::parallel
