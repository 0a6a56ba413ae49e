#pragma once
// A group of one rank: collectives are copies or no-ops. Single-process runs use it, so code
// written against Communicator runs unchanged without MPI.

#include "tessera/parallel/comm/communicator.h"

namespace tessera::parallel {

class LocalCommunicator final : public Communicator {
 public:
  explicit LocalCommunicator(std::string name = "world", CommOptions options = {},
                             std::shared_ptr<std::atomic<int64_t>> step = nullptr,
                             std::shared_ptr<CommTraffic> traffic = nullptr)
      : Communicator(std::move(name), options, std::move(step), std::move(traffic)) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::shared_ptr<Communicator> do_split(int color, int key, const std::string& name) override;

 protected:
  std::shared_ptr<Work> do_all_reduce(const Tensor& x, CommOp op) override;
  std::shared_ptr<Work> do_reduce_scatter(const Tensor& in, const Tensor& out, CommOp op) override;
  std::shared_ptr<Work> do_all_gather(const Tensor& in, const Tensor& out) override;
  std::shared_ptr<Work> do_broadcast(const Tensor& x, int root) override;
  std::shared_ptr<Work> do_send(const Tensor& x, int dst, int tag) override;
  std::shared_ptr<Work> do_recv(const Tensor& x, int src, int tag) override;
  void do_barrier(double) override {}
};

}  // namespace tessera::parallel
