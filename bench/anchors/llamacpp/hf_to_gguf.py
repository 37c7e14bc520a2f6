#!/usr/bin/env python3
"""Writes a Hugging Face Qwen2 model directory (config.json + safetensors) as a GGUF v3 file that
llama.cpp loads, so bench/llamacpp.sh runs llama.cpp on exactly the weights rlcpp runs on.

    python bench/anchors/llamacpp/hf_to_gguf.py MODEL_DIR OUT.gguf [--type f32|f16]

--type f16 stores the matrices in half precision and keeps the 1-D tensors (norms, biases) in f32.
Source tensors may be F32, F16 or BF16. Only numpy is needed (bench/llamacpp.sh runs it with the
bench environment's python, which has rlcpp's pinned numpy).

The file, as the GGUF spec lays it out: "GGUF", u32 version 3, u64 tensor count, u64 metadata count;
the metadata (key, u32 type, value); the tensor infos (name, u32 n_dims, u64 dims innermost first,
u32 ggml type, u64 offset into the data); zero padding to the alignment; the data, each tensor at
an offset that is a multiple of the alignment.

llama.cpp's qwen2 architecture rotates q and k by split halves (its NEOX rope), as Hugging Face's
Qwen2 does, so the projections are stored as they are; a tied LM head is left out (llama.cpp then
uses token_embd.weight).

The vocabulary is synthetic: llama.cpp needs one in the file, but the benchmark feeds token ids
directly. It is a valid byte-level BPE vocabulary of vocab_size tokens: ids 0-255 the 256 byte
symbols (so "\\n" tokenizes, which llama.cpp checks at load), the config's bos and eos ids control
tokens, every other id a placeholder; no merges.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

ALIGNMENT = 32
# GGUF metadata value types.
UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY = 4, 5, 6, 7, 8, 9
# ggml tensor types, and llama.cpp's file types (general.file_type) for all-f32 and mostly-f16.
GGML_F32, GGML_F16 = 0, 1
FILE_TYPE = {"f32": 0, "f16": 1}
# llama.cpp's token types.
TOKEN_NORMAL, TOKEN_CONTROL = 1, 3

# Hugging Face name inside a decoder layer -> llama.cpp's name inside blk.N.
LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def fail(message):
    print(f"hf_to_gguf.py: {message}", file=sys.stderr)
    sys.exit(2)


# ---- safetensors: a u64 header length, a JSON header, then the raw data.

def safetensors_files(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            return sorted(set(json.load(f)["weight_map"].values()))
    if os.path.exists(os.path.join(model_dir, "model.safetensors")):
        return ["model.safetensors"]
    fail(f"{model_dir} has neither model.safetensors nor model.safetensors.index.json")


def read_tensor_table(model_dir):
    """name -> (path, absolute byte offset, dtype, shape) over every safetensors file."""
    table = {}
    for name in safetensors_files(model_dir):
        path = os.path.join(model_dir, name)
        with open(path, "rb") as f:
            (header_len,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(header_len))
        for tensor, meta in header.items():
            if tensor != "__metadata__":
                table[tensor] = (path, 8 + header_len + meta["data_offsets"][0], meta["dtype"], tuple(meta["shape"]))
    return table


def load_f32(entry):
    path, offset, dtype, shape = entry
    count = int(np.prod(shape))
    if dtype == "F32":
        return np.memmap(path, dtype="<f4", mode="r", offset=offset, shape=shape)
    if dtype == "F16":
        return np.memmap(path, dtype="<f2", mode="r", offset=offset, shape=shape).astype(np.float32)
    if dtype == "BF16":  # the top half of an f32
        bits = np.memmap(path, dtype="<u2", mode="r", offset=offset, shape=(count,))
        return (bits.astype(np.uint32) << 16).view(np.float32).reshape(shape)
    fail(f"{path}: tensor dtype {dtype} is not F32, F16 or BF16")


# ---- GGUF encoding.

def gguf_string(text):
    data = text.encode("utf-8")
    return struct.pack("<Q", len(data)) + data


class Metadata:
    def __init__(self):
        self.entries = []

    def add(self, key, value_type, value):
        fmt = {UINT32: "<I", INT32: "<i", FLOAT32: "<f", BOOL: "<?"}
        body = gguf_string(value) if value_type == STRING else struct.pack(fmt[value_type], value)
        self.entries.append(gguf_string(key) + struct.pack("<I", value_type) + body)

    def add_strings(self, key, values):
        body = b"".join(gguf_string(v) for v in values)
        self.entries.append(gguf_string(key) + struct.pack("<IIQ", ARRAY, STRING, len(values)) + body)

    def add_int32s(self, key, values):
        body = np.asarray(values, dtype="<i4").tobytes()
        self.entries.append(gguf_string(key) + struct.pack("<IIQ", ARRAY, INT32, len(values)) + body)


def byte_symbols():
    """GPT-2's byte-level alphabet: byte b -> the printable character that stands for it."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    symbols, extra = {}, 0
    for b in range(256):
        if b in printable:
            symbols[b] = chr(b)
        else:
            symbols[b] = chr(256 + extra)
            extra += 1
    return [symbols[b] for b in range(256)]


def synthetic_vocab(n_vocab, bos, eos):
    if n_vocab < 258:
        fail(f"vocab_size {n_vocab} leaves no room for the 256 byte tokens and bos/eos")
    tokens = byte_symbols() + [f"<|id_{i}|>" for i in range(256, n_vocab)]
    types = [TOKEN_NORMAL] * n_vocab
    for name, token_id in (("<|endoftext|>", bos), ("<|im_end|>", eos)):
        if token_id is not None and 256 <= token_id < n_vocab:
            tokens[token_id], types[token_id] = name, TOKEN_CONTROL
    return tokens, types


