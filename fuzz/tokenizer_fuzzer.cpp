// Fuzzes the tokenizer files through load_tokenizer (data/load_tokenizer.h), as `--tokenizer`
// reads them. The first byte picks the kind: even, the rest is one JSON file (a Tessera BPE
// file, or anything else load_tokenizer must refuse); odd, the rest is GPT-2's encoder.json
// and vocab.bpe, split at the first NUL, in a folder of their own. A tokenizer that loads must
// then encode a fixed text and decode it back to the same bytes.

#include <cstdlib>
#include <string_view>

#include "fuzz/fuzz_input.h"
#include "tessera/data/load_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool gpt2 = (data[0] & 1) != 0;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  std::string spec;
  if (gpt2) {
    const size_t cut = std::min(rest.find('\0'), rest.size());
    const std::string_view encoder = rest.substr(0, cut);
    const std::string_view merges = cut < rest.size() ? rest.substr(cut + 1) : std::string_view();
    tessera::fuzz::write_input("gpt2/encoder.json", encoder);
    tessera::fuzz::write_input("gpt2/vocab.bpe", merges);
    spec = tessera::fuzz::scratch_dir() + "/gpt2";
  } else {
    spec = tessera::fuzz::write_input("bpe/tokenizer.json", rest);
  }
  return tessera::fuzz::expect_value_or_error([&] {
    const auto tokenizer = tessera::data::load_tokenizer(spec);
    // Byte-level BPE round-trips any bytes exactly (docs/formats.md), whatever the merges.
    const std::string text = "Hello, world! 123 \xe2\x82\xac tokens\n\t  x";
    if (tokenizer->decode(tokenizer->encode(text)) != text) {
      std::fprintf(stderr, "fuzz: the tokenizer loaded but does not round-trip its text\n");
      std::abort();
    }
  });
}
