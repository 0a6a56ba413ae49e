#pragma once
// The GPT-2 parity fixture (tests/nn/fixtures/gpt2_parity, written by
// tools/make_gpt2_fixture.py): a small GPT-2 in Hugging Face's format and what PyTorch computed
// on it (logits, loss, every gradient, the losses of a few AdamW steps). Shared by the CPU
// parity test (nn/gpt2_parity_test.cpp) and the device one (cuda/gpt_device_parity_test.cpp).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/nn/io/hf_gpt2.h"
#include "tessera/nn/io/safetensors.h"
#include "tessera/nn/nn.h"
#include "tessera/tessera.h"

namespace tessera::nn::testing {

inline const std::string kGpt2ParityFixture =
    std::string(TESSERA_TEST_FIXTURES) + "/nn/fixtures/gpt2_parity";

// Largest |a - b| relative to the largest |b| of the tensor (either may live on any device).
// Normwise rather than elementwise: a gradient holds entries near zero whose elementwise
// relative error says nothing about the computation (they are differences of larger terms),
// while the error relative to the tensor's scale is what a wrong formula or a lost term would
// move.
inline double relative_error(const Tensor& ours, const Tensor& theirs) {
  const auto host_f64 = [](const Tensor& t) {
    return to_vector<double>(ops::cast(ops::to(t, Device::cpu()), DType::f64));
  };
  const std::vector<double> a = host_f64(ours), b = host_f64(theirs);
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

// The fixture's model, inputs and golden values, loaded on the host.
class Gpt2ParityFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    weights_ = import_hf_gpt2(kGpt2ParityFixture, &config_);
    golden_ = read_safetensors(kGpt2ParityFixture + "/golden.safetensors");
    inputs_ = golden("inputs");
    targets_ = golden("targets");
  }

  Tensor golden(const std::string& name) const {
    Tensor t = find_tensor(golden_.tensors, name);
    EXPECT_TRUE(t.defined()) << "golden.safetensors lacks " << name;
    return t;
  }

  std::string metadata(const std::string& key) const {
    for (const auto& [k, v] : golden_.metadata)
      if (k == key) return v;
    ADD_FAILURE() << "golden.safetensors metadata lacks " << key;
    return "";
  }

  // The model in `dtype`, in evaluation mode (the fixture's dropout rates are 0; eval makes
  // that independent of the config), on the host.
  std::unique_ptr<GPT> model(DType dtype = DType::f32) const {
    auto m = std::make_unique<GPT>(config_, dtype);
    m->load_state_dict(weights_);
    m->eval();
    return m;
  }

  // PyTorch's gradients under Tessera's names and layout: the importer's own mapping
  // (hf_gpt2_to_tessera) transposes the Conv1D weights and pads wte's rows with zeros; wte's
  // gradient includes the tied head's.
  StateDict golden_gradients() const {
    StateDict hf_grads;
    for (const auto& [name, t] : golden_.tensors)
      if (name.starts_with("grad.")) hf_grads.emplace_back(name.substr(5), t);
    HfGpt2Options options;
    options.n_head = config_.n_head;
    return hf_gpt2_to_tessera(hf_grads, nullptr, options, "golden gradients", nullptr);
  }

  // PyTorch's AdamW hyperparameters (the fixture's metadata) and the number of steps.
  AdamWOptions adamw_options() const {
    const nlohmann::json hp = nlohmann::json::parse(metadata("adamw"));
    AdamWOptions o;
    o.lr = hp.at("lr").get<double>();
    o.beta1 = hp.at("betas").at(0).get<double>();
    o.beta2 = hp.at("betas").at(1).get<double>();
    o.eps = hp.at("eps").get<double>();
    o.weight_decay = hp.at("weight_decay").get<double>();
    return o;
  }
  int adamw_steps() const { return std::stoi(metadata("steps")); }

  GPTConfig config_;
  StateDict weights_;
  SafetensorsFile golden_;
  Tensor inputs_, targets_;
};

}  // namespace tessera::nn::testing
