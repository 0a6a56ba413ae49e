#include "tessera/parallel/comm/traffic.h"

namespace tessera::parallel {

const char* comm_kind_name(CommKind kind) {
  switch (kind) {
    case CommKind::all_reduce:
      return "all_reduce";
    case CommKind::reduce_scatter:
      return "reduce_scatter";
    case CommKind::all_gather:
      return "all_gather";
    case CommKind::broadcast:
      return "broadcast";
    case CommKind::send:
      return "send";
    case CommKind::recv:
      return "recv";
  }
  return "?";
}

int64_t wire_bytes(CommKind kind, int64_t message_bytes, int size) {
  const int64_t p = size;
  switch (kind) {
    case CommKind::all_reduce:
      return 2 * (p - 1) * message_bytes / p;
    case CommKind::reduce_scatter:
    case CommKind::all_gather:
      return (p - 1) * message_bytes / p;  // exact: the message holds p equal parts
    case CommKind::broadcast:
    case CommKind::send:
      return message_bytes;
    case CommKind::recv:
      return 0;  // the peer's send counts these bytes
  }
  return 0;
}

int64_t CommTraffic::total_message_bytes() const {
  int64_t total = 0;
  for (const auto& c : counters_) total += c.message_bytes.load();
  return total;
}

int64_t CommTraffic::total_wire_bytes() const {
  int64_t total = 0;
  for (const auto& c : counters_) total += c.wire_bytes.load();
  return total;
}

void CommTraffic::reset() {
  for (auto& c : counters_) {
    c.calls.store(0);
    c.message_bytes.store(0);
    c.wire_bytes.store(0);
  }
}

}  // namespace tessera::parallel
