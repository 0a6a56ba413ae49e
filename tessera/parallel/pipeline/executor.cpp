#include "tessera/parallel/pipeline/executor.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "tessera/autograd/node.h"
#include "tessera/core/error.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"
#include "tessera/parallel/step_trace.h"
#include "tessera/parallel/pipeline/detail/nccl_order.h"
#include "tessera/parallel/pipeline/detail/tied_gradients.h"

namespace tessera::parallel {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// What the executor holds for one (chunk, micro-batch) between its forward and backward.
struct Slot {
  Tensor input;        // the leaf the chunk's graph starts from (undefined on model stage 0)
  Tensor output;       // activation or loss, with its graph
  Tensor output_grad;  // received (or handed over by the next chunk on this rank)
  Tensor input_grad;   // waiting for send_gradient
};

class Executor {
 public:
  Executor(const Schedule& s, PipelineStage& stage, Communicator& pp, const PipelineOptions& o)
      : s_(s),
        stage_(stage),
        pp_(pp),
        o_(o),
        rank_(pp.rank()),
        slots_(size_t(s.virtual_stages) * size_t(s.microbatches)),
        backwards_left_(size_t(s.virtual_stages), 0) {
    TESSERA_CHECK(s.stages == pp.size() && s.ranks.size() == size_t(s.stages),
                  "pipeline executor: schedule ", s.name(), " is for ", s.stages,
                  " stages but the pipeline group ", pp.name(), " has ", pp.size(), " ranks");
    TESSERA_CHECK(o.loss_scale > 0, "pipeline executor: loss scale must be > 0, got ",
                  o.loss_scale);
    // Fail before any transfer rather than at the end of the step.
    for (const Action& a : s.ranks[size_t(rank_)]) {
      TESSERA_CHECK(a.kind != ActionKind::all_reduce_tied || o.embedding != nullptr,
                    "pipeline executor: rank ", rank_, " of ", s.name(),
                    " all-reduces the tied embedding but PipelineOptions::embedding (the "
                    "first-and-last-stage group, DeviceMesh::embedding()) is not set");
      if (a.kind == ActionKind::backward && a.chunk >= 0 && a.chunk < s.virtual_stages)
        ++backwards_left_[size_t(a.chunk)];
    }
  }

  PipelineStepStats run() {
    const Clock::time_point start = Clock::now();
    const std::vector<Action>& list = s_.ranks[size_t(rank_)];
    for (pc_ = 0; pc_ < list.size(); ++pc_) {
      const Action& a = list[pc_];
      TESSERA_CHECK(
          a.kind == ActionKind::all_reduce_tied || (a.micro >= 0 && a.micro < s_.microbatches &&
                                                    a.chunk >= 0 && a.chunk < s_.virtual_stages),
          where(a), ": micro-batch or chunk out of range");
      switch (a.kind) {
        case ActionKind::forward:
          forward(a);
          break;
        case ActionKind::backward:
          backward(a);
          break;
        case ActionKind::send_activation:
        case ActionKind::send_gradient:
          send(a);
          break;
        case ActionKind::recv_activation:
        case ActionKind::recv_gradient:
          recv(a);
          break;
        case ActionKind::all_reduce_tied:
          all_reduce_tied_gradients(o_.embedding, stage_.tied_parameters());
          break;
      }
      reap_sends();
    }
    for (Send& send : sends_) send.work->wait();
    sends_.clear();
    for (size_t k = 0; k < slots_.size(); ++k)
      TESSERA_CHECK(!slots_[k].output.defined() && !slots_[k].input_grad.defined(),
                    "pipeline executor: rank ", rank_, " ends schedule ", s_.name(),
                    " with micro-batch ", k % size_t(s_.microbatches), " chunk ",
                    k / size_t(s_.microbatches), " unfinished");

    PipelineStepStats stats;
    stats.wall_seconds = seconds_since(start);
    stats.busy_seconds = busy_;
    stats.forward_seconds = forward_;
    stats.backward_seconds = busy_ - forward_;
    stats.idle_seconds = std::max(0.0, stats.wall_seconds - busy_);
    stats.bubble = busy_ > 0 ? stats.idle_seconds / busy_ : 0;
    stats.peak_in_flight = peak_;
    stats.outputs_freed = outputs_freed_;
    stats.outputs_kept = outputs_kept_;
    // Only the last model stage has a loss; adding the other ranks' zeros keeps it exact.
    bool has_loss = rank_ == s_.rank_of(s_.model_stages() - 1);
    Tensor totals = from_vector<double>({has_loss ? loss_sum_ : 0.0, busy_}, {2});
    Tensor longest = from_vector<double>({stats.wall_seconds}, {1});
    auto sum_work = pp_.all_reduce_async(totals);
    auto max_work = pp_.all_reduce_async(longest, CommOp::max);
    sum_work->wait();
    max_work->wait();
    std::vector<double> t = to_vector<double>(totals);
    stats.loss = t[0] / s_.microbatches;
    double group_idle = pp_.size() * longest.item<double>() - t[1];
    stats.group_bubble = t[1] > 0 ? std::max(0.0, group_idle) / t[1] : 0;
    return stats;
  }

