"""Membership inference on fine-tuned LMs, per patient: losses, LOSS and reference attacks, LiRA with shadow
models, note canaries and the one-run epsilon lower bound."""

from collections import Counter, defaultdict
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from lm_fixtures import tiny_gpt2
from torch import nn

from dpcare.exceptions import DataError
from dpcare.text import Note, check_spans, generate_corpus
from dpcare.text.lm.attacks import (
    _virtual_tokens,
    canary_audit,
    canary_scores,
    insert_canaries,
    lira_lm,
    loss_attack_lm,
    loss_logit,
    make_note_canaries,
    note_losses,
    patient_ids,
)
from dpcare.text.lm.finetune import TargetLoss, apply_mode, encode, make_examples

SUMMARY = {"task": "summarisation"}


@pytest.fixture(scope="module")
def tok():
    return tiny_gpt2()[1]


@pytest.fixture(scope="module")
def corpus():
    """Four generated patients, one with three notes (the sources load once here, ~8 s)."""
    return generate_corpus(6, sources=("mimic_demo",), seed=0)


@pytest.fixture(scope="module")
def canaries():
    return make_note_canaries(40, seed=0)


class BigramLM(nn.Module):
    """A causal LM that counts the bigrams of the target tokens it is fitted on (logit = scale x count):
    it trains in milliseconds and memorises each canary's rare words, a stand-in for a fine-tuned model."""

    def __init__(self, tok, notes=(), task="summarisation", scale=15.0):
        super().__init__()
        self.anchor = nn.Parameter(torch.zeros(()))  # a device to read
        self.config = SimpleNamespace(n_positions=1024)
        self.vocab, self.scale, self.next = len(tok), scale, defaultdict(Counter)
        if notes:
            data = encode(make_examples(notes, task, tok), tok)
            for ids, w in zip(data["ids"].tolist(), data["loss_mask"].tolist()):
                for t in range(1, len(ids)):
                    if w[t]:
                        self.next[ids[t - 1]][ids[t]] += 1

    def forward(self, input_ids, logits_to_keep=0, **_):
        ids = input_ids[:, -logits_to_keep:] if logits_to_keep else input_ids
        logits = torch.zeros(*ids.shape, self.vocab)
        for (b, t), a in np.ndenumerate(ids.numpy()):
            for v, c in self.next.get(a, {}).items():
                logits[b, t, v] = self.scale * c
        return SimpleNamespace(logits=logits)


def train_tiny(notes, tok, steps=10, lr=1e-2):
    """Non-private full-batch fine-tuning of the tiny GPT-2 on the summarisation rows of ``notes``."""
    model = tiny_gpt2()[0].train()
    data = encode(make_examples(notes, "summarisation", tok), tok)
    opt = torch.optim.Adam(model.parameters(), lr)
    for _ in range(steps):
        opt.zero_grad()
        TargetLoss(private=False).private_loss(model, data).mean().backward()
        opt.step()
    return model.eval()


def auc(metrics):
    return metrics["auc"]["value"]


# ---------------------------------------------------------------- per-patient losses
def test_note_losses_pool_every_target_token_of_every_note_of_a_patient(tok, corpus):
    counts = Counter(n.patient_id for n in corpus)
    several = max(counts, key=counts.get)
    notes = [n for n in corpus if n.patient_id == several] + [next(n for n in corpus if counts[n.patient_id] == 1)]
    assert counts[several] == 3
    model = tiny_gpt2(seed=3)[0].train()
    rows = {"task": "ner", "window": 96, "stride": 64}
    examples = make_examples(notes, tokenizer=tok, **rows)
    nll, count, means = defaultdict(float), defaultdict(int), defaultdict(list)
    with torch.no_grad():  # by hand: one unpadded row at a time, log-softmax of the full logits
        for ex in examples:
            data = encode([ex], tok)
            ids, w = data["ids"][0], data["loss_mask"][0].bool()
            logits = model.eval()(input_ids=ids[None]).logits[0, :-1][w[1:]]
            token_nll = -torch.log_softmax(logits.double(), -1).gather(1, ids[1:][w[1:], None])[:, 0]
            nll[ex.patient_id] += token_nll.sum().item()
            count[ex.patient_id] += len(token_nll)
            means[ex.patient_id].append(token_nll.mean().item())
    model.train()
    ids = patient_ids(notes)
    assert len(ids) == 2 and ids == sorted(ids) and len(means[several]) > 3  # several windows of several notes
    want = np.array([nll[p] / count[p] for p in ids])
    assert not np.allclose(want, [np.mean(means[p]) for p in ids], rtol=1e-6)  # not the mean of row means
    np.testing.assert_allclose(note_losses(model, tok, examples, batch_size=3), want, rtol=1e-5)  # rows of notes
    assert model.training  # the mode is restored


