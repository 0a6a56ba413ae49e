#include "tessera/parallel/comm/thread_communicator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>

#include "tessera/core/empty.h"
#include "tessera/core/error.h"
#include "tessera/core/ops/elementwise.h"
#include "tessera/core/ops/movement.h"
#include "tessera/parallel/comm/detail/poll_until_done.h"

namespace tessera::parallel {

namespace thread_comm {

// One lock and one condition variable for the whole world: every group's state is small and
// every transfer is a memcpy, so contention is not worth finer locks, and a failure has one
// place to wake every waiter from.
struct World {
  std::mutex mutex;
  std::condition_variable cv;
  std::string failure;  // "rank k failed: ...", "" while none
};

// The state a Work waits on (guarded by World::mutex).
struct Completion {
  bool done = false;
  std::string error;  // set with done: the operation failed (a mismatch)
};

enum class Kind : uint8_t { all_reduce, reduce_scatter, all_gather, broadcast, barrier, split };

// One rank's part of a collective.
struct Call {
  explicit Call(Kind k, CommOp o = CommOp::sum) : kind(k), op(o) {}
  Kind kind;
  CommOp op;
  int root = 0;
  Tensor in, out;  // all_reduce and broadcast: in only (in place)
  int color = 0, key = 0;
  std::string signature;  // what peers must agree on: "all_reduce sum of f32[7]"
};

struct Group;

// One collective of a group, from the first rank's call to the last.
struct Pending : Completion {
  explicit Pending(int n) : calls(size_t(n)) {}
  std::vector<std::optional<Call>> calls;
  int arrived = 0;
  std::vector<std::pair<std::shared_ptr<Group>, int>> split_result;  // per rank: group, rank
};

struct PostedRecv : Completion {
  Tensor x;
  std::string what;
};

struct Staged {
  Tensor data;
};

// The messages and receives between one (source, destination, tag); at most one side waits.
struct Channel {
  std::deque<Staged> sends;
  std::deque<std::shared_ptr<PostedRecv>> recvs;
};

struct Group {
  std::shared_ptr<World> world;
  std::vector<int> world_ranks;   // group rank -> world rank
  std::vector<int64_t> next_seq;  // per rank: the sequence number of its next collective
  std::map<int64_t, std::shared_ptr<Pending>> pending;
  std::map<std::tuple<int, int, int>, Channel> channels;  // (src, dst, tag)

  Group(std::shared_ptr<World> w, std::vector<int> ranks)
      : world(std::move(w)), world_ranks(std::move(ranks)), next_seq(world_ranks.size(), 0) {}
  int size() const { return int(world_ranks.size()); }
};

}  // namespace thread_comm

namespace {

using namespace thread_comm;

void check_cpu(const Tensor& t, const char* what) {
  TESSERA_CHECK(t.device().is_cpu(), what, ": the thread communicator carries CPU tensors, got ",
                t.describe());
}

void check_reducible(const Tensor& t, const char* what) {
  TESSERA_CHECK(t.dtype() != DType::bf16 && t.dtype() != DType::f16, what,
                ": the thread communicator cannot reduce ", t.describe(),
                " (16-bit floats, as with MPI); reduce in f32 on the CPU");
}

template <class T>
T max_of(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) ? a : b;
  }
  return b > a ? b : a;
}

// acc[i] = op over ranks, in rank order, of src[r][offset + i].
template <class T>
void reduce_typed(void* acc, const std::vector<const void*>& src, int64_t offset, int64_t n,
                  bool max) {
  T* out = static_cast<T*>(acc);
  for (int64_t i = 0; i < n; ++i) {
    T v = static_cast<const T*>(src[0])[offset + i];
    for (size_t r = 1; r < src.size(); ++r) {
      const T x = static_cast<const T*>(src[r])[offset + i];
      v = max ? max_of(v, x) : T(v + x);
    }
    out[i] = v;
  }
}

// The reduction of chunk [offset, offset + n) of every rank's tensor, avg scaled like MPI's.
Tensor reduce_chunk(const std::vector<const void*>& src, DType dtype, int64_t offset, int64_t n,
                    CommOp op) {
  Tensor acc = empty({n}, dtype);
  void* p = acc.data_ptr("thread communicator");
  const bool max = op == CommOp::max;
  switch (dtype) {
    case DType::f32:
      reduce_typed<float>(p, src, offset, n, max);
      break;
    case DType::f64:
      reduce_typed<double>(p, src, offset, n, max);
      break;
    case DType::i32:
      reduce_typed<int32_t>(p, src, offset, n, max);
      break;
    case DType::i64:
      reduce_typed<int64_t>(p, src, offset, n, max);
      break;
    default:
      TESSERA_ASSERT(false, "reducing ", dtype_name(dtype));
  }
  if (op == CommOp::avg) ops::mul_(acc, 1.0 / double(src.size()));
  return acc;
}

