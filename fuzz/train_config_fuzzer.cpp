// Fuzzes the training config (train/options.h): a JSON document read as `--config` is, then
// validated and turned into the model config, the schedule and the policies, as a run does
// before it starts, including the sizes the model is built with and the learning rate of its
// first and last steps. Text that is not JSON, or nests deeper than check_json_depth allows,
// is the caller's to refuse before it parses: a value 30000 levels deep overflowed the stack
// when options.cpp copied or printed it. tools/cli/train_command.cpp checks it for --config and
// --model, as this target does (docs/fuzzing.md).

#include <string_view>

#include <nlohmann/json.hpp>

#include "fuzz/fuzz_input.h"
#include "tessera/core/json_depth.h"
#include "tessera/train/options.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    tessera::check_json_depth(std::string_view(reinterpret_cast<const char*>(data), size),
                              "config.json");
  } catch (const tessera::Error&) {
    return 0;
  }
  const nlohmann::json j =
      nlohmann::json::parse(data, data + size, /*callback=*/nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  return tessera::fuzz::expect_value_or_error([&] {
    tessera::train::TrainOptions options;
    options.update_from_json(j);
    options.validate();
    const tessera::nn::GPTConfig model = options.model_config();
    (void)model.padded_vocab_size();
    (void)model.ffn_dim();
    (void)model.head_dim();
    const tessera::nn::LRSchedule schedule = options.lr_schedule();
    (void)schedule.lr(0);
    (void)schedule.lr(options.max_steps - 1);
    (void)options.precision_policy();
    (void)options.recompute_policy();
    (void)options.grad_compression_policy();
    (void)options.to_config_file();
  });
}
