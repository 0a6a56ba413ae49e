#!/usr/bin/env python3
"""Plain PyTorch (eager) GPT-2 training step: the reference for bench_train_step.

The model is written out with torch.nn like llm.c's train_gpt2.py: tanh GELU, tied
embeddings, causal scaled_dot_product_attention, the vocabulary padded to 50304. It times
forward + backward + AdamW and prints one JSON line: ms per step, tokens/s, GFLOP/s and
peak RSS.

Usage: pytorch_gpt2.py [--layers 12 --heads 12 --width 768 --batch 4 --seq 64 --steps 6]
"""
import argparse
import json
import math
import resource
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(width)
        self.c_attn = nn.Linear(width, 3 * width)
        self.c_proj = nn.Linear(width, width)
        self.ln_2 = nn.LayerNorm(width)
        self.c_fc = nn.Linear(width, 4 * width)
        self.mlp_proj = nn.Linear(4 * width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, block_size, layers, heads, width):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(block_size, width)
        self.h = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        # GPT-2 init, as Tessera draws it: N(0, 0.02), residual projections scaled down.
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif "ln_" in name:
                nn.init.ones_(p)
            else:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--width", type=int, default=768)
    p.add_argument("--vocab", type=int, default=50304)
    p.add_argument("--block-size", type=int, default=1024)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()

    torch.manual_seed(0)
    torch.set_num_threads(a.threads)
    model = GPT(a.vocab, a.block_size, a.layers, a.heads, a.width)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.0)
    idx = torch.randint(0, 50257, (a.batch, a.seq))
    targets = torch.randint(0, 50257, (a.batch, a.seq))
    times = []
    for step in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        loss = model(idx, targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        if step >= a.warmup:
            times.append(dt)
    times.sort()
    median = times[len(times) // 2]
    params = sum(p.numel() for p in model.parameters())
    # nanoGPT's estimate, as bench_train_step counts it: 6N + 12*L*C*T FLOPs per token, with N
    # the parameters less the position table.
    flops_per_token = 6 * (params - a.block_size * a.width) + 12 * a.layers * a.width * a.seq
    print(json.dumps({
        "impl": "pytorch-eager", "torch": torch.__version__, "threads": a.threads,
        "params": params, "batch": a.batch, "seq": a.seq,
        "ms_per_step": median * 1e3, "tokens_per_s": a.batch * a.seq / median,
        "gflops_per_s": flops_per_token * a.batch * a.seq / median / 1e9,
        "loss": loss.item(), "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }))


if __name__ == "__main__":
    main()
