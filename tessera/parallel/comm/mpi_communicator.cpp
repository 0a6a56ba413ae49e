#include "tessera/parallel/comm/mpi_communicator.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <type_traits>

#include "tessera/core/error.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/elementwise.h"
#include "tessera/core/ops/movement.h"
#include "tessera/parallel/comm/detail/mpi_exchange.h"
#include "tessera/parallel/comm/detail/poll_until_done.h"

namespace tessera::parallel {

namespace {

MPI_Datatype mpi_type(const Tensor& t, bool reducing, const char* what) {
  switch (t.dtype()) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::f64:
      return MPI_DOUBLE;
    case DType::i32:
      return MPI_INT32_T;
    case DType::i64:
      return MPI_INT64_T;
    case DType::bf16:
    case DType::f16:
      TESSERA_CHECK(!reducing, what, ": MPI cannot reduce ", t.describe(),
                    " (16-bit floats); reduce in f32 on the CPU");
      return MPI_UINT16_T;
  }
  detail::throw_error(what, ": unsupported dtype for MPI: ", t.describe());
}

MPI_Op mpi_op(CommOp op) {
  return op == CommOp::max ? MPI_MAX : MPI_SUM;
}

void check_cpu(const Tensor& t, const char* what) {
  TESSERA_CHECK(t.device().is_cpu(), what, ": the MPI communicator carries CPU tensors, got ",
                t.describe(), " (CUDA tensors go through NCCL)");
}

// Completes MPI requests in phases: each phase's requests must finish before `next` starts the
// following phase (or finishes the work, e.g. dividing for avg).
class MpiWork final : public Work {
 public:
  using Phase = MpiPhase;

  // group: the communicator it runs on (its options, and the health a failure marks).
  // timeout_seconds > 0 replaces the group's timeout.
  MpiWork(std::vector<Phase> phases, std::function<std::string()> describe,
          const Communicator& group, std::vector<Tensor> keep_alive, double timeout_seconds = 0)
      : phases_(std::move(phases)),
        describe_(std::move(describe)),
        timeout_(timeout_seconds > 0 ? timeout_seconds : group.options().timeout_seconds),
        yield_(group.options().wait != CommWait::spin),
        health_(group.shared_health()),
        keep_(std::move(keep_alive)),
        start_(std::chrono::steady_clock::now()) {
    advance();
  }

  bool test() override {
    while (next_ <= phases_.size()) {
      int done = 0;
      if (!requests_.empty())
        test_all(&done);
      else
        done = 1;
      if (!done) return false;
      requests_.clear();
      if (next_ == phases_.size()) {
        next_ = phases_.size() + 1;
        keep_.clear();
        return true;
      }
      advance();
    }
    return true;
  }

  void wait() override {
    poll_until_done([this] { return test(); }, timeout_, start_, describe_, *health_,
                    [this] { abandon(); }, yield_);
  }

 private:
  void advance() { requests_ = phases_[next_++](); }

  // MPI_Testall; a failed request (errors return: MpiCommunicator::world) is reported by its
  // own error, e.g. "Message truncated" when ranks disagree on a collective's size.
  void test_all(int* done) {
    statuses_.resize(requests_.size());
    const int rc = MPI_Testall(int(requests_.size()), requests_.data(), done, statuses_.data());
    if (rc == MPI_ERR_IN_STATUS)
      for (const MPI_Status& st : statuses_)
        if (st.MPI_ERROR != MPI_SUCCESS && st.MPI_ERROR != MPI_ERR_PENDING)
          check_mpi(st.MPI_ERROR, "MPI_Testall");
    check_mpi(rc, "MPI_Testall");
  }

  // The posted requests may still write into the buffers (MPI cannot cancel a collective):
  // they and the requests are kept to the end of the process, and never completed.
  void abandon() {
    static std::mutex mutex;
    static auto* kept = new std::vector<Tensor>();
    static auto* posted = new std::vector<MPI_Request>();
    std::lock_guard<std::mutex> lock(mutex);
    kept->insert(kept->end(), keep_.begin(), keep_.end());
    posted->insert(posted->end(), requests_.begin(), requests_.end());
    keep_.clear();
    requests_.clear();
    next_ = phases_.size() + 1;  // a later test() reports done, and posts nothing more
  }

