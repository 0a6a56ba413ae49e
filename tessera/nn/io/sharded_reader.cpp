// The sharded checkpoint's reader. open_sharded_checkpoint() validates a whole set (manifest,
// indices, sizes, the streamed checksums of the shards its ChecksumShare covers, the tiling of
// every tensor) and keeps only an index of pieces: (tensor, shard, geometry, range) -> (shard
// file, byte offset). read_pieces() maps a tensor's pieces to its runs (full offset, length ->
// file offset), one tensor at a time, and reads exactly the bytes a caller's pieces need with
// pread, straight into their memory, so a rank resuming under any layout holds its own state
// and the index, never the single-process state.
//
// Every field of a manifest is untrusted (a set may be truncated, mixed with another run's
// files, or hostile), and is checked before it is used. The index holds one record per piece,
// whatever the geometry; the runs, one per row of a tensor-parallel slice split along its
// columns, live only while their tensor is checked or read.

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>

#include "tessera/core/empty.h"
#include "tessera/core/error.h"
#include "tessera/core/ops/movement.h"
#include "tessera/core/version.h"
#include "tessera/nn/io/detail/checkpoint_files.h"
#include "tessera/nn/io/detail/checksum.h"
#include "tessera/nn/io/detail/posix_file.h"
#include "tessera/nn/io/detail/sharded_format.h"
#include "tessera/nn/io/safetensors.h"
#include "tessera/nn/io/sharded_checkpoint.h"

namespace tessera::nn {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace sharded_format;

namespace {

using TensorId = std::pair<bool, std::string>;  // (optimizer, name)

// The manifest's own fields, checked.
json read_manifest(const fs::path& dir, ShardedSet* set) {
  const fs::path mp = dir / kShardedManifestFile;
  const std::string where = mp.string();
  TESSERA_CHECK(fs::is_regular_file(mp), "sharded checkpoint ", dir.string(), ": no ",
                kShardedManifestFile, " (its save did not finish)");
  json m = read_json_file(mp.string());
  TESSERA_CHECK(m.is_object(), where, ": expected a JSON object, got ", m.type_name());
  TESSERA_CHECK(m.value("format", json()) == kManifestFormat, where, ": 'format' is ",
                m.value("format", json()).dump(), ", expected \"", kManifestFormat, "\"");
  const json version = m.value("version", json());
  check_format_version(
      where + " 'version'", kManifestFormat,
      version.is_number_integer() ? std::optional(version.get<int64_t>()) : std::nullopt,
      version.dump(), kShardedVersion);
  set->step = int_field(m, "step", where);
  TESSERA_CHECK(set->step >= 0, where, ": 'step' must be non-negative, got ", set->step);
  if (auto named = parse_checkpoint_name(dir.filename().string()))
    TESSERA_CHECK(*named == set->step, where, ": 'step' is ", set->step, " but the directory is ",
                  dir.filename().string());
  const int64_t ranks = int_field(m, "ranks", where);
  const json& shards = field(m, "shards", &json::is_array, "an array", where);
  TESSERA_CHECK(ranks >= 1 && int64_t(shards.size()) == ranks, where, ": 'ranks' is ", ranks,
                " but 'shards' lists ", shards.size());
  set->state = field(m, "state", &json::is_object, "an object", where);
  return m;
}

// What the pieces claim per tensor, bounded by the shards' real sizes, so that no tensor is
// described that its pieces could not fill (a hostile full_shape).
std::map<TensorId, int64_t> claimed_elements(const fs::path& dir, const json& shards,
                                             const std::string& where) {
  std::map<TensorId, int64_t> claimed;
  for (size_t r = 0; r < shards.size(); ++r) {
    const std::string sw = str_cat(where, " shard ", r);
    const fs::path path = dir / (shard_stem(int(r)) + ".safetensors");
    TESSERA_CHECK(fs::is_regular_file(path), path.string(), ": missing (listed in ", where, ")");
    const uint64_t size = fs::file_size(path);
    uint64_t bytes = 0;
    for (const json& pj : field(shards[r], "pieces", &json::is_array, "an array", sw)) {
      const int64_t length = int_field(pj, "length", sw);
      TESSERA_CHECK(length >= 0 && uint64_t(length) <= size, sw, ": a piece's 'length' ", length,
                    " exceeds its file's ", size, " bytes");
      bytes += uint64_t(length);
      TESSERA_CHECK(bytes <= size, sw, ": its pieces hold more elements than its file has bytes");
      claimed[{field(pj, "optimizer", &json::is_boolean, "a boolean", sw).get<bool>(),
               field(pj, "name", &json::is_string, "a string", sw).get<std::string>()}] += length;
    }
  }
  return claimed;
}

// A run of a single-process tensor stored contiguously in one shard file.
struct StoredRun {
  int64_t full_offset = 0;  // in the single-process tensor, flattened
  int64_t length = 0;
  int shard = 0;
  uint64_t file_offset = 0;  // of the run's first byte in shard `shard`'s file
};

// A tensor's runs from its pieces, sorted by full_offset. piece_runs checks each piece's
// geometry against the tensor: the tiling check at open is the first call, so a hostile
// geometry is refused there, naming the shard file, the piece and the tensor.
std::vector<StoredRun> stored_runs(const ShardedSet& set, const ShardedSet::StoredTensor& t) {
  std::vector<StoredRun> runs;
  const size_t es = dtype_size(t.dtype);
  for (const ShardedSet::StoredPiece& p : t.pieces)
    for (const PieceRun& run :
         piece_runs(p.geometry, t.full_shape, p.begin, p.length,
                    str_cat(set.shard_files[size_t(p.shard)], ": the piece at ", p.begin, " of '",
                            t.name, "'")))
      runs.push_back(
          {run.full_offset, run.length, p.shard, p.file_offset + uint64_t(run.piece_offset) * es});
  std::sort(runs.begin(), runs.end(),
            [](const auto& a, const auto& b) { return a.full_offset < b.full_offset; });
  return runs;
}

// The tiling check: sorted, every element once. Names both files of an overlap.
void check_tiling(const ShardedSet& set, const ShardedSet::StoredTensor& t,
                  const std::vector<StoredRun>& runs, const std::string& where) {
  int64_t covered = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    const StoredRun& run = runs[i];
    if (i > 0) {
      const StoredRun& prev = runs[i - 1];
      TESSERA_CHECK(prev.full_offset + prev.length <= run.full_offset,
                    set.shard_files[size_t(run.shard)], ": element ", run.full_offset, " of '",
                    t.name, "' is covered twice (also by ", set.shard_files[size_t(prev.shard)],
                    ")");
    }
    covered += run.length;
  }
  TESSERA_CHECK(covered == t.full_shape.numel(), where, ": ", t.optimizer ? "optimizer" : "model",
                " tensor '", t.name, "' ", dtype_name(t.dtype), t.full_shape.to_string(), " has ",
                covered, " of ", t.full_shape.numel(),
                " elements in the shards (a shard is missing or from another layout)");
}

}  // namespace

