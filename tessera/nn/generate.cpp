// Sampling runs on the host over one row of real-vocabulary logits at a time: scale by
// 1/temperature, rank (only when top-k or top-p needs it), cut to top-k, softmax, cut to the
// nucleus, then invert the cumulative distribution at u. Everything is in double, so the
// choice depends only on the logits, the options and u.

#include "tessera/nn/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <vector>

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"
#include "tessera/core/detail/philox.h"

namespace tessera::nn {

void SamplingOptions::validate() const {
  TESSERA_CHECK(std::isfinite(temperature) && temperature >= 0.0,
                "sampling: temperature must be finite and >= 0, got ", temperature);
  TESSERA_CHECK(top_k >= 0, "sampling: top_k must be >= 0 (0 keeps all tokens), got ", top_k);
  TESSERA_CHECK(top_p > 0.0 && top_p <= 1.0, "sampling: top_p must be in (0, 1], got ", top_p);
}

int64_t sample_token(std::span<const float> logits, const SamplingOptions& options, double u) {
  options.validate();
  const int64_t n = int64_t(logits.size());
  TESSERA_CHECK(n > 0, "sampling: empty logits");
  TESSERA_CHECK(u >= 0.0 && u < 1.0, "sampling: the uniform draw must be in [0, 1), got ", u);
  for (int64_t i = 0; i < n; ++i)
    TESSERA_CHECK(!std::isnan(logits[size_t(i)]), "sampling: logit ", i, " is NaN");
  if (options.temperature == 0.0)
    return int64_t(std::max_element(logits.begin(), logits.end()) - logits.begin());

  // Candidates in rank order (most likely first, lower id on ties) when a cut needs a rank;
  // otherwise in id order.
  std::vector<int64_t> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), int64_t(0));
  const int64_t k = options.top_k > 0 ? std::min(options.top_k, n) : n;
  if (k < n || options.top_p < 1.0) {
    auto higher = [&](int64_t a, int64_t b) {
      return logits[size_t(a)] > logits[size_t(b)] ||
             (logits[size_t(a)] == logits[size_t(b)] && a < b);
    };
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), higher);
    ids.resize(size_t(k));
  }
  double top = -INFINITY;
  for (int64_t id : ids) top = std::max(top, double(logits[size_t(id)]));
  TESSERA_CHECK(std::isfinite(top), "sampling: the largest logit is ", top,
                "; no token has a finite probability");
  std::vector<double> w(ids.size());
  double total = 0.0;
  for (size_t i = 0; i < ids.size(); ++i) {
    w[i] = std::exp((double(logits[size_t(ids[i])]) - top) / options.temperature);
    total += w[i];
  }
  if (options.top_p < 1.0) {
    // The shortest ranked prefix whose probability reaches top_p (at least one token).
    double cum = 0.0;
    size_t keep = 0;
    while (keep < w.size()) {
      cum += w[keep++];
      if (cum >= options.top_p * total) break;
    }
    w.resize(keep);
    total = cum;
  }
  const double target = u * total;
  double cum = 0.0;
  for (size_t i = 0; i < w.size(); ++i) {
    cum += w[i];
    if (target < cum) return ids[i];
  }
  // u * total rounded up to total: the last token with weight.
  for (size_t i = w.size(); i-- > 0;)
    if (w[i] > 0.0) return ids[i];
  return ids[0];
}

double sampling_uniform(uint64_t seed, int64_t step, int64_t batch, int64_t row) {
  const uint64_t pos = uint64_t(step) * uint64_t(batch) + uint64_t(row);
  philox::Block b = philox::philox4x32(pos, seed);
  const uint64_t bits = (uint64_t(b.v[0]) << 21) | uint64_t(b.v[1] >> 11);  // 53 bits
  return double(bits) * (1.0 / 9007199254740992.0);                         // / 2^53
}

namespace {

// Restores the model's train/eval mode on scope exit.
class EvalScope {
 public:
  explicit EvalScope(GPT& model) : model_(model), was_training_(model.is_training()) {
    model_.eval();
  }
  ~EvalScope() { model_.train(was_training_); }
  EvalScope(const EvalScope&) = delete;
  EvalScope& operator=(const EvalScope&) = delete;

 private:
  GPT& model_;
  bool was_training_;
};

}  // namespace

Tensor generate(GPT& model, const Tensor& prompt, const GenerateOptions& options) {
  options.sampling.validate();
  const GPTConfig& cfg = model.config();
  TESSERA_CHECK(prompt.defined() && prompt.dim() == 2 && !is_floating(prompt.dtype()) &&
                    prompt.size(0) > 0 && prompt.size(1) > 0,
                "generate: the prompt must be a non-empty i32/i64 [B, T] tensor, got ",
                describe(prompt));
  TESSERA_CHECK(options.max_new_tokens >= 0, "generate: max_new_tokens must be >= 0, got ",
                options.max_new_tokens);
  const int64_t B = prompt.size(0), T0 = prompt.size(1), total = T0 + options.max_new_tokens;
  TESSERA_CHECK(total <= cfg.block_size, "generate: a prompt of ", T0, " tokens plus ",
                options.max_new_tokens, " new tokens exceeds block_size ", cfg.block_size);
  NoGradGuard no_grad;
  EvalScope eval(model);

  const std::vector<int64_t> seq = to_vector<int64_t>(prompt);     // [B, T0], row-major
  std::vector<std::vector<int64_t>> rows(static_cast<size_t>(B));  // each sequence so far
  for (int64_t b = 0; b < B; ++b)
    rows[size_t(b)].assign(seq.begin() + b * T0, seq.begin() + (b + 1) * T0);
  // The model's device: where its weights are (ids and the cache go there).
  const Device device = model.named_parameters().front().second.device();
  std::optional<KVCache> cache;
  if (options.use_cache) cache.emplace(cfg, B, model.dtype(), total, model.tp_size(), device);

  // The tokens the model has not seen yet.
  Tensor next = ops::to(ops::cast(prompt, DType::i64), device);
  for (int64_t step = 0; step < options.max_new_tokens; ++step) {
    if (!options.use_cache) {
      std::vector<int64_t> all;
      for (const auto& r : rows) all.insert(all.end(), r.begin(), r.end());
      next = ops::to(from_vector<int64_t>(all, Shape{B, int64_t(rows[0].size())}), device);
    }
    Tensor h = model.hidden(next, cache ? &*cache : nullptr);
    Tensor logits = ops::cast(model.head(ops::narrow(h, 1, h.size(1) - 1, 1)), DType::f32);
    std::vector<float> host = to_vector<float>(logits);  // [B, 1, padded_vocab]
    const int64_t vp = logits.size(2);
    std::vector<int64_t> chosen(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) {
      std::span<const float> row(host.data() + b * vp, size_t(cfg.vocab_size));
      chosen[size_t(b)] =
          sample_token(row, options.sampling, sampling_uniform(options.sampling.seed, step, B, b));
      rows[size_t(b)].push_back(chosen[size_t(b)]);
    }
    next = ops::to(from_vector<int64_t>(chosen, Shape{B, 1}), device);
    if (options.on_step && !options.on_step(step, chosen)) break;
  }
  std::vector<int64_t> out;
  for (const auto& r : rows) out.insert(out.end(), r.begin(), r.end());
  return from_vector<int64_t>(out, Shape{B, int64_t(rows[0].size())});
}

}  // namespace tessera::nn
