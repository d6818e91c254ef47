"""Load ``kernels_cu/*.cu`` as CuPy ``RawModule`` objects, one at a time or many in parallel.

Kernels never live in Python strings (a kernel written for one layer's weights includes
a generated body file named by a define: ``docs/ops.md``): each family is one ``.cu`` file in
``kernels_cu/`` (overridable with ``TENSORCONV_KERNEL_DIR``).  A :class:`KernelRef`
names one kernel: its file, its name expression (a template's instantiation, through
``name_expressions``) and its ``-D`` defines.  Compiled kernels are memoised per
(directory, file, name expression, defines, backend, device) in the process, and on
disk by CuPy; a failing compile raises :class:`KernelCompileError` carrying the
file, the options and the compiler log.

NVRTC compiles one kernel in about a second and releases the GIL while it does, so
:func:`compile_all` compiles the kernels a model or a tuner is about to need on a
pool of threads, with a progress bar, before the first of them is launched.

Kernels whose every body begins with ``tc::wait_prior_grids()`` (all of
``kernels_cu``) are noted, so that :mod:`tensorconv.graph` may start them before the
kernel ahead of them has finished.
"""

from __future__ import annotations

import concurrent.futures
import functools
import importlib.util
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from tensorconv import backend, precision

_REPO_KERNEL_DIR = Path(__file__).resolve().parent.parent / "kernels_cu"


class KernelCompileError(RuntimeError):
    """NVRTC or nvcc rejected a kernel file; the message holds the full log."""


def kernel_dir() -> Path:
    """Directory holding the ``.cu`` sources (``TENSORCONV_KERNEL_DIR`` wins)."""
    return Path(_kernel_dir_str())


def _kernel_dir_str() -> str:
    """:func:`kernel_dir` as a string: every launch looks its kernel up by it, and a
    ``Path`` made each time cost more than the look-up itself."""
    return _kernel_dir_name(os.environ.get("TENSORCONV_KERNEL_DIR"))


@functools.cache
def _kernel_dir_name(override: str | None) -> str:
    return str(Path(override) if override else _REPO_KERNEL_DIR)


def _candidate_cuda_roots():
    for var in ("CUDA_PATH", "CUDA_HOME"):
        if os.environ.get(var):
            yield Path(os.environ[var]) / "include"
    if backend.cupy_installed():
        import cupy

        try:
            root = cupy.cuda.get_cuda_path()
        except Exception:  # CuPy without a toolkit path of its own: try the others
            root = None
        if root:
            yield Path(root) / "include"
    yield Path("/usr/local/cuda/include")
    # CUDA from pip wheels (cuda-toolkit / nvidia-* packages) keeps headers in site-packages.
    spec = importlib.util.find_spec("nvidia")
    for base in (spec.submodule_search_locations if spec else None) or ():
        base = Path(base)
        yield from sorted(base.glob("cu*/include"))
        yield from sorted(base.glob("cuda_*/include"))


@functools.cache
def cuda_include_dirs() -> tuple[str, ...]:
    """CUDA toolkit include directories found at run time.

    NVRTC (as used by CuPy 14) does not find ``crt/mma.h`` on its own, so WMMA
    kernels fail to compile unless the toolkit's include directory is passed.
    Directories holding ``crt/mma.h`` come first; duplicates are dropped.
    """
    with_mma, plain = [], []
    for d in _candidate_cuda_roots():
        if (d / "crt" / "mma.h").is_file():
            with_mma.append(str(d))
        elif (d / "cuda_runtime.h").is_file():
            plain.append(str(d))
    return tuple(dict.fromkeys(with_mma + plain))


ARCH_SPECIFIC = "TC_ARCH_SPECIFIC"   # the define of a kernel built for the ``sm_XYa`` target


