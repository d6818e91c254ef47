"""The training set resident on the device, each batch gathered and augmented there
(:func:`tensorconv.ops.augment.gather_augment`): per step, no host-to-device copy and no
wait for the GPU, so the host runs ahead of the kernels.

An epoch's random draws (the permutation, then per step the crop offsets and flips) are made
at its start with exactly the generator calls of the host path
(:func:`training.train.augment_batch`), so both paths give the same batches and the
generator's state at each epoch's end, which the checkpoint keeps, is the same.
"""

from __future__ import annotations

import numpy as np

from tensorconv.ops.augment import gather_augment

PAD = 4                      # augment_batch's crop padding


class DeviceBatches:
    """Batches of ``batch_size`` (this rank's ``share`` of them) from ``dataset`` on ``xp``.

    Parameters
    ----------
    dataset : tensorconv.data.Dataset
    xp : module
        ``numpy`` or ``cupy``.
    batch_size : int
        The global batch.
    augment : bool
    fill : float
        The padding's value (the dataset's background).
    rows : slice, optional
        This rank's rows of each global batch (data parallelism); default all.
    """

    def __init__(self, dataset, xp, batch_size: int, augment: bool, fill: float,
                 rows: slice | None = None):
        self.xp, self.batch_size, self.augment, self.fill = xp, batch_size, augment, fill
        self.rows = rows or slice(0, batch_size)
        self.images = xp.ascontiguousarray(xp.asarray(dataset.images, np.float32))
        self.labels = xp.asarray(dataset.labels)
        share = len(range(batch_size)[self.rows])
        self.x = xp.empty((share,) + self.images.shape[1:], np.float32)
        self.y = xp.empty(share, self.labels.dtype)
        self.n = len(dataset)

    def start_epoch(self, rng: np.random.Generator, steps: int) -> None:
        """Draw the epoch (as the host path does, step by step) and upload it at once."""
        b = self.batch_size
        order = rng.permutation(self.n)
        idx = order[:steps * b].reshape(steps, b)
        draws = []
        for _ in range(steps):
            if self.augment:
                oy, ox = rng.integers(0, 2 * PAD + 1, size=(2, b))
                draws.append((oy, ox, rng.random(b) < 0.5))
        xp, r = self.xp, self.rows
        self.index = xp.asarray(np.ascontiguousarray(idx[:, r]).astype(np.int32))
        if self.augment:
            oy, ox, flip = (np.stack([d[k] for d in draws]) for k in range(3))
            self.oy = xp.asarray(np.ascontiguousarray(oy[:, r]).astype(np.int32))
            self.ox = xp.asarray(np.ascontiguousarray(ox[:, r]).astype(np.int32))
            self.flip = xp.asarray(np.ascontiguousarray(flip[:, r]).astype(np.uint8))

    def batch(self, i: int):
        """Step ``i``'s images and labels: the buffers of this object, overwritten by the next
        call (in stream order, after the step that reads them)."""
        xp = self.xp
        aug = (self.oy[i], self.ox[i], self.flip[i]) if self.augment else (None, None, None)
        out = None if xp is np else self.x
        # indices and offsets come from a permutation and bounded draws: no per-step check,
        # which would wait for the GPU
        x = gather_augment(self.images, self.index[i], *aug, pad=PAD, fill=self.fill, out=out,
                           checked=False)
        xp.take(self.labels, self.index[i], out=self.y)
        return x, self.y
