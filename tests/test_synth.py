"""DP-2Stage building blocks: serialisation, token roles, the weighted loss, uniform pseudo data."""

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import SPEC, toy_table

from dpcare.data import TableSchema, load_table
from dpcare.privacy import PrivacyLedger
from dpcare.synth import KEY, OTHER, VALUE, RowSerializer, uniform_pseudo_table, weighted_token_loss


def table():
    schema = TableSchema.from_dict(SPEC)
    return schema, load_table(toy_table(50), schema)


def test_serialization_round_trips_with_target_first():
    schema, df = table()
    ser = RowSerializer(schema, decimals={"age": 1, "hr": 0, "lab": 2})
    for _, row in df.iterrows():
        text, spans = ser.text(row)
        assert text.startswith("death is ")
        parsed = ser.parse(text)
        assert parsed["sex"] == row["sex"] and parsed["group"] == row["group"] and parsed["death"] == row["death"]
        assert float(parsed["age"]) == pytest.approx(row["age"], abs=0.05)
        assert parsed["lab"] == "missing" if np.isnan(row["lab"]) else float(parsed["lab"]) == pytest.approx(
            row["lab"], abs=0.005)
        for s in spans:  # spans point at exactly the keys and values
            assert text[s.start:s.end] == (s.column if s.kind == "key" else parsed[s.column])
    last, _ = RowSerializer(schema, order="target-last").text(df.iloc[0])
    assert not last.startswith("death is ") and last.rsplit(", ", 1)[1] == f"death is {df.iloc[0]['death']}"
    shuffled, _ = RowSerializer(schema, order="shuffle").text(df.iloc[0], rng=np.random.default_rng(1))
    assert RowSerializer(schema).parse(shuffled).keys() == ser.parse(text).keys()
    with pytest.raises(ValueError, match="cannot parse"):
        ser.parse("death=1, age is 3")


def test_weighted_loss_equals_its_formula():
    torch.manual_seed(0)
    logits = torch.randn(2, 6, 11, dtype=torch.float64)
    ids = torch.randint(0, 11, (2, 6))
    roles = torch.tensor([[KEY, OTHER, VALUE, VALUE, OTHER, KEY], [KEY, VALUE, OTHER, VALUE, KEY, OTHER]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    got = weighted_token_loss(logits, ids, roles, mask, lam=0.65)
    for b in range(2):
        want = 0.0
        for t in range(1, 6):
            if mask[b, t]:
                nll = -F.log_softmax(logits[b, t - 1], -1)[ids[b, t]]
                want += (0.65 if roles[b, t] == VALUE else 0.35) * nll
        assert float(got[b]) == pytest.approx(float(want))
    with pytest.raises(ValueError, match="lambda"):
        weighted_token_loss(logits, ids, roles, mask, lam=1.5)


def test_uniform_pseudo_data_never_reads_private_values_unless_charged():
    schema, df = table()
    pseudo = uniform_pseudo_table(schema, 500, seed=0)  # every bound declared: no table needed at all
    assert pseudo["age"].between(18, 100).all() and set(pseudo["sex"]) == {"female", "male"}
    assert list(pseudo.columns) == [c.name for c in schema.columns]
    d = json.loads(json.dumps(SPEC))
    del d["columns"][0]["bounds"]
    undeclared = TableSchema.from_dict(d)
    with pytest.raises(ValueError, match="no public bounds"):
        uniform_pseudo_table(undeclared, 10)
    big = load_table(toy_table(3000), undeclared)
    ledger = PrivacyLedger(len(big))
    pseudo = uniform_pseudo_table(undeclared, 100, private_table=big, ledger=ledger, stats_epsilon=0.5, noise_seed=0)
    assert [e.name for e in ledger.entries] == ["dp bounds of age"] and 0 < ledger.epsilon() <= 0.5
    assert pseudo["age"].min() >= 10 and pseudo["age"].max() <= 150
    with pytest.raises(ValueError, match="n must be"):
        uniform_pseudo_table(schema, 0)