def compile_options(defines: dict | None = None, extra: tuple[str, ...] = (),
                    arch: str | None = None) -> tuple[str, ...]:
    """Options shared by every kernel: C++17, our header directory, the CUDA headers; and
    for a kernel whose defines hold :data:`ARCH_SPECIFIC`, the device's arch-specific
    target (``-arch=sm_90a`` for ``arch="sm_90"``: wgmma), which NVRTC takes over CuPy's
    own ``-arch``.  ``TENSORCONV_LINEINFO=1`` adds ``-lineinfo`` (source lines for a
    profiler's per-line counters; the code is the same, and the disk cache keys on it)."""
    opts = ["-std=c++17", f"-I{kernel_dir()}"]
    if os.environ.get("TENSORCONV_LINEINFO") == "1":
        opts.append("-lineinfo")
    opts += [f"-I{d}" for d in cuda_include_dirs()]
    for key, value in sorted((defines or {}).items()):
        opts.append(f"-D{key}" if value is None else f"-D{key}={value}")
    if ARCH_SPECIFIC in (defines or {}):
        if arch is None:
            raise ValueError(f"{ARCH_SPECIFIC} kernels need the device's arch")
        opts.append(f"-arch={arch}a")
    return tuple(opts) + tuple(extra)


@functools.cache
def _includes(directory: str, file: str) -> frozenset:
    """The local headers ``file`` includes, directly or through other headers."""
    seen, todo = set(), [file]
    while todo:
        text = (Path(directory) / todo.pop()).read_text()
        for header in re.findall(r'^#include "([^"]+)"', text, re.MULTILINE):
            if header not in seen:
                seen.add(header)
                todo.append(header)
    return frozenset(seen)


def includes(file: str) -> frozenset:
    """The local headers ``kernels_cu/<file>`` includes, directly or through other headers."""
    return _includes(_kernel_dir_str(), file)


def uses_tensor_cores(file: str) -> bool:
    """Whether ``kernels_cu/<file>`` is built on ``tc_mma.cuh``, so that
    :mod:`tensorconv.precision` changes what it computes."""
    return "tc_mma.cuh" in includes(file)


@dataclass(frozen=True)
class KernelRef:
    """One kernel: ``kernels_cu/<file>``'s ``name`` (a template's instantiation, e.g.
    ``"conv2d_direct_fwd<8, 3, 3>"``) compiled with ``defines`` (sorted ``(key, value)``
    pairs).  Make them with :func:`kernel_ref`, which adds the precision's defines."""

    file: str
    name: str
    defines: tuple = ()


def kernel_ref(file: str, name: str, defines: dict | None = None, *,
               arch_specific: bool = False) -> KernelRef:
    """The :class:`KernelRef` of ``name`` in ``file``; a file built on ``tc_mma.cuh`` also
    takes the defines of the current :mod:`tensorconv.precision`.  ``arch_specific``:
    built for the device's ``sm_XYa`` target (instructions of that architecture alone,
    such as sm_90's wgmma), which only that architecture runs."""
    if uses_tensor_cores(file):
        defines = {**precision.mma_defines(), **(defines or {})}
    if arch_specific:
        defines = {**(defines or {}), ARCH_SPECIFIC: 1}
    return KernelRef(file, name, tuple(sorted((defines or {}).items())))


_WAITING_FUNCTIONS: set[int] = set()  # CUfunction handles of kernels that wait (below)


def every_kernel_waits(source: str) -> bool:
    """Whether every kernel defined in ``source`` (a ``.cu`` file's text) calls
    ``tc::wait_prior_grids()`` before anything else, so it cannot touch memory an
    earlier kernel still uses when launched early (:mod:`tensorconv.graph`)."""
    code = re.sub(r"//[^\n]*", "", source)
    heads = re.finditer(r'^(?:extern "C" )?__global__[^{;]*\{', code, re.MULTILINE)
    bodies = [m.end() for m in heads]
    return bool(bodies) and all(code[b:].lstrip().startswith("tc::wait_prior_grids();")
                                for b in bodies)


def waits_for_prior_grids(function_handle: int) -> bool:
    """Whether the kernel behind a ``CUfunction`` handle was loaded by :func:`get_kernel`
    from a file where :func:`every_kernel_waits`."""
    return int(function_handle) in _WAITING_FUNCTIONS


_LOADED: set = set()  # _load keys compiled in this process (compile_all skips them)


