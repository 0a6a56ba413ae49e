#include "tessera/core/empty.h"

#include <memory>

#include "tessera/core/error.h"
#include "tessera/core/detail/op_scope.h"

namespace tessera {

Tensor empty(const Shape& shape, DType dtype, Device device) {
  const OpScope scope("empty");
  for (int64_t d : shape) TESSERA_CHECK(d >= 0, "empty: negative dimension in shape ", shape);
  const size_t nbytes = size_t(shape.numel()) * dtype_size(dtype);
  auto storage = std::make_shared<Storage>(nbytes, device);
  return Tensor(std::move(storage), shape, contiguous_strides(shape), 0, dtype);
}

}  // namespace tessera
