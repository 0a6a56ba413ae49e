#pragma once
// The hardware `tessera plan` times and prices a layout on: one GpuSpec per GPU type, from a
// shipped, editable table (configs/gpus.json, compiled in; --gpu-table FILE reads an edited
// copy). Each entry names its sources: datasheet peaks, links per GPU and direction, a
// default price with where and when it was quoted.
//
// gemm_efficiency and memory_efficiency are the fractions of peak that large bf16 GEMMs and
// elementwise kernels reach. They are assumptions until a real run replaces them
// (calibration.h): a plan is only as good as these two numbers, and docs/planning.md shows
// how far the model is from published runs with them.

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tessera::plan {

// The most a GPU-hour may cost, in a table or by --price.
inline constexpr double kMaxUsdPerGpuHour = 1e4;

struct GpuSpec {
  std::string name;         // the table's key: "h100"
  std::string description;  // "NVIDIA H100 SXM5 80 GB (DGX H100 node)"
  double bf16_tflops = 0;   // dense tensor-core peak
  double fp8_tflops = 0;    // dense; 0: no FP8
  double memory_gb = 0;     // HBM, 1e9 bytes
  double hbm_gbps = 0;      // HBM bandwidth, GB/s
  double nvlink_gbps = 0;   // intra-node, per GPU, one direction
  double nvlink_latency_us = 0;
  double network_gbps = 0;  // inter-node, per GPU, one direction
  double network_latency_us = 0;
  int gpus_per_node = 8;
  double pcie_gbps = 25;  // host <-> GPU, one direction (optimizer offload)
  double host_gbps = 50;  // host memory bandwidth per GPU: the node's, shared (offload's AdamW)
  double gemm_efficiency = 0.6;    // of bf16_tflops, on the model's GEMMs
  double memory_efficiency = 0.7;  // of hbm_gbps, in elementwise kernels
  double usd_per_hour = 0;
  std::string price_source;
  std::vector<std::string> sources;

  // Throws naming the GPU, the field and its range when a figure is missing, non-finite or
  // outside what hardware spans (docs/planning.md lists the ranges).
  void validate() const;
  static GpuSpec from_json(const nlohmann::json& j, const std::string& where);
  nlohmann::json to_json() const;
};

class GpuTable {
 public:
  // The table compiled from configs/gpus.json.
  static const GpuTable& builtin();
  // A table file of the same form; throws naming the file and the entry on any error.
  static GpuTable load(const std::string& path);
  static GpuTable parse(const std::string& text, const std::string& source);

  // The GPU called `name` (case-insensitive); throws listing the known names otherwise.
  const GpuSpec& find(const std::string& name) const;
  const std::vector<GpuSpec>& gpus() const { return gpus_; }
  const std::string& source() const { return source_; }

 private:
  std::vector<GpuSpec> gpus_;
  std::string source_;
};

}  // namespace tessera::plan
