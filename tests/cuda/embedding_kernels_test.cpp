// The embedding launchers (tessera/cuda/kernels/embedding.h) under the simulator, against the
// CPU backend: gathers through the 16-byte and the element path, a backward pass with repeated
// ids whose bits must MATCH the CPU's (same per-row summation order), and ids outside [0, V).

#include <gtest/gtest.h>

#include "tests/cuda/device_kernels.h"
#include "tests/cuda/mirror_tensor.h"
#include "tests/cuda/sim_test_util.h"

namespace tessera::cuda {
namespace {

using testing::kernels;

using testing::cpu_backend;
using testing::expect_same_bits;
using testing::Mirror;
using testing::mirror;
using testing::upload;

TEST(EmbeddingKernels, ForwardGathersRowsBitExactly) {
  uint64_t seed = 1;
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16})
    for (DType id_dtype : {DType::i32, DType::i64})
      for (int64_t c : {int64_t(8), int64_t(5)}) {  // 16-byte rows (f64: 64 bytes) and not
        const int64_t v = 11, n = 37;
        Mirror w = mirror(Shape{v, c}, dtype, seed++);
        Mirror ids = mirror(Shape{n}, id_dtype, seed++, 0.0, double(v));
        Mirror out = mirror(Shape{n, c}, dtype, seed++);
        cpu_backend().embedding_forward(w.host, ids.host, out.host);
        kernels().embedding_forward(w.dev, ids.dev, out.dev);
        expect_same_bits(
            out, str_cat("embedding ", dtype_name(dtype), " ids ", dtype_name(id_dtype), " C=", c));
      }
}

TEST(EmbeddingKernels, BackwardMatchesCpuBits) {
  uint64_t seed = 100;
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16})
    for (int64_t n : {int64_t(1), int64_t(45), int64_t(64)}) {
      // V = 9 and up to 64 ids: most rows are named several times, some not at all (ids are
      // drawn from [0, 7)), so the per-row order of additions matters and is checked.
      const int64_t v = 9, c = 13;
      Mirror ids = mirror(Shape{n}, DType::i64, seed++, 0.0, 7.0);
      Mirror gy = mirror(Shape{n, c}, dtype, seed++);
      Mirror gw = mirror(Shape{v, c}, dtype, seed++);
      std::memset(gw.host_buf.data_ptr(), 0, gw.host_buf.nbytes());
      upload(gw);
      cpu_backend().embedding_backward(ids.host, gy.host, gw.host);
      kernels().embedding_backward(ids.dev, gy.dev, gw.dev);
      expect_same_bits(gw, str_cat("embedding_backward ", dtype_name(dtype), " n=", n));
    }
}

TEST(EmbeddingKernels, BackwardAddsOntoExistingValues) {
  Mirror ids = mirror(Shape{20}, DType::i32, 1, 0.0, 4.0);
  Mirror gy = mirror(Shape{20, 6}, DType::f32, 2), gw = mirror(Shape{5, 6}, DType::f32, 3);
  cpu_backend().embedding_backward(ids.host, gy.host, gw.host);
  kernels().embedding_backward(ids.dev, gy.dev, gw.dev);
  expect_same_bits(gw, "embedding_backward onto nonzero gweight");
}

TEST(EmbeddingKernels, IdsOutsideTheTableAreReportedByPosition) {
  Mirror w = mirror(Shape{4, 8}, DType::f32, 1);
  std::vector<int64_t> bad = {1, 3, 4, 0, -1};
  Tensor ids_host = from_vector(bad, Shape{5});
  Tensor ids = testing::device_copy(ids_host);
  Mirror out = mirror(Shape{5, 8}, DType::f32, 2);
  testing::expect_error([&] { kernels().embedding_forward(w.dev, ids, out.dev); },
                        {"embedding: id 4 at flat position 2 is outside [0, 4)"});
  Mirror gy = mirror(Shape{5, 8}, DType::f32, 3);
  testing::expect_error([&] { kernels().embedding_backward(ids, gy.dev, w.dev); },
                        {"embedding_backward: id 4 at flat position 2 is outside [0, 4)"});
}

}  // namespace
}  // namespace tessera::cuda
