#pragma once
// Errors. User mistakes throw tessera::Error with a message that names the op and the offending
// shapes, dtypes and devices (or file, offset and expected value). Internal invariants use
// TESSERA_ASSERT, which throws InternalError rather than aborting: the library never exits.

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace tessera {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// A broken invariant inside Tessera: a bug in the library, not in the caller's input.
class InternalError : public Error {
 public:
  explicit InternalError(const std::string& message) : Error(message) {}
};

// Concatenates any streamable values into one string.
template <class... Args>
std::string str_cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

namespace detail {
template <class... Args>
[[noreturn]] void throw_error(Args&&... args) {
  throw Error(str_cat(std::forward<Args>(args)...));
}
[[noreturn]] void throw_internal(const char* file, int line, const char* cond,
                                 const std::string& message);
}  // namespace detail

}  // namespace tessera

// Throws tessera::Error with the concatenated message when cond is false.
#define TESSERA_CHECK(cond, ...)                   \
  do {                                             \
    if (!(cond)) [[unlikely]]                      \
      ::tessera::detail::throw_error(__VA_ARGS__); \
  } while (0)

// Internal invariant: throws tessera::InternalError naming file, line and condition.
#define TESSERA_ASSERT(cond, ...)                                                           \
  do {                                                                                      \
    if (!(cond)) [[unlikely]]                                                               \
      ::tessera::detail::throw_internal(__FILE__, __LINE__, #cond,                          \
                                        ::tessera::str_cat("" __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)
