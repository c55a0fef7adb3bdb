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

Supported trainable layers: ``nn.Linear``, ``nn.LayerNorm``, ``nn.Embedding``, RMS norms (torch's and
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
from dpcare.engine.functorch_backend import LossFn


@dataclass
class _Record:
    module: nn.Module
    inputs: list[Tensor] = field(default_factory=list)
    outputs: list[Tensor] = field(default_factory=list)


def _stack_calls(tensors: list[Tensor], batch: int, trailing: int) -> Tensor:
    """Reshape each call's tensor to [B, S_c, *trailing dims] and concatenate along S."""
    parts = []
    for t in tensors:
        if t.shape[0] != batch:
            raise ValueError(
                f"a layer saw a leading dimension of {t.shape[0]}, not the batch size {batch}: "
                "call the model once per view with the examples on dimension 0 (do not concatenate "
                "views along the batch dimension)"
            )
        tail = t.shape[t.dim() - trailing :] if trailing else ()
        parts.append(t.reshape(batch, -1, *tail))
    return torch.cat(parts, dim=1)


def _trainable(module: nn.Module) -> dict[str, nn.Parameter]:
    return {n: p for n, p in module.named_parameters(recurse=False) if p.requires_grad}


class _LinearRule:
    @staticmethod
    def norms_and_grads(mod: nn.Linear, rec: _Record, grads_out: list[Tensor], batch: int):
        a = _stack_calls(rec.inputs, batch, 1)
        d = _stack_calls(grads_out, batch, 1)
        params = _trainable(mod)
        sq = torch.zeros(batch, dtype=d.dtype, device=d.device)
        if "weight" in params:
            s, d_in, d_out = a.shape[1], a.shape[2], d.shape[2]
            if s == 1:
                sq = sq + a.pow(2).sum((1, 2)) * d.pow(2).sum((1, 2))
            elif s * s <= d_in * d_out:
                sq = sq + (torch.bmm(a, a.transpose(1, 2)) * torch.bmm(d, d.transpose(1, 2))).sum((1, 2))
            else:
                sq = sq + torch.bmm(d.transpose(1, 2), a).pow(2).sum((1, 2))
        if "bias" in params:
            sq = sq + d.sum(1).pow(2).sum(1)

        def clipped(c: Tensor) -> dict[str, Tensor]:
            dc = d * c[:, None, None]
            out = {}
            if "weight" in params:
                out["weight"] = dc.reshape(-1, dc.shape[-1]).T @ a.reshape(-1, a.shape[-1])
            if "bias" in params:
                out["bias"] = dc.sum((0, 1))
            return out

        return sq, clipped


class _LayerNormRule:
    @staticmethod
    def norms_and_grads(mod: nn.LayerNorm, rec: _Record, grads_out: list[Tensor], batch: int):
        k = len(mod.normalized_shape)
        x = _stack_calls(rec.inputs, batch, k)
        d = _stack_calls(grads_out, batch, k)
        xhat = F.layer_norm(x, mod.normalized_shape, None, None, mod.eps)
        params = _trainable(mod)
        per_example = {}
        if "weight" in params:
            per_example["weight"] = (d * xhat).sum(1)
        if "bias" in params:
            per_example["bias"] = d.sum(1)
        sq = sum(g.reshape(batch, -1).pow(2).sum(1) for g in per_example.values())

        def clipped(c: Tensor) -> dict[str, Tensor]:
            return {n: torch.einsum("b,b...->...", c, g) for n, g in per_example.items()}

        return sq, clipped


class _EmbeddingRule:
    @staticmethod
    def norms_and_grads(mod: nn.Embedding, rec: _Record, grads_out: list[Tensor], batch: int):
        idx = _stack_calls(rec.inputs, batch, 0)
        d = _stack_calls(grads_out, batch, 1)
        if mod.padding_idx is not None:
            d = d * (idx != mod.padding_idx).unsqueeze(-1).to(d.dtype)
        same = (idx[:, :, None] == idx[:, None, :]).to(d.dtype)
        sq = (same * torch.bmm(d, d.transpose(1, 2))).sum((1, 2))

        def clipped(c: Tensor) -> dict[str, Tensor]:
            dc = (d * c[:, None, None]).reshape(-1, d.shape[-1])
            w = torch.zeros_like(mod.weight)
            return {"weight": w.index_add_(0, idx.reshape(-1), dc)}

        return sq, clipped


class _Conv1DRule:
    """Hugging Face's ``Conv1D`` (GPT-2): a linear layer storing its weight as [in, out]."""

    @staticmethod
    def norms_and_grads(mod: nn.Module, rec: _Record, grads_out: list[Tensor], batch: int):
        sq, linear_clipped = _LinearRule.norms_and_grads(mod, rec, grads_out, batch)

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
    def norms_and_grads(mod: nn.Module, rec: _Record, grads_out: list[Tensor], batch: int):
        x = _stack_calls(rec.inputs, batch, 1)
        dtype = torch.promote_types(x.dtype, torch.float32)  # normalise in at least float32, as the layers do
        x, d = x.to(dtype), _stack_calls(grads_out, batch, 1).to(dtype)
        eps = getattr(mod, "variance_epsilon", None) or getattr(mod, "eps", None) or torch.finfo(x.dtype).eps
        xhat = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        per_example = (d * xhat).sum(1)
        sq = per_example.pow(2).sum(1)

        def clipped(c: Tensor) -> dict[str, Tensor]:
            return {"weight": torch.einsum("b,bd->d", c.to(dtype), per_example).to(mod.weight.dtype)}

        return sq, clipped


_RULES: dict[type, type] = {nn.Linear: _LinearRule, nn.LayerNorm: _LayerNormRule, nn.Embedding: _EmbeddingRule,
                            nn.RMSNorm: _RMSNormRule}


def _rule_for(mod: nn.Module) -> type | None:
    """The rule of a layer type; Hugging Face's Conv1D and *RMSNorm classes are matched by name (no import)."""
    rule = _RULES.get(type(mod))
    if rule is None and type(mod).__name__ == "Conv1D" and hasattr(mod, "nf"):
        rule = _Conv1DRule
    if rule is None and type(mod).__name__.endswith("RMSNorm") and set(_trainable(mod)) <= {"weight"}:
        rule = _RMSNormRule
    return rule


def register_rule(module_type: type, rule: type) -> None:
    """Register a rule class with ``norms_and_grads(module, record, grads_out, batch)``."""
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
) -> tuple[dict[str, Tensor], Tensor]:
    """Sum of per-example gradients clipped to ``clip_norm``, and the per-example norms."""
    size = next(iter(batch.values())).shape[0]
    with _recording(model) as records:
        losses = check_losses(loss_fn(model, batch), size)
    outputs = [o for rec in records.values() for o in rec.outputs]
    grads_out = torch.autograd.grad(losses.sum(), outputs, allow_unused=True, materialize_grads=True)
    sq = torch.zeros(size, dtype=losses.dtype, device=losses.device)
    pending: list[tuple[str, Callable[[Tensor], dict[str, Tensor]]]] = []
    pos = 0
    for mname, rec in records.items():
        g = list(grads_out[pos : pos + len(rec.outputs)])
        pos += len(rec.outputs)
        layer_sq, clipped = _rule_for(rec.module).norms_and_grads(rec.module, rec, g, size)
        sq = sq + layer_sq
        pending.append((mname, clipped))
    norms = sq.clamp(min=0).sqrt()
    factors = clip_factors(norms, clip_norm)
    summed: dict[str, Tensor] = {}
    for mname, clipped in pending:
        for pname, g in clipped(factors).items():
            summed[f"{mname}.{pname}" if mname else pname] = g
    return summed, norms

