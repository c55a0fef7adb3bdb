"""Baseline DP synthesizers from SmartNoise (``smartnoise-synth``): MST, AIM and DP-CTGAN.

    out = run_baseline("mst", train_df, schema, epsilon=1.0, delta=1e-5, n_samples=2000)
    out.attrs["dp"]  # the privacy accounting of the run

SmartNoise cannot live in dpcare's .venv (smartnoise-sql pins pandas<3, DP-CTGAN needs
opacus 0.14), so it runs in its own interpreter, ``.venv-baselines`` at the repository
root (or ``$DPCARE_BASELINES_PYTHON``), as a subprocess that runs THIS file as a script;
data go through CSV/JSON files in a temp dir. That is why the module imports only
numpy/pandas at top level.

Privacy. All column statistics come from the schema (public): every numeric column
needs declared bounds and every categorical column declared categories, else the run is
refused. The SmartNoise TableTransformer is fitted on a public table (each code once,
the bounds), never on the data, so ``preprocessor_eps`` is 0 and the WHOLE (epsilon,
delta) goes to the synthesizer.

Encoding (here, before SmartNoise sees anything):
- categorical: index in the declared list; a nullable column gets one more code, "missing".
- numeric, MST/AIM: ``bins`` equal-width bins between the bounds (default 20), on the
  log1p scale if the spec says ``transform: log1p``; values outside are clipped; nullable
  columns get a "missing" bin. Synthetic values are drawn uniformly inside their bin.
- numeric, DP-CTGAN: the value (log1p if declared) min-max scaled with the bounds; a
  nullable column gets an extra 0/1 categorical column ``<name>__missing`` and its missing
  values are set to the midpoint.

Accounting. MST and AIM are (epsilon, delta)-DP through zCDP (SmartNoise converts with
OpenDP's ``cdp_rho``; delta must be > 0). DP-CTGAN uses opacus 0.14 on the discriminator:
the noise multiplier is calibrated here with opacus' RDP accountant on the same RDP orders
DPCTGAN passes to its PrivacyEngine, so that ``epochs`` epochs spend at most
epsilon (two discriminator steps per batch), and the reported ``epsilon_spent`` is what
SmartNoise's own PrivacyEngine says after training. As
SmartNoise gives it: batches are not Poisson-sampled, and its conditional sampler uses
exact category frequencies (smartnoise-sdk issues #301, #484), which that number does not
cover. MST hands the exact row count to its estimator (``known_total``, as in the original
private-pgm code). AIM's rounds are run by :mod:`dpcare.synth.aim_rounds` (the paper's schedule with
SmartNoise's selection, OpenDP's noise and mbi's estimation), which saves them after every round to the
job's ``checkpoint``, resumes from it, and checks that its measurements and selections add up to rho.
MST/AIM noise comes from OpenDP's secure RNG, so ``seed`` does not make them reproducible.
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
import os
import re
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

DEFAULT_BINS = 20
_MODULES = {"mst": "snsynth.mst.mst", "aim": "snsynth.aim.aim", "dpctgan": "snsynth.pytorch.nn.dpctgan"}
BASELINES = tuple(_MODULES)  # one table: the names are its keys
_DPCTGAN_FIXED = {"epsilon", "delta", "sigma", "epochs", "batch_size", "cuda", "verbose"}
#: the RDP orders snsynth's DPCTGAN gives opacus (1.1, ..., 10.9, 12, ..., 63: order 11 is NOT among them,
#: so calibrating on the integers 2..63 could pick 11 and undershoot the noise; seen: epsilon 1.0005 > 1)
DPCTGAN_ORDERS = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64))


def baselines_python() -> Path:
    """The interpreter of the SmartNoise venv: $DPCARE_BASELINES_PYTHON or <repo>/.venv-baselines."""
    env = os.environ.get("DPCARE_BASELINES_PYTHON")
    return Path(env) if env else Path(__file__).resolve().parents[3] / ".venv-baselines" / "bin" / "python"


def _subprocess_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("JAX_PLATFORMS", "cpu")
    return env


@lru_cache(maxsize=1)
def available_baselines() -> dict[str, str | None]:
    """``{name: None}`` for a baseline that imports in the SmartNoise venv, else ``{name: the error}``."""
    py = baselines_python()
    if not py.exists():
        msg = f"no SmartNoise interpreter at {py}: run scripts/setup.sh (or set DPCARE_BASELINES_PYTHON)"
        return dict.fromkeys(BASELINES, msg)
    code = f"""import importlib, json
