"""The experiment scripts run end to end on whatever backend this machine has."""

from __future__ import annotations

from pathlib import Path

import pytest

from tensorconv import backend, data, results


@pytest.fixture
def short_unrolled(monkeypatch):
    """The unrolled sparse remainder offered only where its body is short (ResNet-18's
    64-channel layers at 8x, not its 128-channel ones): a 128-channel body takes a compile
    of 10 s or more, and these runs time several models' worth of them.  The kernel itself is
    tested in test_sparse_unrolled*.py and through a tuned engine in test_engine.py."""
    from tensorconv.ops import sparse_unrolled

    monkeypatch.setattr(sparse_unrolled, "MAX_FMAS", 10_000)


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


@pytest.mark.skipif(not _have_fashion_mnist(), reason="Fashion-MNIST not installed")
def test_cp_accuracy_quick_resumes_from_its_work_dir(tmp_path):
    from experiments import cp_accuracy
    from training.train import TrainConfig, train

    pre = tmp_path / "pre.npz"
    train(TrainConfig(model="resnet20", epochs=1, train_limit=256, test_limit=200, device="cpu"),
          pre, progress=False)
    args = ["--quick", "--pretrained", str(pre), "--ranks", "2", "--lrs", "0.01", "--device", "cpu",
            "--out", str(tmp_path)]
    assert cp_accuracy.main(args + ["--time-budget", "0"]) == 0   # no epoch fits: partial
    rows = results.read_csv(tmp_path / "cp_accuracy.csv")
    assert not any(r["variant"].startswith("fine-tuned") for r in rows)
    assert cp_accuracy.main(args) == 0
    rows = results.read_csv(tmp_path / "cp_accuracy.csv")
    cell = {(r["case"], r["variant"], r["metric"]): r for r in rows}
    assert 0 <= cell[("rank2", "fine-tuned lr=0.01", "test_acc")]["value"] <= 100
    assert 0 < cell[("rank2", "decomposed", "reconstruction_error")]["value"] < 1
    macs = {v: cell[(c, v, "macs")]["value"] for c, v in (("rank2", "decomposed"),
                                                           ("dense", "trained"))}
    assert macs["decomposed"] < macs["trained"]
    assert (tmp_path / "cp_accuracy.png").stat().st_size > 0


def test_torch_mirror_matches_our_forward(rng):
    torch = pytest.importorskip("torch")
    import numpy as np

    from experiments._torch_mirror import to_torch
    from tensorconv.autograd import Tensor, no_grad
    from tensorconv.compress import cpize, tuckerize, uniform_ranks
    from tensorconv.compress.separable import separable
    from tensorconv.nn import get_model

    # a bottleneck ResNet-50 reaches at most ~45 % fewer MACs through its 3x3 convolutions
    for name, fmt in (("resnet20", None), ("resnet20", "cp"), ("resnet20", 0.5),
                      ("densenet121", None), ("vgg16", None), ("resnet50", 0.4),
                      ("googlenet", None), ("vgg16", "gpw"), ("resnet18", "pw")):
        model = get_model(name, in_channels=1)
        if fmt == "cp":
            cpize(model, 3)
        elif fmt in ("gpw", "pw"):
            separable(model, fmt, cg=2)
        elif fmt is not None:
            tuckerize(model, uniform_ranks(model, fmt, (1, 1, 32, 32)), decompose=False)
        model.eval()
        x = rng.standard_normal((2, 1, 32, 32)).astype(np.float32)
        with no_grad():
            ours = model(Tensor(x)).data
        with torch.no_grad():
            theirs = to_torch(model)(torch.from_numpy(x)).numpy()
        assert np.linalg.norm(ours - theirs) <= 1e-4 * np.linalg.norm(ours)


@pytest.mark.gpu
def test_cp_table2_quick(tmp_path):
    from experiments import cp_fig6, cp_table2

    assert cp_table2.main(["--quick", "--out", str(tmp_path)]) == 0
    rows = results.read_csv(tmp_path / "cp_table2.csv")
    errs = [r["value"] for r in rows if r["metric"] == "rel_err" and "tf32" not in r["variant"]]
    assert errs and max(errs) < 1e-4
    assert {r["case"] for r in rows} >= {"L2_R1", "L4_R8", "summary"}
    assert cp_fig6.main(["--out", str(tmp_path)]) == 0
    assert (tmp_path / "cp_fig6.png").stat().st_size > 0


@pytest.mark.gpu
@pytest.mark.usefixtures("short_unrolled")
def test_sparse_layers_quick(tmp_path):
    pytest.importorskip("mtkahypar")
    from experiments import sparse_layers

    assert sparse_layers.main(["--quick", "--batch", "4", "--out", str(tmp_path)]) == 0
    rows = results.read_csv(tmp_path / "sparse_layers.csv")
    errs = {(r["case"], r["variant"]): r["value"] for r in rows if r["metric"] == "rel_err"}
    fp32 = [v for (_, variant), v in errs.items() if not variant.startswith("ours-tf32")]
    # the remainder's other choices on the fastest layout: the strided layer's two stagings,
    # the unstaged unrolled kernel's tiles on the strided layer and on the stride-1 ones
    # (3x3: wider than 1x1) and the staged unrolled kernel's tiles on the stride-1 layers,
    # each where its body fits (the fixture: short bodies only)
    others = [k for k in errs if k[1].startswith("ours sparse_csr")]
    assert len(others) == 2 and all("s2" in case for case, _ in others)
    unstaged = {case for case, variant in errs if variant.startswith("ours sparse_unrolled_direct")}
    assert any(" s2 " in case for case in unstaged) and any(" s1 " in case for case in unstaged)
    staged = [k for k in errs if k[1].startswith("ours sparse_unrolled ")]
    assert staged and all("s2" not in case for case, _ in staged)
    unrolled = staged + [k for k in errs if k[1].startswith("ours sparse_unrolled_direct")]
    assert len(fp32) == 3 * 5 + 2 + len(unrolled) and max(fp32) <= 1e-5   # 2 thresholds,
    # no blocks, rows, cusparse
    # each choice's time; "ours" the fastest of them
    choice = [(r["case"].split(" via ")[0], r["value"]) for r in rows if r["metric"] == "choice_us"]
    assert len(choice) == 3 + len(others) + len(unrolled)
    ours = {r["case"]: r["value"] for r in rows
            if r["metric"] == "latency_us" and r["variant"] == "ours"}
    assert ours == {c: min(v for c2, v in choice if c2 == c) for c, _ in choice}
    # tf32: each layout with blocks again, at tf32's accuracy
    blocks = {(r["case"], f"ours-tf32 {r['variant']}") for r in rows
              if r["metric"] == "blocks" and r["value"] > 0}
    remainders = ("sparse_tc_remainder", "sparse_pairs_tc")
    assert {k for k in errs if k[1].startswith("ours-tf32")
            and not any(m in k[1] for m in remainders)} == blocks
    assert all(errs[k] <= 3e-3 for k in blocks)
    # and every tile of the remainder on the tensor cores and on the sparse tensor cores
    # (every filter, every stride), without blocks, on every layer
    for m in remainders:
        tc = {k for k in errs if k[1].startswith(f"ours-tf32 {m}")}
        assert {c for c, _ in tc} == {c for c, _ in errs} and all(errs[k] <= 3e-3 for k in tc)
    variants = {r["variant"] for r in rows if r["metric"] == "latency_us"}
    assert {"ours", "ours-tf32", "no-blocks", "csr-rows", "cusparse", "ours-dense", "t2=4",
            "t2=8", "tc-remainder tf32"} <= variants
    dense = [r for r in rows if r["variant"] == "ours-dense"]
    assert all("as the tuned engine plans it: " in r["note"] for r in dense
               if r["metric"] == "latency_us")
    assert all(r["value"] <= 1e-5 for r in dense if r["metric"] == "rel_err_unpruned")
    lat = {(r["case"], r["variant"]): r["value"] for r in rows if r["metric"] == "latency_us"}
    plain = {(r["case"], r["variant"]) for r in rows if r["metric"] == "blocks" and not r["value"]}
    kept = {r["case"]: int(r["value"]) for r in rows if r["metric"] == "t2"}
    for c in {c for c, v in lat if v == "ours"}:   # layouts without blocks: one time for both
        ours_plain = kept[c] == 0 or (c, f"t2={kept[c]}") in plain
        assert lat[c, "ours-tf32"] == min([lat[c, "no-blocks"]] + [
            lat[k] for k in plain if k[0] == c] + [lat[k] for k in lat if k[0] == c and
                                                  k[1].endswith(" tf32")]
            + ([lat[c, "ours"]] if ours_plain else []))
    assert (tmp_path / "sparse_layers.png").stat().st_size > 0
    # In two calls: the first stops after one layer, the second keeps it and times the rest.
    first, second = tmp_path / "a", tmp_path / "b"
    assert sparse_layers.main(["--quick", "--batch", "4", "--out", str(first),
                               "--time-budget", "0"]) == 0
    assert "Partial: 2 layers" in (first / "sparse_layers.md").read_text()
    assert sparse_layers.main(["--quick", "--batch", "4", "--out", str(second), "--merge",
                               str(first / "sparse_layers.csv")]) == 0
    ours = [r["case"] for r in results.read_csv(second / "sparse_layers.csv")
            if r["variant"] == "ours" and r["metric"] == "latency_us"]
    assert len(ours) == len(set(ours)) == 3
    assert "Partial" not in (second / "sparse_layers.md").read_text()
    # --retime: two layers named, the budget spent after the first: its rows are replaced
    # (once each), the second keeps the merged ones and the report names it
    third = tmp_path / "c"
    before = results.read_csv(second / "sparse_layers.csv")
    names = [c.split(" ", 1)[0] for c in ours[:2]]
    assert sparse_layers.main(["--quick", "--batch", "4", "--out", str(third), "--merge",
                               str(second / "sparse_layers.csv"), "--retime", "--layers",
                               *names, "--time-budget", "0"]) == 0
    after = results.read_csv(third / "sparse_layers.csv")
    for case in ours:       # each layer's rows once (the choices timed may differ by layout)
        rows_before = sorted((r["variant"], r["metric"]) for r in before if r["case"] == case)
        rows_after = sorted((r["variant"], r["metric"]) for r in after if r["case"] == case)
        assert rows_after == rows_before and len(set(rows_after)) == len(rows_after)
        via = [r["case"] for r in after if r["case"].startswith(case + " via ")]
        assert via and len(via) == len(set(via))
    kept = {(r["case"], r["variant"], r["metric"], r["value"]) for r in after
            if sparse_layers.of_case(r["case"], ours[1])}
    assert kept <= {(r["case"], r["variant"], r["metric"], r["value"]) for r in before}
    assert f"1 of the layers to re-time keep their merged rows (not reached): {ours[1]}" in \
        (third / "sparse_layers.md").read_text()


