#include "tessera/core/cpu/parallel.h"

#include <Eigen/Core>

#include "tessera/core/error.h"

namespace tessera {

void set_num_threads(int n) {
  TESSERA_CHECK(n >= 1 && n <= kMaxThreads, "set_num_threads: expected 1 to ", kMaxThreads,
                " threads, got ", n);
  omp_set_num_threads(n);
  Eigen::setNbThreads(n);
}

int num_threads() {
  return omp_get_max_threads();
}

}  // namespace tessera
