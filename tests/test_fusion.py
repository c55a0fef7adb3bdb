"""FusionDP: imputers, the hybrid objectives' gradients, hybrid data, and the benchmark runner."""

import math

import pandas as pd
import pytest
import torch
from helpers import SPEC, toy_table
from torch import nn

from dpcare.data import TableSchema, load_dataset, load_table, public_view
from dpcare.engine.fast_clipping import clipped_sum_fast
from dpcare.engine.functorch_backend import clipped_sum_functorch
from dpcare.exceptions import NotFittedError
from dpcare.fusion import GradientBoostingImputer, TabPFNImputer, imputation_quality, make_imputer
from dpcare.methods.fusion import (
    HYBRID_METHODS,
    calibrated_fusion,
    feature_dp,
    fusiondp,
    naive_fusion,
)
from dpcare.studies.fusiondp import FusionBenchmark, prepare_splits, run_benchmark


def support_and_query():
    schema = TableSchema.from_dict(SPEC)
    df = load_table(toy_table(600), schema)
    return schema, df.iloc[:300], df.iloc[300:].reset_index(drop=True)


def test_imputer_never_reads_the_private_values_it_imputes():
    schema, support, query = support_and_query()
    imp = GradientBoostingImputer(max_iter=30).fit(support, schema)
    pred = imp.predict(public_view(query, schema))
    other = query.assign(age=100.0 - query["age"] + 18, sex=query["sex"].map({"female": "male", "male": "female"}))
    pd.testing.assert_frame_equal(pred, imp.predict(public_view(other, schema)))
    with pytest.raises(ValueError, match="private columns"):
        imp.predict(query)
    assert list(pred.columns) == ["age", "sex"] and len(pred) == len(query)
    assert set(pred["sex"]) <= {"female", "male"}


def test_imputation_quality_reports_baselines():
    schema, support, query = support_and_query()
    q = imputation_quality(GradientBoostingImputer(max_iter=30).fit(support, schema), query)
    assert set(q) == {"age", "sex"}
    assert {"mae", "median_baseline_mae"} <= set(q["age"]) and {"accuracy", "majority_baseline"} <= set(q["sex"])


def test_imputer_bad_inputs():
    schema, support, _ = support_and_query()
    no_public = schema.with_roles(["age", "sex", "hr", "lab", "group"])
    with pytest.raises(ValueError, match="at least one public column"):
        GradientBoostingImputer().fit(support, no_public)
    with pytest.raises(ValueError, match="no rows"):
        GradientBoostingImputer().fit(support.iloc[:0], schema)
    with pytest.raises(FileNotFoundError, match="TabPFN categorical checkpoint not found"):
        TabPFNImputer("/nonexistent/clf.ckpt", "/nonexistent/reg.ckpt")
    with pytest.raises(ValueError, match="unknown imputer"):
        make_imputer("oracle")
    with pytest.raises(NotFittedError, match="fit"):
        GradientBoostingImputer().predict(public_view(support, schema))


class LinearHidden(nn.Module):
    """z = v . (A x + a) + c with h = A x + a: gradients in closed form."""

    def __init__(self, d=5, k=3):
        super().__init__()
        self.body, self.head = nn.Linear(d, k), nn.Linear(k, 1)

    def forward(self, x, return_hidden=False):
        h = self.body(x)
        return (self.head(h), h) if return_hidden else self.head(h)


def closed_form(model, x, y):
    """Gradients of BCE(z, y) for one example, by hand."""
    A, a, v, c = model.body.weight, model.body.bias, model.head.weight[0], model.head.bias
    h = A @ x + a
    e = torch.sigmoid(v @ h + c) - y
    return {"body.weight": e * torch.outer(v, x), "body.bias": e * v, "head.weight": (e * h)[None, :],
            "head.bias": e.reshape(1)}, h