@pytest.mark.gpu
@pytest.mark.usefixtures("short_unrolled")
def test_sparse_e2e_quick_with_magnitude_and_trained_masks(tmp_path):
    pytest.importorskip("mtkahypar")
    import numpy as np

    from experiments import sparse_e2e
    from tensorconv.compress.prune import prune_candidates, save_masks
    from tensorconv.nn import get_model

    net = get_model("resnet18", in_channels=1, num_classes=10, seed=3)
    rng = np.random.default_rng(0)
    save_masks(tmp_path / "m.npz", {n: rng.random(c.weight.data.shape) < 0.125
                                    for n, c in prune_candidates(net).items()})
    args = ["--quick", "--models", "resnet18", "vgg16", "--out", str(tmp_path), "--t2", "8",
            "--masks", f"resnet18={tmp_path / 'm.npz'}"]
    assert sparse_e2e.main(args) == 0
    assert not (tmp_path / "sparse_e2e.partial.csv").exists()     # removed once written
    rows = results.read_csv(tmp_path / "sparse_e2e.csv")
    errs = [r["value"] for r in rows if r["metric"] == "rel_err" and "tf32" not in r["variant"]]
    assert len(errs) >= 4 and max(errs) <= 1e-4
    lat = {(r["case"], r["variant"]) for r in rows if r["metric"] == "batch_us"}
    assert {("resnet18-8x", "ours-sparse"), ("vgg16-4x", "ours-dense")} <= lat
    assert "masks" in (tmp_path / "sparse_e2e.md").read_text()
    save_masks(tmp_path / "half.npz", {n: rng.random(c.weight.data.shape) < 0.06
                                       for n, c in prune_candidates(net).items()})
    assert sparse_e2e.main(["--quick", "--models", "resnet18", "--out", str(tmp_path), "--t2",
                            "8", "--masks", f"resnet18:a={tmp_path / 'm.npz'}",
                            f"resnet18:b={tmp_path / 'half.npz'}", "--profile"]) == 0
    rows = results.read_csv(tmp_path / "sparse_e2e.csv")
    lat = {(r["case"], r["variant"]): r["value"] for r in rows if r["metric"] == "batch_us"}
    for case in ("resnet18-8x a", "resnet18-8x b"):         # each set beside one dense timing
        assert (case, "ours-sparse") in lat and (case, "ours-dense") in lat
        steps = [r for r in rows if r["metric"] == "step_us" and r["case"].startswith(case)]
        assert len(steps) >= 10, steps        # a launch a layer or so: which kernel, any
        assert all(r["variant"] == "ours-sparse" and r["value"] > 0 for r in steps), steps
        assert any(r["case"] == case and r["metric"] == "speedup" for r in rows)
    assert any(r["metric"] == "step_us" and r["variant"] == "ours-dense" for r in rows)
    assert "## step_us" in (tmp_path / "sparse_e2e.md").read_text()
    assert lat[("resnet18-8x a", "ours-dense")] == lat[("resnet18-8x b", "ours-dense")]
    with pytest.raises(SystemExit):
        sparse_e2e.main(["--masks", "resnet18"])
    with pytest.raises(SystemExit):
        sparse_e2e.main(["--masks", f"resnet18:a={tmp_path / 'm.npz'}",
                         f"resnet18:a={tmp_path / 'half.npz'}"])
    with pytest.raises(ValueError, match="no mask of shape"):
        sparse_e2e.main(["--quick", "--models", "vgg16", "--out", str(tmp_path),
                         "--masks", f"vgg16={tmp_path / 'm.npz'}"])
    assert (tmp_path / "sparse_e2e.png").stat().st_size > 0


@pytest.mark.gpu
@pytest.mark.usefixtures("short_unrolled")
def test_sparse_e2e_time_budget_leaves_models_to_merge(tmp_path):
    """A spent budget starts no further model (the first always runs) and the report names
    those left; a second call --merge'd with the first gives both."""
    pytest.importorskip("mtkahypar")
    from experiments import sparse_e2e

    first, second = tmp_path / "a", tmp_path / "b"
    quick = ["--quick", "--t2", "8", "--time-budget", "0"]
    assert sparse_e2e.main(quick + ["--models", "resnet18", "vgg16", "--out", str(first)]) == 0
    cases = {r["case"] for r in results.read_csv(first / "sparse_e2e.csv")}
    assert cases == {"resnet18-8x"}
    assert "Partial: vgg16 not timed" in (first / "sparse_e2e.md").read_text()
    assert not (first / "sparse_e2e.partial.csv").exists()
    assert sparse_e2e.main(quick + ["--models", "vgg16", "--out", str(second), "--merge",
                                    str(first / "sparse_e2e.csv")]) == 0
    rows = results.read_csv(second / "sparse_e2e.csv")
    assert {r["case"] for r in rows} == {"resnet18-8x", "vgg16-4x"}
    assert "Partial" not in (second / "sparse_e2e.md").read_text()


def test_an_output_of_ours_too_far_from_its_reference_is_refused_not_recorded():
    """sparse_e2e, scc_inference and cp_table2 record our times only for outputs within
    the fp32 bound of their reference (NaN refused too)."""
    import numpy as np

    from experiments._common import FP32_TOLERANCE, checked_rel_norm

    ref = np.arange(1.0, 9.0)
    assert checked_rel_norm(ref * (1 + FP32_TOLERANCE / 2), ref, np, "x") < 1e-4
    with pytest.raises(RuntimeError, match="resnet18-8x: the sparse engine.*not recorded"):
        checked_rel_norm(ref * 1.01, ref, np, "resnet18-8x: the sparse engine")
    with pytest.raises(RuntimeError, match="relative error nan"):
        checked_rel_norm(ref * np.nan, ref, np, "x")


def test_sparse_e2e_refuses_a_negative_budget_or_one_for_a_report():
    from experiments import sparse_e2e

    with pytest.raises(SystemExit):
        sparse_e2e.main(["--time-budget", "-1"])
    with pytest.raises(SystemExit):
        sparse_e2e.main(["--report-only", "--merge", "x.csv", "--time-budget", "5"])


