// Copies, casts and fills over strided tensors. Memory-bound: one read and one write per
// element, through StridedLoop so contiguous runs become flat loops the compiler vectorises.

#include <cstring>

#include "tessera/core/detail/element_convert.h"
#include "tessera/core/cpu/cpu_backend.h"
#include "tessera/core/cpu/strided_loop.h"

namespace tessera {

namespace {
char* base_ptr(const Tensor& t, const char* op) {
  return static_cast<char*>(t.data_ptr(op));
}
}  // namespace

void CpuBackend::copy(const Tensor& src, const Tensor& dst) {
  TESSERA_ASSERT(src.shape() == dst.shape(), "copy: ", src.describe(), " -> ", dst.describe());
  char* s = base_ptr(src, "copy");
  char* d = base_ptr(dst, "copy");
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous()) {
    const size_t n = dst.nbytes();
    cpu::parallel_for(int64_t(n), 1 << 20,
                      [&](int64_t b, int64_t e) { std::memcpy(d + b, s + b, size_t(e - b)); });
    return;
  }
  cpu::StridedLoop<2> loop(dst.shape(), {dst.strides(), src.strides()});
  dispatch_all(dst.dtype(), "copy", [&]<class D>() {
    dispatch_all(src.dtype(), "copy", [&]<class S>() {
      D* dp = reinterpret_cast<D*>(d);
      const S* sp = reinterpret_cast<const S*>(s);
      loop.for_each_row([&](std::array<int64_t, 2> off, int64_t n, std::array<int64_t, 2> st) {
        D* o = dp + off[0];
        const S* i = sp + off[1];
        if (st[0] == 1 && st[1] == 1) {
          for (int64_t j = 0; j < n; ++j) o[j] = element::convert<D>(i[j]);
        } else {
          for (int64_t j = 0; j < n; ++j) o[j * st[0]] = element::convert<D>(i[j * st[1]]);
        }
      });
    });
  });
}

void CpuBackend::copy_host(const Tensor& src, const Tensor& dst) {
  // Both sides are host memory for the CPU backend.
  copy(src, dst);
}

void CpuBackend::fill(const Tensor& dst, double value) {
  char* d = base_ptr(dst, "fill");
  cpu::StridedLoop<1> loop(dst.shape(), {dst.strides()});
  dispatch_all(dst.dtype(), "fill", [&]<class D>() {
    const D v = element::convert<D>(value);
    D* dp = reinterpret_cast<D*>(d);
    loop.for_each_row([&](std::array<int64_t, 1> off, int64_t n, std::array<int64_t, 1> st) {
      D* o = dp + off[0];
      for (int64_t j = 0; j < n; ++j) o[j * st[0]] = v;
    });
  });
}

void CpuBackend::arange(const Tensor& dst, double start, double step) {
  dispatch_all(dst.dtype(), "arange", [&]<class D>() {
    D* o = dst.data<D>("arange");
    cpu::parallel_for(dst.numel(), 1 << 16, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) o[i] = element::convert<D>(start + double(i) * step);
    });
  });
}

}  // namespace tessera
