#include "tessera/data/hf_tokenizer.h"

#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/core/file_io.h"
#include "tessera/data/bpe_tokenizer.h"
#include "tessera/data/gpt2_tokenizer.h"
#include "tessera/data/load_tokenizer.h"

namespace tessera::data {

namespace {

// The bytes of a token as a string in GPT-2's alphabet, UTF-8 (every character is below U+0144).
std::string in_alphabet(const std::string& bytes) {
  std::string out;
  for (char c : bytes) {
    const uint32_t cp = gpt2_byte_to_char(uint8_t(c));
    if (cp < 0x80)
      out.push_back(char(cp));
    else
      out += std::string{char(0xC0 | (cp >> 6)), char(0x80 | (cp & 0x3F))};
  }
  return out;
}

// Hugging Face's files for a byte-level BPE: every id's token, the merges as pairs of ids.
struct ByteLevelBpe {
  std::vector<std::string> tokens;  // by id: in GPT-2's alphabet, or a special as written
  std::vector<std::pair<int32_t, int32_t>> merges;
  std::vector<std::string> specials;
  std::string eot;
};

ByteLevelBpe from_bpe(const BpeTokenizer& t) {
  ByteLevelBpe b;
  const int32_t specials_at = 256 + int32_t(t.merges().size());
  for (int32_t id = 0; id < t.vocab_size(); ++id)
    b.tokens.push_back(id < specials_at ? in_alphabet(t.token_bytes(id)) : t.token_bytes(id));
  b.merges = t.merges();
  b.specials = t.special_tokens();
  b.eot = t.token_bytes(t.eot_id());
  return b;
}

ByteLevelBpe from_byte() {
  ByteLevelBpe b;
  for (int v = 0; v < 256; ++v) b.tokens.push_back(in_alphabet(std::string(1, char(v))));
  b.tokens.emplace_back(kEndOfText);
  b.specials = {std::string(kEndOfText)};
  b.eot = std::string(kEndOfText);
  return b;
}

// special_tokens_map.json and tokenizer_config.json: the end-of-text token is GPT-2's bos, eos
// and unk; other specials are additional special tokens.
void write_special_files(const std::string& dir, const std::string& eot,
                         const std::vector<std::string>& specials) {
  const nlohmann::json map = {{"bos_token", eot}, {"eos_token", eot}, {"unk_token", eot}};
  nlohmann::json config = {{"tokenizer_class", "GPT2Tokenizer"},
                           {"model_max_length", 1 << 20},
                           {"add_prefix_space", false},
                           {"bos_token", eot},
                           {"eos_token", eot},
                           {"unk_token", eot}};
  nlohmann::json extra = nlohmann::json::array();
  for (const std::string& s : specials)
    if (s != eot) extra.push_back(s);
  if (!extra.empty()) config["additional_special_tokens"] = extra;
  write_file_atomic(dir + "/special_tokens_map.json", map.dump(2) + "\n");
  write_file_atomic(dir + "/tokenizer_config.json", config.dump(2) + "\n");
}

void write_files(const std::string& dir, const ByteLevelBpe& b) {
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  std::map<std::string, int32_t> seen;
  for (int32_t id = 0; id < int32_t(b.tokens.size()); ++id) {
    auto [it, fresh] = seen.emplace(b.tokens[size_t(id)], id);
    TESSERA_CHECK(fresh, "hf tokenizer: ids ", it->second, " and ", id, " stand for the same ",
                  "token \"", b.tokens[size_t(id)], "\", which vocab.json cannot hold twice");
    vocab[b.tokens[size_t(id)]] = id;
  }
  std::string merges = "#version: 0.2\n";
  for (const auto& [left, right] : b.merges)
    merges += b.tokens[size_t(left)] + " " + b.tokens[size_t(right)] + "\n";
  std::filesystem::create_directories(dir);
  write_file_atomic(dir + "/vocab.json", vocab.dump() + "\n");
  write_file_atomic(dir + "/merges.txt", merges);
  write_special_files(dir, b.eot, b.specials);
}

}  // namespace

void write_hf_tokenizer(const std::string& dir, const nlohmann::json& record) {
  const std::unique_ptr<Tokenizer> tok = load_tokenizer_record(record, "the checkpoint");
  if (record["kind"] == "hf_tokenizer_json") {  // the file the model came with, as it was
    std::filesystem::create_directories(dir);
    write_file_atomic(dir + "/tokenizer.json", record["tokenizer_json"].get<std::string>());
    const std::string eot = tok->decode(std::vector<int32_t>{tok->eot_id()});
    const nlohmann::json config = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                                   {"model_max_length", 1 << 20},
                                   {"eos_token", eot}};
    write_file_atomic(dir + "/tokenizer_config.json", config.dump(2) + "\n");
    return;
  }
  if (tok->kind() == "gpt2") {  // GPT-2's own files are Hugging Face's already
    std::filesystem::create_directories(dir);
    write_file_atomic(dir + "/vocab.json", record["encoder_json"].get<std::string>());
    write_file_atomic(dir + "/merges.txt", record["vocab_bpe"].get<std::string>());
    write_special_files(dir, std::string(kEndOfText), {});
    return;
  }
  write_files(
      dir, tok->kind() == "bpe" ? from_bpe(static_cast<const BpeTokenizer&>(*tok)) : from_byte());
}

}  // namespace tessera::data
