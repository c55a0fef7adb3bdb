"""Note classification: ICD coding with the CAML backbone (``caml``) on a vocabulary of public words
(``vocab``), multi-label losses and metrics (``multilabel``)."""
