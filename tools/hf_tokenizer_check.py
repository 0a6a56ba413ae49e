#!/usr/bin/env python3
"""Checks that Hugging Face's tokenizer reads a folder written by `tessera ckpt convert --to hf`
(or data::write_hf_tokenizer) as Tessera does: AutoTokenizer.from_pretrained(folder) must give
the same ids as `tessera tokenizer encode` for every sample, and the end-of-text id must match
config.json's eos_token_id when there is one. Needs the `transformers` package (tokenizers
only; no PyTorch). Not part of the test suite: docs/serving.md records its result.

Usage: hf_tokenizer_check.py TESSERA FOLDER [TEXT_FILE]
  TEXT_FILE: samples, one per line (default: a built-in set).
"""
import json
import os
import subprocess
import sys

SAMPLES = [
    "line 3: the quick brown fox jumps over 7 lazy dogs.",
    "  leading spaces, CAPS, digits 12345 and punctuation!?",
    "unicode: naïve café — ☃ 日本語",
    "tabs\tand\nnewlines\n\n",
    "a<|endoftext|>b",
]


def tessera_ids(tessera, folder, text):
    out = subprocess.run([tessera, "tokenizer", "encode", "--tokenizer", folder, "--text", text],
                         check=True, capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    tessera, folder = sys.argv[1], sys.argv[2]
    samples = SAMPLES
    if len(sys.argv) > 3:
        with open(sys.argv[3], encoding="utf-8") as f:
            samples = [line.rstrip("\n") for line in f if line.strip()]
    from transformers import AutoTokenizer  # noqa: E402 (optional dependency)
    tok = AutoTokenizer.from_pretrained(folder)
    mismatches = 0
    for s in samples:
        # `tessera tokenizer encode` matches special-token strings, as transformers does.
        hf = tok(s, add_special_tokens=False)["input_ids"]
        ours = tessera_ids(tessera, folder, s)
        if hf != ours:
            mismatches += 1
            print(f"MISMATCH {s!r}: transformers {hf} tessera {ours}")
    config = os.path.join(folder, "config.json")
    if os.path.exists(config):
        eos = json.load(open(config)).get("eos_token_id")
        if eos != tok.eos_token_id:
            mismatches += 1
            print(f"MISMATCH eos: config.json {eos}, tokenizer {tok.eos_token_id}")
    print(f"hf_tokenizer_check: {len(samples)} samples, {mismatches} mismatches "
          f"(transformers {__import__('transformers').__version__}, vocabulary {len(tok)})")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
