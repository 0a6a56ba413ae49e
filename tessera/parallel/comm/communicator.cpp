#include "tessera/parallel/comm/communicator.h"

#include "tessera/core/error.h"

namespace tessera::parallel {

const char* comm_op_name(CommOp op) {
  switch (op) {
    case CommOp::sum:
      return "sum";
    case CommOp::max:
      return "max";
    case CommOp::avg:
      return "avg";
  }
  return "?";
}

const char* comm_wait_name(CommWait wait) {
  switch (wait) {
    case CommWait::automatic:
      return "auto";
    case CommWait::spin:
      return "spin";
    case CommWait::yield:
      return "yield";
  }
  return "?";
}

CommWait parse_comm_wait(const std::string& value, const std::string& where) {
  if (value == "auto") return CommWait::automatic;
  if (value == "spin") return CommWait::spin;
  if (value == "yield") return CommWait::yield;
  detail::throw_error(where, ": '", value, "' is not a wait mode; expected auto, spin or yield");
}

Communicator::Communicator(std::string name, CommOptions options,
                           std::shared_ptr<std::atomic<int64_t>> step,
                           std::shared_ptr<CommTraffic> traffic,
                           std::shared_ptr<CommHealth> health)
    : name_(std::move(name)),
      options_(options),
      step_(step ? std::move(step) : std::make_shared<std::atomic<int64_t>>(-1)),
      traffic_(traffic ? std::move(traffic) : std::make_shared<CommTraffic>()),
      health_(health ? std::move(health) : std::make_shared<CommHealth>()) {
  TESSERA_CHECK(options_.timeout_seconds > 0, "communicator ", name_,
                ": timeout must be positive, got ", options_.timeout_seconds);
  TESSERA_CHECK(options_.mpi_exchange_max_ranks >= 1, "communicator ", name_,
                ": mpi_exchange_max_ranks must be at least 1, got ",
                options_.mpi_exchange_max_ranks);
}

std::string Communicator::describe_call(const char* collective, const Tensor& x) const {
  return str_cat("rank ", rank(), " of group ", name_, " (size ", size(), "), ", collective,
                 x.defined() ? str_cat(" of ", x.describe()) : std::string(),
                 step() >= 0 ? str_cat(", step ", step()) : "");
}

void Communicator::count(CommKind kind, const Tensor& message) {
  if (counts_traffic_ && size() > 1 && message.numel() > 0)
    traffic_->add(kind, int64_t(message.nbytes()), size());
}

namespace {

void check_tensor(const Communicator& c, const char* what, const Tensor& t) {
  TESSERA_CHECK(t.defined(), what, " on group ", c.name(), ": the tensor is undefined");
  TESSERA_CHECK(!t.storage()->released(), what, " on group ", c.name(), ": ", t.describe(),
                " is a view of freed storage");
  TESSERA_CHECK(t.is_contiguous(), what, " on group ", c.name(), ": ", t.describe(),
                " must be contiguous");
}

void check_peer(const Communicator& c, const char* what, int peer) {
  TESSERA_CHECK(peer >= 0 && peer < c.size() && peer != c.rank(), what, " on group ", c.name(),
                ": peer rank ", peer, " is not another rank of a group of ", c.size(),
                " (this is rank ", c.rank(), ")");
}

}  // namespace

void Communicator::barrier(double timeout_seconds) {
  TESSERA_CHECK(timeout_seconds >= 0, "barrier on group ", name_, ": timeout must be >= 0, got ",
                timeout_seconds);
  if (health_->broken()) health_->check(describe_call("barrier", Tensor()));
  do_barrier(timeout_seconds > 0 ? timeout_seconds : options_.timeout_seconds);
}

std::shared_ptr<Work> Communicator::all_reduce_async(const Tensor& x, CommOp op) {
  check_tensor(*this, "all_reduce", x);
  if (health_->broken()) health_->check(describe_call("all_reduce", x));
  TESSERA_CHECK(op != CommOp::avg || is_floating(x.dtype()), "all_reduce avg on group ", name_,
                ": ", x.describe(), " is not floating");
  if (size() == 1 || x.numel() == 0) return std::make_shared<CompletedWork>();
  count(CommKind::all_reduce, x);
  return do_all_reduce(x, op);
}

std::shared_ptr<Work> Communicator::reduce_scatter_async(const Tensor& in, const Tensor& out,
                                                         CommOp op) {
  check_tensor(*this, "reduce_scatter", in);
  check_tensor(*this, "reduce_scatter", out);
  if (health_->broken()) health_->check(describe_call("reduce_scatter", in));
  const bool widening = (in.dtype() == DType::bf16 || in.dtype() == DType::f16) &&
                        out.dtype() == DType::f32 && op != CommOp::max;
  TESSERA_CHECK(in.numel() == out.numel() * size() &&
                    (in.dtype() == out.dtype() || widening) && in.device() == out.device(),
                "reduce_scatter ", comm_op_name(op), " on group ", name_, ": input ",
                in.describe(), " must hold ", size(), " chunks of the output ", out.describe(),
                ", in its dtype (or, widening a sum, bf16/f16 into f32) and on its device");
  count(CommKind::reduce_scatter, in);
  return do_reduce_scatter(in, out, op);
}

std::shared_ptr<Work> Communicator::all_gather_async(const Tensor& in, const Tensor& out) {
  check_tensor(*this, "all_gather", in);
  check_tensor(*this, "all_gather", out);
  if (health_->broken()) health_->check(describe_call("all_gather", in));
  TESSERA_CHECK(out.numel() == in.numel() * size() && in.dtype() == out.dtype() &&
                    in.device() == out.device(),
                "all_gather on group ", name_, ": output ", out.describe(), " must hold ", size(),
                " copies of the input ", in.describe(), ", in its dtype and on its device");
  count(CommKind::all_gather, out);
  return do_all_gather(in, out);
}

std::shared_ptr<Work> Communicator::broadcast_async(const Tensor& x, int root) {
  check_tensor(*this, "broadcast", x);
  if (health_->broken()) health_->check(describe_call("broadcast", x));
  TESSERA_CHECK(root >= 0 && root < size(), "broadcast on group ", name_, ": root ", root,
                " is outside a group of ", size());
  if (size() == 1 || x.numel() == 0) return std::make_shared<CompletedWork>();
  count(CommKind::broadcast, x);
  return do_broadcast(x, root);
}

std::shared_ptr<Work> Communicator::send_async(const Tensor& x, int dst, int tag) {
  check_tensor(*this, "send", x);
  check_peer(*this, "send", dst);
  if (health_->broken()) health_->check(describe_call("send", x));
  count(CommKind::send, x);
  return do_send(x, dst, tag);
}

std::shared_ptr<Work> Communicator::recv_async(const Tensor& x, int src, int tag) {
  check_tensor(*this, "recv", x);
  check_peer(*this, "recv", src);
  if (health_->broken()) health_->check(describe_call("recv", x));
  count(CommKind::recv, x);
  return do_recv(x, src, tag);
}

}  // namespace tessera::parallel
