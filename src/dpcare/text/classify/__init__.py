"""Note classification: ICD coding of notes with the CAML backbone (``caml``) on a vocabulary of public words
(``vocab``), multi-label losses and metrics (``multilabel``), the three views of a note (``data``) and the
recipe (``recipe``: ``fit`` -> :class:`NoteClassifier`; ``settings``: :class:`NoteClassifierSettings`).

Names load on first use, so ``dpcare.text.classify.settings`` (what the command line needs) imports no torch.
"""

from dpcare.lazy import lazy_face

__getattr__, __dir__, __all__ = lazy_face(__name__, {
    **dict.fromkeys(("NoteClassifier", "fit", "plan", "prepare_views", "train_views"), "recipe"),
    **dict.fromkeys(("METHOD_NAMES", "NoteClassifierSettings", "PAPER_SETTINGS", "paper_settings", "with_method"),
                    "settings"),
})
