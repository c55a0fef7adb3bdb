"""The private training engine: one loop, any per-example objective."""

from dpcare.engine.objective import Objective
from dpcare.engine.trainer import TrainConfig, Trainer, TrainResult

__all__ = ["Objective", "TrainConfig", "TrainResult", "Trainer"]
