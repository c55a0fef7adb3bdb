"""Imputing masked spans with a local LM (the hybrid note): the input never holds a private span, one value
per slot, fallbacks, the prompt cache, the batched greedy helper against ``model.generate``, resumable
checkpoints and errors. Tiny random models: the values are noise, the plumbing is what is tested."""

import json

import pytest
import torch
from lm_fixtures import tiny_gpt2
from test_text_finetune import tiny_llama

from dpcare.exceptions import DataError, SpecError
from dpcare.lm import PrefixCache, encode_prefix, greedy_continuations
from dpcare.text.views.imputation import DEFAULTS, PREFIX, SpanImputer, clean_value, left_context
from dpcare.text.views.masking import MaskedNote
from dpcare.text.spans import Span

CANARIES = ("Zqxvbrt", "Kwomplin", "Yllwexa", "Pomrund", "48213377", "07/19/2131", "07/20/2131", "07/28/2131",
            "617-555-0199")


def masked(note_id, segments, placeholder="[{label}]"):
    """A MaskedNote from (text, label or None) segments: labelled ones are private, shown as placeholders."""
    pub, orig, slots, private = "", "", [], []
    for seg, label in segments:
        if label is not None:
            fill = placeholder.format(label=label)
            slots.append(Span(len(pub), len(pub) + len(fill), label, fill))
            private.append(Span(len(orig), len(orig) + len(seg), label, seg))
        pub += seg if label is None else slots[-1].text
        orig += seg
    note = MaskedNote(note_id, f"p-{note_id}", pub, tuple(slots), tuple(private))
    assert note.restore() == orig
    return note


def summary(note_id, org="Zqxvbrt Kwomplin Hospital", surname="Kwomplin", first="Zqxvbrt", doctor="Yllwexa Pomrund",
            mrn="48213377", dates=("07/19/2131", "07/20/2131", "07/28/2131"), phone="617-555-0199", head=""):
    return masked(note_id, [
        (head + "DISCHARGE SUMMARY - ", None), (org, "ORGANIZATION"), ("\nPt: ", None), (f"{surname}, {first}", "PERSON"),
        (" (MRN ", None), (mrn, "ID"), ("), DOB ", None), (dates[0], "DATE"), ("\nAdmitted ", None),
        (dates[1], "DATE"), (", d/c'd ", None), (dates[2], "DATE"), (". Attending physician: Dr. ", None),
        (doctor, "PERSON"), (".\nPt is a ", None), ("71", "AGE"), (" y/o male. Mr. ", None), (surname, "PERSON"),
        (" was admitted to the ICU at ", None), ("14:05", "TIME"), (".\nF/U: PCP Dr. ", None), (doctor, "PERSON"),
        (" (", None), (phone, "CONTACT"), (") within 7 days.\n", None)])


def other_summary(note_id, head=""):
    return masked(note_id, [(head + "Seen on ", None), ("3/2/2140", "DATE"), (" by ", None), ("Ana Vrolt", "PERSON"),
                            (", code ", None), ("QX7", "CODE"), ("; follow-up at ", None),
                            ("Brinmoor Clinic", "ORGANIZATION"), (".", None)])


NOTES = [summary("n1"), other_summary("n2"), summary("n3", surname="Ovelsky", first="Trudaine", mrn="55190342")]


class Recorder:
    """Wraps a model or tokenizer: records what it is given (token ids, texts) and can fail after ``crash_after``
    calls (a simulated crash)."""

    def __init__(self, inner, crash_after=None):
        self.inner, self.crash_after, self.calls, self.seen = inner, crash_after, 0, []

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.crash_after is not None and self.calls > self.crash_after:
            raise RuntimeError("simulated crash")
        self.seen += [a for a in args if isinstance(a, str)]
        if "input_ids" in kwargs:
            self.seen.append(kwargs["input_ids"].clone())
        return self.inner(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.inner, name)


class ForceToken:
    """A model whose next token is always ``token`` (the inner model's cache is kept)."""

    def __init__(self, inner, token):
        self.inner, self.token, self.calls = inner, token, 0

    def __call__(self, **kwargs):
        self.calls += 1
        out = self.inner(**kwargs)
        out.logits[..., self.token] = 1e4
        return out


