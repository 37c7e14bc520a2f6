#!/usr/bin/env python3
"""The bundled tokenizer: byte-level BPE (tokenizer.json) with a small vocabulary learned from the
task's SFT conversations, the ChatML special tokens and a ChatML chat template. Deterministic:
pairs are ranked by count, ties broken by the pair itself.

Pre-tokenization splits every digit on its own (so numbers are read digit by digit), runs of
letters with an optional leading space, runs of other symbols, and whitespace; then bytes are mapped
to printable characters as GPT-2's ByteLevel does.
Usage: make_tokenizer.py SFT_JSONL OUT_DIR [--merges 64]
"""
import argparse
import collections
import json
import os
import re

SPLIT = r"\d| ?[A-Za-z]+| ?[^\sA-Za-z\d]+|\s+"
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                 "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
                 "{% endif %}")


def byte_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("sft_jsonl")
    parser.add_argument("out_dir")
    parser.add_argument("--merges", type=int, default=64)
    args = parser.parse_args()
    b2u = byte_to_unicode()
    words = collections.Counter()
    with open(args.sft_jsonl) as f:
        for line in f:
            for message in json.loads(line)["messages"]:
                for piece in re.findall(SPLIT, message["role"] + "\n" + message["content"]):
                    words[tuple(b2u[b] for b in piece.encode("utf-8"))] += 1
    vocab = {b2u[b]: b for b in range(256)}
    merges = []
    while len(merges) < args.merges:
        pairs = collections.Counter()
        for word, count in words.items():
            for pair in zip(word, word[1:]):
                pairs[pair] += count
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        vocab[best[0] + best[1]] = len(vocab)
        merged = collections.Counter()
        for word, count in words.items():
            out, k = [], 0
            while k < len(word):
                if k + 1 < len(word) and (word[k], word[k + 1]) == best:
                    out.append(word[k] + word[k + 1])
                    k += 2
                else:
                    out.append(word[k])
                    k += 1
            merged[tuple(out)] += count
        words = merged
    added = [{"id": len(vocab) + k, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for k, c in enumerate(SPECIALS)]
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": SPLIT}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [a + " " + b for a, b in merges]},
    }
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
              "bos_token": None, "model_max_length": 512, "chat_template": CHAT_TEMPLATE}
    os.makedirs(args.out_dir, exist_ok=True)
    with open(os.path.join(args.out_dir, "tokenizer.json"), "w") as f:
        json.dump(tokenizer, f, ensure_ascii=False, indent=1)
        f.write("\n")
    with open(os.path.join(args.out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=1)
        f.write("\n")
    print(f"{args.out_dir}: {len(vocab)} tokens + {len(SPECIALS)} special, {len(merges)} merges")


if __name__ == "__main__":
    main()
