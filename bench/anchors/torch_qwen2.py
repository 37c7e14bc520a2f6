"""A Qwen2 decoder written the way Hugging Face's `modeling_qwen2.py` writes it in eager PyTorch:
the model the two PyTorch anchors (torch_forward_backward.py, torch_grpo_step.py) time.

It is a measuring stick, not a second implementation to trust: fp32, random weights, no loading.
What it keeps from HF is what costs time: q/k/v projections with bias, rotary embedding by
rotate_half, grouped KV heads repeated to the query heads, attention as matmul + softmax over an
additive causal mask (HF's "eager" attention), SwiGLU MLP, RMSNorm in fp32, tied LM head, and a
per-layer KV cache grown by torch.cat (HF's DynamicCache).
"""
import argparse
import os

import torch
import torch.nn as nn
import torch.nn.functional as F


def add_shape_flags(parser):
    """The model-shape flags both anchors take; the defaults are Qwen2.5-0.5B's shape."""
    for name, default in [("hidden", 896), ("inter", 4864), ("layers", 24), ("heads", 14), ("kv", 2),
                          ("vocab", 151936)]:
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--rope-theta", type=float, default=1e6)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                        help="intra-op threads (default: every core this process may run on, as rlcpp uses)")


def set_threads(n):
    # Debian's torch 1.13 starts with one intra-op thread on some machines; the comparison needs
    # the same cores on both sides, so the count is always set explicitly.
    torch.set_num_threads(n)
    return torch.get_num_threads()


class RMSNorm(nn.Module):
    def __init__(self, n, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):  # [..., n]
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Rotary:
    """cos and sin of the positions: [T, head_dim] each, split-half layout (HF's)."""

    def __init__(self, head_dim, theta):
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2).float() / head_dim))

    def __call__(self, positions):  # [T] int
        freqs = torch.outer(positions.float(), self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()


class Attention(nn.Module):
    def __init__(self, shape):
        super().__init__()
        self.n_heads, self.n_kv = shape.heads, shape.kv
        self.head_dim = shape.hidden // shape.heads
        self.q_proj = nn.Linear(shape.hidden, self.n_heads * self.head_dim, bias=True)
        self.k_proj = nn.Linear(shape.hidden, self.n_kv * self.head_dim, bias=True)
        self.v_proj = nn.Linear(shape.hidden, self.n_kv * self.head_dim, bias=True)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, shape.hidden, bias=False)

    def repeat_kv(self, x):  # [B, n_kv, S, D] -> [B, n_heads, S, D]
        b, n_kv, s, d = x.shape
        rep = self.n_heads // n_kv
        return x[:, :, None].expand(b, n_kv, rep, s, d).reshape(b, n_kv * rep, s, d)

    def forward(self, x, cos, sin, mask, cache):
        # x [B, T, hidden]; mask [T, S] additive (0 or -inf); cache: dict with "k", "v" [B, n_kv, S-T, D], or None
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if cache is not None:
            if "k" in cache:
                k = torch.cat([cache["k"], k], dim=2)
                v = torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k, v
        k, v = self.repeat_kv(k), self.repeat_kv(v)
        scores = torch.matmul(q, k.transpose(2, 3)) * self.head_dim ** -0.5 + mask
        probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
        out = torch.matmul(probs, v).transpose(1, 2).reshape(b, t, -1)
        return self.o_proj(out)


class MLP(nn.Module):
    def __init__(self, shape):
        super().__init__()
        self.gate_proj = nn.Linear(shape.hidden, shape.inter, bias=False)
        self.up_proj = nn.Linear(shape.hidden, shape.inter, bias=False)
        self.down_proj = nn.Linear(shape.inter, shape.hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, shape):
        super().__init__()
        self.input_layernorm = RMSNorm(shape.hidden)
        self.self_attn = Attention(shape)
        self.post_attention_layernorm = RMSNorm(shape.hidden)
        self.mlp = MLP(shape)

    def forward(self, x, cos, sin, mask, cache):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class Qwen2ForCausalLM(nn.Module):
    """Random weights as `rlcpp init` draws them: matrices normal(0, 0.02), biases 0, norms 1."""

    def __init__(self, shape, std=0.02):
        super().__init__()
        self.embed_tokens = nn.Embedding(shape.vocab, shape.hidden)
        self.layers = nn.ModuleList(DecoderLayer(shape) for _ in range(shape.layers))
        self.norm = RMSNorm(shape.hidden)
        self.rotary = Rotary(shape.hidden // shape.heads, shape.rope_theta)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("bias"):
                    p.zero_()
                elif p.dim() > 1:
                    p.normal_(0.0, std)

    def forward(self, ids, positions, mask, caches=None):
        # ids [B, T]; positions [T]; mask [T, S] additive; caches: one dict per layer, or None.
        # Returns logits [B, T, vocab] fp32 (the LM head is the embedding, tied).
        cos, sin = self.rotary(positions)
        x = self.embed_tokens(ids)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, mask, None if caches is None else caches[i])
        return F.linear(self.norm(x), self.embed_tokens.weight)


def causal_mask(t):
    """[t, t] additive mask: 0 on and below the diagonal, -inf above."""
    return torch.full((t, t), float("-inf")).triu(1)


def shape_of(args):
    """The shape flags of add_shape_flags as a namespace the model reads."""
    return argparse.Namespace(**{k: getattr(args, k) for k in
                                 ("hidden", "inter", "layers", "heads", "kv", "vocab", "rope_theta")})
