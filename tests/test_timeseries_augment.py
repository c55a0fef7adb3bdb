"""Embedding-space augmentation: ZOO, ZOO-PCA, MixUp and the retraining loop."""

from __future__ import annotations

import copy
import inspect

import pytest
import torch

from dpcare.timeseries import augment
from dpcare.timeseries.augment import (
    AugmentConfig,
    SyntheticPool,
    accept_epoch,
    embed_windows,
    embedding_losses,
    fit_pca_basis,
    mixup,
    pl_threshold,
    retrain_with_augmentation,
    sample_directions,
    zoo_objective,
    zoo_search,
    zoo_step,
)
from dpcare.timeseries.model import Forecaster

V, T, D = 3, 6, 16


def _model(seed: int = 0) -> Forecaster:
    torch.manual_seed(seed)
    return Forecaster(V, input_len=T, output_len=T, d_model=D, n_heads=4)


def _data(n: int, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    m_in = (torch.rand(n, T, V, generator=g) < 0.6).float()
    x = torch.cat([torch.randn(n, T, V, generator=g) * m_in, m_in], dim=-1)
    mask = (torch.rand(n, T, V, generator=g) < 0.6).float()
    return {"x": x, "y": torch.randn(n, T, V, generator=g) * mask, "mask": mask}


def _toy_loss(e, y, mask):
    """A quadratic in e whose centre depends on each point's target (checks y lines up)."""
    return ((e - y.mean((1, 2))[:, None, None]) ** 2).sum((1, 2)) / 10


def _config(**kw) -> AugmentConfig:
    base = {"method": "mixup", "max_epochs": 2, "patience": 7, "directions": 4, "steps": 1,
            "zoo_lr": 1.0, "mu": 0.5, "batch_size": 8, "seed": 3}
    return AugmentConfig(**{**base, **kw})


# ----------------------------------------------------------------- objective and ZOO


def test_zoo_objective_by_hand():
    losses = torch.tensor([0.5, 1.0, 2.0])
    got = zoo_objective(losses, tau=1.0, alpha=0.25, sign=-1)
    # -0.25 l - 0.75 [l < 1]
    torch.testing.assert_close(got, torch.tensor([-0.125 - 0.75, -0.25, -0.5]))
    torch.testing.assert_close(zoo_objective(losses, 1.0, 1.0, sign=1), losses)
    torch.testing.assert_close(zoo_objective(losses, 1.0, 0.0), -torch.tensor([1.0, 0.0, 0.0]))


def test_zoo_step_equals_finite_difference_formula():
    b, k, mu, lr, tau, alpha = 4, 5, 0.7, 0.3, 1.5, 0.5
    g = torch.Generator().manual_seed(11)
    e = torch.randn(b, T, D, generator=g) * 0.3
    y = torch.randn(b, T, V, generator=g)
    mask = torch.ones(b, T, V)
    got = zoo_step(e, y, mask, _toy_loss, tau, alpha, directions=k, lr=lr, mu=mu,
                   generator=torch.Generator().manual_seed(7))

    gh = torch.randn(k, b, T, D, generator=torch.Generator().manual_seed(7))
    expected = e.clone()
    for i in range(b):
        step = torch.zeros(T, D)
        for j in range(k):
            u = mu * gh[j, i] / gh[j, i].norm()  # Frobenius norm of this point's direction
            lp = _toy_loss((e[i] + u)[None], y[i:i + 1], mask[i:i + 1])
            lm = _toy_loss((e[i] - u)[None], y[i:i + 1], mask[i:i + 1])
            w = (-alpha * lp - (1 - alpha) * float(lp < tau)) - (
                -alpha * lm - (1 - alpha) * float(lm < tau))
            step += w * u
        expected[i] = e[i] - lr / (2 * mu * k) * step
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_zoo_search_descends_a_quadratic_with_sign_plus():
    g = torch.Generator().manual_seed(0)
    e = torch.randn(6, T, D, generator=g)
    y, mask = torch.zeros(6, T, V), torch.ones(6, T, V)
    out = zoo_search(None, e, y, mask, tau=0.0, alpha=1.0, steps=20, directions=20, lr=40.0,
                     mu=1.0, sign=1, generator=g, loss_of_embedding=_toy_loss)
    assert (_toy_loss(out, y, mask) < 0.5 * _toy_loss(e, y, mask)).all()


def test_zoo_search_with_a_model_is_reproducible_and_moves_points():
    model = _model()
    data = _data(5, 1)
    e = embed_windows(model, data["x"])
    tau = pl_threshold(model, data)
    a = zoo_search(model, e, data["y"], data["mask"], tau, 0.5, steps=2, directions=3, lr=1.0,
                   mu=0.5, generator=torch.Generator().manual_seed(4))
    b = zoo_search(model, e, data["y"], data["mask"], tau, 0.5, steps=2, directions=3, lr=1.0,
                   mu=0.5, generator=torch.Generator().manual_seed(4))
    assert torch.equal(a, b) and not torch.allclose(a, e)
    assert model.training  # the search restored the model's mode


def test_directions_have_norm_mu_per_point():
    u = sample_directions(4, T, D, 3, mu=2.5, generator=torch.Generator().manual_seed(0))
    assert u.shape == (3, 4, T, D)
    torch.testing.assert_close(u.flatten(2).norm(dim=2), torch.full((3, 4), 2.5))


# ----------------------------------------------------------------------------- PCA


def _embeddings_with_variances(variances, n=400, seed=0):
    """Embeddings [n, T, d] whose pooled covariance has exactly these eigenvalues."""
    g = torch.Generator().manual_seed(seed)
    d = len(variances)
    z = torch.randn(n * T, d, generator=g, dtype=torch.float64)
    q, _ = torch.linalg.qr(z - z.mean(0))
    rot, _ = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))
    rows = q * torch.tensor(variances, dtype=torch.float64).sqrt() * (n * T - 1) ** 0.5
    return (rows @ rot.T + 3.0).reshape(n, T, d), rot


