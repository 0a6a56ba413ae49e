#include "tessera/core/ops/embedding.h"

#include "tessera/core/detail/op_scope.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"
#include "tessera/core/ops/detail/op_utils.h"

namespace tessera::ops {

using detail::backend;
using detail::check_defined;
using detail::naming_indices;

namespace {

// ids flattened to the contiguous [N] the backend expects.
Tensor flat_ids(const char* op, const Tensor& ids) {
  check_defined(op, ids, "ids");
  detail::check_integer(op, ids, "ids");
  return reshape(contiguous(ids), Shape{ids.numel()});
}

// [*ids.shape, C]
Shape rows_shape(const Tensor& ids, int64_t c) {
  Shape s = ids.shape();
  s.push_back(c);
  return s;
}

}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  const OpScope scope("embedding");
  check_defined("embedding", weight, "weight");
  detail::check_floating("embedding", weight, "weight");
  TESSERA_CHECK(weight.dim() == 2, "embedding: weight must be 2-d [num_embeddings, dim], got ",
                weight.describe());
  Tensor flat = flat_ids("embedding", ids);
  detail::check_same_device("embedding", {&weight, &ids});
  TESSERA_CHECK(ids.dim() < Shape::kMaxDims, "embedding: ids ", ids.describe(),
                " leave no room for the embedding dim (at most ", Shape::kMaxDims, " dims)");
  const int64_t c = weight.shape()[1];
  Tensor out = empty(rows_shape(ids, c), weight.dtype(), weight.device());
  if (flat.numel() > 0)
    naming_indices(ids, "ids", [&] {
      backend(weight).embedding_forward(contiguous(weight), flat,
                                        reshape(out, Shape{flat.numel(), c}));
    });
  return out;
}

Tensor embedding_backward(const Tensor& ids, const Tensor& gy, int64_t num_embeddings) {
  const OpScope scope("embedding_backward");
  const char* op = "embedding_backward";
  Tensor flat = flat_ids(op, ids);
  check_defined(op, gy, "gradient");
  detail::check_floating(op, gy, "gradient");
  detail::check_same_device(op, {&ids, &gy});
  TESSERA_CHECK(num_embeddings >= 0, op, ": num_embeddings must be >= 0, got ", num_embeddings);
  TESSERA_CHECK(gy.dim() == ids.dim() + 1 && rows_shape(ids, gy.shape().back()) == gy.shape(), op,
                ": gradient ", gy.describe(), " must have shape [*ids.shape, C] for ids ",
                ids.describe());
  const int64_t c = gy.shape().back();
  Tensor gweight = zeros(Shape{num_embeddings, c}, gy.dtype(), gy.device());
  if (flat.numel() > 0)
    naming_indices(ids, "ids", [&] {
      backend(gy).embedding_backward(flat, reshape(contiguous(gy), Shape{flat.numel(), c}),
                                     gweight);
    });
  return gweight;
}

}  // namespace tessera::ops
