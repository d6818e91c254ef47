"""Batch norm's launch shape: the C x chunks grid of its kernels (``ops.batchnorm``)."""

from __future__ import annotations

import pytest

from tensorconv.ops import batchnorm


@pytest.mark.parametrize("values, channels, chunks", [
    (128 * 32 * 32, 64, 8),      # ResNet-18's first stage at batch 128: 512 of 528 blocks
    (128 * 16 * 16, 128, 4),
    (128 * 8 * 8, 256, 2),
    (128 * 4 * 4, 512, 1),
    (128 * 4 * 4, 1024, 1),      # more channels than resident blocks: one chunk each
    (3 * 5 * 5, 2, 1),           # too few values for two chunks of 16 a thread
    (2 * 4096, 1, 2),
])
def test_chunks_fill_one_wave_of_resident_blocks(monkeypatch, values, channels, chunks):
    """The grid is at most one wave of the blocks the GPU holds (here 528: 132 SMs x 4),
    each thread taking 16 values or more; the chunks cover the values exactly, each a
    multiple of 4 long but the last."""
    monkeypatch.setattr(batchnorm, "_resident", lambda: 528)
    got, per = batchnorm._chunks(values, channels)
    assert got == chunks
    assert per % 4 == 0 and (got - 1) * per < values <= got * per
    assert channels * got <= max(528, channels)
