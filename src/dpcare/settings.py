"""One declaration of every setting: what it accepts, its help text, and the error that names it.

A setting is a dataclass field whose ``metadata`` holds a :class:`Rule` (made by :func:`setting`).
:func:`check` validates every field of such a dataclass in one place, and the message follows from
the rule: the parameter, the allowed values and what was given, as in scikit-learn's parameter
validation (``sklearn/utils/_param_validation.py``)::

    epsilon must be a finite number > 0, got -1.0

:class:`DPSettings` are the settings of the private mechanism that every recipe composes (epsilon,
delta, accountant, clipping incl. adaptive clipping, expected batch, epochs or steps, the public seed, the
secret noise_seed and the privacy unit). Recipes keep their own fields (model sizes, learning rates) in their
own dataclass, declared the same way, with a ``dp: DPSettings`` field. The command line derives its options from
these declarations (:mod:`dpcare.cli.options`), so a setting is typed once.

This module is pure Python (no torch): the engine's ``TrainConfig`` holds :class:`DPSettings` and
:class:`ComputeSettings` themselves.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from dpcare.exceptions import DPCareError, PrivacyParameterError, SettingsError

UNITS = ("example", "patient")
MAX_EPSILON = 100.0  # e^100: a likelihood ratio no attacker is held to; larger targets are refused up front
ACCOUNTANTS = ("pld", "rdp")


# --------------------------------------------------------------------------- rules
@dataclass(frozen=True)
class Rule:
    """What one setting accepts. ``kind``: "number", "integer", "choice", "text" or "flag".

    Numbers: ``low`` / ``high`` bounds (``open_low`` / ``open_high``: strict), always finite unless
    ``finite`` is False. ``none``: None is allowed too, meaning ``none_means``. ``error``: the
    DPCareError subclass raised (privacy parameters raise PrivacyParameterError)."""

    kind: str = "number"
    help: str = ""
    low: float | None = None
    high: float | None = None
    open_low: bool = False
    open_high: bool = False
    finite: bool = True
    choices: tuple[str, ...] = ()
    none: bool = False
    none_means: str = ""
    cli: str | None = None  # the option's name on the command line, if not the field's
    methods: tuple[str, ...] = ()  # the methods this setting acts in (empty: every method); the report shows no other
    error: type[DPCareError] = SettingsError

    def allowed(self) -> str:
        """The allowed values in words: "a finite number > 0", "one of ['pld', 'rdp']"..."""
        if self.kind == "choice":
            text = f"one of {list(self.choices)}"
        elif self.kind == "flag":
            text = "True or False"
        elif self.kind == "text":
            text = "a text"
        else:
            text = ("an integer" if self.kind == "integer" else "a finite number" if self.finite else "a number")
            lo = None if self.low is None else f"{'>' if self.open_low else '>='} {self.low:g}"
            hi = None if self.high is None else f"{'<' if self.open_high else '<='} {self.high:g}"
            if lo and hi:
                text += f" in {'(' if self.open_low else '['}{self.low:g}, {self.high:g}{')' if self.open_high else ']'}"
            elif lo or hi:
                text += f" {lo or hi}"
        if self.none:
            text += f", or None ({self.none_means})" if self.none_means else ", or None"
        return text

    def accepts(self, value: Any) -> bool:
        if value is None:
            return self.none
        if self.kind == "choice":
            return isinstance(value, str) and value in self.choices
        if self.kind == "flag":
            return isinstance(value, bool)
        if self.kind == "text":
            return isinstance(value, str)
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return False
        if self.kind == "integer" and not isinstance(value, numbers.Integral):
            return False
        if math.isnan(value) or (self.finite and not math.isfinite(value)):
            return False
        if self.low is not None and (value <= self.low if self.open_low else value < self.low):
            return False
        return not (self.high is not None and (value >= self.high if self.open_high else value > self.high))

    def check(self, name: str, value: Any) -> None:
        if not self.accepts(value):
            raise self.error(f"{name} must be {self.allowed()}, got {name} = {value!r}")


def setting(default: Any = dataclasses.MISSING, *, default_factory: Callable[[], Any] | None = None,
            **rule: Any) -> Any:
    """A dataclass field declared with its :class:`Rule` (keywords of Rule) and default."""
    kw = {"default_factory": default_factory} if default_factory is not None else {"default": default}
    return field(metadata={"rule": Rule(**rule)}, **kw)


def rules(cls_or_obj: Any) -> dict[str, Rule]:
    """The declared rules of a settings dataclass, by field name (fields without a rule are left out)."""
    return {f.name: f.metadata["rule"] for f in dataclasses.fields(cls_or_obj) if "rule" in f.metadata}


def check(obj: Any) -> None:
    """Validate every declared field of ``obj``, then the nested settings dataclasses it holds."""
    for name, rule in rules(obj).items():
        rule.check(name, getattr(obj, name))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type) and rules(value):
            check(value)


def from_dict(cls: type, values: dict[str, Any] | None) -> Any:
    """``cls(**values)`` with nested settings dataclasses rebuilt from their dicts; an unknown key is an
    error that lists the known ones (a saved run, a YAML file or keyword arguments)."""
    values = dict(values or {})
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise SettingsError(f"unknown settings {unknown} for {cls.__name__}; known: {sorted(fields)}")
    for name, value in values.items():
        nested = _nested_type(cls, name)
        if nested is not None and isinstance(value, dict):
            values[name] = from_dict(nested, value)
    return cls(**values)


def _nested_type(cls: type, name: str) -> type | None:
    """The settings dataclass type of field ``name`` of ``cls``, if it is one."""
    default = next(f for f in dataclasses.fields(cls) if f.name == name)
    probe = (default.default_factory() if default.default_factory is not dataclasses.MISSING
             else default.default if default.default is not dataclasses.MISSING else None)
    return type(probe) if dataclasses.is_dataclass(probe) else None


def to_dict(obj: Any) -> dict[str, Any]:
    """The settings as plain JSON-able data (nested dataclasses as dicts, tuples as lists)."""
    return _plain(dataclasses.asdict(obj))


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def in_effect(obj: Any, resolved: dict[str, Any] | None = None, method: str | None = None) -> dict[str, Any]:
    """The settings a run used, for its run.json and report: a None the run resolved shown as that value
    (``resolved``: {dotted name: value}, e.g. {"dp.delta": 1e-5}), another None as what it means (its Rule's
    ``none_means``), settings of other methods than ``method`` (default: ``obj.method``) left out, and of a
    non-private run (``obj.private`` False) no DP setting but the public seed."""
    resolved = dict(resolved or {})
    method = method if method is not None else getattr(obj, "method", None)
    private = getattr(obj, "private", True)

    def walk(o: Any, prefix: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        declared = rules(o)
        for f in dataclasses.fields(o):
            name, value, rule = f"{prefix}{f.name}", getattr(o, f.name), declared.get(f.name)
            if rule is not None and rule.methods and method not in rule.methods:
                continue
            if isinstance(value, DPSettings) and not private:
                out[f.name] = {"seed": value.seed}
            elif dataclasses.is_dataclass(value) and not isinstance(value, type):
                out[f.name] = walk(value, f"{name}.")
            elif name in resolved:
                out[f.name] = _plain(resolved[name])
            elif value is None and rule is not None and rule.none_means:
                out[f.name] = f"none ({rule.none_means})"
            else:
                out[f.name] = _plain(value)
        return out

    return walk(obj, "")


class Settings:
    """Base of every settings dataclass: checked against its declared rules when made, and a plain-data round
    trip (a run folder's run.json, a YAML file, keyword arguments)."""

    def __post_init__(self) -> None:
        check(self)

    def replace(self, **changes: Any):
        """A copy with ``changes`` (validated)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any] | None):
        return from_dict(cls, values)


# --------------------------------------------------------------------------- the DP settings
#: set while a DPSettings derives a copy that keeps its pinned noise seed (it warned already); a context variable,
#: not a warnings filter: changing the filters resets Python's record of warnings already shown, and is not thread-safe
_DERIVING: ContextVar[bool] = ContextVar("dpcare_deriving_settings", default=False)


@contextmanager
def _warned_already() -> Iterator[None]:
    """DPSettings made inside do not warn about a pinned noise_seed (their user was warned once)."""
    token = _DERIVING.set(True)
    try:
        yield
    finally:
        _DERIVING.reset(token)


@dataclass(frozen=True)
class DPSettings(Settings):
    """The settings of the private mechanism, shared by every recipe (and every CLI command that trains).

    ``batch_size`` is the EXPECTED number of units per step (Poisson sampling at q = batch_size / n);
    ``steps`` overrides ``epochs``. ``adaptive_clip`` is the target quantile of the per-unit gradient
    norms for private adaptive clipping (Andrew et al., NeurIPS 2021), ``clip_norm`` then being the
    initial C. ``unit`` is what one person contributes: an ``example`` (one row, window or note) or a
    ``patient`` (all of a patient's rows, clipped together as one gradient)."""

    epsilon: float = setting(1.0, low=0, high=MAX_EPSILON, open_low=True, error=PrivacyParameterError,
                             help="target epsilon of the whole run (every data-dependent release); above "
                                  f"{MAX_EPSILON:g} a guarantee bounds nothing an attacker cares about")
    delta: float | None = setting(None, low=0, high=1, open_low=True, open_high=True, none=True,
                                  none_means="the default for n units", error=PrivacyParameterError,
                                  help="delta of the guarantee (default: min(1e-5, 0.01/n), so n*delta <= 0.01; "
                                       "must be < 1/n; above 0.01/n it warns)")
    accountant: str = setting("pld", kind="choice", choices=ACCOUNTANTS,
                              help="privacy accountant: pld (exact, default) or rdp")
    clip_norm: float = setting(1.0, low=0, open_low=True, cli="clip",
                               help="per-unit clipping norm C (the initial C with --adaptive-clip)")
    adaptive_clip: float | None = setting(None, low=0, high=1, open_low=True, open_high=True, none=True,
                                          none_means="a fixed C",
                                          help="private adaptive clipping to this quantile of the per-unit "
                                               "gradient norms (e.g. 0.5), charged to the ledger")
    batch_size: int = setting(256, kind="integer", low=1, help="expected units per step (Poisson sampling)")
    epochs: float = setting(10.0, low=0, open_low=True, help="passes over the private units (in expectation)")
    steps: int | None = setting(None, kind="integer", low=1, none=True, none_means="from epochs",
                                help="training steps (overrides epochs)")
    seed: int = setting(0, kind="integer", help="public seed (recorded in run.json) of the splits, the initialisation, "
                                                "public sampling and dropout; never of the DP noise")
    noise_seed: int | None = setting(None, kind="integer", none=True,
                                     none_means="fresh OS entropy each run, never recorded",
                                     help="seed of the DP mechanism's secret randomness (private Poisson sampling, "
                                          "the noise, every noisy statistic); an integer makes the noise reproducible "
                                          "by whoever knows it, which voids the guarantee against them: for tests "
                                          "and reproducing published numbers only")
    unit: str = setting("example", kind="choice", choices=UNITS,
                        help="privacy unit: example (one row) or patient (all of a patient's rows together)")

    def __post_init__(self) -> None:
        super().__post_init__()
        from dpcare.privacy.randomness import warn_if_reproducible

        if not _DERIVING.get():
            warn_if_reproducible(self.noise_seed)

    def replace(self, **changes: Any) -> DPSettings:
        """A copy with ``changes`` (validated). A copy that keeps this one's pinned noise_seed does not warn about
        it again; a new noise_seed warns."""
        if changes.get("noise_seed", self.noise_seed) != self.noise_seed:
            return super().replace(**changes)
        return self._derived(**changes)

    def shifted(self, offset: int) -> DPSettings:
        """The settings of a run that must draw apart from this one (another stage, another tuning candidate):
        the seed moved by ``offset``, and a pinned noise_seed with it (None stays fresh OS entropy)."""
        noise = None if self.noise_seed is None else self.noise_seed + offset
        return self._derived(seed=self.seed + offset, noise_seed=noise)

    @classmethod
    def rebuilt(cls, **values: Any) -> DPSettings:
        """Settings made from values whose pinned noise_seed its user was already warned about (a function's own
        arguments passed on to the engine): validated, without a second warning."""
        with _warned_already():
            return cls(**values)

    def _derived(self, **changes: Any) -> DPSettings:
        """A copy with ``changes``, without repeating the pinned-noise warning: these settings gave it already."""
        with _warned_already():
            return super().replace(**changes)


# --------------------------------------------------------------------------- where to compute
PRECISIONS = ("fp32", "bf16")
DEVICE_PATTERN = re.compile(r"auto|cpu|mps|cuda(:\d+)?")


def check_device_name(name: str) -> None:
    """The form of a device name (not whether this machine has one): auto, cpu, cuda, cuda:N or mps."""
    if not isinstance(name, str) or not DEVICE_PATTERN.fullmatch(name):
        raise SettingsError(f"device must be auto, cpu, cuda, cuda:N or mps, got device = {name!r}")


@dataclass(frozen=True)
class ComputeSettings(Settings):
    """Where a recipe trains: the device, the precision and the number of processes of one machine
    (:mod:`dpcare.engine.devices`, :mod:`dpcare.engine.distributed`). None of them changes the guarantee."""

    device: str = setting("auto", kind="text", help="auto (a CUDA GPU when present, else the CPU), cpu, cuda, "
                                                    "cuda:N or mps; a device asked for and absent is an error")
    precision: str = setting("fp32", kind="choice", choices=PRECISIONS,
                             help="fp32, or bf16 autocast (norms, clipping and the noisy sum stay fp32)")
    nproc: int = setting(1, kind="integer", low=1, help="DP training processes on this machine "
                                                        "(torch.distributed; units sharded, noise added once)")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_device_name(self.device)


def require_unit(dp: DPSettings, unit: str, why: str) -> None:
    """A recipe's privacy unit: ``dp.unit`` must be ``unit`` (``why``: what that unit covers there, in words)."""
    if dp.unit != unit:
        raise SettingsError(f"{why}: unit must be {unit!r}, got unit = {dp.unit!r}")


__all__ = ["ACCOUNTANTS", "PRECISIONS", "UNITS", "ComputeSettings", "DPSettings", "Rule", "Settings", "check",
           "check_device_name", "from_dict", "in_effect", "require_unit", "rules",
           "setting", "to_dict"]
