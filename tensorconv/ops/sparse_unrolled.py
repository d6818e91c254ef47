"""A sparse convolution's remainder unrolled for its weights (``kernels_cu/sparse_unrolled.cu``).

The tiled remainder (:mod:`tensorconv.ops.sparse_tiles`) walks each row's nonzeros at run
time and reads a shared-memory word for every multiply-add: that bound holds it at about a
quarter of the fp32 rate (``docs/notes/sparse_conv.md``).  Here the host writes the
kernel's body for one layer's kernel matrix: the nonzeros of a group of ``rb`` output rows
become straight-line ``fma`` instructions with the weight as an immediate, grouped by input
channel and filter column, so that one input word loaded from shared memory serves every
row of the group with a nonzero in that column and every filter row that reaches it
(a thread owns ``px`` vertically consecutive pixels).  The paper generates its kernels
per layer too (Rumi et al., PACT'20, §4).

Odd square filters with "same" padding, NCHW, fp32, any batch, any stride: at stride 2
and more a staged row's columns are split into phases, so that a warp reads consecutive
words, but the stage is copied word by word and holds about four input words an output
pixel, and on ResNet-18-8x's stride-2 layers the kernel took 1.9-3.4x the tiled one's time
(H200), so the tuner offers it at stride 1 only.  The cost is a compile per layer and tile
(seconds; CuPy keeps the binary on disk), so layers above :data:`MAX_FMAS` instructions
are not offered.  :mod:`tensorconv.ops.sparse_conv` runs it
as the remainder kind ``"unrolled"``.
"""

from __future__ import annotations

import functools
import hashlib
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tensorconv import backend, cuda, files, tunecache
from tensorconv.backend import DeviceFacts
from tensorconv.checks import ConvGeometry
from tensorconv.ops._launch import cdiv, launch, ptr

FILE = "sparse_unrolled.cu"
# floats a call passes and returns in registers (nvcc 13.0, sm_90: 32 did, 40 went through a
# stack frame)
CALL_SUMS = 32
# multiply-adds of one body: with its chunks inlined, NVRTC took 12-15 s for 37,000 on the
# H200's host (nvcc 13.0 on a 2-core host: 30 s inlined, 12 s as calls)
MAX_FMAS = 40_000
THREADS = 128             # a block's target size
STAGE_BYTES = 32 << 10    # one stage at most (two a block)


@dataclass(frozen=True)
class Problem:
    """A sparse layer's remainder: ``geom`` its convolution."""

    geom: ConvGeometry


