"""CP-decomposed convolution kernels (``kernels_cu/cp_conv.cu``): naive and fused.

``cp_conv2d(x, s, h, w, t)`` computes the convolution with the kernel
``K[n, c, i, j] = sum_r t[n, r] s[c, r] h[i, r] w[j, r]`` without forming it.
The ``"fused"`` variant is the paper's Algorithm 2 (register vectors of length
R, channel striding by S_TILE lanes, shuffle reduction, one write per output)
with a bias/residual/ReLU epilogue; ``"naive"`` is Algorithm 1.  Ranks 1..32
(:data:`MAX_RANK`) have fused instantiations.  :func:`default_tile` picks the
launch shape from the problem; the tuner (:mod:`tensorconv.tuning.cp_tuner`) times
every candidate and stores the fastest, which :func:`tuned_tile` reads back.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from tensorconv import backend, cuda, reference, tunecache
from tensorconv.backend import DeviceFacts
from tensorconv.checks import (
    check_array,
    check_bools,
    check_choice,
    check_residual,
    check_vector,
    output_buffer,
    pair,
)
from tensorconv.ops._launch import (
    cdiv,
    check_smem,
    cpu_epilogue,
    launch,
    next_pow2,
    no_out_on_cpu,
    ptr,
    stored_tile,
)

FILE = "cp_conv.cu"
VARIANTS = ("fused", "naive")
MAX_RANK = 32
SCHEMES = ("direct", "separable")
_NAIVE_THREADS = 256


@dataclass(frozen=True)
class Problem:
    """One call: ``n`` images of ``c`` channels, ``h`` x ``w``, a rank-``rank`` ``kh`` x ``kw``
    filter to ``k`` channels at ``stride`` and ``padding``, an ``oh`` x ``ow`` output."""

    n: int
    c: int
    h: int
    w: int
    k: int
    kh: int
    kw: int
    rank: int
    stride: tuple[int, int]
    padding: tuple[int, int]

    @property
    def oh(self) -> int:
        return (self.h + 2 * self.padding[0] - self.kh) // self.stride[0] + 1

    @property
    def ow(self) -> int:
        return (self.w + 2 * self.padding[1] - self.kw) // self.stride[1] + 1

    @property
    def output_shape(self) -> tuple[int, int, int, int]:
        return self.n, self.k, self.oh, self.ow


@dataclass(frozen=True)
class Tile:
    """Launch shape of the fused kernel.

    ``scheme="direct"`` (the paper's Algorithm 2): ``lanes`` (S_TILE) threads per
    output pixel, ``threads`` per block (so ``threads // lanes`` pixels per block),
    and the work item the lanes stride over: a whole input channel (``rows=0``, the
    paper's choice) or ``rows`` filter rows of one channel (for few input channels).
    ``scheme="separable"`` (stride 1 only): a block computes a 32 x ``threads // 32``
    output tile, one thread per pixel, applying H and W one after the other through
    shared memory; ``lanes`` and ``rows`` are unused (keep the defaults).
    """

    lanes: int
    threads: int
    rows: int = 0
    scheme: str = "direct"

    def validate(self) -> None:
        ok = (self.lanes in tuple(1 << i for i in range(11)) and self.threads % 32 == 0
              and self.threads % self.lanes == 0 and 32 <= self.threads <= 1024
              and self.rows >= 0 and self.scheme in SCHEMES)
        if not ok:
            raise ValueError(f"tile {self}: lanes must be a power of two up to 1024, threads "
                             "a multiple of 32 and of lanes, 32..1024, rows >= 0, and scheme "
                             "'direct' or 'separable'")

    def smem_bytes(self, p: Problem) -> int:
        """Dynamic shared memory of a launch (rows padded as in ``RowStride``)."""
        stride = p.rank + 4 if p.rank % 4 == 0 else p.rank | 1
        if self.scheme == "separable":
            th, xw = self.threads // 32, 32 + p.kw - 1
            return 4 * ((p.k + th * xw) * stride + (p.kh + p.kw) * p.rank + (th + p.kh - 1) * xw)
        groups = self.threads // self.lanes
        floats = p.kh * p.kw * p.rank + (p.k + groups * max(1, self.lanes // 32)) * stride
        return 4 * (floats + (floats & 1)) + 8 * groups

    def block(self) -> tuple[int, int, int]:
        """Separable: 32 x ``threads / 32``; direct: ``lanes`` x the pixels of a block."""
        if self.scheme == "separable":
            return 32, self.threads // 32, 1
        return self.lanes, self.threads // self.lanes, 1

    def grid(self, p: Problem) -> tuple[int, int, int]:
        if self.scheme == "separable":
            return cdiv(p.ow, 32), cdiv(p.oh, self.threads // 32), p.n
        return cdiv(p.n * p.oh * p.ow, self.threads // self.lanes), 1, 1


def _items(c: int, kh: int, rows: int) -> int:
    """Work items per output pixel: channels times row blocks."""
    return c * (cdiv(kh, rows) if rows else 1)


def supported(p: Problem) -> str | None:
    """Why the fused kernel cannot run ``p`` (None when it can)."""
    if p.rank > MAX_RANK:
        return f"rank {p.rank} is above the fused kernel's template limit {MAX_RANK}"
    return None


def candidates(p: Problem, facts: DeviceFacts) -> list[Tile]:
    """Every launch shape worth timing whose shared memory fits: direct tiles over channel
    or row items, separable tiles for stride 1 and filters of at least 3 x 3 (where sharing
    the column sums saves work)."""
    tiles = []
    for rows in ((0, 1) if p.kh > 1 else (0,)):
        top = min(512, next_pow2(_items(p.c, p.kh, rows)))
        lanes = 1
        while lanes <= top:
            tiles += [Tile(lanes, threads, rows) for threads in (128, 256, 512)
                      if threads >= lanes]
            lanes *= 2
    if p.stride == (1, 1) and min(p.kh, p.kw) >= 3:
        tiles += [Tile(1, threads, scheme="separable") for threads in (64, 128, 256)]
    return [t for t in tiles if t.smem_bytes(p) <= facts.smem_per_block_optin]


def default_tile(p: Problem, facts: DeviceFacts) -> Tile:
    """The separable scheme for large filters over few channels at stride 1 (where it
    won on the H100); otherwise the direct scheme with row items when there are fewer
    than 16 channels, about four items per lane, then more lanes while the launch has
    fewer than eight warps per SM (batch-1 layers with small images need the split to
    fill the GPU)."""
    pixels, sm_count = p.n * p.oh * p.ow, facts.sm_count
    if p.stride == (1, 1) and p.c < 16 and p.kh * p.kw >= 25:
        return Tile(1, 256 if pixels >= 256 * sm_count else 128, scheme="separable")
    rows = 1 if p.c < 16 and p.kh > 1 else 0
    items = _items(p.c, p.kh, rows)
    lanes = min(32, next_pow2(max(1, items // 4)))
    while lanes < min(512, next_pow2(items)) and pixels * lanes < 8 * 32 * sm_count:
        lanes *= 2
    return Tile(lanes, max(128, lanes), rows)


def tile_key(p: Problem) -> str:
    """The tune-cache key of the timed best tile for ``p``."""
    return tunecache.make_key("cp_tile", FILE, p)


def tuned_tile(p: Problem) -> Tile | None:
    """The tile the tuner stored for ``p`` on this device, else None; never times."""
    return stored_tile(sys.modules[__name__], p)


def _name(rank: int, scheme: str) -> str:
    return f"cp_conv_fused{'_sep' if scheme == 'separable' else ''}<{rank}>"


def kernels(p: Problem, tile: Tile | None) -> tuple[cuda.KernelRef, ...]:
    """The kernels a launch runs: the fused kernel on ``tile``, or (None) the naive one."""
    if tile is None:
        return (cuda.kernel_ref(FILE, "cp_conv_naive"),)
    return (cuda.kernel_ref(FILE, _name(p.rank, tile.scheme)),)


def instantiations() -> list[str]:
    """What CI's nvcc build type-checks: both schemes at every rank up to :data:`MAX_RANK`."""
    return sorted(_name(r, s) for r in range(1, MAX_RANK + 1) for s in SCHEMES)


def problem(x_shape, factors, stride=1, padding=0) -> Problem:
    """The :class:`Problem` of ``x`` of ``x_shape`` and factors ``(s, h, w, t)``."""
    s, h, w, t = factors
    n, c, ih, iw = x_shape
    return Problem(n, c, ih, iw, t.shape[0], h.shape[0], w.shape[0], s.shape[1],
                   pair(stride, "stride", minimum=1), pair(padding, "padding", minimum=0))


def _check_factors(x, xp, s, h, w, t):
    factors = {}
    for name, a in (("s", s), ("h", h), ("w", w), ("t", t)):
        a = backend.as_array(a, name)
        check_array(a, name, ndim=2, dtype=np.float32, contiguous=True, xp=xp)
        factors[name] = a
    rank = factors["s"].shape[1]
    if rank < 1 or any(a.shape[1] != rank for a in factors.values()):
        raise ValueError("factors s, h, w, t must share their rank (second dimension, >= 1); got "
                         + ", ".join(f"{k}{tuple(v.shape)}" for k, v in factors.items()))
    if factors["s"].shape[0] != x.shape[1]:
        raise ValueError(f"s has {factors['s'].shape[0]} rows; x has {x.shape[1]} channels")
    return tuple(factors.values())


def cp_conv2d(x, s, h, w, t, stride=1, padding=0, *, bias=None, residual=None,
              relu: bool = False, variant: str = "fused", tile: Tile | None = None, out=None):
    """Convolution of ``x`` with a CP-format kernel, fp32, NCHW: ``relu?(conv + bias + residual)``.

    Parameters
    ----------
    x : array, (N, C, H, W), float32, C-contiguous (CuPy: our kernels; NumPy: the reference)
    s, h, w, t : arrays (C, R), (kh, R), (kw, R), (K, R), float32, C-contiguous
    stride, padding : int or (int, int)
    bias : array, (K,), float32, optional
    residual : array, (N, K, OH, OW), float32, optional
    relu : bool
    variant : {"fused", "naive"}; ``"naive"`` has no epilogue (bias, residual, relu)
    tile : Tile, optional
        Launch shape of ``"fused"``; default: the tuned tile (:func:`tuned_tile`), else
        :func:`default_tile`.
    out : array, (N, K, OH, OW), float32, optional (GPU only)

    Returns
    -------
    array, (N, K, OH, OW), float32
    """
    check_bools(relu=relu)
    x = backend.as_array(x, "x")
    xp = backend.array_module(x)
    check_array(x, "x", ndim=4, dtype=np.float32, contiguous=True)
    factors = _check_factors(x, xp, s, h, w, t)
    check_choice(variant, "variant", VARIANTS)
    p = problem(x.shape, factors, stride, padding)
    if variant == "fused" and (why := supported(p)) is not None:
        raise ValueError(why)
    if p.oh < 1 or p.ow < 1:
        raise ValueError(f"the {p.kh}x{p.kw} filter does not fit the {p.h}x{p.w} input with "
                         f"padding {p.padding}")
    bias = check_vector(bias, "bias", p.k, xp, "row of t")
    residual = check_residual(residual, p.output_shape, xp)
    if variant == "naive" and (bias is not None or residual is not None or relu):
        raise ValueError("variant='naive' (Algorithm 1) has no epilogue: bias, residual and "
                         "relu need variant='fused'")
    if variant == "fused" and tile is not None:
        tile.validate()
        if tile.scheme == "separable" and p.stride != (1, 1):
            raise ValueError(f"the separable scheme needs stride 1, got {p.stride}")
    if xp is np:
        no_out_on_cpu(out=out)
        return cpu_epilogue(reference.cp_conv2d(x, *factors, bias, p.stride, p.padding),
                            residual, relu)
    out = output_buffer(xp, out, p.output_shape)
    if variant == "naive":
        _run_naive(x, factors, out, p)
        return out
    tile = tile or tuned_tile(p) or default_tile(p, backend.device_facts())
    run(x, factors, out, p, tile, (bias, residual, bool(relu)))
    return out


def _geometry(p: Problem) -> tuple:
    i32 = np.int32
    return (i32(p.n), i32(p.c), i32(p.h), i32(p.w), i32(p.k), i32(p.oh), i32(p.ow), i32(p.kh),
            i32(p.kw))


def _run_naive(x, factors, out, p: Problem) -> None:
    i32 = np.int32
    blocks = min(cdiv(p.n * p.k * p.oh * p.ow, _NAIVE_THREADS),
                 32 * backend.device_facts().sm_count)
    launch(kernels(p, None)[0], (blocks,), (_NAIVE_THREADS,),
           (x, *factors, out, *_geometry(p), i32(p.rank), i32(p.stride[0]), i32(p.stride[1]),
            i32(p.padding[0]), i32(p.padding[1])))


def run(x, factors, out, p: Problem, tile: Tile, epilogue=(None, None, False)) -> None:
    """Launch the fused kernel on checked arguments (``factors``: (s, h, w, t);
    ``epilogue``: bias or None, residual or None, relu)."""
    bias, residual, relu = epilogue
    check_smem(tile, tile.smem_bytes(p))
    i32 = np.int32
    tail = ((i32(p.padding[0]), i32(p.padding[1]), i32(bool(relu))) if tile.scheme == "separable"
            else (i32(p.stride[0]), i32(p.stride[1]), i32(p.padding[0]), i32(p.padding[1]),
                  i32(tile.rows or p.kh), i32(bool(relu))))
    launch(kernels(p, tile)[0], tile.grid(p), tile.block(),
           (x, *factors, ptr(bias), ptr(residual), out, *_geometry(p), *tail),
           tile.smem_bytes(p))
