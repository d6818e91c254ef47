"""The tiled remainder kernel's (``sparse_csr_tiled`` in ``kernels_cu/sparse_conv.cu``)
template tiles and how a tile's thread block covers an output and stages its input:
images, rows and columns, the shared-memory row pitch, lines in order or by phase.
Chosen by the work, the block limits and the banks a warp's reads fall on, not searched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from tensorconv.checks import ConvGeometry, conv_geometry
from tensorconv.ops._launch import cdiv


@dataclass(frozen=True)
class RemainderTile:
    """The tiled remainder kernel's template: ``rb`` rows per thread block (``warps``
    warps of ``rb // warps`` rows each), ``px`` pixels per thread (a tile of ``32 * px``
    pixels), ``ck`` input channels per shared-memory stage."""

    rb: int
    px: int
    ck: int
    warps: int = 4


# At most 64 accumulators a thread; 8-channel stages, and a few of 16 or 32 channels
# (fewer barriers and copy round trips: deep 1x1 layers, whose chunks compute little);
# blocks of 8 or 16 warps, each staged chunk serving more rows.
REMAINDER_TILES = tuple(RemainderTile(rb, px, 8) for rb in (64, 32, 16, 8) for px in (8, 4, 2, 1)
                        if rb * px <= 256) + tuple(
    RemainderTile(rb, px, ck) for rb, px, ck in ((32, 4, 16), (32, 2, 16), (16, 4, 16),
                                                 (64, 1, 32), (32, 2, 32), (16, 4, 32))) + tuple(
    RemainderTile(rb, px, 8, w) for rb, px, w in ((64, 2, 8), (32, 2, 8), (64, 4, 8),
                                                  (128, 2, 16), (64, 2, 16), (128, 1, 16),
                                                  (64, 8, 8), (128, 4, 16)))
_STAGE_BYTES = 24 * 1024         # the most shared memory one of a remainder block's two
                                 # stages holds


def _pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


@dataclass(frozen=True)
class RemainderGeometry:
    """How the tiled remainder kernel covers an output: ``nb`` images x ``th`` x ``tw``
    pixels per thread block (powers of two, ``32 * px`` in all), the staged input
    ``iht`` rows per channel of which a tile's taps read ``iwt`` columns, the rows
    ``pitch`` floats apart in shared memory, copied ``vec`` floats at a time (4: 16-byte
    copies, the line starting up to 3 columns early at a multiple of 4); ``rstep`` and
    ``cstep`` the input rows and columns between staged ones (the stride where the filter
    is one tap high or wide, which then stages only the pixels it reads; else 1);
    ``phases`` > 1 (the horizontal stride, word copies): each line staged as that many
    runs of ``pitch // phases`` words, input column ``u`` of the line at
    ``(u % phases) * (pitch // phases) + u // phases``, so that a strided tile reads
    consecutive words (a warp's 32 reads on 32 banks, not every other one); ``rphases``
    > 1 (the vertical stride): a channel's lines staged by row phase, the input rows ``q``,
    ``q + rphases``, ... of each phase ``q`` in turn (:meth:`line_rows`), so that output
    rows next to each other read lines next to each other: an odd pitch then puts them on
    banks of both parities (whole lines move: the copies stay 16 bytes); ``ipad`` words
    after each image's lines in a stage, where a warp's pixels span images: with 8-channel
    stages and 16-byte copies an image's lines take a multiple of 32 words, so without it
    two images' pixels fall on the same banks."""

    nb: int
    th: int
    tw: int
    iht: int
    iwt: int
    pitch: int
    vec: int = 1
    rstep: int = 1
    cstep: int = 1
    phases: int = 1
    rphases: int = 1
    ipad: int = 0

    def image_words(self, tile: RemainderTile) -> int:
        """The words between two images' staged lines in a stage."""
        return tile.ck * self.iht * self.pitch + self.ipad

    def read_stride(self, geom: ConvGeometry) -> tuple[int, int]:
        """The stride of a tile's reads in the staged lines: the convolution's, or 1 where
        the lines were staged at the stride (a filter one tap high or wide) or by phase."""
        return (1 if self.rphases > 1 else geom.stride[0] // self.rstep,
                1 if self.phases > 1 else geom.stride[1] // self.cstep)

    def line_rows(self) -> np.ndarray:
        """``(iht,)`` int64: the input row (from the tile's first, in staged rows) each
        staged line of a channel holds."""
        t = np.arange(self.iht)
        return t if self.rphases == 1 else \
            np.concatenate([t[q::self.rphases] for q in range(self.rphases)])

    def row_line(self, r):
        """The staged line, in its channel, of tap row ``r`` (an int or an int array) of a
        tile's first output row."""
        if self.rphases == 1:
            return r
        q = np.asarray(r) % self.rphases
        counts = -(-(self.iht - np.arange(self.rphases)) // self.rphases)
        return np.concatenate([[0], np.cumsum(counts)])[q] + np.asarray(r) // self.rphases

    def column_word(self, s):
        """The staged word, in its line, of tap column ``s`` (an int or an int array) of a
        tile's first output column (past the line's ``lead`` columns)."""
        if self.phases == 1:
            return s
        return (s % self.phases) * (self.pitch // self.phases) + s // self.phases

    def threads(self, tile: RemainderTile) -> int:
        return 32 * tile.warps

    def stage_floats(self, tile: RemainderTile) -> int:
        """One stage's floats, rounded up to 16 bytes (the taps' stage follows)."""
        return 4 * cdiv(self.nb * self.image_words(tile), 4)

    def smem_bytes(self, tile: RemainderTile) -> int:
        """The input's two stages (:func:`remainder_smem` adds the taps')."""
        return 2 * 4 * self.stage_floats(tile)

    def grid(self, geom: ConvGeometry, tile: RemainderTile) -> tuple[int, int, int]:
        return (cdiv(geom.oh, self.th) * cdiv(geom.ow, self.tw), cdiv(geom.k, tile.rb),
                cdiv(geom.n, self.nb))


def lane_words(pitch: int, tw: int, th: int, stride, rows_per_image: int,
               image_pad: int = 0) -> list[int]:
    """The staged word each lane of a warp reads for one tap (pixel l of the tile:
    column l % tw, row l // tw % th, image l // (tw·th); images ``rows_per_image *
    pitch + image_pad`` words apart)."""
    sh, sw = stride
    image = rows_per_image * pitch + image_pad
    return [lane // (tw * th) * image + (lane // tw) % th * sh * pitch + lane % tw * sw
            for lane in range(32)]


def bank_conflicts(pitch: int, tw: int, th: int, stride, rows_per_image: int,
                   image_pad: int = 0) -> int:
    """The most distinct words one shared-memory bank serves at once when a warp reads
    one tap (:func:`lane_words`)."""
    words = {}
    for word in lane_words(pitch, tw, th, stride, rows_per_image, image_pad):
        words.setdefault(word % 32, set()).add(word)
    return max(len(v) for v in words.values())


def tile_shape(geom: ConvGeometry, px: int) -> tuple[int, int, int]:
    """``(nb, th, tw)``: the output's width rounded up to a power of two (at most 64 and
    the tile), then its height, then images, ``32 * px`` pixels in all."""
    pixels = 32 * px
    tw = min(64, _pow2(geom.ow), pixels)
    th = min(_pow2(geom.oh), pixels // tw)
    return pixels // (tw * th), th, tw


def column_phases(geom: ConvGeometry) -> int:
    """The column phases a by-phase staging of ``geom`` uses (:class:`RemainderGeometry`):
    its horizontal stride where that is even and the filter more than one tap wide (an odd
    stride's reads in order already fall on distinct banks), else 1.  Not the default:
    on the H100 its word copies cost more than the bank conflicts they remove (ResNet-18's
    strided layers 1.0-1.9x slower by phase, ``docs/notes/sparse_conv.md``); a tile's
    lines are staged in order unless ``phases`` says otherwise."""
    return geom.stride[1] if geom.stride[1] % 2 == 0 and geom.s > 1 else 1


def remainder_geometry(geom: ConvGeometry, tile: RemainderTile, vec: int | None = None,
                       phases: int = 1, row_phases: bool | None = None) -> RemainderGeometry:
    """The tile of :func:`tile_shape` and its staging: ``vec`` 4 (16-byte copies) where the
    input's rows are a multiple of 4 floats, else 1; ``phases`` (1, or the horizontal
    stride of a filter wider than a tap: :func:`column_phases`) the runs a line is staged
    in (word copies where above 1); the row pitch the least, from the columns a line
    needs up, that spreads a warp's reads over the most banks and keeps a stage within
    :data:`_STAGE_BYTES` (where one does); a filter more than a tap high with a vertical
    stride has its lines staged by row phase where that spreads the reads over more banks
    still (``row_phases``: default :data:`ROW_PHASES`; False: in order); where a warp's
    pixels span images, the least padding after each image's lines (a multiple of
    ``vec``) that spreads them further."""
    vec = (4 if geom.w % 4 == 0 else 1) if vec is None else vec
    if vec not in (1, 4) or vec == 4 and geom.w % 4:
        raise ValueError(f"vec must be 1, or 4 where the input's width is a multiple of 4, "
                         f"got {vec} for width {geom.w}")
    if phases != 1 and (phases != geom.stride[1] or geom.s == 1):
        raise ValueError(f"phases must be 1, or the horizontal stride {geom.stride[1]} for a "
                         f"filter wider than 1 tap, got {phases}")
    nb, th, tw = tile_shape(geom, tile.px)
    rstep = geom.stride[0] if geom.r == 1 else 1
    cstep = geom.stride[1] if geom.s == 1 else 1
    if cstep > 1 or phases > 1:
        vec = 1                    # every other column: no 16-byte runs
    iwt = (tw - 1) * geom.stride[1] // cstep + geom.s
    iht = (th - 1) * geom.stride[0] // rstep + geom.r
    need = vec * cdiv(iwt + 3 if vec == 4 else iwt, vec)
    step = phases * vec
    need = step * cdiv(need, step)
    sw = 1 if phases > 1 else geom.stride[1] // cstep
    by_row = ROW_PHASES if row_phases is None else row_phases
    rphases = (1, geom.stride[0]) if by_row and geom.r > 1 and geom.stride[0] > 1 else (1,)
    pads = range(0, 32, vec) if nb > 1 and tw * th < 32 else (0,)
    fits = [(p, pad) for p in range(need, need + 32 * step, step) for pad in pads
            if 4 * nb * (tile.ck * iht * p + pad) <= _STAGE_BYTES]
    _, rp, pitch, pad = min(
        (bank_conflicts(p, tw, th, (1 if rp > 1 else geom.stride[0] // rstep, sw),
                        tile.ck * iht, pad), rp, p, pad)
        for rp in rphases for p, pad in fits or [(need, 0)])
    return RemainderGeometry(nb, th, tw, iht, iwt, pitch, vec, rstep, cstep, phases, rp, pad)


ROW_PHASES = True    # stage a strided tile's lines by row phase where it spreads the reads


class Staging(NamedTuple):
    """How the tiled remainder stages its input's lines: ``phases`` column phases (1: in
    order; :func:`column_phases`: by phase, word copies), ``words`` word copies even where
    16-byte ones would do (the lines then by row phase where that spreads a tile's reads,
    as :func:`remainder_geometry` always chooses).  ``gather``: for the pointwise
    remainder of a strided 1x1 filter without padding, the pixels it reads first copied
    into a compact (N, C, OH, OW) input, on which the kernel then runs at stride 1
    (:func:`gathered_geometry`)."""

    phases: int = 1
    words: bool = False
    gather: bool = False


GATHERED = Staging(gather=True)


def gathers(geom: ConvGeometry) -> bool:
    """Whether the pointwise remainder of ``geom`` may read a gathered input: a 1x1
    filter, strided, without padding (every pixel it reads is then one output pixel's)."""
    return geom.r * geom.s == 1 and geom.stride != (1, 1) and geom.padding == (0, 0)


def gathered_geometry(geom: ConvGeometry) -> ConvGeometry:
    """The stride-1 convolution of ``geom`` (:func:`gathers`) on its gathered input."""
    return conv_geometry((geom.n, geom.c, geom.oh, geom.ow), (geom.k, geom.c, 1, 1), 1, 0)


def stagings(geom: ConvGeometry) -> tuple:
    """The tiled remainder's stagings of ``geom`` a tuned plan times: the default (None:
    by column phase where the input is copied a word at a time anyway, else in order
    with 16-byte copies), then, for a strided filter wider than a tap, by column phase and
    a word at a time in order (by row phase where that helps).  On the H200 each won
    on some of ResNet-18-8x's strided 3x3 layers and lost on others by up to 1.22x
    (``results/runs/sparse_staging_phases_h200.csv``)."""
    out = [None]
    if geom.r * geom.s > 1 and geom.stride != (1, 1):
        if column_phases(geom) > 1:
            out.append(Staging(column_phases(geom), True))
        out.append(Staging(1, True))
    return tuple(out)
