#include "tessera/core/error.h"

namespace tessera::detail {

void throw_internal(const char* file, int line, const char* cond, const std::string& message) {
  throw InternalError(str_cat("tessera internal error at ", file, ":", line, ": ", cond,
                              message.empty() ? "" : " (", message, message.empty() ? "" : ")"));
}

}  // namespace tessera::detail
