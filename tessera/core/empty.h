#pragma once
// empty(): a tensor of fresh, uninitialised memory from the device's allocator, contiguous.
// The one allocation the op front end (ops/creation.h) and the backends' scratch buffers build
// on, so that backend code needs nothing from the front end above it.

#include "tessera/core/tensor.h"

namespace tessera {

Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
// A contiguous tensor of that shape, dtype and device with no memory behind it yet
// (Storage::unallocated): reading or writing it throws until its storage is reallocated.
Tensor unallocated(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());

}  // namespace tessera