  std::vector<Phase> phases_;
  std::function<std::string()> describe_;
  double timeout_;
  bool yield_;
  std::shared_ptr<CommHealth> health_;
  std::vector<Tensor> keep_;
  std::chrono::steady_clock::time_point start_;
  std::vector<MPI_Request> requests_;
  std::vector<MPI_Status> statuses_;
  size_t next_ = 0;
};

// The phases of a floating-point sum reduce-scatter of `in` (n chunks of `chunk` elements) into
// `out` (chunk elements): an exchange that brings chunk r of every rank to rank r, then their
// sum in rank order on that rank, times `scale`. The order is fixed, so the bits do not depend
// on the algorithm MPI picks for a message size; and MPICH's nonblocking reduce-scatter is slow
// at mid sizes: 1.04 ms for 1 MiB on two ranks here, where an all-to-all took 65 us. Up to
// CommOptions::mpi_exchange_max_ranks the exchange is point to point under `tag`, and the
// rank's own chunk is summed from `in` where it lies; past it (tag < 0), MPI_Ialltoall. `out` may
// be in's own chunk (the all-reduce). Widening (bf16/f16 chunks into f32): the casts are exact, the
// sum is in f32.
std::vector<MpiWork::Phase> ordered_reduce_scatter(const Tensor& in, const Tensor& out,
                                                   int64_t chunk, int rank, int n, int tag,
                                                   MPI_Datatype type, MPI_Comm comm, double scale,
                                                   std::vector<Tensor>& keep) {
  // in and out are contiguous (the Communicator checks), and the Work keeps them and the
  // received chunks alive (`keep`): the phases capture addresses, no views and no reference
  // counts, since a microsecond here is most of the latency at small sizes.
  const Tensor gathered = empty({chunk * n}, in.dtype());
  keep.push_back(gathered);
  const bool exchange = tag >= 0;
  const size_t stride = size_t(chunk) * dtype_size(in.dtype());
  const char* ip = static_cast<const char*>(in.data_ptr());
  char* gp = static_cast<char*>(gathered.data_ptr());
  void* op = out.data_ptr("reduce_scatter");
  const DType dtype = out.dtype();
  std::vector<MpiWork::Phase> phases;
  phases.reserve(4);
  phases.emplace_back([=] {
    if (exchange) return post_exchange(ip, stride, gp, stride, int(chunk), type, tag, comm);
    MPI_Request r;
    check_mpi(MPI_Ialltoall(ip, int(chunk), type, gp, int(chunk), type, comm, &r), "MPI_Ialltoall");
    return std::vector<MPI_Request>{r};
  });
  if (in.dtype() == dtype) {
    phases.emplace_back([=] {
      PartList parts(n);
      for (int j = 0; j < n; ++j)
        parts[j] = j == rank && exchange ? ip + size_t(j) * stride : gp + size_t(j) * stride;
      sum_in_rank_order(parts.data(), n, op, chunk, dtype, scale);
      return std::vector<MPI_Request>{};
    });
  } else {
    phases.emplace_back([=] {
      if (exchange) std::memcpy(gp + size_t(rank) * stride, ip + size_t(rank) * stride, stride);
      const Tensor wide = ops::cast(gathered, dtype);
      const char* wp = static_cast<const char*>(wide.data_ptr());
      const size_t wide_stride = size_t(chunk) * dtype_size(dtype);
      PartList parts(n);
      for (int j = 0; j < n; ++j) parts[j] = wp + size_t(j) * wide_stride;
      sum_in_rank_order(parts.data(), n, op, chunk, dtype, scale);
      return std::vector<MPI_Request>{};
    });
  }
  return phases;
}

}  // namespace