 private:
  // The action as a span of the pipeline track: "forward m3" ("forward m3 c1" with chunks).
  void trace_span(const char* what, const Action& a, Clock::time_point t0) {
    if (o_.trace == nullptr) return;
    const int64_t end = flight_clock_us();
    const int64_t begin = end - int64_t(seconds_since(t0) * 1e6);
    o_.trace->span(TraceTrack::pipeline,
                   str_cat(what, " m", a.micro, s_.virtual_stages > 1 ? str_cat(" c", a.chunk) : ""),
                   begin, end, {{"micro", a.micro}, {"chunk", a.chunk}});
  }
  std::string where(const Action& a) const {
    return str_cat("pipeline executor: rank ", rank_, " action ", pc_, " (", a.to_string(), ") of ",
                   s_.name());
  }
  Slot& slot(int chunk, int micro) {
    return slots_[size_t(chunk) * size_t(s_.microbatches) + size_t(micro)];
  }
  int stage_of(const Action& a) const { return s_.model_stage(rank_, a.chunk); }
  bool is_last(int stage) const { return stage == s_.model_stages() - 1; }
  // With one rank, neighbouring chunks hand tensors over without messages.
  bool local_neighbours() const { return s_.stages == 1; }

  void forward(const Action& a) {
    Slot& sl = slot(a.chunk, a.micro);
    TESSERA_CHECK(!sl.output.defined(), where(a), ": this forward already ran");
    const int stage = stage_of(a);
    Tensor input;
    if (stage > 0 && local_neighbours()) {
      const Tensor& prev = slot(a.chunk - 1, a.micro).output;
      TESSERA_CHECK(prev.defined(), where(a), ": the previous chunk's output is not there");
      input = autograd::detach(prev);
      input.set_requires_grad(true);
    } else if (stage > 0) {
      TESSERA_CHECK(sl.input.defined(), where(a), ": its input activation was not received");
      input = sl.input;
    }
    const Clock::time_point t0 = Clock::now();
    Tensor out = stage_.forward(a.chunk, a.micro, input);
    TESSERA_CHECK(out.defined(), where(a), ": the stage returned an undefined tensor");
    if (is_last(stage)) {
      TESSERA_CHECK(out.numel() == 1, where(a),
                    ": the last stage must return the loss (one "
                    "element), got ",
                    out.describe());
      loss_sum_ += out.item<double>();
    } else {
      ActivationSpec next = stage_.activation_spec(stage + 1, a.micro);
      TESSERA_CHECK(
          out.shape() == next.shape && out.dtype() == next.dtype && out.device() == next.device,
          where(a), ": the chunk's output ", out.describe(), " does not match activation_spec(",
          stage + 1, ", ", a.micro, ") = ", dtype_name(next.dtype), next.shape.to_string(), " on ",
          next.device.to_string());
    }
    const double took = seconds_since(t0);
    busy_ += took;
    forward_ += took;
    trace_span("forward", a, t0);
    sl.input = input;
    sl.output = out;
    peak_ = std::max(peak_, ++in_flight_);
  }

  void backward(const Action& a) {
    Slot& sl = slot(a.chunk, a.micro);
    TESSERA_CHECK(sl.output.defined(), where(a), ": backward before its forward");
    const int stage = stage_of(a);
    Tensor grad = sl.output_grad;
    if (is_last(stage))
      grad = full(sl.output.shape(), o_.loss_scale / s_.microbatches, sl.output.dtype(),
                  sl.output.device());
    TESSERA_CHECK(grad.defined(), where(a), ": its output gradient was not received");
    stage_.before_backward(a.chunk, a.micro, --backwards_left_[size_t(a.chunk)] == 0);
    const Clock::time_point t0 = Clock::now();
    sl.output.backward(grad);
    if (stage > 0) {
      Tensor g = sl.input.grad();
      g = g.defined() ? ops::contiguous(g) : zeros_like(sl.input);
      if (local_neighbours())
        slot(a.chunk - 1, a.micro).output_grad = g;
      else
        sl.input_grad = g;
    }
    busy_ += seconds_since(t0);
    trace_span("backward", a, t0);
    sl.input = sl.output = sl.output_grad = Tensor();
    --in_flight_;
  }

