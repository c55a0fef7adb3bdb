"""Isolation of the FusionDP family: the imputer's support set and inputs, the hybrid rows, the public
batches of every hybrid method, and the tuning / --charge-tuning selection.

Each test runs the step twice, once with the original private values (age, sex) of the TRAINING rows
and once with other valid values for them, captures what the consumer actually receives, and requires
it to be bit-identical. The line after each test names the planted leaks that turned it red.
"""

import json

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import SPEC, toy_table

import dpcare.studies.fusiondp as fb
from dpcare.data import TableSchema, split_table
from dpcare.fusion.imputers import Imputer
from dpcare.methods.tabular import HybridObjective
from dpcare.privacy import PrivacyLedger

SCHEMA = TableSchema.from_dict(SPEC)
HYBRID = ("naive-fusion", "naive-fusion-pub", "feature-dp", "calibrated-fusion", "fusiondp")
GBM = {"max_iter": 10}


@pytest.fixture(autouse=True)
def fast_accounting(monkeypatch):
    """A fixed noise multiplier and no epsilon reports: the accountant (seconds per call) is not what these
    tests check, and neither value depends on the data."""
    monkeypatch.setattr(PrivacyLedger, "calibrate_training_noise", lambda self, *args, **kwargs: 1.0)
    monkeypatch.setattr(PrivacyLedger, "epsilon", lambda self, delta=None, accountant=None: 0.0)
    monkeypatch.setattr(fb, "calibrate_noise_multiplier", lambda *a, **k: 1.0)


def with_other_training_private_values(df, seed=0):
    """``df`` with other valid private values (age in bounds, sex flipped) in the rows that
    prepare_splits(seed) puts in the private training split; support, validation and test rows kept."""
    positions = split_table(pd.DataFrame({"i": np.arange(len(df))}), fb.FRACTIONS, seed=seed)["train"]["i"]
    out = df.copy()
    rng = np.random.default_rng(7)
    out.loc[positions, "age"] = rng.uniform(18, 100, len(positions))
    out.loc[positions, "sex"] = out.loc[positions, "sex"].map({"female": "male", "male": "female"})
    assert not out.equals(df)
    return out


@pytest.fixture(scope="module")
def frames():
    df = toy_table(200)
    return df, with_other_training_private_values(df)


def imputer_io(monkeypatch, frame, imputer="gbm", options=None):
    """prepare_splits on ``frame``; what Imputer.fit (the support set) and Imputer.predict received."""
    seen = {"fit": [], "predict": []}
    real_fit, real_predict = Imputer.fit, Imputer.predict

    def fit(self, support, schema):
        seen["fit"].append(support.copy())
        return real_fit(self, support, schema)

    def predict(self, public_frame):
        seen["predict"].append(public_frame.copy())
        return real_predict(self, public_frame)

    with monkeypatch.context() as m:
        m.setattr(Imputer, "fit", fit)
        m.setattr(Imputer, "predict", predict)
        prep = fb.prepare_splits(frame, SCHEMA, seed=0, imputer=imputer, imputer_options=options or GBM)
    return prep, seen


def test_imputer_support_set_inputs_and_hybrid_rows_are_bit_identical(monkeypatch, frames):
    """The support set the imputer is fitted on, every frame it imputes from, the hybrid and padded views of
    the training rows, and every tensor of the validation / test rows do not move with the training rows'
    private values; only x of the training rows does (the test can see a change)."""
    (prep_a, a), (prep_b, b) = (imputer_io(monkeypatch, f) for f in frames)
    assert len(a["fit"]) == len(b["fit"]) == 1
    pd.testing.assert_frame_equal(a["fit"][0], b["fit"][0], check_exact=True)
    ta, tb = prep_a.tensors, prep_b.tensors
    assert not torch.equal(ta["train"]["x"], tb["train"]["x"])
    for key in ("x_hyb", "x_pub", "y"):
        assert torch.equal(ta["train"][key], tb["train"][key]), key
    for split in ("val", "test"):
        for key in ta[split]:
            assert torch.equal(ta[split][key], tb[split][key]), (split, key)
    assert len(a["predict"]) == len(b["predict"]) >= 3  # train, val and test rows at least
    for x, y in zip(a["predict"], b["predict"]):
        pd.testing.assert_frame_equal(x, y, check_exact=True)
    # fails if the imputer is fitted on parts["train"], or if the hybrid rows are the original rows (checked)


def public_batches(monkeypatch, method, data, bench):
    """The batches train_one's public branch receives, and the private rows x its private branch receives."""
    seen, private = [], []
    real, real_private = HybridObjective.public_loss, HybridObjective.private_loss

    def spy(self, model, batch):
        seen.append({k: v.clone() for k, v in batch.items()})
        return real(self, model, batch)

    def private_spy(self, model, batch):
        private.append(batch["x"].detach().clone())
        return real_private(self, model, batch)

    with monkeypatch.context() as m:
        m.setattr(HybridObjective, "public_loss", spy)
        m.setattr(HybridObjective, "private_loss", private_spy)
        fb.train_one(method, 1.0, bench.grid(method)[0], 0, data, bench)
    return seen, torch.cat(private)


