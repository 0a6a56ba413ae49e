// Hugging Face's tokenizer.json: a byte-level BPE trained with the tokenizers library
// (tools/make_llama_fixture.py) encodes every sample to the ids the library gave it; what
// Tessera's byte-level BPE would compute differently is refused naming the field.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "data/data_test_util.h"
#include "tessera/core/file_io.h"
#include "tessera/data/hf_tokenizer.h"
#include "tessera/data/load_tokenizer.h"

namespace tessera::data {
namespace {

const std::string kDir = std::string(TESSERA_TEST_FIXTURES) + "/nn/fixtures/llama_parity/tokenizer";
const std::string kLlama3Dir =
    std::string(TESSERA_TEST_FIXTURES) + "/nn/fixtures/llama_parity/tokenizer_llama3";

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

// Llama 3's pre-tokenizer (the cl100k split, then ByteLevel without its regex) and its special
// tokens: the samples cover each alternative of the split (tools/make_llama_fixture.py).
TEST(HfTokenizerJson, Llama3EncodesAsTheTokenizersLibrary) {
  const nlohmann::json golden =
      nlohmann::json::parse(read_text_file(kLlama3Dir + "/tokenizer_golden.json"));
  ASSERT_GE(golden.size(), 10u);
  const std::unique_ptr<Tokenizer> tok = load_tokenizer(kLlama3Dir);
  EXPECT_EQ(tok->vocab_size(), 835);
  EXPECT_EQ(tok->eot_id(), 1);  // <|end_of_text|>, the trainer's second special token
  EXPECT_EQ(tok->special_id("<|eot_id|>"), 4);
  for (const auto& g : golden) {
    const std::string text = g["text"].get<std::string>();
    const std::vector<int32_t> ids = tok->encode(text, /*allow_special=*/true);
    EXPECT_EQ(ids, g["ids"].get<std::vector<int32_t>>()) << "\"" << text << "\"";
    EXPECT_EQ(tok->decode(ids), text);
  }
  // The record keeps the file itself, and ckpt convert --to hf writes it back as it was.
  const nlohmann::json record = tokenizer_record(kLlama3Dir);
  EXPECT_EQ(record["kind"], "hf_tokenizer_json");
  const std::unique_ptr<Tokenizer> back = load_tokenizer_record(record, "state.json");
  for (const auto& g : golden)
    EXPECT_EQ(back->encode(g["text"].get<std::string>(), true), g["ids"].get<std::vector<int32_t>>());
  testing::TempDir dir;
  write_hf_tokenizer(dir.path() + "/hf", record);
  EXPECT_EQ(read_text_file(dir.path() + "/hf/tokenizer.json"),
            read_text_file(kLlama3Dir + "/tokenizer.json"));
  EXPECT_NE(read_text_file(dir.path() + "/hf/tokenizer_config.json").find("<|end_of_text|>"),
            std::string::npos);
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
  j["pre_tokenizer"] = nlohmann::json::parse(
      read_text_file(kLlama3Dir + "/tokenizer.json"))["pre_tokenizer"];
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\p{L}+|\\s+";  // not cl100k
  refused(j, {"pre_tokenizer is", "Llama 3's"});
  j["pre_tokenizer"] = nlohmann::json::parse(
      read_text_file(kLlama3Dir + "/tokenizer.json"))["pre_tokenizer"];
  j["pre_tokenizer"]["pretokenizers"][0]["invert"] = true;
  refused(j, {"pre_tokenizer is"});
  j = base;
  j["added_tokens"] = nlohmann::json::array();
  refused(j, {"no special token <|endoftext|> or <|end_of_text|>"});
  j = base;
  j["model"]["merges"][0] = 7;
  refused(j, {"merges[0] must be"});
}

}  // namespace
}  // namespace tessera::data
