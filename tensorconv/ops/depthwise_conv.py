"""Depthwise fp32 convolution (``kernels_cu/depthwise_conv.cu``): forward and both gradients.

A depthwise layer (``groups == C``; each channel's ``M = K / C`` filters see that channel
alone) moves far more bytes than it multiplies, so its kernels are one value per thread,
reading the R x S neighbours through L1, with no tile to choose: the forward (bias,
residual and ReLU fused), the data gradient (each input value written once) and the
weight gradient (per-block sums over a share of the pixels, added in a fixed order:
deterministic, no atomics).  The implicit GEMM the other convolutions use has one-row
groups here and idles most of each tile.

:func:`tensorconv.ops.conv2d` and its two gradients run these as ``algorithm="depthwise"``,
the default wherever :func:`supported` allows; :func:`depthwise_conv2d` is the forward on
its own.
"""

from __future__ import annotations

import functools

import numpy as np

from tensorconv import backend, cuda, reference
from tensorconv.checks import ConvGeometry, check_bools, conv_call, output_buffer
from tensorconv.ops import _igemm
from tensorconv.ops._launch import NULL, cdiv, cpu_epilogue, no_out_on_cpu, ptr
from tensorconv.scratch import workspace

FILE = "depthwise_conv.cu"
Problem = ConvGeometry
FILTERS = ((1, 1), (3, 3), (5, 5), (7, 7))   # the filter sizes the kernels are built for
THREADS = 256
MAX_SPLITS = _igemm.MAX_SPLITS
_MAX_PLANE = 1 << 16          # FastDiv's divisor limit (tensorconv.cuda.fast_div)
_MAX_VALUES = 1 << 31         # flat int indices
_BLOCKS_PER_SM = 16           # the grid-stride loops' grid: enough blocks to hide latency


def supported(p: Problem) -> str | None:
    """Why the depthwise kernels cannot run ``p``, or None."""
    if p.groups != p.c:
        return f"not depthwise: groups {p.groups} != C {p.c}"
    if (p.r, p.s) not in FILTERS:
        return f"the depthwise kernels take {p.r}x{p.s} filters only as one of {FILTERS}"
    if p.k >= _MAX_PLANE:
        return f"{p.k} output channels: the kernels take fewer than {_MAX_PLANE}"
    if max(p.h * p.w, p.oh * p.ow) >= _MAX_PLANE:
        return f"planes of {_MAX_PLANE} values or more ({p.h}x{p.w} in, {p.oh}x{p.ow} out)"
    if max(p.n * p.c * p.h * p.w, p.n * p.k * p.oh * p.ow) >= _MAX_VALUES:
        return "tensors of 2**31 values or more"
    return None


def _name(kernel: str, r: int, s: int, unit: bool | None = None) -> str:
    return f"{kernel}<{r}, {s}>" if unit is None else f"{kernel}<{r}, {s}, {str(unit).lower()}>"


def _unit(p: Problem) -> bool:
    return p.stride == (1, 1)


def kernels(p: Problem, mode: int = 0) -> tuple[cuda.KernelRef, ...]:
    """The kernels ``mode`` (0 forward, 1 data, 2 weight gradient) runs for ``p``."""
    if mode == 0:
        return (cuda.kernel_ref(FILE, _name("dw_conv_fwd", p.r, p.s)),)
    if mode == 1:
        return (cuda.kernel_ref(FILE, _name("dw_conv_bwd_data", p.r, p.s, _unit(p))),)
    return (cuda.kernel_ref(FILE, _name("dw_conv_bwd_weight", p.r, p.s)), _igemm.reduce_ref())


def instantiations() -> list[str]:
    """Every filter size, both stride forms of the data gradient."""
    names = []
    for r, s in FILTERS:
        names += [_name("dw_conv_fwd", r, s), _name("dw_conv_bwd_weight", r, s),
                  _name("dw_conv_bwd_data", r, s, False), _name("dw_conv_bwd_data", r, s, True)]
    return sorted(names)


def weight_splits(p: Problem, sm_count: int) -> int:
    """Pixel shares of the weight gradient: about four blocks per SM over the K filters,
    each thread still summing eight pixels or more."""
    pixels = p.n * p.oh * p.ow
    return max(1, min(cdiv(4 * sm_count, p.k), cdiv(pixels, 8 * THREADS), MAX_SPLITS))


def _grid(total: int, sm_count: int) -> tuple[int]:
    return (max(1, min(cdiv(total, THREADS), _BLOCKS_PER_SM * sm_count)),)


def _geometry(p: Problem) -> tuple:
    i32 = np.int32
    return (i32(p.c), i32(p.h), i32(p.w), i32(p.k), i32(p.oh), i32(p.ow), i32(p.stride[0]),
            i32(p.stride[1]), i32(p.padding[0]), i32(p.padding[1]), i32(p.dilation[0]),
            i32(p.dilation[1]))


