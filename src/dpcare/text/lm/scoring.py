"""A fine-tuned note model scored on notes with gold annotations, beside its public baselines on the SAME notes
(:mod:`dpcare.text.baselines`): exact-match span F1 for NER against the public lexicon
(:mod:`dpcare.text.lexicon_ner`) and the base model without fine-tuning, ROUGE-L F1 for summarisation against LEAD-3 and the base model. One place for `dpcare text ner`, `dpcare text summarise` and
`dpcare text finetune --test`, so that the console, run.json and the report say the same thing.

Scoring reads the scored notes only: the baselines read no training note (the base model's weights, the lexicon's
vocabularies and LEAD-3 are public), so they cost no budget; the scores themselves are a release about the scored notes, outside the
fine-tuning's guarantee (as every recipe's test metrics).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dpcare.exceptions import DataError
from dpcare.text.spans import Span

METRICS = {"ner": "ner F1", "summarisation": "ROUGE-L F1"}


@dataclass
class NoteScores:
    """What a model wrote for the notes, its score on the notes with gold annotations, and the comparison with
    the public baselines (:func:`dpcare.text.baselines.compare_on_notes`; None without gold or baselines)."""

    metric: str
    outputs: list  # per note: the predicted entity spans (NER) or the summary
    scored: int  # notes with gold annotations
    value: float | None  # the model's metric over those notes
    table: Any = None  # NER: span_scores per label (a DataFrame); summarisation: ROUGE-L precision/recall/F1
    result: dict[str, Any] | None = None
    counts: Any = None  # NER with gold spans: per note, exact-match span counts [tp, predicted, gold] (an array)

    def record(self, name: str) -> dict[str, Any]:
        """The run.json ``baselines`` record of the model ``name`` (the clinical-NLP study's shape: name and the
        comparison result: comparisons, beats, verdict, notes, patients)."""
        return {"name": name, **(self.result or {})}


def gold_spans(notes: Sequence, labels: Sequence[str]) -> list[list[Span]]:
    """Per note, the gold spans of the model's labels (entities and PHI spans)."""
    return [[s for s in (*n.entities, *n.phi) if s.label in labels] for n in notes]


def check_gold(task: str, notes: Sequence, labels: Sequence[str], where: str) -> None:
    """Notes to score must carry the task's gold annotations: a clear error naming ``where`` otherwise."""
    if task == "ner" and not any(gold_spans(notes, labels)):
        raise DataError(f"{where}: no note has a gold span of the labels {list(labels)}: nothing to score")
    if task == "summarisation" and not any(n.summary_target.strip() for n in notes):
        raise DataError(f"{where}: no note has a reference summary (summary_target): nothing to score")


def score_ner(net, tokenizer, recipe: dict[str, Any], notes: Sequence, max_tokens: int = 512, batch_size: int = 8,
              baseline: bool = True, progress: bool = True) -> NoteScores:
    """The NER model's entities for ``notes`` (whole entities: :func:`~dpcare.text.spans.whole_entities`) and,
    where they carry gold spans, its span F1 beside the public lexicon (:mod:`dpcare.text.lexicon_ner`; labels
    problem / treatment / test only, always scored: it costs nothing) and the base model without fine-tuning
    (``baseline``; a causal LM: the same constrained decoding, windows and ``max_tokens``; a token tagger: the
    pre-trained encoder with a fresh head drawn from the public seed 0, the same windows)."""
    from dpcare.text.baselines import span_counts
    from dpcare.text.evaluation import MICRO, span_scores
    from dpcare.text.lm.saved import CAUSAL, recipe_kind
    from dpcare.text.spans import whole_entities

    labels = tuple(recipe["labels"])
    texts = [n.text for n in notes]
    tagger = recipe_kind(recipe) != CAUSAL

    def decode(model, tok) -> list[list[Span]]:
        if not tagger:  # extract_entities_many returns whole entities itself
            from dpcare.text.lm.generative_ner import extract_entities_many

            return extract_entities_many(model, tok, texts, labels, recipe["window"], recipe["stride"], max_tokens,
                                         batch_size, progress=progress)
        from dpcare.text.lm.token_ner import PREDICT_STRIDE, predict_spans
        from dpcare.text.spans import Note

        window = recipe["window"]
        stride = None if window is None else min(window, recipe["stride"] or window, PREDICT_STRIDE)
        blank = [Note(str(i), n.patient_id, n.text) for i, n in enumerate(notes)]  # ids need not be distinct
        found = predict_spans(model, tok, blank, window, stride, batch_size=max(batch_size, 32))
        return [whole_entities(f, t) for f, t in zip(found, texts)]

    predicted = decode(net, tokenizer)
    gold = gold_spans(notes, labels)
    if not any(gold):
        return NoteScores(METRICS["ner"], predicted, 0, None)
    table = span_scores(gold, predicted)
    f1 = table.loc[MICRO, "f1"]
    scores = NoteScores(METRICS["ner"], predicted, sum(1 for g in gold if g), 0.0 if f1 != f1 else float(f1), table,
                        counts=span_counts(gold, predicted))
    from dpcare.text.baselines import BASE_MODEL, compare_on_notes
    from dpcare.text.lexicon_ner import NAME as LEXICON, lexicon_spans
    from dpcare.text.spans import ENTITY_LABELS

    baselines = {}
    if set(labels) <= set(ENTITY_LABELS):  # the public vocabularies: they read the scored notes only
        baselines[LEXICON] = span_counts(gold, [[x for x in lexicon_spans(t) if x.label in labels] for t in texts])
    if baseline:  # the pre-trained model, never fine-tuned, decoded the same way
        if tagger:
            from dpcare.text.lm.token_ner import load_tagger

            base, base_tokenizer = load_tagger(recipe)
        else:
            from dpcare.lm import load_causal_lm

            base, base_tokenizer = load_causal_lm(recipe["model"], recipe["layers"])
        baselines[BASE_MODEL] = span_counts(gold, decode(base.eval(), base_tokenizer))
    if baselines:
        scores.result = compare_on_notes(scores.metric, scores.counts, baselines, [n.patient_id for n in notes])
    return scores


