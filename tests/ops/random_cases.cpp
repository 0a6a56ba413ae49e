// Harness cases for the Philox-stream ops (rand, randn, dropout), checked against an
// independent plain implementation of Philox4x32-10 written from the paper (Salmon et al.,
// SC'11) and verified on its published known-answer vectors, plus statistical checks.

#include <gtest/gtest.h>

#include <cmath>

#include "ops/harness.h"
#include "tessera/core/detail/philox.h"

namespace tessera::testing {
namespace {

// ---- reference Philox4x32-10 over a full 128-bit counter ----
struct Words {
  uint32_t w[4];
};

Words ref_philox(Words ctr, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = uint64_t(0xD2511F53u) * ctr.w[0];
    uint64_t p1 = uint64_t(0xCD9E8D57u) * ctr.w[2];
    Words next;
    next.w[0] = uint32_t(p1 >> 32) ^ ctr.w[1] ^ k0;
    next.w[1] = uint32_t(p1);
    next.w[2] = uint32_t(p0 >> 32) ^ ctr.w[3] ^ k1;
    next.w[3] = uint32_t(p0);
    ctr = next;
    k0 += 0x9E3779B9u;  // the Weyl key schedule: golden ratio and sqrt(3) - 1
    k1 += 0xBB67AE85u;
  }
  return ctr;
}

// Stream block b of key `seed`: the 64-bit block number fills the low two counter words.
Words ref_block(uint64_t seed, uint64_t block) {
  return ref_philox({{uint32_t(block), uint32_t(block >> 32), 0, 0}}, uint32_t(seed),
                    uint32_t(seed >> 32));
}

// The documented mappings (cpu_random.cpp): uniform from the top 24 bits of stream position i;
// normal from Box-Muller on lanes (0, 1) or (2, 3) of block i / 2.
double ref_uniform(uint64_t seed, uint64_t i) {
  uint32_t bits = ref_block(seed, i / 4).w[i % 4];
  return std::ldexp(double(bits >> 8), -24);
}

double ref_normal(uint64_t seed, uint64_t i) {
  Words b = ref_block(seed, i / 2);
  int lane = int(i % 2) * 2;
  double u1 = std::ldexp(double(b.w[lane] >> 8) + 1.0, -24);  // (0, 1], so log is finite
  double u2 = std::ldexp(double(b.w[lane + 1] >> 8), -24);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

bool ref_keep(uint64_t seed, uint64_t i, double p) {
  uint32_t bits = ref_block(seed, i / 4).w[i % 4];
  return double(bits) >= std::floor(p * 4294967296.0);
}

// Parameters travel as tensors so the harness can move them to other devices.
Tensor key_tensor(uint64_t seed, uint64_t offset) {
  return from_vector<int64_t>({int64_t(seed), int64_t(offset)}, Shape{2});
}

struct Key {
  uint64_t seed, offset;
};

Key read_key(const Tensor& t) {
  std::vector<int64_t> v = to_vector<int64_t>(t);
  return {uint64_t(v[0]), uint64_t(v[1])};
}

// Offsets past 2^34 put bits in the counter's second word.
uint64_t random_offset(CaseRng& rng) {
  return rng.coin() ? uint64_t(rng.size(0, 1000)) : (uint64_t(1) << 34) + uint64_t(rng.size(0, 7));
}

// Creation ops draw into the shape, dtype and device of a template tensor.
OpCase draw_case(const std::string& name, bool normal) {
  OpCase c;
  c.name = name;
  c.make_inputs = [](CaseRng& rng, DType dt) {
    Tensor like = empty(rng.shape(int(rng.size(0, 3)), 1, 40), dt);
    Tensor key = key_tensor(uint64_t(rng.size(0, 1 << 30)) * 2654435761u, random_offset(rng));
    // lo/hi or mean/std, quarter-integers so they are exact in every float type.
    Tensor args =
        from_vector<double>({double(rng.size(-8, 0)) / 4, double(rng.size(1, 12)) / 4}, Shape{2});
    return std::vector<Tensor>{like, key, args};
  };
  c.run = [normal](const std::vector<Tensor>& in) {
    Key k = read_key(in[1]);
    std::vector<double> a = to_vector<double>(in[2]);
    Generator gen(k.seed, k.offset);
    const Tensor& like = in[0];
    return normal ? randn(like.shape(), gen, like.dtype(), like.device(), a[0], a[1])
                  : rand(like.shape(), gen, like.dtype(), like.device(), a[0], a[0] + a[1]);
  };
  c.reference = [normal](const std::vector<Tensor>& in) {
    Key k = read_key(in[1]);
    std::vector<double> a = to_vector<double>(in[2]);
    HostTensor out(in[0].shape());
    for (size_t i = 0; i < out.v.size(); ++i) {
      uint64_t pos = k.offset + i;
      out.v[i] =
          normal ? a[0] + a[1] * ref_normal(k.seed, pos) : a[0] + a[1] * ref_uniform(k.seed, pos);
    }
    return out.to_tensor();
  };
  // The kernel computes the same double and rounds it once to f32: half an f32 ulp, 2^-24
  // relative (and libm's log/cos agree to well below that).
  c.rtol = 1e-7;
  c.atol = 1e-12;
  return c;
}

}  // namespace

TESSERA_OP_CASE(rand) {
  return draw_case("rand", false);
}
TESSERA_OP_CASE(randn) {
  return draw_case("randn", true);
}

TESSERA_OP_CASE(dropout) {
  OpCase c;
  c.name = "dropout";
  c.make_inputs = [](CaseRng& rng, DType dt) {
    Tensor x = rng.tensor(rng.shape(int(rng.size(1, 3)), 1, 7), dt);
    const double ps[] = {0.0, 0.1, 0.5, 0.875};
    Tensor p = from_vector<double>({ps[rng.size(0, 3)]}, Shape{1});
    return std::vector<Tensor>{x, key_tensor(uint64_t(rng.size(1, 1 << 20)), random_offset(rng)),
                               p};
  };
  // A fixed key makes dropout a fixed linear map, so gradcheck applies.
  c.run = [](const std::vector<Tensor>& in) {
    Key k = read_key(in[1]);
    return tessera::dropout(in[0], to_vector<double>(in[2])[0], k.seed, k.offset);
  };
  c.reference = [](const std::vector<Tensor>& in) {
    Key k = read_key(in[1]);
    double p = to_vector<double>(in[2])[0];
    HostTensor x(in[0]);
    for (size_t i = 0; i < x.v.size(); ++i)
      x.v[i] = ref_keep(k.seed, k.offset + i, p) ? x.v[i] / (1 - p) : 0.0;
    return x.to_tensor();
  };
  // f32 computes x * f32(1 / (1 - p)): two roundings, at most 2^-23 relative.
  c.rtol = 2.5e-7;
  c.atol = 0;
  c.grad_inputs = {0};
  return c;
}

namespace {

TEST(PhiloxReference, MatchesPublishedKnownAnswers) {
  // Random123's kat_vectors for philox4x32-10.
  Words a = ref_philox({{0, 0, 0, 0}}, 0, 0);
  EXPECT_EQ(a.w[0], 0x6627e8d5u);
  EXPECT_EQ(a.w[1], 0xe169c58du);
  EXPECT_EQ(a.w[2], 0xbc57ac4cu);
  EXPECT_EQ(a.w[3], 0x9b00dbd8u);
  Words b = ref_philox({{~0u, ~0u, ~0u, ~0u}}, ~0u, ~0u);
  EXPECT_EQ(b.w[0], 0x408f276du);
  EXPECT_EQ(b.w[1], 0x41c83b0eu);
  EXPECT_EQ(b.w[2], 0xa20bc7c6u);
  EXPECT_EQ(b.w[3], 0x6d5451fdu);
  Words c =
      ref_philox({{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u);
  EXPECT_EQ(c.w[0], 0xd16cfe09u);
  EXPECT_EQ(c.w[1], 0x94fdccebu);
  EXPECT_EQ(c.w[2], 0x5001e420u);
  EXPECT_EQ(c.w[3], 0x24126ea1u);
}

TEST(PhiloxReference, LibraryBitsMatchReference) {
  for (uint64_t seed : {uint64_t(0), uint64_t(42), uint64_t(0x123456789abcdefull)}) {
    for (uint64_t i : {uint64_t(0), uint64_t(5), (uint64_t(1) << 35) + 3, ~uint64_t(0) - 2}) {
      Words w = ref_block(seed, i / 4);
      EXPECT_EQ(philox::bits(seed, i), w.w[i % 4]) << "seed " << seed << " position " << i;
    }
  }
}

TEST(RandomDraws, F64DrawsMatchReference) {
  // No final rounding in f64, so only the order of double operations can differ (an FMA).
  Generator gen(77, 5);
  std::vector<double> u = to_vector<double>(rand({1001}, gen, DType::f64));
  std::vector<double> z = to_vector<double>(randn({1001}, gen, DType::f64));
  for (size_t i = 0; i < u.size(); ++i) {
    EXPECT_NEAR(u[i], ref_uniform(77, 5 + i), 1e-15);
    EXPECT_NEAR(z[i], ref_normal(77, 1006 + i), 1e-14);  // |z| < 6, libm accurate to ~1 ulp
  }
  EXPECT_EQ(gen.offset(), 5u + 2002u);
}

TEST(RandomDraws, MomentsMatchDistribution) {
  const int64_t n = int64_t(1) << 20;
  Generator gen(2024);
  Tensor u = rand({n}, gen);
  Tensor z = randn({n}, gen, DType::f32, Device::cpu(), 1.5, 2.0);
  auto moments = [](const Tensor& t) {
    double mean = ops::mean(ops::cast(t, DType::f64)).item<double>();
    Tensor c = ops::sub(ops::cast(t, DType::f64), mean);
    return std::pair<double, double>{mean, std::sqrt(ops::mean(ops::mul(c, c)).item<double>())};
  };
  // Bounds are 5 standard errors for n = 2^20: sd / 1024 for the mean, and the standard
  // error of the sample sd (sd * sqrt(kurtosis excess + 2) / (2 sqrt(n)), ~ sd / 2048).
  auto [um, us] = moments(u);
  EXPECT_NEAR(um, 0.5, 5 * 0.2887 / 1024);
  EXPECT_NEAR(us, std::sqrt(1.0 / 12), 5 * 0.2887 / 2048);
  auto [zm, zs] = moments(z);
  EXPECT_NEAR(zm, 1.5, 5 * 2.0 / 1024);
  EXPECT_NEAR(zs, 2.0, 5 * 2.0 * std::sqrt(2.0) / 2048);
  std::vector<float> uv = to_vector<float>(u);
  EXPECT_GE(*std::min_element(uv.begin(), uv.end()), 0.0f);
  EXPECT_LT(*std::max_element(uv.begin(), uv.end()), 1.0f);
}

TEST(Dropout, KeepsAboutOneMinusP) {
  const int64_t n = int64_t(1) << 18;
  for (double p : {0.1, 0.5, 0.9}) {
    Tensor y = ops::dropout(ones({n}), p, 11, 0);
    std::vector<float> v = to_vector<float>(y);
    int64_t kept = 0;
    for (float f : v) {
      if (f != 0.0f) {
        ++kept;
        ASSERT_FLOAT_EQ(f, float(1 / (1 - p)));
      }
    }
    // Binomial(n, 1 - p): 5 standard deviations.
    double sd = std::sqrt(double(n) * p * (1 - p));
    EXPECT_NEAR(double(kept), double(n) * (1 - p), 5 * sd) << "p = " << p;
  }
}

TEST(Dropout, MaskFollowsLogicalOrderForStridedInput) {
  Generator g(3);
  Tensor base = randn({6, 5}, g);
  Tensor xt = ops::transpose(base, 0, 1);  // non-contiguous [5, 6]
  Tensor a = ops::dropout(xt, 0.5, 9, 100);
  Tensor b = ops::dropout(ops::contiguous(xt), 0.5, 9, 100);
  EXPECT_TRUE(equal(a, b));
}

TEST(Dropout, RejectsBadProbability) {
  Tensor x = ones({4});
  for (double p : {-0.1, 1.0, 1.5, std::nan("")}) {
    try {
      ops::dropout(x, p, 0, 0);
      ADD_FAILURE() << "p = " << p << " was accepted";
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("dropout: p must be in [0, 1)"), std::string::npos) << msg;
      EXPECT_NE(msg.find("f32[4]"), std::string::npos) << msg;
    }
  }
  EXPECT_THROW(ops::dropout(ones({4}, DType::i64), 0.5, 0, 0), Error);
}

TEST(Dropout, ZeroProbabilityIsIdentityButAdvancesTheStream) {
  Tensor x = ones({7});
  x.set_requires_grad(true);
  Generator gen(1, 10);
  Tensor y = tessera::dropout(x, 0.0, gen);
  EXPECT_TRUE(y.is_same(x));
  EXPECT_EQ(gen.offset(), 17u);
  // A rejected call leaves the generator where it was.
  EXPECT_THROW(tessera::dropout(x, 2.0, gen), Error);
  EXPECT_EQ(gen.offset(), 17u);
}

TEST(Dropout, BackwardAppliesTheForwardMask) {
  Generator data(5);
  Tensor x = randn({33, 17}, data);
  x.set_requires_grad(true);
  Generator gen(123, 7);
  Tensor y = tessera::dropout(x, 0.3, gen);
  Tensor gy = randn({33, 17}, data);
  y.backward(gy);
  // The mask is where y is nonzero (x is never exactly zero in this draw).
  Tensor expect = ops::dropout(gy, 0.3, 123, 7);
  EXPECT_TRUE(equal(x.grad(), expect));
  std::vector<float> yv = to_vector<float>(y), gv = to_vector<float>(x.grad());
  for (size_t i = 0; i < yv.size(); ++i) EXPECT_EQ(yv[i] == 0.0f, gv[i] == 0.0f) << i;
}

}  // namespace
}  // namespace tessera::testing
