"""Devices and precision: an absent device is refused before any work, and bf16 autocast keeps the
per-unit norms, the clipping and the noisy sum in fp32 (clipped sums within a stated tolerance of fp32)."""

import pytest
import torch
from grad_reference import reference

from dpcare.engine import TrainConfig, Trainer
from dpcare.engine.devices import autocast, resolve_device
from dpcare.engine.fast_clipping import clipped_sum_fast
from dpcare.engine.functorch_backend import clipped_sum_functorch
from dpcare.exceptions import SettingsError
from dpcare.methods import DPSGD
from dpcare.models import TabularMLP, TinyTransformer
from dpcare.settings import ComputeSettings, DPSettings
from dpcare.tabular.settings import TabularSettings

BACKENDS = {"fast": clipped_sum_fast, "functorch": clipped_sum_functorch}
#: bf16 keeps 8 bits of mantissa: forward activations and output gradients carry ~0.4% relative error each
BF16_RTOL = 0.05


def batch(b=24, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(b, d, generator=g), "y": (torch.rand(b, generator=g) > 0.5).float()}


def test_auto_is_the_cpu_without_cuda_and_an_absent_gpu_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    with pytest.raises(SettingsError, match="'cuda' was asked for but this machine has no CUDA device"):
        resolve_device("cuda")
    with pytest.raises(SettingsError, match="device must be auto, cpu, cuda, cuda:N or mps, got device = 'gpu'"):
        ComputeSettings(device="gpu")
    with pytest.raises(SettingsError, match="precision must be one of"):
        ComputeSettings(precision="fp16")


def test_an_absent_device_is_refused_by_the_trainer_before_training(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SettingsError, match="no CUDA device"):
        Trainer(TabularMLP(8, hidden=8), DPSGD(), TrainConfig(compute=ComputeSettings(device="cuda"),
                                                              noise_multiplier=1.0))


def test_the_command_line_refuses_an_absent_device_before_reading_the_data(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from dpcare.cli import app

    missing = tmp_path / "never-read.csv"  # the device check comes first: the data file is not even opened
    result = CliRunner().invoke(app, ["train", str(missing), "--spec", str(missing), "--device", "cuda:7",
                                      "--out", str(tmp_path / "run")])
    if torch.cuda.device_count() > 7:
        pytest.skip("this machine has 8 GPUs")
    assert result.exit_code == 2 and "cuda:7" in result.output, result.output
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("clip", [0.05, 100.0])
def test_bf16_clipped_sums_are_fp32_and_within_tolerance_of_fp32(backend, clip):
    """The fast backend computes forward and backward in bf16; the torch.func backend stays in fp32 (its
    vmap cannot differentiate LayerNorm under autocast): both return fp32 sums close to fp32."""
    torch.manual_seed(0)
    model = TabularMLP(8, hidden=32, dropout=0.0)
    data = batch()
    loss = DPSGD().private_loss
    params = dict(model.named_parameters())
    want, want_norms = BACKENDS[backend](model, loss, data, params, clip)
    with autocast(torch.device("cpu"), "bf16"):
        got, norms = BACKENDS[backend](model, loss, data, params, clip)
    assert norms.dtype == torch.float32 and all(g.dtype == torch.float32 for g in got.values())
    torch.testing.assert_close(norms, want_norms, rtol=BF16_RTOL, atol=1e-4)
    for name in want:
        scale = want[name].abs().max()
        torch.testing.assert_close(got[name], want[name], rtol=BF16_RTOL, atol=BF16_RTOL * float(scale))


def test_bf16_per_unit_clipped_gradients_never_exceed_c():
    """The sensitivity bound: under bf16 each unit's clipped contribution still has norm <= C (fp32 norms)."""
    torch.manual_seed(1)
    model = TinyTransformer(vocab=30, max_len=6, dim=16, depth=1, heads=2)
    ids = torch.randint(0, 30, (5, 6), generator=torch.Generator().manual_seed(2))
    labels = torch.tensor([0, 1, 1, 0, 1])

    def loss(m, b):
        return torch.nn.functional.cross_entropy(m(b["ids"]).float(), b["y"], reduction="none")

    clip = 0.01
    for i in range(5):
        one = {"ids": ids[i : i + 1], "y": labels[i : i + 1]}
        with autocast(torch.device("cpu"), "bf16"):
            got, _ = clipped_sum_fast(model, loss, one, dict(model.named_parameters()), clip)
        norm = torch.sqrt(sum(g.double().pow(2).sum() for g in got.values()))
        assert norm <= clip * (1 + 1e-5)
        want, _ = reference(model, loss, one, clip)  # the fp32 batch-of-one reference: same direction
        flat = torch.cat([g.flatten() for g in got.values()])
        ref = torch.cat([want[n].flatten() for n in got])
        assert torch.nn.functional.cosine_similarity(flat, ref, dim=0) > 0.99


@pytest.mark.slow  # end to end
def test_a_bf16_run_trains_and_states_the_fp32_guarantee():
    data = batch(b=400, seed=3)
    results = {}
    for precision in ("fp32", "bf16"):
        torch.manual_seed(0)
        model = TabularMLP(8, hidden=16, dropout=0.0)
        cfg = TrainConfig(dp=DPSettings(batch_size=50, steps=30, epsilon=3.0, noise_seed=0),
                          compute=ComputeSettings(precision=precision, device="cpu"), lr=0.05, progress=False)
        results[precision] = (Trainer(model, DPSGD(), cfg).fit(data), model)
    (r32, m32), (r16, m16) = results["fp32"], results["bf16"]
    assert r16.noise_multiplier == r32.noise_multiplier and r16.guarantee.epsilon == r32.guarantee.epsilon
    assert next(m16.parameters()).dtype == torch.float32  # the weights stay fp32 under autocast
    with torch.no_grad():
        p32, p16 = torch.cat([p.flatten() for p in m32.parameters()]), torch.cat([p.flatten() for p in m16.parameters()])
    assert (p32 - p16).abs().max() < 0.1 * p32.abs().max()  # same noise, same samples: close paths


def test_every_recipe_composes_the_compute_settings():
    from dpcare.images.settings import DiffusionSettings
    from dpcare.synth.settings import SynthSettings
    from dpcare.text.classify.settings import NoteClassifierSettings
    from dpcare.text.lm.settings import FinetuneSettings
    from dpcare.timeseries.settings import ForecastSettings

    for cls in (TabularSettings, DiffusionSettings, SynthSettings, NoteClassifierSettings, FinetuneSettings,
                ForecastSettings):
        s = cls.from_dict({"compute": {"device": "cpu", "precision": "bf16"}})
        assert s.compute == ComputeSettings(device="cpu", precision="bf16")