out = {{}}
for k, m in {_MODULES!r}.items():
    try:
        importlib.import_module(m)
        out[k] = None
    except Exception as e:
        out[k] = f"{{type(e).__name__}}: {{e}}"
print(json.dumps(out))"""
    try:
        res = subprocess.run([str(py), "-P", "-c", code], check=False, capture_output=True, text=True,
                             timeout=300, env=_subprocess_env())
    except (OSError, subprocess.TimeoutExpired) as e:
        return dict.fromkeys(BASELINES, f"{type(e).__name__}: {e}")
    if res.returncode != 0:
        return dict.fromkeys(BASELINES, res.stderr.strip().splitlines()[-1] if res.stderr.strip() else
                             f"exit status {res.returncode}")
    return json.loads(res.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- encoding (public layout)
def _layout(schema, bins: int) -> list[dict]:
    from dpcare.exceptions import SpecError

    cols = []
    for c in schema.columns:
        if c.kind == "numeric":
            if c.bounds is None:
                raise SpecError(f"column '{c.name}': the SmartNoise baselines need public bounds for every numeric "
                                "column; declare them in the spec")
            lo, hi = (float(v) for v in c.bounds)
            log = c.transform == "log1p"
            cols.append({"name": c.name, "kind": "numeric", "bounds": (lo, hi), "log": log,
                         "range": (math.log1p(lo), math.log1p(hi)) if log else (lo, hi), "missing": c.nullable})
        else:
            if c.categories is None:
                raise SpecError(f"column '{c.name}': the SmartNoise baselines need declared categories for every "
                                "categorical column")
            cols.append({"name": c.name, "kind": "categorical", "categories": list(c.categories),
                         "missing": c.nullable})
    return cols


def _category_codes(s: pd.Series, col: dict) -> np.ndarray:
    index = {v: i for i, v in enumerate(col["categories"])}
    return s.map(index).fillna(len(index)).to_numpy(int)  # NaN -> the "missing" code (nullable columns only)


def _scaled(s: pd.Series, col: dict) -> np.ndarray:
    x = s.to_numpy(float)
    lo, hi = col["bounds"]
    x = np.clip(x, lo, hi)
    return np.log1p(x) if col["log"] else x


def _cube_spec(col: dict, bins: int) -> dict:
    """A column's SmartNoise spec as codes: its categories (or ``bins`` bins) and a "missing" code if nullable."""
    return {"name": col["name"], "card": (len(col["categories"]) if col["kind"] == "categorical" else bins)
            + col["missing"]}


def _encode(df: pd.DataFrame, layout: list[dict], style: str, bins: int):
    """Codes (and DP-CTGAN's scaled numbers) plus the SmartNoise column specs, all from the schema."""
    data, specs = {}, []
    for col in layout:
        name, s = col["name"], df[col["name"]]
        if col["kind"] == "categorical":
            data[name] = _category_codes(s, col)
            specs.append(_cube_spec(col, bins))
            continue
        t = _scaled(s, col)
        lo, hi = col["range"]
        if style == "cube":
            code = np.minimum(np.floor((t - lo) / (hi - lo) * bins), bins - 1)
            data[name] = np.where(np.isnan(t), bins, code).astype(int)
            specs.append(_cube_spec(col, bins))
        else:
            data[name] = np.where(np.isnan(t), (lo + hi) / 2, t)
            specs.append({"name": name, "lower": lo, "upper": hi})
            if col["missing"]:
                data[name + "__missing"] = np.isnan(t).astype(int)
                specs.append({"name": name + "__missing", "card": 2})
    return pd.DataFrame(data), specs


