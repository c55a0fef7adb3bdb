"""Clinical notes, one subpackage per concern:

    text/corpus/    GENERATED discharge summaries grounded in real records (MIMIC-IV demo, SUPPORT2, RHC)
                    with gold PHI / problem-treatment-test / ICD / summary annotations
    text/views/     the public views of a note: masking of the sensitive spans, LM imputation of the masks
    text/lm/        private fine-tuning of causal LMs, generative NER, summaries, attacks, saved models
    text/classify/  note classification (ICD coding with CAML) on public word vectors

and shared here: ``spans`` (Note, Span), ``readers`` (real corpora a user supplies: MIMIC-III NOTEEVENTS,
i2b2 2010 and 2014, BRAT, JSONL) and ``evaluation`` (span F1, ROUGE-L, perplexity).
"""

from dpcare.text.corpus.generator import generate_corpus, load_jsonl, save_jsonl
from dpcare.text.readers import (
    read_brat,
    read_i2b2_2010,
    read_i2b2_2014_xml,
    read_jsonl,
    read_noteevents,
    tokenize_spans,
    write_brat,
    write_i2b2_2010,
    write_i2b2_2014_xml,
    write_jsonl,
)
from dpcare.text.spans import (
    ENTITY_LABELS,
    GENERATED_PHI,
    PHI_TYPES,
    Note,
    Span,
    check_spans,
    mask_phi,
    phi_leaks,
)
from dpcare.text.views.imputation import SpanImputer
from dpcare.text.views.masking import MaskedNote, SpanMasker, evaluate_masker

__all__ = [
    "ENTITY_LABELS", "GENERATED_PHI", "PHI_TYPES", "MaskedNote", "Note", "Span", "SpanImputer", "SpanMasker",
    "check_spans", "evaluate_masker", "generate_corpus", "load_jsonl", "mask_phi", "phi_leaks",
    "read_brat", "read_i2b2_2010", "read_i2b2_2014_xml", "read_jsonl", "read_noteevents",
    "save_jsonl", "tokenize_spans", "write_brat", "write_i2b2_2010", "write_i2b2_2014_xml",
    "write_jsonl",
]
