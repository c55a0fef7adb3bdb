"""The secret draws of a private run (Poisson sampling, Gaussian noise), one named :class:`Stream` each.

Every stream is spawned from the run's secret root (:func:`dpcare.privacy.secret_seed`) by NumPy's
``SeedSequence`` with its name as the key, so the streams of one run are independent and those of runs with
different roots never coincide. (Before, the streams were the root plus 0, 2, 4 and 5: with pinned noise
seeds, LiRA shadow k's noise was shadow k+2's sampling.)

Two modes, chosen by ``noise_seed``:

* **secure** (``noise_seed=None``, the default; the root is 128 bits of OS entropy): every draw (one step's
  Poisson sample, one step's noise vector, one count's noise) comes from a FRESH generator, seeded by
  ``SeedSequence(root, (stream, draw number))`` with its full 128-bit state: no pseudo-random state lives
  across steps whose outputs could be pieced together (torch's CPU generator is a Mersenne Twister seeded with
  32 bits). Each Gaussian coordinate is the sum of SECURE_SUMMANDS = 4 draws of std sigma / 2
  (:func:`~dpcare.privacy.randomness.summed_normal`, on the CPU from NumPy, on CUDA from torch), which is
  again N(0, sigma^2) but hides the floating-point artefacts of one draw's sampler (Holohan & Braghin 2021,
  "Secure random sampling in differential privacy", ESORICS; the defence Opacus' ``secure_mode`` uses). Opacus
  also draws from a CSPRNG (torchcsprng, unmaintained); here the generators are NumPy's PCG64DXSM on the CPU and torch's Philox on CUDA (64-bit seed), each seeded
  afresh per draw from the secret root. The draws are a function of the root and the draw number, so a resumed
  run (root kept in its checkpoint folder) repeats the noise of the steps it replays instead of releasing a
  second draw of them.
* **reproducible** (an integer ``noise_seed``, for tests and published numbers): one seeded torch generator per
  stream, plain ``torch.rand`` / ``torch.normal``.

``benchmarks/bench_dp_step.py`` measures the secure mode's cost beside the reproducible one.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch
from torch import Tensor

from dpcare.privacy.randomness import secure_normal, sub_root, summed_normal


def seeded_generator(seed: int, device: torch.device | str = "cpu") -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


class Stream:
    """One named stream of a run's secret randomness (see the module docstring for the two modes)."""

    def __init__(self, root: int, name: str, secure: bool, device: torch.device | str = "cpu"):
        self.root, self.name, self.secure, self.device = int(root), name, bool(secure), torch.device(device)
        self._key = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big")
        self.draws = 0  # secure mode: draws so far (the next draw's number)
        self._generator = None if secure else seeded_generator(sub_root(root, name), self.device)

    def _fresh_seed(self) -> np.random.SeedSequence:
        seq = np.random.SeedSequence(self.root, spawn_key=(self._key, self.draws))
        self.draws += 1
        return seq

    def rand(self, n: int) -> Tensor:
        """``n`` uniforms in [0, 1) on the CPU (float64 in the secure mode, float32 otherwise)."""
        if not self.secure:
            return torch.rand(n, generator=self._generator)
        return torch.from_numpy(np.random.Generator(np.random.PCG64DXSM(self._fresh_seed())).random(n))

    def normal(self, shape: tuple[int, ...] | torch.Size, std: float, dtype: torch.dtype = torch.float32) -> Tensor:
        """N(0, std^2) of ``shape`` on the stream's device."""
        if not self.secure:
            return torch.normal(0.0, std, size=tuple(shape), generator=self._generator, device=self.device,
                                dtype=dtype)
        seq = self._fresh_seed()
        if self.device.type == "cpu":
            return torch.from_numpy(secure_normal(np.random.Generator(np.random.PCG64DXSM(seq)), std, tuple(shape))
                                    ).to(dtype)
        g = seeded_generator(int(seq.generate_state(1, np.uint64)[0]) >> 1, self.device)
        return summed_normal(lambda: torch.randn(tuple(shape), generator=g, device=self.device), std).to(dtype)

    def state_dict(self) -> dict:
        return {"draws": self.draws} if self.secure else {"generator": self._generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        if self.secure:
            self.draws = int(state["draws"])
        else:
            self._generator.set_state(state["generator"])


__all__ = ["Stream", "seeded_generator"]
