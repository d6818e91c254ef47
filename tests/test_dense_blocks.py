"""Algorithm 1 (dense-block extraction) on planted, random and edge-case patterns."""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest

from tensorconv import blocksparse as bs
from tensorconv.decomp import blocks as alg1

pytest.importorskip("mtkahypar", reason="the hypergraph partitioner is not installed")


def test_planted_blocks_are_found_whole():
    rng = np.random.default_rng(0)
    shape = (32, 8, 3, 3)
    m = np.zeros((32, 72), bool)
    rows = rng.permutation(32)
    cols = rng.permutation(72)
    m[np.ix_(rows[:16], cols[:20])] = True
    m[np.ix_(rows[16:], cols[20:50])] = True
    e = alg1.extract_blocks(m, shape, t1=2, t2=4, b1=8, b2=8)
    assert e.in_blocks == 1.0 and e.fill == 1.0 and e.layout.indices.size == 0
    found = {(tuple(r), tuple(c)) for r, c in e.layout.blocks}
    assert found == {(tuple(np.sort(rows[:16])), tuple(np.sort(cols[:20]))),
                     (tuple(np.sort(rows[16:])), tuple(np.sort(cols[20:50])))}


@pytest.mark.parametrize("trial", range(4))
def test_every_block_keeps_the_papers_rules_and_every_weight_is_stored_once(rng, trial):
    k, c = int(rng.integers(16, 80)), int(rng.integers(4, 24))
    shape = (k, c, 3, 3)
    w = rng.standard_normal(shape) * (rng.random(shape) < rng.uniform(0.05, 0.5))
    pattern = bs.kernel_matrix(w) != 0
    t2, b1, b2 = int(rng.choice([2, 4, 8])), 4, 4
    e = alg1.extract_blocks(pattern, shape, t1=4, t2=t2, b1=b1, b2=b2, seed=trial)
    owner = e.layout.owner()
    for b, (rows, cols) in enumerate(e.layout.blocks):
        assert rows.size >= b1 and cols.size >= b2
        owned = (owner[np.ix_(rows, cols)] == b) & pattern[np.ix_(rows, cols)]
        assert (owned.sum(axis=0) >= t2).all()         # each column earned its place
    packed = bs.pack(w, e.layout)
    assert np.array_equal(packed.to_kernel(), w.astype(np.float32))
    held = sum(np.count_nonzero(v) for v in packed.values)
    assert e.in_blocks == pytest.approx(held / max(1, pattern.sum()))
    again = alg1.extract_blocks(pattern, shape, t1=4, t2=t2, b1=b1, b2=b2, seed=trial)
    assert [(r.tolist(), c.tolist()) for r, c in again.layout.blocks] == \
        [(r.tolist(), c.tolist()) for r, c in e.layout.blocks]   # reproducible


def test_edge_cases_empty_dense_and_tiny():
    shape = (16, 4, 1, 1)
    empty = alg1.extract_blocks(np.zeros((16, 4), bool), shape, b1=2, b2=2, t2=2)
    assert empty.layout.blocks == () and empty.in_blocks == 0.0 and empty.rounds == 0
    full = alg1.extract_blocks(np.ones((16, 4), bool), shape, t1=2, b1=2, b2=2, t2=2)
    assert full.in_blocks == 1.0 and full.layout.indices.size == 0
    one = alg1.extract_blocks(np.eye(16, 4, dtype=bool), shape, t1=2, b1=2, b2=2, t2=2)
    assert one.layout.blocks == () and one.layout.indices.size == 4     # all remainder


def _mixed_pattern(rng):
    """Planted dense blocks in random 10 % noise: early rounds find the planted blocks,
    later ones the noise's small chance blocks."""
    m = rng.random((96, 288)) < 0.10
    for r0, c0 in ((0, 0), (32, 100), (64, 200)):
        m[r0:r0 + 24, c0:c0 + 60] = True
    return m[rng.permutation(96)][:, rng.permutation(288)]


def test_min_gain_stops_once_a_round_finds_little(rng):
    shape = (96, 32, 3, 3)
    m = _mixed_pattern(rng)
    full = alg1.extract_blocks(m, shape, t1=4, t2=4, b1=8, b2=8)
    paper = alg1.extract_blocks(m, shape, t1=4, t2=4, b1=8, b2=8, min_gain=0.0)
    assert paper.layout.digest() == full.layout.digest()       # 0: the paper's loop
    cut = alg1.extract_blocks(m, shape, t1=4, t2=4, b1=8, b2=8, min_gain=0.05)
    assert cut.rounds <= full.rounds and cut.in_blocks <= full.in_blocks
    w = (rng.standard_normal(m.shape) * m).reshape(shape)
    assert np.array_equal(bs.kernel_matrix(w) != 0, m)
    packed = bs.pack(w, cut.layout)             # every weight still stored, once
    assert np.array_equal(packed.to_kernel(), w.astype(np.float32))
    # a gain no round reaches: one round, then stop (the paper's loop needs a second
    # round at least, to find nothing: the noise never all goes into blocks)
    one = alg1.extract_blocks(m, shape, t1=4, t2=4, b1=8, b2=8, min_gain=0.99)
    assert one.rounds == 1 < full.rounds and one.layout.blocks
    assert np.array_equal(bs.pack(w, one.layout).to_kernel(), w.astype(np.float32))


