// Detects the tokenizer kind from the spec: a keyword, a folder, or the content of a JSON file.

#include "tessera/data/load_tokenizer.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/core/file_io.h"
#include "tessera/core/json_depth.h"
#include "tessera/data/bpe_tokenizer.h"
#include "tessera/data/gpt2_tokenizer.h"

namespace tessera::data {

namespace {

// spec's JSON when it is a tokenizer file, else null (a keyword or a folder).
nlohmann::json read_tokenizer_json(const std::string& spec, std::string* text) {
  *text = read_text_file(spec);
  check_json_depth(*text, "tokenizer file " + spec);
  try {
    return nlohmann::json::parse(*text);
  } catch (const nlohmann::json::exception& e) {
    detail::throw_error("tokenizer file ", spec, " is not valid JSON: ", e.what());
  }
}

// The vocabulary and merges files of a GPT-2 spec: a folder with OpenAI's encoder.json and
// vocab.bpe or Hugging Face's vocab.json and merges.txt (the same formats), or either
// vocabulary file with its partner beside it.
std::pair<std::string, std::string> gpt2_files(const std::string& spec) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(spec, ec)) {
    fs::path dir(spec);
    for (auto [vocab, merges] :
         {std::pair{"encoder.json", "vocab.bpe"}, std::pair{"vocab.json", "merges.txt"}})
      if (fs::exists(dir / vocab) && fs::exists(dir / merges))
        return {(dir / vocab).string(), (dir / merges).string()};
    detail::throw_error("tokenizer: folder ", spec,
                        " should hold GPT-2's encoder.json and vocab.bpe (or Hugging Face's "
                        "vocab.json and merges.txt), but does not");
  }
  const fs::path p(spec);
  const char* partner = p.filename() == "vocab.json" ? "merges.txt" : "vocab.bpe";
  return {spec, (p.parent_path() / partner).string()};
}

bool is_hf_tokenizer_json(const nlohmann::json& j) {
  return j.is_object() && j.contains("model") && j["model"].is_object() &&
         j["model"].contains("type") && j.contains("pre_tokenizer");
}

