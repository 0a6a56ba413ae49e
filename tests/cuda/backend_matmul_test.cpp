// Backend::matmul and matmul_gelu on the simulated device (the SIMT GEMM and its GELU
// epilogue; cuBLASLt runs only on a GPU) against the CPU backend, over every transpose, bias,
// beta and batch combination, with sizes that are not multiples of the 16x16 tile.

#include "tessera/autograd/functions/linear_gelu.h"
#include "tessera/core/ops/matmul.h"
#include "tests/cuda/backend_test_util.h"

namespace tessera::cuda::testing {
namespace {

using BackendMatmul = DeviceCuda;

constexpr int64_t kM = 17, kN = 19, kK = 23;

// A [batch, r, c] operand: stored transposed when `trans` (so that op(x) is [r, c] either way).
Tensor operand(int64_t batch, int64_t r, int64_t c, bool trans, DType dtype, uint64_t seed) {
  return ops::cast(host_randn(trans ? Shape{batch, c, r} : Shape{batch, r, c}, DType::f32, seed),
                   dtype);
}

// Runs one case on both backends; `broadcast_b` gives b a batch stride of 0.
void check_case(Backend& gpu, bool ta, bool tb, bool with_bias, float beta, int64_t batch,
                bool broadcast_b, DType dtype, double atol, double rtol) {
  const std::string what =
      str_cat(dtype_name(dtype), " trans_a=", ta, " trans_b=", tb, " bias=", with_bias,
              " beta=", beta, " batch=", batch, " broadcast_b=", broadcast_b);
  const Tensor a = operand(batch, kM, kK, ta, dtype, 21);
  Tensor b = operand(broadcast_b ? 1 : batch, kK, kN, tb, dtype, 22);
  const Tensor bias =
      with_bias ? ops::reshape(operand(1, 1, kN, false, dtype, 23), {kN}) : Tensor();
  const Tensor init = operand(batch, kM, kN, false, dtype, 24);
  MatmulArgs args;
  args.trans_a = ta;
  args.trans_b = tb;
  args.alpha = 0.75f;
  args.beta = beta;
  auto batched = [&](const Tensor& t) {
    return broadcast_b ? Tensor(t.storage(), Shape{batch, t.size(1), t.size(2)},
                                Strides{0, t.stride(1), t.stride(2)}, t.offset(), t.dtype())
                       : t;
  };
  // Reference in f32 on the CPU from the same (possibly 16-bit) values.
  const DType ref_dtype = dtype == DType::f64 ? DType::f64 : DType::f32;
  Tensor ref = ops::clone(ops::cast(init, ref_dtype));  // never init itself: it is uploaded below
  backend_for(Device::cpu())
      .matmul(ops::cast(a, ref_dtype), batched(ops::cast(b, ref_dtype)),
              with_bias ? ops::cast(bias, ref_dtype) : Tensor(), ref, args);

  const Tensor da = DeviceCudaAccess::upload(a), db = DeviceCudaAccess::upload(b);
  const Tensor dbias = with_bias ? DeviceCudaAccess::upload(bias) : Tensor();
  // beta = 0 must not read out: it starts as NaN from a fresh allocation in that case.
  Tensor dout =
      beta != 0.0f ? DeviceCudaAccess::upload(init) : empty({batch, kM, kN}, dtype, Device::cuda());
  gpu.matmul(da, batched(db), dbias, dout, args);
  expect_close(ops::to(dout, Device::cpu()), ref, atol, rtol, what);
}

TEST_F(BackendMatmul, EveryTransposeBiasBetaAndBatchF32) {
  // f32 with f32 accumulation on both sides, in different orders: K = 23 products of N(0, 1)
  // values give sums of magnitude ~5 with rounding error ~K * 6e-8 * 5 < 1e-5.
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (bool bias : {false, true})
        for (float beta : {0.0f, 1.0f})
          for (int64_t batch : {1, 3})
            check_case(gpu(), ta, tb, bias, beta, batch, false, DType::f32, 1e-5, 1e-5);
}

TEST_F(BackendMatmul, BroadcastBatchAndOtherDtypes) {
  check_case(gpu(), false, true, true, 0.0f, 3, true, DType::f32, 1e-5, 1e-5);
  check_case(gpu(), true, false, false, 1.0f, 2, true, DType::f32, 1e-5, 1e-5);
  // f64: both sides accumulate in f64; error ~K * 1e-16 * 5.
  check_case(gpu(), true, true, true, 1.0f, 2, false, DType::f64, 1e-12, 1e-12);
  // bf16 / f16: same 16-bit inputs on both sides, f32 accumulation; the device result is then
  // rounded to the 16-bit type (half an ulp: 2^-9 relative for bf16, 2^-12 for f16) and the
  // reference is not; sums near zero get an absolute allowance of one ulp of a typical
  // magnitude-5 sum.
  check_case(gpu(), false, false, true, 1.0f, 2, false, DType::bf16, 5.0 * 0x1p-8, 0x1p-8);
  check_case(gpu(), true, true, false, 0.0f, 2, false, DType::f16, 5.0 * 0x1p-11, 0x1p-11);
}

// matmul_gelu on the simulated device (the SIMT GEMM with its GELU epilogue) against the CPU
// backend's fused GEMM on the same values, computed in f32 (f64 for f64).
void check_gelu_case(Backend& gpu, bool ta, bool tb, bool with_bias, int64_t batch, DType dtype,
                     double atol, double rtol) {
  const std::string what = str_cat("matmul_gelu ", dtype_name(dtype), " trans_a=", ta,
                                   " trans_b=", tb, " bias=", with_bias, " batch=", batch);
  const Tensor a = operand(batch, kM, kK, ta, dtype, 41);
  const Tensor b = operand(batch, kK, kN, tb, dtype, 42);
  const Tensor bias =
      with_bias ? ops::reshape(operand(1, 1, kN, false, dtype, 43), {kN}) : Tensor();
  MatmulArgs args;
  args.trans_a = ta;
  args.trans_b = tb;
  const DType ref_dtype = dtype == DType::f64 ? DType::f64 : DType::f32;
  const Tensor pre_ref = empty({batch, kM, kN}, ref_dtype),
               out_ref = empty({batch, kM, kN}, ref_dtype);
  backend_for(Device::cpu())
      .matmul_gelu(ops::cast(a, ref_dtype), ops::cast(b, ref_dtype),
                   with_bias ? ops::cast(bias, ref_dtype) : Tensor(), pre_ref, out_ref, args);

  const Tensor dpre = empty({batch, kM, kN}, dtype, Device::cuda());
  const Tensor dout = empty({batch, kM, kN}, dtype, Device::cuda());
  gpu.matmul_gelu(DeviceCudaAccess::upload(a), DeviceCudaAccess::upload(b),
                  with_bias ? DeviceCudaAccess::upload(bias) : Tensor(), dpre, dout, args);
  expect_close(ops::to(dpre, Device::cpu()), pre_ref, atol, rtol, what + ": pre");
  expect_close(ops::to(dout, Device::cpu()), out_ref, atol, rtol, what + ": out");
}

TEST_F(BackendMatmul, GeluEpilogueEveryTransposeBiasAndBatch) {
  // pre: the f32 bound above (1e-5). out = gelu(pre): GELU's slope is at most 1.13, so pre's
  // error passes through about unchanged, and the two tanh implementations (Eigen's rational
  // approximation on the CPU, the C library's tanhf here) differ by a few ulp of tanh, times
  // 0.5|x| <= 10: ~1e-6. Both stay under 2e-5.
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (bool bias : {false, true})
        for (int64_t batch : {1, 3})
          check_gelu_case(gpu(), ta, tb, bias, batch, DType::f32, 2e-5, 1e-5);
}

TEST_F(BackendMatmul, GeluEpilogueOtherDtypes) {
  // f64: f64 accumulation and libm's tanh on both sides.
  check_gelu_case(gpu(), true, false, true, 2, DType::f64, 1e-12, 1e-12);
  // bf16 / f16: the device rounds pre and out to the 16-bit type (half an ulp: 2^-9 relative
  // for bf16, 2^-12 for f16) and takes GELU of the unrounded accumulator, as cuBLASLt does; the
  // reference rounds neither. Values near zero get one ulp of a typical magnitude-5 sum.
  check_gelu_case(gpu(), false, true, true, 1, DType::bf16, 5.0 * 0x1p-8, 0x1p-8);
  check_gelu_case(gpu(), true, true, false, 2, DType::f16, 5.0 * 0x1p-11, 0x1p-11);
}

TEST_F(BackendMatmul, GeluEpilogueRefusesMismatchedPre) {
  const Tensor a = zeros({1, 2, 3}, DType::f32, Device::cuda());
  const Tensor b = zeros({1, 3, 4}, DType::f32, Device::cuda());
  const Tensor pre = empty({1, 2, 5}, DType::f32, Device::cuda());
  const Tensor out = empty({1, 2, 4}, DType::f32, Device::cuda());
  try {
    gpu().matmul_gelu(a, b, Tensor(), pre, out, MatmulArgs{});
    FAIL() << "a pre-activation of another shape must be refused";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("matmul_gelu on cuda"), std::string::npos) << message;
    EXPECT_NE(message.find("[1, 2, 5]"), std::string::npos) << message;
  }
}

TEST_F(BackendMatmul, UnsupportedDtypeNamesDeviceAndDtype) {
  const Tensor a = zeros({1, 2, 3}, DType::i32, Device::cuda());
  const Tensor b = zeros({1, 3, 4}, DType::i32, Device::cuda());
  const Tensor out = empty({1, 2, 4}, DType::i32, Device::cuda());
  try {
    gpu().matmul(a, b, Tensor(), out, MatmulArgs{});
    FAIL() << "an i32 GEMM must be refused";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("i32"), std::string::npos) << message;
    EXPECT_NE(message.find("cuda"), std::string::npos) << message;
  }
}

