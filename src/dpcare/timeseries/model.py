"""Transformer forecaster for binned clinical time series (zoo-tsf-spec.md, "Model").

Input windows ``x`` [B, T_in, 2V] (z-scored values, then 0/1 masks) are embedded by a
circular Conv1d plus fixed sinusoidal positions (the embedding E [B, T_in, d], the space
the augmentation defences work in). An Informer-style encoder (attention, distilling
conv, attention, LayerNorm, Linear d -> V) gives a memory M [B, T', V]; one decoder layer
of width V predicts the output window hour by hour from its own fed-back predictions
(student forcing: gradients flow through them).

With ``residual=True`` the forecaster predicts the CHANGE from each variable's last observed value of the
input window (last observation carried forward, LOCF; the declared mean, 0, for a variable never observed):
forecast = LOCF + skip(per variable: its last observed value, the mean of its observed values in the window,
whether it was observed) + head(decoder output). The skip (per variable, a linear change over the whole horizon:
e.g. from the last value towards the window's mean or the population mean; 4 parameters a variable) and the
linear head start at zero, so that the untrained model IS the LOCF forecast and training (private or not)
starts from that public baseline; the decoder's change varies along the horizon.

For per-example DP (fast clipping): every trainable parameter lives in ``nn.Linear``,
``nn.LayerNorm`` or ``nn.Conv1d``; attention uses separate q/k/v/out ``nn.Linear``
projections (no fused ``in_proj``); no layer uses batch statistics, and every layer is
called with the examples on dimension 0.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dpcare.exceptions import DataError, SettingsError


def masked_mse(yhat: Tensor, y: Tensor, mask: Tensor) -> Tensor:
    """Per-example masked MSE (Eq. 1): sum m (yhat - y)^2 / max(sum m, 1), shape [B].

    Unobserved cells never contribute, even where ``y`` holds NaN there.
    """
    m = mask.to(yhat.dtype)
    sq = torch.where(m > 0, (yhat - y) ** 2, torch.zeros((), dtype=yhat.dtype, device=yhat.device))
    dims = tuple(range(1, yhat.dim()))
    return (sq * m).sum(dims) / m.sum(dims).clamp_min(1.0)


def last_observed(x: Tensor) -> Tensor:
    """Per window and variable the last observed value of input windows x [B, T, 2V] (values, then 0/1
    masks): [B, V]; 0 (the declared mean in z-units) for a variable the window never observes."""
    n_vars = x.shape[-1] // 2
    values, seen = x[..., :n_vars], x[..., n_vars:] > 0
    steps = torch.arange(1, x.shape[1] + 1, device=x.device).view(1, -1, 1)
    last = torch.where(seen, steps, torch.zeros_like(steps)).amax(dim=1)  # 1-based; 0 = never observed
    value = values.gather(1, (last - 1).clamp_min(0).unsqueeze(1)).squeeze(1)
    return torch.where(last > 0, value, torch.zeros_like(value))


def window_mean(x: Tensor) -> Tensor:
    """Per window and variable the mean of the observed values of input windows x [B, T, 2V]: [B, V]; 0 (the
    declared mean) for a variable the window never observes."""
    n_vars = x.shape[-1] // 2
    values, seen = x[..., :n_vars], x[..., n_vars:]
    return (values * seen).sum(dim=1) / seen.sum(dim=1).clamp_min(1.0)


def locf_forecast(x: Tensor, output_len: int) -> Tensor:
    """Last observation carried forward: every future step of a window forecast by :func:`last_observed`,
    [B, output_len, V]."""
    return last_observed(x).unsqueeze(1).expand(-1, output_len, -1)


def sinusoidal_positions(length: int, dim: int) -> Tensor:
    """Fixed sinusoidal position table [length, dim] (sin on even, cos on odd channels)."""
    pos = torch.arange(length, dtype=torch.float32)[:, None]
    freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(length, dim)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq)[:, : dim // 2]
    return table


class Attention(nn.Module):
    """Multi-head attention from four plain ``nn.Linear`` projections (q, k, v, out)."""

    def __init__(self, dim: int, heads: int, dropout: float = 0.0):
        super().__init__()
        if dim % heads:
            raise SettingsError(f"width {dim} is not divisible by {heads} heads")
        self.heads, self.dropout = heads, dropout
        self.q, self.k, self.v, self.out = (nn.Linear(dim, dim) for _ in range(4))

    def forward(self, query: Tensor, context: Tensor, causal: bool = False) -> Tensor:
        b, tq, d = query.shape
        tk, h = context.shape[1], self.heads
        q = self.q(query).view(b, tq, h, d // h).transpose(1, 2)
        k = self.k(context).view(b, tk, h, d // h).transpose(1, 2)
        v = self.v(context).view(b, tk, h, d // h).transpose(1, 2)
        att = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=causal
        )
        return self.out(att.transpose(1, 2).reshape(b, tq, d))


class EncoderLayer(nn.Module):
    """Post-norm self-attention block with a GELU feed-forward."""

    def __init__(self, dim: int, heads: int, d_ff: int, dropout: float):
        super().__init__()
        self.attn = Attention(dim, heads, dropout)
        self.ff1, self.ff2 = nn.Linear(dim, d_ff), nn.Linear(d_ff, dim)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        x = self.norm1(x + self.drop(self.attn(x, x)))
        return self.norm2(x + self.drop(self.ff2(self.drop(F.gelu(self.ff1(x))))))


class DistillLayer(nn.Module):
    """Conv1d (k3, circular) -> per-time-step LayerNorm -> ELU -> MaxPool (k3, s2): T -> ceil(T/2).

    A LayerNorm over channels replaces the original BatchNorm, which mixes examples.
    """

    def __init__(self, dim: int):
        super().__init__()
        self.conv = nn.Conv1d(dim, dim, 3, padding=1, padding_mode="circular")
        self.norm = nn.LayerNorm(dim)
        self.pool = nn.MaxPool1d(3, stride=2, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        h = self.norm(self.conv(x.transpose(1, 2)).transpose(1, 2))
        return self.pool(F.elu(h).transpose(1, 2)).transpose(1, 2)


class DecoderLayer(nn.Module):
    """Post-norm decoder layer: causal self-attention, cross-attention to the memory, FF."""

    def __init__(self, dim: int, heads: int, d_ff: int, dropout: float):
        super().__init__()
        self.self_attn = Attention(dim, heads, dropout)
        self.cross_attn = Attention(dim, heads, dropout)
        self.ff1, self.ff2 = nn.Linear(dim, d_ff), nn.Linear(d_ff, dim)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(dim) for _ in range(3))
        self.drop = nn.Dropout(dropout)

    def forward(self, s: Tensor, memory: Tensor) -> Tensor:
        s = self.norm1(s + self.drop(self.self_attn(s, s, causal=True)))
        s = self.norm2(s + self.drop(self.cross_attn(s, memory)))
        return self.norm3(s + self.drop(self.ff2(self.drop(F.gelu(self.ff1(s))))))


class Forecaster(nn.Module):
    """Windows x [B, T_in, 2V] -> forecasts [B, T_out, V] (iterated multi-step decoder)."""

    def __init__(self, n_vars: int, input_len: int = 24, output_len: int = 24,
                 d_model: int = 64, n_heads: int = 4, d_ff: int | None = None,
                 dropout: float = 0.0, decoder_ff: int | None = None, residual: bool = False):
        super().__init__()
        self.n_vars, self.input_len, self.output_len = n_vars, input_len, output_len
        self.d_model = d_model
        self.token_embedding = nn.Conv1d(2 * n_vars, d_model, 3, padding=1,
                                         padding_mode="circular", bias=False)
        self.register_buffer("positions", sinusoidal_positions(input_len, d_model),
                             persistent=False)
        self.embed_drop = nn.Dropout(dropout)
        d_ff = d_ff or 4 * d_model
        self.encoder1 = EncoderLayer(d_model, n_heads, d_ff, dropout)
        self.distill = DistillLayer(d_model)
        self.encoder2 = EncoderLayer(d_model, n_heads, d_ff, dropout)
        self.encoder_norm = nn.LayerNorm(d_model)
        self.to_memory = nn.Linear(d_model, n_vars)
        self.decoder = DecoderLayer(n_vars, 1, decoder_ff or 4 * n_vars, dropout)
        self.residual = residual
        if residual:  # created last: a direct forecaster's initialisation is unchanged
            # per variable (a grouped 1x1 convolution: 4 parameters a variable, little noise under DP-SGD): its
            # last value, its window mean and whether it was observed -> its change over the whole horizon
            self.skip = nn.Conv1d(3 * n_vars, n_vars, 1, groups=n_vars)
            self.head = nn.Linear(n_vars, n_vars)  # decoder output -> change
            for layer in (self.skip, self.head):
                nn.init.zeros_(layer.weight)
                nn.init.zeros_(layer.bias)

    def embed(self, x: Tensor) -> Tensor:
        """Conv token embedding plus sinusoidal positions: E [B, T_in, d]."""
        if x.dim() != 3 or x.shape[2] != 2 * self.n_vars:
            raise DataError(f"expected x of shape [B, T, {2 * self.n_vars}], got {tuple(x.shape)}")
        if x.shape[1] > self.input_len:
            raise DataError(f"input of {x.shape[1]} steps is longer than input_len "
                            f"{self.input_len}")
        tokens = self.token_embedding(x.transpose(1, 2)).transpose(1, 2)
        return tokens + self.positions[: x.shape[1]]

    def encode(self, e: Tensor) -> Tensor:
        """Embedding E -> memory M [B, ceil(T_in / 2), V]."""
        h = self.encoder2(self.distill(self.encoder1(self.embed_drop(e))))
        return self.to_memory(self.encoder_norm(h))

    def from_embedding(self, e: Tensor, output_len: int | None = None) -> Tensor:
        """Forecast [B, T_out, V] from embeddings; predictions are fed back (student forcing). A residual
        forecaster returns the forecast CHANGE from the last observation (its head applied to the decoder's
        outputs): :meth:`forward` adds the last observation, embedding-space users compare it with
        ``y - LOCF`` (:meth:`target`)."""
        memory = self.encode(e)
        seq = memory.new_zeros(e.shape[0], 1, self.n_vars)
        preds = []
        for step in range(output_len or self.output_len):
            pred = self.decoder(seq, memory)[:, -1:]
            preds.append(pred)
            if step + 1 < (output_len or self.output_len):
                seq = torch.cat([seq, pred], dim=1)
        out = torch.cat(preds, dim=1)
        return self.head(out) if self.residual else out

    def forward(self, x: Tensor) -> Tensor:
        if self.residual and self.head_is_off():
            return self.anchor(x)  # the transformer's change is exactly 0: not computed
        out = self.from_embedding(self.embed(x))
        return self.anchor(x) + out if self.residual else out

    def head_is_off(self) -> bool:
        """A residual forecaster whose head is frozen at zero (the linear parameterisation): the transformer
        adds nothing."""
        head = (self.head.weight, self.head.bias)
        return not any(p.requires_grad for p in head) and not any(bool(p.any()) for p in head)

    def anchor(self, x: Tensor) -> Tensor:
        """A residual forecaster's forecast before the decoder: LOCF plus the skip's change (the same at every
        future step), [B, T_out, V]."""
        last = last_observed(x)
        seen = (x[..., self.n_vars:] > 0).any(dim=1).to(x.dtype)
        features = torch.stack([last, window_mean(x), seen], dim=2).reshape(len(x), 3 * self.n_vars, 1)
        level = last + self.skip(features).view(len(x), self.n_vars)
        return level.unsqueeze(1).expand(-1, self.output_len, -1)

    def target(self, x: Tensor, y: Tensor) -> Tensor:
        """What :meth:`from_embedding` forecasts for windows x with targets y: y itself, or for a residual
        forecaster y minus :meth:`anchor` (a constant: the masked MSE of ``from_embedding`` against it equals
        that of :meth:`forward` against y, and embedding-space training, which freezes the skip, sees the
        same loss)."""
        if not self.residual:
            return y
        with torch.no_grad():
            return y - self.anchor(x)

    def embedding_parameters(self) -> Iterator[nn.Parameter]:
        """Parameters that read the windows x rather than their embedding (frozen during augmentation
        retraining): the conv token embedding, and a residual forecaster's skip."""
        yield from self.token_embedding.parameters()
        if self.residual:
            yield from self.skip.parameters()