@functools.cache
def _module(directory: str, file: str, name_expression: str, defines: tuple,
            backend_name: str, device: int):
    """The ``cupy.RawModule`` of one kernel (compiled when first used); memoised."""
    cupy = backend.require_cuda(f"kernel {name_expression} from {file}")
    path = Path(directory) / file
    if not path.is_file():
        raise FileNotFoundError(f"kernel file {file!r} not found in {directory}")
    options = compile_options(dict(defines), arch=backend.device_facts(device).arch)
    return cupy.RawModule(code=path.read_text(), options=options,
                          backend=backend_name, name_expressions=[name_expression])


@functools.cache
def _load(directory: str, file: str, name_expression: str, defines: tuple, backend_name: str,
          device: int):
    """Compile (or fetch from CuPy's disk cache) one kernel; memoised per process."""
    cupy = backend.require_cuda(f"kernel {name_expression} from {file}")
    path = Path(directory) / file
    arch = backend.device_facts(device).arch
    options = compile_options(dict(defines), arch=arch)
    try:
        module = _module(directory, file, name_expression, defines, backend_name, device)
        source = path.read_text()
        kernel = module.get_function(name_expression)
        if every_kernel_waits(source):
            _WAITING_FUNCTIONS.add(int(kernel.kernel.ptr))  # compiles now rather than at launch
        _LOADED.add((directory, file, name_expression, defines, backend_name, device))
        return kernel
    except cupy.cuda.compiler.CompileException as exc:
        raise KernelCompileError(
            f"{backend_name} failed to compile {path} for {name_expression} ({arch})\n"
            f"options: {' '.join(options)}\n{exc}") from exc


def load(ref: KernelRef, backend_name: str = "nvrtc"):
    """The compiled kernel ``ref`` names, on the current device (compiled on first use).

    Later calls are a dictionary look-up, cheap enough for every op launch.  Sources
    are not re-read within a process; CuPy's on-disk cache is keyed by the source text
    and the options, so an edited kernel is rebuilt next run.

    Returns
    -------
    cupy.RawKernel
        Call it as ``kernel(grid, block, args, shared_mem=...)``.
    """
    cupy = backend.require_cuda(f"kernel {ref.name} from {ref.file}")
    return _load(_kernel_dir_str(), ref.file, ref.name, ref.defines, backend_name,
                 cupy.cuda.runtime.getDevice())


def module_global(ref: KernelRef, symbol: str, backend_name: str = "nvrtc"):
    """A ``__device__`` / ``__constant__`` variable ``symbol`` of the module ``ref``'s kernel
    is loaded from (each kernel reference is its own module), as a ``cupy.cuda.MemoryPointer``
    on the current device: set it before a launch of that kernel."""
    cupy = backend.require_cuda(f"{symbol} of {ref.file}")
    load(ref, backend_name)                  # compiled, so the symbol exists
    return _global(str(kernel_dir()), ref, symbol, backend_name, cupy.cuda.runtime.getDevice())


@functools.cache   # looked up once: a later call may be inside a CUDA-graph capture
def _global(directory: str, ref: KernelRef, symbol: str, backend_name: str, device: int):
    return _module(directory, ref.file, ref.name, ref.defines, backend_name,
                   device).get_global(symbol)


def get_kernel(file: str, name_expression: str, *, defines: dict | None = None,
               backend_name: str = "nvrtc"):
    """:func:`load` of :func:`kernel_ref` ``(file, name_expression, defines)``.

    Parameters
    ----------
    file : str
        File name inside :func:`kernel_dir`, e.g. ``"direct_conv.cu"``.
    name_expression : str
        The kernel's name; for a template, its instantiation, e.g.
        ``"conv2d_direct_fwd<8, 3, 3>"``.
    defines : dict, optional
        Compile-time constants passed as ``-DKEY=VALUE`` (``None`` value: ``-DKEY``).
    backend_name : {"nvrtc", "nvcc"}
        CuPy's compiler backend.
    """
    return load(kernel_ref(file, name_expression, defines), backend_name)


