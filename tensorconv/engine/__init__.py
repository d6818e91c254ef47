"""Inference: a model planned into launches on preallocated buffers, replayed as one CUDA graph.

* :mod:`~tensorconv.engine.plan` — the plan and its :class:`Step` (one launch as data);
* :mod:`~tensorconv.engine.fold` — batch norm folded into the convolution before it;
* :mod:`~tensorconv.engine.choice` — the one helper through which every "one fused
  launch or the parts" decision goes (timing both, one tune-cache schema);
* :mod:`~tensorconv.engine.registry` / :mod:`~tensorconv.engine.planners` — module type
  -> planner, and the ordered rewrite passes, in one visible place;
* one planner module per family: :mod:`~tensorconv.engine.dense` (convolutions, linear
  layers), :mod:`~tensorconv.engine.layers` (BN, pooling, stem, head),
  :mod:`~tensorconv.engine.models` (the zoo's blocks), :mod:`~tensorconv.engine.passes`
  (1x1 pairs, projection shortcuts), :mod:`~tensorconv.engine.tucker`,
  :mod:`~tensorconv.engine.cp`;
* :mod:`~tensorconv.engine.build` — the kernels a plan needs, compiled ahead of time;
* :mod:`~tensorconv.engine.runtime` — :class:`InferenceEngine`.

Only our own kernels and CuPy element-wise/reduction kernels are launched: CuPy 14
refuses cuBLAS during stream capture, so linear layers run as 1x1 convolutions on our
implicit-GEMM kernel.
"""

from tensorconv.engine import planners
from tensorconv.engine.build import build, engine_kernels
from tensorconv.engine.fold import bn_scale_shift, fold_bn
from tensorconv.engine.plan import Plan, Step
from tensorconv.engine.registry import (
                                        plan_conv,
                                        plan_module,
                                        register_conv_planner,
                                        register_planner,
)
from tensorconv.engine.runtime import InferenceEngine

__all__ = ["InferenceEngine", "Plan", "Step", "bn_scale_shift", "build", "engine_kernels",
           "fold_bn", "plan_conv", "plan_module", "planners", "register_conv_planner",
           "register_planner"]
