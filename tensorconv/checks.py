"""Argument and geometry checks shared by the references, the ops, the autograd and the engine.

Each check raises ``ValueError`` (shapes, sizes, layout) or ``TypeError``
(dtypes, array kinds) naming the offending argument, before any kernel launch.
Convolution and pooling geometry (output sizes, the arguments' normal forms) lives
here too, so that every layer computes it the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tensorconv import backend


def is_int(value) -> bool:
    """An integer (Python or NumPy), not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def check_int(value, name: str, *, minimum: int | None = None) -> int:
    """``value`` as an ``int``: ``TypeError`` for anything but an integer (a float, a
    string or a bool is refused, never rounded or parsed), ``ValueError`` below
    ``minimum``."""
    if not is_int(value):
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_real(value, name: str, *, low: float | None = None, high: float | None = None,
               low_open: bool = False, high_open: bool = False) -> float:
    """``value`` as a finite ``float`` within the bounds (open where said): ``TypeError``
    for a non-number or a bool, ``ValueError`` for NaN, infinity or out of range."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer,
                                                                    np.floating)):
        raise TypeError(f"{name} must be a real number, got {value!r} ({type(value).__name__})")
    v = float(value)
    if not np.isfinite(v):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if low is not None and (v < low or (low_open and v == low)):
        raise ValueError(f"{name} must be {'>' if low_open else '>='} {low}, got {value!r}")
    if high is not None and (v > high or (high_open and v == high)):
        raise ValueError(f"{name} must be {'<' if high_open else '<='} {high}, got {value!r}")
    return v


def check_bool(value, name: str) -> bool:
    """``value`` when it is a bool (Python or NumPy); else ``TypeError``."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r} ({type(value).__name__})")
    return bool(value)


def check_choice(value, name: str, allowed) -> str:
    """``value`` when it is one of the strings ``allowed``; else ``TypeError`` (not a
    string) or ``ValueError`` (another string), naming ``name`` and the choices."""
    allowed = tuple(allowed)
    if not isinstance(value, str):
        raise TypeError(f"{name} must be one of {allowed}, got {value!r} "
                        f"({type(value).__name__})")
    if value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
    return value


def check_bools(**flags) -> None:
    """:func:`check_bool` on every keyword (``check_bools(relu=relu)``): a flag given as
    ``"no"``, ``1`` or an array is refused, not read as true."""
    for name, value in flags.items():
        check_bool(value, name)


def pair(value, name: str, *, minimum: int) -> tuple[int, int]:
    """Normalise an int or a pair of ints (tuple or list) to ``(h, w)``, each ``>= minimum``.
    Floats, strings and bools are refused, not converted."""
    if is_int(value):
        value = (value, value)
    if not isinstance(value, (tuple, list)) or len(value) != 2 or not all(map(is_int, value)):
        raise TypeError(f"{name} must be an int or a pair of ints, got {value!r}")
    h, w = (int(v) for v in value)
    if h < minimum or w < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {(h, w)}")
    return h, w


def check_array(a, name: str, *, ndim: int, dtype=None, contiguous: bool = False,
                xp=None) -> None:
    """Check one array's kind, rank, emptiness, dtype and (optionally) layout."""
    if not (isinstance(a, np.ndarray) or backend.is_cupy_array(a)):
        raise TypeError(f"{name} must be a NumPy or CuPy array, got {type(a).__name__}")
    if xp is not None and backend.array_module(a) is not xp:
        raise TypeError(f"{name} is on a different device from the other arguments "
                        f"({backend.array_module(a).__name__} vs {xp.__name__})")
    if a.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(a.shape)}")
    if a.size == 0:
        raise ValueError(f"{name} is empty (shape {tuple(a.shape)})")
    if dtype is not None and a.dtype != np.dtype(dtype):
        raise TypeError(f"{name} must be {np.dtype(dtype).name}, got {a.dtype.name}")
    if dtype is None and a.dtype.kind != "f" and a.dtype.name != "bfloat16":   # ml_dtypes'
        raise TypeError(f"{name} must be a floating-point array, got {a.dtype.name}")
    if contiguous and not a.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous (call xp.ascontiguousarray first)")


def check_finite(a, name: str) -> None:
    """``ValueError`` naming ``a`` and how many of its entries are NaN or infinite (a
    decomposition of such weights would hang or return NaN factors)."""
    xp = backend.array_module(a)
    bad = int(xp.count_nonzero(~xp.isfinite(a)))
    if bad:
        nans = int(xp.count_nonzero(xp.isnan(a)))
        raise ValueError(f"{name} has {bad} non-finite entries ({nans} NaN, {bad - nans} "
                         f"infinite) of {a.size}")


