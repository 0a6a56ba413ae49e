#include <gtest/gtest.h>

#include <cctype>
#include <chrono>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/data_test_util.h"
#include "tessera/data/bpe_tokenizer.h"

namespace tessera::data {
namespace {

using testing::expect_error;
using testing::TempDir;
using testing::write_bytes;
using Merges = std::vector<BpeTokenizer::MergePair>;

// Text from a made-up language: 20000 words of 1-4 syllables (the same words for every seed;
// 240 syllables of onset, vowel and coda) drawn with Zipf-like frequencies, with punctuation,
// numbers and line breaks, so BPE has real structure to learn.
std::string synthetic_corpus(size_t bytes, uint32_t seed) {
  const int kWords = 20000;
  std::mt19937 rng(0);
  const char* onsets[] = {"", "k", "t", "r", "s", "m", "p", "l", "dr", "qu", "th", "st"};
  const char* vowels[] = {"a", "e", "i", "o", "u"};
  const char* codas[] = {"", "n", "r", "s"};
  std::vector<std::string> words;
  for (int w = 0; w < kWords; ++w) {
    std::string word;
    for (int s = 0, n = 1 + int(rng() % 4); s < n; ++s) {
      word += onsets[rng() % 12];
      word += vowels[rng() % 5];
      word += codas[rng() % 4];
    }
    if (rng() % 10 == 0) word[0] = char(std::toupper(word[0]));
    words.push_back(word);
  }
  std::vector<double> weights;
  for (int w = 0; w < kWords; ++w) weights.push_back(1.0 / (w + 1));
  std::discrete_distribution<int> pick(weights.begin(), weights.end());
  rng.seed(seed);
  std::string text;
  while (text.size() < bytes) {
    text += words[size_t(pick(rng))];
    uint32_t r = rng() % 20;
    text += r == 0   ? ".\n"
            : r == 1 ? ", "
            : r == 2 ? " " + std::to_string(rng() % 1000) + " "
                     : " ";
  }
  return text;
}

TEST(BpeTokenizer, LearnsTheMostFrequentPairsFirst) {
  BpeTrainOptions o;
  o.vocab_size = 300;
  // Chunks "ab" x1, " ab" x2, " abc" x1: (a,b) occurs 4 times, then (' ', ab) 3 times; after
  // that no pair reaches min_frequency 2, so training stops early.
  BpeTokenizer tok = BpeTokenizer::train("ab ab ab abc", o);
  EXPECT_EQ(tok.merges(), (Merges{{'a', 'b'}, {' ', 256}}));
  EXPECT_EQ(tok.vocab_size(), 256 + 2 + 1);
  EXPECT_EQ(tok.eot_id(), 258);
  EXPECT_EQ(tok.token_bytes(257), " ab");
  EXPECT_EQ(tok.encode("ab abc"), (std::vector<int32_t>{256, 257, 'c'}));
}

TEST(BpeTokenizer, NoMergeCrossesDocuments) {
  BpeTrainOptions o;
  o.vocab_size = 300;
  // Joined, "xabxyaby" holds (a, b) twice; as four documents every pair occurs once.
  std::vector<std::string_view> docs = {"xa", "bx", "ya", "by"};
  EXPECT_EQ(BpeTokenizer::train(docs, o).merges(), Merges{});
  EXPECT_EQ(BpeTokenizer::train("xabxyaby", o).merges().front(),
            (BpeTokenizer::MergePair{'a', 'b'}));
}

TEST(BpeTokenizer, BreaksTiesByTheSmallerPair) {
  BpeTrainOptions o;
  o.vocab_size = 300;
  o.min_frequency = 1;
  // Every pair occurs once: (' ', z) < (x, y) < (z', w) by (left, right) id.
  BpeTokenizer tok = BpeTokenizer::train("xy zw", o);
  EXPECT_EQ(tok.merges(), (Merges{{' ', 'z'}, {'x', 'y'}, {256, 'w'}}));
}

TEST(BpeTokenizer, TrainingIsDeterministic) {
  std::string corpus = synthetic_corpus(100'000, 1);
  BpeTrainOptions o;
  o.vocab_size = 800;
  BpeTokenizer a = BpeTokenizer::train(corpus, o);
  BpeTokenizer b = BpeTokenizer::train(corpus, o);
  EXPECT_EQ(a.vocab_size(), 800);
  EXPECT_EQ(a.merges(), b.merges());
}

TEST(BpeTokenizer, RoundTripsArbitraryBytesAndUnicode) {
  BpeTrainOptions o;
  o.vocab_size = 600;
  BpeTokenizer tok = BpeTokenizer::train(synthetic_corpus(50'000, 2), o);
  std::vector<std::string> texts = {"",
                                    "a",
                                    "  leading and trailing  ",
                                    "naïve café — “quoted” 中文 ½ ٣٤ 😀!",
                                    std::string("nul\0byte", 8),
                                    "invalid \xff\xfe\xc0\xaf utf-8 \xe2\x82",
                                    "karito sen ulmo. Paedra, quis 42\n\n\tend",
                                    std::string(5000, ' ') + "x"};
  std::mt19937 rng(3);
  for (int t = 0; t < 200; ++t) {
    std::string s(rng() % 200, '\0');
    for (char& c : s) c = char(rng() % 256);
    texts.push_back(s);
  }
  for (const std::string& text : texts) {
    std::vector<int32_t> ids = tok.encode(text);
    EXPECT_EQ(tok.decode(ids), text);
    for (int32_t id : ids) EXPECT_NE(id, tok.eot_id());
  }
}

TEST(BpeTokenizer, SpecialTokensOnlyWhenAllowed) {
  BpeTrainOptions o;
  o.vocab_size = 400;
  o.special_tokens = {"<|endoftext|>", "<|pad|>", "<|pad|>x"};
  // Special strings in the corpus are boundaries: no merge may learn their bytes.
  std::string corpus;
  for (int i = 0; i < 200; ++i) corpus += "hello <|endoftext|>world<|pad|> ";
  BpeTokenizer tok = BpeTokenizer::train(corpus, o);
  for (int32_t id = 256; id < tok.eot_id(); ++id) {
    EXPECT_EQ(tok.token_bytes(id).find('|'), std::string::npos) << tok.token_bytes(id);
  }
  int32_t eot = *tok.special_id("<|endoftext|>");
  int32_t pad = *tok.special_id("<|pad|>");
  int32_t padx = *tok.special_id("<|pad|>x");
  EXPECT_EQ(eot, tok.eot_id());
  EXPECT_FALSE(tok.special_id("<|unk|>").has_value());

  std::string text = "a<|endoftext|>b<|pad|>x<|pad|>";
  std::vector<int32_t> ids = tok.encode(text, /*allow_special=*/true);
  // The longest special token wins where two start at the same place.
  EXPECT_EQ(ids, (std::vector<int32_t>{'a', eot, 'b', padx, pad}));
  EXPECT_EQ(tok.decode(ids), text);
  std::vector<int32_t> plain = tok.encode(text);
  for (int32_t id : plain) EXPECT_LT(id, eot);
  EXPECT_EQ(tok.decode(plain), text);
}

TEST(BpeTokenizer, SavesAndLoads) {
  TempDir dir;
  BpeTrainOptions o;
  o.vocab_size = 500;
  o.special_tokens = {"<|endoftext|>", "<|im_start|>"};
  BpeTokenizer tok = BpeTokenizer::train(synthetic_corpus(30'000, 4), o);
  tok.save(dir.file("tok.json"));
  BpeTokenizer back = BpeTokenizer::load(dir.file("tok.json"));
  EXPECT_EQ(back.merges(), tok.merges());
  EXPECT_EQ(back.special_tokens(), tok.special_tokens());
  EXPECT_EQ(back.eot_id(), tok.eot_id());
  std::string text = "sen ulmo<|im_start|> karito";
  EXPECT_EQ(back.encode(text, true), tok.encode(text, true));
  // Only the saved file is in the folder: the atomic write left no temporary behind.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()),
                          std::filesystem::directory_iterator()),
            1);
}

TEST(BpeTokenizer, RejectsHostileFiles) {
  TempDir dir;
  BpeTokenizer tok(Merges{{'a', 'b'}, {256, 'c'}}, {"<|endoftext|>"}, "<|endoftext|>");
  const nlohmann::json good = tok.to_json();
  auto check = [&](const std::string& content, std::initializer_list<std::string_view> parts) {
    write_bytes(dir.file("bad.json"), content);
    expect_error([&] { BpeTokenizer::load(dir.file("bad.json")); }, parts);
  };
  auto with = [&](const char* key, const nlohmann::json& value) {
    nlohmann::json j = good;
    j[key] = value;
    return j.dump();
  };
  check("{\"format\": \"tessera-bpe\", ", {"bad.json", "not valid JSON"});
  check("", {"bad.json", "not valid JSON"});
  check("[1, 2]", {"bad.json", "expected a JSON object"});
  // Printing a 30000-level 'format' in the error overflowed the stack (fuzz/tokenizer).
  check(R"({"format": )" + std::string(30000, '[') + std::string(30000, ']') + "}",
        {"bad.json", "nests deeper than 64 levels"});
  check(with("format", "sentencepiece"), {"'format' is \"sentencepiece\""});
  check(with("version", 2), {"'version' is 2, expected 1"});
  check(with("pretokenizer", "llama3"), {"'pretokenizer'"});
  check(with("merges", "ab"), {"'merges' must be an array"});
  check(with("merges", nlohmann::json::parse("[[97, 98, 99]]")), {"merges[0]", "pair"});
  check(with("merges", nlohmann::json::parse("[[97, \"b\"]]")), {"merges[0]", "pair"});
  check(with("merges", nlohmann::json::parse("[[97, 256]]")), {"merges[0]", "[0, 256)"});
  check(with("merges", nlohmann::json::parse("[[97, 98], [-1, 98]]")), {"merges[1]"});
  check(with("merges", nlohmann::json::parse("[[97, 98], [99, 100], [97, 98]]")),
        {"merge 2 repeats the pair (97, 98) of merge 0"});
  check(with("special_tokens", nlohmann::json::parse("[\"<|endoftext|>\", 5]")),
        {"special_tokens[1] must be a string"});
  check(with("special_tokens", nlohmann::json::parse("[\"<|endoftext|>\", \"<|endoftext|>\"]")),
        {"appears twice"});
  check(with("special_tokens", nlohmann::json::parse("[\"<|endoftext|>\", \"\"]")),
        {"special token 1 is empty"});
  check(with("eot_token", "<|eos|>"), {"'<|eos|>' is not among the special tokens"});
  check(with("vocab_size", 999), {"'vocab_size' is 999", "make 259"});
  nlohmann::json missing = good;
  missing.erase("merges");
  check(missing.dump(), {"missing field 'merges'"});
  expect_error([&] { BpeTokenizer::load(dir.file("absent.json")); }, {"absent.json"});
}

// Every truncation of a valid file either loads or throws tessera::Error.
TEST(BpeTokenizer, EveryTruncationFailsCleanly) {
  TempDir dir;
  BpeTokenizer tok(Merges{{'a', 'b'}, {256, 'c'}, {' ', 257}}, {"<|endoftext|>"}, "<|endoftext|>");
  tok.save(dir.file("tok.json"));
  std::string text = testing::read_all(dir.file("tok.json"));
  for (size_t n = 0; n < text.size(); ++n) {
    write_bytes(dir.file("cut.json"), text.substr(0, n));
    try {
      BpeTokenizer::load(dir.file("cut.json"));
    } catch (const Error&) {
    }
  }
}

TEST(BpeTokenizer, RejectsBadArguments) {
  BpeTokenizer tok(Merges{{'a', 'b'}}, {"<|endoftext|>"}, "<|endoftext|>");
  std::vector<int32_t> ids = {97, 258};
  expect_error([&] { tok.decode(ids); }, {"id 258 at position 1", "[0, 258)"});
  BpeTrainOptions o;
  o.vocab_size = 200;
  expect_error([&] { BpeTokenizer::train("abc", o); }, {"vocab_size 200", "257"});
  o.vocab_size = 300;
  o.eot_token = "<|eos|>";
  expect_error([&] { BpeTokenizer::train("abc", o); }, {"'<|eos|>'"});
  o.eot_token = "<|endoftext|>";
  o.special_tokens = {"<|endoftext|>", "bad \xff"};
  expect_error([&] { BpeTokenizer::train("abc", o); }, {"not valid UTF-8"});
}

// Measures training on ~1 MB (printed, not asserted: timing is a benchmark's job) and checks
// that the vocabulary it learns compresses held-out text of the same language.
TEST(BpeTokenizer, TrainsAFourThousandVocabOnAMegabyte) {
  std::string corpus = synthetic_corpus(1'000'000, 6);
  BpeTrainOptions o;
  o.vocab_size = 4096;
  auto start = std::chrono::steady_clock::now();
  BpeTokenizer tok = BpeTokenizer::train(corpus, o);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("BPE train: %zu bytes -> vocab %d in %.2f s\n", corpus.size(), tok.vocab_size(),
              seconds);
  EXPECT_EQ(tok.vocab_size(), 4096);
  std::string held_out = synthetic_corpus(100'000, 6000);
  std::vector<int32_t> ids = tok.encode(held_out);
  EXPECT_EQ(tok.decode(ids), held_out);
  double bytes_per_token = double(held_out.size()) / double(ids.size());
  std::printf("BPE held-out: %.2f bytes per token\n", bytes_per_token);
  // Measured 4.9 bytes per token (the frequent words become single tokens). 3 leaves room for
  // other tie-breaking or corpus draws and still fails if merges were not applied (1 byte per
  // token) or were applied out of rank order.
  EXPECT_GT(bytes_per_token, 3.0);
}

}  // namespace
}  // namespace tessera::data