def _decode(synth: pd.DataFrame, layout: list[dict], style: str, bins: int, rng) -> pd.DataFrame:
    out = {}
    for col in layout:
        name = col["name"]
        if col["kind"] == "categorical":
            cats = np.array(col["categories"] + [np.nan], dtype=object)
            code = np.clip(synth[name].to_numpy(int), 0, len(cats) - 1 if col["missing"] else len(cats) - 2)
            out[name] = pd.Series(cats[code], dtype=object)
            continue
        lo, hi = col["range"]
        if style == "cube":
            code = synth[name].to_numpy(int)
            missing = code >= bins
            t = lo + (np.clip(code, 0, bins - 1) + rng.random(len(code))) * (hi - lo) / bins
        else:
            t = np.clip(synth[name].to_numpy(float), lo, hi)
            missing = synth[name + "__missing"].to_numpy(int) == 1 if col["missing"] else np.zeros(len(t), bool)
        x = np.clip(np.expm1(t) if col["log"] else t, *col["bounds"])
        out[name] = np.where(missing & col["missing"], np.nan, x).astype(float)
    return pd.DataFrame(out)


# --------------------------------------------------------------------------- API
def run_baseline(name: str, train_df: pd.DataFrame, schema, epsilon: float, delta: float, n_samples: int,
                 seed: int = 0, timeout: float | None = None, *, bins: int = DEFAULT_BINS, epochs: int = 5,
                 batch_size: int = 500, options: dict | None = None) -> pd.DataFrame:
    """``n_samples`` synthetic rows from SmartNoise ``name`` (mst, aim, dpctgan) at (epsilon, delta)-DP.

    The result has exactly the schema's columns: numeric as float within the bounds (NaN
    only in nullable columns), categorical as one of the declared categories (or NaN if
    nullable). ``out.attrs["dp"]`` holds the accounting and the fit time. ``bins``: MST/AIM
    discretisation of numeric columns; ``epochs`` and ``batch_size``: DP-CTGAN's run time;
    ``options``: further keyword arguments of the SmartNoise class (e.g. AIM's
    ``max_model_size``, DP-CTGAN's ``generator_dim``). ``timeout`` in seconds.
    """
    from dpcare.data import load_table
    from dpcare.exceptions import DataError, PrivacyParameterError, SettingsError, UnknownNameError

    if name not in BASELINES:
        raise UnknownNameError(f"unknown baseline {name!r}; choose one of {list(BASELINES)}")
    if not (isinstance(epsilon, numbers.Real) and math.isfinite(epsilon) and epsilon > 0):
        raise PrivacyParameterError(f"epsilon must be a finite number > 0, got epsilon = {epsilon!r}")
    if not (isinstance(delta, numbers.Real) and 0 < delta < 1):
        raise PrivacyParameterError(f"delta must be in (0, 1) (MST/AIM go through zCDP), got delta = {delta!r}")
    if int(n_samples) != n_samples or n_samples < 1:
        raise SettingsError(f"n_samples must be a positive integer, got {n_samples!r}")
    if int(bins) != bins or bins < 2:
        raise SettingsError(f"bins must be an integer >= 2, got {bins!r}")
    if name == "dpctgan":
        if int(epochs) != epochs or epochs < 1 or int(batch_size) != batch_size or batch_size < 2:
            raise SettingsError(f"epochs must be >= 1 and batch_size >= 2, got {epochs!r}, {batch_size!r}")
        clash = sorted(_DPCTGAN_FIXED & set(options or {}))
        if clash:
            raise SettingsError(f"options {clash} are set by run_baseline (noise is calibrated to epsilon)")
    layout = _layout(schema, bins)
    df = load_table(train_df, schema)
    if name == "dpctgan" and len(df) < 2:
        raise DataError("DP-CTGAN needs at least 2 training rows")
    error = available_baselines()[name]
    if error is not None:
        raise RuntimeError(f"SmartNoise baseline {name!r} is not available: {error}")
    style = "gan" if name == "dpctgan" else "cube"
    train, specs = _encode(df, layout, style, bins)
    job = {"name": name, "epsilon": float(epsilon), "delta": float(delta), "n_samples": int(n_samples),
           "seed": int(seed), "columns": specs, "epochs": int(epochs), "batch_size": int(batch_size),
           "options": options or {}}
    with tempfile.TemporaryDirectory(prefix="dpcare-baseline-") as tmp:
        work = Path(tmp)
        train.to_csv(work / "train.csv", index=False)
        accounting = run_job(job, work, timeout)
        synth = pd.read_csv(work / "synth.csv")
    out = _decoded(synth, layout, style, bins, seed)
    out.attrs["dp"] = accounting
    return out


