#include "tessera/parallel/step_trace.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "tessera/core/error.h"
#include "tessera/core/file_io.h"

namespace tessera::parallel {

const char* trace_track_name(TraceTrack track) {
  switch (track) {
    case TraceTrack::step:
      return "step";
    case TraceTrack::pipeline:
      return "pipeline";
    case TraceTrack::communication:
      return "communication";
  }
  return "?";
}

StepTrace::StepTrace(int rank) : rank_(rank) {}

void StepTrace::span(TraceTrack track, std::string name, int64_t begin_us, int64_t end_us,
                     nlohmann::json args) {
  events_.push_back({{"ph", "X"},
                     {"pid", rank_},
                     {"tid", int(track)},
                     {"cat", trace_track_name(track)},
                     {"name", std::move(name)},
                     {"ts", begin_us},
                     {"dur", std::max<int64_t>(0, end_us - begin_us)},
                     {"args", std::move(args)}});
}

void StepTrace::add_calls(const FlightRecorder& recorder, int64_t begin_us, int64_t end_us) {
  const std::vector<FlightGroup> groups = recorder.groups();
  for (const FlightRecord& r : recorder.records()) {
    if (r.queued_us < begin_us || r.queued_us > end_us) continue;
    const FlightGroup& g = groups.at(size_t(r.group));
    const bool transfer = std::string(r.op) == "send" || std::string(r.op) == "recv";
    nlohmann::json args = {{"group", g.key},   {"seq", r.seq},
                           {"bytes", r.bytes}, {"dtype", r.dtype},
                           {"state", flight_state_name(r.state)}};
    if (r.started_us > 0 && r.completed_us > 0) args["blocked_us"] = r.completed_us - r.started_us;
    if (r.peer >= 0) args["peer"] = r.peer;
    const std::string name =
        transfer ? str_cat(r.op, " #", r.seq, std::string(r.op) == "send" ? " to " : " from ",
                           g.name, " rank ", r.peer)
                 : str_cat(r.op, " ", g.name, " #", r.seq);
    span(transfer ? TraceTrack::pipeline : TraceTrack::communication, name, r.queued_us,
         r.completed_us > 0 ? r.completed_us : end_us, std::move(args));
  }
}

std::pair<int64_t, int64_t> StepTrace::extent(TraceTrack track, int64_t from_us) const {
  int64_t first = 0, last = 0;
  bool any = false;
  for (const nlohmann::json& e : events_) {
    if (e["tid"].get<int>() != int(track)) continue;
    const int64_t ts = e["ts"].get<int64_t>(), end = ts + e["dur"].get<int64_t>();
    if (ts < from_us) continue;
    first = any ? std::min(first, ts) : ts;
    last = any ? std::max(last, end) : end;
    any = true;
  }
  return {first, last};
}

nlohmann::json StepTrace::to_json() const {
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"ph", "M"}, {"pid", rank_}, {"name", "process_name"},
                    {"args", {{"name", str_cat("rank ", rank_)}}}});
  events.push_back({{"ph", "M"}, {"pid", rank_}, {"name", "process_sort_index"},
                    {"args", {{"sort_index", rank_}}}});
  for (TraceTrack t : {TraceTrack::step, TraceTrack::pipeline, TraceTrack::communication})
    events.push_back({{"ph", "M"}, {"pid", rank_}, {"tid", int(t)}, {"name", "thread_name"},
                      {"args", {{"name", trace_track_name(t)}}}});
  for (const nlohmann::json& e : events_) events.push_back(e);
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

void StepTrace::write(const std::string& path) const {
  write_file_atomic(path, to_json().dump() + "\n");
}

nlohmann::json merge_traces(const std::vector<nlohmann::json>& ranks) {
  nlohmann::json events = nlohmann::json::array();
  for (const nlohmann::json& r : ranks) {
    TESSERA_CHECK(r.is_object() && r.contains("traceEvents") && r["traceEvents"].is_array(),
                  "trace merge: a rank's trace has no \"traceEvents\" array");
    for (const nlohmann::json& e : r["traceEvents"]) events.push_back(e);
  }
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

namespace {

std::string num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", x);
  return buf;
}

std::string escaped(const std::string& text) {
  std::string out;
  for (char c : text) out += c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : std::string(1, c);
  return out;
}

// Fill by what a span is: forwards light and backwards dark blue, transfers purple,
// collectives orange, data green, the update grey.
const char* fill_of(int track, const std::string& name) {
  if (track == int(TraceTrack::communication)) return "#f4a259";
  if (name.rfind("send", 0) == 0 || name.rfind("recv", 0) == 0) return "#b39ddb";
  if (name.rfind("forward ", 0) == 0) return "#9ec5f0";
  if (name.rfind("backward ", 0) == 0) return "#1f5fa8";
  if (name == "data") return "#a6dba0";
  if (name == "update") return "#9e9e9e";
  return "#d9d9d9";
}

}  // namespace

