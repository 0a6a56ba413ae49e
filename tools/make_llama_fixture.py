#!/usr/bin/env python3
"""Writes the Llama parity fixtures that tests/nn/llama_parity_test.cpp and
tests/data/hf_tokenizer_json_test.cpp check Tessera against.

Into tests/nn/fixtures/llama_parity/:
  untied/, tied/   a small LlamaForCausalLM (transformers, random init from a fixed seed; GQA
                   with 4 query heads over 2 kv heads, SwiGLU, RMSNorm, RoPE theta 50,000, no
                   biases), saved with save_pretrained (model.safetensors, config.json), and
                   golden.safetensors: input ids, the logits of a forward pass, and 12 greedy
                   tokens generated after a prompt (transformers' generate, no sampling)
  tokenizer/       a byte-level BPE trained with Hugging Face's tokenizers library on a small
                   corpus and saved as tokenizer.json (GPT-2's pre-tokenizer), and
                   tokenizer_golden.json: sample texts with the ids it gives them
The test suite needs no PyTorch; rerun this only to regenerate the fixtures:
  pip install torch transformers tokenizers safetensors && python3 tools/make_llama_fixture.py
"""
import json
import os

import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "nn", "fixtures", "llama_parity")
# The vocabulary is no multiple of 64, so Tessera's padded-vocab path is exercised.
VOCAB, CONTEXT, LAYERS, HEADS, KV_HEADS, WIDTH, FFN = 100, 64, 2, 4, 2, 32, 80
BATCH, SEQ = 2, 12
PROMPT = [3, 14, 15, 92, 65, 35]
NEW_TOKENS = 12

SAMPLES = [
    "line 3: the quick brown fox jumps over 7 lazy dogs.",
    "  leading spaces, CAPS, digits 12345 and punctuation!?",
    "unicode: naïve café — ☃ 日本語",
    "tabs\tand\nnewlines\n\n",
    "it's we'll don't",
    "a<|endoftext|>b",
]


def model_fixture(name, tied):
    torch.manual_seed(4321 if tied else 1234)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=WIDTH, intermediate_size=FFN,
                         num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                         num_key_value_heads=KV_HEADS, max_position_embeddings=CONTEXT,
                         rms_norm_eps=1e-6, rope_theta=50000.0, tie_word_embeddings=tied,
                         bos_token_id=1, eos_token_id=2, attention_bias=False, mlp_bias=False)
    model = LlamaForCausalLM(config).eval()
    # Larger weights than the default init (std 0.02) so the logits are not all near zero and
    # greedy decoding is decided by clear margins.
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.3)
    out = os.path.join(OUT, name)
    model.save_pretrained(out, safe_serialization=True)
    gen = torch.Generator().manual_seed(7)
    inputs = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)
    with torch.no_grad():
        logits = model(inputs).logits.float()
        prompt = torch.tensor([PROMPT])
        greedy = model.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False,
                                eos_token_id=None, pad_token_id=0)[0, len(PROMPT):]
    save_file({"inputs": inputs.to(torch.int64).contiguous(), "logits": logits.contiguous(),
               "prompt": prompt[0].to(torch.int64).contiguous(),
               "greedy": greedy.to(torch.int64).contiguous()},
              os.path.join(out, "golden.safetensors"))
    print(f"{name}: logits {tuple(logits.shape)}, greedy {greedy.tolist()}")


def tokenizer_fixture():
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
    corpus = []
    for i in range(400):
        corpus.append(f"line {i % 17}: the quick brown fox jumps over {(i * 7) % 11} lazy dogs; "
                      f"naïve café {i % 5} it's we'll don't")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    out = os.path.join(OUT, "tokenizer")
    os.makedirs(out, exist_ok=True)
    tok.save(os.path.join(out, "tokenizer.json"))
    golden = [{"text": s, "ids": tok.encode(s).ids} for s in SAMPLES]
    with open(os.path.join(out, "tokenizer_golden.json"), "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, indent=1)
    print(f"tokenizer: {tok.get_vocab_size()} ids")


def main():
    model_fixture("untied", tied=False)
    model_fixture("tied", tied=True)
    tokenizer_fixture()


if __name__ == "__main__":
    main()