MpiSession::MpiSession(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  int provided = 0;
  check_mpi(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
  owns_ = true;
  TESSERA_CHECK(provided >= MPI_THREAD_SERIALIZED, "MPI provides thread level ", provided,
                "; Tessera needs at least MPI_THREAD_SERIALIZED");
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!owns_ || finalized) return;
  // A broken group's collectives are still posted; MPI_Finalize would wait on them (and on
  // peers that may be dead or stuck), so the job ends here instead (comm_health.h).
  if (any_comm_broken()) abort_mpi_job(kBrokenCommExit);
  MPI_Finalize();
}

namespace {

// The cores this process may run on (its affinity mask; what a launcher's binding leaves it).
int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(CPU_COUNT(&set), 1);
  return int(std::max(std::thread::hardware_concurrency(), 1u));
}

// Whether any node runs more ranks than its ranks may use cores. Collective over
// MPI_COMM_WORLD.
bool any_node_crowded() {
  MPI_Comm node;
  check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
            "MPI_Comm_split_type");
  int on_node = 1;
  check_mpi(MPI_Comm_size(node, &on_node), "MPI_Comm_size");
  MPI_Comm_free(&node);
  int crowded = on_node > usable_cores() ? 1 : 0, any = 0;
  check_mpi(MPI_Allreduce(&crowded, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
  return any != 0;
}

// automatic -> spin or yield, the same on every rank: yield when any node runs more ranks than
// its ranks may use cores. The environment (TESSERA_COMM_WAIT) overrides `requested`'s
// automatic only. The node count is taken once per process, by the first world() that needs
// it (collective: every rank's first world(), as after MpiSession); later calls reuse it.
CommWait resolve_wait(CommWait requested) {
  if (const char* env = std::getenv("TESSERA_COMM_WAIT");
      requested == CommWait::automatic && env != nullptr && *env != '\0')
    requested = parse_comm_wait(env, "TESSERA_COMM_WAIT");
  if (requested != CommWait::automatic) return requested;
  static const CommWait resolved = any_node_crowded() ? CommWait::yield : CommWait::spin;
  return resolved;
}

}  // namespace

std::shared_ptr<MpiCommunicator> MpiCommunicator::world(CommOptions options) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  TESSERA_CHECK(initialized, "MpiCommunicator::world: MPI is not initialised; create a ",
                "tessera::parallel::MpiSession in main() first");
  options.wait = resolve_wait(options.wait);
  // A failing call (a message longer than its receive, as from ranks that disagree on a
  // collective) returns its error, which the wait turns into CommError naming the call, instead
  // of MPI's default of aborting the job on the spot, before any rank could say why. Splits
  // inherit the handler.
  check_mpi(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  return std::shared_ptr<MpiCommunicator>(
      new MpiCommunicator(MPI_COMM_WORLD, false, "world", options, nullptr, nullptr, nullptr));
}

std::shared_ptr<std::atomic<uint32_t>> MpiCommunicator::world_exchange_calls() {
  // Every world() object is MPI_COMM_WORLD, one message space: they take their tags in turn
  // from one count (a split has a communicator, and a count, of its own).
  static const auto calls = std::make_shared<std::atomic<uint32_t>>(0);
  return calls;
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, bool owned, std::string name, CommOptions options,
                                 std::shared_ptr<std::atomic<int64_t>> step,
                                 std::shared_ptr<CommTraffic> traffic,
                                 std::shared_ptr<CommHealth> health)
    : Communicator(std::move(name), options, std::move(step), std::move(traffic),
                   std::move(health)),
      comm_(comm),
      owned_(owned),
      exchange_calls_(owned ? std::make_shared<std::atomic<uint32_t>>(0) : world_exchange_calls()) {
  check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owned_ && !finalized) MPI_Comm_free(&comm_);
}

