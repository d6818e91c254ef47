"""Dense fp32 convolution (``kernels_cu/direct_conv.cu``): forward and both gradients.

Any filter, stride, padding, dilation, groups and batch, by one of five algorithms that
:func:`~tensorconv.ops.conv_algorithm.choose_algorithm` picks:

* ``"igemm_tf32x3"``: the tensor-core implicit GEMM at fp32 accuracy
  (:mod:`tensorconv.ops.igemm_tf32x3`; a 1x1 strided data gradient by
  :mod:`tensorconv.ops.zero_insert`), for large layers on sm_80+;
* ``"igemm"``: 64x64 fp32 register tiles and a split reduction, for outputs too small to
  fill the GPU (batch 1, deep layers);
* ``"direct"``: the forward one output pixel a thread, ``tk`` channels a thread (thin
  groups and reductions, a stem's); the weight gradient by :mod:`tensorconv.ops.direct_wgrad`;
* ``"depthwise"`` (:mod:`tensorconv.ops.depthwise_conv`) and ``"winograd"`` (F(2x2, 3x3),
  :mod:`tensorconv.ops.winograd_conv`: stride-1 3x3 passes).  The forward fuses bias,
  residual and ReLU.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np

from tensorconv import backend, cuda, reference
from tensorconv.backend import DeviceFacts
from tensorconv.checks import (
    ConvGeometry,
    check_array,
    check_bools,
    check_choice,
    check_conv_args,
    check_disjoint,
    check_residual,
    conv_geometry,
    output_buffer,
)
from tensorconv.ops import (
    _igemm,
    depthwise_conv,
    direct_wgrad,
    igemm_tf32x3,
    winograd_conv,
    zero_insert,
)
from tensorconv.ops._launch import cdiv, check_smem, cpu_epilogue, launch, next_pow2, ptr
from tensorconv.ops.conv_algorithm import choose_algorithm
from tensorconv.scratch import workspace

FILE = "direct_conv.cu"
FILES = (FILE, igemm_tf32x3.FILE, depthwise_conv.FILE, winograd_conv.FILE,   # every kernel
         winograd_conv.winograd_wgrad.FILE, direct_wgrad.FILE, zero_insert.FILE)   # file run
Problem = ConvGeometry
ALGORITHMS = ("direct", "igemm", "igemm_tf32x3", "depthwise", "winograd")
GRADIENT_ALGORITHMS = ("igemm", "igemm_tf32x3", "depthwise", "winograd", "direct")
_TK_CHOICES = (16, 8, 4, 2, 1)      # instantiated in direct_conv.cu
_FIXED_FILTERS = ((1, 1), (3, 3))   # filter sizes with an unrolled instantiation
_SMEM_BUDGET = 48 * 1024            # the default per-block limit: no opt-in needed
_MAX_STAGE_CHANNELS = 16
_IG_BN, _IG_BK = 64, 16  # tile columns and reduction depth; rows are igemm_rows(m)
_IG_THREADS = 256


@dataclass(frozen=True)
class Tile:
    """The ``"direct"`` block: ``th x tw`` output pixels (a thread each), ``tk`` channels a
    thread, ``cc`` input channels staged at a time (``"igemm"``'s follows the GEMM)."""

    th: int
    tw: int
    tk: int
    cc: int

    def smem_bytes(self, p: Problem) -> int:
        """Dynamic shared memory the tile needs for ``p`` (input patch + weights)."""
        iht = (self.th - 1) * p.stride[0] + (p.r - 1) * p.dilation[0] + 1
        iwt = (self.tw - 1) * p.stride[1] + (p.s - 1) * p.dilation[1] + 1
        return 4 * self.cc * (iht * iwt + p.r * p.s * self.tk)

    def grid(self, p: Problem) -> tuple[int, int, int]:
        """(pixel tiles, groups x channel tiles, batch)."""
        k_tiles = cdiv(p.k // p.groups, self.tk)
        return cdiv(p.oh, self.th) * cdiv(p.ow, self.tw), p.groups * k_tiles, p.n


def supported(p: Problem) -> str | None:
    """Every convolution runs here (None): the implicit GEMM takes any geometry."""
    return None


def candidates(p: Problem, facts: DeviceFacts) -> list[Tile]:
    """The ``"direct"`` tiles: this kernel is not tuned, so its heuristic tile alone."""
    return [default_tile(p, facts)]


def default_tile(p: Problem, facts: DeviceFacts) -> Tile:
    """Pick a ``"direct"`` tile for ``p``: fill the output width, ~128 threads, the widest
    ``tk`` (most weight reuse) that still gives two blocks per SM, and the most staged
    channels ``cc`` that fit the 48 KiB default shared-memory limit."""
    tw = min(32, max(4, next_pow2(p.ow)))
    th = min(max(1, 128 // tw), next_pow2(p.oh))
    kg = p.k // p.groups
    spatial = cdiv(p.oh, th) * cdiv(p.ow, tw) * p.n * p.groups
    tk = 1
    for cand in _TK_CHOICES:
        if cand > 1 and cand >= 2 * kg:
            continue  # more than half the accumulators would be idle
        tk = cand
        if spatial * cdiv(kg, cand) >= 2 * facts.sm_count:
            break
    per_channel = Tile(th, tw, tk, 1).smem_bytes(p)
    cc = max(1, min(p.c // p.groups, _MAX_STAGE_CHANNELS, _SMEM_BUDGET // per_channel))
    return Tile(th, tw, tk, cc)


@functools.lru_cache(maxsize=4096)
def igemm_rows(m: int) -> int:
    """Tile rows per block (16, 32 or 64): the smallest that holds a group's ``m`` rows."""
    return 16 if m <= 16 else 32 if m <= 32 else 64


def igemm_splits(geom: ConvGeometry, sm_count: int = 132, mode: int = 0) -> int:
    """Reduction splits for about two waves of blocks, each of four 16-deep steps or more."""
    m, p, q = _igemm.gemm_sizes(geom, mode)
    blocks = cdiv(p, _IG_BN) * cdiv(m, igemm_rows(m)) * geom.groups
    return max(1, min(cdiv(2 * sm_count, blocks), cdiv(q, _IG_BK) // 4, _igemm.MAX_SPLITS))


def check_tile(tile: Tile, geom: ConvGeometry) -> None:
    """Raise ``ValueError`` naming what is wrong with a ``"direct"`` ``tile`` for ``geom``."""
    if not isinstance(tile, Tile):
        raise ValueError(f"tile {tile!r} is not a direct_conv.Tile")
    if tile.tk not in _TK_CHOICES:
        raise ValueError(f"tile.tk must be one of {_TK_CHOICES}, got {tile.tk}")
    if min(tile.th, tile.tw, tile.cc) < 1 or tile.th * tile.tw > 1024:
        raise ValueError(f"tile {tile} needs 1 <= th*tw <= 1024 threads and cc >= 1")
    check_smem(tile, tile.smem_bytes(geom))


def _fixed(geom: ConvGeometry) -> tuple[int, int]:
    """The filter size a kernel is instantiated for (0, 0: taken at run time)."""
    return (geom.r, geom.s) if (geom.r, geom.s) in _FIXED_FILTERS else (0, 0)


def _direct_name(tk: int, kr: int, ks: int) -> str:
    return f"conv2d_direct_fwd<{tk}, {kr}, {ks}>"


def _igemm_name(mode: int, kr: int, ks: int, tm: int) -> str:
    return f"conv2d_igemm<{mode}, {kr}, {ks}, {tm}>"


def kernels(geom: ConvGeometry, algorithm: str, tile=None,
            mode: int = 0) -> tuple[cuda.KernelRef, ...]:
    """The kernels a launch of ``algorithm`` on ``tile`` (default: its default tile) runs in
    ``mode`` (0 forward, 1 data gradient, 2 weight gradient), split reduction included."""
    kr, ks = _fixed(geom)
    if algorithm == "depthwise":
        return depthwise_conv.kernels(geom, mode)
    if algorithm == "winograd":
        return winograd_conv.pass_kernels(geom, mode)
    if algorithm == "direct" and mode == 2:
        return direct_wgrad.kernels(geom, tile)
    if algorithm == "direct":
        tile = tile or default_tile(geom, backend.device_facts())
        return (cuda.kernel_ref(FILE, _direct_name(tile.tk, kr, ks)),)
    if algorithm == "igemm_tf32x3" and mode == 1 and tile is None and zero_insert.takes(geom):
        return zero_insert.data_gradient_kernels(geom, backend.device_facts())
    if algorithm == "igemm_tf32x3":
        p = igemm_tf32x3.problem(geom, mode)
        return igemm_tf32x3.kernels(p, tile or igemm_tf32x3.default_tile(
            p, backend.device_facts()))
    rows = igemm_rows(_igemm.gemm_sizes(geom, mode)[0])
    return (cuda.kernel_ref(FILE, _igemm_name(mode, kr, ks, rows // 16)), _igemm.reduce_ref())


def instantiations() -> list[str]:
    """What CI's nvcc build type-checks: every template the op may request."""
    sizes = (0, 0), *_FIXED_FILTERS
    names = {_direct_name(tk, kr, ks) for tk in _TK_CHOICES for kr, ks in sizes}
    names |= {_igemm_name(mode, kr, ks, tm) for mode in (0, 1, 2) for kr, ks in sizes
              for tm in (1, 2, 4)}
    return sorted(names)


def _launch_direct(x, w, bias, residual, out, geom, tile, relu):
    i32 = np.int32
    tiles_w = cdiv(geom.ow, tile.tw)
    k_tiles = cdiv(geom.k // geom.groups, tile.tk)
    args = ((x, w, bias, residual, out) + _igemm.geometry_ints(geom)[1:]
            + (i32(tiles_w), i32(k_tiles), i32(tile.cc), i32(relu)))
    launch(kernels(geom, "direct", tile)[0], tile.grid(geom), (tile.tw, tile.th, 1), args,
           tile.smem_bytes(geom))


@functools.lru_cache(maxsize=4096)
def _igemm_config(geom: ConvGeometry, mode: int, splits: int, relu: bool, device: int):
    """One implicit-GEMM launch's kernels, grid and integers, cached (a step launches 100s)."""
    i32 = np.int32
    m, p, q = _igemm.gemm_sizes(geom, mode)
    q_per_split, splits = _igemm.split_depth(q, _IG_BK, splits)
    m_tiles = cdiv(m, igemm_rows(m))
    kernel = cuda.load(kernels(geom, "igemm", mode=mode)[0])
    grid = (cdiv(p, _IG_BN), geom.groups * m_tiles, splits)
    ints = _igemm.geometry_ints(geom) + (i32(m_tiles), i32(q_per_split), i32(relu))
    reduce = (_igemm.reduce_config(geom, mode, splits, relu, backend.device_facts().sm_count)
              if splits > 1 else None)
    return kernel, grid, ints, _igemm.workspace_floats(geom, mode, splits), reduce


def _launch_igemm(mode: int, a, b, bias, residual, out, geom, splits, relu, xp):
    """Run ``conv2d_igemm<mode>`` (and the split reduction when ``splits > 1``)."""
    kernel, grid, ints, floats, reduce = _igemm_config(geom, mode, splits, bool(relu),
                                                       xp.cuda.runtime.getDevice())
    partial = ptr(workspace(xp, floats) if floats else None)
    bias, residual = ptr(bias), ptr(residual)
    kernel(grid, (_IG_THREADS, 1, 1), (a, b, bias, residual, out, partial) + ints)
    if reduce is not None:
        rkernel, rgrid, rints = reduce
        rkernel(rgrid, (256, 1, 1), (partial, bias, residual, out) + rints)


def _check_gemm_options(algorithm, tile, splits, geom, mode):
    """Check an implicit-GEMM call's options (any mode); returns the algorithm, or None."""
    if algorithm is not None:
        check_choice(algorithm, "algorithm", ALGORITHMS if mode == 0 else GRADIENT_ALGORITHMS)
    _igemm.check_splits(splits)
    if algorithm == "depthwise":
        depthwise_conv.check_options(geom, mode, tile, splits)
    if algorithm == "winograd":
        winograd_conv.check_pass(geom, mode, tile, splits)
    if algorithm == "direct":   # the forward's tile is checked where it runs
        direct_wgrad.check_options(geom, mode, tile, splits)
    if algorithm is None:
        algorithm = "direct" if isinstance(tile, (Tile, direct_wgrad.Tile)) else (
            "igemm_tf32x3" if isinstance(tile, igemm_tf32x3.Tile) else None)
    return algorithm


def _run_gemm(algorithm, mode, a, b, bias, residual, out, geom, tile, splits, relu, xp):
    """Launch ``mode`` on ``algorithm`` after checking ``tile`` and ``splits`` against it."""
    facts = backend.device_facts()
    if algorithm == "depthwise":
        return depthwise_conv.run_gemm_order(mode, a, b, bias, residual, out, geom, relu, splits)
    if algorithm == "winograd":
        return winograd_conv.run_pass(mode, a, b, bias, residual, out, geom, relu)
    if algorithm == "direct":   # the weight gradient's (a, b = gy, x); checked options
        tile = direct_wgrad.check_options(geom, 2, tile, splits)
        return direct_wgrad.run(b, a, out, geom, tile, xp)
    if algorithm == "igemm":
        if tile is not None:
            raise ValueError("tile applies to algorithm='direct' or 'igemm_tf32x3' only")
        return _launch_igemm(mode, a, b, bias, residual, out, geom,
                             splits or igemm_splits(geom, facts.sm_count, mode), relu, xp)
    p = igemm_tf32x3.problem(geom, mode)
    if not igemm_tf32x3.device_supported(facts):
        raise ValueError(f"algorithm='igemm_tf32x3' needs sm_80 or later; {facts.name} is "
                         f"{facts.arch}")
    if (why := igemm_tf32x3.supported(p)) is not None:
        raise ValueError(why)
    if mode == 1 and tile is None and splits is None and zero_insert.takes(geom):
        return zero_insert.data_gradient(a, b, residual, out, geom, xp)   # (1x1, strided)
    default = tile is None
    tile = tile or igemm_tf32x3.default_tile(p, facts)
    if splits is not None:
        tile = dataclasses.replace(tile, splits=int(splits))
        if default:   # the default's halo choice depends on its split
            tile = dataclasses.replace(tile, halo=igemm_tf32x3.halo_wins(p, tile))
    igemm_tf32x3.check_tile(tile, p, facts)
    igemm_tf32x3.run(p, a, b, bias, residual, out, tile, relu, xp)


def conv2d(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1, *, relu=False,
           residual=None, out=None, algorithm: str | None = None,
           tile=None, splits: int | None = None):
    """fp32 2-D convolution (cross-correlation), NCHW, with fused bias, residual and ReLU.

    Computes ``relu?(conv(x, w) + bias + residual)``.

    Parameters
    ----------
    x : array, (N, C, H, W), float32, C-contiguous
        NumPy runs on the CPU; CuPy (or a PyTorch CUDA tensor through DLPack,
        not copied) runs the CUDA kernels.
    w : array, (K, C // groups, R, S), float32, same device as ``x``
    bias : array, (K,), float32, optional
    stride, padding, dilation : int or (int, int)
    groups : int
        Must divide both C and K (``groups == C`` is a depthwise convolution).
    relu : bool
        Apply ``max(., 0)`` last, inside the kernel.
    residual : array, (N, K, OH, OW), float32, optional
        Added before the ReLU (a ResNet block's shortcut).
    out : array, (N, K, OH, OW), float32, optional
        Written in place (GPU only); lets a CUDA graph reuse one buffer.
    algorithm : {"igemm_tf32x3", "igemm", "direct", "depthwise", "winograd"}, optional
        Default: :func:`choose_algorithm`'s (the module's docstring says which takes what).
    tile : Tile or igemm_tf32x3.Tile, optional
        Overrides the ``"direct"`` or ``"igemm_tf32x3"`` heuristic tile (for tuning); its
        type picks the algorithm when ``algorithm`` is not given.
    splits : int, optional
        Overrides an implicit GEMM's reduction split (for tuning).

    Returns
    -------
    array, (N, K, OH, OW), float32, on the device of ``x``
    """
    check_bools(relu=relu)
    x, w = backend.as_array(x, "x"), backend.as_array(w, "w")
    bias = None if bias is None else backend.as_array(bias, "bias")
    geom = check_conv_args(x, w, bias, stride, padding, dilation, groups,
                           dtype=np.float32, contiguous=True)
    algorithm = _check_gemm_options(algorithm, tile, splits, geom, 0)
    xp = backend.array_module(x)
    residual = check_residual(residual, geom.output_shape, xp)
    if xp is np:
        if out is not None:
            raise ValueError("out is supported on the GPU path only")
        return cpu_epilogue(reference.conv2d(x, w, bias, geom.stride, geom.padding,
                                             geom.dilation, geom.groups), residual, relu)

    out = output_buffer(xp, out, geom.output_shape)
    facts = backend.device_facts()
    algorithm = algorithm or choose_algorithm(geom, 0, facts)
    if algorithm == "direct":
        if splits is not None:
            raise ValueError("splits applies to the implicit-GEMM algorithms only")
        tile = tile or default_tile(geom, facts)
        check_tile(tile, geom)
        _launch_direct(x, w, ptr(bias), ptr(residual), out, geom, tile, bool(relu))
    else:
        _run_gemm(algorithm, 0, w, x, bias, residual, out, geom, tile, splits, bool(relu), xp)
    return out


def _check_grad_args(gy, geom, xp):
    check_array(gy, "gy", ndim=4, dtype=np.float32, contiguous=True, xp=xp)
    if tuple(gy.shape) != geom.output_shape:
        raise ValueError(f"gy has shape {tuple(gy.shape)}; the convolution's output is "
                         f"{geom.output_shape}")


def conv2d_backward_data(gy, w, x_shape, stride=1, padding=0, dilation=1, groups=1, *,
                         addend=None, out=None, algorithm: str | None = None, tile=None,
                         splits: int | None = None):
    """Gradient of :func:`conv2d` with respect to ``x`` (fp32), plus ``addend`` if given.

    Parameters
    ----------
    gy : array, (N, K, OH, OW), float32, C-contiguous
    w : array, (K, C // groups, R, S), float32
    x_shape : tuple (N, C, H, W)
    addend : array, (N, C, H, W), float32, optional, not sharing ``out``'s memory
        ``x``'s gradient from another reader (a shortcut's): returns ``addend + gx``.
    out : array, (N, C, H, W), float32, optional (GPU only)
    algorithm, tile, splits
        As for :func:`conv2d` (mode 1 of :func:`choose_algorithm`; not ``"direct"``).

    Returns
    -------
    array, (N, C, H, W), float32
    """
    gy, w = backend.as_array(gy, "gy"), backend.as_array(w, "w")
    xp = backend.array_module(gy)
    check_array(w, "w", ndim=4, dtype=np.float32, contiguous=True, xp=xp)
    if len(x_shape) != 4:
        raise ValueError(f"x_shape must be (N, C, H, W), got {x_shape!r}")
    geom = conv_geometry(tuple(x_shape), w.shape, stride, padding, dilation, groups)
    _check_grad_args(gy, geom, xp)
    addend = check_residual(addend, tuple(x_shape), xp, "addend")
    algorithm = _check_gemm_options(algorithm, tile, splits, geom, 1)
    if xp is np:
        gx = reference.conv2d_backward_data(gy, w, x_shape, geom.stride, geom.padding,
                                            geom.dilation, geom.groups)
        return gx if addend is None else addend + gx
    out = output_buffer(xp, out, tuple(x_shape))
    check_disjoint(addend, "addend", out, "out")
    algorithm = algorithm or choose_algorithm(geom, 1)
    in_epilogue = addend if algorithm == "igemm_tf32x3" else None   # added as gx is stored
    _run_gemm(algorithm, 1, w, gy, None, in_epilogue, out, geom, tile, splits, False, xp)
    if addend is not None and in_epilogue is None:
        xp.add(addend, out, out=out)
    return out


def conv2d_backward_weight(x, gy, w_shape, stride=1, padding=0, dilation=1, groups=1, *,
                           out=None, algorithm: str | None = None, tile=None,
                           splits: int | None = None):
    """Gradient of :func:`conv2d` with respect to ``w`` (fp32).

    Parameters
    ----------
    x : array, (N, C, H, W), float32, C-contiguous
    gy : array, (N, K, OH, OW), float32, C-contiguous
    w_shape : tuple (K, C // groups, R, S)
    out : array, (K, C // groups, R, S), float32, optional (GPU only)
    algorithm, tile, splits
        As for :func:`conv2d` (mode 2 of :func:`choose_algorithm`); ``"direct"`` is
        :mod:`~tensorconv.ops.direct_wgrad` (``tile`` a ``direct_wgrad.Tile``).

    Returns
    -------
    array, (K, C // groups, R, S), float32
    """
    x, gy = backend.as_array(x, "x"), backend.as_array(gy, "gy")
    xp = backend.array_module(x)
    check_array(x, "x", ndim=4, dtype=np.float32, contiguous=True)
    if len(w_shape) != 4:
        raise ValueError(f"w_shape must be (K, C // groups, R, S), got {w_shape!r}")
    geom = conv_geometry(x.shape, tuple(w_shape), stride, padding, dilation, groups)
    _check_grad_args(gy, geom, xp)
    algorithm = _check_gemm_options(algorithm, tile, splits, geom, 2)
    if xp is np:
        return reference.conv2d_backward_weight(x, gy, w_shape, geom.stride, geom.padding,
                                                geom.dilation, geom.groups)
    out = output_buffer(xp, out, tuple(w_shape))
    algorithm = algorithm or choose_algorithm(geom, 2)
    _run_gemm(algorithm, 2, gy, x, None, None, out, geom, tile, splits, False, xp)
    return out