def test_sparse_layers_transplant_trained_masks_onto_imagenet_shapes(tmp_path):
    import numpy as np

    from experiments import sparse_layers
    from tensorconv.compress.prune import prune_candidates, save_masks
    from tensorconv.nn import get_model

    rng = np.random.default_rng(0)
    cifar = prune_candidates(get_model("resnet18", in_channels=1))
    save_masks(tmp_path / "m.npz", {n: rng.random(c.weight.data.shape) < 0.125
                                    for n, c in cifar.items()})
    args = sparse_layers._args(["--model", "resnet18_imagenet", "--size", "224",
                                "--in-channels", "3", "--batch", "2"])
    # its own results files, beside (not over) the CIFAR-style model's
    assert sparse_layers.output_name(args) == "sparse_layers_resnet18_imagenet"
    assert sparse_layers.output_name(sparse_layers._args([])) == "sparse_layers"
    layers = sparse_layers._layers(args, tmp_path / "m.npz")
    first = {name: shape for name, _, shape, _ in layers}
    assert first["stages.0.0.conv1"] == (2, 64, 56, 56)
    assert first["stages.3.0.conv1"] == (2, 256, 14, 14)
    masks = np.load(tmp_path / "m.npz")
    for name, _, _, w in layers:                  # the trained pattern, unchanged
        assert np.array_equal(w != 0, masks[name])
    with pytest.raises(ValueError, match="no mask of shape"):
        sparse_layers._layers(sparse_layers._args(["--model", "resnet50", "--size", "64",
                                                   "--in-channels", "3"]), tmp_path / "m.npz")


def test_sparse_layers_times_the_layers_named_in_the_order_named():
    from experiments import sparse_layers

    named = ["stages.3.0.conv2", "stages.0.0.conv1", "stages.2.0.shortcut.0"]
    args = sparse_layers._args(["--model", "resnet18", "--batch", "2", "--layers", *named])
    # a --time-budget stops between layers: the first named are the ones it reaches
    assert [name for name, *_ in sparse_layers._layers(args, None)] == named
    args = sparse_layers._args(["--model", "resnet18", "--layers", named[0], named[1], named[0]])
    with pytest.raises(ValueError, match=r"--layers names \['stages.3.0.conv2'\] more than once"):
        sparse_layers._layers(args, None)


def test_sparse_e2e_prunes_by_magnitude_or_transplants_masks(tmp_path):
    import numpy as np

    from experiments import sparse_e2e
    from tensorconv.compress.prune import keep_count, prune_candidates, save_masks
    from tensorconv.nn import get_model

    rng = np.random.default_rng(1)
    cifar = prune_candidates(get_model("resnet18", in_channels=1))
    masks = {n: rng.random(c.weight.data.shape) < 0.25 for n, c in cifar.items()}
    save_masks(tmp_path / "m.npz", masks)
    model, source = sparse_e2e.pruned_copy("resnet18_imagenet", 4.0, tmp_path / "m.npz")
    assert "masks" in source and model.num_classes == 1000
    for name, conv in prune_candidates(model).items():
        assert np.array_equal(conv.weight.data != 0, masks[name])
    model, source = sparse_e2e.pruned_copy("vgg16", 4.0, None)
    assert source == "magnitude 4x"
    for conv in prune_candidates(model).values():
        assert np.count_nonzero(conv.weight.data) == keep_count(conv.weight.data.size, 4.0)


def test_sparse_layers_times_the_layers_named():
    from experiments import sparse_layers

    args = sparse_layers._args(["--layers", "stages.1.0.conv1", "stages.3.0.conv1", "--batch",
                                "2"])
    assert [name for name, *_ in sparse_layers._layers(args, None)] == \
        ["stages.1.0.conv1", "stages.3.0.conv1"]
    with pytest.raises(ValueError, match="--layers: resnet18 has no prunable layer"):
        sparse_layers._layers(sparse_layers._args(["--layers", "stages.9.conv"]), None)


def test_sparse_layers_mask_sets_are_labelled():
    from experiments import sparse_layers

    sets = lambda *m: sparse_layers._mask_sets(sparse_layers._args(["--masks", *m]))  # noqa: E731
    assert sets("a.npz") == [("", "a.npz")]
    assert sets("pruned=a.npz", "repruned=b.npz") == [("pruned", "a.npz"), ("repruned", "b.npz")]
    assert sparse_layers._mask_sets(sparse_layers._args([])) == [("", None)]
    with pytest.raises(ValueError, match="distinct labels"):
        sets("a.npz", "b.npz")


@pytest.mark.gpu
def test_sparse_fig6_quick(tmp_path):
    from experiments import sparse_fig6

    args = ["--quick", "--out", str(tmp_path)]
    assert sparse_fig6.main(args) == 0
    rows = results.read_csv(tmp_path / "sparse_fig6.csv")
    lat = {(r["case"], r["variant"]) for r in rows if r["metric"] == "latency_us"}
    assert {("K=1", "ours-block"), ("K=128", "ours-dense"), ("K=33", "ours-block-paper")} <= lat
    assert (tmp_path / "sparse_fig6.png").stat().st_size > 0


@pytest.mark.gpu
def test_bench_depthwise_quick(tmp_path):
    from experiments import bench_depthwise

    assert bench_depthwise.main(["--quick", "--out", str(tmp_path)]) == 0
    rows = results.read_csv(tmp_path / "bench_depthwise.csv")
    errs = [r["value"] for r in rows if r["metric"] == "rel_err"]
    assert len(errs) == 3 * 3 and max(errs) <= 1e-5        # 3 layers x 3 passes
    for name in bench_depthwise.PASSES:
        timed = {r["variant"] for r in rows if r["metric"] == f"{name}_us"}
        assert {"ours", "general"} <= timed
        assert any(r["metric"] == f"{name}_speedup" for r in rows)
    assert (tmp_path / "bench_depthwise.png").stat().st_size > 0


def test_bench_depthwise_needs_a_gpu(monkeypatch):
    from experiments import bench_depthwise

    monkeypatch.setattr(backend, "gpu_available", lambda: False)
    with pytest.raises(backend.CudaUnavailableError):
        bench_depthwise.main(["--quick", "--out", "unused"])


@pytest.mark.gpu
def test_bench_sparse_tiles_quick(tmp_path):
    from experiments import bench_sparse_tiles
    from tensorconv.ops import sparse_conv

    assert bench_sparse_tiles.main(["--quick", "--out", str(tmp_path)]) == 0
    rows = results.read_csv(tmp_path / "bench_sparse_tiles.csv")
    timed = {(r["case"], r["variant"]) for r in rows if r["metric"] == "latency_us"}
    cases = {c for c, _ in timed}
    assert len(cases) == len(bench_sparse_tiles.QUICK)
    for case in cases:                        # every variant timed (or said why not)
        skipped = {r["variant"] for r in rows if r["case"] == case
                   and r["metric"] == "skipped"}
        names = {"rule", "rows", "ours-dense"} | {bench_sparse_tiles.label(t)
                                                  for t in sparse_conv.REMAINDER_TILES}
        assert names <= {v for c, v in timed if c == case} | skipped
    best = [r["value"] for r in rows if r["variant"] == "best/rule" and r["metric"] == "ratio"]
    assert len(best) == len(cases) and max(best) <= 1.0 + 1e-9
    assert (tmp_path / "bench_sparse_tiles.png").stat().st_size > 0


def test_bench_sparse_tiles_needs_a_gpu(monkeypatch):
    from experiments import bench_sparse_tiles

    monkeypatch.setattr(backend, "gpu_available", lambda: False)
    with pytest.raises(backend.CudaUnavailableError):
        bench_sparse_tiles.main(["--quick", "--out", "unused"])


@pytest.mark.gpu
def test_bench_sparse_unrolled_1x1_quick(tmp_path):
    """ResNet-18's first shortcut at batch 8 (2,048 output pixels): every tile timed, the
    256-thread blocks and the rings among them, and the ratios the tf32 target counts."""
    from experiments import bench_sparse_unrolled_1x1 as b
    from tensorconv.ops import sparse_unrolled_direct as sud

    assert b.main(["--quick", "--out", str(tmp_path)]) == 0
    rows = results.read_csv(tmp_path / f"{b.NAME}.csv")
    timed = {r["variant"] for r in rows if r["metric"] == "latency_us"}
    assert {"64-thread", "no-ring", "no-split", "ours", "cudnn-fp32", "cudnn-tf32"} <= timed
    assert any(v.startswith(f"r32 t{sud.WIDE_BLOCK}") and v.endswith("groups first")
               for v in timed)
    assert any(v.startswith(f"r32 t{sud.WIDE_BLOCK}") and v.endswith(f"ring{sud.RING}")
               for v in timed)
    assert {f"r32 t{sud.WIDE_BLOCK} g1 groups first split{ks}" for ks in sud.SPLITS} <= timed
    medians = {r["variant"]: r["value"] for r in rows if r["metric"] == "median"}
    assert set(medians) == {"cudnn-tf32/64-thread", "cudnn-tf32/no-ring",
                            "cudnn-tf32/no-split", "cudnn-tf32/ours", "cudnn-fp32/ours"}
    assert medians["cudnn-tf32/ours"] >= medians["cudnn-tf32/no-ring"] \
        >= medians["cudnn-tf32/64-thread"] > 0
    assert medians["cudnn-tf32/ours"] >= medians["cudnn-tf32/no-split"] > 0
    assert (tmp_path / f"{b.NAME}.png").stat().st_size > 0


