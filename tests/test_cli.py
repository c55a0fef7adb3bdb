"""The command line: help texts, accounting commands, data set export."""

import json
import re
import sys

import pytest

from typer.testing import CliRunner

from dpcare.cli import app
from dpcare.privacy.randomness import reproducible_noise_note

runner = CliRunner()


def test_help_explains_every_command():
    r = runner.invoke(app, ["--help"])
    assert r.exit_code == 0
    for cmd in ("train", "demo", "account", "datasets"):
        assert cmd in r.output
    r = runner.invoke(app, ["train", "--help"], env={"COLUMNS": "250"})  # wide: no help text wrapped
    assert "--spec" in r.output and "--epsilon" in r.output and "expected units per step" in r.output and "--clip" in r.output


def test_account_epsilon_both_accountants():
    r = runner.invoke(app, ["account", "epsilon", "--q", "0.04", "--sigma", "1.5", "--steps", "2250",
                            "--delta", "1e-5"])
    assert r.exit_code == 0, r.output
    eps = dict(re.findall(r"(pld|rdp): epsilon = ([\d.]+)", r.output))
    assert abs(float(eps["rdp"]) - 7.33) < 0.01 and abs(float(eps["pld"]) - 6.77) < 0.015


def test_account_sigma_meets_target():
    r = runner.invoke(app, ["account", "sigma", "--q", "0.04", "--steps", "2250", "--epsilon", "3",
                            "--delta", "1e-5", "--accountant", "pld"])
    assert r.exit_code == 0, r.output
    sigma = float(re.search(r"sigma = ([\d.]+)", r.output).group(1))
    check = runner.invoke(app, ["account", "epsilon", "--q", "0.04", "--sigma", str(sigma), "--steps", "2250",
                                "--delta", "1e-5", "--accountant", "pld"])
    assert float(re.search(r"epsilon = ([\d.]+)", check.output).group(1)) <= 3.0


def test_account_bad_inputs_are_named():
    r = runner.invoke(app, ["account", "epsilon", "--q", "1.5", "--sigma", "1", "--steps", "10", "--delta", "1e-5"])
    assert r.exit_code == 2 and "sampling rate" in r.output
    r = runner.invoke(app, ["account", "sigma", "--q", "0.1", "--steps", "10", "--epsilon", "-1", "--delta", "1e-5"])
    assert r.exit_code == 2 and "epsilon" in r.output
    r = runner.invoke(app, ["account", "epsilon", "--q", "0.1", "--sigma", "1", "--steps", "10", "--delta", "1e-5",
                            "--accountant", "moments"])
    assert r.exit_code == 2 and "accountant" in r.output


