// Warp collectives in the simulator against a model written from the CUDA programming guide:
// every shuffle form and width, votes, reductions, disjoint lane groups, back-to-back
// collectives, partial warps (lanes past the block's last thread do not exist) and poison for
// a source lane that does not take part.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "tessera/cuda/device.h"
#include "tessera/cuda/sim/device_memory.h"
#include "tests/cuda/sim_test_util.h"

namespace tessera::cuda {
namespace {

using testing::config;
using testing::expect_error;

constexpr unsigned kFull = 0xffffffffu;
constexpr int kPoison = -1;  // all bits set

enum Form { kIdx, kUp, kDown, kXor };

// The guide's rules, per lane of a warp of `lanes` existing lanes; the source lane's value is
// 1000 * warp + 10 * lane + 1.
int model(Form form, int lane, int warp, int lanes, int param, int width) {
  const int segment = lane / width * width;
  int src = lane;
  switch (form) {
    case kIdx: src = segment + param % width; break;
    case kUp: src = lane % width >= param ? lane - param : lane; break;
    case kDown: src = lane % width + param < width ? lane + param : lane; break;
    case kXor: src = (lane ^ param) < segment + width ? lane ^ param : lane; break;
  }
  return src < lanes ? 1000 * warp + 10 * src + 1 : kPoison;
}

__global__ void shuffle_all(int* out, float* out_f, int form, int param, int width) {
  const int t = int(threadIdx.x), lane = t % 32, warp = t / 32;
  const int v = 1000 * warp + 10 * lane + 1;
  int r = 0;
  float rf = 0.0f;
  switch (form) {
    case kIdx:
      r = __shfl_sync(kFull, v, param, width);
      rf = __shfl_sync(kFull, float(v), param, width);
      break;
    case kUp:
      r = __shfl_up_sync(kFull, v, unsigned(param), width);
      rf = __shfl_up_sync(kFull, float(v), unsigned(param), width);
      break;
    case kDown:
      r = __shfl_down_sync(kFull, v, unsigned(param), width);
      rf = __shfl_down_sync(kFull, float(v), unsigned(param), width);
      break;
    default:
      r = __shfl_xor_sync(kFull, v, param, width);
      rf = __shfl_xor_sync(kFull, float(v), param, width);
      break;
  }
  out[t] = r;
  out_f[t] = rf;
}

struct ShuffleCase {
  Form form;
  int param, width;
};

class SimShuffle : public ::testing::TestWithParam<ShuffleCase> {};

TEST_P(SimShuffle, MatchesTheProgrammingGuideIncludingPartialWarps) {
  const ShuffleCase c = GetParam();
  constexpr int kThreads = 80;  // warps of 32, 32 and 16 lanes
  sim::DeviceBuffer<int> out(kThreads, "out");
  sim::DeviceBuffer<float> out_f(kThreads, "out_f");
  launch(shuffle_all, config(dim3(1), dim3(kThreads), "shuffle"), out.data(), out_f.data(),
         int(c.form), c.param, c.width);
  for (int t = 0; t < kThreads; ++t) {
    const int warp = t / 32, lanes = warp == 2 ? 16 : 32;
    const int expected = model(c.form, t % 32, warp, lanes, c.param, c.width);
    EXPECT_EQ(out[size_t(t)], expected) << "thread " << t;
    if (expected == kPoison) {
      EXPECT_TRUE(std::isnan(out_f[size_t(t)])) << "thread " << t;
    } else {
      EXPECT_EQ(out_f[size_t(t)], float(expected)) << "thread " << t;
    }
  }
}

std::vector<ShuffleCase> shuffle_cases() {
  std::vector<ShuffleCase> cases;
  for (int width : {32, 16, 8, 4, 2, 1}) {
    for (int param : {0, 1, 3, 5, 16, 31}) {
      for (Form form : {kIdx, kUp, kDown, kXor}) cases.push_back({form, param, width});
    }
  }
  return cases;
}

std::string shuffle_case_text(const ShuffleCase& c) {
  static constexpr const char* kForms[] = {"idx", "up", "down", "xor"};
  return std::string(kForms[int(c.form)]) + "_param" + std::to_string(c.param) + "_width" +
         std::to_string(c.width);
}
std::string shuffle_case_name(const ::testing::TestParamInfo<ShuffleCase>& info) {
  return shuffle_case_text(info.param);
}
// How gtest (and ctest's test names) print a case.
void PrintTo(const ShuffleCase& c, std::ostream* os) { *os << shuffle_case_text(c); }

INSTANTIATE_TEST_SUITE_P(AllForms, SimShuffle, ::testing::ValuesIn(shuffle_cases()),
                         shuffle_case_name);

__global__ void shuffle_types(double* out_d, long long* out_ll, unsigned short* out_bf) {
  const int lane = int(threadIdx.x);
  out_d[lane] = __shfl_xor_sync(kFull, 0.5 + lane, 1);
  out_ll[lane] = __shfl_sync(kFull, (1LL << 40) + lane, 31 - lane);
  out_bf[lane] = __bfloat16_as_ushort(__shfl_down_sync(kFull, __float2bfloat16(float(lane)), 2));
}

TEST(SimWarp, ShufflesMoveEightAndTwoByteTypesWhole) {
  sim::DeviceBuffer<double> d(32, "d");
  sim::DeviceBuffer<long long> ll(32, "ll");
  sim::DeviceBuffer<unsigned short> bf(32, "bf");
  launch(shuffle_types, config(dim3(1), dim3(32), "types"), d.data(), ll.data(), bf.data());
  for (int lane = 0; lane < 32; ++lane) {
    EXPECT_EQ(d[size_t(lane)], 0.5 + (lane ^ 1));
    EXPECT_EQ(ll[size_t(lane)], (1LL << 40) + (31 - lane));
    const int src = lane + 2 < 32 ? lane + 2 : lane;
    EXPECT_EQ(bf[size_t(lane)], BFloat16(float(src)).bits);
  }
}

__global__ void votes(unsigned* out) {
  const int t = int(threadIdx.x), lane = t % 32;
  out[8 * t + 0] = __ballot_sync(kFull, lane % 3 == 0);
  out[8 * t + 1] = unsigned(__any_sync(kFull, lane == 7));
  out[8 * t + 2] = unsigned(__all_sync(kFull, lane < 31));
  out[8 * t + 3] = unsigned(__all_sync(kFull, lane >= 0));
  // Two disjoint half-warp groups vote at the same time with their own masks.
  const unsigned half = lane < 16 ? 0x0000ffffu : 0xffff0000u;
  out[8 * t + 4] = __ballot_sync(half, lane % 2 == 0);
  out[8 * t + 5] = __activemask();
  out[8 * t + 6] = unsigned(__any_sync(half, lane == 20));
  __syncwarp();
  out[8 * t + 7] = __ballot_sync(kFull, 1);
}

TEST(SimWarp, VotesCoverTheLanesThatExistAndTheirMask) {
  constexpr int kThreads = 40;  // a full warp and a warp of 8 lanes
  sim::DeviceBuffer<unsigned> out(8 * kThreads, "out");
  launch(votes, config(dim3(1), dim3(kThreads), "votes"), out.data());
  for (int t = 0; t < kThreads; ++t) {
    const int lane = t % 32;
    const bool full = t < 32;
    const unsigned exists = full ? kFull : 0xffu;
    EXPECT_EQ(out[size_t(8 * t + 0)], 0x49249249u & exists) << t;
    EXPECT_EQ(out[size_t(8 * t + 1)], 1u) << t;  // lane 7 exists in both warps
    EXPECT_EQ(out[size_t(8 * t + 2)], full ? 0u : 1u) << t;
    EXPECT_EQ(out[size_t(8 * t + 3)], 1u) << t;
    const unsigned half = lane < 16 ? 0x0000ffffu : 0xffff0000u;
    EXPECT_EQ(out[size_t(8 * t + 4)], 0x55555555u & half & exists) << t;
    EXPECT_EQ(out[size_t(8 * t + 5)], exists) << t;
    EXPECT_EQ(out[size_t(8 * t + 6)], lane >= 16 && full ? 1u : 0u) << t;
    EXPECT_EQ(out[size_t(8 * t + 7)], exists) << t;
  }
}

__global__ void reductions(int* out) {
  const int lane = int(threadIdx.x);
  const int v = lane % 2 == 0 ? lane : -lane;
  out[0 * 32 + lane] = __reduce_add_sync(kFull, v);
  out[1 * 32 + lane] = __reduce_min_sync(kFull, v);
  out[2 * 32 + lane] = __reduce_max_sync(kFull, v);
  out[3 * 32 + lane] = int(__reduce_add_sync(kFull, unsigned(lane)));
  out[4 * 32 + lane] = int(__reduce_min_sync(kFull, unsigned(lane + 5)));
  out[5 * 32 + lane] = int(__reduce_max_sync(kFull, unsigned(lane * 3)));
  out[6 * 32 + lane] = int(__reduce_and_sync(kFull, 0xf0u | (1u << (lane % 4))));
  out[7 * 32 + lane] = int(__reduce_or_sync(kFull, 1u << lane));
  out[8 * 32 + lane] = int(__reduce_xor_sync(kFull, unsigned(lane)));
}

TEST(SimWarp, ReductionsOverTheWarp) {
  sim::DeviceBuffer<int> out(9 * 32, "out");
  launch(reductions, config(dim3(1), dim3(32), "reductions"), out.data());
  // Even lanes add, odd lanes subtract: (0+2+...+30) - (1+3+...+31) = 240 - 256.
  const int expected[9] = {-16, -31, 30, 496, 5, 93, 0xf0, int(kFull), 0};
  for (int op = 0; op < 9; ++op)
    for (int lane = 0; lane < 32; ++lane)
      EXPECT_EQ(out[size_t(op * 32 + lane)], expected[op]) << "reduction " << op;
}

// 100 rotations by one lane, with a vote between each: collectives back to back must not mix.
__global__ void back_to_back(int* out, unsigned* ballots) {
  const int lane = int(threadIdx.x);
  int v = lane;
  unsigned seen = 0;
  for (int i = 0; i < 100; ++i) {
    v = __shfl_sync(kFull, v, (lane + 1) % 32);
    seen |= __ballot_sync(kFull, v == 0);
  }
  out[lane] = v;
  ballots[lane] = seen;
}

TEST(SimWarp, BackToBackCollectivesStaySeparate) {
  sim::ScopedOptions scoped(testing::options_with(sim::Schedule::kReverse));
  sim::DeviceBuffer<int> out(32, "out");
  sim::DeviceBuffer<unsigned> ballots(32, "ballots");
  launch(back_to_back, config(dim3(1), dim3(32), "back_to_back"), out.data(), ballots.data());
  for (int lane = 0; lane < 32; ++lane) {
    EXPECT_EQ(out[size_t(lane)], (lane + 100) % 32);
    EXPECT_EQ(ballots[size_t(lane)], kFull);  // the zero visits every lane within 32 rotations
  }
}

__global__ void bad_width() { (void)__shfl_sync(kFull, 1, 0, 12); }

TEST(SimWarp, AWidthThatIsNoPowerOfTwoIsAnError) {
  expect_error([] { launch(bad_width, config(dim3(1), dim3(32), "bad_width")); },
               {"kernel 'bad_width'", "__shfl_sync", "width 12", "power of 2"});
}

}  // namespace
}  // namespace tessera::cuda
