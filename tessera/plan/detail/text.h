#pragma once
// What the planner's files share: fixed-point numbers for its tables, and JSON text read with
// the depth guard and one-line errors naming the source.

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "tessera/core/error.h"
#include "tessera/core/json_depth.h"

namespace tessera::plan::detail {

// v to three significant digits: 0.05, 1.49, 828, 1.2e+03.
inline std::string significant(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", v);
  return b;
}

// v with `digits` decimals; from 1e15 on (a row of digits nobody reads, and at 1e300 more than
// any buffer), or when not finite, three significant digits: 2.4e+37.
inline std::string fixed(double v, int digits) {
  if (!std::isfinite(v) || std::fabs(v) >= 1e15) return significant(v);
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}

// As fixed, but a value between 0 and 1 gets three significant digits: a six-minute run is
// 0.00417 days, not 0.0.
inline std::string fixed_or_small(double v, int digits) {
  return v != 0 && std::fabs(v) < 1 ? significant(v) : fixed(v, digits);
}

// Throws "<what> must be in [lo, hi] <unit>, got v" unless v is finite and in range: every
// figure a plan takes has such a range (docs/planning.md lists them).
inline void check_in_range(double v, double lo, double hi, const std::string& what,
                           const std::string& unit = "") {
  TESSERA_CHECK(std::isfinite(v) && v >= lo && v <= hi, what, " must be in [", lo, ", ", hi, "]",
                unit.empty() ? std::string() : " " + unit, ", got ", v);
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