def _decoded(synth: pd.DataFrame, layout: list[dict], style: str, bins: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    synth = synth.iloc[rng.permutation(len(synth))].reset_index(drop=True)  # mbi emits rows grouped by value
    return _decode(synth, layout, style, bins, rng)


#: one line per AIM round when the job is verbose: the fraction of rho spent so far
_BUDGET_LINE = re.compile(r"Budget Used\s+([0-9.eE+-]+)")


def run_job(job: dict, work: Path, timeout: float | None = None,
            progress: Callable[[float], None] | None = None) -> dict:
    """Run one worker ``job`` (written to ``work``/job.json beside its input files) in the SmartNoise venv;
    returns its result.json. ``progress``: called with the fraction of AIM's budget spent after each round
    (the job is then run verbose and its output read line by line)."""
    from dpcare.exceptions import PrivacyParameterError

    (work / "job.json").write_text(json.dumps({**job, "verbose": progress is not None}))
    cmd = [str(baselines_python()), "-P", str(Path(__file__).resolve()), str(work)]
    name = job["name"]
    with open(work / "stderr.txt", "w+") as err, open(work / "stdout.txt", "w+") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE if progress else log, stderr=err, text=True,
                                env=_subprocess_env())
        try:
            if progress is not None:
                for line in proc.stdout:
                    found = _BUDGET_LINE.search(line)
                    if found:
                        progress(min(float(found.group(1)), 1.0))
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise TimeoutError(f"SmartNoise {name} did not finish within {timeout} s") from None
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        err.seek(0)
        stderr = err.read()
    if (work / REFUSED_FILE).exists():  # settings the worker found impossible (it cannot import dpcare)
        raise PrivacyParameterError(json.loads((work / REFUSED_FILE).read_text())["error"])
    if proc.returncode != 0 or not (work / "result.json").exists():
        tail = "\n".join(stderr.strip().splitlines()[-15:])
        raise RuntimeError(f"SmartNoise {name} failed (exit status {proc.returncode}):\n{tail}")
    return json.loads((work / "result.json").read_text())


def fit_aim(train: pd.DataFrame, layout: list[dict], bins: int, rho: float, epsilon: float, delta: float,
            options: dict | None = None, progress: Callable[[float], None] | None = None,
            checkpoint: str | os.PathLike | None = None) -> tuple[dict, dict[str, np.ndarray], dict]:
    """Fit AIM on the (schema-checked) private ``train`` rows at ``rho``-zCDP; returns the fitted model's
    state (domain, cliques, total), its log-potential arrays and the worker's accounting record. The rows
    are encoded with the public ``layout`` (:func:`_layout`); nothing else of them leaves this process.
    ``checkpoint``: a file the rounds are saved to after each one, and resumed from (private: delete it
    once the fit is done)."""
    codes, specs = _encode(train, layout, "cube", bins)
    job = {"name": "aim", "epsilon": float(epsilon), "delta": float(delta), "rho": float(rho), "n_samples": 0,
           "seed": 0, "columns": specs, "options": options or {}, "save_model": True,
           "checkpoint": None if checkpoint is None else str(Path(checkpoint).resolve())}
    with tempfile.TemporaryDirectory(prefix="dpcare-aim-") as tmp:
        work = Path(tmp)
        codes.to_csv(work / "train.csv", index=False)
        accounting = run_job(job, work, progress=progress)
        state = json.loads((work / MODEL_STATE).read_text())
        with np.load(work / MODEL_ARRAYS) as saved:
            arrays = {k: saved[k] for k in saved.files}
    return state, arrays, accounting


