"""Model backbones."""

from dpcare.models.mlp import TabularMLP
from dpcare.models.transformer import TinyTransformer

__all__ = ["TabularMLP", "TinyTransformer"]
