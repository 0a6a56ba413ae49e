// Tensor::to_string: numpy-like nested brackets, eliding the middle of long dimensions.

#include <iomanip>
#include <sstream>

#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"

namespace tessera {

namespace {

constexpr int64_t kEdgeItems = 3;  // shown at each end of a dimension longer than 2*kEdge+1

void print_level(std::ostringstream& os, const std::vector<double>& v, const Shape& shape,
                 const Strides& strides, int dim, int64_t base, bool integer, int indent) {
  if (dim == shape.size()) {
    double x = v[size_t(base)];
    if (integer) {
      os << int64_t(x);
    } else {
      os << std::setprecision(6) << x;
    }
    return;
  }
  os << '[';
  int64_t n = shape[dim];
  bool elide = n > 2 * kEdgeItems + 1;
  for (int64_t i = 0; i < n; ++i) {
    if (elide && i == kEdgeItems) {
      os << (dim + 1 == shape.size() ? "..., " : "...,\n" + std::string(indent + 1, ' '));
      i = n - kEdgeItems;
    }
    print_level(os, v, shape, strides, dim + 1, base + i * strides[dim], integer, indent + 1);
    if (i + 1 < n) os << (dim + 1 == shape.size() ? ", " : ",\n" + std::string(indent + 1, ' '));
  }
  os << ']';
}

}  // namespace

std::string Tensor::to_string() const {
  if (!defined()) return "tensor(undefined)";
  if (storage()->released()) return "tensor(<freed storage>, " + describe() + ")";
  std::vector<double> v = to_vector<double>(*this);
  std::ostringstream os;
  os << "tensor(";
  print_level(os, v, shape(), contiguous_strides(shape()), 0, 0, !is_floating(dtype()), 7);
  os << ", " << describe() << ")";
  return os.str();
}

}  // namespace tessera