def sample_aim(state: dict, arrays: dict[str, np.ndarray], layout: list[dict], bins: int, n: int,
               seed: int = 0) -> pd.DataFrame:
    """``n`` rows of a fitted AIM model (:func:`fit_aim`), decoded to the schema's columns. Reads no private
    data: a function of the released model, ``n`` and ``seed``."""
    specs = public_column_specs(layout, bins)
    job = {"name": SAMPLE_JOB, "n_samples": int(n), "seed": int(seed), "columns": specs}
    with tempfile.TemporaryDirectory(prefix="dpcare-aim-sample-") as tmp:
        work = Path(tmp)
        (work / MODEL_STATE).write_text(json.dumps(state))
        np.savez(work / MODEL_ARRAYS, **arrays)
        run_job(job, work)
        synth = pd.read_csv(work / "synth.csv")
    return _decoded(synth, layout, "cube", bins, seed)


def public_column_specs(layout: list[dict], bins: int) -> list[dict]:
    """The SmartNoise column specs of a cube encoding: names and cardinalities, from the layout alone."""
    return [_cube_spec(c, bins) for c in layout]


# --------------------------------------------------------------------------- worker (SmartNoise venv)
REFUSED_FILE = "refused.json"  # the worker's refusal of the job's privacy settings: {"error": message}
SAMPLE_JOB = "aim-sample"  # a job that samples a saved AIM model (no training rows)
MODEL_STATE, MODEL_ARRAYS = "model.json", "model.npz"  # a fitted AIM model: domain and cliques; log-potentials


class _Refused(Exception):
    """The job's privacy settings cannot be met; the worker has no dpcare, so run_baseline raises the
    message as a PrivacyParameterError."""


def _transformer(specs: list[dict], style: str):
    """A TableTransformer fitted on a PUBLIC table (every code once, the bounds): no data, no epsilon."""
    from snsynth.transform import (
        ChainTransformer,
        LabelTransformer,
        MinMaxTransformer,
        OneHotEncoder,
        TableTransformer,
    )

    ts, public = [], {}
    rows = max([s.get("card", 1) for s in specs])
    for s in specs:
        if "card" in s:
            label = LabelTransformer(nullable=False)
            ts.append(label if style == "cube" else ChainTransformer([label, OneHotEncoder()]))
            public[s["name"]] = [min(i, s["card"] - 1) for i in range(rows)]
        else:
            ts.append(MinMaxTransformer(lower=s["lower"], upper=s["upper"], nullable=False))
            public[s["name"]] = [s["lower"] + (s["upper"] - s["lower"]) * i / max(rows - 1, 1) for i in range(rows)]
    tt = TableTransformer(ts)
    tt.fit(pd.DataFrame(public))
    assert tt.fit_complete and not tt.needs_epsilon and tt.odometer.spent[0] == 0.0
    return tt


