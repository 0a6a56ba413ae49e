#pragma once
// A guard for JSON text from files: nlohmann parses any depth, but copying, comparing and
// printing a parsed value recurse once per level, so a file of 30000 '[' overflowed the stack
// (found with fuzz/checkpoint_state, fuzz/tokenizer and fuzz/train_config). Every JSON file
// Tessera reads nests a few levels; readers check the text before parsing it.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace tessera {

// Deeper than any file Tessera writes or reads (a checkpoint's state.json nests about 6).
inline constexpr int kMaxJsonDepth = 64;

// The byte offset of the bracket that opens level max_depth + 1, or nothing when text nests
// arrays and objects no deeper than that. Brackets inside strings do not count. Text that is
// not JSON is not judged: the parser reports it.
std::optional<size_t> json_too_deep_at(std::string_view text, int max_depth = kMaxJsonDepth);

// Throws tessera::Error naming source and the byte offset of the bracket that opens level
// max_depth + 1 (json_too_deep_at).
void check_json_depth(std::string_view text, const std::string& source,
                      int max_depth = kMaxJsonDepth);

}  // namespace tessera
