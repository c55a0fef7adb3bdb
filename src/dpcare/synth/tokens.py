"""Token roles (key / value / other; assigned exactly by ``row_tokens.RowTokenizer``) and the weighted
stage-2 loss of Afonja et al. (DP-2Stage), Eq. (6):

    L = -lambda * sum_{t in values} log p(t | t_<) - (1 - lambda) * sum_{t in keys, others} log p(t | t_<)

per example (a sum over its tokens), lambda = 0.65 by default.
"""

from __future__ import annotations

import torch
from torch import Tensor

from dpcare.exceptions import SettingsError
from dpcare.token_loss import token_nll

OTHER, KEY, VALUE = 0, 1, 2


def weighted_token_loss(logits: Tensor, ids: Tensor, roles: Tensor, mask: Tensor, lam: float = 0.65) -> Tensor:
    """Per-example Eq. (6) loss, shape [B]: next-token cross-entropy weighted by role, summed over tokens."""
    if not 0 <= lam <= 1:
        raise SettingsError(f"lambda must be in [0, 1], got {lam}")
    ce = token_nll(logits[:, :-1], ids[:, 1:])
    target_roles, target_mask = roles[:, 1:], mask[:, 1:].to(ce.dtype)
    weights = torch.where(target_roles == VALUE, torch.full_like(ce, lam), torch.full_like(ce, 1 - lam))
    return (weights * ce * target_mask).sum(1)
