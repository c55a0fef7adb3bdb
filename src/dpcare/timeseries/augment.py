"""Embedding-space augmentation against the LOSS membership-inference attack.

ZOO, ZOO-PCA and MixUp synthesise embeddings E [T_in, d] (zoo-tsf-spec.md); the
retraining loop fine-tunes a pretrained :class:`~dpcare.timeseries.model.Forecaster`
on real and synthetic embeddings with its embedding layer frozen and keeps an epoch
only if it improves the privacy/utility trade-off on validation data.

dpcare corrections to the authors' code: the PL threshold tau is the mean loss of the
REAL training windows (synthetic high-loss points would inflate it); the loop selects
on validation windows only, so the test patients stay untouched for the final attack.

All randomness comes from ``torch.Generator`` objects (reproducible with a seed).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
from torch import Tensor, nn

from dpcare.exceptions import SettingsError
from dpcare.progress import progress as tqdm
from dpcare.timeseries.model import Forecaster, masked_mse

LossOfEmbedding = Callable[[Tensor, Tensor, Tensor], Tensor]
METHODS = ("zoo", "zoo_pca", "mixup")


@contextmanager
def _eval_mode(model: nn.Module):
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


def embedding_losses(model: Forecaster, e: Tensor, y: Tensor, mask: Tensor,
                     batch_size: int = 1024) -> Tensor:
    """Per-example masked MSE of forecasts from embeddings, in eval mode without grad: [N]."""
    with _eval_mode(model):
        parts = [masked_mse(model.from_embedding(e[i:i + batch_size]), y[i:i + batch_size],
                            mask[i:i + batch_size]) for i in range(0, len(e), batch_size)]
    return torch.cat(parts) if parts else e.new_zeros(0)


def model_loss_fn(model: Forecaster, batch_size: int = 1024) -> LossOfEmbedding:
    """``loss_of_embedding(E, y, mask) -> [B]`` evaluated by ``model`` (eval mode, no grad)."""
    return lambda e, y, mask: embedding_losses(model, e, y, mask, batch_size)


def embed_windows(model: Forecaster, x: Tensor, batch_size: int = 1024) -> Tensor:
    """Embeddings E [N, T_in, d] of windows x (eval mode, no grad)."""
    with _eval_mode(model):
        parts = [model.embed(x[i:i + batch_size]) for i in range(0, len(x), batch_size)]
    return torch.cat(parts)


def pl_threshold(model: Forecaster, real_train: Mapping[str, Tensor],
                 batch_size: int = 1024) -> float:
    """tau: mean masked MSE of the REAL training windows (never synthetic ones).

    ``real_train`` holds ``y``, ``mask`` and either the windows ``x`` or their embeddings ``E``.
    """
    e = real_train["E"] if "E" in real_train else embed_windows(model, real_train["x"], batch_size)
    losses = embedding_losses(model, e, real_train["y"], real_train["mask"], batch_size)
    return float(losses.mean())


def zoo_objective(losses: Tensor, tau: float, alpha: float, sign: int = -1) -> Tensor:
    """F = s * alpha * l - (1 - alpha) * 1[l < tau], elementwise (minimised by ZOO).

    ``sign`` s = -1 makes ZOO raise the loss (diversity); the PL term pulls points under tau.
    """
    return sign * alpha * losses - (1.0 - alpha) * (losses < tau).to(losses.dtype)


def sample_directions(n_points: int, time_steps: int, dim: int, directions: int, mu: float,
                      basis: Tensor | None = None,
                      generator: torch.Generator | None = None) -> Tensor:
    """Perturbations u [K, B, T, d].

    Without ``basis``: g ~ N(0, I) drawn as one ``randn(K, B, T, d)``, u = mu g / ||g||_F per
    point. With ``basis`` W [C, d] (orthonormal rows): z ~ N(0, I_C) drawn as
    ``randn(K, B, T, C)``, normalised per time step, u_t = mu (z_t / ||z_t||)^T W.
    """
    if basis is None:
        g = torch.randn(directions, n_points, time_steps, dim, generator=generator)
        norms = g.flatten(2).norm(dim=2).clamp_min(1e-12)
        return mu * g / norms[:, :, None, None]
    z = torch.randn(directions, n_points, time_steps, basis.shape[0], generator=generator)
    z = z / z.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    return mu * z @ basis.detach().cpu().to(z.dtype)


def zoo_step(e: Tensor, y: Tensor, mask: Tensor, loss_of_embedding: LossOfEmbedding, tau: float,
             alpha: float, directions: int = 10, lr: float = 3000.0, mu: float = 300.0,
             basis: Tensor | None = None, sign: int = -1,
             generator: torch.Generator | None = None) -> Tensor:
    """One antithetic zeroth-order step on embeddings e [B, T, d].

    w_k = F(e + u_k) - F(e - u_k); e <- e - lr / (2 mu K) sum_k w_k u_k, with F evaluated in
    one batch of 2 K B points by ``loss_of_embedding(E, y, mask) -> [2 K B]``.
    """
    b, t, d = e.shape
    k = directions
    u = sample_directions(b, t, d, k, mu, basis, generator).to(e.device, e.dtype)
    points = torch.cat([e[None] + u, e[None] - u]).reshape(2 * k * b, t, d)
    reps = (2 * k,) + (1,) * (y.dim() - 1)
    losses = loss_of_embedding(points, y.repeat(reps), mask.repeat(reps)).detach()
    f = zoo_objective(losses.reshape(2, k, b), tau, alpha, sign)
    w = f[0] - f[1]  # [K, B]
    return e - lr / (2.0 * mu * k) * (w[:, :, None, None] * u).sum(0)


def zoo_search(model: Forecaster | None, e: Tensor, y: Tensor, mask: Tensor, tau: float,
               alpha: float, steps: int = 3, directions: int = 10, lr: float = 3000.0,
               mu: float = 300.0, basis: Tensor | None = None, sign: int = -1,
               generator: torch.Generator | None = None,
               loss_of_embedding: LossOfEmbedding | None = None) -> Tensor:
    """J ZOO steps from start embeddings e [B, T, d]; returns the synthetic embeddings.

    F is evaluated by ``model`` (eval mode, no grad) unless ``loss_of_embedding`` is given.
    """
    if loss_of_embedding is None:
        if model is None:
            raise SettingsError("zoo_search needs a model or a loss_of_embedding function")
        loss_of_embedding = model_loss_fn(model)
    e = e.detach()
    for _ in range(steps):
        e = zoo_step(e, y, mask, loss_of_embedding, tau, alpha, directions, lr, mu, basis, sign,
                     generator)
    return e


def fit_pca_basis(e_real: Tensor, variance: float = 0.70) -> Tensor:
    """Principal directions W [C, d] of real embeddings [N, T, d] with time steps pooled.

    Keeps the fewest components whose cumulative explained variance exceeds ``variance``
    (all d when none does). Rows are orthonormal.
    """
    if not 0.0 < variance <= 1.0:
        raise SettingsError(f"variance must be in (0, 1], got {variance}")
    rows = e_real.detach().reshape(-1, e_real.shape[-1]).double()
    rows = rows - rows.mean(0)
    cov = rows.T @ rows / max(len(rows) - 1, 1)
    evals, evecs = torch.linalg.eigh(cov)  # ascending
    evals, evecs = evals.flip(0).clamp_min(0.0), evecs.flip(1)
    ratio = torch.cumsum(evals, 0) / evals.sum().clamp_min(1e-300)
    above = torch.nonzero(ratio > variance).flatten()
    n_keep = int(above[0]) + 1 if len(above) else len(evals)
    return evecs[:, :n_keep].T.to(e_real.dtype).contiguous()


def _beta_above_half(n: int, beta: float, generator: torch.Generator | None) -> Tensor:
    """n draws of Beta(beta, beta), each resampled until it exceeds 0.5."""
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    rng = np.random.default_rng(seed)
    lam = rng.beta(beta, beta, size=n)
    while (low := lam <= 0.5).any():
        lam[low] = rng.beta(beta, beta, size=int(low.sum()))
    return torch.from_numpy(lam)


def mixup(e: Tensor, y: Tensor, mask: Tensor, beta: float,
          generator: torch.Generator | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """MixUp in embedding space: each point i with a random other point j of the batch.

    lambda ~ Beta(beta, beta) resampled until lambda > 0.5 (i dominates);
    e = lambda e_i + (1 - lambda) e_j, target mixed the same way, mask of i kept.
    """
    n = len(e)
    if n > 1:
        j = (torch.arange(n) + torch.randint(1, n, (n,), generator=generator)) % n
    else:
        j = torch.zeros(n, dtype=torch.long)
    j = j.to(e.device)
    lam = _beta_above_half(n, beta, generator).to(e.device, e.dtype)
    le, ly = lam.view(-1, *(1,) * (e.dim() - 1)), lam.view(-1, *(1,) * (y.dim() - 1))
    return le * e + (1 - le) * e[j], ly * y + (1 - ly) * y[j], mask.clone()


def accept_epoch(priv: float, mse_val: float, priv_best: float, mse_val_best: float,
                 tolerance: float = 0.005, weight: float = 3.0) -> bool:
    """The acceptance rule: neither metric worse by more than ``tolerance``, and the
    combined ``mse_val + weight * priv`` strictly better."""
    return bool(priv < (1 + tolerance) * priv_best
                and mse_val < (1 + tolerance) * mse_val_best
                and mse_val + weight * priv < mse_val_best + weight * priv_best)


def loss_attack_ratio(member_losses: Tensor, nonmember_losses: Tensor,
                      tau: float) -> tuple[float, float, float]:
    """LOSS attack at threshold tau ("member" iff l < tau): (TPR, FPR, Priv = TPR / FPR)."""
    tpr = float((member_losses < tau).double().mean())
    fpr = float((nonmember_losses < tau).double().mean())
    return tpr, fpr, (tpr / fpr if fpr > 0 else math.inf)


class SyntheticPool:
    """Accepted synthetic points (E, y, mask), oldest first, capped FIFO at ``capacity``."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.e: Tensor | None = None
        self.y: Tensor | None = None
        self.mask: Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.e is None else len(self.e)

    def add(self, e: Tensor, y: Tensor, mask: Tensor) -> None:
        """Append a block and drop the oldest points beyond the capacity."""
        if self.e is not None:
            e, y, mask = (torch.cat([self.e, e]), torch.cat([self.y, y]),
                          torch.cat([self.mask, mask]))
        start = max(len(e) - self.capacity, 0)
        self.e, self.y, self.mask = e[start:], y[start:], mask[start:]

    def copy(self) -> SyntheticPool:
        new = SyntheticPool(self.capacity)
        new.e, new.y, new.mask = self.e, self.y, self.mask  # blocks are never modified in place
        return new


