#pragma once
// TimedCommunicator: a Communicator that forwards every call to another one and adds the time
// this rank spends blocked waiting on it (Work::wait, barrier) to a clock shared by the whole
// tree of groups split from it. That blocked time is the communication cost a step pays: work
// that completes behind computation (a bucket reduced while the backward pass goes on) costs
// nothing until someone waits for it. Pipeline receives are counted too, so on pp > 1 this
// includes the waiting that the pipeline bubble measures.
//
// Timeout messages come from the wrapped communicator; set its step as well (the trainer
// does), since the step counter of a wrapper is its own.

#include <atomic>
#include <memory>
#include <string>

#include "tessera/parallel/comm/communicator.h"

namespace tessera::parallel {

// Seconds blocked, summed over every group sharing the clock (atomic, so waits on any thread
// may add to it).
class CommClock {
 public:
  void add(double seconds) { nanos_.fetch_add(int64_t(seconds * 1e9)); }
  double seconds() const { return double(nanos_.load()) * 1e-9; }
  void reset() { nanos_.store(0); }

 private:
  std::atomic<int64_t> nanos_{0};
};

class TimedCommunicator final : public Communicator {
 public:
  TimedCommunicator(std::shared_ptr<Communicator> inner, std::shared_ptr<CommClock> clock);

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  bool transfers_in_issue_order() const override { return inner_->transfers_in_issue_order(); }
  // Splits the wrapped group and wraps the child with the same clock.
  std::shared_ptr<Communicator> do_split(int color, int key, const std::string& name) override;

  const std::shared_ptr<Communicator>& inner() const { return inner_; }
  const std::shared_ptr<CommClock>& clock() const { return clock_; }

 protected:
  std::shared_ptr<Work> do_all_reduce(const Tensor& x, CommOp op) override;
  std::shared_ptr<Work> do_reduce_scatter(const Tensor& in, const Tensor& out, CommOp op) override;
  std::shared_ptr<Work> do_all_gather(const Tensor& in, const Tensor& out) override;
  std::shared_ptr<Work> do_broadcast(const Tensor& x, int root) override;
  std::shared_ptr<Work> do_send(const Tensor& x, int dst, int tag) override;
  std::shared_ptr<Work> do_recv(const Tensor& x, int src, int tag) override;
  void do_barrier(double timeout_seconds) override;

 private:
  std::shared_ptr<Work> timed(std::shared_ptr<Work> work) const;

  std::shared_ptr<Communicator> inner_;
  std::shared_ptr<CommClock> clock_;
};

}  // namespace tessera::parallel