std::shared_ptr<Communicator> MpiCommunicator::do_split(int color, int key, const std::string& name) {
  MPI_Comm child;
  check_mpi(MPI_Comm_split(comm_, color, key, &child), "MPI_Comm_split");
  return std::shared_ptr<MpiCommunicator>(
      new MpiCommunicator(child, true, name, options_, step_, traffic_, health_));
}

int MpiCommunicator::exchange_tag() {
  if (size_ > options_.mpi_exchange_max_ranks) return -1;
  return kFirstExchangeTag + int(exchange_calls_->fetch_add(1) % uint32_t(kExchangeTags));
}

void MpiCommunicator::do_barrier(double timeout_seconds) {
  MPI_Comm comm = comm_;
  MpiWork w({[comm] {
              MPI_Request r;
              check_mpi(MPI_Ibarrier(comm, &r), "MPI_Ibarrier");
              return std::vector<MPI_Request>{r};
            }},
            [this] { return describe_call("barrier", Tensor()); }, *this, {}, timeout_seconds);
  w.wait();
}

std::shared_ptr<Work> MpiCommunicator::do_all_reduce(const Tensor& x, CommOp op) {
  check_cpu(x, "all_reduce");
  const bool floating = is_floating(x.dtype());
  MPI_Datatype type = mpi_type(x, true, "all_reduce");
  MPI_Comm comm = comm_;
  auto describe = [this, x, op] {
    return describe_call((std::string("all_reduce ") + comm_op_name(op)).c_str(), x);
  };
  const int n = size_;
  const double scale = op == CommOp::avg ? 1.0 / n : 1.0;
  if (!floating || op == CommOp::max) {
    void* p = x.data_ptr("all_reduce");
    int count = int(x.numel());
    MPI_Op mop = mpi_op(op);
    return std::make_shared<MpiWork>(
        std::vector<MpiWork::Phase>{[=] {
          MPI_Request r;
          check_mpi(MPI_Iallreduce(MPI_IN_PLACE, p, count, type, mop, comm, &r), "MPI_Iallreduce");
          return std::vector<MPI_Request>{r};
        }},
        describe, *this, std::vector<Tensor>{x});
  }
  // Sum (or avg) of floats, every element summed in rank order so that every rank receives the
  // same bits. Up to 8 KiB: every rank's x goes to every rank (an exchange, or past
  // CommOptions::mpi_exchange_max_ranks an all-gather), then each rank sums the n copies (one
  // round of messages, the latency floor; the same order as below, so the same bits). Larger
  // messages leave MPICH's eager protocol: on 2 ranks, one 16 KiB exchange and sum took 10.4 us
  // where the reduce-scatter + all-gather below (two rounds of 8 KiB) took 5.6 us, and at 8 KiB
  // they were 2.8 and 3.1 us.
  constexpr int64_t kGatherAllBytes = 8 << 10;
  const int tag = exchange_tag(), rank = rank_;
  const bool exchange = tag >= 0;
  if (x.nbytes() <= int64_t(kGatherAllBytes)) {
    const int64_t len = x.numel();
    const size_t bytes = x.nbytes();
    const Tensor all = empty({len * n}, x.dtype());
    // The phases capture addresses, not tensors (the Work keeps x and all alive): no reference
    // counts to touch in a call that takes a microsecond or two.
    void* xp = x.data_ptr("all_reduce");
    char* ap = static_cast<char*>(all.data_ptr());
    const DType dtype = x.dtype();
    std::vector<MpiWork::Phase> phases;
    phases.reserve(2);
    phases.emplace_back([=] {
      if (exchange) return post_exchange(xp, 0, ap, bytes, int(len), type, tag, comm);
      MPI_Request r;
      check_mpi(MPI_Iallgather(xp, int(len), type, ap, int(len), type, comm, &r), "MPI_Iallgather");
      return std::vector<MPI_Request>{r};
    });
    phases.emplace_back([=] {
      PartList parts(n);
      for (int j = 0; j < n; ++j) parts[j] = j == rank && exchange ? xp : ap + size_t(j) * bytes;
      sum_in_rank_order(parts.data(), n, xp, len, dtype, scale);
      return std::vector<MPI_Request>{};
    });
    return std::make_shared<MpiWork>(std::move(phases), std::move(describe), *this,
                                     std::vector<Tensor>{x, all});
  }
  // Larger: the ordered reduce-scatter, each rank's sum written over its own chunk of the
  // buffer, then an all-gather of the chunks in place. x itself is the buffer when n divides
  // it (x is contiguous); otherwise a copy padded to a multiple of n.
  const int64_t chunk = (x.numel() + n - 1) / n;
  const bool in_place = chunk * n == x.numel();
  Tensor buf = in_place ? ops::reshape(x, {x.numel()}) : zeros({chunk * n}, x.dtype());
  if (!in_place) ops::copy_(ops::narrow(buf, 0, 0, x.numel()), ops::reshape(x, {x.numel()}));
  const Tensor mine = ops::narrow(buf, 0, int64_t(rank) * chunk, chunk);
  std::vector<Tensor> keep{x, buf};
  std::vector<MpiWork::Phase> phases =
      ordered_reduce_scatter(buf, mine, chunk, rank, n, tag, type, comm, scale, keep);
  const size_t chunk_bytes = size_t(chunk) * dtype_size(x.dtype());
  phases.push_back([=] {
    if (exchange)
      return post_exchange(mine.data_ptr(), 0, buf.data_ptr(), chunk_bytes, int(chunk), type, tag,
                           comm);
    MPI_Request r;
    check_mpi(
        MPI_Iallgather(MPI_IN_PLACE, int(chunk), type, buf.data_ptr(), int(chunk), type, comm, &r),
        "MPI_Iallgather");
    return std::vector<MPI_Request>{r};
  });
  phases.push_back([=] {
    if (!in_place) ops::copy_(ops::reshape(x, {x.numel()}), ops::narrow(buf, 0, 0, x.numel()));
    return std::vector<MPI_Request>{};
  });
  return std::make_shared<MpiWork>(std::move(phases), std::move(describe), *this,
                                   std::move(keep));
}

