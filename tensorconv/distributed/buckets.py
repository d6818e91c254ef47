"""Gradient buckets: the parameters, last first, packed greedily into flat buffers of at most
``cap_bytes`` (a parameter larger than the cap gets a bucket of its own).

The backward pass finishes the last layers' gradients first, so the first bucket fills
early and its all-reduce overlaps the rest of the backward pass.  Every rank builds the
same buckets from the same parameter list, so they all send in one order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tensorconv.checks import check_int

DEFAULT_CAP_BYTES = 25 * 2**20        # PyTorch DDP's default bucket size


@dataclass(frozen=True)
class Bucket:
    """Parameters ``params`` (indices into the parameter list, in sending order) whose
    gradients lie at ``offsets`` (elements) in one flat buffer of ``size`` elements."""

    index: int
    params: tuple
    offsets: tuple
    size: int


def make_buckets(sizes, itemsize: int = 4, cap_bytes: int = DEFAULT_CAP_BYTES) -> list[Bucket]:
    """Buckets over parameters of ``sizes`` (elements each, in the model's order).

    Parameters
    ----------
    sizes : sequence of int
        Elements of each parameter, as ``Module.parameters()`` lists them.
    itemsize : int
        Bytes per gradient element (4: float32).
    cap_bytes : int
        The most bytes a bucket holds, unless one parameter alone is larger.

    Returns
    -------
    list of Bucket, covering every parameter once, the model's last parameter first.
    """
    sizes = [check_int(s, f"sizes[{i}]", minimum=1) for i, s in enumerate(sizes)]
    check_int(itemsize, "itemsize", minimum=1)
    check_int(cap_bytes, "cap_bytes", minimum=1)
    if not sizes:
        raise ValueError("sizes is empty: no parameters to bucket")
    out, params, offsets, used = [], [], [], 0
    for i in reversed(range(len(sizes))):
        if params and (used + sizes[i]) * itemsize > cap_bytes:
            out.append(Bucket(len(out), tuple(params), tuple(offsets), used))
            params, offsets, used = [], [], 0
        params.append(i)
        offsets.append(used)
        used += sizes[i]
    out.append(Bucket(len(out), tuple(params), tuple(offsets), used))
    return out


def bucket_of(buckets) -> np.ndarray:
    """For each parameter index, the index of its bucket."""
    n = sum(len(b.params) for b in buckets)
    owner = np.empty(n, dtype=np.int64)
    for b in buckets:
        owner[list(b.params)] = b.index
    return owner
