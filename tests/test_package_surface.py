"""The package surface: version, lazy public names, import layering and cycles, the CLI's error path,
registries."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

import dpcare
from dpcare.cli import app
from dpcare.cli.common import ErrorReportingGroup
from dpcare.exceptions import (
    DPCareError,
    MissingDependencyError,
    MissingFileError,
    PrivacyParameterError,
    UnknownNameError,
)
from dpcare.registry import Registry

SRC = Path(dpcare.__file__).resolve().parent


# --------------------------------------------------------------------------- version and lazy names
def test_version_is_the_installed_metadata():
    assert isinstance(dpcare.__version__, str)
    assert dpcare.__version__ == metadata.version("dpcare")


@pytest.mark.parametrize("module", ["dpcare", "dpcare.cli"])
def test_import_does_not_load_torch(module):
    code = f"import sys, {module}; print('torch' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "False", f"`import {module}` imported torch"


def test_the_command_line_loads_no_accountant_scipy_or_pandas():
    """Issue 52's start-up: `dpcare --help` in under 2 s needs the command modules to leave dp-accounting (with
    scipy, about 2.5 s) and pandas to the commands that run (benchmarks/bench_startup.py times it)."""
    code = "import sys, dpcare.cli; print(sorted(m for m in ('dp_accounting', 'scipy', 'pandas') if m in sys.modules))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]", f"`import dpcare.cli` imported {r.stdout.strip()}"


@pytest.mark.parametrize("package, name", [("dpcare.privacy", "PrivacyLedger"), ("dpcare.data", "TableSchema"),
                                           ("dpcare.text", "generate_corpus")])
def test_lazy_package_faces_resolve_their_names(package, name):
    import importlib

    module = importlib.import_module(package)
    assert name in module.__all__ and name in dir(module)
    assert getattr(module, name).__name__ == name
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        module.nothing  # noqa: B018


def test_every_lazy_name_is_public():
    assert set(dpcare._LAZY) <= set(dpcare.__all__)


@pytest.mark.parametrize("name", dpcare.__all__)
def test_public_names_resolve(name):
    home = dpcare._LAZY.get(name)
    if home is not None and importlib.util.find_spec(home) is None:
        pytest.skip(f"{home} is not in this tree yet")
    assert getattr(dpcare, name) is not None
    assert name in dir(dpcare)


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        dpcare.nope  # noqa: B018


# --------------------------------------------------------------------------- the import graph
def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in SRC.rglob("*.py")}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _module_level(body: list[ast.stmt]):
    """Import statements run when the module is imported: not in functions, not under TYPE_CHECKING."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _module_level(node.body)
            yield from _module_level(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, *(h.body for h in node.handlers), node.orelse, node.finalbody):
                yield from _module_level(block)
        elif isinstance(node, (ast.With, ast.ClassDef)):
            yield from _module_level(node.body)


