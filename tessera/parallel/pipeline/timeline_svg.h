#pragma once
// Draws a simulated pipeline schedule as an SVG timeline for the docs: one row per rank, a box
// per forward and backward labelled with its micro-batch, coloured by chunk (forwards light,
// backwards dark), idle time left as the grey row background, and a title with the makespan
// and the measured and ideal bubble.

#include <string>

#include "tessera/parallel/pipeline/schedule.h"
#include "tessera/parallel/pipeline/simulator.h"

namespace tessera::parallel {

// The SVG document. Throws if the simulation reported errors (a broken schedule has no
// meaningful timeline).
std::string render_timeline_svg(const Schedule& schedule, const SimulationResult& result);

// render_timeline_svg written atomically to path (core/file_io.h).
void write_timeline_svg(const std::string& path, const Schedule& schedule,
                        const SimulationResult& result);

}  // namespace tessera::parallel
