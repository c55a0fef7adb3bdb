"""The weight alpha of the private gradient (g = g_pub + alpha g_priv) by method: Label-DP has its own default
(chosen on validation rows, docs/tabular.md "alpha"), the other methods keep 1, and an explicit alpha (Python,
DPClassifier or --alpha) overrides it. Each run records the alpha it trained with in its info."""

import pytest
import yaml
from helpers import SPEC, toy_table
from typer.testing import CliRunner

from dpcare.cli import app
from dpcare.data import TableSchema
from dpcare.estimators import DPClassifier
from dpcare.exceptions import SettingsError
from dpcare.runs import read_manifest
from dpcare.settings import DPSettings
from dpcare.tabular import TabularSettings, fit, recipe
from dpcare.tabular.settings import METHOD_NAMES, default_alpha

SCHEMA = TableSchema.from_dict(SPEC)
TINY = {"hidden": 8}
TINY_DP = {"steps": 2, "batch_size": 32, "accountant": "rdp"}

#: the chosen default (docs/tabular.md): a change of it must be a deliberate change of this test too
LABEL_DP_ALPHA = 20.0


def test_label_dp_has_its_own_default_and_the_others_keep_one():
    assert TabularSettings().alpha is None  # None = "the method's default"
    assert TabularSettings(method="label-dp").effective_alpha == LABEL_DP_ALPHA
    assert default_alpha("label-dp") == LABEL_DP_ALPHA
    for method in METHOD_NAMES:
        if method != "label-dp":
            assert TabularSettings(method=method).effective_alpha == 1.0, method


def test_an_explicit_alpha_overrides_the_default():
    assert TabularSettings(method="label-dp", alpha=1.0).effective_alpha == 1.0
    assert TabularSettings(method="label-dp", alpha=0.0).effective_alpha == 0.0
    assert TabularSettings(method="feature-dp", alpha=3.0).effective_alpha == 3.0
    with pytest.raises(SettingsError, match="alpha"):
        TabularSettings(method="label-dp", alpha=-1.0)


@pytest.fixture
def trained_alphas(monkeypatch):
    """The alpha each Trainer the recipe builds is given (not what the settings say: what trains)."""
    seen = []

    class Spy(recipe.Trainer):
        def __init__(self, model, objective, config, **kw):
            seen.append(config.alpha)
            super().__init__(model, objective, config, **kw)

    monkeypatch.setattr(recipe, "Trainer", Spy)
    return seen


@pytest.mark.parametrize("method,alpha,expected", [("label-dp", None, LABEL_DP_ALPHA), ("label-dp", 1.0, 1.0),
                                                   ("label-dp", 20.0, 20.0), ("dp-sgd", None, 1.0)])
@pytest.mark.slow  # end to end
def test_the_run_trains_with_the_resolved_alpha(trained_alphas, method, alpha, expected):
    s = TabularSettings(method=method, alpha=alpha, dp=DPSettings(epsilon=2.0, **TINY_DP), **TINY)
    model = fit(toy_table(200), SCHEMA, s, progress=False)
    assert trained_alphas[0] == expected
    assert model.info["alpha"] == expected


@pytest.mark.slow  # end to end
def test_dpclassifier_default_and_override(trained_alphas):
    df = toy_table(200)
    X, y = df.drop(columns="death"), df["death"]
    kw = {"schema": SCHEMA, "method": "label-dp", "epsilon": 2.0, "batch_size": 32, "steps": 2, "hidden": 8,
          "accountant": "rdp", "progress": False}
    assert DPClassifier(**kw).fit(X, y).result_.info["alpha"] == LABEL_DP_ALPHA
    assert DPClassifier(**kw, alpha=1.0).fit(X, y).result_.info["alpha"] == 1.0
    assert trained_alphas[:2] == [LABEL_DP_ALPHA, 1.0]


@pytest.mark.slow  # end to end
def test_cli_default_and_alpha_flag(tmp_path, trained_alphas):
    data, spec = tmp_path / "t.csv", tmp_path / "spec.yaml"
    toy_table(200).to_csv(data, index=False)
    spec.write_text(yaml.safe_dump(SPEC))
    runner = CliRunner()
    help_text = runner.invoke(app, ["train", "--help"], terminal_width=200).output
    assert f"label-dp {LABEL_DP_ALPHA:g}" in " ".join(help_text.replace("\u2502", " ").split())  # rich's box
    for extra, expected in (([], LABEL_DP_ALPHA), (["--alpha", "2"], 2.0)):
        out = tmp_path / f"run{expected:g}"
        r = runner.invoke(app, ["train", str(data), "--spec", str(spec), "--out", str(out), "--method", "label-dp",
                                "--epsilon", "2", "--steps", "2", "--batch-size", "32", "--hidden", "8", *extra])
        assert r.exit_code == 0, r.output
        assert read_manifest(out).settings["info"]["alpha"] == expected
    assert trained_alphas == [LABEL_DP_ALPHA, 2.0]
