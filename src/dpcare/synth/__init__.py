"""DP-2Stage synthetic tables (dp-2stage.txt): serialisation, token roles, the weighted stage-2 loss, pseudo data.

Work in progress: fitting, sampling and evaluation are not built yet (see the README).
"""

from dpcare.synth.pseudo import uniform_pseudo_table
from dpcare.synth.serialize import RowSerializer, Span
from dpcare.synth.tokens import KEY, OTHER, VALUE, token_roles, weighted_token_loss

__all__ = ["KEY", "OTHER", "VALUE", "RowSerializer", "Span", "token_roles", "uniform_pseudo_table",
           "weighted_token_loss"]
