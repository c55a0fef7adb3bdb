"""The hybrid DP family of fusiondp.txt (Section 4, Table 1), as objectives on the engine.

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

from dpcare.methods.tabular import FeatureDP, HybridObjective


def naive_fusion() -> HybridObjective:
    return HybridObjective("naive-fusion", None, "x_hyb")


def naive_fusion_pub() -> HybridObjective:
    return HybridObjective("naive-fusion-pub", None, "x_pub")


def feature_dp() -> HybridObjective:
    return FeatureDP()


def calibrated_fusion() -> HybridObjective:
    return HybridObjective("calibrated-fusion", "x_hyb", "x_hyb")


def fusiondp(beta: float = 0.1) -> HybridObjective:
    return HybridObjective("fusiondp", "x_hyb", "x_hyb", beta=beta)


#: name -> factory; beta of FusionDP is set per run
HYBRID_METHODS = {"naive-fusion": naive_fusion, "naive-fusion-pub": naive_fusion_pub, "feature-dp": feature_dp,
                  "calibrated-fusion": calibrated_fusion, "fusiondp": fusiondp}
