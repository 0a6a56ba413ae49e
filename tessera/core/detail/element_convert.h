#pragma once
// Scalar conversion among the element types, and loads/stores in the compute type: the one
// definition every backend rounds with (the CPU kernels, the CUDA kernels and their host-side
// fills), so that a value converts to the same bits on every device.

#include <cstdint>
#include <type_traits>

#include "tessera/core/dtype.h"

namespace tessera::element {

template <class T>
inline constexpr bool is_half_v = std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>;

template <class D, class S>
inline D convert(S s) {
  if constexpr (std::is_same_v<D, S>) {
    return s;
  } else if constexpr (is_half_v<S>) {
    return convert<D>(float(s));
  } else if constexpr (is_half_v<D>) {
    return D(float(s));
  } else {
    return static_cast<D>(s);
  }
}

// Reads an element as its compute type (float for bf16/f16).
template <class T>
inline acc_type_t<T> load(const T* p) {
  return convert<acc_type_t<T>>(*p);
}

template <class T, class A>
inline void store(T* p, A value) {
  *p = convert<T>(value);
}

// A row of n elements as compute-type values: the row itself when T is the compute type, else
// converted into buf.
template <class T, class A = acc_type_t<T>>
const A* load_row(const T* p, int64_t n, A* buf) {
  if constexpr (std::is_same_v<T, A>) {
    return p;
  } else {
    for (int64_t i = 0; i < n; ++i) buf[i] = load(p + i);
    return buf;
  }
}

}  // namespace tessera::element
