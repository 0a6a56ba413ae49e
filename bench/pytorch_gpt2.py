#!/usr/bin/env python3
"""Plain PyTorch (eager) GPT-2 training step: the reference for bench_train_step.

The model is written out with torch.nn like llm.c's train_gpt2.py: tanh GELU, tied
embeddings, causal scaled_dot_product_attention, the vocabulary padded to 50304. It times
forward + backward + AdamW and prints one JSON line: ms per step, tokens/s, GFLOP/s and
peak RSS (and, on cuda, TFLOP/s, MFU against --peak-tflops and the peak device memory).

--dtype bf16 is PyTorch's usual mixed precision: fp32 parameters and AdamW state, the forward
and the loss under torch.autocast(bf16) (GEMMs and attention in bf16, layernorm and the loss in
fp32). On cuda AdamW is the fused one where this PyTorch has it, the step is timed between
torch.cuda.synchronize() calls, and nothing is compiled: the reference is eager PyTorch.

Usage: pytorch_gpt2.py [--layers 12 --heads 12 --width 768 --batch 4 --seq 64 --steps 6]
                       [--device cpu|cuda] [--dtype fp32|bf16] [--peak-tflops 989]
"""
import argparse
import contextlib
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


def make_adamw(params, device):
    """AdamW with the benchmark's hyperparameters; the fused kernel on cuda where available."""
    kwargs = dict(lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    if device == "cuda":
        try:
            return torch.optim.AdamW(params, fused=True, **kwargs), "fused"
        except (TypeError, RuntimeError):
            pass
    return torch.optim.AdamW(params, **kwargs), "default"


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
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    p.add_argument("--peak-tflops", type=float, default=989.0,
                   help="peak for MFU on cuda (default: H200 SXM dense bf16, NVIDIA datasheet)")
    a = p.parse_args()

    if a.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("pytorch_gpt2.py: --device cuda, but torch.cuda.is_available() is False")
    torch.manual_seed(0)
    torch.set_num_threads(a.threads)
    model = GPT(a.vocab, a.block_size, a.layers, a.heads, a.width).to(a.device)
    opt, adamw_kind = make_adamw(model.parameters(), a.device)
    # Ids from GPT-2's real vocabulary (the padded rows are never drawn), or a smaller one.
    ids = min(50257, a.vocab)
    idx = torch.randint(0, ids, (a.batch, a.seq)).to(a.device)
    targets = torch.randint(0, ids, (a.batch, a.seq)).to(a.device)
    autocast = (torch.autocast(device_type=a.device, dtype=torch.bfloat16)
                if a.dtype == "bf16" else contextlib.nullcontext())
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    times = []
    for step in range(a.warmup + a.steps):
        sync()
        t0 = time.perf_counter()
        with autocast:
            loss = model(idx, targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sync()
        dt = time.perf_counter() - t0
        if step >= a.warmup:
            times.append(dt)
    times.sort()
    median = times[len(times) // 2]
    params = sum(p.numel() for p in model.parameters())
    # nanoGPT's estimate, as bench_train_step counts it: 6N + 12*L*C*T FLOPs per token, with N
    # the parameters less the position table.
    flops_per_token = 6 * (params - a.block_size * a.width) + 12 * a.layers * a.width * a.seq
    flops_per_s = flops_per_token * a.batch * a.seq / median
    result = {
        "impl": "pytorch-eager", "torch": torch.__version__, "threads": a.threads,
        "device": a.device, "dtype": a.dtype, "adamw": adamw_kind,
        "params": params, "batch": a.batch, "seq": a.seq,
        "ms_per_step": median * 1e3, "tokens_per_s": a.batch * a.seq / median,
        "gflops_per_s": flops_per_s / 1e9, "tflops_per_s": flops_per_s / 1e12,
        "loss": loss.item(),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    if a.device == "cuda":
        result["gpu"] = torch.cuda.get_device_name()
        result["mfu"] = flops_per_s / (a.peak_tflops * 1e12)
        result["peak_tflops"] = a.peak_tflops
        result["peak_device_mib"] = torch.cuda.max_memory_allocated() / 2**20
    print(json.dumps(result))


if __name__ == "__main__":
    main()
