// The fused AdamW launcher (tessera/cuda/kernels/adamw.cu) in the simulator against the CPU
// backend: several steps on sizes on and off the vector width, aligned and misaligned arrays.
// Tolerance: both sides evaluate the same formula in the same order, but either compiler may
// contract a * b + c into an FMA (GCC does in the CPU loop: C++ permits it by default, and it
// is not disabled in this build), which changes one rounding of the largest intermediate term
// (terms are O(1) here: 2^-24 ~ 6e-8) per operation. Over the three steps compared that is a
// few ulps: 2e-7 absolute + 1e-6 relative, while a wrong coefficient or order of operations
// (e.g. eps inside the sqrt, or a missing bias correction) changes values at 1e-4 or more.

#include <gtest/gtest.h>

#include <tuple>

#include "tessera/core/backend.h"
#include "tessera/core/ops/elementwise.h"
#include "tessera/core/ops/movement.h"
#include "tessera/cuda/kernels/adamw.h"
#include "tests/cuda/kernel_compare.h"
#include "tests/cuda/sim_test_util.h"

namespace tessera::cuda {
namespace {

using testing::expect_close;
using testing::host_randn;
using testing::sim_copy_shifted;
using testing::sim_to_host_view;

class AdamWKernels : public ::testing::TestWithParam<std::tuple<int64_t, int64_t>> {};

TEST_P(AdamWKernels, StepsMatchTheCpu) {
  const auto [n, shift] = GetParam();
  Backend& cpu = backend_for(Device::cpu());
  Tensor p = host_randn({n}, DType::f32, 1), m = ops::mul(host_randn({n}, DType::f32, 2), 0.1),
         v = ops::mul(ops::mul(host_randn({n}, DType::f32, 3), host_randn({n}, DType::f32, 3)),
                      0.01);
  const Tensor dp = sim_copy_shifted(p, shift, "param"), dm = sim_copy_shifted(m, shift, "m"),
               dv = sim_copy_shifted(v, shift, "v");
  AdamWArgs args;
  args.lr = 3e-3f;
  args.weight_decay = 0.1f;
  args.grad_scale = 0.5f;
  for (int64_t step : {1, 2, 1000}) {
    args.step = step;
    const Tensor g = host_randn({n}, DType::f32, 10 + uint64_t(step));
    cpu.adamw_step(p, g, m, v, args);
    adamw_step(dp, sim_copy_shifted(g, shift, "grad"), dm, dv, args, nullptr);
    expect_close(sim_to_host_view(dp), p, 2e-7, 1e-6, "param after step " + std::to_string(step));
    expect_close(sim_to_host_view(dm), m, 2e-7, 1e-6, "m after step " + std::to_string(step));
    expect_close(sim_to_host_view(dv), v, 2e-7, 1e-6, "v after step " + std::to_string(step));
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, AdamWKernels,
                         ::testing::Values(std::make_tuple(1003, 0),  // vectors + a tail of 3
                                           std::make_tuple(1003, 1),  // misaligned: scalar
                                           std::make_tuple(4, 0), std::make_tuple(1, 0)));

TEST(AdamWKernelsErrors, Bf16ParamsAreAClearError) {
  const Tensor p = testing::sim_empty({5}, DType::bf16, "param");
  const Tensor f = testing::sim_empty({5}, DType::f32, "f32");
  testing::expect_error([&] { adamw_step(p, f, f, f, AdamWArgs{}, nullptr); },
                        {"adamw", "bf16[5]", "contiguous f32"});
}

}  // namespace
}  // namespace tessera::cuda
