#pragma once
// Versions. The library's is the CMake project's (tessera::version(), and the installed
// package's tesseraConfigVersion.cmake, so an embedding project can pin it). Each file format
// Tessera writes carries an integer version that its reader checks with check_format_version,
// so that a file from a newer Tessera is refused in one line instead of being misread.
// docs/formats.md records what changed in each version.

#include <cstdint>
#include <optional>
#include <string>

namespace tessera {

// "0.1.0": major.minor.patch of this build.
const char* version();

// Throws tessera::Error unless `found` is a version of `format` this build reads (1 to
// `supported`). `where` names the file (and field); `found_text` is the value as written, for
// the message when it is not an integer (`found` empty). A newer version says so and names
// this build's version: "<where>: tessera-checkpoint version 3 is newer than this Tessera
// (0.1.0) reads (1); upgrade Tessera to read it".
void check_format_version(const std::string& where, const std::string& format,
                          std::optional<int64_t> found, const std::string& found_text,
                          int64_t supported);

}  // namespace tessera