std::shared_ptr<Work> MpiCommunicator::do_reduce_scatter(const Tensor& in, const Tensor& out,
                                                         CommOp op) {
  check_cpu(in, "reduce_scatter");
  // A widening reduce-scatter carries the 16-bit values as bytes and sums them in f32.
  const bool widening = in.dtype() != out.dtype();
  MPI_Datatype type = mpi_type(in, !widening, "reduce_scatter");
  MPI_Comm comm = comm_;
  MPI_Op mop = mpi_op(op);
  int count = int(out.numel());
  double scale = op == CommOp::avg ? 1.0 / size_ : 1.0;
  // Floating sums in rank order (ordered_reduce_scatter); max and integers are exact in any
  // order, so MPI reduces them.
  std::vector<Tensor> keep{in, out};
  std::vector<MpiWork::Phase> phases;
  if (widening || (is_floating(in.dtype()) && op != CommOp::max)) {
    phases = ordered_reduce_scatter(in, out, count, rank_, size_, exchange_tag(), type, comm, scale,
                                    keep);
  } else {
    phases.emplace_back([=] {
      MPI_Request r;
      check_mpi(
          MPI_Ireduce_scatter_block(in.data_ptr(), out.data_ptr(), count, type, mop, comm, &r),
          "MPI_Ireduce_scatter_block");
      return std::vector<MPI_Request>{r};
    });
    phases.emplace_back([=] {
      if (scale != 1.0) ops::mul_(out, scale);
      return std::vector<MPI_Request>{};
    });
  }
  return std::make_shared<MpiWork>(
      std::move(phases), [this, in] { return describe_call("reduce_scatter", in); }, *this,
      std::move(keep));
}