@pytest.mark.parametrize("threshold,expected", [(0.4, 1), (0.79, 2), (0.81, 3), (0.94, 3),
                                                (0.96, 4), (0.999, 5)])
def test_pca_keeps_fewest_components_above_threshold(threshold, expected):
    e, _ = _embeddings_with_variances([0.5, 0.3, 0.15, 0.04, 0.01])  # cumulative .5 .8 .95 .99 1
    w = fit_pca_basis(e, threshold)
    assert w.shape == (expected, 5)
    torch.testing.assert_close(w @ w.T, torch.eye(expected, dtype=w.dtype))


def test_pca_basis_spans_the_top_directions():
    e, rot = _embeddings_with_variances([0.5, 0.3, 0.15, 0.04, 0.01])
    w = fit_pca_basis(e, 0.7)
    top = rot[:, :2].T  # the two largest-variance directions
    torch.testing.assert_close(top @ w.T @ w, top, atol=1e-8, rtol=0)


def test_pca_perturbations_lie_in_the_span_of_the_kept_components():
    g = torch.Generator().manual_seed(1)
    e_real = torch.randn(50, T, D, generator=g) * torch.linspace(3, 0.1, D)
    w = fit_pca_basis(e_real, 0.7)
    assert 0 < len(w) < D
    u = sample_directions(4, T, D, 5, mu=3.0, basis=w, generator=g)
    residual = u - u @ w.T @ w
    assert residual.abs().max() < 1e-5
    torch.testing.assert_close(u.norm(dim=-1), torch.full((5, 4, T), 3.0))  # mu per time step
    e = torch.randn(4, T, D, generator=g)
    new = zoo_step(e, torch.zeros(4, T, V), torch.ones(4, T, V), _toy_loss, 1.0, 0.5, 5, 2.0,
                   3.0, basis=w, generator=g)
    step = new - e
    assert step.abs().max() > 1e-4
    assert (step - step @ w.T @ w).abs().max() < 1e-4


# --------------------------------------------------------------------------- MixUp


