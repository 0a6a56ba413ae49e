// Collectives and point-to-point transfers over MPI, and the mesh's groups.

#include <gtest/gtest.h>

#include "parallel/rank_test.h"
#include "tessera/parallel/comm/local_communicator.h"
#include "tessera/parallel/mesh.h"
#include "tessera/tessera.h"

namespace tessera::parallel {
namespace {

std::shared_ptr<Communicator> world() {
  return testing::test_world();
}

// Values that differ per rank and element, exactly representable.
Tensor rank_tensor(int rank, int64_t n, double base = 0) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = float(base + rank * 1000 + i);
  return from_vector<float>(v, {n});
}

void collectives(Communicator& c) {
  const int r = c.rank(), n = c.size();
  // Sum over ranks of (rank*1000 + i) = 1000*n(n-1)/2 + n*i; odd length exercises padding.
  Tensor x = rank_tensor(r, 7);
  c.all_reduce(x);
  std::vector<float> got = to_vector<float>(x);
  for (int64_t i = 0; i < 7; ++i) EXPECT_EQ(got[size_t(i)], 1000.f * n * (n - 1) / 2 + n * i);
  Tensor a = rank_tensor(r, 5);
  c.all_reduce(a, CommOp::avg);
  EXPECT_EQ(to_vector<float>(a)[0], 1000.f * (n - 1) / 2);
  Tensor m = rank_tensor(r, 3);
  c.all_reduce(m, CommOp::max);
  EXPECT_EQ(to_vector<float>(m)[2], float(1000 * (n - 1) + 2));
  Tensor ids = from_vector<int64_t>({int64_t(r), 1}, {2});
  c.all_reduce(ids);
  EXPECT_EQ(to_vector<int64_t>(ids), (std::vector<int64_t>{int64_t(n) * (n - 1) / 2, n}));

  // reduce_scatter: chunk k of the sum lands on rank k.
  Tensor in = rank_tensor(r, 4 * n), out = empty({4});
  c.reduce_scatter(in, out);
  EXPECT_EQ(to_vector<float>(out)[1], 1000.f * n * (n - 1) / 2 + n * (4 * r + 1));
  // all_gather: rank order.
  Tensor gathered = empty({3 * n});
  c.all_gather(rank_tensor(r, 3), gathered);
  std::vector<float> g = to_vector<float>(gathered);
  for (int k = 0; k < n; ++k) EXPECT_EQ(g[size_t(3 * k + 2)], float(1000 * k + 2));
  // broadcast from the last rank.
  Tensor b = rank_tensor(r, 4);
  c.broadcast(b, n - 1);
  EXPECT_EQ(to_vector<float>(b)[3], float(1000 * (n - 1) + 3));
}

// Values 1 + k 2^-7 (k < 8) are exact in bf16. Their sum over 2 or 4 ranks is exact in f32 but
// not in bf16 (4.046875 needs 2^-6 resolution where bf16 has 2^-5 at 4): equality with the
// double sum shows the chunks were added in f32, not in 16 bits.
float widening_value(int rank, int64_t i) {
  return 1.0f + float((rank + i * 3) % 8) / 128.0f;
}

void widening_reduce_scatter(Communicator& c) {
  const int r = c.rank(), n = c.size();
  const int64_t chunk = 9;  // odd: no vector-width luck
  std::vector<float> v;
  for (int64_t i = 0; i < chunk * n; ++i) v.push_back(widening_value(r, i));
  const Tensor in = ops::cast(from_vector<float>(v, {chunk * n}), DType::bf16);
  for (CommOp op : {CommOp::sum, CommOp::avg}) {
    Tensor out = empty({chunk}, DType::f32);
    c.reduce_scatter(in, out, op);
    const std::vector<float> got = to_vector<float>(out);
    for (int64_t i = 0; i < chunk; ++i) {
      double sum = 0;
      for (int k = 0; k < n; ++k) sum += widening_value(k, r * chunk + i);
      // avg: the f32 sum times 1/n, exact for n a power of two.
      EXPECT_EQ(got[size_t(i)], float(op == CommOp::avg ? sum / n : sum)) << comm_op_name(op) << i;
    }
  }
  // max does not widen, and a narrowing pair is refused.
  EXPECT_THROW(c.reduce_scatter(in, empty({chunk}, DType::f32), CommOp::max), Error);
  EXPECT_THROW(c.reduce_scatter(ops::cast(in, DType::f32), empty({chunk}, DType::bf16)), Error);
}

// The traffic counters against the sizes of the calls, with a split child sharing them.
void traffic(Communicator& c) {
  const int n = c.size();
  auto child = c.split(0, c.rank(), "child");
  c.traffic().reset();
  Tensor x = zeros({7});
  c.all_reduce(x);
  c.reduce_scatter(zeros({4 * n}), empty({4}));
  child->all_gather(zeros({3}), empty({3 * n}));
  c.broadcast(zeros({4}), 0);
  const CommTraffic& t = c.traffic();
  EXPECT_EQ(&child->traffic(), &t);
  const int64_t many = n > 1 ? 1 : 0;  // a group of one moves nothing
  EXPECT_EQ(t.calls(CommKind::all_reduce), many);
  EXPECT_EQ(t.message_bytes(CommKind::all_reduce), many * 28);
  EXPECT_EQ(t.wire_bytes(CommKind::all_reduce), many * 2 * (n - 1) * 28 / n);
  EXPECT_EQ(t.message_bytes(CommKind::reduce_scatter), many * 16 * n);
  EXPECT_EQ(t.wire_bytes(CommKind::reduce_scatter), many * 16 * (n - 1));
  EXPECT_EQ(t.message_bytes(CommKind::all_gather), many * 12 * n);
  EXPECT_EQ(t.wire_bytes(CommKind::all_gather), many * 12 * (n - 1));
  EXPECT_EQ(t.wire_bytes(CommKind::broadcast), many * 16);
  EXPECT_EQ(t.total_wire_bytes(), many * (2 * (n - 1) * 28 / n + 28 * (n - 1) + 16));
  // A bf16 reduce-scatter carries half the bytes.
  c.traffic().reset();
  c.reduce_scatter(zeros({4 * n}, DType::bf16), empty({4}));
  EXPECT_EQ(t.message_bytes(CommKind::reduce_scatter), many * 8 * n);
}

RANK_TEST(CommunicatorN1, LocalGroupIsIdentity) {
  LocalCommunicator c;
  collectives(c);
  EXPECT_THROW(c.send(zeros({2}), 1), Error);
}

RANK_TEST(CommunicatorN2, CollectivesOverMpi) {
  collectives(*world());
}
RANK_TEST(CommunicatorN4, CollectivesOverMpi) {
  collectives(*world());
}

RANK_TEST(CommunicatorN1, WideningReduceScatterAndTraffic) {
  LocalCommunicator c;
  widening_reduce_scatter(c);
  traffic(c);
}
RANK_TEST(CommunicatorN2, WideningReduceScatterSumsInF32) {
  widening_reduce_scatter(*world());
}
RANK_TEST(CommunicatorN4, WideningReduceScatterSumsInF32) {
  widening_reduce_scatter(*world());
}
RANK_TEST(CommunicatorN2, TrafficCountsMessageAndWireBytes) {
  traffic(*world());
}
RANK_TEST(CommunicatorN4, TrafficCountsMessageAndWireBytes) {
  traffic(*world());
}

RANK_TEST(CommunicatorN2, SendRecvAndAsyncOverlap) {
  auto c = world();
  int peer = 1 - c->rank();
  Tensor out = rank_tensor(c->rank(), 6), in = empty({6});
  // Post both directions before waiting: no deadlock with async forms.
  auto s = c->send_async(out, peer, 7);
  auto r = c->recv_async(in, peer, 7);
  r->wait();
  s->wait();
  EXPECT_EQ(to_vector<float>(in)[5], float(1000 * peer + 5));
  // Several all-reduces in flight at once complete independently.
  Tensor x = ones({3}), y = full({5}, 2.0);
  auto wx = c->all_reduce_async(x), wy = c->all_reduce_async(y);
  wy->wait();
  wx->wait();
  EXPECT_EQ(to_vector<float>(x)[0], 2.f);
  EXPECT_EQ(to_vector<float>(y)[4], 4.f);
}

RANK_TEST(CommunicatorN2, BadArgumentsAreErrorsNamingTheGroup) {
  auto c = world();
  EXPECT_THROW(c->all_gather(zeros({3}), zeros({5})), Error);
  EXPECT_THROW(c->send(zeros({2}), c->rank()), Error);
  try {
    c->all_reduce(ops::transpose(zeros({2, 3}), 0, 1));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("group world"), std::string::npos) << e.what();
  }
  Tensor half = ops::cast(zeros({2}), DType::bf16);
  EXPECT_THROW(c->all_reduce(half), Error);
}

