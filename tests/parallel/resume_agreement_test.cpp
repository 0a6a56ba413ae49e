// Resuming on several ranks: each rank checksums only its share of the checkpoint's files
// (nn::ChecksumShare: shard i falls to rank i mod ranks) and the ranks agree on the verdict
// (train::open_checkpoint_together), so that a job reads every file once for its checksum, not
// once per rank. The agreement is what keeps that safe: a shard that only rank 1 checksums, found
// corrupt, must make both ranks pass over the checkpoint (--resume auto) or both refuse it
// (--resume DIR), with rank 1's message. Without the agreement, rank 0 never reads shard 1's
// checksum and resumes the corrupt step 4 while rank 1 falls back to step 2 (with the agreement
// planted out, both cases below fail on rank 0: step 4 resumed, no error).

#include <gtest/gtest.h>

#include <filesystem>

#include "tessera/nn/io/checkpoint.h"
#include "tessera/parallel/comm/mpi_communicator.h"
#include "tests/nn/io_test_util.h"
#include "tools/tools_test_util.h"

namespace tessera::parallel {
namespace {

namespace fs = std::filesystem;

TEST(ResumeAgreementN2, AShardOneRankChecksumsFailsItsCheckpointOnEveryRank) {
  auto world = MpiCommunicator::world();
  const int rank = world->rank();
  const cli::testing::ScratchDir scratch(rank == 0);  // every rank names it alike
  const fs::path& root = scratch.path();
  if (rank == 0) cli::testing::write_corpus_shards(scratch);
  world->barrier();

  for (int bad : {0, 1}) {
    train::TrainOptions o;
    o.train_data = (root / "data/data_train_*.bin").string();
    o.model_overrides = {
        {"n_layer", 2}, {"n_head", 2}, {"n_kv_head", 2}, {"n_embd", 32}, {"block_size", 32}};
    o.batch_size = 4;
    o.seq_len = 16;
    o.max_steps = 4;
    o.checkpoint_every = 2;
    o.keep_checkpoints = 0;
    o.dp = 2;
    o.zero = 1;
    o.comm_timeout = 60;  // a rank left waiting (the agreement planted out) fails, not hangs
    o.run_dir = (root / ("run" + std::to_string(bad))).string();
    o.threads = 1;
    o.sample_tokens = 0;
    train::Trainer(o, world).fit();  // sharded sets of steps 2 and 4

    const fs::path step4 = fs::path(nn::checkpoints_dir(o.run_dir)) / nn::checkpoint_name(4);
    const std::string shard =
        (step4 / ("shard_0000" + std::to_string(bad) + ".safetensors")).string();
    if (rank == 0) nn::testing::flip_a_data_bit(shard);
    world->barrier();

    const std::string by = "(on rank " + std::to_string(bad) + ")";
    train::TrainOptions resumed = o;
    resumed.max_steps = 6;
    {
      train::Trainer t(resumed, world);
      EXPECT_EQ(t.steps_done(), 2) << "shard " << bad;
      EXPECT_EQ(fs::path(t.resumed_from()).filename(), nn::checkpoint_name(2)) << "shard " << bad;
      const std::string banner = t.banner();
      EXPECT_NE(banner.find(shard), std::string::npos) << banner;
      EXPECT_NE(banner.find("checksum"), std::string::npos) << banner;
      EXPECT_NE(banner.find(by), std::string::npos) << banner;
    }
    world->barrier();

    resumed.resume = step4.string();
    std::string error;
    try {
      train::Trainer t(resumed, world);
    } catch (const Error& e) {
      error = e.what();
    }
    EXPECT_NE(error.find(shard), std::string::npos) << "rank " << rank << ": '" << error << "'";
    EXPECT_NE(error.find(by), std::string::npos) << "rank " << rank << ": '" << error << "'";
    world->barrier();
  }
}

}  // namespace
}  // namespace tessera::parallel
