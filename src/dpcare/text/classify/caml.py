"""CAML: convolutional attention for multi-label classification (Mullenbach et al., 2018), the
clinical-note backbone of FusionDP (Zeng et al., Section 5.3 and Appendix C).

    E = embed(ids)                      [B, T, E]   (rows of <pad> positions set to zero)
    H = act(conv1d(E))                  [B, T, F]   one convolution, "same" padding
    alpha_l = softmax_t(U_l . H_t)      [B, T, L]   one attention vector U_l per label, <pad> masked
    v_l = sum_t alpha_tl H_t            [B, L, F]   label-specific document vectors
    score_l = beta_l . v_l + b_l        [B, L]

Every trainable parameter lives in an ``nn.Embedding``, ``nn.Conv1d`` or ``nn.Linear`` and is used
through a module call, so the engine's fast clipping backend covers the model:
``U = attention = Linear(F, L, bias=False)`` is applied to H (rows = positions), and
``beta, b = output = Linear(F, L)`` is applied to H as well, because
``beta_l . v_l + b_l = sum_t alpha_tl (beta_l . H_t + b_l)`` (the weights alpha_l sum to 1):
``score = (alpha * output(H)).sum(positions)``. The document vectors v_l are formed only for
``return_hidden`` (FusionDP's consistency term). No layer mixes the examples of a batch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dpcare.exceptions import SettingsError

ACTIVATIONS = {"tanh": torch.tanh, "relu": F.relu}


class CAML(nn.Module):
    """Token ids [B, T] (0 = <pad>) -> one logit per label [B, n_labels].

    ``embeddings``: an initial embedding weight [vocab_size, emb_dim] (a tensor or an object with a
    ``weight`` tensor, such as ``word_vectors(...)``). ``activation``: "tanh" as in CAML, or
    "relu" as in FusionDP's variant. ``model(ids, return_hidden=True)`` also returns the label
    document vectors flattened, [B, n_labels * n_filters]."""

    def __init__(self, vocab_size: int, n_labels: int, emb_dim: int = 100, n_filters: int = 50,
                 kernel_size: int = 10, dropout: float = 0.2, embeddings=None, *, padding_idx: int = 0,
                 activation: str = "tanh"):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise SettingsError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        self.padding_idx, self.act = padding_idx, ACTIVATIONS[activation]
        self.embed = nn.Embedding(vocab_size, emb_dim, padding_idx=padding_idx)
        self.drop = nn.Dropout(dropout)
        self.conv = nn.Conv1d(emb_dim, n_filters, kernel_size, padding="same")
        self.attention = nn.Linear(n_filters, n_labels, bias=False)  # U: one query per label
        self.output = nn.Linear(n_filters, n_labels)  # beta and b: one scoring vector per label
        for layer in (self.conv, self.attention, self.output):
            nn.init.xavier_uniform_(layer.weight)
        if embeddings is not None:
            weight = torch.as_tensor(getattr(embeddings, "weight", embeddings))
            if weight.shape != self.embed.weight.shape:
                raise SettingsError(f"embeddings of shape {tuple(weight.shape)}, expected "
                                    f"{tuple(self.embed.weight.shape)} (vocab_size, emb_dim)")
            with torch.no_grad():
                self.embed.weight.copy_(weight)
                self.embed.weight[padding_idx] = 0

    def encode(self, ids: Tensor) -> tuple[Tensor, Tensor]:
        """Hidden states H [B, T, F] and the attention weights alpha [B, T, L] (zero at <pad>)."""
        keep = (ids != self.padding_idx).unsqueeze(-1)
        x = self.drop(self.embed(ids) * keep)  # <pad> rows are zero even if noise moved their weights
        h = self.act(self.conv(x.transpose(1, 2))).transpose(1, 2)
        logits = self.attention(h).masked_fill(~keep, torch.finfo(h.dtype).min)
        return h, torch.softmax(logits, dim=1)  # a note of <pad> only: uniform weights, finite

    def forward(self, ids: Tensor, return_hidden: bool = False):
        h, alpha = self.encode(ids)
        scores = (alpha * self.output(h)).sum(1)  # = beta_l . v_l + b_l
        if not return_hidden:
            return scores
        return scores, torch.einsum("btl,btf->blf", alpha, h).flatten(1)
