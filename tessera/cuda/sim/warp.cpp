// Warp collectives (block_runner.h): shuffles, votes, reductions, __syncwarp and mma.sync.
// Lanes rendezvous in a PendingWarpOp; the last lane to arrive computes every lane's result
// (O(32) per collective, O(16*8*16) for an mma) and releases the others.
//
// Shuffles follow the PTX ISA's shfl.sync definition: CUDA's width w becomes the segment mask
// 32-w, and a source lane outside the segment (up/down/xor) returns the lane's own value. A
// source lane that exists but does not take part (not in the mask, or beyond the block's last
// thread) yields an undefined value on hardware; here it yields poison (all bits set: NaN for
// floating point), so a kernel that uses such a value computes visible garbage.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "tessera/core/error.h"
#include "tessera/cuda/sim/device_api.h"
#include "tessera/cuda/sim/mma_layout.h"
#include "tessera/cuda/sim/block_runner.h"

namespace tessera::cuda::sim::detail {

const char* warp_op_name(WarpOp op) {
  switch (op) {
    case WarpOp::kShflIdx: return "__shfl_sync";
    case WarpOp::kShflUp: return "__shfl_up_sync";
    case WarpOp::kShflDown: return "__shfl_down_sync";
    case WarpOp::kShflXor: return "__shfl_xor_sync";
    case WarpOp::kBallot: return "__ballot_sync";
    case WarpOp::kAny: return "__any_sync";
    case WarpOp::kAll: return "__all_sync";
    case WarpOp::kReduceAddI:
    case WarpOp::kReduceAddU: return "__reduce_add_sync";
    case WarpOp::kReduceMinI:
    case WarpOp::kReduceMinU: return "__reduce_min_sync";
    case WarpOp::kReduceMaxI:
    case WarpOp::kReduceMaxU: return "__reduce_max_sync";
    case WarpOp::kReduceAnd: return "__reduce_and_sync";
    case WarpOp::kReduceOr: return "__reduce_or_sync";
    case WarpOp::kReduceXor: return "__reduce_xor_sync";
    case WarpOp::kSyncWarp: return "__syncwarp";
    case WarpOp::kMmaBf16: return "mma.sync.m16n8k16.f32.bf16.bf16.f32";
    case WarpOp::kMmaF16: return "mma.sync.m16n8k16.f32.f16.f16.f32";
  }
  return "warp collective";
}

namespace {

bool is_mma(WarpOp op) { return op == WarpOp::kMmaBf16 || op == WarpOp::kMmaF16; }
bool is_shuffle(WarpOp op) {
  return op == WarpOp::kShflIdx || op == WarpOp::kShflUp || op == WarpOp::kShflDown ||
         op == WarpOp::kShflXor;
}

float bits_to_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// The 16-bit element `half` (0: low, 1: high) of a .b32 fragment register.
float unpack(WarpOp op, uint32_t reg, int half) {
  const auto bits = uint16_t(half == 0 ? reg & 0xffffu : reg >> 16);
  if (op == WarpOp::kMmaBf16) return bits_float(uint32_t(bits) << 16);
  return Half::to_float(bits);
}

}  // namespace

LaneOut BlockRunner::warp_collective(WarpOp op, unsigned mask, const LaneIn& in,
                                     const Site& site) {
  SimThread& self = *current_;
  const int warp = self.linear / int(kWarpSize);
  const unsigned bit = 1u << (self.linear % int(kWarpSize));
  WarpState& w = warps_[size_t(warp)];
  if (is_mma(op)) {
    if (w.existing != 0xffffffffu)
      fail(str_cat(warp_op_name(op), " at ", site.str(), " needs all 32 lanes of a warp, but warp ",
                   warp, " of this block has lanes ", lanes(w.existing), " only"));
    mask = 0xffffffffu;
  }
  if (!(mask & bit))
    fail(str_cat(warp_op_name(op), " at ", site.str(), " with mask ", hex_mask(mask),
                 ", which does not include the calling lane ", self.linear % int(kWarpSize)));
  if (is_shuffle(op) && (in.width < 1 || in.width > int(kWarpSize) || (in.width & (in.width - 1))))
    fail(str_cat(warp_op_name(op), " at ", site.str(), " with width ", in.width,
                 "; the width must be a power of 2 from 1 to 32"));
  const unsigned expected = mask & w.existing;
  if (expected & w.exited)
    fail(str_cat(warp_op_name(op), " at ", site.str(), " with mask ", hex_mask(mask),
                 " waits for lanes ", lanes(expected & w.exited), " of warp ", warp,
                 ", which have exited"));

  // Join the collective the other lanes of this mask wait in, or open it.
  PendingWarpOp* pending = nullptr;
  for (PendingWarpOp& candidate : w.pending) {
    if (candidate.in_use && candidate.op == op && candidate.mask == mask &&
        candidate.size == in.size) {
      pending = &candidate;
      break;
    }
  }
  const unsigned needs = pending != nullptr ? pending->expected : expected;
  // Disjoint lane groups may run their own collectives side by side, and lanes may wait for
  // others that have yet to finish a different one. But when another pending collective needs
  // this lane and this one needs a lane waiting in that one, neither can ever complete.
  for (const PendingWarpOp& other : w.pending) {
    if (!other.in_use || &other == pending) continue;
    if ((other.expected & bit) && (needs & other.arrived))
      fail(str_cat(warp_op_name(op), " at ", site.str(), " with mask ", hex_mask(mask), " (",
                   in.size, "-byte operand) while lanes ", lanes(other.arrived), " of warp ", warp,
                   " wait in ", warp_op_name(other.op), " at ", other.site.str(), " with mask ",
                   hex_mask(other.mask), " (", other.size,
                   "-byte operand), each waiting for the other; the lanes named in a mask must "
                   "all execute the same collective with the same mask"));
  }
  if (pending == nullptr) {
    for (PendingWarpOp& slot : w.pending) {
      if (!slot.in_use) {
        pending = &slot;
        break;
      }
    }
    TESSERA_ASSERT(pending != nullptr, "more pending warp collectives than lanes");
    *pending = PendingWarpOp{true, op, mask, expected, 0, in.size, site};
  }
  self.lane_in = in;
  self.wait_site = site;
  self.warp_slot = int(pending - w.pending.data());
  pending->arrived |= bit;
  if (pending->arrived == pending->expected) {
    complete(*pending, warp);
    pending->in_use = false;
    self.status = ThreadStatus::kRunning;
    self.warp_slot = -1;
    return self.lane_out;
  }
  self.status = ThreadStatus::kWarp;
  suspend();
  return self.lane_out;
}

void BlockRunner::complete(PendingWarpOp& op, int warp) {
  WarpState& w = warps_[size_t(warp)];
  SimThread* lanes_base = &threads_[size_t(warp) * kWarpSize];
  if (is_shuffle(op.op)) {
    compute_shuffle(op, warp);
  } else if (is_mma(op.op)) {
    compute_mma(op, warp);
  } else {
    uint32_t ballot = 0, sum = 0, bit_and = 0xffffffffu, bit_or = 0, bit_xor = 0;
    uint32_t min_u = 0xffffffffu, max_u = 0;
    int32_t min_i = INT32_MAX, max_i = INT32_MIN;
    for (int lane = 0; lane < int(kWarpSize); ++lane) {
      if (!(op.expected & (1u << lane))) continue;
      const uint32_t v = lanes_base[lane].lane_in.words[0];
      if (v != 0) ballot |= 1u << lane;
      sum += v;
      bit_and &= v;
      bit_or |= v;
      bit_xor ^= v;
      min_u = std::min(min_u, v);
      max_u = std::max(max_u, v);
      min_i = std::min(min_i, int32_t(v));
      max_i = std::max(max_i, int32_t(v));
    }
    uint32_t result = 0;
    switch (op.op) {
      case WarpOp::kBallot: result = ballot; break;
      case WarpOp::kAny: result = ballot != 0; break;
      case WarpOp::kAll: result = ballot == op.expected; break;
      case WarpOp::kReduceAddI:
      case WarpOp::kReduceAddU: result = sum; break;  // two's complement: same bits
      case WarpOp::kReduceMinI: result = uint32_t(min_i); break;
      case WarpOp::kReduceMinU: result = min_u; break;
      case WarpOp::kReduceMaxI: result = uint32_t(max_i); break;
      case WarpOp::kReduceMaxU: result = max_u; break;
      case WarpOp::kReduceAnd: result = bit_and; break;
      case WarpOp::kReduceOr: result = bit_or; break;
      case WarpOp::kReduceXor: result = bit_xor; break;
      case WarpOp::kSyncWarp:
        // A full-warp __syncwarp orders the lanes' shared-memory accesses (race detector).
        if (op.expected == w.existing) ++w.sync_gen;
        break;
      default: TESSERA_ASSERT(false, "unhandled warp collective");
    }
    for (int lane = 0; lane < int(kWarpSize); ++lane)
      if (op.expected & (1u << lane)) lanes_base[lane].lane_out.words[0] = result;
  }
  for (int lane = 0; lane < int(kWarpSize); ++lane) {
    SimThread& t = lanes_base[lane];
    if ((op.expected & (1u << lane)) && &t != current_) {
      t.warp_slot = -1;
      push_ready(t.linear);
    }
  }
}

void BlockRunner::compute_shuffle(const PendingWarpOp& op, int warp) {
  SimThread* lanes_base = &threads_[size_t(warp) * kWarpSize];
  for (int lane = 0; lane < int(kWarpSize); ++lane) {
    if (!(op.expected & (1u << lane))) continue;
    const LaneIn& in = lanes_base[lane].lane_in;
    // shfl.sync's c operand as CUDA builds it: segment mask in bits 8-12, clamp in bits 0-4.
    const int segmask = int(kWarpSize) - in.width;
    const int clamp = op.op == WarpOp::kShflUp ? 0 : 0x1f;
    const int max_lane = (lane & segmask) | (clamp & ~segmask);
    const int min_lane = lane & segmask;
    const int b = in.param & 0x1f;
    int src = lane;
    bool in_range = true;
    switch (op.op) {
      case WarpOp::kShflUp:
        src = lane - b;
        in_range = src >= max_lane;
        break;
      case WarpOp::kShflDown:
        src = lane + b;
        in_range = src <= max_lane;
        break;
      case WarpOp::kShflXor:
        src = lane ^ b;
        in_range = src <= max_lane;
        break;
      default:
        src = min_lane | (b & ~segmask);
        in_range = src <= max_lane;
        break;
    }
    if (!in_range) src = lane;
    LaneOut& out = lanes_base[lane].lane_out;
    if (op.expected & (1u << src)) {
      std::memcpy(out.words, lanes_base[src].lane_in.words, sizeof out.words);
    } else {
      std::memset(out.words, 0xff, sizeof out.words);  // poison: the source lane is not there
    }
  }
}

void BlockRunner::compute_mma(const PendingWarpOp& op, int warp) {
  using L = MmaLayout;
  SimThread* lanes_base = &threads_[size_t(warp) * kWarpSize];
  float a[16][16], b[16][8], c[16][8];
  for (int lane = 0; lane < int(kWarpSize); ++lane) {
    const uint32_t* w = lanes_base[lane].lane_in.words;  // a: 0-3, b: 4-5, c: 6-9
    for (int i = 0; i < 8; ++i) a[L::a_row(lane, i)][L::a_col(lane, i)] = unpack(op.op, w[i / 2], i % 2);
    for (int i = 0; i < 4; ++i)
      b[L::b_row(lane, i)][L::b_col(lane, i)] = unpack(op.op, w[4 + i / 2], i % 2);
    for (int i = 0; i < 4; ++i) c[L::c_row(lane, i)][L::c_col(lane, i)] = bits_to_float(w[6 + i]);
  }
  for (int lane = 0; lane < int(kWarpSize); ++lane) {
    LaneOut& out = lanes_base[lane].lane_out;
    for (int i = 0; i < 4; ++i) {
      const int row = L::c_row(lane, i), col = L::c_col(lane, i);
      // Products of 16-bit inputs are exact in f32; the sum is accumulated in f32.
      float acc = c[row][col];
      for (int k = 0; k < 16; ++k) acc = std::fma(a[row][k], b[k][col], acc);
      std::memcpy(&out.words[i], &acc, sizeof acc);
    }
  }
}

// ---- device API entry points ------------------------------------------------------------

LaneOut warp_collective(WarpOp op, unsigned mask, const LaneIn& in, std::source_location loc) {
  return running(warp_op_name(op)).warp_collective(op, mask, in, Site::from(loc));
}

void mma_sync(WarpOp op, float* d, const uint32_t* a, const uint32_t* b, const float* c,
              std::source_location loc) {
  LaneIn in{};
  std::memcpy(in.words, a, 4 * sizeof(uint32_t));
  std::memcpy(in.words + 4, b, 2 * sizeof(uint32_t));
  std::memcpy(in.words + 6, c, 4 * sizeof(float));
  in.size = sizeof in.words;
  const LaneOut out = warp_collective(op, 0xffffffffu, in, loc);
  std::memcpy(d, out.words, 4 * sizeof(float));
}

}  // namespace tessera::cuda::sim::detail
