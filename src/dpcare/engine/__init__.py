"""The private training engine: one loop, any per-example objective."""

from dpcare.engine.adaptive_clip import AdaptiveClip
from dpcare.engine.objective import Objective
from dpcare.engine.trainer import TrainConfig, Trainer, TrainResult

__all__ = ["AdaptiveClip", "Objective", "TrainConfig", "TrainResult", "Trainer"]
