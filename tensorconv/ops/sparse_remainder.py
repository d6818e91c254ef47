"""Which kernel, tile and staging run a sparse layer's remainder (``kernels_cu/sparse_conv.cu``):
the kernels' names, the measured rule that picks the kernel, the choices a tuned plan
times, and the checks of a caller's choice.
"""

from __future__ import annotations

from tensorconv import precision
from tensorconv.checks import ConvGeometry
from tensorconv.ops import sparse_pairs_tc as spt
from tensorconv.ops import sparse_tc_remainder as stc
from tensorconv.ops import sparse_unrolled as su
from tensorconv.ops import sparse_unrolled_direct as sud
from tensorconv.ops.sparse_pointwise import (
    POINTWISE_TILES,
    PointwiseTile,
    default_pointwise_tile,
)
from tensorconv.ops.sparse_pointwise import kernel_name as _pointwise_name
from tensorconv.ops.sparse_staging import (
    GATHERED,
    REMAINDER_TILES,
    RemainderTile,
    Staging,
    gathered_geometry,
    gathers,
    stagings,
)
from tensorconv.ops.sparse_tiles import default_remainder_tile

CSR_PIXELS = (128, 256)


REMAINDERS = ("auto", "rows", "tiled", "pointwise", "tc", "unrolled", "pairs")   # one thread
# per pixel of a row, the shared-memory tiled kernel, (1x1 filters) the unstaged one, the
# tensor cores, code written for the layer's weights, or (1x1, stride 1, one tf32 pass) the
# sparse tensor cores (docs/notes/sparse_conv.md compares them); "auto": choose_remainder


def _csr_name(pix: int) -> str:
    return f"sparse_csr_rows<{pix}>"


def _tiled_name(t: RemainderTile) -> str:
    return f"sparse_csr_tiled<{t.rb}, {t.px}, {t.ck}, {t.warps}>"


def choose_remainder(geom: ConvGeometry) -> str:
    """``"pointwise"`` for 1x1 filters: nothing staged, the input read through the L1 by
    blocks of 8 or 16 warps sharing their pixels (H200, batch 32: trained ResNet-18-8x and
    GoogLeNet-8x 1x1 layers 1.4-4.4x faster than on the tiled or row kernels; random 8x
    masks on ResNet-50's and GoogLeNet's shapes up to 2x; ``docs/notes/sparse_conv.md``),
    except a strided, padded one whose input passes :data:`_POINTWISE_STRIDED_BYTES`
    (ResNet-50's at batch 32, 26-103 MB: 1.3-1.5x slower than tiled, its blocks reading
    every other word of more lines than the L1 keeps); without padding such a layer
    reads a gathered input instead (:func:`default_staging`).  ``"tiled"`` for every
    wider filter, where each staged input value serves several taps as well as several
    rows.  The bound rests on those two shapes: ResNet-18's strided shortcut on a 56x56
    input (25.7 MB) ran 1.65x faster on the pointwise kernel, so a tuned plan times both
    on every 1x1 layer (:func:`remainder_choices`)."""
    if geom.r * geom.s == 1:
        return "tiled" if _big_strided(geom) and not gathers(geom) else "pointwise"
    return "tiled"


def _big_strided(geom: ConvGeometry) -> bool:
    return geom.stride != (1, 1) and \
        4 * geom.n * geom.c * geom.h * geom.w > _POINTWISE_STRIDED_BYTES


def default_staging(geom: ConvGeometry) -> Staging | None:
    """How the automatic remainder of ``geom`` reads its input where not as its kernel
    does by default: :data:`GATHERED` for a strided 1x1 filter without padding whose input
    passes :data:`_POINTWISE_STRIDED_BYTES`.  On ResNet-50-8x's three strided shortcuts
    at 224x224 (H200, batch 32, 26-51 MB inputs) the pointwise rule's tile on a gathered
    input took 152-190 µs against the tiled rule's 299-372 (``docs/notes/sparse_conv.md``)."""
    return GATHERED if gathers(geom) and _big_strided(geom) else None


