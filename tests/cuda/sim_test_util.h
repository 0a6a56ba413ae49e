#pragma once
// Helpers shared by the kernel simulator's tests.

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/cuda/device.h"

namespace tessera::cuda::testing {

// Runs f and expects a tessera::Error whose message contains every string in `parts`; returns
// the message so a test can check more.
inline std::string expect_error(const std::function<void()>& f,
                                const std::vector<std::string>& parts) {
  try {
    f();
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const std::string& part : parts)
      EXPECT_NE(message.find(part), std::string::npos)
          << "expected '" << part << "' in the message: " << message;
    return message;
  }
  ADD_FAILURE() << "expected a tessera::Error";
  return {};
}

inline LaunchConfig config(dim3 grid, dim3 block, const char* name, size_t dynamic_bytes = 0) {
  return LaunchConfig{grid, block, dynamic_bytes, nullptr, name};
}

// Options for a test: defaults plus the given schedule and host threads.
inline sim::SimOptions options_with(sim::Schedule schedule, int host_threads = 0) {
  sim::SimOptions o;
  o.schedule = schedule;
  o.host_threads = host_threads;
  return o;
}

}  // namespace tessera::cuda::testing
