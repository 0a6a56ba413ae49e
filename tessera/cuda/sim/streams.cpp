#include "tessera/cuda/sim/streams.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <vector>

namespace tessera::cuda::sim {

namespace {

struct Queue {
  std::deque<std::function<void()>> items;
  uint64_t queued = 0;    // items ever submitted
  uint64_t executed = 0;  // items run
  uint64_t first_use = 0;
};

// One lock for all streams: draining runs work that may drain other streams (waits), so it
// is recursive, and the simulator runs one launch at a time anyway.
std::recursive_mutex& mutex() {
  static auto* m = new std::recursive_mutex();
  return *m;
}
std::map<cudaStream_t, Queue>& queues() {
  static auto* q = new std::map<cudaStream_t, Queue>();  // outlives static destructors
  return *q;
}
uint64_t g_uses = 0;

StreamMode initial_mode() {
  const char* env = std::getenv("TESSERA_SIM_STREAMS");
  return env != nullptr && std::strcmp(env, "deferred") == 0 ? StreamMode::deferred
                                                             : StreamMode::immediate;
}
StreamMode& mode() {
  static StreamMode m = initial_mode();
  return m;
}

Queue& queue(cudaStream_t stream) {
  auto [it, fresh] = queues().try_emplace(stream);
  if (fresh) it->second.first_use = g_uses++;
  return it->second;
}

// Runs `stream`'s items until `upto` of them have run.
void run_until(cudaStream_t stream, uint64_t upto) {
  Queue& q = queue(stream);
  while (q.executed < upto && !q.items.empty()) {
    std::function<void()> work = std::move(q.items.front());
    q.items.pop_front();
    ++q.executed;  // before running: an item that waits on its own stream's past is done
    work();
  }
}

}  // namespace

StreamMode stream_mode() {
  std::lock_guard<std::recursive_mutex> lock(mutex());
  return mode();
}

void set_stream_mode(StreamMode m) {
  std::lock_guard<std::recursive_mutex> lock(mutex());
  drain_all();
  mode() = m;
}

void submit(cudaStream_t stream, std::function<void()> work) {
  std::lock_guard<std::recursive_mutex> lock(mutex());
  if (stream == nullptr) {
    drain_all();
    work();
    return;
  }
  Queue& q = queue(stream);
  if (mode() == StreamMode::immediate) {
    ++q.queued;
    ++q.executed;
    work();
    return;
  }
  q.items.push_back(std::move(work));
  ++q.queued;
}

void drain(cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(mutex());
  if (stream == nullptr) {
    drain_all();
    return;
  }
  run_until(stream, queue(stream).queued);
}

void drain_all() {
  std::lock_guard<std::recursive_mutex> lock(mutex());
  // Latest first: the order the host wrote its calls in is not the order they run in.
  for (bool ran = true; ran;) {
    ran = false;
    std::vector<std::pair<uint64_t, cudaStream_t>> order;
    for (auto& [stream, q] : queues())
      if (!q.items.empty()) order.emplace_back(q.first_use, stream);
    std::sort(order.rbegin(), order.rend());
    for (const auto& [use, stream] : order) {
      run_until(stream, queue(stream).queued);
      ran = true;
    }
  }
}

void retire(cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(mutex());
  drain(stream);
  queues().erase(stream);
}

StreamPoint mark(cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(mutex());
  if (stream == nullptr) return {nullptr, 0};
  return {stream, queue(stream).queued};
}

void wait_for(cudaStream_t waiter, const StreamPoint& point) {
  if (point.stream == nullptr || point.stream == waiter) return;  // in order already
  submit(waiter, [point] {
    std::lock_guard<std::recursive_mutex> lock(mutex());
    run_until(point.stream, point.position);
  });
}

void drain_to(const StreamPoint& point) {
  std::lock_guard<std::recursive_mutex> lock(mutex());
  if (point.stream == nullptr) return;
  run_until(point.stream, point.position);
}

}  // namespace tessera::cuda::sim
