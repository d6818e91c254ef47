"""The tune cache: decisions measured on this device, kept in a JSON file between runs.

A *decision* is what a tuner measured once so that later calls need not: a tile for a
kernel on one problem, or a verdict between one fused launch and the launches it
replaces.  Its key (:func:`make_key`) names the kind of decision, the device, the
:mod:`tensorconv.precision` outside fp32, the problem, and a hash of the sources of
*every* kernel the decision compared: editing any of them re-times the choice.

Ops read decisions (:func:`known`) to pick their default tiles; only the tuners
(:mod:`tensorconv.tuning`) and the inference engine's choices write them
(:func:`store`).  The file lives at ``TENSORCONV_TUNE_CACHE`` (default
``~/.cache/tensorconv/tune.json``).  A corrupt or unreadable file is logged and
replaced, never fatal; writes are atomic (temporary file + rename).  The parsed file is
kept in memory until it changes on disk: tuning a rank table does thousands of look-ups
in a cache of thousands of entries.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
from pathlib import Path

from tensorconv import backend, cuda, precision
from tensorconv.results import atomic_write

log = logging.getLogger(__name__)
_PARSED: dict = {}  # path -> ((mtime_ns, size), parsed file)
_MEMOS: dict = {}   # cache file -> {key: decoded decision}


def cache_path() -> Path:
    default = Path.home() / ".cache" / "tensorconv" / "tune.json"
    return Path(os.environ.get("TENSORCONV_TUNE_CACHE", default))


def _precision_tag() -> str:
    """``"|tf32"`` outside the default :mod:`tensorconv.precision`, else ``""``: what a
    decision or a measurement taken there is keyed by besides the sources."""
    return "" if precision.current() == precision.DEFAULT else f"|{precision.current()}"


@functools.cache
def _version(directory: str, files: tuple) -> str:
    h = hashlib.sha256()
    for f in files:
        for name in (f, *sorted(cuda.includes(f))):
            h.update(name.encode() + b"\0" + (Path(directory) / name).read_bytes())
    return h.hexdigest()[:12]


def source_version(files) -> str:
    """A short hash of the sources of ``files`` (``.cu`` names, or one name), each with the
    headers it includes: an edit to any of them changes it."""
    files = (files,) if isinstance(files, str) else tuple(sorted(set(files)))
    return _version(str(cuda.kernel_dir()), files)


def kernels_version() -> str:
    """A short hash of every kernel source and header, and the current precision: what a
    measurement that may run any of them (a whole engine) was taken with."""
    names = tuple(sorted(f.name for f in cuda.kernel_dir().glob("*.cu")))
    return source_version(names) + _precision_tag()


def device_name() -> str:
    """The GPU measurements are taken on ("cpu" without one): part of every key."""
    return backend.device_facts().name if backend.gpu_available() else "cpu"


def make_key(kind: str, files, problem) -> str:
    """The key of a decision of ``kind`` on ``problem`` that compared the kernels of
    ``files`` (one ``.cu`` name, or every file either side of the comparison runs).

    Outside fp32 it names the precision: a verdict between a tensor-core path and
    another, or a tile timed beside one, may differ there even where the kernel itself
    has no tensor-core code.
    """
    return f"{kind}|{device_name()}{_precision_tag()}|{source_version(files)}|{problem}"


def _signature(path: Path):
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_mtime_ns, st.st_size


def _read(path: Path) -> dict:
    sig = _signature(path)
    if sig is None:
        return {}
    hit = _PARSED.get(path)
    if hit is not None and hit[0] == sig:
        return hit[1]
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            raise ValueError("top level is not an object")
    except (OSError, ValueError) as exc:
        log.warning("tune cache %s is unreadable (%s); starting a new one", path, exc)
        return {}
    _PARSED[path] = (sig, data)
    return data


def lookup(key: str):
    """The stored value for ``key`` (JSON as written), or None."""
    return _read(cache_path()).get(key)


def known(key: str, decode):
    """``decode(stored value)`` for ``key``, memoised for the process, or None when nothing
    is stored: the cheap read an op makes on every call that takes a tuned default."""
    memo = _MEMOS.setdefault(cache_path(), {})
    if key not in memo:
        hit = lookup(key)
        if hit is None:
            return None
        memo[key] = decode(hit)
    return memo[key]


def store(key: str, value) -> None:
    """Add ``key -> value`` (JSON-serialisable) to the cache file, atomically; the memo of
    :func:`known` forgets the key, so the next read decodes the new value."""
    path = cache_path()
    data = dict(_read(path))
    data[key] = value
    atomic_write(path, json.dumps(data, indent=1, sort_keys=True))
    _PARSED[path] = (_signature(path), data)
    _MEMOS.setdefault(path, {}).pop(key, None)
