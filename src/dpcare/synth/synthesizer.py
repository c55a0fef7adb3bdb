"""``Synthesizer(schema, ...).fit(df).sample(n)``: DP-2Stage synthetic tables (Afonja et al., Section 4).

Modes (the same code with other settings):

* ``dp-2stage-u``: stage 1 on uniform pseudo data from PUBLIC ranges and categories
  (undeclared ranges are estimated with DP and charged), stage 2 with DP-SGD.
* ``dp-2stage-o``: stage 1 on an unrelated public table (e.g. Adult for a clinical table).
* ``dp-standard``: stage 2 only.
* ``non-private``: one ordinary fine-tuning on the real table (no guarantee).

Stage 1 uses the plain LM loss (Eq. 5) and reads only public rows; stage 2 the weighted loss
(Eq. 6) through the engine (Poisson sampling, clipping, noise, accounting), configured by the
shared DP settings ``settings.dp`` (:class:`~dpcare.synth.settings.SynthSettings`). The ledger
covers every use of the private table: DP range estimates and training. :func:`plan` states the
guarantee from the settings and the row count alone, so a budget is checked before a row is read.

Size: ``SynthSettings()`` is the paper's run; ``SynthSettings.for_device()`` (what
``Synthesizer(schema, **fields)`` uses) is the CPU scale on a CPU (see ``dpcare.synth.settings``).
``fit`` first times a few steps on public pseudo rows and logs the estimated run time.

Saved form: a run folder (:mod:`dpcare.runs`) with ``run.json`` (the settings, the guarantee and ledger
state, what is not protected, evaluations attached later), ``synthesizer.json`` (schemas, public ranges,
training history) and ``weights.pt`` (the fine-tuned parameters). Folders saved by dpcare before the
run-folder format (a ``synthesizer.json`` without ``run.json``) do not load: fit again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from dpcare.caller import user_stacklevel
from dpcare.data import TableSchema, load_table
from dpcare.data.splits import holdout_split as split_holdout
from dpcare.engine.initialisation import seeded_initialisation
from dpcare.engine.trainer import TrainConfig, Trainer, check_ledger_agrees
from dpcare.exceptions import DataError, MissingFileError, NotFittedError, SettingsError
from dpcare.io import torch_save, write_json
from dpcare.privacy import (
    NEIGHBOURING,
    Guarantee,
    PrivacyLedger,
    ProtectedUnit,
    check_delta,
    default_delta,
)
from dpcare.runs import MANIFEST, Manifest, RunFolder, SavesRunFolder, read_manifest
from dpcare.settings import in_effect, to_dict
from dpcare.synth.lm_model import build_lm, trainable_state
from dpcare.synth.objective import TokenLoss, role_perplexity
from dpcare.synth.pseudo import numeric_ranges, uniform_pseudo_table
from dpcare.synth.row_tokens import RowTokenizer
from dpcare.synth.sampling import RowSampler, SamplingStats, cells_to_frame
from dpcare.synth.saved import BASELINE_NOTE, KIND, STATE_FILE, check_test_rows, read_state
from dpcare.synth.scale import FitEstimate, seconds_per_step, total_steps
from dpcare.synth.serialize import RowSerializer
from dpcare.synth.settings import MODES, LMSettings, Stage2Settings, StageSettings, SynthSettings

log = logging.getLogger(__name__)
WEIGHTS_FILE = "weights.pt"
STATE_FORMAT = "dpcare-synthesizer/2"
HEADLINE = ("F1 XGB", "HIST20", "Pair", "CorAcc")
REFERENCE = "real training table (reference)"
#: the fraction of the private table ``dpcare synth fit`` holds out as real test rows (without --test)
HOLDOUT = 0.1
EVALUATION_NOTE = ("The metrics of `dpcare synth evaluate` read the real training and test tables: they are a release "
                   "outside the guarantee, for those allowed to see the data (only the synthesizer is covered).")


def plan(settings: SynthSettings, rows: int) -> Guarantee | None:
    """What :meth:`Synthesizer.fit` releases on a private table of ``rows`` rows, from the settings and the
    row count alone: a budget checks it before any row is read. Every row trains in stage 2 (no hold-out),
    so n = ``rows``, the unit a row, delta the given one or min(1e-5, 0.01/n). None in non-private mode."""
    if not settings.private:
        return None
    if rows < 1:
        raise DataError("the private table has no rows")
    dp = settings.dp
    delta = check_delta(dp.delta, rows) if dp.delta is not None else default_delta(rows)
    return Guarantee(epsilon=dp.epsilon, delta=delta, unit=ProtectedUnit.EXAMPLE,
                     neighbouring=NEIGHBOURING[ProtectedUnit.EXAMPLE], accountant=dp.accountant, n=rows)


def holdout_split(rows: int, fraction: float = HOLDOUT, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(training, test) row positions of a private table (:func:`dpcare.data.splits.holdout_split`, default
    fraction :data:`HOLDOUT`)."""
    return split_holdout(rows, fraction, seed)


