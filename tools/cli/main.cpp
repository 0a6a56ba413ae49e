// tessera: train, sample from, and manage GPT models. Errors print one line and exit non-zero.

#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "tessera/core/error.h"
#if TESSERA_HAS_MPI
#include "tessera/parallel/comm/mpi_communicator.h"
#endif

namespace {

#if TESSERA_HAS_MPI
// Whether an MPI launcher started this process (MPICH's and Open MPI's mpiexec, PMIx, srun):
// only then is MPI initialised, so single-process commands never touch it.
bool launched_by_mpi() {
  for (const char* var : {"PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"})
    if (std::getenv(var) != nullptr) return true;
  return false;
}
#endif

// CLI11 2.1 reads an integer past int64's range as the nearest one it holds, without a word:
// --seed 2^64 sampled with seed 2^63 - 1. Every integer option is checked first (32-bit ones
// CLI11 refuses itself). The options are all signed, so that a negative one is refused by
// its command rather than wrapped, as CLI11 wraps one given to an unsigned option.
void refuse_integers_out_of_range(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    TESSERA_CHECK(option->get_type_name() != "UINT", "option ", option->get_name(),
                  " is unsigned, which CLI11 wraps a negative value into; declare it signed");
    if (option->get_type_name() != "INT") continue;
    option->check(CLI::Validator(
        [](std::string& text) -> std::string {
          int64_t value = 0;
          const std::errc ec = std::from_chars(text.data(), text.data() + text.size(), value).ec;
          if (ec == std::errc::result_out_of_range)
            return "must be in [-2^63, 2^63 - 1], got " + text;
          return "";  // anything else is CLI11's to convert or refuse
        },
        "", "integer range"));
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    refuse_integers_out_of_range(*sub);
}

}  // namespace

int main(int argc, char** argv) {
#if TESSERA_HAS_MPI
  std::optional<tessera::parallel::MpiSession> mpi;
  if (launched_by_mpi()) mpi.emplace(&argc, &argv);
#endif
  CLI::App app{"tessera: train GPT models from C++ and sample from them"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Print help for every subcommand");
  tessera::cli::add_train_command(app);
  tessera::cli::add_generate_command(app);
  tessera::cli::add_serve_command(app);
  tessera::cli::add_prepare_command(app);
  tessera::cli::add_tokenizer_command(app);
  tessera::cli::add_ckpt_command(app);
  tessera::cli::add_schedule_command(app);
  tessera::cli::add_launch_command(app);
  tessera::cli::add_diagnose_command(app);
  tessera::cli::add_trace_command(app);
  tessera::cli::add_plan_command(app);
  try {
    refuse_integers_out_of_range(app);
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
