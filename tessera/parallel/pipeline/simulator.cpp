// Event-driven dry run: a rank runs actions until it blocks (a receive whose message is not
// posted yet, a rendezvous send not yet taken, the tied all-reduce before its partner
// arrives); posting a message or arriving at the all-reduce wakes the rank it concerns. Each
// action is visited O(1) times, so checking a schedule costs O(actions). Times follow the
// data flow (a receive ends no earlier than its message is ready), so they do not depend on
// the order in which ranks are visited.

#include "tessera/parallel/pipeline/simulator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <map>
#include <tuple>

#include "tessera/core/error.h"

namespace tessera::parallel {

namespace {

constexpr size_t kMaxErrors = 20;

struct Message {
  int micro = 0;
  double ready = 0;  // when the receive may complete (post time for a rendezvous send)
  bool blocking = false;
};

class Simulation {
 public:
  Simulation(const Schedule& s, const SimulationOptions& o)
      : s_(s),
        o_(o),
        p_(s.stages),
        v_(s.virtual_stages),
        m_(s.microbatches),
        stages_(s.model_stages()),
        ranks_(size_t(p_)),
        queued_(size_t(p_), false) {
    size_t cells = size_t(v_) * size_t(m_);
    for (auto* table : {&fwd_, &bwd_, &act_in_, &grad_in_})
      table->assign(size_t(p_), std::vector<uint8_t>(cells, 0));
    result_.end_times.resize(size_t(p_));
    for (int r = 0; r < p_; ++r) result_.end_times[size_t(r)].assign(s.ranks[size_t(r)].size(), 0);
  }

  SimulationResult run() {
    for (int r = 0; r < p_; ++r) wake(r);
    while (!runnable_.empty() && !failed_) {
      int r = runnable_.front();
      runnable_.pop_front();
      queued_[size_t(r)] = false;
      while (!failed_ && step(r)) {
      }
    }
    if (!failed_) check_finished();
    finish_timeline();
    return std::move(result_);
  }

 private:
  struct RankState {
    size_t pc = 0;
    double clock = 0, busy = 0;
    int in_flight = 0, peak = 0;
    bool send_posted = false;  // blocked in a rendezvous send
    bool at_all_reduce = false;
  };
  using ChannelKey = std::tuple<int, int, int>;  // src, dst, tag

  size_t cell(int chunk, int micro) const { return size_t(chunk) * size_t(m_) + size_t(micro); }

  void wake(int r) {
    if (queued_[size_t(r)]) return;
    queued_[size_t(r)] = true;
    runnable_.push_back(r);
  }

  void error(std::string what) {
    if (result_.errors.size() < kMaxErrors)
      result_.errors.push_back(std::move(what));
    else
      ++dropped_;
  }
  bool fail(const std::string& where, const std::string& what) {
    error(where + ": " + what);
    failed_ = true;
    return false;
  }

  // The rank a transfer must name as its peer, or -1 when this stage has no such neighbour
  // on another rank.
  int expected_peer(int r, const Action& a) const {
    int stage = s_.model_stage(r, a.chunk);
    bool towards_next =
        a.kind == ActionKind::send_activation || a.kind == ActionKind::recv_gradient;
    int neighbour = towards_next ? stage + 1 : stage - 1;
    if (neighbour < 0 || neighbour >= stages_ || s_.rank_of(neighbour) == r) return -1;
    return s_.rank_of(neighbour);
  }

  void run_compute(RankState& st, int r, const Action& a, double cost) {
    TimelineBox box{r, a.kind, a.micro, a.chunk, st.clock, st.clock + cost};
    result_.boxes.push_back(box);
    st.clock += cost;
    st.busy += cost;
  }