TEST_F(BackendMatmul, FrontEndMatmulOnTheDevice) {
  // ops::matmul through the front end with [2, 3, M, K] x [K, N] and a bias: the front end
  // folds the batch and hands the backend gemm-ready views.
  const Tensor a = host_randn({2, 3, kM, kK}, DType::f32, 31);
  const Tensor b = host_randn({kN, kK}, DType::f32, 32);
  const Tensor bias = host_randn({kN}, DType::f32, 33);
  const Tensor want = ops::matmul(a, b, false, true, bias);
  const Tensor got = ops::matmul(to_gpu(a), to_gpu(b), false, true, to_gpu(bias));
  EXPECT_EQ(got.device(), Device::cuda());
  // Same f32 accumulation bound as above.
  expect_close(to_cpu(got), want, 1e-5, 1e-5, "front-end matmul");
}

TEST_F(BackendMatmul, FrontEndBf16GoesToTheDeviceGemmAsItIs) {
  // On a device the front end hands bf16 operands to the GEMM unconverted (f32 accumulation
  // inside); the CPU converts them to f32 and rounds the result. Same products, summed in
  // different orders: the f32 sums agree to ~1e-6 relative, so the bf16 results differ by at
  // most one ulp (2^-8 relative) where a sum falls near a rounding boundary. matmul_gelu's
  // output adds GELU of the unrounded sum on the device against GELU of the rounded one on the
  // CPU: half an ulp of pre through a slope of at most 1.13, plus the output's own rounding,
  // under 2^-7. Sums near zero get those fractions of a typical magnitude-5 sum.
  const Tensor a = ops::cast(host_randn({2, kM, kK}, DType::f32, 51), DType::bf16);
  const Tensor b = ops::cast(host_randn({kN, kK}, DType::f32, 52), DType::bf16);
  const Tensor bias = ops::cast(host_randn({kN}, DType::f32, 53), DType::bf16);
  const Tensor want = ops::matmul(a, b, false, true, bias);
  const Tensor got = ops::matmul(to_gpu(a), to_gpu(b), false, true, to_gpu(bias));
  EXPECT_EQ(got.dtype(), DType::bf16);
  expect_close(to_cpu(got), want, 5.0 * 0x1p-8, 0x1p-8, "bf16 matmul");
  const ops::MatmulGelu fused_want = ops::matmul_gelu(a, b, false, true, bias);
  const ops::MatmulGelu fused = ops::matmul_gelu(to_gpu(a), to_gpu(b), false, true, to_gpu(bias));
  expect_close(to_cpu(fused.pre), fused_want.pre, 5.0 * 0x1p-8, 0x1p-8, "bf16 matmul_gelu pre");
  expect_close(to_cpu(fused.out), fused_want.out, 5.0 * 0x1p-7, 0x1p-7, "bf16 matmul_gelu out");
}

