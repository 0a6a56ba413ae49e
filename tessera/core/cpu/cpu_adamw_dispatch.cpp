// The run-time choice of the CPU AdamW path: the widest the CPU runs, asked once, unless
// TESSERA_CPU_ADAMW names one. All paths give the same bits, so the variable exists to measure
// and to test, never to change results.

#include <cstdlib>
#include <cstring>

#include "tessera/core/cpu/cpu_adamw.h"
#include "tessera/core/error.h"

namespace tessera::cpu {

namespace {

constexpr const char* kVariable = "TESSERA_CPU_ADAMW";

bool cpu_has(AdamPath path) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  switch (path) {
    case AdamPath::scalar:
      return true;
    case AdamPath::avx2:
      // F16C converts the f16 gradients and copies; every AVX2 CPU has it, but ask anyway
      // where the compiler can (clang 14, the fuzz build's, does not know "f16c").
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")
#if !defined(__clang__)
             && __builtin_cpu_supports("f16c")
#endif
          ;
    case AdamPath::avx512:
      return __builtin_cpu_supports("avx512f");
  }
  return false;
#else
  return path == AdamPath::scalar;
#endif
}

}  // namespace

bool adamw_path_available(AdamPath path) {
  // The vector files are x86-only; elsewhere they compile to stubs that are never chosen.
  static const bool has[3] = {true, cpu_has(AdamPath::avx2), cpu_has(AdamPath::avx512)};
  return has[int(path)];
}

const char* adamw_path_name(AdamPath path) {
  switch (path) {
    case AdamPath::scalar:
      return "scalar";
    case AdamPath::avx2:
      return "avx2";
    case AdamPath::avx512:
      return "avx512";
  }
  return "?";
}

AdamPath adamw_path_from_env(const char* value) {
  if (value == nullptr || *value == '\0') {
    if (adamw_path_available(AdamPath::avx512)) return AdamPath::avx512;
    if (adamw_path_available(AdamPath::avx2)) return AdamPath::avx2;
    return AdamPath::scalar;
  }
  for (AdamPath path : {AdamPath::scalar, AdamPath::avx2, AdamPath::avx512}) {
    if (std::strcmp(value, adamw_path_name(path)) != 0) continue;
    TESSERA_CHECK(adamw_path_available(path), kVariable, "=", value, ": this CPU cannot run the ",
                  value, " AdamW path");
    return path;
  }
  detail::throw_error(kVariable, "=", value,
                      ": unknown AdamW path, expected scalar, avx2 or avx512");
}

AdamPath adamw_path() {
  // Decided once: a bad value throws on every call (the static is set only on success).
  static const AdamPath path = adamw_path_from_env(std::getenv(kVariable));
  return path;
}

AdamChunkFn adamw_chunk(AdamPath path) {
  TESSERA_CHECK(adamw_path_available(path), "adamw: this CPU cannot run the ",
                adamw_path_name(path), " path");
  switch (path) {
    case AdamPath::avx2:
      return adamw_chunk_avx2;
    case AdamPath::avx512:
      return adamw_chunk_avx512;
    default:
      return adamw_chunk_scalar;
  }
}

}  // namespace tessera::cpu
