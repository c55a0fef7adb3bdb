"""AIM as a synthesizer of its own (dpcare.synth.aim, ``synth fit --synthesizer aim``).

Fast tests (the in-process engine, dpcare.synth.aim_engine, replaced by a stand-in that records what it is given):
the rho-zCDP accounting and its calibration, the plan made before any row is read, the isolation of everything
but the rows that the engine sees, OpenDP's randomness for the noise and the selections, the run folder round trip,
and the command line's refusals. The slow tests fit the real AIM (mbi 2 and OpenDP in this process) end to end.
"""

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers import SPEC, needs_smartnoise, toy_table
from typer.testing import CliRunner

import dpcare.synth.aim_engine as aim_engine
import dpcare.synth.baselines as bl
from dpcare.cli import app
from dpcare.data import TableSchema, load_table
from dpcare.exceptions import PrivacyParameterError, SpecError
from dpcare.privacy import (
    Budget,
    PrivacyLedger,
    calibrate_zcdp_rho,
    compute_epsilon,
    zcdp_event,
)
from dpcare.runs import read_manifest
from dpcare.synth.aim import AIMSynthesizer
from dpcare.synth.saved import load_synthesizer
from dpcare.synth.settings import AIMSettings

SCHEMA = TableSchema.from_dict(SPEC)
runner = CliRunner()


# ------------------------------------------------------------------ accounting
@pytest.mark.parametrize("eps", [0.5, 1.0, 3.0, 8.0])
def test_the_calibrated_rho_meets_the_target_and_no_more(eps):
    rho = calibrate_zcdp_rho(eps, 1e-5)
    assert compute_epsilon(zcdp_event(rho), 1e-5, "rdp") <= eps
    assert compute_epsilon(zcdp_event(rho * 1.001), 1e-5, "rdp") > eps  # the largest such rho, to 0.1%
    # the classic conversion rho + 2 sqrt(rho log(1/delta)) (Bun & Steinke, Prop. 1.3) is looser, never tighter
    assert rho + 2 * math.sqrt(rho * math.log(1e5)) >= eps


def test_a_zcdp_release_is_composed_by_rdp_and_refused_by_pld():
    with pytest.raises(PrivacyParameterError, match="rho must be a finite number > 0"):
        zcdp_event(0.0)
    rdp = PrivacyLedger(1000, accountant="rdp")
    rdp.charge("aim", zcdp_event(0.5))
    # (alpha, 0.5 alpha)-RDP is the RDP of a Gaussian with sigma = 1: the RDP accountant gives the same epsilon
    from dp_accounting import dp_event

    assert rdp.epsilon() == pytest.approx(compute_epsilon(dp_event.GaussianDpEvent(1.0), rdp.delta, "rdp"))
    assert PrivacyLedger.from_state_dict(rdp.state_dict()).epsilon() == rdp.epsilon()
    pld = PrivacyLedger(1000, accountant="pld")
    pld.charge("aim", zcdp_event(0.5))
    with pytest.raises(PrivacyParameterError, match="does not support"):
        pld.epsilon()  # a PLD ledger must not treat an arbitrary zCDP mechanism as a Gaussian


def test_a_pld_budget_adds_an_aim_release_by_basic_composition(tmp_path):
    budget = Budget.create(tmp_path / "b.json", 10.0, 1e-3, "toy")
    ledger = AIMSynthesizer(SCHEMA, epsilon=3.0).plan(500)
    budget.reserve(ledger, "r1", "synth fit")
    spent = Budget.load(tmp_path / "b.json").spent()
    assert spent.method == "basic" and spent.epsilon == pytest.approx(ledger.epsilon())


