"""GENERATED clinical notes grounded in real records (MIMIC-IV demo, SUPPORT2, RHC), with gold PHI /
problem-treatment-test / ICD / summary annotations: ``generator`` (the notes), ``sources`` (the records),
``phrases`` (the wording) and ``builder`` (a note assembled span by span)."""

from dpcare.text.corpus.generator import generate_corpus, load_jsonl, save_jsonl

__all__ = ["generate_corpus", "load_jsonl", "save_jsonl"]
