"""Privacy events (dp-accounting's event algebra) of dpcare's mechanisms.

DP-SGD, two-batch Feature-DP and Label-DP all release, per step, a Gaussian sum of
clipped per-example gradients over a Poisson sample. For Feature-DP this is
Theorem 5 of feature-dp.txt: the trade-off
T(N(0,s)^T, ((1-p)N(0,s) + pN(tau,s))^T) is exactly the Poisson-subsampled
Gaussian under add/remove, with the simulator of Definition 6 supplying the
public features. The public batch (Algorithm 1, line 5) costs nothing.
"""

from __future__ import annotations

from dp_accounting import dp_event

from dpcare.privacy.validation import check_noise_multiplier, check_sampling_rate, check_steps


def sampled_gaussian_event(sampling_rate: float, noise_multiplier: float, steps: int) -> dp_event.DpEvent:
    """``steps`` Poisson-sampled Gaussian mechanisms with rate q and noise multiplier sigma."""
    q = check_sampling_rate(sampling_rate)
    sigma = check_noise_multiplier(noise_multiplier)
    if check_steps(steps) == 0:
        return dp_event.NoOpDpEvent()
    step: dp_event.DpEvent = dp_event.GaussianDpEvent(sigma)
    if q < 1.0:
        step = dp_event.PoissonSampledDpEvent(q, step)
    return dp_event.SelfComposedDpEvent(step, steps) if steps > 1 else step


def gaussian_event(noise_multiplier: float) -> dp_event.DpEvent:
    """One Gaussian mechanism with noise std = noise_multiplier x L2 sensitivity
    (e.g. a histogram where one record moves one count by 1)."""
    return dp_event.GaussianDpEvent(check_noise_multiplier(noise_multiplier))


def laplace_event(noise_multiplier: float) -> dp_event.DpEvent:
    """One Laplace mechanism with scale = noise_multiplier x L1 sensitivity."""
    return dp_event.LaplaceDpEvent(check_noise_multiplier(noise_multiplier))
