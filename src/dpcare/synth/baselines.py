"""Baseline DP synthesizers: MST and DP-CTGAN from SmartNoise (``smartnoise-synth``), and AIM (dpcare's own, in
this process: :mod:`dpcare.synth.aim_engine`).

    out = run_baseline("mst", train_df, schema, epsilon=1.0, delta=1e-5, n_samples=2000)
    out.attrs["dp"]  # the privacy accounting of the run

SmartNoise cannot live in dpcare's .venv (smartnoise-sql pins pandas<3, DP-CTGAN needs
opacus 0.14), so MST and DP-CTGAN run in its own interpreter, ``.venv-baselines`` at the repository
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

Accounting. MST and AIM are (epsilon, delta)-DP through zCDP (MST: SmartNoise converts with
OpenDP's ``cdp_rho``; AIM: dpcare's RDP calibration, :func:`~dpcare.privacy.calibrate_zcdp_rho`; delta must be
> 0). DP-CTGAN uses opacus 0.14 on the discriminator:
the noise multiplier is calibrated here with opacus' RDP accountant on the same RDP orders
DPCTGAN passes to its PrivacyEngine, so that ``epochs`` epochs spend at most
epsilon (two discriminator steps per batch), and the reported ``epsilon_spent`` is what
SmartNoise's own PrivacyEngine says after training. As
SmartNoise gives it: batches are not Poisson-sampled, and its conditional sampler uses
exact category frequencies (smartnoise-sdk issues #301, #484), which that number does not
cover. MST hands the exact row count to its estimator (``known_total``, as in the original
private-pgm code). MST/AIM noise comes from OpenDP's secure RNG, so ``seed`` does not make them reproducible.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import secrets
import subprocess
import sys
import tempfile
import time
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

DEFAULT_BINS = 20
_MODULES = {"mst": "snsynth.mst.mst", "dpctgan": "snsynth.pytorch.nn.dpctgan"}  # in SmartNoise's interpreter
BASELINES = ("mst", "aim", "dpctgan")  # aim: dpcare's own, in this process
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


def available_baselines() -> dict[str, str | None]:
    """``{name: None}`` for a baseline that can run (MST and DP-CTGAN: they import in the SmartNoise venv; AIM: its
    packages are installed here), else ``{name: the error}``."""
    from dpcare.synth.aim_engine import available

    return {**_smartnoise_available(), "aim": available()}


@lru_cache(maxsize=1)
def _smartnoise_available() -> dict[str, str | None]:
    py = baselines_python()
    if not py.exists():
        msg = f"no SmartNoise interpreter at {py}: run scripts/setup.sh (or set DPCARE_BASELINES_PYTHON)"
        return dict.fromkeys(_MODULES, msg)
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
        return dict.fromkeys(_MODULES, f"{type(e).__name__}: {e}")
    if res.returncode != 0:
        return dict.fromkeys(_MODULES, res.stderr.strip().splitlines()[-1] if res.stderr.strip() else
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
        raise RuntimeError(f"baseline {name!r} is not available: {error}")
    if name == "aim":
        return _aim(df, layout, epsilon, delta, n_samples, seed, bins, options or {})
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


def run_job(job: dict, work: Path, timeout: float | None = None) -> dict:
    """Run one worker ``job`` (written to ``work``/job.json beside its input files) in the SmartNoise venv;
    returns its result.json."""
    from dpcare.exceptions import PrivacyParameterError

    (work / "job.json").write_text(json.dumps(job))
    cmd = [str(baselines_python()), "-P", str(Path(__file__).resolve()), str(work)]
    name = job["name"]
    with open(work / "stderr.txt", "w+") as err, open(work / "stdout.txt", "w+") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=err, text=True, env=_subprocess_env())
        try:
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


def _aim(df: pd.DataFrame, layout: list[dict], epsilon: float, delta: float, n_samples: int, seed: int, bins: int,
         options: dict) -> pd.DataFrame:
    """AIM as a baseline: dpcare's own (:mod:`dpcare.synth.aim_engine`) at the rho its RDP accountant calibrates to
    (epsilon, delta), ``n_samples`` rows sampled with ``seed``."""
    from dpcare.privacy import calibrate_zcdp_rho
    from dpcare.synth.aim_engine import fit_aim, sample_aim

    unknown = sorted(set(options) - {"max_model_size"})
    if unknown:
        from dpcare.exceptions import SettingsError

        raise SettingsError(f"AIM takes the option max_model_size, not {unknown}")
    rho = calibrate_zcdp_rho(epsilon, delta)
    state, arrays, accounting = fit_aim(df, layout, bins, rho, **options)
    start = time.perf_counter()
    out = sample_aim(state, arrays, layout, bins, int(n_samples), seed)
    out.attrs["dp"] = {**accounting, "epsilon": float(epsilon), "delta": float(delta), "preprocessor_epsilon": 0.0,
                       "sample_seconds": time.perf_counter() - start}
    return out


def public_column_specs(layout: list[dict], bins: int) -> list[dict]:
    """The SmartNoise column specs of a cube encoding: names and cardinalities, from the layout alone."""
    return [_cube_spec(c, bins) for c in layout]


# --------------------------------------------------------------------------- worker (SmartNoise venv)
REFUSED_FILE = "refused.json"  # the worker's refusal of the job's privacy settings: {"error": message}


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


def _mst(job: dict, train: pd.DataFrame):
    """MST fitted on the encoded rows at the job's (epsilon, delta) (SmartNoise's ``cdp_rho``)."""
    from snsynth.mst import MSTSynthesizer
    from snsynth.utils import cdp_rho

    synth = MSTSynthesizer(epsilon=job["epsilon"], delta=job["delta"], **job["options"])
    synth.fit(train, transformer=_transformer(job["columns"], "cube"))
    return synth, {"mechanism": "MST (zCDP, Gaussian noise)", "epsilon": job["epsilon"], "delta": job["delta"],
                   "rho": cdp_rho(job["epsilon"], job["delta"]), "preprocessor_epsilon": 0.0}


def _worker(work: Path) -> None:
    job = json.loads((work / "job.json").read_text())
    train = pd.read_csv(work / "train.csv")
    _fresh_entropy(torch_too=job["name"] == "dpctgan")
    start = time.perf_counter()
    if job["name"] == "dpctgan":
        try:
            synth, acc = _dpctgan(job, train, _transformer(job["columns"], "gan"))
        except _Refused as err:
            (work / REFUSED_FILE).write_text(json.dumps({"error": str(err)}))
            return
    else:
        synth, acc = _mst(job, train)
    acc["fit_seconds"] = time.perf_counter() - start
    _public_seed(job["seed"])
    start = time.perf_counter()
    out = synth.sample(job["n_samples"])
    acc["sample_seconds"] = time.perf_counter() - start
    out[[s["name"] for s in job["columns"]]].to_csv(work / "synth.csv", index=False)
    (work / "result.json").write_text(json.dumps(acc, default=float))


if __name__ == "__main__":
    _worker(Path(sys.argv[1]))