def test_the_plan_is_made_from_the_settings_and_row_count_alone():
    synth = AIMSynthesizer(SCHEMA, epsilon=3.0)
    ledger = synth.plan(800)
    assert ledger.accountant == "rdp" and ledger.n == 800 and ledger.delta == pytest.approx(1e-5)
    assert 2.99 < ledger.epsilon() <= 3.0
    (entry,) = ledger.entries
    assert entry.event.rho == calibrate_zcdp_rho(3.0, 1e-5)
    assert AIMSynthesizer(SCHEMA, epsilon=3.0).plan(5000).delta == pytest.approx(0.01 / 5000)
    with pytest.raises(PrivacyParameterError, match="delta"):
        AIMSynthesizer(SCHEMA, epsilon=3.0, delta=0.01).plan(800)  # delta >= 1/n
    with pytest.raises(PrivacyParameterError, match="epsilon"):
        AIMSettings(epsilon=0.0)


def test_columns_without_declared_support_are_refused_when_made():
    d = json.loads(json.dumps(SPEC))
    del d["columns"][2]["bounds"]  # hr
    with pytest.raises(SpecError, match="column 'hr'.*public bounds"):
        AIMSynthesizer(TableSchema.from_dict(d))


# ------------------------------------------------------------------ the engine, replaced
class FakeEngine:
    """Stands in for dpcare.synth.aim_engine: records what fit and sample are given; fits a uniform graphical model
    over each column, samples uniform codes."""

    def __init__(self):
        self.fits, self.samples = [], []

    def fit(self, train, layout, bins, rho, max_model_size=80.0, progress=None, checkpoint=None):
        self.fits.append({"train": train.copy(), "layout": json.loads(json.dumps(layout)), "bins": bins, "rho": rho,
                          "max_model_size": max_model_size, "checkpoint": checkpoint})
        if progress is not None:
            progress(0.5)
            progress(1.0)
        cards = [c["card"] for c in bl.public_column_specs(layout, bins)]
        cols = [f"col{i}" for i in range(len(cards))]
        state = {"attributes": cols, "shape": cards, "cliques": [[c] for c in cols], "total": 100.0}
        arrays = {f"p{i}": np.zeros(card) for i, card in enumerate(cards)}
        return state, arrays, {"rho": rho, "rho_spent": rho, "rounds": 3, "resumed_after_round": None,
                               "fit_seconds": 0.01}

    def sample(self, state, arrays, layout, bins, n, seed=0):
        self.samples.append({"state": state, "arrays": arrays, "layout": layout, "bins": bins, "n": n, "seed": seed})
        rng = np.random.default_rng(seed)
        codes = pd.DataFrame({c["name"]: rng.integers(0, card, n) for c, card in zip(layout, state["shape"])})
        return bl._decoded(codes, layout, "cube", bins, seed)


@pytest.fixture
def engine(monkeypatch):
    fake = FakeEngine()
    monkeypatch.setattr(aim_engine, "fit_aim", fake.fit)
    monkeypatch.setattr(aim_engine, "sample_aim", fake.sample)
    monkeypatch.setattr(AIMSynthesizer, "check_available", staticmethod(lambda: None))
    return fake


def other_private_table(df: pd.DataFrame) -> pd.DataFrame:
    """A table of the same size with every value changed (within the spec)."""
    other = toy_table(len(df), seed=99)
    other["lab"] = other["lab"].fillna(7.5)
    return other


def test_everything_the_engine_is_given_but_the_rows_is_the_same_for_another_private_table(engine):
    """The layout (bins, bounds, categories), the rho and the options the engine gets must be bit-identical for two
    private tables; only the rows differ. Red when the layout is taken from the data (e.g. _layout reading
    df.min()/max()). The real engine's domain and workload come from the layout alone."""
    df = toy_table(300)
    AIMSynthesizer(SCHEMA, epsilon=2.0, progress=False).fit(df)
    AIMSynthesizer(SCHEMA, epsilon=2.0, progress=False).fit(other_private_table(df))
    a, b = engine.fits
    assert {k: v for k, v in a.items() if k != "train"} == {k: v for k, v in b.items() if k != "train"}
    assert not a["train"].equals(b["train"])
    assert a["layout"] == json.loads(json.dumps(bl._layout(SCHEMA, 20)))
    pytest.importorskip("mbi", reason="pip install 'dpcare[synth]'")
    domain = aim_engine.domain_of(bl._layout(SCHEMA, 20), 20)
    assert list(domain.shape) == [c["card"] for c in bl.public_column_specs(bl._layout(SCHEMA, 20), 20)]


