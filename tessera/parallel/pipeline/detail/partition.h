#pragma once
// Balanced contiguous pipeline stages: the L blocks of a GPT cut into p * v model stages of
// L / (p * v) consecutive blocks; model stage s = chunk * p + rank (see schedule.h). The
// embedding sits on model stage 0 (rank 0, chunk 0) and ln_f, the head and the loss on the
// last one (rank p - 1, chunk v - 1).

#include <cstdint>

#include "tessera/nn/model_parallel.h"

namespace tessera::parallel {

// What model stage (rank, chunk) builds. Throws naming the sizes when num_layers is not a
// multiple of stages * virtual_stages or rank / chunk are out of range.
nn::StageSpec pipeline_stage_spec(int64_t num_layers, int stages, int virtual_stages, int rank,
                                  int chunk);

}  // namespace tessera::parallel