def default_pointwise_choice(geom: ConvGeometry, sm_count: int = 132) -> tuple:
    """The pointwise remainder's ``(tile, staging)`` when neither is given: the rule's tile
    on the input as :func:`default_staging` reads it."""
    staging = default_staging(geom)
    g = geom if staging is None else gathered_geometry(geom)
    return default_pointwise_tile(g, sm_count), staging


_POINTWISE_STRIDED_BYTES = 16 << 20


def remainder_choices(geom: ConvGeometry, sm_count: int = 132) -> tuple:
    """The automatic remainder's ``(tile, staging)`` pairs a tuned plan times on ``geom``
    (on a GPU of ``sm_count`` SMs), the rules' first (:func:`choose_remainder`'s kernel on
    its tile, staged by default).

    A 1x1 filter: every pointwise tile, batched or not (staging None), the tiled rule's
    tile, and the tiles of the kernel unrolled for the weights without staging
    (:mod:`tensorconv.ops.sparse_unrolled_direct`, any stride: 1.4-2.1x faster than the
    pointwise kernel's fastest tile on ResNet-18-8x's strided shortcuts) where the layer
    is small enough to compile (:func:`fits`); last, on a strided 1x1 filter without
    padding, every pointwise tile on a gathered input (:data:`GATHERED`: the kernel reads
    a compact copy of the pixels it needs, at stride 1; on ResNet-50's strided shortcuts
    at 224x224, whose inputs are too large for the L1 to serve every other word, the
    pointwise and tiled kernels ran 1.3-1.6x slower than cuDNN fp32, and their weights
    are too many to unroll), the rule's tile on it first of all where
    :func:`default_staging` gathers.  The pointwise rule is 1.16x the fastest
    tile in geometric mean and 1.49x at worst on 27 trained 1x1 layers, the byte bound
    between the two kernels rests on two shapes, and a 1x1 layer's tiles cost little to
    time.  A wider filter: the tiled rule's tile
    (:func:`default_remainder_tile`: within 1.03x of the fastest on 13 of 14 trained 3x3
    layers) on each of :func:`stagings` (H200, ``docs/notes/sparse_conv.md``).  Under
    ``precision.using("tf32")``, then every tile of the tensor-core remainder
    (:mod:`tensorconv.ops.sparse_tc_remainder`: 1.08-1.33x the tiled kernel on trained
    pruned 3x3 layers at one tf32 pass; at fp32 accuracy seldom faster, so not timed), and
    every tile of the sparse tensor cores (:mod:`tensorconv.ops.sparse_pairs_tc`, any
    filter of at most 64 taps, stride and padding: one tf32 pass only; on GoogLeNet-8x's and
    ResNet-50-8x's 1x1 layers at stride 1 0.6-1.7x cuDNN TF32, 1.4-2x the unrolled kernel
    on ResNet-50's deepest ones; on GoogLeNet's 3x3 layers 0.33-0.63x cuDNN TF32, faster
    than every other choice on three of them; the fastest choice on three of five of
    ResNet-50's stride-2 layers timed).
    An odd square "same" filter wider than 1x1 at stride 1 also gets the unrolled kernel's
    tiles (:mod:`tensorconv.ops.sparse_unrolled`), where the layer is small enough to
    compile (:func:`fits`).  At stride 2 that kernel runs (``remainder="unrolled"``) but is
    not timed: on ResNet-18-8x's stride-2 layers it took 1.9-3.4x the tiled kernel's time
    (its stage copies word by word, four input words an output pixel), and its compile
    would only slow the tuning.  Every wider filter, at any stride, also gets the unstaged
    unrolled kernel's tiles (:mod:`tensorconv.ops.sparse_unrolled_direct`: each tap one
    load through the L1; warm, 1.35-2.6x faster than the tiled kernel on ResNet-18-8x's
    strided 3x3 layers and 2x faster than the staged one on its 64x64 stride-1 layers,
    slower than the staged one on its 128x128 layers)."""
    tiled = default_remainder_tile(geom)
    tc = ()
    if precision.current() == "tf32":
        tc = tuple((t, None) for t in stc.candidates(stc.Problem(geom), None))
        tc += tuple((t, None) for t in spt.candidates(spt.Problem(geom), None))
    if geom.r * geom.s != 1:
        mods = (su, sud) if geom.stride == (1, 1) else (sud,)
        unrolled = tuple((t, None) for m in mods for t in m.candidates(m.Problem(geom), None))
        return tuple((tiled, st) for st in stagings(geom)) + unrolled + tc
    first = default_pointwise_tile(geom, sm_count)
    pointwise = tuple((t, None) for t in (first,) + tuple(t for t in POINTWISE_TILES
                                                          if t != first))
    unrolled = tuple((t, None) for t in sud.candidates(sud.Problem(geom), None))
    gathered = ()
    if gathers(geom):
        g_first = default_pointwise_tile(gathered_geometry(geom), sm_count)
        gathered = tuple((t, GATHERED) for t in (g_first,) + tuple(t for t in POINTWISE_TILES
                                                                   if t != g_first))
    if default_staging(geom) is not None:        # the rule's choice first
        return gathered[:1] + pointwise + ((tiled, None),) + unrolled + tc + gathered[1:]
    return (pointwise + ((tiled, None),) if choose_remainder(geom) == "pointwise" else
            ((tiled, None),) + pointwise) + unrolled + tc + gathered


