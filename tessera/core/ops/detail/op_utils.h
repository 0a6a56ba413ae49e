#pragma once
// Validation helpers shared by the op front end. Every message names the op and describes the
// offending tensors (dtype, shape, device).

#include <initializer_list>

#include "tessera/core/backend.h"
#include "tessera/core/error.h"
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

// Runs a backend call that may reject an index by its flat position, and adds the shape the
// caller passed, which the backend (seeing the flattened [N] tensor) cannot name.
template <class F>
void naming_indices(const Tensor& indices, const char* what, F&& call) {
  try {
    call();
  } catch (const InternalError&) {
    throw;
  } catch (const Error& e) {
    throw Error(str_cat(e.what(), " (", what, ": ", indices.describe(),
                        ", flat positions in row-major order)"));
  }
}

inline Backend& backend(const Tensor& t) {
  return backend_for(t.device());
}

}  // namespace tessera::ops::detail
