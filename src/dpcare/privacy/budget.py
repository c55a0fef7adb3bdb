"""A privacy budget across runs: one JSON file per data set, every release composed.

The file declares a total (epsilon, delta), the data set (name, optional
fingerprint), the unit it counts and the accountant, and lists every release:
run id, command, time, status, the release's own (epsilon, delta) and, when the
run had a ledger, the ledger's state dict, so the releases are recomposed exactly.

Composition (:func:`compose`): the events of every counted release go through one
accountant (PLD by default) at delta_total - (deltas of the releases without
events); releases without events (a bare :class:`Guarantee`), or with events the
accountant does not support, are added by basic composition (sum of epsilons and
deltas). :class:`Spent` says which was used. Cancelled releases do not count.

Units: a release is admitted only if its guarantee implies one for the budget's
unit. Same unit, or an EXAMPLE release in a FEATURES / LABEL budget (a simulator
may run the mechanism without the example). FEATURES and LABEL releases must
protect every column the budget protects (the first such release fixes them if
``init`` named none). Everything else is refused: in particular a PATIENT
release in an EXAMPLE budget, since under add/remove neighbouring dropping one
record of a patient moves the clipped patient gradient by up to 2C, not C.

Concurrency: every change re-reads the file under an exclusive ``flock`` on a
sidecar ``FILE.lock`` and rewrites it atomically (temporary file, fsync,
os.replace), so concurrent runs never lose a record and a crash mid-write leaves
the previous file. :meth:`Budget.reserve` checks and records a planned release
in one locked step, so two runs cannot both pass the check and together exceed
the total. A reservation counts until it is committed or cancelled: a run that
failed after reserving still counts (it may have touched data); cancel it only
if it provably read nothing.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, TypeVar

from dp_accounting import dp_event

from dpcare.exceptions import (
    BudgetExceededError,
    DataError,
    DPCareError,
    MissingFileError,
    PrivacyParameterError,
    SpecError,
    UnknownNameError,
)
from dpcare.io import atomic_write, check_writable_file
from dpcare.privacy.accountants import ACCOUNTANTS, compute_epsilon, make_accountant
from dpcare.privacy.guarantee import Guarantee, ProtectedUnit
from dpcare.privacy.ledger import PrivacyLedger
from dpcare.privacy.validation import check_delta, check_epsilon
from dpcare.runtime import process_rank

FORMAT = 1
COUNTED = ("reserved", "done")  # "cancelled" releases are kept for the record but not composed
COLUMN_UNITS = (ProtectedUnit.FEATURES, ProtectedUnit.LABEL)
#: runs a budget's delta is spread over by default (``budget init --runs``): a run under a budget without its own
#: delta takes delta / runs, so that the check of a planned run (its (epsilon, delta) added by basic composition
#: to the releases composed at the rest of the delta) leaves delta for the releases before it
DEFAULT_RUNS = 10
Planned = PrivacyLedger | Guarantee | None  # None: a non-private run (epsilon = inf)
T = TypeVar("T")


@dataclass(frozen=True)
class Release:
    """One run's release on the data set; ``ledger`` (a PrivacyLedger state dict) recomposes it exactly."""

    run_id: str
    command: str
    time: str
    status: str
    epsilon: float
    delta: float
    unit: ProtectedUnit
    protected_columns: tuple[str, ...] = ()
    ledger: dict[str, Any] | None = None

    def event(self) -> dp_event.DpEvent | None:
        return None if self.ledger is None else PrivacyLedger.from_state_dict(self.ledger).event()

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "unit": self.unit.value, "protected_columns": list(self.protected_columns)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Release:
        r = cls(**{**d, "unit": ProtectedUnit(d["unit"]), "protected_columns": tuple(d["protected_columns"])})
        if r.status not in (*COUNTED, "cancelled") or not (r.epsilon >= 0 and 0 <= r.delta < 1):
            raise DataError(f"release {r.run_id!r}: bad status, epsilon or delta")
        r.event()  # a malformed ledger fails here, when the file is read
        return r


@dataclass(frozen=True)
class Spent:
    """Composed (epsilon, delta) of ``releases`` counted releases; ``method``: how they were composed."""

    epsilon: float
    delta: float
    method: str  # "pld" / "rdp" (the accountant), "basic" (sum), "pld + basic", or "none"
    releases: int
    basic_delta: float = 0.0  # the delta of the releases added by basic composition: not left for the events


