#include "tessera/nn/io/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>

#include "tessera/core/error.h"
#include "tessera/core/file_io.h"
#include "tessera/core/json_depth.h"
#include "tessera/core/version.h"
#include "tessera/nn/io/detail/checkpoint_files.h"
#include "tessera/nn/io/detail/checksum.h"
#include "tessera/nn/io/safetensors.h"
#include "tessera/nn/io/safetensors_reader.h"
#include "tessera/nn/io/sharded_checkpoint.h"
#include "tessera/nn/io/tensor_source.h"

namespace tessera::nn {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "tessera-checkpoint";
constexpr int64_t kVersion = 1;
constexpr const char* kStateFile = "state.json";
constexpr const char* kLatest = "latest";
// Everything an interrupted save can leave behind starts with this (file_io's temporary files
// for `latest` are "latest.tmp.*").
constexpr const char* kTempPrefix = ".tmp.";

}  // namespace

std::optional<int64_t> parse_checkpoint_name(const std::string& name) {
  if (!name.starts_with("step_") || name.size() < 13 || name.size() > 24) return std::nullopt;
  int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    if (__builtin_mul_overflow(step, 10, &step) ||
        __builtin_add_overflow(step, name[i] - '0', &step))
      return std::nullopt;
  }
  if (checkpoint_name(step) != name) return std::nullopt;
  return step;
}

namespace {

std::string temp_name(const std::string& what) {
  static std::atomic<uint64_t> counter{0};
  return std::string(kTempPrefix) + what + "." + std::to_string(::getpid()) + "." +
         std::to_string(counter.fetch_add(1));
}

void rename_path(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::rename(from, to, ec);
  TESSERA_CHECK(!ec, "rename ", from.string(), " -> ", to.string(), ": ", ec.message());
}

void fsync_dir(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  TESSERA_CHECK(fd >= 0, "cannot open directory ", dir.string(), ": ", std::strerror(errno));
  int rc = ::fsync(fd);
  ::close(fd);
  TESSERA_CHECK(rc == 0, "fsync ", dir.string(), " failed");
}

// Removes a temporary directory unless dismissed (the save failed part-way).
class TempDirGuard {
 public:
  explicit TempDirGuard(fs::path dir) : dir_(std::move(dir)) {}
  ~TempDirGuard() {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }
  void dismiss() { dir_.clear(); }

 private:
  fs::path dir_;
};

// Swaps a fully written directory with an existing checkpoint of the same step in one atomic
// rename, so `latest` never names a missing directory; `tmp` then holds the old checkpoint.
void replace_directory(const fs::path& tmp, const fs::path& target) {
  fsync_directory_tree(tmp.string());
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) != 0) {
    // Filesystems without RENAME_EXCHANGE: move the old one aside first. A crash between the
    // two renames leaves the old checkpoint under a temporary name.
    TESSERA_CHECK(errno == EINVAL || errno == ENOSYS || errno == ENOTSUP, "replace ",
                  target.string(), ": renameat2 failed: ", std::strerror(errno));
    const fs::path aside =
        target.parent_path() / temp_name("replaced." + target.filename().string());
    rename_path(target, aside);
    rename_path(tmp, target);
    rename_path(aside, tmp);
  }
  fsync_dir(target.parent_path());
}

}  // namespace

void check_finite(const nlohmann::json& j, const std::string& where) {
  if (j.is_number_float())
    TESSERA_CHECK(std::isfinite(j.get<double>()), "save_checkpoint: ", where, " is ",
                  j.get<double>(), ", which JSON cannot hold");
  if (j.is_object())
    for (const auto& [key, value] : j.items()) check_finite(value, where + "." + key);
  if (j.is_array())
    for (size_t i = 0; i < j.size(); ++i) check_finite(j[i], where + "[" + std::to_string(i) + "]");
}

namespace {

nlohmann::json tensor_manifest(const StateDict& tensors) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& [name, t] : tensors) {
    nlohmann::json shape = nlohmann::json::array();
    for (int64_t d : t.shape()) shape.push_back(d);
    list.push_back({{"name", name}, {"dtype", dtype_name(t.dtype())}, {"shape", shape}});
  }
  return list;
}

nlohmann::json file_record(const fs::path& path, const StateDict& tensors, uint64_t checksum) {
  return {{"bytes", fs::file_size(path)},
          {"checksum", checksum_hex(checksum)},
          {"tensors", tensor_manifest(tensors)}};
}

