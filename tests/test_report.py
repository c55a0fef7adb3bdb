"""``dpcare report``: run folders written by the real writers become one self-contained HTML page."""

import base64
import json
import re
import shutil
from html import escape

import numpy as np
import pytest
import typer
from helpers import SPEC, toy_table
from typer.testing import CliRunner

from dpcare.cli.common import ErrorReportingGroup
from dpcare.cli.report import report
from dpcare.data import TableSchema
from dpcare.io import write_json
from dpcare.privacy import PrivacyLedger, ProtectedUnit, gaussian_event
from dpcare.report import UnknownRunFolder, collect, write_report
from dpcare.runs import Manifest, RunFolder, attach_attack, read_manifest
from dpcare.settings import DPSettings
from dpcare.tabular import TabularSettings, fit
from dpcare.tabular.audit import audit_split
from dpcare.timeseries.attacks import LOSS_TITLE, attack_row, loss_attack_report
from dpcare.timeseries.recipe import NO_GUARANTEE

PNG = re.compile(r'<img alt="[^"]*" src="data:image/png;base64,([A-Za-z0-9+/=]+)">')


@pytest.fixture(scope="module")
def train_runs(tmp_path_factory):
    """Two `dpcare train` run folders: Feature-DP with DP bounds for 'age' and the LOSS audit, and DP-SGD."""
    spec = json.loads(json.dumps(SPEC))
    del spec["columns"][0]["bounds"]  # age: DP scaling bounds, a second ledger line
    schema = TableSchema.from_dict(spec)
    root = tmp_path_factory.mktemp("runs")
    dp = {"epochs": 1, "batch_size": 32, "accountant": "rdp"}  # RDP: fast calibration
    fdp = fit(toy_table(), schema, TabularSettings(method="feature-dp", hidden=8, stats_epsilon=0.5,
                                                   dp=DPSettings(epsilon=2.0, **dp)), progress=False)
    fdp.save(root / "fdp")
    attach_attack(root / "fdp", "loss", audit_split(fdp, toy_table()))
    fit(toy_table(), TableSchema.from_dict(SPEC), TabularSettings(method="dp-sgd", hidden=8,
                                                                  dp=DPSettings(epsilon=1.0, **dp)),
        progress=False).save(root / "dpsgd")
    return root / "fdp", root / "dpsgd"


def section(html: str, title: str) -> str:
    return html.split(f"<h3>{title}</h3>", 1)[1].split("<h3>", 1)[0]


def pngs(html: str) -> list[bytes]:
    return [base64.b64decode(m) for m in PNG.findall(html)]


@pytest.mark.slow  # end to end
def test_one_train_run_page(train_runs, tmp_path):
    fdp = train_runs[0]
    html = write_report([fdp], tmp_path / "report.html").read_text()
    m = read_manifest(fdp)
    g = m.models[0]["guarantee"]
    assert f"{g['epsilon']:.4g}" in html and f"{g['delta']:.4g}" in html
    assert f"({g['epsilon']:.4g}, {g['delta']:.3g})-differential privacy" in html
    assert len(g["releases"]) == 2
    guarantee = section(html, "Privacy guarantee")
    for line in g["releases"]:  # every ledger line, with its fields from the saved ledger state
        assert escape(line) in guarantee
    assert "from the saved ledger state" in guarantee
    steps = re.search(r"(\d+) Poisson-sampled Gaussian steps \(q = ([\d.]+)", g["releases"][-1])
    assert f"<td class=n>{steps[1]}</td>" in guarantee and f">{steps[2]}</td>" in guarantee
    exposed = section(html, "What is NOT protected")
    assert "NOT protected: the public columns (hr, lab, group, death)" in exposed
    for k, v in m.metrics[0].items():
        if k != "model":
            assert f"{v:.4g}" in section(html, "Utility")
    audit = json.loads((fdp / "attacks" / "loss.json").read_text())
    attacks = section(html, "Attacks")
    assert f"{audit['rows'][0]['AUC'][0]:.4g}" in attacks
    assert audit["curves"] and "the plot the run saved" not in attacks  # the curve is drawn from the saved scores
    images = pngs(html)
    assert images and all(p.startswith(b"\x89PNG\r\n\x1a\n") for p in images)
    assert "Timing: not recorded" in html
    assert "<script" not in html and "<link" not in html and not re.search(r"(src|href)=\"?(https?:|//)", html)


def test_two_runs_side_by_side(train_runs, tmp_path):
    html = write_report(list(train_runs), tmp_path / "both.html", title="FDP vs DP-SGD").read_text()
    comparison = html.split("<h2>Comparison</h2>", 1)[1].split("<h2", 1)[0]
    rows = re.findall(r"<tr><td>(fdp|dpsgd)</td><td>([^<]+)</td>", comparison)
    chosen = read_manifest(train_runs[0]).baselines[0]["name"]  # the panel's best on validation rows
    assert rows == [("fdp", "feature-dp"), ("fdp", f"public baseline: {chosen}"),
                    ("dpsgd", "dp-sgd"), ("dpsgd", "public baseline: a constant prediction (the labels are private)")]
    assert html.count("the public baseline") >= 2  # each run's verdict line
    assert "whole example" in comparison and "features: age, sex" in comparison
    for run in train_runs:
        g = read_manifest(run).models[0]["guarantee"]
        assert f"{g['epsilon']:.4g}" in comparison
    assert "<title>FDP vs DP-SGD</title>" in html and len(pngs(html)) >= 2  # ROC + comparison bars


