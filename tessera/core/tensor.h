#pragma once
// Tensor: a cheap handle to shared metadata (shape, element strides, offset, dtype) over shared
// Storage. Copying a Tensor copies the handle; views share storage; contiguous() is the only
// implicit copy. A default-constructed Tensor is "undefined" (like a null pointer).
//
// Ops are free functions: tessera::ops::* compute without recording autograd, and the
// differentiable tessera::* functions (autograd/) record the tape.

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "tessera/core/device.h"
#include "tessera/core/dtype.h"
#include "tessera/core/shape.h"
#include "tessera/core/storage.h"

namespace tessera {

namespace autograd {
class Node;
}

class Tensor;

struct TensorImpl {
  Shape shape;
  Strides strides;
  int64_t offset = 0;  // in elements
  DType dtype = DType::f32;
  std::shared_ptr<Storage> storage;

  // Autograd state; plain data here, interpreted by autograd/.
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<autograd::Node> grad_fn;
  uint32_t output_nr = 0;
  // For a leaf: the node accumulating its gradient in the live graph (one per leaf, so all
  // contributions are summed before the hooks run), and hooks called with the leaf once its
  // gradient for this backward pass is complete (data-parallel reduction starts there).
  std::weak_ptr<autograd::Node> grad_accumulator;
  std::vector<std::function<void(const Tensor&)>> post_accumulate_hooks;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}
  // A tensor over `storage` with the given layout.
  Tensor(std::shared_ptr<Storage> storage, const Shape& shape, const Strides& strides,
         int64_t offset, DType dtype);

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  int dim() const { return impl().shape.size(); }
  int64_t size(int64_t dim) const;  // negative dims count from the end
  const Strides& strides() const { return impl().strides; }
  int64_t stride(int64_t dim) const;
  int64_t offset() const { return impl().offset; }
  int64_t numel() const { return impl().shape.numel(); }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device(); }
  size_t itemsize() const { return dtype_size(dtype()); }
  size_t nbytes() const { return size_t(numel()) * itemsize(); }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return impl().storage; }

  // Address of the first element; throws naming `op` if the storage was released.
  void* data_ptr(const char* op = "tensor access") const;
  // Typed address of the first element; throws if T is not the tensor's dtype.
  template <class T>
  T* data(const char* op = "tensor access") const {
    TESSERA_CHECK(dtype_of<T> == dtype(), op, ": expected a ", dtype_name(dtype_of<T>),
                  " tensor, got ", describe());
    return static_cast<T*>(data_ptr(op));
  }
  // The single element of a one-element tensor, converted to T (copied from the device).
  template <class T>
  T item() const;

  // "f32[2, 3] on cpu"
  std::string describe() const;
  // The values, numpy-style, eliding the middle of long dimensions.
  std::string to_string() const;

  // ---- autograd state (the tape itself lives in autograd/) ----
  bool requires_grad() const { return impl().requires_grad || impl().grad_fn != nullptr; }
  // Marks a leaf as a parameter-like tensor whose gradient accumulates into grad().
  const Tensor& set_requires_grad(bool value) const;
  bool is_leaf() const { return impl().grad_fn == nullptr; }
  Tensor grad() const { return Tensor(impl().grad); }
  void set_grad(const Tensor& grad) const { impl().grad = grad.impl_; }
  const std::shared_ptr<autograd::Node>& grad_fn() const { return impl().grad_fn; }
  uint32_t output_nr() const { return impl().output_nr; }
  // Backpropagates from this tensor (a scalar, unless `gradient` is given), on the engine
  // that tessera::autograd installs (detail::set_backward_engine) where graphs are built.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;

  TensorImpl* impl_ptr() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& shared_impl() const { return impl_; }
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

 private:
  TensorImpl& impl() const;
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// "f32[2, 3] on cpu", or "undefined"; for error messages.
std::string describe(const Tensor& t);

namespace detail {
// The reverse-mode engine Tensor::backward runs. The lower layer owns the hook and the upper
// fills it: autograd/node.cpp installs autograd::backward at static initialisation, and any
// program that builds a graph links node.cpp. Null until then.
using BackwardEngine = void (*)(const Tensor& root, const Tensor& gradient, bool retain_graph);
void set_backward_engine(BackwardEngine engine);
}  // namespace detail

}  // namespace tessera
