#pragma once
// Tessera's public API in one include: tensors, the differentiable ops, autograd, data
// (shards, loader, tokenizers) and nn (modules, GPT, optimizers, checkpoints, import/export).
//
//   tessera::Tensor x = tessera::randn({4, 8}, gen);
//   x.set_requires_grad(true);
//   tessera::Tensor y = tessera::sum(tessera::gelu(x * 2.0));
//   y.backward();                      // x.grad() now holds dy/dx
//
// tessera::ops::* are the same ops without autograd recording.

#include "tessera/core/backend.h"
#include "tessera/core/threads.h"
#include "tessera/core/version.h"
#include "tessera/core/device.h"
#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/core/file_io.h"
#include "tessera/core/ops/attention.h"
#include "tessera/core/ops/compare.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/elementwise.h"
#include "tessera/core/ops/embedding.h"
#include "tessera/core/ops/loss.h"
#include "tessera/core/ops/matmul.h"
#include "tessera/core/ops/movement.h"
#include "tessera/core/ops/norm.h"
#include "tessera/core/ops/paged_attention.h"
#include "tessera/core/ops/quantized_linear.h"
#include "tessera/core/ops/optim.h"
#include "tessera/core/ops/random_ops.h"
#include "tessera/core/ops/reduction.h"
#include "tessera/core/random.h"
#include "tessera/core/tensor.h"

#include "tessera/autograd/checkpoint.h"
#include "tessera/autograd/engine.h"
#include "tessera/autograd/function.h"
#include "tessera/autograd/functions/attention.h"
#include "tessera/autograd/functions/dropout.h"
#include "tessera/autograd/functions/elementwise.h"
#include "tessera/autograd/functions/embedding.h"
#include "tessera/autograd/functions/linear_gelu.h"
#include "tessera/autograd/functions/loss.h"
#include "tessera/autograd/functions/matmul.h"
#include "tessera/autograd/functions/movement.h"
#include "tessera/autograd/functions/norm.h"
#include "tessera/autograd/functions/reduction.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/autograd/gradcheck.h"
#include "tessera/autograd/node.h"

#include "tessera/data/bpe_tokenizer.h"
#include "tessera/data/gpt2_tokenizer.h"
#include "tessera/data/load_tokenizer.h"
#include "tessera/data/loader.h"
#include "tessera/data/prepare.h"
#include "tessera/data/token_shard.h"
#include "tessera/data/tokenizer.h"

#include "tessera/nn/nn.h"
#include "tessera/train/trainer.h"
#include "tessera/train/world.h"