  bool step(int r) {
    RankState& st = ranks_[size_t(r)];
    const std::vector<Action>& list = s_.ranks[size_t(r)];
    if (st.pc >= list.size()) return false;
    const Action& a = list[st.pc];
    std::string where = str_cat("rank ", r, " action ", st.pc, " (", a.to_string(), ")");
    if (a.kind != ActionKind::all_reduce_tied &&
        (a.micro < 0 || a.micro >= m_ || a.chunk < 0 || a.chunk >= v_))
      return fail(where, str_cat("micro-batch or chunk out of range (m = ", m_, ", v = ", v_, ")"));
    const int stage = s_.model_stage(r, a.chunk);
    const size_t at = a.kind == ActionKind::all_reduce_tied ? 0 : cell(a.chunk, a.micro);
    switch (a.kind) {
      case ActionKind::forward: {
        if (fwd_[size_t(r)][at]) return fail(where, "runs a second time");
        if (stage > 0) {
          bool local = s_.rank_of(stage - 1) == r;
          if (local && !fwd_[size_t(r)][cell(a.chunk - 1, a.micro)])
            return fail(where, str_cat("runs before its input, the forward of chunk ", a.chunk - 1,
                                       " on this rank"));
          if (!local && !act_in_[size_t(r)][at])
            return fail(where, "runs before its input activation was received");
        }
        fwd_[size_t(r)][at] = 1;
        run_compute(st, r, a, o_.forward_cost / v_);
        st.peak = std::max(st.peak, ++st.in_flight);
        break;
      }
      case ActionKind::backward: {
        if (!fwd_[size_t(r)][at]) return fail(where, "backward before its forward");
        if (bwd_[size_t(r)][at]) return fail(where, "runs a second time");
        if (stage + 1 < stages_) {
          bool local = s_.rank_of(stage + 1) == r;
          if (local && !bwd_[size_t(r)][cell(a.chunk + 1, a.micro)])
            return fail(where, str_cat("runs before its output gradient, the backward of chunk ",
                                       a.chunk + 1, " on this rank"));
          if (!local && !grad_in_[size_t(r)][at])
            return fail(where, "runs before its output gradient was received");
        }
        bwd_[size_t(r)][at] = 1;
        run_compute(st, r, a, o_.backward_cost / v_);
        --st.in_flight;
        break;
      }
      case ActionKind::send_activation:
      case ActionKind::send_gradient: {
        int peer = expected_peer(r, a);
        if (peer < 0 || a.peer != peer)
          return fail(where, peer < 0 ? str_cat("model stage ", stage,
                                                " has no neighbour on "
                                                "another rank in that direction")
                                      : str_cat("must go to rank ", peer));
        bool activation = a.kind == ActionKind::send_activation;
        if (!(activation ? fwd_ : bwd_)[size_t(r)][at])
          return fail(where, activation ? "sends an activation before its forward ran"
                                        : "sends a gradient before its backward ran");
        if (o_.blocking_sends && st.send_posted) return false;
        std::deque<Message>& channel = channels_[ChannelKey{r, a.peer, message_tag(s_, r, a)}];
        if (o_.blocking_sends) {
          channel.push_back(Message{a.micro, st.clock, true});
          st.send_posted = true;
          wake(a.peer);
          return false;  // resumes when the receiver takes it
        }
        channel.push_back(Message{a.micro, st.clock + o_.transfer_cost, false});
        wake(a.peer);
        break;
      }
      case ActionKind::recv_activation:
      case ActionKind::recv_gradient: {
        int peer = expected_peer(r, a);
        if (peer < 0 || a.peer != peer)
          return fail(where, peer < 0 ? str_cat("model stage ", stage,
                                                " has no neighbour on "
                                                "another rank in that direction")
                                      : str_cat("must come from rank ", peer));
        auto it = channels_.find(ChannelKey{a.peer, r, message_tag(s_, r, a)});
        if (it == channels_.end() || it->second.empty()) return false;  // not sent yet
        Message msg = it->second.front();
        if (msg.micro != a.micro)
          return fail(where, str_cat("the next message from rank ", a.peer,
                                     " on this channel is micro-batch ", msg.micro,
                                     " (messages between two ranks are matched in order)"));
        it->second.pop_front();
        auto& arrived = (a.kind == ActionKind::recv_activation ? act_in_ : grad_in_)[size_t(r)];
        if (arrived[at]) return fail(where, "receives the same micro-batch a second time");
        arrived[at] = 1;
        if (msg.blocking) {
          double t = std::max(st.clock, msg.ready) + o_.transfer_cost;
          RankState& sender = ranks_[size_t(a.peer)];
          sender.clock = t;
          sender.send_posted = false;
          result_.end_times[size_t(a.peer)][sender.pc] = t;
          ++sender.pc;
          wake(a.peer);
          st.clock = t;
        } else {
          st.clock = std::max(st.clock, msg.ready);
        }
        break;
      }
      case ActionKind::all_reduce_tied: {
        if (!s_.tied_embedding || p_ < 2 || (r != 0 && r != p_ - 1))
          return fail(where,
                      "only the first and last rank of a pipeline with a tied embedding "
                      "all-reduce its gradient");
        int chunk = r == 0 ? 0 : v_ - 1;
        for (int i = 0; i < m_; ++i)
          if (!bwd_[size_t(r)][cell(chunk, i)])
            return fail(where, str_cat("runs before the backward of micro-batch ", i, " chunk ",
                                       chunk, ", so the tied gradient is incomplete"));
        int partner = r == 0 ? p_ - 1 : 0;
        RankState& other = ranks_[size_t(partner)];
        if (!other.at_all_reduce) {
          st.at_all_reduce = true;
          return false;  // resumes when the partner arrives
        }
        double t = std::max(st.clock, other.clock) + o_.all_reduce_cost;
        st.clock = other.clock = t;
        other.at_all_reduce = false;
        result_.end_times[size_t(partner)][other.pc] = t;
        ++other.pc;
        wake(partner);
        break;
      }
    }
    result_.end_times[size_t(r)][st.pc] = st.clock;
    ++st.pc;
    return true;
  }

