#pragma once
// Learning-rate schedules as pure functions of the (0-based) step: linear warmup from
// max_lr / warmup_steps up to max_lr, then
//   constant: max_lr;
//   cosine:   max_lr down to min_lr along half a cosine, reaching min_lr at total_steps;
//   wsd:      warmup-stable-decay: max_lr until the last decay_fraction of total_steps, then
//             linearly down to min_lr at total_steps.
// Past total_steps the cosine and WSD schedules stay at min_lr.

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace tessera::nn {

enum class ScheduleKind { constant, cosine, wsd };

struct LRSchedule {
  ScheduleKind kind = ScheduleKind::cosine;
  double max_lr = 6e-4;
  double min_lr = 0.0;
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;      // cosine and wsd: the step at which lr reaches min_lr
  double decay_fraction = 0.2;  // wsd: the share of total_steps spent decaying

  // Throws naming the offending field and value.
  void validate() const;
  // The learning rate at `step` (>= 0).
  double lr(int64_t step) const;
  // The first step of WSD's decay phase.
  int64_t decay_start() const;

  nlohmann::json to_json() const;
  // Starts from `base` and overrides the keys present; unknown keys and wrong types throw
  // naming the key. The result is validated.
  static LRSchedule from_json(const nlohmann::json& j, const LRSchedule& base);
  static LRSchedule from_json(const nlohmann::json& j);
};

const char* schedule_kind_name(ScheduleKind kind);

}  // namespace tessera::nn
