#pragma once
// CommTraffic: what one rank handed to the collectives of a tree of groups (a communicator and
// every group split from it share one), per kind of call: the number of calls, the message
// bytes, and the bytes this rank puts on the wire under the bandwidth-optimal algorithms.
//
// Message bytes follow nccl-tests' "size": all_reduce and broadcast count x, reduce_scatter its
// input (every rank's chunks), all_gather its output, send and recv the tensor. Wire bytes are
// what a ring sends per rank, the volume behind bus bandwidth, over a group of p:
//
//   all_reduce      2 (p-1)/p * B   (rounded down)     all_gather      (p-1)/p * B
//   reduce_scatter  (p-1)/p * B                        broadcast, send  B   (recv: 0)
//
// so that gradient compression is measured in the unit a network is (tests compare both with
// the analytic volume of a compression scheme). Calls on a group of one, and empty tensors,
// count nothing: they move no bytes. Counters are atomic: any thread may add to them.

#include <array>
#include <atomic>
#include <cstdint>

namespace tessera::parallel {

enum class CommKind : uint8_t { all_reduce, reduce_scatter, all_gather, broadcast, send, recv };
constexpr int kNumCommKinds = 6;
const char* comm_kind_name(CommKind kind);

// The bytes one rank sends for a call of `kind` with `message_bytes` over a group of `size`.
int64_t wire_bytes(CommKind kind, int64_t message_bytes, int size);

class CommTraffic {
 public:
  void add(CommKind kind, int64_t message_bytes, int size) {
    auto& c = counters_[size_t(kind)];
    c.calls.fetch_add(1, std::memory_order_relaxed);
    c.message_bytes.fetch_add(message_bytes, std::memory_order_relaxed);
    c.wire_bytes.fetch_add(parallel::wire_bytes(kind, message_bytes, size),
                           std::memory_order_relaxed);
  }
  int64_t calls(CommKind kind) const { return counters_[size_t(kind)].calls.load(); }
  int64_t message_bytes(CommKind kind) const {
    return counters_[size_t(kind)].message_bytes.load();
  }
  int64_t wire_bytes(CommKind kind) const { return counters_[size_t(kind)].wire_bytes.load(); }
  // Over every kind.
  int64_t total_message_bytes() const;
  int64_t total_wire_bytes() const;
  void reset();

 private:
  struct Counters {
    std::atomic<int64_t> calls{0}, message_bytes{0}, wire_bytes{0};
  };
  std::array<Counters, kNumCommKinds> counters_;
};

}  // namespace tessera::parallel
