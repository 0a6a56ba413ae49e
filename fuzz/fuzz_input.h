#pragma once
// What every fuzz target shares: the contract (a reader returns or throws tessera::Error;
// anything else escaping, a crash or a sanitizer report is a finding) and a per-process
// scratch file for readers that take a path.

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tessera/core/error.h"

namespace tessera::fuzz {

// A scratch directory of this process (removed at exit), created on first use.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    char tmpl[] = "/tmp/tessera_fuzz.XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) std::abort();
    std::string d = tmpl;
    static std::string removal = d;
    std::atexit([] { std::system(("rm -rf '" + removal + "'").c_str()); });
    return d;
  }();
  return dir;
}

// Writes the input to <scratch>/name (whole, truncating) and returns the path.
inline std::string write_input(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = scratch_dir() + "/" + name;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) std::abort();
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n <= 0) std::abort();
    done += size_t(n);
  }
  ::close(fd);
  return path;
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
  } catch (const tessera::Error&) {
  }
  return 0;
}

}  // namespace tessera::fuzz
