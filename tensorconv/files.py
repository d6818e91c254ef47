"""Writing the files a user keeps (results, checkpoints, the tune cache) without losing one.

Every such write goes through :func:`atomic_write`: the new content goes to a temporary
file beside the target and is renamed over it, so a reader or a run killed mid-write
sees the old file or the new one, never a torn one.  The temporary file is removed when
the write fails (and an hour on when the process was killed mid-write); the file gets
the mode the user's umask gives a new file (not ``mkstemp``'s 0600); and a file the
user made read-only is never replaced.
:func:`locked` serialises read-modify-write cycles between processes (an advisory
``fcntl`` lock on a ``.lock`` file beside the target).
"""

from __future__ import annotations

import contextlib
import glob
import os
import tempfile
import threading
import time
from pathlib import Path

try:
    import fcntl
except ImportError:  # not POSIX: the lock is a no-op (documented in locked)
    fcntl = None

_UMASK_LOCK = threading.Lock()
STALE_TEMP_S = 3600.0  # a temporary file this old belongs to a write that was killed


class ReadOnlyFileError(PermissionError):
    """The target of a write exists and its owner made it read-only."""


def umask() -> int:
    """The process umask (read by setting it and putting it back, under a lock)."""
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def check_writable(path: Path) -> None:
    """Raise :class:`ReadOnlyFileError` when ``path`` exists but may not be written, or its
    mode has no write permission for anyone (root too respects a file made read-only)."""
    path = Path(path)
    if path.is_file() and (not os.access(path, os.W_OK)
                           or not path.stat().st_mode & 0o222):
        raise ReadOnlyFileError(f"{path} is read-only: not replacing it (make it writable, "
                                f"or write elsewhere)")


def atomic_write(path, data, *, write=None) -> Path:
    """Write ``data`` (str or bytes) to ``path`` atomically; return ``path``.

    Parameters
    ----------
    path : str or Path
        The target; its directory is made when missing.
    data : str or bytes or None
        The new content (None when ``write`` writes it).
    write : callable (binary file) -> None, optional
        Writes the content itself (e.g. ``np.savez``).

    Raises
    ------
    ReadOnlyFileError
        ``path`` exists and is read-only (it is left as it is).
    OSError
        The directory cannot be written (no temporary file is left behind).
    """
    path = Path(path)
    check_writable(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temps(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            if write is not None:
                write(f)
            else:
                f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~umask())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


def _remove_stale_temps(path: Path) -> None:
    """Remove the temporary files of writes to ``path`` that were killed (SIGKILL, power
    loss) over an hour ago; a write in progress elsewhere is younger than that."""
    cutoff = time.time() - STALE_TEMP_S
    for tmp in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        with contextlib.suppress(OSError):
            if tmp.stat().st_mtime < cutoff:
                tmp.unlink()


@contextlib.contextmanager
def locked(path):
    """Hold an exclusive inter-process lock for ``path`` (on ``path`` + ``.lock``) while
    the block runs: two processes that read, change and write the same file in such a
    block never lose each other's changes.  Without ``fcntl`` (not POSIX) it locks
    nothing."""
    path = Path(path)
    if fcntl is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.with_name(path.name + ".lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