ShardedSet open_sharded_checkpoint(const std::string& dir_string, ChecksumShare share) {
  const fs::path dir(dir_string);
  const std::string where = (dir / kShardedManifestFile).string();
  ShardedSet set;
  set.dir = dir_string;
  const json m = read_manifest(dir, &set);
  const json& shards = m["shards"];
  const json nonce = m.value("nonce", json());
  const std::map<TensorId, int64_t> claimed = claimed_elements(dir, shards, where);

  std::map<TensorId, size_t> index;
  for (size_t r = 0; r < shards.size(); ++r) {
    const json& s = shards[r];
    const std::string sw = str_cat(where, " shard ", r);
    TESSERA_CHECK(s.is_object() && int_field(s, "rank", sw) == int64_t(r) &&
                      s.value("nonce", json()) == nonce && s.value("step", json()) == set.step,
                  sw, ": its rank, step or nonce disagrees with the manifest");
    const std::string file = field(s, "file", &json::is_string, "a string", sw).get<std::string>();
    TESSERA_CHECK(file == shard_stem(int(r)) + ".safetensors", sw, ": 'file' is '", file,
                  "', expected ", shard_stem(int(r)), ".safetensors");
    const fs::path path = dir / file;
    const std::string fw = path.string();
    TESSERA_CHECK(fs::is_regular_file(path), fw, ": missing (listed in ", where, ")");
    const json& bytes = field(s, "bytes", &json::is_number_unsigned, "an integer", sw);
    TESSERA_CHECK(fs::file_size(path) == bytes.get<uint64_t>(), fw, ": ", fs::file_size(path),
                  " bytes, but ", where, " records ", bytes.get<uint64_t>(),
                  " (truncated or replaced)");
    const std::string want =
        field(s, "checksum", &json::is_string, "a string", sw).get<std::string>();
    if (share.covers(r)) {
      const std::string sum = checksum_hex(file_checksum(fw));
      TESSERA_CHECK(sum == want, fw, ": checksum ", sum, " does not match ", want, " recorded in ",
                    where, " (the file is corrupt or from another checkpoint)");
    }
    set.shard_files.push_back(fw);

    const SafetensorsHeader header = read_safetensors_header(fw);
    std::map<std::string, const SafetensorsEntry*> by_key;
    for (const SafetensorsEntry& e : header.entries) by_key[e.name] = &e;
    const json& pieces = field(s, "pieces", &json::is_array, "an array", sw);
    TESSERA_CHECK(pieces.size() == header.entries.size(), fw, ": holds ", header.entries.size(),
                  " tensors but ", where, " lists ", pieces.size(), " pieces");
    for (const json& pj : pieces) {
      DType dtype = DType::f32;
      std::string key;
      int64_t length = 0;
      const ShardPiece p = parse_piece(pj, sw, &dtype, &key, &length);
      const std::string pw = str_cat(fw, ": piece '", key, "' of '", p.name, "'");
      auto it = by_key.find(key);
      TESSERA_CHECK(it != by_key.end(), pw, " is missing from the file");
      const SafetensorsEntry& entry = *it->second;
      TESSERA_CHECK(entry.dtype == dtype && entry.shape == Shape{length}, pw, " is ",
                    dtype_name(entry.dtype), entry.shape.to_string(), ", but ", where, " records ",
                    dtype_name(dtype), "[", length, "]");
      const TensorId id{p.optimizer, p.name};
      TESSERA_CHECK(p.full_shape.numel() <= claimed.at(id), pw, ": full shape ",
                    p.full_shape.to_string(), " has more elements than all its pieces (",
                    claimed.at(id), ")");
      auto [at, fresh] = index.try_emplace(id, set.tensors.size());
      if (fresh) set.tensors.push_back({p.name, p.optimizer, p.full_shape, dtype, {}});
      ShardedSet::StoredTensor& t = set.tensors[at->second];
      TESSERA_CHECK(t.full_shape == p.full_shape && t.dtype == dtype, pw, " is part of ",
                    dtype_name(dtype), p.full_shape.to_string(), ", but an earlier piece says ",
                    dtype_name(t.dtype), t.full_shape.to_string());
      t.pieces.push_back({int(r), header.data_start + entry.begin, p.geometry, p.begin, length});
    }
  }
  for (const ShardedSet::StoredTensor& t : set.tensors)
    check_tiling(set, t, stored_runs(set, t), where);
  return set;
}

