"""``Synthesizer(schema, ...).fit(df).sample(n)``: DP-2Stage synthetic tables (dp-2stage.txt, Section 4).

Modes (the same code with other settings):

* ``dp-2stage-u``: stage 1 on uniform pseudo data from PUBLIC ranges and categories
  (undeclared ranges are estimated with DP and charged), stage 2 with DP-SGD.
* ``dp-2stage-o``: stage 1 on an unrelated public table (e.g. Adult for a clinical table).
* ``dp-standard``: stage 2 only.
* ``non-private``: one ordinary fine-tuning on the real table (no guarantee).

Stage 1 uses the plain LM loss (Eq. 5), stage 2 the weighted loss (Eq. 6) through
the engine (Poisson sampling, clipping, noise, accounting). The ledger covers every
use of the private table: DP range estimates and training.

Size: ``SynthSettings()`` is the paper's run; ``SynthSettings.for_device()`` (what
``Synthesizer(schema, **fields)`` uses) is the CPU scale on a CPU (see ``dpcare.synth.scale``).
``fit`` first times a few steps on public pseudo rows and logs the estimated run time.
"""

from __future__ import annotations

import hashlib
import json
import logging
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd
import torch

from dpcare.data import TableSchema, load_table
from dpcare.engine.trainer import TrainConfig, Trainer
from dpcare.exceptions import (
    DataError,
    MissingFileError,
    NotFittedError,
    PrivacyParameterError,
    SettingsError,
)
from dpcare.io import torch_save, write_json
from dpcare.privacy import Guarantee, PrivacyLedger
from dpcare.synth.lm_model import LMSettings, build_lm, trainable_state
from dpcare.synth.objective import TokenLoss, role_perplexity
from dpcare.synth.pseudo import numeric_ranges, uniform_pseudo_table
from dpcare.synth.row_tokens import RowTokenizer
from dpcare.synth.sampling import RowSampler, SamplingStats, cells_to_frame
from dpcare.synth.scale import SIZES, FitEstimate, resolve_scale, seconds_per_step, total_steps
from dpcare.synth.serialize import RowSerializer

log = logging.getLogger(__name__)
MODES = ("dp-2stage-u", "dp-2stage-o", "dp-standard", "non-private")
STATE_FILE, WEIGHTS_FILE = "synthesizer.json", "weights.pt"


@dataclass
class StageSettings:
    """Training of one stage (stage 2's epsilon comes from the synthesizer)."""

    epochs: float = 5.0
    batch_size: int = 32
    lr: float = 5e-4
    clip_norm: float = 1.0
    max_physical_batch: int = 64

    def config(self, **kw) -> TrainConfig:
        return TrainConfig(epochs=self.epochs, batch_size=self.batch_size, lr=self.lr, clip_norm=self.clip_norm,
                           max_physical_batch=self.max_physical_batch, **kw)


@dataclass
class SynthSettings:
    mode: str = "dp-2stage-u"
    epsilon: float | None = 1.0
    delta: float | None = None  # default 1/n^1.1
    lam: float | None = 0.65  # Eq. (6) weight on value tokens in stage 2; None: plain loss
    order: str = "target-first"
    precision: int = 2
    pseudo_rows: int | None = None  # stage-1 rows for dp-2stage-u; default: as many as the private table
    stats_epsilon: float = 0.1  # only spent when a numeric column has no declared bounds
    lm: LMSettings = field(default_factory=LMSettings)
    stage1: StageSettings = field(default_factory=lambda: StageSettings(**SIZES["paper"]["stage1"]))
    stage2: StageSettings = field(default_factory=lambda: StageSettings(**SIZES["paper"]["stage2"]))
    seed: int = 0

    def __post_init__(self):
        if self.mode not in MODES:
            raise SettingsError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.mode != "non-private" and (self.epsilon is None or not self.epsilon > 0):
            raise PrivacyParameterError(f"epsilon must be > 0 for {self.mode}, got {self.epsilon!r}")
        if isinstance(self.lm, dict):
            self.lm = LMSettings(**self.lm)
        for name in ("stage1", "stage2"):
            if isinstance(getattr(self, name), dict):
                setattr(self, name, StageSettings(**getattr(self, name)))

    def to_dict(self) -> dict:
        return {**asdict(self), "lm": self.lm.to_dict()}

    @classmethod
    def for_device(cls, scale: str = "auto", **fields) -> SynthSettings:
        """Settings sized for the machine: ``scale`` "auto" (the CPU scale unless the model trains on a
        GPU), "cpu" or "paper". ``lm``, ``stage1`` and ``stage2`` may be settings objects (used as they
        are) or dicts merged over the scale's defaults, where None means "the scale's default"; other
        fields are passed on."""
        size = SIZES[resolve_scale(scale)]
        for name, kind in (("lm", LMSettings), ("stage1", StageSettings), ("stage2", StageSettings)):
            given = fields.get(name)
            if not isinstance(given, kind):
                chosen = {k: v for k, v in (given or {}).items() if v is not None}
                fields[name] = kind(**{**size[name], **chosen})
        return cls(**fields)

    def scale_name(self) -> str:
        """"cpu" or "paper" when model depth and epochs are those of that scale, else "custom"."""
        for name, size in SIZES.items():
            if (self.lm.layers, self.stage1.epochs, self.stage2.epochs) == (
                    size["lm"]["layers"], size["stage1"]["epochs"], size["stage2"]["epochs"]):
                return name
        return "custom"


