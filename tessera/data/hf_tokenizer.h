#pragma once
// A byte-level tokenizer in the files Hugging Face's GPT-2 tokenizer reads: vocab.json (each
// token in GPT-2's byte-to-unicode alphabet, with its id), merges.txt (the merges in rank
// order), special_tokens_map.json and tokenizer_config.json. `AutoTokenizer.from_pretrained`
// on the folder then encodes as the tokenizer does (tools/hf_tokenizer_check.py), and
// Tessera's own GPT-2 reader reads the pair back (tests/data/hf_tokenizer_test.cpp).

#include <string>

#include <nlohmann/json_fwd.hpp>

namespace tessera::data {

// From a tokenizer record (load_tokenizer.h): byte, bpe or gpt2 (whose own files are written
// back), or hf_tokenizer_json (the tokenizer.json written back as it was, with a
// tokenizer_config.json naming its end-of-text token). Throws naming the token when two ids stand for the same bytes (vocab.json cannot map
// one string to two ids). Each file is written atomically.
void write_hf_tokenizer(const std::string& dir, const nlohmann::json& record);

}  // namespace tessera::data
