"""DP-2Stage synthetic tables (dp-2stage.txt): ``Synthesizer(schema, ...).fit(df).sample(n)``.

Serialisation, segment tokenisation with key/value/other roles, stage-1 pseudo data,
the weighted stage-2 loss through the DP engine, constrained / rejection / imputation
sampling and role-wise perplexity. See docs/dp2stage.md.
"""

from dpcare.synth.lm_model import LMSettings
from dpcare.synth.pseudo import numeric_ranges, uniform_pseudo_table
from dpcare.synth.serialize import RowSerializer, Span
from dpcare.synth.synthesizer import StageSettings, Synthesizer, SynthSettings
from dpcare.synth.tokens import KEY, OTHER, VALUE, weighted_token_loss

__all__ = ["KEY", "OTHER", "VALUE", "LMSettings", "RowSerializer", "Span", "StageSettings", "SynthSettings",
           "Synthesizer", "numeric_ranges", "uniform_pseudo_table", "weighted_token_loss"]