class Synthesizer:
    """A DP synthetic-table generator built on a local causal language model.

    Without ``settings``, keyword fields go to ``SynthSettings.for_device`` (the CPU scale on a
    CPU). ``fit`` returns self; before it (or ``load``), ``sample``, ``save`` and ``guarantee_``
    raise NotFittedError. ``guarantee`` is the same guarantee, or None when not fitted.
    """

    def __init__(self, schema: TableSchema, settings: SynthSettings | None = None,
                 public_table: pd.DataFrame | None = None, public_schema: TableSchema | None = None,
                 progress: bool = True, **overrides):
        self.schema = schema
        self.settings = settings or SynthSettings.for_device(**overrides)
        if settings is not None and overrides:
            raise SettingsError("pass either settings or keyword overrides, not both")
        if self.settings.mode == "dp-2stage-o" and public_schema is None:
            raise SettingsError("dp-2stage-o needs a public table and its schema for stage 1 (e.g. Adult)")
        self.public_table, self.public_schema, self.progress = public_table, public_schema, progress
        self.serializer = RowSerializer(schema, self.settings.order, self.settings.precision)
        self.model = self.tokenizer = self.rows = None
        self.ranges: dict[str, tuple[float, float]] = {}
        self.ledger: PrivacyLedger | None = None
        self.history: dict[str, list] = {}
        self.last_sampling: SamplingStats | None = None
        self.estimate_: FitEstimate | None = None  # set by fit(estimate=True)

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
        self.model, self.tokenizer = build_lm(self.settings.lm, self._vocab_texts())
        self.rows = RowTokenizer(self.serializer, self.tokenizer)

    def _encode(self, rows: RowTokenizer, df: pd.DataFrame) -> dict[str, torch.Tensor]:
        data = rows.encode_table(df, seed=self.settings.seed)
        data["targets"] = self.model.to_output(data["ids"])
        return data

    def fit(self, df: pd.DataFrame, ledger: PrivacyLedger | None = None, checkpoint_dir: str | None = None,
            stage1_cache: str | Path | None = None, estimate: bool = True,
            report: Callable[[str], None] | None = None) -> Synthesizer:
        """Fit on the private table ``df``; returns self. ``stage1_cache``: a folder where stage-1 models are
        kept by a hash of everything stage 1 depends on (settings, schemas, public ranges), so runs that
        differ only in stage 2 (e.g. epsilon) share one stage 1. ``estimate``: time a few steps first, keep
        the estimate as ``estimate_`` and pass its message to ``report`` (default: log it, as a warning
        when the run is long)."""
        s = self.settings
        df = load_table(df, self.schema)
        if len(df) == 0:
            raise DataError("the private table has no rows")
        if s.mode == "dp-2stage-o" and (self.public_table is None or len(self.public_table) == 0):
            raise DataError("dp-2stage-o needs a non-empty public table for stage 1 (e.g. Adult)")
        private = s.mode != "non-private"
        if private:
            self.ledger = ledger or PrivacyLedger(len(df), s.delta)
        self.ranges = numeric_ranges(self.schema, df, self.ledger, s.stats_epsilon, s.seed)
        self._build()
        if estimate:
            self._announce(len(df), report)
        if s.mode in ("dp-2stage-u", "dp-2stage-o"):
            self._stage1_cached(len(df), checkpoint_dir, stage1_cache)
        data = self._encode(self.rows, df)
        objective = TokenLoss(s.lam if private else None, private=private)
        kw = {"target_epsilon": s.epsilon} if private else {}
        config = s.stage2.config(seed=s.seed + 2, progress=self.progress, **kw,
                                 checkpoint_dir=_sub(checkpoint_dir, "stage2"))
        result = Trainer(self.model, objective, config, self.ledger).fit(data)
        self.history["stage2"] = result.history
        self.noise_multiplier = result.noise_multiplier
        return self

    def _stage1_cached(self, n_private: int, checkpoint_dir: str | None, cache: str | Path | None) -> None:
        if cache is None:
            return self._stage1(n_private, checkpoint_dir)
        s = self.settings
        key = json.dumps({"lm": s.lm.to_dict(), "stage1": asdict(s.stage1), "mode": s.mode, "order": s.order,
                          "precision": s.precision, "rows": s.pseudo_rows or n_private, "seed": s.seed,
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
        s = self.settings
        if s.mode == "dp-2stage-u":
            pseudo = uniform_pseudo_table(self.schema, s.pseudo_rows or n_private, seed=s.seed + 1, ranges=self.ranges)
            data = self._encode(self.rows, pseudo)
        else:
            table = load_table(self.public_table, self.public_schema)
            rows = RowTokenizer(RowSerializer(self.public_schema, s.order, s.precision), self.tokenizer)
            data = self._encode(rows, table)
        config = s.stage1.config(seed=s.seed + 1, progress=self.progress, checkpoint_dir=_sub(checkpoint_dir, "stage1"))
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
        private = s.mode != "non-private"
        stage1_rows = {"dp-2stage-u": s.pseudo_rows or n_private,
                       "dp-2stage-o": len(self.public_table) if self.public_table is not None else 0}.get(s.mode, 0)
        per_step = {}
        for name, stage, objective, rows in (
                ("stage1", s.stage1, TokenLoss(None, private=False), stage1_rows),
                ("stage2", s.stage2, TokenLoss(s.lam if private else None, private=private), n_private)):
            if rows:
                data = self._encode(self.rows, self._timing_rows(stage.batch_size))
                per_step[name] = seconds_per_step(self.model, objective, data, stage.config(seed=s.seed), steps)
        return FitEstimate(total_steps(s.stage1.epochs, stage1_rows, s.stage1.batch_size), per_step.get("stage1", 0.0),
                           total_steps(s.stage2.epochs, n_private, s.stage2.batch_size), per_step["stage2"],
                           s.scale_name())

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
        return uniform_pseudo_table(self.schema, n, seed=self.settings.seed + 7, ranges={**ranges, **self.ranges})

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
        """``n`` synthetic rows (fewer, with a warning, if free generation keeps failing)."""
        rows, stats = self.sampler(temperature, seed).sample(n, method, conditions, batch_size, self.progress)
        self.last_sampling = stats
        if len(rows) < n:
            warnings.warn(f"{method} sampling produced only {len(rows)} valid rows of {n} "
                          f"in {stats.attempts} attempts", stacklevel=2)
        return cells_to_frame(rows, self.schema)

    def perplexity(self, df: pd.DataFrame) -> dict[str, float]:
        """Perplexity of real rows, over all tokens and per role (key, value, other)."""
        self._require_fitted()
        return role_perplexity(self.model, self._encode(self.rows, load_table(df, self.schema)))

    # ------------------------------------------------------------------ persistence
    def save(self, folder: str | Path) -> Path:
        self._require_fitted()
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        torch_save(folder / WEIGHTS_FILE, trainable_state(self.model))
        write_json(folder / STATE_FILE, {
            "schema": self.schema.to_dict(), "public_schema": self.public_schema.to_dict() if self.public_schema else None,
            "settings": self.settings.to_dict(), "ranges": {k: list(v) for k, v in self.ranges.items()},
            "ledger": self.ledger.state_dict() if self.ledger else None,
            "guarantee": self.guarantee.to_dict() if self.ledger else None, "history": self.history})
        return folder

    @classmethod
    def load(cls, folder: str | Path, progress: bool = True) -> Synthesizer:
        folder = Path(folder)
        for name in (STATE_FILE, WEIGHTS_FILE):
            if not (folder / name).is_file():
                raise MissingFileError(f"{folder} is not a saved synthesizer (no {name})")
        state = json.loads((folder / STATE_FILE).read_text())
        public = TableSchema.from_dict(state["public_schema"]) if state["public_schema"] else None
        settings = SynthSettings(**state["settings"])
        self = cls(TableSchema.from_dict(state["schema"]), settings, progress=progress, public_schema=public)
        self.ranges = {k: tuple(v) for k, v in state["ranges"].items()}
        self.history = state["history"]
        self.ledger = PrivacyLedger.from_state_dict(state["ledger"]) if state["ledger"] else None
        self._build()
        weights = torch.load(folder / WEIGHTS_FILE, weights_only=True)
        missing = set(weights) - set(self.model.state_dict())
        if missing:
            raise DataError(f"{folder} holds weights this model does not have: {sorted(missing)[:5]}")
        self.model.load_state_dict(weights, strict=False)
        return self


def _sub(folder: str | None, name: str) -> str | None:
    return str(Path(folder) / name) if folder else None