def test_sampling_reads_the_model_and_no_private_row(engine):
    synth = AIMSynthesizer(SCHEMA, epsilon=2.0, progress=False).fit(toy_table(300))
    out = synth.sample(50, seed=3)
    given = engine.samples[-1]
    assert given["state"] is synth.state and given["arrays"] is synth.arrays and given["n"] == 50
    assert not any(isinstance(v, pd.DataFrame) for v in given.values())
    assert len(out) == 50 and list(out.columns) == [c.name for c in SCHEMA.columns]
    assert out["hr"].between(20, 250).all() and set(out["group"]) <= {"a", "b", "c"}


@pytest.mark.slow  # end to end
def test_fit_save_load_and_sample_again(engine, tmp_path):
    df = toy_table(300)
    synth = AIMSynthesizer(SCHEMA, epsilon=2.0, progress=False).fit(df.iloc[:250])
    synth.compare_to_public(df.iloc[250:], rows=60)
    synth.save(tmp_path / "aim")
    m = read_manifest(tmp_path / "aim")
    g = m.models[0]["guarantee"]
    assert m.kind == "synth" and m.models[0]["name"] == "aim" and m.settings["synthesizer"] == "aim"
    assert g["accountant"] == "rdp" and g["n"] == 250 and g["epsilon"] <= 2.0 and m.baselines
    assert any("OpenDP" in n for n in m.notes)
    back = load_synthesizer(tmp_path / "aim")
    assert isinstance(back, AIMSynthesizer) and back.guarantee.epsilon == synth.guarantee.epsilon
    pd.testing.assert_frame_equal(back.sample(40, seed=1), synth.sample(40, seed=1))
    from dpcare.synth.synthesizer import Synthesizer

    with pytest.raises(ValueError, match="load_synthesizer loads either kind"):
        Synthesizer.load(tmp_path / "aim")


def test_a_fit_refuses_an_engine_that_spent_another_rho(engine, monkeypatch):
    def greedy(*args, **kwargs):
        state, arrays, acc = FakeEngine().fit(*args, **kwargs)
        return state, arrays, {**acc, "rho_spent": acc["rho"] * 1.01}

    monkeypatch.setattr(aim_engine, "fit_aim", greedy)
    with pytest.raises(RuntimeError, match="not the planned"):
        AIMSynthesizer(SCHEMA, epsilon=2.0, progress=False).fit(toy_table(100))


def test_the_noise_and_the_selections_are_opendps_not_numpys_seeded_generator():
    """A public seed in NumPy's global generator (what sampling uses) must not replay the fit's noise or
    selections: they come from OpenDP's samplers. Red when Mechanisms draws from np.random."""
    pytest.importorskip("opendp", reason="pip install 'dpcare[synth]'")
    mech = aim_engine.Mechanisms()
    draws, picks = [], []
    for _ in range(2):
        np.random.seed(7)
        draws.append(mech.noisy(np.zeros(8), 1.0))
        picks.append([mech.select([0.0] * 20, 1.0, 1.0) for _ in range(10)])
    assert not np.array_equal(*draws) and picks[0] != picks[1]
    with pytest.raises(RuntimeError, match="OpenDP's privacy map"):  # the check against the rounds' charge
        aim_engine._check(0.2, 0.1, "Gaussian measurement")


