#pragma once
// One entry point for every tokenizer kind, for the command line and configs.

#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "tessera/data/tokenizer.h"

namespace tessera::data {

// spec is one of:
//   "byte"                         the built-in byte tokenizer;
//   a Tessera BPE JSON file        {"format": "tessera-bpe", ...} (BpeTokenizer::save);
//   a folder with encoder.json and vocab.bpe, or the path of such an encoder.json: GPT-2's;
//   the same as Hugging Face names them, vocab.json and merges.txt;
//   a Hugging Face tokenizer.json (or a folder with one) of a byte-level BPE under GPT-2's
//   pre-tokenizer; other pre-tokenizers and normalizers are refused naming the field.
// Throws naming the path and what was expected when it is none of these.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec);

// The tokenizer `spec` names as self-contained JSON, the files' contents included: what a
// checkpoint records, so that the checkpoint (and its run directory) can be used from any
// directory after it is moved or copied. {"kind": "byte"}, {"kind": "bpe", "bpe": <the BPE
// file's object>} or {"kind": "gpt2", "encoder_json": <text>, "vocab_bpe": <text>}.
nlohmann::json tokenizer_record(const std::string& spec);
// The tokenizer of such a record; `source` names it in errors (unknown kind, missing field).
std::unique_ptr<Tokenizer> load_tokenizer_record(const nlohmann::json& record,
                                                 const std::string& source);

}  // namespace tessera::data
