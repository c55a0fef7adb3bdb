"""The forecasting recipe: a forecaster of a patient's next hours (or visits) of vitals and labs, trained on
a hospital's own events. ``fit`` -> :class:`ForecastModel` (``save`` / ``load`` a run folder, ``forecast``
new patients' events). Methods (:data:`METHODS`): ``baseline`` (non-private), ``dp-sgd`` (patient-level
DP-SGD, the only one with a guarantee) and the embedding-space augmentation defences ``zoo``, ``zoo_pca``
and ``mixup`` (zoo-tsf-spec.md: empirical, NO formal guarantee).

Data flow and what each step may read:
- the population is every patient of the data set, read from the id column alone (its count is public:
  the budget is checked on it before any event is read); the split (train / validation / test patients)
  is a function of the patient ids and the seed only, never of a value, time or stay length;
- windows come from stays; a patient without a window of ``input_len + output_len`` steps has none;
- standardisation uses DECLARED public statistics (bundled sets, the user's spec), or statistics fitted
  on the training patients only; DP-SGD refuses fitted statistics (they would be an uncounted release);
- DP-SGD samples training PATIENTS (Poisson), clips the sum of a patient's window gradients as one, and
  its expected batch is ``dp_sampling_rate`` x the training patients of the split (a public count);
  delta defaults to min(1e-5, 0.01/P) over those P training patients (P*delta <= 0.01);
- defences select epochs on the VALIDATION patients; the attacks use the training windows (members) and
  the TEST patients' windows (non-members), which no selection step has seen;
- every run is scored against the forecasts that need no private data on the SAME test windows
  (:mod:`dpcare.timeseries.baselines`: last observation carried forward and the declared mean, a verdict
  against each resampling test patients; the pooled training mean as a reference that reads the training data).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from dpcare.engine import TrainConfig, Trainer
from dpcare.exceptions import DataError, SettingsError, SpecError, UnknownNameError
from dpcare.privacy import NEIGHBOURING, Guarantee, PrivacyLedger, ProtectedUnit, default_delta
from dpcare.runs import Manifest, RunFolder, SavesRunFolder, read_run_of_kind
from dpcare.runs.record import phase
from dpcare.settings import in_effect
from dpcare.timeseries.augment import (
    AugmentConfig,
    embed_windows,
    embedding_losses,
    retrain_with_augmentation,
)
from dpcare.timeseries.baselines import (
    POOLED,
    binding_comparison,
    compare_with_baselines,
    summarise,
    verdict_lines,
)
from dpcare.timeseries.binning import BinnedStays, Standardizer, bin_events
from dpcare.timeseries.datasets import DATASETS, TimeSeriesDataset, events_dataset, load_events
from dpcare.timeseries.events import validate_events
from dpcare.timeseries.model import Forecaster
from dpcare.timeseries.objective import ForecastLoss
from dpcare.timeseries.settings import (
    DEFENCES,
    METHODS,
    ForecastSettings,
    dp_batch_size,
    with_method,
)
from dpcare.timeseries.windows import (
    WindowSet,
    check_patient_splits,
    make_windows,
    split_patients,
    windows_for,
)
from dpcare.verdict import verdict_entry

SPLIT_NAMES = ("train", "validation", "test")
FRACTIONS = (0.64, 0.16, 0.20)
CLIP_Z = 6.0  # z-scores are clipped to +-CLIP_Z (a fixed rule)
KIND = "forecast"
MODEL_FILE, SPLIT_FILE = "model.pt", "split.json"
NO_GUARANTEE = ("NO formal guarantee (a non-private model: the baseline or an augmentation defence; the defences' "
                "attack results are empirical, not a bound).")


# --------------------------------------------------------------------------- data
@dataclass
class TsfData:
    """Standardised windows of every patient, the patient splits and how values were scaled."""

    name: str
    windows: WindowSet | None  # every patient's windows (None when a lazy reader built them split by split)
    splits: dict[str, list[str]]
    standardizer: Standardizer
    step: str
    window: dict[str, int] = field(default_factory=dict)
    parts: dict[str, WindowSet] | None = None  # the windows of each split (a lazy reader: MEDS folders)
    splits_file: str | None = None  # the splits were given by this file (MEDS subject_splits), not drawn
    duplicates: str = "refuse"  # how differing values at one time were combined (binning.resolve_duplicates)

    def part(self, split: str) -> WindowSet:
        if self.parts is None:
            return windows_for(self.windows, self.splits[split])
        if split not in self.parts:
            raise DataError(f"none of the {len(self.splits[split])} given patients has a window")
        return self.parts[split]

    def _any(self) -> WindowSet:
        return self.windows if self.windows is not None else next(iter(self.parts.values()))

    @property
    def variables(self) -> tuple[str, ...]:
        return tuple(self._any().variables)

    @property
    def n_vars(self) -> int:
        return len(self.variables)

    def summary(self) -> dict:
        if self.parts is None:
            with_windows = set(self.windows.patients())
        else:
            with_windows = {p for ws in self.parts.values() for p in ws.patients()}
        some = self._any()
        return {"data": self.name, "variables": list(self.variables), "step": self.step,
                "windows": {s: len(self.part(s)) for s in SPLIT_NAMES},
                "patients": {s: len(self.splits[s]) for s in SPLIT_NAMES},
                "patients_with_windows": {s: len(with_windows & set(self.splits[s])) for s in SPLIT_NAMES},
                "input_len": int(some.x.shape[1]), "output_len": int(some.y.shape[1]),
                "standardisation": self.standardizer.source,
                **({"splits_file": self.splits_file} if self.splits_file else {})}


def prepare_tsf(dataset: str | TimeSeriesDataset = "mimic_demo", events: pd.DataFrame | None = None,
                variables: Sequence[str] | None = None, step: str | None = None, input_len: int | None = None,
                output_len: int | None = None, stride: int | None = None,
                declared: Mapping[str, tuple[float, float]] | None = None,
                fractions: Sequence[float] = FRACTIONS, seed: int = 0, clip_z: float = CLIP_Z,
                population: Iterable[str] | None = None, duplicates: str | None = None,
                split: str = "hash") -> TsfData:
    """Bin, split by patient, standardise and window a bundled data set or a user's event table.

    With ``events`` (canonical event columns, see :func:`dpcare.timeseries.validate_events`), pass
    ``declared`` center/scale per variable for DP runs, else statistics are fitted on the training
    patients. ``population``: the patient ids to split (the recipe: every patient of the data set, read
    from the ids alone); None splits the patients that have a window (the study's protocol). z-scores are
    clipped to +-``clip_z`` (a fixed rule: artefacts such as a temperature in Fahrenheit do not dominate
    the loss). ``duplicates``: how differing values of a variable at one time of a stay are combined
    (:func:`dpcare.timeseries.binning.resolve_duplicates`); None: the data set's declared rule, else refused.
    ``split``: :func:`split_patients`' method."""
    if events is None:
        if not isinstance(dataset, TimeSeriesDataset) and dataset not in DATASETS:
            raise UnknownNameError(f"unknown time-series data set {dataset!r}; choose one of {sorted(DATASETS)} "
                                   "or pass your own events")
        spec = dataset if isinstance(dataset, TimeSeriesDataset) else DATASETS[dataset]
        dataset = spec.name
        variables = list(variables or spec.variables)
        events = spec.load(variables)
        step = step or spec.step
        defaults = spec.window_kwargs()
        declared = declared if declared is not None else spec.declared
        duplicates = duplicates or spec.duplicates
    else:
        events = validate_events(events)
        defaults = {"input_len": 24, "output_len": 24, "stride": 4}
    given = {"input_len": input_len, "output_len": output_len, "stride": stride}
    window = {k: v if v is not None else defaults[k] for k, v in given.items()}
    duplicates = duplicates or "refuse"
    binned = bin_events(events, variables, step or "hour", duplicates)
    patients = make_windows(binned, **window).patients()  # who has a window (observation pattern only)
    if population is not None:
        known = {str(p) for p in population}
        stray = sorted(set(patients) - known)
        if stray:
            raise DataError(f"patient(s) {stray[:5]} have events but are not in the data set's patient list")
        patients = sorted(known)
    splits = split_patients(patients, fractions, seed, SPLIT_NAMES, split)
    check_patient_splits(splits)
    missing = [v for v in binned.variables if not declared or v not in declared]
    if declared and not missing:
        standardizer = Standardizer.declared({v: declared[v] for v in binned.variables})
    else:
        standardizer = Standardizer.fit(binned, splits["train"])
    z = clipped(standardizer.transform(binned), clip_z)
    return TsfData(dataset, make_windows(z, **window), splits, standardizer, binned.step, window,
                   duplicates=duplicates)


def prepare_lazy(dataset: TimeSeriesDataset, input_len: int | None = None, output_len: int | None = None,
                 stride: int | None = None, seed: int = 0, population: Iterable[str] | None = None,
                 clip_z: float = CLIP_Z, spill_dir: str | os.PathLike | None = None,
                 memory_bound: int | None = None, split: str = "hash",
                 fractions: Sequence[float] = FRACTIONS) -> TsfData:
    """:func:`prepare_tsf` for a data set whose reader builds the windows itself, split by split, without the
    event table in memory (``dataset.windows``: MEDS folders). The split: the one the data comes with
    (``dataset.splits()``: MEDS subject_splits), else :func:`split_patients` of ``population``, ``seed`` and
    ``split``.
    Declared statistics of every variable standardise; else they are fitted on the training patients. Windows past
    ``memory_bound`` bytes (default: the reader's, 1 GiB) go to memory-mapped files in ``spill_dir``."""
    if dataset.windows is None:
        raise SettingsError(f"data set {dataset.name!r} has no lazy reader: use prepare_tsf")
    given = dataset.splits()
    if given is None:
        ids = population if population is not None else dataset.patient_ids()
        splits = split_patients(ids, fractions, seed, SPLIT_NAMES, split)
    else:
        splits = {s: list(given[s]) for s in SPLIT_NAMES}
    check_patient_splits(splits)
    defaults = dataset.window_kwargs()
    given_window = {"input_len": input_len, "output_len": output_len, "stride": stride}
    window = {k: v if v is not None else defaults[k] for k, v in given_window.items()}
    variables = list(dataset.variables)
    declared = None if dataset.undeclared(variables) else Standardizer.declared(
        {v: dataset.declared[v] for v in variables})
    fitted: list[Standardizer] = []
    read = dataset.windows(variables=variables, splits=splits, step=dataset.step, standardizer=declared,
                           clip_z=clip_z, spill_dir=spill_dir, standardizer_out=fitted,
                           duplicates=dataset.duplicates, **window,
                           **({} if memory_bound is None else {"memory_bound": memory_bound}))
    return TsfData(dataset.name, None, splits, fitted[0], dataset.step, window, parts=read.parts,
                   splits_file=dataset.splits_file if given is not None else None, duplicates=dataset.duplicates)


def clipped(z: BinnedStays, clip_z: float) -> BinnedStays:
    """z-scores clipped to +-clip_z (NaN, not observed, stays NaN)."""
    return BinnedStays(z.variables, z.stay_ids, z.patient_ids, [np.clip(v, -clip_z, clip_z) for v in z.values], z.step)


def training_patients(patients: Iterable[str], settings: ForecastSettings,
                      dataset: TimeSeriesDataset | None = None) -> int:
    """How many of the ``patients`` (the data set's ids alone: no value is read) the recipe trains on."""
    given = dataset.splits() if dataset is not None else None
    if given is not None:
        empty = [s for s in SPLIT_NAMES if not len(given[s])]
        if empty:
            raise DataError(f"the data set's split(s) {empty} are empty")
        return len(given["train"])
    return len(split_patients(patients, settings.fractions, settings.dp.seed, SPLIT_NAMES, settings.split)["train"])


def plan(settings: ForecastSettings, patients: Iterable[str], dataset: TimeSeriesDataset | None = None
         ) -> Guarantee | None:
    """What :func:`fit` will release on a data set of these ``patients`` (its ids alone), from the settings
    alone: a budget checks it before any event is read. None for a non-private method. With ``dataset``,
    DP-SGD's need for declared statistics is checked from its spec (no event is read)."""
    if not settings.private:
        return None
    if dataset is not None:
        require_declared(dataset)
    n = training_patients(patients, settings, dataset)
    delta = settings.dp.delta if settings.dp.delta is not None else default_delta(n)
    return Guarantee(epsilon=settings.dp.epsilon, delta=delta, n=n, accountant=settings.dp.accountant,
                     unit=ProtectedUnit.PATIENT, neighbouring=NEIGHBOURING[ProtectedUnit.PATIENT])


def require_declared(dataset: TimeSeriesDataset) -> None:
    """DP-SGD needs a declared center and scale for every variable of the data set (from its spec)."""
    missing = dataset.undeclared()
    if missing:
        raise SpecError(f"DP-SGD needs declared standardisation statistics (center/scale per variable in the spec) "
                        f"for every variable; {missing} have none: statistics fitted on the training patients "
                        "would be a release the ledger does not count")


# --------------------------------------------------------------------------- training
def new_model(settings: ForecastSettings, ws: WindowSet, private: bool | None = None) -> Forecaster:
    """A forecaster from a seeded random initialisation (a residual one starts as LOCF) in the parameterisation
    of a DP-SGD (``private``; default: ``settings.private``) or a non-private run. Under the linear
    parameterisation only the per-variable skip is trainable: the engine trains (and noises) nothing else."""
    form = settings.form_for(settings.private if private is None else private)
    torch.manual_seed(settings.dp.seed)
    model = Forecaster(len(ws.variables), int(ws.x.shape[1]), int(ws.y.shape[1]), d_model=settings.d_model,
                       n_heads=settings.n_heads, residual=form != "direct")
    if form == "linear":
        for name, p in model.named_parameters():
            p.requires_grad_(name.startswith("skip."))
    return model


def train_baseline(train: WindowSet, settings: ForecastSettings, progress: bool = False,
                   checkpoint_dir: str | None = None) -> Forecaster:
    """Non-private training on the training windows (Adam, masked MSE)."""
    model = new_model(settings, train, private=False)
    schedule = settings.dp.replace(batch_size=settings.baseline_batch_size, epochs=settings.baseline_epochs, steps=None)
    cfg = TrainConfig(dp=schedule, compute=settings.compute, lr=settings.baseline_lr, progress=progress,
                      checkpoint_dir=checkpoint_dir)
    Trainer(model, ForecastLoss(private=False), cfg).fit(train.tensors())
    return model


def dp_sgd(train: WindowSet, settings: ForecastSettings, standardizer: Standardizer, patients: int | None = None,
           progress: bool = False, checkpoint_dir: str | None = None):
    """Patient-level DP-SGD from a random initialisation: (model, TrainResult). ``patients``: the public
    count of training patients that sets the expected batch and the default delta (None: the patients
    of ``train``, the study's protocol). The ledger counts the patients the engine samples."""
    if standardizer.source != "declared":
        raise SettingsError("DP-SGD needs declared standardisation statistics (center/scale per variable): statistics "
                            "fitted on the training patients would be a release the ledger does not count")
    units = len(train.patients())
    delta = settings.dp.delta
    if delta is None and patients is not None:
        delta = default_delta(patients)
    ledger = PrivacyLedger(units, delta, accountant=settings.dp.accountant, unit=ProtectedUnit.PATIENT)
    dp = settings.dp.replace(batch_size=dp_batch_size(settings, units if patients is None else patients))
    cfg = TrainConfig(dp=dp, compute=settings.compute, lr=settings.dp_lr, progress=progress,
                      checkpoint_dir=checkpoint_dir, max_physical_batch=256)
    model = new_model(settings, train, private=True)
    result = Trainer(model, ForecastLoss(private=True), cfg, ledger).fit(train.tensors(), groups=train.groups())
    return model, result


def train_dp_sgd(train: WindowSet, settings: ForecastSettings, standardizer: Standardizer,
                 patients: int | None = None, progress: bool = False,
                 checkpoint_dir: str | None = None) -> tuple[Forecaster, dict]:
    """:func:`dp_sgd` with its guarantee, ledger and run facts as plain data."""
    model, result = dp_sgd(train, settings, standardizer, patients, progress, checkpoint_dir)
    info = {"guarantee": result.guarantee.to_dict(), "guarantee_text": result.guarantee.describe(),
            "noise_multiplier": result.noise_multiplier, "steps": result.steps, "sampling_rate": result.sampling_rate,
            "backend": result.backend, "ledger": result.ledger.state_dict()}
    return model, info


def train_defended(baseline: Forecaster, train: WindowSet, validation: WindowSet, settings: ForecastSettings,
                   progress: bool = False) -> tuple[Forecaster, dict]:
    """Retrain a copy of the Baseline with embedding-space augmentation (``settings.method``), selecting on
    validation windows."""
    if settings.method not in DEFENCES:
        raise UnknownNameError(f"unknown defence {settings.method!r}; choose one of {DEFENCES}")
    s = settings
    model = copy.deepcopy(baseline)
    scale = float(embed_windows(model, train.x).flatten(1).norm(dim=1).mean())
    mu = s.zoo_mu_rel * scale
    cfg = AugmentConfig(method=s.method, alpha=s.alpha, beta=s.mixup_beta, pca_variance=s.pca_variance,
                        mu=mu, zoo_lr=10 * mu, candidates_per_epoch=s.aug_candidates,
                        max_epochs=s.aug_epochs, lr=s.aug_lr, seed=s.dp.seed)
    result = retrain_with_augmentation(model, embedding_tensors(model, train), embedding_tensors(model, validation),
                                       cfg, progress=progress)
    accepted = sum(r.accepted for r in result.history[1:])
    return result.model, {"epochs": len(result.history) - 1, "accepted_epochs": accepted, "mu": mu,
                          "pca_components": result.pca_components, "history": result.history_dicts()}


def embedding_tensors(model: Forecaster, ws: WindowSet) -> dict[str, torch.Tensor]:
    """Windows for embedding-space training: x, the target the model's embedding path forecasts (y, or for a
    residual forecaster y minus its LOCF-plus-skip anchor, the skip being frozen there) and the mask."""
    return {"x": ws.x, "y": model.target(ws.x, ws.y), "mask": ws.mask}


def window_losses(model: Forecaster, ws: WindowSet, batch: int = 512, chunk: int = 64) -> np.ndarray:
    """Masked MSE of every window (eval mode, no gradients), ``chunk`` batches at a time: the embeddings
    [N, T_in, d_model] of all windows are never held at once (a MEDS folder of 100,000 patients)."""
    step = batch * chunk  # a multiple of the batch: the same batches, hence the same numbers, as in one go
    out = []
    for i in range(0, len(ws), step):
        x, y, mask = ws.x[i:i + step], ws.y[i:i + step], ws.mask[i:i + step]
        out.append(embedding_losses(model, embed_windows(model, x, batch), model.target(x, y), mask, batch).numpy())
    return np.concatenate(out).astype(float) if out else np.zeros(0)


# --------------------------------------------------------------------------- the fitted model
METRICS = {"test_mse": "test MSE", "validation_mse": "validation MSE", "train_mse": "train MSE"}


@dataclass
class ForecastModel(SavesRunFolder):
    """A fitted forecaster with what ``forecast`` needs on new patients' events (standardizer with its
    declared or fitted statistics, variables, step, window lengths), the guarantee (None: none) and ledger,
    metrics (masked MSE in z-units), the patient split and run facts. ``prepared`` (not saved) holds the
    windows it was fitted on, for an audit in the same process. ``baselines``: the baselines' test MSE on the
    same test windows and the verdict (:func:`dpcare.timeseries.baselines.compare_with_baselines`)."""

    RUN_KIND = KIND

    settings: ForecastSettings
    model: Forecaster
    standardizer: Standardizer
    variables: tuple[str, ...]
    step: str
    window: dict[str, int]
    clip_z: float = CLIP_Z
    guarantee: Guarantee | None = None
    ledger: PrivacyLedger | None = field(default=None, repr=False)
    metrics: dict[str, float] = field(default_factory=dict)
    split: dict[str, Any] = field(default_factory=dict, repr=False)
    info: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    prepared: TsfData | None = field(default=None, repr=False)
    baselines: dict[str, Any] | None = None  # the baselines on the same test windows and the verdict
    duplicates: str = "refuse"  # the rule its training data was binned with, applied to new events alike

    # ----------------------------------------------------------------- forecasting
    def forecast(self, events: pd.DataFrame | str | os.PathLike, layout: str = "canonical") -> pd.DataFrame:
        """The next ``output_len`` steps of every stay of ``events`` (a canonical event table, or a file in
        ``layout``), forecast from the stay's last ``input_len`` steps (earlier steps missing when the stay
        is shorter): one row per (stay, future step) with ``horizon`` 1.. and the step's index in the
        stay (``hour`` since the stay's start, or ``visit``), one column per variable in its own units."""
        if isinstance(events, pd.DataFrame):
            chunks: Iterable[pd.DataFrame] = [validate_events(events)]
        elif layout == "meds":  # a few whole subjects at a time, as fit reads MEDS: never the whole folder
            from dpcare.timeseries.meds import event_chunks

            chunks = event_chunks(events, self.variables)
        else:
            chunks = [load_events(events, layout, variables=self.variables)]
        frames = [f for f in map(self._forecast_events, chunks) if f is not None]
        if not frames:
            raise DataError(f"the events hold none of the model's variables {list(self.variables)}")
        return pd.concat(frames, ignore_index=True)

    def _forecast_events(self, events: pd.DataFrame) -> pd.DataFrame | None:
        """:meth:`forecast` of one validated event table (None if it holds none of the variables)."""
        present = [v for v in self.variables if v in set(events["variable"])]
        if not present:
            return None
        binned = bin_events(events, present, self.step, self.duplicates)
        z = clipped(self.standardizer.transform(binned), self.clip_z)
        t_in, t_out, n_vars = self.window["input_len"], self.window["output_len"], len(self.variables)
        cols = [self.variables.index(v) for v in present]
        values = np.full((len(z), t_in, n_vars), np.nan)
        for i, v in enumerate(z.values):
            last = np.full((min(len(v), t_in), n_vars), np.nan)  # variables absent from the events: not observed
            last[:, cols] = v[-t_in:]
            values[i, t_in - len(last):] = last
        seen = ~np.isnan(values)
        x = torch.from_numpy(np.concatenate([np.nan_to_num(values, nan=0.0), seen], axis=2).astype(np.float32))
        self.model.eval()
        with torch.no_grad():
            yhat = torch.cat([self.model(x[i:i + 512]) for i in range(0, len(x), 512)]).double().numpy()
        center = np.array([self.standardizer.center[v] for v in self.variables])
        scale = np.array([self.standardizer.scale[v] for v in self.variables])
        out = yhat * scale + center
        lengths = z.lengths()
        horizon = np.tile(np.arange(1, t_out + 1), len(z))
        frame = pd.DataFrame({"patient_id": np.repeat(z.patient_ids, t_out), "stay_id": np.repeat(z.stay_ids, t_out),
                              "horizon": horizon, self.step: np.repeat(lengths, t_out) + horizon - 1})
        return pd.concat([frame, pd.DataFrame(out.reshape(-1, n_vars), columns=list(self.variables))], axis=1)

    # ----------------------------------------------------------------- run folders
    def manifest(self, data: dict[str, Any] | None = None) -> Manifest:
        method = self.settings.method
        g = self.guarantee
        m = Manifest(settings=self.settings.to_dict(), data={**self.data, **(data or {})}, headline=["test MSE"],
                     files={"model": MODEL_FILE, "split": SPLIT_FILE})
        m.add_model(method, g.to_dict() if g else None, self.ledger.state_dict() if self.ledger is not None else None,
                    note="" if g else NO_GUARANTEE)
        m.metrics = [{"model": method, **{name: self.metrics[k] for k, name in METRICS.items() if k in self.metrics}}]
        if self.baselines is not None:
            b = self.baselines
            m.baselines = list(b["baselines"])
            m.metrics += [{"model": f"{'public baseline' if e['public'] else 'reference'}: {e['name']}", **e["metrics"]}
                          for e in b["baselines"]]
            m.notes += verdict_lines(method, b)
        m.settings["info"] = {k: v for k, v in self.info.items() if k != "history"}
        if self.baselines is not None:
            m.verdicts = [verdict_entry(method, binding_comparison(self.baselines))]
        s = self.settings
        m.settings_in_effect = in_effect(s, {
            "parameterisation": s.form, **{k: self.window.get(k) for k in ("input_len", "output_len", "stride")},
            **({"dp.delta": g.delta, "dp.steps": self.info.get("steps")} if g is not None else {})})
        m.not_protected = [f"{SPLIT_FILE} names the training (member) and held-out patients: patient identifiers, "
                           f"kept in the run folder for audits only; share {MODEL_FILE} and run.json, not it."]
        if g is not None:
            m.not_protected += [
                "Validation and test MSE are exact statistics of the held-out patients' windows: the held-out "
                "patients are outside the guarantee, which covers the training patients.",
                "The guarantee's n is the number of training patients with at least one window (those the engine "
                "samples): an exact count, published as every guarantee publishes n."]
        if self.baselines is not None and g is not None:
            m.not_protected.append(f"The reference '{POOLED}' is the mean of the training patients' targets: its test "
                                   "MSE is a statistic of the training data outside the guarantee (a reference for "
                                   "the reader, not a public baseline and not part of the released model).")
        if self.standardizer.source != "declared":
            m.not_protected.append("Standardisation statistics were fitted on the training patients (no declared "
                                   f"center/scale): a release outside every guarantee, stored in {MODEL_FILE}.")
        return m

    def write(self, run: RunFolder, data: dict[str, Any] | None = None,
              attacks: Sequence[dict[str, str]] = ()) -> Path:
        """Write the model, its split and the manifest into ``run`` and finish it."""
        run.save_torch(MODEL_FILE, {
            "model": self.model.state_dict(),
            "config": {"n_vars": self.model.n_vars, "input_len": self.model.input_len,
                       "output_len": self.model.output_len, "d_model": self.settings.d_model,
                       "n_heads": self.settings.n_heads, "residual": self.model.residual},
            "standardizer": {"center": self.standardizer.center, "scale": self.standardizer.scale,
                             "source": self.standardizer.source},
            "variables": list(self.variables), "step": self.step, "window": dict(self.window), "clip_z": self.clip_z,
            "duplicates": self.duplicates})
        run.write_json(SPLIT_FILE, self.split)
        manifest = self.manifest(data)
        manifest.attacks = list(attacks)
        return run.finish(manifest)

    @classmethod
    def load(cls, folder: str | os.PathLike) -> ForecastModel:
        """A model saved by :meth:`save` or ``dpcare forecast fit`` (in eval mode)."""
        import json

        folder = Path(folder)
        manifest, settings, info = read_run_of_kind(folder, KIND, "a forecaster")
        saved = torch.load(folder / MODEL_FILE, map_location="cpu", weights_only=True)
        if not saved["config"].get("residual", False):  # a run saved before the setting: the paper's forecaster
            settings.setdefault("parameterisation", "direct")
        model = Forecaster(**saved["config"])
        model.load_state_dict(saved["model"])
        model.eval()
        st = saved["standardizer"]
        entry = manifest.models[0]
        names = {name: k for k, name in METRICS.items()}
        metrics = {names[k]: v for k, v in manifest.metrics[0].items() if k in names}
        baselines = summarise(manifest.baselines, manifest.data.get("windows", {}).get("test"),
                              manifest.data.get("patients_with_windows", {}).get("test")) if manifest.baselines else None
        split_path = folder / SPLIT_FILE
        return cls(ForecastSettings.from_dict(settings), model, Standardizer(st["center"], st["scale"], st["source"]),
                   tuple(saved["variables"]), saved["step"], dict(saved["window"]), float(saved["clip_z"]),
                   Guarantee.from_dict(entry["guarantee"]) if entry["guarantee"] else None,
                   PrivacyLedger.from_state_dict(entry["ledger"]) if entry["ledger"] else None, metrics,
                   json.loads(split_path.read_text()) if split_path.exists() else {}, info, dict(manifest.data),
                   baselines=baselines, duplicates=saved.get("duplicates", "first"))  # earlier runs kept the first


# --------------------------------------------------------------------------- fitting
def as_dataset(data: str | TimeSeriesDataset | pd.DataFrame, spec: str | os.PathLike | dict | None = None,
               ) -> TimeSeriesDataset:
    """A bundled data set by name, a TimeSeriesDataset (e.g. :func:`dpcare.timeseries.user_dataset`), or an
    event table in memory with an optional spec (:func:`dpcare.timeseries.events_dataset`)."""
    if isinstance(data, pd.DataFrame):
        return events_dataset(data, spec)
    if spec is not None:
        raise SettingsError("spec is for an event table in memory; a file takes it through user_dataset(path, "
                            "layout, spec)")
    if isinstance(data, TimeSeriesDataset):
        return data
    if isinstance(data, str) and data in DATASETS:
        return DATASETS[data]
    raise UnknownNameError(f"unknown time-series data {data!r}: give a bundled name ({sorted(DATASETS)}), an event "
                           "table (pandas DataFrame) or user_dataset(path, layout, spec)")


def _part(data: TsfData, split: str) -> WindowSet:
    try:
        return data.part(split)
    except DataError:
        w = data.window
        raise DataError(f"no {split} patient has a window of {w.get('input_len')} + {w.get('output_len')} "
                        f"{data.step} steps ({len(data.splits[split])} patients in that split): more patients "
                        "or shorter windows are needed") from None


def fit(data: str | TimeSeriesDataset | pd.DataFrame, settings: ForecastSettings | None = None, *,
        spec: str | os.PathLike | dict | None = None, checkpoint_dir: str | None = None,
        progress: bool = True) -> ForecastModel:
    """Train ``settings.method`` on the training patients (64% of the data set's patients) and score it
    on the validation (16%) and test (20%) patients (masked MSE of every window, z-units), and against the
    baselines on the same test windows (``ForecastModel.baselines``: the verdict)."""
    settings = settings or ForecastSettings()
    dataset = as_dataset(data, spec)
    if settings.private:
        require_declared(dataset)
    population = dataset.patient_ids()
    with phase("splitting patients and cutting windows"):
        if dataset.windows is not None:  # a lazy reader (MEDS folders): windows past memory go to the staging folder
            spill = None if checkpoint_dir is None else Path(checkpoint_dir) / "windows"
            prepared = prepare_lazy(dataset, **settings.window(), seed=settings.dp.seed, population=population,
                                    spill_dir=spill, split=settings.split, fractions=settings.fractions)
        else:
            prepared = prepare_tsf(dataset, **settings.window(), seed=settings.dp.seed, population=population,
                                   split=settings.split, fractions=settings.fractions)
    parts = {s: _part(prepared, s) for s in SPLIT_NAMES}
    train = parts["train"]

    def ckpt(name: str) -> str | None:
        return None if checkpoint_dir is None else str(Path(checkpoint_dir) / name)

    guarantee = ledger = None
    if settings.private:
        with phase("training (dp-sgd)"):
            model, result = dp_sgd(train, settings, prepared.standardizer, len(prepared.splits["train"]), progress,
                                   ckpt("dp-sgd"))
        guarantee, ledger = result.guarantee, result.ledger
        info = {"steps": result.steps, "noise_multiplier": result.noise_multiplier, "backend": result.backend,
                "sampling_rate": result.sampling_rate,
                "expected_patients_per_step": dp_batch_size(settings, len(prepared.splits["train"]))}
    else:
        with phase("training (the non-private baseline forecaster)"):
            model = train_baseline(train, settings, progress, ckpt("baseline"))
        info = {}
        if settings.method in DEFENCES:
            with phase(f"training ({settings.method} defence)"):
                model, info = train_defended(model, train, parts["validation"], settings, progress)
    with phase("scoring every split's windows"):
        losses = {s: window_losses(model, parts[s]) for s in SPLIT_NAMES}
    metrics = {f"{s}_mse": float(losses[s].mean()) for s in SPLIT_NAMES}
    with phase("public baselines and the verdict"):  # on the SAME test windows, resampling test patients
        baselines = compare_with_baselines(losses["test"], parts["test"], train,
                                           declared=prepared.standardizer.source == "declared", seed=settings.dp.seed)
    split = {"seed": settings.dp.seed, "fractions": list(settings.fractions), "patients": len(population),
             **{s: prepared.splits[s] for s in SPLIT_NAMES}}
    if prepared.splits_file:  # the data's own split (MEDS subject_splits), used as given
        split.update(seed=None, fractions=None, splits_file=prepared.splits_file)
    return ForecastModel(settings, model.eval(), prepared.standardizer, tuple(prepared.variables),
                         prepared.step, dict(prepared.window), CLIP_Z, guarantee, ledger, metrics, split, info,
                         prepared.summary(), prepared, baselines, prepared.duplicates)


__all__ = ["CLIP_Z", "DEFENCES", "FRACTIONS", "METHODS", "SPLIT_NAMES", "ForecastModel", "ForecastSettings",
           "TsfData", "as_dataset", "dp_batch_size", "dp_sgd", "fit", "new_model", "plan", "prepare_lazy", "prepare_tsf",
           "require_declared", "train_baseline", "train_defended", "train_dp_sgd", "training_patients",
           "window_losses", "with_method"]
