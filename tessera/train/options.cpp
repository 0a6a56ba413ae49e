#include "tessera/train/options.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <regex>
#include <type_traits>
#include <utility>

#include "tessera/core/error.h"
#include "tessera/core/threads.h"
#include "tessera/core/version.h"

namespace tessera::train {

namespace {

// Visits every scalar option as (JSON key, member), so reading and writing JSON share one list.
template <class Options, class F>
void for_each_field(Options& o, F&& f) {
  f("init_from", o.init_from);
  f("train_data", o.train_data);
  f("val_data", o.val_data);
  f("tokenizer", o.tokenizer);
  f("batch_size", o.batch_size);
  f("seq_len", o.seq_len);
  f("grad_accum", o.grad_accum);
  f("max_steps", o.max_steps);
  f("optimizer", o.optimizer);
  f("lr", o.lr);
  f("min_lr_ratio", o.min_lr_ratio);
  f("warmup_steps", o.warmup_steps);
  f("lr_schedule", o.lr_schedule_kind);
  f("decay_fraction", o.decay_fraction);
  f("weight_decay", o.weight_decay);
  f("beta1", o.beta1);
  f("beta2", o.beta2);
  f("eps", o.eps);
  f("momentum", o.momentum);
  f("grad_clip", o.grad_clip);
  f("eval_every", o.eval_every);
  f("eval_batches", o.eval_batches);
  f("log_every", o.log_every);
  f("checkpoint_every", o.checkpoint_every);
  f("keep_checkpoints", o.keep_checkpoints);
  f("run_dir", o.run_dir);
  f("resume", o.resume);
  f("seed", o.seed);
  f("threads", o.threads);
  f("device", o.device);
  f("precision", o.precision);
  f("loss_scale_init", o.loss_scale_init);
  f("loss_scale_window", o.loss_scale_window);
  f("stochastic_rounding", o.stochastic_rounding);
  f("peak_gflops", o.peak_gflops);
  f("dp", o.dp);
  f("tp", o.tp);
  f("pp", o.pp);
  f("zero", o.zero);
  f("microbatches", o.microbatches);
  f("schedule", o.schedule);
  f("virtual_stages", o.virtual_stages);
  f("sequence_parallel", o.sequence_parallel);
  f("bucket_mb", o.bucket_mb);
  f("grad_compression", o.grad_compression);
  f("compression_warmup", o.compression_warmup);
  f("offload", o.offload);
  f("comm_timeout", o.comm_timeout);
  f("save_timeout", o.save_timeout);
  f("dump_window", o.dump_window);
  f("straggler_every", o.straggler_every);
  f("trace_steps", o.trace_steps);
  f("sync_save", o.sync_save);
  f("checkpoint_format", o.checkpoint_format);
  f("checkpoint_snapshot", o.checkpoint_snapshot);
  f("checkpoint_chunk_mb", o.checkpoint_chunk_mb);
  f("checkpoint_every_local", o.checkpoint_every_local);
  f("local_dir", o.local_dir);
  f("tensorboard", o.tensorboard);
  f("recompute", o.recompute);
  f("recompute_layers", o.recompute_layers);
  f("sample_tokens", o.sample_tokens);
  f("sample_prompt", o.sample_prompt);
  f("sample_temperature", o.sample_temperature);
  f("sample_top_k", o.sample_top_k);
  f("num_samples", o.num_samples);
}

template <class T>
void read_value(const nlohmann::json& v, const std::string& key, T& out) {
  if constexpr (std::is_same_v<T, std::string>) {
    TESSERA_CHECK(v.is_string(), "config: '", key, "' must be a string, got ", v.dump());
  } else if constexpr (std::is_same_v<T, bool>) {
    TESSERA_CHECK(v.is_boolean(), "config: '", key, "' must be true or false, got ", v.dump());
  } else if constexpr (std::is_same_v<T, double>) {
    TESSERA_CHECK(v.is_number(), "config: '", key, "' must be a number, got ", v.dump());
  } else if constexpr (std::is_unsigned_v<T>) {
    TESSERA_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0),
                  "config: '", key, "' must be a non-negative integer, got ", v.dump());
  } else {
    TESSERA_CHECK(v.is_number_integer(), "config: '", key, "' must be an integer, got ", v.dump());
  }
  // An integer wider than the field was cut to it: --threads 99999999999 read 1215752191.
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    const bool fits = v.is_number_unsigned()
                          ? v.get<uint64_t>() <= uint64_t(std::numeric_limits<T>::max())
                          : std::in_range<T>(v.get<int64_t>());
    TESSERA_CHECK(fits, "config: '", key, "' must be in [", std::numeric_limits<T>::min(), ", ",
                  std::numeric_limits<T>::max(), "], got ", v.dump());
  }
  out = v.get<T>();
}