def test_mixup_dominant_point_mask_and_target_mixing():
    n = 200
    e = torch.eye(n).reshape(n, 1, n)  # one-hot embeddings reveal lambda and the partner
    g = torch.Generator().manual_seed(0)
    y = torch.randn(n, T, V, generator=g)
    mask = (torch.rand(n, T, V, generator=g) < 0.5).float()
    e2, y2, m2 = mixup(e, y, mask, beta=0.2, generator=torch.Generator().manual_seed(9))
    flat = e2[:, 0]
    lam = flat[torch.arange(n), torch.arange(n)]
    partner_weights = flat.clone()
    partner_weights[torch.arange(n), torch.arange(n)] = -1
    j = partner_weights.argmax(1)
    assert (lam > 0.5).all() and (lam <= 1).all()
    assert (j != torch.arange(n)).all()
    torch.testing.assert_close(flat.sum(1), torch.ones(n))
    expected_y = lam[:, None, None] * y + (1 - lam[:, None, None]) * y[j]
    torch.testing.assert_close(y2, expected_y)
    assert torch.equal(m2, mask)
    again = mixup(e, y, mask, beta=0.2, generator=torch.Generator().manual_seed(9))
    assert torch.equal(again[0], e2)


# ----------------------------------------------------------------- loop components


def test_acceptance_rule_truth_table():
    best_p, best_m = 2.0, 1.0
    assert accept_epoch(1.9, 0.99, best_p, best_m)  # both better
    assert accept_epoch(1.5, 1.004, best_p, best_m)  # MSE a little worse, combined better
    assert accept_epoch(2.009, 0.9, best_p, best_m)  # Priv a little worse, combined better
    assert not accept_epoch(2.011, 0.5, best_p, best_m)  # Priv beyond tolerance
    assert not accept_epoch(1.0, 1.006, best_p, best_m)  # MSE beyond tolerance
    assert not accept_epoch(2.0, 1.0, best_p, best_m)  # combined not strictly better
    assert not accept_epoch(2.004, 0.995, best_p, best_m)  # 0.995 + 6.012 > 1 + 6
    assert accept_epoch(2.004, 0.985, best_p, best_m)  # 0.985 + 6.012 < 7
    assert not accept_epoch(1.9, 0.99, best_p, best_m, tolerance=-1.0)


def test_synthetic_pool_is_fifo_capped():
    pool = SyntheticPool(5)
    pool.add(torch.arange(3.0), torch.arange(3.0), torch.ones(3))
    pool.add(torch.arange(3.0, 7.0), torch.arange(3.0, 7.0), torch.ones(4))
    assert len(pool) == 5
    assert pool.e.tolist() == [2.0, 3.0, 4.0, 5.0, 6.0]  # the oldest two dropped
    snapshot = pool.copy()
    pool.add(torch.tensor([7.0]), torch.tensor([7.0]), torch.ones(1))
    assert snapshot.e.tolist() == [2.0, 3.0, 4.0, 5.0, 6.0]
    assert pool.e.tolist() == [3.0, 4.0, 5.0, 6.0, 7.0]


def test_pl_threshold_is_the_mean_real_training_loss():
    model = _model()
    data = _data(12, 2)
    e = embed_windows(model, data["x"])
    expected = float(embedding_losses(model, e, data["y"], data["mask"]).mean())
    assert pl_threshold(model, data) == pytest.approx(expected)
    assert pl_threshold(model, {"E": e, "y": data["y"], "mask": data["mask"]}) == pytest.approx(
        expected)


# -------------------------------------------------------------------- retraining


def _accept_sequence(monkeypatch, answers):
    answers = list(answers)
    monkeypatch.setattr(augment, "accept_epoch", lambda *a, **k: answers.pop(0))


def test_loop_never_takes_a_test_set():
    assert list(inspect.signature(retrain_with_augmentation).parameters) == [
        "model", "train", "validation", "config", "progress"]


def test_fifo_cap_keeps_synthetic_at_most_half_the_real_windows():
    train, val = _data(20, 1), _data(8, 2)
    result = retrain_with_augmentation(
        _model(), train, val, _config(method="mixup", max_epochs=3, tolerance=10.0, weight=0.0,
                                      candidates_per_epoch=7), progress=False)
    for rec in result.history:
        assert rec.n_synthetic <= 0.5 * rec.n_real
    assert len(result.synthetic) <= 10


def test_fifo_cap_in_the_loop_with_forced_acceptance(monkeypatch):
    _accept_sequence(monkeypatch, [True] * 4)
    train, val = _data(20, 1), _data(8, 2)
    result = retrain_with_augmentation(_model(), train, val,
                                       _config(max_epochs=4, candidates_per_epoch=4),
                                       progress=False)
    assert [r.n_synthetic for r in result.history[1:]] == [4, 8, 10, 10]
    assert len(result.synthetic) == 10