def test_bench_sparse_unrolled_1x1_takes_the_1x1_layers_that_unroll():
    """The layers of sparse_layers' list with a 1x1 filter and few enough nonzeros: on a
    magnitude-pruned ResNet-50 at 224x224, its strided 2048x1024 shortcut is left out."""
    from types import SimpleNamespace

    from experiments import bench_sparse_unrolled_1x1 as b
    from tensorconv.ops import sparse_unrolled as su

    args = SimpleNamespace(model="resnet50", in_channels=3, size=224, batch=2, ratio=8.0,
                           masks=None)
    layers = b.one_by_one_layers(args)
    assert layers and all(w.shape[2:] == (1, 1) for *_, w in layers)
    assert all(int((w != 0).sum()) <= su.MAX_FMAS for *_, w in layers)
    names = [name for name, *_ in layers]
    assert "stages.2.0.conv3" in names and "stages.3.0.shortcut.0" not in names
    assert len(set(names)) == len(names)


def test_bench_sparse_unrolled_1x1_needs_a_gpu(monkeypatch):
    from experiments import bench_sparse_unrolled_1x1

    monkeypatch.setattr(backend, "gpu_available", lambda: False)
    with pytest.raises(backend.CudaUnavailableError):
        bench_sparse_unrolled_1x1.main(["--quick", "--out", "unused"])


@pytest.mark.gpu
def test_bench_sparse_pairs_1x1_quick(tmp_path):
    """GoogLeNet's first 1x1 layer at batch 4: every tile timed and checked, the rule's
    tile among them, and the ratios the tf32 target counts."""
    from experiments import bench_sparse_pairs_1x1 as b

    assert b.main(["--quick", "--out", str(tmp_path)]) == 0
    rows = results.read_csv(tmp_path / f"{b.NAME}.csv")
    timed = {r["variant"] for r in rows if r["metric"] == "latency_us"}
    assert {"default", "ours", "cudnn-fp32", "cudnn-tf32"} <= timed
    assert any(v.endswith(" s2") for v in timed) and any(v.endswith(" s1") for v in timed)
    medians = {r["variant"]: r["value"] for r in rows if r["metric"] == "median"}
    assert set(medians) == {"cudnn-tf32/default", "cudnn-tf32/ours", "cudnn-fp32/ours"}
    assert medians["cudnn-tf32/ours"] >= medians["cudnn-tf32/default"] > 0
    assert (tmp_path / f"{b.NAME}.png").stat().st_size > 0


def test_bench_sparse_pairs_1x1_takes_the_1x1_layers_at_stride_1():
    """On ResNet-50 at 224x224 the stride-1 1x1 layers, not the strided shortcuts or the
    3x3 layers."""
    from types import SimpleNamespace

    from experiments import bench_sparse_pairs_1x1 as b

    args = SimpleNamespace(model="resnet50", in_channels=3, size=224, batch=2, ratio=8.0,
                           masks=None)
    names = [name for name, *_ in b.pairs_layers(args)]
    assert "stages.3.1.conv1" in names and "stages.0.0.conv1" in names
    assert not any("shortcut" in n or n.endswith("conv2") for n in names)
    assert len(set(names)) == len(names)


def test_bench_sparse_pairs_1x1_takes_every_layer_with_filters_all():
    """``--filters all``: the strided shortcuts and the 3x3 layers too, named apart."""
    from types import SimpleNamespace

    from experiments import bench_sparse_pairs_1x1 as b

    args = SimpleNamespace(model="resnet50", in_channels=3, size=224, batch=2, ratio=8.0,
                           masks=None, filters="all")
    layers = b.pairs_layers(args)
    names = [name for name, *_ in layers]
    assert "stages.3.1.conv1" in names and "stages.1.0.shortcut.0" in names
    assert "stages.2.0.conv2" in names
    cases = {b.case_name(name, g) for name, g, _ in layers}
    assert len(cases) == len(layers)
    assert "stages.2.0.conv2 256x256x3x3 s2 p1 28x28" in cases


@pytest.mark.gpu
def test_bench_sparse_pairs_1x1_quick_on_every_filter(tmp_path):
    """``--filters all --quick``: the first layer of any filter, timed, checked, written
    apart from the 1x1 results."""
    from experiments import bench_sparse_pairs_1x1 as b

    assert b.main(["--quick", "--filters", "all", "--out", str(tmp_path)]) == 0
    rows = results.read_csv(tmp_path / f"{b.NAME}_all.csv")
    assert {"ours", "cudnn-tf32"} <= {r["variant"] for r in rows if r["metric"] == "latency_us"}
    assert not (tmp_path / f"{b.NAME}.csv").exists()


def test_bench_sparse_pairs_1x1_needs_a_gpu(monkeypatch):
    from experiments import bench_sparse_pairs_1x1

    monkeypatch.setattr(backend, "gpu_available", lambda: False)
    with pytest.raises(backend.CudaUnavailableError):
        bench_sparse_pairs_1x1.main(["--quick", "--out", "unused"])


@pytest.mark.gpu
def test_scc_backward_quick(tmp_path):
    from experiments import scc_backward

    assert scc_backward.main(["--quick", "--batch", "4", "--out", str(tmp_path)]) == 0
    rows = results.read_csv(tmp_path / "scc_backward.csv")
    errs = [r["value"] for r in rows if r["metric"] == "rel_err"]
    assert len(errs) == 2 * 7 and max(errs) <= 1e-5   # 2 layers x 7 implementations
    impls = {r["variant"] for r in rows if r["metric"] == "backward_us"}
    assert {"ours", "gather", "var", "dense", "base", "opt"} <= impls
    kernel = {r["variant"] for r in rows if r["metric"] == "fwd_bwd_graph_us"}
    assert {"ours", "ours-parts", "gather", "var"} <= kernel
    assert (tmp_path / "scc_backward.png").stat().st_size > 0


@pytest.mark.gpu
def test_scc_train_speed_quick(tmp_path):
    from experiments import scc_train_speed

    earlier = results.ResultSet("scc_train_speed", {"device": "earlier call"})
    earlier.add("vgg16 cg2 co50", "ours", "step_ms", 10.0, "ms")
    earlier.add("vgg16 cg2 co50", "base", "step_ms", 60.0, "ms")
    earlier.add("resnet18 cg2 co50", "ours", "step_ms", 1e6, "ms")     # made again now
    earlier.write_csv(tmp_path / "earlier.csv")
    args = ["--quick", "--models", "resnet18", "--batch", "8", "--steps", "1",
            "--out", str(tmp_path), "--merge", str(tmp_path / "earlier.csv")]
    assert scc_train_speed.main(args) == 0
    rows = results.read_csv(tmp_path / "scc_train_speed.csv")
    ms = {(r["case"], r["variant"]): r["value"] for r in rows if r["metric"] == "step_ms"}
    assert {v for c, v in ms if c.startswith("resnet18")} == {"ours", "dense", "opt", "base"}
    assert ms["vgg16 cg2 co50", "base"] == 60.0 and ms["resnet18 cg2 co50", "ours"] < 1e6
    base = next(r for r in rows if r["variant"] == "base/ours")
    assert "over 2 runs" in base["note"]


@pytest.mark.gpu
@pytest.mark.slow
def test_scc_train_speed_imagenet_quick(tmp_path):
    """Fig. 8's path end to end at a small batch: the ImageNet-shaped network trains a step
    on every implementation (or records running out of memory) into its own files."""
    from experiments import scc_train_speed

    args = ["--quick", "--imagenet", "--models", "mobilenet_v1_imagenet", "--batch", "2",
            "--steps", "1", "--out", str(tmp_path)]
    assert scc_train_speed.main(args) == 0
    rows = results.read_csv(tmp_path / "scc_train_speed_imagenet.csv")
    done = {r["variant"] for r in rows if r["metric"] in ("step_ms", "out_of_memory")}
    assert done == set(scc_train_speed.IMPLS)
    assert all(r["note"].endswith("3x224x224") for r in rows if r["metric"] == "step_ms")
    assert not (tmp_path / "scc_train_speed.csv").exists()


