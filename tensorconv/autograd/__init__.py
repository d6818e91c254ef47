"""A small define-by-run autograd on NumPy (CPU) and CuPy (GPU) arrays."""

from tensorconv.autograd import functions
from tensorconv.autograd.function import Function, is_grad_enabled, no_grad
from tensorconv.autograd.gradcheck import gradcheck
from tensorconv.autograd.tensor import Tensor, as_tensor

__all__ = ["Function", "Tensor", "as_tensor", "functions", "gradcheck", "is_grad_enabled",
           "no_grad"]
