#include "tessera/core/json_depth.h"

#include "tessera/core/error.h"

namespace tessera {

std::optional<size_t> json_too_deep_at(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;  // the escaped character cannot end the string
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::nullopt;
}

void check_json_depth(std::string_view text, const std::string& source, int max_depth) {
  const std::optional<size_t> at = json_too_deep_at(text, max_depth);
  TESSERA_CHECK(!at, source, ": JSON nests deeper than ", max_depth, " levels at byte offset ",
                at.value_or(0), "; no Tessera file nests that deep");
}

}  // namespace tessera
