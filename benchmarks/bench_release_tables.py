"""Release tables (issue 23): each recipe's DP run at epsilon 1 / 3 / 8 beside its public baseline, over seeds.

For one modality and data set, runs the recipe's OWN command at its documented defaults (only the epsilon, the
seed, the output folder and a size option change) once per (method, epsilon, seed), each in a fresh run folder,
reads the ``baselines`` records of every run.json (``dpcare.verdict.Comparison.to_dict()``: metric, model,
baseline_name, baseline, difference, low, high, beats, units, verdict) and prints one markdown table per metric:
the DP metric mean ± sd over the seeds, the public baseline mean ± sd on the same test units, the per-seed
improvement with its 95% paired-bootstrap interval, and "beats: k/N seeds". Nothing is tuned: the numbers are
read once, after the runs.

Seeds: each seed is its own split (``--seed`` draws the split in ``train`` and ``synth fit``; ``--split-seed`` in
``text classify``; the images' and the fine-tuning notes' splits are drawn here), initialisation and noise (``--seed``; where the command
has ``--noise-seed``, it is pinned to the seed too, so that the table is reproducible). The data file itself
(the table, the SUPPORT2 rows of the synth run, the generated notes) is made once, with seed 0.

``--cell-options "..."`` adds options to every cell's command (e.g. a non-default setting chosen elsewhere,
``--cell-options "--order target-last --lr 5e-3 --epochs 8"``); they are kept in ``cell_options.json`` and a
rerun of the same ``--out`` with other options is refused before any cell runs, so one folder holds one setting.

Resumable: a cell whose run folder already holds a finished run.json is skipped (an interrupted cell resumes
when its command is rerun: dpcare keeps the staging folder). ``--tables-only`` only reads what is there. Two
processes may fill one ``--out`` at once if their cells differ (e.g. ``--epsilons 8`` and ``--epsilons 1``): each
cell's wall time is its own file (``timing/<method>/eps<E>/seed<S>.json``, written once, never merged), the console
shows the asked epsilons and seeds, and ``tables.md`` every finished run under ``runs/`` (so whichever process
writes it last leaves the whole table).

    OMP_NUM_THREADS=1 python benchmarks/bench_release_tables.py --modality tabular --out results/release/tabular
    OMP_NUM_THREADS=1 python benchmarks/bench_release_tables.py --modality synth --rows 1000 --out results/release/synth
    OMP_NUM_THREADS=1 python benchmarks/bench_release_tables.py --modality notes --n-notes 250 \\
        --out results/release/notes
    OMP_NUM_THREADS=1 python benchmarks/bench_release_tables.py --modality finetune --methods dp-lora,dp-prefix \\
        --out results/release/finetune    # SmolLM2-135M on the CPU: about an hour a run
    OMP_NUM_THREADS=1 python benchmarks/bench_release_tables.py --modality images \\
        --images-per-class 250 --out results/release/images    # 7.5 min a run on one CPU core (15 with all 500)

Modalities and their commands (``dpcare <cmd> --help``):

- tabular: ``dpcare train DATA --spec SPEC --method M --epsilon E --seed S --out RUN`` on the table exported by
  ``dpcare datasets --export DATASET`` (methods dp-sgd, feature-dp, label-dp); ``--rows N`` keeps N random rows
  (seed 0; default all).
- synth: ``dpcare synth fit DATA --spec SPEC --synthesizer dp-2stage --mode dp-2stage-u --epsilon E --seed S
  --out RUN`` on ``--rows`` random rows (seed 0; default 2,000, as docs/dp2stage.md measured) of the DP-2Stage
  benchmark's 10 columns; method ``aim`` runs ``--synthesizer aim`` instead of ``--mode``; ``--holdout F``
  passes ``--holdout F`` (the held-out share; default the command's 0.1).
- notes: ``dpcare text classify NOTES --method M --epsilon E --seed S --split-seed S --no-impute --out RUN`` on
  ``dpcare text generate --n-notes N --seed 0`` (default 600, as docs/text-fusiondp.md measured; ``--no-impute``
  as there, ``--impute`` to impute with the LM); a method other than fusiondp gets the paper's Table 3 C and
  alpha (``--clip``, ``--alpha``), as the docs' dp-sgd example.
- finetune: ``dpcare text finetune TRAIN --test TEST --task T --mode M --epsilon E --seed S --out RUN`` on
  ``dpcare text generate --n-notes N --seed 0`` (default 48, the clinical-nlp study's corpus), split per seed by
  patient as that study splits it (25% of the patients held out): the model's NER F1 (``--task ner``, default) or
  ROUGE-L F1 on the held-out patients' notes beside the base model without fine-tuning (and LEAD-3); methods are
  the modes (default dp-lora). ``--physical-batch N`` passes the command's memory-only option (its default 8
  takes about 13.5 GB of RAM on the CPU; 4 lets two cells run at once in 24 GB).
- images: ``dpcare images fit TRAIN --method fdp-dpsgd --epsilon E --seed S --color gray --public-images PUB
  --test-images TEST --out RUN`` on the bundled MNIST subset written as PNG folders, split per seed as the
  study splits it (public 20% / train 60% / test 20%); ``--images-per-class N`` keeps N images of each digit.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

MODALITIES = ("tabular", "synth", "notes", "finetune", "images")
DEFAULT_DATASET = {"tabular": "support2", "synth": "support2", "notes": "generated", "finetune": "generated",
                   "images": "mnist"}
DEFAULT_METHODS = {"tabular": ("dp-sgd", "feature-dp", "label-dp"), "synth": ("dp-2stage-u",),
                   "notes": ("fusiondp", "dp-sgd"), "finetune": ("dp-lora",), "images": ("fdp-dpsgd",)}
DEFAULT_NOTES = {"notes": 600, "finetune": 48}  # generated notes (finetune: the clinical-nlp study's corpus size)
HELD_OUT = 0.25  # finetune: the share of patients held out per seed (the clinical-nlp study's)
RUN_JSON = "run.json"


# --------------------------------------------------------------------------- the pure aggregation (tested)
def _mean_sd(values: Sequence[float]) -> tuple[float, float] | None:
    """Mean and sample sd (ddof 1; 0 for one value) of the defined values, or None if there are none."""
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not vals:
        return None
    mean = sum(vals) / len(vals)
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else 0.0
    return mean, sd


def _fmt_mean_sd(values: Sequence[float | None], expected: int, digits: int) -> str:
    ms = _mean_sd(values)
    if ms is None:
        return "missing"
    n = sum(1 for v in values if v is not None and math.isfinite(float(v)))
    text = f"{ms[0]:.{digits}f} ± {ms[1]:.{digits}f}"
    return text if n == expected else f"{text} ({n} of {expected} seeds)"


def comparisons_of(run: dict[str, Any]) -> list[dict[str, Any]]:
    """Every comparison record of a run.json (``baselines`` -> each record's ``comparisons``), with the baseline
    record's name attached as ``record`` (a record whose comparisons are missing contributes none)."""
    out = []
    for record in run.get("baselines") or []:
        for c in record.get("comparisons") or []:
            out.append({**c, "record": record.get("name", c.get("baseline_name"))})
    return out


Cells = dict[tuple[str, float, int], dict[str, Any] | None]


def collect(cells: Cells) -> dict[str, dict[tuple[str, float], dict[int, dict]]]:
    """``cells``: (method, epsilon, seed) -> the run.json (None: missing). Returns metric -> (method, epsilon) ->
    seed -> comparison record."""
    table: dict[str, dict[tuple[str, float], dict[int, dict]]] = {}
    for (method, eps, seed), run in cells.items():
        for c in comparisons_of(run or {}):
            table.setdefault(c["metric"], {}).setdefault((method, eps), {})[seed] = c
    return table


def _interval(c: dict[str, Any], digits: int) -> str:
    if c.get("undefined") or c.get("difference") is None:
        return "undefined"
    return f"{c['difference']:+.{digits}f} [{c['low']:+.{digits}f}, {c['high']:+.{digits}f}]"


def build_tables(cells: Cells, methods: Sequence[str],
                 epsilons: Sequence[float], seeds: Sequence[int], digits: int = 3) -> str:
    """Markdown: one table per metric; a row per (method, epsilon) with the DP metric and the public baseline (mean
    ± sd over the seeds that have it), the per-seed improvement [95% interval] (``seed k: missing`` where the run
    is missing, ``undefined`` where the comparison is), and ``k/N seeds`` that beat the baseline (a missing or
    undefined seed does not beat it). Then the baselines' names."""
    by_metric = collect(cells)
    if not by_metric:
        return "no finished run with a public-baseline comparison yet\n"
    n = len(seeds)
    text = []
    for metric, rows in by_metric.items():
        higher = next((c["higher_is_better"] for per in rows.values() for c in per.values() if "higher_is_better" in c),
                      True)
        text.append(f"#### {metric} ({'higher' if higher else 'lower'} is better; improvement = "
                    f"{'DP - baseline' if higher else 'baseline - DP'}, 95% paired-bootstrap interval)\n")
        text.append(f"| method | epsilon | DP {metric} | public baseline "
                    "| improvement per seed [95% interval] | beats |")
        text.append("|---|---|---|---|---|---|")
        names: dict[str, dict[str, list[str]]] = {}  # method -> baseline name -> the cells (epsilon/seed) it won
        for method in methods:
            for eps in epsilons:
                per = rows.get((method, eps), {})
                model = [per[s].get("model") if s in per else None for s in seeds]
                base = [per[s].get("baseline") if s in per else None for s in seeds]
                seeds_text = "; ".join(f"seed {s}: {_interval(per[s], digits)}" if s in per else f"seed {s}: missing"
                                       for s in seeds)
                k = sum(1 for s in seeds if s in per and per[s].get("beats") is True)
                missing = [s for s in seeds if s not in per]
                beats = f"{k}/{n} seeds" + (f" ({len(missing)} missing)" if missing else "")
                text.append(f"| {method} | {eps:g} | {_fmt_mean_sd(model, n, digits)} | "
                            f"{_fmt_mean_sd(base, n, digits)} | {seeds_text} | {beats} |")
                for s in per:
                    name = per[s].get("baseline_name") or per[s].get("record") or "?"
                    names.setdefault(method, {}).setdefault(name, []).append(f"epsilon {eps:g} seed {s}")
        text.append("")
        for m, chosen in names.items():  # a panel's winner may differ by seed: each one named with its cells
            if len(chosen) == 1:
                text.append(f"- public baseline of {m}: {next(iter(chosen))}")
            else:
                text += [f"- public baseline of {m}: {b} ({', '.join(cells)})" for b, cells in chosen.items()]
        text.append("")
    return "\n".join(text) + "\n"


# --------------------------------------------------------------------------- the runs
def dpcare() -> list[str]:
    return [sys.executable, "-m", "dpcare.cli"]


def shown(cmd: Sequence[str]) -> str:
    """The command as printed: ``dpcare ...`` for this interpreter's dpcare."""
    parts = list(cmd)
    if parts[:3] == dpcare():
        parts = ["dpcare", *parts[3:]]
    return shlex.join(str(p) for p in parts)


def run_command(cmd: Sequence[str], log: Path, commands: list[str]) -> float:
    line = shown(cmd)
    commands.append(line)
    print(f"$ {line}", flush=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    t = time.time()
    with open(log, "w") as f:
        rc = subprocess.run([str(c) for c in cmd], stdout=f, stderr=subprocess.STDOUT, check=False).returncode
    seconds = time.time() - t
    if rc != 0:
        print(f"  exit status {rc} after {seconds:.0f} s (log: {log}); the tail:", flush=True)
        print("".join(log.read_text().splitlines(keepends=True)[-15:]), flush=True)
    else:
        print(f"  done in {seconds:.0f} s (log: {log})", flush=True)
    return seconds if rc == 0 else -seconds


def prepare(a: argparse.Namespace, data: Path, commands: list[str]) -> dict[str, Any]:
    """The data files of the modality (made once; reused when present)."""
    data.mkdir(parents=True, exist_ok=True)
    if a.modality == "tabular":
        csv, spec = data / f"{a.dataset}.csv", data / f"{a.dataset}.yaml"
        if not (csv.exists() and spec.exists()):
            run_command([*dpcare(), "datasets", "--export", a.dataset, "--out", data], data / "export.log", commands)
        if a.rows:
            import pandas as pd

            small = data / f"{a.dataset}-{a.rows}.csv"
            if not small.exists():
                df = pd.read_csv(csv)
                df.sample(min(a.rows, len(df)), random_state=0).to_csv(small, index=False)
            csv = small
        return {"data": csv, "spec": spec}
    if a.modality == "synth":
        csv, spec = data / f"{a.dataset}-{a.rows}.csv", data / f"{a.dataset}-10cols.yaml"
        if not (csv.exists() and spec.exists()):
            from dpcare.data import load_dataset, save_spec
            from dpcare.studies.dp2stage import COLUMNS

            df, schema = load_dataset(a.dataset)
            keep = COLUMNS[a.dataset]
            schema = schema.select(keep)
            df[keep].sample(min(a.rows, len(df)), random_state=0).to_csv(csv, index=False)
            save_spec(schema, spec)
            print(f"wrote {csv} ({min(a.rows, len(df))} random rows, seed 0, of the DP-2Stage benchmark's columns "
                  f"{keep}) and {spec}", flush=True)
        return {"data": csv, "spec": spec}
    if a.modality in ("notes", "finetune"):
        notes = data / f"notes-{a.n_notes}.jsonl"
        if not notes.exists():
            run_command([*dpcare(), "text", "generate", "--n-notes", a.n_notes, "--seed", 0, "--out", notes],
                        data / "generate.log", commands)
        return {"data": notes} if a.modality == "notes" else {"splits": split_notes(notes, a.seeds, data)}
    # images: the bundled MNIST subset as PNG folders, one split per seed
    from dpcare.images.data import load_mnist, split_images

    folders = {}
    images = None
    for seed in a.seeds:
        root = data / f"split-seed{seed}"
        folders[seed] = {k: root / k for k in ("train", "test", "public")}
        if (root / "done").exists():
            continue
        if images is None:
            images = load_mnist()
            if a.images_per_class:
                import numpy as np

                labels = images.labels.numpy()
                keep = np.sort(np.concatenate([np.flatnonzero(labels == k)[: a.images_per_class]
                                               for k in np.unique(labels)]))
                images = images.subset(keep)
        write_image_folders(split_images(images, seed=seed), root)
        (root / "done").write_text("")
    return {"folders": folders}


def split_notes(notes: Path, seeds: Sequence[int], data: Path) -> dict[int, dict[str, Path]]:
    """finetune: per seed, the notes split by PATIENT (the clinical-nlp study's split, ``HELD_OUT`` of the
    patients held out) into ``split-seed<s>/train.jsonl`` and ``test.jsonl`` (written once)."""
    from dpcare.studies.clinical_nlp import split_patients
    from dpcare.text import read_jsonl, write_jsonl

    out = {}
    for seed in seeds:
        root = data / f"split-seed{seed}"
        out[seed] = {"train": root / "train.jsonl", "test": root / "test.jsonl"}
        if (root / "done").exists():
            continue
        root.mkdir(parents=True, exist_ok=True)
        split = split_patients(read_jsonl(notes), HELD_OUT, seed)
        write_jsonl(split.train, out[seed]["train"])
        write_jsonl(split.held_out, out[seed]["test"])
        (root / "done").write_text("")
    return out


def write_image_folders(parts: dict, root: Path) -> None:
    """Each split as ``root/<split>/<class>/<i>.png`` (8-bit grayscale, the images' own size)."""
    import numpy as np
    from PIL import Image

    for name, part in parts.items():
        pixels = ((part.images.numpy()[:, 0] + 1.0) / 2.0 * 255.0).round().clip(0, 255).astype(np.uint8)
        for i, (img, label) in enumerate(zip(pixels, part.labels.numpy(), strict=True)):
            folder = root / name / part.classes[int(label)]
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(img, mode="L").save(folder / f"{i:05d}.png")


def cell_command(a: argparse.Namespace, files: dict[str, Any], method: str, eps: float, seed: int,
                 run: Path) -> list[Any]:
    if a.modality == "tabular":
        return [*dpcare(), "train", files["data"], "--spec", files["spec"], "--method", method, "--epsilon", f"{eps:g}",
                "--seed", seed, "--out", run]
    if a.modality == "synth":
        holdout = [] if a.holdout is None else ["--holdout", f"{a.holdout:g}"]
        which = ["--synthesizer", "aim"] if method == "aim" else ["--synthesizer", "dp-2stage", "--mode", method]
        return [*dpcare(), "synth", "fit", files["data"], "--spec", files["spec"], *which, "--epsilon",
                f"{eps:g}", *holdout, "--seed", seed, "--out", run]
    if a.modality == "notes":
        from dpcare.text.classify.settings import PAPER_SETTINGS

        extra: list[Any] = []
        if method != "fusiondp" and method in PAPER_SETTINGS:  # fusiondp's Table 3 values are the defaults
            clip, alpha, _ = PAPER_SETTINGS[method]
            extra = ["--clip", f"{clip:g}", "--alpha", f"{alpha:g}"]
        return [*dpcare(), "text", "classify", files["data"], "--method", method, "--epsilon", f"{eps:g}", *extra,
                "--seed", seed, "--split-seed", seed, "--impute" if a.impute else "--no-impute", "--out", run]
    if a.modality == "finetune":
        f = files["splits"][seed]
        memory = [] if a.physical_batch is None else ["--physical-batch", a.physical_batch]
        return [*dpcare(), "text", "finetune", f["train"], "--test", f["test"], "--task", a.task, "--mode", method,
                "--epsilon", f"{eps:g}", *memory, "--seed", seed, "--out", run]
    f = files["folders"][seed]
    return [*dpcare(), "images", "fit", f["train"], "--method", method, "--epsilon", f"{eps:g}", "--seed", seed,
            "--color", "gray", "--public-images", f["public"], "--test-images", f["test"], "--out", run]


def full_command(a: argparse.Namespace, files: dict[str, Any], method: str, eps: float, seed: int, run: Path,
                 pin_noise: bool) -> list[Any]:
    """The cell's command with ``--cell-options`` and (``pin_noise``) ``--noise-seed SEED`` before its ``--out``."""
    cmd = cell_command(a, files, method, eps, seed, run)
    cmd[-2:-2] = [*a.cell_options, *(["--noise-seed", seed] if pin_noise else [])]
    return cmd


#: options a cell's command already gets from this script (its grid, data and pinned noise): a cell option may not
#: repeat one (the command line keeps the last value, so the tables' labels would be wrong)
SCRIPT_OPTIONS = frozenset({"--method", "--mode", "--epsilon", "--seed", "--noise-seed", "--split-seed", "--out",
                            "--spec", "--holdout", "--clip", "--alpha", "--impute", "--no-impute", "--test", "--task",
                            "--physical-batch", "--color", "--public-images", "--test-images"})


def check_cell_options(out: Path, text: str, tables_only: bool) -> list[str]:
    """The options ``text`` adds to every cell (shell words), checked before anything runs: none of
    :data:`SCRIPT_OPTIONS`, and the same as those ``out`` was filled with (``cell_options.json``, see
    :func:`keep_cell_options`; a folder with cells and no such file was filled without options). ``--tables-only``
    reads the folder's own (none without the file)."""
    options, kept = shlex.split(text), out / "cell_options.json"
    before = json.loads(kept.read_text()) if kept.exists() else None
    if tables_only:
        return before or []
    clash = sorted({w.split("=", 1)[0] for w in options if w.startswith("--")} & SCRIPT_OPTIONS)
    if clash:
        raise SystemExit(f"--cell-options may not set {', '.join(clash)}: this script sets it for every cell")
    if before is None:
        before = [] if (out / "runs").is_dir() and any((out / "runs").iterdir()) else None
    if before is not None and before != options:
        raise SystemExit(f"{out} was filled with --cell-options {shlex.join(before)!r}, not {shlex.join(options)!r}: "
                         "use another --out")
    return options


def keep_cell_options(out: Path, options: Sequence[str]) -> None:
    """Write ``cell_options.json`` once, as the first cell starts."""
    from dpcare.io import write_json

    if not (out / "cell_options.json").exists():
        write_json(out / "cell_options.json", list(options))


#: methods whose noise no seed pins (AIM: OpenDP's secure generator); their cells never get --noise-seed
UNPINNED = frozenset({"aim"})


def noise_seed_option(command: Sequence[Any]) -> bool:
    """Whether this dpcare's command takes ``--noise-seed`` (where the mechanism's noise has its own seed, drawn
    fresh from OS entropy by default): then every cell passes ``--noise-seed SEED`` so that the table can be
    reproduced, as the studies pin theirs. Older versions seed the noise with ``--seed`` itself."""
    help_text = subprocess.run([str(c) for c in command] + ["--help"], capture_output=True, text=True,
                               check=False, env={**os.environ, "COLUMNS": "200"}).stdout
    return "--noise-seed" in help_text


def synth_real_reference(cells: Cells, files: dict[str, Any], seeds: Sequence[int]) -> str:
    """synth only: the ML-efficacy models trained on the REAL training rows of each seed's run (the rows the
    synthesizer trained on) and scored on the same held-out real rows: the ceiling a synthetic table of these rows
    could reach. It reads the private rows: a reference, not a baseline, and no release."""
    import pandas as pd
    from sklearn.metrics import roc_auc_score

    from dpcare.data import load_spec, load_table
    from dpcare.synth.evaluate import efficacy_scores
    from dpcare.synth.support_baseline import METRICS

    schema = load_spec(files["spec"])
    table = load_table(pd.read_csv(files["data"]), schema)
    values: dict[str, list[float]] = {label: [] for label, _ in METRICS}
    for seed in seeds:
        run = next((r for (_, _, s), r in cells.items() if s == seed and r is not None), None)
        if run is None:
            continue
        held = list(run["data"]["held-out rows"])
        test = table.iloc[held].reset_index(drop=True)
        train = table.drop(index=table.index[held]).reset_index(drop=True)
        for label, model in METRICS:
            y, scores, _ = efficacy_scores(train, test, schema, seed, model)
            values[label].append(float(roc_auc_score(y, scores)))
    if not any(values.values()):
        return ""
    parts = ", ".join(f"{label} {_fmt_mean_sd(v, len(seeds), 3)}" for label, v in values.items())
    return (f"Reference, not a baseline (reads the private training rows): the same models trained on each seed's "
            f"real training rows, scored on its held-out rows: {parts}\n")


def read_run(run: Path) -> dict[str, Any] | None:
    path = run / RUN_JSON
    return json.loads(path.read_text()) if path.is_file() else None


def cell_name(method: str, eps: float, seed: int) -> str:
    """The cell's path below ``runs/``, ``logs/`` and ``timing/``."""
    return f"{method}/eps{eps:g}/seed{seed}"


def finished_on_disk(out: Path) -> tuple[list[str], list[float], list[int]]:
    """Methods, epsilons and seeds of every finished run (``runs/<method>/eps<E>/seed<S>/run.json``), sorted."""
    found = [r.parent.relative_to(out / "runs").parts for r in (out / "runs").glob(f"*/eps*/seed*/{RUN_JSON}")]
    return (sorted({m for m, _, _ in found}), sorted({float(e[3:]) for _, e, _ in found}),
            sorted({int(s[4:]) for _, _, s in found}))


def read_cells(out: Path, methods: Sequence[str], epsilons: Sequence[float], seeds: Sequence[int]) -> Cells:
    """Each (method, epsilon, seed)'s run.json under ``out/runs`` (None where it is not finished)."""
    return {(m, e, s): read_run(out / "runs" / cell_name(m, e, s)) for m in methods for e in epsilons for s in seeds}


def write_seconds(out: Path, name: str, seconds: float) -> None:
    """The cell's wall time, in its own file: two processes filling one ``--out`` never write the same file."""
    from dpcare.io import write_json

    path = out / "timing" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, {"seconds": round(seconds, 1)})


def read_seconds(out: Path, names: Sequence[str]) -> list[float]:
    """The recorded wall times of the cells ``names`` (from ``timing/``; a folder filled before the per-cell files
    keeps its times in ``wall_seconds.json``, read where a cell has no file)."""
    legacy = out / "wall_seconds.json"
    old = json.loads(legacy.read_text()) if legacy.is_file() else {}
    times = []
    for name in names:
        path = out / "timing" / f"{name}.json"
        if path.is_file():
            times.append(float(json.loads(path.read_text())["seconds"]))
        elif name in old:
            times.append(float(old[name]))
    return times


def report(a: argparse.Namespace, out: Path, methods: Sequence[str], epsilons: Sequence[float],
           seeds: Sequence[int]) -> str:
    """The tables (and the synth run's real-data reference) of the finished cells of this selection, with the
    wall time of those that this script timed."""
    cells = read_cells(out, methods, epsilons, seeds)
    tables = build_tables(cells, methods, epsilons, seeds)
    if a.modality == "synth":
        data = {"data": out / "data" / f"{a.dataset}-{a.rows}.csv", "spec": out / "data" / f"{a.dataset}-10cols.yaml"}
        if data["data"].exists() and data["spec"].exists():
            tables += "\n" + synth_real_reference(cells, data, seeds)
    timed = read_seconds(out, [cell_name(*c) for c in cells if cells[c] is not None])
    footer = (f"\nWall time per finished run (this script's clock, {len(timed)} runs): mean "
              f"{sum(timed) / len(timed):.0f} s, total {sum(timed) / 60:.1f} min\n" if timed else "")
    options = f", cell options `{shlex.join(a.cell_options)}`" if a.cell_options else ""
    head = (f"### {a.modality}: {a.dataset}, methods {', '.join(methods)}, epsilon {','.join(f'{e:g}' for e in epsilons)}"
            f", seeds {list(seeds)}{options}\n\n")
    return head + tables + footer


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--modality", choices=MODALITIES, required=True)
    p.add_argument("--dataset", default=None, help="tabular/synth: a bundled table (default support2)")
    p.add_argument("--methods", default=None,
                   help="comma-separated (default per modality: tabular dp-sgd,feature-dp,label-dp; synth "
                        "dp-2stage-u; notes fusiondp,dp-sgd; finetune dp-lora; images fdp-dpsgd)")
    p.add_argument("--epsilons", default="1,3,8")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--out", type=Path, required=True, help="results folder (data/, runs/, logs/, tables.md)")
    p.add_argument("--rows", type=int, default=None, help="tabular: random rows kept (default all); synth: random "
                                                          "rows of the 10 columns (default 2000)")
    p.add_argument("--holdout", type=float, default=None, help="synth: the share of --rows held out as the real "
                                                                  "test rows (`synth fit --holdout`; default its 0.1)")
    p.add_argument("--n-notes", type=int, default=None, help="notes, finetune: generated notes (default 600; "
                                                              "finetune 48)")
    p.add_argument("--physical-batch", type=int, default=None,
                   help="finetune: rows per forward/backward pass (memory only: the same gradients; default the "
                        "command's 8, about 13.5 GB of RAM for SmolLM2-135M on the CPU)")
    p.add_argument("--task", default="ner", choices=("ner", "summarisation"), help="finetune: the task (default ner)")
    p.add_argument("--impute", action="store_true", help="notes: impute the masked spans with the LM (slow; the "
                                                         "docs' measurement used --no-impute, the default here)")
    p.add_argument("--images-per-class", type=int, default=None, help="images: images kept per digit (default all "
                                                                      "500)")
    p.add_argument("--cell-options", default="", help="options added to every cell's command (shell words; the "
                                                      "folder keeps them: another value for the same --out is refused)")
    p.add_argument("--tables-only", action="store_true", help="run nothing: print the tables of the finished runs")
    a = p.parse_args(argv)
    if a.physical_batch is not None and (a.modality != "finetune" or a.physical_batch < 1):
        p.error("--physical-batch is a positive number of rows, for --modality finetune only")
    a.dataset = a.dataset or DEFAULT_DATASET[a.modality]
    if a.modality == "synth" and a.rows is None:
        a.rows = 2000
    a.n_notes = a.n_notes or DEFAULT_NOTES.get(a.modality)
    methods = tuple(a.methods.split(",")) if a.methods else DEFAULT_METHODS[a.modality]
    epsilons = [float(e) for e in a.epsilons.split(",")]
    a.seeds = [int(s) for s in a.seeds.split(",")]
    out: Path = a.out
    out.mkdir(parents=True, exist_ok=True)
    a.cell_options = check_cell_options(out, a.cell_options, a.tables_only)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    commands: list[str] = []
    files = {} if a.tables_only else prepare(a, out / "data", commands)
    subcommand = {"tabular": ["train"], "synth": ["synth", "fit"], "notes": ["text", "classify"],
                  "finetune": ["text", "finetune"], "images": ["images", "fit"]}[a.modality]
    pin_noise = not a.tables_only and noise_seed_option([*dpcare(), *subcommand])
    started = time.time()
    cells = [] if a.tables_only else [(m, e, s) for m in methods for e in epsilons for s in a.seeds]
    for method, eps, seed in cells:
        name = cell_name(method, eps, seed)
        run = out / "runs" / name
        if read_run(run) is not None:
            print(f"skip {name}: {run / RUN_JSON} is finished", flush=True)
            continue
        cmd = full_command(a, files, method, eps, seed, run, pin_noise and method not in UNPINNED)
        keep_cell_options(out, a.cell_options)
        seconds = run_command(cmd, out / "logs" / f"{name}.log", commands)
        if seconds > 0:
            write_seconds(out, name, seconds)
    if commands:
        with open(out / "commands.txt", "a") as f:
            f.write("".join(c + "\n" for c in commands))
        print(f"\nran {len(commands)} command(s) in {time.time() - started:.0f} s (listed in {out / 'commands.txt'})")
    from dpcare.io import write_text

    shown_text = report(a, out, methods, epsilons, a.seeds)
    on_disk = finished_on_disk(out)  # tables.md: every finished run, whichever process fills --out last
    whole = [list(dict.fromkeys([*methods, *on_disk[0]])), sorted({*epsilons, *on_disk[1]}),
             sorted({*a.seeds, *on_disk[2]})]
    write_text(out / "tables.md", shown_text if whole == [list(methods), sorted(epsilons), sorted(a.seeds)]
               else report(a, out, *whole))
    print("\n" + shown_text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