TEST_F(BackendMatmul, FrontEndLinearGeluOnTheDevice) {
  // linear_gelu through the front end on [2, 3, M, K] activations: one folded GEMM with the
  // epilogue, then the backward pass (gelu backward on the saved pre-activation, then the
  // GEMMs) on the device. y as in GeluEpilogueEveryTransposeBiasAndBatch. The weight and bias
  // gradients sum 2*3*M = 102 terms of magnitude up to ~10 in different orders: up to
  // 102 * 6e-8 * 10 = 6e-5 apart, so atol 1e-4.
  const Tensor x = host_randn({2, 3, kM, kK}, DType::f32, 34);
  const Tensor w = host_randn({kN, kK}, DType::f32, 35);
  const Tensor bias = host_randn({kN}, DType::f32, 36);
  const Tensor gy = host_randn({2, 3, kM, kN}, DType::f32, 37);
  auto run = [&](Device device) {
    const Tensor dx = ops::to(x, device), dw = ops::to(w, device), db = ops::to(bias, device);
    for (const Tensor* t : {&dx, &dw, &db}) t->set_requires_grad(true);
    const Tensor y = linear_gelu(dx, dw, db);
    y.backward(ops::to(gy, device));
    std::vector<Tensor> r;
    for (const Tensor& t : {y, dx.grad(), dw.grad(), db.grad()}) r.push_back(to_cpu(t));
    return r;
  };
  const std::vector<Tensor> want = run(Device::cpu()), got = run(Device::cuda());
  const char* names[] = {"y", "grad x", "grad weight", "grad bias"};
  for (int i = 0; i < 4; ++i) expect_close(got[i], want[i], 1e-4, 1e-5, names[i]);
}

}  // namespace
}  // namespace tessera::cuda::testing
