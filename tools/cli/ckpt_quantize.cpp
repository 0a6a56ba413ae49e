// `tessera ckpt quantize --to int8`: a model's block linear weights to Q8_0 (weight-only INT8,
// ops/quantized_linear.h), written as a run directory that generate and serve load like any
// other. With --eval-data, the validation loss and perplexity before and after, on the same
// batches.

#include <cmath>
#include <iostream>

#include "cli/ckpt_output.h"
#include "cli/commands.h"
#include "tessera/data/loader.h"
#include "tessera/tessera.h"
#include "tessera/train/detail/model_source.h"

namespace tessera::cli {

namespace {

struct QuantizeFlags {
  std::string spec, to, output, eval_data;
  int64_t eval_batches = 8, batch_size = 8, seq_len = 0, n_head = 0;
};

int64_t bytes_of(const Tensor& t) {
  return t.numel() * int64_t(dtype_size(t.dtype()));
}

struct MeanLoss {
  double loss;
  int64_t batches;  // --eval-batches, or every batch of the data when it holds fewer
};

// Mean next-token loss over the first --eval-batches batches of --eval-data, in order.
MeanLoss mean_loss(nn::GPT& model, const QuantizeFlags& f, int64_t seq_len) {
  data::LoaderOptions lo;
  lo.batch_size = f.batch_size;
  lo.seq_len = seq_len;
  lo.shuffle = false;
  lo.vocab_size = model.config().vocab_size;
  data::DataLoader val(f.eval_data, lo);
  const int64_t n = std::min<int64_t>(f.eval_batches, val.batches_per_epoch());
  TESSERA_CHECK(n >= 1, "ckpt quantize: ", f.eval_data, " holds no batch of ", f.batch_size, " x ",
                seq_len, " tokens");
  NoGradGuard no_grad;
  model.eval();
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    const data::Batch b = val.next();
    total += model.loss(b.inputs, b.targets).item<double>();
  }
  return {total / double(n), n};
}

void quantize(const QuantizeFlags& f) {
  TESSERA_CHECK(f.to == "int8", "ckpt quantize: --to must be int8, got '", f.to, "'");
  TESSERA_CHECK(f.eval_batches >= 1 && f.batch_size >= 1, "ckpt quantize: --eval-batches and ",
                "--batch-size must be positive");
  const QuantizeFlags d;
  const char* unread = f.eval_batches != d.eval_batches ? "--eval-batches"
                       : f.batch_size != d.batch_size   ? "--batch-size"
                       : f.seq_len != d.seq_len         ? "--seq-len"
                                                        : nullptr;
  TESSERA_CHECK(unread == nullptr || !f.eval_data.empty(), "ckpt quantize: ", unread,
                " sizes the loss measured on --eval-data, which is not given");
  TESSERA_CHECK(f.seq_len >= 0, "ckpt quantize: --seq-len must be >= 0 (0: the run's), got ",
                f.seq_len);
  check_new_run_dir(f.output, "ckpt quantize");
  train::LoadedModel m = train::load_model(f.spec, f.n_head);
  // The length the run trained at (its loader's), so the loss is that of the positions it
  // learned; a model from elsewhere: the context, up to 256.
  const nlohmann::json& trained = m.state.is_object() && m.state.contains("loader")
                                      ? m.state["loader"]
                                      : nlohmann::json::object();
  const int64_t seq_len = f.seq_len > 0                ? f.seq_len
                          : trained.contains("seq_len") ? trained["seq_len"].get<int64_t>()
                                                        : std::min<int64_t>(m.config.block_size, 256);
  TESSERA_CHECK(seq_len <= m.config.block_size, "ckpt quantize: --seq-len ", seq_len,
                " exceeds the model's block_size ", m.config.block_size);
  const nn::StateDict before = m.model->state_dict();
  int64_t bytes_before = 0;
  for (const auto& [name, t] : before) bytes_before += bytes_of(t);
  std::optional<MeanLoss> loss_before;
  if (!f.eval_data.empty()) loss_before = mean_loss(*m.model, f, seq_len);

  const std::vector<std::string> names = m.model->quantize_q8();
  const nn::StateDict after = m.model->state_dict();
  int64_t bytes_after = 0, q_before = 0, q_after = 0;
  for (const auto& [name, t] : after) {
    bytes_after += bytes_of(t);
    if (name.ends_with(".weight_q8") || name.ends_with(".weight_scale")) q_after += bytes_of(t);
  }
  for (const std::string& name : names) q_before += bytes_of(nn::find_tensor(before, name));

  nn::CheckpointData data;
  data.step = m.step;
  data.model = after;
  data.state = m.state.is_object() ? m.state : nlohmann::json::object();
  data.state["model_config"] = m.config.to_json();
  data.state["model_config"]["quantization"] = "q8_0";
  data.state.erase("optimizer");  // inference only: nothing to resume
  data.state["quantized_from"] = m.path;
  if (!data.state.contains("tokenizer") && !m.tokenizer.empty())
    data.state["tokenizer"] = data::tokenizer_record(m.tokenizer);
  const std::string dir = nn::save_checkpoint(f.output, data);

  std::cout << "ckpt: quantized " << names.size() << " linear weights to Q8_0 (int8, an f16 "
            << "scale per 32): " << q_before << " -> " << q_after << " bytes ("
            << double(q_before) / double(q_after) << "x); the whole model " << bytes_before
            << " -> " << bytes_after << " bytes (" << double(bytes_before) / double(bytes_after)
            << "x); embeddings, norms and the head unchanged\n";
  if (loss_before) {
    const double before_loss = loss_before->loss, after_loss = mean_loss(*m.model, f, seq_len).loss;
    const double delta = std::exp(after_loss) - std::exp(before_loss);
    std::cout << "ckpt: validation loss over " << loss_before->batches << " batches of "
              << f.batch_size << " x " << seq_len << ": " << before_loss << " -> " << after_loss
              << "; perplexity " << std::exp(before_loss) << " -> " << std::exp(after_loss) << " ("
              << (delta >= 0 ? "+" : "") << delta << ")\n";
    // W8A8 is a way to run these weights, not a format: measured here, chosen at load time.
    m.model->set_int8_activations(true);
    const double w8a8_loss = mean_loss(*m.model, f, seq_len).loss;
    m.model->set_int8_activations(false);
    const double w8a8_delta = std::exp(w8a8_loss) - std::exp(before_loss);
    std::cout << "ckpt: with int8 activations too (W8A8, --int8-activations of generate and "
              << "serve): loss " << w8a8_loss << "; perplexity " << std::exp(w8a8_loss) << " ("
              << (w8a8_delta >= 0 ? "+" : "") << w8a8_delta << ")\n";
  }
  std::cout << "ckpt: wrote " << dir << "\n";
}

}  // namespace

