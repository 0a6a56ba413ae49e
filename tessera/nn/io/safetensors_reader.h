#pragma once
// SafetensorsReader: one open safetensors file whose tensors are read by element range, so a
// tensor-parallel rank reads only its slice of each full tensor (shard_map.h) straight into
// its own tensors, never the whole. The header is validated as read_safetensors validates it.

#include <cstdint>
#include <memory>
#include <string>

#include "tessera/core/tensor.h"
#include "tessera/nn/io/safetensors.h"
#include "tessera/nn/module.h"
#include "tessera/nn/shard_map.h"

namespace tessera::nn {

class PosixFile;

class SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::string& path);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const std::string& path() const;
  const SafetensorsHeader& header() const { return header_; }
  // The tensor `name`, or null when the file has none.
  const SafetensorsEntry* find(const std::string& name) const;
  // Elements [first, first + out.numel()) of `entry`, row-major, into `out`: a contiguous CPU
  // tensor, of the entry's dtype or cast to its own. A range outside the tensor throws naming
  // the file and the tensor.
  void read_elements(const SafetensorsEntry& entry, int64_t first, const Tensor& out) const;

 private:
  std::unique_ptr<PosixFile> file_;
  SafetensorsHeader header_;
};

// The fill (module.h) of rank `rank`'s part of the file's tensor `name`, as `meta` splits a
// tensor of `full_shape` over `size` ranks: each local element is read from its full position
// (ShardMap). The file's tensor has the full shape, or, where meta.unpadded_size says the
// split rows are padded beyond the file's (a vocabulary padded for tensor parallelism), that
// many rows: the rows past them are zero. Errors name the file and the tensor.
ParamFill safetensors_fill(std::shared_ptr<const SafetensorsReader> file, const std::string& name,
                           const Shape& full_shape, const ParamMeta& meta, int rank, int size);

}  // namespace tessera::nn
