"""The tabular recipe: a DP classifier on a table with a privacy spec. ``fit`` -> :class:`TabularModel`
(``save`` / ``load`` a run folder, ``predict_proba`` / ``predict`` new rows).

Methods (:data:`METHODS`): ``non-private``, ``dp-sgd`` (whole rows), ``feature-dp`` (the private columns,
Mahloujifar et al., Algorithm 1), ``label-dp`` (the label), and the FusionDP family (Zeng et al.,
Section 4): ``naive-fusion``, ``naive-fusion-pub``, ``calibrated-fusion`` and ``fusiondp``, whose
hybrid rows take the private columns from an imputer fitted ONLY on a declared public support table.

What each branch may read: the public tensors are built from ``public_view(frame)`` (a frame without
the private columns) and, for the hybrid view, from the imputer's predictions on that same public
view; the imputer never sees a private value of the private table. Encoder statistics of protected
columns are declared in the spec or estimated with DP and charged (``stats_epsilon``).

The split (train / validation / test row positions) is a function of the seed and the row count only;
it is saved with the model (``split.json``) so that ``dpcare audit loss`` attacks the run's own members
and held-out rows.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from sklearn.metrics import average_precision_score, roc_auc_score

from dpcare.data import TableEncoder, TableSchema, count_rows, load_table, public_view, replace_private
from dpcare.data.splits import split_indices
from dpcare.engine import Trainer
from dpcare.engine.objective import Objective
from dpcare.exceptions import DataError, SettingsError
from dpcare.fusion import Imputer, make_imputer
from dpcare.methods import DPSGD, FeatureDP, LabelDP, NonPrivate
from dpcare.methods.fusion import HYBRID_METHODS
from dpcare.models import TabularMLP
from dpcare.privacy import (
    NEIGHBOURING,
    Guarantee,
    PrivacyLedger,
    ProtectedUnit,
    check_delta,
    default_delta,
)
from dpcare.registry import Registry
from dpcare.runs import Manifest, RunFolder, SavesRunFolder, read_run_of_kind
from dpcare.runs.record import phase
from dpcare.settings import in_effect
from dpcare.tabular.settings import METHOD_NAMES, TabularSettings
from dpcare.verdict import verdict_entry, warn_if_small_test

SPLITS = {"train": 0.8, "val": 0.1, "test": 0.1}
MODEL_FILE, SPLIT_FILE = "model.pt", "split.json"


@dataclass(frozen=True)
class TableMethod:
    """One method on tables: its objective, the columns whose encoder statistics it protects, the tensors
    its public branch reads, and whether it needs the hybrid view (an imputer fitted on public rows)."""

    name: str
    objective: Callable[[TabularSettings], Objective]
    protects: str  # "all" | "private" | "label": see TableEncoder
    public_keys: tuple[str, ...] = ()
    hybrid: bool = False


METHODS: Registry[TableMethod] = Registry("method")
for _m in (
    TableMethod("non-private", lambda s: NonPrivate(), "label"),
    TableMethod("dp-sgd", lambda s: DPSGD(), "all"),
    TableMethod("feature-dp", lambda s: FeatureDP(), "private", ("x_pub", "y")),
    TableMethod("label-dp", lambda s: LabelDP(), "label", ("x",)),
    TableMethod("naive-fusion", lambda s: HYBRID_METHODS.get("naive-fusion")(), "private", ("x_hyb", "y"), True),
    TableMethod("naive-fusion-pub", lambda s: HYBRID_METHODS.get("naive-fusion-pub")(), "private", ("x_pub", "y")),
    TableMethod("calibrated-fusion", lambda s: HYBRID_METHODS.get("calibrated-fusion")(), "private",
                ("x_hyb", "y"), True),
    TableMethod("fusiondp", lambda s: HYBRID_METHODS.get("fusiondp")(s.beta), "private", ("x_hyb", "y"), True),
):
    METHODS.add(_m.name, _m)
if METHODS.names() != METHOD_NAMES:  # the settings module names them without importing torch
    raise RuntimeError(f"tabular methods {METHODS.names()} differ from the settings' {METHOD_NAMES}")


def objective_for(settings: TabularSettings) -> Objective:
    return METHODS.get(settings.method).objective(settings)


#: what a table's spec declares, in the guarantee's words
DECLARED_SUPPORT = "the spec's declared column bounds and category lists"


def ledger_terms(schema: TableSchema, unit: ProtectedUnit) -> dict[str, Any]:
    """The unit, protected and public columns a run's ledger names, and the spec as declared knowledge."""
    protected = {ProtectedUnit.FEATURES: schema.private_columns, ProtectedUnit.LABEL: [schema.target],
                 ProtectedUnit.EXAMPLE: []}[unit]
    public = {ProtectedUnit.FEATURES: [*schema.public_columns, schema.target],
              ProtectedUnit.LABEL: schema.feature_columns, ProtectedUnit.EXAMPLE: []}[unit]
    return {"unit": unit, "protected_columns": tuple(protected), "public_columns": tuple(public),
            "declared": (DECLARED_SUPPORT,)}


