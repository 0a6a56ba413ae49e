// Embedding: a row gather (forward) and a scatter-add of gradient rows (backward).
// Memory-bound: the forward pass copies N rows of C elements; the backward pass reads N
// gradient rows and writes each touched weight row once.
//
// Backward determinism: a counting sort of the ids lists, for each vocabulary row, the
// positions that name it in increasing order. Threads then split the distinct ids, and each
// weight row is summed by one thread in position order, in the compute type (float for
// bf16/f16), and written once. No two threads write one row, so there are no atomics, and the
// sum order (hence the bits) does not depend on the thread count. Chosen over splitting C into
// column blocks because it also keeps the 16-bit sums in float and touches only used rows.

#include <Eigen/Core>
#include <cstring>
#include <type_traits>
#include <vector>

#include "tessera/core/detail/element_convert.h"
#include "tessera/core/cpu/cpu_backend.h"
#include "tessera/core/cpu/parallel.h"

namespace tessera {

namespace {

// The ids as int64, after checking each lies in [0, V); names the first bad one.
template <class I>
std::vector<int64_t> checked_ids(const Tensor& ids, int64_t num_embeddings, const char* op) {
  const I* p = ids.data<I>(op);
  const int64_t n = ids.numel();
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = int64_t(p[i]);
    TESSERA_CHECK(id >= 0 && id < num_embeddings, op, ": id ", id, " at flat position ", i,
                  " is outside [0, ", num_embeddings, "), the rows of the weight");
    out[size_t(i)] = id;
  }
  return out;
}

std::vector<int64_t> load_ids(const Tensor& ids, int64_t num_embeddings, const char* op) {
  return dispatch_integer(ids.dtype(), op,
                          [&]<class I>() { return checked_ids<I>(ids, num_embeddings, op); });
}

}  // namespace

void CpuBackend::embedding_forward(const Tensor& weight, const Tensor& ids, const Tensor& out) {
  const int64_t v = weight.shape()[0], c = weight.shape()[1];
  const std::vector<int64_t> id = load_ids(ids, v, "embedding");
  const size_t row_bytes = size_t(c) * weight.itemsize();
  const char* wp = static_cast<const char*>(weight.data_ptr("embedding"));
  char* op = static_cast<char*>(out.data_ptr("embedding"));
  const int64_t n = ids.numel();
  cpu::parallel_for(n, std::max<int64_t>(1, 4096 / std::max<int64_t>(c, 1)),
                    [&](int64_t begin, int64_t end) {
                      for (int64_t i = begin; i < end; ++i)
                        std::memcpy(op + size_t(i) * row_bytes,
                                    wp + size_t(id[size_t(i)]) * row_bytes, row_bytes);
                    });
}

void CpuBackend::embedding_backward(const Tensor& ids, const Tensor& gy, const Tensor& gweight) {
  const int64_t v = gweight.shape()[0], c = gweight.shape()[1], n = ids.numel();
  const std::vector<int64_t> id = load_ids(ids, v, "embedding_backward");

  // Counting sort: positions of id k are order[start[k] .. start[k + 1]), increasing.
  std::vector<int64_t> start(size_t(v) + 1, 0);
  for (int64_t k : id) ++start[size_t(k) + 1];
  std::vector<int64_t> used;
  for (int64_t k = 0; k < v; ++k) {
    if (start[size_t(k) + 1] > 0) used.push_back(k);
    start[size_t(k) + 1] += start[size_t(k)];
  }
  std::vector<int64_t> order(static_cast<size_t>(n)), next(start.begin(), start.end() - 1);
  for (int64_t i = 0; i < n; ++i) order[size_t(next[size_t(id[size_t(i)])]++)] = i;

  dispatch_floating(gweight.dtype(), "embedding_backward", [&]<class T>() {
    using A = acc_type_t<T>;
    using Arr = Eigen::Array<A, Eigen::Dynamic, 1>;
    const T* gp = gy.data<T>("embedding_backward");
    T* wp = gweight.data<T>("embedding_backward");
    const int64_t rows = int64_t(used.size());
    // Elements read per weight row, on average; pieces of about 4096 of them.
    const int64_t per_row = std::max<int64_t>(1, c * (n / std::max<int64_t>(rows, 1)));
    cpu::parallel_for(rows, std::max<int64_t>(1, 4096 / per_row), [&](int64_t begin, int64_t end) {
      Arr acc(c);
      for (int64_t u = begin; u < end; ++u) {
        const int64_t k = used[size_t(u)];
        T* dst = wp + k * c;
        for (int64_t j = 0; j < c; ++j) acc[j] = element::load(dst + j);
        for (int64_t s = start[size_t(k)]; s < start[size_t(k) + 1]; ++s) {
          const T* src = gp + order[size_t(s)] * c;
          if constexpr (std::is_same_v<T, A>) {
            acc += Eigen::Map<const Arr>(src, c);
          } else {
            for (int64_t j = 0; j < c; ++j) acc[j] += element::load(src + j);
          }
        }
        for (int64_t j = 0; j < c; ++j) element::store(dst + j, acc[j]);
      }
    });
  });
}

}  // namespace tessera
