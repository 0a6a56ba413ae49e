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

// How a rank's transfers form groups: every maximal run of consecutive transfers, or each
// transfer alone (the tied all-reduce is always alone).
enum class NcclGrouping { consecutive, each_transfer };

// One rank's groups: index ranges [begin, end) of its action list, in order.
struct TransferGroup {
  size_t begin = 0, end = 0;
};
std::vector<TransferGroup> transfer_groups(const std::vector<Action>& list,
                                           NcclGrouping grouping = NcclGrouping::consecutive);

// Empty when the schedule's groups run to completion on every rank; otherwise one line per
// stuck rank, naming its group's actions.
std::vector<std::string> nccl_order_errors(const Schedule& schedule,
                                           NcclGrouping grouping = NcclGrouping::consecutive);

// The schedule with its sends moved later, each to where its receive runs: the order the
// executor issues over NCCL, one transfer per group. The receives and compute actions keep
// their places; a send only moves later in its own rank's list, so it still follows what it
// sends. Why it cannot deadlock: run every rank's list with asynchronous sends (the MPI
// executor's semantics, under which every schedule here is sound) and number the actions in
// the order they complete; a send then takes its receive's number, and every rank's list is
// ordered by number. Take the transfer pairs in increasing number: by induction every earlier
// pair has completed, the actions between are compute, which waits for nothing, so both ranks
// reach the pair's send and receive and it completes. The checker confirms it for the sweep.
// The result is marked in_nccl_issue_order (a marked schedule comes back as it is), so a caller
// that runs a schedule every step orders it once.
Schedule nccl_issue_order(const Schedule& schedule);

}  // namespace tessera::parallel
