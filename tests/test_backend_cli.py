"""Backend dispatch, the kernel loader's host-side logic, and the command line."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv import backend, cli, cuda


def test_array_module_numpy():
    assert backend.array_module(np.ones(2), None) is np


def test_as_array_passes_numpy_and_refuses_lists():
    a = np.ones(3)
    assert backend.as_array(a) is a
    with pytest.raises(TypeError, match="weights must be"):
        backend.as_array([1, 2], "weights")


def test_as_array_takes_cpu_dlpack_without_copy():
    class Holder:  # a foreign CPU array speaking DLPack
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, **kw):
            return self.a.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    a = np.arange(6.0)
    b = backend.as_array(Holder(a))
    b[0] = 42.0
    assert a[0] == 42.0


@pytest.mark.skipif(backend.gpu_available(), reason="this machine has a GPU")
def test_require_cuda_explains_what_is_missing():
    with pytest.raises(backend.CudaUnavailableError, match="the direct kernel"):
        backend.require_cuda("the direct kernel")
    with pytest.raises(backend.CudaUnavailableError):
        cuda.get_kernel("direct_conv.cu", "conv2d_direct_fwd<1, 0, 0>")


def test_compile_options_carry_defines_and_include_dirs():
    opts = cuda.compile_options({"TILE": 8, "FAST": None})
    assert "-std=c++17" in opts and "-DTILE=8" in opts and "-DFAST" in opts
    assert f"-I{cuda.kernel_dir()}" in opts


def test_kernel_dir_override(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORCONV_KERNEL_DIR", str(tmp_path))
    assert cuda.kernel_dir() == tmp_path


def test_every_kernel_file_is_present():
    names = {p.name for p in cuda.kernel_dir().glob("*.cu")}
    assert {"direct_conv.cu", "launch_floor.cu"} <= names


def test_cli_info(capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "tensorconv" in out and "numpy" in out and "GPU" in out and "cuDNN baseline" in out


def test_cli_list(capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    assert "bench_conv" in out and "quickstart" in out


def test_cli_unknown_experiment():
    with pytest.raises(SystemExit):
        cli.main(["run", "no_such_experiment"])


def test_cli_gpu_experiment_without_a_gpu_is_one_line(capsys, monkeypatch):
    monkeypatch.setattr(backend, "gpu_available", lambda: False)
    monkeypatch.setattr(backend, "cupy_installed", lambda: True)
    assert cli.main(["run", "tdc_ranks", "--out", "unused"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tensorconv run tdc_ranks:") and "needs a CUDA GPU" in err
