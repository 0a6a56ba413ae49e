#pragma once
// safetensors, Hugging Face's tensor file format:
//
//   [8 bytes: N, little-endian u64][N bytes: JSON header][data region]
//
// The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}, with
// offsets relative to the start of the data region, plus an optional "__metadata__" object of
// string to string. The tensors must cover the data region exactly: no overlaps, no holes, no
// trailing bytes (the reference implementation rejects such files, so we do too).
//
// The reader treats every file as hostile: each number in the header is checked against the
// file before it is used, and every error names the file, the tensor and the field or offset.

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/core/shape.h"
#include "tessera/nn/module.h"

namespace tessera::nn {

// The "__metadata__" entries, in file order.
using SafetensorsMetadata = std::vector<std::pair<std::string, std::string>>;

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t begin = 0;  // byte range [begin, end) relative to the data region
  uint64_t end = 0;
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  // in header order
  SafetensorsMetadata metadata;
  uint64_t data_start = 0;  // absolute file offset of the data region: 8 + N
};

struct SafetensorsFile {
  StateDict tensors;  // in header order, on the CPU, in the file's dtypes
  SafetensorsMetadata metadata;
};

// The largest header accepted (the reference implementation's limit): a hostile length field
// cannot make the reader allocate more.
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

// The safetensors dtype name ("F32", "BF16", ...) for a Tessera dtype.
const char* safetensors_dtype_name(DType dtype);

// Parses and validates a header. `bytes` holds at least the first 8 + N bytes of a file whose
// total size is `file_size`; `source` names the file in errors.
SafetensorsHeader parse_safetensors_header(const char* bytes, uint64_t nbytes, uint64_t file_size,
                                           const std::string& source);
// Reads and validates only the header of a file.
SafetensorsHeader read_safetensors_header(const std::string& path);
// Reads the whole file into fresh CPU tensors. Given `into`, a tensor of the file whose name
// `into` holds, with the same shape and dtype, contiguous on the CPU, is read straight into that
// tensor (and returned as it): a model is loaded without a second copy of its weights.
SafetensorsFile read_safetensors(const std::string& path, const StateDict* into = nullptr);

// How a writer reads tensors that are not in host memory (a GPU's) without copying any of them
// whole: read(dst, src, offset, bytes) copies bytes [offset, offset + bytes) of contiguous
// tensor src's data into host memory at dst. The writer asks for at most buffer.nbytes() at a
// time, always into `buffer` (host memory the reader chose: page-locked for a GPU), so a save
// holds one chunk of host memory beyond the state, never a tensor.
struct ChunkedReads {
  Tensor buffer;
  std::function<void(void* dst, const Tensor& src, size_t offset, size_t bytes)> read;
};

// Writes tensors (any device, any layout) atomically. The header lists tensors in the given
// order; the data region holds them by element size, widest first, after a header padded with
// spaces to a multiple of 8 bytes, so every tensor starts at a multiple of its element size
// without leaving holes. The output is a function of the inputs only (deterministic).
// on_data_written, when given, is called once every tensor's bytes have been handed to the
// file and before it is fsynced and renamed into place: from then on the tensors may change
// (a checkpoint streamed from live state releases the training loop there). checksum, when
// given, receives the file's checksum (file_checksum's, detail/checksum.h), taken over the
// bytes as they are written, so that a checkpoint need not read the file back. chunked, when
// given, reads every contiguous tensor that is not on the CPU chunk by chunk (others are
// copied to the host whole, as without it).
void write_safetensors(const std::string& path, const StateDict& tensors,
                       const SafetensorsMetadata& metadata = {},
                       const std::function<void()>& on_data_written = nullptr,
                       uint64_t* checksum = nullptr, const ChunkedReads* chunked = nullptr);

}  // namespace tessera::nn
