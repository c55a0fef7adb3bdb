"""Isolation of the tabular recipe: what the public branch reads during real training.

Each test trains (or assembles) twice, once with the original private values of the training rows
and once with other valid private values, captures the ACTUAL input of the consumer and requires
it to be bit-identical. The line after each test names the planted leak that turned it red.
"""

import copy

import numpy as np
import pytest
import torch
from helpers import SPEC, toy_table

import dpcare.tabular.recipe as wt
from dpcare.data import TableSchema
from dpcare.methods.tabular import HybridObjective, LabelDP
from dpcare.privacy import PrivacyLedger
from dpcare.settings import DPSettings
from dpcare.tabular.recipe import TabularSettings, public_data, tensors, train_rows


@pytest.fixture(autouse=True)
def fast_accounting(monkeypatch):
    """A fixed noise multiplier and no epsilon reports: the accountant (seconds per call) is not what these
    tests check, and neither value depends on the data."""
    monkeypatch.setattr(PrivacyLedger, "calibrate_training_noise", lambda self, *args, **kwargs: 1.0)
    monkeypatch.setattr(PrivacyLedger, "epsilon", lambda self, delta=None, accountant=None: 0.0)


def other_features(df, seed=1):
    """The same rows with other valid private FEATURE values (age in bounds, sex flipped)."""
    rng = np.random.default_rng(seed)
    out = df.copy()
    out["age"] = rng.uniform(18, 100, len(df))
    out["sex"] = out["sex"].map({"female": "male", "male": "female"})
    return out


def other_labels(df):
    """The same rows with every binary label flipped (both classes still present)."""
    out = df.copy()
    out["death"] = 1 - out["death"]
    return out


def public_batches(monkeypatch, method, frame):
    """Every batch the objective's public_loss receives while train_rows trains on ``frame``, and the
    trained weights."""
    seen = []
    cls = LabelDP if method == "label-dp" else HybridObjective
    real = cls.public_loss

    def spy(self, model, batch):
        seen.append({k: v.clone() for k, v in batch.items()})
        return real(self, model, batch)

    with monkeypatch.context() as m:
        m.setattr(cls, "public_loss", spy)
        settings = TabularSettings(method=method, public_batch_size=16, hidden=8, public_pretrain_steps=3,
                                   dp=DPSettings(epsilon=2.0, epochs=2, batch_size=32, seed=5))
        model, *_ = train_rows(frame, TableSchema.from_dict(SPEC), settings, progress=False)
    return seen, torch.cat([p.detach().flatten() for p in model.parameters()])


@pytest.mark.parametrize("method, change", [("feature-dp", other_features), ("label-dp", other_labels)])
def test_public_branch_batches_are_bit_identical_when_private_values_change(monkeypatch, method, change):
    """The public batches public_loss receives (pretraining and every private step, alpha > 0 (the default), so the
    model itself does move with the private values) do not depend on the private values."""
    df = toy_table(120)
    a, weights_a = public_batches(monkeypatch, method, df)
    b, weights_b = public_batches(monkeypatch, method, change(df))
    assert not torch.equal(weights_a, weights_b)  # the private branch did read the changed values
    assert len(a) == len(b) > 3
    for i, (x, y) in enumerate(zip(a, b)):
        assert x.keys() == y.keys(), i
        for k in x:
            assert torch.equal(x[k], y[k]), (i, k)
    # fails if public_data returns x (not x_pub) for feature-dp, or adds y for label-dp (checked)


def test_label_dp_public_data_is_bit_identical_when_labels_change():
    schema = TableSchema.from_dict(SPEC)
    df = toy_table(80)
    enc = wt.TableEncoder(schema, protect="label").fit(df)
    pub = public_data("label-dp", tensors(enc, df, "gaussian", seed=0))
    changed = tensors(enc, other_labels(df), "gaussian", seed=0)
    assert not torch.equal(changed["y"], tensors(enc, df, "gaussian", seed=0)["y"])  # not vacuous
    pub_changed = public_data("label-dp", changed)
    assert pub.keys() == pub_changed.keys() == {"x"}
    assert torch.equal(pub["x"], pub_changed["x"])
    # fails if public_data("label-dp") also hands over y (checked)


MULTI = copy.deepcopy(SPEC)
MULTI["target"] = {"name": "death", "kind": "categorical", "categories": [0, 1, 2]}


@pytest.mark.parametrize("method", ["label-dp", "dp-sgd"])
def test_model_shape_comes_from_the_schema_not_the_private_labels(monkeypatch, method):
    """Under label-DP and DP-SGD the labels are private: the model they are fed into must be built
    from the declared target categories, not from which labels the training rows happen to have."""
    schema = TableSchema.from_dict(MULTI)
    df = toy_table(60)
    df["death"] = np.arange(len(df)) % 3
    without_top = df.assign(death=np.arange(len(df)) % 2)  # valid labels, class 2 absent
    shapes = []
    real = wt.TabularMLP

    def spy(*args, **kwargs):
        shapes.append((args, kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(wt, "TabularMLP", spy)
    for frame in (df, without_top):
        settings = TabularSettings(method=method, hidden=8, dp=DPSettings(epsilon=2.0, epochs=1, batch_size=32))
        train_rows(frame, schema, settings, progress=False)
    assert shapes[0] == shapes[1]
    # failed while train_rows sized the output layer from y_train.max() (fixed: declared categories)


def test_canary_audit_public_branch_batches_are_bit_identical(monkeypatch):
    """audit_tabular (Feature-DP) gives the public branch every canary's and row's pad(Psi(x)) and y: with
    other private values in every row of the table, the batches it receives are bit-identical."""
    from dpcare.tabular.audit import CanaryAuditSettings, audit_tabular

    settings = CanaryAuditSettings(method="feature-dp", epsilon=2.0, canaries=20, epochs=2, batch_size=16, hidden=8)
    schema = TableSchema.from_dict(SPEC)
    runs = []
    for frame in (toy_table(100), other_features(toy_table(100))):
        seen = []
        real = HybridObjective.public_loss

        def spy(self, model, batch, seen=seen, real=real):
            seen.append({k: v.clone() for k, v in batch.items()})
            return real(self, model, batch)

        with monkeypatch.context() as m:
            m.setattr(HybridObjective, "public_loss", spy)
            audit_tabular(frame, schema, settings)
        runs.append(seen)
    a, b = runs
    assert len(a) == len(b) > 0
    for i, (x, y) in enumerate(zip(a, b)):
        assert x.keys() == y.keys(), i
        for k in x:
            assert torch.equal(x[k], y[k]), (i, k)
    # fails if the audit's public data also carries x (checked)
