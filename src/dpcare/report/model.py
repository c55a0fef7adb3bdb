"""What a report shows of one run folder, whatever wrote it: guarantees with their ledger lines, utility,
attacks, configuration and timing, as plain data."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpcare.privacy import Guarantee

#: the text ``PrivacyLedger`` gives a block of training steps (``_Steps.entry``)
STEPS_TEXT = re.compile(r"^(?P<name>.*): (?P<count>\d+) Poisson-sampled Gaussian steps "
                        r"\(q = (?P<q>[^,]+), sigma = (?P<sigma>[^)]+)\)$")


@dataclass
class LedgerLine:
    """One charged release: its text, and its mechanism, sampling rate, noise multiplier and count where known."""

    release: str
    mechanism: str | None = None
    sampling_rate: float | None = None
    noise_multiplier: float | None = None
    count: int | None = None


@dataclass
class Privacy:
    """The privacy statement of one released model; ``epsilon`` None means no formal guarantee."""

    label: str
    epsilon: float | None = None
    delta: float | None = None
    guarantee: dict[str, Any] | None = None  # Guarantee.to_dict(), where the run saved it whole
    ledger: list[LedgerLine] = field(default_factory=list)
    ledger_note: str = ""  # where the ledger lines come from, or why there are none
    note: str = ""  # what is protected where no whole guarantee was saved, or why there is none

    @property
    def private(self) -> bool:
        return self.epsilon is not None

    def plain_words(self) -> list[str]:
        """The guarantee's own ``describe()`` lines, or what the folder does say."""
        if self.guarantee is not None:
            return Guarantee.from_dict(self.guarantee).describe().splitlines()
        if self.epsilon is None:
            return [self.note or "NO differential privacy guarantee."]
        delta = "delta not saved" if self.delta is None else f"{self.delta:.3g}"
        return [f"({self.epsilon:.4g}, {delta})-differential privacy protecting {self.note or 'what is not saved'}.",
                "The folder saves no full guarantee: not the neighbouring relation, accountant or n."]

    @property
    def protects(self) -> str:
        if self.guarantee is None:
            return self.note if self.epsilon is not None else "nothing"
        unit, cols = self.guarantee["unit"], ", ".join(self.guarantee.get("protected_columns", []))
        if unit in ("example", "patient"):
            return f"whole {unit}"
        return f"{unit}: {cols or 'not listed'}"


@dataclass
class Attack:
    """One attack (or audit) against the run's models: a row of results per model, and ROC data.

    ``curves``: {model: (member scores, non-member scores)}, higher = more likely a member;
    ``saved_plots``: ROC plots the run wrote itself (used where no scores were saved)."""

    name: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    curves: dict[str, tuple[list[float], list[float]]] = field(default_factory=dict)
    saved_plots: list[Path] = field(default_factory=list)


@dataclass
class Run:
    """One run or benchmark folder. Rows of ``utility``, ``timing`` and ``attacks`` name their model in
    ``model``, the same label as its :class:`Privacy`."""

    path: Path
    kind: str  # the command that wrote it
    privacy: list[Privacy] = field(default_factory=list)
    utility: list[dict[str, Any]] = field(default_factory=list)
    headline: list[str] = field(default_factory=list)  # utility columns of the comparison table
    attacks: list[Attack] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    timing: list[dict[str, Any]] = field(default_factory=list)
    not_protected: list[str] = field(default_factory=list)  # what the writer leaves outside every guarantee
    figures: list[tuple[str, Path]] = field(default_factory=list)  # other plots the run saved
    notes: list[str] = field(default_factory=list)
    verdicts: list[dict[str, Any]] = field(default_factory=list)  # plain verdicts against the public baselines
    units: dict[str, str] = field(default_factory=dict)  # metric column -> its unit and scale
    phases: list[dict[str, Any]] = field(default_factory=list)  # seconds of each phase of the run
    warnings: list[str] = field(default_factory=list)  # every warning the command printed
    resolved: dict[str, Any] = field(default_factory=dict)  # figures the run computed (steps, noise multiplier...)

    @property
    def name(self) -> str:
        return self.path.resolve().name


def privacy_from_guarantee(label: str, g: dict[str, Any] | None, ledger_state: dict[str, Any] | None = None,
                           none_note: str = "NO differential privacy guarantee.") -> Privacy:
    """A :class:`Privacy` from a saved ``Guarantee.to_dict()`` (None or epsilon None: no guarantee).

    Ledger lines come from the ledger state (``PrivacyLedger.state_dict()``) where saved, else from the
    guarantee's release lines, whose text states mechanism, q, sigma and count for training steps."""
    if not g or g.get("epsilon") is None:
        return Privacy(label, note=none_note)
    g = {**g, "epsilon": float(g["epsilon"])}
    releases = list(g.get("releases", []))
    entries = (ledger_state or {}).get("entries")
    if entries is not None and len(entries) == len(releases):
        lines = [_from_state(text, e) for text, e in zip(releases, entries)]
        note = "from the saved ledger state"
    else:
        lines = [_from_text(text) for text in releases]
        note = ("from the guarantee's release lines (the folder saves no ledger state): mechanism, q, sigma and "
                "count are read from each line's text where it states them")
    if not releases:
        note = "the guarantee lists no release"
    return Privacy(label, g["epsilon"], g.get("delta"), g, lines, note)


def _from_text(text: str) -> LedgerLine:
    m = STEPS_TEXT.match(text)
    if not m:
        return LedgerLine(text)
    return LedgerLine(text, "Poisson-sampled Gaussian", float(m["q"]), float(m["sigma"]), int(m["count"]))


def _from_state(text: str, entry: dict[str, Any]) -> LedgerLine:
    if entry.get("kind") == "sampled_gaussian":
        return LedgerLine(text, "Poisson-sampled Gaussian", entry["sampling_rate"], entry["noise_multiplier"],
                          entry["steps"])
    return LedgerLine(text, *_event_fields(entry.get("event") or {}))


def _event_fields(ev: dict[str, Any]) -> tuple[str, float | None, float | None, int]:
    """(mechanism, sampling rate, noise multiplier, count) of an event in ``event_to_json`` form."""
    count, q = 1, None
    while ev.get("class_name") in ("SelfComposedDpEvent", "PoissonSampledDpEvent"):
        if ev["class_name"] == "SelfComposedDpEvent":
            count *= int(ev["count"])
        else:
            q = float(ev["sampling_probability"])
        ev = ev["event"]
    name = str(ev.get("class_name", "unknown")).removesuffix("DpEvent")
    if name == "ZC":  # dp-accounting's ZCDpEvent: a whole mechanism stated by its zCDP parameter
        name = f"rho-zCDP mechanism (rho = {float(ev['rho']):.4g})"
    return (f"Poisson-sampled {name}" if q is not None else name), q, ev.get("noise_multiplier"), count


def finite(x: Any) -> float | None:
    """``x`` as a float, or None where it is missing, NaN or infinite (no guarantee)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None
