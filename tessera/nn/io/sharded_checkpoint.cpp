// Sharded checkpoints: the format's checked accessors, the geometry arithmetic, a rank's shard
// and rank 0's manifest. The reader is sharded_reader.cpp.

#include "tessera/nn/io/sharded_checkpoint.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <thread>

#include "tessera/core/empty.h"
#include "tessera/core/error.h"
#include "tessera/core/file_io.h"
#include "tessera/core/ops/movement.h"
#include "tessera/core/version.h"
#include "tessera/nn/io/detail/checkpoint_files.h"
#include "tessera/nn/io/detail/checksum.h"
#include "tessera/nn/io/detail/sharded_format.h"
#include "tessera/nn/io/safetensors.h"
#include "tessera/nn/shard_map.h"

namespace tessera::nn {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace sharded_format {

std::string shard_stem(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "shard_%05d", rank);
  return buf;
}

json dims_json(std::span<const int64_t> dims) {
  json a = json::array();
  for (int64_t d : dims) a.push_back(d);
  return a;
}

const json& field(const json& obj, const char* key, bool (json::*is)() const, const char* type,
                  const std::string& where) {
  TESSERA_CHECK(obj.is_object() && obj.contains(key) && (obj[key].*is)(), where, ": '", key,
                "' must be ", type);
  return obj[key];
}

int64_t int_field(const json& obj, const char* key, const std::string& where) {
  const json& v = field(obj, key, &json::is_number_integer, "an integer", where);
  return v.get<int64_t>();
}

std::vector<int64_t> dims_field(const json& obj, const char* key, const std::string& where) {
  const json& a = field(obj, key, &json::is_array, "an array of integers", where);
  TESSERA_CHECK(a.size() <= 8, where, ": '", key, "' has ", a.size(), " entries (at most 8)");
  std::vector<int64_t> out;
  for (const json& d : a) {
    TESSERA_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0 &&
                      d.get<int64_t>() <= (int64_t(1) << 40),
                  where, ": '", key, "' must hold integers in [0, 2^40], got ", d.dump());
    out.push_back(d.get<int64_t>());
  }
  return out;
}

Shape to_shape(const std::vector<int64_t>& dims, const std::string& where) {
  int64_t n = 1;
  for (int64_t d : dims)
    TESSERA_CHECK(!__builtin_mul_overflow(n, d, &n) && n <= (int64_t(1) << 40), where,
                  ": shape ", dims_json(dims).dump(), " has more than 2^40 elements");
  return Shape(std::span<const int64_t>(dims));
}

ShardPiece parse_piece(const json& j, const std::string& where, DType* dtype, std::string* key,
                       int64_t* length) {
  ShardPiece p;
  p.name = field(j, "name", &json::is_string, "a string", where).get<std::string>();
  const std::string at = str_cat(where, " (piece '", p.name, "')");
  *key = field(j, "key", &json::is_string, "a string", at).get<std::string>();
  p.optimizer = field(j, "optimizer", &json::is_boolean, "a boolean", at).get<bool>();
  try {
    *dtype = dtype_from_name(field(j, "dtype", &json::is_string, "a string", at).get<std::string>());
  } catch (const Error& e) {
    detail::throw_error(at, ": ", e.what());
  }
  p.full_shape = to_shape(dims_field(j, "full_shape", at), at);
  p.geometry.local_shape = to_shape(dims_field(j, "local_shape", at), at);
  p.geometry.split_dim = int(int_field(j, "split_dim", at));
  p.geometry.segments = dims_field(j, "segments", at);
  const std::vector<int64_t> tp = dims_field(j, "tp", at);
  TESSERA_CHECK(tp.size() == 2 && tp[0] < tp[1] && tp[1] <= 65536, at,
                ": 'tp' must be [rank, size] with rank < size <= 65536");
  p.geometry.tp_rank = int(tp[0]);
  p.geometry.tp_size = int(tp[1]);
  p.begin = int_field(j, "begin", at);
  *length = int_field(j, "length", at);
  return p;
}

}  // namespace sharded_format

using namespace sharded_format;

