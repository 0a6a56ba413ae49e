#include "cli/ckpt_output.h"

#include <filesystem>

#include "tessera/core/error.h"
#include "tessera/nn/io/sharded_checkpoint.h"

namespace tessera::cli {

namespace fs = std::filesystem;

namespace {

// A checkpoint directory: a gathered one's state.json, or a sharded set's manifest or parts.
bool is_checkpoint_dir(const fs::path& dir) {
  std::error_code ec;
  return fs::exists(dir / "state.json", ec) || nn::is_sharded_checkpoint(dir.string());
}

// A checkpoint in <dir>/checkpoints (a step directory if there is one), or "" when it is empty.
std::string held_checkpoint(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir / "checkpoints", ec)) return "";
  std::string any;
  for (const auto& entry : fs::directory_iterator(dir / "checkpoints", ec)) {
    if (entry.path().filename().string().starts_with("step_")) return entry.path().string();
    any = entry.path().string();
  }
  return any;
}

}  // namespace

void check_new_run_dir(const std::string& output, const std::string& command) {
  TESSERA_CHECK(!is_checkpoint_dir(output), command, ": --output ", output,
                " is a checkpoint directory; give a new run directory to write into");
  const std::string held = held_checkpoint(output);
  TESSERA_CHECK(held.empty(), command, ": --output ", output, " already holds checkpoints (", held,
                "): the one written would change what that run resumes from; give a ",
                "new directory");
}

void check_export_dir(const std::string& dir, const std::string& output,
                      const std::string& command) {
  const fs::path folder = dir.empty() ? fs::path(".") : fs::path(dir);
  TESSERA_CHECK(!is_checkpoint_dir(folder), command, ": --output ", output,
                " is in a checkpoint directory, whose files it would replace; write it elsewhere");
  std::error_code ec;
  TESSERA_CHECK(!fs::is_directory(folder / "checkpoints", ec), command, ": --output ", output,
                " is in a run directory (it holds checkpoints/), whose files it would replace; ",
                "write it into a folder of its own, such as ", (folder / "export").string());
}

}  // namespace tessera::cli