def test_the_smartnoise_workers_draw_from_fresh_entropy_not_the_public_seed():
    """MST's and DP-CTGAN's mechanisms (SmartNoise's interpreter) draw from numpy's global generator: seeded with
    the job's public seed, anyone could replay them. Red when _fresh_entropy seeds with a constant."""
    draws = []
    for _ in range(2):
        bl._fresh_entropy(torch_too=False)
        draws.append(np.random.random(4))
    assert not np.array_equal(*draws)
    bl._public_seed(7)  # sampling (post-processing) is reproducible from the seed
    x = np.random.random(4)
    np.random.seed(7)
    assert np.array_equal(x, np.random.random(4))


# ------------------------------------------------------------------ command line
@pytest.fixture
def files(tmp_path):
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(SPEC))
    toy_table(200).to_csv(tmp_path / "train.csv", index=False)
    return tmp_path


def aim_args(d, *extra):
    return ["synth", "fit", str(d / "train.csv"), "--spec", str(d / "spec.yaml"), "--out", str(d / "out"),
            "--synthesizer", "aim", *extra]


@pytest.mark.parametrize("extra, message", [
    (["--lr", "0.1"], "--lr does not apply to --synthesizer aim: it sets the language model"),
    (["--layers", "2", "--scale", "paper"], "--layers, --scale do not apply to --synthesizer aim"),
    (["--noise-seed", "1"], "--noise-seed does not apply to aim"),
    (["--bins", "1"], "--bins must be an integer >= 2"),
])
def test_options_that_do_not_apply_are_refused_before_any_row_is_read(files, monkeypatch, extra, message):
    monkeypatch.setattr("dpcare.data.load_table", lambda *a, **k: pytest.fail("the private table was read"))
    r = runner.invoke(app, aim_args(files, *extra))
    assert r.exit_code == 2 and message in r.stderr, r.output
    assert not (files / "out").exists()


def test_aim_is_the_default_and_a_language_model_option_alone_is_refused_with_the_fix(files, monkeypatch):
    """Without --synthesizer, synth fit fits AIM; an explicit --mode (even the LM's default) must not silently
    fit AIM instead of the language model the user asked for."""
    monkeypatch.setattr("dpcare.data.load_table", lambda *a, **k: pytest.fail("the private table was read"))
    r = runner.invoke(app, ["synth", "fit", str(files / "train.csv"), "--spec", str(files / "spec.yaml"), "--out",
                            str(files / "out"), "--mode", "dp-2stage-u"])
    assert r.exit_code == 2 and "add --synthesizer dp-2stage" in r.stderr, r.output


def test_aim_options_are_refused_for_the_language_model(files, monkeypatch):
    monkeypatch.setattr("dpcare.data.load_table", lambda *a, **k: pytest.fail("the private table was read"))
    r = runner.invoke(app, ["synth", "fit", str(files / "train.csv"), "--spec", str(files / "spec.yaml"), "--out",
                            str(files / "out"), "--synthesizer", "dp-2stage", "--max-model-size", "80"])
    assert r.exit_code == 2 and "--max-model-size does not apply to --synthesizer dp-2stage" in r.stderr


@pytest.mark.slow  # end to end
def test_the_cli_fits_writes_samples_and_reserves_the_planned_budget(files, engine):
    budget = files / "b.json"
    assert runner.invoke(app, ["budget", "init", str(budget), "--epsilon", "5", "--delta", "1e-3", "--dataset",
                               "toy"]).exit_code == 0
    r = runner.invoke(app, aim_args(files, "--epsilon", "2", "--compare-rows", "60", "--budget", str(budget)))
    assert r.exit_code == 0, r.output
    assert "RDP accountant, n = 180" in r.output and "public baseline" in r.output
    assert sorted(p.name for p in (files / "out").iterdir()) == ["model.npz", "run.json", "synthesizer.json"]
    (release,) = json.loads(budget.read_text())["releases"]
    assert release["status"] == "done" and release["epsilon"] <= 2.0
    s = runner.invoke(app, ["synth", "sample", str(files / "out"), "--n", "30", "--out", str(files / "s.csv")])
    assert s.exit_code == 0 and len(pd.read_csv(files / "s.csv")) == 30, s.output
    refused = runner.invoke(app, ["synth", "sample", str(files / "out"), "--temperature", "0.5", "--out",
                                  str(files / "t.csv")])
    assert refused.exit_code == 2 and "--temperature does not apply to an AIM synthesizer" in refused.stderr


