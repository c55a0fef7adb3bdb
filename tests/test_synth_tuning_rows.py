"""benchmarks/synth_tuning_rows.py: the rows a synth default is tuned on are read by no release cell (the release
tables' samples) and by no published study cell (the dp2stage study's seed-0 test part), so no default is tuned
on a reported number."""

import pytest

from helpers import benchmark_script


@pytest.fixture(scope="module")
def module():
    return benchmark_script("synth_tuning_rows")


def test_tuning_rows_avoid_release_samples_and_the_study_test_rows(module):
    import pandas as pd

    from dpcare.data import load_dataset
    from dpcare.data.splits import split_table
    from dpcare.studies.dp2stage import COLUMNS

    train, validation, _ = module.tuning_rows("adult", 300, 200)
    df, _ = load_dataset("adult")
    table = df[COLUMNS["adult"]]
    picked = set(train.index) | set(validation.index)
    assert len(picked) == 500 and not set(train.index) & set(validation.index)
    for rows in (1000, 2000, 3000, 5000):  # what bench_release_tables --rows keeps
        assert not picked & set(table.sample(rows, random_state=0).index)
    test = split_table(table.assign(_row=table.index), {"train": 0.7, "test": 0.3}, seed=0)["test"]
    assert not picked & set(test["_row"])
    pd.testing.assert_frame_equal(table.loc[train.index], train)
