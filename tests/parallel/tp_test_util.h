#pragma once
// Shared pieces of the tensor-parallel tests: the tp group of this rank, random full weights,
// and comparisons that report the worst element.
//
// Every rank also runs the single-process twin itself, on the same inputs: the twin is
// deterministic, so each rank compares against identical reference values.

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "tessera/nn/nn.h"
#include "tessera/parallel/comm/mpi_communicator.h"
#include "tessera/parallel/mesh.h"
#include "tessera/parallel/tp/full_state.h"
#include "tessera/parallel/tp/tensor_parallel.h"
#include "tessera/tessera.h"

namespace tessera::parallel::testing {

// A tensor-parallel group of `tp` consecutive world ranks (dp = world / tp).
inline std::shared_ptr<tp::TensorParallel> make_tp(int tp, bool sequence_parallel) {
  auto world = MpiCommunicator::world();
  auto mesh = std::make_shared<DeviceMesh>(world, MeshShape{world->size() / tp, 1, tp});
  return tp::TensorParallel::from_mesh(mesh, sequence_parallel);
}

// A tensor drawn N(0, std) from `seed`, the same on every rank.
inline Tensor random_tensor(const Shape& shape, uint64_t seed, double std = 1.0,
                            DType dtype = DType::f32) {
  Generator gen(seed, 0);
  return randn(shape, gen, dtype, Device::cpu(), 0.0, std);
}

// Replaces every parameter of `model` with random values (biases and norm weights included,
// so that sharding them is tested), the same on every rank.
inline void randomize(nn::Module& model, uint64_t seed) {
  NoGradGuard no_grad;
  uint64_t k = seed;
  for (auto& [name, t] : model.named_parameters())
    ops::copy_(t, random_tensor(t.shape(), ++k, 0.3, t.dtype()));
}

// A leaf that requires grad, holding a copy of x.
inline Tensor leaf(const Tensor& x) {
  Tensor l = ops::clone(x);
  l.set_requires_grad(true);
  return l;
}

// EXPECT got ~= want within |got - want| <= atol + rtol |want|, naming `what` and the worst
// element.
inline void expect_close(const Tensor& got, const Tensor& want, double rtol, double atol,
                         const std::string& what) {
  ASSERT_TRUE(got.defined()) << what << ": undefined";
  ASSERT_TRUE(want.defined()) << what << ": reference undefined";
  ASSERT_EQ(got.shape(), want.shape()) << what;
  CloseReport r = compare_close(got, want, rtol, atol);
  EXPECT_TRUE(r.ok) << what << ": " << r.message << " (max abs error " << r.max_abs_error
                    << ")";
}

// Bitwise equality, for the cases where the order of every reduction is unchanged.
inline void expect_equal(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_TRUE(got.defined() && want.defined()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  EXPECT_TRUE(equal(ops::contiguous(got), ops::contiguous(want)))
      << what << ": not bit-identical; " << compare_close(got, want, 0, 0).message;
}

}  // namespace tessera::parallel::testing
