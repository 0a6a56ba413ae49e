#include "tessera/core/tensor.h"

#include <ostream>

#include "tessera/core/backend.h"
#include "tessera/core/empty.h"

namespace tessera {

Tensor::Tensor(std::shared_ptr<Storage> storage, const Shape& shape, const Strides& strides,
               int64_t offset, DType dtype) {
  TESSERA_ASSERT(storage != nullptr);
  TESSERA_ASSERT(shape.size() == strides.size());
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = dtype;
  impl->storage = std::move(storage);
  impl_ = std::move(impl);
}

TensorImpl& Tensor::impl() const {
  TESSERA_CHECK(impl_ != nullptr, "tensor access: the tensor is undefined (default-constructed)");
  return *impl_;
}

int64_t Tensor::size(int64_t dim) const {
  return shape()[wrap_dim(dim, this->dim(), "size")];
}

int64_t Tensor::stride(int64_t dim) const {
  return strides()[wrap_dim(dim, this->dim(), "stride")];
}

bool Tensor::is_contiguous() const {
  if (numel() == 0) return true;  // no element to misplace (contiguous_strides skips 0 dims)
  int64_t expected = 1;
  const Shape& s = shape();
  const Strides& st = strides();
  for (int i = s.size() - 1; i >= 0; --i) {
    if (s[i] == 1) continue;
    if (st[i] != expected) return false;
    expected *= s[i];
  }
  return true;
}

void* Tensor::data_ptr(const char* op) const {
  return static_cast<char*>(impl().storage->data(op)) + offset() * int64_t(itemsize());
}

namespace {
detail::BackwardEngine backward_engine = nullptr;
}  // namespace

void detail::set_backward_engine(BackwardEngine engine) {
  backward_engine = engine;
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  TESSERA_CHECK(backward_engine != nullptr, "backward: ", describe(),
                " has no autograd engine to run it: nothing in this program built a graph "
                "(link tessera::autograd)");
  backward_engine(*this, gradient, retain_graph);
}

const Tensor& Tensor::set_requires_grad(bool value) const {
  TESSERA_CHECK(is_leaf() || value, "set_requires_grad(false): ", describe(),
                " is not a leaf; use detach() to cut it from the graph");
  TESSERA_CHECK(!value || is_floating(dtype()),
                "set_requires_grad: only floating tensors can require grad, got ", describe());
  impl().requires_grad = value;
  return *this;
}

template <class T>
T Tensor::item() const {
  TESSERA_CHECK(numel() == 1, "item: expected a tensor with one element, got ", describe());
  Tensor host = *this;
  if (!device().is_cpu()) {
    host = empty(shape(), dtype(), Device::cpu());
    backend_for(device()).copy_host(*this, host);
  }
  return dispatch_all(dtype(), "item", [&]<class S>() -> T {
    const S* p = static_cast<const S*>(host.data_ptr("item"));
    if constexpr (std::is_same_v<S, BFloat16> || std::is_same_v<S, Half>) {
      return T(float(*p));
    } else {
      return T(*p);
    }
  });
}

template float Tensor::item<float>() const;
template double Tensor::item<double>() const;
template int32_t Tensor::item<int32_t>() const;
template int64_t Tensor::item<int64_t>() const;

std::string Tensor::describe() const {
  return tessera::describe(*this);
}

std::string describe(const Tensor& t) {
  if (!t.defined()) return "undefined tensor";
  return str_cat(dtype_name(t.dtype()), t.shape().to_string(), " on ", t.device().to_string());
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  return os << t.to_string();
}

}  // namespace tessera
