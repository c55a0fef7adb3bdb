"""``dpcare account epsilon | sigma``: privacy accounting of Poisson-subsampled Gaussian steps."""

from __future__ import annotations

from typing import Annotated

import typer

from dpcare.exceptions import PrivacyParameterError

app = typer.Typer(help="Privacy accounting for DP-SGD / Feature-DP steps (Poisson-subsampled Gaussian).",
                  no_args_is_help=True)

Accountant = Annotated[str, typer.Option(help="pld, rdp or both")]


@app.command("epsilon")
def account_epsilon(
    sampling_rate: Annotated[float, typer.Option("--q", help="Poisson sampling rate q = batch / n")],
    noise_multiplier: Annotated[float, typer.Option("--sigma", help="noise multiplier sigma")],
    steps: Annotated[int, typer.Option(help="number of private steps")],
    delta: Annotated[float, typer.Option(help="target delta")],
    accountant: Accountant = "both",
) -> None:
    """Epsilon spent by STEPS Poisson-subsampled Gaussian steps at (q, sigma)."""
    from dpcare.privacy import compute_epsilon, sampled_gaussian_event

    event = sampled_gaussian_event(sampling_rate, noise_multiplier, steps)
    for name in _accountants(accountant):
        typer.echo(f"{name}: epsilon = {compute_epsilon(event, delta, accountant=name):.4f} at delta = {delta:g}")


@app.command("sigma")
def account_sigma(
    sampling_rate: Annotated[float, typer.Option("--q", help="Poisson sampling rate q = batch / n")],
    steps: Annotated[int, typer.Option(help="number of private steps")],
    epsilon: Annotated[float, typer.Option(help="target epsilon (never exceeded)")],
    delta: Annotated[float, typer.Option(help="target delta")],
    accountant: Accountant = "both",
) -> None:
    """Smallest noise multiplier whose epsilon stays within the target."""
    from dpcare.privacy import calibrate_noise_multiplier

    for name in _accountants(accountant):
        sigma = calibrate_noise_multiplier(sampling_rate, steps, epsilon, delta, accountant=name)
        typer.echo(f"{name}: sigma = {sigma:.4f} for epsilon <= {epsilon:g} at delta = {delta:g}")


def _accountants(name: str) -> list[str]:
    if name not in ("pld", "rdp", "both"):
        raise PrivacyParameterError(f"accountant must be pld, rdp or both, got {name!r}")
    return ["pld", "rdp"] if name == "both" else [name]
