#pragma once
// The subcommands of the `tessera` program. Each add_* registers its flags on the app and a
// callback that runs it; errors propagate as tessera::Error and main() prints them.

#include <CLI/CLI.hpp>
#include <string>

namespace tessera::nn {
class GPT;
}

namespace tessera::cli {

// The exit code a subcommand asks for (train returns 130 after an interrupt).
int& exit_code();

void add_train_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_prepare_command(CLI::App& app);
void add_tokenizer_command(CLI::App& app);
void add_ckpt_command(CLI::App& app);
void add_schedule_command(CLI::App& app);
void add_launch_command(CLI::App& app);
void add_diagnose_command(CLI::App& app);
void add_trace_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_serve_command(CLI::App& app);
// `tessera ckpt quantize`, a subcommand of ckpt (ckpt_quantize.cpp).
void add_ckpt_quantize_command(CLI::App& ckpt);

// --int8-activations of generate and serve: W8A8 on a model quantized by ckpt quantize; refused,
// naming `command` and the model `spec`, for any other.
void use_int8_activations(nn::GPT& model, const std::string& spec, const char* command);

}  // namespace tessera::cli