def choice_name(tile, staging: Staging | None = None) -> str:
    """The kernel that runs a remainder ``tile`` (tiled, pointwise or tensor-core), and
    its staging where not the default."""
    if isinstance(tile, PointwiseTile):
        name = _pointwise_name(tile)
    elif isinstance(tile, RemainderTile):
        name = _tiled_name(tile)
    elif isinstance(tile, stc.Tile):
        name = stc.name(tile)
    elif isinstance(tile, su.Tile):
        name = f"sparse_unrolled {tile}"
    elif isinstance(tile, sud.Tile):
        name = f"sparse_unrolled_direct {tile}"
    elif isinstance(tile, spt.Tile):
        name = f"sparse_pairs_tc {tile}"
    else:
        raise TypeError(f"tile must be a RemainderTile, a PointwiseTile, a "
                        f"sparse_tc_remainder.Tile, a sparse_unrolled.Tile, a "
                        f"sparse_unrolled_direct.Tile or a sparse_pairs_tc.Tile, got {tile!r}")
    if staging is None:
        return name
    if staging.gather:
        return f"{name} (gathered input)"
    how = f"{staging.phases} column phases" if staging.phases > 1 else "lines in order"
    return f"{name} ({how}{', word copies' if staging.words else ''})"


def remainder_kind(geom: ConvGeometry, remainder: str = "auto", tile=None) -> str:
    """The kernel the remainder of ``geom`` runs on: ``remainder`` unless ``"auto"``; then
    the kernel of ``tile`` where one is given, else :func:`choose_remainder`'s."""
    if remainder == "auto":
        remainder = "pointwise" if isinstance(tile, PointwiseTile) else \
            "tc" if isinstance(tile, stc.Tile) else \
            "unrolled" if isinstance(tile, (su.Tile, sud.Tile)) else \
            "pairs" if isinstance(tile, spt.Tile) else \
            "tiled" if isinstance(tile, RemainderTile) else choose_remainder(geom)
    if remainder == "pointwise" and geom.r * geom.s != 1:
        raise ValueError(f"remainder='pointwise' needs a 1x1 filter, got {geom.r}x{geom.s}")
    if remainder == "tc" and (why := stc.supported(stc.Problem(geom))) is not None:
        raise ValueError(f"remainder='tc': {why}")
    if remainder == "pairs":
        if (why := spt.supported(spt.Problem(geom))) is not None:
            raise ValueError(f"remainder='pairs': {why}")
        if precision.current() != "tf32":
            raise ValueError("remainder='pairs' runs at one tf32 pass only: use it under "
                             "tensorconv.precision.using('tf32')")
    if remainder == "unrolled":
        mod = unrolled_module(geom, tile)
        if (why := mod.supported(mod.Problem(geom))) is not None:
            raise ValueError(f"remainder='unrolled': {why}")
    return remainder


