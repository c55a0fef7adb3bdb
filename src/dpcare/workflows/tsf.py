"""Clinical time-series forecasting under membership inference (embedding-augmentation-mia-tsf.txt):
data preparation, the methods (Baseline, patient-level DP-SGD, ZOO, ZOO-PCA, MixUp), and their attacks.

Data flow and what each step may read:
- windows come from stays; splits are by PATIENT (train / validation / test);
- standardisation uses DECLARED public statistics (bundled sets), or statistics fitted on the
  training patients only; DP-SGD refuses fitted statistics (they would be an uncounted release);
- defences select epochs on the VALIDATION patients; the reported attacks use the training windows
  (members) and the TEST patients' windows (non-members), which no selection step has seen;
- LiRA shadows train with the same recipe on random halves of the train + test patients.
Augmentation gives NO formal guarantee; only DP-SGD has one (per patient, from the ledger).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from dpcare.audit import attack_metrics, lira_scores, loss_attack
from dpcare.engine import TrainConfig, Trainer
from dpcare.exceptions import SettingsError, UnknownNameError
from dpcare.privacy import PrivacyLedger, ProtectedUnit, check_epsilon
from dpcare.timeseries import (
    DATASETS,
    BinnedStays,
    Standardizer,
    TimeSeriesDataset,
    WindowSet,
    bin_events,
    check_patient_splits,
    make_windows,
    split_patients,
    validate_events,
    windows_for,
)
from dpcare.timeseries.augment import (
    AugmentConfig,
    embed_windows,
    embedding_losses,
    retrain_with_augmentation,
)
from dpcare.timeseries.model import Forecaster
from dpcare.timeseries.objective import ForecastLoss

DEFENCES = ("zoo", "zoo_pca", "mixup")
METHODS = ("baseline", "dp-sgd", *DEFENCES)
SPLIT_NAMES = ("train", "validation", "test")


@dataclass
class TsfData:
    """Standardised windows of every patient, the patient splits and how values were scaled."""

    name: str
    windows: WindowSet
    splits: dict[str, list[str]]
    standardizer: Standardizer
    step: str

    def part(self, split: str) -> WindowSet:
        return windows_for(self.windows, self.splits[split])

    @property
    def n_vars(self) -> int:
        return len(self.windows.variables)

    def summary(self) -> dict:
        return {"data": self.name, "variables": list(self.windows.variables), "step": self.step,
                "windows": {s: len(self.part(s)) for s in SPLIT_NAMES},
                "patients": {s: len(self.splits[s]) for s in SPLIT_NAMES},
                "input_len": int(self.windows.x.shape[1]), "output_len": int(self.windows.y.shape[1]),
                "standardisation": self.standardizer.source}


def prepare_tsf(dataset: str | TimeSeriesDataset = "mimic_demo", events: pd.DataFrame | None = None,
                variables: Sequence[str] | None = None, step: str | None = None, input_len: int | None = None,
                output_len: int | None = None, stride: int | None = None,
                declared: Mapping[str, tuple[float, float]] | None = None,
                fractions: Sequence[float] = (0.64, 0.16, 0.20), seed: int = 0, clip_z: float = 6.0) -> TsfData:
    """Bin, split by patient, standardise and window a bundled data set or a user's event table.

    With ``events`` (canonical event columns, see :func:`dpcare.timeseries.validate_events`), pass
    ``declared`` center/scale per variable for DP runs, else statistics are fitted on the training
    patients. z-scores are clipped to +-``clip_z`` (a fixed rule: artefacts such as a temperature in
    Fahrenheit do not dominate the loss)."""
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
    else:
        events = validate_events(events)
        defaults = {"input_len": 24, "output_len": 24, "stride": 4}
    given = {"input_len": input_len, "output_len": output_len, "stride": stride}
    window = {k: v if v is not None else defaults[k] for k, v in given.items()}
    binned = bin_events(events, variables, step or "hour")
    patients = make_windows(binned, **window).patients()  # who has a window (observation pattern only)
    splits = split_patients(patients, fractions, seed, SPLIT_NAMES)
    check_patient_splits(splits)
    missing = [v for v in binned.variables if not declared or v not in declared]
    if declared and not missing:
        standardizer = Standardizer.declared({v: declared[v] for v in binned.variables})
    else:
        standardizer = Standardizer.fit(binned, splits["train"])
    z = standardizer.transform(binned)
    z = BinnedStays(z.variables, z.stay_ids, z.patient_ids, [np.clip(v, -clip_z, clip_z) for v in z.values], z.step)
    return TsfData(dataset, make_windows(z, **window), splits, standardizer, binned.step)


@dataclass
class TsfRecipe:
    """How every model of a run is trained (targets and LiRA shadows alike)."""

    d_model: int = 64
    n_heads: int = 4
    epochs: float = 60.0  # non-private pretraining (the Baseline; long enough to overfit, as the paper's)
    lr: float = 5e-4
    batch_size: int = 32
    dp_sampling_rate: float = 0.25  # expected fraction of training PATIENTS per DP-SGD step
    dp_epochs: float = 15.0
    dp_lr: float = 2e-3
    clip_norm: float = 1.0
    delta: float | None = None  # default 1/P^1.1 over training patients P
    aug_epochs: int = 8
    aug_candidates: int = 256  # candidates per epoch (the paper's 32,000 is GPU scale)
    alpha: float = 0.75
    mixup_beta: float = 1.0
    pca_variance: float = 0.70
    zoo_mu_rel: float = 0.05  # mu as a fraction of the mean Frobenius norm of the real embeddings
    aug_lr: float = 5e-4  # the paper fine-tunes at 5e-5 over ~20x more batches per epoch

    def model(self, n_vars: int, input_len: int, output_len: int, seed: int) -> Forecaster:
        torch.manual_seed(seed)
        return Forecaster(n_vars, input_len, output_len, d_model=self.d_model, n_heads=self.n_heads)


def new_model(recipe: TsfRecipe, ws: WindowSet, seed: int) -> Forecaster:
    return recipe.model(len(ws.variables), int(ws.x.shape[1]), int(ws.y.shape[1]), seed)


def train_baseline(train: WindowSet, recipe: TsfRecipe, seed: int = 0, progress: bool = False,
                   checkpoint_dir: str | None = None) -> Forecaster:
    """Non-private training on the training windows (Adam, masked MSE)."""
    model = new_model(recipe, train, seed)
    cfg = TrainConfig(batch_size=recipe.batch_size, epochs=recipe.epochs, lr=recipe.lr, seed=seed, progress=progress,
                      checkpoint_dir=checkpoint_dir)
    Trainer(model, ForecastLoss(private=False), cfg).fit(train.tensors())
    return model


def train_dp_sgd(train: WindowSet, recipe: TsfRecipe, epsilon: float, standardizer: Standardizer, seed: int = 0,
                 progress: bool = False, checkpoint_dir: str | None = None) -> tuple[Forecaster, dict]:
    """Patient-level DP-SGD from a random initialisation: patients Poisson-sampled, each patient's windows
    clipped as one gradient, the ledger counting patients. Returns the model and its guarantee."""
    check_epsilon(epsilon)
    if standardizer.source != "declared":
        raise SettingsError("DP-SGD needs declared standardisation statistics (center/scale per variable): statistics "
                            "fitted on the training patients would be a release the ledger does not count")
    patients = len(train.patients())
    ledger = PrivacyLedger(patients, recipe.delta, unit=ProtectedUnit.PATIENT)
    cfg = TrainConfig(batch_size=max(1, round(recipe.dp_sampling_rate * patients)), epochs=recipe.dp_epochs,
                      lr=recipe.dp_lr, clip_norm=recipe.clip_norm, target_epsilon=epsilon, seed=seed,
                      progress=progress, checkpoint_dir=checkpoint_dir, max_physical_batch=256)
    model = new_model(recipe, train, seed)
    result = Trainer(model, ForecastLoss(private=True), cfg, ledger).fit(train.tensors(), groups=train.groups())
    info = {"guarantee": result.guarantee.to_dict(), "guarantee_text": result.guarantee.describe(),
            "noise_multiplier": result.noise_multiplier, "steps": result.steps, "sampling_rate": result.sampling_rate,
            "backend": result.backend, "ledger": result.ledger.state_dict()}
    return model, info


def train_defended(baseline: Forecaster, train: WindowSet, validation: WindowSet, method: str, recipe: TsfRecipe,
                   seed: int = 0, progress: bool = False) -> tuple[Forecaster, dict]:
    """Retrain a copy of the Baseline with embedding-space augmentation, selecting on validation windows."""
    if method not in DEFENCES:
        raise UnknownNameError(f"unknown defence {method!r}; choose one of {DEFENCES}")
    model = copy.deepcopy(baseline)
    scale = float(embed_windows(model, train.x).flatten(1).norm(dim=1).mean())
    mu = recipe.zoo_mu_rel * scale
    cfg = AugmentConfig(method=method, alpha=recipe.alpha, beta=recipe.mixup_beta, pca_variance=recipe.pca_variance,
                        mu=mu, zoo_lr=10 * mu, candidates_per_epoch=recipe.aug_candidates,
                        max_epochs=recipe.aug_epochs, lr=recipe.aug_lr, seed=seed)
    result = retrain_with_augmentation(model, train.tensors(), validation.tensors(), cfg, progress=progress)
    accepted = sum(r.accepted for r in result.history[1:])
    return result.model, {"epochs": len(result.history) - 1, "accepted_epochs": accepted, "mu": mu,
                          "pca_components": result.pca_components, "history": result.history_dicts()}


def window_losses(model: Forecaster, ws: WindowSet, batch: int = 512) -> np.ndarray:
    """Masked MSE of every window (eval mode, no gradients)."""
    e = embed_windows(model, ws.x, batch)
    return embedding_losses(model, e, ws.y, ws.mask, batch).numpy().astype(float)


def method_labels(methods: Iterable[str], epsilons: Iterable[float]) -> list[str]:
    """One label per trained model: DP-SGD once per epsilon ('dp-sgd eps=3')."""
    labels = []
    for m in methods:
        if m not in METHODS:
            raise UnknownNameError(f"unknown method {m!r}; choose from {METHODS}")
        labels += [f"dp-sgd eps={e:g}" for e in epsilons] if m == "dp-sgd" else [m]
    return labels


def _epsilon_of(label: str) -> float | None:
    return float(label.split("=")[1]) if label.startswith("dp-sgd") else None


def needs_baseline(label: str) -> bool:
    return label == "baseline" or label in DEFENCES


def train_methods(train: WindowSet, validation: WindowSet, labels: Sequence[str], recipe: TsfRecipe,
                  standardizer: Standardizer, seed: int = 0, progress: bool = False,
                  baseline: Forecaster | None = None, checkpoint_root: str | None = None,
                  ) -> dict[str, tuple[Forecaster, dict]]:
    """Train every labelled model on ``train`` (defences start from one shared Baseline). With
    ``checkpoint_root``, the Baseline and DP-SGD runs checkpoint in sub-folders and resume."""

    def ckpt(name: str) -> str | None:
        return None if checkpoint_root is None else str(Path(checkpoint_root) / name.replace(" ", "_"))

    out: dict[str, tuple[Forecaster, dict]] = {}
    if baseline is None and any(needs_baseline(lab) for lab in labels):
        baseline = train_baseline(train, recipe, seed, progress, ckpt("baseline"))
    for lab in labels:
        eps = _epsilon_of(lab)
        if eps is not None:
            out[lab] = train_dp_sgd(train, recipe, eps, standardizer, seed, progress, ckpt(lab))
        elif lab == "baseline":
            out[lab] = (baseline, {})
        else:
            out[lab] = train_defended(baseline, train, validation, lab, recipe, seed, progress)
    return out


def loss_attack_report(train_losses: np.ndarray, test_losses: np.ndarray, bootstrap: int = 200) -> dict:
    """The paper's LOSS attack (tau = mean real training loss) with members = training windows and
    non-members = TEST windows, plus the ROC metrics."""
    r = loss_attack(train_losses, test_losses, bootstrap=bootstrap)
    return {"tau": r.threshold, "tpr": r.tpr, "fpr": r.fpr, "priv": r.tpr_fpr_ratio, **_flat(r.metrics)}


def _flat(metrics: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    return {k: v["value"] for k, v in metrics.items()} | {f"{k}_ci": [v["low"], v["high"]] for k, v in metrics.items()}


def lira_statistic(losses: np.ndarray) -> np.ndarray:
    """phi = -log(loss): a monotone, roughly Gaussian per-window statistic for a regression loss."""
    return -np.log(np.asarray(losses, float) + 1e-8)


def lira_report(target_losses: np.ndarray, target_in: np.ndarray, shadow_losses: np.ndarray,
                shadow_in: np.ndarray, bootstrap: int = 200) -> dict:
    """LiRA (online and offline) over the population windows from the shadows' losses."""
    online, offline = lira_scores(lira_statistic(target_losses), lira_statistic(shadow_losses), shadow_in)
    return {"online": _flat(attack_metrics(online[target_in], online[~target_in], bootstrap=bootstrap)),
            "offline": _flat(attack_metrics(offline[target_in], offline[~target_in], bootstrap=bootstrap)),
            "shadows": int(shadow_in.shape[0]), "scores": {"members": online[target_in].tolist(),
                                                           "nonmembers": online[~target_in].tolist()}}


@dataclass
class ShadowTask:
    """One LiRA shadow: train every labelled model on a random half of the population's patients."""

    train: WindowSet
    validation: WindowSet
    population: WindowSet
    labels: list[str]
    recipe: TsfRecipe
    standardizer: Standardizer
    seed: int
    members: list[str] = field(default_factory=list)


def run_shadow(task: ShadowTask) -> dict[str, list[float]]:
    """Population losses of each of the shadow's models (runs in a worker process)."""
    torch.set_num_threads(1)
    models = train_methods(task.train, task.validation, task.labels, task.recipe, task.standardizer, task.seed)
    return {lab: window_losses(m, task.population).tolist() for lab, (m, _) in models.items()}