def _targets(node: ast.Import | ast.ImportFrom, module: str) -> set[str]:
    """The dpcare modules an import statement loads (a name imported from a package counts as the
    submodule of that name if there is one, else as the package)."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name in MODULES}
    base = node.module or ""
    if node.level:
        package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    found = {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES}
    if len(found) < len(node.names) and base in MODULES:
        found.add(base)
    return found


def import_graph(module_level_only: bool = True) -> dict[str, set[str]]:
    graph = {}
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        nodes = _module_level(tree.body) if module_level_only else (
            n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)))
        graph[module] = set().union(*(_targets(n, module) for n in nodes)) - {module}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_the_cycle_finder_finds_a_cycle():
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_level_import_cycles():
    graph = import_graph()
    assert len(graph) > 50 and "dpcare.cli.common" in graph["dpcare.cli.synth"]
    assert import_cycles(graph) == []


#: the faces and the studies sit on top: no modality, recipe or library layer may import them
TOP = ("dpcare.studies", "dpcare.report", "dpcare.cli", "dpcare.estimators")
LOWER = ("dpcare.privacy", "dpcare.runs", "dpcare.data", "dpcare.engine", "dpcare.models", "dpcare.methods",
         "dpcare.audit", "dpcare.tabular", "dpcare.fusion", "dpcare.text", "dpcare.timeseries", "dpcare.images",
         "dpcare.synth", "dpcare.lm", "dpcare.settings", "dpcare.io", "dpcare.exceptions", "dpcare.caller",
         "dpcare.verdict", "dpcare.lazy", "dpcare.parallel", "dpcare.ranks", "dpcare.units")


def _under(module: str, packages) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def forbidden_imports(graph: dict[str, set[str]], importers, imported) -> dict[str, list[str]]:
    bad = {m: sorted(t for t in targets if _under(t, imported)) for m, targets in graph.items()
           if _under(m, importers)}
    return {m: t for m, t in bad.items() if t}


@pytest.mark.parametrize("importers, imported", [
    (LOWER, TOP),  # no modality imports a study, the report, the CLI or the estimators
    (("dpcare.report",), ("dpcare.studies", "dpcare.cli")),  # the report reads run folders, not studies
    (("dpcare.audit",), ("dpcare.tabular", "dpcare.text", "dpcare.timeseries", "dpcare.images", "dpcare.synth")),
])
def test_layers_import_downward_only(importers, imported):
    """Imports anywhere in a module (function-level too): a lazy import is still a dependency."""
    assert forbidden_imports(import_graph(module_level_only=False), importers, imported) == {}


def test_the_layer_check_sees_a_planted_upward_import():
    graph = import_graph(module_level_only=False)
    graph["dpcare.timeseries.recipe"] = graph.get("dpcare.timeseries.recipe", set()) | {"dpcare.studies.tsf"}
    assert forbidden_imports(graph, LOWER, TOP) == {"dpcare.timeseries.recipe": ["dpcare.studies.tsf"]}


#: the whole order of layers, lowest first: a module imports only from its own layer or those below it
LAYERS = (
    ("exceptions", "caller", "runtime", "ranks", "registry", "lazy", "io", "progress", "verdict", "token_loss",
     "units"),
    ("privacy",),  # accounting, ledgers, budgets, the secret randomness: never the engine
    ("settings", "parallel"),
    ("runs", "data"),
    ("engine", "models", "lm"),
    ("methods", "fusion"),
    ("audit",),
    ("tabular", "timeseries", "images", "synth"),
    ("text",),  # reuses the time-series splits
    ("studies", "report", "estimators"),
    ("cli", "console"),  # console: the console script, which re-executes before importing cli
)


def layer_violations(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """``{module: [imported modules of a higher layer]}`` (imports of the package itself are ignored)."""
    rank = {f"dpcare.{p}": i for i, layer in enumerate(LAYERS) for p in layer}

    def level(module: str) -> int | None:
        return next((r for p, r in rank.items() if module == p or module.startswith(p + ".")), None)

    bad: dict[str, list[str]] = {}
    for module, targets in graph.items():
        mine = level(module)
        if mine is None:
            continue
        up = sorted(t for t in targets if (lv := level(t)) is not None and lv > mine)
        if up:
            bad[module] = up
    return bad


def test_every_module_imports_only_its_own_layer_or_lower():
    """Function-level imports too: the privacy layer once imported the engine for rank 0's secret root."""
    assert layer_violations(import_graph(module_level_only=False)) == {}


def test_the_layer_order_sees_a_planted_import_of_the_engine_by_the_privacy_layer():
    graph = import_graph(module_level_only=False)
    graph["dpcare.privacy.randomness"] = graph["dpcare.privacy.randomness"] | {"dpcare.engine.distributed"}
    assert layer_violations(graph) == {"dpcare.privacy.randomness": ["dpcare.engine.distributed"]}


