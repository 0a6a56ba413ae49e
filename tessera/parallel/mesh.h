#pragma once
// DeviceMesh: the world split along an ordered list of named axes, the last varying fastest.
// The engine's mesh is dp x pp x tp, so a tensor-parallel group holds consecutive ranks (on one
// node when ranks are placed by node):
//
//   world rank = (dp_index * pp + pp_index) * tp + tp_index
//
//   dp=2, pp=2, tp=2:   rank:  0  1  2  3  4  5  6  7
//                       dp:    0  0  0  0  1  1  1  1
//                       pp:    0  0  1  1  0  0  1  1
//                       tp:    0  1  0  1  0  1  0  1
//
// Each axis has its own sub-communicator, group("tp"): the ranks that share every other
// coordinate. A new kind of parallelism (context, expert) is a new axis in the list; the mesh
// builds its group with no change here. `embedding` joins the first and last pipeline stage of
// a coordinate, for the tied-embedding gradient.

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/parallel/comm/communicator.h"

namespace tessera::parallel {

struct MeshAxis {
  std::string name;
  int size = 1;
};

class MeshShape {
 public:
  // dp1 x pp1 x tp1: one process.
  MeshShape() : MeshShape(1, 1, 1) {}
  // The engine's three axes, outermost first.
  MeshShape(int dp, int pp, int tp);
  // Any axes, outermost first. Names must be unique and non-empty (checked by DeviceMesh and
  // validate(), so a shape can be built and then refused with a reason).
  explicit MeshShape(std::vector<MeshAxis> axes) : axes_(std::move(axes)) {}

  const std::vector<MeshAxis>& axes() const { return axes_; }
  bool has(std::string_view axis) const { return find(axis) >= 0; }
  // The axis's position in the list; throws naming the axes when there is none.
  int index(std::string_view axis) const;
  // The axis's size; 1 for an axis the shape does not have (a layout without context
  // parallelism has one context-parallel rank).
  int size(std::string_view axis) const;
  int world_size() const;
  // Empty when usable; otherwise why not (a size < 1, a repeated or empty name).
  std::string invalid_reason() const;
  std::string to_string() const;  // "dp2 x pp1 x tp2"

 private:
  int find(std::string_view axis) const;
  std::vector<MeshAxis> axes_;
};

class DeviceMesh {
 public:
  // Collective over world. Throws naming the sizes when their product != world.size().
  DeviceMesh(std::shared_ptr<Communicator> world, MeshShape shape);

  const MeshShape& shape() const { return shape_; }
  // This rank's coordinate along an axis (0 for an axis the shape does not have).
  int rank(std::string_view axis) const;
  // The ranks that share every coordinate but this axis's, ordered by it. Throws naming the
  // axes when there is no such axis.
  Communicator& group(std::string_view axis) const;

  // Shorthands for the engine's axes.
  int dp_rank() const { return rank("dp"); }
  int pp_rank() const { return rank("pp"); }
  int tp_rank() const { return rank("tp"); }
  Communicator& dp() const { return group("dp"); }
  Communicator& pp() const { return group("pp"); }
  Communicator& tp() const { return group("tp"); }
  bool is_first_stage() const { return pp_rank() == 0; }
  bool is_last_stage() const { return pp_rank() == shape_.size("pp") - 1; }

  Communicator& world() const { return *world_; }
  // First and last stage of this rank's pipeline (every other coordinate equal); null on
  // middle stages and when pp == 1 (nothing to tie across).
  Communicator* embedding() const { return embedding_.get(); }

  // The world rank at these coordinates; an axis left out keeps this rank's coordinate, so
  // world_rank({{"pp", 0}}) is the first stage of this rank's pipeline.
  int world_rank(const std::vector<std::pair<std::string, int>>& coordinates) const;
  // Sets the step named in timeout messages, on every group.
  void set_step(int64_t step) const { world_->set_step(step); }

 private:
  std::shared_ptr<Communicator> world_, embedding_;
  std::vector<std::shared_ptr<Communicator>> groups_;  // one per axis, in axis order
  std::vector<int> coords_;                            // this rank's, in axis order
  MeshShape shape_;
};

}  // namespace tessera::parallel
