"""Shared fixtures and options.

* ``gpu`` tests are skipped with a reason where no GPU is usable.
* ``slow`` tests (the long sweeps) run only with ``--slow`` (or ``TENSORCONV_SLOW=1``):
  ``pytest -m gpu`` is the quick GPU suite, ``pytest -m gpu --slow`` the whole one, run
  before an issue is resolved.
* ``TENSORCONV_TEST_SEED=n`` replays the ``rng`` fixture's seed a failure printed.
* ``TENSORCONV_TEST_LOG=path`` appends each test's outcome, duration and failure text to
  ``path`` as it finishes (a run cut short by a time limit still says what it did).
* ``TENSORCONV_TEST_TIMEOUT=s`` (default 1200; 0: none): a test still running after ``s``
  seconds prints every thread's traceback and ends its process, so a hung kernel stops the
  run at the test that hung (under ``-n``, xdist reports that test crashed and goes on).
"""

from __future__ import annotations

import faulthandler
import os
import sys

import numpy as np
import pytest

from tensorconv import backend

if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):  # workers share the cores they compile on
    os.environ.setdefault("TENSORCONV_COMPILE_THREADS", str(max(
        2, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))))


_STDERR = None   # the terminal's stderr, kept before a test's output is captured


def pytest_configure(config):
    global _STDERR
    _STDERR = os.fdopen(os.dup(2), "w")     # capture swaps fd 2 for a file during a test


def pytest_unconfigure(config):
    global _STDERR
    if _STDERR is not None:
        faulthandler.cancel_dump_traceback_later()
        _STDERR.close()
        _STDERR = None


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true", default=False,
                     help="also run the tests marked slow (the long sweeps)")


def pytest_collection_modifyitems(config, items):
    run_slow = config.getoption("--slow") or os.environ.get("TENSORCONV_SLOW") == "1"
    if not run_slow:
        skip_slow = pytest.mark.skip(reason="slow sweep: run with --slow")
        for item in items:
            if "slow" in item.keywords:
                item.add_marker(skip_slow)
    if backend.gpu_available():
        return
    reason = ("CuPy is not installed" if not backend.cupy_installed()
              else "CuPy sees no CUDA device")
    skip = pytest.mark.skip(reason=f"gpu test: {reason}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_runtest_logreport(report):
    path = os.environ.get("TENSORCONV_TEST_LOG")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return  # the controller logs what its workers report
    if not path or (report.when != "call" and report.outcome == "passed"):
        return
    with open(path, "a") as f:
        f.write(f"{report.outcome:7s} {report.duration:8.2f}s {report.when:8s} {report.nodeid}\n")
        if report.failed:
            f.write(str(report.longrepr)[-3000:] + "\n---\n")


@pytest.fixture(autouse=True)
def _watchdog():
    """``TENSORCONV_TEST_TIMEOUT`` (module docstring): a kernel that never returns cannot be
    interrupted from Python, so the process ends, after the tracebacks say where."""
    limit = float(os.environ.get("TENSORCONV_TEST_TIMEOUT") or 1200)
    if limit > 0:
        faulthandler.dump_traceback_later(limit, exit=True, file=_STDERR or sys.__stderr__)
    yield
    if limit > 0:
        faulthandler.cancel_dump_traceback_later()


@pytest.fixture(autouse=True)
def _no_import_left_running():
    """An experiment that failed early may leave its preload thread importing PyTorch;
    the next test's setup must not run beside it (pytest's logging setup walks the logger
    table that the import grows)."""
    yield
    common = sys.modules.get("experiments._common")
    if common is not None:
        common.finish_preloads()


@pytest.fixture
def rng(request):
    """A freshly seeded generator; the seed is printed so a failure can be replayed with
    ``TENSORCONV_TEST_SEED=<seed> pytest <test id>``."""
    seed = int(os.environ.get("TENSORCONV_TEST_SEED") or int.from_bytes(os.urandom(4), "little"))
    print(f"{request.node.nodeid}: rng seed {seed}")
    return np.random.default_rng(seed)
