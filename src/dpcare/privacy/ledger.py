"""The ledger: every data-dependent private release of one run, composed into one guarantee."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from dp_accounting import dp_event

from dpcare.exceptions import DataError, PrivacyParameterError
from dpcare.io import write_json
from dpcare.privacy.accountants import (
    ACCOUNTANTS,
    RDP_ORDERS,
    compute_epsilon,
    epsilon_from_rdp,
    rdp_curve,
)
from dpcare.privacy.calibration import calibrate_noise_multiplier
from dpcare.privacy.events import event_from_json, event_to_json, sampled_gaussian_event
from dpcare.privacy.guarantee import NEIGHBOURING, Guarantee, ProtectedUnit
from dpcare.privacy.validation import (
    check_delta,
    check_noise_multiplier,
    check_sampling_rate,
    check_steps,
    default_delta,
    warn_if_weak_delta,
)

STATE_VERSION = 1


@dataclass(frozen=True)
class Entry:
    """One line of the ledger: a charged event (steps = 1) or accumulated training steps."""

    name: str
    description: str
    event: dp_event.DpEvent
    steps: int = 1


class _Steps:
    """Poisson-sampled Gaussian steps of one (name, q, sigma), accumulated in place."""

    __slots__ = ("name", "q", "sigma", "steps")

    def __init__(self, name: str, q: float, sigma: float, steps: int) -> None:
        self.name, self.q, self.sigma, self.steps = name, q, sigma, steps

    def entry(self) -> Entry:
        text = f"{self.name}: {self.steps} Poisson-sampled Gaussian steps (q = {self.q:.4g}, sigma = {self.sigma:.4g})"
        return Entry(self.name, text, sampled_gaussian_event(self.q, self.sigma, self.steps), self.steps)


class PrivacyLedger:
    """Composes all private releases of a run over ``n`` private examples.

    ``delta`` defaults to min(1e-5, 0.01/n) (:func:`~dpcare.privacy.validation.default_delta`) and must be
    < 1/n; a delta with n*delta > 0.01 is allowed with a :class:`~dpcare.privacy.validation.WeakDeltaWarning`
    (not when a saved ledger is loaded: it warned when it was built). Charges are kept in order;
    training steps with the same (name, q, sigma) form one self-composed entry. ``declared``: what the run
    was given as public knowledge (a spec's bounds and categories, declared statistics), in words, for
    the guarantee; nothing is claimed public that the run did not declare.
    """

    def __init__(self, n: int, delta: float | None = None, accountant: str = "pld",
                 unit: ProtectedUnit | str = ProtectedUnit.EXAMPLE, protected_columns: Iterable[str] = (),
                 public_columns: Iterable[str] = (), declared: Iterable[str] = (), *, _warn: bool = True) -> None:
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise PrivacyParameterError(f"the ledger needs the number of private examples n >= 1, got n = {n!r}")
        if accountant not in ACCOUNTANTS:
            raise PrivacyParameterError(f"accountant must be one of {ACCOUNTANTS}, got accountant = {accountant!r}")
        self.n = int(n)
        self.delta = check_delta(default_delta(self.n) if delta is None else delta, self.n)
        if _warn:
            warn_if_weak_delta(self.delta, self.n)
        self.accountant = accountant
        self.unit = ProtectedUnit(unit)
        self.protected_columns = tuple(protected_columns)
        self.public_columns = tuple(public_columns)
        self.declared = tuple(declared)  # public knowledge the run was given (e.g. a spec's bounds), in words
        self._items: list[Entry | _Steps] = []
        self.uncounted: list[str] = []  # releases listed in the guarantee but outside epsilon
        self._steps: dict[tuple[str, float, float], _Steps] = {}
        self._rdp: dict[Any, np.ndarray] = {}  # RDP curves: item index, or (q, sigma) of one step
        self._version = 0  # bumped by every charge; keys the epsilon cache
        self._eps_cache: dict[tuple, float] = {}

    # ------------------------------------------------------------- charging
    def charge(self, name: str, event: dp_event.DpEvent, description: str = "") -> None:
        """Record one private release (a DP statistic, a selection, ...)."""
        if not isinstance(event, dp_event.DpEvent):
            raise TypeError(f"charge() needs a dp_accounting DpEvent, got {type(event).__name__}")
        self._items.append(Entry(name, description or name, event))
        self._version += 1

    def note_uncounted(self, description: str) -> None:
        """List a release that reads private data WITHOUT being charged (e.g. choosing a threshold
        or an epoch on private validation data): the guarantee names it as outside epsilon."""
        if description not in self.uncounted:
            self.uncounted.append(description)

    def charge_sampled_gaussian(self, name: str, sampling_rate: float, noise_multiplier: float, steps: int = 1) -> None:
        """Record ``steps`` Poisson-sampled Gaussian steps; repeated calls accumulate in O(1)."""
        if type(steps) is not int or steps < 0:
            steps = check_steps(steps)
        key = (name, sampling_rate, noise_multiplier)
        block = self._steps.get(key)
        if block is None:
            block = _Steps(name, check_sampling_rate(sampling_rate), check_noise_multiplier(noise_multiplier), 0)
            self._steps[key] = block
            self._items.append(block)
        block.steps += steps
        self._version += 1

    # ------------------------------------------------------------- reading
    @property
    def entries(self) -> tuple[Entry, ...]:
        """Every release so far, in charge order (training blocks with their step counts)."""
        return tuple(x.entry() if isinstance(x, _Steps) else x for x in self._items)

    def event(self) -> dp_event.DpEvent:
        """All releases as one ComposedDpEvent."""
        return dp_event.ComposedDpEvent([e.event for e in self.entries])

    def epsilon(self, delta: float | None = None, accountant: str | None = None) -> float:
        """epsilon of everything charged, at the ledger's delta and accountant unless given."""
        key = (self._version, self.delta if delta is None else delta, accountant or self.accountant)
        if key not in self._eps_cache:
            self._eps_cache = {key: compute_epsilon(self.event(), key[1], key[2]) if self._items else 0.0}
        return self._eps_cache[key]

    def running_epsilon(self, delta: float | None = None) -> float:
        """A cheap epsilon for progress bars: RDP from cached per-step curves, O(#entries).

        A valid (epsilon, delta) bound, usually a little above :meth:`epsilon` (PLD).
        """
        total = np.zeros(len(RDP_ORDERS))
        try:
            for i, x in enumerate(self._items):
                if isinstance(x, _Steps):
                    key: Any = (x.q, x.sigma)
                    if key not in self._rdp:
                        self._rdp[key] = rdp_curve(sampled_gaussian_event(x.q, x.sigma, 1))
                    total += x.steps * self._rdp[key]
                else:
                    if i not in self._rdp:
                        self._rdp[i] = rdp_curve(x.event)
                    total += self._rdp[i]
        except ValueError:  # an event RDP does not support: fall back to the exact accountant
            return self.epsilon(delta)
        if not total.any():
            return 0.0
        return epsilon_from_rdp(total, self.delta if delta is None else delta)

    def guarantee(self) -> Guarantee:
        """The (epsilon, delta) statement of everything charged so far."""
        return Guarantee(
            epsilon=self.epsilon(), delta=self.delta, unit=self.unit, protected_columns=self.protected_columns,
            public_columns=self.public_columns, neighbouring=NEIGHBOURING[self.unit], accountant=self.accountant,
            releases=tuple(e.description for e in self.entries), n=self.n, uncounted=tuple(self.uncounted),
            declared=self.declared,
        )

    def calibrate_training_noise(self, sampling_rate: float, steps: int, target_epsilon: float,
                                 planned: Iterable[dp_event.DpEvent] = ()) -> float:
        """Sigma for ``steps`` training steps such that everything charged so far plus training meets
        ``target_epsilon`` at the ledger's delta (earlier DP statistics shrink the training budget).
        ``planned``: releases the run will also charge whatever sigma is (e.g. adaptive clipping's counts)."""
        return calibrate_noise_multiplier(sampling_rate, steps, target_epsilon, self.delta, self.accountant,
                                          other_events=[*(e.event for e in self.entries), *planned])

    # ------------------------------------------------------------- persistence
    def state_dict(self) -> dict[str, Any]:
        """A JSON-serialisable state; :meth:`from_state_dict` rebuilds an identical ledger."""
        items = []
        for x in self._items:
            if isinstance(x, _Steps):
                items.append({"kind": "sampled_gaussian", "name": x.name, "sampling_rate": x.q,
                              "noise_multiplier": x.sigma, "steps": x.steps})
            else:
                items.append({"kind": "event", "name": x.name, "description": x.description,
                              "event": event_to_json(x.event)})
        return {"version": STATE_VERSION, "n": self.n, "delta": self.delta, "accountant": self.accountant,
                "unit": self.unit.value, "protected_columns": list(self.protected_columns),
                "public_columns": list(self.public_columns), "declared": list(self.declared), "entries": items,
                "uncounted": list(self.uncounted)}

    @classmethod
    def from_state_dict(cls, d: dict[str, Any]) -> PrivacyLedger:
        ledger = cls(d["n"], d["delta"], d["accountant"], ProtectedUnit(d["unit"]), d["protected_columns"],
                     d["public_columns"], d.get("declared", ()), _warn=False)
        if "entries" not in d:  # the layout before version 1: events first, then step blocks
            d = {"entries": [{"kind": "event", **e} for e in d.get("events", [])]
                 + [{"kind": "sampled_gaussian", "name": k[0], "sampling_rate": k[1], "noise_multiplier": k[2],
                     "steps": k[3]} for k in d.get("steps", [])]}
        for e in d["entries"]:
            if e["kind"] == "event":
                ledger.charge(e["name"], event_from_json(e["event"]), e["description"])
            elif e["kind"] == "sampled_gaussian":
                ledger.charge_sampled_gaussian(e["name"], e["sampling_rate"], e["noise_multiplier"], e["steps"])
            else:
                raise DataError(f"unknown ledger entry kind {e['kind']!r}")
        ledger.uncounted = list(d.get("uncounted", []))
        return ledger

    def save_json(self, path: str | os.PathLike) -> None:
        """Write the guarantee and the ledger state to ``path`` atomically (temporary file + os.replace)."""
        write_json(path, {"guarantee": self.guarantee().to_dict(), "ledger": self.state_dict()})
