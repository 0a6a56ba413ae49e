// Gathering is one all-gather per sharded tensor into [size, local...], then, along the split
// dim, the ranks' parts of each segment are joined in order and the tensor-parallel padding
// (vocabulary rows) is cut off.

#include "tessera/parallel/tp/detail/full_state.h"

#include <map>
#include <set>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"
#include "tessera/nn/init.h"

namespace tessera::parallel::tp {

Tensor gather_full(const Tensor& local, const nn::ParamMeta& meta, Communicator& group) {
  TESSERA_CHECK(local.defined(), "gather_full: the shard is undefined");
  if (meta.shard == nn::ShardKind::replicated) return ops::clone(local);
  const int64_t dim = meta.shard == nn::ShardKind::rows ? 0 : 1;
  const int64_t t = group.size();
  TESSERA_CHECK(local.dim() > dim, "gather_full: shard ", local.describe(), " has no dim ", dim);
  std::vector<int64_t> segments = meta.segments;
  if (segments.empty()) segments = {local.size(dim) * t};
  int64_t local_length = 0;
  for (int64_t s : segments) local_length += s / t;
  TESSERA_CHECK(local_length == local.size(dim), "gather_full: shard ", local.describe(),
                " has ", local.size(dim), " along dim ", dim, " but its segments give ",
                local_length, " per rank of ", t);
  Tensor all = empty(Shape{t * local.numel()}, local.dtype(), local.device());
  group.all_gather(ops::contiguous(local), all);
  Shape stacked = local.shape();
  stacked.insert(0, t);
  all = ops::view(all, stacked);
  std::vector<Tensor> pieces;
  int64_t start = 0;
  for (int64_t s : segments) {
    for (int64_t r = 0; r < t; ++r)
      pieces.push_back(ops::narrow(ops::select(all, 0, r), dim, start, s / t));
    start += s / t;
  }
  Tensor full = ops::cat(pieces, dim);
  if (meta.unpadded_size > 0 && meta.unpadded_size < full.size(dim))
    full = ops::contiguous(ops::narrow(full, dim, 0, meta.unpadded_size));
  return full;
}

nn::StateDict gather_full_state_dict(const nn::Module& model, Communicator& group) {
  nn::StateDict out;
  const auto metas = model.named_parameter_meta();
  for (const auto& [name, t] : model.state_dict()) {
    nn::ParamMeta meta;
    for (const auto& [n, m] : metas)
      if (n == name) meta = m;
    out.emplace_back(name, gather_full(t, meta, group));
  }
  return out;
}

nn::StateDict gather_full_grads(const nn::Module& model, Communicator& group) {
  nn::StateDict out;
  const auto metas = model.named_parameter_meta();
  const nn::StateDict params = model.named_parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor g = params[i].second.grad();
    if (g.defined()) out.emplace_back(params[i].first, gather_full(g, metas[i].second, group));
  }
  return out;
}

void load_full_state_dict(nn::Module& model, const nn::StateDict& full, int rank, int size,
                          bool strict) {
  const auto metas = model.named_parameter_meta();
  nn::StateDict local;
  for (const auto& [name, t] : full) {
    nn::ParamMeta meta;
    for (const auto& [n, m] : metas)
      if (n == name) meta = m;
    local.emplace_back(name, nn::shard_of(t, meta, rank, size, name));
  }
  model.load_state_dict(local, strict);
}

namespace {

// A model's tensor as the readers below fill it: its split and a flat view of it.
struct LocalTensor {
  std::string name;
  nn::ParamMeta meta;  // replicated for a buffer
  Shape shape;         // the local shape
  Tensor flat;         // [numel], the model's own memory
};

// Every parameter and buffer of `model`, in state_dict() order; each must be a contiguous CPU
// tensor (`op` names the reader in the error).
std::vector<LocalTensor> local_tensors(const nn::Module& model, const char* op) {
  std::map<std::string, nn::ParamMeta> metas;
  for (const auto& [name, meta] : model.named_parameter_meta()) metas.emplace(name, meta);
  std::vector<LocalTensor> out;
  for (const auto& [name, t] : model.state_dict()) {
    TESSERA_CHECK(t.device().is_cpu() && t.is_contiguous(), op, ": '", name, "' ", t.describe(),
                  " is not a contiguous CPU tensor");
    const auto it = metas.find(name);
    out.push_back({name, it == metas.end() ? nn::ParamMeta{} : it->second, t.shape(),
                   ops::view(t, Shape{t.numel()})});
  }
  return out;
}

int split_dim(const nn::ParamMeta& meta) {
  return meta.shard == nn::ShardKind::replicated ? -1 : meta.shard == nn::ShardKind::rows ? 0 : 1;
}

}  // namespace

void read_full_source(nn::Module& model, const std::shared_ptr<const nn::TensorSource>& source,
                      int rank, int size) {
  std::set<std::string> names;
  for (const LocalTensor& t : local_tensors(model, "read_full_source")) {
    names.insert(t.name);
    // The full (tensor-parallel) shape: the split dim is its segments' sum.
    Shape full = t.shape;
    if (const int dim = split_dim(t.meta); dim >= 0) {
      int64_t length = 0;
      for (int64_t s : t.meta.segments) length += s;
      full[dim] = t.meta.segments.empty() ? full[dim] * size : length;
    }
    nn::source_fill(source, t.name, full, t.meta, rank, size)(0, t.flat);
  }
  for (const nn::TensorSource::Stacked& t : source->tensors())
    TESSERA_CHECK(names.count(t.name) != 0, source->where(), ": unexpected tensor '", t.name,
                  "' (the model has no parameter or buffer of that name)");
}

void read_full_sharded_set(nn::Module& model, const nn::ShardedSet& set, int rank, int size) {
  std::map<std::string, Shape> stored;
  for (const nn::ShardedSet::StoredTensor& t : set.tensors)
    if (!t.optimizer) stored.emplace(t.name, t.full_shape);
  std::vector<nn::ShardPiece> pieces;
  for (const LocalTensor& t : local_tensors(model, "read_full_sharded_set")) {
    const auto s = stored.find(t.name);
    TESSERA_CHECK(s != stored.end(), "checkpoint ", set.dir, ": no tensor '", t.name, "'");
    nn::ShardPiece p;
    p.name = t.name;
    p.full_shape = s->second;
    p.geometry.local_shape = t.shape;
    p.geometry.split_dim = split_dim(t.meta);
    if (p.geometry.split_dim >= 0) {
      p.geometry.segments = t.meta.segments;
      p.geometry.tp_rank = rank;
      p.geometry.tp_size = size;
    }
    p.data = t.flat;
    pieces.push_back(std::move(p));
    stored.erase(s);
  }
  TESSERA_CHECK(stored.empty(), "checkpoint ", set.dir, ": unexpected tensor '",
                stored.empty() ? std::string() : stored.begin()->first,
                "' (the model has no parameter or buffer of that name)");
  nn::read_pieces(set, pieces);
}

}  // namespace tessera::parallel::tp
