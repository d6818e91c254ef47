"""A persistent tune cache: JSON keyed by device, kernel version and problem.

The file lives at ``TENSORCONV_TUNE_CACHE`` (default
``~/.cache/tensorconv/tune.json``).  A corrupt or unreadable file is logged and
replaced, never fatal; writes are atomic (temporary file + rename).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path

from tensorconv import backend, cuda

log = logging.getLogger(__name__)


def cache_path() -> Path:
    default = Path.home() / ".cache" / "tensorconv" / "tune.json"
    return Path(os.environ.get("TENSORCONV_TUNE_CACHE", default))


def kernel_version(file: str) -> str:
    """A short hash of a kernel source (and the shared header): edits invalidate entries."""
    h = hashlib.sha256((cuda.kernel_dir() / file).read_bytes())
    for header in sorted(cuda.kernel_dir().glob("*.cuh")):
        h.update(header.read_bytes())
    return h.hexdigest()[:12]


def _read(path: Path) -> dict:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            raise ValueError("top level is not an object")
        return data
    except (OSError, ValueError) as exc:
        log.warning("tune cache %s is unreadable (%s); starting a new one", path, exc)
        return {}


def make_key(kind: str, file: str, problem) -> str:
    device = backend.device_facts().name if backend.gpu_available() else "cpu"
    return f"{kind}|{device}|{kernel_version(file)}|{problem}"


def lookup(key: str):
    """The stored value for ``key``, or None."""
    return _read(cache_path()).get(key)


def store(key: str, value) -> None:
    """Add ``key -> value`` (JSON-serialisable) to the cache file, atomically."""
    path = cache_path()
    data = _read(path)
    data[key] = value
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tune.", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(tmp, path)
