// GPT-2 parity on Device::cuda(): the fixture of nn/gpt2_parity_test.cpp (a small GPT-2 and
// what PyTorch computed on it) run on the CUDA backend.
//   - fp32: logits, loss, every gradient and the losses of the fixture's AdamW steps against
//     PyTorch's, with the CPU parity test's tolerances (the same fp32 arithmetic, in other
//     summation orders);
//   - bf16: the same model cast to bf16 (bf16 weights and activations) against the same fp32
//     values, with bounds derived from bf16's 8 significant bits; its AdamW steps run through
//     MixedPrecision (fp32 master weights and state on the device), as `tessera train
//     --precision bf16` does.
// Where: the device TESSERA_TEST_CUDA names (tests/support/cuda_test_device.h): the simulated
// device by default (CI; about 10 s), the GPU with TESSERA_TEST_CUDA=gpu.

#include <iomanip>
#include <iostream>

#include "nn/gpt2_parity_fixture.h"
#include "tests/support/cuda_test_device.h"

namespace tessera::nn {
namespace {

using testing::relative_error;

// bf16 keeps 8 significant bits: every rounding moves a value by at most 2^-9 relative.
constexpr double kBf16Unit = 1.0 / 512.0;
// The bf16 logits' bound relative to their scale: 25 roundings in series (see the bf16 test).
constexpr double kBf16Logits = 25 * kBf16Unit;

class GptDeviceParity : public testing::Gpt2ParityFixture {
 protected:
  void SetUp() override {
    Gpt2ParityFixture::SetUp();
    device_ = tessera::testing::cuda_test_device();
  }

  // The fixture's model in `dtype`, on the device.
  std::unique_ptr<GPT> device_model(DType dtype) const {
    auto m = model(dtype);
    move_to_device(m->state_dict(), device_);
    return m;
  }
  Tensor on_device(const Tensor& t) const { return ops::to(t, device_); }

  // Checks logits (over the real vocabulary), loss and every gradient of one forward and
  // backward pass on the device against PyTorch's; returns the worst errors for the log.
  struct Errors {
    double logits = 0, loss = 0, gradients = 0;
  };
  Errors check_one_pass(DType dtype, double logits_tol, double loss_tol, double grad_tol) {
    auto m = device_model(dtype);
    Errors e;
    Tensor logits = m->forward(on_device(inputs_));
    EXPECT_EQ(logits.device(), device_);
    EXPECT_EQ(logits.dtype(), dtype);
    e.logits = relative_error(ops::narrow(logits, 2, 0, config_.vocab_size), golden("logits"));
    EXPECT_LT(e.logits, logits_tol);

    Tensor loss = m->loss(on_device(inputs_), on_device(targets_));
    const double got = loss.item<float>(), want = golden("loss").item<float>();
    e.loss = std::abs(got - want) / std::abs(want);
    EXPECT_LT(e.loss, loss_tol) << got << " vs " << want;

    loss.backward();
    const StateDict want_grads = golden_gradients();
    const StateDict params = m->named_parameters();
    EXPECT_EQ(params.size(), want_grads.size());
    for (const auto& [name, p] : params) {
      SCOPED_TRACE(name);
      const Tensor w = find_tensor(want_grads, name);
      EXPECT_TRUE(w.defined());
      EXPECT_TRUE(p.grad().defined());
      if (!w.defined() || !p.grad().defined()) continue;
      EXPECT_EQ(p.grad().device(), device_);
      const double err = relative_error(p.grad(), w);
      EXPECT_LT(err, grad_tol);
      e.gradients = std::max(e.gradients, err);
    }
    // The padded rows of wte name no class: nothing may flow into them, in any precision.
    Tensor pad = ops::narrow(find_tensor(params, "wte.weight").grad(), 0, config_.vocab_size,
                             config_.padded_vocab_size() - config_.vocab_size);
    for (double v : to_vector<double>(ops::cast(ops::to(pad, Device::cpu()), DType::f64)))
      EXPECT_EQ(v, 0.0);
    return e;
  }

  // The fixture's AdamW steps on the device (through MixedPrecision for bf16); returns the
  // worst relative loss difference from PyTorch's losses before each step.
  double check_adamw_steps(Precision precision, double tol) {
    const AdamWOptions o = adamw_options();
    auto master = device_model(DType::f32);
    std::unique_ptr<GPT> compute;
    if (precision != Precision::fp32) compute = device_model(compute_dtype(precision));
    GPT& net = compute ? *compute : *master;
    MixedPrecision mp(precision, master->named_parameters(), net.named_parameters());
    AdamW opt(decay_groups(master->named_parameters(), o.weight_decay), o);

    const std::vector<float> want = to_vector<float>(golden("adamw_losses"));
    EXPECT_EQ(int(want.size()), adamw_steps());
    double worst = 0;
    for (size_t s = 0; s < want.size(); ++s) {
      opt.zero_grad();
      Tensor loss = net.loss(on_device(inputs_), on_device(targets_));
      const double got = loss.item<float>();
      const double err = std::abs(got - want[s]) / std::abs(want[s]);
      EXPECT_LT(err, tol) << "step " << s << ": " << got << " vs " << want[s];
      worst = std::max(worst, err);
      mp.scale_loss(loss).backward();
      mp.accumulate_grads();
      mp.step(opt, 0.0);  // no clipping: PyTorch's steps had none
    }
    for (const auto& [name, p] : master->named_parameters()) EXPECT_EQ(p.device(), device_);
    return worst;
  }

