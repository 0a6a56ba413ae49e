#pragma once
// Fused cross-entropy launchers (cross_entropy.cu), with the contracts of the Backend methods of
// the same names (contracts in tessera/core/op_table.def, launchers declared in launchers.h):
// logits [N, V] on the device with unit stride in V and any row stride (f32, bf16, f16 or f64),
// targets contiguous i32/i64 [N]; loss and valid are 0-d and lse is [N], in f32 (f64 for f64
// logits); gloss and valid are read on the device.
//
// A target outside [0, V) that is not ignore_index cannot raise an error from the device (the
// CPU backend checks targets on the host; here they are never copied back): such a row counts as
// valid and contributes NaN to the loss, and its gradient row is NaN, so the loss shows it.

#include <cstdint>

#include "tessera/core/tensor.h"
#include "tessera/cuda/device.h"
#include "tessera/cuda/kernels/launchers.h"
