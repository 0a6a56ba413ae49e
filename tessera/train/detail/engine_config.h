#pragma once
// Which engine trains a run, and that engine's config, from the run's options: the layout
// engine (parallel::ParallelTrainer: the GPT under every layout, AdamW) or the ModuleEngine
// (any optimizer, a model of the caller's own, data parallelism only). What cannot apply is
// refused with a LayoutError that names the option. The same on every rank: these read only
// the options, the model config and the world size, so no rank goes on alone.

#include <memory>

#include "tessera/core/error.h"
#include "tessera/nn/module.h"
#include "tessera/nn/optim/optimizer.h"
#include "tessera/parallel/engine/parallel_trainer.h"
#include "tessera/train/module_engine.h"
#include "tessera/train/options.h"
#include "tessera/train/trainer.h"

namespace tessera::train {

template <class... Parts>
[[noreturn]] void refuse(const Parts&... parts) {
  throw LayoutError(str_cat("tessera train: ", parts...));
}

// The layout options a single process cannot use: each is named when set.
void refuse_layout_flags_on_one_process(const TrainOptions& o);

// Whether the GPT trains on the layout engine (every layout) or on the ModuleEngine.
bool uses_layout_engine(const TrainOptions& o);

// The layout engine's config for o, or a LayoutError naming what does not fit.
parallel::ParallelConfig parallel_config(const TrainOptions& o, const nn::GPTConfig& model,
                                         int world_size, Device device);

// The ModuleEngine's optimizer (--optimizer sgd or adamw) over the model's parameters, and
// its config.
std::unique_ptr<nn::Optimizer> make_optimizer(const TrainOptions& o, const nn::Module& model);
ModuleEngineConfig module_config(const TrainOptions& o, Device device);

// The layouts the ModuleEngine cannot run, named; `why` says what put the run on it.
void check_module_layout(const TrainOptions& o, int world_size, const char* why);

}  // namespace tessera::train
