"""DP-2Stage with a language model: tokenisation, per-example gradients, objectives, decoding, the Synthesizer."""

import json
import warnings

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import SPEC, toy_table
from test_engine_gradients import reference

from dpcare.data import TableSchema, load_table
from dpcare.engine.fast_clipping import clipped_sum_fast, unsupported_reason
from dpcare.engine.functorch_backend import clipped_sum_functorch
from dpcare.privacy import PrivacyLedger
from dpcare.synth.constraints import MISSING, NumberRule
from dpcare.synth.lm_model import LMSettings, build_lm
from dpcare.synth.objective import TokenLoss
from dpcare.synth.row_tokens import RowTokenizer
from dpcare.synth.serialize import RowSerializer
from dpcare.synth.settings import StageSettings, SynthSettings
from dpcare.synth.synthesizer import Synthesizer
from dpcare.synth.tokens import KEY, OTHER, VALUE, weighted_token_loss

SCHEMA = TableSchema.from_dict(SPEC)



@pytest.fixture(scope="module")
def llama_folder(tmp_path_factory, gpt2_folder):
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    folder = tmp_path_factory.mktemp("tiny-llama")
    tok = AutoTokenizer.from_pretrained(gpt2_folder)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=True)
    LlamaForCausalLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def vocab_texts(schema=SCHEMA):
    return [", ", " is", ",", " missing"] + [t for c in schema.columns
                                              for t in [c.name, " " + c.name, *(" " + v for v in c.categories or ())]]


def encoded(model, tok, n=6):
    rows = RowTokenizer(RowSerializer(SCHEMA, decimals=2), tok)
    data = rows.encode_table(load_table(toy_table(n), SCHEMA))
    data["targets"] = model.to_output(data["ids"])
    return rows, data


# ---------------------------------------------------------------- tokenisation
def test_segments_decode_to_the_serialised_row_and_roles_are_exact(gpt2_folder):
    model, tok = build_lm(LMSettings(model=str(gpt2_folder)), vocab_texts())
    d = json.loads(json.dumps(SPEC))
    d["columns"][2]["name"] = "heart_rate_per_minute"  # a key of several tokens
    schema = TableSchema.from_dict(d)
    df = load_table(toy_table(5).rename(columns={"hr": "heart_rate_per_minute"}), schema)
    ser = RowSerializer(schema, decimals=3)
    rows = RowTokenizer(ser, tok)
    for _, row in df.iterrows():
        ids, roles = rows.encode_row(row)
        assert ids[0] == rows.bos and ids[-1] == rows.eos
        text, _ = ser.text(row)
        assert tok.decode(ids[1:-1]) == text
        by_role = {r: tok.decode([i for i, q in zip(ids, roles) if q == r]) for r in (KEY, VALUE, OTHER)}
        parsed = ser.parse(text)
        assert by_role[VALUE] == "".join(" " + v for v in parsed.values())
        assert by_role[KEY].split() == list(parsed)  # multi-token key "heart_rate_per_minute" is all KEY
        assert len(tok(" heart_rate_per_minute", add_special_tokens=False)["input_ids"]) > 1
        assert set(by_role[OTHER].replace(tok.eos_token, "").split()) <= {"is", ",", "is,"}


def test_encode_table_errors_name_the_problem(gpt2_folder):
    _, tok = build_lm(LMSettings(model=str(gpt2_folder)), vocab_texts())
    rows = RowTokenizer(RowSerializer(SCHEMA), tok)
    with pytest.raises(ValueError, match="no rows"):
        rows.encode_table(load_table(toy_table(5), SCHEMA).iloc[:0])
    with pytest.raises(ValueError, match="lacks the columns.*hr"):
        rows.encode_table(toy_table(5).drop(columns="hr"))


# ---------------------------------------------------------------- gradients and objectives
@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_fast_clipping_of_full_finetuning_matches_per_example_loop(arch, gpt2_folder, llama_folder):
    folder = gpt2_folder if arch == "gpt2" else llama_folder
    model, tok = build_lm(LMSettings(model=str(folder), finetune="full"), vocab_texts())
    model = model.double()
    params = dict((n, p) for n, p in model.named_parameters() if p.requires_grad)
    assert unsupported_reason(model, params) is None  # Conv1D / RMSNorm / position embeddings covered
    _, data = encoded(model, tok, n=4)
    loss = TokenLoss(0.65).private_loss
    got, norms = clipped_sum_fast(model, loss, data, params, 0.5)
    want, want_norms = reference(model, loss, data, 0.5)
    torch.testing.assert_close(norms, want_norms, rtol=1e-6, atol=1e-8)
    for n in want:
        torch.testing.assert_close(got[n], want[n], rtol=1e-6, atol=1e-8)


