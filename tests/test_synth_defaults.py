"""Synthesizer size defaults (CPU scale without a GPU), the run-time estimate, scikit-learn conventions."""

import logging

import pytest
import torch
from helpers import SPEC, toy_table

from dpcare.data import TableSchema
from dpcare.engine.trainer import Trainer
from dpcare.exceptions import NotFittedError, SettingsError
from dpcare.settings import ComputeSettings, DPSettings
from dpcare.synth.scale import FitEstimate, format_seconds
from dpcare.synth.settings import SIZES, LMSettings, Stage2Settings, StageSettings, SynthSettings
from dpcare.synth.synthesizer import Synthesizer

SCHEMA = TableSchema.from_dict(SPEC)


def test_cpu_default_is_the_scaled_model(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cpu = SynthSettings.for_device()
    assert cpu.lm.layers == 1 and (cpu.stage1.epochs, cpu.dp.epochs) == (1.0, 2.0)
    assert cpu.scale_name() == "cpu" and cpu.lm.model == "smollm2"
    assert Synthesizer(SCHEMA, mode="dp-standard", epsilon=1.0).settings.scale_name() == "cpu"
    paper = SynthSettings.for_device("paper")
    assert paper == SynthSettings() and paper.lm.layers is None and paper.scale_name() == "paper"
    # the engine trains on a GPU: there "auto" is the paper's model, unless the CPU is asked for
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert SynthSettings.for_device().scale_name() == "paper"
    assert SynthSettings.for_device(compute={"device": "cpu"}).scale_name() == "cpu"
    assert SynthSettings.for_device(compute=ComputeSettings(device="cuda")).scale_name() == "paper"


def test_the_scales_keep_their_published_values():
    """The CPU and paper presets behind the README's numbers: every value of both, pinned."""
    common = {"stage1": StageSettings(epochs=1.0, batch_size=32, lr=1e-3, max_physical_batch=64),
              "stage2": Stage2Settings(lr=1e-3, max_physical_batch=64),
              "dp": DPSettings(epsilon=1.0, batch_size=32, epochs=2.0, clip_norm=1.0)}
    cpu = SynthSettings.for_device("cpu")
    assert (cpu.stage1, cpu.stage2, cpu.dp) == (common["stage1"], common["stage2"], common["dp"])
    assert cpu.lm == LMSettings(layers=1) and (cpu.lam, cpu.decimals, cpu.stats_epsilon) == (0.65, 2, 0.1)
    paper = SynthSettings.for_device("paper")
    assert paper.stage1 == StageSettings(epochs=5.0, batch_size=32, lr=1e-3, max_physical_batch=64)
    assert paper.stage2 == common["stage2"] and paper.dp == common["dp"].replace(epochs=10.0)
    assert paper.lm == LMSettings(layers=None)
    assert SIZES == {"paper": {"lm": {"layers": None}, "stage1": {"epochs": 5.0}, "dp": {"epochs": 10.0}},
                     "cpu": {"lm": {"layers": 1}, "stage1": {"epochs": 1.0}, "dp": {"epochs": 2.0}}}


def test_for_device_merges_overrides():
    s = SynthSettings.for_device("cpu", mode="non-private", epsilon=None, lm={"model": "x", "layers": None},
                                 stage1={"epochs": None, "lr": 0.01}, dp={"epochs": 4.0, "batch_size": 8})
    assert s.mode == "non-private" and s.lm.model == "x" and s.lm.layers == 1  # None: the scale's default
    assert (s.stage1.epochs, s.stage1.lr) == (1.0, 0.01) and (s.dp.epochs, s.dp.batch_size) == (4.0, 8)
    assert s.dp.epsilon == 1.0 and s.scale_name() == "custom"
    flat = SynthSettings.for_device("cpu", epsilon=3.0, seed=7, clip_norm=0.5)  # DP fields as keywords
    assert (flat.dp.epsilon, flat.dp.seed, flat.dp.clip_norm, flat.dp.epochs) == (3.0, 7, 0.5, 2.0)
    given = LMSettings(model="y", layers=None)
    assert SynthSettings.for_device("cpu", lm=given).lm is given  # settings objects are used as they are
    with pytest.raises(SettingsError, match="scale must be one of"):
        SynthSettings.for_device("huge")
    with pytest.raises(SettingsError, match="either as dp= or as keywords"):
        SynthSettings.for_device("cpu", dp=DPSettings(), epsilon=2.0)
    with pytest.raises(SettingsError, match=r"unknown settings \['precision'\]"):
        SynthSettings.for_device("cpu", precision=3)


@pytest.mark.parametrize("changes, message", [
    ({"decimals": -1}, "decimals must be an integer in [0, 12], got decimals = -1"),
    ({"mode": "gan"}, "mode must be one of ['dp-2stage-u', 'dp-2stage-o', 'dp-standard', 'non-private']"),
    ({"lam": 1.5}, "lam must be a finite number in [0, 1], or None (the plain LM loss), got lam = 1.5"),
    ({"stage1": StageSettings(epochs=1.0), "dp": DPSettings(unit="patient")}, "the synthesizer protects rows"),
    ({"mode": "non-private", "dp": DPSettings(adaptive_clip=0.5)}, "adaptive_clip is a private mechanism"),
])
def test_bad_settings_name_the_setting(changes, message):
    with pytest.raises(SettingsError) as err:
        SynthSettings(**changes)
    assert message in str(err.value)


def test_settings_round_trip_and_the_stage_settings_hold_no_privacy_parameter():
    s = SynthSettings(mode="dp-standard", decimals=3, pseudo_rows=50, lm=LMSettings(model="m", lora_targets=["c_attn"]),
                      stage1=StageSettings(epochs=2.0, lr=0.01), stage2=Stage2Settings(lr=0.02),
                      dp=DPSettings(epsilon=2.0, delta=1e-6, accountant="rdp", adaptive_clip=0.5, steps=9, seed=3))
    assert SynthSettings.from_dict(s.to_dict()) == s
    import dataclasses

    dp_fields = {f.name for f in dataclasses.fields(DPSettings)}
    for stage in (StageSettings, Stage2Settings):  # the DP settings live in one place: SynthSettings.dp
        assert not {f.name for f in dataclasses.fields(stage)} & (dp_fields - {"epochs", "batch_size"}), stage
    assert not {f.name for f in dataclasses.fields(Stage2Settings)} & dp_fields


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
    assert est.stage1_steps == 0 and est.stage2_steps == 4 and est.seconds > 0 and est.private
    plain = Synthesizer(SCHEMA, mode="non-private", lm={"model": gpt2_folder}, progress=False)
    assert not plain.estimate_fit(64).private
    assert s.model is None and s.ledger is None  # nothing fitted, nothing charged
    with pytest.raises(NotFittedError):
        s.sample(1)


def test_long_estimates_warn_and_name_the_cpu_scale():
    est = FitEstimate(2000, 25.0, 4000, 24.0, "paper")
    assert est.long and format_seconds(est.seconds) == "40.6 h"
    assert "--scale cpu" in est.message()
    assert not FitEstimate(10, 0.5, 20, 1.0, "custom").long
    assert "20 DP steps" in FitEstimate(10, 0.5, 20, 1.0, "custom").message()
    assert "DP steps" not in FitEstimate(0, 0.0, 20, 1.0, "custom", private=False).message()  # non-private mode
    assert format_seconds(30) == "30 s" and format_seconds(600) == "10 min"


def test_not_fitted_synthesizer(gpt2_folder, tmp_path):
    s = Synthesizer(SCHEMA, mode="dp-standard", lm=LMSettings(model=gpt2_folder), epochs=1, progress=False)
    for use in (lambda: s.sample(2), lambda: s.save(tmp_path / "x"), lambda: s.guarantee_, lambda: s.manifest()):
        with pytest.raises(NotFittedError, match="fit the synthesizer"):
            use()
    assert s.guarantee is None
    messages = []
    s.fit(toy_table(64), report=messages.append)  # e.g. the command line's echo instead of logging
    assert messages == [s.estimate_.message()] and "estimated fit time" in messages[0]
    assert s.guarantee_ == s.guarantee and s.guarantee_.epsilon <= 1.0 + 1e-6
