#pragma once
// StepTrace: one rank's spans over the traced steps (`tessera train --trace-steps A:B`), in the
// Chrome / Perfetto trace event format (a JSON object with "traceEvents"; chrome://tracing and
// ui.perfetto.dev open it), one process per rank and three tracks:
//
//   step           the step (enclosing), and the spans that tile it: data, the engine's
//                  setup, forward/backward, the loss, the update, and the trainer's time
//                  around the engine's call
//   pipeline       every forward and backward per micro-batch and chunk, and every send and
//                  recv (from the flight recorder: queued to completed, with peer, seq, bytes)
//   communication  every collective (queued to completed: the in-flight time; its args say
//                  when the rank blocked on it), labelled "all_reduce dp #57" with bytes
//
// Times are the flight recorder's clock (microseconds since the Unix epoch), so the ranks'
// files line up when merged (`tessera trace merge`). A span is an "X" (complete) event.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/parallel/comm/flight_recorder.h"

namespace tessera::parallel {

enum class TraceTrack : int { step = 0, pipeline = 1, communication = 2 };
const char* trace_track_name(TraceTrack track);

class StepTrace {
 public:
  explicit StepTrace(int rank);
  int rank() const { return rank_; }

  void span(TraceTrack track, std::string name, int64_t begin_us, int64_t end_us,
            nlohmann::json args = nlohmann::json::object());
  // The recorder's calls queued in [begin_us, end_us]: transfers on the pipeline track,
  // collectives on the communication track.
  void add_calls(const FlightRecorder& recorder, int64_t begin_us, int64_t end_us);

  // The earliest begin and the latest end of the spans on `track` that begin at or after
  // from_us; {0, 0} when there is none.
  std::pair<int64_t, int64_t> extent(TraceTrack track, int64_t from_us) const;

  // {"traceEvents": [metadata, spans...], "displayTimeUnit": "ms"}
  nlohmann::json to_json() const;
  // to_json() written atomically to path.
  void write(const std::string& path) const;
  size_t size() const { return events_.size(); }

 private:
  int rank_;
  std::vector<nlohmann::json> events_;
};

// The ranks' trace files (each to_json()) as one: their events, in rank order.
nlohmann::json merge_traces(const std::vector<nlohmann::json>& ranks);

// The merged trace as an SVG timeline: a row per rank and track, a box per span (step-track
// spans below the enclosing step, forwards light, backwards dark, transfers and collectives in
// their own colours), the time axis in milliseconds. Throws naming the problem when the trace
// holds no span.
std::string render_trace_svg(const nlohmann::json& merged, const std::string& title);

}  // namespace tessera::parallel
