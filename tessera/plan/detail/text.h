#pragma once
// What the planner's files share: fixed-point numbers for its tables, and JSON text read with
// the depth guard and one-line errors naming the source.

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "tessera/core/error.h"
#include "tessera/core/json_depth.h"

namespace tessera::plan::detail {

inline std::string fixed(double v, int digits) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}

// Throws tessera::Error naming `source` when the text nests too deep or is not JSON.
inline nlohmann::json parse_json(const std::string& text, const std::string& source) {
  check_json_depth(text, source);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    tessera::detail::throw_error(source, ": not JSON: ", e.what());
  }
}

}  // namespace tessera::plan::detail
