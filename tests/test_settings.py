"""One declaration of every setting (dpcare.settings) and the CLI options derived from it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pytest
import typer
from typer.testing import CliRunner

from dpcare.cli.common import ErrorReportingGroup
from dpcare.cli.options import settings_options
from dpcare.exceptions import PrivacyParameterError, SettingsError
from dpcare.settings import DPSettings, Rule, check, from_dict, rules, setting, to_dict


@pytest.mark.parametrize("changes, message", [
    ({"epsilon": -1.0}, "epsilon must be a finite number in (0, 100], got epsilon = -1.0"),
    ({"epsilon": float("inf")}, "epsilon must be a finite number in (0, 100], got epsilon = inf"),
    ({"delta": 1.0}, "delta must be a finite number in (0, 1), or None (the default for n units), got delta = 1.0"),
    ({"accountant": "moments"}, "accountant must be one of ['pld', 'rdp'], got accountant = 'moments'"),
    ({"clip_norm": 0}, "clip_norm must be a finite number > 0, got clip_norm = 0"),
    ({"adaptive_clip": 1.5}, ("adaptive_clip must be a finite number in (0, 1), or None (a fixed C), got "
                             "adaptive_clip = 1.5")),
    ({"batch_size": 2.5}, "batch_size must be an integer >= 1, got batch_size = 2.5"),
    ({"batch_size": True}, "batch_size must be an integer >= 1, got batch_size = True"),
    ({"epochs": float("nan")}, "epochs must be a finite number > 0, got epochs = nan"),
    ({"steps": 0}, "steps must be an integer >= 1, or None (from epochs), got steps = 0"),
    ({"unit": "visit"}, "unit must be one of ['example', 'patient'], got unit = 'visit'"),
])
def test_every_dp_setting_is_checked_with_a_message_naming_it(changes, message):
    with pytest.raises(SettingsError if "epsilon" not in changes and "delta" not in changes
                       else PrivacyParameterError) as err:
        DPSettings().replace(**changes)
    assert str(err.value) == message


def test_privacy_parameters_raise_privacy_parameter_errors():
    with pytest.raises(PrivacyParameterError):
        DPSettings(epsilon=0.0)
    with pytest.raises(SettingsError):
        DPSettings(batch_size=0)


def test_dp_settings_round_trip_through_a_dict():
    s = DPSettings(epsilon=3.0, delta=1e-6, adaptive_clip=0.5, unit="patient", steps=40)
    assert DPSettings.from_dict(s.to_dict()) == s
    with pytest.raises(SettingsError, match=r"unknown settings \['epsilonn'\] for DPSettings; known: "):
        DPSettings.from_dict({"epsilonn": 1})


@dataclass(frozen=True)
class _Recipe:
    hidden: int = setting(16, kind="integer", low=1, help="hidden width")
    name: str = "x"  # not a setting: no option
    dp: DPSettings = field(default_factory=lambda: DPSettings(batch_size=32))

    def __post_init__(self):
        check(self)


def test_nested_settings_are_checked_and_rebuilt():
    assert set(rules(_Recipe)) == {"hidden"}
    with pytest.raises(SettingsError, match="hidden must be an integer >= 1, got hidden = 0"):
        _Recipe(hidden=0)
    r = from_dict(_Recipe, {"hidden": 4, "dp": {"epsilon": 2.0}})
    assert r.dp == DPSettings(epsilon=2.0) and r.hidden == 4
    assert to_dict(r)["dp"]["epsilon"] == 2.0


def test_rule_words():
    assert Rule(low=0, high=1).allowed() == "a finite number in [0, 1]"
    assert Rule(kind="integer", low=0).allowed() == "an integer >= 0"
    assert not Rule(kind="integer").accepts(1.0) and Rule(kind="integer").accepts(3)


# --------------------------------------------------------------------------- derived CLI options
def _app(seen: list) -> typer.Typer:
    app = typer.Typer(cls=ErrorReportingGroup)

    @app.command()
    @settings_options("recipe", _Recipe(), skip=("dp.unit",))
    def fit(data: str = typer.Argument(...), recipe: _Recipe = None) -> None:
        seen.append((data, recipe))

    @app.command()
    def other() -> None:
        pass

    return app


def test_cli_options_come_from_the_declarations():
    seen: list = []
    r = CliRunner().invoke(_app(seen), ["fit", "d.csv", "--epsilon", "3", "--clip", "0.5", "--hidden", "8",
                                        "--adaptive-clip", "0.5"])
    assert r.exit_code == 0, r.output
    data, recipe = seen[0]
    assert data == "d.csv" and recipe.hidden == 8
    assert recipe.dp == DPSettings(epsilon=3.0, clip_norm=0.5, adaptive_clip=0.5, batch_size=32)
    help_text = CliRunner().invoke(_app([]), ["fit", "--help"]).output
    for flag in ("--epsilon", "--delta", "--accountant", "--clip", "--adaptive-clip", "--batch-size", "--epochs",
                 "--steps", "--seed", "--hidden"):
        assert flag in help_text
    assert "--unit" not in help_text  # skipped
    assert "32" in help_text  # the recipe's default batch, not DPSettings'


def test_the_help_says_what_leaving_an_option_off_means():
    """A setting whose default is None says in its help what None means (the help shows no default value);
    written so that rich does not read it as markup and drop it."""
    help_text = CliRunner().invoke(_app([]), ["fit", "--help"], env={"COLUMNS": "400"}).output
    assert "left off: from epochs" in help_text and "left off: a fixed C" in help_text


def test_finetune_lr_help_is_built_from_the_rate_tables():
    from dpcare.cli import app
    from dpcare.text.lm.settings import FinetuneSettings, starting_lr

    help_text = CliRunner().invoke(app, ["text", "finetune", "--help"], env={"COLUMNS": "400"}).output
    tagger, summary, ner = (starting_lr("dp-lora", task, tagger) for task, tagger in
                            (("ner", True), ("summarisation", False), ("ner", False)))
    assert f"DP-LoRA: {tagger:g} for a tagger, {summary:g} for summarisation, {ner:g} for generative NER" in help_text
    assert FinetuneSettings(lr=3e-4).resolved_lr == 3e-4
    assert FinetuneSettings(task="summarisation", model="smollm2").resolved_lr == summary


def test_a_bad_option_names_the_flag_before_the_command_runs():
    seen: list = []
    r = CliRunner().invoke(_app(seen), ["fit", "d.csv", "--epsilon", "-1"])
    assert r.exit_code == 2 and seen == []
    assert r.stderr.strip() == "error: --epsilon must be a finite number in (0, 100], got --epsilon = -1.0"
    r = CliRunner().invoke(_app(seen), ["fit", "d.csv", "--accountant", "moments"])
    assert "--accountant must be one of ['pld', 'rdp']" in r.stderr


def test_defaults_that_depend_on_a_setting_fill_only_the_options_left_off():
    """A run's own defaults (here: a wide model trains in smaller batches) replace the declared ones only where the
    command line said nothing; a value given, even one equal to the declared default, is kept."""
    seen: list = []
    app = typer.Typer(cls=ErrorReportingGroup)

    def own(recipe: _Recipe) -> _Recipe:
        return _Recipe(hidden=recipe.hidden, dp=recipe.dp.replace(batch_size=8, epochs=2.0)) if recipe.hidden > 16 \
            else _Recipe()

    @app.command()
    @settings_options("recipe", _Recipe(), skip=("dp.unit",), defaults=own)
    def fit(recipe: _Recipe = None) -> None:
        seen.append(recipe)

    @app.command()
    @settings_options("recipe", _Recipe(), skip=("dp.unit",), defaults=own)
    def inspect(ctx: typer.Context, recipe: _Recipe = None) -> None:  # a command with its own context keeps it
        seen.append((ctx.info_name, recipe))

    for args in (["--hidden", "32"], ["--hidden", "32", "--batch-size", "32"], ["--hidden", "4"]):
        r = CliRunner().invoke(app, ["fit", *args])
        assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["inspect", "--hidden", "32", "--epochs", "3"])
    assert r.exit_code == 0, r.output
    wide, given, narrow, (name, own_context) = seen
    assert (wide.dp.batch_size, wide.dp.epochs, wide.hidden) == (8, 2.0, 32)
    assert (given.dp.batch_size, given.dp.epochs) == (32, 2.0)  # 32 is the declared default, but it was given
    assert narrow.dp == _Recipe().dp and narrow.hidden == 4
    assert name == "inspect" and (own_context.dp.batch_size, own_context.dp.epochs) == (8, 3.0)


def test_settings_options_refuse_two_settings_on_one_flag():
    @dataclass(frozen=True)
    class Clash:
        clip: float = setting(1.0, low=0)
        dp: DPSettings = field(default_factory=DPSettings)

    with pytest.raises(TypeError, match="--clip"):
        settings_options("s", Clash())


def test_dataclass_fields_carry_the_rule():
    f = {f.name: f for f in dataclasses.fields(DPSettings)}
    assert f["clip_norm"].metadata["rule"].cli == "clip"


def test_a_meaninglessly_large_epsilon_is_refused_up_front():
    """--epsilon 1e6 once trained for a minute of calibration and reported epsilon 943.8 (sigma floored)."""
    with pytest.raises(PrivacyParameterError, match=r"epsilon must be a finite number in \(0, 100\], got epsilon = "
                                                    r"1000000.0"):
        DPSettings(epsilon=1e6)


def test_a_target_met_at_the_noise_floor_is_said_and_fast():
    import time

    from dpcare.privacy import calibrate_noise_multiplier
    from dpcare.privacy.calibration import MIN_SIGMA

    start = time.perf_counter()
    with pytest.warns(UserWarning, match="smallest noise multiplier considered") as caught:
        sigma = calibrate_noise_multiplier(1.0, 1, 99.0, 1e-5)
    assert [w.filename for w in caught] == [__file__]  # the user's call, not a line of dpcare
    assert sigma == MIN_SIGMA and time.perf_counter() - start < 5
