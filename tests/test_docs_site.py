"""The documentation site (mkdocs.yml, docs/): it builds with ``--strict``, the Python blocks of its pages run,
every ``dpcare`` command (and option) that the README, Getting started and the command-line page name exists,
and the README's relative links point at files that exist.

A ```` ```python ```` block whose first line is ``# not run: <reason>`` is skipped (it trains a model, loads a
language model or needs files the reader supplies); the README's own Python examples run in
``tests/test_readme.py`` (slow).
"""

from __future__ import annotations

import functools
import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from dpcare.cli import app

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
NOT_RUN = "# not run"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
#: pages whose ```bash / ```text blocks must name only commands and options that exist
COMMAND_PAGES = (README, DOCS / "getting-started.md", DOCS / "cli.md")
OPTION = re.compile(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)")


def blocks(path: Path, *languages: str) -> list[str]:
    return [body for lang, body in FENCE.findall(path.read_text()) if lang in languages]


# --------------------------------------------------------------------------- the site builds
def test_site_builds_with_strict(tmp_path):
    if importlib.util.find_spec("mkdocs") is None:
        pytest.fail("mkdocs is not installed: scripts/setup.sh installs the docs extra (pip install -e '.[docs]')")
    site = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"),
                        "--site-dir", str(site)], capture_output=True, text=True, cwd=ROOT, timeout=280)
    assert r.returncode == 0, f"mkdocs build --strict failed:\n{r.stdout}\n{r.stderr}"
    # the API reference is generated from the docstrings, not left empty
    assert 'id="dpcare.tabular.recipe.fit"' in (site / "api" / "tabular" / "index.html").read_text()


# --------------------------------------------------------------------------- the Python blocks run
def runnable_pages() -> list:
    pages = []
    for path in sorted(DOCS.rglob("*.md")):
        code = [b for b in blocks(path, "python") if not b.lstrip().startswith(NOT_RUN)]
        if code:
            pages.append(pytest.param(path, code, id=path.relative_to(DOCS).as_posix()))
    return pages


def test_some_blocks_run_and_every_skipped_block_says_why():
    assert len(runnable_pages()) >= 3
    for path in DOCS.rglob("*.md"):
        for b in blocks(path, "python"):
            first = b.lstrip().splitlines()[0]
            if first.startswith(NOT_RUN):
                assert re.match(r"# not run: \S", first), f"{path}: {first!r} gives no reason"


@pytest.mark.parametrize(("path", "code"), runnable_pages())
def test_python_blocks_of_a_page_run(path, code, tmp_path, monkeypatch):
    """A page's runnable blocks, in order, in one namespace, in a temporary folder."""
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__docs__"}
    for i, block in enumerate(code):
        exec(compile(block, f"{path.relative_to(ROOT)} (python block {i + 1})", "exec"), namespace)


# --------------------------------------------------------------------------- every named command exists
def command_lines(path: Path) -> list[str]:
    """The ``dpcare ...`` command lines of a page's bash/text blocks, continuation lines joined, comments cut."""
    out: list[str] = []
    for block in blocks(path, "bash", "text", "sh", "console"):
        for raw in block.splitlines():
            line = raw.split(" #")[0].rstrip().removesuffix("\\").rstrip()
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                continue
            if stripped.startswith("dpcare "):
                out.append(stripped)
            elif raw[:1].isspace() and out:  # an indented continuation of the command above
                out[-1] += " " + stripped
    return out


@functools.cache
def root_command() -> Any:
    """The click command tree of ``dpcare``, built once (typer builds it anew on every ``invoke``: 0.3 s)."""
    return get_command(app)


def resolve(line: str) -> tuple[list[str], Any]:
    """The command path of ``dpcare a b ...`` and its (click) command; an unknown command fails. A group is
    anything with ``commands`` (typer carries its own copy of click)."""
    node = root_command()
    path: list[str] = []
    for word in line.split()[1:]:
        if not hasattr(node, "commands"):
            break
        assert word in node.commands, f"{line!r}: `{' '.join(['dpcare', *path])}` has no command {word!r}"
        node = node.commands[word]
        path.append(word)
    return path, node


def options(command: Any) -> set[str]:
    return {"--help"} | {o for p in command.params for o in (*p.opts, *p.secondary_opts)}


def documented_commands() -> list:
    lines = dict.fromkeys((page.name, line) for page in COMMAND_PAGES for line in command_lines(page))
    return [pytest.param(page, line, id=f"{page}: {line[:60]}") for page, line in lines]


@pytest.mark.parametrize(("page", "line"), documented_commands())
def test_documented_command_and_its_options_exist(page, line):
    path, command = resolve(line)
    assert path, f"{page}: {line!r} names no dpcare command"
    unknown = sorted(set(OPTION.findall(line)) - options(command))
    assert not unknown, f"{page}: `dpcare {' '.join(path)}` has no option {', '.join(unknown)} (in {line!r})"


def test_every_documented_command_answers_help():
    paths = {tuple(resolve(line)[0]) for page in COMMAND_PAGES for line in command_lines(page)}
    assert len(paths) >= 20
    runner = CliRunner()
    for path in sorted(paths):
        # the built tree, in the runner's isolation (CliRunner.invoke would rebuild the tree from the app each time)
        with runner.isolation() as (_, _, output):
            try:
                root_command().main(args=[*path, "--help"], prog_name="dpcare")
                code = 0
            except SystemExit as exit_:
                code = exit_.code or 0
            text = output.getvalue().decode()
        assert code == 0 and "Usage: dpcare" in text, f"dpcare {' '.join(path)} --help: {text}"


# --------------------------------------------------------------------------- the README's links
def test_readme_links_resolve():
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text()):
        if "://" in target:
            continue
        assert (ROOT / target).exists(), f"README.md links to {target}, which does not exist"