@pytest.fixture(scope="module")
def lm():
    model, tok = tiny_gpt2(seed=3)
    return model.double(), tok


def imputer(lm, **kw):
    return SpanImputer(lm=lm, max_new_tokens=kw.pop("max_new_tokens", 5), batch_size=kw.pop("batch_size", 4), **kw)


# ---------------------------------------------------------------- privacy
def test_the_models_input_never_holds_a_masked_span(lm):
    """Canary PHI in the private spans: no text the tokenizer is given and no token sequence the model runs
    contains any of it (or any private span's text); the values do not depend on it either."""
    model, tok = Recorder(lm[0]), Recorder(lm[1])
    values = SpanImputer(lm=(model, tok), max_new_tokens=4, batch_size=3, context_chars=400).impute(NOTES)
    inputs = [s if isinstance(s, str) else "\n".join(tok.batch_decode(s)) for s in model.seen + tok.seen]
    everything = "\n".join(inputs)
    assert "Attending physician: Dr." in everything and "[PERSON]" in everything  # the recorders see the prompts
    private = {s.text for n in NOTES for s in n.private if len(s.text) >= 5}
    assert set(CANARIES) <= {w for t in private for w in t.replace(",", " ").split()} | private
    for secret in sorted(set(CANARIES) | private):
        assert secret not in everything, secret
    other = summary("n1", org="Vexmoor Hospital", surname="Plaith", first="Orrin", doctor="Kess Dumbry",
                    mrn="11122233", dates=("01/02/2099",) * 3, phone="202-555-0123")
    assert other.text == NOTES[0].text and other.private != NOTES[0].private
    assert imputer(lm, max_new_tokens=4, batch_size=3, context_chars=400).impute([other]) == values[:1]


def test_left_context_is_public_and_starts_at_a_word():
    note = NOTES[0]
    i = 6  # the attending physician
    ctx = left_context(note, i, 60)
    assert note.text[: note.slots[i].start].endswith(ctx) and ctx.endswith("Attending physician: Dr. ")
    assert ctx.split()[0] in note.text.split()  # a whole word first
    assert "[DATE]" in left_context(note, i, 200) and left_context(note, 0, 50) == "DISCHARGE SUMMARY - "
    untyped = masked("u", [("Seen on ", None), ("3/2/2140", "DATE"), (" by Dr. ", None), ("Ana Vrolt", "PERSON")],
                     placeholder="[MASK]")
    assert left_context(untyped, 1, 100) == "Seen on [DATE] by Dr. "  # earlier placeholders shown typed
    assert left_context(untyped, 1, 17) == "on [DATE] by Dr. "
    assert left_context(untyped, 1, 11) == "by Dr. "  # a window starting inside "[MASK]" skips it


# ---------------------------------------------------------------- values
def test_one_value_per_slot_and_the_hybrid_notes(lm):
    imp = imputer(lm)
    values = imp.impute(NOTES)
    assert [len(v) for v in values] == [len(n.slots) for n in NOTES]
    assert all(isinstance(v, str) and v and v == v.strip() and "\n" not in v for vs in values for v in vs)
    texts = imp.hybrid_texts(NOTES, values)
    assert texts == [n.fill(v) for n, v in zip(NOTES, values)] == imp.impute_texts(NOTES)
    stats = imp.stats()
    assert stats["notes"] == 3 and stats["slots"] == sum(len(n.slots) for n in NOTES)
    assert stats["seconds_per_note"] > 0 and stats["unique_prompts"] + stats["cache_hits"] == stats["slots"]


def test_empty_values_fall_back_to_a_default_per_label_and_are_counted(lm):
    newline = lm[1]("\n", add_special_tokens=False)["input_ids"][0]
    imp = SpanImputer(lm=(ForceToken(lm[0], newline), lm[1]), max_new_tokens=8)
    values = imp.impute(NOTES[:2])
    for note, vs in zip(NOTES[:2], values):
        assert vs == [DEFAULTS[s.label] for s in note.slots]
    labels = [s.label for n in NOTES[:2] for s in n.slots]
    assert imp.failures == {label: labels.count(label) for label in set(labels)}
    assert imp.stats()["failures"] == dict(imp.failures)


