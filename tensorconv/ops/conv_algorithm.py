"""Which algorithm a dense convolution pass runs by default (``ops.conv2d`` and its
gradients, :mod:`tensorconv.ops.direct_conv`): the depthwise kernels, the direct kernel,
the tensor-core implicit GEMM at fp32 accuracy or the fp32 one, by the layer's shape and
the device, or Winograd's F(2x2, 3x3) on a training batch (thin 3x3 layers' forward and
data gradient, deep ones' weight gradient); the thresholds are measured
(``docs/notes/training_speed.md``)."""

from __future__ import annotations

from tensorconv import backend, precision
from tensorconv.backend import DeviceFacts
from tensorconv.checks import ConvGeometry
from tensorconv.ops import depthwise_conv, direct_wgrad, igemm_tf32x3, winograd_conv
from tensorconv.ops._launch import has_tf32_mma

__all__ = ["STEM_OUTPUTS", "WGRAD_DIRECT_CHANNELS", "WGRAD_DIRECT_PIXELS", "WINOGRAD_BATCH",
           "WINOGRAD_MACS", "WINOGRAD_WGRAD_CHANNELS", "WINOGRAD_WGRAD_FLOATS",
           "WINOGRAD_WGRAD_MACS", "WINOGRAD_WGRAD_TILES", "choose_algorithm"]

STEM_OUTPUTS = 1 << 18
"""Output values (N x K x OH x OW) from which a one-channel forward (``C == groups == 1``:
a stem on grey images) leaves the depthwise kernels, which run it as one channel times K
filters, for the direct kernel or the implicit GEMM.  On the H200 (32x32 maps, K 4-64)
the depthwise forward won below about this many (by up to 1.0 µs) and lost above it, by
1.1-4.7x at batch 128 (``docs/notes/training_speed.md``)."""


WINOGRAD_BATCH = 64
WINOGRAD_MACS = 1 << 30
"""Winograd's F(2x2, 3x3) is the default forward and stride-1 data gradient of a 3x3 layer
of 16-64 input and output channels from a batch of :data:`WINOGRAD_BATCH` images, up to
:data:`WINOGRAD_MACS` multiply-adds.  On the H200 at batch 128 it ran ResNet-20's three
layer shapes (0.3 G multiply-adds each) 1.24-1.49x faster than the tensor-core implicit
GEMM (fp32 and tf32) and ResNet-18's (4.8 G) 0.91x and slower; the threshold between, and
smaller batches, are not measured (``docs/notes/training_speed.md``)."""


WINOGRAD_WGRAD_CHANNELS = {"fp32": 128, "tf32": 256}
WINOGRAD_WGRAD_TILES = 128
WINOGRAD_WGRAD_MACS = 1 << 30
WINOGRAD_WGRAD_FLOATS = 1 << 28
"""Winograd's weight gradient (:mod:`~tensorconv.ops.winograd_wgrad`) is the default for a
3x3 stride-1 layer of at least :data:`WINOGRAD_WGRAD_CHANNELS` input and output channels
(by the current precision), :data:`WINOGRAD_WGRAD_TILES` 2x2 output tiles (N x TH x TW:
its 16 GEMMs' reduction) and :data:`WINOGRAD_WGRAD_MACS` multiply-adds, whose transforms
take at most :data:`WINOGRAD_WGRAD_FLOATS` floats (1 GiB of scratch).  On the H200 (graph
replays, against the tensor-core implicit GEMM on its estimated splits; batch 32 and 128,
planes 4x4-32x32), Winograd at fp32 ran 128-512 channels 1.24-1.95x faster (fewest
tiles: 512 at 4x4, batch 32, 128 tiles: 1.56x) and 64 at 32x32 0.72x; at one tf32 pass
256-512 channels 1.06-1.91x faster (256 at 8x8, batch 32: 1.06x; 512 at 4x4, batch 32:
1.13x) and 128 0.92-0.95x.  Before, 8 images of 512 at 7x7 (under the multiply-adds)
ran 0.75x (``docs/notes/training_speed.md``)."""


