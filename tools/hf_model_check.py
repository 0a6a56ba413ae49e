#!/usr/bin/env python3
"""Checks that transformers loads a folder written by `tessera ckpt convert --to hf` (GPT-2 or
Llama-style) and computes what Tessera does: the greedy continuation of a prompt, token by
token, must equal `tessera generate --temperature 0` on the same folder, and the tokenizer must
load beside it. Needs torch and transformers; not part of the test suite (docs/formats.md
records its result).

Usage: hf_model_check.py TESSERA FOLDER [PROMPT] [TOKENS]
"""
import subprocess
import sys


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    tessera, folder = sys.argv[1], sys.argv[2]
    prompt = sys.argv[3] if len(sys.argv) > 3 else "line 3"
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 16
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    ids = tok(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=n, do_sample=False, eos_token_id=None,
                             pad_token_id=tok.eos_token_id)[0].tolist()
    theirs = tok.decode(out, clean_up_tokenization_spaces=False)
    ours = subprocess.run([tessera, "generate", "--model", folder, "--prompt", prompt,
                           "--max-new-tokens", str(n), "--temperature", "0"],
                          check=True, capture_output=True).stdout.decode("utf-8", "replace")
    ours = ours.rstrip("\n")
    same = ours == theirs
    print(f"hf_model_check: {type(model).__name__}, {n} greedy tokens: "
          f"{'identical' if same else 'DIFFERENT'}")
    if not same:
        print(f"  transformers: {theirs!r}\n  tessera:      {ours!r}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
