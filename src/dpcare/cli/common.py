"""What the command modules share: the one error path and small loaders."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Annotated

import click
import typer
from typer.core import TyperGroup

from dpcare.exceptions import DPCareError, SettingsError

#: errors a user can fix: every layer raises a DPCareError for bad input, a bad setting, a missing file
#: (MissingFileError) or a missing optional package (MissingDependencyError). They are reported in one line
#: with exit status 2; anything else (a bare ValueError, FileNotFoundError, ...) is a bug and keeps its traceback
USER_ERRORS = (DPCareError,)


def echo_plain_verdict(comparison: dict | None) -> None:
    """The first line of a run's summary: the verdict against its public baseline in plain words (issue 54);
    ``comparison``: the binding :meth:`dpcare.verdict.Comparison.to_dict` (None: no baseline, nothing said)."""
    if comparison is None:
        return
    from dpcare.verdict import verdict_entry

    v = verdict_entry("", comparison)
    typer.echo(f"verdict: {v['verdict']} (on {v['metric']}, against {v['against']}; details below)")


def echo_outside_the_guarantee(units: str) -> None:
    """Say, under a run's summary, that its metrics, baselines and verdict are outside its guarantee (``units``:
    what the held-out data are: rows, patients, images...), as the report does."""
    from dpcare.verdict import OUTSIDE_THE_GUARANTEE

    typer.echo(OUTSIDE_THE_GUARANTEE.format(units=units))


def fail(err: Exception) -> None:
    """Print ``error: <message>`` to stderr and exit with status 2."""
    typer.secho(f"error: {err}", fg=typer.colors.RED, err=True)
    raise typer.Exit(2)


class ErrorReportingGroup(TyperGroup):
    """The root command group: turns a :data:`USER_ERRORS` raised by any command into :func:`fail`."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except USER_ERRORS as err:
            from dpcare.runs import abandon_unwritten

            abandon_unwritten()  # a refused run leaves no half-made run folder
            fail(err)
        except KeyboardInterrupt:
            interrupted()
        except UnicodeDecodeError as err:  # a reader that did not name its file: say what is wrong all the same
            fail(DPCareError(f"an input file is not UTF-8 text ({err.reason}): save it as UTF-8"))
        except OSError as err:
            if err.errno not in ENVIRONMENT_ERRNOS:
                raise  # anything else is a bug and keeps its traceback
            where = f" {err.filename}" if err.filename else ""
            fail(DPCareError(f"cannot use{where}: {err.strerror or err}"))


#: OS errors that are the machine's or the user's doing, not a bug: reported in one line (no permission, a read-only
#: file system, a file or folder where the other was expected, a full disk or quota)
ENVIRONMENT_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.EISDIR, errno.ENOTDIR, errno.ENOSPC,
                      errno.EDQUOT, errno.ENAMETOOLONG}


def interrupted() -> None:
    """Ctrl-C: say what was kept and how to resume, then exit with status 130 (as a shell's SIGINT)."""
    from dpcare.runs.folder import unfinished_staging

    kept = unfinished_staging()
    if kept:
        said = (f"interrupted; the work done so far is kept in {', '.join(str(p) for p in kept)}: rerun the same "
                "command to resume from it")
    else:
        said = "interrupted before the run wrote anything: rerun the same command to start it again"
    typer.secho(said, fg=typer.colors.YELLOW, err=True)
    raise typer.Exit(130)


def table_and_spec(data: Path, spec: Path):
    """(table, schema): a CSV/Parquet file validated against its privacy spec."""
    from dpcare.data import load_spec, load_table

    schema = load_spec(spec)
    return load_table(data, schema), schema


def name_list(text: str) -> tuple[str, ...]:
    """The entries of a comma-separated option such as ``--modes base,dp-lora``, stripped, empty ones dropped."""
    return tuple(x.strip() for x in text.split(",") if x.strip())


def epsilon_list(text: str, flag: str = "--epsilons") -> tuple[float, ...]:
    """The numbers of a comma-separated option such as ``--epsilons 1,3,8`` (a SettingsError names a bad one)."""
    parts = name_list(text)
    try:
        values = tuple(float(e) for e in parts)
    except ValueError:
        raise SettingsError(f"{flag} must be comma-separated numbers, got {flag} = {text!r}") from None
    if not values:
        raise SettingsError(f"{flag} must name at least one number, got {flag} = {text!r}")
    return values


#: where the parallel work of a command runs (dpcare.parallel); the RAY_ADDRESS environment variable is read too
RayAddressOption = Annotated[str | None, typer.Option(
    "--ray-address", help="Ray cluster for the parallel work, e.g. HEAD_IP:6379 (default: the RAY_ADDRESS "
                          "environment variable, else a local Ray instance of --workers CPUs); needs --workers > 1")]


def use_ray(address: str | None, workers: int) -> None:
    """Send the command's parallel tasks to the Ray cluster at ``address`` (None: RAY_ADDRESS or this machine)."""
    if address and workers <= 1:
        raise SettingsError(f"--ray-address runs tasks on a cluster only with --workers > 1 (the tasks in flight), "
                            f"got --workers = {workers}")
    from dpcare.parallel import configure

    configure(address)
