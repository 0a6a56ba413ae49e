#!/usr/bin/env python3
"""Writes the GPT-2 parity fixture that tests/nn/gpt2_parity_test.cpp checks Tessera against.

A small GPT-2 (transformers.GPT2LMHeadModel, tied embeddings, no dropout) is built from a
fixed seed. The script writes, into tests/nn/fixtures/gpt2_parity/:
  model.safetensors, config.json  the weights as Hugging Face saves them (Conv1D layout)
  golden.safetensors              inputs, targets, logits, loss, every gradient (HF names,
                                  prefixed "grad."), and the losses of 5 AdamW steps
The test suite needs no PyTorch; rerun this only to regenerate the fixture:
  pip install torch transformers safetensors && python3 tools/make_gpt2_fixture.py
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import GPT2Config, GPT2LMHeadModel

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "nn", "fixtures", "gpt2_parity")
# Shapes: the vocabulary is not a multiple of 64, so Tessera's padded-vocab path is exercised.
VOCAB, POSITIONS, LAYERS, HEADS, WIDTH = 100, 32, 2, 2, 32
BATCH, SEQ = 2, 12
ADAMW = dict(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
STEPS = 5


def main():
    torch.manual_seed(1234)
    config = GPT2Config(vocab_size=VOCAB, n_positions=POSITIONS, n_embd=WIDTH, n_layer=LAYERS,
                        n_head=HEADS, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        layer_norm_epsilon=1e-5, activation_function="gelu_new",
                        tie_word_embeddings=True)
    model = GPT2LMHeadModel(config).float()
    model.eval()  # no dropout (all rates are 0 anyway)
    os.makedirs(OUT, exist_ok=True)
    model.save_pretrained(OUT, safe_serialization=True)
    # save_pretrained may write extra files; keep only what the test reads.
    for name in os.listdir(OUT):
        if name not in ("model.safetensors", "config.json"):
            os.remove(os.path.join(OUT, name))

    gen = torch.Generator().manual_seed(99)
    idx = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)
    targets = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)
    targets[0, 3] = -100  # an ignored position

    out = model(idx)
    logits = out.logits
    loss = torch.nn.functional.cross_entropy(logits.view(-1, VOCAB), targets.view(-1),
                                             ignore_index=-100)
    loss.backward()
    golden = {"inputs": idx.to(torch.int64), "targets": targets.to(torch.int64),
              "logits": logits.detach().contiguous(), "loss": loss.detach().reshape(())}
    for name, p in model.named_parameters():
        golden["grad." + name] = p.grad.detach().contiguous()

    # AdamW with decoupled weight decay on matrices only (none on biases, norms, 1-D).
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": ADAMW["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=ADAMW["lr"], betas=ADAMW["betas"], eps=ADAMW["eps"])
    losses = []
    model.zero_grad(set_to_none=True)
    for _ in range(STEPS):
        l = torch.nn.functional.cross_entropy(model(idx).logits.view(-1, VOCAB),
                                              targets.view(-1), ignore_index=-100)
        losses.append(l.item())
        opt.zero_grad(set_to_none=True)
        l.backward()
        opt.step()
    golden["adamw_losses"] = torch.tensor(losses, dtype=torch.float32)
    save_file(golden, os.path.join(OUT, "golden.safetensors"),
              metadata={"adamw": json.dumps(ADAMW), "steps": str(STEPS),
                        "torch": torch.__version__})
    print("wrote", os.path.abspath(OUT), "loss", loss.item(), "adamw losses", losses)


if __name__ == "__main__":
    sys.exit(main())
