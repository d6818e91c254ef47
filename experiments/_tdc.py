"""Shared measurement of one TDC core-convolution shape (figures 4 and 6)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from tensorconv import backend, bench, cuda, ops, reference, timing
from tensorconv.checks import conv_geometry
from tensorconv.ops import tucker_core_cluster as cluster
from tensorconv.ops import tucker_core_tdc as tdc
from tensorconv.ops import tucker_core_tf32x3 as tf32x3
from tensorconv.ops import winograd_conv as winograd
from tensorconv.results import ResultSet
from tensorconv.tuning import oracle, tdc_model

TOLERANCE = 1e-5  # relative error a kernel must meet to count as ours-best


def measure_core_shape(rs: ResultSet, case: str, c: int, n: int, h: int, w: int, *,
                       quick: bool, cudnn: bool = True, check: bool = True,
                       tile_rows: ResultSet | None = None) -> dict:
    """Time the core conv (C -> N, 3x3, pad 1, batch 1) every way; add rows; return µs by variant.

    ``tile_rows`` collects the time of every tile the oracle tried (with the
    kernel's registers), the data the analytic model is judged against.
    """
    import cupy as cp

    rng = np.random.default_rng(0)
    x_h = rng.standard_normal((1, c, h, w)).astype(np.float32)
    w_h = (rng.standard_normal((n, c, 3, 3)) / math.sqrt(9 * c)).astype(np.float32)
    x, wt = cp.asarray(x_h), cp.asarray(w_h)
    geom = conv_geometry(x.shape, wt.shape, 1, 1)
    out = cp.empty(geom.output_shape, cp.float32)
    w_crsn = tdc.pack_weights(wt)
    facts = backend.device_facts()
    reps = dict(repeat=10 if quick else 30)
    model_tile = tdc_model.choose_tile(geom)
    paper_tile = tdc_model.choose_tile(geom, method="paper")
    best_tile, tile_times = oracle.oracle_tile(x, wt, geom, repeat=5 if quick else 10,
                                               use_cache=False)
    cluster_default = cluster.default_tile(geom, facts)
    sms = facts.sm_count
    cluster_best, cluster_times = oracle.tune_cluster_tile(x, wt, geom, repeat=5 if quick else 10,
                                                           use_cache=False)
    tc_default = tf32x3.default_tile(geom, facts)
    tc_best, tc_times = oracle.tune_tf32x3_tile(x, wt, geom, repeat=5 if quick else 10,
                                                use_cache=False)
    w_packed = tf32x3.pack_weights(wt)
    wino_best, wino_times = oracle.tune_winograd_tile(x, wt, geom, repeat=5 if quick else 10,
                                                      use_cache=False)
    w_wino = winograd.pack_weights(wt)
    if tile_rows is not None:
        for t, us in tile_times.items():
            tile_rows.add(case, f"{t.th}x{t.tw}x{t.tc}", "time_us", us, "us",
                          note=f"regs {tdc.registers(geom, t)}")
        for t, us in cluster_times.items():
            tile_rows.add(case, "cluster:" + "x".join(str(v) for v in dataclasses.astuple(t)),
                          "time_us", us, "us", note=f"regs {_regs(cluster, geom, t)}"
                          f"; estimate {cluster.estimate(geom, t, sms):.2f} us")
        for t, us in tc_times.items():
            tile_rows.add(case, "tf32x3:" + "x".join(str(v) for v in dataclasses.astuple(t)),
                          "time_us", us, "us", note=f"regs {_regs(tf32x3, geom, t)}"
                          f"; estimate {tf32x3.estimate(geom, t, sms):.2f} us")
    runs = {
        "tdc-model": lambda: ops.core_conv2d(x, wt, 1, 1, variant="tdc", tile=model_tile,
                                                packed=w_crsn, out=out),
        "tdc-paper-model": lambda: ops.core_conv2d(x, wt, 1, 1, variant="tdc",
                                                      tile=paper_tile, packed=w_crsn, out=out),
        "tdc-oracle": lambda: ops.core_conv2d(x, wt, 1, 1, variant="tdc", tile=best_tile,
                                                 packed=w_crsn, out=out),
        "cluster-default": lambda: ops.core_conv2d(x, wt, 1, 1, variant="cluster",
                                                      tile=cluster_default, packed=w_crsn, out=out),
        "cluster-oracle": lambda: ops.core_conv2d(x, wt, 1, 1, variant="cluster",
                                                     tile=cluster_best, packed=w_crsn, out=out),
        "tf32x3-default": lambda: ops.core_conv2d(x, wt, 1, 1, variant="tf32x3",
                                                     tile=tc_default, packed=w_packed, out=out),
        "tf32x3-oracle": lambda: ops.core_conv2d(x, wt, 1, 1, variant="tf32x3",
                                                    tile=tc_best, packed=w_packed, out=out),
        "winograd-oracle": lambda: ops.core_conv2d(x, wt, 1, 1, variant="winograd",
                                                      tile=wino_best, packed=w_wino, out=out),
        "igemm": lambda: ops.conv2d(x, wt, None, 1, 1, out=out, algorithm="igemm"),
    }
    times, wrong = {}, set()
    ref = reference.conv2d(x_h.astype(np.float64), w_h.astype(np.float64),
                           padding=1) if check else None
    for name, run in runs.items():
        out.fill(np.nan)
        run()
        if check:
            err = float(np.linalg.norm(out.get() - ref) / np.linalg.norm(ref))
            rs.add(case, name, "rel_err", err, "1")
            if not err <= TOLERANCE:  # NaN too
                wrong.add(name)
        times[name] = timing.time_graph(run, **reps).median_us
    if cudnn and bench.torch_cudnn_available():
        for tf32 in (False, True):
            run = bench.cudnn_conv2d(x, wt, None, 1, 1, allow_tf32=tf32)
            times[f"cudnn-{'tf32' if tf32 else 'fp32'}"] = timing.time_graph(
                run, framework="torch", **reps).median_us
    mine = [v for v in ("tdc-oracle", "cluster-oracle", "tf32x3-oracle", "winograd-oracle", "igemm")
            if v not in wrong]
    picked = min(mine, key=times.get)
    times["ours-best"] = times[picked]
    notes = {"tdc-model": f"calibrated model, tile {model_tile}",
             "tdc-paper-model": f"the paper's rule, tile {paper_tile}",
             "tdc-oracle": f"tile {best_tile} of {len(tile_times)} timed",
             "cluster-default": f"estimate's tile {cluster_default}",
             "cluster-oracle": f"tile {cluster_best} of {len(cluster_times)} timed",
             "tf32x3-default": f"estimate's tile {tc_default}",
             "tf32x3-oracle": f"tile {tc_best} of {len(tc_times)} timed",
             "winograd-oracle": f"tile {wino_best} of {len(wino_times)} timed",
             "ours-best": f"picked {picked}" + (f"; not eligible, rel_err > {TOLERANCE}: "
                                                 f"{' '.join(sorted(wrong))}" if wrong else "")}
    for name, us in times.items():
        rs.add(case, name, "time_us", us, "us", note=notes.get(name, "graph replay median"))
    return times


def _regs(kernel, geom, tile) -> int:
    """Registers per thread of ``tile``'s compiled kernel."""
    return cuda.load(kernel.kernels(geom, tile)[0]).num_regs
