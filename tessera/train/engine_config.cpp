#include "tessera/train/detail/engine_config.h"

#include "tessera/nn/optim/adamw.h"
#include "tessera/nn/optim/sgd.h"

namespace tessera::train {

void refuse_layout_flags_on_one_process(const TrainOptions& o) {
  const char* flag = o.zero != 0                                           ? "--zero"
                     : o.microbatches != 1                                 ? "--microbatches"
                     : o.schedule != "1f1b"                                ? "--schedule"
                     : o.virtual_stages != 1                               ? "--virtual-stages"
                     : o.sequence_parallel                                 ? "--sequence-parallel"
                     : o.bucket_mb > 0                                     ? "--bucket-mb"
                     : o.grad_compression != "none"                        ? "--grad-compression"
                     : o.comm_timeout != TrainOptions().comm_timeout       ? "--comm-timeout"
                     : o.save_timeout != TrainOptions().save_timeout       ? "--save-timeout"
                     : o.dump_window != TrainOptions().dump_window         ? "--dump-window"
                     : o.straggler_every != TrainOptions().straggler_every ? "--straggler-every"
                                                                           : nullptr;
  if (flag != nullptr)
    refuse(flag, " applies to a parallel layout (--dp/--tp/--pp under mpiexec); this run is one ",
           "process (dp 1, tp 1, pp 1), where it cannot apply");
}

bool uses_layout_engine(const TrainOptions& o) {
  return o.optimizer == "adamw" && !o.stochastic_rounding;
}

namespace {

nn::AdamWOptions adamw_options(const TrainOptions& o) {
  return {
      .lr = o.lr, .beta1 = o.beta1, .beta2 = o.beta2, .eps = o.eps, .weight_decay = o.weight_decay};
}

}  // namespace

parallel::ParallelConfig parallel_config(const TrainOptions& o, const nn::GPTConfig& model,
                                         int world_size, Device device) {
  parallel::ParallelConfig p;
  p.mesh = {int(o.dp), int(o.pp), int(o.tp)};
  p.zero_stage = int(o.zero);
  // grad_accum micro-batches of batch_size rows make the global batch; under a pipeline each
  // of its --microbatches pieces is split grad_accum times more.
  p.microbatches = int(o.microbatches * o.grad_accum);
  p.schedule = parallel::parse_schedule_kind(o.schedule);
  p.virtual_stages = int(o.virtual_stages);
  p.sequence_parallel = o.sequence_parallel;
  p.recompute = o.recompute_policy();
  p.bucket_mb = o.bucket_mb;
  p.grad_compression = o.grad_compression_policy();
  p.offload_optimizer = o.offload == "optimizer";
  p.batch_size = o.batch_size * o.grad_accum;
  p.seq_len = o.seq_len;
  p.adamw = adamw_options(o);
  p.lr_schedule = o.lr_schedule();
  p.max_grad_norm = o.grad_clip;
  p.precision = o.precision_policy();
  p.loss_scaler = o.loss_scaler();
  p.device = device;
  std::string why = parallel::layout_error(p, model, world_size);
  if (!why.empty() && p.mesh.world_size() != world_size)
    why += str_cat(" (start it as mpiexec -n ", p.mesh.world_size(), " tessera train ...)");
  if (!why.empty()) refuse(why);
  if (!o.val_data.empty() && o.batch_size % o.dp != 0)
    refuse("validation splits each --batch-size ", o.batch_size, " batch over dp ", o.dp,
           ", which does not divide it");
  return p;
}

std::unique_ptr<nn::Optimizer> make_optimizer(const TrainOptions& o, const nn::Module& model) {
  if (o.optimizer == "sgd") {
    nn::SGDOptions s;
    s.lr = o.lr;
    s.momentum = o.momentum;
    s.weight_decay = o.weight_decay;
    return std::make_unique<nn::SGD>(model.named_parameters(), s);
  }
  return std::make_unique<nn::AdamW>(model.named_parameters(), adamw_options(o));
}

ModuleEngineConfig module_config(const TrainOptions& o, Device device) {
  ModuleEngineConfig c;
  c.micro_batches = int(o.grad_accum);
  c.lr_schedule = o.lr_schedule();
  c.max_grad_norm = o.grad_clip;
  c.precision = o.precision_policy();
  c.loss_scaler = o.loss_scaler();
  c.stochastic_rounding = o.stochastic_rounding;
  c.rounding_seed = o.seed;
  c.device = device;
  return c;
}

void check_module_layout(const TrainOptions& o, int world_size, const char* why) {
  if (o.tp > 1 || o.pp > 1 || o.zero > 0)
    refuse(why, " trains on the data-parallel engine (ZeRO 0): --tp ", o.tp, " --pp ", o.pp,
           " --zero ", o.zero,
           " need the GPT's parallel hooks and the sharded AdamW "
           "(--optimizer adamw)");
  if (o.bucket_mb > 0)
    refuse("--bucket-mb sizes the gradient buckets of the layout engine (--optimizer adamw); ", why,
           " all-reduces each gradient once backward is done");
  if (o.grad_compression != "none")
    refuse("--grad-compression ", o.grad_compression, " compresses the bucket reductions of the ",
           "layout engine (--optimizer adamw); ", why, " all-reduces fp32 gradients");
  if (o.offload != "none")
    refuse("--offload ", o.offload, " moves the layout engine's sharded AdamW to host memory; ",
           why, " keeps its optimizer on the device");
  if (o.dp != world_size)
    refuse("--dp ", o.dp, " does not match the ", world_size, " ranks (start it as mpiexec -n ",
           o.dp, " tessera train ...)");
}

}  // namespace tessera::train