void copy_bytes(const Tensor& dst, size_t dst_offset, const void* src, size_t nbytes) {
  if (nbytes == 0) return;
  std::memmove(static_cast<char*>(dst.data_ptr("thread communicator")) + dst_offset, src, nbytes);
}

// Runs a collective once every rank has issued it (under the world lock).
void run(Group& g, Pending& p) {
  const int n = g.size();
  const Call& first = *p.calls[0];
  auto in_ptrs = [&] {
    std::vector<const void*> v;
    for (const auto& c : p.calls) v.push_back(c->in.data_ptr("thread communicator"));
    return v;
  };
  switch (first.kind) {
    case Kind::all_reduce: {
      Tensor acc = reduce_chunk(in_ptrs(), first.in.dtype(), 0, first.in.numel(), first.op);
      for (const auto& c : p.calls) copy_bytes(c->in, 0, acc.data_ptr(), c->in.nbytes());
      break;
    }
    case Kind::reduce_scatter: {
      // Every chunk first, then the outputs: an output may alias another rank's input.
      const int64_t chunk = first.out.numel();
      std::vector<Tensor> chunks;
      for (int r = 0; r < n; ++r)
        chunks.push_back(reduce_chunk(in_ptrs(), first.in.dtype(), r * chunk, chunk, first.op));
      for (int r = 0; r < n; ++r)
        copy_bytes(p.calls[size_t(r)]->out, 0, chunks[size_t(r)].data_ptr(),
                   p.calls[size_t(r)]->out.nbytes());
      break;
    }
    case Kind::all_gather: {
      const size_t bytes = first.in.nbytes();
      std::vector<char> staged(bytes * size_t(n));
      for (int r = 0; r < n; ++r)
        if (bytes)
          std::memcpy(staged.data() + bytes * size_t(r), p.calls[size_t(r)]->in.data_ptr(), bytes);
      for (const auto& c : p.calls) copy_bytes(c->out, 0, staged.data(), staged.size());
      break;
    }
    case Kind::broadcast: {
      const Tensor& src = p.calls[size_t(first.root)]->in;
      std::vector<char> staged(src.nbytes());
      std::memcpy(staged.data(), src.data_ptr(), staged.size());
      for (const auto& c : p.calls) copy_bytes(c->in, 0, staged.data(), staged.size());
      break;
    }
    case Kind::barrier:
      break;
    case Kind::split: {
      std::map<int, std::vector<std::pair<int, int>>> by_color;  // color -> (key, rank)
      for (int r = 0; r < n; ++r)
        by_color[p.calls[size_t(r)]->color].push_back({p.calls[size_t(r)]->key, r});
      p.split_result.resize(size_t(n));
      for (auto& [color, members] : by_color) {
        std::sort(members.begin(), members.end());
        std::vector<int> world_ranks;
        for (auto& [key, r] : members) world_ranks.push_back(g.world_ranks[size_t(r)]);
        auto child = std::make_shared<Group>(g.world, std::move(world_ranks));
        for (size_t i = 0; i < members.size(); ++i)
          p.split_result[size_t(members[i].second)] = {child, int(i)};
      }
      break;
    }
  }
  // Release the tensors now: the Work handles keep the Completion only.
  for (auto& c : p.calls) c.reset();
}

class ThreadWork final : public Work {
 public:
  ThreadWork(std::shared_ptr<World> world, std::shared_ptr<Completion> c,
             std::function<std::string()> describe, double timeout,
             std::shared_ptr<CommHealth> health)
      : world_(std::move(world)),
        c_(std::move(c)),
        describe_(std::move(describe)),
        timeout_(timeout),
        health_(std::move(health)),
        start_(std::chrono::steady_clock::now()) {}

  bool test() override {
    std::lock_guard<std::mutex> lock(world_->mutex);
    return check_locked();
  }

  void wait() override {
    // The condition variable wakes the wait at once; its short slices let poll_until_done
    // check the timeout and print the same line as the process-group communicators.
    poll_until_done(
        [this] {
          std::unique_lock<std::mutex> lock(world_->mutex);
          world_->cv.wait_for(lock, std::chrono::milliseconds(5),
                              [this] { return c_->done || !world_->failure.empty(); });
          return check_locked();
        },
        // Nothing to keep alive: a pending call holds its tensors until the last rank runs it.
        timeout_, start_, describe_, *health_, [] {});
  }