def test_values_are_cut_at_the_public_text_after_the_slot():
    n = masked("c", [("Dr. ", None), ("A B", "PERSON"), (", seen ", None), ("1/1/2100", "DATE"), (". Age ", None),
                     ("70", "AGE"), (" years; Mr. ", None), ("B", "PERSON"), (" was ok, at ", None), ("3.5", "AGE"),
                     ("\nend", None)])
    assert clean_value(" Ann Lee, MD\nmore", n, 0) == "Ann Lee"  # the comma after the slot
    assert clean_value(" 3.4.2101. Then", n, 1) == "3.4.2101"  # a full stop, not a dot inside the value
    assert clean_value(" about 63-year-old", n, 2) == "63"  # an age is a number
    assert clean_value(" Dr. [PERSON] Kay was", n, 3) == ""  # an echoed placeholder; a title is no name
    assert clean_value(" Kay was here", n, 3) == "Kay"  # the next word
    assert clean_value(" Roe [DATE]", n, 0) == "Roe" and clean_value("   ", n, 0) == ""


def test_identical_prompts_are_generated_once(lm):
    model = Recorder(lm[0])
    imp = imputer((model, lm[1]))
    values = imp.impute([NOTES[0], NOTES[1], NOTES[0], NOTES[1]])
    slots = len(NOTES[0].slots) + len(NOTES[1].slots)
    assert values[:2] == values[2:] and imp.cache_hits >= slots and imp.unique_prompts <= slots
    calls = model.calls
    assert imp.impute([NOTES[1]]) == values[1:2]  # a later call: every prompt is cached
    assert model.calls == calls and imp.cache_hits == len(NOTES[1].slots) and imp.unique_prompts == 0


# ---------------------------------------------------------------- the batched helper
@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_batched_cached_greedy_equals_model_generate_one_prompt_at_a_time(arch):
    """Left-padded batches of prompts of different lengths after a cached prefix, early stopping included,
    give what ``model.generate`` gives for each full prompt alone."""
    model, tok = tiny_gpt2(seed=1)
    if arch == "llama":
        model = tiny_llama(tok)
    model = model.double().eval()
    prefix = "Notes with values filled in.\nAdmitted 03/02/2019 to the ICU.\n"
    prompts = ["Seen by Dr.", "DOB", "The patient, a 71 year old man, was admitted on the", "Pt:", "MRN 12 and"]
    cache = encode_prefix(model, tok, prefix)
    batched = greedy_continuations(model, tok, cache, prompts, max_new_tokens=6, stop=None, batch_size=3)
    stopped = greedy_continuations(model, tok, cache, prompts, max_new_tokens=6, stop=" ", batch_size=2)
    plain = greedy_continuations(model, tok, PrefixCache(0), [prefix + p for p in prompts], 6, stop=None)
    for p, b, s, q in zip(prompts, batched, stopped, plain):
        ids = torch.tensor([tok(prefix, add_special_tokens=False)["input_ids"] + tok(p, add_special_tokens=False)
                            ["input_ids"]])
        with torch.no_grad():
            gen = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=6,
                                 do_sample=False, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
        want = tok.decode(gen[0, ids.shape[1]:], skip_special_tokens=True)
        assert b == want and s == want.split(" ", 1)[0], p
        assert q == want  # no prefix cache: the same


def test_generation_stops_once_every_row_has_ended(lm):
    newline = lm[1]("\n", add_special_tokens=False)["input_ids"][0]
    model = ForceToken(lm[0], newline)
    cache = encode_prefix(model, lm[1], "Values:\n")
    model.calls = 0
    assert greedy_continuations(model, lm[1], cache, ["a", "bb cc", "d"], 8, batch_size=2) == ["", "", ""]
    assert model.calls == 2  # one pass per batch, no decoding step
    assert greedy_continuations(model, lm[1], cache, ["a"], 8, stop=None) == ["\n" * 8]
    with pytest.raises(ValueError, match="empty prompt"):
        greedy_continuations(model, lm[1], cache, ["a", ""], 8)


