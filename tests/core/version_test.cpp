// tessera::version() is the CMake project version, and check_format_version refuses what a
// reader cannot read in one line.

#include <gtest/gtest.h>

#include <string>

#include "tessera/core/version.h"
#include "tessera/tessera.h"

namespace tessera {
namespace {

TEST(Version, IsTheProjectVersion) {
  EXPECT_STREQ(version(), TESSERA_TEST_PROJECT_VERSION);
}

TEST(Version, FormatVersionsFromOneToTheSupported) {
  EXPECT_NO_THROW(check_format_version("f", "tessera-x", 1, "1", 2));
  EXPECT_NO_THROW(check_format_version("f", "tessera-x", 2, "2", 2));
  auto message = [](std::optional<int64_t> found, const std::string& text) {
    try {
      check_format_version("run/state.json 'version'", "tessera-x", found, text, 2);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(3, "3"),
            str_cat("run/state.json 'version': tessera-x version 3 is newer ",
                    "than this Tessera (", version(), ") reads (2); upgrade Tessera to read it"));
  EXPECT_EQ(message(0, "0"),
            "run/state.json 'version': 0 is not a tessera-x version (an integer "
            "from 1; this Tessera reads up to 2)");
  EXPECT_NE(message(std::nullopt, "\"two\"").find("\"two\" is not a tessera-x version"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera
