"""What the calibrated tile estimates share: tile-time samples, the fit, the pick ratio.

:mod:`tensorconv.tuning.cluster_model` and :mod:`tensorconv.tuning.tf32x3_model`
each define cost terms (``features``) of a kernel's tile; their weights are the
non-negative least-squares fit, on relative error, to tile times that
``tdc_fig6 --tiles`` measured.
"""

from __future__ import annotations

import numpy as np

from tensorconv.checks import conv_geometry


def load_tile_samples(path, prefix: str, tile_type) -> list:
    """``(geom, tile, µs)`` of the rows of a ``tdc_fig6 --tiles`` CSV whose variant
    starts with ``prefix`` (e.g. ``"cluster:"``), the tile's fields joined by ``x``."""
    from tensorconv.results import read_csv

    samples = []
    for row in read_csv(path):
        if not row["variant"].startswith(prefix):
            continue
        c, n, h, w = (int(v) for v in row["case"].split("_"))
        tile = tile_type(*(int(v) for v in row["variant"][len(prefix):].split("x")))
        samples.append((conv_geometry((1, c, h, w), (n, c, 3, 3), 1, 1), tile, row["value"]))
    return samples


def fit(features, samples, sm_count: int) -> tuple:
    """Non-negative weights of ``features(geom, tile, sm_count)`` minimising the
    relative error of their weighted sum on ``samples``."""
    from scipy.optimize import nnls

    a = np.array([features(g, t, sm_count) for g, t, _ in samples])
    y = np.array([us for _, _, us in samples])
    coef, _ = nnls(a / y[:, None], np.ones(len(y)))
    return tuple(float(c) for c in coef)


def pick_ratio(estimate, samples) -> float:
    """Geomean over shapes of (time of the tile ``estimate(geom, tile)`` ranks first)
    / (best time), among the timed tiles of ``samples``."""
    by_shape: dict = {}
    for g, t, us in samples:
        by_shape.setdefault(g, []).append((estimate(g, t), us))
    ratios = [min(rows)[1] / min(us for _, us in rows) for rows in by_shape.values()]
    return float(np.exp(np.mean(np.log(ratios))))