def test_the_imagenet_training_steps_have_their_own_files(tmp_path):
    """Fig. 8 (``--imagenet``) writes scc_train_speed_imagenet.*, so it never replaces
    Fig. 7's files, and the other-device guard looks at the file it would replace."""
    from experiments import scc_train_speed

    assert scc_train_speed.output_name(scc_train_speed._args(["--out", str(tmp_path)])) == \
        "scc_train_speed"
    args = scc_train_speed._args(["--imagenet", "--out", str(tmp_path)])
    assert scc_train_speed.output_name(args) == "scc_train_speed_imagenet"
    assert "resnet18_imagenet" in args.models and "resnet50" in args.models
    assert scc_train_speed._args(["--out", str(tmp_path)]).models[3] == "resnet50_cifar"
    other = results.ResultSet("scc_train_speed_imagenet", {"device": "Imaginary GPU 9000"})
    other.add("vgg16 cg2 co50", "ours", "step_ms", 1.0, "ms")
    other.write_csv(tmp_path / "scc_train_speed_imagenet.csv")
    with pytest.raises(SystemExit):
        scc_train_speed._args(["--imagenet", "--out", str(tmp_path)])
    scc_train_speed._args(["--out", str(tmp_path)])           # Fig. 7's files: free


def test_sweeps_keep_their_rows_while_they_run(tmp_path, monkeypatch):
    """The DSXplore sweeps write the rows so far after every point to NAME.partial.csv
    (an out-of-memory point is skipped), normalise to the baseline point, and the final
    write removes the partial file (CPU: the model and its timing are stubbed)."""
    import types

    from experiments import _common, _scc
    from tensorconv.results import ResultSet

    class OutOfMemory(Exception):
        pass

    partial = _common.partial_csv("sweep", tmp_path)
    seen, watch = [], [partial]

    def step_time(model, shape, steps, cp):
        seen.append(shape[0])
        if watch and len(seen) == 2:   # the first point's two rows are on disk already
            assert len(results.read_csv(watch[0])) == 2
        if shape[0] == 16:
            raise OutOfMemory
        return 1e-3 * shape[0]

    monkeypatch.setattr(_scc, "dw_scc", lambda *a, **k: object())
    monkeypatch.setattr(_scc, "step_time", step_time)
    pool = types.SimpleNamespace(free_all_blocks=lambda: None)
    cp = types.SimpleNamespace(cuda=types.SimpleNamespace(
        memory=types.SimpleNamespace(OutOfMemoryError=OutOfMemory)),
        get_default_memory_pool=lambda: pool)
    rs = ResultSet("sweep", {"device": "test"})
    args = types.SimpleNamespace(steps=1, out=tmp_path)
    points = [("m", b, 2, 0.5, b) for b in (4, 8, 16)]
    ms = _scc.run_sweep(rs, args, cp, points, axis="batch", baseline=4, csv=partial)
    assert seen == [4, 8, 16] and ms == {("m", 4): 4.0, ("m", 8): 8.0}
    assert len(results.read_csv(partial)) == 4 and rs.values("relative")[("m", "batch=8")] == 2
    assert rs.values("out_of_memory") == {("m", "batch=16"): 1.0}
    _scc.write_sweep("sweep", rs, {"device": "test", "command": "x"}, args, ms, axis="batch",
                     title="t", notes="n")
    assert not partial.exists() and (tmp_path / "sweep.csv").exists()

    from experiments import scc_groups, scc_overlap

    monkeypatch.setattr(_scc.backend, "require_cuda", lambda name: cp)
    seen.clear()
    watch.clear()
    assert scc_overlap.main(["--quick", "--out", str(tmp_path)]) == 0
    rows = results.read_csv(tmp_path / "scc_overlap.csv")
    assert {r["variant"] for r in rows if r["metric"] == "relative"} == {"co=0.1", "co=0.25"}
    assert scc_groups.main(["--models", "a", "b", "--cgs", "1", "2", "--out", str(tmp_path)]) == 0
    rel = {(r["case"], r["variant"]): r["value"]
           for r in results.read_csv(tmp_path / "scc_groups.csv") if r["metric"] == "relative"}
    assert set(rel) == {(m, f"cg={c}") for m in "ab" for c in (1, 2)} and rel[("a", "cg=1")] == 1


@pytest.mark.gpu
@pytest.mark.parametrize("name,axis", [("scc_groups", "cg"), ("scc_overlap", "co"),
                                       ("scc_batch", "batch")])
def test_scc_sweeps_quick(tmp_path, name, axis):
    """Figs 11-13: two points of one network, step times and (but for the batch sweep) the
    paper's normalisation to the first point."""
    import importlib

    exp = importlib.import_module(f"experiments.{name}")
    args = ["--quick", "--models", "resnet18", "--steps", "1", "--out", str(tmp_path)]
    args += [] if name == "scc_batch" else ["--batch", "8"]
    args += ["--batches", "4", "8"] if name == "scc_batch" else []
    assert exp.main(args) == 0
    rows = results.read_csv(tmp_path / f"{name}.csv")
    steps = [r for r in rows if r["metric"] == "step_ms"]
    assert len(steps) == 2 and all(r["value"] > 0 for r in steps)
    assert all(r["variant"].startswith(f"{axis}=") for r in steps)
    rel = [r["value"] for r in rows if r["metric"] == "relative"]
    assert rel == ([] if name == "scc_batch" else [1.0, rel[1]])
    assert (tmp_path / f"{name}.png").stat().st_size > 0


@pytest.mark.gpu
def test_scc_inference_quick(tmp_path):
    from experiments import scc_inference

    assert scc_inference.main(["--quick", "--batches", "2", "4", "--out", str(tmp_path)]) == 0
    rows = results.read_csv(tmp_path / "scc_inference.csv")
    errs = {r["variant"]: r["value"] for r in rows if r["metric"] == "rel_err"}
    assert max(v for k, v in errs.items() if "tf32" not in k) <= 1e-4   # TF32: ~1e-3
    ms = {r["variant"] for r in rows if r["metric"] == "batch_ms"}
    assert "ours-dw-scc" in ms
    assert (tmp_path / "scc_inference.png").stat().st_size > 0


@pytest.mark.gpu
def test_tc_layers_quick(tmp_path):
    pytest.importorskip("torch")
    from experiments import tc_layers

    assert tc_layers.main(["--quick", "--out", str(tmp_path)]) == 0
    rows = results.read_csv(tmp_path / "tc_layers.csv")
    assert max(r["value"] for r in rows if r["metric"] == "rel_err") <= 2e-3
    lat = {r["variant"] for r in rows if r["metric"] == "latency_us"}
    assert lat == {"ours-nchw", "cudnn-nchw", "ours-nhwc", "cudnn-nhwc"}
    assert {r["case"] for r in rows if r["metric"] == "mean_reduction_pct"} == {"all layers"}


@pytest.mark.gpu
def test_tc_layers_bf16_quick(tmp_path):
    pytest.importorskip("torch")
    from experiments import tc_layers

    assert tc_layers.main(["--quick", "--dtype", "bfloat16", "--out", str(tmp_path)]) == 0
    assert not (tmp_path / "tc_layers.csv").exists()
    rows = results.read_csv(tmp_path / "tc_layers_bf16.csv")
    assert max(r["value"] for r in rows if r["metric"] == "rel_err") <= 8e-3
    assert all(r["paper_value"] != r["paper_value"] for r in rows)      # no paper bf16 figure


@pytest.mark.gpu
def test_tc_batch_quick(tmp_path):
    pytest.importorskip("torch")
    from experiments import tc_batch

    first, rest = tmp_path / "first", tmp_path / "rest"
    # a budget spent after the first case: one case kept, then the rest by --merge
    assert tc_batch.main(["--quick", "--time-budget", "0", "--out", str(first)]) == 0
    rows = results.read_csv(first / "tc_batch.csv")
    assert {r["case"] for r in rows if r["metric"] == "ratio"} == {"L5 layer2.0.downsample b1"}
    assert not (first / "tc_batch.partial.csv").exists()
    assert tc_batch.main(["--quick", "--merge", str(first / "tc_batch.csv"),
                          "--out", str(rest)]) == 0
    rows = results.read_csv(rest / "tc_batch.csv")
    assert max(r["value"] for r in rows if r["metric"] == "rel_err") <= 2e-3
    assert len({r["case"] for r in rows if r["metric"] == "ratio"}) == 4
    assert len([r for r in rows if r["metric"] == "crossover_batch"]) == 4


