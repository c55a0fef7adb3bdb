"""A small pre-norm transformer encoder for sequence classification.

Built only from ``nn.Embedding``, ``nn.Linear`` and ``nn.LayerNorm`` (positions
are an embedding of ``arange(T)`` per example, not a shared [1, T] tensor), so
the fast clipping backend covers every parameter.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dpcare.exceptions import SettingsError


class _Block(nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d)
        x = x + self.drop(self.proj(att))
        return x + self.drop(self.fc2(F.gelu(self.fc1(self.norm2(x)))))


class TinyTransformer(nn.Module):
    """Token ids [B, T] -> logits [B, classes] (mean-pooled)."""

    def __init__(self, vocab: int, max_len: int = 64, dim: int = 128, depth: int = 2, heads: int = 4,
                 classes: int = 2, dropout: float = 0.0):
        super().__init__()
        if dim % heads:
            raise SettingsError(f"dim ({dim}) must be divisible by heads ({heads})")
        self.tokens, self.positions = nn.Embedding(vocab, dim), nn.Embedding(max_len, dim)
        self.blocks = nn.ModuleList(_Block(dim, heads, dropout) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, ids: Tensor, return_hidden: bool = False):
        pos = torch.arange(ids.shape[1], device=ids.device).expand(ids.shape[0], -1)
        x = self.tokens(ids) + self.positions(pos)
        for block in self.blocks:
            x = block(x)
        h = self.norm(x).mean(1)
        out = self.head(h)
        return (out, h) if return_hidden else out
