"""Per-example gradients and clipping of both backends against a batch-of-one loop."""

import pytest
import torch
import torch.nn.functional as F
from grad_reference import assert_same_clipped_sums, reference
from torch import nn

from dpcare.engine.fast_clipping import clipped_sum_fast, unsupported_reason
from dpcare.engine.functorch_backend import clipped_sum_functorch
from dpcare.methods import DPSGD, FeatureDP, LabelDP, task_loss
from dpcare.models import TabularMLP, TinyTransformer

BACKENDS = {"fast": clipped_sum_fast, "functorch": clipped_sum_functorch}


def two_forward_with_hidden(beta=0.7):
    """l(x) - l(x') + beta * ||h(x) - h(x')||^2: two forward passes and a hidden layer."""

    def loss(model, batch):
        out, h = model(batch["x"], return_hidden=True)
        out2, h2 = model(batch["x_pub"], return_hidden=True)
        return task_loss(out, batch["y"]) - task_loss(out2, batch["y"]) + beta * (h - h2).pow(2).sum(1)

    return loss


def tabular_batch(b=9, d=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, d, generator=g)
    x_pub = x.clone()
    x_pub[:, :2] = torch.randn(b, 2, generator=g)
    return {"x": x, "x_pub": x_pub, "y": (torch.rand(b, generator=g) > 0.5).float()}


CASES = {
    "dpsgd": lambda: DPSGD().private_loss,
    "feature-dp": lambda: FeatureDP().private_loss,
    "label-dp": lambda: LabelDP().private_loss,
    "two-forward+hidden": two_forward_with_hidden,
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("clip", [0.05, 100.0])
def test_clipped_sum_matches_batch_of_one_loop(backend, case, clip):
    torch.manual_seed(0)
    model = TabularMLP(6, hidden=16, dropout=0.0).double()
    batch = {k: v.double() for k, v in tabular_batch().items()}
    loss_fn = CASES[case]()
    got, norms = BACKENDS[backend](model, loss_fn, batch, dict(model.named_parameters()), clip)
    want, want_norms = reference(model, loss_fn, batch, clip)
    assert_same_clipped_sums(got, norms, want, want_norms)


@pytest.mark.parametrize("backend", BACKENDS)
def test_transformer_sequences_match_loop(backend):
    torch.manual_seed(1)
    model = TinyTransformer(vocab=50, max_len=8, dim=16, depth=1, heads=2).double()
    ids = torch.randint(0, 50, (5, 8))
    ids[0, :4] = 7  # repeated tokens exercise the embedding ghost norm
    batch = {"x": ids, "y": torch.tensor([0, 1, 1, 0, 1])}
    loss_fn = lambda m, b: F.cross_entropy(m(b["x"]), b["y"], reduction="none")
    got, norms = BACKENDS[backend](model, loss_fn, batch, dict(model.named_parameters()), 0.5)
    want, want_norms = reference(model, loss_fn, batch, 0.5)
    assert_same_clipped_sums(got, norms, want, want_norms)


@pytest.mark.parametrize("backend", BACKENDS)
def test_frozen_parameters_get_no_gradient(backend):
    model = TabularMLP(6, hidden=16, dropout=0.0).double()
    for p in model.body.parameters():
        p.requires_grad_(False)
    trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
    batch = {k: v.double() for k, v in tabular_batch().items()}
    got, _ = BACKENDS[backend](model, DPSGD().private_loss, batch, trainable, 1.0)
    assert set(got) == {"head.weight", "head.bias"}
    want, _ = reference(model, DPSGD().private_loss, batch, 1.0)
    for n in got:
        torch.testing.assert_close(got[n], want[n])


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_clipped_per_example_gradient_has_norm_at_most_c(backend):
    torch.manual_seed(2)
    model = TabularMLP(6, hidden=32, dropout=0.0)
    batch = tabular_batch(b=20)
    batch["x"] = batch["x"] * 50  # large gradients
    clip = 0.3
    for i in range(20):
        one = {k: v[i : i + 1] for k, v in batch.items()}
        got, norm = BACKENDS[backend](model, FeatureDP().private_loss, one, dict(model.named_parameters()), clip)
        total = torch.sqrt(sum(g.pow(2).sum() for g in got.values()))
        assert float(total) <= clip * (1 + 1e-5)
        if float(norm) > clip:
            assert float(total) == pytest.approx(clip, rel=1e-4)


def test_unsupported_models_are_detected():
    class WithRawParameter(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 1)
            self.scale = nn.Parameter(torch.ones(1))

        def forward(self, x):
            return self.lin(x) * self.scale

    m = WithRawParameter()
    assert "no fast rule" in unsupported_reason(m, dict(m.named_parameters()))

    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(10, 4)
            self.out = nn.Linear(4, 10, bias=False)
            self.out.weight = self.emb.weight

    t = Tied()
    assert "tied" in unsupported_reason(t, dict(t.named_parameters()))
    mlp = TabularMLP(3)
    assert unsupported_reason(mlp, dict(mlp.named_parameters())) is None


def test_raw_parameter_model_trains_through_functorch_fallback():
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(6, 1)
            self.scale = nn.Parameter(torch.full((1,), 1.5))

        def forward(self, x):
            return self.lin(x) * self.scale

    model = Scaled().double()
    batch = {k: v.double() for k, v in tabular_batch().items()}
    got, _ = clipped_sum_functorch(model, DPSGD().private_loss, batch, dict(model.named_parameters()), 0.1)
    want, _ = reference(model, DPSGD().private_loss, batch, 0.1)
    for n in want:
        torch.testing.assert_close(got[n], want[n])


@pytest.mark.parametrize("backend", BACKENDS)
def test_per_example_loss_shape_is_enforced(backend):
    model = TabularMLP(6, hidden=8, dropout=0.0)
    bad = lambda m, b: F.binary_cross_entropy_with_logits(m(b["x"]), b["y"][:, None], reduction="none")
    with pytest.raises(ValueError, match="one loss per example|shape"):
        BACKENDS[backend](model, bad, tabular_batch(), dict(model.named_parameters()), 1.0)
