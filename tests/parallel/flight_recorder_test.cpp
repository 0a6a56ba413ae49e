// The flight recorder (comm/flight_recorder.h): the ring, sequence numbers, state moves, what
// every communicator records; the dump read back (hostile fields refused); and the merge's
// verdicts on dumps built here (comm/flight_diagnosis.h). The planted faults under mpiexec are
// tools/flight_faults_test.sh.

#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <vector>

#include "support/error_of.h"
#include "tessera/parallel/comm/flight_diagnosis.h"
#include "tessera/parallel/comm/flight_recorder.h"
#include "tessera/parallel/comm/run_ranks.h"
#include "tessera/tessera.h"

namespace tessera::parallel {
namespace {

using tessera::testing::error_of;

TEST(FlightRecorderN1, TheRingKeepsTheNewestCallsAndCountsTheRest) {
  FlightRecorder r(0, 4);
  const int g = r.add_group({"dp", "world/dp:0", 2, 0});
  for (int i = 0; i < 6; ++i) r.record(g, "all_reduce", "sum", 16, "f32", -1, i);
  const std::vector<FlightRecord> rs = r.records();
  ASSERT_EQ(rs.size(), 4u);
  EXPECT_EQ(rs.front().id, 3u);
  EXPECT_EQ(rs.back().id, 6u);
  EXPECT_EQ(rs.back().seq, 6);
  EXPECT_EQ(r.dropped(), 2u);
  r.mark(1, FlightState::completed);  // overwritten: no effect on the record in its slot
  EXPECT_EQ(r.records()[2].state, FlightState::queued);
}

TEST(FlightRecorderN1, SequencesArePerGroupAndPerPeerAndDirection) {
  FlightRecorder r(0);
  const int pp = r.add_group({"pp", "world/pp:0", 3, 0});
  const int dp = r.add_group({"dp", "world/dp:0", 2, 0});
  r.record(dp, "all_reduce", "sum", 4, "f32", -1, 1);
  r.record(pp, "send", "", 4, "f32", 1, 1);
  r.record(pp, "send", "", 4, "f32", 2, 1);
  r.record(pp, "recv", "", 4, "f32", 1, 1);
  r.record(pp, "send", "", 4, "f32", 1, 1);
  r.record(dp, "all_gather", "", 8, "f32", -1, 1);
  std::vector<int64_t> seqs;
  for (const FlightRecord& c : r.records()) seqs.push_back(c.seq);
  EXPECT_EQ(seqs, (std::vector<int64_t>{1, 1, 1, 1, 2, 2}));
}

TEST(FlightRecorderN1, StatesMoveForwardOnly) {
  FlightRecorder r(0);
  const int g = r.add_group({"world", "world", 2, 0});
  const uint64_t id = r.record(g, "barrier", "", 0, "", -1, 3);
  r.mark(id, FlightState::started);
  r.mark(id, FlightState::completed);
  r.mark(id, FlightState::started);  // late: ignored
  const FlightRecord c = r.records()[0];
  EXPECT_EQ(c.state, FlightState::completed);
  EXPECT_GT(c.started_us, 0);
  EXPECT_GE(c.completed_us, c.started_us);
  EXPECT_GE(c.started_us, c.queued_us);
  // A test() that sees a call done without a wait: started is set with completed.
  const uint64_t polled = r.record(g, "all_reduce", "max", 8, "f64", -1, 3);
  r.mark(polled, FlightState::completed);
  EXPECT_EQ(r.records()[1].started_us, r.records()[1].completed_us);
}

TEST(FlightRecorderN1, TheFirstFailureRunsTheHookOnce) {
  FlightRecorder r(0);
  const int g = r.add_group({"world", "world", 2, 0});
  std::vector<std::string> seen;
  r.set_on_failure([&](const std::string& why) { seen.push_back(why); });
  r.fail(r.record(g, "all_reduce", "sum", 4, "f32", -1, 1), "timed out");
  r.fail(r.record(g, "all_reduce", "sum", 4, "f32", -1, 1), "refused");
  EXPECT_EQ(seen, std::vector<std::string>{"timed out"});
  EXPECT_EQ(r.records()[0].state, FlightState::failed);
  EXPECT_EQ(r.records()[1].state, FlightState::failed);
}

// Every call of every communicator lands in its rank's recorder, under the same (group, seq) on
// every member, and the dump reads back.
TEST(FlightRecorderN1, CommunicatorsRecordEveryCallAlikeOnEveryRank) {
  std::mutex mutex;
  std::vector<nlohmann::json> dumps(4);
  run_ranks(4, [&](std::shared_ptr<Communicator> world) {
    auto dp = world->split(world->rank() % 2, world->rank(), "dp");
    world->set_step(7);
    Tensor x = ones({256});
    dp->all_reduce(x);
    auto w = dp->all_gather_async(ones({4}), zeros({8}));
    while (!w->test()) {
    }
    if (world->rank() < 2) {
      if (world->rank() == 0) world->send(x, 1);
      else world->recv(x, 0);
    }
    world->barrier();
    world->all_reduce(zeros({1}, DType::f64), CommOp::max);
    std::lock_guard lock(mutex);
    dumps[size_t(world->rank())] = world->flight_recorder()->to_json("test");
  });
  for (int r = 0; r < 4; ++r) {
    const FlightDump d = parse_flight_dump(dumps[size_t(r)], "rank " + std::to_string(r));
    EXPECT_EQ(d.rank, r);
    ASSERT_EQ(d.groups.size(), 2u);
    // The first call on a group registers it: dp's all-reduce came before any world call.
    EXPECT_EQ(d.groups[0].key, "world/dp:" + std::to_string(r % 2));
    EXPECT_EQ(d.groups[1].key, "world");
    std::vector<std::string> ops;
    for (const FlightCall& c : d.calls) {
      ops.push_back(c.op + "#" + std::to_string(c.seq));
      EXPECT_EQ(c.state, "completed") << c.op;
      EXPECT_EQ(c.step, 7);
    }
    std::vector<std::string> want = {"all_reduce#1", "all_gather#2"};
    if (r == 0) want.push_back("send#1");
    if (r == 1) want.push_back("recv#1");
    want.insert(want.end(), {"barrier#1", "all_reduce#2"});
    EXPECT_EQ(ops, want) << "rank " << r;
    EXPECT_EQ(d.calls[0].bytes, 1024);
    EXPECT_EQ(d.calls[1].bytes, 32);  // an all-gather counts its output
    EXPECT_EQ(d.calls.back().dtype, "f64");
    EXPECT_EQ(d.calls.back().reduce, "max");
  }
  std::vector<FlightDump> all;
  for (int r = 0; r < 4; ++r) all.push_back(parse_flight_dump(dumps[size_t(r)], "d"));
  const FlightDiagnosis diagnosis = diagnose_flight(all);
  EXPECT_FALSE(diagnosis.hang_found);
  EXPECT_EQ(diagnosis.verdicts,
            std::vector<std::string>{
                "no hang in communication: every call of every group completed on every rank (a "
                "job that is stuck is stuck outside the collectives: compute, data loading or "
                "I/O)"});
}

TEST(FlightRecorderN1, AHostileDumpIsRefusedNamingTheField) {
  FlightRecorder r(1);
  const int g = r.add_group({"dp", "world/dp:1", 2, 1});
  r.record(g, "all_reduce", "sum", 4, "f32", -1, 2);
  const nlohmann::json good = r.to_json("x");
  EXPECT_NO_THROW(parse_flight_dump(good, "rank_1.json"));
  auto refused = [&](auto edit) {
    nlohmann::json j = good;
    edit(j);
    return error_of([&] { parse_flight_dump(j, "rank_1.json"); });
  };
  EXPECT_NE(refused([](auto& j) { j["format"] = "x"; }).find("'format' is not tessera-flight"),
            std::string::npos);
  EXPECT_NE(refused([](auto& j) { j["records"][0]["group"] = 5; })
                .find("rank_1.json records[0]: 'group' 5 is not one of the 1 groups"),
            std::string::npos);
  EXPECT_NE(refused([](auto& j) { j["groups"][0]["rank"] = 2; })
                .find("rank_1.json groups[0]: 'rank' 2 is outside its 2 ranks"),
            std::string::npos);
  EXPECT_NE(refused([](auto& j) { j["records"][0]["state"] = "lost"; }).find("'state' 'lost'"),
            std::string::npos);
  EXPECT_NE(refused([](auto& j) { j["records"][0].erase("seq"); })
                .find("rank_1.json records[0]: missing 'seq'"),
            std::string::npos);
  EXPECT_NE(refused([](auto& j) { j["version"] = 2; }).find("newer than this Tessera"),
            std::string::npos);
}

// Dumps of two ranks of one group, written here: rank 1 completed #1 and then blocked in a
// pipeline recv that rank 0 never sent, while rank 0 waits in #2.
TEST(FlightRecorderN1, TheMergeNamesTheRankThatNeverJoinedAndWhereItIs) {
  FlightRecorder r0(0), r1(1);
  const int d0 = r0.add_group({"dp", "world/dp:0", 2, 0});
  const int d1 = r1.add_group({"dp", "world/dp:0", 2, 1});
  const int p1 = r1.add_group({"pp", "world/pp:0", 2, 1});
  const int p0 = r0.add_group({"pp", "world/pp:0", 2, 0});
  (void)p0;
  r0.mark(r0.record(d0, "all_reduce", "sum", 4200000, "f32", -1, 11), FlightState::completed);
  r1.mark(r1.record(d1, "all_reduce", "sum", 4200000, "f32", -1, 11), FlightState::completed);
  r0.mark(r0.record(d0, "all_reduce", "sum", 4200000, "f32", -1, 12), FlightState::started);
  r1.mark(r1.record(p1, "recv", "", 1048576, "bf16", 0, 12), FlightState::started);
  const std::vector<FlightDump> dumps = {parse_flight_dump(r0.to_json("a"), "0"),
                                         parse_flight_dump(r1.to_json("b"), "1")};
  const FlightDiagnosis d = diagnose_flight(dumps);
  EXPECT_TRUE(d.hang_found);
  EXPECT_EQ(d.verdicts, (std::vector<std::string>{
                            "group dp[0,1] all_reduce #2 (4.2 MB f32, step 12): rank 1 never "
                            "joined; rank 1's last completed op is dp[0,1] all_reduce #1 (step "
                            "11); it is blocked in pp[0,1] recv #1 from rank 0 (step 12)",
                            "group pp[0,1] recv #1 from rank 0 (1.0 MB bf16, step 12): rank 0 "
                            "never posted the matching send; rank 0's last completed op is "
                            "dp[0,1] all_reduce #1 (step 11); it is blocked in dp[0,1] "
                            "all_reduce #2 (step 12)"}));
  // Both ranks issued the one call every member completed within microseconds: none is named.
  EXPECT_EQ(d.slowest.rfind("slowest rank: none stands out (every rank joined its collectives "
                            "within 0.000 s",
                            0),
            0u)
      << d.slowest;

  // A job of three whose rank 2 left nothing: named first.
  const FlightDiagnosis three = diagnose_flight(dumps, 3);
  EXPECT_EQ(three.verdicts.front(),
            "rank 2 left no dump (it died, or did not dump within the dump window)");
  // A world that cannot hold the dumps: refused, not read as "from the dumps" or used as is.
  EXPECT_NE(tessera::testing::error_of([&] {
              diagnose_flight(dumps, -1);
            }).find("diagnose: the world size must be in [1, 2^24] (0: from the dumps), got -1"),
            std::string::npos);
  EXPECT_NE(tessera::testing::error_of([&] {
              diagnose_flight(dumps, 1);
            }).find("diagnose: 1 is rank 1, outside a world of 1 ranks"),
            std::string::npos);
}

TEST(FlightRecorderN1, ByteTextUsesDecimalUnits) {
  EXPECT_EQ(byte_text(0), "0 B");
  EXPECT_EQ(byte_text(999), "999 B");
  EXPECT_EQ(byte_text(4194304), "4.2 MB");
  EXPECT_EQ(byte_text(1048576), "1.0 MB");
  EXPECT_EQ(byte_text(262144), "262.1 kB");
  EXPECT_EQ(byte_text(int64_t(3) << 40), "3.3 TB");
}

}  // namespace
}  // namespace tessera::parallel