RANK_TEST(MeshN8, GroupsFollowTpFastestOrder) {
  auto w = world();
  DeviceMesh mesh(w, {2, 2, 2});
  int r = w->rank();
  EXPECT_EQ(mesh.tp_rank(), r % 2);
  EXPECT_EQ(mesh.pp_rank(), (r / 2) % 2);
  EXPECT_EQ(mesh.dp_rank(), r / 4);
  EXPECT_EQ(
      mesh.world_rank({{"dp", mesh.dp_rank()}, {"pp", mesh.pp_rank()}, {"tp", mesh.tp_rank()}}), r);
  // Summing world ranks over each group identifies its members.
  auto group_sum = [&](Communicator& g) {
    Tensor t = from_vector<int64_t>({int64_t(r)}, {1});
    g.all_reduce(t);
    return t.item<int64_t>();
  };
  EXPECT_EQ(group_sum(mesh.tp()), 2 * (r - r % 2) + 1);
  EXPECT_EQ(group_sum(mesh.pp()), (r - (r / 2 % 2) * 2) * 2 + 2);
  EXPECT_EQ(group_sum(mesh.dp()), (r % 4) * 2 + 4);
  ASSERT_NE(mesh.embedding(), nullptr);  // pp = 2: every stage is first or last
  EXPECT_EQ(mesh.embedding()->size(), 2);
}

