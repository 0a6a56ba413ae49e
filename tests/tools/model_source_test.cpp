// train::load_model, what generate, serve and ckpt stand on: the model it builds holds exactly
// the checkpoint's weights, every one of them, whether read straight into the model (an
// unsharded checkpoint in one process) or through a state dict (a sharded set), although its
// weights are never drawn first (nn::ParamInit::zeros): a tensor a load left out would stay zero.

#include <sstream>

#include "tessera/nn/io/checkpoint.h"
#include "tessera/nn/io/sharded_checkpoint.h"
#include "tessera/train/detail/model_source.h"
#include "tessera/train/trainer.h"
#include "tools/tools_test_util.h"

namespace tessera::cli::testing {
namespace {

// Every parameter of `model` equals the tensor of its name in `want`, and both hold the same
// names.
void expect_holds(const nn::GPT& model, const nn::StateDict& want) {
  const nn::StateDict got = model.state_dict();
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, t] : want) {
    const Tensor mine = nn::find_tensor(got, name);
    ASSERT_TRUE(mine.defined()) << name;
    EXPECT_TRUE(equal(mine, t)) << name;
  }
}

TEST(ModelSource, TheLoadedModelHoldsEveryWeightOfTheCheckpoint) {
  ScratchDir dir;
  write_corpus_shards(dir);
  std::ostringstream quiet;
  TrainOptions o = tiny_options(dir, "run");
  Trainer(o).fit(&quiet);
  const std::string step = o.run_dir + "/checkpoints/step_00000008";
  const nn::CheckpointData saved = nn::load_checkpoint(step);

  // The run directory and the checkpoint directory: read into the model.
  for (const std::string& spec : {o.run_dir, step}) {
    const train::LoadedModel m = train::load_model(spec);
    EXPECT_EQ(m.step, 8) << spec;
    expect_holds(*m.model, saved.model);
  }
  // The same weights as a sharded set of 3 ranks: read into a state dict, then loaded.
  nn::save_sharded_checkpoint(dir / "sharded", saved, 3);
  const train::LoadedModel s = train::load_model(dir / "sharded/checkpoints/step_00000008");
  expect_holds(*s.model, saved.model);
}

}  // namespace
}  // namespace tessera::cli::testing
