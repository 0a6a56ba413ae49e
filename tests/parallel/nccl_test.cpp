// The NCCL communicator on CUDA tensors, over whichever NCCL the build has (TESSERA_NCCL):
//   simulated  every rank registers the simulated device, and the same tests run in CI under
//              mpiexec, with the simulated NCCL's own checks (mismatched calls refused) and a
//              planted missing stream wait that the deferred streams expose;
//   real       the tests need a GPU per rank and skip, saying so, without one; the device
//              check (bench/gpu_check.sh) runs NcclN1 on one GPU (NCCL allows one rank per
//              GPU), NcclN2 under `mpiexec -n 2` where two GPUs are visible.
//
// Every value compared is a small integer, exact in every dtype used (bf16 holds integers to
// 256 exactly), and sums of them are exact: the comparisons are equalities.

#include <gtest/gtest.h>

#if defined(TESSERA_HAS_NCCL)

#include <mpi.h>

#include <functional>
#include <string>
#include <vector>

#include "parallel/nccl_test_device.h"
#include "support/error_of.h"
#include "tessera/cuda/cuda.h"
#include "tessera/parallel/comm/detail/nccl_communicator.h"
#include "tessera/tessera.h"

namespace tessera::parallel {
namespace {

int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

#define NCCL_TEST_NEEDS_GPUS(ranks)                                              \
  do {                                                                           \
    if (world_size() != (ranks)) GTEST_SKIP() << "needs mpiexec -n " << (ranks); \
    const std::string reason = testing::open_nccl_device();                      \
    if (!reason.empty()) GTEST_SKIP() << reason;                                 \
  } while (0)

// 0, 1, ..., n-1 plus `base`, in `dtype`, on the GPU.
Tensor seq(int64_t n, double base, DType dtype = DType::f32) {
  return arange(base, base + double(n), 1.0, dtype, Device::cuda());
}

std::vector<double> host(const Tensor& t) {
  return to_vector<double>(ops::to(t, Device::cpu()));
}

std::vector<double> iota(int64_t n, double base, double scale = 1.0) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = scale * (base + double(i));
  return v;
}

using tessera::testing::error_of;

#if defined(TESSERA_HAS_CUDA)
TEST(NcclN1, WithoutGpuCreationFailsWithOneClearLine) {
  if (cuda::device_count() > 0) GTEST_SKIP() << "a GPU is visible; the other tests use it";
  if (cuda::device_is_simulated()) GTEST_SKIP() << "an earlier test registered the simulator";
  const std::string msg = error_of([] { NcclCommunicator::create(MPI_COMM_WORLD, "world"); });
  EXPECT_NE(msg.find("no CUDA device to put NCCL on"), std::string::npos) << msg;
  EXPECT_NE(msg.find("0 CUDA device(s) visible"), std::string::npos) << msg;
  EXPECT_NE(msg.find("group world"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}
#endif

TEST(NcclN1, CollectivesOnOneRankInEveryDtype) {
  NCCL_TEST_NEEDS_GPUS(1);
  auto c = NcclCommunicator::create(MPI_COMM_WORLD, "world");
  EXPECT_EQ(c->size(), 1);
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    // A group of one: reduce-scatter and all-gather copy (through NCCL); all-reduce and
    // broadcast return at once (Communicator skips groups of one).
    Tensor in = seq(6, 1, dtype), out = zeros({6}, dtype, Device::cuda());
    c->reduce_scatter(in, out);
    EXPECT_EQ(host(out), iota(6, 1));
    Tensor gathered = zeros({6}, dtype, Device::cuda());
    c->all_gather(in, gathered);
    EXPECT_EQ(host(gathered), iota(6, 1));
    c->all_reduce(in, CommOp::max);
    c->broadcast(in, 0);
    EXPECT_EQ(host(in), iota(6, 1));
  }
  Tensor in = seq(4, 2), out = zeros({4}, DType::f32, Device::cuda());
  c->reduce_scatter(in, out, CommOp::avg);  // ncclAvg over one rank divides by one
  EXPECT_EQ(host(out), iota(4, 2));
  c->barrier();
}

TEST(NcclN1, CollectiveSeesComputeStreamWritesAndComputeSeesResult) {
  NCCL_TEST_NEEDS_GPUS(1);
  auto c = NcclCommunicator::create(MPI_COMM_WORLD, "world");
  // On a GPU, large enough that the kernels producing `in` are still running when the
  // collective is queued: without the event the copy would read stale values. The simulator
  // shows the same in deferred-stream mode at any size (nccl_sim_test.cpp).
#if defined(TESSERA_NCCL_SIMULATED)
  const int64_t n = int64_t(1) << 10;
#else
  const int64_t n = int64_t(1) << 22;
#endif
  for (int round = 0; round < 3; ++round) {
    Tensor in = ops::mul(seq(n, 0), double(round + 1));
    Tensor out = zeros({n}, DType::f32, Device::cuda());
    auto work = c->reduce_scatter_async(in, out);
    work->wait();  // stream-ordered: the next kernel (the copy to the host) waits for it
    Tensor back = ops::to(out, Device::cpu());
    std::vector<float> v = to_vector<float>(back);
    // (round + 1) * i is an integer below 2^24 * 3 / 4 for every checked i: exact in f32.
    for (int64_t i : {int64_t(0), int64_t(1), n / 2, n - 1})
      EXPECT_EQ(v[size_t(i)], float(round + 1) * float(i)) << "round " << round << " i " << i;
  }
}

TEST(NcclN1, BlockingWaitAndSplit) {
  NCCL_TEST_NEEDS_GPUS(1);
  auto c = NcclCommunicator::create(MPI_COMM_WORLD, "world", CommOptions{30.0}, NcclWait::blocking);
  Tensor in = seq(8, 3, DType::i64), out = zeros({8}, DType::i64, Device::cuda());
  auto work = c->all_gather_async(in, out);
  work->wait();
  EXPECT_TRUE(work->test());  // blocking mode: the host saw the event complete
  EXPECT_EQ(host(out), iota(8, 3));

  c->set_step(5);
  auto child = c->split(0, 0, "tp");
  EXPECT_EQ(child->name(), "tp");
  EXPECT_EQ(child->size(), 1);
  EXPECT_EQ(child->step(), 5);  // splits share the step counter
  Tensor half = zeros({8}, DType::i64, Device::cuda());
  child->reduce_scatter(in, half);
  EXPECT_EQ(host(half), iota(8, 3));
  child->barrier();
}

TEST(NcclN1, BadTensorsNameTheCollective) {
  NCCL_TEST_NEEDS_GPUS(1);
  auto c = NcclCommunicator::create(MPI_COMM_WORLD, "world");
  // CPU tensors travel through device copies; a call mixing devices is refused.
  Tensor cpu_in = arange(0.0, 4.0, 1.0, DType::f32), cpu_out = zeros({4});
  c->reduce_scatter(cpu_in, cpu_out);
  EXPECT_EQ(to_vector<double>(cpu_out), iota(4, 0));
  std::string msg = error_of([&] { c->all_gather(seq(4, 0), zeros({4})); });
  EXPECT_NE(msg.find("all_gather on group world"), std::string::npos) << msg;
  EXPECT_NE(msg.find("on its device"), std::string::npos) << msg;
  EXPECT_NE(msg.find("on cpu"), std::string::npos) << msg;
  EXPECT_NE(msg.find("on cuda:0"), std::string::npos) << msg;

  Tensor wide = zeros({4, 6}, DType::f32, Device::cuda());
  msg = error_of(
      [&] { c->all_gather(ops::transpose(wide, 0, 1), zeros({24}, DType::f32, Device::cuda())); });
  EXPECT_NE(msg.find("must be contiguous"), std::string::npos) << msg;

  msg = error_of([&] {
    c->reduce_scatter(seq(4, 0, DType::i32), zeros({4}, DType::i32, Device::cuda()), CommOp::avg);
  });
  EXPECT_NE(msg.find("reduce_scatter avg"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not floating"), std::string::npos) << msg;
}

TEST(NcclN2, CollectivesAndSendRecv) {
  NCCL_TEST_NEEDS_GPUS(2);
  auto c = NcclCommunicator::create(MPI_COMM_WORLD, "world");
  const int r = c->rank();
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    // Rank r holds base 10r + i: the sum is 10 + 2i, the max 10 + i.
    Tensor x = seq(5, 10 * r, dtype);
    c->all_reduce(x);
    EXPECT_EQ(host(x), iota(5, 5, 2.0));
    Tensor m = seq(5, 10 * r, dtype);
    c->all_reduce(m, CommOp::max);
    EXPECT_EQ(host(m), iota(5, 10));
    Tensor in = seq(6, 10 * r, dtype), out = zeros({3}, dtype, Device::cuda());
    c->reduce_scatter(in, out);
    EXPECT_EQ(host(out), iota(3, 5 + 3 * r, 2.0));
    Tensor gathered = zeros({6}, dtype, Device::cuda());
    c->all_gather(seq(3, 10 * r, dtype), gathered);
    std::vector<double> want = iota(3, 0);
    for (double v : iota(3, 10)) want.push_back(v);
    EXPECT_EQ(host(gathered), want);
    Tensor b = seq(4, 10 * r, dtype);
    c->broadcast(b, 1);
    EXPECT_EQ(host(b), iota(4, 10));
  }
  Tensor a = seq(4, 10 * r);
  c->all_reduce(a, CommOp::avg);  // ncclAvg: (i + 10 + i) / 2, exact
  EXPECT_EQ(host(a), iota(4, 5));

  // Sends and receives match in issue order: rank 0 sends first, rank 1 receives first.
  Tensor mine = seq(7, 100 * r), theirs = zeros({7}, DType::f32, Device::cuda());
  if (r == 0) {
    c->send(mine, 1);
    c->recv(theirs, 1);
  } else {
    c->recv(theirs, 0);
    c->send(mine, 0);
  }
  EXPECT_EQ(host(theirs), iota(7, 100 * (1 - r)));
  c->barrier();
}

}  // namespace
}  // namespace tessera::parallel

#endif  // TESSERA_HAS_NCCL
