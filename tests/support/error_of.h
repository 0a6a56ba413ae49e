#pragma once
// The message of the tessera::Error that `f` throws, or "no error": what the bad-input tests
// assert on (the op, the shapes, the rank, the file named in one line).

#include <functional>
#include <string>

#include "tessera/core/error.h"

namespace tessera::testing {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace tessera::testing