// A Hugging Face tokenizer.json as GPT-2's two files: vocab (token -> id, added tokens
// included) and merges ("left right" lines in rank order). Only what Tessera's byte-level BPE
// computes the same way is accepted: a BPE model under GPT-2's ByteLevel pre-tokenizer (its
// regex, no prefix space), no normalizer; anything else is refused naming the field.
std::pair<std::string, std::string> hf_json_as_gpt2(const nlohmann::json& j,
                                                    const std::string& src) {
  const nlohmann::json& model = j["model"];
  TESSERA_CHECK(model["type"] == "BPE", "tokenizer.json ", src, ": model.type is ",
                model["type"].dump(), "; Tessera reads byte-level BPE only");
  const nlohmann::json& pre = j["pre_tokenizer"];
  TESSERA_CHECK(pre.is_object() && pre.value("type", "") == "ByteLevel" &&
                    pre.value("use_regex", true) && !pre.value("add_prefix_space", false),
                "tokenizer.json ", src, ": pre_tokenizer is ", pre.dump().substr(0, 200),
                "; Tessera splits text with GPT-2's pattern (ByteLevel, use_regex true, no prefix "
                "space) and would give other ids");
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
  if (j.contains("added_tokens") && j["added_tokens"].is_array())
    for (const auto& a : j["added_tokens"]) {
      TESSERA_CHECK(a.is_object() && a.contains("content") && a["content"].is_string() &&
                        a.contains("id") && a["id"].is_number_integer(),
                    "tokenizer.json ", src, ": an added token needs 'content' and 'id', got ",
                    a.dump().substr(0, 100));
      const std::string content = a["content"].get<std::string>();
      TESSERA_CHECK(!a.value("special", false) || content == kEndOfText, "tokenizer.json ", src,
                    ": special token \"", content,
                    "\" is not supported (Tessera's GPT-2 reader "
                    "knows ",
                    kEndOfText, " only)");
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
  return {vocab.dump(), merges};
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec) {
  namespace fs = std::filesystem;
  if (spec == "byte") return std::make_unique<ByteTokenizer>();
  std::error_code ec;
  if (fs::is_directory(spec, ec)) {
    const fs::path dir(spec);
    const bool pair = (fs::exists(dir / "encoder.json") && fs::exists(dir / "vocab.bpe")) ||
                      (fs::exists(dir / "vocab.json") && fs::exists(dir / "merges.txt"));
    if (!pair && fs::exists(dir / "tokenizer.json"))
      return load_tokenizer((dir / "tokenizer.json").string());
    const auto [encoder, vocab] = gpt2_files(spec);
    return std::make_unique<Gpt2Tokenizer>(Gpt2Tokenizer::load(encoder, vocab));
  }
  TESSERA_CHECK(fs::is_regular_file(spec, ec), "tokenizer: '", spec,
                "' is not \"byte\", a tokenizer file or a folder with encoder.json and vocab.bpe");
  std::string text;
  const nlohmann::json j = read_tokenizer_json(spec, &text);
  if (j.is_object() && j.contains("format"))
    return std::make_unique<BpeTokenizer>(BpeTokenizer::from_json(j, spec));
  if (is_hf_tokenizer_json(j)) {
    const auto [vocab, merges] = hf_json_as_gpt2(j, spec);
    return std::make_unique<Gpt2Tokenizer>(
        Gpt2Tokenizer::parse(vocab, merges, spec + " (vocab)", spec + " (merges)"));
  }
  const std::string merges = gpt2_files(spec).second;
  TESSERA_CHECK(j.is_object() && fs::exists(merges), "tokenizer file ", spec,
                " is neither a Tessera BPE file (with \"format\": \"tessera-bpe\") nor GPT-2's "
                "encoder.json with vocab.bpe next to it (or vocab.json with merges.txt)");
  return std::make_unique<Gpt2Tokenizer>(
      Gpt2Tokenizer::parse(text, read_text_file(merges), spec, merges));
}

nlohmann::json tokenizer_record(const std::string& spec) {
  // Loading first checks the files and gives load_tokenizer's errors.
  const std::unique_ptr<Tokenizer> tok = load_tokenizer(spec);
  if (tok->kind() == "byte") return {{"kind", "byte"}};
  if (tok->kind() == "bpe")
    return {{"kind", "bpe"}, {"bpe", static_cast<const BpeTokenizer&>(*tok).to_json()}};
  // GPT-2's files, or a tokenizer.json turned into them.
  namespace fs = std::filesystem;
  std::string file = spec;
  std::error_code ec;
  if (fs::is_directory(spec, ec)) {
    const fs::path dir(spec);
    const bool pair = (fs::exists(dir / "encoder.json") && fs::exists(dir / "vocab.bpe")) ||
                      (fs::exists(dir / "vocab.json") && fs::exists(dir / "merges.txt"));
    if (!pair) file = (dir / "tokenizer.json").string();
  }
  if (fs::is_regular_file(file, ec)) {
    std::string text;
    const nlohmann::json j = read_tokenizer_json(file, &text);
    if (is_hf_tokenizer_json(j)) {
      const auto [vocab, merges] = hf_json_as_gpt2(j, file);
      return {{"kind", "gpt2"}, {"encoder_json", vocab}, {"vocab_bpe", merges}};
    }
  }
  const auto [encoder, vocab] = gpt2_files(spec);
  return {{"kind", "gpt2"},
          {"encoder_json", read_text_file(encoder)},
          {"vocab_bpe", read_text_file(vocab)}};
}

std::unique_ptr<Tokenizer> load_tokenizer_record(const nlohmann::json& r,
                                                 const std::string& source) {
  TESSERA_CHECK(r.is_object() && r.contains("kind") && r["kind"].is_string(),
                "tokenizer record in ", source, ": expected an object with a 'kind' string");
  const std::string kind = r["kind"].get<std::string>();
  auto text = [&](const char* key) -> const std::string& {
    TESSERA_CHECK(r.contains(key) && r[key].is_string(), "tokenizer record in ", source, ": kind '",
                  kind, "' needs a '", key, "' string");
    return r[key].get_ref<const std::string&>();
  };
  if (kind == "byte") return std::make_unique<ByteTokenizer>();
  if (kind == "bpe") {
    TESSERA_CHECK(r.contains("bpe"), "tokenizer record in ", source, ": kind 'bpe' needs 'bpe'");
    return std::make_unique<BpeTokenizer>(BpeTokenizer::from_json(r["bpe"], source));
  }
  if (kind == "gpt2") {
    const std::string& encoder = text("encoder_json");
    const std::string& merges = text("vocab_bpe");
    return std::make_unique<Gpt2Tokenizer>(
        Gpt2Tokenizer::parse(encoder, merges, source + " (encoder.json)", source + " (vocab.bpe)"));
  }
  detail::throw_error("tokenizer record in ", source, ": unknown kind '", kind,
                      "' (byte, bpe or gpt2)");
}

}  // namespace tessera::data