def test_dp_scaling_builds_its_networks():
    from experiments.dp_scaling import MODELS, build_model
    from tensorconv.nn.scc import SCCConv2d

    for name in MODELS:
        model = build_model(name)
        assert model.num_classes == 10 and model.in_channels == 3
        assert any(isinstance(m, SCCConv2d) for m in model.modules()) == name.startswith("scc")


@pytest.mark.gpu
def test_dp_scaling_quick(tmp_path):
    from experiments import dp_scaling

    assert dp_scaling.main(["--quick", "--gpus", "1", "2", "--out", str(tmp_path)]) == 0
    rows = results.read_csv(tmp_path / "dp_scaling.csv")
    ips = {(r["case"], r["variant"]): r for r in rows if r["metric"] == "images_per_s"}
    assert ips["resnet18/weak/captured", "1 GPU"]["value"] > 0
    assert [r["metric"] for r in rows].count("launcher/plain") == 1


@pytest.mark.gpu
def test_tc_e2e_quick(tmp_path):
    pytest.importorskip("torch")
    from experiments import tc_e2e

    assert tc_e2e.main(["--quick", "--out", str(tmp_path)]) == 0
    rows = results.read_csv(tmp_path / "tc_e2e.csv")
    errs = {(r["case"], r["variant"]): r["value"] for r in rows
            if r["metric"] == "rel_err_vs_fp32"}
    assert len(errs) == 4 and all(v < 2e-2 for v in errs.values()), errs
    assert [r["metric"] for r in rows].count("ratio") == 2


@pytest.mark.gpu
def test_tc_ablation_quick(tmp_path, monkeypatch):
    from experiments import tc_ablation

    monkeypatch.setenv("TENSORCONV_TUNE_CACHE", str(tmp_path / "tune.json"))
    assert tc_ablation.main(["--quick", "--budget", "4", "--out", str(tmp_path)]) == 0
    rows = results.read_csv(tmp_path / "tc_ablation.csv")
    spaces = {r["variant"] for r in rows if r["metric"] == "latency_us"}
    assert spaces == {f"{s}-{lay}" for s in ("paper", "mma", "full") for lay in ("nchw", "nhwc")}
    assert len([r for r in rows if r["metric"] == "geomean_ratio"]) == 4
    assert not (tmp_path / "tune.json").exists()             # the ablation stores nothing


@pytest.mark.gpu
def test_scc_memory_quick(tmp_path):
    from experiments import scc_memory

    args = ["--quick", "--models", "resnet18", "--batch", "8", "--out", str(tmp_path)]
    assert scc_memory.main(args) == 0
    rows = results.read_csv(tmp_path / "scc_memory.csv")
    mib = {r["variant"]: r["value"] for r in rows if r["metric"] == "forward_mib"}
    assert mib["base"] > mib["opt"] > 0 and mib["ours"] > 0


@pytest.mark.skipif(not _have_fashion_mnist(), reason="Fashion-MNIST not installed")
def test_tdc_table3_quick_resumes_from_its_work_dir(tmp_path):
    from experiments import tdc_table3

    args = ["--quick", "--model", "resnet20", "--train-limit", "256", "--budgets", "0.7",
            "--device", "cpu", "--out", str(tmp_path)]
    assert tdc_table3.main(args + ["--time-budget", "0"]) == 0     # no epoch fits
    assert not (tmp_path / "tdc_table3_work" / "baseline.npz").exists()
    assert tdc_table3.main(args) == 0
    rows = results.read_csv(tmp_path / "tdc_table3.csv")
    cell = {(r["case"], r["variant"], r["metric"]): r for r in rows}
    assert 0 <= cell[("baseline", "dense", "test_acc")]["value"] <= 100
    assert 0 <= cell[("budget70", "admm", "test_acc")]["value"] <= 100
    assert cell[("budget70", "admm-phase", "epochs")]["value"] == 1
    assert 40 < cell[("budget70", "admm", "model_flops_reduction")]["value"] < 90
    assert "uniform" in cell[("budget70", "admm", "ranks")]["note"]    # no GPU here: no table
    assert (tmp_path / "tdc_table3.png").stat().st_size > 0


@pytest.mark.skipif(not _have_fashion_mnist(), reason="Fashion-MNIST not installed")
def test_sparse_table1_stops_after_the_phase_asked_and_goes_on_later(tmp_path):
    from experiments import sparse_table1

    args = ["--quick", "--models", "small_cnn", "--out", str(tmp_path), "--slim"]
    assert sparse_table1.main(args + ["--stop-after", "admm"]) == 0
    work = tmp_path / "sparse_table1_work" / "small_cnn"
    rows = results.read_csv(tmp_path / "sparse_table1.csv")
    assert {r["variant"] for r in rows if r["metric"] == "test_acc"} == {"full", "admm"}
    assert (work / "admm.npz").exists() and not (work / "pruned.npz").exists()
    full = {r["variant"]: r["value"] for r in rows if r["metric"] == "test_acc"}["full"]
    (work / "full.npz").unlink()          # the next call carries admm.npz and the records
    assert sparse_table1.main(args + ["--stop-after", "pruned"]) == 0
    rows = results.read_csv(tmp_path / "sparse_table1.csv")
    acc = {r["variant"]: r["value"] for r in rows if r["metric"] == "test_acc"}
    assert set(acc) == {"full", "admm", "pruned"} and acc["full"] == full
    assert not (work / "full.npz").exists() and not (work / "repruned.npz").exists()
    record = work / "full.meta.json"    # a record of another run than the one asked for
    record.write_text(record.read_text().replace('"epoch": 1', '"epoch": 3'))
    with pytest.raises(ValueError, match="full.meta.json records 3 epochs"):
        sparse_table1.main(args)


@pytest.mark.skipif(not _have_fashion_mnist(), reason="Fashion-MNIST not installed")
def test_sparse_table1_retrains_every_budget_of_the_sweep(tmp_path):
    pytest.importorskip("mtkahypar")
    from experiments import sparse_table1

    args = ["--quick", "--models", "small_cnn", "--out", str(tmp_path), "--t2", "2",
            "--b3-sweep", "0.3", "0.2", "0.1", "--retrain-sweep"]
    assert sparse_table1.main(args) == 0
    rows = results.read_csv(tmp_path / "sparse_table1.csv")
    acc = {r["variant"]: r["value"] for r in rows if r["metric"] == "test_acc"}
    assert set(acc) == {"full", "admm", "pruned", "repruned", "repruned b3=0.1",
                        "repruned b3=0.3"}
    assert all(10.0 < a <= 100.0 for a in acc.values())
    work = tmp_path / "sparse_table1_work" / "small_cnn"
    for b3 in ("0.1", "0.3"):
        assert (work / f"repruned_b3_{b3}_masks.npz").exists()
        assert any(r["variant"] == f"repruned b3={b3}" and r["metric"] == "density"
                   for r in rows)
    assert "repruned b3=0.3" in (tmp_path / "sparse_table1.md").read_text()
    assert sparse_table1.main(args) == 0            # all finished: nothing trained again
    again = results.read_csv(tmp_path / "sparse_table1.csv")
    assert {r["variant"]: r["value"] for r in again if r["metric"] == "test_acc"} == acc