@dataclass(frozen=True)
class Tile:
    """``rb`` output rows a block; a thread ``px`` vertically consecutive pixels; a block
    ``ti`` images x ``th`` output rows x every output column; ``ck`` input channels a
    stage."""

    rb: int
    px: int
    th: int
    ti: int
    ck: int

    def threads(self, p: Problem) -> int:
        return self.ti * p.geom.ow * (self.th // self.px)

    def smem_bytes(self, p: Problem) -> int:
        return 2 * self.ck * self.ti * box(p.geom, self).img * 4

    def grid(self, p: Problem) -> tuple[int, int, int]:
        g = p.geom
        return cdiv(g.n, self.ti) * cdiv(g.oh, self.th), cdiv(g.k, self.rb), 1


@dataclass(frozen=True)
class Box:
    """A stage's layout: ``pitch`` words a row, ``img`` an image, ``shift`` words before
    column 0 (the first interior column 16-byte aligned), ``rows`` x ``cols`` in the box
    (its column u the input's column u - padding), the first ``staged`` input columns copied
    (the other columns zero), and a row's columns in ``stride`` phases of ``phase`` words:
    column u at word ``(u % stride) * phase + u // stride``."""

    pitch: int
    img: int
    shift: int
    rows: int
    cols: int
    staged: int
    stride: int
    phase: int

    def word(self, u: int) -> int:
        return (u % self.stride) * self.phase + u // self.stride


def supported(p: Problem) -> str | None:
    """Why the kernel cannot run ``p``, or None."""
    g = p.geom
    if g.groups != 1 or g.dilation != (1, 1) or g.stride[0] != g.stride[1]:
        return "the unrolled remainder runs undilated, ungrouped convolutions of a square stride"
    if g.r != g.s or g.r % 2 == 0 or g.padding != ((g.r - 1) // 2,) * 2:
        return "the unrolled remainder needs an odd square filter with 'same' padding"
    if g.w > 128:
        return "the unrolled remainder needs an input at most 128 wide"
    return None


def _tile(g: ConvGeometry, rb: int, px: int, threads: int) -> Tile | None:
    """Rows and images a block so that it has about ``threads`` threads, and the widest
    stage under :data:`STAGE_BYTES`."""
    th = px
    while th < 8 and th < g.oh and g.ow * (2 * th) // px <= threads:
        th *= 2
    ti = max(1, min(g.n, threads // max(1, g.ow * th // px)))
    for ck in (16, 8, 4):
        t = Tile(rb, px, th, ti, min(ck, g.c))
        if t.smem_bytes(Problem(g)) <= 2 * STAGE_BYTES:
            return t
    return None


def candidates(p: Problem, facts: DeviceFacts | None) -> list[Tile]:
    """32 or 16 rows a block, two pixels a thread, about 128 threads; on maps of at most 8
    columns also about 64 threads (more blocks).  Measured on ResNet-18-8x's 3x3 layers
    (H200): 32 rows the fastest, 16 rows 1.3-1.6x slower, 8 rows 2.5x."""
    if supported(p) is not None:
        return []
    sizes = (THREADS, THREADS // 2) if p.geom.ow <= 8 else (THREADS,)
    tiles = [_tile(p.geom, rb, 2, t) for rb in (32, 16) for t in sizes]
    return list(dict.fromkeys(t for t in tiles if t is not None))


def default_tile(p: Problem, facts: DeviceFacts | None) -> Tile:
    tiles = candidates(p, facts)
    if not tiles:
        raise ValueError(supported(p) or f"no unrolled tile fits {p.geom}")
    return tiles[0]


@functools.cache
def box(g: ConvGeometry, tile: Tile) -> Box:
    """The stage layout with the fewest bank conflicts among a warp's reads of one offset
    (then the smallest) whose stage fits :data:`STAGE_BYTES` (else the smallest): pitch
    and image size multiples of 4 words."""
    pad, st = g.padding[0], g.stride[0]
    hr, cols = (tile.th - 1) * st + g.r, (g.ow - 1) * st + g.s
    phase = cdiv(cols, st)
    shift = (4 - pad % 4) % 4 if st == 1 else 0     # 16-byte copies at stride 1 only
    hc = st * phase
    strips = tile.th // tile.px
    t = np.arange(tile.threads(Problem(g)))
    im, rest = np.divmod(t, g.ow * strips)
    strip, col = np.divmod(rest, g.ow)
    best = None
    for pitch in range(-(-(hc + shift) // 4) * 4, hc + shift + 36, 4):
        for ipad in range(0, 36, 4):
            img = hr * pitch + ipad
            words = im * img + strip * tile.px * st * pitch + col
            worst = max(np.bincount(words[w0:w0 + 32] % 32).max() for w0 in range(0, t.size, 32))
            if 4 * tile.ck * tile.ti * img > STAGE_BYTES:
                worst += 1 << 20
            if best is None or (worst, img) < best[0]:
                best = ((worst, img), Box(pitch, img, shift, hr, cols, min(g.w, cols - pad),
                                          st, phase))
    return best[1]


def fmas(weights_nnz: int, tile: Tile) -> int:
    """The body's multiply-add instructions for ``weights_nnz`` nonzeros."""
    return weights_nnz * tile.px


def body(g: ConvGeometry, tile: Tile, indptr, indices, data) -> str:
    """The kernel body (``SPARSE_UNROLLED_BODY``) of a remainder given as CSR over the
    K x C·R·S kernel matrix (host arrays).

    A thread's sums are the scalar fields of ``Sums`` and each chunk (a group's CK input
    channels) is a function ``chunkN(sp, sums) -> sums``, which the kernel's chunk loop
    calls through ``chunk(g, ch, sp, sums)``.  Where the sums fit the registers a call
    passes (:data:`CALL_SUMS`) the functions are not inlined: with all the code inlined in
    that loop, nvcc took 2.5 times as long (30 s against 12 s for 37,000 multiply-adds,
    nvcc 13.0).  More sums would go through the stack, so those bodies are inlined."""
    b = box(g, tile)
    k, c, r = g.k, g.c, g.r
    chunks, groups = cdiv(c, tile.ck), cdiv(k, tile.rb)
    sums = [(j, i) for j in range(tile.rb) for i in range(tile.px)]
    inline = "__noinline__" if len(sums) <= CALL_SUMS else "__forceinline__"
    out = ["namespace su {",
           f"constexpr int C = {c}, H = {g.h}, W = {g.w}, K = {k}, PAD = {g.padding[0]}, "
           f"ST = {b.stride}, OH = {g.oh}, OW = {g.ow}, "
           f"RB = {tile.rb}, PX = {tile.px}, TH = {tile.th}, TI = {tile.ti}, CK = {tile.ck}, "
           f"T = {tile.threads(Problem(g))}, STRIPS = {tile.th // tile.px}, HR = {b.rows}, "
           f"WS = {b.staged}, PW = {b.phase}, P = {b.pitch}, IMG = {b.img}, SH = {b.shift}, "
           f"CS = TI * IMG, STAGE = CK * CS, BANDS = {cdiv(g.oh, tile.th)}, "
           f"CHUNKS = {chunks}, GROUPS = {groups};",
           "struct Sums { float " + ", ".join(f"a{j}_{i}" for j, i in sums) + "; };",
           "// row j's sum at pixel i (j and i constants where the kernel unrolls its loops)",
           "__device__ __forceinline__ float get(const Sums& a, int j, int i) {",
           "  switch (j * PX + i) {"]
    out += [f"  case {j * tile.px + i}: return a.a{j}_{i};" for j, i in sums]
    out += ["  default: return 0.f;", "  }", "}"]
    for grp in range(groups):
        rows = range(grp * tile.rb, min(k, (grp + 1) * tile.rb))
        dense = np.zeros((len(rows), c, r, r), np.float32)
        for j, row in enumerate(rows):
            cols = indices[indptr[row]:indptr[row + 1]]
            dense[j].reshape(-1)[cols] = data[indptr[row]:indptr[row + 1]]
        for ch in range(chunks):
            out.append(f"__device__ {inline} Sums chunk{grp * chunks + ch}"
                       "(const float* sp, Sums a) {")
            for cc in range(min(tile.ck, c - ch * tile.ck)):
                out += _column_code(dense[:, ch * tile.ck + cc], cc * tile.ti * b.img, b, tile.px)
            out += ["  return a;", "}"]
    out += ["__device__ __forceinline__ void chunk(int g, int ch, const float* sp, Sums& a) {",
            "  switch (g * CHUNKS + ch) {"]
    out += [f"  case {n}: a = chunk{n}(sp, a); break;" for n in range(groups * chunks)]
    out += ["  default: break;", "  }", "}", "}  // namespace su", ""]
    return "\n".join(out)


def _column_code(w, at: int, b: Box, px: int) -> list[str]:
    """One channel's code: for each filter column s, the words its taps reach (loaded
    once: pixel i's tap r reads the box's row ``i * stride + r``) and every nonzero's
    multiply-adds into the thread's ``px`` pixels."""
    lines, st = [], b.stride
    for s in range(w.shape[2]):
        taps = [(j, r, float(w[j, r, s])) for j in range(w.shape[0]) for r in range(w.shape[1])
                if w[j, r, s] != 0]
        if not taps:
            continue
        need = sorted({r + i * st for _, r, _ in taps for i in range(px)})
        lines.append("  {")
        lines += [f"    const float v{q} = sp[{at + q * b.pitch + b.word(s)}];" for q in need]
        for j, r, value in taps:
            bits = struct.unpack("<I", struct.pack("<f", value))[0]
            lines += [f"    SU_FMA(a.a{j}_{i}, v{r + i * st}, {bits:08X});" for i in range(px)]
        lines.append("  }")
    return lines


def body_dir() -> Path:
    """Where generated bodies are kept: ``unrolled/`` beside the tune cache."""
    return tunecache.cache_path().parent / "unrolled"


def kernel(weights, g: ConvGeometry, tile: Tile, vec: int) -> cuda.KernelRef:
    """The kernel of ``weights``' remainder (a :class:`~tensorconv.ops.sparse_conv.
    SparseWeights`) on ``tile``: its body written once (named by its content's hash)."""
    key = ("unrolled", tile, g.h, g.w, g.stride)
    if key not in weights.staged:
        indptr = backend.to_host(weights.indptr)
        nnz = int(indptr[-1])
        if fmas(nnz, tile) > MAX_FMAS:
            raise ValueError(f"the unrolled remainder of {nnz} nonzeros on {tile} would be "
                             f"{fmas(nnz, tile)} instructions (at most {MAX_FMAS})")
        text = body(g, tile, indptr, backend.to_host(weights.indices)[:nnz],
                    backend.to_host(weights.data)[:nnz])
        path = body_dir() / f"su_{hashlib.sha256(text.encode()).hexdigest()[:24]}.inc"
        if not path.is_file():
            files.atomic_write(path, text)
        weights.staged[key] = str(path)
    return cuda.kernel_ref(FILE, f"sparse_unrolled<{vec}>",
                           {"SPARSE_UNROLLED_BODY": f'"{weights.staged[key]}"'})


def kernels(p: Problem, tile: Tile, weights=None) -> tuple[cuda.KernelRef, ...]:
    """The kernel a launch of ``tile`` runs (``weights`` needed: the body is theirs)."""
    if weights is None:
        return ()
    return (kernel(weights, p.geom, tile, 4 if _vec4(p.geom) else 1),)


def _vec4(g: ConvGeometry) -> bool:
    """Whether the stage can copy 16 bytes at a time (given an aligned input): rows of a
    multiple of 4 words, kept together (stride 1)."""
    return g.w % 4 == 0 and g.stride == (1, 1)


def instantiations() -> list[str]:
    return ["sparse_unrolled<1>", "sparse_unrolled<4>"]


def run(x, weights, out, g: ConvGeometry, tile: Tile, bias, residual, relu: bool,
        accumulate: bool) -> None:
    """``sparse_unrolled`` on checked arguments (``accumulate``: add to what ``out`` holds,
    the dense blocks' sums)."""
    p = Problem(g)
    if (why := supported(p)) is not None:
        raise ValueError(why)
    vec = 4 if _vec4(g) and x.data.ptr % 16 == 0 else 1
    launch(kernel(weights, g, tile, vec), tile.grid(p), (tile.threads(p),),
           (x, ptr(bias), ptr(residual), out, np.int32(g.n), np.int32(accumulate),
            np.int32(relu)), tile.smem_bytes(p))
