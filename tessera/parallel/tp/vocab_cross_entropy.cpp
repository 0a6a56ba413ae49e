// Vocab-parallel cross-entropy as an autograd Function. The [N, V_local] passes (max, exp-sum,
// the softmax of the backward pass) are front-end ops; the targets are few (N) and are split
// into "mine" and "not mine" on the host. Picking each owned target's logit and placing the
// one-hot term in the backward pass are a gather and a scatter-add over the flattened logits
// (embedding and its backward with a width of one), so the result is deterministic.

#include "tessera/parallel/tp/detail/vocab_cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tessera/autograd/function.h"
#include "tessera/core/error.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/elementwise.h"
#include "tessera/core/ops/embedding.h"
#include "tessera/core/ops/movement.h"
#include "tessera/core/ops/reduction.h"

namespace tessera::parallel::tp {

namespace {

constexpr const char* kName = "vocab_parallel_cross_entropy";

class VocabParallelCrossEntropy final : public autograd::Function {
 public:
  VocabParallelCrossEntropy(std::shared_ptr<Communicator> group, Tensor targets,
                            int64_t vocab_start, int64_t num_classes, int64_t ignore_index)
      : group_(std::move(group)),
        targets_(std::move(targets)),
        vocab_start_(vocab_start),
        num_classes_(num_classes),
        ignore_index_(ignore_index) {}

  const char* name() const override { return kName; }

  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    const Tensor& logits = in[0];
    logits_shape_ = logits.shape();
    logits_dtype_ = logits.dtype();
    v_ = logits.size(-1);
    n_ = logits.numel() / v_;
    local_ = std::clamp<int64_t>(num_classes_ - vocab_start_, 0, v_);
    const DType cd = logits.dtype() == DType::f64 ? DType::f64 : DType::f32;
    Tensor x = ops::contiguous(ops::cast(ops::reshape(logits, Shape{n_, v_}), cd));
    const Device dev = logits.device();

    // Valid rows, and the flat positions of the targets this rank owns.
    const std::vector<int64_t> t = to_vector<int64_t>(targets_);
    std::vector<float> valid(static_cast<size_t>(n_));
    std::vector<int64_t> rows, flat;
    for (int64_t i = 0; i < n_; ++i) {
      const int64_t target = t[size_t(i)];
      if (target == ignore_index_) continue;
      TESSERA_CHECK(target >= 0 && target < num_classes_, kName, ": target ", target,
                    " at flat position ", i, " of ", targets_.describe(),
                    " is outside [0, num_classes = ", num_classes_, ")");
      valid[size_t(i)] = 1.f;
      ++count_;
      if (target >= vocab_start_ && target < vocab_start_ + local_) {
        rows.push_back(i);
        flat.push_back(i * v_ + target - vocab_start_);
      }
    }
    Tensor mask = ops::cast(from_vector<float>(valid, Shape{n_}, dev), cd);
    if (!flat.empty()) flat_ = from_vector<int64_t>(flat, Shape{int64_t(flat.size())}, dev);

    // The shift: the row max over every rank's real classes.
    Tensor m = local_ > 0 ? ops::contiguous(ops::max(real(x), 1).values)
                          : full(Shape{n_}, -INFINITY, cd, dev);
    group_->all_reduce(m, CommOp::max);
    Tensor s = local_ > 0 ? ops::sum(ops::exp(ops::sub(real(x), ops::unsqueeze(m, 1))), {1})
                          : zeros(Shape{n_}, cd, dev);
    s = ops::contiguous(s);
    group_->all_reduce(s);
    Tensor lse = ops::add(m, ops::log(s));
    // The target logit, from its owner; the other ranks add exact zeros.
    Tensor z = zeros(Shape{n_}, cd, dev);
    if (flat_.defined()) {
      Tensor picked = ops::embedding(ops::view(x, Shape{n_ * v_, 1}), flat_);
      Tensor row_ids = from_vector<int64_t>(rows, Shape{int64_t(rows.size())}, dev);
      z = ops::view(ops::embedding_backward(row_ids, picked, n_), Shape{n_});
    }
    group_->all_reduce(z);
    Tensor loss = ops::div(ops::sum(ops::mul(ops::sub(lse, z), mask)),
                           double(std::max<int64_t>(count_, 1)));
    save({x, lse, mask});
    return {loss};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    const Tensor x = saved(0), lse = saved(1), mask = saved(2);
    const Tensor scale =
        ops::div(ops::cast(grads[0], x.dtype()), double(std::max<int64_t>(count_, 1)));
    Tensor d = zeros(Shape{n_, v_}, x.dtype(), x.device());
    if (local_ > 0) {
      Tensor p = ops::exp(ops::sub(real(x), ops::unsqueeze(lse, 1)));
      ops::copy_(real(d), ops::mul(p, ops::unsqueeze(ops::mul(mask, scale), 1)));
    }
    if (flat_.defined()) {
      const int64_t owned = flat_.numel();
      Tensor coef = ops::contiguous(ops::expand(ops::view(scale, Shape{1, 1}), Shape{owned, 1}));
      d = ops::sub(d, ops::view(ops::embedding_backward(flat_, coef, n_ * v_), Shape{n_, v_}));
    }
    return {ops::cast(ops::reshape(d, logits_shape_), logits_dtype_)};
  }

 private:
  // The real (non-padding) classes of this rank's slice.
  Tensor real(const Tensor& x) const { return ops::narrow(x, 1, 0, local_); }

  std::shared_ptr<Communicator> group_;
  Tensor targets_, flat_;
  int64_t vocab_start_, num_classes_, ignore_index_;
  Shape logits_shape_;
  DType logits_dtype_ = DType::f32;
  int64_t v_ = 0, n_ = 0, local_ = 0, count_ = 0;
};

}  // namespace

Tensor vocab_parallel_cross_entropy(const Tensor& logits_shard, const Tensor& targets,
                                    int64_t vocab_start, int64_t num_classes,
                                    int64_t ignore_index,
                                    const std::shared_ptr<Communicator>& group) {
  TESSERA_CHECK(group != nullptr, kName, ": the group is null");
  TESSERA_CHECK(logits_shard.defined() && logits_shard.dim() >= 1 && is_floating(logits_shard.dtype()) &&
                    logits_shard.size(-1) > 0,
                kName, ": logits must be a floating [..., V_local] tensor, got ",
                describe(logits_shard));
  TESSERA_CHECK(targets.defined() && !is_floating(targets.dtype()), kName,
                ": targets must be an i32/i64 tensor, got ", describe(targets));
  Shape leading = logits_shard.shape();
  leading.erase(leading.size() - 1);
  TESSERA_CHECK(targets.shape() == leading, kName, ": targets ", targets.describe(),
                " must have the logits' leading shape ", leading, " (logits ",
                logits_shard.describe(), ")");
  TESSERA_CHECK(num_classes > 0 && vocab_start >= 0, kName, ": num_classes (", num_classes,
                ") must be positive and vocab_start (", vocab_start, ") non-negative");
  return autograd::apply_function(
      std::make_shared<VocabParallelCrossEntropy>(group, targets, vocab_start, num_classes,
                                                  ignore_index),
      {logits_shard})[0];
}

}  // namespace tessera::parallel::tp
