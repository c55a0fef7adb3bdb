"""Fast per-example clipping without per-example gradients ("book-keeping" clipping).

One forward pass records each trainable layer's inputs and outputs; one
backward pass (``autograd.grad`` to the layer outputs only, so no weight
gradients are computed) gives the output gradients. From inputs ``A`` and output
gradients ``D`` we get, per example, the gradient norm without materialising the
gradient (ghost norm, Goodfellow 2015; Li et al. 2022) and then the clipped sum
``sum_i c_i A_i^T D_i`` with one matrix product per layer (Bu et al. 2023).

An objective may call the model several times per example (e.g. on ``x`` and
on its padded public view, or read a hidden layer): the calls of one layer are
stacked like positions of a sequence, so the per-example gradient is the sum
over calls and positions, and its norm is exact.

Grouped examples (the privacy unit is a patient with several rows, e.g. forecasting windows or note
windows): each layer's per-row tensors are padded into one sequence per unit, so the unit's gradient is
the sum over its rows, and its norm (the one clipped) is exact.

Supported trainable layers: ``nn.Linear``, ``nn.Conv1d``/``nn.Conv2d`` (stride, padding incl. "same" and
circular, dilation, groups), ``nn.LayerNorm``, ``nn.GroupNorm``, ``nn.Embedding``, RMS norms (torch's and
Hugging Face's ``*RMSNorm``) and Hugging Face's ``Conv1D`` (GPT-2).
A model with any other trainable parameter, or with one parameter shared by
two layers (tied embeddings), is not supported: use the functorch backend.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dpcare.engine.clip import check_losses, clip_factors
from dpcare.engine.devices import full_precision, to_float32
from dpcare.engine.functorch_backend import LossFn
from dpcare.engine.layout import Layout


@dataclass
class _Record:
    module: nn.Module
    inputs: list[Tensor] = field(default_factory=list)
    outputs: list[Tensor] = field(default_factory=list)


def _trainable(module: nn.Module) -> dict[str, nn.Parameter]:
    return {n: p for n, p in module.named_parameters(recurse=False) if p.requires_grad}


#: per-example weight gradients up to this many numbers in all are kept for the clipped sum
PER_EXAMPLE_BUDGET = 2**24


def _matmul_sq(a: Tensor, d: Tensor) -> tuple[Tensor, Tensor | None]:
    """Per-example ||d_i^T a_i||_F^2 for a [B, S, d_in], d [B, S, d_out], without forming the product
    when the ghost norm (Gram matrices S x S) is cheaper. Where the product is formed (long sequences,
    conv positions) and small enough, it is returned too, so the clipped sum need not recompute it."""
    b, s, d_in, d_out = a.shape[0], a.shape[1], a.shape[2], d.shape[2]
    if s == 1:
        return a.pow(2).sum((1, 2)) * d.pow(2).sum((1, 2)), None
    if s * s <= d_in * d_out:
        return (torch.bmm(a, a.transpose(1, 2)) * torch.bmm(d, d.transpose(1, 2))).sum((1, 2)), None
    per_example = torch.bmm(d.transpose(1, 2), a)  # [B, d_out, d_in]
    return per_example.pow(2).sum((1, 2)), per_example if b * d_in * d_out <= PER_EXAMPLE_BUDGET else None


class _LinearRule:
    @staticmethod
    def norms_and_grads(mod: nn.Linear, rec: _Record, grads_out: list[Tensor], layout: Layout):
        a = layout.stack(rec.inputs, 1)
        d = layout.stack(grads_out, 1)
        params = _trainable(mod)
        sq = torch.zeros(layout.size, dtype=d.dtype, device=d.device)
        per_example = None
        if "weight" in params:
            w_sq, per_example = _matmul_sq(a, d)
            sq = sq + w_sq
        if "bias" in params:
            sq = sq + d.sum(1).pow(2).sum(1)

        def clipped(c: Tensor) -> dict[str, Tensor]:
            dc = d * c[:, None, None]
            out = {}
            if per_example is not None:
                out["weight"] = torch.einsum("b,boi->oi", c, per_example)
            elif "weight" in params:
                out["weight"] = dc.reshape(-1, dc.shape[-1]).T @ a.reshape(-1, a.shape[-1])
            if "bias" in params:
                out["bias"] = dc.sum((0, 1))
            return out

        return sq, clipped


class _ConvRule:
    """``nn.Conv1d`` / ``nn.Conv2d``. Ungrouped convolutions: per-example weight gradients formed
    directly (one batched product per kernel offset), while they fit in PER_EXAMPLE_BUDGET. Otherwise the input is unfolded into patches and each group of
    channels is a linear layer applied at every output position (positions stacked like a sequence)."""

    @staticmethod
    def _padded(mod: nn.Module, x: Tensor) -> tuple[Tensor, tuple[int, ...]]:
        """The input with non-zero padding modes and "same" applied; the zero padding still to apply."""
        k, dil = mod.kernel_size, mod.dilation
        if mod.padding_mode != "zeros":
            return F.pad(x, mod._reversed_padding_repeated_twice, mode=mod.padding_mode), (0,) * len(k)
        if mod.padding == "same":
            widths = [dl * (kk - 1) for kk, dl in zip(k, dil)]
            return F.pad(x, [p for w in reversed(widths) for p in (w // 2, w - w // 2)]), (0,) * len(k)
        return x, (0,) * len(k) if mod.padding == "valid" else tuple(mod.padding)

    @staticmethod
    def _as_2d(mod: nn.Module, x: Tensor, pad: tuple[int, ...]):
        k, dil, stride = mod.kernel_size, mod.dilation, mod.stride
        if len(k) == 1:  # a 1-d convolution as a 2-d one over a height-1 image
            return x.unsqueeze(2), (1, *k), (1, *dil), (0, *pad), (1, *stride)
        return x, k, dil, pad, stride

    @staticmethod
    def _patches(mod: nn.Module, x: Tensor) -> Tensor:
        """[B, C, *spatial] -> [B, L_out, C * prod(kernel)] (channel-major, as the weight is laid out)."""
        x, k, dil, pad, stride = _ConvRule._as_2d(mod, *_ConvRule._padded(mod, x))
        return F.unfold(x, k, dilation=dil, padding=pad, stride=stride).transpose(1, 2)

    @staticmethod
    def _weight_grads(mod: nn.Module, x: Tensor, d: Tensor) -> Tensor:
        """Per-example weight gradients [B, C_out, C_in * prod(kernel)] of one call (groups = 1): for
        each kernel offset, one batched product of the output gradients with the shifted input."""
        x, k, dil, pad, stride = _ConvRule._as_2d(mod, *_ConvRule._padded(mod, x))
        if len(mod.kernel_size) == 1:
            d = d.unsqueeze(2)
        x = F.pad(x, (pad[1], pad[1], pad[0], pad[0]))
        b, c, (o, hp, wp) = x.shape[0], x.shape[1], d.shape[1:]
        dm = d.reshape(b, o, hp * wp)
        out = x.new_empty(b, o, c, k[0], k[1])
        for i in range(k[0]):
            for j in range(k[1]):
                r, s = i * dil[0], j * dil[1]
                shifted = x[:, :, r: r + stride[0] * (hp - 1) + 1: stride[0], s: s + stride[1] * (wp - 1) + 1: stride[1]]
                out[..., i, j] = torch.bmm(dm, shifted.reshape(b, c, hp * wp).transpose(1, 2))
        return out.reshape(b, o, -1)

    @staticmethod
    def norms_and_grads(mod: nn.Module, rec: _Record, grads_out: list[Tensor], layout: Layout):
        params = _trainable(mod)
        if "weight" in params and mod.groups == 1 and \
                layout.rows * mod.weight.numel() <= PER_EXAMPLE_BUDGET:
            per_row = sum(_ConvRule._weight_grads(mod, x, d) for x, d in zip(rec.inputs, grads_out))
            per_example = {"weight": layout.units_of(per_row).reshape(layout.size, *mod.weight.shape)}
            if "bias" in params:
                bias = layout.stack([t.flatten(2).sum(2).unsqueeze(1) for t in grads_out], 1).sum(1)
                per_example["bias"] = bias
            return _per_example_sq_and_sum(per_example, layout.size)
        return _ConvRule._unfolded(mod, rec, grads_out, layout, params)

    @staticmethod
    def _unfolded(mod: nn.Module, rec: _Record, grads_out: list[Tensor], layout: Layout, params):
        g = mod.groups
        a = layout.stack([_ConvRule._patches(mod, x) for x in rec.inputs], 1)  # [U, S, C*K]
        d = layout.stack([t.flatten(2).transpose(1, 2) for t in grads_out], 1)  # [U, S, C_out]
        units, s = a.shape[0], a.shape[1]
        ag = a.reshape(units, s, g, -1).transpose(1, 2)  # [U, G, S, C/G*K]
        dg = d.reshape(units, s, g, -1).transpose(1, 2)  # [U, G, S, C_out/G]
        sq = torch.zeros(units, dtype=d.dtype, device=d.device)
        per_example = None
        if "weight" in params:
            w_sq, per_example = _matmul_sq(ag.reshape(units * g, s, -1), dg.reshape(units * g, s, -1))
            sq = sq + w_sq.view(units, g).sum(1)
        if "bias" in params:
            sq = sq + d.sum(1).pow(2).sum(1)

        def clipped(c: Tensor) -> dict[str, Tensor]:
            out = {}
            if per_example is not None:
                w = torch.einsum("u,ugok->gok", c, per_example.view(units, g, *per_example.shape[1:]))
                out["weight"] = w.reshape(mod.weight.shape)
            elif "weight" in params:
                out["weight"] = torch.einsum("u,ugso,ugsk->gok", c, dg, ag).reshape(mod.weight.shape)
            if "bias" in params:
                out["bias"] = torch.einsum("u,uso->o", c, d)
            return out

        return sq, clipped


class _LayerNormRule:
    @staticmethod
    def norms_and_grads(mod: nn.LayerNorm, rec: _Record, grads_out: list[Tensor], layout: Layout):
        k = len(mod.normalized_shape)
        x = layout.stack(rec.inputs, k)
        d = layout.stack(grads_out, k)
        xhat = F.layer_norm(x, mod.normalized_shape, None, None, mod.eps)
        params = _trainable(mod)
        per_example = {}
        if "weight" in params:
            per_example["weight"] = (d * xhat).sum(1)
        if "bias" in params:
            per_example["bias"] = d.sum(1)
        return _per_example_sq_and_sum(per_example, layout.size)


def _per_example_sq_and_sum(per_example: dict[str, Tensor], units: int):
    """Rules that form per-example gradients [U, *shape] directly (norm layers): norms and clipped sums."""
    sq = sum(g.reshape(units, -1).pow(2).sum(1) for g in per_example.values())

    def clipped(c: Tensor) -> dict[str, Tensor]:
        return {n: torch.einsum("b,b...->...", c, g) for n, g in per_example.items()}

    return sq, clipped


class _GroupNormRule:
    """``nn.GroupNorm``: per example, weight gradient sum over positions of d * xhat, bias of d."""

    @staticmethod
    def norms_and_grads(mod: nn.GroupNorm, rec: _Record, grads_out: list[Tensor], layout: Layout):
        params = _trainable(mod)
        calls = {"weight": [], "bias": []}
        for x, d in zip(rec.inputs, grads_out):
            xhat = F.group_norm(x, mod.num_groups, eps=mod.eps)
            calls["weight"].append((d * xhat).flatten(2).sum(2).unsqueeze(1))  # [B, 1, C]
            calls["bias"].append(d.flatten(2).sum(2).unsqueeze(1))
        per_example = {n: layout.stack(calls[n], 1).sum(1) for n in params}
        return _per_example_sq_and_sum(per_example, layout.size)


class _EmbeddingRule:
    @staticmethod
    def norms_and_grads(mod: nn.Embedding, rec: _Record, grads_out: list[Tensor], layout: Layout):
        idx = layout.stack(rec.inputs, 0)
        d = layout.stack(grads_out, 1)
        if mod.padding_idx is not None:
            d = d * (idx != mod.padding_idx).unsqueeze(-1).to(d.dtype)
        # a unit's gradient puts sum_{t: idx_t = v} d_t in row v: sum the d_t of each (unit, row) pair
        # (one sort, O(positions)) instead of comparing every pair of positions (O(positions^2))
        units, dim = idx.shape[0], d.shape[-1]
        keys = (torch.arange(units, device=idx.device)[:, None] * mod.num_embeddings + idx).reshape(-1)
        rows, where = torch.unique(keys, return_inverse=True)
        summed = d.new_zeros(len(rows), dim).index_add_(0, where, d.reshape(-1, dim))
        sq = d.new_zeros(units).index_add_(0, rows // mod.num_embeddings, summed.pow(2).sum(1))

        def clipped(c: Tensor) -> dict[str, Tensor]:
            dc = (d * c[:, None, None]).reshape(-1, d.shape[-1])
            w = torch.zeros_like(mod.weight)
            return {"weight": w.index_add_(0, idx.reshape(-1), dc)}

        return sq, clipped


class _Conv1DRule:
    """Hugging Face's ``Conv1D`` (GPT-2): a linear layer storing its weight as [in, out]."""

    @staticmethod
    def norms_and_grads(mod: nn.Module, rec: _Record, grads_out: list[Tensor], layout: Layout):
        sq, linear_clipped = _LinearRule.norms_and_grads(mod, rec, grads_out, layout)

        def clipped(c: Tensor) -> dict[str, Tensor]:
            out = linear_clipped(c)
            if "weight" in out:
                out["weight"] = out["weight"].T
            return out

        return sq, clipped


