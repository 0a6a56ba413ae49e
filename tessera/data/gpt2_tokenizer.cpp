// Loading GPT-2's encoder.json and vocab.bpe. Every token string is mapped back through the byte
// alphabet once at load time, so encode works on bytes and decode is a table lookup.

#include "tessera/data/gpt2_tokenizer.h"

#include <unordered_map>

#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/core/file_io.h"
#include "tessera/core/json_depth.h"

namespace tessera::data {

namespace {

// The 188 bytes GPT-2 prints as themselves.
bool prints_as_itself(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct ByteAlphabet {
  std::array<uint32_t, 256> to_char{};
  std::array<int16_t, 324> to_byte{};  // -1: not a character of the alphabet

  ByteAlphabet() {
    to_byte.fill(-1);
    uint32_t shifted = 256;
    for (int b = 0; b < 256; ++b) {
      to_char[size_t(b)] = prints_as_itself(b) ? uint32_t(b) : shifted++;
      to_byte[to_char[size_t(b)]] = int16_t(b);
    }
  }
};

const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}

// The bytes a token string in GPT-2's alphabet stands for.
std::string token_to_bytes(const std::string& token, int64_t id, const std::string& source) {
  std::string bytes;
  size_t pos = 0;
  while (pos < token.size()) {
    unsigned char b0 = static_cast<unsigned char>(token[pos]);
    size_t len = b0 < 0x80 ? 1 : b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4;
    TESSERA_CHECK(pos + len <= token.size(), "GPT-2 encoder ", source, ": token with id ", id,
                  " is not valid UTF-8");
    uint32_t cp = len == 1 ? b0 : b0 & (0x7F >> len);
    for (size_t i = 1; i < len; ++i) cp = (cp << 6) | (token[pos + i] & 0x3F);
    TESSERA_CHECK(cp < alphabet().to_byte.size() && alphabet().to_byte[cp] >= 0, "GPT-2 encoder ",
                  source, ": token \"", token, "\" (id ", id, ") has the character U+", std::hex,
                  cp, std::dec, ", which is outside GPT-2's byte alphabet");
    bytes.push_back(char(alphabet().to_byte[cp]));
    pos += len;
  }
  return bytes;
}

nlohmann::json parse_encoder(const std::string& text, const std::string& source) {
  check_json_depth(text, "GPT-2 encoder " + source);
  // nlohmann keeps the last of repeated keys silently; the callback catches them.
  std::string duplicate;
  std::unordered_map<std::string, int> seen;
  auto on_event = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if (event == nlohmann::json::parse_event_t::key && depth == 1 && duplicate.empty()) {
      std::string key = parsed.get<std::string>();
      if (++seen[key] == 2) duplicate = key;
    }
    return true;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text, on_event);
  } catch (const nlohmann::json::exception& e) {
    detail::throw_error("GPT-2 encoder ", source, " is not valid JSON: ", e.what());
  }
  TESSERA_CHECK(j.is_object(), "GPT-2 encoder ", source,
                ": expected a JSON object mapping tokens to ids");
  TESSERA_CHECK(duplicate.empty(), "GPT-2 encoder ", source, ": token \"", duplicate,
                "\" appears more than once");
  return j;
}

}  // namespace

uint32_t gpt2_byte_to_char(uint8_t b) {
  return alphabet().to_char[b];
}

