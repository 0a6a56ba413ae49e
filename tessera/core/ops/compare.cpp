#include "tessera/core/ops/compare.h"

#include <cmath>
#include <cstring>

#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"
#include "tessera/core/ops/detail/op_utils.h"

namespace tessera {

CloseReport compare_close(const Tensor& a, const Tensor& b, double rtol, double atol) {
  ops::detail::check_defined("allclose", a, "first input");
  ops::detail::check_defined("allclose", b, "second input");
  TESSERA_CHECK(a.shape() == b.shape(), "allclose: shapes differ: ", a.describe(), " vs ",
                b.describe());
  std::vector<double> va = to_vector<double>(a), vb = to_vector<double>(b);
  CloseReport r;
  double worst_excess = 0.0;
  for (size_t i = 0; i < va.size(); ++i) {
    double err = std::abs(va[i] - vb[i]);
    double rel = err / std::max(std::abs(vb[i]), 1e-300);
    bool bad = !(err <= atol + rtol * std::abs(vb[i]));  // NaN compares false
    if (std::isnan(err)) err = INFINITY;
    r.max_abs_error = std::max(r.max_abs_error, err);
    r.max_rel_error = std::max(r.max_rel_error, std::isnan(rel) ? INFINITY : rel);
    double excess = err - (atol + rtol * std::abs(vb[i]));
    if (bad && (r.ok || excess > worst_excess)) {
      r.ok = false;
      worst_excess = excess;
      r.worst_index = int64_t(i);
    }
  }
  if (!r.ok) {
    size_t w = size_t(r.worst_index);
    r.message = str_cat("values differ beyond rtol=", rtol, " atol=", atol, " (", va.size(),
                        " elements of ", a.shape(), "); worst at flat index ", w, ": ", va[w],
                        " vs ", vb[w], "; max abs error ", r.max_abs_error);
  }
  return r;
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  return compare_close(a, b, rtol, atol).ok;
}

bool equal(const Tensor& a, const Tensor& b) {
  ops::detail::check_defined("equal", a, "first input");
  ops::detail::check_defined("equal", b, "second input");
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  Tensor ha = ops::contiguous(ops::to(a, Device::cpu()));
  Tensor hb = ops::contiguous(ops::to(b, Device::cpu()));
  return std::memcmp(ha.data_ptr("equal"), hb.data_ptr("equal"), ha.nbytes()) == 0;
}

}  // namespace tessera
