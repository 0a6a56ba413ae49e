// Fuzzes the tokenizer files (data/bpe_tokenizer.h, data/gpt2_tokenizer.h). The first byte
// picks the kind: even, the rest is a Tessera BPE JSON file; odd, the rest is GPT-2's
// encoder.json and vocab.bpe, split at the first NUL. A tokenizer that loads must then encode
// and decode a fixed text without failing.

#include <string_view>

#include "fuzz/fuzz_input.h"
#include "tessera/data/bpe_tokenizer.h"
#include "tessera/data/gpt2_tokenizer.h"

namespace {

void exercise(const tessera::data::Tokenizer& t) {
  const std::vector<int32_t> ids = t.encode("Hello, world! 123 \xe2\x82\xac tokens\n");
  const std::string back = t.decode(ids);
  (void)back;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool gpt2 = (data[0] & 1) != 0;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  return tessera::fuzz::expect_value_or_error([&] {
    if (gpt2) {
      const size_t cut = rest.find('\0');
      const std::string encoder(rest.substr(0, cut));
      const std::string merges(cut == std::string_view::npos ? "" : rest.substr(cut + 1));
      exercise(tessera::data::Gpt2Tokenizer::parse(encoder, merges, "encoder.json", "vocab.bpe"));
    } else {
      const std::string path =
          tessera::fuzz::write_input("tokenizer.json", data + 1, size - 1);
      exercise(tessera::data::BpeTokenizer::load(path));
    }
  });
}
