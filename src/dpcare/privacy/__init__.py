"""Privacy accounting for dpcare (pure math, no torch).

Built on Google's dp-accounting: events describe what a run releases, the PLD
(default) or RDP accountant turns them into (epsilon, delta), calibration finds
the smallest noise for a target, the ledger composes every private release of a
run, and a :class:`Guarantee` states what is (and is not) protected.

Names load on first use, so a module that needs one submodule (the secret randomness, the validation of an
epsilon) does not import dp-accounting and scipy (about 2.5 s) until an accountant is needed.
"""

from dpcare.lazy import lazy_face

__getattr__, __dir__, __all__ = lazy_face(__name__, {
    **dict.fromkeys(("PLD_DISCRETIZATION", "RDP_ORDERS", "compute_delta", "compute_epsilon", "make_accountant"),
                    "accountants"),
    **dict.fromkeys(("Budget", "Release", "Spent", "compose", "guard_run", "planned_training"), "budget"),
    **dict.fromkeys(("calibrate_noise_multiplier", "calibrate_zcdp_rho"), "calibration"),
    **dict.fromkeys(("event_from_json", "event_to_json", "gaussian_event", "laplace_event", "sampled_gaussian_event",
                     "zcdp_event"),
                    "events"),
    **dict.fromkeys(("NEIGHBOURING", "Guarantee", "ProtectedUnit"), "guarantee"),
    **dict.fromkeys(("Entry", "PrivacyLedger"), "ledger"),
    **dict.fromkeys(("ReproducibleNoiseWarning", "reproducible_noise_note", "secret_rng", "secret_seed",
                     "warn_if_reproducible"),
                    "randomness"),
    **dict.fromkeys(("WeakDeltaWarning", "check_delta", "check_epsilon", "check_noise_multiplier",
                     "check_sampling_rate", "check_steps", "default_delta", "legacy_delta", "n_delta"),
                    "validation"),
})
