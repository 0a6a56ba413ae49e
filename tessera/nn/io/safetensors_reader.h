#pragma once
// SafetensorsReader: one open safetensors file whose tensors are read by element range, so a
// tensor-parallel rank reads only its slice of each full tensor (through a TensorSource,
// tensor_source.h) straight into its own tensors, never the whole. The header is validated as
// read_safetensors validates it.

#include <cstdint>
#include <memory>
#include <string>

#include "tessera/core/tensor.h"
#include "tessera/nn/io/safetensors.h"

namespace tessera::nn {

class PosixFile;

class SafetensorsReader {
 public:
  static constexpr int64_t kCastChunkElements = int64_t(1) << 16;

  explicit SafetensorsReader(const std::string& path);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const std::string& path() const;
  const SafetensorsHeader& header() const { return header_; }
  // The tensor `name`, or null when the file has none.
  const SafetensorsEntry* find(const std::string& name) const;
  // Elements [first, first + out.numel()) of `entry`, row-major, into `out`: a contiguous CPU
  // tensor, of the entry's dtype or cast to its own (through a buffer of at most
  // kCastChunkElements stored elements). A range outside the tensor throws naming the file and
  // the tensor.
  void read_elements(const SafetensorsEntry& entry, int64_t first, const Tensor& out) const;

 private:
  std::unique_ptr<PosixFile> file_;
  SafetensorsHeader header_;
};

}  // namespace tessera::nn
