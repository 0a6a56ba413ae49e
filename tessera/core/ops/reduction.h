#pragma once
// Reductions and softmax. Reductions accumulate in f32 (f64 for f64 inputs) in an order that
// does not depend on the thread count.

#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::ops {

// Over the given dims (empty means all dims).
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);

struct MaxResult {
  Tensor values;
  Tensor indices;  // i64, the position of the maximum along dim (the first, on ties)
};
MaxResult max(const Tensor& x, int64_t dim, bool keepdim = false);
// Gradient of max along dim: gy (shaped like values) routed to the argmax positions.
Tensor max_backward(const Tensor& indices, const Tensor& gy, const Shape& input_shape, int64_t dim,
                    bool keepdim);

// Sums x down to `shape`, which x broadcasts from (the backward of broadcasting).
Tensor sum_to(const Tensor& x, const Shape& shape);

Tensor softmax(const Tensor& x, int64_t dim = -1);
Tensor log_softmax(const Tensor& x, int64_t dim = -1);
// gx from y = (log_)softmax(x) and gy.
Tensor softmax_backward(const Tensor& y, const Tensor& gy, int64_t dim, bool log);

// sum over all tensors of sum(x^2), as an f32 0-d tensor on the tensors' device (the global
// gradient norm squared). Tensors may differ in shape; all must share a device.
Tensor squared_norm(const std::vector<Tensor>& xs);

}  // namespace tessera::ops
