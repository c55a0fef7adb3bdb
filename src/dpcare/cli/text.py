"""``dpcare text generate | mask | finetune | ner | summarise | classify | codes``: clinical notes, outside the
benchmarks.

Notes are JSONL by default (``dpcare.text.read_jsonl``: note_id, patient_id, text, optional phi / entities
spans, icd_codes, summary_source / summary_target); every command that reads notes takes ``--format`` for
the other formats of ``dpcare.text.readers.read_notes`` (a JSON array, a folder of .txt notes, BRAT,
MIMIC NOTEEVENTS, i2b2 2010 and 2014). The privacy unit of fine-tuning and classification is the patient.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from dpcare.cli.budget import BudgetOption, with_budget_delta
from dpcare.cli.common import RayAddressOption, echo_outside_the_guarantee, echo_plain_verdict, use_ray
from dpcare.cli.options import settings_options
from dpcare.exceptions import MissingFileError, SettingsError
from dpcare.text.classify.settings import NoteClassifierSettings
from dpcare.text.lm.settings import FinetuneSettings

app = typer.Typer(help="Clinical notes: generate, mask, fine-tune a language model or train an ICD coder privately, "
                       "apply them.", no_args_is_help=True)

NotesArg = Annotated[Path, typer.Argument(help="notes: a JSONL file (note_id, patient_id, text, ...) or another "
                                               "--format")]
FormatOption = Annotated[str, typer.Option("--format", help="how NOTES are stored: jsonl (default), json (one array "
                                                            "of note objects), txt (a folder of .txt notes), brat, "
                                                            "noteevents, i2b2-2010 or i2b2-2014")]
PatientsOption = Annotated[str | None, typer.Option(
    "--patients", help="which patient each note belongs to, for formats that name none (txt, brat, i2b2-2010; "
                       "overrides i2b2-2014's file names): a CSV of note_id,patient_id (note_id = the file name "
                       "without .txt), or a file-name pattern with a (?P<patient>...) group, e.g. "
                       "'(?P<patient>\\d+)_.*'. Without it each such note is its own patient (warned)")]
ModelArg = Annotated[Path, typer.Argument(help="a folder written by `dpcare text finetune --out`")]
ForceOption = Annotated[bool, typer.Option("--force", help="replace a non-empty --out folder whole when the run "
                                                           "finishes (default: refuse it)")]
BaselineOption = Annotated[bool, typer.Option(help="with gold annotations, also run the base model without "
                                                   "fine-tuning on the same notes (a public baseline; doubles the "
                                                   "decoding time)")]


@app.command("generate")
def generate(
    out: Annotated[Path, typer.Option(help="JSONL file to write")],
    n_notes: Annotated[int, typer.Option(help="notes (split evenly over MIMIC-IV demo, SUPPORT2, RHC)")] = 100,
    seed: Annotated[int, typer.Option(help="seed of rows, identifiers and phrasing")] = 0,
    style: Annotated[str, typer.Option(help="templates (the published corpora, unchanged) or varied (abbreviations, "
                                            "list and header layouts, negated and uncertain problems, terse and "
                                            "lower-case notes)")] = "templates",
) -> None:
    """Write GENERATED discharge summaries grounded in real records, with gold spans, ICD codes and
    summarisation pairs (docs/text-corpus.md): a corpus to try every text command on."""
    from dpcare.text import generate_corpus, write_jsonl

    notes = generate_corpus(n_notes, seed=seed, style=style)
    write_jsonl(notes, out)
    typer.echo(f"{len(notes)} generated notes of {len({n.patient_id for n in notes})} patients written to {out}")


@app.command("mask")
def mask(
    notes: NotesArg,
    out: Annotated[Path, typer.Option(help="JSONL of the public views: note_id, patient_id, masked text, slots")],
    placeholder: Annotated[str, typer.Option(help="text of a masked span; {label} is its type")] = "[{label}]",
    format: FormatOption = "jsonl",
    patients: PatientsOption = None,
) -> None:
    """Mask the sensitive spans of each note (spaCy NER + rules + philter-lite's de-identification filters,
    docs/text-masking.md). The output holds the public view only; a span the masker misses stays in it (check
    the recall on annotated notes)."""
    from dpcare.io import write_json_lines
    from dpcare.text.patients import patient_mapping
    from dpcare.text.readers import read_notes
    from dpcare.text.views.masking import SpanMasker

    corpus = read_notes(notes, format, patient_mapping(patients))
    masker = SpanMasker(placeholder=placeholder)
    masked = masker.mask_many(corpus)
    write_json_lines(out, (m.public_dict() for m in masked))
    typer.echo(f"{sum(len(m.slots) for m in masked)} spans masked in {len(masked)} notes; public views in {out}")
    typer.echo(masker.coverage())


@app.command("finetune")
@settings_options("settings", FinetuneSettings(), skip=("dp.unit", "dp.steps"), defaults=FinetuneSettings.task_defaults)
def finetune(
    notes: NotesArg,
    out: Annotated[Path, typer.Option(help="run folder: weights.safetensors, finetune.json, guarantee.json, run.json; "
                                           "rerun the same command to resume an interrupted run")],
    test: Annotated[Path | None, typer.Option(
        help="held-out notes with gold annotations (patients NOT in NOTES, the same --format): after training the "
             "model is scored on them beside its public baselines (ner: the public lexicon of ICD-10-CM problems, drug "
             "names and lab tests; summarisation: LEAD-3; both: the base model without fine-tuning), with a paired "
             "interval and a verdict, in run.json, on the console and in `dpcare "
             "report`")] = None,
    physical_batch: Annotated[int, typer.Option(help="rows per forward/backward pass (memory only)")] = 8,
    format: FormatOption = "jsonl",
    patients: PatientsOption = None,
    force: ForceOption = False,
    budget: BudgetOption = None,
    settings: FinetuneSettings = None,
) -> None:
    """Fine-tune a model on notes, the PATIENT as the privacy unit (every window of every note of a patient
    clipped together): for ner by default the MiniLM encoder as a BIO token tagger, for summarisation (or with
    --model smollm2) a causal LM; save the trained weights as a run folder and print the guarantee; with --test,
    score it against the public baselines on held-out patients' notes. Summarisation's defaults differ where
    measured: --batch-size 64 --epochs 2 (the help shows NER's)."""
    settings = with_budget_delta(settings, budget)  # under --budget without --delta: its share of the delta
    from dpcare.privacy import PrivacyLedger, guard_run
    from dpcare.runs import RunFolder
    from dpcare.runs.record import phase
    from dpcare.text.lm.finetune import finetune_with, plan
    from dpcare.text.lm.saved import WEIGHTS, finetune_manifest, save_finetuned
    from dpcare.text.lm.scoring import read_test_notes
    from dpcare.text.patients import patient_mapping
    from dpcare.text.readers import read_notes, read_patient_ids

    if settings.resolved_model not in ("smollm2", "minilm") and not Path(settings.resolved_model).is_dir():
        raise MissingFileError(f"unknown model path {settings.resolved_model!r}: not a folder (use 'minilm', "
                               "'smollm2' or a local Hugging Face encoder or causal-LM folder)")
    patient_of = patient_mapping(patients)  # a malformed mapping is refused before anything is read
    ids = read_patient_ids(notes, format, patient_of)  # the n that every ledger states; no note text is read before the budget
    planned = plan(settings, len(ids))
    recorded = settings.to_dict()
    run = RunFolder(out, "text-finetune", recorded, force=force, command="dpcare text finetune")
    held_out = read_test_notes(test, format, settings.task, ids, patient_of) if test is not None else None
    with guard_run(budget, planned, run_id=run.run_id, command="text finetune", data=notes) as held:
        with phase(f"fine-tuning ({settings.mode}, {settings.task})"):
            net, tokenizer, info = finetune_with(read_notes(notes, format, patient_of), settings,
                                                 checkpoint_dir=run.checkpoint_dir,
                                                 progress=True, max_physical_batch=physical_batch)
        if held is not None:
            held.actual = PrivacyLedger.from_state_dict(info["ledger"])
    scores = None
    if held_out is not None:
        from dpcare.text.lm.saved import recipe_of
        from dpcare.text.lm.scoring import comparison_lines, score_notes

        with phase("scoring the held-out notes against the public baselines"):
            scores = score_notes(net.eval(), tokenizer, recipe_of(info), held_out)
        typer.echo(f"{scores.metric} {scores.value:.3f} on {scores.scored} held-out notes of {test}")
        for line in comparison_lines(scores):
            typer.echo(line)
        typer.echo(f"{info['mode']} {scores.result['verdict']}")
        echo_outside_the_guarantee("patients' notes")
    save_finetuned(net, info, run.path(WEIGHTS).parent)  # into the run's staging folder
    data = {"path": str(notes), "patients": info["patients"], "notes": info["notes"], "rows": info["rows"]}
    if held_out is not None:
        data |= {"test": str(test), "test notes": len(held_out), "test patients": len({n.patient_id for n in held_out})}
    run.finish(finetune_manifest(info, recorded, data=data, scores=scores))
    typer.echo(f"{info['mode']} {settings.task}: {info['patients']} patients, {info['notes']} notes, {info['rows']} "
               f"rows, {info['steps']} steps, {info['trainable_parameters']:,} trainable parameters")
    typer.echo(info["guarantee_text"])
    typer.echo(f"saved to {out}/")


@app.command("ner")
def ner(
    model_dir: ModelArg,
    notes: NotesArg,
    out: Annotated[Path, typer.Option(help="JSONL, one line per note: note_id and its predicted entities (start, "
                                           "end, label, text); with --include-text the whole note instead")],
    max_tokens: Annotated[int, typer.Option(help="most tokens of one window's entity list (causal LM)")] = 512,
    batch_size: Annotated[int, typer.Option(help="windows decoded together (speed only)")] = 8,
    include_text: Annotated[bool, typer.Option(
        "--include-text", help="write each note whole (its text, identifiers included, and every annotation it "
                               "was read with) with the predicted entities in place of its gold ones; default: "
                               "no note text, only note_id and the predicted entities")] = False,
    baseline: BaselineOption = True,
    format: FormatOption = "jsonl",
    patients: PatientsOption = None,
) -> None:
    """Extract problem / treatment / test entities with a fine-tuned NER model (a token tagger, or a causal LM
    with constrained decoding): every entity is a whole span of the note (never a piece of a word; overlapping
    predictions keep the longest). Scores exact-match span F1 when the notes carry gold entities, beside the
    public baselines (the public lexicon of ICD-10-CM problems, drug names and lab tests; the base model without
    fine-tuning, same decoding) with paired intervals and a verdict. The output holds no note text unless
    --include-text."""
    from dataclasses import replace

    from dpcare.io import write_json_lines
    from dpcare.text import write_jsonl
    from dpcare.text.lm.saved import load_finetuned
    from dpcare.text.spans import span_to_dict
    from dpcare.text.lm.scoring import comparison_lines, score_ner
    from dpcare.text.patients import patient_mapping
    from dpcare.text.readers import read_notes

    net, tokenizer, meta = load_finetuned(model_dir)
    r = meta["recipe"]
    if r["task"] != "ner":
        raise SettingsError(f"{model_dir} was fine-tuned for {r['task']!r}, not ner")
    corpus = read_notes(notes, format, patient_mapping(patients))
    scores = score_ner(net, tokenizer, r, corpus, max_tokens, batch_size, baseline)
    predicted = scores.outputs
    if include_text:
        write_jsonl([replace(n, entities=tuple(p)) for n, p in zip(corpus, predicted)], out)
    else:
        write_json_lines(out, ({"note_id": n.note_id, "entities": [span_to_dict(s) for s in p]}
                               for n, p in zip(corpus, predicted)))
    if scores.table is not None:
        typer.echo(scores.table.round(3).to_string())
    if scores.result is not None:
        for line in comparison_lines(scores):
            typer.echo(line)
        typer.echo(f"{r['mode']} {scores.result['verdict']}")
    typer.echo(f"{sum(map(len, predicted))} entities in {len(corpus)} notes written to {out}"
               + (" with the notes' text" if include_text else " (no note text: --include-text adds it)"))


@app.command("summarise")
def summarise(
    model_dir: ModelArg,
    notes: NotesArg,
    out: Annotated[Path, typer.Option(help="JSONL: note_id and summary")],
    max_tokens: Annotated[int, typer.Option(help="most tokens of a summary")] = 96,
    keep_identifiers: Annotated[bool, typer.Option(
        "--keep-identifiers", help="write the summaries as generated (default: names, dates, numbers and places "
                                   "the masker finds are replaced by [**TYPE**])")] = False,
    baseline: BaselineOption = True,
    format: FormatOption = "jsonl",
    patients: PatientsOption = None,
) -> None:
    """Summarise each note's hospital course (summary_source, or the whole text when it has none) with a
    fine-tuned summarisation model; scores ROUGE-L when the notes carry reference summaries, beside the public
    baselines (LEAD-3, the first 3 sentences of the source, and the base model without fine-tuning) with paired
    intervals and a verdict. The model copies identifiers from the notes into its summaries: they are masked
    unless --keep-identifiers."""
    from dpcare.io import write_json_lines
    from dpcare.text.lm.saved import load_finetuned
    from dpcare.text.lm.scoring import comparison_lines, score_summaries
    from dpcare.text.patients import patient_mapping
    from dpcare.text.readers import read_notes

    net, tokenizer, meta = load_finetuned(model_dir)
    if meta["recipe"]["task"] != "summarisation":
        raise SettingsError(f"{model_dir} was fine-tuned for {meta['recipe']['task']!r}, not summarisation")
    corpus = read_notes(notes, format, patient_mapping(patients))
    scores = score_summaries(net, tokenizer, meta["recipe"], corpus, max_tokens, baseline)
    written = scores.outputs
    if scores.result is not None:  # the summaries as generated, against the references
        typer.echo(f"ROUGE-L F1 {scores.value:.3f} over {scores.scored} notes with a reference summary")
        for line in comparison_lines(scores):
            typer.echo(line)
        typer.echo(f"{meta['recipe']['mode']} {scores.result['verdict']}")
    if keep_identifiers:
        typer.echo("warning: the summaries are written as generated: they may copy names, dates, record numbers "
                   "and phone numbers from the notes", err=True)
    else:
        from dpcare.text.lm.summaries import mask_identifiers
        from dpcare.text.views.masking import SpanMasker

        written, masked = mask_identifiers(written, SpanMasker(placeholder="[**{label}**]"))
        typer.echo(f"{masked} identifier spans masked in the summaries (the masker's misses are not; "
                   "docs/text-masking.md)")
    write_json_lines(out, ({"note_id": n.note_id, "summary": s} for n, s in zip(corpus, written)))
    typer.echo(f"{len(written)} summaries written to {out}")


@app.command("classify")
@settings_options("settings", NoteClassifierSettings(), skip=("dp.unit", "dp.steps"))
def classify(
    notes: Annotated[Path, typer.Argument(help="notes as JSONL, each with note_id, patient_id, text and icd_codes")],
    out: Annotated[Path, typer.Option(help="run folder to write (model.pt, vocabulary.json, split.json, run.json); "
                                           "rerun the same command to resume an interrupted run")],
    format: FormatOption = "jsonl",
    workers: Annotated[int, typer.Option(help="imputation shards run at once as Ray tasks (speed only; "
                                              "1: in this process)")] = 1,
    ray_address: RayAddressOption = None,
    force: Annotated[bool, typer.Option("--force", help="replace a non-empty --out folder whole when the run "
                                                         "finishes (default: refuse it)")] = False,
    budget: BudgetOption = None,
    settings: NoteClassifierSettings = None,
) -> None:
    """Train an ICD coder on your notes (CAML; the K most frequent codes): the masked sensitive spans of a
    patient's notes protected (fusion methods, feature-level DP) or every note of a patient (dp-sgd). Prints
    the test metrics and the guarantee."""
    settings = with_budget_delta(settings, budget)  # under --budget without --delta: its share of the delta
    from dpcare.privacy import guard_run
    from dpcare.runs import RunFolder
    from dpcare.text.classify.recipe import KIND, fit, plan
    from dpcare.text.readers import count_patients, read_notes

    if format not in ("jsonl", "json"):
        raise SettingsError(f"text classify needs every note's ICD codes (the labels): only --format jsonl or json "
                            f"carries them (an icd_codes list per note), got --format {format}")
    if workers < 1:
        raise SettingsError(f"--workers must be >= 1, got --workers = {workers}")
    use_ray(ray_address, workers)
    if settings.impute and settings.lm != "smollm2" and not (Path(settings.lm) / "config.json").is_file():
        raise MissingFileError(f"unknown model path {settings.lm!r}: not a local Hugging Face causal-LM folder "
                               "(use --lm smollm2, or --no-impute)")
    patients = count_patients(notes, format)  # the public count the guarantee's n follows from; no text is read
    planned = plan(settings, patients)
    run = RunFolder(out, KIND, settings.to_dict(), force=force, command="dpcare text classify")
    with guard_run(budget, planned, run_id=run.run_id, command="text classify", data=notes) as held:
        corpus = read_notes(notes, format)
        model = fit(corpus, settings, work_dir=Path(run.checkpoint_dir) / "views", impute_workers=workers)
        if held is not None:
            held.actual = model.ledger
    model.write(run, data={"path": str(notes), "notes": len(corpus), "patients": patients})
    echo_plain_verdict(model.baseline["comparisons"][0] if model.baseline else None)
    typer.echo(json.dumps({"method": settings.method, **{k: round(v, 4) for k, v in model.metrics.items()},
                           "best epoch": model.info["best_epoch"], "threshold": model.threshold,
                           "codes": len(model.codes)}, indent=2))
    typer.echo(model.guarantee.describe() if model.guarantee else "NO differential privacy guarantee "
               f"({settings.method} is a non-private reference).")
    if model.baseline is not None:
        typer.echo(f"{settings.method} {model.baseline['comparisons'][0]['verdict']}")
    echo_outside_the_guarantee("patients' notes")
    typer.echo(f"written to {out}/")


@app.command("codes")
def codes(
    run_dir: Annotated[Path, typer.Argument(help="a run folder of `dpcare text classify`")],
    notes: Annotated[Path, typer.Argument(help="notes to code (only their text is read; gold icd_codes, when "
                                               "present, are scored)")],
    out: Annotated[Path, typer.Option(help="JSONL to write: note_id, the predicted codes, every code's score")],
    format: FormatOption = "jsonl",
    patients: PatientsOption = None,
) -> None:
    """Predict the ICD codes of new notes with a trained classifier (it reads the note text only: nothing is
    masked or imputed). Scores micro / macro F1 when the notes carry their codes."""
    from dpcare.io import write_json_lines
    from dpcare.text.classify.recipe import NoteClassifier
    from dpcare.text.patients import patient_mapping
    from dpcare.text.readers import read_notes

    if out.is_dir():
        raise SettingsError(f"--out {out} is a folder: give the JSONL file to write")
    model = NoteClassifier.load(run_dir)
    corpus = read_notes(notes, format, patient_mapping(patients))
    scores = model.predict_proba(corpus)
    rows = ({"note_id": n.note_id, "codes": [c for c, p in zip(model.codes, row) if p >= model.threshold],
             "scores": {c: round(float(p), 6) for c, p in zip(model.codes, row)}} for n, row in zip(corpus, scores))
    write_json_lines(out, rows)
    gold = [n for n in corpus if n.icd_codes]
    if gold:
        m = model.evaluate(gold)
        typer.echo(f"micro-F1 {m['f1_micro']:.3f}, macro-F1 {m['f1_macro']:.3f} over {len(gold)} notes with codes "
                   f"(the model's {len(model.codes)} codes, threshold {model.threshold:g})")
    typer.echo(f"codes of {len(corpus)} notes written to {out}")
