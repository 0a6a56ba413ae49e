#include "tessera/parallel/mesh.h"

#include "tessera/core/error.h"

namespace tessera::parallel {

std::string MeshShape::to_string() const {
  return str_cat("dp", dp, " x pp", pp, " x tp", tp);
}

DeviceMesh::DeviceMesh(std::shared_ptr<Communicator> world, MeshShape shape)
    : world_(std::move(world)), shape_(shape) {
  TESSERA_CHECK(shape.dp >= 1 && shape.pp >= 1 && shape.tp >= 1, "mesh: sizes must be >= 1, got ",
                shape.to_string());
  TESSERA_CHECK(shape.world_size() == world_->size(), "mesh: dp*pp*tp = ", shape.dp, "*", shape.pp,
                "*", shape.tp, " = ", shape.world_size(), " but there are ", world_->size(),
                " ranks (mpiexec -n ", world_->size(), ")");
  int r = world_->rank();
  tp_rank_ = r % shape.tp;
  pp_rank_ = (r / shape.tp) % shape.pp;
  dp_rank_ = r / (shape.tp * shape.pp);
  // Ranks sharing the other two coordinates form each axis's group.
  tp_ = world_->split(dp_rank_ * shape.pp + pp_rank_, tp_rank_, "tp");
  pp_ = world_->split(dp_rank_ * shape.tp + tp_rank_, pp_rank_, "pp");
  dp_ = world_->split(pp_rank_ * shape.tp + tp_rank_, dp_rank_, "dp");
  bool ends = shape.pp > 1 && (is_first_stage() || is_last_stage());
  // Every rank takes part in the split; middle stages get a group they do not keep.
  int color = ends ? dp_rank_ * shape.tp + tp_rank_ : shape.dp * shape.tp + r;
  auto group = world_->split(color, pp_rank_, "embedding");
  if (ends) embedding_ = std::move(group);
}

int DeviceMesh::world_rank(int dp_index, int pp_index, int tp_index) const {
  return (dp_index * shape_.pp + pp_index) * shape_.tp + tp_index;
}

}  // namespace tessera::parallel
