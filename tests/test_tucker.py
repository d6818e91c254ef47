"""Tucker format of conv kernels, the TDC tile model, and the tune cache (CPU)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tensorconv import tunecache
from tensorconv.checks import conv_geometry
from tensorconv.decomp import tucker
from tensorconv.ops import tucker_core_cluster as cluster
from tensorconv.ops import tucker_core_tdc as tdc
from tensorconv.ops import tucker_core_tf32x3 as tf32x3
from tensorconv.tuning import tdc_model, tile_fit
from tests.helpers import device_facts, gradcheck_module, rel_err


def test_full_rank_hosvd_is_exact(rng):
    w = rng.standard_normal((8, 6, 3, 3))
    f = tucker.hosvd(w, (6, 8))
    assert f.ranks == (6, 8) and f.core.shape == (8, 6, 3, 3)
    assert rel_err(tucker.reconstruct(f), w) < 1e-12


def test_projection_is_idempotent_and_low_rank(rng):
    w = rng.standard_normal((10, 7, 3, 3))
    p = tucker.hosvd_project(w, (3, 4))
    assert rel_err(tucker.hosvd_project(p, (3, 4)), p) < 1e-10
    assert np.linalg.matrix_rank(p.reshape(10, -1)) == 4
    assert np.linalg.matrix_rank(p.transpose(1, 0, 2, 3).reshape(7, -1)) == 3


def test_hooi_is_no_worse_than_hosvd(rng):
    w = rng.standard_normal((12, 9, 3, 3))
    e_hosvd = rel_err(tucker.hosvd_project(w, (4, 5)), w)
    f = tucker.partial_tucker(w, (4, 5))
    assert f.u_out.shape == (12, 5) and f.u_in.shape == (9, 4) and f.core.shape == (5, 4, 3, 3)
    assert rel_err(tucker.reconstruct(f), w) <= e_hosvd + 1e-9


def test_rank_errors(rng):
    w = rng.standard_normal((8, 6, 3, 3))
    with pytest.raises(ValueError, match="D1=7 must be in 1..6"):
        tucker.hosvd(w, (7, 2))
    with pytest.raises(ValueError, match="D2=9 must be in 1..8"):
        tucker.partial_tucker(w, (2, 9))
    with pytest.raises(ValueError, match="w must be 4-D"):
        tucker.hosvd(w[0], (2, 2))


def test_reduction_ratios():
    # C = N = 64, 3x3, 56x56, D1 = D2 = 32: hand-computed
    reduction = tucker.param_reduction(64, 64, 3, 3, 32, 32)
    assert reduction == pytest.approx(36864 / (2048 + 9216 + 2048))
    macs_tucker = 56 * 56 * 64 * 32 + 56 * 56 * 32 * (9 * 32 + 64)
    assert tucker.flops_reduction(64, 64, 3, 3, 32, 32, 56, 56, 56, 56) == pytest.approx(
        56 * 56 * 9 * 64 * 64 / macs_tucker)


FACTS = device_facts()


def test_candidate_tiles_fit_shared_memory():
    geom = conv_geometry((1, 64, 28, 28), (32, 64, 3, 3), padding=1)
    tiles = tdc.candidates(geom, device_facts(8 * 1024))
    assert tiles and all(t.smem_bytes(geom) <= 8 * 1024 and t.th * t.tw <= 32 for t in tiles)
    assert tdc.Tile(8, 4, 64).smem_bytes(geom) == 4 * 64 * 10 * 6


def test_model_occupancy_and_volume():
    assert tdc.occupancy(64, 32, 0, FACTS) == 1.0           # 32 blocks x 64 threads
    assert tdc.occupancy(256, 128, 0, FACTS) == 0.25         # registers bind: 2 blocks
    geom = conv_geometry((1, 32, 14, 14), (32, 32, 3, 3), padding=1)
    t = tdc.Tile(7, 7, 32)
    # eqs. 16-19 with 4 tiles: kernel 4*32*32*9, input 4*32*9*9, output 14*14*32*1
    assert tdc.memory_volume(geom, t) == 4 * 32 * 9 * 9 + 14 * 14 * 32 + 4 * 32 * 32 * 9


def test_model_ranks_every_candidate_and_prefers_full_waves():
    geom = conv_geometry((1, 64, 28, 28), (32, 64, 3, 3), padding=1)
    ranked = tdc_model.rank(geom, lambda t: 40, FACTS)
    assert len(ranked) == len(tdc.candidates(geom, FACTS))
    best = ranked[0]
    assert best.waves == min(p.waves for p in ranked[:max(1, round(len(ranked) * 0.05))])


def test_tune_cache_roundtrip_and_corrupt_file(tmp_path, monkeypatch):
    path = tmp_path / "tune.json"
    monkeypatch.setenv("TENSORCONV_TUNE_CACHE", str(path))
    key = tunecache.make_key("test", "direct_conv.cu", (1, 2, 3))
    assert tunecache.lookup(key) is None
    tunecache.store(key, {"tile": [1, 2]})
    assert tunecache.lookup(key) == {"tile": [1, 2]}
    path.write_text("{ not json")
    assert tunecache.lookup(key) is None            # corrupt: ignored, not fatal
    tunecache.store(key, 5)
    assert json.loads(path.read_text()) == {key: 5}   # rebuilt
    path.write_text(json.dumps({key: 66}))            # another process wrote it
    assert tunecache.lookup(key) == 66
    path.write_text("[1, 2]")
    assert tunecache.lookup(key) is None


def test_decoded_decisions_belong_to_their_cache_file(tmp_path, monkeypatch):
    key = tunecache.make_key("test", "direct_conv.cu", "p")
    monkeypatch.setenv("TENSORCONV_TUNE_CACHE", str(tmp_path / "a.json"))
    tunecache.store(key, {"tile": 1})
    assert tunecache.known(key, lambda v: v["tile"]) == 1
    monkeypatch.setenv("TENSORCONV_TUNE_CACHE", str(tmp_path / "b.json"))
    assert tunecache.known(key, lambda v: v["tile"]) is None   # another file: none of a's
    monkeypatch.setenv("TENSORCONV_TUNE_CACHE", str(tmp_path / "a.json"))
    tunecache.store(key, {"tile": 2})
    assert tunecache.known(key, lambda v: v["tile"]) == 2      # a new value is read anew


def test_keys_name_every_kernel_a_decision_compares():
    one = tunecache.make_key("k", ("pointwise_pair.cu",), "p")
    both = tunecache.make_key("k", ("pointwise_pair.cu", "direct_conv.cu"), "p")
    assert one != both
    assert tunecache.make_key("k", ("direct_conv.cu", "pointwise_pair.cu"), "p") == both
    # a header a file includes is part of its version
    assert tunecache.source_version("tucker_core_cluster.cu") != tunecache.source_version(
        "tucker_core_tdc.cu")


def test_calibration_fit_recovers_known_coefficients():
    geoms = [conv_geometry((1, c, h, h), (n, c, 3, 3), 1, 1)
             for c, n, h in ((32, 32, 14), (64, 32, 28), (96, 64, 7))]
    truth = (0.2, 0.04, 0.15, 0.3, 5.0, 0.02, 1.1)
    samples = []
    for g in geoms:
        for t in tdc.candidates(g, FACTS)[::7]:
            feats = tdc.calibrated_features(g, t, 40, FACTS)
            samples.append((g, t, 40, sum(a * f for a, f in zip(truth, feats))))
    assert np.allclose(tdc_model.fit_calibration(samples, FACTS), truth, rtol=1e-6)
    with pytest.raises(ValueError, match="method"):
        tdc_model.choose_tile.__wrapped__(geoms[0], method="magic")


# ---- the TuckerConv2d layer and tuckerize
from tensorconv.autograd import Tensor  # noqa: E402
from tensorconv.compress import tucker_candidates, tuckerize, uniform_ranks  # noqa: E402
from tensorconv.nn import Conv2d, count_flops_params, get_model  # noqa: E402
from tensorconv.nn.tucker import TuckerConv2d  # noqa: E402


def test_full_rank_tucker_layer_reproduces_the_conv(rng):
    conv = Conv2d(6, 8, 3, stride=2, padding=1, rng=rng)
    conv.bias.data = rng.standard_normal(8).astype(np.float32)
    x = Tensor(rng.standard_normal((2, 6, 9, 7)).astype(np.float32))
    for method in ("hooi", "hosvd"):
        layer = TuckerConv2d.from_conv(conv, (6, 8), method=method)
        assert rel_err(layer(x).data, conv(x).data) < 1e-5
    assert layer.macs == layer.first.macs + layer.core.macs + layer.last.macs


def test_tucker_layer_gradcheck(rng):
    layer = TuckerConv2d(4, 5, 3, (2, 3), stride=1, padding=1, bias=True, rng=rng)
    gradcheck_module(layer, (2, 4, 5, 5), rng)


def test_tuckerize_budget_and_errors():
    model = get_model("resnet20", in_channels=1)
    assert "stem.0" not in tucker_candidates(model)  # one input channel: left dense
    base = count_flops_params(model, (1, 1, 32, 32))["macs"]
    ranks = uniform_ranks(model, 0.6, (1, 1, 32, 32))
    tuckerize(model, ranks, decompose=False)
    after = count_flops_params(model, (1, 1, 32, 32))["macs"]
    assert 0.55 < 1 - after / base < 0.65
    assert isinstance(model.stages[0][0].conv1, TuckerConv2d)
    with pytest.raises(ValueError, match="no dense R x S convolution"):
        tuckerize(get_model("resnet20"), {"stages.9.conv1": (4, 4)})
    with pytest.raises(ValueError, match="ranks"):
        TuckerConv2d(8, 8, 3, (9, 2))
    with pytest.raises(ValueError, match="reduction"):
        uniform_ranks(get_model("resnet20"), 1.5, (1, 3, 32, 32))
    with pytest.raises(ValueError, match=r"out of reach .*at most 4\d"):  # 3x3 convs alone
        uniform_ranks(get_model("resnet50"), 0.6, (1, 3, 64, 64))
    with pytest.raises(ValueError, match="scope"):
        uniform_ranks(get_model("resnet20"), 0.5, (1, 3, 32, 32), scope="convs")


def test_uniform_ranks_over_the_decomposed_layers_only():
    """scope="layers" meets the budget on the candidate convolutions' MACs (Algorithm 1's
    B), counted as the rank selection counts them; over the model it cuts less there."""
    from tensorconv.compress.ranks import layer_specs

    model = get_model("resnet18_imagenet")
    specs = layer_specs(model, (1, 3, 64, 64))
    dense = sum(s.dense_macs for s in specs)

    def cut(ranks):
        return 1 - sum(s.tucker_macs(*ranks[s.name]) for s in specs) / dense

    layers = uniform_ranks(model, 0.7, (1, 3, 64, 64), scope="layers")
    whole = uniform_ranks(model, 0.7, (1, 3, 64, 64))
    assert 0.69 < cut(layers) < 0.71 and cut(whole) > cut(layers) + 0.02


def test_calibration_reproduces_from_the_committed_tile_times():
    """CALIBRATION_H100 is what fit_calibration gives on two committed tile-time runs, and its
    choices land within 10% of each run's best tile (geomean), the held-out third run included,
    far closer than the paper's rule."""
    import math
    from pathlib import Path

    results = Path(__file__).resolve().parent.parent / "results"
    runs = [tdc_model.load_tile_samples(results / name) for name in
            ("tdc_fig6_tiles.csv", "tdc_fig6_tiles_run2.csv", "tdc_fig6_tiles_run3.csv")]
    assert all(len(samples) > 2000 for samples in runs)
    coef = tdc_model.fit_calibration(runs[0] + runs[1], FACTS)  # run 3 is held out
    assert np.allclose(coef, tdc.CALIBRATION_H100, rtol=2e-3, atol=1e-5)
    for samples in runs:
        by_case = {}
        for g, t, r, us in samples:
            by_case.setdefault(g, []).append((t, r, us))
        ratios = []
        for g, rows in by_case.items():
            est = lambda row: sum(a * f for a, f in zip(coef, tdc.calibrated_features(  # noqa: E731
                g, row[0], row[1], FACTS)))
            pick = min(rows, key=est)
            ratios.append(pick[2] / min(row[2] for row in rows))
        assert math.exp(sum(map(math.log, ratios)) / len(ratios)) < 1.10


