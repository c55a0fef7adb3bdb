"""Privacy accounting for dpcare (pure math, no torch).

Built on Google's dp-accounting: events describe what a run releases, the PLD
(default) or RDP accountant turns them into (epsilon, delta), calibration finds
the smallest noise for a target, the ledger composes every private release of a
run, and a :class:`Guarantee` states what is (and is not) protected.
"""

from dpcare.privacy.accountants import (
    PLD_DISCRETIZATION,
    RDP_ORDERS,
    compute_delta,
    compute_epsilon,
    make_accountant,
)
from dpcare.privacy.budget import Budget, Release, Spent, compose, guard_run, planned_training
from dpcare.privacy.calibration import calibrate_noise_multiplier, calibrate_zcdp_rho
from dpcare.privacy.events import (
    event_from_json,
    event_to_json,
    gaussian_event,
    laplace_event,
    sampled_gaussian_event,
    zcdp_event,
)
from dpcare.privacy.guarantee import NEIGHBOURING, Guarantee, ProtectedUnit
from dpcare.privacy.ledger import Entry, PrivacyLedger
from dpcare.privacy.randomness import (
    ReproducibleNoiseWarning,
    reproducible_noise_note,
    secret_rng,
    secret_seed,
    warn_if_reproducible,
)
from dpcare.privacy.validation import (
    WeakDeltaWarning,
    check_delta,
    check_epsilon,
    check_noise_multiplier,
    check_sampling_rate,
    check_steps,
    default_delta,
    legacy_delta,
    n_delta,
)

__all__ = [
    "NEIGHBOURING", "PLD_DISCRETIZATION", "RDP_ORDERS", "Budget", "Entry", "Guarantee", "PrivacyLedger", "ProtectedUnit", "Release",
    "ReproducibleNoiseWarning", "Spent", "WeakDeltaWarning", "calibrate_noise_multiplier", "calibrate_zcdp_rho", "check_delta", "check_epsilon", "check_noise_multiplier",
    "check_sampling_rate", "check_steps", "compose", "compute_delta", "compute_epsilon", "default_delta",
    "event_from_json", "event_to_json", "gaussian_event", "guard_run", "laplace_event", "legacy_delta", "make_accountant", "n_delta",
    "planned_training", "reproducible_noise_note", "sampled_gaussian_event", "secret_rng", "secret_seed",
    "warn_if_reproducible", "zcdp_event",
]
