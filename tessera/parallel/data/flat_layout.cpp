#include "tessera/parallel/data/flat_layout.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "tessera/core/error.h"

namespace tessera::parallel {

namespace {

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

int64_t round_up(int64_t n, int64_t multiple) {
  return (n + multiple - 1) / multiple * multiple;
}

}  // namespace

std::vector<UnitSpec> gpt_units(const nn::StateDict& params) {
  UnitSpec embedding{"embedding", {}}, head{"head", {}};
  std::vector<UnitSpec> blocks;
  std::map<std::string, size_t> block_index;
  bool has_wte = false, has_lm_head = false;
  for (const auto& [name, p] : params) {
    if (starts_with(name, "wte.") || starts_with(name, "wpe.")) {
      embedding.params.push_back(name);
      has_wte = has_wte || name == "wte.weight";
    } else if (starts_with(name, "ln_f.") || starts_with(name, "lm_head.")) {
      head.params.push_back(name);
      has_lm_head = has_lm_head || name == "lm_head.weight";
    } else if (starts_with(name, "h.") && name.find('.', 2) != std::string::npos) {
      std::string unit = name.substr(0, name.find('.', 2));
      auto [it, fresh] = block_index.emplace(unit, blocks.size());
      if (fresh) blocks.push_back({unit, {}});
      blocks[it->second].params.push_back(name);
    } else {
      detail::throw_error("gpt_units: parameter '", name,
                          "' belongs to no GPT unit (expected wte.*, wpe.*, h.{i}.*, ln_f.* or "
                          "lm_head.*)");
    }
  }
  // A tied head reads the embedding table (stored with the embedding unit when both exist).
  if (!head.params.empty() && has_wte && !has_lm_head) head.params.push_back("wte.weight");
  std::vector<UnitSpec> units;
  if (!embedding.params.empty()) units.push_back(std::move(embedding));
  for (UnitSpec& b : blocks) units.push_back(std::move(b));
  if (!head.params.empty()) units.push_back(std::move(head));
  return units;
}

FlatLayout::FlatLayout(const nn::StateDict& params, const LayoutOptions& options)
    : dp_size_(options.dp_size) {
  TESSERA_CHECK(dp_size_ >= 1, "FlatLayout: dp size must be at least 1, got ", dp_size_);
  TESSERA_CHECK(options.bucket_bytes > 0, "FlatLayout: bucket_bytes must be positive, got ",
                options.bucket_bytes);
  TESSERA_CHECK(!params.empty(), "FlatLayout: no parameters to lay out");
  std::map<std::string, int> by_name;
  std::set<const TensorImpl*> seen;
  for (const auto& [name, t] : params) {
    TESSERA_CHECK(t.defined(), "FlatLayout: parameter '", name, "' is undefined");
    TESSERA_CHECK(is_floating(t.dtype()), "FlatLayout: parameter '", name, "' is ", t.describe(),
                  "; only floating-point parameters are trained");
    TESSERA_CHECK(
        by_name.emplace(name, int(params_.size())).second && seen.insert(t.impl_ptr()).second,
        "FlatLayout: parameter '", name, "' appears twice");
    int space = -1;
    for (size_t s = 0; s < spaces_.size(); ++s)
      if (spaces_[s].dtype == t.dtype()) space = int(s);
    if (space < 0) {
      space = int(spaces_.size());
      spaces_.push_back({t.dtype(), 0, 0});
    }
    params_.push_back({name, t, space, -1, 0});
  }
  for (const std::string& name : options.tied)
    TESSERA_CHECK(by_name.count(name), "FlatLayout: tied parameter '", name,
                  "' is not among the parameters");
  auto is_tied = [&](int p) { return options.tied.count(params_[size_t(p)].name) > 0; };

  // Groups of one space, closed into buckets in backward order; tied parameters alone.
  auto add_groups = [&](const std::vector<int>& members, const std::string& unit) {
    std::vector<std::vector<int>> by_space(spaces_.size());
    for (int p : members) {
      if (is_tied(p)) continue;
      by_space[size_t(params_[size_t(p)].space)].push_back(p);
    }
    for (auto& group : by_space)
      if (!group.empty()) add_bucket(group, unit, false);
    for (int p : members)
      if (is_tied(p)) add_bucket({p}, unit, true);
  };

  if (!options.units.empty()) {
    std::vector<int> owner(params_.size(), -1);
    std::set<std::string> unit_names;
    for (size_t u = 0; u < options.units.size(); ++u) {
      const UnitSpec& spec = options.units[u];
      TESSERA_CHECK(unit_names.insert(spec.name).second, "FlatLayout: unit '", spec.name,
                    "' appears twice");
      for (const std::string& name : spec.params) {
        auto it = by_name.find(name);
        TESSERA_CHECK(it != by_name.end(), "FlatLayout: unit '", spec.name, "' lists parameter '",
                      name, "', which is not among the parameters");
        if (owner[size_t(it->second)] < 0) owner[size_t(it->second)] = int(u);
      }
    }
    for (size_t p = 0; p < params_.size(); ++p)
      TESSERA_CHECK(owner[p] >= 0, "FlatLayout: parameter '", params_[p].name,
                    "' is in no unit; every parameter must belong to one");
    for (size_t u = options.units.size(); u-- > 0;) {
      std::vector<int> members;
      for (size_t p = 0; p < params_.size(); ++p)
        if (owner[p] == int(u)) members.push_back(int(p));
      add_groups(members, options.units[u].name);
    }
    for (const UnitSpec& spec : options.units) {
      Unit unit{spec.name, {}};
      for (const std::string& name : spec.params)
        unit.buckets.push_back(params_[size_t(by_name[name])].bucket);
      std::sort(unit.buckets.begin(), unit.buckets.end());
      unit.buckets.erase(std::unique(unit.buckets.begin(), unit.buckets.end()), unit.buckets.end());
      units_.push_back(std::move(unit));
    }
  } else {
    std::vector<std::vector<int>> open(spaces_.size());
    std::vector<int64_t> open_bytes(spaces_.size(), 0);
    for (size_t i = params_.size(); i-- > 0;) {
      const int p = int(i);
      if (is_tied(p)) {
        add_bucket({p}, "", true);
        continue;
      }
      const size_t s = size_t(params_[i].space);
      open[s].push_back(p);
      open_bytes[s] += int64_t(params_[i].tensor.nbytes());
      if (open_bytes[s] >= options.bucket_bytes) {
        add_bucket(open[s], "", false);
        open[s].clear();
        open_bytes[s] = 0;
      }
    }
    for (auto& group : open)
      if (!group.empty()) add_bucket(group, "", false);
  }
}

void FlatLayout::add_bucket(const std::vector<int>& members, const std::string& unit, bool tied) {
  Bucket b;
  b.space = params_[size_t(members.front())].space;
  b.params = members;
  std::sort(b.params.begin(), b.params.end());  // registration order inside the bucket
  b.unit = unit;
  b.tied = tied;
  const int bucket = int(buckets_.size());
  for (int p : b.params) {
    Param& param = params_[size_t(p)];
    param.bucket = bucket;
    param.offset = b.used;
    b.used += param.tensor.numel();
  }
  b.numel = round_up(std::max<int64_t>(b.used, 1), int64_t(dp_size_) * kShardAlign);
  Space& space = spaces_[size_t(b.space)];
  b.flat_offset = space.numel;
  b.shard_offset = space.shard_numel;
  space.numel += b.numel;
  space.shard_numel += b.numel / dp_size_;
  buckets_.push_back(std::move(b));
}

int FlatLayout::find_unit(const std::string& name) const {
  for (size_t u = 0; u < units_.size(); ++u)
    if (units_[u].name == name) return int(u);
  return -1;
}

std::vector<Segment> FlatLayout::segments(int bucket, int64_t lo, int64_t hi) const {
  std::vector<Segment> out;
  for (int p : buckets_[size_t(bucket)].params) {
    const Param& param = params_[size_t(p)];
    const int64_t begin = std::max(lo, param.offset);
    const int64_t end = std::min(hi, param.offset + param.tensor.numel());
    if (begin < end) out.push_back({p, begin - param.offset, begin, end - begin});
  }
  return out;
}

std::string FlatLayout::describe() const {
  int64_t elements = 0;
  for (const Param& p : params_) elements += p.tensor.numel();
  std::ostringstream os;
  os << params_.size() << " parameters (" << elements << " elements) in " << buckets_.size()
     << " buckets over " << spaces_.size() << " dtype space(s), dp " << dp_size_;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const Bucket& k = buckets_[b];
    os << "\n  bucket " << b << (k.unit.empty() ? "" : " [" + k.unit + "]")
       << (k.tied ? " (tied)" : "") << ": " << k.params.size() << " parameters, " << k.used
       << " elements + " << (k.numel - k.used) << " padding, "
       << dtype_name(spaces_[size_t(k.space)].dtype);
  }
  return os.str();
}

}  // namespace tessera::parallel
