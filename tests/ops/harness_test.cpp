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
// buffer's guard bytes) with the CPU's inputs in the same layouts, and must match the CPU.
// Cases whose op the CUDA backend lacks are skipped and listed at the end.
class OpOnDevice : public OpHarness {};

TEST_P(OpOnDevice, MatchesCpu) {
  const OpCase& c = op();
  const std::optional<Device> d = cuda_test_device();
  if (!d) GTEST_SKIP() << "the CUDA mode is off (TESSERA_OP_HARNESS_CUDA=off)";
  for (int trial = 0; trial < device_trials(c.trials); ++trial) {
    std::vector<Tensor> in = inputs_for(c, 3000 + trial, DType::f32);
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
    EXPECT_EQ(got.device(), *d) << c.name;
    CloseReport r = compare_close(ops::to(got, Device::cpu()), want, c.rtol, c.atol);
    EXPECT_TRUE(r.ok) << c.name << " on " << *d << " trial " << trial << ": " << r.message;
    for (int i : c.grad_inputs) {
      const Tensor g = din[size_t(i)].grad(), w = in[size_t(i)].grad();
      ASSERT_EQ(g.defined(), w.defined()) << c.name << " gradient of input " << i;
      if (!w.defined()) continue;
      // The gradient is the same computation's adjoint, with the same depth of sums.
      CloseReport rg = compare_close(ops::to(g, Device::cpu()), w, c.rtol, c.atol);
      EXPECT_TRUE(rg.ok) << c.name << " on " << *d << " trial " << trial << ": gradient of input "
                         << i << ": " << rg.message;
    }
  }
}

std::vector<std::string> case_names(bool differentiable_only) {
  std::vector<std::string> names;
  for (const OpCase& c : all_cases())
    if (!differentiable_only || !c.grad_inputs.empty()) names.push_back(c.name);
  return names;
}

std::string param_name(const ::testing::TestParamInfo<std::string>& param_info) {
  return param_info.param;
}

// Generators run when tests are registered in main(), after every static registration.
INSTANTIATE_TEST_SUITE_P(Ops, OpHarness, ::testing::ValuesIn(case_names(false)), param_name);
INSTANTIATE_TEST_SUITE_P(Ops, OpGradcheck, ::testing::ValuesIn(case_names(true)), param_name);
INSTANTIATE_TEST_SUITE_P(Ops, OpOnDevice, ::testing::ValuesIn(case_names(false)), param_name);

// DESIGN.md: a new op needs an op-harness case before it counts. This is the op set.
TEST(OpHarnessCoverage, EveryOpInTheOpSetHasACase) {
  const std::vector<std::string> op_set = {
      // creation
      "empty", "zeros", "full", "arange", "randn", "rand",
      // elementwise
      "add", "sub", "mul", "div", "neg", "exp", "log", "sqrt", "rsqrt", "tanh", "pow", "where",
      // activations
      "gelu", "silu", "relu",
      // reductions
      "sum", "mean", "max", "softmax", "log_softmax",
      // matmul, normalization, embedding
      "matmul", "layernorm", "rmsnorm", "embedding",
      // losses and attention
      "cross_entropy", "attention", "rope",
      // randomness
      "dropout",
      // movement
      "reshape", "view", "transpose", "permute", "slice", "expand", "contiguous", "cat", "split",
      "cast",
      // optimizer
      "adamw", "squared_norm"};
  std::set<std::string> have;
  for (const OpCase& c : all_cases()) have.insert(c.name);
  for (const std::string& name : op_set)
    EXPECT_TRUE(have.count(name)) << "no harness case for " << name;
  std::set<std::string> unique;
  for (const OpCase& c : all_cases())
    EXPECT_TRUE(unique.insert(c.name).second) << "two harness cases named " << c.name;
}

}  // namespace
}  // namespace tessera::testing
