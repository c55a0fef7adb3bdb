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

EVAL_SPLITS = ("Validation and test rows are not training data: they, the metrics computed on them and every attack "
               "result in this report are outside the guarantee (nothing there is noised); publishing them is a "
               "release of its own.")
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
    out = table(run.utility)
    pairs = next(((key, p) for key in run.headline if (p := _numbers(run.utility, key))), None)
    if pairs and len(pairs[1]) > 1:
        out += _bars(pairs[1], pairs[0], f"{run.name}: {pairs[0]}")
    return out


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
        for u in run.utility or [{"model": p.label} for p in run.privacy]:
            p = privacy.get(u["model"])
            rows.append({"folder": run.name, "model": u["model"], "written by": run.kind,
                         "protects": p.protects if p else "—", "epsilon": p.epsilon if p and p.private else None,
                         "delta": p.delta if p else None, **{h: u.get(h) for h in headline},
                         "attack AUC": _first(auc.get(u["model"]))})
    out = table(rows)
    pairs = _numbers([{**r, "model": f"{r['folder']}: {r['model']}"} for r in rows], headline[0]) if headline else []
    if len(runs) > 1 and len(pairs) > 1:
        out += _bars(pairs, headline[0], f"{headline[0]} across folders")
    return out


def _first(v: Any) -> Any:
    return v[0] if isinstance(v, tuple) else v


def run_section(run: Run, anchor: str) -> str:
    figures = "".join(f"<figure>{img(p.read_bytes(), caption)}<figcaption class=muted>{escape(caption)} "
                      f"({escape(p.name)})</figcaption></figure>" for caption, p in run.figures)
    config = "".join(f"<li><b>{escape(k)}</b> = {escape(fmt(v))}</li>" for k, v in flatten(run.config).items())
    config = f"<ul class=kv>{config}</ul>" if config else "<p class=muted>No configuration saved.</p>"
    timing = table(run.timing) or "<p class=muted>Timing: not recorded in this folder.</p>"
    notes = "".join(f"<li>{escape(n)}</li>" for n in run.notes)
    return (f"<h2 id={anchor}>{escape(run.name)} <span class=muted>({escape(run.kind)})</span></h2>"
            f"<p class=muted>{escape(str(run.path))}</p>"
            f"<h3>Privacy guarantee</h3>{guarantee_section(run)}"
            f"<h3>What is NOT protected</h3>{not_protected_section(run)}"
            f"<h3>Utility</h3>{utility_section(run)}"
            f"<h3>Attacks</h3>{attacks_section(run)}"
            + (f"<h3>Figures saved by the run</h3>{figures}" if figures else "")
            + f"<h3>Configuration</h3>{config}<h3>Timing</h3>{timing}"
            + (f"<h3>Notes</h3><ul>{notes}</ul>" if notes else ""))


def render(runs: Sequence[Run], title: str | None = None) -> str:
    title = title or "dpcare report: " + ", ".join(r.name for r in runs)
    toc = "".join(f"<li><a href=#run{i}>{escape(r.name)}</a> ({escape(r.kind)})</li>" for i, r in enumerate(runs))
    heading = "Comparison" if len(runs) > 1 else "Summary"
    body = "".join(run_section(r, f"run{i}") for i, r in enumerate(runs))
    return (f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>{escape(title)}</title>"
            f"<style>{STYLE}</style></head><body><h1>{escape(title)}</h1><ul>{toc}</ul>"
            f"<h2>{heading}</h2><p class=muted>One row per model; epsilon and delta from each folder's saved "
            f"guarantee (— : no formal guarantee or not saved).</p>{comparison_section(runs)}{body}</body></html>\n")


def write_report(run_dirs: Sequence[str | os.PathLike], out: str | os.PathLike, title: str | None = None) -> Path:
    """Read every folder (a clear error for one that no dpcare command wrote) and write the page atomically."""
    if not run_dirs:
        raise SettingsError("give at least one run folder")
    check_writable_file(out, "--out")
    return write_text(out, render([collect(d) for d in run_dirs], title))
