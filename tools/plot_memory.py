#!/usr/bin/env python3
"""Draws one rank's memory under several parallel runs as stacked bars (parameters, gradients,
optimizer state, activations), from the per-rank bytes that `mpiexec -n N tessera train` writes
into each step of <run_dir>/metrics.jsonl. The last step of each run is used.

Usage: plot_memory.py OUTPUT.png LABEL=RUN_DIR [LABEL=RUN_DIR ...] [--rank R] [--title TEXT]
Needs matplotlib (pip install matplotlib); Tessera itself does not.
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PARTS = [("param_bytes", "parameters"), ("grad_bytes", "gradients"),
         ("optim_bytes", "optimizer state"), ("act_bytes", "activations")]


def last_ranks(run_dir):
    """The "ranks" array of the last complete metrics line that has one."""
    ranks = None
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn last line
            ranks = r.get("ranks", ranks)
    if ranks is None:
        raise SystemExit(f"{run_dir}/metrics.jsonl has no per-rank bytes (not a parallel run?)")
    return ranks


def main():
    p = argparse.ArgumentParser()
    p.add_argument("output")
    p.add_argument("runs", nargs="+", help="LABEL=RUN_DIR")
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--title", default=None)
    a = p.parse_args()
    labels, rows = [], []
    for spec in a.runs:
        label, _, run_dir = spec.partition("=")
        if not run_dir:
            raise SystemExit(f"expected LABEL=RUN_DIR, got {spec!r}")
        ranks = last_ranks(run_dir)
        if a.rank >= len(ranks):
            raise SystemExit(f"{run_dir}: rank {a.rank} of {len(ranks)} ranks")
        labels.append(label)
        rows.append([ranks[a.rank][key] / 2**20 for key, _ in PARTS])

    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    bottom = [0.0] * len(rows)
    for i, (_, name) in enumerate(PARTS):
        values = [row[i] for row in rows]
        ax.bar(labels, values, bottom=bottom, label=name)
        bottom = [b + v for b, v in zip(bottom, values)]
    for x, total in enumerate(bottom):
        ax.annotate(f"{total:.1f} MiB", (x, total), ha="center", va="bottom", fontsize=9)
    ax.set_ylabel(f"rank {a.rank} bytes (MiB)")
    ax.set_title(a.title or "memory per rank")
    ax.grid(axis="y", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(a.output)
    print("wrote", a.output)
    for label, row in zip(labels, rows):
        print(label, " ".join(f"{name}={v:.2f}MiB" for (_, name), v in zip(PARTS, row)))


if __name__ == "__main__":
    main()
