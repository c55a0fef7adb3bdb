"""``dpcare images fit | sample``: a DP or Feature-DP diffusion model of a folder of images, saved as a run
folder, and images sampled from it (:mod:`dpcare.images.recipe`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dpcare.cli.budget import BudgetOption, with_budget_delta
from dpcare.cli.common import echo_outside_the_guarantee, echo_plain_verdict
from dpcare.cli.options import settings_options
from dpcare.images.settings import DiffusionSettings

app = typer.Typer(help="Diffusion models of your own image folder: DP (whole image) or Feature-DP (only the detail "
                       "beyond a blurred view, which is public).", no_args_is_help=True)

ForceOption = Annotated[bool, typer.Option("--force", help="replace a non-empty --out folder whole when the run "
                                                           "finishes (default: refuse it)")]


def _names(text: str | None) -> list[str] | None:
    return [c.strip() for c in text.split(",") if c.strip()] if text else None


@app.command("fit")
@settings_options("settings", DiffusionSettings(), skip=("dp.unit",))
def images_fit(
    folder: Annotated[Path, typer.Argument(help="folder of PNG/JPEG images: one sub-folder per class, or flat "
                                                "with --labels")],
    out: Annotated[Path, typer.Option(help="run folder to write (model.pt, run.json); rerun the same command to "
                                           "resume an interrupted run")] = Path("results/images"),
    init: Annotated[Path | None, typer.Option(
        help="fdp-dpsgd / fdp-alg1: run folder of a public model (`--method public`) to start from (default: "
             "train one first, in this run, on the blurred images)")] = None,
    labels: Annotated[Path | None, typer.Option(help="labels of a flat folder: a CSV with columns file, label")
                      ] = None,
    classes: Annotated[str | None, typer.Option(
        help="declared class names, comma-separated (default: the sub-folders' or the CSV's labels)")] = None,
    public_images: Annotated[Path | None, typer.Option(
        help="a folder of PUBLIC images (not in FOLDER) whose blurred versions set the rejection threshold "
             "(default: the blurred view of FOLDER, public under Feature-DP; a dp model needs this for --rejection)")
    ] = None,
    test_images: Annotated[Path | None, typer.Option(
        help="a folder of held-out images (not in FOLDER, same classes): a private model is scored on them (test "
             "FID) against its public baseline, with a paired bootstrap interval and a verdict")] = None,
    holdout: Annotated[float, typer.Option(
        help="a private method without --test-images: this fraction of FOLDER's images (drawn with --seed from "
             "their count alone) is held out as the test images of the public-baseline comparison and does not "
             "train; 0 (or --no-baseline): every image trains and there is no verdict")] = 0.1,
    baseline: Annotated[bool, typer.Option(
        help="with test images (--test-images or --holdout): train/score the public baseline (the same U-Net without privacy on the public "
             "view only); --no-baseline skips it for speed")] = True,
    force: ForceOption = False,
    budget: BudgetOption = None,
    settings: DiffusionSettings = None,
) -> None:
    """Train a diffusion model on every image of FOLDER; print the guarantee. Nothing is read before the
    output folder, the --init model and the budget are checked (the budget from the number of files)."""
    settings = with_budget_delta(settings, budget)  # under --budget without --delta: its share of the delta
    from dpcare.images.data import count_images
    from dpcare.images.recipe import KIND, fit, load_init, plan, training_count
    from dpcare.privacy import guard_run
    from dpcare.runs import RunFolder

    names = _names(classes)
    start = load_init(settings, init)
    n = count_images(folder, labels, names)  # file names only: no pixel is read
    if not (settings.private and baseline):
        holdout = 0.0  # held-out images only where they score a private model against its baseline
    n_train = training_count(n, holdout, settings.dp.seed, test_images is not None)
    planned = plan(settings, n_train)
    run = RunFolder(out, KIND, settings.to_dict(), force=force, command="dpcare images fit")
    with guard_run(budget, planned, run_id=run.run_id, command="images fit", data=folder) as held:
        model = fit(folder, settings, init=start, labels=labels, classes=names, public_images=public_images,
                    checkpoint_dir=run.checkpoint_dir, test_images=test_images, baseline=baseline, holdout=holdout)
        if held is not None:
            held.actual = model.ledger
    held_out = {"held_out": {"fraction": holdout, "images": n - n_train, "seed": settings.dp.seed}} if n > n_train else {}
    data = {"folder": str(folder), "images": n, "training_images": n_train, **held_out, "classes": list(model.classes),
            **({"labels": str(labels)} if labels else {}), **({"public_images": str(public_images)}
                                                               if public_images else {}),
            **({"test_images": str(test_images)} if test_images else {})}
    model.write(run, data=data)
    echo_plain_verdict(model.baseline["comparisons"][0] if model.baseline else None)
    typer.echo(f"{settings.method}: {n_train} training images" + (f" ({n - n_train} held out)" if n > n_train else "")
               + f", {len(model.classes)} classes, {model.info['steps']} steps")
    typer.echo(model.guarantee.describe() if model.guarantee else model.manifest().models[0]["note"])
    if model.baseline is not None:
        typer.echo(f"{settings.method} {model.baseline['comparisons'][0]['verdict']}")
        echo_outside_the_guarantee("images")
    elif settings.private:
        why = "--no-baseline" if not baseline else "--holdout 0 and no --test-images"
        typer.echo(f"not compared with the public baseline ({why}): no verdict on whether it is worth releasing")
    typer.echo(f"written to {out}/ (sample with: dpcare images sample {out} --n 100 --out grid.png)")


@app.command("sample")
def images_sample(
    run_dir: Annotated[Path, typer.Argument(help="a run folder of `dpcare images fit`")],
    n: Annotated[int, typer.Option(help="images to sample (cycling through the classes)")] = 100,
    out: Annotated[Path, typer.Option(help="PNG file of the grid")] = Path("samples.png"),
    labels: Annotated[str | None, typer.Option(help="class names to sample, comma-separated (instead of --n)")
                      ] = None,
    rejection: Annotated[bool, typer.Option(help="redraw samples no sharper than blurred public images")] = False,
    seed: Annotated[int, typer.Option(help="seed of the sampling noise")] = 0,
    nrow: Annotated[int, typer.Option(help="images per row of the grid")] = 10,
) -> None:
    """Sample images from a fitted model and write them as one PNG grid (sampling reads no data: it is
    post-processing of the released model)."""
    from dpcare.exceptions import SettingsError
    from dpcare.images.recipe import DiffusionModel

    if out.is_dir():
        raise SettingsError(f"--out {out} is a folder: give the PNG file to write")
    model = DiffusionModel.load(run_dir)
    names = _names(labels)
    model.save_grid(out, n=None if names else n, labels=names, seed=seed, rejection=rejection, nrow=nrow)
    k = len(names) if names else n
    typer.echo(f"{k} images of {model.settings.method} ({', '.join(model.classes)}) written to {out}")
