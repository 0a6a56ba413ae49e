// A research codebase embedding Tessera through find_package(tessera): a tiny graph and its
// gradient, then training through the library's engine (tessera/train/trainer.h) twice:
//   1. a GPT from options, with the step loop written here (step(), evaluate(), save());
//   2. a model of the consumer's own (a bigram table, its own loss) with SGD, through
//      Trainer::fit on the data-parallel engine.
// Each must lower its loss; the program exits non-zero otherwise.

#include <tessera/tessera.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

namespace fs = std::filesystem;
using namespace tessera;

namespace {

bool check(bool ok, const char* what) {
  std::printf("consumer: %s: %s\n", what, ok ? "ok" : "WRONG");
  return ok;
}

// Byte-token shards of a patterned text (train and val) under dir/data.
void write_shards(const fs::path& dir) {
  fs::create_directories(dir / "text");
  std::string text;
  for (int i = 0; i < 300; ++i)
    text += "line " + std::to_string(i % 23) + ": a research codebase trains a tiny model.\n";
  write_file_atomic((dir / "text/corpus.txt").string(), text);
  data::PrepareOptions p;
  p.inputs = {(dir / "text").string()};
  p.output_dir = (dir / "data").string();
  p.val_fraction = 0.2;
  p.tokenizer_source = "byte";
  data::prepare_shards(data::ByteTokenizer(), p);
}

train::TrainOptions tiny_options(const fs::path& dir, const std::string& run) {
  train::TrainOptions o;
  o.train_data = (dir / "data/data_train_*.bin").string();
  o.val_data = (dir / "data/data_val_*.bin").string();
  o.model_overrides = {{"n_layer", 2}, {"n_head", 2},      {"n_kv_head", 2},
                       {"n_embd", 32}, {"block_size", 32}, {"dropout", 0.0}};
  o.batch_size = 8;
  o.seq_len = 16;
  o.max_steps = 12;
  o.lr = 3e-3;
  o.warmup_steps = 2;
  o.resume = "never";
  o.run_dir = (dir / run).string();
  o.threads = 1;
  return o;
}

// The consumer's own model: logits[t] = table[id[t]], a bigram model.
class Bigram : public nn::Module {
 public:
  explicit Bigram(int64_t vocab) {
    table_ = register_parameter("table", zeros(Shape{vocab, vocab}));
  }
  Tensor loss(const Tensor& ids, const Tensor& targets) const {
    const Tensor logits = embedding(table_, ids);  // [B, T, V]
    const int64_t v = table_.size(0);
    return cross_entropy(reshape(logits, {-1, v}), reshape(targets, {-1}));
  }

 private:
  Tensor table_;
};

}  // namespace

int main() {
  bool ok = true;
  {
    Tensor x = from_vector<float>({1.0f, 2.0f, 3.0f}, {3});
    x.set_requires_grad(true);
    Tensor y = sum(mul(x, x));  // dy/dx = 2x
    y.backward();
    std::vector<float> g = to_vector<float>(x.grad());
    ok &= check(std::abs(y.item<float>() - 14.0f) < 1e-6f && g == std::vector<float>{2, 4, 6},
                "autograd of sum(x * x)");
  }

  const fs::path dir = fs::temp_directory_path() / "tessera_consumer";
  fs::remove_all(dir);
  write_shards(dir);

  {  // 1. A GPT from options, stepped by hand.
    train::Trainer trainer(tiny_options(dir, "gpt"));
    const double before = trainer.evaluate();
    double first = 0, last = 0;
    while (!trainer.done()) {
      const train::StepMetrics m = trainer.step();
      if (m.step == 1) first = m.loss;
      last = m.loss;
    }
    const double after = trainer.evaluate();
    const std::string checkpoint = trainer.save();
    std::printf("consumer: GPT %s: loss %.3f -> %.3f, val %.3f -> %.3f, %s\n",
                trainer.engine().describe().c_str(), first, last, before, after,
                checkpoint.c_str());
    ok &= check(last < first && after < before && fs::exists(checkpoint), "GPT trains");
  }

  {  // 2. The consumer's own model, loss and optimizer, through fit().
    train::TrainOptions o = tiny_options(dir, "bigram");
    o.optimizer = "sgd";
    o.lr = 50;  // SGD on a table of 257 x 257 logits from zero: each row sees a few tokens
    o.grad_clip = 0;
    const int64_t vocab = data::ByteTokenizer().vocab_size();  // 256 bytes and end-of-text
    auto model = std::make_shared<Bigram>(vocab);
    train::ModuleParts parts;
    parts.master = model;
    parts.optimizer =
        std::make_shared<nn::SGD>(model->named_parameters(), nn::SGDOptions{.lr = o.lr});
    parts.loss = [](nn::Module& m, const Tensor& x, const Tensor& y, int64_t) {
      return dynamic_cast<Bigram&>(m).loss(x, y);
    };
    train::Trainer trainer(std::move(parts), o);
    const train::FitResult r = trainer.fit();
    std::printf("consumer: bigram: %lld steps, final loss %.3f (uniform: %.3f)\n",
                (long long)r.final_step, r.final_loss, std::log(double(vocab)));
    ok &= check(r.final_step == o.max_steps && r.final_loss < std::log(double(vocab)) - 0.5,
                "the consumer's own model trains");
  }
  fs::remove_all(dir);
  return ok ? 0 : 1;
}
