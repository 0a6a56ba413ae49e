#pragma once
// Sharded checkpoints: every rank writes only the part of the state it owns, and no rank
// gathers the model. One directory per step, beside the single-process ones (checkpoint.h):
//
//   <run_dir>/checkpoints/step_00000042/
//       shard_00000.safetensors   rank 0's pieces, one 1-D tensor each
//       shard_00000.json          rank 0's index: its pieces and its file's size and checksum
//       ...                       one pair per rank
//       manifest.json             written last, by rank 0: every rank's index, the caller's
//                                 state and the tensor lists; its presence makes the set
//                                 complete
//
// A piece is a contiguous run [begin, begin + length) of one rank's local tensor, flattened,
// described by where that local tensor sits in the single-process tensor (ShardGeometry: its
// tensor-parallel split, segments and padding). From the geometry alone the loader maps every
// element to its place in the single-process tensor, so a set written under any layout loads
// under any other: a rank resuming lists the pieces it holds under its own layout, and
// read_pieces() fills them from whichever shards hold those elements (no rank reassembles the
// single-process state); load_checkpoint() reassembles it for the tools that want it. Every
// element of every tensor must be covered exactly once, or the set is refused naming the
// tensor.
//
// A save: each rank writes its safetensors file and then its index, each atomically; rank 0
// then waits (on the file system, never on a collective) for every rank's index carrying the
// save's nonce, writes the manifest, and points `latest` at the set. A set without a manifest
// is incomplete, and resume passes it over (load_newest_good_checkpoint).

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/core/shape.h"
#include "tessera/core/tensor.h"
#include "tessera/nn/io/checkpoint.h"
#include "tessera/nn/io/safetensors.h"

