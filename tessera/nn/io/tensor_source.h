#pragma once
// TensorSource: named single-process tensors whose elements are read from files by flat range,
// never loaded whole. Each tensor is rows stacked from stored tensors (of one or several
// safetensors files) and zero rows. That is a file's own tensors (of_file), and also Hugging
// Face Llama's q, k and v projections stacked into c_attn, with its vocabulary padded by zero
// rows (hf_llama_source in hf_llama.h). Through source_fill, a tensor-parallel, pipeline or ZeRO
// rank reads only the elements it holds, straight into its own tensors.
//
//   c_attn [(H + 2K)·D, h]     rows               stored in
//   ┌──────────────────┐
//   │ q                │  0 .. H·D           model-00001.safetensors  q_proj
//   ├──────────────────┤
//   │ k                │  H·D .. (H+K)·D     model-00001.safetensors  k_proj
//   ├──────────────────┤
//   │ v                │  .. (H+2K)·D        model-00002.safetensors  v_proj
//   └──────────────────┘
//
// A flat range of the stacked tensor is one read per block it crosses (rows are row-major, so a
// range of rows is a range of each block's elements).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/nn/io/safetensors_reader.h"
#include "tessera/nn/io/sharded_checkpoint.h"
#include "tessera/nn/module.h"

namespace tessera::nn {

class TensorSource {
 public:
  // Of a stacked tensor: all the rows of `entry` of `file`, or, with no file, `rows` zero rows.
  struct Block {
    std::shared_ptr<const SafetensorsReader> file;
    const SafetensorsEntry* entry = nullptr;
    int64_t rows = 0;
  };
  struct Stacked {
    std::string name;
    Shape shape;
    DType dtype = DType::f32;  // of the first stored block; reads cast the others
    std::vector<Block> blocks;
  };

  // `where` names the source in errors (a file or a folder).
  explicit TensorSource(std::string where) : where_(std::move(where)) {}
  // Every tensor of `file` under its own name, in header order.
  static TensorSource of_file(std::shared_ptr<const SafetensorsReader> file);
  // Adds every tensor of `file` under its own name (a name already here is refused).
  void add_file(std::shared_ptr<const SafetensorsReader> file);

  // Adds tensor `name` of `shape` (at least 1-D): `blocks` in order, whose rows sum to shape[0].
  // A stored block's shape must be [its rows, shape[1:]...]; the error names its file and
  // tensor. A name added twice is refused.
  void add(const std::string& name, const Shape& shape, std::vector<Block> blocks);

  const std::string& where() const { return where_; }
  const std::vector<Stacked>& tensors() const { return tensors_; }
  // The tensor `name`, or null.
  const Stacked* find(const std::string& name) const;

  // Elements [first, first + out.numel()) of `t`, row-major, into `out`: a contiguous CPU tensor
  // of any dtype (stored elements are cast to it). A range outside the tensor throws naming it.
  void read(const Stacked& t, int64_t first, const Tensor& out) const;
  // Every tensor whole, in its dtype, in order: what importing the folder whole gives.
  StateDict read_all() const;

 private:
  std::string where_;
  std::vector<Stacked> tensors_;
};

// The fill (module.h) of rank `rank`'s part of the source's tensor `name`, as `meta` splits a
// tensor of `full_shape` over `size` ranks: each local element is read from its full position
// (ShardMap). The source's tensor has the full shape, or, where meta.unpadded_size says the
// split rows are padded beyond the source's (a vocabulary padded for tensor parallelism), that
// many rows: the rows past them are zero. Errors name the source and the tensor.
ParamFill source_fill(std::shared_ptr<const TensorSource> source, const std::string& name,
                      const Shape& full_shape, const ParamMeta& meta, int rank, int size);

// Fills each piece (sharded_checkpoint.h: a range of a rank's local tensor, placed in the
// single-process tensor by its geometry) from the source's tensor of its name, cast to the
// piece's dtype; tensor-parallel padding reads as zero. A piece whose tensor the source lacks,
// or holds in another shape, is refused naming both, before anything is read. So a rank of any
// layout (its ZeRO shard of its tensor-parallel slice of its stage) reads only what it holds.
void read_pieces(const TensorSource& source, std::vector<ShardPiece>& pieces);

}  // namespace tessera::nn