class _RMSNormRule:
    """RMS normalisation ``weight * x / rms(x)`` (torch and Hugging Face variants; per-example
    gradient of the weight is the sum over positions of ``d * x / rms(x)``)."""

    @staticmethod
    def norms_and_grads(mod: nn.Module, rec: _Record, grads_out: list[Tensor], layout: Layout):
        x = layout.stack(rec.inputs, 1)
        dtype = torch.promote_types(x.dtype, torch.float32)  # normalise in at least float32, as the layers do
        x, d = x.to(dtype), layout.stack(grads_out, 1).to(dtype)
        eps = getattr(mod, "variance_epsilon", None) or getattr(mod, "eps", None) or torch.finfo(x.dtype).eps
        xhat = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        per_example = (d * xhat).sum(1)
        sq = per_example.pow(2).sum(1)

        def clipped(c: Tensor) -> dict[str, Tensor]:
            return {"weight": torch.einsum("b,bd->d", c.to(dtype), per_example).to(mod.weight.dtype)}

        return sq, clipped


_RULES: dict[type, type] = {nn.Linear: _LinearRule, nn.LayerNorm: _LayerNormRule, nn.Embedding: _EmbeddingRule,
                            nn.RMSNorm: _RMSNormRule, nn.Conv1d: _ConvRule, nn.Conv2d: _ConvRule,
                            nn.GroupNorm: _GroupNormRule}


