#include "ops/harness_cuda.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <iostream>
#include <map>
#include <mutex>

#include "tests/support/cuda_test_device.h"

namespace tessera::testing {
namespace {

std::mutex g_mutex;
std::map<std::string, std::string>& missing_ops() {
  static std::map<std::string, std::string> missing;
  return missing;
}

// Prints the ops the CUDA backend lacks once every test has run.
class MissingOpsReport : public ::testing::Environment {
 public:
  void TearDown() override {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (missing_ops().empty()) return;
    std::cout << "[ op harness ] " << missing_ops().size()
              << " case(s) skipped: op not implemented on cuda:\n";
    for (const auto& [name, message] : missing_ops())
      std::cout << "[ op harness ]   " << name << ": " << message << "\n";
  }
};

[[maybe_unused]] ::testing::Environment* const g_report =
    ::testing::AddGlobalTestEnvironment(new MissingOpsReport());

}  // namespace

std::optional<Device> harness_cuda_device() {
  if (cuda_test_mode() == CudaTestMode::off) return std::nullopt;
  return cuda_test_device();
}

int device_trials(int case_trials) {
  return cuda_test_on_gpu() ? case_trials : std::min(case_trials, 2);
}

Tensor to_device_same_layout(const Tensor& t, Device device) {
  if (!t.defined()) return t;
  const size_t itemsize = t.itemsize();
  const int64_t elements = int64_t(t.storage()->nbytes() / itemsize);
  const Tensor flat(t.storage(), Shape{elements}, Strides{1}, 0, t.dtype());
  const Tensor on_device = ops::to(flat, device);
  return Tensor(on_device.storage(), t.shape(), t.strides(), t.offset(), t.dtype());
}

bool is_not_implemented(const Error& error) {
  return std::strstr(error.what(), ": not implemented on device ") != nullptr;
}

void record_not_implemented(const std::string& case_name, const std::string& message) {
  std::lock_guard<std::mutex> lock(g_mutex);
  missing_ops().emplace(case_name, message);
}

}  // namespace tessera::testing