def _dpctgan(job: dict, train: pd.DataFrame, tt):
    import opacus
    from opacus import privacy_analysis
    from snsynth.pytorch.nn.dpctgan import DPCTGAN

    made = []

    class Engine(opacus.PrivacyEngine):  # keeps SmartNoise's engine to read its final accounting
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    opacus.PrivacyEngine = Engine
    n, eps, delta, epochs = len(train), job["epsilon"], job["delta"], job["epochs"]
    batch = min(job["batch_size"], n - n % 2)
    if batch < 2:  # run_baseline refuses fewer than 2 rows before it starts the worker
        raise RuntimeError("DP-CTGAN needs at least 2 training rows")
    per_batch = 2 if job["options"].get("loss", "cross_entropy") == "cross_entropy" else 1  # (fake, real)
    steps = per_batch * max(n // batch, 1) * epochs  # discriminator optimizer steps
    orders = DPCTGAN_ORDERS  # exactly the orders SmartNoise hands its PrivacyEngine, so both agree on epsilon

    def spent(sigma: float) -> float:
        rdp = privacy_analysis.compute_rdp(batch / n, sigma, steps, orders)
        return float(privacy_analysis.get_privacy_spent(orders, rdp, delta)[0])

    lo, hi = 1e-2, 1e4
    if spent(hi) > eps:
        raise _Refused(f"DP-CTGAN cannot meet epsilon = {eps} at delta = {delta}: opacus' RDP accountant gives "
                       f"{spent(hi):.3g} even at noise multiplier {hi:g}")
    for _ in range(60):  # smallest noise multiplier with spent <= eps (log-scale bisection)
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if spent(mid) <= eps else (mid, hi)
    synth = DPCTGAN(epsilon=eps, delta=delta, sigma=hi, epochs=epochs, batch_size=batch, verbose=False,
                    cuda=False, **job["options"])
    synth.fit(train, transformer=tt)
    engine = made[-1]
    final, alpha = engine.get_privacy_spent(delta)
    if engine.steps != steps or final > eps * (1 + 1e-9):
        raise RuntimeError(f"DP-CTGAN accounting mismatch: {engine.steps} steps (expected {steps}), "
                           f"epsilon spent {final} > {eps}")
    return synth, {"mechanism": "DP-CTGAN (opacus 0.14 RDP, discriminator DP-SGD)", "epsilon": eps, "delta": delta,
                   "epsilon_spent": final, "best_alpha": alpha, "noise_multiplier": hi, "epochs": epochs,
                   "batch_size": batch, "sample_rate": batch / n, "steps": engine.steps,
                   "max_grad_norm": synth.max_per_sample_grad_norm, "epsilon_before_epoch": synth.epsilon_list,
                   "preprocessor_epsilon": 0.0}


def _fresh_entropy(torch_too: bool) -> None:
    """Seed every generator a fit draws from (AIM's and MST's selections, DP-CTGAN's noise) from the OS:
    seeded with the job's public seed, an adversary who knows it could replay those draws."""
    import random

    random.seed(secrets.token_bytes(32))
    np.random.seed(np.frombuffer(secrets.token_bytes(32), dtype=np.uint32))
    if torch_too:
        import torch

        torch.manual_seed(secrets.randbits(63))


def _public_seed(seed: int) -> None:
    """Seed the generators sampling draws from (post-processing of the fitted model: no privacy cost)."""
    import random

    random.seed(seed)
    np.random.seed(seed)
    if "torch" in sys.modules:
        import torch

        torch.manual_seed(seed)


def _rounds_module():
    """dpcare.synth.aim_rounds, imported by path (this interpreter has no dpcare)."""
    import importlib.util

    name = "dpcare_aim_rounds"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("aim_rounds.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # before exec: its dataclasses look their module up
        spec.loader.exec_module(module)
    return sys.modules[name]


def _resumable_aim(checkpoint: str | None, digest: str):
    """SmartNoise's AIMSynthesizer with its rounds run by :func:`~dpcare.synth.aim_rounds.run_rounds`: the same
    mechanism (SmartNoise's selection, OpenDP's noise, mbi's estimation, the paper's schedule), its state saved
    to ``checkpoint`` after every round and resumed from it (keyed to the settings and ``digest`` of the rows)."""
    import snsynth.aim.aim as lib
    from mbi import LinearMeasurement, estimation, marginal_oracles

    r = _rounds_module()

    def noise(sigma: float, size: int) -> np.ndarray:
        return np.asarray(lib.gaussian_noise(sigma, size), dtype=float)

    class ResumableAIM(lib.AIMSynthesizer):
        resumed_round = None  # the round a fit resumed after (None: it started afresh)

        def AIM(self, data, workload):
            def estimate(state):
                measured = [LinearMeasurement(m.y, m.clique, m.sigma) for m in state.measurements]
                return estimation.mirror_descent(data.domain, measured, iters=1000,
                                                 marginal_oracle=marginal_oracles.message_passing_stable)

            rounds = self.rounds or r.ROUNDS_PER_COLUMN * len(data.domain)
            key = {"rho": self.rho, "rounds": rounds, "max_model_size": self.max_model_size,
                   "attributes": list(data.domain.attributes), "shape": [int(x) for x in data.domain.shape],
                   "rows": digest}
            candidates = lib.compile_workload(workload)
            answers = {cl: np.asarray(data.project(cl).datavector(), dtype=float) for cl in candidates}
            state = r.AIMRounds.load(checkpoint, key) if checkpoint else None
            if state is None:
                state = r.AIMRounds.start(self.rho, rounds)
                r.measure_one_way(state, answers, noise)
                if checkpoint:
                    state.save(checkpoint, key)
            else:
                self.resumed_round = state.round
                if self.verbose:
                    print("Resumed after round", state.round, "Budget Used", state.used / self.rho, flush=True)

            def select(model, state):
                small = lib.filter_candidates(candidates, model, state.size_limit(self.max_model_size))
                return self._worst_approximated(small, answers, model, state.epsilon, state.sigma)

            def after_round(state, clique):  # saved before the progress line: a caller may stop at that line
                if checkpoint:
                    state.save(checkpoint, key)
                if self.verbose:
                    print("Selected", clique, "Budget Used", state.used / self.rho, flush=True)

            self.synthesizer = r.run_rounds(state, answers, estimate=estimate, select=select, noise=noise,
                                            fitted=lambda model, cl: np.asarray(model.project(cl).datavector()),
                                            after_round=after_round)
            self.rho_spent, self.rounds_run = state.check_spent(), state.round

    return ResumableAIM


def _fit_marginal(job: dict, train: pd.DataFrame, digest: str = ""):
    """MST or AIM fitted on the encoded rows; AIM at the job's ``rho`` when given (dpcare calibrates it with its
    own accountant, so that the ledger's epsilon is at most the target), else SmartNoise's ``cdp_rho``, and
    checkpointed to the job's ``checkpoint`` when given (``digest``: of the rows, the checkpoint's key)."""
    import snsynth.aim.aim as aim_module
    from snsynth.mst import MSTSynthesizer
    from snsynth.utils import cdp_rho

    rho = job.get("rho")
    if rho is not None:
        if job["name"] != "aim":
            raise RuntimeError("only AIM takes a calibrated rho")
        aim_module.cdp_rho = lambda epsilon, delta: rho  # AIM reads its budget through this name only
    is_aim = job["name"] == "aim"
    cls = _resumable_aim(job.get("checkpoint"), digest) if is_aim else MSTSynthesizer
    options = dict(job["options"])
    if job.get("verbose") and is_aim:
        options["verbose"] = True  # one line per round: "... Budget Used <fraction>" (the caller's progress)
    synth = cls(epsilon=job["epsilon"], delta=job["delta"], **options)
    synth.fit(train, transformer=_transformer(job["columns"], "cube"))
    spent = synth.rho if is_aim else cdp_rho(job["epsilon"], job["delta"])
    if rho is not None and spent != rho:
        raise RuntimeError(f"AIM spent rho = {spent}, not the calibrated {rho}")
    extra = {"rho_spent": synth.rho_spent, "rounds": synth.rounds_run, "resumed_after_round": synth.resumed_round
             } if is_aim else {}
    return synth, {"mechanism": f"{job['name'].upper()} (zCDP, Gaussian noise)", "epsilon": job["epsilon"],
                   "delta": job["delta"], "rho": spent, "preprocessor_epsilon": 0.0, **extra}


def _save_model(model, work: Path) -> None:
    """The fitted graphical model (mbi MarkovRandomField): its domain, cliques and log-potentials, all that
    sampling needs. Post-processing of the noisy measurements: releasing it costs nothing more."""
    pots = model.potentials
    arrays = {f"p{i}": np.asarray(pots.arrays[cl].values) for i, cl in enumerate(pots.cliques)}
    np.savez(work / MODEL_ARRAYS, **arrays)
    (work / MODEL_STATE).write_text(json.dumps({
        "attributes": list(pots.domain.attributes), "shape": [int(x) for x in pots.domain.shape],
        "cliques": [list(cl) for cl in pots.cliques], "total": float(model.total)}))


def _load_model(work: Path):
    import jax.numpy as jnp
    from mbi import CliqueVector, Domain, Factor, MarkovRandomField, marginal_oracles

    state = json.loads((work / MODEL_STATE).read_text())
    domain = Domain(tuple(state["attributes"]), tuple(state["shape"]))
    cliques = [tuple(cl) for cl in state["cliques"]]
    with np.load(work / MODEL_ARRAYS) as saved:
        arrays = {cl: Factor(domain.project(cl), jnp.asarray(saved[f"p{i}"])) for i, cl in enumerate(cliques)}
    potentials = CliqueVector(domain, cliques, arrays)
    marginals = marginal_oracles.message_passing_stable(potentials, state["total"])
    return MarkovRandomField(potentials=potentials, marginals=marginals, total=state["total"])


def _sample_saved(job: dict, work: Path) -> pd.DataFrame:
    """``n_samples`` rows of a saved AIM model, decoded to the job's column codes (as AIM's own ``sample``)."""
    model = _load_model(work)
    _public_seed(job["seed"])
    data = model.synthetic_data(rows=job["n_samples"])
    names = [f"col{i}" for i in range(len(job["columns"]))]
    rows = [tuple(t[1:]) for t in data.df[names].itertuples()]
    return _transformer(job["columns"], "cube").inverse_transform(rows)


def _worker(work: Path) -> None:
    job = json.loads((work / "job.json").read_text())
    if job["name"] == SAMPLE_JOB:
        start = time.perf_counter()
        out, acc = _sample_saved(job, work), {}
    else:
        train = pd.read_csv(work / "train.csv")
        # the checkpoint's key (a resume on other rows starts afresh); only an AIM fit that checkpoints reads it
        digest = hashlib.sha256((work / "train.csv").read_bytes()).hexdigest() if job.get("checkpoint") else ""
        _fresh_entropy(torch_too=job["name"] == "dpctgan")
        start = time.perf_counter()
        if job["name"] == "dpctgan":
            try:
                synth, acc = _dpctgan(job, train, _transformer(job["columns"], "gan"))
            except _Refused as err:
                (work / REFUSED_FILE).write_text(json.dumps({"error": str(err)}))
                return
        else:
            synth, acc = _fit_marginal(job, train, digest)
        acc["fit_seconds"] = time.perf_counter() - start
        if job.get("save_model"):
            _save_model(synth.synthesizer, work)
        _public_seed(job["seed"])
        start = time.perf_counter()
        out = synth.sample(job["n_samples"]) if job["n_samples"] else None
    acc["sample_seconds"] = time.perf_counter() - start
    if out is not None:
        out[[s["name"] for s in job["columns"]]].to_csv(work / "synth.csv", index=False)
    (work / "result.json").write_text(json.dumps(acc, default=float))


if __name__ == "__main__":
    _worker(Path(sys.argv[1]))
