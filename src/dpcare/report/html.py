"""One self-contained HTML page for one or more runs: inline CSS, plots as base64 PNG, no scripts."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Sequence
from html import escape
from pathlib import Path
from typing import Any

from dpcare.exceptions import SettingsError
from dpcare.io import check_writable_file, write_text
from dpcare.report.collect import collect
from dpcare.report.model import Privacy, Run
from dpcare.report.plots import bar_png, data_uri, roc_png
from dpcare.units import unit_of
from dpcare.verdict import OUTSIDE_THE_GUARANTEE

EVAL_SPLITS = OUTSIDE_THE_GUARANTEE.format(units="units") + "."  # the console's line, for any unit
#: lines of ``Guarantee.describe()`` that belong in "What is NOT protected"
EXPOSED = ("NOT protected:", "Treated as public:", "NOT counted in epsilon")
STYLE = """
body{font:14px/1.45 system-ui,-apple-system,'DejaVu Sans',sans-serif;margin:24px auto;max-width:1200px;color:#222;
padding:0 16px}
h1{font-size:24px;margin-bottom:4px}h2{font-size:19px;border-bottom:2px solid #4C72B0;padding-bottom:3px;
margin-top:36px}h3{font-size:16px;margin:22px 0 6px}h4{font-size:14px;margin:14px 0 4px}
table{border-collapse:collapse;margin:6px 0 10px;font-size:12.5px}th,td{border:1px solid #ccc;padding:3px 7px;
text-align:left;vertical-align:top}th{background:#eef2f8}td.n{text-align:right;font-variant-numeric:tabular-nums}
.guarantee{background:#f3f8f1;border-left:4px solid #4a9a3a;padding:6px 12px;margin:6px 0}
.none{background:#fbf0ef;border-left:4px solid #c0392b;padding:6px 12px;margin:6px 0}
.exposed{background:#fff8e6;border-left:4px solid #d4a017;padding:6px 12px}
.verdict{font-size:15px;padding:6px 12px;margin:6px 0;border-left:4px solid #d4a017;background:#fff8e6}
.verdict.worth{border-color:#4a9a3a;background:#f3f8f1}.verdict.dont{border-color:#c0392b;background:#fbf0ef}
.muted{color:#666;font-size:12.5px}img{max-width:100%;border:1px solid #ddd;margin:4px 8px 4px 0}
code{background:#f4f4f4;padding:0 3px}
ul.kv{columns:3;font-size:12.5px;list-style:none;padding-left:0}ul.kv li{break-inside:avoid}
"""


def fmt(v: Any) -> str:
    """A cell: 4 significant digits, (value, low, high) as 'value [low, high]', missing as '—'."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if isinstance(v, (bool, str)):
        return str(v)
    if isinstance(v, (int, float)):
        return "∞" if math.isinf(v) else f"{v:.4g}"
    if isinstance(v, (tuple, list)) and len(v) == 3 and all(isinstance(x, (int, float)) for x in v):
        return f"{fmt(v[0])} [{fmt(v[1])}, {fmt(v[2])}]"
    if isinstance(v, (tuple, list)) and len(v) == 2 and all(isinstance(x, (int, float)) for x in v):
        return f"[{fmt(v[0])}, {fmt(v[1])}]"
    if isinstance(v, (tuple, list)) and all(not isinstance(x, (dict, list)) for x in v):
        return ", ".join(fmt(x) for x in v)
    return json.dumps(v, default=str)


def table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    if not rows:
        return ""
    columns = list(columns or dict.fromkeys(k for r in rows for k in r))
    head = "".join(f"<th>{escape(str(c))}</th>" for c in columns)
    body = "".join("<tr>" + "".join(_cell(r.get(c)) for c in columns) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _cell(v: Any) -> str:
    numeric = isinstance(v, (int, float, tuple)) and not isinstance(v, bool)
    return f"<td{' class=n' if numeric else ''}>{escape(fmt(v))}</td>"


def img(png: bytes, alt: str) -> str:
    return f'<img alt="{escape(alt)}" src="{data_uri(png)}">'


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out |= flatten(v, f"{prefix}{k}.")
        else:
            out[f"{prefix}{k}"] = v
    return out


# --------------------------------------------------------------------------- sections
NO_VERDICT = ("No verdict: this folder saves no comparison with a public baseline (a run without held-out data, "
              "or one written before dpcare saved verdicts): nothing here says the model is worth releasing.")


def verdict_lines(run: Run) -> list[tuple[str, str]]:
    """(css class, line) per verdict of the run: the plain verdict first, then what it rests on."""
    out = []
    for v in run.verdicts:
        cls = "worth" if v["verdict"] == "worth releasing" else "dont" if v["verdict"].startswith("do not") else ""
        rest = (f"{v['metric']}: {fmt(v.get('model value'))} against {fmt(v.get('baseline value'))} for "
                f"{v['against']}")
        if v.get("difference [95% interval]"):
            rest += f"; difference {fmt(v['difference [95% interval]'])} over {v['test units']} test units"
        out.append((cls, f"{v['model']}: {v['verdict']} ({rest})"))
    return out


def verdict_section(run: Run) -> str:
    lines = verdict_lines(run)
    if not lines:
        return f"<p class=verdict>{escape(NO_VERDICT)}</p>"
    return "".join(f"<p class='verdict {cls}'>{escape(line)}</p>" for cls, line in lines)


def guarantee_section(run: Run) -> str:
    if not run.privacy:
        return "<p class=none>This folder saves no privacy guarantee.</p>"
    parts = []
    for p in run.privacy:
        lines = [s for s in p.plain_words() if not s.startswith(EXPOSED)]
        cls = "guarantee" if p.private else "none"
        parts.append(f"<h4>{escape(p.label)}</h4><div class={cls}>"
                     + "".join(f"<p>{escape(s)}</p>" for s in lines) + "</div>")
        if p.private:
            parts.append(ledger_table(p))
    return "".join(parts)


def ledger_table(p: Privacy) -> str:
    note = f"<p class=muted>Ledger lines: {escape(p.ledger_note or 'not saved')}.</p>"
    if not p.ledger:
        return note
    rows = [{"release charged": x.release, "mechanism": x.mechanism or "see the release text",
             "sampling rate q": x.sampling_rate, "noise multiplier sigma": x.noise_multiplier, "count": x.count}
            for x in p.ledger]
    return table(rows) + note


def not_protected_section(run: Run) -> str:
    exposed: dict[str, list[str]] = {}
    for p in run.privacy:
        for line in p.plain_words() if p.private else []:
            if line.startswith(EXPOSED):
                exposed.setdefault(line, []).append(p.label)
    items = [f"{_labels(labels, len(run.privacy))}{line}" for line, labels in exposed.items()]
    unguarded = [p.label for p in run.privacy if not p.private]
    if unguarded:
        items.append(f"{', '.join(unguarded)}: NO formal guarantee; everything these models release is unprotected.")
    if any(p.private and p.guarantee is None for p in run.privacy):
        items.append("Where the folder saves only epsilon (no whole guarantee), the exact neighbouring relation and "
                     "the public columns are not recorded here: see the writer's documentation.")
    if not exposed:
        items.append("Anything computed from the data outside the ledger lines above is not covered.")
    items += [*run.not_protected, EVAL_SPLITS]
    return "<ul class=exposed>" + "".join(f"<li>{escape(s)}</li>" for s in items) + "</ul>"


def _labels(labels: list[str], total: int) -> str:
    return "" if len(labels) == total else f"{', '.join(labels)}: "


def utility_section(run: Run) -> str:
    if not run.utility:
        return "<p class=muted>No utility metric saved in this folder.</p>"
    out = table(run.utility) + units_list(run)
    pairs = next(((key, p) for key in run.headline if (p := _numbers(run.utility, key))), None)
    if pairs and informative(pairs[1]):
        out += _bars(pairs[1], pairs[0], f"{run.name}: {pairs[0]}")
    return out


def metric_columns(run: Run) -> list[str]:
    """The numeric columns of the utility rows (the metrics), in order."""
    return list(dict.fromkeys(k for r in run.utility for k, v in r.items()
                              if k != "model" and isinstance(v, (int, float)) and not isinstance(v, bool)))


def units_list(run: Run) -> str:
    """What each metric measures and on which scale (run.json ``units``); a metric the run gave no unit is named."""
    columns = metric_columns(run)
    if not columns:
        return ""
    items = [f"<li><b>{escape(c)}</b>: {escape(unit_text(run, c))}</li>" for c in columns]
    return f"<ul class=muted>{''.join(items)}</ul>"


def unit_text(run: Run, column: str) -> str:
    """The unit the run recorded for a metric column, else the glossary's (folders written before run.json kept
    units), else a plain "not recorded"."""
    return run.units.get(column) or unit_of(column) or "unit not recorded by the run"


def informative(pairs: list[tuple[str, float]]) -> bool:
    """A bar chart says something only for two or more bars of different, not all zero, heights."""
    values = {round(v, 12) for _, v in pairs}
    return len(pairs) > 1 and len(values) > 1 and any(values)


def _numbers(rows: Iterable[dict[str, Any]], key: str) -> list[tuple[str, float]]:
    return [(str(r.get("model")), float(r[key])) for r in rows
            if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]


def _bars(pairs: list[tuple[str, float]], key: str, title: str) -> str:
    return img(bar_png([m for m, _ in pairs], [v for _, v in pairs], key, title), title)


def attacks_section(run: Run) -> str:
    if not run.attacks:
        return ("<p class=muted>No attack was run on this folder (see <code>dpcare train --audit</code> and "
                "<code>dpcare audit</code>).</p>")
    parts = []
    for a in run.attacks:
        parts.append(f"<h4>{escape(a.name)}</h4>" + table(a.rows))
        if a.curves:
            parts.append(img(roc_png(a.curves, a.name.split(" (")[0]), f"ROC: {a.name}"))
        elif a.saved_plots:
            parts.append("<p class=muted>ROC curve: the plot the run saved (the folder keeps no attack scores).</p>"
                         + "".join(img(p.read_bytes(), f"ROC: {a.name}") for p in a.saved_plots))
        else:
            parts.append("<p class=muted>No ROC curve was saved: only the numbers above.</p>")
    return "".join(parts)


def comparison_section(runs: Sequence[Run]) -> str:
    headline = list(dict.fromkeys(h for r in runs for h in r.headline))
    rows = []
    for run in runs:
        privacy = {p.label: p for p in run.privacy}
        auc = {}
        for a in run.attacks:
            for row in a.rows:
                auc.setdefault(row.get("model"), row.get("AUC"))
        verdict = {v["model"]: v["verdict"] for v in reversed(run.verdicts)}  # the first verdict of a model
        for u in run.utility or [{"model": p.label} for p in run.privacy]:
            p = privacy.get(u["model"])
            rows.append({"folder": run.name, "model": u["model"], "written by": run.kind,
                         "protects": p.protects if p else "—", "epsilon": p.epsilon if p and p.private else None,
                         "delta": p.delta if p else None, "verdict": verdict.get(u["model"]),
                         **{h: u.get(h) for h in headline}, "attack AUC": _first(auc.get(u["model"]))})
    out = table(rows)
    pairs = _numbers([{**r, "model": f"{r['folder']}: {r['model']}"} for r in rows], headline[0]) if headline else []
    if len(runs) > 1 and informative(pairs):
        out += _bars(pairs, headline[0], f"{headline[0]} across folders")
    return out


def _first(v: Any) -> Any:
    return v[0] if isinstance(v, tuple) else v


def warnings_section(run: Run) -> str:
    if not run.warnings:
        return "<p class=muted>The command printed no warning (runs written before dpcare kept them say none).</p>"
    return "<ul class=exposed>" + "".join(f"<li>{escape(w)}</li>" for w in run.warnings) + "</ul>"


def timing_section(run: Run) -> str:
    out = table(run.phases, ["phase", "seconds"]) + table(run.timing)
    return out or "<p class=muted>Timing: not recorded in this folder.</p>"


def relative(value: Any, base: Path | None) -> Any:
    """An absolute path (a folder's, a configured file's) as a path relative to the report's folder."""
    if base is None or not isinstance(value, (str, Path)) or not os.path.isabs(value):
        return value
    return os.path.relpath(value, base)


def settings_list(items: dict[str, Any], base: Path | None) -> str:
    rows = "".join(f"<li><b>{escape(k)}</b> = {escape(fmt(relative(v, base)))}</li>" for k, v in flatten(items).items())
    return f"<ul class=kv>{rows}</ul>" if rows else ""


def run_section(run: Run, anchor: str, base: Path | None = None) -> str:
    figures = "".join(f"<figure>{img(p.read_bytes(), caption)}<figcaption class=muted>{escape(caption)} "
                      f"({escape(p.name)})</figcaption></figure>" for caption, p in run.figures)
    config = settings_list(run.config, base) or "<p class=muted>No configuration saved.</p>"
    resolved = settings_list(run.resolved, base)
    notes = "".join(f"<li>{escape(n)}</li>" for n in run.notes)
    return (f"<h2 id={anchor}>{escape(run.name)} <span class=muted>({escape(run.kind)})</span></h2>"
            f"<p class=muted>run folder: {escape(str(relative(run.path.resolve(), base)))}</p>"
            f"<h3>Verdict</h3>{verdict_section(run)}"
            f"<h3>Privacy guarantee</h3>{guarantee_section(run)}"
            f"<h3>What is NOT protected</h3>{not_protected_section(run)}"
            f"<h3>Utility</h3>{utility_section(run)}"
            f"<h3>Attacks</h3>{attacks_section(run)}"
            f"<h3>Warnings</h3>{warnings_section(run)}"
            + (f"<h3>Figures saved by the run</h3>{figures}" if figures else "")
            + f"<h3>Settings in effect</h3>{config}"
            + (f"<h3>Computed by the run</h3>{resolved}" if resolved else "")
            + f"<h3>Timing</h3>{timing_section(run)}"
            + (f"<h3>Notes</h3><ul>{notes}</ul>" if notes else ""))


def render(runs: Sequence[Run], title: str | None = None, base: str | os.PathLike | None = None) -> str:
    """The page; ``base``: the folder the page is written to (paths are shown relative to it)."""
    base = Path(base).resolve() if base is not None else None
    title = title or "dpcare report: " + ", ".join(r.name for r in runs)
    toc = "".join(f"<li><a href=#run{i}>{escape(r.name)}</a> ({escape(r.kind)})</li>" for i, r in enumerate(runs))
    heading = "Comparison" if len(runs) > 1 else "Summary"
    verdicts = "".join(f"<p class='verdict {cls}'>{escape(line)}</p>" for r in runs for cls, line in verdict_lines(r))
    verdicts = verdicts or f"<p class=verdict>{escape(NO_VERDICT)}</p>"
    body = "".join(run_section(r, f"run{i}", base) for i, r in enumerate(runs))
    return (f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>{escape(title)}</title>"
            f"<style>{STYLE}</style></head><body><h1>{escape(title)}</h1>{verdicts}<ul>{toc}</ul>"
            f"<h2>{heading}</h2><p class=muted>One row per model; epsilon and delta from each folder's saved "
            f"guarantee (— : no formal guarantee or not saved).</p>{comparison_section(runs)}{body}</body></html>\n")


def write_report(run_dirs: Sequence[str | os.PathLike], out: str | os.PathLike, title: str | None = None,
                 card: bool = True) -> Path:
    """Read every folder (a clear error for one that no dpcare command wrote) and write the page atomically;
    with ``card``, each run's Markdown model card beside it (:func:`dpcare.report.card.card_path`)."""
    from dpcare.report.card import card_path, model_card

    if not run_dirs:
        raise SettingsError("give at least one run folder")
    check_writable_file(out, "--out")
    runs = [collect(d) for d in run_dirs]
    page = write_text(out, render(runs, title, Path(out).resolve().parent))
    if card:
        for run in runs:
            path = card_path(out, run, len(runs))
            write_text(path, model_card(run, path.resolve().parent))
    return page
