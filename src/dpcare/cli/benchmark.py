"""``dpcare benchmark fusiondp | fusiondp-text | clinical-nlp | dp2stage | tsf | diffusion``: the papers' comparisons on real data."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from dpcare.cli.common import RayAddressOption, epsilon_list, name_list, table_and_spec, use_ray
from dpcare.exceptions import SettingsError

app = typer.Typer(help="Reproduce the papers' comparisons on real data.", no_args_is_help=True)


@app.command("fusiondp")
def benchmark_fusiondp(
    dataset: Annotated[str, typer.Option(help="bundled data set: support2, rhc or adult")] = "support2",
    data: Annotated[Path | None, typer.Option(help="your CSV/Parquet instead of a bundled set (needs --spec)")] = None,
    spec: Annotated[Path | None, typer.Option(help="privacy spec of --data")] = None,
    private: Annotated[str | None, typer.Option(
        help="comma-separated private columns, overriding the spec (e.g. a few weak ones, Appendix D)")] = None,
    epsilons: Annotated[str, typer.Option(help="comma-separated target epsilons")] = "0.1,0.3,0.5,1,2",
    seeds: Annotated[int, typer.Option(help="seeds (tuning uses seed 0)")] = 3,
    epochs: Annotated[float, typer.Option(help="epochs per run")] = 7.0,
    imputer: Annotated[str, typer.Option(
        help="gbm (default), lm (SmolLM2 in context; slow on CPU, see docs/results/fusiondp.md) or tabpfn "
             "(local checkpoints)")] = "gbm",
    tabpfn_classifier: Annotated[Path | None, typer.Option(help="local TabPFN classifier checkpoint")] = None,
    tabpfn_regressor: Annotated[Path | None, typer.Option(help="local TabPFN regressor checkpoint")] = None,
    workers: Annotated[int, typer.Option(help="runs trained at once, as Ray tasks (1: in this process)")] = 2,
    ray_address: RayAddressOption = None,
    quick: Annotated[bool, typer.Option(help="smoke-size run (2 epsilons, 1 seed, 1 grid point, 2 epochs)")] = False,
    charge_tuning: Annotated[bool, typer.Option(
        help="tune privately on every seed and count it in epsilon (default: the paper's uncounted tuning)")] = False,
    out: Annotated[Path, typer.Option(help="run folder of the study")] = Path("results/fusiondp"),
    force: Annotated[bool, typer.Option("--force", help="replace a non-empty --out folder when the study finishes")
                     ] = False,
) -> None:
    """FusionDP vs Feature-DP vs DP-SGD vs the hybrid baselines over epsilons (Zeng et al., Figure 2)."""
    use_ray(ray_address, workers)
    from dpcare.data import load_dataset
    from dpcare.studies.fusiondp import FusionBenchmark, run_benchmark

    if data is not None:
        if spec is None:
            raise SettingsError("--data needs --spec")
        df, schema = table_and_spec(data, spec)
    else:
        df, schema = load_dataset(dataset)
    if private:
        schema = schema.with_roles([c.strip() for c in private.split(",") if c.strip()])
    bench = FusionBenchmark.quick() if quick else FusionBenchmark(seeds=seeds, epochs=epochs)
    if not quick:
        bench = replace(bench, epsilons=epsilon_list(epsilons))
    options = {}
    if imputer == "tabpfn":
        options = {"classifier_checkpoint": tabpfn_classifier, "regressor_checkpoint": tabpfn_regressor}
        if None in options.values():
            raise SettingsError("--imputer tabpfn needs --tabpfn-classifier and --tabpfn-regressor checkpoint files")
    bench = replace(bench, imputer=imputer, imputer_options=options, workers=workers, charge_tuning=charge_tuning)
    run_benchmark(df, schema, bench, out, force=force)
    typer.echo((out / "table.md").read_text())
    typer.echo(f"written: {out}/table.csv, table.md, paired.csv, auprc_vs_epsilon.png, runs.csv, imputation.json, "
               "run.json")


@app.command("fusiondp-text")
def benchmark_fusiondp_text(
    notes: Annotated[Path | None, typer.Option(
        help="your notes as JSONL (note_id, patient_id, text, icd_codes) instead of generated ones")] = None,
    n_notes: Annotated[int, typer.Option(help="generated notes (grounded in MIMIC-IV demo, SUPPORT2, RHC)")] = 1000,
    top_k: Annotated[int, typer.Option(help="the K most frequent ICD codes of the training notes")] = 50,
    epsilons: Annotated[str, typer.Option(help="comma-separated epsilons of the private methods")] = "1,5,10",
    main_epsilon: Annotated[float, typer.Option(help="the epsilon of the main table (the paper's: 5)")] = 5.0,
    seeds: Annotated[int, typer.Option(help="training seeds (paired differences across them)")] = 3,
    epochs: Annotated[int, typer.Option(help="epochs per run (the best on validation is kept)")] = 6,
    lm: Annotated[str, typer.Option(help="imputation LM: smollm2 or a local causal-LM folder")] = "smollm2",
    loss: Annotated[str, typer.Option(help="per-note BCE over the codes: sum or mean")] = "sum",
    workers: Annotated[int, typer.Option(help="runs trained at once, as Ray tasks (1: in this process)")] = 2,
    ray_address: RayAddressOption = None,
    quick: Annotated[bool, typer.Option(help="smoke-size run (150 notes, 20 codes, 2 epochs, 1 seed, epsilon 5)")] = False,
    out: Annotated[Path, typer.Option(help="run folder of the study (an interrupted study resumes when the same "
                                           "command is rerun)")] = Path("results/fusiondp-text"),
    force: Annotated[bool, typer.Option("--force", help="replace a non-empty --out folder when the study finishes")
                     ] = False,
) -> None:
    """The nine FusionDP methods on clinical notes: ICD coding with CAML under feature-level DP of
    the sensitive spans (Zeng et al., Section 5.3, Table 1), each run a `dpcare text classify` fit."""
    use_ray(ray_address, workers)
    from dpcare.studies.fusiondp_text import TextFusionBenchmark, run_fusiondp_text

    bench = TextFusionBenchmark.quick() if quick else TextFusionBenchmark(
        n_notes=n_notes, top_k=top_k, epsilons=epsilon_list(epsilons),
        main_epsilon=main_epsilon, seeds=seeds, epochs=epochs)
    bench = replace(bench, workers=workers, loss=loss)
    corpus = None
    if notes is not None:
        from dpcare.text import read_jsonl

        corpus = read_jsonl(notes)
    run_fusiondp_text(bench, out, notes=corpus, lm=lm, force=force)
    typer.echo((out / "table.md").read_text())
    typer.echo(f"written: {out}/table.md, table.csv, paired.csv, f1_vs_epsilon.png, runs.csv, runs.jsonl, "
               "guarantees.json, data/data.json, run.json")


@app.command("clinical-nlp")
def benchmark_clinical_nlp(
    notes: Annotated[Path | None, typer.Option(
        help="your notes as JSONL (note_id, patient_id, text, entities, summary pair) instead of generated ones")] = None,
    n_notes: Annotated[int, typer.Option(help="generated notes (grounded in MIMIC-IV demo, SUPPORT2, RHC)")] = 48,
    model: Annotated[str, typer.Option(help="'smollm2' or a local causal-LM folder")] = "smollm2",
    layers: Annotated[int, typer.Option(help="transformer blocks kept (0: all; a cut SmolLM2 is no language "
                                             "model: perplexity ~1e9, for smoke tests)")] = 0,
    epochs: Annotated[float, typer.Option(help="epochs per model")] = 2.0,
    batch_size: Annotated[int, typer.Option(help="expected patients per step")] = 4,
    modes: Annotated[str, typer.Option(help="comma-separated: base (never fine-tuned), non-private, dp-full, "
                                            "dp-lora, dp-prefix")] = "base,non-private,dp-full,dp-lora,dp-prefix",
    sweep_modes: Annotated[str, typer.Option(help="modes whose NER models are trained at every epsilon")] = "dp-lora",
    epsilons: Annotated[str, typer.Option(help="comma-separated target epsilons (Table 2, the sweep)")] = "1,3,8",
    main_epsilon: Annotated[float, typer.Option(help="the epsilon of Table 1 (the paper's: 3)")] = 3.0,
    tasks: Annotated[str, typer.Option(help="comma-separated: ner, summarisation (causal LM), token-ner (MiniLM "
                                            "BIO tagger)")] = "ner,summarisation,token-ner",
    canaries: Annotated[int, typer.Option(help="canary patients per NER run (one-run epsilon lower bound)")] = 16,
    shadows: Annotated[int, typer.Option(help="LiRA shadow models per Table 2 run (even; 0: no LiRA)")] = 0,
    clip_ablation: Annotated[bool, typer.Option(help="DP-LoRA NER with adaptive clip norms (median; private "
                                                     "80th-percentile warm-up)")] = True,
    eval_notes: Annotated[int, typer.Option(help="held-out notes decoded for NER F1 and ROUGE-L")] = 6,
    seeds: Annotated[int, typer.Option(help="training seeds (3 or more: mean ± sd and paired differences with a "
                                            "95% interval; 1 reproduces the published table)")] = 1,
    workers: Annotated[int, typer.Option(help="runs trained at once, as Ray tasks (1: in this process)")] = 2,
    ray_address: RayAddressOption = None,
    physical_batch: Annotated[int, typer.Option(help="rows per forward/backward pass: memory only (DP-Full on all "
                                                     "30 blocks peaks near 7 GB at 2)")] = 2,
    quick: Annotated[bool, typer.Option(help="smoke-size run (12 notes, 1 block, 1 epoch, epsilon 3, 4 canaries; "
                                             "other options but modes, tasks and workers ignored)")] = False,
    tables_only: Annotated[bool, typer.Option(help="rewrite the tables, plot and run.json of the finished folder OUT "
                                                   "(or an unfinished one's staging folder) from its journal; train "
                                                   "nothing (missing cells show as '-')")] = False,
    out: Annotated[Path, typer.Option(help="run folder of the study (an interrupted study resumes when the same "
                                           "command is rerun)")] = Path("results/clinical-nlp"),
    force: Annotated[bool, typer.Option("--force", help="replace a non-empty --out folder when the study finishes")
                     ] = False,
) -> None:
    """Fine-tuning a causal LM on clinical notes: NER F1 and ROUGE-L of non-private, DP-Full, DP-LoRA and
    DP-Prefix at epsilon 3, and membership-inference AUC at epsilon 1, 3, 8 (Lopez and Hill,
    Tables 1 and 2)."""
    use_ray(ray_address, workers)
    from dpcare.studies.clinical_nlp import ClinicalNLPBenchmark, run_clinical_nlp

    bench = ClinicalNLPBenchmark.quick() if quick else ClinicalNLPBenchmark(
        n_notes=n_notes, model=model, layers=layers or None, epochs=epochs, batch_size=batch_size,
        epsilons=epsilon_list(epsilons), main_epsilon=main_epsilon, eval_notes=eval_notes,
        seeds=seeds, canaries=canaries, shadows=shadows, clip_ablation=clip_ablation)
    bench = replace(bench, modes=name_list(modes), sweep_modes=name_list(sweep_modes), tasks=name_list(tasks),
                    workers=workers, physical_batch=physical_batch)
    corpus = None
    if notes is not None:
        from dpcare.text import read_jsonl

        corpus = read_jsonl(notes)
    folder = Path(run_clinical_nlp(bench, out, notes=corpus, train=not tables_only, force=force).attrs["folder"])
    typer.echo((folder / "table.md").read_text())
    typer.echo(f"written: {folder}/table.md, table.csv, runs.csv, paired.csv, sweep.png, roc.json, guarantees.json, "
               "attacks/, data/split.json, run.json")


@app.command("dp2stage")
def benchmark_dp2stage(
    datasets: Annotated[str, typer.Option(help="comma-separated: adult, support2, rhc")] = "adult,support2",
    epsilons: Annotated[str, typer.Option(help="comma-separated target epsilons")] = "1,8",
    methods: Annotated[str, typer.Option(help="comma-separated LM methods (dp-standard, dp-2stage-u, dp-2stage-o) "
                                              "or none")] = "dp-standard,dp-2stage-u,dp-2stage-o",
    baselines: Annotated[str, typer.Option(help="comma-separated SmartNoise baselines (mst, aim, dpctgan) or none")
                         ] = "mst,aim,dpctgan",
    model: Annotated[str, typer.Option(help="'smollm2' or a local causal-LM folder")] = "smollm2",
    layers: Annotated[int | None, typer.Option(help="transformer blocks kept (default 1 for the CPU budget)")] = None,
    n_train: Annotated[int | None, typer.Option(help="private training rows per data set")] = None,
    all_columns: Annotated[bool, typer.Option(help="use every column (default: 10 per data set)")] = False,
    seeds: Annotated[int, typer.Option(help="seeds (seed s: the base seed + s; 3 or more: mean ± sd and paired "
                                            "differences with a 95% interval; 1 reproduces the published table)")] = 1,
    quick: Annotated[bool, typer.Option(help="smoke-size run for tests (Adult, epsilon 8, MST only)")] = False,
    out: Annotated[Path, typer.Option(help="run folder of the study (an interrupted study resumes when the same "
                                           "command is rerun)")] = Path("results/dp2stage"),
    force: Annotated[bool, typer.Option("--force", help="replace a non-empty --out folder when the study finishes")
                     ] = False,
) -> None:
    """DP-Standard vs DP-2Stage-U vs DP-2Stage-O vs SmartNoise baselines (Afonja et al., Table 3), each beside
    the public baseline (independent sampling from the declared support)."""
    from dpcare.studies.dp2stage import Dp2StageBenchmark, check_choices, run_benchmark

    bench = Dp2StageBenchmark.quick(model) if quick else Dp2StageBenchmark(
        datasets=name_list(datasets), epsilons=epsilon_list(epsilons))
    names = lambda text: () if text.strip() == "none" else name_list(text)
    chosen = names(baselines)
    if not quick:
        lm = bench.settings.lm
        check_choices(bench.datasets, names(methods), chosen)
        bench = replace(bench, methods=names(methods), baselines=chosen, all_columns=all_columns,
                        settings=bench.settings.replace(lm=replace(lm, model=model, layers=layers or lm.layers)))
        if n_train:
            bench = replace(bench, n_train=n_train)
    bench = replace(bench, seeds=seeds)
    run_benchmark(bench, out, force=force)
    typer.echo((out / "table.md").read_text())
    typer.echo(f"written: {out}/table.csv, table.md, paired.csv, dp2stage.png, sampling.json, runs/, run.json")


@app.command("tsf")
def benchmark_tsf(
    datasets: Annotated[str, typer.Option(help="comma-separated bundled sets: mimic_demo, pbcseq")] = "mimic_demo,pbcseq",
    events: Annotated[Path | None, typer.Option(help="your event table instead (file or folder; needs --spec)")] = None,
    layout: Annotated[str, typer.Option(help="layout of --events: canonical, meds or clif")] = "canonical",
    spec: Annotated[Path | None, typer.Option(
        help="YAML for --events: name, step, window, default_variables, declared center/scale per variable")] = None,
    methods: Annotated[str, typer.Option(help="comma-separated: baseline, dp-sgd, zoo, zoo_pca, mixup")
                       ] = "baseline,dp-sgd,zoo,zoo_pca,mixup",
    epsilons: Annotated[str, typer.Option(help="comma-separated patient-level epsilons of DP-SGD")] = "1,3,8",
    shadows: Annotated[int, typer.Option(help="LiRA shadow models per data set (0: LOSS attack only)")] = 8,
    workers: Annotated[int, typer.Option(help="shadow models trained at once, as Ray tasks (1: in this process)")] = 2,
    ray_address: RayAddressOption = None,
    epochs: Annotated[float | None, typer.Option(help="baseline training epochs")] = None,
    dp_epochs: Annotated[float | None, typer.Option(help="DP-SGD epochs over the training patients")] = None,
    aug_epochs: Annotated[int | None, typer.Option(help="augmentation retraining epochs (at most)")] = None,
    alpha: Annotated[float | None, typer.Option(help="ZOO interpolation weight alpha in [0, 1]")] = None,
    seed: Annotated[int, typer.Option(help="seed of splits, models and shadows (the base seed of --seeds)")] = 0,
    seeds: Annotated[int, typer.Option(help="seeds (seed s: the base seed + s; 3 or more: mean ± sd and paired "
                                            "differences with a 95% interval; 1 reproduces the published table)")] = 1,
    quick: Annotated[bool, typer.Option(help="smoke-size run (tiny model, epsilon 3, 2 shadows)")] = False,
    out: Annotated[Path, typer.Option(help="run folder of the study (rerun the same command to resume)")] = Path(
        "results/tsf"),
    force: Annotated[bool, typer.Option("--force", help="replace a non-empty --out folder when the study finishes")
                     ] = False,
) -> None:
    """Baseline vs DP-SGD (per patient) vs ZOO, ZOO-PCA, MixUp under LOSS and LiRA attacks
    ("Embedding-Space Data Augmentation to Prevent Membership Inference Attacks in Clinical Time Series
    Forecasting", ML4H 2025, Table 1, with real accounting)."""
    use_ray(ray_address, workers)
    from dpcare.studies.tsf import TsfBenchmark, run_tsf_benchmark
    from dpcare.timeseries import user_dataset

    bench = TsfBenchmark.quick() if quick else TsfBenchmark(shadows=shadows)
    names = name_list(datasets)
    if events is not None:
        if spec is None:
            raise SettingsError("--events needs --spec (declared center/scale per variable, step and window)")
        names = (user_dataset(events, layout, spec),)
    chosen = name_list(methods)
    if not names or not chosen:
        raise SettingsError(f"--datasets and --methods must each name at least one entry, got --datasets "
                            f"{datasets!r} --methods {methods!r}")
    s = bench.settings
    overrides = {k: v for k, v in {"baseline_epochs": epochs, "aug_epochs": aug_epochs, "alpha": alpha}.items()
                 if v is not None}
    dp = {"seed": seed} | ({"epochs": dp_epochs} if dp_epochs is not None else {})
    bench = replace(bench, datasets=names, methods=chosen,
                    epsilons=bench.epsilons if quick else epsilon_list(epsilons),
                    workers=workers, settings=replace(s, **overrides, dp=s.dp.replace(**dp)), seeds=seeds)
    run_tsf_benchmark(bench, out, force=force)
    typer.echo((out / "table.md").read_text())
    typer.echo(f"written: {out}/table.csv, table.md, paired.csv, run.json, attacks/, roc-loss-*.png, roc-lira-*.png, "
               "<data>/target, <data>/shadows (seed s > 0: <data>/seed<s>/...)")


@app.command("diffusion")
def benchmark_diffusion(
    dataset: Annotated[str, typer.Option(help="mnist (5,000 real digits, 28x28) or digits (8x8)")] = "mnist",
    epsilons: Annotated[str, typer.Option(help="comma-separated epsilons of the private methods")] = "8,1",
    epochs: Annotated[float | None, typer.Option(help="epochs of Non-private and Public")] = None,
    dp_epochs: Annotated[float | None, typer.Option(help="epochs of the private methods")] = None,
    samples: Annotated[int | None, typer.Option(help="generated images per method for FID")] = None,
    blur_sigma: Annotated[float | None, typer.Option(help="sigma (pixels) of the public Gaussian blur")] = None,
    seed: Annotated[int, typer.Option(help="seed of splits, models and sampling (the base seed of --seeds)")] = 0,
    seeds: Annotated[int, typer.Option(help="seeds (seed s: the base seed + s; 3 or more: mean ± sd and paired "
                                            "differences with a 95% interval; 1 reproduces the published table)")] = 1,
    quick: Annotated[bool, typer.Option(help="smoke-size run (8x8 digits, tiny U-Net, epsilon 8)")] = False,
    out: Annotated[Path, typer.Option(help="run folder of the study (an interrupted study resumes when the same "
                                           "command is rerun)")] = Path("results/diffusion"),
    force: Annotated[bool, typer.Option("--force", help="replace a non-empty --out folder when the study finishes")
                     ] = False,
) -> None:
    """Non-private vs Public (blurred) vs DP vs FDP (DP-SGD) vs FDP (Alg. 1, with rejection of blurry
    samples): FID on classifier features (Mahloujifar et al., Section 6.3), each method a `dpcare images` run."""
    from dpcare.studies.diffusion import DiffusionStudy, run_diffusion_study

    study = DiffusionStudy.quick() if quick else DiffusionStudy(dataset=dataset, epsilons=epsilon_list(epsilons))
    s = study.settings
    s = replace(s, **{k: v for k, v in {"plain_epochs": epochs, "blur_sigma": blur_sigma}.items() if v is not None},
                dp=s.dp.replace(epochs=dp_epochs) if dp_epochs is not None else s.dp)
    study = replace(study, seed=seed, seeds=seeds, settings=s,
                    samples=samples if samples is not None else study.samples)
    run_diffusion_study(study, out, force=force)
    typer.echo((out / "table.md").read_text())
    typer.echo(f"written: {out}/table.csv, table.md, paired.csv, samples.png, run.json, runs/<method>/ (recipe run "
               "folders; seed s > 0: seed<s>/runs/<method>/)")
