"""The DP noise is secret: ``DPSettings.seed`` (public, recorded in run.json) seeds the splits, the initialisation,
public sampling and dropout; the private Poisson sampling, the noise and every noisy statistic come from
``noise_seed`` (default None: fresh OS entropy, never recorded; :mod:`dpcare.privacy.randomness`). Before, one
seed drove both, so anyone holding a run folder could regenerate the noise and subtract it."""

import copy
import dataclasses
import warnings

import numpy as np
import pytest
import torch
import yaml
from helpers import SPEC, crash_at_step, toy_table
from typer.testing import CliRunner

import dpcare.data.encoding as encoding
import dpcare.privacy.randomness as randomness
from dpcare.cli import app
from dpcare.data import TableSchema
from dpcare.engine import TrainConfig, Trainer
from dpcare.methods import DPSGD, NonPrivate
from dpcare.models import TabularMLP
from dpcare.privacy import PrivacyLedger, ReproducibleNoiseWarning
from dpcare.runs import read_manifest
from dpcare.settings import DPSettings
from dpcare.tabular import TabularSettings
from dpcare.tabular.recipe import train_rows

runner = CliRunner()


def data(n=64, d=6):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, d, generator=g)
    return {"x": x, "x_pub": x[:, :3].clone(), "y": (x[:, 0] > 0).float()}


def trainer(noise_seed=None, seed=3, steps=5, checkpoint_dir=None, model=None):
    torch.manual_seed(0)  # the same initial model every time
    model = model if model is not None else TabularMLP(6, hidden=8, dropout=0.0)  # only the DP draws differ
    cfg = TrainConfig(dp=DPSettings(batch_size=8, steps=steps, seed=seed, noise_seed=noise_seed), noise_multiplier=1.0,
                      checkpoint_dir=checkpoint_dir, checkpoint_every=4, progress=False)
    return Trainer(model, DPSGD(), cfg, ledger=PrivacyLedger(64))


def params(t):
    return torch.cat([p.detach().flatten() for p in t.model.parameters()])


def test_the_same_seed_without_a_noise_seed_draws_other_noise_but_the_same_public_randomness():
    d = data()
    a, b = trainer(), trainer()
    assert torch.equal(params(a), params(b))  # the same initial model
    assert torch.equal(a._gens["public"].get_state(), b._gens["public"].get_state())  # public sampling
    for key in ("sampling", "noise"):  # the private Poisson sampling and the noise: not from the public seed
        assert a._streams[key].secure and a._streams[key].root != b._streams[key].root, key
        assert not torch.equal(a._streams[key].rand(50), b._streams[key].rand(50)), key
    a.fit(d)
    b.fit(d)
    assert not torch.equal(params(a), params(b))


def test_the_same_integer_noise_seed_reproduces_the_run_bit_for_bit():
    d = data()
    a = trainer(noise_seed=7)
    a.fit(d)
    b = trainer(noise_seed=7)
    b.fit(d)
    assert torch.equal(params(a), params(b))
    other = trainer(noise_seed=8)
    other.fit(d)
    assert not torch.equal(params(a), params(other))


def test_a_resumed_run_without_a_noise_seed_keeps_its_drawn_noise(tmp_path):
    """The drawn root is kept in the checkpoint folder: the resumed run is the uninterrupted run with that root."""
    d = data()
    model = TabularMLP(6, hidden=8, dropout=0.0)
    t = trainer(steps=12, checkpoint_dir=str(tmp_path / "b"), model=copy.deepcopy(model))
    crash_at_step(t, 9)
    with pytest.raises(KeyboardInterrupt):
        t.fit(d)
    root = (tmp_path / "b" / randomness.ROOT_FILE).read_text()
    resumed = trainer(steps=12, checkpoint_dir=str(tmp_path / "b"), model=copy.deepcopy(model))
    resumed.fit(d)
    (tmp_path / "c").mkdir()  # the uninterrupted run with that root (secure noise, as the resumed one)
    (tmp_path / "c" / randomness.ROOT_FILE).write_text(root)
    ref = trainer(steps=12, checkpoint_dir=str(tmp_path / "c"), model=copy.deepcopy(model))
    ref.fit(d)
    assert torch.equal(params(resumed), params(ref))
    other = trainer(steps=12, model=copy.deepcopy(model))  # another root: other noise
    other.fit(d)
    assert not torch.equal(params(resumed), params(other))


