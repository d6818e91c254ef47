"""Shared pieces of the DSXplore training-speed studies (Figs 7, 11-13): a DW + SCC
network on the GPU, the time of its training step, and a sweep over one parameter."""

from __future__ import annotations

import time

import numpy as np

from experiments._common import outputs, parser, partial_csv, pyplot, save_figure
from tensorconv import backend, bench
from tensorconv.autograd import Tensor
from tensorconv.autograd import functions as F
from tensorconv.compress.separable import separable
from tensorconv.nn import get_model
from tensorconv.nn.optim import SGD
from tensorconv.nn.scc import SCCConv2d
from tensorconv.results import ResultSet, metric_sections, read_csv, write_markdown

SWEEP_MODELS = ("vgg16", "mobilenet_v1", "resnet18")   # the paper's three (Fig. 13)


def dw_scc(name: str, cg: int, co: float, in_channels: int = 1, num_classes: int = 10,
           impl: str = "kernels"):
    """``name`` made DW + SCC (cg, co) on the GPU, every SCC layer on ``impl``."""
    model = separable(get_model(name, in_channels=in_channels, num_classes=num_classes),
                      "scc", cg=cg, co=co).to("gpu")
    for m in model.modules():
        if isinstance(m, SCCConv2d):
            m.impl = impl
    return model


def step_time(model, shape, steps: int, cp) -> float:
    """Median seconds per training step (forward, softmax cross-entropy, backward, SGD with
    Nesterov momentum) of ``model`` on random data of ``shape``: three host-timed runs of
    ``steps`` steps after two warm-up steps."""
    rng = np.random.default_rng(0)
    x = Tensor(cp.asarray(rng.standard_normal(shape).astype(np.float32)))
    y = cp.asarray(rng.integers(0, 10, shape[0]))
    opt = SGD(model.parameters(), 0.05, 0.9, True, 5e-4)

    def step():
        loss = F.softmax_cross_entropy(model(x), y, check=False)
        opt.zero_grad()
        loss.backward()
        opt.step()

    for _ in range(2):
        step()
    cp.cuda.Device().synchronize()
    runs = []
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        cp.cuda.Device().synchronize()
        runs.append((time.perf_counter() - t0) / steps)
    return float(np.median(runs))


def run_sweep(rs, args, cp, points, *, axis: str, baseline=None, csv=None) -> dict:
    """Time the training step of each ``(model, value, cg, co, batch)`` of ``points`` with
    our SCC kernels; record ``step_ms`` and ``images_per_s`` (case: the model, variant:
    ``axis=value``) and, when ``baseline`` names a value, ``relative`` (the step time over
    the model's at ``baseline``: the paper's normalisation).  The rows so far go to ``csv``
    (:func:`partial_csv`) after every point.  Returns
    {(model, value): ms}."""
    from tqdm import tqdm

    ms = {}
    for model_name, value, cg, co, batch in tqdm(points, desc=f"timing {axis} steps",
                                                 unit="run"):
        shape = (batch, 1, 32, 32)
        model = dw_scc(model_name, cg, co)
        try:
            t = step_time(model, shape, args.steps, cp)
        except cp.cuda.memory.OutOfMemoryError:
            rs.add(model_name, f"{axis}={value}", "out_of_memory", 1, "1")
            continue
        finally:
            del model
            cp.get_default_memory_pool().free_all_blocks()
        ms[(model_name, value)] = 1e3 * t
        rs.add(model_name, f"{axis}={value}", "step_ms", 1e3 * t, "ms",
               note=f"cg {cg}, co {co:g}, batch {batch}, 1x32x32, fp32")
        rs.add(model_name, f"{axis}={value}", "images_per_s", batch / t, "img/s")
        if csv is not None:
            rs.write_csv(csv)
    if baseline is not None:
        for (model_name, value), t in ms.items():
            if (model_name, baseline) in ms:
                rs.add(model_name, f"{axis}={value}", "relative",
                       t / ms[(model_name, baseline)], "x",
                       note=f"step time over {axis}={baseline}")
    return ms


def write_sweep(name: str, rs, env, args, ms: dict, *, axis: str, title: str, notes: str,
                metric: str = "relative") -> str:
    """Write the sweep's CSV, markdown and plot (one line per model against ``axis``);
    returns the first table."""
    paths = outputs(name, args.out)
    rs.write_csv(paths["csv"])
    partial_csv(name, args.out).unlink(missing_ok=True)
    rows = read_csv(paths["csv"])
    order = (metric,) + tuple(m for m in ("relative", "step_ms", "images_per_s",
                                          "out_of_memory") if m != metric)
    sections = metric_sections(rows, order)
    sections.append(("Notes", notes))
    write_markdown(paths["md"], title, env, sections)
    values = rs.values(metric)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for model_name in dict.fromkeys(m for m, _ in ms):
        pts = [(v.split("=", 1)[1], t) for (m, v), t in values.items() if m == model_name]
        ax.plot([p for p, _ in pts], [t for _, t in pts], marker="o", label=model_name)
    ax.set_xlabel(axis)
    ax.set_ylabel(metric.replace("_", " "))
    ax.legend()
    save_figure(fig, paths["png"])
    return sections[0][1]


def sweep_parser(name: str, doc: str):
    """The parser of a sweep experiment: ``--models`` (the paper's three) and ``--steps``;
    the experiment adds its axis and the fixed parameters."""
    p = parser(name, doc)
    p.add_argument("--models", nargs="+", default=list(SWEEP_MODELS))
    p.add_argument("--steps", type=int, default=5)
    return p


def sweep(name: str, args, values, point, *, axis: str, baseline: bool, title: str,
          notes: str) -> int:
    """Run a sweep experiment: for each model of ``args.models`` and each of ``values``
    (the first model and two values with ``--quick``), time ``point(model, value)`` =
    ``(model, value, cg, co, batch)``; normalise to the first value when ``baseline``
    (else report step times); write and print the results."""
    cp = backend.require_cuda(name)
    env = bench.environment()
    rs = ResultSet(name, env)
    models, values = (args.models[:1], values[:2]) if args.quick else (args.models, values)
    points = [point(m, v) for m in models for v in values]
    ms = run_sweep(rs, args, cp, points, axis=axis,
                   baseline=points[0][1] if baseline else None, csv=partial_csv(name, args.out))
    print(write_sweep(name, rs, env, args, ms, axis=axis, title=title, notes=notes,
                      metric="relative" if baseline else "step_ms"))
    return 0