def test_prefix_is_the_instruction_with_made_up_examples():
    assert PREFIX.endswith("\n\n") and "[PERSON] =" in PREFIX
    assert not any(c in PREFIX for c in CANARIES)


# ---------------------------------------------------------------- checkpoints
def test_a_crashed_run_resumes_from_its_journal_and_equals_an_uninterrupted_run(lm, tmp_path):
    notes = [summary(f"s{k}", head=f"Bed {k}. ") if k % 2 else other_summary(f"o{k}", head=f"Bed {k}. ")
             for k in range(6)]  # public text differs: no prompt repeats (with the whole left context)
    counting = Recorder(lm[0])
    reference = imputer((counting, lm[1]), chunk_notes=2, context_chars=1000).impute(notes)
    journal = tmp_path / "imputed.jsonl"
    crashing = Recorder(lm[0], crash_after=counting.calls // 2)
    with pytest.raises(RuntimeError, match="simulated crash"):
        imputer((crashing, lm[1]), chunk_notes=2, context_chars=1000).impute(notes, checkpoint=journal)
    written = [json.loads(line) for line in journal.read_text().splitlines()]
    assert 0 < len(written) < len(notes) and len(written) % 2 == 0  # whole chunks
    assert written[0]["note_id"] == "o0" and written[0]["values"] == reference[0]
    with open(journal, "a") as f:
        f.write('{"note_id": "o2", "values": ["cut sh')  # a line cut short by the crash
    imp = imputer(lm, chunk_notes=2, context_chars=1000)
    assert imp.impute(notes, checkpoint=journal) == reference
    assert imp.stats()["resumed_notes"] == len(written) and imp.notes == len(notes) - len(written)
    lines = journal.read_text().splitlines()
    assert len(lines) == len(notes) and all(json.loads(line) for line in lines)
    again = imputer(lm, chunk_notes=2, context_chars=1000)
    assert again.impute(notes, checkpoint=journal) == reference
    assert again.notes == 0 and again.seconds_per_note is None and again.resumed == len(notes)


def test_a_journal_of_other_notes_is_refused(lm, tmp_path):
    journal = tmp_path / "j.jsonl"
    imputer(lm).impute(NOTES[:1], checkpoint=journal)
    resumed = imputer(lm)
    assert resumed.impute([summary("n1", dates=("01/01/2000",) * 3)], checkpoint=journal)  # same public note
    assert resumed.resumed == 1 and resumed.notes == 0
    different = other_summary("n1")
    with pytest.raises(DataError, match="differs from the note given"):
        imputer(lm).impute([different], checkpoint=journal)
    with pytest.raises(DataError, match="ids must be unique"):
        imputer(lm).impute([NOTES[0], different], checkpoint=tmp_path / "k.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n" + journal.read_text())
    with pytest.raises(DataError, match="not an imputation journal"):
        imputer(lm).impute(NOTES[:1], checkpoint=bad)


# ---------------------------------------------------------------- errors
def test_errors_a_user_can_fix(lm, tmp_path):
    with pytest.raises(DataError, match="expected a MaskedNote"):
        imputer(lm).impute([NOTES[0], "a plain string"])
    with pytest.raises(DataError, match="values for"):
        imputer(lm).hybrid_texts(NOTES[:1], [["only one"]])
    with pytest.raises(DataError, match="value lists for"):
        imputer(lm).hybrid_texts(NOTES[:2], [["x"]])
    with pytest.raises(SpecError, match="cannot load model .*unknown model path"):
        SpanImputer(model=str(tmp_path / "nope")).impute(NOTES[:1])
    with pytest.raises(SpecError, match="context_chars"):
        SpanImputer(context_chars=0)
    bad = MaskedNote("b", "p", "ab", (Span(1, 5, "DATE", "[DATE]"),))
    with pytest.raises(DataError, match="inside the text"):
        imputer(lm).impute([bad])
    assert imputer(lm).impute([]) == [] and imputer(lm).impute([masked("e", [("nothing hidden", None)])]) == [[]]
