"""``dpcare benchmark tsf``: Baseline, patient-level DP-SGD, ZOO, ZOO-PCA and MixUp on real ICU and
visit data, attacked by LOSS (the paper's) and LiRA (stronger; the paper has none).

Resumable: each target model's result and each shadow's losses are JSON files in the output folder;
a rerun skips what exists. Test patients are never used for training or selection of a target.
"""

from __future__ import annotations

import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from dpcare.audit import clustered_auc_interval, plot_roc
from dpcare.io import torch_save, write_json, write_text
from dpcare.progress import progress as tqdm
from dpcare.timeseries import WindowSet, windows_for
from dpcare.workflows.tsf import (
    METHODS,
    ShadowTask,
    TsfData,
    TsfRecipe,
    lira_report,
    loss_attack_report,
    method_labels,
    needs_baseline,
    new_model,
    prepare_tsf,
    run_shadow,
    train_baseline,
    train_methods,
    window_losses,
)


@dataclass
class TsfBenchmark:
    datasets: tuple = ("mimic_demo", "pbcseq")  # names of bundled sets or TimeSeriesDataset objects
    methods: tuple[str, ...] = METHODS
    epsilons: tuple[float, ...] = (1.0, 3.0, 8.0)
    shadows: int = 8
    workers: int = 2
    seed: int = 0
    recipe: TsfRecipe = field(default_factory=TsfRecipe)

    @classmethod
    def quick(cls) -> TsfBenchmark:
        """Smoke size: tiny model, few epochs, one epsilon, 2 shadows (minutes on a laptop CPU)."""
        recipe = TsfRecipe(d_model=16, n_heads=2, epochs=2, dp_epochs=4, aug_epochs=2, aug_candidates=32)
        return cls(epsilons=(3.0,), shadows=2, recipe=recipe)


def _population(data: TsfData) -> tuple[WindowSet, np.ndarray, list[str]]:
    """Train + test windows (validation excluded: defences select on it) and target membership."""
    patients = sorted(data.splits["train"] + data.splits["test"])
    pop = windows_for(data.windows, patients)
    return pop, np.isin(pop.patient, data.splits["train"]), patients


def _target(data: TsfData, labels: list[str], bench: TsfBenchmark, folder: Path, progress: bool) -> dict[str, dict]:
    """Train (or reload) each target model; record test MSE, the LOSS attack and population losses."""
    results = {lab: _read(folder / f"{_slug(lab)}.json") for lab in labels}
    todo = [lab for lab, r in results.items() if r is None]
    if todo:
        train, val, test = data.part("train"), data.part("validation"), data.part("test")
        pop, _, _ = _population(data)
        baseline = _baseline(train, bench, folder, progress) if any(needs_baseline(lab) for lab in todo) else None
        for lab in todo:
            t0 = time.perf_counter()
            (model, info), = train_methods(train, val, [lab], bench.recipe, data.standardizer, bench.seed,
                                           progress, baseline, str(folder / "checkpoints")).values()
            # members: the training windows; non-members: the TEST patients' windows (never selected on)
            tr, te = window_losses(model, train), window_losses(model, test)
            results[lab] = {"label": lab, "data": data.name, "seconds": time.perf_counter() - t0,
                            "test_mse": float(te.mean()), "train_mse": float(tr.mean()),
                            "validation_mse": float(window_losses(model, val).mean()),
                            "loss_attack": loss_attack_report(tr, te), "info": info,
                            "population_losses": window_losses(model, pop).tolist(),
                            "roc": {"members": (-tr).tolist(), "nonmembers": (-te).tolist()},
                            "member_patients": train.patients(), "nonmember_patients": test.patients()}
            write_json(folder / f"{_slug(lab)}.json", results[lab])
    return results


def _baseline(train: WindowSet, bench: TsfBenchmark, folder: Path, progress: bool):
    """The target Baseline, trained once and kept (the defences all start from it)."""
    path = folder / "baseline.pt"
    model = new_model(bench.recipe, train, bench.seed)
    if path.exists():
        model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
        return model.eval()
    model = train_baseline(train, bench.recipe, bench.seed, progress, str(folder / "checkpoints" / "baseline"))
    torch_save(path, model.state_dict())
    return model


