// StepTrace (parallel/step_trace.h): its events follow the trace event format, a recorder's
// calls land on the right track with their labels, merging keeps every rank's events, and the
// SVG draws what the trace holds. The traced training run is tools/trace_test.sh.

#include <gtest/gtest.h>

#include "support/error_of.h"
#include "tessera/parallel/comm/flight_recorder.h"
#include "tessera/parallel/step_trace.h"

namespace tessera::parallel {
namespace {

TEST(StepTraceN1, SpansAndCallsBecomeCompleteEventsOnTheirTracks) {
  FlightRecorder r(1);
  const int dp = r.add_group({"dp", "world/dp:1", 2, 0});
  const int pp = r.add_group({"pp", "world/pp:0", 2, 1});
  const uint64_t a = r.record(dp, "all_reduce", "sum", 4096, "f32", -1, 3);
  r.mark(a, FlightState::started);
  r.mark(a, FlightState::completed);
  const uint64_t s = r.record(pp, "send", "", 256, "bf16", 0, 3);
  r.mark(s, FlightState::completed);
  StepTrace t(1);
  const int64_t now = flight_clock_us();
  t.span(TraceTrack::step, "data", now - 5000, now - 4000);
  t.add_calls(r, now - 10'000'000, now + 10'000'000);
  const nlohmann::json j = t.to_json();
  ASSERT_TRUE(j["traceEvents"].is_array());
  int meta = 0;
  std::vector<std::pair<int, std::string>> spans;
  for (const nlohmann::json& e : j["traceEvents"]) {
    EXPECT_EQ(e["pid"], 1);
    if (e["ph"] == "M") {
      ++meta;
      continue;
    }
    ASSERT_EQ(e["ph"], "X");
    EXPECT_GE(e["dur"].get<int64_t>(), 0);
    spans.emplace_back(e["tid"].get<int>(), e["name"].get<std::string>());
  }
  EXPECT_EQ(meta, 5);  // the process's name and sort index, the three tracks' names
  EXPECT_EQ(spans, (std::vector<std::pair<int, std::string>>{
                       {0, "data"}, {2, "all_reduce dp #1"}, {1, "send #1 to pp rank 0"}}));
  EXPECT_EQ(j["traceEvents"][6]["args"]["bytes"], 4096);
  EXPECT_EQ(j["traceEvents"][6]["args"]["group"], "world/dp:1");

  // Calls queued outside the window are left out.
  StepTrace none(1);
  none.add_calls(r, now + 1'000'000'000, now + 2'000'000'000);
  EXPECT_EQ(none.size(), 0u);
}

TEST(StepTraceN1, MergeKeepsEveryRankAndTheSvgDrawsIt) {
  StepTrace a(0), b(1);
  a.span(TraceTrack::step, "step 3", 1000, 9000);
  a.span(TraceTrack::pipeline, "forward m0", 1000, 4000);
  b.span(TraceTrack::pipeline, "backward m0", 4000, 8000);
  const nlohmann::json merged = merge_traces({a.to_json(), b.to_json()});
  EXPECT_EQ(merged["traceEvents"].size(), 5u + 2u + 5u + 1u);
  const std::string svg = render_trace_svg(merged, "two ranks");
  EXPECT_NE(svg.find("<title>forward m0 (3.0 ms)</title>"), std::string::npos);
  EXPECT_NE(svg.find("<title>backward m0 (4.0 ms)</title>"), std::string::npos);
  EXPECT_NE(svg.find(">rank 1 pipeline</text>"), std::string::npos);
  EXPECT_NE(svg.find(">8.0 ms</text>"), std::string::npos);  // the axis reaches the last span

  using tessera::testing::error_of;
  EXPECT_NE(error_of([] { merge_traces({nlohmann::json::object()}); }).find("no \"traceEvents\""),
            std::string::npos);
  EXPECT_NE(error_of([] { render_trace_svg(merge_traces({StepTrace(0).to_json()}), "x"); })
                .find("holds no span"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera::parallel