 private:
  bool check_locked() {
    if (c_->done) {
      if (!c_->error.empty()) throw Error(c_->error);
      return true;
    }
    if (!world_->failure.empty())
      throw Error(str_cat(world_->failure, " (while ", describe_(), " waited)"));
    return false;
  }

  std::shared_ptr<World> world_;
  std::shared_ptr<Completion> c_;
  std::function<std::string()> describe_;
  double timeout_;
  std::shared_ptr<CommHealth> health_;
  std::chrono::steady_clock::time_point start_;
};

std::string signature(const char* what, const Tensor& t) {
  return str_cat(what, " of ", dtype_name(t.dtype()), "[", t.numel(), "]");
}

}  // namespace

std::vector<std::shared_ptr<ThreadCommunicator>> ThreadCommunicator::create_world(
    int n, CommOptions options) {
  TESSERA_CHECK(n >= 1, "ThreadCommunicator::create_world: expected at least 1 rank, got ", n);
  auto world = std::make_shared<World>();
  std::vector<int> ranks(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) ranks[size_t(r)] = r;
  auto group = std::make_shared<Group>(world, ranks);
  std::vector<std::shared_ptr<ThreadCommunicator>> out;
  for (int r = 0; r < n; ++r)
    out.push_back(std::shared_ptr<ThreadCommunicator>(
        new ThreadCommunicator(group, r, "world", options, nullptr, nullptr, nullptr)));
  return out;
}

ThreadCommunicator::ThreadCommunicator(std::shared_ptr<Group> group, int rank, std::string name,
                                       CommOptions options,
                                       std::shared_ptr<std::atomic<int64_t>> step,
                                       std::shared_ptr<CommTraffic> traffic,
                                       std::shared_ptr<CommHealth> health)
    : Communicator(std::move(name), options, std::move(step), std::move(traffic),
                   std::move(health)),
      group_(std::move(group)),
      rank_(rank) {}

ThreadCommunicator::~ThreadCommunicator() = default;

int ThreadCommunicator::size() const {
  return group_->size();
}

void ThreadCommunicator::fail(const std::string& why) {
  World& w = *group_->world;
  {
    std::lock_guard<std::mutex> lock(w.mutex);
    if (w.failure.empty())
      w.failure = str_cat("rank ", group_->world_ranks[size_t(rank_)], " failed: ", why);
  }
  w.cv.notify_all();
}

std::string ThreadCommunicator::failure() const {
  std::lock_guard<std::mutex> lock(group_->world->mutex);
  return group_->world->failure;
}

std::shared_ptr<Pending> ThreadCommunicator::issue_pending(Call call) {
  World& w = *group_->world;
  std::shared_ptr<Pending> p;
  {
    std::lock_guard<std::mutex> lock(w.mutex);
    const int64_t seq = group_->next_seq[size_t(rank_)]++;
    auto& slot = group_->pending[seq];
    if (!slot) slot = std::make_shared<Pending>(size());
    p = slot;
    if (!p->done) {
      // Every rank's call must agree with the first one's; a mismatch fails all of them.
      for (int r = 0; r < size(); ++r) {
        const auto& other = p->calls[size_t(r)];
        if (other && other->signature != call.signature) {
          p->done = true;
          p->error = str_cat("collective mismatch on group ", name_, " (its collective #", seq,
                             "): rank ", r, " called ", other->signature, ", rank ", rank_,
                             " called ", call.signature);
          break;
        }
      }
    }
    p->calls[size_t(rank_)] = std::move(call);
    if (++p->arrived == size()) {
      if (!p->done) run(*group_, *p);
      p->done = true;
      group_->pending.erase(seq);
    }
  }
  w.cv.notify_all();
  return p;
}

std::shared_ptr<Work> ThreadCommunicator::issue(Call call, std::string what, const Tensor& shown) {
  std::shared_ptr<Pending> p = issue_pending(std::move(call));
  return std::make_shared<ThreadWork>(
      group_->world, p,
      [this, what = std::move(what), shown] { return describe_call(what.c_str(), shown); },
      options_.timeout_seconds, health_);
}

void ThreadCommunicator::do_barrier(double timeout_seconds) {
  Call c(Kind::barrier);
  c.signature = "barrier";
  std::shared_ptr<Pending> p = issue_pending(std::move(c));
  ThreadWork(
      group_->world, p, [this] { return describe_call("barrier", Tensor()); }, timeout_seconds,
      health_)
      .wait();
}