def test_every_package_is_placed_in_the_layer_order():
    top_level = {m.split(".")[1] for m in MODULES if m.count(".") >= 1}
    assert top_level - {p for layer in LAYERS for p in layer} == set()


def test_every_package_is_placed_in_a_layer():
    top_level = {m.split(".")[1] for m in MODULES if m.count(".") >= 1}
    placed = {p.split(".")[1] for p in (*TOP, *LOWER)}
    assert top_level - placed <= {"progress", "registry", "runtime", "token_loss", "cli", "console"}, top_level - placed


# --------------------------------------------------------------------------- the CLI's one error path
def test_cli_reports_a_dpcare_error_once_with_exit_status_2():
    r = CliRunner().invoke(app, ["account", "epsilon", "--q", "2", "--sigma", "1", "--steps", "3",
                                 "--delta", "1e-5"])
    assert r.exit_code == 2
    assert r.stderr.strip() == "error: sampling rate q must be in (0, 1], got q = 2.0"


def _app_raising(err: Exception) -> typer.Typer:
    tiny = typer.Typer(cls=ErrorReportingGroup)

    @tiny.command()
    def boom() -> None:
        raise err

    @tiny.command()
    def other() -> None:
        pass

    return tiny


def test_the_error_group_reports_user_errors_and_lets_bugs_through():
    r = CliRunner().invoke(_app_raising(PrivacyParameterError("epsilon must be > 0")), ["boom"])
    assert (r.exit_code, r.stderr) == (2, "error: epsilon must be > 0\n")
    r = CliRunner().invoke(_app_raising(MissingFileError("no such file: x.csv")), ["boom"])
    assert (r.exit_code, r.stderr) == (2, "error: no such file: x.csv\n")
    r = CliRunner().invoke(_app_raising(MissingDependencyError("pip install x")), ["boom"])
    assert (r.exit_code, r.stderr) == (2, "error: pip install x\n")
    # only dpcare's own errors are the user's: a bare built-in error is a bug and keeps its traceback
    for bug in (RuntimeError("a bug"), FileNotFoundError("no such file: x.csv"), ValueError("a bug"),
                ImportError("a bug"), KeyError("a bug")):
        r = CliRunner().invoke(_app_raising(bug), ["boom"])
        assert r.exit_code == 1 and r.exception is bug and not r.stderr.startswith("error:")


def test_an_internal_bug_in_a_real_command_is_a_traceback(monkeypatch):
    import dpcare.privacy

    def broken(*args, **kwargs):
        raise ValueError("internal")

    monkeypatch.setattr(dpcare.privacy, "compute_epsilon", broken)
    r = CliRunner().invoke(app, ["account", "epsilon", "--q", "0.01", "--sigma", "1", "--steps", "3",
                                 "--delta", "1e-5"])
    assert r.exit_code == 1 and isinstance(r.exception, ValueError) and str(r.exception) == "internal"
    assert not isinstance(r.exception, DPCareError) and not r.stderr.startswith("error:")