  // The bf16 loss's relative bound: twice the largest logit error over the loss (see the
  // bf16 test).
  double bf16_loss_bound() const {
    const std::vector<double> z = to_vector<double>(ops::cast(golden("logits"), DType::f64));
    double largest = 0;
    for (double v : z) largest = std::max(largest, std::abs(v));
    return 2 * kBf16Logits * largest / std::abs(golden("loss").item<float>());
  }

  Device device_ = Device::cpu();
};

// fp32: the tolerances of the CPU parity test, for the same reasons (a few f32 ulps per op
// from summation orders: 1e-4 of the logits' and each gradient's scale, 1e-5 of the loss).
// The kernels' orders differ from the CPU's (tree reductions, tiled attention); on a GPU the
// fast exponential (__expf, a few ulps) adds errors of the same size.
TEST_F(GptDeviceParity, Fp32LogitsLossAndGradientsMatchPyTorch) {
  const Errors e = check_one_pass(DType::f32, 1e-4, 1e-5, 1e-4);
  std::cout << std::setprecision(2) << "[ gpt parity ] " << device_ << " fp32: logits " << e.logits
            << ", loss " << e.loss << ", gradients " << e.gradients << "\n";
}

// The losses before each AdamW step, to 1e-5 relative, as on the CPU: each step moves every
// weight by about lr in a direction set by m / sqrt(v), which f32 rounding differences of
// 1e-7 in the gradients barely change.
TEST_F(GptDeviceParity, Fp32AdamWStepsMatchPyTorch) {
  const double worst = check_adamw_steps(Precision::fp32, 1e-5);
  std::cout << std::setprecision(2) << "[ gpt parity ] " << device_ << " fp32 AdamW: worst loss "
            << worst << "\n";
}

// bf16 weights and activations against PyTorch's fp32 values. Each op rounds its output to
// 2^-9 relative, and the weights start rounded so; about 25 roundings lie in series from the
// embedding to a logit (per block: layernorm, attention's projections and product, the MLP's
// two GEMMs and GELU, two residual adds), so independent roundings add up to about
// sqrt(25) * 2^-9 = 1e-2 of the logits' scale and at worst 25 * 2^-9 = 5e-2: the bound is the
// worst case (measured on the simulated device: 4.3e-3 to 4.7e-3). The loss is computed in fp32
// from the bf16 logits, and each log-softmax term moves by at most twice the largest logit error:
// the bound is 2 * 5e-2 * max|logit| / loss, 1.2e-2 for this fixture (measured on the simulated
// device: 6.2e-5 to 6.5e-5, the errors of 23 positions averaging out). Gradients run the chain
// twice (forward values, then backward products, all bf16): 2 * 5e-2 = 0.1 of each gradient's scale
// (measured on the simulated device: 1.2e-2 to 1.6e-2). A missing term or a wrong formula moves
// these by O(1).
TEST_F(GptDeviceParity, Bf16LogitsLossAndGradientsMatchPyTorch) {
  const Errors e = check_one_pass(DType::bf16, kBf16Logits, bf16_loss_bound(), 2 * kBf16Logits);
  std::cout << std::setprecision(2) << "[ gpt parity ] " << device_ << " bf16: logits " << e.logits
            << ", loss " << e.loss << ", gradients " << e.gradients << "\n";
}

// bf16 training as the trainer runs it (fp32 master weights and AdamW state, a bf16 compute
// model rounded from them after each step). Before each step the compute weights are as
// rounded as at the start, so the loss carries the bf16 forward's error (the loss bound
// above), plus the drift of master weights updated from bf16 gradients: AdamW's update,
// lr * m / sqrt(v), normalises away the gradients' 1.6e-2 scale error and keeps only a small
// change of direction, so over 5 steps the drift stays inside the same bound (measured:
// 7.7e-4 to 8.4e-4).
TEST_F(GptDeviceParity, Bf16AdamWStepsMatchPyTorch) {
  const double worst = check_adamw_steps(Precision::bf16, bf16_loss_bound());
  std::cout << std::setprecision(2) << "[ gpt parity ] " << device_ << " bf16 AdamW: worst loss "
            << worst << "\n";
}

}  // namespace
}  // namespace tessera::nn
