#pragma once
// Helpers shared by the weight-file and checkpoint tests: a scratch directory, raw file bytes,
// exact tensor comparison and error-message checks.

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>

#include "tessera/core/error.h"
#include "tessera/core/ops/movement.h"
#include "tessera/core/tensor.h"
#include "tessera/nn/module.h"

namespace tessera::nn::testing {

// A fresh directory under the system temp dir, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ =
        std::filesystem::temp_directory_path() / ("tessera_io_test." + std::to_string(::getpid()) +
                                                  "." + std::to_string(counter.fetch_add(1)));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string path() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Flips one bit three bytes before the end of a tensor file: it keeps its size and stays a
// valid safetensors file (the bit is in its last tensor's data), so only its checksum can tell.
inline void flip_a_data_bit(const std::string& path) {
  std::string bytes = read_bytes(path);
  ASSERT_GE(bytes.size(), 3u) << path;
  bytes[bytes.size() - 3] ^= 0x10;
  write_bytes(path, bytes);
}

// Same dtype, shape and bytes (bit-exact, NaN payloads included).
inline bool same_tensor(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.dtype() != b.dtype() || a.shape() != b.shape())
    return false;
  Tensor ca = ops::contiguous(a), cb = ops::contiguous(b);
  return ca.nbytes() == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

// The same names in the same order, each tensor bit-exact.
inline void expect_same_dict(const StateDict& a, const StateDict& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_TRUE(same_tensor(a[i].second, b[i].second)) << a[i].first;
  }
}

// Runs f, which must throw tessera::Error; returns its message ("" after a test failure).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected tessera::Error, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected tessera::Error, nothing was thrown";
  return "";
}

// Every fragment occurs in message.
inline ::testing::AssertionResult mentions(const std::string& message,
                                           std::initializer_list<std::string> fragments) {
  for (const std::string& f : fragments)
    if (message.find(f) == std::string::npos)
      return ::testing::AssertionFailure() << "'" << f << "' not in: " << message;
  return ::testing::AssertionSuccess();
}

}  // namespace tessera::nn::testing