def test_note_losses_score_adapter_and_prefix_models(tok, canaries):
    for mode, virtual in (("dp-lora", 0), ("dp-prefix", 10)):
        model = apply_mode(tiny_gpt2()[0], mode).eval()
        with torch.no_grad():
            for p in model.parameters():
                if p.requires_grad:
                    p.add_(0.5 * torch.randn_like(p))
        assert _virtual_tokens(model) == virtual
        data = encode(make_examples(canaries[:3], "summarisation", tok), tok)
        with torch.no_grad():
            want = TargetLoss(positions=not virtual).private_loss(model, data)
        np.testing.assert_allclose(note_losses(model, tok, canaries[:3], batch_size=2, **SUMMARY), want, rtol=1e-5)


def test_loss_logit_is_the_logit_of_the_mean_token_probability():
    loss = np.array([0.01, 0.7, 3.0, 40.0])
    p = np.exp(-loss)
    np.testing.assert_allclose(loss_logit(loss), np.log(p / (1 - p)), rtol=1e-9)
    assert np.isfinite(loss_logit(np.array([0.0])))


# ---------------------------------------------------------------- LOSS and reference attacks
def test_both_attacks_find_the_members_of_a_fine_tuned_model(tok, canaries):
    members, nonmembers = canaries[:6], canaries[6:12]
    target, base = train_tiny(members, tok), tiny_gpt2()[0]
    result = loss_attack_lm(target, base, tok, members, nonmembers, bootstrap=20, **SUMMARY)
    m, n = result.scores["reference"]
    assert len(m) == len(n) == 6 and m.min() > n.max()
    assert auc(result.reference) == 1.0 and auc(result.loss) == 1.0
    np.testing.assert_allclose(result.scores["loss"][0], -note_losses(target, tok, members, **SUMMARY), rtol=1e-6)
    d = result.to_dict()
    assert (d["unit"], d["members"], d["nonmembers"]) == ("patient", 6, 6)
    assert d["reference"]["tpr_at_1pct_fpr"]["value"] == 1.0
    untouched = loss_attack_lm(base, base, tok, members, nonmembers, bootstrap=20, **SUMMARY)
    assert np.all(np.concatenate(untouched.scores["reference"]) == 0) and auc(untouched.reference) == 0.5


def test_the_reference_model_calibrates_what_the_loss_attack_cannot(tok, canaries):
    """Non-members the base model already knew well have the lowest losses (LOSS fails); how much
    fine-tuning lowered each loss still singles out the members."""
    members, nonmembers = canaries[:8], canaries[8:16]
    base = BigramLM(tok, nonmembers * 3)
    target = BigramLM(tok, nonmembers * 3 + members)
    result = loss_attack_lm(target, base, tok, members, nonmembers, bootstrap=20, **SUMMARY)
    assert auc(result.loss) < 0.2 and auc(result.reference) == 1.0


def test_attack_errors_a_user_can_fix(tok, canaries):
    base = tiny_gpt2()[0]
    with pytest.raises(DataError, match="no member notes"):
        loss_attack_lm(base, base, tok, [], canaries[:2])
    with pytest.raises(DataError, match="no non-member notes"):
        loss_attack_lm(base, base, tok, canaries[:2], [])
    with pytest.raises(DataError, match=f"both members and non-members.*{canaries[1].patient_id}"):
        loss_attack_lm(base, base, tok, canaries[:2], canaries[1:3])
    no_pair = check_spans(Note("x-n1", "x", "Seen.", summary_source=""))
    with pytest.raises(DataError, match="1 patient.*no summarisation rows.*'x'"):
        loss_attack_lm(base, base, tok, canaries[:2], [no_pair, canaries[3]], **SUMMARY)
    with pytest.raises(DataError, match="not a mixture"):
        note_losses(base, tok, [canaries[0], *make_examples(canaries[1:2], "ner", tok)])
    with pytest.raises(TypeError, match="unknown row option"):
        loss_attack_lm(base, base, tok, canaries[:1], canaries[1:2], windw=64)


