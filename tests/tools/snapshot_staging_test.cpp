// A GPU checkpoint's snapshot (train/detail/snapshot_staging.h) on the simulated device with
// deferred streams, where queued work runs only when something waits for it: the state's last
// update is queued, not run, when the save starts, as it is on a GPU that runs behind the host.
//   stream  settle() runs it; the writer thread then reads the state through one chunk of
//           host memory while the caller goes on, and the caller's next update waits for it;
//   staged  the downloads are ordered after it on the side stream, and land before the write.

#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>

#include "tessera/cuda/cuda.h"
#include "tessera/cuda/sim/streams.h"
#include "tessera/nn/io/checkpoint_writer.h"
#include "tessera/nn/io/local_checkpoint.h"
#include "tessera/tessera.h"
#include "tessera/train/detail/snapshot_staging.h"
#include "tools/tools_test_util.h"

namespace tessera::train {
namespace {

using cli::testing::ScratchDir;
using Snapshot = nn::CheckpointWriter::Snapshot;

const nlohmann::json kFingerprint = {{"test", "snapshot_staging"}};

// Bit equality (both on the host).
bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::equal(static_cast<const char*>(a.data_ptr()),
                    static_cast<const char*>(a.data_ptr()) + a.nbytes(),
                    static_cast<const char*>(b.data_ptr()));
}

struct DeviceState {
  nn::StateDict live;  // on the device, the last update queued
  nn::StateDict want;  // on the host: what the update leaves
};

// 4,000 bytes of f32 (four 1,000-byte chunks) and an odd-sized bf16 tensor (370 bytes), each
// doubled by a kernel that is queued when this returns.
DeviceState state_with_a_queued_update() {
  Generator gen(11);
  DeviceState s;
  for (auto [name, t] : {std::pair{"master", randn({1000}, gen)},
                         std::pair{"exp_avg", randn({37, 5}, gen, DType::bf16)}}) {
    Tensor d = ops::to(t, Device::cuda());
    ops::mul_(d, 2.0);
    s.live.emplace_back(name, d);
    s.want.emplace_back(name, ops::mul(t, 2.0));
  }
  return s;
}

TEST(SnapshotStaging, AStreamReadsTheSettledStateThroughOneChunk) {
  cuda::use_simulated_device();
  cuda::sim::ScopedStreamMode deferred(cuda::sim::StreamMode::deferred);
  ScratchDir dir;
  DeviceState s = state_with_a_queued_update();
  SnapshotStaging staging(Device::cuda());
  const std::shared_ptr<nn::ChunkedReads> reads = staging.chunked_reads(1000);
  // The writer's reads, counted on its thread.
  std::mutex mutex;
  int calls = 0;
  size_t largest = 0;
  auto counted = std::make_shared<nn::ChunkedReads>(*reads);
  counted->read = [&, read = reads->read](void* dst, const Tensor& src, size_t offset,
                                          size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      ++calls;
      largest = std::max(largest, bytes);
    }
    read(dst, src, offset, bytes);
  };
  nn::CheckpointWriter writer;
  writer.set_chunked_reads(counted);
  staging.settle();  // what the trainer does at a streamed save of GPU state
  writer.save_local((dir / "rank"), 7, s.live, kFingerprint, nlohmann::json::object(),
                    Snapshot::stream);
  EXPECT_EQ(writer.pending_bytes(), 1000) << "a streamed save holds one chunk of host memory";
  writer.wait_for_snapshot();
  for (auto& [name, t] : s.live) ops::fill_(t, -1.0);  // the next update, allowed from here
  writer.wait();
  EXPECT_EQ(writer.last_snapshot_bytes(), 1000);
  const nn::LocalCheckpoint got = nn::load_local_checkpoint(dir / "rank", 7, kFingerprint);
  ASSERT_EQ(got.tensors.size(), 2u);
  for (size_t i = 0; i < 2; ++i)
    EXPECT_TRUE(same_bits(got.tensors[i].second, s.want[i].second))
        << got.tensors[i].first << ": not the state the queued update leaves";
  EXPECT_EQ(calls, 4 + 1) << "4,000 bytes in chunks of 1,000, then 370";
  EXPECT_EQ(largest, 1000u);
}

TEST(SnapshotStaging, StagedDownloadsLandBeforeTheWrite) {
  cuda::use_simulated_device();
  cuda::sim::ScopedStreamMode deferred(cuda::sim::StreamMode::deferred);
  ScratchDir dir;
  DeviceState s = state_with_a_queued_update();
  SnapshotStaging staging(Device::cuda());
  nn::StateDict views = s.live;
  std::vector<Tensor*> tensors;
  for (auto& [name, t] : views) tensors.push_back(&t);
  EXPECT_EQ(staging.stage(tensors), 4000 + 370);
  for (const auto& [name, t] : views) EXPECT_TRUE(t.device().is_cpu()) << name;
  nn::CheckpointWriter writer;
  writer.save_local(
      dir / "rank", 3, views, kFingerprint, nlohmann::json::object(), Snapshot::staged,
      [&] { staging.land(); }, 4000 + 370);
  writer.wait_for_snapshot();
  for (auto& [name, t] : s.live) ops::fill_(t, -1.0);
  writer.wait();
  const nn::LocalCheckpoint got = nn::load_local_checkpoint(dir / "rank", 3, kFingerprint);
  ASSERT_EQ(got.tensors.size(), 2u);
  for (size_t i = 0; i < 2; ++i)
    EXPECT_TRUE(same_bits(got.tensors[i].second, s.want[i].second)) << got.tensors[i].first;
}

TEST(SnapshotStaging, ChunkedReadsAreForAGpuAndAStreamOfDeviceStateNeedsThem) {
  EXPECT_THROW(SnapshotStaging(Device::cpu()).chunked_reads(64), Error);
  cuda::use_simulated_device();
  ScratchDir dir;
  nn::CheckpointWriter writer;
  const nn::StateDict on_device = {{"master", ops::to(ones({4}), Device::cuda())}};
  try {
    writer.save_local(dir / "rank", 1, on_device, kFingerprint, nlohmann::json::object(),
                      Snapshot::stream);
    FAIL() << "a stream of device state without chunked reads was taken";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("'master' is on cuda:0 (use a copy, or set_chunked_reads)"),
        std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tessera::train
