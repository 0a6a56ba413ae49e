#pragma once
// Pipeline schedules as data: for each rank of the pipeline group, the list of actions it runs
// in one training step (forward and backward of a micro-batch on one of its chunks, and the
// sends and receives of activations and gradients between neighbouring stages).
//
// Model stages. The layers are cut into S = p * v contiguous model stages. Rank r holds the v
// chunks c = 0..v-1, chunk c being model stage s = c * p + r (Megatron-LM's round-robin
// assignment; v = 1 is the plain pipeline). Stage s feeds s + 1, so activations flow
// r -> r + 1, and from rank p - 1 back to rank 0 between chunks. Stage 0 reads the micro-batch;
// stage S - 1 computes its loss.
//
// Communication. Sends never block: the executor posts them asynchronously and waits for them
// at the end of the step. Receives block until the message is there. Between two ranks, the
// messages for one destination stage and direction share an MPI tag (message_tag) and MPI
// matches them in order, so both sides list them in the same micro-batch order. Under these
// rules a schedule runs as the dry-run simulator (simulator.h) says it does; with blocking
// (rendezvous) sends, the steady state of 1F1B would deadlock, since neighbours send to each
// other at the same time.

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::parallel {

enum class ActionKind : uint8_t {
  forward,
  backward,
  send_activation,  // this chunk's output for the micro-batch, to the next stage's rank
  recv_activation,  // this chunk's input, from the previous stage's rank
  send_gradient,    // the gradient of this chunk's input, to the previous stage's rank
  recv_gradient,    // the gradient of this chunk's output, from the next stage's rank
  all_reduce_tied,  // sums the tied embedding's gradient between the first and last stage
};
const char* action_kind_name(ActionKind kind);

struct Action {
  ActionKind kind = ActionKind::forward;
  int micro = -1;  // micro-batch, 0..m-1 (-1 for all_reduce_tied)
  int chunk = 0;   // this rank's chunk, 0..v-1
  int peer = -1;   // pipeline-group rank sent to or received from; -1 when not a transfer

  bool operator==(const Action&) const = default;
  bool is_compute() const { return kind == ActionKind::forward || kind == ActionKind::backward; }
  bool is_send() const {
    return kind == ActionKind::send_activation || kind == ActionKind::send_gradient;
  }
  bool is_recv() const {
    return kind == ActionKind::recv_activation || kind == ActionKind::recv_gradient;
  }
  // "F m3 c1", "send_activation m3 c1 -> 2", "all_reduce_tied"
  std::string to_string() const;
};

enum class ScheduleKind : uint8_t {
  gpipe,        // every forward, then every backward (breadth-first over chunks when v > 1)
  one_f_one_b,  // PipeDream-flush: p - r - 1 warm-up forwards, then one forward, one backward
  interleaved,  // Megatron-LM's interleaved 1F1B over v chunks per rank; needs m % p == 0
};
const char* schedule_kind_name(ScheduleKind kind);  // "gpipe", "1f1b", "interleaved"
// Accepts the names above; throws listing them otherwise.
ScheduleKind parse_schedule_kind(const std::string& name);

struct ScheduleOptions {
  // Ends the first and last rank's lists with all_reduce_tied (when p > 1).
  bool tied_embedding = false;
};

struct Schedule {
  ScheduleKind kind = ScheduleKind::one_f_one_b;
  int stages = 1;          // p, the ranks of the pipeline group
  int virtual_stages = 1;  // v, chunks per rank
  int microbatches = 1;    // m
  bool tied_embedding = false;
  std::vector<std::vector<Action>> ranks;  // ranks[r]: rank r's actions, in order
  // Set by nccl_issue_order (pipeline/nccl_order.h): the sends already stand where their
  // receives complete, so the executor runs the lists as they are over NCCL.
  bool in_nccl_issue_order = false;

  int model_stages() const { return stages * virtual_stages; }
  int model_stage(int rank, int chunk) const { return chunk * stages + rank; }
  int rank_of(int model_stage) const { return model_stage % stages; }
  int chunk_of(int model_stage) const { return model_stage / stages; }
  // "1f1b p4 v1 m8"
  std::string name() const;
};

// Largest sizes accepted, so a hostile flag cannot ask for billions of actions; p * v stays
// below half of MPI's smallest guaranteed tag bound (32767) since tags encode the stage.
constexpr int kMaxModelStages = 16384;
constexpr int64_t kMaxComputeActions = int64_t(1) << 22;

// Why (kind, p, v, m) has no schedule, or "" when it has one.
std::string schedule_invalid_reason(ScheduleKind kind, int stages, int virtual_stages,
                                    int microbatches);

// The per-rank action lists. 1F1B with v > 1 is the interleaved schedule (as in Megatron-LM);
// interleaved with v = 1 is plain 1F1B. Throws tessera::Error naming the schedule and the rule
// when (p, v, m) is invalid.
Schedule make_schedule(ScheduleKind kind, int stages, int virtual_stages, int microbatches,
                       const ScheduleOptions& options = {});

// The MPI tag of a transfer action on `rank`: the destination model stage and the direction,
// so sender and receiver compute the same tag.
int message_tag(const Schedule& schedule, int rank, const Action& action);

// The ideal bubble of a p-stage pipeline with v chunks per rank and m micro-batches: idle time
// over compute time, (p - 1) / (v * m).
double ideal_bubble(int stages, int virtual_stages, int microbatches);

}  // namespace tessera::parallel
