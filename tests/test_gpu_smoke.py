"""Every recipe's smoke path on a GPU (issue 25): one tiny end-to-end fit per recipe through the Python API with
compute device = the device under test and precision bf16 (fp32 too where cheap), on tiny generated data, 1-2
epochs. Each asserts that the run finishes, states its guarantee, reports finite metrics and hands the model back
on the CPU (the recipes evaluate, save and apply there).

Marked ``gpu``: skipped without CUDA, never required by CI. The device under test is "cuda" unless the
environment variable DPCARE_SMOKE_DEVICE names another one, so the test's own code can be checked without a GPU:

    DPCARE_SMOKE_DEVICE=cpu python -m pytest -q -m gpu tests/test_gpu_smoke.py
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import replace

import pytest
import torch
from helpers import SPEC, toy_table

from dpcare.data import TableSchema
from dpcare.settings import ComputeSettings, DPSettings

DEVICE = os.environ.get("DPCARE_SMOKE_DEVICE", "cuda")
SKIP = None
if DEVICE.startswith("cuda") and not torch.cuda.is_available():
    SKIP = ("no CUDA device here (set DPCARE_SMOKE_DEVICE=cpu to check this test's code on the CPU)")

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(SKIP is not None, reason=SKIP or "")]


def compute(precision: str) -> ComputeSettings:
    return ComputeSettings(device=DEVICE, precision=precision)


def finite(values) -> bool:
    values = list(values)
    return bool(values) and all(math.isfinite(float(v.detach() if torch.is_tensor(v) else v)) for v in values)


def on_cpu(module: torch.nn.Module) -> bool:
    return all(p.device.type == "cpu" for p in module.parameters())


def stated(guarantee, epsilon: float, n: int | None = None) -> None:
    """The guarantee is stated: the target epsilon met, a delta, a unit, the n the engine sampled."""
    assert guarantee is not None
    assert 0 < guarantee.epsilon <= epsilon + 1e-6 and 0 < guarantee.delta < 1 and guarantee.unit is not None
    assert guarantee.n > 0 and (n is None or guarantee.n == n)
    assert guarantee.describe()


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_tabular(precision, monkeypatch):
    import dpcare.verdict
    from dpcare.tabular import TabularSettings, fit

    # the verdict's bootstrap against the public baseline (numpy, CPU) is most of a tiny fit: fewer resamples
    monkeypatch.setattr(dpcare.verdict, "compare", functools.partial(dpcare.verdict.compare, resamples=50))

    s = TabularSettings(method="dp-sgd", hidden=16, compute=compute(precision),
                        dp=DPSettings(epsilon=2.0, epochs=2, batch_size=32, accountant="rdp"))
    model = fit(toy_table(300), TableSchema.from_dict(SPEC), s, progress=False)
    stated(model.guarantee, 2.0)
    assert finite(model.metrics.values()) and {"test_auroc", "val_auroc"} <= set(model.metrics)
    assert on_cpu(model.model) and finite(p.sum() for p in model.model.parameters())


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_forecasting(precision):
    from test_timeseries_recipe import SPEC as FORECAST_SPEC
    from test_timeseries_recipe import TINY, events

    from dpcare.timeseries import fit

    model = fit(events(), replace(TINY, compute=compute(precision)), spec=FORECAST_SPEC, progress=False)
    stated(model.guarantee, TINY.dp.epsilon)
    assert finite(model.metrics.values())
    assert on_cpu(model.model)
    out = model.forecast(events(6, seed=9, prefix="new"))
    assert len(out) and finite(out.select_dtypes("number").to_numpy().ravel())


def test_images():
    from test_images_recipe import digits, tiny

    from dpcare.images.recipe import fit

    settings = replace(tiny("dp", batch_size=8), compute=compute("bf16"))
    model = fit(digits(16), settings, progress=False)
    stated(model.guarantee, 8.0, n=32)
    assert model.info["steps"] > 0 and on_cpu(model.unet)
    images = model.sample(n=2, seed=0)
    assert images.shape == (2, 1, 8, 8) and torch.isfinite(images).all()


def test_note_classification():
    from test_text_classify import tiny

    from dpcare.text import generate_corpus
    from dpcare.text.classify.recipe import fit

    notes = generate_corpus(40, sources=("support2",), seed=1)
    model = fit(notes, replace(tiny("fusiondp"), compute=compute("bf16")), progress=False)
    stated(model.guarantee, 5.0)
    assert finite(model.metrics.values()) and on_cpu(model.model)
    assert len(model.predict(notes[:3])) == 3


def test_lm_finetuning(gpt2_folder):
    from test_text_finetune import NOTES

    from dpcare.text.lm.finetune import finetune

    net, tok, info = finetune(NOTES, "ner", "dp-lora", epsilon=3.0, accountant="rdp", model=gpt2_folder, epochs=2,
                            batch_size=1, window=24, stride=12, device=DEVICE, precision="bf16")
    assert info["steps"] > 0 and info["guarantee"]["epsilon"] <= 3.0 + 1e-6 and info["guarantee"]["n"] == 2
    assert "every record of each patient" in info["guarantee_text"]
    assert finite([info["noise_multiplier"], *(rec["epsilon"] for rec in info["history"] if "epsilon" in rec)])
    assert on_cpu(net)  # a private step releases no loss: the fine-tuned model's logits stand in for a metric
    with torch.no_grad():
        logits = net(**tok("Seen for CHF on Lasix.", return_tensors="pt")).logits
    assert torch.isfinite(logits).all()


def test_synth(gpt2_folder):
    from dpcare.synth.lm_model import LMSettings
    from dpcare.synth.settings import StageSettings
    from dpcare.synth.synthesizer import Synthesizer

    schema = TableSchema.from_dict(SPEC)
    s = Synthesizer(schema, scale="cpu", mode="dp-2stage-u", epsilon=4.0, lm=LMSettings(model=gpt2_folder),
                    stage1=StageSettings(epochs=1), epochs=1, compute=compute("bf16"), progress=False)
    s.fit(toy_table(60), estimate=False)
    stated(s.guarantee, 4.0, n=60)
    assert set(s.history) == {"stage1", "stage2"} and on_cpu(s.model)
    assert finite(s.perplexity(toy_table(20, seed=3)).values())
    assert len(s.sample(4, batch_size=4, seed=1)) == 4
