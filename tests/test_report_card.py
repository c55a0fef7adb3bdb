"""The report as a model card (issue 53 part 3): the verdict first, the timing of every phase, no absolute path,
the settings in effect (defaults resolved, other methods' settings left out), units for every metric, plots only
where they say something, every console warning repeated, and the same content as a Markdown model card."""

import json
import warnings

import pytest
import yaml
from helpers import SPEC, toy_table
from typer.testing import CliRunner

from dpcare.cli import app, show_warnings_once
from dpcare.report import write_report
from dpcare.report.card import card_path
from dpcare.report.html import NO_VERDICT, informative
from dpcare.report.plots import bar_png
from dpcare.runs import Manifest, RunFolder
from dpcare.runs.record import phase, record_warning
from dpcare.settings import in_effect
from dpcare.tabular import TabularSettings

PLAIN = ("worth releasing", "do not release", "cannot be told with")


@pytest.fixture
def cli_warnings(monkeypatch):
    """The command line's warning display (``dpcare.cli.main`` installs it), restored after the test."""
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)
    show_warnings_once()
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        yield


@pytest.fixture(scope="module")
def q1_run(tmp_path_factory):
    """`dpcare train` with DP-SGD and an expected batch above the rows (the q = 1 warning), and its report."""
    root = tmp_path_factory.mktemp("card")
    toy_table(300).to_csv(root / "t.csv", index=False)
    (root / "spec.yaml").write_text(yaml.safe_dump(SPEC))
    mp = pytest.MonkeyPatch()
    mp.setattr(warnings, "showwarning", warnings.showwarning)
    show_warnings_once()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            result = CliRunner().invoke(app, [
                "train", str(root / "t.csv"), "--spec", str(root / "spec.yaml"), "--out", str(root / "run"),
                "--method", "dp-sgd", "--epsilon", "2", "--epochs", "2", "--batch-size", "1000", "--hidden", "8",
                "--accountant", "rdp"])
    finally:
        mp.undo()
    assert result.exit_code == 0, result.output
    (root / "pages").mkdir()
    page = write_report([root / "run"], root / "pages" / "report.html")
    return root, json.loads((root / "run" / "run.json").read_text()), page.read_text()


def test_run_json_holds_phases_warnings_verdict_units_and_settings_in_effect(q1_run):
    _, m, _ = q1_run
    phases = [p["phase"] for p in m["phases"]]
    assert "training (dp-sgd)" in phases and "public baseline panel and the verdict" in phases
    assert phases[-1].startswith("whole run") and all(p["seconds"] >= 0 for p in m["phases"])
    assert any("(q = 1)" in w for w in m["warnings"])
    assert m["verdicts"][0]["verdict"].startswith(PLAIN) and m["verdicts"][0]["metric"] == "test AUPRC"
    assert {"test AUPRC", "test AUROC", "validation AUPRC"} <= set(m["units"])
    effect = m["settings_in_effect"]
    assert not {"alpha", "beta", "pad", "imputer", "public_batch_size"} & set(effect)  # feature-level methods' only
    assert effect["dp"]["delta"] == m["models"][0]["guarantee"]["delta"]  # None resolved to the delta in effect
    assert effect["dp"]["steps"] == m["settings"]["info"]["steps"]


def test_the_page_opens_with_the_verdict_and_names_no_absolute_path(q1_run):
    root, m, html = q1_run
    body = html.split("<body>", 1)[1]
    assert body.index(m["verdicts"][0]["verdict"]) < body.index("<h3>Privacy guarantee</h3>")
    assert str(root) not in html  # the run folder appears relative to the page: ../run
    assert "run folder: ../run" in html
    summary = html.split("<h2>Summary</h2>", 1)[1].split("<h2", 1)[0]  # the verdict column of the summary table
    assert "<th>verdict</th>" in summary and f"<td>{m['verdicts'][0]['verdict']}</td>" in summary
    assert "(q = 1)" in html.split("<h3>Warnings</h3>", 1)[1].split("<h3>", 1)[0]
    assert "training (dp-sgd)" in html.split("<h3>Timing</h3>", 1)[1]
    assert "0.5 is chance" in html and "unit not recorded" not in html
    settings = html.split("<h3>Settings in effect</h3>", 1)[1].split("<h3>", 1)[0]
    assert "<b>dp.delta</b> = 1e-05" in settings and "beta" not in settings


def test_the_model_card_beside_the_page_has_the_same_content(q1_run):
    root, m, _ = q1_run
    card = (root / "pages" / "report.md").read_text()
    assert card.startswith("---\nlibrary_name: dpcare\n")
    for heading in ("## Verdict", "## Model Details", "## Uses", "## Bias, Risks, and Limitations",
                    "## Training Details", "## Evaluation"):
        assert heading in card
    assert card.index("## Verdict") < card.index("### Privacy guarantee")
    assert m["verdicts"][0]["verdict"] in card and "(q = 1)" in card and "training (dp-sgd)" in card
    assert "privacy_epsilon: 2" in card or "privacy_epsilon: 1.9" in card
    assert str(root) not in card


