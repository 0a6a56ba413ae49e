#include "tessera/parallel/comm/rank_files.h"

#include <algorithm>
#include <filesystem>
#include <regex>

#include "tessera/core/error.h"
#include "tessera/core/file_io.h"
#include "tessera/core/json_depth.h"

namespace tessera::parallel {

std::vector<RankFile> read_rank_json_files(const std::string& dir, const std::string& what,
                                           std::vector<std::string>* unreadable) {
  namespace fs = std::filesystem;
  static const std::regex name(R"(rank_([0-9]{1,9})\.json)");  // 9 digits: an int, never more
  std::vector<RankFile> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::smatch m;
    const std::string file = entry.path().filename().string();
    if (!std::regex_match(file, m, name)) continue;
    const std::string path = entry.path().string();
    try {
      const std::string text = read_text_file(path);
      check_json_depth(text, path);
      nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
      TESSERA_CHECK(!j.is_discarded(), path, ": not valid JSON");
      files.push_back({std::stoi(m[1]), path, std::move(j)});
    } catch (const Error& e) {
      if (unreadable == nullptr) throw;
      unreadable->push_back(e.what());
    }
  }
  TESSERA_CHECK(!files.empty(), what, ": ", dir, " holds no ",
                unreadable && !unreadable->empty() ? "readable " : "", "rank_N.json",
                unreadable && !unreadable->empty() ? str_cat(" (", unreadable->front(), ")") : "");
  std::sort(files.begin(), files.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  return files;
}

}  // namespace tessera::parallel
