"""benchmarks/bench_synth_marginal.py scores MST and AIM on exactly the rows ``synth fit`` trains and holds out, so
its table stands beside the release table's language-model rows."""

import pytest

from helpers import benchmark_script


@pytest.fixture(scope="module")
def module():
    return benchmark_script("bench_synth_marginal")


def test_the_rows_are_the_synth_fit_split_of_the_release_sample(module):
    import pandas as pd

    from dpcare.data import load_dataset, load_table
    from dpcare.studies.dp2stage import COLUMNS
    from dpcare.synth.synthesizer import holdout_split

    data, spec = module.release_sample("support2", 1000)
    train, test = module.split_rows(data, 0.1, seed=2)
    df, _ = load_dataset("support2")
    sample = load_table(df[COLUMNS["support2"]].sample(1000, random_state=0).reset_index(drop=True), spec)
    tr, te = holdout_split(1000, 0.1, 2)  # what `synth fit --holdout 0.1 --seed 2` holds out
    pd.testing.assert_frame_equal(train, sample.iloc[tr].reset_index(drop=True))
    pd.testing.assert_frame_equal(test, sample.iloc[te].reset_index(drop=True))
    assert (len(train), len(test)) == (900, 100) and [c.name for c in spec.columns] == list(COLUMNS["support2"])


def test_either_release_rows_or_tuning_files(module, capsys):
    for argv in ([], ["--rows", "100", "--train", "t.csv", "--validation", "v.csv"], ["--train", "t.csv"]):
        with pytest.raises(SystemExit):
            module.main(argv)
        assert "give either --rows or both --train and --validation" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        module.main(["--rows", "100", "--holdout", "0"])
    assert "--holdout must be in (0, 1)" in capsys.readouterr().err
