"""Grouped examples: a patient's rows are sampled, clipped and accounted as one unit."""


import pytest
import torch
from grad_reference import assert_same_clipped_sums
from helpers import crash_at_step
from torch import nn

from dpcare.engine import Objective, TrainConfig, Trainer
from dpcare.engine.fast_clipping import clipped_sum_fast
from dpcare.engine.functorch_backend import clipped_sum_functorch
from dpcare.engine.sampling import UnitIndex
from dpcare.methods import DPSGD, FeatureDP
from dpcare.models import TabularMLP, TinyTransformer
from dpcare.privacy import PrivacyLedger, ProtectedUnit
from dpcare.settings import DPSettings

BACKENDS = {"fast": clipped_sum_fast, "functorch": clipped_sum_functorch}


def loop_over_patients(model, loss_fn, batch, groups, clip):
    """Reference: per patient, the gradient of the SUM of its rows' losses, clipped, then summed."""
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    total = {n: torch.zeros_like(p) for n, p in params.items()}
    norms = []
    for g in torch.unique(groups):
        rows = torch.nonzero(groups == g).flatten()
        part = {k: v[rows] for k, v in batch.items()}
        grads = torch.autograd.grad(loss_fn(model, part).sum(), list(params.values()))
        norm = torch.sqrt(sum(x.pow(2).sum() for x in grads))
        norms.append(norm)
        for n, x in zip(params, grads):
            total[n] += min(1.0, clip / (float(norm) + 1e-6)) * x
    return total, torch.stack(norms)


# patient 7 has many rows, 3 has one, rows of one patient are not contiguous
GROUPS = torch.tensor([7, 3, 7, 9, 7, 9, 7, 7, 2, 7, 7, 2])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("clip", [0.05, 1e3])
def test_grouped_clipping_equals_a_loop_over_patients_mlp(backend, clip):
    torch.manual_seed(0)
    model = TabularMLP(5, hidden=8, dropout=0.0).double()
    g = torch.Generator().manual_seed(1)
    batch = {"x": torch.randn(12, 5, generator=g).double(), "y": (torch.rand(12, generator=g) > 0.5).double()}
    loss_fn = DPSGD().private_loss
    got, norms = BACKENDS[backend](model, loss_fn, batch, dict(model.named_parameters()), clip, GROUPS)
    want, want_norms = loop_over_patients(model, loss_fn, batch, GROUPS, clip)
    assert norms.shape == (4,)
    assert_same_clipped_sums(got, norms, want, want_norms)


