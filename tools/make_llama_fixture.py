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
  tokenizer_llama3/  the same with Llama 3's pre-tokenizer (a Split on the cl100k pattern, then
                   ByteLevel without its regex) and its special tokens
The test suite needs no PyTorch; rerun this only to regenerate the fixtures:
  pip install torch transformers tokenizers safetensors && python3 tools/make_llama_fixture.py
"""
import json
import os

try:
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError:  # --llama3-tokenizer needs only the tokenizers library
    pass

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
    from tokenizers import Tokenizer, models, pre_tokenizers
    corpus = []
    for i in range(400):
        corpus.append(f"line {i % 17}: the quick brown fox jumps over {(i * 7) % 11} lazy dogs; "
                      f"naïve café {i % 5} it's we'll don't")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    train_and_save(tok, corpus, 400, ["<|endoftext|>"], "tokenizer", SAMPLES)


def train_and_save(tok, corpus, vocab_size, specials, name, samples):
    """Trains tok's BPE on corpus, saves OUT/name/tokenizer.json and the samples' ids."""
    from tokenizers import decoders, pre_tokenizers, trainers
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    out = os.path.join(OUT, name)
    os.makedirs(out, exist_ok=True)
    tok.save(os.path.join(out, "tokenizer.json"))
    golden = [{"text": s, "ids": tok.encode(s).ids} for s in samples]
    with open(os.path.join(out, "tokenizer_golden.json"), "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, indent=1)
    print(f"{name}: {tok.get_vocab_size()} ids")


LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                   "<|end_header_id|>", "<|eot_id|>"]
# Each alternative of the split, and their edges: contractions in any case, digit runs cut in
# threes, a letter run's one leading character, punctuation with its newlines, whitespace
# before and after newlines, at the end of the text, special tokens inside text.
LLAMA3_SAMPLES = [
    "I'LL say it's, we'Re DON'T 'sup 'hello",
    "12345678 and 1,000,000.5 x1y22z333",
    "(hello) [world] {x} <a href=\"u\">",
    "a\n\n\nb  \n  foo\r\nbar \n",
    "\tindent\ttab x  \t y   ",
    "end with newline!\n",
    "naïve café — ok… 😀 emoji",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    "   ",
    "don't stop: 'til 9pm",
]


def llama3_tokenizer_fixture():
    from tokenizers import Tokenizer, Regex, models, pre_tokenizers
    corpus = []
    for i in range(400):
        corpus.append(f"Line {i % 17}: the quick brown fox jumps over {(i * 7919) % 100000} lazy "
                      f"dogs;\n\tnaïve café {i % 5} IT'S we'll don't (x{i % 3}) [ok]\n\n"
                      f"I'LL say hello, world! 'til {i % 12}pm  \n  foo\r\nbar {{x}} stop:\n")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    train_and_save(tok, corpus, 1000, LLAMA3_SPECIALS, "tokenizer_llama3", LLAMA3_SAMPLES)


def main():
    import sys
    if sys.argv[1:] == ["--llama3-tokenizer"]:  # that fixture alone: no torch needed
        llama3_tokenizer_fixture()
        return
    model_fixture("untied", tied=False)
    model_fixture("tied", tied=True)
    tokenizer_fixture()
    llama3_tokenizer_fixture()


if __name__ == "__main__":
    main()