// A fourth axis (context parallelism, say) between dp and pp: the mesh builds its group like
// the others', with no code that knows the name.
RANK_TEST(MeshN8, AnAddedAxisGetsItsOwnGroup) {
  auto w = world();
  DeviceMesh mesh(w, MeshShape({{"dp", 2}, {"cp", 2}, {"pp", 1}, {"tp", 2}}));
  const int r = w->rank();
  EXPECT_EQ(mesh.shape().to_string(), "dp2 x cp2 x pp1 x tp2");
  EXPECT_EQ(mesh.rank("tp"), r % 2);
  EXPECT_EQ(mesh.rank("cp"), (r / 2) % 2);
  EXPECT_EQ(mesh.rank("dp"), r / 4);
  EXPECT_EQ(mesh.rank("ep"), 0);  // an axis the shape lacks has one rank
  EXPECT_EQ(mesh.shape().size("ep"), 1);
  auto members = [&](Communicator& g) {
    Tensor t = from_vector<int64_t>({int64_t(1) << r}, {1});
    g.all_reduce(t);
    return t.item<int64_t>();
  };
  // cp pairs ranks 2 apart with equal dp and tp: {0, 2}, {1, 3}, {4, 6}, {5, 7}.
  const int base = r - ((r / 2) % 2) * 2;
  EXPECT_EQ(members(mesh.group("cp")), (int64_t(1) << base) | (int64_t(1) << (base + 2)));
  EXPECT_EQ(mesh.group("cp").size(), 2);
  EXPECT_EQ(mesh.group("cp").rank(), mesh.rank("cp"));
  EXPECT_EQ(mesh.group("pp").size(), 1);
  EXPECT_EQ(mesh.embedding(), nullptr);
  // The rank 'across' in cp, everything else kept.
  EXPECT_EQ(mesh.world_rank({{"cp", 1 - mesh.rank("cp")}}), r ^ 2);
  EXPECT_THROW(mesh.group("ep"), Error);
  EXPECT_THROW(mesh.world_rank({{"cp", 2}}), Error);
}

RANK_TEST(MeshN4, BadAxesAreRefusedByName) {
  auto refused = [&](MeshShape shape, const std::string& want) {
    try {
      DeviceMesh mesh(world(), std::move(shape));
      ADD_FAILURE() << "accepted " << want;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  refused(MeshShape({{"dp", 2}, {"dp", 2}}), "axis dp appears twice");
  refused(MeshShape({{"dp", 4}, {"tp", 0}}), "axis tp has size 0");
  refused(MeshShape({{"", 4}}), "axis 0 has no name");
}

RANK_TEST(MeshN4, WrongShapeIsOneClearError) {
  try {
    DeviceMesh mesh(world(), {2, 1, 3});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("but there are 4 ranks"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera::parallel
