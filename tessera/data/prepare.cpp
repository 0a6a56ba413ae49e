// Shard preparation: one pass over the inputs, tokenising a file at a time (tokenisation
// dominates; writing is a sequential stream). Each split buffers at most one shard of tokens.

#include "tessera/data/prepare.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/core/file_io.h"

namespace tessera::data {

namespace fs = std::filesystem;

namespace {

bool hidden(const fs::path& p) {
  std::string name = p.filename().string();
  return !name.empty() && name[0] == '.';
}

// Streams one split's tokens into shards of a fixed size.
class ShardWriter {
 public:
  ShardWriter(std::string dir, std::string stem, int64_t shard_tokens, TokenDType dtype)
      : dir_(std::move(dir)), stem_(std::move(stem)), shard_tokens_(shard_tokens), dtype_(dtype) {}

  void append(std::span<const int32_t> tokens) {
    while (!tokens.empty()) {
      size_t room = size_t(shard_tokens_) - buffer_.size();
      size_t n = std::min(room, tokens.size());
      buffer_.insert(buffer_.end(), tokens.begin(), tokens.begin() + n);
      tokens = tokens.subspan(n);
      if (int64_t(buffer_.size()) == shard_tokens_) flush();
    }
  }
  void push(int32_t token) { append(std::span<const int32_t>(&token, 1)); }

  ShardSplit finish() {
    if (!buffer_.empty()) flush();
    return std::move(split_);
  }

 private:
  void flush() {
    std::ostringstream name;
    name << stem_ << "_" << std::setw(6) << std::setfill('0') << split_.files.size() << ".bin";
    std::string path = (fs::path(dir_) / name.str()).string();
    write_shard(path, buffer_, dtype_);
    split_.files.push_back(path);
    split_.tokens.push_back(int64_t(buffer_.size()));
    split_.total_tokens += int64_t(buffer_.size());
    buffer_.clear();
  }

