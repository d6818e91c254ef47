"""CP-decomposed convolution kernels (``kernels_cu/cp_conv.cu``): naive and fused.

``cp_conv2d(x, s, h, w, t)`` computes the convolution with the kernel
``K[n, c, i, j] = sum_r t[n, r] s[c, r] h[i, r] w[j, r]`` without forming it.
The ``"fused"`` variant is the paper's Algorithm 2 (register vectors of length
R, channel striding by S_TILE lanes, shuffle reduction, one write per output)
with a bias/residual/ReLU epilogue; ``"naive"`` is Algorithm 1.  Ranks 1..32
(``MAX_RANK``) have fused instantiations.  :func:`default_tile` picks the
launch shape from the problem; :mod:`tensorconv.tuning.cp_tuner` times them all.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tensorconv import backend, cuda, reference
from tensorconv.checks import check_array, pair
from tensorconv.decomp.cp import CPFactors, reconstruct
from tensorconv.ops.conv import output_buffer

_FILE = "cp_conv.cu"
VARIANTS = ("fused", "naive")
MAX_RANK = 32
_NAIVE_THREADS = 256


def _next_pow2(v: int) -> int:
    return 1 << max(0, int(v) - 1).bit_length()


@dataclass(frozen=True)
class CPTile:
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
              and self.rows >= 0 and self.scheme in ("direct", "separable"))
        if not ok:
            raise ValueError(f"tile {self}: lanes must be a power of two up to 1024, threads "
                             "a multiple of 32 and of lanes, 32..1024, rows >= 0, and scheme "
                             "'direct' or 'separable'")

    def smem_bytes(self, kh: int, kw: int, k: int, rank: int) -> int:
        """Dynamic shared memory of a launch (rows padded as in ``RowStride``)."""
        stride = rank + 4 if rank % 4 == 0 else rank | 1
        if self.scheme == "separable":
            th, xw = self.threads // 32, 32 + kw - 1
            return 4 * ((k + th * xw) * stride + (kh + kw) * rank + (th + kh - 1) * xw)
        groups = self.threads // self.lanes
        floats = kh * kw * rank + (k + groups * max(1, self.lanes // 32)) * stride
        return 4 * (floats + (floats & 1)) + 8 * groups


def _items(c: int, kh: int, rows: int) -> int:
    """Work items per output pixel: channels times row blocks."""
    return c * (-(-kh // rows) if rows else 1)


def default_tile(n: int, c: int, kh: int, kw: int, oh: int, ow: int, stride=(1, 1),
                 sm_count: int = 132) -> CPTile:
    """The separable scheme for large filters over few channels at stride 1 (where it
    won on the H100); otherwise the direct scheme with row items when there are fewer
    than 16 channels, about four items per lane, then more lanes while the launch has
    fewer than eight warps per SM (batch-1 layers with small images need the split to
    fill the GPU)."""
    pixels = n * oh * ow
    if tuple(stride) == (1, 1) and c < 16 and kh * kw >= 25:
        return CPTile(1, 256 if pixels >= 256 * sm_count else 128, scheme="separable")
    rows = 1 if c < 16 and kh > 1 else 0
    items = _items(c, kh, rows)
    lanes = min(32, _next_pow2(max(1, items // 4)))
    while lanes < min(512, _next_pow2(items)) and pixels * lanes < 8 * 32 * sm_count:
        lanes *= 2
    return CPTile(lanes, max(128, lanes), rows)


def candidate_tiles(c: int, kh: int, kw: int = 1, stride=(1, 1)) -> list[CPTile]:
    """Every launch shape worth timing for ``c`` input channels and a ``kh`` x ``kw``
    filter (the tuner's search space); separable tiles for stride 1 and filters of
    at least 3 x 3, where sharing the column sums saves work."""
    tiles = []
    for rows in ((0, 1) if kh > 1 else (0,)):
        top = min(512, _next_pow2(_items(c, kh, rows)))
        lanes = 1
        while lanes <= top:
            tiles += [CPTile(lanes, threads, rows) for threads in (128, 256, 512) if threads >= lanes]
            lanes *= 2
    if tuple(stride) == (1, 1) and min(kh, kw) >= 3:
        tiles += [CPTile(1, threads, scheme="separable") for threads in (64, 128, 256)]
    return tiles


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
    return factors, rank


def cp_conv2d(x, s, h, w, t, stride=1, padding=0, *, bias=None, residual=None,
              relu: bool = False, variant: str = "fused", tile: CPTile | None = None, out=None):
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
    tile : CPTile, optional
        Launch shape of ``"fused"``; :func:`default_tile` when omitted.
    out : array, (N, K, OH, OW), float32, optional (GPU only)

    Returns
    -------
    array, (N, K, OH, OW), float32
    """
    x = backend.as_array(x, "x")
    xp = backend.array_module(x)
    check_array(x, "x", ndim=4, dtype=np.float32, contiguous=True)
    factors, rank = _check_factors(x, xp, s, h, w, t)
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    if variant == "fused" and rank > MAX_RANK:
        raise ValueError(f"rank {rank} is above the fused kernel's template limit {MAX_RANK}")
    (sh, sw), (ph, pw) = pair(stride, "stride", minimum=1), pair(padding, "padding", minimum=0)
    n, c, ih, iw = x.shape
    kh, kw, k = factors["h"].shape[0], factors["w"].shape[0], factors["t"].shape[0]
    oh, ow = (ih + 2 * ph - kh) // sh + 1, (iw + 2 * pw - kw) // sw + 1
    if oh < 1 or ow < 1:
        raise ValueError(f"the {kh}x{kw} filter does not fit the {ih}x{iw} input with "
                         f"padding {(ph, pw)}")
    if bias is not None:
        bias = backend.as_array(bias, "bias")
        check_array(bias, "bias", ndim=1, dtype=np.float32, contiguous=True, xp=xp)
        if bias.shape[0] != k:
            raise ValueError(f"bias has {bias.shape[0]} entries; t has {k} rows")
    if residual is not None:
        residual = backend.as_array(residual, "residual")
        check_array(residual, "residual", ndim=4, dtype=np.float32, contiguous=True, xp=xp)
        if tuple(residual.shape) != (n, k, oh, ow):
            raise ValueError(f"residual has shape {tuple(residual.shape)}; expected "
                             f"{(n, k, oh, ow)}")
    if variant == "naive" and (bias is not None or residual is not None or relu):
        raise ValueError("variant='naive' (Algorithm 1) has no epilogue: bias, residual and "
                         "relu need variant='fused'")
    if variant == "fused":
        tile = tile or default_tile(n, c, kh, kw, oh, ow, (sh, sw),
                                    backend.device_facts().sm_count if xp is not np else 132)
        tile.validate()
        if tile.scheme == "separable" and (sh, sw) != (1, 1):
            raise ValueError(f"the separable scheme needs stride 1, got {(sh, sw)}")
    if xp is np:
        kernel = reconstruct(CPFactors(**factors)).astype(np.float32)
        y = reference.conv2d(x, kernel, bias, stride=(sh, sw), padding=(ph, pw))
        if residual is not None:
            y += residual
        return np.maximum(y, 0, out=y) if relu else y
    out = output_buffer(xp, out, (n, k, oh, ow))
    i32 = np.int32
    geometry = (i32(n), i32(c), i32(ih), i32(iw), i32(k), i32(oh), i32(ow), i32(kh), i32(kw))
    conv = (i32(sh), i32(sw), i32(ph), i32(pw))
    fs = (factors["s"], factors["h"], factors["w"], factors["t"])
    if variant == "naive":
        total = n * k * oh * ow
        blocks = min(-(-total // _NAIVE_THREADS), 32 * backend.device_facts().sm_count)
        cuda.get_kernel(_FILE, "cp_conv_naive")((blocks,), (_NAIVE_THREADS,),
                                                (x,) + fs + (out,) + geometry + (i32(rank),) + conv)
        return out
    smem = tile.smem_bytes(kh, kw, k, rank)
    null = np.uintp(0)
    epilogue = (null if bias is None else bias, null if residual is None else residual, out)
    if tile.scheme == "separable":
        kernel = cuda.get_kernel(_FILE, f"cp_conv_fused_sep<{rank}>")
        cuda.set_dynamic_smem(kernel, smem)
        th = tile.threads // 32
        kernel((-(-ow // 32), -(-oh // th), n), (32, th),
               (x,) + fs + epilogue + geometry + (i32(ph), i32(pw), i32(bool(relu))),
               shared_mem=smem)
        return out
    kernel = cuda.get_kernel(_FILE, f"cp_conv_fused<{rank}>")
    cuda.set_dynamic_smem(kernel, smem)
    groups = tile.threads // tile.lanes
    kernel((-(-(n * oh * ow) // groups),), (tile.lanes, groups),
           (x,) + fs + epilogue + geometry + conv + (i32(tile.rows or kh), i32(bool(relu))),
           shared_mem=smem)
    return out
