#pragma once
// GptPipelineStage: the chunks of one GPT that a rank computes (the TP shard of the layers of
// each of its V model stages), as the pipeline executor's PipelineStage, with the data-parallel
// gradient reduction driven from inside the schedule.
//
// Micro-batches: the stage is given this data-parallel rank's rows of the global batch for the
// step; micro-batch m is rows [m * R, (m + 1) * R), R = rows / M. Its mean loss is weighted by
// its share of the step's counted targets (begin_step), so that micro-batches with more ignored
// targets count for less, as they do in one process's mean over the whole batch. Model stage 0
// reads the ids, the last model stage its targets; between stages travel hidden states [R, T, C]
// (under sequence parallelism this tp rank's [R, T / tp, C]).
//
// Data parallelism over a pipeline. One DataParallel holds the parameters of every chunk. A
// step on this rank runs V * M backward passes; the last of them (whatever its chunk) runs
// with sync on, every earlier one with sync off (ZeRO 0/1 accumulate locally; ZeRO 2/3 reduce
// each pass, as they do without a pipeline). DataParallel::finish() must follow each backward
// pass; the executor only calls before_backward, so a pass is finished when the next action
// of this stage starts (forward or backward) and the last one by finish_step() after the
// pipeline returns. Deferring the final finish matters: it sums the tied embedding over the
// first and last stage, a blocking collective that must not run while the other stage still
// waits for this one's pipeline messages.
// With V > 1 the last pass covers only chunk 0, so ZeRO 0/1 reduce every bucket at the end of
// the step (no overlap), and ZeRO 2/3 reduce the other chunks' (zero) buckets on every pass:
// correct, but V times the reduction traffic of V = 1.

#include <cstdint>
#include <memory>
#include <vector>

#include "tessera/nn/gpt.h"
#include "tessera/parallel/data/data_parallel.h"
#include "tessera/parallel/pipeline/executor.h"

namespace tessera::parallel {

class GptPipelineStage final : public PipelineStage {
 public:
  // chunks[c] is model stage c * pp + pp_rank; micro_rows is R, seq_len T.
  GptPipelineStage(std::vector<std::shared_ptr<nn::GPT>> chunks, const Schedule& schedule,
                   int pp_rank, int64_t micro_rows, int64_t seq_len, int64_t ignore_index);

  // The DataParallel over every chunk's parameters (built after the chunks).
  void set_data_parallel(DataParallel* dp) { dp_ = dp; }
  // This data-parallel rank's rows for the step: ids and targets [R * M, T], on the chunks'
  // device. loss_weights[m] multiplies micro-batch m's mean loss before the executor's 1 / M
  // (ParallelTrainer: its share of the global count of target tokens, times M); empty, or a
  // weight of exactly 1, leaves the loss as it is.
  void begin_step(const Tensor& inputs, const Tensor& targets,
                  std::vector<double> loss_weights = {});
  // Finishes the last backward pass (the synchronising one) and forgets the batch.
  void finish_step();

  Tensor forward(int chunk, int micro, const Tensor& input) override;
  ActivationSpec activation_spec(int model_stage, int micro) const override;
  void before_backward(int chunk, int micro, bool last) override;

  const std::vector<std::shared_ptr<nn::GPT>>& chunks() const { return chunks_; }

 private:
  // Finishes a backward pass left open (one that did not synchronise).
  void settle();
  Tensor rows(const Tensor& t, int micro) const;

  std::vector<std::shared_ptr<nn::GPT>> chunks_;
  int stages_, pp_rank_, model_stages_;
  int64_t micro_rows_, seq_len_, ignore_index_, width_;
  int tp_size_;
  bool sequence_parallel_;
  Device device_ = Device::cpu();  // the chunks' (activations travel on it)
  int backwards_per_step_ = 0, backwards_run_ = 0;
  bool open_ = false;  // a backward pass waits for DataParallel::finish()
  DataParallel* dp_ = nullptr;
  Tensor inputs_, targets_;
  std::vector<double> loss_weights_;
};

}  // namespace tessera::parallel
