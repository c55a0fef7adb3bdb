"""The language-model imputer and local LM loading."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import SPEC, toy_table
from lm_fixtures import tiny_gpt2

from dpcare.data import TableSchema, load_table, public_view
from dpcare.fusion.lm_imputer import LanguageModelImputer, serialize
from dpcare.lm import load_causal_lm


def frames():
    schema = TableSchema.from_dict(SPEC)
    df = load_table(toy_table(60), schema)
    return schema, df.iloc[:30], df.iloc[30:42].reset_index(drop=True)


def test_serialization_reads_like_the_paper():
    row = pd.Series({"hr": 91.0, "lab": float("nan"), "group": "c"})
    assert serialize(row, ["hr", "lab", "group"]) == "hr is 91, lab is unknown, group is c"


def test_lm_imputer_outputs_are_valid_and_ignore_private_values():
    schema, support, query = frames()
    imp = LanguageModelImputer(lm=tiny_gpt2(), shots=3, batch_size=4, max_new_tokens=3).fit(support, schema)
    pred = imp.predict(public_view(query, schema))
    assert set(pred["sex"]) <= {"female", "male"}  # chosen among the declared categories
    assert pred["age"].between(18, 100).all()  # parsed in bounds, else the support median
    assert imp.parse_failures["age"] <= len(query)
    other = query.assign(age=18.0, sex="male")
    pd.testing.assert_frame_equal(pred, imp.predict(public_view(other, schema)))
    with pytest.raises(ValueError, match="private columns"):
        imp.predict(query)


def test_numeric_parsing_rejects_garbage_and_out_of_bounds():
    spec = TableSchema.from_dict(SPEC).column("age")
    assert LanguageModelImputer._parse(" 63, sex is", spec) == 63.0
    assert LanguageModelImputer._parse(" 430", spec) is None
    assert LanguageModelImputer._parse(" old", spec) is None


def test_load_causal_lm_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="unknown model path"):
        load_causal_lm(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="config.json"):
        load_causal_lm(tmp_path / "empty")
    bert = tmp_path / "bert"
    bert.mkdir()
    (bert / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertModel"]}))
    with pytest.raises(ValueError, match="not a causal language model"):
        load_causal_lm(bert)


def test_saved_tiny_gpt2_folder_loads(tmp_path):
    model, tok = tiny_gpt2()
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    loaded, loaded_tok = load_causal_lm(tmp_path)
    assert type(loaded).__name__ == "GPT2LMHeadModel" and loaded_tok.pad_token is not None


@pytest.mark.slow  # end to end
def test_a_conversion_finished_first_by_another_process_is_used(tmp_path, monkeypatch):
    """Parallel benchmark workers on a fresh machine each convert the GGUF; the one that finishes second must
    use the first one's folder instead of failing on a non-empty target."""
    import os

    import dpcare.lm as lm

    monkeypatch.setenv("DPCARE_CACHE", str(tmp_path))
    real_replace = os.replace
    target = tmp_path / "smollm2-135m-instruct"

    def other_process_wins(src, dst):
        if Path(dst) == target:  # the other worker's folder lands just before ours
            target.mkdir()
            (target / "config.json").write_text("{}")
        return real_replace(src, dst)

    monkeypatch.setattr(lm.os, "replace", other_process_wins)
    assert lm.smollm2_folder() == target
    assert [p.name for p in tmp_path.iterdir()] == [target.name]  # no temporary folder left
    assert (target / "config.json").read_text() == "{}"  # theirs, kept


def test_smollm2_from_the_wheel_imputes_a_few_rows():
    """The real model: converted from the wheel's GGUF once (cached), then used in context."""
    schema, support, query = frames()
    imp = LanguageModelImputer(model="smollm2", shots=3, batch_size=4).fit(support, schema)
    pred = imp.predict(public_view(query.iloc[:4], schema))
    assert set(pred["sex"]) <= {"female", "male"} and pred["age"].between(18, 100).all()
    assert np.isfinite(pred["age"]).all()


def test_prefix_cache_gives_the_same_answers_as_full_prompts():
    """Batched, padded, cached scoring and decoding equal a plain per-row run over the whole prompt."""
    import torch

    from dpcare.fusion.lm_imputer import NUMBER

    schema, support, query = frames()
    model, tok = tiny_gpt2(seed=4)
    imp = LanguageModelImputer(lm=(model, tok), shots=2, batch_size=3, max_new_tokens=4).fit(support, schema)
    pub = public_view(query, schema)
    pred = imp.predict(pub)
    x = imp._features(pub)
    for i in range(len(query)):
        row = serialize(x.iloc[i], imp.inputs)
        # categorical: likelihood of each category after the full prompt
        prompt = tok(imp._models["sex"]["prefix"] + row + ", sex is", add_special_tokens=False)["input_ids"]
        scores = []
        for cat in ("female", "male"):
            c = tok(" " + cat, add_special_tokens=False)["input_ids"]
            with torch.no_grad():
                logp = torch.log_softmax(model(input_ids=torch.tensor([prompt + c])).logits[0].float(), -1)
            scores.append(sum(float(logp[len(prompt) - 1 + j, t]) for j, t in enumerate(c)))
        assert pred["sex"][i] == ("female", "male")[int(np.argmax(scores))]
        # numeric: greedy continuation of the full prompt
        prompt = tok(imp._models["age"]["prefix"] + row + ", age is", return_tensors="pt", add_special_tokens=False)
        with torch.no_grad():
            gen = model.generate(**prompt, max_new_tokens=4, do_sample=False, pad_token_id=tok.pad_token_id)
        text = tok.decode(gen[0, prompt["input_ids"].shape[1]:], skip_special_tokens=True)
        value = LanguageModelImputer._parse(text, schema.column("age"))
        assert pred["age"][i] == pytest.approx(value if value is not None else imp._models["age"]["fallback"])
    assert NUMBER.search("age is 63")
