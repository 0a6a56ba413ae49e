#pragma once
// The op harness: one OpCase per op, run on random shapes (broadcasting, non-contiguous views,
// sizes that are no multiple of any block size). For every case and trial:
//   1. forward in f32 against a plain-loop f64 reference;
//   2. backward against central differences in f64 (gradcheck);
//   3. on every non-CPU device with a registered backend, the same op against the CPU result
//      (this is where the CUDA backend, real or simulated, plugs in).
//
// Cases register themselves with TESSERA_OP_CASE in the op-family files next to this one.

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "tessera/tessera.h"

namespace tessera::testing {

// Random shapes and tensors for one trial.
class CaseRng {
 public:
  explicit CaseRng(uint64_t seed) : engine_(seed), gen_(seed) {}
  int64_t size(int64_t lo, int64_t hi);  // uniform in [lo, hi]
  bool coin();
  // A shape of ndim dims with sizes in [lo, hi].
  Shape shape(int ndim, int64_t lo = 1, int64_t hi = 9);
  // Normal values of the given shape; about half the time returned as a non-contiguous view
  // (a transposed or strided slice of a larger buffer) with the same shape and values drawn
  // the same way.
  Tensor tensor(const Shape& shape, DType dtype, double scale = 1.0);
  // Always a non-contiguous view.
  Tensor strided_tensor(const Shape& shape, DType dtype, double scale = 1.0);
  // Uniform values in [lo, hi).
  Tensor uniform(const Shape& shape, DType dtype, double lo, double hi);
  // Integer ids in [0, n).
  Tensor ids(const Shape& shape, int64_t n, DType dtype = DType::i64);
  // Drops leading dims and sets some dims to 1 so the result broadcasts to `shape`.
  Shape broadcastable_to(const Shape& shape);
  std::mt19937_64& engine() { return engine_; }

 private:
  std::mt19937_64 engine_;
  Generator gen_;
};

// Host copy of a tensor as f64 values with row-major indexing, for references.
struct HostTensor {
  Shape shape;
  std::vector<double> v;

  explicit HostTensor(const Tensor& t);
  HostTensor(const Shape& s, double fill = 0.0);
  int64_t index(const std::vector<int64_t>& idx) const;
  double& at(const std::vector<int64_t>& idx) { return v[size_t(index(idx))]; }
  double at(const std::vector<int64_t>& idx) const { return v[size_t(index(idx))]; }
  // The element that broadcasting maps out_idx (an index into a larger shape) to.
  double broadcast_at(const std::vector<int64_t>& out_idx) const;
  Tensor to_tensor(DType dtype = DType::f64) const;
};

// Calls f(idx) for every index of shape in row-major order.
void for_each_index(const Shape& shape, const std::function<void(const std::vector<int64_t>&)>& f);

struct OpCase {
  std::string name;  // the op's name in the harness's op set (harness_test.cpp)
  // Inputs for one trial, floating ones in `dtype` (f32 for the forward check, f64 for
  // gradcheck); the same seed gives the same shapes and values in both dtypes.
  std::function<std::vector<Tensor>(CaseRng&, DType)> make_inputs;
  // The op through the differentiable API. Must return one floating tensor.
  std::function<Tensor(const std::vector<Tensor>&)> run;
  // The same result computed with plain loops in f64 from the inputs' values.
  std::function<Tensor(const std::vector<Tensor>&)> reference;
  // Indices of inputs that gradcheck perturbs; empty for non-differentiable ops.
  std::vector<int> grad_inputs;
  // f32 forward against the f64 reference. Default: f32 round-off over short sums.
  double rtol = 1e-5;
  double atol = 1e-5;
  autograd::GradcheckOptions grad;  // f64 tolerances (see gradcheck.h for their reasons)
  int trials = 4;
  // Whether the case takes bf16 floating inputs (the device check's bf16 mode runs it so).
  bool bf16_inputs = true;
};

bool register_case(OpCase c);
const std::vector<OpCase>& all_cases();
const OpCase* find_case(const std::string& name);

}  // namespace tessera::testing

#define TESSERA_OP_CASE_CONCAT2(a, b) a##b
#define TESSERA_OP_CASE_CONCAT(a, b) TESSERA_OP_CASE_CONCAT2(a, b)
// Defines a function returning an OpCase and registers it at static-initialisation time:
//   TESSERA_OP_CASE(add) { OpCase c; ...; return c; }
#define TESSERA_OP_CASE(ident)                                                            \
  static ::tessera::testing::OpCase TESSERA_OP_CASE_CONCAT(make_op_case_, ident)();       \
  [[maybe_unused]] static const bool TESSERA_OP_CASE_CONCAT(op_case_registered_, ident) = \
      ::tessera::testing::register_case(TESSERA_OP_CASE_CONCAT(make_op_case_, ident)());  \
  static ::tessera::testing::OpCase TESSERA_OP_CASE_CONCAT(make_op_case_, ident)()
