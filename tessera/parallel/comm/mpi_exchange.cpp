#include "tessera/parallel/comm/detail/mpi_exchange.h"

#include <algorithm>
#include <string>

#include "tessera/core/error.h"

namespace tessera::parallel {

void check_mpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  detail::throw_error(call, " failed: ", std::string(text, size_t(len)));
}

std::vector<MPI_Request> post_exchange(const void* send, size_t send_stride, void* recv,
                                       size_t recv_stride, int count, MPI_Datatype type, int tag,
                                       MPI_Comm comm) {
  int rank = 0, n = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &n);
  std::vector<MPI_Request> requests;
  requests.reserve(size_t(2 * (n - 1)));
  // Receives first, so that an eager message finds its buffer posted. Peers in the order
  // rank+1, rank+2, ...: each rank starts with a different partner.
  for (int k = 1; k < n; ++k) {
    const int p = (rank + n - k) % n;
    MPI_Request r;
    check_mpi(MPI_Irecv(static_cast<char*>(recv) + size_t(p) * recv_stride, count, type, p, tag,
                        comm, &r),
              "MPI_Irecv");
    requests.push_back(r);
  }
  for (int k = 1; k < n; ++k) {
    const int p = (rank + k) % n;
    MPI_Request r;
    check_mpi(MPI_Isend(static_cast<const char*>(send) + size_t(p) * send_stride, count, type, p,
                        tag, comm, &r),
              "MPI_Isend");
    requests.push_back(r);
  }
  return requests;
}

namespace {

// Blocks of kBlock elements accumulate in a stack buffer, so that the n parts are each read
// once and out written once (one pass over memory, vectorised adds), and an out that aliases a
// part is written only after the block has been read. Pieces of kGrain elements go to the
// backend's threads (tessera::num_threads, set through OpenMP); each element's adds are the
// same whichever thread runs them.
template <class T>
void sum_typed(const void* const* parts, int n, void* out, int64_t len, T scale) {
  constexpr int64_t kBlock = 1024;
  // ~64 KiB of output per piece: below that, waking threads costs more than the adds.
  constexpr int64_t kGrain = (int64_t(64) << 10) / int64_t(sizeof(T));
  T* o = static_cast<T*>(out);
  auto sum_piece = [&](int64_t piece) {
    T acc[kBlock];
    const int64_t end = std::min(len, (piece + 1) * kGrain);
    for (int64_t b = piece * kGrain; b < end; b += kBlock) {
      const int64_t m = std::min(kBlock, end - b);
      const T* p0 = static_cast<const T*>(parts[0]) + b;
      for (int64_t i = 0; i < m; ++i) acc[i] = p0[i];
      for (int j = 1; j < n; ++j) {
        const T* pj = static_cast<const T*>(parts[j]) + b;
        for (int64_t i = 0; i < m; ++i) acc[i] += pj[i];
      }
      if (scale != T(1))
        for (int64_t i = 0; i < m; ++i) acc[i] *= scale;
      for (int64_t i = 0; i < m; ++i) o[b + i] = acc[i];
    }
  };
  const int64_t pieces = (len + kGrain - 1) / kGrain;
  if (pieces == 1) return sum_piece(0);  // no OpenMP region: the latency-bound sizes
#pragma omp parallel for schedule(static)
  for (int64_t piece = 0; piece < pieces; ++piece) sum_piece(piece);
}

}  // namespace

void sum_in_rank_order(const void* const* parts, int n, void* out, int64_t len, DType dtype,
                       double scale) {
  TESSERA_ASSERT(n >= 1, "sum_in_rank_order of ", n, " parts");
  if (dtype == DType::f64)
    sum_typed<double>(parts, n, out, len, scale);
  else if (dtype == DType::f32)
    sum_typed<float>(parts, n, out, len, float(scale));
  else
    ::tessera::detail::throw_error("sum_in_rank_order: ", dtype_name(dtype), " is not f32 or f64");
}

}  // namespace tessera::parallel