  std::string waiting_for(int r, const Action& a) const {
    const RankState& st = ranks_[size_t(r)];
    if (a.is_recv())
      return str_cat("waits for a message from rank ", a.peer, " that is never sent");
    if (a.is_send() && st.send_posted)
      return str_cat("its blocking send waits for rank ", a.peer, " to receive");
    if (a.kind == ActionKind::all_reduce_tied)
      return str_cat("waits for rank ", r == 0 ? p_ - 1 : 0, " to join the tied all-reduce");
    return "blocked";
  }

  void check_finished() {
    for (int r = 0; r < p_; ++r) {
      const RankState& st = ranks_[size_t(r)];
      const std::vector<Action>& list = s_.ranks[size_t(r)];
      if (st.pc < list.size())
        error(str_cat("deadlock: rank ", r, " stuck at action ", st.pc, " (",
                      list[st.pc].to_string(), "): ", waiting_for(r, list[st.pc])));
    }
    if (!result_.errors.empty()) return;
    for (int r = 0; r < p_; ++r)
      for (int c = 0; c < v_; ++c)
        for (int i = 0; i < m_; ++i) {
          if (!fwd_[size_t(r)][cell(c, i)])
            error(str_cat("rank ", r, " never runs the forward of micro-batch ", i, " chunk ", c));
          if (!bwd_[size_t(r)][cell(c, i)])
            error(str_cat("rank ", r, " never runs the backward of micro-batch ", i, " chunk ", c));
        }
    for (const auto& [key, queue] : channels_)
      for (const Message& msg : queue)
        error(str_cat("rank ", std::get<0>(key), " sends the ",
                      std::get<2>(key) % 2 ? "gradient" : "activation", " of micro-batch ",
                      msg.micro, " to rank ", std::get<1>(key), ", which never receives it"));
  }

