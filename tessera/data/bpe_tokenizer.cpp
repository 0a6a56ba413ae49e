// BpeTokenizer: construction with validation, encode/decode, and the JSON file. Training is in
// bpe_train.cpp.

#include "tessera/data/bpe_tokenizer.h"

#include <limits>

#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/core/file_io.h"
#include "tessera/core/json_depth.h"
#include "tessera/data/detail/pretokenize.h"

namespace tessera::data {

namespace {

constexpr const char* kFormat = "tessera-bpe";
constexpr int kVersion = 1;
constexpr const char* kPretokenizer = "gpt2-pattern";

const nlohmann::json& field(const nlohmann::json& j, const char* key, const std::string& source) {
  TESSERA_CHECK(j.contains(key), "BPE tokenizer ", source, ": missing field '", key, "'");
  return j.at(key);
}

}  // namespace

BpeTokenizer::BpeTokenizer(std::vector<MergePair> merges, std::vector<std::string> special_tokens,
                           std::string eot_token)
    : merges_(std::move(merges)),
      special_tokens_(std::move(special_tokens)),
      eot_token_(std::move(eot_token)) {
  const size_t total = 256 + merges_.size() + special_tokens_.size();
  TESSERA_CHECK(total <= size_t(std::numeric_limits<int32_t>::max()), "BPE tokenizer: ", total,
                " tokens do not fit int32 ids");
  token_bytes_.reserve(total);
  for (int b = 0; b < 256; ++b) {
    byte_ids_[size_t(b)] = b;
    token_bytes_.emplace_back(1, char(b));
  }
  for (size_t i = 0; i < merges_.size(); ++i) {
    auto [left, right] = merges_[i];
    int32_t id = int32_t(256 + i);
    TESSERA_CHECK(left >= 0 && left < id && right >= 0 && right < id, "BPE tokenizer: merge ", i,
                  " joins ids (", left, ", ", right,
                  "), but a merge may only join ids below its "
                  "own id ",
                  id);
    if (!table_.add(left, right, id)) {
      detail::throw_error("BPE tokenizer: merge ", i, " repeats the pair (", left, ", ", right,
                          ") of merge ", table_.find(left, right)->rank);
    }
    token_bytes_.push_back(token_bytes_[size_t(left)] + token_bytes_[size_t(right)]);
  }
  std::vector<std::pair<std::string, int32_t>> matcher;
  for (size_t i = 0; i < special_tokens_.size(); ++i) {
    const std::string& s = special_tokens_[i];
    int32_t id = int32_t(256 + merges_.size() + i);
    TESSERA_CHECK(!s.empty(), "BPE tokenizer: special token ", i, " is empty");
    // The JSON file holds them as strings, which must be UTF-8.
    TESSERA_CHECK(is_valid_utf8(s), "BPE tokenizer: special token ", i, " is not valid UTF-8");
    for (const auto& [other, other_id] : matcher) {
      TESSERA_CHECK(other != s, "BPE tokenizer: special token '", s, "' appears twice");
    }
    matcher.emplace_back(s, id);
    token_bytes_.push_back(s);
  }
  specials_ = SpecialTokenMatcher(std::move(matcher));
  std::optional<int32_t> eot = specials_.find_id(eot_token_);
  TESSERA_CHECK(eot.has_value(), "BPE tokenizer: the end-of-text token '", eot_token_,
                "' is not among the special tokens");
  eot_id_ = *eot;
}

const std::string& BpeTokenizer::token_bytes(int32_t id) const {
  TESSERA_CHECK(id >= 0 && id < vocab_size(), "BPE tokenizer: id ", id, " is outside [0, ",
                vocab_size(), ")");
  return token_bytes_[size_t(id)];
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, bool allow_special) const {
  return bpe_encode(text, allow_special, table_, byte_ids_, specials_);
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    int32_t id = ids[i];
    TESSERA_CHECK(id >= 0 && id < vocab_size(), "BPE tokenizer decode: id ", id, " at position ", i,
                  " is outside [0, ", vocab_size(), ")");
    out += token_bytes_[size_t(id)];
  }
  return out;
}

std::optional<int32_t> BpeTokenizer::special_id(std::string_view token) const {
  return specials_.find_id(token);
}