@pytest.mark.slow  # end to end
def test_an_interrupted_cli_fit_resumes_from_its_checkpoint_under_the_same_reservation(files, engine,
                                                                                         monkeypatch):
    """The engine's checkpoint lives in the run's staging folder: a rerun of the same command finds it (and the
    budget's reservation of the interrupted run, not a second one), and the finished run folder holds none."""
    budget = files / "b.json"
    runner.invoke(app, ["budget", "init", str(budget), "--epsilon", "5", "--delta", "1e-3", "--dataset", "toy"])
    args = aim_args(files, "--epsilon", "2", "--compare-rows", "60", "--budget", str(budget))
    staging = files / ".out.partial" / "checkpoints" / "aim-rounds.npz"

    checkpoints = []

    def killed(train, layout, bins, rho, max_model_size=80.0, progress=None, checkpoint=None):
        checkpoints.append(Path(checkpoint))
        Path(checkpoint).parent.mkdir(parents=True, exist_ok=True)
        Path(checkpoint).write_bytes(b"rounds so far")  # what the real engine saves after a round
        raise KeyboardInterrupt

    monkeypatch.setattr(aim_engine, "fit_aim", killed)
    assert runner.invoke(app, args).exit_code != 0
    assert checkpoints[0].resolve() == staging.resolve() and staging.read_bytes() == b"rounds so far"
    (reserved,) = json.loads(budget.read_text())["releases"]
    assert reserved["status"] == "reserved"
    monkeypatch.setattr(aim_engine, "fit_aim", engine.fit)
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert len(engine.fits) == 1 and Path(engine.fits[0]["checkpoint"]).resolve() == checkpoints[0].resolve()
    (release,) = json.loads(budget.read_text())["releases"]
    assert release["status"] == "done" and release["run_id"] == reserved["run_id"]
    assert not (files / ".out.partial").exists() and not (files / "out" / "checkpoints").exists()


def test_an_unavailable_aim_is_refused_before_any_row_is_read(files, monkeypatch):
    monkeypatch.setattr(aim_engine, "available", lambda: "AIM needs mbi and jax (mbi is missing)")
    monkeypatch.setattr("dpcare.data.load_table", lambda *a, **k: pytest.fail("the private table was read"))
    r = runner.invoke(app, aim_args(files))
    assert r.exit_code == 2 and "--synthesizer dp-2stage" in r.stderr and "mbi is missing" in r.stderr


# ------------------------------------------------------------------ the real AIM (mbi 2 and OpenDP, in this process)
@pytest.mark.slow
def test_the_real_aim_fits_saves_and_samples_in_a_fresh_process(files):
    needs_smartnoise("aim")
    r = runner.invoke(app, aim_args(files, "--epsilon", "3", "--bins", "5", "--compare-rows", "60"))
    assert r.exit_code == 0, r.output
    m = read_manifest(files / "out")
    assert m.models[0]["guarantee"]["epsilon"] <= 3.0 and m.baselines[0]["verdict"]
    s = runner.invoke(app, ["synth", "sample", str(files / "out"), "--n", "100", "--out", str(files / "s.csv"),
                            "--seed", "4"])
    assert s.exit_code == 0, s.output
    fake = pd.read_csv(files / "s.csv")
    assert len(fake) == 100 and fake["hr"].between(20, 250).all() and set(fake["group"]) <= {"a", "b", "c"}
    again = load_synthesizer(files / "out").sample(100, seed=4)  # the saved model: the same rows again
    pd.testing.assert_frame_equal(again.reset_index(drop=True), load_synthesizer(files / "out").sample(100, seed=4))


