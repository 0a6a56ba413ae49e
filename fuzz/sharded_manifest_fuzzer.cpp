// Fuzzes a sharded checkpoint's manifest.json (nn/io/sharded_checkpoint.h): the input replaces
// the manifest of a valid 2-shard set (saved once at startup), so the reader's checks of the
// format, the shards' records (size, checksum) and every piece's geometry and coverage are
// what runs, against real shard files. The committed seed is that set's own manifest:
// TESSERA_FUZZ_WRITE_SEED=PATH copies it there.

#include <filesystem>

#include "fuzz/fuzz_input.h"
#include "tessera/core/ops/creation.h"
#include "tessera/nn/io/sharded_checkpoint.h"

namespace {

const std::string& checkpoint_dir() {
  static const std::string dir = [] {
    tessera::nn::CheckpointData data;
    data.step = 1;
    data.model = {{"wte.weight", tessera::ones({5, 3})}, {"ln_f.bias", tessera::zeros({3})}};
    data.optimizer = {{"wte.weight.exp_avg", tessera::zeros({5, 3})}};
    data.state = {{"loader", {{"position", 8}}}, {"optimizer", {{"lr", 3e-4}}}};
    const std::string d =
        tessera::nn::save_sharded_checkpoint(tessera::fuzz::scratch_dir(), data, 2);
    if (const char* seed = std::getenv("TESSERA_FUZZ_WRITE_SEED"))
      std::filesystem::copy_file(d + "/manifest.json", seed,
                                 std::filesystem::copy_options::overwrite_existing);
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = checkpoint_dir();
  tessera::fuzz::write_input("checkpoints/step_00000001/manifest.json", data, size);
  return tessera::fuzz::expect_value_or_error([&] { tessera::nn::load_checkpoint(dir); });
}
