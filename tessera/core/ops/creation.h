#pragma once
// Tensor creation. These produce fresh tensors and never record autograd.

#include <cstdint>
#include <span>
#include <vector>

#include "tessera/core/empty.h"
#include "tessera/core/random.h"
#include "tessera/core/tensor.h"

namespace tessera {

// Uninitialised memory: empty() (core/empty.h), and empty_like.
Tensor empty_like(const Tensor& t);
Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
Tensor zeros_like(const Tensor& t);
Tensor ones(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
Tensor full(const Shape& shape, double value, DType dtype = DType::f32,
            Device device = Device::cpu());
Tensor full_like(const Tensor& t, double value);
// A 0-d tensor holding `value`.
Tensor scalar_tensor(double value, DType dtype = DType::f32, Device device = Device::cpu());
// [start, end) in steps of `step`, like numpy.arange.
Tensor arange(double start, double end, double step = 1.0, DType dtype = DType::i64,
              Device device = Device::cpu());
Tensor arange(int64_t end, DType dtype = DType::i64, Device device = Device::cpu());

// Uniform [lo, hi) and normal draws from `gen`'s Philox stream (which advances by numel).
Tensor rand(const Shape& shape, Generator& gen, DType dtype = DType::f32,
            Device device = Device::cpu(), double lo = 0.0, double hi = 1.0);
Tensor randn(const Shape& shape, Generator& gen, DType dtype = DType::f32,
             Device device = Device::cpu(), double mean = 0.0, double std = 1.0);

// Copies host values of C++ type T into a new tensor of T's dtype on `device`.
template <class T>
Tensor from_vector(std::span<const T> values, const Shape& shape, Device device = Device::cpu());
template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape,
                   Device device = Device::cpu()) {
  return from_vector(std::span<const T>(values), shape, device);
}
// Copies a tensor's values to a host vector of T (converting from the tensor's dtype).
template <class T>
std::vector<T> to_vector(const Tensor& t);

}  // namespace tessera
