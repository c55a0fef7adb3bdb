"""The run-folder contract: one run per folder, checked before any work, resumable, tied by run id."""

from __future__ import annotations

import json

import pytest

from dpcare.exceptions import DataError, SettingsError
from dpcare.runs import MANIFEST, Manifest, RunFolder, abandon_unwritten, attach_attack, read_attacks, read_manifest
from dpcare.runs.folder import PARTIAL, staging_path


def _finish(run: RunFolder, name: str = "m") -> None:
    run.write_json("metrics.json", {"x": 1})
    m = Manifest(metrics=[{"model": name, "test AUROC": 0.7}], headline=["test AUROC"])
    m.add_model(name, None, note="non-private")
    run.finish(m)


def test_a_finished_run_is_in_place_with_its_manifest(tmp_path):
    out = tmp_path / "r"
    run = RunFolder(out, "tabular", settings={"a": 1}, command="dpcare train")
    assert not out.exists() and not run.staging.exists()  # made when the run first writes
    run.write_json("first.json", {})
    assert not out.exists() and run.staging.exists()  # nothing in place until the run is done
    _finish(run)
    m = read_manifest(out)
    assert (m.kind, m.command, m.settings, m.run_id) == ("tabular", "dpcare train", {"a": 1}, run.run_id)
    assert m.models[0]["note"] == "non-private" and (out / "metrics.json").exists()
    assert not staging_path(out).exists() and not (out / PARTIAL).exists()
    assert json.loads((out / MANIFEST).read_text())["format"] == "dpcare-run/1"


def test_an_output_that_is_a_file_is_refused(tmp_path):
    f = tmp_path / "out.csv"
    f.write_text("x")
    with pytest.raises(SettingsError, match="--out .*out.csv is a file, not a folder"):
        RunFolder(f, "tabular")


def test_a_non_empty_folder_is_refused_and_replaced_whole_with_force(tmp_path):
    out = tmp_path / "r"
    _finish(RunFolder(out, "tabular"))
    (out / "attacks").mkdir()
    (out / "attacks" / "loss.json").write_text("{}")  # an old run's audit
    with pytest.raises(SettingsError, match="is not empty .*--force"):
        RunFolder(out, "tabular")
    run = RunFolder(out, "tabular", settings={"b": 2}, force=True)
    assert (out / "attacks" / "loss.json").exists()  # the old run stays until the new one is done
    _finish(run)
    assert not (out / "attacks").exists() and read_manifest(out).settings == {"b": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["r"]


def test_an_unfinished_run_resumes_with_its_run_id_and_other_settings_are_refused(tmp_path):
    out = tmp_path / "r"
    first = RunFolder(out, "tabular", settings={"epochs": 3})
    first.path("checkpoints/x").write_text("state")
    again = RunFolder(out, "tabular", settings={"epochs": 3})
    assert again.resumed and again.run_id == first.run_id
    with pytest.raises(SettingsError, match="unfinished tabular run with other settings"):
        RunFolder(out, "tabular", settings={"epochs": 4})
    fresh = RunFolder(out, "tabular", settings={"epochs": 4}, force=True)
    assert not fresh.resumed and fresh.run_id != first.run_id


def test_finish_deletes_the_checkpoints(tmp_path):
    """Checkpoints hold the noise generators' state: never released beside the model."""
    run = RunFolder(tmp_path / "r", "tabular")
    run.path("checkpoints/checkpoint.pt").write_text("noise state")
    _finish(run)
    assert not (tmp_path / "r" / "checkpoints").exists()


def test_attacks_are_tied_to_their_run(tmp_path):
    out = tmp_path / "r"
    run = RunFolder(out, "tabular")
    entry = run.attack("loss", {"title": "LOSS attack", "rows": [{"AUC": 0.5}]})
    m = Manifest(attacks=[entry])
    run.finish(m)
    manifest = read_manifest(out)
    assert read_attacks(out, manifest)[0]["rows"] == [{"AUC": 0.5}]
    attach_attack(out, "lira", {"title": "LiRA", "rows": []})
    manifest = read_manifest(out)
    assert [a["name"] for a in manifest.attacks] == ["LOSS attack", "LiRA"]
    (out / "attacks" / "loss.json").write_text(json.dumps({"run_id": "another-run", "rows": []}))
    with pytest.raises(DataError, match="belongs to run 'another-run'"):
        read_attacks(out, manifest)


def test_read_manifest_names_what_is_wrong(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_manifest(tmp_path / "nope")
    RunFolder(tmp_path / "r", "tabular").write_json("x.json", {})
    (tmp_path / "r").mkdir()
    with pytest.raises(DataError, match="no run.json.*unfinished run is in"):
        read_manifest(tmp_path / "r")
    (tmp_path / "r" / MANIFEST).write_text('{"format": "other"}')
    with pytest.raises(DataError, match="not a dpcare run manifest"):
        read_manifest(tmp_path / "r")


def test_a_refused_run_leaves_nothing_and_a_started_one_stays_resumable(tmp_path):
    out = tmp_path / "new" / "deeper" / "r"
    refused = RunFolder(out, "tabular", {"a": 1})
    refused.checkpoint_dir  # made its staging folder (partial.json), then refused before writing anything
    abandon_unwritten()
    assert not (tmp_path / "new").exists()  # the folders it made are gone too
    started = RunFolder(out, "tabular", {"a": 1})
    started.path("checkpoints/checkpoint.pt").write_text("state")
    abandon_unwritten()
    assert RunFolder(out, "tabular", {"a": 1}).resumed  # checkpoints kept: a rerun resumes
