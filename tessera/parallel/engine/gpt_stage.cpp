#include "tessera/parallel/engine/gpt_stage.h"

#include "tessera/autograd/functions/elementwise.h"
#include "tessera/core/error.h"
#include "tessera/core/ops/movement.h"

namespace tessera::parallel {

GptPipelineStage::GptPipelineStage(std::vector<std::shared_ptr<nn::GPT>> chunks,
                                   const Schedule& schedule, int pp_rank, int64_t micro_rows,
                                   int64_t seq_len, int64_t ignore_index)
    : chunks_(std::move(chunks)),
      stages_(schedule.stages),
      pp_rank_(pp_rank),
      model_stages_(schedule.model_stages()),
      micro_rows_(micro_rows),
      seq_len_(seq_len),
      ignore_index_(ignore_index) {
  TESSERA_CHECK(!chunks_.empty() && int(chunks_.size()) == schedule.virtual_stages,
                "GptPipelineStage: ", chunks_.size(), " chunks for ", schedule.name());
  const nn::GPT& first = *chunks_.front();
  width_ = first.config().n_embd;
  tp_size_ = first.tp_size();
  sequence_parallel_ = first.parallel().tp && first.parallel().tp->sequence_parallel();
  backwards_per_step_ = schedule.virtual_stages * schedule.microbatches;
  const nn::StateDict params = first.named_parameters();
  TESSERA_CHECK(!params.empty(), "GptPipelineStage: the first chunk has no parameters");
  device_ = params.front().second.device();
}

void GptPipelineStage::begin_step(const Tensor& inputs, const Tensor& targets,
                                  std::vector<double> loss_weights) {
  TESSERA_CHECK(dp_ != nullptr, "GptPipelineStage: no DataParallel set");
  TESSERA_CHECK(!open_ && backwards_run_ == 0, "GptPipelineStage: the previous step was not ",
                "finished (finish_step)");
  const int64_t micro = backwards_per_step_ / int64_t(chunks_.size());
  TESSERA_CHECK(loss_weights.empty() || int64_t(loss_weights.size()) == micro,
                "GptPipelineStage: ", loss_weights.size(), " loss weights for ", micro,
                " micro-batches");
  inputs_ = inputs;
  targets_ = targets;
  loss_weights_ = std::move(loss_weights);
}

void GptPipelineStage::finish_step() {
  TESSERA_CHECK(backwards_run_ == backwards_per_step_, "GptPipelineStage: the step ran ",
                backwards_run_, " of its ", backwards_per_step_, " backward passes");
  if (open_) dp_->finish();
  open_ = false;
  backwards_run_ = 0;
  inputs_ = targets_ = Tensor();
  loss_weights_.clear();
}

void GptPipelineStage::settle() {
  // Only a non-synchronising pass is finished here; the synchronising one is the step's last
  // and waits for finish_step().
  if (open_ && backwards_run_ < backwards_per_step_) {
    dp_->finish();
    open_ = false;
  }
}

Tensor GptPipelineStage::rows(const Tensor& t, int micro) const {
  return ops::contiguous(ops::narrow(t, 0, int64_t(micro) * micro_rows_, micro_rows_));
}

Tensor GptPipelineStage::forward(int chunk, int micro, const Tensor& input) {
  settle();
  const int stage = chunk * stages_ + pp_rank_;
  const nn::GPT& model = *chunks_[size_t(chunk)];
  const Tensor x = stage == 0 ? rows(inputs_, micro) : input;
  if (stage != model_stages_ - 1) return model.forward_stage(x);
  const Tensor loss = model.forward_stage(x, rows(targets_, micro), ignore_index_);
  const double w = loss_weights_.empty() ? 1.0 : loss_weights_[size_t(micro)];
  return w == 1.0 ? loss : mul(loss, w);
}

ActivationSpec GptPipelineStage::activation_spec(int, int) const {
  const int64_t t = sequence_parallel_ ? seq_len_ / tp_size_ : seq_len_;
  return {Shape{micro_rows_, t, width_}, chunks_.front()->dtype(), device_};
}

void GptPipelineStage::before_backward(int, int, bool) {
  settle();
  ++backwards_run_;
  dp_->set_sync(backwards_run_ == backwards_per_step_);
  open_ = true;
}

}  // namespace tessera::parallel