def test_a_missing_file_is_a_user_error_naming_the_path(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text((SRC / "data" / "specs" / "support2.yaml").read_text())
    missing = tmp_path / "nowhere.csv"
    r = CliRunner().invoke(app, ["train", str(missing), "--spec", str(spec), "--out", str(tmp_path / "out")])
    assert (r.exit_code, r.stderr) == (2, f"error: data file not found: {missing}\n")
    r = CliRunner().invoke(app, ["train", str(missing), "--spec", str(tmp_path / "nope.yaml")])
    assert (r.exit_code, r.stderr) == (2, f"error: spec file not found: {tmp_path / 'nope.yaml'}\n")
    r = CliRunner().invoke(app, ["report", str(tmp_path / "no-run"), "--out", str(tmp_path / "r.html")])
    assert r.exit_code == 2 and r.stderr.startswith("error: ") and str(tmp_path / "no-run") in r.stderr
    assert isinstance(MissingFileError("x"), FileNotFoundError) and isinstance(MissingDependencyError("x"), ImportError)


def test_third_party_parse_errors_of_user_files_are_dpcare_errors(tmp_path):
    """pandas' and json's ValueErrors on a user's file would now be tracebacks: they are re-raised as ours."""
    from dpcare.cli.common import epsilon_list
    from dpcare.data import load_spec
    from dpcare.data.tables import read_table
    from dpcare.exceptions import DataError, SettingsError, SpecError

    (tmp_path / "spec.json").write_text("{not json")
    with pytest.raises(SpecError, match="spec.json, line 1: not valid JSON"):
        load_spec(tmp_path / "spec.json")
    (tmp_path / "t.csv").write_text("a,b\n1,2\n1,2,3,4\n")
    with pytest.raises(DataError, match="t.csv cannot be parsed as CSV"):
        read_table(tmp_path / "t.csv")
    assert epsilon_list(" 1, 3,8,") == (1.0, 3.0, 8.0)
    with pytest.raises(SettingsError, match="--epsilons must be comma-separated numbers, got --epsilons = '1,x'"):
        epsilon_list("1,x")


_BARE = ("ValueError", "FileNotFoundError", "ImportError", "KeyError")


def bare_raises(root: Path = SRC) -> list[str]:
    """``file:line`` of every ``raise ValueError(...)`` (or FileNotFoundError, ImportError, KeyError; a call or the
    bare name) under ``root``, dpcare/exceptions.py left out: errors a user can fix are DPCareErrors."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if path == SRC / "exceptions.py":
            continue
        lines = []
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Raise) and node.exc is not None:
                exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                if isinstance(exc, ast.Name) and exc.id in _BARE:
                    lines.append(node.lineno)
        found += [f"{path.relative_to(root.parent)}:{line}" for line in sorted(lines)]
    return found


def test_no_bare_value_errors_for_user_input():
    bad = bare_raises()
    assert bad == [], ("raise a DPCareError subclass (dpcare.exceptions) for what a user can fix, "
                       "RuntimeError/TypeError for a broken internal invariant: " + ", ".join(bad))


def test_the_bare_raise_check_sees_calls_and_names(tmp_path):
    (tmp_path / "m.py").write_text("def f(x):\n    if x:\n        raise ValueError('x')\n    try:\n        pass\n"
                                   "    except OSError:\n        raise KeyError from None\n    raise DataError('ok')\n")
    assert [s.split(":")[1] for s in bare_raises(tmp_path)] == ["3", "7"]


# --------------------------------------------------------------------------- errors and registries
def test_errors_stay_value_errors():
    assert issubclass(DPCareError, ValueError)
    err = UnknownNameError("column 'x' is not in the spec")
    assert isinstance(err, KeyError) and str(err) == "column 'x' is not in the spec"
    assert isinstance(dpcare.NotFittedError("fit first"), AttributeError)


def test_registry_get_names_the_known_entries():
    reg: Registry[int] = Registry("colour")
    reg.add("red", 1)

    @reg.register("blue")
    def blue():
        return 2

    assert reg.get("blue") is blue and reg.names() == ("red", "blue") and "red" in reg
    with pytest.raises(UnknownNameError, match=r"unknown colour 'green'; choose one of \['blue', 'red'\]"):
        reg.get("green")
    with pytest.raises(DPCareError, match="already registered"):
        reg.add("red", 3)


def test_method_registries():
    from dpcare.methods import make_objective
    from dpcare.methods.fusion import HYBRID_METHODS

    assert make_objective("dp-sgd").name == "dp-sgd"
    with pytest.raises(ValueError, match="unknown method 'dp-adam'; choose one of .*'feature-dp'"):
        make_objective("dp-adam")
    assert HYBRID_METHODS.names()[0] == "naive-fusion" and HYBRID_METHODS.get("fusiondp")(0.5).beta == 0.5