def compile_weight(ref: KernelRef) -> tuple:
    """How long ``ref`` takes to compile, as an order: tensor-core kernels first, then by the
    product of the template's integer arguments (filter size times fragments per warp:
    what the compiler unrolls).  On a cold start the slowest build bounds the pool's wall
    time, so it must not start last."""
    ints = [int(v) for v in re.findall(r"\d+", ref.name.partition("<")[2])]
    return uses_tensor_cores(ref.file), math.prod(ints)


def compile_all(refs, *, desc: str = "compiling kernels", workers: int | None = None) -> int:
    """Compile every kernel of ``refs`` not yet loaded in this process, in parallel.

    NVRTC releases the GIL while it compiles, so a pool of ``workers`` threads (default:
    ``TENSORCONV_COMPILE_THREADS``, else one per CPU core, at most 32) keeps that many
    compiles going; a progress bar, shown
    once the wait passes two seconds, says how many there are and what they are for.
    Compile errors are raised (the first one) after the others have finished.

    Parameters
    ----------
    refs : iterable of KernelRef
    desc : str
        What the kernels are for, shown on the progress bar.

    Returns
    -------
    int
        How many kernels were compiled (the others were loaded already).
    """
    cupy = backend.require_cuda(desc)
    device, directory = cupy.cuda.runtime.getDevice(), str(kernel_dir())
    todo = [r for r in dict.fromkeys(refs)
            if (directory, r.file, r.name, r.defines, "nvrtc", device) not in _LOADED]
    if not todo:
        return 0
    todo.sort(key=compile_weight, reverse=True)  # the longest builds start first

    def compile_one(ref):
        with cupy.cuda.Device(device):  # a new thread starts on device 0
            _load(directory, ref.file, ref.name, ref.defines, "nvrtc", device)

    workers = (workers or int(os.environ.get("TENSORCONV_COMPILE_THREADS", 0))
               or min(32, os.cpu_count() or 1))
    first_error = None
    with concurrent.futures.ThreadPoolExecutor(workers) as pool, \
            tqdm(total=len(todo), desc=f"{desc} ({len(todo)} kernels)", unit="kernel",
                 delay=2, leave=False) as bar:
        for done in concurrent.futures.as_completed([pool.submit(compile_one, r) for r in todo]):
            bar.update()
            if done.exception() is not None and first_error is None:
                first_error = done.exception()
    if first_error is not None:
        raise first_error
    return len(todo)


_SMEM_GRANTED: dict = {}  # kernel -> dynamic bytes already allowed (attribute queries cost µs)


def set_dynamic_smem(kernel, nbytes: int) -> None:
    """Allow ``kernel`` to launch with ``nbytes`` of dynamic shared memory.

    Blocks may use more than 48 KiB only after this opt-in; asking for more than
    the device allows raises ``ValueError`` before any launch.
    """
    if nbytes <= _SMEM_GRANTED.get(kernel, -1):
        return
    limit = backend.device_facts().smem_per_block_optin - kernel.shared_size_bytes
    if nbytes > limit:
        raise ValueError(f"tile needs {nbytes} bytes of shared memory; the device allows {limit}")
    if nbytes > kernel.max_dynamic_shared_size_bytes:
        kernel.max_dynamic_shared_size_bytes = nbytes
    _SMEM_GRANTED[kernel] = max(nbytes, _SMEM_GRANTED.get(kernel, -1))


@functools.cache
def fast_div(d: int):
    """``tdcx::FastDiv`` constants of ``kernels_cu/tc_cluster.cuh`` for divisor ``d``, packed.

    A kernel divides by a launch-uniform ``d`` (1 <= d < 2^16, dividends below
    2^31) as ``(umulhi(n, m) + n) >> l`` with ``l = ceil(log2 d)`` and
    ``m = floor(2^32 (2^l - d) / d) + 1``; computing them here spares every
    thread the set-up.  Returns ``numpy.uint64``: m in bits 0-31, l in 32-39,
    d in 40-55 (``FastDiv::of`` unpacks it).
    """
    if not 1 <= d < 1 << 16:
        raise ValueError(f"fast_div needs 1 <= d < 65536, got {d}")
    lg = (d - 1).bit_length()
    m = (((1 << lg) - d) << 32) // d + 1
    return np.uint64(m | lg << 32 | d << 40)