# ---------------------------------------------------------------- LiRA
def test_lira_trains_shadows_on_complementary_halves_and_ranks_whom_the_target_trained_on(tok, canaries):
    members, nonmembers = canaries[:6], canaries[6:12]
    seen = []

    def train_fn(notes):
        seen.append(sorted(n.patient_id for n in notes))
        return BigramLM(tok, notes)

    result = lira_lm(train_fn, BigramLM(tok, members), tok, members, nonmembers, shadows=4, bootstrap=20, **SUMMARY)
    everyone = patient_ids(members + nonmembers)
    assert len(seen) == 4 and seen[0] != seen[2]
    for a, b in (seen[:2], seen[2:]):  # a half and its complement
        assert len(a) == 6 and sorted(a + b) == everyone
    assert auc(result.online) == 1.0 and auc(result.offline) == 1.0 and result.to_dict()["shadows"] == 4
    flipped = lira_lm(train_fn, BigramLM(tok, nonmembers), tok, members, nonmembers, shadows=2, bootstrap=20,
                      **SUMMARY)
    assert auc(flipped.online) == 0.0  # the target trained on the "non-members"
    with pytest.raises(ValueError, match="even number"):
        lira_lm(train_fn, BigramLM(tok), tok, members, nonmembers, shadows=3)


# ---------------------------------------------------------------- canaries and the one-run audit
def test_canaries_are_fake_patients_with_rare_identifiers_and_correct_spans(tok, canaries):
    assert canaries == make_note_canaries(40, seed=0) and canaries != make_note_canaries(40, seed=1)
    assert len(patient_ids(canaries)) == 40
    secrets = []
    for c in canaries:
        check_spans(c)
        phi = {s.label: s.text for s in c.phi}
        drug = next(s.text for s in c.entities if s.label == "treatment")
        assert sorted(Counter(s.label for s in c.phi).items()) == [("MEDICALRECORD", 1), ("PATIENT", 2)]
        assert len(phi["PATIENT"]) == len(drug) == 10 and phi["MEDICALRECORD"].isdigit()
        assert phi["PATIENT"] not in c.summary_source and phi["PATIENT"] in c.summary_target
        assert phi["MEDICALRECORD"] in c.summary_target
        assert drug in make_examples([c], "ner", tok)[0].target
        secrets += [phi["PATIENT"], drug]
    assert len(set(secrets)) == len(secrets)


def test_insert_canaries_includes_each_with_probability_one_half(canaries, corpus):
    many = make_note_canaries(400, seed=2)
    notes, included = insert_canaries(corpus, many, seed=0)
    assert included.dtype == bool and 150 < included.sum() < 250
    assert notes[:len(corpus)] == corpus and notes[len(corpus):] == [c for c, i in zip(many, included) if i]
    assert not np.array_equal(included, insert_canaries(corpus, many, seed=1)[1])
    with pytest.raises(DataError, match="also occur among the notes"):
        insert_canaries(canaries[:3], canaries[2:5])
    with pytest.raises(DataError, match="no canaries"):
        insert_canaries(corpus, [])


def test_one_run_audit_bounds_epsilon_only_when_included_canaries_were_memorised(tok, canaries):
    notes, included = insert_canaries([], canaries, seed=0)
    memorised, blank = BigramLM(tok, notes), BigramLM(tok)
    audit = canary_audit(memorised, tok, canaries, included, delta=1e-5, base_model=blank, **SUMMARY)
    assert audit.epsilon_lower_bound > 1.0 and audit.correct == audit.guesses
    np.testing.assert_allclose(canary_scores(memorised, tok, canaries, **SUMMARY),
                               -note_losses(memorised, tok, canaries, **SUMMARY))  # canaries are in order
    unrelated = BigramLM(tok, make_note_canaries(40, seed=5))  # scores independent of inclusion
    assert canary_audit(unrelated, tok, canaries, included, delta=1e-5, base_model=blank,
                        **SUMMARY).epsilon_lower_bound == 0.0
    with pytest.raises(DataError, match="40 canaries but 39 inclusion bits"):
        canary_audit(memorised, tok, canaries, included[1:], delta=1e-5)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_tiny_gpt2_fine_tuned_on_the_included_canaries_gives_a_positive_bound(tok, canaries):
    """The real path end to end: a few non-private steps memorise the included canaries' identifiers."""
    few = canaries[:20]
    notes, included = insert_canaries([], few, seed=3)
    audit = canary_audit(train_tiny(notes, tok, steps=8), tok, few, included, delta=1e-5,
                         base_model=tiny_gpt2()[0], **SUMMARY)
    assert audit.epsilon_lower_bound > 0
