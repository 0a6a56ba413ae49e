#pragma once
// What every fuzz target shares: the contract (a reader returns or throws tessera::Error;
// anything else escaping, a crash or a sanitizer report is a finding) and a per-process
// scratch file for readers that take a path.

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "tessera/core/error.h"

namespace tessera::fuzz {

// A scratch directory of this process (removed at exit), created on first use.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    char tmpl[] = "/tmp/tessera_fuzz.XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) std::abort();
    std::string d = tmpl;
    static std::string removal = d;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(removal, ec);
    });
    return d;
  }();
  return dir;
}

// Writes bytes to <scratch>/name (whole, truncating; folders in name are made) and returns the
// path.
inline std::string write_input(const std::string& name, std::string_view bytes) {
  const std::string path = scratch_dir() + "/" + name;
  if (const size_t slash = path.rfind('/'); slash > scratch_dir().size())
    std::filesystem::create_directories(path.substr(0, slash));
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) std::abort();
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) std::abort();
    done += size_t(n);
  }
  ::close(fd);
  return path;
}

inline std::string write_input(const std::string& name, const uint8_t* data, size_t size) {
  return write_input(name, std::string_view(reinterpret_cast<const char*>(data), size));
}

// Runs f; a tessera::Error is the reader refusing the input, which is correct. An
// InternalError (a broken invariant, though it is a tessera::Error too) is a finding, as is
// any other exception, which libFuzzer reports as a crash when it escapes.
template <class F>
int expect_value_or_error(F&& f) {
  try {
    f();
  } catch (const tessera::InternalError& e) {
    std::fprintf(stderr, "fuzz: InternalError escaped the reader: %s\n", e.what());
    std::abort();
  } catch (const tessera::Error& e) {
    // TESSERA_FUZZ_VERBOSE=1 shows why each input was refused (to check that seeds load).
    static const bool verbose = std::getenv("TESSERA_FUZZ_VERBOSE") != nullptr;
    if (verbose) std::fprintf(stderr, "fuzz: refused: %s\n", e.what());
    return 0;
  }
  static const bool verbose = std::getenv("TESSERA_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "fuzz: loaded\n");
  return 0;
}

}  // namespace tessera::fuzz
