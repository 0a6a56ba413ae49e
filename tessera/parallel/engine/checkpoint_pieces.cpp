// ParallelTrainer's sharded checkpoints: what this rank writes of one, and what it reads of
// one to resume under any layout. The dp shards of FlatLayout already partition every
// parameter among the dp ranks whatever the ZeRO stage (at ZeRO 0 the optimizer state is whole
// on every rank, and only its shard is written), so each shard segment becomes a piece;
// tensor parallelism adds the geometry of the rank's slice, and a parameter that tp replicates
// has its segment split again over the tp ranks. The pieces are views: the caller copies them
// before the next update.
//
// To resume, the same arithmetic lists everything the rank holds (the whole bucket of an
// unsharded master, the whole moments at ZeRO 0, replicated parameters and the tied copy
// whole), and the set's reader fills those views in place: a rank reads what it holds and
// allocates nothing the size of the model.

#include <algorithm>
#include <functional>

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/empty.h"
#include "tessera/core/error.h"
#include "tessera/core/ops/movement.h"
#include "tessera/nn/io/tensor_source.h"
#include "tessera/parallel/engine/detail/full_model_state.h"
#include "tessera/parallel/engine/detail/full_optimizer_state.h"
#include "tessera/parallel/engine/parallel_trainer.h"

