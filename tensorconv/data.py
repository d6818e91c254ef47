"""Datasets: Fashion-MNIST from disk (IDX files), batching, a tiny synthetic set.

Fashion-MNIST (70,000 28x28 grey images, 10 classes) is read from the Debian
package ``dataset-fashion-mnist`` (``/usr/share/datasets/fashion-mnist``) or
from the directory named by ``TENSORCONV_DATA``.  Nothing is downloaded.
"""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tensorconv.checks import check_bools, check_choice, check_int, check_real

FASHION_MNIST_CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal",
                         "Shirt", "Sneaker", "Bag", "Ankle boot")
_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", 60000),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", 10000),
}
_DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")
_IMAGE_MAGIC, _LABEL_MAGIC = 2051, 2049
# Per-pixel statistics of the training split (pixels scaled to [0, 1]).
FASHION_MNIST_MEAN, FASHION_MNIST_STD = 0.2860, 0.3530


class DatasetNotFoundError(FileNotFoundError):
    """The dataset files are missing; the message says how to get them."""


class DatasetFormatError(ValueError):
    """A dataset file exists but is not what it should be (magic, sizes, labels)."""


def fashion_mnist_dir() -> Path:
    """The directory holding the four Fashion-MNIST ``.gz`` files: ``TENSORCONV_DATA``
    when it is set (an error when it lacks them: a setting is never silently passed
    over), else the Debian package's."""
    needed = [name for imgs, lbls, _ in _FILES.values() for name in (imgs, lbls)]
    if os.environ.get("TENSORCONV_DATA"):
        d = Path(os.environ["TENSORCONV_DATA"])
        missing = [name for name in needed if not (d / name).is_file()]
        if missing:
            state = "is not a directory" if not d.is_dir() else f"lacks {', '.join(missing)}"
            raise DatasetNotFoundError(
                f"TENSORCONV_DATA={d} {state}: put the four Fashion-MNIST .gz files there, "
                f"or unset it to use the Debian package ({_DEBIAN_DIR})")
        return d
    candidates = [_DEBIAN_DIR]
    for d in candidates:
        if all((d / name).is_file() for name in needed):
            return d
    raise DatasetNotFoundError(
        "Fashion-MNIST not found (looked in " + ", ".join(map(str, candidates)) + ").\n"
        "Install it with `sudo apt-get install dataset-fashion-mnist` (Debian/Ubuntu), or put "
        f"{', '.join(needed)} in a directory and set TENSORCONV_DATA to it.")


def read_idx(path, *, magic: int) -> np.ndarray:
    """Read one gzip-compressed IDX file, checking its magic number and length.

    Returns
    -------
    ndarray of uint8, (count,) for labels or (count, rows, cols) for images
    """
    path = Path(path)
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise DatasetNotFoundError(f"{path} does not exist") from None
    except (EOFError, OSError) as exc:  # truncated, or not gzip at all
        raise DatasetFormatError(f"{path}: not a whole gzip file ({exc}); download it "
                                 f"again") from exc
    if len(raw) < 8:
        raise DatasetFormatError(f"{path}: too short to be an IDX file ({len(raw)} bytes)")
    found = int.from_bytes(raw[:4], "big")
    if found != magic:
        raise DatasetFormatError(f"{path}: magic number {found}, expected {magic}")
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    offset = 4 + 4 * ndim
    expected = offset + int(np.prod(dims))
    if len(raw) != expected:
        raise DatasetFormatError(f"{path}: {len(raw)} bytes, the header {dims} implies {expected}")
    return np.frombuffer(raw, dtype=np.uint8, offset=offset).reshape(dims)


@dataclass
class Dataset:
    """Images (N, C, H, W) and integer labels (N,) on the host."""

    images: np.ndarray
    labels: np.ndarray
    classes: tuple

    def __len__(self) -> int:
        return len(self.labels)

    def subset(self, n: int, seed: int = 0) -> "Dataset":
        """A random subset of ``n`` examples, fixed by ``seed``."""
        n = check_int(n, "n", minimum=1)
        if n > len(self):
            raise ValueError(f"n must be in 1..{len(self)}, got {n}")
        rng = np.random.default_rng(seed)
        idx = rng.permutation(len(self))[:n]
        return Dataset(self.images[idx], self.labels[idx], self.classes)


