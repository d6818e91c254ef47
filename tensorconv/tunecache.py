"""The tune cache: decisions measured on this device, kept in a JSON file between runs.

A *decision* is what a tuner measured once so that later calls need not: a tile for a
kernel on one problem, or a verdict between one fused launch and the launches it
replaces.  Its key (:func:`make_key`) names the kind of decision, the device, the
:mod:`tensorconv.precision` outside fp32, the problem, and a hash of the sources of
*every* kernel the decision compared: editing any of them re-times the choice.

Ops read decisions (:func:`known`) to pick their default tiles; only the tuners
(:mod:`tensorconv.tuning`) and the inference engine's choices write them
(:func:`store`).  The file lives at ``TENSORCONV_TUNE_CACHE`` (default
``~/.cache/tensorconv/tune.json``), shared safely by many processes: a store merges into
the file under a lock and writes atomically.  Nothing about the cache is fatal: an
unreadable file reads as empty and is kept aside (never overwritten), an entry a reader
cannot use is a miss, a failed write a warning; each is logged once.  The parsed file is
kept in memory until it changes on disk: tuning a rank table does thousands of look-ups
in a cache of thousands of entries.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import time
from pathlib import Path

from tensorconv import backend, cuda, files, precision

log = logging.getLogger(__name__)
_PARSED: dict = {}  # path -> ((mtime_ns, size), parsed file)
_MEMOS: dict = {}   # cache file -> {key: decoded decision}
_UNSAVED: dict = {}  # cache file -> {key: value} stored by this process but not written
_WARNED: set = set()  # what was logged once


def cache_path() -> Path:
    """The cache file: ``TENSORCONV_TUNE_CACHE``, else ``~/.cache/tensorconv/tune.json``.
    Ops read it on every call that takes a tuned default, so it is memoised on the two
    variables it depends on (``Path.home()`` alone took ~35 µs)."""
    return _cache_path(os.environ.get("TENSORCONV_TUNE_CACHE"), os.environ.get("HOME"))


@functools.lru_cache(maxsize=16)
def _cache_path(setting: str | None, home: str | None) -> Path:
    del home   # part of the memo's key only: Path.home() reads it
    if setting is not None:
        return Path(setting)
    return Path.home() / ".cache" / "tensorconv" / "tune.json"


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
    except OSError:  # absent, or its directory is not one: read as absent
        return None
    return st.st_mtime_ns, st.st_size


def _warn_once(what, message: str, *args) -> None:
    if what not in _WARNED:
        _WARNED.add(what)
        log.warning(message, *args)


def _parse(path: Path) -> dict:
    """The file's entries; ``{}`` when it does not exist.  Raises ``OSError`` or
    ``ValueError`` when it exists but cannot be read as a JSON object."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("its top level is not a JSON object")
    return data


def _read(path: Path) -> dict:
    """The file's entries (parsed once per change on disk) and this process's stores that
    could not be written; an unreadable file reads as empty (logged once)."""
    sig = _signature(path)
    hit = _PARSED.get(path)
    if hit is None or hit[0] != sig:
        try:
            hit = (sig, _parse(path))
        except (OSError, ValueError) as exc:
            _warn_once(("read", path, sig), "tune cache %s is unreadable (%s): ignoring it "
                       "(it is kept aside at the next store)", path, exc)
            hit = (sig, {})
        _PARSED[path] = hit
    unsaved = _UNSAVED.get(path)
    return {**hit[1], **unsaved} if unsaved else hit[1]


def lookup(key: str):
    """The stored value for ``key`` (JSON as written), or None."""
    return _read(cache_path()).get(key)


def known(key: str, decode):
    """``decode(stored value)`` for ``key``, memoised for the process, or None when nothing
    (or nothing ``decode`` accepts) is stored: the cheap read an op makes on every call
    that takes a tuned default.

    ``decode`` raises ``KeyError``, ``TypeError`` or ``ValueError`` on an entry it cannot
    use (another version's, or edited by hand): that entry is a miss, logged once.
    """
    memo = _MEMOS.setdefault(cache_path(), {})
    if key not in memo:
        hit = lookup(key)
        if hit is None:
            return None
        try:
            memo[key] = decode(hit)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            _warn_once(("entry", key), "tune cache entry %s is not usable (%r: %s): "
                       "treated as not tuned", key, hit, exc)
            memo[key] = None
    return memo[key]


def known_tile(key: str, tile_type, check=None):
    """The tile stored under ``key`` (``{"tile": {field: value}}``) as a ``tile_type``, or
    None; ``check(tile)`` raises ``ValueError`` for one that does not fit (a miss)."""
    def decode(hit):
        tile = tile_type(**hit["tile"])
        if check is not None:
            check(tile)
        return tile

    return known(key, decode)


def _keep_aside(path: Path, exc: Exception) -> None:
    """Move an unreadable cache file aside (never overwrite what could not be read)."""
    if path.is_dir():
        raise OSError(f"{path} is a directory")
    aside = path.with_name(f"{path.name}.unreadable-{time.strftime('%Y%m%d-%H%M%S')}")
    try:
        os.replace(path, aside)
        log.warning("tune cache %s is unreadable (%s): kept aside as %s; starting a new one",
                    path, exc, aside)
    except OSError as err:
        raise OSError(f"cannot move the unreadable tune cache {path} aside: {err}") from exc


def store(key: str, value) -> None:
    """Add ``key -> value`` (JSON-serialisable) to the cache file.

    Safe between processes: under a file lock, the file is read afresh, the entry merged
    in, and the result written atomically, so concurrent tuners keep every entry.  A file
    that cannot be read is moved aside first, never overwritten.  A failure to write is a
    warning (logged once), not an error: the entry is kept for this process.  The memo of
    :func:`known` forgets the key, so the next read decodes the new value.
    """
    json.dumps(value)  # a value that cannot be stored is the caller's bug: raise here
    path = cache_path()
    _MEMOS.setdefault(path, {}).pop(key, None)
    try:
        with files.locked(path):
            try:
                data = _parse(path)
            except (OSError, ValueError) as exc:
                _keep_aside(path, exc)
                data = {}
            data[key] = value
            files.atomic_write(path, json.dumps(data, indent=1, sort_keys=True))
            _PARSED[path] = (_signature(path), data)
        _UNSAVED.get(path, {}).pop(key, None)
    except OSError as exc:
        _UNSAVED.setdefault(path, {})[key] = value
        _warn_once(("write", path), "cannot write the tune cache %s (%s): tuning results "
                   "are kept for this process only", path, exc)
