"""The fp16 inference path (``InferenceEngine(dtype="float16")``): fp16 NHWC end to end on
the tensor cores, against the model's own fp32 forward; its pooling kernel against the
reference; what it does not run is refused by name."""

from __future__ import annotations

import numpy as np
import pytest

from tensorconv.autograd import Tensor, no_grad
from tensorconv.engine import InferenceEngine
from tensorconv.nn import get_model
from tests.gpu.test_engine import _randomise_bn
from tests.helpers import rel_err

pytestmark = pytest.mark.gpu

CASES = [("resnet18_imagenet", dict(), (1, 3, 64, 64)),
         ("resnet18", dict(in_channels=3), (2, 3, 32, 32)),
         ("resnet50", dict(), (1, 3, 64, 64)),
         ("vgg16", dict(in_channels=1), (2, 1, 32, 32)),
         ("squeezenet1_0", dict(), (1, 3, 64, 64)),                # fire concats in place
         ("squeezenet1_0", dict(num_classes=10), (2, 3, 45, 45))]  # odd maps, Cout 10


@pytest.mark.parametrize("name,kw,shape", CASES, ids=[f"{c[0]}-{c[2]}" for c in CASES])
def test_fp16_engine_matches_the_fp32_model(rng, name, kw, shape):
    import cupy as cp

    model = get_model(name, **kw).to("gpu")
    _randomise_bn(model, rng)
    model.eval()
    x = cp.asarray(rng.standard_normal(shape).astype(np.float32))
    with no_grad():
        ref = model(Tensor(x)).data.get()
    for graph in (True, False):
        engine = InferenceEngine(model, shape, graph=graph, dtype="float16")
        out = engine(x)
        assert out.dtype == np.float16 and out.shape == ref.shape
        assert all("fp16" in s.label or "NHWC" in s.label for s in engine.plan.steps)
        assert rel_err(out.get().astype(np.float32), ref) < 2e-2, (name, graph)
    y = cp.asarray(rng.standard_normal(shape).astype(np.float32))   # buffers reused
    with no_grad():
        ref2 = model(Tensor(y)).data.get()
    assert rel_err(engine(y).get().astype(np.float32), ref2) < 2e-2


@pytest.mark.parametrize("mode", ["max", "avg"])
def test_fp16_nhwc_pooling_against_the_reference(rng, mode):
    import cupy as cp

    from tensorconv.ops import pool

    for trial in range(6):
        n, c, h, w = (int(v) for v in rng.integers(1, 9, 4))
        h, w = h + 4, w + 4
        k = int(rng.integers(2, 4))
        stride, padding = int(rng.integers(1, 3)), int(rng.integers(0, k // 2 + 1))
        ceil = mode == "max" and trial % 2 == 1
        x = rng.standard_normal((n, h, w, c)).astype(np.float16)
        want = pool.pool2d(x, k, stride, padding, mode=mode, layout="nhwc", ceil_mode=ceil)
        out = cp.full(want.shape, cp.nan, cp.float16)
        pool.pool2d(cp.asarray(x), k, stride, padding, mode=mode, layout="nhwc",
                    ceil_mode=ceil, out=out)
        np.testing.assert_allclose(out.get().astype(np.float32), want.astype(np.float32),
                                   rtol=2e-3, atol=2e-3)


def test_what_the_fp16_path_cannot_run_is_refused_by_name():
    model = get_model("mobilenet_v1").to("gpu")          # depthwise convolutions
    with pytest.raises(NotImplementedError, match="fp16"):
        InferenceEngine(model, (1, 3, 32, 32), dtype="float16")
    with pytest.raises(ValueError, match="dtype"):
        InferenceEngine(get_model("resnet20", in_channels=1).to("gpu"), (1, 1, 32, 32),
                        dtype="bfloat16")
