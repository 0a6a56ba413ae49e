#include "tessera/parallel/data/grad_compression.h"

#include <cstdlib>

#include "tessera/core/error.h"

namespace tessera::parallel {

std::string GradCompression::describe() const {
  switch (kind) {
    case CompressionKind::none:
      return "none";
    case CompressionKind::bf16:
      return "bf16";
    case CompressionKind::powersgd:
      return str_cat("powersgd:", rank,
                     warmup_steps > 0 ? str_cat(", warm-up ", warmup_steps, " steps") : "");
  }
  return "?";
}

GradCompression parse_grad_compression(const std::string& value, const std::string& where) {
  GradCompression c;
  if (value == "none") return c;
  if (value == "bf16") {
    c.kind = CompressionKind::bf16;
    return c;
  }
  const std::string prefix = "powersgd:";
  if (value.rfind(prefix, 0) == 0) {
    const std::string digits = value.substr(prefix.size());
    char* end = nullptr;
    const long r = digits.empty() ? 0 : std::strtol(digits.c_str(), &end, 10);
    TESSERA_CHECK(!digits.empty() && end != nullptr && *end == '\0' && r >= 1 && r <= 1024, where,
                  ": '", value, "': the PowerSGD rank must be an integer in 1..1024");
    c.kind = CompressionKind::powersgd;
    c.rank = int(r);
    return c;
  }
  detail::throw_error(where, ": '", value,
                      "' is not a gradient compression; expected none, bf16 or powersgd:R");
}

std::string grad_compression_error(const GradCompression& c, int zero_stage, bool loss_scaling) {
  if (c.warmup_steps < 0)
    return str_cat("compression warm-up must be >= 0 steps, got ", c.warmup_steps);
  if (c.kind != CompressionKind::powersgd && c.warmup_steps > 0)
    return str_cat("a compression warm-up (", c.warmup_steps, " steps) applies to powersgd only, ",
                   "not to ", c.describe(), " compression");
  if (c.kind != CompressionKind::powersgd) return "";
  if (c.rank < 1) return str_cat("powersgd needs a rank >= 1, got ", c.rank);
  if (zero_stage >= 2)
    return str_cat("powersgd under ZeRO-", zero_stage, ": it compresses whole gradients and keeps ",
                   "a full-size residual on every rank, what ZeRO-2/3 exist not to hold; use ZeRO ",
                   "0 or 1, or bf16 compression");
  if (loss_scaling)
    return "powersgd with fp16 loss scaling: a skipped step's inf/NaN would stay in the "
           "error-feedback residual; use bf16 or fp32 precision";
  return "";
}

}  // namespace tessera::parallel