def test_cluster_candidates_are_valid_and_diverse():
    geom = conv_geometry((1, 64, 56, 56), (64, 64, 3, 3), 1, 1)
    tile = cluster.Tile(4, 4, 32, 4, 4, 8, 2)
    # stage: 8 ch x 6 rows x pitch 20 (+ 8 x 9 x 32 weights), twice (32 channels per split); then
    # the cluster's 2 slots of half the 32 x 4 x 16 sum tile and the mbarrier (2 floats);
    # ck = 32 covers the split: one stage
    slots = 2 * 32 * 4 * 16 // 2 + 2
    assert tile.share == 1024
    assert tile.smem_bytes(geom) == 4 * (2 * (8 * 6 * 20 + 8 * 9 * 32) + slots)
    assert cluster.Tile(4, 4, 32, 4, 4, 32, 2).smem_bytes(geom) == 4 * (
        32 * 6 * 20 + 32 * 9 * 32 + slots)
    assert cluster.Tile(4, 4, 32, 4, 4, 32, 1).smem_bytes(geom) == 4 * (
        2 * (32 * 6 * 20 + 32 * 9 * 32))
    assert tile.threads == 8 * 4 * 4 and tile.grid(geom) == (14 * 4, 2, 2)
    small = device_facts(48 * 1024)
    every = cluster.candidates(geom, small)
    assert all(t.threads <= cluster.MAX_THREADS and t.smem_bytes(geom) <= 48 * 1024
               for t in every)
    picked = cluster.ranked(geom, small, limit=40)
    assert len(picked) == 40 and len(set(picked)) == 40 and set(picked) <= set(every)
    assert len({(t.nt, t.pt, t.splits) for t in picked}) >= 12   # every family gets a look
    est = [cluster.estimate(geom, t, 132) for t in picked]
    assert est == sorted(est) and est[0] == min(cluster.estimate(geom, t, 132) for t in every)
    assert cluster.default_tile(geom, small) == picked[0]
    assert all(t.splits == 1 for t in cluster.candidates(geom, device_facts(
        compute_capability=(8, 0))))                              # no clusters before sm_90
    assert cluster.supported(conv_geometry((1, 8, 9, 9), (8, 8, 9, 9), 1, 0))
    assert cluster.supported(conv_geometry((1, 8, 9, 9), (8, 8, 3, 3), 3, 0))
    assert cluster.supported(geom) is None


