#!/usr/bin/env python3
"""Draws docs/images/serving_block_tables.png: three sequences' block tables pointing into one
KV-cache pool, as tessera/serve's BlockAllocator hands blocks out (a free list used as a stack,
so a finished sequence's blocks are the next ones given out).

  python3 tools/plot_block_tables.py [OUT.png]
"""
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, Rectangle

BLOCK = 4  # positions per block
# (name, cached positions, block table, colour); sequence B finished earlier and gave its
# blocks back, C then took them.
SEQS = [("A (decoding)", 10, [0, 1, 5], "#4c72b0"),
        ("C (prefilling)", 7, [4, 3], "#55a868"),
        ("D (new)", 3, [2], "#c44e52")]
POOL = 8

fig, ax = plt.subplots(figsize=(9.5, 4.2))
ax.set_xlim(0, 20)
ax.set_ylim(-1.2, 10)
ax.axis("off")

# The pool: one row per block, BLOCK slots each.
owner = {}
for name, n, table, colour in SEQS:
    for j, b in enumerate(table):
        filled = min(BLOCK, n - j * BLOCK)
        owner[b] = (name, colour, filled, j)
px, py = 12.5, 9.0
ax.text(px + 2.0, py + 0.5, "KV pool (per layer: [blocks, block_size, Hkv, D])", ha="center",
        fontsize=10, weight="bold")
for b in range(POOL):
    y = py - (b + 1) * 1.0
    ax.text(px - 0.3, y + 0.4, f"block {b}", ha="right", va="center", fontsize=9)
    for s in range(BLOCK):
        colour, alpha = "white", 1.0
        if b in owner:
            name, c, filled, j = owner[b]
            colour, alpha = (c, 0.85) if s < filled else (c, 0.18)
        ax.add_patch(Rectangle((px + s * 1.0, y), 1.0, 0.8, facecolor=colour, alpha=alpha,
                               edgecolor="black", lw=0.8))
        if b in owner and s < owner[b][2]:
            ax.text(px + s + 0.5, y + 0.4, str(owner[b][3] * BLOCK + s), ha="center",
                    va="center", fontsize=7, color="white")
    if b not in owner:
        ax.text(px + 4.3, y + 0.4, "free", va="center", fontsize=8, color="gray")

# The block tables.
tx, ty = 0.5, 9.0
ax.text(tx + 3.5, ty + 0.5, "block tables (one row per running sequence)", ha="center",
        fontsize=10, weight="bold")
for i, (name, n, table, colour) in enumerate(SEQS):
    y = ty - 1.6 - i * 2.2
    ax.text(tx, y + 0.95, f"{name}: {n} positions", fontsize=9, color=colour, weight="bold")
    for j, b in enumerate(table):
        ax.add_patch(Rectangle((tx + j * 1.2, y), 1.1, 0.8, facecolor=colour, alpha=0.85,
                               edgecolor="black", lw=0.8))
        ax.text(tx + j * 1.2 + 0.55, y + 0.4, str(b), ha="center", va="center", color="white",
                fontsize=9, weight="bold")
        by = py - (b + 1) * 1.0 + 0.4
        ax.add_patch(FancyArrowPatch((tx + j * 1.2 + 1.1, y + 0.4), (px - 1.6, by),
                                     arrowstyle="->", mutation_scale=8, color=colour, lw=0.8,
                                     alpha=0.7, connectionstyle="arc3,rad=0.08"))
ax.text(0.5, -1.0, "Position p of a sequence lives in block table[p / 4], slot p % 4. "
        "Faded slots: reserved, not yet written;\nat most block_size - 1 per sequence "
        "(the waste bound), where a contiguous cache reserves the whole context.",
        fontsize=8.5, va="bottom")
out = sys.argv[1] if len(sys.argv) > 1 else "docs/images/serving_block_tables.png"
fig.savefig(out, dpi=130, bbox_inches="tight")
print("wrote", out)
