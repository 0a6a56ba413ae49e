#include "tessera/parallel/comm/communicator.h"

#include "tessera/core/error.h"

namespace tessera::parallel {

const char* comm_op_name(CommOp op) {
  switch (op) {
    case CommOp::sum:
      return "sum";
    case CommOp::max:
      return "max";
    case CommOp::avg:
      return "avg";
  }
  return "?";
}

const char* comm_wait_name(CommWait wait) {
  switch (wait) {
    case CommWait::automatic:
      return "auto";
    case CommWait::spin:
      return "spin";
    case CommWait::yield:
      return "yield";
  }
  return "?";
}

CommWait parse_comm_wait(const std::string& value, const std::string& where) {
  if (value == "auto") return CommWait::automatic;
  if (value == "spin") return CommWait::spin;
  if (value == "yield") return CommWait::yield;
  detail::throw_error(where, ": '", value, "' is not a wait mode; expected auto, spin or yield");
}

Communicator::Communicator(std::string name, CommOptions options,
                           std::shared_ptr<std::atomic<int64_t>> step,
                           std::shared_ptr<CommTraffic> traffic,
                           std::shared_ptr<CommHealth> health)
    : name_(std::move(name)),
      options_(options),
      step_(step ? std::move(step) : std::make_shared<std::atomic<int64_t>>(-1)),
      traffic_(traffic ? std::move(traffic) : std::make_shared<CommTraffic>()),
      health_(health ? std::move(health) : std::make_shared<CommHealth>()) {
  TESSERA_CHECK(options_.timeout_seconds > 0, "communicator ", name_,
                ": timeout must be positive, got ", options_.timeout_seconds);
  TESSERA_CHECK(options_.mpi_exchange_max_ranks >= 1, "communicator ", name_,
                ": mpi_exchange_max_ranks must be at least 1, got ",
                options_.mpi_exchange_max_ranks);
}

std::string Communicator::describe_call(const char* collective, const Tensor& x) const {
  return str_cat("rank ", rank(), " of group ", name_, " (size ", size(), "), ", collective,
                 x.defined() ? str_cat(" of ", x.describe()) : std::string(),
                 step() >= 0 ? str_cat(", step ", step()) : "");
}

const std::shared_ptr<FlightRecorder>& Communicator::flight_recorder() {
  std::call_once(recorder_once_, [this] {
    if (!recorder_) recorder_ = std::make_shared<FlightRecorder>();
  });
  return recorder_;
}

void Communicator::set_flight_recorder(std::shared_ptr<FlightRecorder> recorder) {
  std::call_once(recorder_once_, [&] { recorder_ = std::move(recorder); });
}

int Communicator::flight_group() {
  std::call_once(group_once_, [this] {
    FlightRecorder& r = *flight_recorder();
    if (flight_key_.empty() && r.world_rank() < 0) r.set_world_rank(rank());
    flight_group_ = r.add_group({name_, flight_key(), size(), rank()});
  });
  return flight_group_;
}

std::shared_ptr<Communicator> Communicator::split(int color, int key, const std::string& name) {
  std::shared_ptr<FlightRecorder> recorder = flight_recorder();
  // A group no split made is a world: its rank names the dump. (A wrapper is not one.)
  if (records_flight_ && flight_key_.empty() && recorder->world_rank() < 0)
    recorder->set_world_rank(rank());
  std::shared_ptr<Communicator> child = do_split(color, key, name);
  child->flight_key_ = str_cat(flight_key(), "/", name, ":", color);
  child->set_flight_recorder(std::move(recorder));
  return child;
}

void Communicator::count(CommKind kind, const Tensor& message) {
  if (counts_traffic_ && size() > 1 && message.numel() > 0)
    traffic_->add(kind, int64_t(message.nbytes()), size());
}

namespace {

void check_tensor(const Communicator& c, const char* what, const Tensor& t) {
  TESSERA_CHECK(t.defined(), what, " on group ", c.name(), ": the tensor is undefined");
  TESSERA_CHECK(!t.storage()->released(), what, " on group ", c.name(), ": ", t.describe(),
                " is a view of freed storage");
  TESSERA_CHECK(t.is_contiguous(), what, " on group ", c.name(), ": ", t.describe(),
                " must be contiguous");
}

void check_peer(const Communicator& c, const char* what, int peer) {
  TESSERA_CHECK(peer >= 0 && peer < c.size() && peer != c.rank(), what, " on group ", c.name(),
                ": peer rank ", peer, " is not another rank of a group of ", c.size(),
                " (this is rank ", c.rank(), ")");
}

// A Work whose waits and tests move its flight record: started when a wait begins,
// completed when it returns or a test sees it done, failed when either throws.
class RecordedWork final : public Work {
 public:
  RecordedWork(std::shared_ptr<Work> inner, std::shared_ptr<FlightRecorder> recorder, uint64_t id)
      : inner_(std::move(inner)), recorder_(std::move(recorder)), id_(id) {}
  void wait() override {
    recorder_->mark(id_, FlightState::started);
    try {
      inner_->wait();
    } catch (const std::exception& e) {
      recorder_->fail(id_, e.what());
      throw;
    }
    recorder_->mark(id_, FlightState::completed);
  }
  bool test() override {
    bool done = false;
    try {
      done = inner_->test();
    } catch (const std::exception& e) {
      recorder_->fail(id_, e.what());
      throw;
    }
    if (done) recorder_->mark(id_, FlightState::completed);
    return done;
  }
  bool on_comm_stream() const override { return inner_->on_comm_stream(); }

