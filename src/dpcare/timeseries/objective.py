"""The forecasting objective for the engine: the masked MSE of Eq. 1 per window."""

from __future__ import annotations

from torch import Tensor

from dpcare.engine import Objective
from dpcare.timeseries.model import masked_mse


class ForecastLoss(Objective):
    """Per-window masked MSE. ``private=True`` is DP-SGD (per window, or per patient when the trainer
    is given ``groups``); ``private=False`` is ordinary training."""

    private_keys = ("x", "y", "mask")
    public_keys = ()

    def __init__(self, private: bool = True):
        self.private = private
        self.name = "dp-sgd" if private else "non-private"

    def private_loss(self, model, batch) -> Tensor:
        return masked_mse(model(batch["x"]), batch["y"], batch["mask"])