nlohmann::json BpeTokenizer::to_json() const {
  nlohmann::json merges = nlohmann::json::array();
  for (const auto& [left, right] : merges_) merges.push_back({left, right});
  return {{"format", kFormat},
          {"version", kVersion},
          {"pretokenizer", kPretokenizer},
          {"vocab_size", vocab_size()},
          {"merges", std::move(merges)},
          {"special_tokens", special_tokens_},
          {"eot_token", eot_token_}};
}

BpeTokenizer BpeTokenizer::from_json(const nlohmann::json& j, const std::string& source) {
  TESSERA_CHECK(j.is_object(), "BPE tokenizer ", source, ": expected a JSON object");
  const nlohmann::json& format = field(j, "format", source);
  TESSERA_CHECK(format.is_string() && format.get<std::string>() == kFormat, "BPE tokenizer ",
                source, ": 'format' is ", format.dump(), ", expected \"", kFormat, "\"");
  const nlohmann::json& version = field(j, "version", source);
  TESSERA_CHECK(version.is_number_integer() && version.get<int64_t>() == kVersion, "BPE tokenizer ",
                source, ": 'version' is ", version.dump(), ", expected ", kVersion);
  const nlohmann::json& pre = field(j, "pretokenizer", source);
  TESSERA_CHECK(pre.is_string() && pre.get<std::string>() == kPretokenizer, "BPE tokenizer ",
                source, ": 'pretokenizer' is ", pre.dump(), ", expected \"", kPretokenizer, "\"");

  const nlohmann::json& merges_json = field(j, "merges", source);
  TESSERA_CHECK(merges_json.is_array(), "BPE tokenizer ", source, ": 'merges' must be an array");
  std::vector<MergePair> merges;
  merges.reserve(merges_json.size());
  for (size_t i = 0; i < merges_json.size(); ++i) {
    const nlohmann::json& m = merges_json[i];
    bool ok = m.is_array() && m.size() == 2 && m[0].is_number_integer() && m[1].is_number_integer();
    TESSERA_CHECK(ok, "BPE tokenizer ", source, ": merges[", i,
                  "] must be a pair of integer ids, got ", m.dump());
    int64_t left = m[0].get<int64_t>(), right = m[1].get<int64_t>();
    int64_t id = 256 + int64_t(i);
    TESSERA_CHECK(left >= 0 && left < id && right >= 0 && right < id, "BPE tokenizer ", source,
                  ": merges[", i, "] = ", m.dump(), " must join ids in [0, ", id, ")");
    merges.emplace_back(int32_t(left), int32_t(right));
  }

  const nlohmann::json& specials_json = field(j, "special_tokens", source);
  TESSERA_CHECK(specials_json.is_array(), "BPE tokenizer ", source,
                ": 'special_tokens' must be an array of strings");
  std::vector<std::string> specials;
  for (size_t i = 0; i < specials_json.size(); ++i) {
    TESSERA_CHECK(specials_json[i].is_string(), "BPE tokenizer ", source, ": special_tokens[", i,
                  "] must be a string, got ", specials_json[i].dump());
    specials.push_back(specials_json[i].get<std::string>());
  }
  const nlohmann::json& eot = field(j, "eot_token", source);
  TESSERA_CHECK(eot.is_string(), "BPE tokenizer ", source, ": 'eot_token' must be a string");

  try {
    BpeTokenizer tok(std::move(merges), std::move(specials), eot.get<std::string>());
    if (j.contains("vocab_size")) {
      const nlohmann::json& v = j.at("vocab_size");
      TESSERA_CHECK(v.is_number_integer() && v.get<int64_t>() == tok.vocab_size(),
                    "'vocab_size' is ", v.dump(), ", but the merges and special tokens make ",
                    tok.vocab_size());
    }
    return tok;
  } catch (const Error& e) {
    detail::throw_error("BPE tokenizer ", source, ": ", e.what());
  }
}

void BpeTokenizer::save(const std::string& path) const {
  write_file_atomic(path, to_json().dump() + "\n");
}

BpeTokenizer BpeTokenizer::load(const std::string& path) {
  std::string text = read_text_file(path);
  check_json_depth(text, "BPE tokenizer " + path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    detail::throw_error("BPE tokenizer ", path, " is not valid JSON: ", e.what());
  }
  return from_json(j, path);
}

}  // namespace tessera::data
