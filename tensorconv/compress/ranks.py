"""Hardware-aware Tucker-rank selection (TDC, section 6 and Algorithm 1).

The table T it chooses from is measured by :mod:`tensorconv.compress.performance`.

For each convolution a performance table T over ranks (D1, D2), in steps of
32 (the paper's choice; smaller nets want a smaller step), holds the measured
latency of the Tucker-format layer (1x1 -> core -> 1x1).  Under a FLOPs budget
B (the fraction of the model's convolution MACs to remove) every layer takes
the fastest ranks whose MACs fit its share of the budget, larger ranks winning
ties; measured latencies are never exactly equal, so those within a small
tolerance of the fastest count as tied.  A layer whose best Tucker form is not
at least ``theta`` (15%) faster than the dense layer stays dense; the reduction
it would have contributed is redistributed over the remaining layers, which
then must cut more.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tensorconv.autograd import Tensor, no_grad
from tensorconv.checks import pair
from tensorconv.compress.tucker import tucker_candidates


@dataclass(frozen=True)
class LayerSpec:
    """One convolution's sizes: C -> N, R x S filter, H x W input, OH x OW output."""

    name: str
    c: int
    n: int
    r: int
    s: int
    h: int
    w: int
    oh: int
    ow: int
    stride: int = 1
    padding: int = 0

    @property
    def dense_macs(self) -> int:
        return self.oh * self.ow * self.r * self.s * self.c * self.n

    def tucker_macs(self, d1: int, d2: int) -> int:
        """MACs of 1x1 (C -> D1, at the input size), core, 1x1 (D2 -> N): TDC's FLOPs count."""
        first = self.h * self.w * self.c * d1
        return first + self.oh * self.ow * d2 * (self.r * self.s * d1 + self.n)