namespace tessera::nn {

constexpr const char* kShardedManifestFile = "manifest.json";

// Where a rank's local tensor sits in the single-process tensor.
struct ShardGeometry {
  Shape local_shape;
  // -1: the local tensor is the whole tensor. Otherwise the dim split over tp ranks: it is
  // `segments` one after another (their sum is the padded length), each split evenly, rank
  // tp_rank holding part tp_rank of each (nn::ParamMeta's convention). Elements past the
  // single-process length of the dim are tensor-parallel padding and belong to no tensor.
  int split_dim = -1;
  std::vector<int64_t> segments;
  int tp_rank = 0;
  int tp_size = 1;
};

// One piece of a single-process tensor.
struct ShardPiece {
  std::string name;  // the single-process name: "h.0.mlp.c_fc.weight", "h.0.ln_1.bias.exp_avg"
  bool optimizer = false;  // an optimizer tensor (else the model's)
  Shape full_shape;        // the single-process shape
  ShardGeometry geometry;
  int64_t begin = 0;  // in the local tensor, flattened
  Tensor data;        // [length]: the elements [begin, begin + length) of the local tensor
};

// A contiguous run shared by a piece and its single-process tensor.
struct PieceRun {
  int64_t full_offset = 0;   // in the single-process tensor, flattened
  int64_t piece_offset = 0;  // in the piece
  int64_t length = 0;
};

// The runs of piece [begin, begin + length) of a local tensor with this geometry, in piece
// order; padding elements are in none. Throws naming `what` if the geometry does not fit
// full_shape (a split dim out of range, segments not dividing by tp_size, a local length that
// disagrees with the segments, a range outside the local tensor).
std::vector<PieceRun> piece_runs(const ShardGeometry& geometry, const Shape& full_shape,
                                 int64_t begin, int64_t length, const std::string& what);

// Splits every tensor of a replicated state (each rank holds all of it) evenly among `ranks`
// by flat range, and returns rank's pieces (one per tensor, empty where its share is): how
// replicas write each byte once.
std::vector<ShardPiece> replicated_pieces(const StateDict& tensors, bool optimizer, int rank,
                                          int ranks);

// What one rank contributes to a set.
struct ShardJob {
  std::string run_dir;
  int64_t step = 0;
  int rank = 0;
  int ranks = 1;
  std::string nonce;  // the same on every rank of one save, new for each save
  std::vector<ShardPiece> pieces;
  nlohmann::json state;  // rank 0: the caller's state (as CheckpointData::state)
  int64_t keep = 0;      // rank 0: as save_checkpoint's
  double publish_timeout = 3600;  // rank 0: how long to wait for the other ranks' indices
  // Called once the pieces' bytes are in the shard file (before its fsync): a writer that
  // streams from live state lets the training loop change it from then on.
  std::function<void()> on_data_written;
  // How pieces on a device are read, chunk by chunk (write_safetensors's); null: copied whole.
  std::shared_ptr<const ChunkedReads> chunked;
};

// A save's nonce as the files carry it (16 hex digits).
std::string checkpoint_nonce(uint64_t value);

// Rank 0, before the ranks of a save start writing: removes a manifest left in the step's
// directory by an earlier save of the same step, so that set reads as incomplete until this
// save publishes it again.
void begin_sharded_save(const std::string& run_dir, int64_t step);

// Writes job.rank's shard and index (atomically, fsynced); rank 0 then waits for every rank's
// index with job.nonce, writes the manifest, points `latest` at the set and drops old sets as
// save_checkpoint does. Returns the set's directory. No collective.
std::string write_shard(const ShardJob& job);

// Whether dir holds a sharded set (a manifest, or shard files without one); and whether it is
// one without a manifest, whose save never finished.
bool is_sharded_checkpoint(const std::string& dir);
bool is_incomplete_checkpoint(const std::string& dir);

// A validated set, its tensors' bytes left on disk: where every stored run of every
// single-process tensor lies in which shard file. open_sharded_checkpoint() builds it;
// read_pieces() then reads any part of any tensor, so a rank resuming under any layout reads
// only what it holds (no rank reassembles the single-process state).
struct ShardedSet {
  // A piece as one shard stores it: the elements [begin, begin + length) of that shard's local
  // tensor (geometry), contiguous in its file from file_offset. The runs it maps to in the
  // single-process tensor (piece_runs) are not kept: a tensor-parallel slice split along its
  // columns has one per row, 65,536 for a 70B Llama's o_proj at tp8, so an index of runs grew
  // with the set's rows on every rank; the pieces grow only with its shards.
  struct StoredPiece {
    int shard = 0;
    uint64_t file_offset = 0;
    ShardGeometry geometry;
    int64_t begin = 0, length = 0;
  };
  // One single-process tensor: the pieces that tile it exactly (checked when the set opens).
  struct StoredTensor {
    std::string name;
    bool optimizer = false;
    Shape full_shape;
    DType dtype = DType::f32;
    std::vector<StoredPiece> pieces;
  };
  std::string dir;
  int64_t step = 0;
  nlohmann::json state;                  // the caller's (as CheckpointData::state)
  std::vector<std::string> shard_files;  // by rank
  std::vector<StoredTensor> tensors;     // in the order the shards list them
};

// Reads and validates a set without reading its tensors into memory: the manifest, every
// shard's index, size and checksum (streamed), and that the pieces tile every tensor. A
// missing manifest, a shard whose size or checksum disagrees, a piece outside its tensor, an
// element covered twice or never: an error naming the file and the tensor. Only the shards
// `share` covers are checksummed (checkpoint.h).
ShardedSet open_sharded_checkpoint(const std::string& dir, ChecksumShare share = {});

// Fills each wanted piece (name, optimizer, full_shape, geometry and begin as a writer gives
// them; data a contiguous CPU tensor of the stored dtype, [length]) from the set, whatever
// layout wrote it. Elements that are tensor-parallel padding are set to zero. A tensor the set
// lacks, or holds with another shape or dtype, is an error naming it.
void read_pieces(const ShardedSet& set, std::vector<ShardPiece>& wanted);
// read_pieces()'s checks alone (what is wanted exists in the set with that shape and dtype;
// the pieces may be on any device), to refuse a set before anything is changed.
void check_pieces(const ShardedSet& set, const std::vector<ShardPiece>& wanted);

// Every tensor of an opened set read whole: the single-process CheckpointData (with
// CheckpointParts::model, the model's tensors alone; the optimizer's are not read).
CheckpointData read_sharded_checkpoint(const ShardedSet& set,
                                       CheckpointParts parts = CheckpointParts::all);
// open_sharded_checkpoint() then read_sharded_checkpoint() (load_checkpoint() calls it for
// such a directory).
CheckpointData load_sharded_checkpoint(const std::string& dir);

// Writes `data` as a sharded set of `ranks` shards (each tensor split by flat range), as the
// ranks of a replicated run would: tessera ckpt convert's single-process -> sharded direction.
// `progress`, when given, is called after each shard with the shards written so far.
std::string save_sharded_checkpoint(const std::string& run_dir, const CheckpointData& data,
                                    int ranks, int64_t keep = 0,
                                    const std::function<void(int written, int ranks)>& progress = {});

}  // namespace tessera::nn
