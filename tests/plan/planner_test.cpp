// The search: what it ranks, what it refuses, and what it says when nothing fits.

#include <gtest/gtest.h>

#include <cmath>

#include "tessera/core/error.h"
#include "tessera/plan/memory_model.h"
#include "tessera/plan/planner.h"

namespace tessera::plan {
namespace {

PlanRequest llama70b_on(int gpus, const char* gpu = "h100") {
  PlanRequest r;
  r.workload.model = plan_model("llama-70b-like");
  r.workload.model_name = "llama-70b-like";
  r.workload.seq_len = 4096;
  r.workload.global_batch = 1024;
  r.workload.train_tokens = 2e12;
  r.clusters = {Cluster::of(GpuTable::builtin().find(gpu), gpus)};
  return r;
}

TEST(Planner, RanksLayoutsThatFitByStepTime) {
  const PlanRequest r = llama70b_on(1024);
  const PlanResult p = plan(r);
  ASSERT_GT(p.ranked.size(), 10u);
  EXPECT_GT(p.valid, int64_t(p.ranked.size()));  // some valid layouts do not fit
  for (size_t i = 0; i < p.ranked.size(); ++i) {
    const Candidate& c = p.ranked[i];
    EXPECT_TRUE(c.fits);
    EXPECT_LE(double(c.memory.total()), 0.9 * 80e9);
    EXPECT_EQ(c.layout.gpus(), 1024);
    EXPECT_EQ(c.layout.invalid_reason(r.workload), "");
    if (i > 0) {
      EXPECT_GE(c.time.step_s, p.ranked[i - 1].time.step_s);
    }
  }
  const Candidate& best = p.ranked.front();
  // Tokens, days, GPU-hours and cost follow from the step.
  EXPECT_NEAR(best.tokens_per_s, 1024.0 * 4096 / best.time.step_s, 1e-6 * best.tokens_per_s);
  EXPECT_NEAR(best.days, 2e12 / best.tokens_per_s / 86400, 1e-9 * best.days);
  EXPECT_NEAR(best.gpu_hours, best.days * 24 * 1024, 1e-6 * best.gpu_hours);
  EXPECT_NEAR(best.cost_usd, best.gpu_hours * 3.00, 1e-6 * best.cost_usd);
  // A plausible MFU for bf16 on Hopper, below the GEMM efficiency the table assumes.
  EXPECT_GT(best.mfu, 0.2);
  EXPECT_LT(best.mfu, GpuTable::builtin().find("h100").gemm_efficiency);
}

TEST(Planner, PinnedChoicesAreKept) {
  PlanRequest r = llama70b_on(512);
  r.space.tp = 8;
  r.space.zero = 1;
  r.space.recompute = {nn::RecomputeMode::full};
  const PlanResult p = plan(r);
  ASSERT_FALSE(p.ranked.empty());
  for (const Candidate& c : p.ranked) {
    EXPECT_EQ(c.layout.tp, 8);
    EXPECT_EQ(c.layout.zero, 1);
    EXPECT_EQ(c.layout.recompute.mode, nn::RecomputeMode::full);
  }
}

TEST(Planner, RanksByCostAcrossGpuTypes) {
  PlanRequest r = llama70b_on(512);
  r.clusters.push_back(Cluster::of(GpuTable::builtin().find("a100-80gb"), 1024));
  r.rank_by = RankBy::cost;
  const PlanResult p = plan(r);
  ASSERT_FALSE(p.ranked.empty());
  bool both = false;
  for (size_t i = 1; i < p.ranked.size(); ++i) {
    EXPECT_GE(p.ranked[i].cost_usd, p.ranked[i - 1].cost_usd * (1 - 1e-12));
    both |= p.ranked[i].cluster != p.ranked[0].cluster;
  }
  EXPECT_TRUE(both);  // layouts of both clusters are ranked together
}

TEST(Planner, NothingFitsSaysWhatTheSmallestLayoutNeeds) {
  PlanRequest r = llama70b_on(8, "a100-40gb");
  const PlanResult p = plan(r);
  EXPECT_TRUE(p.ranked.empty());
  EXPECT_NE(p.nothing_fits.find("llama-70b-like fits nowhere: its smallest layout (dp"),
            std::string::npos)
      << p.nothing_fits;
  EXPECT_NE(p.nothing_fits.find("GB usable on a100-40gb"), std::string::npos) << p.nothing_fits;
  // Its smallest layout shards everything: ZeRO-3 (or the deepest model parallelism).
  EXPECT_GT(p.smallest.memory.total(), 36e9);
}

TEST(Planner, NoValidLayoutIsNamed) {
  PlanRequest r = llama70b_on(1024);
  r.workload.global_batch = 1;  // dp 1, so tp x pp = 1024 > 8 x 80 layers
  const PlanResult p = plan(r);
  EXPECT_EQ(p.valid, 0);
  EXPECT_NE(p.nothing_fits.find("is valid"), std::string::npos) << p.nothing_fits;
}

TEST(Planner, BadRequestsAreRefusedInOneLine) {
  PlanRequest r = llama70b_on(64);
  r.workload.seq_len = 8192;  // past the model's block_size of 4096
  EXPECT_THROW(plan(r), Error);
  r = llama70b_on(64);
  r.clusters.clear();
  EXPECT_THROW(plan(r), Error);
  r = llama70b_on(64);
  r.usable_fraction = 1.5;
  EXPECT_THROW(plan(r), Error);
  r = llama70b_on(64);
  r.clusters[0].gpus = 0;
  EXPECT_THROW(plan(r), Error);
  // A reserve past the GPU's memory overflowed the int64 byte count and "fit" everywhere with
  // negative gigabytes; a price past $10,000 an hour is a typo.
  auto refused = [](const PlanRequest& bad, const std::string& says) {
    try {
      plan(bad);
      ADD_FAILURE() << "accepted: " << says;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  r = llama70b_on(64);
  r.memory.reserve_gb = 1e300;
  refused(r, "the memory reserve of 1e+300 GB is not less than the h100's 80 GB");
  r = llama70b_on(64);
  r.clusters[0].usd_per_hour = 1e300;
  refused(r, "the price per GPU-hour must be in [0, 10000] USD, got 1e+300");
  r = llama70b_on(64);
  r.workload.train_tokens = 1e30;
  refused(r, "tokens to train must be in [0, 1e16], got 1e+30");
}

// Models at the corners of what Workload::validate admits (10^15 parameters, 2^16 layers, 2^30
// tokens a step, a vocabulary of 2^31 - 1) plan without an int64 byte count overflowing: every
// valid layout's memory is non-negative and its step finite. Under tools/run_sanitizers.sh an
// overflow is a UBSan report. A chunk's blocks are one memory unit, so 2^16 layers plan as fast
// as 16 (a unit a layer took minutes at 100,000).
TEST(Planner, ModelsAtTheBoundsPlanWithoutOverflow) {
  struct Corner {
    const char* what;
    int64_t layers, width, heads, ffn, vocab, seq, batch;
  };
  const Corner corners[] = {
      {"2^16 thin layers, a wide MLP", 65536, 64, 1, 75000000, 256, 2048, 512},
      {"one layer of width 2^23", 1, 1 << 23, 1024, 1 << 24, 32000, 2048, 512},
      {"a vocabulary of 2^31 - 1", 2, 1 << 17, 128, 1 << 19, 2147483647, 2048, 512},
      {"sequences of 2^24 tokens", 32, 4096, 32, 11008, 32000, 1 << 24, 64},
      {"2^19 sequences a step", 32, 4096, 32, 11008, 32000, 2048, 1 << 19},
  };
  for (const Corner& k : corners) {
    PlanRequest r = llama70b_on(8);
    nn::GPTConfig& m = r.workload.model;
    m.n_layer = k.layers, m.n_embd = k.width, m.n_head = m.n_kv_head = k.heads;
    m.ffn_hidden = k.ffn, m.vocab_size = k.vocab, m.block_size = k.seq;
    r.workload.seq_len = k.seq, r.workload.global_batch = k.batch;
    r.clusters.push_back(Cluster::of(GpuTable::builtin().find("b200"), 4096));
    r.space.recompute = {nn::RecomputeMode::none, nn::RecomputeMode::full};
    r.space.try_offload = true;
    PlanResult p;
    ASSERT_NO_THROW(p = plan(r)) << k.what;
    EXPECT_GT(p.valid, 0) << k.what;
    // A chunk's blocks are one unit: at most the embedding, the blocks and the head a chunk.
    const Layout& any = p.smallest.layout;
    EXPECT_LE(rank_units(m, any, 0).size(), size_t(3 * any.virtual_stages)) << k.what;
    std::vector<Candidate> seen = p.ranked;
    seen.push_back(p.smallest);
    for (const Candidate& c : seen) {
      const MemoryEstimate& e = c.memory;
      for (const int64_t part : {e.parameters, e.gradients, e.optimizer, e.activations, e.buffers})
        EXPECT_GE(part, 0) << k.what << ": " << c.layout.describe(r.workload);
      EXPECT_GE(e.total(), e.activations) << k.what;
      EXPECT_TRUE(std::isfinite(c.time.step_s) && c.time.step_s > 0) << k.what;
    }
  }
}

// More GPUs at the same batch: shorter steps (until communication dominates) and a plan that
// stays under a second even at 10,000+ GPUs (bench: the CLI's own timing in docs/planning.md).
TEST(Planner, MoreGpusShortenTheStep) {
  double last = INFINITY;
  for (int gpus : {256, 512, 1024, 2048}) {
    const PlanResult p = plan(llama70b_on(gpus));
    ASSERT_FALSE(p.ranked.empty()) << gpus;
    EXPECT_LT(p.ranked.front().time.step_s, last) << gpus;
    last = p.ranked.front().time.step_s;
  }
}

}  // namespace
}  // namespace tessera::plan
