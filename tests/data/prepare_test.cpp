#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/data_test_util.h"
#include "tessera/core/file_io.h"
#include "tessera/core/ops/creation.h"
#include "tessera/data/bpe_tokenizer.h"
#include "tessera/data/loader.h"
#include "tessera/data/prepare.h"

namespace tessera::data {
namespace {

using testing::expect_error;
using testing::TempDir;
using testing::write_bytes;

// The tokens of every shard of a split, in order.
std::vector<int32_t> split_tokens(const ShardSplit& split) {
  std::vector<int32_t> all;
  for (const std::string& f : split.files) {
    std::vector<int32_t> t = TokenShard(f).tokens();
    all.insert(all.end(), t.begin(), t.end());
  }
  return all;
}

std::vector<int32_t> with_eot(const std::string& text) {
  std::vector<int32_t> ids = ByteTokenizer().encode(text);
  ids.insert(ids.begin(), ByteTokenizer::kEot);
  return ids;
}

void append(std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
}

// in/a.txt, in/c.md, in/sub/b.txt are documents; the hidden file, the .bin file and the empty
// file are not.
void make_inputs(const TempDir& dir) {
  write_bytes(dir.file("in/a.txt"), "alpha one\nalpha two\n");
  write_bytes(dir.file("in/c.md"), "# gamma\n");
  write_bytes(dir.file("in/sub/b.txt"), "beta\n");
  write_bytes(dir.file("in/sub/.hidden.txt"), "hidden\n");
  write_bytes(dir.file("in/.git/config.txt"), "hidden folder\n");
  write_bytes(dir.file("in/data.bin"), "binary");
  write_bytes(dir.file("in/empty.txt"), "");
}

TEST(Prepare, ListsInputsInADeterministicOrder) {
  TempDir dir;
  make_inputs(dir);
  write_bytes(dir.file("extra.bin"), "named directly");
  std::vector<std::string> files =
      list_input_files({dir.file("in"), dir.file("extra.bin")}, {".txt", ".md"});
  EXPECT_EQ(files, (std::vector<std::string>{dir.file("in/a.txt"), dir.file("in/c.md"),
                                             dir.file("in/empty.txt"), dir.file("in/sub/b.txt"),
                                             dir.file("extra.bin")}));
  expect_error([&] { list_input_files({dir.file("absent")}, {}); }, {"absent", "does not exist"});
}

TEST(Prepare, WritesShardsDocumentsAndManifest) {
  TempDir dir;
  make_inputs(dir);
  PrepareOptions o;
  o.inputs = {dir.file("in")};
  o.output_dir = dir.file("out");
  o.prefix = "tiny";
  o.shard_tokens = 10;
  o.val_fraction = 0.0;
  o.tokenizer_source = "byte";
  PrepareSummary s = prepare_shards(ByteTokenizer(), o);

  std::vector<int32_t> expected = with_eot("alpha one\nalpha two\n");
  append(expected, with_eot("# gamma\n"));
  append(expected, with_eot("beta\n"));
  EXPECT_EQ(split_tokens(s.train), expected);
  EXPECT_EQ(s.train.total_tokens, int64_t(expected.size()));  // 36
  ASSERT_EQ(s.train.files.size(), 4u);                        // 10 + 10 + 10 + 6
  EXPECT_EQ(s.train.tokens.back(), 6);
  EXPECT_EQ(s.train.files[0], dir.file("out/tiny_train_000000.bin"));
  EXPECT_EQ(s.train.files[3], dir.file("out/tiny_train_000003.bin"));
  EXPECT_TRUE(s.val.files.empty());
  EXPECT_EQ(s.documents, 3);
  EXPECT_EQ(s.input_files, 4);  // the empty file is listed but holds no document
  EXPECT_EQ(s.dtype, TokenDType::u16);

  nlohmann::json m = nlohmann::json::parse(read_text_file(s.manifest_path));
  EXPECT_EQ(s.manifest_path, dir.file("out/tiny_manifest.json"));
  EXPECT_EQ(m["tokenizer"]["kind"], "byte");
  EXPECT_EQ(m["tokenizer"]["source"], "byte");
  EXPECT_EQ(m["tokenizer"]["eot_id"], 256);
  EXPECT_EQ(m["token_dtype"], "uint16");
  EXPECT_EQ(m["train"]["tokens"], 36);
  EXPECT_EQ(m["train"]["shards"][1]["file"], "tiny_train_000001.bin");
  EXPECT_EQ(m["inputs"]["documents"], 3);

  // The loader reads them.
  LoaderOptions lo;
  lo.batch_size = 1;
  lo.seq_len = 4;
  lo.shuffle = false;
  lo.vocab_size = 257;
  DataLoader loader(dir.file("out/tiny_train_*.bin"), lo);
  EXPECT_EQ(to_vector<int64_t>(loader.next().inputs), (std::vector<int64_t>{256, 'a', 'l', 'p'}));
}

TEST(Prepare, SplitsValidationAtALineEnd) {
  TempDir dir;
  write_bytes(dir.file("in/a.txt"), "first line\nsecond line\nthird line\n");
  write_bytes(dir.file("in/b.txt"), "other doc\n");
  PrepareOptions o;
  o.inputs = {dir.file("in")};
  o.output_dir = dir.file("out");
  o.val_fraction = 0.25;  // ceil(0.25 * 44) = 11 bytes: exactly "first line\n"
  PrepareSummary s = prepare_shards(ByteTokenizer(), o);
  EXPECT_EQ(split_tokens(s.val), with_eot("first line\n"));
  std::vector<int32_t> train = ByteTokenizer().encode("second line\nthird line\n");
  append(train, with_eot("other doc\n"));
  EXPECT_EQ(split_tokens(s.train), train);
  EXPECT_EQ(s.val.files[0], dir.file("out/data_val_000000.bin"));

  // 0.3 * 44 = 13.2 -> 14 bytes ends inside "second line", so the cut moves to its end.
  o.val_fraction = 0.3;
  o.overwrite = true;
  s = prepare_shards(ByteTokenizer(), o);
  EXPECT_EQ(split_tokens(s.val), with_eot("first line\nsecond line\n"));
}

TEST(Prepare, RefusesToMixWithAnEarlierRun) {
  TempDir dir;
  write_bytes(dir.file("in/a.txt"), std::string(100, 'x'));
  PrepareOptions o;
  o.inputs = {dir.file("in")};
  o.output_dir = dir.file("out");
  o.shard_tokens = 20;
  o.val_fraction = 0.0;
  prepare_shards(ByteTokenizer(), o);  // 101 tokens: 6 shards
  EXPECT_TRUE(std::filesystem::exists(dir.file("out/data_train_000005.bin")));
  write_bytes(dir.file("out/keep.bin"), "someone else's file");
  o.shard_tokens = 60;
  expect_error([&] { prepare_shards(ByteTokenizer(), o); },
               {"data_manifest.json", "already exist", "prefix 'data'"});
  o.overwrite = true;
  PrepareSummary s = prepare_shards(ByteTokenizer(), o);
  EXPECT_EQ(s.train.files.size(), 2u);
  // The stale shards of the first run are gone; other files are untouched.
  EXPECT_FALSE(std::filesystem::exists(dir.file("out/data_train_000005.bin")));
  EXPECT_TRUE(std::filesystem::exists(dir.file("out/keep.bin")));
}

TEST(Prepare, SpecialTokensInTextOnlyWhenAllowed) {
  TempDir dir;
  write_bytes(dir.file("in/a.txt"), "x<|endoftext|>y");
  PrepareOptions o;
  o.inputs = {dir.file("in/a.txt")};
  o.output_dir = dir.file("out");
  o.val_fraction = 0.0;
  PrepareSummary s = prepare_shards(ByteTokenizer(), o);
  EXPECT_EQ(s.train.total_tokens, 1 + 15);
  o.allow_special = true;
  o.overwrite = true;
  s = prepare_shards(ByteTokenizer(), o);
  EXPECT_EQ(split_tokens(s.train), (std::vector<int32_t>{256, 'x', 256, 'y'}));
}

TEST(Prepare, LargeVocabularyWritesUint32Shards) {
  // Every byte pair merged: 256 + 65536 + 1 ids, more than uint16 holds.
  std::vector<BpeTokenizer::MergePair> merges;
  for (int a = 0; a < 256; ++a) {
    for (int b = 0; b < 256; ++b) merges.emplace_back(a, b);
  }
  BpeTokenizer tok(std::move(merges), {"<|endoftext|>"}, "<|endoftext|>");
  TempDir dir;
  write_bytes(dir.file("in/a.txt"), "wxyz");
  PrepareOptions o;
  o.inputs = {dir.file("in")};
  o.output_dir = dir.file("out");
  o.val_fraction = 0.0;
  PrepareSummary s = prepare_shards(tok, o);
  EXPECT_EQ(s.dtype, TokenDType::u32);
  EXPECT_EQ(TokenShard(s.train.files[0]).header().magic, kLlama3ShardMagic);
  EXPECT_EQ(split_tokens(s.train),
            (std::vector<int32_t>{tok.eot_id(), 256 + 'w' * 256 + 'x', 256 + 'y' * 256 + 'z'}));
}

TEST(Prepare, RejectsBadOptions) {
  TempDir dir;
  write_bytes(dir.file("in/a.txt"), "one line only");
  PrepareOptions o;
  o.inputs = {dir.file("in")};
  o.output_dir = dir.file("out");
  o.val_fraction = 0.5;  // the single line all goes to validation
  expect_error([&] { prepare_shards(ByteTokenizer(), o); }, {"training split is empty"});
  o.val_fraction = 1.0;
  expect_error([&] { prepare_shards(ByteTokenizer(), o); }, {"val_fraction"});
  o.val_fraction = 0.0;
  o.shard_tokens = 0;
  expect_error([&] { prepare_shards(ByteTokenizer(), o); }, {"shard_tokens"});
  o.shard_tokens = 100;
  o.inputs = {dir.file("in/missing.txt")};
  expect_error([&] { prepare_shards(ByteTokenizer(), o); }, {"missing.txt"});
  o.inputs = {dir.file("in")};
  o.extensions = {".json"};
  expect_error([&] { prepare_shards(ByteTokenizer(), o); }, {"no files"});
}

}  // namespace
}  // namespace tessera::data
