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

from tensorconv import backend


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
            raise ValueError(f"{len(names)} tensors: the exact search is for small networks (<= 16)")

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


def _combine(net: Network, a, la, b, lb, out_labels):
    """Evaluate one pair: convolve pending conv edges, then einsum the rest."""
    xp = backend.array_module(a, b)
    for inp, filt in net.conv:
        if inp in la and filt in lb or inp in lb and filt in la:
            if inp in lb:
                a, la, b, lb = b, lb, a, la
            # windows of the input along `inp`: a new axis over the filter taps (same padding)
            k = net.sizes[filt]
            axis = la.index(inp)
            pad = [(0, 0)] * a.ndim
            pad[axis] = ((k - 1) // 2, k // 2)
            ap = xp.ascontiguousarray(xp.pad(a, pad))
            shape = a.shape + (k,)
            strides = ap.strides + (ap.strides[axis],)
            a = xp.lib.stride_tricks.as_strided(ap, shape=shape, strides=strides)
            la = la + (filt,)
    letters = {lab: _LETTERS[i] for i, lab in enumerate(dict.fromkeys(la + lb))}
    spec = "".join(letters[x] for x in la) + "," + "".join(letters[x] for x in lb) + "->" + \
        "".join(letters[x] for x in out_labels)
    return xp.einsum(spec, a, b)


def execute(net: Network, plan: Plan, arrays: dict):
    """Evaluate the network with ``arrays`` (name -> array) in the plan's order."""
    index = {name: i for i, name in enumerate(net.tensors)}

    def rec(node):
        if isinstance(node, str):
            return arrays[node], net.tensors[node], 1 << index[node]
        (a, la, ma), (b, lb, mb) = rec(node[0]), rec(node[1])
        out = net.labels(ma | mb)
        return _combine(net, a, tuple(la), b, tuple(lb), out), out, ma | mb

    result, labels, _ = rec(plan.sequence)
    order = [labels.index(lab) for lab in net.output]
    return result.transpose(order)


def cp_conv_network(n: int, s: int, t: int, y: int, x: int, kh: int, kw: int, r: int) -> Network:
    """The CP-decomposed convolution layer of the paper's eq. 7 as a generalized network."""
    return Network(
        tensors={"U": ("n", "s", "y", "x"), "S": ("s", "r"), "H": ("h", "r"), "W": ("w", "r"),
                 "T": ("t", "r")},
        sizes={"n": n, "s": s, "y": y, "x": x, "h": kh, "w": kw, "t": t, "r": r},
        conv=[("y", "h"), ("x", "w")], output=("n", "t", "y", "x"))