// "f32[16,4]" for a manifest entry; any JSON types (state.json is untrusted).
std::string describe_entry(const nlohmann::json& e) {
  auto field = [&](const char* key) { return e.contains(key) ? e[key] : nlohmann::json(); };
  const nlohmann::json dtype = field("dtype");
  return (dtype.is_string() ? dtype.get<std::string>() : dtype.dump()) + field("shape").dump();
}

// Checks a tensor file against its record in state.json (its checksum only with `checksum`)
// and reads it; with `read` false, checks the header's tensor list instead and reads no tensor.
StateDict read_recorded(const fs::path& dir, const char* file, const nlohmann::json& files,
                        const std::string& state_path, const StateDict* into, bool read,
                        bool checksum) {
  const fs::path path = dir / file;
  const std::string where = path.string();
  TESSERA_CHECK(files.contains(file) && files[file].is_object(), state_path,
                ": 'files' has no record for ", file);
  const nlohmann::json& rec = files[file];
  TESSERA_CHECK(rec.value("bytes", nlohmann::json()).is_number_unsigned() &&
                    rec.value("checksum", nlohmann::json()).is_string() &&
                    rec.value("tensors", nlohmann::json()).is_array(),
                state_path, ": the record for ", file,
                " needs 'bytes' (integer), 'checksum' (string) and 'tensors' (array)");
  TESSERA_CHECK(fs::is_regular_file(path), where, ": missing (listed in ", state_path, ")");
  const uint64_t bytes = rec["bytes"].get<uint64_t>();
  TESSERA_CHECK(fs::file_size(path) == bytes, where, ": ", fs::file_size(path), " bytes, but ",
                state_path, " records ", bytes, " (truncated or replaced)");
  if (checksum) {
    const std::string sum = checksum_hex(file_checksum(where));
    TESSERA_CHECK(sum == rec["checksum"].get<std::string>(), where, ": checksum ", sum,
                  " does not match ", rec["checksum"].get<std::string>(), " recorded in ",
                  state_path, " (the file is corrupt or from another checkpoint)");
  }

  StateDict tensors;
  nlohmann::json actual;
  if (read) {
    tensors = read_safetensors(where, into).tensors;
    actual = tensor_manifest(tensors);
  } else {
    actual = nlohmann::json::array();
    for (const SafetensorsEntry& e : read_safetensors_header(where).entries) {
      nlohmann::json shape = nlohmann::json::array();
      for (int64_t d : e.shape) shape.push_back(d);
      actual.push_back({{"name", e.name}, {"dtype", dtype_name(e.dtype)}, {"shape", shape}});
    }
  }
  const nlohmann::json& expected = rec["tensors"];
  if (actual == expected) return tensors;
  std::map<std::string, nlohmann::json> want, have;
  for (const auto& e : expected)
    if (e.is_object() && e.value("name", nlohmann::json()).is_string())
      want[e["name"].get<std::string>()] = e;
  for (const auto& e : actual) have[e["name"].get<std::string>()] = e;
  for (const auto& [name, e] : want)
    TESSERA_CHECK(have.count(name), where, ": tensor '", name, "' listed in ", state_path,
                  " is missing");
  for (const auto& [name, e] : have) {
    TESSERA_CHECK(want.count(name), where, ": unexpected tensor '", name, "' (not listed in ",
                  state_path, ")");
    TESSERA_CHECK(want[name] == e, where, ": tensor '", name, "' is ", describe_entry(e), ", but ",
                  state_path, " records ", describe_entry(want[name]));
  }
  detail::throw_error(where, ": the tensor list does not match ", state_path);
}

}  // namespace

std::string checkpoints_dir(const std::string& run_dir) {
  return (fs::path(run_dir) / "checkpoints").string();
}

std::string checkpoint_name(int64_t step) {
  TESSERA_CHECK(step >= 0, "checkpoint: step must be non-negative, got ", step);
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
  return buf;
}

std::string checkpoint_path(const std::string& run_dir, int64_t step) {
  return (fs::path(checkpoints_dir(run_dir)) / checkpoint_name(step)).string();
}

nlohmann::json read_json_file(const std::string& path) {
  const std::string text = read_text_file(path);
  check_json_depth(text, path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    detail::throw_error(path, ": not valid JSON (byte ", e.byte, "): ", e.what());
  } catch (const nlohmann::json::exception& e) {
    // A number too large for a double (out_of_range 406), found by fuzz/checkpoint_state.
    detail::throw_error(path, ": not valid JSON: ", e.what());
  }
}

