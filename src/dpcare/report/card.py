"""A run as a Markdown model card, in the layout of Hugging Face's model card template (YAML metadata, then
Model Details, Uses, Bias/Risks/Limitations, Training Details, Evaluation, ...), with the same content as the
HTML report: the verdict first, the privacy guarantee and what it leaves out, metrics with their units, attacks,
warnings, the settings in effect and the timing of every phase.

Mitchell et al., "Model Cards for Model Reporting" (FAT* 2019), is the source of the layout's sections.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dpcare.report.html import (
    EVAL_SPLITS,
    EXPOSED,
    NO_VERDICT,
    flatten,
    fmt,
    metric_columns,
    relative,
    unit_text,
    verdict_lines,
)
from dpcare.report.model import Run


def card_path(out: str | os.PathLike, run: Run, runs: int) -> Path:
    """Where a run's card goes beside the page ``out``: ``report.md`` for one run, ``report.<run>.md`` for several."""
    out = Path(out)
    return out.with_suffix(".md") if runs == 1 else out.with_name(f"{out.stem}.{run.name}.md")


def _cell(v: Any) -> str:
    return fmt(v).replace("|", "\\|").replace("\n", " ")


def md_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    if not rows:
        return ""
    columns = list(columns or dict.fromkeys(k for r in rows for k in r))
    head = "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n"
    return head + "".join("| " + " | ".join(_cell(r.get(c)) for c in columns) + " |\n" for r in rows) + "\n"


def _bullets(lines: Sequence[str]) -> str:
    return "".join(f"- {line}\n" for line in lines) + "\n" if lines else ""


def _metadata(run: Run) -> str:
    """The YAML block the Hugging Face hub reads: tags, and each metric as a model-index result where numeric."""
    private = [p for p in run.privacy if p.private]
    tags = ["dpcare", "differential-privacy" if private else "no-differential-privacy", run.kind.replace(" ", "-")]
    lines = ["---", "library_name: dpcare", "tags:", *[f"- {t}" for t in tags]]
    if private:
        p = private[0]
        lines += [f"privacy_epsilon: {p.epsilon:.6g}", f"privacy_delta: {fmt(p.delta)}",
                  f"privacy_unit: \"{p.protects}\""]
    return "\n".join([*lines, "---"]) + "\n\n"


def model_card(run: Run, base: str | os.PathLike | None = None) -> str:
    """The Markdown model card of one run; ``base``: the card's folder (paths are written relative to it)."""
    base = Path(base).resolve() if base is not None else None
    models = ", ".join(p.label for p in run.privacy) or "the run's outputs"
    out = [_metadata(run), f"# Model card: {run.name} ({models})\n\n"]
    out.append("## Verdict\n\n" + (_bullets([f"**{line.split(':', 1)[0]}**:{line.split(':', 1)[1]}"
                                             for _, line in verdict_lines(run)]) or f"{NO_VERDICT}\n\n"))
    out.append("## Model Details\n\n### Model Description\n\n")
    out.append(_bullets([f"**Written by:** `{run.kind}`", f"**Run folder:** `{relative(run.path.resolve(), base)}`",
                         f"**Run id:** `{run.config.get('run id', '—')}`", f"**Models:** {models}"]))
    out.append("### Privacy guarantee\n\n")
    for p in run.privacy:
        lines = [s for s in p.plain_words() if not s.startswith(EXPOSED)]
        out.append(f"**{p.label}**\n\n" + _bullets(lines))
        if p.ledger:
            out.append(md_table([{"release charged": x.release, "mechanism": x.mechanism,
                                  "sampling rate q": x.sampling_rate, "noise multiplier sigma": x.noise_multiplier,
                                  "count": x.count} for x in p.ledger]))
    if not run.privacy:
        out.append("This folder saves no privacy guarantee.\n\n")
    out.append("## Uses\n\n### Out-of-Scope Use\n\n" + _bullets(_not_protected(run)))
    out.append("## Bias, Risks, and Limitations\n\n### Warnings the command printed\n\n"
               + (_bullets(run.warnings) or "None recorded.\n\n"))
    out.append("## Training Details\n\n### Training Hyperparameters (settings in effect)\n\n"
               + md_table([{"setting": k, "value": relative(v, base)} for k, v in flatten(run.config).items()]))
    if run.resolved:
        out.append("### Computed by the run\n\n"
                   + md_table([{"figure": k, "value": v} for k, v in flatten(run.resolved).items()]))
    out.append("### Speeds, Sizes, Times\n\n" + (md_table(run.phases, ["phase", "seconds"]) + md_table(run.timing)
                                                 or "Not recorded in this folder.\n\n"))
    out.append("## Evaluation\n\n### Metrics\n\n")
    columns = metric_columns(run)
    out.append(_bullets([f"**{c}**: {unit_text(run, c)}" for c in columns])
               or "No utility metric saved in this folder.\n\n")
    out.append("### Results\n\n" + md_table(run.utility))
    if run.attacks:
        out.append("### Attacks\n\n")
        for a in run.attacks:
            out.append(f"**{a.name}**\n\n" + md_table(a.rows))
    if run.notes:
        out.append("## More Information\n\n" + _bullets(run.notes))
    out.append("---\nWritten by `dpcare report` from the run folder's run.json; the HTML report beside it holds the "
               "same content with plots.\n")
    return "".join(out)


def _not_protected(run: Run) -> list[str]:
    lines = list(dict.fromkeys(line for p in run.privacy if p.private for line in p.plain_words()
                               if line.startswith(EXPOSED)))
    lines += [f"{p.label}: NO formal guarantee; everything it releases is unprotected." for p in run.privacy
              if not p.private]
    return [*lines, *run.not_protected, EVAL_SPLITS]


__all__ = ["card_path", "md_table", "model_card"]
