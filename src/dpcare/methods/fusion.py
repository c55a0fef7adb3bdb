"""The hybrid DP family of FusionDP (Zeng et al., Section 4, Table 1), as objectives on the engine.

Batch keys: ``x`` original row, ``x_hyb`` the hybrid row (private features
imputed from public ones), ``x_pub`` the row with private features masked by
Gaussian noise (pad(Psi(x))), ``y`` the label. With a reference view r and the
public view v of each method:

    l_priv = l(x) - [l(r)] + beta * ||h(x) - h(r)||^2      clipped + noised (Poisson batch)
    l_pub  = l(v)                                           exact (separate uniform batch)

| method            | r      | v      | beta |
| Naive Fusion      | -      | x_hyb  | 0    |
| Naive Fusion-Pub  | -      | x_pub  | 0    |
| Feature-DP        | x_pub  | x_pub  | 0    |
| Calibrated Fusion | x_hyb  | x_hyb  | 0    |
| FusionDP          | x_hyb  | x_hyb  | > 0  |

h is the hidden layer before the head (``model(x, return_hidden=True)``).
"""

from __future__ import annotations

from collections.abc import Callable

from dpcare.methods.tabular import FeatureDP, HybridObjective, LossFn, task_loss
from dpcare.registry import Registry

#: name -> factory(loss=...); beta of FusionDP is set per run
HYBRID_METHODS: Registry[Callable[..., HybridObjective]] = Registry("hybrid method")


@HYBRID_METHODS.register("naive-fusion")
def naive_fusion(loss: LossFn = task_loss) -> HybridObjective:
    return HybridObjective("naive-fusion", None, "x_hyb", loss=loss)


@HYBRID_METHODS.register("naive-fusion-pub")
def naive_fusion_pub(loss: LossFn = task_loss) -> HybridObjective:
    return HybridObjective("naive-fusion-pub", None, "x_pub", loss=loss)


@HYBRID_METHODS.register("feature-dp")
def feature_dp(loss: LossFn = task_loss) -> HybridObjective:
    return FeatureDP(loss)


@HYBRID_METHODS.register("calibrated-fusion")
def calibrated_fusion(loss: LossFn = task_loss) -> HybridObjective:
    return HybridObjective("calibrated-fusion", "x_hyb", "x_hyb", loss=loss)


@HYBRID_METHODS.register("fusiondp")
def fusiondp(beta: float = 0.1, loss: LossFn = task_loss) -> HybridObjective:
    return HybridObjective("fusiondp", "x_hyb", "x_hyb", beta=beta, loss=loss)

