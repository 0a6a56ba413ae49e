// Atomic files: a committed file appears whole, an abandoned one leaves nothing behind.

#include <gtest/gtest.h>

#include <filesystem>

#include "tessera/core/error.h"
#include "tessera/core/file_io.h"
#include "tessera/core/json_depth.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

class FileIo : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tessera_file_io_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  size_t entries() const { return size_t(std::distance(fs::directory_iterator(dir_), {})); }
  fs::path dir_;
};

TEST_F(FileIo, WriteReplacesAtomically) {
  std::string path = (dir_ / "a.txt").string();
  write_file_atomic(path, std::string("first"));
  write_file_atomic(path, std::string("second version"));
  EXPECT_EQ(read_text_file(path), "second version");
  EXPECT_EQ(entries(), 1u);  // no temporary left over
}

TEST_F(FileIo, AbandonedFileLeavesOldContentAndNoTemp) {
  std::string path = (dir_ / "b.bin").string();
  write_file_atomic(path, std::string("old"));
  {
    AtomicFile f(path);
    f.write("new partial", 11);
    EXPECT_EQ(f.bytes_written(), 11u);
  }  // destroyed before commit, as when an exception unwinds
  EXPECT_EQ(read_text_file(path), "old");
  EXPECT_EQ(entries(), 1u);
}

TEST_F(FileIo, ErrorsNameThePath) {
  std::string bad = (dir_ / "missing_dir" / "c.txt").string();
  try {
    write_file_atomic(bad, std::string("x"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing_dir"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_file((dir_ / "nope").string()), Error);
}

TEST_F(FileIo, PublishDirectoryRenamesOnce) {
  fs::create_directories(dir_ / "tmp_ckpt");
  write_file_atomic((dir_ / "tmp_ckpt" / "x").string(), std::string("1"));
  publish_directory((dir_ / "tmp_ckpt").string(), (dir_ / "ckpt").string());
  EXPECT_TRUE(fs::exists(dir_ / "ckpt" / "x"));
  EXPECT_FALSE(fs::exists(dir_ / "tmp_ckpt"));
  fs::create_directories(dir_ / "tmp2");
  EXPECT_THROW(publish_directory((dir_ / "tmp2").string(), (dir_ / "ckpt").string()), Error);
}

}  // namespace
TEST(JsonDepth, RefusesDeepNestingNamingTheOffset) {
  // 30000 '[' overflowed the stack when a reader copied or printed the parsed value (found by
  // fuzz/checkpoint_state, fuzz/tokenizer and fuzz/train_config).
  const std::string deep = "{\"a\": " + std::string(30000, '[') + std::string(30000, ']') + "}";
  try {
    check_json_depth(deep, "state.json");
    ADD_FAILURE() << "accepted 30001 levels";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("state.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find("deeper than 64 levels at byte offset 69"), std::string::npos) << msg;
  }
  // 64 levels pass; brackets inside strings, escaped quotes included, do not count.
  check_json_depth(std::string(64, '[') + std::string(64, ']'), "ok.json");
  check_json_depth("{\"k\": \"[[[[\\\"[[[[\"}", "ok.json", 1);
  EXPECT_THROW(check_json_depth("[[", "x.json", 1), Error);
  // Not JSON at all is the parser's to report.
  check_json_depth("]]]} not json", "x.json", 1);
}

}  // namespace tessera
