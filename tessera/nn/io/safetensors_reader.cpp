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
  // Cast through a bounded buffer, so that reading a slice of a bf16 file into f32 holds the
  // slice and one chunk, not a second copy of the slice.
  const Tensor flat = ops::reshape(out, Shape{n});
  Tensor stored = empty(Shape{std::min(n, kCastChunkElements)}, entry.dtype);
  for (int64_t done = 0; done < n; done += kCastChunkElements) {
    const int64_t k = std::min(kCastChunkElements, n - done);
    const Tensor part = ops::narrow(stored, 0, 0, k);
    file_->read_at(at + uint64_t(done) * size, part.data_ptr(), uint64_t(k) * size);
    ops::copy_(ops::narrow(flat, 0, done, k), part);
  }
}

}  // namespace tessera::nn
