"""Forecaster and masked MSE (dpcare.timeseries.model)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dpcare.timeseries.model import Forecaster, masked_mse

V, T_IN, T_OUT, D = 3, 6, 5, 16


def _model(seed: int = 0, **kw) -> Forecaster:
    torch.manual_seed(seed)
    return Forecaster(V, input_len=T_IN, output_len=T_OUT, d_model=D, n_heads=4, **kw)


def _windows(n: int, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    mask = (torch.rand(n, T_IN, V, generator=g) < 0.5).float()
    return torch.cat([torch.randn(n, T_IN, V, generator=g) * mask, mask], dim=-1)


def test_masked_mse_matches_formula_by_hand():
    yhat = torch.tensor([[[1.0, 2.0], [3.0, 4.0]],
                         [[1.0, 2.0], [3.0, 4.0]],
                         [[5.0, 5.0], [5.0, 5.0]]])
    y = torch.tensor([[[0.0, 0.0], [1.0, 1.0]],
                      [[0.0, float("nan")], [float("nan"), 10.0]],
                      [[0.0, 0.0], [0.0, 0.0]]])
    mask = torch.tensor([[[1.0, 1.0], [1.0, 1.0]],
                         [[1.0, 0.0], [0.0, 0.0]],  # one observed cell; NaN where unobserved
                         [[0.0, 0.0], [0.0, 0.0]]])  # nothing observed
    got = masked_mse(yhat, y, mask)
    # sample 0: (1 + 4 + 4 + 9) / 4; sample 1: 1 / 1 (not 1 / 4); sample 2: 0 / max(0, 1)
    assert got.shape == (3,)
    torch.testing.assert_close(got, torch.tensor([18.0 / 4, 1.0, 0.0]))


def test_output_shapes_and_distilled_memory():
    model = _model()
    x = _windows(4)
    assert model(x).shape == (4, T_OUT, V)
    e = model.embed(x)
    assert e.shape == (4, T_IN, D)
    assert model.encode(e).shape == (4, (T_IN + 1) // 2, V)  # distilling halves the time axis
    assert model.from_embedding(e, output_len=2).shape == (4, 2, V)


def test_forward_equals_from_embedding_of_embed():
    model = _model(dropout=0.0)
    x = _windows(5)
    torch.testing.assert_close(model(x), model.from_embedding(model.embed(x)), rtol=0, atol=0)


def test_student_forcing_gradient_flows_through_fed_back_predictions():
    model = _model()
    e = model.embed(_windows(3)).detach()
    out = model.from_embedding(e)

    # the same steps by hand: step 2 sees [s0, yhat_1], with yhat_1 attached or detached
    memory = model.encode(e)
    s0 = torch.zeros(3, 1, V)
    y1 = model.decoder(s0, memory)[:, -1:]
    y2 = model.decoder(torch.cat([s0, y1], 1), memory)[:, -1:]
    y2_detached = model.decoder(torch.cat([s0, y1.detach()], 1), memory)[:, -1:]
    torch.testing.assert_close(out[:, :2], torch.cat([y1, y2], 1))  # own predictions fed back

    # a weighted sum: a plain sum of LayerNorm outputs is constant at initialisation
    w = torch.randn(3, V, generator=torch.Generator().manual_seed(5))
    params = list(model.decoder.parameters())
    g_model = torch.autograd.grad((out[:, 1] * w).sum(), params)
    g_detached = torch.autograd.grad((y2_detached[:, 0] * w).sum(), params)
    g_hand = torch.autograd.grad((y2[:, 0] * w).sum(), params)
    for a, b in zip(g_model, g_hand, strict=True):
        torch.testing.assert_close(a, b)
    diff = sum(float((a - b).abs().sum()) for a, b in zip(g_model, g_detached, strict=True))
    assert diff > 1e-3, "fed-back predictions are detached: no gradient through the feedback"


def test_examples_do_not_mix():
    model = _model()
    model.train()
    x = _windows(4).requires_grad_(True)
    out = model(x)
    x2 = x.detach().clone()
    x2[1] = torch.randn_like(x2[1]) * 5
    torch.testing.assert_close(model(x2)[0], out[0], rtol=0, atol=1e-6)
    w = torch.randn(T_OUT, V, generator=torch.Generator().manual_seed(5))
    (grad,) = torch.autograd.grad((out[0] * w).sum(), x)
    assert grad[0].abs().sum() > 1e-3
    assert torch.count_nonzero(grad[1:]) == 0


def test_no_batchnorm_and_only_supported_layers_hold_parameters():
    model = Forecaster(8, d_model=64)
    allowed = (nn.Linear, nn.LayerNorm, nn.GroupNorm, nn.Conv1d)
    owned = set()
    for mod in model.modules():
        assert not isinstance(mod, nn.modules.batchnorm._BatchNorm), type(mod)
        assert not isinstance(mod, (nn.MultiheadAttention, nn.TransformerEncoderLayer,
                                    nn.TransformerDecoderLayer))
        own = list(mod.parameters(recurse=False))
        if own:
            assert isinstance(mod, allowed), f"{type(mod).__name__} holds parameters"
            owned.update(id(p) for p in own)
    assert owned == {id(p) for p in model.parameters()}
    assert not any(name == "positions" for name, _ in model.named_parameters())


def test_embedding_parameters_are_the_conv_embedding_and_can_be_frozen():
    model = _model()
    emb = list(model.embedding_parameters())
    assert [id(p) for p in emb] == [id(p) for p in model.token_embedding.parameters()]
    assert model.token_embedding.bias is None
    for p in emb:
        p.requires_grad_(False)
    target, mask = torch.zeros(2, T_OUT, V), torch.ones(2, T_OUT, V)
    masked_mse(model(_windows(2)), target, mask).sum().backward()
    assert all(p.grad is None for p in emb)
    assert model.to_memory.weight.grad is not None


def test_embed_rejects_wrong_channels():
    with pytest.raises(ValueError):
        _model().embed(torch.zeros(2, T_IN, V))
