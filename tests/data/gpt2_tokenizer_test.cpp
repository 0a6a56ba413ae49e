#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/data_test_util.h"
#include "tessera/data/bpe_tokenizer.h"
#include "tessera/data/gpt2_tokenizer.h"
#include "tessera/data/load_tokenizer.h"

namespace tessera::data {
namespace {

using testing::expect_error;
using testing::TempDir;
using testing::write_bytes;

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s.push_back(char(cp));
  } else if (cp < 0x800) {
    s.push_back(char(0xC0 | (cp >> 6)));
    s.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    s.push_back(char(0xE0 | (cp >> 12)));
    s.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    s.push_back(char(0x80 | (cp & 0x3F)));
  }
  return s;
}

// GPT-2's first 256 ids, derived here from the published definition: the printable bytes in
// increasing order, then the other 68 bytes, which are written as U+0100 onwards.
struct ByteTable {
  std::vector<int> byte_of_id;  // id -> byte
  std::vector<int> id_of_byte = std::vector<int>(256);
  std::vector<std::string> char_of_byte = std::vector<std::string>(256);
  ByteTable() {
    auto printable = [](int b) {
      return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    };
    for (int b = 0; b < 256; ++b) {
      if (printable(b)) byte_of_id.push_back(b);
    }
    for (int b = 0; b < 256; ++b) {
      if (!printable(b)) byte_of_id.push_back(b);
    }
    for (int id = 0; id < 256; ++id) {
      int b = byte_of_id[size_t(id)];
      id_of_byte[size_t(b)] = id;
      char_of_byte[size_t(b)] = utf8(printable(b) ? uint32_t(b) : uint32_t(256 + id - 188));
    }
  }
  int id(char c) const { return id_of_byte[static_cast<unsigned char>(c)]; }
};

const ByteTable& bytes() {
  static const ByteTable t;
  return t;
}

// A small vocabulary in GPT-2's file formats: the 256 byte tokens, six merges, and EOT.
nlohmann::json small_encoder() {
  nlohmann::json enc = nlohmann::json::object();
  for (int id = 0; id < 256; ++id)
    enc[bytes().char_of_byte[size_t(bytes().byte_of_id[size_t(id)])]] = id;
  const std::string G = utf8(0x120);  // 'Ġ', GPT-2's space
  enc["he"] = 256;
  enc["ll"] = 257;
  enc[G + "t"] = 258;
  enc[G + "the"] = 259;
  enc["hell"] = 260;
  enc["hello"] = 261;
  enc["<|endoftext|>"] = 262;
  return enc;
}

const std::string kMerges = "#version: 0.2\nh e\nl l\n\xc4\xa0 t\n\xc4\xa0t he\nhe ll\nhell o\n";

void write_files(const TempDir& dir, const std::string& encoder, const std::string& merges) {
  write_bytes(dir.file("encoder.json"), encoder);
  write_bytes(dir.file("vocab.bpe"), merges);
}

TEST(Gpt2Tokenizer, ByteAlphabetMatchesGpt2) {
  EXPECT_EQ(gpt2_byte_to_char(' '), 0x120u);   // 'Ġ'
  EXPECT_EQ(gpt2_byte_to_char('\n'), 0x10Au);  // 'Ċ'
  EXPECT_EQ(gpt2_byte_to_char('A'), uint32_t('A'));
  EXPECT_EQ(gpt2_byte_to_char(0xAD), 0x143u);  // soft hyphen -> 'Ń', the last shifted byte
  EXPECT_EQ(gpt2_byte_to_char(0xE9), 0xE9u);
  // The real vocabulary's ids for these bytes: '!' 0, '\n' 198, ' ' 220, 'w' 86.
  EXPECT_EQ(bytes().id('!'), 0);
  EXPECT_EQ(bytes().id('\n'), 198);
  EXPECT_EQ(bytes().id(' '), 220);
  EXPECT_EQ(bytes().id('w'), 86);
}

TEST(Gpt2Tokenizer, EncodesAsciiLikeGpt2) {
  TempDir dir;
  write_files(dir, small_encoder().dump(), kMerges);
  Gpt2Tokenizer tok = Gpt2Tokenizer::load_dir(dir.path());
  EXPECT_EQ(tok.vocab_size(), 263);
  EXPECT_EQ(tok.num_merges(), 6);
  EXPECT_EQ(tok.eot_id(), 262);
  const ByteTable& b = bytes();
  // "hello": he, ll, then he+ll, then hell+o. " the": (h e) outranks (Ġ t), then Ġt+he.
  EXPECT_EQ(tok.encode("hello the world"),
            (std::vector<int32_t>{261, 259, b.id(' '), b.id('w'), b.id('o'), b.id('r'), b.id('l'),
                                  b.id('d')}));
  EXPECT_EQ(tok.encode("Hello"), (std::vector<int32_t>{b.id('H'), b.id('e'), 257, b.id('o')}));
  EXPECT_EQ(tok.encode("the\n"), (std::vector<int32_t>{b.id('t'), 256, 198}));
  // Merges never cross the pre-tokeniser's chunks: "o" and " the" stay apart.
  EXPECT_EQ(tok.encode("hello  the"), (std::vector<int32_t>{261, 220, 259}));
}

