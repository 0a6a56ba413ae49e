// `tessera schedule`: generate a pipeline schedule, check it with the dry-run simulator, print
// the makespan and the measured and ideal bubble, and optionally draw it as an SVG timeline.
//
//   tessera schedule --schedule 1f1b --stages 4 --virtual-stages 2 --microbatches 8 --svg s.svg

#include <iostream>

#include "cli/commands.h"
#include "tessera/core/error.h"
#include "tessera/parallel/pipeline/schedule.h"
#include "tessera/parallel/pipeline/simulator.h"
#include "tessera/parallel/pipeline/timeline_svg.h"

namespace tessera::cli {

namespace {

struct ScheduleFlags {
  std::string schedule = "1f1b", svg;
  int stages = 4, virtual_stages = 1, microbatches = 8;
  bool tied_embedding = false, actions = false;
  parallel::SimulationOptions costs;
};

void run_schedule(const ScheduleFlags& f) {
  parallel::ScheduleKind kind = parallel::parse_schedule_kind(f.schedule);
  // One stage holds both ends of a tied embedding: no all-reduce joins them, so the flag would
  // draw the same schedule as without it (make_schedule drops it there for the engine's sake).
  TESSERA_CHECK(!f.tied_embedding || f.stages != 1, "schedule: --tied-embedding applies to 2 or ",
                "more --stages (one stage holds both ends of the tied embedding)");
  parallel::Schedule s =
      parallel::make_schedule(kind, f.stages, f.virtual_stages, f.microbatches, {f.tied_embedding});
  parallel::SimulationResult r = parallel::simulate(s, f.costs);
  if (f.actions)
    for (size_t rank = 0; rank < s.ranks.size(); ++rank) {
      std::cout << "rank " << rank << ":";
      for (const parallel::Action& a : s.ranks[rank]) std::cout << " [" << a.to_string() << "]";
      std::cout << "\n";
    }
  std::cout << parallel::format_summary(s, r);
  TESSERA_CHECK(r.ok(), "schedule: ", s.name(), " failed the dry run: ", r.errors[0]);
  if (!f.svg.empty()) {
    parallel::write_timeline_svg(f.svg, s, r);
    std::cout << "timeline -> " << f.svg << "\n";
  }
}

}  // namespace

void add_schedule_command(CLI::App& app) {
  auto f = std::make_shared<ScheduleFlags>();
  CLI::App* cmd = app.add_subcommand(
      "schedule", "Dry-run a pipeline schedule: check it, print its bubble, draw it as SVG");
  cmd->add_option("--schedule", f->schedule, "gpipe, 1f1b or interleaved")->capture_default_str();
  cmd->add_option("--stages", f->stages, "pipeline ranks p")->capture_default_str();
  cmd->add_option("--virtual-stages", f->virtual_stages, "chunks per rank v")
      ->capture_default_str();
  cmd->add_option("--microbatches", f->microbatches, "micro-batches per step m")
      ->capture_default_str();
  cmd->add_option("--svg", f->svg, "write the simulated timeline to this SVG file");
  cmd->add_flag("--tied-embedding", f->tied_embedding,
                "end the first and last rank with the tied-embedding all-reduce");
  cmd->add_flag("--actions", f->actions, "print every rank's action list");
  cmd->add_option("--forward-cost", f->costs.forward_cost,
                  "time of a micro-batch's forward over a rank's layers (a chunk takes 1/v)")
      ->capture_default_str();
  cmd->add_option("--backward-cost", f->costs.backward_cost, "the same for the backward")
      ->capture_default_str();
  cmd->add_option("--transfer-cost", f->costs.transfer_cost,
                  "time from a send to the earliest end of its receive")
      ->capture_default_str();
  cmd->callback([f] { run_schedule(*f); });
}

}  // namespace tessera::cli
