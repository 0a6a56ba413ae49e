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
  refused(table_with(e), "gpu 'h100': bf16_tflops must be a positive number, got -1");
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
