// Runs every registered OpCase: forward vs reference, gradcheck, and device vs CPU.

#include <gtest/gtest.h>

#include <set>

#include "ops/harness.h"

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

// The device mode: instantiated only when a non-CPU backend is registered (a CUDA build, on a
// GPU or under the kernel simulator). Each case runs on the device and must match the CPU.
class OpOnDevice : public OpHarness {};

std::vector<Device> device_backends() {
  std::vector<Device> devices;
  try {
    backend_for(Device::cuda(0));
    devices.push_back(Device::cuda(0));
  } catch (const Error&) {
    // No CUDA backend in this build.
  }
  return devices;
}

TEST_P(OpOnDevice, MatchesCpu) {
  const OpCase& c = op();
  for (Device d : device_backends()) {
    for (int trial = 0; trial < c.trials; ++trial) {
      std::vector<Tensor> in = inputs_for(c, 3000 + trial, DType::f32);
      Tensor want = c.run(in);
      std::vector<Tensor> din;
      for (const Tensor& t : in) din.push_back(ops::to(t, d));
      Tensor got = c.run(din);
      CloseReport r = compare_close(got, want, c.rtol, c.atol);
      EXPECT_TRUE(r.ok) << c.name << " on " << d << " trial " << trial << ": " << r.message;
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
INSTANTIATE_TEST_SUITE_P(Ops, OpOnDevice,
                         ::testing::ValuesIn(device_backends().empty() ? std::vector<std::string>{}
                                                                       : case_names(false)),
                         param_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(OpOnDevice);

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
