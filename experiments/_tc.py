"""The convolution layers of the tensor-core batch-1 study (Sun et al., Figs 2-3).

The 33 distinct convolutions of torchvision's ResNet-18 (11) and SqueezeNet 1.0 (22) at
224x224: two layers are the same when their input channels, output channels, filter,
stride, padding and input plane agree.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from tensorconv import backend, timing
from tensorconv.ops import tensorcore_conv as tcc
from tensorconv.reference import conv as reference


def cudnn_fp16(name: str):
    """PyTorch as the studies' baseline, cuDNN in fp16 with ``cudnn.benchmark``; exits
    saying how to install it where PyTorch with cuDNN is missing (every comparison here
    needs it)."""
    from tensorconv import bench

    if not bench.torch_cudnn_available():
        raise SystemExit(f"{name} compares against cuDNN: install PyTorch (pip install -e "
                         f"'.[baselines]')")
    import torch

    torch.backends.cudnn.benchmark = True
    return torch


@dataclass(frozen=True)
class Layer:
    """One convolution: ``c`` -> ``k`` channels, an ``r`` x ``r`` filter, on an ``h`` x ``h``
    input."""

    model: str
    name: str
    c: int
    k: int
    r: int
    stride: int
    padding: int
    h: int

    @property
    def out(self) -> int:
        return (self.h + 2 * self.padding - self.r) // self.stride + 1

    def key(self) -> tuple:
        return self.c, self.k, self.r, self.stride, self.padding, self.h


def _resnet18() -> list[Layer]:
    out = [Layer("resnet18", "conv1", 3, 64, 7, 2, 3, 224),
           Layer("resnet18", "layer1.conv", 64, 64, 3, 1, 1, 56)]
    c, h = 64, 56
    for i, k in enumerate((128, 256, 512), start=2):
        out += [Layer("resnet18", f"layer{i}.0.conv1", c, k, 3, 2, 1, h),
                Layer("resnet18", f"layer{i}.conv", k, k, 3, 1, 1, h // 2),
                Layer("resnet18", f"layer{i}.0.downsample", c, k, 1, 2, 0, h)]
        c, h = k, h // 2
    return out


def _squeezenet10() -> list[Layer]:
    # (input channels, squeeze, expand) of fire2..fire9, and the plane each runs on
    fires = [(96, 16, 64, 54), (128, 16, 64, 54), (128, 32, 128, 54), (256, 32, 128, 27),
             (256, 48, 192, 27), (384, 48, 192, 27), (384, 64, 256, 27), (512, 64, 256, 13)]
    out = [Layer("squeezenet1_0", "features.0", 3, 96, 7, 2, 0, 224)]
    for i, (c, s, e, h) in enumerate(fires, start=2):
        out += [Layer("squeezenet1_0", f"fire{i}.squeeze", c, s, 1, 1, 0, h),
                Layer("squeezenet1_0", f"fire{i}.expand1x1", s, e, 1, 1, 0, h),
                Layer("squeezenet1_0", f"fire{i}.expand3x3", s, e, 3, 1, 1, h)]
    out.append(Layer("squeezenet1_0", "classifier.1", 512, 1000, 1, 1, 0, 13))
    return out


def distinct(layers) -> list[Layer]:
    """The first layer of each shape, in order."""
    seen, out = set(), []
    for layer in layers:
        if (layer.model, layer.key()) not in seen:
            seen.add((layer.model, layer.key()))
            out.append(layer)
    return out


LAYERS = distinct(_resnet18()) + distinct(_squeezenet10())


ROUNDS = 3   # timing rounds, ours and cuDNN alternating; each side keeps its best median
# The output's rounding bounds the relative error: 2**-11 (fp16), 2**-8 (bf16), with room.
TOLERANCE = {"float16": 2e-3, "bfloat16": 8e-3}


def _torch(torch, a):
    """A CUDA tensor of ``a`` (float16, or ml_dtypes' bfloat16, which PyTorch reads as
    16-bit integers viewed as its own bfloat16)."""
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16)).cuda().view(torch.bfloat16)
    return torch.from_numpy(a).cuda()


def measure(cp, torch, layer: Layer, batch: int, rng, *, tune: bool = False, reps=None,
            rounds: int = ROUNDS, dtype: str = "float16") -> dict:
    """Ours and cuDNN (PyTorch, ``cudnn.benchmark``) on ``layer`` at ``batch`` in both
    layouts, in ``dtype`` (float16 or bfloat16), after checking both against the fp32
    reference on the same values:
    ``{layout: {"ours_us", "cudnn_us", "ours_err", "cudnn_err", "tile", "tune_s"}}``.
    Times are CUDA-graph medians, ``rounds`` of them per side taken alternately (clock and
    neighbour noise hit both alike), the best kept for each.  ``tune`` searches our
    schedule (:mod:`tensorconv.tuning.tc_search`)."""
    from tensorconv.tuning.tc_search import tune_tc_tile

    reps = reps or {"repeat": 100}
    elem = tcc.element_dtype(dtype)
    x = rng.standard_normal((batch, layer.c, layer.h, layer.h)).astype(elem)
    w = (rng.standard_normal((layer.k, layer.c, layer.r, layer.r))
         / np.sqrt(layer.c * layer.r * layer.r)).astype(elem)
    want = reference.conv2d(x.astype(np.float32), w.astype(np.float32), None, layer.stride,
                            layer.padding)
    rel = lambda a, b: float(np.linalg.norm(a - b) / np.linalg.norm(b))  # noqa: E731
    out = {}
    for layout in tcc.LAYOUTS:
        xl = x if layout == "nchw" else np.ascontiguousarray(x.transpose(0, 2, 3, 1))
        wl = want if layout == "nchw" else want.transpose(0, 2, 3, 1)
        xd, wd = cp.asarray(xl), cp.asarray(w)
        y = cp.empty(wl.shape, elem)
        tune_s = 0.0
        if tune:
            start = time.perf_counter()
            tile = tune_tc_tile(xd, wd, layer.stride, layer.padding, layout=layout)[0]
            tune_s = time.perf_counter() - start
        else:
            tile = tcc.default_tile(tcc.problem(xl.shape, w.shape, layer.stride, layer.padding,
                                                layout, dtype), backend.device_facts())
        packed = tcc.pack_weights(wd, layout, dtype=dtype, tile=tile)

        def run(xd=xd, wd=wd, layout=layout, tile=tile, packed=packed, y=y):
            tcc.tc_conv2d(xd, wd, None, layer.stride, layer.padding, layout=layout, tile=tile,
                          packed=packed, out=y)

        run()
        ours_err = rel(y.get().astype(np.float32), wl)
        if not ours_err <= TOLERANCE[dtype]:
            raise RuntimeError(f"{layer} {layout}: rel_err {ours_err:.2e} against the "
                               f"reference")
        xt, wt = _torch(torch, x), _torch(torch, w)
        if layout == "nhwc":
            xt = xt.to(memory_format=torch.channels_last)
            wt = wt.to(memory_format=torch.channels_last)
        with torch.no_grad():
            conv = lambda xt=xt, wt=wt: torch.nn.functional.conv2d(  # noqa: E731
                xt, wt, None, layer.stride, layer.padding)
            cudnn_err = rel(conv().float().cpu().numpy(), want)
            ours, theirs = float("inf"), float("inf")
            for _ in range(rounds):
                ours = min(ours, timing.time_graph(run, calls_per_graph=5, **reps).median_us)
                theirs = min(theirs, timing.time_graph(conv, framework="torch",
                                                       calls_per_graph=5, **reps).median_us)
        out[layout] = {"ours_us": ours, "cudnn_us": theirs, "ours_err": ours_err,
                       "cudnn_err": cudnn_err, "tile": tile, "tune_s": tune_s}
    return out
