#include "tessera/parallel/pipeline/timeline_svg.h"

#include <cmath>
#include <cstdio>

#include "tessera/core/error.h"
#include "tessera/core/file_io.h"

namespace tessera::parallel {

namespace {

// Geometry in SVG user units (pixels).
constexpr double kLabelWidth = 64, kPlotWidth = 1120, kRightMargin = 16;
constexpr double kTitleHeight = 34, kRowHeight = 26, kRowGap = 6, kAxisHeight = 26;
constexpr double kLegendRowHeight = 20, kLegendItemWidth = 112;
constexpr int kLegendPerRow = 10;

// Per chunk: forward fill, backward fill (same hue, darker), cycling beyond eight chunks.
constexpr const char* kPalette[][2] = {
    {"#9ec5f0", "#1f5fa8"}, {"#f7c08a", "#b85c00"}, {"#a6dba0", "#2e7d32"}, {"#d5b3e8", "#6a3d9a"},
    {"#f4a6a6", "#b22222"}, {"#9fe0dc", "#00796b"}, {"#e8d98f", "#8a7300"}, {"#c9c9c9", "#4d4d4d"},
};
constexpr int kPaletteSize = int(sizeof(kPalette) / sizeof(kPalette[0]));

// Beyond this many boxes a drawing is neither legible nor small (about 300 bytes per box).
constexpr size_t kMaxBoxes = 65536;

std::string num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", x);
  std::string s(buf);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

std::string ratio(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", x);
  return buf;
}

std::string xml_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '&')
      out += "&amp;";
    else if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

// A tick spacing of 1, 2 or 5 times a power of ten giving at most ~16 ticks.
double tick_step(double span) {
  double raw = span / 16, base = std::pow(10.0, std::floor(std::log10(raw)));
  for (double k : {1.0, 2.0, 5.0, 10.0})
    if (k * base >= raw) return k * base;
  return 10 * base;
}

const char* schedule_title(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::gpipe:
      return "GPipe";
    case ScheduleKind::one_f_one_b:
      return "1F1B";
    case ScheduleKind::interleaved:
      return "Interleaved 1F1B";
  }
  return "?";
}

}  // namespace