class ConvSeq(nn.Module):
    """Embedding, conv, GroupNorm, LayerNorm and Linear: every fast rule in a grouped batch."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 6)
        self.conv = nn.Conv1d(6, 6, 3, padding=1, padding_mode="circular", bias=False)
        self.gn = nn.GroupNorm(2, 6)
        self.ln = nn.LayerNorm(6)
        self.out = nn.Linear(6, 1)

    def forward(self, ids):
        h = self.gn(self.conv(self.emb(ids).transpose(1, 2))).transpose(1, 2)
        return self.out(self.ln(torch.tanh(h))).mean((1, 2))


@pytest.mark.parametrize("backend", BACKENDS)
def test_grouped_clipping_equals_the_loop_for_every_layer_rule(backend):
    torch.manual_seed(3)
    model = ConvSeq().double()
    ids = torch.randint(0, 20, (12, 7))
    ids[0, :3] = 4
    ids[2, :3] = 4  # a token repeated across two rows of the same patient
    batch = {"x": ids, "y": torch.randn(12, dtype=torch.float64)}
    loss_fn = lambda m, b: (m(b["x"]) - b["y"]).pow(2)
    got, norms = BACKENDS[backend](model, loss_fn, batch, dict(model.named_parameters()), 0.3, GROUPS)
    want, want_norms = loop_over_patients(model, loss_fn, batch, GROUPS, 0.3)
    assert_same_clipped_sums(got, norms, want, want_norms)


def test_grouped_transformer_rows_match_the_loop():
    torch.manual_seed(4)
    model = TinyTransformer(vocab=30, max_len=6, dim=8, depth=1, heads=2).double()
    ids = torch.randint(0, 30, (12, 6))
    batch = {"x": ids, "y": torch.randint(0, 2, (12,))}
    loss_fn = lambda m, b: nn.functional.cross_entropy(m(b["x"]), b["y"], reduction="none")
    got, norms = clipped_sum_fast(model, loss_fn, batch, dict(model.named_parameters()), 0.5, GROUPS)
    want, want_norms = loop_over_patients(model, loss_fn, batch, GROUPS, 0.5)
    assert_same_clipped_sums(got, norms, want, want_norms)


@pytest.mark.parametrize("clip", [0.05, 1e3])
def test_a_patient_larger_than_a_micro_batch_is_summed_in_chunks_then_clipped(clip):
    """Patient 7 has 7 rows, more than max_physical_batch = 2: its gradient is accumulated over row chunks
    and clipped as one; the total and the norms equal the loop over patients (the other patients take the
    fast path)."""
    torch.manual_seed(0)
    model = TabularMLP(5, hidden=8, dropout=0.0).double()
    g = torch.Generator().manual_seed(1)
    batch = {"x": torch.randn(12, 5, generator=g).double(), "y": (torch.rand(12, generator=g) > 0.5).double()}
    trainer = Trainer(model, DPSGD(), TrainConfig(dp=DPSettings(batch_size=2, clip_norm=clip), noise_multiplier=1.0,
                                                  max_physical_batch=2, progress=False), ledger=PrivacyLedger(4))
    trainer.units = UnitIndex(GROUPS)
    seen = []
    real = trainer.objective.private_loss
    trainer.objective.private_loss = lambda m, b: seen.append(len(b["x"])) or real(m, b)
    got, norms = trainer._clipped_total(batch, torch.arange(4))
    want, want_norms = loop_over_patients(model, DPSGD().private_loss, batch, GROUPS, clip)
    assert max(seen) <= 2  # no pass held more rows than the micro-batch
    assert_same_clipped_sums(got, norms, want, want_norms)


def test_unit_index_rows_and_chunks_keep_patients_whole():
    units = UnitIndex(GROUPS)
    assert units.n == 4
    for u in range(4):
        rows = units.rows(torch.tensor([u]))
        assert set(GROUPS[rows].tolist()) == {int(torch.unique(GROUPS)[u])}
        assert len(rows) == int((GROUPS == torch.unique(GROUPS)[u]).sum())
    parts = units.chunks(torch.arange(4), max_rows=3)
    assert sorted(torch.cat(parts).tolist()) == list(range(12))
    for p in parts:  # no patient split across micro-batches
        labels = units.labels[p]
        for lab in labels.unique():
            assert int((labels == lab).sum()) == int((units.labels == lab).sum())
    with pytest.raises(ValueError, match="integer"):
        UnitIndex(torch.rand(5))


def _windows(n_patients=20, seed=0):
    g = torch.Generator().manual_seed(seed)
    counts = torch.randint(1, 9, (n_patients,), generator=g)
    groups = torch.repeat_interleave(torch.arange(n_patients) * 10 + 5, counts)
    x = torch.randn(len(groups), 4, generator=g)
    return {"x": x, "y": (x[:, 0] > 0).float()}, groups


def test_patients_are_poisson_sampled_whole_and_the_ledger_counts_patients():
    data, groups = _windows()
    seen = []

    class Spy(DPSGD):
        def private_loss(self, model, batch):
            seen.append(batch["x"])
            return super().private_loss(model, batch)

    trainer = Trainer(TabularMLP(4, hidden=8, dropout=0.0), Spy(),
                      TrainConfig(dp=DPSettings(batch_size=5, steps=40), noise_multiplier=1.0, progress=False))
    result = trainer.fit(data, groups=groups)
    ledger = trainer.ledger
    assert ledger.n == 20 and ledger.unit is ProtectedUnit.PATIENT
    (entry,) = ledger.entries
    assert entry.steps == 40
    assert result.sampling_rate == pytest.approx(5 / 20)  # expected patients / patients, not rows
    assert "patient" in result.guarantee.describe()
    row_of = {tuple(r.tolist()): int(gr) for r, gr in zip(data["x"], groups)}
    for xb in seen:  # every sampled patient arrives with all its rows
        pats = [row_of[tuple(r.tolist())] for r in xb]
        for p in set(pats):
            assert pats.count(p) == int((groups == p).sum())


def test_noise_is_divided_by_the_expected_number_of_patients():
    data, groups = _windows(40)

    class Zero(Objective):
        name = "zero"

        def private_loss(self, model, batch):
            return 0.0 * model(batch["x"])[:, 0]

    sigma, clip, m = 1.1, 0.5, 8
    trainer = Trainer(TabularMLP(4, hidden=256, dropout=0.0), Zero(),
                      TrainConfig(dp=DPSettings(batch_size=m, steps=1, clip_norm=clip), noise_multiplier=sigma,
                                  progress=False))
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.optimizer = torch.optim.SGD(trainer.trainable.values(), lr=1.0)
    trainer.fit(data, groups=groups)
    step = torch.cat([(before[n] - p.detach()).flatten() for n, p in trainer.model.named_parameters()])
    assert step.numel() > 1000
    assert float(step.std()) == pytest.approx(sigma * clip / m, rel=0.05)


def test_grouping_errors_are_named():
    data, groups = _windows()
    cfg = TrainConfig(dp=DPSettings(batch_size=4, steps=1), noise_multiplier=1.0, progress=False)
    with pytest.raises(ValueError, match="one label per private row"):
        Trainer(TabularMLP(4), DPSGD(), cfg).fit(data, groups=groups[:-1])
    views = {**data, "x_pub": data["x"]}
    with pytest.raises(ValueError, match="unit 'features'"):
        Trainer(TabularMLP(4), FeatureDP(), cfg, ledger=PrivacyLedger(len(groups), unit="patient")).fit(
            views, views, groups=groups)
    feature_level = Trainer(TabularMLP(4), FeatureDP(), cfg).fit(views, views, groups=groups)
    assert feature_level.guarantee.unit.value == "features"  # the private features of a patient's rows
    assert feature_level.guarantee.n == len(set(groups.tolist()))
    with pytest.raises(ValueError, match="ledger must count patients"):
        Trainer(TabularMLP(4), DPSGD(), cfg, ledger=PrivacyLedger(len(groups))).fit(data, groups=groups)


def test_killed_grouped_run_resumes_to_the_same_model(tmp_path):
    data, groups = _windows()

    def run(folder, crash_at=None):
        cfg = TrainConfig(dp=DPSettings(batch_size=5, steps=6, noise_seed=0), noise_multiplier=1.0, progress=False,
                          checkpoint_dir=str(folder), checkpoint_every=2)  # the reference run draws the same noise
        torch.manual_seed(0)  # every run starts from the same weights, whatever ran before
        trainer = Trainer(TabularMLP(4, hidden=8, dropout=0.0), DPSGD(), cfg)
        if crash_at is not None:
            crash_at_step(trainer, crash_at)
        trainer.fit(data, groups=groups)
        return trainer

    ref = run(tmp_path / "a")
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "b", crash_at=3)
    resumed = run(tmp_path / "b")
    for (n, p), (_, q) in zip(ref.model.state_dict().items(), resumed.model.state_dict().items()):
        assert torch.equal(p, q), n
    assert resumed.ledger.n == 20 and resumed.ledger.entries[0].steps == 6
