"""The per-example loop every clipping backend is checked against."""

import torch


def reference(model, loss_fn, batch, clip):
    """Loop over examples: exact gradient of each, clipped, summed."""
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    total = {n: torch.zeros_like(p) for n, p in params.items()}
    norms = []
    size = next(iter(batch.values())).shape[0]
    for i in range(size):
        one = {k: v[i : i + 1] for k, v in batch.items()}
        grads = torch.autograd.grad(loss_fn(model, one).sum(), list(params.values()))
        norm = torch.sqrt(sum(g.pow(2).sum() for g in grads))
        norms.append(norm)
        factor = min(1.0, clip / (float(norm) + 1e-6))
        for n, g in zip(params, grads):
            total[n] += factor * g
    return total, torch.stack(norms)


def assert_same_clipped_sums(got, norms, want, want_norms, rtol=1e-6, atol=1e-9):
    """A backend's clipped sums and norms equal the reference loop's."""
    torch.testing.assert_close(norms, want_norms, rtol=rtol, atol=atol)
    assert set(got) == set(want)
    for n in want:
        torch.testing.assert_close(got[n], want[n], rtol=rtol, atol=atol)
