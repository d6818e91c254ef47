"""A dense convolution on whichever of our kernels runs its shape fastest: the entry of a
Tucker core convolution, and of every dense layer the tuned inference engine sends here.

The only op module without a ``.cu`` of its own: it dispatches among the kernels that
compute ``relu?(conv(x, w) + bias + residual)`` for filters up to 7 x 7 at stride 1 or 2
(no groups or dilation):

* ``"tdc"`` — the TDC paper's scheme (:mod:`tensorconv.ops.tucker_core_tdc`, 3 x 3,
  no epilogue);
* ``"cluster"`` — ours for the H100 (:mod:`tensorconv.ops.tucker_core_cluster`), the
  default where nothing was tuned;
* ``"tf32x3"`` — an implicit GEMM on the tensor cores at fp32 accuracy
  (:mod:`tensorconv.ops.tucker_core_tf32x3`);
* ``"winograd"`` — F(2x2, 3x3) on the tensor cores at fp32 accuracy, 3 x 3 stride 1
  (:mod:`tensorconv.ops.winograd_conv`);
* ``"igemm"`` — the general implicit GEMM (:mod:`tensorconv.ops.direct_conv`), for
  shapes none of the others takes (logged).

The tuner (:func:`tensorconv.tuning.oracle.tune_core`) times the cluster, tf32x3 and
Winograd kernels on a shape and stores the fastest under :func:`choice_key`, where
:func:`core_conv2d`'s default finds it.
"""

from __future__ import annotations

import dataclasses
import logging

from tensorconv import backend, tunecache
from tensorconv.checks import ConvGeometry, check_bools, conv_call
from tensorconv.ops import (
    direct_conv,
    tucker_core_cluster,
    tucker_core_tdc,
    tucker_core_tf32x3,
    winograd_conv,
)
from tensorconv.ops._launch import gpu_only, run_conv

log = logging.getLogger(__name__)
KERNELS = {"tdc": tucker_core_tdc, "cluster": tucker_core_cluster,
           "tf32x3": tucker_core_tf32x3, "winograd": winograd_conv}
VARIANTS = (*KERNELS, "igemm")
TUNED = ("cluster", "tf32x3", "winograd")    # the kernels tune_core weighs against each other


def supported(geom: ConvGeometry, variant: str) -> str | None:
    """Why ``variant`` cannot run ``geom`` (None when it can; ``"igemm"`` runs any)."""
    return None if variant == "igemm" else KERNELS[variant].supported(geom)


def competing(geom: ConvGeometry) -> tuple[str, ...]:
    """The tuned kernels that run ``geom``."""
    return tuple(v for v in TUNED if KERNELS[v].supported(geom) is None)


def choice_key(geom: ConvGeometry) -> str:
    """The tune-cache key of the fastest core kernel for ``geom``: it names the source of
    every kernel that competed, so an edit to any of them re-times the choice."""
    return tunecache.make_key("core_choice", [KERNELS[v].FILE for v in competing(geom)], geom)


def encode_choice(choice) -> dict:
    """A ``(variant, tile)`` choice as the tune cache stores it."""
    variant, tile = choice
    return {"variant": variant, "tile": dataclasses.asdict(tile)}


def decode_choice(stored) -> tuple:
    """A ``(variant, tile)`` choice from its stored form (:func:`encode_choice`)."""
    return stored["variant"], KERNELS[stored["variant"]].Tile(**stored["tile"])


def check_choice(geom: ConvGeometry, choice) -> tuple:
    """``choice`` (variant, tile) when it can run ``geom`` here: a variant that competes for
    it and one of that kernel's candidate tiles; else ``ValueError``."""
    variant, tile = choice
    if variant not in competing(geom):
        raise ValueError(f"variant {variant!r} does not run {geom}")
    if tile not in KERNELS[variant].candidates(geom, backend.device_facts()):
        raise ValueError(f"{tile} is not a candidate {variant} tile for {geom}")
    return choice


def tuned_choice(geom: ConvGeometry):
    """``(variant, tile)`` of the faster core kernel when ``geom`` was tuned here, else None."""
    return tunecache.known(choice_key(geom), lambda v: check_choice(geom, decode_choice(v)))


