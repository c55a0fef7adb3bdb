"""The public views of a note: ``masking`` (Psi(x): the sensitive spans masked), ``imputation`` (the hybrid
note: every masked span filled by a language model that reads only the masked text) and ``safe_words``
(the public word lists both rely on)."""

from dpcare.text.views.imputation import SpanImputer
from dpcare.text.views.masking import MaskedNote, SpanMasker, evaluate_masker

__all__ = ["MaskedNote", "SpanImputer", "SpanMasker", "evaluate_masker"]
