// tessera: train, sample from, and manage GPT models. Errors print one line and exit non-zero.

#include <exception>
#include <iostream>

#include "cli/commands.h"
#include "tessera/core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"tessera: train GPT models from C++ and sample from them"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Print help for every subcommand");
  tessera::cli::add_train_command(app);
  tessera::cli::add_generate_command(app);
  tessera::cli::add_prepare_command(app);
  tessera::cli::add_tokenizer_command(app);
  tessera::cli::add_ckpt_command(app);
  tessera::cli::add_schedule_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "tessera: error: " << e.what() << " (see tessera --help)\n";
    return 2;
  } catch (const tessera::Error& e) {
    std::cerr << "tessera: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "tessera: error: " << e.what() << "\n";
    return 1;
  }
  return tessera::cli::exit_code();
}
