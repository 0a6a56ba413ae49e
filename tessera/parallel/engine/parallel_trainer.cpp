#include "tessera/parallel/engine/parallel_trainer.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <numeric>

#include "tessera/core/allocator.h"
#include "tessera/core/error.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"
#include "tessera/parallel/engine/detail/full_model_state.h"
#include "tessera/parallel/engine/detail/full_optimizer_state.h"
#include "tessera/parallel/engine/detail/loss_weights.h"
#include "tessera/parallel/engine/detail/parallel_eval.h"
#include "tessera/parallel/pipeline/detail/nccl_order.h"
#include "tessera/parallel/pipeline/detail/partition.h"

namespace tessera::parallel {

namespace {

using Clock = std::chrono::steady_clock;

// The inner world shares its step counter with every group split from it, so setting it here
// names the step in the timeout messages of every group.
void set_comm_step(Communicator& inner_world, const DeviceMesh& mesh, int64_t step) {
  inner_world.set_step(step);
  mesh.set_step(step);
}

}  // namespace

ParallelTrainer::ParallelTrainer(std::shared_ptr<Communicator> world, const nn::GPTConfig& model,
                                 const ParallelConfig& config)
    : model_(model), config_(config), inner_world_(std::move(world)) {
  TESSERA_CHECK(inner_world_ != nullptr, "ParallelTrainer: the world communicator is null");
  const std::string why = layout_error(config_, model_, inner_world_->size());
  TESSERA_CHECK(why.empty(), "parallel layout: ", why);

  world_ = std::make_shared<TimedCommunicator>(inner_world_, nullptr);
  mesh_ = std::make_shared<DeviceMesh>(world_, config_.mesh);
  const MeshShape& shape = config_.mesh;
  if (shape.size("tp") > 1) tp_ = tp::TensorParallel::from_mesh(mesh_, config_.sequence_parallel);
  // The tied embedding is summed by DataParallel (its own bucket, over mesh.embedding()), not
  // by the schedule's all_reduce_tied: after the dp reduction, so each stage adds averages.
  schedule_ = make_schedule(config_.schedule, shape.size("pp"), config_.virtual_stages,
                            config_.microbatches);
  // Over NCCL the pipeline's transfers go in the order that cannot deadlock, computed once.
  if (mesh_->pp().transfers_in_issue_order()) schedule_ = nccl_issue_order(schedule_);

  hooks_ = std::make_shared<DeferredUnitHooks>();
  compute_hooks_ = std::make_shared<DeferredUnitHooks>();
  const bool mixed = config_.precision != nn::Precision::fp32;
  std::vector<std::shared_ptr<nn::GPT>> compute;
  nn::StateDict params, compute_params;
  // The weights are built without memory and DataParallel fills each rank's part into its flat
  // buffers: no rank holds a stage's parameters twice (ZeRO 0-2: model and flat copy), or, at
  // ZeRO-3, more than its shards (docs/fitting.md).
  auto fills = std::make_shared<std::map<std::string, nn::ParamFill>>();
  for (int c = 0; c < config_.virtual_stages; ++c) {
    nn::ModelParallel mp;
    mp.tp = tp_;
    mp.stage = pipeline_stage_spec(model_.n_layer, shape.size("pp"), config_.virtual_stages,
                                   mesh_->pp_rank(), c);
    mp.hooks = hooks_;
    mp.defer_parameters = true;
    auto chunk = std::make_shared<nn::GPT>(model_, DType::f32, mp, config_.init);
    chunk->set_recompute(config_.recompute);
    nn::move_to_device(chunk->state_dict(), config_.device);
    for (const auto& [name, p] : chunk->named_parameters()) {
      params.emplace_back(name, p);
      metas_.emplace(name, chunk->param_meta(name));
      if (nn::ParamFill fill = chunk->param_fill(name)) fills->emplace(name, std::move(fill));
    }
    if (mixed) {
      // Below ZeRO-3 its parameters are whole (rounded from the master); at ZeRO-3 they are
      // sharded like the master and gathered per unit in the compute dtype (data_parallel.h).
      mp.hooks = config_.zero_stage == 3 ? compute_hooks_ : nullptr;
      mp.defer_parameters = config_.zero_stage == 3;
      auto c16 = std::make_shared<nn::GPT>(model_, nn::compute_dtype(config_.precision), mp,
                                           nn::ParamInit::zeros);  // precision_ syncs it
      c16->set_recompute(config_.recompute);
      nn::move_to_device(c16->state_dict(), config_.device);
      for (const auto& [name, p] : c16->named_parameters()) compute_params.emplace_back(name, p);
      compute.push_back(std::move(c16));
    }
    masters_.push_back(std::move(chunk));
  }
  if (!mixed) {
    compute = masters_;
    compute_params = params;
  }
  const int64_t micro_rows = config_.batch_size / shape.size("dp") / config_.microbatches;
  stage_ = std::make_unique<GptPipelineStage>(std::move(compute), schedule_, mesh_->pp_rank(),
                                              micro_rows, config_.seq_len, config_.ignore_index);

  DataParallelConfig dc;
  dc.zero_stage = config_.zero_stage;
  // Offload updates a shard; at dp 1 ZeRO 0's whole state is ZeRO 1's one shard, bit for bit.
  if (config_.offload_optimizer && shape.size("dp") == 1)
    dc.zero_stage = std::max(1, dc.zero_stage);
  // Unit buckets by default (one per block, the embedding, the head): ZeRO 0-3 then share one
  // layout and one reduction order, so the stages are bit-identical (layout_exact_test.cpp),
  // and a GPT-2 124M block is 27 MiB in fp32, about PyTorch DDP's 25 MiB. bucket_mb > 0
  // packs buckets by size instead (ZeRO 0-2; layout_error refuses it at ZeRO-3).
  if (config_.bucket_mb > 0)
    dc.bucket_bytes = int64_t(config_.bucket_mb * double(int64_t(1) << 20));
  else
    dc.units = gpt_units(params);
  dc.adamw = config_.adamw;
  dc.adamw.lr = config_.lr_schedule.lr(0);
  dc.max_grad_norm = config_.max_grad_norm;
  dc.compression = config_.grad_compression;
  dc.zero3_prefetch = config_.zero3_prefetch;
  dc.offload_optimizer = config_.offload_optimizer;
  if (mixed) dc.compute_dtype = nn::compute_dtype(config_.precision);
  if (mixed && config_.zero_stage == 3) dc.compute = compute_params;
  dc.overlap = config_.overlap;
  dc.param_meta = [this](const std::string& name) { return meta_of(name); };
  dc.param_fill = [fills](const std::string& name) {
    auto it = fills->find(name);
    return it == fills->end() ? nn::ParamFill() : it->second;
  };
  dc.tp = &mesh_->tp();
  if (shape.size("pp") > 1) dc.norm_groups = {&mesh_->pp()};
  const bool holds_wte = nn::find_tensor(params, "wte.weight").defined();
  if (model_.tie_embeddings && shape.size("pp") > 1 && holds_wte) {
    dc.tied = {"wte.weight"};
    dc.tied_group = mesh_->embedding();
  }
  dp_ = std::make_unique<DataParallel>(params, mesh_->dp(), std::move(dc));
  hooks_->set_target(dp_->unit_hooks());
  compute_hooks_->set_target(dp_->compute_unit_hooks());
  stage_->set_data_parallel(dp_.get());
  precision_ = std::make_unique<ParallelPrecision>(config_.precision, params, compute_params, *dp_,
                                                   config_.loss_scaler);
}

ParallelTrainer::~ParallelTrainer() {
  // The chunks' hooks forward to DataParallel's, which dies first.
  if (hooks_) hooks_->set_target(nullptr);
  if (compute_hooks_) compute_hooks_->set_target(nullptr);
}

nn::ParamMeta ParallelTrainer::meta_of(const std::string& name) const {
  auto it = metas_.find(name);
  if (it != metas_.end()) return it->second;
  detail::throw_error("ParallelTrainer: no parameter '", name, "' on this rank");
}

void ParallelTrainer::set_step(int64_t step) {
  TESSERA_CHECK(step >= 0, "ParallelTrainer::set_step: step must be >= 0, got ", step);
  step_ = step;
}

ParallelStepStats ParallelTrainer::step(const Tensor& inputs, const Tensor& targets) {
  const int64_t B = config_.batch_size, T = config_.seq_len;
  for (const Tensor* t : {&inputs, &targets})
    TESSERA_CHECK(t->defined() && t->dim() == 2 && t->size(0) == B && t->size(1) == T &&
                      !is_floating(t->dtype()),
                  "ParallelTrainer::step: inputs and targets must be integer [", B, ", ", T,
                  "] (the global batch of ", config_.describe(), "), got ",
                  t->defined() ? t->describe() : std::string("undefined"));
  const int64_t local = B / config_.mesh.size("dp"), first = mesh_->dp_rank() * local;
  return step_local(ops::narrow(inputs, 0, first, local), ops::narrow(targets, 0, first, local));
}

ParallelStepStats ParallelTrainer::step_local(const Tensor& inputs, const Tensor& targets) {
  const Clock::time_point start = Clock::now();
  const int64_t start_us = trace_ ? flight_clock_us() : 0;
  const int64_t rows = config_.batch_size / config_.mesh.size("dp"), T = config_.seq_len;
  for (const Tensor* t : {&inputs, &targets})
    TESSERA_CHECK(t->defined() && t->dim() == 2 && t->size(0) == rows && t->size(1) == T &&
                      !is_floating(t->dtype()),
                  "ParallelTrainer::step_local: inputs and targets must be integer [", rows, ", ",
                  T, "] (this dp rank's rows of the global batch of ", config_.describe(),
                  "), got ", t->defined() ? t->describe() : std::string("undefined"));
  ParallelStepStats out;
  out.step = step_;
  set_comm_step(*inner_world_, *mesh_, step_ + 1);  // numbered from 1, as the logs are
  out.lr = config_.lr_schedule.lr(step_);
  dp_->set_lr(out.lr);
  for (const auto& chunk : stage_->chunks()) chunk->set_step(step_);

  world_->traffic().reset();  // from the target count's all-reduce on
  // The blocked time too: a rank whose peer is late (its loader, its previous step) first
  // waits in that all-reduce.
  world_->clock()->reset();
  std::vector<double> weights = micro_batch_weights(
      targets, config_.microbatches, config_.ignore_index, mesh_->dp(), config_.device);
  stage_->begin_step(ops::to(ops::contiguous(inputs), config_.device),
                     ops::to(ops::contiguous(targets), config_.device), std::move(weights));
  Allocator& alloc = allocator_for(config_.device);
  const int64_t live_before = alloc.stats().live_bytes;
  alloc.reset_peak();
  PipelineOptions po;
  po.loss_scale = precision_->loss_scale();
  po.trace = trace_;
  const int64_t pipeline_us = flight_clock_us();
  PipelineStepStats pipe = run_pipeline(schedule_, *stage_, mesh_->pp(), po);
  const int64_t pipeline_end_us = flight_clock_us();
  stage_->finish_step();
  out.memory.activations = std::max<int64_t>(0, alloc.stats().peak_bytes - live_before);

  // The pipeline group already agrees on the loss; averaging over dp gives the global mean.
  out.loss = dp_average(pipe.loss);
  out.bubble = pipe.group_bubble;
  out.pipeline_outputs_freed = pipe.outputs_freed;
  out.pipeline_outputs_kept = pipe.outputs_kept;

  out.forward_seconds = pipe.forward_seconds;
  out.backward_seconds = pipe.backward_seconds;
  if (before_update_) before_update_();  // a streamed checkpoint's wait: not the update's time
  const int64_t update_us = flight_clock_us();
  const Clock::time_point update = Clock::now();
  const PrecisionStepResult ps = precision_->step();
  const StepResult& r = ps.update;
  dp_->zero_grad();
  out.optimizer_seconds = std::chrono::duration<double>(Clock::now() - update).count();
  out.grad_norm = r.grad_norm;
  out.clip = r.clip;
  out.finite = r.finite;
  out.loss_scale = ps.loss_scale;
  out.skipped = ps.skipped;
  const MemoryStats m = dp_->memory();
  out.memory.parameters = m.parameters + precision_->compute_bytes();
  out.memory.parameters_peak = m.parameters_peak + precision_->compute_peak_bytes();
  out.memory.gradients = m.gradients;
  out.memory.optimizer_state = m.optimizer_state;
  out.memory.offloaded = m.offloaded;
  out.comm_seconds = world_->clock()->seconds();
  out.comm_wire_bytes = world_->traffic().total_wire_bytes();
  out.comm_message_bytes = world_->traffic().total_message_bytes();
  out.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (trace_) {
    // The step track's spans tile the step: setup (the targets' count, the batch on the
    // device), forward/backward (the pipeline), finish (waiting for the gradient reductions
    // still in flight, the loss's average, a streamed save's wait), the update.
    // Every boundary is one read of the flight clock, so the spans tile [start_us, end_us]
    // exactly, whatever the thread was descheduled for between them.
    const int64_t end_us = flight_clock_us();
    trace_->span(TraceTrack::step, "setup", start_us, pipeline_us);
    trace_->span(TraceTrack::step, "forward/backward", pipeline_us, pipeline_end_us,
                 {{"forward_ms", pipe.forward_seconds * 1e3},
                  {"backward_ms", pipe.backward_seconds * 1e3},
                  {"bubble", pipe.bubble}});
    trace_->span(TraceTrack::step, "finish", pipeline_end_us, update_us);
    trace_->span(TraceTrack::step, "update", update_us, end_us);
  }
  ++step_;
  return out;
}

nn::StateDict ParallelTrainer::gather_full_state() {
  dp_->gather_parameters();
  nn::StateDict full = gather_model_state(masters_, *mesh_);
  // One rank gets views of the master; a sharded one (ZeRO-3, offloaded) is freed next.
  if (mesh_->world().size() == 1 && dp_->flat_params().sharded())
    for (auto& [name, t] : full) t = ops::clone(t);
  dp_->release_parameters();
  return full;
}

void ParallelTrainer::load_full_state(const nn::StateDict& full) {
  // Checked before ZeRO-3 gathers, so a bad dict leaves nothing gathered.
  check_model_state(masters_, *mesh_, full);
  dp_->gather_parameters();
  load_model_state(masters_, *mesh_, full);
  dp_->release_parameters();
  precision_->sync_compute();
}

nn::OptimizerState ParallelTrainer::gather_full_optimizer_state() {
  return gather_optimizer_state(masters_, *mesh_, *dp_);
}

void ParallelTrainer::load_full_optimizer_state(const nn::OptimizerState& full) {
  load_optimizer_state(masters_, *mesh_, *dp_, full);
}

double ParallelTrainer::evaluate(const Tensor& inputs, const Tensor& targets) {
  const int64_t D = config_.mesh.size("dp");
  TESSERA_CHECK(
      inputs.defined() && inputs.dim() == 2 && inputs.size(0) > 0 && inputs.size(0) % D == 0,
      "ParallelTrainer::evaluate: inputs must be integer [B, T] with B divisible by dp ", D, " (",
      config_.describe(), "), got ",
      inputs.defined() ? inputs.describe() : std::string("undefined"));
  const int64_t local = inputs.size(0) / D, first = mesh_->dp_rank() * local;
  return evaluate_local(ops::narrow(inputs, 0, first, local),
                        ops::narrow(targets, 0, first, local));
}

double ParallelTrainer::evaluate_local(const Tensor& inputs, const Tensor& targets) {
  const int64_t T = config_.seq_len;
  for (const Tensor* t : {&inputs, &targets})
    TESSERA_CHECK(t->defined() && t->dim() == 2 && t->size(0) > 0 && t->size(1) == T &&
                      !is_floating(t->dtype()) && t->shape() == inputs.shape(),
                  "ParallelTrainer::evaluate_local: inputs and targets must be integer [rows, ", T,
                  "] (this dp rank's rows; ", config_.describe(), "), got ",
                  t->defined() ? t->describe() : std::string("undefined"));
  set_comm_step(*inner_world_, *mesh_, step_ + 1);
  const int64_t local = inputs.size(0);
  ForwardPassSpec spec;
  // The training micro-batch count where it divides the rows (the same activations in flight).
  spec.microbatches = int(std::gcd(local, int64_t(config_.microbatches)));
  spec.seq_len = T;
  spec.ignore_index = config_.ignore_index;
  return dp_average(forward_only_loss(stage_->chunks(), mesh_->pp(),
                                      ops::to(ops::contiguous(inputs), config_.device),
                                      ops::to(ops::contiguous(targets), config_.device), spec));
}

double ParallelTrainer::dp_average(double value) {
  Tensor t = from_vector<double>({value}, Shape{1});
  if (!config_.device.is_cpu()) t = ops::to(t, config_.device);
  mesh_->dp().all_reduce(t, CommOp::avg);
  return ops::to(t, Device::cpu()).item<double>();
}

std::string ParallelTrainer::describe() const {
  std::string chunks;
  for (const auto& c : stage_->chunks())
    chunks += str_cat(chunks.empty() ? "" : ", ", "h.", c->first_layer(), "-h.",
                      c->first_layer() + c->num_layers() - 1);
  return str_cat(config_.describe(), "; rank ", mesh_->world().rank(), ": dp ", mesh_->dp_rank(),
                 " pp ", mesh_->pp_rank(), " tp ", mesh_->tp_rank(), ", layers ", chunks);
}

}  // namespace tessera::parallel
