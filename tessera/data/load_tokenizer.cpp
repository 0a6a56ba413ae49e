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

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec) {
  namespace fs = std::filesystem;
  if (spec == "byte") return std::make_unique<ByteTokenizer>();
  std::error_code ec;
  if (fs::is_directory(spec, ec)) {
    fs::path dir(spec);
    TESSERA_CHECK(fs::exists(dir / "encoder.json") && fs::exists(dir / "vocab.bpe"),
                  "tokenizer: folder ", spec,
                  " should hold GPT-2's encoder.json and vocab.bpe, but does not");
    return std::make_unique<Gpt2Tokenizer>(Gpt2Tokenizer::load_dir(spec));
  }
  TESSERA_CHECK(fs::is_regular_file(spec, ec), "tokenizer: '", spec,
                "' is not \"byte\", a tokenizer file or a folder with encoder.json and vocab.bpe");
  std::string text = read_text_file(spec);
  check_json_depth(text, "tokenizer file " + spec);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    detail::throw_error("tokenizer file ", spec, " is not valid JSON: ", e.what());
  }
  if (j.is_object() && j.contains("format"))
    return std::make_unique<BpeTokenizer>(BpeTokenizer::from_json(j, spec));
  fs::path vocab = fs::path(spec).parent_path() / "vocab.bpe";
  TESSERA_CHECK(j.is_object() && fs::exists(vocab), "tokenizer file ", spec,
                " is neither a Tessera BPE file (with \"format\": \"tessera-bpe\") nor GPT-2's "
                "encoder.json with vocab.bpe next to it");
  return std::make_unique<Gpt2Tokenizer>(
      Gpt2Tokenizer::parse(text, read_text_file(vocab.string()), spec, vocab.string()));
}

}  // namespace tessera::data
