// `tessera plan`: which layouts of a model fit a cluster, how fast each runs, what the run
// costs and how often it should checkpoint (tessera/plan/planner.h; docs/planning.md).
//
//   $ tessera plan --model llama-70b-like --gpus 1024 --gpu h100 --tokens 2T
//   $ tessera plan --model config.json --gpu h100,a100-80gb --gpus 512,1024 --rank-by cost
//   $ tessera plan --model gpt3-175b --gpus 1024 --gpu a100-80gb --calibrate runs/x
//
// Sizes take K, M, B (or G) and T suffixes, powers of 1000 (--tokens 300B), or Ki, Mi, Gi, Ti,
// powers of 1024 (--batch-tokens 4Mi, 2^22 tokens).

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string_view>

#include "cli/commands.h"
#include "tessera/core/error.h"
#include "tessera/core/file_io.h"
#include "tessera/plan/calibration.h"
#include "tessera/plan/economics.h"
#include "tessera/plan/plan_svg.h"
#include "tessera/plan/planner.h"
#include "tessera/plan/report.h"
#include "tessera/plan/validation.h"

namespace tessera::cli {

namespace {

struct PlanFlags {
  std::string model;
  int64_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, ffn = 0, vocab = 0;
  int64_t seq_len = 0, global_batch = 0;
  std::string batch_tokens, tokens;
  std::string gpu = "h100", gpus = "8", gpu_table, precision = "bf16";
  int gpus_per_node = 0;
  double price = -1;
  std::string rank_by = "time";
  int top = 10;
  std::string json, svg;
  int tp = 0, pp = 0, dp = 0, virtual_stages = 0, micro_batch = 0, zero = -1;
  std::string recompute = "none,selective,full";
  bool no_sequence_parallel = false, offload = false, fp8 = false;
  double reserve_gb = 2.5, usable_memory = 0.9;
  double node_failure_rate = 0.05, save_seconds = -1, restart_seconds = -1;
  double storage_gbps = 2;
  bool validate = false;
  std::string calibrate;
  CLI::Option* gpu_option = nullptr;  // to tell a given --gpu from the default
  CLI::Option* precision_option = nullptr;
  CLI::Option* reserve_option = nullptr;
  const CLI::App* command = nullptr;  // to tell which flags were given
};

// "300B" -> 3e11; "4M" -> 4e6; "2048" -> 2048. Throws naming the flag.
double parse_size(const std::string& text, const char* flag) {
  TESSERA_CHECK(!text.empty(), "plan: ", flag, " is empty");
  double scale = 1;
  std::string digits = text;
  // Ki, Mi, Gi, Ti: powers of 1024 (a "4M-token batch" in papers is often 4 Mi = 2^22).
  const bool binary = text.size() >= 2 && (text.back() == 'i' || text.back() == 'I');
  if (binary) digits.pop_back();
  if (!digits.empty()) {
    const double base = binary ? 1024.0 : 1000.0;
    switch (std::toupper(static_cast<unsigned char>(digits.back()))) {
      case 'K':
        scale = base;
        break;
      case 'M':
        scale = base * base;
        break;
      case 'B':
      case 'G':
        scale = base * base * base;
        break;
      case 'T':
        scale = base * base * base * base;
        break;
      default:
        break;
    }
    if (scale != 1) digits.pop_back();
  }
  if (binary && scale == 1) digits.clear();  // "5i": not a size
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(digits, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  TESSERA_CHECK(used == digits.size() && used > 0 && std::isfinite(v) && v >= 0, "plan: ", flag,
                " '", text,
                "' is not a size (a number with an optional K, M, B, T or Ki, Mi, Gi, Ti)");
  return v * scale;
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// The first flag given on the command line that is not one of `allowed`, or "".
std::string given_besides(const PlanFlags& f, std::initializer_list<std::string_view> allowed) {
  for (const CLI::Option* o : f.command->get_options()) {
    if (o->count() == 0) continue;
    const std::string name = o->get_name(/*positional=*/false, /*all_options=*/false);
    if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) return name;
  }
  return "";
}

// Flags that cannot apply to what was asked, and sizes given out of range, before any search.
// Before, --validate ignored every model and cluster flag, --tp -1 or --seq-len -5 searched as
// if not given, --offload under --zero 0 tried no offloaded layout, and --top 0 printed a
// table header and no row.
void check_plan_flags(const PlanFlags& f) {
  if (f.validate) {
    const std::string other = given_besides(f, {"--validate", "--gpu-table"});
    TESSERA_CHECK(other.empty(), "plan: ", other, " does not apply to --validate (it prints the ",
                  "published runs' report; only --gpu-table changes it)");
    return;
  }
  if (!f.calibrate.empty() && f.model.empty()) {
    const std::string other = given_besides(f, {"--calibrate", "--gpu", "--gpu-table"});
    TESSERA_CHECK(other.empty(), "plan: ", other, " applies to a plan, and --calibrate without ",
                  "--model prints the calibration alone; add --model to plan on it");
    return;
  }
  struct Size {
    const char* flag;
    int64_t value;
    const char* otherwise;  // what leaving it out means
  };
  const char* model = "the model's";
  const char* every = "every size";
  const Size sizes[] = {{"--layers", f.layers, model},
                        {"--hidden", f.hidden, model},
                        {"--heads", f.heads, model},
                        {"--kv-heads", f.kv_heads, model},
                        {"--ffn", f.ffn, model},
                        {"--vocab", f.vocab, model},
                        {"--seq-len", f.seq_len, "the model's context, at most 4096"},
                        {"--global-batch", f.global_batch, "4M tokens"},
                        {"--tp", f.tp, every},
                        {"--pp", f.pp, every},
                        {"--dp", f.dp, every},
                        {"--virtual-stages", f.virtual_stages, every},
                        {"--micro-batch", f.micro_batch, every},
                        {"--gpus-per-node", f.gpus_per_node, "the GPU table's"},
                        {"--top", f.top, "10 rows"}};
  for (const Size& s : sizes)
    TESSERA_CHECK(f.command->get_option(s.flag)->count() == 0 || s.value >= 1, "plan: ", s.flag,
                  " must be at least 1 (leave it out for ", s.otherwise, "), got ", s.value);
  TESSERA_CHECK(!f.offload || f.zero != 0, "plan: --offload moves the sharded optimizer to the ",
                "host, so it needs ZeRO 1-3; --zero 0 leaves no layout to offload");
  TESSERA_CHECK(f.tokens.empty() || parse_size(f.tokens, "--tokens") > 0,
                "plan: --tokens must be positive (leave it out for no days or cost), got ",
                f.tokens);
}

plan::Workload workload_of(const PlanFlags& f) {
  TESSERA_CHECK(!f.model.empty(), "plan: --model is required (a preset or a config.json)");
  plan::Workload w;
  w.model_name = f.model;
  w.model = std::filesystem::is_regular_file(f.model) ? plan::model_from_hf_config(f.model)
                                                      : plan::plan_model(f.model);
  // Dimensions given on the command line replace the preset's.
  if (f.layers) w.model.n_layer = f.layers;
  if (f.hidden) w.model.n_embd = f.hidden;
  if (f.heads) w.model.n_head = w.model.n_kv_head = f.heads;
  if (f.kv_heads) w.model.n_kv_head = f.kv_heads;
  if (f.ffn) w.model.ffn_hidden = f.ffn;
  if (f.vocab) w.model.vocab_size = f.vocab;
  TESSERA_CHECK(w.model.n_embd % w.model.n_head == 0, "plan: the width ", w.model.n_embd,
                " is not a multiple of the ", w.model.n_head, " heads");
  TESSERA_CHECK(w.model.n_head % w.model.n_kv_head == 0, "plan: ", w.model.n_head,
                " heads are not a multiple of ", w.model.n_kv_head, " kv heads");
  w.seq_len = f.seq_len > 0 ? f.seq_len : std::min<int64_t>(w.model.block_size, 4096);
  if (f.seq_len > w.model.block_size) {
    // A longer context than the model's: planned as asked, and said, since a learned position
    // table grows with it (a GPT-2 at 1024 cannot be trained at 4096 without that).
    const int64_t context = w.model.block_size, before = plan::parameter_count(w.model);
    w.model.block_size = f.seq_len;
    const int64_t added = plan::parameter_count(w.model) - before;
    std::cout << "plan: --seq-len " << f.seq_len << " is past " << f.model << "'s context of "
              << context << "; planned with the context extended to " << f.seq_len
              << (w.model.position == nn::PositionKind::learned
                      ? str_cat(" (learned positions: ", added, " more parameters)")
                      : std::string(" (rotary positions: no parameter added)"))
              << "\n";
  }
  TESSERA_CHECK(f.global_batch == 0 || f.batch_tokens.empty(),
                "plan: give the global batch once: --global-batch (sequences) or --batch-tokens");
  if (!f.batch_tokens.empty()) {
    const double tokens = parse_size(f.batch_tokens, "--batch-tokens");
    const double seqs = tokens / double(w.seq_len);
    TESSERA_CHECK(seqs >= 1 && std::fabs(seqs - std::round(seqs)) < 1e-9, "plan: --batch-tokens ",
                  f.batch_tokens, " is not a whole number of ", w.seq_len, "-token sequences");
    TESSERA_CHECK(seqs <= double(int64_t(1) << 30), "plan: --batch-tokens ", f.batch_tokens,
                  " is more than 2^30 sequences of ", w.seq_len, " tokens");
    w.global_batch = int64_t(std::round(seqs));
  } else {
    w.global_batch =
        f.global_batch > 0 ? f.global_batch : std::max<int64_t>(1, (int64_t(4) << 20) / w.seq_len);
  }
  if (!f.tokens.empty()) w.train_tokens = parse_size(f.tokens, "--tokens");
  w.precision = nn::parse_precision(f.precision);
  w.validate();
  return w;
}

void run_plan(const PlanFlags& f) {
  check_plan_flags(f);
  if (f.validate) {
    std::cout << plan::format_validation(plan::validate_published_runs(
        f.gpu_table.empty() ? plan::GpuTable::builtin() : plan::GpuTable::load(f.gpu_table)));
    return;
  }
  const plan::GpuTable table =
      f.gpu_table.empty() ? plan::GpuTable::builtin() : plan::GpuTable::load(f.gpu_table);
  // A run directory replaces its hardware's assumed figures with measured ones: the run's own
  // device (this CPU, or the one --gpu type it ran on) becomes the hardware planned for.
  std::optional<plan::GpuSpec> calibrated;
  std::optional<plan::Calibration> calibration;
  std::optional<plan::CheckpointPlan> checkpoints;
  if (!f.calibrate.empty()) {
    const bool gpu_named = f.gpu_option != nullptr && f.gpu_option->count() > 0;
    TESSERA_CHECK(!gpu_named || split_list(f.gpu).size() == 1, "plan --calibrate: name the one ",
                  "GPU type the run ran on, got --gpu ", f.gpu);
    const plan::GpuSpec* gpu = gpu_named ? &table.find(f.gpu) : nullptr;
    const plan::Calibration c = plan::calibrate(f.calibrate, gpu);
    std::cout << plan::format_calibration(c);
    if (f.model.empty()) return;  // the report alone
    calibrated = c.calibrated;
    calibration = c;
  }
  plan::PlanRequest r;
  r.workload = workload_of(f);
  // Planning on a calibrated machine keeps the run's precision unless told otherwise.
  if (calibration && f.precision_option->count() == 0)
    r.workload.precision = calibration->workload.precision;
  for (const std::string& name : split_list(f.gpu))
    for (const std::string& count : split_list(f.gpus)) {
      const double n = parse_size(count, "--gpus");
      TESSERA_CHECK(n >= 1 && n <= double(1 << 20) && n == std::floor(n), "plan: --gpus ", count,
                    " must be a whole number in [1, ", 1 << 20, "]");
      plan::GpuSpec g = calibrated ? *calibrated : table.find(name);
      if (f.gpus_per_node > 0) g.gpus_per_node = f.gpus_per_node;
      plan::Cluster c = plan::Cluster::of(g, int(n));
      if (f.price != -1) c.usd_per_hour = f.price;
      r.clusters.push_back(c);
    }
  TESSERA_CHECK(!r.clusters.empty(), "plan: --gpu and --gpus name no cluster");
  TESSERA_CHECK(f.rank_by == "time" || f.rank_by == "cost", "plan: --rank-by must be time or ",
                "cost, got '", f.rank_by, "'");
  r.rank_by = f.rank_by == "cost" ? plan::RankBy::cost : plan::RankBy::time;
  r.space.tp = f.tp, r.space.pp = f.pp, r.space.dp = f.dp;
  r.space.virtual_stages = f.virtual_stages, r.space.micro_batch = f.micro_batch;
  r.space.zero = f.zero;
  r.space.recompute.clear();
  for (const std::string& m : split_list(f.recompute))
    r.space.recompute.push_back(nn::parse_recompute_mode(m));
  r.space.try_sequence_parallel = !f.no_sequence_parallel;
  r.space.try_offload = f.offload;
  r.engine.fp8_gemms = f.fp8;
  r.memory.reserve_gb = f.reserve_gb;
  // A CPU has no CUDA context or NCCL buffers to keep memory for.
  if (calibration && calibration->calibrated.name == "cpu" && f.reserve_option->count() == 0)
    r.memory.reserve_gb = 0;
  r.usable_fraction = f.usable_memory;

  // The checkpoint flags are checked before the search: a bad one is one line, not a table and
  // then an error.
  plan::CheckpointInputs given;
  given.node_failures_per_day = f.node_failure_rate;
  given.storage_gbps = f.storage_gbps;
  given.save_stall_s = f.save_seconds;
  given.restart_s = f.restart_seconds;
  given.validate();

  const plan::PlanResult result = plan::plan(r);
  // Nothing fits: one line, the smallest layout and what it needs, and a non-zero exit.
  TESSERA_CHECK(!result.ranked.empty(), "plan: ", result.nothing_fits);
  std::cout << plan::format_plan_table(r, result, f.top);
  {
    const plan::Candidate& best = result.ranked.front();
    const plan::Cluster& cluster = r.clusters[size_t(best.cluster)];
    std::cout << "best: tessera train " << best.layout.train_flags() << " --batch-size "
              << r.workload.global_batch << " --seq-len " << r.workload.seq_len << " --precision "
              << nn::precision_name(r.workload.precision) << "\n";
    // Checkpoints: the flags' figures, or what the calibration run measured, scaled to this
    // model (economics.h).
    plan::CheckpointInputs in = given;
    if (calibration) {
      const plan::Calibration& c = *calibration;
      const double run_bytes = 12.0 * double(plan::parameter_count(c.workload.model));
      std::string measured;
      if (c.save_stall_s >= 0 && f.save_seconds == -1) {
        // The run's stall per checkpoint byte on one node, for this model's share per node.
        in.save_stall_s = c.save_stall_s / run_bytes * 12.0 *
                          double(plan::parameter_count(r.workload.model)) / cluster.nodes();
        measured = "save stall";
      }
      if (c.restart_s >= 0 && f.restart_seconds == -1) {
        in.relaunch_s = c.restart_s;
        measured += measured.empty() ? "relaunch" : " and relaunch";
      }
      if (!measured.empty()) in.source = str_cat(measured, " measured by ", c.run_dir);
    }
    if (f.save_seconds != -1 || f.restart_seconds != -1) in.source = "given";
    checkpoints = plan::plan_checkpoints(plan::parameter_count(r.workload.model), cluster.nodes(),
                                         best.days * 86400, in);
    std::cout << plan::format_checkpoints(*checkpoints, best.days) << "\n";
  }
  if (!f.json.empty()) {
    nlohmann::json j = plan::plan_to_json(r, result, f.top);
    if (checkpoints) j["checkpoints"] = plan::checkpoints_to_json(*checkpoints);
    write_file_atomic(f.json, j.dump(2) + "\n");
  }
  if (!f.svg.empty()) write_file_atomic(f.svg, plan::render_plan_svg(r, result));
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto f = std::make_shared<PlanFlags>();
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "Choose layouts, hardware and budgets: memory, step time, cost and checkpoint "
      "interval of every layout of a model on a cluster");
  cmd->add_option("--model", f->model,
                  "a preset (gpt3-175b, llama-70b-like, megatron-1t, gpt2-d12, ...) or a "
                  "Hugging Face config.json");
  cmd->add_option("--layers", f->layers, "override the model's layers");
  cmd->add_option("--hidden", f->hidden, "override the model's width");
  cmd->add_option("--heads", f->heads, "override the attention heads (and kv heads)");
  cmd->add_option("--kv-heads", f->kv_heads, "override the key/value heads (GQA)");
  cmd->add_option("--ffn", f->ffn, "override the MLP width");
  cmd->add_option("--vocab", f->vocab, "override the vocabulary");
  cmd->add_option("--seq-len", f->seq_len,
                  "tokens per sequence (default: the model's context, at most 4096)");
  cmd->add_option("--global-batch", f->global_batch, "sequences per step (default: 4M tokens)");
  cmd->add_option("--batch-tokens", f->batch_tokens, "tokens per step, e.g. 4Mi (2^22)");
  cmd->add_option("--tokens", f->tokens, "tokens to train on, e.g. 2T (days and cost need it)");
  f->precision_option = cmd->add_option(
      "--precision", f->precision, "bf16 (default; with --calibrate, the run's), fp16 or fp32");
  f->gpu_option = cmd->add_option(
      "--gpu", f->gpu, "GPU type(s), comma-separated (a100-40gb, a100-80gb, h100, h200, b200)");
  cmd->add_option("--gpus", f->gpus, "GPU count(s), comma-separated");
  cmd->add_option("--gpus-per-node", f->gpus_per_node, "override the table's GPUs per node");
  cmd->add_option("--price", f->price, "USD per GPU-hour (default: the table's)");
  cmd->add_option("--gpu-table", f->gpu_table, "an edited copy of configs/gpus.json");
  cmd->add_option("--rank-by", f->rank_by, "time (default) or cost");
  cmd->add_option("--top", f->top, "rows to print (default 10)");
  cmd->add_option("--json", f->json, "write the ranked layouts as JSON");
  cmd->add_option("--svg", f->svg, "draw memory per GPU and time against cost");
  cmd->add_option("--tp", f->tp, "only this tensor-parallel size");
  cmd->add_option("--pp", f->pp, "only this pipeline size");
  cmd->add_option("--dp", f->dp, "only this data-parallel size");
  cmd->add_option("--virtual-stages", f->virtual_stages, "only this many chunks per pipeline rank");
  cmd->add_option("--micro-batch", f->micro_batch, "only this micro-batch size (sequences)");
  cmd->add_option("--zero", f->zero, "only this ZeRO stage");
  cmd->add_option("--recompute", f->recompute, "modes to try (default none,selective,full)");
  cmd->add_flag("--no-sequence-parallel", f->no_sequence_parallel,
                "never split the sequence under tp");
  cmd->add_flag("--offload", f->offload, "also try optimizer offload");
  cmd->add_flag("--fp8", f->fp8,
                "time the GEMMs at the GPU's FP8 peak: what FP8 training would gain (Tessera "
                "trains in bf16; refused on a GPU without FP8)");
  f->reserve_option =
      cmd->add_option("--reserve-gb", f->reserve_gb,
                      "GB per GPU kept for the runtime (default 2.5; 0 on a calibrated CPU)");
  cmd->add_option(
      "--usable-memory", f->usable_memory,
      "the share of GPU memory a layout may fill (default 0.9: fragmentation headroom)");
  cmd->add_option("--node-failure-rate", f->node_failure_rate,
                  "failures per node and day (default 0.05)");
  cmd->add_option("--save-seconds", f->save_seconds,
                  "the stall of one checkpoint save (default: from --storage-gbps)");
  cmd->add_option("--restart-seconds", f->restart_seconds,
                  "from a failure to training again (default: 120 s + reading the checkpoint)");
  cmd->add_option("--storage-gbps", f->storage_gbps,
                  "checkpoint write and read GB/s per node (default 2)");
  cmd->add_option("--calibrate", f->calibrate,
                  "a run directory of tessera train: fit the compute efficiency and link bandwidth "
                  "to what it measured, check its memory, and plan on that hardware");
  cmd->add_flag("--validate", f->validate,
                "print the planner against Narayanan et al. 2021's tables and DeepSpeed's ZeRO-3 "
                "estimator (docs/planning.md)");
  f->command = cmd;
  cmd->callback([f] { run_plan(*f); });
}

}  // namespace tessera::cli
