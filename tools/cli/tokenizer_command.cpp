// `tessera tokenizer`: train a byte-level BPE, and encode or decode with any tokenizer.

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "cli/ckpt_output.h"
#include "cli/commands.h"
#include "cli/live_line.h"
#include "tessera/core/file_io.h"
#include "tessera/tessera.h"

namespace tessera::cli {

namespace {

struct TokenizerFlags {
  std::vector<std::string> inputs;
  std::vector<std::string> extensions = {".txt", ".md"};
  std::string output, tokenizer = "byte", text, ids;
  data::BpeTrainOptions train;
};

void run_train(const TokenizerFlags& f) {
  // Not into a run or checkpoint directory: one written over a checkpoint's state.json was
  // taken without a word (ckpt_output.h).
  check_export_dir(std::filesystem::path(f.output).parent_path().string(), f.output,
                   "tokenizer train");
  std::vector<std::string> files = data::list_input_files(f.inputs, f.extensions);
  TESSERA_CHECK(!files.empty(), "tokenizer train: no input files matched");
  // On a terminal, a live line: files read, then merges made of the most there can be.
  LiveLine line;
  std::vector<std::string> texts;
  int64_t bytes = 0;
  for (const std::string& path : files) {
    texts.push_back(read_text_file(path));
    bytes += int64_t(texts.back().size());
    line.update(str_cat("tokenizer: read ", texts.size(), "/", files.size(), " files, ", bytes,
                        " bytes"));
  }
  std::vector<std::string_view> docs(texts.begin(), texts.end());
  data::BpeTrainOptions options = f.train;  // the callback refers to this scope's state
  int64_t made = 0;
  if (line.live())
    options.progress = [&](int64_t merges, int64_t target) {
      made = merges;
      const double s = line.elapsed_s();
      char text[128];
      std::snprintf(text, sizeof text, "tokenizer: %lld/%lld merges %.1f%%, %.0f merges/s",
                    (long long)merges, (long long)target,
                    100.0 * double(merges) / double(std::max<int64_t>(target, 1)),
                    s > 0 ? double(merges) / s : 0.0);
      line.update(text, /*force=*/merges == 1);  // the first always shows: small runs are fast
    };
  data::BpeTokenizer tok = data::BpeTokenizer::train(docs, options);
  if (made > 0) line.update(str_cat("tokenizer: ", made, " merges, saving"), /*force=*/true);
  tok.save(f.output);
  line.finish();
  std::cout << "tokenizer: trained on " << files.size() << " files (" << bytes
            << " bytes): " << tok.vocab_size() << " ids (" << tok.merges().size() << " merges) -> "
            << f.output << "\n";
}

void run_encode(const TokenizerFlags& f) {
  std::unique_ptr<data::Tokenizer> tok = data::load_tokenizer(f.tokenizer);
  std::vector<int32_t> ids = tok->encode(f.text, /*allow_special=*/true);
  for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? " " : "") << ids[i];
  std::cout << "\n";
}

void run_decode(const TokenizerFlags& f) {
  std::unique_ptr<data::Tokenizer> tok = data::load_tokenizer(f.tokenizer);
  std::istringstream in(f.ids);
  std::vector<int32_t> ids;
  std::string word;
  while (in >> word) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    TESSERA_CHECK(used == word.size() && v >= INT32_MIN && v <= INT32_MAX, "tokenizer decode: '",
                  word, "' (item ", ids.size(), ") is not a token id");
    ids.push_back(int32_t(v));
  }
  std::cout << tok->decode(ids) << "\n";
}

}  // namespace

void add_tokenizer_command(CLI::App& app) {
  auto f = std::make_shared<TokenizerFlags>();
  CLI::App* cmd = app.add_subcommand("tokenizer", "Train, or encode and decode with, a tokenizer");
  cmd->require_subcommand(1);

  CLI::App* train = cmd->add_subcommand("train", "Train a byte-level BPE on text files or folders");
  train->add_option("--input", f->inputs, "files and folders")->required();
  train->add_option("--ext", f->extensions, "extensions taken from folders");
  train->add_option("--vocab-size", f->train.vocab_size,
                    "ids in all: 256 bytes + merges + specials");
  train->add_option("--min-frequency", f->train.min_frequency, "stop when no pair is this common");
  train->add_option("--output", f->output, "the tokenizer .json to write")->required();
  train->callback([f] { run_train(*f); });

  CLI::App* encode = cmd->add_subcommand("encode", "Print the ids of some text");
  encode->add_option("--tokenizer", f->tokenizer, "byte, a tokenizer .json, or a GPT-2 folder");
  encode->add_option("--text", f->text, "the text")->required();
  encode->callback([f] { run_encode(*f); });

  CLI::App* decode = cmd->add_subcommand("decode", "Print the text of some ids");
  decode->add_option("--tokenizer", f->tokenizer, "byte, a tokenizer .json, or a GPT-2 folder");
  decode->add_option("--ids", f->ids, "space-separated ids")->required();
  decode->callback([f] { run_decode(*f); });
}

}  // namespace tessera::cli
