// Harness cases for causal attention, paged attention and RoPE, plus their error messages,
// layouts and reduced-precision paths.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "ops/harness.h"
#include "tessera/core/ops/paged_attention.h"

namespace tessera::testing {
namespace {

// q [B, H, Tq, D], k, v [B, Hkv, Tk, D] and a 0-d scale (0 selects 1/sqrt(D)). Most trials are
// small (gradcheck runs two forwards per input element); one in four is long enough to cross
// the kernel's 64-row tiles, with a sequence length that is no multiple of 64.
std::vector<Tensor> attention_inputs(CaseRng& rng, DType dt) {
  int64_t B = 1, Hkv = 1, group = 2, Tk, D = 4;
  if (rng.size(0, 3) == 0) {
    Tk = rng.size(65, 100);
  } else {
    B = rng.size(1, 2);
    Hkv = rng.size(1, 2);
    group = rng.size(1, 3);
    Tk = rng.size(1, 13);
    D = rng.size(4, 24);
  }
  const int64_t H = Hkv * group, Tq = rng.coin() ? Tk : rng.size(1, Tk);
  Tensor q, k, v;
  if (rng.coin()) {
    // Slices of one fused projection [B, Tk, H + 2 Hkv, D], as a model builds them; q holds
    // the last Tq positions (the new tokens of a KV-cache step).
    Tensor fused = rng.tensor(Shape{B, Tk, H + 2 * Hkv, D}, dt);
    q = ops::transpose(ops::slice(ops::slice(fused, 2, 0, H), 1, Tk - Tq, Tk), 1, 2);
    k = ops::transpose(ops::slice(fused, 2, H, H + Hkv), 1, 2);
    v = ops::transpose(ops::slice(fused, 2, H + Hkv, H + 2 * Hkv), 1, 2);
  } else {
    q = rng.tensor(Shape{B, H, Tq, D}, dt);
    k = rng.tensor(Shape{B, Hkv, Tk, D}, dt);
    v = rng.tensor(Shape{B, Hkv, Tk, D}, dt);
  }
  return {q, k, v, scalar_tensor(rng.coin() ? 0.0 : 0.7, DType::f64)};
}

// Full softmax over the visible keys, in f64 plain loops.
Tensor attention_reference(const std::vector<Tensor>& in) {
  HostTensor q(in[0]), k(in[1]), v(in[2]);
  const int64_t B = q.shape[0], H = q.shape[1], Tq = q.shape[2], D = q.shape[3];
  const int64_t Hkv = k.shape[1], Tk = k.shape[2];
  double scale = in[3].item<double>();
  if (scale <= 0) scale = 1 / std::sqrt(double(D));
  HostTensor out(q.shape);
  std::vector<double> p(static_cast<size_t>(Tk));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Tq; ++i) {
        const int64_t hk = h / (H / Hkv), last = Tk - Tq + i;
        const double* qi = &q.v[size_t(((b * H + h) * Tq + i) * D)];
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j <= last; ++j) {
          const double* kj = &k.v[size_t(((b * Hkv + hk) * Tk + j) * D)];
          double s = 0;
          for (int64_t d = 0; d < D; ++d) s += qi[d] * kj[d];
          p[size_t(j)] = scale * s;
          mx = std::max(mx, p[size_t(j)]);
        }
        for (int64_t j = 0; j <= last; ++j) sum += p[size_t(j)] = std::exp(p[size_t(j)] - mx);
        double* oi = &out.v[size_t(((b * H + h) * Tq + i) * D)];
        for (int64_t j = 0; j <= last; ++j)
          for (int64_t d = 0; d < D; ++d)
            oi[d] += p[size_t(j)] / sum * v.v[size_t(((b * Hkv + hk) * Tk + j) * D + d)];
      }
  return out.to_tensor();
}

}  // namespace

