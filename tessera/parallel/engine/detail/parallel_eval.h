#pragma once
// A forward-only pipeline pass: the mean loss of a batch under a pipeline and tensor-parallel
// split, for validation. No autograd graph is recorded and dropout is off (every chunk is put
// in eval mode for the pass and returned to the mode it had).
//
// Order. Rank r walks its chunks in order and, within each, the micro-batches in order:
// receive the input activation from the previous model stage's rank (blocking), run the
// chunk's forward, post the output to the next stage's rank (asynchronously, waited for at the
// end). Every rank's order is increasing in (model stage, micro-batch), and each input comes
// from a smaller model stage, so by induction every receive is eventually matched: no
// deadlock, for any p, v and m (unlike training, no schedule is needed, since nothing flows
// back). Between two ranks the messages share one tag and MPI delivers them in order, which
// is the order both sides list them in. The tags are kEvalTag + destination model stage, apart
// from the training executor's (schedule.h's message_tag), so a forward-only pass can never
// take a training message.
//
// ZeRO-3 needs nothing here: each unit's hooks gather its parameters before it runs and, with
// no graph recorded, free them right after.

#include <cstdint>
#include <memory>
#include <vector>

#include "tessera/nn/gpt.h"
#include "tessera/parallel/comm/communicator.h"

namespace tessera::parallel {

inline constexpr int kEvalTag = 1 << 14;

struct ForwardPassSpec {
  int microbatches = 1;
  int64_t seq_len = 0;
  int64_t ignore_index = -100;
};

// The mean over micro-batches of each micro-batch's mean loss for ids and targets [R * M, T]
// (this data-parallel rank's rows, M = spec.microbatches), on every rank of the pipeline
// group. chunks[c] is model stage c * pp.size() + pp.rank() (pipeline/schedule.h). Collective
// over pp, and over the tp and dp groups the chunks' layers and hooks use.
double forward_only_loss(const std::vector<std::shared_ptr<nn::GPT>>& chunks, Communicator& pp,
                         const Tensor& inputs, const Tensor& targets, const ForwardPassSpec& spec);

}  // namespace tessera::parallel
