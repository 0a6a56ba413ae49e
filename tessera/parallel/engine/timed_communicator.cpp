#include "tessera/parallel/engine/timed_communicator.h"

#include <chrono>

#include "tessera/core/error.h"

namespace tessera::parallel {

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Times wait(); test() never blocks and is not counted.
class TimedWork final : public Work {
 public:
  TimedWork(std::shared_ptr<Work> inner, std::shared_ptr<CommClock> clock)
      : inner_(std::move(inner)), clock_(std::move(clock)) {}
  void wait() override {
    const Clock::time_point start = Clock::now();
    inner_->wait();
    clock_->add(since(start));
  }
  bool test() override { return inner_->test(); }
  bool on_comm_stream() const override { return inner_->on_comm_stream(); }

 private:
  std::shared_ptr<Work> inner_;
  std::shared_ptr<CommClock> clock_;
};

}  // namespace

TimedCommunicator::TimedCommunicator(std::shared_ptr<Communicator> inner,
                                     std::shared_ptr<CommClock> clock)
    : Communicator(inner ? inner->name() : std::string("?"),
                   inner ? inner->options() : CommOptions{}, nullptr,
                   inner ? inner->shared_traffic() : nullptr,
                   inner ? inner->shared_health() : nullptr),
      inner_(std::move(inner)),
      clock_(clock ? std::move(clock) : std::make_shared<CommClock>()) {
  TESSERA_CHECK(inner_ != nullptr, "TimedCommunicator: the wrapped communicator is null");
  counts_traffic_ = false;  // the wrapped group counts every call forwarded to it
  records_flight_ = false;  // and records it
  set_flight_recorder(inner_->flight_recorder());
}

void TimedCommunicator::do_barrier(double timeout_seconds) {
  const Clock::time_point start = Clock::now();
  inner_->barrier(timeout_seconds);
  clock_->add(since(start));
}

std::shared_ptr<Communicator> TimedCommunicator::do_split(int color, int key,
                                                       const std::string& name) {
  return std::make_shared<TimedCommunicator>(inner_->split(color, key, name), clock_);
}

std::shared_ptr<Work> TimedCommunicator::timed(std::shared_ptr<Work> work) const {
  return std::make_shared<TimedWork>(std::move(work), clock_);
}

std::shared_ptr<Work> TimedCommunicator::do_all_reduce(const Tensor& x, CommOp op) {
  return timed(inner_->all_reduce_async(x, op));
}
std::shared_ptr<Work> TimedCommunicator::do_reduce_scatter(const Tensor& in, const Tensor& out,
                                                           CommOp op) {
  return timed(inner_->reduce_scatter_async(in, out, op));
}
std::shared_ptr<Work> TimedCommunicator::do_all_gather(const Tensor& in, const Tensor& out) {
  return timed(inner_->all_gather_async(in, out));
}
std::shared_ptr<Work> TimedCommunicator::do_broadcast(const Tensor& x, int root) {
  return timed(inner_->broadcast_async(x, root));
}
std::shared_ptr<Work> TimedCommunicator::do_send(const Tensor& x, int dst, int tag) {
  return timed(inner_->send_async(x, dst, tag));
}
std::shared_ptr<Work> TimedCommunicator::do_recv(const Tensor& x, int src, int tag) {
  return timed(inner_->recv_async(x, src, tag));
}

}  // namespace tessera::parallel
