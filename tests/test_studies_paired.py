"""Paired differences over seeds (dpcare.studies.paired): orientation, interval, one-seed marking."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from dpcare.exceptions import SettingsError
from dpcare.studies.paired import (
    HOLDS,
    NOT_SHOWN,
    ONE_SEED,
    Claim,
    check_seeds,
    paired_differences,
    paired_markdown,
    seeds_key,
    seeds_label,
)


def _runs(values: dict[str, list[float]], metric: str = "fid", epsilon: float | None = 8.0) -> pd.DataFrame:
    return pd.DataFrame([{"method": m, "target_epsilon": epsilon, "seed": s, metric: v}
                         for m, vs in values.items() for s, v in enumerate(vs)])


def test_a_lower_is_better_metric_gives_positive_differences_when_better_is_lower():
    runs = _runs({"fdp": [10.0, 12.0, 11.0], "dp": [20.0, 25.0, 21.0]})
    d = paired_differences(runs, [("fdp", "dp")], {"fid": "lower"}, 8.0).iloc[0]
    assert d["differences"] == "+10 +13 +10"
    assert d["mean_diff"] == pytest.approx(11.0)
    assert d["wins"] == 3 and d["seeds"] == 3 and d["better_is"] == "lower"
    assert d["verdict"] == HOLDS
    # the same numbers read as higher-is-better: the claim goes the wrong way
    e = paired_differences(runs, [("fdp", "dp")], {"fid": "higher"}, 8.0).iloc[0]
    assert e["mean_diff"] == pytest.approx(-11.0) and e["wins"] == 0 and e["verdict"] == NOT_SHOWN


def test_the_interval_is_the_t_interval_of_the_mean_difference():
    diffs = [0.3, -0.1, 0.5, 0.2]
    runs = _runs({"a": [1 + x for x in diffs], "b": [1.0] * 4}, "auprc")
    d = paired_differences(runs, [("a", "b")], {"auprc": "higher"}, 8.0).iloc[0]
    mean, sd = np.mean(diffs), np.std(diffs, ddof=1)
    half = stats.t.ppf(0.975, 3) * sd / math.sqrt(4)
    assert d["ci_low"] == pytest.approx(mean - half) and d["ci_high"] == pytest.approx(mean + half)
    assert d["sd"] == pytest.approx(sd)
    assert d["ci_low"] < 0 and d["verdict"] == NOT_SHOWN  # 3 of 4 seeds won, the interval crosses 0
    assert d["wilcoxon_p"] == pytest.approx(stats.wilcoxon(diffs, alternative="greater").pvalue)


def test_one_seed_is_marked_and_not_tested():
    runs = _runs({"a": [0.9], "b": [0.1]}, "auprc")
    d = paired_differences(runs, [("a", "b")], {"auprc": "higher"}, 8.0).iloc[0]
    assert d["verdict"] == ONE_SEED and d["seeds"] == 1
    assert math.isnan(d["ci_low"]) and math.isnan(d["wilcoxon_p"]) and math.isnan(d["sd"])
    text = "\n".join(paired_markdown(paired_differences(runs, [("a", "b")], {"auprc": "higher"}, 8.0), 1))
    assert "one seed: these rows are not a test" in text.lower()
    assert "(one seed)" in text and ONE_SEED in text
    assert seeds_label(1) == "(one seed)" and seeds_label(3) == "(mean ± sd over 3 seeds)"


def test_two_seeds_give_a_p_value_but_no_interval():
    d = paired_differences(_runs({"a": [2.0, 3.0], "b": [1.0, 1.0]}, "m"), [("a", "b")], {"m": "higher"}).iloc[0]
    assert d["verdict"] == NOT_SHOWN and math.isnan(d["ci_low"]) and d["wilcoxon_p"] == pytest.approx(0.25)


def test_claims_pick_their_epsilon_metrics_and_groups():
    rows = []
    for data in ("x", "y"):
        for s in range(3):
            rows += [{"data": data, "method": "baseline", "target_epsilon": None, "seed": s, "mse": 1.0, "auc": 0.8},
                     {"data": data, "method": "dp", "target_epsilon": 3.0, "seed": s, "mse": 1.5 + s, "auc": 0.5},
                     {"data": data, "method": "dp", "target_epsilon": 8.0, "seed": s, "mse": 1.2, "auc": 0.6},
                     {"data": data, "method": "zoo", "target_epsilon": None, "seed": s, "mse": 1.1, "auc": 0.55}]
    claims = [Claim("baseline", "dp", ("mse",), 3.0), Claim("zoo", "baseline", ("auc",))]
    d = paired_differences(pd.DataFrame(rows), claims, {"mse": "lower", "auc": "lower"}, 8.0, by=("data",))
    assert list(d["data"]) == ["x", "x", "y", "y"] and list(d["metric"]) == ["mse", "auc"] * 2
    first = d.iloc[0]
    assert first["epsilon"] == 3.0 and first["mean_diff"] == pytest.approx(1.5)  # paired with dp at 3, not 8
    assert d.iloc[1]["mean_diff"] == pytest.approx(0.25) and d.iloc[1]["verdict"] == HOLDS
    text = "\n".join(paired_markdown(d, 3, by=("data",)))
    assert "| data | claim |" in text and "holds" in text and "not a test" not in text


def test_missing_methods_give_no_row_and_unknown_metrics_are_named():
    runs = _runs({"a": [1.0, 2.0, 3.0]}, "m")
    assert paired_differences(runs, [("a", "b")], {"m": "higher"}).empty
    assert "no claim could be paired" in "\n".join(paired_markdown(paired_differences(runs, [], {"m": "higher"}), 3))
    with pytest.raises(ValueError, match="no direction"):
        paired_differences(_runs({"a": [1.0], "b": [1.0]}, "m"), [Claim("a", "b", ("fid",))], {"m": "higher"})


# --------------------------------------------------------------------------- every study, from fabricated runs
def _noise(seed: int, k: int) -> float:
    return 0.01 * ((seed * 7 + k * 3) % 5 - 2)


@pytest.mark.parametrize("seeds", [1, 3])
def test_fusiondp_text_writes_its_paired_section(seeds):
    from dpcare.studies import fusiondp_text as ftb

    bench = ftb.TextFusionBenchmark(seeds=seeds, epsilons=(5.0,))
    level = {m: 0.3 + 0.02 * i for i, m in enumerate(reversed(ftb.METHODS))}
    runs = pd.DataFrame([{"method": m, "target_epsilon": None if m in ftb.NONPRIVATE else 5.0, "seed": s,
                          "epsilon": math.inf if m in ftb.NONPRIVATE else 5.0, "best_epoch": 2,
                          **{f"test_{k}": level[m] + _noise(s, i) for i, k in enumerate(ftb.METRICS)}}
                         for m in ftb.METHODS for s in range(seeds)])
    diffs = ftb.claim_differences(runs, 5.0)
    assert len(diffs) == len(ftb.CLAIMS) * len(ftb.PAIRED_METRICS) and (diffs["seeds"] == seeds).all()
    text = ftb.markdown(ftb.summarize(runs), diffs, bench)
    assert "## Paired differences over seeds at epsilon 5" in text
    assert ("(one seed)" in text.splitlines()[0]) == (seeds == 1)
    assert ("not a test" in text) == (seeds == 1)
    assert ("| holds |" in text) == (seeds == 3)


def _clinical_runs(seeds: int) -> list[dict]:
    from dpcare.studies import clinical_nlp as cn

    f1 = {"base": 0.04, "non-private": 0.16, "dp-full": 0.03, "dp-lora": 0.05, "dp-prefix": 0.0}
    rows = []
    for task in ("ner", "summarisation"):
        for mode in cn.MODES:
            for s in range(seeds):
                private = mode not in ("base", "non-private")
                row = {"task": task, "mode": mode, "target_epsilon": 3.0 if private else None, "seed": s,
                       "variant": "fixed", "epsilon": 3.0 if private else None, "steps": 10, "clip_norm": 1.0,
                       "trainable_parameters": 100, "fit_s": 1.0}
                if task == "ner":
                    row |= {"test_ner_f1": f1[mode] + _noise(s, 1), "test_perplexity": 2.0 - f1[mode],
                            "mia_loss_auc": 0.8 if mode == "non-private" else 0.5 + _noise(s, 2),
                            "mia_reference_auc": 0.9 if mode == "non-private" else 0.5 + _noise(s, 3)}
                else:
                    row |= {"test_rougeL_f1": 0.2 + f1[mode] + _noise(s, 4)}
                rows.append(row)
    return rows


@pytest.mark.parametrize("seeds", [1, 3])
def test_clinical_nlp_writes_its_paired_section(seeds):
    from dpcare.studies import clinical_nlp as cn

    bench = cn.ClinicalNLPBenchmark(seeds=seeds, epsilons=(3.0,), main_epsilon=3.0)
    runs = pd.DataFrame(_clinical_runs(seeds))
    diffs = cn.claim_differences(runs, bench)
    ner = diffs[diffs["task"] == "ner"].set_index(["claim", "metric"])
    assert ner.loc[("dp-lora > dp-full", "perplexity"), "mean_diff"] == pytest.approx(0.02)  # lower is better
    assert ner.loc[("dp-lora > non-private", "mia_reference_auc"), "mean_diff"] > 0
    assert set(diffs[diffs["task"] == "summarisation"]["metric"]) == {"rougeL_f1"}
    text = cn.markdown(cn.summarize(runs), bench, diffs)
    assert "## Paired differences over seeds at epsilon 3" in text and "| task | claim |" in text
    assert ("(one seed)" in text.splitlines()[0]) == (seeds == 1)
    assert ("not a test" in text) == (seeds == 1)
    assert ("| holds |" in text) == (seeds == 3)


@pytest.mark.parametrize("seeds", [1, 3])
def test_fusiondp_writes_its_paired_section(seeds):
    from types import SimpleNamespace

    from dpcare.studies import fusiondp as fd

    bench = fd.FusionBenchmark(seeds=seeds, epsilons=(0.5, 2.0))
    level = {"sgd-org": 0.86, "sgd-hybrid": 0.85, "sgd-pub": 0.84, "dp-sgd": 0.80, "naive-fusion": 0.81,
             "naive-fusion-pub": 0.80, "feature-dp": 0.82, "calibrated-fusion": 0.83, "fusiondp": 0.845}
    chosen = pd.DataFrame([{"method": m, "target_epsilon": e, "epsilon": e or math.inf, "seed": s,
                            "test_auprc": v + _noise(s, 1), "test_auroc": v - 0.1 + _noise(s, 2)}
                           for m, v in level.items() for e in ([None] if m in fd.NONPRIVATE else bench.epsilons)
                           for s in range(seeds)])
    diffs = fd.claim_differences(chosen, bench)
    assert len(diffs) == len(fd.CLAIMS) * 2 * len(fd.PAIRED_METRICS)  # every claim at both epsilons
    assert set(diffs["epsilon"]) == {0.5, 2.0}
    text = fd.markdown(fd.summarize(chosen), SimpleNamespace(private_columns=("age",)), bench,
                       fd.PreparedSplits({}), diffs)
    assert "## Paired differences over seeds" in text
    assert ("(one seed)" in text.splitlines()[0]) == (seeds == 1)
    assert ("not a test" in text) == (seeds == 1)
    assert ("| holds |" in text) == (seeds == 3)


def _diffusion_results(seed: int, epsilons) -> list[dict]:
    fid = {"non-private": 4.0, "public": 100.0, "dp": 350.0, "fdp-dpsgd": 11.0, "fdp-alg1": 80.0}
    out = []
    for label, kind, eps in [("non-private", "non-private", None), ("public", "public", None),
                             *((f"{k} eps={e:g}", k, e) for e in epsilons for k in ("dp", "fdp-dpsgd", "fdp-alg1"))]:
        info = {"guarantee": {"epsilon": eps, "unit": "example" if kind == "dp" else "features"}} if eps else {}
        r = {"label": label, "kind": kind, "epsilon_target": eps, "info": info, "seconds": 1.0,
             "images_per_second": 10.0, "fid": fid[kind] + seed, "fid_per_class": {"0": fid[kind] * 2, "1": None}}
        if kind == "fdp-alg1":
            r["rejection"] = {"acceptance_rate": 0.2, "fid": fid[kind] - 10 + seed, "fid_per_class": {"0": 1.0}}
        out.append(r)
    return out


@pytest.mark.parametrize("seeds", [1, 3])
def test_diffusion_writes_its_paired_section(seeds):
    from dpcare.studies import diffusion as df

    study = df.DiffusionStudy(epsilons=(8.0, 1.0), seeds=seeds)
    assert ("seeds" in study.config()) == (seeds > 1) and study.at_seed(2).seed == 2
    per_seed = [_diffusion_results(s, study.epsilons) for s in range(seeds)]
    table, diffs = df.tables(per_seed, study)
    assert ("seed" in table) == (seeds > 1) and len(table) == 10 * seeds
    fid = diffs[diffs["metric"] == "fid"].set_index(["claim", "epsilon"])
    assert fid.loc[("fdp-dpsgd > dp", 8.0), "mean_diff"] == pytest.approx(339.0)  # FID: lower is better
    assert fid.loc[("fdp-dpsgd > public", 1.0), "mean_diff"] == pytest.approx(89.0)
    ref = {"label": "real", "fid": 1.8, "file": "public.png"}
    text = df._markdown(table, ref, {**ref, "fid": 110.0}, study, 3.0, diffs)
    assert ("(one seed)" in text.splitlines()[0]) == (seeds == 1)
    assert ("not a test" in text) == (seeds == 1)
    assert ("| holds |" in text) == (seeds == 3)
    assert ("| fdp-dpsgd eps=8 | 8 | detail beyond blur | 12.0 ± 1.0 |" in text) == (seeds == 3)


def _dp2stage_records(seeds: int) -> list[dict]:
    level = {"dp-standard": 0.3, "dp-2stage-u": 0.4, "dp-2stage-o": 0.35, "mst": 0.45}
    return [{"dataset": d, "method": m, "epsilon": e, "seed": s, "fit_seconds": 1.0,
             "perplexity": {"value": 10 - 10 * v + _noise(s, 1)},
             "metrics": {"ml_efficacy": {"xgboost": {"f1_minority": v + _noise(s, 2), "auc": v}},
                         "hist": {"bins_20": v + 0.4 + _noise(s, 3)}}}
            for s in range(seeds) for d in ("adult", "support2") for e in (1.0, 8.0) for m, v in level.items()] + [
        {"dataset": d, "method": "public-support", "epsilon": None, "seed": s, "fit_seconds": 0.0,
         "metrics": {"ml_efficacy": {"xgboost": {"f1_minority": 0.5, "auc": 0.42}}, "hist": {"bins_20": 0.6}}}
        for s in range(seeds) for d in ("adult", "support2")]


@pytest.mark.parametrize("seeds", [1, 3])
def test_dp2stage_writes_its_paired_section(seeds, tmp_path):
    from dpcare.studies import dp2stage as ds

    bench = ds.Dp2StageBenchmark(seeds=seeds, baselines=("mst",))
    assert ("seeds" in bench.to_dict()) == (seeds > 1) and bench.at_seed(1).seed == bench.seed + 1
    table, diffs = ds.tables(_dp2stage_records(seeds), bench)
    assert ("seed" in table) == (seeds > 1)
    assert set(diffs["metric"]) == set(ds.PAIRED_METRICS) and set(diffs["dataset"]) == {"adult", "support2"}
    ppl = diffs[(diffs["metric"] == "ppl value") & (diffs["claim"] == "dp-2stage-u > dp-standard")]
    assert list(ppl["mean_diff"]) == pytest.approx([1.0] * 4)  # perplexity: lower is better
    # every method against the public baseline (no epsilon: it pairs at each one), on AUC XGB and HIST20 only
    public = diffs[diffs["claim"].str.endswith("> public-support")]
    assert set(public["metric"]) == set(ds.PUBLIC_METRICS)
    assert len(public) == 4 * 2 * 2 * 2  # methods x data sets x epsilons x metrics
    auc = public[public["metric"] == "AUC XGB"].set_index(["dataset", "claim", "epsilon"])["mean_diff"]
    assert auc[("adult", "mst > public-support", 8.0)] == pytest.approx(0.45 - 0.42)
    assert auc[("support2", "dp-standard > public-support", 1.0)] == pytest.approx(0.3 - 0.42)
    text = ds.table_markdown(table, tmp_path, seeds, diffs)
    assert "| adult | none | public-support |" in text and "| nan |" not in text
    ds.plot(table[table["seed"] == 0] if "seed" in table else table, tmp_path / "p.png")  # public bars beside each
    assert (tmp_path / "p.png").stat().st_size > 0
    assert ("(one seed)" in text.splitlines()[0]) == (seeds == 1)
    assert ("not a test" in text) == (seeds == 1)
    assert ("| holds |" in text) == (seeds == 3)


def _tsf_rows(seeds: int) -> list[dict]:
    mse = {"baseline": 1.0, "dp-sgd eps=3": 1.5, "zoo": 1.1, "mixup": 1.2}
    auc = {"baseline": 0.7, "dp-sgd eps=3": 0.5, "zoo": 0.55, "mixup": 0.6}
    rows = []
    for s in range(seeds):
        for data in ("mimic_demo", "pbcseq"):
            rows += [{"data": data, "method": m, "epsilon": 3.0 if "eps" in m else None, "seed": s,
                      "test_mse": v + _noise(s, 1), "verdict": "beats", "priv": 0.1, "loss_auc": auc[m] + _noise(s, 2),
                      "loss_auc_patient_ci": "[0.40, 0.60]", "lira_auc": auc[m] + _noise(s, 3)} for m, v in mse.items()]
            rows.append({"data": data, "method": "LOCF", "test_mse": 2.0, "seed": s})
    return rows


@pytest.mark.parametrize("seeds", [1, 3])
def test_tsf_writes_its_paired_section(seeds):
    from dpcare.studies import tsf

    bench = tsf.TsfBenchmark(methods=("baseline", "dp-sgd", "zoo", "mixup"), epsilons=(3.0,), seeds=seeds)
    assert ("seeds" in bench.config()) == (seeds > 1) and bench.at_seed(2).seed == 2
    table = pd.DataFrame(_tsf_rows(seeds))
    if seeds == 1:
        table = table.drop(columns="seed")
    diffs = tsf.claim_differences(table, bench)
    mse = diffs[(diffs["metric"] == "test_mse")].set_index(["data", "claim"])
    assert mse.loc[("pbcseq", "baseline > dp-sgd eps=3"), "mean_diff"] == pytest.approx(0.5)  # MSE: lower is better
    assert mse.loc[("pbcseq", "zoo > dp-sgd eps=3"), "mean_diff"] == pytest.approx(0.4)
    auc = diffs[diffs["metric"] == "loss_auc"].set_index(["data", "claim"])
    assert auc.loc[("mimic_demo", "mixup > baseline"), "mean_diff"] == pytest.approx(0.1)
    text = tsf.markdown(table, bench, diffs)
    assert ("(one seed)" in text.splitlines()[0]) == (seeds == 1)
    assert ("not a test" in text) == (seeds == 1)
    assert ("| holds |" in text) == (seeds == 3)
    assert ("3/3 beats" in text) == (seeds == 3)


@pytest.mark.parametrize("study", ["fusiondp", "fusiondp-text", "clinical-nlp", "dp2stage", "tsf", "diffusion"])
def test_every_benchmark_takes_seeds(study):
    from typer.testing import CliRunner

    from dpcare.cli import app

    r = CliRunner().invoke(app, ["benchmark", study, "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert r.exit_code == 0 and "--seeds" in r.output


def test_a_multi_seed_study_says_whose_models_its_run_json_lists():
    from dpcare.runs import Manifest
    from dpcare.studies.paired import note_seeds

    one, three = Manifest(), Manifest()
    note_seeds(one, 0, 1)
    note_seeds(three, 5, 3, "table.csv (column seed) and seed<s>/")
    assert one.files["paired"] == three.files["paired"] == "paired.csv" and one.notes == []
    assert three.notes == ["Models and metrics above are seed 5's; the other 2 seed(s) are in table.csv (column seed) "
                           "and seed<s>/, their paired differences in paired.csv."]


def test_a_studys_seeds_are_checked_and_left_out_of_its_resume_key_when_one():
    for bad in (0, -1, 1.5, True, "3"):
        with pytest.raises(SettingsError, match="seeds must be"):
            check_seeds(bad)
    assert seeds_key({"a": 1, "seeds": 1}, 1) == {"a": 1}  # the published one-seed key
    assert seeds_key({"a": 1}, 3) == {"a": 1, "seeds": 3}


def test_every_seeded_study_checks_its_seeds_before_it_picks_one():
    from dataclasses import replace

    from dpcare.studies import diffusion, dp2stage, tsf

    for study in (tsf.TsfBenchmark(), diffusion.DiffusionStudy(), dp2stage.Dp2StageBenchmark()):
        with pytest.raises(SettingsError, match="seeds must be"):
            replace(study, seeds=0).at_seed(0)


def test_a_pinned_noise_seed_moves_with_every_seed_and_shadow(monkeypatch):
    """A user's noise_seed is one stream: the seeds of a study and the target and shadows of an attack must each
    draw their own noise from it, or the 'independent' seeds share their noise and the shadows their noise."""
    from dpcare.studies import diffusion, dp2stage, tsf
    from dpcare.tabular import audit
    from dpcare.tabular.recipe import TabularSettings

    def pinned(settings):
        return replace(settings, dp=settings.dp.replace(noise_seed=100))

    d = diffusion.DiffusionStudy(seeds=3)
    d = replace(d, settings=pinned(d.settings))
    b = dp2stage.Dp2StageBenchmark(seeds=3)
    b = replace(b, settings=b.settings.replace(dp=b.settings.dp.replace(noise_seed=100)))
    t = tsf.TsfBenchmark(seeds=3)
    t = replace(t, settings=pinned(t.settings))
    for study in (d, b, t):
        noise = [study.at_seed(s).settings.dp.noise_seed for s in range(3)]
        assert len(set(noise)) == 3, (type(study).__name__, noise)
    assert len({d.at_seed(s).method_settings("dp", 8.0).dp.noise_seed for s in range(3)}) == 3
    seen = []
    monkeypatch.setattr(audit, "train_rows", lambda rows, schema, s, progress: seen.append(s.dp) or 1 / 0)
    for seed in (1, 2):
        with pytest.raises(ZeroDivisionError):
            audit._train_split_and_score(pd.DataFrame({"a": [1]}), None, pinned(TabularSettings()), [0], seed)
    assert [dp.seed for dp in seen] == [1, 2] and seen[0].noise_seed != seen[1].noise_seed
    # unpinned stays unpinned (fresh OS entropy per model)
    assert tsf.TsfBenchmark(seeds=3).at_seed(2).settings.dp.noise_seed is None


def test_a_pinned_noise_seed_moves_with_every_tsf_shadow(monkeypatch, tmp_path):
    """tsf's LiRA shadows: each draws its own noise from a pinned stream, none the target's (seed 0's)."""
    from types import SimpleNamespace

    from dpcare.studies import tsf

    bench = tsf.TsfBenchmark(shadows=4)
    bench = replace(bench, settings=replace(bench.settings, dp=bench.settings.dp.replace(noise_seed=100)))
    seen = []
    monkeypatch.setattr(tsf, "_population", lambda data: (None, None, np.array(["a", "b", "c", "d"])))
    monkeypatch.setattr(tsf, "windows_for", lambda windows, patients: None)
    monkeypatch.setattr(tsf, "map_tasks", lambda fn, args, workers, on_result: seen.extend(a[0] for a in args) or 1 / 0)
    data = SimpleNamespace(name="toy", part=lambda name: None, windows=None, standardizer=None)
    with pytest.raises(ZeroDivisionError):
        tsf._shadows(data, ["dp"], bench, tmp_path, progress=False)
    noise = [t.settings.dp.noise_seed for t in seen]
    assert len(seen) == 4 and len(set(noise)) == 4, noise
    assert bench.at_seed(0).settings.dp.noise_seed not in noise
