#include "tessera/nn/io/llmc.h"

#include <array>
#include <bit>
#include <limits>
#include <map>

#include "tessera/core/error.h"
#include "tessera/core/file_io.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"
#include "tessera/nn/io/detail/gpt2_weights.h"
#include "tessera/nn/io/detail/posix_file.h"

namespace tessera::nn {

static_assert(std::endian::native == std::endian::little,
              "llm.c files are little-endian and are copied into tensors as is");

namespace {

constexpr int kHeaderInts = 256;
constexpr uint64_t kHeaderBytes = kHeaderInts * sizeof(int32_t);

// One of llm.c's 16 parameter arrays: its Tessera name (per block when stacked) and the shape
// of one slice.
struct LlmcArray {
  const char* llmc_name;
  const char* tessera_name;
  bool stacked;  // one slice per layer
  Shape shape;
};

std::vector<LlmcArray> llmc_layout(int64_t max_t, int64_t vp, int64_t c) {
  return {{"wte", "wte.weight", false, {vp, c}},
          {"wpe", "wpe.weight", false, {max_t, c}},
          {"ln1w", "ln_1.weight", true, {c}},
          {"ln1b", "ln_1.bias", true, {c}},
          {"qkvw", "attn.c_attn.weight", true, {3 * c, c}},
          {"qkvb", "attn.c_attn.bias", true, {3 * c}},
          {"attprojw", "attn.c_proj.weight", true, {c, c}},
          {"attprojb", "attn.c_proj.bias", true, {c}},
          {"ln2w", "ln_2.weight", true, {c}},
          {"ln2b", "ln_2.bias", true, {c}},
          {"fcw", "mlp.c_fc.weight", true, {4 * c, c}},
          {"fcb", "mlp.c_fc.bias", true, {4 * c}},
          {"fcprojw", "mlp.c_proj.weight", true, {c, 4 * c}},
          {"fcprojb", "mlp.c_proj.bias", true, {c}},
          {"lnfw", "ln_f.weight", false, {c}},
          {"lnfb", "ln_f.bias", false, {c}}};
}

std::string slice_name(const LlmcArray& a, int64_t layer) {
  return a.stacked ? "h." + std::to_string(layer) + "." + a.tessera_name : a.tessera_name;
}

// Multiplies sizes from an untrusted header; false on overflow.
bool mul(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}

}  // namespace

StateDict import_llmc_gpt2(const std::string& path, GPTConfig* config_out, int64_t vocab_multiple) {
  const std::string where = "llm.c model " + path;
  PosixFile f(path);
  TESSERA_CHECK(f.size() >= kHeaderBytes, where, ": the file has ", f.size(),
                " bytes, fewer than the ", kHeaderBytes, "-byte header");
  std::array<int32_t, kHeaderInts> h{};
  f.read_at(0, h.data(), kHeaderBytes);
  TESSERA_CHECK(h[0] == kLlmcMagic, where, ": magic number ", h[0], " at offset 0, expected ",
                kLlmcMagic, " (not an llm.c GPT-2 model file)");
  TESSERA_CHECK(h[1] == kLlmcVersionFp32 || h[1] == kLlmcVersionBf16, where, ": version ", h[1],
                " at offset 4, expected ", kLlmcVersionFp32, " (fp32) or ", kLlmcVersionBf16,
                " (bf16)");
  const DType dtype = h[1] == kLlmcVersionFp32 ? DType::f32 : DType::bf16;
  const char* fields[] = {"maxT", "V", "L", "NH", "C", "Vp"};
  for (int i = 0; i < 6; ++i)
    TESSERA_CHECK(h[2 + i] > 0, where, ": header field ", fields[i], " (offset ", 4 * (2 + i),
                  ") is ", h[2 + i], ", expected a positive value");
  const int64_t max_t = h[2], V = h[3], L = h[4], NH = h[5], C = h[6], Vp = h[7];
  TESSERA_CHECK(V <= Vp, where, ": header vocab size V=", V,
                " (offset 12) exceeds the padded Vp=", Vp, " (offset 28)");
  TESSERA_CHECK(C % NH == 0, where, ": header channels C=", C,
                " (offset 24) is not divisible by NH=", NH, " (offset 20)");

  // Check the file size the header implies before reading or allocating anything.
  const auto layout = llmc_layout(max_t, Vp, C);
  uint64_t total = 0;
  bool ok = true;
  for (const LlmcArray& a : layout) {
    uint64_t n = a.stacked ? uint64_t(L) : 1;
    for (int64_t d : a.shape) ok = ok && mul(n, uint64_t(d), &n);
    ok = ok && !__builtin_add_overflow(total, n, &total);
  }
  uint64_t expected = 0;
  ok = ok && mul(total, dtype_size(dtype), &expected) &&
       !__builtin_add_overflow(expected, kHeaderBytes, &expected);
  TESSERA_CHECK(ok && expected == f.size(), where, ": the header (maxT=", max_t, ", V=", V,
                ", L=", L, ", NH=", NH, ", C=", C, ", Vp=", Vp, ", ", dtype_name(dtype),
                ") implies ", ok ? std::to_string(expected) : std::string("more than 2^64"),
                " bytes, but the file has ", f.size(),
                ok && f.size() < expected ? " (truncated)" : "");

  GPTConfig c;
  c.vocab_size = V;
  c.vocab_multiple = vocab_multiple;
  c.block_size = max_t;
  c.n_layer = L;
  c.n_head = c.n_kv_head = NH;
  c.n_embd = C;
  c.tie_embeddings = true;
  c.validate();

  std::map<std::string, Tensor> read;
  uint64_t offset = kHeaderBytes;
  for (const LlmcArray& a : layout) {
    for (int64_t l = 0; l < (a.stacked ? L : 1); ++l) {
      Tensor t = empty(a.shape, dtype);
      f.read_at(offset, t.data_ptr(), t.nbytes());
      offset += t.nbytes();
      read.emplace(slice_name(a, l), t);
    }
  }
  // llm.c's padding rows (V..Vp) are never used as tokens; Tessera pads to its own multiple.
  read["wte.weight"] = resize_rows(read["wte.weight"], c.padded_vocab_size());

  StateDict out;
  for (const auto& [name, shape] : gpt2_parameter_shapes(c)) {
    auto it = read.find(name);
    TESSERA_ASSERT(it != read.end() && it->second.shape() == shape, name);
    out.emplace_back(name, it->second);
  }
  if (config_out) *config_out = c;
  return out;
}

void export_llmc_gpt2(const std::string& path, const StateDict& model, const GPTConfig& config,
                      LlmcPrecision precision) {
  const std::string where = "export to llm.c " + path;
  check_gpt2_architecture(config, "llm.c");
  TESSERA_CHECK(config.tie_embeddings, where,
                ": llm.c ties the head to wte, but the config unties them");
  TESSERA_CHECK(config.ffn_dim() == 4 * config.n_embd, where,
                ": llm.c's MLP is 4*n_embd = ", 4 * config.n_embd, " wide, the config's is ",
                config.ffn_dim());
  TESSERA_CHECK(config.norm_eps == 1e-5, where, ": llm.c's LayerNorm eps is 1e-5, the config's is ",
                config.norm_eps);
  const int64_t Vp = config.padded_vocab_size();
  for (int64_t v :
       {config.block_size, config.vocab_size, config.n_layer, config.n_head, config.n_embd, Vp})
    TESSERA_CHECK(v <= std::numeric_limits<int32_t>::max(), where, ": size ", v,
                  " does not fit llm.c's int32 header");

  auto shapes = gpt2_parameter_shapes(config);
  for (const auto& [name, t] : model) {
    bool known = false;
    for (const auto& s : shapes) known = known || s.first == name;
    TESSERA_CHECK(known, where, ": tensor '", name, "' (", t.describe(),
                  ") has no counterpart in llm.c's GPT-2");
  }

  const bool fp32 = precision == LlmcPrecision::fp32;
  std::array<int32_t, kHeaderInts> h{};
  h[0] = kLlmcMagic;
  h[1] = fp32 ? kLlmcVersionFp32 : kLlmcVersionBf16;
  h[2] = int32_t(config.block_size);
  h[3] = int32_t(config.vocab_size);
  h[4] = int32_t(config.n_layer);
  h[5] = int32_t(config.n_head);
  h[6] = int32_t(config.n_embd);
  h[7] = int32_t(Vp);

  AtomicFile out(path);
  out.write(h.data(), kHeaderBytes);
  for (const LlmcArray& a : llmc_layout(config.block_size, Vp, config.n_embd)) {
    for (int64_t l = 0; l < (a.stacked ? config.n_layer : 1); ++l) {
      Tensor t = require_tensor(model, slice_name(a, l), a.shape, where);
      t = ops::contiguous(ops::to(ops::cast(t, fp32 ? DType::f32 : DType::bf16), Device::cpu()));
      out.write(t.data_ptr(), t.nbytes());
    }
  }
  out.commit();
}

}  // namespace tessera::nn
