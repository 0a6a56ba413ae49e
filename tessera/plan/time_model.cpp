#include "tessera/plan/time_model.h"

#include <algorithm>
#include <cmath>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/plan/memory_model.h"

namespace tessera::plan {

EngineProfile EngineProfile::megatron_2021() {
  EngineProfile p;
  p.name = "megatron-2021";
  p.materialized_attention = true;  // before FlashAttention: the scores pass through HBM
  p.scatter_gather_p2p = true;      // §4.1 of the paper
  p.dp_overlap = false;             // gradients all-reduced after the pipeline flush
  p.grad_comm_bytes = 4;            // fp32 main gradients
  p.param_gather_bytes = 2;         // no distributed optimizer: nothing to gather
  p.p2p_every_step = true;
  return p;
}

namespace {

double seconds(double bytes, const Link& l) {
  return bytes / (l.gbps * 1e9);
}
double alpha(const Link& l) {
  return l.latency_us * 1e-6;
}

// A block's parameter tensors: two norms (weight, and bias with biases), the attention's two
// projections and the MLP's two or three, each with a bias when the model has them.
double block_tensors(const nn::GPTConfig& m) {
  const double norms = m.norm == nn::NormKind::layernorm && m.bias ? 4 : 2;
  const double linears = m.mlp == nn::MlpKind::gelu ? 4 : 5;
  return norms + linears * (m.bias ? 2 : 1);
}

}  // namespace

double all_reduce_seconds(double bytes, int n, const Link& l) {
  if (n <= 1 || bytes <= 0) return 0;
  const double ring = 2 * (n - 1) * alpha(l) + 2.0 * (n - 1) / n * seconds(bytes, l);
  const double tree = 2 * std::ceil(std::log2(double(n))) * alpha(l) + 2 * seconds(bytes, l);
  return std::min(ring, tree);
}

double reduce_scatter_seconds(double bytes, int n, const Link& l) {
  if (n <= 1 || bytes <= 0) return 0;
  return (n - 1) * alpha(l) + double(n - 1) / n * seconds(bytes, l);
}

double all_gather_seconds(double bytes, int n, const Link& l) {
  return reduce_scatter_seconds(bytes, n, l);
}

double send_seconds(double bytes, const Link& l) {
  return bytes <= 0 ? 0 : alpha(l) + seconds(bytes, l);
}

PipelineTime pipeline_time(int p, int v, int m, double t_f, double t_b, double send,
                           bool p2p_every_step) {
  PipelineTime out;
  const double steps = double(m) * v + p - 1;
  out.bubble = (p - 1) * (t_f + t_b);
  if (p > 1) {
    if (p2p_every_step)
      out.transfers = 2 * steps * send;
    else if (v == 1 && m < p)
      out.transfers = (2.0 * (p - 1) + 2.0 * std::max(0, m - 2)) * send;
    else if (v == 1)
      out.transfers = (2.0 * (p - 1) / p * m + 2.0 * (p - 2)) * send;
    else
      out.transfers = 2.0 * (double(p) * v - 1) * send;
  }
  out.makespan = steps * (t_f + t_b) + out.transfers;
  return out;
}

bool inside_one_node(int64_t span, int64_t world, int gpus_per_node) {
  // Groups tile the world in aligned blocks of `span`; when the span neither divides a node nor
  // exceeds it, the block holding the node's last rank also holds the next node's first.
  return world <= gpus_per_node || (span <= gpus_per_node && gpus_per_node % span == 0);
}

Link group_link(int size, int stride, int64_t world, const GpuSpec& g) {
  const int gpn = g.gpus_per_node;
  const int64_t span = int64_t(size) * stride;
  if (inside_one_node(span, world, gpn)) return {g.nvlink_gbps, g.nvlink_latency_us};
  // A span below a node that straddles a boundary may leave one member on a side.
  const int per_node = span < gpn ? 1 : std::clamp(gpn / std::max(stride, 1), 1, size);
  return {std::min(g.nvlink_gbps, per_node * g.network_gbps), g.network_latency_us};
}

TimeEstimate estimate_time(const Workload& w, const Layout& l, const GpuSpec& g,
                           const EngineProfile& engine) {
  const nn::GPTConfig& m = w.model;
  const double e = double(dtype_size(nn::compute_dtype(w.precision)));
  const double tokens = double(l.micro_batch(w)) * double(w.seq_len);
  const double h = double(m.n_embd), f = double(m.ffn_dim()), tp = l.tp;
  TESSERA_CHECK(!engine.fp8_gemms || g.fp8_tflops > 0, "plan: FP8 GEMMs on ", g.name,
                ", which has no FP8 tensor cores");
  const double flop_rate = g.bf16_tflops * 1e12 * g.gemm_efficiency;
  const double gemm_rate = engine.fp8_gemms ? g.fp8_tflops * 1e12 * g.gemm_efficiency : flop_rate;
  const double byte_rate = g.hbm_gbps * 1e9 * g.memory_efficiency;
  const int64_t world = int64_t(l.dp) * l.tp * l.pp;
  const Link tp_link = group_link(l.tp, 1, world, g);
  // One pair of neighbours: one NIC each way (a split send uses each tp rank's own).
  const Link pp_link = inside_one_node(int64_t(l.tp) * l.pp, world, g.gpus_per_node)
                           ? Link{g.nvlink_gbps, g.nvlink_latency_us}
                           : Link{g.network_gbps, g.network_latency_us};
  const Link dp_link = group_link(l.dp, l.tp * l.pp, world, g);

  // One block, one micro-batch, one tensor-parallel rank.
  const FlopsPerToken per_token = flops_per_token(m, w.seq_len);
  const double layer_gemm = tokens * per_token.layers / m.n_layer / tp;
  const double layer_attention = tokens * per_token.attention / m.n_layer / tp;
  // Elementwise traffic per token: two norms (read, write) and two residual adds (two reads,
  // a write) over h, on tokens / tp under sequence parallelism; the activation over f / tp;
  // with materialized attention about six passes over the s scores of every local head
  // (scale-mask-softmax in and out, dropout in, out and its mask, the PV product's read).
  const double outside = 10 * h / (l.sequence_parallel ? tp : 1);
  const double activation = (m.mlp == nn::MlpKind::gelu ? 2 : 3) * f / tp;
  double layer_bytes = e * tokens * (outside + activation);
  if (engine.materialized_attention)
    layer_bytes += e * tokens * 6 * double(m.n_head) / tp * double(w.seq_len);
  const double layer_fwd =
      layer_gemm / gemm_rate + layer_attention / flop_rate + layer_bytes / byte_rate;
  // Two all-reduces (or under SP two all-gathers and two reduce-scatters, the same ring
  // volume) of the [b, s, h] activations per pass.
  const double tp_pass = l.tp > 1 ? 2 * all_reduce_seconds(tokens * h * e, l.tp, tp_link) : 0;
  const double selective =
      l.recompute.mode == nn::RecomputeMode::selective ? e * tokens * activation / byte_rate : 0;

  // The head on the last stage: the logits GEMM, the f32 cross-entropy's passes over them.
  const double vocab_local = double(m.padded_vocab_size()) / tp;
  const double head_fwd =
      tokens * 2 * h * vocab_local / gemm_rate + 3 * 4 * tokens * vocab_local / byte_rate;

  const int64_t per_chunk = m.n_layer / (int64_t(l.pp) * l.virtual_stages);
  const double recomputed = l.recompute.mode != nn::RecomputeMode::full ? 0
                            : l.recompute.num_layers < 0
                                ? double(per_chunk)
                                : double(std::min<int64_t>(l.recompute.num_layers, per_chunk));
  TimeEstimate t;
  // The last stage's chunks are the slowest (they add the head): the pipeline runs at its pace.
  const double head_share =
      l.pp > 1 || l.virtual_stages > 1 ? head_fwd / l.virtual_stages : head_fwd;
  t.forward_chunk_s = per_chunk * (layer_fwd + tp_pass) + head_share;
  t.backward_chunk_s = per_chunk * (2 * layer_fwd + tp_pass + selective) +
                       recomputed * (layer_fwd + tp_pass) + 2 * head_share;
  // Every chunk's forward and backward on this rank, and each recomputed block's second forward.
  t.tp_comm_s = double(l.microbatches) * l.virtual_stages * (2 * per_chunk + recomputed) * tp_pass;
  double send = 0;
  if (l.pp > 1) {
    const double p2p_bytes =
        tokens * h * e / (l.sequence_parallel || engine.scatter_gather_p2p ? tp : 1);
    send = send_seconds(p2p_bytes, pp_link);
  }
  const PipelineTime pipe = pipeline_time(l.pp, l.virtual_stages, l.microbatches, t.forward_chunk_s,
                                          t.backward_chunk_s, send, engine.p2p_every_step);
  t.pipeline_s = pipe.makespan;
  t.bubble_s = pipe.bubble;
  t.p2p_s = pipe.transfers;

  // Data parallelism over this rank's padded elements (the fullest rank: the first stage).
  const ModelStates states = model_state_bytes(m, l, w.precision, 0);
  const double S = double(states.padded_elements);
  const int zero = l.offload ? std::max(1, l.zero) : l.zero;
  const double rs = reduce_scatter_seconds(S * engine.grad_comm_bytes, l.dp, dp_link);
  double after = 0;  // what runs after the update, exposed
  if (zero <= 2)
    after = all_gather_seconds(S * (zero == 0 ? engine.grad_comm_bytes : engine.param_gather_bytes),
                               l.dp, dp_link);
  t.dp_comm_s = rs + after;
  const double window = engine.dp_overlap ? l.virtual_stages * t.backward_chunk_s : 0;
  t.dp_exposed_s = std::max(0.0, rs - window) + after;
  if (zero == 3 && l.dp > 1) {
    // Each unit's compute copy gathered before its forward and again before its backward,
    // every micro-batch: as one bucket prefetched under the previous unit's compute, or one
    // collective per parameter tensor, waited for.
    const double units = std::max<double>(per_chunk * l.virtual_stages, 1);
    const double unit_bytes = S / units * (w.precision == nn::Precision::fp32 ? 4 : e);
    const double tensors = engine.zero3_per_tensor ? block_tensors(m) : 1;
    const double gather = tensors * dp_link.latency_us * 1e-6 * (l.dp - 1) +
                          all_gather_seconds(unit_bytes, l.dp, dp_link);
    const double scatter = tensors * dp_link.latency_us * 1e-6 * (l.dp - 1);
    const double fwd = layer_fwd + tp_pass, bwd = 2 * layer_fwd + tp_pass;
    const double per_micro =
        engine.zero3_overlap ? units * (std::max(0.0, gather - fwd) + std::max(0.0, gather - bwd))
                             : units * (2 * gather + scatter);
    t.zero3_exposed_s = l.microbatches * per_micro;
    t.dp_comm_s += l.microbatches * units * (2 * gather + scatter);
    if (!engine.zero3_overlap) t.dp_exposed_s = rs + after;  // the reduce-scatter too
  }
  // AdamW over this rank's share: ~30 bytes per element (master, gradient and two moments
  // read and written, the compute copy written), memory-bound.
  const double updated = zero == 0 ? S : S / l.dp;
  if (l.offload) {
    // On the host: the vectorised AdamW at host memory speed (28 bytes per element,
    // cpu_adamw.h), with the f32 gradients down and the 16-bit parameters up over PCIe.
    t.optimizer_s = updated * 28 / (g.host_gbps * 1e9) + updated * (4 + e) / (g.pcie_gbps * 1e9);
  } else {
    t.optimizer_s = updated * 30 / byte_rate;
  }
  t.step_s = t.pipeline_s + t.dp_exposed_s + t.zero3_exposed_s + t.optimizer_s;
  const double fraction = per_chunk > 0 ? recomputed / double(per_chunk) : 0;
  t.hardware_flops = training_flops(m, w.global_batch, w.seq_len, fraction);
  t.model_flops = training_flops(m, w.global_batch, w.seq_len, 0);
  return t;
}

}  // namespace tessera::plan
