"""dpcare.text: generated notes grounded in real records, gold spans, readers and writers."""

from __future__ import annotations

import collections
import itertools
import json
import re

import pandas as pd
import pytest

from dpcare.text import (
    ENTITY_LABELS,
    GENERATED_PHI,
    Note,
    Span,
    check_spans,
    generate_corpus,
    load_jsonl,
    mask_phi,
    phi_leaks,
    read_brat,
    read_i2b2_2010,
    read_i2b2_2014_xml,
    read_jsonl,
    read_noteevents,
    save_jsonl,
    tokenize_spans,
    write_brat,
    write_i2b2_2010,
    write_i2b2_2014_xml,
)

N_NOTES = 300


@pytest.fixture(scope="module")
def corpus() -> list[Note]:
    return generate_corpus(n_notes=N_NOTES, seed=0)


def _strip(note: Note) -> tuple:
    """What a reader must give back: text and spans (ids and meta depend on the format)."""
    return note.text, note.phi, note.entities


# --- generated notes ------------------------------------------------------------------------------

def test_gold_spans_match_text_exactly(corpus):
    assert len(corpus) == N_NOTES
    assert {n.meta["source"] for n in corpus} == {"mimic_demo", "support2", "rhc"}
    for note in corpus:
        check_spans(note)
        for s in (*note.phi, *note.entities):
            assert note.text[s.start:s.end] == s.text
        assert {s.label for s in note.phi} <= set(GENERATED_PHI)
        assert {s.label for s in note.entities} <= set(ENTITY_LABELS)
        assert note.patient_id and note.meta["generated"] is True
        assert note.icd_codes and note.summary_source and note.summary_target
        assert note.summary_source in note.text
    labels = collections.Counter(s.label for n in corpus for s in (*n.phi, *n.entities))
    assert all(labels[k] > 0 for k in ("PATIENT", "DOCTOR", "DATE", "AGE", "MEDICALRECORD",
                                       "HOSPITAL", "PHONE", "problem", "treatment", "test"))


def test_phi_never_appears_outside_phi_spans(corpus):
    """Every PHI span's text, and every word of a patient's or doctor's name, occurs (as a whole
    token, ignoring case) only inside PHI spans, and never in the summary target."""
    for note in corpus:
        masked = list(note.text)
        for s in note.phi:
            masked[s.start:s.end] = "#" * (s.end - s.start)
        masked = "".join(masked)
        names = {w for s in note.phi if s.label in ("PATIENT", "DOCTOR")
                 for w in re.findall(r"[A-Za-z]{2,}", s.text)}
        for value in {s.text for s in note.phi} | names:
            # a PHI string as a whole token (e.g. age "52" but not inside "152"), any case
            hit = re.search(r"(?<!\w)" + re.escape(value) + r"(?!\w)", masked, re.IGNORECASE)
            assert hit is None, (note.note_id, value, masked[hit.start() - 30:hit.end() + 30])
            assert re.search(r"(?<!\w)" + re.escape(value) + r"(?!\w)", note.summary_target,
                             re.IGNORECASE) is None
        assert phi_leaks(note) == []


def test_mimic_notes_carry_the_real_codes_of_their_stay(corpus):
    import simple_icd_10_cm as cm

    from dpcare.text.corpus.sources import clif_demo_folder

    root = clif_demo_folder()
    dx = pd.read_parquet(root / "clif_hospital_diagnosis.parquet")
    dx = dx[dx["diagnosis_code_format"] == "ICD10CM"]
    hosp = pd.read_parquet(root / "clif_hospitalization.parquet").set_index("hospitalization_id")
    mimic = [n for n in corpus if n.meta["source"] == "mimic_demo"]
    assert len(mimic) >= 50
    for note in mimic:
        hid = note.meta["hospitalization_id"]
        real = {c for c in dx.loc[dx["hospitalization_id"] == hid, "diagnosis_code"]
                if cm.is_valid_item(c)}
        assert set(note.icd_codes) == real
        assert note.patient_id == f"mimic_demo:{hosp.loc[hid, 'patient_id']}"
        for code in note.icd_codes:  # the discharge-diagnosis target names every code
            assert cm.get_description(code) in note.summary_target
    per_patient = collections.Counter(n.patient_id for n in mimic)
    assert max(per_patient.values()) >= 3  # several stays -> several notes of one patient