SCHEMA_NO_AGE_BOUNDS = TableSchema.from_dict(
    {**SPEC, "columns": [{k: v for k, v in c.items() if not (c["name"] == "age" and k == "bounds")}
                         for c in SPEC["columns"]]})


def bounds_draws(monkeypatch):
    """Spy on the DP bounds histogram: the state of the generator its noise is drawn from, per call."""
    seen, real = [], encoding.dp_bounds

    def spy(values, sigma, rng, *args, **kwargs):
        seen.append(repr(rng.bit_generator.state))
        return real(values, sigma, rng, *args, **kwargs)

    monkeypatch.setattr(encoding, "dp_bounds", spy)
    return seen


def test_a_noisy_statistic_with_the_same_seed_draws_other_noise(monkeypatch):
    seen = bounds_draws(monkeypatch)
    train = toy_table(300)
    settings = TabularSettings(method="dp-sgd", hidden=8, stats_epsilon=0.5,
                               dp=DPSettings(epsilon=2.0, epochs=1, batch_size=64, accountant="rdp", seed=0))
    for _ in range(2):
        train_rows(train, SCHEMA_NO_AGE_BOUNDS, settings, progress=False)
    assert len(seen) == 2 and seen[0] != seen[1]  # the DP bounds of 'age': fresh noise, whatever the seed
    with pytest.warns(ReproducibleNoiseWarning):
        pinned = settings.replace(dp=settings.dp.replace(noise_seed=4))
    seen.clear()
    for _ in range(2):
        train_rows(train, SCHEMA_NO_AGE_BOUNDS, pinned, progress=False)
    assert seen[0] == seen[1]  # a given noise_seed reproduces it


def test_run_json_records_noise_seed_null_and_no_number_the_noise_came_from(tmp_path, monkeypatch):
    drawn, real = [], randomness.secrets.randbits

    def spy(k):
        drawn.append(real(k))
        return drawn[-1]

    monkeypatch.setattr(randomness.secrets, "randbits", spy)
    table, spec = tmp_path / "table.csv", tmp_path / "spec.yaml"
    toy_table(400).to_csv(table, index=False)
    spec.write_text(yaml.safe_dump(SCHEMA_NO_AGE_BOUNDS.to_dict()))
    out = tmp_path / "out"
    r = runner.invoke(app, ["train", str(table), "--spec", str(spec), "--out", str(out), "--method", "dp-sgd",
                            "--epsilon", "2", "--epochs", "1", "--batch-size", "64", "--stats-epsilon", "0.5"])
    assert r.exit_code == 0, r.output
    m = read_manifest(out)
    assert m.settings["dp"]["noise_seed"] is None and m.settings["dp"]["seed"] == 0
    assert any("dp bounds of age" in e["name"] for e in m.models[0]["ledger"]["entries"])  # a noisy statistic ran
    assert len(drawn) == 1  # one secret root for the run: the bounds' noise and the engine's
    for f in out.rglob("*"):  # the root is in no file of the run folder (checkpoints and root file deleted)
        assert not f.is_file() or str(drawn[0]).encode() not in f.read_bytes(), f
    assert not any(randomness.ROOT_FILE in str(p) for p in out.rglob("*"))
    assert not any("noise_seed" in line for line in m.not_protected)

    # a given noise_seed is recorded, and run.json says plainly what it means
    r = runner.invoke(app, ["train", str(table), "--spec", str(spec), "--out", str(tmp_path / "pinned"), "--method",
                            "dp-sgd", "--epsilon", "2", "--epochs", "1", "--batch-size", "64", "--stats-epsilon", "0.5",
                            "--noise-seed", "5"])
    assert r.exit_code == 0, r.output
    m = read_manifest(tmp_path / "pinned")
    assert m.settings["dp"]["noise_seed"] == 5
    assert any("noise_seed = 5" in line and "reproducible" in line for line in m.not_protected)


