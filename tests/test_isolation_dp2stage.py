"""Isolation of DP-2Stage: the pseudo rows (stage 1 of -u and the run-time estimate), stage 1 (pseudo
data or an unrelated public table) and what it hands to stage 2 must not depend on the private table,
whose rows are private as a whole (DP-SGD).

Each test fits twice, on a private table and on another private table of the same size (every value
different), captures every pseudo table built, the data the timing steps train on, the stage-1
training data and the stage-1 model that stage 2 starts from, and requires them to be bit-identical.
The line after each test names the planted leaks that turned it red.

The LoRA adapters are drawn from settings.seed (dpcare.engine.initialisation); the global torch RNG is
also seeded before each fit, so nothing else drawn from it can make the two stage-1 models differ.
"""

import pandas as pd
import pytest
import torch
from helpers import SPEC, toy_table

import dpcare.studies.dp2stage as bench_mod
import dpcare.synth.synthesizer as sy
from dpcare.data import TableSchema
from dpcare.privacy import PrivacyLedger
from dpcare.settings import DPSettings
from dpcare.synth.lm_model import trainable_state
from dpcare.synth.settings import LMSettings, StageSettings, SynthSettings
from dpcare.synth.synthesizer import Synthesizer

SCHEMA = TableSchema.from_dict(SPEC)


@pytest.fixture(scope="module")
def datasets():
    return {name: bench_mod.load_dataset(name) for name in ("support2", "adult")}


@pytest.fixture(autouse=True)
def fast_accounting(monkeypatch):
    """A fixed noise multiplier and no epsilon reports (the accountant is not what is checked here)."""
    monkeypatch.setattr(PrivacyLedger, "calibrate_training_noise", lambda self, *args, **kwargs: 1.0)
    monkeypatch.setattr(PrivacyLedger, "epsilon", lambda self, delta=None, accountant=None: 0.0)


class StopAtStage2(Exception):
    pass


def stage1_record(monkeypatch, fit) -> dict:
    """Run ``fit()`` (a Synthesizer fit) up to the start of stage 2; return every pseudo table built, the
    data of the timing steps, the stage-1 data and the weights stage 2 starts from."""
    seen = {"pseudo": [], "timing": []}
    real_pseudo, real_timing = sy.uniform_pseudo_table, sy.seconds_per_step

    def pseudo(*args, **kwargs):
        out = real_pseudo(*args, **kwargs)
        seen["pseudo"].append(out.copy())
        return out

    def timing(model, objective, data, config, steps=2):
        seen["timing"].append({k: v.clone() for k, v in data.items()})
        return real_timing(model, objective, data, config, steps)

    class Recording(sy.Trainer):
        def fit(self, private_data, public_data=None, groups=None):
            if self.objective.private:  # stage 2: record what stage 1 left, then stop
                seen["stage2_start"] = {k: v.clone() for k, v in trainable_state(self.model).items()}
                raise StopAtStage2
            seen["stage1_data"] = {k: v.clone() for k, v in private_data.items()}
            return super().fit(private_data, public_data, groups)

    torch.manual_seed(0)  # whatever else draws from the global RNG: alike in both fits
    with monkeypatch.context() as m:
        m.setattr(sy, "uniform_pseudo_table", pseudo)
        m.setattr(sy, "seconds_per_step", timing)
        m.setattr(sy, "Trainer", Recording)
        with pytest.raises(StopAtStage2):
            fit()
    return seen


def synthesizer(folder, mode, **kw):
    return Synthesizer(SCHEMA, mode=mode, epsilon=2.0, lm=LMSettings(model=str(folder)),
                       stage1=StageSettings(epochs=1, batch_size=8, lr=3e-3), epochs=1, progress=False, **kw)


def assert_same_tensors(a: dict, b: dict):
    assert a.keys() == b.keys()
    for k, v in a.items():
        assert torch.equal(v, b[k]), k


