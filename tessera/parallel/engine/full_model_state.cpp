#include "tessera/parallel/engine/detail/full_model_state.h"

#include <map>
#include <set>
#include <span>
#include <string>

#include "tessera/core/error.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"
#include "tessera/parallel/tp/detail/full_state.h"

namespace tessera::parallel {

namespace {

// A tensor's name, dtype and single-process shape.
struct Entry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
};

// The single-process shape of a tensor-parallel shard split as `meta` over `tp` ranks.
Shape full_shape(const Tensor& local, const nn::ParamMeta& meta, int tp) {
  Shape s = local.shape();
  if (meta.shard == nn::ShardKind::rows)
    s[0] = meta.unpadded_size >= 0 ? meta.unpadded_size : s[0] * tp;
  else if (meta.shard == nn::ShardKind::cols)
    s[1] *= tp;
  return s;
}

// The entries of one chunk (tied copies left out), with their single-process shapes.
std::vector<Entry> local_entries(const nn::GPT& chunk, int tp) {
  std::vector<Entry> out;
  const auto metas = chunk.named_parameter_meta();
  const nn::StateDict params = chunk.named_parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& meta = metas[i].second;
    if (meta.tied_copy) continue;
    out.push_back(
        {params[i].first, params[i].second.dtype(), full_shape(params[i].second, meta, tp)});
  }
  return out;
}

// Entries travel as one i64 tensor: count, then per entry the name's length and bytes, the
// dtype and the shape.
std::vector<Entry> broadcast_entries(const std::vector<Entry>& mine, int root,
                                     Communicator& group) {
  if (group.size() == 1) return mine;
  std::vector<int64_t> code;
  if (group.rank() == root) {
    code.push_back(int64_t(mine.size()));
    for (const Entry& e : mine) {
      code.push_back(int64_t(e.name.size()));
      for (char ch : e.name) code.push_back(int64_t(static_cast<unsigned char>(ch)));
      code.push_back(int64_t(e.dtype));
      code.push_back(int64_t(e.shape.size()));
      for (int64_t d : e.shape) code.push_back(d);
    }
  }
  Tensor length = from_vector<int64_t>({int64_t(code.size())}, Shape{1});
  group.broadcast(length, root);
  Tensor data = group.rank() == root ? from_vector<int64_t>(code, Shape{int64_t(code.size())})
                                     : empty(Shape{length.item<int64_t>()}, DType::i64);
  group.broadcast(data, root);
  if (group.rank() == root) return mine;
  code = to_vector<int64_t>(data);
  std::vector<Entry> out;
  size_t k = 0;
  const int64_t n = code[k++];
  for (int64_t i = 0; i < n; ++i) {
    Entry e;
    const int64_t len = code[k++];
    for (int64_t j = 0; j < len; ++j) e.name.push_back(char(code[k++]));
    e.dtype = DType(code[k++]);
    const int64_t dims = code[k++];
    std::vector<int64_t> sizes;
    for (int64_t j = 0; j < dims; ++j) sizes.push_back(code[k++]);
    e.shape = Shape(std::span<const int64_t>(sizes));
    out.push_back(std::move(e));
  }
  return out;
}

// Model stage s lives on pp rank s % pp as chunk s / pp.
int owner_of(int model_stage, int pp) {
  return model_stage % pp;
}

// Every entry of the single-process model, in its order, on every rank.
std::vector<Entry> all_entries(const std::vector<std::shared_ptr<nn::GPT>>& chunks,
                               const DeviceMesh& mesh) {
  const int pp = mesh.shape().size("pp"), stages = pp * int(chunks.size());
  std::vector<Entry> out;
  for (int s = 0; s < stages; ++s) {
    std::vector<Entry> mine;
    if (mesh.pp_rank() == owner_of(s, pp))
      mine = local_entries(*chunks[size_t(s / pp)], mesh.shape().size("tp"));
    for (Entry& e : broadcast_entries(mine, owner_of(s, pp), mesh.pp())) out.push_back(e);
  }
  return out;
}

}  // namespace

nn::StateDict gather_model_state(const std::vector<std::shared_ptr<nn::GPT>>& chunks,
                                 const DeviceMesh& mesh) {
  std::vector<nn::StateDict> params;
  for (const auto& chunk : chunks) params.push_back(chunk->named_parameters());
  return gather_parameter_tensors(chunks, mesh, params);
}

