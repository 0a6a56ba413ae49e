#pragma once
// A Hugging Face tokenizer.json read as GPT-2's two files plus Gpt2Options: what Tessera's
// byte-level BPE computes the same way is accepted, anything else refused naming the field.
//   pre-tokenizer: GPT-2's ByteLevel (its regex, no prefix space), or Llama 3's Sequence of a
//     Split on the cl100k pattern (Isolated, not inverted) and a ByteLevel without its regex;
//   model: BPE without continuing_subword_prefix, end_of_word_suffix or byte_fallback;
//   no normalizer. The post-processor (Llama 3's <|begin_of_text|> before every text) is not
//   applied: encode() gives the ids of add_special_tokens=False.

#include <string>

#include <nlohmann/json.hpp>

#include "tessera/data/gpt2_tokenizer.h"

namespace tessera::data {

struct HfByteLevelBpe {
  std::string vocab;   // encoder.json: token -> id, the added tokens included
  std::string merges;  // vocab.bpe: "left right" lines in rank order
  Gpt2Options options;
};

bool is_hf_tokenizer_json(const nlohmann::json& j);
HfByteLevelBpe hf_json_as_gpt2(const nlohmann::json& j, const std::string& src);

}  // namespace tessera::data
