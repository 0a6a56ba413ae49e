// Atomic files: a committed file appears whole, an abandoned one leaves nothing behind.

#include <gtest/gtest.h>

#include <filesystem>

#include "tessera/core/error.h"
#include "tessera/core/file_io.h"

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
}  // namespace tessera