namespace tessera::parallel {

namespace {

// The single-process shape of a parameter from its local slice and tensor-parallel meta.
Shape full_shape_of(const Shape& local, const nn::ParamMeta& meta, int tp) {
  if (meta.shard == nn::ShardKind::replicated) return local;
  const int d = meta.shard == nn::ShardKind::rows ? 0 : 1;
  Shape full = local;
  int64_t padded = 0;
  for (int64_t s : meta.segments) padded += s;
  if (meta.segments.empty()) padded = local[d] * tp;
  full[d] = meta.unpadded_size > 0 ? std::min(meta.unpadded_size, padded) : padded;
  return full;
}

}  // namespace

std::vector<nn::ShardPiece> ParallelTrainer::state_pieces(bool held) const {
  const FlatLayout& layout = dp_->layout();
  const FlatParams& params = dp_->flat_params();
  const ZeroAdamW& adamw = dp_->optimizer();
  const int dp_rank = mesh_->dp_rank(), tp_rank = mesh_->tp_rank();
  const int tp = int(config_.mesh.size("tp"));
  const char* suffix[3] = {"", ".exp_avg", ".exp_avg_sq"};
  std::vector<nn::ShardPiece> out;
  // Segment `seg` of `region` (bucket elements [origin, origin + region.numel())) as a piece.
  auto add = [&](const Segment& seg, const Tensor& region, int64_t origin, int k) {
    const FlatLayout::Param& param = layout.params()[size_t(seg.param)];
    const nn::ParamMeta meta = meta_of(param.name);
    if (meta.tied_copy && !held) return;  // the first stage's wte.weight is the one written
    int64_t begin = seg.param_offset, length = seg.length;
    int64_t at = seg.bucket_offset - origin;
    if (meta.shard == nn::ShardKind::replicated && tp > 1 && !held) {
      const int64_t lo = length * tp_rank / tp, hi = length * (tp_rank + 1) / tp;
      begin += lo;
      at += lo;
      length = hi - lo;
    }
    if (length == 0) return;
    nn::ShardGeometry g;
    g.local_shape = param.tensor.shape();
    if (meta.shard != nn::ShardKind::replicated) {
      g.split_dim = meta.shard == nn::ShardKind::rows ? 0 : 1;
      g.segments = meta.segments;
      g.tp_rank = tp_rank;
      g.tp_size = tp;
    }
    out.push_back({param.name + suffix[k], k > 0, full_shape_of(g.local_shape, meta, tp), g, begin,
                   ops::narrow(region, 0, at, length)});
  };
  for (int b = 0; b < int(layout.buckets().size()); ++b) {
    const int64_t shard = layout.shard_numel(b), own = dp_rank * shard;
    Tensor regions[3] = {params.sharded() || !held ? params.shard(b) : params.bucket(b),
                         adamw.state_of(0, b), adamw.state_of(1, b)};
    int64_t origins[3];
    for (int k = 0; k < 3; ++k) {
      origins[k] = regions[k].numel() == shard ? own : 0;
      if (!held && regions[k].numel() != shard) {  // ZeRO 0's moments: the whole bucket
        regions[k] = ops::narrow(regions[k], 0, own, shard);
        origins[k] = own;
      }
    }
    if (!held) {
      // One shard range for all three: a parameter's weight and moments side by side.
      for (const Segment& seg : layout.shard_segments(b, dp_rank))
        for (int k = 0; k < 3; ++k) add(seg, regions[k], own, k);
      continue;
    }
    for (int k = 0; k < 3; ++k)
      for (const Segment& seg : layout.segments(b, origins[k], origins[k] + regions[k].numel()))
        add(seg, regions[k], origins[k], k);
  }
  return out;
}

std::vector<nn::ShardPiece> ParallelTrainer::checkpoint_pieces() const {
  return state_pieces(/*held=*/false);
}

namespace {

// Runs `read` on the pieces: those in host memory at once, each of the others (device state)
// through a host copy of one piece at a time.
void read_into(std::vector<nn::ShardPiece>& pieces,
               const std::function<void(std::vector<nn::ShardPiece>&)>& read) {
  NoGradGuard no_grad;
  std::vector<nn::ShardPiece> on_host;
  for (nn::ShardPiece& p : pieces) {
    if (p.data.device().is_cpu()) {
      on_host.push_back(p);
      continue;
    }
    nn::ShardPiece staged = p;
    staged.data = empty(p.data.shape(), p.data.dtype());
    std::vector<nn::ShardPiece> one{staged};
    read(one);
    ops::copy_(p.data, one[0].data);
  }
  read(on_host);
}

}  // namespace

void ParallelTrainer::load_checkpoint_set(const nn::ShardedSet& set,
                                          const nlohmann::json* optimizer_scalars) {
  std::vector<nn::ShardPiece> pieces = state_pieces(/*held=*/true);
  if (optimizer_scalars == nullptr)
    std::erase_if(pieces, [](const nn::ShardPiece& p) { return p.optimizer; });
  // The checks first, so that a set of another model changes nothing.
  nn::check_pieces(set, pieces);
  if (optimizer_scalars != nullptr) load_optimizer_scalars(*dp_, *optimizer_scalars);
  read_into(pieces, [&](std::vector<nn::ShardPiece>& p) { nn::read_pieces(set, p); });
  precision_->sync_compute();
}

void ParallelTrainer::load_model_source(const nn::TensorSource& source) {
  load_checkpoint_source(source, nullptr, nullptr);
}

void ParallelTrainer::load_checkpoint_source(const nn::TensorSource& model,
                                             const nn::TensorSource* optimizer,
                                             const nlohmann::json* optimizer_scalars) {
  TESSERA_CHECK((optimizer == nullptr) == (optimizer_scalars == nullptr),
                "load_checkpoint_source: the optimizer's tensors and scalars go together");
  // The checks first, so that files of another model change nothing.
  check_model_source(masters_, *mesh_, model, "load_checkpoint_source");
  if (optimizer != nullptr) {
    try {
      check_adamw_kind(*optimizer_scalars);
      check_model_source(masters_, *mesh_, *optimizer, "load_checkpoint_source",
                         {".exp_avg", ".exp_avg_sq"});
    } catch (const Error& e) {
      detail::throw_error(optimizer->where(), " (with its scalars): ", e.what());
    }
  }
  std::vector<nn::ShardPiece> weights, moments;
  for (nn::ShardPiece& p : state_pieces(/*held=*/true))
    (p.optimizer ? moments : weights).push_back(std::move(p));
  if (optimizer != nullptr) {
    load_optimizer_scalars(*dp_, *optimizer_scalars);
    read_into(moments, [&](std::vector<nn::ShardPiece>& p) { nn::read_pieces(*optimizer, p); });
  }
  read_into(weights, [&](std::vector<nn::ShardPiece>& p) { nn::read_pieces(model, p); });
  precision_->sync_compute();
}

nn::StateDict ParallelTrainer::local_state() const {
  const FlatLayout& layout = dp_->layout();
  const FlatParams& params = dp_->flat_params();
  const ZeroAdamW& adamw = dp_->optimizer();
  nn::StateDict out;
  for (int b = 0; b < int(layout.buckets().size()); ++b) {
    out.emplace_back(str_cat("master.", b), params.sharded() ? params.shard(b) : params.bucket(b));
    out.emplace_back(str_cat("exp_avg.", b), adamw.state_of(0, b));
    out.emplace_back(str_cat("exp_avg_sq.", b), adamw.state_of(1, b));
  }
  return out;
}

void ParallelTrainer::load_local_state(const nn::StateDict& state,
                                       const nlohmann::json& optimizer_scalars) {
  const nn::StateDict mine = local_state();
  TESSERA_CHECK(state.size() == mine.size(), "load_local_state: ", state.size(),
                " tensors for this rank's ", mine.size(), " (", config_.describe(), ")");
  for (size_t i = 0; i < mine.size(); ++i)
    TESSERA_CHECK(state[i].first == mine[i].first &&
                      state[i].second.shape() == mine[i].second.shape() &&
                      state[i].second.dtype() == mine[i].second.dtype(),
                  "load_local_state: tensor ", i, " is '", state[i].first, "' ",
                  state[i].second.describe(), ", this rank holds '", mine[i].first, "' ",
                  mine[i].second.describe());
  TESSERA_CHECK(optimizer_scalars.is_object() && optimizer_scalars.value("step", nlohmann::json())
                                                     .is_number_integer() &&
                    optimizer_scalars.value("lr", nlohmann::json()).is_number(),
                "load_local_state: the optimizer's scalars need 'step' and 'lr', got ",
                optimizer_scalars.dump());
  NoGradGuard no_grad;
  for (size_t i = 0; i < mine.size(); ++i) ops::copy_(mine[i].second, state[i].second);
  dp_->restore_optimizer_counters(optimizer_scalars["step"].get<int64_t>(),
                                  optimizer_scalars["lr"].get<double>());
  precision_->sync_compute();
}

}  // namespace tessera::parallel