def training_rows(rows: int, seed: int, holdout: bool, splits: dict[str, float] = SPLITS) -> int:
    """How many rows train (the ledger's n) for a table of ``rows`` rows split by ``splits``."""
    return len(split_indices(rows, splits, seed)["train"]) if holdout else rows


#: what refuses a target of other than two categories (AUPRC, AUROC and the verdict are binary)
BINARY_ONLY = "the tabular recipe (AUPRC, AUROC and its verdict)"


def plan(schema: TableSchema, settings: TabularSettings, rows: int, holdout: bool = True) -> Guarantee | None:
    """What :func:`fit` will release on a table of ``rows`` rows, from the settings alone: a budget checks
    it before any row is read. None for a non-private run."""
    schema.require_binary_target(BINARY_ONLY)
    objective = objective_for(settings)
    if not objective.private:
        return None
    if objective.unit is ProtectedUnit.FEATURES:
        schema.require_public()
    n = training_rows(rows, settings.dp.seed, holdout, settings.splits)
    delta = check_delta(settings.dp.delta, n) if settings.dp.delta is not None else default_delta(n)
    return Guarantee(epsilon=settings.dp.epsilon, delta=delta, n=n, accountant=settings.dp.accountant,
                     neighbouring=NEIGHBOURING[objective.unit], **ledger_terms(schema, objective.unit))


# --------------------------------------------------------------------------- views
def tensors(encoder: TableEncoder, frame: pd.DataFrame, pad: str, seed: int,
            imputer: Imputer | None = None) -> dict[str, torch.Tensor]:
    """The tensors of one split: ``x`` (every column), ``x_pub`` = pad(Psi(x)) built from the public view
    only, ``x_hyb`` (with an imputer: the private columns imputed from the public view) and ``y``."""
    pub = public_view(frame, encoder.schema)
    out = {"x": torch.from_numpy(encoder.transform(frame)),
           "x_pub": torch.from_numpy(encoder.transform_public(pub, pad=pad, seed=seed)),
           "y": torch.from_numpy(encoder.encode_target(frame))}
    if imputer is not None:
        hybrid = replace_private(frame, imputer.predict(pub), encoder.schema)
        out["x_hyb"] = torch.from_numpy(encoder.transform(hybrid))
    return out


