"""Clinical notes, one subpackage per concern:

    text/corpus/    GENERATED discharge summaries grounded in real records (MIMIC-IV demo, SUPPORT2, RHC)
                    with gold PHI / problem-treatment-test / ICD / summary annotations
    text/views/     the public views of a note: masking of the sensitive spans, LM imputation of the masks
    text/lm/        private fine-tuning of causal LMs, generative NER, summaries, attacks, saved models
    text/classify/  note classification (ICD coding with CAML) on public word vectors

and shared here: ``spans`` (Note, Span), ``readers`` (real corpora a user supplies: MIMIC-III NOTEEVENTS,
i2b2 2010 and 2014, BRAT, JSONL) and ``evaluation`` (span F1, ROUGE-L, perplexity).

Names load on first use, so ``dpcare.text.classify.settings`` and the other settings modules the command line
needs do not import pandas, scipy or torch with this package.
"""

from dpcare.lazy import lazy_face

__getattr__, __dir__, __all__ = lazy_face(__name__, {
    **dict.fromkeys(("generate_corpus", "load_jsonl", "save_jsonl"), "corpus.generator"),
    **dict.fromkeys(("read_brat", "read_i2b2_2010", "read_i2b2_2014_xml", "read_jsonl", "read_noteevents",
                     "tokenize_spans", "write_brat", "write_i2b2_2010", "write_i2b2_2014_xml", "write_jsonl"),
                    "readers"),
    **dict.fromkeys(("ENTITY_LABELS", "GENERATED_PHI", "PHI_TYPES", "Note", "Span", "check_spans", "mask_phi",
                     "phi_leaks"),
                    "spans"),
    **dict.fromkeys(("SpanImputer",), "views.imputation"),
    **dict.fromkeys(("MaskedNote", "SpanMasker", "evaluate_masker"), "views.masking"),
})