// Options that only some settings read. One set away from its default where nothing reads it
// is refused, naming what it needs and what the run has: before, --momentum under AdamW or
// --loss-scale-init under fp32 trained as if it were not there. A run's own config.json holds
// every field, those the run does not read at their defaults, so it passes.
void refuse_options_nothing_reads(const TrainOptions& o) {
  const TrainOptions d;
  struct Rule {
    const char* flag;
    bool set, read;
    std::string needs, has;
  };
  const std::string optimizer = "--optimizer " + o.optimizer;
  const std::string schedule = "--lr-schedule " + o.lr_schedule_kind;
  const std::string sampling = str_cat("--sample-tokens ", o.sample_tokens);
  const Rule rules[] = {
      {"momentum", o.momentum != d.momentum, o.optimizer == "sgd", "--optimizer sgd", optimizer},
      {"beta1", o.beta1 != d.beta1, o.optimizer == "adamw", "--optimizer adamw", optimizer},
      {"beta2", o.beta2 != d.beta2, o.optimizer == "adamw", "--optimizer adamw", optimizer},
      {"eps", o.eps != d.eps, o.optimizer == "adamw", "--optimizer adamw", optimizer},
      {"decay-fraction", o.decay_fraction != d.decay_fraction, o.lr_schedule_kind == "wsd",
       "--lr-schedule wsd", schedule},
      {"min-lr-ratio", o.min_lr_ratio != d.min_lr_ratio, o.lr_schedule_kind != "constant",
       "--lr-schedule cosine or wsd", schedule},
      {"loss-scale-init", o.loss_scale_init != d.loss_scale_init, o.precision == "fp16",
       "--precision fp16", "--precision " + o.precision},
      {"loss-scale-window", o.loss_scale_window != d.loss_scale_window, o.precision == "fp16",
       "--precision fp16", "--precision " + o.precision},
      {"eval-every", o.eval_every != d.eval_every, !o.val_data.empty(), "--val-data",
       "no --val-data"},
      {"eval-batches", o.eval_batches != d.eval_batches, !o.val_data.empty(), "--val-data",
       "no --val-data"},
      {"sample-prompt", o.sample_prompt != d.sample_prompt, o.sample_tokens > 0,
       "--sample-tokens > 0", sampling},
      {"sample-temperature", o.sample_temperature != d.sample_temperature, o.sample_tokens > 0,
       "--sample-tokens > 0", sampling},
      {"sample-top-k", o.sample_top_k != d.sample_top_k,
       o.sample_tokens > 0 && o.sample_temperature > 0,
       "--sample-tokens > 0 and --sample-temperature > 0",
       o.sample_tokens > 0 ? "--sample-temperature 0 (greedy)" : sampling},
      {"num-samples", o.num_samples != d.num_samples, o.sample_tokens > 0, "--sample-tokens > 0",
       sampling},
  };
  for (const Rule& r : rules)
    TESSERA_CHECK(!r.set || r.read, "train: --", r.flag, " applies only with ", r.needs,
                  "; this run has ", r.has, ", where nothing reads it");
}

}  // namespace

nn::GPTConfig TrainOptions::model_config() const {
  return nn::GPTConfig::from_json(model_overrides, nn::GPTConfig::preset(preset));
}

nn::Precision TrainOptions::precision_policy() const {
  return nn::parse_precision(precision);
}

nn::LossScalerOptions TrainOptions::loss_scaler() const {
  nn::LossScalerOptions s;
  s.init_scale = loss_scale_init;
  s.growth_interval = loss_scale_window;
  return s;
}

nn::Recompute TrainOptions::recompute_policy() const {
  return {nn::parse_recompute_mode(recompute), recompute_layers};
}

parallel::GradCompression TrainOptions::grad_compression_policy() const {
  parallel::GradCompression c = parallel::parse_grad_compression(grad_compression,
                                                                 "train: --grad-compression");
  c.warmup_steps = compression_warmup;
  return c;
}

nn::LRSchedule TrainOptions::lr_schedule() const {
  nn::LRSchedule s;
  s.kind = lr_schedule_kind == "constant" ? nn::ScheduleKind::constant
           : lr_schedule_kind == "wsd"    ? nn::ScheduleKind::wsd
                                          : nn::ScheduleKind::cosine;
  s.max_lr = lr;
  s.min_lr = lr * min_lr_ratio;
  s.warmup_steps = warmup_steps;
  s.total_steps = max_steps;
  s.decay_fraction = decay_fraction;
  return s;
}