def default_choice(geom: ConvGeometry):
    """``(variant, tile)`` that runs ``geom`` untold: the tuned fastest kernel, else the
    cluster kernel on its tuned (or estimated) tile, else ``("igemm", None)`` where the
    cluster kernel does not take the shape (logged); never times."""
    if (why := tucker_core_cluster.supported(geom)) is not None:
        log.info("core_conv2d falls back to igemm: %s", why)
        return "igemm", None
    return tuned_choice(geom) or ("cluster", tucker_core_cluster.tuned_tile(geom)
                                  or tucker_core_cluster.default_tile(geom,
                                                                      backend.device_facts()))


def pack_weights(variant: str, w):
    """The weights ``variant`` reads, laid out once (None for ``"igemm"``)."""
    return None if variant == "igemm" else KERNELS[variant].pack_weights(w)


def kernels(geom: ConvGeometry, variant: str, tile) -> tuple:
    """The kernels a launch of ``variant`` on ``tile`` runs for ``geom``."""
    if variant == "igemm":
        return direct_conv.kernels(geom, "igemm")
    return KERNELS[variant].kernels(geom, tile)


def core_conv2d(x, w, stride=1, padding=0, *, bias=None, relu: bool = False, residual=None,
                variant: str | None = None, tile=None, packed=None, out=None):
    """``relu?(conv(x, w) + bias + residual)`` on one of our dense-convolution kernels,
    fp32, NCHW.

    Parameters
    ----------
    x : CuPy (or DLPack CUDA) array, (B, D1, H, W), float32, C-contiguous
    w : array, (D2, D1, R, S), float32 — e.g. a Tucker core in our (N, C, R, S) layout
    stride, padding : int or (int, int)
    bias : array, (D2,), float32, optional
    relu : bool
    residual : array, (B, D2, OH, OW), float32, optional
        Added before the ReLU.  The epilogue (bias, relu, residual) is not
        available with ``variant="tdc"`` (its blocks add partial sums atomically).
    variant : {"tdc", "cluster", "tf32x3", "winograd", "igemm"}, optional
        Default: :func:`default_choice` (the tuned fastest kernel, else the cluster
        kernel, else ``"igemm"``).
    tile : the variant's ``Tile``, optional
        Default: with ``variant`` None the tuned choice's tile; else the variant's own
        default (its tuned tile, else its static estimate).
    packed : array, optional
        :func:`pack_weights` ``(variant, w)``, prepared once (inference) instead of per call.
    out : array, (B, D2, OH, OW), float32, optional

    Returns
    -------
    CuPy array, (B, D2, OH, OW), float32
    """
    check_bools(relu=relu)
    x, w, bias, residual, geom = conv_call(x, w, bias, residual, stride, padding)
    xp = backend.array_module(x)
    gpu_only(xp, "core_conv2d", "tensorconv.ops.conv2d")
    if variant is not None and variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    if variant == "tdc" and (bias is not None or residual is not None or relu):
        raise ValueError("bias, residual and relu are not available with variant='tdc'")
    if variant is not None and (why := supported(geom, variant)) is not None:
        raise ValueError(why)
    if variant is None:
        variant, tuned = default_choice(geom)
        tile = tile if tile is not None or variant == "igemm" else tuned
    if variant == "igemm":
        if tile is not None:
            raise ValueError(f"tile {tile!r} does not fit variant='igemm' (it takes none)")
        return direct_conv.conv2d(x, w, bias, geom.stride, geom.padding, relu=relu,
                                  residual=residual, out=out, algorithm="igemm")
    kernel = KERNELS[variant]
    if tile is not None and not isinstance(tile, kernel.Tile):
        raise ValueError(f"tile {tile!r} does not fit variant={variant!r} (expects a "
                         f"{kernel.__name__.rsplit('.', 1)[1]}.Tile)")
    return run_conv(kernel, x, w, geom, (bias, residual, bool(relu)), tile, packed, out,
                    f"core_conv.pack_weights({variant!r}, w)")
