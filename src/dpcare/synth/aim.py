"""``AIMSynthesizer(schema, epsilon=8).fit(df).sample(n)``: DP synthetic tables from noisy marginals (AIM).

AIM (McKenna, Mullins, Sheldon and Miklau, "AIM: An Adaptive and Iterative Mechanism for Differentially
Private Synthetic Data", VLDB 2022) measures the one-way marginals, then round after round picks (with the
exponential mechanism) the two-way marginal its graphical model fits worst, measures it with Gaussian
noise and refits the model (Private-PGM); synthetic rows are drawn from that model. dpcare runs it in its own
process (:mod:`dpcare.synth.aim_engine`: mbi 2.x on jax's CPU backend, OpenDP's samplers; the ``synth`` extra),
keeps the fitted model in the run folder and samples it later. (Until issue 52 it ran SmartNoise's
implementation in a second interpreter; that one remains only for the comparison baselines of the studies.)

Privacy:

* Every column's encoding comes from the spec: numbers in ``bins`` equal-width bins between their
  declared bounds (a numeric column without bounds, or a categorical one without categories, is refused
  before any row is read), categories in their declared order, "missing" a code of its own where the spec
  says nullable.
* The whole run is rho-zCDP (every measurement and selection adds up inside rho). dpcare calibrates rho with
  its own RDP accountant (:func:`~dpcare.privacy.calibrate_zcdp_rho`) so the ledger's epsilon, which
  composes the run's :func:`~dpcare.privacy.zcdp_event` with that accountant, is at most the target; the
  worker checks that AIM spent exactly that rho. The guarantee's accountant is therefore RDP (a PLD
  accountant cannot compose an arbitrary zCDP mechanism); a budget with a PLD accountant adds the run by
  basic composition. OpenDP's own privacy map of every measurement and selection is checked against the rho
  the rounds charge.
* The noise and the selections come from OpenDP's samplers (secure randomness), never from the public ``seed``
  (which only splits, and seeds sampling): no seed reproduces a fit.
* A fit saves its rounds to ``checkpoint_dir`` after each one and resumes from them
  (:mod:`dpcare.synth.aim_rounds`); the rounds' measurements and selections are added up afresh and must
  come to exactly rho, so a resume re-spends nothing.
* n is public, as in every dpcare ledger; AIM estimates its model's total from the noisy marginals.
* Sampling reads no private data: rows are post-processing of the released model.

The public baseline (:mod:`dpcare.synth.support_baseline`) is the same as DP-2Stage's, scored on the same
real held-out rows, so the two synthesizers' verdicts are comparable.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dpcare.data import TableSchema, load_table
from dpcare.exceptions import DataError, MissingFileError, NotFittedError, SettingsError
from dpcare.privacy import (
    Guarantee,
    PrivacyLedger,
    calibrate_zcdp_rho,
    check_delta,
    default_delta,
    zcdp_event,
)
from dpcare.runs import Manifest, RunFolder, SavesRunFolder
from dpcare.settings import in_effect
from dpcare.synth.saved import BASELINE_NOTE, KIND, STATE_FILE, check_test_rows, read_state
from dpcare.synth.settings import AIMSettings

NAME = "aim"  # the model's name in run.json
MODEL_FILE = "model.npz"
STATE_FORMAT = "dpcare-aim-synthesizer/1"
CHECKPOINT_FILE = "aim-rounds.npz"  # in the checkpoint folder: the rounds so far (dpcare.synth.aim_rounds)
ACCOUNTANT = "rdp"  # the only dp-accounting accountant that composes a zCDP event
NOT_REPRODUCIBLE = ("AIM draws its noise from OpenDP's secure generator and its selections from fresh OS entropy: "
                    "no seed reproduces a fit, and a rerun gives another model.")


class AIMSynthesizer(SavesRunFolder):
    """A DP synthetic-table generator from noisy marginals (AIM). ``fit`` returns self; before it (or
    ``load``), ``sample``, ``save`` and ``guarantee_`` raise NotFittedError. Keyword fields go to
    :class:`AIMSettings` when no ``settings`` are given."""

    RUN_KIND = KIND

    def __init__(self, schema: TableSchema, settings: AIMSettings | None = None, progress: bool = True,
                 **overrides: Any):
        from dpcare.synth.baselines import _layout

        if settings is not None and overrides:
            raise SettingsError("pass either settings or keyword overrides, not both")
        self.schema = schema
        self.settings = settings if settings is not None else AIMSettings(**overrides)
        self.layout = _layout(schema, self.settings.bins)  # refuses undeclared bounds or categories up front
        self.progress = progress
        self.state: dict[str, Any] | None = None  # the fitted model: domain, cliques, total
        self.arrays: dict[str, np.ndarray] | None = None  # its log-potentials
        self.ledger: PrivacyLedger | None = None
        self.info: dict[str, Any] = {}
        self.run_id: str | None = None
        self.baseline: dict[str, Any] | None = None  # set by compare_to_public
        self.last_sampling: dict[str, Any] | None = None

    def run_settings(self) -> dict[str, Any]:
        """The settings a run folder records (and a resumed run is matched on): the synthesizer's name and its
        settings, from which :meth:`load` rebuilds it."""
        return {"synthesizer": NAME, **self.settings.to_dict()}

    # ------------------------------------------------------------------ privacy
    def plan(self, rows: int) -> PrivacyLedger:
        """The ledger a fit on ``rows`` private rows will hold, from the settings and the row count alone (a
        budget checks it before any row is read): one rho-zCDP event, rho calibrated to (epsilon, delta)."""
        if rows < 1:
            raise DataError("the private table has no rows")
        s = self.settings
        delta = check_delta(s.delta, rows) if s.delta is not None else default_delta(rows)
        rho = calibrate_zcdp_rho(s.epsilon, delta)
        ledger = PrivacyLedger(rows, delta, accountant=ACCOUNTANT)
        ledger.charge(NAME, zcdp_event(rho),
                      f"AIM (McKenna et al. 2022): every noisy marginal and selection, {rho:.4g}-zCDP in all")
        return ledger

    @staticmethod
    def check_available() -> None:
        """Refuse, before any row is read, an environment without AIM's packages (mbi, jax, opendp)."""
        from dpcare.exceptions import MissingDependencyError
        from dpcare.synth.aim_engine import available

        error = available()
        if error is not None:
            raise MissingDependencyError(f"{error}; or fit the language model (--synthesizer dp-2stage)")

    # ------------------------------------------------------------------ fitting
    def fit(self, df: pd.DataFrame, report: Callable[[str], None] | None = None,
            checkpoint_dir: str | os.PathLike | None = None) -> AIMSynthesizer:
        """Fit on the private table ``df``; returns self. A progress bar follows the share of the budget spent
        (one step per AIM round); ``report`` gets one line before the fit starts. ``checkpoint_dir``: AIM's
        rounds are saved there after each one, and a fit of the same settings and rows resumes from them (they
        hold noisy measurements and a digest of the rows: keep the folder private and delete it afterwards;
        ``dpcare synth fit`` uses its run's staging folder, deleted when the run finishes)."""
        from dpcare.progress import progress
        from dpcare.synth.aim_engine import fit_aim

        self.check_available()
        df = load_table(df, self.schema)
        if len(df) == 0:
            raise DataError("the private table has no rows")
        ledger = self.plan(len(df))
        rho = ledger.entries[0].event.rho
        s = self.settings
        (report or (lambda m: None))(f"AIM: {len(df)} rows, {len(self.layout)} columns, rho = {rho:.4g} "
                                     f"(epsilon {s.epsilon:g}, delta {ledger.delta:.3g}); one round per marginal "
                                     "it measures, minutes on a CPU")
        start = time.perf_counter()
        with progress(total=100, desc="AIM budget spent (%)", disable=not self.progress) as bar:
            def advance(fraction: float) -> None:
                bar.update(max(0.0, round(100 * fraction, 1) - bar.n))

            self.state, self.arrays, accounting = fit_aim(
                df, self.layout, s.bins, rho, max_model_size=s.max_model_size, progress=advance,
                checkpoint=None if checkpoint_dir is None else Path(checkpoint_dir) / CHECKPOINT_FILE)
        if accounting["rho"] != rho or not math.isclose(accounting.get("rho_spent", math.nan), rho, rel_tol=1e-9):
            raise RuntimeError(f"AIM spent rho = {accounting['rho']} ({accounting.get('rho_spent')} by its rounds' "
                               f"tally), not the planned {rho}")
        self.ledger = ledger
        self.info = {"rows": len(df), "rho": rho, "cliques": [list(c) for c in self.state["cliques"]],
                     "fit_seconds": round(time.perf_counter() - start, 3),
                     "aim_fit_seconds": round(accounting["fit_seconds"], 3), "rounds": accounting.get("rounds"),
                     "resumed_after_round": accounting.get("resumed_after_round")}
        return self

    # ------------------------------------------------------------------ fitted state
    @property
    def guarantee(self) -> Guarantee | None:
        return self.ledger.guarantee() if self.ledger is not None else None

    @property
    def guarantee_(self) -> Guarantee:
        self._require_fitted()
        return self.guarantee

    def _require_fitted(self) -> None:
        if self.state is None:
            raise NotFittedError("fit the AIM synthesizer (or load a fitted one) first")

    # ------------------------------------------------------------------ sampling and scoring
    def sample(self, n: int, seed: int | None = None) -> pd.DataFrame:
        """``n`` synthetic rows (post-processing of the fitted model: no privacy cost); ``seed`` defaults to
        the settings' seed."""
        from dpcare.synth.aim_engine import sample_aim

        self._require_fitted()
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise SettingsError(f"n must be a positive integer, got n = {n!r}")
        seed = self.settings.seed if seed is None else seed
        start = time.perf_counter()
        out = sample_aim(self.state, self.arrays, self.layout, self.settings.bins, int(n), seed)
        seconds = time.perf_counter() - start
        self.last_sampling = {"method": "graphical model", "rows": len(out), "seed": seed, "seconds": round(seconds, 3),
                              "rows_per_second": len(out) / seconds if seconds > 0 else None, "valid_rate": 1.0}
        return load_table(out, self.schema)

    def compare_to_public(self, real_test: pd.DataFrame, rows: int = 500, seed: int | None = None,
                          resamples: int = 1000) -> dict[str, Any]:
        """Is the synthetic table worth releasing? As :meth:`dpcare.synth.Synthesizer.compare_to_public`:
        ``rows`` sampled rows against as many declared-support rows, on the real held-out ``real_test``."""
        from dpcare.synth.support_baseline import compare_to_public

        self._require_fitted()
        seed = self.settings.seed if seed is None else seed
        test = load_table(real_test, self.schema)
        check_test_rows(test, self.schema, "the real test table")
        fake = self.sample(rows, seed=seed)
        self.baseline = {**compare_to_public(fake, test, self.schema, seed=seed, resamples=resamples),
                         "sampling": {"method": "graphical model", "seed": seed}}
        return self.baseline

    # ------------------------------------------------------------------ run folders
    def manifest(self, data: dict[str, Any] | None = None) -> Manifest:
        """run.json of the fitted synthesizer: settings, guarantee and ledger, what is public, the baseline."""
        self._require_fitted()
        g = self.guarantee
        m = Manifest(settings=self.run_settings(), data=data or {},
                     files={"state": STATE_FILE, "model": MODEL_FILE})
        m.add_model(NAME, g.to_dict(), self.ledger.state_dict())
        m.not_protected.append("The spec (column names, declared bounds and categories, hence AIM's bins) is a public "
                               "input, outside every guarantee.")
        m.notes += ["Sampling reads no private data: synthetic rows of this model carry its guarantee "
                    "(post-processing). Evaluations attached by `dpcare synth evaluate` read real rows.",
                    NOT_REPRODUCIBLE]
        if self.baseline is not None:
            b = self.baseline
            m.baselines = [b]
            m.metrics += [{"model": NAME, "synthetic table": f"sampled at fit ({b['synthetic_rows']} rows)",
                           "source": "sampled from this run", **b["model_metrics"]},
                          {"model": f"public baseline: {b['name']}",
                           "synthetic table": f"declared support ({b['rows']} rows)", "source": "the spec alone",
                           **b["metrics"]}]
            m.headline = ["AUC XGB"]
            m.notes.append(f"{NAME}: {b['verdict']}")
            from dpcare.verdict import verdict_entry

            m.verdicts = [verdict_entry(NAME, c) for c in b["comparisons"]]
            m.not_protected.append(BASELINE_NOTE)
        m.settings_in_effect = in_effect(self.settings, {"delta": g.delta})
        if self.info:
            m.timing.append({"model": NAME, "fit seconds": self.info.get("fit_seconds"),
                             "marginals measured": len(self.info.get("cliques", []))})
        return m

    def write(self, run: RunFolder, data: dict[str, Any] | None = None) -> Path:
        """Write the fitted model into ``run`` and finish it (run.json last)."""
        self._require_fitted()
        with open(run.path(MODEL_FILE), "wb") as f:  # in the staging folder: moved into place by finish
            np.savez(f, **self.arrays)
        run.write_json(STATE_FILE, {"format": STATE_FORMAT, "schema": self.schema.to_dict(), "model": self.state,
                                    "info": self.info})
        out = run.finish(self.manifest(data))
        self.run_id = run.run_id
        return out

    def save(self, folder: str | Path, force: bool = False) -> Path:
        self._require_fitted()
        return self.write(RunFolder(folder, self.RUN_KIND, self.run_settings(), force=force))

    @classmethod
    def load(cls, folder: str | Path, progress: bool = True) -> AIMSynthesizer:
        """A synthesizer saved by :meth:`save` or ``dpcare synth fit --synthesizer aim``."""
        folder = Path(folder)
        manifest, state = read_state(folder)
        if state.get("format") != STATE_FORMAT:
            raise DataError(f"{folder / STATE_FILE} is not a {STATE_FORMAT} synthesizer state")
        if not (folder / MODEL_FILE).is_file():
            raise MissingFileError(f"{folder} is not a saved AIM synthesizer (no {MODEL_FILE})")
        settings = {k: v for k, v in manifest.settings.items() if k != "synthesizer"}
        self = cls(TableSchema.from_dict(state["schema"]), AIMSettings.from_dict(settings), progress=progress)
        self.state, self.info, self.run_id = state["model"], state.get("info", {}), manifest.run_id
        with np.load(folder / MODEL_FILE) as saved:
            self.arrays = {k: saved[k] for k in saved.files}
        if len(self.arrays) != len(self.state["cliques"]):
            raise DataError(f"{folder / MODEL_FILE} holds {len(self.arrays)} potentials for "
                            f"{len(self.state['cliques'])} cliques")
        self.baseline = manifest.baselines[0] if manifest.baselines else None
        self.ledger = PrivacyLedger.from_state_dict(manifest.models[0]["ledger"])
        return self


__all__ = ["AIMSettings", "AIMSynthesizer"]