def stage1_source(settings: SynthSettings, public_schema: TableSchema | None = None) -> str | None:
    """What stage 1 trains on, in words (None: there is no stage 1)."""
    if settings.mode == "dp-2stage-u":
        return "uniform pseudo rows drawn from the spec's declared ranges and categories"
    if settings.mode == "dp-2stage-o":
        name = public_schema.name if public_schema is not None and public_schema.name else "given"
        return f"the public table ({name})"
    return None


class Synthesizer(SavesRunFolder):
    """A DP synthetic-table generator built on a local causal language model.

    Without ``settings``, keyword fields go to ``SynthSettings.for_device`` (the CPU scale on a
    CPU; DP fields such as ``epsilon=`` may be given as keywords). ``fit`` returns self; before it
    (or ``load``), ``sample``, ``save`` and ``guarantee_`` raise NotFittedError. ``guarantee`` is the
    same guarantee, or None when not fitted.
    """

    RUN_KIND = KIND

    def __init__(self, schema: TableSchema, settings: SynthSettings | None = None,
                 public_table: pd.DataFrame | None = None, public_schema: TableSchema | None = None,
                 progress: bool = True, **overrides: Any):
        if settings is not None and overrides:
            raise SettingsError("pass either settings or keyword overrides, not both")
        self.schema = schema
        self.settings = settings if settings is not None else SynthSettings.for_device(**overrides)
        if self.settings.mode == "dp-2stage-o" and public_schema is None:
            raise SettingsError("dp-2stage-o needs a public table and its schema for stage 1 (e.g. Adult)")
        self.public_table, self.public_schema, self.progress = public_table, public_schema, progress
        self.serializer = RowSerializer(schema, self.settings.order, self.settings.decimals)
        self.model = self.tokenizer = self.rows = None
        self.ranges: dict[str, tuple[float, float]] = {}
        self.ledger: PrivacyLedger | None = None
        self.history: dict[str, list] = {}
        self.info: dict[str, Any] = {}  # stage-2 steps, noise multiplier, sampling rate, fit seconds
        self.run_id: str | None = None  # the run folder's id, once saved or loaded
        self.last_sampling: SamplingStats | None = None
        self.estimate_: FitEstimate | None = None  # set by fit(estimate=True)
        self.baseline: dict[str, Any] | None = None  # set by compare_to_public: the run.json baselines record

    # ------------------------------------------------------------------ fitting
    def _vocab_texts(self) -> list[str]:
        """Every public string a row can contain (keys, separators, categories, 'missing')."""
        texts = [", ", " is", ",", " missing", "missing"]
        for schema in filter(None, (self.schema, self.public_schema)):
            for c in schema.columns:
                texts += [c.name, " " + c.name]
                texts += [" " + v for v in (c.categories or ())]
        return texts

    def _build(self) -> None:
        """Build the model; its new parameters (the LoRA adapters) are drawn from the settings' seed, not from
        torch's global generator, so a fit does not depend on what drew from that generator before it."""
        with seeded_initialisation(self.settings.dp.seed):
            self.model, self.tokenizer = build_lm(self.settings.lm, self._vocab_texts())
        self.rows = RowTokenizer(self.serializer, self.tokenizer)

    def _encode(self, rows: RowTokenizer, df: pd.DataFrame) -> dict[str, torch.Tensor]:
        data = rows.encode_table(df, seed=self.settings.dp.seed)
        data["targets"] = self.model.to_output(data["ids"])
        return data

    def _stage1_config(self, seed: int, **engine: Any) -> TrainConfig:
        """Stage 1's config (non-private, on public pseudo rows): its own schedule with the public ``seed``."""
        s, st = self.settings, self.settings.stage1
        schedule = s.dp.replace(epochs=st.epochs, batch_size=st.batch_size, steps=None, seed=seed)
        return TrainConfig(dp=schedule, compute=s.compute, lr=st.lr, max_physical_batch=st.max_physical_batch,
                           **engine)

    def _stage2_config(self, **engine: Any) -> TrainConfig:
        """The engine's config of stage 2: the DP settings (seed + 2, so that stage 1 and 2 draw apart; a pinned
        noise_seed + 2 too, as the noise was drawn before it was split from the seed) and stage 2's own knobs."""
        s = self.settings
        return TrainConfig(dp=s.dp.shifted(2), compute=s.compute, lr=s.stage2.lr,
                           max_physical_batch=s.stage2.max_physical_batch, **engine)

    def fit(self, df: pd.DataFrame, ledger: PrivacyLedger | None = None, checkpoint_dir: str | None = None,
            stage1_cache: str | Path | None = None, estimate: bool = True,
            report: Callable[[str], None] | None = None) -> Synthesizer:
        """Fit on the private table ``df``; returns self. ``checkpoint_dir``: each stage checkpoints there, and
        a fit rerun with the same folder resumes. ``stage1_cache``: a folder where stage-1 models are kept by a
        hash of everything stage 1 depends on (settings, schemas, public ranges), so runs that differ only in
        stage 2 (e.g. epsilon) share one stage 1. ``estimate``: time a few steps first, keep the estimate as
        ``estimate_`` and pass its message to ``report`` (default: log it, as a warning when the run is long)."""
        s = self.settings
        df = load_table(df, self.schema)
        if len(df) == 0:
            raise DataError("the private table has no rows")
        if s.mode == "dp-2stage-o" and (self.public_table is None or len(self.public_table) == 0):
            raise DataError("dp-2stage-o needs a non-empty public table for stage 1 (e.g. Adult)")
        start = time.perf_counter()
        if s.private:
            self.ledger = ledger or PrivacyLedger(len(df), s.dp.delta, accountant=s.dp.accountant)
            check_ledger_agrees(self.ledger, s.dp)  # before anything is charged to it
        self.ranges = numeric_ranges(self.schema, df, self.ledger, s.stats_epsilon, s.dp.noise_seed,
                                     keep=_sub(checkpoint_dir, "stage2"))
        self._build()
        if estimate:
            self._announce(len(df), report)
        if s.mode in ("dp-2stage-u", "dp-2stage-o"):
            self._stage1_cached(len(df), checkpoint_dir, stage1_cache)
        data = self._encode(self.rows, df)
        objective = TokenLoss(s.lam if s.private else None, private=s.private)
        config = self._stage2_config(progress=self.progress, checkpoint_dir=_sub(checkpoint_dir, "stage2"))
        result = Trainer(self.model, objective, config, self.ledger).fit(data)
        self.history["stage2"] = result.history
        self.noise_multiplier = result.noise_multiplier
        self.info = {"rows": len(df), "stage2_steps": result.steps, "sampling_rate": result.sampling_rate,
                     "noise_multiplier": result.noise_multiplier, "clip_norm": result.clip_norm,
                     "fit_seconds": round(time.perf_counter() - start, 3)}
        return self

    def _stage1_cached(self, n_private: int, checkpoint_dir: str | None, cache: str | Path | None) -> None:
        if cache is None:
            return self._stage1(n_private, checkpoint_dir)
        s = self.settings
        key = json.dumps({"lm": s.lm.to_dict(), "stage1": to_dict(s.stage1), "mode": s.mode, "order": s.order,
                          "decimals": s.decimals, "rows": s.pseudo_rows or n_private, "seed": s.dp.seed,
                          "schema": self.schema.to_dict(), "ranges": self.ranges,
                          "public": self.public_schema.to_dict() if self.public_schema else None,
                          "public_rows": len(self.public_table) if self.public_table is not None else 0},
                         sort_keys=True, default=str)
        path = Path(cache) / f"stage1-{hashlib.sha256(key.encode()).hexdigest()[:16]}.pt"
        if path.exists():
            saved = torch.load(path, weights_only=True)
            self.model.load_state_dict(saved["weights"], strict=False)
            self.history["stage1"] = saved["history"]
            log.info("stage 1 loaded from %s", path)
            return
        self._stage1(n_private, checkpoint_dir)
        torch_save(path, {"weights": trainable_state(self.model), "history": self.history["stage1"]})

    def _stage1(self, n_private: int, checkpoint_dir: str | None) -> None:
        """Stage 1 on PUBLIC rows only: pseudo rows from the public ranges, or the public table."""
        s = self.settings
        if s.mode == "dp-2stage-u":
            pseudo = uniform_pseudo_table(self.schema, s.pseudo_rows or n_private, seed=s.dp.seed + 1,
                                          ranges=self.ranges)
            data = self._encode(self.rows, pseudo)
        else:
            table = load_table(self.public_table, self.public_schema)
            rows = RowTokenizer(RowSerializer(self.public_schema, s.order, s.decimals), self.tokenizer)
            data = self._encode(rows, table)
        config = self._stage1_config(seed=s.dp.seed + 1, progress=self.progress,
                                     checkpoint_dir=_sub(checkpoint_dir, "stage1"))
        result = Trainer(self.model, TokenLoss(None, private=False), config).fit(data)
        self.history["stage1"] = result.history

    # ------------------------------------------------------------------ run time
    def estimate_fit(self, rows: int | pd.DataFrame, steps: int = 1) -> FitEstimate:
        """Seconds ``fit`` would take on ``rows`` private rows (only their number is read): ``steps``
        steps of each stage are timed on public pseudo rows, then multiplied by the run's step counts."""
        built = self.model is not None
        if not built:
            self._build()
        try:
            return self._estimate(rows if isinstance(rows, int) else len(rows), steps)
        finally:
            if not built:
                self.model = self.tokenizer = self.rows = None

    def _estimate(self, n_private: int, steps: int = 1) -> FitEstimate:
        s = self.settings
        stage1_rows = {"dp-2stage-u": s.pseudo_rows or n_private,
                       "dp-2stage-o": len(self.public_table) if self.public_table is not None else 0}.get(s.mode, 0)
        per_step = {}
        stage2 = self._stage2_config().with_schedule(seed=s.dp.seed)  # timing runs with the plain seed, as stage 1's
        for name, config, objective, rows in (
                ("stage1", self._stage1_config(seed=s.dp.seed), TokenLoss(None, private=False), stage1_rows),
                ("stage2", stage2, TokenLoss(s.lam if s.private else None, private=s.private), n_private)):
            if rows:
                data = self._encode(self.rows, self._timing_rows(config.dp.batch_size))
                per_step[name] = seconds_per_step(self.model, objective, data, config, steps)
        stage2_steps = s.dp.steps if s.dp.steps is not None else total_steps(s.dp.epochs, n_private, s.dp.batch_size)
        return FitEstimate(total_steps(s.stage1.epochs, stage1_rows, s.stage1.batch_size), per_step.get("stage1", 0.0),
                           stage2_steps, per_step["stage2"], s.scale_name(), s.private)

    def _announce(self, n_private: int, report: Callable[[str], None] | None) -> None:
        try:
            self.estimate_ = self._estimate(n_private)
        except ValueError as err:  # e.g. undeclared categories: no public pseudo rows to time
            log.info("no run-time estimate: %s", err)
            return
        if report is None:
            log.log(logging.WARNING if self.estimate_.long else logging.INFO, self.estimate_.message())
        else:
            report(self.estimate_.message())

    def _timing_rows(self, n: int) -> pd.DataFrame:
        """``n`` uniform pseudo rows (public: only declared or already estimated ranges are read)."""
        ranges = {c.name: c.bounds or (0.0, 100.0) for c in self.schema.columns if c.kind == "numeric"}
        return uniform_pseudo_table(self.schema, n, seed=self.settings.dp.seed + 7, ranges={**ranges, **self.ranges})

    # ------------------------------------------------------------------ fitted state
    @property
    def guarantee(self) -> Guarantee | None:
        return self.ledger.guarantee() if self.ledger is not None else None

    @property
    def guarantee_(self) -> Guarantee | None:
        """The fitted synthesizer's guarantee (None for non-private); NotFittedError before fit."""
        self._require_fitted()
        return self.guarantee

    def _require_fitted(self) -> None:
        if self.model is None:
            raise NotFittedError("fit the synthesizer (or load a fitted one) first")

    # ------------------------------------------------------------------ sampling and scoring
    def sampler(self, temperature: float = 1.0, seed: int = 0) -> RowSampler:
        self._require_fitted()
        return RowSampler(self.model, self.rows, self.ranges, temperature=temperature, seed=seed)

    def sample(self, n: int, method: str = "constrained", conditions: pd.DataFrame | None = None,
               temperature: float = 1.0, batch_size: int = 256, seed: int = 0) -> pd.DataFrame:
        """``n`` synthetic rows (fewer, with a warning, if free generation keeps failing). Sampling reads
        no private data: the rows carry the fitted model's guarantee (post-processing)."""
        rows, stats = self.sampler(temperature, seed).sample(n, method, conditions, batch_size, self.progress)
        self.last_sampling = stats
        if len(rows) < n:
            warnings.warn(f"{method} sampling produced only {len(rows)} valid rows of {n} "
                          f"in {stats.attempts} attempts", stacklevel=user_stacklevel())
        return cells_to_frame(rows, self.schema)

    def compare_to_public(self, real_test: pd.DataFrame, rows: int = 500, seed: int | None = None,
                          resamples: int = 1000) -> dict[str, Any]:
        """Is the synthetic table worth releasing? Sample ``rows`` rows (constrained decoding), draw as many rows
        from the spec's declared support (the public baseline, :mod:`dpcare.synth.support_baseline`), train the
        ML-efficacy models on each and compare their AUROC on the real held-out ``real_test`` rows (rows that
        did not train the synthesizer) with a paired bootstrap. Keeps and returns the record (``baseline``),
        which :meth:`manifest` writes into run.json; its ``verdict`` says "beats the public baseline", "no
        better than the public baseline: do not release" or "undefined: the synthetic table has one class of
        the target". ``seed``: of sampling, the baseline draw and the models (default: the settings' seed)."""
        from dpcare.synth.support_baseline import compare_to_public

        self._require_fitted()
        seed = self.settings.dp.seed if seed is None else seed
        test = load_table(real_test, self.schema)
        check_test_rows(test, self.schema, "the real test table")
        fake = self.sample(rows, seed=seed)
        self.baseline = {**compare_to_public(fake, test, self.schema, seed=seed, resamples=resamples),
                         "sampling": {"method": "constrained", "seed": seed}}
        return self.baseline

    def perplexity(self, df: pd.DataFrame) -> dict[str, float]:
        """Perplexity of real rows, over all tokens and per role (key, value, other)."""
        self._require_fitted()
        return role_perplexity(self.model, self._encode(self.rows, load_table(df, self.schema)))

    # ------------------------------------------------------------------ run folders
    def manifest(self, data: dict[str, Any] | None = None) -> Manifest:
        """run.json of the fitted synthesizer: its settings, guarantee and ledger state, what is not
        protected (the public inputs of stage 1 and of the model), its fit time."""
        self._require_fitted()
        s, g = self.settings, self.guarantee
        m = Manifest(settings=s.to_dict(), data=data or {}, files={"state": STATE_FILE, "weights": WEIGHTS_FILE})
        m.add_model(s.mode, g.to_dict() if g else None, self.ledger.state_dict() if self.ledger is not None else None,
                    note="" if g else "NO differential privacy guarantee (non-private fine-tuning).")
        source = stage1_source(s, self.public_schema)
        if source:
            m.not_protected.append(f"Stage 1 reads only public data ({source}): outside every guarantee.")
        m.not_protected.append("The spec (column names, declared bounds and categories) and the pretrained language "
                               f"model ({s.lm.model}) are public inputs, outside every guarantee.")
        m.notes.append("Sampling reads no private data: synthetic rows of this model carry its guarantee "
                       "(post-processing). Evaluations attached by `dpcare synth evaluate` read real rows.")
        if self.baseline is not None:
            b = self.baseline
            m.baselines = [b]
            m.metrics += [{"model": s.mode, "synthetic table": f"sampled at fit ({b['synthetic_rows']} rows)",
                           "source": "sampled from this run", **b["model_metrics"]},
                          {"model": f"public baseline: {b['name']}",
                           "synthetic table": f"declared support ({b['rows']} rows)", "source": "the spec alone",
                           **b["metrics"]}]
            m.headline = m.headline or ["AUC XGB"]
            m.notes.append(f"{s.mode}: {b['verdict']}")
            from dpcare.verdict import verdict_entry

            m.verdicts = [verdict_entry(s.mode, c) for c in b["comparisons"]]
            m.not_protected.append(BASELINE_NOTE)
        m.settings_in_effect = in_effect(s, {"dp.delta": g.delta} if g else {}, method=s.mode)
        if self.info:
            m.timing.append({"model": s.mode, "fit seconds": self.info.get("fit_seconds"),
                             "stage-2 steps": self.info.get("stage2_steps")})
        return m

    def write(self, run: RunFolder, data: dict[str, Any] | None = None) -> Path:
        """Write the fitted synthesizer's files into ``run`` and finish it (run.json last)."""
        self._require_fitted()
        run.save_torch(WEIGHTS_FILE, trainable_state(self.model))
        run.write_json(STATE_FILE, {
            "format": STATE_FORMAT, "schema": self.schema.to_dict(),
            "public_schema": self.public_schema.to_dict() if self.public_schema else None,
            "ranges": {k: list(v) for k, v in self.ranges.items()}, "history": self.history, "info": self.info})
        out = run.finish(self.manifest(data))
        self.run_id = run.run_id
        return out

    def save(self, folder: str | Path, force: bool = False) -> Path:
        """Write a run folder (refused if ``folder`` holds something, unless ``force``)."""
        self._require_fitted()
        return super().save(folder, force=force)

    @classmethod
    def load(cls, folder: str | Path, progress: bool = True) -> Synthesizer:
        """A synthesizer saved by :meth:`save` or ``dpcare synth fit`` (works in a fresh process)."""
        folder = Path(folder)
        manifest, state = read_state(folder)
        if state.get("format") != STATE_FORMAT:
            raise DataError(f"{folder / STATE_FILE} is not a {STATE_FORMAT} synthesizer state (format "
                            f"{state.get('format')!r}; dpcare.synth.load_synthesizer loads either kind)")
        if not (folder / WEIGHTS_FILE).is_file():
            raise MissingFileError(f"{folder} is not a saved synthesizer (no {WEIGHTS_FILE})")
        public = TableSchema.from_dict(state["public_schema"]) if state["public_schema"] else None
        settings = SynthSettings.from_dict(manifest.settings)
        self = cls(TableSchema.from_dict(state["schema"]), settings, progress=progress, public_schema=public)
        self.ranges = {k: tuple(v) for k, v in state["ranges"].items()}
        self.history, self.info, self.run_id = state["history"], state.get("info", {}), manifest.run_id
        self.baseline = manifest.baselines[0] if manifest.baselines else None
        ledger = manifest.models[0].get("ledger")
        self.ledger = PrivacyLedger.from_state_dict(ledger) if ledger else None
        self._build()
        weights = torch.load(folder / WEIGHTS_FILE, weights_only=True)
        missing = set(weights) - set(self.model.state_dict())
        if missing:
            raise DataError(f"{folder} holds weights this model does not have: {sorted(missing)[:5]}")
        self.model.load_state_dict(weights, strict=False)
        return self


