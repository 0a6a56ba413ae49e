#pragma once
// Views and data movement. Views share storage with their input; only contiguous(), clone(),
// cast(), to(), cat() and a reshape() that cannot be a view copy.

#include <cstdint>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::ops {

// A view with explicit layout (unchecked beyond staying inside the storage).
Tensor as_strided(const Tensor& x, const Shape& shape, const Strides& strides, int64_t offset);
// A view with a new shape; one entry may be -1. Throws if the layout does not allow a view.
Tensor view(const Tensor& x, const Shape& shape);
// view() when possible, otherwise a contiguous copy.
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);
// Elements start, start + step, ... < end along dim (negative start/end count from the end;
// they are clamped like Python slices).
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
// Index `index` along dim, dropping the dim.
Tensor select(const Tensor& x, int64_t dim, int64_t index);
// A stride-0 view broadcasting x to `shape` (numpy rules).
Tensor expand(const Tensor& x, const Shape& shape);
Tensor squeeze(const Tensor& x, int64_t dim);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);

// x itself if already contiguous, else a contiguous copy.
Tensor contiguous(const Tensor& x);
// Always a fresh contiguous copy.
Tensor clone(const Tensor& x);
// x itself if it already has `dtype`, else a converted contiguous copy.
Tensor cast(const Tensor& x, DType dtype);
// x itself if already on `device`, else a contiguous copy there.
Tensor to(const Tensor& x, Device device);
// Concatenation along dim; every input has the same shape except along dim.
Tensor cat(const std::vector<Tensor>& xs, int64_t dim);
// Views of consecutive pieces of `size` along dim (the last may be shorter).
std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t dim);
// Views of pieces with the given sizes, which must sum to x.size(dim).
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim);

// In-place writes; they bump the storage version so autograd can catch a saved tensor that
// changed. copy_ broadcasts and casts src into dst.
void copy_(const Tensor& dst, const Tensor& src);
void fill_(const Tensor& dst, double value);
void zero_(const Tensor& dst);

}  // namespace tessera::ops
