"""gnetcon: optimal pairwise sequences for generalized tensor networks (Reustle et al., section 4).

A network is a set of tensors whose modes carry labels.  A label shared by
tensors is a contraction when no tensor outside a pair (nor the output) still
needs it, and a partial outer product (kept, like a batch mode) while others
do — the rank mode R of a CP layer is such a hyper-edge.  A convolution edge
pairs an input label with a filter label (``("y", "h")``): once both tensors
are in one operand, the filter label is summed and the input label keeps its
size ("same" padding), as in a CNN layer.

The search is netcon's breadth-first dynamic programme over subnetworks with
the cost model of eqs. 11-13, counted as FLOPs the way opt_einsum counts them
(the product of every label size the pair touches, doubled when the pair sums a
label), and netcon's cost cap: an intermediate larger than ``memory_cap``
bytes is never built.  The executor runs a sequence with einsum for
contractions and outer products and a windowed view for convolutions, on NumPy
or CuPy arrays.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from tensorconv import backend, ops
from tensorconv.checks import check_int


class NoFeasibleSequence(ValueError):
    """Every evaluation order builds an intermediate above the memory cap."""


@dataclass
class Network:
    """Tensors (name -> labels), label sizes, convolution edges and output labels.

    Parameters
    ----------
    tensors : dict name -> tuple of labels, e.g. ``{"U": ("n", "s", "y", "x")}``
    sizes : dict label -> int
    conv : list of (input label, filter label), e.g. ``[("y", "h"), ("x", "w")]``
    output : tuple of labels of the result, in order
    """

    tensors: dict
    sizes: dict
    conv: list = field(default_factory=list)
    output: tuple = ()
    bytes_per_element: int = 4

    def __post_init__(self):
        for label, size in self.sizes.items():
            check_int(size, f"sizes[{label!r}]", minimum=1)
        check_int(self.bytes_per_element, "bytes_per_element", minimum=1)
        names = list(self.tensors)
        for name, labels in self.tensors.items():
            for lab in labels:
                if lab not in self.sizes:
                    raise ValueError(f"label {lab!r} of tensor {name!r} has no size")
        for a, b in self.conv:
            if not any(a in ls for ls in self.tensors.values()) or \
                    not any(b in ls for ls in self.tensors.values()):
                raise ValueError(f"convolution edge {(a, b)} names a label no tensor has")
        if len(names) > 16:
            raise ValueError(f"{len(names)} tensors: the exact search is for small networks "
                             "(<= 16)")

    # ---- labels of a subnetwork (a bitmask over the tensors)
    def _names(self, mask: int):
        return [n for i, n in enumerate(self.tensors) if mask >> i & 1]

    def labels(self, mask: int) -> tuple:
        """Labels of the tensor that a subnetwork evaluates to."""
        inside = self._names(mask)
        outside = [n for n in self.tensors if n not in inside]
        have = set().union(*(self.tensors[n] for n in inside))
        need = set(self.output).union(*(self.tensors[n] for n in outside))
        done_filters = {b for a, b in self.conv if a in have and b in have}
        pending_inputs = {a for a, b in self.conv if a in have and b not in have}
        keep = {lab for lab in have if lab in need and lab not in done_filters}
        keep |= {lab for lab in have if lab in pending_inputs}  # still to be convolved
        for a, b in self.conv:  # a filter label waits for its input
            if b in have and a not in have:
                keep.add(b)
        order = list(dict.fromkeys(lab for n in inside for lab in self.tensors[n]))
        return tuple(lab for lab in order if lab in keep)

    def elements(self, labels) -> int:
        n = 1
        for lab in labels:
            n *= self.sizes[lab]
        return n

    def pair_cost(self, a_mask: int, b_mask: int) -> int:
        """FLOPs of combining two subnetworks (eqs. 11-13; x2 when a label is summed)."""
        la, lb = self.labels(a_mask), self.labels(b_mask)
        touched = set(la) | set(lb)
        out = set(self.labels(a_mask | b_mask))
        summed = touched - out
        return self.elements(touched) * (2 if summed else 1)


@dataclass
class Plan:
    cost: int           # FLOPs of the whole sequence
    peak_bytes: int     # largest intermediate (inputs excluded)
    sequence: object    # nested pairs of tensor names, e.g. (("U", "S"), "T")


def _tree(net: Network, split: dict, mask: int):
    if mask & (mask - 1) == 0:
        return net._names(mask)[0]
    a = split[mask]
    return (_tree(net, split, a), _tree(net, split, mask ^ a))


def gnetcon(net: Network, memory_cap: int | None = None) -> Plan:
    """The cheapest pairwise sequence whose intermediates all fit ``memory_cap`` bytes."""
    n = len(net.tensors)
    if n < 2:
        raise ValueError("a network needs at least two tensors")
    if memory_cap is not None:
        check_int(memory_cap, "memory_cap", minimum=1)
    full = (1 << n) - 1
    best = {1 << i: (0, 0) for i in range(n)}   # mask -> (cost, peak bytes)
    split = {}
    for size in range(2, n + 1):
        for combo in itertools.combinations(range(n), size):
            mask = sum(1 << i for i in combo)
            nbytes = net.elements(net.labels(mask)) * net.bytes_per_element
            if mask != full and memory_cap is not None and nbytes > memory_cap:
                continue
            sub = (mask - 1) & mask
            while sub:
                other = mask ^ sub
                if sub < other and sub in best and other in best:
                    cost = best[sub][0] + best[other][0] + net.pair_cost(sub, other)
                    if mask not in best or cost < best[mask][0]:
                        peak = max(best[sub][1], best[other][1], nbytes if mask != full else 0)
                        best[mask] = (cost, peak)
                        split[mask] = sub
                sub = (sub - 1) & mask
    if full not in best:
        raise NoFeasibleSequence(f"no evaluation order keeps every intermediate under the "
                                 f"memory cap of {memory_cap} bytes")
    return Plan(best[full][0], best[full][1], _tree(net, split, full))


def intermediate_bytes(net: Network, plan: Plan) -> list[int]:
    """Bytes of every tensor a plan builds, in evaluation order (the last is the output)."""
    index = {name: i for i, name in enumerate(net.tensors)}
    sizes = []

    def rec(node) -> int:
        if isinstance(node, str):
            return 1 << index[node]
        mask = rec(node[0]) | rec(node[1])
        sizes.append(net.elements(net.labels(mask)) * net.bytes_per_element)
        return mask

    rec(plan.sequence)
    return sizes


def brute_force_cost(net: Network, memory_cap: int | None = None) -> int:
    """Minimum cost over every pairwise order, by exhaustive recursion (tests only)."""
    def rec(masks):
        if len(masks) == 1:
            return 0
        best = None
        for i, j in itertools.combinations(range(len(masks)), 2):
            merged = masks[i] | masks[j]
            if memory_cap is not None and len(masks) > 2 and \
                    net.elements(net.labels(merged)) * net.bytes_per_element > memory_cap:
                continue
            rest = [m for k, m in enumerate(masks) if k not in (i, j)] + [merged]
            sub = rec(rest)
            if sub is not None:
                c = net.pair_cost(masks[i], masks[j]) + sub
                best = c if best is None else min(best, c)
        return best

    cost = rec([1 << i for i in range(len(net.tensors))])
    if cost is None:
        raise NoFeasibleSequence(f"no order fits the memory cap of {memory_cap} bytes")
    return cost


# --------------------------------------------------------------------------- executor

_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
GEMM_BACKENDS = ("cublas", "igemm")


def _step_labels(net: Network, la, lb, out_set):
    """Output label order of one step: the operand holding more labels keeps its order,
    the other's new labels take the place of the first label summed away (so that a
    chain of steps needs no transposes: (n,s,y,x) . (s,r) -> (n,r,y,x))."""
    if len(lb) > len(la):
        la, lb = lb, la
    new = [lab for lab in lb if lab in out_set and lab not in la]
    order, placed = [], False
    for lab in la:
        if lab in out_set:
            order.append(lab)
        elif not placed:
            order += new
            placed = True
    if not placed:
        order += new
    return tuple(order)


def _einsum(xp, a, la, b, lb, out):
    letters = {lab: _LETTERS[i] for i, lab in enumerate(dict.fromkeys(la + lb))}
    spec = ("".join(letters[x] for x in la) + "," + "".join(letters[x] for x in lb) + "->"
            + "".join(letters[x] for x in out))
    return xp.einsum(spec, a, b)


def _prod(shape) -> int:
    n = 1
    for v in shape:
        n *= int(v)
    return n


def _as_1x1_conv(a, la, b, lb, out):
    """``(operand, matrix (F, C))`` when the step is a 1x1 convolution of ``a`` by ``b``:
    ``b`` has one summed label c and one new label f, and ``out`` is ``la`` with c
    replaced by f; else None."""
    if len(lb) != 2 or len(out) != len(la):
        return None
    summed = [lab for lab in lb if lab not in out]
    if len(summed) != 1 or summed[0] not in la:
        return None
    c = summed[0]
    f = lb[0] if lb[1] == c else lb[1]
    if tuple(f if lab == c else lab for lab in la) != tuple(out):
        return None
    pos = la.index(c)
    a4 = a.reshape(_prod(a.shape[:pos]), a.shape[pos], _prod(a.shape[pos + 1:]), 1)
    w = b if lb == (f, c) else b.T
    return a4, w


def _as_depthwise(net, a, la, b, lb, out, edges):
    """``(a as (B, G, Y, X), filter (G, 1, kh, kw), padding)`` when the step convolves
    ``a`` channel by channel over the labels it shares with the filter, along the one or
    two labels that follow them (odd filter sizes); else None."""
    shared = [lab for lab in lb if lab in la]
    filt_of = dict(edges)
    if set(lb) != set(shared) | set(filt_of.values()) or tuple(out) != tuple(la) or not shared:
        return None
    if any(net.sizes[f] % 2 == 0 for f in filt_of.values()):
        return None
    pos = la.index(shared[0])
    rest = la[pos + len(shared):]
    if tuple(la[pos:pos + len(shared)]) != tuple(shared) or not rest:
        return None
    if any(i not in rest[:2] for i in filt_of) or (len(rest) > 2 and rest[1] in filt_of):
        return None  # a convolved axis must stay an axis of its own in the 4-D view
    g = _prod(a.shape[pos:pos + len(shared)])
    a4 = a.reshape(_prod(a.shape[:pos]), g, net.sizes[rest[0]],
                   _prod(a.shape[pos + 1 + len(shared):]))
    taps = [filt_of[lab] for lab in rest[:2] if lab in filt_of]
    kh = net.sizes[filt_of[rest[0]]] if rest[0] in filt_of else 1
    kw = net.sizes[filt_of[rest[1]]] if len(rest) > 1 and rest[1] in filt_of else 1
    w = b.transpose([lb.index(lab) for lab in shared + taps]).reshape(g, 1, kh, kw)
    return a4, w, ((kh - 1) // 2, (kw - 1) // 2)


def _windowed(net, xp, a, la, edges):
    """``a`` with a new axis of filter taps per convolution edge ("same" padding)."""
    for inp, filt in edges:
        k = net.sizes[filt]
        axis = la.index(inp)
        pad = [(0, 0)] * a.ndim
        pad[axis] = ((k - 1) // 2, k // 2)
        ap = xp.ascontiguousarray(xp.pad(a, pad))
        a = xp.lib.stride_tricks.as_strided(ap, shape=a.shape + (k,),
                                            strides=ap.strides + (ap.strides[axis],))
        la = la + (filt,)
    return a, la


def _combine(net: Network, a, la, b, lb, out, gemm: str):
    """Evaluate one pair on the best call we have: our depthwise kernel for convolution
    edges, a GEMM (cuBLAS through einsum, or our implicit-GEMM 1x1 convolution, which a
    CUDA graph can capture) for contractions, broadcasting for outer products."""
    xp = backend.array_module(a, b)
    edges = [(i, f) for i, f in net.conv if (i in la and f in lb) or (i in lb and f in la)]
    if edges and any(i in lb for i, _ in edges):
        a, la, b, lb = b, lb, a, la
    on_gpu = xp is not np
    if edges:
        dw = _as_depthwise(net, a, la, b, lb, out, edges) if on_gpu else None
        if dw is not None:
            a4, w, padding = dw
            w = xp.ascontiguousarray(w)
            y = ops.conv2d(xp.ascontiguousarray(a4), w, padding=padding, groups=w.shape[0])
            return y.reshape(a.shape)
        a, la = _windowed(net, xp, a, la, edges)
        return _einsum(xp, a, la, b, lb, out)
    if gemm == "igemm" and on_gpu:
        for x, lx, m, lm in ((a, la, b, lb), (b, lb, a, la)):
            conv = _as_1x1_conv(x, lx, m, lm, out)
            if conv is not None:
                x4, w = conv
                y = ops.conv2d(xp.ascontiguousarray(x4), xp.ascontiguousarray(w)[:, :, None, None],
                               algorithm="igemm")
                return y.reshape(tuple(net.sizes[lab] for lab in out))
    return _einsum(xp, a, la, b, lb, out)


def execute(net: Network, plan: Plan, arrays: dict, *, gemm: str = "cublas"):
    """Evaluate the network with ``arrays`` (name -> array) in the plan's order.

    ``gemm`` picks the contraction call on the GPU: ``"cublas"`` (einsum, which
    CuPy lowers to cuBLAS) or ``"igemm"`` (our implicit-GEMM kernel as a 1x1
    convolution, capturable in a CUDA graph, which CuPy's cuBLAS is not).
    """
    if gemm not in GEMM_BACKENDS:
        raise ValueError(f"gemm must be one of {GEMM_BACKENDS}, got {gemm!r}")
    index = {name: i for i, name in enumerate(net.tensors)}

    def rec(node):
        if isinstance(node, str):
            return arrays[node], tuple(net.tensors[node]), 1 << index[node]
        (a, la, ma), (b, lb, mb) = rec(node[0]), rec(node[1])
        out = _step_labels(net, la, lb, set(net.labels(ma | mb)))
        return _combine(net, a, la, b, lb, out, gemm), out, ma | mb

    result, labels, _ = rec(plan.sequence)
    return result.transpose([labels.index(lab) for lab in net.output])


def cp_conv_network(n: int, s: int, t: int, y: int, x: int, kh: int, kw: int, r: int) -> Network:
    """The CP-decomposed convolution layer of the paper's eq. 7 as a generalized network
    (every size a positive int, checked by :class:`Network`)."""
    return Network(
        tensors={"U": ("n", "s", "y", "x"), "S": ("s", "r"), "H": ("h", "r"), "W": ("w", "r"),
                 "T": ("t", "r")},
        sizes={"n": n, "s": s, "y": y, "x": x, "h": kh, "w": kw, "t": t, "r": r},
        conv=[("y", "h"), ("x", "w")], output=("n", "t", "y", "x"))
