#pragma once
// TrainOptions: everything `tessera train` is told, resolved from defaults, an optional JSON
// config file, and flags (flags win). The resolved options are printed at startup, saved as
// <run_dir>/config.json and stored in every checkpoint, so a run can be resumed or inspected
// without its command line.

#include <cstdint>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "tessera/nn/gpt_config.h"
#include "tessera/nn/lr_schedule.h"
#include "tessera/nn/optim/mixed_precision.h"
#include "tessera/nn/recompute.h"
#include "tessera/parallel/data/grad_compression.h"

namespace tessera::train {

// The version of the config format (docs/formats.md).
inline constexpr int64_t kConfigVersion = 1;

struct TrainOptions {
  // Model: a preset plus overrides, or weights to start from.
  std::string preset = "gpt2-tiny";
  nlohmann::json model_overrides = nlohmann::json::object();  // GPTConfig keys
  std::string init_from;  // "" (fresh init), an HF safetensors file/dir, or an llm.c .bin

  // Data.
  std::string train_data;          // shard pattern (file, dir, glob)
  std::string val_data;            // "" for none
  std::string tokenizer = "byte";  // for samples and the vocabulary check

  // Batch.
  int64_t batch_size = 8;
  int64_t seq_len = 128;
  int64_t grad_accum = 1;
  int64_t max_steps = 1000;

  // Optimizer and schedule.
  std::string optimizer = "adamw";  // "adamw" or "sgd"
  double lr = 6e-4;
  double min_lr_ratio = 0.1;  // min_lr = lr * min_lr_ratio (cosine, wsd)
  int64_t warmup_steps = 0;
  std::string lr_schedule_kind = "cosine";  // "cosine", "wsd", "constant"
  double decay_fraction = 0.2;              // wsd
  double weight_decay = 0.1;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double momentum = 0.9;   // sgd
  double grad_clip = 1.0;  // <= 0: off

  // Evaluation, logging, checkpoints.
  int64_t eval_every = 0;  // 0: only at the end (when val_data is set)
  int64_t eval_batches = 8;
  int64_t log_every = 1;
  int64_t checkpoint_every = 0;  // 0: only at the end
  int64_t keep_checkpoints = 3;
  std::string run_dir = "runs/default";
  // "auto": from the run's newest checkpoint that loads, passing over corrupt ones; "never";
  // or a checkpoint directory, which must load.
  std::string resume = "auto";
  // TensorBoard event files of every logged step go here (rank 0; train/tensorboard.h); "":
  // none.
  std::string tensorboard;

  // Randomness and machine.
  uint64_t seed = 1337;  // data order and dropout masks
  int threads = 0;       // 0: all cores
  // "cpu", "cuda" (this rank's GPU; see device.h) or "cuda-sim" (the CUDA backend on the
  // kernel simulator: the device path without a GPU, slowly; tiny models only)
  std::string device = "cpu";
  std::string precision = "fp32";    // "fp32", "bf16" or "fp16" (nn/optim/mixed_precision.h)
  double loss_scale_init = 65536;    // fp16: the first dynamic loss scale
  int64_t loss_scale_window = 2000;  // fp16: clean steps before the loss scale doubles
  bool stochastic_rounding = false;  // bf16: round master -> compute weights stochastically
  double peak_gflops = 0;            // one rank's peak for MFU; 0: this CPU's nominal fp32 peak