def test_notes_vary(corpus):
    def opening(note: Note) -> str:  # the HPI's first 60 characters with spans replaced by labels
        start, end = note.meta["sections"]["hpi"]
        text = list(note.text[start:end])
        for s in sorted((*note.phi, *note.entities), key=lambda s: -s.start):
            if start <= s.start < end:
                text[s.start - start:s.end - start] = f"<{s.label}>"
        return "".join(text)[:60]

    assert len({opening(n) for n in corpus}) > N_NOTES // 2
    for part, at_least in (("header", 5), ("hpi", 6), ("order", 5), ("dx_style", 4),
                           ("course_open", 5), ("signature", 4)):
        assert len({n.meta["templates"].get(part) for n in corpus} - {None}) >= at_least, part
    assert len({n.text.split("\n", 1)[0] for n in corpus}) >= 20  # first lines (titles, hospitals)
    assert any(re.search(r"(?<!\w)(pt|hx|w/|y/o)(?!\w)", n.text) for n in corpus)  # abbreviations


def test_typos_never_touch_spans():
    clean = generate_corpus(n_notes=45, seed=3, typo_rate=0.0)
    noisy = generate_corpus(n_notes=45, seed=3, typo_rate=0.3)
    same = [(a, b) for a, b in zip(clean, noisy, strict=True) if a.meta["attempt"] == b.meta["attempt"]]
    assert len(same) >= 40
    assert sum(b.meta["n_typos"] for _, b in same) > 100
    assert all(a.meta["n_typos"] == 0 for a in clean)
    for a, b in same:
        check_spans(b)
        assert a.text != b.text
        assert [(s.label, s.text) for s in a.phi] == [(s.label, s.text) for s in b.phi]
        assert [(s.label, s.text) for s in a.entities] == [(s.label, s.text) for s in b.entities]


def test_deterministic_with_a_seed_and_bounded_by_n_notes():
    a = generate_corpus(n_notes=12, seed=7)
    assert a == generate_corpus(n_notes=12, seed=7)
    assert [n.text for n in a] != [n.text for n in generate_corpus(n_notes=12, seed=8)]
    only = generate_corpus(n_notes=5, sources=("rhc",), seed=0)
    assert len(only) == 5 and {n.meta["source"] for n in only} == {"rhc"}
    assert len({n.patient_id for n in only}) == 5  # one note per row = patient
    with pytest.raises(ValueError, match="unknown note source"):
        generate_corpus(n_notes=3, sources=("mtsamples",))
    with pytest.raises(ValueError, match="n_notes must be positive"):
        generate_corpus(n_notes=0)


def test_treatment_names_come_from_the_drug_dictionary():
    from dpcare.text.corpus import phrases
    from dpcare.text.corpus.sources import TYPICAL_TREATMENTS

    for names in TYPICAL_TREATMENTS.values():
        for name in names:
            assert name in phrases.DRUG_DISPLAY or phrases.canonical_drug(name), name
    for generic, brand in phrases.BRANDS.items():
        forms = phrases.drug_forms(generic)
        if brand in forms:
            assert phrases.canonical_drug(brand) == phrases.canonical_drug(generic)


def test_mask_phi_and_leaks():
    note = Note("n1", "p1", "Seen by Dr. Hill; Hill said hill walks help.",
                phi=(Span(12, 16, "DOCTOR", "Hill"), Span(18, 22, "DOCTOR", "Hill")))
    assert mask_phi(note) == "Seen by Dr. [**DOCTOR**]; [**DOCTOR**] said hill walks help."
    assert phi_leaks(note) == [("Hill", 28)]


# --- the default output, pinned; the varied style ------------------------------------------------

