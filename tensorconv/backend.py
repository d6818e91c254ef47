"""Array-module dispatch (NumPy on the CPU, CuPy on the GPU) and device facts.

Every op takes ``xp = array_module(x)`` and runs the same code on either
module; CUDA kernels are used only when the arrays are CuPy arrays.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from dataclasses import dataclass

import numpy as np


class CudaUnavailableError(RuntimeError):
    """A CUDA path was asked for on a machine without CuPy or without a GPU."""


@functools.lru_cache(maxsize=None)
def cupy_installed() -> bool:
    """True when the ``cupy`` package can be imported (says nothing of a GPU)."""
    return importlib.util.find_spec("cupy") is not None


@functools.lru_cache(maxsize=None)
def gpu_available() -> bool:
    """True when CuPy is installed and sees at least one CUDA device."""
    if not cupy_installed():
        return False
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # no driver, no device, broken install: all mean "no GPU"
        return False


def require_cuda(what: str):
    """Return the ``cupy`` module, or raise :class:`CudaUnavailableError` naming ``what``."""
    if not cupy_installed():
        raise CudaUnavailableError(
            f"{what} needs an NVIDIA GPU with CuPy, and CuPy is not installed here (on a GPU "
            "machine: pip install -e '.[cuda13]', or '.[cuda12]' for a CUDA 12 driver)")
    if not gpu_available():
        raise CudaUnavailableError(f"{what} needs an NVIDIA GPU, and CuPy sees none here")
    import cupy

    return cupy


def is_cupy_array(x) -> bool:
    """True for a ``cupy.ndarray``; never imports CuPy (an array of it implies it is loaded).

    This runs several hundred times per training step, so it is a dictionary
    look-up and an ``isinstance``: reading ``__cuda_array_interface__`` would
    build a dictionary each time.
    """
    cupy = sys.modules.get("cupy")
    return cupy is not None and isinstance(x, cupy.ndarray)


def array_module(*arrays):
    """Return ``cupy`` if any argument is a CuPy array, else ``numpy``.

    ``None`` entries are ignored, so optional arguments can be passed as they are.
    """
    for a in arrays:
        if a is not None and is_cupy_array(a):
            import cupy

            return cupy
    return np


def as_array(x, name: str = "x"):
    """View ``x`` as a NumPy or CuPy array without copying.

    CuPy and NumPy arrays pass through.  A GPU array of another framework (a
    PyTorch CUDA tensor, say) is wrapped through DLPack or
    ``__cuda_array_interface__``, sharing its memory.  Anything else is refused.
    """
    if isinstance(x, np.ndarray) or is_cupy_array(x):
        return x
    on_gpu = hasattr(x, "__cuda_array_interface__")
    if hasattr(x, "__dlpack_device__"):
        device_type, _ = x.__dlpack_device__()
        on_gpu = on_gpu or device_type in (2, 3, 13)  # kDLCUDA, kDLCUDAHost, kDLCUDAManaged
        if not on_gpu:
            return np.from_dlpack(x)
    if on_gpu:
        cupy = require_cuda(f"the GPU array passed as {name}")
        if hasattr(x, "__dlpack__"):
            return cupy.from_dlpack(x)
        return cupy.asarray(x)
    raise TypeError(f"{name} must be a NumPy/CuPy array or a DLPack-capable tensor, "
                    f"got {type(x).__name__}")


def to_device(x):
    """Copy a NumPy array to the current GPU (CuPy arrays are returned as they are)."""
    cupy = require_cuda("to_device")
    return cupy.asarray(x)


def to_host(x) -> np.ndarray:
    """Return ``x`` as a NumPy array (copying from the GPU when needed)."""
    if is_cupy_array(x):
        return x.get()
    return np.asarray(x)


@dataclass(frozen=True)
class DeviceFacts:
    """What the kernels' launch geometry and the performance models need to know."""

    name: str
    index: int
    compute_capability: tuple[int, int]
    sm_count: int
    max_threads_per_block: int
    smem_per_block: int          # bytes available without opting in
    smem_per_block_optin: int    # bytes a kernel may use after raising its limit
    smem_per_sm: int
    regs_per_sm: int
    regs_per_block: int
    max_threads_per_sm: int
    l2_bytes: int
    total_memory: int
    clock_khz: int
    cuda_runtime: int
    cuda_driver: int

    @property
    def arch(self) -> str:
        """The ``sm_XY`` string that NVRTC and nvcc take."""
        major, minor = self.compute_capability
        return f"sm_{major}{minor}"


@functools.lru_cache(maxsize=None)
def device_facts(index: int | None = None) -> DeviceFacts:
    """The facts of CUDA device ``index`` (the current device when ``None``), read once a
    device and process (reading the properties took 1.5 ms on the H100; planners and
    tuners ask often)."""
    cupy = require_cuda("device_facts")
    return _device_facts(cupy.cuda.Device().id if index is None else index)


@functools.lru_cache(maxsize=None)
def _device_facts(index: int) -> DeviceFacts:
    import cupy

    p = cupy.cuda.runtime.getDeviceProperties(index)
    name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
    return DeviceFacts(
        name=name,
        index=index,
        compute_capability=(int(p["major"]), int(p["minor"])),
        sm_count=int(p["multiProcessorCount"]),
        max_threads_per_block=int(p["maxThreadsPerBlock"]),
        smem_per_block=int(p["sharedMemPerBlock"]),
        smem_per_block_optin=int(p.get("sharedMemPerBlockOptin", p["sharedMemPerBlock"])),
        smem_per_sm=int(p.get("sharedMemPerMultiprocessor", 0)),
        regs_per_sm=int(p.get("regsPerMultiprocessor", 65536)),
        regs_per_block=int(p.get("regsPerBlock", 65536)),
        max_threads_per_sm=int(p.get("maxThreadsPerMultiProcessor", 2048)),
        l2_bytes=int(p.get("l2CacheSize", 0)),
        total_memory=int(p["totalGlobalMem"]),
        clock_khz=int(p.get("clockRate", 0)),
        cuda_runtime=int(cupy.cuda.runtime.runtimeGetVersion()),
        cuda_driver=int(cupy.cuda.runtime.driverGetVersion()),
    )
