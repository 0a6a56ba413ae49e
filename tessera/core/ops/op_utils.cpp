#include "tessera/core/ops/detail/op_utils.h"

namespace tessera::ops::detail {

void check_defined(const char* op, const Tensor& t, const char* what) {
  TESSERA_CHECK(t.defined(), op, ": ", what, " is an undefined tensor");
  check_alive(op, t, what);
}

void check_alive(const char* op, const Tensor& t, const char* what) {
  TESSERA_CHECK(!t.storage()->never_allocated(), op, ": ", what, " (", t.describe(),
                ") has no memory yet: it is a deferred parameter, which the parallel layer ",
                "allocates and fills (nn::ModelParallel::defer_parameters)");
  TESSERA_CHECK(!t.storage()->released(), op, ": ", what, " (", t.describe(),
                ") is a view of storage that has been freed");
}

Device check_same_device(const char* op, std::initializer_list<const Tensor*> tensors) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (t == nullptr || !t->defined()) continue;
    if (first == nullptr) {
      first = t;
      continue;
    }
    TESSERA_CHECK(t->device() == first->device(), op,
                  ": tensors are on different devices: ", first->describe(), " and ",
                  t->describe());
  }
  return first ? first->device() : Device::cpu();
}

void check_floating(const char* op, const Tensor& t, const char* what) {
  TESSERA_CHECK(is_floating(t.dtype()), op, ": ", what,
                " must be floating (f32, f64, bf16, f16), got ", t.describe());
}

void check_integer(const char* op, const Tensor& t, const char* what) {
  TESSERA_CHECK(t.dtype() == DType::i32 || t.dtype() == DType::i64, op, ": ", what,
                " must be i32 or i64, got ", t.describe());
}

void check_dtype(const char* op, const Tensor& t, DType dtype, const char* what) {
  TESSERA_CHECK(t.dtype() == dtype, op, ": ", what, " must be ", dtype_name(dtype), ", got ",
                t.describe());
}

void check_shape(const char* op, const Tensor& t, const Shape& shape, const char* what) {
  TESSERA_CHECK(t.shape() == shape, op, ": ", what, " must have shape ", shape, ", got ",
                t.describe());
}

void check_dim(const char* op, const Tensor& t, int ndim, const char* what) {
  TESSERA_CHECK(t.dim() == ndim, op, ": ", what, " must be ", ndim, "-d, got ", t.describe());
}

}  // namespace tessera::ops::detail