TESSERA_OP_CASE(attention) {
  OpCase c;
  c.name = "attention";
  c.make_inputs = attention_inputs;
  c.run = [](const std::vector<Tensor>& in) {
    return causal_attention(in[0], in[1], in[2], in[3].item<double>());
  };
  c.reference = attention_reference;
  c.grad_inputs = {0, 1, 2};
  // f32: logits are dots of <= 24 unit normals (rounding ~1e-6), the output a convex
  // combination of values of size ~3; both stay well inside 1e-5.
  c.rtol = 1e-5;
  c.atol = 1e-5;
  return c;
}

namespace {

// x [B, T, H, D] (D even) and a f64 pair {pos_offset, theta}.
std::vector<Tensor> rope_inputs(CaseRng& rng, DType dt) {
  const int64_t B = rng.size(1, 2), T = rng.size(1, 9), H = rng.size(1, 3), D = 2 * rng.size(1, 8);
  // A head slice of a wider buffer (unit stride in D, strided heads), or CaseRng's views
  // (which include layouts with D not innermost, copied by the front end).
  Tensor x = rng.coin() ? ops::narrow(rng.tensor(Shape{B, T, H + 2, D}, dt), 2, 1, H)
                        : rng.tensor(Shape{B, T, H, D}, dt);
  const double pos_offset = double(rng.size(0, 50)), theta = rng.coin() ? 10000.0 : 500.0;
  return {x, from_vector<double>({pos_offset, theta}, Shape{2})};
}

Tensor rope_reference(const std::vector<Tensor>& in) {
  HostTensor x(in[0]);
  std::vector<double> pt = to_vector<double>(in[1]);
  HostTensor out(x.shape);
  const int64_t D = x.shape[3], half = D / 2;
  for_each_index(Shape{x.shape[0], x.shape[1], x.shape[2]}, [&](const std::vector<int64_t>& i) {
    const int64_t row = x.index({i[0], i[1], i[2], 0});
    for (int64_t d = 0; d < half; ++d) {
      const double angle = (pt[0] + double(i[1])) * std::pow(pt[1], -2.0 * double(d) / double(D));
      const double x1 = x.v[size_t(row + d)], x2 = x.v[size_t(row + half + d)];
      out.v[size_t(row + d)] = x1 * std::cos(angle) - x2 * std::sin(angle);
      out.v[size_t(row + half + d)] = x2 * std::cos(angle) + x1 * std::sin(angle);
    }
  });
  return out.to_tensor();
}

}  // namespace

TESSERA_OP_CASE(rope) {
  OpCase c;
  c.name = "rope";
  c.make_inputs = rope_inputs;
  c.run = [](const std::vector<Tensor>& in) {
    std::vector<double> pt = to_vector<double>(in[1]);
    return tessera::rope(in[0], int64_t(pt[0]), pt[1]);
  };
  c.reference = rope_reference;
  c.grad_inputs = {0};
  // f32: two products of an input (|x| < ~4) with a cos/sin rounded to f32 (1.2e-7).
  c.rtol = 1e-5;
  c.atol = 1e-5;
  return c;
}