namespace {

using TensorIndex = std::map<TensorId, const ShardedSet::StoredTensor*>;

TensorIndex index_of(const ShardedSet& set) {
  TensorIndex index;
  for (const ShardedSet::StoredTensor& t : set.tensors) index[{t.optimizer, t.name}] = &t;
  return index;
}

std::string piece_what(const ShardedSet& set, const ShardPiece& w) {
  return str_cat("sharded checkpoint ", set.dir, ": ", w.optimizer ? "optimizer" : "model",
                 " tensor '", w.name, "'");
}

// The stored tensor a wanted piece reads, checked.
const ShardedSet::StoredTensor& stored_for(const ShardedSet& set, const TensorIndex& index,
                                           const ShardPiece& w, bool on_host) {
  const std::string what = piece_what(set, w);
  auto it = index.find({w.optimizer, w.name});
  TESSERA_CHECK(it != index.end(), what, " is not in the set");
  const ShardedSet::StoredTensor& t = *it->second;
  TESSERA_CHECK(t.full_shape == w.full_shape, what, " is ", dtype_name(t.dtype),
                t.full_shape.to_string(), " in the set, but ", w.full_shape.to_string(),
                " is wanted");
  TESSERA_CHECK(w.data.defined() && (w.data.device().is_cpu() || !on_host) && w.data.dim() == 1 &&
                    w.data.is_contiguous() && w.data.dtype() == t.dtype,
                what, ": the piece to fill must be a contiguous 1-D", on_host ? " CPU " : " ",
                dtype_name(t.dtype), " tensor, got ",
                w.data.defined() ? w.data.describe() : "undefined");
  piece_runs(w.geometry, w.full_shape, w.begin, w.data.numel(), what);  // checks the geometry
  return t;
}

}  // namespace

