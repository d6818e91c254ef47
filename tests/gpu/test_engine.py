"""The inference engine (BN folded, CUDA graph) against the model's own forward."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tensorconv.autograd import Tensor, no_grad
from tensorconv.checks import conv_geometry
from tensorconv.engine import InferenceEngine
from tensorconv.nn import get_model
from tensorconv.nn.layers import BatchNorm2d
from tests.helpers import rel_err

pytestmark = pytest.mark.gpu

CASES = [
    ("resnet20", dict(in_channels=1), (2, 1, 32, 32)),
    ("resnet18", dict(in_channels=3), (1, 3, 32, 32)),
    ("resnet18_imagenet", dict(), (1, 3, 64, 64)),
    ("resnet50", dict(), (2, 3, 64, 64)),
    ("vgg16", dict(in_channels=1), (3, 1, 32, 32)),
    ("vgg16_imagenet", dict(), (1, 3, 64, 64)),
    ("mobilenet_v1", dict(), (1, 3, 32, 32)),
    ("densenet121", dict(stem="imagenet"), (1, 3, 64, 64)),
    ("densenet121", dict(stem="cifar", in_channels=1, num_classes=10), (2, 1, 32, 32)),
    ("small_cnn", dict(), (4, 1, 28, 28)),
    ("googlenet", dict(in_channels=1), (2, 1, 32, 32)),
    ("squeezenet1_0", dict(num_classes=10), (2, 3, 48, 48)),
]


def _randomise_bn(model, rng):
    """Non-trivial BN statistics, so that folding them is really tested."""
    for m in model.modules():
        if isinstance(m, BatchNorm2d):
            c = m.channels
            m.weight.data = m.xp.asarray(rng.random(c).astype(np.float32) + 0.5)
            m.bias.data = m.xp.asarray(rng.standard_normal(c).astype(np.float32) * 0.1)
            m.running_mean = m.xp.asarray(rng.standard_normal(c).astype(np.float32) * 0.1)
            m.running_var = m.xp.asarray(rng.random(c).astype(np.float32) + 0.5)


@pytest.mark.parametrize("name,kw,shape", CASES, ids=[f"{c[0]}-{c[2]}" for c in CASES])
def test_engine_matches_model(rng, name, kw, shape):
    import cupy as cp

    model = get_model(name, **kw).to("gpu")
    _randomise_bn(model, rng)
    model.eval()
    x = cp.asarray(rng.standard_normal(shape).astype(np.float32))
    with no_grad():
        ref = model(Tensor(x)).data.get()
    for graph in (True, False):
        engine = InferenceEngine(model, shape, graph=graph)
        linear_head = name not in ("vgg16", "squeezenet1_0")     # flattened; a 1x1 conv
        assert linear_head == any("gap + linear" in s.label for s in engine.plan.steps)
        out = engine(x)
        assert out.shape == ref.shape
        assert rel_err(out.get(), ref) < 1e-4, (name, graph)
    # a second input through the same graph: the buffers are reused, not stale
    x2 = cp.asarray(rng.standard_normal(shape).astype(np.float32))
    with no_grad():
        ref2 = model(Tensor(x2)).data.get()
    assert rel_err(engine(x2).get(), ref2) < 1e-4


BRANCHED = [("resnet18", dict(in_channels=3), (3, 3, 32, 32), "float32"),
            ("resnet50", dict(), (1, 3, 64, 64), "float32"),
            ("googlenet", dict(in_channels=1), (2, 1, 32, 32), "float32"),
            ("squeezenet1_0", dict(num_classes=10), (2, 3, 48, 48), "float32"),
            ("resnet18_imagenet", dict(), (1, 3, 64, 64), "float16"),
            ("squeezenet1_0", dict(num_classes=10), (1, 3, 45, 45), "float16")]


@pytest.mark.parametrize("name,kw,shape,dtype", BRANCHED,
                         ids=[f"{c[0]}-{c[2]}-{c[3]}" for c in BRANCHED])
def test_branches_side_by_side_give_one_streams_results_bit_for_bit(rng, name, kw, shape,
                                                                    dtype):
    """Residual shortcuts, inception branches and fire expands on side streams: the graph
    and the eager plan give what one stream gives, bit for bit, input after input (a
    missing fork or join would let a branch read a buffer before it is written)."""
    import cupy as cp

    model = get_model(name, **kw).to("gpu")
    _randomise_bn(model, rng)
    model.eval()
    one = InferenceEngine(model, shape, concurrent=False, dtype=dtype)
    side = InferenceEngine(model, shape, dtype=dtype)
    eager = InferenceEngine(model, shape, graph=False, dtype=dtype)
    assert one.sections == 0 and side.sections == eager.sections > 0
    assert side.plan.side_streams and not one.plan.side_streams
    for _ in range(3):
        x = cp.asarray(rng.standard_normal(shape).astype(np.float32))
        want = one(x).get()
        assert np.isfinite(want).all()
        assert np.array_equal(side(x).get(), want)
        assert np.array_equal(eager(x).get(), want)


def test_a_tuned_plan_times_each_section_both_ways_and_follows_the_verdict(rng, tmp_path,
                                                                         monkeypatch):
    """Tuning times each section side by side and on one stream and stores the verdict,
    then the whole plan with the sections left against every launch in order; a stored
    "one stream" verdict, of a section or of the whole plan, runs the launches in order
    (no section), with the same results bit for bit."""
    import cupy as cp

    from tensorconv import tunecache
    from tensorconv.engine import passes

    monkeypatch.setenv("TENSORCONV_TUNE_CACHE", str(tmp_path / "tune.json"))
    model = get_model("resnet18", in_channels=3).to("gpu")
    _randomise_bn(model, rng)
    model.eval()
    shape = (2, 3, 32, 32)
    side = InferenceEngine(model, shape)
    assert side.sections == 3                      # the three projection shortcuts
    side.plan.tune = True
    passes.choose_sections(side.plan)
    cache = json.loads((tmp_path / "tune.json").read_text())
    stored = {k: v for k, v in cache.items() if k.startswith("branches|")}
    assert len(stored) == 3
    assert all(v["fused_us"] > 0 and v["parts_us"] > 0 for v in stored.values())
    # the whole plan is weighed (both ways timed) only where a section stayed side by side
    whole = [v for k, v in cache.items() if k.startswith("plan_streams|")]
    assert len(whole) == any(v["fused"] for v in stored.values())
    assert all(v["fused_us"] > 0 and v["parts_us"] > 0 for v in whole)
    lookup = tunecache.lookup
    x = cp.asarray(rng.standard_normal(shape).astype(np.float32))
    for sections_verdict in (False, True):     # each section, or the whole plan, in order
        monkeypatch.setattr(tunecache, "lookup", lambda key, f=sections_verdict: (
            {"fused": f, "tile": []} if key.startswith("branches|") else
            {"fused": False, "tile": []} if key.startswith("plan_streams|") else lookup(key)))
        one = InferenceEngine(model, shape)
        assert one.sections == 0 and not one.plan.side_streams
        assert np.array_equal(one(x).get(), side(x).get())


def test_engine_bad_input():
    import cupy as cp

    model = get_model("small_cnn")
    with pytest.raises(ValueError, match="model.to"):
        InferenceEngine(model, (1, 1, 28, 28))
    model.to("gpu")
    with pytest.raises(ValueError, match="input_shape"):
        InferenceEngine(model, (1, 3, 28, 28))
    for shape in ((1, 1, 28.5, 28), (0, 1, 28, 28), "1,1,28,28", (1, 1, 28)):
        with pytest.raises(ValueError, match="input_shape must be"):
            InferenceEngine(model, shape)
    with pytest.raises(TypeError, match="tune must be True or False"):
        InferenceEngine(model, (1, 1, 28, 28), tune="yes")
    with pytest.raises(TypeError, match="concurrent must be True or False"):
        InferenceEngine(model, (1, 1, 28, 28), concurrent=1)
    engine = InferenceEngine(model, (1, 1, 28, 28))
    with pytest.raises(ValueError, match="built for"):
        engine(cp.zeros((2, 1, 28, 28), cp.float32))
    with pytest.raises(TypeError, match="on the GPU"):
        engine(np.zeros((1, 1, 28, 28), np.float32))


def test_engine_profile_times_every_launch_and_leaves_the_output_alone(rng):
    model = get_model("small_cnn")
    x, ref = _input_and_reference(model, (2, 1, 28, 28), rng)
    engine = InferenceEngine(model, (2, 1, 28, 28))
    out = engine(x)
    steps = engine.profile(repeat=3)
    assert [label for label, _ in steps] == [s.label for s in engine.plan.steps]
    assert len(steps) == engine.launches and all(us > 0 for _, us in steps)
    assert rel_err(engine(x).get(), ref) < 1e-5 and rel_err(out.get(), ref) < 1e-5
    for bad in (0, 2.5, "3"):
        with pytest.raises(ValueError, match="repeat must be"):
            engine.profile(repeat=bad)


def _input_and_reference(model, shape, rng):
    """Put ``model`` on the GPU with randomised BN in eval mode; a random input and its output."""
    import cupy as cp

    model.to("gpu")
    _randomise_bn(model, rng)
    model.eval()
    x = cp.asarray(rng.standard_normal(shape).astype(np.float32))
    with no_grad():
        return x, model(Tensor(x)).data.get()


def _engine_against_model(model, shape, rng):
    """Build the engine for a GPU model with randomised BN; return it and its error vs the model."""
    x, ref = _input_and_reference(model, shape, rng)
    engine = InferenceEngine(model, shape)
    return engine, rel_err(engine(x).get(), ref)


def test_engine_runs_tucker_models(rng):
    from tensorconv.compress import tuckerize, uniform_ranks

    model = get_model("resnet18_imagenet")
    tuckerize(model, uniform_ranks(model, 0.6, (1, 3, 64, 64)), decompose=False)
    engine, err = _engine_against_model(model, (1, 3, 64, 64), rng)
    assert any("cluster core" in getattr(s, "label", "") for s in engine.plan.steps)
    assert err < 1e-4


def test_engine_runs_cp_models(rng):
    from tensorconv.compress import cpize

    model = get_model("resnet20", in_channels=1)
    cpize(model, 4)
    engine, err = _engine_against_model(model, (2, 1, 32, 32), rng)
    assert sum("cp fused" in getattr(s, "label", "") for s in engine.plan.steps) == 18
    assert err < 1e-4


def _tuned(model, shape, rng, tmp_path, monkeypatch):
    """A ``tune=True`` engine of ``model`` checked against the model; the verdicts it stored
    (kind -> list), its launch labels; an untuned engine must replay the same plan."""
    monkeypatch.setenv("TENSORCONV_TUNE_CACHE", str(tmp_path / "tune.json"))
    x, ref = _input_and_reference(model, shape, rng)
    engine = InferenceEngine(model, shape, tune=True)
    assert rel_err(engine(x).get(), ref) < 1e-4
    verdicts: dict = {}
    for key, value in json.loads((tmp_path / "tune.json").read_text()).items():
        verdicts.setdefault(key.split("|")[0], []).append(value)
    for kind, entries in verdicts.items():   # one schema for every "one launch or the parts"
        if "fused" in entries[0]:
            assert all(v["fused"] == (v["fused_us"] < v["parts_us"]) and v["fused_us"] > 0
                       and v["parts_us"] > 0 for v in entries), kind
    labels = [s.label for s in engine.plan.steps]
    again = InferenceEngine(model, shape)                 # the cached decisions, no timing
    assert [s.label for s in again.plan.steps] == labels
    assert rel_err(again(x).get(), ref) < 1e-4
    return verdicts, labels


def test_tuned_tucker_resnet_chains_its_1x1s(rng, tmp_path, monkeypatch):
    """A batch-1 Tucker ResNet-20, tuned: every Tucker layer is timed as one launch and as
    three, each core kernel tuned, and where 1x1s meet (a layer's last and the next one's
    first) one launch is known to beat two: the plan chains them (as a pair, or inside a
    Tucker tail), and the classifier head runs as one launch."""
    from tensorconv.compress import tuckerize, uniform_ranks
    from tensorconv.ops import tucker_layer

    if tucker_layer.supported(conv_geometry((1, 8, 8, 8), (8, 8, 3, 3), 1, 1)):
        pytest.skip("no thread-block clusters on this device")
    model = get_model("resnet20")
    tuckerize(model, uniform_ranks(model, 0.6, (1, 3, 32, 32)), decompose=False)
    verdicts, labels = _tuned(model, (1, 3, 32, 32), rng, tmp_path, monkeypatch)
    assert verdicts["tucker_layer"] and verdicts["core_choice"]
    three = sum(not v["fused"] for v in verdicts["tucker_layer"])
    assert sum("fused tucker" in lb for lb in labels) >= len(verdicts["tucker_layer"]) - three
    if three:  # some layers run as three launches: their 1x1s meet
        assert any(v["fused"] for v in verdicts["pointwise_pair"] + verdicts.get("tucker_tail", []))
        assert any("pointwise pair" in lb or "tucker tail" in lb for lb in labels)
    assert [v["fused"] for v in verdicts["head"]] == [True]
    assert labels[-1].startswith("gap + linear")
    if any(v["fused"] for v in verdicts.get("shortcut_fold", [])):
        assert any("+ shortcut" in lb for lb in labels)


@pytest.mark.parametrize("tile", [(16, 1), (8, 2), (4, 4)], ids=str)
def test_engine_chains_1x1_pairs_where_the_cache_says_so(rng, tile, tmp_path, monkeypatch):
    """Forced "pair" verdicts: every Tucker layer's last 1x1 runs in one launch with the
    next layer's first (across the residual blocks too, with and without clusters); the
    result matches the model."""
    from tensorconv import backend, tunecache
    from tensorconv.compress import tuckerize, uniform_ranks
    from tensorconv.nn.tucker import TuckerConv2d

    if tile[1] > 1 and backend.device_facts().compute_capability < (9, 0):
        pytest.skip("no thread-block clusters on this device")
    monkeypatch.setenv("TENSORCONV_TUNE_CACHE", str(tmp_path / "tune.json"))
    lookup = tunecache.lookup
    monkeypatch.setattr(tunecache, "lookup", lambda key: ({"fused": True, "tile": list(tile)}
                                                          if key.startswith("pointwise_pair")
                                                          else lookup(key)))
    model = get_model("resnet20")
    tuckerize(model, uniform_ranks(model, 0.6, (1, 3, 32, 32)), decompose=False)
    engine, err = _engine_against_model(model, (2, 3, 32, 32), rng)
    layers = sum(isinstance(m, TuckerConv2d) for m in model.modules())
    assert sum("pointwise pair" in s.label for s in engine.plan.steps) == layers - 1
    assert err < 1e-4


@pytest.mark.parametrize("tile", [(16, 1, False), (8, 2, True)], ids=str)
def test_engine_folds_projection_shortcuts_where_the_cache_says_so(rng, tile, tmp_path,
                                                                   monkeypatch):
    """Forced "pair" and "shortcut_fold" verdicts: each 1x1 projection shortcut of a Tucker
    ResNet-20 runs inside the pair that adds it (one launch fewer each); the result
    matches the model."""
    from tensorconv import backend, tunecache
    from tensorconv.compress import tuckerize, uniform_ranks
    from tensorconv.nn import layers as L

    if tile[1] > 1 and backend.device_facts().compute_capability < (9, 0):
        pytest.skip("no thread-block clusters on this device")
    monkeypatch.setenv("TENSORCONV_TUNE_CACHE", str(tmp_path / "tune.json"))
    lookup = tunecache.lookup
    forced = {"pointwise_pair": {"fused": True, "tile": [16, 1]},
              "shortcut_fold": {"fused": True, "tile": list(tile)}}
    monkeypatch.setattr(tunecache, "lookup", lambda key: forced.get(key.split("|")[0], lookup(key)))
    model = get_model("resnet20")
    tuckerize(model, uniform_ranks(model, 0.6, (1, 3, 32, 32)), decompose=False)
    engine, err = _engine_against_model(model, (2, 3, 32, 32), rng)
    shortcuts = sum(isinstance(m, L.Sequential) and isinstance(m[0], L.Conv2d)
                    and m[0].kernel_size == (1, 1) for m in model.modules())
    assert shortcuts > 0
    assert sum("+ shortcut" in s.label for s in engine.plan.steps) == shortcuts
    assert err < 1e-4


def test_tuned_engine_sends_dense_convs_to_the_faster_kernel(rng, tmp_path, monkeypatch):
    """A batch-1 dense ResNet-20, tuned: each 3x3 convolution the core kernels take is timed
    on the fastest of them and on the implicit GEMM; at batch 1 the core kernels are known
    to win some (the implicit GEMM's 64x64 tiles leave most of the GPU idle), and those
    layers run on them with the BN bias, residual and ReLU fused; the head is one launch."""
    model = get_model("resnet20", in_channels=1)
    verdicts, labels = _tuned(model, (1, 1, 32, 32), rng, tmp_path, monkeypatch)
    core = verdicts["core_path"]
    assert core and any(v["fused"] for v in core)
    routed = sum(any(v in lb for v in ("cluster", "tf32x3", "winograd")) for lb in labels)
    assert routed >= sum(v["fused"] for v in core)        # a verdict may cover many layers
    assert [v["fused"] for v in verdicts["head"]] == [True]
    assert labels[-1].startswith("gap + linear")


@pytest.mark.parametrize("tile", [4, 16], ids=str)
def test_engine_runs_tucker_tails_where_the_cache_says_so(rng, tile, tmp_path, monkeypatch):
    """Forced "pair" and "tail" verdicts: every Tucker layer's core runs in one launch with
    its last 1x1 and the next layer's first (the last layer's with its own 1x1 only); the
    result matches the model."""
    from tensorconv import tunecache
    from tensorconv.compress import tuckerize, uniform_ranks
    from tensorconv.nn.tucker import TuckerConv2d

    monkeypatch.setenv("TENSORCONV_TUNE_CACHE", str(tmp_path / "tune.json"))
    lookup = tunecache.lookup
    forced = {"pointwise_pair": {"fused": True, "tile": [16, 1]},
              "tucker_tail": {"fused": True, "tile": [tile]}}
    monkeypatch.setattr(tunecache, "lookup", lambda key: forced.get(key.split("|")[0], lookup(key)))
    model = get_model("resnet20")
    tuckerize(model, uniform_ranks(model, 0.6, (1, 3, 32, 32)), decompose=False)
    engine, err = _engine_against_model(model, (2, 3, 32, 32), rng)
    labels = [s.label for s in engine.plan.steps]
    layers = sum(isinstance(m, TuckerConv2d) for m in model.modules())
    assert sum("tucker tail" in lb for lb in labels) == layers
    assert sum(lb.count("->") == 1 for lb in labels if "tucker tail" in lb) == 1  # the last
    assert not any("pointwise pair" in lb or " core " in lb for lb in labels)
    assert err < 1e-4


def test_a_lone_conv_like_layer_is_a_model_and_its_table_entry_is_timed(rng, tmp_path,
                                                                          monkeypatch):
    """A Tucker layer (or a plain conv) is planned on its own like any model, matching its
    forward; ``layer_latency`` times it through the tuned engine, leaving the verdicts."""
    from tensorconv.compress.performance import layer_latency
    from tensorconv.compress.ranks import LayerSpec
    from tensorconv.nn.layers import Conv2d
    from tensorconv.nn.tucker import TuckerConv2d

    for layer in (TuckerConv2d(24, 40, 3, (11, 13), stride=2, padding=1, rng=rng),
                  Conv2d(24, 40, 3, 1, 1, bias=True, rng=rng)):
        engine, err = _engine_against_model(layer, (2, 24, 15, 17), rng)
        assert engine.launches >= 1 and err < 1e-5
    monkeypatch.setenv("TENSORCONV_TUNE_CACHE", str(tmp_path / "tune.json"))
    spec = LayerSpec("t", 24, 40, 3, 3, 15, 17, 8, 9, 2, 1)
    assert layer_latency(spec) > 0 and layer_latency(spec, (11, 13)) > 0
    # chained: with the next layer's first 1x1 after it, without its own first 1x1's launch
    assert layer_latency(spec, (11, 13), chained=True) > 0
    kinds = {k.split("|")[0] for k in json.loads((tmp_path / "tune.json").read_text())}
    assert {"core_path", "core_choice"} <= kinds    # the dense path and the Tucker core, tuned


def small_imagenet_resnet():
    """ResNet-18's ImageNet stem (7x7 conv to 64 channels, 3x3 max pool) and head, with one
    narrow block per stage: what a stem or head test needs, at a fraction of the tuning."""
    from tensorconv.nn.models.resnet import BasicBlock, ResNet

    return ResNet(BasicBlock, [1, 1], [64, 24], "imagenet", num_classes=100)


def test_tuned_engine_times_the_fused_stem(rng, tmp_path, monkeypatch):
    """An ImageNet stem, tuned: its conv + max pool timed on every fitting tile of the fused
    kernel and as its two planned launches; one launch is known to win (13 against 19 µs
    on the H100 at 224x224), the winner runs and an untuned engine reuses it."""
    from tensorconv.ops import conv_maxpool

    verdicts, labels = _tuned(small_imagenet_resnet(), (1, 3, 96, 96), rng, tmp_path,
                              monkeypatch)
    (stem,) = verdicts["stem_pool"]
    assert conv_maxpool.Tile(*stem["tile"]) in conv_maxpool.TILES
    assert stem["fused"] and "max pool" in labels[0]


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("name,shape", [("resnet18_imagenet", (1, 3, 64, 64)),
                                        ("densenet121", (2, 3, 48, 40))], ids=str)
def test_engine_fuses_the_stem_where_the_cache_says_so(rng, name, shape, fused, tmp_path,
                                                       monkeypatch):
    """Forced "stem_pool" verdicts: the stem's conv, BN, ReLU and max pool run as one launch
    (or as the conv and the pool); the result matches the model either way."""
    from tensorconv import tunecache

    monkeypatch.setenv("TENSORCONV_TUNE_CACHE", str(tmp_path / "tune.json"))
    lookup = tunecache.lookup
    monkeypatch.setattr(tunecache, "lookup", lambda key: ({"fused": fused, "tile": [4, 8, 16]}
                                                      if key.startswith("stem_pool")
                                                      else lookup(key)))
    engine, err = _engine_against_model(get_model(name), shape, rng)
    stems = [s.label for s in engine.plan.steps if "max pool" in s.label]
    assert stems == ([f"conv (64, 3, 7, 7) + max pool (3, 3) on {shape} "
                      f"Tile(th=4, tw=8, nb=16)"] if fused else [])
    assert sum("pool (3, 3) max" in s.label for s in engine.plan.steps) == (not fused)
    assert err < 1e-4


@pytest.mark.parametrize("blocks,tune", [(False, False), (True, False), (True, True)])
def test_engine_runs_pruned_models(rng, tmp_path, monkeypatch, blocks, tune):
    """A ResNet-20 pruned 8x, its convolutions turned into SparseConv2d layers (dense blocks
    at two thresholds and a CSR remainder), runs through the engine on the sparse kernels
    (untuned: every layer; tuned: each layer's fastest layout, or the dense kernel) and
    matches the model; the tuned choices are stored, one per layer."""
    from tensorconv.compress import prune
    from tensorconv.compress.sparse import sparsify
    from tensorconv.ops import sparse_conv, sparse_unrolled

    monkeypatch.setenv("TENSORCONV_TUNE_CACHE", str(tmp_path / "tune.json"))
    model = get_model("resnet20", in_channels=1)
    masks = prune.magnitude_masks(model, 8.0)
    prune.apply_masks(model, masks)
    sparsify(model, blocks=blocks, t2=(4, 8), b1=4, b2=4)
    x, ref = _input_and_reference(model, (2, 1, 32, 32), rng)
    unrolled = []    # the unrolled remainder's launches: a tuned plan times it
    run = sparse_unrolled.run
    monkeypatch.setattr(sparse_unrolled, "run", lambda *a, **k: unrolled.append(1) or run(*a, **k))
    engine = InferenceEngine(model, (2, 1, 32, 32), tune=tune)
    assert rel_err(engine(x).get(), ref) < 1e-4
    sparse_steps = sum(s.label.startswith("sparse conv") for s in engine.plan.steps)
    if tune:
        stored = json.loads((tmp_path / "tune.json").read_text())
        verdicts = [v for k, v in stored.items() if k.startswith("sparse_conv|")]
        assert len(verdicts) == len(masks)
        assert sparse_steps == sum(v["fused"] for v in verdicts)
        # each verdict names its layout and the remainder's kernel, and the steps run them
        names = set(sparse_conv.instantiations())
        assert all(v["tile"][0] in (0, 1) and (v["tile"][1].split(" (")[0] in names or
                                               v["tile"][1].startswith("sparse_unrolled"))
                   for v in verdicts)
        assert unrolled
        ran = [s.label.rsplit(" on ", 1)[1] for s in engine.plan.steps
               if s.label.startswith("sparse conv")]
        assert sorted(ran) == sorted(v["tile"][1] for v in verdicts if v["fused"])
    else:
        assert sparse_steps == len(masks)


def test_a_plan_under_tf32_runs_pruned_layers_on_the_sparse_tensor_cores(rng, tmp_path,
                                                                         monkeypatch):
    """Verdicts naming a sparse-tensor-core tile (as a plan tuned under tf32 stores them
    where that tile is the fastest): every pruned layer of a ResNet-20 (3x3 at strides 1
    and 2, the strided 1x1 shortcuts) runs on ``sparse_pairs_tc`` in the engine's graph,
    and the output matches the model at tf32 accuracy."""
    from tensorconv import precision, tunecache
    from tensorconv.compress import prune
    from tensorconv.compress.sparse import sparsify
    from tensorconv.ops import sparse_conv
    from tensorconv.ops import sparse_pairs_tc as spt

    monkeypatch.setenv("TENSORCONV_TUNE_CACHE", str(tmp_path / "tune.json"))
    model = get_model("resnet20", in_channels=1)
    masks = prune.magnitude_masks(model, 8.0)
    prune.apply_masks(model, masks)
    sparsify(model, blocks=False, t2=(4,))
    shape = (2, 1, 32, 32)
    x, ref = _input_and_reference(model, shape, rng)
    name = sparse_conv.choice_name(spt.Tile(2, 4, 2, 2), None)
    lookup = tunecache.lookup
    monkeypatch.setattr(tunecache, "lookup", lambda key: (
        {"fused": True, "tile": [0, name]} if key.startswith("sparse_conv|") else lookup(key)))
    with precision.using("tf32"):
        engine = InferenceEngine(model, shape)
        got = engine(x).get()
    labels = [s.label for s in engine.plan.steps if s.label.startswith("sparse conv")]
    assert len(labels) == len(masks) and all(lb.endswith(f" on {name}") for lb in labels)
    assert rel_err(got, ref) < 3e-3


def test_a_tuned_plan_weighs_unrolled_layers_again_in_the_whole_plan(rng, tmp_path,
                                                                      monkeypatch):
    """Every layer whose tuned choice runs code unrolled for its weights (every such choice
    here: the floor lowered to 1) gets two fallbacks, the rules' tile on its layout and the
    dense convolution, each weighed as the whole plan timed both ways, one stored verdict
    each; with every verdict a fallback's, an untuned engine runs those layers dense (the
    last fallback) and still matches the model."""
    from tensorconv import tunecache
    from tensorconv.compress import prune
    from tensorconv.compress.sparse import sparsify
    from tensorconv.engine import sparse as sparse_planner

    monkeypatch.setenv("TENSORCONV_TUNE_CACHE", str(tmp_path / "tune.json"))
    monkeypatch.setattr(sparse_planner, "IN_PLAN_FMAS", 1)
    model = get_model("resnet20", in_channels=1)
    prune.apply_masks(model, prune.magnitude_masks(model, 8.0))
    sparsify(model, blocks=False, t2=(4,))
    shape = (2, 1, 32, 32)
    x, ref = _input_and_reference(model, shape, rng)
    engine = InferenceEngine(model, shape, tune=True)
    assert rel_err(engine(x).get(), ref) < 1e-4
    stored = json.loads((tmp_path / "tune.json").read_text())
    chosen = [v["tile"][1] for k, v in stored.items() if k.startswith("sparse_conv|")
              and v["fused"] and v["tile"][1].startswith("sparse_unrolled")]
    weighed = {k: v for k, v in stored.items() if k.startswith("fallback|")}
    assert chosen and len(weighed) == 2 * len(chosen)
    assert all(v["fused_us"] > 0 and v["parts_us"] > 0 for v in weighed.values())
    fused = sum(v["fused"] for k, v in stored.items() if k.startswith("sparse_conv|"))
    lookup = tunecache.lookup
    monkeypatch.setattr(tunecache, "lookup", lambda key: (
        {"fused": False, "tile": []} if key.startswith("fallback|") else lookup(key)))
    untuned = InferenceEngine(model, shape)
    assert not any(" on sparse_unrolled" in s.label for s in untuned.plan.steps)
    assert sum(s.label.startswith("sparse conv") for s in untuned.plan.steps) == \
        fused - len(chosen)
    assert len(untuned.plan.steps) == len(engine.plan.steps)
    assert rel_err(untuned(x).get(), ref) < 1e-4


@pytest.mark.parametrize("name,pointwise", [("vgg16", "scc"), ("resnet18", "scc"),
                                            ("mobilenet_v1", "gpw")])
def test_engine_runs_depthwise_separable_models(rng, name, pointwise):
    """DSXplore's DW + SCC (and DW + GPW) networks through the engine match the model."""
    from tensorconv.compress.separable import separable

    model = separable(get_model(name, in_channels=1), pointwise, cg=2, co=0.5)
    engine, err = _engine_against_model(model, (2, 1, 32, 32), rng)
    assert err < 1e-4