def candidate_ranks(spec: LayerSpec, step: int = 32) -> list[tuple[int, int]]:
    """(D1, D2) on a grid of ``step`` below the full ranks (C, N)."""
    d1s = [d for d in range(step, spec.c, step)] or [max(1, spec.c // 2)]
    d2s = [d for d in range(step, spec.n, step)] or [max(1, spec.n // 2)]
    return [(a, b) for a in d1s for b in d2s]


@dataclass
class RankPlan:
    ranks: dict = field(default_factory=dict)        # name -> (D1, D2); absent: stays dense
    dense: list = field(default_factory=list)        # names kept dense (theta rule or no fit)
    reduction: float = 0.0                           # achieved fraction of the MACs removed
    latency: float = 0.0                             # sum of the chosen per-layer latencies
    dense_latency: float = 0.0


def select_ranks(layers: list[LayerSpec], budget: float, table: dict, dense_time: dict, *,
                 theta: float = 0.15, tie: float = 0.02, max_rounds: int = 50) -> RankPlan:
    """Algorithm 1's rank choice.

    Every layer still free to move must cut the same share of its MACs; that
    share is what the budget needs once the fixed layers are counted.  A layer
    is fixed when it stays dense (its fastest fitting Tucker form is not
    ``theta`` faster, the paper's rule) or when no rank pair of its table
    reaches the share (it then takes its largest cut, unless that is not
    ``theta`` faster either).  Rounds repeat until nothing new is fixed.

    Parameters
    ----------
    layers : list of LayerSpec
    budget : float
        Fraction (0..1) of the layers' total MACs to remove.
    table : dict name -> {(D1, D2): latency}
        The performance table T of each layer (any time unit, the same everywhere).
    dense_time : dict name -> latency of the dense layer
    theta : float
        Keep a layer dense unless its Tucker form is at least this much faster.
    tie : float
        Latencies within this fraction of the fastest fitting one are a tie (the
        paper's staircase of equal times, seen through timing noise); the largest
        ranks among them win.

    Returns
    -------
    RankPlan; raises ``ValueError`` naming the reason when the budget cannot be met.
    """
    if not 0 < budget < 1:
        raise ValueError(f"budget must be in (0, 1), got {budget}")
    if not 0 <= tie < 1:
        raise ValueError(f"tie must be in [0, 1), got {tie}")
    for spec in layers:
        if spec.name not in table or not table[spec.name]:
            raise ValueError(f"no performance table for layer {spec.name!r}")
        if spec.name not in dense_time:
            raise ValueError(f"no dense latency for layer {spec.name!r}")
    total = sum(s.dense_macs for s in layers)
    fixed: dict = {}          # name -> (D1, D2) at its largest cut, or None: dense
    ranks: dict = {}
    for _ in range(max_rounds):
        free = [s for s in layers if s.name not in fixed]
        saved = sum(s.dense_macs - s.tucker_macs(*r) for s in layers
                    if (r := fixed.get(s.name)) is not None)
        needed = budget * total - saved
        if not free:
            if needed > 0:
                kept = sorted(n for n, r in fixed.items() if r is None)
                raise ValueError(f"budget {budget:.0%} cannot be met: the layers that help "
                                 f"cut {saved / total:.0%} at most; {len(kept)} stay dense "
                                 f"(theta = {theta:.0%} rule)")
            break
        share = max(0.0, needed / sum(s.dense_macs for s in free))
        ranks, changed = {}, False
        for s in free:
            fits = {r: t for r, t in table[s.name].items()
                    if s.tucker_macs(*r) <= (1 - share) * s.dense_macs}
            if fits:
                best = min(fits.values())
                # a tie may not cost the layer its theta margin (then it would stay dense)
                slow = (1 - theta) * dense_time[s.name]
                pick = max((r for r, t in fits.items()
                            if t <= (1 + tie) * best and (t == best or t < slow)),
                           key=lambda r: (r[0] * r[1], -fits[r]))
            else:  # cannot reach the share: its largest cut, fixed for the next rounds
                pick = min(table[s.name], key=lambda r: s.tucker_macs(*r))
            if table[s.name][pick] >= (1 - theta) * dense_time[s.name]:
                fixed[s.name], changed = None, True
            elif not fits:
                fixed[s.name], changed = pick, True
            else:
                ranks[s.name] = pick
        if not changed:
            break
    else:
        raise ValueError("rank selection did not settle")
    ranks.update({n: r for n, r in fixed.items() if r is not None})
    dense = sorted(n for n, r in fixed.items() if r is None)
    macs = sum(s.tucker_macs(*ranks[s.name]) if s.name in ranks else s.dense_macs for s in layers)
    return RankPlan(ranks=ranks, dense=dense, reduction=1 - macs / total,
                    latency=sum(table[n][r] for n, r in ranks.items())
                    + sum(dense_time[n] for n in dense),
                    dense_latency=sum(dense_time[s.name] for s in layers))


def layer_specs(model, input_shape, min_channels: int = 16) -> list[LayerSpec]:
    """LayerSpecs of a model's Tucker candidates, sizes read from one forward pass."""
    convs = tucker_candidates(model, min_channels)
    seen = {}

    def spy(name, conv):
        forward = conv.forward

        def wrapped(x):
            y = forward(x)
            seen[name] = (x.shape, y.shape)
            return y
        return wrapped

    for n, c in convs.items():
        c.forward = spy(n, c)
    was_training = model.training
    model.eval()
    try:
        with no_grad():
            model(Tensor(model.xp.zeros(input_shape, dtype=np.float32)))
    finally:
        for c in convs.values():
            c.__dict__.pop("forward", None)  # back to the class's method
        model.train(was_training)
    specs = []
    for n, c in convs.items():
        (_, ci, h, w), (_, co, oh, ow) = seen[n]
        specs.append(LayerSpec(n, ci, co, *c.kernel_size, h, w, oh, ow,
                               pair(c.stride, "stride", minimum=1)[0],
                               pair(c.padding, "padding", minimum=0)[0]))
    return specs
