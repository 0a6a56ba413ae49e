#pragma once
// Whether a schedule's transfers can run over NCCL. NCCL has no asynchronous send of the MPI
// kind: point-to-point operations are issued in groups (ncclGroupStart / ncclGroupEnd), the
// operations of one group run concurrently, a group completes only when every operation in it
// has met its peer's, and groups run one after another on the communication stream (the next
// group of a rank starts when the previous one completed). The executor will issue each
// maximal run of consecutive transfer actions of a rank's list as one group, and the tied
// all-reduce as a group of its own.
//
// The checker runs those groups for every rank: a rank posts its next group once the one
// before completed; an operation meets its peer's when both are posted (the k-th send on a
// channel meets the k-th receive, channels being (sender, receiver, message_tag)); a group
// completes when all its operations have met. Compute actions need no partner. A state where
// no group can complete while some rank has actions left is a deadlock, reported with what
// each stuck rank waits for.

#include <string>
#include <vector>

#include "tessera/parallel/pipeline/schedule.h"

namespace tessera::parallel {

// One rank's groups: index ranges [begin, end) of its action list, in order.
struct TransferGroup {
  size_t begin = 0, end = 0;
};
std::vector<TransferGroup> transfer_groups(const std::vector<Action>& list);

// Empty when the schedule's groups run to completion on every rank; otherwise one line per
// stuck rank ("rank 1 stuck in its group at action 7 (recv_gradient m2 c0 <- 2): waits for
// rank 2, which is stuck in a group at action 9").
std::vector<std::string> nccl_order_errors(const Schedule& schedule);

}  // namespace tessera::parallel
