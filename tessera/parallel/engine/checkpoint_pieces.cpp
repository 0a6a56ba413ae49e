// ParallelTrainer::checkpoint_pieces: what this rank writes of a sharded checkpoint. The dp
// shards of FlatLayout already partition every parameter among the dp ranks whatever the
// ZeRO stage (at ZeRO 0 the optimizer state is whole on every rank, and only its shard is
// written), so each shard segment becomes a piece; tensor parallelism adds the geometry of the
// rank's slice, and a parameter that tp replicates has its segment split again over the tp
// ranks. The pieces are views: the caller copies them before the next update.

#include <algorithm>

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"
#include "tessera/core/ops/movement.h"
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

std::vector<nn::ShardPiece> ParallelTrainer::checkpoint_pieces() const {
  const FlatLayout& layout = dp_->layout();
  const int dp_rank = mesh_->dp_rank(), tp_rank = mesh_->tp_rank();
  const int tp = int(config_.mesh.size("tp"));
  const ZeroAdamW& adamw = dp_->optimizer();
  std::vector<nn::ShardPiece> out;
  for (int b = 0; b < int(layout.buckets().size()); ++b) {
    const int64_t shard = layout.shard_numel(b), origin = dp_rank * shard;
    Tensor master = dp_->flat_params().shard(b);
    Tensor moments[2] = {adamw.state_of(0, b), adamw.state_of(1, b)};
    for (Tensor& m : moments)
      if (m.numel() != shard) m = ops::narrow(m, 0, origin, shard);  // ZeRO 0: the whole bucket
    for (const Segment& seg : layout.shard_segments(b, dp_rank)) {
      const FlatLayout::Param& param = layout.params()[size_t(seg.param)];
      const nn::ParamMeta meta = meta_of(param.name);
      if (meta.tied_copy) continue;  // the first stage's wte.weight is the one written
      int64_t begin = seg.param_offset, length = seg.length;
      int64_t at = seg.bucket_offset - origin;  // in the shard
      if (meta.shard == nn::ShardKind::replicated && tp > 1) {
        const int64_t lo = length * tp_rank / tp, hi = length * (tp_rank + 1) / tp;
        begin += lo;
        at += lo;
        length = hi - lo;
      }
      if (length == 0) continue;
      nn::ShardGeometry g;
      g.local_shape = param.tensor.shape();
      if (meta.shard != nn::ShardKind::replicated) {
        g.split_dim = meta.shard == nn::ShardKind::rows ? 0 : 1;
        g.segments = meta.segments;
        g.tp_rank = tp_rank;
        g.tp_size = tp;
      }
      const Shape full = full_shape_of(g.local_shape, meta, tp);
      const char* suffix[3] = {"", ".exp_avg", ".exp_avg_sq"};
      const Tensor source[3] = {master, moments[0], moments[1]};
      for (int k = 0; k < 3; ++k)
        out.push_back({param.name + suffix[k], k > 0, full, g, begin,
                       ops::narrow(source[k], 0, at, length)});
    }
  }
  return out;
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
