// llm.c GPT-2 model files: a small file assembled here in llm.c's layout (header, then the 16
// stacked parameter arrays), imported, exported back byte for byte, and corrupted.

#include <gtest/gtest.h>

#include <array>
#include <cstring>

#include "tessera/nn/io/llmc.h"
#include "tessera/tessera.h"
#include "tests/nn/io_test_util.h"

namespace tessera::nn {
namespace {

using testing::error_of;
using testing::mentions;
using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

constexpr int32_t kMaxT = 5, kV = 11, kL = 2, kNH = 2, kC = 8, kVp = 16;

// Element offsets of llm.c's arrays for the sizes above (wte, wpe, ln1w, ..., lnfb).
constexpr int64_t kQkvw = 200, kFcprojb = 1896, kLnfb = 1920, kTotal = 1928;

std::string header(int32_t version, std::array<int32_t, 6> dims) {
  std::array<int32_t, 256> h{};
  h[0] = 20240326;
  h[1] = version;
  for (int i = 0; i < 6; ++i) h[2 + i] = dims[i];
  return std::string(reinterpret_cast<const char*>(h.data()), sizeof h);
}

// Parameter k holds the value k (exact in f32), except wte's padding rows, which llm.c writes
// as zeros.
std::vector<float> llmc_values() {
  std::vector<float> v(kTotal);
  for (int64_t k = 0; k < kTotal; ++k) v[k] = float(k);
  for (int64_t k = kV * kC; k < kVp * kC; ++k) v[k] = 0.0f;
  return v;
}

std::string fp32_file() {
  std::vector<float> v = llmc_values();
  return header(3, {kMaxT, kV, kL, kNH, kC, kVp}) +
         std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

TEST(Llmc, ImportSplitsTheStackedLayers) {
  TempDir dir;
  write_bytes(dir.file("gpt2.bin"), fp32_file());
  GPTConfig cfg;
  StateDict sd = import_llmc_gpt2(dir.file("gpt2.bin"), &cfg);
  EXPECT_EQ(cfg.block_size, kMaxT);
  EXPECT_EQ(cfg.vocab_size, kV);
  EXPECT_EQ(cfg.n_layer, kL);
  EXPECT_EQ(cfg.n_head, kNH);
  EXPECT_EQ(cfg.n_embd, kC);
  EXPECT_TRUE(cfg.tie_embeddings);
  EXPECT_EQ(sd.size(), size_t(4 + 12 * kL));

  // Layer 1's qkv weight is the second [3C, C] slice of qkvw, already [out, in].
  Tensor qkv = find_tensor(sd, "h.1.attn.c_attn.weight");
  ASSERT_EQ(qkv.shape(), Shape({3 * kC, kC}));
  std::vector<float> q = to_vector<float>(qkv);
  for (int64_t k = 0; k < 3 * kC * kC; ++k) ASSERT_EQ(q[k], float(kQkvw + 3 * kC * kC + k)) << k;
  EXPECT_EQ(to_vector<float>(find_tensor(sd, "h.1.mlp.c_proj.bias"))[0], float(kFcprojb + kC));
  EXPECT_EQ(to_vector<float>(find_tensor(sd, "ln_f.bias"))[kC - 1], float(kLnfb + kC - 1));

  // wte: 11 real rows, padded with zeros to Tessera's multiple of 64.
  Tensor wte = find_tensor(sd, "wte.weight");
  ASSERT_EQ(wte.shape(), Shape({64, kC}));
  std::vector<float> w = to_vector<float>(wte);
  EXPECT_EQ(w[kV * kC - 1], float(kV * kC - 1));
  for (int64_t k = kV * kC; k < 64 * kC; ++k) ASSERT_EQ(w[k], 0.0f) << k;
}

TEST(Llmc, ExportReproducesTheFileByteForByte) {
  TempDir dir;
  write_bytes(dir.file("in.bin"), fp32_file());
  GPTConfig cfg;
  StateDict sd = import_llmc_gpt2(dir.file("in.bin"), &cfg, /*vocab_multiple=*/kVp);
  export_llmc_gpt2(dir.file("out.bin"), sd, cfg);
  EXPECT_EQ(read_bytes(dir.file("out.bin")), read_bytes(dir.file("in.bin")));
}

TEST(Llmc, Bf16FilesRoundTrip) {
  TempDir dir;
  // Values that bf16 holds exactly: k mod 256 needs at most 8 significant bits.
  std::vector<float> v = llmc_values();
  std::vector<uint16_t> bits;
  for (float x : v) bits.push_back(BFloat16(float(int64_t(x) % 256)).bits);
  const std::string file = header(5, {kMaxT, kV, kL, kNH, kC, kVp}) +
                           std::string(reinterpret_cast<const char*>(bits.data()), bits.size() * 2);
  write_bytes(dir.file("bf16.bin"), file);
  GPTConfig cfg;
  StateDict sd = import_llmc_gpt2(dir.file("bf16.bin"), &cfg, kVp);
  EXPECT_EQ(find_tensor(sd, "wpe.weight").dtype(), DType::bf16);
  EXPECT_EQ(to_vector<float>(find_tensor(sd, "wpe.weight"))[3], float((kVp * kC + 3) % 256));
  export_llmc_gpt2(dir.file("out.bin"), sd, cfg, LlmcPrecision::bf16);
  EXPECT_EQ(read_bytes(dir.file("out.bin")), file);
}

TEST(Llmc, HostileHeadersAndSizes) {
  TempDir dir;
  const std::string path = dir.file("bad.bin");
  auto err = [&](const std::string& bytes) {
    write_bytes(path, bytes);
    return error_of([&] { import_llmc_gpt2(path, nullptr); });
  };
  const std::string good = fp32_file();
  const std::string body = good.substr(1024);
  auto with = [&](int32_t version, std::array<int32_t, 6> dims) {
    return header(version, dims) + body;
  };

  EXPECT_TRUE(mentions(err(""), {path, "0 bytes", "1024-byte header"}));
  EXPECT_TRUE(mentions(err(good.substr(0, 1000)), {path, "1000 bytes"}));
  std::string magic = good;
  magic[0] ^= 1;
  EXPECT_TRUE(mentions(err(magic), {path, "magic number 20240327 at offset 0", "20240326"}));
  EXPECT_TRUE(mentions(err(with(1, {kMaxT, kV, kL, kNH, kC, kVp})),
                       {path, "version 1 at offset 4", "3 (fp32) or 5 (bf16)"}));
  EXPECT_TRUE(mentions(err(with(3, {kMaxT, kV, kL, kNH, -8, kVp})),
                       {path, "header field C (offset 24) is -8"}));
  EXPECT_TRUE(mentions(err(with(3, {kMaxT, 17, kL, kNH, kC, kVp})),
                       {path, "V=17", "exceeds the padded Vp=16"}));
  EXPECT_TRUE(
      mentions(err(with(3, {kMaxT, kV, kL, 3, kC, kVp})), {path, "C=8", "not divisible by NH=3"}));
  // Truncated body, extra bytes, and sizes whose product overflows 64 bits.
  EXPECT_TRUE(mentions(err(good.substr(0, good.size() - 4)),
                       {path, "implies 8736 bytes", "has 8732", "truncated"}));
  EXPECT_TRUE(mentions(err(good + "xx"), {path, "implies 8736 bytes", "has 8738"}));
  EXPECT_TRUE(mentions(err(with(3, {kMaxT, kV, 2147483647, 1, 2147483647, kVp})),
                       {path, "more than 2^64"}));
  // Sizes that fit but describe a file far larger than this one: refused before allocating.
  EXPECT_TRUE(
      mentions(err(with(3, {1024, 50257, 12, 12, 768, 50304})), {path, "implies 497904640 bytes"}));
}

TEST(Llmc, ExportRejectsWhatLlmcCannotRun) {
  TempDir dir;
  GPTConfig untied;
  untied.n_layer = 1;
  untied.n_embd = 64;
  untied.n_head = untied.n_kv_head = 1;
  untied.tie_embeddings = false;
  EXPECT_TRUE(mentions(error_of([&] { export_llmc_gpt2(dir.file("x.bin"), {}, untied); }),
                       {"llm.c ties the head"}));
  GPTConfig llama = GPTConfig::preset("llama-tiny");
  EXPECT_TRUE(mentions(error_of([&] { export_llmc_gpt2(dir.file("x.bin"), {}, llama); }),
                       {"llm.c", "norm is rmsnorm"}));
  // A missing tensor leaves no file behind.
  write_bytes(dir.file("in.bin"), fp32_file());
  GPTConfig cfg;
  StateDict sd = import_llmc_gpt2(dir.file("in.bin"), &cfg);
  sd.erase(sd.begin() + 7);
  EXPECT_TRUE(mentions(error_of([&] { export_llmc_gpt2(dir.file("x.bin"), sd, cfg); }),
                       {"missing tensor 'h.0.attn.c_proj.bias'"}));
  EXPECT_FALSE(std::filesystem::exists(dir.file("x.bin")));
}

}  // namespace
}  // namespace tessera::nn
