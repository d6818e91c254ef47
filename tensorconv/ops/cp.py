"""CP-decomposed convolution kernels (``kernels_cu/cp_conv.cu``): naive and fused.

``cp_conv2d(x, s, h, w, t)`` computes the convolution with the kernel
``K[n, c, i, j] = sum_r t[n, r] s[c, r] h[i, r] w[j, r]`` without forming it.
The ``"fused"`` variant is the paper's Algorithm 2 (register vectors of length
R, channel striding by S_TILE lanes, warp-shuffle reduction); ``"naive"`` is
Algorithm 1.  Ranks 1..32 (``MAX_RANK``) have fused instantiations.
"""

from __future__ import annotations

import numpy as np

from tensorconv import backend, cuda, reference
from tensorconv.checks import check_array, pair
from tensorconv.decomp.cp import CPFactors, reconstruct
from tensorconv.ops.conv import output_buffer

_FILE = "cp_conv.cu"
VARIANTS = ("fused", "naive")
MAX_RANK = 32
_THREADS = 256


def _next_pow2(v: int) -> int:
    return 1 << max(0, int(v) - 1).bit_length()


def default_s_tile(channels: int) -> int:
    """Lanes per output pixel: enough to split the input channels, at most a warp."""
    return min(32, _next_pow2(max(1, channels // 4)))


def cp_conv2d(x, s, h, w, t, stride=1, padding=0, *, variant: str = "fused",
              s_tile: int | None = None, out=None):
    """Convolution of ``x`` with a CP-format kernel, fp32, NCHW, no bias.

    Parameters
    ----------
    x : array, (N, C, H, W), float32, C-contiguous (CuPy: our kernels; NumPy: the reference)
    s, h, w, t : arrays (C, R), (kh, R), (kw, R), (K, R), float32, C-contiguous
    stride, padding : int or (int, int)
    variant : {"fused", "naive"}
    s_tile : int, optional
        Lanes per output pixel for ``"fused"`` (a power of two up to 32).
    out : array, (N, K, OH, OW), float32, optional (GPU only)

    Returns
    -------
    array, (N, K, OH, OW), float32
    """
    x = backend.as_array(x, "x")
    xp = backend.array_module(x)
    check_array(x, "x", ndim=4, dtype=np.float32, contiguous=True)
    factors = {}
    for name, a in (("s", s), ("h", h), ("w", w), ("t", t)):
        a = backend.as_array(a, name)
        check_array(a, name, ndim=2, dtype=np.float32, contiguous=True, xp=xp)
        factors[name] = a
    rank = factors["s"].shape[1]
    if any(a.shape[1] != rank for a in factors.values()):
        raise ValueError("factors s, h, w, t must share their rank (second dimension); got "
                         + ", ".join(f"{k}{tuple(v.shape)}" for k, v in factors.items()))
    if factors["s"].shape[0] != x.shape[1]:
        raise ValueError(f"s has {factors['s'].shape[0]} rows; x has {x.shape[1]} channels")
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
    if xp is np:
        kernel = reconstruct(CPFactors(**factors))
        return reference.conv2d(x, kernel.astype(np.float32), stride=(sh, sw), padding=(ph, pw))
    out = output_buffer(xp, out, (n, k, oh, ow))
    i32 = np.int32
    geometry = (i32(n), i32(c), i32(ih), i32(iw), i32(k), i32(oh), i32(ow), i32(kh), i32(kw))
    conv = (i32(sh), i32(sw), i32(ph), i32(pw))
    args = (x, factors["s"], factors["h"], factors["w"], factors["t"], out)
    if variant == "naive":
        total = n * k * oh * ow
        blocks = min(-(-total // _THREADS), 32 * backend.device_facts().sm_count)
        cuda.get_kernel(_FILE, "cp_conv_naive")((blocks,), (_THREADS,),
                                                args + geometry + (i32(rank),) + conv)
        return out
    s_tile = s_tile or default_s_tile(c)
    if s_tile not in (1, 2, 4, 8, 16, 32):
        raise ValueError(f"s_tile must be a power of two up to 32, got {s_tile}")
    smem = 4 * rank * (kh + kw + k)
    kernel = cuda.get_kernel(_FILE, f"cp_conv_fused<{rank}>")
    cuda.set_dynamic_smem(kernel, smem)
    groups = _THREADS // s_tile
    blocks = -(-(n * oh * ow) // groups)
    kernel((blocks,), (s_tile, groups), args + geometry + conv, shared_mem=smem)
    return out