@pytest.mark.skipif(not _have_fashion_mnist(), reason="Fashion-MNIST not installed")
def test_sparse_table1_quick_runs_every_phase_and_resumes(tmp_path):
    pytest.importorskip("mtkahypar")
    from experiments import sparse_table1

    args = ["--quick", "--models", "small_cnn", "--out", str(tmp_path), "--t2", "2"]
    assert sparse_table1.main(args + ["--time-budget", "0"]) == 0     # nothing fits: no row
    assert sparse_table1.main(args) == 0
    rows = results.read_csv(tmp_path / "sparse_table1.csv")
    acc = {r["variant"]: r["value"] for r in rows if r["metric"] == "test_acc"}
    assert set(acc) == {"full", "admm", "pruned", "repruned"}
    assert all(10.0 < a <= 100.0 for a in acc.values())
    removed = [r["value"] for r in rows
               if r["metric"] == "removed_l2" and r["variant"] == "repruned"]
    assert removed and all(0 <= v <= 0.2 + 1e-3 for v in removed)
    for masks in ("pruned_masks.npz", "repruned_masks.npz"):
        assert (tmp_path / "sparse_table1_work" / "small_cnn" / masks).exists()
    assert (tmp_path / "sparse_table1.png").stat().st_size > 0
    freed = {r["variant"]: r["value"] for r in rows
             if r["metric"] == "work_freed" and r["case"].endswith("all layers")}
    assert set(freed) == {f"{m} b3={b}" for m in ("knapsack", "magnitude") for b in (0.3, 0.2, 0.1)}
    assert all(0 <= v <= 1 for v in freed.values())
    assert freed["knapsack b3=0.3"] >= freed["knapsack b3=0.1"]
    assert "Ablation" in (tmp_path / "sparse_table1.md").read_text()
    earlier = tmp_path / "earlier.csv"
    results.ResultSet("sparse_table1", {}).write_csv(earlier)     # an empty earlier call
    other = results.read_csv(tmp_path / "sparse_table1.csv")
    for r in other:
        r["case"] = r["case"].replace("small_cnn-4x", "vgg16-4x")
    rs = results.ResultSet("sparse_table1", {})
    rs.extend(other)
    rs.write_csv(earlier)
    assert sparse_table1.main(args + ["--merge", str(earlier), "--slim"]) == 0   # all finished
    from training import checkpoint as ckpt

    for phase in ("full", "admm", "pruned", "repruned"):
        assert ckpt.load(tmp_path / "sparse_table1_work" / "small_cnn" / f"{phase}.npz")[2]["slim"]
    merged = results.read_csv(tmp_path / "sparse_table1.csv")
    cases = {r["case"].split("/")[0] for r in merged if r["metric"] == "test_acc"}
    assert cases == {"small_cnn-4x", "vgg16-4x"}
    assert len([r for r in merged if r["metric"] == "test_acc"]) == 8


@pytest.mark.skipif(not _have_fashion_mnist(), reason="Fashion-MNIST not installed")
def test_scc_table2_quick_reports_costs_beside_the_paper(tmp_path):
    from experiments import scc_table2

    args = ["--quick", "--models", "vgg16", "--out", str(tmp_path), "--device", "cpu"]
    assert scc_table2.main(args + ["--time-budget", "0"]) == 0   # costs only, no training
    rows = results.read_csv(tmp_path / "scc_table2.csv")
    params = {r["variant"]: r for r in rows if r["metric"] == "params_m"}
    assert params["dw+scc"]["value"] == pytest.approx(0.87, rel=0.01)
    assert params["dw+scc"]["paper_value"] == 0.87
    assert not any(r["metric"] == "test_acc" for r in rows)


def test_scc_table2_merge_keeps_the_other_models_rows(tmp_path):
    """A study split over calls: ``--merge`` keeps earlier CSVs' rows of the runs not made
    now (their notes and paper values too), drops the costs it makes again and lets an
    earlier call's seeds join the mean."""
    from experiments import scc_table2

    rs = results.ResultSet("scc_table2", {"device": "H100 (earlier call)"})
    rs.add("vgg16", "dw+scc", "test_acc_seed0", 91.5, "%", note="15 epochs")
    rs.add("vgg16", "dw+scc", "best_test_acc_seed0", 91.7, "%", note="15 epochs")
    rs.add("vgg16", "dw+scc", "test_acc", 91.5, "%", paper_value=92.6, note="seed 0")
    rs.add("vgg19", "dw+scc", "params_m", 9.0, "M")
    rs.add("vgg19", "dw+scc", "test_acc_seed0", 90.0, "%", note="15 epochs")
    rs.add("vgg19", "original", "test_acc_seed0", 93.0, "%", note="partial: 3/15 epochs")
    earlier = rs.write_csv(tmp_path / "earlier.csv")
    later = results.ResultSet("scc_table2", {"device": "H100 (later call)"})
    later.add("vgg16", "dw+scc", "test_acc_seed1", 92.5, "%", note="15 epochs")
    later.add("vgg16", "dw+scc", "best_test_acc_seed1", 92.7, "%", note="15 epochs")
    second = later.write_csv(tmp_path / "later.csv")
    out = tmp_path / "out"
    assert scc_table2.main(["--quick", "--models", "vgg19", "--variants", "dw+scc", "dw+pw",
                            "--out", str(out), "--device", "cpu", "--time-budget", "0",
                            "--merge", str(earlier), str(second)]) == 0
    rows = results.read_csv(out / "scc_table2.csv")
    acc = {(r["case"], r["variant"]): r for r in rows if r["metric"] == "test_acc"}
    # vgg19 dw+scc: seed 0 kept (this call trained nothing), its mean computed again
    assert set(acc) == {("vgg16", "dw+scc"), ("vgg19", "original"), ("vgg19", "dw+scc")}
    vgg16 = acc["vgg16", "dw+scc"]
    assert vgg16["value"] == pytest.approx(92.0) and vgg16["paper_value"] == 92.6
    assert "0: 91.50, 1: 92.50" in vgg16["note"] and "sd 0.71" in vgg16["note"]
    best = {(r["case"], r["variant"]): r["value"] for r in rows if r["metric"] == "best_test_acc"}
    assert best["vgg16", "dw+scc"] == pytest.approx(92.2)
    assert acc["vgg19", "original"]["note"].startswith("partial (seed 0 3/15 epochs)")
    assert {r["device"] for r in rows if r["metric"] == "test_acc_seed1"} == {"H100 (later call)"}
    params = {r["variant"]: r["value"] for r in rows
              if r["case"] == "vgg19" and r["metric"] == "params_m"}
    assert set(params) == {"dw+scc", "dw+pw"} and params["dw+scc"] != 9.0   # costed again


def test_scc_table2_report_only_averages_the_merged_seeds_without_training(tmp_path):
    """Seeds trained on separate GPUs come back as separate CSVs; ``--report-only`` makes
    one table of them (every seed's row kept, means computed again, costs kept)."""
    from experiments import scc_table2

    paths = []
    for seed, value in ((0, 94.0), (1, 93.0)):
        rs = results.ResultSet("scc_table2", {"device": f"gpu {seed}"})
        rs.add("resnet18", "dw+scc", "params_m", 0.84, "M", paper_value=0.84)
        rs.add("resnet18", "dw+scc", f"test_acc_seed{seed}", value, "%", note="15 epochs")
        rs.add("resnet18", "dw+scc", "test_acc", value, "%", note=f"seed {seed}")
        paths.append(str(rs.write_csv(tmp_path / f"r{seed}.csv")))
    out = tmp_path / "out"
    assert scc_table2.main(["--report-only", "--merge", *paths, "--out", str(out),
                            "--device", "cpu"]) == 0
    rows = results.read_csv(out / "scc_table2.csv")
    metrics = sorted(r["metric"] for r in rows)
    assert metrics == ["best_test_acc", "params_m", "test_acc", "test_acc_seed0",
                       "test_acc_seed1"]
    mean = next(r for r in rows if r["metric"] == "test_acc")
    assert mean["value"] == pytest.approx(93.5) and "0: 94.00, 1: 93.00" in mean["note"]
    assert mean["device"] == "gpu 0 + gpu 1"      # where the runs were, not this machine
    text = (out / "scc_table2.md").read_text()
    assert "| device | `gpu 0 + gpu 1` |" in text and "padded to 32x32, 15 epochs" in text
    assert not (out / "scc_table2_work").exists()        # a report makes no work directory


@pytest.mark.parametrize("extra", [[], ["--merge", "x.csv", "--epochs", "15"],
                                   ["--merge", "x.csv", "--models", "vgg16"]])
def test_scc_table2_report_only_refuses_what_it_would_ignore(tmp_path, capsys, extra):
    from experiments import scc_table2

    with pytest.raises(SystemExit):
        scc_table2.main(["--report-only", "--out", str(tmp_path), *extra])
    assert not (tmp_path / "scc_table2.csv").exists()
    err = capsys.readouterr().err
    assert ("needs the CSVs" in err) if not extra else (f"drop {extra[2]}" in err)