# sha256 of save_jsonl(generate_corpus(n_notes=9, seed=0)), recorded before the varied style was added. It pins
# the default output of the published corpora (their numbers depend on it): a change here changes every corpus.
DEFAULT_9_NOTES_SHA256 = "2a4420652068375e75abdd3c8d94aeff6760b726ed9a758d7bc08bed0e512c03"
N_VARIED = 200
LIST_ITEM = re.compile(r"^(- |\* |• |\d+[.)] |#\d+ )")


def test_the_default_output_is_unchanged(tmp_path):
    import hashlib

    path = save_jsonl(generate_corpus(n_notes=9, seed=0), tmp_path / "notes.jsonl")
    assert hashlib.sha256(path.read_bytes()).hexdigest() == DEFAULT_9_NOTES_SHA256
    assert generate_corpus(n_notes=9, seed=0, style="templates") == load_jsonl(path)


@pytest.fixture(scope="module")
def varied() -> list[Note]:
    return generate_corpus(n_notes=N_VARIED, seed=0, style="varied")


def test_varied_notes_are_deterministic_and_typos_never_touch_spans():
    a = generate_corpus(n_notes=12, seed=4, style="varied")
    assert a == generate_corpus(n_notes=12, seed=4, style="varied")
    assert {n.meta["style"] for n in a} == {"varied"}
    assert [n.text for n in a] != [n.text for n in generate_corpus(n_notes=12, seed=4)]
    clean = generate_corpus(n_notes=12, seed=4, style="varied", typo_rate=0.0)
    for x, y in zip(clean, a, strict=True):
        if x.meta["attempt"] == y.meta["attempt"]:
            assert [(s.label, s.text) for s in x.entities] == [(s.label, s.text) for s in y.entities]
    with pytest.raises(ValueError, match="unknown note style 'fancy'"):
        generate_corpus(n_notes=3, style="fancy")


def test_varied_spans_match_their_text_and_never_cross_a_list_item(varied):
    from dpcare.text.spans import cuts_a_word

    assert len(varied) == N_VARIED
    for note in varied:
        check_spans(note)
        assert phi_leaks(note) == []
        spans = sorted((*note.phi, *note.entities), key=lambda s: s.start)
        assert all(a.end <= b.start for a, b in itertools.pairwise(spans)), note.note_id  # no overlap
        for s in note.entities:
            assert note.text[s.start:s.end] == s.text == s.text.strip()
            # list items are split at line breaks, commas and semicolons: a span holds none of them
            assert not re.search(r"[\n,;]", s.text), (note.note_id, s.text)
            assert not LIST_ITEM.match(s.text) and not cuts_a_word(note.text, s.start, s.end)
        problems = {(s.start, s.end) for s in note.entities if s.label == "problem"}
        assert all((a, z) in problems and kind in ("absent", "possible") for a, z, kind in note.meta["assertions"])
        assert note.summary_source and note.summary_source in note.text


def _spans_of_lines(note: Note) -> list[tuple[str, int]]:
    """(line, number of entity spans in it) for each line of the note."""
    out, pos = [], 0
    for line in note.text.split("\n"):
        out.append((line, sum(pos <= s.start < pos + len(line) for s in note.entities)))
        pos += len(line) + 1
    return out


def _in_section(note: Note, span, *names: str) -> bool:
    return any(note.meta["sections"][n][0] <= span.start < note.meta["sections"][n][1]
               for n in names if n in note.meta["sections"])