std::string render_timeline_svg(const Schedule& schedule, const SimulationResult& result) {
  TESSERA_CHECK(result.ok(), "pipeline timeline: schedule ", schedule.name(),
                " did not simulate cleanly (", result.errors.empty() ? "" : result.errors[0],
                "); there is no timeline to draw");
  TESSERA_CHECK(result.boxes.size() <= kMaxBoxes, "pipeline timeline: schedule ", schedule.name(),
                " has ", result.boxes.size(), " forwards and backwards; at most ", kMaxBoxes,
                " can be drawn (use fewer micro-batches or stages)");
  const int p = schedule.stages, v = schedule.virtual_stages;
  const double makespan = result.makespan > 0 ? result.makespan : 1;
  const double scale = kPlotWidth / makespan;
  const double plot_top = kTitleHeight;
  const double plot_height = p * kRowHeight + (p - 1) * kRowGap;
  const double width = kLabelWidth + kPlotWidth + kRightMargin;
  const int legend_items = 2 * v + 1;
  const int legend_rows = (legend_items + kLegendPerRow - 1) / kLegendPerRow;
  const double height = plot_top + plot_height + kAxisHeight + legend_rows * kLegendRowHeight + 8;
  auto row_y = [&](int rank) { return plot_top + rank * (kRowHeight + kRowGap); };

  std::string svg = str_cat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", num(width), "\" height=\"", num(height),
      "\" viewBox=\"0 0 ", num(width), " ", num(height),
      "\" font-family=\"Helvetica, Arial, sans-serif\">\n<rect width=\"100%\" height=\"100%\" "
      "fill=\"white\"/>\n");
  std::string title =
      str_cat(schedule_title(schedule.kind), ": p = ", p, ", v = ", v,
              ", m = ", schedule.microbatches, ".  Makespan ", num(makespan), ", bubble ",
              ratio(result.bubble), " (ideal (p-1)/(v·m) = ", ratio(result.ideal_bubble), ")");
  svg += str_cat("<text x=\"", num(kLabelWidth), "\" y=\"22\" font-size=\"15\">", xml_escape(title),
                 "</text>\n");

  // Rows: the grey background is idle time; boxes cover the busy time.
  for (int r = 0; r < p; ++r) {
    svg +=
        str_cat("<text x=\"", num(kLabelWidth - 8), "\" y=\"", num(row_y(r) + kRowHeight / 2 + 4),
                "\" font-size=\"12\" text-anchor=\"end\">rank ", r, "</text>\n");
    svg += str_cat("<rect class=\"idle\" x=\"", num(kLabelWidth), "\" y=\"", num(row_y(r)),
                   "\" width=\"", num(kPlotWidth), "\" height=\"", num(kRowHeight),
                   "\" fill=\"#ececec\"/>\n");
  }
  for (const TimelineBox& b : result.boxes) {
    bool fwd = b.kind == ActionKind::forward;
    const char* fill = kPalette[b.chunk % kPaletteSize][fwd ? 0 : 1];
    double x = kLabelWidth + b.start * scale, w = (b.end - b.start) * scale;
    double y = row_y(b.rank);
    svg += str_cat("<g class=\"", fwd ? "forward" : "backward", "\"><title>",
                   fwd ? "forward" : "backward", " micro-batch ", b.micro, " chunk ", b.chunk,
                   ", t = ", num(b.start), " to ", num(b.end), "</title><rect x=\"", num(x),
                   "\" y=\"", num(y), "\" width=\"", num(w), "\" height=\"", num(kRowHeight),
                   "\" fill=\"", fill, "\" stroke=\"white\" stroke-width=\"0.75\"/>");
    if (w >= 9)
      svg += str_cat("<text x=\"", num(x + w / 2), "\" y=\"", num(y + kRowHeight / 2 + 4),
                     "\" font-size=\"", w >= 16 ? 11 : 8, "\" text-anchor=\"middle\" fill=\"",
                     fwd ? "black" : "white", "\">", b.micro, "</text>");
    svg += "</g>\n";
  }

  // Time axis.
  const double axis_y = plot_top + plot_height + 4;
  svg += str_cat("<line x1=\"", num(kLabelWidth), "\" y1=\"", num(axis_y), "\" x2=\"",
                 num(kLabelWidth + kPlotWidth), "\" y2=\"", num(axis_y),
                 "\" stroke=\"#555\" stroke-width=\"1\"/>\n");
  const double step = tick_step(makespan);
  for (int k = 0; k * step <= makespan * (1 + 1e-9); ++k) {
    double x = kLabelWidth + k * step * scale;
    svg += str_cat("<line x1=\"", num(x), "\" y1=\"", num(axis_y), "\" x2=\"", num(x), "\" y2=\"",
                   num(axis_y + 4), "\" stroke=\"#555\"/><text x=\"", num(x), "\" y=\"",
                   num(axis_y + 16), "\" font-size=\"10\" text-anchor=\"middle\">", num(k * step),
                   "</text>\n");
  }

  // Legend: one forward and one backward swatch per chunk, then idle.
  int item = 0;
  auto swatch = [&](const char* fill, const std::string& label) {
    double lx = kLabelWidth + (item % kLegendPerRow) * kLegendItemWidth;
    double ly = axis_y + kAxisHeight + (item / kLegendPerRow) * kLegendRowHeight;
    svg += str_cat("<rect x=\"", num(lx), "\" y=\"", num(ly - 10),
                   "\" width=\"12\" height=\"12\" fill=\"", fill, "\"/><text x=\"", num(lx + 16),
                   "\" y=\"", num(ly), "\" font-size=\"11\">", label, "</text>\n");
    ++item;
  };
  for (int c = 0; c < v; ++c) {
    swatch(kPalette[c % kPaletteSize][0], str_cat("forward c", c));
    swatch(kPalette[c % kPaletteSize][1], str_cat("backward c", c));
  }
  swatch("#ececec", "idle");
  svg += "</svg>\n";
  return svg;
}

void write_timeline_svg(const std::string& path, const Schedule& schedule,
                        const SimulationResult& result) {
  write_file_atomic(path, render_timeline_svg(schedule, result));
}

}  // namespace tessera::parallel
