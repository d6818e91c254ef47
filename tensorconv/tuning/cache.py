"""A persistent tune cache: JSON keyed by device, kernel version and problem.

The file lives at ``TENSORCONV_TUNE_CACHE`` (default
``~/.cache/tensorconv/tune.json``).  A corrupt or unreadable file is logged and
replaced, never fatal; writes are atomic (temporary file + rename).  The parsed
file is kept in memory until the file changes on disk: tuning a rank table does
thousands of lookups in a cache of thousands of entries.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

from tensorconv import backend, cuda, precision
from tensorconv.results import atomic_write

log = logging.getLogger(__name__)
_PARSED: dict = {}  # path -> ((mtime_ns, size), parsed file)


def cache_path() -> Path:
    default = Path.home() / ".cache" / "tensorconv" / "tune.json"
    return Path(os.environ.get("TENSORCONV_TUNE_CACHE", default))


_MEMOS: dict = {}  # cache file -> {key: decoded decision}


def memo() -> dict:
    """The process's decoded decisions of the current cache file (tuners fill it), kept per
    file: pointing ``TENSORCONV_TUNE_CACHE`` elsewhere never returns another file's."""
    return _MEMOS.setdefault(cache_path(), {})


def _precision_tag() -> str:
    """``"|tf32"`` outside the default :mod:`tensorconv.precision`, else ``""``: what a
    decision or a measurement taken there is keyed by besides the sources."""
    return "" if precision.current() == precision.DEFAULT else f"|{precision.current()}"


def kernel_version(file: str) -> str:
    """A short hash of a kernel source (and the shared header): edits invalidate entries."""
    h = hashlib.sha256((cuda.kernel_dir() / file).read_bytes())
    for header in sorted(cuda.kernel_dir().glob("*.cuh")):
        h.update(header.read_bytes())
    return h.hexdigest()[:12]


def kernels_version() -> str:
    """A short hash of every kernel source and header, and the current precision: what a
    measurement that may run any of them (a whole engine) was taken with."""
    h = hashlib.sha256()
    for f in sorted(cuda.kernel_dir().glob("*.cu*")):
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:12] + _precision_tag()


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


def device_name() -> str:
    """The GPU measurements are taken on ("cpu" without one): part of every key."""
    return backend.device_facts().name if backend.gpu_available() else "cpu"


def make_key(kind: str, file: str, problem) -> str:
    """The key of a decision about ``file``'s kernel on ``problem``.  Outside fp32 it names
    the precision: a verdict between a tensor-core path and another, or a tile timed
    beside one, may differ there even where ``file`` itself has no tensor-core code."""
    return f"{kind}|{device_name()}{_precision_tag()}|{kernel_version(file)}|{problem}"


def lookup(key: str):
    """The stored value for ``key``, or None."""
    return _read(cache_path()).get(key)


def store(key: str, value) -> None:
    """Add ``key -> value`` (JSON-serialisable) to the cache file, atomically."""
    path = cache_path()
    data = dict(_read(path))
    data[key] = value
    atomic_write(path, json.dumps(data, indent=1, sort_keys=True))
    _PARSED[path] = (_signature(path), data)
