"""Shared fixtures; ``gpu`` tests are skipped with a reason where no GPU is usable."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tensorconv import backend


def pytest_collection_modifyitems(config, items):
    if backend.gpu_available():
        return
    reason = ("CuPy is not installed" if not backend.cupy_installed()
              else "CuPy sees no CUDA device")
    skip = pytest.mark.skip(reason=f"gpu test: {reason}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def rng(request):
    """A freshly seeded generator; the seed is printed so a failure can be replayed."""
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"{request.node.nodeid}: rng seed {seed}")
    return np.random.default_rng(seed)