def _rule_for(mod: nn.Module) -> type | None:
    """The rule of a layer type; Hugging Face's Conv1D and *RMSNorm classes are matched by name (no import)."""
    rule = _RULES.get(type(mod))
    if rule is None and type(mod).__name__ == "Conv1D" and hasattr(mod, "nf"):
        rule = _Conv1DRule
    if rule is None and type(mod).__name__.endswith("RMSNorm") and set(_trainable(mod)) <= {"weight"}:
        rule = _RMSNormRule
    return rule


def register_rule(module_type: type, rule: type) -> None:
    """Register a rule class with ``norms_and_grads(module, record, grads_out, layout)`` returning the
    per-unit squared norms [layout.size] and a function of the clip factors giving the clipped sums."""
    _RULES[module_type] = rule


def unsupported_reason(model: nn.Module, trainable: Mapping[str, nn.Parameter]) -> str | None:
    """Why the fast backend cannot handle this model, or None if it can."""
    owners: dict[int, str] = {}
    covered: set[int] = set()
    for mname, mod in model.named_modules():
        own = _trainable(mod)
        if not own:
            continue
        if _rule_for(mod) is None:
            return f"layer '{mname}' ({type(mod).__name__}) has trainable parameters and no fast rule"
        if isinstance(mod, nn.Embedding) and (mod.max_norm is not None or mod.sparse):
            return f"embedding '{mname}' uses max_norm/sparse"
        for p in own.values():
            if id(p) in owners:
                return f"parameter shared by '{owners[id(p)]}' and '{mname}' (tied weights)"
            owners[id(p)] = mname
            covered.add(id(p))
    missing = [n for n, p in trainable.items() if id(p) not in covered]
    if missing:
        return f"trainable parameters outside supported layers: {missing[:3]}"
    return None


