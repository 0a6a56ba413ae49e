#pragma once
// Validation helpers shared by the op front end. Every message names the op and describes the
// offending tensors (dtype, shape, device).

#include <initializer_list>

#include "tessera/core/backend.h"
#include "tessera/core/tensor.h"

namespace tessera::ops::detail {

void check_defined(const char* op, const Tensor& t, const char* what = "input");
// All defined tensors in the list are on one device; returns it.
Device check_same_device(const char* op, std::initializer_list<const Tensor*> tensors);
void check_floating(const char* op, const Tensor& t, const char* what = "input");
void check_integer(const char* op, const Tensor& t, const char* what = "input");
void check_dtype(const char* op, const Tensor& t, DType dtype, const char* what = "input");
void check_shape(const char* op, const Tensor& t, const Shape& shape, const char* what = "input");
void check_dim(const char* op, const Tensor& t, int ndim, const char* what = "input");
// Fails if the storage was released (a view of freed memory).
void check_alive(const char* op, const Tensor& t, const char* what = "input");

inline Backend& backend(const Tensor& t) {
  return backend_for(t.device());
}

}  // namespace tessera::ops::detail
