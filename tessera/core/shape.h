#pragma once
// Shape and Strides: small inline vectors of int64, so that making a view never touches the heap.

#include <array>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <span>
#include <string>

namespace tessera {

class DimVector {
 public:
  static constexpr int kMaxDims = 8;

  DimVector() = default;
  DimVector(std::initializer_list<int64_t> dims);
  explicit DimVector(std::span<const int64_t> dims);
  static DimVector filled(int ndim, int64_t value);

  int size() const { return ndim_; }
  bool empty() const { return ndim_ == 0; }
  int64_t operator[](int i) const { return dims_[i]; }
  int64_t& operator[](int i) { return dims_[i]; }
  int64_t back() const { return dims_[ndim_ - 1]; }
  const int64_t* begin() const { return dims_.data(); }
  const int64_t* end() const { return dims_.data() + ndim_; }
  int64_t* begin() { return dims_.data(); }
  int64_t* end() { return dims_.data() + ndim_; }
  const int64_t* data() const { return dims_.data(); }
  std::span<const int64_t> span() const { return {dims_.data(), size_t(ndim_)}; }

  void push_back(int64_t value);
  void insert(int pos, int64_t value);
  void erase(int pos);
  void resize(int ndim, int64_t value = 0);

  // Product of all entries; 1 for an empty vector (a 0-d tensor holds one element).
  int64_t numel() const;
  bool operator==(const DimVector& other) const;
  bool operator!=(const DimVector& other) const { return !(*this == other); }
  std::string to_string() const;  // "[2, 3, 4]"

 private:
  std::array<int64_t, kMaxDims> dims_{};
  int ndim_ = 0;
};

using Shape = DimVector;
using Strides = DimVector;

std::ostream& operator<<(std::ostream& os, const DimVector& v);

// Row-major strides, in elements.
Strides contiguous_strides(const Shape& shape);
// The shape two operands broadcast to (numpy rules); throws naming `op` when they cannot.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Wraps a possibly negative dimension index into [0, ndim); throws naming `op` when out of range.
int wrap_dim(int64_t dim, int ndim, const char* op);

}  // namespace tessera