Gpt2Tokenizer Gpt2Tokenizer::parse(const std::string& encoder_json, const std::string& vocab_bpe,
                                   const std::string& encoder_name, const std::string& vocab_name,
                                   const Gpt2Options& options) {
  Gpt2Tokenizer tok;
  nlohmann::json encoder = parse_encoder(encoder_json, encoder_name);
  const int64_t n = int64_t(encoder.size());
  tok.token_bytes_.resize(size_t(n));
  std::vector<const std::string*> id_owner(size_t(n), nullptr);
  std::unordered_map<std::string, int32_t> ids;
  for (auto it = encoder.begin(); it != encoder.end(); ++it) {
    const std::string& key = it.key();
    TESSERA_CHECK(it.value().is_number_integer(), "GPT-2 encoder ", encoder_name, ": token \"", key,
                  "\" maps to ", it.value().dump(), ", expected an integer id");
    int64_t id = it.value().get<int64_t>();
    TESSERA_CHECK(id >= 0 && id < n, "GPT-2 encoder ", encoder_name, ": token \"", key,
                  "\" has id ", id, "; the ids of ", n, " tokens must be 0..", n - 1);
    TESSERA_CHECK(id_owner[size_t(id)] == nullptr, "GPT-2 encoder ", encoder_name, ": id ", id,
                  " is given to both \"", *id_owner[size_t(id)], "\" and \"", key, "\"");
    id_owner[size_t(id)] = &key;
    tok.token_bytes_[size_t(id)] = token_to_bytes(key, id, encoder_name);
    ids.emplace(key, int32_t(id));
  }
  for (int b = 0; b < 256; ++b) {
    uint32_t cp = gpt2_byte_to_char(uint8_t(b));
    // The single-character token of byte b, as UTF-8.
    std::string utf8 = cp < 0x80 ? std::string(1, char(cp))
                                 : std::string{char(0xC0 | (cp >> 6)), char(0x80 | (cp & 0x3F))};
    auto it = ids.find(utf8);
    TESSERA_CHECK(it != ids.end(), "GPT-2 encoder ", encoder_name, ": no token for byte 0x",
                  std::hex, b, std::dec, " (GPT-2 character \"", utf8, "\")");
    tok.byte_ids_[size_t(b)] = it->second;
  }
  auto eot = ids.find(options.end_of_text);
  TESSERA_CHECK(eot != ids.end(), "GPT-2 encoder ", encoder_name, ": no \"", options.end_of_text,
                "\" token");
  tok.eot_id_ = eot->second;
  std::vector<std::pair<std::string, int32_t>> specials;
  for (const std::string& special : options.specials) {
    auto it = ids.find(special);
    TESSERA_CHECK(it != ids.end(), "GPT-2 encoder ", encoder_name, ": special token \"", special,
                  "\" is not in the vocabulary");
    specials.emplace_back(special, it->second);
  }
  tok.specials_ = SpecialTokenMatcher(std::move(specials));
  tok.pattern_ = options.pattern;

  std::vector<int64_t> merge_line;  // the line each merge rank came from
  size_t pos = 0;
  for (int64_t line_no = 1; pos < vocab_bpe.size(); ++line_no) {
    size_t end = vocab_bpe.find('\n', pos);
    if (end == std::string::npos) end = vocab_bpe.size();
    std::string line = vocab_bpe.substr(pos, end - pos);
    pos = end + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_no == 1 && line.starts_with("#version"))) continue;
    size_t space = line.find(' ');
    TESSERA_CHECK(space != std::string::npos && space > 0 && space + 1 < line.size() &&
                      line.find(' ', space + 1) == std::string::npos,
                  "GPT-2 merges ", vocab_name, ", line ", line_no,
                  ": expected two tokens separated by one space, got \"", line, "\"");
    std::string left = line.substr(0, space), right = line.substr(space + 1);
    auto l = ids.find(left), r = ids.find(right), m = ids.find(left + right);
    for (auto [it, name] : {std::pair{l, &left}, std::pair{r, &right}}) {
      TESSERA_CHECK(it != ids.end(), "GPT-2 merges ", vocab_name, ", line ", line_no, ": token \"",
                    *name, "\" is not in ", encoder_name);
    }
    TESSERA_CHECK(m != ids.end(), "GPT-2 merges ", vocab_name, ", line ", line_no,
                  ": the merged token \"", left + right, "\" is not in ", encoder_name);
    if (!tok.merges_.add(l->second, r->second, m->second)) {
      detail::throw_error("GPT-2 merges ", vocab_name, ", line ", line_no, ": \"", line,
                          "\" repeats the merge on line ",
                          merge_line[size_t(tok.merges_.find(l->second, r->second)->rank)]);
    }
    merge_line.push_back(line_no);
  }
  return tok;
}

Gpt2Tokenizer Gpt2Tokenizer::load(const std::string& encoder_json_path,
                                  const std::string& vocab_bpe_path) {
  return parse(read_text_file(encoder_json_path), read_text_file(vocab_bpe_path), encoder_json_path,
               vocab_bpe_path);
}

Gpt2Tokenizer Gpt2Tokenizer::load_dir(const std::string& dir) {
  return load(dir + "/encoder.json", dir + "/vocab.bpe");
}

std::vector<int32_t> Gpt2Tokenizer::encode(std::string_view text, bool allow_special) const {
  return bpe_encode(text, allow_special, merges_, byte_ids_, specials_, pattern_);
}

std::string Gpt2Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    int32_t id = ids[i];
    TESSERA_CHECK(id >= 0 && id < vocab_size(), "GPT-2 tokenizer decode: id ", id, " at position ",
                  i, " is outside [0, ", vocab_size(), ")");
    out += token_bytes_[size_t(id)];
  }
  return out;
}

std::optional<int32_t> Gpt2Tokenizer::special_id(std::string_view token) const {
  return specials_.find_id(token);
}

}  // namespace tessera::data
