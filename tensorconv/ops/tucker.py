"""Tucker-format core convolution (``kernels_cu/tucker_core_conv.cu``).

The variants of the core R x S convolution D1 -> D2 of a Tucker-format layer:

* ``"tdc"`` — the paper's scheme (TDC, PPoPP'23, Listing 2): a block per
  TH x TW x TC input tile, one thread per output channel, the input cube staged
  once, weights in CRSN order, channel-tile partial sums added atomically.
* ``"cluster"`` — our scheme for the H100 (the default): each thread computes
  NT channels x PT pixels from a cp.async-staged input cube and weight slab, and
  the blocks splitting the input channels form a thread-block cluster that sums
  its partials through distributed shared memory (no atomics, no zero-filled
  output, deterministic).  Tile: :class:`ClusterTile`.
* ``"tf32x3"`` — an implicit GEMM on the tensor cores with fp32 accuracy
  (3xTF32) for large planes: :mod:`tensorconv.ops.tucker_tf32x3`.
* ``"winograd"`` — Winograd's F(2x2, 3x3) on the tensor cores with fp32 accuracy,
  3x3 stride 1 only: :mod:`tensorconv.ops.winograd`.
* ``"igemm"`` — our general implicit-GEMM kernel (:mod:`tensorconv.ops.conv`).

``"tdc"`` is instantiated for 3 x 3 filters only, ``"cluster"`` and ``"tf32x3"``
for filters up to 7 x 7 at stride 1 or 2; anything else runs ``"igemm"`` (logged).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from tensorconv import backend, cuda
from tensorconv.checks import ConvGeometry, check_array, check_conv_args, core_conv_issue
from tensorconv.ops import conv as dense
from tensorconv.ops import tucker_tf32x3 as tf32x3
from tensorconv.ops import winograd

_FILE = "tucker_core_conv.cu"
VARIANTS = ("tdc", "cluster", "tf32x3", "winograd", "igemm")
TILE_SIDES = (1, 2, 4, 7, 8)        # TH, TW instantiated in tucker_core_conv.cu
MAX_TILE_OUTPUTS = 32               # TH * TW register accumulators per thread
_SUPPORTED_FILTERS = ((3, 3),)
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CoreTile:
    """A block's share of the core convolution: TH x TW outputs of TC input channels."""

    th: int
    tw: int
    tc: int

    def smem_bytes(self, geom: ConvGeometry) -> int:
        iht = (self.th - 1) * geom.stride[0] + geom.r
        iwt = (self.tw - 1) * geom.stride[1] + geom.s
        return 4 * self.tc * iht * iwt

    def blocks(self, geom: ConvGeometry) -> int:
        """Thread blocks of one launch (the paper's num_blks, times the batch)."""
        return (-(-geom.oh // self.th) * -(-geom.ow // self.tw) * -(-geom.c // self.tc)
                * geom.n)


def tdc_supported(geom: ConvGeometry) -> str | None:
    """None when the ``"tdc"`` kernel runs ``geom``; otherwise the reason it cannot."""
    if (geom.r, geom.s) not in _SUPPORTED_FILTERS:
        return f"the tdc kernel is instantiated for 3x3 filters only, not {geom.r}x{geom.s}"
    if geom.dilation != (1, 1) or geom.groups != 1:
        return "the tdc kernel supports neither dilation nor groups"
    if geom.k > 1024:
        return f"the tdc kernel has one thread per output channel: {geom.k} > 1024"
    return None


def candidate_tiles(geom: ConvGeometry, smem_limit: int) -> list[CoreTile]:
    """Every valid (TH, TW, TC): instantiated sides, TC a power of two up to C (and C itself)."""
    tcs = sorted({min(geom.c, 1 << i) for i in range(12)} | {geom.c})
    out = []
    for th in TILE_SIDES:
        for tw in TILE_SIDES:
            if th * tw > MAX_TILE_OUTPUTS or th > max(geom.oh, 1) * 2 or tw > max(geom.ow, 1) * 2:
                continue
            for tc in tcs:
                t = CoreTile(th, tw, tc)
                if t.smem_bytes(geom) <= smem_limit:
                    out.append(t)
    return out


@dataclass(frozen=True)
class ClusterTile:
    """Launch shape of the ``"cluster"`` scheme.

    A block computes ``nb`` output channels x ``th`` rows x ``twg * pt`` columns
    from a ``1 / splits`` share of the input channels, staged ``ck`` channels at
    a time; each of its ``(nb / nt) * th * twg`` threads owns ``nt`` channels x
    ``pt`` consecutive pixels.  ``splits`` blocks form one thread-block cluster.
    """

    nt: int
    pt: int
    nb: int
    th: int
    twg: int
    ck: int
    splits: int

    @property
    def threads(self) -> int:
        return self.nb // self.nt * self.th * self.twg

    @property
    def tw(self) -> int:
        return self.twg * self.pt

    def stage_floats(self, geom: ConvGeometry) -> int:
        """Two pipeline stages (input cube, weight slab), one when ``ck`` covers a
        split's channels; mirrors the layout computed in ``tdc_core_conv_cluster``."""
        st = geom.stride[0]
        vn4 = -(-((self.pt - 1) * st + geom.s) // 4) * 4
        iwp = -(-((self.twg - 1) * self.pt * st + vn4) // 4) * 4
        iht = (self.th - 1) * st + geom.r
        in_stage = self.ck * iht * iwp
        w_stage = -(-(self.ck * geom.r * geom.s * self.nb) // 4) * 4
        c_per = -(-geom.c // self.splits)
        nbuf = 2 if c_per > self.ck else 1   # a single stage needs no second buffer
        return nbuf * (in_stage + w_stage)

    @property
    def share(self) -> int:
        """Outputs (channel-major within the tile) each block of a cluster owns and sums:
        a multiple of 4 (``tdcx::PushReduce`` sends runs of up to 4)."""
        return -(-self.nb * self.th * self.tw // (4 * self.splits)) * 4

    def smem_bytes(self, geom: ConvGeometry) -> int:
        """The stages; with splits, then the ``splits`` slots of ``share`` partial sums
        a block receives from the cluster and its mbarrier (``tdcx::PushReduce``)."""
        return 4 * (self.stage_floats(geom) + push_slot_floats(self.splits, self.share))

    def grid(self, geom: ConvGeometry) -> tuple[int, int, int]:
        """(pixel tiles, batch x channel tiles, splits): the cluster spans z."""
        tiles = -(-geom.oh // self.th) * -(-geom.ow // self.tw)
        return tiles, geom.n * -(-geom.k // self.nb), self.splits


CLUSTER_NT = (1, 2, 4, 8)
CLUSTER_PT = (1, 2, 4, 8)
CLUSTER_SPLITS = (1, 2, 4, 8)  # portable cluster sizes
CLUSTER_MAX_THREADS = 256      # the kernel's __launch_bounds__
CLUSTER_MAX_FILTER = 7


def cluster_supported(geom: ConvGeometry) -> str | None:
    """None when the ``"cluster"`` kernel runs ``geom``; otherwise the reason it cannot."""
    return core_conv_issue(geom, "cluster kernel", CLUSTER_MAX_FILTER)


def _check_cluster_tile(tile: ClusterTile, geom: ConvGeometry) -> None:
    if tile.nt not in CLUSTER_NT or tile.pt not in CLUSTER_PT:
        raise ValueError(f"tile.nt must be in {CLUSTER_NT} and tile.pt in {CLUSTER_PT}, got {tile}")
    check_splits(tile, CLUSTER_SPLITS)
    if tile.nb < tile.nt or tile.nb % tile.nt:
        raise ValueError(f"tile.nb must be a positive multiple of tile.nt, got {tile}")
    if min(tile.th, tile.twg, tile.ck) < 1:
        raise ValueError(f"tile.th, tile.twg and tile.ck must be >= 1, got {tile}")
    if not 1 <= tile.threads <= CLUSTER_MAX_THREADS:
        raise ValueError(f"tile {tile} has {tile.threads} threads; at most {CLUSTER_MAX_THREADS}")
    check_smem(tile, tile.smem_bytes(geom))


def check_splits(tile, allowed: tuple) -> None:
    """Raise ``ValueError`` when ``tile.splits`` is not allowed, or needs clusters this device lacks."""
    if tile.splits not in allowed:
        raise ValueError(f"tile.splits must be in {allowed}, got {tile.splits}")
    if tile.splits > 1 and backend.device_facts().compute_capability < (9, 0):
        raise ValueError(f"tile.splits = {tile.splits} needs thread-block clusters (sm_90); "
                         f"this device is {backend.device_facts().arch}")


def push_slot_floats(splits: int, share: int) -> int:
    """Shared floats a block of a ``splits``-block cluster adds after its stages for
    ``tdcx::PushReduce`` (kernels_cu/tc_cluster.cuh): ``splits`` slots of ``share``
    partial sums, padded to 8 bytes, then its 8-byte mbarrier; none without splits."""
    return -(-splits * share // 2) * 2 + 2 if splits > 1 else 0


def family_first(tiles, cost, family, limit: int | None, per_family: int = 2) -> list:
    """The ``limit`` tiles a tuner should time, cheapest ``cost`` first.

    The ``per_family`` cheapest tiles of every ``family(tile)`` come first, then
    the overall cheapest, so that the tuner sees every family whatever the
    estimate's bias; without ``limit``, every tile by cost.
    """
    tiles = sorted(tiles, key=cost)
    if not limit:
        return tiles
    picked, seen = [], {}
    for t in tiles:
        f = family(t)
        if seen.get(f, 0) < per_family:
            seen[f] = seen.get(f, 0) + 1
            picked.append(t)
    picked += [t for t in tiles if t not in picked]
    return sorted(picked[:limit], key=cost)


def check_smem(tile, nbytes: int) -> None:
    """Raise ``ValueError`` when ``tile`` needs more shared memory than a block may have here."""
    limit = backend.device_facts().smem_per_block_optin
    if nbytes > limit:
        raise ValueError(f"tile {tile} needs {nbytes} bytes of shared memory; "
                         f"the device allows {limit}")


def cluster_kernel(tile: ClusterTile, geom: ConvGeometry):
    """The compiled ``tdc_core_conv_cluster`` instantiation for ``tile`` and ``geom``."""
    return cuda.get_kernel(_FILE, f"tdc_core_conv_cluster<{geom.r}, {geom.s}, {geom.stride[0]}, "
                                  f"{tile.nt}, {tile.pt}, {tile.splits}>")


def cluster_candidates(geom: ConvGeometry, smem_limit: int,
                       clusters: bool = True) -> list[ClusterTile]:
    """Every cluster tile worth timing for ``geom`` that fits ``smem_limit`` bytes.

    Micro-tiles NT x PT of 2..8 each; channel groups up to 16; rows 1..8 and
    column groups 1..8 within the output (plus one tile of margin); cluster
    sizes that leave at least 4 channels per block (1 only without ``clusters``,
    i.e. before sm_90); stage depths of 8, 16 or
    the whole split (one stage); 32..256 threads.  Ordered and chosen by
    :mod:`tensorconv.tuning.cluster_model`.
    """
    rk = -(-geom.k // 4) * 4
    out = []
    for nt in (2, 4, 8):
        for pt in (2, 4, 8):
            for ng in (1, 2, 4, 8, 16):
                nb = nt * ng
                if nb > max(rk, nt) or (nb < min(geom.k, 16) and ng < 16):
                    continue
                for th in (1, 2, 4, 7, 8):
                    if th > geom.oh:
                        continue
                    for twg in (1, 2, 4, 8):
                        if (twg - 1) * pt >= geom.ow:
                            continue
                        for splits in CLUSTER_SPLITS if clusters else (1,):
                            if geom.c < 4 * splits and splits > 1:
                                continue
                            c_per = -(-geom.c // splits)
                            for ck in sorted({min(8, c_per), min(16, c_per), c_per}):
                                t = ClusterTile(nt, pt, nb, th, twg, ck, splits)
                                if (32 <= t.threads <= CLUSTER_MAX_THREADS
                                        and t.smem_bytes(geom) <= smem_limit):
                                    out.append(t)
    if not out:  # tiny problems: one small tile still runs
        out.append(ClusterTile(1, 1, 1, 1, 1, min(8, geom.c), 1))
    return out


def to_crsn(w):
    """Core weights (N, C, R, S) -> the kernel's CRSN order (C, R, S, N), contiguous."""
    return backend.array_module(w).ascontiguousarray(w.transpose(1, 2, 3, 0))


def _check_tile(tile: CoreTile, geom: ConvGeometry) -> None:
    if tile.th not in TILE_SIDES or tile.tw not in TILE_SIDES:
        raise ValueError(f"tile sides must be in {TILE_SIDES}, got {tile}")
    if tile.th * tile.tw > MAX_TILE_OUTPUTS:
        raise ValueError(f"tile {tile} has {tile.th * tile.tw} outputs per thread; "
                         f"at most {MAX_TILE_OUTPUTS}")
    if not 1 <= tile.tc <= geom.c:
        raise ValueError(f"tile.tc must be in 1..{geom.c}, got {tile.tc}")
    check_smem(tile, tile.smem_bytes(geom))


def tdc_kernel(tile: CoreTile, geom: ConvGeometry):
    """The compiled ``tdc_core_conv`` instantiation for ``tile`` (registers: ``.num_regs``)."""
    return cuda.get_kernel(_FILE, f"tdc_core_conv<{tile.th}, {tile.tw}, {geom.r}, {geom.s}>")


def tdc_threads(geom: ConvGeometry) -> int:
    """Threads per block: the output channels, rounded up to whole warps."""
    return 32 * -(-geom.k // 32)


def core_conv2d(x, w, stride=1, padding=0, *, bias=None, relu=False, residual=None,
                variant: str | None = None,
                tile: CoreTile | ClusterTile | tf32x3.Tf32x3Tile | winograd.WinogradTile
                | None = None, w_crsn=None, w_packed=None, out=None):
    """The core convolution of a Tucker-format layer, fp32, NCHW, with an optional epilogue.

    Computes ``relu?(conv(x, w) + bias + residual)``; any convolution the kernels
    take (filters up to 7 x 7, stride 1 or 2, no groups or dilation) runs here, so
    the inference engine also sends dense layers through it where tuning found it
    faster than the implicit GEMM.

    Parameters
    ----------
    x : CuPy (or DLPack CUDA) array, (B, D1, H, W), float32, C-contiguous
    w : array, (D2, D1, R, S), float32 — the core tensor in our (N, C, R, S) layout
    stride, padding : int or (int, int)
    bias : array, (D2,), float32, optional
    relu : bool
    residual : array, (B, D2, OH, OW), float32, optional
        Added before the ReLU.  The epilogue (bias, relu, residual) is not
        available with ``variant="tdc"`` (its blocks add partial sums atomically).
    variant : {"tdc", "cluster", "tf32x3", "winograd", "igemm"}, optional
        Default: the fastest of ``"cluster"``, ``"tf32x3"`` and ``"winograd"``
        when this shape was tuned on this device
        (:func:`tensorconv.tuning.oracle.tune_core`), else ``"cluster"``;
        ``"igemm"`` when none supports the shape (logged).
    tile : CoreTile, ClusterTile, Tf32x3Tile or WinogradTile (the variant's), optional
        Default: the tuned tile when this shape was tuned on this device
        (:mod:`tensorconv.tuning.oracle`), else the estimate's
        (:func:`tensorconv.tuning.cluster_model.choose_tile`,
        :func:`tensorconv.tuning.tf32x3_model.choose_tile`,
        :func:`tensorconv.ops.winograd.default_tile`); for ``"tdc"`` the
        calibrated model's (:func:`tensorconv.tuning.tdc_model.choose_tile`).
    w_crsn : array, (D1, R, S, D2), optional
        :func:`to_crsn` of ``w`` (``"tdc"``, ``"cluster"``), precomputed once
        (inference) instead of per call.
    w_packed : array, optional
        :func:`tensorconv.ops.tucker_tf32x3.pack_weights` of ``w`` (``"tf32x3"``) or
        :func:`tensorconv.ops.winograd.prepare_weights` (``"winograd"``), precomputed
        once; :func:`prepared_weights` gives the right one for a variant.
    out : array, (B, D2, OH, OW), float32, optional

    Returns
    -------
    CuPy array, (B, D2, OH, OW), float32
    """
    x, w = backend.as_array(x, "x"), backend.as_array(w, "w")
    bias = None if bias is None else backend.as_array(bias, "bias")
    geom = check_conv_args(x, w, bias, stride, padding, 1, 1, dtype=np.float32, contiguous=True)
    xp = backend.array_module(x)
    if xp is np:
        raise TypeError("core_conv2d runs on the GPU: pass CuPy arrays "
                        "(tensorconv.ops.conv2d computes the same on the CPU)")
    residual = dense.check_residual(residual, geom, xp)
    epilogue = (bias, residual, bool(relu))
    if variant == "tdc" and (bias is not None or residual is not None or relu):
        raise ValueError("bias, residual and relu are not available with variant='tdc'")
    if variant is not None and variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    if variant in _SUPPORT:
        reason = _SUPPORT[variant](geom)
        if reason:
            raise ValueError(reason)
    if variant is None:
        variant, tuned = _default_variant(geom)
        tile = tile if tile is not None or variant == "igemm" else tuned
    expected = {"tdc": CoreTile, "cluster": ClusterTile, "tf32x3": tf32x3.Tf32x3Tile,
                "winograd": winograd.WinogradTile}.get(variant)
    if tile is not None and not (expected and isinstance(tile, expected)):
        raise ValueError(f"tile {tile!r} does not fit variant={variant!r}"
                         + (f" (expects a {expected.__name__})" if expected else ""))
    if variant == "igemm":
        return dense.conv2d(x, w, bias, geom.stride, geom.padding, relu=relu, residual=residual,
                            out=out, algorithm="igemm")

    if variant == "tf32x3":
        from tensorconv.tuning import tf32x3_model

        tile = tile or tf32x3_model.choose_tile(geom)
        tf32x3.check_tile(tile, geom)
        w_packed = _prepared(tf32x3.pack_weights, w, w_packed, "w_packed",
                             tf32x3.packed_shape(geom), "tucker_tf32x3.pack_weights(w)", xp)
        out = dense.output_buffer(xp, out, geom.output_shape)
        tf32x3.launch(x, w_packed, out, geom, tile, epilogue)
        return out
    if variant == "winograd":
        from tensorconv.tuning.oracle import known_winograd_tile

        tile = tile or known_winograd_tile(geom) or winograd.default_tile(geom)
        winograd.check_tile(tile)
        w_packed = _prepared(winograd.prepare_weights, w, w_packed, "w_packed",
                             winograd.packed_shape(geom), "winograd.prepare_weights(w)", xp)
        out = dense.output_buffer(xp, out, geom.output_shape)
        winograd.launch(x, w_packed, out, geom, tile, epilogue)
        return out
    if tile is None and variant == "cluster":
        from tensorconv.tuning import cluster_model
        from tensorconv.tuning.oracle import known_cluster_tile

        tile = known_cluster_tile(geom) or cluster_model.choose_tile(geom)
    elif tile is None:
        from tensorconv.tuning.tdc_model import choose_tile

        tile = choose_tile(geom)
    (_check_cluster_tile if variant == "cluster" else _check_tile)(tile, geom)
    w_crsn = _prepared(to_crsn, w, w_crsn, "w_crsn", (geom.c, geom.r, geom.s, geom.k),
                       "to_crsn(w)", xp)
    out = dense.output_buffer(xp, out, geom.output_shape)
    if variant == "cluster":
        _launch_cluster(x, w_crsn, out, geom, tile, epilogue)
    else:
        _launch_tdc(x, w_crsn, out, geom, tile)
    return out


def epilogue_args(epilogue) -> tuple:
    """Kernel arguments (bias pointer, residual pointer, relu) of a checked
    ``(bias, residual, relu)``; absent arrays pass as null pointers."""
    bias, residual, relu = epilogue
    return (np.uintp(0) if bias is None else bias, np.uintp(0) if residual is None else residual,
            np.int32(relu))


_SUPPORT = {"tdc": tdc_supported, "cluster": cluster_supported, "tf32x3": tf32x3.supported,
            "winograd": winograd.supported}


def prepared_weights(variant: str, w) -> dict:
    """The weights ``variant`` of :func:`core_conv2d` takes precomputed, as its keyword
    arguments: ``{"w_packed": ...}`` (``"tf32x3"``, ``"winograd"``) or ``{"w_crsn": ...}``."""
    if variant == "tf32x3":
        return {"w_packed": tf32x3.pack_weights(w)}
    if variant == "winograd":
        return {"w_packed": winograd.prepare_weights(w)}
    return {"w_crsn": to_crsn(w)}


def _default_variant(geom: ConvGeometry):
    """(variant, tile): the tuned winner for ``geom`` on this device, else the
    cluster kernel, else ``"igemm"`` (tile None; logged)."""
    from tensorconv.tuning.oracle import default_core

    reason = cluster_supported(geom)
    if reason:
        log.info("core_conv2d falls back to igemm: %s", reason)
        return "igemm", None
    return default_core(geom)


def _prepared(prepare, w, given, name: str, shape: tuple, how: str, xp):
    """``given`` checked against ``shape``, or ``prepare(w)`` when not given."""
    if given is None:
        return prepare(w)
    given = backend.as_array(given, name)
    check_array(given, name, ndim=len(shape), dtype=np.float32, contiguous=True, xp=xp)
    if tuple(given.shape) != shape:
        raise ValueError(f"{name} has shape {tuple(given.shape)}; expected {shape} ({how})")
    return given


def _launch_cluster(x, w_crsn, out, geom: ConvGeometry, tile: ClusterTile,
                    epilogue=(None, None, False)) -> None:
    kernel = cluster_kernel(tile, geom)
    smem = tile.smem_bytes(geom)
    cuda.set_dynamic_smem(kernel, smem)
    st = geom.stride[0]
    iht, iwt = (tile.th - 1) * st + geom.r, (tile.tw - 1) * st + geom.s
    vec_w = geom.k % 4 == 0 and tile.nb % 4 == 0
    i32, fd = np.int32, cuda.fast_div
    kernel(tile.grid(geom), (tile.threads,), (
        x, w_crsn, out, *epilogue_args(epilogue), i32(geom.c), i32(geom.h), i32(geom.w),
        i32(geom.k), i32(geom.oh), i32(geom.ow), i32(geom.padding[0]), i32(geom.padding[1]),
        i32(tile.nb), i32(tile.th), i32(tile.ck), i32(-(-geom.c // tile.splits)), i32(tile.stage_floats(geom)),
        fd(tile.nb // tile.nt), fd(tile.twg), fd(-(-geom.k // tile.nb)), fd(-(-geom.ow // tile.tw)),
        fd(iht * iwt), fd(iwt), fd(tile.nb // 4 if vec_w else tile.nb), fd(tile.ck),
        fd(tile.th * tile.tw), fd(tile.tw), fd(tile.share if tile.splits > 1 else 1)),
        shared_mem=smem)


def _launch_tdc(x, w_crsn, out, geom: ConvGeometry, tile: CoreTile) -> None:
    kernel = tdc_kernel(tile, geom)
    smem = tile.smem_bytes(geom)
    cuda.set_dynamic_smem(kernel, smem)
    tiles_w = -(-geom.ow // tile.tw)
    tiles_hw = -(-geom.oh // tile.th) * tiles_w
    c_tiles = -(-geom.c // tile.tc)
    atomic = c_tiles > 1
    if atomic:
        out.fill(0)
    i32 = np.int32
    kernel((tiles_hw * c_tiles, geom.n), (tdc_threads(geom),), (
        x, w_crsn, out, i32(geom.c), i32(geom.h), i32(geom.w), i32(geom.k), i32(geom.oh),
        i32(geom.ow), i32(geom.stride[0]), i32(geom.stride[1]), i32(geom.padding[0]),
        i32(geom.padding[1]), i32(tile.tc), i32(tiles_w), i32(tiles_hw), i32(atomic)),
        shared_mem=smem)
