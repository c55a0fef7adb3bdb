"""The tabular recipe end to end: fit -> run folder -> load in a fresh process -> predict -> report -> budget,
every method (the FusionDP family included), the run's own split for the LOSS audit, bad inputs, resume."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from helpers import SPEC, toy_table
from typer.testing import CliRunner

from dpcare.cli import app
from dpcare.data import TableEncoder, TableSchema, public_view
from dpcare.engine import TrainConfig, Trainer
from dpcare.exceptions import DataError, SettingsError
from dpcare.methods import FeatureDP
from dpcare.models import TabularMLP
from dpcare.privacy import PrivacyLedger
from dpcare.runs import read_manifest
from dpcare.settings import DPSettings
from dpcare.tabular import METHODS, TabularModel, TabularSettings, fit
from dpcare.tabular.recipe import public_data, tensors

runner = CliRunner()
SCHEMA = TableSchema.from_dict(SPEC)
SMALL = {"hidden": 16}
FAST_DP = {"epochs": 2, "batch_size": 32, "accountant": "rdp"}  # RDP: fast calibration


def with_other_private_values(df):
    other = df.copy()
    other["age"] = 100 - other["age"] + 18
    other["sex"] = other["sex"].map({"female": "male", "male": "female"})
    return other


def test_public_branch_never_reads_private_values():
    df = toy_table()
    other = with_other_private_values(df)
    assert not set(SCHEMA.private_columns) & set(public_view(df, SCHEMA).columns)
    enc = TableEncoder(SCHEMA, protect="private").fit(df)
    enc_other = TableEncoder(SCHEMA, protect="private").fit(other)
    pub = public_data("feature-dp", tensors(enc, df, "gaussian", seed=3))
    pub_other = public_data("feature-dp", tensors(enc_other, other, "gaussian", seed=3))
    for k in pub:
        assert torch.equal(pub[k], pub_other[k]), k
    # the private tensors do differ (the test would be vacuous otherwise)
    assert not torch.equal(tensors(enc, df, "gaussian", 3)["x"], tensors(enc_other, other, "gaussian", 3)["x"])

    grads = []
    for frame, e in ((df, enc), (other, enc_other)):
        torch.manual_seed(0)
        model = TabularMLP(pub["x_pub"].shape[1], hidden=16)
        trainer = Trainer(model, FeatureDP(), TrainConfig(dp=DPSettings(batch_size=32, steps=5), noise_multiplier=1.0,
                                                          progress=False), ledger=PrivacyLedger(len(frame)))
        g, _ = trainer.mean_gradient(FeatureDP().public_loss, public_data("feature-dp", tensors(e, frame, "gaussian", 3)))
        grads.append(torch.cat([v.flatten() for v in g.values()]))
    assert torch.equal(grads[0], grads[1])


def test_alpha_zero_feature_dp_model_is_independent_of_private_values():
    """With alpha = 0 only the public branch moves the model: bit-identical models."""
    models = []
    for frame in (toy_table(), with_other_private_values(toy_table())):
        s = TabularSettings(method="feature-dp", alpha=0.0, dp=DPSettings(epsilon=1.0, noise_seed=0, **FAST_DP),
                            **SMALL)  # the same private Poisson draws: the same dropout draws between them
        res = fit(frame, SCHEMA, s, progress=False)
        models.append(torch.cat([p.detach().flatten() for p in res.model.parameters()]))
    assert torch.equal(models[0], models[1])


@pytest.mark.slow  # end to end
def test_every_method_fits_saves_and_loads(tmp_path):
    df = toy_table(300)
    support, private = df.iloc[:60], df.iloc[60:]
    for name in METHODS:
        s = TabularSettings(method=name, dp=DPSettings(epsilon=2.0, **FAST_DP), **SMALL)
        kw = {"public_data": support} if METHODS.get(name).hybrid else {}
        m = fit(private, SCHEMA, s, progress=False, **kw)
        m.save(tmp_path / name)
        again = TabularModel.load(tmp_path / name)
        assert np.array_equal(again.predict_proba(df), m.predict_proba(df)), name
        assert again.settings == s and again.metrics == m.metrics and again.split == m.split
        if name == "non-private":
            assert m.guarantee is None
        else:
            assert 0 < m.guarantee.epsilon <= 2.0 + 1e-6
            # the guarantee counts exactly the rows the engine sampled from
            assert m.guarantee.n == m.ledger.n == len(m.split["train"])
            assert m.info["sampling_rate"] == pytest.approx(32 / len(m.split["train"]))


def test_fusion_imputer_reads_only_the_public_view_and_support_rows(monkeypatch):
    """The imputer of a fusion method is fitted on the support table only and imputes from public views: with
    other private values in the private table, what it receives and the hybrid view are bit-identical."""
    from dpcare.fusion import Imputer

    df = toy_table(240)
    support = df.iloc[:60]
    seen = []
    real_fit, real_predict = Imputer.fit, Imputer.predict

    def spy_fit(self, frame, schema):
        seen.append(("fit", frame.copy()))
        return real_fit(self, frame, schema)

    def spy_predict(self, frame):
        seen.append(("predict", frame.copy()))
        return real_predict(self, frame)

    batches = []
    from dpcare.methods.tabular import HybridObjective
    real_public = HybridObjective.public_loss

    def spy_public(self, model, batch):
        batches.append({k: v.clone() for k, v in batch.items()})
        return real_public(self, model, batch)

    runs = []
    for frame in (df.iloc[60:], with_other_private_values(df.iloc[60:])):
        seen.clear(), batches.clear()
        with monkeypatch.context() as m:
            m.setattr(Imputer, "fit", spy_fit)
            m.setattr(Imputer, "predict", spy_predict)
            m.setattr(HybridObjective, "public_loss", spy_public)
            s = TabularSettings(method="calibrated-fusion", dp=DPSettings(epsilon=2.0, **FAST_DP), **SMALL)
            fit(frame, SCHEMA, s, public_data=support, progress=False)
        runs.append(([(k, f.copy()) for k, f in seen], [dict(b) for b in batches]))
    (io_a, pub_a), (io_b, pub_b) = runs
    assert [k for k, _ in io_a] == ["fit", "predict"]
    for (ka, fa), (kb, fb) in zip(io_a, io_b):
        pd.testing.assert_frame_equal(fa, fb)
    assert not set(SCHEMA.private_columns) & set(io_a[1][1].columns)
    assert len(pub_a) == len(pub_b) > 0
    for x, y in zip(pub_a, pub_b):
        for k in x:
            assert torch.equal(x[k], y[k]), k
    # red when tensors() imputed from `frame` instead of `public_view(frame)` (predict refused it), and when
    # the fusion methods' public keys read "x" instead of "x_hyb" (checked)


def test_fusion_method_needs_its_public_support_table():
    s = TabularSettings(method="fusiondp", dp=DPSettings(epsilon=1.0, **FAST_DP), **SMALL)
    with pytest.raises(SettingsError, match="needs exactly one of a public support table"):
        fit(toy_table(100), SCHEMA, s, progress=False)
    with pytest.raises(SettingsError, match="uses no imputer"):
        fit(toy_table(100), SCHEMA, TabularSettings(method="dp-sgd"), public_data=toy_table(20), progress=False)


def test_a_support_table_holding_private_rows_is_refused_before_the_imputer_sees_it(monkeypatch):
    """Issue 54 part 4: a 'public' support table that contains rows of the private table is not public for those
    people (their private columns would reach the public branch through the imputer)."""
    from dpcare.fusion import Imputer

    df = toy_table(240)
    monkeypatch.setattr(Imputer, "fit", lambda *a, **k: pytest.fail("the imputer saw the support table"))
    s = TabularSettings(method="fusiondp", dp=DPSettings(epsilon=2.0, **FAST_DP), **SMALL)
    with pytest.raises(DataError, match=r"holds 3 row\(s\) equal on every spec column to rows of the private"):
        fit(df.iloc[57:], SCHEMA, s, public_data=df.iloc[:60], progress=False)  # rows 57-59 in both


def write_inputs(tmp_path, df=None, spec=None):
    data = tmp_path / "table.csv"
    (df if df is not None else toy_table()).to_csv(data, index=False)
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(spec or SPEC))
    return data, spec_path


@pytest.mark.slow  # end to end
def test_train_predict_report_and_audit_commands(tmp_path):
    data, spec = write_inputs(tmp_path)
    out = tmp_path / "out"
    r = runner.invoke(app, ["train", str(data), "--spec", str(spec), "--out", str(out), "--method", "feature-dp",
                            "--epsilon", "2", "--epochs", "2", "--batch-size", "32", "--audit"])
    assert r.exit_code == 0, r.output
    m = read_manifest(out)
    g = m.models[0]["guarantee"]
    assert g["unit"] == "features" and set(g["protected_columns"]) == {"age", "sex"}
    assert 0 < g["epsilon"] <= 2.0 and g["delta"] < 1 / 320
    assert 0 <= m.metrics[0]["test AUROC"] <= 1 and m.settings["dp"]["epsilon"] == 2.0
    assert sorted(p.name for p in out.iterdir()) == ["attacks", "model.pt", "run.json", "split.json"]
    split = json.loads((out / "split.json").read_text())
    assert split["rows"] == 400 and not set(split["train"]) & set(split["test"])
    assert json.loads((out / "attacks" / "loss.json").read_text())["run_id"] == m.run_id
    assert "features" in r.output and "LOSS attack" in r.output

    # apply in a fresh process
    new = toy_table(25, seed=9).drop(columns="death")
    new.to_csv(tmp_path / "new.csv", index=False)
    p = subprocess.run([sys.executable, "-m", "dpcare.cli", "predict", str(out), str(tmp_path / "new.csv"), "--out",
                        str(tmp_path / "pred.csv")], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    pred = pd.read_csv(tmp_path / "pred.csv")
    assert list(pred.columns) == ["p_0", "p_1", "prediction"] and len(pred) == 25
    assert np.allclose(pred[["p_0", "p_1"]].to_numpy(), TabularModel.load(out).predict_proba(new), atol=1e-6)

    # the run's own split for the LOSS audit: the same members and held-out rows as --audit
    first = json.loads((out / "attacks" / "loss.json").read_text())
    a = runner.invoke(app, ["audit", "loss", str(out), "--data", str(data)])
    assert a.exit_code == 0, a.output
    assert json.loads((out / "attacks" / "loss.json").read_text())["rows"] == first["rows"]
    wrong = tmp_path / "other.csv"
    toy_table(300).to_csv(wrong, index=False)
    bad = runner.invoke(app, ["audit", "loss", str(out), "--data", str(wrong)])
    assert bad.exit_code == 2 and "split was drawn over 400" in bad.stderr

    # the report reads the run folder: the attack, the guarantee and the metrics
    rep = runner.invoke(app, ["report", str(out), "--out", str(tmp_path / "r.html")])
    assert rep.exit_code == 0, rep.output
    html = (tmp_path / "r.html").read_text()
    assert "LOSS membership attack" in html and "test AUROC" in html and m.run_id in html


@pytest.mark.slow  # end to end
def test_a_run_folder_holds_one_run(tmp_path):
    """A second run into the same folder is refused; --force replaces it whole (the old attack is gone)."""
    data, spec = write_inputs(tmp_path)
    out = tmp_path / "out"
    base = ["train", str(data), "--spec", str(spec), "--out", str(out), "--epochs", "1", "--batch-size", "64"]
    assert runner.invoke(app, [*base, "--method", "non-private", "--audit"]).exit_code == 0
    r = runner.invoke(app, [*base, "--method", "dp-sgd"])
    assert r.exit_code == 2 and "is not empty" in r.stderr and "--force" in r.stderr
    r = runner.invoke(app, [*base, "--method", "dp-sgd", "--force"])
    assert r.exit_code == 0, r.output
    m = read_manifest(out)
    assert m.models[0]["name"] == "dp-sgd" and m.attacks == [] and not (out / "attacks").exists()


def test_an_output_that_is_a_file_is_refused_before_the_budget_or_the_data(tmp_path, monkeypatch):
    data, spec = write_inputs(tmp_path)
    (tmp_path / "out").write_text("x")
    budget = tmp_path / "b.json"
    assert runner.invoke(app, ["budget", "init", str(budget), "--epsilon", "5", "--delta", "1e-4", "--dataset",
                               "toy"]).exit_code == 0
    monkeypatch.setattr("dpcare.tabular.recipe.load_table", lambda *a, **k: pytest.fail("data read"))
    r = runner.invoke(app, ["train", str(data), "--spec", str(spec), "--out", str(tmp_path / "out"),
                            "--method", "dp-sgd", "--budget", str(budget)])
    assert r.exit_code == 2 and "is a file" in r.stderr
    assert json.loads(budget.read_text())["releases"] == []


@pytest.mark.slow  # end to end
def test_fusion_method_through_the_cli(tmp_path):
    df = toy_table(300)
    data, spec = write_inputs(tmp_path, df.iloc[60:])
    df.iloc[:60].to_csv(tmp_path / "support.csv", index=False)
    out = tmp_path / "fusion"
    base = ["train", str(data), "--spec", str(spec), "--out", str(out), "--method", "fusiondp", "--epochs", "1",
            "--batch-size", "64", "--beta", "0.1"]
    r = runner.invoke(app, base)
    assert r.exit_code == 2 and "--public-data" in r.stderr and not out.exists()
    r = runner.invoke(app, [*base, "--public-data", str(tmp_path / "support.csv")])
    assert r.exit_code == 0, r.output
    m = read_manifest(out)
    assert m.settings["method"] == "fusiondp" and m.settings["beta"] == 0.1
    assert any("support table" in s for s in m.not_protected)


@pytest.mark.parametrize(
    "args, frame_change, match",
    [
        (["--epsilon", "0"], None, "--epsilon must be a finite number in \\(0, 100\\]"),
        (["--epsilon", "-1"], None, "epsilon"),
        (["--delta", "0.5"], None, "delta"),
        (["--method", "magic"], None, "--method must be one of"),
        (["--batch-size", "0"], None, "--batch-size must be an integer >= 1"),
        ([], lambda df: df.drop(columns=["hr"]), "hr"),
        ([], lambda df: df.assign(hr=["fast"] * len(df)), "hr"),
        ([], lambda df: df.assign(age=[None] + list(df["age"][1:])), "age"),
        ([], lambda df: df.iloc[:0], "empty|no rows"),
    ],
)
def test_train_command_bad_inputs_are_named(tmp_path, args, frame_change, match):
    df = toy_table()
    data, spec = write_inputs(tmp_path, frame_change(df) if frame_change else df)
    r = runner.invoke(app, ["train", str(data), "--spec", str(spec), "--out", str(tmp_path / "o"), "--epochs", "1",
                            *args])
    assert r.exit_code == 2, r.output
    assert __import__("re").search(match, r.output), r.output


def test_train_command_missing_file_is_named(tmp_path):
    _, spec = write_inputs(tmp_path)
    r = runner.invoke(app, ["train", str(tmp_path / "nope.csv"), "--spec", str(spec)])
    assert r.exit_code == 2 and "nope.csv" in r.output


def test_load_refuses_another_kind_of_run(tmp_path):
    from dpcare.runs import Manifest, RunFolder

    RunFolder(tmp_path / "x", "forecast").finish(Manifest())
    with pytest.raises(DataError, match="holds a 'forecast' run, not a tabular model"):
        TabularModel.load(tmp_path / "x")


@pytest.mark.slow  # end to end
def test_killed_train_command_resumes(tmp_path):
    data, spec = write_inputs(tmp_path, toy_table(3000))
    base = [sys.executable, "-m", "dpcare.cli", "train", str(data), "--spec", str(spec), "--epochs", "30",
            "--batch-size", "64", "--method", "dp-sgd", "--noise-seed", "0"]  # the reference draws the same noise
    ref = subprocess.run([*base, "--out", str(tmp_path / "ref")], capture_output=True, text=True)
    assert ref.returncode == 0, ref.stderr
    ckpt = tmp_path / ".b.partial" / "checkpoints"
    proc = subprocess.Popen([*base, "--out", str(tmp_path / "b")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not (ckpt / "checkpoint.pt").exists() and time.time() < deadline:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (tmp_path / "b").exists(), "run finished before it was killed"
    again = subprocess.run([*base, "--out", str(tmp_path / "b")], capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    a, b = read_manifest(tmp_path / "ref"), read_manifest(tmp_path / "b")
    assert a.metrics == b.metrics
    assert not (tmp_path / "b" / "checkpoints").exists()  # the noise generators' state is not released


def test_bad_splits_are_refused_before_training_and_release_the_reservation(tmp_path, monkeypatch):
    """A single-class or tiny evaluation split failed only after training; now it is refused before, and the
    budget reservation of the refused run is cancelled (nothing was trained or written)."""
    from dpcare.engine import Trainer as EngineTrainer

    monkeypatch.setattr(EngineTrainer, "fit", lambda *a, **k: pytest.fail("trained before the split was checked"))
    df = toy_table(200)
    df["death"] = 0
    df.loc[:3, "death"] = 1  # the test split (20 rows) will hold a single class
    data, spec = write_inputs(tmp_path, df)
    budget = tmp_path / "b.json"
    assert runner.invoke(app, ["budget", "init", str(budget), "--epsilon", "5", "--delta", "0.01", "--dataset",
                               "toy"]).exit_code == 0
    r = runner.invoke(app, ["train", str(data), "--spec", str(spec), "--out", str(tmp_path / "o"), "--method",
                            "dp-sgd", "--budget", str(budget)])
    assert r.exit_code == 2 and "holds a single class of 'death'" in r.stderr, r.output
    assert [x["status"] for x in json.loads(budget.read_text())["releases"]] == ["cancelled"]
    tiny, _ = write_inputs(tmp_path, toy_table(60))
    r = runner.invoke(app, ["train", str(tiny), "--spec", str(spec), "--out", str(tmp_path / "t")])
    assert r.exit_code == 2 and "at least 10 are needed" in r.stderr
    with pytest.raises(DataError, match="single class"):
        fit(df, SCHEMA, TabularSettings(method="dp-sgd"))


def test_a_run_that_fails_while_training_keeps_its_reservation(tmp_path, monkeypatch):
    from dpcare.engine import Trainer as EngineTrainer

    def crash(*a, **k):
        raise RuntimeError("killed mid-training")

    monkeypatch.setattr(EngineTrainer, "fit", crash)
    data, spec = write_inputs(tmp_path)
    budget = tmp_path / "b.json"
    assert runner.invoke(app, ["budget", "init", str(budget), "--epsilon", "5", "--delta", "0.01", "--dataset",
                               "toy"]).exit_code == 0
    r = runner.invoke(app, ["train", str(data), "--spec", str(spec), "--out", str(tmp_path / "o"), "--method",
                            "dp-sgd", "--budget", str(budget)])
    assert isinstance(r.exception, RuntimeError)  # a bug, not a user error
    assert [x["status"] for x in json.loads(budget.read_text())["releases"]] == ["reserved"]


def test_a_resumed_run_takes_over_its_own_reservation(tmp_path):
    """A killed run's reservation stays 'reserved'; the resumed run (same run id, from its staging folder)
    takes it over instead of reserving again: the budget holds one release, done."""
    from dpcare.privacy import Budget, guard_run
    from dpcare.runs import RunFolder

    budget = Budget.create(tmp_path / "b.json", epsilon=5.0, delta=0.01, dataset="toy")
    settings = TabularSettings(method="dp-sgd", dp=DPSettings(epsilon=1.0, **FAST_DP), **SMALL)
    planned = __import__("dpcare.tabular", fromlist=["plan"]).plan(SCHEMA, settings, 400)
    run = RunFolder(tmp_path / "r", "tabular", settings.to_dict())
    run.path("checkpoints/checkpoint.pt").write_text("state")  # it trained a while, then was killed
    with pytest.raises(KeyboardInterrupt):
        with guard_run(budget.path, planned, run_id=run.run_id, command="train"):
            raise KeyboardInterrupt("killed")
    again = RunFolder(tmp_path / "r", "tabular", settings.to_dict())
    assert again.resumed and again.run_id == run.run_id
    with guard_run(budget.path, planned, run_id=again.run_id, command="train"):
        pass
    assert [r.status for r in Budget.load(budget.path).releases] == ["done"]