@pytest.mark.parametrize("backend", [clipped_sum_fast, clipped_sum_functorch])
@pytest.mark.parametrize("name", ["naive-fusion", "feature-dp", "calibrated-fusion", "fusiondp"])
def test_private_loss_gradient_equals_its_formula(backend, name):
    torch.manual_seed(0)
    model = LinearHidden().double()
    beta = 0.3
    objective = {"naive-fusion": naive_fusion, "feature-dp": feature_dp, "calibrated-fusion": calibrated_fusion,
                 "fusiondp": lambda: fusiondp(beta)}[name]()
    x, x_hyb, x_pub = (torch.randn(5, dtype=torch.float64) for _ in range(3))
    y = torch.tensor(1.0, dtype=torch.float64)
    batch = {"x": x[None], "x_hyb": x_hyb[None], "x_pub": x_pub[None], "y": y[None]}
    got, _ = backend(model, objective.private_loss, batch, dict(model.named_parameters()), 1e9)
    with torch.no_grad():
        g, h = closed_form(model, x, y)
        ref = {"naive-fusion": None, "feature-dp": x_pub, "calibrated-fusion": x_hyb, "fusiondp": x_hyb}[name]
        want = dict(g)
        if ref is not None:
            g_r, h_r = closed_form(model, ref, y)
            want = {k: g[k] - g_r[k] for k in g}
        if name == "fusiondp":  # beta ||A (x - x_r)||^2
            want["body.weight"] = want["body.weight"] + 2 * beta * torch.outer(h - h_r, x - ref)
    for k in want:
        torch.testing.assert_close(got[k], want[k], msg=k)


def test_public_losses_read_only_public_views():
    for name in HYBRID_METHODS.names():
        objective = HYBRID_METHODS.get(name)()
        assert set(objective.public_keys) <= {"x_hyb", "x_pub", "y"}, name


def test_hybrid_rows_keep_public_values_exactly():
    df, schema = load_dataset("support2")
    prep = prepare_splits(df.iloc[:1500], schema, seed=0)
    from dpcare.data import TableEncoder

    mask = TableEncoder(schema, protect="all").fit(df.iloc[:10]).private_feature_mask
    for split in ("train", "val", "test"):
        t = prep.tensors[split]
        assert torch.equal(t["x_hyb"][:, ~mask], t["x"][:, ~mask])
        assert torch.equal(t["x_pub"][:, ~mask], t["x"][:, ~mask])
        assert not torch.equal(t["x_hyb"][:, mask], t["x"][:, mask])  # the private part is imputed


@pytest.mark.slow  # end to end
def test_quick_benchmark_runs_every_method(tmp_path):
    df, schema = load_dataset("support2")
    bench = FusionBenchmark.quick()
    bench.workers = 1
    bench.epsilons = (1.0,)
    table = run_benchmark(df.sample(2500, random_state=0), schema, bench, tmp_path, progress=False)
    assert set(table["method"]) == set(bench.methods)
    private = table[table["target_epsilon"] < math.inf]
    assert (private["epsilon"] <= private["target_epsilon"] + 1e-9).all()
    assert (table["auprc"].between(0, 1)).all()
    for f in ("table.csv", "table.md", "auprc_vs_epsilon.png", "runs.csv", "imputation.json"):
        assert (tmp_path / f).exists(), f
    assert "does not count" in (tmp_path / "table.md").read_text()


def test_charged_tuning_counts_candidates_and_selection(tmp_path):
    df, schema = load_dataset("support2")
    bench = FusionBenchmark.quick()
    bench.workers, bench.epsilons, bench.clip_grid = 1, (1.0,), (0.1, 1.0)
    bench.methods, bench.charge_tuning = ("sgd-org", "dp-sgd", "calibrated-fusion"), True
    table = run_benchmark(df.sample(2000, random_state=1), schema, bench, tmp_path, progress=False)
    runs = pd.read_csv(tmp_path / "runs.csv")
    assert len(runs) == 1 + 2 + 2  # every grid candidate trained once per seed
    private = table[table["target_epsilon"] < math.inf]
    assert ((private["epsilon"] <= 1.0) & (private["epsilon"] > 0.97)).all()
    # each candidate alone is well below the target: the budget was shared by K trainings + selection
    cands = runs[runs["method"] != "sgd-org"]
    assert (cands["epsilon"] < 0.85).all()
    assert "counted" in (tmp_path / "table.md").read_text()
