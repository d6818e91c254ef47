"""Helpers shared by CPU and GPU tests: random convolution cases, error measure."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np


def rel_err(out, ref) -> float:
    """||out - ref|| / ||ref|| in float64 (NaN anywhere in ``out`` gives NaN)."""
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    return float(np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-300))


def fp32_tol(reduction: int) -> float:
    """The rel_err an fp32 kernel may show on a dot product of ``reduction`` terms: 1e-5,
    growing as 2e-8 per term beyond 500.  The tensor cores' fp32 accumulation truncates,
    so a 3xTF32 kernel's error grows with the mma's feeding one accumulator (3e-5 seen at
    4,214 terms; docs/notes/tucker_core_tf32x3.md); one tf32 pass is ~3e-4."""
    return max(1e-5, 2e-8 * reduction)


def random_conv_case(rng, *, max_hw: int = 24, max_channels: int = 12):
    """Draw one valid convolution: shapes, stride, padding, dilation, groups.

    Returns ``(x_shape, w_shape, kwargs)`` with odd and even sizes, rectangular
    filters, stride up to 3, dilation up to 2, grouped and depthwise cases.
    """
    while True:
        n = int(rng.integers(1, 4))
        groups = int(rng.choice([1, 1, 1, 2, 3]))
        cg = int(rng.integers(1, max_channels + 1))
        kg = int(rng.integers(1, max_channels + 1))
        if rng.random() < 0.15:  # depthwise
            groups, cg, kg = int(rng.integers(1, 9)), 1, int(rng.integers(1, 3))
        r, s = (int(v) for v in rng.choice([1, 2, 3, 3, 5, 7], size=2))
        if rng.random() < 0.6:
            s = r
        h, w = (int(v) for v in rng.integers(1, max_hw + 1, size=2))
        stride = tuple(int(v) for v in rng.integers(1, 4, size=2))
        padding = tuple(int(v) for v in rng.integers(0, 4, size=2))
        dilation = tuple(int(v) for v in rng.integers(1, 3, size=2))
        oh = (h + 2 * padding[0] - dilation[0] * (r - 1) - 1) // stride[0] + 1
        ow = (w + 2 * padding[1] - dilation[1] * (s - 1) - 1) // stride[1] + 1
        if oh >= 1 and ow >= 1:
            return ((n, groups * cg, h, w), (groups * kg, cg, r, s),
                    dict(stride=stride, padding=padding, dilation=dilation, groups=groups))


def naive_conv2d(x, w, stride, padding, dilation, groups):
    """Seven nested loops straight from the definition (tiny shapes only)."""
    n, c, h, wd = x.shape
    k, cg, r, s = w.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    oh = (h + 2 * ph - dh * (r - 1) - 1) // sh + 1
    ow = (wd + 2 * pw - dw * (s - 1) - 1) // sw + 1
    kg = k // groups
    y = np.zeros((n, k, oh, ow))
    for b in range(n):
        for o in range(k):
            g = o // kg
            for i in range(oh):
                for j in range(ow):
                    acc = 0.0
                    for ci in range(cg):
                        for u in range(r):
                            for v in range(s):
                                hi, wi = i * sh - ph + u * dh, j * sw - pw + v * dw
                                if 0 <= hi < h and 0 <= wi < wd:
                                    acc += x[b, g * cg + ci, hi, wi] * w[o, ci, u, v]
                    y[b, o, i, j] = acc
    return y


def gradcheck_module(module, x_shape, rng) -> bool:
    """gradcheck a module's input and parameter gradients in float64 (buffers cast too)."""
    from tensorconv.autograd import Tensor, gradcheck

    params = module.parameters()
    for p in params:
        p.data = p.data.astype(np.float64)
    for _, m in module.named_modules():
        for name in list(m._buffers):
            m._buffers[name] = m._buffers[name].astype(np.float64)
    x = Tensor(rng.standard_normal(x_shape), requires_grad=True)
    return gradcheck(lambda x, *ps: module(x), [x, *params])


def device_facts(smem_per_block_optin: int = 227 * 1024, compute_capability=(9, 0)):
    """An H100's facts (as ``backend.device_facts`` reads them), for CPU tests of candidate
    tiles and estimates; ``smem_per_block_optin`` and ``compute_capability`` to vary."""
    from tensorconv.backend import DeviceFacts

    return DeviceFacts(name="NVIDIA H100 80GB HBM3 (test facts)", index=0,
                       compute_capability=tuple(compute_capability), sm_count=132,
                       max_threads_per_block=1024, smem_per_block=48 * 1024,
                       smem_per_block_optin=smem_per_block_optin, smem_per_sm=228 * 1024,
                       regs_per_sm=65536, regs_per_block=65536, max_threads_per_sm=2048,
                       l2_bytes=50 * 2 ** 20, total_memory=80 * 2 ** 30, clock_khz=1980000,
                       cuda_runtime=13020, cuda_driver=13000)


def sweep(n: int, quick, slow_mark=None):
    """Trial indices ``0..n-1`` for ``parametrize``: those in ``quick`` (a count, the first
    ones, or a set) run in the quick suite, the rest are marked ``slow`` (``--slow``)."""
    import pytest

    keep = set(range(quick)) if isinstance(quick, int) else set(quick)
    return [t if t in keep else pytest.param(t, marks=pytest.mark.slow) for t in range(n)]


