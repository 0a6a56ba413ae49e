#pragma once
// Where `tessera ckpt convert`, `ckpt quantize` and `tokenizer train` may write. Neither may write
// over a training run or a checkpoint, its own source included: `ckpt quantize run --output run`
// replaced the run's newest checkpoint (and its optimizer state) with int8 weights it cannot train
// from, and `ckpt convert run --to hf --output run` overwrote the run's config.json. Checked before
// anything is read, so a refusal costs nothing.

#include <string>

namespace tessera::cli {

// `output` is the run directory a checkpoint will be written into (convert --to gathered or
// sharded, quantize): it must hold no checkpoint yet, and must not be a checkpoint directory.
void check_new_run_dir(const std::string& output, const std::string& command);

// `dir` is the folder exported files go to (--to hf: --output; llmc, safetensors and a
// trained tokenizer: the folder of the file): neither a run nor a checkpoint directory.
void check_export_dir(const std::string& dir, const std::string& output,
                      const std::string& command);

}  // namespace tessera::cli