def test_rejected_epochs_restore_model_and_optimizer_bit_identically(monkeypatch):
    train, val = _data(24, 1), _data(8, 2)
    base = _model()
    cfg = _config(method="zoo", max_epochs=1)

    _accept_sequence(monkeypatch, [True])
    first = retrain_with_augmentation(copy.deepcopy(base), train, val, cfg, progress=False)
    _accept_sequence(monkeypatch, [True, False, False])
    cfg3 = _config(method="zoo", max_epochs=3)
    later = retrain_with_augmentation(copy.deepcopy(base), train, val, cfg3, progress=False)

    assert [r.accepted for r in later.history] == [True, True, False, False]
    sd_a, sd_b = first.model.state_dict(), later.model.state_dict()
    assert not torch.equal(sd_a["to_memory.weight"], base.state_dict()["to_memory.weight"])
    for name in sd_a:
        assert torch.equal(sd_a[name], sd_b[name]), name
    opt_a, opt_b = first.optimizer.state_dict(), later.optimizer.state_dict()
    assert opt_a["state"], "Adam has no state: the test would prove nothing"
    assert opt_a["param_groups"] == opt_b["param_groups"]
    for idx, state in opt_a["state"].items():
        for key, value in state.items():
            assert torch.equal(value, opt_b["state"][idx][key]), (idx, key)
    assert len(later.synthetic) == len(first.synthetic)
    assert torch.equal(later.synthetic.e, first.synthetic.e)  # the rejected candidates dropped


def test_impossible_tolerance_rejects_everything_stops_and_decays_lr():
    train, val = _data(16, 1), _data(8, 2)
    model = _model()
    before = copy.deepcopy(model.state_dict())
    cfg = _config(method="mixup", tolerance=-1.0, patience=4, max_epochs=10, lr=1e-2)
    result = retrain_with_augmentation(model, train, val, cfg, progress=False)
    assert len(result.history) == 1 + 4  # baseline + patience rejections
    assert not any(r.accepted for r in result.history[1:])
    assert [r.lr for r in result.history[1:]] == pytest.approx([1e-2, 1e-2, 1e-2, 1e-3])
    for name, value in before.items():
        assert torch.equal(result.model.state_dict()[name], value), name
    assert not result.optimizer.state_dict()["state"]
    assert len(result.synthetic) == 0


def test_loop_tau_uses_real_windows_only(monkeypatch):
    _accept_sequence(monkeypatch, [True, True])
    train, val = _data(20, 1), _data(8, 2)
    # alpha = 1, sign = -1: ZOO pushes synthetic points to high loss
    cfg = _config(method="zoo", alpha=1.0, max_epochs=2, steps=2, zoo_lr=50.0, mu=2.0)
    result = retrain_with_augmentation(_model(), train, val, cfg, progress=False)
    model = result.model
    tau_real = pl_threshold(model, train)
    syn = result.synthetic
    syn_losses = embedding_losses(model, syn.e, syn.y, syn.mask)
    real_losses = embedding_losses(model, embed_windows(model, train["x"]), train["y"],
                                   train["mask"])
    assert syn_losses.mean() > tau_real * 1.05  # the synthetic points would inflate tau
    pooled = float(torch.cat([real_losses, syn_losses]).mean())
    assert result.history[-1].tau == pytest.approx(tau_real, rel=1e-6)
    assert result.history[-1].tau != pytest.approx(pooled, rel=1e-3)


def test_loop_freezes_embedding_and_is_reproducible():
    train, val = _data(16, 1), _data(8, 2)
    model = _model()
    emb_before = model.token_embedding.weight.detach().clone()
    cfg = _config(method="zoo_pca", tolerance=10.0, weight=0.0, max_epochs=2)
    a = retrain_with_augmentation(model, train, val, cfg, progress=False)
    assert torch.equal(a.model.token_embedding.weight, emb_before)
    assert a.model.token_embedding.weight.requires_grad  # flag restored
    assert a.pca_components is not None and 0 < a.pca_components <= D
    b = retrain_with_augmentation(_model(), train, val, cfg, progress=False)
    assert a.history_dicts() == b.history_dicts()
    assert any(r.accepted for r in a.history[1:])
