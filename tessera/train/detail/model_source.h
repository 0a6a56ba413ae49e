#pragma once
// Finding a model on disk: a run directory (its latest checkpoint), one checkpoint directory,
// Hugging Face GPT-2 or Llama weights (model.safetensors or its folder; a Llama's config.json
// says which), or an llm.c model .bin. Any of
// them loads into one process or into a tensor-parallel rank: every source holds the full
// (single-process) weights, and each rank keeps its slices.

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "tessera/data/tokenizer.h"
#include "tessera/nn/gpt.h"
#include "tessera/nn/io/tensor_source.h"
#include "tessera/parallel/tp/tensor_parallel.h"

namespace tessera::train {

enum class ModelSourceKind { run_dir, checkpoint, hf_gpt2, hf_llama, llmc };

struct LoadedModel {
  std::unique_ptr<nn::GPT> model;
  nn::GPTConfig config;
  ModelSourceKind kind = ModelSourceKind::checkpoint;
  std::string path;       // the checkpoint directory or weights file actually read
  int64_t step = 0;       // for checkpoints
  std::string tokenizer;  // from a checkpoint's training options, else ""
  nlohmann::json state;   // a checkpoint's state.json contents, else empty
};

// What `spec` is; throws naming the path when it is none of the four.
ModelSourceKind detect_model_source(const std::string& spec);
// Builds the model and loads its weights. n_head applies to HF GPT-2 weights only (those
// without a config.json need it); any other source refuses it, since it records its heads.
// With `tp`, builds this rank's tensor-parallel part and loads its slices of the full weights;
// a config whose heads or MLP width tp does not divide throws naming them. Of a checkpoint each
// rank checksums a share of the files and the group agrees (train::open_checkpoint_together's
// way), so a corrupt file fails every rank with one message: collective over tp's group.
// Of a checkpoint it reads the model's weights alone (not the optimizer's file), into a model
// whose weights were not drawn first (nn::ParamInit::zeros; the load is strict).
LoadedModel load_model(const std::string& spec, int64_t n_head = 0,
                       std::shared_ptr<parallel::tp::TensorParallel> tp = nullptr);
// The tokenizer to use with a loaded model: `override_spec` when given (--tokenizer); else the
// one the checkpoint carries (state["tokenizer"], data::tokenizer_record), which needs no file
// and so works wherever the run or checkpoint was moved; for Hugging Face weights, the
// tokenizer files in their folder (vocab.json and merges.txt); else, for checkpoints written before
// they carried one, the path training recorded. Throws in one line naming `command`, the
// checkpoint and what to pass when there is none, or when the recorded path does not exist
// from here.
std::unique_ptr<data::Tokenizer> model_tokenizer(const LoadedModel& model,
                                                 const std::string& override_spec,
                                                 const std::string& command);

// The weights of an HF or llm.c file with the config they imply (no model built): Hugging Face
// Llama's as a source read by range (nn/io/tensor_source.h; only headers and config.json are
// read here), so that each rank of a layout reads only what it holds; the others whole.
struct ImportedWeights {
  std::shared_ptr<const nn::TensorSource> source;
  nn::StateDict whole;
  bool empty() const { return source == nullptr && whole.empty(); }
};
ImportedWeights import_weights(const std::string& spec, nn::GPTConfig* config, int64_t n_head = 0);

}  // namespace tessera::train
