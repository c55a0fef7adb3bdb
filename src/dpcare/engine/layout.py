"""Privacy units of a batch: each row its own unit, or rows grouped by a unit label (a patient's
windows or notes). Both clipping backends clip the gradient of a unit, summed over its rows."""

from __future__ import annotations

import torch
from torch import Tensor

from dpcare.engine.sampling import UnitIndex
from dpcare.exceptions import SettingsError


def stack_calls(tensors: list[Tensor], batch: int, trailing: int) -> Tensor:
    """Reshape each call's tensor to [B, S_c, *trailing dims] and concatenate along S."""
    parts = []
    for t in tensors:
        if t.shape[0] != batch:
            raise SettingsError(
                f"a layer saw a leading dimension of {t.shape[0]}, not the batch size {batch}: "
                "call the model once per view with the examples on dimension 0 (do not concatenate "
                "views along the batch dimension)"
            )
        tail = t.shape[t.dim() - trailing :] if trailing else ()
        parts.append(t.reshape(batch, -1, *tail))
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)


class Layout:
    """How the rows of a batch map to privacy units: one unit per row, or rows grouped by a unit label
    (all windows of one patient). ``stack`` gives one sequence per unit: [units, S, *trailing dims],
    a grouped unit's rows padded with zeros and laid end to end (zeros add nothing to a gradient)."""

    def __init__(self, rows: int, groups: Tensor | None = None):
        self.rows, self.size, self._index = rows, rows, None
        if groups is None:
            return
        if groups.shape != (rows,):
            raise RuntimeError(f"groups must hold one unit label per row, shape ({rows},), got {tuple(groups.shape)}")
        units = UnitIndex(groups)
        pos = torch.empty_like(units.labels)  # each row's place among its unit's rows
        pos[units.order] = torch.arange(rows) - units.starts[units.labels[units.order]]
        self.size, self._index = units.n, (units.labels, pos, int(units.counts.max()))

    def group(self, t: Tensor) -> Tensor:
        """[rows, S, *tail] -> [units, M*S, *tail] (M = most rows of one unit)."""
        if self._index is None:
            return t
        inverse, pos, m = self._index
        out = t.new_zeros(self.size, m, *t.shape[1:])
        out[inverse, pos] = t
        return out.reshape(self.size, m * t.shape[1], *t.shape[2:])

    def stack(self, tensors: list[Tensor], trailing: int) -> Tensor:
        return self.group(stack_calls(tensors, self.rows, trailing))

    def units_of(self, per_row: Tensor) -> Tensor:
        """Sum a per-row tensor [rows, ...] over the rows of each unit: [units, ...]."""
        if self._index is None:
            return per_row
        return per_row.new_zeros(self.size, *per_row.shape[1:]).index_add_(0, self._index[0], per_row)
