#pragma once
// The planner against published runs: Narayanan et al. 2021 (Megatron-LM, SC'21) Tables 1 and
// 2 and §5.1, and DeepSpeed's ZeRO-3 memory estimator. The figures are transcribed in
// ../shared/reference/megatron-2021-tables.md and docs/planning.md with their sources.
//
// What each check holds (tests/plan/validation_test.cpp asserts every "must"):
//  - Table 1: ranking the distinct (t, p) pairs of every row, each at its own best remaining
//    settings, under the paper's GPUs, batch and engine (Megatron-LM 2021: no distributed
//    optimizer, full recomputation, materialized attention), the paper's pair must be among
//    the top 3. Beside it, plan's TFLOP/s per GPU for the paper's pair and the paper's
//    achieved figure: the real test of the step-time model (reported, not asserted).
//  - Table 2: days to train 300B tokens fed the paper's achieved TFLOP/s must be within 5% of
//    the printed days (FLOP and time arithmetic only); plan's own TFLOP/s is reported beside.
//  - At 768 GPUs or more, plan must find PTD-P faster than ZeRO-3 for 175B and 530B.
//  - §5.1: 175B on 300B tokens, 1024 GPUs at 140 TFLOP/s, must come to 34 days; 1T on 450B
//    tokens, 3072 GPUs at 163 TFLOP/s, to 84 days (both within 1 day).
//  - DeepSpeed's estimate_zero3_model_states_mem_needs without offload, 4 L + 18 P / N bytes per
//    GPU (L the largest layer's parameters), against plan's bf16 ZeRO-3 model states.

#include <string>
#include <vector>

#include "tessera/plan/planner.h"

namespace tessera::plan {

struct Table1Row {
  std::string model;  // a plan_model() preset
  double params_b = 0;
  int t = 1, p = 1, gpus = 0, batch = 0;
  double achieved_tflops = 0;
  // What plan found.
  int rank_of_paper_pair = 0;  // 1-based among distinct (t, p); 0 when the pair does not fit
  std::vector<std::pair<int, int>> top_pairs;  // plan's best three (t, p)
  double predicted_tflops = 0;                 // for the paper's pair at its best settings
  std::string predicted_layout;
  // Why plan ranks as it does: its best pair's layout and step, and the paper pair's step
  // with its tensor-parallel share.
  std::string best_layout;
  double best_step_s = 0, best_bubble_s = 0, paper_step_s = 0, paper_tp_comm_s = 0;
};

struct Table2Row {
  std::string model;
  std::string scheme;  // "ZeRO-3" or "PTD-P"
  int gpus = 0, batch = 0, mp = 1;
  double achieved_tflops = 0, paper_days = 0;
  double days_from_achieved = 0;  // eq. 3 FLOPs for 300B tokens at the paper's TFLOP/s
  double predicted_tflops = 0;    // plan's own, for the scheme's best layout
};

struct ZeroEstimatorRow {
  std::string model;
  int gpus = 0;
  double deepspeed_bytes = 0;       // 4 L + 18 P / N
  double deepspeed_18pn_bytes = 0;  // its model states alone, 18 P / N
  double plan_states_bytes = 0;     // plan's bf16 ZeRO-3 model states + its gathered-unit window
  double plan_18pn_bytes = 0;  // plan's model states alone (18 bytes of each padded element / N)
};

// The widely repeated claim that an A100 80GB is the most cost-effective GPU for most model
// sizes and that an H100's FP8 pays off past about 70B parameters, worked through: each model
// trained on 20 tokens per parameter (Chinchilla) on 512 GPUs of each kind, the cheapest
// layout's days and cost; FP8 modelled as the H100's FP8 peak on the GEMM share (Tessera
// trains in bf16).
struct HardwareRow {
  std::string model;
  double params_b = 0, tokens = 0;
  std::string gpu;  // "a100-80gb", "h100", "h100 fp8", ...
  double usd_per_hour = 0;
  double days = 0, cost_usd = 0, mfu = 0;
  std::string layout;
};

struct ValidationReport {
  std::vector<Table1Row> table1;
  std::vector<Table2Row> table2;
  std::vector<ZeroEstimatorRow> zero3;
  double days_175b = 0, days_1t = 0;  // §5.1 from T = 8 D P / (n X)
  // At >= 768 GPUs: (model, GPUs, PTD-P TFLOP/s, ZeRO-3 TFLOP/s) as plan predicts them.
  struct SchemeRow {
    std::string model;
    int gpus = 0;
    double ptdp_tflops = 0, zero3_tflops = 0;
  };
  std::vector<SchemeRow> schemes;
  std::vector<HardwareRow> hardware;
};

// The Megatron-LM 2021 setting on A100-80GB DGX nodes (the table's GPU entry).
PlanRequest megatron_request(const std::string& model, int gpus, int batch);

// Runs every check (a few seconds: Table 1's rows search thousands of layouts each).
ValidationReport validate_published_runs(const GpuTable& table = GpuTable::builtin());

// The report as markdown tables, each row with the paper's figure, plan's and the difference.
std::string format_validation(const ValidationReport& report);

// Narayanan et al.'s T = 8 D P / (n X), in days.
double days_to_train(double params, double tokens, int gpus, double flops_per_gpu);

// DeepSpeed's estimate_zero3_model_states_mem_needs, GPU bytes without offload.
double deepspeed_zero3_gpu_bytes(double params, double largest_layer_params, int gpus);

}  // namespace tessera::plan
