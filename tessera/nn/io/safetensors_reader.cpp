#include "tessera/nn/io/safetensors_reader.h"

#include <algorithm>

#include "tessera/core/empty.h"
#include "tessera/core/error.h"
#include "tessera/core/ops/movement.h"
#include "tessera/nn/io/detail/posix_file.h"

namespace tessera::nn {

SafetensorsReader::SafetensorsReader(const std::string& path)
    : file_(std::make_unique<PosixFile>(path)), header_(read_safetensors_header(path)) {
  // The header was validated against the file's size when read_safetensors_header opened it;
  // the file this reader holds open must be that one still.
  uint64_t data = 0;
  for (const SafetensorsEntry& e : header_.entries) data = std::max(data, e.end);
  TESSERA_CHECK(file_->size() == header_.data_start + data, "safetensors ", path, ": ",
                file_->size(), " bytes, but its header describes ", header_.data_start + data,
                " (the file changed while it was opened)");
}

SafetensorsReader::~SafetensorsReader() = default;

const std::string& SafetensorsReader::path() const {
  return file_->path();
}

const SafetensorsEntry* SafetensorsReader::find(const std::string& name) const {
  for (const SafetensorsEntry& e : header_.entries)
    if (e.name == name) return &e;
  return nullptr;
}

void SafetensorsReader::read_elements(const SafetensorsEntry& entry, int64_t first,
                                      const Tensor& out) const {
  TESSERA_CHECK(out.defined() && out.device().is_cpu() && out.is_contiguous(), "safetensors ",
                path(), ": tensor '", entry.name, "' reads into a contiguous CPU tensor, got ",
                out.defined() ? out.describe() : std::string("undefined"));
  const int64_t n = out.numel();
  TESSERA_CHECK(first >= 0 && first + n <= entry.shape.numel(), "safetensors ", path(),
                ": elements [", first, ", ", first + n, ") of tensor '", entry.name, "' ",
                entry.shape, " are outside it");
  if (n == 0) return;
  const uint64_t size = dtype_size(entry.dtype);
  const uint64_t at = header_.data_start + entry.begin + uint64_t(first) * size;
  if (out.dtype() == entry.dtype) return file_->read_at(at, out.data_ptr(), uint64_t(n) * size);
  Tensor stored = empty(Shape{n}, entry.dtype);
  file_->read_at(at, stored.data_ptr(), uint64_t(n) * size);
  ops::copy_(ops::reshape(out, Shape{n}), stored);
}

ParamFill safetensors_fill(std::shared_ptr<const SafetensorsReader> file, const std::string& name,
                           const Shape& full_shape, const ParamMeta& meta, int rank, int size) {
  TESSERA_CHECK(file != nullptr, "safetensors_fill: '", name, "' has no file");
  const SafetensorsEntry* entry = file->find(name);
  TESSERA_CHECK(entry != nullptr, "safetensors ", file->path(), ": no tensor '", name, "'");
  // The file holds the full tensor, or, of a split dim padded for tensor parallelism, its
  // first meta.unpadded_size indices: the map over the file's shape puts the padding in no run.
  const ShardMap model(full_shape, meta, rank, size, name);  // checks the model's own split
  const int dim = meta.shard == ShardKind::replicated ? -1 : meta.shard == ShardKind::rows ? 0 : 1;
  Shape padded = entry->shape;
  const bool short_dim = dim >= 0 && meta.unpadded_size > 0 && dim < padded.size() &&
                         padded[dim] == meta.unpadded_size;
  if (short_dim) padded[dim] = full_shape[dim];
  TESSERA_CHECK(padded == full_shape, "safetensors ", file->path(), ": tensor '", name, "' is ",
                entry->shape, "; the model's full tensor is ", full_shape,
                meta.unpadded_size > 0 ? str_cat(" (or ", meta.unpadded_size, " unpadded)") : "");
  const ShardMap map(
      entry->shape, dim,
      meta.segments.empty() && dim >= 0 ? std::vector<int64_t>{full_shape[dim]} : meta.segments,
      rank, size, name);
  return [file, entry, map, short_dim](int64_t begin, const Tensor& out) {
    TESSERA_CHECK(out.defined() && out.dim() == 1 && out.is_contiguous() && out.device().is_cpu(),
                  "safetensors_fill: '", entry->name, "' fills a contiguous 1-D CPU tensor, got ",
                  out.defined() ? out.describe() : std::string("undefined"));
    if (short_dim) ops::zero_(out);  // the padding, which no run reaches
    map.for_each_run(begin, begin + out.numel(), [&](int64_t local, int64_t full, int64_t n) {
      file->read_elements(*entry, full, ops::narrow(out, 0, local - begin, n));
    });
  };
}

}  // namespace tessera::nn
