#include "ops/harness_cuda.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <mutex>

#include "tessera/cuda/cuda.h"

namespace tessera::testing {
namespace {

std::mutex g_mutex;
std::map<std::string, std::string>& missing_ops() {
  static std::map<std::string, std::string> missing;
  return missing;
}

bool on_simulator = true;

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

std::optional<Device> cuda_test_device() {
  static const std::optional<Device> device = []() -> std::optional<Device> {
    const char* env = std::getenv("TESSERA_OP_HARNESS_CUDA");
    const std::string mode = env != nullptr ? env : "";
    if (mode == "off") return std::nullopt;
#if defined(TESSERA_HAS_CUDA)
    if (mode != "sim" && cuda::device_count() > 0) {
      cuda::init_device(0);
      on_simulator = false;
      return Device::cuda(0);
    }
#endif
    TESSERA_CHECK(mode != "gpu",
                  "TESSERA_OP_HARNESS_CUDA=gpu, but this build has no GPU backend "
                  "or no CUDA device is visible");
    cuda::use_simulated_device();
    return Device::cuda(0);
  }();
  return device;
}

int device_trials(int case_trials) {
  return on_simulator ? std::min(case_trials, 2) : case_trials;
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