 private:
  std::shared_ptr<Work> inner_;
  std::shared_ptr<FlightRecorder> recorder_;
  uint64_t id_;
};

}  // namespace

template <class Issue>
std::shared_ptr<Work> Communicator::recorded(const char* op, const char* reduce, int64_t bytes,
                                             const Tensor& x, int peer, Issue&& issue) {
  if (!records_flight_ || !options_.record_flight || size() == 1) return issue();
  const int group = flight_group();
  const std::shared_ptr<FlightRecorder>& recorder = flight_recorder();
  const uint64_t id =
      recorder->record(group, op, reduce, bytes, dtype_name(x.dtype()), peer, step());
  std::shared_ptr<Work> work;
  try {
    work = issue();
  } catch (const std::exception& e) {
    recorder->fail(id, e.what());
    throw;
  }
  return std::make_shared<RecordedWork>(std::move(work), recorder, id);
}

void Communicator::barrier(double timeout_seconds) {
  TESSERA_CHECK(timeout_seconds >= 0, "barrier on group ", name_, ": timeout must be >= 0, got ",
                timeout_seconds);
  if (health_->broken()) health_->check(describe_call("barrier", Tensor()));
  const double limit = timeout_seconds > 0 ? timeout_seconds : options_.timeout_seconds;
  if (!records_flight_ || !options_.record_flight || size() == 1) return do_barrier(limit);
  FlightRecorder& recorder = *flight_recorder();
  const uint64_t id = recorder.record(flight_group(), "barrier", "", 0, "", -1, step());
  recorder.mark(id, FlightState::started);
  try {
    do_barrier(limit);
  } catch (const std::exception& e) {
    recorder.fail(id, e.what());
    throw;
  }
  recorder.mark(id, FlightState::completed);
}

std::shared_ptr<Work> Communicator::all_reduce_async(const Tensor& x, CommOp op) {
  check_tensor(*this, "all_reduce", x);
  if (health_->broken()) health_->check(describe_call("all_reduce", x));
  TESSERA_CHECK(op != CommOp::avg || is_floating(x.dtype()), "all_reduce avg on group ", name_,
                ": ", x.describe(), " is not floating");
  if (size() == 1 || x.numel() == 0) return std::make_shared<CompletedWork>();
  count(CommKind::all_reduce, x);
  return recorded("all_reduce", comm_op_name(op), int64_t(x.nbytes()), x, -1,
                  [&] { return do_all_reduce(x, op); });
}

std::shared_ptr<Work> Communicator::reduce_scatter_async(const Tensor& in, const Tensor& out,
                                                         CommOp op) {
  check_tensor(*this, "reduce_scatter", in);
  check_tensor(*this, "reduce_scatter", out);
  if (health_->broken()) health_->check(describe_call("reduce_scatter", in));
  const bool widening = (in.dtype() == DType::bf16 || in.dtype() == DType::f16) &&
                        out.dtype() == DType::f32 && op != CommOp::max;
  TESSERA_CHECK(in.numel() == out.numel() * size() &&
                    (in.dtype() == out.dtype() || widening) && in.device() == out.device(),
                "reduce_scatter ", comm_op_name(op), " on group ", name_, ": input ",
                in.describe(), " must hold ", size(), " chunks of the output ", out.describe(),
                ", in its dtype (or, widening a sum, bf16/f16 into f32) and on its device");
  count(CommKind::reduce_scatter, in);
  return recorded("reduce_scatter", comm_op_name(op), int64_t(in.nbytes()), in, -1,
                  [&] { return do_reduce_scatter(in, out, op); });
}

std::shared_ptr<Work> Communicator::all_gather_async(const Tensor& in, const Tensor& out) {
  check_tensor(*this, "all_gather", in);
  check_tensor(*this, "all_gather", out);
  if (health_->broken()) health_->check(describe_call("all_gather", in));
  TESSERA_CHECK(out.numel() == in.numel() * size() && in.dtype() == out.dtype() &&
                    in.device() == out.device(),
                "all_gather on group ", name_, ": output ", out.describe(), " must hold ", size(),
                " copies of the input ", in.describe(), ", in its dtype and on its device");
  count(CommKind::all_gather, out);
  return recorded("all_gather", "", int64_t(out.nbytes()), out, -1,
                  [&] { return do_all_gather(in, out); });
}

std::shared_ptr<Work> Communicator::broadcast_async(const Tensor& x, int root) {
  check_tensor(*this, "broadcast", x);
  if (health_->broken()) health_->check(describe_call("broadcast", x));
  TESSERA_CHECK(root >= 0 && root < size(), "broadcast on group ", name_, ": root ", root,
                " is outside a group of ", size());
  if (size() == 1 || x.numel() == 0) return std::make_shared<CompletedWork>();
  count(CommKind::broadcast, x);
  return recorded("broadcast", "", int64_t(x.nbytes()), x, root,
                  [&] { return do_broadcast(x, root); });
}

std::shared_ptr<Work> Communicator::send_async(const Tensor& x, int dst, int tag) {
  check_tensor(*this, "send", x);
  check_peer(*this, "send", dst);
  if (health_->broken()) health_->check(describe_call("send", x));
  count(CommKind::send, x);
  return recorded("send", "", int64_t(x.nbytes()), x, dst, [&] { return do_send(x, dst, tag); });
}

std::shared_ptr<Work> Communicator::recv_async(const Tensor& x, int src, int tag) {
  check_tensor(*this, "recv", x);
  check_peer(*this, "recv", src);
  if (health_->broken()) health_->check(describe_call("recv", x));
  count(CommKind::recv, x);
  return recorded("recv", "", int64_t(x.nbytes()), x, src, [&] { return do_recv(x, src, tag); });
}

}  // namespace tessera::parallel