std::string render_trace_svg(const nlohmann::json& merged, const std::string& title) {
  struct Box {
    int rank, track;
    double begin, end;
    std::string name;
  };
  std::vector<Box> boxes;
  std::vector<Box> steps;  // the enclosing step spans, drawn as brackets
  double t0 = INFINITY, t1 = -INFINITY;
  int ranks = 0;
  for (const nlohmann::json& e : merged.at("traceEvents")) {
    if (e.value("ph", "") != "X") continue;
    Box b{e.at("pid").get<int>(), e.at("tid").get<int>(), e.at("ts").get<double>(),
          e.at("ts").get<double>() + e.at("dur").get<double>(), e.at("name").get<std::string>()};
    ranks = std::max(ranks, b.rank + 1);
    t0 = std::min(t0, b.begin);
    t1 = std::max(t1, b.end);
    (b.track == int(TraceTrack::step) && b.name.rfind("step ", 0) == 0 ? steps : boxes)
        .push_back(std::move(b));
  }
  TESSERA_CHECK(!boxes.empty() || !steps.empty(), "trace svg: the trace holds no span");
  constexpr double kLabel = 150, kPlot = 1100, kRight = 16, kTitle = 34, kRow = 22, kGap = 4,
                   kRankGap = 12, kAxis = 28;
  const double span_us = std::max(1.0, t1 - t0), scale = kPlot / span_us;
  auto row_y = [&](int rank, int track) {
    return kTitle + rank * (3 * (kRow + kGap) + kRankGap) + track * (kRow + kGap);
  };
  const double plot_bottom = row_y(ranks, 0) - kRankGap;
  const double width = kLabel + kPlot + kRight, height = plot_bottom + kAxis + 8;
  std::string svg = str_cat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", num(width), "\" height=\"",
      num(height), "\" viewBox=\"0 0 ", num(width), " ", num(height),
      "\" font-family=\"Helvetica, Arial, sans-serif\">\n<rect width=\"100%\" height=\"100%\" "
      "fill=\"white\"/>\n<text x=\"", num(kLabel), "\" y=\"22\" font-size=\"15\">",
      escaped(title), "</text>\n");
  for (int r = 0; r < ranks; ++r)
    for (int t = 0; t < 3; ++t) {
      svg += str_cat("<text x=\"", num(kLabel - 8), "\" y=\"", num(row_y(r, t) + kRow / 2 + 4),
                     "\" font-size=\"11\" text-anchor=\"end\">rank ", r, " ",
                     trace_track_name(TraceTrack(t)), "</text>\n<rect x=\"", num(kLabel),
                     "\" y=\"", num(row_y(r, t)), "\" width=\"", num(kPlot), "\" height=\"",
                     num(kRow), "\" fill=\"#f2f2f2\"/>\n");
    }
  for (const Box& b : boxes) {
    const double x = kLabel + (b.begin - t0) * scale, w = std::max(0.5, (b.end - b.begin) * scale);
    // A transfer spans from its posting to its completion, over the forwards and backwards it
    // overlaps: a thin bar along the row's foot leaves them visible.
    const bool transfer = b.name.rfind("send", 0) == 0 || b.name.rfind("recv", 0) == 0;
    const double y = row_y(b.rank, b.track) + (transfer ? kRow - 7 : 1);
    svg += str_cat("<rect x=\"", num(x), "\" y=\"", num(y), "\" width=\"",
                   num(w), "\" height=\"", num(transfer ? 6 : kRow - 2), "\" fill=\"", fill_of(b.track, b.name),
                   "\" stroke=\"white\" stroke-width=\"0.5\"><title>", escaped(b.name), " (",
                   num((b.end - b.begin) / 1e3), " ms)</title></rect>\n");
    if (!transfer && w > 7.0 * double(b.name.size()))
      svg += str_cat("<text x=\"", num(x + 3), "\" y=\"", num(row_y(b.rank, b.track) + kRow / 2 + 4),
                     "\" font-size=\"10\"", b.name.rfind("backward ", 0) == 0 ? " fill=\"white\"" : "",
                     ">", escaped(b.name), "</text>\n");
  }
  for (const Box& b : steps) {  // a bracket above the step track: where each step begins and ends
    const double x = kLabel + (b.begin - t0) * scale, w = (b.end - b.begin) * scale;
    const double y = row_y(b.rank, 0) - 2;
    svg += str_cat("<path d=\"M", num(x), " ", num(y + 4), " V", num(y), " H", num(x + w), " V",
                   num(y + 4), "\" stroke=\"black\" fill=\"none\"><title>", escaped(b.name),
                   "</title></path>\n");
  }
  // The axis: milliseconds from the first span, 1-2-5 steps, at most about 12 ticks.
  const double span_ms = span_us / 1e3;
  double tick = std::pow(10.0, std::floor(std::log10(span_ms / 12)));
  for (double k : {1.0, 2.0, 5.0, 10.0})
    if (k * tick >= span_ms / 12) {
      tick *= k;
      break;
    }
  for (double ms = 0; ms <= span_ms + 1e-9; ms += tick) {
    const double x = kLabel + ms * 1e3 * scale;
    svg += str_cat("<line x1=\"", num(x), "\" y1=\"", num(plot_bottom), "\" x2=\"", num(x),
                   "\" y2=\"", num(plot_bottom + 5), "\" stroke=\"black\"/>\n<text x=\"", num(x),
                   "\" y=\"", num(plot_bottom + 18), "\" font-size=\"10\" text-anchor=\"middle\">",
                   num(ms), " ms</text>\n");
  }
  return svg + "</svg>\n";
}

}  // namespace tessera::parallel