def score_summaries(net, tokenizer, recipe: dict[str, Any], notes: Sequence, max_tokens: int = 96,
                    baseline: bool = True, progress: bool = True) -> NoteScores:
    """The model's summary of each note's hospital course (``summary_source``, or the whole text) and, over the
    notes with a reference summary, its ROUGE-L F1 beside LEAD-3 (always) and the base model without fine-tuning
    (``baseline``; the same greedy prompt and ``max_tokens``)."""
    from dpcare.progress import progress as bar
    from dpcare.text.baselines import BASE_MODEL, compare_on_notes, lead, lead_name, rouge_l_per_note
    from dpcare.text.evaluation import rouge_l
    from dpcare.text.lm.summaries import write_summary

    sources = [n.summary_source or n.text for n in notes]
    written = [write_summary(net, tokenizer, s, max_tokens) for s in bar(sources, desc="summaries", disable=not progress)]
    kept = [i for i, n in enumerate(notes) if n.summary_target.strip()]
    if not kept:
        return NoteScores(METRICS["summarisation"], written, 0, None)
    references = [notes[i].summary_target for i in kept]
    table = rouge_l(references, [written[i] for i in kept])
    scores = NoteScores(METRICS["summarisation"], written, len(kept), float(table["fmeasure"]), table)
    baselines = {lead_name(): rouge_l_per_note(references, [lead(sources[i]) for i in kept])}
    if baseline:
        from dpcare.lm import load_causal_lm

        base, base_tokenizer = load_causal_lm(recipe["model"], recipe["layers"])
        baselines[BASE_MODEL] = rouge_l_per_note(references, [
            write_summary(base, base_tokenizer, sources[i], max_tokens)
            for i in bar(kept, desc="base-model summaries", disable=not progress)])
    scores.result = compare_on_notes(scores.metric, rouge_l_per_note(references, [written[i] for i in kept]),
                                     baselines, [notes[i].patient_id for i in kept])
    return scores


def score_notes(net, tokenizer, recipe: dict[str, Any], notes: Sequence, progress: bool = True) -> NoteScores:
    """:func:`score_ner` or :func:`score_summaries` (the recipe's task) at the commands' default decoding
    lengths, every public baseline included."""
    if recipe["task"] == "ner":
        return score_ner(net, tokenizer, recipe, notes, progress=progress)
    return score_summaries(net, tokenizer, recipe, notes, progress=progress)


def read_test_notes(path, format: str, task: str, training_patients: set[str], patients=None) -> list:
    """The held-out notes of ``dpcare text finetune --test``, checked before any training note is read: the
    file reads, shares no patient with the training notes (a shared patient would be scored on what it trained
    on) and carries the task's gold annotations. ``patients``: the notes-to-patient mapping of the training
    notes (:func:`dpcare.text.patients.patient_mapping`), applied to these too."""
    from dpcare.text.readers import read_notes
    from dpcare.text.spans import ENTITY_LABELS

    notes = read_notes(path, format, patients)
    shared = sorted({n.patient_id for n in notes} & set(training_patients))
    if shared:
        raise DataError(f"--test {path}: {len(shared)} patient(s) are also in the training notes, e.g. {shared[:3]}: "
                        "held-out notes must come from other patients")
    check_gold(task, notes, ENTITY_LABELS, f"--test {path}")
    return notes


def comparison_lines(scores: NoteScores) -> list[str]:
    """One console line per public baseline: its score and the model's improvement with the 95% interval."""
    return [f"  vs {c['baseline_name']}: {scores.metric} {c['baseline']:.3f}, improvement {c['difference']:+.3f} "
            f"[{c['low']:+.3f}, {c['high']:+.3f}]" for c in (scores.result or {}).get("comparisons", [])]


__all__ = ["METRICS", "NoteScores", "check_gold", "comparison_lines", "gold_spans", "read_test_notes", "score_ner",
           "score_notes", "score_summaries"]
