// Host <-> device copies through the simulated CUDA backend: contiguous and non-contiguous
// sides, dtype changes on the way, device-to-device copies, and fill/arange against the CPU
// backend bit for bit.

#include "tessera/core/ops/movement.h"
#include "tests/cuda/backend_test_util.h"

namespace tessera::cuda::testing {
namespace {

using BackendCopy = DeviceCuda;

TEST_F(BackendCopy, RoundTripKeepsBitsForEveryDtype) {
  for (DType dtype : kAllDTypes) {
    const Tensor host = ops::cast(host_randn({5, 7}, DType::f32, 11, 3.0), dtype);
    const Tensor d = to_gpu(host);
    EXPECT_EQ(d.device(), Device::cuda());
    expect_same_bits(to_cpu(d), host, str_cat("round trip ", dtype_name(dtype)));
  }
}

TEST_F(BackendCopy, NonContiguousHostSourceAndDestination) {
  const Tensor host = host_randn({6, 9}, DType::f32, 12);
  const Tensor transposed = ops::transpose(host, 0, 1);  // [9, 6], strides (1, 9)
  // The backend method itself stages a strided host source (the front end would make it
  // contiguous first).
  Tensor d = empty({9, 6}, DType::f32, Device::cuda());
  gpu().copy_host(transposed, d);
  expect_same_bits(to_cpu(d), ops::contiguous(transposed), "strided host source");
  // ... and scatters into a strided host destination.
  Tensor back = empty({6, 9}, DType::f32);
  gpu().copy_host(d, ops::transpose(back, 0, 1));
  expect_same_bits(back, host, "strided host destination");
}

TEST_F(BackendCopy, UploadConvertsToTheDestinationDtype) {
  const Tensor host = host_randn({3, 11}, DType::f32, 13);
  Tensor d = empty({3, 11}, DType::bf16, Device::cuda());
  gpu().copy_host(host, d);
  expect_same_bits(to_cpu(d), ops::cast(host, DType::bf16), "f32 -> bf16 upload");
  Tensor back = empty({3, 11}, DType::f64);
  gpu().copy_host(d, back);
  expect_same_bits(back, ops::cast(ops::cast(host, DType::bf16), DType::f64), "bf16 -> f64");
}

TEST_F(BackendCopy, DeviceToDeviceClone) {
  const Tensor host = host_randn({4, 13}, DType::f32, 14);
  const Tensor d = to_gpu(host);
  const Tensor c = ops::clone(d);
  EXPECT_NE(c.data_ptr(), d.data_ptr());
  expect_same_bits(to_cpu(c), host, "clone on the device");
}

TEST_F(BackendCopy, NonContiguousDeviceSideIsStagedOnTheDevice) {
  const Tensor host = host_randn({7, 5}, DType::f32, 15);
  const Tensor d = to_gpu(host);
  // Download of a strided device view (through a contiguous device temporary and the copy
  // kernel), straight into a host tensor of another dtype.
  Tensor back = empty({5, 7}, DType::f64);
  gpu().copy_host(ops::transpose(d, 0, 1), back);
  expect_same_bits(back, ops::cast(ops::contiguous(ops::transpose(host, 0, 1)), DType::f64),
                   "strided device source");
  // Upload into a strided device view: every other column of a wider device tensor.
  Tensor wide = zeros({7, 11}, DType::f32, Device::cuda());
  Tensor cols(wide.storage(), Shape{7, 5}, Strides{11, 2}, 1, DType::f32);
  gpu().copy_host(host, cols);
  Tensor want = zeros({7, 11}, DType::f32);
  backend_for(Device::cpu())
      .copy(host, Tensor(want.storage(), Shape{7, 5}, Strides{11, 2}, 1, DType::f32));
  expect_same_bits(to_cpu(wide), want, "strided device destination");
}

TEST_F(BackendCopy, FillMatchesTheCpuForEveryDtypeAndLayout) {
  for (DType dtype : kAllDTypes) {
    for (double value : {0.0, -1.5, 3.14159, 70000.25}) {
      // 37 elements: a 16-byte vector body and a ragged tail (aligned start).
      Tensor d = empty({37}, dtype, Device::cuda());
      gpu().fill(d, value);
      expect_same_bits(to_cpu(d), full({37}, value, dtype),
                       str_cat("fill ", dtype_name(dtype), " ", value));
    }
    // A strided destination: every other column of a [5, 8] tensor.
    Tensor base = zeros({5, 8}, dtype, Device::cuda());
    Tensor cols(base.storage(), Shape{5, 4}, Strides{8, 2}, 1, dtype);
    gpu().fill(cols, 2.5);
    Tensor want = zeros({5, 8}, dtype);
    cpu_backend_fill(Tensor(want.storage(), Shape{5, 4}, Strides{8, 2}, 1, dtype), 2.5);
    expect_same_bits(to_cpu(base), want, str_cat("strided fill ", dtype_name(dtype)));
    // An unaligned contiguous destination (offset by one element) takes the scalar path.
    Tensor shifted(base.storage(), Shape{39}, Strides{1}, 1, dtype);
    gpu().fill(shifted, -4.0);
    Tensor want2 = zeros({5, 8}, dtype);
    cpu_backend_fill(Tensor(want2.storage(), Shape{39}, Strides{1}, 1, dtype), -4.0);
    expect_same_bits(to_cpu(base), want2, str_cat("unaligned fill ", dtype_name(dtype)));
  }
}

TEST_F(BackendCopy, ArangeMatchesTheCpuForEveryDtype) {
  for (DType dtype : kAllDTypes) {
    const Tensor d = arange(-3.0, 50.0, 0.7, dtype, Device::cuda());
    expect_same_bits(to_cpu(d), arange(-3.0, 50.0, 0.7, dtype),
                     str_cat("arange ", dtype_name(dtype)));
  }
}

}  // namespace
}  // namespace tessera::cuda::testing
