#pragma once
// The fused AdamW launcher (adamw.cu), with the contract of Backend::adamw_step
// (contracts in tessera/core/op_table.def, launchers declared in launchers.h): in place on
// contiguous f32 param, m, v of one shape on the device, with an f32, bf16 or f16 grad, and
// optionally the updated param rounded into `rounded` (bf16/f16; stochastically for bf16 when args
// says so). The results are the CPU backend's bits (see adamw.cu).

#include "tessera/core/backend.h"
#include "tessera/core/tensor.h"
#include "tessera/cuda/device.h"
#include "tessera/cuda/kernels/launchers.h"
