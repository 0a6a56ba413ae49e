#include "tessera/core/ops/creation.h"

#include <cmath>

#include "tessera/core/detail/op_scope.h"
#include "tessera/core/ops/movement.h"
#include "tessera/core/ops/detail/op_utils.h"

namespace tessera {

Tensor empty_like(const Tensor& t) {
  ops::detail::check_defined("empty_like", t);
  return empty(t.shape(), t.dtype(), t.device());
}

Tensor full(const Shape& shape, double value, DType dtype, Device device) {
  const OpScope scope("full");
  Tensor t = empty(shape, dtype, device);
  if (t.numel() > 0) backend_for(device).fill(t, value);
  return t;
}

Tensor zeros(const Shape& shape, DType dtype, Device device) {
  const OpScope scope("zeros");
  return full(shape, 0.0, dtype, device);
}

Tensor zeros_like(const Tensor& t) {
  ops::detail::check_defined("zeros_like", t);
  return zeros(t.shape(), t.dtype(), t.device());
}

Tensor ones(const Shape& shape, DType dtype, Device device) {
  const OpScope scope("ones");
  return full(shape, 1.0, dtype, device);
}

Tensor full_like(const Tensor& t, double value) {
  ops::detail::check_defined("full_like", t);
  return full(t.shape(), value, t.dtype(), t.device());
}

Tensor scalar_tensor(double value, DType dtype, Device device) {
  return full(Shape{}, value, dtype, device);
}

Tensor arange(double start, double end, double step, DType dtype, Device device) {
  const OpScope scope("arange");
  TESSERA_CHECK(step != 0.0 && std::isfinite(step) && std::isfinite(start) && std::isfinite(end),
                "arange: invalid range start=", start, " end=", end, " step=", step);
  double count = std::ceil((end - start) / step);
  int64_t n = count > 0 ? int64_t(count) : 0;
  Tensor t = empty(Shape{n}, dtype, device);
  if (n > 0) backend_for(device).arange(t, start, step);
  return t;
}

Tensor arange(int64_t end, DType dtype, Device device) {
  const OpScope scope("arange");
  return arange(0.0, double(end), 1.0, dtype, device);
}

Tensor rand(const Shape& shape, Generator& gen, DType dtype, Device device, double lo, double hi) {
  const OpScope scope("rand");
  TESSERA_CHECK(is_floating(dtype), "rand: dtype must be floating, got ", dtype_name(dtype));
  TESSERA_CHECK(lo < hi, "rand: expected lo < hi, got [", lo, ", ", hi, ")");
  Tensor t = empty(shape, dtype, device);
  uint64_t offset = gen.advance(uint64_t(t.numel()));
  if (t.numel() > 0) backend_for(device).random_uniform(t, lo, hi, gen.seed(), offset);
  return t;
}

Tensor randn(const Shape& shape, Generator& gen, DType dtype, Device device, double mean,
             double std) {
  const OpScope scope("randn");
  TESSERA_CHECK(is_floating(dtype), "randn: dtype must be floating, got ", dtype_name(dtype));
  TESSERA_CHECK(std >= 0, "randn: std must be non-negative, got ", std);
  Tensor t = empty(shape, dtype, device);
  uint64_t offset = gen.advance(uint64_t(t.numel()));
  if (t.numel() > 0) backend_for(device).random_normal(t, mean, std, gen.seed(), offset);
  return t;
}

template <class T>
Tensor from_vector(std::span<const T> values, const Shape& shape, Device device) {
  TESSERA_CHECK(int64_t(values.size()) == shape.numel(), "from_vector: ", values.size(),
                " values do not fill shape ", shape, " (", shape.numel(), " elements)");
  Tensor host = empty(shape, dtype_of<T>, Device::cpu());
  std::copy(values.begin(), values.end(), host.data<T>("from_vector"));
  return device.is_cpu() ? host : ops::to(host, device);
}

template <class T>
std::vector<T> to_vector(const Tensor& t) {
  ops::detail::check_defined("to_vector", t);
  Tensor host = ops::contiguous(ops::cast(ops::to(t, Device::cpu()), dtype_of<T>));
  const T* p = host.data<T>("to_vector");
  return std::vector<T>(p, p + host.numel());
}

#define TESSERA_INSTANTIATE_VECTOR_IO(T)                                    \
  template Tensor from_vector<T>(std::span<const T>, const Shape&, Device); \
  template std::vector<T> to_vector<T>(const Tensor&);
TESSERA_INSTANTIATE_VECTOR_IO(float)
TESSERA_INSTANTIATE_VECTOR_IO(double)
TESSERA_INSTANTIATE_VECTOR_IO(int32_t)
TESSERA_INSTANTIATE_VECTOR_IO(int64_t)
TESSERA_INSTANTIATE_VECTOR_IO(BFloat16)
TESSERA_INSTANTIATE_VECTOR_IO(Half)
#undef TESSERA_INSTANTIATE_VECTOR_IO

}  // namespace tessera