def test_several_runs_get_a_card_each(q1_run, tmp_path):
    root, _, _ = q1_run
    out = tmp_path / "both.html"
    write_report([root / "run", root / "run"], out)
    assert (tmp_path / "both.run.md").exists() and card_path(out, type("R", (), {"name": "x"})(), 2).name == "both.x.md"
    write_report([root / "run"], tmp_path / "nocard.html", card=False)
    assert not (tmp_path / "nocard.md").exists()


def test_a_folder_without_verdict_or_units_says_so(tmp_path):
    run = RunFolder(tmp_path / "old", "tabular", {"method": "dp-sgd"}, command="dpcare train")
    m = Manifest(headline=["test AUPRC"])
    m.add_model("dp-sgd", None, note="non-private")
    m.metrics = [{"model": "dp-sgd", "test AUPRC": 0.7, "test widgets": 3}]
    run.finish(m)
    html = write_report([tmp_path / "old"], tmp_path / "r.html").read_text()
    assert NO_VERDICT in html and "<b>test widgets</b>: unit not recorded by the run" in html
    assert "<b>test AUPRC</b>: area under the precision-recall curve" in html  # units_for at finish


def test_every_headline_metric_of_every_recipe_and_study_has_a_unit():
    from dpcare.studies.clinical_nlp import UTILITY
    from dpcare.studies.dp2stage import SUMMARY
    from dpcare.units import unit_of

    columns = ["test AUPRC", "validation AUROC", "test MSE", "test f1_micro", "test auc_macro", "test FID",
               "mean per-class FID", "test ner F1", "test ROUGE-L F1", "real-test AUC XGB", "test AUPRC sd",
               *UTILITY, *[c for c in SUMMARY if c != "fit s"]]
    assert [c for c in columns if unit_of(c) is None] == []
    assert unit_of("test AUPRC sd").startswith("standard deviation over seeds")
    assert unit_of("test widgets") is None


def test_phases_and_warnings_go_to_the_open_run_only(tmp_path):
    import gc

    dropped = RunFolder(tmp_path / "dropped", "tabular", {}, command="test")  # neither finished nor abandoned
    del dropped  # (a library caller's exception): it must not take the warnings of the runs after it
    gc.collect()  # and any run an earlier test in this process dropped
    with phase("outside any run"):
        pass
    record_warning("given before the run folder exists")  # held for the next run folder
    run = RunFolder(tmp_path / "r", "tabular", {}, command="test")
    with phase("inside"):
        record_warning("given during the run")
    m = run.finish(Manifest()) / "run.json"
    saved = json.loads(m.read_text())
    assert [p["phase"] for p in saved["phases"]][:-1] == ["inside"]
    assert saved["warnings"] == ["given before the run folder exists", "given during the run"]
    refused = RunFolder(tmp_path / "refused", "tabular", {}, command="test")
    refused.abandon()
    with phase("after the abandoned run"):
        record_warning("after")
    assert refused.record.phases == [] and refused.record.warnings == []
    RunFolder(tmp_path / "next", "tabular", {}, command="test").abandon()  # takes the held "after" warning


def test_in_effect_resolves_defaults_and_drops_other_methods_settings():
    fusion = in_effect(TabularSettings(method="fusiondp"), {"alpha": 1.0, "dp.delta": 1e-6})
    assert fusion["beta"] == 0.2 and fusion["imputer"] == "gbm" and fusion["alpha"] == 1.0
    assert fusion["dp"]["delta"] == 1e-6 and fusion["dp"]["steps"] == "none (from epochs)"
    feature = in_effect(TabularSettings(method="feature-dp"))
    assert "beta" not in feature and "imputer" not in feature and "pad" in feature
    plain = in_effect(TabularSettings(method="non-private"))
    assert plain["dp"] == {"seed": 0} and "stats_epsilon" not in plain


def test_bars_only_where_they_say_something():
    assert not informative([("a", 0.0), ("b", 0.0)])  # two empty bars at 0 (NER before issue 53)
    assert not informative([("a", 0.5)]) and not informative([("a", 0.3), ("b", 0.3)])
    assert informative([("a", 0.3), ("b", 0.4)])
    assert bar_png(["a", "b"], [-0.2, 0.4], "difference").startswith(b"\x89PNG")  # labels either side fit


def test_the_guarantee_reads_in_plain_words_for_each_unit():
    from dpcare.privacy import PrivacyLedger, ProtectedUnit

    for unit, whose in ((ProtectedUnit.EXAMPLE, "one person's row"), (ProtectedUnit.PATIENT, "one patient's records"),
                        (ProtectedUnit.FEATURES, "one person's private columns (age)")):
        cols = {"protected_columns": ("age",), "public_columns": ("hr",)} if unit is ProtectedUnit.FEATURES else {}
        ledger = PrivacyLedger(1000, delta=1e-6, unit=unit, **cols)
        ledger.charge_sampled_gaussian("steps", 0.1, 1.0, 50)
        g = ledger.guarantee()
        reading = g.describe().splitlines()[1]
        assert reading.startswith("In plain words:") and whose in reading and "1 in 1,000,000" in reading
        assert f"factor of {__import__('math').exp(g.epsilon):.3g}" in reading