def attach_evaluation(folder: str | Path, table: str, report: dict[str, Any],
                      sampling: dict[str, Any] | None = None) -> Manifest:
    """Add the evaluation of a synthetic table (an ``evaluate_synthetic`` report, with ``perplexity`` if
    measured) to the finished synthesizer run ``folder``: metrics rows of the table and of the real training
    table (the reference) in run.json, the sampling speed as a timing row, and a line saying the metrics read
    real rows. ``sampling``: the record ``dpcare synth sample`` wrote beside the table; it must name this run
    (a table sampled from another run is refused). Rows of an earlier evaluation of ``table`` are replaced."""
    from dpcare.synth.evaluate import summary

    folder = Path(folder)
    m = read_manifest(folder)
    if m.kind != KIND:
        raise DataError(f"{folder} holds a {m.kind!r} run, not a saved synthesizer")
    if sampling is not None and sampling.get("run_id") != m.run_id:
        raise DataError(f"{table} was sampled from run {sampling.get('run_id')!r}, not from the run in {folder} "
                        f"({m.run_id!r}): its metrics are not added to that run")
    model = m.models[0]["name"]
    provenance = "sampled from this run" if sampling is not None else "provenance not recorded"
    rows = [{"model": model, "synthetic table": table, "source": provenance, **summary(report)}]
    if "real_baseline" in report:
        rows.append({"model": REFERENCE, "synthetic table": table, "source": "real rows",
                     **summary(report["real_baseline"])})
    m.metrics = [r for r in m.metrics if r.get("synthetic table") != table] + rows
    m.headline = list(dict.fromkeys([*HEADLINE, *m.headline]))
    m.timing = [t for t in m.timing if t.get("synthetic table") != table]
    if sampling is not None:
        m.timing.append({"model": f"{model} sampling ({sampling.get('method')})", "synthetic table": table,
                         "rows": sampling.get("rows"), "rows per second": sampling.get("rows_per_second"),
                         "valid rate": sampling.get("valid_rate")})
    if EVALUATION_NOTE not in m.not_protected:
        m.not_protected.append(EVALUATION_NOTE)
    write_json(folder / MANIFEST, m.to_dict())
    return m


def _sub(folder: str | None, name: str) -> str | None:
    return str(Path(folder) / name) if folder else None


__all__ = ["HEADLINE", "HOLDOUT", "KIND", "MODES", "LMSettings", "Stage2Settings", "StageSettings", "SynthSettings",
           "Synthesizer", "attach_evaluation", "check_test_rows", "holdout_split", "plan", "stage1_source"]