@contextmanager
def _recording(model: nn.Module):
    records: dict[str, _Record] = {}
    handles = []
    for mname, mod in model.named_modules():
        if _rule_for(mod) is not None and _trainable(mod):
            rec = records[mname] = _Record(mod)

            def hook(module, args, output, rec=rec):
                rec.inputs.append(args[0].detach())
                rec.outputs.append(output)

            handles.append(mod.register_forward_hook(hook))
    try:
        yield records
    finally:
        for h in handles:
            h.remove()


def clipped_sum_fast(
    model: nn.Module,
    loss_fn: LossFn,
    batch: Mapping[str, Tensor],
    trainable: Mapping[str, nn.Parameter],
    clip_norm: float,
    groups: Tensor | None = None,
) -> tuple[dict[str, Tensor], Tensor]:
    """Sum of per-unit gradients clipped to ``clip_norm``, and the per-unit norms. A unit is a row, or with
    ``groups`` (one label per row) all rows sharing a label (their gradients summed before clipping)."""
    size = next(iter(batch.values())).shape[0]
    layout = Layout(size, groups)
    with _recording(model) as records:
        losses = check_losses(loss_fn(model, batch), size)
    outputs = [o for rec in records.values() for o in rec.outputs]
    grads_out = torch.autograd.grad(losses.sum(), outputs, allow_unused=True, materialize_grads=True)
    with full_precision(losses.device):  # under bf16 autocast: the norms, factors and sums in fp32
        return _clip_and_sum(records, grads_out, layout, losses, clip_norm)


def _clip_and_sum(records: dict[str, _Record], grads_out, layout: Layout, losses: Tensor,
                  clip_norm: float) -> tuple[dict[str, Tensor], Tensor]:
    grads_out = [to_float32(g) for g in grads_out]  # bf16 output gradients and layer inputs, as fp32
    for rec in records.values():
        rec.inputs = [to_float32(a) for a in rec.inputs]
    sq = torch.zeros(layout.size, dtype=to_float32(losses).dtype, device=losses.device)
    pending: list[tuple[str, Callable[[Tensor], dict[str, Tensor]]]] = []
    pos = 0
    for mname, rec in records.items():
        g = list(grads_out[pos : pos + len(rec.outputs)])
        pos += len(rec.outputs)
        layer_sq, clipped = _rule_for(rec.module).norms_and_grads(rec.module, rec, g, layout)
        sq = sq + layer_sq
        pending.append((mname, clipped))
    norms = sq.clamp(min=0).sqrt()
    factors = clip_factors(norms, clip_norm)
    summed: dict[str, Tensor] = {}
    for mname, clipped in pending:
        for pname, g in clipped(factors).items():
            summed[f"{mname}.{pname}" if mname else pname] = g
    return summed, norms

