// A tokenizer exported in Hugging Face's files (vocab.json, merges.txt) reads back through
// Tessera's own GPT-2 reader as the same tokenizer: the same ids for the same text, specials
// included. The record a checkpoint carries rebuilds the tokenizer without its files.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "data/data_test_util.h"
#include "tessera/core/file_io.h"
#include "tessera/data/bpe_tokenizer.h"
#include "tessera/data/gpt2_tokenizer.h"
#include "tessera/data/hf_tokenizer.h"
#include "tessera/data/load_tokenizer.h"

namespace tessera::data {
namespace {

using testing::TempDir;

const char* kSamples[] = {
    "line 3: the quick brown fox jumps over 7 lazy dogs.",
    "  leading spaces, CAPS, digits 12345 and punctuation!?",
    "unicode: naïve café — ☃ 日本語",
    "a<|endoftext|>b",
    "",
};

// Words from a small alphabet in a fixed pseudo-random order: enough distinct pairs for a few
// hundred merges.
std::string corpus() {
  const char* words[] = {"the",   "quick", "brown", "fox",   "jumps", "over", "lazy",    "dogs",
                         "while", "seven", "cats",  "sleep", "under", "warm", "light",   "naïve",
                         "café",  "12345", "x=y+1", "UPPER", "mixed", "Case", "tab\tend"};
  std::string text;
  uint32_t state = 12345;
  for (int i = 0; i < 3000; ++i) {
    state = state * 1664525u + 1013904223u;
    text += words[(state >> 8) % (sizeof words / sizeof words[0])];
    text += (state >> 20) % 7 == 0 ? ".\n" : " ";
  }
  return text;
}

void expect_same_encoding(const Tokenizer& want, const Tokenizer& got) {
  ASSERT_EQ(got.vocab_size(), want.vocab_size());
  EXPECT_EQ(got.eot_id(), want.eot_id());
  for (const char* s : kSamples)
    for (bool special : {false, true})
      EXPECT_EQ(got.encode(s, special), want.encode(s, special)) << "\"" << s << "\"";
}

TEST(HfTokenizer, BpeReadsBackThroughTheGpt2Reader) {
  BpeTrainOptions o;
  o.vocab_size = 400;
  const BpeTokenizer bpe = BpeTokenizer::train(corpus(), o);
  ASSERT_GT(bpe.merges().size(), 80u);
  TempDir dir;
  bpe.save(dir.path() + "/tok.json");
  write_hf_tokenizer(dir.path() + "/hf", tokenizer_record(dir.path() + "/tok.json"));
  const Gpt2Tokenizer back =
      Gpt2Tokenizer::load(dir.path() + "/hf/vocab.json", dir.path() + "/hf/merges.txt");
  expect_same_encoding(bpe, back);
  // load_tokenizer takes the folder by Hugging Face's names too.
  expect_same_encoding(bpe, *load_tokenizer(dir.path() + "/hf"));
  const nlohmann::json config =
      nlohmann::json::parse(read_text_file(dir.path() + "/hf/tokenizer_config.json"));
  EXPECT_EQ(config["eos_token"], "<|endoftext|>");
  EXPECT_EQ(config["tokenizer_class"], "GPT2Tokenizer");
}

TEST(HfTokenizer, ByteTokenizerReadsBack) {
  TempDir dir;
  write_hf_tokenizer(dir.path(), tokenizer_record("byte"));
  expect_same_encoding(ByteTokenizer(), *load_tokenizer(dir.path()));
}

TEST(HfTokenizer, RecordsRebuildWithoutTheirFiles) {
  BpeTrainOptions o;
  o.vocab_size = 300;
  const BpeTokenizer bpe = BpeTokenizer::train(corpus(), o);
  nlohmann::json record;
  {
    TempDir dir;
    bpe.save(dir.path() + "/tok.json");
    record = tokenizer_record(dir.path() + "/tok.json");
  }  // the file is gone
  EXPECT_EQ(record["kind"], "bpe");
  expect_same_encoding(bpe, *load_tokenizer_record(record, "state.json"));
  expect_same_encoding(ByteTokenizer(), *load_tokenizer_record(tokenizer_record("byte"), "x"));
  testing::expect_error(
      [] {
        load_tokenizer_record({{"kind", "wordpiece"}}, "state.json");
      },
      {"tokenizer record in state.json", "unknown kind 'wordpiece'"});
  testing::expect_error(
      [] {
        load_tokenizer_record({{"kind", "gpt2"}}, "state.json");
      },
      {"kind 'gpt2' needs a 'encoder_json' string"});
}

// Two merges that spell the same bytes cannot both be in vocab.json: refused by name.
TEST(HfTokenizer, RefusesTwoIdsForOneToken) {
  const BpeTokenizer bpe({{'a', 'b'}, {256, 'c'}, {'b', 'c'}, {'a', 258}}, {"<|endoftext|>"},
                         "<|endoftext|>");
  TempDir dir;
  bpe.save(dir.path() + "/tok.json");
  testing::expect_error(
      [&] { write_hf_tokenizer(dir.path() + "/hf", tokenizer_record(dir.path() + "/tok.json")); },
      {"ids 257 and 259 stand for the same token \"abc\""});
}

}  // namespace
}  // namespace tessera::data