def test_an_attack_file_of_another_run_is_refused(train_runs, tmp_path):
    """A run folder shows only its own run: an attack file whose run id is not the manifest's is an error."""
    run = tmp_path / "run"
    shutil.copytree(train_runs[0], run)
    loss = json.loads((run / "attacks" / "loss.json").read_text())
    write_json(run / "attacks" / "loss.json", {**loss, "run_id": "an-older-run"})
    with pytest.raises(ValueError, match="belongs to run 'an-older-run'"):
        write_report([run], tmp_path / "r.html")


def test_ledger_state_lines_of_a_synth_run(tmp_path):
    """A `dpcare synth fit` run folder (its model entry as Synthesizer.manifest writes it): every ledger line, with
    its fields, from the saved ledger state in run.json (the fitted synthesizer end to end: tests/test_cli_synth.py)."""
    ledger = PrivacyLedger(100, unit=ProtectedUnit.EXAMPLE)
    ledger.charge("dp bounds of age", gaussian_event(4.0), "noisy histogram for the scaling bounds of 'age'")
    ledger.charge_sampled_gaussian("private training steps", 0.05, 1.1, 40)
    run = RunFolder(tmp_path / "synth", "synth", {"mode": "dp-2stage-u"}, command="dpcare synth fit")
    manifest = Manifest()
    manifest.add_model("dp-2stage-u", ledger.guarantee().to_dict(), ledger.state_dict())
    run.finish(manifest)
    html = write_report([tmp_path / "synth"], tmp_path / "s.html").read_text()
    table = section(html, "Privacy guarantee")
    assert "from the saved ledger state" in table
    assert "<td>Gaussian</td><td>—</td><td class=n>4</td><td class=n>1</td>" in table
    assert "<td>Poisson-sampled Gaussian</td><td class=n>0.05</td><td class=n>1.1</td><td class=n>40</td>" in table


def test_tsf_study_folder_roc_from_scores(tmp_path):
    """A `dpcare benchmark tsf` folder (its run.json as the study writes it; the study end to end:
    tests/test_workflow_tsf.py): the LOSS ROC drawn from the saved scores, no guarantee for the baseline."""
    from dpcare.audit import attack_payload

    rng = np.random.default_rng(0)
    train, test = rng.exponential(1.0, 50), rng.exponential(1.2, 50)
    run = RunFolder(tmp_path / "tsf", "study:tsf", {"datasets": ["toy"], "shadows": 0},
                    command="dpcare benchmark tsf")
    manifest = Manifest(headline=["test MSE"])
    manifest.add_model("toy: baseline", None, note=NO_GUARANTEE)
    manifest.metrics.append({"model": "toy: baseline", "test MSE": 0.9, "validation MSE": 0.8, "train MSE": 0.5})
    row = attack_row("toy: baseline", loss_attack_report(train, test, bootstrap=10))
    manifest.attacks = [run.attack("loss", attack_payload(LOSS_TITLE, [row], {"toy: baseline": (-train, -test)}))]
    run.finish(manifest)
    html = write_report([tmp_path / "tsf"], tmp_path / "t.html").read_text()
    attacks = section(html, "Attacks")
    assert "plot the run saved" not in attacks and len(pngs(attacks)) == 1
    assert "NO formal guarantee" in section(html, "Privacy guarantee")


def test_unknown_and_missing_folders_are_named(tmp_path):
    stray = tmp_path / "stray"
    stray.mkdir()
    (stray / "notes.txt").write_text("hello")
    out = tmp_path / "r.html"
    with pytest.raises(UnknownRunFolder, match=r"stray is not a dpcare run folder"):
        write_report([stray], out)
    with pytest.raises(FileNotFoundError, match="nowhere"):
        collect(tmp_path / "nowhere")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "run.json").write_text("{")
    with pytest.raises(ValueError, match="run.json is not valid JSON"):
        write_report([broken], out)
    assert not out.exists() and not list(tmp_path.glob(".r.html*"))


def test_command(train_runs, tmp_path):
    app = typer.Typer(cls=ErrorReportingGroup)  # the root group of `dpcare`, which reports user errors
    app.command()(report)
    app.command("other")(lambda: None)  # a group, as in `dpcare report`
    runner = CliRunner()
    out = tmp_path / "cli.html"
    r = runner.invoke(app, ["report", *map(str, train_runs), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "wrote" in r.output and out.read_text().startswith("<!DOCTYPE html>")
    r = runner.invoke(app, ["report", str(tmp_path), "--out", str(tmp_path / "x.html")])
    assert r.exit_code == 2 and "not a dpcare run folder" in r.output
