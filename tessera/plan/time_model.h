#pragma once
// Step time of a layout: compute from exact FLOPs at the GPU's GEMM efficiency and the
// elementwise bytes at its memory efficiency, plus tensor-, pipeline- and data-parallel
// communication from an alpha-beta model of ring and tree collectives on the links the groups
// actually use, with overlap where the engine overlaps, and the pipeline's fill and drain.
//
//   ring all-reduce     2 (n-1) a + 2 (n-1)/n S / B       (NCCL's ring; bandwidth-optimal)
//   tree all-reduce     2 ceil(log2 n) a + 2 S / B        (double binary tree; latency-optimal)
//   reduce-scatter,     (n-1) a + (n-1)/n S / B           (S: the whole buffer)
//   all-gather
//   send/recv           a + S / B
// An all-reduce takes the faster of the two, as NCCL's tuner does.
//
// Groups follow the mesh order dp x pp x tp, tp fastest: a tp group is inside a node when tp
// divides the GPUs per node; pipeline neighbours and dp groups cross nodes once tp x pp (resp.
// tp x pp x dp) passes a node or does not divide it. Inside a node the link is NVLink. Across nodes
// a group with k members on each node runs k channels, one per member's NIC (as NCCL does on
// DGX-class nodes, one NIC per GPU), so its bandwidth is k NICs', at most NVLink's.
//
// The pipeline: a rank runs m v chunk-forwards and chunk-backwards, and the schedule adds
// p - 1 chunk-steps of fill and drain: (m v + p - 1)(t_f + t_b), which is what the dry-run
// simulator measures for 1F1B and interleaved 1F1B with uniform chunks (tests hold the two
// together). Data-parallel reductions start as buckets fill in the last micro-batch's
// backward (the engine's overlap), so only what does not fit under it is exposed; the
// post-update all-gather of ZeRO 0-2 is exposed. ZeRO-3 gathers each unit ahead of its use;
// what a gather takes beyond its unit's compute is exposed.

#include "tessera/plan/hardware.h"
#include "tessera/plan/layout.h"

namespace tessera::plan {

// How an engine runs the same layout: Tessera's defaults, and Megatron-LM as of Narayanan et
// al. 2021 (for the validation against their tables).
struct EngineProfile {
  std::string name = "tessera";
  bool materialized_attention = false;  // s x s scores through memory (softmax, mask, dropout)
  bool scatter_gather_p2p = false;      // pipeline sends split over the tp ranks' NICs
  bool dp_overlap = true;               // bucket reductions during the last backward
  // Pipeline transfers waited for at every chunk-step (Megatron-LM 2021's synchronous
  // send/recv pairs); false: as the engine's executor runs them, posted asynchronously, where
  // the dry-run simulator shows 1F1B exposing 2 (p-1)/p of a transfer per micro-batch plus
  // 2 (p-2) in fill and drain, and interleaved 1F1B only its fill and drain, 2 (p v - 1).
  bool p2p_every_step = false;
  // ZeRO-3: one collective per unit and overlap with the previous unit's compute (Tessera's
  // buckets and prefetch); or one collective per parameter tensor, waited for before the
  // unit runs (DeepSpeed's ZeRO-3 as Narayanan et al. 2021 measured it).
  bool zero3_per_tensor = false;
  bool zero3_overlap = true;
  // Memory (memory_model.h): in-flight chunks' outputs kept until their backward, or freed
  // once sent (Tessera's executor, Megatron-LM's deallocate_output_tensor).
  bool outputs_held_until_backward = false;
  int grad_comm_bytes = 4;     // bytes per gradient element on the wire (fp32)
  int param_gather_bytes = 4;  // ZeRO 1/2's post-update all-gather (fp32 master)
  // The GEMMs at the GPU's FP8 peak (at the same efficiency), everything else unchanged.
  // Tessera trains in bf16: this models what FP8 training would gain, for hardware choices.
  bool fp8_gemms = false;

  static EngineProfile tessera() { return {}; }
  static EngineProfile megatron_2021();
};

struct Link {
  double gbps = 1;  // GB/s, one direction
  double latency_us = 0;
};

double all_reduce_seconds(double bytes, int ranks, const Link& link);
double reduce_scatter_seconds(double bytes, int ranks, const Link& link);  // bytes: the input
double all_gather_seconds(double bytes, int ranks, const Link& link);      // bytes: the output
double send_seconds(double bytes, const Link& link);

// A pipeline step's makespan: p ranks of v chunks each, m micro-batches, a chunk's forward and
// backward taking t_f and t_b, a transfer `send` seconds. The formulas the dry-run simulator
// gives for 1F1B and interleaved 1F1B (tests hold them to simulate()):
//   (m v + p - 1)(t_f + t_b) + transfers, where transfers, posted asynchronously, are
//   v = 1, m < p:  (2 (p-1) + 2 max(0, m-2)) send                 (exact)
//   v = 1, m >= p: (2 (p-1)/p m + 2 (p-2)) send    (exact when p divides m, else within 1.2)
//   v > 1:         2 (p v - 1) send: interleaving hides the steady state's (exact);
//   waited for at every chunk-step (Megatron-LM 2021): 2 (m v + p - 1) send. The counts do
//   not depend on the backward/forward ratio (checked at 2 and 3).
struct PipelineTime {
  double makespan = 0, bubble = 0, transfers = 0;
};
PipelineTime pipeline_time(int p, int v, int m, double t_f, double t_b, double send,
                           bool p2p_every_step);

// Whether every group whose members span `span` consecutive ranks (size x stride), in a world
// of `world` ranks filling nodes in order, lies inside one node: the span divides a node, or
// the whole world is one node. A tp3 group on 8-GPU nodes straddles one (ranks 6, 7, 8).
bool inside_one_node(int64_t span, int64_t world, int gpus_per_node);

// The link a group of `size` ranks, `stride` apart in a world of `world`, runs on: NVLink
// inside one node; across nodes, as many NICs as the group has members on each node, or one
// NIC where a group straddles a node boundary with members to spare on neither side.
Link group_link(int size, int stride, int64_t world, const GpuSpec& gpu);

struct TimeEstimate {
  double forward_chunk_s = 0, backward_chunk_s = 0;  // one micro-batch through one chunk
  double pipeline_s = 0;       // the forwards and backwards, with fill and drain
  double tp_comm_s = 0;        // inside pipeline_s: the tensor-parallel collectives
  double p2p_s = 0;            // inside pipeline_s: pipeline transfers on the critical path
  double bubble_s = 0;         // inside pipeline_s: fill and drain
  double dp_comm_s = 0;        // the whole data-parallel traffic of a step
  double dp_exposed_s = 0;     // the part not hidden under backward
  double zero3_exposed_s = 0;  // ZeRO-3 gathers beyond their units' compute
  double optimizer_s = 0;
  double step_s = 0;
  double hardware_flops = 0;  // per step, all GPUs, recomputation included
  double model_flops = 0;     // per step, all GPUs, without recomputation (MFU's numerator)
};

TimeEstimate estimate_time(const Workload& w, const Layout& layout, const GpuSpec& gpu,
                           const EngineProfile& engine = EngineProfile::tessera());

}  // namespace tessera::plan