@dataclass
class AugmentConfig:
    """Settings of :func:`retrain_with_augmentation` (defaults as in the paper except
    ``candidates_per_epoch``).

    ``candidates_per_epoch`` defaults to the number of real training windows (the paper's
    32,000 is GPU scale). Candidates that the FIFO cap (``synthetic_fraction`` of the real
    windows) would drop at once are not generated. ``batches_per_epoch`` defaults to one pass
    over the real windows (each batch is half real, half synthetic). ``lr`` is multiplied by
    ``lr_decay`` at every multiple of ``lr_decay_after`` rejections in a row (3 and 6 with the
    defaults) and is not reset by a later acceptance.
    """

    method: str = "zoo_pca"
    alpha: float = 0.5
    sign: int = -1
    beta: float = 1.0
    pca_variance: float = 0.70
    steps: int = 3
    directions: int = 10
    zoo_lr: float = 3000.0
    mu: float = 300.0
    candidates_per_epoch: int | None = None
    generation_batch: int = 32
    synthetic_fraction: float = 0.5
    batch_size: int = 32
    batches_per_epoch: int | None = None
    lr: float = 5e-5
    max_epochs: int = 30
    patience: int = 7
    lr_decay_after: int = 3
    lr_decay: float = 0.1
    tolerance: float = 0.005
    weight: float = 3.0
    eval_batch_size: int = 1024
    seed: int = 0

    def __post_init__(self):
        if self.method not in METHODS:
            raise SettingsError(f"method must be one of {METHODS}, got {self.method!r}")
        if not 0.0 <= self.alpha <= 1.0:
            raise SettingsError(f"alpha must be in [0, 1], got {self.alpha}")
        if self.sign not in (-1, 1):
            raise SettingsError(f"sign must be -1 or +1, got {self.sign}")
        if self.batch_size < 2:
            raise SettingsError("batch_size must be at least 2 (half real, half synthetic)")