  void send(const Action& a) {
    Slot& sl = slot(a.chunk, a.micro);
    bool activation = a.kind == ActionKind::send_activation;
    Tensor x = activation ? sl.output : sl.input_grad;
    TESSERA_CHECK(x.defined(), where(a),
                  activation ? ": nothing to send (forward not run)"
                             : ": nothing to send (backward not run)");
    if (!activation) sl.input_grad = Tensor();
    x = autograd::detach(ops::contiguous(x));
    sends_.push_back(
        {pp_.send_async(x, a.peer, message_tag(s_, rank_, a)), x, activation ? &sl : nullptr});
  }

  // Drops the sends that have completed, so their buffers are freed during the step, and
  // frees the data of the outputs among them.
  void reap_sends() {
    std::vector<Slot*> sent;
    std::erase_if(sends_, [&](Send& send) {
      if (!send.work->test()) return false;
      if (send.output_of != nullptr) sent.push_back(send.output_of);
      return true;
    });
    for (Slot* sl : sent) free_output(*sl);
  }

  // The slot's output keeps its graph and metadata; its buffer goes back to the allocator when
  // the slot's handle is the only one on the tensor and on the buffer. A saved tensor of the
  // graph (a node that keeps its output) or a view holds one more, and keeps it whole.
  void free_output(Slot& sl) {
    if (!sl.output.defined()) return;  // its backward already ran
    if (sl.output.shared_impl().use_count() == 1 && sl.output.storage().use_count() == 1) {
      sl.output.storage()->release();
      ++outputs_freed_;
    } else {
      ++outputs_kept_;
    }
  }

  void recv(const Action& a) {
    Slot& sl = slot(a.chunk, a.micro);
    Tensor buffer;
    if (a.kind == ActionKind::recv_activation) {
      TESSERA_CHECK(!sl.input.defined(), where(a), ": already received");
      ActivationSpec spec = stage_.activation_spec(stage_of(a), a.micro);
      buffer = empty(spec.shape, spec.dtype, spec.device);
    } else {
      TESSERA_CHECK(sl.output.defined() && !sl.output_grad.defined(), where(a),
                    ": no forward output waiting for this gradient");
      buffer = empty(sl.output.shape(), sl.output.dtype(), sl.output.device());
    }
    pp_.recv_async(buffer, a.peer, message_tag(s_, rank_, a))->wait();
    if (a.kind == ActionKind::recv_activation) {
      buffer.set_requires_grad(true);
      sl.input = buffer;
    } else {
      sl.output_grad = buffer;
    }
  }

  const Schedule& s_;
  PipelineStage& stage_;
  Communicator& pp_;
  PipelineOptions o_;
  int rank_;
  std::vector<Slot> slots_;
  std::vector<int> backwards_left_;  // per chunk, in the rest of the step
  // A posted send, its buffer, and the slot whose output it carries (null for a gradient).
  struct Send {
    std::shared_ptr<Work> work;
    Tensor buffer;
    Slot* output_of = nullptr;
  };
  std::vector<Send> sends_;
  size_t pc_ = 0;
  double busy_ = 0, forward_ = 0, loss_sum_ = 0;
  int in_flight_ = 0, peak_ = 0, outputs_freed_ = 0, outputs_kept_ = 0;
};

}  // namespace

PipelineStepStats run_pipeline(const Schedule& schedule, PipelineStage& stage, Communicator& pp,
                               const PipelineOptions& options) {
  // Over NCCL every send waits on its stream for the matching receive: issue each where its
  // receive completes (compute order unchanged), an order that cannot deadlock. The trainer
  // passes a schedule ordered once; another caller's is ordered here (a dry run per call).
  if (pp.transfers_in_issue_order() && !schedule.in_nccl_issue_order) {
    const Schedule ordered = nccl_issue_order(schedule);
    return Executor(ordered, stage, pp, options).run();
  }
  return Executor(schedule, stage, pp, options).run();
}

}  // namespace tessera::parallel
