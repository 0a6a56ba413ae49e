#pragma once
// Element types. f64 exists on the CPU for gradcheck; bf16 and f16 are storage types whose
// arithmetic runs in f32.

#include <cstdint>
#include <string>
#include <type_traits>

#include "tessera/core/error.h"
#include "tessera/core/half.h"

namespace tessera {

enum class DType : uint8_t { f32, f64, bf16, f16, i32, i64 };

inline constexpr DType kAllDTypes[] = {DType::f32, DType::f64, DType::bf16,
                                       DType::f16, DType::i32, DType::i64};

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);             // "f32", "bf16", ...
DType dtype_from_name(const std::string& name);  // throws on an unknown name
bool is_floating(DType dtype);
// The dtype two operands compute in: floats win over ints, wider over narrower,
// and bf16 with f16 meet at f32.
DType promote_types(DType a, DType b);

std::ostream& operator<<(std::ostream& os, DType dtype);

template <class T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::f64;
};
template <>
struct DTypeOf<BFloat16> {
  static constexpr DType value = DType::bf16;
};
template <>
struct DTypeOf<Half> {
  static constexpr DType value = DType::f16;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::i32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::i64;
};
template <class T>
inline constexpr DType dtype_of = DTypeOf<T>::value;

// The type arithmetic on T runs in: double for f64, int64 for integers, float otherwise.
template <class T>
using acc_type_t = std::conditional_t<std::is_same_v<T, double>, double,
                                      std::conditional_t<std::is_integral_v<T>, int64_t, float>>;

// Calls f.template operator()<T>() with T the C++ type of dtype. `op` names the caller in the
// error raised for a dtype outside the dispatched set.
template <class F>
decltype(auto) dispatch_all(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::f32:
      return f.template operator()<float>();
    case DType::f64:
      return f.template operator()<double>();
    case DType::bf16:
      return f.template operator()<BFloat16>();
    case DType::f16:
      return f.template operator()<Half>();
    case DType::i32:
      return f.template operator()<int32_t>();
    case DType::i64:
      return f.template operator()<int64_t>();
  }
  detail::throw_error(op, ": unknown dtype ", int(dtype));
}

template <class F>
decltype(auto) dispatch_floating(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::f32:
      return f.template operator()<float>();
    case DType::f64:
      return f.template operator()<double>();
    case DType::bf16:
      return f.template operator()<BFloat16>();
    case DType::f16:
      return f.template operator()<Half>();
    default:
      break;
  }
  detail::throw_error(op, ": expected a floating dtype (f32, f64, bf16, f16), got ",
                      dtype_name(dtype));
}

template <class F>
decltype(auto) dispatch_integer(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::i32:
      return f.template operator()<int32_t>();
    case DType::i64:
      return f.template operator()<int64_t>();
    default:
      break;
  }
  detail::throw_error(op, ": expected an integer dtype (i32, i64), got ", dtype_name(dtype));
}

}  // namespace tessera