def random_sparse_layer(rng, k: int, c: int, r: int, density: float, nblocks: int = 0, *,
                        empty_row: bool = False):
    """A (k, c, r, r) float32 kernel with about ``density`` of its weights nonzero (row
    ``k // 2`` all zero with ``empty_row``) and a layout of ``nblocks`` random dense
    blocks (rows and columns drawn at random, overlaps allowed): ``(w, packed, layout)``."""
    from tensorconv import blocksparse as bs

    shape = (k, c, r, r)
    w = (rng.standard_normal(shape) * (rng.random(shape) < density)).astype(np.float32)
    if empty_row:
        w[k // 2] = 0
    cols = c * r * r
    blocks = []
    for _ in range(nblocks):
        rows = np.unique(rng.integers(0, k, rng.integers(1, k + 1)))
        bc = np.unique(rng.integers(0, cols, rng.integers(1, cols + 1)))
        blocks.append((rows, bc))
    layout = bs.layout_from_pattern(bs.kernel_matrix(w) != 0, shape, blocks)
    return w, bs.pack(w, layout), layout


def check_sparse_conv2d(rng, w, packed, x_shape, stride, padding, *, epilogue: bool,
                        tol: float = 1e-5, **kwargs):
    """``ops.sparse_conv2d`` of a random input (with a random bias and residual and ReLU
    where ``epilogue``) into a NaN-poisoned output, against the float64 reference:
    finite, and within ``tol`` relative error.  ``kwargs`` go to ``sparse_conv2d``.
    Returns the geometry."""
    import cupy as cp

    from tensorconv import ops, reference
    from tensorconv.checks import conv_geometry

    x = rng.standard_normal(x_shape).astype(np.float32)
    geom = conv_geometry(x_shape, w.shape, stride, padding)
    b = rng.standard_normal(geom.k).astype(np.float32) if epilogue else None
    res = rng.standard_normal(geom.output_shape).astype(np.float32) if epilogue else None
    want = reference.conv2d(x.astype(np.float64), w.astype(np.float64),
                            None if b is None else b.astype(np.float64), stride, padding)
    if epilogue:
        want = np.maximum(want + res, 0)
    out = cp.full(geom.output_shape, cp.nan, cp.float32)
    ops.sparse_conv2d(cp.asarray(x), packed, None if b is None else cp.asarray(b), stride,
                      padding, relu=epilogue, residual=None if res is None else cp.asarray(res),
                      out=out, **kwargs)
    got = out.get()
    assert np.isfinite(got).all(), (x_shape, kwargs)
    err = rel_err(got, want)
    assert err <= tol, (x_shape, kwargs, err)
    return geom


def csr_of(w):
    """A (K, C, R, S) kernel's matrix as host CSR: (indptr int32, indices int32, data
    float32)."""
    from tensorconv import blocksparse as bs

    m = bs.kernel_matrix(w)
    return (np.concatenate([[0], np.cumsum((m != 0).sum(1))]).astype(np.int32),
            np.nonzero(m)[1].astype(np.int32), m[m != 0].astype(np.float32))


@functools.cache
def _sanitizer() -> tuple[str, ...]:
    """AddressSanitizer where this g++ can link it (out-of-bounds reads and writes abort)."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "t.cpp"
        src.write_text("int main() { return 0; }\n")
        ok = subprocess.run(["g++", "-fsanitize=address", "-o", str(Path(d) / "t"), str(src)],
                            capture_output=True).returncode == 0
    return ("-fsanitize=address",) if ok else ()


def run_on_host(tmp: Path, main: str, defines: dict, geom, grid, x, *, bias=None,
                residual=None, relu=False, y0=None):
    """A kernel file run on the CPU by its driver ``tests/host/<main>`` (built with g++,
    AddressSanitizer on where available, ``defines`` as ``-D``): ``x`` in, y starting as
    ``y0`` (accumulated onto) or NaN, over ``grid`` (x, y) blocks; returns y."""
    import os
    import subprocess

    root = Path(__file__).resolve().parent
    exe = tmp / "run"
    subprocess.run(["g++", "-std=c++17", "-O1", "-pthread", *_sanitizer(), "-w",
                    f"-I{root.parent / 'kernels_cu'}", f"-I{root / 'host'}",
                    *(f"-D{k}={v}" for k, v in defines.items()), "-o", str(exe),
                    str(root / "host" / main)], check=True, capture_output=True)
    x.astype(np.float32).tofile(tmp / "x.bin")
    y = np.full(geom.output_shape, np.nan, np.float32) if y0 is None else y0.astype(np.float32)
    y.tofile(tmp / "y.bin")
    if bias is not None:
        bias.astype(np.float32).tofile(tmp / "bias.bin")
    if residual is not None:
        residual.astype(np.float32).tofile(tmp / "residual.bin")
    subprocess.run([str(exe), str(tmp), str(geom.n), str(int(y0 is not None)), str(int(relu)),
                    str(int(bias is not None)), str(int(residual is not None)), str(grid[0]),
                    str(grid[1])], check=True, capture_output=True,
                   env=dict(os.environ, ASAN_OPTIONS="detect_leaks=0"))
    return np.fromfile(tmp / "out.bin", np.float32).reshape(geom.output_shape)
