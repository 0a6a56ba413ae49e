// Weight-only INT8 (Q8_0) models: which tensors are quantized, logits near the full-precision
// model's, a quantized config that rebuilds the same model from its state dict, greedy
// generation, and refusals (training, widths that are no multiple of 32, tensor parallelism).

#include <gtest/gtest.h>

#include <cmath>

#include "nn/tiny_models.h"

namespace tessera::nn {
namespace {

using testing::tiny_gpt2;
using testing::tiny_llama;
using testing::token_batch;

GPTConfig wide(GPTConfig c) {
  c.n_embd = 64;  // Q8_0 blocks of 32 inputs
  c.vocab_size = 61;
  c.block_size = 32;
  return c;
}

// The largest logit difference relative to the logits' spread.
double relative_gap(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = to_vector<double>(a), y = to_vector<double>(b);
  double gap = 0, scale = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    gap = std::max(gap, std::abs(x[i] - y[i]));
    scale = std::max(scale, std::abs(x[i]));
  }
  return gap / scale;
}

void expect_quantized_close(const GPTConfig& c) {
  GPT model(c);
  model.eval();
  const Tensor idx = token_batch(2, 12, c.vocab_size, 5);
  NoGradGuard no_grad;
  const Tensor full = model.forward(idx);
  const std::vector<std::string> names = model.quantize_q8();
  const int64_t per_layer = c.mlp == MlpKind::swiglu ? 5 : 4;  // c_attn, c_proj + the MLP's
  EXPECT_EQ(int64_t(names.size()), per_layer * c.n_layer);
  EXPECT_EQ(names.front(), "h.0.attn.c_attn.weight");
  for (const auto& [name, t] : model.named_parameters())  // biases stay; weights go
    EXPECT_FALSE(name.ends_with(".weight") && (name.find("attn.c_") != std::string::npos ||
                                               name.find("mlp.") != std::string::npos))
        << name << " is still a full-precision parameter";
  EXPECT_EQ(model.config().quantization, "q8_0");
  // Each weight is off by at most half a step of max|w|/127 in its block: a relative error
  // ~0.4% per weight, averaging out over sums of 64-256 products; measured 0.25% (GPT-2) and
  // 0.45% (Llama) of the logits' range; the bar is 3%.
  const Tensor q = model.forward(idx);
  EXPECT_LT(relative_gap(q, full), 0.03);
  EXPECT_GT(relative_gap(q, full), 0.0);  // it did change something

  // A quantized config rebuilds the model, and its state dict loads into it exactly.
  GPT rebuilt(model.config());
  rebuilt.load_state_dict(model.state_dict());
  rebuilt.eval();
  EXPECT_TRUE(equal(rebuilt.forward(idx), q));
}

TEST(QuantizeQ8Model, Gpt2LogitsStayClose) {
  expect_quantized_close(wide(tiny_gpt2()));
}

TEST(QuantizeQ8Model, LlamaLogitsStayClose) {
  expect_quantized_close(wide(tiny_llama()));
}

TEST(QuantizeQ8Model, GeneratesAndRefusesTraining) {
  GPT model(wide(tiny_llama()));
  model.quantize_q8();
  GenerateOptions o;
  o.max_new_tokens = 6;
  o.sampling.temperature = 0.0;
  EXPECT_EQ(generate(model, token_batch(1, 3, 61, 1), o).shape(), (Shape{1, 9}));
  try {
    model.train();
    model.loss(token_batch(1, 4, 61, 2), token_batch(1, 4, 61, 3));
    ADD_FAILURE() << "a quantized model ran a training forward";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("quantized layer is for inference"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(model.quantize_q8(), Error);  // twice
}

// W8A8 reaches every quantized linear (and only those), moves the logits by about the
// activations' rounding, and switching it off gives the weight-only logits back exactly.
TEST(QuantizeQ8Model, Int8ActivationsSwitchEveryQuantizedLinear) {
  for (const GPTConfig& c : {wide(tiny_gpt2()), wide(tiny_llama())}) {
    GPT model(c);
    model.eval();
    NoGradGuard no_grad;
    const Tensor idx = token_batch(2, 12, c.vocab_size, 5);
    EXPECT_THROW(model.set_int8_activations(true), Error);  // not quantized yet
    const int64_t quantized = int64_t(model.quantize_q8().size());
    const Tensor weight_only = model.forward(idx);
    EXPECT_EQ(model.set_int8_activations(true), quantized);
    const Tensor w8a8 = model.forward(idx);
    // Each activation is off by at most half a step of its row's max|x| / 127, ~0.4% per value
    // as for the weights; measured 0.6% (GPT-2) and 0.9% (Llama) of the logits' range. The bar
    // is 3%, as for weight-only.
    EXPECT_GT(relative_gap(w8a8, weight_only), 0.0);
    EXPECT_LT(relative_gap(w8a8, weight_only), 0.03);
    EXPECT_EQ(model.set_int8_activations(false), quantized);
    EXPECT_TRUE(equal(model.forward(idx), weight_only));
  }
}

TEST(QuantizeQ8Model, RefusesWidthsThatAreNoMultipleOf32) {
  GPT model(tiny_gpt2());  // n_embd 16
  try {
    model.quantize_q8();
    ADD_FAILURE() << "quantized a 16-wide model";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("multiple of 32"), std::string::npos) << e.what();
  }
  GPTConfig c = wide(tiny_gpt2());
  c.quantization = "q4";
  EXPECT_THROW(c.validate(), Error);
}

}  // namespace
}  // namespace tessera::nn
