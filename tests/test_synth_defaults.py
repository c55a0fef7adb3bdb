"""Synthesizer size defaults (CPU scale without a GPU), the run-time estimate, scikit-learn conventions."""

import logging

import pytest
import torch
from helpers import SPEC, toy_table

from dpcare.data import TableSchema
from dpcare.engine.trainer import Trainer
from dpcare.exceptions import NotFittedError
from dpcare.synth import scale as scale_module
from dpcare.synth.lm_model import LMSettings
from dpcare.synth.scale import FitEstimate, format_seconds
from dpcare.synth.synthesizer import StageSettings, Synthesizer, SynthSettings

SCHEMA = TableSchema.from_dict(SPEC)



def test_cpu_default_is_the_scaled_model(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cpu = SynthSettings.for_device()
    assert cpu.lm.layers == 1 and (cpu.stage1.epochs, cpu.stage2.epochs) == (1.0, 2.0)
    assert cpu.scale_name() == "cpu" and cpu.lm.model == "smollm2"
    assert Synthesizer(SCHEMA, mode="dp-standard", epsilon=1.0).settings.scale_name() == "cpu"
    paper = SynthSettings.for_device("paper")
    assert paper == SynthSettings() and paper.lm.layers is None and paper.scale_name() == "paper"
    # a GPU only changes the default once the engine trains there
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert SynthSettings.for_device().scale_name() == "cpu"
    monkeypatch.setattr(scale_module, "ENGINE_USES_GPU", True)
    assert SynthSettings.for_device().scale_name() == "paper"


def test_for_device_merges_overrides():
    s = SynthSettings.for_device("cpu", mode="non-private", epsilon=None, lm={"model": "x", "layers": None},
                                 stage1={"epochs": None, "lr": 0.01}, stage2={"epochs": 4.0, "batch_size": 8})
    assert s.mode == "non-private" and s.lm.model == "x" and s.lm.layers == 1  # None: the scale's default
    assert (s.stage1.epochs, s.stage1.lr) == (1.0, 0.01) and (s.stage2.epochs, s.stage2.batch_size) == (4.0, 8)
    assert s.scale_name() == "custom"
    given = LMSettings(model="y", layers=None)
    assert SynthSettings.for_device("cpu", lm=given).lm is given  # settings objects are used as they are
    with pytest.raises(ValueError, match="scale must be one of"):
        SynthSettings.for_device("huge")


def test_estimate_is_logged_before_training(gpt2_folder, caplog, monkeypatch):
    events = []
    real_fit = Trainer.fit

    def fit(self, *a, **k):
        events.append("train")
        return real_fit(self, *a, **k)

    monkeypatch.setattr(Trainer, "fit", fit)
    s = Synthesizer(SCHEMA, mode="dp-2stage-u", epsilon=4.0, lm={"model": gpt2_folder}, progress=False)
    with caplog.at_level(logging.INFO, logger="dpcare.synth"):
        caplog.handler.addFilter(lambda record: events.append("log") or True)
        assert s.fit(toy_table(100)) is s
    est = s.estimate_
    assert est.seconds > 0 and est.stage1_steps == 4 and est.stage2_steps == 7 and est.scale == "cpu"
    assert events[:2] == ["log", "train"]
    message = [r.getMessage() for r in caplog.records if "estimated fit time" in r.getMessage()]
    assert message and "--scale paper" in message[0] and "5 + 10 epochs" in message[0]


def test_estimate_alone_reads_no_private_data(gpt2_folder):
    s = Synthesizer(SCHEMA, mode="dp-standard", epsilon=1.0, lm={"model": gpt2_folder}, progress=False)
    est = s.estimate_fit(toy_table(64))
    assert est.stage1_steps == 0 and est.stage2_steps == 4 and est.seconds > 0
    assert s.model is None and s.ledger is None  # nothing fitted, nothing charged
    with pytest.raises(NotFittedError):
        s.sample(1)


def test_long_estimates_warn_and_name_the_cpu_scale():
    est = FitEstimate(2000, 25.0, 4000, 24.0, "paper")
    assert est.long and format_seconds(est.seconds) == "40.6 h"
    assert "--scale cpu" in est.message()
    assert not FitEstimate(10, 0.5, 20, 1.0, "custom").long
    assert format_seconds(30) == "30 s" and format_seconds(600) == "10 min"


def test_not_fitted_synthesizer(gpt2_folder, tmp_path):
    s = Synthesizer(SCHEMA, mode="dp-standard", lm=LMSettings(model=gpt2_folder),
                    stage2=StageSettings(epochs=1), progress=False)
    for use in (lambda: s.sample(2), lambda: s.save(tmp_path / "x"), lambda: s.guarantee_):
        with pytest.raises(NotFittedError, match="fit the synthesizer"):
            use()
    assert s.guarantee is None
    messages = []
    s.fit(toy_table(64), report=messages.append)  # e.g. the command line's echo instead of logging
    assert messages == [s.estimate_.message()] and "estimated fit time" in messages[0]
    assert s.guarantee_ == s.guarantee and s.guarantee_.epsilon <= 1.0 + 1e-6