std::shared_ptr<Work> MpiCommunicator::do_all_gather(const Tensor& in, const Tensor& out) {
  check_cpu(in, "all_gather");
  MPI_Datatype type = mpi_type(in, false, "all_gather");
  MPI_Comm comm = comm_;
  const int count = int(in.numel()), rank = rank_, tag = exchange_tag();
  const bool exchange = tag >= 0;
  const size_t bytes = in.nbytes();
  return std::make_shared<MpiWork>(
      std::vector<MpiWork::Phase>{[=] {
        if (exchange) {
          // The rank's own slot is a local copy (none when `in` already is that slot).
          char* mine = static_cast<char*>(out.data_ptr("all_gather")) + size_t(rank) * bytes;
          if (mine != in.data_ptr()) std::memmove(mine, in.data_ptr(), bytes);
          return post_exchange(in.data_ptr(), 0, out.data_ptr(), bytes, count, type, tag, comm);
        }
        const char* mine = static_cast<const char*>(out.data_ptr()) + size_t(rank) * bytes;
        const void* send = mine == in.data_ptr() ? MPI_IN_PLACE : in.data_ptr();
        MPI_Request r;
        check_mpi(MPI_Iallgather(send, count, type, out.data_ptr(), count, type, comm, &r),
                  "MPI_Iallgather");
        return std::vector<MPI_Request>{r};
      }},
      [this, in] { return describe_call("all_gather", in); }, *this,
      std::vector<Tensor>{in, out});
}

std::shared_ptr<Work> MpiCommunicator::do_broadcast(const Tensor& x, int root) {
  check_cpu(x, "broadcast");
  MPI_Datatype type = mpi_type(x, false, "broadcast");
  MPI_Comm comm = comm_;
  int count = int(x.numel());
  return std::make_shared<MpiWork>(
      std::vector<MpiWork::Phase>{[=] {
        MPI_Request r;
        check_mpi(MPI_Ibcast(x.data_ptr(), count, type, root, comm, &r), "MPI_Ibcast");
        return std::vector<MPI_Request>{r};
      }},
      [this, x] { return describe_call("broadcast", x); }, *this, std::vector<Tensor>{x});
}

std::shared_ptr<Work> MpiCommunicator::do_send(const Tensor& x, int dst, int tag) {
  check_cpu(x, "send");
  TESSERA_CHECK(tag >= 0 && tag < kFirstExchangeTag, "send to rank ", dst, " on group ", name(),
                ": tag ", tag, " is outside [0, ", kFirstExchangeTag,
                "); the tags above are the collectives' own");
  MPI_Datatype type = mpi_type(x, false, "send");
  MPI_Comm comm = comm_;
  int count = int(x.numel());
  return std::make_shared<MpiWork>(
      std::vector<MpiWork::Phase>{[=] {
        MPI_Request r;
        check_mpi(MPI_Isend(x.data_ptr(), count, type, dst, tag, comm, &r), "MPI_Isend");
        return std::vector<MPI_Request>{r};
      }},
      [this, x, dst] { return describe_call(str_cat("send to ", dst).c_str(), x); }, *this,
      std::vector<Tensor>{x});
}

std::shared_ptr<Work> MpiCommunicator::do_recv(const Tensor& x, int src, int tag) {
  check_cpu(x, "recv");
  TESSERA_CHECK(tag >= 0 && tag < kFirstExchangeTag, "recv from rank ", src, " on group ", name(),
                ": tag ", tag, " is outside [0, ", kFirstExchangeTag,
                "); the tags above are the collectives' own");
  MPI_Datatype type = mpi_type(x, false, "recv");
  MPI_Comm comm = comm_;
  int count = int(x.numel());
  return std::make_shared<MpiWork>(
      std::vector<MpiWork::Phase>{[=] {
        MPI_Request r;
        check_mpi(MPI_Irecv(x.data_ptr(), count, type, src, tag, comm, &r), "MPI_Irecv");
        return std::vector<MPI_Request>{r};
      }},
      [this, x, src] { return describe_call(str_cat("recv from ", src).c_str(), x); }, *this,
      std::vector<Tensor>{x});
}

}  // namespace tessera::parallel
