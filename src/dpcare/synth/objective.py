"""Fine-tuning objectives of DP-2Stage for the engine, and role-wise perplexity.

Stage 1 (pseudo data, no privacy cost): the plain causal-LM loss, Afonja et al., Eq. (5).
Stage 2 (private table, DP-SGD through the engine): the weighted loss of Eq. (6),
``lambda`` on value tokens and ``1 - lambda`` on key and other tokens.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from dpcare.engine.objective import Objective
from dpcare.exceptions import SettingsError
from dpcare.lm import trim_right_padding
from dpcare.synth.tokens import KEY, OTHER, VALUE, weighted_token_loss
from dpcare.token_loss import token_nll


def _trim(batch) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The batch's ids, targets, roles and mask without padding beyond the longest row."""
    keys = ("ids", "targets", "roles", "mask")
    trimmed, _ = trim_right_padding({k: batch[k] for k in keys}, batch["mask"])
    return tuple(trimmed[k] for k in keys)


class TokenLoss(Objective):
    """Per-row token loss; ``lam=None`` is the plain sum of token cross-entropies (Eq. 5)."""

    private_keys = ("ids", "targets", "roles", "mask")

    def __init__(self, lam: float | None = 0.65, private: bool = True):
        if lam is not None and not 0 <= lam <= 1:
            raise SettingsError(f"lambda must be in [0, 1], got {lam}")
        self.lam, self.private = lam, private
        self.name = ("dp-" if private else "") + ("weighted-lm" if lam is not None else "lm")

    def private_loss(self, model, batch) -> Tensor:
        ids, targets, roles, mask = _trim(batch)
        logits = model(ids)
        if self.lam is None:
            ce = token_nll(logits[:, :-1], targets[:, 1:])
            return (ce * mask[:, 1:].to(ce.dtype)).sum(1)
        return weighted_token_loss(logits, targets, roles, mask, self.lam)


@torch.no_grad()
def role_perplexity(model, data: dict[str, Tensor], batch_size: int = 64) -> dict[str, float]:
    """exp(mean next-token NLL) over all tokens and per role (key, value, other) of encoded rows."""
    sums = {r: 0.0 for r in (KEY, VALUE, OTHER)}
    counts = {r: 0 for r in sums}
    model.eval()
    for start in range(0, data["ids"].shape[0], batch_size):
        part = {k: v[start:start + batch_size] for k, v in data.items()}
        ids, targets, roles, mask = _trim(part)
        nll = token_nll(model(ids)[:, :-1], targets[:, 1:])
        r, m = roles[:, 1:], mask[:, 1:].bool()
        for role in sums:
            sel = m & (r == role)
            sums[role] += float(nll[sel].sum())
            counts[role] += int(sel.sum())
    names = {KEY: "key", VALUE: "value", OTHER: "other"}
    out = {names[r]: math.exp(sums[r] / counts[r]) if counts[r] else float("nan") for r in sums}
    out["all"] = math.exp(sum(sums.values()) / max(1, sum(counts.values())))
    return out