nn::StateDict gather_parameter_tensors(const std::vector<std::shared_ptr<nn::GPT>>& chunks,
                                       const DeviceMesh& mesh,
                                       const std::vector<nn::StateDict>& local) {
  TESSERA_CHECK(local.size() == chunks.size(), "gather_parameter_tensors: ", local.size(),
                " tensor lists for ", chunks.size(), " chunks");
  const int pp = mesh.shape().size("pp"), stages = pp * int(chunks.size());
  nn::StateDict out;
  if (mesh.world().size() == 1) {
    // One rank holds every tensor whole: views of them (the padded vocabulary rows cut off),
    // not copies, so that a checkpoint of one process needs no second copy of the model and
    // its moments. They alias the live tensors: use them before the next step.
    for (size_t c = 0; c < chunks.size(); ++c)
      for (const Entry& e : local_entries(*chunks[c], 1)) {
        Tensor t = nn::find_tensor(local[c], e.name);
        TESSERA_CHECK(t.defined(), "gather_parameter_tensors: no tensor for '", e.name, "'");
        if (t.shape() != e.shape) t = ops::narrow(t, 0, 0, e.shape[0]);
        out.emplace_back(e.name, t);
      }
    return out;
  }
  for (int s = 0; s < stages; ++s) {
    const int owner = owner_of(s, pp);
    std::vector<Entry> entries;
    nn::StateDict part;
    if (mesh.pp_rank() == owner) {
      const nn::GPT& chunk = *chunks[size_t(s / pp)];
      entries = local_entries(chunk, mesh.shape().size("tp"));
      for (const Entry& e : entries) {
        const Tensor t = nn::find_tensor(local[size_t(s / pp)], e.name);
        TESSERA_CHECK(t.defined(), "gather_parameter_tensors: no tensor for '", e.name, "'");
        part.emplace_back(e.name, tp::gather_full(t, chunk.param_meta(e.name), mesh.tp()));
      }
    }
    entries = broadcast_entries(entries, owner, mesh.pp());
    for (size_t i = 0; i < entries.size(); ++i) {
      Tensor t = mesh.pp_rank() == owner ? ops::contiguous(part[i].second)
                                         : empty(entries[i].shape, entries[i].dtype);
      mesh.pp().broadcast(t, owner);
      out.emplace_back(entries[i].name, t);
    }
  }
  return out;
}

void check_model_state(const std::vector<std::shared_ptr<nn::GPT>>& chunks, const DeviceMesh& mesh,
                       const nn::StateDict& full, const std::string& what) {
  // Every rank knows every expected name and shape, so every rank reaches the same verdict.
  const std::vector<Entry> expected = all_entries(chunks, mesh);
  std::map<std::string, const Tensor*> given;
  for (const auto& [name, t] : full) {
    TESSERA_CHECK(given.emplace(name, &t).second, what, ": '", name,
                  "' appears twice in the state dict");
  }
  std::set<std::string> known;
  for (const Entry& e : expected) {
    known.insert(e.name);
    auto it = given.find(e.name);
    TESSERA_CHECK(it != given.end(), what, ": the state dict has no '", e.name, "' (", full.size(),
                  " tensors given, the model has ", expected.size(), ")");
    const Tensor& t = *it->second;
    TESSERA_CHECK(t.defined() && t.shape() == e.shape && t.dtype() == e.dtype, what, ": '", e.name,
                  "' is ", t.defined() ? t.describe() : std::string("undefined"),
                  " but the model needs ", dtype_name(e.dtype), e.shape.to_string());
  }
  for (const auto& [name, t] : full)
    TESSERA_CHECK(known.count(name), what, ": '", name, "' is not a parameter of this model");
}

void check_model_source(const std::vector<std::shared_ptr<nn::GPT>>& chunks, const DeviceMesh& mesh,
                        const nn::TensorSource& source, const std::string& what,
                        const std::vector<std::string>& suffixes) {
  const std::vector<Entry> expected = all_entries(chunks, mesh);
  std::set<std::string> known;
  for (const Entry& e : expected)
    for (const std::string& suffix : suffixes) {
      const std::string name = e.name + suffix;
      known.insert(name);
      const nn::TensorSource::Stacked* t = source.find(name);
      TESSERA_CHECK(t != nullptr, what, ": ", source.where(), " has no '", name, "' (",
                    source.tensors().size(), " tensors there, the model needs ",
                    expected.size() * suffixes.size(), ")");
      TESSERA_CHECK(t->shape == e.shape, what, ": ", source.where(), ": '", name, "' is ",
                    dtype_name(t->dtype), t->shape, " but the model needs ", e.shape);
    }
  for (const nn::TensorSource::Stacked& t : source.tensors())
    TESSERA_CHECK(known.count(t.name), what, ": ", source.where(), ": '", t.name,
                  "' is not a tensor of this model",
                  suffixes.size() == 1 && suffixes[0].empty() ? "" : "'s optimizer state");
}

void load_model_state(const std::vector<std::shared_ptr<nn::GPT>>& chunks, const DeviceMesh& mesh,
                      const nn::StateDict& full) {
  check_model_state(chunks, mesh, full);
  std::map<std::string, const Tensor*> given;
  for (const auto& [name, t] : full) given.emplace(name, &t);
  for (const auto& chunk : chunks) {
    nn::StateDict mine;
    for (const auto& [name, p] : chunk->named_parameters())
      mine.emplace_back(name, *given.at(name));
    tp::load_full_state_dict(*chunk, mine, mesh.tp_rank(), mesh.shape().size("tp"), /*strict=*/true);
  }
}

}  // namespace tessera::parallel
