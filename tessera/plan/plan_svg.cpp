#include "tessera/plan/plan_svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "tessera/core/error.h"
#include "tessera/plan/detail/text.h"

namespace tessera::plan {

namespace {

const char* kPartColors[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#bab0ac"};
const char* kPartNames[] = {"parameters", "gradients", "optimizer", "activations", "buffers"};
const char* kGpuColors[] = {"#4e79a7", "#e15759", "#59a14f", "#b07aa1", "#edc948", "#9c755f"};

std::string fmt(double v, int digits = 1) {
  return detail::fixed(v, digits);
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else
      out += c;
  }
  return out;
}

// A "nice" axis step for a range: 1, 2 or 5 times a power of ten.
double nice_step(double range, int ticks) {
  const double raw = range / std::max(ticks, 1);
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * p) return m * p;
  return 10 * p;
}

}  // namespace

std::string render_plan_svg(const PlanRequest& r, const PlanResult& result, int bars) {
  TESSERA_CHECK(!result.ranked.empty(), "plan: nothing fits, so there is no picture to draw");
  const Workload& w = r.workload;
  const int n = std::min<int>(bars, int(result.ranked.size()));
  const double W = 1180, H = 480, left = 20, panel = 600, gap = 70;
  std::ostringstream s;
  s << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H
    << "' font-family='sans-serif' font-size='11'>\n<rect width='100%' height='100%' "
       "fill='white'/>\n";
  s << "<text x='" << left << "' y='20' font-size='14' font-weight='bold'>" << escape(w.model_name)
    << ": " << fmt(parameter_count(w.model) / 1e9, 1) << "B parameters, " << w.global_batch << " x "
    << w.seq_len << " tokens a step"
    << (w.train_tokens > 0 ? ", " + fmt(w.train_tokens / 1e9, 0) + "B tokens" : "") << "</text>\n";

  // Left: memory bars, GB per GPU.
  const double top = 60, bar_h = std::min(36.0, (H - top - 80) / n), label_w = 290;
  double cap = 0;
  for (int i = 0; i < n; ++i)
    cap = std::max({cap, result.ranked[size_t(i)].capacity_bytes / 1e9,
                    double(result.ranked[size_t(i)].memory.total()) / 1e9});
  const double step = nice_step(cap, 5), axis_max = std::ceil(cap / step) * step;
  const double x0 = left + label_w, xw = panel - label_w;
  auto xpos = [&](double gb) { return x0 + xw * gb / axis_max; };
  s << "<text x='" << left << "' y='" << top - 20 << "' font-size='12'>Memory per GPU (GB), the "
    << n << " best layouts</text>\n";
  for (double g = 0; g <= axis_max + 1e-9; g += step) {
    s << "<line x1='" << xpos(g) << "' y1='" << top - 5 << "' x2='" << xpos(g) << "' y2='"
      << top + n * bar_h << "' stroke='#ddd'/>\n<text x='" << xpos(g) << "' y='"
      << top + n * bar_h + 14 << "' text-anchor='middle'>" << fmt(g, 0) << "</text>\n";
  }
  for (int i = 0; i < n; ++i) {
    const Candidate& c = result.ranked[size_t(i)];
    const double y = top + i * bar_h;
    const double parts[] = {double(c.memory.parameters), double(c.memory.gradients),
                            double(c.memory.optimizer), double(c.memory.activations),
                            double(c.memory.buffers)};
    s << "<text x='" << x0 - 6 << "' y='" << y + bar_h * 0.6 << "' text-anchor='end' "
      << "font-size='10'>" << i + 1 << ". " << escape(r.clusters[size_t(c.cluster)].gpu.name) << " "
      << escape(c.layout.describe(w)) << "</text>\n";
    double at = 0;
    for (int k = 0; k < 5; ++k) {
      const double gb = parts[k] / 1e9;
      s << "<rect x='" << xpos(at) << "' y='" << y + 2 << "' width='" << xpos(at + gb) - xpos(at)
        << "' height='" << bar_h - 4 << "' fill='" << kPartColors[k] << "'><title>" << kPartNames[k]
        << ": " << fmt(gb, 2) << " GB</title></rect>\n";
      at += gb;
    }
    s << "<line x1='" << xpos(c.capacity_bytes / 1e9) << "' y1='" << y << "' x2='"
      << xpos(c.capacity_bytes / 1e9) << "' y2='" << y + bar_h << "' stroke='black' "
      << "stroke-width='2'/>\n<line x1='" << xpos(c.usable_bytes / 1e9) << "' y1='" << y << "' x2='"
      << xpos(c.usable_bytes / 1e9) << "' y2='" << y + bar_h
      << "' stroke='black' stroke-dasharray='3,2'/>\n";
  }
  for (int k = 0; k < 5; ++k)
    s << "<rect x='" << left + k * 80 << "' y='" << H - 44 << "' width='10' height='10' fill='"
      << kPartColors[k] << "'/><text x='" << left + k * 80 + 13 << "' y='" << H - 35 << "'>"
      << kPartNames[k] << "</text>\n";
  s << "<text x='" << left << "' y='" << H - 15 << "'>solid line: the GPU's memory; dashed: the "
    << "share a layout may fill</text>\n";

  // Right: every fitting layout, time against cost.
  const bool days = w.train_tokens > 0;
  const double px = left + panel + gap, pw = W - px - 30, py = top, ph = H - top - 70;
  // Layouts up to 4x the fastest's time: the slow tail would squeeze the ones worth reading.
  double fastest = INFINITY;
  for (const Candidate& c : result.ranked)
    fastest = std::min(fastest, days ? c.days : c.time.step_s);
  double tx_max = 0, cy_max = 0;
  std::vector<std::pair<double, double>> points;
  size_t hidden = 0;
  for (const Candidate& c : result.ranked) {
    const double x = days ? c.days : c.time.step_s;
    const double usd = r.clusters[size_t(c.cluster)].usd_per_hour;
    const double y = days ? c.cost_usd / 1e6 : c.time.step_s * c.layout.gpus() * usd / 3600;
    points.emplace_back(x, y);
    if (x > 4 * fastest) {
      ++hidden;
      continue;
    }
    tx_max = std::max(tx_max, x);
    cy_max = std::max(cy_max, y);
  }
  const double xs = nice_step(tx_max, 5), ys = nice_step(cy_max, 5);
  const double xm = std::ceil(tx_max / xs) * xs, ym = std::ceil(cy_max / ys) * ys;
  auto X = [&](double v) { return px + pw * v / xm; };
  auto Y = [&](double v) { return py + ph - ph * v / ym; };
  s << "<text x='" << px << "' y='" << top - 34 << "' font-size='12'>"
    << (days ? "Days against cost" : "Step time against cost")
    << " of the layouts that fit</text>\n"
    << "<text x='" << px << "' y='" << top - 20 << "' font-size='10'>" << result.ranked.size()
    << " fit of " << result.valid << " valid; the " << hidden
    << " slower than 4x the fastest are left out</text>\n";
  for (double v = 0; v <= xm + 1e-12; v += xs)
    s << "<line x1='" << X(v) << "' y1='" << py << "' x2='" << X(v) << "' y2='" << py + ph
      << "' stroke='#eee'/><text x='" << X(v) << "' y='" << py + ph + 14
      << "' text-anchor='middle'>" << fmt(v, v < 10 ? 2 : 0) << "</text>\n";
  for (double v = 0; v <= ym + 1e-12; v += ys)
    s << "<line x1='" << px << "' y1='" << Y(v) << "' x2='" << px + pw << "' y2='" << Y(v)
      << "' stroke='#eee'/><text x='" << px - 4 << "' y='" << Y(v) + 4 << "' text-anchor='end'>"
      << fmt(v, v < 10 ? 2 : 0) << "</text>\n";
  s << "<text x='" << px + pw / 2 << "' y='" << py + ph + 30 << "' text-anchor='middle'>"
    << (days ? "days to train" : "step time (s)") << "</text>\n";
  s << "<text x='" << px - 45 << "' y='" << py + ph / 2 << "' transform='rotate(-90 " << px - 45
    << " " << py + ph / 2 << ")' text-anchor='middle'>"
    << (days ? "cost (million USD)" : "cost per step (USD)") << "</text>\n";
  for (size_t i = points.size(); i-- > 0;) {
    const Candidate& c = result.ranked[i];
    if (points[i].first > 4 * fastest) continue;
    s << "<circle cx='" << X(points[i].first) << "' cy='" << Y(points[i].second) << "' r='"
      << (i == 0 ? 5 : 2.5) << "' fill='" << kGpuColors[size_t(c.cluster) % 6] << "'"
      << (i == 0 ? " stroke='black' stroke-width='2'" : " fill-opacity='0.6'") << "><title>"
      << escape(c.layout.describe(w)) << "</title></circle>\n";
  }
  for (size_t k = 0; k < r.clusters.size(); ++k)
    s << "<circle cx='" << px + 8 + 150 * double(k) << "' cy='" << H - 23 << "' r='4' fill='"
      << kGpuColors[k % 6] << "'/><text x='" << px + 16 + 150 * double(k) << "' y='" << H - 19
      << "'>" << r.clusters[k].gpus << " x " << escape(r.clusters[k].gpu.name) << "</text>\n";
  s << "</svg>\n";
  return s.str();
}

}  // namespace tessera::plan
