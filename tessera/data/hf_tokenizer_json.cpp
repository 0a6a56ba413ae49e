#include "tessera/data/detail/hf_tokenizer_json.h"

#include <algorithm>

#include "tessera/core/error.h"

namespace tessera::data {

namespace {

// The split of OpenAI's cl100k_base, which Llama 3 took, as tokenizer.json writes it.
constexpr std::string_view kCl100kRegex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

bool is_byte_level(const nlohmann::json& p, bool use_regex) {
  return p.is_object() && p.value("type", "") == "ByteLevel" &&
         p.value("use_regex", true) == use_regex && !p.value("add_prefix_space", false);
}

SplitPattern split_pattern(const nlohmann::json& pre, const std::string& src) {
  if (is_byte_level(pre, true)) return SplitPattern::gpt2;
  if (pre.is_object() && pre.value("type", "") == "Sequence" && pre.contains("pretokenizers") &&
      pre["pretokenizers"].is_array() && pre["pretokenizers"].size() == 2) {
    const nlohmann::json& split = pre["pretokenizers"][0];
    const bool cl100k = split.is_object() && split.value("type", "") == "Split" &&
                        split.contains("pattern") && split["pattern"].is_object() &&
                        split["pattern"].value("Regex", "") == kCl100kRegex &&
                        split.value("behavior", "") == "Isolated" && !split.value("invert", false);
    if (cl100k && is_byte_level(pre["pretokenizers"][1], false)) return SplitPattern::cl100k;
  }
  detail::throw_error("tokenizer.json ", src, ": pre_tokenizer is ", pre.dump().substr(0, 300),
                      "; Tessera splits text with GPT-2's pattern (ByteLevel, use_regex true, no "
                      "prefix space) or Llama 3's (a Split on the cl100k pattern, then ByteLevel "
                      "without its regex), and would give other ids");
}

}  // namespace

bool is_hf_tokenizer_json(const nlohmann::json& j) {
  return j.is_object() && j.contains("model") && j["model"].is_object() &&
         j["model"].contains("type") && j.contains("pre_tokenizer");
}

HfByteLevelBpe hf_json_as_gpt2(const nlohmann::json& j, const std::string& src) {
  HfByteLevelBpe out;
  const nlohmann::json& model = j["model"];
  TESSERA_CHECK(model["type"] == "BPE", "tokenizer.json ", src, ": model.type is ",
                model["type"].dump(), "; Tessera reads byte-level BPE only");
  out.options.pattern = split_pattern(j["pre_tokenizer"], src);
  TESSERA_CHECK(!j.contains("normalizer") || j["normalizer"].is_null(), "tokenizer.json ", src,
                ": a normalizer (", j["normalizer"].dump().substr(0, 100), ") is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    TESSERA_CHECK(!model.contains(key) || model[key].is_null() || model[key] == "",
                  "tokenizer.json ", src, ": model.", key, " is not supported");
  TESSERA_CHECK(!model.value("byte_fallback", false), "tokenizer.json ", src,
                ": model.byte_fallback is not supported");
  TESSERA_CHECK(model.contains("vocab") && model["vocab"].is_object(), "tokenizer.json ", src,
                ": model.vocab must be an object of token -> id");
  nlohmann::json vocab = model["vocab"];
  std::vector<std::string> specials;
  if (j.contains("added_tokens") && j["added_tokens"].is_array())
    for (const auto& a : j["added_tokens"]) {
      TESSERA_CHECK(a.is_object() && a.contains("content") && a["content"].is_string() &&
                        a.contains("id") && a["id"].is_number_integer(),
                    "tokenizer.json ", src, ": an added token needs 'content' and 'id', got ",
                    a.dump().substr(0, 100));
      const std::string content = a["content"].get<std::string>();
      if (a.value("special", false)) specials.push_back(content);
      vocab[content] = a["id"];
    }
  TESSERA_CHECK(model.contains("merges") && model["merges"].is_array(), "tokenizer.json ", src,
                ": model.merges must be a list");
  std::string merges = "#version: 0.2\n";
  for (size_t i = 0; i < model["merges"].size(); ++i) {
    const nlohmann::json& m = model["merges"][i];
    if (m.is_string()) {
      merges += m.get<std::string>() + "\n";
    } else {
      TESSERA_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(),
                    "tokenizer.json ", src, ": merges[", i, "] must be \"a b\" or [\"a\", \"b\"]");
      merges += m[0].get<std::string>() + " " + m[1].get<std::string>() + "\n";
    }
  }
  out.vocab = vocab.dump();
  out.merges = std::move(merges);
  // The end of a text: GPT-2's token, else Llama 3's.
  const auto eot = std::find_if(specials.begin(), specials.end(), [](const std::string& s) {
    return s == kEndOfText || s == "<|end_of_text|>";
  });
  TESSERA_CHECK(eot != specials.end(), "tokenizer.json ", src, ": no special token ", kEndOfText,
                " or <|end_of_text|> to end a text");
  out.options.end_of_text = *eot;
  out.options.specials = std::move(specials);
  return out;
}


}  // namespace tessera::data