def gguf_name(hf_name):
    if hf_name == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf_name == "model.norm.weight":
        return "output_norm.weight"
    if hf_name == "lm_head.weight":
        return "output.weight"
    if hf_name.startswith("model.layers."):
        layer, rest = hf_name[len("model.layers."):].split(".", 1)
        if rest in LAYER_NAMES:
            return f"blk.{layer}.{LAYER_NAMES[rest]}"
    fail(f"tensor {hf_name} has no place in llama.cpp's qwen2 (is this a Qwen2 model?)")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir")
    parser.add_argument("out")
    parser.add_argument("--type", choices=sorted(FILE_TYPE), default="f32")
    args = parser.parse_args()

    config_path = os.path.join(args.model_dir, "config.json")
    if not os.path.exists(config_path):
        fail(f"{config_path} is missing")
    with open(config_path) as f:
        config = json.load(f)
    if config.get("model_type") != "qwen2":
        fail(f"{config_path}: model_type {config.get('model_type')!r}; this writer handles qwen2 only")
    n_vocab = config["vocab_size"]
    eos = config.get("eos_token_id")
    eos = eos[0] if isinstance(eos, list) else eos

    meta = Metadata()
    meta.add("general.architecture", STRING, "qwen2")
    meta.add("general.name", STRING, os.path.basename(os.path.normpath(args.model_dir)))
    meta.add("general.file_type", UINT32, FILE_TYPE[args.type])
    meta.add("general.alignment", UINT32, ALIGNMENT)
    meta.add("qwen2.context_length", UINT32, config.get("max_position_embeddings", 32768))
    meta.add("qwen2.embedding_length", UINT32, config["hidden_size"])
    meta.add("qwen2.feed_forward_length", UINT32, config["intermediate_size"])
    meta.add("qwen2.block_count", UINT32, config["num_hidden_layers"])
    meta.add("qwen2.attention.head_count", UINT32, config["num_attention_heads"])
    meta.add("qwen2.attention.head_count_kv", UINT32, config.get("num_key_value_heads", config["num_attention_heads"]))
    meta.add("qwen2.attention.layer_norm_rms_epsilon", FLOAT32, config.get("rms_norm_eps", 1e-6))
    meta.add("qwen2.rope.freq_base", FLOAT32, config.get("rope_theta", 1e6))
    tokens, types = synthetic_vocab(n_vocab, config.get("bos_token_id"), eos)
    meta.add("tokenizer.ggml.model", STRING, "gpt2")
    meta.add("tokenizer.ggml.pre", STRING, "qwen2")
    meta.add_strings("tokenizer.ggml.tokens", tokens)
    meta.add_int32s("tokenizer.ggml.token_type", types)
    meta.add_strings("tokenizer.ggml.merges", [])
    if eos is not None and eos < n_vocab:
        meta.add("tokenizer.ggml.eos_token_id", UINT32, eos)
    meta.add("tokenizer.ggml.add_bos_token", BOOL, False)

    table = read_tensor_table(args.model_dir)
    tied = config.get("tie_word_embeddings", True)
    plan = []  # (gguf name, hf name, ggml type, shape), in llama.cpp's usual order
    for hf_name, (_, _, _, shape) in table.items():
        if hf_name.endswith("rotary_emb.inv_freq") or (tied and hf_name == "lm_head.weight"):
            continue
        ggml_type = GGML_F16 if args.type == "f16" and len(shape) == 2 else GGML_F32
        plan.append((gguf_name(hf_name), hf_name, ggml_type, shape))
    if not tied and not any(name == "output.weight" for name, *_ in plan):
        fail(f"{args.model_dir}: tie_word_embeddings is false but there is no lm_head.weight")

    def order(item):
        name = item[0]
        if name.startswith("blk."):
            return (1, int(name.split(".")[1]), name)
        return (0 if name == "token_embd.weight" else 2, 0, name)
    plan.sort(key=order)

    infos, offsets, offset = [], [], 0
    for name, _, ggml_type, shape in plan:
        offset += -offset % ALIGNMENT
        offsets.append(offset)
        dims = shape[::-1]  # ggml's dims run innermost first
        infos.append(gguf_string(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
                     + struct.pack("<IQ", ggml_type, offset))
        offset += int(np.prod(shape)) * (2 if ggml_type == GGML_F16 else 4)

    header = b"GGUF" + struct.pack("<IQQ", 3, len(plan), len(meta.entries)) + b"".join(meta.entries) + b"".join(infos)
    header += b"\0" * (-len(header) % ALIGNMENT)
    partial = args.out + ".partial"  # renamed when complete, so an interrupted run leaves no bad file
    with open(partial, "wb") as f:
        f.write(header)
        for (name, hf_name, ggml_type, _), tensor_offset in zip(plan, offsets):
            f.write(b"\0" * (len(header) + tensor_offset - f.tell()))
            data = load_f32(table[hf_name])
            f.write(np.ascontiguousarray(data, dtype="<f2" if ggml_type == GGML_F16 else "<f4").tobytes())
    os.replace(partial, args.out)
    print(f"{args.out}: qwen2, {args.type}, {len(plan)} tensors, vocabulary of {n_vocab} (synthetic), "
          f"{os.path.getsize(args.out) / 1e9:.2f} GB")


if __name__ == "__main__":
    main()
