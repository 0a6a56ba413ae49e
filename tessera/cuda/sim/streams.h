#pragma once
// Streams in the simulator. Two modes:
//
//   immediate (default)  every launch, copy and free runs before the call returns, as the
//                        simulator always did: the order of the host's calls is the order of
//                        execution, whatever streams and events say.
//   deferred             work is queued on its stream and runs only when something needs it:
//                        a host synchronisation of its stream or of an event recorded on it,
//                        a stream that waits on such an event and is itself drained, or a
//                        device synchronisation. A device synchronisation drains the streams in
//                        reverse order of their first use, so independent work runs as late as
//                        possible and in an order the host did not write. A missing
//                        stream_wait_event between two streams then shows as a kernel reading
//                        data its producer has not written yet, as it can on a GPU.
//
// The null stream is CUDA's legacy default stream: work on it first drains every other
// stream, then runs at once, in both modes.
//
// TESSERA_SIM_STREAMS=deferred in the environment starts a program in deferred mode.

#include <cstdint>
#include <functional>

#include "tessera/cuda/sim/device_api.h"

namespace tessera::cuda::sim {

enum class StreamMode { immediate, deferred };

StreamMode stream_mode();
// Drains every stream first, so no queued work changes meaning.
void set_stream_mode(StreamMode mode);

class ScopedStreamMode {
 public:
  explicit ScopedStreamMode(StreamMode mode) : saved_(stream_mode()) { set_stream_mode(mode); }
  ~ScopedStreamMode() { set_stream_mode(saved_); }
  ScopedStreamMode(const ScopedStreamMode&) = delete;
  ScopedStreamMode& operator=(const ScopedStreamMode&) = delete;

 private:
  StreamMode saved_;
};

// Runs `work` on `stream`: now (immediate mode, or the null stream after draining the
// others), or queued behind the stream's earlier work (deferred).
void submit(cudaStream_t stream, std::function<void()> work);
// Runs everything queued on `stream`, and what that work waits for.
void drain(cudaStream_t stream);
// Runs everything queued on every stream (a device synchronisation).
void drain_all();
// Forgets a stream after running what it holds.
void retire(cudaStream_t stream);

// A position in a stream's queue: what an event records.
struct StreamPoint {
  cudaStream_t stream = nullptr;
  uint64_t position = 0;  // the number of items queued on it when the point was taken
};
StreamPoint mark(cudaStream_t stream);
// Queues on `waiter` an item that first runs `point`'s stream up to the point.
void wait_for(cudaStream_t waiter, const StreamPoint& point);
// Runs `point`'s stream up to the point (an event synchronisation).
void drain_to(const StreamPoint& point);

}  // namespace tessera::cuda::sim
