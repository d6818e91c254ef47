"""Fitting a kernel's tile estimate to measured tile times: samples, the fit, the pick ratio.

:mod:`tensorconv.ops.tucker_core_cluster` and :mod:`tensorconv.ops.tucker_core_tf32x3`
each define cost terms (``features``) of their tiles; the weights beside them
(``CALIBRATION_H100``) are the non-negative least-squares fit, on relative error, to tile
times that ``tdc_fig6 --tiles`` measured.  This module refits and judges them.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import nnls

from tensorconv.checks import conv_geometry
from tensorconv.results import read_csv


def load_samples(path, kernel) -> list:
    """``(geom, tile, µs)`` of the rows of a ``tdc_fig6 --tiles`` CSV timing ``kernel``'s tiles
    (an ops module: its variant prefix, e.g. ``"cluster:"``, and its ``Tile``), the tile's
    fields joined by ``x``."""
    prefix = PREFIXES[kernel.FILE]
    samples = []
    for row in read_csv(path):
        if not row["variant"].startswith(prefix):
            continue
        c, n, h, w = (int(v) for v in row["case"].split("_"))
        tile = kernel.Tile(*(int(v) for v in row["variant"][len(prefix):].split("x")))
        samples.append((conv_geometry((1, c, h, w), (n, c, 3, 3), 1, 1), tile, row["value"]))
    return samples


PREFIXES = {"tucker_core_cluster.cu": "cluster:", "tucker_core_tf32x3.cu": "tf32x3:"}


def fit(kernel, samples, sm_count: int) -> tuple:
    """Non-negative weights of ``kernel.features(geom, tile, sm_count)`` minimising the
    relative error of their weighted sum on ``samples``."""
    a = np.array([kernel.features(g, t, sm_count) for g, t, _ in samples])
    y = np.array([us for _, _, us in samples])
    coef, _ = nnls(a / y[:, None], np.ones(len(y)))
    return tuple(float(c) for c in coef)


def pick_ratio(kernel, samples, sm_count: int, calibration=None) -> float:
    """Geomean over shapes of (time of the tile ``kernel``'s estimate ranks first) / (best
    time), among the timed tiles of ``samples`` (``calibration``: default the kernel's)."""
    calibration = kernel.CALIBRATION_H100 if calibration is None else calibration
    by_shape: dict = {}
    for g, t, us in samples:
        by_shape.setdefault(g, []).append((kernel.estimate(g, t, sm_count, calibration), us))
    ratios = [min(rows)[1] / min(us for _, us in rows) for rows in by_shape.values()]
    return float(np.exp(np.mean(np.log(ratios))))
