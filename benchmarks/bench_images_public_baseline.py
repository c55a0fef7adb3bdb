"""The diffusion recipe's DP model against its public baseline on MNIST (docs/images.md, "Is it worth releasing?").

fdp-dpsgd at the CPU defaults on the bundled MNIST subset at 14 x 14, split as the study splits it (seed 0):
3,000 training images, the 1,000 public images (FID classifier), the 1,000 test images. Trains with the recipe's
``train_unet`` in the order ``fit`` uses (the public model on the blurred view, then FDP DP-SGD from it; with
``--init-from`` a saved public model is reused, as ``fit --init``) and scores with the functions ``fit`` calls
(``public_baseline``, ``compare_with_baseline``). About 50 minutes per seed on 2 shared CPU cores.

    OMP_NUM_THREADS=1 python benchmarks/bench_images_public_baseline.py --seed 0 --epsilon 1 --out /tmp/dpb
"""

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import torch

from dpcare.images.data import load_mnist, split_images
from dpcare.images.recipe import (
    blur_of,
    compare_with_baseline,
    image_views,
    new_unet,
    public_baseline,
    train_unet,
)
from dpcare.images.settings import DiffusionSettings

p = argparse.ArgumentParser()
p.add_argument("--seed", type=int, default=0)
p.add_argument("--epsilon", type=float, default=1.0)
p.add_argument("--out", type=Path, default=Path("/tmp/dpb"))
p.add_argument("--init-from", type=Path, default=None, help="a saved public U-Net state dict to start from")
a = p.parse_args()
a.out.mkdir(parents=True, exist_ok=True)
s = DiffusionSettings(method="fdp-dpsgd", color="gray")
s = replace(s, dp=s.dp.replace(epsilon=a.epsilon, seed=a.seed))
parts = split_images(load_mnist().resized(s.image_size), seed=0)
train, test, public = parts["train"], parts["test"], parts["public"]
shape, k = train.image_shape, len(train.classes)
views = image_views(train, blur_of(s))
t = time.time()
if a.init_from is None:
    pub, _ = train_unet(views, replace(s, method="public"), shape, k, None, str(a.out / f"ck{a.seed}/public"))
    torch.save(pub.state_dict(), a.out / f"public_s{a.seed}.pt")
else:
    pub = new_unet(s, shape, k, 0)
    pub.load_state_dict(torch.load(a.init_from))
public_seconds = time.time() - t
t = time.time()
dp, result = train_unet(views, s, shape, k, pub, str(a.out / f"ck{a.seed}/fdp"))
dp_seconds = time.time() - t
t = time.time()
base, name = public_baseline(s, views, public, shape, k, pub)
metrics, b = compare_with_baseline(dp, base, name, s, test, public, resamples=1000)
out = {"seed": a.seed, "epsilon": a.epsilon, "guarantee": result.guarantee.to_dict(), "metrics": metrics,
       "baseline": b, "seconds": {"public": public_seconds, "dp": dp_seconds, "score": time.time() - t}}
(a.out / f"result_s{a.seed}.json").write_text(json.dumps(out, indent=1))
print(b["comparisons"][0]["verdict"])