def test_lora_trains_only_adapters_and_head_with_fast_clipping(llama_folder):
    model, tok = build_lm(LMSettings(model=str(llama_folder), lora_rank=4), vocab_texts())
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n or n == "head.weight" for n in trainable)
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    model = model.double()
    _, data = encoded(model, tok, n=4)
    want, want_norms = reference(model, TokenLoss(0.65).private_loss, data, 1e-3)
    for backend in (clipped_sum_fast, clipped_sum_functorch):  # torch.func: the padding trim must stand aside
        got, norms = backend(model, TokenLoss(0.65).private_loss, data, params, 1e-3)
        torch.testing.assert_close(norms, want_norms, rtol=1e-6, atol=1e-8)
        for n in want:
            torch.testing.assert_close(got[n], want[n], rtol=1e-6, atol=1e-8)


def test_lora_initialisation_follows_the_seed_not_the_global_generator(llama_folder):
    def adapters(seed, global_seed):
        torch.manual_seed(global_seed)  # what ran before the fit in this process
        settings = SynthSettings.for_device("cpu", lm={"model": str(llama_folder), "layers": None}, seed=seed)
        synth = Synthesizer(SCHEMA, settings=settings, progress=False)
        synth._build()
        return {n: p.detach().clone() for n, p in synth.model.named_parameters() if "lora_" in n}

    first = adapters(seed=0, global_seed=1)
    assert first
    again = adapters(seed=0, global_seed=2)
    other = adapters(seed=1, global_seed=1)
    assert all(torch.equal(first[n], again[n]) for n in first)
    assert any(not torch.equal(first[n], other[n]) for n in first)
    adapters(seed=0, global_seed=3)  # and the build leaves the global generator where it was
    after_build = torch.random.get_rng_state()
    torch.manual_seed(3)
    assert torch.equal(after_build, torch.random.get_rng_state())


