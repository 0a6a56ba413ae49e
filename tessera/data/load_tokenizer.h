#pragma once
// One entry point for every tokenizer kind, for the command line and configs.

#include <memory>
#include <string>

#include "tessera/data/tokenizer.h"

namespace tessera::data {

// spec is one of:
//   "byte"                         the built-in byte tokenizer;
//   a Tessera BPE JSON file        {"format": "tessera-bpe", ...} (BpeTokenizer::save);
//   a folder with encoder.json and vocab.bpe, or the path of such an encoder.json: GPT-2's.
// Throws naming the path and what was expected when it is none of these.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec);

}  // namespace tessera::data
