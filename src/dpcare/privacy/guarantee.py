"""The statement a run makes: (epsilon, delta), the neighbouring relation and the unit protected."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any

from dpcare.privacy.validation import MAX_N_DELTA, is_weak_delta


class ProtectedUnit(str, Enum):
    EXAMPLE = "example"  # the whole record (DP-SGD)
    FEATURES = "features"  # the columns outside the public set Psi (feature-level DP)
    LABEL = "label"  # the label (Label-DP)
    PATIENT = "patient"  # every record of one patient (grouped examples: all windows, stays or notes)


NEIGHBOURING = {
    ProtectedUnit.EXAMPLE: "add/remove one example",
    ProtectedUnit.FEATURES: (
        "add/remove one example's private features (simulation-based feature-DP, Definition 6 of "
        "Mahloujifar et al.): the output is as likely as that of a simulator that knows every other example "
        "and only the public columns of this one; public columns of that example may be revealed"
    ),
    ProtectedUnit.LABEL: (
        "add/remove one example's label (simulation-based label-DP, Definition 6 of Mahloujifar et al. with "
        "Psi(x, y) = x): the simulator knows every other example and this one's features"
    ),
    ProtectedUnit.PATIENT: (
        "add/remove one patient with all of that patient's records (every window, stay or note); "
        "n counts patients"
    ),
}


@dataclass(frozen=True)
class Guarantee:
    """An (epsilon, delta)-DP statement about the releases of one run over ``n`` private examples."""

    epsilon: float
    delta: float
    unit: ProtectedUnit = ProtectedUnit.EXAMPLE
    protected_columns: tuple[str, ...] = ()  # FEATURES: private columns; LABEL: the label; EXAMPLE: () = all
    public_columns: tuple[str, ...] = ()
    neighbouring: str = NEIGHBOURING[ProtectedUnit.EXAMPLE]
    accountant: str = "pld"
    releases: tuple[str, ...] = ()
    n: int = 0
    uncounted: tuple[str, ...] = ()  # releases that read private data but are NOT inside epsilon
    declared: tuple[str, ...] = ()  # public knowledge the run was given, in words (e.g. a spec's bounds)

    def __post_init__(self) -> None:
        object.__setattr__(self, "unit", ProtectedUnit(self.unit))
        for k in ("protected_columns", "public_columns", "releases", "uncounted", "declared"):
            object.__setattr__(self, k, tuple(getattr(self, k)))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["unit"] = self.unit.value
        for k in ("protected_columns", "public_columns", "releases", "uncounted", "declared"):
            d[k] = list(d[k])
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Guarantee:
        return cls(**d)

    def plain_reading(self) -> str:
        """One sentence for a reader who is not a privacy specialist (a clinician): what the guarantee means for
        one person, with e^epsilon as the bound on the change of odds (Dwork and Roth 2014, Section 2.3)."""
        cols = ", ".join(self.protected_columns) or "not listed"
        whose = {ProtectedUnit.EXAMPLE: "one person's row",
                 ProtectedUnit.FEATURES: f"one person's private columns ({cols})",
                 ProtectedUnit.LABEL: f"one person's label ({cols})",
                 ProtectedUnit.PATIENT: "one patient's records"}[self.unit]
        chance = f"1 in {1 / self.delta:,.0f}" if self.delta > 0 else "no"
        return (f"In plain words: seeing what was released changes anyone's odds that {whose} were used by at "
                f"most a factor of {math.exp(self.epsilon):.3g} (e^epsilon), except with a {chance} chance; it "
                "does not hide what the rest of the data reveal about groups the person belongs to.")

    def describe(self) -> str:
        """A few plain-English lines: what is protected, at which (epsilon, delta), and what is not."""
        if not math.isfinite(self.epsilon):
            return "NO differential privacy guarantee: a non-private release was charged (epsilon = inf)."
        cols = ", ".join(self.protected_columns)
        public = ", ".join(self.public_columns) or "not listed"
        what, exposed = {
            ProtectedUnit.EXAMPLE: ("every column of each training example, and whether it is in the data", ""),
            ProtectedUnit.FEATURES: (
                f"the private columns ({cols or 'not listed'}) of each training example",
                f"the public columns ({public}) of each example, and hence whether it is in the data",
            ),
            ProtectedUnit.LABEL: (
                f"the label ({cols or 'not listed'}) of each training example",
                f"the features ({public}) of each example, and hence whether it is in the data",
            ),
            ProtectedUnit.PATIENT: (
                ("every record of each patient (all of the patient's windows, stays or notes together), "
                 "and whether the patient is in the data"),
                "",
            ),
        }[self.unit]
        nd = self.n * self.delta
        size = f"n = {self.n}, n*delta = {nd:.2g}" if self.n > 0 else "n not saved"
        head = (f"({self.epsilon:.4g}, {self.delta:.3g})-differential privacy ({self.accountant.upper()} "
                f"accountant, {size}) protecting {what}.")
        lines = [head, self.plain_reading(), f"Neighbouring datasets: {self.neighbouring}."]
        if self.n > 0 and is_weak_delta(self.delta, self.n):
            lines.append(f"WEAK delta: n*delta = {nd:.2g} > {MAX_N_DELTA:g}, so a mechanism that publishes each "
                         f"unit's record with probability delta meets this guarantee and would expose {nd:.2g} "
                         "units in expectation.")
        if exposed:
            lines.append(f"NOT protected: {exposed}.")
        public = "; ".join(("the number of units n", *self.declared))
        lines.append(f"Treated as public: {public}. Anything computed from the data outside the releases below is "
                     "not covered.")
        if self.releases:
            lines.append("Releases composed: " + "; ".join(self.releases) + ".")
        if self.uncounted:
            lines.append("NOT counted in epsilon (they read private data without noise): "
                         + "; ".join(self.uncounted) + ".")
        return "\n".join(lines)
