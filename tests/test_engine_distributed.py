"""DP training on torch.distributed, 2 processes with gloo on the CPU (dpcare.engine.distributed):
(a) the same sampled units, noise and guarantee as the one-process run, parameters equal up to the order of
floating-point additions; (b) the update's noise has standard deviation sigma C / (q n), which fails if
every rank adds the full noise or a rank divides by its realised batch; (c) a patient's rows stay on one
rank; resuming takes every rank to rank 0's checkpointed step."""

import pytest
import torch
import torch.multiprocessing as mp
from distributed_workers import (
    NOISE_BATCH,
    NOISE_C,
    NOISE_N,
    NOISE_SIGMA,
    grouped_data,
    mismatch_worker,
    noise_run,
    patient_run,
    worker,
)

from dpcare.engine import distributed

WORLD = 2


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ddp")
    mp.start_processes(worker, args=(WORLD, str(folder / "store"), str(folder)), nprocs=WORLD, join=True,
                       start_method="spawn")
    return [torch.load(folder / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]


@pytest.fixture(scope="module")
def single():
    model, trainer = patient_run()
    return model, trainer


def test_two_processes_train_the_one_process_model(ranks, single):
    model, trainer = single
    for r in ranks:  # every rank holds the same model: one all-reduced sum, one shared noise draw
        for a, b in zip(r["params"], ranks[0]["params"]):
            assert torch.equal(a, b)
    for got, want in zip(ranks[0]["params"], model.parameters()):
        torch.testing.assert_close(got, want.detach(), rtol=0, atol=1e-6)  # summation order only
    # the same units were sampled, step by step (the union of the ranks' shards)
    union = [{**a, **b} for a, b in zip(ranks[0]["seen"], ranks[1]["seen"])]
    assert union == trainer.seen


def test_the_distributed_run_states_the_one_process_guarantee(ranks, single):
    _, trainer = single
    for r in ranks:
        assert (r["unit"], r["n"]) == ("patient", trainer.ledger.n)
        assert r["noise_multiplier"] == trainer.noise_multiplier and r["epsilon"] == trainer.ledger.epsilon()


def test_a_patient_is_clipped_whole_on_one_rank(ranks):
    _, groups = grouped_data()
    rows_of = torch.bincount(groups).tolist()
    for a, b in zip(ranks[0]["seen"], ranks[1]["seen"]):
        assert not set(a) & set(b)  # no patient on both ranks in a step
        for seen in (a, b):
            assert all(rows == rows_of[pid] for pid, rows in seen.items())  # all its rows, together
    assert any(ranks[1]["seen"]) and any(ranks[0]["seen"])  # both ranks did work


def test_the_update_noise_is_sigma_c_over_the_expected_global_batch(ranks):
    want = NOISE_SIGMA * NOISE_C / NOISE_BATCH  # q n = the expected batch, not a rank's realised one
    steps = torch.stack(ranks[0]["noise_steps"])
    assert steps.std().item() == pytest.approx(want, rel=0.02)
    torch.testing.assert_close(steps, torch.stack(noise_run()), rtol=0, atol=1e-7)  # = the one-process noise
    assert NOISE_BATCH < NOISE_N


def test_every_rank_draws_from_rank_zeros_secret_noise_root(ranks, single):
    # noise_seed None: fresh OS entropy per process; a rank drawing its own root would add other noise
    for a, b in zip(ranks[0]["secret"], ranks[1]["secret"]):
        assert torch.equal(a, b)
    assert not all(torch.equal(a, b.detach()) for a, b in zip(ranks[0]["secret"], single[0].parameters()))


def test_a_resumed_distributed_run_continues_from_rank_zero(ranks):
    for r in ranks:
        for a, b in zip(r["resumed"], ranks[0]["params"]):
            assert torch.equal(a, b)


def test_ranks_holding_different_data_stop_before_any_step(tmp_path):
    """Rank 1 with one value changed, then with the rows in another order: every rank raises the same error,
    naming rank 1, before a step or a charge (a person clipped on two ranks, a sample not the one accounted)."""
    mp.start_processes(mismatch_worker, args=(WORLD, str(tmp_path / "store"), str(tmp_path)), nprocs=WORLD,
                       join=True, start_method="spawn")
    for r in range(WORLD):
        report = torch.load(tmp_path / f"mismatch{r}.pt", weights_only=False)
        for case in ("value", "order"):
            assert report[case].startswith("ranks [1] hold different private data"), report[case]
            assert report[case + "_steps"] == 0 and report[case + "_charges"] == 0


def test_the_data_fingerprint_sees_values_order_shapes_and_ids(monkeypatch):
    data, groups = grouped_data()
    base = distributed.data_fingerprint(data, groups)
    assert distributed.data_fingerprint(dict(reversed(list(data.items()))), groups) == base  # key order: no matter
    changed = {**data, "y": data["y"].clone()}
    changed["y"][5] = 1 - changed["y"][5]
    assert distributed.data_fingerprint(changed, groups) != base
    assert distributed.data_fingerprint(data, groups.flip(0)) != base
    assert distributed.data_fingerprint(data) != base
    assert distributed.data_fingerprint({**data, "x": data["x"].double()}, groups) != base
    # large tensors: a strided sample (plus the shapes), so a changed sampled element or a shape is still seen
    monkeypatch.setattr(distributed, "FULL_HASH_ELEMENTS", 10)
    x = torch.arange(1000.0)
    big = distributed.data_fingerprint({"x": x})
    assert distributed.data_fingerprint({"x": x.clone().index_fill_(0, torch.tensor([0]), -1.0)}) != big
    assert distributed.data_fingerprint({"x": x[:999]}) != big
    assert distributed.data_fingerprint({"x": x.to(torch.bfloat16)}) != big  # any dtype hashes
    distributed.check_same_data(data, groups)  # one process: nothing to compare


def test_one_process_is_rank_zero_of_one():
    assert distributed.world() == (0, 1) and distributed.is_main()
    units = torch.arange(10)
    assert torch.equal(distributed.shard(units, 0, 1), units)
    assert distributed.shard(units, 1, 2).tolist() == [1, 3, 5, 7, 9]


def test_a_stray_rank_variable_in_a_one_process_run_keeps_the_budget_and_the_run_folder(monkeypatch):
    from dpcare.runtime import process_rank

    monkeypatch.setenv("RANK", "3")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert process_rank() == 0  # not a torchrun worker: it reserves budget and writes --out
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert process_rank() == 3
    monkeypatch.setenv("RANK", "")
    assert process_rank() == 0
