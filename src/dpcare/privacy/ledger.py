"""The ledger: every data-dependent private release of one run, composed into one guarantee."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dp_accounting import dp_event

from dpcare.io import write_json
from dpcare.privacy.accountants import ACCOUNTANTS, compute_epsilon
from dpcare.privacy.calibration import calibrate_noise_multiplier
from dpcare.privacy.events import sampled_gaussian_event
from dpcare.privacy.guarantee import NEIGHBOURING, Guarantee, ProtectedUnit
from dpcare.privacy.validation import (
    check_delta,
    check_noise_multiplier,
    check_sampling_rate,
    default_delta,
)


@dataclass(frozen=True)
class Entry:
    """One release: either a dp-accounting event, or ``steps`` sampled-Gaussian steps."""

    name: str
    description: str
    event: dp_event.DpEvent


class PrivacyLedger:
    """Composes all private releases of a run over ``n`` private examples."""

    def __init__(self, n: int, delta: float | None = None, accountant: str = "pld",
                 unit: ProtectedUnit = ProtectedUnit.EXAMPLE, protected_columns=(), public_columns=()):
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"the ledger needs the number of private examples n >= 1, got {n!r}")
        if accountant not in ACCOUNTANTS:
            raise ValueError(f"accountant must be one of {ACCOUNTANTS}, got {accountant!r}")
        self.n = n
        self.delta = check_delta(default_delta(n) if delta is None else delta, n)
        self.accountant = accountant
        self.unit = ProtectedUnit(unit)
        self.protected_columns = tuple(protected_columns)
        self.public_columns = tuple(public_columns)
        self._events: list[Entry] = []
        self._steps: dict[tuple[str, float, float], int] = {}  # (name, q, sigma) -> steps

    # ------------------------------------------------------------- charging
    def charge(self, name: str, event: dp_event.DpEvent, description: str = "") -> None:
        """Record a private release (a DP statistic, a tuning run...)."""
        if not isinstance(event, dp_event.DpEvent):
            raise TypeError(f"charge() needs a dp_accounting DpEvent, got {type(event).__name__}")
        self._events.append(Entry(name, description or name, event))

    def charge_sampled_gaussian(self, name: str, sampling_rate: float, noise_multiplier: float, steps: int = 1) -> None:
        """Record ``steps`` Poisson-sampled Gaussian steps; repeated calls accumulate (O(1))."""
        key = (name, float(sampling_rate), float(noise_multiplier))
        if key not in self._steps:
            check_sampling_rate(sampling_rate)
            check_noise_multiplier(noise_multiplier)
        self._steps[key] = self._steps.get(key, 0) + steps

    # ------------------------------------------------------------- reading
    @property
    def entries(self) -> list[Entry]:
        steps = [Entry(name, f"{name}: {k} steps, q = {q:.4g}, sigma = {s:.4g}", sampled_gaussian_event(q, s, k))
                 for (name, q, s), k in self._steps.items()]
        return [*self._events, *steps]

    def event(self) -> dp_event.DpEvent:
        return dp_event.ComposedDpEvent([e.event for e in self.entries])

    def epsilon(self, delta: float | None = None, accountant: str | None = None) -> float:
        if not self._events and not self._steps:
            return 0.0
        return compute_epsilon(self.event(), self.delta if delta is None else delta, accountant or self.accountant)

    def guarantee(self) -> Guarantee:
        return Guarantee(
            epsilon=self.epsilon(), delta=self.delta, unit=self.unit, protected_columns=self.protected_columns,
            public_columns=self.public_columns, neighbouring=NEIGHBOURING[self.unit], accountant=self.accountant,
            releases=tuple(e.description for e in self.entries), n=self.n,
        )

    def calibrate_training_noise(self, sampling_rate: float, steps: int, target_epsilon: float) -> float:
        """Sigma for the training steps so that everything charged so far plus training meets the target."""
        return calibrate_noise_multiplier(sampling_rate, steps, target_epsilon, self.delta, self.accountant,
                                          other_events=[e.event for e in self.entries])

    # ------------------------------------------------------------- persistence
    def state_dict(self) -> dict[str, Any]:
        return {
            "n": self.n, "delta": self.delta, "accountant": self.accountant, "unit": self.unit.value,
            "protected_columns": list(self.protected_columns), "public_columns": list(self.public_columns),
            "events": [{"name": e.name, "description": e.description, "event": event_to_json(e.event)}
                       for e in self._events],
            "steps": [[name, q, s, k] for (name, q, s), k in self._steps.items()],
        }

    @classmethod
    def from_state_dict(cls, d: dict[str, Any]) -> PrivacyLedger:
        ledger = cls(d["n"], d["delta"], d["accountant"], ProtectedUnit(d["unit"]), d["protected_columns"],
                     d["public_columns"])
        for e in d["events"]:
            ledger._events.append(Entry(e["name"], e["description"], event_from_json(e["event"])))
        for name, q, s, k in d["steps"]:
            ledger._steps[(name, q, s)] = k
        return ledger

    def save_json(self, path) -> None:
        write_json(path, {"guarantee": self.guarantee().to_dict(), "ledger": self.state_dict()})


def event_to_json(event: dp_event.DpEvent) -> Any:
    """A JSON-serialisable form of an event: nested dicts with ``class_name``."""

    def convert(v: Any) -> Any:
        if hasattr(v, "_asdict") and "class_name" in v._fields:
            return {k: convert(x) for k, x in v._asdict().items() if k != "module_name"}
        if isinstance(v, (list, tuple)):
            return [convert(x) for x in v]
        return v

    return convert(event.to_named_tuple())


def event_from_json(obj: Any) -> dp_event.DpEvent:
    """Inverse of :func:`event_to_json` (only dp_accounting's own event classes)."""

    def build(v: Any) -> Any:
        if isinstance(v, dict) and "class_name" in v:
            cls = getattr(dp_event, v["class_name"])
            return cls(**{k: build(x) for k, x in v.items() if k != "class_name"})
        if isinstance(v, list):
            return [build(x) for x in v]
        return v

    return build(obj)
