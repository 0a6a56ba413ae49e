// Hugging Face's tokenizer.json: a byte-level BPE trained with the tokenizers library
// (tools/make_llama_fixture.py) encodes every sample to the ids the library gave it; what
// Tessera's byte-level BPE would compute differently is refused naming the field.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "data/data_test_util.h"
#include "tessera/core/file_io.h"
#include "tessera/data/load_tokenizer.h"

namespace tessera::data {
namespace {

const std::string kDir = std::string(TESSERA_TEST_FIXTURES) + "/nn/fixtures/llama_parity/tokenizer";

TEST(HfTokenizerJson, EncodesAsTheTokenizersLibrary) {
  const nlohmann::json golden =
      nlohmann::json::parse(read_text_file(kDir + "/tokenizer_golden.json"));
  ASSERT_GE(golden.size(), 5u);
  for (const std::string& spec : {kDir, kDir + "/tokenizer.json"}) {
    const std::unique_ptr<Tokenizer> tok = load_tokenizer(spec);
    EXPECT_EQ(tok->vocab_size(), 329);
    EXPECT_EQ(tok->eot_id(), 0);  // the trainer put its special token first
    for (const auto& g : golden) {
      const std::string text = g["text"].get<std::string>();
      const std::vector<int32_t> ids = tok->encode(text, /*allow_special=*/true);
      EXPECT_EQ(ids, g["ids"].get<std::vector<int32_t>>()) << "\"" << text << "\"";
      EXPECT_EQ(tok->decode(ids), text);
    }
  }
  // A checkpoint's record of it rebuilds without the file.
  const std::unique_ptr<Tokenizer> back =
      load_tokenizer_record(tokenizer_record(kDir), "state.json");
  EXPECT_EQ(back->encode("it's we'll don't"), load_tokenizer(kDir)->encode("it's we'll don't"));
}

TEST(HfTokenizerJson, WhatWouldGiveOtherIdsIsRefused) {
  const nlohmann::json base = nlohmann::json::parse(read_text_file(kDir + "/tokenizer.json"));
  testing::TempDir dir;
  auto refused = [&](const nlohmann::json& j, std::initializer_list<std::string_view> says) {
    write_file_atomic(dir.file("tokenizer.json"), j.dump());
    testing::expect_error([&] { load_tokenizer(dir.file("tokenizer.json")); }, says);
  };
  nlohmann::json j = base;
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "\\\\p{L}+"}}}};
  refused(j, {"tokenizer.json", "pre_tokenizer is", "GPT-2's pattern"});
  j = base;
  j["pre_tokenizer"]["add_prefix_space"] = true;
  refused(j, {"pre_tokenizer is"});
  j = base;
  j["normalizer"] = {{"type", "NFC"}};
  refused(j, {"a normalizer", "is not supported"});
  j = base;
  j["model"]["type"] = "WordPiece";
  refused(j, {"model.type is \"WordPiece\""});
  j = base;
  j["added_tokens"].push_back({{"id", 329}, {"content", "<|im_start|>"}, {"special", true}});
  refused(j, {"special token \"<|im_start|>\" is not supported"});
  j = base;
  j["model"]["merges"][0] = 7;
  refused(j, {"merges[0] must be"});
}

}  // namespace
}  // namespace tessera::data
