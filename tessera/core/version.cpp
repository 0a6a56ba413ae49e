#include "tessera/core/version.h"

#include "tessera/core/error.h"

#ifndef TESSERA_VERSION_STRING
#error "tessera/core/CMakeLists.txt defines TESSERA_VERSION_STRING from the project version"
#endif

namespace tessera {

const char* version() {
  return TESSERA_VERSION_STRING;
}

void check_format_version(const std::string& where, const std::string& format,
                          std::optional<int64_t> found, const std::string& found_text,
                          int64_t supported) {
  TESSERA_CHECK(found.has_value() && *found >= 1, where, ": ", found_text, " is not a ", format,
                " version (an integer from 1; this Tessera reads up to ", supported, ")");
  TESSERA_CHECK(*found <= supported, where, ": ", format, " version ", *found,
                " is newer than this Tessera (", version(), ") reads (", supported,
                "); upgrade Tessera to read it");
}

}  // namespace tessera
