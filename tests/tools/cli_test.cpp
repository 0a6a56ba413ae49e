// The tessera binary: exit codes, one-line errors, Ctrl-C checkpointing, generate and ckpt.

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "tools/tools_test_util.h"

extern char** environ;

namespace tessera::cli::testing {
namespace {

struct Spawned {
  pid_t pid;
  std::string out, err;  // paths of the captured streams
};

Spawned spawn_cli(const std::vector<std::string>& args, const ScratchDir& dir,
                  const std::string& tag) {
  Spawned s{0, dir / (tag + ".out"), dir / (tag + ".err")};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, s.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, s.err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> full = {TESSERA_CLI_PATH};
  full.insert(full.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : full) argv.push_back(a.data());
  argv.push_back(nullptr);
  int rc = posix_spawn(&s.pid, TESSERA_CLI_PATH, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw Error("posix_spawn failed for " + std::string(TESSERA_CLI_PATH));
  return s;
}

int wait_exit(const Spawned& s) {
  int status = 0;
  waitpid(s.pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

struct Result {
  int code;
  std::string out, err;
};

Result run_cli(const std::vector<std::string>& args, const ScratchDir& dir,
               const std::string& tag = "run") {
  Spawned s = spawn_cli(args, dir, tag);
  int code = wait_exit(s);
  return {code, read_text_file(s.out), read_text_file(s.err)};
}

int count_lines(const std::string& s) {
  return int(std::count(s.begin(), s.end(), '\n'));
}

TEST(Cli, BadFlagsGiveOneLineAndNonZeroExit) {
  ScratchDir dir;
  Result unknown = run_cli({"train", "--no-such-flag", "1"}, dir);
  EXPECT_NE(unknown.code, 0);
  EXPECT_EQ(count_lines(unknown.err), 1) << unknown.err;
  EXPECT_EQ(unknown.err.rfind("tessera: error:", 0), 0u) << unknown.err;

  Result typed = run_cli({"train", "--train-data", "x.bin", "--batch-size", "many"}, dir);
  EXPECT_EQ(typed.code, 1);
  EXPECT_EQ(count_lines(typed.err), 1) << typed.err;
  EXPECT_NE(typed.err.find("--batch-size"), std::string::npos) << typed.err;

  Result missing = run_cli({"train", "--train-data", dir / "nothing_*.bin"}, dir);
  EXPECT_EQ(missing.code, 1);
  EXPECT_EQ(count_lines(missing.err), 1) << missing.err;

  write_file_atomic(dir / "bad.json", std::string("{\"lr\": 1e-3, \"bogus\": 2}"));
  Result config = run_cli({"train", "--config", dir / "bad.json"}, dir);
  EXPECT_EQ(config.code, 1);
  EXPECT_NE(config.err.find("bogus"), std::string::npos) << config.err;
  // 30000 levels of '[': refused by the depth check before parsing (it overflowed the stack
  // when the value was copied; docs/fuzzing.md).
  write_file_atomic(dir / "deep.json", std::string(30000, '[') + std::string(30000, ']'));
  Result deep = run_cli({"train", "--config", dir / "deep.json"}, dir);
  EXPECT_EQ(deep.code, 1);
  EXPECT_NE(deep.err.find("nests deeper than 64 levels at byte offset 64"), std::string::npos)
      << deep.err;
  EXPECT_EQ(count_lines(deep.err), 1) << deep.err;

  Result model = run_cli({"generate", "--model", dir / "no_such_run"}, dir);
  EXPECT_EQ(model.code, 1);
  EXPECT_EQ(count_lines(model.err), 1) << model.err;

  // Integers past their field: CLI11 read 2^64 as 2^63 - 1, and train's 32-bit --threads cut
  // 99999999999 to 1215752191; both went on without a word.
  Result wide = run_cli(
      {"generate", "--model", dir / "no_such_run", "--seed", "18446744073709551616"}, dir, "wide");
  EXPECT_EQ(wide.code, 2);
  EXPECT_EQ(count_lines(wide.err), 1) << wide.err;
  EXPECT_NE(wide.err.find("--seed: must be in [-2^63, 2^63 - 1], got 18446744073709551616"),
            std::string::npos)
      << wide.err;
  Result cut = run_cli({"train", "--train-data", "x.bin", "--threads", "99999999999"}, dir, "cut");
  EXPECT_EQ(cut.code, 1);
  EXPECT_NE(cut.err.find("'threads' must be in [-2147483648, 2147483647], got 99999999999"),
            std::string::npos)
      << cut.err;
}

// Sizes no job has, refused in one line before anything starts. Before, --ranks 10^8 held
// 13.6 GiB of heartbeat slots ten minutes on, --dump-window 1e300 would wait forever before
// killing a stuck job, and the job's dp x tp x pp was cast to int past its range.
TEST(Cli, LaunchRefusesSizesNoJobHas) {
  ScratchDir dir;
  // launch FLAGS -- COMMAND --run-dir <scratch>: the job's run directory is the scratch one.
  auto refused = [&](const std::vector<std::string>& flags, const std::vector<std::string>& job,
                     const std::string& says) {
    std::vector<std::string> args = {"launch"};
    args.insert(args.end(), flags.begin(), flags.end());
    args.push_back("--");
    args.insert(args.end(), job.begin(), job.end());
    args.insert(args.end(), {"--run-dir", dir / "run"});
    const Result r = run_cli(args, dir);
    EXPECT_EQ(r.code, 1) << says;
    EXPECT_EQ(count_lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
  };
  refused({"--ranks", "100000000"}, {"true"}, "--ranks must be in [1, 1048576], got 100000000");
  refused({"--dump-window", "1e300"}, {"true"},
          "--dump-window must be between 0 and 3600 seconds, got 1e+300");
  refused({}, {"mpiexec", "tessera", "train", "--dp", "100000", "--tp", "100000"},
          "the job's --dp x --tp x --pp is 1e+10; one supervisor watches 1 to 1048576 ranks");
  // Given, 0 was taken as "from the command", and inf as a hang never to be noticed.
  refused({"--ranks", "0"}, {"true"}, "--ranks must be in [1, 1048576], got 0");
  refused({"--heartbeat-timeout", "inf"}, {"true"},
          "--heartbeat-timeout must be a positive number of seconds, got inf");
}

// diagnose --world-size 0 was read as "from the dumps", as if not given.
TEST(Cli, DiagnoseRefusesAWorldOfNoRanks) {
  ScratchDir dir;
  const Result r = run_cli({"diagnose", dir / "run", "--world-size", "0"}, dir);
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("diagnose: --world-size must be at least 1 (leave it out for the world "
                       "group's size in the dumps), got 0"),
            std::string::npos)
      << r.err;
}

// A program that cannot be run fails the same on every try: launch says so once and stops.
// Before, it exited 127 from the child and was restarted --max-restarts times.
TEST(Cli, LaunchDoesNotRestartAJobItCannotRun) {
  ScratchDir dir;
  const Result r = run_cli({"launch", "--max-restarts", "3", "--ranks", "1", "--", dir / "nosuch",
                            "--run-dir", dir / "run"},
                           dir);
  EXPECT_EQ(r.code, 127) << r.out << r.err;
  EXPECT_NE(
      r.out.find("cannot run " + (dir / "nosuch") + ": No such file or directory; not restarting"),
      std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("attempt 2"), std::string::npos) << r.out;
}

// A job that ends before any rank writes a heartbeat has not started (under MPICH, mpiexec of
// a missing program exits 255). Once may be a node's hiccup and is restarted; the same status
// twice in a row stops launch. Before, it was restarted --max-restarts times.
TEST(Cli, LaunchStopsAJobThatTwiceEndsBeforeAnyRankStarts) {
  ScratchDir dir;
  const Result r = run_cli(
      {"launch", "--max-restarts", "5", "--run-dir", dir / "run", "--", "sh", "-c", "exit 3"}, dir);
  EXPECT_EQ(r.code, 3) << r.out << r.err;
  EXPECT_NE(r.out.find("the job exited with status 3 before any rank wrote a heartbeat, as on the "
                       "attempt before: the job cannot start; not restarting"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("attempt 2"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("attempt 3"), std::string::npos) << r.out;
  EXPECT_EQ(count_lines(read_text_file(dir / "run/restarts.jsonl")), 1);

  // Failing once before the start still restarts, and the second try runs to the end.
  const std::string flag = dir / "failed_once";
  const Result once =
      run_cli({"launch", "--max-restarts", "5", "--run-dir", dir / "run_once", "--", "sh", "-c",
               "test -e " + flag + " || { touch " + flag + "; exit 3; }"},
              dir, "once");
  EXPECT_EQ(once.code, 0) << once.out << once.err;
  EXPECT_NE(once.out.find("the job finished after 1 restart"), std::string::npos) << once.out;
}

// A script hides the job's flags. Its run directory is the one --run-dir names (before, it was
// refused as differing from train's default, which the script may not use), and what launch
// cannot read from it is said rather than assumed in silence.
TEST(Cli, LaunchTakesAScriptsRunDirectoryFromItsFlag) {
  ScratchDir dir;
  const Result r = run_cli({"launch", "--run-dir", dir / "run", "--", "sh", "-c", "exit 0"}, dir);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(std::filesystem::exists(dir / "run/launch.lock"));
  EXPECT_NE(r.out.find("the job does not run tessera train itself; assuming 1 rank (give --ranks "
                       "to say otherwise)"),
            std::string::npos)
      << r.out;
  // tessera train itself without --run-dir writes runs/default: another --run-dir contradicts it.
  const Result direct =
      run_cli({"launch", "--run-dir", dir / "run", "--", "mpiexec", "tessera", "train"}, dir, "d");
  EXPECT_EQ(direct.code, 1);
  EXPECT_NE(direct.err.find("differs from the job's runs/default"), std::string::npos)
      << direct.err;
}

// tessera schedule dry-runs a schedule and reports it sound; a tied embedding on one stage,
// which make_schedule drops (both ends share the rank), is refused in one line rather than
// drawn as if it applied.
TEST(Cli, ScheduleDryRunsAndRefusesATieOnOneStage) {
  ScratchDir dir;
  const Result ok = run_cli({"schedule", "--schedule", "1f1b", "--stages", "2", "--microbatches",
                             "4", "--tied-embedding", "--actions"},
                            dir);
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_NE(ok.out.find(": sound"), std::string::npos) << ok.out;
  EXPECT_NE(ok.out.find("[all_reduce_tied]"), std::string::npos) << ok.out;
  const Result one = run_cli({"schedule", "--stages", "1", "--tied-embedding"}, dir, "one");
  EXPECT_EQ(one.code, 1);
  EXPECT_EQ(count_lines(one.err), 1) << one.err;
  EXPECT_NE(one.err.find("schedule: --tied-embedding applies to 2 or more --stages"),
            std::string::npos)
      << one.err;
}

// --device cuda-sim: the CUDA backend on the kernel simulator, selected from the command line,
// trains as the CPU does. fp32 on both from the same weights and batches: the kernels sum in
// other orders (f32 round-off ~1e-7 relative per sum), which three steps at lr 3e-3 keep
// below 1e-4 in the loss (the in-process test, cuda_train_test.cpp, measures 4.8e-7).
TEST(Cli, CudaSimTrainsLikeTheCpu) {
  ScratchDir dir;
  write_corpus_shards(dir);
  std::vector<double> losses[2];
  const char* devices[] = {"cpu", "cuda-sim"};
  for (int d = 0; d < 2; ++d) {
    const std::string run = dir / (std::string("run_") + devices[d]);
    Result r = run_cli(
        {"train", "--train-data", dir / "data/data_train_*.bin", "--run-dir", run, "--model",
         R"({"n_layer": 1, "n_head": 2, "n_kv_head": 2, "n_embd": 16,
                            "block_size": 16, "dropout": 0})",
         "--batch-size", "2", "--seq-len", "16", "--max-steps", "3", "--lr", "3e-3", "--threads",
         "1", "--device", devices[d]},
        dir, devices[d]);
    ASSERT_EQ(r.code, 0) << r.err;
    if (d == 1) {
      EXPECT_NE(r.out.find("device: cuda:0 (the kernel simulator)"), std::string::npos);
    }
    std::istringstream lines(read_text_file(run + "/metrics.jsonl"));
    for (std::string line; std::getline(lines, line);)
      losses[d].push_back(nlohmann::json::parse(line)["loss"].get<double>());
  }
  ASSERT_EQ(losses[0].size(), 3u);
  ASSERT_EQ(losses[1].size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(losses[1][i], losses[0][i], 1e-4) << "step " << i;
}

TEST(Cli, CtrlCCheckpointsAndTheSameCommandResumes) {
  ScratchDir dir;
  write_corpus_shards(dir);
  std::vector<std::string> args = {
      "train",
      "--train-data",
      dir / "data/data_train_*.bin",
      "--run-dir",
      dir / "run",
      "--model",
      R"({"n_layer": 2, "n_head": 2, "n_kv_head": 2, "n_embd": 32, "block_size": 32})",
      "--batch-size",
      "4",
      "--seq-len",
      "16",
      "--max-steps",
      "100000",
      "--threads",
      "1",
      "--log-every",
      "1000"};
  Spawned s = spawn_cli(args, dir, "train");
  // Wait until a few steps are logged, then interrupt.
  std::string metrics = dir / "run/metrics.jsonl";
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(metrics);
    std::string text((std::istreambuf_iterator<char>(in)), {});
    if (count_lines(text) >= 3) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(s.pid, SIGINT);
  int code = wait_exit(s);
  std::string out = read_text_file(s.out);
  EXPECT_EQ(code, 130) << read_text_file(s.err);
  ASSERT_NE(out.find("interrupted after step"), std::string::npos) << out;
  std::optional<std::string> latest = nn::find_latest_checkpoint(dir / "run");
  ASSERT_TRUE(latest.has_value());
  int64_t stopped = nn::load_checkpoint(*latest).step;
  EXPECT_GE(stopped, 3);

  // Rerunning the command (here with a near end) resumes from that checkpoint.
  args[args.size() - 5] = std::to_string(stopped + 2);  // --max-steps
  Result again = run_cli(args, dir, "again");
  EXPECT_EQ(again.code, 0) << again.err;
  EXPECT_NE(again.out.find("resuming from"), std::string::npos) << again.out;
  EXPECT_EQ(nn::load_checkpoint(*nn::find_latest_checkpoint(dir / "run")).step, stopped + 2);

  // generate and ckpt work on the run.
  Result gen = run_cli({"generate", "--model", dir / "run", "--prompt", "line 1",
                        "--max-new-tokens", "12", "--temperature", "0"},
                       dir, "gen");
  EXPECT_EQ(gen.code, 0) << gen.err;
  EXPECT_EQ(gen.out.rfind("line 1", 0), 0u) << gen.out;
  EXPECT_GE(gen.out.size(), 12u + 6u);
  Result ins = run_cli({"ckpt", "inspect", dir / "run"}, dir, "inspect");
  EXPECT_EQ(ins.code, 0) << ins.err;
  EXPECT_NE(ins.out.find("step: " + std::to_string(stopped + 2)), std::string::npos) << ins.out;

  // Exported to Hugging Face's layout and to llm.c's, the model generates the same greedy text.
  Result hf =
      run_cli({"ckpt", "convert", dir / "run", "--to", "hf", "--output", dir / "hf"}, dir, "hf");
  ASSERT_EQ(hf.code, 0) << hf.err;
  Result llmc = run_cli(
      {"ckpt", "convert", dir / "run", "--to", "llmc", "--output", dir / "model.bin"}, dir, "llmc");
  ASSERT_EQ(llmc.code, 0) << llmc.err;
  for (const std::string& source : {dir / "hf", dir / "model.bin"}) {
    Result g = run_cli({"generate", "--model", source, "--tokenizer", "byte", "--prompt", "line 1",
                        "--max-new-tokens", "12", "--temperature", "0"},
                       dir, "gen_imported");
    EXPECT_EQ(g.code, 0) << g.err;
    EXPECT_EQ(g.out, gen.out) << source;
  }
}

}  // namespace
}  // namespace tessera::cli::testing