  std::string dir_, stem_;
  int64_t shard_tokens_;
  TokenDType dtype_;
  std::vector<int32_t> buffer_;
  ShardSplit split_;
};

// Outputs of an earlier run with this prefix; replaced only when asked.
void clear_previous_outputs(const PrepareOptions& o, const std::string& manifest) {
  std::vector<fs::path> stale;
  for (const auto& entry : fs::directory_iterator(o.output_dir)) {
    std::string name = entry.path().filename().string();
    bool shard = entry.path().extension() == ".bin" &&
                 (name.starts_with(o.prefix + "_train_") || name.starts_with(o.prefix + "_val_"));
    if (shard || entry.path() == fs::path(manifest)) stale.push_back(entry.path());
  }
  if (stale.empty()) return;
  std::sort(stale.begin(), stale.end());
  TESSERA_CHECK(o.overwrite, "prepare: ", stale.front().string(), " (and ", stale.size() - 1,
                " more) already exist from an earlier run with prefix '", o.prefix,
                "'; remove them or allow overwriting");
  for (const fs::path& p : stale) fs::remove(p);
}

nlohmann::json split_json(const ShardSplit& s) {
  nlohmann::json shards = nlohmann::json::array();
  for (size_t i = 0; i < s.files.size(); ++i) {
    shards.push_back({{"file", fs::path(s.files[i]).filename().string()}, {"tokens", s.tokens[i]}});
  }
  return {{"tokens", s.total_tokens}, {"shards", std::move(shards)}};
}

}  // namespace

std::vector<std::string> list_input_files(const std::vector<std::string>& inputs,
                                          const std::vector<std::string>& extensions) {
  std::vector<std::string> files;
  auto wanted = [&](const fs::path& p) {
    return extensions.empty() || std::find(extensions.begin(), extensions.end(),
                                           p.extension().string()) != extensions.end();
  };
  for (const std::string& input : inputs) {
    std::error_code ec;
    if (fs::is_directory(input, ec)) {
      std::vector<std::string> found;
      for (auto it = fs::recursive_directory_iterator(input);
           it != fs::recursive_directory_iterator(); ++it) {
        if (hidden(it->path())) {
          if (it->is_directory()) it.disable_recursion_pending();
          continue;
        }
        if (it->is_regular_file() && wanted(it->path())) found.push_back(it->path().string());
      }
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else {
      TESSERA_CHECK(fs::is_regular_file(input, ec), "prepare: input ", input,
                    " does not exist or is not a file or folder");
      files.push_back(input);
    }
  }
  return files;
}

PrepareSummary prepare_shards(const Tokenizer& tokenizer, const PrepareOptions& o) {
  TESSERA_CHECK(!o.inputs.empty(), "prepare: no inputs given");
  TESSERA_CHECK(!o.output_dir.empty(), "prepare: no output folder given");
  TESSERA_CHECK(!o.prefix.empty() && o.prefix.find('/') == std::string::npos, "prepare: prefix '",
                o.prefix, "' must be a non-empty file name part");
  TESSERA_CHECK(o.shard_tokens >= 1 && o.shard_tokens <= (int64_t(1) << 30),
                "prepare: shard_tokens must be in [1, 2^30], got ", o.shard_tokens);
  TESSERA_CHECK(o.val_fraction >= 0.0 && o.val_fraction < 1.0,
                "prepare: val_fraction must be in [0, 1), got ", o.val_fraction);

  PrepareSummary summary;
  std::vector<std::string> files = list_input_files(o.inputs, o.extensions);
  TESSERA_CHECK(!files.empty(), "prepare: the inputs hold no files with the extensions asked for");
  summary.input_files = int64_t(files.size());
  for (const std::string& f : files) summary.input_bytes += int64_t(fs::file_size(f));

  fs::create_directories(o.output_dir);
  summary.manifest_path = (fs::path(o.output_dir) / (o.prefix + "_manifest.json")).string();
  clear_previous_outputs(o, summary.manifest_path);

  summary.dtype = dtype_for_vocab(tokenizer.vocab_size());
  const int32_t eot = tokenizer.eot_id();
  ShardWriter val(o.output_dir, o.prefix + "_val", o.shard_tokens, summary.dtype);
  ShardWriter train(o.output_dir, o.prefix + "_train", o.shard_tokens, summary.dtype);
  const int64_t val_bytes = int64_t(std::ceil(o.val_fraction * double(summary.input_bytes)));
  int64_t consumed = 0, written = 0;
  for (const std::string& path : files) {
    std::string text = read_text_file(path);
    if (text.empty()) continue;
    ++summary.documents;
    // Bytes [0, cut) of this document go to the validation split.
    size_t cut = 0;
    if (consumed < val_bytes) {
      cut = size_t(std::min<int64_t>(val_bytes - consumed, int64_t(text.size())));
      if (cut < text.size()) {
        size_t newline = text.find('\n', cut - 1);
        cut = newline == std::string::npos ? text.size() : newline + 1;
      }
    }
    consumed += int64_t(text.size());
    std::string_view view(text);
    if (cut > 0) {
      std::vector<int32_t> ids = tokenizer.encode(view.substr(0, cut), o.allow_special);
      val.push(eot);
      val.append(ids);
      written += 1 + int64_t(ids.size());
    }
    if (cut < text.size()) {
      std::vector<int32_t> ids = tokenizer.encode(view.substr(cut), o.allow_special);
      if (cut == 0) train.push(eot);
      train.append(ids);
      written += (cut == 0 ? 1 : 0) + int64_t(ids.size());
    }
    if (o.progress) o.progress(path, written);
  }
  summary.val = val.finish();
  summary.train = train.finish();
  TESSERA_CHECK(summary.train.total_tokens > 0, "prepare: the training split is empty: the ",
                summary.input_bytes, " input bytes all went to validation (val_fraction ",
                o.val_fraction, "); give more text or a smaller val_fraction");

  nlohmann::json manifest = {
      {"format", "tessera-shards"},
      {"version", 1},
      {"tokenizer",
       {{"kind", tokenizer.kind()},
        {"source", o.tokenizer_source},
        {"vocab_size", tokenizer.vocab_size()},
        {"eot_id", eot}}},
      {"token_dtype", token_dtype_name(summary.dtype)},
      {"magic", summary.dtype == TokenDType::u16 ? kGpt2ShardMagic : kLlama3ShardMagic},
      {"shard_tokens", o.shard_tokens},
      {"val_fraction", o.val_fraction},
      {"inputs",
       {{"files", summary.input_files},
        {"bytes", summary.input_bytes},
        {"documents", summary.documents}}},
      {"train", split_json(summary.train)},
      {"val", split_json(summary.val)}};
  write_file_atomic(summary.manifest_path, manifest.dump(2) + "\n");
  return summary;
}

}  // namespace tessera::data
