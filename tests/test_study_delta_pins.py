"""The studies keep the delta their published numbers were measured with, 1/n^1.1 (the default before issue 23),
pinned explicitly now that the default is min(1e-5, 0.01/n), and their noise_seed pinned to the seed (the
default is secret OS entropy); each check ends before any training."""

from types import SimpleNamespace

import pytest

from dpcare.privacy import default_delta


class Stop(Exception):
    """Raised by a spy once it has seen the settings (nothing is trained)."""


def old_default(n: int) -> float:
    return 1.0 / n ** 1.1  # written out: what the studies used before, not dpcare's own function


def test_the_demo_pins_the_readme_delta(monkeypatch, tmp_path):
    from dpcare.studies import demo

    seen = []

    def spy(df, schema, settings, progress=True):
        seen.append(settings)
        raise Stop

    monkeypatch.setattr(demo, "fit", spy)
    with pytest.raises(Stop):
        demo.run_demo(tmp_path / "demo", seeds=1, methods=("dp-sgd",), progress=False)
    (s,) = seen
    assert s.dp.delta == pytest.approx(old_default(7284), rel=1e-12)  # the README's 5.6e-5 (n = 7,284)
    assert f"{s.dp.delta:.2g}" == "5.6e-05" and s.dp.delta != default_delta(7284)
    assert s.dp.noise_seed == s.dp.seed == 0  # the noise pinned too (the default is secret OS entropy)


def test_fusiondp_pins_its_ledgers(monkeypatch):
    import torch

    import dpcare.studies.fusiondp as fd

    seen = []

    class Spy(fd.PrivacyLedger):
        def __init__(self, n, delta=None, *args, **kwargs):
            seen.append((n, delta))
            raise Stop

    monkeypatch.setattr(fd, "PrivacyLedger", Spy)
    x = torch.zeros(30, 3)
    split = {"x": x, "x_hyb": x, "x_pub": x, "y": torch.zeros(30)}
    bench = fd.FusionBenchmark.quick()
    with pytest.raises(Stop):
        fd.train_one("dp-sgd", 1.0, {"clip_norm": 1.0, "alpha": 1.0}, 0, {"train": split}, bench)
    with pytest.raises(Stop):
        fd.charged_runs(["dp-sgd"], {"dp-sgd": [1.0]},
                        [SimpleNamespace(tensors={"train": split, "val": {"y": torch.zeros(7)}})], bench, False)
    assert seen == [(30, pytest.approx(old_default(30))), (37, pytest.approx(old_default(37)))]


def test_fusiondp_text_pins_delta_to_the_training_patients(monkeypatch):
    import torch

    import dpcare.studies.fusiondp_text as ftb

    bench = ftb.TextFusionBenchmark.quick()
    assert bench.settings_for("fusiondp", 5.0, 0, patients=482).dp.delta == pytest.approx(old_default(482))
    assert bench.settings_for("fusiondp", 5.0, 0).dp.delta is None  # no count, no pin (the views' preparation)
    seen = []

    def spy(views, settings):
        seen.append(settings)
        raise Stop

    views = SimpleNamespace(tensors={"train": {"patient": torch.tensor([0, 0, 1, 2, 3, 4, 4])}, "test": {"x": None}})
    monkeypatch.setattr(ftb, "_views", lambda path: views)
    monkeypatch.setattr(ftb, "train_views", spy)
    with pytest.raises(Stop):
        ftb.train_text_one("dp-sgd", 5.0, 0, "views", bench)
    assert seen[0].dp.delta == pytest.approx(old_default(5))
    assert seen[0].dp.noise_seed == seen[0].dp.seed == 0


def test_dp2stage_pins_its_lm_runs_and_baselines():
    from dpcare.studies.dp2stage import Dp2StageBenchmark

    bench = Dp2StageBenchmark()
    assert bench.synth_settings("dp-standard", 1.0, rows=1500).dp.delta == pytest.approx(old_default(1500))
    assert bench.delta(1500) == pytest.approx(old_default(1500))  # the baselines' (run_one)
    given = bench.settings.replace(dp=bench.settings.dp.replace(delta=1e-6))
    pinned = Dp2StageBenchmark(settings=given)
    assert pinned.synth_settings("dp-standard", 1.0, rows=1500).dp.delta == pinned.delta(1500) == 1e-6
    assert bench.synth_settings("dp-standard", 1.0).dp.noise_seed == bench.seed  # the noise pinned to the seed


def test_tsf_pins_delta_to_each_training_set(monkeypatch):
    from dpcare.studies import tsf

    seen = []

    def spy(train, settings, standardizer, **kwargs):
        seen.append(settings)
        return None, {}

    monkeypatch.setattr(tsf, "train_dp_sgd", spy)
    train = SimpleNamespace(patients=lambda: list(range(40)))
    tsf.train_methods(train, None, ["dp-sgd eps=3"], tsf.published_settings(), None)
    assert tsf.published_settings().dp.delta is None  # the pin is per training set (the shadows' halves too)
    assert seen[0].dp.delta == pytest.approx(old_default(40)) and seen[0].dp.epsilon == 3.0
    assert tsf.published_settings().dp.noise_seed is None and seen[0].dp.noise_seed == seen[0].dp.seed


def test_diffusion_pins_delta_to_the_training_images(monkeypatch, tmp_path):
    import torch

    import dpcare.studies.diffusion as dif

    study = dif.DiffusionStudy.quick()
    assert study.method_settings("dp", 8.0, images=3000).dp.delta == pytest.approx(old_default(3000))
    seen = []

    def spy(views, settings, *args, **kwargs):
        seen.append(settings)
        raise Stop

    monkeypatch.setattr(dif, "train_unet", spy)
    data = SimpleNamespace(train=SimpleNamespace(classes=[0, 1], image_shape=(1, 8, 8)))
    with pytest.raises(Stop):
        dif._train_and_score(study, "dp eps=8", "dp", 8.0, tmp_path / "dp", data, {"y": torch.zeros(50)}, 0.5,
                             None, None, None, None, False)
    assert seen[0].dp.delta == pytest.approx(old_default(50))
    assert seen[0].dp.noise_seed == seen[0].dp.seed == study.seed


def test_clinical_nlp_keeps_the_papers_delta():
    from dpcare.studies.clinical_nlp import DELTA

    assert DELTA == 1e-5
