"""Epsilon and delta of a dp-accounting event, with the PLD (default) or RDP accountant."""

from __future__ import annotations

import logging

from dp_accounting import dp_event, privacy_accountant
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

from dpcare.privacy.validation import check_delta, check_epsilon

ACCOUNTANTS = ("pld", "rdp")
#: 1e-3 is visibly looser than RDP at large sigma and many steps (design.md)
PLD_DISCRETIZATION = 1e-4
RDP_ORDERS = tuple(rdp_privacy_accountant.DEFAULT_RDP_ORDERS)


class _QuietNonConvergence(logging.Filter):
    """dp-accounting logs each fractional RDP order it drops (it then uses the others, which is sound)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "failed to converge" not in record.getMessage()


logging.getLogger("absl").addFilter(_QuietNonConvergence())


def make_accountant(name: str = "pld", pld_discretization: float = PLD_DISCRETIZATION
                    ) -> privacy_accountant.PrivacyAccountant:
    if name == "pld":
        return pld_privacy_accountant.PLDAccountant(value_discretization_interval=pld_discretization)
    if name == "rdp":
        return rdp_privacy_accountant.RdpAccountant(orders=RDP_ORDERS)
    raise ValueError(f"accountant must be one of {ACCOUNTANTS}, got {name!r}")


def _composed(event: dp_event.DpEvent, name: str, pld_discretization: float) -> privacy_accountant.PrivacyAccountant:
    acc = make_accountant(name, pld_discretization)
    if not acc.supports(event):
        raise ValueError(f"the {name} accountant does not support the event {event}")
    acc.compose(event)
    return acc


def compute_epsilon(event: dp_event.DpEvent, delta: float, accountant: str = "pld",
                    pld_discretization: float = PLD_DISCRETIZATION) -> float:
    """Smallest epsilon (for this accountant) such that ``event`` is (epsilon, delta)-DP."""
    check_delta(delta)
    return float(_composed(event, accountant, pld_discretization).get_epsilon(delta))


def compute_delta(event: dp_event.DpEvent, epsilon: float, accountant: str = "pld",
                  pld_discretization: float = PLD_DISCRETIZATION) -> float:
    check_epsilon(epsilon)
    return float(_composed(event, accountant, pld_discretization).get_delta(epsilon))
