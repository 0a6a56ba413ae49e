#pragma once
// Weight-only INT8 linear layers, in llama.cpp's Q8_0 block format: a weight [N, K] is cut
// into blocks of 32 consecutive inputs of one output row; each block keeps 32 int8 values q and
// one f16 scale d = max|w| / 127 over the block, and w ≈ d·q. Blocks of 32 rather than one
// scale per row: an outlier then costs precision in its 32 weights, not in its whole row
// (llama.cpp measures Q8_0 at +0.0026 perplexity on Llama-3-8B).
//
// Storage: q8 i32 [N, K/4], four int8 per word in little-endian order (as GPTQ packs its int4
// values into int32 words; core has no 8-bit dtype), and scale f16 [N, K/32]. 34 bytes per 32
// weights against 128 in f32: 3.76x smaller.

#include "tessera/core/tensor.h"

namespace tessera::ops {

struct Q8Weight {
  Tensor q8;     // i32 [N, K/4]
  Tensor scale;  // f16 [N, K/32]
  int64_t out_features() const { return q8.size(0); }
  int64_t in_features() const { return q8.size(1) * 4; }
};

// Quantizes w [N, K] (any floating dtype, any device; K a multiple of 32) on the CPU and
// returns it on w's device. q = round(w / d) with d already rounded to f16, so d·q is the
// nearest the stored scale can give; an all-zero block gets d = 0.
Q8Weight quantize_q8(const Tensor& w);
// d·q as a [N, K] tensor of `dtype` (reference and inspection).
Tensor dequantize_q8(const Q8Weight& w, DType dtype = DType::f32);
// x [..., K] (floating, any device) times the dequantized weight's transpose, plus bias [N]
// when defined: [..., N] in x's dtype, accumulated in f32 (f64 for f64 x). Inference only: no
// gradient flows to the quantized weight.
Tensor linear_q8(const Tensor& x, const Q8Weight& w, const Tensor& bias = Tensor());

// W8A8: the activations in int8 too, quantized on the fly with one scale per row (per token,
// as LLM.int8() and SmoothQuant's dynamic mode do): s = max|x_row| / 127 and q = round(x / s).
// The products are then int8 x int8 summed exactly in int32 over each 32-block, and only the
// block sums are scaled in f32. Activation outliers cost the whole row's precision (measured
// on the main job's model: docs/serving.md).
struct Q8Rows {
  Tensor q;      // i32 [M, K/4], four int8 per word
  Tensor scale;  // f32 [M]
};
// x [..., K] (floating, any device; K a multiple of 32) flattened to M rows.
Q8Rows quantize_rows_q8(const Tensor& x);
// linear_q8's contract with x quantized by quantize_rows_q8 first: [..., N] in x's dtype.
Tensor linear_w8a8(const Tensor& x, const Q8Weight& w, const Tensor& bias = Tensor());

}  // namespace tessera::ops