void use_int8_activations(nn::GPT& model, const std::string& spec, const char* command) {
  TESSERA_CHECK(
      model.config().quantization == "q8_0", command, ": --int8-activations needs a ",
      "model with Q8_0 weights (tessera ckpt quantize --to int8); ", spec, " holds ",
      model.config().quantization.empty() ? "full-precision" : model.config().quantization,
      " weights");
  model.set_int8_activations(true);
}

void add_ckpt_quantize_command(CLI::App& ckpt) {
  auto f = std::make_shared<QuantizeFlags>();
  CLI::App* cmd = ckpt.add_subcommand(
      "quantize",
      "Write a model with weight-only INT8 linear layers (Q8_0), for generate and serve");
  cmd->add_option("model", f->spec, "run dir, checkpoint dir or HF weights")->required();
  cmd->add_option("--to", f->to, "int8 (Q8_0: int8 weights, an f16 scale per 32)")->required();
  cmd->add_option("--output", f->output, "a run directory to write")->required();
  cmd->add_option("--eval-data", f->eval_data,
                  "token shards (a glob) to measure the loss on, before and after");
  cmd->add_option("--eval-batches", f->eval_batches, "batches to measure on");
  cmd->add_option("--batch-size", f->batch_size, "sequences per batch");
  cmd->add_option("--seq-len", f->seq_len, "tokens per sequence (default: the length the run trained at, else min(block_size, 256))");
  cmd->add_option("--n-head", f->n_head, "heads of HF weights without a config.json");
  cmd->callback([f] { quantize(*f); });
}

}  // namespace tessera::cli