@dataclass(frozen=True)
class ConvGeometry:
    """Sizes of one 2-D convolution, NCHW input and (K, C/groups, R, S) weights."""

    n: int
    c: int
    h: int
    w: int
    k: int
    r: int
    s: int
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    groups: int
    oh: int
    ow: int

    @property
    def output_shape(self) -> tuple[int, int, int, int]:
        return (self.n, self.k, self.oh, self.ow)

    @property
    def flops(self) -> int:
        """Multiply-adds counted as two FLOPs each."""
        return 2 * self.n * self.k * self.oh * self.ow * (self.c // self.groups) * self.r * self.s


def conv_geometry(x_shape, w_shape, stride=1, padding=0, dilation=1, groups=1, *,
                  names=("x", "w")) -> ConvGeometry:
    """Validate convolution hyper-parameters against the two shapes (of the arrays
    ``names`` names, for messages); return the sizes."""
    nx, nw = names
    n, c, h, w = x_shape
    k, cg, r, s = w_shape
    stride = pair(stride, "stride", minimum=1)
    padding = pair(padding, "padding", minimum=0)
    dilation = pair(dilation, "dilation", minimum=1)
    groups = check_int(groups, "groups", minimum=1)
    if c % groups:
        raise ValueError(f"groups={groups} does not divide the input channels of {nx} ({c})")
    if k % groups:
        raise ValueError(f"groups={groups} does not divide the output channels of {nw} ({k})")
    if cg * groups != c:
        raise ValueError(f"{nw} has {cg} input channels per group, but {nx} has {c} channels "
                         f"and groups={groups} (expected {nw}.shape[1] == {c // groups})")
    oh = (h + 2 * padding[0] - dilation[0] * (r - 1) - 1) // stride[0] + 1
    ow = (w + 2 * padding[1] - dilation[1] * (s - 1) - 1) // stride[1] + 1
    if oh < 1 or ow < 1:
        raise ValueError(f"the {r}x{s} filter of {nw} (dilation {dilation}) does not fit the "
                         f"{h}x{w} input {nx} with padding {padding}: output would be "
                         f"{oh}x{ow}")
    return ConvGeometry(n, c, h, w, k, r, s, stride, padding, dilation, int(groups), oh, ow)


def check_conv_args(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1, *,
                    dtype=None, contiguous: bool = False,
                    names=("x", "w", "bias")) -> ConvGeometry:
    """Check ``x`` (N, C, H, W), ``w`` (K, C/groups, R, S) and ``bias`` (K,) together;
    ``names`` are what the caller calls them (in messages)."""
    nx, nw, nb = names
    xp = backend.array_module(x)
    check_array(x, nx, ndim=4, dtype=dtype, contiguous=contiguous)
    check_array(w, nw, ndim=4, dtype=dtype, contiguous=contiguous, xp=xp)
    if dtype is None and w.dtype != x.dtype:
        raise TypeError(f"{nw}'s dtype ({w.dtype.name}) differs from {nx}'s ({x.dtype.name})")
    geom = conv_geometry(x.shape, w.shape, stride, padding, dilation, groups, names=(nx, nw))
    if bias is not None:
        check_array(bias, nb, ndim=1, dtype=x.dtype, contiguous=contiguous, xp=xp)
        if bias.shape[0] != geom.k:
            raise ValueError(f"{nb} has {bias.shape[0]} entries; {nw} has {geom.k} output "
                             f"channels")
    return geom


def conv_call(x, w, bias=None, residual=None, stride=1, padding=0, dilation=1, groups=1, *,
              names=("x", "w", "bias")):
    """The arrays and geometry of one fp32 NCHW convolution call, checked together:
    ``(x, w, bias, residual, geom)`` with every array viewed as a NumPy or CuPy array
    (a DLPack CUDA tensor is shared, not copied); ``names`` as :func:`check_conv_args`."""
    x, w = backend.as_array(x, names[0]), backend.as_array(w, names[1])
    bias = None if bias is None else backend.as_array(bias, names[2])
    geom = check_conv_args(x, w, bias, stride, padding, dilation, groups, dtype=np.float32,
                           contiguous=True, names=names)
    residual = check_residual(residual, geom.output_shape, backend.array_module(x))
    return x, w, bias, residual, geom


def core_conv_issue(geom: ConvGeometry, kernel: str, max_filter: int) -> str | None:
    """Why ``kernel`` (its name, for the message) cannot run the core convolution ``geom``
    — filters up to ``max_filter`` square, stride 1 or 2 equal in both axes, no dilation
    or groups, as every Tucker core kernel requires — or None."""
    if geom.r > max_filter or geom.s > max_filter:
        return f"the {kernel} takes filters up to {max_filter}x{max_filter}, not {geom.r}x{geom.s}"
    if geom.stride[0] != geom.stride[1] or geom.stride[0] not in (1, 2):
        return f"the {kernel} takes stride 1 or 2 (equal in both axes), not {geom.stride}"
    if geom.dilation != (1, 1) or geom.groups != 1:
        return f"the {kernel} supports neither dilation nor groups"
    return None


def pool_args(kernel, stride, padding, *, names=("kernel_size", "stride", "padding")):
    """``(kernel, stride, padding)`` of a pooling window as pairs; ``stride`` None is the
    kernel (PyTorch's default); padding at most half the kernel.  ``names`` are what the
    caller calls the three (in messages)."""
    nk, ns, npad = names
    kernel = pair(kernel, nk, minimum=1)
    stride = kernel if stride is None else pair(stride, ns, minimum=1)
    padding = pair(padding, npad, minimum=0)
    if padding[0] * 2 > kernel[0] or padding[1] * 2 > kernel[1]:
        raise ValueError(f"{npad} {padding} must be at most half the {nk} {kernel}")
    return kernel, stride, padding


def pooled_size(h: int, w: int, kernel, stride, padding, ceil_mode: bool = False
                ) -> tuple[int, int]:
    """Output (height, width) of pooling an ``h`` x ``w`` plane (pairs as from
    :func:`pool_args`).  ``ceil_mode`` (PyTorch's) rounds the window count up, so that a
    last, partial window covers the border, unless that window would start past the input
    and its left padding."""

    def one(n, k, s, p):
        o = (n + 2 * p - k + (s - 1 if ceil_mode else 0)) // s + 1
        return o - 1 if ceil_mode and (o - 1) * s >= n + p else o

    return (one(h, kernel[0], stride[0], padding[0]), one(w, kernel[1], stride[1], padding[1]))


def check_window_fits(h: int, w: int, kernel) -> None:
    """Raise ``ValueError`` when a ``kernel`` window is larger than the (padded) ``h`` x ``w``
    plane it slides over."""
    if h < kernel[0] or w < kernel[1]:
        raise ValueError(f"pooling window {tuple(kernel)} larger than the padded input {(h, w)}")


def output_buffer(xp, out, shape, name: str = "out", dtype=np.float32):
    """A fresh ``dtype`` (float32) array of ``shape``, or ``out`` after checking that it
    fits: of ``dtype``, C-contiguous, on ``xp``'s device, of exactly ``shape``."""
    if out is None:
        return xp.empty(tuple(shape), dtype=dtype)
    out = backend.as_array(out, name)
    check_array(out, name, ndim=len(shape), dtype=dtype, contiguous=True, xp=xp)
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"{name} has shape {tuple(out.shape)}; expected {tuple(shape)}")
    return out


