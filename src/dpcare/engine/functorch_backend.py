"""Per-example gradients of an arbitrary per-example objective with ``torch.func``.

This is the general backend: any model and any objective work, at the cost of
materialising one gradient per example (memory ~ batch x parameters).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from torch import Tensor, nn
from torch.func import functional_call, grad, vmap

from dpcare.engine.clip import check_losses, clip_factors
from dpcare.engine.devices import full_precision, to_float32
from dpcare.engine.layout import Layout

LossFn = Callable[[Callable[..., Tensor], Mapping[str, Tensor]], Tensor]


class FunctionalModel:
    """Calls ``model`` with substituted parameters, so objectives can call it like the module."""

    def __init__(self, model: nn.Module, params: Mapping[str, Tensor], buffers: Mapping[str, Tensor]):
        self._model = model
        self._state = {**params, **buffers}

    def __call__(self, *args, **kwargs):
        return functional_call(self._model, self._state, args, kwargs)


def per_example_gradients(
    model: nn.Module, loss_fn: LossFn, batch: Mapping[str, Tensor], trainable: Mapping[str, nn.Parameter]
) -> dict[str, Tensor]:
    """Return ``{name: [B, *param.shape]}`` gradients of each example's loss."""
    frozen = {n: p.detach() for n, p in model.named_parameters() if n not in trainable}
    buffers = dict(model.named_buffers())
    detached = {n: p.detach() for n, p in trainable.items()}
    device = next(iter(detached.values())).device

    def single_loss(params: dict[str, Tensor], example: dict[str, Tensor]) -> Tensor:
        one = {k: v.unsqueeze(0) for k, v in example.items()}
        losses = check_losses(loss_fn(FunctionalModel(model, {**frozen, **params}, buffers), one), 1)
        return losses.sum()

    per_example = vmap(grad(single_loss), in_dims=(None, 0), randomness="different")
    # fp32 even in a bf16 run: torch 2.13's vmap cannot differentiate LayerNorm under autocast (a dtype error
    # in its backward), so this backend computes its per-example gradients in full precision
    with full_precision(device):
        return per_example(detached, dict(batch))


def clipped_sum_functorch(
    model: nn.Module,
    loss_fn: LossFn,
    batch: Mapping[str, Tensor],
    trainable: Mapping[str, nn.Parameter],
    clip_norm: float,
    groups: Tensor | None = None,
) -> tuple[dict[str, Tensor], Tensor]:
    """Sum over the batch of per-unit gradients clipped to ``clip_norm``; also the norms. A unit is a row,
    or with ``groups`` (one label per row) all rows sharing a label, their gradients summed first."""
    grads = {n: to_float32(g) for n, g in per_example_gradients(model, loss_fn, batch, trainable).items()}
    with full_precision(next(iter(grads.values())).device):  # norms and sums in fp32 under bf16 autocast
        return _clip_and_sum(grads, batch, groups, clip_norm)


def _clip_and_sum(grads: dict[str, Tensor], batch: Mapping[str, Tensor], groups: Tensor | None,
                  clip_norm: float) -> tuple[dict[str, Tensor], Tensor]:
    if groups is not None:
        layout = Layout(next(iter(batch.values())).shape[0], groups)
        grads = {n: layout.units_of(g) for n, g in grads.items()}
    sq = sum(g.reshape(g.shape[0], -1).pow(2).sum(1) for g in grads.values())
    norms = sq.sqrt()
    factors = clip_factors(norms, clip_norm)
    summed = {n: torch.einsum("b,b...->...", factors, g) for n, g in grads.items()}
    return summed, norms
