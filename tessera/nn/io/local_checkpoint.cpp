// Node-local checkpoints: one rank's own tensors and a meta.json that completes the set.

#include "tessera/nn/io/local_checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/core/file_io.h"
#include "tessera/nn/io/checkpoint.h"
#include "tessera/nn/io/detail/checkpoint_files.h"
#include "tessera/nn/io/detail/checksum.h"
#include "tessera/nn/io/safetensors.h"

namespace tessera::nn {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kFormat = "tessera-local-checkpoint";
constexpr const char* kTensors = "state.safetensors";
constexpr const char* kMeta = "meta.json";

// The rank's set directories, newest first.
std::vector<std::pair<int64_t, fs::path>> local_sets(const fs::path& rank_dir) {
  std::vector<std::pair<int64_t, fs::path>> sets;
  std::error_code ec;
  if (!fs::is_directory(rank_dir, ec)) return sets;
  for (const auto& entry : fs::directory_iterator(rank_dir, ec))
    if (auto step = parse_checkpoint_name(entry.path().filename().string()))
      sets.emplace_back(*step, entry.path());
  std::sort(sets.begin(), sets.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return sets;
}

// Validates a set; reads its tensors too when asked.
LocalCheckpoint read_set(const fs::path& dir, int64_t step, const json& fingerprint,
                         bool tensors) {
  const fs::path mp = dir / kMeta;
  TESSERA_CHECK(fs::is_regular_file(mp), dir.string(), ": no ", kMeta, " (its save did not finish)");
  json meta = read_json_file(mp.string());
  TESSERA_CHECK(meta.is_object() && meta.value("format", json()) == kFormat &&
                    meta.value("step", json()) == step && meta.value("state", json()).is_object(),
                mp.string(), ": not a local checkpoint of step ", step);
  const json& written = meta.value("fingerprint", json());
  if (written != fingerprint) {
    // Name what differs; the layout by its one-line description.
    std::string differs;
    for (const auto& item : fingerprint.items()) {
      const std::string key = item.key();
      const json& value = item.value();
      const json theirs = written.is_object() ? written.value(key, json()) : json();
      if (theirs == value) continue;
      auto shown = [&](const json& v) {
        if (key == "layout" && v.is_object()) return v.value("layout", json()).dump();
        return v.is_array() || v.is_object() ? std::string("another list") : v.dump();
      };
      differs += str_cat(differs.empty() ? "" : ", ",
                         key == "tensors" ? std::string("the tensor list")
                                          : str_cat(key, " ", shown(theirs), " (now ", shown(value), ")"));
    }
    detail::throw_error(mp.string(), ": written by another rank, layout or host: ", differs);
  }
  const fs::path tp = dir / kTensors;
  TESSERA_CHECK(fs::is_regular_file(tp) && meta.value("bytes", json()) == fs::file_size(tp), tp.string(),
                ": missing, or not the size ", mp.string(), " records (truncated?)");
  const std::string sum = checksum_hex(file_checksum(tp.string()));
  TESSERA_CHECK(meta.value("checksum", json()) == sum, tp.string(), ": checksum ", sum,
                " does not match ", mp.string(), " (the file is corrupt)");
  return {step, tensors ? read_safetensors(tp.string()).tensors : StateDict(),
          std::move(meta["state"]), dir.string()};
}

}  // namespace

std::string local_rank_dir(const std::string& local_dir, int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank_%05d", rank);
  return (fs::path(local_dir) / buf).string();
}

std::string save_local_checkpoint(const std::string& rank_dir, int64_t step,
                                  const StateDict& tensors, const json& fingerprint,
                                  const json& state, const std::function<void()>& on_data_written,
                                  const ChunkedReads* chunked) {
  // The reader takes an object only (a null is written as {}, as save_checkpoint does).
  TESSERA_CHECK(state.is_object() || state.is_null(), "local checkpoint: state must be a JSON ",
                "object, got ", state.type_name(), " (step ", step, ", ", rank_dir, ")");
  check_finite(state, "state");
  const fs::path dir = fs::path(rank_dir) / checkpoint_name(step);
  std::error_code ec;
  fs::remove(dir / kMeta, ec);  // an older set of this step reads as incomplete until done
  fs::create_directories(dir, ec);
  TESSERA_CHECK(!ec, "local checkpoint: cannot create ", dir.string(), ": ", ec.message());
  const fs::path tp = dir / kTensors;
  uint64_t sum = 0;
  write_safetensors(tp.string(), tensors, {}, on_data_written, &sum, chunked);
  const json meta = {{"format", kFormat},
                     {"version", 1},
                     {"step", step},
                     {"fingerprint", fingerprint},
                     {"bytes", fs::file_size(tp)},
                     {"checksum", checksum_hex(sum)},
                     {"state", state.is_null() ? json::object() : state}};
  write_file_atomic((dir / kMeta).string(), meta.dump() + "\n");
  bool kept_older = false;  // sets are listed newest first
  for (const auto& [s, path] : local_sets(rank_dir)) {
    if (s == step) continue;
    if (s < step && !kept_older && fs::exists(path / kMeta, ec)) {
      kept_older = true;
      continue;
    }
    fs::remove_all(path, ec);
  }
  return dir.string();
}

std::vector<int64_t> usable_local_checkpoints(const std::string& rank_dir,
                                              const json& fingerprint, std::string* why) {
  std::vector<int64_t> steps;
  std::string reasons;
  for (const auto& [step, dir] : local_sets(rank_dir)) {
    try {
      read_set(dir, step, fingerprint, /*tensors=*/false);
      steps.push_back(step);
    } catch (const Error& e) {
      reasons += str_cat(reasons.empty() ? "" : "; ", e.what());
    }
  }
  if (why)
    *why = !reasons.empty() ? reasons
           : steps.empty()  ? str_cat("no local checkpoint in ", rank_dir)
                            : std::string();
  return steps;
}

LocalCheckpoint load_local_checkpoint(const std::string& rank_dir, int64_t step,
                                      const json& fingerprint) {
  return read_set(fs::path(rank_dir) / checkpoint_name(step), step, fingerprint, true);
}

}  // namespace tessera::nn
