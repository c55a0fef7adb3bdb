"""Clinical-note corpora: GENERATED discharge summaries grounded in real records (MIMIC-IV demo,
SUPPORT2, RHC) with gold PHI / problem-treatment-test / ICD / summary annotations, and readers for
real corpora a user supplies (MIMIC-III NOTEEVENTS, i2b2 2010 and 2014, BRAT, JSONL)."""

from dpcare.text.corpus import generate_corpus, load_jsonl, save_jsonl
from dpcare.text.imputation import SpanImputer
from dpcare.text.masking import MaskedNote, SpanMasker, evaluate_masker
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

__all__ = [
    "ENTITY_LABELS", "GENERATED_PHI", "PHI_TYPES", "MaskedNote", "Note", "Span", "SpanImputer", "SpanMasker",
    "check_spans", "evaluate_masker", "generate_corpus", "load_jsonl", "mask_phi", "phi_leaks",
    "read_brat", "read_i2b2_2010", "read_i2b2_2014_xml", "read_jsonl", "read_noteevents",
    "save_jsonl", "tokenize_spans", "write_brat", "write_i2b2_2010", "write_i2b2_2014_xml",
    "write_jsonl",
]
