#!/usr/bin/env python3
"""Plots a run's loss curve from <run_dir>/metrics.jsonl (training loss per step, and the
validation loss where it was measured) into a PNG for the docs.

Usage: plot_metrics.py RUN_DIR OUTPUT.png [--title TEXT]
Needs matplotlib (pip install matplotlib); Tessera itself does not.
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("run_dir")
    p.add_argument("output")
    p.add_argument("--title", default=None)
    a = p.parse_args()
    steps, losses, vsteps, vlosses = [], [], [], []
    with open(os.path.join(a.run_dir, "metrics.jsonl")) as f:
        for line in f:
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn last line
            steps.append(r["step"])
            losses.append(r["loss"])
            if "val_loss" in r:
                vsteps.append(r["step"])
                vlosses.append(r["val_loss"])
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    ax.plot(steps, losses, lw=0.8, alpha=0.8, label="train loss (per step)")
    if vsteps:
        ax.plot(vsteps, vlosses, "o-", lw=1.5, label="validation loss")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title(a.title or os.path.basename(os.path.normpath(a.run_dir)))
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(a.output)
    print("wrote", a.output)


if __name__ == "__main__":
    main()
