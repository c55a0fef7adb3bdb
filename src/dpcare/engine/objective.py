"""What a training method is to the engine: a per-example private loss and a public loss.

The engine computes ``g = g_pub + alpha * noisy(clip_each(grad l_priv))`` (design.md).
A method only defines the two losses; the engine owns sampling, clipping, noise,
accounting and checkpoints.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from torch import Tensor

from dpcare.privacy import ProtectedUnit

Model = Callable[..., Tensor]
Batch = Mapping[str, Tensor]


class Objective:
    """Base class. Subclasses set the class attributes and implement the losses.

    ``private_loss(model, batch)`` returns one loss per example, shape [B]; it may
    call ``model`` several times (one view per call, examples on dimension 0) and
    read a hidden layer with ``model(x, return_hidden=True)``.
    ``public_loss(model, batch)`` reads only public keys of the batch.
    """

    name: str = "objective"
    private: bool = True  # False: ordinary training, no clipping, noise or accounting
    has_public_branch: bool = False
    unit: ProtectedUnit = ProtectedUnit.EXAMPLE
    #: keys of the private batch the private loss reads, and of the public batch
    private_keys: tuple[str, ...] = ("x", "y")
    public_keys: tuple[str, ...] = ("x_pub", "y")

    def private_loss(self, model: Model, batch: Batch) -> Tensor:
        raise NotImplementedError

    def public_loss(self, model: Model, batch: Batch) -> Tensor:
        raise NotImplementedError(f"{self.name} has no public branch")

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
