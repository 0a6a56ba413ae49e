// The fused AdamW launcher (tessera/cuda/kernels/adamw.cu) in the simulator against the CPU
// backend: several steps on sizes on and off the four-element group, aligned and misaligned
// arrays, f32/bf16/f16 gradients, and the rounded copy (bf16 to nearest, bf16 stochastic, f16).
// No tolerance: both backends run the same host/device element functions with every rounding
// explicit (core/detail/adamw_coefficients.h) and the same Philox bits, so param, m, v and the copy
// must match bit for bit. Last, nn::AdamW's fused bf16 step through the whole device path.

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <tuple>

#include "tessera/core/backend.h"
#include "tessera/core/ops/elementwise.h"
#include "tessera/core/ops/movement.h"
#include "tessera/nn/optim/adamw.h"
#include "tests/cuda/backend_test_util.h"
#include "tests/cuda/device_kernels.h"
#include "tests/cuda/kernel_compare.h"
#include "tests/cuda/sim_test_util.h"

namespace tessera::cuda {
namespace {

using testing::kernels;

using testing::device_copy_shifted;
using testing::host_randn;
using testing::to_host;

// got (a device tensor) holds exactly ref's bytes; reports the first differing element.
void expect_same_bits(const Tensor& got, const Tensor& ref, const std::string& what) {
  const Tensor h = to_host(got);
  ASSERT_EQ(h.dtype(), ref.dtype()) << what;
  ASSERT_EQ(h.numel(), ref.numel()) << what;
  const auto* a = static_cast<const unsigned char*>(h.data_ptr());
  const auto* b = static_cast<const unsigned char*>(ref.data_ptr());
  const size_t item = h.itemsize();
  for (int64_t i = 0; i < h.numel(); ++i) {
    if (std::memcmp(a + size_t(i) * item, b + size_t(i) * item, item) != 0) {
      ADD_FAILURE() << what << ": element " << i << " of " << h.numel() << " differs: got "
                    << to_vector<double>(h)[size_t(i)] << ", expected "
                    << to_vector<double>(ref)[size_t(i)];
      return;
    }
  }
}

// What the step writes besides param, m, v.
enum class Copy { none, bf16, bf16_stochastic, f16 };

struct Case {
  int64_t n;
  int64_t shift;  // elements past an aligned address: 1 forces the scalar path
  DType grad_dtype;
  Copy copy;
};

// For test names: n1003_shift1_bf16grad_stochastic.
std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& k = info.param;
  const char* copies[] = {"nocopy", "bf16", "stochastic", "f16"};
  return str_cat("n", k.n, "_shift", k.shift, "_", dtype_name(k.grad_dtype), "grad_",
                 copies[int(k.copy)]);
}

class AdamWKernels : public ::testing::TestWithParam<Case> {};

TEST_P(AdamWKernels, StepsMatchTheCpuBitForBit) {
  const Case k = GetParam();
  Backend& cpu = backend_for(Device::cpu());
  const int64_t n = k.n;
  Tensor p = host_randn({n}, DType::f32, 1), m = ops::mul(host_randn({n}, DType::f32, 2), 0.1),
         v = ops::mul(ops::mul(host_randn({n}, DType::f32, 3), host_randn({n}, DType::f32, 3)),
                      0.01);
  const Tensor dp = device_copy_shifted(p, k.shift), dm = device_copy_shifted(m, k.shift),
               dv = device_copy_shifted(v, k.shift);
  const DType copy_dtype = k.copy == Copy::f16 ? DType::f16 : DType::bf16;
  Tensor copy, dcopy;
  if (k.copy != Copy::none) {
    copy = tessera::empty({n}, copy_dtype);
    dcopy = device_copy_shifted(copy, k.shift);
  }
  AdamWArgs args;
  args.lr = 3e-3f;
  args.weight_decay = 0.1f;
  args.grad_scale = 0.5f;
  args.stochastic_rounding = k.copy == Copy::bf16_stochastic;
  args.rounding_seed = 77;
  for (int64_t step : {1, 2, 1000}) {
    args.step = step;
    const Tensor g = host_randn({n}, k.grad_dtype, 10 + uint64_t(step));
    cpu.adamw_step(p, g, m, v, copy, args);
    kernels().adamw_step(dp, device_copy_shifted(g, k.shift), dm, dv, dcopy, args);
    const std::string at = " after step " + std::to_string(step);
    expect_same_bits(dp, p, "param" + at);
    expect_same_bits(dm, m, "m" + at);
    expect_same_bits(dv, v, "v" + at);
    if (copy.defined()) expect_same_bits(dcopy, copy, "rounded copy" + at);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Sizes, AdamWKernels,
    ::testing::Values(Case{1003, 0, DType::f32, Copy::none},  // groups of 4 + a tail of 3
                      Case{1003, 1, DType::f32, Copy::none},  // misaligned: scalar accesses
                      Case{4, 0, DType::f32, Copy::none}, Case{1, 0, DType::f32, Copy::none},
                      Case{1003, 0, DType::f32, Copy::bf16}, Case{1003, 1, DType::f32, Copy::bf16},
                      Case{1003, 0, DType::f32, Copy::bf16_stochastic},
                      Case{1003, 1, DType::f32, Copy::bf16_stochastic},
                      Case{6, 0, DType::f32, Copy::bf16_stochastic},
                      Case{1003, 0, DType::bf16, Copy::bf16_stochastic},
                      Case{1003, 1, DType::bf16, Copy::bf16}, Case{1003, 0, DType::f16, Copy::f16},
                      Case{1003, 1, DType::f16, Copy::f16}, Case{1003, 0, DType::f32, Copy::f16}),
    case_name);

// nn::AdamW's fused bf16 step (mixed precision's, with stochastic rounding) on the simulated
// device through the op front end and CudaBackend: the same master, moments and bf16 copies
// as on the CPU, bit for bit, over several steps.
class AdamWOnDevice : public testing::DeviceCuda {};

TEST_F(AdamWOnDevice, StochasticBf16StepMatchesTheCpu) {
  struct Run {
    Tensor w, b, w16, b16;
    std::unique_ptr<nn::AdamW> opt;
  };
  auto make = [](Device d) {
    Run r;
    r.w = ops::to(host_randn({7, 9}, DType::f32, 1), d).set_requires_grad(true);
    r.b = ops::to(host_randn({9}, DType::f32, 2), d).set_requires_grad(true);
    r.w16 = ops::to(ops::cast(r.w, DType::bf16), d);
    r.b16 = ops::to(ops::cast(r.b, DType::bf16), d);
    nn::AdamWOptions o;
    o.lr = 1e-2;
    r.opt = std::make_unique<nn::AdamW>(nn::StateDict{{"w", r.w}, {"b", r.b}}, o);
    return r;
  };
  Run cpu = make(Device::cpu()), gpu = make(Device::cuda());
  for (uint64_t step = 1; step <= 3; ++step) {
    const Tensor gw = host_randn({7, 9}, DType::f32, 10 + step),
                 gb = host_randn({9}, DType::f32, 20 + step);
    cpu.w.set_grad(gw);
    cpu.b.set_grad(gb);
    gpu.w.set_grad(to_gpu(gw));
    gpu.b.set_grad(to_gpu(gb));
    const nn::RoundingOptions sr{true, 5};
    cpu.opt->step_rounded(0.5, {{"w", cpu.w16}, {"b", cpu.b16}}, sr);
    gpu.opt->step_rounded(0.5, {{"w", gpu.w16}, {"b", gpu.b16}}, sr);
    const std::string at = " after step " + std::to_string(step);
    testing::expect_same_bits(to_cpu(gpu.w), cpu.w, "w" + at);
    testing::expect_same_bits(to_cpu(gpu.b), cpu.b, "b" + at);
    testing::expect_same_bits(to_cpu(gpu.w16), cpu.w16, "bf16 w" + at);
    testing::expect_same_bits(to_cpu(gpu.b16), cpu.b16, "bf16 b" + at);
  }
}

TEST(AdamWKernelsErrors, UnsupportedLayoutsAreClearErrors) {
  const Tensor p = testing::device_empty({5}, DType::bf16);
  const Tensor f = testing::device_empty({5}, DType::f32);
  const Tensor h = testing::device_empty({5}, DType::f16);
  testing::expect_error([&] { kernels().adamw_step(p, f, f, f, Tensor(), AdamWArgs{}); },
                        {"adamw", "bf16[5]", "f32 param"});
  AdamWArgs sr;
  sr.stochastic_rounding = true;
  testing::expect_error([&] { kernels().adamw_step(f, f, f, f, h, sr); },
                        {"adamw", "f16[5]", "stochastic rounding"});
}

}  // namespace
}  // namespace tessera::cuda