def test_datasets_list_and_export(tmp_path):
    r = runner.invoke(app, ["datasets"])
    assert r.exit_code == 0 and "support2" in r.output and "GPL-3" in r.output
    r = runner.invoke(app, ["datasets", "--export", "support2", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "support2.csv").exists() and (tmp_path / "support2.yaml").exists()
    r = runner.invoke(app, ["datasets", "--export", "mimic"])
    assert r.exit_code == 2 and "mimic" in r.output


def test_benchmark_fusiondp_bad_specs_are_named(tmp_path):
    r = runner.invoke(app, ["benchmark", "fusiondp", "--quick", "--private", "age,shoe_size", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "shoe_size" in r.output
    r = runner.invoke(app, ["benchmark", "fusiondp", "--quick", "--data", str(tmp_path / "x.csv"), "--out",
                            str(tmp_path)])
    assert r.exit_code == 2 and "--spec" in r.output
    r = runner.invoke(app, ["benchmark", "fusiondp", "--quick", "--imputer", "tabpfn", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "checkpoint" in r.output


@pytest.mark.slow
def test_benchmark_fusiondp_text_quick_end_to_end(tmp_path):
    """The CI-size text FusionDP run: real masker (spaCy) and imputer (SmolLM2-135M), nine methods."""
    r = runner.invoke(app, ["benchmark", "fusiondp-text", "--quick", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    table = (tmp_path / "table.md").read_text()
    for method in ("sgd-org", "sgd-hybrid", "sgd-pub", "dp-sgd", "naive-fusion", "naive-fusion-pub", "feature-dp",
                   "calibrated-fusion", "fusiondp"):
        assert f"| {method} |" in table
    info = json.loads((tmp_path / "data" / "data.json").read_text())
    assert info["imputation"]["seconds_per_note"] > 0 and info["imputation"]["slots"] > 0
    assert any(row["type"] == "ALL" and row["side"] == "gold" for row in info["masker"])


def test_benchmark_fusiondp_text_bad_input_is_named(tmp_path):
    r = runner.invoke(app, ["benchmark", "fusiondp-text", "--notes", str(tmp_path / "none.jsonl"),
                            "--out", str(tmp_path)])
    assert r.exit_code != 0 and "none.jsonl" in r.output
    r = runner.invoke(app, ["benchmark", "fusiondp-text", "--epsilons", "1,5", "--main-epsilon", "3",
                            "--out", str(tmp_path)])
    assert r.exit_code == 2 and "main_epsilon" in r.output
    r = runner.invoke(app, ["benchmark", "fusiondp-text", "--lm", str(tmp_path / "no-model"), "--out", str(tmp_path)])
    assert r.exit_code == 2 and "unknown model path" in r.output


@pytest.mark.slow
def test_benchmark_clinical_nlp_quick_end_to_end(tmp_path):
    """The CI-size clinical NLP run: SmolLM2 cut to one block, MiniLM, every mode, canaries; and its report."""
    from dpcare.report.collect import collect

    r = runner.invoke(app, ["benchmark", "clinical-nlp", "--quick", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    table = (tmp_path / "table.md").read_text()
    for part in ("| base |", "| non-private |", "| dp-full |", "| dp-lora |", "| dp-prefix |", "Table 2",
                 "Token-classification", "One-run audit"):
        assert part in table, part
    run = collect(tmp_path)
    assert run.kind == "dpcare benchmark clinical-nlp" and run.attacks
    assert any(p.private and p.guarantee["unit"] == "patient" for p in run.privacy)


def test_benchmark_clinical_nlp_bad_input_is_named(tmp_path):
    r = runner.invoke(app, ["benchmark", "clinical-nlp", "--notes", str(tmp_path / "none.jsonl"),
                            "--out", str(tmp_path)])
    assert r.exit_code != 0 and "none.jsonl" in r.output
    (tmp_path / "empty.jsonl").write_text("")
    r = runner.invoke(app, ["benchmark", "clinical-nlp", "--notes", str(tmp_path / "empty.jsonl"),
                            "--out", str(tmp_path / "out")])
    assert r.exit_code == 2 and "empty" in r.output
    r = runner.invoke(app, ["benchmark", "clinical-nlp", "--epsilons", "1,8", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "main_epsilon" in r.output
    r = runner.invoke(app, ["benchmark", "clinical-nlp", "--model", str(tmp_path / "no-model"), "--out",
                            str(tmp_path)])
    assert r.exit_code == 2 and "unknown model path" in r.output
    r = runner.invoke(app, ["benchmark", "clinical-nlp", "--shadows", "3", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "even" in r.output


def test_third_party_deprecation_warnings_stay_out_of_the_users_output():
    """transformers' FutureWarning (and, in transformers 5, its logged notice that past_key_values is now `cache`)
    appeared in every `synth fit` and text run; dpcare's own warnings and other transformers notices stay."""
    import subprocess
    import sys

    code = ("import warnings, dpcare.cli as c; c.quiet_third_party_warnings(); "
            "warnings.warn('past_key_values is deprecated', FutureWarning); "
            "warnings.warn('old api', DeprecationWarning); warnings.warn('the batch covers every unit'); "
            "from transformers.utils import generic, logging; logging.get_logger(generic.__name__).warning("
            "'`past_key_values`/`cache_params` are deprecated. Use `cache` instead.'); "
            "logging.get_logger(generic.__name__).warning('another transformers notice')")
    r = subprocess.run([sys.executable, "-W", "default", "-c", code], capture_output=True, text=True, check=True)
    assert "past_key_values" not in r.stderr and "old api" not in r.stderr
    assert "another transformers notice" in r.stderr  # only the one notice is dropped
    assert "the batch covers every unit" in r.stderr


def test_the_command_line_says_each_warning_once_without_dpcares_source_lines():
    """A `synth fit --noise-seed 0` printed the pinned-noise warning twice (once per copy of the settings; the
    filters' bookkeeping resets between them), each time with the line of settings.py that raised it."""
    import subprocess
    import sys

    code = ("import warnings, dpcare.cli as c; c.show_warnings_once(); from dpcare.settings import DPSettings; "
            "d = DPSettings(noise_seed=0); "
            "with_filters = warnings.catch_warnings(); with_filters.__enter__(); with_filters.__exit__(); "
            "DPSettings(noise_seed=0); DPSettings(noise_seed=3)")
    r = subprocess.run([sys.executable, "-W", "default", "-c", code], capture_output=True, text=True, check=True)
    lines = r.stderr.strip().splitlines()
    assert lines == [f"warning: {reproducible_noise_note(0)}", f"warning: {reproducible_noise_note(3)}"], r.stderr


def test_a_warning_on_a_closed_stderr_does_not_stop_the_command():
    """warnings' own printer ignores a stderr that is gone (a closed pipe); so must the command line's."""
    import io
    import warnings

    import dpcare.cli as c

    class Gone(io.StringIO):
        def write(self, text):
            raise BrokenPipeError("stderr closed")

    saved = warnings.showwarning
    try:
        c.show_warnings_once()
        warnings.showwarning("a pinned noise seed", UserWarning, "x.py", 1, file=Gone())  # must not raise
        kept = io.StringIO()
        warnings.showwarning("a weak delta", UserWarning, "x.py", 1, file=kept)
        warnings.showwarning("a weak delta", UserWarning, "y.py", 2, file=kept)
        assert kept.getvalue() == "warning: a weak delta\n"  # to the file given, once
    finally:
        warnings.showwarning = saved


def test_the_console_script_re_executes_before_importing_the_command_line():
    """The re-execution with the fast settings comes first: imports done before it are thrown away (it once
    doubled every command's start-up, 7 s instead of 3.9 s for ``dpcare --help``; benchmarks/bench_startup.py)."""
    import subprocess

    code = ("import sys, dpcare.runtime as r\n"
            "seen = []\n"
            "r.ensure_fast_process = lambda: seen.append('dpcare.cli' in sys.modules)\n"
            "import dpcare.console\n"
            "sys.argv = ['dpcare', '--help']\n"
            "try:\n    dpcare.console.main()\nexcept SystemExit:\n    pass\n"
            "print('SEEN', seen)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "Usage:" in r.stdout
    assert "SEEN [False" in r.stdout, r.stdout[-300:]  # dpcare.cli was not yet imported at the first call
