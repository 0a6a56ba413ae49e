#pragma once
// The point-to-point building blocks of the MPI communicator's float sums and gathers.
//
// An exchange: every rank sends block p of its buffer straight to rank p and receives each
// peer's block into a slot of its own, with one MPI_Isend and one MPI_Irecv per peer. For the
// groups Tessera runs on MPI (a few ranks per node), this is the cheapest way MPICH moves a
// block: measured on 2 ranks of a 2-core machine in a plain MPI program, a 1 KiB exchange and
// sum took 0.89 us where MPI_Allreduce took 1.58 us, and at large sizes it skips the copy of
// the rank's own block that MPI_Ialltoall and MPI_Iallgather make (docs/benchmarks.md). Past
// CommOptions::mpi_exchange_max_ranks (16), MPI's log-depth collectives win and the
// communicator uses them.
//
// A rank-order sum then adds the n blocks left to right, one rounding per add, so every rank's
// bits are the same whatever the message size, the algorithm or the thread count.

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "tessera/core/dtype.h"

namespace tessera::parallel {

// The tags of the exchanges' messages: [kFirstExchangeTag, kFirstExchangeTag +
// kExchangeTags). MPI guarantees tags up to 32767. Each call that exchanges takes the
// communicator's next tag in turn (the same on every rank, since every rank issues its
// collectives in the same order), so that two calls in flight at once never match each other's
// messages, whichever phase each rank has reached. send and recv take tags below
// kFirstExchangeTag only.
inline constexpr int kFirstExchangeTag = 16384;
inline constexpr int kExchangeTags = 16384;

// Throws "<call> failed: <MPI's error text>" unless rc is MPI_SUCCESS.
void check_mpi(int rc, const char* call);

// One phase of a communicator's work: it starts MPI requests (or computes) and returns them.
using MpiPhase = std::function<std::vector<MPI_Request>()>;

// Posts one exchange among the ranks of comm: from each peer p, `count` elements of `type`
// into recv + p * recv_stride; to each peer p, send + p * send_stride (send_stride 0: the same
// block to every peer). Strides are in bytes. The rank's own slot is left untouched. Every
// phase of one call uses the call's tag.
std::vector<MPI_Request> post_exchange(const void* send, size_t send_stride, void* recv,
                                       size_t recv_stride, int count, MPI_Datatype type, int tag,
                                       MPI_Comm comm);

// out[i] = (parts[0][i] + parts[1][i] + ... + parts[n-1][i]) * scale, added left to right (the
// scale, when not 1, is one more rounding). f32 or f64. out may be one of the parts: each
// block is read in full before it is written. Threaded over fixed blocks, so the bits do not
// depend on the thread count.
void sum_in_rank_order(const void* const* parts, int n, void* out, int64_t len, DType dtype,
                       double scale);

// The n parts' addresses for sum_in_rank_order, on the stack for groups of up to 16.
class PartList {
 public:
  explicit PartList(int n) : n_(n) {
    if (n > kOnStack) heap_.resize(size_t(n));
  }
  const void*& operator[](int j) { return n_ > kOnStack ? heap_[size_t(j)] : stack_[j]; }
  const void* const* data() const { return n_ > kOnStack ? heap_.data() : stack_; }

 private:
  static constexpr int kOnStack = 16;
  int n_;
  const void* stack_[kOnStack] = {};
  std::vector<const void*> heap_;
};

}  // namespace tessera::parallel