def _winograd_wgrad_wins(geom: ConvGeometry, facts: DeviceFacts) -> bool:
    """Whether the weight gradient of ``geom`` defaults to Winograd."""
    if winograd_conv.pass_supported(geom, 2) is not None or not has_tf32_mma(facts):
        return False
    tiles = geom.n * -(-geom.oh // 2) * -(-geom.ow // 2)
    macs = geom.n * geom.oh * geom.ow * geom.k * geom.c * 9
    prec = precision.current()
    return (min(geom.c, geom.k) >= WINOGRAD_WGRAD_CHANNELS[prec]
            and tiles >= WINOGRAD_WGRAD_TILES and macs >= WINOGRAD_WGRAD_MACS
            and 16 * tiles * (geom.c + geom.k) <= WINOGRAD_WGRAD_FLOATS)


def _winograd_wins(geom: ConvGeometry, mode: int, facts: DeviceFacts) -> bool:
    """Whether ``mode`` of ``geom`` defaults to Winograd (:data:`WINOGRAD_MACS`; the
    weight gradient: :data:`WINOGRAD_WGRAD_CHANNELS`)."""
    if mode == 2:
        return _winograd_wgrad_wins(geom, facts)
    macs = geom.n * geom.oh * geom.ow * geom.k * geom.c * geom.r * geom.s
    return (winograd_conv.pass_supported(geom, mode) is None and has_tf32_mma(facts)
            and geom.n >= WINOGRAD_BATCH and 16 <= min(geom.c, geom.k)
            and max(geom.c, geom.k) <= 64 and macs <= WINOGRAD_MACS)


WGRAD_DIRECT_CHANNELS = 16
WGRAD_DIRECT_PIXELS = 1 << 15
"""The weight gradient of an ungrouped stride-1, undilated 3x3 or 1x1 layer of at most
:data:`WGRAD_DIRECT_CHANNELS` input and output channels over :data:`WGRAD_DIRECT_PIXELS`
output pixels (N x OH x OW) or more runs on :mod:`~tensorconv.ops.direct_wgrad` (sm_80+).
On the H200 (graph replays, 32x32 planes): 16 -> 16 3x3 at batch 128 40.5 µs against 93.8
on the tensor-core GEMM (88.9 at tf32) and 82.0 on cuDNN fp32; batch 256 74.5 against
183.1; batch 32 17.9 against 27.2, batch 8 17.3 against 10.4 (so the pixel floor); a
3 -> 16 stem 40.2 against 93.5; 16 -> 16 1x1 22.0 against 96.6.  With 32 or more
channels it lost (32 -> 32 at 16x16: 49.0 against 46.3; 16 -> 32 stride 2: 46.8 against
32.2) (``docs/notes/training_speed.md``)."""


def _direct_wgrad_wins(geom: ConvGeometry, mode: int, facts: DeviceFacts) -> bool:
    """Whether ``mode`` of ``geom`` defaults to the direct weight gradient."""
    return (mode == 2 and direct_wgrad.supported(geom) is None
            and geom.stride == geom.dilation == (1, 1)
            and max(geom.c, geom.k) <= WGRAD_DIRECT_CHANNELS and has_tf32_mma(facts)
            and geom.n * geom.oh * geom.ow >= WGRAD_DIRECT_PIXELS)


def _direct_wins(geom: ConvGeometry, gemm: str) -> bool:
    """Whether the direct kernel is the forward's default rather than ``gemm`` (the
    implicit GEMM the layer would take).  Where the groups' output channels ``kg`` or the
    reduction ``q = C/groups x R x S`` are thin, the GEMM's 16-deep slices and 64- or
    128-wide tiles are mostly padding (the H200 grid of ``docs/notes/training_speed.md``):
    ``kg`` under 16; and for filters wider than 1x1, ``kg`` 16 with ``q`` up to 100, ``kg``
    32 with ``q`` up to 18, or any ``kg`` with ``q`` up to 100 where ``gemm`` is the fp32
    ``"igemm"`` (a layer too small for the tensor cores).  Maps of 8x8 or more, or groups
    (not a classifier's 1x1)."""
    if not (geom.groups > 1 or geom.oh * geom.ow >= 64):
        return False
    kg, q = geom.k // geom.groups, (geom.c // geom.groups) * geom.r * geom.s
    if kg < 16:
        return True
    return geom.r * geom.s > 1 and ((kg <= 16 and q <= 100) or (kg <= 32 and q <= 18)
                                    or (gemm == "igemm" and q <= 100))


def choose_algorithm(geom: ConvGeometry, mode: int = 0, facts: DeviceFacts | None = None) -> str:
    """The default algorithm of ``mode`` (0 forward, 1 data, 2 weight gradient) on the
    current device (or ``facts``): ``"depthwise"`` where :func:`depthwise_conv.supported`
    (but a one-channel forward of :data:`STEM_OUTPUTS` output values or more, and a
    one-channel weight gradient the tensor-core GEMM takes by its ``worth_it``);
    ``"winograd"`` for a forward or data gradient where :data:`WINOGRAD_MACS` says;
    ``"direct"`` for another forward where :func:`_direct_wins` and for a thin weight
    gradient where :data:`WGRAD_DIRECT_PIXELS` says; else the tensor-core
    ``"igemm_tf32x3"`` where :func:`igemm_tf32x3.worth_it`, else the fp32 ``"igemm"``."""
    facts = facts or backend.device_facts()
    stem = geom.c == geom.groups == 1 and (
        mode == 0 and geom.n * geom.k * geom.oh * geom.ow >= STEM_OUTPUTS
        or mode == 2 and igemm_tf32x3.worth_it(igemm_tf32x3.problem(geom, 2), facts))
    if depthwise_conv.supported(geom) is None and not stem:
        return "depthwise"
    if _winograd_wins(geom, mode, facts):
        return "winograd"
    if _direct_wgrad_wins(geom, mode, facts):
        return "direct"
    gemm = ("igemm_tf32x3" if igemm_tf32x3.worth_it(igemm_tf32x3.problem(geom, mode), facts)
            else "igemm")
    return "direct" if mode == 0 and _direct_wins(geom, gemm) else gemm
