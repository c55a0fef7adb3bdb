"""The README's Python API examples run as written (in a temporary folder, one namespace, in order)."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def api_examples() -> list[str]:
    text = README.read_text()
    section = text[text.index("## Python API\n"):]
    section = section[: section.index("\n## ", 1)]
    return re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)


@pytest.mark.slow  # end to end: trains two models, writes a report
def test_readme_python_api_examples_run(tmp_path, monkeypatch, capsys):
    blocks = api_examples()
    assert len(blocks) >= 3
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)
    out = capsys.readouterr().out
    assert "epsilon" in out.lower()
    assert (tmp_path / "results" / "api-report.html").stat().st_size > 10_000
    assert len(namespace["Budget"].load(namespace["budget"].path).releases) == 1