def test_each_element_of_the_varied_style_occurs(varied, corpus):
    import statistics

    from dpcare.text.corpus import phrases as P

    texts = {label: collections.Counter(s.text.lower() for n in varied for s in n.entities if s.label == label)
             for label in ENTITY_LABELS}
    for label, abbreviations in (("problem", {"htn", "cad", "chf", "copd", "dm2", "t2dm", "sob", "cp", "pna", "uti"}),
                                 ("test", {"cxr", "cbc", "bmp", "ekg", "ecg", "tte", "abg", "ua", "bcx"}),
                                 ("treatment", {"asa", "ntg", "abx", "vanc", "vanco", "ivf", "norepi", "ppi", "hd"})):
        assert len(abbreviations & set(texts[label])) >= 3, (label, texts[label].most_common(20))
    # section headers: several forms, upper case, inline and on their own line
    headers = {h for n in varied for forms in P.VARIED_HEADERS.values() for h in forms
               if re.search(r"(?m)^" + re.escape(h) + r"( \S|$)", n.text)}
    assert {"HPI:", "A/P:", "PMH:", "Meds:", "Labs:"} & headers and len(headers) >= 25
    assert any(re.search(r"(?m)^(HPI|A/P|HOSPITAL COURSE|PMH):$", n.text) for n in varied)
    assert any(re.search(r"(?m)^(HPI|A/P|Hospital course|PMH): \w", n.text) for n in varied)
    # lists: bulleted and numbered, one span or more per item; inline medication lists with doses
    lines = [_spans_of_lines(n) for n in varied]
    for marker in (r"[-*] ", r"\d+\. ", r"\d+\) "):
        assert any(sum(bool(re.match(marker, line)) and k >= 1 for line, k in ls) >= 3 for ls in lines), marker
    doses = [n for n in varied if re.search(r"\d mg PO (daily|BID)[;,] \w", n.text)]
    assert doses and any(s.label == "treatment" and n.text[s.end:s.end + 1] == " " for n in doses for s in n.entities)
    # negated and uncertain problems are problem spans
    cue = {"absent": r"(denies|no|negative for|neg for|w/o e/o|without evidence of|ruled out)\b[^.]*$",
           "possible": r"(\?|r/o |rule out |possible |likely |concern for |c/f |suspected )[^.]*$"}
    for kind, pattern in cue.items():
        hits = [n for n in varied for a, z, k in n.meta["assertions"]
                if k == kind and re.search(pattern, n.text[:a][-40:], re.IGNORECASE)]
        assert len(hits) >= 50, kind
    assert any(re.search(r"\?[A-Za-z]", n.text[a - 1:z]) for n in varied for a, z, k in n.meta["assertions"])
    # entities out of their usual place: drugs in the history, tests in the assessment, problems as indications
    assert sum(_in_section(n, s, "hpi") for n in varied for s in n.entities if s.label == "treatment") >= 50
    assert sum(_in_section(n, s, "ap") for n in varied for s in n.entities if s.label == "test") >= 20
    indications = [(a.text, b.text) for n in varied for a, b in itertools.pairwise(n.entities)
                   if a.label == "treatment" and b.label == "problem" and " for " in n.text[a.end:b.start]
                   and len(n.text[a.end:b.start]) < 25]
    assert len(indications) >= 30
    # terse and narrative notes, lower-case notes, more typos than the default
    assert {n.meta["templates"]["terse"] for n in varied} == {0, 1}
    lower = [n for n in varied if n.meta["templates"]["lower"]]
    assert lower and all(n.text[slice(*n.meta["sections"]["hpi"])].islower() for n in lower)
    for token in ("pt", "w/", "s/p", "c/o", "h/o"):
        assert any(re.search(r"(?<![\w/])" + re.escape(token) + r"(?![\w/])", n.text) for n in varied), token
    rate = statistics.mean(n.meta["n_typos"] / len(n.text) for n in varied)
    assert rate > 2 * statistics.mean(n.meta["n_typos"] / len(n.text) for n in corpus)


def test_the_generate_command_takes_a_style(tmp_path):
    from typer.testing import CliRunner

    from dpcare.cli import app

    runner = CliRunner()
    out = tmp_path / "notes.jsonl"
    r = runner.invoke(app, ["text", "generate", "--n-notes", "6", "--seed", "2", "--style", "varied",
                            "--out", str(out)])
    assert r.exit_code == 0, r.output
    notes = read_jsonl(out)
    assert len(notes) == 6 and {n.meta["style"] for n in notes} == {"varied"}
    assert notes == generate_corpus(6, seed=2, style="varied")
    r = runner.invoke(app, ["text", "generate", "--n-notes", "6", "--style", "fancy", "--out", str(out)])
    assert r.exit_code == 2 and "unknown note style" in r.output


# --- readers round-trip -------------------------------------------------------------------------

def test_jsonl_round_trip(corpus, tmp_path):
    path = save_jsonl(corpus[:40], tmp_path / "notes.jsonl")
    assert load_jsonl(path) == corpus[:40]
    assert read_jsonl(path) == corpus[:40]


