"""The pruned convolution layer: ``SparseConv2d`` holds its kernel in block-sparse form
(:mod:`tensorconv.blocksparse`: dense blocks and a CSR remainder); a pruned model's
convolutions turn into it through :func:`tensorconv.compress.sparse.sparsify`.

It is an inference layer: a pruned model trains as a dense model under masks
(:mod:`training.masked`) and is converted afterwards.  Its forward computes the convolution
of the kernel the blocks and the remainder hold, exactly (the engine runs the sparse kernels).
"""

from __future__ import annotations

import numpy as np

from tensorconv.autograd import Tensor
from tensorconv.autograd import functions as F
from tensorconv.blocksparse import BlockSparse
from tensorconv.checks import pair
from tensorconv.nn.module import Module, Parameter


class SparseConv2d(Module):
    """A pruned K x C x R x S convolution whose weights are ``packed``.

    Parameters
    ----------
    packed : BlockSparse
    stride, padding : int or (int, int)
    bias : array (K,), optional
    variants : sequence of BlockSparse, optional
        Other layouts of the same kernel (Algorithm 1 at other thresholds): the engine
        times them all and runs the fastest.

    Attributes
    ----------
    variants : tuple of BlockSparse
        ``packed`` first, then the others.
    """

    def __init__(self, packed: BlockSparse, stride=1, padding=0, bias=None, variants=()):
        super().__init__()
        if not isinstance(packed, BlockSparse):
            raise TypeError(f"packed must be a BlockSparse, got {type(packed).__name__}")
        matrix = packed.to_matrix()
        for i, v in enumerate(variants):
            if not isinstance(v, BlockSparse):
                raise TypeError(f"variants[{i}] must be a BlockSparse, got {type(v).__name__}")
            if v.shape != packed.shape or not np.array_equal(v.to_matrix(), matrix):
                raise ValueError(f"variants[{i}] holds another kernel than packed (each "
                                 f"variant is a layout of the same weights)")
        self.variants = (packed, *variants)
        self.stride, self.padding = pair(stride, "stride", minimum=1), pair(padding, "padding",
                                                                                minimum=0)
        k, c, r, s = packed.shape
        self.packed = packed
        self.in_channels, self.out_channels, self.kernel_size = c, k, (r, s)
        self.groups, self.dilation = 1, (1, 1)
        if bias is not None:
            bias = np.asarray(bias, np.float32)
            if bias.shape != (k,):
                raise ValueError(f"bias must have shape ({k},), got {bias.shape}")
            self.bias = Parameter(bias)
        else:
            self.bias = None
        self._kernel = {}    # array module name -> the dense kernel the blocks hold
        self.macs = 0

    def kernel(self, xp):
        """The dense (K, C, R, S) kernel ``packed`` holds, on ``xp`` (made once)."""
        if xp.__name__ not in self._kernel:
            self._kernel[xp.__name__] = xp.asarray(self.packed.to_kernel())
        return self._kernel[xp.__name__]

    def forward(self, x):
        w = Tensor(self.kernel(x.xp))
        y = F.conv2d(x, w, self.bias, self.stride, self.padding)
        self.macs = int(self.packed.nonzeros() * y.shape[0] * y.shape[2] * y.shape[3])
        return y

    def num_macs(self) -> int:
        return self.macs

    def num_parameters(self) -> int:
        """The nonzero weights stored, and the bias."""
        return self.packed.nonzeros() + (self.bias.size if self.bias is not None else 0)

    def extra_repr(self) -> str:
        lay = self.packed.layout
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, padding={self.padding}, blocks={len(lay.blocks)}, "
                f"nonzeros={self.packed.nonzeros()}")