def load_fashion_mnist(split: str = "train", *, root=None, pad_to: int | None = None,
                       normalize: bool = True, limit: int | None = None,
                       dtype=np.float32) -> Dataset:
    """Load a Fashion-MNIST split.

    Parameters
    ----------
    split : {"train", "test"}
    root : path, optional
        Directory of the ``.gz`` files (default: ``TENSORCONV_DATA`` or the Debian package).
    pad_to : int, optional
        Zero-pad the 28x28 images symmetrically to ``pad_to`` (32 for CIFAR-style nets).
    normalize : bool
        Scale to [0, 1], then standardise with the training split's mean and std.
    limit : int, optional
        Keep the first ``limit`` examples (quick runs).

    Returns
    -------
    Dataset with images (N, 1, H, W) of ``dtype`` and labels (N,) int64
    """
    check_choice(split, "split", sorted(_FILES))
    check_bools(normalize=normalize)
    if limit is not None:
        limit = check_int(limit, "limit", minimum=1)
    if pad_to is not None:
        pad_to = check_int(pad_to, "pad_to", minimum=28)
    root = Path(root) if root is not None else fashion_mnist_dir()
    img_name, lbl_name, count = _FILES[split]
    images = read_idx(root / img_name, magic=_IMAGE_MAGIC)
    labels = read_idx(root / lbl_name, magic=_LABEL_MAGIC)
    if images.shape != (count, 28, 28) or labels.shape != (count,):
        raise DatasetFormatError(f"{root}: {split} split has images {images.shape} and labels "
                                 f"{labels.shape}, expected ({count}, 28, 28) and ({count},)")
    if labels.max() >= len(FASHION_MNIST_CLASSES):
        raise DatasetFormatError(f"{root / lbl_name}: label {labels.max()} out of range 0..9")
    if limit is not None:
        images, labels = images[:limit], labels[:limit]
    x = images.astype(dtype)[:, None] / dtype(255)
    if normalize:
        x = (x - dtype(FASHION_MNIST_MEAN)) / dtype(FASHION_MNIST_STD)
    if pad_to is not None:
        lo = (pad_to - 28) // 2
        hi = pad_to - 28 - lo
        # Pad with the value a black pixel has after normalisation.
        fill = (0 - FASHION_MNIST_MEAN) / FASHION_MNIST_STD if normalize else 0.0
        x = np.pad(x, ((0, 0), (0, 0), (lo, hi), (lo, hi)), constant_values=fill)
    return Dataset(np.ascontiguousarray(x), labels.astype(np.int64), FASHION_MNIST_CLASSES)


def batches(data: Dataset, batch_size: int, *, shuffle: bool = True, rng=None,
            drop_last: bool = False):
    """An iterator of ``(images, labels)`` mini-batches (host arrays); the arguments are
    checked now, not at the first batch.

    Parameters
    ----------
    rng : numpy.random.Generator, optional
        Source of the shuffle order; pass one to make epochs reproducible.
    """
    if not isinstance(data, Dataset):
        raise TypeError(f"data must be a Dataset, got {type(data).__name__}")
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    check_bools(shuffle=shuffle, drop_last=drop_last)
    if rng is not None and not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy Generator, got {type(rng).__name__}")
    n = len(data)
    order = (rng or np.random.default_rng()).permutation(n) if shuffle else np.arange(n)
    stop = n - n % batch_size if drop_last else n
    return ((data.images[idx], data.labels[idx])
            for idx in (order[start:start + batch_size] for start in range(0, stop, batch_size)))


def synthetic_dataset(n: int = 256, *, classes: int = 4, size: int = 8, channels: int = 1,
                      noise: float = 0.5, seed: int = 0, sample_seed: int | None = None) -> Dataset:
    """A tiny learnable set for unit tests only: per-class random templates plus noise.

    ``seed`` fixes the class templates, ``sample_seed`` (default ``seed``) the
    examples drawn from them: a train and a test split share ``seed``.
    """
    n = check_int(n, "n", minimum=1)
    for name, value in (("classes", classes), ("size", size), ("channels", channels)):
        check_int(value, name, minimum=1)
    noise = check_real(noise, "noise", low=0.0)
    check_int(seed, "seed", minimum=0)
    if sample_seed is not None:
        check_int(sample_seed, "sample_seed", minimum=0)
    templates = np.random.default_rng(seed).standard_normal(
        (classes, channels, size, size)).astype(np.float32)
    rng = np.random.default_rng(seed if sample_seed is None else sample_seed)
    labels = rng.integers(0, classes, n)
    images = templates[labels] + noise * rng.standard_normal((n, channels, size, size))
    return Dataset(images.astype(np.float32), labels.astype(np.int64),
                   tuple(f"class{i}" for i in range(classes)))
