#include "tessera/plan/hardware.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/core/file_io.h"
#include "tessera/core/json_depth.h"
#include "tessera/plan/detail/builtin_gpus.h"
#include "tessera/plan/detail/text.h"

namespace tessera::plan {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

void GpuSpec::validate() const {
  TESSERA_CHECK(!name.empty(), "gpu table: an entry has no name");
  // Each figure within what hardware spans, with a wide margin (a slow CPU core to 40x a
  // B200), so that every time, cost and count derived from it stays a meaningful double.
  auto in_range = [&](double v, const char* field, double lo, double hi, const char* unit) {
    detail::check_in_range(v, lo, hi, str_cat("gpu '", name, "': ", field), unit);
  };
  in_range(bf16_tflops, "bf16_tflops", 1e-3, 1e5, "TFLOP/s");
  in_range(memory_gb, "memory_gb", 0.1, 1e5, "GB");
  in_range(hbm_gbps, "hbm_gbps", 0.1, 1e6, "GB/s");
  in_range(nvlink_gbps, "nvlink_gbps", 1e-3, 1e5, "GB/s");
  in_range(network_gbps, "network_gbps", 1e-3, 1e5, "GB/s");
  in_range(pcie_gbps, "pcie_gbps", 1e-3, 1e5, "GB/s");
  in_range(host_gbps, "host_gbps", 1e-3, 1e5, "GB/s");
  if (fp8_tflops != 0) in_range(fp8_tflops, "fp8_tflops (0: no FP8)", 1e-3, 2e5, "TFLOP/s");
  in_range(nvlink_latency_us, "nvlink_latency_us", 0, 1e6, "us");
  in_range(network_latency_us, "network_latency_us", 0, 1e6, "us");
  in_range(usd_per_hour, "usd_per_hour", 0, kMaxUsdPerGpuHour, "USD");
  for (auto [v, field] : {std::pair{gemm_efficiency, "gemm_efficiency"},
                          std::pair{memory_efficiency, "memory_efficiency"}})
    TESSERA_CHECK(std::isfinite(v) && v > 0 && v <= 1, "gpu '", name, "': ", field,
                  " is a fraction of peak in (0, 1], got ", v);
  TESSERA_CHECK(gpus_per_node >= 1 && gpus_per_node <= 1024, "gpu '", name,
                "': gpus_per_node must be in [1, 1024], got ", gpus_per_node);
}

GpuSpec GpuSpec::from_json(const nlohmann::json& j, const std::string& where) {
  TESSERA_CHECK(j.is_object(), where, ": a GPU entry must be an object");
  GpuSpec g;
  for (const auto& item : j.items()) {
    const std::string& key = item.key();
    const nlohmann::json& v = item.value();
    auto number = [&](double& out) {
      TESSERA_CHECK(v.is_number(), where, ": '", key, "' must be a number, got ", v.dump());
      out = v.get<double>();
    };
    auto text = [&](std::string& out) {
      TESSERA_CHECK(v.is_string(), where, ": '", key, "' must be a string");
      out = v.get<std::string>();
    };
    if (key == "name")
      text(g.name);
    else if (key == "description")
      text(g.description);
    else if (key == "price_source")
      text(g.price_source);
    else if (key == "bf16_tflops")
      number(g.bf16_tflops);
    else if (key == "fp8_tflops")
      number(g.fp8_tflops);
    else if (key == "memory_gb")
      number(g.memory_gb);
    else if (key == "hbm_gbps")
      number(g.hbm_gbps);
    else if (key == "nvlink_gbps")
      number(g.nvlink_gbps);
    else if (key == "nvlink_latency_us")
      number(g.nvlink_latency_us);
    else if (key == "network_gbps")
      number(g.network_gbps);
    else if (key == "network_latency_us")
      number(g.network_latency_us);
    else if (key == "pcie_gbps")
      number(g.pcie_gbps);
    else if (key == "host_gbps")
      number(g.host_gbps);
    else if (key == "gemm_efficiency")
      number(g.gemm_efficiency);
    else if (key == "memory_efficiency")
      number(g.memory_efficiency);
    else if (key == "usd_per_hour")
      number(g.usd_per_hour);
    else if (key == "gpus_per_node") {
      TESSERA_CHECK(v.is_number_integer(), where, ": 'gpus_per_node' must be an integer");
      const int64_t n = v.get<int64_t>();
      TESSERA_CHECK(n >= 1 && n <= 1024, where, ": 'gpus_per_node' must be in [1, 1024], got ", n);
      g.gpus_per_node = int(n);
    } else if (key == "sources") {
      TESSERA_CHECK(v.is_array(), where, ": 'sources' must be a list of strings");
      for (const auto& s : v) {
        TESSERA_CHECK(s.is_string(), where, ": 'sources' must be a list of strings");
        g.sources.push_back(s.get<std::string>());
      }
    } else {
      tessera::detail::throw_error(where, ": unknown key '", key, "'");
    }
  }
  TESSERA_CHECK(!g.name.empty(), where, ": the entry has no 'name'");
  g.name = lower(g.name);
  try {
    g.validate();
  } catch (const Error& e) {
    tessera::detail::throw_error(where, ": ", e.what());
  }
  return g;
}

nlohmann::json GpuSpec::to_json() const {
  return {{"name", name},
          {"description", description},
          {"bf16_tflops", bf16_tflops},
          {"fp8_tflops", fp8_tflops},
          {"memory_gb", memory_gb},
          {"hbm_gbps", hbm_gbps},
          {"nvlink_gbps", nvlink_gbps},
          {"nvlink_latency_us", nvlink_latency_us},
          {"network_gbps", network_gbps},
          {"network_latency_us", network_latency_us},
          {"gpus_per_node", gpus_per_node},
          {"pcie_gbps", pcie_gbps},
          {"host_gbps", host_gbps},
          {"gemm_efficiency", gemm_efficiency},
          {"memory_efficiency", memory_efficiency},
          {"usd_per_hour", usd_per_hour},
          {"price_source", price_source},
          {"sources", sources}};
}

GpuTable GpuTable::parse(const std::string& text, const std::string& source) {
  const nlohmann::json j = detail::parse_json(text, source);
  TESSERA_CHECK(j.is_object() && j.contains("gpus") && j["gpus"].is_array(), source,
                ": expected an object with a 'gpus' list");
  GpuTable t;
  t.source_ = source;
  for (size_t i = 0; i < j["gpus"].size(); ++i) {
    GpuSpec g = GpuSpec::from_json(j["gpus"][i], str_cat(source, ": gpus[", i, "]"));
    for (const GpuSpec& other : t.gpus_)
      TESSERA_CHECK(other.name != g.name, source, ": gpu '", g.name, "' appears twice");
    t.gpus_.push_back(std::move(g));
  }
  TESSERA_CHECK(!t.gpus_.empty(), source, ": the 'gpus' list is empty");
  return t;
}

GpuTable GpuTable::load(const std::string& path) {
  return parse(read_text_file(path), path);
}

const GpuTable& GpuTable::builtin() {
  static const GpuTable table = parse(detail::builtin_gpus_json(), "configs/gpus.json (built in)");
  return table;
}

const GpuSpec& GpuTable::find(const std::string& name) const {
  const std::string key = lower(name);
  for (const GpuSpec& g : gpus_)
    if (g.name == key) return g;
  std::string known;
  for (const GpuSpec& g : gpus_) known += (known.empty() ? "" : ", ") + g.name;
  tessera::detail::throw_error("unknown GPU '", name, "' (", source_, " has ", known, ")");
}

}  // namespace tessera::plan