def compose(releases: Sequence[Release], delta: float, accountant: str = "pld") -> Spent:
    """Compose the counted releases at ``delta``: events through the accountant, the rest by basic composition."""
    counted = [r for r in releases if r.status in COUNTED]
    acc = make_accountant(accountant)
    events, basic = [], []
    for r in counted:
        event = r.event()
        if event is not None and acc.supports(event):
            events.append(event)
        else:
            basic.append(r)
    eps_b, delta_b = math.fsum(r.epsilon for r in basic), math.fsum(r.delta for r in basic)
    if not events:
        return Spent(eps_b, delta_b, "basic" if basic else "none", len(counted), delta_b)
    rest = delta - delta_b
    eps_a = compute_epsilon(dp_event.ComposedDpEvent(events), rest, accountant) if rest > 0 else math.inf
    return Spent(eps_a + eps_b, delta, accountant + (" + basic" if basic else ""), len(counted), delta_b)


def data_fingerprint(path: str | os.PathLike) -> str:
    """``sha256:...`` of a file, or of a folder's files (relative names and contents, in sorted order;
    keep the budget file outside a fingerprinted folder)."""
    path = Path(path)
    if not path.exists():
        raise MissingFileError(f"no data at {path}")
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    h = hashlib.sha256()
    for f in files:
        h.update(str(f.relative_to(path) if path.is_dir() else "").encode() + b"\0")
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return "sha256:" + h.hexdigest()


