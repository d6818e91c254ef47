"""The public ops, each with one good call and what each argument must be, and the wrong
values a careless caller passes: shared by the CPU and GPU bad-input suites.

An :class:`OpCase` builds the keyword arguments of a call that works (:meth:`OpCase.good`);
:func:`wrong_values` gives, for one argument, values that must be refused with a
``ValueError`` or ``TypeError`` whose message names the argument.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from tensorconv import ops, reference

F32 = np.float32


@dataclass(frozen=True)
class OpCase:
    """One public op: ``fn(**good(xp))`` runs; ``arrays`` are the array arguments checked
    (``contiguous``: they must be C-contiguous), ``ints`` maps integer arguments to their
    minimum, ``bools`` are flags, ``outs`` maps output buffers to their shape."""

    name: str
    fn: Callable
    shapes: dict                      # array argument -> shape of a good value
    extra: dict = field(default_factory=dict)   # other good keyword arguments
    ints: dict = field(default_factory=dict)
    bools: tuple = ()
    outs: dict = field(default_factory=dict)
    contiguous: bool = True
    gpu_only: bool = False

    def good(self, xp, rng) -> dict:
        kw = {k: xp.asarray(rng.standard_normal(s).astype(F32)) for k, s in self.shapes.items()}
        return {**kw, **self.extra}


def _c(name, fn, shapes, **kw) -> OpCase:
    return OpCase(name, fn, shapes, **kw)


CONV_INTS = {"stride": 1, "padding": 0}
CASES = [
    _c("conv2d", ops.conv2d, {"x": (2, 4, 8, 8), "w": (6, 2, 3, 3), "bias": (6,),
                              "residual": (2, 6, 8, 8)},
       extra={"stride": 1, "padding": 1, "dilation": 1, "groups": 2},
       ints={**CONV_INTS, "dilation": 1, "groups": 1}, bools=("relu",),
       outs={"out": (2, 6, 8, 8)}),
    _c("reference.conv2d", reference.conv2d, {"x": (2, 4, 8, 8), "w": (6, 4, 3, 3),
                                              "bias": (6,)},
       extra={"stride": 1, "padding": 1}, ints=CONV_INTS, contiguous=False),
    _c("pool2d", ops.pool2d, {"x": (2, 3, 8, 8)}, extra={"kernel_size": 3, "stride": 2,
                                                         "padding": 1},
       ints={"kernel_size": 1, "stride": 1, "padding": 0}, outs={"out": (2, 3, 4, 4)}),
    _c("conv1x1", ops.conv1x1, {"x": (1, 8, 6, 6), "w": (12, 8, 1, 1), "bias": (12,),
                                "residual": (1, 12, 6, 6)},
       bools=("relu",), outs={"out": (1, 12, 6, 6)}, ),
    _c("conv1x1_pair", ops.conv1x1_pair, {"x": (1, 8, 6, 6), "w1": (12, 8, 1, 1),
                                          "w2": (4, 12, 1, 1), "b1": (12,), "b2": (4,)},
       bools=("relu1", "relu2"), outs={"y_out": (1, 12, 6, 6), "z_out": (1, 4, 6, 6)},
       ),
    *[_c(f.__name__, f, {"x": (1, 8, 10, 10), "w": (16, 8, 3, 3), "bias": (16,),
                         "residual": (1, 16, 10, 10)},
         extra={"stride": 1, "padding": 1}, ints=CONV_INTS, bools=("relu",),
         outs={"out": (1, 16, 10, 10)}, gpu_only=True)
      for f in (ops.core_conv2d, ops.cluster_conv2d, ops.tf32x3_conv2d)],
    _c("winograd_conv2d", ops.winograd_conv2d, {"x": (1, 8, 10, 10), "w": (16, 8, 3, 3),
                                                "bias": (16,), "residual": (1, 16, 10, 10)},
       extra={"padding": 1}, ints={"padding": 0}, bools=("relu",),
       outs={"out": (1, 16, 10, 10)}, gpu_only=True),
    _c("tdc_conv2d", ops.tdc_conv2d, {"x": (1, 8, 10, 10), "w": (16, 8, 3, 3)},
       extra={"stride": 1, "padding": 1}, ints=CONV_INTS, outs={"out": (1, 16, 10, 10)},
       gpu_only=True),
    _c("cp_conv2d", ops.cp_conv2d, {"x": (1, 8, 10, 10), "s": (8, 3), "h": (3, 3), "w": (3, 3),
                                    "t": (16, 3), "bias": (16,), "residual": (1, 16, 10, 10)},
       extra={"stride": 1, "padding": 1}, ints=CONV_INTS, bools=("relu",),
       outs={"out": (1, 16, 10, 10)}, ),
    _c("conv2d_maxpool", ops.conv2d_maxpool, {"x": (1, 3, 32, 32), "w": (16, 3, 7, 7),
                                              "bias": (16,)},
       extra={"stride": 2, "padding": 3, "pool_kernel": 3, "pool_stride": 2,
              "pool_padding": 1},
       ints={**CONV_INTS, "pool_kernel": 1, "pool_stride": 1, "pool_padding": 0},
       bools=("relu",), outs={"out": (1, 16, 8, 8)}, ),
    _c("gap_linear", ops.gap_linear, {"x": (2, 16, 4, 4), "w": (10, 16), "bias": (10,)},
       outs={"out": (2, 10)}, ),
    _c("tucker_tail_conv2d", ops.tucker_tail_conv2d,
       {"u": (1, 8, 6, 6), "w_core": (8, 8, 3, 3), "w_last": (12, 8, 1, 1),
        "w_next": (4, 12, 1, 1), "b_last": (12,), "b_next": (4,)},
       extra={"stride": 1, "padding": 1}, ints=CONV_INTS, bools=("relu1", "relu2"),
       outs={"y_out": (1, 12, 6, 6), "z_out": (1, 4, 6, 6)}, ),
    _c("batch_norm_forward", ops.batch_norm_forward,
       {"x": (2, 4, 5, 5), "gamma": (4,), "beta": (4,), "running_mean": (4,),
        "running_var": (4,)}, extra={"training": True}, bools=("training", "relu"),
       contiguous=False),
]


def wrong_arrays(good, contiguous: bool) -> list[tuple[str, object]]:
    """``(what, value)`` pairs: ``good`` (an array) made wrong in one way each."""
    xp = np if isinstance(good, np.ndarray) else __import__("cupy")
    shape = good.shape
    out = [("one more axis", good[None]),
           ("one axis fewer", good[0] if good.ndim > 1 else good[0, ...]),
           ("float64", good.astype(np.float64)), ("int32", good.astype(np.int32)),
           ("bool", good > 0), ("complex64", good.astype(np.complex64)),
           ("a nested list", good.tolist()), ("a string", "abc"), ("a number", 1.0),
           ("empty", xp.zeros((0,) + shape[1:], F32))]
    if contiguous and len(shape) >= 1 and shape[-1] > 1:
        wide = xp.zeros(shape[:-1] + (2 * shape[-1],), F32)
        out.append(("non-contiguous", wide[..., ::2]))
    return out


WRONG_INTS = [("a float", 1.5), ("an integral float", 2.0), ("a string", "2"),
              ("a bool", True), ("a triple", (1, 1, 1)), ("a float pair", (1.0, 1.0)),
              ("numpy float", np.float32(1))]
WRONG_BOOLS = [("a string", "no"), ("an int", 1), ("None", None), ("an array", np.array([1]))]


def wrong_ints(minimum: int) -> list[tuple[str, object]]:
    """Wrong values for an integer argument of ``minimum``: wrong types, and one below."""
    return WRONG_INTS + [("below the minimum", minimum - 1), ("far below", -7)]


def names_argument(message: str, name: str) -> bool:
    """Whether an error ``message`` names the argument ``name`` (as a word)."""
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", message) is not None


def all_wrong_calls(case: OpCase) -> list[tuple[str, str, object]]:
    """Every ``(argument, what, wrong value)`` of ``case`` (arrays on NumPy)."""
    rng = np.random.default_rng(0)
    good = case.good(np, rng)
    calls = [(a, what, v) for a in case.shapes for what, v in wrong_arrays(good[a],
                                                                           case.contiguous)]
    calls += [(a, what, v) for a, m in case.ints.items() for what, v in wrong_ints(m)]
    calls += [(a, what, v) for a in case.bools for what, v in WRONG_BOOLS]
    return calls


@dataclass(frozen=True)
class ArgCase:
    """A layer constructor, transform or loader: ``fn(**good())`` works; ``ints`` maps
    integer arguments to their minimum, ``reals`` real ones to ``(low, high)`` (either
    None), ``bools`` are flags, ``choices`` maps string arguments to what they take."""

    name: str
    fn: Callable
    good: Callable
    ints: dict = field(default_factory=dict)
    reals: dict = field(default_factory=dict)
    bools: tuple = ()
    choices: dict = field(default_factory=dict)
    optional: tuple = ()              # arguments for which None is a good value


def wrong_reals(low, high) -> list[tuple[str, object]]:
    """Wrong values for a real argument in ``[low, high]``."""
    out = [("NaN", float("nan")), ("infinity", float("inf")), ("a string", "0.1"),
           ("a bool", True), ("None", None), ("a list", [0.1])]
    if low is not None:
        out.append(("below the range", low - 1.0))
    if high is not None:
        out.append(("above the range", high + 1.0))
    return out


def wrong_choices(allowed) -> list[tuple[str, object]]:
    return [("an unknown name", "no-such-" + str(allowed[0])), ("None", None), ("a number", 1),
            ("upper case", str(allowed[0]).upper()), ("a list", [allowed[0]])]


def all_wrong_args(case: ArgCase) -> list[tuple[str, str, object]]:
    calls = [(a, w, v) for a, m in case.ints.items() for w, v in wrong_ints(m)
             if not isinstance(v, (tuple, list))]       # these take one int, not a pair
    calls += [(a, w, v) for a, (lo, hi) in case.reals.items() for w, v in wrong_reals(lo, hi)]
    calls += [(a, w, v) for a in case.bools for w, v in WRONG_BOOLS]
    calls += [(a, w, v) for a, allowed in case.choices.items() for w, v in wrong_choices(allowed)]
    return calls


def _resnet20():
    from tensorconv.nn import get_model

    return get_model("resnet20", in_channels=1)


def _layers():
    from tensorconv.nn import layers as L
    from tensorconv.nn.cp import CPConv2d
    from tensorconv.nn.tucker import TuckerConv2d

    return L, TuckerConv2d, CPConv2d


def _arg_cases() -> list[ArgCase]:
    from tensorconv import data
    from tensorconv.compress import cpize, tuckerize, uniform_ranks

    L, TuckerConv2d, CPConv2d = _layers()
    conv = {"in_channels": 1, "out_channels": 1}
    return [
        ArgCase("Conv2d", L.Conv2d, lambda: dict(in_channels=4, out_channels=6, kernel_size=3,
                                                 stride=1, padding=1, dilation=1, groups=2,
                                                 bias=True),
                ints={**conv, "groups": 1}, bools=("bias",)),
        ArgCase("Linear", L.Linear, lambda: dict(in_features=4, out_features=3, bias=True),
                ints={"in_features": 1, "out_features": 1}, bools=("bias",)),
        ArgCase("BatchNorm2d", L.BatchNorm2d, lambda: dict(channels=4, momentum=0.1, eps=1e-5),
                ints={"channels": 1}, reals={"momentum": (0.0, 1.0), "eps": (0.0, None)}),
        ArgCase("Dropout", L.Dropout, lambda: dict(p=0.5, seed=0), ints={"seed": 0},
                reals={"p": (0.0, 1.0)}),
        ArgCase("TuckerConv2d", TuckerConv2d,
                lambda: dict(in_channels=8, out_channels=8, kernel_size=3, ranks=(4, 4)),
                ints=conv),
        ArgCase("CPConv2d", CPConv2d,
                lambda: dict(in_channels=8, out_channels=8, kernel_size=3, rank=2),
                ints={**conv, "rank": 1}),
        ArgCase("tuckerize", tuckerize,
                lambda: dict(model=_resnet20(), ranks={}, decompose=False, method="hooi",
                             seed=0),
                ints={"seed": 0}, bools=("decompose",), choices={"method": ("hooi", "hosvd")}),
        ArgCase("cpize", cpize, lambda: dict(model=_resnet20(), rank=2, min_channels=64,
                                             decompose=False),
                ints={"rank": 1, "min_channels": 1}, bools=("decompose",)),
        ArgCase("uniform_ranks", uniform_ranks,
                lambda: dict(model=_resnet20(), reduction=0.5, input_shape=(1, 1, 32, 32),
                             multiple=1, scope="model"),
                ints={"multiple": 1}, reals={"reduction": (0.0, 1.0)},
                choices={"scope": ("model", "layers")}),
        ArgCase("synthetic_dataset", data.synthetic_dataset,
                lambda: dict(n=16, classes=2, size=4, channels=1, noise=0.5, seed=0),
                ints={"n": 1, "classes": 1, "size": 1, "channels": 1, "seed": 0},
                reals={"noise": (0.0, None)}),
        ArgCase("batches", data.batches,
                lambda: dict(data=data.synthetic_dataset(8, size=4), batch_size=4,
                             shuffle=True, drop_last=False),
                ints={"batch_size": 1}, bools=("shuffle", "drop_last")),
        ArgCase("load_fashion_mnist", data.load_fashion_mnist,
                lambda: dict(split="test", root=fake_fashion_mnist(), pad_to=32,
                             normalize=True, limit=10),
                ints={"pad_to": 28, "limit": 1}, bools=("normalize",),
                choices={"split": ("train", "test")}, optional=("pad_to", "limit")),
    ]


def fake_fashion_mnist():
    """A directory of all-zero Fashion-MNIST files of the right sizes (made once)."""
    import atexit
    import gzip
    import shutil
    import tempfile
    from pathlib import Path

    global _FAKE_ROOT
    if _FAKE_ROOT is None:
        _FAKE_ROOT = Path(tempfile.mkdtemp(prefix="tensorconv-fake-fmnist-"))
        atexit.register(shutil.rmtree, _FAKE_ROOT, True)
        for split, n in (("train", 60000), ("t10k", 10000)):
            for kind, magic, shape in (("images-idx3", 2051, (n, 28, 28)),
                                       ("labels-idx1", 2049, (n,))):
                header = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big")
                                                             for d in shape)
                with gzip.open(_FAKE_ROOT / f"{split}-{kind}-ubyte.gz", "wb", 1) as f:
                    f.write(header + bytes(int(np.prod(shape))))
    return _FAKE_ROOT


_FAKE_ROOT = None
ARG_CASES = _arg_cases()
