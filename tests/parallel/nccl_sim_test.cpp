// The simulated NCCL (tessera/nccl_sim) under the NCCL communicator, on simulated devices:
// what only the simulation can show in CI. Built where TESSERA_NCCL=simulated.
//   - calls that differ between ranks (count, type, operation) are refused on every rank in
//     one line, where NCCL would hang or corrupt memory; the communicator works on after;
//   - sub-groups from ncclCommSplit, collectives and sends in deferred-stream mode (work runs
//     only when something needs it, the communication stream as late as possible);
//   - a planted missing stream_wait_event between a collective and the kernel reading its
//     result gives wrong values in deferred mode, and right ones with the wait.
// Values are small integers, exact in f32 and bf16: the comparisons are equalities.

#include <gtest/gtest.h>

#if defined(TESSERA_NCCL_SIMULATED)

#include <mpi.h>

#include <string>
#include <vector>

#include "support/error_of.h"
#include "tessera/cuda/cuda.h"
#include "tessera/cuda/sim/streams.h"
#include "tessera/parallel/comm/detail/nccl_communicator.h"
#include "tessera/tessera.h"

namespace tessera::parallel {
namespace {

using cuda::sim::ScopedStreamMode;
using cuda::sim::StreamMode;

std::shared_ptr<NcclCommunicator> world() {
  cuda::use_simulated_device();
  return NcclCommunicator::create(MPI_COMM_WORLD, "world");
}

Tensor on_device(std::vector<float> v) {
  const int64_t n = int64_t(v.size());
  return ops::to(from_vector<float>(std::move(v), {n}), Device::cuda());
}

std::vector<float> host(const Tensor& t) {
  return to_vector<float>(ops::cast(ops::to(t, Device::cpu()), DType::f32));
}

using tessera::testing::error_of;

TEST(NcclSimN2, MismatchedCallsAreRefusedOnEveryRankInOneLine) {
  auto c = world();
  const int r = c->rank();
  // Rank 1 all-reduces 5 elements where rank 0 all-reduces 4.
  std::string msg = error_of([&] {
    Tensor x = zeros({4 + r}, DType::f32, Device::cuda());
    c->all_reduce(x);
    host(x);  // runs the stream in deferred mode
  });
  EXPECT_NE(msg.find("does not match"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ncclAllReduce of 4 float32 (sum)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ncclAllReduce of 5 float32 (sum)"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;

  // Another collective on each rank: all-reduce against all-gather.
  msg = error_of([&] {
    Tensor x = zeros({4}, DType::f32, Device::cuda());
    if (r == 0)
      c->all_reduce(x);
    else
      c->all_gather(zeros({2}, DType::f32, Device::cuda()), x);
    host(x);
  });
  EXPECT_NE(msg.find("ncclAllGather of 2 float32"), std::string::npos) << msg;

  // A send of 3 against a receive of 4: both ranks refuse it.
  msg = error_of([&] {
    Tensor x = zeros({3 + r}, DType::f32, Device::cuda());
    if (r == 0)
      c->send(x, 1);
    else
      c->recv(x, 0);
    host(x);
  });
  EXPECT_NE(msg.find("does not match its peer's"), std::string::npos) << msg;

  // Nothing is left half-done: the communicator still works.
  Tensor y = on_device({float(r), 1});
  c->all_reduce(y);
  EXPECT_EQ(host(y), (std::vector<float>{1, 2}));
}

TEST(NcclSimN2, MissingWaitAfterACollectiveShowsInDeferredMode) {
  auto c = world();
  const int r = c->rank();
  ScopedStreamMode deferred(StreamMode::deferred);
  // x = [r + 1, r + 1, ...]; all-reduce: 3 everywhere; the reader doubles it: 6.
  auto doubled_sum = [&] {
    Tensor x = ops::add(zeros({8}, DType::f32, Device::cuda()), double(r + 1));
    c->all_reduce(x);
    return host(ops::mul(x, 2.0));
  };
  EXPECT_EQ(doubled_sum(), std::vector<float>(8, 6.0f));
  NcclCommunicator::plant_missing_wait(true);
  const std::vector<float> planted = doubled_sum();
  NcclCommunicator::plant_missing_wait(false);
  // The reader ran before the all-reduce: it doubled this rank's own value.
  EXPECT_EQ(planted, std::vector<float>(8, 2.0f * float(r + 1)));
  cuda::sim::drain_all();
  c->barrier();
}

TEST(NcclSimN4, SplitGroupsInDeferredMode) {
  auto c = world();
  const int r = c->rank();
  ScopedStreamMode deferred(StreamMode::deferred);
  // Two groups {0, 2} and {1, 3} (color r % 2), ordered by rank.
  auto g = c->split(r % 2, r, "dp");
  ASSERT_EQ(g->size(), 2);
  EXPECT_EQ(g->rank(), r / 2);
  for (DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor x = ops::cast(on_device({float(r), float(10 * r)}), dtype);
    g->all_reduce(x);
    const float a = float(r % 2), b = float(r % 2 + 2);
    EXPECT_EQ(host(x), (std::vector<float>{a + b, 10 * (a + b)}));
    Tensor gathered = zeros({4}, dtype, Device::cuda());
    g->all_gather(ops::cast(on_device({float(r), 1}), dtype), gathered);
    EXPECT_EQ(host(gathered), (std::vector<float>{a, 1, b, 1}));
    Tensor part = zeros({1}, dtype, Device::cuda());
    g->reduce_scatter(ops::cast(on_device({float(r), float(2 * r)}), dtype), part);
    EXPECT_EQ(host(part), (std::vector<float>{g->rank() == 0 ? a + b : 2 * (a + b)}));
  }
  // A ring of sends over the world, each rank sending before it receives except rank 0.
  Tensor mine = on_device({float(r)}), got = zeros({1}, DType::f32, Device::cuda());
  const int next = (r + 1) % 4, prev = (r + 3) % 4;
  if (r == 0) {
    c->send(mine, next);
    c->recv(got, prev);
  } else {
    c->recv(got, prev);
    c->send(mine, next);
  }
  EXPECT_EQ(host(got), (std::vector<float>{float(prev)}));
  c->barrier();
}

// The widening reduce-scatter on the device: bf16 chunks through grouped sends and receives,
// summed in f32. Values 1 + k 2^-7 are exact in bf16; their sum over 4 ranks needs 2^-6
// resolution at 4, which bf16 lacks, so equality with the double sum shows f32 accumulation.
TEST(NcclSimN4, WideningReduceScatterSumsInF32InDeferredMode) {
  auto c = world();
  const int r = c->rank(), n = c->size();
  ScopedStreamMode deferred(StreamMode::deferred);
  auto value = [](int rank, int64_t i) { return 1.0f + float((rank + 3 * i) % 8) / 128.0f; };
  const int64_t chunk = 5;
  std::vector<float> v;
  for (int64_t i = 0; i < chunk * n; ++i) v.push_back(value(r, i));
  const Tensor in = ops::cast(on_device(v), DType::bf16);
  Tensor out = zeros({chunk}, DType::f32, Device::cuda());
  c->traffic().reset();
  c->reduce_scatter(in, out, CommOp::avg);
  std::vector<float> want;
  for (int64_t i = 0; i < chunk; ++i) {
    double sum = 0;
    for (int k = 0; k < n; ++k) sum += value(k, r * chunk + i);
    want.push_back(float(sum / n));  // n = 4: the scaling is exact
  }
  EXPECT_EQ(host(out), want);
  EXPECT_EQ(c->traffic().message_bytes(CommKind::reduce_scatter), 2 * chunk * n);
  c->barrier();
}

}  // namespace
}  // namespace tessera::parallel

#endif  // TESSERA_NCCL_SIMULATED