def test_public_batches_of_every_hybrid_method_are_bit_identical(monkeypatch, frames):
    """train_one's public branch (alpha = 1: the private branch moves the model too) receives the same
    batches, and the non-private references on public views (sgd-pub, sgd-hybrid) give the same results."""
    data = [fb.prepare_splits(f, SCHEMA, seed=0, imputer_options=GBM).tensors for f in frames]
    bench = fb.FusionBenchmark(epochs=1.0, batch_size=32, hidden=8, clip_grid=(1.0,), alpha_grid=(1.0,))
    for method in HYBRID:
        (a, private_a), (b, private_b) = (public_batches(monkeypatch, method, d, bench) for d in data)
        assert len(a) == len(b) > 0, method
        for i, (x, y) in enumerate(zip(a, b)):
            assert x.keys() == y.keys(), (method, i)
            for k in x:
                assert torch.equal(x[k], y[k]), (method, i, k)
        # the private branch did see the changed values (its metrics may not show it: AUPRC on a few rows is a
        # ranking, which a small change of the weights often keeps)
        assert not torch.equal(private_a, private_b), method
    for method in ("sgd-pub", "sgd-hybrid"):
        assert fb.train_one(method, None, {}, 0, data[0], bench) == fb.train_one(method, None, {}, 0, data[1], bench)
    # fails if train_one hands the whole training dict (with x) to the public branch, if sgd-hybrid
    # trains on x, or if the imputer is fitted on parts["train"] (checked)


@pytest.mark.parametrize("charge", [False, True], ids=["tuned-on-seed-0", "charge-tuning"])
def test_tuning_and_selection_see_bit_identical_inputs(monkeypatch, frames, tmp_path, charge):
    """With alpha = 0 the hybrid candidates learn from their public branch only, so everything the tuning
    step reads (validation and test scores, validation counts, the noisy selection) and chooses must be
    bit-identical when the training rows' private values change; the evaluation inputs are compared too."""
    bench = fb.FusionBenchmark(epsilons=(1.0,), seeds=1, epochs=1.0, batch_size=32, hidden=8, clip_grid=(0.5, 2.0),
                               alpha_grid=(0.0,), beta_grid=(0.2,), workers=1, charge_tuning=charge,
                               methods=("sgd-pub", "sgd-hybrid", "naive-fusion-pub", "calibrated-fusion", "fusiondp"),
                               imputer_options=GBM)
    outputs = []
    for i, frame in enumerate(frames):
        evaluated = []
        real = fb.evaluate

        def spy(model, data, evaluated=evaluated, real=real):
            evaluated.append({k: v.clone() for k, v in data.items()})
            return real(model, data)

        with monkeypatch.context() as m:
            m.setattr(fb, "evaluate", spy)
            fb.run_benchmark(frame, SCHEMA, bench, tmp_path / str(i), progress=False)
        runs = pd.read_csv(tmp_path / str(i) / "runs.csv")
        chosen = json.loads((tmp_path / str(i) / "settings.json").read_text())["chosen"]
        outputs.append((evaluated, runs, chosen))
    (ev_a, runs_a, chosen_a), (ev_b, runs_b, chosen_b) = outputs
    assert len(ev_a) == len(ev_b) == 2 * len(runs_a) > 0
    for x, y in zip(ev_a, ev_b):
        assert x.keys() == y.keys()
        for k in x:
            assert torch.equal(x[k], y[k]), k
    pd.testing.assert_frame_equal(runs_a, runs_b, check_exact=True)
    assert chosen_a == chosen_b
    # fails if train_one scores its "val" metrics or val_correct on the training split, if sgd-hybrid trains
    # on x, or if the imputer is fitted on parts["train"] (checked)


class RecordingLM:
    """The tiny GPT-2 with every input_ids it is given recorded."""

    def __init__(self, model):
        self.model, self.inputs = model, []

    def __call__(self, **kwargs):
        self.inputs.append(kwargs["input_ids"].clone())
        return self.model(**kwargs)


def test_language_model_imputer_sees_bit_identical_prompts(monkeypatch):
    """Every token sequence the LM imputer feeds its model (few-shot support rows and the public columns
    of each row it imputes) is the same whatever the training rows' private values."""
    from lm_fixtures import tiny_gpt2

    seen = []
    for frame in (toy_table(40), with_other_training_private_values(toy_table(40))):
        model, tok = tiny_gpt2()
        lm = RecordingLM(model)
        prep, _ = imputer_io(monkeypatch, frame, imputer="lm",
                             options={"lm": (lm, tok), "shots": 2, "batch_size": 16, "max_new_tokens": 2})
        seen.append((lm.inputs, prep.tensors["train"]["x_hyb"]))
    (a, hyb_a), (b, hyb_b) = seen
    assert len(a) == len(b) > 0
    for i, (x, y) in enumerate(zip(a, b)):
        assert torch.equal(x, y), i
    assert torch.equal(hyb_a, hyb_b)
    # fails if the imputer's few-shot support set is the training split (fit(parts["train"])) (checked)
