// `tessera prepare`: text files or folders -> token shards in llm.c's format.

#include <iostream>

#include "cli/commands.h"
#include "cli/live_line.h"
#include "tessera/tessera.h"

namespace tessera::cli {

void add_prepare_command(CLI::App& app) {
  struct Flags {
    data::PrepareOptions options;
    std::string tokenizer = "byte";
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("prepare", "Tokenize text files or folders into shards");
  cmd->add_option("--input", f->options.inputs, "files and folders (folders are read recursively)")
      ->required();
  cmd->add_option("--output", f->options.output_dir, "output folder")->required();
  cmd->add_option("--tokenizer", f->tokenizer, "byte, a tokenizer .json, or a GPT-2 folder");
  cmd->add_option("--prefix", f->options.prefix, "shard name prefix");
  cmd->add_option("--shard-tokens", f->options.shard_tokens, "tokens per shard");
  cmd->add_option("--val-fraction", f->options.val_fraction, "share of the input held out");
  cmd->add_option("--ext", f->options.extensions,
                  "extensions taken from folders (default .txt .md)");
  cmd->add_flag("--allow-special", f->options.allow_special,
                "turn special-token strings in the text into special tokens");
  cmd->add_flag("--overwrite", f->options.overwrite, "replace existing shards with this prefix");
  cmd->callback([f] {
    std::unique_ptr<data::Tokenizer> tok = data::load_tokenizer(f->tokenizer);
    f->options.tokenizer_source = f->tokenizer;
    // On a terminal, a live line: files done, tokens so far, their rate and the elapsed time.
    LiveLine line;
    int64_t files = 0;
    data::PrepareOptions options = f->options;  // the callback refers to this scope's state
    if (line.live())
      options.progress = [&](const std::string&, int64_t tokens) {
        const double s = line.elapsed_s();
        line.update(str_cat("prepare: ", ++files, " files, ", tokens, " tokens, ",
                            int64_t(s > 0 ? double(tokens) / s : 0.0), " tokens/s"),
                    /*force=*/true);  // once a file: never too often
      };
    data::PrepareSummary s = data::prepare_shards(*tok, options);
    line.finish();
    std::cout << "prepare: " << s.input_files << " files (" << s.input_bytes << " bytes, "
              << s.documents << " documents) -> train " << s.train.total_tokens << " tokens in "
              << s.train.files.size() << " shards, val " << s.val.total_tokens << " tokens in "
              << s.val.files.size() << " shards (" << data::token_dtype_name(s.dtype)
              << "); manifest " << s.manifest_path << "\n";
  });
}

}  // namespace tessera::cli