@pytest.mark.parametrize("kernel,fit_file,min_samples,bound", [
    (cluster, "tdc_fig6_tiles_run4.csv", 1000, 1.12),
    (tf32x3, "tdc_fig6_tiles_run6.csv", 800, 1.10),
], ids=["cluster", "tf32x3"])
def test_cluster_and_tf32x3_calibrations_reproduce(kernel, fit_file, min_samples, bound):
    """Each calibrated estimate's CALIBRATION_H100 is what the fit gives on the committed
    tile times it was fitted on, and its pick among the timed tiles lands within ``bound``
    of the best (geomean over the 18 shapes), in-sample and on the held-out tile times of
    the push-reduction kernels (results/tdc_fig6_tiles_run8.csv)."""
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "results" / fit_file
    samples = tile_fit.load_samples(path, kernel)
    assert len(samples) > min_samples
    coef = tile_fit.fit(kernel, samples, 132)
    assert np.allclose(coef, kernel.CALIBRATION_H100, rtol=1e-4, atol=1e-7)
    assert tile_fit.pick_ratio(kernel, samples, 132) < bound
    later = tile_fit.load_samples(path.with_name("tdc_fig6_tiles_run8.csv"), kernel)
    assert tile_fit.pick_ratio(kernel, later, 132) < bound


