#pragma once
// DeviceMesh: the world split into dp x pp x tp with tp varying fastest, so a tensor-parallel
// group holds consecutive ranks (on one node when ranks are placed by node):
//
//   world rank = (dp_index * pp + pp_index) * tp + tp_index
//
//   dp=2, pp=2, tp=2:   rank:  0  1  2  3  4  5  6  7
//                       dp:    0  0  0  0  1  1  1  1
//                       pp:    0  0  1  1  0  0  1  1
//                       tp:    0  1  0  1  0  1  0  1
//
// Each axis has its own sub-communicator; `embedding` joins the first and last pipeline stage
// of a (dp, tp) coordinate, for the tied-embedding gradient.

#include <memory>
#include <string>

#include "tessera/parallel/comm/communicator.h"

namespace tessera::parallel {

struct MeshShape {
  int dp = 1, pp = 1, tp = 1;
  int world_size() const { return dp * pp * tp; }
  std::string to_string() const;  // "dp2 x pp1 x tp2"
};

class DeviceMesh {
 public:
  // Collective over world. Throws naming the sizes when dp * pp * tp != world.size().
  DeviceMesh(std::shared_ptr<Communicator> world, MeshShape shape);

  const MeshShape& shape() const { return shape_; }
  int dp_rank() const { return dp_rank_; }
  int pp_rank() const { return pp_rank_; }
  int tp_rank() const { return tp_rank_; }
  bool is_first_stage() const { return pp_rank_ == 0; }
  bool is_last_stage() const { return pp_rank_ == shape_.pp - 1; }

  Communicator& world() const { return *world_; }
  Communicator& dp() const { return *dp_; }
  Communicator& pp() const { return *pp_; }
  Communicator& tp() const { return *tp_; }
  // First and last stage of this rank's (dp, tp) pipeline; null on middle stages and when
  // pp == 1 (nothing to tie across).
  Communicator* embedding() const { return embedding_.get(); }

  // The world rank at mesh coordinates.
  int world_rank(int dp_index, int pp_index, int tp_index) const;
  // Sets the step named in timeout messages, on every group.
  void set_step(int64_t step) const { world_->set_step(step); }

 private:
  std::shared_ptr<Communicator> world_, dp_, pp_, tp_, embedding_;
  MeshShape shape_;
  int dp_rank_ = 0, pp_rank_ = 0, tp_rank_ = 0;
};

}  // namespace tessera::parallel
