"""A small Qwen-like decoder in plain PyTorch (no distributed code): RMSNorm, rotary attention with grouped KV
heads and q/k/v biases, a SwiGLU MLP. Random weights from a seed; nothing is downloaded.

It runs any contiguous range of layers on a chunk of positions against a KV cache, which is what pipeline and
sequence parallelism need:  h = model.layers_forward(h, layers=range(2, 4), cache=cache, start=8)
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class Config:
    vocab: int = 256
    dim: int = 64
    layers: int = 6
    heads: int = 4
    kv_heads: int = 2
    hidden: int = 128
    rope_theta: float = 10000.0
    eps: float = 1e-6


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope(x, positions, theta):
    """Rotate pairs of features by position (the half-split layout Qwen uses)."""  # x: (heads, seq, head_dim)
    half = x.shape[-1] // 2
    freqs = theta ** (-torch.arange(half, dtype=torch.float32, device=x.device) / half)
    angles = positions.float()[:, None] * freqs[None, :]                       # (seq, half)
    cos, sin = angles.cos(), angles.sin()
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class Attention(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.c, self.hd = c, c.dim // c.heads
        self.q = nn.Linear(c.dim, c.heads * self.hd, bias=True)
        self.k = nn.Linear(c.dim, c.kv_heads * self.hd, bias=True)
        self.v = nn.Linear(c.dim, c.kv_heads * self.hd, bias=True)
        self.o = nn.Linear(c.heads * self.hd, c.dim, bias=False)

    def forward(self, x, cache: dict, layer: int, start: int):
        seq = x.shape[0]                                                            # x: (seq, dim)
        pos = torch.arange(start, start + seq, device=x.device)
        q = rope(self.q(x).view(seq, self.c.heads, self.hd).transpose(0, 1), pos, self.c.rope_theta)
        k = rope(self.k(x).view(seq, self.c.kv_heads, self.hd).transpose(0, 1), pos, self.c.rope_theta)
        v = self.v(x).view(seq, self.c.kv_heads, self.hd).transpose(0, 1)         # (kv_heads, seq, hd)
        if layer in cache:  # the cache holds positions [0, start)
            k = torch.cat([cache[layer][0], k], dim=1)
            v = torch.cat([cache[layer][1], v], dim=1)
        cache[layer] = (k, v)
        rep = self.c.heads // self.c.kv_heads
        k, v = k.repeat_interleave(rep, dim=0), v.repeat_interleave(rep, dim=0)      # (heads, start+seq, hd)
        mask = torch.arange(start + seq, device=x.device)[None, :] <= pos[:, None]  # causal over the cache
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o(out.transpose(0, 1).reshape(seq, -1))


class Block(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.norm1, self.attn = RMSNorm(c.dim, c.eps), Attention(c)
        self.norm2 = RMSNorm(c.dim, c.eps)
        self.gate, self.up = nn.Linear(c.dim, c.hidden, bias=False), nn.Linear(c.dim, c.hidden, bias=False)
        self.down = nn.Linear(c.hidden, c.dim, bias=False)

    def forward(self, x, cache, layer, start):
        x = x + self.attn(self.norm1(x), cache, layer, start)
        h = self.norm2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class TinyQwen(nn.Module):
    def __init__(self, c: Config = Config(), seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.c = c
        self.embed = nn.Embedding(c.vocab, c.dim)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.layers))
        self.norm = RMSNorm(c.dim, c.eps)
        self.lm_head = nn.Linear(c.dim, c.vocab, bias=False)

    def layers_forward(self, h, layers, cache: dict, start: int):
        for i in layers:
            h = self.blocks[i](h, cache, i, start)
        return h

    def next_token(self, h) -> int:
        return int(self.lm_head(self.norm(h[-1])).argmax())


@torch.no_grad()
def generate(model: TinyQwen, prompt: list[int], steps: int) -> list[int]:
    """Single-process reference: prefill the whole prompt, then greedy decoding."""
    cache: dict = {}
    h = model.layers_forward(model.embed(torch.tensor(prompt)), range(model.c.layers), cache, 0)
    out = [model.next_token(h)]
    for _ in range(steps - 1):
        start = len(prompt) + len(out) - 1
        h = model.layers_forward(model.embed(torch.tensor(out[-1:])), range(model.c.layers), cache, start)
        out.append(model.next_token(h))
    return out