  void finish_timeline() {
    if (dropped_ > 0) result_.errors.push_back(str_cat("... and ", dropped_, " more problems"));
    for (const RankState& st : ranks_) result_.makespan = std::max(result_.makespan, st.clock);
    double busy = 0, idle = 0;
    for (const RankState& st : ranks_) {
      result_.busy.push_back(st.busy);
      result_.idle.push_back(result_.makespan - st.busy);
      result_.peak_in_flight.push_back(st.peak);
      busy += st.busy;
      idle += result_.makespan - st.busy;
    }
    result_.bubble = busy > 0 ? idle / busy : 0;
    result_.ideal_bubble = ideal_bubble(p_, v_, m_);
  }

  const Schedule& s_;
  SimulationOptions o_;
  int p_, v_, m_, stages_;
  std::vector<RankState> ranks_;
  // Per rank, per (chunk, micro): forward run, backward run, input and output gradient here.
  std::vector<std::vector<uint8_t>> fwd_, bwd_, act_in_, grad_in_;
  std::map<ChannelKey, std::deque<Message>> channels_;
  std::deque<int> runnable_;
  std::vector<bool> queued_;
  SimulationResult result_;
  bool failed_ = false;
  size_t dropped_ = 0;
};

}  // namespace

SimulationResult simulate(const Schedule& schedule, const SimulationOptions& options) {
  const int p = schedule.stages, v = schedule.virtual_stages, m = schedule.microbatches;
  TESSERA_CHECK(p >= 1 && v >= 1 && m >= 1 && int64_t(p) * v <= kMaxModelStages &&
                    2 * int64_t(p) * v * m <= kMaxComputeActions,
                "pipeline simulator: schedule ", schedule.name(), " has invalid sizes");
  TESSERA_CHECK(schedule.ranks.size() == size_t(p), "pipeline simulator: schedule ",
                schedule.name(), " has ", schedule.ranks.size(), " rank lists, expected ", p);
  // At most 1e15 each: 2^22 actions of it still sum to a finite makespan.
  for (const auto& [cost, name] :
       {std::pair{options.forward_cost, "forward"}, std::pair{options.backward_cost, "backward"},
        std::pair{options.transfer_cost, "transfer"},
        std::pair{options.all_reduce_cost, "all-reduce"}})
    TESSERA_CHECK(std::isfinite(cost) && cost >= 0 && cost <= 1e15, "pipeline simulator: the ",
                  name, " cost must be in [0, 1e15], got ", cost);
  TESSERA_CHECK(options.forward_cost + options.backward_cost > 0,
                "pipeline simulator: the forward and backward costs are both 0, so the bubble ",
                "(idle / busy) is undefined");
  return Simulation(schedule, options).run();
}

SimulationResult check_schedule(const Schedule& schedule, const SimulationOptions& options) {
  SimulationResult result = simulate(schedule, options);
  if (!result.ok()) {
    std::string list;
    for (size_t i = 0; i < result.errors.size() && i < 5; ++i)
      list += (i ? "; " : "") + result.errors[i];
    detail::throw_error("pipeline schedule ", schedule.name(), " is broken: ", list);
  }
  return result;
}

std::string format_summary(const Schedule& schedule, const SimulationResult& result) {
  auto num = [](double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.4g", x);
    return std::string(buf);
  };
  std::string out = str_cat("schedule ", schedule.name(), ": ", result.ok() ? "sound" : "BROKEN",
                            ", makespan ", num(result.makespan), "\n");
  out += str_cat("bubble (idle / busy): measured ", num(result.bubble),
                 ", ideal (p-1)/(v*m) = ", num(result.ideal_bubble), "\n");
  for (size_t r = 0; r < result.busy.size(); ++r)
    out += str_cat("  rank ", r, ": busy ", num(result.busy[r]), ", idle ", num(result.idle[r]),
                   ", peak in-flight micro-batch chunks ", result.peak_in_flight[r], "\n");
  for (const std::string& e : result.errors) out += "  error: " + e + "\n";
  return out;
}

}  // namespace tessera::parallel
