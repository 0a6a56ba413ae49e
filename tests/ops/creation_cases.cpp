// Harness cases for creation ops (empty, zeros, full, arange) and for dtype conversion (cast),
// which like them must produce exact values in every dtype. The random draws (rand, randn)
// live in random_cases.cpp next to their Philox reference.
//
// Creation ops take no tensor inputs, so a case passes a template tensor (its shape, dtype and
// device select the result) and its arguments as small tensors, which the harness can move to
// every device.

#include <gtest/gtest.h>

#include <cmath>

#include "ops/harness.h"

namespace tessera::testing {
namespace {

DType pick(CaseRng& rng, std::initializer_list<DType> dtypes) {
  return *(dtypes.begin() + rng.size(0, int64_t(dtypes.size()) - 1));
}

// Integer results are returned as f64 (exact), since the harness compares floating tensors.
Tensor as_floating(const Tensor& t) {
  return is_floating(t.dtype()) ? t : ops::cast(t, DType::f64);
}

}  // namespace

TESSERA_OP_CASE(empty) {
  OpCase c;
  c.name = "empty";
  c.make_inputs = [](CaseRng& rng, DType dt) {
    return std::vector<Tensor>{rng.tensor(rng.shape(int(rng.size(0, 4)), 0, 6), dt)};
  };
  // Uninitialised memory has no value to compare, so the case writes x into it: the result
  // checks shape, dtype and device, and that the memory holds numel elements.
  c.run = [](const std::vector<Tensor>& in) {
    const Tensor& x = in[0];
    Tensor t = empty(x.shape(), x.dtype(), x.device());
    TESSERA_CHECK(t.dtype() == x.dtype() && t.device() == x.device() && t.is_contiguous(),
                  "empty returned ", t.describe(), " for ", x.describe());
    ops::copy_(t, x);
    return t;
  };
  c.reference = [](const std::vector<Tensor>& in) { return HostTensor(in[0]).to_tensor(); };
  c.rtol = 0;  // a copy is exact
  c.atol = 0;
  return c;
}

TESSERA_OP_CASE(zeros) {
  OpCase c;
  c.name = "zeros";
  c.make_inputs = [](CaseRng& rng, DType) {
    // Sometimes large enough (>= 64 KiB) to come from the allocator's cache of freed blocks,
    // whose old contents must not show through.
    Shape s = rng.coin() ? rng.shape(int(rng.size(0, 4)), 0, 6) : Shape{rng.size(16400, 20000)};
    DType dt = pick(rng, {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64});
    return std::vector<Tensor>{empty(s, dt)};
  };
  c.run = [](const std::vector<Tensor>& in) {
    const Tensor& like = in[0];
    {
      // Dirty a block of the same size first, so a cache hit would hand back nonzero memory.
      Tensor dirty = full(like.shape(), 7.0, like.dtype(), like.device());
    }
    return as_floating(zeros(like.shape(), like.dtype(), like.device()));
  };
  c.reference = [](const std::vector<Tensor>& in) { return HostTensor(in[0].shape()).to_tensor(); };
  c.rtol = 0;
  c.atol = 0;
  return c;
}

TESSERA_OP_CASE(full) {
  OpCase c;
  c.name = "full";
  c.make_inputs = [](CaseRng& rng, DType) {
    DType dt = pick(rng, {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64});
    // Eighths in [-40, 40] are exact in every float type; integers take the whole part.
    double value = double(rng.size(-320, 320)) / 8;
    if (!is_floating(dt)) value = std::trunc(value);
    return std::vector<Tensor>{empty(rng.shape(int(rng.size(0, 4)), 0, 6), dt),
                               from_vector<double>({value}, Shape{1})};
  };
  c.run = [](const std::vector<Tensor>& in) {
    const Tensor& like = in[0];
    double value = to_vector<double>(in[1])[0];
    return as_floating(full(like.shape(), value, like.dtype(), like.device()));
  };
  c.reference = [](const std::vector<Tensor>& in) {
    return HostTensor(in[0].shape(), to_vector<double>(in[1])[0]).to_tensor();
  };
  c.rtol = 0;
  c.atol = 0;
  return c;
}

TESSERA_OP_CASE(arange) {
  OpCase c;
  c.name = "arange";
  c.make_inputs = [](CaseRng& rng, DType) {
    DType dt = pick(rng, {DType::f32, DType::f64, DType::i32, DType::i64});
    // Integer dtypes get integer arguments; floats get quarters (start + i * step stays exact).
    double scale = is_floating(dt) ? 4.0 : 1.0;
    double start = double(rng.size(-40, 40)) / scale;
    double step = double(rng.size(1, 12)) / scale;
    if (rng.coin()) step = -step;
    // Sometimes an empty range (end on the wrong side of start).
    double end = start + step * double(rng.size(-2, 50)) + (rng.coin() ? step / 2 : 0.0);
    return std::vector<Tensor>{empty(Shape{0}, dt), from_vector<double>({start, end, step}, {3})};
  };
  c.run = [](const std::vector<Tensor>& in) {
    std::vector<double> a = to_vector<double>(in[1]);
    return as_floating(arange(a[0], a[1], a[2], in[0].dtype(), in[0].device()));
  };
  c.reference = [](const std::vector<Tensor>& in) {
    std::vector<double> a = to_vector<double>(in[1]);
    std::vector<double> v;
    for (double x = a[0]; a[2] > 0 ? x < a[1] : x > a[1]; x += a[2]) v.push_back(x);
    return from_vector<double>(v, Shape{int64_t(v.size())});
  };
  c.rtol = 0;  // every value is exact in every tested dtype
  c.atol = 0;
  return c;
}

namespace {

// Round to nearest even with `bits` significant bits and exponents down to `emin` (the
// smallest normal is 2^emin; below it the spacing stays 2^(emin - bits + 1)); beyond `max`
// the value overflows to infinity.
double round_to_format(double x, int bits, int emin, double max) {
  if (x == 0 || !std::isfinite(x)) return x;
  int e;
  std::frexp(x, &e);  // |x| in [2^(e-1), 2^e)
  double quantum = std::ldexp(1.0, std::max(e - 1, emin) - (bits - 1));
  double r = std::nearbyint(x / quantum) * quantum;  // default rounding: ties to even
  return std::abs(r) > max ? std::copysign(INFINITY, x) : r;
}

double round_bf16(double x) {
  return round_to_format(x, 8, -126, 3.3895313892515355e38);
}
double round_f16(double x) {
  return round_to_format(x, 11, -14, 65504.0);
}

}  // namespace

// f32 -> bf16 or f16 -> f32. In f64 (gradcheck) the trip goes through f32 instead: 16-bit
// rounding is a step function that central differences cannot see through.
TESSERA_OP_CASE(cast) {
  OpCase c;
  c.name = "cast";
  c.make_inputs = [](CaseRng& rng, DType dt) {
    int64_t half = rng.size(0, 1);
    // Ordinary values, f16 subnormals, and values near f16's top (below its 65504 maximum).
    const double scales[] = {1.0, 2e-5, 1e4};
    double scale = dt == DType::f64 ? 1.0 : scales[rng.size(0, 2)];
    Tensor x = rng.tensor(rng.shape(int(rng.size(0, 3)), 1, 6), dt, scale);
    return std::vector<Tensor>{x, from_vector<int64_t>({half}, Shape{1})};
  };
  c.run = [](const std::vector<Tensor>& in) {
    const Tensor& x = in[0];
    DType mid = x.dtype() == DType::f64 ? DType::f32
                                        : (to_vector<int64_t>(in[1])[0] ? DType::f16 : DType::bf16);
    return tessera::cast(tessera::cast(x, mid), x.dtype());
  };
  c.reference = [](const std::vector<Tensor>& in) {
    HostTensor x(in[0]);
    bool half = to_vector<int64_t>(in[1])[0] != 0;
    for (double& v : x.v) v = half ? round_f16(v) : round_bf16(v);
    return x.to_tensor();
  };
  // The reference rounds the same f32 values to nearest even: the results are identical.
  c.rtol = 0;
  c.atol = 0;
  c.grad_inputs = {0};
  // f32 rounding of values |x| < 5 moves each by at most 2^-22; over a step of 1e-3 the
  // difference quotient is off by at most 2^-22 / 1e-3 ~ 2.4e-4 times the projection weight.
  c.grad.eps = 1e-3;
  c.grad.atol = 2e-3;
  c.grad.rtol = 1e-3;
  return c;
}

namespace {

TEST(Creation, EmptyHasRequestedLayoutForEveryDType) {
  for (DType dt : kAllDTypes) {
    Tensor t = empty({3, 0, 5}, dt);
    EXPECT_EQ(t.dtype(), dt);
    EXPECT_EQ(t.numel(), 0);
    Tensor u = empty({3, 5}, dt);
    EXPECT_EQ(u.strides(), (Strides{5, 1}));
    EXPECT_EQ(u.nbytes(), 15 * dtype_size(dt));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(u.data_ptr()) % CpuAllocator::kAlignment, 0u);
  }
  EXPECT_THROW(empty({2, -1}), Error);
}

TEST(Creation, ArangeCountsLikeNumpy) {
  EXPECT_EQ(arange(0.0, 1.0, 0.25, DType::f32).numel(), 4);
  EXPECT_EQ(arange(5.0, -5.0, -3.0).numel(), 4);  // 5, 2, -1, -4
  EXPECT_EQ(to_vector<int64_t>(arange(5.0, -5.0, -3.0)), (std::vector<int64_t>{5, 2, -1, -4}));
  EXPECT_EQ(arange(3.0, 3.0, 1.0).numel(), 0);
  EXPECT_EQ(arange(6).dtype(), DType::i64);
  EXPECT_THROW(arange(0.0, 1.0, 0.0), Error);
  EXPECT_THROW(arange(0.0, INFINITY, 1.0), Error);
}

}  // namespace
}  // namespace tessera::testing