@pytest.mark.parametrize("mode", ["dp-2stage-u", "dp-2stage-o"])
def test_stage_1_never_reads_the_private_table(monkeypatch, gpt2_folder, mode):
    """The pseudo rows (of stage 1 for -u, of the run-time estimate for both), the rows stage 1 trains on
    (pseudo for -u, public for -o) and the stage-1 model are bit-identical for two private tables that
    share only their size."""
    private, other = toy_table(24, seed=0), toy_table(24, seed=1)
    kw = {"public_table": toy_table(24, seed=5), "public_schema": SCHEMA} if mode == "dp-2stage-o" else {}
    a = stage1_record(monkeypatch, lambda: synthesizer(gpt2_folder, mode, **kw).fit(private))
    b = stage1_record(monkeypatch, lambda: synthesizer(gpt2_folder, mode, **kw).fit(other))
    assert_same_stage1(a, b)
    assert (mode == "dp-2stage-u") == any(len(p) == len(private) for p in a["pseudo"])  # stage 1's pseudo rows
    # the stage-1 model did train (the comparison is not of untouched initial weights)
    fresh = synthesizer(gpt2_folder, mode, **kw)
    torch.manual_seed(0)
    fresh._build()
    assert any(not torch.equal(v, a["stage2_start"][k]) for k, v in trainable_state(fresh.model).items())
    # fails if numeric_ranges reads the private table although bounds are declared, if stage 1 of -o
    # trains on the private table, or if the timing steps run on private rows (checked)


def assert_same_stage1(a, b):
    assert len(a["timing"]) == len(b["timing"]) == 2  # one timed stage-1 and one stage-2 step
    for x, y in zip(a["timing"], b["timing"]):
        assert_same_tensors(x, y)
    assert len(a["pseudo"]) == len(b["pseudo"]) > 0
    for x, y in zip(a["pseudo"], b["pseudo"]):
        pd.testing.assert_frame_equal(x, y, check_exact=True)
    assert_same_tensors(a["stage1_data"], b["stage1_data"])
    assert_same_tensors(a["stage2_start"], b["stage2_start"])


@pytest.mark.parametrize("method", ["dp-2stage-u", "dp-2stage-o"])
def test_benchmark_stage_1_never_reads_the_private_data_set(monkeypatch, gpt2_folder, datasets, method):
    """The benchmark's own assembly (prepare, the unrelated public data set of PUBLIC_FOR, fitted_synthesizer):
    with every value of the private data set (SUPPORT2) changed, stage 1 sees bit-identical inputs."""
    loaded = datasets
    def shuffled(df):  # every column permuted on its own: valid values, other rows
        return pd.DataFrame({c: df[c].sample(frac=1.0, random_state=i).to_numpy() for i, c in enumerate(df.columns)},
                            index=df.index)

    bench = bench_mod.Dp2StageBenchmark(datasets=("support2",), epsilons=(2.0,), n_train=24, n_public=24,
                                        settings=SynthSettings(lm=LMSettings(model=str(gpt2_folder)),
                                                               stage1=StageSettings(epochs=1, batch_size=8, lr=3e-3),
                                                               dp=DPSettings(epochs=1, batch_size=32)))
    records, trains = [], []
    for change in (False, True):
        def load(name, *args, change=change):
            df, schema = loaded[name]
            return (shuffled(df) if change and name == "support2" else df.copy()), schema

        monkeypatch.setattr(bench_mod, "load_dataset", load)
        train, _, schema = bench_mod.prepare("support2", bench)
        trains.append(train)
        records.append(stage1_record(monkeypatch, lambda train=train, schema=schema: bench_mod.fitted_synthesizer(
            method, 2.0, train, schema, bench, "support2")))
    assert not trains[0].equals(trains[1])  # the private table did change
    assert_same_stage1(*records)
    # fails (for -o) if PUBLIC_FOR draws the public table from the private data set itself (checked)
