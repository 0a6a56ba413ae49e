#pragma once
// Helpers for the data tests: a temporary folder removed at the end of the test, file writing,
// and a check that a call throws tessera::Error whose message contains given parts.

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <string>
#include <string_view>

#include "tessera/core/error.h"

namespace tessera::data::testing {

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "tessera_data_XXXXXX").string();
    path_ = ::mkdtemp(pattern.data()) ? pattern : std::string();
    EXPECT_FALSE(path_.empty()) << "mkdtemp failed";
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Plain (non-atomic) write, for building fixtures and corrupt files.
inline void write_bytes(const std::string& path, std::string_view bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

inline std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Runs fn, which must throw tessera::Error with every part in its message.
inline void expect_error(const std::function<void()>& fn,
                         std::initializer_list<std::string_view> parts) {
  try {
    fn();
    ADD_FAILURE() << "expected a tessera::Error";
  } catch (const Error& e) {
    std::string what = e.what();
    for (std::string_view part : parts) {
      EXPECT_NE(what.find(part), std::string::npos) << "'" << part << "' not in: " << what;
    }
  }
}

}  // namespace tessera::data::testing
