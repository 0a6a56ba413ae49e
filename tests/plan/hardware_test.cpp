// The shipped GPU table and the readers of an edited one: every entry has its sources and a
// dated price; bad files are refused naming the file, the entry and the field.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/plan/hardware.h"

namespace tessera::plan {
namespace {

TEST(GpuTable, BuiltinHasTheIssuesGpusWithSources) {
  const GpuTable& t = GpuTable::builtin();
  for (const char* name : {"a100-40gb", "a100-80gb", "h100", "h200", "b200"}) {
    const GpuSpec& g = t.find(name);
    EXPECT_FALSE(g.sources.empty()) << name;
    EXPECT_FALSE(g.price_source.empty()) << name;
    EXPECT_GT(g.usd_per_hour, 0) << name;
  }
  // Datasheet figures the planner leans on most.
  EXPECT_EQ(t.find("a100-80gb").bf16_tflops, 312);
  EXPECT_EQ(t.find("h100").bf16_tflops, 989);
  EXPECT_EQ(t.find("h100").fp8_tflops, 1979);
  EXPECT_EQ(t.find("a100-80gb").fp8_tflops, 0);  // Ampere has no FP8
  EXPECT_EQ(t.find("h200").memory_gb, 141);
  EXPECT_EQ(&t.find("H100"), &t.find("h100"));  // names are case-insensitive
}

TEST(GpuTable, UnknownGpuListsTheKnownOnes) {
  try {
    GpuTable::builtin().find("v100");
    FAIL() << "v100 was found";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown GPU 'v100'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("a100-80gb, h100, h200, b200"), std::string::npos)
        << e.what();
  }
}

std::string table_with(const nlohmann::json& entry) {
  return nlohmann::json{{"gpus", {entry}}}.dump();
}

nlohmann::json good_entry() {
  return nlohmann::json::parse(GpuTable::builtin().find("h100").to_json().dump());
}

TEST(GpuTable, BadEntriesAreRefusedByName) {
  auto refused = [](const std::string& text, const std::string& says) {
    try {
      GpuTable::parse(text, "edited.json");
      ADD_FAILURE() << "accepted: " << text.substr(0, 80);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  nlohmann::json e = good_entry();
  e["bf16_tflops"] = -1;
  refused(table_with(e),
          "edited.json: gpus[0]: gpu 'h100': bf16_tflops must be in [0.001, 100000] TFLOP/s, "
          "got -1");
  e = good_entry();
  e["gemm_efficiency"] = 1.5;
  refused(table_with(e), "gemm_efficiency is a fraction of peak in (0, 1], got 1.5");
  e = good_entry();
  e["tflops"] = 1;
  refused(table_with(e), "edited.json: gpus[0]: unknown key 'tflops'");
  e = good_entry();
  e["memory_gb"] = "80";
  refused(table_with(e), "'memory_gb' must be a number");
  e = good_entry();
  e.erase("name");
  refused(table_with(e), "edited.json: gpus[0]: the entry has no 'name'");
  refused(nlohmann::json{{"gpus", {good_entry(), good_entry()}}}.dump(),
          "gpu 'h100' appears twice");
  refused("{\"gpus\": []}", "the 'gpus' list is empty");
  refused("{\"gpus\": [", "edited.json: not JSON");
  refused(std::string(100, '[') + std::string(100, ']'), "edited.json");  // too deep
}

// A figure outside what hardware spans is refused, not planned with: 1e-300 TFLOP/s passed
// "positive" and printed step times of 10^300 seconds, truncated to 63 digits by the table.
TEST(GpuTable, FiguresOutsideWhatHardwareSpansAreRefused) {
  struct Case {
    const char* field;
    double below, above;  // just outside the range docs/planning.md lists
  };
  const Case cases[] = {{"bf16_tflops", 0.9e-3, 1.1e5},   {"memory_gb", 0.09, 1.1e5},
                        {"hbm_gbps", 0.09, 1.1e6},        {"nvlink_gbps", 0.9e-3, 1.1e5},
                        {"network_gbps", 0.9e-3, 1.1e5},  {"pcie_gbps", 0.9e-3, 1.1e5},
                        {"host_gbps", 0.9e-3, 1.1e5},     {"fp8_tflops", 0.9e-3, 2.1e5},
                        {"nvlink_latency_us", -1, 1.1e6}, {"network_latency_us", -1, 1.1e6},
                        {"usd_per_hour", -1, 1.1e4}};
  for (const Case& c : cases)
    for (const double v : {c.below, c.above, 1e300}) {
      nlohmann::json e = good_entry();
      e[c.field] = v;
      try {
        GpuTable::parse(table_with(e), "edited.json");
        ADD_FAILURE() << c.field << " = " << v << " accepted";
      } catch (const Error& err) {
        const std::string what = err.what();
        EXPECT_NE(what.find(std::string("edited.json: gpus[0]: gpu 'h100': ") + c.field),
                  std::string::npos)
            << what;
        EXPECT_NE(what.find(" must be in ["), std::string::npos) << what;
      }
    }
  // The ends of each range are accepted, and fp8_tflops 0 means no FP8.
  nlohmann::json e = good_entry();
  e["bf16_tflops"] = 1e-3;
  e["hbm_gbps"] = 1e6;
  e["network_latency_us"] = 0;
  e["fp8_tflops"] = 0;
  e["usd_per_hour"] = 1e4;
  EXPECT_NO_THROW(GpuTable::parse(table_with(e), "edited.json"));
}

TEST(GpuTable, EditedCopyRoundTrips) {
  nlohmann::json e = good_entry();
  e["name"] = "h100-cheap";
  e["usd_per_hour"] = 1.5;
  const GpuTable t = GpuTable::parse(table_with(e), "edited.json");
  EXPECT_EQ(t.find("h100-cheap").usd_per_hour, 1.5);
  EXPECT_EQ(t.find("h100-cheap").bf16_tflops, 989);
}

}  // namespace
}  // namespace tessera::plan