def test_tf32x3_packing_splits_and_orders_the_weights(rng):
    w = rng.standard_normal((13, 11, 3, 2)).astype(np.float32) * 10.0 ** rng.uniform(-4, 4)
    geom = conv_geometry((1, 11, 9, 9), w.shape, 1, 0)
    p = tf32x3.pack_weights(w)
    assert p.shape == tf32x3.packed_shape(geom) == (2, 2, 6, 32, 4)
    bits = p.view(np.uint32)
    assert not (bits & 0x1FFF).any()                       # every part is a tf32 value
    full = np.zeros((16, 16, 3, 2), np.float32)
    full[:13, :11] = w
    for n8, c8, rs, lane in np.ndindex(p.shape[:4]):
        g, t = divmod(lane, 4)
        r, s = divmod(rs, 2)
        for half in range(2):
            want = full[8 * n8 + g, 8 * c8 + t + 4 * half, r, s]
            big, small = p[n8, c8, rs, lane, half], p[n8, c8, rs, lane, 2 + half]
            assert abs(big + small - want) <= 2.0 ** -21 * abs(want)
            assert abs(small) <= 2.0 ** -10 * abs(want)


def test_tf32x3_candidates_fit_and_rank_every_family():
    facts = device_facts(100 * 1024)
    for shape in [(1, 64, 224, 224), (1, 32, 7, 7), (2, 5, 20, 3)]:
        geom = conv_geometry(shape, (40, shape[1], 3, 3), 1, 1)
        tiles = tf32x3.candidates(geom, facts)
        assert tiles and all(t.smem_bytes(geom) <= 100 * 1024 for t in tiles)
        assert all(t.pixels % t.tw == 0 and t.warps_m * t.warps_n <= 8 for t in tiles)
        ranked = tf32x3.ranked(geom, facts, limit=32)
        est = [tf32x3.estimate(geom, t, 132) for t in ranked]
        assert est == sorted(est) and len(set(ranked)) == len(ranked)
        no_clusters = device_facts(100 * 1024, (8, 0))
        assert all(t.splits == 1 for t in tf32x3.candidates(geom, no_clusters))
        assert all(t.splits <= -(-geom.c // t.ck) for t in tiles)


def test_fast_div_constants_divide_exactly(rng):
    """cuda.fast_div packs the multiply-shift constants the kernels' FastDiv::of unpacks;
    (umulhi(n, m) + n) >> l must be n // d for every dividend below 2^31."""
    from tensorconv.cuda import fast_div

    divisors = [1, 2, 3, 7, 8, 9, 31, 32, 33, 1000, 4096, 65535]
    divisors += list(rng.integers(1, 1 << 16, 200))
    for d in map(int, divisors):
        packed = int(fast_div(d))
        m, lg, dd = packed & 0xFFFFFFFF, (packed >> 32) & 0xFF, packed >> 40
        assert dd == d
        for n in [0, 1, d - 1, d, d + 1, (1 << 31) - 1] + list(map(int, rng.integers(0, 1 << 31,
                                                                                     50))):
            assert ((n * m >> 32) + n) >> lg == n // d, (d, n)
    with pytest.raises(ValueError, match="fast_div"):
        fast_div(1 << 16)