TEST(Gpt2Tokenizer, RoundTripsAndHandlesSpecialTokens) {
  TempDir dir;
  write_files(dir, small_encoder().dump(), kMerges);
  Gpt2Tokenizer tok = Gpt2Tokenizer::load(dir.file("encoder.json"), dir.file("vocab.bpe"));
  std::vector<int32_t> ids = tok.encode("hello<|endoftext|>the", true);
  EXPECT_EQ(ids, (std::vector<int32_t>{261, 262, bytes().id('t'), 256}));
  EXPECT_EQ(tok.decode(ids), "hello<|endoftext|>the");
  std::vector<int32_t> plain = tok.encode("<|endoftext|>");
  EXPECT_EQ(plain.size(), 13u);  // no merges apply to "<|endoftext|>" as text
  EXPECT_EQ(tok.decode(plain), "<|endoftext|>");
  EXPECT_EQ(tok.special_id("<|endoftext|>"), 262);
  std::mt19937 rng(11);
  for (int t = 0; t < 100; ++t) {
    std::string s(rng() % 100, '\0');
    for (char& c : s) c = char(rng() % 256);
    EXPECT_EQ(tok.decode(tok.encode(s)), s);
  }
  std::vector<int32_t> bad = {1, 263};
  expect_error([&] { tok.decode(bad); }, {"id 263 at position 1"});
}

TEST(Gpt2Tokenizer, RejectsHostileFiles) {
  TempDir dir;
  const std::string good = small_encoder().dump();
  auto check = [&](const std::string& encoder, const std::string& merges,
                   std::initializer_list<std::string_view> parts) {
    write_files(dir, encoder, merges);
    expect_error([&] { Gpt2Tokenizer::load_dir(dir.path()); }, parts);
  };
  auto edited = [](auto&& edit) {
    nlohmann::json j = small_encoder();
    edit(j);
    return j.dump();
  };
  check("{\"a\": 1,", kMerges, {"encoder.json", "not valid JSON"});
  check("[1]", kMerges, {"encoder.json", "expected a JSON object"});
  check(R"({"a": )" + std::string(30000, '[') + std::string(30000, ']') + "}", kMerges,
        {"encoder.json", "nests deeper than 64 levels"});
  check(edited([](auto& j) { j["he"] = "x"; }), kMerges, {"\"he\" maps to \"x\""});
  check(edited([](auto& j) { j["he"] = 263; }), kMerges, {"\"he\" has id 263", "must be 0..262"});
  check(edited([](auto& j) { j["he"] = 257; }), kMerges, {"id 257 is given to both"});
  // The same key twice in the file text.
  std::string twice = good;
  twice.insert(1, "\"hello\":261,");
  check(twice, kMerges, {"\"hello\" appears more than once"});
  check(edited([](auto& j) { j[utf8(0x20AC)] = 263; }), kMerges,
        {"U+20ac", "outside GPT-2's byte alphabet"});
  check(edited([](auto& j) {
          j.erase(utf8(0x120));
          j["he"] = 220;
          j.erase("<|endoftext|>");
          j["<|endoftext|>"] = 256;
        }),
        "", {"no token for byte 0x20"});
  check(edited([](auto& j) { j.erase("<|endoftext|>"); }), kMerges, {"no \"<|endoftext|>\" token"});

  check(good, "#version: 0.2\nh e\nll\n", {"vocab.bpe", "line 3", "two tokens"});
  check(good, "#version: 0.2\nh e\nl l o\n", {"line 3", "two tokens"});
  check(good, "h e\nx yz\n", {"line 2", "\"yz\" is not in"});
  check(good, "h e\nh l\n", {"line 2", "merged token \"hl\" is not in"});
  check(good, "#version: 0.2\nh e\nl l\nh e\n", {"line 4", "repeats the merge on line 2"});
  expect_error([&] { Gpt2Tokenizer::load_dir(dir.file("absent")); }, {"absent"});
}

// Every truncation of valid files either loads or throws tessera::Error.
TEST(Gpt2Tokenizer, EveryTruncationFailsCleanly) {
  const std::string encoder = small_encoder().dump();
  for (size_t n = 0; n < encoder.size(); n += 7) {
    try {
      Gpt2Tokenizer::parse(encoder.substr(0, n), kMerges, "encoder.json", "vocab.bpe");
    } catch (const Error&) {
    }
  }
  for (size_t n = 0; n <= kMerges.size(); ++n) {
    try {
      Gpt2Tokenizer::parse(encoder, kMerges.substr(0, n), "encoder.json", "vocab.bpe");
    } catch (const Error&) {
    }
  }
}

TEST(LoadTokenizer, DetectsTheKind) {
  TempDir dir;
  write_files(dir, small_encoder().dump(), kMerges);
  EXPECT_EQ(load_tokenizer("byte")->kind(), "byte");
  EXPECT_EQ(load_tokenizer(dir.path())->kind(), "gpt2");
  EXPECT_EQ(load_tokenizer(dir.file("encoder.json"))->vocab_size(), 263);
  BpeTokenizer bpe({{'a', 'b'}}, {"<|endoftext|>"}, "<|endoftext|>");
  bpe.save(dir.file("bpe.json"));
  auto loaded = load_tokenizer(dir.file("bpe.json"));
  EXPECT_EQ(loaded->kind(), "bpe");
  EXPECT_EQ(loaded->encode("ab"), std::vector<int32_t>{256});

  expect_error([&] { load_tokenizer(dir.file("nope.json")); }, {"nope.json", "is not \"byte\""});
  write_bytes(dir.file("other/x.json"), "{\"a\": 1}");
  expect_error([&] { load_tokenizer(dir.file("other/x.json")); },
               {"x.json", "neither a Tessera BPE file"});
  write_bytes(dir.file("other/y.json"), "not json");
  expect_error([&] { load_tokenizer(dir.file("other/y.json")); }, {"y.json", "not valid JSON"});
  expect_error([&] { load_tokenizer(dir.file("other")); }, {"other", "encoder.json and vocab.bpe"});
}

}  // namespace
}  // namespace tessera::data