int64_t TrainOptions::checkpoint_chunk_bytes() const {
  // 64 MiB: large enough that a chunk's fixed costs (a blocking copy, a write call) vanish
  // next to its bytes, small next to a GPU rank's state of gigabytes.
  return checkpoint_chunk_mb > 0 ? int64_t(checkpoint_chunk_mb * 1048576.0) : int64_t(64) << 20;
}

std::pair<int64_t, int64_t> TrainOptions::trace_range() const {
  if (trace_steps.empty()) return {0, -1};
  std::smatch m;
  const bool ok = std::regex_match(trace_steps, m, std::regex("([0-9]{1,15}):([0-9]{1,15})"));
  const int64_t a = ok ? std::stoll(m[1]) : 0, b = ok ? std::stoll(m[2]) : 0;
  TESSERA_CHECK(ok && a >= 1 && b >= a, "train: --trace-steps must be A:B with 1 <= A <= B (the ",
                "first and last step traced), got '", trace_steps, "'");
  return {a, b};
}

void TrainOptions::validate() const {
  auto positive = [](int64_t v, const char* name) {
    TESSERA_CHECK(v > 0, "train: --", name, " must be positive, got ", v);
  };
  auto non_negative = [](int64_t v, const char* name) {
    TESSERA_CHECK(v >= 0, "train: --", name, " must be >= 0, got ", v);
  };
  TESSERA_CHECK(!train_data.empty(),
                "train: --train-data is required (a shard file, folder or "
                "glob; make shards with `tessera prepare`)");
  positive(batch_size, "batch-size");
  positive(seq_len, "seq-len");
  positive(grad_accum, "grad-accum");
  positive(max_steps, "max-steps");
  positive(eval_batches, "eval-batches");
  positive(log_every, "log-every");
  non_negative(eval_every, "eval-every");
  non_negative(checkpoint_every, "checkpoint-every");
  non_negative(keep_checkpoints, "keep-checkpoints");
  non_negative(sample_tokens, "sample-tokens");
  positive(num_samples, "num-samples");
  TESSERA_CHECK(optimizer == "adamw" || optimizer == "sgd", "train: --optimizer must be adamw or ",
                "sgd, got '", optimizer, "'");
  TESSERA_CHECK(
      lr_schedule_kind == "cosine" || lr_schedule_kind == "wsd" || lr_schedule_kind == "constant",
      "train: --lr-schedule must be cosine, wsd or constant, got '", lr_schedule_kind, "'");
  positive(dp, "dp");
  positive(tp, "tp");
  positive(pp, "pp");
  TESSERA_CHECK(zero >= 0 && zero <= 3, "train: --zero must be 0, 1, 2 or 3, got ", zero);
  positive(microbatches, "microbatches");
  positive(virtual_stages, "virtual-stages");
  TESSERA_CHECK(
      schedule == "gpipe" || schedule == "1f1b" || schedule == "interleaved",
      "train: --schedule (the pipeline schedule) must be gpipe, 1f1b or interleaved, got '",
      schedule, "'",
      schedule == "cosine" || schedule == "wsd" || schedule == "constant"
          ? "; the learning-rate schedule is --lr-schedule"
          : "");
  TESSERA_CHECK(std::isfinite(comm_timeout) && comm_timeout > 0,
                "train: --comm-timeout must be a positive number of seconds, got ", comm_timeout);
  TESSERA_CHECK(std::isfinite(save_timeout) && save_timeout > 0,
                "train: --save-timeout must be a positive number of seconds, got ", save_timeout);
  TESSERA_CHECK(checkpoint_format == "auto" || checkpoint_format == "sharded" ||
                    checkpoint_format == "gathered",
                "train: --checkpoint-format must be auto, sharded or gathered, got '",
                checkpoint_format, "'");
  TESSERA_CHECK(checkpoint_snapshot == "auto" || checkpoint_snapshot == "copy" ||
                    checkpoint_snapshot == "stream" || checkpoint_snapshot == "staged",
                "train: --checkpoint-snapshot must be auto, copy, stream or staged, got '",
                checkpoint_snapshot, "'");
  TESSERA_CHECK(checkpoint_chunk_mb == 0 ||
                    (checkpoint_chunk_mb * 1048576.0 >= 8 && checkpoint_chunk_mb <= 1048576),
                "train: --checkpoint-chunk-mb must be between 8 bytes and 1 TiB (0: 64 MiB), got ",
                checkpoint_chunk_mb);
  TESSERA_CHECK(checkpoint_chunk_mb == 0 || (checkpoint_snapshot == "stream" && device != "cpu"),
                "train: --checkpoint-chunk-mb sizes the chunk a streamed snapshot reads a GPU's ",
                "state through; it needs --checkpoint-snapshot stream and a GPU device (",
                "--checkpoint-snapshot is ", checkpoint_snapshot, ", --device ", device, ")");
  TESSERA_CHECK(checkpoint_snapshot == "auto" || checkpoint_format != "gathered" ||
                    checkpoint_every_local > 0,
                "train: --checkpoint-snapshot applies to sharded checkpoints and the node-local ",
                "tier; --checkpoint-format is gathered and --checkpoint-every-local 0");
  TESSERA_CHECK(checkpoint_every_local >= 0, "train: --checkpoint-every-local must be >= 0 (0: ",
                "off), got ", checkpoint_every_local);
  TESSERA_CHECK(local_dir.empty() || checkpoint_every_local > 0, "train: --local-dir is where ",
                "--checkpoint-every-local writes; that is 0 (off)");
  const auto [trace_first, trace_last] = trace_range();  // throws if malformed
  TESSERA_CHECK(trace_first <= max_steps, "train: --trace-steps ", trace_steps, " starts after ",
                "the last step (--max-steps ", max_steps, ")");
  (void)trace_last;
  TESSERA_CHECK(straggler_every >= 0, "train: --straggler-every must be >= 0 steps (0: off), got ",
                straggler_every);
  TESSERA_CHECK(std::isfinite(dump_window) && dump_window >= 0 && dump_window <= 3600,
                "train: --dump-window must be between 0 and 3600 seconds, got ", dump_window);
  TESSERA_CHECK(std::isfinite(bucket_mb) && bucket_mb >= 0,
                "train: --bucket-mb must be >= 0 (0: one bucket per layer), got ", bucket_mb);
  const parallel::GradCompression compression = grad_compression_policy();  // throws if bad
  TESSERA_CHECK(compression_warmup >= 0, "train: --compression-warmup must be >= 0 steps, got ",
                compression_warmup);
  TESSERA_CHECK(compression_warmup == 0 || compression.kind == parallel::CompressionKind::powersgd,
                "train: --compression-warmup ", compression_warmup, " counts the uncompressed ",
                "steps before powersgd; --grad-compression is '", grad_compression, "'");
  TESSERA_CHECK(offload == "none" || offload == "optimizer",
                "train: --offload must be none or optimizer, got '", offload, "'");
  TESSERA_CHECK(offload == "none" || optimizer == "adamw", "train: --offload optimizer moves ",
                "the sharded AdamW to host memory, so it needs --optimizer adamw, got '", optimizer,
                "'");
  TESSERA_CHECK(recompute == "none" || recompute == "selective" || recompute == "full",
                "train: --recompute must be none, selective or full, got '", recompute, "'");
  TESSERA_CHECK(recompute_layers >= -1, "train: --recompute-layers must be -1 (every layer) ",
                "or at least 0, got ", recompute_layers);
  TESSERA_CHECK(recompute_layers == -1 || recompute == "full", "train: --recompute-layers ",
                recompute_layers, " counts the layers of full recomputation; --recompute is '",
                recompute, "'");
  std::error_code unreadable;  // a path that cannot be examined counts as no directory
  TESSERA_CHECK(resume == "auto" || resume == "never" ||
                    std::filesystem::is_directory(resume, unreadable),
                "train: --resume must be auto, never or a checkpoint directory, got '", resume,
                "' (no such directory)");
  TESSERA_CHECK(device == "cpu" || device == "cuda" || device == "cuda-sim",
                "train: --device must be cpu, cuda or cuda-sim, got '", device, "'");
  TESSERA_CHECK(precision == "fp32" || precision == "bf16" || precision == "fp16",
                "train: --precision must be fp32, bf16 or fp16, got '", precision, "'");
  // The scale multiplies the fp32 loss: past 2^127 it is infinite there, and the scaler would
  // skip a step per halving (1e300: about 870 steps) before the first update.
  TESSERA_CHECK(
      std::isfinite(loss_scale_init) && loss_scale_init >= 1 && loss_scale_init <= 0x1p127,
      "train: --loss-scale-init must be in [1, 2^127], got ", loss_scale_init);
  positive(loss_scale_window, "loss-scale-window");
  if (stochastic_rounding) {
    TESSERA_CHECK(precision == "bf16", "train: --stochastic-rounding rounds the fp32 master ",
                  "weights to bf16, so it needs --precision bf16, got '", precision, "'");
    TESSERA_CHECK(optimizer == "adamw", "train: --stochastic-rounding is done by the fused AdamW ",
                  "update, so it needs --optimizer adamw, got '", optimizer, "'");
    TESSERA_CHECK(!parallel(), "train: --stochastic-rounding is for the single-process trainer; ",
                  "this layout (dp ", dp, ", tp ", tp, ", pp ", pp, ") runs the parallel one");
  }
  TESSERA_CHECK(threads >= 0 && threads <= kMaxThreads, "train: --threads must be in [0, ",
                kMaxThreads, "] (0: all cores), got ", threads);
  // The optimizers step in float32: a larger lr is inf there (1e300 made every norm NaN).
  TESSERA_CHECK(lr > 0 && lr <= std::numeric_limits<float>::max(),
                "train: --lr must be positive and within float32's range, got ", lr);
  // Checked here whatever the optimizer and schedule (a config file carries every field), and
  // before training: the sampling options were checked only when the end-of-run sample began.
  TESSERA_CHECK(std::isfinite(momentum) && momentum >= 0 && momentum < 1,
                "train: --momentum (sgd) must be in [0, 1), got ", momentum);
  TESSERA_CHECK(std::isfinite(decay_fraction) && decay_fraction > 0 && decay_fraction <= 1,
                "train: --decay-fraction (wsd) must be in (0, 1], got ", decay_fraction);
  TESSERA_CHECK(std::isfinite(sample_temperature) && sample_temperature >= 0,
                "train: --sample-temperature must be finite and >= 0 (0: greedy), got ",
                sample_temperature);
  TESSERA_CHECK(sample_top_k >= 0, "train: --sample-top-k must be >= 0 (0: all tokens), got ",
                sample_top_k);
  TESSERA_CHECK(min_lr_ratio >= 0 && min_lr_ratio <= 1, "train: --min-lr-ratio must be in [0, 1], ",
                "got ", min_lr_ratio);
  TESSERA_CHECK(peak_gflops >= 0, "train: --peak-gflops must be >= 0, got ", peak_gflops);
  refuse_options_nothing_reads(*this);
  model_config().validate();
  TESSERA_CHECK(seq_len <= model_config().block_size, "train: --seq-len ", seq_len,
                " exceeds the model's block_size ", model_config().block_size);
  lr_schedule().validate();
  // Every other number must be finite too: checkpoints record the options as JSON, which holds no
  // inf or NaN, so --peak-gflops inf trained until its first save failed.
  for_each_field(*this, [](const char* key, const auto& value) {
    if constexpr (std::is_floating_point_v<std::decay_t<decltype(value)>>) {
      std::string flag = key;
      std::replace(flag.begin(), flag.end(), '_', '-');
      TESSERA_CHECK(std::isfinite(value), "train: --", flag, " must be a finite number, got ",
                    value);
    }
  });
}

