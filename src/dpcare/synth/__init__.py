"""DP synthetic tables: DP-2Stage (Afonja et al.), ``Synthesizer(schema, ...).fit(df).sample(n)``, and AIM
(McKenna et al.), ``AIMSynthesizer(schema, epsilon=8).fit(df).sample(n)``; ``load_synthesizer(folder)`` loads
either from its run folder.

Serialisation, segment tokenisation with key/value/other roles, stage-1 pseudo data,
the weighted stage-2 loss through the DP engine, constrained / rejection / imputation
sampling and role-wise perplexity; saved as a run folder. See docs/dp2stage.md.

Names load on first use, so ``dpcare.synth.settings`` (what the command line needs) imports no torch.
"""

from dpcare.lazy import lazy_face

__getattr__, __dir__, __all__ = lazy_face(__name__, {
    **dict.fromkeys(("KEY", "OTHER", "VALUE", "weighted_token_loss"), "tokens"),
    **dict.fromkeys(("AIMSettings", "LMSettings", "MODES", "SIZES", "Stage2Settings", "StageSettings",
                     "SynthSettings"), "settings"),
    **dict.fromkeys(("RowSerializer", "Span"), "serialize"),
    **dict.fromkeys(("numeric_ranges", "uniform_pseudo_table"), "pseudo"),
    **dict.fromkeys(("Synthesizer", "attach_evaluation", "plan"), "synthesizer"),
    **dict.fromkeys(("AIMSynthesizer",), "aim"),
    **dict.fromkeys(("load_synthesizer",), "saved"),
})