std::vector<int64_t> list_checkpoints(const std::string& run_dir) {
  std::vector<int64_t> steps;
  const fs::path dir = checkpoints_dir(run_dir);
  if (!fs::is_directory(dir)) return steps;
  for (const auto& entry : fs::directory_iterator(dir))
    if (auto step = parse_checkpoint_name(entry.path().filename().string()); step && entry.is_directory())
      steps.push_back(*step);
  std::sort(steps.begin(), steps.end());
  return steps;
}

void pause_for_fault_test() {
  static const double seconds = [] {
    const char* env = std::getenv("TESSERA_FAULT_SAVE_PAUSE");
    return env != nullptr ? std::atof(env) : 0.0;
  }();
  if (seconds > 0) std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

void publish_latest(const std::string& run_dir, int64_t step, int64_t keep) {
  const fs::path dir = checkpoints_dir(run_dir);
  const std::string name = checkpoint_name(step);
  const fs::path target = dir / name;
  std::error_code ec;
  write_file_atomic((dir / kLatest).string(), name + "\n");

  // Only now that `latest` names the new checkpoint: drop leftovers and old checkpoints.
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string n = entry.path().filename().string();
    if (n.starts_with(kTempPrefix) || n.starts_with(std::string(kLatest) + ".tmp."))
      fs::remove_all(entry.path(), ec);
  }
  // An older sharded set without a manifest never finished (its ranks write in step order, so
  // none is still writing it): drop it, and count only complete sets as survivors.
  std::vector<int64_t> older;
  for (int64_t s : list_checkpoints(run_dir)) {
    if (s >= step) continue;
    if (is_incomplete_checkpoint((dir / checkpoint_name(s)).string())) {
      const fs::path doomed = dir / temp_name("deleted." + checkpoint_name(s));
      rename_path(dir / checkpoint_name(s), doomed);
      fs::remove_all(doomed, ec);
    } else {
      older.push_back(s);
    }
  }
  if (keep > 0) {
    const size_t survivors = size_t(keep - 1);
    for (size_t i = 0; i + survivors < older.size(); ++i) {
      // Renamed away first, so a crash mid-delete leaves a temporary, not a half checkpoint.
      const fs::path doomed = dir / temp_name("deleted." + checkpoint_name(older[i]));
      rename_path(dir / checkpoint_name(older[i]), doomed);
      fs::remove_all(doomed, ec);
      TESSERA_CHECK(!ec, "save_checkpoint: saved ", target.string(), " but could not delete ",
                    doomed.string(), ": ", ec.message());
    }
  }
}

