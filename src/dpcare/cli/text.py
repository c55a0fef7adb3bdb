"""``dpcare text generate | mask | finetune | ner | summarise``: clinical notes, outside the benchmarks.

Notes are JSONL (``dpcare.text.read_jsonl``: note_id, patient_id, text, optional phi / entities spans,
icd_codes, summary_source / summary_target). The privacy unit of fine-tuning is the patient.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from dpcare.cli.budget import BudgetOption
from dpcare.exceptions import DataError, MissingFileError, SettingsError

app = typer.Typer(help="Clinical notes: generate, mask, fine-tune a language model privately, apply it.",
                  no_args_is_help=True)

NotesArg = Annotated[Path, typer.Argument(help="notes as JSONL (note_id, patient_id, text, ...)")]
ModelArg = Annotated[Path, typer.Argument(help="a folder written by `dpcare text finetune --out`")]
ForceOption = Annotated[bool, typer.Option("--force", help="replace a non-empty --out folder whole when the run "
                                                           "finishes (default: refuse it)")]


@app.command("generate")
def generate(
    out: Annotated[Path, typer.Option(help="JSONL file to write")],
    n_notes: Annotated[int, typer.Option(help="notes (split evenly over MIMIC-IV demo, SUPPORT2, RHC)")] = 100,
    seed: Annotated[int, typer.Option(help="seed of rows, identifiers and phrasing")] = 0,
) -> None:
    """Write GENERATED discharge summaries grounded in real records, with gold spans, ICD codes and
    summarisation pairs (docs/text-corpus.md): a corpus to try every text command on."""
    from dpcare.text import generate_corpus, write_jsonl

    notes = generate_corpus(n_notes, seed=seed)
    write_jsonl(notes, out)
    typer.echo(f"{len(notes)} generated notes of {len({n.patient_id for n in notes})} patients written to {out}")


@app.command("mask")
def mask(
    notes: NotesArg,
    out: Annotated[Path, typer.Option(help="JSONL of the public views: note_id, patient_id, masked text, slots")],
    placeholder: Annotated[str, typer.Option(help="text of a masked span; {label} is its type")] = "[{label}]",
) -> None:
    """Mask the sensitive spans of each note (spaCy NER + rules, docs/text-masking.md). The output holds the
    public view only; a span the masker misses stays in it (check the recall on annotated notes)."""
    from dpcare.io import write_json_lines
    from dpcare.text import read_jsonl
    from dpcare.text.views.masking import SpanMasker

    corpus = read_jsonl(notes)
    masked = SpanMasker(placeholder=placeholder).mask_many(corpus)
    write_json_lines(out, (m.public_dict() for m in masked))
    typer.echo(f"{sum(len(m.slots) for m in masked)} spans masked in {len(masked)} notes; public views in {out}")


@app.command("finetune")
def finetune(
    notes: NotesArg,
    out: Annotated[Path, typer.Option(help="run folder: weights.safetensors, finetune.json, guarantee.json, run.json; "
                                           "rerun the same command to resume an interrupted run")],
    task: Annotated[str, typer.Option(help="ner (generative, JSON list of spans) or summarisation")] = "ner",
    mode: Annotated[str, typer.Option(help="dp-lora, dp-full, dp-prefix or non-private")] = "dp-lora",
    epsilon: Annotated[float | None, typer.Option(help="target epsilon (private modes)")] = 3.0,
    delta: Annotated[float | None, typer.Option(help="delta (default 1/patients^1.1)")] = None,
    model: Annotated[str, typer.Option(help="'smollm2' or a local Hugging Face causal-LM folder")] = "smollm2",
    layers: Annotated[int, typer.Option(help="keep the first k blocks (0: all; a cut model is for smoke "
                                             "tests only)")] = 0,
    epochs: Annotated[float, typer.Option(help="passes over the patients (in expectation)")] = 3.0,
    batch_size: Annotated[int, typer.Option(help="expected patients per step (Poisson)")] = 16,
    lr: Annotated[float | None, typer.Option(help="Adam learning rate (default: the mode's starting point)")] = None,
    clip: Annotated[float, typer.Option(help="per-patient clip norm C (the initial C when adaptive)")] = 1.0,
    clip_variant: Annotated[str, typer.Option(
        help="fixed, adaptive-median (private quantile estimate) or warmup-p80 (10 charged warm-up counts to "
             "the 80th percentile, then frozen)")] = "fixed",
    window: Annotated[int, typer.Option(help="note tokens per NER window")] = 256,
    stride: Annotated[int, typer.Option(help="tokens between window starts (0: no sliding; a longer note is "
                                             "an error)")] = 128,
    seed: Annotated[int, typer.Option(help="seed of sampling, noise and adapters")] = 0,
    physical_batch: Annotated[int, typer.Option(help="rows per forward/backward pass (memory only)")] = 8,
    force: ForceOption = False,
    budget: BudgetOption = None,
) -> None:
    """Fine-tune a causal LM on notes, the PATIENT as the privacy unit (every window of every note of a
    patient clipped together); save the trained weights as a run folder and print the guarantee."""
    from dpcare.privacy import (
        NEIGHBOURING,
        Guarantee,
        PrivacyLedger,
        ProtectedUnit,
        default_delta,
        guard_run,
    )
    from dpcare.runs import RunFolder
    from dpcare.text import read_jsonl
    from dpcare.text.lm.finetune import FinetuneMode, adaptive_clip, check_mode_privacy
    from dpcare.text.lm.finetune import finetune as run_finetune
    from dpcare.text.lm.saved import finetune_manifest, save_finetuned

    clipping = adaptive_clip(clip_variant)  # None for the fixed C; an unknown variant is an error
    parsed = FinetuneMode.parse(mode)
    if not parsed.private:
        epsilon = None
    check_mode_privacy(parsed, epsilon, delta)
    if model != "smollm2" and not Path(model).is_dir():
        raise MissingFileError(f"unknown model path {model!r}: not a folder (use 'smollm2' or a local "
                               "Hugging Face causal-LM folder)")
    patients = count_patients(notes)  # the n that every ledger states; no note text is read before the budget
    planned = Guarantee(epsilon=epsilon, delta=delta if delta is not None else default_delta(patients), n=patients,
                        unit=ProtectedUnit.PATIENT, neighbouring=NEIGHBOURING[ProtectedUnit.PATIENT]
                        ) if parsed.private else None
    settings = {"task": task, "mode": mode, "epsilon": epsilon, "delta": delta, "model": model, "layers": layers,
                "epochs": epochs, "batch_size": batch_size, "lr": lr, "clip": clip, "clip_variant": clip_variant,
                "window": window, "stride": stride, "seed": seed}
    run = RunFolder(out, "text-finetune", settings, force=force, command="dpcare text finetune")
    with guard_run(budget, planned, run_id=run.run_id, command="text finetune", data=notes) as held:
        net, _, info = run_finetune(
            read_jsonl(notes), task, parsed, epsilon=epsilon, delta=delta, model=model, layers=layers or None, epochs=epochs,
            batch_size=batch_size, lr=lr, clip_norm=clip, seed=seed, window=window, stride=stride or None,
            checkpoint_dir=run.checkpoint_dir, progress=True, max_physical_batch=physical_batch,
            adaptive_clip=clipping)
        if held is not None:
            held.actual = PrivacyLedger.from_state_dict(info["ledger"])
    save_finetuned(net, info, run.staging)
    run.finish(finetune_manifest(info, settings, data={"path": str(notes), "patients": info["patients"],
                                                       "notes": info["notes"], "rows": info["rows"]}))
    typer.echo(f"{info['mode']} {task}: {info['patients']} patients, {info['notes']} notes, {info['rows']} rows, "
               f"{info['steps']} steps, {info['trainable_parameters']:,} trainable parameters")
    typer.echo(info["guarantee_text"])
    typer.echo(f"saved to {out}/")


def count_patients(path: Path) -> int:
    """Distinct patient ids of a JSONL notes file (only that field is kept; the notes are checked when read)."""
    if not path.is_file():
        raise MissingFileError(f"no such file: {path}")
    ids = set()
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            try:
                ids.add(json.loads(line).get("patient_id") if line.strip() else None)
            except (json.JSONDecodeError, AttributeError):
                raise DataError(f"{path}:{lineno}: not a JSON object") from None
    ids.discard(None)
    if not ids:
        raise DataError(f"{path}: no notes")
    return len(ids)


@app.command("ner")
def ner(
    model_dir: ModelArg,
    notes: NotesArg,
    out: Annotated[Path, typer.Option(help="JSONL: the notes with the predicted entities")],
    max_tokens: Annotated[int, typer.Option(help="most tokens of one window's entity list")] = 512,
    batch_size: Annotated[int, typer.Option(help="windows decoded together (speed only)")] = 8,
) -> None:
    """Extract problem / treatment / test spans with a fine-tuned NER model (constrained decoding: every
    entity is a span of the note); scores exact-match span F1 when the notes carry gold entities."""
    from dataclasses import replace

    from dpcare.text import read_jsonl, write_jsonl
    from dpcare.text.evaluation import span_scores
    from dpcare.text.lm.generative_ner import extract_entities_many
    from dpcare.text.lm.saved import load_finetuned

    net, tokenizer, meta = load_finetuned(model_dir)
    r = meta["recipe"]
    if r["task"] != "ner":
        raise SettingsError(f"{model_dir} was fine-tuned for {r['task']!r}, not ner")
    corpus = read_jsonl(notes)
    labels = tuple(r["labels"])
    predicted = extract_entities_many(net, tokenizer, [n.text for n in corpus], labels, r["window"], r["stride"],
                                      max_tokens, batch_size, progress=True)
    write_jsonl([replace(n, entities=tuple(p)) for n, p in zip(corpus, predicted)], out)
    gold = [[s for s in (*n.entities, *n.phi) if s.label in labels] for n in corpus]
    if any(gold):
        typer.echo(span_scores(gold, predicted).round(3).to_string())
    typer.echo(f"{sum(map(len, predicted))} entities in {len(corpus)} notes written to {out}")


@app.command("summarise")
def summarise(
    model_dir: ModelArg,
    notes: NotesArg,
    out: Annotated[Path, typer.Option(help="JSONL: note_id and summary")],
    max_tokens: Annotated[int, typer.Option(help="most tokens of a summary")] = 96,
) -> None:
    """Summarise each note's hospital course (summary_source, or the whole text when it has none) with a
    fine-tuned summarisation model; scores ROUGE-L when the notes carry reference summaries."""
    from dpcare.io import write_json_lines
    from dpcare.progress import progress
    from dpcare.text import read_jsonl
    from dpcare.text.evaluation import rouge_l
    from dpcare.text.lm.saved import load_finetuned
    from dpcare.text.lm.summaries import write_summary

    net, tokenizer, meta = load_finetuned(model_dir)
    if meta["recipe"]["task"] != "summarisation":
        raise SettingsError(f"{model_dir} was fine-tuned for {meta['recipe']['task']!r}, not summarisation")
    corpus = read_jsonl(notes)
    written = [write_summary(net, tokenizer, n.summary_source or n.text, max_tokens)
               for n in progress(corpus, desc="summaries")]
    write_json_lines(out, ({"note_id": n.note_id, "summary": s} for n, s in zip(corpus, written)))
    scored = [(n.summary_target, s) for n, s in zip(corpus, written) if n.summary_target.strip()]
    if scored:
        scores = rouge_l(*map(list, zip(*scored)))
        typer.echo(f"ROUGE-L F1 {scores['fmeasure']:.3f} over {len(scored)} notes with a reference summary")
    typer.echo(f"{len(written)} summaries written to {out}")
