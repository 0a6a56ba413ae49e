// Schedule generators. Each rank's list is built from its order of compute actions; every
// forward is preceded by the receive of its input and followed by the send of its output when
// the neighbouring model stage lives on another rank (and mirrored for backward), so the
// transfers between two ranks appear in the same micro-batch order on both sides.

#include "tessera/parallel/pipeline/schedule.h"

#include <algorithm>

#include "tessera/core/error.h"

namespace tessera::parallel {

const char* action_kind_name(ActionKind kind) {
  switch (kind) {
    case ActionKind::forward:
      return "forward";
    case ActionKind::backward:
      return "backward";
    case ActionKind::send_activation:
      return "send_activation";
    case ActionKind::recv_activation:
      return "recv_activation";
    case ActionKind::send_gradient:
      return "send_gradient";
    case ActionKind::recv_gradient:
      return "recv_gradient";
    case ActionKind::all_reduce_tied:
      return "all_reduce_tied";
  }
  return "?";
}

std::string Action::to_string() const {
  if (kind == ActionKind::forward) return str_cat("F m", micro, " c", chunk);
  if (kind == ActionKind::backward) return str_cat("B m", micro, " c", chunk);
  if (kind == ActionKind::all_reduce_tied) return action_kind_name(kind);
  return str_cat(action_kind_name(kind), " m", micro, " c", chunk, is_send() ? " -> " : " <- ",
                 peer);
}

const char* schedule_kind_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::gpipe:
      return "gpipe";
    case ScheduleKind::one_f_one_b:
      return "1f1b";
    case ScheduleKind::interleaved:
      return "interleaved";
  }
  return "?";
}

ScheduleKind parse_schedule_kind(const std::string& name) {
  for (ScheduleKind k : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::interleaved})
    if (name == schedule_kind_name(k)) return k;
  detail::throw_error("pipeline schedule: unknown schedule '", name,
                      "'; expected gpipe, 1f1b or interleaved");
}

std::string Schedule::name() const {
  return str_cat(schedule_kind_name(kind), " p", stages, " v", virtual_stages, " m", microbatches);
}

std::string schedule_invalid_reason(ScheduleKind kind, int stages, int virtual_stages,
                                    int microbatches) {
  if (stages < 1 || virtual_stages < 1 || microbatches < 1)
    return str_cat("stages, virtual stages and micro-batches must be >= 1, got p = ", stages,
                   ", v = ", virtual_stages, ", m = ", microbatches);
  if (int64_t(stages) * virtual_stages > kMaxModelStages)
    return str_cat("p * v = ", int64_t(stages) * virtual_stages, " model stages exceeds the limit ",
                   kMaxModelStages);
  int64_t compute = 2 * int64_t(stages) * virtual_stages * microbatches;
  if (compute > kMaxComputeActions)
    return str_cat("2 * p * v * m = ", compute, " compute actions exceeds the limit ",
                   kMaxComputeActions);
  bool interleaving = kind != ScheduleKind::gpipe && virtual_stages > 1;
  if (interleaving && microbatches % stages != 0)
    return str_cat("interleaved 1F1B takes micro-batches in groups of p = ", stages,
                   ": m = ", microbatches, " is not a multiple of ", stages);
  return "";
}

namespace {

// Appends one rank's compute actions with the transfers around them.
class RankListBuilder {
 public:
  RankListBuilder(const Schedule& s, int rank) : s_(s), rank_(rank) {}

  void forward(int micro, int chunk) {
    int stage = s_.model_stage(rank_, chunk);
    int prev = stage > 0 ? s_.rank_of(stage - 1) : -1, next = next_rank(stage);
    if (prev >= 0 && prev != rank_) add(ActionKind::recv_activation, micro, chunk, prev);
    add(ActionKind::forward, micro, chunk, -1);
    if (next >= 0 && next != rank_) add(ActionKind::send_activation, micro, chunk, next);
  }

  void backward(int micro, int chunk) {
    int stage = s_.model_stage(rank_, chunk);
    int prev = stage > 0 ? s_.rank_of(stage - 1) : -1, next = next_rank(stage);
    if (next >= 0 && next != rank_) add(ActionKind::recv_gradient, micro, chunk, next);
    add(ActionKind::backward, micro, chunk, -1);
    if (prev >= 0 && prev != rank_) add(ActionKind::send_gradient, micro, chunk, prev);
  }

  std::vector<Action> take() { return std::move(actions_); }

 private:
  int next_rank(int stage) const {
    return stage + 1 < s_.model_stages() ? s_.rank_of(stage + 1) : -1;
  }
  void add(ActionKind kind, int micro, int chunk, int peer) {
    actions_.push_back(Action{kind, micro, chunk, peer});
  }

