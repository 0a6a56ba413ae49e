#include "tessera/parallel/comm/local_communicator.h"

#include "tessera/core/error.h"
#include "tessera/core/ops/movement.h"

namespace tessera::parallel {

std::shared_ptr<Communicator> LocalCommunicator::do_split(int, int, const std::string& name) {
  return std::make_shared<LocalCommunicator>(name, options_, step_, traffic_);
}

std::shared_ptr<Work> LocalCommunicator::do_all_reduce(const Tensor&, CommOp) {
  return std::make_shared<CompletedWork>();
}

std::shared_ptr<Work> LocalCommunicator::do_reduce_scatter(const Tensor& in, const Tensor& out,
                                                           CommOp) {
  if (!in.is_same(out)) ops::copy_(out, ops::reshape(in, out.shape()));
  return std::make_shared<CompletedWork>();
}

std::shared_ptr<Work> LocalCommunicator::do_all_gather(const Tensor& in, const Tensor& out) {
  if (!in.is_same(out)) ops::copy_(out, ops::reshape(in, out.shape()));
  return std::make_shared<CompletedWork>();
}

std::shared_ptr<Work> LocalCommunicator::do_broadcast(const Tensor&, int) {
  return std::make_shared<CompletedWork>();
}

std::shared_ptr<Work> LocalCommunicator::do_send(const Tensor& x, int dst, int) {
  detail::throw_error("send on group ", name_, ": a group of one has no rank ", dst, " (",
                      x.describe(), ")");
}

std::shared_ptr<Work> LocalCommunicator::do_recv(const Tensor& x, int src, int) {
  detail::throw_error("recv on group ", name_, ": a group of one has no rank ", src, " (",
                      x.describe(), ")");
}

}  // namespace tessera::parallel