std::string save_checkpoint(const std::string& run_dir, const CheckpointData& data, int64_t keep) {
  const std::string name = checkpoint_name(data.step);
  TESSERA_CHECK(keep >= 0, "save_checkpoint: keep must be >= 0, got ", keep);
  TESSERA_CHECK(data.state.is_object() || data.state.is_null(),
                "save_checkpoint: state must be a JSON object, got ", data.state.type_name());
  check_finite(data.state, "state");
  const fs::path dir = checkpoints_dir(run_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  TESSERA_CHECK(!ec, "save_checkpoint: cannot create ", dir.string(), ": ", ec.message());

  const fs::path target = dir / name;
  const fs::path tmp = dir / temp_name(name);
  TESSERA_CHECK(fs::create_directory(tmp, ec) && !ec, "save_checkpoint: cannot create ",
                tmp.string(), ": ", ec.message());
  TempDirGuard guard(tmp);
  uint64_t model_sum = 0, optimizer_sum = 0;
  write_safetensors((tmp / kCheckpointModelFile).string(), data.model, {}, nullptr, &model_sum);
  pause_for_fault_test();
  write_safetensors((tmp / kCheckpointOptimizerFile).string(), data.optimizer, {}, nullptr,
                    &optimizer_sum);
  nlohmann::json state = {
      {"format", kFormat},
      {"version", kVersion},
      {"step", data.step},
      {"files",
       {{kCheckpointModelFile, file_record(tmp / kCheckpointModelFile, data.model, model_sum)},
        {kCheckpointOptimizerFile,
         file_record(tmp / kCheckpointOptimizerFile, data.optimizer, optimizer_sum)}}},
      {"state", data.state.is_null() ? nlohmann::json::object() : data.state}};
  std::string text;
  try {
    text = state.dump(2) + "\n";
  } catch (const nlohmann::json::type_error& e) {
    detail::throw_error("save_checkpoint: the state holds a string that is not UTF-8: ", e.what());
  }
  write_file_atomic((tmp / kStateFile).string(), text);

  if (fs::exists(target)) {
    replace_directory(tmp, target);  // tmp now holds the replaced checkpoint; the guard drops it
  } else {
    publish_directory(tmp.string(), target.string());
    guard.dismiss();
  }
  publish_latest(run_dir, data.step, keep);
  return target.string();
}

CheckpointData load_checkpoint(const std::string& dir_string, CheckpointParts parts,
                               const StateDict* into, ChecksumShare share) {
  const fs::path dir(dir_string);
  TESSERA_CHECK(fs::is_directory(dir), "checkpoint ", dir_string, ": not a directory");
  if (is_sharded_checkpoint(dir_string)) {
    TESSERA_CHECK(parts != CheckpointParts::model_checked && parts != CheckpointParts::all_checked,
                  "checkpoint ", dir_string,
                  " is a sharded set: it is read by read_sharded_checkpoint, not checked alone ",
                  "(CheckpointParts::model_checked and all_checked are for an unsharded "
                  "checkpoint)");
    return read_sharded_checkpoint(open_sharded_checkpoint(dir_string, share), parts);
  }
  const fs::path state_path = dir / kStateFile;
  const std::string sp = state_path.string();
  TESSERA_CHECK(fs::is_regular_file(state_path), "checkpoint ", dir_string, ": missing ",
                kStateFile);
  nlohmann::json s = read_json_file(sp);
  TESSERA_CHECK(s.is_object(), sp, ": expected a JSON object, got ", s.type_name());
  TESSERA_CHECK(s.value("format", nlohmann::json()) == kFormat, sp, ": 'format' is ",
                s.value("format", nlohmann::json()).dump(), ", expected \"", kFormat, "\"");
  const nlohmann::json version = s.value("version", nlohmann::json());
  check_format_version(
      sp + " 'version'", kFormat,
      version.is_number_integer() ? std::optional(version.get<int64_t>()) : std::nullopt,
      version.dump(), kVersion);
  const nlohmann::json step = s.value("step", nlohmann::json());
  TESSERA_CHECK(step.is_number_unsigned() && step.get<uint64_t>() <= uint64_t(INT64_MAX), sp,
                ": 'step' must be a non-negative integer, got ", step.dump());
  TESSERA_CHECK(s.value("files", nlohmann::json()).is_object(), sp, ": 'files' must be an object");
  TESSERA_CHECK(s.value("state", nlohmann::json()).is_object(), sp, ": 'state' must be an object");

  CheckpointData data;
  data.step = step.get<int64_t>();
  if (auto named = parse_checkpoint_name(dir.filename().string()))
    TESSERA_CHECK(*named == data.step, sp, ": 'step' is ", data.step, " but the directory is ",
                  dir.filename().string());
  const bool read = parts == CheckpointParts::all || parts == CheckpointParts::model;
  data.model =
      read_recorded(dir, kCheckpointModelFile, s["files"], sp, into, read, share.covers(0));
  if (parts == CheckpointParts::all || parts == CheckpointParts::all_checked)
    data.optimizer = read_recorded(dir, kCheckpointOptimizerFile, s["files"], sp, nullptr, read,
                                   share.covers(1));
  data.state = std::move(s["state"]);
  return data;
}

std::optional<std::string> find_latest_checkpoint(const std::string& run_dir) {
  const fs::path dir = checkpoints_dir(run_dir);
  const fs::path latest = dir / kLatest;
  if (!fs::exists(latest)) {
    std::vector<int64_t> steps = list_checkpoints(run_dir);
    if (steps.empty()) return std::nullopt;
    return (dir / checkpoint_name(steps.back())).string();
  }
  const std::string lp = latest.string();
  TESSERA_CHECK(fs::is_regular_file(latest) && fs::file_size(latest) <= 64, lp,
                ": expected a short file naming a checkpoint like step_00000042");
  std::string name = read_text_file(lp);
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ' || name.back() == '\r'))
    name.pop_back();
  std::string shown = name;
  for (char& ch : shown)
    if (ch < 32 || ch > 126) ch = '?';
  TESSERA_CHECK(parse_checkpoint_name(name).has_value(), lp,
                ": expected a checkpoint directory name like step_00000042, got '", shown, "'");
  const fs::path target = dir / name;
  TESSERA_CHECK(fs::is_directory(target), lp, " names ", target.string(), ", which does not exist");
  return target.string();
}

LoadedCheckpoint open_checkpoint(const std::string& dir, bool open_gathered, ChecksumShare share) {
  if (!is_sharded_checkpoint(dir) && !open_gathered)
    return {dir, load_checkpoint(dir, CheckpointParts::all, nullptr, share), nullptr};
  if (!is_sharded_checkpoint(dir)) {
    // Checked whole (sizes, checksums, tensor lists), then opened: the files stay on disk.
    LoadedCheckpoint out{dir, load_checkpoint(dir, CheckpointParts::all_checked, nullptr, share),
                         nullptr};
    auto open = [&](const char* file) {
      return std::make_shared<const TensorSource>(TensorSource::of_file(
          std::make_shared<const SafetensorsReader>((fs::path(dir) / file).string())));
    };
    out.model_files = open(kCheckpointModelFile);
    out.optimizer_files = open(kCheckpointOptimizerFile);
    return out;
  }
  auto set = std::make_shared<ShardedSet>(open_sharded_checkpoint(dir, share));
  LoadedCheckpoint out{dir, {}, nullptr};
  out.data.step = set->step;
  out.data.state = set->state;
  out.set = std::move(set);
  return out;
}

std::optional<LoadedCheckpoint> load_newest_good_checkpoint(const std::string& run_dir,
                                                            std::vector<SkippedCheckpoint>* skipped,
                                                            bool open_sharded, bool open_gathered) {
  return newest_good_checkpoint(run_dir, skipped, [&](const std::string& dir) {
    return open_sharded ? open_checkpoint(dir, open_gathered)
                        : LoadedCheckpoint{dir, load_checkpoint(dir), nullptr};
  });
}

std::optional<LoadedCheckpoint> newest_good_checkpoint(
    const std::string& run_dir, std::vector<SkippedCheckpoint>* skipped,
    const std::function<LoadedCheckpoint(const std::string& dir)>& open) {
  std::vector<SkippedCheckpoint> passed;
  std::vector<int64_t> steps = list_checkpoints(run_dir);
  const fs::path dir = checkpoints_dir(run_dir);
  // The newest candidate: `latest`'s target, or (no `latest`, or one that cannot be read) the
  // highest step.
  std::optional<int64_t> newest = steps.empty() ? std::nullopt : std::optional(steps.back());
  try {
    if (std::optional<std::string> latest = find_latest_checkpoint(run_dir))
      newest = parse_checkpoint_name(fs::path(*latest).filename().string());
  } catch (const Error& e) {
    passed.push_back({(dir / kLatest).string(), e.what()});
  }
  if (!newest) {
    if (skipped) *skipped = passed;
    return std::nullopt;
  }
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    if (*it > *newest) {
      // A complete set newer than `latest` belongs to a history the run was resumed away
      // from; one that never finished (a save cut short) is named, so the loss is visible.
      const std::string candidate = (dir / checkpoint_name(*it)).string();
      if (is_incomplete_checkpoint(candidate))
        passed.push_back({candidate, str_cat("no ", kShardedManifestFile,
                                             " (its save did not finish)")});
      continue;
    }
    const std::string candidate = (dir / checkpoint_name(*it)).string();
    try {
      LoadedCheckpoint loaded = open(candidate);
      if (skipped) *skipped = passed;
      return loaded;
    } catch (const Error& e) {
      passed.push_back({candidate, e.what()});
    }
  }
  // Sets that never finished (no manifest) are as if never begun: with nothing else, the run
  // starts afresh (the skips are still reported).
  if (std::all_of(steps.begin(), steps.end(), [&](int64_t s) {
        return s > *newest || is_incomplete_checkpoint((dir / checkpoint_name(s)).string());
      })) {
    if (skipped) *skipped = passed;
    return std::nullopt;
  }
  std::string why;
  for (const SkippedCheckpoint& s : passed) why += str_cat("\n  ", s.dir, ": ", s.reason);
  detail::throw_error("no checkpoint of ", run_dir, " loads:", why);
}

}  // namespace tessera::nn