@pytest.mark.slow  # end to end
def test_evaluate_and_report_read_an_aim_run(files, engine):
    from dpcare.privacy import event_to_json
    from dpcare.report.model import _event_fields

    toy_table(100, seed=1).to_csv(files / "test.csv", index=False)
    assert runner.invoke(app, aim_args(files, "--compare-rows", "60")).exit_code == 0
    assert runner.invoke(app, ["synth", "sample", str(files / "out"), "--n", "80", "--out",
                               str(files / "s.csv")]).exit_code == 0
    r = runner.invoke(app, ["synth", "evaluate", str(files / "s.csv"), "--train", str(files / "train.csv"), "--test",
                            str(files / "test.csv"), "--spec", str(files / "spec.yaml"), "--synthesizer",
                            str(files / "out")])
    assert r.exit_code == 0 and "no perplexities: AIM is not a language model" in r.stderr, r.output
    m = read_manifest(files / "out")
    assert any(row.get("synthetic table") == "s.csv" and row["source"] == "sampled from this run" for row in m.metrics)
    assert _event_fields(event_to_json(zcdp_event(0.5)))[0] == "rho-zCDP mechanism (rho = 0.5)"
    html = files / "r.html"
    assert runner.invoke(app, ["report", str(files / "out"), "--out", str(html)]).exit_code == 0
    assert "rho-zCDP mechanism" in html.read_text()


@pytest.mark.slow
def test_the_real_aim_resumes_a_killed_fit_after_its_last_round(tmp_path, monkeypatch):
    """The fit is killed at its first progress call (after round 1 is saved); the second fit resumes after that
    round and its rounds' tally is exactly rho (the fit refuses any other)."""
    needs_smartnoise("aim")

    class Killed(Exception):
        pass

    def kill(fraction):
        raise Killed

    fit_aim = aim_engine.fit_aim
    monkeypatch.setattr(aim_engine, "fit_aim", lambda *args, **kwargs: fit_aim(*args, **{**kwargs, "progress": kill}))
    df = toy_table(200)
    with pytest.raises(Killed):
        AIMSynthesizer(SCHEMA, epsilon=3.0, bins=5, progress=False).fit(df, checkpoint_dir=tmp_path)
    assert (tmp_path / "aim-rounds.npz").is_file()
    monkeypatch.undo()
    synth = AIMSynthesizer(SCHEMA, epsilon=3.0, bins=5, progress=False).fit(df, checkpoint_dir=tmp_path)
    assert synth.info["resumed_after_round"] >= 1 and synth.info["rounds"] > synth.info["resumed_after_round"]
    assert len(synth.sample(50)) == 50


def test_the_numpy_marginals_are_mbis():
    """The engine scores candidates with NumPy marginals of the model (aim_engine.marginals): the same numbers as
    mbi's own projection, on a model with a cycle-free and an overlapping clique structure."""
    pytest.importorskip("mbi", reason="pip install 'dpcare[synth]'")
    mbi = aim_engine._mbi()
    layout = bl._layout(SCHEMA, 5)
    codes, _ = bl._encode(load_table(toy_table(300), SCHEMA), layout, "cube", 5)
    names, domain = aim_engine.attributes(layout), aim_engine.domain_of(layout, 5)
    data = mbi.Dataset({a: codes[c["name"]].to_numpy(np.int64) for a, c in zip(names, layout)}, domain)
    cliques = [(a,) for a in names] + [("col0", "col1"), ("col1", "col2"), ("col0", "col2"), ("col3", "col4")]
    measured = [mbi.LinearMeasurement(np.asarray(data.project(cl).datavector(), float), cl, 3.0) for cl in cliques]
    model = mbi.estimation.MirrorDescent().estimate(domain, measured, iters=200)
    queries = list(aim_engine.candidates_of(aim_engine.workload(domain)))
    ours = aim_engine.marginals(model, queries)
    for cl in queries:
        np.testing.assert_allclose(ours[cl], np.asarray(model.project(cl).datavector()), rtol=1e-8, atol=1e-8)
