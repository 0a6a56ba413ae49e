// `tessera train --init-from` of Hugging Face Llama weights under a layout, through the
// Trainer as the command runs it: every rank reads its ZeRO-3 shard of the folder's bf16 shards
// by range (LayoutEngine::load_model_source) and the gathered weights are the folder's, widened
// to f32 exactly, the rows padding the vocabulary zero. Before, the folder was read whole and
// loaded as a single-process state dict, which a layout refuses in bf16 ("is bf16[...] but the
// model needs f32[...]"): only f32 folders could start a layout.

#include <gtest/gtest.h>

#include <filesystem>

#include "nn/hf_llama_folder.h"
#include "tessera/parallel/comm/mpi_communicator.h"
#include "tools/tools_test_util.h"

namespace tessera::parallel {
namespace {

namespace fs = std::filesystem;

TEST(InitFromN2, ALlamaFolderStartsAZeroThreeLayoutAtItsWeights) {
  auto world = MpiCommunicator::world();
  const int rank = world->rank();
  const cli::testing::ScratchDir scratch(rank == 0);  // every rank names it alike
  const fs::path& root = scratch.path();
  const nn::GPTConfig c = nn::testing::byte_llama_config();
  const nn::GPT drawn(c);
  if (rank == 0) {
    cli::testing::write_corpus_shards(scratch);
    nn::testing::write_hf_llama_shards((root / "hf").string(), drawn.state_dict(), c, 2,
                                       DType::bf16);
  }
  world->barrier();

  train::TrainOptions o;
  o.train_data = (root / "data/data_train_*.bin").string();
  o.init_from = (root / "hf").string();
  o.model_overrides = {{"dropout", 0.0}};
  o.batch_size = 4;
  o.seq_len = 16;
  o.max_steps = 1;
  o.dp = 2;
  o.zero = 3;
  o.run_dir = (root / "run").string();
  o.threads = 1;
  {
    train::Trainer trainer(o, world);
    const nn::StateDict state = trainer.full_state();
    ASSERT_EQ(state.size(), drawn.state_dict().size());
    for (const auto& [name, t] : state)
      EXPECT_EQ(to_vector<float>(t), to_vector<float>(nn::testing::folder_weight(
                                         drawn.state_dict(), name, c, DType::bf16)))
          << name;
  }
  world->barrier();
}

}  // namespace
}  // namespace tessera::parallel
