// `tessera trace merge RUN_DIR`: joins the per-rank Chrome traces that `tessera train
// --trace-steps A:B` wrote into RUN_DIR/trace (rank_N.json, parallel/step_trace.h) into one
// file for chrome://tracing or ui.perfetto.dev, and draws the same spans as an SVG timeline
// (no trace viewer is packaged for offline use):
//
//   $ tessera trace merge runs/dp2pp2
//   trace: 4 ranks, 1,234 spans -> runs/dp2pp2/trace/merged.json, runs/dp2pp2/trace/timeline.svg

#include <filesystem>
#include <iostream>

#include "cli/commands.h"
#include "tessera/core/error.h"
#include "tessera/core/file_io.h"
#include "tessera/parallel/comm/rank_files.h"
#include "tessera/parallel/step_trace.h"

namespace tessera::cli {

namespace {

struct TraceFlags {
  std::string run_dir, out, svg, title;
};

void run_merge(const TraceFlags& f) {
  namespace fs = std::filesystem;
  const std::string dir = f.run_dir + "/trace";
  TESSERA_CHECK(fs::is_directory(dir), "trace merge: ", dir, " does not exist (run tessera train ",
                "--trace-steps A:B with --run-dir ", f.run_dir, ")");
  const std::vector<parallel::RankFile> ranks = parallel::read_rank_json_files(dir, "trace merge");
  std::vector<nlohmann::json> traces;
  for (const parallel::RankFile& r : ranks) traces.push_back(r.json);
  const nlohmann::json merged = parallel::merge_traces(traces);
  size_t spans = 0;
  for (const nlohmann::json& e : merged["traceEvents"]) spans += e.value("ph", "") == "X";
  const std::string out = f.out.empty() ? dir + "/merged.json" : f.out;
  const std::string svg = f.svg.empty() ? dir + "/timeline.svg" : f.svg;
  write_file_atomic(out, merged.dump() + "\n");
  const std::string title =
      f.title.empty() ? str_cat("Tessera trace of ", f.run_dir, ": ", ranks.size(), " ranks")
                      : f.title;
  write_file_atomic(svg, parallel::render_trace_svg(merged, title));
  std::cout << "trace: " << ranks.size() << " ranks, " << spans << " spans -> " << out << ", "
            << svg << "\n";
}

}  // namespace

void add_trace_command(CLI::App& app) {
  auto f = std::make_shared<TraceFlags>();
  CLI::App* cmd = app.add_subcommand("trace", "Work with the traces of tessera train --trace-steps");
  cmd->require_subcommand(1);
  CLI::App* merge = cmd->add_subcommand(
      "merge", "Join RUN_DIR/trace/rank_N.json into one trace and draw its SVG timeline");
  merge->add_option("run_dir", f->run_dir, "the run directory")->required();
  merge->add_option("--out", f->out, "the merged trace (default RUN_DIR/trace/merged.json)");
  merge->add_option("--svg", f->svg, "the timeline (default RUN_DIR/trace/timeline.svg)");
  merge->add_option("--title", f->title, "the timeline's title");
  merge->callback([f] { run_merge(*f); });
}

}  // namespace tessera::cli
