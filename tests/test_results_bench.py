"""The results format and the host-side parts of the benchmark harness."""

from __future__ import annotations

import math

import pytest

from tensorconv import bench, results, timing


def test_timing_summary():
    t = timing.Timing.from_samples([5.0, 1.0, 3.0, 2.0, 4.0], "events")
    assert t.median_us == 3.0 and t.min_us == 1.0 and t.repeats == 5
    assert t.p10_us < t.median_us < t.p90_us
    with pytest.raises(ValueError):
        timing.Timing.from_samples([], "events")


def test_time_host_runs_the_callable():
    calls = []
    t = timing.time_host(lambda: calls.append(1), warmup=2, repeat=4)
    assert len(calls) == 6 and t.repeats == 4 and t.method == "host"


def test_unknown_framework():
    with pytest.raises(ValueError, match="framework"):
        timing.time_events(lambda: None, framework="jax")


def test_roofline_floor_takes_the_slower_side():
    c = bench.Ceilings(copy_bytes_per_s=1e12, fp32_flops_per_s=1e13, launch_eager_us=5,
                       launch_graph_us=1)
    assert math.isclose(bench.roofline_floor_us(1e9, 1e3, c), 100.0)   # compute-bound
    assert math.isclose(bench.roofline_floor_us(1e3, 1e9, c), 1000.0)  # memory-bound


def test_environment_records_device_and_command():
    env = bench.environment()
    assert {"device", "command", "numpy", "commit", "date"} <= set(env)


def test_resultset_roundtrip(tmp_path):
    rs = results.ResultSet("demo", {"device": "TestGPU"})
    rs.add("a", "ours", "time_us", 10.0, "us", paper_value=12.0)
    rs.add("a", "base", "time_us", 20.0, "us")
    rs.add("b", "ours", "time_us", 5.5, "us", note="x,y")
    path = rs.write_csv(tmp_path / "demo.csv")
    rows = results.read_csv(path)
    assert [r["value"] for r in rows] == [10.0, 20.0, 5.5]
    assert rows[0]["paper_value"] == 12.0 and math.isnan(rows[1]["paper_value"])
    assert rows[2]["note"] == "x,y" and rows[0]["device"] == "TestGPU"
    assert set(rows[0]) == set(results.COLUMNS)
    table = results.pivot_markdown(rows, "time_us")
    assert "| a | 10.0 (paper 12.0) | 20.0 |" in table
    assert "| b | 5.50 | – |" in table
    assert rs.values("time_us")[("b", "ours")] == 5.5
    md = results.write_markdown(tmp_path / "demo.md", "Demo", {"device": "TestGPU"},
                                [("Times", table)])
    text = md.read_text()
    assert "# Demo" in text and "TestGPU" in text and "## Times" in text
    assert "| b | ours | time_us | 5.50 | us | – |" in results.long_markdown(rows)


def test_metric_sections_keep_the_order_asked_and_skip_absent_metrics():
    from tensorconv.results import metric_sections, pivot_markdown

    rows = [{"case": "a", "variant": "v", "metric": m, "value": 1.0, "unit": "s", "paper_value": ""}
            for m in ("x", "y")]
    got = metric_sections(rows, ("y", "z", "x"))
    assert [m for m, _ in got] == ["y", "x"]
    assert got[0][1] == pivot_markdown(rows, "y")


def test_the_commit_names_a_dirty_tree(tmp_path, monkeypatch):
    """A results file names the commit it ran at, marked +dirty where tracked files were
    changed after it (a run on uncommitted kernels), unmarked where only untracked files
    are new; TENSORCONV_COMMIT wins where it is set."""
    import shutil
    import subprocess

    from tensorconv import bench

    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    monkeypatch.delenv("TENSORCONV_COMMIT", raising=False)

    def git(*args):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
                       cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "k.cu").write_text("a")
    git("add", "k.cu")
    git("commit", "-qm", "one")
    clean = bench._git_commit(tmp_path)
    assert clean != "unknown" and not clean.endswith("+dirty")
    (tmp_path / "new.txt").write_text("untracked")
    assert bench._git_commit(tmp_path) == clean
    (tmp_path / "k.cu").write_text("b")
    assert bench._git_commit(tmp_path) == clean + "+dirty"
    monkeypatch.setenv("TENSORCONV_COMMIT", "abc1234")
    assert bench._git_commit(tmp_path) == "abc1234"