@functools.lru_cache(maxsize=4096)
def _config(p: Problem, mode: int, splits: int, device: int):
    """(kernels, grid, integer arguments) of one launch, cached: a training step launches
    hundreds, and its host work is then the array pointers alone."""
    sms = backend.device_facts().sm_count
    fd = cuda.fast_div
    refs = kernels(p, mode)
    if mode == 0:
        total = p.n * p.k * p.oh * p.ow
        ints = _geometry(p) + (np.int32(total), fd(p.oh * p.ow), fd(p.ow), fd(p.k),
                               fd(p.k // p.c))
        return cuda.load(refs[0]), _grid(total, sms), ints, None
    if mode == 1:
        total = p.n * p.c * p.h * p.w
        ints = _geometry(p) + (np.int32(total), fd(p.h * p.w), fd(p.w), fd(p.c),
                               fd(p.stride[0]), fd(p.stride[1]))
        return cuda.load(refs[0]), _grid(total, sms), ints, None
    pixels = p.n * p.oh * p.ow
    per = cdiv(pixels, splits)
    splits = cdiv(pixels, per)
    ints = _geometry(p) + (np.int32(pixels), np.int32(per), fd(p.oh * p.ow), fd(p.ow),
                           fd(p.k // p.c))
    reduce = _igemm.reduce_config(p, 2, splits, False, sms) if splits > 1 else None
    return cuda.load(refs[0]), (p.k, splits), ints, reduce


def check_options(p: Problem, mode: int, tile=None, splits=None) -> None:
    """``ValueError`` unless these kernels take ``p`` with these options: no tile, and
    ``splits`` (pixel shares) for the weight gradient (mode 2) alone."""
    if (why := supported(p)) is not None:
        raise ValueError(f"algorithm='depthwise': {why}")
    if tile is not None:
        raise ValueError("tile applies to algorithm='direct' or 'igemm_tf32x3' only")
    _igemm.check_splits(splits)
    if splits is not None and mode != 2:
        raise ValueError("algorithm='depthwise' splits the weight gradient only")


def run_gemm_order(mode: int, a, b, bias, residual, out, p: Problem, relu: bool,
                   splits=None) -> None:
    """Launch ``mode`` with the operands in the implicit GEMM's order
    (:mod:`tensorconv.ops._igemm`): ``(w, x)``, ``(w, gy)``, ``(gy, x)``."""
    if mode == 0:
        launch_forward(b, a, bias, residual, out, p, relu)
    elif mode == 1:
        launch_backward_data(b, a, out, p)
    else:
        launch_backward_weight(b, a, out, p, splits)


def launch_forward(x, w, bias, residual, out, p: Problem, relu: bool) -> None:
    """``relu?(conv(x, w) + bias + residual)`` into ``out`` (checked CuPy float32 arrays,
    C-contiguous; ``bias``, ``residual`` may be None)."""
    kernel, grid, ints, _ = _config(p, 0, 1, x.device.id)
    kernel(grid, (THREADS,), (x, w, ptr(bias), ptr(residual), out) + ints + (np.int32(relu),))


def launch_backward_data(gy, w, out, p: Problem) -> None:
    """The data gradient of ``p`` into ``out`` (N, C, H, W) (checked CuPy arrays)."""
    kernel, grid, ints, _ = _config(p, 1, 1, gy.device.id)
    kernel(grid, (THREADS,), (gy, w, out) + ints)


def launch_backward_weight(x, gy, out, p: Problem, splits: int | None = None) -> None:
    """The weight gradient of ``p`` into ``out`` (K, 1, R, S) (checked CuPy arrays);
    ``splits``: pixel shares (default :func:`weight_splits`), summed in a fixed order."""
    _igemm.check_splits(splits)
    splits = splits or weight_splits(p, backend.device_facts().sm_count)
    kernel, grid, ints, reduce = _config(p, 2, splits, x.device.id)
    if reduce is None:
        kernel(grid, (THREADS,), (x, gy, out) + ints)
        return
    xp = backend.array_module(x)
    partial = workspace(xp, grid[1] * p.k * p.r * p.s)
    kernel(grid, (THREADS,), (x, gy, partial) + ints)
    rkernel, rgrid, rints = reduce
    rkernel(rgrid, (256,), (partial, NULL, NULL, out) + rints)


def depthwise_conv2d(x, w, bias=None, stride=1, padding=0, dilation=1, *, relu=False,
                     residual=None, out=None):
    """Depthwise convolution ``relu?(conv(x, w, groups=C) + bias + residual)`` (fp32).

    Parameters
    ----------
    x : array, (N, C, H, W), float32, C-contiguous (NumPy: the reference computes it)
    w : array, (K, 1, R, S), float32, K a multiple of C; (R, S) one of :data:`FILTERS`
    bias : array, (K,), float32, optional
    stride, padding, dilation : int or (int, int)
    relu : bool
    residual : array, (N, K, OH, OW), float32, optional; added before the ReLU
    out : array, (N, K, OH, OW), float32, optional (GPU only)

    Returns
    -------
    array, (N, K, OH, OW), float32
    """
    check_bools(relu=relu)
    groups = x.shape[1] if getattr(x, "ndim", 0) == 4 else 1
    x, w, bias, residual, p = conv_call(x, w, bias, residual, stride, padding, dilation, groups)
    if (why := supported(p)) is not None:
        raise ValueError(why)
    xp = backend.array_module(x)
    if xp is np:
        no_out_on_cpu(out=out)
        return cpu_epilogue(reference.conv2d(x, w, bias, p.stride, p.padding, p.dilation,
                                             p.groups), residual, relu)
    out = output_buffer(xp, out, p.output_shape)
    launch_forward(x, w, bias, residual, out, p, bool(relu))
    return out