def check_residual(residual, shape, xp, name: str = "residual"):
    """``residual`` (or None) as an array checked to be added to an output of ``shape``."""
    if residual is None:
        return None
    residual = backend.as_array(residual, name)
    check_array(residual, name, ndim=len(shape), dtype=np.float32, contiguous=True, xp=xp)
    if tuple(residual.shape) != tuple(shape):
        raise ValueError(f"{name} has shape {tuple(residual.shape)}; expected {tuple(shape)}")
    return residual


def check_disjoint(a, a_name: str, b, b_name: str) -> None:
    """Raise where C-contiguous arrays ``a`` and ``b`` (either may be None) share memory: a
    kernel reading one while it writes the other would read its own results."""
    if a is None or b is None:
        return
    if backend.is_cupy_array(a):
        lo, hi = max(a.data.ptr, b.data.ptr), min(a.data.ptr + a.nbytes, b.data.ptr + b.nbytes)
        overlap = lo < hi
    else:
        overlap = np.shares_memory(a, b)
    if overlap:
        raise ValueError(f"{a_name} and {b_name} share memory; pass separate arrays")


def check_vector(v, name: str, length: int, xp, what: str):
    """``v`` (or None) as a float32 vector of ``length`` entries, one per ``what`` (e.g.
    "output channel of w")."""
    if v is None:
        return None
    v = backend.as_array(v, name)
    check_array(v, name, ndim=1, dtype=np.float32, contiguous=True, xp=xp)
    if v.shape[0] != length:
        raise ValueError(f"{name} has {v.shape[0]} entries; expected {length}, one per {what}")
    return v


def check_packed(packed, name: str, shape, xp, how: str):
    """Precomputed weights ``packed`` checked to be float32, C-contiguous, of ``shape``
    (``how`` names the call that makes them)."""
    packed = backend.as_array(packed, name)
    check_array(packed, name, ndim=len(shape), dtype=np.float32, contiguous=True, xp=xp)
    if tuple(packed.shape) != tuple(shape):
        raise ValueError(f"{name} has shape {tuple(packed.shape)}; expected {tuple(shape)} "
                         f"({how})")
    return packed
