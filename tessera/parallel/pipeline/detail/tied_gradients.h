#pragma once
// The tied embedding across a pipeline: the first stage holds wte for the lookup and the last
// stage a copy of it for the head. Each copy's gradient covers only its own use, so after the
// backward pass the two are summed over the group joining the two stages (DeviceMesh::
// embedding()); both copies then hold the full gradient and take the same optimizer step.

#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/parallel/comm/communicator.h"
#include "tessera/parallel/mesh.h"

namespace tessera::parallel {

// Sums each parameter's gradient over `group`, in place. A parameter without a gradient yet
// contributes zeros (it is given a zero gradient first). Both sides must pass the same number
// of parameters with the same sizes; a mismatch throws on both sides instead of corrupting
// the sums. No-op when group is null (middle stages, pp = 1).
void all_reduce_tied_gradients(Communicator* group, const std::vector<Tensor>& params);

// Over mesh.embedding().
void all_reduce_tied_gradients(const DeviceMesh& mesh, const std::vector<Tensor>& params);

}  // namespace tessera::parallel
