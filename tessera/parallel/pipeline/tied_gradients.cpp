#include "tessera/parallel/pipeline/detail/tied_gradients.h"

#include "tessera/core/error.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"

namespace tessera::parallel {

void all_reduce_tied_gradients(Communicator* group, const std::vector<Tensor>& params) {
  if (group == nullptr) return;
  // Agree on the layout first: max over the group of (n, elements, -n, -elements) equals this
  // rank's own values only if every rank passed the same.
  int64_t elements = 0;
  for (const Tensor& p : params) {
    TESSERA_CHECK(p.defined(), "tied gradient all-reduce on group ", group->name(),
                  ": a tied parameter is undefined");
    elements += p.numel();
  }
  const int64_t n = int64_t(params.size());
  Tensor layout = from_vector<int64_t>({n, elements, -n, -elements}, {4});
  group->all_reduce(layout, CommOp::max);
  std::vector<int64_t> agreed = to_vector<int64_t>(layout);
  TESSERA_CHECK(
      agreed[0] == n && agreed[1] == elements && agreed[2] == -n && agreed[3] == -elements,
      "tied gradient all-reduce on group ", group->name(), ": rank ", group->rank(), " passes ", n,
      " parameters of ", elements, " elements but the ranks disagree (between ", -agreed[2],
      " and ", agreed[0], " parameters, ", -agreed[3], " and ", agreed[1], " elements)");

  std::vector<std::shared_ptr<Work>> pending;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) {
      g = zeros_like(p);
      p.set_grad(g);
    } else if (!g.is_contiguous()) {
      g = ops::contiguous(g);
      p.set_grad(g);
    }
    TESSERA_CHECK(g.numel() == p.numel(), "tied gradient all-reduce on group ", group->name(),
                  ": gradient ", g.describe(), " does not match its parameter ", p.describe());
    pending.push_back(group->all_reduce_async(g, CommOp::sum));
  }
  for (auto& w : pending) w->wait();
}

void all_reduce_tied_gradients(const DeviceMesh& mesh, const std::vector<Tensor>& params) {
  all_reduce_tied_gradients(mesh.embedding(), params);
}

}  // namespace tessera::parallel