def test_brat_round_trip(corpus, tmp_path):
    notes = corpus[::15]
    write_brat(notes, tmp_path)
    back = read_brat(tmp_path)
    by_id = {n.note_id.replace(":", "_"): n for n in notes}
    assert len(back) == len(notes)
    for note in back:
        assert _strip(note) == _strip(by_id[note.note_id])


def test_i2b2_2014_round_trip(corpus, tmp_path):
    notes = corpus[::15]
    write_i2b2_2014_xml(notes, tmp_path)
    back = read_i2b2_2014_xml(tmp_path)
    by_id = {n.note_id.replace(":", "_"): n for n in notes}
    for note in back:
        assert (note.text, note.phi) == (by_id[note.note_id].text, by_id[note.note_id].phi)
    # PPP-RR file names give the patient (several records per patient in the 2014 corpus)
    write_i2b2_2014_xml([Note("220-01", "x", "Mr. Ross", (Span(4, 8, "PATIENT", "Ross"),))],
                        tmp_path / "pp")
    assert read_i2b2_2014_xml(tmp_path / "pp" / "220-01.xml")[0].patient_id == "220"


def test_i2b2_2010_round_trip(corpus, tmp_path):
    notes = [tokenize_spans(n) for n in corpus[::15]]
    for tok, orig in zip(notes, corpus[::15], strict=True):
        check_spans(tok)
        assert [(s.label, s.text) for s in tok.entities] == [(s.label, s.text) for s in orig.entities]
    write_i2b2_2010(notes, tmp_path / "txt", tmp_path / "concept")
    back = read_i2b2_2010(tmp_path / "txt", tmp_path / "concept")
    by_id = {n.note_id.replace(":", "_"): n for n in notes}
    for note in back:
        assert (note.text, note.entities) == (by_id[note.note_id].text, by_id[note.note_id].entities)
    with pytest.raises(ValueError, match="token boundaries"):
        write_i2b2_2010([Note("a", "p", "fever, cough", entities=(Span(0, 5, "problem", "fever"),))],
                        tmp_path / "bad")


def test_noteevents(tmp_path):
    rows = pd.DataFrame({
        "row_id": [1, 2, 3], "subject_id": [10, 10, 11], "hadm_id": [100, 101, 102],
        "category": ["Discharge summary", "Nursing", "Discharge summary"], "iserror": ["", "", "1"],
        "text": ['Admission Date: [**2151-7-16**]\n"quoted", line 2', "note two", "error row"],
    })
    rows.to_csv(tmp_path / "NOTEEVENTS.csv", index=False)
    notes = read_noteevents(tmp_path / "NOTEEVENTS.csv")
    assert [(n.note_id, n.patient_id) for n in notes] == [("1", "10"), ("2", "10")]
    assert notes[0].text == rows["text"][0] and notes[0].meta["hadm_id"] == "100"
    summaries = read_noteevents(tmp_path / "NOTEEVENTS.csv", categories=["discharge summary"])
    assert [n.note_id for n in summaries] == ["1"]
    rows.rename(columns=str.upper).to_csv(tmp_path / "upper.csv", index=False)
    assert [n.text for n in read_noteevents(tmp_path / "upper.csv")] == [n.text for n in notes]


# --- bad inputs -------------------------------------------------------------------------------------

def _jsonl(tmp_path, obj) -> str:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(obj) + "\n")
    return path


def test_bad_jsonl(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="empty.jsonl: no notes"):
        read_jsonl(empty)
    base = {"note_id": "n1", "patient_id": "p1", "text": "Pt Ann Lee seen."}
    with pytest.raises(ValueError, match=r"bad.jsonl:1: note 'n1': PHI span PATIENT \[3:40\].*outside"):
        read_jsonl(_jsonl(tmp_path, {**base, "phi": [{"start": 3, "end": 40, "label": "PATIENT"}]}))
    with pytest.raises(ValueError, match="is 'Ann' but the note has 'Ann '"):
        read_jsonl(_jsonl(tmp_path, {**base, "phi": [{"start": 3, "end": 7, "label": "PATIENT",
                                                     "text": "Ann"}]}))
    with pytest.raises(ValueError, match="no 'patient_id'"):
        read_jsonl(_jsonl(tmp_path, {"note_id": "n1", "text": "x"}))
    (tmp_path / "broken.jsonl").write_text('{"note_id": 1,\n')
    with pytest.raises(ValueError, match="broken.jsonl:1: not valid JSON"):
        read_jsonl(tmp_path / "broken.jsonl")