def test_scc_accuracy_over_seeds_is_their_mean_with_each_in_the_note():
    from experiments.scc_table2 import add_accuracy

    rs = results.ResultSet("scc_table2", {"device": "test"})
    rs.add("vgg16", "dw+scc", "test_acc_seed0", 93.4, "%", note="15 epochs")
    rs.add("vgg16", "dw+scc", "best_test_acc_seed0", 93.5, "%", note="15 epochs")
    for seed, final, best, note in ((0, 93.7, 93.8, "15 epochs"), (1, 93.5, 93.9, "15 epochs"),
                                    (2, 93.3, 93.4, "partial: 12/15 epochs")):
        rs.add("vgg16", "dw+pw", f"test_acc_seed{seed}", final, "%", note=note)
        rs.add("vgg16", "dw+pw", f"best_test_acc_seed{seed}", best, "%", note=note)
    add_accuracy(rs, {"vgg16": {"dw+scc": (None, None, 92.6)}})
    acc = {(r["variant"], r["metric"]): r for r in rs.rows}
    one = acc["dw+scc", "test_acc"]
    assert one["value"] == 93.4 and one["note"] == "seed 0; paper: CIFAR-10"
    assert one["paper_value"] == 92.6 and acc["dw+scc", "best_test_acc"]["value"] == 93.5
    three = acc["dw+pw", "test_acc"]
    assert three["value"] == pytest.approx(93.5) and acc["dw+pw", "best_test_acc"]["value"] \
        == pytest.approx(93.7)
    assert "seed 2 12/15 epochs" in three["note"] and "0: 93.70, 1: 93.50, 2: 93.30" in \
        three["note"] and "sd 0.20" in three["note"]


def test_scc_seed_trained_again_replaces_the_merged_one():
    from experiments.scc_table2 import _latest_per_seed

    rs = results.ResultSet("scc_table2", {"device": "now"})
    rs.extend([dict(rs_row, device="earlier") for rs_row in _rows(91.0)])
    rs.add("vgg16", "dw+scc", "test_acc_seed0", 93.0, "%", note="15 epochs")
    _latest_per_seed(rs)
    assert [(r["value"], r["device"]) for r in rs.rows] == [(93.0, "now")]


def _rows(value: float) -> list:
    rs = results.ResultSet("scc_table2", {"device": "x"})
    rs.add("vgg16", "dw+scc", "test_acc_seed0", value, "%", note="15 epochs")
    return rs.rows


def test_committed_scc_tables_hold_every_run_by_seed():
    """The committed CSVs keep each run's accuracy by seed, so a later ``--merge`` can
    average new seeds with them."""
    for name in ("scc_table2", "scc_table4"):
        rows = results.read_csv(Path(__file__).parents[1] / "results" / f"{name}.csv")
        means = {(r["case"], r["variant"]) for r in rows if r["metric"] == "test_acc"}
        seeded = {(r["case"], r["variant"]) for r in rows
                  if r["metric"].startswith("test_acc_seed")}
        assert means and means == seeded


def test_scc_table4_costs_order_pw_gpw_scc(tmp_path):
    from experiments import scc_table4

    assert scc_table4.main(["--quick", "--out", str(tmp_path), "--time-budget", "0"]) == 0
    rows = results.read_csv(tmp_path / "scc_table4.csv")
    params = {r["variant"]: r["value"] for r in rows if r["metric"] == "params_m"}
    assert len(params) == 10
    for cg in (2, 4, 8):                   # SCC costs what GPW costs at the same cg
        assert params[f"dw+scc-cg{cg}-co50"] == params[f"dw+gpw-cg{cg}"] < params["dw+pw"]
    assert params["dw+gpw-cg8"] < params["dw+gpw-cg4"] < params["dw+gpw-cg2"]


@pytest.mark.gpu
def test_bench_conv_grads_quick(tmp_path):
    pytest.importorskip("torch")
    from experiments import bench_conv_grads

    assert bench_conv_grads.main(["--quick", "--out", str(tmp_path)]) == 0
    rows = results.read_csv(tmp_path / "bench_conv_grads.csv")
    assert {r["metric"] for r in rows} >= {"forward", "data_grad", "weight_grad",
                                           "forward_total", "weight_grad_ratio"}
    assert all(r["value"] > 0 for r in rows)


def test_finish_preloads_waits_for_an_import_still_running(monkeypatch):
    import threading
    import time

    from experiments import _common

    started, done = threading.Event(), []

    def slow_import(name):
        started.set()
        time.sleep(0.3)
        done.append(name)

    monkeypatch.setattr(_common.importlib, "import_module", slow_import)
    _common.preload("some.module")
    assert started.wait(5)
    _common.finish_preloads()
    assert done == ["some.module"]
    assert not any(t.name == "preload" and t.is_alive() for t in threading.enumerate())


def test_sparse_e2e_report_only_makes_one_table_of_runs_timed_apart(tmp_path):
    """Models timed in separate calls (each a GPU's call) come back as separate CSVs;
    ``--report-only`` makes one table of them, times nothing, and says where each was
    measured and at which commit."""
    from experiments import sparse_e2e

    paths = []
    for i, (case, us) in enumerate((("resnet18-8x pruned", 874.0), ("vgg16-4x pruned", 587.0))):
        rs = results.ResultSet("sparse_e2e", {"device": f"gpu {i}"})
        rs.add(case, "ours-sparse", "batch_us", us, "us")
        rs.add(case, "cudnn-fp32", "batch_us", 2 * us, "us")
        rs.add(case, "ours-sparse", "sparse_layers", 8, "count", note="of 19 pruned convolutions")
        rs.add(case, "cudnn-fp32/ours-sparse", "speedup", 2.0, "x")
        path = tmp_path / f"run{i}" / "sparse_e2e.csv"
        path.parent.mkdir()
        rs.write_csv(path)
        path.with_suffix(".md").write_text(f"| commit | `abc{i}` |\n")
        paths.append(str(path))
    out = tmp_path / "out"
    assert sparse_e2e.main(["--report-only", "--merge", *paths, "--out", str(out)]) == 0
    rows = results.read_csv(out / "sparse_e2e.csv")
    assert {r["case"] for r in rows} == {"resnet18-8x pruned", "vgg16-4x pruned"}
    assert len(rows) == 8 and {r["device"] for r in rows} == {"gpu 0", "gpu 1"}
    text = (out / "sparse_e2e.md").read_text()
    assert "| device | `gpu 0 + gpu 1` |" in text and "run1/sparse_e2e.csv at abc1" in text
    assert "resnet18-8x pruned: 8 of 19 pruned convolutions" in text
    assert (out / "sparse_e2e.png").exists()


@pytest.mark.parametrize("extra", [[], ["--merge", "x.csv", "--models", "vgg16"],
                                   ["--merge", "x.csv", "--masks", "vgg16=m.npz"]])
def test_sparse_e2e_report_only_refuses_what_it_would_ignore(tmp_path, capsys, extra):
    from experiments import sparse_e2e

    with pytest.raises(SystemExit):
        sparse_e2e.main(["--report-only", "--out", str(tmp_path), *extra])
    assert not (tmp_path / "sparse_e2e.csv").exists()
    err = capsys.readouterr().err
    assert ("needs the CSVs" in err) if not extra else (f"drop {extra[2]}" in err)


def test_sparse_e2e_merge_keeps_other_models_rows(tmp_path):
    from experiments._common import merged_rows

    rs = results.ResultSet("sparse_e2e", {"device": "gpu"})
    rs.add("resnet18-8x pruned", "ours-sparse", "batch_us", 1.0, "us")
    rs.add("googlenet-8x repruned", "ours-sparse", "batch_us", 2.0, "us")
    path = rs.write_csv(tmp_path / "a.csv")
    kept = merged_rows([path], {"resnet18-8x"})
    assert [r["case"] for r in kept] == ["googlenet-8x repruned"]


def test_scc_backward_names_its_files_by_model():
    from experiments import scc_backward

    assert scc_backward.output_name(scc_backward._args([])) == "scc_backward"
    args = scc_backward._args(["--model", "resnet18", "--out", "unused"])
    assert scc_backward.output_name(args) == "scc_backward_resnet18"


def test_sparse_layers_refuses_a_min_gain_outside_a_share(capsys):
    from experiments import sparse_layers

    with pytest.raises(SystemExit):
        sparse_layers.main(["--min-gain", "1.5", "--out", "unused"])
    assert "--min-gain" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--retime"], ["--retime", "--layers", "stages.1.0.conv1"],
                                  ["--retime", "--merge", "earlier.csv"]])
def test_sparse_layers_retime_needs_the_layers_and_the_rows_they_replace(capsys, argv):
    from experiments import sparse_layers

    with pytest.raises(SystemExit):
        sparse_layers.main(argv + ["--out", "unused"])
    assert "--retime" in capsys.readouterr().err


def test_a_layers_rows_are_its_case_and_its_choices():
    from experiments.sparse_layers import of_case

    case = "pruned inceptions.3.branch3.0 96x480x1x1 s1 16x16"
    assert of_case(case, case) and of_case(case + " via sparse_unrolled_direct Tile(rb=32)", case)
    assert not of_case("pruned inceptions.3.branch3.0 96x480x1x1 s1 16x16x", case)
    assert not of_case("pruned inceptions.3.branch3.3 208x96x3x3 s1 16x16", case)