def test_bad_parameters_are_refused_by_name():
    for bad in (-0.1, 1.0, float("nan")):
        with pytest.raises(ValueError, match="min_gain"):
            alg1.extract_blocks(np.ones((4, 4), bool), (4, 4, 1, 1), min_gain=bad)
    with pytest.raises(ValueError, match="t2 must be >= 1"):
        alg1.extract_blocks(np.ones((4, 4), bool), (4, 4, 1, 1), t2=0)
    with pytest.raises(TypeError, match="b1 must be an int"):
        alg1.extract_blocks(np.ones((4, 4), bool), (4, 4, 1, 1), b1=2.5)
    with pytest.raises(ValueError, match="epsilon must be > 0"):
        alg1.partition_rows(np.ones((40, 4), bool), 4, epsilon=0.0)


def test_a_missing_partitioner_is_one_clear_error(monkeypatch):
    alg1._partitioner.cache_clear()
    monkeypatch.setitem(sys.modules, "mtkahypar", None)
    try:
        with pytest.raises(alg1.PartitionerUnavailableError, match="pip install mtkahypar"):
            alg1.partition_rows(np.ones((40, 4), bool), 4)
    finally:
        monkeypatch.undo()
        alg1._partitioner.cache_clear()


def test_the_shipped_partitioner_settings_load_and_are_deterministic(rng):
    """partition.ini loads without the fallback warning; the same pattern gives the same
    groups on every call."""
    pattern = rng.random((96, 300)) < 0.2
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        first = alg1.partition_rows(pattern, 8)
    assert np.array_equal(first, alg1.partition_rows(pattern, 8))
    assert sorted(np.unique(first)) == list(range(8))


def test_settings_this_partitioner_cannot_read_fall_back_to_its_preset_with_a_warning(
        rng, monkeypatch, tmp_path):
    bad = tmp_path / "partition.ini"
    bad.write_text("c-type=no-such-coarsener\n")
    monkeypatch.setattr(alg1, "_CONFIG", bad)
    pattern = rng.random((64, 200)) < 0.2
    with pytest.warns(RuntimeWarning, match="deterministic preset"):
        groups = alg1.partition_rows(pattern, 4)
    assert groups.shape == (64,) and sorted(np.unique(groups)) == [0, 1, 2, 3]


def test_hyperedges_are_the_columns_with_two_rows_or_more(rng):
    """The vectorised edge list is the per-column definition: each column's rows in order,
    columns with fewer than two nonzeros left out, column order kept."""
    for shape, density in (((64, 300), 0.1), ((9, 40), 0.5), ((300, 7), 0.02), ((5, 5), 0.0)):
        p = rng.random(shape) < density
        p[:, 0] = False
        p[0, -1], p[1:, -1] = True, False                           # a one-row column
        want = [np.nonzero(col)[0].tolist() for col in p.T if col.sum() > 1]
        assert alg1._hyperedges(p) == want


def test_another_settings_file_by_environment_variable(rng, monkeypatch, tmp_path):
    """TENSORCONV_PARTITION_CONFIG names the settings a study uses (here fewer Jet
    iterations, which may group rows otherwise); a path that is no file is refused by name
    rather than silently partitioning with the shipped settings."""
    shipped = alg1.config_path()
    assert shipped.name == "partition.ini"
    jet2 = tmp_path / "jet2.ini"
    jet2.write_text(shipped.read_text().replace("r-jet-num-iterations=8",
                                                "r-jet-num-iterations=2"))
    monkeypatch.setenv("TENSORCONV_PARTITION_CONFIG", str(jet2))
    assert alg1.config_path() == jet2
    pattern = rng.random((96, 300)) < 0.2
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)              # it loads as it is
        groups = alg1.partition_rows(pattern, 8)
    assert sorted(np.unique(groups)) == list(range(8))
    monkeypatch.setenv("TENSORCONV_PARTITION_CONFIG", str(tmp_path / "missing.ini"))
    with pytest.raises(FileNotFoundError, match="TENSORCONV_PARTITION_CONFIG"):
        alg1.partition_rows(pattern, 8)
