// `tessera train`: every TrainOptions field is a flag (--batch-size for batch_size, ...);
// --config loads a JSON file first and flags given on the command line override it. The
// training itself is train::Trainer's (tessera/train/trainer.h): this file turns flags into
// options, runs Trainer::fit, prints the samples, and maps failures to one line and an exit
// status (2: a device or layout that cannot run; 1: any other error; 124: a collective timed
// out or failed, parallel::CommError; 130: stopped by Ctrl-C; 75: preempted by SIGTERM or
// SIGUSR1, a checkpoint saved: cli/stop_signals.h).

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <map>

#include "cli/commands.h"
#include "cli/diagnostics_dump.h"
#include "cli/exit_status.h"
#include "cli/fault_injection.h"
#include "cli/stop_signals.h"
#include "tessera/core/error.h"
#include "tessera/core/file_io.h"
#include "tessera/core/json_depth.h"
#include "tessera/core/ops/creation.h"
#include "tessera/cuda/cuda.h"
#include "tessera/train/detail/device.h"
#include "tessera/train/preflight.h"
#include "tessera/train/trainer.h"
#include "tessera/train/world.h"
#if TESSERA_HAS_MPI
#include "tessera/parallel/comm/mpi_communicator.h"
#endif

namespace tessera::cli {

int& exit_code() {
  static int code = 0;
  return code;
}

namespace {

const std::map<std::string, std::string>& flag_help() {
  static const std::map<std::string, std::string> help = {
      {"init_from",
       "start from these weights: Hugging Face GPT-2 or Llama safetensors (file or folder; "
       "Llama's are read by range, each rank only what it holds) or an llm.c .bin"},
      {"train_data", "training shards: a .bin file, a folder or a glob (see tessera prepare)"},
      {"val_data", "validation shards (evaluated every --eval-every steps and at the end)"},
      {"tokenizer", "byte, a tokenizer .json from `tessera tokenizer train`, or a GPT-2 folder"},
      {"batch_size", "sequences per micro-batch (B)"},
      {"seq_len", "tokens per sequence (T)"},
      {"grad_accum", "micro-batches per optimizer step"},
      {"max_steps", "optimizer steps to train for"},
      {"optimizer", "adamw or sgd"},
      {"lr", "peak learning rate"},
      {"min_lr_ratio", "final lr as a fraction of --lr (cosine, wsd)"},
      {"warmup_steps", "linear warmup steps"},
      {"lr_schedule", "cosine, wsd or constant (after warmup)"},
      {"decay_fraction", "wsd: share of steps spent decaying"},
      {"weight_decay", "decoupled weight decay on matrices (none on biases, norms, 1-D)"},
      {"beta1", "AdamW beta1"},
      {"beta2", "AdamW beta2"},
      {"eps", "AdamW epsilon"},
      {"momentum", "SGD momentum"},
      {"grad_clip", "clip the global gradient norm to this (<= 0: off)"},
      {"eval_every", "validation every N steps (0: at the end only)"},
      {"eval_batches", "validation batches per evaluation"},
      {"log_every", "print every N steps (the JSONL log gets every step)"},
      {"checkpoint_every", "checkpoint every N steps (0: at the end only)"},
      {"keep_checkpoints", "checkpoints to keep (0: all)"},
      {"run_dir", "where config.json, metrics.jsonl and checkpoints/ go"},
      {"resume",
       "auto (continue from the run's newest checkpoint that loads, passing over "
       "corrupt ones), never, or a checkpoint directory"},
      {"tensorboard",
       "write TensorBoard event files of every step's metrics to this folder (tensorboard "
       "--logdir it)"},
      {"seed", "seed of the data order and dropout masks"},
      {"threads", "CPU threads (0: all cores)"},
      {"device",
       "cpu, cuda (this rank's GPU: local rank mod the visible GPUs; needs the CUDA backend "
       "and a GPU) or cuda-sim (the CUDA backend on the kernel simulator: the device path "
       "without a GPU, slowly; tiny models only)"},
      {"precision",
       "fp32, bf16 (bf16 weights and activations, fp32 master weights and AdamW state) or fp16 "
       "(as bf16, with dynamic loss scaling)"},
      {"loss_scale_init", "fp16: the initial loss scale"},
      {"loss_scale_window", "fp16: clean steps before the loss scale doubles"},
      {"stochastic_rounding", "bf16: round the fp32 master weights to bf16 stochastically"},
      {"peak_gflops",
       "one rank's peak for MFU, GFLOP/s: one GPU's dense peak for the precision "
       "(0: this CPU's nominal fp32 peak)"},
      {"dp", "data-parallel ranks (run as mpiexec -n dp*tp*pp tessera train ...)"},
      {"tp", "tensor-parallel ranks (divides n_head, n_kv_head and the MLP width)"},
      {"pp", "pipeline stages (pp * virtual-stages divides n_layer)"},
      {"zero",
       "ZeRO stage over the dp group: 0, 1 (optimizer state), 2 (+ gradients), 3 "
       "(+ parameters)"},
      {"microbatches", "pipeline micro-batches per dp rank and step"},
      {"schedule", "pipeline: gpipe, 1f1b or interleaved (with --virtual-stages > 1)"},
      {"virtual_stages", "model chunks per pipeline rank (interleaved 1F1B)"},
      {"sequence_parallel", "shard the activations outside attention and MLP over tp"},
      {"bucket_mb",
       "data-parallel gradient buckets of this many MiB, ZeRO 0-2 (0: one bucket per layer, the "
       "layout every ZeRO stage shares)"},
      {"grad_compression",
       "what the data-parallel reduction sends: none, bf16 (bf16 on the wire, summed in fp32) "
       "or powersgd:R (rank-R PowerSGD with error feedback, ZeRO 0-1)"},
      {"compression_warmup", "powersgd: uncompressed optimizer steps before compressing"},
      {"offload",
       "none, or optimizer: fp32 master weights, AdamW state and update in host memory "
       "(ZeRO-Offload; --device cuda, bf16 or fp16, ZeRO 1-3)"},
      {"comm_timeout",
       "seconds a collective may wait before the job ends with exit status 124 (several "
       "ranks; keep it plus --dump-window below a supervisor's heartbeat timeout)"},
      {"save_timeout",
       "seconds the ranks wait for a checkpoint save to finish (it replaces --comm-timeout "
       "for that wait)"},
      {"dump_window",
       "seconds a rank that ends the job after a failure waits for every rank's flight "
       "recorder dump in <run-dir>/flight (several ranks; tessera diagnose reads them)"},
      {"straggler_every",
       "every N steps name a rank whose busy time in data loading or compute is 1.5x the "
       "ranks' median for 2 intervals running (several ranks; 0: off)"},
      {"trace_steps",
       "A:B: write a Chrome/Perfetto trace of steps A to B per rank into <run-dir>/trace "
       "(tessera trace merge joins them and draws the SVG timeline)"},
      {"sync_save",
       "write each checkpoint before training goes on (default: it is written in the "
       "background; the loop waits only for a copy of the state)"},
      {"checkpoint_format",
       "sharded (every rank writes its own part; no rank gathers the model), gathered (rank 0 "
       "writes the single-process format) or auto (sharded on several ranks)"},
      {"checkpoint_snapshot",
       "sharded saves: copy (the loop waits while its part is copied to memory), stream (no "
       "copy: the write reads the live state, a GPU's through one page-locked chunk, and the "
       "next update waits until it is written), staged (the part is downloaded on a side "
       "stream into page-locked memory from a GPU, or copied by the writer thread on the CPU, "
       "while the loop goes on; the next update waits for it) "
       "or auto (stream on the CPU, staged on a GPU)"},
      {"checkpoint_chunk_mb",
       "with --checkpoint-snapshot stream on a GPU: the page-locked chunk (MiB) the writer "
       "reads the state through, the host memory a save holds beyond the state (0: 64 MiB; "
       "never more than the largest tensor)"},
      {"checkpoint_every_local",
       "the node-local tier: every N steps each rank writes its own state to --local-dir, "
       "keeping the newest; a restart on the same layout and hosts resumes from it (0: off)"},
      {"local_dir",
       "the node-local tier's folder (default: $TMPDIR or /tmp, then "
       "tessera-local/<hash of --run-dir>)"},
      {"recompute",
       "activation recomputation: none, selective (the MLP activation, elementwise) or full "
       "(whole blocks; see --recompute-layers)"},
      {"recompute_layers",
       "full recomputation: blocks per pipeline stage, from its first (-1: all)"},
      {"sample_tokens", "tokens to sample after training (0: none)"},
      {"sample_prompt", "prompt for the samples"},
      {"sample_temperature", "sampling temperature"},
      {"sample_top_k", "sampling top-k (0: all)"},
      {"num_samples", "samples to print"},
  };
  return help;
}

std::string flag_name(const std::string& key) {
  std::string s = "--" + key;
  for (char& c : s)
    if (c == '_') c = '-';
  return s;
}

// Converts a flag's text to the JSON type its default has.
nlohmann::json typed_value(const std::string& key, const std::string& text,
                           const nlohmann::json& like) {
  try {
    size_t used = 0;
    if (like.is_number_integer() || like.is_number_unsigned()) {
      long long v = std::stoll(text, &used);
      if (used == text.size()) return v;
    } else if (like.is_number_float()) {
      double v = std::stod(text, &used);
      if (used == text.size()) return v;
    } else {
      return text;
    }
  } catch (const std::exception&) {
  }
  detail::throw_error("train: ", flag_name(key), " expects ",
                      like.is_number_float() ? "a number" : "an integer", ", got '", text, "'");
}

using train::TrainOptions;

// Once training runs, a rank may fail alone (a file it writes, a collective timing out) while
// the others wait on it: say which rank in one write (so that ranks failing at once print whole
// lines), and end the whole job.
[[noreturn]] void abort_job(int rank, const std::string& what, int status,
                            const std::string& note = "") {
  std::string line = str_cat("tessera train: rank ", rank, ": ", what, "\n");
  if (!note.empty()) line += str_cat("tessera train: rank ", rank, ": ", note, "\n");
  std::cerr.write(line.data(), std::streamsize(line.size()));
  std::cerr.flush();
#if TESSERA_HAS_MPI
  parallel::abort_mpi_job(status);
#endif
  std::_Exit(status);
}

// What the abort line adds on several ranks: where the flight recorder dumps are, and which
// ranks did not dump within the window.
std::string flight_note(const TrainOptions& o, const std::vector<int>& missing) {
  std::string note = str_cat("flight recorder dumps in ", train::flight_dir(o));
  if (!missing.empty()) {
    note += ", none within " + str_cat(o.dump_window) + " s from rank";
    for (size_t i = 0; i < missing.size(); ++i) note += (i ? ", " : " ") + std::to_string(missing[i]);
  }
  return note + " (tessera diagnose " + o.run_dir + ")";
}

// The stop signal every rank ends on: the highest any rank received (SIGTERM and SIGUSR1,
// preemption, over SIGINT). Collective; every rank stopped after the same step.
int agreed_stop_signal(parallel::Communicator& world) {
  Tensor sig = from_vector<int64_t>({int64_t(StopSignals::first_signal())}, Shape{1});
  if (world.size() > 1) world.all_reduce(sig, parallel::CommOp::max);
  return int(sig.item<int64_t>());
}

// Trains with `options` and prints the samples; returns the exit status.
int run_training(const TrainOptions& options, const StopSignals& stop) {
  // The simulated device: what `--device cuda-sim` trains on (the CUDA backend with every
  // kernel in the CPU simulator), to try the device path on a machine without a GPU.
  if (options.device == "cuda-sim") cuda::use_simulated_device();
  // Up to the first step every rank reads the same options and files, so a setup error is
  // the same on every rank: rank 0 reports it, the others only fail.
  const bool reports = train::world_rank() == 0;
  std::unique_ptr<train::Trainer> trainer;
  try {
    // The world on the options' device: MPI's for the CPU, NCCL's for CUDA (several ranks).
    trainer = std::make_unique<train::Trainer>(options);
  } catch (const train::DeviceUnavailable& e) {
    if (reports) std::cerr << e.what() << "\n";
    return kUnrunnableExit;  // not a usage error of the run itself: the machine lacks it
  } catch (const train::LayoutError& e) {
    if (reports) std::cerr << e.what() << "\n";
    return kUnrunnableExit;
  } catch (const Error&) {
    if (reports) throw;
    return 1;
  }
  // A planted slowdown for the straggler tests (cli/fault_injection.h), under launch or not.
  if (const FaultInjection fault(trainer->world().rank(), trainer->world().size());
      const FaultInjection::Delay* d = fault.planted_delay())
    trainer->plant_delay(d->phase, d->ms, d->from_step);
  // A live progress line on a terminal; plain lines only into a pipe or a file, or with
  // TERM=dumb (an editor's shell, which does not honour the erase-line sequence).
  const char* term = std::getenv("TERM");
  trainer->set_live_progress(reports && isatty(STDOUT_FILENO) == 1 &&
                             !(term != nullptr && std::string(term) == "dumb"));
  // Under `tessera launch`: beats for the supervisor, and the SIGUSR2 dump says the last one.
  const DiagnosticsDump dump;
  std::shared_ptr<train::Heartbeat> beats;
  if (const char* dir = std::getenv("TESSERA_HEARTBEAT_DIR"); dir != nullptr && *dir != '\0') {
    auto heartbeat = std::make_shared<train::Heartbeat>(dir, trainer->world().rank());
    const FaultInjection fault(trainer->world().rank(), trainer->world().size());
    heartbeat->on_beat([fault](const train::Heartbeat& h) {
      DiagnosticsDump::set_status(h.last());
      fault.after_beat(h.phase(), h.step(), h.start_step());
    });
    beats = heartbeat;
    trainer->set_heartbeat(std::move(heartbeat));
    // The pre-flight probe, at every (re)start under the supervisor.
    if (const char* pre = std::getenv("TESSERA_PREFLIGHT"); pre == nullptr || std::string(pre) != "0") {
      train::PreflightOptions probe;
      probe.planted_delay_ms = fault.preflight_delay_ms();
      const train::PreflightReport report =
          train::run_preflight(trainer->world(), trainer->device(), probe);
      if (reports) {
        std::cout << report.describe(probe.slow_factor) << std::flush;
        write_file_atomic(options.run_dir + "/preflight.json", report.to_json().dump(2) + "\n");
      }
    }
  }
  // The last beat says this rank's exit status: a launcher's own status is not the ranks' after
  // it forwarded a signal (cli/stop_signals.h), so the supervisor reads this one.
  auto finish = [&](int status) {
    if (beats) beats->finish(status);
    return status;
  };
  train::FitResult r;
  try {
    r = trainer->fit(&std::cout, stop.requested());
    if (!r.interrupted && options.sample_tokens > 0) {
      const nn::StateDict full = trainer->full_state();
      if (reports) {
        nn::GPT model(trainer->model_config());
        model.load_state_dict(full);
        train::print_samples(model, trainer->model_config(), trainer->tokenizer(), options,
                             Device::cpu(), std::cout);
      }
    }
  } catch (const parallel::CommError& e) {
    // The group is broken (comm_health.h): no collective can end the job cleanly. The failing
    // call dumped this rank's flight recorder and asked the others to; they get the window.
    const std::vector<int> missing =
        trainer->dump_flight_and_wait(e.what(), options.dump_window);
    abort_job(trainer->world().rank(), e.what(), finish(kCommFailedExit),
              flight_note(options, missing));
  } catch (const std::exception& e) {
    finish(kTrainFailedExit);
    if (trainer->world().size() > 1) {
      const std::vector<int> missing =
          trainer->dump_flight_and_wait(e.what(), options.dump_window);
      abort_job(trainer->world().rank(), e.what(), 1, flight_note(options, missing));
    }
    throw;
  }
  if (!r.interrupted) return finish(0);
  const int signal = agreed_stop_signal(trainer->world());
  const int status = stopped_exit_status(signal);
  if (reports)
    std::cout << "stopped by " << (signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : "SIGUSR1")
              << ": exit status " << status
              << (status == kPreemptedExit ? " (preempted; the same command resumes)" : "") << "\n"
              << std::flush;
  return finish(status);
}

struct TrainFlags {
  std::string config_path, preset, model_json;
  std::map<std::string, std::string> values;
  std::map<std::string, bool> switches;  // boolean options: flags without a value
};

}  // namespace

void add_train_command(CLI::App& app) {
  auto flags = std::make_shared<TrainFlags>();
  CLI::App* cmd = app.add_subcommand("train", "Train a GPT model (Ctrl-C checkpoints and stops)");
  cmd->add_option("--config", flags->config_path, "JSON file of options; flags override it");
  cmd->add_option("--preset", flags->preset,
                  "model preset: gpt2-tiny, gpt2-d12, gpt2-d24, gpt2-d36, gpt2-d48, llama-tiny, "
                  "llama-d12");
  cmd->add_option("--model", flags->model_json,
                  "JSON object of model config overrides, e.g. '{\"n_layer\": 6}'");
  nlohmann::json defaults = TrainOptions().to_json();
  for (const auto& [key, value] : defaults.items()) {
    if (key == "model") continue;
    auto it = flag_help().find(key);
    const std::string help = it != flag_help().end() ? it->second : "";
    if (value.is_boolean()) {
      cmd->add_flag(flag_name(key), flags->switches[key], help);
    } else {
      cmd->add_option(flag_name(key), flags->values[key], help);
    }
  }
  cmd->callback([flags, cmd, defaults] {
    TrainOptions options;
    if (!flags->config_path.empty()) {
      const std::string text = read_text_file(flags->config_path);
      check_json_depth(text, flags->config_path);  // deep nesting overflows the stack later
      nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
      TESSERA_CHECK(!j.is_discarded(), "train: ", flags->config_path, " is not valid JSON");
      options.update_from_json(j);
    }
    nlohmann::json given = nlohmann::json::object();
    for (const auto& [key, text] : flags->values)
      if (cmd->count(flag_name(key)) > 0) given[key] = typed_value(key, text, defaults[key]);
    for (const auto& [key, on] : flags->switches)
      if (cmd->count(flag_name(key)) > 0) given[key] = on;
    if (!flags->preset.empty() || !flags->model_json.empty()) {
      nlohmann::json model = nlohmann::json::object();
      if (!flags->model_json.empty()) {
        check_json_depth(flags->model_json, "train: --model");
        model = nlohmann::json::parse(flags->model_json, nullptr, false);
        TESSERA_CHECK(model.is_object(), "train: --model must be a JSON object, got '",
                      flags->model_json, "'");
      }
      if (!flags->preset.empty()) model["preset"] = flags->preset;
      given["model"] = model;
    }
    options.update_from_json(given);

    const StopSignals stop;
    exit_code() = run_training(options, stop);
  });
}

}  // namespace tessera::cli
