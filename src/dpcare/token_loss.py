"""Per-token cross-entropy of sequence logits, the one spelling every LM objective uses."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor


def token_nll(logits: Tensor, targets: Tensor, ignore_index: int = -100) -> Tensor:
    """Next-token (or per-token) negative log-likelihood, shape [B, T], of ``logits`` [B, T, V] at ``targets``
    [B, T] (0 where ``targets == ignore_index``). Rows are flattened first: cross-entropy over the class
    dimension of a transposed [B, V, T] view is ~2.5x slower on CPU for an LM vocabulary."""
    b, t, v = logits.shape
    return F.cross_entropy(logits.reshape(b * t, v), targets.reshape(b * t), ignore_index=ignore_index,
                           reduction="none").view(b, t)