std::shared_ptr<Communicator> ThreadCommunicator::do_split(int color, int key,
                                                        const std::string& name) {
  Call c(Kind::split);
  c.color = color;
  c.key = key;
  c.signature = "split";
  std::shared_ptr<Pending> p = issue_pending(std::move(c));
  const std::string what = str_cat("split into ", name);
  ThreadWork(
      group_->world, p, [this, what] { return describe_call(what.c_str(), Tensor()); },
      options_.timeout_seconds, health_)
      .wait();
  std::lock_guard<std::mutex> lock(group_->world->mutex);
  auto [child, child_rank] = p->split_result[size_t(rank_)];
  return std::shared_ptr<ThreadCommunicator>(
      new ThreadCommunicator(child, child_rank, name, options_, step_, traffic_, health_));
}

std::shared_ptr<Work> ThreadCommunicator::do_all_reduce(const Tensor& x, CommOp op) {
  check_cpu(x, "all_reduce");
  check_reducible(x, "all_reduce");
  const std::string what = str_cat("all_reduce ", comm_op_name(op));
  Call c(Kind::all_reduce, op);
  c.in = x;
  c.signature = signature(what.c_str(), x);
  return issue(std::move(c), what, x);
}

std::shared_ptr<Work> ThreadCommunicator::do_reduce_scatter(const Tensor& in, const Tensor& out,
                                                            CommOp op) {
  check_cpu(in, "reduce_scatter");
  // Widening (bf16/f16 into f32): each rank's values are cast exactly, then summed in f32.
  const bool widening = in.dtype() != out.dtype();
  if (!widening) check_reducible(in, "reduce_scatter");
  Call c(Kind::reduce_scatter, op);
  c.in = widening ? ops::cast(in, out.dtype()) : in;
  c.out = out;
  c.signature = signature(str_cat("reduce_scatter ", comm_op_name(op)).c_str(), in);
  return issue(std::move(c), "reduce_scatter", in);
}

std::shared_ptr<Work> ThreadCommunicator::do_all_gather(const Tensor& in, const Tensor& out) {
  check_cpu(in, "all_gather");
  Call c(Kind::all_gather);
  c.in = in;
  c.out = out;
  c.signature = signature("all_gather", in);
  return issue(std::move(c), "all_gather", in);
}

std::shared_ptr<Work> ThreadCommunicator::do_broadcast(const Tensor& x, int root) {
  check_cpu(x, "broadcast");
  Call c(Kind::broadcast);
  c.root = root;
  c.in = x;
  c.signature = signature(str_cat("broadcast from ", root).c_str(), x);
  return issue(std::move(c), "broadcast", x);
}

std::shared_ptr<Work> ThreadCommunicator::do_send(const Tensor& x, int dst, int tag) {
  check_cpu(x, "send");
  World& w = *group_->world;
  {
    std::lock_guard<std::mutex> lock(w.mutex);
    Channel& ch = group_->channels[{rank_, dst, tag}];
    if (ch.recvs.empty()) {
      // Buffered: the caller may reuse x as soon as send returns.
      Tensor copy = empty(x.shape(), x.dtype());
      copy_bytes(copy, 0, x.data_ptr(), x.nbytes());
      ch.sends.push_back({copy});
      return std::make_shared<CompletedWork>();
    }
    std::shared_ptr<PostedRecv> r = ch.recvs.front();
    ch.recvs.pop_front();
    r->done = true;
    if (r->x.dtype() != x.dtype() || r->x.numel() != x.numel())
      r->error = str_cat(r->what, ": the matching send carries ", x.describe());
    else
      copy_bytes(r->x, 0, x.data_ptr(), x.nbytes());
    r->x = Tensor();
  }
  w.cv.notify_all();
  return std::make_shared<CompletedWork>();
}

std::shared_ptr<Work> ThreadCommunicator::do_recv(const Tensor& x, int src, int tag) {
  check_cpu(x, "recv");
  auto r = std::make_shared<PostedRecv>();
  r->what = describe_call(str_cat("recv from ", src, " (tag ", tag, ")").c_str(), x);
  {
    std::lock_guard<std::mutex> lock(group_->world->mutex);
    Channel& ch = group_->channels[{src, rank_, tag}];
    if (ch.sends.empty()) {
      r->x = x;
      ch.recvs.push_back(r);
    } else {
      Tensor data = ch.sends.front().data;
      ch.sends.pop_front();
      r->done = true;
      if (data.dtype() != x.dtype() || data.numel() != x.numel())
        r->error = str_cat(r->what, ": the matching send carries ", data.describe());
      else
        copy_bytes(x, 0, data.data_ptr(), x.nbytes());
    }
  }
  return std::make_shared<ThreadWork>(
      group_->world, r,
      [this, x, src] { return describe_call(str_cat("recv from ", src).c_str(), x); },
      options_.timeout_seconds, health_);
}

}  // namespace tessera::parallel
