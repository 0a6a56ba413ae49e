#include "tessera/nn/io/tensor_source.h"

#include <algorithm>

#include "tessera/core/empty.h"
#include "tessera/core/error.h"
#include "tessera/core/ops/movement.h"
#include "tessera/nn/shard_map.h"

namespace tessera::nn {

namespace {

// Elements per row of a tensor of `shape` (a vector's rows are its elements; a scalar is one
// row of one element).
int64_t row_elements(const Shape& shape) {
  if (shape.size() == 0) return 1;
  return shape[0] == 0 ? 0 : shape.numel() / shape[0];
}

}  // namespace

TensorSource TensorSource::of_file(std::shared_ptr<const SafetensorsReader> file) {
  TESSERA_CHECK(file != nullptr, "TensorSource::of_file: no file");
  TensorSource out(file->path());
  out.add_file(std::move(file));
  return out;
}

void TensorSource::add_file(std::shared_ptr<const SafetensorsReader> file) {
  TESSERA_CHECK(file != nullptr, where_, ": add_file without a file");
  for (const SafetensorsEntry& e : file->header().entries) {
    TESSERA_CHECK(find(e.name) == nullptr, where_, ": tensor '", e.name, "' of ", file->path(),
                  " is given twice");
    const int64_t rows = e.shape.size() == 0 ? 1 : e.shape[0];  // a scalar: one row
    tensors_.push_back({e.name, e.shape, e.dtype, {{file, &e, rows}}});
  }
}

void TensorSource::add(const std::string& name, const Shape& shape, std::vector<Block> blocks) {
  TESSERA_CHECK(shape.size() >= 1, where_, ": tensor '", name, "' must be at least 1-D, got ",
                shape);
  TESSERA_CHECK(find(name) == nullptr, where_, ": tensor '", name, "' is given twice");
  Shape row = shape;
  int64_t rows = 0;
  const SafetensorsEntry* first = nullptr;
  for (const Block& b : blocks) {
    if (b.file != nullptr) {
      TESSERA_CHECK(b.entry != nullptr, where_, ": a block of '", name, "' has no tensor");
      row[0] = b.rows;
      TESSERA_CHECK(b.entry->shape == row, b.file->path(), ": tensor '", b.entry->name,
                    "' has shape ", b.entry->shape, ", expected ", row);
      if (first == nullptr) first = b.entry;
    }
    TESSERA_CHECK(b.rows >= 0, where_, ": a block of '", name, "' has ", b.rows, " rows");
    rows += b.rows;
  }
  TESSERA_CHECK(rows == shape[0], where_, ": the blocks of '", name, "' hold ", rows,
                " rows, the tensor ", shape[0]);
  tensors_.push_back(
      {name, shape, first != nullptr ? first->dtype : DType::f32, std::move(blocks)});
}

const TensorSource::Stacked* TensorSource::find(const std::string& name) const {
  for (const Stacked& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

void TensorSource::read(const Stacked& t, int64_t first, const Tensor& out) const {
  TESSERA_CHECK(out.defined() && out.device().is_cpu() && out.is_contiguous(), where_, ": tensor '",
                t.name, "' reads into a contiguous CPU tensor, got ",
                out.defined() ? out.describe() : std::string("undefined"));
  const int64_t n = out.numel();
  TESSERA_CHECK(first >= 0 && first + n <= t.shape.numel(), where_, ": elements [", first, ", ",
                first + n, ") of tensor '", t.name, "' ", t.shape, " are outside it");
  const Tensor flat = ops::reshape(out, Shape{n});
  const int64_t per_row = row_elements(t.shape);
  int64_t start = 0;  // of the block, in the stacked tensor's elements
  for (const Block& b : t.blocks) {
    const int64_t size = b.rows * per_row;
    const int64_t lo = std::max(first, start), hi = std::min(first + n, start + size);
    if (lo < hi) {
      const Tensor part = ops::narrow(flat, 0, lo - first, hi - lo);
      if (b.file == nullptr)
        ops::zero_(part);
      else
        b.file->read_elements(*b.entry, lo - start, part);
    }
    start += size;
  }
}

StateDict TensorSource::read_all() const {
  StateDict out;
  for (const Stacked& t : tensors_) {
    Tensor whole = empty(t.shape, t.dtype);
    read(t, 0, whole);
    out.emplace_back(t.name, whole);
  }
  return out;
}

ParamFill source_fill(std::shared_ptr<const TensorSource> source, const std::string& name,
                      const Shape& full_shape, const ParamMeta& meta, int rank, int size) {
  TESSERA_CHECK(source != nullptr, "source_fill: '", name, "' has no source");
  const TensorSource::Stacked* stored = source->find(name);
  TESSERA_CHECK(stored != nullptr, source->where(), ": no tensor '", name, "'");
  // The source holds the full tensor, or, of a split dim padded for tensor parallelism, its
  // first meta.unpadded_size indices: the map over the source's shape puts the padding in no
  // run.
  const ShardMap model(full_shape, meta, rank, size, name);  // checks the model's own split
  const int dim = meta.shard == ShardKind::replicated ? -1 : meta.shard == ShardKind::rows ? 0 : 1;
  Shape padded = stored->shape;
  const bool short_dim = dim >= 0 && meta.unpadded_size > 0 && dim < padded.size() &&
                         padded[dim] == meta.unpadded_size;
  if (short_dim) padded[dim] = full_shape[dim];
  TESSERA_CHECK(padded == full_shape, source->where(), ": tensor '", name, "' is ", stored->shape,
                "; the model's full tensor is ", full_shape,
                meta.unpadded_size > 0 ? str_cat(" (or ", meta.unpadded_size, " unpadded)") : "");
  const ShardMap map(
      stored->shape, dim,
      meta.segments.empty() && dim >= 0 ? std::vector<int64_t>{full_shape[dim]} : meta.segments,
      rank, size, name);
  return [source, stored, map, short_dim](int64_t begin, const Tensor& out) {
    TESSERA_CHECK(out.defined() && out.dim() == 1 && out.is_contiguous() && out.device().is_cpu(),
                  "source_fill: '", stored->name, "' fills a contiguous 1-D CPU tensor, got ",
                  out.defined() ? out.describe() : std::string("undefined"));
    if (short_dim) ops::zero_(out);  // the padding, which no run reaches
    map.for_each_run(begin, begin + out.numel(), [&](int64_t local, int64_t full, int64_t n) {
      source->read(*stored, full, ops::narrow(out, 0, local - begin, n));
    });
  };
}

void read_pieces(const TensorSource& source, std::vector<ShardPiece>& pieces) {
  std::vector<const TensorSource::Stacked*> stored;
  for (const ShardPiece& p : pieces) {
    const TensorSource::Stacked* t = source.find(p.name);
    TESSERA_CHECK(t != nullptr, source.where(), ": no tensor '", p.name, "'");
    TESSERA_CHECK(t->shape == p.full_shape, source.where(), ": tensor '", p.name, "' is ", t->shape,
                  "; the model's is ", p.full_shape);
    TESSERA_CHECK(p.data.defined() && p.data.device().is_cpu() && p.data.is_contiguous(),
                  source.where(), ": '", p.name, "' reads into a contiguous CPU tensor, got ",
                  p.data.defined() ? p.data.describe() : std::string("undefined"));
    stored.push_back(t);
  }
  for (size_t i = 0; i < pieces.size(); ++i) {
    const ShardPiece& p = pieces[i];
    const Tensor flat = ops::reshape(p.data, Shape{p.data.numel()});
    const std::vector<PieceRun> runs =
        piece_runs(p.geometry, p.full_shape, p.begin, flat.numel(), source.where() + ": " + p.name);
    int64_t filled = 0;
    for (const PieceRun& r : runs) filled += r.length;
    if (filled < flat.numel()) ops::zero_(flat);  // tensor-parallel padding
    for (const PieceRun& r : runs)
      source.read(*stored[i], r.full_offset, ops::narrow(flat, 0, r.piece_offset, r.length));
  }
}

}  // namespace tessera::nn
