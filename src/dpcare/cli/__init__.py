"""The ``dpcare`` command line: ``app`` (a typer app) and ``main`` (the console script).

One module per command group; each command imports its heavy dependencies when it runs.
Errors a user can fix are reported once, by the root group (:mod:`dpcare.cli.common`):
``error: <message>`` on stderr and exit status 2. A new command group is a module with its
own ``app`` added below.
"""

from __future__ import annotations

import logging
import warnings

import typer

from dpcare.cli import (
    account,
    audit,
    benchmark,
    budget,
    data,
    forecast,
    images,
    report,
    synth,
    text,
    train,
)
from dpcare.cli.common import ErrorReportingGroup
from dpcare.runtime import ensure_fast_process

app = typer.Typer(
    cls=ErrorReportingGroup,
    help="dpcare: differential privacy for clinical machine learning. Every epsilon printed comes from "
    "the privacy ledger of the run (dp-accounting PLD by default).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(account.app, name="account")
app.add_typer(benchmark.app, name="benchmark")
app.add_typer(synth.app, name="synth")
app.command()(train.train)
app.command()(train.predict)
app.add_typer(audit.app, name="audit")
app.command()(data.demo)
app.command()(data.datasets)
app.command()(report.report)
app.add_typer(budget.app, name="budget")
app.add_typer(text.app, name="text")
app.add_typer(forecast.app, name="forecast")
app.add_typer(images.app, name="images")


def quiet_third_party_warnings() -> None:
    """Deprecation notices of the libraries underneath (transformers' ``past_key_values`` FutureWarning in every
    generation, peft's, torch's) are not the user's business: the command line does not show them. dpcare's
    own warnings (UserWarning: a batch covering every unit, an epsilon met at the noise floor) still show."""
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    # transformers 5 logs its renaming of past_key_values to `cache` instead of warning; dpcare passes the old name,
    # which it still maps to the new one (older releases know only the old), so only that one notice is dropped
    logging.getLogger("transformers.utils.generic").addFilter(_drop_cache_rename_notice)


def _drop_cache_rename_notice(record: logging.LogRecord) -> bool:
    return "Use `cache` instead" not in record.getMessage()


def show_warnings_once() -> None:
    """Print each warning as ``warning: <message>`` on stderr, once per command whatever line raised it: a
    user of the command line needs the message, not the line of dpcare that gave it, and a warning repeated
    by each copy of the settings (the pinned-noise one, say) is said once."""
    shown: set[tuple[type, str]] = set()

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        key = (category, str(message))
        if key in shown:
            return
        shown.add(key)
        from dpcare.exceptions import ExactStatisticWarning
        from dpcare.runs.record import record_warning  # here: importing dpcare.runs would slow every start

        record_warning(str(message), issubclass(category, ExactStatisticWarning))  # repeated in run.json, report
        try:
            if file is None:
                typer.secho(f"warning: {message}", fg=typer.colors.YELLOW, err=True)
            else:
                file.write(f"warning: {message}\n")
        except OSError:  # stderr gone (a closed pipe): a warning must not stop the run, as in warnings' own
            pass

    warnings.showwarning = show


def main() -> None:
    """Run ``app`` (``python -m dpcare.cli``; the console script comes here through :mod:`dpcare.console`, already
    re-executed): re-exec with the fast process settings unless set, then run the command."""
    ensure_fast_process()
    quiet_third_party_warnings()
    show_warnings_once()
    app()


__all__ = ["app", "main", "quiet_third_party_warnings", "show_warnings_once"]