def test_an_integer_noise_seed_warns_and_none_does_not():
    with pytest.warns(ReproducibleNoiseWarning, match="noise_seed = 3.*reproducible") as caught:
        DPSettings(noise_seed=3)
    assert [w.filename for w in caught] == [__file__]  # the user's line, not settings.py's
    with pytest.warns(ReproducibleNoiseWarning, match="noise_seed = 5") as caught:
        DPSettings().replace(noise_seed=5)
    assert [w.filename for w in caught] == [__file__]  # not dataclasses.py, which replace goes through
    with warnings.catch_warnings():
        warnings.simplefilter("error", ReproducibleNoiseWarning)
        DPSettings()
        DPSettings(seed=3)


def test_the_command_line_takes_a_noise_seed():
    r = runner.invoke(app, ["train", "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0 and "--noise-seed" in r.output


def test_a_non_private_run_stays_reproducible_from_the_public_seed():
    """Non-private batches are public randomness: the baselines keep their numbers with the seed alone."""
    d = data()
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        model = TabularMLP(6, hidden=8)
        Trainer(model, NonPrivate(), TrainConfig(dp=DPSettings(batch_size=8, steps=5, seed=3), progress=False)).fit(d)
        runs.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    assert torch.equal(*runs)


def test_a_shifted_run_moves_a_pinned_noise_seed_with_its_seed_and_keeps_fresh_noise_fresh():
    assert DPSettings(seed=3).shifted(2) == DPSettings(seed=5)  # noise_seed None: still fresh OS entropy
    with pytest.warns(ReproducibleNoiseWarning):
        pinned = DPSettings(seed=3, noise_seed=10)
    with warnings.catch_warnings():  # the user's pinned seed warned once; a derived run does not warn again
        warnings.simplefilter("error", ReproducibleNoiseWarning)
        shifted = pinned.shifted(2)
        assert pinned.replace(epsilon=2.0).noise_seed == 10  # nor a copy that keeps it
        from dpcare.studies.diffusion import DiffusionStudy

        study = DiffusionStudy(seeds=2)
        study = dataclasses.replace(study, settings=dataclasses.replace(study.settings, dp=pinned))
        assert study.at_seed(1).settings.dp.noise_seed == 11  # moved and kept its seed, silently
    assert (shifted.seed, shifted.noise_seed) == (5, 12)
    with pytest.warns(ReproducibleNoiseWarning, match="noise_seed = 4"):  # a new pinned seed still warns
        pinned.replace(noise_seed=4)


def test_each_noisy_statistic_draws_from_its_own_stream_not_the_engines_root(monkeypatch, tmp_path):
    # the DP bounds and the engine take one root (noise_seed, or the drawn root kept for a resume); two
    # generators seeded alike would repeat one noise sequence in two releases, which composition does not allow
    seen = bounds_draws(monkeypatch)
    train = toy_table(300)
    with pytest.warns(ReproducibleNoiseWarning):
        settings = TabularSettings(method="dp-sgd", hidden=8, stats_epsilon=0.5, dp=DPSettings(
            epsilon=2.0, epochs=1, batch_size=64, accountant="rdp", seed=0, noise_seed=4))
    train_rows(train, SCHEMA_NO_AGE_BOUNDS, settings, progress=False)
    assert seen[0] != repr(np.random.default_rng(4).bit_generator.state)  # not the root's own stream
    assert randomness.secret_seed(4, purpose="table bounds") != randomness.secret_seed(4, purpose="tuning selection")
    assert randomness.secret_seed(4, purpose="table bounds") == randomness.sub_root(4, "table bounds")
    kept = randomness.secret_seed(None, tmp_path)  # the engine's root, kept in the checkpoint folder
    assert randomness.secret_seed(None, tmp_path, purpose="table bounds") not in (kept, kept + 2)
    assert randomness.secret_seed(None, tmp_path, purpose="table bounds") == randomness.sub_root(kept, "table bounds")
