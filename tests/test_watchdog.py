"""The test watchdog (``TENSORCONV_TEST_TIMEOUT``, tests/conftest.py): a test that never
returns ends the run with every thread's traceback instead of stalling it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_hung_test_ends_the_run_with_its_traceback(tmp_path):
    (tmp_path / "test_hang.py").write_text(
        "import time\n\n"
        "def test_quick():\n    pass\n\n"
        "def test_hangs():\n    time.sleep(120)\n")
    env = dict(os.environ, TENSORCONV_TEST_TIMEOUT="3", PYTHONPATH=str(ROOT))
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_XDIST_WORKER_COUNT", None)
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "no:xdist", "-p", "tests.conftest", "--rootdir", str(tmp_path),
                           str(tmp_path / "test_hang.py")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=100)
    took = time.monotonic() - start
    assert done.returncode != 0
    assert "Timeout" in done.stderr and "in test_hangs" in done.stderr   # where it hung
    assert took < 60                                # long before the sleep's 120 s
