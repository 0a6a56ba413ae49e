// Pipeline schedules and the dry-run simulator (no communication: suites end in N1 and run on
// one rank). Every schedule of the sweep p in {1,2,4,8}, v in {1,2,4},
// m in {1,4,8,32} simulates cleanly, with the bubble and memory its theory predicts. Simulated
// times are sums of small integers, exact in double, so bubbles compare exactly.

#include <gtest/gtest.h>
#include <cmath>

#include <algorithm>
#include <iostream>

#include "parallel/rank_test.h"
#include "tessera/core/error.h"
#include "tessera/parallel/pipeline/detail/nccl_order.h"
#include "tessera/parallel/pipeline/detail/partition.h"
#include "tessera/parallel/pipeline/schedule.h"
#include "tessera/parallel/pipeline/simulator.h"

namespace tessera::parallel {
namespace {

constexpr ScheduleKind kKinds[] = {ScheduleKind::gpipe, ScheduleKind::one_f_one_b,
                                   ScheduleKind::interleaved};

std::string joined(const std::vector<std::string>& errors) {
  std::string out;
  for (const std::string& e : errors) out += e + "\n";
  return out;
}

int count(const std::vector<Action>& list, ActionKind kind) {
  return int(
      std::count_if(list.begin(), list.end(), [&](const Action& a) { return a.kind == kind; }));
}

void check_theory(const Schedule& s, const SimulationResult& r, const SimulationOptions& costs) {
  const int p = s.stages, v = s.virtual_stages, m = s.microbatches;
  // Free transfers: 1F1B and interleaved 1F1B reach (p-1)/(v*m); GPipe does too unless its
  // chunk-by-chunk order starves (v > 1 with fewer micro-batches than stages).
  bool reaches_ideal = s.kind != ScheduleKind::gpipe || v == 1 || m >= p;
  if (costs.transfer_cost == 0 && reaches_ideal) {
    EXPECT_EQ(r.bubble, r.ideal_bubble) << s.name();
  } else {
    EXPECT_GE(r.bubble, r.ideal_bubble) << s.name();
  }
  if (costs.transfer_cost == 0 && s.kind == ScheduleKind::one_f_one_b) {
    EXPECT_EQ(r.makespan, (m + p - 1) * (costs.forward_cost + costs.backward_cost)) << s.name();
  }
  for (int rank = 0; rank < p; ++rank) {
    int peak = r.peak_in_flight[size_t(rank)];
    if (s.kind == ScheduleKind::gpipe) {
      EXPECT_EQ(peak, m * v) << s.name() << " rank " << rank;  // every micro-batch at once
    } else if (s.kind == ScheduleKind::one_f_one_b) {
      EXPECT_EQ(peak, std::min(p - rank, m)) << s.name() << " rank " << rank;
      EXPECT_LE(peak, p);
    } else {
      EXPECT_LE(peak, std::min(2 * (p - rank - 1) + (v - 1) * p + 1, m * v)) << s.name();
    }
  }
}

RANK_TEST(PipelineScheduleN1, SweepSimulatesCleanlyWithTheoreticalBubbleAndMemory) {
  int simulated = 0, skipped = 0;
  for (ScheduleKind kind : kKinds)
    for (int p : {1, 2, 4, 8})
      for (int v : {1, 2, 4})
        for (int m : {1, 4, 8, 32}) {
          std::string why = schedule_invalid_reason(kind, p, v, m);
          if (!why.empty()) {
            // The only rule: interleaving takes micro-batches in groups of p.
            EXPECT_TRUE(kind != ScheduleKind::gpipe && v > 1 && m % p != 0) << why;
            EXPECT_NE(why.find("not a multiple of"), std::string::npos) << why;
            EXPECT_THROW(make_schedule(kind, p, v, m), Error);
            std::cout << "  skipped " << schedule_kind_name(kind) << " p" << p << " v" << v << " m"
                      << m << ": " << why << "\n";
            ++skipped;
            continue;
          }
          Schedule s = make_schedule(kind, p, v, m, {.tied_embedding = true});
          for (const std::vector<Action>& list : s.ranks) {
            EXPECT_EQ(count(list, ActionKind::forward), v * m);
            EXPECT_EQ(count(list, ActionKind::backward), v * m);
          }
          for (SimulationOptions costs : {SimulationOptions{}, SimulationOptions{1, 1, 0, 0},
                                          SimulationOptions{1, 2, 0.25, 0.5}}) {
            SimulationResult r = simulate(s, costs);
            ASSERT_TRUE(r.ok()) << s.name() << "\n" << joined(r.errors);
            check_theory(s, r, costs);
            ++simulated;
          }
        }
  // p in {2, 4, 8} with m = 1, and p = 8 with m = 4, for v in {2, 4}, for both 1F1B names.
  EXPECT_EQ(skipped, 2 * 2 * 4);
  EXPECT_EQ(simulated, 3 * (3 * 4 * 3 * 4 - skipped));
}

// Over NCCL the transfers run as groups (nccl_order.h). As listed, every v = 1 schedule of the
// sweep (GPipe and 1F1B, every p and m) runs its groups of consecutive transfers to the end on
// every rank, and the v > 1 lists do not: a rank's send around the ring to the next chunk waits
// for a receive its peer posts only after sends of its own that wait on this rank, which
// asynchronous MPI sends never notice. nccl_issue_order (sends moved to where their receives
// run, one transfer per group) runs every schedule of the sweep to the end, keeps each rank's
// compute order, and still simulates cleanly under the MPI executor's rules.
RANK_TEST(PipelineScheduleN1, NcclIssueOrderRunsEverySchedule) {
  int listed_safe = 0, listed_stuck = 0, checked = 0;
  for (ScheduleKind kind : kKinds)
    for (int p : {1, 2, 4, 8})
      for (int v : {1, 2, 4})
        for (int m : {1, 4, 8, 32}) {
          if (!schedule_invalid_reason(kind, p, v, m).empty()) continue;
          const Schedule s = make_schedule(kind, p, v, m, {.tied_embedding = true});
          const std::vector<std::string> listed = nccl_order_errors(s);
          if (v == 1 || p == 1) {
            EXPECT_TRUE(listed.empty()) << s.name() << "\n" << joined(listed);
          }
          (listed.empty() ? listed_safe : listed_stuck) += 1;
          const Schedule ordered = nccl_issue_order(s);
          const std::vector<std::string> errors =
              nccl_order_errors(ordered, NcclGrouping::each_transfer);
          EXPECT_TRUE(errors.empty()) << s.name() << " in NCCL order\n" << joined(errors);
          for (int r = 0; r < p; ++r) {
            auto compute = [](const std::vector<Action>& list) {
              std::vector<Action> out;
              for (const Action& a : list)
                if (a.is_compute()) out.push_back(a);
              return out;
            };
            EXPECT_EQ(compute(ordered.ranks[size_t(r)]), compute(s.ranks[size_t(r)])) << s.name();
          }
          const SimulationResult sim = simulate(ordered);
          EXPECT_TRUE(sim.ok()) << s.name() << " in NCCL order\n" << joined(sim.errors);
          // Marked as ordered, and ordering it again is the identity (the trainer orders once).
          EXPECT_FALSE(s.in_nccl_issue_order);
          EXPECT_TRUE(ordered.in_nccl_issue_order);
          EXPECT_EQ(nccl_issue_order(ordered).ranks, ordered.ranks) << s.name();
          ++checked;
        }
  std::cout << "  over NCCL groups as listed: " << listed_safe << " schedules run, " << listed_stuck
            << " (v > 1) deadlock; in NCCL order all " << checked << " run\n";
  EXPECT_EQ(checked, 3 * 4 * 3 * 4 - 2 * 2 * 4);
  // One transfer per group without the reordering: 1F1B's steady state deadlocks (neighbours
  // send to each other at once), which is why the sends move.
  EXPECT_FALSE(nccl_order_errors(make_schedule(ScheduleKind::one_f_one_b, 2, 1, 4),
                                 NcclGrouping::each_transfer)
                   .empty());

  // Planted: rank 0 receives its first gradient before sending its second activation, as its
  // own group, while rank 1 first waits for that activation: neither group can complete.
  Schedule s = make_schedule(ScheduleKind::gpipe, 2, 1, 2);
  std::vector<Action>& r0 = s.ranks[0];
  auto at = [&](ActionKind kind, int micro) {
    for (size_t i = 0; i < r0.size(); ++i)
      if (r0[i].kind == kind && r0[i].micro == micro) return i;
    return r0.size();
  };
  const Action recv = r0[at(ActionKind::recv_gradient, 1)];
  r0.erase(r0.begin() + long(at(ActionKind::recv_gradient, 1)));
  r0.insert(r0.begin() + long(at(ActionKind::forward, 1)), recv);
  const std::vector<std::string> errors = nccl_order_errors(s);
  ASSERT_FALSE(errors.empty()) << "the planted recv-before-send went unnoticed";
  EXPECT_NE(errors.front().find("stuck in its group"), std::string::npos) << errors.front();
}

RANK_TEST(PipelineScheduleN1, OrdersOfComputeActions) {
  auto compute = [](const std::vector<Action>& list) {
    std::string out;
    for (const Action& a : list)
      if (a.is_compute())
        out += str_cat(a.kind == ActionKind::forward ? "F" : "B", a.micro, a.chunk, " ");
    return out;
  };
  // 1F1B: rank 0 of 4 warms up with 3 forwards; the last rank alternates from the start.
  Schedule f = make_schedule(ScheduleKind::one_f_one_b, 4, 1, 6);
  EXPECT_EQ(compute(f.ranks[0]), "F00 F10 F20 F30 B00 F40 B10 F50 B20 B30 B40 B50 ");
  EXPECT_EQ(compute(f.ranks[3]), "F00 B00 F10 B10 F20 B20 F30 B30 F40 B40 F50 B50 ");
  // Interleaved: micro-batches in groups of p per chunk, backwards from the last chunk.
  Schedule i = make_schedule(ScheduleKind::interleaved, 2, 2, 4);
  EXPECT_EQ(compute(i.ranks[1]),
            "F00 F10 F01 B01 F11 B11 F20 B00 F30 B10 F21 B21 F31 B31 "
            "B20 B30 ");
  // Transfers wrap from the last rank back to rank 0 between chunks.
  EXPECT_EQ(i.ranks[1][2], (Action{ActionKind::send_activation, 0, 0, 0}));
  // 1F1B with virtual stages is the interleaved schedule; interleaved with v = 1 is 1F1B.
  EXPECT_EQ(make_schedule(ScheduleKind::one_f_one_b, 2, 2, 4).ranks, i.ranks);
  Schedule plain = make_schedule(ScheduleKind::interleaved, 4, 1, 6);
  EXPECT_EQ(plain.kind, ScheduleKind::one_f_one_b);
  EXPECT_EQ(plain.ranks, f.ranks);
  // GPipe: every forward, then every backward, chunk by chunk.
  Schedule g = make_schedule(ScheduleKind::gpipe, 1, 2, 2);
  EXPECT_EQ(compute(g.ranks[0]), "F00 F10 F01 F11 B01 B11 B00 B10 ");
  EXPECT_TRUE(g.ranks[0].size() == 8) << "one rank: chunks hand over without messages";
  // The tied all-reduce closes the first and last rank's lists only.
  Schedule t = make_schedule(ScheduleKind::gpipe, 3, 1, 2, {.tied_embedding = true});
  EXPECT_EQ(t.ranks[0].back().kind, ActionKind::all_reduce_tied);
  EXPECT_EQ(t.ranks[2].back().kind, ActionKind::all_reduce_tied);
  EXPECT_EQ(count(t.ranks[1], ActionKind::all_reduce_tied), 0);
  EXPECT_FALSE(
      make_schedule(ScheduleKind::gpipe, 1, 1, 2, {.tied_embedding = true}).tied_embedding);
}

RANK_TEST(PipelineScheduleN1, MessageTagsPairSendsWithReceives) {
  Schedule s = make_schedule(ScheduleKind::interleaved, 4, 2, 8);
  EXPECT_EQ(message_tag(s, 3, Action{ActionKind::send_activation, 0, 0, 0}),
            message_tag(s, 0, Action{ActionKind::recv_activation, 0, 1, 3}));
  EXPECT_EQ(message_tag(s, 0, Action{ActionKind::send_gradient, 0, 1, 3}),
            message_tag(s, 3, Action{ActionKind::recv_gradient, 0, 0, 0}));
  EXPECT_NE(message_tag(s, 1, Action{ActionKind::recv_activation, 0, 0, 0}),
            message_tag(s, 1, Action{ActionKind::recv_gradient, 0, 0, 2}));
  EXPECT_THROW(message_tag(s, 0, Action{ActionKind::forward, 0, 0, -1}), Error);
}

RANK_TEST(PipelineScheduleN1, InvalidSizesAreClearErrors) {
  auto message = [](auto fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string e = message([] { make_schedule(ScheduleKind::interleaved, 4, 2, 6); });
  EXPECT_NE(e.find("interleaved (p = 4, v = 2, m = 6)"), std::string::npos) << e;
  EXPECT_NE(e.find("m = 6 is not a multiple of 4"), std::string::npos) << e;
  e = message([] { make_schedule(ScheduleKind::one_f_one_b, 0, 1, 4); });
  EXPECT_NE(e.find("must be >= 1"), std::string::npos) << e;
  e = message([] { make_schedule(ScheduleKind::gpipe, 8, 4, 1 << 30); });
  EXPECT_NE(e.find("exceeds the limit"), std::string::npos) << e;
  e = message([] { make_schedule(ScheduleKind::gpipe, 20000, 1, 1); });
  EXPECT_NE(e.find("model stages exceeds"), std::string::npos) << e;
  e = message([] { parse_schedule_kind("zero-bubble"); });
  EXPECT_NE(e.find("'zero-bubble'; expected gpipe, 1f1b or interleaved"), std::string::npos) << e;
  EXPECT_EQ(parse_schedule_kind("interleaved"), ScheduleKind::interleaved);

  Schedule s = make_schedule(ScheduleKind::gpipe, 2, 1, 2);
  s.ranks.pop_back();
  EXPECT_THROW(simulate(s), Error);
  EXPECT_THROW(simulate(make_schedule(ScheduleKind::gpipe, 2, 1, 2), {1, -1, 0, 0}), Error);
  // A cost that is not a number, or one whose sum over the actions overflows, is named; with
  // no compute at all the bubble (idle / busy) was printed as a measured 0.
  const Schedule two = make_schedule(ScheduleKind::gpipe, 2, 1, 2);
  e = message([&] { simulate(two, {NAN, 2, 0, 0}); });
  EXPECT_NE(e.find("the forward cost must be in [0, 1e15], got nan"), std::string::npos) << e;
  e = message([&] { simulate(two, {1, 2, 0, 1e300}); });
  EXPECT_NE(e.find("the all-reduce cost must be in [0, 1e15], got 1e+300"), std::string::npos) << e;
  e = message([&] { simulate(two, {0, 0, 1, 0}); });
  EXPECT_NE(e.find("forward and backward costs are both 0"), std::string::npos) << e;
  EXPECT_EQ(message([&] { simulate(two, {0, 1e15, 0, 0}); }), "no error");
}

RANK_TEST(PipelineScheduleN1, StagesAreBalancedAndContiguous) {
  // 8 layers over p = 2, v = 2: model stage s = chunk * 2 + rank holds layers 2s, 2s + 1.
  for (int rank = 0; rank < 2; ++rank)
    for (int chunk = 0; chunk < 2; ++chunk) {
      nn::StageSpec spec = pipeline_stage_spec(8, 2, 2, rank, chunk);
      int s = chunk * 2 + rank;
      EXPECT_EQ(spec.first_layer, 2 * s);
      EXPECT_EQ(spec.num_layers, 2);
      EXPECT_EQ(spec.has_embedding, s == 0);
      EXPECT_EQ(spec.has_head, s == 3);
    }
  nn::StageSpec whole = pipeline_stage_spec(5, 1, 1, 0, 0);
  EXPECT_TRUE(whole.has_embedding && whole.has_head && whole.num_layers == 5);
  try {
    pipeline_stage_spec(6, 2, 2, 0, 0);
    ADD_FAILURE() << "6 layers over 4 stages must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("6 layers cannot be split into pp * v = 2 * 2 = 4"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(pipeline_stage_spec(8, 2, 2, 2, 0), Error);
}

RANK_TEST(PipelineScheduleN1, TimelineFollowsTheCosts) {
  // GPipe over 2 ranks, one micro-batch: F, transfer, F, B, transfer, B.
  SimulationResult r = simulate(make_schedule(ScheduleKind::gpipe, 2, 1, 1), {1, 2, 0.5, 0});
  ASSERT_TRUE(r.ok()) << joined(r.errors);
  EXPECT_EQ(r.makespan, 1 + 0.5 + 1 + 2 + 0.5 + 2);
  EXPECT_EQ(r.busy, (std::vector<double>{3, 3}));
  EXPECT_EQ(r.idle, (std::vector<double>{4, 4}));
  ASSERT_EQ(r.boxes.size(), 4u);
  EXPECT_EQ(r.boxes[1].rank, 1);
  EXPECT_EQ(r.boxes[1].start, 1.5);

  Schedule s = make_schedule(ScheduleKind::one_f_one_b, 4, 1, 8);
  std::string summary = format_summary(s, simulate(s));
  EXPECT_NE(summary.find("schedule 1f1b p4 v1 m8: sound, makespan 33"), std::string::npos)
      << summary;
  EXPECT_NE(summary.find("measured 0.375, ideal (p-1)/(v*m) = 0.375"), std::string::npos)
      << summary;
  EXPECT_NE(summary.find("rank 0: busy 24, idle 9, peak in-flight micro-batch chunks 4"),
            std::string::npos)
      << summary;
}

}  // namespace
}  // namespace tessera::parallel
