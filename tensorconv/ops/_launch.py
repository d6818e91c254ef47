"""What every op module shares: ceil-division, the one launch helper, epilogue arguments,
shared-memory and cluster checks, candidate ordering, and the tensor-core fragment layouts.

Nothing here knows a kernel family; each op module (``ops/<stem>.py``) calls these
instead of writing them again.
"""

from __future__ import annotations

import functools

import numpy as np

from tensorconv import backend, cuda, tunecache
from tensorconv.checks import check_bools, check_packed, conv_call, output_buffer

NULL = np.uintp(0)   # a null pointer argument: an optional array that is absent


def cdiv(a: int, b: int) -> int:
    """Ceiling of ``a / b`` for positive ints (tile counts covering a ragged edge)."""
    return -(-a // b)


def round_up(v: int, q: int) -> int:
    """``v`` rounded up to a multiple of ``q``."""
    return -(-v // q) * q


def up4(v: int) -> int:
    """``v`` rounded up to a multiple of 4 (the kernels' float4-padded widths)."""
    return round_up(v, 4)


def next_pow2(v: int) -> int:
    """The smallest power of two >= ``v`` (1 for ``v`` <= 1)."""
    return 1 << max(0, int(v) - 1).bit_length()


def ptr(a):
    """A kernel argument for an optional array: the array, or a null pointer."""
    return NULL if a is None else a


def epilogue_args(epilogue) -> tuple:
    """Kernel arguments (bias pointer, residual pointer, relu) of a checked
    ``(bias, residual, relu)``; absent arrays pass as null pointers."""
    bias, residual, relu = epilogue
    return ptr(bias), ptr(residual), np.int32(relu)


def filter_cover(max_filter: int) -> tuple:
    """The (R, S) filter sizes an op's CI instantiations cover: every square size up to
    ``max_filter`` and a few rectangular ones, so that every value of R and of S compiles."""
    square = tuple((k, k) for k in range(1, max_filter + 1))
    return square + ((1, max_filter), (max_filter, 1), (1, 3), (3, 1))


def launch(ref: cuda.KernelRef, grid, block, args, smem: int = 0) -> None:
    """Run the kernel ``ref`` names on ``grid`` x ``block`` with ``smem`` bytes of dynamic
    shared memory (opted into when above the default limit)."""
    kernel = cuda.load(ref)
    if smem:
        cuda.set_dynamic_smem(kernel, smem)
    kernel(tuple(grid), tuple(block), args, shared_mem=smem)


def conv_op(kernel, name: str, x, w, stride, padding, *, bias=None, relu: bool = False,
            residual=None, tile=None, packed=None, out=None):
    """The public op of a dense-convolution kernel module ``kernel`` (its ``Problem`` a
    :class:`~tensorconv.checks.ConvGeometry`): checks, the GPU-only error, then
    :func:`run_conv`."""
    check_bools(relu=relu)
    x, w, bias, residual, p = conv_call(x, w, bias, residual, stride, padding)
    xp = backend.array_module(x)
    gpu_only(xp, name, "tensorconv.ops.conv2d")
    if (why := kernel.supported(p)) is not None:
        raise ValueError(why)
    return run_conv(kernel, x, w, p, (bias, residual, bool(relu)), tile, packed, out)


def run_conv(kernel, x, w, p, epilogue, tile=None, packed=None, out=None,
             pack_hint: str = "pack_weights(w)"):
    """Run ``kernel`` (an ops module) on checked ``x``, ``w`` of geometry ``p``: its tuned
    tile (where it has a tuner), else its static estimate, unless ``tile`` is given;
    ``packed`` weights checked (``pack_hint`` names the call that makes them) or made;
    ``out`` checked or allocated.  Returns ``out``."""
    xp = backend.array_module(x)
    tuned = getattr(kernel, "tuned_tile", None)
    tile = tile or (tuned(p) if tuned else None) or kernel.default_tile(p, backend.device_facts())
    kernel.check_tile(tile, p)
    packed = (kernel.pack_weights(w) if packed is None else
              check_packed(packed, "packed", kernel.packed_shape(p), xp, pack_hint))
    out = output_buffer(xp, out, p.output_shape)
    kernel.run(x, packed, out, p, tile, epilogue)
    return out


def stored_tile(kernel, p):
    """The tile the tuner stored for ``p`` under ``kernel.tile_key(p)`` (``kernel`` an ops
    module), when it is still one of ``kernel.candidates`` on this device; else None (an
    entry of another version, or edited by hand, is a miss: never a failed launch)."""
    def check(tile):
        if tile not in kernel.candidates(p, backend.device_facts()):
            raise ValueError(f"{tile} is not a candidate tile for {p}")

    return tunecache.known_tile(kernel.tile_key(p), kernel.Tile, check)


def gpu_only(xp, op: str, cpu_alternative: str = "") -> None:
    """Raise ``TypeError`` when ``xp`` is NumPy: ``op`` has no CPU path."""
    if xp is np:
        hint = f" ({cpu_alternative} computes the same on the CPU)" if cpu_alternative else ""
        raise TypeError(f"{op} runs on the GPU: pass CuPy arrays{hint}")


def cpu_epilogue(y, residual=None, relu: bool = False):
    """The NumPy path's epilogue on a reference output ``y``: ``+ residual``, then ReLU, in
    place; returns ``y``."""
    if residual is not None:
        y += residual
    return np.maximum(y, 0, out=y) if relu else y


def no_out_on_cpu(**outs) -> None:
    """Raise ``ValueError`` when an output buffer is given to a NumPy (reference) call."""
    given = [name for name, a in outs.items() if a is not None]
    if given:
        raise ValueError(f"{' and '.join(given)} {'is' if len(given) == 1 else 'are'} "
                         "supported on the GPU path only")


def check_smem(tile, nbytes: int, facts=None) -> None:
    """Raise ``ValueError`` when ``tile`` needs more shared memory than a block may have."""
    limit = (facts or backend.device_facts()).smem_per_block_optin
    if nbytes > limit:
        raise ValueError(f"tile {tile} needs {nbytes} bytes of shared memory; "
                         f"the device allows {limit}")


def has_clusters(facts) -> bool:
    """Whether the device launches thread-block clusters (sm_90 and newer)."""
    return facts.compute_capability >= (9, 0)


def resident_blocks(threads: int, regs: int, smem: int, facts) -> int:
    """Blocks of ``threads`` threads, ``regs`` registers a thread and ``smem`` bytes of
    shared memory that one SM of ``facts`` holds at once (at most 32)."""
    warps = cdiv(threads, 32)
    by_regs = facts.regs_per_sm // (warps * 32 * max(regs, 1))
    by_smem = facts.smem_per_sm // smem if smem else 32
    by_threads = facts.max_threads_per_sm // (warps * 32)
    return max(0, min(by_regs, by_smem, by_threads, 32))


def has_tf32_mma(facts) -> bool:
    """Whether the device has tf32 tensor cores (sm_80 and newer)."""
    return facts.compute_capability >= (8, 0)


def check_splits(tile, allowed: tuple, facts=None) -> None:
    """Raise ``ValueError`` when ``tile.splits`` is not allowed, or needs clusters this
    device lacks."""
    facts = facts or backend.device_facts()
    if tile.splits not in allowed:
        raise ValueError(f"tile.splits must be in {allowed}, got {tile.splits}")
    if tile.splits > 1 and not has_clusters(facts):
        raise ValueError(f"tile.splits = {tile.splits} needs thread-block clusters (sm_90); "
                         f"this device is {facts.arch}")


def push_slot_floats(splits: int, share: int) -> int:
    """Shared floats a block of a ``splits``-block cluster adds after its stages for
    ``tdcx::PushReduce`` (kernels_cu/tc_cluster.cuh): ``splits`` slots of ``share``
    partial sums, padded to 8 bytes, then its 8-byte mbarrier; none without splits."""
    return cdiv(splits * share, 2) * 2 + 2 if splits > 1 else 0


def family_first(tiles, cost, family, limit: int | None, per_family: int = 2) -> list:
    """The ``limit`` tiles a tuner should time, cheapest ``cost`` first.

    The ``per_family`` cheapest tiles of every ``family(tile)`` come first, then
    the overall cheapest, so that the tuner sees every family whatever the
    estimate's bias; without ``limit``, every tile by cost.  ``cost`` is called once
    per tile.
    """
    costs = {t: cost(t) for t in tiles}
    tiles = sorted(costs, key=costs.get)
    if not limit:
        return tiles
    picked, seen = {}, {}
    for t in tiles:
        f = family(t)
        if seen.get(f, 0) < per_family:
            seen[f] = seen.get(f, 0) + 1
            picked[t] = None
    for t in tiles:
        if len(picked) >= limit:
            break
        picked.setdefault(t, None)
    return sorted(list(picked)[:limit], key=costs.get)


def memo_list(fn):
    """Memoise ``fn`` (hashable arguments, returns a list): planning, ahead-of-time builds
    and tuners rank one problem's candidates several times, and ranking thousands of tiles
    costs tens of milliseconds.  Each call returns a fresh list."""
    cached = functools.lru_cache(maxsize=1024)(lambda *a, **kw: tuple(fn(*a, **kw)))

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return list(cached(*args, **kwargs))

    wrapper.cache_clear = cached.cache_clear
    return wrapper


# --------------------------------------------------------------------------- tc_chain.cuh

CHAIN_THREADS = 256   # the block of every kernel built on tc_chain.cuh


def product_scratch_floats(o: int, p: int) -> int:
    """Shared floats ``tc::block_product`` (kernels_cu/tc_chain.cuh) needs for ``o``
    outputs x ``p`` pixels: its split partials, ks x o x p, when it splits the reduction
    (fewer 4x4 output tiles than threads), else none."""
    tiles = o // 4 * p // 4
    ks = 1 if tiles >= CHAIN_THREADS else CHAIN_THREADS // tiles
    return ks * o * p if ks > 1 else 0


def mma_scratch_floats(o: int, p: int) -> int:
    """The same for ``tc::mma_product``: ks x o x p when there are fewer 16-output
    strips than warps."""
    strips, warps = o // 16, CHAIN_THREADS // 32
    ks = 1 if strips >= warps else warps // strips
    return ks * o * p if ks > 1 else 0


def mma_stride(p: int) -> int:
    """Row stride of a ``p``-pixel mma operand (``tc::mma_stride``: bank-conflict padding)."""
    return p + 8 if p % 16 == 0 else p


# --------------------------------------------------------------------------- weight layouts

def crsn(w):
    """Filters (N, C, R, S) as (C, R, S, N), contiguous: consecutive output channels
    adjacent, the order the CUDA-core direct kernels read (one thread per channel)."""
    return backend.array_module(w).ascontiguousarray(w.transpose(1, 2, 3, 0))


def round_tf32(a, xp):
    """Round fp32 to the nearest tf32 (ties away from zero, as cvt.rna), finite values only."""
    bits = a.view(xp.uint32)
    rounded = ((bits + xp.uint32(0x1000)) & xp.uint32(0xFFFFE000)).view(xp.float32)
    return xp.where(xp.isfinite(a), rounded, a)


def a_fragments(w):
    """``w`` (..., O, K), O a multiple of 16 and K of 8, in mma.m16n8k8 A-fragment order
    (..., O/16, K/8, 32 lanes, 4): lane (g, t) of tile (o, k) holds w[o+g, k+t],
    w[o+g+8, k+t], w[o+g, k+t+4], w[o+g+8, k+t+4] (``tc::mma_product``)."""
    xp = backend.array_module(w)
    *lead, o, k = w.shape
    n = len(lead)
    f = w.reshape(*lead, o // 16, 2, 8, k // 8, 2, 4)  # (o16, o+8?, g, k8, k+4?, t)
    f = f.transpose(*range(n), n, n + 3, n + 2, n + 5, n + 4, n + 1)
    return xp.ascontiguousarray(f).reshape(*lead, o // 16, k // 8, 32, 4)


def b_fragments(w, xp=None, split: bool = True):
    """Filters ``w`` (N, C, R, S) in mma.m16n8k8 B-fragment order, split into tf32 (big,
    small) parts for 3xTF32.

    Returns
    -------
    array, (ceil(N/8), ceil(C/8), R*S, 32, 4), float32: for output tile n8,
    8-channel group c8, tap rs and lane (g, t), the B-fragment values
    ``w[8 n8 + g, 8 c8 + t]`` and ``w[8 n8 + g, 8 c8 + t + 4]`` — big parts,
    then small parts; zero beyond N and C.  With ``split=False`` the last axis is 2:
    the two values (for a kernel that splits them as it loads them).
    """
    xp = xp or backend.array_module(w)
    n, c, r, s = w.shape
    n8, c8 = cdiv(n, 8), cdiv(c, 8)
    full = xp.zeros((n8 * 8, c8 * 8, r, s), xp.float32)
    full[:n, :c] = xp.asarray(w, dtype=xp.float32)

    def fragments(a):  # (n8, g, c8, half, t, r, s) -> (n8, c8, r, s, g, t, half)
        return a.reshape(n8, 8, c8, 2, 4, r, s).transpose(0, 2, 5, 6, 1, 4, 3)

    if not split:
        return xp.ascontiguousarray(fragments(full).reshape(n8, c8, r * s, 32, 2))
    big = round_tf32(full, xp)
    small = round_tf32(full - big, xp)
    packed = xp.stack([fragments(big), fragments(small)], axis=-2)
    return xp.ascontiguousarray(packed.reshape(n8, c8, r * s, 32, 4))
