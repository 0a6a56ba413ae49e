#pragma once
// prepare_shards: the library function behind `tessera prepare`. Text files, or folders of them,
// become token shards in llm.c's format plus a JSON manifest.
//
// Inputs are taken in the order given; a folder contributes its files recursively, sorted by
// path, skipping hidden files and folders (names starting with '.') and files whose extension is
// not listed. Each file is one document; every document starts with the tokenizer's
// end-of-text token, as in llm.c's data scripts, so documents are separated by EOT.
//
// The validation split is the first val_fraction of the input bytes, in input order, extended
// to the end of the line it ends in; everything after is training data (a document cut there
// continues in the training split without a new EOT). Each split is cut into shards of
// shard_tokens tokens (the last one holds the remainder), written atomically as
//   <output_dir>/<prefix>_val_000000.bin, ...  and  <output_dir>/<prefix>_train_000000.bin, ...
// then <output_dir>/<prefix>_manifest.json is written last, so a manifest means a complete set.
// Tokens are uint16 when the vocabulary fits (GPT-2 format), else uint32 (llm.c's Llama-3
// format).

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tessera/data/token_shard.h"
#include "tessera/data/tokenizer.h"

namespace tessera::data {

struct PrepareOptions {
  std::vector<std::string> inputs;  // files and folders
  std::string output_dir;           // created if missing
  std::string prefix = "data";
  int64_t shard_tokens = 100'000'000;  // llm.c's FineWeb shard size; the buffer is 4 B/token
  double val_fraction = 0.1;           // in [0, 1); 0: no validation split
  // Extensions of the files taken from folders (files named directly are always taken); empty:
  // every file.
  std::vector<std::string> extensions = {".txt", ".md"};
  // Whether special-token strings in the text (e.g. "<|endoftext|>" separators already in the
  // files) become special tokens; otherwise they are encoded as ordinary text.
  bool allow_special = false;
  // Recorded in the manifest: how to load the tokenizer again ("byte", a path).
  std::string tokenizer_source;
  // Whether existing <prefix>_train_*/_val_* shards and manifest may be replaced; otherwise
  // they are an error (stale shards would mix with new ones).
  bool overwrite = false;
  // Called after each input file with its path and the number of tokens written so far.
  std::function<void(const std::string& file, int64_t tokens)> progress;
};

struct ShardSplit {
  std::vector<std::string> files;  // paths of the shards, in order
  std::vector<int64_t> tokens;     // tokens per shard
  int64_t total_tokens = 0;
};

struct PrepareSummary {
  ShardSplit train, val;
  int64_t input_files = 0;
  int64_t input_bytes = 0;
  int64_t documents = 0;
  TokenDType dtype = TokenDType::u16;
  std::string manifest_path;
};

// The input files prepare_shards reads, in order. Throws naming an input that does not exist.
std::vector<std::string> list_input_files(const std::vector<std::string>& inputs,
                                          const std::vector<std::string>& extensions);

PrepareSummary prepare_shards(const Tokenizer& tokenizer, const PrepareOptions& options);

}  // namespace tessera::data