def planned_training(n: int, sampling_rate: float, steps: int, noise_multiplier: float | None = None,
                     target_epsilon: float | None = None, **ledger_kwargs: Any) -> PrivacyLedger:
    """A planned ledger of ``steps`` Poisson-sampled Gaussian steps built from a run's settings, no data:
    sigma as given or calibrated to ``target_epsilon``. ``ledger_kwargs`` go to :class:`PrivacyLedger`."""
    ledger = PrivacyLedger(n, **ledger_kwargs)
    if noise_multiplier is None:
        if target_epsilon is None:
            raise PrivacyParameterError("a planned training run needs noise_multiplier or target_epsilon")
        noise_multiplier = ledger.calibrate_training_noise(sampling_rate, steps, target_epsilon)
    ledger.charge_sampled_gaussian("training", sampling_rate, noise_multiplier, steps)
    return ledger


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _dump(obj: Any, f: IO) -> None:
    json.dump(obj, f, indent=2)
    f.flush()
    os.fsync(f.fileno())


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on the sidecar ``path.lock`` (the budget file itself is replaced, not locked)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@dataclass
class Budget:
    """A data set's privacy budget file: the declared total and every release (see the module docstring).

    Reading methods use this snapshot; changing methods re-read the file under the lock, write it,
    and refresh the snapshot.
    """

    path: Path
    dataset: str
    epsilon: float
    delta: float
    unit: ProtectedUnit = ProtectedUnit.EXAMPLE
    protected_columns: tuple[str, ...] = ()
    accountant: str = "pld"
    fingerprint: str | None = None
    created: str = ""
    releases: list[Release] = field(default_factory=list)
    runs: int = DEFAULT_RUNS  # the runs it plans: a run's default delta is delta / runs (run_delta)

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        if isinstance(self.runs, bool) or not isinstance(self.runs, int) or self.runs < 1:
            raise PrivacyParameterError(f"runs (the runs a budget plans) must be a whole number >= 1, got {self.runs!r}")
        self.epsilon, self.delta = check_epsilon(self.epsilon), check_delta(self.delta)
        if not isinstance(self.dataset, str) or not self.dataset.strip():
            raise SpecError("a budget needs a data set name")
        try:
            self.unit = ProtectedUnit(self.unit)
        except ValueError:
            raise PrivacyParameterError(f"unit must be one of {[u.value for u in ProtectedUnit]}, "
                                        f"got {self.unit!r}") from None
        self.protected_columns = tuple(self.protected_columns)
        if self.protected_columns and self.unit not in COLUMN_UNITS:
            raise PrivacyParameterError(f"protected columns only apply to features / label budgets, "
                                        f"not to unit = {self.unit.value!r}")
        if self.accountant not in ACCOUNTANTS:
            raise PrivacyParameterError(f"accountant must be one of {ACCOUNTANTS}, got {self.accountant!r}")

    # ------------------------------------------------------------- file
    @classmethod
    def create(cls, path: str | os.PathLike, epsilon: float, delta: float, dataset: str,
               unit: ProtectedUnit | str = ProtectedUnit.EXAMPLE, protected_columns: Sequence[str] = (),
               accountant: str = "pld", fingerprint: str | None = None, force: bool = False,
               runs: int = DEFAULT_RUNS) -> Budget:
        """Write a new budget file with no releases; an existing one is kept unless ``force``. ``runs``: how many
        runs it plans (a run without its own delta takes ``delta / runs``)."""
        budget = cls(Path(path), dataset, epsilon, delta, unit, tuple(protected_columns), accountant, fingerprint,
                     _now(), runs=runs)
        if budget.path.exists() and not force:  # checked again under the lock; refused here it leaves no lock file
            raise DPCareError(f"a budget file already exists at {budget.path} (its releases would be lost; "
                              "`dpcare budget init --force` or Budget.create(..., force=True) overwrites it)")
        check_writable_file(budget.path, "budget file")
        with _locked(budget.path):
            if budget.path.exists() and not force:
                raise DPCareError(f"a budget file already exists at {budget.path} (its releases would be lost; "
                                  "`dpcare budget init --force` or Budget.create(..., force=True) overwrites it)")
            budget._write()
        return budget

    @classmethod
    def load(cls, path: str | os.PathLike) -> Budget:
        path = Path(path)
        if not path.is_file():
            raise MissingFileError(f"no budget file at {path}: create one with `dpcare budget init`")
        try:
            d = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise SpecError(f"budget file {path} is not valid JSON: {err}") from None
        if not isinstance(d, dict) or d.get("dpcare_budget") != FORMAT:
            raise SpecError(f"{path} is not a dpcare budget file (format {FORMAT})")
        try:
            return cls(path, d["dataset"], d["total"]["epsilon"], d["total"]["delta"], d["unit"],
                       d["protected_columns"], d["accountant"], d["fingerprint"], d["created"],
                       [Release.from_dict(r) for r in d["releases"]], d.get("runs", DEFAULT_RUNS))
        except (KeyError, TypeError, ValueError) as err:
            raise SpecError(f"budget file {path} is malformed: {type(err).__name__}: {err}") from None

    def to_dict(self) -> dict[str, Any]:
        return {"dpcare_budget": FORMAT, "dataset": self.dataset, "fingerprint": self.fingerprint,
                "unit": self.unit.value, "protected_columns": list(self.protected_columns),
                "total": {"epsilon": self.epsilon, "delta": self.delta}, "accountant": self.accountant,
                "runs": self.runs, "created": self.created, "releases": [r.to_dict() for r in self.releases]}

    @property
    def run_delta(self) -> float:
        """The delta of a run under this budget that gives none of its own: the total spread over ``runs``."""
        return self.delta / self.runs

    def _write(self) -> None:
        atomic_write(self.path, lambda f: _dump(self.to_dict(), f))

    def _update(self, change: Callable[[Budget], T]) -> T:
        """Apply ``change`` to a fresh read of the file under the lock, write it, refresh this snapshot."""
        with _locked(self.path):
            fresh = Budget.load(self.path)
            result = change(fresh)
            fresh._write()
        self.protected_columns, self.releases = fresh.protected_columns, fresh.releases
        return result

    def verify_data(self, path: str | os.PathLike) -> None:
        """Refuse data whose fingerprint differs from the one recorded at ``init`` (if any)."""
        if self.fingerprint and data_fingerprint(path) != self.fingerprint:
            raise DataError(f"{path} is not the data set of the budget {self.path} ({self.dataset!r}, "
                            f"{self.fingerprint}); use that data set's budget file")

    # ------------------------------------------------------------- reading
    def spent(self, planned: Release | None = None) -> Spent:
        """Everything counted so far (plus ``planned``), composed at the total delta."""
        return compose([*self.releases, *([planned] if planned else [])], self.delta, self.accountant)

    def as_release(self, planned: Planned, run_id: str | None = None, command: str = "",
                   status: str = "reserved") -> Release:
        """The release of a planned / finished run: a PrivacyLedger (exact events, built without data),
        a Guarantee ((epsilon, delta) only) or None (non-private: epsilon = inf)."""
        run_id = run_id or f"{datetime.now():%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
        common = {"run_id": run_id, "command": command, "time": _now(), "status": status}
        if isinstance(planned, PrivacyLedger):
            return Release(**common, epsilon=planned.epsilon(), delta=planned.delta, unit=planned.unit,
                           protected_columns=planned.protected_columns, ledger=planned.state_dict())
        if isinstance(planned, Guarantee):
            return Release(**common, epsilon=planned.epsilon, delta=planned.delta, unit=planned.unit,
                           protected_columns=planned.protected_columns)
        if planned is None:
            return Release(**common, epsilon=math.inf, delta=0.0, unit=self.unit,
                           protected_columns=self.protected_columns)
        raise TypeError(f"a release is a PrivacyLedger, a Guarantee or None, got {type(planned).__name__}")

    def admit(self, release: Release) -> tuple[str, ...]:
        """Raise unless ``release`` may count against this budget; return the budget's protected columns
        after it (a first features / label release fixes them when none were declared)."""
        if release.delta > self.delta:
            raise PrivacyParameterError(f"run {release.run_id!r} has delta = {release.delta:g} above the budget's "
                                        f"total delta = {self.delta:g}; run it with delta <= {self.delta:g}")
        if release.unit == self.unit and self.unit not in COLUMN_UNITS:
            return self.protected_columns
        if self.unit in COLUMN_UNITS and release.unit == ProtectedUnit.EXAMPLE:
            return self.protected_columns
        if self.unit in COLUMN_UNITS and release.unit in COLUMN_UNITS and release.protected_columns:
            if not self.protected_columns:
                return release.protected_columns
            if set(release.protected_columns) >= set(self.protected_columns):
                return self.protected_columns
        raise PrivacyParameterError(
            f"run {release.run_id!r} protects {release.unit.value} ({', '.join(release.protected_columns) or '-'}); "
            f"the budget {self.path} counts {self.unit.value} ({', '.join(self.protected_columns) or '-'}), "
            "which that guarantee does not imply: compose them in one budget only if the release's unit "
            "implies the budget's (see dpcare.privacy.budget)")

    def check(self, planned: Planned | Release) -> Spent:
        """Spent plus ``planned`` if it fits the total; else raise BudgetExceededError naming spent,
        planned and total. Needs no data: pass a ledger charged from the run's settings."""
        release = planned if isinstance(planned, Release) else self.as_release(planned)
        self.admit(release)
        after = self.spent(release)
        if after.epsilon > self.epsilon or after.delta > self.delta:
            before = self.spent()
            held = after.basic_delta  # this run's planned guarantee included
            if held >= self.delta:  # no delta left to compose the events at: epsilon is infinite
                why = (f"the DELTA is spent: releases without events (this run's planned guarantee included) hold "
                       f"delta = {held:.3g} of the total {self.delta:g}, leaving none to compose the others at; "
                       f"give this run a smaller delta (--delta, e.g. {self.run_delta:.3g}: the budget's delta over "
                       f"its {self.runs} planned runs, the default under a budget)")
            else:
                why = ("the EPSILON is spent: give this run a smaller --epsilon, or stop here (the budget's remaining "
                       "epsilon is the total minus what the releases above compose to)")
            raise BudgetExceededError(
                f"run {release.run_id!r} would exceed the privacy budget of {self.dataset!r} ({self.path}): "
                f"spent epsilon = {before.epsilon:.4g} ({before.releases} releases) + planned epsilon = "
                f"{release.epsilon:.4g} (delta = {release.delta:.3g}) compose to epsilon = {after.epsilon:.4g} "
                f"at delta = {after.delta:.3g} ({after.method}), above the total epsilon = {self.epsilon:g}, "
                f"delta = {self.delta:g}: {why}; nothing was run")
        return after

    # ------------------------------------------------------------- changing (locked)
    def reserve(self, planned: Planned, run_id: str | None = None, command: str = "") -> Release:
        """Check and record a planned release in one locked step (status "reserved"); it counts from now on.
        A reservation of the same ``run_id`` that is still "reserved" (an interrupted run, resumed) is returned
        as it is."""
        release = self.as_release(planned, run_id, command)

        def change(b: Budget) -> Release:
            mine = [r for r in b.releases if r.run_id == release.run_id and r.status == "reserved"]
            if mine:  # a resumed run (same run id) takes over its own reservation: never charged twice
                return mine[0]
            b._unique(release.run_id)
            b.protected_columns = b.admit(release)
            b.check(release)
            b.releases.append(release)
            return release

        return self._update(change)

    def commit(self, run_id: str, actual: PrivacyLedger | None = None) -> Release:
        """Mark a reservation done, replacing its planned release by the run's ``actual`` ledger if given.
        A run that spent more than the total is still recorded (it happened), then BudgetExceededError."""

        def change(b: Budget) -> tuple[Release, Spent]:
            i, old = b._find(run_id, "reserved")
            new = replace(old, status="done") if actual is None else replace(
                b.as_release(actual, run_id, old.command, "done"), time=old.time)
            if actual is not None:
                b.protected_columns = b.admit(new)
            b.releases[i] = new
            return new, b.spent()

        new, after = self._update(change)
        if after.epsilon > self.epsilon or after.delta > self.delta:
            raise BudgetExceededError(f"run {run_id!r} spent more than it reserved: the budget {self.path} now "
                                      f"composes to epsilon = {after.epsilon:.4g} at delta = {after.delta:.3g}, "
                                      f"above the total epsilon = {self.epsilon:g}, delta = {self.delta:g}")
        return new

    def cancel(self, run_id: str) -> Release:
        """Stop counting a reservation. Sound only if the run read no private data."""

        def change(b: Budget) -> Release:
            i, old = b._find(run_id, "reserved")
            b.releases[i] = replace(old, status="cancelled")
            return b.releases[i]

        return self._update(change)

    def record(self, released: Planned, run_id: str | None = None, command: str = "") -> Release:
        """Append a release that already happened (status "done"), even past the total: the record must be true."""
        release = self.as_release(released, run_id, command, "done")

        def change(b: Budget) -> Release:
            mine = [r for r in b.releases if r.run_id == release.run_id and r.status == "reserved"]
            if mine:  # a resumed run (same run id) takes over its own reservation: never charged twice
                return mine[0]
            b._unique(release.run_id)
            b.protected_columns = b.admit(release)
            b.releases.append(release)
            return release

        return self._update(change)

    def _unique(self, run_id: str) -> None:
        if any(r.run_id == run_id for r in self.releases):
            raise DPCareError(f"run id {run_id!r} is already in the budget {self.path}")

    def _find(self, run_id: str, status: str) -> tuple[int, Release]:
        for i, r in enumerate(self.releases):
            if r.run_id == run_id and r.status == status:
                return i, r
        raise UnknownNameError(f"no {status} release with run id {run_id!r} in the budget {self.path}")


