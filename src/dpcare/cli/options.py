"""Command-line options derived from the settings' declarations (:mod:`dpcare.settings`), not re-typed.

``@settings_options("settings", TabularSettings())`` gives the command one ``--option`` per declared
field of the settings object (nested settings such as ``dp: DPSettings`` included), with the
declared help and the given object's values as defaults; the command receives the settings object
built from them as its ``settings`` argument. A bad value is refused before the command runs, with
the option's flag, what it accepts and what was given::

    error: --epsilon must be a finite number > 0, got --epsilon = -1.0

Where a default depends on another setting (summarisation's schedule differs from NER's), ``defaults`` maps
the settings built from the command line to the defaults of that run: every option left off the command
line then takes its value from there, every option given keeps the given value.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import io
import subprocess
import sys
from collections.abc import Callable, Iterable
from typing import Annotated, Any

import typer

from dpcare.exceptions import SettingsError
from dpcare.runtime import launched_by_torchrun
from dpcare.settings import ComputeSettings, Rule, rules

_TYPES = {"number": float, "integer": int, "choice": str, "text": str, "flag": bool}


@dataclasses.dataclass(frozen=True)
class _Option:
    path: tuple[str, ...]  # field names from the settings object down to the setting
    rule: Rule
    default: Any

    @property
    def flag(self) -> str:
        return "--" + (self.rule.cli or self.path[-1]).replace("_", "-")

    @property
    def param(self) -> str:
        return "_".join(self.path)

    def parameter(self) -> inspect.Parameter:
        kind = _TYPES[self.rule.kind]
        annotation = kind | None if self.rule.none else kind
        help_text = self.rule.help + (f" [{self.rule.allowed()}]" if self.rule.kind == "choice" else "")
        if self.default is None and self.rule.none_means and self.rule.kind != "choice":  # a choice says it above
            help_text += f"; left off: {self.rule.none_means}"
        # a flag has its off switch too (--impute/--no-impute): a setting that defaults to on can be turned off
        names = f"{self.flag}/--no-{self.flag[2:]}" if self.rule.kind == "flag" else self.flag
        option = typer.Option(names, help=help_text)
        return inspect.Parameter(self.param, inspect.Parameter.KEYWORD_ONLY, default=self.default,
                                 annotation=Annotated[annotation, option])


def _options(obj: Any, skip: set[str], prefix: tuple[str, ...] = ()) -> list[_Option]:
    out = []
    declared = rules(obj)
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        path = (*prefix, f.name)
        if ".".join(path) in skip or f.name in skip:
            continue
        if f.name in declared:
            out.append(_Option(path, declared[f.name], value))
        elif dataclasses.is_dataclass(value) and not isinstance(value, type) and rules(value):
            out += _options(value, skip, path)
    return out


def _build(obj: Any, values: dict[tuple[str, ...], Any]) -> Any:
    """``obj`` with the given values (by path) replaced, nested settings rebuilt bottom-up."""
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        sub = {p[1:]: v for p, v in values.items() if p[0] == f.name and len(p) > 1}
        if sub:
            changes[f.name] = _build(getattr(obj, f.name), sub)
        elif (f.name,) in values:
            changes[f.name] = values[(f.name,)]
    return dataclasses.replace(obj, **changes)


def _given(options: list[_Option], ctx: typer.Context) -> list[_Option]:
    """The options this invocation gave (on the command line or from the environment), not left at the default."""
    sources = {o: ctx.get_parameter_source(o.param) for o in options}
    return [o for o, source in sources.items() if source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")]


def settings_options(param: str, default: Any, skip: Iterable[str] = (),
                     defaults: Callable[[Any], Any] | None = None) -> Callable[[Callable], Callable]:
    """Decorator of a typer command: an option per declared setting of ``default`` (names in ``skip``,
    plain or dotted like ``dp.unit``, left out); the command gets the built settings as ``param``.
    ``defaults(settings)``: the defaults of the run those settings describe, for the options left off."""
    options = _options(default, set(skip))
    flags = [o.flag for o in options]
    if len(set(flags)) != len(flags):
        raise TypeError(f"two settings share a command-line flag: {sorted(f for f in flags if flags.count(f) > 1)}")

    def decorate(command: Callable) -> Callable:
        signature = inspect.signature(command, eval_str=True)  # annotations as objects, not strings
        kept = [p for p in signature.parameters.values() if p.name != param]
        # run-dependent defaults read the typer context: the command's own if it takes one (typer passes only
        # one), else one added to the signature under a name of this decorator's
        own_context = next((p.name for p in kept if p.annotation is typer.Context), None)
        context = own_context or f"_{param}_context"

        @functools.wraps(command)
        def wrapper(**kwargs: Any) -> Any:
            ctx = None if defaults is None else kwargs[context] if own_context else kwargs.pop(context)
            values = {}
            for o in options:
                value = kwargs.pop(o.param)
                o.rule.check(o.flag, value)
                values[o.path] = value
            built = _build(default, values)
            if defaults is not None:  # the run's own defaults, with what was given on top
                built = _build(defaults(built), {o.path: values[o.path] for o in _given(options, ctx)})
            kwargs[param] = built
            compute = _compute(kwargs[param])
            if compute is None or (compute == ComputeSettings() and not launched_by_torchrun()):
                return command(**kwargs)  # one process, device auto, fp32: nothing to check before the command
            from dpcare.engine import distributed
            from dpcare.engine.devices import check_precision, resolve_device

            # a device or precision this machine lacks is refused before the command reads anything
            check_precision(compute.precision, resolve_device(compute.device))
            several = compute.nproc > 1 or launched_by_torchrun()
            if several and compute.device.startswith("cuda:"):
                raise SettingsError(f"--device {compute.device} with several processes would put every process on "
                                    "one GPU: use --device cuda (or auto); each process takes its own GPU (LOCAL_RANK)")
            if compute.nproc > 1 and not launched_by_torchrun():
                raise typer.Exit(launch_processes(compute.nproc))
            if not distributed.init_from_environment(compute.device) or distributed.is_main():
                return command(**kwargs)
            with contextlib.redirect_stdout(io.StringIO()):  # a worker rank: rank 0 prints and writes
                return command(**kwargs)

        added = [inspect.Parameter(context, inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)] \
            if defaults is not None and not own_context else []
        wrapper.__signature__ = signature.replace(parameters=[*kept, *(o.parameter() for o in options), *added])
        return wrapper

    return decorate


def _compute(settings: Any) -> ComputeSettings | None:
    """The command's compute settings (device, precision, processes), if it trains."""
    return next((v for f in dataclasses.fields(settings) if isinstance(v := getattr(settings, f.name), ComputeSettings)),
                None)


def launch_processes(nproc: int) -> int:
    """Run this very command again under torchrun with ``nproc`` processes on this machine (``--nproc``
    removed); returns torchrun's exit status. Rank 0 writes the run folder and prints."""
    args, skip = [], False
    for arg in sys.orig_argv[1:]:
        if skip:
            skip = False
        elif arg == "--nproc":
            skip = True
        elif not arg.startswith("--nproc="):
            args.append(arg)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", *args]
    return subprocess.run(command, check=False).returncode


__all__ = ["settings_options"]