@dataclass
class EpochRecord:
    """One retraining epoch (epoch 0: the pretrained model, the first accepted point)."""

    epoch: int
    accepted: bool
    priv: float
    mse_val: float
    tpr: float
    fpr: float
    tau: float
    train_loss: float
    lr: float
    n_real: int
    n_synthetic: int
    n_candidates: int


@dataclass
class AugmentResult:
    """The best (last accepted) model, its optimizer, the history and the synthetic pool."""

    model: Forecaster
    optimizer: torch.optim.Optimizer
    history: list[EpochRecord]
    synthetic: SyntheticPool
    config: AugmentConfig
    pca_components: int | None = None
    best: EpochRecord | None = field(default=None)

    def history_dicts(self) -> list[dict]:
        return [asdict(r) for r in self.history]


def _permutation_draws(n_pool: int, count: int, generator: torch.Generator) -> Tensor:
    """``count`` indices drawn without replacement, a fresh permutation each pass."""
    passes = [torch.randperm(n_pool, generator=generator) for _ in range(-(-count // n_pool))]
    return torch.cat(passes)[:count]


def _evaluate(model: Forecaster, e_tr: Tensor, y_tr: Tensor, m_tr: Tensor, e_va: Tensor,
              y_va: Tensor, m_va: Tensor, batch_size: int) -> dict[str, float]:
    """tau from real training losses; LOSS attack with validation windows as non-members."""
    l_tr = embedding_losses(model, e_tr, y_tr, m_tr, batch_size)
    l_va = embedding_losses(model, e_va, y_va, m_va, batch_size)
    tau = float(l_tr.mean())
    tpr, fpr, priv = loss_attack_ratio(l_tr, l_va, tau)
    return {"tau": tau, "tpr": tpr, "fpr": fpr, "priv": priv, "mse_val": float(l_va.mean())}


def _generate(model: Forecaster, config: AugmentConfig, e: Tensor, y: Tensor, mask: Tensor,
              tau: float, basis: Tensor | None, generator: torch.Generator) -> Tensor:
    loss_fn = model_loss_fn(model, config.eval_batch_size)
    return zoo_search(None, e, y, mask, tau, config.alpha, config.steps, config.directions,
                      config.zoo_lr, config.mu, basis if config.method == "zoo_pca" else None,
                      config.sign, generator, loss_fn)


def retrain_with_augmentation(model: Forecaster, train: Mapping[str, Tensor],
                              validation: Mapping[str, Tensor], config: AugmentConfig,
                              progress: bool = True) -> AugmentResult:
    """Fine-tune ``model`` on real + synthetic embeddings (zoo-tsf-spec.md, "Retraining loop").

    ``train`` and ``validation`` hold tensors ``x``, ``y``, ``mask``. The embedding layer is
    frozen (its ``requires_grad`` flags are restored at the end). Each epoch: candidates from
    start points drawn from the accepted pool (real + synthetic; a synthetic point keeps its
    start point's target and mask; MixUp pairs points of one generation batch), FIFO cap on
    synthetic points, training on half-real / half-synthetic batches, then the LOSS attack
    (tau = mean real training loss, members = training windows, non-members = validation
    windows) and validation MSE. A rejected epoch restores the last accepted model and
    optimizer state and drops its candidates; training stops after ``patience`` rejections in
    a row. The test set is never seen here.
    """
    device = next(model.parameters()).device
    was_training = model.training
    gen = torch.Generator().manual_seed(config.seed)
    frozen = [(p, p.requires_grad) for p in model.embedding_parameters()]
    for p, _ in frozen:
        p.requires_grad_(False)
    try:
        bs = config.eval_batch_size
        x_tr, y_tr, m_tr = (train[k].to(device) for k in ("x", "y", "mask"))
        y_va, m_va = validation["y"].to(device), validation["mask"].to(device)
        e_tr = embed_windows(model, x_tr, bs)
        e_va = embed_windows(model, validation["x"].to(device), bs)
        n_real = len(e_tr)
        basis = fit_pca_basis(e_tr, config.pca_variance) if config.method == "zoo_pca" else None
        pool = SyntheticPool(int(config.synthetic_fraction * n_real))
        n_cand = min(config.candidates_per_epoch or n_real, pool.capacity)
        half = config.batch_size // 2
        n_batches = config.batches_per_epoch or -(-n_real // half)

        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.Adam(params, lr=config.lr)
        lr = config.lr
        best = _evaluate(model, e_tr, y_tr, m_tr, e_va, y_va, m_va, bs)
        history = [EpochRecord(0, True, best["priv"], best["mse_val"], best["tpr"], best["fpr"],
                               best["tau"], math.nan, lr, n_real, 0, 0)]
        best_record = history[0]
        model_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        opt_state = copy.deepcopy(opt.state_dict())
        rejections = 0

        bar = tqdm(range(1, config.max_epochs + 1), disable=not progress, desc=config.method)
        for epoch in bar:
            # candidates from the accepted pool, scored by the accepted model
            accepted_pool = pool.copy()
            tau = best["tau"]
            if n_cand > 0:
                e_all = e_tr if not len(pool) else torch.cat([e_tr, pool.e])
                y_all = y_tr if not len(pool) else torch.cat([y_tr, pool.y])
                m_all = m_tr if not len(pool) else torch.cat([m_tr, pool.mask])
                starts = _permutation_draws(len(e_all), n_cand, gen).to(device)
                new_e, new_y, new_m = [], [], []
                for i in range(0, n_cand, config.generation_batch):
                    idx = starts[i:i + config.generation_batch]
                    e0, y0, m0 = e_all[idx], y_all[idx], m_all[idx]
                    if config.method == "mixup":
                        e1, y1, m1 = mixup(e0, y0, m0, config.beta, gen)
                    else:
                        e1 = _generate(model, config, e0, y0, m0, tau, basis, gen)
                        y1, m1 = y0, m0
                    new_e.append(e1)
                    new_y.append(y1)
                    new_m.append(m1)
                pool.add(torch.cat(new_e), torch.cat(new_y), torch.cat(new_m))

            # train on half-real / half-synthetic batches
            model.train()
            epoch_lr = opt.param_groups[0]["lr"]  # what this epoch's steps use
            real_idx = _permutation_draws(n_real, n_batches * half, gen).to(device)
            syn_idx = (_permutation_draws(len(pool), n_batches * half, gen).to(device)
                       if len(pool) else None)
            total = 0.0
            for b in range(n_batches):
                r = real_idx[b * half:(b + 1) * half]
                e_b, y_b, m_b = e_tr[r], y_tr[r], m_tr[r]
                if syn_idx is not None:
                    s = syn_idx[b * half:(b + 1) * half]
                    e_b = torch.cat([e_b, pool.e[s]])
                    y_b = torch.cat([y_b, pool.y[s]])
                    m_b = torch.cat([m_b, pool.mask[s]])
                loss = masked_mse(model.from_embedding(e_b), y_b, m_b).mean()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                total += float(loss.detach())

            ev = _evaluate(model, e_tr, y_tr, m_tr, e_va, y_va, m_va, bs)
            ok = accept_epoch(ev["priv"], ev["mse_val"], best["priv"], best["mse_val"],
                              config.tolerance, config.weight)
            record = EpochRecord(epoch, ok, ev["priv"], ev["mse_val"], ev["tpr"], ev["fpr"],
                                 ev["tau"], total / max(n_batches, 1), epoch_lr, n_real, len(pool),
                                 n_cand)
            history.append(record)
            if ok:
                best, best_record, rejections = ev, record, 0
                model_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
                opt_state = copy.deepcopy(opt.state_dict())
            else:
                rejections += 1
                pool = accepted_pool
                model.load_state_dict(model_state)
                opt.load_state_dict(copy.deepcopy(opt_state))
                if rejections % config.lr_decay_after == 0:
                    lr *= config.lr_decay
                for group in opt.param_groups:
                    group["lr"] = lr
            bar.set_postfix(priv=f"{ev['priv']:.3f}", mse=f"{ev['mse_val']:.4f}", ok=ok)
            if rejections >= config.patience:
                break
        return AugmentResult(model, opt, history, pool, config,
                             None if basis is None else len(basis), best_record)
    finally:
        model.train(was_training)
        for p, flag in frozen:
            p.requires_grad_(flag)
