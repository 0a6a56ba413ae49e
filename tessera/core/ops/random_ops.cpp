#include "tessera/core/ops/random_ops.h"

#include "tessera/core/detail/op_scope.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"
#include "tessera/core/ops/detail/op_utils.h"

namespace tessera::ops {

Tensor dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset) {
  const OpScope scope("dropout");
  detail::check_defined("dropout", x);
  detail::check_floating("dropout", x);
  // Written so that NaN fails too.
  TESSERA_CHECK(p >= 0.0 && p < 1.0, "dropout: p must be in [0, 1), got ", p, " for ",
                x.describe());
  if (p == 0.0) return x;
  // Element i of the mask belongs to row-major position i, whatever x's strides are.
  Tensor xc = contiguous(x);
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  if (out.numel() > 0) detail::backend(x).dropout(xc, out, p, seed, offset);
  return out;
}

}  // namespace tessera::ops
