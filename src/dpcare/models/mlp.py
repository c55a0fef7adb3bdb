"""The tabular MLP backbone of Zeng et al. (FusionDP), Appendix B."""

from __future__ import annotations

from torch import Tensor, nn

from dpcare.exceptions import SettingsError


class TabularMLP(nn.Module):
    """Four linear layers; the first three each followed by GELU, LayerNorm and
    dropout (p=0.15); the last outputs the logits (one for binary tasks).

    The paper does not give the width; we use 256 by default.
    ``forward(x, return_hidden=True)`` also returns the hidden layer before the
    head, which FusionDP's representation-consistency term reads.
    """

    def __init__(self, in_features: int, hidden: int = 256, out_features: int = 1, dropout: float = 0.15,
                 depth: int = 4):
        super().__init__()
        if in_features < 1 or hidden < 1 or out_features < 1 or depth < 2:
            raise SettingsError(f"bad MLP shape: in={in_features}, hidden={hidden}, out={out_features}, depth={depth}")
        layers: list[nn.Module] = []
        width = in_features
        for _ in range(depth - 1):
            layers += [nn.Linear(width, hidden), nn.GELU(), nn.LayerNorm(hidden), nn.Dropout(dropout)]
            width = hidden
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, out_features)
        self.config = {"in_features": in_features, "hidden": hidden, "out_features": out_features,
                       "dropout": dropout, "depth": depth}

    def forward(self, x: Tensor, return_hidden: bool = False):
        h = self.body(x)
        out = self.head(h)
        return (out, h) if return_hidden else out
