"""tensorconv: fast structured CNN convolutions on NVIDIA GPUs, framework-free.

The public functional API lives in :mod:`tensorconv.ops`; NumPy ground truth in
:mod:`tensorconv.reference`; kernel loading in :mod:`tensorconv.cuda`.
"""

__version__ = "0.1.0"
