"""A whole Tucker-format layer in one launch (``kernels_cu/tucker_layer.cu``), forward only.

``y = act(U3 · core(U1 · x) + bias [+ residual])``: the first 1x1 convolution
(C -> D1), the R x S core (D1 -> D2, stride, padding) and the last 1x1 (D2 -> N)
with a bias (the folded BN), residual and ReLU epilogue.  The blocks of a
thread-block cluster share one output tile and split each stage's channels;
the intermediates stay in the cluster's shared memory.  At batch 1 that
replaces three launches, each too small to fill the GPU, with one.

Weights are laid out once (:func:`pack_weights`): channel-last, transposed,
zero-padded to a multiple of ``4 * cluster`` channels per stage.  :func:`estimate`
ranks the tiles; the tuner (:func:`tensorconv.tuning.oracle.tune_fused_tile`) times the
best few.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from tensorconv import backend, cuda, tunecache
from tensorconv.backend import DeviceFacts
from tensorconv.checks import (
    ConvGeometry,
    check_array,
    check_bools,
    check_residual,
    conv_geometry,
    core_conv_issue,
    output_buffer,
)
from tensorconv.ops._launch import (
    cdiv,
    check_smem,
    filter_cover,
    gpu_only,
    has_clusters,
    launch,
    ptr,
    stored_tile,
    up4,
)

FILE = "tucker_layer.cu"
THREADS = 256
CLUSTERS = (1, 2, 4, 8)
TILE_SIDES = (1, 2, 4, 7, 8, 14, 16)
MAX_FILTER = 7
STAGE_FLOATS = 8192   # a streamed operand chunk: 32 KiB of shared memory
ITEMS = (1, 2, 4)     # instantiated items (4 channels x 1 pixel) per thread and stage


@dataclass(frozen=True)
class Problem:
    """One Tucker layer: the core's geometry (D1 = ``core.c`` -> D2 = ``core.k`` on the
    input's plane), the layer's ``c`` input and ``n`` output channels."""

    core: ConvGeometry
    c: int
    n: int


def _slice(channels: int, cluster: int) -> int:
    """Channels per block: an equal share, rounded up to a float4."""
    return up4(cdiv(channels, cluster))


@dataclass(frozen=True)
class Tile:
    """An output tile of ``th`` x ``tw`` pixels per cluster of ``cluster`` blocks."""

    th: int
    tw: int
    cluster: int

    def sizes(self, p: Problem) -> dict:
        """Launch sizes: per-block channel slices, halo, chunk depths, items per thread, smem."""
        g, cl = p.core, self.cluster
        d1c, d2c, nc = _slice(g.c, cl), _slice(g.k, cl), _slice(p.n, cl)
        pa = ((self.th - 1) * g.stride[0] + g.r) * ((self.tw - 1) * g.stride[1] + g.s)
        pa4, po = up4(pa), self.th * self.tw
        cka = max(1, min(p.c, STAGE_FLOATS // (pa4 + d1c)))
        ckb = max(1, min(cl * d1c, STAGE_FLOATS // (g.r * g.s * d2c)))
        ckc = max(1, min(cl * d2c, STAGE_FLOATS // nc))
        stage = max(cka * (pa4 + d1c), ckb * g.r * g.s * d2c, ckc * nc)
        mine = d1c * pa + d2c * po
        items = max(d1c // 4 * pa, d2c // 4 * po, nc // 4 * po)
        it = next((k for k in ITEMS if k * THREADS >= items), None)
        return dict(d1c=d1c, d2c=d2c, nc=nc, cka=cka, ckb=ckb, ckc=ckc, items=it,
                    smem=4 * (mine + (cl * mine if cl > 1 else 0) + stage))

    def smem_bytes(self, p: Problem) -> int:
        return self.sizes(p)["smem"]

    def grid(self, p: Problem) -> tuple[int, int, int]:
        return cdiv(p.core.oh, self.th) * cdiv(p.core.ow, self.tw), p.core.n, self.cluster


@dataclass(frozen=True)
class PackedWeights:
    """A Tucker layer's weights in the fused kernel's layouts (see :func:`pack_weights`)."""

    u1t: object      # (C, D1p)
    core: object     # (D1p, R, S, D2p)
    u3t: object      # (D2p, Np)
    bias: object     # (Np,)
    c: int
    d1: int
    d2: int
    n: int
    r: int
    s: int
    cluster: int


def pack_weights(u1, core, u3, bias, cluster: int, xp=None) -> PackedWeights:
    """Lay out a Tucker layer's weights for the fused kernel with clusters of ``cluster``.

    Parameters
    ----------
    u1 : array, (D1, C, 1, 1) or (D1, C), float32 — the first 1x1 convolution
    core : array, (D2, D1, R, S), float32
    u3 : array, (N, D2, 1, 1) or (N, D2), float32 — the last 1x1 (BN folded in)
    bias : array (N,) or None
    cluster : int in (1, 2, 4, 8)
    xp : module, optional
        Array module of the result (default: that of ``core``).

    Returns
    -------
    PackedWeights
    """
    if cluster not in CLUSTERS:
        raise ValueError(f"cluster must be one of {CLUSTERS}, got {cluster}")
    xp = xp or backend.array_module(core)
    host = [None if a is None else backend.to_host(a).astype(np.float32)
            for a in (u1, core, u3, bias)]
    u1, core, u3, bias = host
    if core.ndim != 4:
        raise ValueError(f"core must be (D2, D1, R, S), got shape {core.shape}")
    d2, d1, r, s = core.shape
    u1, u3 = u1.reshape(u1.shape[0], -1), u3.reshape(u3.shape[0], -1)
    if u1.shape[0] != d1:
        raise ValueError(f"u1 has {u1.shape[0]} output channels; the core takes D1 = {d1}")
    if u3.shape[1] != d2:
        raise ValueError(f"u3 takes {u3.shape[1]} input channels; the core gives D2 = {d2}")
    c, n = u1.shape[1], u3.shape[0]
    if bias is not None and bias.shape != (n,):
        raise ValueError(f"bias must have shape ({n},), got {bias.shape}")
    d1p, d2p, np_ = (cluster * _slice(k, cluster) for k in (d1, d2, n))
    u1t = np.zeros((c, d1p), np.float32)
    u1t[:, :d1] = u1.T
    core_p = np.zeros((d1p, r, s, d2p), np.float32)
    core_p[:d1, :, :, :d2] = core.transpose(1, 2, 3, 0)
    u3t = np.zeros((d2p, np_), np.float32)
    u3t[:d2, :n] = u3.T
    b = np.zeros(np_, np.float32)
    if bias is not None:
        b[:n] = bias
    return PackedWeights(*(xp.asarray(a) for a in (u1t, core_p, u3t, b)), c, d1, d2, n, r, s,
                         cluster)


def supported(core: ConvGeometry) -> str | None:
    """None when the fused kernel takes the core geometry ``core``; otherwise why not."""
    if (why := core_conv_issue(core, "fused Tucker layer", MAX_FILTER)) is not None:
        return why
    if backend.gpu_available() and not has_clusters(backend.device_facts()):
        return "the fused Tucker layer needs thread-block clusters (sm_90)"
    return None


def candidates(p: Problem, facts: DeviceFacts) -> list[Tile]:
    """Tiles that fit the device's shared memory and the instantiated items per thread:
    sides up to the output (one tile of margin), every cluster size."""
    out = []
    for th in TILE_SIDES:
        for tw in TILE_SIDES:
            if th > max(p.core.oh, 1) * 2 or tw > max(p.core.ow, 1) * 2 or th * tw > 256:
                continue
            for cl in CLUSTERS:
                t = Tile(th, tw, cl)
                z = t.sizes(p)
                if z["items"] is not None and z["smem"] <= facts.smem_per_block_optin:
                    out.append(t)
    return out


def estimate(p: Problem, t: Tile, facts: DeviceFacts) -> float:
    """A rough cost (µs) of ``t``: the slower of a thread's multiply-adds over the three stages
    times the waves of blocks (at ~1.9 GHz) and the weights every block streams from L2 (at
    ~4 TB/s: small tiles re-read them many times), plus the chunks' and the cluster's barriers."""
    g, z = p.core, t.sizes(p)
    d1p, d2p = z["d1c"] * t.cluster, z["d2c"] * t.cluster
    work = z["items"] * 4 * (p.c + d1p * g.r * g.s + d2p)
    chunks = cdiv(p.c, z["cka"]) + cdiv(d1p, z["ckb"]) + cdiv(d2p, z["ckc"])
    blocks = int(np.prod(t.grid(p)))
    per_sm = max(1, min(8, facts.smem_per_sm // max(1, z["smem"])))
    waves = cdiv(blocks, facts.sm_count * per_sm)
    weights = 4 * blocks * (p.c * z["d1c"] + d1p * g.r * g.s * z["d2c"] + d2p * z["nc"])
    return max(waves * work / 1.9e3, weights / 4e6) + waves * (0.3 * chunks + 0.5 * t.cluster)


def ranked(p: Problem, facts: DeviceFacts, limit: int | None = None) -> list[Tile]:
    """Candidates, lowest :func:`estimate` first."""
    tiles = sorted(candidates(p, facts), key=lambda t: estimate(p, t, facts))
    if not tiles:
        raise ValueError(f"no fused tile fits shared memory for D1 = {p.core.c}, "
                         f"D2 = {p.core.k}")
    return tiles[:limit] if limit else tiles


def default_tile(p: Problem, facts: DeviceFacts) -> Tile:
    """The lowest-cost tile (no timing)."""
    return ranked(p, facts, limit=1)[0]


def tile_key(p: Problem) -> str:
    """The tune-cache key of the timed best tile for ``p``."""
    return tunecache.make_key("tucker_layer_tile", FILE, p)


def tuned_tile(p: Problem) -> Tile | None:
    """The tile the tuner stored for ``p`` on this device, else None; never times."""
    return stored_tile(sys.modules[__name__], p)


def _name(r: int, s: int, stride: int, cluster: int, items: int) -> str:
    return f"tucker_layer_fused<{r}, {s}, {stride}, {cluster}, {items}>"


def kernels(p: Problem, tile: Tile) -> tuple[cuda.KernelRef, ...]:
    """The kernels a launch of ``tile`` on ``p`` runs."""
    items = tile.sizes(p)["items"]
    return (cuda.kernel_ref(FILE, _name(p.core.r, p.core.s, p.core.stride[0], tile.cluster,
                                        items)),)


def instantiations() -> list[str]:
    """What CI's nvcc build type-checks: every (cluster, items) on a 3x3 core, and one of
    them on every core filter size of ``filter_cover`` at either stride."""
    names = {_name(3, 3, st, cl, it) for cl in CLUSTERS for it in ITEMS for st in (1, 2)}
    names |= {_name(r, s, st, 2, 2) for r, s in filter_cover(MAX_FILTER) for st in (1, 2)}
    return sorted(names)


def tucker_layer_conv2d(x, packed: PackedWeights, stride=1, padding=0, *, residual=None,
                 relu: bool = False, tile: Tile | None = None, out=None):
    """One Tucker-format layer in one launch, fp32, NCHW.

    Parameters
    ----------
    x : CuPy (or DLPack CUDA) array, (B, C, H, W), float32, C-contiguous
    packed : PackedWeights
        From :func:`pack_weights` with the cluster size of ``tile``.
    stride, padding : int or (int, int)
        Of the core convolution.
    residual : array like the output, optional
        Added before the ReLU.
    relu : bool
    tile : Tile, optional
        Default: the lowest-cost tile (:func:`ranked`) of ``packed.cluster``'s size.
    out : array, (B, N, OH, OW), float32, optional

    Returns
    -------
    CuPy array, (B, N, OH, OW), float32
    """
    check_bools(relu=relu)
    x = backend.as_array(x, "x")
    xp = backend.array_module(x)
    gpu_only(xp, "tucker_layer")
    if not isinstance(packed, PackedWeights):
        raise TypeError("packed must come from pack_weights()")
    if x.ndim != 4 or x.shape[1] != packed.c:
        raise ValueError(f"x must be (B, {packed.c}, H, W), got shape {tuple(x.shape)}")
    check_array(x, "x", ndim=4, dtype=np.float32, contiguous=True, xp=xp)
    core = conv_geometry((x.shape[0], packed.d1, x.shape[2], x.shape[3]),
                         (packed.d2, packed.d1, packed.r, packed.s), stride, padding)
    if (reason := supported(core)) is not None:
        raise ValueError(reason)
    p = Problem(core, packed.c, packed.n)
    facts = backend.device_facts()
    if tile is None:  # the lowest-cost tile of the cluster size the weights were packed for
        tile = next((t for t in ranked(p, facts) if t.cluster == packed.cluster), None)
        if tile is None:
            raise ValueError(f"no tile with clusters of {packed.cluster} fits shared memory")
    if tile.cluster != packed.cluster:
        raise ValueError(f"tile.cluster = {tile.cluster} but the weights were packed for "
                         f"clusters of {packed.cluster}")
    if tile.th < 1 or tile.tw < 1 or tile.th * tile.tw > 256:
        raise ValueError(f"tile sides must be >= 1 with th * tw <= 256, got {tile}")
    z = tile.sizes(p)
    if z["items"] is None:
        raise ValueError(f"tile {tile} gives a thread more than {ITEMS[-1]} items per stage")
    check_smem(tile, z["smem"])
    out_shape = (x.shape[0], packed.n, core.oh, core.ow)
    residual = check_residual(residual, out_shape, xp)
    out = output_buffer(xp, out, out_shape)
    i32 = np.int32
    launch(kernels(p, tile)[0], tile.grid(p), (THREADS,), (
        x, packed.u1t, packed.core, packed.u3t, packed.bias, ptr(residual), out, i32(packed.c),
        i32(core.h), i32(core.w), i32(packed.n), i32(core.oh), i32(core.ow),
        i32(core.padding[0]), i32(core.padding[1]), i32(z["d1c"]), i32(z["d2c"]), i32(z["nc"]),
        i32(tile.th), i32(tile.tw), i32(cdiv(core.ow, tile.tw)), i32(z["cka"]), i32(z["ckb"]),
        i32(z["ckc"]), i32(relu)), z["smem"])
    return out