def unrolled_module(geom: ConvGeometry, tile=None):
    """The unrolled kernel's module that runs ``tile`` (default: the one for ``geom``): the
    unstaged one (:mod:`tensorconv.ops.sparse_unrolled_direct`) for a 1x1 filter, the staged
    one (:mod:`tensorconv.ops.sparse_unrolled`) for a wider filter or for its own tile."""
    if isinstance(tile, su.Tile) or (tile is None and geom.r * geom.s != 1):
        return su
    return sud


def body_fmas(tile, remainder_nnz: int) -> int:
    """The multiply-add instructions of the code an unrolled kernel's ``tile`` writes for a
    remainder of ``remainder_nnz`` nonzeros; 0 for every other kernel's tile (their code
    does not depend on the weights)."""
    if isinstance(tile, (su.Tile, sud.Tile)):
        return (su if isinstance(tile, su.Tile) else sud).fmas(remainder_nnz, tile)
    return 0


def fits(geom: ConvGeometry, tile, remainder_nnz: int) -> bool:
    """Whether a remainder of ``remainder_nnz`` nonzeros may run on ``tile``: every tile but
    the unrolled kernels', whose code grows with the nonzeros (:data:`su.MAX_FMAS`)."""
    return body_fmas(tile, remainder_nnz) <= su.MAX_FMAS


def check_remainder_choice(geom: ConvGeometry, remainder: str = "auto", tile=None,
                           staging=None) -> str:
    """The kernel a caller's ``remainder``, ``remainder_tile`` and ``remainder_staging``
    run on ``geom`` (:func:`remainder_kind`), or a clear error naming the argument: a tile
    of another kernel or not instantiated, a staging for another kernel than the tiled
    one or with column phases other than 1 or the horizontal stride of a wider filter."""
    kind = remainder_kind(geom, remainder, tile)
    tiles = {"tiled": REMAINDER_TILES, "pointwise": POINTWISE_TILES, "rows": (),
             "tc": stc.TILES, "pairs": spt.TILES,
             "unrolled": tuple(sud.candidates(sud.Problem(geom), None))
             + tuple(su.candidates(su.Problem(geom), None))}[kind]
    if tile is not None and tile not in tiles:
        raise ValueError(f"remainder_tile must be one of the {kind} remainder's tiles "
                         f"{tiles}, got {tile!r}" if tiles else
                         f"remainder_tile must be None for remainder={kind!r}, got {tile!r}")
    if staging is None:
        return kind
    if not isinstance(staging, Staging):
        raise TypeError(f"remainder_staging must be a Staging or None, got {staging!r}")
    if not isinstance(staging.gather, bool):
        raise TypeError(f"remainder_staging.gather must be a bool, got {staging.gather!r}")
    if staging.gather:
        if staging != GATHERED or kind != "pointwise" or not gathers(geom):
            raise ValueError(f"remainder_staging={GATHERED} (a gathered input) applies to the "
                             f"pointwise remainder of a strided 1x1 filter without padding "
                             f"only, got {staging} for remainder={kind!r} on a "
                             f"{geom.r}x{geom.s} filter, stride {geom.stride}, padding "
                             f"{geom.padding}")
        return kind
    if kind != "tiled":
        raise ValueError(f"remainder_staging applies to the tiled remainder only, not to "
                         f"remainder={kind!r}")
    if staging.phases != 1 and (staging.phases != geom.stride[1] or geom.s == 1):
        raise ValueError(f"remainder_staging.phases must be 1, or the horizontal stride "
                         f"{geom.stride[1]} for a filter wider than 1 tap, got "
                         f"{staging.phases}")
    if not isinstance(staging.words, bool):
        raise TypeError(f"remainder_staging.words must be a bool, got {staging.words!r}")
    return kind