def public_data(method: str, data: dict[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
    """What the public branch of ``method`` may read: pad(Psi(x)) and y for Feature-DP, x alone for Label-DP,
    the hybrid (or padded) view and y for the fusion family; None without a public branch."""
    keys = METHODS.get(method).public_keys
    return {k: data[k] for k in keys} if keys else None


def check_imputer_inputs(settings: TabularSettings, public_data: Any, imputer: Any) -> None:
    """A fusion method needs exactly one of a public support table and a fitted imputer; other methods none."""
    if not METHODS.get(settings.method).hybrid:
        if public_data is not None or imputer is not None:
            raise SettingsError(f"method {settings.method} uses no imputer: --public-data / --imputer-file are only "
                                "for naive-fusion, calibrated-fusion and fusiondp")
    elif (public_data is None) == (imputer is None):
        raise SettingsError(f"method {settings.method} needs exactly one of a public support table (--public-data: "
                            "rows whose every column is public, e.g. consented patients) and a fitted imputer "
                            "(--imputer-file)")


def fit_imputer(schema: TableSchema, settings: TabularSettings, public_data: pd.DataFrame | str | os.PathLike | None,
                imputer: Imputer | str | os.PathLike | None, private: pd.DataFrame | None = None) -> Imputer | None:
    """The imputer a fusion method needs: fitted on the declared PUBLIC support table, or given fitted. With
    ``private`` (the private table), a support table holding any of its rows is refused first
    (:func:`refuse_private_rows`); the imputer itself never sees a private row."""
    check_imputer_inputs(settings, public_data, imputer)
    if not METHODS.get(settings.method).hybrid:
        return None
    if imputer is not None:
        return load_imputer(imputer, schema)
    support = load_table(public_data, schema)
    if private is not None:
        refuse_private_rows(support, private, schema)
    return make_imputer(settings.imputer, seed=settings.dp.seed).fit(support, schema)


def refuse_private_rows(support: pd.DataFrame, private: pd.DataFrame, schema: TableSchema) -> None:
    """Refuse a public support table that holds rows of the private table (equal on every spec column): those
    people's private columns would reach the public branch through the imputer (issue 54 part 4). An input check
    before training, like the refusal of a NaN: it releases nothing but the refusal."""
    columns = [c.name for c in schema.columns]
    shared = support[columns].drop_duplicates().merge(private[columns].drop_duplicates(), on=columns, how="inner")
    if len(shared):
        raise DataError(f"the public support table (--public-data) holds {len(shared)} row(s) equal on every spec "
                        "column to rows of the private table: it is not public for those people (their private "
                        "columns would reach the public branch through the imputer); remove them from the support "
                        "table, or do not use a fusion method")


def load_imputer(imputer: Imputer | str | os.PathLike, schema: TableSchema) -> Imputer:
    """A fitted imputer, or one saved with joblib; it must impute exactly the spec's private columns."""
    if not isinstance(imputer, Imputer):
        import joblib

        from dpcare.exceptions import MissingFileError

        path = Path(imputer)
        if not path.is_file():
            raise MissingFileError(f"imputer file not found: {path}")
        imputer = joblib.load(path)
        if not isinstance(imputer, Imputer):
            raise DataError(f"{path} holds a {type(imputer).__name__}, not a fitted dpcare imputer")
    if not hasattr(imputer, "schema"):
        raise DataError("the imputer is not fitted: fit it on a public support table first")
    if sorted(imputer.schema.private_columns) != sorted(schema.private_columns):
        raise DataError(f"the imputer fills {imputer.schema.private_columns}, the spec's private columns are "
                        f"{schema.private_columns}")
    return imputer


# --------------------------------------------------------------------------- the fitted model
@dataclass
class TabularModel(SavesRunFolder):
    """A fitted tabular model: the MLP, the encoder, the settings, the guarantee (None: non-private) and
    ledger, the validation / test metrics (with a hold-out) and the split."""

    RUN_KIND = "tabular"

    settings: TabularSettings
    encoder: TableEncoder
    model: TabularMLP
    guarantee: Guarantee | None = None
    ledger: PrivacyLedger | None = field(default=None, repr=False)
    metrics: dict[str, float] = field(default_factory=dict)
    split: dict[str, Any] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)  # steps, noise multiplier, backend, imputation...
    baseline: dict[str, Any] | None = None  # the best public baseline on the same test rows, and the verdict
    #: a fusion method's imputer, fitted on public rows by :func:`fit` (in this process only: not saved)
    imputer: Imputer | None = field(default=None, repr=False, compare=False)

    @property
    def schema(self) -> TableSchema:
        return self.encoder.schema

    @property
    def classes(self) -> tuple[str, ...]:
        return tuple(self.schema.column(self.schema.target).categories)

    def features(self, df: pd.DataFrame | str | os.PathLike) -> torch.Tensor:
        """Encoded feature columns of ``df``, validated against the spec; the target is not read."""
        from dpcare.data import read_table

        schema = self.schema
        frame = read_table(df)
        missing = [c for c in schema.feature_columns if c not in frame.columns]
        if missing:
            raise DataError(f"the table lacks the feature columns {missing} that the model reads "
                            f"(the target '{schema.target}' is not needed)")
        placeholder = self.classes[0]  # never read: only the features are encoded
        frame = load_table(frame.assign(**{schema.target: placeholder}), schema)
        return torch.from_numpy(self.encoder.transform(frame))

    def predict_proba(self, df: pd.DataFrame | str | os.PathLike) -> np.ndarray:
        """Class probabilities [rows, classes] in the order of :attr:`classes`."""
        return probabilities(self.model, self.features(df))

    def predict(self, df: pd.DataFrame | str | os.PathLike) -> np.ndarray:
        return np.array(self.classes, dtype=object)[self.predict_proba(df).argmax(axis=1)]

    # ----------------------------------------------------------------- run folders
    def manifest(self, data: dict[str, Any] | None = None) -> Manifest:
        method = self.settings.method
        m = Manifest(settings=self.settings.to_dict(), data=data or {}, headline=["test AUPRC", "test AUROC"],
                     files={"model": MODEL_FILE, "split": SPLIT_FILE})
        m.add_model(method, self.guarantee.to_dict() if self.guarantee else None,
                    self.ledger.state_dict() if self.ledger is not None else None,
                    note="" if self.guarantee else "NO differential privacy guarantee (non-private run).")
        m.metrics = [{"model": method, **{metric_name(k): v for k, v in self.metrics.items()}}]
        if self.baseline is not None:
            b = self.baseline
            m.baselines = [b]
            m.metrics.append({"model": f"public baseline: {b['name']}", **b["metrics"]})
            m.notes.append(f"{method}: {b['comparisons'][0]['verdict']}")
        m.settings["info"] = self.info
        if self.baseline is not None:
            m.verdicts = [verdict_entry(method, self.baseline["comparisons"][0])]
        dp = self.settings.dp
        m.settings_in_effect = in_effect(self.settings, {
            "alpha": self.settings.effective_alpha, "dp.steps": self.info.get("steps"),
            "public_batch_size": self.settings.public_batch_size or dp.batch_size,
            **({"dp.delta": self.guarantee.delta} if self.guarantee else {})})
        if "cross_fit" in self.info:  # dpcare.tabular.crossfit: every row a test row once
            c = self.info["cross_fit"]
            m.notes.append(f"{method}, cross-fitted over {c['folds']} folds ({c['rows']} rows): "
                           f"{c['comparisons'][0]['verdict']}")
            m.verdicts.append(verdict_entry(f"{method} (cross-fitted, {c['folds']} folds)", c["comparisons"][0]))
            m.not_protected.append(c["note"])
        if "imputation" in self.info:
            m.not_protected.append("The public support table (it fitted the imputer) is public data, outside every "
                                   "guarantee.")
        return m

    def write(self, run: RunFolder, data: dict[str, Any] | None = None,
              attacks: list[dict[str, str]] = ()) -> Path:
        """Write the model, its split and the manifest into ``run`` and finish it."""
        run.save_torch(MODEL_FILE, {"model": self.model.state_dict(), "model_config": self.model.config,
                                    "encoder": self.encoder.state_dict()})
        run.write_json(SPLIT_FILE, self.split)
        manifest = self.manifest(data)
        manifest.attacks = list(attacks)
        return run.finish(manifest)

    @classmethod
    def load(cls, folder: str | os.PathLike) -> TabularModel:
        """A model saved by :meth:`save` or ``dpcare train`` (in eval mode)."""
        folder = Path(folder)
        manifest, settings, info = read_run_of_kind(folder, "tabular", "a tabular model")
        saved = torch.load(folder / MODEL_FILE, map_location="cpu", weights_only=False)
        encoder = TableEncoder.from_state_dict(saved["encoder"])
        model = TabularMLP(**saved["model_config"])
        model.load_state_dict(saved["model"])
        model.eval()
        g = manifest.models[0]["guarantee"]
        ledger = manifest.models[0]["ledger"]
        split = _read_split(folder)
        metrics = {metric_key(k): v for k, v in manifest.metrics[0].items() if k != "model"}
        return cls(TabularSettings.from_dict(settings), encoder, model, Guarantee.from_dict(g) if g else None,
                   PrivacyLedger.from_state_dict(ledger) if ledger else None, metrics, split, info,
                   manifest.baselines[0] if manifest.baselines else None)


def _read_split(folder: Path) -> dict[str, Any]:
    import json

    path = folder / SPLIT_FILE
    return json.loads(path.read_text()) if path.exists() else {}


def metric_name(key: str) -> str:
    """'test_auprc' -> 'test AUPRC', 'val_auroc' -> 'validation AUROC'."""
    split, _, metric = key.partition("_")
    return f"{'validation' if split == 'val' else split} {metric.upper()}"


def metric_key(name: str) -> str:
    split, _, metric = name.partition(" ")
    return f"{'val' if split == 'validation' else split}_{metric.lower()}"


def protected_text(g: Guarantee | None) -> str:
    """What a guarantee protects, in a table cell."""
    if g is None:
        return "nothing (non-private)"
    if g.unit is ProtectedUnit.EXAMPLE:
        return "whole example"
    if g.unit is ProtectedUnit.LABEL:
        return f"label ({', '.join(g.protected_columns)})"
    return "features: " + ", ".join(g.protected_columns)


def probabilities(model: torch.nn.Module, x: torch.Tensor) -> np.ndarray:
    model.eval()
    with torch.no_grad():
        logits = model(x).double()
    if logits.shape[1] == 1:
        p = torch.sigmoid(logits[:, 0])
        return torch.stack([1 - p, p], dim=1).numpy()
    return torch.softmax(logits, dim=1).numpy()


def evaluate(model: torch.nn.Module, data: dict[str, torch.Tensor]) -> dict[str, float]:
    """AUPRC and AUROC of the positive class (the target's second category)."""
    y = data["y"].numpy()
    if len(np.unique(y)) < 2:
        raise DataError("the evaluation split has a single class; AUROC/AUPRC are undefined")
    scores = probabilities(model, data["x"])[:, 1]
    return {"auprc": float(average_precision_score(y, scores)), "auroc": float(roc_auc_score(y, scores))}


# --------------------------------------------------------------------------- fitting
def fit(data: pd.DataFrame | str | os.PathLike, schema: TableSchema, settings: TabularSettings | None = None, *,
        holdout: bool = True, public_data: pd.DataFrame | str | os.PathLike | None = None,
        imputer: Imputer | str | os.PathLike | None = None, checkpoint_dir: str | None = None,
        progress: bool = True, engine_seed: int | None = None) -> TabularModel:
    """Train ``settings.method`` on the table; with ``holdout`` on a random 80% of the rows, scored on
    the validation (10%) and test (10%) rows. Fusion methods take ``public_data`` (a public support
    table: its rows are not in ``data``) or a fitted ``imputer``. ``engine_seed``: the seed of the
    initialisation and public sampling when it must differ from the split's ``settings.dp.seed`` (private
    tuning: its own draws per candidate on the same split; a pinned ``noise_seed`` is moved by as much)."""
    settings = settings or TabularSettings()
    schema.require_binary_target(BINARY_ONLY)
    check_imputer_inputs(settings, public_data, imputer)
    if holdout:  # from the row count alone: said before any value is read
        rows = len(data) if isinstance(data, pd.DataFrame) else count_rows(data)
        warn_if_small_test(len(split_indices(rows, settings.splits, settings.dp.seed)["test"]),
                           option="--test-share, or evaluate on every row with --cross-fit 5")
    with phase("reading, checking and splitting the table"):
        frame, parts = read_and_split(data, schema, settings.dp.seed, holdout, settings.splits)
    with phase("fitting the imputer on the public support table") if METHODS.get(settings.method).hybrid \
            else nullcontext():
        imp = fit_imputer(schema, settings, public_data, imputer, private=frame)  # fitted on public rows only
    train = frame.iloc[parts["train"]].reset_index(drop=True)
    trained = settings  # with engine_seed: each candidate its own draws (a pinned noise_seed moves with the seed)
    if engine_seed is not None:
        trained = settings.replace(dp=settings.dp.shifted(engine_seed - settings.dp.seed))
    with phase(f"training ({settings.method})"):
        model, encoder, result, train = train_rows(train, schema, trained, imp, checkpoint_dir, progress)
    metrics, baseline = {}, None
    if holdout:
        with phase("scoring on the validation and test rows"):
            held = {name: tensors(encoder, frame.iloc[parts[name]].reset_index(drop=True), settings.pad,
                                  settings.dp.seed + i) for i, name in enumerate(("val", "test"), start=1)}
            for name, data in held.items():
                metrics.update({f"{name}_{k}": v for k, v in evaluate(model, data).items()})
        with phase("public baseline panel and the verdict"):
            baseline = public_baseline(settings, train, held["val"], held["test"], model)
    split = {"rows": len(frame), "seed": settings.dp.seed, "holdout": holdout,
             **{k: v.tolist() for k, v in parts.items()}}
    info = {"steps": result.steps, "noise_multiplier": result.noise_multiplier, "backend": result.backend,
            "sampling_rate": result.sampling_rate, "alpha": settings.effective_alpha}
    if imp is not None:
        info["imputation"] = {"imputer": imp.name, "support_rows": getattr(imp, "support_rows", None)}
    return TabularModel(settings, encoder, model, result.guarantee, result.ledger, metrics, split, info, baseline,
                        imputer=imp)


# --------------------------------------------------------------------------- the public baseline
def public_baseline(settings: TabularSettings, train: dict[str, torch.Tensor], val: dict[str, torch.Tensor],
                    test: dict[str, torch.Tensor], model: torch.nn.Module) -> dict[str, Any]:
    """The strongest predictor that needs no private data, chosen on the validation rows, and the private model
    against it on the same test rows.

    Feature-level methods (Feature-DP, the fusion family) protect only the private columns: the public columns
    and the label are public, so the panel (:mod:`dpcare.tabular.baselines`: a constant, logistic regression,
    gradient boosting, and the same MLP trained without privacy) is fitted on the training rows' public view
    pad(Psi(x)) and the best by validation AUPRC is the baseline. Under DP-SGD, Label-DP or no protection the
    labels are private: the baseline is the constant prediction (AUROC 0.5, AUPRC the test prevalence)."""
    from dpcare.verdict import compare

    y = test["y"].numpy()
    name, scores, panel = chosen_public_scores(settings, train, val, test, model.config)
    ours = probabilities(model, test["x"])[:, 1]
    comparisons = [compare(f"test {m.upper()}", fn, y, ours, scores, name, seed=settings.dp.seed).to_dict()
                   for m, fn in (("auprc", average_precision_score), ("auroc", roc_auc_score))]
    return {"name": name, "metrics": {"test AUPRC": float(average_precision_score(y, scores)),
                                      "test AUROC": float(roc_auc_score(y, scores))},
            "comparisons": comparisons,
            **({"panel": panel, "chosen on": "validation AUPRC"} if panel else {})}


def chosen_public_scores(settings: TabularSettings, train: dict[str, torch.Tensor], val: dict[str, torch.Tensor],
                         test: dict[str, torch.Tensor], shape: dict[str, Any]) -> tuple[str, np.ndarray, list[dict]]:
    """The public baseline of :func:`public_baseline`: its name, its scores on the test rows and the panel's
    validation scores (empty for the constant). Only the public view and the validation rows choose it."""
    from dpcare.tabular.baselines import choose, fit_panel

    objective = objective_for(settings)
    if objective.private and objective.unit is ProtectedUnit.FEATURES:
        candidates = fit_panel(train["x_pub"].numpy(), train["y"].numpy(), settings.dp.seed)
        mlp = _public_columns_model(settings, train, shape)
        candidates["the same MLP on the public columns only (non-private)"] = (
            lambda x: probabilities(mlp, torch.from_numpy(x))[:, 1])
        best, scored = choose(candidates, val["x_pub"].numpy(), val["y"].numpy())
        return best.name, best.score(test["x_pub"].numpy()), [c.summary() for c in scored]
    return "a constant prediction (the labels are private)", np.full(len(test["y"]), 0.5), []


def _public_columns_model(settings: TabularSettings, train: dict[str, torch.Tensor], shape: dict[str, Any]
                          ) -> TabularMLP:
    """Non-private training of the recipe's MLP (the private model's ``shape``) on the public view and the
    (public) label of the training rows."""
    from dpcare.engine import TrainConfig

    torch.manual_seed(settings.dp.seed + 101)
    model = TabularMLP(**shape)
    config = TrainConfig(dp=settings.dp, compute=settings.compute, lr=settings.lr, progress=False)
    Trainer(model, NonPrivate(), config).fit({"x": train["x_pub"], "y": train["y"]})
    return model


#: the smallest evaluation split scored (fewer rows give AUROC/AUPRC no meaning)
MIN_EVALUATION_ROWS = 10


def read_and_split(data: pd.DataFrame | str | os.PathLike, schema: TableSchema, seed: int, holdout: bool = True,
                   splits: dict[str, float] = SPLITS) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """The validated table and its split (``splits``: shares of train, val and test), checked before anything is
    trained: every split large enough and, with a hold-out, both evaluation splits holding at least two classes
    (else the run would fail only after training)."""
    frame = load_table(data, schema)
    parts = split_indices(len(frame), splits if holdout else {"train": 1.0}, seed)
    for name in ("val", "test") if holdout else ():
        rows = frame.iloc[parts[name]]
        share = f"{splits[name]:.0%} of {len(frame)}"
        if len(rows) < MIN_EVALUATION_ROWS:
            raise DataError(f"the {name} split has {len(rows)} rows ({share}): at least {MIN_EVALUATION_ROWS} are "
                            "needed to score the model; use more rows, a larger --validation-share / --test-share, "
                            "or holdout=False")
        if rows[schema.target].nunique() < 2:
            raise DataError(f"the {name} split ({share} rows, seed {seed}) holds a single class of "
                            f"'{schema.target}': AUROC/AUPRC are undefined; use more rows or another seed")
    return frame, parts


def train_rows(train_df: pd.DataFrame, schema: TableSchema, settings: TabularSettings,
               imputer: Imputer | None = None, checkpoint_dir: str | None = None, progress: bool = True):
    """Fit the encoder and train on exactly ``train_df`` (validated rows): (model, encoder, TrainResult,
    the training tensors). The building block of :func:`fit`, the audits' shadow models and the studies."""
    from dpcare.engine import TrainConfig

    torch.manual_seed(settings.dp.seed)
    method = METHODS.get(settings.method)
    objective = method.objective(settings)
    if method.hybrid and imputer is None:
        raise SettingsError(f"method {settings.method} needs a fitted imputer (its hybrid view)")
    ledger = None
    if objective.private:
        if objective.unit is ProtectedUnit.FEATURES:
            schema.require_public()
        ledger = PrivacyLedger(len(train_df), delta=settings.dp.delta, accountant=settings.dp.accountant,
                               **ledger_terms(schema, objective.unit))
    encoder = TableEncoder(schema, protect=method.protects).fit(
        train_df, ledger=ledger, stats_epsilon=settings.stats_epsilon, noise_seed=settings.dp.noise_seed,
        keep=checkpoint_dir)
    train = tensors(encoder, train_df, settings.pad, settings.dp.seed, imputer if method.hybrid else None)
    classes = len(schema.column(schema.target).categories)  # declared, never read from the private labels
    model = TabularMLP(train["x"].shape[1], hidden=settings.hidden, out_features=1 if classes == 2 else classes)
    config = TrainConfig(dp=settings.dp, compute=settings.compute, lr=settings.lr, alpha=settings.effective_alpha,
                         public_batch_size=settings.public_batch_size,
                         public_pretrain_steps=settings.public_pretrain_steps, checkpoint_dir=checkpoint_dir,
                         progress=progress)
    result = Trainer(model, objective, config, ledger=ledger).fit(train, public_data(settings.method, train))
    return model, encoder, result, train


def with_method(settings: TabularSettings, method: str, **dp: Any) -> TabularSettings:
    """``settings`` for another method (and DP settings), validated."""
    return replace(settings, method=method, dp=settings.dp.replace(**dp) if dp else settings.dp)


__all__ = ["METHODS", "SPLITS", "TableMethod", "TabularModel", "TabularSettings", "check_imputer_inputs",
           "chosen_public_scores", "evaluate", "fit",
           "fit_imputer", "ledger_terms", "load_imputer", "metric_name", "objective_for", "plan",
           "probabilities", "protected_text", "public_data", "read_and_split", "tensors", "train_rows", "training_rows", "with_method"]
