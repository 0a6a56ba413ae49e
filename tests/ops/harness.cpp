#include "ops/harness.h"

#include <map>

namespace tessera::testing {

int64_t CaseRng::size(int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(engine_);
}

bool CaseRng::coin() {
  return std::uniform_int_distribution<int>(0, 1)(engine_) == 1;
}

Shape CaseRng::shape(int ndim, int64_t lo, int64_t hi) {
  Shape s;
  for (int i = 0; i < ndim; ++i) s.push_back(size(lo, hi));
  return s;
}

Tensor CaseRng::tensor(const Shape& shape, DType dtype, double scale) {
  if (shape.size() > 0 && coin()) return strided_tensor(shape, dtype, scale);
  return ops::cast(randn(shape, gen_, DType::f64, Device::cpu(), 0.0, scale), dtype);
}

Tensor CaseRng::strided_tensor(const Shape& shape, DType dtype, double scale) {
  const int nd = shape.size();
  if (nd >= 2 && coin()) {
    // Stored transposed in its last two dims.
    Shape t = shape;
    std::swap(t[nd - 1], t[nd - 2]);
    Tensor base = ops::cast(randn(t, gen_, DType::f64, Device::cpu(), 0.0, scale), dtype);
    return ops::transpose(base, -1, -2);
  }
  // Every other element of a buffer twice as wide in the last dim, offset by one.
  Shape wide = shape;
  if (nd == 0) return ops::cast(randn(shape, gen_, DType::f64, Device::cpu(), 0.0, scale), dtype);
  wide[nd - 1] = 2 * shape[nd - 1] + 1;
  Tensor base = ops::cast(randn(wide, gen_, DType::f64, Device::cpu(), 0.0, scale), dtype);
  return ops::slice(base, -1, 1, 2 * shape[nd - 1] + 1, 2);
}

Tensor CaseRng::uniform(const Shape& shape, DType dtype, double lo, double hi) {
  return ops::cast(rand(shape, gen_, DType::f64, Device::cpu(), lo, hi), dtype);
}

Tensor CaseRng::ids(const Shape& shape, int64_t n, DType dtype) {
  std::vector<int64_t> v(size_t(shape.numel()));
  for (auto& x : v) x = size(0, n - 1);
  return ops::cast(from_vector<int64_t>(v, shape), dtype);
}

Shape CaseRng::broadcastable_to(const Shape& shape) {
  Shape s;
  int drop = shape.size() > 0 ? int(size(0, shape.size() - 1)) : 0;
  for (int i = drop; i < shape.size(); ++i) s.push_back(coin() ? 1 : shape[i]);
  return s;
}

HostTensor::HostTensor(const Tensor& t) : shape(t.shape()), v(to_vector<double>(t)) {}

HostTensor::HostTensor(const Shape& s, double fill) : shape(s), v(size_t(s.numel()), fill) {}

int64_t HostTensor::index(const std::vector<int64_t>& idx) const {
  int64_t flat = 0;
  for (int d = 0; d < shape.size(); ++d) flat = flat * shape[d] + idx[size_t(d)];
  return flat;
}

double HostTensor::broadcast_at(const std::vector<int64_t>& out_idx) const {
  int lead = int(out_idx.size()) - shape.size();
  int64_t flat = 0;
  for (int d = 0; d < shape.size(); ++d) {
    int64_t i = shape[d] == 1 ? 0 : out_idx[size_t(lead + d)];
    flat = flat * shape[d] + i;
  }
  return v[size_t(flat)];
}

Tensor HostTensor::to_tensor(DType dtype) const {
  return ops::cast(from_vector<double>(v, shape), dtype);
}

void for_each_index(const Shape& shape, const std::function<void(const std::vector<int64_t>&)>& f) {
  if (shape.numel() == 0) return;
  std::vector<int64_t> idx(size_t(shape.size()), 0);
  while (true) {
    f(idx);
    int d = shape.size() - 1;
    for (; d >= 0; --d) {
      if (++idx[size_t(d)] < shape[d]) break;
      idx[size_t(d)] = 0;
    }
    if (d < 0) return;
  }
}

namespace {
std::vector<OpCase>& registry() {
  static std::vector<OpCase> cases;
  return cases;
}
}  // namespace

bool register_case(OpCase c) {
  registry().push_back(std::move(c));
  return true;
}

const std::vector<OpCase>& all_cases() {
  return registry();
}

const OpCase* find_case(const std::string& name) {
  for (const OpCase& c : registry())
    if (c.name == name) return &c;
  return nullptr;
}

}  // namespace tessera::testing
