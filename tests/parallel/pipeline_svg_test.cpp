// SVG timelines of simulated schedules: one box per forward and backward at its simulated
// time, idle rows visible, written atomically.

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include "parallel/rank_test.h"
#include "tessera/core/error.h"
#include "tessera/core/file_io.h"
#include "tessera/parallel/pipeline/timeline_svg.h"

namespace tessera::parallel {
namespace {

int occurrences(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

RANK_TEST(PipelineSvgN1, DrawsEveryComputeActionAtItsTime) {
  Schedule s = make_schedule(ScheduleKind::one_f_one_b, 4, 1, 8);
  SimulationResult r = check_schedule(s);
  std::string svg = render_timeline_svg(s, r);
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  EXPECT_EQ(occurrences(svg, "<g class=\"forward\">"), 4 * 8);
  EXPECT_EQ(occurrences(svg, "<g class=\"backward\">"), 4 * 8);
  EXPECT_EQ(occurrences(svg, "<rect class=\"idle\""), 4);  // one grey row per rank
  EXPECT_NE(svg.find(">rank 3</text>"), std::string::npos);
  EXPECT_NE(svg.find("1F1B: p = 4, v = 1, m = 8.  Makespan 33, bubble 0.375 (ideal"),
            std::string::npos);
  // Rank 3 receives micro-batch 0 after ranks 0..2 ran it (forward 1 each) and runs its
  // backward (2) right after its forward.
  EXPECT_NE(svg.find("<title>forward micro-batch 0 chunk 0, t = 3 to 4</title>"),
            std::string::npos);
  EXPECT_NE(svg.find("<title>backward micro-batch 0 chunk 0, t = 4 to 6</title>"),
            std::string::npos);
  // The time axis runs 0 to the makespan: 1120 px for 33 units, so t = 30 sits at x = 64 +
  // 1120 * 30 / 33.
  EXPECT_NE(svg.find("<line x1=\"1082.18\""), std::string::npos);
}

RANK_TEST(PipelineSvgN1, ColoursChunksAndListsThemInTheLegend) {
  Schedule s = make_schedule(ScheduleKind::interleaved, 2, 4, 4);
  std::string svg = render_timeline_svg(s, check_schedule(s));
  for (int c = 0; c < 4; ++c) {
    EXPECT_NE(svg.find(str_cat(">forward c", c, "</text>")), std::string::npos);
    EXPECT_NE(svg.find(str_cat(">backward c", c, "</text>")), std::string::npos);
  }
  EXPECT_NE(svg.find("Interleaved 1F1B"), std::string::npos);
  EXPECT_EQ(occurrences(svg, "<g class=\"forward\">"), 2 * 4 * 4);
}

RANK_TEST(PipelineSvgN1, WritesAtomicallyAndRefusesBrokenSchedules) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / str_cat("tessera_svg_", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  Schedule s = make_schedule(ScheduleKind::gpipe, 2, 1, 4);
  SimulationResult r = check_schedule(s);
  std::string path = (dir / "gpipe.svg").string();
  write_timeline_svg(path, s, r);
  EXPECT_EQ(read_text_file(path), render_timeline_svg(s, r));
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) files += entry.is_regular_file();
  EXPECT_EQ(files, 1) << "no temporary file is left behind";
  EXPECT_THROW(write_timeline_svg((dir / "missing" / "x.svg").string(), s, r), Error);

  Schedule broken = s;
  std::swap(broken.ranks[1][0], broken.ranks[1][1]);  // forward before its receive
  SimulationResult bad = simulate(broken);
  ASSERT_FALSE(bad.ok());
  try {
    render_timeline_svg(broken, bad);
    ADD_FAILURE() << "a broken schedule has no timeline";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("did not simulate cleanly (rank 1 action 0"),
              std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);

  Schedule huge = make_schedule(ScheduleKind::gpipe, 8, 4, 2048);  // 131072 boxes
  EXPECT_THROW(render_timeline_svg(huge, check_schedule(huge)), Error);
}

}  // namespace
}  // namespace tessera::parallel
