"""Outputs: strict JSON (no NaN / Infinity), input tables whose header repeats a column name, epsilon plots."""

import json
import math

import numpy as np
import pytest

from dpcare.data.tables import read_table
from dpcare.exceptions import DataError
from dpcare.io import write_json, write_json_lines


def strict_loads(text: str):
    def refuse(name):
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def test_json_outputs_are_strict(tmp_path):
    obj = {"epsilon": math.inf, "auc": float("nan"), "rows": [1.0, -math.inf, np.float64("nan")], "ok": 0.5}
    path = write_json(tmp_path / "x.json", obj)
    assert strict_loads(path.read_text()) == {"epsilon": None, "auc": None, "rows": [1.0, None, None], "ok": 0.5}
    lines = write_json_lines(tmp_path / "x.jsonl", [obj, {"a": 1}]).read_text().splitlines()
    assert [strict_loads(line).get("epsilon") for line in lines] == [None, None]
    # red with json.dump(obj, ...) as before: Python writes NaN and Infinity (checked)


def test_a_repeated_column_name_is_an_error_not_age_dot_1(tmp_path):
    (tmp_path / "t.csv").write_text("age,sex,age\n1,f,2\n")
    with pytest.raises(DataError, match=r"t.csv names the columns \['age'\] more than once"):
        read_table(tmp_path / "t.csv")
    (tmp_path / "e.csv").write_text("")
    with pytest.raises(DataError, match="e.csv is empty"):
        read_table(tmp_path / "e.csv")


def test_epsilon_curves_label_only_the_swept_epsilons():
    """The log axis' own minor labels (2x10^0, 3x10^0, ...) overlapped the sweep's ticks in the published plots."""
    import pandas as pd

    from dpcare.io import epsilon_curves, new_figure

    table = pd.DataFrame({"mode": ["non-private", "dp-lora", "dp-lora", "dp-lora"],
                          "target_epsilon": [math.inf, 1.0, 3.0, 8.0], "f1": [0.14, 0.04, 0.04, 0.05],
                          "f1_sd": [0.0, 0.01, 0.01, 0.01]})
    fig, ax = new_figure((4, 3))
    epsilon_curves(ax, table, "mode", "f1")
    fig.canvas.draw()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "3", "8"]
    assert not any(t.get_text() for t in ax.get_xticklabels(minor=True))
