"""Nothing a user keeps is lost: atomic writes with the umask's mode, a tune cache many
processes share, results that are not replaced by accident, checkpoints that fail in
one clear line."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import stat
import time
from pathlib import Path

import numpy as np
import pytest

from tensorconv import files, results, tunecache
from training import checkpoint as ckpt

# ----------------------------------------------------------------------------- atomic_write


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_atomic_write_gives_the_umask_mode_and_leaves_no_temp_file(tmp_path):
    old = os.umask(0o027)
    try:
        path = files.atomic_write(tmp_path / "sub" / "a.txt", "hello")
    finally:
        os.umask(old)
    assert path.read_text() == "hello"
    assert _mode(path) == 0o640
    assert os.listdir(tmp_path / "sub") == ["a.txt"]


def test_atomic_write_removes_its_temp_file_when_the_write_fails(tmp_path):
    path = tmp_path / "a.bin"
    path.write_bytes(b"old")

    def broken(f):
        f.write(b"half")
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError, match="disk on fire"):
        files.atomic_write(path, None, write=broken)
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["a.bin"]


def test_atomic_write_never_replaces_a_read_only_file(tmp_path):
    path = tmp_path / "keep.txt"
    path.write_text("mine")
    path.chmod(0o444)
    with pytest.raises(files.ReadOnlyFileError, match="keep.txt is read-only"):
        files.atomic_write(path, "theirs")
    assert path.read_text() == "mine"


# ----------------------------------------------------------------------------- tune cache


def test_temp_files_of_killed_writes_are_removed_an_hour_on(tmp_path):
    old, young = tmp_path / ".a.txt.x1.tmp", tmp_path / ".a.txt.x2.tmp"
    for t in (old, young):
        t.write_text("half")
    os.utime(old, (0, 0))
    files.atomic_write(tmp_path / "a.txt", "whole")
    assert sorted(os.listdir(tmp_path)) == [".a.txt.x2.tmp", "a.txt"]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    path = tmp_path / "tune.json"
    monkeypatch.setenv("TENSORCONV_TUNE_CACHE", str(path))
    return path


def _store_many(path: str, tag: str, n: int) -> None:
    os.environ["TENSORCONV_TUNE_CACHE"] = path
    for i in range(n):
        tunecache.store(f"test|{tag}|{i}", {"tile": [i]})


def test_two_processes_storing_300_entries_each_keep_all_600(cache):
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_store_many, args=(str(cache), tag, 300)) for tag in "ab"]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    data = json.loads(cache.read_text())
    assert len(data) == 600
    assert data["test|a|299"] == {"tile": [299]} and data["test|b|0"] == {"tile": [0]}


def test_a_store_killed_mid_write_leaves_a_whole_cache(cache):
    ctx = multiprocessing.get_context("spawn")
    tunecache.store("before", 1)
    proc = ctx.Process(target=_store_many, args=(str(cache), "k", 100000))
    proc.start()
    deadline = time.monotonic() + 60
    while len(_entries(cache)) < 50 and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.kill()
    proc.join()
    data = json.loads(cache.read_text())               # whole: the old file or a new one
    assert data["before"] == 1 and len(data) >= 50
    tunecache.store("after", 2)
    assert json.loads(cache.read_text())["after"] == 2


def _entries(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def test_an_unreadable_cache_is_kept_aside_never_overwritten(cache, caplog):
    entries = {f"k{i}": {"tile": [i]} for i in range(1000)}
    damaged = json.dumps(entries)[:-1] + ",}"      # one stray comma
    cache.write_text(damaged)
    with caplog.at_level(logging.WARNING, logger="tensorconv.tunecache"):
        assert tunecache.lookup("k1") is None       # reads as empty: not fatal
        tunecache.store("new", 1)
    aside = [p for p in cache.parent.iterdir() if p.name.startswith("tune.json.unreadable-")]
    assert len(aside) == 1 and aside[0].read_text() == damaged
    assert json.loads(cache.read_text()) == {"new": 1}
    assert "kept aside" in caplog.text


def test_a_bad_entry_is_a_miss_logged_once(cache, caplog):
    tunecache.store("wrong-type", [1, 2])           # not the {"tile": ...} a reader expects
    tunecache.store("wrong-fields", {"tile": {"nope": 1}})

    class Tile:
        def __init__(self, a):
            if a < 1:
                raise ValueError("a must be >= 1")
            self.a = a

    with caplog.at_level(logging.WARNING, logger="tensorconv.tunecache"):
        for _ in range(3):
            assert tunecache.known_tile("wrong-type", Tile) is None
            assert tunecache.known_tile("wrong-fields", Tile) is None
    assert caplog.text.count("wrong-type") == 1 and caplog.text.count("wrong-fields") == 1
    tunecache.store("bad-value", {"tile": {"a": 0}})
    assert tunecache.known_tile("bad-value", Tile) is None
    tunecache.store("good", {"tile": {"a": 3}})
    assert tunecache.known_tile("good", Tile).a == 3
    tunecache.store("unfit", {"tile": {"a": 3}})

    def check(tile):
        raise ValueError("does not fit")

    assert tunecache.known_tile("unfit", Tile, check) is None


def test_a_cache_that_cannot_be_written_is_a_warning_and_kept_for_the_process(
        tmp_path, monkeypatch, caplog):
    (tmp_path / "a-file").write_text("")             # its "directory" is a file: unwritable
    monkeypatch.setenv("TENSORCONV_TUNE_CACHE", str(tmp_path / "a-file" / "tune.json"))
    with caplog.at_level(logging.WARNING, logger="tensorconv.tunecache"):
        tunecache.store("k", {"tile": [1]})
        tunecache.store("k2", {"tile": [2]})
    assert tunecache.lookup("k") == {"tile": [1]}     # this process still has it
    assert caplog.text.count("cannot write the tune cache") == 1


def test_a_read_only_cache_is_not_replaced(cache, caplog):
    cache.write_text(json.dumps({"mine": 1}))
    cache.chmod(0o444)
    with caplog.at_level(logging.WARNING, logger="tensorconv.tunecache"):
        tunecache.store("k", 2)
    assert json.loads(cache.read_text()) == {"mine": 1}
    assert tunecache.lookup("k") == 2 and tunecache.lookup("mine") == 1


def test_a_cache_path_that_is_a_directory_is_not_fatal(tmp_path, monkeypatch):
    (tmp_path / "tune.json").mkdir()
    monkeypatch.setenv("TENSORCONV_TUNE_CACHE", str(tmp_path / "tune.json"))
    assert tunecache.lookup("k") is None
    tunecache.store("k", 1)
    assert tunecache.lookup("k") == 1
    assert (tmp_path / "tune.json").is_dir()


def test_store_refuses_a_value_json_cannot_hold(cache):
    with pytest.raises(TypeError):
        tunecache.store("k", {"tile": object()})
    assert not cache.exists()


# ----------------------------------------------------------------------------- results


def _result_set(device: str) -> results.ResultSet:
    rs = results.ResultSet("demo", {"device": device})
    rs.add("case", "ours", "time_us", 1.0, "us")
    return rs


def test_results_go_to_a_user_directory_by_default(monkeypatch):
    monkeypatch.delenv("TENSORCONV_RESULTS", raising=False)
    assert results.results_dir() == Path("tensorconv-results")
    assert results.results_dir() != results.REFERENCE


def test_results_of_another_device_are_not_replaced_unless_forced(tmp_path):
    path = _result_set("NVIDIA H100 80GB HBM3").write_csv(tmp_path / "demo.csv")
    results.check_replace(path, "NVIDIA H100 80GB HBM3")            # same device: fine
    results.check_replace(tmp_path / "missing.csv", "CPU")           # nothing there: fine
    with pytest.raises(results.ResultsOverwriteError, match="measured on NVIDIA H100.*--force"):
        results.check_replace(path, "CPU (x86_64, NumPy backend)")
    results.check_replace(path, "CPU (x86_64, NumPy backend)", force=True)


def test_an_experiment_stops_before_it_starts_over_another_devices_results(tmp_path, capsys):
    from experiments import bench_conv

    # a device no runner has: on the GPU machine the H100 is this device, not another
    _result_set("Imaginary GPU 9000").write_csv(tmp_path / "bench_conv.csv")
    before = (tmp_path / "bench_conv.csv").read_text()
    with pytest.raises(SystemExit) as exc:
        bench_conv.main(["--quick", "--out", str(tmp_path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "measured on Imaginary GPU 9000" in err and len(err.strip().splitlines()) == 1
    assert (tmp_path / "bench_conv.csv").read_text() == before


# ----------------------------------------------------------------------------- checkpoints


def _save(path):
    return ckpt.save(path, model_state={"w": np.ones(3, np.float32)},
                     optimizer_state={"lr": 0.1, "steps": 2, "velocity": [None]},
                     meta={"epoch": 1})


def test_a_checkpoint_round_trips(tmp_path):
    state, opt, meta = ckpt.load(_save(tmp_path / "c.npz"))
    assert np.array_equal(state["w"], np.ones(3)) and opt["steps"] == 2 and meta["epoch"] == 1


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty", "foreign-npz", "bad-meta"])
def test_a_damaged_or_foreign_checkpoint_is_one_clear_error(tmp_path, damage):
    path = _save(tmp_path / "c.npz")
    blob = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(blob[: len(blob) // 2])
    elif damage == "garbage":
        path.write_bytes(b"\x93NUMPY not really" * 10)
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "foreign-npz":
        np.savez(path, a=np.zeros(2))
    else:
        np.savez(path, meta=np.frombuffer(b"{not json", dtype=np.uint8))
    with pytest.raises(ckpt.CheckpointError, match=str(path).replace(".", r"\.")):
        ckpt.load(path)


def test_a_read_only_checkpoint_is_never_replaced(tmp_path):
    path = _save(tmp_path / "c.npz")
    blob = path.read_bytes()
    path.chmod(0o444)
    with pytest.raises(files.ReadOnlyFileError):
        _save(path)
    assert path.read_bytes() == blob


def test_an_engine_verdict_this_version_cannot_use_is_a_miss(cache):
    from types import SimpleNamespace

    from tensorconv.engine.choice import Choice, one_launch_or_parts

    plan = SimpleNamespace(tune=False, dry=False)
    files_ = ("direct_conv.cu",)

    def choose(problem, stored):
        key = tunecache.make_key("test_choice", files_, problem)
        if stored is not None:
            tunecache.store(key, stored)
        return one_launch_or_parts(plan, "test_choice", files_, problem, tiles=lambda: [],
                                   launch=None, parts=None, decode=tuple, default=(9,),
                                   allowed={(1,), (2,), (9,)})

    assert choose("p0", None) == Choice(True, (9,))                       # nothing stored
    assert choose("p1", {"fused": True, "tile": [2]}) == Choice(True, (2,))
    assert choose("p2", {"fused": False, "tile": [2]}) == Choice(False)
    for bad in ({"fused": "yes", "tile": [2]}, {"fused": True, "tile": [7]}, {"tile": [1]},
                [True, [1]], {"fused": True}):
        assert choose(f"bad{bad!r}", bad) == Choice(True, (9,)), bad      # a miss: default


def _save_forever(path: str) -> None:
    i = 0
    while True:
        ckpt.save(path, model_state={"w": np.full(200_000, i, np.float32)},
                  optimizer_state={"lr": 0.1, "steps": i, "velocity": [None]}, meta={"epoch": i})
        i += 1


def test_a_checkpoint_write_killed_midway_leaves_a_whole_checkpoint(tmp_path):
    path = tmp_path / "c.npz"
    _save(path)
    ctx = multiprocessing.get_context("spawn")
    proc = ctx.Process(target=_save_forever, args=(str(path),))
    proc.start()
    deadline = time.monotonic() + 60
    while ckpt.load(path)[2]["epoch"] < 3 and time.monotonic() < deadline:
        time.sleep(0.01)        # reading while it writes: always a whole file
    time.sleep(0.05)
    proc.kill()                 # a write in flight is cut short
    proc.join()
    state, opt, meta = ckpt.load(path)   # the last whole checkpoint, never a torn one
    assert meta["epoch"] >= 3 and meta["epoch"] == opt["steps"]
    assert np.all(state["w"] == meta["epoch"])


def test_a_directory_where_a_checkpoint_should_be_is_one_clear_error(tmp_path):
    with pytest.raises(ckpt.CheckpointError, match="is a directory"):
        ckpt.load(tmp_path)
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        ckpt.load(tmp_path / "missing.npz")
