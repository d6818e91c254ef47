"""Tucker core convolution on the tensor cores at fp32 accuracy (``kernels_cu/tucker_core_tf32x3.cu``).

The ``"tf32x3"`` variant of :func:`tensorconv.ops.tucker.core_conv2d`: an
implicit GEMM (output pixels x output channels over input channels x taps) on
``mma.sync`` tf32 tiles, each fp32 operand split into two tf32 parts and three
products accumulated in fp32, so that the result keeps fp32 accuracy.  It is
meant for the large planes (56 x 56 and up) where the fp32 ``"cluster"`` kernel
is bound by its multiply-add issue rate; on small planes the cluster kernel's
split over input channels wins.  This module owns the tile, the weight packing,
the launch; :mod:`tensorconv.tuning.tf32x3_model` orders its tiles for the
tuner (:func:`tensorconv.tuning.oracle.tune_tf32x3_tile`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tensorconv import backend, cuda
from tensorconv.checks import ConvGeometry, core_conv_issue

_FILE = "tucker_core_tf32x3.cu"
WARP_TILES = (1, 2, 4)        # WM (16-pixel) and WN (8-channel) mma tiles per warp
TILE_WIDTHS = (8, 16, 32, 64)
STAGE_CHANNELS = (8, 16, 32)
SPLITS = (1, 2, 4, 8)         # blocks of a thread-block cluster that split the input channels
MAX_WARPS = 8                 # the kernel's __launch_bounds__(256)
MAX_FILTER = 7


@dataclass(frozen=True)
class Tf32x3Tile:
    """Launch shape of the ``"tf32x3"`` kernel.

    A block of ``warps_m x warps_n`` warps computes ``th x tw`` output pixels
    (``th * tw = warps_m * wm * 16``) by ``warps_n * wn * 8`` output channels;
    each warp ``wm x wn`` m16n8k8 tiles; operands are staged ``ck`` input
    channels at a time.  ``splits`` blocks (a thread-block cluster) share the
    input channels and add their partial sums through distributed shared memory.
    """

    wm: int
    wn: int
    warps_m: int
    warps_n: int
    tw: int
    ck: int
    splits: int = 1

    @property
    def threads(self) -> int:
        return 32 * self.warps_m * self.warps_n

    @property
    def pixels(self) -> int:
        return self.warps_m * self.wm * 16

    @property
    def th(self) -> int:
        return self.pixels // self.tw

    @property
    def n8(self) -> int:
        """8-channel tiles per block."""
        return self.warps_n * self.wn

    def layout(self, geom: ConvGeometry) -> tuple[int, int, int]:
        """(row pitch, channel plane, lead) of a staged input cube, in floats.

        When the input width is a multiple of 4 the kernel copies rows 16 bytes
        at a time from the aligned column ``lead`` words left of the tile's
        first, so the pitch covers ``lead`` too.  The plane is padded to 8 mod 32
        words so that the four channels a warp's A fragment reads at once land
        in distinct bank octets (and stays 16-byte aligned).
        """
        st = geom.stride[0]
        iwt = (self.tw - 1) * st + geom.s
        lead = (-geom.padding[1]) % 4 if geom.w % 4 == 0 else 0
        iwp = -(-(lead + iwt) // 4) * 4 if geom.w % 4 == 0 else iwt
        plane = ((self.th - 1) * st + geom.r) * iwp
        plane += (8 - plane) % 32
        return iwp, plane, lead

    def chunks(self, geom: ConvGeometry) -> int:
        """Stages of ``ck`` input channels one block of the cluster works through."""
        return -(-(-(-geom.c // self.ck)) // self.splits)

    def stage_floats(self, geom: ConvGeometry) -> int:
        """Two operand stages (one when a single stage covers a block's input channels),
        each the input cube's big and small parts and the weights."""
        stage = 2 * self.ck * self.layout(geom)[1] + self.ck // 8 * geom.r * geom.s * self.n8 * 128
        return stage * (2 if self.chunks(geom) > 1 else 1)

    @property
    def share(self) -> int:
        """Outputs (channel-major within the block) each block of a cluster owns and sums:
        a multiple of 4 (``tdcx::PushReduce`` sends runs of up to 4)."""
        return -(-self.n8 * 8 * self.pixels // (4 * self.splits)) * 4

    def smem_bytes(self, geom: ConvGeometry) -> int:
        """The stages; with splits, then the ``splits`` slots of ``share`` partial sums a
        block receives from the cluster and its mbarrier (``tdcx::PushReduce``)."""
        from tensorconv.ops.tucker import push_slot_floats

        return 4 * (self.stage_floats(geom) + push_slot_floats(self.splits, self.share))

    def grid(self, geom: ConvGeometry) -> tuple[int, int, int]:
        """(pixel tiles, batch x channel blocks, splits): the cluster spans z."""
        tiles = -(-geom.oh // self.th) * -(-geom.ow // self.tw)
        return tiles, geom.n * -(-geom.k // (8 * self.n8)), self.splits


def supported(geom: ConvGeometry) -> str | None:
    """None when the ``"tf32x3"`` kernel runs ``geom``; otherwise the reason it cannot."""
    if (why := core_conv_issue(geom, "tf32x3 kernel", MAX_FILTER)) is not None:
        return why
    if backend.device_facts().compute_capability < (8, 0):
        return "the tf32x3 kernel needs tf32 tensor cores (sm_80 or newer)"
    return None


def check_tile(tile: Tf32x3Tile, geom: ConvGeometry) -> None:
    """Raise ``ValueError`` naming what is wrong with ``tile`` for ``geom``."""
    from tensorconv.ops.tucker import check_smem, check_splits

    if tile.wm not in WARP_TILES or tile.wn not in WARP_TILES:
        raise ValueError(f"tile.wm and tile.wn must be in {WARP_TILES}, got {tile}")
    if tile.warps_m < 1 or tile.warps_n < 1 or tile.warps_m * tile.warps_n > MAX_WARPS:
        raise ValueError(f"tile {tile} must have 1..{MAX_WARPS} warps")
    if tile.tw not in TILE_WIDTHS or tile.pixels % tile.tw:
        raise ValueError(f"tile.tw must be in {TILE_WIDTHS} and divide the block's "
                         f"{tile.pixels} pixels, got {tile}")
    if tile.ck not in STAGE_CHANNELS:
        raise ValueError(f"tile.ck must be in {STAGE_CHANNELS}, got {tile.ck}")
    check_splits(tile, SPLITS)
    check_smem(tile, tile.smem_bytes(geom))


def candidates(geom: ConvGeometry, smem_limit: int, clusters: bool = True) -> list[Tf32x3Tile]:
    """Every tile worth timing: tiles no wider than the output (rounded up to 8), no
    more channel tiles than the output needs, stages no deeper than the input, and
    splits (only with ``clusters``, i.e. sm_90) that leave every block a stage."""
    n8_need = -(-geom.k // 8)
    ow8 = -(-geom.ow // 8) * 8
    c8 = -(-geom.c // 8) * 8
    out = []
    for wm in WARP_TILES:
        for wn in WARP_TILES:
            for warps_m in (1, 2, 4, 8):
                for warps_n in (1, 2, 4):
                    bn8 = warps_n * wn
                    if warps_m * warps_n > MAX_WARPS or (bn8 > 1 and bn8 >= 2 * n8_need):
                        continue
                    for tw in TILE_WIDTHS:
                        pixels = warps_m * wm * 16
                        if pixels % tw or tw > ow8 or pixels // tw > 2 * geom.oh:
                            continue
                        for ck in STAGE_CHANNELS:
                            if ck > max(8, c8):
                                continue
                            for splits in SPLITS if clusters else (1,):
                                if splits > -(-geom.c // ck):
                                    continue
                                t = Tf32x3Tile(wm, wn, warps_m, warps_n, tw, ck, splits)
                                if t.smem_bytes(geom) <= smem_limit:
                                    out.append(t)
    return out


def round_tf32(a, xp):
    """Round fp32 to the nearest tf32 (ties away from zero, as cvt.rna), finite values only."""
    bits = a.view(xp.uint32)
    rounded = ((bits + xp.uint32(0x1000)) & xp.uint32(0xFFFFE000)).view(xp.float32)
    return xp.where(xp.isfinite(a), rounded, a)


def pack_weights(w, xp=None, split: bool = True):
    """Core weights in the kernel's B-fragment order, split into tf32 (big, small) parts.

    Parameters
    ----------
    w : array, (N, C, R, S), float32
    xp : module, optional
        ``numpy`` or ``cupy``; default: the module of ``w``.
    split : bool
        False: the fp32 values alone, for a kernel that splits them as it loads them.

    Returns
    -------
    array, (ceil(N/8), ceil(C/8), R*S, 32, 4), float32: for output tile n8,
    8-channel group c8, tap rs and lane (g, t), the B-fragment values
    ``w[8 n8 + g, 8 c8 + t]`` and ``w[8 n8 + g, 8 c8 + t + 4]`` — big parts,
    then small parts; zero beyond N and C.  With ``split=False`` the last axis is 2:
    the two values.
    """
    xp = xp or backend.array_module(w)
    n, c, r, s = w.shape
    n8, c8 = -(-n // 8), -(-c // 8)
    full = xp.zeros((n8 * 8, c8 * 8, r, s), xp.float32)
    full[:n, :c] = xp.asarray(w, dtype=xp.float32)

    def fragments(a):  # (n8, g, c8, half, t, r, s) -> (n8, c8, r, s, g, t, half)
        return a.reshape(n8, 8, c8, 2, 4, r, s).transpose(0, 2, 5, 6, 1, 4, 3)

    if not split:
        return xp.ascontiguousarray(fragments(full).reshape(n8, c8, r * s, 32, 2))
    big = round_tf32(full, xp)
    small = round_tf32(full - big, xp)
    packed = xp.stack([fragments(big), fragments(small)], axis=-2)
    return xp.ascontiguousarray(packed.reshape(n8, c8, r * s, 32, 4))


def kernel(tile: Tf32x3Tile, geom: ConvGeometry):
    """The compiled ``tdc_core_conv_tf32x3`` instantiation for ``tile`` and ``geom``."""
    return cuda.get_kernel(_FILE, f"tdc_core_conv_tf32x3<{geom.r}, {geom.s}, {geom.stride[0]}, "
                                  f"{tile.wm}, {tile.wn}, {tile.splits}>")


def launch(x, w_packed, out, geom: ConvGeometry, tile: Tf32x3Tile,
           epilogue=(None, None, False)) -> None:
    """Run the kernel on checked arguments (``core_conv2d`` checks them); ``epilogue``:
    (bias or None, residual or None, relu)."""
    from tensorconv.ops.tucker import epilogue_args

    k = kernel(tile, geom)
    smem = tile.smem_bytes(geom)
    cuda.set_dynamic_smem(k, smem)
    iwp, plane, lead = tile.layout(geom)
    st = geom.stride[0]
    iht, iwt = (tile.th - 1) * st + geom.r, (tile.tw - 1) * st + geom.s
    cols = iwp // 4 if geom.w % 4 == 0 else iwt
    chunks = -(-geom.c // tile.ck)
    tiles_w, n_blocks = -(-geom.ow // tile.tw), -(-geom.k // (8 * tile.n8))
    i32, fd = np.int32, cuda.fast_div
    k(tile.grid(geom), (tile.threads,), (
        x, w_packed, out, *epilogue_args(epilogue), i32(geom.c), i32(geom.h), i32(geom.w),
        i32(geom.k), i32(geom.oh), i32(geom.ow), i32(geom.padding[0]), i32(geom.padding[1]),
        i32(tile.th), i32(tile.ck),
        i32(iwp), i32(plane), i32(lead), i32(geom.w % 4 == 0), i32(chunks),
        i32(-(-chunks // tile.splits)), i32(tile.stage_floats(geom)), fd(tiles_w), fd(n_blocks),
        fd(tile.warps_m), fd(tile.tw), fd(iht * cols), fd(cols), fd(tile.pixels),
        fd(tile.share if tile.splits > 1 else 1)), shared_mem=smem)


def packed_shape(geom: ConvGeometry) -> tuple[int, ...]:
    """Shape of :func:`pack_weights` for ``geom``'s weights."""
    return (-(-geom.k // 8), -(-geom.c // 8), geom.r * geom.s, 32, 4)
