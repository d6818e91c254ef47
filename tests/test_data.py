"""Fashion-MNIST reading (on small IDX files we write), batching, the synthetic set."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from tensorconv import data


def _write_idx(path, array, magic):
    header = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def _fake_dataset(root, rng, n_train=60000, n_test=10000):
    for split, n in (("train", n_train), ("t10k", n_test)):
        _write_idx(root / f"{split}-images-idx3-ubyte.gz", rng.integers(0, 256, (n, 28, 28)), 2051)
        _write_idx(root / f"{split}-labels-idx1-ubyte.gz", rng.integers(0, 10, n), 2049)


@pytest.fixture(scope="module")
def fake_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("fmnist")
    _fake_dataset(root, np.random.default_rng(0))
    return root


def test_load_from_env_dir(fake_root, monkeypatch):
    monkeypatch.setenv("TENSORCONV_DATA", str(fake_root))
    ds = data.load_fashion_mnist("test", pad_to=32, limit=100)
    assert ds.images.shape == (100, 1, 32, 32) and ds.images.dtype == np.float32
    assert ds.labels.dtype == np.int64 and len(ds) == 100
    raw = data.read_idx(fake_root / "t10k-images-idx3-ubyte.gz", magic=2051)[:100]
    inner = ds.images[:, 0, 2:30, 2:30] * data.FASHION_MNIST_STD + data.FASHION_MNIST_MEAN
    np.testing.assert_allclose(inner, raw / 255.0, atol=1e-5)
    # the border is what a black pixel becomes after normalisation
    np.testing.assert_allclose(ds.images[:, 0, 0, :],
                               -data.FASHION_MNIST_MEAN / data.FASHION_MNIST_STD,
                               rtol=1e-6)


def test_unnormalised_values(fake_root):
    ds = data.load_fashion_mnist("train", root=fake_root, normalize=False, limit=10)
    assert 0.0 <= ds.images.min() and ds.images.max() <= 1.0


def test_bad_magic(tmp_path):
    _write_idx(tmp_path / "x.gz", np.zeros((2, 28, 28)), 2049)
    with pytest.raises(data.DatasetFormatError, match="magic number 2049, expected 2051"):
        data.read_idx(tmp_path / "x.gz", magic=2051)


def test_truncated_file(tmp_path):
    header = (2051).to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in (5, 28, 28))
    with gzip.open(tmp_path / "x.gz", "wb") as f:
        f.write(header + bytes(100))
    with pytest.raises(data.DatasetFormatError, match="implies"):
        data.read_idx(tmp_path / "x.gz", magic=2051)


def test_wrong_count(tmp_path, rng):
    _fake_dataset(tmp_path, rng, n_train=60000, n_test=12)
    with pytest.raises(data.DatasetFormatError, match="expected \\(10000, 28, 28\\)"):
        data.load_fashion_mnist("test", root=tmp_path)


def test_missing_data_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.delenv("TENSORCONV_DATA", raising=False)
    monkeypatch.setattr(data, "_DEBIAN_DIR", tmp_path / "nowhere")
    with pytest.raises(data.DatasetNotFoundError, match="apt-get install dataset-fashion-mnist"):
        data.load_fashion_mnist()


@pytest.mark.parametrize("where", ["missing", "empty"])
def test_a_data_directory_set_but_wrong_is_an_error_not_passed_over(fake_root, tmp_path,
                                                                    monkeypatch, where):
    d = tmp_path / "nowhere" if where == "missing" else tmp_path
    monkeypatch.setenv("TENSORCONV_DATA", str(d))
    monkeypatch.setattr(data, "_DEBIAN_DIR", fake_root)      # a good copy exists elsewhere
    msg = "is not a directory" if where == "missing" else "lacks train-images"
    with pytest.raises(data.DatasetNotFoundError, match=f"TENSORCONV_DATA={d} {msg}"):
        data.load_fashion_mnist()


def test_a_truncated_dataset_file_names_its_path(fake_root, tmp_path):
    import shutil

    for f in fake_root.iterdir():
        shutil.copy(f, tmp_path / f.name)
    name = tmp_path / "t10k-labels-idx1-ubyte.gz"
    name.write_bytes(name.read_bytes()[:40])
    with pytest.raises(data.DatasetFormatError, match="t10k-labels-idx1-ubyte.gz: not a whole"):
        data.load_fashion_mnist("test", root=tmp_path)


@pytest.mark.parametrize("limit,exc", [(-5, ValueError), (0, ValueError), (2.5, TypeError),
                                       ("10", TypeError)])
def test_dataset_limits_are_positive_ints(fake_root, limit, exc):
    with pytest.raises(exc, match="limit must be"):
        data.load_fashion_mnist("test", root=fake_root, limit=limit)


def test_bad_arguments(fake_root):
    with pytest.raises(ValueError, match="split"):
        data.load_fashion_mnist("valid", root=fake_root)
    with pytest.raises(ValueError, match="pad_to"):
        data.load_fashion_mnist("test", root=fake_root, pad_to=20)


def test_real_fashion_mnist_if_installed():
    try:
        root = data.fashion_mnist_dir()
    except data.DatasetNotFoundError:
        pytest.skip("Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)")
    train = data.load_fashion_mnist("train", root=root)
    test = data.load_fashion_mnist("test", root=root)
    assert train.images.shape == (60000, 1, 28, 28) and test.images.shape == (10000, 1, 28, 28)
    assert np.bincount(train.labels).tolist() == [6000] * 10
    assert abs(float(train.images.mean())) < 1e-2 and abs(float(train.images.std()) - 1) < 1e-2


def test_batches_cover_every_example_once(rng):
    ds = data.synthetic_dataset(103, seed=1)
    seen = np.concatenate([y for _, y in data.batches(ds, 10, rng=rng)])
    assert len(seen) == 103
    sizes = [len(y) for _, y in data.batches(ds, 10, drop_last=True, rng=rng)]
    assert sizes == [10] * 10
    a = [y for _, y in data.batches(ds, 16, rng=np.random.default_rng(5))]
    b = [y for _, y in data.batches(ds, 16, rng=np.random.default_rng(5))]
    assert all(np.array_equal(p, q) for p, q in zip(a, b))
    with pytest.raises(ValueError, match="batch_size"):
        next(data.batches(ds, 0))


def test_synthetic_dataset_is_learnable_by_nearest_template():
    ds = data.synthetic_dataset(400, classes=4, noise=0.5, seed=3)
    flat = ds.images.reshape(len(ds), -1)
    means = np.stack([flat[ds.labels == c].mean(0) for c in range(4)])
    pred = np.argmin(((flat[:, None] - means[None]) ** 2).sum(-1), axis=1)
    assert (pred == ds.labels).mean() > 0.9


def test_subset(fake_root):
    ds = data.load_fashion_mnist("test", root=fake_root)
    sub = ds.subset(50, seed=2)
    assert len(sub) == 50 and np.array_equal(sub.labels, ds.subset(50, seed=2).labels)
    with pytest.raises(ValueError, match="n must be"):
        ds.subset(0)
