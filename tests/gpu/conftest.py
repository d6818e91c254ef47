"""GPU tests time fewer tile candidates per kernel and shape than a real tuning run (every
code path of tuning still runs; tests that check a tuner's count pass their own)."""

import pytest

from tensorconv.tuning import oracle


@pytest.fixture(autouse=True)
def few_tuning_candidates(monkeypatch):
    monkeypatch.setattr(oracle, "CANDIDATES", 8)
