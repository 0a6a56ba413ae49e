#include "tessera/core/dtype.h"

#include <ostream>

namespace tessera {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return 4;
    case DType::f64:
      return 8;
    case DType::bf16:
      return 2;
    case DType::f16:
      return 2;
    case DType::i32:
      return 4;
    case DType::i64:
      return 8;
  }
  detail::throw_error("dtype_size: unknown dtype ", int(dtype));
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "f32";
    case DType::f64:
      return "f64";
    case DType::bf16:
      return "bf16";
    case DType::f16:
      return "f16";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
  }
  return "unknown";
}

DType dtype_from_name(const std::string& name) {
  for (DType d : kAllDTypes)
    if (name == dtype_name(d)) return d;
  detail::throw_error("unknown dtype '", name, "' (expected one of f32, f64, bf16, f16, i32, i64)");
}

bool is_floating(DType dtype) {
  return dtype == DType::f32 || dtype == DType::f64 || dtype == DType::bf16 || dtype == DType::f16;
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  bool fa = is_floating(a), fb = is_floating(b);
  if (fa != fb) return fa ? a : b;
  if (!fa) return DType::i64;  // i32 with i64
  if (a == DType::f64 || b == DType::f64) return DType::f64;
  return DType::f32;  // any mix of f32, bf16 and f16
}

std::ostream& operator<<(std::ostream& os, DType dtype) {
  return os << dtype_name(dtype);
}

}  // namespace tessera