  // Parallel layout (tessera/parallel/engine, docs/parallelism.md). All at 1 / 0 / off, in one
  // process: the single-process trainer. Otherwise run under mpiexec with dp * tp * pp ranks.
  int64_t dp = 1, tp = 1, pp = 1;
  int64_t zero = 0;                // ZeRO stage over the dp group, 0..3
  int64_t microbatches = 1;        // M: pipeline micro-batches per dp rank and step
  std::string schedule = "1f1b";   // pipeline: "gpipe", "1f1b" or "interleaved" (pp > 1)
  int64_t virtual_stages = 1;      // V: model chunks per pipeline rank (interleaved)
  bool sequence_parallel = false;  // under tp > 1
  double bucket_mb = 0;            // DP gradient buckets (ZeRO 0-2); 0: one per layer
  // What the dp reduction sends (parallel/data/grad_compression.h): "none", "bf16" or
  // "powersgd:R"; compression_warmup uncompressed steps first (powersgd only).
  std::string grad_compression = "none";
  int64_t compression_warmup = 0;
  // "none" or "optimizer": the fp32 master, AdamW's moments and the update in host memory
  // (ZeRO-Offload; CUDA, bf16/fp16, ZeRO 1-3: parallel/data/data_parallel.h).
  std::string offload = "none";
  // Seconds a collective may wait before it throws parallel::CommError and `tessera train`
  // ends the job (exit 124; comm/comm_health.h). The wait after a checkpoint save, while rank 0
  // writes, takes save_timeout instead, so a long save never trips it.
  double comm_timeout = 600;
  double save_timeout = 3600;
  // Seconds a rank that ends the job after a failure waits until every rank has dumped its
  // flight recorder into <run_dir>/flight (parallel/comm/flight_watch.h). A supervisor's
  // heartbeat timeout must exceed comm_timeout + dump_window, or it kills the job first.
  double dump_window = 5;
  // Every N steps rank 0 compares the ranks' busy time per phase and names a straggler
  // (train/stragglers.h); 0: off. Several ranks only.
  int64_t straggler_every = 10;
  // "A:B": a Chrome trace of steps A to B (1-based, inclusive) per rank in <run_dir>/trace
  // (parallel/step_trace.h); "": none.
  std::string trace_steps;
  // trace_steps parsed: {A, B}, or {0, -1} for none. Throws naming the value when malformed.
  std::pair<int64_t, int64_t> trace_range() const;
  // Whether the training loop waits for each checkpoint's write (the old behaviour, and the
  // reference of bench/checkpoint_stall.sh); by default rank 0 writes in the background.
  bool sync_save = false;
  // "sharded" (every rank writes what it owns: nn/io/sharded_checkpoint.h), "gathered" (rank 0
  // gathers and writes the single-process format) or "auto": sharded on several ranks.
  std::string checkpoint_format = "auto";
  // How a sharded save snapshots the state (nn::CheckpointWriter::Snapshot): "copy", "stream"
  // (no copy: the write reads the live state, a GPU's through one page-locked chunk, and the
  // next update waits for it), "staged" (the part downloaded into page-locked memory on a side
  // stream from a GPU, or copied by the writer thread on the CPU, while the loop goes on; the
  // next update waits for it) or "auto": stream on the CPU, staged on a GPU.
  std::string checkpoint_snapshot = "auto";
  // The chunk a streamed snapshot of GPU state reads through, in MiB: the host memory a save
  // holds beyond the state. Only with --checkpoint-snapshot stream on a GPU; 0 (unset) means
  // 64 MiB there, so that any size given where no chunk applies is refused.
  double checkpoint_chunk_mb = 0;
  // The chunk size in bytes that checkpoint_chunk_mb resolves to.
  int64_t checkpoint_chunk_bytes() const;
  // The node-local tier (nn/io/local_checkpoint.h): every N steps each rank writes its own
  // state into local_dir (default: $TMPDIR or /tmp, then tessera-local/<hash of run_dir>),
  // keeping the newest; 0: off. A restart on the same layout and hosts resumes from it when it
  // is newer than the durable tier and every rank holds the same step.
  int64_t checkpoint_every_local = 0;
  std::string local_dir;

  // Activation recomputation (nn/recompute.h): "none", "selective" or "full"; under full,
  // recompute_layers blocks per pipeline stage (its first ones), -1 for all.
  std::string recompute = "none";
  int64_t recompute_layers = -1;

  // Samples printed after training.
  int64_t sample_tokens = 0;
  std::string sample_prompt = "\n";
  double sample_temperature = 0.8;
  int64_t sample_top_k = 40;
  int64_t num_samples = 1;

  // Whether the layout asks for more than one process.
  bool parallel() const { return dp * tp * pp > 1; }
  nn::GPTConfig model_config() const;
  nn::LRSchedule lr_schedule() const;
  nn::Precision precision_policy() const;
  nn::LossScalerOptions loss_scaler() const;
  nn::Recompute recompute_policy() const;
  parallel::GradCompression grad_compression_policy() const;
  // Throws naming the field and value.
  void validate() const;
  nlohmann::json to_json() const;
  // to_json() with "config_version" (kConfigVersion): what <run_dir>/config.json holds. A
  // config of a newer version is refused in one line by update_from_json.
  nlohmann::json to_config_file() const;
  // Overrides the keys present in j; unknown keys and wrong types throw naming the key.
  void update_from_json(const nlohmann::json& j);
};

}  // namespace tessera::train
