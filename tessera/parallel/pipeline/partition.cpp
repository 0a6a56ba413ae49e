#include "tessera/parallel/pipeline/detail/partition.h"

#include "tessera/core/error.h"

namespace tessera::parallel {

nn::StageSpec pipeline_stage_spec(int64_t num_layers, int stages, int virtual_stages, int rank,
                                  int chunk) {
  TESSERA_CHECK(stages >= 1 && virtual_stages >= 1, "pipeline stages: pp = ", stages,
                " and virtual stages = ", virtual_stages, " must be >= 1");
  const int64_t model_stages = int64_t(stages) * virtual_stages;
  TESSERA_CHECK(num_layers >= model_stages && num_layers % model_stages == 0,
                "pipeline stages: ", num_layers, " layers cannot be split into pp * v = ", stages,
                " * ", virtual_stages, " = ", model_stages,
                " equal contiguous stages (the layer count must be a multiple of pp * v)");
  TESSERA_CHECK(rank >= 0 && rank < stages && chunk >= 0 && chunk < virtual_stages,
                "pipeline stages: rank ", rank, " chunk ", chunk, " is outside pp = ", stages,
                ", v = ", virtual_stages);
  const int64_t per_stage = num_layers / model_stages;
  const int64_t stage = int64_t(chunk) * stages + rank;
  nn::StageSpec spec;
  spec.first_layer = stage * per_stage;
  spec.num_layers = per_stage;
  spec.has_embedding = stage == 0;
  spec.has_head = stage == model_stages - 1;
  return spec;
}

}  // namespace tessera::parallel
