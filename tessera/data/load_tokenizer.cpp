// Detects the tokenizer kind from the spec: a keyword, a folder, or the content of a JSON file.

#include "tessera/data/load_tokenizer.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/core/file_io.h"
#include "tessera/core/json_depth.h"
#include "tessera/data/bpe_tokenizer.h"
#include "tessera/data/detail/hf_tokenizer_json.h"
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
    const HfByteLevelBpe b = hf_json_as_gpt2(j, spec);
    return std::make_unique<Gpt2Tokenizer>(
        Gpt2Tokenizer::parse(b.vocab, b.merges, spec + " (vocab)", spec + " (merges)", b.options));
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
      const HfByteLevelBpe b = hf_json_as_gpt2(j, file);
      // GPT-2's pattern: GPT-2's two files say it all. Otherwise the file itself, which
      // ckpt convert --to hf can then write back as it was.
      if (b.options.pattern == SplitPattern::gpt2)
        return {{"kind", "gpt2"}, {"encoder_json", b.vocab}, {"vocab_bpe", b.merges}};
      return {{"kind", "hf_tokenizer_json"}, {"tokenizer_json", text}};
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
  if (kind == "hf_tokenizer_json") {
    const std::string& json_text = text("tokenizer_json");
    check_json_depth(json_text, "tokenizer record in " + source);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(json_text);
    } catch (const nlohmann::json::exception& e) {
      detail::throw_error("tokenizer record in ", source, ": tokenizer_json is not valid JSON: ",
                          e.what());
    }
    TESSERA_CHECK(is_hf_tokenizer_json(j), "tokenizer record in ", source,
                  ": tokenizer_json is not a Hugging Face tokenizer.json");
    const HfByteLevelBpe b = hf_json_as_gpt2(j, source);
    return std::make_unique<Gpt2Tokenizer>(Gpt2Tokenizer::parse(
        b.vocab, b.merges, source + " (vocab)", source + " (merges)", b.options));
  }
  if (kind == "gpt2") {
    const std::string& encoder = text("encoder_json");
    const std::string& merges = text("vocab_bpe");
    return std::make_unique<Gpt2Tokenizer>(
        Gpt2Tokenizer::parse(encoder, merges, source + " (encoder.json)", source + " (vocab.bpe)"));
  }
  detail::throw_error("tokenizer record in ", source, ": unknown kind '", kind,
                      "' (byte, bpe, gpt2 or hf_tokenizer_json)");
}

}  // namespace tessera::data
