#pragma once
// tessera::nn in one include: modules and layers, the GPT model and its KV cache, generation,
// optimizers with clipping, mixed precision, LR schedules, checkpoints, and weight
// import/export.

#include "tessera/nn/block.h"
#include "tessera/nn/completion.h"
#include "tessera/nn/generate.h"
#include "tessera/nn/gpt.h"
#include "tessera/nn/gpt_config.h"
#include "tessera/nn/init.h"
#include "tessera/nn/io/checkpoint.h"
#include "tessera/nn/io/sharded_checkpoint.h"
#include "tessera/nn/io/hf_gpt2.h"
#include "tessera/nn/io/hf_llama.h"
#include "tessera/nn/io/llmc.h"
#include "tessera/nn/io/safetensors.h"
#include "tessera/nn/layers.h"
#include "tessera/nn/lr_schedule.h"
#include "tessera/nn/module.h"
#include "tessera/nn/optim/adamw.h"
#include "tessera/nn/optim/loss_scaler.h"
#include "tessera/nn/optim/mixed_precision.h"
#include "tessera/nn/optim/optimizer.h"
#include "tessera/nn/optim/sgd.h"
