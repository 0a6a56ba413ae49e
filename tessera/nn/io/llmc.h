#pragma once
// GPT-2 weights in llm.c's model file (train_gpt2.py write_model, read by train_gpt2.c
// gpt2_build_from_checkpoint):
//
//   header: 256 little-endian int32: [0] magic 20240326, [1] version (3: fp32, 5: bf16),
//           [2] maxT, [3] V, [4] L, [5] NH, [6] C, [7] Vp (padded vocab), the rest zero
//   then the parameters, each stacked over layers, in this order:
//           wte (Vp x C), wpe (maxT x C), ln1w (L x C), ln1b (L x C), qkvw (L x 3C x C),
//           qkvb (L x 3C), attprojw (L x C x C), attprojb (L x C), ln2w (L x C), ln2b (L x C),
//           fcw (L x 4C x C), fcb (L x 4C), fcprojw (L x C x 4C), fcprojb (L x C),
//           lnfw (C), lnfb (C)
//
// llm.c's weights are [out, in] like Tessera's, so only the per-layer split is needed. The
// head is tied to wte, LayerNorm eps is 1e-5 and the MLP is 4C wide.

#include <cstdint>
#include <string>

#include "tessera/nn/gpt_config.h"
#include "tessera/nn/module.h"

namespace tessera::nn {

inline constexpr int32_t kLlmcMagic = 20240326;
inline constexpr int32_t kLlmcVersionFp32 = 3;
inline constexpr int32_t kLlmcVersionBf16 = 5;

enum class LlmcPrecision { fp32, bf16 };

// Reads an llm.c model file: the weights in Tessera names (f32 for version 3, bf16 for
// version 5), the embedding padded to `vocab_multiple`; *config_out (if not null) receives the
// config from the header. Every size is checked against the file before anything is read.
StateDict import_llmc_gpt2(const std::string& path, GPTConfig* config_out,
                           int64_t vocab_multiple = GPTConfig().vocab_multiple);

// Writes model (Tessera names, shapes per config) as an llm.c model file, atomically. Vp is
// the row count of wte as given. Throws if config is not something llm.c can run.
void export_llmc_gpt2(const std::string& path, const StateDict& model, const GPTConfig& config,
                      LlmcPrecision precision = LlmcPrecision::fp32);

}  // namespace tessera::nn
