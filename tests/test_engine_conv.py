"""Fast clipping of convolutions and GroupNorm against the per-example loop; BatchNorm is refused."""

import pytest
import torch
from grad_reference import assert_same_clipped_sums, reference
from torch import nn

from dpcare.engine import TrainConfig, Trainer
from dpcare.engine.fast_clipping import clipped_sum_fast, unsupported_reason
from dpcare.engine.functorch_backend import clipped_sum_functorch
from dpcare.methods import DPSGD

BACKENDS = {"fast": clipped_sum_fast, "functorch": clipped_sum_functorch}

CONV1D = {
    "plain": dict(kernel_size=3),
    "stride-pad-dilation": dict(kernel_size=3, stride=2, padding=2, dilation=2),
    "groups-no-bias": dict(kernel_size=2, groups=2, bias=False),
    "circular": dict(kernel_size=3, padding=1, padding_mode="circular", bias=False),
    "same-even-kernel": dict(kernel_size=4, padding="same", dilation=1),
    "reflect": dict(kernel_size=3, padding=1, padding_mode="reflect"),
}

CONV2D = {
    "plain": dict(kernel_size=3),
    "odd-stride-pad": dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 2)),
    "depthwise-dilation": dict(kernel_size=3, groups=4, dilation=2, padding=2),
    "same-circular": dict(kernel_size=3, padding="same", padding_mode="circular", bias=False),
}


class Conv1dNet(nn.Module):
    def __init__(self, **kw):
        super().__init__()
        self.conv = nn.Conv1d(4, 6, **kw)
        self.norm = nn.GroupNorm(3, 6)
        self.head = nn.Linear(6, 1)

    def forward(self, x):
        return self.head(torch.tanh(self.norm(self.conv(x))).mean(-1))[:, 0]


class Conv2dNet(nn.Module):
    def __init__(self, **kw):
        super().__init__()
        self.conv = nn.Conv2d(4, 8, **kw)
        self.norm = nn.GroupNorm(2, 8)
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        return self.head(torch.tanh(self.norm(self.conv(x))).mean((-1, -2)))[:, 0]


def loss(model, batch):
    return (model(batch["x"]) - batch["y"]).pow(2)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", CONV1D)
def test_conv1d_and_groupnorm_match_the_loop(backend, case):
    torch.manual_seed(0)
    model = Conv1dNet(**CONV1D[case]).double()
    batch = {"x": torch.randn(5, 4, 11, dtype=torch.float64), "y": torch.randn(5, dtype=torch.float64)}
    assert unsupported_reason(model, dict(model.named_parameters())) is None
    got, norms = BACKENDS[backend](model, loss, batch, dict(model.named_parameters()), 0.2)
    want, want_norms = reference(model, loss, batch, 0.2)
    assert_same_clipped_sums(got, norms, want, want_norms)


@pytest.mark.parametrize("case", CONV2D)
def test_conv2d_matches_the_loop(case):
    torch.manual_seed(1)
    model = Conv2dNet(**CONV2D[case]).double()
    batch = {"x": torch.randn(4, 4, 7, 6, dtype=torch.float64), "y": torch.randn(4, dtype=torch.float64)}
    got, norms = clipped_sum_fast(model, loss, batch, dict(model.named_parameters()), 0.5)
    want, want_norms = reference(model, loss, batch, 0.5)
    assert_same_clipped_sums(got, norms, want, want_norms)


def test_a_conv_called_twice_sums_both_calls():
    torch.manual_seed(2)
    model = Conv1dNet(kernel_size=3, padding=1).double()
    two = lambda m, b: loss(m, b) - 0.5 * (m(b["x"].flip(-1)) - b["y"]).pow(2)
    batch = {"x": torch.randn(3, 4, 9, dtype=torch.float64), "y": torch.randn(3, dtype=torch.float64)}
    got, norms = clipped_sum_fast(model, two, batch, dict(model.named_parameters()), 1e3)
    want, want_norms = reference(model, two, batch, 1e3)
    torch.testing.assert_close(norms, want_norms)
    for n in want:
        torch.testing.assert_close(got[n], want[n])


def test_batch_norm_is_refused_in_private_training():
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 1))
    with pytest.raises(ValueError, match="batch normalisation.*GroupNorm or LayerNorm"):
        Trainer(model, DPSGD(), TrainConfig(noise_multiplier=1.0, progress=False))
