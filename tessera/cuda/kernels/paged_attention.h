#pragma once
// The paged-attention launcher: the CUDA side of Backend::paged_attention (contract in
// tessera/core/op_table.def, launcher declared in launchers.h). q [N, H, D] with unit stride in
// D; k_cache, v_cache [blocks, block_size, Hkv, D], block_tables [S, max_blocks], token_seq and
// token_pos [N] contiguous (the indices already checked by the front end); out [N, H, D]
// contiguous. f32, f64, bf16, f16.

#include <cstdint>

#include "tessera/core/tensor.h"
#include "tessera/cuda/device.h"
#include "tessera/cuda/kernels/launchers.h"
