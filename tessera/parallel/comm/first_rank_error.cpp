#include "tessera/parallel/comm/first_rank_error.h"

#include <vector>

#include "tessera/core/error.h"
#include "tessera/core/ops/creation.h"

namespace tessera::parallel {

RankError first_rank_error(Communicator& group, const std::string& mine) {
  const int rank = group.rank(), size = group.size();
  if (size == 1) return mine.empty() ? RankError{} : RankError{rank, mine};
  // The max of size - rank over the failing ranks names the lowest of them; f64 carries every
  // rank count exactly and reduces on every communicator (CPU tensors travel through NCCL too).
  Tensor lowest = from_vector<double>({mine.empty() ? 0.0 : double(size - rank)}, Shape{1});
  group.all_reduce(lowest, CommOp::max);
  const int failed = int(lowest.item<double>());
  if (failed == 0) return {};
  const int root = size - failed;
  Tensor length = from_vector<double>({double(rank == root ? mine.size() : 0)}, Shape{1});
  group.broadcast(length, root);
  const size_t n = size_t(length.item<double>());
  // One byte per f64: messages are a line or a few, and the broadcast needs no new dtype.
  std::vector<double> bytes(n);
  if (rank == root)
    for (size_t i = 0; i < n; ++i) bytes[i] = double(static_cast<unsigned char>(mine[i]));
  Tensor text = from_vector<double>(bytes, Shape{int64_t(n)});
  if (n > 0) group.broadcast(text, root);
  std::string message(n, '\0');
  const std::vector<double> got = to_vector<double>(text);
  for (size_t i = 0; i < n; ++i) message[i] = char(static_cast<unsigned char>(got[i]));
  return {root, std::move(message)};
}

void run_agreeing(Communicator& group, const std::function<void()>& work) {
  std::string error;
  try {
    work();
  } catch (const std::exception& e) {
    error = e.what();
    if (error.empty()) error = "an error without a message";
  }
  if (RankError first = first_rank_error(group, error))
    detail::throw_error(first.message,
                        group.size() > 1 ? str_cat(" (on rank ", first.rank, ")") : "");
}

}  // namespace tessera::parallel
