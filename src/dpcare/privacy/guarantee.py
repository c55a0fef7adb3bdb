"""The statement a run makes: epsilon, delta, neighbouring relation and the unit protected."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any


class ProtectedUnit(str, Enum):
    EXAMPLE = "example"  # the whole record (DP-SGD)
    FEATURES = "features"  # the columns outside the public set Psi (feature-level DP)
    LABEL = "label"  # the label (Label-DP)


NEIGHBOURING = {
    ProtectedUnit.EXAMPLE: "add/remove one example",
    ProtectedUnit.FEATURES: (
        "add/remove one example's private features (simulation-based feature-DP, Definition 6 of "
        "feature-dp.txt): the output is as likely as if a simulator had that example's public columns only"
    ),
    ProtectedUnit.LABEL: "add/remove one example's label (the simulator knows the example's features)",
}


@dataclass(frozen=True)
class Guarantee:
    epsilon: float
    delta: float
    unit: ProtectedUnit
    protected_columns: tuple[str, ...] = ()
    public_columns: tuple[str, ...] = ()
    neighbouring: str = ""
    accountant: str = "pld"
    releases: tuple[str, ...] = ()
    n: int = 0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["unit"] = self.unit.value
        d["protected_columns"], d["public_columns"] = list(self.protected_columns), list(self.public_columns)
        d["releases"] = list(self.releases)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Guarantee:
        d = dict(d)
        d["unit"] = ProtectedUnit(d["unit"])
        for k in ("protected_columns", "public_columns", "releases"):
            d[k] = tuple(d.get(k, ()))
        return cls(**d)

    def describe(self) -> str:
        """A few honest lines: what is protected, at which (epsilon, delta), and what is not."""
        what = {
            ProtectedUnit.EXAMPLE: "every column of every training example (the whole record)",
            ProtectedUnit.FEATURES: "the private columns " + ", ".join(self.protected_columns),
            ProtectedUnit.LABEL: "the label " + ", ".join(self.protected_columns),
        }[self.unit]
        eps = "inf" if math.isinf(self.epsilon) else f"{self.epsilon:.4g}"
        lines = [f"({eps}, {self.delta:.3g})-DP ({self.accountant.upper()} accountant, n = {self.n}) protecting {what}.",
                 f"Neighbouring datasets: {self.neighbouring}."]
        if self.unit is not ProtectedUnit.EXAMPLE and self.public_columns:
            lines.append("NOT protected (declared public, may be revealed): " + ", ".join(self.public_columns) + ".")
        if self.releases:
            lines.append("Composed releases: " + "; ".join(self.releases) + ".")
        return "\n".join(lines)