def test_bad_i2b2_2010(tmp_path):
    (tmp_path / "a.txt").write_text("Pt has chest pain .\nGiven aspirin .\n")
    con = tmp_path / "a.con"
    con.write_text('c="chest pain" 1:2 1:3||t="problem"\nc="aspirin" 2:1 2:1||t="treatment"\n')
    note = read_i2b2_2010(tmp_path)[0]
    assert [(s.text, s.label) for s in note.entities] == [("chest pain", "problem"),
                                                          ("aspirin", "treatment")]
    con.write_text('c="chest pain" 1:2 1:3||t="problem"\nchest pain 1:2 1:3 problem\n')
    with pytest.raises(ValueError, match=r"a.con:2: malformed concept line"):
        read_i2b2_2010(tmp_path)
    con.write_text('c="heart pain" 1:2 1:3||t="problem"\n')
    with pytest.raises(ValueError, match=r"a.con:1: concept text 'heart pain' does not match"):
        read_i2b2_2010(tmp_path)
    con.write_text('c="aspirin" 7:1 7:1||t="treatment"\n')
    with pytest.raises(ValueError, match=r"a.con:1: .* outside the note"):
        read_i2b2_2010(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no notes"):
        read_i2b2_2010(tmp_path / "empty")


def test_bad_brat(tmp_path):
    (tmp_path / "a.txt").write_text("Ann Lee has a cough and fever.")
    ann = tmp_path / "a.ann"
    ann.write_text("T1\tPATIENT 0 7\tAnn Lee\nT2\tProblem 14 19;24 29\tcough fever\nR1\tx Arg1:T1\n")
    with pytest.raises(ValueError, match="a.ann:2: discontinuous span"):
        read_brat(tmp_path)
    note = read_brat(tmp_path, discontinuous="first")[0]
    assert note.phi == (Span(0, 7, "PATIENT", "Ann Lee"),)
    assert note.entities == (Span(14, 19, "Problem", "cough"),)
    ann.write_text("T1\tPATIENT 0 70\tAnn Lee\n")
    with pytest.raises(ValueError, match=r"a.ann:1: span \[0:70\] lies outside the note"):
        read_brat(tmp_path)
    ann.write_text("T1\tPATIENT 0 7\tBob Lee\n")
    with pytest.raises(ValueError, match="a.ann:1: annotation text 'Bob Lee' does not match"):
        read_brat(tmp_path)
    ann.write_text("T1\tPATIENT zero 7\tAnn Lee\n")
    with pytest.raises(ValueError, match="a.ann:1: malformed text-bound annotation"):
        read_brat(tmp_path)


def test_bad_i2b2_2014(tmp_path):
    good = ('<?xml version="1.0" encoding="UTF-8" ?>\n<deIdi2b2>\n<TEXT><![CDATA[Mr. Ross seen]]>'
            '</TEXT>\n<TAGS>\n<NAME id="P0" start="4" end="8" text="{}" TYPE="PATIENT" />\n'
            "</TAGS>\n</deIdi2b2>\n")
    (tmp_path / "r.xml").write_text(good.format("Rose"))
    with pytest.raises(ValueError, match=r"r.xml: note 'r': PHI span PATIENT \[4:8\] is 'Rose'"):
        read_i2b2_2014_xml(tmp_path / "r.xml")
    (tmp_path / "r.xml").write_text(good.format("Ross").replace("</TAGS>", ""))
    with pytest.raises(ValueError, match=r"r.xml:\d+: malformed XML"):
        read_i2b2_2014_xml(tmp_path)


def test_bad_noteevents(tmp_path):
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(ValueError, match="no notes"):
        read_noteevents(tmp_path / "empty.csv")
    (tmp_path / "cols.csv").write_text("ROW_ID,TEXT\n1,hello\n")
    with pytest.raises(ValueError, match=r"missing column\(s\) \['SUBJECT_ID'\]"):
        read_noteevents(tmp_path / "cols.csv")
    (tmp_path / "none.csv").write_text("ROW_ID,SUBJECT_ID,CATEGORY,TEXT\n1,2,Nursing,hi\n")
    with pytest.raises(ValueError, match="no notes"):
        read_noteevents(tmp_path / "none.csv", categories=["Discharge summary"])


def test_check_spans_names_note_and_span():
    note = Note("n9", "p9", "abc", entities=(Span(1, 3, "test", "bX"),))
    with pytest.raises(ValueError, match=r"note 'n9': entity span test \[1:3\] is 'bX' but the note"):
        check_spans(note)
    with pytest.raises(ValueError, match="empty patient id"):
        check_spans(Note("n9", "", "abc"))


# --- formats by name, and the patient count each gives before any text is read ----------------------------

def test_every_note_format_is_read_and_counted(corpus, tmp_path):
    from dataclasses import replace

    from dpcare.text.readers import count_patients, note_to_dict, read_notes

    notes = corpus[:6]
    array = tmp_path / "notes.json"
    array.write_text(json.dumps([note_to_dict(n) for n in notes]))
    assert [n.note_id for n in read_notes(array, "json")] == [n.note_id for n in notes]
    assert count_patients(array, "json") == len({n.patient_id for n in notes})
    txt = tmp_path / "txt"
    txt.mkdir()
    for n in notes:
        (txt / f"{n.note_id}.txt").write_text(n.text)
    read = read_notes(txt, "txt")
    assert sorted(n.text for n in read) == sorted(n.text for n in notes)
    assert count_patients(txt, "txt") == len(read)  # each plain note its own patient
    xml = tmp_path / "xml"
    write_i2b2_2014_xml([replace(n, note_id=f"{i // 2 + 100}-0{i % 2 + 1}") for i, n in enumerate(notes)], xml)
    assert count_patients(xml, "i2b2-2014") == len({n.patient_id for n in read_notes(xml, "i2b2-2014")}) == 3
    rows = pd.DataFrame({"ROW_ID": [1, 2, 3], "SUBJECT_ID": [10, 10, 11], "ISERROR": ["", "", "1"],
                         "TEXT": ["a", "b", "c"]})
    rows.to_csv(tmp_path / "NOTEEVENTS.csv", index=False)
    assert count_patients(tmp_path / "NOTEEVENTS.csv", "noteevents") == 1  # subject 11's only row is an error


def test_a_json_file_that_is_not_an_array_is_named(tmp_path):
    from dpcare.exceptions import DataError
    from dpcare.text.readers import read_notes

    path = tmp_path / "notes.json"
    path.write_text('{"note_id": "a"}')
    with pytest.raises(DataError, match="one JSON array of note objects, got a dict"):
        read_notes(path, "json")
    path.write_text("[1, 2")
    with pytest.raises(DataError, match="not valid JSON"):
        read_notes(path, "json")


def test_the_hand_written_notes_parse_to_exact_spans_and_are_not_generated():
    """Issue 55 part 2: evaluation notes written by hand, in styles the generator does not produce."""
    from dpcare.text.corpus.handwritten import NOTES, handwritten_notes, parse_markup

    notes = handwritten_notes()
    assert len(notes) == len(NOTES) == 16 and len({n.patient_id for n in notes}) == 16
    spans = [s for n in notes for s in n.entities]
    assert len(spans) > 150 and {s.label for s in spans} == {"problem", "treatment", "test"}
    for n in notes:
        assert "{" not in n.text and "|" not in n.text.replace("||", "")
        assert all(n.text[s.start:s.end] == s.text for s in n.entities)
    assert parse_markup("a {test|K} 5.1, {problem|AKI}.") == ("a K 5.1, AKI.", (
        Span(2, 3, "test", "K"), Span(9, 12, "problem", "AKI")))
