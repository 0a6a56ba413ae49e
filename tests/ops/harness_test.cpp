// Runs every registered OpCase: forward vs reference, gradcheck, and device vs CPU.

#include <gtest/gtest.h>

#include <set>

#include "ops/harness.h"
#include "ops/harness_cuda.h"

namespace tessera::testing {
namespace {

std::vector<Tensor> inputs_for(const OpCase& c, uint64_t seed, DType dtype) {
  CaseRng rng(seed);
  return c.make_inputs(rng, dtype);
}

class OpHarness : public ::testing::TestWithParam<std::string> {
 protected:
  const OpCase& op() const {
    const OpCase* c = find_case(GetParam());
    if (c == nullptr) throw Error("no op case named " + GetParam());
    return *c;
  }
};

TEST_P(OpHarness, ForwardMatchesReference) {
  const OpCase& c = op();
  for (int trial = 0; trial < c.trials; ++trial) {
    std::vector<Tensor> in = inputs_for(c, 1000 + trial, DType::f32);
    Tensor got = c.run(in);
    Tensor want = c.reference(in);
    ASSERT_EQ(got.shape(), want.shape()) << c.name << " trial " << trial;
    CloseReport r = compare_close(got, want, c.rtol, c.atol);
    EXPECT_TRUE(r.ok) << c.name << " trial " << trial << ": " << r.message;
  }
}

// Instantiated for differentiable cases only.
class OpGradcheck : public OpHarness {};

TEST_P(OpGradcheck, GradcheckF64) {
  const OpCase& c = op();
  for (int trial = 0; trial < c.trials; ++trial) {
    std::vector<Tensor> in = inputs_for(c, 2000 + trial, DType::f64);
    for (int i : c.grad_inputs) in[size_t(i)].set_requires_grad(true);
    autograd::GradcheckResult r = autograd::gradcheck(c.run, in, c.grad);
    EXPECT_TRUE(r.ok) << c.name << " trial " << trial << ": " << r.message;
  }
}

// The CUDA mode (harness_cuda.h): each case runs forward, and backward where it has gradient
// inputs, on the CUDA device (the GPU, or the kernel simulator whose launches check every
// buffer's guard bytes) with the CPU's inputs in the same layouts, and must match the CPU; in
// f32 with the case's own tolerances, and in bf16 (inputs rounded to bf16, both sides computing
// in bf16) with kBf16Tolerance. Cases whose op the CUDA backend lacks are skipped and listed at
// the end.
//
// bf16 keeps 8 significant bits, so one rounding is off by up to 2^-8 relative. The two sides
// compute each op in f32 in different summation orders (differences ~1e-6 relative), so a
// stored bf16 value may round the other way: one bf16 ulp, 2^-7 relative to the value's power
// of two. A case chains at most a few rounded ops forward and about as many in its backward
// formula, each of which can pass such a one-ulp difference on; 4 ulps (1/32) relative covers
// that, and the same 1/32 absolute covers values that cancel to near zero (inputs are O(1)).
// Measured under the simulator: attention's gradients are the worst, 3 ulps (0.0117 at 0.52,
// where the tensor-core forward's rounding of P to bf16 feeds the backward); linear_gelu
// 1 ulp; every other case within 1/256.
constexpr double kBf16Tolerance = 1.0 / 32;

void expect_device_matches_cpu(const OpCase& c, DType dtype, double rtol, double atol) {
  const std::optional<Device> d = harness_cuda_device();
  if (!d) GTEST_SKIP() << "the CUDA mode is off (TESSERA_TEST_CUDA=off)";
  for (int trial = 0; trial < device_trials(c.trials); ++trial) {
    std::vector<Tensor> in = inputs_for(c, 3000 + trial, dtype);
    std::vector<Tensor> din;
    for (const Tensor& t : in) din.push_back(to_device_same_layout(t, *d));
    for (int i : c.grad_inputs) {
      in[size_t(i)].set_requires_grad(true);
      din[size_t(i)].set_requires_grad(true);
    }
    Tensor want = c.run(in);
    Tensor gy;
    if (!c.grad_inputs.empty()) {
      CaseRng rng(4000 + trial);
      gy = rng.tensor(want.shape(), want.dtype());
      want.backward(gy);
    }
    Tensor got;
    try {
      got = c.run(din);
      if (gy.defined()) got.backward(to_device_same_layout(gy, *d));
    } catch (const Error& e) {
      if (!is_not_implemented(e)) throw;
      record_not_implemented(c.name, e.what());
      GTEST_SKIP() << c.name << " is not implemented on " << *d << ": " << e.what();
    }
    const std::string what = str_cat(c.name, " ", dtype_name(dtype), " on ", *d, " trial ", trial);
    EXPECT_EQ(got.device(), *d) << what;
    CloseReport r = compare_close(ops::to(got, Device::cpu()), want, rtol, atol);
    EXPECT_TRUE(r.ok) << what << ": " << r.message;
    for (int i : c.grad_inputs) {
      const Tensor g = din[size_t(i)].grad(), w = in[size_t(i)].grad();
      ASSERT_EQ(g.defined(), w.defined()) << what << " gradient of input " << i;
      if (!w.defined()) continue;
      // The gradient is the same computation's adjoint, with the same depth of sums.
      CloseReport rg = compare_close(ops::to(g, Device::cpu()), w, rtol, atol);
      EXPECT_TRUE(rg.ok) << what << ": gradient of input " << i << ": " << rg.message;
    }
  }
}

class OpOnDevice : public OpHarness {};

TEST_P(OpOnDevice, MatchesCpu) {
  expect_device_matches_cpu(op(), DType::f32, op().rtol, op().atol);
}

class OpOnDeviceBf16 : public OpHarness {};

TEST_P(OpOnDeviceBf16, MatchesCpu) {
  expect_device_matches_cpu(op(), DType::bf16, kBf16Tolerance, kBf16Tolerance);
}

std::vector<std::string> case_names(bool differentiable_only, bool bf16_only = false) {
  std::vector<std::string> names;
  for (const OpCase& c : all_cases())
    if ((!differentiable_only || !c.grad_inputs.empty()) && (!bf16_only || c.bf16_inputs))
      names.push_back(c.name);
  return names;
}

std::string param_name(const ::testing::TestParamInfo<std::string>& param_info) {
  return param_info.param;
}

// Generators run when tests are registered in main(), after every static registration.
INSTANTIATE_TEST_SUITE_P(Ops, OpHarness, ::testing::ValuesIn(case_names(false)), param_name);
INSTANTIATE_TEST_SUITE_P(Ops, OpGradcheck, ::testing::ValuesIn(case_names(true)), param_name);
INSTANTIATE_TEST_SUITE_P(Ops, OpOnDevice, ::testing::ValuesIn(case_names(false)), param_name);
INSTANTIATE_TEST_SUITE_P(Ops, OpOnDeviceBf16, ::testing::ValuesIn(case_names(false, true)),
                         param_name);

// A new op needs an op-harness case before it counts. The op set is every front-end op of the
// op table (tessera/core/op_table.def) and the ops that only make views or tensors.
#define TESSERA_OP_NAMES(...) __VA_ARGS__
std::vector<std::string> op_set() {
  const std::vector<std::vector<std::string>> per_entry = {
#define TESSERA_UNARY_OP(name) {#name},
#define TESSERA_BACKEND_OP(name, params, args, front_ops) {TESSERA_OP_NAMES front_ops},
#include "tessera/core/op_table.def"
      // no backend method: creation of uninitialised memory and views
      {"empty", "reshape", "view", "transpose", "permute", "slice", "expand", "cat", "split"}};
  std::vector<std::string> ops;
  for (const auto& names : per_entry) ops.insert(ops.end(), names.begin(), names.end());
  return ops;
}

TEST(OpHarnessCoverage, EveryOpInTheOpSetHasACase) {
  std::set<std::string> have;
  for (const OpCase& c : all_cases()) have.insert(c.name);
  for (const std::string& name : op_set())
    EXPECT_TRUE(have.count(name)) << "no harness case for " << name;
  std::set<std::string> unique;
  for (const OpCase& c : all_cases())
    EXPECT_TRUE(unique.insert(c.name).second) << "two harness cases named " << c.name;
}

}  // namespace
}  // namespace tessera::testing
