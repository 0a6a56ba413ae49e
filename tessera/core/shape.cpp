#include "tessera/core/shape.h"

#include <algorithm>
#include <ostream>
#include <sstream>

#include "tessera/core/error.h"

namespace tessera {

DimVector::DimVector(std::initializer_list<int64_t> dims)
    : DimVector(std::span<const int64_t>(dims.begin(), dims.size())) {}

DimVector::DimVector(std::span<const int64_t> dims) {
  TESSERA_CHECK(dims.size() <= size_t(kMaxDims), "shape: at most ", kMaxDims,
                " dimensions are supported, got ", dims.size());
  std::copy(dims.begin(), dims.end(), dims_.begin());
  ndim_ = int(dims.size());
}

DimVector DimVector::filled(int ndim, int64_t value) {
  DimVector v;
  v.resize(ndim, value);
  return v;
}

void DimVector::push_back(int64_t value) {
  TESSERA_CHECK(ndim_ < kMaxDims, "shape: at most ", kMaxDims, " dimensions are supported");
  dims_[ndim_++] = value;
}

void DimVector::insert(int pos, int64_t value) {
  TESSERA_CHECK(ndim_ < kMaxDims, "shape: at most ", kMaxDims, " dimensions are supported");
  TESSERA_ASSERT(pos >= 0 && pos <= ndim_);
  for (int i = ndim_; i > pos; --i) dims_[i] = dims_[i - 1];
  dims_[pos] = value;
  ++ndim_;
}

void DimVector::erase(int pos) {
  TESSERA_ASSERT(pos >= 0 && pos < ndim_);
  for (int i = pos; i + 1 < ndim_; ++i) dims_[i] = dims_[i + 1];
  --ndim_;
}

void DimVector::resize(int ndim, int64_t value) {
  TESSERA_CHECK(ndim >= 0 && ndim <= kMaxDims, "shape: at most ", kMaxDims,
                " dimensions are supported, got ", ndim);
  for (int i = ndim_; i < ndim; ++i) dims_[i] = value;
  ndim_ = ndim;
}

int64_t DimVector::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim_; ++i) n *= dims_[i];
  return n;
}

bool DimVector::operator==(const DimVector& other) const {
  return ndim_ == other.ndim_ && std::equal(begin(), end(), other.begin());
}

std::string DimVector::to_string() const {
  std::ostringstream os;
  os << '[';
  for (int i = 0; i < ndim_; ++i) os << (i ? ", " : "") << dims_[i];
  os << ']';
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const DimVector& v) {
  return os << v.to_string();
}

Strides contiguous_strides(const Shape& shape) {
  Strides s = Strides::filled(shape.size(), 1);
  int64_t acc = 1;
  for (int i = shape.size() - 1; i >= 0; --i) {
    s[i] = acc;
    acc *= std::max<int64_t>(shape[i], 1);
  }
  return s;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  int n = std::max(a.size(), b.size());
  Shape out = Shape::filled(n, 1);
  for (int i = 0; i < n; ++i) {
    int ia = a.size() - n + i, ib = b.size() - n + i;
    int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    TESSERA_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", a, " and ", b,
                  " cannot be broadcast (dimension ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int wrap_dim(int64_t dim, int ndim, const char* op) {
  int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;
  TESSERA_CHECK(dim >= lo && dim <= hi, op, ": dimension ", dim, " is out of range for a ", ndim,
                "-d tensor (expected ", lo, "..", hi, ")");
  return int(dim < 0 ? dim + std::max(ndim, 1) : dim);
}

}  // namespace tessera
