#pragma once
// Differentiable reductions and softmax.

#include <vector>

#include "tessera/core/ops/reduction.h"
#include "tessera/core/tensor.h"

namespace tessera {

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
// values carry the gradient (to the argmax); indices are plain i64.
ops::MaxResult max(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor softmax(const Tensor& x, int64_t dim = -1);
Tensor log_softmax(const Tensor& x, int64_t dim = -1);

}  // namespace tessera
