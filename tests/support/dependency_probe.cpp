// The dependency probe: one small program that includes and links every library Tessera's
// build takes from the system (Eigen, GoogleTest, Google Benchmark, CLI11, nlohmann-json, MPI)
// and uses each once. bench/gpu_check.sh builds and runs it first, against the packages carried
// to a GPU machine, so that a missing or broken one is named in seconds rather than found as a
// failed build of the whole project.

#include <benchmark/benchmark.h>
#include <gtest/gtest.h>
#include <mpi.h>
#include <CLI/CLI.hpp>
#include <Eigen/Core>

#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace {

TEST(DependencyProbe, Eigen) {
  Eigen::Matrix2f a;
  a << 1, 2, 3, 4;
  const Eigen::Matrix2f b = a * a;
  EXPECT_EQ(b(1, 1), 22.0f);
  std::cout << "[ probe ] Eigen " << EIGEN_WORLD_VERSION << "." << EIGEN_MAJOR_VERSION << "."
            << EIGEN_MINOR_VERSION << "\n";
}

TEST(DependencyProbe, NlohmannJson) {
  const nlohmann::json j = nlohmann::json::parse(R"({"n_layer": 2, "name": "probe"})");
  EXPECT_EQ(j["n_layer"].get<int>(), 2);
  std::cout << "[ probe ] nlohmann-json " << NLOHMANN_JSON_VERSION_MAJOR << "."
            << NLOHMANN_JSON_VERSION_MINOR << "." << NLOHMANN_JSON_VERSION_PATCH << "\n";
}

TEST(DependencyProbe, Cli11) {
  CLI::App app{"probe"};
  int steps = 0;
  app.add_option("--steps", steps);
  std::vector<std::string> args = {"7", "--steps"};  // CLI11 parses a reversed vector
  app.parse(args);
  EXPECT_EQ(steps, 7);
  std::cout << "[ probe ] CLI11 " << CLI11_VERSION << "\n";
}

TEST(DependencyProbe, GoogleBenchmark) {
  // A symbol from the library (not only its headers).
  int argc = 1;
  char name[] = "dependency_probe";
  char* argv[] = {name, nullptr};
  benchmark::Initialize(&argc, argv);
  EXPECT_EQ(argc, 1);
  std::cout << "[ probe ] Google Benchmark linked\n";
}

TEST(DependencyProbe, Mpi) {
  int provided = 0;
  ASSERT_EQ(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), MPI_SUCCESS);
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_Get_library_version(version, &length);
  const std::string first_line = std::string(version, size_t(length)).substr(0, 60);
  std::cout << "[ probe ] MPI: " << size << " rank(s); "
            << first_line.substr(0, first_line.find('\n')) << "\n";
  EXPECT_GE(size, 1);
  MPI_Finalize();
}

}  // namespace
