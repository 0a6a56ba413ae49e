// HostTransfers' downloads on the simulated device with deferred streams, where queued work
// runs only when something waits for it: each download must wait for the stream whose work
// wrote its source, or it reads the bytes from before that work, as on a GPU whose streams
// run in any order. What must hold:
//  - After::compute sees a kernel still queued on the compute stream;
//  - After::comm sees a write still queued on the communication stream (what a collective's
//    result is there);
//  - After::previous sees what the download before it waited for (one snapshot's pieces);
//  - a download runs on the copy stream, so a collective queued after it on the communication
//    stream does not have to wait for it.
// (The suite is named for the in-process binary's one-rank filter; it is not a rank test.)

#include <gtest/gtest.h>

#if defined(TESSERA_HAS_CUDA)

#include <vector>

#include "tessera/cuda/cuda.h"
#include "tessera/cuda/sim/streams.h"
#include "tessera/cuda/stream_order.h"
#include "tessera/parallel/data/host_transfers.h"
#include "tessera/tessera.h"

namespace tessera::parallel {
namespace {

using After = HostTransfers::After;

TEST(HostTransfersN1, ADownloadWaitsForTheStreamThatWroteItsSource) {
  cuda::use_simulated_device();
  cuda::sim::ScopedStreamMode deferred(cuda::sim::StreamMode::deferred);
  cuda::StreamOrder& order = cuda::stream_order();
  HostTransfers transfers(Device::cuda());
  constexpr int64_t n = 1000;
  const std::vector<float> twos(n, 2.0f), threes(n, 3.0f), fives(n, 5.0f);

  // A kernel queued on the compute stream, not run yet.
  Tensor a = ops::to(full({n}, 1.0), Device::cuda());
  Tensor b = ops::to(full({n}, 1.0), Device::cuda());
  ops::mul_(a, 2.0);
  ops::mul_(b, 5.0);
  Tensor ha = transfers.host_empty(n, DType::f32), hb = transfers.host_empty(n, DType::f32);
  transfers.download(a, ha, After::compute);
  // Queued behind the first on the copy stream: it sees what the first waited for.
  const int second = transfers.download(b, hb, After::previous);
  transfers.wait(second);
  EXPECT_EQ(to_vector<float>(hb), fives) << "After::previous read b before its kernel ran";
  transfers.end_downloads();
  EXPECT_EQ(to_vector<float>(ha), twos) << "After::compute read a before its kernel ran";

  // A write queued on the communication stream, as a collective's result is (an upload from
  // host memory stands in for it): a download after the communication stream sees it.
  Tensor three = transfers.host_empty(n, DType::f32);
  ops::copy_(three, full({n}, 3.0));
  order.copy_async(a.data_ptr(), three.data_ptr(), size_t(n) * 4, /*to_host=*/false,
                   order.comm_stream());
  const int after_comm = transfers.download(a, ha, After::comm);
  transfers.wait(after_comm);
  EXPECT_EQ(to_vector<float>(ha), threes) << "After::comm read a before the write queued there ran";
  transfers.end_downloads();

  // The communication stream does not carry the downloads: running it up to a later point
  // (what a collective queued after a download waits for) leaves the download queued.
  Tensor hc = transfers.host_empty(n, DType::f32);
  transfers.download(a, hc, After::compute);
  void* later = order.record_event(order.comm_stream());
  order.event_synchronize(later);
  order.destroy_event(later);
  EXPECT_EQ(to_vector<float>(hc), std::vector<float>(n, 0.0f))
      << "the download ran with the communication stream";
  transfers.end_downloads();
  EXPECT_EQ(to_vector<float>(hc), threes);
  backend_for(Device::cuda()).synchronize();
}

}  // namespace
}  // namespace tessera::parallel

#endif  // TESSERA_HAS_CUDA
