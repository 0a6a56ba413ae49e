#include "tessera/core/empty.h"

#include <algorithm>
#include <memory>

#include "tessera/core/error.h"
#include "tessera/core/detail/op_scope.h"

namespace tessera {

namespace {

// The bytes a contiguous tensor of `shape` and `dtype` needs, checked against overflow.
size_t checked_nbytes(const Shape& shape, DType dtype) {
  // The strides count an empty dimension as 1, so the product with 0 taken as 1 must fit int64
  // (an empty [0, 2^62, 4] overflowed them); it bounds the element count too.
  int64_t extent = 1;
  for (int64_t d : shape) {
    TESSERA_CHECK(d >= 0, "empty: negative dimension in shape ", shape);
    TESSERA_CHECK(!__builtin_mul_overflow(extent, std::max<int64_t>(d, 1), &extent),
                  "empty: shape ", shape, " has dimensions whose product does not fit in 63 bits");
  }
  size_t nbytes = 0;
  TESSERA_CHECK(!__builtin_mul_overflow(size_t(shape.numel()), dtype_size(dtype), &nbytes),
                "empty: shape ", shape, " of ", dtype_name(dtype),
                " needs more bytes than fit in 64 bits");
  return nbytes;
}

}  // namespace

Tensor empty(const Shape& shape, DType dtype, Device device) {
  const OpScope scope("empty");
  auto storage = std::make_shared<Storage>(checked_nbytes(shape, dtype), device);
  return Tensor(std::move(storage), shape, contiguous_strides(shape), 0, dtype);
}

Tensor unallocated(const Shape& shape, DType dtype, Device device) {
  const OpScope scope("unallocated");
  return Tensor(Storage::unallocated(checked_nbytes(shape, dtype), device), shape,
                contiguous_strides(shape), 0, dtype);
}

}  // namespace tessera