  const Schedule& s_;
  int rank_;
  std::vector<Action> actions_;
};

void build_gpipe(Schedule& s) {
  const int p = s.stages, v = s.virtual_stages, m = s.microbatches;
  for (int r = 0; r < p; ++r) {
    RankListBuilder b(s, r);
    // Chunk by chunk, so rank 0 works on its first chunk while later micro-batches of it are
    // still on their way around the ring.
    for (int c = 0; c < v; ++c)
      for (int i = 0; i < m; ++i) b.forward(i, c);
    for (int c = v - 1; c >= 0; --c)
      for (int i = 0; i < m; ++i) b.backward(i, c);
    s.ranks[size_t(r)] = b.take();
  }
}

// 1F1B and its interleaved form. The k-th forward on a rank takes micro-batches in groups of
// p, one chunk after another (chunk (k / p) % v); backwards walk the chunks in reverse. With
// v = 1 this is PipeDream-flush: rank r runs p - r - 1 forwards before its first backward,
// keeping at most p - r micro-batches in flight. With v > 1 the warm-up is Megatron-LM's:
// (v - 1) * p forwards fill the other chunks, and 2 (p - r - 1) more cover the gradient's
// round trip to the last rank. Half of those extra forwards would reach the ideal bubble when
// transfers are free, but they absorb transfer latency: at a transfer cost of a quarter of a
// forward the simulator measures bubble 0.065 for p4 v2 m32 with this warm-up and 0.18 with
// (p - r - 1) + (v - 1) * p, for 11 instead of 8 chunk activations held on rank 0.
void build_one_f_one_b(Schedule& s) {
  const int p = s.stages, v = s.virtual_stages, m = s.microbatches;
  const int total = m * v;
  auto micro_of = [&](int k) { return (k / (p * v)) * p + k % p; };
  auto forward_chunk = [&](int k) { return (k / p) % v; };
  auto backward_chunk = [&](int k) { return v - 1 - (k / p) % v; };
  for (int r = 0; r < p; ++r) {
    int warmup = v == 1 ? p - r - 1 : 2 * (p - r - 1) + (v - 1) * p;
    warmup = std::min(warmup, total);
    RankListBuilder b(s, r);
    for (int k = 0; k < warmup; ++k) b.forward(micro_of(k), forward_chunk(k));
    for (int k = 0; k < total - warmup; ++k) {
      b.forward(micro_of(warmup + k), forward_chunk(warmup + k));
      b.backward(micro_of(k), backward_chunk(k));
    }
    for (int k = total - warmup; k < total; ++k) b.backward(micro_of(k), backward_chunk(k));
    s.ranks[size_t(r)] = b.take();
  }
}

}  // namespace

Schedule make_schedule(ScheduleKind kind, int stages, int virtual_stages, int microbatches,
                       const ScheduleOptions& options) {
  std::string why = schedule_invalid_reason(kind, stages, virtual_stages, microbatches);
  TESSERA_CHECK(why.empty(), "pipeline schedule ", schedule_kind_name(kind), " (p = ", stages,
                ", v = ", virtual_stages, ", m = ", microbatches, "): ", why);
  Schedule s;
  s.kind = kind;
  if (kind != ScheduleKind::gpipe)
    s.kind = virtual_stages > 1 ? ScheduleKind::interleaved : ScheduleKind::one_f_one_b;
  s.stages = stages;
  s.virtual_stages = virtual_stages;
  s.microbatches = microbatches;
  s.tied_embedding = options.tied_embedding && stages > 1;
  s.ranks.resize(size_t(stages));
  if (kind == ScheduleKind::gpipe)
    build_gpipe(s);
  else
    build_one_f_one_b(s);
  if (s.tied_embedding)
    for (int r : {0, stages - 1})
      s.ranks[size_t(r)].push_back(Action{ActionKind::all_reduce_tied, -1, 0, -1});
  return s;
}

int message_tag(const Schedule& schedule, int rank, const Action& action) {
  int stage = schedule.model_stage(rank, action.chunk);
  switch (action.kind) {
    case ActionKind::send_activation:
      return 2 * (stage + 1);
    case ActionKind::recv_activation:
      return 2 * stage;
    case ActionKind::send_gradient:
      return 2 * (stage - 1) + 1;
    case ActionKind::recv_gradient:
      return 2 * stage + 1;
    default:
      detail::throw_error("pipeline: ", action.to_string(), " on rank ", rank,
                          " is not a transfer and has no message tag");
  }
}

double ideal_bubble(int stages, int virtual_stages, int microbatches) {
  return double(stages - 1) / (double(virtual_stages) * microbatches);
}

}  // namespace tessera::parallel