nlohmann::json TrainOptions::to_json() const {
  nlohmann::json j;
  nlohmann::json model = model_overrides;
  model["preset"] = preset;
  j["model"] = model;
  for_each_field(*this, [&](const char* key, const auto& value) { j[key] = value; });
  return j;
}

nlohmann::json TrainOptions::to_config_file() const {
  nlohmann::json j = to_json();
  j["config_version"] = kConfigVersion;
  return j;
}

void TrainOptions::update_from_json(const nlohmann::json& j) {
  TESSERA_CHECK(j.is_object(), "config: expected a JSON object, got ", j.dump());
  for (const auto& item : j.items()) {
    // Named references, not a binding: the lambdas capture them (clang < 16, the fuzz build's
    // compiler, cannot capture bindings; gpt_config.cpp and lr_schedule.cpp do the same).
    const std::string& key = item.key();
    const nlohmann::json& v = item.value();
    if (key == "config_version") {
      check_format_version("config: 'config_version'", "tessera-config",
                           v.is_number_integer() ? std::optional(v.get<int64_t>()) : std::nullopt,
                           v.dump(), kConfigVersion);
      continue;
    }
    if (key == "model") {
      TESSERA_CHECK(v.is_object(), "config: 'model' must be an object, got ", v.dump());
      for (const auto& [mkey, mv] : v.items()) {
        if (mkey == "preset") {
          read_value(mv, "model.preset", preset);
        } else {
          model_overrides[mkey] = mv;
        }
      }
      model_config();  // an unknown preset or model key fails here, naming it
      continue;
    }
    bool found = false;
    for_each_field(*this, [&](const char* name, auto& member) {
      if (key == name) {
        read_value(v, key, member);
        found = true;
      }
    });
    TESSERA_CHECK(found, "config: unknown key '", key, "'");
  }
}

}  // namespace tessera::train