def test_stage2_loss_is_eq6_and_trimming_changes_nothing(gpt2_folder):
    model, tok = build_lm(LMSettings(model=str(gpt2_folder)), vocab_texts())
    _, data = encoded(model, tok, n=5)
    padded = {k: torch.cat([v, v[:, -1:].repeat(1, 7) * (0 if k in ("roles", "mask") else 1)], 1)
              for k, v in data.items()}
    got = TokenLoss(0.7).private_loss(model, padded)
    logp = torch.log_softmax(model(data["ids"]), -1)
    want = []
    for b in range(5):
        total = 0.0
        for t in range(1, int(data["mask"][b].sum())):
            nll = -logp[b, t - 1, data["targets"][b, t]]
            total += (0.7 if data["roles"][b, t] == VALUE else 0.3) * nll
        want.append(total)
    torch.testing.assert_close(got, torch.stack(want), rtol=1e-5, atol=1e-5)
    plain = TokenLoss(None).private_loss(model, data)
    torch.testing.assert_close(plain, 2 * weighted_token_loss(model(data["ids"]), data["targets"], data["roles"],
                                                              data["mask"], 0.5), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- constraints
def test_number_rule_allows_exactly_the_numbers_inside_the_bounds():
    rule = NumberRule(17, 90, 1, nullable=False)
    assert rule.feasible(" ") and rule.feasible(" 9") and rule.feasible(" 1") and rule.feasible(" 17.")
    for dead in (" 99", " 16", " 16.", " 0", " -", " 100", " 17.55", " m", " 1a"):
        assert not rule.feasible(dead), dead
    assert [rule.complete(t) for t in (" 17", " 90", " 90.0", " 45.5", " 90.1", " 45.55", " 16.9", " missing")] == [
        True, True, True, True, False, False, False, False]
    assert NumberRule(0, 5, 0, nullable=True).complete(" " + MISSING)
    signed = NumberRule(-5.5, 3, 0, nullable=False)
    assert signed.feasible(" -") and signed.complete(" -5") and not signed.feasible(" -6")
    assert not signed.feasible(" 3.")  # no decimals declared


@pytest.mark.parametrize("order", ["target-first", "target-last"])
def test_constrained_decoding_cannot_emit_an_invalid_value(gpt2_folder, order):
    """The model is pushed hard towards tokens that are not valid; constrained rows stay valid,
    free generation from the same model is (almost) never valid; either fixed order, conditions kept."""
    s = Synthesizer(SCHEMA, mode="non-private", lm=LMSettings(model=str(gpt2_folder)), progress=False, order=order)
    s.ranges = {c.name: c.bounds for c in SCHEMA.columns if c.kind == "numeric"}
    s._build()
    assert (s.serializer.columns[-1] == "death") == (order == "target-last")
    bad = [i for i, t in enumerate(s.model.token_ids.tolist()) if s.tokenizer.decode([t]) in (" Male", " b", "9")]
    with torch.no_grad():
        s.model.head.weight[bad] *= 0
        s.model.head.weight[bad] += 50 * s.model.body.wte.weight[:1].mean(0) / s.model.body.wte.weight[:1].norm()
    out = s.sample(60, batch_size=30)
    assert len(out) == 60
    assert set(out["sex"]) <= {"female", "male"} and set(out["group"]) <= {"a", "b", "c"}
    assert set(out["death"]) <= {0, 1}
    for col in ("age", "hr", "lab"):
        lo, hi = SCHEMA.column(col).bounds
        vals = out[col].dropna()
        assert ((vals >= lo) & (vals <= hi)).all(), col
    assert out[["age", "hr", "sex", "group", "death"]].notna().all().all()  # only 'lab' is nullable
    free = s.sampler(seed=1).sample(30, "rejection", batch_size=30, progress=False, max_attempts=30)[1]
    assert free.valid_rate < 0.2
    conds = pd.DataFrame({"death": [1, 0] * 5})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert list(s.sample(10, conditions=conds, batch_size=10)["death"]) == list(conds["death"])
    # the target is exact conditioning only where it comes first; written last, the features ignore it
    leading = [w for w in caught if "not the leading columns" in str(w.message)]
    assert bool(leading) == (order == "target-last")
    assert all(w.filename == __file__ for w in leading)  # it names the user's call, not a line of dpcare


# ---------------------------------------------------------------- the Synthesizer
def fit_small(folder, mode, **kw):
    s = Synthesizer(SCHEMA, mode=mode, epsilon=kw.pop("epsilon", 4.0), lm=LMSettings(model=str(folder)),
                    stage1=StageSettings(epochs=3, lr=3e-3), stage2={"lr": 3e-3}, epochs=3, progress=False, **kw)
    return s.fit(toy_table(200))


@pytest.mark.slow  # end to end
def test_two_stage_fit_sample_save_load_and_conditional_sampling(gpt2_folder, tmp_path):
    s = fit_small(gpt2_folder, "dp-2stage-u")
    g = s.guarantee
    assert g is not None and g.epsilon <= 4.0 + 1e-6
    assert [e.name for e in s.ledger.entries] == ["private training steps"]  # all bounds declared: nothing else
    assert set(s.history) == {"stage1", "stage2"}
    ppl = s.perplexity(toy_table(40, seed=3))
    assert set(ppl) == {"key", "value", "other", "all"} and all(np.isfinite(v) for v in ppl.values())
    conds = pd.DataFrame({"death": [1] * 10 + [0] * 10, "group": ["c"] * 20})
    out = s.sample(20, conditions=conds, batch_size=8)
    assert list(out["death"]) == list(conds["death"]) and (out["group"] == "c").all()
    s.save(tmp_path / "synth")
    again = Synthesizer.load(tmp_path / "synth", progress=False)
    assert again.settings == s.settings and again.ranges == s.ranges and again.info == s.info
    assert again.perplexity(toy_table(40, seed=3)) == pytest.approx(ppl)
    assert again.guarantee == g and again.ledger.state_dict() == s.ledger.state_dict()
    with pytest.raises(ValueError, match="is not empty"):  # one run per folder
        s.save(tmp_path / "synth")
    s.save(tmp_path / "synth", force=True)
    torch.testing.assert_close(torch.tensor(again.sample(10, seed=5)[["age", "hr"]].to_numpy()),
                               torch.tensor(s.sample(10, seed=5)[["age", "hr"]].to_numpy()))


def test_undeclared_bounds_are_estimated_with_dp_and_charged(gpt2_folder):
    d = json.loads(json.dumps(SPEC))
    del d["columns"][2]["bounds"]  # hr: no public range
    schema = TableSchema.from_dict(d)
    s = Synthesizer(schema, mode="dp-2stage-u", epsilon=3.0, stats_epsilon=1.0, lm=LMSettings(model=str(gpt2_folder)),
                    stage1=StageSettings(epochs=1), epochs=1, progress=False, noise_seed=0)
    s.fit(toy_table(300))
    names = [e.name for e in s.ledger.entries]
    assert len(names) == 2 and names[-1] == "private training steps"  # the DP range estimate came first
    assert s.ledger.epsilon() <= 3.0 + 1e-6
    lo, hi = s.ranges["hr"]
    assert 20 < lo < 85 and 95 < hi < 400  # covers the bulk of hr ~ N(90, 20)


@pytest.mark.slow  # end to end
def test_dp_2stage_o_uses_the_public_table_in_stage_1(gpt2_folder):
    from dpcare.data import load_dataset

    adult, adult_schema = load_dataset("adult", "test")
    s = fit_small(gpt2_folder, "dp-2stage-o", public_table=adult.iloc[:100], public_schema=adult_schema)
    assert "stage1" in s.history and s.guarantee.epsilon <= 4.0 + 1e-6
    assert len(s.sample(5)) == 5
    with pytest.raises(ValueError, match="public table"):
        Synthesizer(SCHEMA, mode="dp-2stage-o", lm=LMSettings(model=str(gpt2_folder)))
    no_rows = Synthesizer(SCHEMA, mode="dp-2stage-o", lm=LMSettings(model=str(gpt2_folder)),
                          public_table=adult.iloc[:0], public_schema=adult_schema)
    with pytest.raises(ValueError, match="non-empty public table"):
        no_rows.fit(toy_table(20))
    assert no_rows.ledger is None  # refused before anything read the private table


class ScriptedLM:
    """A stand-in model that writes one of two fixed token sequences: a valid row, or the same row with an
    out-of-bounds age, with equal probability where they differ. After a prompt that is not a prefix of
    either sequence it can only end the row."""

    def __init__(self, real, good: list[int], bad: list[int]):
        self.token_ids, self.to_output, self.scripts = real.token_ids, real.to_output, (good, bad)

    def eval(self):
        return self

    def __call__(self, ids, past_key_values=None, use_cache=True):
        history = past_key_values or [[] for _ in range(len(ids))]
        logits = torch.full((len(ids), 1, len(self.token_ids)), -1e9)
        for i, row in enumerate(history):
            row.extend(ids[i].tolist())
            nxt = {sc[len(row)] for sc in self.scripts if sc[:len(row)] == row and len(sc) > len(row)}
            for t in nxt or {self.scripts[0][-1]}:  # eos when the prompt matches neither script
                logits[i, 0, int(self.to_output(torch.tensor(t)))] = 0.0
        return logits, history


def test_imputation_completes_rows_that_rejection_discards(gpt2_folder):
    """Rejection keeps a row only when every cell is valid (here about half); imputation re-prompts with the
    valid cells BEFORE the first invalid one (fixed column order) and completes every row. Prompting with all
    valid cells instead ("death, sex, hr, ...", skipping age) is off-script and completes none."""
    from dpcare.synth.sampling import RowSampler

    model, tok = build_lm(LMSettings(model=str(gpt2_folder)), vocab_texts())
    rows = RowTokenizer(RowSerializer(SCHEMA, decimals=0), tok)
    row = load_table(toy_table(1), SCHEMA).iloc[0]
    good = rows.encode_row(row)[0]
    out_of_bounds = row.copy()
    out_of_bounds["age"] = 999.0
    bad = rows.encode_row(out_of_bounds)[0]
    assert good != bad
    ranges = {c.name: c.bounds for c in SCHEMA.columns if c.kind == "numeric"}
    sampler = RowSampler(ScriptedLM(model, good, bad), rows, ranges, seed=0)
    rejected, st_rej = sampler.sample(40, "rejection", batch_size=40, progress=False, max_attempts=40)
    imputed, st_imp = sampler.sample(40, "imputation", batch_size=40, progress=False, max_attempts=40)
    assert 0.2 < st_rej.valid_rate < 0.8 and st_imp.valid_rate == 1.0
    want = {c: rows.serializer.value_text(c, row[c]) for c in rows.serializer.columns}
    assert all(r == want for r in rejected + imputed)
    assert sampler._prompt_cells({"death": "1", "sex": "male"}) == {"death": "1"}
    rows.serializer.order = "shuffle"  # any order was seen in training: every valid cell is kept
    assert sampler._prompt_cells({"death": "1", "sex": "male"}) == {"death": "1", "sex": "male"}


def test_bad_inputs_give_clear_errors(gpt2_folder, tmp_path):
    with pytest.raises(ValueError, match="epsilon must be a finite number"):
        Synthesizer(SCHEMA, mode="dp-standard", epsilon=0)
    with pytest.raises(ValueError, match="mode must be one of"):
        Synthesizer(SCHEMA, mode="gan")
    with pytest.raises(ValueError, match="either settings or keyword overrides"):
        Synthesizer(SCHEMA, SynthSettings(), epsilon=2.0)
    s = Synthesizer(SCHEMA, mode="dp-standard", lm=LMSettings(model=str(gpt2_folder)), progress=False)
    with pytest.raises(ValueError, match="no rows"):
        s.fit(toy_table(5).iloc[:0])
    with pytest.raises(ValueError, match="hr"):
        s.fit(toy_table(20).drop(columns="hr"))
    with pytest.raises(ValueError, match="build the ledger from the same settings"):  # before anything is charged
        s.fit(toy_table(20), ledger=PrivacyLedger(20, accountant="rdp"))
    from transformers import BertConfig, BertModel

    bert = tmp_path / "bert"
    BertModel(BertConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16)
              ).save_pretrained(bert)
    with pytest.raises(ValueError, match="not a causal language model"):
        Synthesizer(SCHEMA, mode="dp-standard", lm=LMSettings(model=str(bert))).fit(toy_table(20))
    with pytest.raises(FileNotFoundError, match="unknown model path"):
        Synthesizer(SCHEMA, mode="dp-standard", lm=LMSettings(model=str(tmp_path / "nope"))).fit(toy_table(20))
    fitted = fit_small(gpt2_folder, "non-private")
    with pytest.raises(ValueError, match="not a valid value"):
        fitted.sample(2, conditions=pd.DataFrame({"sex": ["female", "dragon"]}))
    with pytest.raises(ValueError, match="unknown columns"):
        fitted.sample(1, conditions=pd.DataFrame({"height": [1.0]}))


