#pragma once
// Per-GPU memory of a layout, in the engine's own accounting.
//
// Model states are what DataParallel::memory() and the compute copy hold on a rank between
// steps, to the byte: every unit of parameters (the embedding, each block, the head) is one
// fp32 bucket padded to a multiple of dp x 16 elements (FlatLayout), a tied embedding's copy a
// bucket of its own, and then per ZeRO stage (data_parallel.h):
//
//   stage  parameters (fp32)  gradients (fp32)        AdamW moments (fp32)
//   0      S                  S                       2 S
//   1      S                  S + S/dp                2 S/dp
//   2      S                  S/dp                    2 S/dp
//   3      S/dp               S/dp                    2 S/dp
//
// (S: the rank's padded elements), plus the bf16/fp16 compute copy under mixed precision: the
// model chunk's own tensors below ZeRO-3 (unpadded), sharded as the master at ZeRO-3. Offload
// moves the master and the moments to the host, leaving the gradients and the compute copy.
//
// Activations are what the blocks save for backward (nn::block_activation_bytes, the formula
// the recompute tests hold the allocator to), times the micro-batch chunks a rank holds at
// the schedule's peak, plus the embedding's and head's own saves on the first and last stage.
// Buffers are the transients on top: the larger of the logits' gradient and one block's
// backward working set (one f-wide gradient, after its own saves rebuilt under full
// recomputation), the in-flight chunks' outputs a pipeline stage keeps, the units gathered
// under ZeRO-3, and a fixed runtime reserve (CUDA context, cuBLAS workspace, NCCL buffers) on
// a GPU.

#include <cstdint>
#include <vector>

#include "tessera/plan/layout.h"

namespace tessera::plan {

// The fp32 elements of one unit of parameters on one rank (one tensor-parallel slice).
struct UnitElements {
  std::string name;     // "embedding", "h.3-h.7", "head"
  int64_t own = 0;      // in the unit's bucket
  int64_t tied = 0;     // a tied embedding (pp > 1): its own bucket
  int64_t compute = 0;  // every parameter the unit's forward reads, unpadded (compute copy)
  int64_t count = 1;    // identical units: a chunk's blocks are one entry, so a plan's cost does
                        // not grow with the layers
};

// The units pipeline rank `pp_rank` holds, in its chunks' order.
std::vector<UnitElements> rank_units(const nn::GPTConfig& model, const Layout& layout, int pp_rank);

struct ModelStates {
  int64_t parameters = 0;  // the fp32 master and the compute copy
  int64_t gradients = 0;
  int64_t optimizer = 0;
  int64_t offloaded = 0;        // host bytes: the master shard and the moments under offload
  int64_t padded_elements = 0;  // S above
};

ModelStates model_state_bytes(const nn::GPTConfig& model, const Layout& layout,
                              nn::Precision precision, int pp_rank);

struct MemoryOptions {
  double reserve_gb = 0;  // the runtime's own (a GPU: 2.5; the CPU: 0)
  // The s x s attention scores pass through memory (Megatron-LM 2021; Tessera's fused kernel
  // never stores them): Korthikanti et al.'s 5 a s / h term per layer, kept without
  // recomputation and rebuilt one layer at a time under full recomputation.
  bool materialized_attention = false;
  // A pipeline stage keeps each in-flight chunk's output until its backward; false: an
  // output's data is freed once sent (Tessera's executor, Megatron-LM's
  // deallocate_output_tensor).
  bool outputs_held_until_backward = false;
};

struct MemoryEstimate {
  int pp_rank = 0;  // the pipeline rank this is for (estimate_memory: the fullest)
  int64_t parameters = 0, gradients = 0, optimizer = 0;
  int64_t activations = 0;  // saved for backward, at the schedule's peak
  int64_t buffers = 0;      // transients and the reserve
  int64_t offloaded = 0;
  int in_flight = 0;  // micro-batch chunks held at the peak
  int64_t total() const { return parameters + gradients + optimizer + activations + buffers; }
};

// The micro-batch chunks (one micro-batch through one chunk) whose activations pipeline rank
// r holds at once at the peak of its schedule: 1F1B min(m, p - r); interleaved Megatron's
// warm-up of 2 (p - r - 1) + (v - 1) p plus one, at most m v; pp 1: one.
int peak_in_flight(const Layout& layout, int pp_rank);

// Saved activations of one micro-batch on each of pp rank r's chunks, summed.
int64_t rank_activation_bytes(const Workload& w, const Layout& layout, int pp_rank);

MemoryEstimate estimate_memory(const Workload& w, const Layout& layout, int pp_rank,
                               const MemoryOptions& options = {});
// The fullest pipeline rank's estimate (the first stage's or the last's).
MemoryEstimate estimate_memory(const Workload& w, const Layout& layout,
                               const MemoryOptions& options = {});

}  // namespace tessera::plan
