// Fuzzes a checkpoint's state.json (nn/io/checkpoint.h): the input replaces the state file of
// a valid checkpoint (saved once at startup), so the reader's checks of format, version, step
// and each tensor file's record (size, checksum, tensor list) are what runs. The committed
// seed is that checkpoint's own state.json: TESSERA_FUZZ_WRITE_SEED=PATH copies it there.

#include <filesystem>

#include "fuzz/fuzz_input.h"
#include "tessera/core/ops/creation.h"
#include "tessera/nn/io/checkpoint.h"

namespace {

const std::string& checkpoint_dir() {
  static const std::string dir = [] {
    tessera::nn::CheckpointData data;
    data.step = 1;
    data.model = {{"wte.weight", tessera::ones({4, 2})}};
    data.optimizer = {{"exp_avg.wte.weight", tessera::zeros({4, 2})}};
    data.state = {{"loader", {{"position", 8}}}, {"optimizer", {{"lr", 3e-4}}}};
    const std::string d = tessera::nn::save_checkpoint(tessera::fuzz::scratch_dir(), data);
    if (const char* seed = std::getenv("TESSERA_FUZZ_WRITE_SEED"))
      std::filesystem::copy_file(d + "/state.json", seed,
                                 std::filesystem::copy_options::overwrite_existing);
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = checkpoint_dir();
  tessera::fuzz::write_input("checkpoints/step_00000001/state.json", data, size);
  return tessera::fuzz::expect_value_or_error([&] { tessera::nn::load_checkpoint(dir); });
}