namespace {

Tensor normal(const Shape& s, uint64_t seed, DType dt = DType::f32) {
  Generator gen(seed);
  return ops::cast(randn(s, gen), dt);
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(Attention, BadInputsNameOpShapesAndDtypes) {
  Tensor q = normal({1, 3, 4, 8}, 1), k = normal({1, 2, 4, 8}, 2);
  std::string msg = error_of([&] { ops::attention_forward(q, k, k); });
  EXPECT_NE(msg.find("attention"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[1, 3, 4, 8]"), std::string::npos) << msg;  // H = 3 is not a multiple of 2
  EXPECT_NE(msg.find("[1, 2, 4, 8]"), std::string::npos) << msg;

  Tensor long_q = normal({1, 2, 5, 8}, 3);
  msg = error_of([&] { ops::attention_forward(long_q, k, k); });
  EXPECT_NE(msg.find("Tq <= Tk"), std::string::npos) << msg;

  Tensor k64 = ops::cast(k, DType::f64);
  msg = error_of([&] { ops::attention_forward(normal({1, 2, 4, 8}, 4), k64, k64); });
  EXPECT_NE(msg.find("f32"), std::string::npos) << msg;
  EXPECT_NE(msg.find("f64"), std::string::npos) << msg;

  msg = error_of([&] { ops::attention_forward(normal({1, 2, 4, 6}, 5), k, k); });
  EXPECT_NE(msg.find("D = 6"), std::string::npos) << msg;

  msg = error_of([&] { ops::rope(normal({1, 2, 3, 5}, 6)); });
  EXPECT_NE(msg.find("rope"), std::string::npos) << msg;
  EXPECT_NE(msg.find("even"), std::string::npos) << msg;
}

TEST(Attention, OutputMergesHeadsWithAFreeView) {
  const int64_t B = 2, H = 3, T = 5, D = 4;
  Tensor out =
      causal_attention(normal({B, H, T, D}, 7), normal({B, H, T, D}, 8), normal({B, H, T, D}, 9));
  Tensor merged = ops::transpose(out, 1, 2);
  EXPECT_TRUE(merged.is_contiguous());
  Tensor flat = ops::view(merged, Shape{B, T, H * D});  // throws if a copy were needed
  EXPECT_EQ(flat.storage(), out.storage());
}

// A KV-cache step (one new query against the cached keys) matches the last row of attention
// over the whole sequence.
TEST(Attention, DecodeStepMatchesLastRowOfFullSequence) {
  const int64_t T = 77, D = 16;
  Tensor q = normal({1, 4, T, D}, 10), k = normal({1, 2, T, D}, 11), v = normal({1, 2, T, D}, 12);
  Tensor full = causal_attention(q, k, v);
  Tensor step = causal_attention(ops::narrow(q, 2, T - 1, 1), k, v);
  // Same math on the same inputs; only the GEMM shapes (1 row vs a 64-row tile) differ, which
  // may reorder f32 sums of 16 terms (~1e-7 relative).
  CloseReport r = compare_close(step, ops::narrow(full, 2, T - 1, 1), 1e-6, 1e-6);
  EXPECT_TRUE(r.ok) << r.message;
}

// bf16 and f16 tiles are widened to f32 and run the f32 code, so from the same (rounded)
// inputs they differ from f32 only by the final rounding of each result: one half ulp.
TEST(Attention, HalfPrecisionIsF32RoundedOnce) {
  const int64_t B = 1, H = 2, T = 90, D = 16;
  for (DType dt : {DType::bf16, DType::f16}) {
    const double ulp = dt == DType::bf16 ? 1.0 / 128 : 1.0 / 1024;  // 2^-7, 2^-10
    Tensor q = normal({B, H, T, D}, 13, dt), k = normal({B, H, T, D}, 14, dt),
           v = normal({B, H, T, D}, 15, dt), g = normal({B, H, T, D}, 16, dt);
    auto f32 = [](const Tensor& t) { return ops::cast(t, DType::f32); };
    ops::AttentionOutput lo = ops::attention_forward(q, k, v);
    ops::AttentionOutput hi = ops::attention_forward(f32(q), f32(k), f32(v));
    // Half an ulp relative; 1e-6 more for f32 sums that the two paths might order differently,
    // and 1e-6 absolute for f16 subnormals.
    const double rtol = ulp / 2 + 1e-6;
    EXPECT_TRUE(allclose(f32(lo.out), hi.out, rtol, 1e-6)) << dtype_name(dt);
    EXPECT_TRUE(allclose(lo.lse, hi.lse, 1e-6, 1e-6)) << dtype_name(dt);  // lse stays f32
    ops::AttentionGrads glo = ops::attention_backward(q, k, v, lo.out, lo.lse, g);
    ops::AttentionGrads ghi =
        ops::attention_backward(f32(q), f32(k), f32(v), f32(lo.out), lo.lse, f32(g));
    EXPECT_TRUE(allclose(f32(glo.gq), ghi.gq, rtol, 1e-6)) << dtype_name(dt);
    EXPECT_TRUE(allclose(f32(glo.gk), ghi.gk, rtol, 1e-6)) << dtype_name(dt);
    EXPECT_TRUE(allclose(f32(glo.gv), ghi.gv, rtol, 1e-6)) << dtype_name(dt);
  }
}

TEST(Rope, InverseUndoesTheRotation) {
  Tensor x = normal({2, 300, 3, 64}, 17);
  Tensor back = ops::rope(ops::rope(x, 5000, 10000.0), 5000, 10000.0, true);
  // Two rotations by f32 cos/sin (each off by <= 6e-8) of values below ~5.
  EXPECT_TRUE(allclose(back, x, 1e-6, 2e-6));
}

// Decoding with an offset rotates token t exactly like position pos_offset + t of the whole
// sequence.
TEST(Rope, OffsetMatchesPositionInFullSequence) {
  Tensor x = normal({1, 40, 2, 8}, 18, DType::f64);
  Tensor full = ops::rope(x, 0, 10000.0);
  Tensor tail = ops::rope(ops::narrow(x, 1, 30, 10), 30, 10000.0);
  EXPECT_TRUE(equal(tail, ops::narrow(full, 1, 30, 10)));
}

}  // namespace

namespace {

// A continuous-batching iteration: S sequences whose keys live in shuffled blocks of one pool;
// N tokens, each of some sequence at some position (a decode token, or one of a prefill chunk).
// Inputs: q [N, H, D] (sometimes a head slice of a fused projection), k_cache, v_cache,
// block_tables, token_seq, token_pos, and a 0-d scale.
std::vector<Tensor> paged_inputs(CaseRng& rng, DType dt) {
  const int64_t S = rng.size(1, 3), bs = rng.size(1, 5), Hkv = rng.size(1, 2);
  const int64_t H = Hkv * rng.size(1, 3), D = rng.size(1, 20);
  // Sequence lengths up to 140, past a 128-key tile of the GPU kernel.
  std::vector<int64_t> len(static_cast<size_t>(S));
  for (auto& n : len) n = rng.size(1, rng.coin() ? 12 : 140);
  int64_t max_blocks = 0, blocks = 0;
  for (int64_t n : len) {
    max_blocks = std::max(max_blocks, (n + bs - 1) / bs);
    blocks += (n + bs - 1) / bs;
  }
  blocks += rng.size(0, 3);  // free blocks left in the pool
  std::vector<int32_t> order(static_cast<size_t>(blocks));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng.engine());
  std::vector<int32_t> tables(static_cast<size_t>(S * max_blocks), -1);  // unused entries stay -1
  size_t next = 0;
  for (int64_t s = 0; s < S; ++s)
    for (int64_t b = 0; b < (len[size_t(s)] + bs - 1) / bs; ++b)
      tables[size_t(s * max_blocks + b)] = order[next++];
  std::vector<int32_t> seq, pos;
  for (int64_t s = 0; s < S; ++s) {
    const int64_t chunk = rng.size(1, std::min<int64_t>(len[size_t(s)], 4));
    for (int64_t p = len[size_t(s)] - chunk; p < len[size_t(s)]; ++p) {
      seq.push_back(int32_t(s));
      pos.push_back(int32_t(p));
    }
  }
  const int64_t N = int64_t(seq.size());
  Tensor q = rng.coin() ? ops::narrow(rng.tensor(Shape{N, H + 2 * Hkv, D}, dt), 1, 0, H)
                        : rng.tensor(Shape{N, H, D}, dt);
  return {q,
          contiguous(rng.tensor(Shape{blocks, bs, Hkv, D}, dt)),  // a pool is one buffer
          contiguous(rng.tensor(Shape{blocks, bs, Hkv, D}, dt)),
          from_vector<int32_t>(tables, Shape{S, max_blocks}),
          from_vector<int32_t>(seq, Shape{N}),
          from_vector<int32_t>(pos, Shape{N}),
          scalar_tensor(rng.coin() ? 0.0 : 0.7, DType::f64)};
}

// Each token's sequence gathered into contiguous rows through its block table, then the plain
// softmax over keys 0..p in f64.
Tensor paged_reference(const std::vector<Tensor>& in) {
  HostTensor q(in[0]), k(in[1]), v(in[2]);
  const std::vector<int32_t> tables = to_vector<int32_t>(in[3]);
  const std::vector<int32_t> seq = to_vector<int32_t>(in[4]), pos = to_vector<int32_t>(in[5]);
  const int64_t N = q.shape[0], H = q.shape[1], D = q.shape[2];
  const int64_t bs = k.shape[1], Hkv = k.shape[2], max_blocks = in[3].size(1);
  double scale = in[6].item<double>();
  if (scale <= 0) scale = 1 / std::sqrt(double(D));
  HostTensor out(Shape{N, H, D});
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t hk = h / (H / Hkv), last = pos[size_t(n)];
      std::vector<double> p(static_cast<size_t>(last + 1));
      double mx = -INFINITY, sum = 0;
      auto row = [&](int64_t j) {
        const int64_t block = tables[size_t(seq[size_t(n)] * max_blocks + j / bs)];
        return ((block * bs + j % bs) * Hkv + hk) * D;
      };
      for (int64_t j = 0; j <= last; ++j) {
        double s = 0;
        for (int64_t d = 0; d < D; ++d) s += q.at({n, h, d}) * k.v[size_t(row(j) + d)];
        p[size_t(j)] = scale * s;
        mx = std::max(mx, p[size_t(j)]);
      }
      for (double& x : p) sum += x = std::exp(x - mx);
      for (int64_t j = 0; j <= last; ++j)
        for (int64_t d = 0; d < D; ++d)
          out.at({n, h, d}) += p[size_t(j)] / sum * v.v[size_t(row(j) + d)];
    }
  return out.to_tensor();
}

}  // namespace

TESSERA_OP_CASE(paged_attention) {
  OpCase c;
  c.name = "paged_attention";
  c.make_inputs = paged_inputs;
  c.run = [](const std::vector<Tensor>& in) {
    return ops::paged_attention(in[0], in[1], in[2], in[3], in[4], in[5], in[6].item<double>());
  };
  c.reference = paged_reference;
  // Inference only: no gradient. f32: dots of <= 20 unit normals (rounding ~1e-6), the output a
  // convex combination of values of size ~3, as for causal attention.
  c.rtol = 1e-5;
  c.atol = 1e-5;
  return c;
}

// Every index the kernel would follow is checked first; each bad one is named.
TEST(PagedAttention, BadIndicesAreNamed) {
  const Tensor q = randn(Shape{2, 2, 4}, default_generator());
  const Tensor k = randn(Shape{3, 4, 1, 4}, default_generator());
  const Tensor tables = from_vector<int32_t>({0, 1, 2, -1}, Shape{2, 2});
  auto seq = [](std::vector<int32_t> v) { return from_vector<int32_t>(v, Shape{2}); };
  auto fails = [&](const Tensor& t, const Tensor& s, const Tensor& p, const std::string& says) {
    try {
      ops::paged_attention(q, k, k, t, s, p);
      ADD_FAILURE() << "accepted: " << says;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  fails(tables, seq({0, 2}), seq({0, 0}), "token 1 belongs to sequence 2, outside the 2 rows");
  fails(tables, seq({0, 1}), seq({8, 0}), "token 0 sits at position 8, beyond the 2 blocks of 4");
  fails(tables, seq({0, 1}), seq({0, 5}), "sequence 1's block 1 is -1, outside the pool of 3");
  fails(tables, seq({0, 1}), seq({-1, 0}), "token 0 sits at position -1");
  fails(ops::cast(tables, DType::i64), seq({0, 1}), seq({0, 0}), "must be contiguous i32");
  EXPECT_EQ(ops::paged_attention(q, k, k, tables, seq({0, 1}), seq({7, 3})).shape(),
            (Shape{2, 2, 4}));
}

}  // namespace tessera::testing
