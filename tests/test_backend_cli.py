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


def test_lineinfo_only_when_asked(monkeypatch):
    monkeypatch.delenv("TENSORCONV_LINEINFO", raising=False)
    assert "-lineinfo" not in cuda.compile_options({})
    monkeypatch.setenv("TENSORCONV_LINEINFO", "1")
    assert "-lineinfo" in cuda.compile_options({"TILE": 8})


def test_arch_specific_kernels_take_the_devices_a_target():
    """A kernel on sm_90a instructions (wgmma) is built for the device's arch-specific
    target; without the device's arch that cannot be said, and is refused."""
    ref = cuda.kernel_ref("igemm_tf32x3.cu", "conv2d_igemm_tf32x3<0, 3, 3, 64, true>",
                          arch_specific=True)
    assert (cuda.ARCH_SPECIFIC, 1) in ref.defines
    assert "-arch=sm_90a" in cuda.compile_options(dict(ref.defines), arch="sm_90")
    plain = cuda.kernel_ref("igemm_tf32x3.cu", "conv2d_igemm_tf32x3<0, 3, 3, 64, false>")
    assert not any(o.startswith("-arch") for o in cuda.compile_options(dict(plain.defines)))
    with pytest.raises(ValueError, match="arch"):
        cuda.compile_options(dict(ref.defines))


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


def _one_line_exit(capsys, argv) -> str:
    """Run the CLI on ``argv``; assert it exits 2 with one line on stderr; return it."""
    try:
        rc = cli.main(argv)
    except SystemExit as exc:
        rc = exc.code
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    return err


@pytest.mark.parametrize("argv,fragment", [
    ([], "required: command"),
    (["run"], "name an experiment"),
    (["run", "no_such_experiment"], "unknown experiment 'no_such_experiment'"),
    (["run", "train", "--model", "nosuchmodel"], "invalid choice: 'nosuchmodel'"),
    (["run", "train", "--bogus"], "unrecognized arguments: --bogus"),
    (["build"], "name a model"),
    (["build", "nosuch"], "cannot build 'nosuch'"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
])
def test_cli_mistakes_are_one_line(capsys, argv, fragment):
    assert fragment in _one_line_exit(capsys, argv)


def test_cli_damaged_checkpoint_is_one_line(capsys, tmp_path):
    ckpt = tmp_path / "c.npz"
    ckpt.write_bytes(b"not a checkpoint")
    err = _one_line_exit(capsys, ["run", "train", "--model", "small_cnn", "--dataset",
                                  "synthetic", "--checkpoint", str(ckpt), "--out", str(tmp_path)])
    assert "c.npz is not a tensorconv checkpoint" in err


def test_cli_missing_data_is_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORCONV_DATA", str(tmp_path / "nowhere"))
    err = _one_line_exit(capsys, ["run", "quickstart", "--quick", "--out", str(tmp_path)])
    assert "TENSORCONV_DATA=" in err


def test_cli_debug_shows_the_traceback(monkeypatch):
    monkeypatch.setenv("TENSORCONV_DEBUG", "1")
    with pytest.raises(ValueError, match="cannot build"):
        cli.main(["build", "nosuch"])


def test_cli_help_lists_the_experiments_and_marks_the_gpu_ones(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert "tdc_fig8         [GPU]" in out and "quickstart       Quickstart" in out


def test_cli_gpu_experiment_without_a_gpu_is_one_line(capsys, monkeypatch):
    monkeypatch.setattr(backend, "gpu_available", lambda: False)
    monkeypatch.setattr(backend, "cupy_installed", lambda: True)
    assert cli.main(["run", "tdc_ranks", "--out", "unused"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tensorconv run tdc_ranks:") and "needs an NVIDIA GPU" in err
    assert len(err.strip().splitlines()) == 1