namespace {

// The safetensors key of a piece: unique within a shard (a name's pieces start apart), and
// the model's and the optimizer's names cannot collide.
std::string piece_key(const ShardPiece& p) {
  return str_cat(p.optimizer ? "optimizer/" : "model/", p.name, ":", p.begin);
}

json piece_json(const ShardPiece& p) {
  return {{"key", piece_key(p)},
          {"name", p.name},
          {"optimizer", p.optimizer},
          {"dtype", dtype_name(p.data.dtype())},
          {"full_shape", dims_json(p.full_shape.span())},
          {"local_shape", dims_json(p.geometry.local_shape.span())},
          {"split_dim", p.geometry.split_dim},
          {"segments", dims_json(p.geometry.segments)},
          {"tp", {p.geometry.tp_rank, p.geometry.tp_size}},
          {"begin", p.begin},
          {"length", p.data.numel()}};
}

void write_json_file(const fs::path& path, const json& j, const char* what) {
  std::string text;
  try {
    text = j.dump() + "\n";
  } catch (const json::type_error& e) {
    detail::throw_error(what, ": the state holds a string that is not UTF-8: ", e.what());
  }
  write_file_atomic(path.string(), text);
}

// A rank's index as write_shard leaves it (its pieces without data).
json shard_index(const ShardJob& job, const fs::path& file, uint64_t checksum) {
  json pieces = json::array();
  for (const ShardPiece& p : job.pieces) pieces.push_back(piece_json(p));
  return {{"format", kShardFormat},
          {"version", kShardedVersion},
          {"step", job.step},
          {"rank", job.rank},
          {"ranks", job.ranks},
          {"nonce", job.nonce},
          {"file", file.filename().string()},
          {"bytes", fs::file_size(file)},
          {"checksum", checksum_hex(checksum)},
          {"pieces", pieces}};
}

// Rank 0: every rank's index of this save (its nonce), waiting up to timeout seconds.
std::vector<json> collect_indices(const ShardJob& job, const fs::path& dir) {
  std::vector<json> indices(size_t(job.ranks));
  std::vector<bool> have(size_t(job.ranks), false);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration<double>(std::max(job.publish_timeout, 0.0));
  for (;;) {
    int missing = 0, first_missing = -1;
    for (int r = 0; r < job.ranks; ++r) {
      if (have[size_t(r)]) continue;
      const fs::path path = dir / (shard_stem(r) + ".json");
      std::error_code ec;
      if (fs::exists(path, ec)) {
        json j = read_json_file(path.string());
        if (j.is_object() && j.value("nonce", json()) == job.nonce) {
          indices[size_t(r)] = std::move(j);
          have[size_t(r)] = true;
          continue;
        }
      }
      if (first_missing < 0) first_missing = r;
      ++missing;
    }
    if (missing == 0) return indices;
    TESSERA_CHECK(std::chrono::steady_clock::now() < deadline, "sharded save of step ", job.step,
                  ": ", missing, " of ", job.ranks, " ranks' shards (first: rank ", first_missing,
                  ", ", (dir / (shard_stem(first_missing) + ".json")).string(),
                  ") did not appear within ", job.publish_timeout, " s");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

std::vector<PieceRun> piece_runs(const ShardGeometry& g, const Shape& full, int64_t begin,
                                 int64_t length, const std::string& what) {
  const Shape& local = g.local_shape;
  const int64_t local_numel = local.numel();
  TESSERA_CHECK(begin >= 0 && length >= 0 && begin <= local_numel - length, what, ": piece [",
                begin, ", ", begin + length, ") lies outside its local tensor ",
                local.to_string(), " (", local_numel, " elements)");
  std::vector<PieceRun> runs;
  if (length == 0) return runs;
  if (g.split_dim < 0) {
    TESSERA_CHECK(g.split_dim == -1 && local == full, what, ": an unsplit local tensor ",
                  local.to_string(), " must have the full shape ", full.to_string());
    runs.push_back({begin, 0, length});
    return runs;
  }
  const int d = g.split_dim, t = g.tp_size;
  TESSERA_CHECK(d < local.size() && local.size() == full.size(), what, ": split dim ", d,
                " does not fit local ", local.to_string(), " and full ", full.to_string());
  for (int i = 0; i < local.size(); ++i)
    TESSERA_CHECK(i == d || local[i] == full[i], what, ": local ", local.to_string(), " and full ",
                  full.to_string(), " differ outside the split dim ", d);
  TESSERA_CHECK(t >= 1 && g.tp_rank >= 0 && g.tp_rank < t, what, ": tp rank ", g.tp_rank,
                " of ", t);
  std::vector<int64_t> segments = g.segments;
  if (segments.empty()) segments = {local[d] * t};
  int64_t local_length = 0, padded = 0;
  for (int64_t s : segments) {
    TESSERA_CHECK(s > 0 && s % t == 0, what, ": segment ", s, " does not split over ", t,
                  " tp ranks");
    local_length += s / t;
    padded += s;
  }
  TESSERA_CHECK(local_length == local[d] && padded >= full[d], what, ": segments ",
                dims_json(segments).dump(), " over ", t, " ranks give ", local_length,
                " of local dim ", local[d], " and ", padded, " >= full ", full[d]);
  ShardMap(full, d, segments, g.tp_rank, t, what)
      .for_each_run(begin, begin + length, [&](int64_t at, int64_t full_at, int64_t n) {
        const PieceRun run{full_at, at - begin, n};
        if (!runs.empty() && runs.back().full_offset + runs.back().length == run.full_offset &&
            runs.back().piece_offset + runs.back().length == run.piece_offset)
          runs.back().length += run.length;
        else
          runs.push_back(run);
      });
  return runs;
}

std::vector<ShardPiece> replicated_pieces(const StateDict& tensors, bool optimizer, int rank,
                                          int ranks) {
  TESSERA_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "replicated_pieces: rank ", rank,
                " of ", ranks);
  std::vector<ShardPiece> out;
  for (const auto& [name, t] : tensors) {
    const int64_t n = t.numel();
    const int64_t lo = n * rank / ranks, hi = n * (rank + 1) / ranks;
    // Every rank lists every tensor, an empty piece where its share is empty, so that the
    // reassembled state keeps the tensors' order and an empty tensor is not lost.
    ShardPiece p;
    p.name = name;
    p.optimizer = optimizer;
    p.full_shape = t.shape();
    p.geometry.local_shape = t.shape();
    p.begin = lo;
    p.data = ops::narrow(ops::reshape(t, Shape{n}), 0, lo, hi - lo);
    out.push_back(std::move(p));
  }
  return out;
}

std::string checkpoint_nonce(uint64_t value) { return checksum_hex(value); }

void begin_sharded_save(const std::string& run_dir, int64_t step) {
  const fs::path dir = fs::path(checkpoint_path(run_dir, step));
  std::error_code ec;
  if (!fs::exists(dir / kShardedManifestFile, ec)) return;
  fs::remove(dir / kShardedManifestFile, ec);
  TESSERA_CHECK(!ec, "sharded save of step ", step, ": cannot remove the old ",
                (dir / kShardedManifestFile).string(), ": ", ec.message());
  fsync_directory_tree(dir.string());
}

std::string write_shard(const ShardJob& job) {
  TESSERA_CHECK(job.ranks >= 1 && job.rank >= 0 && job.rank < job.ranks, "write_shard: rank ",
                job.rank, " of ", job.ranks);
  TESSERA_CHECK(!job.nonce.empty(), "write_shard: the save needs a nonce");
  const fs::path dir = fs::path(checkpoint_path(job.run_dir, job.step));
  std::error_code ec;
  fs::create_directories(dir, ec);
  TESSERA_CHECK(!ec, "sharded save of step ", job.step, ": cannot create ", dir.string(), ": ",
                ec.message());
  StateDict tensors;
  tensors.reserve(job.pieces.size());
  for (const ShardPiece& p : job.pieces) {
    TESSERA_CHECK(p.data.defined() && p.data.dim() == 1, "write_shard: piece '", p.name,
                  "' must be a 1-D tensor");
    tensors.emplace_back(piece_key(p), p.data);
  }
  const fs::path file = dir / (shard_stem(job.rank) + ".safetensors");
  uint64_t sum = 0;
  write_safetensors(file.string(), tensors, {}, job.on_data_written, &sum, job.chunked.get());
  tensors.clear();
  if (job.rank == 0) pause_for_fault_test();  // rank 0 alone, as when it alone wrote
  write_json_file(dir / (shard_stem(job.rank) + ".json"), shard_index(job, file, sum),
                  "write_shard");
  if (job.rank != 0) return dir.string();

  TESSERA_CHECK(job.state.is_object() || job.state.is_null(),
                "write_shard: state must be a JSON object, got ", job.state.type_name());
  check_finite(job.state, "state");
  json manifest = {{"format", kManifestFormat},
                   {"version", kShardedVersion},
                   {"step", job.step},
                   {"ranks", job.ranks},
                   {"nonce", job.nonce},
                   {"shards", collect_indices(job, dir)},
                   {"state", job.state.is_null() ? json::object() : job.state}};
  write_json_file(dir / kShardedManifestFile, manifest, "write_shard");
  publish_latest(job.run_dir, job.step, job.keep);
  return dir.string();
}

bool is_sharded_checkpoint(const std::string& dir_string) {
  const fs::path dir(dir_string);
  std::error_code ec;
  if (fs::exists(dir / kShardedManifestFile, ec)) return true;
  if (!fs::is_directory(dir, ec)) return false;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.path().filename().string().starts_with("shard_")) return true;
  return false;
}

bool is_incomplete_checkpoint(const std::string& dir) {
  std::error_code ec;
  return is_sharded_checkpoint(dir) &&
         !fs::exists(fs::path(dir) / kShardedManifestFile, ec);
}

std::string save_sharded_checkpoint(const std::string& run_dir, const CheckpointData& data,
                                    int ranks, int64_t keep,
                                    const std::function<void(int, int)>& progress) {
  TESSERA_CHECK(ranks >= 1 && ranks <= 65536, "save_sharded_checkpoint: ranks must be in [1, ",
                "65536], got ", ranks);
  begin_sharded_save(run_dir, data.step);
  std::random_device rd;
  const std::string nonce = checkpoint_nonce((uint64_t(rd()) << 32) ^ rd());
  // Rank 0 last: it publishes once every other shard is there.
  for (int r = ranks - 1; r >= 0; --r) {
    ShardJob job;
    job.run_dir = run_dir;
    job.step = data.step;
    job.rank = r;
    job.ranks = ranks;
    job.nonce = nonce;
    job.pieces = replicated_pieces(data.model, false, r, ranks);
    for (ShardPiece& p : replicated_pieces(data.optimizer, true, r, ranks))
      job.pieces.push_back(std::move(p));
    if (r == 0) {
      job.state = data.state;
      job.keep = keep;
      job.publish_timeout = 0;
    }
    write_shard(job);
    if (progress) progress(ranks - r, ranks);
  }
  return checkpoint_path(run_dir, data.step);
}

}  // namespace tessera::nn
