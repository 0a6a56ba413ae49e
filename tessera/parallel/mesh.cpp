#include "tessera/parallel/mesh.h"

#include <algorithm>

#include "tessera/core/error.h"

namespace tessera::parallel {

MeshShape::MeshShape(int dp, int pp, int tp) : axes_{{"dp", dp}, {"pp", pp}, {"tp", tp}} {}

int MeshShape::find(std::string_view axis) const {
  for (size_t i = 0; i < axes_.size(); ++i)
    if (axes_[i].name == axis) return int(i);
  return -1;
}

int MeshShape::index(std::string_view axis) const {
  const int i = find(axis);
  TESSERA_CHECK(i >= 0, "mesh: no axis '", axis, "' in ", to_string());
  return i;
}

int MeshShape::size(std::string_view axis) const {
  const int i = find(axis);
  return i < 0 ? 1 : axes_[size_t(i)].size;
}

int MeshShape::world_size() const {
  int n = 1;
  for (const MeshAxis& a : axes_) n *= a.size;
  return n;
}

std::string MeshShape::invalid_reason() const {
  for (size_t i = 0; i < axes_.size(); ++i) {
    const MeshAxis& a = axes_[i];
    if (a.name.empty()) return str_cat("axis ", i, " has no name");
    if (a.size < 1) return str_cat("axis ", a.name, " has size ", a.size, " (must be >= 1)");
    if (find(a.name) != int(i)) return str_cat("axis ", a.name, " appears twice");
  }
  return {};
}

std::string MeshShape::to_string() const {
  std::string s;
  for (const MeshAxis& a : axes_) s += str_cat(s.empty() ? "" : " x ", a.name, a.size);
  return s.empty() ? "(no axes)" : s;
}

DeviceMesh::DeviceMesh(std::shared_ptr<Communicator> world, MeshShape shape)
    : world_(std::move(world)), shape_(std::move(shape)) {
  const std::string bad = shape_.invalid_reason();
  TESSERA_CHECK(bad.empty(), "mesh: ", bad, " in ", shape_.to_string());
  TESSERA_CHECK(shape_.world_size() == world_->size(), "mesh: ", shape_.to_string(), " needs ",
                shape_.world_size(), " ranks but there are ", world_->size(), " ranks (mpiexec -n ",
                world_->size(), ")");
  const std::vector<MeshAxis>& axes = shape_.axes();
  const size_t n = axes.size();
  // Mixed radix, the last axis fastest.
  coords_.assign(n, 0);
  for (int r = world_->rank(), i = int(n) - 1; i >= 0; --i) {
    coords_[size_t(i)] = r % axes[size_t(i)].size;
    r /= axes[size_t(i)].size;
  }
  // The linear index of every coordinate but `skip`: equal for the members of one group.
  auto others = [&](size_t skip) {
    int color = 0;
    for (size_t i = 0; i < n; ++i)
      if (i != skip) color = color * axes[i].size + coords_[i];
    return color;
  };
  // Every rank takes part in every split, in axis order.
  for (size_t i = 0; i < n; ++i)
    groups_.push_back(world_->split(others(i), coords_[i], axes[i].name));
  const int pp = shape_.size("pp");
  const bool ends = pp > 1 && (is_first_stage() || is_last_stage());
  // Middle stages get a group of their own that they do not keep.
  const size_t pp_axis = shape_.has("pp") ? size_t(shape_.index("pp")) : n;
  const int color = ends ? others(pp_axis) : world_->size() + world_->rank();
  auto group = world_->split(color, pp_rank(), "embedding");
  if (ends) embedding_ = std::move(group);
}

int DeviceMesh::rank(std::string_view axis) const {
  return shape_.has(axis) ? coords_[size_t(shape_.index(axis))] : 0;
}

Communicator& DeviceMesh::group(std::string_view axis) const {
  return *groups_[size_t(shape_.index(axis))];
}

int DeviceMesh::world_rank(const std::vector<std::pair<std::string, int>>& coordinates) const {
  std::vector<int> c = coords_;
  for (const auto& [axis, index] : coordinates) {
    const size_t i = size_t(shape_.index(axis));
    TESSERA_CHECK(index >= 0 && index < shape_.axes()[i].size, "mesh: ", axis, " index ", index,
                  " is outside ", shape_.to_string());
    c[i] = index;
  }
  int r = 0;
  for (size_t i = 0; i < c.size(); ++i) r = r * shape_.axes()[i].size + c[i];
  return r;
}

}  // namespace tessera::parallel