def _shadows(data: TsfData, labels: list[str], bench: TsfBenchmark, folder: Path, progress: bool):
    """Shadow models on random halves of the population's patients; returns losses [S, n] per label and
    the membership matrix [S, n]."""
    pop, _, patients = _population(data)
    rng = np.random.default_rng(bench.seed + 1000)
    halves = [sorted(rng.permutation(patients)[: len(patients) // 2].tolist()) for _ in range(bench.shadows)]
    val = data.part("validation")
    tasks, paths = [], []
    for k, half in enumerate(halves):
        path = folder / f"shadow_{k}.json"
        cached = _read(path)
        if cached is not None and cached["members"] == half and set(labels) <= set(cached["losses"]):
            continue
        tasks.append(ShadowTask(windows_for(data.windows, half), val, pop, labels, bench.recipe, data.standardizer,
                                bench.seed + 1 + k, half))
        paths.append(path)
    if tasks:
        bar = tqdm(total=len(tasks), desc=f"{data.name} shadows", disable=not progress)
        if bench.workers > 1:
            with ProcessPoolExecutor(bench.workers, mp_context=multiprocessing.get_context("spawn")) as pool:
                for task, path, losses in zip(tasks, paths, pool.map(run_shadow, tasks)):
                    write_json(path, {"members": task.members, "losses": losses})
                    bar.update(1)
        else:
            for task, path in zip(tasks, paths):
                write_json(path, {"members": task.members, "losses": run_shadow(task)})
                bar.update(1)
        bar.close()
    cached = [_read(folder / f"shadow_{k}.json") for k in range(bench.shadows)]
    shadow_in = np.stack([np.isin(pop.patient, c["members"]) for c in cached])
    return {lab: np.array([c["losses"][lab] for c in cached]) for lab in labels}, shadow_in


def run_tsf_benchmark(bench: TsfBenchmark, out_dir: str | Path, progress: bool = True) -> pd.DataFrame:
    out = Path(out_dir)
    labels = method_labels(bench.methods, bench.epsilons)
    write_json(out / "config.json", asdict(bench))
    rows = []
    for dataset in bench.datasets:
        data = prepare_tsf(dataset, seed=bench.seed)
        name = data.name
        write_json(out / name / "data.json", data.summary())
        targets = _target(data, labels, bench, out / name / "target", progress)
        lira = {}
        train_patients, test_patients = data.part("train").patient, data.part("test").patient
        patient_ci = {lab: {"loss": clustered_auc_interval(t["roc"]["members"], train_patients, t["roc"]["nonmembers"],
                                                           test_patients)} for lab, t in targets.items()}
        if bench.shadows >= 2:
            shadow_losses, shadow_in = _shadows(data, labels, bench, out / name / "shadows", progress)
            pop, target_in, _ = _population(data)
            lira = {lab: lira_report(np.array(targets[lab]["population_losses"]), target_in, shadow_losses[lab],
                                     shadow_in) for lab in labels}
            for lab, r in lira.items():
                patient_ci[lab]["lira"] = clustered_auc_interval(r["scores"]["members"], pop.patient[target_in],
                                                                 r["scores"]["nonmembers"], pop.patient[~target_in])
            write_json(out / name / "lira.json", {lab: {k: v for k, v in r.items() if k != "scores"}
                                                   for lab, r in lira.items()})
        write_json(out / name / "patient_intervals.json", patient_ci)
        for lab in labels:
            rows.append(_row(data, targets[lab], lira.get(lab), patient_ci[lab]))
        _plots(data.name, targets, lira, out)
    table = pd.DataFrame(rows)
    table.to_csv(out / "table.csv", index=False)
    write_text(out / "table.md", markdown(table, bench))
    return table


def _row(data: TsfData, target: dict, lira: dict | None, patient_ci: dict) -> dict:
    la = target["loss_attack"]
    eps = target["info"].get("guarantee", {}).get("epsilon")
    row = {"data": data.name, "method": target["label"], "epsilon": eps, "test_mse": target["test_mse"],
           "priv": la["priv"], "tpr": la["tpr"], "fpr": la["fpr"], "loss_auc": la["auc"],
           "loss_auc_patient_ci": _interval(patient_ci["loss"]), "loss_tpr_1pct": la["tpr_at_1pct_fpr"],
           "loss_tpr_01pct": la["tpr_at_0.1pct_fpr"], "seconds": target["seconds"]}
    if lira:
        row |= {"lira_auc": lira["online"]["auc"], "lira_auc_patient_ci": _interval(patient_ci["lira"]),
                "lira_tpr_1pct": lira["online"]["tpr_at_1pct_fpr"],
                "lira_offline_auc": lira["offline"]["auc"], "shadows": lira["shadows"]}
    return row


def _plots(name: str, targets: dict[str, dict], lira: dict[str, dict], out: Path) -> None:
    plot_roc({lab: (np.array(t["roc"]["members"]), np.array(t["roc"]["nonmembers"])) for lab, t in targets.items()},
             out / f"roc-loss-{name}.png", title=f"LOSS attack, {name} (test patients)")
    if lira:
        plot_roc({lab: (np.array(r["scores"]["members"]), np.array(r["scores"]["nonmembers"]))
                  for lab, r in lira.items()}, out / f"roc-lira-{name}.png", title=f"LiRA (online), {name}")


def markdown(table: pd.DataFrame, bench: TsfBenchmark) -> str:
    cols = ["data", "method", "epsilon", "test_mse", "priv", "loss_auc", "loss_auc_patient_ci", "loss_tpr_1pct",
            "lira_auc", "lira_auc_patient_ci", "lira_tpr_1pct"]
    cols = [c for c in cols if c in table]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, r in table.iterrows():
        lines.append("| " + " | ".join(_fmt(r[c]) for c in cols) + " |")
    note = (f"\nShadows per LiRA: {bench.shadows}. AUC intervals: 95% bootstrap over PATIENTS (a patient's windows "
            "are correlated). epsilon: patient-level (add/remove one patient with all windows), "
            "from the run's ledger; empty = no formal guarantee (augmentation gives none).\n")
    return "\n".join(lines) + note


def _interval(ci: list[float]) -> str:
    return f"[{ci[0]:.2f}, {ci[1]:.2f}]"


def _fmt(v) -> str:
    if isinstance(v, float):
        return "" if np.isnan(v) else f"{v:.4g}"
    return "" if v is None else str(v)


def _slug(label: str) -> str:
    return label.replace(" ", "_").replace("=", "")


def _read(path: Path) -> dict | None:
    import json

    return json.loads(path.read_text()) if path.exists() else None