void check_pieces(const ShardedSet& set, const std::vector<ShardPiece>& wanted) {
  const TensorIndex index = index_of(set);
  for (const ShardPiece& w : wanted) stored_for(set, index, w, /*on_host=*/false);
}

void read_pieces(const ShardedSet& set, std::vector<ShardPiece>& wanted) {
  const TensorIndex index = index_of(set);
  // The wanted pieces by stored tensor (checked first), so that each tensor's runs are built
  // once and held only while its pieces are read.
  std::map<const ShardedSet::StoredTensor*, std::vector<ShardPiece*>> by_tensor;
  for (ShardPiece& w : wanted)
    by_tensor[&stored_for(set, index, w, /*on_host=*/true)].push_back(&w);
  std::vector<std::unique_ptr<PosixFile>> files(set.shard_files.size());
  for (const auto& [stored, pieces] : by_tensor) {
    const ShardedSet::StoredTensor& t = *stored;
    const std::vector<StoredRun> tensor_runs = stored_runs(set, t);
    for (ShardPiece* wp : pieces) {
      ShardPiece& w = *wp;
      const int64_t length = w.data.numel();
      const std::vector<PieceRun> runs =
          piece_runs(w.geometry, w.full_shape, w.begin, length, piece_what(set, w));
      const size_t es = dtype_size(t.dtype);
      char* out = static_cast<char*>(w.data.data_ptr());
      int64_t filled = 0;
      for (const PieceRun& run : runs) filled += run.length;
      if (filled < length) std::memset(out, 0, size_t(length) * es);  // tensor-parallel padding
      for (const PieceRun& run : runs) {
        const int64_t end = run.full_offset + run.length;
        // The stored runs tile the tensor in order, so their ends are sorted too.
        auto s = std::upper_bound(
            tensor_runs.begin(), tensor_runs.end(), run.full_offset,
            [](int64_t at, const StoredRun& r) { return at < r.full_offset + r.length; });
        int64_t copied = 0;
        for (; s != tensor_runs.end() && s->full_offset < end; ++s) {
          const int64_t lo = std::max(run.full_offset, s->full_offset);
          const int64_t hi = std::min(end, s->full_offset + s->length);
          std::unique_ptr<PosixFile>& f = files[size_t(s->shard)];
          if (!f) f = std::make_unique<PosixFile>(set.shard_files[size_t(s->shard)]);
          f->read_at(s->file_offset + uint64_t(lo - s->full_offset) * es,
                     out + size_t(run.piece_offset + lo - run.full_offset) * es,
                     uint64_t(hi - lo) * es);
          copied += hi - lo;
        }
        TESSERA_CHECK(copied == run.length, piece_what(set, w), ": elements [", run.full_offset,
                      ", ", end, ") are not all in the set");
      }
    }
  }
}

CheckpointData read_sharded_checkpoint(const ShardedSet& set, CheckpointParts parts) {
  std::vector<ShardPiece> whole;
  for (const ShardedSet::StoredTensor& t : set.tensors) {
    if (t.optimizer && parts == CheckpointParts::model) continue;
    ShardPiece p;
    p.name = t.name;
    p.optimizer = t.optimizer;
    p.full_shape = t.full_shape;
    p.geometry.local_shape = t.full_shape;
    p.data = empty(Shape{t.full_shape.numel()}, t.dtype);
    whole.push_back(std::move(p));
  }
  read_pieces(set, whole);
  CheckpointData data;
  data.step = set.step;
  data.state = set.state;
  for (ShardPiece& p : whole)
    (p.optimizer ? data.optimizer : data.model)
        .emplace_back(p.name, ops::reshape(p.data, p.full_shape));
  return data;
}

CheckpointData load_sharded_checkpoint(const std::string& dir) {
  return read_sharded_checkpoint(open_sharded_checkpoint(dir));
}

}  // namespace tessera::nn
