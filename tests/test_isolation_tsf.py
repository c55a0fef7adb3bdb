"""Isolation of the forecasting workflow's selection step from the training patients.

tests/test_workflow_tsf.py already checks that changing TEST patients leaves every model bit-identical,
that fitted statistics read training patients only, and that the defences receive exactly the
validation windows. This adds the other direction: with declared statistics (those DP-SGD requires),
changing the values of the TRAINING patients leaves the validation windows that the defences' epoch
selection reads bit-identical.
"""

import numpy as np
import pandas as pd
import pytest
import torch

from dpcare.workflows import tsf
from dpcare.workflows.tsf import TsfRecipe, prepare_tsf, train_methods

VARS = ("hr", "sbp", "temp")
DECLARED = {"hr": (85.0, 20.0), "sbp": (120.0, 25.0), "temp": (37.0, 0.8)}
WINDOW = {"input_len": 4, "output_len": 2, "stride": 2}
TINY = TsfRecipe(d_model=8, n_heads=2, epochs=1, batch_size=8, aug_epochs=1, aug_candidates=4)


def events(shift=None, patients=20, hours=12, seed=0):
    """Hourly vitals of generated patients (one stay each); ``shift`` adds offsets to chosen patients."""
    rng = np.random.default_rng(seed)
    rows = []
    for p in range(patients):
        base = {"hr": rng.normal(85, 10), "sbp": rng.normal(120, 10), "temp": rng.normal(37, 0.4)}
        for t in range(hours):
            for v in VARS:
                if rng.random() < 0.85:
                    value = base[v] + rng.normal(0, 3 if v != "temp" else 0.2) + (shift or {}).get(f"p{p}", 0.0)
                    rows.append((f"p{p}", f"s{p}", t + rng.random() * 0.5, v, value))
    return pd.DataFrame(rows, columns=["patient_id", "stay_id", "time", "variable", "value"])


class Selected(Exception):
    pass


def selection_input(monkeypatch, ev, declared):
    """prepare_tsf + train_methods(["zoo"]): the validation (and training) windows the defence's
    retraining loop, which selects epochs on validation loss, receives."""
    data = prepare_tsf("toy", events=ev, variables=VARS, step="hour", declared=declared, **WINDOW)
    seen = {}

    def spy(model, train, validation, config, progress=True):
        seen["train"] = {k: v.clone() for k, v in train.items()}
        seen["validation"] = {k: v.clone() for k, v in validation.items()}
        raise Selected

    monkeypatch.setattr(tsf, "retrain_with_augmentation", spy)
    with pytest.raises(Selected):
        train_methods(data.part("train"), data.part("validation"), ["zoo"], TINY, data.standardizer, seed=1)
    return data, seen


def test_selection_reads_bit_identical_validation_windows_when_training_patients_change(monkeypatch):
    data, a = selection_input(monkeypatch, events(), DECLARED)
    changed = events(shift={p: 10.0 * (i + 1) for i, p in enumerate(data.splits["train"])})
    _, b = selection_input(monkeypatch, changed, DECLARED)
    assert not torch.equal(a["train"]["x"], b["train"]["x"])  # the training patients did change
    assert a["validation"].keys() == b["validation"].keys()
    for k in a["validation"]:
        assert torch.equal(a["validation"][k], b["validation"][k]), k
    # with statistics fitted on the training patients the validation windows move (why DP-SGD refuses them)
    _, fa = selection_input(monkeypatch, events(), None)
    _, fb = selection_input(monkeypatch, changed, None)
    assert not torch.equal(fa["validation"]["x"], fb["validation"]["x"])
    # fails if prepare_tsf fits the statistics on the training patients although they are declared (checked)
