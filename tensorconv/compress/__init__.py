"""Model transforms: Tucker and CP formats of a model's convolutions, non-structured
pruning masks, and TDC's hardware-aware rank selection (Algorithm 1) with the table T it
chooses from.

* :mod:`~tensorconv.compress.tucker` — ``tucker_candidates``, ``tuckerize``, ``uniform_ranks``;
* :mod:`~tensorconv.compress.cp` — ``cpize``;
* :mod:`~tensorconv.compress.prune` — pruning masks (magnitude top-l), ``apply_masks``,
  ``save_masks``/``load_masks``;
* :mod:`~tensorconv.compress.reprune` — performance-aware re-pruning (knapsack, §5 of
  Rumi et al.; removal by magnitude alone as its ablation);
* :mod:`~tensorconv.compress.sparse` — ``sparsify`` (pruned convolutions as
  ``SparseConv2d``: Algorithm 1's dense blocks and a CSR remainder), ``reprune_layers``,
  ``reprune_masks``;
* :mod:`~tensorconv.compress.ranks` — ``LayerSpec``, ``layer_specs``, ``select_ranks``;
* :mod:`~tensorconv.compress.performance` — ``layer_latency``, ``performance_tables``
  (table T, measured through the inference engine on this GPU).
"""

from tensorconv.compress.cp import cpize
from tensorconv.compress.ranks import (
           LayerSpec,
           RankPlan,
           candidate_ranks,
           layer_specs,
           select_ranks,
)
from tensorconv.compress.tucker import tucker_candidates, tuckerize, uniform_ranks

__all__ = ["LayerSpec", "RankPlan", "candidate_ranks", "cpize", "layer_specs", "select_ranks",
           "tucker_candidates", "tuckerize", "uniform_ranks"]