def test_plan_states_the_fitted_guarantee_and_adaptive_clipping_is_charged(gpt2_folder):
    """plan() (settings and row count only) names what fit() releases: n = every row, the default delta, the
    accountant, the unit; adaptive clipping reaches the engine and its counts are charged to the same ledger."""
    from dpcare.synth import plan

    s = Synthesizer(SCHEMA, mode="dp-standard", epsilon=3.0, accountant="rdp", adaptive_clip=0.5,
                    lm=LMSettings(model=str(gpt2_folder)), epochs=1, batch_size=16, progress=False)
    planned = plan(s.settings, 64)
    s.fit(toy_table(64))
    g = s.guarantee
    assert (planned.n, planned.delta, planned.unit, planned.neighbouring, planned.accountant) == (
        g.n, g.delta, g.unit, g.neighbouring, g.accountant) == (64, g.delta, g.unit, g.neighbouring, "rdp")
    assert planned.epsilon == 3.0 and g.epsilon <= 3.0 + 1e-6
    names = [e.name for e in s.ledger.entries]
    assert any("clip count" in name for name in names), names  # the adaptive-clipping counts are charged too
    assert s.info["clip_norm"] != 1.0  # C moved from its initial value
    assert plan(s.settings.replace(mode="non-private", dp=s.settings.dp.replace(adaptive_clip=None)), 64) is None
    with pytest.raises(ValueError, match="must be < 1/n"):
        plan(s.settings.replace(dp=s.settings.dp.replace(delta=0.1)), 64)


def test_a_synthesizer_of_the_old_format_is_refused_by_name(tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    (old / "synthesizer.json").write_text(json.dumps({"settings": {"precision": 2}}))
    with pytest.raises(ValueError, match="before dpcare's run-folder format"):
        Synthesizer.load(old)
    with pytest.raises(FileNotFoundError, match="not a saved synthesizer"):
        Synthesizer.load(tmp_path / "nowhere")
