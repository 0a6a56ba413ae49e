#include "tessera/parallel/engine/detail/parallel_eval.h"

#include <utility>

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"

namespace tessera::parallel {

namespace {

// Puts the chunks in eval mode and, however the pass ends, back in the mode each had.
class EvalMode {
 public:
  explicit EvalMode(const std::vector<std::shared_ptr<nn::GPT>>& chunks) : chunks_(chunks) {
    for (const auto& c : chunks_) {
      training_.push_back(c->is_training());
      c->eval();
    }
  }
  ~EvalMode() {
    for (size_t i = 0; i < chunks_.size(); ++i) chunks_[i]->train(training_[i]);
  }
  EvalMode(const EvalMode&) = delete;
  EvalMode& operator=(const EvalMode&) = delete;

 private:
  const std::vector<std::shared_ptr<nn::GPT>>& chunks_;
  std::vector<bool> training_;
};

}  // namespace

double forward_only_loss(const std::vector<std::shared_ptr<nn::GPT>>& chunks, Communicator& pp,
                         const Tensor& inputs, const Tensor& targets, const ForwardPassSpec& spec) {
  TESSERA_CHECK(!chunks.empty(), "forward_only_loss: no chunks");
  const int M = spec.microbatches;
  TESSERA_CHECK(M >= 1 && inputs.dim() == 2 && inputs.size(0) % M == 0 &&
                    inputs.shape() == targets.shape() && inputs.size(1) == spec.seq_len,
                "forward_only_loss: ids and targets must be [R * ", M, ", ", spec.seq_len,
                "], got ", inputs.describe(), " and ", targets.describe());
  NoGradGuard no_grad;
  EvalMode eval(chunks);
  const int p = pp.size(), rank = pp.rank(), v = int(chunks.size()), last = p * v - 1;
  const int64_t R = inputs.size(0) / M;
  const nn::GPT& first = *chunks.front();
  const bool sp = first.parallel().tp && first.parallel().tp->sequence_parallel();
  const Shape activation{R, sp ? spec.seq_len / first.tp_size() : spec.seq_len,
                         first.config().n_embd};
  auto rows = [&](const Tensor& t, int m) {
    return ops::contiguous(ops::narrow(t, 0, int64_t(m) * R, R));
  };

  double loss_sum = 0;
  std::vector<Tensor> handed(static_cast<size_t>(M));  // p == 1: the previous chunk's outputs
  std::vector<std::pair<std::shared_ptr<Work>, Tensor>> sends;
  auto run = [&](int c, int m) {
    const int stage = c * p + rank;
    const nn::GPT& chunk = *chunks[size_t(c)];
    Tensor x;
    if (stage == 0) {
      x = rows(inputs, m);
    } else if (p == 1) {
      x = std::move(handed[size_t(m)]);
    } else {
      x = empty(activation, chunk.dtype(), inputs.device());
      pp.recv_async(x, (stage - 1) % p, kEvalTag + stage)->wait();
    }
    if (stage == last) {
      loss_sum += chunk.forward_stage(x, rows(targets, m), spec.ignore_index).item<double>();
      return;
    }
    Tensor out = ops::contiguous(chunk.forward_stage(x));
    TESSERA_CHECK(out.shape() == activation, "forward_only_loss: model stage ", stage, " made ",
                  out.describe(), " but the next stage receives ", activation.to_string());
    if (p == 1) {
      handed[size_t(m)] = std::move(out);
    } else {
      sends.emplace_back(pp.send_async(out, (stage + 1) % p, kEvalTag + stage + 1), out);
      // Drop the sends that have completed, so their buffers are freed during the pass.
      std::erase_if(sends, [](auto& entry) { return entry.first->test(); });
    }
  };
  // Over MPI's asynchronous sends, chunk by chunk: stage 0 runs ahead on every micro-batch.
  // Over NCCL a send holds its stream until its receive is issued, and with v > 1 chunks that
  // order deadlocks (rank 0 sends micro-batch 1 to rank 1 while rank 1 sends micro-batch 0 of
  // its first chunk back); micro-batch by micro-batch, each transfer's receive is the next
  // transfer its peer issues, so every pair completes in turn. The losses are the same sums.
  if (pp.transfers_in_issue_order()) {
    for (int m = 0; m < M; ++m)
      for (int c = 0; c < v; ++c) run(c, m);
  } else {
    for (int c = 0; c < v; ++c)
      for (int m = 0; m < M; ++m) run(c, m);
  }
  for (auto& [work, tensor] : sends) work->wait();
  // Only the last model stage's rank has a loss; the others add zeros, which keeps it exact.
  Tensor total = from_vector<double>({loss_sum}, Shape{1});
  pp.all_reduce(total);
  return total.item<double>() / double(M);
}

}  // namespace tessera::parallel
