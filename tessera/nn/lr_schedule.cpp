#include "tessera/nn/lr_schedule.h"

#include <cmath>
#include <numbers>

#include <nlohmann/json.hpp>

#include "tessera/core/error.h"

namespace tessera::nn {

const char* schedule_kind_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::constant:
      return "constant";
    case ScheduleKind::cosine:
      return "cosine";
    case ScheduleKind::wsd:
      return "wsd";
  }
  return "?";
}

void LRSchedule::validate() const {
  TESSERA_CHECK(std::isfinite(max_lr) && max_lr > 0.0,
                "lr schedule: max_lr must be finite and > 0, got ", max_lr);
  TESSERA_CHECK(std::isfinite(min_lr) && min_lr >= 0.0 && min_lr <= max_lr,
                "lr schedule: min_lr must be in [0, max_lr = ", max_lr, "], got ", min_lr);
  TESSERA_CHECK(warmup_steps >= 0, "lr schedule: warmup_steps must be >= 0, got ", warmup_steps);
  if (kind == ScheduleKind::constant) return;
  TESSERA_CHECK(total_steps > warmup_steps, "lr schedule: ", schedule_kind_name(kind),
                " needs total_steps > warmup_steps, got total_steps ", total_steps,
                " and warmup_steps ", warmup_steps);
  if (kind == ScheduleKind::wsd) {
    TESSERA_CHECK(decay_fraction > 0.0 && decay_fraction <= 1.0,
                  "lr schedule: decay_fraction must be in (0, 1], got ", decay_fraction);
    TESSERA_CHECK(decay_start() >= warmup_steps, "lr schedule: the decay phase (the last ",
                  decay_fraction, " of ", total_steps, " steps, from step ", decay_start(),
                  ") must start after warmup_steps ", warmup_steps);
  }
}

int64_t LRSchedule::decay_start() const {
  // Rounded and clamped to [0, total_steps] in double before converting: double(total_steps)
  // rounds up past int64's range near 2^63, where llround's result was unspecified and the
  // subtraction overflowed (found with fuzz/train_config).
  if (total_steps <= 0) return total_steps;
  const double decay = std::round(decay_fraction * double(total_steps));
  if (!(decay > 0.0)) return total_steps;  // also a NaN fraction
  if (decay >= double(total_steps)) return 0;
  return total_steps - int64_t(decay);
}

double LRSchedule::lr(int64_t step) const {
  TESSERA_CHECK(step >= 0, "lr schedule: step must be >= 0, got ", step);
  if (step < warmup_steps) return max_lr * double(step + 1) / double(warmup_steps);
  switch (kind) {
    case ScheduleKind::constant:
      return max_lr;
    case ScheduleKind::cosine: {
      if (step >= total_steps) return min_lr;
      const double progress = double(step - warmup_steps) / double(total_steps - warmup_steps);
      return min_lr + 0.5 * (max_lr - min_lr) * (1.0 + std::cos(std::numbers::pi * progress));
    }
    case ScheduleKind::wsd: {
      if (step >= total_steps) return min_lr;
      const int64_t start = decay_start();
      if (step < start) return max_lr;
      const double progress = double(step - start) / double(total_steps - start);
      return max_lr - (max_lr - min_lr) * progress;
    }
  }
  return max_lr;
}

nlohmann::json LRSchedule::to_json() const {
  return {{"kind", schedule_kind_name(kind)},
          {"max_lr", max_lr},
          {"min_lr", min_lr},
          {"warmup_steps", warmup_steps},
          {"total_steps", total_steps},
          {"decay_fraction", decay_fraction}};
}

LRSchedule LRSchedule::from_json(const nlohmann::json& j, const LRSchedule& base) {
  TESSERA_CHECK(j.is_object(), "lr schedule: expected a JSON object, got ", j.dump());
  LRSchedule s = base;
  for (const auto& item : j.items()) {
    // Named references, not a binding: the lambdas capture them (clang < 16 cannot).
    const std::string& key = item.key();
    const nlohmann::json& v = item.value();
    auto number = [&](double& field) {
      TESSERA_CHECK(v.is_number(), "lr schedule: '", key, "' must be a number, got ", v.dump());
      field = v.get<double>();
    };
    auto integer = [&](int64_t& field) {
      TESSERA_CHECK(v.is_number_integer(), "lr schedule: '", key, "' must be an integer, got ",
                    v.dump());
      field = v.get<int64_t>();
    };
    if (key == "kind") {
      const std::string k = v.is_string() ? v.get<std::string>() : "";
      if (k == "constant")
        s.kind = ScheduleKind::constant;
      else if (k == "cosine")
        s.kind = ScheduleKind::cosine;
      else if (k == "wsd")
        s.kind = ScheduleKind::wsd;
      else
        detail::throw_error("lr schedule: 'kind' is ", v.dump(),
                            "; expected one of constant, cosine, wsd");
    } else if (key == "max_lr") {
      number(s.max_lr);
    } else if (key == "min_lr") {
      number(s.min_lr);
    } else if (key == "warmup_steps") {
      integer(s.warmup_steps);
    } else if (key == "total_steps") {
      integer(s.total_steps);
    } else if (key == "decay_fraction") {
      number(s.decay_fraction);
    } else {
      detail::throw_error("lr schedule: unknown key '", key, "'");
    }
  }
  s.validate();
  return s;
}

LRSchedule LRSchedule::from_json(const nlohmann::json& j) {
  return from_json(j, LRSchedule());
}

}  // namespace tessera::nn
