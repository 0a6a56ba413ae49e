// The dry-run simulator on broken schedules: each planted fault (two actions swapped, one
// dropped or duplicated, a wrong peer, blocking sends) is reported with the rank, the action
// and what is wrong.

#include <gtest/gtest.h>

#include <algorithm>

#include "parallel/rank_test.h"
#include "tessera/core/error.h"
#include "tessera/parallel/pipeline/schedule.h"
#include "tessera/parallel/pipeline/simulator.h"

namespace tessera::parallel {
namespace {

// Index of the first action of `kind` for `micro` (and `chunk`) in rank's list.
size_t find(const Schedule& s, int rank, ActionKind kind, int micro, int chunk = 0) {
  const std::vector<Action>& list = s.ranks[size_t(rank)];
  auto it = std::find_if(list.begin(), list.end(), [&](const Action& a) {
    return a.kind == kind && a.micro == micro && a.chunk == chunk;
  });
  EXPECT_NE(it, list.end());
  return size_t(it - list.begin());
}

// The simulator's report of s; asserts it found something.
std::string report(const Schedule& s, const SimulationOptions& options = {}) {
  SimulationResult r = simulate(s, options);
  EXPECT_FALSE(r.ok()) << s.name() << " was planted with a fault";
  std::string out;
  for (const std::string& e : r.errors) out += e + "\n";
  return out;
}

#define EXPECT_REPORTS(text, needle) \
  EXPECT_NE((text).find(needle), std::string::npos) << "report:\n" << (text)

RANK_TEST(PipelineBrokenScheduleN1, BackwardSwappedBeforeItsForward) {
  Schedule s = make_schedule(ScheduleKind::one_f_one_b, 2, 1, 4);
  // The last rank runs F0 then B0; swap them.
  std::vector<Action>& list = s.ranks[1];
  std::swap(list[find(s, 1, ActionKind::forward, 0)], list[find(s, 1, ActionKind::backward, 0)]);
  EXPECT_REPORTS(report(s), "rank 1 action 1 (B m0 c0): backward before its forward");
  EXPECT_THROW(check_schedule(s), Error);
}

RANK_TEST(PipelineBrokenScheduleN1, ForwardSwappedBeforeItsInputArrives) {
  Schedule s = make_schedule(ScheduleKind::gpipe, 2, 1, 4);
  std::vector<Action>& list = s.ranks[1];
  std::swap(list[find(s, 1, ActionKind::recv_activation, 2)],
            list[find(s, 1, ActionKind::forward, 2)]);
  EXPECT_REPORTS(report(s), "(F m2 c0): runs before its input activation was received");
}

RANK_TEST(PipelineBrokenScheduleN1, ReceivesSwappedAreMatchedInOrder) {
  Schedule s = make_schedule(ScheduleKind::gpipe, 2, 1, 4);
  std::vector<Action>& list = s.ranks[1];
  std::swap(list[find(s, 1, ActionKind::recv_activation, 0)],
            list[find(s, 1, ActionKind::recv_activation, 1)]);
  EXPECT_REPORTS(report(s),
                 "rank 1 action 0 (recv_activation m1 c0 <- 0): the next message from "
                 "rank 0 on this channel is micro-batch 0");
}

RANK_TEST(PipelineBrokenScheduleN1, ChunksOnOneRankSwapped) {
  Schedule s = make_schedule(ScheduleKind::gpipe, 1, 2, 2);
  std::vector<Action>& list = s.ranks[0];
  std::swap(list[find(s, 0, ActionKind::forward, 0, 0)],
            list[find(s, 0, ActionKind::forward, 0, 1)]);
  EXPECT_REPORTS(report(s), "(F m0 c1): runs before its input, the forward of chunk 0");
}

RANK_TEST(PipelineBrokenScheduleN1, DroppedSendDeadlocks) {
  // The last message on its channel: nothing later can be mistaken for it.
  Schedule s = make_schedule(ScheduleKind::one_f_one_b, 4, 1, 8);
  std::vector<Action>& list = s.ranks[1];
  list.erase(list.begin() + std::ptrdiff_t(find(s, 1, ActionKind::send_activation, 7)));
  std::string r = report(s);
  EXPECT_REPORTS(r, "deadlock: rank 2 stuck at action");
  EXPECT_REPORTS(r,
                 "(recv_activation m7 c0 <- 1): waits for a message from rank 1 that is never "
                 "sent");
  // An earlier one is worse: MPI would hand the next micro-batch's data to the receive.
  Schedule early = make_schedule(ScheduleKind::one_f_one_b, 4, 1, 8);
  early.ranks[1].erase(early.ranks[1].begin() +
                       std::ptrdiff_t(find(early, 1, ActionKind::send_activation, 5)));
  EXPECT_REPORTS(report(early),
                 "(recv_activation m5 c0 <- 1): the next message from rank 1 on "
                 "this channel is micro-batch 6");
}

RANK_TEST(PipelineBrokenScheduleN1, DroppedBackwardIsUnbalanced) {
  Schedule s = make_schedule(ScheduleKind::one_f_one_b, 2, 1, 4);
  std::vector<Action>& list = s.ranks[0];  // the first stage sends no gradient on
  list.erase(list.begin() + std::ptrdiff_t(find(s, 0, ActionKind::backward, 3)));
  EXPECT_REPORTS(report(s), "rank 0 never runs the backward of micro-batch 3 chunk 0");
}

RANK_TEST(PipelineBrokenScheduleN1, DuplicatesAndStrayMessages) {
  Schedule twice = make_schedule(ScheduleKind::gpipe, 2, 1, 2);
  twice.ranks[0].insert(twice.ranks[0].begin() + 1, twice.ranks[0][0]);
  EXPECT_REPORTS(report(twice), "rank 0 action 1 (F m0 c0): runs a second time");

  Schedule stray = make_schedule(ScheduleKind::gpipe, 2, 1, 2);
  stray.ranks[0].push_back(Action{ActionKind::send_activation, 1, 0, 1});
  EXPECT_REPORTS(report(stray),
                 "rank 0 sends the activation of micro-batch 1 to rank 1, which "
                 "never receives it");

  Schedule early = make_schedule(ScheduleKind::gpipe, 2, 1, 2);
  early.ranks[0].insert(early.ranks[0].begin(), Action{ActionKind::send_activation, 1, 0, 1});
  EXPECT_REPORTS(report(early), "sends an activation before its forward ran");
}

RANK_TEST(PipelineBrokenScheduleN1, WrongPeersAndRanges) {
  Schedule peer = make_schedule(ScheduleKind::gpipe, 4, 1, 2);
  peer.ranks[1][find(peer, 1, ActionKind::send_activation, 0)].peer = 3;
  EXPECT_REPORTS(report(peer), "(send_activation m0 c0 -> 3): must go to rank 2");

  Schedule last = make_schedule(ScheduleKind::gpipe, 2, 1, 2);
  last.ranks[1].push_back(Action{ActionKind::send_activation, 0, 0, 0});
  EXPECT_REPORTS(report(last), "model stage 1 has no neighbour on another rank");

  Schedule range = make_schedule(ScheduleKind::gpipe, 2, 1, 2);
  range.ranks[0][0].micro = 7;
  EXPECT_REPORTS(report(range), "micro-batch or chunk out of range (m = 2, v = 1)");
}

RANK_TEST(PipelineBrokenScheduleN1, TiedAllReduceBeforeTheGradientIsComplete) {
  Schedule s = make_schedule(ScheduleKind::one_f_one_b, 2, 1, 4, {.tied_embedding = true});
  std::rotate(s.ranks[0].begin(), s.ranks[0].end() - 1, s.ranks[0].end());
  EXPECT_REPORTS(report(s),
                 "rank 0 action 0 (all_reduce_tied): runs before the backward of "
                 "micro-batch 0 chunk 0, so the tied gradient is incomplete");

  Schedule lonely = make_schedule(ScheduleKind::one_f_one_b, 2, 1, 4, {.tied_embedding = true});
  lonely.ranks[1].pop_back();
  EXPECT_REPORTS(report(lonely), "deadlock: rank 0 stuck at action");
  EXPECT_REPORTS(report(lonely), "waits for rank 1 to join the tied all-reduce");
}

// Why the executor posts sends asynchronously: with rendezvous sends, 1F1B's steady state has
// neighbours sending to each other at once. GPipe only ever sends one way at a time.
RANK_TEST(PipelineBrokenScheduleN1, BlockingSendsDeadlockOneFOneB) {
  SimulationOptions blocking;
  blocking.blocking_sends = true;
  Schedule s = make_schedule(ScheduleKind::one_f_one_b, 4, 1, 8);
  std::string r = report(s, blocking);
  EXPECT_REPORTS(r, "deadlock");
  EXPECT_REPORTS(r, "its blocking send waits for rank");
  EXPECT_TRUE(simulate(s).ok());
  SimulationResult g = simulate(make_schedule(ScheduleKind::gpipe, 4, 1, 8), blocking);
  EXPECT_TRUE(g.ok());
  EXPECT_EQ(g.bubble, g.ideal_bubble);
}

}  // namespace
}  // namespace tessera::parallel
