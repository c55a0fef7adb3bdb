"""End-to-end tabular training: public-branch isolation, the train command, bad inputs, resume."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
import yaml
from helpers import SPEC, toy_table
from typer.testing import CliRunner

from dpcare.cli import app
from dpcare.data import TableEncoder, TableSchema, public_view
from dpcare.engine import TrainConfig, Trainer
from dpcare.methods import FeatureDP
from dpcare.models import TabularMLP
from dpcare.privacy import PrivacyLedger
from dpcare.workflows.tabular import TabularRun, prepare, public_data_for, train_tabular

runner = CliRunner()


def with_other_private_values(df):
    other = df.copy()
    other["age"] = 100 - other["age"] + 18
    other["sex"] = other["sex"].map({"female": "male", "male": "female"})
    return other


def test_public_branch_never_reads_private_values():
    schema = TableSchema.from_dict(SPEC)
    df = toy_table()
    other = with_other_private_values(df)
    assert not set(schema.private_columns) & set(public_view(df, schema).columns)
    enc = TableEncoder(schema, protect="private").fit(df)
    enc_other = TableEncoder(schema, protect="private").fit(other)
    pub = public_data_for("feature-dp", prepare(enc, df, "gaussian", seed=3))
    pub_other = public_data_for("feature-dp", prepare(enc_other, other, "gaussian", seed=3))
    for k in pub:
        assert torch.equal(pub[k], pub_other[k]), k
    # the private tensors do differ (the test would be vacuous otherwise)
    assert not torch.equal(prepare(enc, df, "gaussian", 3)["x"], prepare(enc_other, other, "gaussian", 3)["x"])

    grads = []
    for frame, e in ((df, enc), (other, enc_other)):
        torch.manual_seed(0)
        model = TabularMLP(pub["x_pub"].shape[1], hidden=16)
        trainer = Trainer(model, FeatureDP(), TrainConfig(batch_size=32, steps=5, noise_multiplier=1.0,
                                                          progress=False), ledger=PrivacyLedger(len(frame)))
        g, _ = trainer.mean_gradient(FeatureDP().public_loss, public_data_for("feature-dp", prepare(e, frame, "gaussian", 3)))
        grads.append(torch.cat([v.flatten() for v in g.values()]))
    assert torch.equal(grads[0], grads[1])


def test_alpha_zero_feature_dp_model_is_independent_of_private_values():
    """With alpha = 0 only the public branch moves the model: bit-identical models."""
    schema = TableSchema.from_dict(SPEC)
    models = []
    for frame in (toy_table(), with_other_private_values(toy_table())):
        run = TabularRun(method="feature-dp", epsilon=1.0, alpha=0.0, epochs=2, batch_size=32, hidden=16,
                         progress=False)
        res = train_tabular(frame, schema, run)
        models.append(torch.cat([p.detach().flatten() for p in res.model.parameters()]))
    assert torch.equal(models[0], models[1])


def write_inputs(tmp_path, df=None, spec=None):
    data = tmp_path / "table.csv"
    (df if df is not None else toy_table()).to_csv(data, index=False)
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(spec or SPEC))
    return data, spec_path


def test_train_command_writes_model_metrics_and_guarantee(tmp_path):
    data, spec = write_inputs(tmp_path)
    out = tmp_path / "out"
    r = runner.invoke(app, ["train", str(data), "--spec", str(spec), "--out", str(out), "--method", "feature-dp",
                            "--epsilon", "2", "--epochs", "2", "--batch-size", "32"])
    assert r.exit_code == 0, r.output
    g = json.loads((out / "guarantee.json").read_text())
    assert g["unit"] == "features" and set(g["protected_columns"]) == {"age", "sex"}
    assert 0 < g["epsilon"] <= 2.0 and g["delta"] < 1 / 320
    m = json.loads((out / "metrics.json").read_text())
    assert 0 <= m["metrics"]["test_auroc"] <= 1
    assert (out / "model.pt").exists()
    assert "features" in r.output


@pytest.mark.parametrize(
    "args, frame_change, match",
    [
        (["--epsilon", "0"], None, "epsilon"),
        (["--epsilon", "-1"], None, "epsilon"),
        (["--delta", "0.5"], None, "delta"),
        (["--method", "magic"], None, "magic"),
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


def test_killed_train_command_resumes(tmp_path):
    data, spec = write_inputs(tmp_path, toy_table(3000))
    base = [sys.executable, "-m", "dpcare.cli", "train", str(data), "--spec", str(spec), "--epochs", "30",
            "--batch-size", "64", "--method", "dp-sgd"]
    ref = subprocess.run([*base, "--out", str(tmp_path / "ref")], capture_output=True, text=True)
    assert ref.returncode == 0, ref.stderr
    ckpt = tmp_path / "ckpt"
    proc = subprocess.Popen([*base, "--out", str(tmp_path / "b"), "--checkpoint-dir", str(ckpt)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not (ckpt / "checkpoint.pt").exists() and time.time() < deadline:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (tmp_path / "b" / "metrics.json").exists(), "run finished before it was killed"
    again = subprocess.run([*base, "--out", str(tmp_path / "b"), "--checkpoint-dir", str(ckpt)],
                           capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    a = json.loads((tmp_path / "ref" / "metrics.json").read_text())["metrics"]
    b = json.loads((tmp_path / "b" / "metrics.json").read_text())["metrics"]
    assert a == b
