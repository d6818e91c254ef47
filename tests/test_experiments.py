"""The experiment scripts run end to end on whatever backend this machine has."""

from __future__ import annotations

import pytest

from tensorconv import data, results


def _have_fashion_mnist() -> bool:
    try:
        data.fashion_mnist_dir()
        return True
    except data.DatasetNotFoundError:
        return False


def test_bench_conv_quick(tmp_path):
    from experiments import bench_conv

    assert bench_conv.main(["--quick", "--out", str(tmp_path)]) == 0
    rows = results.read_csv(tmp_path / "bench_conv.csv")
    assert {r["case"] for r in rows} >= {"l1.3x3/n1", "r50.1x1/n1"}
    assert all(r["value"] > 0 for r in rows if r["metric"] in ("time_us", "time_graph_us"))
    assert (tmp_path / "bench_conv.png").stat().st_size > 0
    assert "Dense fp32 convolution" in (tmp_path / "bench_conv.md").read_text()


@pytest.mark.skipif(not _have_fashion_mnist(), reason="Fashion-MNIST not installed")
def test_quickstart_quick(tmp_path):
    from experiments import quickstart

    assert quickstart.main(["--quick", "--train", "1500", "--out", str(tmp_path)]) == 0
    rows = results.read_csv(tmp_path / "quickstart.csv")
    accs = [r["value"] for r in rows if r["metric"] == "test_accuracy"]
    # dense, then Tucker; chance is 10%, 1500 images for 2 epochs give ~60%
    assert len(accs) == 2 and all(40.0 < a <= 100.0 for a in accs)
    reduction = next(r["value"] for r in rows if r["metric"] == "flops_reduction")
    assert 40.0 < reduction < 70.0
    assert (tmp_path / "quickstart.png").stat().st_size > 0