@dataclass
class Reservation:
    """A reserved release; set ``actual`` to the run's final ledger to record it exactly on success. A run
    refused while it validates its input (bad values, a single-class split), before anything is trained or
    written, sets ``refused = True``: it released nothing but an error message, and its reservation is
    cancelled instead of counting."""

    budget: Budget
    release: Release
    actual: PrivacyLedger | None = None
    refused: bool = False


@contextmanager
def guard_run(budget_path: str | os.PathLike | None, planned: Planned, run_id: str | None = None,
              command: str = "", data: str | os.PathLike | None = None) -> Iterator[Reservation | None]:
    """Reserve ``planned`` in the budget file before the body runs (raise BudgetExceededError before any
    private row is read), commit it (with ``reservation.actual`` if set) when the body succeeds, and leave
    the reservation counting when it fails (cancelled only if the body set ``reservation.refused``). ``budget_path`` None: no budget, yields None. ``data``: check
    the budget's fingerprint first."""
    if budget_path is None or process_rank() != 0:  # in a distributed run rank 0 alone reserves and commits
        yield None
        return
    budget = Budget.load(budget_path)
    if data is not None:
        budget.verify_data(data)
    reservation = Reservation(budget, budget.reserve(planned, run_id, command))
    try:
        yield reservation
    except BaseException:
        if reservation.refused:
            budget.cancel(reservation.release.run_id)
        raise
    budget.commit(reservation.release.run_id, reservation.actual)
